#!/usr/bin/env bash
# Scale-out: Debian's nginx with deploy/nginx/nucleus.conf (ports and log paths rewritten, nothing
# else) in front of three sanitized `nucleus serve` replicas of TinyStories-656K, on loopback.
# Checked against facts the replicas do not make up: nginx's access log (which replica answered
# each X-Request-Id), HTTP statuses, and whether each stream reached [DONE].
#   - X-Request-Id: a sane one is echoed by a replica and through nginx, a bad one replaced;
#     /health is 200 {"status":"ok"} on a ready replica.
#   - affinity mode: each turn of eight chat conversations (and two completions ones keyed by
#     X-Session-Id) goes to the replica of its first turn, which reports the whole previous
#     turn's prompt as cached (at the first turn only the shared system prompt is); the
#     conversations use more than one replica (all eight on one: a chance of 3^-7).
#   - least-connections mode, one replica killed (SIGKILL) under streaming load: no request
#     started after the kill fails; the ones cut off were on the dead replica, end at once, and
#     are counted.
#   - a rolling restart (SIGTERM, drain, start again on the same port, /health 200) of every
#     replica under load: no request fails, /health says "draining" meanwhile, each replica exits
#     0 well within its 5 s drain, with no sanitizer report.
# Throughput is measured by bench/scaleout.sh, not here. Ends with "scaleout: N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
NUCLEUS=${NUCLEUS:-build/san/nucleus}
SHARED=${SHARED:-../shared}
. tests/lib/checks.sh
finish() { echo "scaleout: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

if ! command -v nginx >/dev/null; then
    bad "nginx is needed (bash scripts/install-deps.sh)"
    finish
fi
if [ ! -x "$NUCLEUS" ] && ! make "$NUCLEUS" >/dev/null; then
    bad "cannot build $NUCLEUS"
    finish
fi
model=$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf
tmp=$(mktemp -d)
. tests/lib/servers.sh
nginx_pids=()
cleanup() {
    for p in "${nginx_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    servers_cleanup
}
trap cleanup EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Five free loopback ports: three replicas, two balancers.
read -r p1 p2 p3 lb_bal lb_aff < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(5)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
ports=("$p1" "$p2" "$p3")
replica_args=(-m "$model" --parallel 2 -c 1024 -t 1 --max-conn-per-ip 0 --allowed-hosts '*') # as deploy/systemd runs them
for i in 1 2 3; do start_server "r$i" "${replica_args[@]}" --port "${ports[i-1]}" || finish; done

# start_nginx NAME PORT POOL: deploy/nginx/nucleus.conf on PORT with the replicas above and pool
# POOL, in its own prefix directory, in the foreground of a background job.
start_nginx() {
    local name=$1 port=$2 pool=$3 d=$tmp/$1
    mkdir -p "$d"
    sed -e "s/listen 8080;/listen 127.0.0.1:$port;/" -e "s/127.0.0.1:8081/127.0.0.1:$p1/" \
        -e "s/127.0.0.1:8082/127.0.0.1:$p2/" -e "s/127.0.0.1:8083/127.0.0.1:$p3/" \
        -e "s#/var/log/nginx/nucleus.access.log#$d/access.log#" \
        -e "s/set \$nucleus_pool nucleus_balanced;/set \$nucleus_pool $pool;/" deploy/nginx/nucleus.conf >"$d/nucleus.conf"
    grep -q "set \$nucleus_pool $pool;" "$d/nucleus.conf" || { bad "$name: no pool line in the config"; return 1; }
    cat >"$d/nginx.conf" <<CONF
daemon off;
pid $d/nginx.pid;
error_log $d/error.log info;
events { worker_connections 512; }
http {
    client_body_temp_path $d/body; proxy_temp_path $d/proxy; fastcgi_temp_path $d/fastcgi;
    uwsgi_temp_path $d/uwsgi; scgi_temp_path $d/scgi;
    include $d/nucleus.conf;
}
CONF
    nginx -p "$d" -c "$d/nginx.conf" 2>"$d/stderr" &
    nginx_pids+=($!)
    for _ in $(seq 1 50); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null && { ok; return 0; }
        sleep 0.1
    done
    bad "$name: nginx did not start: $(cat "$d/stderr" "$d/error.log" 2>/dev/null | tail -n 5)"
    return 1
}
start_nginx bal "$lb_bal" nucleus_balanced || finish
start_nginx aff "$lb_aff" nucleus_affinity || finish

# logged LOG RID...: waits (3 s at most in all) until nginx has logged each request id: nginx
# writes a request's line when it finalises the request, which can come just after the client
# has read the last byte of the response.
logged() {
    local log=$1 rid end=$((SECONDS + 3)); shift
    for rid in "$@"; do
        until grep -qF "rid=$rid " "$log" || [ "$SECONDS" -ge "$end" ]; do sleep 0.1; done
    done
}
# upstream_of LOG RID: the replica port nginx logged for that request id (the last one tried).
upstream_of() {
    logged "$1" "$2"
    grep -F "rid=$2 " "$1" | tail -n 1 | sed -E 's/.*upstream=([^ ]*).*/\1/; s/.*[:, ]([0-9]+)$/\1/'
}
header() { tr -d '\r' | grep -i "^$1:" | head -n 1 | cut -d' ' -f2-; }

# ---- X-Request-Id and /health ------------------------------------------------------------------
expect_eq "replica /health" "$(curl -s "$url_r1/health")" '{"status":"ok"}'
h=$(curl -s -o /dev/null -D - -H 'X-Request-Id: trace-42:a/b' "$url_r1/v1/models")
expect_eq "replica echoes a sane X-Request-Id" "$(header x-request-id <<<"$h")" "trace-42:a/b"
h=$(curl -s -o /dev/null -D - -H 'X-Request-Id: two words' "$url_r1/nope")
rid=$(header x-request-id <<<"$h")
if [[ "$rid" =~ ^[0-9a-f]{32}$ ]]; then ok; else bad "a bad X-Request-Id is replaced by a fresh one: got [$rid]"; fi
h=$(curl -s -H 'Content-Type: application/json' -o /dev/null -D - -H 'X-Request-Id: via-lb-1' "http://127.0.0.1:$lb_bal/v1/completions" \
    -d '{"prompt":"Once","max_tokens":2}')
expect_eq "through nginx: the id is echoed once" "$(tr -d '\r' <<<"$h" | grep -ic '^x-request-id: via-lb-1$')" "1"
expect_in "through nginx: status" " 200" "$(head -n 1 <<<"$h")"
logged "$tmp/bal/access.log" via-lb-1
expect_in "nginx logged the id" "rid=via-lb-1 " "$(cat "$tmp/bal/access.log")"

# ---- Affinity ----------------------------------------------------------------------------------
# chat_turn CONV TURN: the conversation's request for TURN (earlier turns' messages repeated).
system="You are a storyteller for small children. You tell short, happy stories about animals who live in a big green forest, with simple words and a kind ending."
chat_turn() {
    python3 - "$1" "$2" "$system" <<'PY'
import json, sys
conv, turn, system = sys.argv[1], int(sys.argv[2]), sys.argv[3]
msgs = [{"role": "system", "content": system}, {"role": "user", "content": "Tell me a story about the %s." % conv}]
for t in range(1, turn):
    msgs += [{"role": "assistant", "content": "The %s went to the river and found a friend, part %d." % (conv, t)},
             {"role": "user", "content": "What happened next, part %d?" % t}]
print(json.dumps({"messages": msgs, "max_tokens": 8}))
PY
}
# usage_of FILE: "prompt_tokens cached_tokens"
usage_of() { python3 -c 'import json,sys; u=json.load(open(sys.argv[1]))["usage"]; print(u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"])' "$1" 2>/dev/null; }
used=()
for conv in fox owl bear rabbit deer mouse frog duck; do
    first="" prev=0
    for turn in 1 2 3; do
        rid="aff-$conv-$turn"
        code=$(chat_turn "$conv" "$turn" | curl -s -o "$tmp/aff.json" -w '%{http_code}' -H "X-Request-Id: $rid" \
            -H 'Content-Type: application/json' --data-binary @- "http://127.0.0.1:$lb_aff/v1/chat/completions")
        expect_eq "$rid: status" "$code" 200
        read -r prompt cached < <(usage_of "$tmp/aff.json")
        up=$(upstream_of "$tmp/aff/access.log" "$rid")
        if [ "$turn" -eq 1 ]; then
            first=$up
            used+=("$up")
            # the control: a first turn finds the shared system prompt cached, not its question
            if [ "${cached:-999}" -lt $((prompt - 4)) ]; then ok; else bad "$rid: cached $cached of $prompt at the first turn"; fi
        else
            expect_eq "$rid: the replica of turn 1" "$up" "$first"
            if [ "${cached:-0}" -ge $((prev - 4)) ]; then ok
            else bad "$rid: cached_tokens ${cached:-?} of ${prompt:-?}, the previous turn's prompt had $prev"; fi
        fi
        prev=${prompt:-0}
    done
done
n_used=$(printf '%s\n' "${used[@]}" | sort -u | wc -l)
if [ "$n_used" -ge 2 ]; then ok; else bad "affinity: the eight conversations all went to one replica"; fi
# X-Session-Id: completions whose prompts differ from the first byte still stay together
for s in alpha beta; do
    first=""
    for turn in 1 2 3; do
        rid="sess-$s-$turn"
        curl -s -H 'Content-Type: application/json' -o /dev/null -H "X-Session-Id: $s" -H "X-Request-Id: $rid" "http://127.0.0.1:$lb_aff/v1/completions" \
            -d "{\"prompt\":\"Turn $turn of $s:\",\"max_tokens\":2}"
        up=$(upstream_of "$tmp/aff/access.log" "$rid")
        if [ "$turn" -eq 1 ]; then first=$up; [ -n "$up" ] && ok || bad "$rid: not in the access log"
        else expect_eq "$rid: X-Session-Id keeps the replica" "$up" "$first"; fi
    done
done

# ---- Failover: SIGKILL one replica under load --------------------------------------------------
python3 tests/e2e/scaleout_load.py --url "http://127.0.0.1:$lb_bal" --workers 6 --duration 6 --max-tokens 48 \
    --kill-pid "$pid_r3" --kill-at 2 --tag kill >"$tmp/kill.json"
wait "$pid_r3" 2>/dev/null
logged "$tmp/bal/access.log" $(python3 -c 'import json,sys; print(*[r["rid"] for r in json.load(open(sys.argv[1]))["requests"]])' "$tmp/kill.json")
python3 - "$tmp/kill.json" "$tmp/bal/access.log" "$p3" >"$tmp/kill.txt" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
log = open(sys.argv[2]).read()
dead = sys.argv[3]
k = d["kill_at"]
reqs = d["requests"]
ok = lambda r: r["status"] == 200 and r["done"]
new = [r for r in reqs if r["start"] >= k]
inflight = [r for r in reqs if r["start"] < k < r["end"]]
cut = [r for r in inflight if not ok(r)]
def upstreams(rid):
    m = re.findall(r"rid=%s upstream=(\S+)" % re.escape(rid), log)
    return m[-1] if m else ""
print("new", len(new), "new_failed", sum(not ok(r) for r in new))
print("before", sum(r["end"] <= k for r in reqs), "before_on_dead", sum(r["end"] <= k and upstreams(r["rid"]).endswith(":" + dead) for r in reqs))
print("inflight", len(inflight), "cut", len(cut))
print("cut_elsewhere", sum(not upstreams(r["rid"]).split(",")[-1].strip().endswith(":" + dead) for r in cut))
print("cut_late", sum(r["end"] - k > 5 for r in cut))
print("not_echoed", sum(r.get("echoed") is False for r in reqs if r["status"]))
for r in [r for r in new if not ok(r)][:5]: print("example", json.dumps(r))
PY
kv() { grep -oE "(^| )$1 [0-9]+" "$tmp/kill.txt" | awk '{print $2}'; }
cat "$tmp/kill.txt" | grep -v '^example' | tr '\n' ' '; echo
if [ "$(kv new)" -ge 10 ]; then ok; else bad "failover: only $(kv new) requests after the kill"; fi
expect_eq "failover: requests started after the kill that failed" "$(kv new_failed)" 0
if [ "$(kv before_on_dead)" -ge 1 ]; then ok; else bad "failover: the killed replica served nothing before"; fi
expect_eq "failover: cut requests that were not on the dead replica" "$(kv cut_elsewhere)" 0
expect_eq "failover: cut requests that took more than 5 s to end" "$(kv cut_late)" 0
expect_eq "failover: responses without their X-Request-Id" "$(kv not_echoed)" 0
grep '^example' "$tmp/kill.txt"
echo "failover: $(kv inflight) requests in flight at the kill, $(kv cut) of them cut off (counted, not retried)"
start_server r3 "${replica_args[@]}" --port "$p3" || finish

# ---- Rolling restart under load ----------------------------------------------------------------
sleep 5 # nginx's fail_timeout: the restarted r3 is back in the pool
python3 tests/e2e/scaleout_load.py --url "http://127.0.0.1:$lb_bal" --workers 4 --duration 22 --max-tokens 32 \
    --tag roll >"$tmp/roll.json" &
load=$!
sleep 1
for i in 1 2 3; do
    name=r$i pid_var=pid_r$i
    if [ "$i" -eq 1 ]; then # a long request keeps r1 draining for about a second
        curl -s -H 'Content-Type: application/json' "$url_r1/v1/completions" -d '{"prompt":"Once","max_tokens":800,"ignore_eos":true,"stream":true}' \
            >"$tmp/long.sse" &
        long=$!
        sleep 0.3
    fi
    kill -TERM "${!pid_var}"
    t0=$(date +%s%N)
    if [ "$i" -eq 1 ]; then
        sleep 0.1
        expect_eq "r1 draining: /health" "$(curl -s -w ' %{http_code}' "$url_r1/health")" '{"status":"draining"} 503'
        expect_in "r1 draining: a new request" '"code":"draining"' \
            "$(curl -s -H 'Content-Type: application/json' -w ' %{http_code}' "$url_r1/v1/completions" -d '{"prompt":"x","max_tokens":2}')"
        wait "$long"
        expect_eq "r1 draining: the running stream finished" "$(tail -n 2 "$tmp/long.sse" | head -n 1)" "data: [DONE]"
    fi
    stop_server "$name"
    ms=$((($(date +%s%N) - t0) / 1000000))
    if [ "$ms" -lt 6000 ]; then ok; else bad "$name: took $ms ms to exit after SIGTERM (drain is 5 s)"; fi
    start_server "$name" "${replica_args[@]}" --port "${ports[i-1]}" || finish
    sleep 5.5 # back in nginx's pool before the next one goes
done
wait "$load"
python3 - "$tmp/roll.json" >"$tmp/roll.txt" <<'PY'
import json, sys
reqs = json.load(open(sys.argv[1]))["requests"]
bad = [r for r in reqs if not (r["status"] == 200 and r["done"])]
print("total", len(reqs), "failed", len(bad))
for r in bad[:5]: print("example", json.dumps(r))
PY
cat "$tmp/roll.txt"
read -r _ total _ failed < <(head -n 1 "$tmp/roll.txt")
if [ "${total:-0}" -ge 20 ]; then ok; else bad "rolling restart: only ${total:-0} requests"; fi
expect_eq "rolling restart: failed requests" "${failed:-?}" 0
restarted=$(grep -c "upstream=127.0.0.1:$p1 " "$tmp/bal/access.log")
if [ "$restarted" -ge 1 ]; then ok; else bad "rolling restart: no request reached r1"; fi

for i in 1 2 3; do stop_server "r$i"; done
finish
