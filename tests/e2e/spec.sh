#!/usr/bin/env bash
# Speculative decoding end to end (build/san/nucleus): greedy decoding with a draft model (the
# TinyStories-656K Q8_0 file drafting for its Hugging Face F32 weights; a 2-layer synthetic
# SmolLM2 F16 with its Q4_0 twin, 49,152 tokens) or with prompt lookup gives exactly the tokens,
# text and log-probabilities of plain decoding, over many prompts, with several samples, fixed
# and adaptive draft lengths, a lookup copy that runs into its own proposals; a seed gives the
# same sampled tokens twice; `run` reports the acceptance on stderr; a draft of another
# vocabulary and contradictory flags are refused with the reason. The server (per slot, several
# slots batched) answers greedy requests with the plain server's text and logprobs, reports the
# drafts in `timings` and /metrics. The same identities hold in the fast mode (`--fast`, run and
# serve), whose log-probabilities are not the default's. make test (tests/lib/tier.sh): four of the
# twelve prompts (two that repeat themselves, for the lookup); make test-full and by hand: all.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
. tests/lib/tier.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
TINY_DIR=$SHARED/models/tinystories-656k
TINY_HF=$TINY_DIR/hf
TINY_Q8=$TINY_DIR/TinyStories-656K-Q8_0.gguf
STORIES=$SHARED/models/stories260K/stories260K.gguf
. tests/lib/checks.sh
finish() { echo "spec: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

. tests/lib/server_script.sh

prompts=("Once upon a time" "Lily and Ben went to the park" "The little dog" "Tom had a red ball. Tom had a red ball. Tom"
         "One day, a bird" "She said, \"I want to play!\"" "There was a big tree" "Mom and Dad"
         "The cat sat on the mat. The cat" "A boy named Tim" "Sue liked to sing" "It was a sunny day")
tier_is full || prompts=("${prompts[0]}" "${prompts[3]}" "${prompts[5]}" "${prompts[8]}")

# run_both WHAT MODEL "SPEC FLAGS" "OTHER FLAGS" PROMPT: plain and speculative greedy runs agree on
# stdout and on the log-probabilities printed to stderr. (Prompt lookup runs at a fixed length: the
# adaptive one rarely drafts for this model, whose text seldom repeats itself.)
run_both() {
    local what=$1 model=$2 spec=$3 other=$4 prompt=$5
    # shellcheck disable=SC2086
    "$NUCLEUS" run -m "$model" -p "$prompt" --temp 0 --logprobs 2 $other >"$tmp/a.out" 2>"$tmp/a.err" || { bad "$what: plain run failed: $(tail -n 3 "$tmp/a.err")"; return; }
    # shellcheck disable=SC2086
    "$NUCLEUS" run -m "$model" -p "$prompt" --temp 0 --logprobs 2 $other $spec >"$tmp/b.out" 2>"$tmp/b.err" || { bad "$what: speculative run failed: $(tail -n 3 "$tmp/b.err")"; return; }
    if cmp -s "$tmp/a.out" "$tmp/b.out"; then ok; else bad "$what: the text differs: [$(cat "$tmp/a.out")] vs [$(cat "$tmp/b.out")]"; fi
    # (sorted: with several samples, each step of the speculative run gives one sample's tokens at once)
    expect_eq "$what: logprobs" "$(grep '^\[logprobs\]' "$tmp/b.err" | sort)" "$(grep '^\[logprobs\]' "$tmp/a.err" | sort)"
    # (the test verifies drafts: a run that proposed none would prove nothing)
    local drafted
    drafted=$(sed -n 's/^\[speculative\] drafted \([0-9]*\),.*/\1/p' "$tmp/b.err")
    if [ "${drafted:-0}" -gt 0 ]; then ok; else bad "$what: no draft was verified: $(grep speculative "$tmp/b.err")"; fi
}

for p in "${prompts[@]}"; do
    run_both "draft model, '$p'" "$TINY_HF" "-md $TINY_Q8" "-n 48" "$p"
    run_both "prompt lookup, '$p'" "$TINY_Q8" "--lookup-ngram 3 --draft-fixed --draft-max 4" "-n 48" "$p"
done
run_both "fixed draft length" "$TINY_HF" "-md $TINY_Q8 --draft-fixed --draft-max 6" "-n 64" "Once upon a time"
run_both "draft-min" "$TINY_HF" "-md $TINY_Q8 --draft-min 3 --draft-max 5" "-n 64" "The little dog"
run_both "two samples" "$TINY_HF" "-md $TINY_Q8" "-n 40 -N 2" "Lily and Ben"
run_both "a draft that runs out of context" "$TINY_HF" "-md $TINY_Q8 --draft-max 8" "-n 40 -c 30" "Once upon a time"

smol_f16=$(synth_model smollm2-135m-f16-l2 --shape smollm2-135m --layers 2 --type f16) &&
smol_q4=$(synth_model smollm2-135m-q4_0-l2 --shape smollm2-135m --layers 2 --type q4_0) || bad "synth-gguf smollm2"
if [ -n "${smol_q4:-}" ]; then
    run_both "synthetic SmolLM2 F16 drafted by Q4_0" "$smol_f16" "-md $smol_q4" "-n 24" "The meaning of life is"
    run_both "synthetic SmolLM2, lookup" "$smol_f16" "--lookup-ngram 2" "-n 24" "one two three one two three one two"
    # Its greedy text repeats one token: a lookup copy that runs on into its own proposals drafts
    # all 8 each pass and keeps them, where one stopping at the text's end would draft one.
    run_both "lookup, a repeated token" "$smol_f16" "--lookup-ngram 2 --draft-fixed --draft-max 8" "-n 48 --ignore-eos" \
        "one two three one two three one two"
    tpp=$(sed -n 's/.*mean accepted length \([0-9.]*\) tokens per pass.*/\1/p' "$tmp/b.err")
    if awk -v t="${tpp:-0}" 'BEGIN { exit !(t >= 4) }'; then ok; else bad "lookup, a repeated token: ${tpp:-no} tokens per pass"; fi
fi

# The fast mode (int8 activations for Q4_0's products, verification passes too) keeps the identity
# with its own plain decoding, with a draft model (the Q4_0 file drafting for itself, in the same
# mode) and with lookup; and it is on: its log-probabilities are not the default's.
if [ -n "${smol_q4:-}" ]; then
    run_both "fast mode, a draft model" "$smol_q4" "-md $smol_q4" "-n 24 --fast" "The meaning of life is"
    run_both "fast mode, lookup" "$smol_q4" "--lookup-ngram 2 --draft-fixed --draft-max 8" "-n 48 --ignore-eos --fast" \
        "one two three one two three one two"
    for mode in default fast; do
        "$NUCLEUS" run -m "$smol_q4" -p "The meaning of life is" -n 8 --temp 0 --logprobs 1 \
            $([ $mode = fast ] && echo --fast) 2>"$tmp/$mode.err" >/dev/null
    done
    if [ -s "$tmp/fast.err" ] && ! cmp -s <(grep '^\[logprobs\]' "$tmp/fast.err") <(grep '^\[logprobs\]' "$tmp/default.err"); then ok
    else bad "fast mode: the log-probabilities are the default mode's"; fi
fi

# The draft model's rows: drafting one token a pass for itself (every draft kept), it computes the
# prompt and the first token once, then the two tokens each pass added: prompt + 2 x drafts - 1.
"$NUCLEUS" run -m "$TINY_Q8" -p "Once upon a time" -n 48 --temp 0 --ignore-eos -md "$TINY_Q8" --draft-fixed --draft-max 1 \
    2>"$tmp/rows.err" >/dev/null
prompt_n=$(sed -n 's/.*| prompt \([0-9]*\) tokens.*/\1/p' "$tmp/rows.err")
read -r drafted accepted rows <<<"$(sed -n 's/^\[speculative\] drafted \([0-9]*\), accepted \([0-9]*\) .*draft model rows \([0-9]*\)$/\1 \2 \3/p' "$tmp/rows.err")"
expect_eq "draft model rows" "${rows:-none}" "$(( ${prompt_n:-0} + 2 * ${drafted:-0} - 1 ))"
expect_eq "a model drafting for itself keeps every draft" "${accepted:-none}" "${drafted:-0}"
grep -q 'draft model rows 0$' "$tmp/b.err" && ok || bad "lookup: draft model rows: $(grep speculative "$tmp/b.err")"

# Sampling: the same seed gives the same tokens (the draws against the drafts are seeded too).
for spec in "-md $TINY_Q8" "--lookup-ngram 2"; do
    # shellcheck disable=SC2086
    a=$("$NUCLEUS" run -m "$TINY_HF" -p "Once upon a time" -n 60 --temp 0.9 --seed 42 $spec 2>/dev/null)
    # shellcheck disable=SC2086
    b=$("$NUCLEUS" run -m "$TINY_HF" -p "Once upon a time" -n 60 --temp 0.9 --seed 42 $spec 2>/dev/null)
    expect_eq "same seed, same tokens ($spec)" "$b" "$a"
    [ -n "$a" ] && ok || bad "sampled text is empty"
done

# Refusals.
expect_err "a draft of another vocabulary" "vocabulary has 512 tokens and the model's 2048" \
    "$NUCLEUS" run -m "$TINY_Q8" -p "Hi" -n 4 -md "$STORIES"
expect_err "a draft that does not exist" "--draft-model $tmp/none.gguf" "$NUCLEUS" run -m "$TINY_Q8" -p "Hi" -n 4 -md "$tmp/none.gguf"
expect_err "draft flags without a proposer" "need --draft-model FILE or --lookup-ngram N" "$NUCLEUS" run -p "Hi" --draft-max 4
expect_err "two proposers" "exclusive" "$NUCLEUS" run -p "Hi" -md "$TINY_Q8" --lookup-ngram 2
expect_err "draft-min above draft-max" "--draft-min: 9 is more than --draft-max (4)" \
    "$NUCLEUS" run -p "Hi" --lookup-ngram 2 --draft-max 4 --draft-min 9
expect_err "beams" "beam search (--beams) does not decode speculatively" "$NUCLEUS" run -p "Hi" --beams 2 --lookup-ngram 2
expect_err "contrastive search" "contrastive search (--penalty-alpha) does not decode speculatively" \
    "$NUCLEUS" run -p "Hi" --penalty-alpha 0.6 --top-k 4 --lookup-ngram 2
expect_err "serve: a draft of another vocabulary" "vocabulary" "$NUCLEUS" serve -m "$TINY_Q8" --port 0 -md "$STORIES"

# The server: three greedy requests at once, speculative and plain, agree; timings and metrics.
start_server plain -m "$TINY_HF" --parallel 3 || finish
start_server spec -m "$TINY_HF" --parallel 3 -md "$TINY_Q8" || finish
start_server lookup -m "$TINY_HF" --parallel 3 --lookup-ngram 3 || finish
request() { # URL PROMPT N -> the response
    curl -s -H 'Content-Type: application/json' "$1/v1/completions" -d "{\"prompt\": \"$2\", \"max_tokens\": 40, \"temperature\": 0, \"logprobs\": 2, \"n\": $3}"
}
for name in plain spec lookup; do
    url_var="url_$name"
    for i in 0 1 2; do request "${!url_var}" "${prompts[$i]}" $((i == 2 ? 2 : 1)) >"$tmp/$name.$i.json" & done
    wait_for=$(jobs -p | tail -n 3)
    # shellcheck disable=SC2086
    wait $wait_for
done
pick='import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps([[c["text"], c["logprobs"]["token_logprobs"]] for c in d["choices"]]))'
for i in 0 1 2; do
    want=$(python3 -c "$pick" "$tmp/plain.$i.json")
    expect_eq "server, draft model, request $i" "$(python3 -c "$pick" "$tmp/spec.$i.json")" "$want"
    expect_eq "server, lookup, request $i" "$(python3 -c "$pick" "$tmp/lookup.$i.json")" "$want"
done
timings='import json,sys; t=json.load(open(sys.argv[1])).get("timings"); print(t is not None and t["draft_n"] >= t["draft_n_accepted"] > 0 and t["predicted_n"] == 40)'
expect_eq "server: timings report the drafts" "$(python3 -c "$timings" "$tmp/spec.0.json")" "True"
expect_eq "server: no timings without speculation" "$(python3 -c 'import json,sys; print("timings" in json.load(open(sys.argv[1])))' "$tmp/plain.0.json")" "False"
metrics=$(curl -s "$url_spec/metrics")
expect_in "metrics: drafts" "nucleus_spec_draft_tokens_total" "$metrics"
expect_in "metrics: the draft model's rows" "nucleus_spec_draft_rows_total" "$metrics"
accepted=$(grep '^nucleus_spec_accepted_tokens_total' <<<"$metrics" | awk '{print $2}')
[ "${accepted:-0}" -gt 0 ] && ok || bad "metrics: no accepted drafts: $(grep nucleus_spec <<<"$metrics")"
stream=$(curl -sN -H 'Content-Type: application/json' "$url_spec/v1/completions" -d '{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stream": true}' |
    sed -n 's/^data: //p' | grep -v DONE | python3 -c 'import json,sys; print("".join(json.loads(l)["choices"][0]["text"] for l in sys.stdin if json.loads(l)["choices"]))')
expect_eq "server: streamed text" "$stream" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$tmp/plain.0.json")"
for name in plain spec lookup; do stop_server "$name"; done

# serve --fast: lookup in the fast mode answers with its plain decoding's text and logprobs, which
# are not the default mode's.
if [ -n "${smol_q4:-}" ]; then
    start_server q4 -m "$smol_q4" --parallel 2 || finish
    start_server q4fast -m "$smol_q4" --parallel 2 --fast || finish
    start_server q4fastlookup -m "$smol_q4" --parallel 2 --fast --lookup-ngram 2 --draft-fixed --draft-max 8 || finish
    for name in q4 q4fast q4fastlookup; do
        url_var="url_$name"
        request "${!url_var}" "one two three one two three one two" 1 >"$tmp/$name.json"
    done
    want=$(python3 -c "$pick" "$tmp/q4fast.json")
    expect_eq "server, fast mode, lookup" "$(python3 -c "$pick" "$tmp/q4fastlookup.json")" "$want"
    [ "$want" != "$(python3 -c "$pick" "$tmp/q4.json")" ] && ok || bad "server: --fast gives the default mode's logprobs"
    for name in q4 q4fast q4fastlookup; do stop_server "$name"; done
fi
finish
