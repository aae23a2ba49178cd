#!/usr/bin/env bash
# The benchmark table of the README's Performance section: nucleus against llama.cpp's figures
# (../shared/README.md, same machine kind) on synthetic models with the shapes of real ones,
# regenerated into build/models when missing (synth-gguf is deterministic).
#
#   bash bench/run.sh [-t THREADS] [-r REPS] [--no-fast] [--llamacpp]
#
# Each model runs `nucleus bench -p 128 -n 64` in the default mode (int16 activations) and, for
# the Q8_0 and Q4_0 models, in the fast mode (--fast: int8 activations for Q/K/V and gate/up; it
# changes nothing for the other types). Not part of `make test`: it takes minutes and its figures
# depend on what else the machine is doing.
#
# --llamacpp also measures llama.cpp in the same run, on the same files and thread count, through
# the prebuilt llama.cpp of the npm package node-llama-cpp (bench/llamacpp; installed on first
# use), and adds its prefill ratio: see bench/llamacpp/bench.mjs for why its decode figures are
# shown but not compared.
#
#   bash bench/run.sh --depth 4096 --llamacpp-dir DIR --llamacpp-old DIR [-t T] [-r R] [FILE...]
#
# --depth D makes the "Long contexts" table instead: `nucleus bench -d D -p 512 -n 128` (prefill
# of 512 tokens and decode of 128 on top of D cached ones) on each FILE (default: the models
# above), beside llama.cpp in the same run, model by model, with and without its flash attention
# (-fa 0 / 1): --llamacpp-dir's llama-bench (a build that knows -d: the 2026-04 fork
# Mesh-LLM/llama.cpp) and --llamacpp-old's llama-server (b4748, whose llama-bench has no -d:
# bench/llamacpp_depth.py reads the server's own timings). Each ratio is against the fastest of
# those four configurations for that test.
set -eu
cd "$(dirname "$0")/.."
. tests/lib/models.sh
threads=2 reps=5 fast=1 llamacpp=0 depth=0 lc="" lc_old="" files=""
while [ $# -gt 0 ]; do
    case $1 in
        --depth) depth=$2; shift 2 ;;
        --llamacpp-dir) lc=$2; shift 2 ;;
        --llamacpp-old) lc_old=$2; shift 2 ;;
        *.gguf) files="$files $1"; shift ;;
        -t) threads=$2; shift 2 ;;
        -r) reps=$2; shift 2 ;;
        --no-fast) fast=0; shift ;;
        --llamacpp) llamacpp=1; shift ;;
        *) echo "usage: bash bench/run.sh [-t THREADS] [-r REPS] [--no-fast] [--llamacpp]" >&2
           echo "       bash bench/run.sh --depth D --llamacpp-dir DIR --llamacpp-old DIR [-t THREADS] [-r REPS] [FILE.gguf...]" >&2; exit 2 ;;
    esac
