#!/usr/bin/env bash
# The fuzzer of the tokenizer.model reader and the vocabulary built from it
# (tests/fuzz/fuzz_spm_model.c), as tests/lib/fuzz_made_seeds.sh runs it.
name=fuzz_spm_model seeds=--spm
. "$(dirname "$0")/../lib/fuzz_made_seeds.sh"
