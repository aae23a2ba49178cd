#!/usr/bin/env bash
# `nucleus run --prompt-cache FILE` end to end (sanitized build): the second run of a prompt
# reuses the saved tokens and prints the same text as a run without the cache (greedy, seeded
# sampling, several samples, beams; a longer prompt that starts the same; Gemma 3's sliding
# layers past their ring; quantised caches); a file of another model or cache types, a damaged
# file, a file that is no cache file and an unwritable place are errors naming the problem, and
# the file is left as it was.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
BIN=${NUCLEUS_BIN:-build/san/nucleus}
STORIES=$SHARED/models/stories260K/stories260K.gguf
TINY=$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf
GEMMA=$SHARED/archs/gemma3/gemma3-f16.gguf
QWEN3=$SHARED/archs/qwen3/qwen3-f16.gguf
. tests/lib/checks.sh
if [ ! -x "$BIN" ] && ! make "$BIN" >/dev/null; then
    bad "cannot build $BIN"
    echo "prompt_cache: $pass passed, $fail failed"
    exit 1
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run_cached FILE ARGS...: stdout to $tmp/out, stderr to $tmp/err, exit status in $rc
run_cached() {
    local file=$1; shift
    "$BIN" run -t 2 --prompt-cache "$file" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$tmp/err"; then bad "sanitizer report: $(cat "$tmp/err")"; fi
}

P="Once upon a time, there was a little girl named Lily. She liked to play"
fresh=$("$BIN" run -m "$STORIES" -p "$P" -n 24 --temp 0 -t 2 2>/dev/null)
run_cached "$tmp/a.kv" -m "$STORIES" -p "$P" -n 24 --temp 0
expect_eq "first run: the text" "$(cat "$tmp/out")" "$fresh"
expect_in "first run: nothing to reuse" "a.kv: not found, reused 0 of the prompt's" "$(cat "$tmp/err")"
[ -s "$tmp/a.kv" ] && ok || bad "first run wrote no cache file"
n=$("$BIN" tokenize -m "$STORIES" -p "$P" | wc -w)
run_cached "$tmp/a.kv" -m "$STORIES" -p "$P" -n 24 --temp 0
expect_eq "second run: exit status" "$rc" 0
expect_eq "second run: the same text" "$(cat "$tmp/out")" "$fresh"
expect_in "second run: reuses all but the last token" "holds $n tokens, reused $((n - 1)) of the prompt's $n tokens; it holds this prompt already" "$(cat "$tmp/err")"
expect_in "second run: the timing line says so" "prompt $n tokens ($((n - 1)) reused)" "$(cat "$tmp/err")"

# a longer prompt starting the same reuses the saved part, computes the rest, and saves itself
P2="$P with her red ball in the garden."
fresh2=$("$BIN" run -m "$STORIES" -p "$P2" -n 24 --temp 0 -t 2 2>/dev/null)
n2=$("$BIN" tokenize -m "$STORIES" -p "$P2" | wc -w)
run_cached "$tmp/a.kv" -m "$STORIES" -p "$P2" -n 24 --temp 0
expect_eq "longer prompt: the text" "$(cat "$tmp/out")" "$fresh2"
expect_in "longer prompt: reuses the saved prompt" "reused $n of the prompt's $n2 tokens; saved the prompt" "$(cat "$tmp/err")"
run_cached "$tmp/a.kv" -m "$STORIES" -p "$P2" -n 24 --temp 0
expect_in "longer prompt saved" "holds $n2 tokens, reused $((n2 - 1))" "$(cat "$tmp/err")"

# seeded sampling, several samples, beams: the same output with or without the cache
for args in "--temp 0.9 --seed 5" "-N 3 --temp 1 --seed 9" "--beams 3 --n-best 2"; do
    want=$("$BIN" run -m "$STORIES" -p "$P" -n 16 -t 2 $args 2>/dev/null)
    rm -f "$tmp/b.kv"
    run_cached "$tmp/b.kv" -m "$STORIES" -p "$P" -n 16 $args
    run_cached "$tmp/b.kv" -m "$STORIES" -p "$P" -n 16 $args
    expect_eq "$args: the same output from the cache" "$(cat "$tmp/out")" "$want"
    expect_in "$args: reused" "reused $((n - 1)) of the prompt's" "$(cat "$tmp/err")"
done

