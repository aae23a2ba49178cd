#!/usr/bin/env bash
# End-to-end checks of decoding in `nucleus run` (sanitized build): flag validation, thread-count
# reproducibility, greedy equivalences, stop strings, explain output (text and JSON), logprobs,
# several samples, beams, min-tokens / ignore-eos, no-repeat-ngram.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
BIN=${NUCLEUS_BIN:-build/san/nucleus}
STORIES=$SHARED/models/stories260K/stories260K.gguf
P="Once upon a time"
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
expect_eq() { # what, got, want
    if [ "$2" == "$3" ]; then ok; else bad "$1: got [$2] want [$3]"; fi
}
expect_err() { # what, needle, args... (run's arguments)
    local what=$1 needle=$2; shift 2
    local out rc
    out=$($BIN run -m "$STORIES" -p "$P" -n 4 "$@" 2>&1 >/dev/null); rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -qF -- "$needle" <<<"$out" && ! grep -q "Sanitizer" <<<"$out"; then ok
    else bad "$what: rc=$rc, expected an error containing '$needle', got: $out"; fi
}
run() { $BIN run -m "$STORIES" -p "$P" "$@"; }
py() { /usr/bin/python3 -c "$@"; }

# Invalid values: refused, naming the flag and the allowed range.
expect_err "top-p above 1" "--top-p: 1.5 is outside the allowed range [0, 1]" --top-p 1.5
expect_err "negative top-k" "--top-k: -1 is outside the allowed range 0.." --top-k -1
expect_err "negative temperature" "--temp: -1 is outside the allowed range [0, 100]" --temp -1
expect_err "min-p" "--min-p: 2 is outside the allowed range [0, 1]" --min-p 2
expect_err "typical" "--typical" --typical -0.1
expect_err "epsilon 1" "--epsilon-cutoff: 1 is outside the allowed range [0, 1)" --epsilon-cutoff 1
expect_err "eta negative" "--eta-cutoff: -0.1 is outside the allowed range [0, 1]" --eta-cutoff -0.1
expect_err "eta 1" "--eta-cutoff: 1 is outside the allowed range [0, 1)" --eta-cutoff 1
expect_err "dynatemp range" "--dynatemp-range: -1 is outside the allowed range [0, 100]" --dynatemp-range -1
expect_err "dynatemp exponent" "--dynatemp-exp" --dynatemp-exp x
expect_err "repeat penalty 0" "--repeat-penalty: 0 is outside the allowed range" --repeat-penalty 0
expect_err "presence penalty" "--presence-penalty: 3 is outside the allowed range [-2, 2]" --presence-penalty 3
expect_err "frequency penalty" "--frequency-penalty" --frequency-penalty abc
expect_err "mirostat 3" "--mirostat: 3 is outside the allowed range 0..2" --mirostat 3
expect_err "mirostat-lr" "--mirostat-lr" --mirostat-lr 2
expect_err "dry base" "--dry-base: 0.5 is outside the allowed range [1, 100]" --dry-base 0.5
expect_err "dry allowed length" "--dry-allowed-length" --dry-allowed-length 0
expect_err "xtc threshold" "--xtc-threshold" --xtc-threshold 1.5
expect_err "repeat-last-n" "--repeat-last-n: -2 is outside the allowed range -1.." --repeat-last-n -2
expect_err "unknown sampler" "--samplers: unknown sampler stage 'bogus'" --samplers "top_k;bogus"
expect_err "duplicate sampler" "--samplers: sampler stage 'top_k' is listed twice" --samplers "top_k;top-k"
expect_err "bad logit bias" "--logit-bias: expected TOKEN_ID followed by +BIAS or -BIAS" --logit-bias 12x
expect_err "logit bias +inf" "--logit-bias" --logit-bias 12+inf
expect_err "logit bias id" "outside the vocabulary" --logit-bias 9999+1
expect_err "logprobs" "--logprobs: 21 is outside the allowed range 0..20" --logprobs 21
expect_err "logprobs mode" "--logprobs-mode: expected raw or processed" --logprobs-mode cooked
expect_err "explain mode" "--explain: expected" --explain=xml
expect_err "empty stop" "--stop: the stop string is empty" --stop ""
expect_err "beams 0" "--beams: 0 is outside the allowed range 1..1024" --beams 0
expect_err "early stopping mode" "--early-stopping: expected --early-stopping, =true, =false or =never" --early-stopping=maybe
expect_err "beam groups" "--num-beam-groups: 3 does not divide --beams 4 into equal groups" --beams 4 --num-beam-groups 3
expect_err "diversity penalty" "--diversity-penalty: -1 is outside the allowed range [0, 1000]" --beams 2 --diversity-penalty -1
expect_err "penalty alpha" "--penalty-alpha: 1.5 is outside the allowed range [0, 1]" --penalty-alpha 1.5
expect_err "contrastive top-k" "--penalty-alpha: contrastive search needs --top-k between 1 and 1024 candidates, got 0" \
    --penalty-alpha 0.5 --top-k 0
