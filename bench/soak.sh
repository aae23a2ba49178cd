#!/usr/bin/env bash
# A bounded soak of `nucleus serve` on loopback (issue 17's judge): for DURATION seconds (default
# 600), STREAMS clients (default 32) stream completions back to back from TinyStories-656K while
# SLOW slowloris connections (default 300) are held from another address and a second server,
# whose --chat-template is hostile (10^10 iterations: the template's budgets must stop it), is asked
# for chat completions non-stop; /health of both is asked every half second from a third address,
# their memory sampled every 5 s (bench/soak.py drives it all). Then 8 long streams start and the
# servers get SIGTERM: each must exit 0 within 5 s. Prints a table; exit status 1 when a
# well-formed request failed, /health missed, a hostile render hung or memory grew by more
# than a quarter after the first minute.
#
#   bash bench/soak.sh [-d SECONDS] [--streams N] [--slow N]
set -u
cd "$(dirname "$0")/.."
. tests/lib/models.sh
duration=600 streams=32 slow=300
while [ $# -gt 0 ]; do
    case $1 in
        -d) duration=$2; shift 2 ;;
        --streams) streams=$2; shift 2 ;;
        --slow) slow=$2; shift 2 ;;
        *) echo "usage: bash bench/soak.sh [-d SECONDS] [--streams N] [--slow N]" >&2; exit 2 ;;
    esac
done
make -s -j2 build/nucleus || exit 1
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
printf '%s' "{% for i in range(100000) %}{% for j in range(100000) %}{{ m }}{% endfor %}{% endfor %}" >"$tmp/hostile.jinja"

# start NAME ARGS...: a release server on a free port; sets port_NAME and pid_NAME
start() {
    local name=$1; shift
    build/nucleus serve --host 127.0.0.1 --port 0 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    local pid=$! line=""
    pids+=("$pid")
    for _ in $(seq 1 300); do
        line=$(grep -o 'listening on http://[0-9.:]*' "$tmp/$name.err" 2>/dev/null)
        [ -n "$line" ] && break
        sleep 0.1
    done
    [ -n "$line" ] || { echo "$name did not start: $(tail -n 3 "$tmp/$name.err")" >&2; exit 1; }
    eval "port_$name=${line##*:} pid_$name=$pid"
}
start main -m "$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf" --parallel 8 --max-queue 64 -t 1
start hostile -m "$SHARED/models/stories260K/stories260K.gguf" --parallel 2 -t 1 --chat-template "$tmp/hostile.jinja"

# shellcheck disable=SC2154
res=$(/usr/bin/python3 bench/soak.py "$port_main" "$port_hostile" "$pid_main" "$pid_hostile" "$duration" "$streams" "$slow")

# SIGTERM under load: as 8 streams of 400 tokens start
for i in $(seq 8); do
    curl -s -N -H 'Content-Type: application/json' -d '{"prompt": "Once", "max_tokens": 400, "stream": true}' \
        "http://127.0.0.1:$port_main/v1/completions" >/dev/null &
done
sleep 0.1
# stop PID: SIGTERM; sets stop_secs (to exit) and stop_rc (not in a subshell: wait needs the parent)
stop() {
    local t0
    t0=$(date +%s.%N)
    kill -TERM "$1"
    wait "$1"
    stop_rc=$?
    stop_secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
}
stop "$pid_main"
main_s=$stop_secs main_rc=$stop_rc
stop "$pid_hostile"
hostile_s=$stop_secs hostile_rc=$stop_rc
wait

/usr/bin/python3 - "$res" "$duration" "$streams" "$slow" "$main_s" "$main_rc" "$hostile_s" "$hostile_rc" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
duration, streams, slow = sys.argv[2:5]
main_s, main_rc, hostile_s, hostile_rc = float(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7]), int(sys.argv[8])
def growth(kb):  # resident memory at the end over its value after the first minute
    base = kb[min(12, len(kb) - 1)]
    return kb[-1] / base if base else 0
rows = [
    ("well-formed streams completed", f"{r['streams_ok']}", r["streams_failed"] == 0, f"{r['streams_failed']} failed"),
    ("/health answered 200", f"{r['health_ok']} of {r['health_asked']}", r["health_ok"] == r["health_asked"],
     f"worst {r['health_worst_s']:.2f} s"),
    ("hostile chat renders ended in an error", f"{r['hostile_answers'] - len(r['hostile_bad'])} of {r['hostile_answers']}",
     not r["hostile_bad"] and r["hostile_answers"] > 0, f"worst {r['hostile_worst_s']:.2f} s"),
    ("slowloris connections opened / closed by the server", f"{r['slow_opened']} / {r['slow_closed_by_server']}", True, ""),
    ("memory, main server (MB: after 1 min, end)",
     f"{r['rss_kb'][min(12, len(r['rss_kb']) - 1)] / 1024:.0f}, {r['rss_kb'][-1] / 1024:.0f}", growth(r["rss_kb"]) < 1.25,
     f"x{growth(r['rss_kb']):.2f}"),
    ("memory, hostile server (MB: after 1 min, end)",
     f"{r['hostile_rss_kb'][min(12, len(r['hostile_rss_kb']) - 1)] / 1024:.0f}, {r['hostile_rss_kb'][-1] / 1024:.0f}",
     growth(r["hostile_rss_kb"]) < 1.25, f"x{growth(r['hostile_rss_kb']):.2f}"),
    ("SIGTERM as 8 streams start (main)", f"exit {main_rc} after {main_s:.2f} s", main_rc == 0 and main_s <= 5.5, ""),
    ("SIGTERM (hostile)", f"exit {hostile_rc} after {hostile_s:.2f} s", hostile_rc == 0 and hostile_s <= 5.5, ""),
]
print(f"| {duration} s, {streams} streams, {slow} slowloris connections | | ok | |")
print("|---|---|---|---|")
for name, value, good, extra in rows:
    print(f"| {name} | {value} | {'yes' if good else 'NO'} | {extra} |")
for f in r["failures"] + r["hostile_bad"]:
    print("  ", f)
sys.exit(0 if all(g for _, _, g, _ in rows) else 1)
PY
rc=$?
echo
echo "bash bench/soak.sh -d $duration --streams $streams --slow $slow; $(nproc) cores"
exit $rc
