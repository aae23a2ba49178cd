"""The soak driver of bench/soak.sh: for DURATION seconds, against a server at PORT (and one whose
chat template is hostile at HOSTILE_PORT), from separate loopback addresses:
  - STREAMS clients (127.0.0.1) each streaming completions back to back; a well-formed request
    that does not end in [DONE] with status 200 is a failure;
  - SLOW slowloris connections (127.0.0.3) sending a header byte every second, reopened when the
    server closes them;
  - a chat client (127.0.0.4) asking the hostile server: every answer must be an error (a 4xx or
    5xx naming the template) that comes within the render's budget, never a hang;
  - /health on both servers every half second (127.0.0.2);
  - the servers' resident memory every 5 s (/proc/PID/status).
Prints one JSON object with the counts, the worst latencies and the memory samples."""
import json
import socket
import sys
import threading
import time

port, hostile_port, pid, hostile_pid, duration, n_streams, n_slow = (int(a) for a in sys.argv[1:8])
stop_at = time.monotonic() + duration
lock = threading.Lock()
stats = {"streams_ok": 0, "streams_failed": 0, "failures": [], "slow_opened": 0, "slow_closed_by_server": 0,
         "hostile_answers": 0, "hostile_bad": [], "hostile_worst_s": 0.0, "health_asked": 0, "health_ok": 0,
         "health_worst_s": 0.0, "rss_kb": [], "hostile_rss_kb": []}


def http(src, dst_port, method, path, body=None, timeout=120):
    """(status, body bytes) of one request on its own connection from address src."""
    s = socket.socket()
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", dst_port))
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    if body is not None:
        data = json.dumps(body).encode()
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    s.sendall(head.encode() + b"\r\n" + (data if body is not None else b""))
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    s.close()
    status = int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/1.1 ") else 0
    return status, out.split(b"\r\n\r\n", 1)[-1]


def note(key, value=1):
    with lock:
        stats[key] += value


def streamer(i):
    while time.monotonic() < stop_at:
        body = {"prompt": f"{i} Once upon a time", "max_tokens": 64, "stream": True, "seed": i}
        try:
            status, out = http("127.0.0.1", port, "POST", "/v1/completions", body)
            good = status == 200 and b"data: [DONE]" in out
        except OSError as e:
            good, status, out = False, 0, str(e).encode()
        note("streams_ok" if good else "streams_failed")
        if not good:
            with lock:
                stats["failures"].append(f"{status}: {out[-200:]!r}")


def slowloris():
    conns = []
    while time.monotonic() < stop_at:
        while len(conns) < n_slow:
            s = socket.socket()
            try:
                s.bind(("127.0.0.3", 0))
                s.connect(("127.0.0.1", port))
                s.sendall(b"GET /health HTTP/1.1\r\n")
                s.setblocking(False)
                conns.append(s)
                note("slow_opened")
            except OSError:
                s.close()
                break
        kept = []
        for s in conns:
            try:
                if s.recv(1) == b"":
                    raise OSError("closed")
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                note("slow_closed_by_server")
                continue
            try:
                s.send(b"X")
                kept.append(s)
            except OSError:
                s.close()
                note("slow_closed_by_server")
        conns = kept
        time.sleep(1)
    for s in conns:
        s.close()


def hostile():
    while time.monotonic() < stop_at:
        t0 = time.monotonic()
        try:
            status, out = http("127.0.0.4", hostile_port, "POST", "/v1/chat/completions",
                               {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
        except OSError as e:
            status, out = 0, str(e).encode()
        dt = time.monotonic() - t0
        with lock:
            stats["hostile_answers"] += 1
            stats["hostile_worst_s"] = max(stats["hostile_worst_s"], dt)
            if not 400 <= status < 600 or b"template" not in out:
                stats["hostile_bad"].append(f"{status}: {out[:200]!r}")


def health():
    while time.monotonic() < stop_at:
        for p in (port, hostile_port):
            t0 = time.monotonic()
            try:
                ok = http("127.0.0.2", p, "GET", "/health", timeout=5)[0] == 200
            except OSError:
                ok = False
            with lock:
                stats["health_asked"] += 1
                stats["health_ok"] += ok
                stats["health_worst_s"] = max(stats["health_worst_s"], time.monotonic() - t0)
        time.sleep(0.5)


def rss(p):
    with open(f"/proc/{p}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def memory():
    while time.monotonic() < stop_at:
        with lock:
            stats["rss_kb"].append(rss(pid))
            stats["hostile_rss_kb"].append(rss(hostile_pid))
        time.sleep(5)


threads = [threading.Thread(target=streamer, args=(i,)) for i in range(n_streams)]
threads += [threading.Thread(target=f) for f in (slowloris, hostile, health, memory)]
for t in threads:
    t.start()
for t in threads:
    t.join()
stats["failures"] = stats["failures"][:10]
stats["hostile_bad"] = stats["hostile_bad"][:10]
print(json.dumps(stats))
