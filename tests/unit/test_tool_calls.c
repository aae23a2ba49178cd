/* Tool calling: the conversation rewritten for templates without tools, calls parsed out of
 * replies in the JSON-shaped syntaxes (the expected calls written by hand from the formats'
 * documentation; every family's in test_chat_formats), what a stream may send before a call is
 * complete, and the grammar of a required call. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "server/tool_calls.h"
#include "test.h"

static void test_describe(void) {
    const char *msgs = "[{\"role\":\"user\",\"content\":\"weather in Oslo?\"},{\"role\":\"assistant\",\"content\":\"\","
                       "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":"
                       "{\"city\":\"Oslo\"}}}]},{\"role\":\"tool\",\"content\":\"-3 C\",\"tool_call_id\":\"c1\"},"
                       "{\"role\":\"tool\",\"content\":\"snow\",\"tool_call_id\":\"c2\"}]";
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"w\"}}]";
    char *out = srv_tools_describe(msgs, tools);
    const char *want =
        "[{\"role\":\"system\",\"content\":\"# Tools\\n\\nYou may call functions to answer. Their signatures, in "
        "JSON, are inside <tools></tools>:\\n<tools>\\n{\\\"type\\\":\\\"function\\\",\\\"function\\\":{\\\"name\\\":"
        "\\\"w\\\"}}\\n</tools>\\n\\nTo call a function, reply with a JSON object holding its name and arguments "
        "inside <tool_call></tool_call> tags, one block per call:\\n<tool_call>\\n{\\\"name\\\": <function name>, "
        "\\\"arguments\\\": <arguments as a JSON object>}\\n</tool_call>\"},"
        "{\"role\":\"user\",\"content\":\"weather in Oslo?\"},"
        "{\"role\":\"assistant\",\"content\":\"<tool_call>\\n{\\\"name\\\":\\\"w\\\",\\\"arguments\\\":{\\\"city\\\":"
        "\\\"Oslo\\\"}}\\n</tool_call>\"},"
        "{\"role\":\"user\",\"content\":\"<tool_response>\\n-3 C\\n</tool_response>\\n<tool_response>\\nsnow\\n"
        "</tool_response>\"}]";
    CHECK_MSG(out && !strcmp(out, want), "%s", out ? out : "(null)");
    free(out);
    /* a system message is extended, not repeated */
    out = srv_tools_describe("[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"q\"}]",
                             tools);
    CHECK_MSG(out && !strncmp(out, "[{\"role\":\"system\",\"content\":\"Be brief.\\n\\n# Tools", 49) &&
                  strstr(out, "},{\"role\":\"user\",\"content\":\"q\"}]"),
              "%s", out ? out : "(null)");
    free(out);
    /* without tools, only the conversation's calls and results are rewritten */
    out = srv_tools_describe("[{\"role\":\"user\",\"content\":\"q\"}]", NULL);
    CHECK(out && !strcmp(out, "[{\"role\":\"user\",\"content\":\"q\"}]"));
    free(out);
}

typedef struct want_call {
    const char *name, *arguments;
} want_call;

#define HERMES srv_call_syntax_named("hermes")
#define LLAMA3 srv_call_syntax_named("llama3")
#define MISTRAL srv_call_syntax_named("mistral")

/* The calls in text, the content before them ending at content_end, what they did not take
 * starting at tail (strlen(text): nothing). */
