#!/usr/bin/env bash
# Runs the server's reply-splitting fuzzer (tests/fuzz/fuzz_reply.c) for a bounded time from
# the committed seed corpus, copied to a temp dir so the seeds stay as committed; the run and its
# one check (a broken parser promise aborts) as tests/lib/fuzz_run.sh says.
set -u
cd "$(dirname "$0")/../.."
bin=build/fuzz/fuzz_reply
if ! make "$bin" >/dev/null; then
    echo "fuzz_reply: cannot build $bin"
    echo "fuzz_reply: 0 passed, 1 failed"
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
cp tests/fuzz/corpus/reply/* "$work/corpus/"

name=fuzz_reply max_len=2048
. tests/lib/fuzz_run.sh
