#!/usr/bin/env bash
# Structured output end to end (sanitized build): `nucleus run --json-schema-file` on every shared
# model (random weights included: the grammar alone makes their output valid), five schemas
# (tests/e2e/grammar/*.json: nested objects, arrays with min/max items and prefixItems, enum and
# const, anyOf/oneOf with formats, $ref recursion), three seeds at temperature 1; every output is
# validated by ajv (tests/node_grammar, draft 2020-12 with ajv-formats), not by nucleus. A GBNF
# file (--grammar-file) checked against an equivalent regular expression; `{"type":"object"}`
# (json_object mode) parsed as an object; greedy decoding with a grammar gives the same text with
# speculative decoding (prompt lookup, a draft model); errors name their place. Ends with
# "grammar: N passed, N failed". make test (tests/lib/tier.sh): one of the three seeds per model and
# schema, in turn (make test-full and a run by hand: all three).
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
. tests/lib/tier.sh
BIN=${NUCLEUS_BIN:-build/san/nucleus}
. tests/lib/checks.sh
finish() { echo "grammar: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    bad "node and npm are needed (Debian: apt-get install nodejs npm)"
    finish
fi
if [ ! -x "$BIN" ] && ! make "$BIN" >/dev/null; then
    bad "cannot build $BIN"
    finish
fi
if [ ! -d tests/node_grammar/node_modules/ajv-formats ]; then
    (cd tests/node_grammar && npm ci --no-audit --no-fund --loglevel=error) || { bad "npm ci in tests/node_grammar failed"; finish; }
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
D=tests/e2e/grammar
STORIES=$SHARED/models/stories260K/stories260K.gguf
PROMPT="Data:"

# gen OUT ARGS...: the generated text (the echoed prompt and the newline run ends with cut off)
# into OUT; fails unless the run ended by itself (stop: stop), without a sanitizer report.
# gen_any: the same, a run that fills its context or -n passing too (without writing OUT).
gen_any() { LENGTH_OK=1 gen "$@"; }
gen() {
    local out=$1; shift
    local err
    err=$("$BIN" run -p "$PROMPT" "$@" 2>&1 >"$out.raw")
    local rc=$?
    if [ -n "${LENGTH_OK:-}" ] && [ $rc -eq 0 ] && grep -q "stop: length" <<<"$err" && ! grep -q Sanitizer <<<"$err"; then
        rm -f "$out.raw"
        return 0
    fi
    if [ $rc -ne 0 ] || grep -q Sanitizer <<<"$err" || ! grep -q "stop: stop" <<<"$err"; then
        bad "run $* (rc $rc): $(tail -3 <<<"$err")"
        return 1
    fi
    local raw
    raw=$(cat "$out.raw"; echo x)
    raw=${raw%x}
    if [ "${raw:0:${#PROMPT}}" != "$PROMPT" ]; then
        bad "run $*: the output does not start with the prompt"
        return 1
    fi
    raw=${raw:${#PROMPT}}
    printf '%s' "${raw%$'\n'}" >"$out"
    rm -f "$out.raw"
}

# ---- errors ----
expect_err "GBNF syntax" "--grammar: grammar 1:10: unterminated string literal" \
    "$BIN" run -m "$STORIES" -p x -n 2 --grammar 'root ::= "a'
expect_err "undefined rule" "--grammar: grammar 2:11: rule 'b' is used but not defined" \
    "$BIN" run -m "$STORIES" -p x -n 2 --grammar $'root ::= a\na ::= "x" b'
expect_err "left recursion" "rule 'e' is left-recursive" \
    "$BIN" run -m "$STORIES" -p x -n 2 --grammar $'root ::= e\ne ::= e "+" "1" | "1"'
expect_err "no root" "no 'root' rule" "$BIN" run -m "$STORIES" -p x -n 2 --grammar 'r ::= "a"'
expect_err "schema keyword" "-j: json schema: unsupported keyword 'uniqueItems' at /items/uniqueItems" \
    "$BIN" run -m "$STORIES" -p x -n 2 -j '{"type":"array","items":{"type":"array","uniqueItems":true}}'
expect_err "schema pattern" "pattern '(?=x)': lookahead (?= ... ) / (?! ... ) is not supported (at character 2) at /properties/a" \
    "$BIN" run -m "$STORIES" -p x -n 2 --json-schema '{"type":"object","properties":{"a":{"type":"string","pattern":"(?=x)"}}}'
expect_err "schema JSON" "-j: json schema: not valid JSON" "$BIN" run -m "$STORIES" -p x -n 2 -j '{"type":'
expect_err "schema ref" "\$ref '#/\$defs/nope' points to nothing" "$BIN" run -m "$STORIES" -p x -n 2 -j '{"$ref":"#/$defs/nope"}'
expect_err "two grammars" "--json-schema: --grammar already gives the grammar" \
    "$BIN" run -m "$STORIES" -p x -n 2 --grammar 'root ::= "a"' --json-schema '{}'
expect_err "missing file" "error: $tmp/none.gbnf:" "$BIN" run -m "$STORIES" -p x -n 2 --grammar-file "$tmp/none.gbnf"
expect_err "beams" "--grammar: works with sampling, not with --beams" \
    "$BIN" run -m "$STORIES" -p x -n 2 --grammar 'root ::= "a"' --beams 2
expect_err "contrastive" "not with contrastive search" \
    "$BIN" run -m "$STORIES" -p x -n 2 --grammar 'root ::= "a"' --penalty-alpha 0.5 --top-k 4
expect_err "ordering the stage" "sampler stage 'grammar' cannot be ordered" \
    "$BIN" run -m "$STORIES" -p x -n 2 --samplers 'grammar;top_k'
expect_in "run -h" "--json-schema" "$("$BIN" run -h)"
expect_in "chat -h" "--grammar-file" "$("$BIN" chat -h)"

# A complete grammar with nothing more to allow ends the text, even with --ignore-eos / --min-tokens.
for flag in --ignore-eos "--min-tokens 30"; do
    gen "$tmp/end.out" -m "$STORIES" -n 40 --seed 1 --grammar 'root ::= [a-z]{1,3} "."' $flag &&
        { [[ $(cat "$tmp/end.out") =~ ^[a-z]{1,3}\.$ ]] && ok || bad "$flag: '$(cat "$tmp/end.out")'"; }
done

# ---- every model, every schema, three seeds ----
models=("$SHARED"/models/*/*.gguf "$SHARED"/archs/*/*.gguf)
n_gen=0 n_want=0 turn=0
for schema in "$D"/*.json; do
    name=$(basename "$schema" .json)
    mkdir -p "$tmp/$name"
    for m in "${models[@]}"; do
        mname=$(basename "$m" .gguf)
        # A vocabulary that cannot spell '{' (TinyStories-656K's has no such token and no byte
        # fallback: it tokenizes to <unk>, id 0) can only end at once, with nothing written, and
        # says why: the finish reason grammar and a warning, not a "stop" as if it were complete.
        if grep -qw 0 <<<"$("$BIN" tokenize -m "$m" -p '{' --no-bos)"; then
            err=$("$BIN" run -p "$PROMPT" -m "$m" -n 50 --temp 1 --seed 1 --json-schema-file "$schema" 2>&1 >"$tmp/$name/$mname.empty")
            expect_eq "$mname cannot write JSON: empty output" "$(cat "$tmp/$name/$mname.empty")" "$PROMPT"
            expect_in "$mname cannot write JSON: the finish reason" "stop: grammar" "$err"
            expect_in "$mname cannot write JSON: the warning" "no token of the model's vocabulary continues the grammar" "$err"
            continue
        fi
        seeds="1 2 3"
        tier_is full || seeds=$((turn % 3 + 1))
        turn=$((turn + 1))
        for seed in $seeds; do
            n_want=$((n_want + 1))
            gen "$tmp/$name/$mname-$seed.out" -m "$m" -n 1500 --temp 1 --seed "$seed" --json-schema-file "$schema" &&
                n_gen=$((n_gen + 1))
        done
    done
    if out=$(node tests/node_grammar/validate.mjs schema "$schema" "$tmp/$name"/*.out 2>&1); then ok
    else bad "$name: ajv: $out"; fi
done
# (a failed run is a failure above too: this says the models and schemas were found)
[ "$n_want" -ge 50 ] && [ "$n_gen" -ge $((n_want * 3 / 4)) ] && ok || bad "only $n_gen of $n_want outputs generated"

# ---- a GBNF file, checked by an equivalent regular expression ----
key='[a-z][a-z0-9_]{0,7}' value='(?:-?[0-9]{1,6}|"[^"\\\n]{0,10}"|true|false)'
mkdir -p "$tmp/gbnf"
for m in "$STORIES" "$SHARED/archs/qwen2/qwen2-f16.gguf" "$SHARED/archs/gemma3/gemma3-f16.gguf"; do
    for seed in 1 2 3 4; do
        gen "$tmp/gbnf/$(basename "$m" .gguf)-$seed.out" -m "$m" -n 1500 --temp 1 --seed "$seed" --grammar-file "$D/pairs.gbnf"
    done
done
out=$(node tests/node_grammar/validate.mjs regex "$key=$value(?:; ?$key=$value)*\\." "$tmp/gbnf"/*.out 2>&1) &&
    ok || bad "pairs.gbnf: $out"

# ---- json_object mode: any JSON object ----
# Free-form JSON has unbounded strings and nesting, so a random model may fill its context: the runs
# that end by themselves must be JSON objects, and some must end.
mkdir -p "$tmp/object"
echo '{"type": "object"}' >"$tmp/object.json"
for m in "$SHARED/archs/llama3/llama3-f16.gguf" "$SHARED/archs/gemma3/gemma3-f16.gguf"; do
    for seed in 1 2 3 4 5; do
        gen_any "$tmp/object/$(basename "$m" .gguf)-$seed.out" -m "$m" -n 2000 --temp 1 --seed "$seed" -j '{"type":"object"}'
    done
done
n_ended=$(ls "$tmp/object" | wc -l)
[ "$n_ended" -ge 2 ] && ok || bad "json_object: only $n_ended of 10 runs ended by themselves"
out=$(node tests/node_grammar/validate.mjs schema "$tmp/object.json" "$tmp/object"/*.out 2>&1) && ok || bad "json_object: $out"

# ---- speculative decoding: greedy text unchanged by drafts ----
for schema in nested recursive; do
    gen "$tmp/plain.out" -m "$STORIES" -n 300 --temp 0 --json-schema-file "$D/$schema.json"
    gen "$tmp/lookup.out" -m "$STORIES" -n 300 --temp 0 --json-schema-file "$D/$schema.json" --lookup-ngram 3
    gen "$tmp/draft.out" -m "$STORIES" -n 300 --temp 0 --json-schema-file "$D/$schema.json" -md "$STORIES" --draft-max 4
    expect_eq "$schema: prompt lookup, greedy" "$(cat "$tmp/lookup.out")" "$(cat "$tmp/plain.out")"
    expect_eq "$schema: draft model, greedy" "$(cat "$tmp/draft.out")" "$(cat "$tmp/plain.out")"
done
# sampling with a draft model: still valid (drafts that break the grammar are rejected)
mkdir -p "$tmp/spec"
for seed in 1 2 3; do
    gen "$tmp/spec/$seed.out" -m "$STORIES" -n 1500 --temp 1 --seed "$seed" --json-schema-file "$D/nested.json" \
        -md "$STORIES" --draft-max 4
done
out=$(node tests/node_grammar/validate.mjs schema "$D/nested.json" "$tmp/spec"/*.out 2>&1) && ok || bad "spec sampling: $out"

finish
