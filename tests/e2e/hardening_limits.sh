#!/usr/bin/env bash
# What a hostile client or file could still do after hardening.sh (issue 47), end to end with curl
# and sanitized servers (build/san/nucleus) on loopback:
# - a JSON Schema of 100,000 properties (response_format, json_schema) is refused at once, naming
#   the limit (it took a minute of CPU, then said "out of memory"); one of 4096 is served;
# - a key given twice in a request body is refused, naming it;
# - Host: a name with something after its brackets, two Host headers, none in HTTP/1.1;
# - nucleus_explain's steps are capped (a 113-byte request made a 120 MB response);
# - tool calls under tool_choice auto: a call to an undeclared tool and one whose arguments hold
#   \u0000 stay content, parallel_tool_calls false keeps one call;
# - FIFOs (and other non-regular files) are refused at once wherever a file is opened by path:
#   slot restore, models, a Hugging Face directory's files, prompt caches, chat templates, keys;
# - slot saves stay within --slot-save-max-bytes (507 naming it, nothing left behind);
# - /v1/embeddings: an abandoned request stops within a chunk, --max-queue holds, SIGTERM with
#   abandoned or running embeddings exits within the drain;
# - a chat template rendering at SIGTERM is cancelled at once (503), not after the drain;
# - a chat template rendering whose client leaves ends then, not when its budgets run out;
# - renders, grammar compilations and tokenizing (/infill's prompt too): --parallel at once,
#   --max-queue waiting (503 past them);
# - --request-timeout: a generation past it ends with its text (finish "length"), embeddings and a
#   render get 503 naming it;
# - start-up: an empty NUCLEUS_API_KEY is refused; whether authentication is on is said; listening
#   beyond loopback without a key, and without the Host check, are warned about;
# - make fuzz-long (bench/fuzz.sh) runs every fuzz harness.
# Every server exits 0 on SIGTERM with no sanitizer report. Ends with "hardening_limits: N passed,
# N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
. tests/lib/checks.sh
finish() { echo "hardening_limits: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

. tests/lib/server_script.sh
stories=$SHARED/models/stories260K/stories260K.gguf
tiny_hf=$SHARED/models/tinystories-656k/hf
tiny_k=$(synth_model tiny-k-f16 --shape tiny-k --type f16) || { bad "synth-gguf tiny-k"; finish; }

# post URL BODY [CURL FLAGS...]: the status code; the body in $tmp/body. BODY @FILE reads a file.
post() {
    local url=$1 body=$2; shift 2
    curl -s -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' -d "$body" "$@" "$url"
}
now() { date +%s.%N; }
# faster WHAT SECONDS T0 T1: T1 - T0 below SECONDS
faster() {
    if awk -v a="$3" -v b="$4" -v s="$2" 'BEGIN { exit !(b - a < s) }'; then ok
    else bad "$1: took $(awk -v a="$3" -v b="$4" 'BEGIN { print b - a }') s (at most $2)"; fi
}
# json EXPR: a Python expression over the last response body d
json() { /usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$tmp/body" "$1"; }
# term_and_time NAME: SIGTERM, then the seconds until the process is gone (at most 30)
# arrived URL ENDPOINT N: wait (at most 20 s) until the server has received N requests for ENDPOINT
arrived() {
    for _ in $(seq 1 200); do
        curl -s "$1/metrics" | grep -q "^nucleus_requests_total{endpoint=\"$2\"} $3\$" && return 0
        sleep 0.1
    done
    bad "the server did not receive request $3 for $2"
}
term_and_time() {
    local pid_var="pid_$1"
    local t0; t0=$(now)
    kill -TERM "${!pid_var}"
    for _ in $(seq 1 300); do kill -0 "${!pid_var}" 2>/dev/null || break; sleep 0.05; done
    awk -v a="$t0" -v b="$(now)" 'BEGIN { print b - a }'
}

# ---- requests: schemas, duplicate keys, Host, explain, tool calls -------------------------------
if start_server small -m "$stories" --parallel 8 -t 2; then
    port=${url_small##*:}
    /usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
def schema(n):
    props = {"p%d" % i: {"type": "string"} for i in range(n)}
    return {"type": "object", "properties": props, "required": list(props)}
chat = lambda extra: dict({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}, **extra)
rf = lambda s: {"response_format": {"type": "json_schema", "json_schema": {"name": "big", "schema": s}}}
json.dump(chat(rf(schema(100000))), open(tmp + "/big_chat.json", "w"), separators=(",", ":"))
json.dump({"prompt": "Once", "max_tokens": 1, "json_schema": schema(100000)}, open(tmp + "/big_completion.json", "w"),
          separators=(",", ":"))
json.dump(chat(rf(schema(4096))), open(tmp + "/max_chat.json", "w"), separators=(",", ":"))
PY
    want="'properties' lists 100000 names, more than the supported 4096"
    for kind in chat completion; do
        endpoint=$([ $kind = chat ] && echo chat/completions || echo completions)
        t0=$(now)
        code=$(post "$url_small/v1/$endpoint" @"$tmp/big_$kind.json" -m 60)
        t1=$(now)
        expect_eq "100,000 properties ($kind): the status" "$code" 400
        expect_in "100,000 properties ($kind): the limit" "$want" "$(cat "$tmp/body")"
        faster "100,000 properties ($kind)" 5 "$t0" "$t1" # (a minute, before)
    done
    t0=$(now)
    code=$(post "$url_small/v1/chat/completions" @"$tmp/max_chat.json" -m 60)
    t1=$(now)
    expect_eq "4096 required properties: served" "$code" 200
    faster "4096 required properties" 5 "$t0" "$t1"

    code=$(post "$url_small/v1/completions" '{"prompt": "Once", "max_tokens": 2, "max_tokens": 900}')
    expect_eq "a key given twice: the status" "$code" 400
    expect_in "a key given twice: the reason" "the body has the key 'max_tokens' twice" "$(cat "$tmp/body")"
    code=$(post "$url_small/v1/chat/completions" '{"messages": [{"role": "user", "content": "a", "content": "b"}]}')
    expect_in "a key given twice in a message" "the key 'content' twice (in /messages/0)" "$(cat "$tmp/body")"

    reply=$(/usr/bin/python3 - "$port" <<'PY'
import socket, sys
def ask(head):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.sendall(head + b"Connection: close\r\n\r\n")
    out = b""
    while chunk := s.recv(4096):
        out += chunk
    return out.decode(errors="replace").split("\r\n")[0] + " " + out.decode(errors="replace").split("\r\n\r\n", 1)[-1][:200]
print("bracketed:", ask(b"GET /v1/models HTTP/1.1\r\nHost: [::1]x.evil.com\r\n"))
print("two:", ask(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n"))
print("none 1.1:", ask(b"GET /v1/models HTTP/1.1\r\n"))
print("none 1.0:", ask(b"GET /v1/models HTTP/1.0\r\n"))
PY
)
    expect_in "Host [::1]x.evil.com" "bracketed: HTTP/1.1 403" "$reply"
    expect_in "two Host headers" "two: HTTP/1.1 400" "$reply"
    expect_in "two Host headers: the reason" "the request has 2 Host headers" "$reply"
    expect_in "no Host in HTTP/1.1" "none 1.1: HTTP/1.1 400" "$reply"
    expect_in "no Host in HTTP/1.1: the reason" "the request has no Host header (HTTP/1.1 requires one)" "$reply"
    expect_in "no Host in HTTP/1.0" "none 1.0: HTTP/1.1 200" "$reply"

    # 113 bytes asking for 8 x 510 steps of 200 raw logits each (about 50 MB)
    code=$(post "$url_small/v1/completions" '{"prompt": "Once", "n": 8, "max_tokens": 1000, "ignore_eos": true, "nucleus_explain": {"top_n": 200}}' -m 120)
    expect_eq "nucleus_explain past its limit: the status" "$code" 400
    expect_in "nucleus_explain past its limit: the reason" "the nucleus_explain steps of this request passed the limit of 16 MiB" "$(cat "$tmp/body")"
    size=$(stat -c %s "$tmp/body")
    if [ "$size" -lt 4096 ]; then ok; else bad "nucleus_explain past its limit: a $size-byte response"; fi
    code=$(post "$url_small/v1/completions" '{"prompt": "Once", "max_tokens": 4, "nucleus_explain": true}')
    expect_eq "nucleus_explain within its limit" "$code,$(json 'len(d["choices"][0]["nucleus_explain"]["steps"])')" "200,4"

    # tool_choice auto: a grammar makes the model write what a hostile prompt could make it write
    /usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
           "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
def call(name, city):
    return '<tool_call>\n{"name": "%s", "arguments": {"city": "%s"}}\n</tool_call>' % (name, city)
def body(text, **extra):
    gbnf = "root ::= " + json.dumps(text)
    return dict({"messages": [{"role": "user", "content": "Weather?"}], "tools": [weather], "max_tokens": 200,
                 "grammar": gbnf}, **extra)
json.dump(body(call("rm_rf", "Oslo")), open(tmp + "/undeclared.json", "w"))
json.dump(body(call("get_weather", "Os\\u0000lo")), open(tmp + "/nul.json", "w"))
json.dump(body(call("get_weather", "Oslo") + "\n" + call("get_weather", "Rome"), parallel_tool_calls=False),
          open(tmp + "/serial.json", "w"))
json.dump(body(call("get_weather", "Oslo") + "\n" + call("get_weather", "Rome")), open(tmp + "/parallel.json", "w"))
PY
    code=$(post "$url_small/v1/chat/completions" @"$tmp/undeclared.json")
    expect_eq "a call to an undeclared tool is content" \
        "$code $(json '(d["choices"][0]["message"].get("tool_calls"), "rm_rf" in d["choices"][0]["message"]["content"], d["choices"][0]["finish_reason"])')" \
        "200 (None, True, 'stop')"
    code=$(post "$url_small/v1/chat/completions" @"$tmp/nul.json")
    expect_eq "a call whose arguments hold \\u0000 is content, whole" \
        "$code $(json '(d["choices"][0]["message"].get("tool_calls"), "Os\\u0000lo" in d["choices"][0]["message"]["content"])')" \
        "200 (None, True)"
    code=$(post "$url_small/v1/chat/completions" @"$tmp/serial.json")
    expect_eq "parallel_tool_calls false under auto: one call" \
        "$code $(json '[c["function"]["arguments"] for c in d["choices"][0]["message"]["tool_calls"]]')" \
        "200 ['{\"city\":\"Oslo\"}']"
    code=$(post "$url_small/v1/chat/completions" @"$tmp/parallel.json")
    expect_eq "parallel_tool_calls by default: both calls" "$code $(json 'len(d["choices"][0]["message"]["tool_calls"])')" "200 2"
    stop_server small
fi

# ---- files that are not regular files ------------------------------------------------------------
mkdir -p "$tmp/slots" "$tmp/hf"
mkfifo "$tmp/slots/fifo.bin" "$tmp/model.gguf" "$tmp/cache.bin" "$tmp/template.jinja" "$tmp/key"
mkdir "$tmp/slots/dir.bin"
if start_server fifo -m "$stories" --parallel 1 -t 2 --slot-save-path "$tmp/slots"; then
    for f in fifo.bin dir.bin; do
        t0=$(now)
        code=$(post "$url_fifo/slots/0?action=restore" "{\"filename\": \"$f\"}" -m 30)
        t1=$(now)
        expect_eq "restore $f: the status" "$code" 400
        expect_in "restore $f: the reason" "$f: a $([ $f = fifo.bin ] && echo FIFO || echo directory), not a regular file" "$(cat "$tmp/body")"
        faster "restore $f" 2 "$t0" "$t1"
    done
    expect_eq "a generation after the FIFO" "$(post "$url_fifo/v1/completions" '{"prompt": "Once", "max_tokens": 2}' -m 30)" 200
    stop_server fifo
fi
# each would wait for a writer for ever: `timeout` makes that a failure
expect_err "run -m FIFO" "model.gguf: a FIFO, not a regular file" timeout 20 "$NUCLEUS" run -m "$tmp/model.gguf" -p hi -n 1
expect_err "run --prompt-cache FIFO" "cache.bin: a FIFO, not a regular file" \
    timeout 20 "$NUCLEUS" run -m "$stories" -p hi -n 1 --prompt-cache "$tmp/cache.bin"
expect_err "serve --chat-template FIFO" "template.jinja: a FIFO, not a regular file" \
    timeout 20 "$NUCLEUS" serve -m "$stories" --port 0 --chat-template "$tmp/template.jinja"
expect_err "serve --api-key-file FIFO" "key: a FIFO, not a regular file" \
    timeout 20 "$NUCLEUS" serve -m "$stories" --port 0 --api-key-file "$tmp/key"
for f in config.json tokenizer.json tokenizer_config.json model.safetensors; do
    rm -rf "$tmp/hf" && mkdir "$tmp/hf"
    for g in "$tiny_hf"/*; do [ "$(basename "$g")" = "$f" ] || ln -s "$g" "$tmp/hf/"; done
    mkfifo "$tmp/hf/$f"
    expect_err "a Hugging Face directory whose $f is a FIFO" "hf/$f: a FIFO, not a regular file" \
        timeout 20 "$NUCLEUS" run -m "$tmp/hf" -p hi -n 1
done

# ---- slot saves under --slot-save-max-bytes -------------------------------------------------------
rm -rf "$tmp/slots" && mkdir "$tmp/slots"
expect_err "--slot-save-max-bytes without --slot-save-path" "give --slot-save-path DIR too" \
    "$NUCLEUS" serve -m "$stories" --port 0 --slot-save-max-bytes 1G
expect_err "--slot-save-max-bytes 0" "expected a byte count of at least 1" \
    "$NUCLEUS" serve -m "$stories" --port 0 --slot-save-path "$tmp/slots" --slot-save-max-bytes 0
P='{"prompt": "Once upon a time, there was a little girl", "max_tokens": 4}'
if start_server tight -m "$stories" --parallel 1 -t 2 --slot-save-path "$tmp/slots" --slot-save-max-bytes 1000; then
    post "$url_tight/v1/completions" "$P" >/dev/null
    code=$(post "$url_tight/slots/0?action=save" '{"filename": "a.bin"}')
    expect_eq "a save past --slot-save-max-bytes: the status" "$code" 507
    expect_in "a save past --slot-save-max-bytes: the reason" "more than the limit of --slot-save-max-bytes (1000)" "$(cat "$tmp/body")"
    expect_eq "a refused save leaves nothing" "$(ls -A "$tmp/slots")" ""
    one=$(grep -o 'would be [0-9]* bytes' "$tmp/body" | grep -o '[0-9]*')
    stop_server tight
fi
if [ -n "${one:-}" ] && start_server room -m "$stories" --parallel 1 -t 2 --slot-save-path "$tmp/slots" \
        --slot-save-max-bytes $((one * 3 / 2)); then
    post "$url_room/v1/completions" "$P" >/dev/null
    expect_eq "a save within the budget" "$(post "$url_room/slots/0?action=save" '{"filename": "a.bin"}')" 200
    expect_eq "the same file saved again (it replaces itself)" "$(post "$url_room/slots/0?action=save" '{"filename": "a.bin"}')" 200
    code=$(post "$url_room/slots/0?action=save" '{"filename": "b.bin"}')
    expect_eq "a second file past the budget: the status" "$code" 507
    expect_in "a second file past the budget: the reason" "the slot files hold $one" "$(cat "$tmp/body")"
    expect_eq "the directory after the refusal" "$(ls -A "$tmp/slots")" "a.bin"
    stop_server room
fi

# ---- embeddings: clients that leave, the queue, SIGTERM -------------------------------------------
/usr/bin/python3 -c 'import json; print(json.dumps({"input": ["hello " * 500] * 64}))' >"$tmp/embed.json"
# embed_bg OUT: 64 inputs of 1,501 tokens, minutes of work for tiny-k under the sanitizers, in the
# background (curl itself, so that killing it closes the connection); status into OUT.code, body into OUT
embed_bg() {
    curl -s -o "$2" -w '%{http_code}' -H 'Content-Type: application/json' -d @"$tmp/embed.json" -m 120 \
        "$1/v1/embeddings" >"$2.code" &
}
if start_server emb -m "$tiny_k" --parallel 1 -c 2048 -t 2 --max-queue 1; then
    post "$url_emb/v1/embeddings" @"$tmp/embed.json" -m 2 >/dev/null
    t0=$(now)
    code=$(post "$url_emb/v1/embeddings" '{"input": "hi"}' -m 60)
    t1=$(now)
    expect_eq "an embedding after one whose client left" "$code" 200
    # (the abandoned one ends at its next chunk of 128 tokens)
    faster "an embedding after one whose client left" 5 "$t0" "$t1"
    # one computing, one waiting (--max-queue 1): a third is refused
    embed_bg "$url_emb" "$tmp/held"
    held=$!
    arrived "$url_emb" /v1/embeddings 3
    curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -d '{"input": "hi"}' -m 60 \
        "$url_emb/v1/embeddings" >"$tmp/waiting_code" &
    waiting=$!
    arrived "$url_emb" /v1/embeddings 4
    code=$(post "$url_emb/v1/embeddings" '{"input": "hi"}' -m 60)
    expect_eq "--max-queue 1: a third embedding" "$code" 503
    expect_in "--max-queue 1: the reason" "(an embedding is computing and 1 wait: --max-queue)" "$(cat "$tmp/body")"
    kill "$held" 2>/dev/null
    wait "$held" "$waiting" 2>/dev/null
    expect_eq "--max-queue 1: the one waiting, once the first client left" "$(cat "$tmp/waiting_code")" 200
    # SIGTERM with abandoned embeddings
    post "$url_emb/v1/embeddings" @"$tmp/embed.json" -m 1 >/dev/null
    took=$(term_and_time emb)
    if awk -v t="$took" 'BEGIN { exit !(t < 6) }'; then ok; else bad "SIGTERM with an abandoned embedding: exit after $took s"; fi
    stop_server emb
fi
if start_server emb2 -m "$tiny_k" --parallel 1 -c 2048 -t 2; then
    # SIGTERM while a client still waits for its embeddings: it gets the drain, then a 503
    embed_bg "$url_emb2" "$tmp/held"
    held=$!
    arrived "$url_emb2" /v1/embeddings 1
    sleep 0.5
    took=$(term_and_time emb2)
    wait "$held"
    expect_eq "an embedding running at SIGTERM: the status" "$(cat "$tmp/held.code")" 503
    expect_in "an embedding running at SIGTERM: the reason" "the server is shutting down" "$(cat "$tmp/held")"
    # 5 s of drain, then the chunk in flight
    if awk -v t="$took" 'BEGIN { exit !(t < 7) }'; then ok; else bad "SIGTERM with an embedding running: exit after $took s"; fi
    stop_server emb2
fi

# ---- a chat template rendering at SIGTERM ---------------------------------------------------------
# a render that runs to its step budget (seconds under the sanitizers), while a generation keeps
# the drain going
printf '%s' "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ messages[0]['content'] }}" \
    >"$tmp/slow.jinja"
if start_server render -m "$stories" --parallel 2 -t 2 --chat-template "$tmp/slow.jinja"; then
    curl -s -o /dev/null -H 'Content-Type: application/json' -m 60 "$url_render/v1/completions" \
        -d '{"prompt": "Once", "max_tokens": 100000, "ignore_eos": true}' &
    long=$!
    curl -s -o "$tmp/render" -w '%{http_code} %{time_total}' -H 'Content-Type: application/json' -m 60 \
        "$url_render/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}' \
        >"$tmp/render_code" &
    render=$!
    arrived "$url_render" /v1/chat/completions 1
    sleep 0.3
    t0=$(now)
    kill -TERM "$pid_render"
    wait "$render"
    t1=$(now)
    expect_eq "a render at SIGTERM: the status" "$(cut -d' ' -f1 "$tmp/render_code")" 503
    expect_in "a render at SIGTERM: the reason" "the server is shutting down" "$(cat "$tmp/render")"
    faster "a render at SIGTERM: cancelled at once, not after the drain" 2 "$t0" "$t1"
    wait "$long"
    stop_server render
fi

# ---- a chat template rendering when its client leaves ------------------------------------------------
# The same render (its 20 million steps: a second or more under the sanitizers) abandoned by its
# client after 0.2 s, on each path that renders: it ends then (the server asks every 10 ms
# whether the client is still there), not when its budget runs out, and answers nothing. The
# access log says how each request ended and how long it held its connection thread.
# access PATH N: "STATUS MS" of the server's Nth access line for PATH (waiting at most 20 s for it)
access() {
    for _ in $(seq 1 200); do
        local line; line=$(grep "^access: POST $1 " "$tmp/gone.err" | sed -n "${2}p")
        if [ -n "$line" ]; then awk '{ sub("ms=", "", $5); print $4, $5 }' <<<"$line"; return; fi
        sleep 0.1
    done
    echo "none 999999"
}
if start_server gone -m "$stories" --parallel 2 -t 2 --chat-template "$tmp/slow.jinja"; then
    chat='{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
    code=$(post "$url_gone/v1/chat/completions" "$chat" -m 60)
    expect_eq "a render to its budget: the status" "$code" 400
    expect_in "a render to its budget: the reason" "the render exceeded its step budget" "$(cat "$tmp/body")"
    read -r _ full < <(access /v1/chat/completions 1)
    for path in /v1/chat/completions /apply-template /v1/messages/count_tokens; do
        post "$url_gone$path" "$chat" -m 0.2 >/dev/null
        read -r status took < <(access $path "$([ $path = /v1/chat/completions ] && echo 2 || echo 1)")
        expect_eq "$path: a render whose client left: no answer" "$status" -
        if awk -v t="$took" -v f="$full" 'BEGIN { exit !(t < f / 2) }'; then ok
        else bad "$path: a render whose client left after 0.2 s ended after $took ms (a whole render: $full ms)"; fi
    done
    expect_eq "a generation after the abandoned renders" "$(post "$url_gone/v1/completions" '{"prompt": "Once", "max_tokens": 2}' -m 30)" 200
    stop_server gone
fi

# ---- renders, grammars and tokenizing under --parallel and --max-queue ------------------------------
# --parallel 1 --max-queue 1: one request renders (or compiles a grammar, or tokenizes) at a time and
# one waits for its turn; a third, on any path that prepares a request or tokenizes, is refused with
# 503 until they end
if start_server busy -m "$stories" --parallel 1 --max-queue 1 -t 2 --chat-template "$tmp/slow.jinja"; then
    chat='{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
    for i in 1 2; do
        curl -s -o /dev/null -H 'Content-Type: application/json' -d "$chat" -m 60 "$url_busy/apply-template" &
        eval "render$i=\$!"
        arrived "$url_busy" /apply-template $i
    done
    # (/infill too: stories has no FIM tokens, its 400 once admitted, when its prompt is built)
    for path in /v1/chat/completions /apply-template /v1/messages/count_tokens /v1/completions /tokenize /detokenize /infill; do
        case $path in
        /v1/completions) body='{"prompt": "Once", "max_tokens": 2}' ;;
        /infill) body='{"input_prefix": "def f(", "input_suffix": ")", "input_extra": [{"filename": "a.py", "text": "x = 1"}]}' ;;
        /tokenize) body='{"content": "Once upon a time"}' ;;
        /detokenize) body='{"tokens": [1, 2, 3]}' ;;
        *) body=$chat ;;
        esac
        code=$(post "$url_busy$path" "$body" -m 30)
        expect_eq "$path while one renders and one waits (--parallel 1 --max-queue 1)" "$code" 503
        expect_in "$path while one renders and one waits: the reason" \
            "the server is busy (--parallel 1 requests render chat templates, compile grammars or tokenize, --max-queue 1 wait)" \
            "$(cat "$tmp/body")"
    done
    wait "$render1" "$render2"
    expect_eq "a completion once the renders ended" "$(post "$url_busy/v1/completions" '{"prompt": "Once", "max_tokens": 2}' -m 30)" 200
    # the queue has room: a tokenize waits for the render before it, then is answered
    curl -s -o /dev/null -H 'Content-Type: application/json' -d "$chat" -m 60 "$url_busy/apply-template" &
    render1=$!
    arrived "$url_busy" /apply-template 4 # (two renders, one refused, this one)
    read -r code took < <(curl -s -o "$tmp/body" -w '%{http_code} %{time_total}\n' -H 'Content-Type: application/json' \
        -d '{"content": "Once upon a time"}' -m 60 "$url_busy/tokenize")
    wait "$render1"
    read -r _ render_ms < <(grep "^access: POST /apply-template " "$tmp/busy.err" | tail -1 | awk '{ sub("ms=", "", $5); print $4, $5 }')
    expect_eq "a tokenize while one renders (the queue has room): answered" "$code $(json 'len(d["tokens"]) > 0')" "200 True"
    if awk -v t="$took" -v r="$render_ms" 'BEGIN { exit !(t * 1000 > r / 2) }'; then ok
    else bad "a tokenize while one renders: answered after $took s, before the render ($render_ms ms) left its turn"; fi
    stop_server busy
fi

# ---- the server's deadline: --request-timeout ------------------------------------------------------
expect_err "--request-timeout -1" "--request-timeout: -1 is outside the allowed range" \
    "$NUCLEUS" serve -m "$stories" --port 0 --request-timeout -1
expect_err "--request-timeout 1s" "--request-timeout: expected an integer, got '1s'" \
    "$NUCLEUS" serve -m "$stories" --port 0 --request-timeout 1s
# tiny-k with a context of 2048: a generation to a full context, or 64 inputs of 1,501 tokens to
# embed, take far longer than the deadline of 1 s; the slow template's render too
if start_server late -m "$tiny_k" --parallel 1 -c 2048 -t 2 --request-timeout 1 --chat-template "$tmp/slow.jinja"; then
    long='{"prompt": "Once", "max_tokens": 100000, "ignore_eos": true'
    t0=$(now)
    code=$(post "$url_late/v1/completions" "$long}" -m 60)
    t1=$(now)
    expect_eq "a generation past --request-timeout: ends with what it made" \
        "$code $(json '(d["choices"][0]["finish_reason"], len(d["choices"][0]["text"]) > 0, 0 < d["usage"]["completion_tokens"] < 2000)')" \
        "200 ('length', True, True)"
    faster "a generation past --request-timeout 1" 4 "$t0" "$t1"
    post "$url_late/v1/completions" "$long, \"stream\": true}" -m 60 >/dev/null
    expect_eq "a stream past --request-timeout: its last choice chunk and [DONE]" \
        "$(grep -o '"finish_reason":"[a-z]*"\|\[DONE\]' "$tmp/body" | tail -2 | paste -sd' ')" '"finish_reason":"length" [DONE]'
    code=$(post "$url_late/completion" '{"prompt": "Once", "n_predict": 100000, "ignore_eos": true}' -m 60)
    expect_eq "/completion past --request-timeout" "$code $(json '(d["stop_type"], d["tokens_predicted"] > 0)')" "200 ('limit', True)"
    # embeddings; a chat request behind two renders (each a large part of a second to its step
    # budget) for its turn at --parallel 1
    chat='{"messages": [{"role": "user", "content": "hi"}]}'
    for i in 1 2; do
        curl -s -o /dev/null -H 'Content-Type: application/json' -d "$chat" -m 60 "$url_late/v1/chat/completions" &
        eval "render$i=\$!"
        arrived "$url_late" /v1/chat/completions $i
    done
    for path in /v1/chat/completions /v1/embeddings; do
        t0=$(now)
        code=$(post "$url_late$path" "$([ $path = /v1/embeddings ] && echo @"$tmp/embed.json" || echo "$chat")" -m 60)
        t1=$(now)
        expect_eq "$path past --request-timeout: the status" "$code" 503
        expect_in "$path past --request-timeout: the reason" \
            "the request passed the server's deadline of 1 s (--request-timeout)" "$(cat "$tmp/body")"
        faster "$path past --request-timeout 1" 4 "$t0" "$t1"
    done
    wait "$render1" "$render2"
    stop_server late
fi

# ---- start-up: the API key, what is said and warned about ------------------------------------------
expect_err "an empty NUCLEUS_API_KEY" "NUCLEUS_API_KEY is set but empty" \
    env NUCLEUS_API_KEY= timeout 20 "$NUCLEUS" serve -m "$stories" --port 0
printf ' \n' >"$tmp/blank_key"
expect_err "an --api-key-file holding no key" "the file holds no key" timeout 20 "$NUCLEUS" serve -m "$stories" --port 0 --api-key-file "$tmp/blank_key"
if NUCLEUS_API_KEY=sekrit start_server keyed -m "$stories" --parallel 1 -t 2; then
    expect_in "start-up: authentication on" "authentication: on (API key from \$NUCLEUS_API_KEY)" "$(cat "$tmp/keyed.err")"
    expect_eq "the key from the environment is asked for" "$(curl -s -o /dev/null -w '%{http_code}' "$url_keyed/v1/models")" 401
    if grep -q "^warning:" "$tmp/keyed.err"; then bad "a keyed loopback server warned: $(grep '^warning:' "$tmp/keyed.err")"; else ok; fi
    stop_server keyed
fi
if start_server wide -m "$stories" --parallel 1 -t 2 --host 0.0.0.0; then
    expect_in "start-up: authentication off" "authentication: off (no API key)" "$(cat "$tmp/wide.err")"
    expect_in "beyond loopback without a key: warned" \
        "warning: listening on 0.0.0.0, beyond loopback, without an API key" "$(cat "$tmp/wide.err")"
    expect_in "beyond loopback: the Host check is off, warned" \
        "warning: the Host check is off (every Host is answered on a non-loopback address)" "$(cat "$tmp/wide.err")"
    stop_server wide
fi
if start_server anyhost -m "$stories" --parallel 1 -t 2 --allowed-hosts '*'; then
    expect_in "--allowed-hosts '*': warned" "warning: the Host check is off (--allowed-hosts '*')" "$(cat "$tmp/anyhost.err")"
    if grep -q "beyond loopback" "$tmp/anyhost.err"; then bad "a loopback server warned of listening beyond it"; else ok; fi
    stop_server anyhost
fi

# ---- make fuzz-long: every harness -----------------------------------------------------------------
# bench/fuzz.sh (make fuzz-long) runs each harness tests/e2e/fuzz_*.sh runs in make test (its list
# of names left fuzz_reply out)
expect_eq "make fuzz-long's harnesses" "$(bash bench/fuzz.sh --list | paste -sd' ')" \
    "$(ls tests/e2e/fuzz_*.sh | sed 's|tests/e2e/fuzz_||; s|\.sh$||' | paste -sd' ')"

finish
