#!/usr/bin/env bash
# gpt-oss's MXFP4 experts as the Hugging Face release stores them (blocks and scales), against the
# same experts dequantised from the format's definition (tests/e2e/hf_mxfp4_check.py).
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
exec /usr/bin/python3 tests/e2e/hf_mxfp4_check.py --nucleus "${NUCLEUS_BIN:-build/nucleus}" --shared "$SHARED" "$@"
