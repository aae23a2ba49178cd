#!/usr/bin/env bash
# LoRA adapters (--lora, --lora-scaled; nc_model_add_lora) against the exact reference: the judge is
# shared/tools/reference-forward on the base model with the adapters merged into its weights in
# float64 (tests/tools/lora_gguf.py merge), so W x + s B (A x) in nucleus must give what W' x gives
# there. Then: thread counts and decode give the same bits, the server and `run` agree, a prompt
# cache written with an adapter is refused without it, and every malformed adapter is refused
# naming the problem.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
. tests/lib/checks.sh
NUCLEUS=${NUCLEUS_BIN:-build/san/nucleus}
tmp=$(mktemp -d)
. tests/lib/servers.sh
trap 'servers_cleanup; rm -rf "$tmp"' EXIT
gen() { /usr/bin/python3 tests/tools/lora_gguf.py "$@"; }
S260=$SHARED/models/stories260K/stories260K.gguf
S656=$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf
IDS=1,403,407,261,378,306,397,288,300,341

# compare NAME TOL MIN_EFFECT MERGED BASE NUCLEUS-ARGS...: every position's top 5 within TOL of the
# reference on MERGED, and somewhere at least MIN_EFFECT away from the base model's own (the
# adapter changes the answer: a run that ignored it would fail)
compare() {
    local name=$1 tol=$2 effect=$3 merged=$4 base=$5; shift 5
    local ours ref plain
    ours=$("$NUCLEUS" score -m "$base" --ids $IDS --all --top 5 "$@" 2>&1)
    ref=$(/usr/bin/python3 "$SHARED/tools/reference-forward" "$merged" --ids $IDS --all --top 5 2>&1)
    plain=$(/usr/bin/python3 "$SHARED/tools/reference-forward" "$base" --ids $IDS --all --top 5 2>&1)
    /usr/bin/python3 - "$ours" "$ref" "$plain" "$tol" "$effect" <<'PY' && ok || bad "$name: $ours"
import json, sys
a, b, c = (json.loads(x) for x in sys.argv[1:4])
tol, effect = float(sys.argv[4]), float(sys.argv[5])
def worst(x, y):
    w = 0
    for sx, sy in zip(x["top_logprobs"], y["top_logprobs"]):
        mine = dict(map(tuple, sx))
        for t, lp in sy:
            if t in mine: w = max(w, abs(mine[t] - lp))
            elif lp > sx[-1][1] + tol: return float("inf")
    return w
dev, moved = worst(a, b), worst(c, b)
print("max deviation %.2e, the adapter moves the reference by %s" % (dev, "%.3f" % moved if moved < 1e9 else "a top-5 token"))
sys.exit(0 if dev <= tol and moved >= effect else 1)
PY
}

# stories260K (F32): one F32 adapter on queries, values, the FFN and the output, alpha 8
gen adapter "$S260" -o "$tmp/a.gguf" --targets attn_q,attn_v,ffn_gate,ffn_down,output --rank 4 --alpha 8
gen merge "$S260" -o "$tmp/a-merged.gguf" "$tmp/a.gguf:1"
compare "stories260K, F32 cache" 1e-4 0.05 "$tmp/a-merged.gguf" "$S260" --lora "$tmp/a.gguf" --cache-type f32
compare "stories260K, default cache" 0.02 0.05 "$tmp/a-merged.gguf" "$S260" --lora "$tmp/a.gguf"
# TinyStories-656K (Q8_0, output tied to the embeddings): two adapters added up, an F16 one of rank
# 8 with alpha and a Q8_0 one of rank 32 without, scaled 0.5 and -1.5
gen adapter "$S656" -o "$tmp/b1.gguf" --targets attn_k,attn_output,ffn_up --rank 8 --alpha 16 --type f16 --seed 2
gen adapter "$S656" -o "$tmp/b2.gguf" --targets attn_q,ffn_gate,ffn_down --rank 32 --type q8_0 --seed 3
gen merge "$S656" -o "$tmp/b-merged.gguf" "$tmp/b1.gguf:0.5" "$tmp/b2.gguf:-1.5"
compare "656K Q8_0, two adapters" 0.005 0.05 "$tmp/b-merged.gguf" "$S656" \
    --lora-scaled "$tmp/b1.gguf" 0.5 --lora-scaled "$tmp/b2.gguf" -1.5 --cache-type f32
