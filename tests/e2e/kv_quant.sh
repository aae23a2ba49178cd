#!/usr/bin/env bash
# Quantised KV caches end to end (sanitized build): (1) nucleus with every key / value cache type
# against the exact float64 forward pass given the same rounding of keys and values
# (tests/tools/kv_quant_reference.py over shared/tools/reference-forward) on tiny generated models
# whose heads are whole blocks of 32, over 300 tokens (more than one span of 256 cells);
# (2) --cache-type-k / --cache-type-v / --cache-type (and -ctk / -ctv) in run, score, bench and
# serve: the memory per token run reports, bench's report, a served log-probability against
# score's with the same types; (3) refusals: a value that is not a type (every command), and a
# quantised type for a model whose head_dim is not a multiple of 32. Ends with
# "kv_quant: N passed, N failed". make check, and the other kernel sets in make test (tiers check
# and sample, tests/lib/tier.sh): (1) alone; the sample with three of its five pairs of types,
# which hold every key type and every value type.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
. tests/lib/tier.sh
BIN=${NUCLEUS_BIN:-build/san/nucleus}
STORIES=$SHARED/models/stories260K/stories260K.gguf
NUCLEUS=$BIN
tmp=$(mktemp -d)
. tests/lib/checks.sh
. tests/lib/servers.sh
trap servers_cleanup EXIT
tiny() { /usr/bin/python3 tests/tools/tiny_gguf.py "$@"; }
expect_exit() { # what, rc, needle, command...: expect_err with this exit status
    local what=$1 want_rc=$2 needle=$3; shift 3
    local out rc
    out=$("$@" 2>&1 >/dev/null); rc=$?
    if [ $rc -eq "$want_rc" ] && grep -qF -- "$needle" <<<"$out" && ! grep -q "Sanitizer" <<<"$out"; then ok
    else bad "$what: rc=$rc (want $want_rc), expected an error containing '$needle', got: $out"; fi
}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

# (1) Against the reference with the cache's rounding. A Llama with F32 weights (4 query heads
# sharing 2 KV heads) and a Qwen2 with Q8_0 weights (biases on Q/K/V, one KV head), heads of 32.
IDS=$(/usr/bin/python3 -c "print(','.join(str(1 + (i * 7919) % 500) for i in range(300)))")
tiny -o "$tmp/llama.gguf" --type f32 --embd 128 --heads 4 --kv-heads 2 || bad "llama: generator failed"
tiny -o "$tmp/qwen2.gguf" --arch qwen2 --type q8_0 --embd 128 --heads 4 --kv-heads 1 || bad "qwen2: generator failed"
compare() { # model tol type_k type_v
    local model=$1 tol=$2 tk=$3 tv=$4 ours ref
    ours=$($BIN score -m "$tmp/$model.gguf" --ids "$IDS" --all --top 20 -t 2 --cache-type-k "$tk" --cache-type-v "$tv" 2>&1)
    ref=$(/usr/bin/python3 tests/tools/kv_quant_reference.py "$tmp/$model.gguf" --ids "$IDS" --top 5 \
          --cache-type-k "$tk" --cache-type-v "$tv" 2>&1)
    /usr/bin/python3 - "$ours" "$ref" "$tol" <<'PY' && ok || bad "$model keys $tk values $tv: $(head -c 300 <<<"$ours")"
import json, sys
a, b, tol = json.loads(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3])
worst = 0
for sa, sb in zip(a["top_logprobs"], b["top_logprobs"]):
    mine = dict(map(tuple, sa))
    for t, lp in sb:
        if t not in mine: sys.exit("token %d (%.4f) missing from our top 20" % (t, lp))
        worst = max(worst, abs(mine[t] - lp))
print("max deviation %.5f" % worst)
sys.exit(0 if worst <= tol else 1)
PY
}
# F32 weights are computed exactly, so only the keys' and values' own f32 rounding remains
# (measured below 1e-4); Q8_0 weights meet int16 activations (0.0011 measured).
pairs=("q8_0 q8_0" "q4_0 q4_0" "q8_0 q4_0" "q4_0 f32" "f16 q8_0")
tier_is sample && pairs=("q8_0 q4_0" "q4_0 f32" "f16 q8_0")
for kv in "${pairs[@]}"; do
    compare llama 0.001 $kv
    compare qwen2 0.005 $kv
done
if tier_is check sample; then
    echo "kv_quant: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
    exit
fi

