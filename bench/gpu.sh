#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (a lent one: bench/gpu-bundle.sh prepares build/cuda.tgz,
# build/shared.tgz and llama.cpp here, and says how to start this there). Stages, in order (GPU_STAGES picks some):
#   tests     the CUDA backend's tests on the GPU (a failing one again under compute-sanitizer)
#   checks    every record of shared/golden, shared/quants and shared/archs through the GPU pass
#   bench     nucleus bench --device cuda (pp512, tg128, 3 repetitions) on issue 19's synthetic
#             models (TinyLlama-1.1B Q4_0, Llama-2-7B Q4_0 and Q8_0; TinyLlama Q4_K, a K-quant read
#             from its blocks), and one decode run of each timed operation by operation
#             (NUCLEUS_CUDA_PROFILE=1); with gpu-bundle.sh's GPU_BASE, the same bench of that
#             earlier commit's build after each (before / after a change in one run)
#   steps     one micro-batch of T tokens (a prefill of T: as a server step or a speculative
#             verification) on Llama-2-7B Q4_0 for T from 1 to 128: where the products' kernels
#             change (k_mul_vec for one; k_mul_mma's tiles of 8, 16, 32 tokens; k_mul_tile from
#             TILE_FROM), and llama.cpp's for some T
#   llamacpp  llama.cpp b4748 with CUDA for sm_90 (gpu-bundle.sh packs its binaries built there,
#             build/llamacpp-bin.txz, or its source, build/llamacpp-src.tgz, built here from the
#             start, in the background) on the same files: -ngl 99, flash attention on, as issue
#             19's figures; the same-run comparison
#   server    the server with 1, 8 and 32 streams on Llama-2-7B Q4_0, beside llama-server
# The device tool lends minutes, so the tests and the checks run at once (while llama.cpp builds and
# the bench models are written), every step has its own timeout, and a stage that would start after
# GPU_LIMIT seconds (default 420) is skipped, saying so. The summary ($OUT/summary.txt) is printed
# last; every log is packed into $OUT/gpu-logs.tgz (the device tool brings back 8 files).
set -u
cd "$(dirname "$0")/.."
# gpu-bundle.sh's pack, unless what is unpacked is newer (-m: dated when unpacked)
if [ build/cuda.tgz -nt build/cuda/nucleus ]; then tar xzmf build/cuda.tgz -C build || exit 1; fi
export LD_LIBRARY_PATH=$PWD/build/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# gpu-bundle.sh's pack of ../shared's parts, unpacked into ./shared (ignored by git)
if [ -f build/shared.tgz ] && [ build/shared.tgz -nt shared/README.md ]; then
    mkdir -p shared && tar xzmf build/shared.tgz -C shared || exit 1
fi
SHARED=${SHARED:-$PWD/shared}
[ -d "$SHARED/golden" ] || SHARED=$(cd .. && pwd)/shared
export SHARED
OUT=${OUT:-/tmp/gpu-out}
LOGS=/tmp/gpu-logs
MODELS=${MODELS:-/tmp/gpu-models}
STAGES=" ${GPU_STAGES:-tests checks bench steps llamacpp server} "
LIMIT=${GPU_LIMIT:-420}
PY=$(command -v python3)
N=build/cuda/nucleus
rm -rf "$LOGS"
mkdir -p "$OUT" "$LOGS" "$MODELS"
summary=$OUT/summary.txt # there as it grows: what a run cut short leaves comes back
: >"$summary"
say() { printf '%s\n' "$*" >>"$summary"; }
start=$SECONDS
stage() { # name: whether to run it (chosen, and time left)
    case $STAGES in *" $1 "*) ;; *) return 1 ;; esac
    if [ $((SECONDS - start)) -ge "$LIMIT" ]; then
        say "stage $1 skipped: $((SECONDS - start)) s of GPU_LIMIT=$LIMIT spent"
        return 1
    fi
    say "== $1 ($((SECONDS - start)) s)"
}
finish() {
    say "gpu.sh: $((SECONDS - start)) s"
    tar czf "$OUT/gpu-logs.tgz" -C "$LOGS" . 2>/dev/null
    cat "$summary"
}
trap finish EXIT
say "$(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
say "$(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

