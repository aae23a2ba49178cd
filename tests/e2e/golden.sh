#!/usr/bin/env bash
# Correctness against the exact float64 reference (shared/golden): teacher-forced
# log-probabilities within tolerance and greedy continuations up to the first near-tie.
# make check: the F16 cache alone; make test: every record with the F16 cache, the other cache
# types on the first record of each file (the records of a file share the model); make test-full
# and by hand: every cache type on every record (tests/lib/tier.sh).
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
. tests/lib/tier.sh
sel=()
tier_is check && sel=(--cache-types f16)
tier_is test && sel=(--cache-sample)
tier_is sample && sel=(--sample)
exec /usr/bin/python3 tests/e2e/golden_check.py --nucleus build/nucleus --shared "$SHARED" --models "$MODELS_DIR" "${sel[@]}" "$@"
