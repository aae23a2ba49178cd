#!/usr/bin/env bash
# The APIs agents speak, through their official clients (tests/node_server/apis.test.mjs, node's
# test runner): OpenAI's chat, completions and Responses (whole, streamed, the SDK's stream
# helper, a tool round trip, reasoning items, refusals) with `openai`, Anthropic's Messages
# (whole and streamed, usage and countTokens, stop_sequences, a tool use round trip, thinking
# blocks, errors in Anthropic's shape, x-api-key) with `@anthropic-ai/sdk`, and llama.cpp's
# /completion, /infill, /props and /slots, all against one sanitized router serving three shared
# models as five presets (and stories260K given fill-in-the-middle tokens, tests/e2e/fim_model.py) (--models FILE, --api-key). The router must then stop cleanly with no
# sanitizer report. Ends with "apis: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
. tests/lib/checks.sh
finish() { echo "apis: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    bad "node and npm are needed (Debian: apt-get install nodejs npm)"
    finish
fi
if [ ! -d tests/node_server/node_modules/@anthropic-ai/sdk ]; then
    (cd tests/node_server && npm ci --no-audit --no-fund --loglevel=error) || { bad "npm ci in tests/node_server failed"; finish; }
fi
. tests/lib/server_script.sh
export NUCLEUS_CACHE=$tmp/cache # router mode serves the download cache's models too: none here
# stories260K with fill-in-the-middle tokens, for /infill
coder=$tmp/stories260K-fim.gguf
python3 tests/e2e/fim_model.py "$SHARED/models/stories260K/stories260K.gguf" "$coder" || { bad "cannot write $coder"; finish; }

T=$PWD/tests/data/templates
cat >"$tmp/models.ini" <<EOF
[*]
parallel = 2
ctx-size = 2048
[stories]
model = $SHARED/models/stories260K/stories260K.gguf
[qwen3]
model = $SHARED/archs/qwen2/qwen2-f16.gguf
chat-template-file = $T/Qwen-Qwen3-0.6B.jinja
[qwen35]
model = $SHARED/archs/llama3/llama3-f16.gguf
chat-template-file = $T/Qwen3.5-4B.jinja
[llama3]
model = $SHARED/archs/llama3/llama3-f16.gguf
[coder]
model = $coder
EOF
key=apis-key-$$
start_server router --models "$tmp/models.ini" -t 1 --api-key "$key" || finish

NUCLEUS_URL=$url_router NUCLEUS_KEY=$key \
    node --test --test-reporter=tap --test-timeout=180000 tests/node_server/apis.test.mjs >"$tmp/node.tap" 2>&1
count_tap "$tmp/node.tap"
stop_server router
finish
