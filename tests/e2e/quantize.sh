#!/usr/bin/env bash
# End-to-end checks of `nucleus quantize` against llama.cpp's llama-quantize output of the same
# source (sanitized build):
# - Q4_1, Q5_0, Q5_1 of shared/quants/tiny-k-f16.gguf: every tensor but output.weight (Q6_K, whose
#   scales come from a search) bit for bit the tensor of llama-quantize's file in shared/quants,
#   and `nucleus inspect` of both files identical (metadata, tensor order, types, offsets);
# - Q3_K_S, Q3_K_M, Q4_K_S, Q5_K_S, Q5_K_M (and every Q6_K output): the same types per tensor, each tensor's
#   relative RMS error at most 1.05 x that of llama-quantize's tensor; mean KL divergence of the
#   next-token distributions from the F16 model's at most 1.25 x that of llama-quantize's file;
#   greedy log-probabilities within 0.05 + the deviation of llama-quantize's file (its golden
#   records) of the F16 model's exact ones;
# - stories260K (F32, rows of 64 and 172): Q4_K_M falls back per tensor as llama-quantize does
#   (the whole file identical to the one it made), Q4_0 is refused naming the tensor;
# - with a local llama-quantize ($LLAMA_QUANTIZE; absent in CI, then skipped and said so): Q8_0,
#   Q4_0, Q3_K_L, Q4_K_M, Q6_K, F16 of tiny-k compared the same way (Q8_0, F16: the whole file identical);
# - the options (--pure, --output-tensor-type, --token-embedding-type, --allow-requantize,
#   threads), the progress lines, and clean refusals of bad input.
# Ends with "quantize: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
BIN=${NUCLEUS_BIN:-build/san/nucleus}
Q=$SHARED/quants
F16=$Q/tiny-k-f16.gguf
STORIES=$SHARED/models/stories260K/stories260K.gguf
LLAMA_QUANTIZE=${LLAMA_QUANTIZE:-}
. tests/lib/checks.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

