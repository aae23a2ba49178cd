"""Slowloris against `nucleus serve` on loopback (tests/e2e/hardening.sh): N connections from
127.0.0.1 send a request line and then one header byte every half second, while another client
(from 127.0.0.2) asks GET /health every half second. Prints one JSON line: how many slow
connections the server held (open at 80% of the deadline), how many of them it closed within the
header deadline plus 3 s, and
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
t_start = time.monotonic()  # the held connections' deadlines run from their accept, after this
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
t_end = t_start + deadline + 3
open_at_80 = None  # connections still open at 80% of the deadline: those the server holds
while time.monotonic() < t_end:
    if open_at_80 is None and time.monotonic() > t_start + 0.8 * deadline:
        open_at_80 = [c for c in slow if c["closed"] is None]
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
# the others were refused (the per-address limit): closed as soon as accepted
held = open_at_80 or []
print(json.dumps({"accepted": len(held), "closed_in_time": sum(c["closed"] is not None for c in held),
                  "health_asked": asked, "health_ok": answered}))
