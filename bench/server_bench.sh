#!/usr/bin/env bash
# Server throughput: aggregate generated tokens/s and time to first token (p50, p99) with 1, 4
# and 8 concurrent streams, as llama.cpp's server figures in ../shared/README.md were made:
# the synthetic SmolLM2-135M Q8_0 model, streaming /v1/completions, 64 generated tokens per
# request, temperature 0.8, 2 threads, 8 slots of 1024 tokens (llama.cpp: -np 8 -c 8192).
#   bash bench/server_bench.sh [REQUESTS_PER_STREAM (default 6)]
# Prints a Markdown table. The load generator is bench/server/load.mjs (node, no packages).
set -eu
cd "$(dirname "$0")/.."
. tests/lib/models.sh
per_stream=${1:-6}
make -s build/nucleus
model=$(synth_model smollm2-135m-q8_0 --shape smollm2-135m --type q8_0)
log=$(mktemp)
build/nucleus serve -m "$model" --port 0 --parallel 8 -c 1024 -t 2 2>"$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
url=""
for _ in $(seq 1 100); do
    url=$(grep -o 'http://[0-9.:]*' "$log" || true)
    [ -n "$url" ] && break
    sleep 0.1
done
[ -n "$url" ] || { cat "$log"; exit 1; }

echo "nucleus serve, $(basename "$model"), $(nproc) cores, $(grep -o '[a-z0-9]* kernels' "$log")"
echo
echo "| streams | requests | generated tok/s | TTFT p50 ms | TTFT p99 ms |"
echo "|---|---|---|---|---|"
for streams in 1 4 8; do
    node bench/server/load.mjs --url "$url" --streams "$streams" --requests $((streams * per_stream)) \
        --max-tokens 64 --temperature 0.8
done