cmp_tool=$tmp/quant_compare
if ! ${CC:-cc} -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Iinclude -Isrc -O2 -o "$cmp_tool" \
        tests/tools/quant_compare.c src/common.c src/format/*.c src/tensor/quant.c src/tensor/quant_k.c -lm -lcjson; then
    echo "quantize: cannot build quant_compare"; echo "quantize: 0 passed, 1 failed"; exit 1
fi

quantize() { # SRC OUT TYPE [options]: quietly, failing the check on an error
    "$BIN" quantize "$@" -t 2 2>"$tmp/log" || { bad "quantize $*: $(tail -n 3 "$tmp/log")"; return 1; }
}

# compare TYPE OURS THEIRS SOURCE EXACT: the per-tensor checks (EXACT: bytes equal but for Q6_K).
compare() {
    local what=$1 ours=$2 theirs=$3 src=$4 exact=$5
    "$cmp_tool" "$src" "$ours" "$theirs" >"$tmp/cmp" || { bad "$what: quant_compare failed"; return; }
    local r
    r=$(awk -v exact="$exact" '
        /^files:/ { if ($2 != 1) print "the tensor tables differ (names, order, types or shapes)"; next }
        NF != 6 { print $0; next }
        $2 != $3 { print $1 ": type " $2 ", llama-quantize " $3; next }
        exact && $2 != "Q6_K" && $4 != 1 { print $1 " (" $2 "): bytes differ" }
        $5 > $6 * 1.05 + 1e-9 { print $1 " (" $2 "): relative RMS error " $5 " > 1.05 x " $6 }
    ' "$tmp/cmp")
    [ -z "$r" ] && ok || bad "$what vs llama-quantize: $r"
}

# -h answers and lists the types.
out=$("$BIN" quantize -h 2>&1); rc=$?
expect_eq "quantize -h exit status" "$rc" 0
for word in "usage: nucleus quantize" Q4_K_M Q5_K_S Q6_K Q8_0 --allow-requantize --pure --output-tensor-type \
            --token-embedding-type; do expect_in "quantize -h" "$word" "$out"; done
expect_in "nucleus -h lists quantize" "quantize" "$("$BIN" -h)"

# The types llama-quantize's files in shared/quants were made with.
for t in q4_1 q5_0 q5_1; do
    quantize "$F16" "$tmp/$t.gguf" "$t" || continue
    compare "$t" "$tmp/$t.gguf" "$Q/tiny-k-$t.gguf" "$F16" 1
    expect_eq "$t: inspect equals llama-quantize's file's" "$("$BIN" inspect "$tmp/$t.gguf" | tail -n +2)" \
        "$("$BIN" inspect "$Q/tiny-k-$t.gguf" | tail -n +2)"
done
for t in q3_k_s q3_k_m q4_k_s q5_k_s q5_k_m; do
    quantize "$F16" "$tmp/$t.gguf" "$(tr a-z A-Z <<<"$t")" || continue
    compare "$t" "$tmp/$t.gguf" "$Q/tiny-k-$t.gguf" "$F16" 0
    # same types and sizes, so the same offsets: only the data differs
    expect_eq "$t: inspect equals llama-quantize's file's" "$("$BIN" inspect "$tmp/$t.gguf" | tail -n +2)" \
        "$("$BIN" inspect "$Q/tiny-k-$t.gguf" | tail -n +2)"
done

# Quality: mean KL divergence from the F16 model over a fixed text, ours against theirs.
files=(); for t in q4_1 q5_0 q5_1 q3_k_s q3_k_m q4_k_s q5_k_s q5_k_m; do files+=("$tmp/$t.gguf" "$Q/tiny-k-$t.gguf"); done
if /usr/bin/python3 tests/tools/kl_divergence.py --nucleus "$BIN" --base "$F16" --text bench/data/stories.txt \
        --tokens 96 "${files[@]}" >"$tmp/kl" 2>"$tmp/kl.err"; then
    r=$(awk 'NR % 2 == 1 { ours = $2; name = $1 } NR % 2 == 0 && ours > $2 * 1.25 + 1e-4 {
             print name ": KL " ours " > 1.25 x " $2 " (llama-quantize)" }' "$tmp/kl")
    [ -z "$r" ] && ok || bad "KL divergence: $r"
else
    bad "kl_divergence.py: $(tail -n 3 "$tmp/kl.err")"
fi

# Golden records: teacher-forced log-probabilities of our file along the F16 model's greedy path,
# against the F16 model's exact ones; llama-quantize's file of the type is as far from them as its
# own exact records say (over the steps where its greedy path is still the F16 model's). Ours must
# be no farther on average than 1.25 x that + 0.02, and at worst 1.5 x + 0.05 (two roundings of
# random weights differ by chance: these bounds are what separates a sound quantiser from a
# broken one, which is farther by a factor of 3 or more).
/usr/bin/python3 - "$BIN" "$Q" "$tmp" q4_1 q5_0 q5_1 q3_k_s q3_k_m q4_k_s q5_k_s q5_k_m >"$tmp/golden" 2>&1 <<'PY'
import json, subprocess, sys
binary, q, tmp = sys.argv[1:4]
def records(name): return [json.loads(l) for l in open("%s/tiny-k-%s.jsonl" % (q, name))]
def devs(a, b):  # per step, the largest difference of the log-probabilities both steps list
    out = []
    for sa, sb in zip(a, b):
        db = dict((t, lp) for t, lp in sb)
        out.append(max([0.0] + [abs(lp - db[t]) for t, lp in sa if t in db]))
    return out
f16 = records("f16")
for t in sys.argv[4:]:
    theirs = records(t)
    for i, rec in enumerate(f16):
        n = 0
        while n < len(rec["ids"]) and theirs[i]["ids"][n] == rec["ids"][n]: n += 1
        ids = rec["prompt_ids"] + rec["ids"][:-1]
        out = subprocess.run([binary, "score", "-m", "%s/%s.gguf" % (tmp, t), "--ids", ",".join(map(str, ids)),
                              "--all", "--top", "5", "-t", "2"], capture_output=True, text=True, check=True).stdout
        ours = devs(rec["top_logprobs"], json.loads(out)["top_logprobs"][len(rec["prompt_ids"]) - 1:])[:n + 1]
        them = devs(rec["top_logprobs"], theirs[i]["top_logprobs"])[:n + 1]
        mo, mt = sum(ours) / len(ours), sum(them) / len(them)
        good = mo <= 1.25 * mt + 0.02 and max(ours) <= 1.5 * max(them) + 0.05
        print("%s record %d, %d steps: mean %.4f max %.4f, llama-quantize's mean %.4f max %.4f %s"
              % (t, i, len(ours), mo, max(ours), mt, max(them), "ok" if good else "FAIL"))
PY
r=$(grep -v " ok$" "$tmp/golden")
[ -z "$r" ] && [ -s "$tmp/golden" ] && ok || bad "golden log-probabilities: $r"

# A real F32 model whose rows (64, 172) no K-quant block fits: each tensor falls back as
# llama-quantize's does (Q4_K -> Q5_0, Q6_K -> Q8_0, rows of 172 -> F16), the file identical to the
# one it made (its size and the F16 fallback checked here; the bytes with a local llama-quantize).
if quantize "$STORIES" "$tmp/s.gguf" Q4_K_M; then
    expect_in "stories260K Q4_K_M: fallback reported" "(row length: fallback)" "$(cat "$tmp/log")"
    expect_in "stories260K Q4_K_M: ffn_down F16" "blk.0.ffn_down.weight     F16" "$("$BIN" inspect "$tmp/s.gguf")"
    expect_eq "stories260K Q4_K_M: size (llama-quantize's file: 304096 bytes)" "$(stat -c %s "$tmp/s.gguf")" 304096
fi
expect_err "Q4_0 with rows of 172" "tensor 'blk.0.ffn_down.weight' has rows of 172 weights, not a multiple of Q4_0's block of 32" \
    "$BIN" quantize "$STORIES" "$tmp/s0.gguf" Q4_0
[ ! -e "$tmp/s0.gguf" ] && ok || bad "a refused quantisation left its output behind"

# With llama-quantize at hand: the types shared/quants lacks, made here by it from the same file.
if [ -n "$LLAMA_QUANTIZE" ] && [ -x "$LLAMA_QUANTIZE" ]; then
    for t in Q8_0 Q4_0 Q3_K_L Q4_K_M Q6_K F16; do
        "$LLAMA_QUANTIZE" "$F16" "$tmp/ref-$t.gguf" "$t" 2 >/dev/null 2>&1 || { bad "llama-quantize $t failed"; continue; }
        quantize "$F16" "$tmp/$t.gguf" "$t" || continue
        compare "$t" "$tmp/$t.gguf" "$tmp/ref-$t.gguf" "$F16" "$([ "${t#Q*_}" = 0 ] && echo 1 || echo 0)"
    done
    for t in Q8_0 F16; do cmp -s "$tmp/$t.gguf" "$tmp/ref-$t.gguf" && ok || bad "$t file differs from llama-quantize's"; done
    "$LLAMA_QUANTIZE" "$STORIES" "$tmp/s-ref.gguf" Q4_K_M 2 >/dev/null 2>&1
    cmp -s "$tmp/s.gguf" "$tmp/s-ref.gguf" && ok || bad "stories260K Q4_K_M differs from llama-quantize's"
else
    echo "note: LLAMA_QUANTIZE not set: Q8_0, Q4_0, Q3_K_L, Q4_K_M, Q6_K, F16 not compared with llama-quantize's files here"
fi

# Options. --pure: every matrix Q4_K, output too; the overrides set those two tensors only.
if quantize "$F16" "$tmp/pure.gguf" Q4_K_M --pure; then
    n=$("$BIN" inspect "$tmp/pure.gguf" | grep -cE '^  [a-z0-9_.]+ +Q4_K ')
    expect_eq "--pure: every quantised tensor Q4_K" "$n" 16
fi
if quantize "$F16" "$tmp/ov.gguf" Q4_0 --output-tensor-type q8_0 --token-embedding-type Q5_1; then
    out=$("$BIN" inspect "$tmp/ov.gguf")
    expect_in "--output-tensor-type" "output.weight             Q8_0" "$out"
    expect_in "--token-embedding-type" "token_embd.weight         Q5_1" "$out"
    expect_in "Q4_0 elsewhere" "blk.1.ffn_up.weight       Q4_0" "$out"
    expect_in "general.file_type of Q4_0" "general.file_type                       uint32   2" "$out"
fi
# Our files run: greedy text from the Q4_K_S file.
out=$("$BIN" run -m "$tmp/q4_k_s.gguf" -p "Once upon a time" -n 8 --temp 0 2>"$tmp/run.err"); rc=$?
[ $rc -eq 0 ] && [ -n "$out" ] && ok || bad "run on our Q4_K_S file: rc=$rc $(tail -n 2 "$tmp/run.err")"
# Threads change nothing; the non-terminal progress is one line per tensor and a summary.
"$BIN" quantize "$F16" "$tmp/t1.gguf" Q5_K_M 1 2>"$tmp/log1"
cmp -s "$tmp/t1.gguf" "$tmp/q5_k_m.gguf" && ok || bad "1 thread and 2 threads gave different files"
expect_eq "progress lines" "$(grep -c '^\[ *[0-9]*/ *21\] ' "$tmp/log1")" 21
expect_in "progress line" "blk.1.ffn_down.weight            [768, 256]             F16   -> Q6_K" "$(cat "$tmp/log1")"
expect_in "summary" "21 tensors, 16 quantised; 4.00 MiB -> 1.44 MiB" "$(cat "$tmp/log1")"
# F16 to F16: tensors copied, the file type recorded.
if quantize "$F16" "$tmp/f16.gguf" F16; then
    expect_in "F16 -> F16 file type" "general.file_type                       uint32   1" "$("$BIN" inspect "$tmp/f16.gguf")"
    # llama-quantize's F16 file of it: the same tensors, general.quantization_version added (32 bytes)
    expect_eq "F16 -> F16 size (llama-quantize's: 4227936)" "$(stat -c %s "$tmp/f16.gguf")" 4227936
