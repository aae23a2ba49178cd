# The body of the fuzz runs whose seeds tests/fuzz/make_seeds.py writes (sourced, after setting
# name and seeds, by tests/e2e/fuzz_gguf.sh, fuzz_safetensors.sh and fuzz_spm_model.sh): runs
# $BUILD/fuzz/$name for a bounded time from a corpus `make_seeds.py $seeds` writes into a temp
# dir. One check: it fails when the fuzzer finds a crash, a sanitizer report, a leak or a timeout;
# the input is shown as hex and kept in $BUILD/fuzz/. FUZZ_SECONDS overrides the 30-second
# budget, BUILD (default build) the build tree.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${BUILD:-build}
bin=$build/fuzz/$name
if [ ! -x "$bin" ] && ! make BUILD="$build" "$bin" >/dev/null; then
    echo "$name: cannot build $bin"
    echo "$name: 0 passed, 1 failed"
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
/usr/bin/python3 tests/fuzz/make_seeds.py $seeds "$work/corpus"

# The harness may be built with recoverable UBSan checks: make the first report fatal.
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
"$bin" -max_total_time="${FUZZ_SECONDS:-30}" -rss_limit_mb=2048 -timeout=10 -max_len=8192 \
    -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus" >"$work/log" 2>&1
rc=$?

shopt -s nullglob
found=("$work"/artifacts/*)
if [ $rc -eq 0 ] && [ ${#found[@]} -eq 0 ]; then
    grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/log"
    echo "$name: 1 passed, 0 failed"
    exit 0
fi
grep -vE '^#[0-9]+\s+(NEW|REDUCE|pulse|INITED)' "$work/log" | tail -n 60
for a in "${found[@]}"; do
    echo "input $(basename "$a") ($(stat -c %s "$a") bytes), first 1 KiB as hex:"
    od -An -tx1 -v -N1024 "$a"
    mkdir -p "$build/fuzz" && cp "$a" "$build/fuzz/$(basename "$a")" && echo "kept as $build/fuzz/$(basename "$a")"
done
echo "$name: 0 passed, 1 failed"
exit 1
