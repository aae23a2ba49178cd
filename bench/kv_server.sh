#!/usr/bin/env bash
# The server's managed KV cache: time to first token with a shared ~2000-token prefix, and 8
# slots of 4096 tokens on the pool 8 fixed slots of 1024 took (bench/kv_server.py). Synthetic
# SmolLM2-135M Q8_0 (30 layers, 3 KV heads of 64: 22.5 KiB per token in F16), 2 threads.
#   bash bench/kv_server.sh
set -eu
cd "$(dirname "$0")/.."
. tests/lib/models.sh
make -s build/nucleus
model=$(synth_model smollm2-135m-q8_0 --shape smollm2-135m --type q8_0)
exec /usr/bin/python3 bench/kv_server.py --nucleus build/nucleus --model "$model" --kib-per-token 22.5