done
make -s -j2 build/nucleus
if [ $llamacpp = 1 ] && [ ! -d bench/llamacpp/node_modules/node-llama-cpp ]; then
    (cd bench/llamacpp && npm install --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
fi

# name | synth-gguf arguments | llama.cpp pp128 | llama.cpp tg64 (tokens/s; - when not measured)
models="smollm2-135m-q8_0|--shape smollm2-135m --type q8_0|1311|154
tinyllama-1.1b-q4_0|--shape tinyllama-1.1b --type q4_0|180|43.9
tinyllama-1.1b-q4_k|--shape tinyllama-1.1b --type q4_k|-|-
tinyllama-1.1b-f16|--shape tinyllama-1.1b --type f16|-|-"

out=$(mktemp); trap 'rm -f "$out"' EXIT
if [ "$depth" != 0 ]; then
    [ -x "$lc/bin/llama-bench" ] || { echo "--llamacpp-dir DIR: no DIR/bin/llama-bench" >&2; exit 2; }
    [ -x "$lc_old/bin/llama-server" ] || { echo "--llamacpp-old DIR: no DIR/bin/llama-server" >&2; exit 2; }
    if [ -z "$files" ]; then
        # shellcheck disable=SC2086
        files=$(echo "$models" | while IFS='|' read -r name args _; do synth_model "bench-$name" $args; done)
    fi
    # Model by model, nucleus and the four llama.cpp configurations in turn, so a busy neighbour
    # weighs on all of them alike.
    for file in $files; do
        json=$(build/nucleus bench -m "$file" -d "$depth" -p 512 -n 128 -t "$threads" -r "$reps" --json --no-bandwidth)
        echo "$file|nucleus|$json" >> "$out"
        for fa in 0 1; do
            json=$("$lc/bin/llama-bench" -m "$file" -d "$depth" -p 512 -n 128 -t "$threads" -r "$reps" -fa $fa -o json 2>/dev/null)
            echo "$file|$(basename "$(dirname "$lc")") fa$fa|$(echo "$json" | tr -d '\n')" >> "$out"
            flag=""; [ $fa = 1 ] && flag="--fa"
            json=$(/usr/bin/python3 bench/llamacpp_depth.py "$lc_old/bin/llama-server" "$file" -d "$depth" -p 512 -n 128 \
                -t "$threads" -r "$reps" $flag)
            echo "$file|$(basename "$(dirname "$lc_old")") fa$fa|$json" >> "$out"
        done
    done
    /usr/bin/python3 - "$out" "$depth" "$threads" "$reps" <<'PY'
import json, os, sys, datetime
depth, rows = sys.argv[2], [l.rstrip("\n").split("|", 2) for l in open(sys.argv[1])]
def rates(js):  # (pp, tg) tokens/s: nucleus's and llamacpp_depth.py's JSON, or llama-bench's list
    d = json.loads(js)
    if isinstance(d, dict):
        return d["pp"]["mean"], d["tg"]["mean"]
    return tuple(next(t["avg_ts"] for t in d if t[k] > 0) for k in ("n_prompt", "n_gen"))
print("nucleus bench -d %s -p 512 -n 128 -t %s -r %s beside llama.cpp, %s\n" % (depth, sys.argv[3], sys.argv[4],
      datetime.date.today().isoformat()))
print("| model | nucleus pp512 @ d%s | fastest llama.cpp | ratio | nucleus tg128 @ d%s | fastest llama.cpp | ratio | llama.cpp pp / tg by configuration |" % (depth, depth))
print("|---|---|---|---|---|---|---|---|")
for f in dict.fromkeys(r[0] for r in rows):
    ours = next(rates(r[2]) for r in rows if r[0] == f and r[1] == "nucleus")
    theirs = dict((r[1], rates(r[2])) for r in rows if r[0] == f and r[1] != "nucleus")
    best = [max(theirs.items(), key=lambda kv: kv[1][i]) for i in (0, 1)]
    cell = lambda i: "%.1f (%s) | %.2fx" % (best[i][1][i], best[i][0], ours[i] / best[i][1][i])
    print("| %s | %.1f | %s | %.1f | %s | %s |" % (os.path.basename(f), ours[0], cell(0), ours[1], cell(1),
          ", ".join("%s %.1f / %.1f" % (k, v[0], v[1]) for k, v in theirs.items())))
PY
    exit 0
fi
echo "$models" | while IFS='|' read -r name args lpp ltg; do
    # shellcheck disable=SC2086
    file=$(synth_model "bench-$name" $args)
    for mode in default fast; do
        [ "$mode" = fast ] && { [ $fast = 1 ] || continue; case $name in *q8_0|*q4_0) ;; *) continue ;; esac; }
        flags=""; [ "$mode" = fast ] && flags="--fast"
        json=$(build/nucleus bench -m "$file" -p 128 -n 64 -t "$threads" -r "$reps" --json $flags)
        echo "$name|$mode|$lpp|$ltg|$json" >> "$out"
    done
    if [ $llamacpp = 1 ]; then
        json=$(node bench/llamacpp/bench.mjs "$file" -p 128 -n 64 -t "$threads" -r "$reps")
        echo "$name|llama.cpp|-|-|$json" >> "$out"
    fi
done

/usr/bin/python3 - "$out" "$threads" "$reps" <<'PY'
import json, sys, datetime
rows = [l.rstrip("\n").split("|", 4) for l in open(sys.argv[1])]
ours = [r for r in rows if r[1] != "llama.cpp"]
same_run = dict((r[0], json.loads(r[4])) for r in rows if r[1] == "llama.cpp")
print("nucleus bench -p 128 -n 64 -t %s -r %s, %s (kernels: %s)\n" % (
    sys.argv[2], sys.argv[3], datetime.date.today().isoformat(), json.loads(ours[0][4])["kernels"] if ours else "?"))
ratio = lambda a, b: "%.2fx" % (a / float(b)) if b not in ("-", None) else "-"
print("| model | file | mode | prefill pp128 tok/s | vs llama.cpp | decode tg64 tok/s | vs llama.cpp | decode, %% of bandwidth ceiling |%s" %
      (" llama.cpp same run: pp128 / tg64 | prefill vs same run |" if same_run else ""))
print("|---|---|---|---|---|---|---|---|%s" % ("---|---|" if same_run else ""))
for name, mode, lpp, ltg, js in ours:
    d = json.loads(js)
    line = "| %s | %.0f MB | %s | %.1f ± %.1f | %s | %.1f ± %.1f | %s | %.0f%% (%.1f GB/s, ceiling %.1f tok/s) |" % (
        name, d["file_bytes"] / 1e6, mode, d["pp"]["mean"], d["pp"]["sd"], ratio(d["pp"]["mean"], lpp),
        d["tg"]["mean"], d["tg"]["sd"], ratio(d["tg"]["mean"], ltg), d["decode_pct_of_ceiling"],
        d["read_bandwidth"] / 1e9, d["decode_ceiling"])
    if same_run:
        l = same_run.get(name)
        line += " %.1f / %.1f | %s |" % (l["pp"]["mean"], l["tg"]["mean"], ratio(d["pp"]["mean"], l["pp"]["mean"])) if l else " - | - |"
    print(line)
PY
