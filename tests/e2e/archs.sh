#!/usr/bin/env bash
# Every architecture of shared/archs, as GGUF and as a Hugging Face directory, against
# transformers' float64 log-probabilities (tests/e2e/archs_check.py). The other kernel sets in
# make test (tier sample): the GGUF and Hugging Face forms of the first record of each
# (tests/lib/tier.sh).
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
. tests/lib/tier.sh
sel=()
tier_is sample && sel=(--forms gguf,hf --sample)
exec /usr/bin/python3 tests/e2e/archs_check.py --nucleus build/nucleus --shared "$SHARED" "${sel[@]}" "$@"