fi
# Requantising needs the flag; with it the Q4_1 file becomes Q8_0 (Q4_1's values, requantised).
expect_err "quantised input" "tensor 'output.weight' is already quantised (Q6_K); requantising loses quality: pass --allow-requantize" \
    "$BIN" quantize "$Q/tiny-k-q4_1.gguf" "$tmp/rq.gguf" Q8_0
if quantize "$Q/tiny-k-q4_1.gguf" "$tmp/rq.gguf" Q8_0 --allow-requantize; then
    "$cmp_tool" "$Q/tiny-k-q4_1.gguf" "$tmp/rq.gguf" "$tmp/rq.gguf" >"$tmp/cmp"
    r=$(awk 'NF == 6 && $2 == "Q8_0" && $5 > 0.01 { print $1 ": " $5 }' "$tmp/cmp")
    [ -z "$r" ] && grep -q ' Q8_0 ' "$tmp/cmp" && ok || bad "requantised Q4_1 -> Q8_0 far from the Q4_1 values: $r"
fi

# Refusals.
expect_err "no arguments" "expected INPUT OUTPUT TYPE" "$BIN" quantize
expect_err "unknown type" "unknown type 'Q3_X'; valid types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K" \
    "$BIN" quantize "$F16" "$tmp/x.gguf" Q3_X
