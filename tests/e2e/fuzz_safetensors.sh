#!/usr/bin/env bash
# The safetensors reader's fuzzer (tests/fuzz/fuzz_safetensors.c), as tests/lib/fuzz_made_seeds.sh
# runs it.
name=fuzz_safetensors seeds=--safetensors
. "$(dirname "$0")/../lib/fuzz_made_seeds.sh"