expect_err "contrastive and beams" "--beams: works with sampling, not with contrastive search" --penalty-alpha 0.5 --beams 2
expect_err "contrastive and samples" "-N: works with sampling, not with contrastive search" --penalty-alpha 0.5 -N 2
expect_err "contrastive and prompt cache" "--prompt-cache: contrastive search" --penalty-alpha 0.5 --prompt-cache /tmp/x
expect_err "n-best above beams" "--n-best: 3 is outside the allowed range 1..2 (--beams)" --beams 2 --n-best 3
expect_err "samples 0" "-N: 0 is outside the allowed range 1..256" -N 0
expect_err "samples and beams" "-N" -N 2 --beams 2
expect_err "explain with beams" "--explain" --beams 2 --explain
expect_err "-n 0" "-n: allowed values are -1" -n 0
expect_err "missing value" "--top-k needs a value" --top-k

# Same seed and chain, 1 and 2 threads: the same tokens, for every sample.
chain=(--seed 9 --temp 1.3 --top-k 30 --top-p 0.9 --min-p 0.02 --typical 0.95 --repeat-penalty 1.1
       --frequency-penalty 0.2 --presence-penalty 0.1 --dry-multiplier 0.5 --xtc-probability 0.3 -N 2 -n 40)
a=$(run "${chain[@]}" -t 1 2>/dev/null)
b=$(run "${chain[@]}" -t 2 2>/dev/null)
expect_eq "full chain, 1 vs 2 threads" "$a" "$b"
[ "$(run "${chain[@]}" -t 2 2>&1 >/dev/null | grep -c -- '^--- sample')" == 2 ] && ok || bad "-N 2 prints two samples' headers (stderr): $a"
c=$(run "${chain[@]}" --seed 10 -t 2 2>/dev/null)
[ "$a" != "$c" ] && ok || bad "another seed gave the same samples"

# Greedy three ways: temperature 0, top-k 1, one beam.
g0=$(run -n 30 --temp 0 2>/dev/null)
expect_eq "top-k 1 is greedy" "$(run -n 30 --top-k 1 --seed 5 2>/dev/null)" "$g0"
expect_eq "one beam is greedy" "$(run -n 30 --beams 1 2>/dev/null)" "$g0"

# Stop strings: matched across tokens, not printed, the text before them kept.
s=$(run -n 30 --temp 0 --stop "e gi" 2>/dev/null)
want=$(py 'import sys; t = sys.argv[1]; print(t[:t.index("e gi")])' "$g0")
expect_eq "stop string across tokens" "$s" "$want"
err=$(run -n 30 --temp 0 --stop "e gi" 2>&1 >/dev/null)
grep -q "stop: stop" <<<"$err" && ok || bad "finish reason stop: $err"
err=$(run -n 5 --temp 0 2>&1 >/dev/null)
grep -q "generated 5 tokens.*stop: length" <<<"$err" && ok || bad "finish reason length: $err"

# End of generation pushed to the top: it stops at once, after --min-tokens, or never (--ignore-eos).
err=$(run -n 20 --temp 0 --logit-bias 2+100 2>&1 >/dev/null)
grep -q "generated 1 tokens.*stop: stop" <<<"$err" && ok || bad "eos at once: $err"
err=$(run -n 20 --temp 0 --logit-bias 2+100 --min-tokens 6 2>&1 >/dev/null)
grep -q "generated 7 tokens.*stop: stop" <<<"$err" && ok || bad "--min-tokens 6: $err"
err=$(run -n 20 --temp 0 --logit-bias 2+100 --ignore-eos 2>&1 >/dev/null)
grep -q "generated 20 tokens.*stop: length" <<<"$err" && ok || bad "--ignore-eos: $err"
err=$(run -n 20 --temp 0 --stop-ids 261 2>&1 >/dev/null)
grep -q "stop: stop" <<<"$err" && ok || bad "--stop-ids: $err"

