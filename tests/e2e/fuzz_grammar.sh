#!/usr/bin/env bash
# The grammar fuzzers, each for a bounded time from its committed seeds: tests/fuzz/fuzz_gbnf.c
# (GBNF text and a text to feed; the mask against a per-token check at every byte) and
# tests/fuzz/fuzz_json_schema.c (schemas; what converts must parse). Each run and its check as
# tests/lib/fuzz_run.sh says (FUZZ_SECONDS, default 30, per harness; FUZZ_RUNS for bench/fuzz.sh).
# Ends with "fuzz_grammar: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
passed=0 failed=0
for h in gbnf json_schema; do
    bin=build/fuzz/fuzz_$h
    if ! make -s "$bin"; then
        echo "fuzz_$h: cannot build $bin"
        failed=$((failed + 1))
        continue
    fi
    out=$(
        work=$(mktemp -d)
        trap 'rm -rf "$work"' EXIT
        mkdir -p "$work/corpus"
        cp tests/fuzz/corpus/$h/* "$work/corpus/"
        name=fuzz_$h max_len=4096
        . tests/lib/fuzz_run.sh
    )
    echo "$out"
    if grep -q "^fuzz_$h: 1 passed, 0 failed" <<<"$out"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "fuzz_grammar: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
