/* The tables of reasoning styles and call syntaxes, and the detection of a template's. */
#include "server/chat_format.h"

#include <stddef.h>
#include <string.h>

/* ---- Reasoning ----------------------------------------------------------------------------- */

typedef struct reasoning_entry {
    const char *needs;  /* the template's text holds this */
    srv_reasoning_style style;
} reasoning_entry;

/* Most specific first: a template of one family may quote another's markers (rwkv-world writes
 * <think> too, harmony templates never do). */
static const reasoning_entry REASONING[] = {
    /* gpt-oss: the analysis channel, to the end of its message */
    {"<|channel|>", {"harmony", "<|channel|>analysis<|message|>", "<|end|>", "thinking", true}},
    {"<seed:think>", {"seed-oss", "<seed:think>", "</seed:think>", "reasoning_content", false}},
    /* Magistral, Ministral 3 Reasoning */
    {"[THINK]", {"mistral", "[THINK]", "[/THINK]", "reasoning_content", false}},
    {"<|START_THINKING|>", {"command-r7b", "<|START_THINKING|>", "<|END_THINKING|>", "reasoning_content", false}},
    /* Gemma 4: the thought channel */
    {"<|channel>thought", {"gemma4", "<|channel>thought", "<channel|>", "reasoning_content", false}},
    /* Qwen3 / 3.5, QwQ, DeepSeek R1 / V3.1 / V3.2, GLM 4.5 - 4.7, Kimi-K2-Thinking, SmolLM3,
       MiniMax-M2, Nemotron, Step 3.5 ... */
    {"</think>", {"think", "<think>", "</think>", "reasoning_content", false}},
};

/* ---- Calls --------------------------------------------------------------------------------- */

typedef struct call_entry {
    const char *needs[2];     /* the template's text holds both (NULL: nothing more) */
    srv_call_syntax syntax;
} call_entry;

#define JSON_CALL .name_key = "name", .args_key = "arguments"

