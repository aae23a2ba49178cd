#!/usr/bin/env bash
# End-to-end checks of `nucleus quantize DIR OUT TYPE` on Hugging Face directories (sanitized
# build), against shared/archs/<name>: the HF directory and the GGUF llama.cpp's
# convert_hf_to_gguf.py wrote of it (F16). For every architecture and for F32, F16, BF16, Q8_0 and
# Q4_K_M, quantising the directory must give the file that quantising the converter's GGUF
# gives: the same metadata and tensor table (`nucleus inspect`, keys in any order) and the same
# tensor data, byte for byte; and `nucleus score` of the two Q4_K_M files the same output. With a
# llama.cpp build ($LLAMA_BIN, default /work/peers/mesh/build/bin; absent in CI, then skipped and
# said so), llama-simple must load our F16 file and generate what it generates from the
# converter's. Then the progress lines and clean refusals (the metadata-level comparison with the
# converter's own file, byte for byte, is tests/unit/test_quantize_hf.c).
# Ends with "quantize_hf: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
BIN=${NUCLEUS_BIN:-build/san/nucleus}
A=$SHARED/archs
LLAMA_BIN=${LLAMA_BIN:-/work/peers/mesh/build/bin}
. tests/lib/checks.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
ARCHS="llama3 qwen2 qwen3 qwen3moe gemma2 gemma3 phi3 mixtral olmo2 granite smollm3 gptoss"

quantize() { # SRC OUT TYPE: quietly, failing the check on an error
    "$BIN" quantize "$@" -t 2 2>"$tmp/log" || { bad "quantize $*: $(tail -n 3 "$tmp/log")"; return 1; }
}
# The metadata and tensor table as `nucleus inspect` lists them, sorted (the key order differs:
# the converter writes general.file_type among its keys, quantize appends it).
table() { "$BIN" inspect "$1" | tail -n +2 | sort; }
data() { # the tensor data section
    local off; off=$("$BIN" inspect "$1" | head -n 1 | sed 's/.*data offset \([0-9]*\).*/\1/')
    tail -c +$((off + 1)) "$1"
}

for a in $ARCHS; do
    for t in F32 F16 BF16 Q8_0 Q4_K_M; do
        quantize "$A/$a/$a-f16.gguf" "$tmp/ref.gguf" $t || continue
        quantize "$A/$a/hf" "$tmp/$a-$t.gguf" $t || continue
        if [ "$(table "$tmp/ref.gguf")" == "$(table "$tmp/$a-$t.gguf")" ]; then ok
        else bad "$a $t: metadata or tensor table differs: $(diff <(table "$tmp/ref.gguf") <(table "$tmp/$a-$t.gguf") | head -n 6)"; fi
        if cmp -s <(data "$tmp/ref.gguf") <(data "$tmp/$a-$t.gguf"); then ok; else bad "$a $t: tensor data differs"; fi
        [ $t == Q4_K_M ] && cp "$tmp/ref.gguf" "$tmp/$a-ref-q4km.gguf"
    done
    # (olmo2's quantised attn_output, head groups of 16, is refused by nucleus's forward pass:
    # then both files must be refused alike)
    ids=3,100,200,300,400,500
    s1=$("$BIN" score -m "$tmp/$a-ref-q4km.gguf" --ids $ids --greedy 4 -t 2 2>&1 | sed "s|$tmp/[^ :]*||g")
    s2=$("$BIN" score -m "$tmp/$a-Q4_K_M.gguf" --ids $ids --greedy 4 -t 2 2>&1 | sed "s|$tmp/[^ :]*||g")
    if [ -n "$s1" ] && [ "$s1" == "$s2" ]; then ok; else bad "$a: score of the two Q4_K_M files: [$s1] vs [$s2]"; fi
done

# llama.cpp loads the converted file and computes what it computes from the converter's.
if [ -x "$LLAMA_BIN/llama-simple" ]; then
    for a in llama3 gemma2 phi3 qwen3moe gptoss; do
        run_simple() { LD_LIBRARY_PATH=$LLAMA_BIN "$LLAMA_BIN/llama-simple" -m "$1" -n 8 "Hello world" 2>/dev/null; }
        want=$(run_simple "$A/$a/$a-f16.gguf"); got=$(run_simple "$tmp/$a-F16.gguf")
        if [ -n "$want" ] && [ "$want" == "$got" ]; then ok; else bad "$a: llama-simple: [$got] want [$want]"; fi
    done
else
    echo "quantize_hf: no llama.cpp at $LLAMA_BIN (LLAMA_BIN): llama-simple check skipped"
fi

# Progress: one line per converted tensor, then the quantiser's lines.
"$BIN" quantize "$A/qwen2/hf" "$tmp/p.gguf" Q8_0 2>"$tmp/log"
expect_in "progress: conversion" "convert [ 26/ 26] " "$(cat "$tmp/log")"
expect_in "progress: summary" "26 tensors" "$(tail -n 1 "$tmp/log")"

# Refusals: clear errors, no crash, nothing left beside the output.
mkdir -p "$tmp/empty" "$tmp/notok" "$tmp/bert" "$tmp/mxfp4" "$tmp/out"
expect_err "not a model directory" "config.json" "$BIN" quantize "$tmp/empty" "$tmp/out/x.gguf" Q8_0
ln -s "$A/llama3/hf/config.json" "$A/llama3/hf/model.safetensors" "$tmp/notok/"
expect_err "no tokenizer" "no tokenizer.json or tokenizer.model" "$BIN" quantize "$tmp/notok" "$tmp/out/x.gguf" Q8_0
ln -s "$A/llama3/hf/model.safetensors" "$A/llama3/hf/tokenizer.json" "$tmp/bert/"
sed 's/"model_type": "llama"/"model_type": "bert"/' "$A/llama3/hf/config.json" >"$tmp/bert/config.json"
expect_err "unsupported architecture" 'model_type "bert" is not supported' "$BIN" quantize "$tmp/bert" "$tmp/out/x.gguf" Q8_0
ln -s "$A/gptoss/hf/model.safetensors" "$A/gptoss/hf/tokenizer.json" "$tmp/mxfp4/"
sed 's/^{/{"quantization_config": {"quant_method": "mxfp4"},/' "$A/gptoss/hf/config.json" >"$tmp/mxfp4/config.json"
expect_err "quantised checkpoint" 'quantised checkpoint' "$BIN" quantize "$tmp/mxfp4" "$tmp/out/x.gguf" Q8_0
expect_err "missing directory" "$tmp/none" "$BIN" quantize "$tmp/none" "$tmp/out/x.gguf" Q8_0
expect_err "unwritable output" "$tmp/no/x.gguf" "$BIN" quantize "$A/llama3/hf" "$tmp/no/x.gguf" Q8_0
expect_eq "nothing left behind" "$(ls -A "$tmp/out")" ""

echo "quantize_hf: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
