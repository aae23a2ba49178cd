#!/usr/bin/env bash
# A full context (sanitized build, stories260K): without a policy generation ends and says so;
# --context-shift and --attention-sinks generate 10x the context length without error, with the
# number of evictions their definitions give; the text before the first eviction is the text
# without a policy; bad combinations are refused; the server's slots make room the same way.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
BIN=${NUCLEUS_BIN:-build/san/nucleus}
. tests/lib/checks.sh
NUCLEUS=$BIN
tmp=$(mktemp -d)
. tests/lib/servers.sh
trap servers_cleanup EXIT

# "Once upon a time" is 5 tokens with the BOS; -c 256, 2600 tokens (10x the context).
CTX=256 N=2600 PROMPT_TOKENS=5
run() { # name, flags... -> $tmp/name.out (stdout), $tmp/name.err (stderr), $tmp/name.rc
    local name=$1; shift
    $BIN run -p "Once upon a time" -c $CTX -n $N -t 2 --ignore-eos "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
    echo $? >"$tmp/$name.rc"
}
clean() { # name: exit 0 and no sanitizer report
    if [ "$(cat "$tmp/$1.rc")" == 0 ] && ! grep -q "Sanitizer\|runtime error" "$tmp/$1.err"; then ok
    else bad "$1: rc $(cat "$tmp/$1.rc"): $(tail -5 "$tmp/$1.err")"; fi
}
# Evictions: the cache fills after CTX - PROMPT_TOKENS fed tokens; N tokens drawn means N - 1 fed;
# each eviction frees `drop` cells, so the next comes `drop` feeds later.
evictions() { # drop -> count
    local first=$((CTX - PROMPT_TOKENS + 1)) fed=$((N - 1))
    echo $(((fed - first) / $1 + 1))
}

# Without a policy: the context ends it, and stderr says why and what to do.
run stop --seed 3
clean stop
err=$(cat "$tmp/stop.err")
expect_in "full context stated" "[stopped: the context is full ($CTX tokens); use --context-shift or --attention-sinks N to go on]" "$err"
expect_in "tokens until the context is full" "generated $((CTX - PROMPT_TOKENS + 1)) tokens" "$err"
expect_in "finish length" "stop: length" "$err"

# Context shift: BOS kept (--keep 0), half of the other 255 dropped each time.
run shift --seed 3 --context-shift
clean shift
err=$(cat "$tmp/shift.err")
drop=$(((CTX - 1) / 2)) k=$(evictions $(((CTX - 1) / 2)))
expect_in "shift: all tokens" "generated $N tokens" "$err"
expect_in "shift: evictions" "[context] context shift made room $k times in the $CTX-token context, dropping $((k * drop)) tokens" "$err"
grep -q "stopped" <<<"$err" && bad "shift: says it stopped: $err" || ok
# --keep -1 keeps the whole prompt: (256 - 5) / 2 dropped each time
run keep --seed 3 --context-shift --keep -1
clean keep
drop=$(((CTX - PROMPT_TOKENS) / 2)) k=$(evictions $(((CTX - PROMPT_TOKENS) / 2)))
expect_in "keep -1: evictions" "made room $k times in the $CTX-token context, dropping $((k * drop)) tokens" "$(cat "$tmp/keep.err")"

# Attention sinks: 4 sinks, a quarter of the 252-token window dropped each time.
run sinks --seed 3 --attention-sinks 4
clean sinks
err=$(cat "$tmp/sinks.err")
drop=$(((CTX - 4) / 4)) k=$(evictions $(((CTX - 4) / 4)))
expect_in "sinks: all tokens" "generated $N tokens" "$err"
expect_in "sinks: evictions" "[context] attention sinks made room $k times in the $CTX-token context, dropping $((k * drop)) tokens" "$err"

# Sampled with the same seed, the text before the first eviction is the text without a policy
# (which ends there): an eviction cannot change what came before it. Greedy too.
prefix_of() { # what, short, long: the short text (less the final newline run adds) starts the long one
    /usr/bin/python3 - "$1" "$2" "$3" <<'PY' && ok || bad "$1: the text without a policy is not where the text with it starts"
import sys
what, short, long_ = sys.argv[1:]
a = open(short, "rb").read()[:-1]
b = open(long_, "rb").read()
sys.exit(0 if len(b) > len(a) + 1000 and b.startswith(a) else 1)
PY
}
prefix_of "sampled, shift" "$tmp/stop.out" "$tmp/shift.out"
prefix_of "sampled, sinks" "$tmp/stop.out" "$tmp/sinks.out"
run gstop --temp 0
run gshift --temp 0 --context-shift
run gsinks --temp 0 --attention-sinks 4
prefix_of "greedy, shift" "$tmp/gstop.out" "$tmp/gshift.out"
prefix_of "greedy, sinks" "$tmp/gstop.out" "$tmp/gsinks.out"

# Beam search stops at a full context too, without suggesting flags it cannot take.
err=$($BIN run -p "Once upon a time" -c 32 -n 100 --beams 2 -t 2 2>&1 >/dev/null)
expect_in "beams: full context stated" "[stopped: the context is full (32 tokens)]" "$err"

# Refusals, before anything runs.
expect_err "shift and sinks" "choose one" $BIN run -p "x" --context-shift --attention-sinks 4
expect_err "--keep alone" "needs --context-shift" $BIN run -p "x" --keep 2
expect_err "shift with beams" "--context-shift: works with sampling, not with --beams" $BIN run -p "x" --beams 2 --context-shift
expect_err "sinks with beams" "--attention-sinks: works with sampling, not with --beams" $BIN run -p "x" --beams 2 --attention-sinks 4
expect_err "no sinks" "--attention-sinks: 0 is outside" $BIN run -p "x" --attention-sinks 0
expect_err "--keep below -1" "--keep: -2 is outside" $BIN run -p "x" --context-shift --keep -2
expect_err "sinks fill the context" "--attention-sinks cannot run in a context of 8 tokens" \
    $BIN run -p "Once upon a time" -c 8 --attention-sinks 8
expect_err "whole prompt kept" "--context-shift cannot run in a context of 6 tokens" \
    $BIN run -p "Once upon a time" -c 6 --context-shift --keep -1
long=$(printf 'the cat sat. %.0s' $(seq 800))
expect_err "prompt past the model's context" "more than the model's context of 2048" $BIN run -p "$long" -n 4
expect_err "serve: --keep alone" "needs --context-shift" $BIN serve --keep 2
expect_err "serve: sinks fill the context" "n_sink: 8 is outside 1..7" $BIN serve -c 8 --attention-sinks 8 --port 0

# The server: a request with max_tokens goes past its slot's context under a policy (two choices,
# each shifting on its own); one without max_tokens still ends at the full context.
start_server ctx -c 64 --parallel 2 -t 2 --context-shift
out=$(/usr/bin/python3 - "$url_ctx" <<'PY'
import json, sys, urllib.request
url = sys.argv[1]
def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=120))
r = post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 300, "n": 2, "seed": 1, "ignore_eos": True})
print(r["usage"]["completion_tokens"], ",".join(c["finish_reason"] for c in r["choices"]))
r = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "seed": 1, "ignore_eos": True})
u = r["usage"]
print(u["prompt_tokens"] + u["completion_tokens"], r["choices"][0]["finish_reason"])
PY
)
stop_server ctx
expect_in "server: 2 x 300 tokens in a 64-token context" "600 length,length" "$out"
expect_in "server: no max_tokens ends at the full context" "65 length" "$out"

echo "context: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
