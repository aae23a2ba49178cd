#!/usr/bin/env bash
# The benchmark table of the README's Performance section: nucleus beside llama.cpp on synthetic
# models with the shapes of real ones, regenerated into build/models when missing (synth-gguf is
# deterministic).
#
#   bash bench/run.sh [-t THREADS] [-r REPS] [--no-fast] [--llamacpp DIR [--llamacpp-old DIR]] [--only REGEX]
#
# Each model runs `nucleus bench -p 128 -n 64` in the default mode (int16 activations) and, for
# the Q8_0 and Q4_0 models, in the fast mode (--fast: int8 activations for Q/K/V and gate/up; it
# changes nothing for the other types). Not part of `make test`: it takes minutes (Llama-2-7B's
# file is 3.8 GB) and its figures depend on what else the machine is doing.
#
# --llamacpp DIR runs that llama.cpp build's llama-bench (DIR/bin, made with
# ../shared/tools/build-llamacpp from a fetched snapshot) on the same files, model by model right
# after nucleus, and --llamacpp-old DIR a second build's; each ratio is against the faster of the
# two for that model and test (the issue's two builds: the 2026-04 fork Mesh-LLM/llama.cpp, much
# faster on K-quants, and b4748). Without them the ratios are against the b4748 figures of
# ../shared/README.md, measured on this kind of machine on another day.
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
threads=2 reps=5 fast=1 depth=0 lc="" lc_old="" files="" only="."
usage() {
    echo "usage: bash bench/run.sh [-t THREADS] [-r REPS] [--no-fast] [--llamacpp DIR [--llamacpp-old DIR]] [--only REGEX]" >&2
    echo "       bash bench/run.sh --depth D --llamacpp-dir DIR --llamacpp-old DIR [-t THREADS] [-r REPS] [FILE.gguf...]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case $1 in
        --depth) depth=$2; shift 2 ;;
        --llamacpp|--llamacpp-dir) lc=$2; shift 2 ;;
        --llamacpp-old) lc_old=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        *.gguf) files="$files $1"; shift ;;
        -t) threads=$2; shift 2 ;;
        -r) reps=$2; shift 2 ;;
        --no-fast) fast=0; shift ;;
        *) usage ;;
    esac
done
for d in $lc $lc_old; do [ -x "$d/bin/llama-bench" ] || { echo "$d: no bin/llama-bench" >&2; exit 2; }; done
[ -z "$lc_old" ] || [ -n "$lc" ] || usage
make -s -j2 build/nucleus

# name | synth-gguf arguments | llama.cpp b4748 pp128 | tg64 (shared/README.md; - when not there)
models="smollm2-135m-q8_0|--shape smollm2-135m --type q8_0|767|140
qwen2.5-0.5b-q8_0|--shape qwen2.5-0.5b --type q8_0|264|53
tinyllama-1.1b-q4_0|--shape tinyllama-1.1b --type q4_0|116|50
tinyllama-1.1b-q4_k|--shape tinyllama-1.1b --type q4_k|74|42
tinyllama-1.1b-q8_0|--shape tinyllama-1.1b --type q8_0|107|29
tinyllama-1.1b-f16|--shape tinyllama-1.1b --type f16|-|-
llama2-7b-q4_0|--shape llama2-7b --type q4_0|-|-"

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
# llama-bench's JSON as {"pp": tok/s, "tg": tok/s} (empty when the build cannot load the file).
llama_bench() {
    "$1/bin/llama-bench" -m "$2" -p 128 -n 64 -t "$threads" -r "$reps" -o json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
r = {}
for t in json.loads(sys.stdin.read() or "[]"):
    r["pp" if t.get("n_prompt") else "tg"] = t["avg_ts"]
print(json.dumps(r))' || echo '{}'
}

echo "$models" | while IFS='|' read -r name args lpp ltg; do
    [[ $name =~ $only ]] || continue
    # shellcheck disable=SC2086
    file=$(synth_model "bench-$name" $args)
    for mode in default fast; do
        [ "$mode" = fast ] && { [ $fast = 1 ] || continue; case $name in *q8_0|*q4_0) ;; *) continue ;; esac; }
        flags=""; [ "$mode" = fast ] && flags="--fast"
        json=$(build/nucleus bench -m "$file" -p 128 -n 64 -t "$threads" -r "$reps" --json $flags)
        echo "$name|$mode|$lpp|$ltg|$json" >> "$out"
    done
    for d in $lc $lc_old; do
        label=$(basename "$d"); [ "$label" = build ] && label=$(basename "$(dirname "$d")")
        echo "$name|llama.cpp $label|-|-|$(llama_bench "$d" "$file")" >> "$out"
    done
done

/usr/bin/python3 - "$out" "$threads" "$reps" <<'PY'
import json, sys, datetime
rows = [l.rstrip("\n").split("|", 4) for l in open(sys.argv[1])]
ours = [r for r in rows if not r[1].startswith("llama.cpp")]
peers = {}  # model -> {build: {"pp", "tg"}}
for r in rows:
    if r[1].startswith("llama.cpp"):
        peers.setdefault(r[0], {})[r[1][len("llama.cpp "):]] = json.loads(r[4])
print("nucleus bench -p 128 -n 64 -t %s -r %s, %s (kernels: %s)\n" % (
    sys.argv[2], sys.argv[3], datetime.date.today().isoformat(), json.loads(ours[0][4])["kernels"] if ours else "?"))
def best(name, k):  # the faster build's figure for test k, and the build
    got = [(v[k], b) for b, v in peers.get(name, {}).items() if k in v]
    return max(got) if got else (None, None)
ratio = lambda a, b: "%.2f×" % (a / float(b)) if b not in ("-", None) else "-"
if peers:
    print("| model | file | mode | prefill pp128 tok/s | fastest llama.cpp | ratio | decode tg64 tok/s | fastest llama.cpp | ratio | decode, % of bandwidth ceiling | llama.cpp pp / tg by build |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
else:
    print("| model | file | mode | prefill pp128 tok/s | vs llama.cpp (shared/README) | decode tg64 tok/s | vs llama.cpp (shared/README) | decode, % of bandwidth ceiling |")
    print("|---|---|---|---|---|---|---|---|")
for name, mode, lpp, ltg, js in ours:
    d = json.loads(js)
    ceiling = "%.0f%% (%.1f GB/s, ceiling %.1f tok/s)" % (d["decode_pct_of_ceiling"], d["read_bandwidth"] / 1e9,
                                                         d["decode_ceiling"])
    pp, tg = "%.1f ± %.1f" % (d["pp"]["mean"], d["pp"]["sd"]), "%.1f ± %.1f" % (d["tg"]["mean"], d["tg"]["sd"])
    head = "| %s | %.0f MB | %s | %s" % (name, d["file_bytes"] / 1e6, mode, pp)
    if not peers:
        print("%s | %s | %s | %s | %s |" % (head, ratio(d["pp"]["mean"], lpp), tg, ratio(d["tg"]["mean"], ltg), ceiling))
        continue
    cells = []
    for k in ("pp", "tg"):
        v, b = best(name, k)
        cells.append("%s (%s) | %s" % ("%.1f" % v, b, ratio(d[k]["mean"], v)) if v else "- | -")
    by = ", ".join("%s %s / %s" % (b, "%.1f" % v["pp"] if "pp" in v else "-", "%.1f" % v["tg"] if "tg" in v else "-")
                   for b, v in peers.get(name, {}).items())
    print("%s | %s | %s | %s | %s | %s |" % (head, cells[0], tg, cells[1], ceiling, by))
PY
