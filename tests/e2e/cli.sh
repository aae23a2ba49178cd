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
assert d["threads"] == 2 and d["kernels"] in ("avx512", "avxvnni", "avx2", "neon", "scalar") and d["decode_bytes"] > 0, d
' "$out" && ok || bad "bench --json: $out"
out=$($BIN bench -m "$STORIES" -p 16 -n 8 -r 1 -t 1 2>&1)
grep -q "| pp16 |" <<<"$out" && grep -q "| tg8 |" <<<"$out" && grep -q "GB/s" <<<"$out" && ok || bad "bench table: $out"
# -d: the tests run on top of a filled context (llama-bench's rows), and the JSON says how deep
out=$($BIN bench -m "$STORIES" -p 16 -n 8 -d 40 -r 2 -t 2 --no-bandwidth 2>&1)
grep -Eq "\| pp16 @ d40 \| [0-9.]+ ± [0-9.]+ \|" <<<"$out" && grep -Eq "\| tg8 @ d40 \| [0-9.]+ ± [0-9.]+ \|" <<<"$out" \
    && ok || bad "bench -d table: $out"
out=$($BIN bench -m "$STORIES" -p 16 -n 8 -d 40 -r 1 -t 1 --json --no-bandwidth 2>&1)
/usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["depth"] == 40 and d["pp"]["mean"] > 0 and d["tg"]["mean"] > 0, d
' "$out" && ok || bad "bench -d --json: $out"
# --all-logits: the prefill's rows all give logits (a verification pass's cost), and say so
out=$($BIN bench -m "$STORIES" -p 16 -n 8 -d 40 -r 1 -t 1 --no-bandwidth --all-logits 2>&1)
grep -Eq "\| pp16 all @ d40 \| [0-9.]+ ± [0-9.]+ \|" <<<"$out" && grep -Eq "\| tg8 @ d40 \|" <<<"$out" && ok || bad "bench --all-logits table: $out"
out=$($BIN bench -m "$STORIES" -p 16 -n 8 -r 1 -t 1 --json --no-bandwidth --all-logits 2>&1)
/usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["pp"]["all_logits"] is True and d["pp"]["mean"] > 0, d
' "$out" && ok || bad "bench --all-logits --json: $out"
expect_err "bench negative depth" "-d: -1 is outside the allowed range" $BIN bench -d -1
expect_err "bench bad depth" "--n-depth: expected an integer" $BIN bench --n-depth 4k

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

# ---- prompt sources, escapes, special tokens, help, version (issue 16) ----
# -f FILE and stdin give the prompt -p gives; like llama.cpp's -f, one final newline is dropped.
printf 'Once upon a time\n' > "$tmp/prompt.txt"
want=$($BIN run -p "Once upon a time" -n 8 --seed 5 -t 1 2>/dev/null)
expect_eq "run -f FILE" "$($BIN run -f "$tmp/prompt.txt" -n 8 --seed 5 -t 1 2>/dev/null)" "$want"
expect_eq "run --file FILE" "$($BIN run --file "$tmp/prompt.txt" -n 8 --seed 5 -t 1 2>/dev/null)" "$want"
expect_eq "run -p - (stdin)" "$(echo "Once upon a time" | $BIN run -p - -n 8 --seed 5 -t 1 2>/dev/null)" "$want"
expect_eq "run -f - (stdin)" "$($BIN run -f - -n 8 --seed 5 -t 1 2>/dev/null <"$tmp/prompt.txt")" "$want"
# llama.cpp's long names mean what the short ones do.
expect_eq "llama.cpp flag names" "$($BIN run --model "$STORIES" --prompt "Once upon a time" --n-predict 8 --seed 5 \
    --threads 1 --ctx-size 64 2>/dev/null)" "$($BIN run -m "$STORIES" -p "Once upon a time" -n 8 --seed 5 -t 1 -c 64 2>/dev/null)"
# -e: the escapes become the bytes they name (bash's $'...' writes the same bytes independently).
expect_eq "run -e" "$($BIN run -e -p 'Once\tupon\x20a\\ "time\x27\nThe' -n 6 --temp 0 2>/dev/null)" \
    "$($BIN run -p $'Once\tupon a\\ "time\'\nThe' -n 6 --temp 0 2>/dev/null)"
