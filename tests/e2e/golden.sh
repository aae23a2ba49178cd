#!/usr/bin/env bash
# Correctness against the exact float64 reference (shared/golden): teacher-forced
# log-probabilities within tolerance and greedy continuations up to the first near-tie.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
exec /usr/bin/python3 tests/e2e/golden_check.py --nucleus build/nucleus --shared "$SHARED" --models "$MODELS_DIR" "$@"
