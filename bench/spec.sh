#!/usr/bin/env bash
# Speculative decoding, nucleus beside llama.cpp in the same run: the README's "Speculative
# decoding" table. Greedy decoding (the tokens are those of plain decoding), the same files,
# prompts, lengths and threads for both engines.
#
#   bash bench/spec.sh --llamacpp DIR [-t THREADS] [--tiny-threads THREADS] [-r REPS] [-n TOKENS] [--n-tiny TOKENS]
#                      [--fast] [--only TEXT]
#
# --fast runs every nucleus command in its fast mode (int8 activations for the Q8_0/Q4_0 products
# of normalised inputs); --only runs the pairs whose name holds TEXT.
# DIR holds a llama.cpp build's bin/ (llama-speculative, llama-lookup, llama-bench, llama-quantize),
# made with ../shared/tools/build-llamacpp from the fetched Mesh-LLM/llama.cpp snapshot
# (targets: llama-speculative llama-lookup llama-bench llama-quantize).
# Pairs: the real TinyStories-656K (Q8_0) drafted by its own Q4_0 (llama-quantize
# --allow-requantize); TinyLlama-1.1B's shape (synth-gguf, F16) drafted by its Q4_0 quantisation
# (llama-quantize of that F16 file: the same weights); prompt lookup (n-grams of 3) on the
# TinyStories model, once on a paragraph to copy and once on a long story whose greedy text
# loops, and on the TinyLlama shape (synth-gguf's Q4_0 file, bench/run.sh's), whose greedy text
# repeats one token. Plain decoding: nucleus run without a draft, llama-bench's tg for llama.cpp
# (its examples have no plain mode). nucleus's predictions: tokens per pass / (1 + c x drafts per pass), c = the draft's time per
# token over the model's (plain runs), 0 for lookup: what the measured acceptance and draft cost
# give when a pass of the model costs the same with drafts as without (Leviathan et al.'s
# assumption); then the same with the passes' measured cost: t1 / ((tP + c x drafts per pass x t1
# + the draft's catch-up) / tokens per pass + t1 - f), where t1 is the time per token of the
# round's plain runs (the speed-up's own denominator), f the part of it in the model's pass (`run`
# reports the share) and t1 - f the work around the pass (drawing the token, stop rules, printing),
# which every token costs with speculation too (on TinyStories-656K, whose pass lasts tens of
# microseconds, 6-8% of a token's time on a Zen 3), and a pass's time is taken as affine in its
# rows, tP = f + drafts per pass x (tM - f) / 16, tM that of a pass of M = 17 tokens (a pass of 17
# rows is bound by arithmetic, its reading of the weights hidden, so the line ends at the bench's
# pass whatever the bandwidth at the plain runs' moment) (1 + --draft-max; `nucleus bench -p 17
# -d DEPTH --all-logits`, DEPTH the run's mean
# context, every row's logits as verification computes them: on TinyStories-656K, whose output
# matrix is a large share of its weights, that makes a row 25% dearer than a prompt's): the passes
# of a run hold from 1 to 17 rows, and a row's cost is not the same at every size, so the slope
# of the line through both ends. A draft model's rows beyond its drafts (its catch-up over tokens it has not
# seen: after rejected drafts, and at each probe while it does not draft; `run` reports its rows)
# count at the draft's own time per row of a 17-token pass (the last row's logits only, as its
# catch-up).
# Each figure is the median of REPS rounds (7 x REPS for TinyStories, whose runs last milliseconds
# and whose rounds' speed-ups and predictions each move by 10% with the VM), of TOKENS for TinyLlama
# and --n-tiny (448, its context holds 512) for TinyStories. A round of nucleus is the benches of
# its passes (the model's 17 rows, and the draft's), its plain run, the draft's plain run, the
# speculative run, a second plain run and the benches again, one after the other; a round of
# llama.cpp, llama-bench (one repetition), its example, llama-bench again. The speed-up is the
# median of the rounds' (a speculative run over the plain runs around it, their times per token
# averaged, which cancels a drift of the VM's speed that is steady over the round: with one plain
# run before, the F16 pair, whose runs are its bandwidth's alone and whose drafts are all rejected,
# once read 1.12 for a predicted 0.94) and the prediction the median of the rounds' predictions,
# each from its own round's measurements, the benches' times averaged around the runs as the plain
# runs' are (with one bench after them, the Xeon's TinyLlama lookup once read 3.77 for a predicted
# 2.97: its speculative run at 122 tok/s where that bench implied about 91). The VM's memory
# bandwidth moves by a third within a minute, and a plain decode is bound by it where a verification
# pass is bound by arithmetic, so a ratio of figures measured minutes apart (the medians', or a
# prediction's from a bench run at another time) moved by 30% from run to run. The passes' base time
# t1 comes from the plain run rather than from the bench for the same reason (taken from the bench,
# TinyLlama's lookup once predicted 2.66 for a measured 3.89: its plain runs read 80 tok/s and its
# benches, as that prediction implies, about 115); `run`'s own work per token, which `bench` does
# not do, is no part of a row's.
# TinyStories runs with --tiny-threads (1) in both engines: its step lasts about 20 us, where a
# second thread's hand-offs cost more than they share and the VM's scheduling moves a run by
# 30%; with one thread its runs agree within 2%. Not part of `make test`.
set -eu
cd "$(dirname "$0")/.."
. tests/lib/models.sh
threads=2 tiny_threads=1 reps=3 n=128 n_tiny=448 lc="" fast="" only=""
while [ $# -gt 0 ]; do
    case $1 in
        --llamacpp) lc=$2; shift 2 ;;
        -t) threads=$2; shift 2 ;;
        --tiny-threads) tiny_threads=$2; shift 2 ;;
        -r) reps=$2; shift 2 ;;
        -n) n=$2; shift 2 ;;
        --n-tiny) n_tiny=$2; shift 2 ;;
        --fast) fast=--fast; shift ;;
        --only) only=$2; shift 2 ;;
        *) echo "usage: bash bench/spec.sh --llamacpp DIR [-t N] [--tiny-threads N] [-r N] [-n N] [--n-tiny N] [--fast] [--only TEXT]" >&2; exit 2 ;;
    esac
