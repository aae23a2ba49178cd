#!/usr/bin/env bash
# Structured output and tool calling end to end, with the official OpenAI client and ajv as the
# judge (tests/node_server/structured.test.mjs): response_format json_schema / json_object,
# llama.cpp's json_schema and grammar fields, tool_choice required and named (whole and
# streamed), tool results fed back, refusals naming what is not implemented.
#
# One server per shared model (every architecture's random-weight GGUF and the two trained
# ones, each with the template in its GGUF, which knows nothing of tools: nucleus describes
# them), and three with tool-taking templates of each call format nucleus parses: Hermes
# (tests/data/tool-templates/hermes.jinja on qwen2), Llama 3 (tests/node_jinja/templates/
# tools-features.jinja on llama3) and Mistral (tests/data/tool-templates/mistral.jinja on
# mixtral). Every server runs sanitized and must stop cleanly with no sanitizer report.
# Ends with "structured: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
. tests/lib/checks.sh
finish() { echo "structured: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    bad "node and npm are needed (Debian: apt-get install nodejs npm)"
    finish
fi
if [ ! -d tests/node_server/node_modules/ajv-formats ]; then
    (cd tests/node_server && npm ci --no-audit --no-fund --loglevel=error) || { bad "npm ci in tests/node_server failed"; finish; }
fi
. tests/lib/server_script.sh

servers="["
add() { # NAME MODEL [ARGS...]
    local name=$1 model=$2; shift 2
    start_server "$name" -m "$model" --parallel 1 -c 4096 -t 2 "$@" || return
    local url_var="url_$name"
    servers+="$([ "$servers" = "[" ] || echo ,){\"name\":\"$name\",\"url\":\"${!url_var}\",\"no_braces\":${NO_BRACES:-false},\"format\":\"${FORMAT:-hermes}\"}"
}
add stories260K "$SHARED/models/stories260K/stories260K.gguf"
NO_BRACES=true add tinystories "$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf"
for dir in "$SHARED"/archs/*/; do # the twelve with F16 files (what is checked here does not depend on layer kinds)
    arch=$(basename "$dir")
    [ -f "$dir/$arch-f16.gguf" ] && add "$arch" "$dir/$arch-f16.gguf"
done
add hermes "$SHARED/archs/qwen2/qwen2-f16.gguf" --chat-template tests/data/tool-templates/hermes.jinja
FORMAT=llama3 add llama3_tools "$SHARED/archs/llama3/llama3-f16.gguf" --chat-template tests/node_jinja/templates/tools-features.jinja
FORMAT=mistral add mistral "$SHARED/archs/mixtral/mixtral-f16.gguf" --chat-template tests/data/tool-templates/mistral.jinja
servers+="]"

NUCLEUS_SERVERS=$servers node --test --test-reporter=tap --test-timeout=600000 tests/node_server/structured.test.mjs \
    >"$tmp/node.tap" 2>&1
count_tap "$tmp/node.tap"
for dir in "$SHARED"/archs/*/; do
    arch=$(basename "$dir")
    [ -f "$dir/$arch-f16.gguf" ] && stop_server "$arch"
done
for name in stories260K tinystories hermes llama3_tools mistral; do stop_server "$name"; done
finish
