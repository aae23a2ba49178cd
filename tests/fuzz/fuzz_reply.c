/* libFuzzer harness for the reading of chat replies (src/server/reply.c and the call parsers):
 * any text a model writes, in any family's format, must split into reasoning, content and calls
 * without a crash, a leak or undefined behaviour, and what a stream is sent of it (the split of
 * the text while it is being written) must be a prefix of the whole reply's split. The first
 * byte picks the call syntax, the reasoning style, whether the prompt opened the reasoning and
 * where the stream is looked at; the rest is the reply. (The seeds' first bytes pick by the
 * count of SYNTAXES: adding one changes what they pick.)
 *
 * The Makefile's generic fuzz rule links only src/common.c and the grammar and format layers, so
 * the parsers (which need nothing but cJSON) are compiled into this harness directly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/call_named.c"
#include "server/call_python.c"
#include "server/chat_format.c"
#include "server/harmony.c"
#include "server/marker.c"
#include "server/reply.c"
#include "server/tool_calls.c"

uint64_t srv_random_u64(void) { return 0x9E3779B97F4A7C15ull; }

static const char *const SYNTAXES[] = {"hermes", "qwen3-coder", "llama3", "mistral", "magistral", "mistral-small-3.2",
                                       "deepseek-r1", "deepseek-v3.1", "deepseek-v3.2", "kimi-k2", "glm-4.5",
                                       "minimax-m2", "seed-oss", "harmony", "functionary-v3.1", "command-r7b",
                                       "nemotron-v2", "granite-3.3", "apertus", "apriel", "firefunction-v2",
                                       "solar-open", "gigachat-3.1", "lfm2", "gigachat-3", "command-r-plus",
                                       "functionary-v3.2"};
static const char *const STYLES[] = {"think", "seed-oss", "mistral", "command-r7b", "gemma4", "harmony"};
static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"ok\":{\"type\":\"boolean\"}}}}}]";

#define check(ok) check_at(ok, __LINE__)
static void check_at(bool ok, int line) {
    if (ok) return;
    fprintf(stderr, "fuzz_reply.c:%d: a promise broken\n", line);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    uint8_t pick = data[0], at = data[1];
    const char *t = (const char *)data + 2;
    size_t n = size - 2;
    const srv_call_syntax *sx = srv_call_syntax_named(SYNTAXES[pick % (sizeof SYNTAXES / sizeof *SYNTAXES)]);
    int style = (pick / 32) % 7; /* 6: none */
    srv_reply_opts o = {.reasoning = style < 6 ? srv_reasoning_style_named(STYLES[style]) : NULL,
                        .in_reasoning = pick & 16, .calls = pick & 8 ? NULL : sx, .tools_json = TOOLS,
                        .opened = sx->text_recipient ? sx : NULL}; /* its template's prompt always ends so */
    srv_reply whole, part;
    if (srv_reply_parse(&o, t, n, true, &whole)) return 0;
    check(strlen(whole.reasoning) <= whole.n_reasoning && strlen(whole.content) <= whole.n_content);
    for (int32_t k = 0; k < whole.calls.n; k++) {
        cJSON *args = cJSON_Parse(whole.calls.calls[k].arguments);
        check(args && (cJSON_IsObject(args) || cJSON_IsString(args)) && whole.calls.calls[k].name[0]);
        cJSON_Delete(args);
    }
    size_t cut = n ? at * n / 255 : 0; /* the stream looked at after `cut` bytes */
    if (srv_reply_parse(&o, t, cut, false, &part) == 0) {
        check(part.calls.n == 0);
        check(part.n_reasoning <= whole.n_reasoning && !memcmp(part.reasoning, whole.reasoning, part.n_reasoning));
        check(part.n_content <= whole.n_content && !memcmp(part.content, whole.content, part.n_content));
        srv_reply_free(&part);
    }
    srv_reply_free(&whole);
    return 0;
}