done
for b in llama-speculative llama-lookup llama-bench llama-quantize; do
    [ -x "$lc/bin/$b" ] || { echo "--llamacpp DIR: no DIR/bin/$b" >&2; exit 2; }
done
make -s -j2 build/nucleus
tiny=$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf
tiny_q4=$MODELS_DIR/bench-tinystories-656k-q4_0.gguf
[ -s "$tiny_q4" ] || "$lc/bin/llama-quantize" --allow-requantize "$tiny" "$tiny_q4" Q4_0 >/dev/null 2>&1
llama=$(synth_model bench-tinyllama-1.1b-f16 --shape tinyllama-1.1b --type f16)
llama_q4=$MODELS_DIR/bench-tinyllama-1.1b-Q4_0.gguf
[ -s "$llama_q4" ] || "$lc/bin/llama-quantize" "$llama" "$llama_q4" Q4_0 >/dev/null 2>&1

story="Once upon a time"
paragraph="Tom and Sue went to the park. They played with a ball. The ball was red. Tom kicked the ball and Sue ran after it. Rewrite the story: Tom and Sue"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# one PROMPT MODEL [FLAGS]: one run, "tok/s drafted accepted tokens_per_pass draft_rows model_share"
# (model_share: the share of the run's generation time in the model's passes)
one() {
    local prompt=$1 model=$2; shift 2
    build/nucleus run -m "$model" -p "$prompt" -n "$n" --temp 0 --ignore-eos -t "$threads" $fast "$@" 2>"$tmp/e" >/dev/null
    rate=$(sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' "$tmp/e")
    spec=$(sed -n 's/^\[speculative\] drafted \([0-9]*\), accepted \([0-9]*\) .* | mean accepted length \([0-9.]*\) tokens per pass.* draft model rows \([0-9]*\)$/\1 \2 \3 \4/p' "$tmp/e")
    share=$(sed -n 's/.*tok\/s (\([0-9.]*\)% in the model.s passes).*/\1/p' "$tmp/e")
    echo "$rate ${spec:-0 0 1 0} $(awk -v s="${share:-100}" 'BEGIN { print s / 100 }')"
}
# ratio A B: the median over the lines of file B's first field over file A's (a speed-up of pairs)
ratio() { paste -d' ' <(cut -d' ' -f1 "$1") <(cut -d' ' -f1 "$2") | awk '{print $2 / $1}' | median; }
# pass_times MODEL DEPTH [--all-logits]: nucleus bench's JSON for a pass of 17 tokens at DEPTH
pass_times() {
    build/nucleus bench -m "$1" -p 17 -n 0 -d "$2" -t "$threads" -r 3 --json --no-bandwidth $fast ${3:-} 2>/dev/null
}
# ours PROMPT MODEL DRAFT FLAGS: REPS rounds, each of a plain run of MODEL, one of DRAFT (when not
# empty), the speculative run (MODEL FLAGS) and the passes' times of both (pass_times), so that the
# VM's speed, which moves within seconds, weighs on each alike. Prints "plain spec speed-up drafted
# accepted tokens_per_pass prediction": the median tok/s of each, the median speed-up of a round's
# speculative run over its plain one, the median round's counts, and the median of the rounds'
# predictions (see the header).
ours() {
    local prompt=$1 model=$2 draft=$3 flags=$4
    local depth=$(( $(build/nucleus tokenize -m "$model" -p "$prompt" | wc -w) + n / 2 )) # the runs' mean context
    for _ in $(seq "$reps"); do
        pass_times "$model" "$depth" --all-logits >>"$tmp/bench"
        [ -z "$draft" ] || pass_times "$draft" "$depth" >>"$tmp/dbench"
        one "$prompt" "$model" >>"$tmp/plain"
        [ -z "$draft" ] || one "$prompt" "$draft" >>"$tmp/dplain"
        # shellcheck disable=SC2086 # the flags, split at spaces
        one "$prompt" "$model" $flags >>"$tmp/spec"
        one "$prompt" "$model" >>"$tmp/plain2"
        pass_times "$model" "$depth" --all-logits >>"$tmp/bench2"
        [ -z "$draft" ] || pass_times "$draft" "$depth" >>"$tmp/dbench2"
    done
    touch "$tmp/dplain" "$tmp/dbench" "$tmp/dbench2"
    /usr/bin/python3 - "$n" "$tmp" <<'PY'
import json, sys
n, tmp = float(sys.argv[1]), sys.argv[2]
def lines(name):
    return [l.split() for l in open(f"{tmp}/{name}") if l.strip()]
def js(name):
    return [json.loads(l) for l in open(f"{tmp}/{name}") if l.strip()]
dplain, spec = lines("dplain"), lines("spec")
# a pass of 17 rows' time per row: the benches before and after the round's runs, averaged (as the
# plain runs), the model's and the draft's
row = [(1 / a["pp"]["mean"] + 1 / b["pp"]["mean"]) / 2 for a, b in zip(js("bench"), js("bench2"))]
drow = [(1 / a["pp"]["mean"] + 1 / b["pp"]["mean"]) / 2 for a, b in zip(js("dbench"), js("dbench2"))]
# a round's plain rate: its runs before and after the speculative one, time per token averaged
# and the share of a plain token's time in the model's pass (the rest, per token, speculation keeps)
plain = [[2 / (1 / float(a[0]) + 1 / float(b[0])), (float(a[5]) + float(b[5])) / 2]
         for a, b in zip(lines("plain"), lines("plain2"))]
free, meas = [], []
for i, (p, s, r) in enumerate(zip(plain, spec, row)):
    d, tpp, draft_rows = float(s[1]), float(s[3]), float(s[4])
    c = float(p[0]) / float(dplain[i][0]) if dplain else 0.0  # a draft token's time over a model token's
    passes = n / tpp
    per = d / passes  # drafts per pass
    t1, tm = 1 / float(p[0]), 17 * r
    f = t1 * p[1]  # a plain token's pass; t1 - f its work around the pass
    tp = f + per * (tm - f) / 16
    catch = drow[i] * max(draft_rows - d, 0) / passes if drow else 0.0  # the draft catching up
    free.append(tpp / (1 + c * per))
    meas.append(t1 / ((tp + c * per * t1 + catch) / tpp + t1 - f))
med = lambda v: sorted(v)[(len(v) - 1) // 2]
mid = sorted(spec, key=lambda s: float(s[0]))[(len(spec) - 1) // 2]
print(med([float(p[0]) for p in plain]), med([float(s[0]) for s in spec]),
      med([float(s[0]) / float(p[0]) for p, s in zip(plain, spec)]), mid[1], mid[2], mid[3],
      "%.2f / %.2f" % (med(free), med(meas)))
PY
    rm -f "$tmp/plain" "$tmp/plain2" "$tmp/dplain" "$tmp/spec" "$tmp/bench" "$tmp/bench2" "$tmp/dbench" "$tmp/dbench2"
}
# theirs EXAMPLE MODEL PROMPT [FLAGS]: "tok/s drafted accepted predicted" of the median run of the
# example, then llama-bench's median plain tok/s, then the median speed-up of the rounds (llama-bench
# of one repetition before and after the example, their times per token averaged, as ours)
theirs() {
    local ex=$1 model=$2 prompt=$3; shift 3
    tg() { "$lc/bin/llama-bench" -m "$model" -p 0 -n "$n" -t "$threads" -r 1 -o csv 2>/dev/null | tail -n 1 | awk -F'","' '{print $(NF-1)}'; }
    for _ in $(seq "$reps"); do
        local before after
        before=$(tg)
        "$lc/bin/$ex" -m "$model" -p "$prompt" -n "$n" --temp 0 --ignore-eos -t "$threads" -s 1 "$@" >"$tmp/o" 2>&1 || true
        after=$(tg)
        awk -v a="$before" -v b="$after" 'BEGIN { print 2 / (1 / a + 1 / b) }' >>"$tmp/p"
        rate=$(sed -n 's/^decoded .* speed: *\([0-9.]*\) t\/s.*/\1/p' "$tmp/o" | tail -n 1)
        echo "$rate $(sed -n 's/^n_drafted *= *//p' "$tmp/o") $(sed -n 's/^n_accept *= *//p' "$tmp/o") $(sed -n 's/^n_predict *= *//p' "$tmp/o")" >>"$tmp/s"
    done
    sort -g "$tmp/s" | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'
    median <"$tmp/p"
    ratio "$tmp/p" "$tmp/s"
    rm -f "$tmp/p" "$tmp/s"
}

echo "| pair | engine | plain tok/s | speculative tok/s | speed-up | drafts kept | tokens per pass | predicted speed-up: free rows / measured rows |"
echo "|---|---|---|---|---|---|---|---|"
row() { # name engine plain spec speed-up drafted accepted per_pass predicted
    awk -v name="$1" -v eng="$2" -v p="$3" -v s="$4" -v x="$5" -v d="$6" -v a="$7" -v t="$8" -v pr="$9" 'BEGIN {
        printf "| %s | %s | %.1f | %.1f | %.2f | %s | %.2f | %s |\n", name, eng, p, s, x,
               (d > 0 ? sprintf("%.1f%% of %d", 100 * a / d, d) : "none"), t, pr }'
}
# ours and theirs read the caller's n, reps and threads
case_pair() { # name model draft prompt tokens reps threads
    local name=$1 model=$2 draft=$3 prompt=$4 n=$5 reps=$6 threads=$7
    case $name in *"$only"*) ;; *) return ;; esac
    read -r plain spec up d a tpp pred <<<"$(ours "$prompt" "$model" "$draft" "-md $draft")"
    row "$name" nucleus "$plain" "$spec" "$up" "$d" "$a" "$tpp" "$pred"
    their_row "$name" llama-speculative "$model" "$prompt" -md "$draft"
}
case_lookup() { # name model prompt tokens reps threads
    local name=$1 model=$2 prompt=$3 n=$4 reps=$5 threads=$6
    case $name in *"$only"*) ;; *) return ;; esac
    read -r plain spec up d a tpp pred <<<"$(ours "$prompt" "$model" "" "--lookup-ngram 3")"
    row "$name" nucleus "$plain" "$spec" "$up" "$d" "$a" "$tpp" "$pred"
    their_row "$name" llama-lookup "$model" "$prompt"
}
their_row() { # name example model prompt [flags]
    local name=$1; shift
    { read -r tspec td ta tn; read -r tplain; read -r tup; } <<<"$(theirs "$@")"
    row "$name" "llama.cpp" "$tplain" "$tspec" "$tup" "$td" "$ta" "$(awk -v n="$tn" -v a="$ta" 'BEGIN { print n / (n - a) }')" ""
}
case_pair "TinyStories-656K Q8_0, draft its Q4_0" "$tiny" "$tiny_q4" "$story" "$n_tiny" $((7 * reps)) "$tiny_threads"
case_pair "TinyLlama-1.1B shape F16, draft its Q4_0" "$llama" "$llama_q4" "$story" "$n" "$reps" "$threads"
case_lookup "lookup: copy a paragraph (TinyStories)" "$tiny" "$paragraph" "$n_tiny" $((7 * reps)) "$tiny_threads"
case_lookup "lookup: a long story (TinyStories)" "$tiny" "$story" "$n_tiny" $((7 * reps)) "$tiny_threads"
case_lookup "lookup: TinyLlama-1.1B shape Q4_0, its looping text" "$(synth_model bench-tinyllama-1.1b-q4_0 --shape tinyllama-1.1b --type q4_0)" "$paragraph" "$n" "$reps" "$threads"
echo
echo "bash bench/spec.sh --llamacpp $lc -t $threads --tiny-threads $tiny_threads -r $reps -n $n --n-tiny $n_tiny${fast:+ $fast}${only:+ --only '$only'}; $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
