#!/usr/bin/env bash
# `nucleus serve` end to end with the official OpenAI client (tests/node_server, node's test
# runner): completions and chat, streaming, n > 1, stop, logprobs, seeds, errors (400 naming the
# field, 401, 404, 405, 413, 503), 8 concurrent clients with a same-seed check, disconnects,
# a 200-request load loop over every slot and queue place (none refused), metrics, and a model's
# own chat template.
#
# Two sanitized servers (build/san/nucleus) on free loopback ports: stories260K (--parallel 8
# --max-queue 4 --api-key) and a 2-layer synthetic Qwen2.5 (byte-level BPE, the Qwen2 chat
# template in its GGUF). After the node tests a second server must be refused the first's port, and
# the API key must work from a file and from $NUCLEUS_API_KEY;
# then each gets SIGTERM and must exit 0 with no AddressSanitizer / LeakSanitizer / UBSan report.
# Ends with "server: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
. tests/lib/checks.sh
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
. tests/lib/servers.sh
trap servers_cleanup EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

key=test-key-$$
start_server main -m "$SHARED/models/stories260K/stories260K.gguf" --parallel 8 --max-queue 4 --api-key "$key" -c 4096 -t 2 || finish
start_server chat -m "$chat_model" --parallel 2 -t 2 || finish

NUCLEUS_URL=$url_main NUCLEUS_KEY=$key NUCLEUS_CHAT_URL=$url_chat \
    node --test --test-reporter=tap --test-timeout=180000 tests/node_server/server.test.mjs >"$tmp/node.tap" 2>&1
count_tap "$tmp/node.tap"

# The port is the first server's alone: a second one is refused, not given half the requests
# (timeout: a server that shared the port would run on).
expect_err "a second server on a taken port" "port ${url_main##*:}: Address already in use" \
    timeout 30 "$NUCLEUS" serve -m "$SHARED/models/stories260K/stories260K.gguf" --host 127.0.0.1 --port "${url_main##*:}"
expect_eq "the first server still answers" "$(curl -s "$url_main/health")" '{"status":"ok"}'

# The key from a file or the environment, out of the process list.
printf '%s\n' "$key-file" >"$tmp/key"
stories=$SHARED/models/stories260K/stories260K.gguf
if start_server keyfile -m "$stories" --parallel 1 --api-key-file "$tmp/key"; then
    expect_eq "--api-key-file: without the key" "$(curl -s -o /dev/null -w '%{http_code}' "$url_keyfile/v1/models")" 401
    expect_eq "--api-key-file: with it (its newline dropped)" \
        "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $key-file" "$url_keyfile/v1/models")" 200
    expect_eq "the key is not on the command line" "$(tr '\0' ' ' <"/proc/$pid_keyfile/cmdline" | grep -c -- "$key-file")" 0
    stop_server keyfile
fi
if NUCLEUS_API_KEY="$key-env" start_server keyenv -m "$stories" --parallel 1; then
    expect_eq "NUCLEUS_API_KEY: without the key" "$(curl -s -o /dev/null -w '%{http_code}' "$url_keyenv/v1/models")" 401
    expect_eq "NUCLEUS_API_KEY: with it" \
        "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $key-env" "$url_keyenv/v1/models")" 200
    stop_server keyenv
fi
: >"$tmp/nokey"
expect_err "an empty key file" "--api-key-file $tmp/nokey: the file holds no key" "$NUCLEUS" serve -m "$stories" --api-key-file "$tmp/nokey"
expect_err "a missing key file" "$tmp/none: No such file" "$NUCLEUS" serve -m "$stories" --api-key-file "$tmp/none"
expect_err "two keys" "--api-key and --api-key-file: give one" "$NUCLEUS" serve -m "$stories" --api-key k --api-key-file "$tmp/key"

stop_server main
stop_server chat
finish
