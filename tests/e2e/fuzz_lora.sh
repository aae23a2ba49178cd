#!/usr/bin/env bash
# The LoRA adapter reader's fuzzer (tests/fuzz/fuzz_lora.c) over stories260K, as
# tests/lib/fuzz_made_seeds.sh runs it.
name=fuzz_lora seeds=--lora
export NUCLEUS_FUZZ_MODEL=${NUCLEUS_FUZZ_MODEL:-${SHARED:-$(cd "$(dirname "$0")/../../.." && pwd)/shared}/models/stories260K/stories260K.gguf}
. "$(dirname "$0")/../lib/fuzz_made_seeds.sh"
