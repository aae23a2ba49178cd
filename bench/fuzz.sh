#!/usr/bin/env bash
# Every fuzz harness for a fixed number of inputs (default 10^6; the test suite runs each for 30 s):
# the template harness from its committed seeds (the hostile templates of the sandbox's
# regression tests among them) and the real templates of the npm packages. Prints, per harness,
# the inputs run, the peak memory and the verdict: any crash, sanitizer report, leak or input
# slower than 10 s fails it (tests/lib/fuzz_run.sh), and the input is kept in build/fuzz/.
#
#   bash bench/fuzz.sh [RUNS [HARNESS...]]     (HARNESS: gguf, template, grammar, ...; default all)
#   bash bench/fuzz.sh --list                   (the harnesses "all" means, one a line)
# "All" is every tests/e2e/fuzz_*.sh, so that a harness added there is in the long run too.
set -u
cd "$(dirname "$0")/.."
all=()
for t in tests/e2e/fuzz_*.sh; do t=${t#tests/e2e/fuzz_}; all+=("${t%.sh}"); done
if [ "${1:-}" = --list ]; then printf '%s\n' "${all[@]}"; exit 0; fi
runs=${1:-1000000}
shift $(($# > 0))
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${all[@]}")
make -s build/fuzz/fuzz_gguf build/fuzz/fuzz_kv_file build/fuzz/fuzz_request build/fuzz/fuzz_safetensors \
    build/fuzz/fuzz_spm_model || exit 1
echo "| harness | inputs | peak RSS (MB) | seconds | result |"
echo "|---|---|---|---|---|"
failed=0
for h in "${harnesses[@]}"; do
    t=tests/e2e/fuzz_$h.sh name=fuzz_$h
    t0=$(date +%s)
    out=$(FUZZ_RUNS=$runs bash "$t" 2>&1)
    rc=$?
    units=$(sed -n 's/^stat::number_of_executed_units: *//p' <<<"$out" | paste -sd' ')  # grammar: two harnesses
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' <<<"$out" | paste -sd' ')
    [ $rc -eq 0 ] || { failed=$((failed + 1)); echo "$out" | tail -n 30 >&2; }
    echo "| $name | ${units:--} | ${rss:--} | $(( $(date +%s) - t0 )) | $([ $rc -eq 0 ] && echo "0 crashes, 0 timeouts, 0 leaks" || echo FAILED) |"
done
echo
echo "bash bench/fuzz.sh $runs ${harnesses[*]}; $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
exit $((failed > 0))
