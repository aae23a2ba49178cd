#!/usr/bin/env bash
# The chat formats of today's models end to end, with the official OpenAI client
# (tests/node_server/chat_formats.test.mjs): one small model (qwen2's random weights, a byte-level
# vocabulary that can write any marker) served with each real template of a family
# (tests/data/templates, --chat-template), replies steered by a grammar into the family's own
# reasoning and call syntax; message.reasoning_content, message.tool_calls and the streamed
# deltas must equal the whole reply's, and the calls fed back must render through the template.
# Also: --reasoning-budget, chat_template_kwargs, reasoning_effort, POST /apply-template, the
# fields other servers' clients send, a reply cut inside its calls, and response_format schemas
# as pydantic and zod write them (judged by ajv). Every server runs sanitized and must stop
# cleanly. Ends with "chat_formats: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
. tests/lib/checks.sh
finish() { echo "chat_formats: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    bad "node and npm are needed (Debian: apt-get install nodejs npm)"
    finish
fi
if [ ! -d tests/node_server/node_modules/ajv-formats ]; then
    (cd tests/node_server && npm ci --no-audit --no-fund --loglevel=error) || { bad "npm ci in tests/node_server failed"; finish; }
fi
. tests/lib/server_script.sh

MODEL="$SHARED/archs/qwen2/qwen2-f16.gguf"
T=tests/data/templates
# NAME FAMILY TEMPLATE [ARGS...]
families=(
    "qwen3 qwen3 Qwen-Qwen3-0.6B"
    "qwen35 qwen3.5 Qwen3.5-4B"
    "qwen35_budget qwen3.5 Qwen3.5-4B --reasoning-budget 5"
    "dsv32 deepseek-v3.2 deepseek-ai-DeepSeek-V3.2"
    "kimi kimi-k2 moonshotai-Kimi-K2"
    "glm glm-4.6 GLM-4.6"
    "minimax minimax-m2 MiniMax-M2"
    "seed seed-oss ByteDance-Seed-OSS"
    "gptoss gpt-oss openai-gpt-oss-120b"
    "ministral magistral mistralai-Ministral-3-14B-Reasoning-2512"
    "mistral32 mistral-small-3.2 Mistral-Small-3.2-24B-Instruct-2506"
    "functionary functionary-v3.1 meetkai-functionary-medium-v3.1"
    "commandr command-r7b CohereForAI-c4ai-command-r7b-12-2024-tool_use"
    "nemotron nemotron-v2 NVIDIA-Nemotron-Nano-v2"
    "granite granite-3.3 ibm-granite-granite-3.3-2B-Instruct"
    "apertus apertus Apertus-8B-Instruct"
    "llama31 llama3 meta-llama-Llama-3.1-8B-Instruct"
    "solar solar-open upstage-Solar-Open-100B"
    "gigachat3 gigachat-3 GigaChat3-10B-A1.8B"
    "commandrplus command-r-plus CohereForAI-c4ai-command-r-plus-tool_use"
    "lfm2 lfm2 LFM2-8B-A1B"
    "lfm25 lfm2.5 LFM2.5-Instruct"
    "functionary32 functionary-v3.2 meetkai-functionary-medium-v3.2"
)
for f in "${families[@]}"; do
    set -- $f
    name=$1 tpl=$3
    shift 3
    launch_server "$name" -m "$MODEL" --parallel 1 -c 4096 -t 1 --chat-template "$T/$tpl.jinja" "$@"
done
servers="["
names=()
for f in "${families[@]}"; do
    set -- $f
    name=$1 family=$2 tpl=$3
    await_server "$name" || continue
    names+=("$name")
    url_var="url_$name"
    servers+="$([ "$servers" = "[" ] || echo ,){\"name\":\"$name\",\"family\":\"$family\",\"template\":\"$tpl\",\"url\":\"${!url_var}\"}"
done
servers+="]"

NUCLEUS_SERVERS=$servers node --test --test-reporter=tap --test-timeout=300000 tests/node_server/chat_formats.test.mjs \
    >"$tmp/node.tap" 2>&1
count_tap "$tmp/node.tap"
for name in "${names[@]}"; do stop_server "$name"; done
finish
