#!/usr/bin/env bash
# What a client must not be able to do to the server (issue 17), end to end with curl and
# sanitized servers (build/san/nucleus) on loopback:
# - a beam search whose client leaves ends at its next step: the request after it is answered at
#   once, not after the search (which would run for minutes); SIGTERM during a search exits
#   within the 5 s the server promises, with no leak of the queued job;
# - slowloris (tests/e2e/slowloris.py): 300 connections from one address sending a header byte
#   every half second; the server keeps its per-address limit, closes the slow ones at the header
#   deadline, and /health answers another address throughout;
# - two Content-Length headers (request smuggling) are refused with 400, and so is an escaped NUL
#   in a message, which would otherwise cut its text short;
# - a POST whose Content-Type is not application/json (what a cross-site form sends) gets 415;
# - a Host the server does not answer to (DNS rebinding) gets 403, by default on loopback and with
#   --allowed-hosts.
# Every server exits 0 on SIGTERM with no sanitizer report. Ends with "hardening: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
. tests/lib/checks.sh
finish() { echo "hardening: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

. tests/lib/server_script.sh
stories=$SHARED/models/stories260K/stories260K.gguf
smol=$(synth_model smollm2-135m-f16-l2 --shape smollm2-135m --layers 2 --type f16) || { bad "synth-gguf smollm2"; finish; }

# post URL BODY [CURL FLAGS...]: the status code
post() {
    local url=$1 body=$2; shift 2
    curl -s -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' -d "$body" "$@" "$url"
}
# A search of 8 beams over 2000 tokens of a 135M-shaped model: minutes, unless cancelled.
long_beams='{"prompt": "Once upon a time", "max_tokens": 2000, "use_beam_search": true, "best_of": 8, "ignore_eos": true}'

# ---- beam search: a client that leaves, and SIGTERM ----
if start_server beam -m "$smol" --parallel 8 -c 2048 -t 1; then
    post "$url_beam/v1/completions" "$long_beams" -m 2 >/dev/null
    t0=$(date +%s.%N)
    code=$(post "$url_beam/v1/completions" '{"prompt": "Once", "max_tokens": 2}' -m 60)
    t1=$(date +%s.%N)
    expect_eq "the request after a search whose client left" "$code" 200
    # (the sanitized build's first steps take a few seconds; the search itself would take minutes)
    if awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 15) }'; then ok
    else bad "the request after a cancelled search waited $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') s"; fi

    # SIGTERM with a search running and a request queued behind it
    post "$url_beam/v1/completions" "$long_beams" -m 60 >/dev/null &
    sleep 1
    post "$url_beam/v1/completions" '{"prompt": "Once", "max_tokens": 2}' -m 60 >/dev/null &
    sleep 1
    t0=$(date +%s.%N)
    kill -TERM "$pid_beam"
    for _ in $(seq 1 300); do kill -0 "$pid_beam" 2>/dev/null || break; sleep 0.1; done
    t1=$(date +%s.%N)
    # 5 s of drain, then the step in flight and the sanitized build's teardown: 0.55 s on a 2-core
    # Zen 3 VM (the search alone would take minutes)
    if awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 6.5) }'; then ok
    else bad "SIGTERM during a beam search: exit after $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') s (promised 5 of drain)"; fi
    stop_server beam
    wait
fi

# ---- slowloris ----
if start_server slow -m "$stories" --parallel 1 --timeout-headers 6 --max-conn-per-ip 40; then
    res=$(/usr/bin/python3 tests/e2e/slowloris.py "${url_slow##*:}" 300 6)
    field() { /usr/bin/python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$res" "$1"; }
    expect_eq "slowloris: connections held from one address ($res)" "$(field accepted)" 40
    expect_eq "slowloris: every slow connection closed at the header deadline" "$(field closed_in_time)" 40
    expect_eq "slowloris: /health answered throughout" "$(field health_ok)" "$(field health_asked)"
    stop_server slow
fi

# ---- framing and text ----
if start_server small -m "$stories" --parallel 1; then
    port=${url_small##*:}
    reply=$(/usr/bin/python3 - "$port" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
b = b'{"content": "hi"}'
s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (len(b), len(b)) + b)
out = b""
while chunk := s.recv(4096):
    out += chunk
print(out.decode(errors="replace"))
PY
)
    expect_in "two Content-Length headers: the status" "HTTP/1.1 400" "$reply"
    expect_in "two Content-Length headers: the reason" "the request has 2 Content-Length headers" "$reply"
    code=$(post "$url_small/v1/chat/completions" '{"messages": [{"role": "user", "content": "Hi\u0000 and the rest"}], "max_tokens": 2}')
    expect_eq "an escaped NUL in a message: the status" "$code" 400
    expect_in "an escaped NUL in a message: the reason" "at byte 45: text may not contain NUL characters" "$(cat "$tmp/body")"
    code=$(post "$url_small/v1/chat/completions" '{"messages": [{"role": "user", "content": "a\\u0000 is text"}], "max_tokens": 2}')
    expect_eq "an escaped backslash before u0000 is text" "$code" 200
    # a cross-site form can only send text/plain or form encodings: a JSON body must say it is one
    code=$(curl -s -o "$tmp/body" -w '%{http_code}' -d '{"prompt": "Once", "max_tokens": 2}' "$url_small/v1/completions")
    expect_eq "a form-encoded POST" "$code" 415
    expect_in "a form-encoded POST: the reason" "Content-Type: application/json (got 'application/x-www-form-urlencoded')" "$(cat "$tmp/body")"
    code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: text/plain' -d '{"content": "hi"}' "$url_small/tokenize")
    expect_eq "a text/plain POST" "$code" 415
    code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json; charset=utf-8' -d '{"content": "hi"}' "$url_small/tokenize")
    expect_eq "application/json with a charset" "$code" 200
    # DNS rebinding: a page on another name that resolves to 127.0.0.1
    code=$(post "$url_small/v1/completions" '{"prompt": "Once", "max_tokens": 2}' -H "Host: evil.example:$port")
    expect_eq "a foreign Host on a loopback server" "$code" 403
    expect_in "a foreign Host: the reason" "Host 'evil.example:$port' is not one this server answers to" "$(cat "$tmp/body")"
    expect_eq "Host localhost" "$(post "$url_small/v1/completions" '{"prompt": "Once", "max_tokens": 2}' -H "Host: localhost:$port")" 200
    stop_server small
fi
if start_server named -m "$stories" --parallel 1 --allowed-hosts api.example,other.example; then
    expect_eq "--allowed-hosts: a listed name" "$(post "$url_named/v1/completions" '{"prompt": "Once", "max_tokens": 2}' -H "Host: API.example")" 200
    expect_eq "--allowed-hosts: the address itself is not listed" "$(post "$url_named/v1/completions" '{"prompt": "Once", "max_tokens": 2}')" 403
    expect_eq "--allowed-hosts: /health too" "$(curl -s -o /dev/null -w '%{http_code}' "$url_named/health")" 403
    stop_server named
fi

finish
