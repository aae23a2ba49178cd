#!/usr/bin/env bash
# Prefill and decode of every weight type and of synthetic mixture-of-experts models, nucleus
# beside llama.cpp in the same run, on the same files: the README's "Types and experts" table.
#
#   bash bench/types.sh --llamacpp DIR [--llamacpp-old DIR] [-t THREADS] [-r REPS] [-p N] [-n N] [--only REGEX]
#
# DIR holds a llama.cpp build's bin/ (llama-bench, llama-quantize), made with
# ../shared/tools/build-llamacpp from a fetched snapshot (the 2026-04 fork Mesh-LLM/llama.cpp knows
# every type and architecture here; --llamacpp-old adds b4748's figures where it can load the file).
# The files go to build/models (never committed): TinyLlama-1.1B's shape (synth-gguf, F16)
# quantised by that llama-quantize into each type, bench/synth_arch.py's Gemma 3 1B (Q5_K_M, as users
# download it) and its Qwen3-30B-A3B and gpt-oss-20b shapes with 4 layers. Not part of `make test`: 20 minutes with -r 2 once the files exist, more to make them.
set -eu
cd "$(dirname "$0")/.."
. tests/lib/models.sh
threads=2 reps=3 pp=128 tg=64 lc="" lc_old="" only="."
while [ $# -gt 0 ]; do
    case $1 in
        --llamacpp) lc=$2; shift 2 ;;
        --llamacpp-old) lc_old=$2; shift 2 ;;
        -t) threads=$2; shift 2 ;;
        -r) reps=$2; shift 2 ;;
        -p) pp=$2; shift 2 ;;
        -n) tg=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        *) echo "usage: bash bench/types.sh --llamacpp DIR [--llamacpp-old DIR] [-t N] [-r N] [-p N] [-n N] [--only REGEX]" >&2; exit 2 ;;
    esac
done
[ -x "$lc/bin/llama-bench" ] && [ -x "$lc/bin/llama-quantize" ] || { echo "--llamacpp DIR: no DIR/bin/llama-bench and llama-quantize" >&2; exit 2; }
make -s -j2 build/nucleus

base=$(synth_model bench-tinyllama-1.1b-f16 --shape tinyllama-1.1b --type f16)
model() { # name -> path, made on first use
    local out=$MODELS_DIR/bench-$1.gguf
    if [ ! -s "$out" ]; then
        case $1 in
            tinyllama-1.1b-f16) ;;
            tinyllama-1.1b-*) "$lc/bin/llama-quantize" "$base" "$out.part" "${1#tinyllama-1.1b-}" 2 >/dev/null && mv "$out.part" "$out" ;;
            qwen3-30b-a3b-l4-*) /usr/bin/python3 bench/synth_arch.py --shape qwen3-30b-a3b --layers 4 --type "${1##*-}" -o "$out" >/dev/null ;;
            gemma3-1b-f16) /usr/bin/python3 bench/synth_arch.py --shape gemma3-1b --type f16 -o "$out" >/dev/null ;;
            gemma3-1b-*) "$lc/bin/llama-quantize" "$(model gemma3-1b-f16)" "$out.part" "${1#gemma3-1b-}" 2 >/dev/null && mv "$out.part" "$out" ;;
            gpt-oss-20b-l4-*) /usr/bin/python3 bench/synth_arch.py --shape gpt-oss-20b --layers 4 --type "${1##*-}" -o "$out" >/dev/null ;;
        esac
    fi
    echo "$out"
}

names="tinyllama-1.1b-f16 tinyllama-1.1b-Q8_0 tinyllama-1.1b-Q4_0 tinyllama-1.1b-Q4_1 tinyllama-1.1b-Q5_0
tinyllama-1.1b-Q5_1 tinyllama-1.1b-Q2_K tinyllama-1.1b-Q3_K_M tinyllama-1.1b-Q4_K_M tinyllama-1.1b-Q5_K_M
tinyllama-1.1b-Q6_K tinyllama-1.1b-IQ4_NL tinyllama-1.1b-IQ4_XS tinyllama-1.1b-IQ3_S gemma3-1b-Q5_K_M
qwen3-30b-a3b-l4-q8_0 qwen3-30b-a3b-l4-q4_0 gpt-oss-20b-l4-mxfp4"

out=$(mktemp); trap 'rm -f "$out"' EXIT
for name in $names; do
    [[ $name =~ $only ]] || continue
    file=$(model "$name")
    [ "$name" = tinyllama-1.1b-f16 ] && file=$base
    ours=$(build/nucleus bench -m "$file" -p "$pp" -n "$tg" -t "$threads" -r "$reps" --json)
    # a build that cannot load the file gives no figures
    theirs=$("$lc/bin/llama-bench" -m "$file" -p "$pp" -n "$tg" -t "$threads" -r "$reps" -o json 2>/dev/null) || theirs='[]'
    old='[]'
    if [ -n "$lc_old" ]; then
        old=$("$lc_old/bin/llama-bench" -m "$file" -p "$pp" -n "$tg" -t "$threads" -r "$reps" -o json 2>/dev/null) || old='[]'
    fi
    printf '%s\t%s\t%s\t%s\n' "$name" "$ours" "$(tr -d '\n' <<<"$theirs")" "$(tr -d '\n' <<<"$old")" >> "$out"
done

/usr/bin/python3 - "$out" "$threads" "$reps" "$pp" "$tg" <<'PY'
import datetime, json, sys
path, threads, reps, pp, tg = sys.argv[1:6]
def lc(js):
    """llama-bench's JSON: {'pp': tok/s, 'tg': tok/s}."""
    r = {}
    for t in json.loads(js or "[]"):
        r["pp" if t.get("n_prompt") else "tg"] = t["avg_ts"]
    return r
def ratio(a, b): return "%.2f×" % (a / b) if b else "-"
print("nucleus bench / llama-bench -p %s -n %s -t %s -r %s, %s\n" % (pp, tg, threads, reps, datetime.date.today()))
print("| model | file | nucleus pp%s | llama.cpp | ratio | nucleus tg%s | llama.cpp | ratio | b4748 pp / tg |" % (pp, tg))
print("|---|---|---|---|---|---|---|---|---|")
for line in open(path):
    name, ours, theirs, old = line.rstrip("\n").split("\t")
    d, l, o = json.loads(ours), lc(theirs), lc(old)
    print("| %s | %.0f MB | %.1f | %s | %s | %.1f | %s | %s | %s |" % (
        name, d["file_bytes"] / 1e6, d["pp"]["mean"], "%.1f" % l["pp"] if "pp" in l else "-",
        ratio(d["pp"]["mean"], l.get("pp")), d["tg"]["mean"], "%.1f" % l["tg"] if "tg" in l else "-",
        ratio(d["tg"]["mean"], l.get("tg")), "%.1f / %.1f" % (o["pp"], o["tg"]) if o else "-"))
PY
