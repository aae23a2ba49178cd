# The end of every fuzz run (sourced by tests/e2e/fuzz_*.sh once they have built $bin and put
# their seeds in $work/corpus, $work being a temp dir they remove on exit): runs the libFuzzer
# binary $bin for a bounded time with -max_len=$max_len (default 8192) and the extra flags in the
# array fuzz_flags (may be unset). One check: it fails when the fuzzer finds a crash, a sanitizer
# report, a leak or a timeout; the input is shown (as text and hex) and kept in $build/fuzz/
# (default build/fuzz/). FUZZ_SECONDS overrides the 30-second budget. Prints "$name: N passed, N
# failed" and exits. FUZZ_RUNS, when set, ends the run after that many inputs instead (bench/fuzz.sh).
mkdir -p "$work/artifacts"
# The harness may be built with recoverable UBSan checks: make the first report fatal.
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
budget=(-max_total_time="${FUZZ_SECONDS:-30}")
[ -n "${FUZZ_RUNS:-}" ] && budget=(-runs="$FUZZ_RUNS")
"$bin" "${budget[@]}" -rss_limit_mb=2048 -timeout=10 -max_len="${max_len:-8192}" \
    ${fuzz_flags[@]+"${fuzz_flags[@]}"} -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus" \
    >"$work/log" 2>&1
rc=$?

shopt -s nullglob
found=("$work"/artifacts/*)
if [ $rc -eq 0 ] && [ ${#found[@]} -eq 0 ]; then
    grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/log"
    echo "$name: 1 passed, 0 failed"
    exit 0
fi
grep -vE '^#[0-9]+\s+(NEW|REDUCE|pulse|INITED)' "$work/log" | tail -n 60
keep=${build:-build}/fuzz
mkdir -p "$keep"
for a in "${found[@]}"; do
    echo "input $(basename "$a") ($(stat -c %s "$a") bytes), its first 2 KiB as text and 512 bytes as hex:"
    head -c 2048 "$a" | cat -v
    echo
    od -An -tx1 -v -N512 "$a"
    cp "$a" "$keep/$(basename "$a")" && echo "kept as $keep/$(basename "$a")"
done
echo "$name: 0 passed, 1 failed"
exit 1