# (2) The flags. 8 layers of 4 KV heads of 32 (kv_dim 128): bytes per token 8 * 128 * (key +
# value bytes per element): f16 4096, f32 8192, q8_0 2 * 34/32, q4_0 2 * 18/32, mixed the sum.
tiny -o "$tmp/deep.gguf" --type f32 --embd 256 --heads 8 --kv-heads 4 --layers 8 || bad "deep: generator failed"
per_token() { # expected KiB, flags...
    local want=$1; shift
    local err
    err=$($BIN run -m "$tmp/deep.gguf" -p "hello" -n 2 --temp 0 -t 2 "$@" 2>&1 >/dev/null)
    grep -qF "$want KiB per token" <<<"$err" && ok || bad "run $*: expected '$want KiB per token' in: $err"
}
per_token "keys f16, values f16: 4.0"
per_token "keys f32, values f32: 8.0" --cache-type f32
per_token "keys q8_0, values q8_0: 2.1" --cache-type q8_0
per_token "keys q4_0, values q4_0: 1.1" --cache-type q4_0
per_token "keys q8_0, values q4_0: 1.6" --cache-type-k q8_0 --cache-type-v q4_0
per_token "keys q4_0, values f16: 2.6" -ctk q4_0 -ctv f16
per_token "keys q8_0, values f32: 5.1" --cache-type f32 --cache-type-k q8_0

out=$($BIN bench -m "$tmp/deep.gguf" -p 8 -n 4 -r 1 -t 1 --no-bandwidth --json --cache-type-k q8_0 2>&1)
/usr/bin/python3 -c 'import json, sys; d = json.loads(sys.argv[1]); sys.exit(0 if (d["type_k"], d["type_v"]) == ("q8_0", "f16") else 1)' \
    "$out" && ok || bad "bench --json: $out"
out=$($BIN bench -m "$tmp/deep.gguf" -p 8 -n 4 -r 1 -t 1 --no-bandwidth --cache-type q4_0 2>&1)
grep -q "| q4_0 | tg4 |" <<<"$out" && ok || bad "bench table: $out"

# serve with q8_0 keys and q4_0 values: the greedy token's log-probability is score's with the
# same types, not the F16 cache's.
top1() { # flags... -> the log-probability of the most likely next token after PROMPT_IDS
    $BIN score -m "$tmp/deep.gguf" --ids "$PROMPT_IDS" --top 1 -t 2 "$@" |
        /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["top_logprobs"][0][0][1])'
}
PROMPT_IDS=$(/usr/bin/python3 -c "print(','.join(str(1 + (i * 7919) % 500) for i in range(40)))")
want=$(top1 --cache-type-k q8_0 --cache-type-v q4_0)
f16=$(top1)
if start_server serve -m "$tmp/deep.gguf" -t 2 --parallel 2 --cache-type-k q8_0 --cache-type-v q4_0; then
    grep -q "KV cache q8_0/q4_0" "$tmp/serve.err" && ok || bad "serve banner: $(cat "$tmp/serve.err")"
    resp=$(curl -s -H 'Content-Type: application/json' "$url_serve/v1/completions" \
           -d "{\"prompt\": [$PROMPT_IDS], \"max_tokens\": 1, \"temperature\": 0, \"logprobs\": 1}")
    /usr/bin/python3 - "$resp" "$want" "$f16" <<'PY' && ok || bad "served log-probability: $resp (score: $want, F16 cache: $f16)"
import json, sys
got = json.loads(sys.argv[1])["choices"][0]["logprobs"]["token_logprobs"][0]
want, f16 = float(sys.argv[2]), float(sys.argv[3])
print("served %.6f, score %.6f, F16 cache %.6f" % (got, want, f16))
sys.exit(0 if abs(got - want) < 1e-4 and abs(want - f16) > 1e-3 else 1)
PY
    stop_server serve
fi

# (3) Refusals, before anything is loaded for a bad value; naming head_dim for a model whose
# heads are not whole blocks (stories260K: 8 dimensions).
expect_exit "run bad type" 2 "--cache-type-k: expected f16, f32, q8_0 or q4_0, got 'q5_0'" $BIN run -p hi --cache-type-k q5_0
expect_exit "score bad type" 2 "--cache-type-v: expected f16, f32, q8_0 or q4_0, got 'bf16'" $BIN score --ids 1 --cache-type-v bf16
expect_exit "bench bad type" 2 "--cache-type: expected f16, f32, q8_0 or q4_0, got 'Q8_0'" $BIN bench --cache-type Q8_0
expect_exit "serve bad type" 2 "-ctv: expected f16, f32, q8_0 or q4_0, got 'q4_1'" $BIN serve -ctv q4_1
expect_exit "run missing value" 2 "--cache-type-v" $BIN run -p hi --cache-type-v
expect_exit "run head_dim" 1 "head_dim 8 is not a multiple of 32" $BIN run -m "$STORIES" -p hi --cache-type-k q8_0
expect_exit "score head_dim" 1 "values of type Q4_0 are quantised per head in blocks of 32" $BIN score -m "$STORIES" --ids 1 -ctv q4_0
expect_exit "serve head_dim" 1 "head_dim 8 is not a multiple of 32" $BIN serve -m "$STORIES" --port 0 --cache-type q4_0

echo "kv_quant: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
