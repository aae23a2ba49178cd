#!/usr/bin/env bash
# Runs the server's request-parser fuzzer (tests/fuzz/fuzz_request.c) for a bounded time from
# the committed seed corpus, copied to a temp dir so the seeds stay as committed. One check: it
# fails when the fuzzer finds a crash, a sanitizer report, a leak, a broken parser promise
# (abort) or a timeout; the input is shown and kept in build/fuzz/. FUZZ_SECONDS overrides the
# 30-second budget.
set -u
cd "$(dirname "$0")/../.."
bin=build/fuzz/fuzz_request
if ! make "$bin" >/dev/null; then
    echo "fuzz_request: cannot build $bin"
    echo "fuzz_request: 0 passed, 1 failed"
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
cp tests/fuzz/corpus/request/* "$work/corpus/"

export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
"$bin" -max_total_time="${FUZZ_SECONDS:-30}" -rss_limit_mb=2048 -timeout=10 -max_len=4096 \
    -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus" >"$work/log" 2>&1
rc=$?

shopt -s nullglob
found=("$work"/artifacts/*)
if [ $rc -eq 0 ] && [ ${#found[@]} -eq 0 ]; then
    grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/log"
    echo "fuzz_request: 1 passed, 0 failed"
    exit 0
fi
grep -vE '^#[0-9]+\s+(NEW|REDUCE|pulse|INITED)' "$work/log" | tail -n 60
for a in "${found[@]}"; do
    echo "input $(basename "$a") ($(stat -c %s "$a") bytes):"
    head -c 2048 "$a" | od -c | head -n 40
    mkdir -p build/fuzz && cp "$a" "build/fuzz/$(basename "$a")" && echo "kept as build/fuzz/$(basename "$a")"
done
echo "fuzz_request: 0 passed, 1 failed"
exit 1