# qwen2 with its q/k/v biases: the low-rank term joins the product before the bias
/usr/bin/python3 tests/tools/tiny_gguf.py -o "$tmp/qwen2.gguf" --arch qwen2 --type f16
gen adapter "$tmp/qwen2.gguf" -o "$tmp/q.gguf" --targets attn_k,attn_v,ffn_up --rank 2 --alpha 4 --amp 2
gen merge "$tmp/qwen2.gguf" -o "$tmp/q-merged.gguf" "$tmp/q.gguf:1"
compare "qwen2 with biases" 1e-4 0.01 "$tmp/q-merged.gguf" "$tmp/qwen2.gguf" --lora "$tmp/q.gguf" --cache-type f32

# phi3's fused QKV and gate/up: each view of the fused matrix takes its own rows of B. The reference
# does not run phi3: the judge is the merged model through nucleus's plain pass (which archs.sh holds
# to transformers' float64)
P3=$SHARED/archs/phi3/phi3-f16.gguf
gen adapter "$P3" -o "$tmp/p.gguf" --targets attn_qkv,ffn_up,ffn_down --rank 4 --alpha 8
gen merge "$P3" -o "$tmp/p-merged.gguf" "$tmp/p.gguf:1"
ours=$("$NUCLEUS" score -m "$P3" --lora "$tmp/p.gguf" --ids $IDS --all --cache-type f32 2>&1)
merged=$("$NUCLEUS" score -m "$tmp/p-merged.gguf" --ids $IDS --all --cache-type f32 2>&1)
/usr/bin/python3 - "$ours" "$merged" <<'PY' && ok || bad "phi3's fused views: $ours"
import json, sys
a, b = (json.loads(x)["top_logprobs"] for x in sys.argv[1:3])
dev = max(abs(x[1] - y[1]) if x[0] == y[0] else float("inf") for sa, sb in zip(a, b) for x, y in zip(sa, sb))
print("phi3: max deviation from the merged model %.2e" % dev)
sys.exit(0 if dev <= 1e-4 else 1)
PY

# the same bits with one thread or two, and from decoding (score --greedy) as from a prompt's pass
one=$("$NUCLEUS" score -m "$S656" --lora "$tmp/b1.gguf" --ids $IDS --all -t 1 2>&1)
two=$("$NUCLEUS" score -m "$S656" --lora "$tmp/b1.gguf" --ids $IDS --all -t 2 2>&1)
expect_eq "one thread = two" "$one" "$two"
greedy=$("$NUCLEUS" score -m "$S656" --lora "$tmp/b1.gguf" --ids $IDS --greedy 6 2>&1)
/usr/bin/python3 - "$greedy" "$NUCLEUS" "$S656" "$tmp/b1.gguf" <<'PY' && ok || bad "decode = prompt pass: $greedy"
import json, subprocess, sys
g = json.loads(sys.argv[1])
ids = g["prompt_ids"] + g["ids"][:-1]
full = json.loads(subprocess.run([sys.argv[2], "score", "-m", sys.argv[3], "--lora", sys.argv[4], "--all",
                                  "--ids", ",".join(map(str, ids))], capture_output=True, text=True).stdout)
n = len(g["prompt_ids"])
sys.exit(0 if full["top_logprobs"][n - 1:] == g["top_logprobs"] else 1)
PY

# run and the server: the same greedy text; without the adapter another one
text=$("$NUCLEUS" run -m "$S260" --lora "$tmp/a.gguf" -p "Once upon a time" -n 24 --temp 0 2>/dev/null)
plain=$("$NUCLEUS" run -m "$S260" -p "Once upon a time" -n 24 --temp 0 2>/dev/null)
[ "$text" != "$plain" ] && ok || bad "the adapter does not change run's text: $text"
if start_server lora -m "$S260" --lora "$tmp/a.gguf" -c 256; then
    got=$(curl -s "$url_lora/v1/completions" -H 'Content-Type: application/json' \
        -d '{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}' |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"], end="")')
    expect_eq "the server's text = run's" "Once upon a time$got" "$text"
    expect_eq "GET /lora-adapters" "$(curl -s "$url_lora/lora-adapters")" "[{\"id\":0,\"path\":\"$tmp/a.gguf\",\"scale\":1}]"
    expect_eq "POST /lora-adapters" "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url_lora/lora-adapters" \
        -H 'Content-Type: application/json' -d '[{"id": 0, "scale": 0.5}]')" 405
    stop_server lora
