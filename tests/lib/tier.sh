# Sourced by e2e scripts: the tier tests/run.sh runs them in (docs/testing.md), from
# NUCLEUS_TEST_TIER: check (make check: one pass of each judge), test (make test: every behaviour,
# repetition cut), sample (make test's runs with the other kernel sets: what a kernel set computes,
# on the first record of each file), full (make test-full, and a script run by hand: everything).
TIER=${NUCLEUS_TEST_TIER:-full}
case $TIER in check|test|sample|full) ;; *) echo "NUCLEUS_TEST_TIER: expected check, test, sample or full, got '$TIER'" >&2; TIER=full ;; esac
tier_is() { # TIER...: whether the tier is one of these
    local t
    for t in "$@"; do [ "$TIER" = "$t" ] && return 0; done
    return 1
}