expect_eq "run --escape" "$($BIN run --escape -p 'Once\nupon' -n 4 --temp 0 2>/dev/null)" \
    "$($BIN run -p $'Once\nupon' -n 4 --temp 0 2>/dev/null)"
# without -e a backslash is a backslash
out=$($BIN run -p 'Once\nupon' -n 1 --temp 0 2>/dev/null)
[[ "$out" == 'Once\nupon'* ]] && ok || bad "run without -e changed the prompt: $out"
expect_err "bad escape" "bad escape '\\q'" $BIN run -e -p 'a\qb'
expect_err "bad \\x escape" "bad escape '\\xZ1'" $BIN run -e -p 'a\xZ1'
expect_err "\\x00" "bad escape '\\x00'" $BIN run -e -p 'a\x00'
expect_err "trailing backslash" "bad escape" $BIN run -e -p 'a\'
expect_err "missing -f file" "nope.txt: No such file" $BIN run -f "$tmp/nope.txt"
expect_err "-f a directory" "$tmp" $BIN run -f "$tmp"
expect_err "empty stdin" "stdin: the prompt is empty" $BIN run -p - </dev/null
expect_err "empty -p" "-p: the prompt is empty" $BIN run -p ""
: > "$tmp/empty.txt"
expect_err "empty -f file" "empty.txt: the prompt is empty" $BIN run -f "$tmp/empty.txt"
printf 'a\0b' > "$tmp/nul.txt"
expect_err "NUL byte in -f file" "NUL byte" $BIN run -f "$tmp/nul.txt"
expect_err "-p and -f" "not both" $BIN run -p hi -f "$tmp/prompt.txt"
expect_err "no prompt" "-p PROMPT or -f FILE is required" $BIN run -n 2

# --special: "<|im_start|>" becomes token 1 of qwen2's tokenizer.json (its added_tokens), so the
# first greedy token and its log-probability are the reference's after the ids [1] + the prompt's.
QWEN=$SHARED/archs/qwen2
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    read -r im_id ids <<<"$(/usr/bin/python3 - "$QWEN" <<'PY'
import json, sys
d = sys.argv[1]
tok = json.load(open(d + "/hf/tokenizer.json"))
im = [a["id"] for a in tok["added_tokens"] if a["content"] == "<|im_start|>"][0]
r = json.loads(open(d + "/golden.jsonl").readline())
print(im, ",".join(str(i) for i in [im] + r["prompt_ids"]))
PY
)"
    prompt=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["prompt"])' "$QWEN/golden.jsonl")
    ref=$(/usr/bin/python3 "$SHARED/tools/reference-forward" "$QWEN/qwen2-f16.gguf" --ids "$ids" --top 1)
    err=$($BIN run -m "$QWEN/qwen2-f16.gguf" --special -p "<|im_start|>$prompt" -n 1 --temp 0 --logprobs 1 \
          --cache-type f32 -t 2 2>&1 >/dev/null)
    /usr/bin/python3 - "$ref" "$err" "$ids" <<'PY' && ok || bad "run --special vs reference-forward: $ref / $err"
import json, re, sys
ref, err, ids = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3].split(",")
tok, lp = ref["top_logprobs"][0][0]
m = re.search(r"^\[logprobs\] step 0: (\d+) \S.* (-?[0-9.]+) \|", err, re.M)
assert m and int(m.group(1)) == tok and abs(float(m.group(2)) - lp) < 1e-3, (m and m.groups(), tok, lp)
assert re.search(r"prompt %d tokens" % len(ids), err), err
PY
    # without --special the same text is plain text: more tokens than the ids above
    n=$($BIN run -m "$QWEN/qwen2-f16.gguf" -p "<|im_start|>$prompt" -n 1 --temp 0 2>&1 >/dev/null | sed -n 's/.*prompt \([0-9]*\) tokens.*/\1/p')
    [ "${n:-0}" -gt "$(tr ',' '\n' <<<"$ids" | wc -l)" ] && ok || bad "without --special, '<|im_start|>' was one token ($n tokens)"
else
    bad "python3-numpy missing: run 'make deps'"
