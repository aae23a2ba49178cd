#!/usr/bin/env bash
# Architecture coverage against the exact reference (shared/tools/reference-forward) on tiny
# generated models the shared files lack: BF16, MQA, partial rotary, rope_freqs, qwen2 in every
# weight type; and clean refusals of broken or unsupported models. The other kernel sets in make
# test (tier sample, tests/lib/tier.sh): the comparisons alone (a refusal does not compute).
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
. tests/lib/tier.sh
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
if tier_is sample; then
    echo "reference: $pass passed, $fail failed"
    [ $fail -eq 0 ]
    exit
fi

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
refuse unsupported-type "type IQ2_XXS, which nucleus cannot compute with; supported: F32, F16, Q4_0" --bad-type blk.0.ffn_down.weight --ff 256
refuse qwen2-no-bias "attn_q.bias" --arch qwen2 --omit blk.0.attn_q.bias

# Hugging Face directories: a copy of a shared one with its config.json edited or a tensor
# renamed / retyped must be refused with an error naming the problem and what is supported.
hf_variant() { # name python-edit -> a directory under $tmp, from shared/archs/${ARCH:-qwen3}/hf
    /usr/bin/python3 - "$SHARED/archs/${ARCH:-qwen3}/hf" "$tmp/$1" "$2" <<'PY'
import json, os, struct, sys
src, dst, edit = sys.argv[1:4]
os.makedirs(dst)
for f in os.listdir(src):
    if f not in ("config.json", "model.safetensors"): os.symlink(os.path.join(src, f), os.path.join(dst, f))
cfg = json.load(open(os.path.join(src, "config.json")))
data = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header, body = json.loads(data[8:8 + n]), data[8 + n:]
exec(edit)
hj = json.dumps(header).encode()
open(os.path.join(dst, "model.safetensors"), "wb").write(struct.pack("<Q", len(hj)) + hj + body)
json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))
PY
}
refuse_hf() { # name needle python-edit
    hf_variant "$1" "$3" || { bad "$1: variant failed"; return; }
    local out rc
    out=$($BIN run -m "$tmp/$1" -p hi -n 1 2>&1 >/dev/null); rc=$?
    if [ $rc -eq 1 ] && grep -qF -- "$2" <<<"$out"; then ok; else bad "$1: rc=$rc: $out"; fi
}
refuse_hf hf-model-type 'model_type "bert" is not supported; supported: llama, mistral' 'cfg["model_type"] = "bert"'
refuse_hf hf-multimodal 'wraps a text model with other modalities' 'cfg["model_type"] = "gemma3"; cfg["text_config"] = {}'
refuse_hf hf-activation 'activation "gelu" is not what a qwen3 model computes with (silu)' 'cfg["hidden_act"] = "gelu"'
refuse_hf hf-missing "missing tensor 'model.layers.1.mlp.up_proj.weight'" 'header["model.layers.1.mlp.upx.weight"] = header.pop("model.layers.1.mlp.up_proj.weight")'
refuse_hf hf-dtype "has type I16, which nucleus cannot compute with; supported: F32, F16, Q4_0" 'header["model.layers.0.mlp.up_proj.weight"]["dtype"] = "I16"'
refuse_hf hf-shape "tensor 'model.layers.0.self_attn.k_proj.weight'" 'cfg["num_key_value_heads"] = 4'
refuse_hf hf-rope "rope type \"dynamic\" is not supported (default, linear, llama3, yarn, longrope)" 'cfg["rope_parameters"] = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}'
refuse_hf hf-config-null "config.json" 'cfg = None'
# gpt-oss as released: experts in MXFP4 blocks and scales (U8); tests/e2e/hf_mxfp4_check.py
# checks the ones that load
ARCH=gptoss refuse_hf hf-mxfp4-no-scales "'model.layers.0.mlp.experts.gate_up_proj_blocks' has no 'model.layers.0.mlp.experts.gate_up_proj_scales'" \
    'header["model.layers.0.mlp.experts.gate_up_proj_blocks"] = dict(header.pop("model.layers.0.mlp.experts.gate_up_proj"), dtype="U8", shape=[4, 128, 2, 16, 4])'
ARCH=gptoss refuse_hf hf-mxfp4-scales-shape "tensor 'model.layers.0.mlp.experts.gate_up_proj_scales' (header entry" \
    'g = header.pop("model.layers.0.mlp.experts.gate_up_proj"); a, z = g["data_offsets"]
header["model.layers.0.mlp.experts.gate_up_proj_blocks"] = dict(dtype="U8", shape=[4, 128, 2, 16], data_offsets=[a, a + 16384])
header["model.layers.0.mlp.experts.gate_up_proj_scales"] = dict(dtype="U8", shape=[4, 128, 96], data_offsets=[a + 16384, z])'
ARCH=gptoss refuse_hf hf-mxfp4-dtype "tensor 'model.layers.0.mlp.experts.gate_up_proj_blocks' has type BF16; MXFP4 blocks and scales are U8" \
    'g = header.pop("model.layers.0.mlp.experts.gate_up_proj"); a, z = g["data_offsets"]
header["model.layers.0.mlp.experts.gate_up_proj_blocks"] = dict(dtype="BF16", shape=[4, 128, 2, 16], data_offsets=[a, a + 32768])
header["model.layers.0.mlp.experts.gate_up_proj_scales"] = dict(dtype="U8", shape=[4, 128, 64], data_offsets=[a + 32768, z])'

echo "reference: $pass passed, $fail failed"
[ $fail -eq 0 ]
