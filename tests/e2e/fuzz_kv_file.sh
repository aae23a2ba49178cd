#!/usr/bin/env bash
# The saved KV cache file parser's fuzzer (tests/fuzz/fuzz_kv_file.c), as
# tests/lib/fuzz_made_seeds.sh runs it.
name=fuzz_kv_file seeds=--kv
. "$(dirname "$0")/../lib/fuzz_made_seeds.sh"
