#!/usr/bin/env bash
# Scale-out throughput: aggregate generated tokens/s through nginx (deploy/nginx/nucleus.conf,
# least connections) with 1 replica and with 3, at the same concurrency, release build.
#   bash bench/scaleout.sh [STREAMS (default 6)] [SECONDS (default 15)] [THREADS per replica (default 1)]
# The model is TinyStories-656K (64 generated tokens a request, streamed). On a machine with
# fewer cores than replicas x threads the replicas share the cores: the ratio is core-bound.
set -eu
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared}
streams=${1:-6} secs=${2:-15} threads=${3:-1}
make -s build/nucleus
model=$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
read -r p1 p2 p3 lb < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')

# run N: N replicas behind nginx; prints generated tokens/s.
run() {
    local n=$1 d=$tmp/n$1 ports=("$p1" "$p2" "$p3")
    mkdir -p "$d"
    local rp=()
    for i in $(seq 1 "$n"); do
        build/nucleus serve -m "$model" --port "${ports[i-1]}" --max-conn-per-ip 0 --parallel "$streams" -c 1024 -t "$threads" 2>"$d/r$i.err" &
        rp+=($!)
        pids+=($!)
    done
    # a replica missing from this run is simply down: nginx skips it
    sed -e "s/listen 8080;/listen 127.0.0.1:$lb;/" -e "s/127.0.0.1:8081/127.0.0.1:$p1/" \
        -e "s/127.0.0.1:8082/127.0.0.1:$p2/" -e "s/127.0.0.1:8083/127.0.0.1:$p3/" \
        -e "s#/var/log/nginx/nucleus.access.log#$d/access.log#" deploy/nginx/nucleus.conf >"$d/nucleus.conf"
    if [ "$n" -eq 1 ]; then sed -i -e "/127.0.0.1:$p2/d" -e "/127.0.0.1:$p3/d" "$d/nucleus.conf"; fi
    printf 'daemon off;\npid %s/nginx.pid;\nerror_log %s/error.log;\nevents { worker_connections 512; }\nhttp {\n client_body_temp_path %s/b; proxy_temp_path %s/p; fastcgi_temp_path %s/f; uwsgi_temp_path %s/u; scgi_temp_path %s/s;\n include %s/nucleus.conf;\n}\n' \
        "$d" "$d" "$d" "$d" "$d" "$d" "$d" "$d" >"$d/nginx.conf"
    nginx -p "$d" -c "$d/nginx.conf" &
    local ng=$!
    pids+=($ng)
    for port in "${ports[@]:0:n}" "$lb"; do
        for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
    done
    python3 tests/e2e/scaleout_load.py --url "http://127.0.0.1:$lb" --workers "$streams" --duration "$secs" \
        --max-tokens 64 >"$d/load.json"
    kill -TERM "$ng" "${rp[@]}"
    wait "$ng" "${rp[@]}" 2>/dev/null || true
    python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
r = d["requests"]
good = [x for x in r if x["status"] == 200 and x["done"]]
print("%.0f %d %d" % (sum(x["tokens"] for x in good) / d["wall"], len(r), len(r) - len(good)))' "$d/load.json"
}
read -r one n1 f1 < <(run 1)
read -r three n3 f3 < <(run 3)
echo "nucleus serve behind nginx, TinyStories-656K Q8_0, $streams concurrent streams, 64 tokens each,"
echo "$threads thread(s) per replica, ${secs} s per run, $(nproc) cores"
echo
echo "| replicas | generated tok/s | requests | failed |"
echo "|---|---|---|---|"
echo "| 1 | $one | $n1 | $f1 |"
echo "| 3 | $three | $n3 | $f3 |"
python3 -c "import sys; print(); print('3 replicas / 1: %.2fx' % (float(sys.argv[2]) / float(sys.argv[1])))" "$one" "$three"
