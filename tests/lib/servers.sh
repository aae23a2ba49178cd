# Sourced by e2e scripts that run `nucleus serve`: sanitized servers on free loopback ports,
# killed when the script exits. Needs $NUCLEUS (the binary), $tmp (a scratch directory) and the
# script's ok / bad counters.
pids=()

# start_server NAME ARGS...: runs the server on a free port; sets url_NAME and pid_NAME. Returns 1
# (after a failure naming it) when it does not start.
start_server() {
    launch_server "$@"
    await_server "$1"
}

# launch_server NAME ARGS...: starts it without waiting (sets pid_NAME); await_server NAME then
# waits for it (sets url_NAME; returns 1 after a failure when it does not start), so that many
# servers load at once.
launch_server() {
    local name=$1; shift
    "$NUCLEUS" serve --host 127.0.0.1 --port 0 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    local pid=$!
    pids+=("$pid")
    eval "pid_$name=$pid"
}

await_server() {
    local name=$1 pid_var="pid_$1"
    local pid=${!pid_var} line=""
    for _ in $(seq 1 300); do
        line=$(grep -o 'listening on http://[0-9.:]*' "$tmp/$name.err" 2>/dev/null)
        [ -n "$line" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if [ -z "$line" ]; then
        bad "$name: the server did not start: $(tail -n 5 "$tmp/$name.err")"
        return 1
    fi
    eval "url_$name=${line#listening on }"
    ok
}

# stop_server NAME: SIGTERM, then a clean exit within 30 s and no sanitizer report.
stop_server() {
    local name=$1 pid_var="pid_$1"
    local pid=${!pid_var}
    kill -TERM "$pid" 2>/dev/null
    local rc=0
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        bad "$name: still running 30 s after SIGTERM"
        kill -KILL "$pid"
    fi
    wait "$pid"
    rc=$?
    if [ $rc -eq 0 ]; then ok; else bad "$name: exit status $rc after SIGTERM"; fi
    if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$tmp/$name.err"; then
        bad "$name: sanitizer report:"
        grep -E -A 30 'AddressSanitizer|LeakSanitizer|runtime error:' "$tmp/$name.err" | head -n 60
    else
        ok
    fi
}

# Kill what is still running and remove $tmp.
servers_cleanup() {
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    rm -rf "$tmp"
}
