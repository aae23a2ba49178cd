#!/usr/bin/env bash
# Runs every test suite and prints one closing line "N passed, N failed" summing them all.
# Each suite (a unit-test binary or an e2e script) ends its output with its own
# "<name>: N passed, N failed" line; a suite that exits non-zero without such a line counts as
# one failure.
set -u
cd "$(dirname "$0")/.."
export NUCLEUS_ROOT=$PWD
export SHARED=${SHARED:-$(cd .. && pwd)/shared}
total_pass=0 total_fail=0 failed_suites=()
# What each failing suite said, repeated above the closing line: a CI log is often read from its
# tail only.
digest=$(mktemp)
trap 'rm -f "$digest"' EXIT

run_suite() { # name, command...
    local name=$1; shift
    local log; log=$(mktemp)
    local start=$SECONDS
    "$@" >"$log" 2>&1
    local rc=$?
    local line; line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    local p=0 f=0
    if [[ $line =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then p=${BASH_REMATCH[1]}; f=${BASH_REMATCH[2]}; fi
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    printf '%-28s %5d passed %3d failed  (%ds)\n' "$name" "$p" "$f" $((SECONDS - start))
    grep '^SKIPPED' "$log" | sed 's/^/    | /' # what a suite could not check here, said where everyone reads
    if [ "$f" -ne 0 ]; then
        failed_suites+=("$name")
        sed 's/^/    | /' "$log" | tail -n 60
        { echo "$name:"
          grep -E 'FAIL|ERROR|Sanitizer|runtime error' "$log" | head -n 12 | grep . || tail -n 8 "$log"
        } | sed 's/^/    /' >>"$digest"
    fi
    rm -f "$log"
}

for t in build/san/tests/test_*; do
    [ -x "$t" ] && run_suite "$(basename "$t")" "$t"
done
# The CUDA backend's tests: emulated on the CPU, and built for the GPU where nvcc is (skipping,
# saying so, without a GPU).
for t in build/emu/tests/test_* build/cuda/tests/test_*; do
    d=${t#build/}
    [ -x "$t" ] && run_suite "$(basename "$t") (${d%%/*})" "$t"
done
for s in tests/e2e/*.sh; do
    [ -f "$s" ] && run_suite "$(basename "$s" .sh)" bash "$s"
done

# The forward pass against the exact reference with the other kernel sets too (capped to what
# the CPU has): the AVX2 set is what CPUs without AVX-512 run, the scalar one what other
# architectures run (on AArch64 "avx2" caps nothing: the NEON set runs; tests/e2e/neon.sh
# tests that set under qemu on x86 machines).
for isa in avx2 scalar; do
    run_suite "test_forward ($isa)" env NUCLEUS_ISA=$isa build/san/tests/test_forward
    run_suite "reference ($isa)" env NUCLEUS_ISA=$isa bash tests/e2e/reference.sh
    run_suite "archs ($isa)" env NUCLEUS_ISA=$isa bash tests/e2e/archs.sh --forms gguf,hf
    run_suite "quants ($isa)" env NUCLEUS_ISA=$isa bash tests/e2e/quants.sh
    run_suite "kv_quant ($isa)" env NUCLEUS_ISA=$isa bash tests/e2e/kv_quant.sh
done

if [ ${#failed_suites[@]} -ne 0 ]; then
    echo "failing suites: ${failed_suites[*]}"
    cat "$digest"
fi
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
