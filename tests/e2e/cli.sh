#!/usr/bin/env bash
# End-to-end checks of the nucleus command line (sanitized build): generation, scoring,
# tokenizing, inspecting, and clean errors for bad input.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
BIN=${NUCLEUS_BIN:-build/san/nucleus}
STORIES=$SHARED/models/stories260K/stories260K.gguf
TINY=$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf
. tests/lib/checks.sh

# Greedy generation reproduces the reference continuation text (llama.cpp's greedy ids equal the
# exact ones for these records, so its text is the expected text).
counts=$(/usr/bin/python3 - "$SHARED" "$BIN" <<'PY'
import json, subprocess, sys
shared, binary = sys.argv[1:3]
ok = bad = 0
for f in ("stories260K", "tinystories-656k-q8_0"):
    for line in open("%s/golden/%s.jsonl" % (shared, f), encoding="utf-8"):
        r = json.loads(line)
        if r["llama_cpp"]["ids"] != r["ids"]: continue
        cmd = [binary, "run", "-m", "%s/%s" % (shared, r["file"]), "-p", r["prompt"], "--temp", "0",
               "-n", str(len(r["ids"])), "-t", "2"]
        got = subprocess.run(cmd, capture_output=True).stdout.decode("utf-8", "replace")
        want = r["prompt"] + r["llama_cpp"]["text"] + "\n"
        if got == want: ok += 1
        else:
            bad += 1
            print("FAIL: run greedy %r on %s:\n got  %r\n want %r" % (r["prompt"], f, got, want), file=sys.stderr)
print(ok, bad)
PY
)
read -r p f <<<"$counts"
pass=$((pass + p)); fail=$((fail + f))

# The default model is used without -m; stats go to stderr.
err=$($BIN run -p "Once upon a time" -n 8 --seed 7 -t 1 2>&1 >/dev/null)
for word in "tok/s" "load" "KiB per token"; do
    grep -q "$word" <<<"$err" && ok || bad "run stderr lacks '$word': $err"
done
# Seeded sampling is reproducible, and thread count does not change it.
a=$($BIN run -p "Once upon a time" -n 32 --temp 1.0 --seed 42 -t 1 2>/dev/null)
b=$($BIN run -p "Once upon a time" -n 32 --temp 1.0 --seed 42 -t 2 2>/dev/null)
c=$($BIN run -p "Once upon a time" -n 32 --temp 1.0 --seed 43 -t 2 2>/dev/null)
expect_eq "same seed, 1 vs 2 threads" "$a" "$b"
[ "$a" != "$c" ] && ok || bad "different seeds gave the same text: $a"

# score: the JSON shape of the reference tool.
out=$($BIN score -m "$STORIES" --ids 1,403,407 --top 3 2>&1)
/usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert list(d) == ["prompt_ids", "ids", "top_logprobs"], d
assert d["prompt_ids"] == [1, 403, 407] and d["ids"] == [] and len(d["top_logprobs"]) == 1 and len(d["top_logprobs"][0]) == 3
' "$out" && ok || bad "score JSON shape: $out"
out=$($BIN score -m "$STORIES" --ids 1,403,407 --all --top 2 2>&1)
/usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert list(d) == ["ids", "top_logprobs"] and len(d["top_logprobs"]) == 3
' "$out" && ok || bad "score --all JSON shape: $out"

# score agrees with the reference tool on the same arguments, field by field.
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    for args in "--ids 1,403,407,261 --top 5 --greedy 6" "--ids 1,403,407 --all --top 4"; do
        ours=$($BIN score -m "$TINY" $args -t 2 2>&1)
        ref=$(/usr/bin/python3 "$SHARED/tools/reference-forward" "$TINY" $args 2>&1)
        /usr/bin/python3 -c '
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert list(a) == list(b), (list(a), list(b))
for k in a:
    if k != "top_logprobs": assert a[k] == b[k], (k, a[k], b[k])
for sa, sb in zip(a["top_logprobs"], b["top_logprobs"]):
    for (ta, la), (tb, lb) in zip(sa, sb):
        assert abs(la - lb) < 0.05, (ta, la, tb, lb)
' "$ours" "$ref" && ok || bad "score vs reference-forward ($args): ours $ours ref $ref"
    done
else
    bad "python3-numpy missing: run 'make deps'"
fi

# tokenize
expect_eq "tokenize" "$($BIN tokenize -m "$STORIES" -p "Once upon a time")" "1 403 407 261 378"
expect_eq "tokenize --no-bos --json" "$($BIN tokenize -m "$STORIES" -p "Once upon a time" --no-bos --json)" "[403, 407, 261, 378]"
expect_eq "tokenize a vocab-only file" "$($BIN tokenize -m "$SHARED/vocab/llama-spm/ggml-vocab-llama-spm.gguf" -p "Hello world" --no-bos)" "15043 3186"

# inspect
out=$($BIN inspect -m "$STORIES" 2>&1)
grep -q "general.architecture" <<<"$out" && grep -q "blk.0.attn_q.weight" <<<"$out" && ok || bad "inspect output: $(head -5 <<<"$out")"

# bench: the JSON report has the fields a dashboard reads
out=$($BIN bench -m "$STORIES" -p 16 -n 8 -r 2 -t 2 --json --no-bandwidth 2>&1)
/usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["pp"]["tokens"] == 16 and d["tg"]["tokens"] == 8 and d["pp"]["mean"] > 0 and d["tg"]["mean"] > 0, d
assert d["threads"] == 2 and d["kernels"] in ("avx512", "avx2", "scalar") and d["decode_bytes"] > 0, d
' "$out" && ok || bad "bench --json: $out"
out=$($BIN bench -m "$STORIES" -p 16 -n 8 -r 1 -t 1 2>&1)
grep -q "| pp16 |" <<<"$out" && grep -q "| tg8 |" <<<"$out" && grep -q "GB/s" <<<"$out" && ok || bad "bench table: $out"

# Bad input: clean errors naming the problem.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
head -c 1000 "$STORIES" > "$tmp/trunc.gguf"
expect_err "truncated model" "trunc.gguf" $BIN run -m "$tmp/trunc.gguf" -p hi
expect_err "missing file" "nope.gguf" $BIN run -m "$tmp/nope.gguf" -p hi
expect_err "vocab-only file as a model" "token_embd.weight" $BIN run -m "$SHARED/vocab/llama-spm/ggml-vocab-llama-spm.gguf" -p hi
expect_err "bad -n" "-n" $BIN run -p hi -n abc
expect_err "negative temperature" "--temp" $BIN run -p hi --temp -1
expect_err "unknown option" "--bogus" $BIN run -p hi --bogus
expect_err "token id out of range" "outside the vocabulary" $BIN score --ids 1,99999
expect_err "bad id list" "--ids" $BIN score --ids 1,x
expect_err "prompt longer than context" "context" $BIN run -p "Once upon a time there was a dog" -c 4
expect_err "unknown command" "unknown command" $BIN frobnicate

echo "cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
