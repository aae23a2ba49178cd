#!/usr/bin/env bash
# Every architecture of shared/archs, as GGUF and as a Hugging Face directory, against
# transformers' float64 log-probabilities (tests/e2e/archs_check.py).
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
exec /usr/bin/python3 tests/e2e/archs_check.py --nucleus build/nucleus --shared "$SHARED" "$@"
