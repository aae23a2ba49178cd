#!/usr/bin/env bash
# `nucleus serve` end to end with the official OpenAI client (tests/node_server, node's test
# runner): completions and chat, streaming, n > 1, stop, logprobs, seeds, errors (400 naming the
# field, 401, 404, 405, 413, 503), 8 concurrent clients with a same-seed check, disconnects,
# a 200-request load loop, metrics, and a model's own chat template.
#
# Two sanitized servers (build/san/nucleus) on free loopback ports: stories260K (--parallel 8
# --max-queue 4 --api-key) and a 2-layer synthetic Qwen2.5 (byte-level BPE, the Qwen2 chat
# template in its GGUF). After the node tests each gets SIGTERM and must exit 0 with no
# AddressSanitizer / LeakSanitizer / UBSan report. Ends with "server: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
finish() { echo "server: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    bad "node and npm are needed (Debian: apt-get install nodejs npm)"
    finish
fi
if [ ! -x "$NUCLEUS" ] && ! make "$NUCLEUS" >/dev/null; then
    bad "cannot build $NUCLEUS"
    finish
fi
if [ ! -d tests/node_server/node_modules/openai ]; then
    (cd tests/node_server && npm ci --no-audit --no-fund --loglevel=error) || { bad "npm ci in tests/node_server failed"; finish; }
fi
chat_model=$(synth_model qwen2.5-0.5b-q8_0-l2 --shape qwen2.5-0.5b --layers 2 --type q8_0) || {
    bad "cannot generate the synthetic Qwen2.5 model"
    finish
}

tmp=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# start_server NAME ARGS...: runs the server on a free port; sets url_NAME and pid_NAME.
start_server() {
    local name=$1; shift
    "$NUCLEUS" serve --host 127.0.0.1 --port 0 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    local pid=$!
    pids+=("$pid")
    eval "pid_$name=$pid"
    local line=""
    for _ in $(seq 1 300); do
        line=$(grep -o 'listening on http://[0-9.:]*' "$tmp/$name.err" 2>/dev/null)
        [ -n "$line" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if [ -z "$line" ]; then
        bad "$name: the server did not start: $(tail -n 5 "$tmp/$name.err")"
        return 1
    fi
    eval "url_$name=${line#listening on }"
    ok
}

# stop_server NAME: SIGTERM, then a clean exit and no sanitizer report.
stop_server() {
    local name=$1 pid_var="pid_$1"
    local pid=${!pid_var}
    kill -TERM "$pid" 2>/dev/null
    local rc=0
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        bad "$name: still running 30 s after SIGTERM"
        kill -KILL "$pid"
    fi
    wait "$pid"
    rc=$?
    if [ $rc -eq 0 ]; then ok; else bad "$name: exit status $rc after SIGTERM"; fi
    if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$tmp/$name.err"; then
        bad "$name: sanitizer report:"
        grep -E -A 30 'AddressSanitizer|LeakSanitizer|runtime error:' "$tmp/$name.err" | head -n 60
    else
        ok
    fi
}

key=test-key-$$
start_server main -m "$SHARED/models/stories260K/stories260K.gguf" --parallel 8 --max-queue 4 --api-key "$key" -c 4096 -t 2 || finish
start_server chat -m "$chat_model" --parallel 2 -t 2 || finish

NUCLEUS_URL=$url_main NUCLEUS_KEY=$key NUCLEUS_CHAT_URL=$url_chat \
    node --test --test-reporter=tap --test-timeout=180000 tests/node_server/server.test.mjs >"$tmp/node.tap" 2>&1
n_pass=$(grep -E '^# pass [0-9]+' "$tmp/node.tap" | awk '{print $3}')
n_fail=$(grep -E '^# fail [0-9]+' "$tmp/node.tap" | awk '{print $3}')
if [ -z "$n_pass" ] || [ -z "$n_fail" ]; then
    bad "node --test gave no summary:"
    tail -n 40 "$tmp/node.tap"
else
    grep -E '^(not )?ok ' "$tmp/node.tap"
    pass=$((pass + n_pass))
    fail=$((fail + n_fail))
    if [ "$n_fail" -ne 0 ]; then
        echo "node tests failing:"
        grep -E -A 25 '^\s*not ok' "$tmp/node.tap" | head -n 120
    fi
fi

stop_server main
stop_server chat
finish