fi
# tokenize --special agrees with the vocabulary file on the same token
# --show-pieces: llama-tokenize's lines, the ids those of a plain tokenize, the pieces the text
pieces=$($BIN tokenize -m "$STORIES" -p "Once upon a time" --show-pieces)
expect_eq "tokenize --show-pieces ids" "$(sed -E 's/^ *([0-9]+) -> .*/\1/' <<<"$pieces" | tr '\n' ' ')" "1 403 407 261 378 "
expect_eq "tokenize --show-pieces lines" "$(sed -n 2p <<<"$pieces")" "   403 -> ' Once'"
expect_eq "tokenize --show-pieces text" "$(sed -n '2,$p' <<<"$pieces" | sed -E "s/^ *[0-9]+ -> '(.*)'$/\1/" | tr -d '\n')" " Once upon a time"
expect_err "--show-pieces with --json" "--json and --show-pieces exclude each other" \
    $BIN tokenize -m "$STORIES" -p x --show-pieces --json
expect_eq "tokenize --lines --json" "$(printf 'Once\nupon' | $BIN tokenize -m "$STORIES" -f - --lines --json --no-bos)" \
    "$(printf '[%s]\n[%s]' "$($BIN tokenize -m "$STORIES" -p Once --no-bos)" "$($BIN tokenize -m "$STORIES" -p upon --no-bos)")"
expect_eq "tokenize --special" "$($BIN tokenize -m "$QWEN/qwen2-f16.gguf" --special -p '<|im_start|>')" "$im_id"
expect_eq "tokenize -f - (stdin)" "$(printf 'Hello' | $BIN tokenize -m "$STORIES" -f -)" "$($BIN tokenize -m "$STORIES" -p Hello)"

# --seed -1 draws a seed (llama.cpp's default): two runs report different seeds; -2 is refused.
s1=$($BIN run -p hi -n 1 --seed -1 2>&1 >/dev/null | sed -n 's/.*seed \([0-9]*\)$/\1/p')
s2=$($BIN run -p hi -n 1 --seed -1 2>&1 >/dev/null | sed -n 's/.*seed \([0-9]*\)$/\1/p')
[ -n "$s1" ] && [ -n "$s2" ] && [ "$s1" != "$s2" ] && ok || bad "--seed -1: seeds [$s1] [$s2]"
expect_err "--seed -2" "--seed" $BIN run -p hi --seed -2
# the seed drawn reproduces the text when given back
a=$($BIN run -p "Once" -n 12 --temp 1 --seed -1 2>"$tmp/seed.err")
s=$(sed -n 's/.*seed \([0-9]*\)$/\1/p' "$tmp/seed.err")
expect_eq "the reported seed reproduces the run" "$($BIN run -p "Once" -n 12 --temp 1 --seed "$s" 2>/dev/null)" "$a"

# -N: the headers on stderr, only the texts on stdout (each starts with the prompt)
$BIN run -p "Once" -N 2 -n 6 --seed 3 >"$tmp/n.out" 2>"$tmp/n.err"
expect_eq "-N 2: headers on stderr" "$(grep -c '^--- sample [12] of 2: ' "$tmp/n.err")" 2
expect_eq "-N 2: stdout holds two texts" "$(grep -c '^Once' "$tmp/n.out")/$(grep -c -- '---' "$tmp/n.out")" "2/0"

# the KV cache types of bench and score, in run too
err=$($BIN run -p hi -n 2 -ctk f32 --cache-type-v f32 2>&1 >/dev/null)
expect_in "run --cache-type-k/-v" "[kv cache] keys f32, values f32" "$err"
expect_err "run bad cache type" "--cache-type-k: expected f16, f32, q8_0 or q4_0" $BIN run -p hi --cache-type-k q9

# every command answers -h: its usage on stdout, exit 0
for c in run chat score tokenize inspect bench serve quantize; do
    for h in -h --help; do
        out=$($BIN $c $h 2>/dev/null); rc=$?
        [ $rc -eq 0 ] && [[ "$out" == "usage: nucleus $c "* ]] && ok || bad "$c $h: rc=$rc: $(head -2 <<<"$out")"
    done
done
out=$($BIN --help); [[ "$out" == "usage: nucleus COMMAND"* ]] && ok || bad "nucleus --help: $out"

