#!/usr/bin/env bash
# Runs the test suites of a tier and prints one closing line "N passed, N failed" summing them all.
#   bash tests/run.sh [check|test|full] [-j N]
# The tiers (docs/testing.md): check, the unit tests and one pass of each judge (make check);
# test, everything that can fail on a behaviour, repetition cut (make test, the default); full,
# every kernel set x cache type x record, long fuzzing, the whole emulated GPU (make test-full).
# The scripts read the tier from NUCLEUS_TEST_TIER (run by hand, without it: full).
# -j N runs N suites at a time (default: make's -j, else 1); the suites whose checks are timed
# run alone. Each suite (a unit-test binary or an e2e script) ends its output with its own
# "<name>: N passed, N failed" line; a suite that exits non-zero without such a line counts as one
# failure.
set -u
cd "$(dirname "$0")/.."
export NUCLEUS_ROOT=$PWD
export SHARED=${SHARED:-$(cd .. && pwd)/shared}
tier=${NUCLEUS_TEST_TIER:-test}
jobs=
while [ $# -gt 0 ]; do
    case $1 in
        check|test|full) tier=$1 ;;
        -j) jobs=$2; shift ;;
        -j*) jobs=${1#-j} ;;
        *) echo "usage: tests/run.sh [check|test|full] [-j N]" >&2; exit 2 ;;
    esac
    shift
done
if [ -z "$jobs" ]; then
    # make -jN passes N on in MAKEFLAGS (" -j2 --jobserver-auth=..."); a bare -j: every core
    if [[ " ${MAKEFLAGS:-} " =~ \ -j([0-9]+) ]]; then jobs=${BASH_REMATCH[1]}
    elif [[ " ${MAKEFLAGS:-} " =~ \ -j\  ]]; then jobs=$(nproc)
    else jobs=1; fi
fi
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "tests/run.sh: -j wants a number, got '$jobs'" >&2; exit 2; }
export NUCLEUS_TEST_TIER=$tier
# make check: the unit tests built without the sanitizers (build/rel/tests, over the library `make`
# built) and the judges with build/nucleus: the edit-compile-test loop compiles only what changed.
units=build/san/tests
if [ "$tier" = check ]; then
    units=build/rel/tests
    export NUCLEUS_BIN=${NUCLEUS_BIN:-build/nucleus} NUCLEUS=${NUCLEUS:-build/nucleus}
fi
# The fuzzers' budget per harness (tests/lib/fuzz_run.sh): the committed corpus replayed and a few
# seconds of new inputs in `make test`, long runs in `make test-full`.
if [ -z "${FUZZ_SECONDS:-}" ] && [ -z "${FUZZ_RUNS:-}" ]; then
    if [ "$tier" = full ]; then export FUZZ_SECONDS=60; else export FUZZ_SECONDS=3; fi
fi

total_pass=0 total_fail=0 total_cpu=0 failed_suites=()
work=$(mktemp -d)
# What each failing suite said, repeated above the closing line: a CI log is often read from its
# tail only.
digest=$work/digest
: >"$digest"
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
start_all=$SECONDS

