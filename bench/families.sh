#!/usr/bin/env bash
# The 2026 families beside llama.cpp (issue 43's speed part): synthetic models with the shapes of
# real ones (bench/synth_arch.py, regenerated into build/models when missing; deterministic, never
# committed), prefill pp512 and decode tg128, nucleus and llama.cpp's llama-bench one after the
# other on each model, their ratios as a markdown table.
#
#   bash bench/families.sh --llamacpp DIR [-t THREADS] [-r REPS] [--type q4_0|q8_0] [--fast] [--only REGEX]
#                          [--layers N] [-p 512] [-n 128]
#
# DIR holds bin/llama-bench (a build of the 2026-04 fork Mesh-LLM/llama.cpp, made outside the
# repository with ../shared/tools/build-llamacpp; its code never comes here). Each model runs
# `nucleus bench -p 512 -n 128 -r R -t T` in the default mode (int16 activations), with --fast also
# in the fast mode (int8 activations for the Q8_0/Q4_0 products), then
# `llama-bench -m FILE -p 512 -n 128 -r R -t T` (its defaults otherwise). Ratios are nucleus /
# llama.cpp, measured in this run; they mean something only on an otherwise idle machine: the load
# average before the run is printed with the table. --layers N cuts every model to its first N
# layers (quick runs; the files are then named -lN).
set -eu
cd "$(dirname "$0")/.."
. tests/lib/models.sh
threads=2 reps=3 type=q4_0 fast=0 only=. lc="" layers="" pp=512 tg=128
usage() {
    echo "usage: bash bench/families.sh --llamacpp DIR [-t THREADS] [-r REPS] [--type q4_0|q8_0] [--fast] [--only REGEX] [--layers N] [-p N] [-n N]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case $1 in
        --llamacpp) lc=$2; shift 2 ;;
        -t) threads=$2; shift 2 ;;
        -r) reps=$2; shift 2 ;;
        -p) pp=$2; shift 2 ;;
        -n) tg=$2; shift 2 ;;
        --type) type=$2; shift 2 ;;
        --fast) fast=1; shift ;;
        --only) only=$2; shift 2 ;;
        --layers) layers=$2; shift 2 ;;
        *) usage ;;
    esac
done
[ -x "$lc/bin/llama-bench" ] || { echo "--llamacpp DIR: no DIR/bin/llama-bench" >&2; usage; }
make -s -j2 build/nucleus

# name | synth_arch.py arguments. The Qwen3.5 MoE is Qwen3.5-35B-A3B's shape cut to 8 of its 40
# layers (two full-attention layers; the whole model's file would be ~19 GB in Q4_0, more than this
# machine's page cache holds beside the others).
models="qwen3.5-4b|--shape qwen3.5-4b
qwen3.5-35b-a3b-l8|--shape qwen3.5-35b-a3b --layers 8
granite-4.0-h-tiny|--shape granite-4.0-h-tiny
lfm2-1.2b|--shape lfm2-1.2b
deepseek-v2-lite|--shape deepseek-v2-lite"

out=$(mktemp); trap 'rm -f "$out"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "$models" | while IFS='|' read -r name args; do
    [[ $name =~ $only ]] || continue
    suffix=""; [ -n "$layers" ] && { args="$args --layers $layers"; suffix="-l$layers"; }
    file=$MODELS_DIR/fam-$name$suffix-$type.gguf
    mkdir -p "$MODELS_DIR"
    if [ ! -s "$file" ]; then
        # shellcheck disable=SC2086
        /usr/bin/python3 bench/synth_arch.py $args --type "$type" -o "$file" >&2
    fi
    for mode in default fast; do
        [ "$mode" = fast ] && [ $fast = 0 ] && continue
        flags=""; [ "$mode" = fast ] && flags="--fast"
        echo "$name: nucleus bench $flags" >&2
        json=$(build/nucleus bench -m "$file" -p "$pp" -n "$tg" -t "$threads" -r "$reps" --json --no-bandwidth $flags)
        echo "$name|$file|nucleus $mode|$json" >> "$out"
    done
    echo "$name: llama-bench" >&2
    json=$("$lc/bin/llama-bench" -m "$file" -p "$pp" -n "$tg" -t "$threads" -r "$reps" -o json 2>/dev/null | tr -d '\n')
    echo "$name|$file|llama.cpp|${json:-[]}" >> "$out"
done

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
isa=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512bw|avx512vl|avx512_vnni|avx512_bf16)$' | tr '\n' ' ')
# how llama.cpp was compiled (its CPU backend's flags, when DIR is a CMake build directory)
lc_flags=$(grep -ho -- '-march=[^ ]*\|-fopenmp' "$lc/ggml/src/CMakeFiles/ggml-cpu.dir/flags.make" 2>/dev/null | sort -u | tr '\n' ' ')
/usr/bin/python3 - "$out" "$threads" "$reps" "$type" "$pp" "$tg" "$cpu" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" \
    "$isa" "$lc_flags" <<'PY'
import json, os, sys, datetime
path, threads, reps, typ, pp, tg, cpu, load0, load1, isa, lc_flags = sys.argv[1:]
rows = [l.rstrip("\n").split("|", 3) for l in open(path)]
def llama(js):  # llama-bench's JSON list -> {"pp", "tg"} tokens/s, and its CPU description
    r, info = {}, ""
    for t in json.loads(js or "[]"):
        r["pp" if t.get("n_prompt") else "tg"] = t["avg_ts"]
        info = "%s, %s" % (t.get("backends", "?"), t.get("cpu_info", "?"))
    return r, info
ours = [(r[0], r[1], r[2][len("nucleus "):], json.loads(r[3])) for r in rows if r[2].startswith("nucleus")]
peers = {r[0]: llama(r[3]) for r in rows if r[2] == "llama.cpp"}
kern = ours[0][3]["kernels"] if ours else "?"
print("bench/families.sh: nucleus bench -p %s -n %s -t %s -r %s and llama-bench -p %s -n %s -t %s -r %s, "
      "%s weights, %s" % (pp, tg, threads, reps, pp, tg, threads, reps, typ.upper(), datetime.date.today().isoformat()))
print("\nCPU: %s, %d cores (%s); nucleus kernels: %s; llama.cpp: %s, built with %s" % (cpu, os.cpu_count(), isa.strip(),
      kern, next((v[1] for v in peers.values() if v[1]), "?"), lc_flags.strip() or "?"))
print("load average before / after: %s / %s\n" % (load0, load1))
print("| model | file | nucleus mode | prefill pp%s tok/s | llama.cpp | ratio | decode tg%s tok/s | llama.cpp | ratio |" % (pp, tg))
print("|---|---|---|---|---|---|---|---|---|")
for name, f, mode, d in ours:
    theirs = peers.get(name, ({}, ""))[0]
    cells = []
    for k in ("pp", "tg"):
        v = theirs.get(k)
        cells.append("%.2f ± %.2f | %s | %s" % (d[k]["mean"], d[k]["sd"], "%.2f" % v if v else "-",
                                                "**%.2f×**" % (d[k]["mean"] / v) if v else "-"))
    print("| %s | %.0f MB | %s (%s) | %s | %s |" % (name, os.path.getsize(f) / 1e6, mode, d["kernels"] + (" fast" if d["fast"] else ""),
                                                  cells[0], cells[1]))
PY