LC=/tmp/llamacpp
case $STAGES in *" steps "* | *" llamacpp "* | *" server "*)
    if [ -f build/llamacpp-bin.txz ]; then # built by gpu-bundle.sh's machine, CUDA for sm_90
        mkdir -p "$LC/build" && { tar xJf build/llamacpp-bin.txz -C "$LC/build" ||
            "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' build/llamacpp-bin.txz "$LC/build"; }
        # its own libraries, then the CUDA toolkit's (cuBLAS): its run paths name the machine it was built on
        export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$LC/build/bin:/usr/local/cuda/lib64
    elif [ -f build/llamacpp-src.tgz ] && [ ! -x "$LC/build/bin/llama-bench" ]; then
        mkdir -p "$LC" && tar xzf build/llamacpp-src.tgz -C "$LC" &&
            timeout 400 bash "$SHARED/tools/build-llamacpp" /nonexistent "$LC" --cuda llama-bench llama-server \
                >"$LOGS/llamacpp-build.log" 2>&1 &
        lc_pid=$!
    fi ;;
esac
BENCH="tinyllama-1.1b:q4_0 tinyllama-1.1b:q4_k llama2-7b:q4_0 llama2-7b:q8_0"
bench_model() { echo "$MODELS/bench-${1%:*}-${1#*:}.gguf"; }
synth() { # shape:type...: writes the bench models not yet there, at once, each beside and then renamed
    local s f
    for s in "$@"; do
        f=$(bench_model "$s")
        [ -s "$f" ] || { "$PY" "$SHARED/tools/synth-gguf" --shape "${s%:*}" --type "${s#*:}" -o "$f.part" &&
            mv "$f.part" "$f"; } >>"$LOGS/synth.log" 2>&1 &
    done
    wait
}
case $STAGES in *" bench "* | *" steps "* | *" llamacpp "* | *" server "*) synth $BENCH & synth_pid=$! ;; esac
written() { # shape:type: waits for the bench model, while synth runs
    [ -n "${synth_pid:-}" ] || return 0
    while [ ! -s "$(bench_model "$1")" ] && kill -0 "$synth_pid" 2>/dev/null; do sleep 1; done
}

# A step: its log, its timeout, its command; the log's last line into the summary.
step() { # name, seconds, command...
    local name=$1 secs=$2 rc
    shift 2
    timeout -k 5 "$secs" "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    [ $rc -eq 124 ] && echo "TIMEOUT after $secs s" >>"$LOGS/$name.log"
    {
        grep -E '^\|' "$LOGS/$name.log" | head -n 40
        grep -E '^(FAIL|SKIPPED|TIMEOUT)|rror' "$LOGS/$name.log" | head -n 12
        echo "$name: $(tail -n 1 "$LOGS/$name.log") (rc $rc, $((SECONDS - start)) s)"
    } >"$LOGS/$name.sum"
    return $rc
}
pids=()
if stage tests; then
    for t in build/cuda/tests/test_*; do
        name=$(basename "$t")
        (step "$name" 200 "$t" ||
            { command -v compute-sanitizer >/dev/null &&
                step "$name-memcheck" 150 compute-sanitizer --tool memcheck --print-limit 20 "$t"; }) &
        pids+=($!)
    done
    # the cache's stores in machine code, for a look here (the stores of quantised blocks)
    command -v cuobjdump >/dev/null && cuobjdump -sass build/cuda/nucleus 2>&1 |
        awk '/Function : .*k_kv_store/ {p = 1; print; next} /Function :/ {p = 0} p' >"$LOGS/sass-k_kv_store.txt" &
fi
if stage checks; then
    step golden 240 "$PY" tests/e2e/golden_check.py --nucleus "$N" --shared "$SHARED" --models "$MODELS" \
        --device cuda --cache-types "${GPU_CACHE_TYPES:-f16}" &
    pids+=($!)
    [ -d "$SHARED/quants" ] && step quants 240 "$PY" tests/e2e/golden_check.py --nucleus "$N" --shared "$SHARED" --models "$MODELS" \
        --device cuda --cache-types f16 --set quants &
    pids+=($!)
    [ -d "$SHARED/archs" ] && step archs 240 "$PY" tests/e2e/archs_check.py --nucleus "$N" --shared "$SHARED" --device cuda --forms gguf,hf &
    pids+=($!)
