#!/usr/bin/env bash
# Architecture coverage against the exact reference (shared/tools/reference-forward) on tiny
# generated models the shared files lack: BF16, MQA, partial rotary, rope_freqs, qwen2 in every
# weight type; and clean refusals of broken or unsupported models.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
BIN=${NUCLEUS_BIN:-build/san/nucleus}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
tiny() { /usr/bin/python3 tests/tools/tiny_gguf.py "$@"; }
IDS=1,403,407,261,378,306,397,288,300,341

compare() { # name tol tiny-args...
    local name=$1 tol=$2; shift 2
    tiny -o "$tmp/$name.gguf" "$@" || { bad "$name: generator failed"; return; }
    local ours ref
    ours=$($BIN score -m "$tmp/$name.gguf" --ids $IDS --all --top 5 -t 2 2>&1)
    ref=$(/usr/bin/python3 "$SHARED/tools/reference-forward" "$tmp/$name.gguf" --ids $IDS --all --top 5 2>&1)
    /usr/bin/python3 - "$ours" "$ref" "$tol" <<'PY' && ok || bad "$name: $ours"
import json, sys
a, b, tol = json.loads(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3])
worst = 0
for sa, sb in zip(a["top_logprobs"], b["top_logprobs"]):
    mine = dict(map(tuple, sa))
    for t, lp in sb:
        if t in mine: worst = max(worst, abs(mine[t] - lp))
        elif lp > sa[-1][1] + tol: sys.exit("token %d (%.4f) missing from our top 5" % (t, lp))
print("max deviation %.5f" % worst)
sys.exit(0 if worst <= tol else 1)
PY
}

compare llama-f32 0.02 --type f32
compare llama-f16-mqa 0.02 --type f16 --heads 4 --kv-heads 1
compare llama-bf16 0.02 --type bf16
compare llama-q8-tied 0.05 --type q8_0 --tied
compare llama-q4-rope-freqs 0.05 --type q4_0 --rope-freqs --theta 500000
compare llama-partial-rot 0.02 --type f32 --rot 8
compare qwen2-f32 0.02 --arch qwen2 --type f32
compare qwen2-bf16-mqa 0.02 --arch qwen2 --type bf16 --kv-heads 1 --tied
compare qwen2-q8-partial-rot 0.05 --arch qwen2 --type q8_0 --rot 8
# 3 + 2 heads of Q/K/V, which 2 threads cannot share evenly, and a prompt of 20: each head's
# tokens are split between the threads
IDS=$IDS,262,301,350,410,299,318,270,402,377,266 compare llama-q8-odd-heads 0.05 --type q8_0 --embd 96 --heads 3 --kv-heads 1

refuse() { # name needle tiny-args...
    local name=$1 needle=$2; shift 2
    tiny -o "$tmp/$name.gguf" "$@" || { bad "$name: generator failed"; return; }
    local out rc
    out=$($BIN run -m "$tmp/$name.gguf" -p hi -n 1 2>&1 >/dev/null); rc=$?
    if [ $rc -eq 1 ] && grep -qF -- "$needle" <<<"$out"; then ok; else bad "$name: rc=$rc: $out"; fi
}
refuse missing-tensor "missing tensor 'blk.1.ffn_up.weight'" --omit blk.1.ffn_up.weight
refuse wrong-shape "tensor 'blk.0.attn_k.weight'" --reshape blk.0.attn_k.weight=64,48
refuse bad-arch "architecture 'gpt2'" --arch-name gpt2
refuse bad-arch-lists "supported: llama, granite, smollm3, qwen2, qwen3" --arch-name falcon
refuse unsupported-type "type Q5_K" --bad-type blk.0.ffn_down.weight --ff 256
refuse qwen2-no-bias "attn_q.bias" --arch qwen2 --omit blk.0.attn_q.bias

echo "reference: $pass passed, $fail failed"
[ $fail -eq 0 ]