/* Most specific first: several families open their calls with <tool_call> or [TOOL_CALLS]. */
static const call_entry CALLS[] = {
    {{"<|channel|>", "functions."}, {.name = "harmony", .kind = SRV_CALLS_HARMONY, .one_call = true}},
    /* Functionary v3.2: its prompt ends with >>>, the reply opens with "all\n" and text or with a
       call's NAME\n{...}; further calls >>>NAME\n{...} */
    {{">>>all", NULL},
     {.name = "functionary-v3.2", .kind = SRV_CALLS_NAMED, .call_open = ">>>", .name_end = "\n",
      .text_recipient = "all", .args_text = true}},
    /* LFM2 (<|tool_list_start|>), LFM2.5: Python calls */
    {{"List of tools:", NULL},
     {.name = "lfm2", .kind = SRV_CALLS_PYTHONIC, .section_open = "<|tool_call_start|>",
      .section_close = "<|tool_call_end|>"}},
    {{"<|tool_calls_section_begin|>", NULL},
     {.name = "kimi-k2", .kind = SRV_CALLS_NAMED, .section_open = "<|tool_calls_section_begin|>",
      .section_close = "<|tool_calls_section_end|>", .call_open = "<|tool_call_begin|>functions.",
      .name_end = ":*<|tool_call_argument_begin|>", .call_close = "<|tool_call_end|>"}},
    {{"DSML", "function_calls"},
     {.name = "deepseek-v3.2", .kind = SRV_CALLS_NAMED, .section_open = "\n\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "function_calls>\n",
      .section_close = "</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "function_calls>",
      .call_open = "<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "invoke name=\"", .name_end = "\">\n",
      .call_close = "</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "invoke>\n",
      .param_open = "<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "parameter name=\"", .param_name_end = "\" string=\"*\">",
      .param_close = "</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "parameter>\n"}},
    /* R1 writes the call's type, a newline and a fenced JSON block */
    {{"<\xef\xbd\x9c" "tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>", "```json"},
     {.name = "deepseek-r1", .kind = SRV_CALLS_NAMED,
      .section_open = "<\xef\xbd\x9c" "tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
      .section_close = "<\xef\xbd\x9c" "tool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>",
      .call_open = "<\xef\xbd\x9c" "tool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>function<\xef\xbd\x9c" "tool\xe2\x96\x81" "sep\xef\xbd\x9c>",
      .name_end = "\n```json\n", .call_close = "\n```<\xef\xbd\x9c" "tool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"}},
    {{"<\xef\xbd\x9c" "tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>", NULL},
     {.name = "deepseek-v3.1", .kind = SRV_CALLS_NAMED,
      .section_open = "<\xef\xbd\x9c" "tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
      .section_close = "<\xef\xbd\x9c" "tool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>",
      .call_open = "<\xef\xbd\x9c" "tool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>",
      .name_end = "<\xef\xbd\x9c" "tool\xe2\x96\x81" "sep\xef\xbd\x9c>",
      .call_close = "<\xef\xbd\x9c" "tool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"}},
    {{"<minimax:tool_call>", NULL},
     {.name = "minimax-m2", .kind = SRV_CALLS_NAMED, .section_open = "<minimax:tool_call>\n",
      .section_close = "</minimax:tool_call>", .call_open = "<invoke name=\"", .name_end = "\">\n",
      .call_close = "</invoke>\n", .param_open = "<parameter name=\"", .param_name_end = "\">",
      .param_close = "</parameter>\n"}},
    {{"<seed:tool_call>", NULL},
     {.name = "seed-oss", .kind = SRV_CALLS_NAMED, .call_open = "<seed:tool_call>\n<function=", .name_end = ">\n",
      .call_close = "</function>\n</seed:tool_call>", .param_open = "<parameter=", .param_name_end = ">",
      .param_close = "</parameter>\n"}},
    /* GLM 4.5 - 4.7 */
    {{"<arg_key>", NULL},
     {.name = "glm-4.5", .kind = SRV_CALLS_NAMED, .call_open = "<tool_call>", .name_end = "\n",
      .call_close = "</tool_call>", .param_open = "<arg_key>", .param_name_end = "</arg_key>\n<arg_value>",
      .param_close = "</arg_value>\n"}},
    /* Qwen3-Coder, Qwen3.5, Nemotron 3 Nano, Step 3.5 */
    {{"<function=", "<parameter="},
     {.name = "qwen3-coder", .kind = SRV_CALLS_NAMED, .call_open = "<tool_call>\n<function=", .name_end = ">\n",
      .call_close = "</function>\n</tool_call>", .param_open = "<parameter=", .param_name_end = ">\n",
      .param_close = "\n</parameter>\n"}},
    /* Functionary v3.1 (Llama 3.1's <function=NAME>{...}</function>) */
    {{"<function=", "</function>"},
     {.name = "functionary-v3.1", .kind = SRV_CALLS_NAMED, .call_open = "<function=", .name_end = ">",
      .call_close = "</function>"}},
    /* Mistral Small 3.2: the call's id between its name and arguments */
    {{"[TOOL_CALLS]", "[CALL_ID]"},
     {.name = "mistral-small-3.2", .kind = SRV_CALLS_NAMED, .call_open = "[TOOL_CALLS]", .name_end = "[CALL_ID]*[ARGS]",
      .short_ids = true}},
    /* Magistral, Ministral 3, Devstral */
    {{"[TOOL_CALLS]", "[ARGS]"},
     {.name = "magistral", .kind = SRV_CALLS_NAMED, .call_open = "[TOOL_CALLS]", .name_end = "[ARGS]", .short_ids = true}},
    /* Mistral's v3 tokenizer: Mistral 7B v0.3, Nemo, Small 3.1 */
    {{"[TOOL_CALLS]", NULL},
     {.name = "mistral", .kind = SRV_CALLS_JSON_LIST, .section_open = "[TOOL_CALLS]", JSON_CALL, .short_ids = true}},
    {{"<|START_ACTION|>", NULL},
     {.name = "command-r7b", .kind = SRV_CALLS_JSON_LIST, .section_open = "<|START_ACTION|>",
      .section_close = "<|END_ACTION|>", .name_key = "tool_name", .args_key = "parameters"}},
    /* Command R+: a fenced JSON list after "Action:" */
    {{"Action:", "\"tool_name\""},
     {.name = "command-r-plus", .kind = SRV_CALLS_JSON_LIST, .section_open = "Action:\n```json\n",
      .section_close = "```", .name_key = "tool_name", .args_key = "parameters"}},
    {{"<TOOLCALL>", NULL},
     {.name = "nemotron-v2", .kind = SRV_CALLS_JSON_LIST, .section_open = "<TOOLCALL>", .section_close = "</TOOLCALL>",
      JSON_CALL}},
    {{"<tool_calls>", NULL},
     {.name = "apriel", .kind = SRV_CALLS_JSON_LIST, .section_open = "<tool_calls>", .section_close = "</tool_calls>",
      JSON_CALL}},
    {{"<|tool_call|>", NULL},
     {.name = "granite-3.3", .kind = SRV_CALLS_JSON_LIST, .section_open = "<|tool_call|>", JSON_CALL}},
    {{"<|tools_prefix|>", NULL},
     {.name = "apertus", .kind = SRV_CALLS_JSON_LIST, .section_open = "<|tools_prefix|>",
      .section_close = "<|tools_suffix|>", .name_key = NULL, .args_key = NULL}},
    {{"functools[", NULL},
     {.name = "firefunction-v2", .kind = SRV_CALLS_JSON_LIST, .section_open = " functools", JSON_CALL}},
    {{"<|tool_call:begin|>", NULL},
     {.name = "solar-open", .kind = SRV_CALLS_NAMED, .section_open = "<|tool_calls|>", .section_close = "<|calls|>",
      .call_open = "<|tool_call:begin|>*<|tool_call:name|>", .name_end = "<|tool_call:args|>",
      .call_close = "<|tool_call:end|>"}},
    {{"<|function_call|>", NULL},
     {.name = "gigachat-3.1", .kind = SRV_CALLS_JSON_TAGGED, .call_open = "<|function_call|>", JSON_CALL,
      .one_call = true}},
    /* GigaChat 3: the call is a message of the role "function call" after the assistant's */
    {{"<|role_sep|>", "function call"},
     {.name = "gigachat-3", .kind = SRV_CALLS_JSON_TAGGED, .call_open = "<|message_sep|>\n\nfunction call<|role_sep|>\n",
      JSON_CALL, .one_call = true}},
    /* Hermes 2 Pro / 3, Qwen 2.5 / 3, QwQ, Granite 4.0, SmolLM3, MiMo ... */
    {{"<tool_call>", NULL},
     {.name = "hermes", .kind = SRV_CALLS_JSON_TAGGED, .call_open = "<tool_call>\n", .call_close = "\n</tool_call>",
      JSON_CALL}},
    {{"<|python_tag|>", NULL},
     {.name = "llama3", .kind = SRV_CALLS_JSON_BARE, .name_key = "name", .args_key = "parameters", .one_call = true}},
    /* Llama 3.x templates without the python tag: calls are JSON after the header */
    {{"<|start_header_id|>", "tools"},
     {.name = "llama3", .kind = SRV_CALLS_JSON_BARE, .name_key = "name", .args_key = "parameters", .one_call = true}},
};

static bool holds(const char *src, const char *needle) { return !needle || strstr(src, needle); }

srv_chat_format srv_chat_format_of(const char *src) {
    srv_chat_format f = {.calls = srv_call_syntax_hermes()};
    if (!src) return f;
    for (size_t i = 0; i < sizeof REASONING / sizeof *REASONING && !f.reasoning; i++)
        if (strstr(src, REASONING[i].needs)) f.reasoning = &REASONING[i].style;
    /* a template that never names `tools` cannot render them: nucleus describes them instead */
    if (!strstr(src, "tools")) return f;
    for (size_t i = 0; i < sizeof CALLS / sizeof *CALLS; i++)
        if (holds(src, CALLS[i].needs[0]) && holds(src, CALLS[i].needs[1])) {
            if (!CALLS[i].syntax.name) break;
            f.calls = &CALLS[i].syntax;
            f.template_takes_tools = true;
            break;
        }
    return f;
}

const srv_call_syntax *srv_call_syntax_hermes(void) { return srv_call_syntax_named("hermes"); }

const srv_call_syntax *srv_call_syntax_named(const char *name) {
    for (size_t i = 0; i < sizeof CALLS / sizeof *CALLS; i++)
        if (CALLS[i].syntax.name && !strcmp(CALLS[i].syntax.name, name)) return &CALLS[i].syntax;
    return NULL;
}

const srv_reasoning_style *srv_reasoning_style_named(const char *name) {
    for (size_t i = 0; i < sizeof REASONING / sizeof *REASONING; i++)
        if (!strcmp(REASONING[i].style.name, name)) return &REASONING[i].style;
    return NULL;
}
