#!/usr/bin/env bash
# Runs the server's request-parser fuzzer (tests/fuzz/fuzz_request.c) for a bounded time from
# the committed seed corpus, copied to a temp dir so the seeds stay as committed; the run and its
# one check (a broken parser promise aborts) as tests/lib/fuzz_run.sh says.
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
mkdir -p "$work/corpus"
cp tests/fuzz/corpus/request/* "$work/corpus/"

name=fuzz_request max_len=4096
. tests/lib/fuzz_run.sh
