#!/usr/bin/env bash
# The GPU forward pass (src/forward/forward.c over the CUDA backend, src/cuda) against the exact references.
# (1) Emulated, everywhere: build/emu/nucleus runs the CUDA source on the CPU (src/cuda/emulate.h),
#     so the GPU pass's logic is checked here and in CI: the real trained models of shared/golden,
#     the twelve architectures of shared/archs the GPU runs (the layers of 2026 refused, naming them), every type of shared/quants and
#     reference.sh's tiny models in every weight type, against float64 (an f16 cache); kv_quant.sh's
#     models with every cache type against the reference that rounds keys and values alike;
#     graphs against eager launches; a served batch against its requests alone; what it lacks
#     refused, naming it, and a build without CUDA saying how to get it; the
#     layers split between the CPU and the GPU (-ngl); a prompt cache saved and reused, and a
#     context shift, on the GPU.
# (2) On a GPU (build/cuda/nucleus, make cuda, and a GPU that test_ops finds): every record of
#     shared/golden, shared/quants and shared/archs. Without one it says so, loudly.
# make test (tests/lib/tier.sh) runs (1) on a subset that covers every kernel path: of shared/golden,
# shared/quants and shared/archs the records that differ in what they exercise (the first of each
# file, and the longer ones), every architecture as GGUF (F16 weights) and the Hugging Face form
# (BF16 weights) of a dense model and of each kind of experts, every weight type, and every key
# type and value type of the cache; make test-full and a run by hand: every record of both forms.
# Ends with "cuda: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
. tests/lib/checks.sh
. tests/lib/tier.sh
sel=() sub=full
if ! tier_is full; then sel=(--sample) sub=sample; fi
BUILD=${BUILD:-build}
EMU=$BUILD/emu/nucleus
STORIES=$SHARED/models/stories260K/stories260K.gguf
tmp=$(mktemp -d)
NUCLEUS=$EMU
. tests/lib/servers.sh
trap servers_cleanup EXIT

wrap() { # file, flags...: the emulated nucleus with the flags added to every command that runs the model
    local file=$1
    shift
    printf '#!/bin/sh\ncase "$1" in run|chat|serve|score|perplexity|bench) exec "%s" "$@" %s;; esac\nexec "%s" "$@"\n' \
        "$PWD/$EMU" "$*" "$PWD/$EMU" >"$file"
    chmod +x "$file"
}

