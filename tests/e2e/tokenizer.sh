#!/usr/bin/env bash
# Tokenizers through the CLI: every llama.cpp test vector under shared/vocab (each input through
# `nucleus tokenize --no-bos --json`, compared with its .out line), the golden prompts (with BOS
# as the model asks; synthetic models regenerated into build/models), tokenizer.json against the
# GGUF built from it, and the command's errors. Ends with "tokenizer: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Each .inp holds inputs separated by the line __ggml_vocab_test__; line k of .out is input k's ids.
# Prints "ok" or "FAIL ..." per check (the families run in parallel; counted afterwards).
check_vectors() {
    local name=$1 gguf=$SHARED/vocab/$1/ggml-vocab-$1.gguf
    /usr/bin/python3 - "$gguf.inp" "$tmp/$name" <<'EOF'
import sys
parts = open(sys.argv[1], "rb").read().split(b"\n__ggml_vocab_test__\n")
for k, p in enumerate(parts[:-1]):
    open("%s.%02d" % (sys.argv[2], k), "wb").write(p)
EOF
    # one process for the family's inputs (tokenize --batch: each as -f would), its lines read back in order
    local k=0 want got n_out
    n_out=$(wc -l <"$gguf.out")
    for ((k = 0; k < n_out; k++)); do printf '%s.%02d\n' "$tmp/$name" "$k"; done >"$tmp/$name.list"
    "$NUCLEUS" tokenize -m "$gguf" --batch "$tmp/$name.list" --no-bos --json >"$tmp/$name.got" 2>"$tmp/$name.err"
    k=0
    while IFS= read -r want && IFS= read -r got <&3; do
        want="[$(echo "$want" | sed 's/^ *//; s/ *$//; s/  */, /g')]"
        if [ "$got" = "$want" ]; then echo ok; else echo "FAIL $name input $k: got $got, want $want $(head -c 300 "$tmp/$name.err")"; fi
        k=$((k + 1))
    done <"$gguf.out" 3<"$tmp/$name.got"
    if grep -qE "Sanitizer|runtime error" "$tmp/$name.err"; then echo "FAIL $name: $(head -c 2000 "$tmp/$name.err")"; fi
    if [ "$k" -eq 46 ]; then echo ok; else echo "FAIL $name: $k vectors, expected 46"; fi
}

for d in "$SHARED"/vocab/*/; do
    name=$(basename "$d")
    [ -f "$d/ggml-vocab-$name.gguf.inp" ] && check_vectors "$name" >"$tmp/vectors.$name" &
done
wait
for f in "$tmp"/vectors.*; do
    pass=$((pass + $(grep -c '^ok$' "$f")))
    fail=$((fail + $(grep -c '^FAIL' "$f")))
    grep '^FAIL' "$f"
done

# Golden prompts: every record's prompt must give its prompt_ids. The manifest has one line per
# record: the prompt's file, the expected ids, the model (a shared file, or the name and
# synth-gguf arguments golden_check.py uses, so both make the same file).
/usr/bin/python3 - "$SHARED" "$tmp" >"$tmp/golden" <<'EOF'
import glob, json, os, sys
shared, tmp = sys.argv[1], sys.argv[2]
for path in sorted(glob.glob(os.path.join(shared, "golden", "*.jsonl"))):
    for k, line in enumerate(open(path, encoding="utf-8")):
        r = json.loads(line)
        prompt = "%s/prompt.%s.%d" % (tmp, os.path.basename(path), k)
        open(prompt, "w", encoding="utf-8").write(r["prompt"])
        if "file" in r: model = ["file", os.path.join(shared, r["file"])]
        else: model = ["golden-" + "-".join(a.strip("-") for a in r["synth_gguf_args"])] + r["synth_gguf_args"]
        print("\t".join([prompt, json.dumps(r["prompt_ids"])] + model))
EOF
while IFS=$'\t' read -r prompt want kind rest; do
    if [ "$kind" = file ]; then model=$rest
    else
        # shellcheck disable=SC2086
        model=$(synth_model "$kind" $(echo "$rest" | tr '\t' ' ')) || { bad "synth-gguf $rest"; continue; }
    fi
    got=$("$NUCLEUS" tokenize -m "$model" -f "$prompt" --json 2>&1)
    if [ "$got" = "$want" ]; then ok; else bad "$(basename "$prompt") '$(cat "$prompt")': got $got, want $want"; fi
done <"$tmp/golden"

# tokenizer.json (file or directory) against the GGUF synth-gguf builds from it, line by line.
corpus=tests/data/multilingual.txt
smol_gguf=$(synth_model smollm2-135m-q8_0-l1 --shape smollm2-135m --layers 1 --type q8_0) || bad "synth-gguf smollm2"
smol_json=$SHARED/vocab/smollm2-135m-instruct/tokenizer.json
for flags in "--no-bos" "--special"; do
    # shellcheck disable=SC2086
    "$NUCLEUS" tokenize -m "$smol_gguf" -f "$corpus" --lines --json $flags >"$tmp/gguf.ids" 2>&1
    # shellcheck disable=SC2086
    "$NUCLEUS" tokenize -m "$smol_json" -f "$corpus" --lines --json $flags >"$tmp/json.ids" 2>&1
    # shellcheck disable=SC2086
    "$NUCLEUS" tokenize -m "$(dirname "$smol_json")" -f "$corpus" --lines --json $flags >"$tmp/dir.ids" 2>&1
    lines=$(wc -l <"$tmp/gguf.ids")
    if [ "$lines" -ge 200 ] && cmp -s "$tmp/gguf.ids" "$tmp/json.ids" && cmp -s "$tmp/json.ids" "$tmp/dir.ids"; then ok
    else bad "smollm2 tokenizer.json vs GGUF ($flags): $(diff "$tmp/gguf.ids" "$tmp/json.ids" | head -4)"; fi
done

# The command: vocab-only files of other architectures, --special, errors.
got=$("$NUCLEUS" tokenize -m "$SHARED/vocab/falcon/ggml-vocab-falcon.gguf" -p "Hello" 2>&1) && [ -n "$got" ] && ok || bad "falcon (architecture falcon): $got"
got=$("$NUCLEUS" tokenize -m "$SHARED/vocab/qwen2/ggml-vocab-qwen2.gguf" -p "<|im_start|>hi<|im_end|>" --special 2>&1)
[ "$got" = "151644 6023 151645" ] && ok || bad "qwen2 --special: $got"
got=$("$NUCLEUS" tokenize -m "$SHARED/vocab/qwen2/ggml-vocab-qwen2.gguf" -p "<|im_start|>" --no-bos 2>&1)
[ "$got" != "151644" ] && ok || bad "qwen2 without --special parsed <|im_start|>"
printf '{"model": {"type": "Unigram"}}' >"$tmp/bad.json"
got=$("$NUCLEUS" tokenize -m "$tmp/bad.json" -p x 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $got == *"'Unigram' is not supported"* ]] && ok || bad "unsupported tokenizer.json: rc $rc: $got"
got=$("$NUCLEUS" tokenize -m "$tmp" -p x 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $got == *"no tokenizer.json or tokenizer.model"* ]] && ok || bad "directory without a tokenizer: rc $rc: $got"

echo "tokenizer: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