fi
expect_err "router mode" "router mode does not take adapters" "$NUCLEUS" serve --models-dir "$tmp" --lora "$tmp/a.gguf"

# a prompt cache holds the adapters' fingerprint
"$NUCLEUS" run -m "$S260" --lora "$tmp/a.gguf" -p "Once upon a time" -n 2 --prompt-cache "$tmp/pc.bin" >/dev/null 2>&1
expect_err "prompt cache without the adapter" "written for another model" \
    "$NUCLEUS" run -m "$S260" -p "Once upon a time" -n 2 --prompt-cache "$tmp/pc.bin"

# malformed adapters and what cannot take one, each refused naming it
refuse() { # what needle gen-args... (an adapter of stories260K)
    local what=$1 needle=$2; shift 2
    gen adapter "$S260" -o "$tmp/bad.gguf" "$@" || { bad "$what: generator failed"; return; }
    expect_err "$what" "$needle" "$NUCLEUS" run -m "$S260" --lora "$tmp/bad.gguf" -p hi -n 1
}
refuse "a model, not an adapter" 'general.type is "model", not "adapter"' --general-type model
refuse "another architecture" "an adapter for the architecture 'qwen2', the model is 'llama'" --arch-name qwen2
refuse "not LoRA" 'adapter.type is "control_vector": only "lora"' --adapter-type control_vector
refuse "an unknown key" "unknown key 'adapter.lora.dropout'" --extra-key adapter.lora.dropout
refuse "an activated LoRA" "an activated LoRA (adapter.alora.invocation_tokens)" --extra-key adapter.alora.invocation_tokens
refuse "lora_a alone" "'blk.1.attn_q.weight.lora_a' has no 'blk.1.attn_q.weight.lora_b'" --only-a blk.1.attn_q.weight
refuse "ranks that differ" "expected [inputs, rank] and [rank, outputs]" --rank-mismatch blk.0.attn_v.weight
refuse "B short of outputs" "'blk.2.attn_q.weight' has 64 inputs and 64 outputs, its adapter 64 and 32" --short-b blk.2.attn_q.weight
refuse "a weight the model lacks" "the model has no weight 'blk.9.attn_q.weight'" --targets attn_q --raw-target blk.9.attn_q.weight
refuse "the embeddings" "the token embeddings (a lookup, not a product) cannot take a LoRA" --targets token_embd
expect_err "a wrong shape" "its adapter 64 and 64" "$NUCLEUS" run -m "$S656" --lora "$tmp/a.gguf" -p hi -n 1
gen adapter "$SHARED/archs/qwen3moe/qwen3moe-f16.gguf" -o "$tmp/moe.gguf" --targets ffn_gate_exps,attn_q
expect_err "the experts" "LoRA on the experts' weights is not supported" \
    "$NUCLEUS" run -m "$SHARED/archs/qwen3moe/qwen3moe-f16.gguf" --lora "$tmp/moe.gguf" -p hi -n 1
expect_err "a Hugging Face directory" "LoRA adapters apply to GGUF models" \
    "$NUCLEUS" run -m "$SHARED/models/tinystories-656k/hf" --lora "$tmp/b1.gguf" -p hi -n 1
mkfifo "$tmp/fifo"
expect_err "a FIFO" "a FIFO, not a regular file" timeout 10 "$NUCLEUS" run -m "$S260" --lora "$tmp/fifo" -p hi -n 1
expect_err "a missing file" "cannot open" "$NUCLEUS" run -m "$S260" --lora "$tmp/none.gguf" -p hi -n 1
expect_err "--lora-scaled without its scale" "--lora-scaled" "$NUCLEUS" run -m "$S260" --lora-scaled "$tmp/a.gguf"
expect_err "a scale that is no number" "--lora-scaled" "$NUCLEUS" run -m "$S260" --lora-scaled "$tmp/a.gguf" x -p hi

echo "lora: $pass passed, $fail failed"
[ $fail -eq 0 ]
