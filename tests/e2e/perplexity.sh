#!/usr/bin/env bash
# End-to-end checks of `nucleus perplexity` (sanitized build): its perplexity equals one computed
# from the exact float64 forward pass, in chunks and with a stride; its KL divergence of a Q8_0 file
# from the F32 one equals numpy's from the exact distributions of both, and a model against itself
# gives 0 and 100% agreement; the progress bar and lines; refusals of bad input and mismatched or
# corrupt base files, all without a crash or a sanitizer report.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
BIN=${NUCLEUS_BIN:-build/san/nucleus}
STORIES=$SHARED/models/stories260K/stories260K.gguf
TINY=$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf
REF=$SHARED/tools/reference-forward
. tests/lib/checks.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/story.txt" <<'EOF'
Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her red ball. One day, she saw a big dog near the tree. The dog was sad because it was lost.
EOF
# a text of 1727 tokens for the windows and the progress
for i in $(seq 24); do cat "$tmp/story.txt"; done > "$tmp/long.txt"

counts() { # what, "PASS FAIL" lines of perplexity_check.py
    local out=$1 p f
    read -r p f <<<"$(tail -n 1 <<<"$out")"
    if [[ "$p" =~ ^[0-9]+$ && "$f" =~ ^[0-9]+$ ]]; then
        pass=$((pass + p)); fail=$((fail + f))
        [ "$f" -eq 0 ] || echo "$out" | grep FAIL
    else bad "perplexity_check.py: $out"; fi
}

# The perplexity of chunks and of sliding windows against the exact forward pass.
counts "$(/usr/bin/python3 tests/e2e/perplexity_check.py ppl "$BIN" "$REF" "$STORIES" "$tmp/story.txt" 16 2>&1)"
counts "$(/usr/bin/python3 tests/e2e/perplexity_check.py ppl "$BIN" "$REF" "$STORIES" "$tmp/story.txt" 16 5 2>&1)"
counts "$(/usr/bin/python3 tests/e2e/perplexity_check.py ppl "$BIN" "$REF" "$STORIES" "$tmp/story.txt" 24 23 2>&1)"
# The KL divergence of a Q8_0 stories260K from the F32 one against numpy's.
Q8=$MODELS_DIR/ppl-stories260K-q8_0.gguf
mkdir -p "$MODELS_DIR"
[ -s "$Q8" ] || { /usr/bin/python3 tests/e2e/perplexity_check.py q8_0 "$REF" "$STORIES" "$Q8.$$.part" && mv -f "$Q8.$$.part" "$Q8"; }
counts "$(/usr/bin/python3 tests/e2e/perplexity_check.py kld "$BIN" "$REF" "$STORIES" "$Q8" "$tmp/long.txt" 32 2>&1)"

# A model against itself: no divergence, the same top token everywhere, a perplexity ratio of 1.
$BIN perplexity -m "$STORIES" -f "$tmp/long.txt" -c 64 --kl-divergence-base "$tmp/base" >"$tmp/ppl" 2>"$tmp/err"
expect_in "saving a base prints the perplexity" "PPL = " "$(cat "$tmp/ppl")"
expect_in "saving a base says so" "saved 806 distributions to $tmp/base" "$(cat "$tmp/err")"
out=$($BIN perplexity -m "$STORIES" -f "$tmp/long.txt" -c 64 --kl-divergence-base "$tmp/base" --kl-divergence --json 2>/dev/null)
/usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["kld"] < 1e-7 and d["kld_max"] < 1e-6, d
assert d["same_top"] == 1 and abs(d["ln_ppl_ratio"]) < 1e-6 and abs(d["delta_p"]) < 1e-6, d
assert abs(d["ppl"] / d["ppl_base"] - 1) < 1e-6 and d["scored"] == 806 and d["windows"] == 26, d
' "$out" && ok || bad "KLD of a model against itself: $out"
out=$($BIN perplexity -m "$STORIES" -f "$tmp/long.txt" -c 64 --kl-divergence-base "$tmp/base" --kl-divergence 2>/dev/null)
for line in "Mean PPL(Q)" "Mean PPL(base)" "Mean ln(PPL(Q)/PPL(base))" "Mean    KLD:   0.000000" "Same top p: 100.0000" "PPL = "; do
    expect_in "KLD report" "$line" "$out"