# Explain, text: every stage of the default chain, the choice, on every step.
err=$(run -n 6 --seed 3 --explain 2>&1 >/dev/null)
[ "$(grep -c '^\[explain\] step' <<<"$err")" == 6 ] && ok || bad "explain: 6 steps: $err"
grep -q "chain: temperature 0.8 -> top-k 40 -> top-p 0.95 -> min-p 0.05 -> dist" <<<"$err" && ok || bad "explain chain: $err"
grep -Eq "^  top-p 0.95: kept [0-9]+ of [0-9]+, mass 0\.[0-9]{3}$" <<<"$err" && ok || bad "explain top-p line: $err"
grep -Eq "^  chose [0-9]+ \".*\" p [01]\.[0-9]{3} of [0-9]+" <<<"$err" && ok || bad "explain choice: $err"

# Explain, JSON lines (with logprobs): consistent numbers.
err=$(run -n 8 --seed 4 --temp 1.5 --top-k 20 --top-p 0.9 --explain=json --logprobs 3 2>&1 >/dev/null)
py '
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
assert len(lines) == 8, len(lines)
for i, d in enumerate(lines):
    assert d["step"] == i and d["sample"] == 0
    names = [s["name"] for s in d["stages"]]
    assert names == ["temperature", "top-k", "top-p", "min-p", "dist"], names
    for s in d["stages"]:
        assert 0 < s["n_after"] <= s["n_before"] and 0 < s["mass"] <= 1.0000001, s
    assert d["stages"][1]["n_after"] == 20 and d["stages"][2]["mass"] >= 0.9 - 1e-6
    assert 0 < d["p"] <= 1 and d["top"][0]["p"] >= d["p"] - 1e-6 and d["n_candidates"] == d["stages"][-1]["n_after"]
    assert d["token"] in [t["token"] for t in d["top"]] or d["n_candidates"] > len(d["top"])
    assert len(d["top_logprobs"]) == 3 and all(t["logprob"] <= 0 for t in d["top_logprobs"]) and d["logprob"] <= 0
    assert d["finish"] in ("", "length") and (d["finish"] == "length") == (i == 7)
' "$err" && ok || bad "explain=json: $err"

# Logprobs, text: one line per token, log-probabilities <= 0, raw and processed differ.
err=$(run -n 5 --seed 2 --logprobs 2 2>&1 >/dev/null)
[ "$(grep -c '^\[logprobs\] step' <<<"$err")" == 5 ] && ok || bad "logprobs lines: $err"
py '
import re, sys
for l in sys.argv[1].splitlines():
    if l.startswith("[logprobs]"):
        nums = [float(x) for x in re.findall(r"\" (-?[0-9.]+)", l)]
        assert len(nums) == 3 and all(x <= 0 for x in nums), l
' "$err" && ok || bad "logprobs values: $err"
raw=$(run -n 3 --temp 0 --top-k 2 --logprobs 2 2>&1 >/dev/null | grep '^\[logprobs\]')
proc=$(run -n 3 --temp 0 --top-k 2 --logprobs 2 --logprobs-mode processed 2>&1 >/dev/null | grep '^\[logprobs\]')
grep -q ' 0.0000 |' <<<"$proc" && [ "$raw" != "$proc" ] && ok || bad "processed logprobs of greedy are 0: $proc vs $raw"

# Beams: n best, best first.
out=$(run -n 16 --beams 3 --n-best 3 2>/dev/null)
py '
import re, sys
scores = [float(s) for s in re.findall(r"^--- beam \d of 3: score (-?[0-9.]+)", sys.argv[1], re.M)]
assert len(scores) == 3 and scores == sorted(scores, reverse=True), scores
' "$out" && ok || bad "beams n-best: $out"
out=$(run -n 40 --beams 2 --stop "." 2>/dev/null)
! grep -q '\.' <<<"${out#"$P"}" && ok || bad "beams with a stop string: $out"

# Early stopping: with the end of generation pushed up (+23) after "Once", two hypotheses end at
# 15 tokens and the heuristic stops there; "never" (length penalty 3 > 0: live beams scored at 30
# tokens) goes on and finds a better 30-token beam; true stops where the heuristic does.
es=(-m "$STORIES" -p "Once" -n 30 --beams 2 --length-penalty 3 --logit-bias 2+23)
h=$($BIN run "${es[@]}" 2>&1 >/dev/null | grep '^\[beam\]')
n=$($BIN run "${es[@]}" --early-stopping=never 2>&1 >/dev/null | grep '^\[beam\]')
t=$($BIN run "${es[@]}" --early-stopping 2>&1 >/dev/null | grep '^\[beam\]')
grep -q "15 tokens, finish stop" <<<"$h" && grep -q "30 tokens, finish length" <<<"$n" && ok \
    || bad "early stopping heuristic vs never: [$h] [$n]"
