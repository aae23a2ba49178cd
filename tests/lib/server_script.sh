# Sourced by the e2e scripts that run sanitized servers, once checks.sh and their finish() are
# defined: builds $NUCLEUS when missing, makes the scratch directory $tmp, loads servers.sh (its
# servers are killed and $tmp removed at exit) and sets the sanitizers' options.
if [ ! -x "$NUCLEUS" ] && ! make "$NUCLEUS" >/dev/null; then
    bad "cannot build $NUCLEUS"
    finish
fi
tmp=$(mktemp -d)
. tests/lib/servers.sh
trap servers_cleanup EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