done
# Sliding windows save and compare as well: every token after the first, against itself.
$BIN perplexity -m "$STORIES" -f "$tmp/long.txt" -c 64 --stride 20 --kl-divergence-base "$tmp/sbase" >/dev/null 2>&1
out=$($BIN perplexity -m "$STORIES" -f "$tmp/long.txt" -c 64 --stride 20 --kl-divergence-base "$tmp/sbase" --kl-divergence --json 2>/dev/null)
/usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["kld"] < 1e-7 and d["same_top"] == 1 and d["scored"] == 1726 and d["stride"] == 20, d
' "$out" && ok || bad "stride KLD against itself: $out"
# The chunks: 1727 tokens make 26 windows of 64, each scoring 31; --chunks takes the first ones.
out=$($BIN perplexity -m "$STORIES" -f "$tmp/long.txt" -c 64 --chunks 3 --json 2>/dev/null)
grep -q '"windows": 3, "n_ctx": 64, "stride": 0' <<<"$out" && grep -q '"scored": 93,' <<<"$out" && ok || bad "--chunks 3: $out"
# stdin, and the same figure as from the file
a=$($BIN perplexity -m "$STORIES" -f - -c 64 --chunks 3 <"$tmp/long.txt" 2>/dev/null)
b=$($BIN perplexity -m "$STORIES" -f "$tmp/long.txt" -c 64 --chunks 3 2>/dev/null)
expect_eq "-f - reads stdin" "$a" "$b"
# -t does not change the result
a=$($BIN perplexity -m "$STORIES" -f "$tmp/long.txt" -c 64 --chunks 3 -t 1 2>/dev/null)
expect_eq "-t 1 and -t 2" "$a" "$b"

# Progress: lines with an ETA when stderr is not a terminal, a bar redrawn in place on one.
err=$($BIN perplexity -m "$STORIES" -f "$tmp/long.txt" -c 64 2>&1 >/dev/null)
expect_in "progress line" "perplexity: 26/26 windows, PPL" "$err"
expect_in "progress ETA" "ETA 0:00" "$err"
expect_in "start-up line" "1727 tokens, 26 windows of 64 (chunks), 806 tokens scored" "$err"
[ "$(grep -c "windows, PPL" <<<"$err")" -le 11 ] && ok || bad "more than a line per tenth: $err"
out=$(/usr/bin/python3 - "$BIN" "$STORIES" "$tmp/long.txt" <<'PY'
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "perplexity", "-m", sys.argv[2], "-f", sys.argv[3], "-c", "64"])
out = b""
while True:
    try: b = os.read(fd, 4096)
    except OSError: break
    if not b: break
    out += b
os.waitpid(pid, 0)
print(repr(out.decode()))
PY
)
expect_in "a bar on a terminal" '\r[==' "$out"
expect_in "the bar ends full" "[==============================] 26/26" "$out"
expect_in "the bar's ETA" "ETA 0:00" "$out"

# Refusals, naming the problem.
printf '' > "$tmp/empty.txt"
printf 'Once upon\0 a time' > "$tmp/nul.txt"
expect_err "missing file" "$tmp/nope.txt: No such file" $BIN perplexity -m "$STORIES" -f "$tmp/nope.txt"
expect_err "empty file" "$tmp/empty.txt: empty" $BIN perplexity -m "$STORIES" -f "$tmp/empty.txt"
expect_err "NUL byte" "holds a NUL byte" $BIN perplexity -m "$STORIES" -f "$tmp/nul.txt" -c 4
expect_err "shorter than a window" "71 tokens, shorter than one window of 128 (-c)" $BIN perplexity -m "$STORIES" -f "$tmp/story.txt" -c 128
expect_err "no -f" "-f FILE is required" $BIN perplexity -m "$STORIES"
expect_err "unknown flag" "unknown option '--bogus'" $BIN perplexity -f "$tmp/story.txt" --bogus
expect_err "-c not a number" "-c: expected an integer, got 'abc'" $BIN perplexity -f "$tmp/story.txt" -c abc
expect_err "-c too small" "-c: 2 is outside the allowed range" $BIN perplexity -f "$tmp/story.txt" -c 2
expect_err "--stride >= -c" "--stride: 16 must be less than the context (-c 16)" $BIN perplexity -f "$tmp/story.txt" -c 16 --stride 16
expect_err "--stride >= default context" "--stride: 600 must be less than the context (512)" $BIN perplexity -m "$STORIES" -f "$tmp/long.txt" --stride 600
expect_err "--chunks 0" "--chunks: 0 is outside the allowed range" $BIN perplexity -f "$tmp/story.txt" --chunks 0
expect_err "--kl-divergence alone" "--kl-divergence needs --kl-divergence-base FILE" $BIN perplexity -f "$tmp/story.txt" --kl-divergence
expect_err "a missing value" "-c" $BIN perplexity -f "$tmp/story.txt" -c
expect_err "a missing model" "nope.gguf" $BIN perplexity -m "$tmp/nope.gguf" -f "$tmp/story.txt"
expect_err "a base in a missing directory" "$tmp/no/dir/base: No such file" $BIN perplexity -m "$STORIES" -f "$tmp/story.txt" -c 16 --kl-divergence-base "$tmp/no/dir/base"
expect_err "a missing base" "$tmp/nobase: cannot open: No such file" $BIN perplexity -m "$STORIES" -f "$tmp/story.txt" -c 16 --kl-divergence-base "$tmp/nobase" --kl-divergence
expect_err "a base over the text" "$tmp/long.txt is the text; the base file would overwrite it" \
    $BIN perplexity -m "$STORIES" -f "$tmp/long.txt" -c 64 --kl-divergence-base "$tmp/long.txt"
