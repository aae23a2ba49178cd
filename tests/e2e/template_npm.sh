#!/usr/bin/env bash
# Chat templates against the reference renderers: every real template shipped in the npm tokenizer
# packages of tests/node_jinja (plus a few fixture templates and our ChatML fallback) is rendered
# over the conversations of tests/node_jinja/conversations.json by @huggingface/jinja, by Python
# Jinja2 with transformers' settings when python3 has jinja2, and by our engine (the
# tests/tools/render_template driver, built here with sanitizers); outputs must match byte for
# byte, errors must match errors. Installs the node packages first when they are missing.
set -u
cd "$(dirname "$0")/../.."
dir=tests/node_jinja
fail() { echo "$1"; echo "template_npm: 0 passed, 1 failed"; exit 1; }

if [ ! -d "$dir/node_modules" ]; then
    (cd "$dir" && npm ci --no-audit --no-fund >/dev/null 2>&1) || fail "template_npm: npm ci in $dir failed"
fi

bin=build/tools/render_template
mkdir -p build/tools
cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Iinclude -Isrc -O1 -g -fsanitize=address,undefined \
    -fno-sanitize-recover=undefined tests/tools/render_template.c src/common.c src/template/*.c \
    -lcjson -lm -o "$bin" || fail "template_npm: cannot build $bin"

node "$dir/compare.mjs" "$bin"
