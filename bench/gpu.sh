#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (a lent one: bench/gpu-bundle.sh prepares build/cuda.tgz and
# shared/ here, and says how to start this there): the CUDA backend's tests on the GPU; every record of
# shared/golden, shared/quants and shared/archs through the GPU pass; then speed, nucleus bench --device cuda (pp512, tg128, 3 repetitions) on issue 19's
# synthetic models (TinyLlama-1.1B Q4_0, Llama-2-7B Q4_0 and Q8_0; TinyLlama Q4_K, a K-quant read from
# its blocks), and one decode run of each
# timed operation by operation (NUCLEUS_CUDA_PROFILE=1). With build/llamacpp-src.tgz (gpu-bundle.sh
# packs it), llama.cpp b4748 is built there with CUDA for sm_90 while the tests run
# (../shared/tools/build-llamacpp, llama-bench only) and benched on the same files after nucleus
# (-ngl 99, flash attention on, as issue 19's figures): the same-run comparison. Last, the
# server with 1, 8 and 32 streams on Llama-2-7B Q4_0, beside llama-server (also built there). A
# summary is printed last; the logs are under $OUT (the device tool's folder that comes back) or
# /tmp/gpu-out.
set -u
cd "$(dirname "$0")/.."
# gpu-bundle.sh's pack, unless what is unpacked is newer (-m: dated when unpacked)
if [ build/cuda.tgz -nt build/cuda/nucleus ]; then tar xzmf build/cuda.tgz -C build || exit 1; fi
export LD_LIBRARY_PATH=$PWD/build/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
SHARED=${SHARED:-$PWD/shared}
[ -d "$SHARED/golden" ] || SHARED=$(cd .. && pwd)/shared
export SHARED
OUT=${OUT:-/tmp/gpu-out}
MODELS=${MODELS:-/tmp/gpu-models}
PY=$(command -v python3)
N=build/cuda/nucleus
mkdir -p "$OUT" "$MODELS"
summary=$OUT/summary.txt
: >"$summary"
say() { printf '%s\n' "$*" >>"$summary"; }
start=$SECONDS
say "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)"
LC=/tmp/llamacpp
if [ -f build/llamacpp-src.tgz ]; then
    mkdir -p "$LC" && tar xzf build/llamacpp-src.tgz -C "$LC" &&
        bash "$SHARED/tools/build-llamacpp" /nonexistent "$LC" --cuda llama-bench llama-server >"$OUT/llamacpp-build.log" 2>&1 &
    lc_pid=$!
fi

for t in build/cuda/tests/test_*; do
    name=$(basename "$t")
    "$t" >"$OUT/$name.log" 2>&1
    say "$(tail -n 1 "$OUT/$name.log")"
    grep -E '^(FAIL|SKIPPED)' "$OUT/$name.log" | head -n 10 >>"$summary"
done

check() { # name, checker arguments...
    local name=$1
    shift
    "$PY" "$@" >"$OUT/$name.log" 2>&1
    grep -E '^\|' "$OUT/$name.log" >>"$summary"
    grep -E '^FAIL' "$OUT/$name.log" | head -n 10 >>"$summary"
    say "$(tail -n 1 "$OUT/$name.log") ($((SECONDS - start)) s)"
}
check golden tests/e2e/golden_check.py --nucleus "$N" --shared "$SHARED" --models "$MODELS" --device cuda --cache-types f16
check quants tests/e2e/golden_check.py --nucleus "$N" --shared "$SHARED" --models "$MODELS" --device cuda --cache-types f16 \
    --set quants
check archs tests/e2e/archs_check.py --nucleus "$N" --shared "$SHARED" --device cuda --forms gguf,hf

for spec in "tinyllama-1.1b q4_0" "tinyllama-1.1b q4_k" "llama2-7b q4_0" "llama2-7b q8_0"; do
    set -- $spec
    f=$MODELS/bench-$1-$2.gguf
    [ -s "$f" ] || "$PY" "$SHARED/tools/synth-gguf" --shape "$1" --type "$2" -o "$f" >/dev/null
    "$N" bench -m "$f" --device cuda -p 512 -n 128 -r 3 >"$OUT/bench-$1-$2.txt" 2>&1
    grep -E '^\| [^m-]' "$OUT/bench-$1-$2.txt" >>"$summary" || tail -n 3 "$OUT/bench-$1-$2.txt" >>"$summary"
    NUCLEUS_CUDA_PROFILE=1 "$N" bench -m "$f" --device cuda -p 0 -n 32 -r 1 >"$OUT/profile-$1-$2.txt" 2>&1
    say "decode profile, $1 $2:"
    grep -A 12 'cuda profile' "$OUT/profile-$1-$2.txt" >>"$summary"
done
if [ -n "${lc_pid:-}" ]; then
    wait "$lc_pid"
    say "llama.cpp b4748 built ($((SECONDS - start)) s): $(tail -n 1 "$OUT/llamacpp-build.log")"
    for spec in "tinyllama-1.1b q4_0" "tinyllama-1.1b q4_k" "llama2-7b q4_0" "llama2-7b q8_0"; do
        set -- $spec
        "$LC/build/bin/llama-bench" -m "$MODELS/bench-$1-$2.gguf" -ngl 99 -fa 1 -p 512 -n 128 -r 3 \
            >"$OUT/llamacpp-$1-$2.txt" 2>&1
        grep -E '^\| .*(pp|tg)[0-9]' "$OUT/llamacpp-$1-$2.txt" >>"$summary" || tail -n 3 "$OUT/llamacpp-$1-$2.txt" >>"$summary"
    done
fi

# The server: aggregate generated tokens/s and time to first token with 1, 8 and 32 streams on
# Llama-2-7B Q4_0, 32 slots of 1024 tokens, nucleus then llama-server (-ngl 99 -fa, the same
# slots) when it was built; bench/server/load.py, load.mjs's twin (this image has no node).
url=http://127.0.0.1:18080
up() { # waits for $url/health (a loading llama-server answers 503)
    for _ in $(seq 1200); do
        "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/health", timeout=2)' "$url" \
            2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
serve_load() { # name, server command...
    local name=$1 pid
    shift
    "$@" >"$OUT/server-$name.log" 2>&1 &
    pid=$!
    if up; then
        for streams in 1 8 32; do
            say "| $name $("$PY" bench/server/load.py --url "$url" --streams "$streams" \
                --requests $((streams < 4 ? 8 : 2 * streams)) --max-tokens 64 2>&1 | tail -n 1)"
        done
    else
        say "server $name did not start: $(tail -n 3 "$OUT/server-$name.log")"
    fi
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}
say "| server | streams | requests | generated tok/s | TTFT p50 ms | TTFT p99 ms |"
f=$MODELS/bench-llama2-7b-q4_0.gguf
serve_load nucleus "$N" serve -m "$f" --device cuda --port 18080 --parallel 32 -c 1024
[ -x "$LC/build/bin/llama-server" ] &&
    serve_load llama.cpp "$LC/build/bin/llama-server" -m "$f" -ngl 99 -fa --port 18080 -np 32 -c 32768
say "gpu.sh: $((SECONDS - start)) s"
cat "$summary"
