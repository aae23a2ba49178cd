#!/usr/bin/env bash
# `nucleus quantize` beside llama.cpp's llama-quantize on the same sources: the README's
# "Quantize" table. For each file type: the mean KL divergence of the quantised model's
# next-token distributions from the unquantised model's (tests/tools/kl_divergence.py: nucleus's
# own forward pass on both files, 256 tokens of bench/data/stories.txt, teacher forcing), for our
# file and for llama-quantize's, on shared/quants/tiny-k-f16.gguf (a small llama with random
# weights whose rows suit every block; the real models in shared, stories260K and TinyStories-656K,
# have rows of 64 and 128 that no K-quant block fits, and head dims of 8 and 16 that nucleus
# cannot compute quantised attention with); then the time each takes to quantise a larger F16
# file (TinyLlama-1.1B's shape with 4 layers, 615 MB, synth-gguf) with THREADS threads.
#
#   bash bench/quantize.sh --llamacpp DIR [-t THREADS] [--types "Q8_0 Q4_K_M ..."]
#
# DIR holds a llama.cpp build's bin/llama-quantize (shared/tools/build-llamacpp). Files go to
# build/models and build/quantize-bench (never committed). Not part of `make test`.
set -eu
cd "$(dirname "$0")/.."
. tests/lib/models.sh
threads=2 lc="" types="Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K"
while [ $# -gt 0 ]; do
    case $1 in
        --llamacpp) lc=$2; shift 2 ;;
        -t) threads=$2; shift 2 ;;
        --types) types=$2; shift 2 ;;
        *) echo "usage: bash bench/quantize.sh --llamacpp DIR [-t THREADS] [--types LIST]" >&2; exit 2 ;;
    esac
done
LQ=$lc/bin/llama-quantize
[ -x "$LQ" ] || { echo "--llamacpp DIR: no DIR/bin/llama-quantize" >&2; exit 2; }
export LD_LIBRARY_PATH=$lc/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
make -s -j2 build/nucleus
out=build/quantize-bench; mkdir -p "$out"
tiny=$SHARED/quants/tiny-k-f16.gguf
big=$(synth_model tinyllama-1.1b-l4-f16 --shape tinyllama-1.1b --type f16 --layers 4)

seconds() { # COMMAND...: wall seconds of a successful run, else "failed"
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1 || { echo failed; return; }
    t1=$(date +%s.%N)
    echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }'
}
kl() { # BASE FILE...: "KL" per file
    /usr/bin/python3 tests/tools/kl_divergence.py --nucleus build/nucleus --base "$1" --text bench/data/stories.txt \
        --tokens 256 "${@:2}" | awk '{ printf "%s ", $2 }'
}

echo "| type | size (tiny-k) | mean KL: nucleus | llama-quantize | time, 615 MB F16: nucleus | llama-quantize |"
echo "|---|---|---|---|---|---|"
for t in $types; do
    build/nucleus quantize "$tiny" "$out/tiny-$t.gguf" "$t" -t "$threads" 2>/dev/null
    "$LQ" "$tiny" "$out/tiny-$t-lq.gguf" "$t" "$threads" >/dev/null 2>&1
    read -r k_ours k_theirs <<<"$(kl "$tiny" "$out/tiny-$t.gguf" "$out/tiny-$t-lq.gguf")"
    t_ours=$(seconds build/nucleus quantize "$big" "$out/big.gguf" "$t" -t "$threads")
    t_theirs=$(seconds "$LQ" "$big" "$out/big-lq.gguf" "$t" "$threads")
    rm -f "$out/big.gguf" "$out/big-lq.gguf"
    size=$(stat -c %s "$out/tiny-$t.gguf" | awk '{ printf "%.2f MB", $1 / 1e6 }')
    echo "| $t | $size | $k_ours | $k_theirs | $t_ours s | $t_theirs s |"
done
