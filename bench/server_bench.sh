#!/usr/bin/env bash
# Server throughput: aggregate generated tokens/s and time to first token (p50, p99) with 1, 4
# and 8 concurrent streams: the synthetic SmolLM2-135M Q8_0 model, streaming /v1/completions,
# 64 generated tokens per request, temperature 0.8, 2 threads, 8 slots of 1024 tokens
# (llama.cpp: -np 8 -c 8192, the same context per slot).
#   bash bench/server_bench.sh [--llamacpp DIR] [-r ROUNDS] [REQUESTS_PER_STREAM (default 6)]
# With --llamacpp, DIR/bin/llama-server (a build of ../shared/tools/build-llamacpp) serves the same
# file with the same threads and slots, and the two servers take turns: each round runs every
# stream count on nucleus, then on llama.cpp, so both meet the same spells of a shared machine.
# Prints a Markdown table, one row per server, round and stream count. The load generator is
# bench/server/load.mjs (node, no packages).
set -eu
cd "$(dirname "$0")/.."
. tests/lib/models.sh
per_stream=6 lc="" rounds=1
while [ $# -gt 0 ]; do
    case $1 in
        --llamacpp) lc=$2; shift 2 ;;
        -r) rounds=$2; shift 2 ;;
        -*) echo "usage: bash bench/server_bench.sh [--llamacpp DIR] [-r ROUNDS] [REQUESTS_PER_STREAM]" >&2; exit 2 ;;
        *) per_stream=$1; shift ;;
    esac
done
[ -z "$lc" ] || [ -x "$lc/bin/llama-server" ] || { echo "--llamacpp DIR: no DIR/bin/llama-server" >&2; exit 2; }
make -s build/nucleus
model=$(synth_model smollm2-135m-q8_0 --shape smollm2-135m --type q8_0)
tmp=$(mktemp -d)
pid=""
stop() { [ -z "$pid" ] || { kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }; pid=""; }
trap 'stop; rm -rf "$tmp"' EXIT

# start NAME CMD...: runs the server, sets url once it answers /health
start() {
    local name=$1; shift
    "$@" >"$tmp/$name.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do
        curl -sf "$url/health" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    cat "$tmp/$name.log" >&2
    exit 1
}
load() { # NAME
    for streams in 1 4 8; do
        node bench/server/load.mjs --url "$url" --streams "$streams" --requests $((streams * per_stream)) \
            --max-tokens 64 --temperature 0.8 | sed "s/^| /| $1 | $round | /"
    done
}

port=$((20000 + RANDOM % 20000))
url=http://127.0.0.1:$port
echo "$(basename "$model"), $(nproc) cores, per stream $per_stream requests"
echo
echo "| server | round | streams | requests | generated tok/s | TTFT p50 ms | TTFT p99 ms |"
echo "|---|---|---|---|---|---|---|"
for round in $(seq "$rounds"); do
    start nucleus build/nucleus serve -m "$model" --port "$port" --parallel 8 -c 1024 -t 2
    load nucleus
    stop
    if [ -n "$lc" ]; then
        start llama.cpp env LD_LIBRARY_PATH="$lc/bin" "$lc/bin/llama-server" -m "$model" --port "$port" -np 8 -c 8192 -t 2
        load llama.cpp
        stop
    fi
done