expect_err "a base over the model" "is the model; the base file would overwrite it" \
    $BIN perplexity -m "$STORIES" -f "$tmp/long.txt" -c 64 --kl-divergence-base "$STORIES"
[ "$(wc -c <"$tmp/long.txt")" -eq 4560 ] && ok || bad "the text was overwritten"
out=$($BIN perplexity -h); expect_eq "-h and --help" "$out" "$($BIN perplexity --help)"
expect_in "-h" "usage: nucleus perplexity" "$out"
expect_in "nucleus -h lists perplexity" "perplexity" "$($BIN -h)"

# Base files that do not belong to this run are refused, naming the difference.
kl() { $BIN perplexity "$@" --kl-divergence; }
expect_err "another model's vocabulary" "saved from a model with a vocabulary of 512 tokens; this model has 2048" \
    kl -m "$TINY" -f "$tmp/long.txt" -c 64 --kl-divergence-base "$tmp/base"
sed 's/ball/cat/' "$tmp/long.txt" > "$tmp/other.txt"
expect_err "another text" "another text" kl -m "$STORIES" -f "$tmp/other.txt" -c 64 --kl-divergence-base "$tmp/base"
sed 's/sad/mad/' "$tmp/long.txt" > "$tmp/same_len.txt"
expect_err "another text, as long" "saved from another text (or tokenizer): token" \
    kl -m "$STORIES" -f "$tmp/same_len.txt" -c 64 --kl-divergence-base "$tmp/base"
expect_err "another context" "saved with a context of 64 tokens (-c 64); this run has -c 32" \
    kl -m "$STORIES" -f "$tmp/long.txt" -c 32 --kl-divergence-base "$tmp/base"
expect_err "stride vs chunks" "saved with chunks (no --stride); this run has --stride" \
    kl -m "$STORIES" -f "$tmp/long.txt" -c 64 --stride 8 --kl-divergence-base "$tmp/base"
expect_err "fewer windows" "holds 26 windows; this run has 5 (--chunks)" \
    kl -m "$STORIES" -f "$tmp/long.txt" -c 64 --chunks 5 --kl-divergence-base "$tmp/base"
head -c 100000 "$tmp/base" > "$tmp/short_base"
expect_err "a truncated base" "bytes, but its header asks for" \
    kl -m "$STORIES" -f "$tmp/long.txt" -c 64 --kl-divergence-base "$tmp/short_base"
head -c 20 "$tmp/base" > "$tmp/stub_base"
expect_err "a base cut in its header" "not a nucleus KL-divergence base file" \
    kl -m "$STORIES" -f "$tmp/long.txt" -c 64 --kl-divergence-base "$tmp/stub_base"
expect_err "a text as the base" "not a nucleus KL-divergence base file" \
    kl -m "$STORIES" -f "$tmp/long.txt" -c 64 --kl-divergence-base "$tmp/long.txt"
# The first record's lo (after the 28-byte header and 1727 token ids) made a NaN.
cp "$tmp/base" "$tmp/nan_base"
printf '\xff\xff\xff\x7f' | dd of="$tmp/nan_base" bs=1 seek=$((28 + 4 * 1727)) conv=notrunc status=none
expect_err "a corrupt record" "record 0 is corrupt" kl -m "$STORIES" -f "$tmp/long.txt" -c 64 --kl-divergence-base "$tmp/nan_base"
# The last record's top token out of the vocabulary
cp "$tmp/base" "$tmp/top_base"
size=$(stat -c %s "$tmp/base")
printf '\xff\xff\x00\x00' | dd of="$tmp/top_base" bs=1 seek=$((size - 1024 - 4)) conv=notrunc status=none
expect_err "a corrupt last record" "record 805 is corrupt" kl -m "$STORIES" -f "$tmp/long.txt" -c 64 --kl-divergence-base "$tmp/top_base"
# Random bytes in the log-probabilities give figures, not a crash.
cp "$tmp/base" "$tmp/noisy_base"
head -c 4000 /dev/urandom | dd of="$tmp/noisy_base" bs=1 seek=20000 conv=notrunc status=none
out=$(kl -m "$STORIES" -f "$tmp/long.txt" -c 64 --kl-divergence-base "$tmp/noisy_base" 2>&1)
if grep -q "Sanitizer" <<<"$out"; then bad "noisy base: $out"
elif grep -q "Mean    KLD" <<<"$out" || grep -q "is corrupt" <<<"$out"; then ok
else bad "noisy base: $out"; fi
# A failed save leaves no file behind.
expect_err "a save refused" "shorter than one window" $BIN perplexity -m "$STORIES" -f "$tmp/story.txt" -c 128 --kl-divergence-base "$tmp/base2"
[ ! -e "$tmp/base2" ] && ok || bad "a refused save left $tmp/base2"

echo "perplexity: $pass passed, $fail failed"
[ $fail -eq 0 ]