# suite_body ID NAME COMMAND...: runs one suite into $work/ID.{log,res}
suite_body() {
    local id=$1 name=$2; shift 2
    local log=$work/$id.log
    local start=$SECONDS TIMEFORMAT='%U %S'
    { time "$@" >"$log" 2>&1 </dev/null; } 2>"$work/$id.cpu"
    local rc=$?
    local line; line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    local p=0 f=0
    if [[ $line =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then p=${BASH_REMATCH[1]}; f=${BASH_REMATCH[2]}; fi
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    local cpu; cpu=$(awk '{ printf "%.0f", $1 + $2 }' "$work/$id.cpu" 2>/dev/null)
    echo "$p $f $((SECONDS - start)) ${cpu:-?}" >"$work/$id.res"
}

# report ID NAME: the suite's line (and what it said, when it failed), once it has finished
report() {
    local id=$1 name=$2 log=$work/$1.log p f s cpu
    read -r p f s cpu <"$work/$id.res"
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    total_cpu=$((total_cpu + ${cpu/\?/0}))
    printf '%-28s %5d passed %3d failed  (%ds, cpu %ss)\n' "$name" "$p" "$f" "$s" "$cpu"
    grep '^SKIPPED' "$log" | sed 's/^/    | /' # what a suite could not check here, said where everyone reads
    if [ "$f" -ne 0 ]; then
        failed_suites+=("$name")
        sed 's/^/    | /' "$log" | tail -n 60
        { echo "$name:"
          grep -E 'FAIL|ERROR|Sanitizer|runtime error' "$log" | head -n 12 | grep . || tail -n 8 "$log"
        } | sed 's/^/    /' >>"$digest"
    fi
}

# The node packages the suites compare with, installed before the suites start (the suites install
# what is missing themselves too, but two of them share tests/node_server, and two npm ci in one
# directory at once break it).
if [ "$tier" != check ] && command -v npm >/dev/null 2>&1; then
    for lock in tests/node*/package-lock.json; do
        d=$(dirname "$lock")
        [ -d "$d/node_modules" ] || (cd "$d" && npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1) ||
            echo "npm ci in $d failed: its suites will say so"
    done
fi

# The queue: suites start in the order given, up to $jobs at once, and are reported in that order.
names=() next_report=0 n_running=0
drain_reports() { # report the finished suites at the head of the queue
    while [ "$next_report" -lt "${#names[@]}" ] && [ -f "$work/$next_report.res" ]; do
        report "$next_report" "${names[$next_report]}"
        next_report=$((next_report + 1))
    done
}
wait_slot() { # until fewer than $1 suites run
    while :; do
        n_running=0
        local i
        for ((i = next_report; i < ${#names[@]}; i++)); do
            [ -f "$work/$i.res" ] || n_running=$((n_running + 1))
        done
        [ "$n_running" -lt "$1" ] && break
        sleep 0.2
    done
    drain_reports
}
# run_suite NAME COMMAND...: queued; ALONE=1 run_suite ...: runs with no other suite beside it (its
# checks time the server)
run_suite() {
    local id=${#names[@]}
    if [ -n "${ALONE:-}" ]; then wait_slot 1; else wait_slot "$jobs"; fi
    names+=("$1")
    suite_body "$id" "$@" &
    if [ -n "${ALONE:-}" ]; then wait_slot 1; fi
}

in_tier() { # SUITE: whether the tier runs it
    case $tier in
        full|test) return 0 ;;
        check) case $1 in test_*|golden|archs|quants|reference|lora|kv_quant|tokenizer|hf_mxfp4) return 0 ;; esac ;;
    esac
    return 1
}
# Alone: the suites that time the server; test_template, whose hostile templates must end within
# a 10 s guard (the slowest takes 4.5 s of CPU in the sanitized build); fuzz_grammar, one of whose
# seeds takes 5 s of the fuzzer's 10 s timeout.
alone=" hardening hardening_limits scaleout test_template fuzz_grammar "
e2e() { # NAME [ARGS...]: tests/e2e/NAME.sh, when the tier runs it
    local s=$1; shift
    [ -f "tests/e2e/$s.sh" ] && in_tier "$s" || return 0
    ALONE=$([[ $alone == *" $s "* ]] && echo 1) run_suite "$s" bash "tests/e2e/$s.sh" "$@"
}
unit() { # PATH: a unit-test binary, when the tier runs it
    local s; s=$(basename "$1")
    [ -x "$1" ] && in_tier "$s" || return 0
    ALONE=$([[ $alone == *" $s "* ]] && echo 1) run_suite "$s" "$1"
}
# The suites that run alone first (at the end they would wait for the longest one), then the slow
# ones, so that the last ones to finish are short ones.
unit "$units/test_template"
for s in hardening hardening_limits scaleout fuzz_grammar; do e2e "$s"; done
slow_e2e=" neon cuda tokenizer golden hostile_models grammar structured perplexity web spec $alone"
slow_unit=" test_kernels $alone"
for s in neon cuda; do e2e "$s"; done
if [ "$tier" != check ]; then
    # The CUDA backend's tests: emulated on the CPU, and on the GPU where there is one (the
    # Makefile builds build/cuda only then: without one, nvcc compiles the kernels as a check).
    gpu_tests=(); compgen -G '/dev/nvidia[0-9]*' >/dev/null && gpu_tests=(build/cuda/tests/test_*)
    for t in build/emu/tests/test_* "${gpu_tests[@]}"; do
        d=${t#build/}
        [ -x "$t" ] && run_suite "$(basename "$t") (${d%%/*})" "$t"
    done
fi
# The unit tests and the end-to-end scripts.
unit "$units/test_kernels"
for s in $slow_e2e; do [[ $s == neon || $s == cuda || $alone == *" $s "* ]] || e2e "$s"; done
for t in "$units"/test_*; do
    [[ $slow_unit == *" $(basename "$t") "* ]] || unit "$t"
done
for f in tests/e2e/*.sh; do
    s=$(basename "$f" .sh)
    [[ $slow_e2e == *" $s "* ]] || e2e "$s"
done

# The forward pass against the exact reference with the other kernel sets too (capped to what
# the CPU has): the AVX2 set is what CPUs without AVX-512 run, the scalar one what other
# architectures run (on AArch64 "avx2" caps nothing: the NEON set runs; tests/e2e/neon.sh
# tests that set under qemu on x86 machines). `make test` compares them on a sample where the
# native set has passed on every record; `make test-full` runs every record, cache type and form
# with each.
# In the sample (NUCLEUS_TEST_TIER=sample) each script keeps what a kernel set computes: every
# weight type, architecture and cache type, on the records that differ in what they exercise.
if [ "$tier" != check ]; then
    sample=$([ "$tier" = full ] && echo full || echo sample)
    for isa in avx2 scalar; do
        run_suite "test_forward ($isa)" env NUCLEUS_ISA=$isa build/san/tests/test_forward
        for s in reference golden archs quants kv_quant; do
            # golden's records are compared across kernel sets by test-full only; archs, quants and
            # reference hold an architecture or weight type per file
            [ "$s" = golden ] && [ "$tier" != full ] && continue
            run_suite "$s ($isa)" env NUCLEUS_ISA=$isa NUCLEUS_TEST_TIER=$sample bash "tests/e2e/$s.sh"
        done
    done
    # The AVX-VNNI set is the AVX2 set with fused multiply-adds: test_kernels holds it to AVX2's
    # bits; here one forward pass over it, where the CPU has AVX-VNNI (else it would be AVX2's)
    if grep -qw avx_vnni /proc/cpuinfo 2>/dev/null; then
        run_suite "test_forward (avxvnni)" env NUCLEUS_ISA=avxvnni build/san/tests/test_forward
        run_suite "reference (avxvnni)" env NUCLEUS_ISA=avxvnni NUCLEUS_TEST_TIER=$sample bash tests/e2e/reference.sh
    fi
fi
wait_slot 1
drain_reports

if [ ${#failed_suites[@]} -ne 0 ]; then
    echo "failing suites: ${failed_suites[*]}"
    cat "$digest"
fi
echo "tier $tier, $jobs suites at a time: $((SECONDS - start_all)) s, the suites' cpu (user + sys) $total_cpu s"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
