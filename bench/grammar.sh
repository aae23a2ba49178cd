#!/usr/bin/env bash
# The grammar stage's cost per token beside the decode step (bench/grammar_bench.c): a synthetic
# Qwen2.5-0.5B Q8_0 (the real 151,936-token vocabulary, random weights; made by synth-gguf into
# build/models), a JSON document followed token by token under the generic JSON grammar and under
# a JSON-schema grammar. Prints a markdown table with the ratio mask / decode step.
#
#   bash bench/grammar.sh [MODEL] [THREADS]     (default: that model, 2 threads)
set -u
cd "$(dirname "$0")/.."
. tests/lib/models.sh
make -s build/grammar_bench || exit 1
model=${1:-$(synth_model synth-qwen05-q8 --shape qwen2.5-0.5b --type q8_0)} || exit 1
build/grammar_bench "$model" "${2:-2}" || exit 1
echo
echo "bash bench/grammar.sh $*; $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"
