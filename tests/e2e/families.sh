#!/usr/bin/env bash
# The ten 2026 families end to end (the tiny F32 models in $SHARED/archs: qwen35, qwen35moe,
# gemma4, granitehybrid, nemotron_h, lfm2, deepseek2, glm4moe, mistral3, llama4), each through the
# paths that keep or rebuild a sequence's cache:
#  1. speculative decoding (prompt lookup) gives greedy decoding's text; with a logit bias that
#     keeps the text to three tokens, which the model orders, drafts are both accepted and
#     rejected (rejections roll a recurrent state back) and the log-probabilities (raw, over the
#     whole vocabulary) are those of plain decoding;
#  2. a server with 8 slots: 8 concurrent seeded requests (temperature 0.8, one seed five times and
#     three others) give the text and logprobs of the same request sent alone;
#  3. the same prompt twice, and a longer one starting with it, hit the prefix cache and answer as
#     a cold server does; `run --prompt-cache` twice, and with a continuation, prints what a run
#     without the file prints and says it reused the prompt; a slot saved by one server and
#     restored by another answers the same prompt identically, computing only its last token, and
#     a prompt going on from the saved tokens reuses all of them;
#  4. n = 3 samples (the server's "n", the CLI's -N) are the lone runs with seeds S, S+1, S+2;
#  5. --context-shift (run, and a server): recurrent families refuse it before they start, saying
#     why; the attention-only ones shift at a full context and go on;
#  6. qwen35's start-up line counts KV bytes for its attention layers only and reports the
#     recurrent state a sequence keeps, as `nucleus inspect`'s layer kinds say; deepseek2's names
#     its latent rows; gemma4's default cache is F32.
# Servers are sanitized (build/san/nucleus), as are the speculative runs; the other CLI runs use
# the release build (build/nucleus: the sanitized one takes ~0.2 s a run, ten times longer, and
# these runs are many) to keep the script near a minute on two cores. Every server exits 0 on
# SIGTERM with no sanitizer report.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
REL=${NUCLEUS_REL:-build/nucleus}
. tests/lib/checks.sh
finish() { echo "families: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

. tests/lib/server_script.sh
if [ ! -x "$REL" ] && ! make "$REL" >/dev/null; then
    bad "cannot build $REL"
    finish
fi

# FAMILIES="a b" runs those only
read -r -a FAMILIES <<<"${FAMILIES:-qwen35 qwen35moe gemma4 granitehybrid nemotron_h lfm2 deepseek2 glm4moe mistral3 llama4}"
RECURRENT=" qwen35 qwen35moe granitehybrid nemotron_h lfm2 "

# post URL BODY: the response body in $body, the status in $code.
post() {
    body=$(curl -s -H 'Content-Type: application/json' -o - -w '\n%{http_code}' "$1" -d "$2")
    code=${body##*$'\n'}
    body=${body%$'\n'*}
}
# json EXPR [BODY]: a Python expression over the response body d.
json() { /usr/bin/python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "${2-$body}" "$1"; }
# answer [I [BODY]]: choice I's (default 0) text and logprobs, as one comparable line.
answer() { json "repr((d['choices'][${1:-0}]['text'], d['choices'][${1:-0}]['logprobs']))" "${2-$body}"; }
cached() { json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]'; }
n_prompt() { json 'd["usage"]["prompt_tokens"]'; }
# req PROMPT MAX_TOKENS EXTRA: a /v1/completions body (EXTRA: more fields, ", "-led)
req() { printf '{"prompt": "%s", "max_tokens": %d, "logprobs": 2%s}' "$1" "$2" "$3"; }
# cli OUT ARGS...: a release `nucleus run`, stdout to OUT, stderr to OUT.err
cli() { local out=$1; shift; "$REL" run -t 2 "$@" >"$out" 2>"$out.err"; }
# expect_same WHAT GOT WANT: expect_eq, where an empty answer (a request or run that failed) fails
expect_same() { if [ -z "$2" ]; then bad "$1: no answer (${body:0:300})"; else expect_eq "$@"; fi; }
same_file() { # what, file, file (not empty)
    if [ -s "$2" ] && cmp -s "$2" "$3"; then ok; else bad "$1: [$(cat -v "$2" | head -c 300)] vs [$(cat -v "$3" | head -c 300)]"; fi
}

# the text of the spec check: three tokens the logit bias lifts above all others (ids of the
# shared 1024-token tokenizer), so the greedy text repeats them in the order the model picks
BIAS=(--logit-bias 270+40 --logit-bias 392+40 --logit-bias 500+40)
SPEC_P="one two three one two three one two three one two"
BATCH_P="The little robot looked at the stars and said"
# longer than gemma4's sliding window (32)
CACHE_P="Once upon a time, there was a little girl named Lily. She liked to play in the garden with her red ball, and every day she ran to the big tree by the river."
CACHE_L="$CACHE_P One day, the ball rolled into the water and Lily began to cry."
SLOT_P="In a small town by the sea lived an old fisherman who told stories to the children every evening."
mixed=0 # families whose speculative run had drafts both accepted and rejected

for f in "${FAMILIES[@]}"; do
    M=$SHARED/archs/$f/$f-f32.gguf
    d=$tmp/$f
    mkdir -p "$d/slots"
    recurrent=false
    [[ $RECURRENT == *" $f "* ]] && recurrent=true

    # ---- 1. speculative decoding: greedy identity ----------------------------------------------
    cli "$d/g" -m "$M" -p "$SPEC_P" -n 40 --temp 0
    cli "$d/gs" -m "$M" -p "$SPEC_P" -n 40 --temp 0 --lookup-ngram 1 --draft-max 4
    same_file "$f: lookup decoding, the greedy text" "$d/gs" "$d/g"
    "$NUCLEUS" run -t 2 -m "$M" -p "$SPEC_P" -n 40 --temp 0 --logprobs 2 "${BIAS[@]}" >"$d/b" 2>"$d/b.err"
    "$NUCLEUS" run -t 2 -m "$M" -p "$SPEC_P" -n 40 --temp 0 --logprobs 2 "${BIAS[@]}" \
        --lookup-ngram 1 --draft-max 4 >"$d/bs" 2>"$d/bs.err"
    same_file "$f: lookup decoding, three tokens: the text" "$d/bs" "$d/b"
    expect_same "$f: lookup decoding, three tokens: the logprobs" "$(grep '^\[logprobs\]' "$d/bs.err")" "$(grep '^\[logprobs\]' "$d/b.err")"
    grep -qE 'Sanitizer|runtime error:' "$d/b.err" "$d/bs.err" && bad "$f: sanitizer report: $(cat "$d/bs.err")"
    drafted=0 accepted=0
    read -r drafted accepted < <(sed -n 's/^\[speculative\] drafted \([0-9]*\), accepted \([0-9]*\) .*/\1 \2/p' "$d/bs.err")
    if [ "${drafted:-0}" -gt 0 ]; then ok; else bad "$f: no draft verified: $(grep speculative "$d/bs.err")"; fi
    [ "${accepted:-0}" -gt 0 ] && [ "${accepted:-0}" -lt "${drafted:-0}" ] && mixed=$((mixed + 1))

    # ---- servers: A serves everything, B answers cold and restores A's slot -----------------------
    args=(-m "$M" --parallel 8 -c 256 -t 2 --slot-save-path "$d/slots")
    # gemma4's sliding-window layers keep rings, which share no prefixes and save no slot
    [ "$f" = gemma4 ] && args+=(--swa-full)
    start_server "A_$f" "${args[@]}" || continue
    url_var="url_A_$f"
    A=${!url_var}

    # ---- 2. 8 slots at once: the lone request's tokens --------------------------------------------
    seeds=(11 11 11 11 11 12 13 14)
    curls=()
    for i in "${!seeds[@]}"; do
        curl -s -H 'Content-Type: application/json' "$A/v1/completions" \
            -d "$(req "$BATCH_P" 10 ", \"temperature\": 0.8, \"seed\": ${seeds[$i]}")" >"$d/batch$i" &
        curls+=($!)
    done
    wait "${curls[@]}"
    batch_cached=$(for i in "${!seeds[@]}"; do json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]' "$(cat "$d/batch$i")"; done | xargs)
    for s in 11 12 13 14; do
        post "$A/v1/completions" "$(req "$BATCH_P" 10 ", \"temperature\": 0.8, \"seed\": $s")"
        alone=$(answer)
        for i in "${!seeds[@]}"; do
            [ "${seeds[$i]}" = $s ] && expect_same "$f: seed $s, request $i of a batch of 8 vs alone" "$(answer 0 "$(cat "$d/batch$i")")" "$alone"
        done
    done

    # ---- 3a. the prefix cache -------------------------------------------------------------------
    post "$A/v1/completions" "$(req "$CACHE_P" 12 ', "temperature": 0.8, "seed": 7')"
    first=$(answer)
    post "$A/v1/completions" "$(req "$CACHE_P" 12 ', "temperature": 0.8, "seed": 7')"
    expect_same "$f: the same prompt again: text and logprobs" "$(answer)" "$first"
    expect_eq "$f: the same prompt again: all but its last token cached" "$(cached)" $(($(n_prompt) - 1))
    post "$A/v1/completions" "$(req "$CACHE_L" 12 ', "temperature": 0.8, "seed": 7')"
    longer=$(answer)
    c=$(cached)
    if [ "${c:-0}" -gt 0 ]; then ok; else bad "$f: a longer prompt starting the same: nothing cached: $body"; fi
    long_info="$c of $(n_prompt)"

    # ---- 4. n = 3: the lone requests with seeds 21, 22, 23 ----------------------------------------
    post "$A/v1/completions" "$(req "$BATCH_P" 8 ', "temperature": 0.8, "seed": 21, "n": 3')"
    nbody=$body
    for i in 0 1 2; do
        post "$A/v1/completions" "$(req "$BATCH_P" 8 ", \"temperature\": 0.8, \"seed\": $((21 + i))")"
        expect_same "$f: n=3, choice $i vs seed $((21 + i)) alone" "$(answer "$i" "$nbody")" "$(answer)"
    done

    # ---- 3c. slot save (the lone request just before went to slot 0) ------------------------------
    post "$A/v1/completions" "$(req "$SLOT_P" 6 ', "temperature": 0')"
    slot_want=$(answer)
    slot_n=$(n_prompt)
    post "$A/slots/0?action=save" '{"filename": "s.bin"}'
    expect_eq "$f: slot save: status" "$code" 200
    # the saved request's prompt and text, continued: a prompt of token ids that starts with every
    # saved one (the text's ids from the CLI's greedy run: text would not tokenize back to them)
    "$REL" run -t 2 -m "$M" -p "$SLOT_P" -n 6 --temp 0 --logprobs 1 2>"$d/slot.err" >/dev/null
    cont="[$("$REL" tokenize -m "$M" -p "$SLOT_P" | tr ' ' ',') $(sed -n 's/^\[logprobs\] step [0-9]*: \([0-9]*\) .*/,\1/p' "$d/slot.err" | tr -d '\n'), 270, 392]"
    post "$A/v1/completions" "$(printf '{"prompt": %s, "max_tokens": 4, "logprobs": 2, "temperature": 0}' "$cont")"
    cont_want=$(answer)
    stop_server "A_$f"

    # ---- B: the longer prompt cold; the restored slot --------------------------------------------
    start_server "B_$f" "${args[@]}" || continue
    url_var="url_B_$f"
    B=${!url_var}
    post "$B/v1/completions" "$(req "$CACHE_L" 12 ', "temperature": 0.8, "seed": 7')"
    expect_same "$f: the longer prompt: the cold server's text and logprobs" "$longer" "$(answer)"
    post "$B/slots/0?action=restore" '{"filename": "s.bin"}'
    expect_eq "$f: slot restore: status" "$code" 200
    n_restored=$(json 'd["n_restored"]')
    post "$B/v1/completions" "$(req "$SLOT_P" 6 ', "temperature": 0')"
    expect_same "$f: the restored slot: text and logprobs" "$(answer)" "$slot_want"
    # (recurrent families: the file carries the state before the prompt's last token too)
    expect_eq "$f: the restored slot: all but the last prompt token cached" "$(cached)" $((slot_n - 1))
    post "$B/v1/completions" "$(printf '{"prompt": %s, "max_tokens": 4, "logprobs": 2, "temperature": 0}' "$cont")"
    expect_same "$f: the restored slot, continued: text and logprobs" "$(answer)" "$cont_want"
    expect_eq "$f: the restored slot, continued: every restored token cached" "$(cached)" "$n_restored"
    stop_server "B_$f"

    echo "$f: lookup drafted ${drafted:-0}, accepted ${accepted:-0}; batch of 8 cached [$batch_cached]; longer prompt cached $long_info"

    # ---- 3b. run --prompt-cache ------------------------------------------------------------------
    for p in P L; do
        pv=CACHE_$p
        cli "$d/cold$p" -m "$M" -p "${!pv}" -n 12 --seed 5
        cli "$d/pc$p" -m "$M" -p "${!pv}" -n 12 --seed 5 --prompt-cache "$d/pc.kv"
        same_file "$f: --prompt-cache, prompt $p: the text" "$d/pc$p" "$d/cold$p"
    done
    expect_in "$f: --prompt-cache, the continuation reused the saved prompt" "reused" "$(grep -v 'reused 0 ' "$d/pcL.err")"
    cli "$d/pc2" -m "$M" -p "$CACHE_L" -n 12 --seed 5 --prompt-cache "$d/pc.kv"
    same_file "$f: --prompt-cache, again: the text" "$d/pc2" "$d/coldL"
    n=$("$REL" tokenize -m "$M" -p "$CACHE_L" | wc -w)
    expect_in "$f: --prompt-cache, again: reused" "reused $((n - 1)) of the prompt's $n tokens" "$(cat "$d/pc2.err")"

    # ---- 4. -N 3 --seed 31: the runs with seeds 31, 32, 33 ----------------------------------------
    cli "$d/n3" -m "$M" -p "$BATCH_P" -n 8 -N 3 --seed 31
    for s in 31 32 33; do cli "$d/n3_$s" -m "$M" -p "$BATCH_P" -n 8 --seed $s; done
    cat "$d/n3_31" "$d/n3_32" "$d/n3_33" >"$d/n3_lone"
    same_file "$f: -N 3: each sample its seed's lone run" "$d/n3" "$d/n3_lone"

    # ---- 5. a full context with --context-shift --------------------------------------------------
    cli "$d/cs" -m "$M" -p "one two three" -n 60 -c 32 --temp 0 --context-shift
    rc=$?
    if $recurrent; then
        if [ $rc -eq 1 ] && grep -q "recurrent layers carry a state of every token seen, which cannot drop tokens" "$d/cs.err" &&
            [ ! -s "$d/cs" ]; then ok
        else bad "$f: --context-shift at a full context: rc $rc, $(cat "$d/cs.err")"; fi
    else
        if [ $rc -eq 0 ] && grep -q "context shift made room" "$d/cs.err"; then ok
        else bad "$f: --context-shift: rc $rc, $(cat "$d/cs.err")"; fi
    fi
