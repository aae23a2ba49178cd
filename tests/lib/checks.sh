# Sourced by e2e scripts: the pass / fail counters and the checks they share. Each script prints
# its own "NAME: $pass passed, $fail failed" line.
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
expect_eq() { # what, got, want
    if [ "$2" == "$3" ]; then ok; else bad "$1: got [$2] want [$3]"; fi
}
expect_in() { # what, needle, haystack
    if grep -qF -- "$2" <<<"$3"; then ok; else bad "$1: expected '$2' in: $3"; fi
}
# expect_err WHAT NEEDLE COMMAND...: the command fails (not by a signal) with NEEDLE in its stderr
# and no sanitizer report.
expect_err() {
    local what=$1 needle=$2; shift 2
    local out rc
    out=$("$@" 2>&1 >/dev/null); rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -qF -- "$needle" <<<"$out" && ! grep -q "Sanitizer" <<<"$out"; then ok
    else bad "$what: rc=$rc, expected an error containing '$needle', got: $out"; fi
}
# count_tap FILE: adds a `node --test --test-reporter=tap` run's pass and fail counts to ours,
# lists its tests, and shows the failing ones (or the output, when it gave no summary).
count_tap() {
    local n_pass n_fail
    n_pass=$(grep -E '^# pass [0-9]+' "$1" | awk '{print $3}')
    n_fail=$(grep -E '^# fail [0-9]+' "$1" | awk '{print $3}')
    if [ -z "$n_pass" ] || [ -z "$n_fail" ]; then
        bad "node --test gave no summary:"
        tail -n 40 "$1"
        return
    fi
    grep -E '^(not )?ok ' "$1"
    pass=$((pass + n_pass))
    fail=$((fail + n_fail))
    if [ "$n_fail" -ne 0 ]; then
        echo "node tests failing:"
        grep -E -A 30 '^\s*not ok' "$1" | head -n 150
    fi
}