absorb() { # name, command...: a checker's own "N passed, N failed" added to ours; its tables and failures shown
    local name=$1 out line
    shift
    out=$("$@" 2>&1)
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -n 1)
    if [[ $line =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
        pass=$((pass + BASH_REMATCH[1]))
        fail=$((fail + BASH_REMATCH[2]))
    else
        bad "$name: no summary: ${out: -800}"
    fi
    echo "== $name"
    grep -E '^\||^FAIL' <<<"$out" | head -n 40
}

# (1) emulated
absorb "golden, emulated GPU" /usr/bin/python3 tests/e2e/golden_check.py --nucleus "$EMU" --shared "$SHARED" \
    --models "$MODELS_DIR" --device cuda --cache-types f16 --only stories260K "${sel[@]}"
absorb "golden, emulated GPU" /usr/bin/python3 tests/e2e/golden_check.py --nucleus "$EMU" --shared "$SHARED" \
    --models "$MODELS_DIR" --device cuda --cache-types f16 --only tinystories "${sel[@]}"
# the twelve architectures the GPU runs; the layers of 2026 are refused, naming the layer and what is missing
GPU_ARCHS=gemma2,gemma3,gptoss,granite,llama3,mixtral,olmo2,phi3,qwen2,qwen3,qwen3moe,smollm3
if tier_is full; then
    absorb "archs, emulated GPU" /usr/bin/python3 tests/e2e/archs_check.py --nucleus "$EMU" --shared "$SHARED" \
        --device cuda --forms gguf,hf --only $GPU_ARCHS
else
    # every architecture's own kernels from its GGUF form (F16 weights); the BF16 weights of the
    # Hugging Face form through a dense model's products and the three kinds of experts
    absorb "archs, emulated GPU" /usr/bin/python3 tests/e2e/archs_check.py --nucleus "$EMU" --shared "$SHARED" \
        --device cuda --forms gguf --sample --only $GPU_ARCHS
    absorb "archs, emulated GPU" /usr/bin/python3 tests/e2e/archs_check.py --nucleus "$EMU" --shared "$SHARED" \
        --device cuda --forms hf --sample --only llama3,mixtral,qwen3moe,gptoss
fi
expect_err "qwen35 on the GPU" "the cuda backend cannot run layer 0 (a gated DeltaNet): it lacks the operation 'conv'" \
    "$EMU" score -m "$SHARED/archs/qwen35/qwen35-f32.gguf" --ids 1,2,3 --device cuda
expect_err "deepseek2 on the GPU" "cannot run layer 0 (latent attention): it lacks the operation 'mul_heads'" \
    "$EMU" score -m "$SHARED/archs/deepseek2/deepseek2-f32.gguf" --ids 1,2,3 --device cuda
expect_err "mistral3 on the GPU" "the GPU forward pass cannot run layer 0: it does not support attention of other shapes" \
    "$EMU" score -m "$SHARED/archs/mistral3/mistral3-f32.gguf" --ids 1,2,3 --device cuda
expect_err "granitehybrid's last layer on the GPU" "cannot run layer 4 (attention): it lacks the operation 'ew'" \
    "$EMU" score -m "$SHARED/archs/granitehybrid/granitehybrid-f32.gguf" --ids 1,2,3 -ngl 1
# LoRA adapters are the CPU's (tests/e2e/lora.sh): refused on the GPU, whole or in part
/usr/bin/python3 tests/tools/lora_gguf.py adapter "$SHARED/models/stories260K/stories260K.gguf" -o "$tmp/lora.gguf"
for where in "--device cuda" "-ngl 1"; do
    expect_err "a LoRA adapter, $where" "the cuda backend cannot apply LoRA adapters (run on the CPU)" \
        "$EMU" score -m "$SHARED/models/stories260K/stories260K.gguf" --lora "$tmp/lora.gguf" --ids 1,2,3 $where
done
# tests/e2e/reference.sh's tiny models (every weight type, MQA, partial rotary, rope_freqs, qwen2's
# biases) against reference-forward, through the GPU pass
wrap "$tmp/gpu-nucleus" --device cuda
absorb "reference, emulated GPU" env NUCLEUS_BIN="$tmp/gpu-nucleus" NUCLEUS_TEST_TIER=$sub bash tests/e2e/reference.sh
# every weight type: shared/quants (read from their blocks on the GPU) and
# quants.sh's MXFP4 model
absorb "quants, emulated GPU" env NUCLEUS_BIN="$tmp/gpu-nucleus" NUCLEUS_TEST_TIER=$sub bash tests/e2e/quants.sh --cache-types f16
# every key / value cache type (F16, F32, Q8_0, Q4_0) against the reference with the same rounding
absorb "kv_quant, emulated GPU" env NUCLEUS_BIN="$tmp/gpu-nucleus" NUCLEUS_TEST_TIER=$sub bash tests/e2e/kv_quant.sh
# the layers split: the first on the CPU, the last (-ngl) and the output on the GPU
wrap "$tmp/split-nucleus" -ngl 2
absorb "golden, 2 of 5 layers on the emulated GPU" /usr/bin/python3 tests/e2e/golden_check.py --nucleus "$tmp/split-nucleus" \
    --shared "$SHARED" --models "$MODELS_DIR" --cache-types f16 --only stories260K "${sel[@]}"
wrap "$tmp/split1-nucleus" -ngl 1
absorb "archs, the last layer on the emulated GPU" /usr/bin/python3 tests/e2e/archs_check.py --nucleus "$tmp/split1-nucleus" \
    --shared "$SHARED" --device cuda --forms gguf --only gemma3,gptoss,qwen2 "${sel[@]}"

IDS=1,2,3,4
expect_err "a negative layer count" "-ngl: -2 is outside the allowed range -1.." "$EMU" score -m "$STORIES" --ids $IDS -ngl -2
expect_err "a bad --device" "expected cpu or cuda" "$EMU" score -m "$STORIES" --ids $IDS --device tpu
expect_err "the CPU build" "built without the CUDA backend (build it with \`make CUDA=1\`)" \
    "$BUILD/nucleus" score -m "$STORIES" --ids $IDS --device cuda
# a prompt saved from the GPU and reused by the next run; a context shift (the keys turned on the GPU)
# generating past the context (test_gpu_forward checks both against recomputed logits)
"$EMU" run -m "$STORIES" -p "Once upon a time there was" -n 4 --temp 0 --device cuda --prompt-cache "$tmp/p.kv" \
    >/dev/null 2>"$tmp/save.err"
out=$("$EMU" run -m "$STORIES" -p "Once upon a time there was" -n 4 --temp 0 --device cuda --prompt-cache "$tmp/p.kv" 2>&1)
expect_in "the prompt cache reused on the GPU" "reused)" "$out"
out=$("$EMU" run -m "$STORIES" -p "Once upon a time" -n 80 -c 32 --context-shift --temp 0 --device cuda 2>&1)
expect_in "a context shift on the GPU" "generated 80 tokens" "$out"
# -ngl with every layer is the GPU (and -ngl 0 the CPU): run says where it ran
out=$("$EMU" run -m "$STORIES" -p "Once upon a time" -n 8 --temp 0 -ngl 99 2>&1)
expect_in "run -ngl 99 names the GPU" "[gpu] nucleus CUDA emulator" "$out"
out=$("$EMU" run -m "$STORIES" -p "Once upon a time" -n 8 --temp 0 -ngl 0 2>&1)
if grep -qF "[gpu]" <<<"$out"; then bad "run -ngl 0 ran on the GPU: $out"; else ok; fi

# Graphs replay what eager launches compute: the same bits
ids=$(seq -s, 1 40)
with=$("$EMU" score -m "$STORIES" --ids "$ids" --all --top 5 --device cuda 2>&1)
without=$(NUCLEUS_CUDA_GRAPHS=0 "$EMU" score -m "$STORIES" --ids "$ids" --greedy 6 --top 5 --device cuda 2>&1)
with_g=$("$EMU" score -m "$STORIES" --ids "$ids" --greedy 6 --top 5 --device cuda 2>&1)
expect_eq "greedy steps with and without graphs" "$with_g" "$without"
expect_in "score on the GPU" '"top_logprobs"' "$with"

# The server on the GPU: four sampled completions at once give what each gives alone (a token's
# outputs do not depend on the batch it is in)
if start_server gpu -m "$STORIES" --device cuda --parallel 4 -c 128; then
    complete() { # seed
        curl -s "$url_gpu/v1/completions" -H "Content-Type: application/json" -d "{\"prompt\": \"Once upon a time\", \"max_tokens\": 24, \"temperature\": 0.9, \"seed\": $1}" |
            /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["choices"][0]["text"])'
    }
    for i in 1 2 3 4; do complete $i >"$tmp/alone.$i"; done
    waits=()
    for i in 1 2 3 4; do
        complete $i >"$tmp/together.$i" &
        waits+=($!)
    done
    wait "${waits[@]}"
    for i in 1 2 3 4; do
        expect_eq "completion $i in a batch of 4 and alone" "$(cat "$tmp/together.$i")" "$(cat "$tmp/alone.$i")"
    done
    if [ "$(cat "$tmp/alone.1")" != "$(cat "$tmp/alone.2")" ] && [ -s "$tmp/alone.1" ]; then ok
    else bad "seeds 1 and 2 gave the same text (or none): $(cat "$tmp/alone.1")"; fi
    stop_server gpu
fi

# (2) a real GPU
if [ -x "$BUILD/cuda/nucleus" ] && [ -x "$BUILD/cuda/tests/test_ops" ] &&
    ! "$BUILD/cuda/tests/test_ops" 2>&1 | grep -q '^SKIPPED'; then
    absorb "golden, GPU" /usr/bin/python3 tests/e2e/golden_check.py --nucleus "$BUILD/cuda/nucleus" --shared "$SHARED" \
        --models "$MODELS_DIR" --device cuda --cache-types f16
    absorb "quants, GPU" /usr/bin/python3 tests/e2e/golden_check.py --nucleus "$BUILD/cuda/nucleus" --shared "$SHARED" \
        --models "$MODELS_DIR" --device cuda --cache-types f16 --set quants
    absorb "archs, GPU" /usr/bin/python3 tests/e2e/archs_check.py --nucleus "$BUILD/cuda/nucleus" --shared "$SHARED" \
        --device cuda --forms gguf,hf --only $GPU_ARCHS
else
    echo "SKIPPED: no GPU here (or no make cuda build): the golden, quants and archs records were checked on the"
    echo "SKIPPED: emulated GPU only; on a machine with an NVIDIA GPU, make cuda and rerun this script"
fi

echo "cuda: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
