#!/usr/bin/env bash
# Perplexity of F32, Q8_0 and Q4_0 files of one model on a public-domain book, and the KL divergence
# of the quantized files from the F32 one: nucleus perplexity beside llama-perplexity in the same
# run, on the same files and text, with the same context: the README's "Perplexity" table.
#
#   bash bench/perplexity.sh --llamacpp DIR [-c CTX] [-t THREADS] [--chunks N]
#
# DIR holds a llama.cpp build's bin/ (llama-perplexity, llama-quantize); its gguf-py package is
# looked for at DIR/../gguf-py (--gguf-py DIR otherwise).
# The model: TinyStories-656K (shared/models/tinystories-656k). Its F32 GGUF is written by
# bench/f32_gguf.py from the Hugging Face directory's F32 weights and the shared GGUF's metadata;
# llama-quantize makes Q8_0 and Q4_0 of it. Files go to build/models, base logits to build/ppl
# (about 470 MB each for the whole book, removed at the end).
# The text: Newton's Opticks (Project Gutenberg), shipped by Debian's golang-1.19-src as
# src/testdata/Isaac.Newton-Opticks.txt (scripts/install-deps.sh installs it), transliterated to
# ASCII and stripped of the ten characters this model's vocabulary lacks (/ [ ] ( ) { } + & * \):
# with no byte-fallback tokens, llama.cpp's tokenizer throws on them.
set -eu
cd "$(dirname "$0")/.."
ctx=512 threads=2 chunks="" lc="" gguf_py=""
while [ $# -gt 0 ]; do
    case $1 in
        --llamacpp) lc=$2; shift 2 ;;
        --gguf-py) gguf_py=$2; shift 2 ;;
        -c) ctx=$2; shift 2 ;;
        -t) threads=$2; shift 2 ;;
        --chunks) chunks=$2; shift 2 ;;
        *) echo "usage: bash bench/perplexity.sh --llamacpp DIR [--gguf-py DIR] [-c CTX] [-t THREADS] [--chunks N]" >&2; exit 2 ;;
    esac
done
[ -x "$lc/bin/llama-perplexity" ] && [ -x "$lc/bin/llama-quantize" ] || { echo "--llamacpp DIR: no DIR/bin/llama-perplexity and llama-quantize" >&2; exit 2; }
gguf_py=${gguf_py:-$lc/../gguf-py}
book=/usr/share/go-1.19/src/testdata/Isaac.Newton-Opticks.txt
[ -s "$book" ] || { echo "$book: missing (scripts/install-deps.sh installs golang-1.19-src)" >&2; exit 2; }
export LD_LIBRARY_PATH=$lc/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
make -s -j2 build/nucleus
SHARED=${SHARED:-$(cd .. && pwd)/shared}
mkdir -p build/models build/ppl
m=build/models/tinystories-656k
[ -s $m-f32.gguf ] || /usr/bin/python3 bench/f32_gguf.py "$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf" \
    "$SHARED/models/tinystories-656k/hf" $m-f32.gguf "$gguf_py" >&2
for t in q8_0 q4_0; do
    [ -s $m-$t.gguf ] || "$lc/bin/llama-quantize" $m-f32.gguf $m-$t.gguf "${t^^}" 1 >/dev/null 2>&1
done
text=build/ppl/opticks.txt
iconv -f UTF-8 -t ASCII//TRANSLIT "$book" | tr -d '/[](){}+&*\\' > $text
args=(-f $text -c "$ctx" -t "$threads")
[ -n "$chunks" ] && args+=(--chunks "$chunks")

ours() { build/nucleus perplexity -m "$@" --json 2>/dev/null; }
theirs() { "$lc/bin/llama-perplexity" -m "$@" 2>&1; }
declare -A out
for t in f32 q8_0 q4_0; do
    kl=(); [ $t = f32 ] || kl=(--kl-divergence)
    s=$EPOCHREALTIME; out[n$t]=$(ours $m-$t.gguf "${args[@]}" --kl-divergence-base build/ppl/base.nucleus "${kl[@]}")
    out[nt$t]=$(echo "$EPOCHREALTIME - $s" | /usr/bin/python3 -c 'print(eval(input()))')
    s=$EPOCHREALTIME; out[l$t]=$(theirs $m-$t.gguf "${args[@]}" --kl-divergence-base build/ppl/base.llama "${kl[@]}")
    out[lt$t]=$(echo "$EPOCHREALTIME - $s" | /usr/bin/python3 -c 'print(eval(input()))')
done
rm -f build/ppl/base.nucleus build/ppl/base.llama

/usr/bin/python3 - "$book" "$text" "$ctx" "${out[nf32]}" "${out[lf32]}" "${out[nq8_0]}" "${out[lq8_0]}" "${out[nq4_0]}" "${out[lq4_0]}" \
    "${out[ntf32]}" "${out[ltf32]}" "${out[ntq8_0]}" "${out[ltq8_0]}" "${out[ntq4_0]}" "${out[ltq4_0]}" <<'PY'
import json, os, re, sys
book, text, ctx = sys.argv[1:4]
runs = sys.argv[4:10]
times = [float(x) for x in sys.argv[10:16]]
num = r"(-?[0-9.]+(?:e-?[0-9]+)?)"
def llama(s, what):
    pats = {"ppl": r"Final estimate: PPL = %s \+/- %s" % (num, num),
            "pplq": r"Mean PPL\(Q\)\s*: +%s ± +%s" % (num, num),
            "kld": r"Mean    KLD: +%s ± +%s" % (num, num),
            "top": r"Same top p: +%s ± +%s %%" % (num, num)}
    m = re.search(pats[what], s)
    if not m: sys.exit("llama-perplexity's output lacks %s:\n%s" % (what, s[-3000:]))
    return float(m.group(1)), float(m.group(2))
n = [json.loads(r) for r in runs[0::2]]
l = runs[1::2]
print("Text: %s (%d bytes, %d tokens), -c %s, %d windows, %d tokens scored.\n" %
      (os.path.basename(book), os.path.getsize(text), n[0]["tokens"], ctx, n[0]["windows"], n[0]["scored"]))
print("| file | size | PPL nucleus | PPL llama-perplexity | KLD from F32 nucleus | KLD llama-perplexity | same top token nucleus | llama-perplexity | time nucleus | llama-perplexity |")
print("|---|---|---|---|---|---|---|---|---|---|")
for i, t in enumerate(("f32", "q8_0", "q4_0")):
    size = os.path.getsize("build/models/tinystories-656k-%s.gguf" % t) / 1e6
    lp = llama(l[i], "ppl" if i == 0 else "pplq")
    row = ["TinyStories-656K %s" % t.upper(), "%.2f MB" % size,
           "%.4f ± %.4f" % (n[i]["ppl"], n[i]["ppl_err"]), "%.4f ± %.4f" % lp]
    if i == 0: row += ["(base)"] * 4
    else:
        lk, lt = llama(l[i], "kld"), llama(l[i], "top")
        row += ["%.6f ± %.6f" % (n[i]["kld"], n[i]["kld_err"]), "%.6f ± %.6f" % lk,
                "%.3f ± %.3f %%" % (100 * n[i]["same_top"], 100 * n[i]["same_top_err"]), "%.3f ± %.3f %%" % lt]
    row += ["%.1f s" % times[2 * i], "%.1f s" % times[2 * i + 1]]
    print("| " + " | ".join(row) + " |")
PY
