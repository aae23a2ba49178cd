"""Slowloris against `nucleus serve` on loopback (tests/e2e/hardening.sh): N connections from
127.0.0.1 send a request line and then one header byte every half second, while another client
(from 127.0.0.2) asks GET /health every half second. Prints one JSON line: how many slow
connections the server accepted, how many it closed within the header deadline plus 3 s, and
how many /health requests were answered 200 out of those made."""
import json
import socket
import sys
import time

port, n_slow, deadline = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])


def health():
    try:
        s = socket.socket()
        s.settimeout(2)
        s.bind(("127.0.0.2", 0))
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        out = b""
        while chunk := s.recv(4096):
            out += chunk
        s.close()
        return out.startswith(b"HTTP/1.1 200")
    except OSError:
        return False


slow = []
for _ in range(n_slow):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /health HTTP/1.1\r\n")
        s.setblocking(False)
        slow.append({"s": s, "t0": time.monotonic(), "closed": None})
    except OSError:
        s.close()
time.sleep(0.3)
asked = answered = 0
t_end = time.monotonic() + deadline + 3
while time.monotonic() < t_end:
    for c in slow:
        if c["closed"] is not None:
            continue
        try:
            if c["s"].recv(1) == b"":
                c["closed"] = time.monotonic() - c["t0"]
                continue
        except BlockingIOError:
            pass
        except OSError:
            c["closed"] = time.monotonic() - c["t0"]
            continue
        try:
            c["s"].send(b"X")
        except OSError:
            c["closed"] = time.monotonic() - c["t0"]
    asked += 1
    answered += health()
    time.sleep(0.5)
# closed long before the deadline: refused (the per-address limit); else held until closed
held = [c for c in slow if c["closed"] is None or c["closed"] > deadline / 2]
print(json.dumps({"accepted": len(held), "closed_in_time": sum(c["closed"] is not None for c in held),
                  "health_asked": asked, "health_ok": answered}))
