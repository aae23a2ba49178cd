#!/usr/bin/env bash
# The Python package (python/, docs/python.md): its pytest suite (python/tests) on Debian's python3,
# against the release libnucleus.so and build/nucleus, whose results it compares with; ends with
# "python: N passed, N failed". Tests pytest skips are listed as SKIPPED lines.
set -u
cd "$(dirname "$0")/../.."
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
finish() { echo "python: $1 passed, $2 failed"; [ "$2" -eq 0 ]; exit; }
if ! "$PY" -c "import pytest" 2>/dev/null; then
    echo "FAIL: $PY has no pytest (make test-deps installs python3-pytest)"
    finish 0 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! make -s lib build/nucleus >"$log" 2>&1; then
    echo "FAIL: make lib: $(tail -n 20 "$log")"
    finish 0 1
fi
out=$("$PY" -m pytest -q -rs -p no:cacheprovider python/tests 2>&1)
rc=$?
echo "$out"
summary=$(tail -n 1 <<<"$out")
p=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
f=$(($(grep -oE '[0-9]+ (failed|error)' <<<"$summary" | grep -oE '[0-9]+' | paste -sd+ | sed 's/^$/0/')))
[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
finish "$p" "$f"
