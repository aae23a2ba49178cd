#!/usr/bin/env bash
# Instructions per weight of the kernels, NEON beside the x86 sets, counted the same way for all:
# guest instructions under QEMU (qemu-aarch64 for the NEON set, qemu-x86_64 -cpu max for the
# scalar and AVX2 sets; QEMU has no AVX-512) by bench/insn_count.c, the NEON set on three CPU
# models (without SDOT, with SDOT, with SDOT and I8MM: kernels_neon.h's three copies). A speed measured under QEMU
# says nothing about an ARM CPU; the instructions a product executes per weight say how much work
# each set does for it, and NEON's 128-bit vectors against AVX2's 256-bit ones put the expected
# ratio near 2.
#
#   bash bench/insns.sh [--only REGEX] [-T TOKENS]
#
# For each type: kernels_bench --insns runs N products of T tokens over 64 x 2048 weights in the
# default mode (int16 activations, the interleaved layout where the set uses it); the difference
# between N = 3 and N = 1 divided by 2 x 64 x 2048 x T is the instructions per weight and token.
# T = 1 is decode's matrix-vector product, T (default 64) the prefill's matrix product. Needs
# qemu-user and gcc-aarch64-linux-gnu (make test-deps). Not part of `make test`: a few minutes.
set -eu
cd "$(dirname "$0")/.."
only=. tokens=64
while [ $# -gt 0 ]; do
    case $1 in
        --only) only=$2; shift 2 ;;
        -T) tokens=$2; shift 2 ;;
        *) echo "usage: bash bench/insns.sh [--only REGEX] [-T TOKENS]" >&2; exit 2 ;;
    esac
done
make -s -j2 build/kernels_bench build/aarch64-bench/kernels_bench build/insn_count.so
plugin=build/insn_count.so

# count SET TYPE T N -> guest instructions of the whole run; the NEON sets by the CPU model QEMU
# emulates (kernels.c picks the set by HWCAP): cortex-a72 ASIMD only, neoverse-n1 SDOT, max I8MM
count() {
    local set=$1 runner=(qemu-x86_64 -cpu max) bin=build/kernels_bench
    case $set in
        neon) runner=(qemu-aarch64 -cpu cortex-a72) ;;
        neon-sdot) runner=(qemu-aarch64 -cpu neoverse-n1) ;;
        neon-i8mm) runner=(qemu-aarch64 -cpu max) ;;
    esac
    [[ $set == neon* ]] && set=neon bin=build/aarch64-bench/kernels_bench
    shift
    "${runner[@]}" -plugin "$plugin" "$bin" --insns "$set" "$@" 2>&1 >/dev/null | sed -n 's/^insns //p'
}
# per_weight SET TYPE T -> instructions per weight and token, or "-" where the set cannot run
per_weight() {
    local a b
    a=$(count "$1" "$2" "$3" 1) && b=$(count "$1" "$2" "$3" 3) && [ -n "$a" ] && [ -n "$b" ] || { echo -; return; }
    awk -v a="$a" -v b="$b" -v t="$3" 'BEGIN { printf "%.3f", (b - a) / (2 * 64 * 2048 * t) }'
}
ratio() { awk -v x="$1" -v n="$2" 'BEGIN { if (x + 0 > 0 && n + 0 > 0) printf "%.2f", n / x; else printf "-" }'; }

types="F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS IQ3_S MXFP4"
echo "Instructions per weight and token under QEMU ($(qemu-aarch64 --version | head -1)), bench/insns.sh -T $tokens, $(date +%F)"
for t in 1 "$tokens"; do
    echo
    [ "$t" = 1 ] && echo "T = 1 (decode's matrix-vector product):" || echo "T = $t (a prefill's matrix product):"
    echo
    echo "| type | scalar | AVX2 | NEON | NEON + SDOT | NEON + I8MM | NEON / AVX2 | NEON + I8MM / AVX2 |"
    echo "|---|---|---|---|---|---|---|---|"
    for type in $types; do
        [[ $type =~ $only ]] || continue
        s=$(per_weight scalar "$type" "$t") x=$(per_weight avx2 "$type" "$t")
        n=$(per_weight neon "$type" "$t") d=$(per_weight neon-sdot "$type" "$t") m=$(per_weight neon-i8mm "$type" "$t")
        echo "| $type | $s | $x | $n | $d | $m | $(ratio "$x" "$n") | $(ratio "$x" "$m") |"
    done
done