expect_eq "--early-stopping=false is the default" "$($BIN run "${es[@]}" --early-stopping=false 2>&1 >/dev/null | grep '^\[beam\]')" "$h"
grep -q "finish stop" <<<"$t" && ok || bad "--early-stopping: $t"

# Diverse beam search: two groups of one beam with a large penalty start with different tokens,
# without a penalty both are greedy.
out=$($BIN run -m "$STORIES" -p "He saw a big" -n 4 --beams 2 --n-best 2 --num-beam-groups 2 --diversity-penalty 100 2>/dev/null)
py '
import sys
texts = [l for l in sys.argv[1].splitlines() if not l.startswith("---")]
assert len(texts) == 2 and texts[0].split()[4] != texts[1].split()[4], texts
' "$out" && ok || bad "diverse beams: $out"
out=$($BIN run -m "$STORIES" -p "He saw a big" -n 4 --beams 2 --n-best 2 --num-beam-groups 2 2>/dev/null | grep -v '^---')
greedy=$($BIN run -m "$STORIES" -p "He saw a big" -n 4 --temp 0 2>/dev/null)
expect_eq "groups of one beam without a penalty are greedy" "$out" "$greedy
$greedy"

# Contrastive search: alpha 0 is greedy; alpha > 0 step by step against a float64 recomputation
# with reference-forward's model (candidates, probabilities, largest cosines of the final hidden
# states, the choice), where it leaves the greedy path.
expect_eq "contrastive alpha 0 is greedy" "$(run -n 30 --penalty-alpha 0 --top-k 4 2>/dev/null)" "$g0"
for cfg in "0.6 4 1,403,407,261,378 Once upon a time" "0.4 6 1,346,394,261,370 He saw a big"; do
    read -r alpha k ids text <<<"$cfg"
    ex=$($BIN run -m "$STORIES" -p "$text" -n 16 --penalty-alpha "$alpha" --top-k "$k" --explain=json 2>&1 >/dev/null)
    out=$(/usr/bin/python3 tests/e2e/contrastive_check.py "$SHARED/tools/reference-forward" "$STORIES" "$alpha" "$k" "$ids" \
          <<<"$ex" 2>&1) && ok || bad "contrastive $alpha / $k against the reference: $out"
done
c6=$(run -n 16 --penalty-alpha 0.6 --top-k 4 2>/dev/null)
[ "$c6" != "$(run -n 16 --temp 0 2>/dev/null)" ] && ok || bad "contrastive 0.6 left the greedy text unchanged: $c6"
err=$(run -n 2 --penalty-alpha 0.6 --top-k 4 --explain 2>&1 >/dev/null)
grep -q "contrastive search: penalty-alpha 0.6, top-k 4" <<<"$err" && grep -Eq "^  contrastive alpha 0.6: candidate [0-9]+ p 0\.[0-9]{4}, max cosine" <<<"$err" \
    && grep -q "^  contrastive alpha 0.6, top-k 4: chose" <<<"$err" && ok || bad "contrastive explain: $err"
err=$(run -c 16 -n 40 --penalty-alpha 0.6 --top-k 4 2>&1 >/dev/null)
grep -q "generated 11 tokens.*stop: length" <<<"$err" && grep -q "stopped: the context is full (16 tokens)\]" <<<"$err" \
    && ok || bad "contrastive at a full context: $err"

# no-repeat-ngram 2 under greedy: no bigram of prompt + continuation repeats.
err=$(run -n 40 --temp 0 --no-repeat-ngram 2 --explain=json 2>&1 >/dev/null)
py '
import json, sys
toks = [1, 403, 407, 261, 378] + [json.loads(l)["token"] for l in sys.argv[1].splitlines() if l.startswith("{")]
grams = list(zip(toks, toks[1:]))
assert len(toks) == 45 and len(grams) == len(set(grams)), grams
' "$err" && ok || bad "no-repeat-ngram 2: $err"

# Mirostat takes over the truncation; a custom order is followed.
err=$(run -n 4 --seed 1 --mirostat 2 --explain 2>&1 >/dev/null)
grep -q "chain: temperature 0.8 -> mirostat 2 (tau 5, eta 0.1)" <<<"$err" && grep -q "^  mirostat 2: kept" <<<"$err" && ok || bad "mirostat: $err"
err=$(run -n 2 --seed 1 --samplers "min_p;top_k;temperature" --explain 2>&1 >/dev/null)
grep -q "chain: min-p 0.05 -> top-k 40 -> temperature 0.8 -> dist" <<<"$err" && ok || bad "--samplers order: $err"
err=$(run -n 4 --seed 1 --dry-multiplier 0.8 --dry-sequence-breaker none --repeat-penalty 1.2 --explain 2>&1 >/dev/null)
grep -q "^  dry x0.8 base 1.75 allowed 2:" <<<"$err" && grep -q "^  penalties (repeat 1.2" <<<"$err" && ok || bad "dry/penalties explain: $err"

