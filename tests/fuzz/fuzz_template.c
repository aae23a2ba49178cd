/* libFuzzer harness for the chat-template engine: the input is a template, parsed and rendered
 * with a fixed chat context under tight limits (so every input runs in milliseconds). Any crash,
 * sanitizer report, leak or hang is a bug; errors are fine.
 *
 * The engine's sources are compiled into this file, so that the Makefile's generic fuzz rule
 * (which links only src/common.c and the format layer) builds it as it is. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "template/builtins.c"
#include "template/chat.c"
#include "template/eval.c"
#include "template/exec.c"
#include "template/filters.c"
#include "template/json.c"
#include "template/lexer.c"
#include "template/parser.c"
#include "template/repr.c"
#include "template/strings.c"
#include "template/tests.c"
#include "template/util.c"
#include "template/value.c"

static const char context_json[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"You are helpful.\"},"
    "{\"role\": \"user\", \"content\": \"Hi é 😀 <think>x</think>\"},"
    "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\", \"function\": "
    "{\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": [true, null, 2.5]}}}]},"
    "{\"role\": \"tool\", \"content\": \"{\\\"ok\\\": 1}\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \" parts \"}, {\"type\": \"image\"}]}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}}}],"
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"documents\": null,"
    "\"n\": 3, \"s\": \"Hello World\", \"l\": [3, 1, 2], \"d\": {\"b\": 2, \"a\": 1}}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static tmpl_value *context;
    if (!context) {
        nc_err err;
        context = tmpl_value_from_json(context_json, strlen(context_json), &err);
        if (!context) abort();
    }
    tmpl_limits lim = {.max_output = 1 << 20, .max_memory = 64 << 20, .max_steps = 200000, .max_depth = 200};
    nc_err err;
    tmpl *t = NULL;
    if (tmpl_parse(&t, (const char *)data, size, &err) == 0) {
        char *out = NULL;
        size_t len = 0;
        if (tmpl_render_limits(t, context, &lim, &out, &len, &err) == 0 && strlen(out) > len) abort();
        free(out);
        tmpl_free(t);
    }
    return 0;
}
