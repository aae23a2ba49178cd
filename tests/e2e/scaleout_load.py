"""Load for tests/e2e/scaleout.sh and bench/scaleout.sh: WORKERS clients, each sending streamed
completions one after another for DURATION seconds through URL (the balancer). Optionally kills
PID with SIGKILL at KILL_AT seconds. Prints one JSON object: every request (start and end in
seconds from the start, HTTP status, whether the stream reached [DONE], generated tokens, its
X-Request-Id) and the kill time. Standard library only."""
import argparse
import http.client
import json
import os
import signal
import threading
import time
import urllib.parse

ap = argparse.ArgumentParser()
ap.add_argument("--url", required=True)
ap.add_argument("--workers", type=int, default=4)
ap.add_argument("--duration", type=float, default=5)
ap.add_argument("--max-tokens", type=int, default=32)
ap.add_argument("--kill-pid", type=int, default=0)
ap.add_argument("--kill-at", type=float, default=0)
ap.add_argument("--tag", default="r")
args = ap.parse_args()
u = urllib.parse.urlparse(args.url)
t0 = time.monotonic()
results, lock = [], threading.Lock()
killed = {}


def one(worker, i):
    rid = "%s-w%d-%d" % (args.tag, worker, i)
    body = json.dumps({"prompt": "Once upon a time, story %d of %d," % (i, worker), "max_tokens": args.max_tokens,
                       "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
    rec = {"rid": rid, "start": time.monotonic() - t0, "status": 0, "done": False, "tokens": 0, "error": ""}
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json", "X-Request-Id": rid})
        r = c.getresponse()
        rec["status"] = r.status
        rec["echoed"] = r.getheader("X-Request-Id") == rid
        for line in r:
            line = line.strip()
            if line == b"data: [DONE]":
                rec["done"] = True
            elif line.startswith(b"data: {"):
                ev = json.loads(line[6:])
                if ev.get("usage"):
                    rec["tokens"] = ev["usage"]["completion_tokens"]
        c.close()
    except Exception as e:  # a connection cut mid-stream, a timeout: the request failed
        rec["error"] = type(e).__name__ + ": " + str(e)[:100]
    rec["end"] = time.monotonic() - t0
    return rec


def worker(w):
    i = 0
    while time.monotonic() - t0 < args.duration:
        rec = one(w, i)
        with lock:
            results.append(rec)
        i += 1


def killer():
    time.sleep(args.kill_at)
    os.kill(args.kill_pid, signal.SIGKILL)
    killed["at"] = time.monotonic() - t0


threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.workers)]
if args.kill_pid:
    threads.append(threading.Thread(target=killer))
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"wall": time.monotonic() - t0, "kill_at": killed.get("at"), "requests": results}))