# Epsilon, eta and dynamic temperature on the model's first step, against numpy over the full
# distribution (`nucleus score --top 512`: all of stories260K's vocabulary after "He saw a big",
# where the model hesitates: entropy 2.99 nats, so eta's cutoff falls below its parameter).
dist=$($BIN score -m "$STORIES" --ids 1,346,394,261,370 --top 512)
plain=(-m "$STORIES" -p "He saw a big" -n 1 --seed 1 --temp 1 --top-k 0 --top-p 1 --min-p 0)
eps=$($BIN run "${plain[@]}" --epsilon-cutoff 0.003 --explain=json 2>&1 >/dev/null | grep '^{')
eta=$($BIN run "${plain[@]}" --eta-cutoff 0.02 --explain=json 2>&1 >/dev/null | grep '^{')
dyn=$($BIN run "${plain[@]}" --dynatemp-range 0.6 --dynatemp-exp 1.5 --explain 2>&1 >/dev/null)
py '
import json, re, sys
import numpy as np
lp = np.array([x for _, x in json.loads(sys.argv[1])["top_logprobs"][0]])
p = np.exp(lp - lp.max()); p /= p.sum()
assert len(p) == 512
H = -(p[p > 0] * np.log(p[p > 0])).sum()
def stage(rec, name):
    [s] = [s for s in json.loads(rec)["stages"] if s["name"] == name]
    return s
s = stage(sys.argv[2], "epsilon")
assert s["n_before"] == 512 and s["n_after"] == (p >= 0.003).sum(), (s, (p >= 0.003).sum())
assert abs(s["mass"] - p[p >= 0.003].sum()) < 1e-3, s
cut = min(0.02, np.sqrt(0.02) * np.exp(-H))
s = stage(sys.argv[3], "eta")
assert s["n_after"] == (p >= cut).sum() and (p >= cut).sum() != (p >= 0.02).sum(), (s, cut, H)
T = 0.4 + 1.2 * (H / np.log(512)) ** 1.5
got = float(re.search(r"temperature 1, dynamic range 0.6 exponent 1.5: logits divided by ([0-9.]+)", sys.argv[4]).group(1))
assert abs(got - T) < 1e-3 * T, (got, T)
' "$dist" "$eps" "$eta" "$dyn" && ok || bad "epsilon / eta / dynatemp against numpy: $eps $eta $dyn"
# a cutoff nothing but the top token reaches is greedy; the stages take their place in --samplers
expect_eq "epsilon 0.999 is greedy" "$(run -n 30 --seed 8 --epsilon-cutoff 0.999 2>/dev/null)" "$g0"
err=$(run -n 2 --seed 1 --samplers "eta;epsilon;temperature" --eta-cutoff 0.01 --epsilon-cutoff 0.001 --explain 2>&1 >/dev/null)
grep -q "chain: eta 0.01 -> epsilon 0.001 -> temperature 0.8 -> dist" <<<"$err" && grep -Eq "^  eta 0.01 \(cutoff [0-9.e-]+\): kept" <<<"$err" \
    && ok || bad "eta/epsilon in --samplers: $err"

# Every decoder runs clean under the sanitizers and exits 0.
for args in "--seed 1 --temp 1.5 --typical 0.9 --top-nsigma 1.5 --min-keep 3" \
            "--seed 6 --dynatemp-range 0.5 --epsilon-cutoff 3e-4 --eta-cutoff 2e-3 --min-keep 2" "--seed 2 --mirostat 1 --logprobs 4" \
            "--seed 3 --xtc-probability 1 --xtc-threshold 0.1 -N 3 --explain" "--beams 4 --n-best 2 --no-repeat-ngram 3" \
            "--beams 4 --n-best 4 --num-beam-groups 2 --diversity-penalty 0.7 --early-stopping=never" \
            "--seed 4 --dry-multiplier 1 --dry-sequence-breaker '\\n' --stop was --stop-ids 2,13" "-n -1 --seed 5 -c 64" \
            "--penalty-alpha 0.5 --top-k 5 --stop was --no-repeat-ngram 3 --explain=json"; do
    out=$(eval run -n 24 "$args" 2>&1 >/dev/null); rc=$?
    [ $rc -eq 0 ] && ! grep -q Sanitizer <<<"$out" && ok || bad "run $args: rc=$rc $out"
done

echo "sampling_cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