done
# a server with --context-shift: a recurrent family's refuses to start, with the reason; an
# attention-only family's shifts
expect_err "lfm2 server with --context-shift" "context shift: this model's recurrent layers carry a state of every token seen" \
    "$NUCLEUS" serve -m "$SHARED/archs/lfm2/lfm2-f32.gguf" --port 0 --parallel 1 -c 32 -t 2 --context-shift
start_server shift2 -m "$SHARED/archs/mistral3/mistral3-f32.gguf" --parallel 1 -c 32 -t 2 --context-shift &&
{
    post "$url_shift2/v1/completions" '{"prompt": "one two three", "max_tokens": 60, "temperature": 0}'
    expect_eq "mistral3 server, --context-shift: 60 tokens in a 32-token context" "$code $(json 'd["usage"]["completion_tokens"]')" "200 60"
    stop_server shift2
}
# (most families, not all: which drafts a model rejects depends on its weights)
if [ "$mixed" -ge $((${#FAMILIES[@]} * 8 / 10)) ]; then ok
else bad "speculative decoding: only $mixed of the ${#FAMILIES[@]} families had drafts both accepted and rejected"; fi

# ---- 6. qwen35's KV cache: bytes per token for the attention layers, a state per sequence -------
M=$SHARED/archs/qwen35/qwen35-f32.gguf
"$REL" inspect "$M" >"$tmp/inspect" 2>&1
"$REL" run -t 2 -m "$M" -p "Hello" -n 1 >/dev/null 2>"$tmp/kv.err"
expect_eq "qwen35: layer kinds" "$(sed -n 's/^ *[0-9]\+  \(gated [A-Za-z]*\).*/\1/p' "$tmp/inspect" | sort | uniq -c | xargs)" \
    "4 gated DeltaNet 2 gated attention"
# attention: K and V rows of f16, KV heads x head size; DeltaNet: a value-heads x key-size x
# value-size state and the convolution's last (kernel - 1) inputs (values, keys, queries), in F32
want=$(/usr/bin/python3 - "$tmp/inspect" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
kernel = int(re.search(r"ssm\.conv_kernel +uint32 +(\d+)", text).group(1))
per_token = state = 0
for m in re.finditer(r"gated attention, \d+ heads, (\d+) KV heads of (\d+)", text):
    per_token += 2 * int(m.group(1)) * int(m.group(2)) * 2
for m in re.finditer(r"gated DeltaNet, (\d+) value heads of (\d+), (\d+) key heads of (\d+)", text):
    hv, dv, hk, dk = map(int, m.groups())
    state += (hv * dk * dv + (kernel - 1) * (hv * dv + 2 * hk * dk)) * 4
print("%.1f KiB per token, recurrent state %.1f KiB a sequence" % (per_token / 1024, state / 1024))
PY
)
expect_in "qwen35: the start-up line" "$want" "$(grep '^\[kv cache\]' "$tmp/kv.err")"
# deepseek2 caches one latent row a token and layer (kv_lora_rank + the rotated dims), kept in F32
# when F16 is asked; gemma4's default cache is F32 (its unscaled attention), f16 when asked
run_kv() { "$REL" run -t 2 -p "Hello" -n 1 "$@" 2>&1 >/dev/null | grep '^\[kv cache\]'; }
expect_in "deepseek2: latent rows in F32, 4 layers x (64 + 16) x 4 bytes" \
    "[kv cache] keys f16, values f16 (latent f32): 1.2 KiB per token" "$(run_kv -m "$SHARED/archs/deepseek2/deepseek2-f32.gguf")"
expect_in "gemma4: the default cache" "[kv cache] keys f32, values f32:" "$(run_kv -m "$SHARED/archs/gemma4/gemma4-f32.gguf")"
expect_in "gemma4: f16 when asked" "[kv cache] keys f16, values f16:" \
    "$(run_kv -m "$SHARED/archs/gemma4/gemma4-f32.gguf" --cache-type f16)"
expect_in "qwen3: the default cache" "[kv cache] keys f16, values f16:" "$(run_kv -m "$SHARED/archs/qwen3/qwen3-f16.gguf")"
finish