static void expect_calls_of(const srv_call_syntax *f, const char *text, const char *tools, bool parallel,
                            size_t content_end, size_t tail, int n, const want_call *want) {
    srv_tool_calls c;
    CHECK(srv_tool_calls_parse(f, text, strlen(text), tools, parallel, &c) == 0);
    CHECK_MSG(c.n == n, "%d calls instead of %d in %s", c.n, n, text);
    CHECK_MSG(c.content_end == content_end, "content ends at %zu, not %zu, in %s", c.content_end, content_end, text);
    CHECK_MSG(c.tail == tail, "the rest starts at %zu, not %zu, in %s", c.tail, tail, text);
    for (int k = 0; k < c.n && k < n; k++) {
        CHECK_MSG(!strcmp(c.calls[k].name, want[k].name), "name %s in %s", c.calls[k].name, text);
        CHECK_MSG(!strcmp(c.calls[k].arguments, want[k].arguments), "arguments %s in %s", c.calls[k].arguments, text);
        if (f->short_ids) { /* Mistral's: 9 letters and digits */
            CHECK(strlen(c.calls[k].id) == 9 &&
                  strspn(c.calls[k].id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == 9);
            continue;
        }
        CHECK(!strncmp(c.calls[k].id, "call_", 5) && strlen(c.calls[k].id) == 29);
        CHECK(strspn(c.calls[k].id + 5, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == 24);
    }
    if (c.n == 2) CHECK(strcmp(c.calls[0].id, c.calls[1].id) != 0);
    srv_tool_calls_free(&c);
}

static void expect_calls_tail(const srv_call_syntax *f, const char *text, size_t content_end, size_t tail, int n,
                              const want_call *want) {
    expect_calls_of(f, text, NULL, true, content_end, tail, n, want);
}

static void expect_calls(const srv_call_syntax *f, const char *text, size_t content_end, int n, const want_call *want) {
    expect_calls_tail(f, text, content_end, strlen(text), n, want);
}

/* The tools the limits' replies call. */
#define TOOL(name) "{\"type\":\"function\",\"function\":{\"name\":\"" name "\"}}"
static const char ALL_TOOLS[] = "[" TOOL("get_weather") "," TOOL("a") "," TOOL("b") "," TOOL("f") "]";

/* Calls the request did not ask for are content: a tool it did not declare, arguments an escaped
 * NUL would cut short; parallel_tool_calls false keeps the first call, what follows it content. */
static void test_parse_limits(void) {
    const char *undeclared = "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>";
    size_t n = strlen(undeclared);
    expect_calls_of(HERMES, undeclared, ALL_TOOLS, true, n, n, 0, NULL);
    const char *mixed = "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"rm_rf\"}</tool_call>";
    expect_calls_of(HERMES, mixed, ALL_TOOLS, true, strlen(mixed), strlen(mixed), 0, NULL);
    const char *list = "[TOOL_CALLS][{\"name\": \"rm_rf\", \"arguments\": {}}]";
    expect_calls_of(MISTRAL, list, ALL_TOOLS, true, strlen(list), strlen(list), 0, NULL);
    const char *nul = "<tool_call>{\"name\": \"f\", \"arguments\": {\"path\": \"/tmp/x\\u0000/etc/passwd\"}}</tool_call>";
    expect_calls_of(HERMES, nul, ALL_TOOLS, true, strlen(nul), strlen(nul), 0, NULL);
    want_call esc[] = {{"f", "{\"s\":\"a\\\\u0000b\"}"}}; /* an escaped backslash, then text: not a NUL */
    const char *escaped = "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"a\\\\u0000b\"}}</tool_call>";
    expect_calls_of(HERMES, escaped, ALL_TOOLS, true, 0, strlen(escaped), 1, esc);
    want_call first[] = {{"a", "{}"}};
    const char *two = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
                      "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>";
    expect_calls_of(HERMES, two, ALL_TOOLS, false, 0, (size_t)(strrchr(two, '\n') + 1 - two), 1, first);
    const char *pair = "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\"}]";
    expect_calls_of(MISTRAL, pair, ALL_TOOLS, false, 0, (size_t)(strstr(pair, "}, {") + 1 - pair), 1, first);
}

static void test_parse_hermes(void) {
    const srv_call_syntax *H = HERMES;
    want_call w1[] = {{"get_weather", "{\"city\":\"Oslo\",\"unit\":\"C\"}"}};
    expect_calls(H, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"C\"}}\n"
                    "</tool_call>", 0, 1, w1);
    want_call w2[] = {{"a", "{}"}, {"b", "{\"x\":[1,2]}"}};
    const char *two = "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
                      "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>\n";
    expect_calls(H, two, 14, 2, w2);
    /* arguments as a JSON string are kept as given; missing arguments are {} */
    want_call w3[] = {{"f", "{\"q\": 1}"}};
    expect_calls(H, "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"q\\\": 1}\"}</tool_call>", 0, 1, w3);
    want_call w4[] = {{"f", "{}"}};
    expect_calls(H, "<tool_call>{\"name\":\"f\"}</tool_call>", 0, 1, w4);
    /* an unclosed last block (the reply hit its end) still counts */
    expect_calls(H, "<tool_call>{\"name\":\"f\"}", 0, 1, w4);
    /* the complete calls before a cut or malformed block stay calls; the rest is not taken */
    const char *cut = "<tool_call>{\"name\":\"f\"}</tool_call>\n<tool_call>{\"name\":\"f\"}</tool_call>\n<tool_call>{\"na";
    want_call w5[] = {{"f", "{}"}, {"f", "{}"}};
    expect_calls_tail(H, cut, 0, strlen(cut) - 15, 2, w5);
    const char *more = "<tool_call>{\"name\":\"f\"}</tool_call> and more";
    expect_calls_tail(H, more, 0, strlen(more) - 8, 1, w4);
    /* not calls: the whole text is content (arguments as text must be an object's JSON: found by
       fuzz_reply) */
    const char *plain[] = {"Just text.", "<tool_call>not json</tool_call>", "<tool_call>{\"name\": 5}</tool_call>",
                           "<tool_call>{\"name\":\"f\",\"arguments\":\"hello\"}</tool_call>",
                           "<tool_call>{\"arguments\": {}}</tool_call>",
                           "<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>", "<tool_call>{\"name\":\"f\""};
    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++) expect_calls(H, plain[i], strlen(plain[i]), 0, NULL);
}

static void test_parse_llama3_mistral(void) {
    want_call w1[] = {{"get_weather", "{\"city\":\"Oslo\"}"}};
    expect_calls(LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", 0, 1, w1);
    expect_calls(LLAMA3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", 0, 1, w1);
    want_call w2[] = {{"a", "{}"}, {"b", "{\"n\":1}"}};
    expect_calls(LLAMA3, " {\"name\":\"a\",\"parameters\":{}}; {\"name\":\"b\",\"parameters\":{\"n\":1}}", 1, 2, w2);
    expect_calls(LLAMA3, "The answer is {\"a\": 1}", 22, 0, NULL);
    expect_calls(LLAMA3, "{\"a\": 1}", 8, 0, NULL);
    expect_calls(MISTRAL, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"n\": 1}}]", 0,
                 2, w2);
    expect_calls(MISTRAL, "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]", 0, 1, w1);
    expect_calls(MISTRAL, "[TOOL_CALLS][]", 14, 0, NULL);
    expect_calls(MISTRAL, "[1, 2]", 6, 0, NULL);
    expect_calls(MISTRAL, "Sure: [{\"name\": \"a\"}]", 21, 0, NULL);
    /* a list cut after its first call: that call stays */
    const char *cut = "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"argu";
    expect_calls_tail(MISTRAL, cut, 0, 45, 1, w2);
}

static void expect_ready(const srv_call_syntax *f, const char *text, size_t want) {
    size_t got = srv_tool_content_ready(f, text, strlen(text));
    CHECK_MSG(got == want, "%zu bytes of '%s' ready, not %zu", got, text, want);
}

static void test_stream_ready(void) {
    const srv_call_syntax *H = HERMES;
    CHECK(srv_tool_content_ready(H, NULL, 0) == 0); /* nothing generated yet */
    expect_ready(H, "Hello there", 11);
    expect_ready(H, "Hello <", 5); /* the blank too: it may precede a call */
    expect_ready(H, "Hello <tool_c", 5);
    expect_ready(H, "Hello <tool_call>{\"na", 5);
    expect_ready(H, "a < b", 5);
    expect_ready(H, "Let me see.\n", 11);
    expect_ready(H, "Let me see.\n \t<tool_", 11);
    expect_ready(H, "one two", 7);
    expect_ready(H, "one ", 3);
    expect_ready(H, "<tool", 0);
    expect_ready(LLAMA3, "  ", 0);
    expect_ready(LLAMA3, " {\"name", 0);
    expect_ready(LLAMA3, "<|python", 0);
    expect_ready(LLAMA3, "It is", 5);
    expect_ready(MISTRAL, "[TOOL", 0);
    expect_ready(MISTRAL, "[{", 0);
    expect_ready(MISTRAL, "No.", 3);
}

/* Whether the grammar (GBNF text) takes exactly the sentence s. */
static bool grammar_takes(const char *gbnf, const char *s) {
    gr_grammar *g = NULL;
    gr_matcher *m = NULL;
    nc_err err;
    bool ok = gr_parse(&g, gbnf, strlen(gbnf), &err) == 0 && gr_matcher_new(&m, g, &err) == 0 &&
              gr_matcher_feed(m, (const uint8_t *)s, strlen(s)) && gr_matcher_can_end(m);
    gr_matcher_free(m);
    gr_free(g);
    return ok;
}

/* The grammar of a required call: the calls each format writes, each tool's arguments held to
 * its parameters, only the named tool when one is named, and no more calls than allowed. */
static void test_grammar(void) {
    const char *tools =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"C\",\"F\"]}},\"required\":[\"city\",\"unit\"],"
        "\"additionalProperties\":false}}},{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]";
    srv_error e;
    char *h = srv_tool_grammar(HERMES, tools, NULL, true, NULL, NULL, NULL, &e);
    CHECK_MSG(h != NULL, "%s", e.message);
    if (h) {
        const char *w = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"C\"}}\n"
                        "</tool_call>";
        CHECK(grammar_takes(h, w));
        CHECK(grammar_takes(h, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
        char two[512];
        snprintf(two, sizeof two, "%s\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>", w);
        CHECK(grammar_takes(h, two));
        CHECK(!grammar_takes(h, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": "
                                "\"K\"}}\n</tool_call>"));
        CHECK(!grammar_takes(h, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
                                "</tool_call>"));
        CHECK(!grammar_takes(h, "<tool_call>\n{\"name\": \"rm\", \"arguments\": {}}\n</tool_call>"));
        CHECK(!grammar_takes(h, "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"x\": 1}}\n</tool_call>"));
        CHECK(!grammar_takes(h, "Sure."));
    }
    free(h);
    h = srv_tool_grammar(HERMES, tools, "now", false, NULL, NULL, NULL, &e);
    if (h) {
        CHECK(grammar_takes(h, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
        CHECK(!grammar_takes(h, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
                                "{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
        CHECK(!grammar_takes(h, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\", \"unit\": "
                                "\"C\"}}\n</tool_call>"));
    }
    free(h);
    h = srv_tool_grammar(LLAMA3, tools, NULL, true, NULL, NULL, NULL, &e);
    if (h) {
        CHECK(grammar_takes(h, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"unit\": \"F\"}}"));
        CHECK(!grammar_takes(h, "{\"name\": \"now\", \"arguments\": {}}"));
    }
    free(h);
    h = srv_tool_grammar(MISTRAL, tools, NULL, true, NULL, NULL, NULL, &e);
    if (h) {
        CHECK(grammar_takes(h, "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"now\", \"arguments\": {}}]"));
        CHECK(!grammar_takes(h, "[]"));
    }
    free(h);
    /* a parameters schema that cannot become a grammar: a 400 naming the tool */
    h = srv_tool_grammar(HERMES,
                         "[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"object\"}}},"
                         "{\"type\":\"function\",\"function\":{\"name\":\"b\",\"parameters\":{\"if\":{}}}}]",
                         NULL, true, NULL, NULL, NULL, &e);
    CHECK(h == NULL && e.status == 400 && !strcmp(e.param, "tools[1].function.parameters"));
    CHECK_MSG(strstr(e.message, "if") != NULL, "%s", e.message);
    free(h);
}

/* gone: counts the questions, and says what *user's answer is. */
typedef struct asked {
    int n;
    bool gone;
} asked;

static bool count_gone(void *user) {
    asked *a = user;
    a->n++;
    return a->gone;
}

/* The tools' schemas compile under the caller's watch: asked while they compile, and a caller
 * gone ends the grammar with 499 (a request whose client left, or whose deadline passed). */
static void test_grammar_watched(void) {
    const char *tools =
        "[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"x\":{\"type\":\"string\"}}}}},{\"type\":\"function\",\"function\":{\"name\":\"b\"}}]";
    srv_error e;
    asked still = {0}, left = {.gone = true};
    char *h = srv_tool_grammar(HERMES, tools, NULL, true, NULL, count_gone, &still, &e);
    CHECK_MSG(h != NULL && still.n >= 2, "asked %d times", still.n);
    free(h);
    h = srv_tool_grammar(HERMES, tools, NULL, true, NULL, count_gone, &left, &e);
    CHECK_MSG(h == NULL && e.status == 499 && left.n >= 1, "%d %s", h ? 200 : e.status, h ? h : e.message);
    CHECK(h || strstr(e.message, "abandoned") != NULL);
    free(h);
}

int main(void) {
    test_parse_limits();
    test_describe();
    test_parse_hermes();
    test_parse_llama3_mistral();
    test_stream_ready();
    test_grammar();
    test_grammar_watched();
    return test_summary("test_tool_calls");
}