# Gemma 3: sliding layers (window 8) whose ring would not hold a prompt of 800+ tokens; the
# cache keeps every position, so the prompt saves and the second run matches a run without it
long=$(for i in $(seq 1 36); do printf 'the quick brown fox %d jumps over the lazy dog. ' "$i"; done)
nl=$("$BIN" tokenize -m "$GEMMA" -p "$long" | wc -w)
[ "$nl" -gt 800 ] && ok || bad "the long prompt has only $nl tokens"
want=$("$BIN" run -m "$GEMMA" -p "$long" -n 12 --temp 0 -t 2 2>/dev/null)
run_cached "$tmp/g.kv" -m "$GEMMA" -p "$long" -n 12 --temp 0
expect_eq "gemma3: first run exit status" "$rc" 0
run_cached "$tmp/g.kv" -m "$GEMMA" -p "$long" -n 12 --temp 0
expect_eq "gemma3: the same text from the cache" "$(cat "$tmp/out")" "$want"
expect_in "gemma3: reused" "reused $((nl - 1)) of the prompt's $nl tokens" "$(cat "$tmp/err")"

# quantised caches (Qwen3's heads of 32): the file keeps the rows as the cache does, so the second
# run prints what a run without the file prints with the same cache types
for ct in "--cache-type q8_0" "--cache-type-k q4_0 --cache-type-v f16"; do
    want=$("$BIN" run -m "$QWEN3" -p "$P" -n 12 --temp 0 -t 2 $ct 2>/dev/null)
    rm -f "$tmp/q.kv"
    run_cached "$tmp/q.kv" -m "$QWEN3" -p "$P" -n 12 --temp 0 $ct
    run_cached "$tmp/q.kv" -m "$QWEN3" -p "$P" -n 12 --temp 0 $ct
    expect_eq "qwen3 $ct: the same text from the cache" "$(cat "$tmp/out")" "$want"
    expect_in "qwen3 $ct: reused" "of the prompt's" "$(cat "$tmp/err")"
done

# files that cannot be used: an error naming the problem, exit 1, nothing generated, the file as it was
expect_refused() { # what, needle, file, run args...
    local what=$1 needle=$2 file=$3; shift 3
    local before; before=$(sha256sum <"$file")
    run_cached "$file" "$@"
    if [ "$rc" -eq 1 ] && grep -qF -- "$needle" "$tmp/err" && grep -qF "the file is left as it is" "$tmp/err" &&
        [ ! -s "$tmp/out" ]; then ok; else bad "$what: rc=$rc, expected an error with '$needle': $(cat "$tmp/err")"; fi
    expect_eq "$what: the file is unchanged" "$(sha256sum <"$file")" "$before"
}
expect_refused "another model" "written for another model, 'llama' (llama, 5 layers, 640 bytes a cell); this one is" \
    "$tmp/a.kv" -m "$TINY" -p "$P" -n 4
expect_refused "other cache types" "its cache keeps keys as Q4_0 and values as F16; this context keeps Q8_0 and Q8_0" \
    "$tmp/q.kv" -m "$QWEN3" -p "$P" -n 4 --cache-type q8_0
size=$(stat -c %s "$tmp/a.kv")
head -c $((size - 100)) "$tmp/a.kv" >"$tmp/trunc.kv"
expect_refused "truncated" "the file is truncated" "$tmp/trunc.kv" -m "$STORIES" -p "$P" -n 4
cp "$tmp/a.kv" "$tmp/flip.kv"
printf '\x55' | dd of="$tmp/flip.kv" bs=1 seek=$((size / 2)) conv=notrunc status=none
expect_refused "a flipped byte" "checksum mismatch" "$tmp/flip.kv" -m "$STORIES" -p "$P" -n 4
cp "$STORIES" "$tmp/model.gguf"
expect_refused "a model file" "not a nucleus KV cache file (it starts with the bytes 47475546" "$tmp/model.gguf" \
    -m "$STORIES" -p "$P" -n 4
: >"$tmp/empty.kv"
expect_refused "an empty file" "the file is empty" "$tmp/empty.kv" -m "$STORIES" -p "$P" -n 4
run_cached "$tmp" -m "$STORIES" -p "$P" -n 4
expect_eq "a directory: exit status" "$rc" 1
expect_in "a directory" "not a regular file" "$(cat "$tmp/err")"

# a place it cannot write: the text is out, then the error, exit 1
run_cached "$tmp/no/such/dir.kv" -m "$STORIES" -p "$P" -n 24 --temp 0
expect_eq "unwritable: exit status" "$rc" 1
expect_eq "unwritable: the text is out" "$(cat "$tmp/out")" "$fresh"
expect_in "unwritable: the error" "error: --prompt-cache: $tmp/no/such/dir.kv: cannot create" "$(cat "$tmp/err")"
ls "$tmp"/*.tmp.* >/dev/null 2>&1 && bad "temporary files left: $(ls "$tmp")" || ok

echo "prompt_cache: $pass passed, $fail failed"
[ $fail -eq 0 ]
