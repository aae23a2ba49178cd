#!/usr/bin/env bash
# Router mode (not a test): the time from a request for a model not in memory to its first
# token, beside a model in memory, and the generated tokens/s of 8 streams spread over 2 models
# beside 8 on one, release build.
#   bash bench/router.sh [SECONDS per throughput run (default 10)]
# With LLAMA_SERVER=path/to/llama-server the same runs against llama.cpp's router on the same
# directory (llama-server --models-dir DIR --models-max 2), for comparison.
set -eu
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared}
secs=${1:-10}
make -s build/nucleus
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
mkdir "$tmp/models"
ln -s "$(realpath "$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf")" "$tmp/models/tiny.gguf"
ln -s "$(realpath "$SHARED/models/stories260K/stories260K.gguf")" "$tmp/models/stories.gguf"
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

measure() { # URL LABEL UNLOAD_PATH: prints the figures of one server
    python3 - "$1" "$2" "$3" "$secs" <<'PY'
import json, statistics, sys, threading, time, urllib.error, urllib.request
url, label, unload, secs = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def post(path, body):
    r = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(r, timeout=600)
def first_token(model):
    t0 = time.perf_counter()
    with post("/v1/completions", {"model": model, "prompt": "Once upon a time", "max_tokens": 4, "stream": True}) as r:
        for line in r:
            if line.startswith(b"data: {") and b'"text":""' not in line:
                return time.perf_counter() - t0
def status(model):
    with urllib.request.urlopen(url + "/v1/models", timeout=60) as r:
        for m in json.load(r)["data"]:
            if m["id"] == model:
                s = m.get("status", {})
                return s.get("value") if isinstance(s, dict) else s
def unload_now(model):
    # llama-server answers 400 for a model not in memory, and unloads in the background: wait until
    # the list says it is gone
    try:
        post(unload, {"model": model}).read()
    except urllib.error.HTTPError:
        pass
    deadline = time.perf_counter() + 30
    while status(model) != "unloaded" and time.perf_counter() < deadline:
        time.sleep(0.05)
cold, warm = [], []
for _ in range(5):
    unload_now("tiny")
    cold.append(first_token("tiny"))
    warm.append(first_token("tiny"))
def streams(models):
    tokens, stop = [0], time.perf_counter() + secs
    lock = threading.Lock()
    def client(m):
        while time.perf_counter() < stop:
            with post("/v1/completions", {"model": m, "prompt": "Once upon a time", "max_tokens": 64,
                                          "ignore_eos": True}) as r:
                n = json.load(r)["usage"]["completion_tokens"]
            with lock:
                tokens[0] += n
    ts = [threading.Thread(target=client, args=(m,)) for m in models]
    for t in ts: t.start()
    for t in ts: t.join()
    return tokens[0] / secs
one = streams(["tiny"] * 8)
two = streams(["tiny", "stories"] * 4)
print("| %s | %.1f | %.1f | %.0f | %.0f |" % (label, 1000 * statistics.median(cold), 1000 * statistics.median(warm), one, two))
PY
}

echo "| server | first token, model not loaded (ms) | first token, loaded (ms) | 8 streams, 1 model (tok/s) | 8 streams, 2 models (tok/s) |"
echo "|---|---|---|---|---|"
p=$(port)
build/nucleus serve --models-dir "$tmp/models" --models-max 2 --parallel 8 -c 1024 -t 2 --port "$p" 2>"$tmp/nucleus.err" &
pids+=($!)
until grep -q "listening on" "$tmp/nucleus.err"; do sleep 0.1; done
measure "http://127.0.0.1:$p" nucleus /models/unload
if [ -n "${LLAMA_SERVER:-}" ]; then
    p=$(port)
    "$LLAMA_SERVER" --models-dir "$tmp/models" --models-max 2 -np 8 -c 8192 -t 2 --port "$p" >"$tmp/llama.err" 2>&1 &
    pids+=($!)
    until curl -s "http://127.0.0.1:$p/health" | grep -q ok; do sleep 0.2; done
    measure "http://127.0.0.1:$p" llama-server /models/unload
fi