fi
[ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
for f in "$LOGS"/test_*.sum "$LOGS"/golden.sum "$LOGS"/quants.sum "$LOGS"/archs.sum; do
    [ -f "$f" ] && cat "$f" >>"$summary"
done

if [ -n "${lc_pid:-}" ]; then # before the timings, which it would share the CPUs with
    wait "$lc_pid"
    say "llama.cpp b4748 built ($((SECONDS - start)) s): $(tail -n 1 "$LOGS/llamacpp-build.log")"
fi
if stage bench; then
    for s in $BENCH; do
        written "$s"
        step "bench-${s%:*}-${s#*:}" 90 "$N" bench -m "$(bench_model "$s")" --device cuda -p 512 -n 128 -r 3
        grep -E '^\| [^m-]' "$LOGS/bench-${s%:*}-${s#*:}.log" >>"$summary" || cat "$LOGS/bench-${s%:*}-${s#*:}.sum" >>"$summary"
        [ -x "$N-base" ] || continue # gpu-bundle.sh's GPU_BASE build: the same figures before the change
        step "base-${s%:*}-${s#*:}" 90 "$N-base" bench -m "$(bench_model "$s")" --device cuda -p 512 -n 128 -r 3
        say "GPU_BASE ($(cat build/cuda/base.txt 2>/dev/null)), $s: $(grep -E '^\| [^m-]' "$LOGS/base-${s%:*}-${s#*:}.log" |
            awk -F'|' '{printf "%s%s%s", sep, $7, $8; sep = " /"}')"
    done
    for s in $BENCH; do
        step "profile-${s%:*}-${s#*:}" 60 env NUCLEUS_CUDA_PROFILE=1 "$N" bench -m "$(bench_model "$s")" \
            --device cuda -p 0 -n 32 -r 1
        say "decode profile, $s:"
        grep -A 12 'cuda profile' "$LOGS/profile-${s%:*}-${s#*:}.log" >>"$summary"
    done
    for s in llama2-7b:q4_0 llama2-7b:q8_0; do # prefill with the products on the FMA units instead
        step "fma-${s%:*}-${s#*:}" 60 env NUCLEUS_CUDA_MMA=0 "$N" bench -m "$(bench_model "$s")" --device cuda -p 512 -n 0 -r 3
        say "NUCLEUS_CUDA_MMA=0, $s: $(grep -E '^\| [^m-]' "$LOGS/fma-${s%:*}-${s#*:}.log" | tail -n 1)"
    done
fi
if stage steps; then
    written llama2-7b:q4_0
    for T in 1 2 4 8 9 16 24 31 32 48 63 64 96 128; do
        step "step-$T" 60 "$N" bench -m "$(bench_model llama2-7b:q4_0)" --device cuda -p "$T" -n 0 -r 3
        say "step of $T tokens, llama2-7b q4_0: $(grep -E '^\| [^m-]' "$LOGS/step-$T.log" | awk -F'|' '{print $8}')"
    done
    [ -x "$LC/build/bin/llama-bench" ] && step step-llamacpp 90 "$LC/build/bin/llama-bench" \
        -m "$(bench_model llama2-7b:q4_0)" -ngl 99 -fa 1 -p 1,4,8,16,32,64,128 -n 0 -r 3 &&
        grep -E '^\| .*pp[0-9]' "$LOGS/step-llamacpp.log" >>"$summary"
fi
if stage llamacpp && [ -x "$LC/build/bin/llama-bench" ]; then
    for s in $BENCH; do
        written "$s"
        step "llamacpp-${s%:*}-${s#*:}" 90 "$LC/build/bin/llama-bench" -m "$(bench_model "$s")" \
            -ngl 99 -fa 1 -p 512 -n 128 -r 3
        grep -E '^\| .*(pp|tg)[0-9]' "$LOGS/llamacpp-${s%:*}-${s#*:}.log" >>"$summary" ||
            cat "$LOGS/llamacpp-${s%:*}-${s#*:}.sum" >>"$summary"
    done
fi

# The server: aggregate generated tokens/s and time to first token with 1, 8 and 32 streams on
# Llama-2-7B Q4_0, 32 slots of 1024 tokens, nucleus then llama-server (-ngl 99 -fa, the same
# slots) when it was built; bench/server/load.py, load.mjs's twin (this image has no node).
up() { # pid: waits up to 2 minutes for $url/health (a loading llama-server answers 503) while pid lives
    "$PY" - "$url" "$1" <<'EOF'
import os, sys, time, urllib.request
for _ in range(1200):
    try:
        urllib.request.urlopen(sys.argv[1] + "/health", timeout=2)
        sys.exit(0)
    except Exception:
        pass
    try:
        os.kill(int(sys.argv[2]), 0)
    except OSError:
        sys.exit(1)
    time.sleep(0.1)
sys.exit(1)
EOF
}
serve_load() { # name, port, server command... (each server its own port: the last one's may linger)
    local name=$1 url=http://127.0.0.1:$2 pid
    shift 2
    "$@" >"$LOGS/server-$name.log" 2>&1 &
    pid=$!
    if up "$pid"; then
        for streams in 1 8 32; do
            say "| $name $(timeout 60 "$PY" bench/server/load.py --url "$url" --streams "$streams" \
                --requests $((streams < 4 ? 8 : 2 * streams)) --max-tokens 64 2>&1 | tail -n 1)"
        done
    else
        say "server $name did not start: $(tail -n 3 "$LOGS/server-$name.log")"
    fi
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}
if stage server; then
    say "| server | streams | requests | generated tok/s | TTFT p50 ms | TTFT p99 ms |"
    written llama2-7b:q4_0
    f=$(bench_model llama2-7b:q4_0)
    serve_load nucleus 18080 "$N" serve -m "$f" --device cuda --port 18080 --parallel 32 -c 1024
    [ -x "$LC/build/bin/llama-server" ] &&
        serve_load llama.cpp 18081 "$LC/build/bin/llama-server" -m "$f" -ngl 99 -fa --port 18081 -np 32 -c 32768
fi