expect_err "unknown tensor type" "--output-tensor-type: unknown tensor type 'q9'" "$BIN" quantize --output-tensor-type q9 "$F16" "$tmp/x.gguf" Q4_0
expect_err "unknown option" "unknown option '--imatrix'" "$BIN" quantize --imatrix x "$F16" "$tmp/x.gguf" Q4_0
expect_err "bad threads" "THREADS" "$BIN" quantize "$F16" "$tmp/x.gguf" Q4_0 zero
expect_err "missing input" "nope.gguf" "$BIN" quantize "$tmp/nope.gguf" "$tmp/x.gguf" Q4_0
expect_err "not a GGUF file" "not a GGUF file" "$BIN" quantize bench/data/stories.txt "$tmp/x.gguf" Q4_0
mkdir -p "$tmp/dir"
expect_err "directory input" "config.json" "$BIN" quantize "$tmp/dir" "$tmp/x.gguf" Q8_0 # (a model directory: quantize_hf.sh)
expect_err "unwritable output" "cannot write $tmp/no/such/dir/x.gguf" "$BIN" quantize "$F16" "$tmp/no/such/dir/x.gguf" Q4_0
cp "$F16" "$tmp/same.gguf"; ln -s "$tmp/same.gguf" "$tmp/link.gguf"
expect_err "output is the input" "is the input file" "$BIN" quantize "$tmp/same.gguf" "$tmp/link.gguf" Q4_0
expect_eq "the input is left intact" "$(cmp -s "$tmp/same.gguf" "$F16" && echo same)" same
# A NaN in the weights (an F16 0x7E00 written into row 3 of blk.0.attn_q.weight) is refused, as
# llama-quantize's data validation refuses it, naming the tensor and the row.
cp "$F16" "$tmp/nan.gguf"; chmod u+w "$tmp/nan.gguf"
off=$("$BIN" inspect "$tmp/nan.gguf" | awk '$1 == "blk.0.attn_q.weight" { print $NF }')
printf '\x00\x7e' | dd of="$tmp/nan.gguf" bs=1 seek=$((off + 2 * 256 * 3 + 10)) conv=notrunc 2>/dev/null
expect_err "NaN in the weights" "tensor 'blk.0.attn_q.weight', row 3: a NaN or infinite value" \
    "$BIN" quantize "$tmp/nan.gguf" "$tmp/x.gguf" Q4_K_M
[ ! -e "$tmp/x.gguf" ] && ok || bad "a refused quantisation left $tmp/x.gguf behind"

echo "quantize: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