# --version: the build, and the kernel set this CPU's flags allow (from /proc/cpuinfo, capped by NUCLEUS_ISA)
out=$($BIN --version); rc=$?
flags=$(grep -m1 '^flags' /proc/cpuinfo)
want=scalar
if grep -qw avx2 <<<"$flags" && grep -qw fma <<<"$flags" && grep -qw f16c <<<"$flags"; then
    want=avx2 all=1
    for f in avx512f avx512dq avx512bw avx512vl avx512_vnni; do grep -qw $f <<<"$flags" || all=0; done
    [ $all = 1 ] && want=avx512
    [ $want = avx2 ] && grep -qw avx_vnni <<<"$flags" && want=avxvnni
fi
vnni=$([ $want != scalar ] && grep -qw avx_vnni <<<"$flags" && echo avxvnni || echo avx2) # what avxvnni caps to
case ${NUCLEUS_ISA:-} in
    scalar) want=scalar ;;
    avx2) [ $want = scalar ] || want=avx2 ;;
    avxvnni) [ $want = avx512 ] && want=$vnni ;;
esac
[ $rc -eq 0 ] && [[ "$(head -1 <<<"$out")" =~ ^nucleus\ [^\ ]+$ ]] && ok || bad "--version first line: $out"
expect_in "--version kernel set" "(this CPU: $want)" "$out"
expect_in "--version capped" "(this CPU: scalar)" "$(NUCLEUS_ISA=scalar $BIN --version)"
[ $want = scalar ] || expect_in "--version capped at avxvnni" "(this CPU: $vnni)" "$(NUCLEUS_ISA=avxvnni $BIN --version)"
expect_in "--version compiler" "compiler " "$out"

# The default model (models/stories260K.gguf) is found from the binary's place, not the working
# directory: the same text as with -m, from another directory; a binary in a tree that has models/
# (a fresh clone, no ../shared) finds it there; one in a tree without says where it looked.
abs_bin=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
want=$($BIN run -m "$STORIES" -p "Once upon a time" -n 16 --temp 0 2>/dev/null)
expect_eq "default model from another directory" "$(cd "$tmp" && "$abs_bin" run -p "Once upon a time" -n 16 --temp 0 2>/dev/null)" "$want"
expect_eq "default model is the repository's" "$(NUCLEUS_MODEL= $BIN inspect | head -n 1 | sed 's/:.*//')" "$(cd "$(dirname "$abs_bin")/../.." && pwd)/models/stories260K.gguf"
mkdir -p "$tmp/clone/build/san" "$tmp/clone/models"
cp "$BIN" "$tmp/clone/build/san/nucleus"
cp models/stories260K.gguf "$tmp/clone/models/"
expect_eq "default model in a fresh tree" "$(cd / && "$tmp/clone/build/san/nucleus" run -p "Once upon a time" -n 16 --temp 0 2>/dev/null)" "$want"
rm "$tmp/clone/models/stories260K.gguf"
expect_err "no default model" "default model is not in its places: $tmp/clone/build/share/nucleus/stories260K.gguf, $tmp/clone/build/models/stories260K.gguf, $tmp/clone/models/stories260K.gguf" \
    "$tmp/clone/build/san/nucleus" run -p "Once upon a time"
expect_eq "no default model: exit status 2" "$("$tmp/clone/build/san/nucleus" run -p x 2>/dev/null; echo $?)" 2
# The release binary sits one level below models/ (build/nucleus: the README's first command).
if [ -x build/nucleus ]; then
    rel_bin=$(cd build && pwd)/nucleus
    expect_eq "build/nucleus's default model from another directory" \
        "$(cd "$tmp" && "$rel_bin" run -p "Once upon a time" -n 16 --temp 0 2>/dev/null)" "$want"
    cp build/nucleus "$tmp/clone/build/nucleus"
    cp models/stories260K.gguf "$tmp/clone/models/"
    expect_eq "build/nucleus in a fresh tree" "$(cd / && "$tmp/clone/build/nucleus" run -p "Once upon a time" -n 16 --temp 0 2>/dev/null)" "$want"
    rm "$tmp/clone/models/stories260K.gguf"
else
    echo "SKIPPED: build/nucleus is not built (make): its default model was not checked"
fi
expect_eq "NUCLEUS_MODEL overrides" "$(NUCLEUS_MODEL="$STORIES" "$tmp/clone/build/san/nucleus" run -p "Once upon a time" -n 16 --temp 0 2>/dev/null)" "$want"

echo "cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
