#!/usr/bin/env bash
# The GGUF reader's fuzzer (tests/fuzz/fuzz_gguf.c), as tests/lib/fuzz_made_seeds.sh runs it.
name=fuzz_gguf seeds=
. "$(dirname "$0")/../lib/fuzz_made_seeds.sh"
