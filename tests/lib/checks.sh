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
