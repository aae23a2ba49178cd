/* Tool calling: template styles, the conversation rewritten for templates without tools, calls
 * parsed out of replies in each format (the expected calls written by hand from the formats'
 * documentation), and what a stream may send before a call is complete. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "server/tool_calls.h"
#include "test.h"

static void test_styles(void) {
    srv_tool_style s = srv_tool_style_of(NULL);
    CHECK(!s.template_takes_tools && s.format == SRV_TOOL_FMT_HERMES);
    s = srv_tool_style_of("{% for m in messages %}{{ m.content }}{% endfor %}");
    CHECK(!s.template_takes_tools && s.format == SRV_TOOL_FMT_HERMES);
    s = srv_tool_style_of("{% if tools %}<tools>{{ tools|tojson }}</tools> <tool_call>{% endif %}");
    CHECK(s.template_takes_tools && s.format == SRV_TOOL_FMT_HERMES);
    s = srv_tool_style_of("<|start_header_id|>{% if tools %}{{ t|tojson }}{% endif %}<|python_tag|>");
    CHECK(s.template_takes_tools && s.format == SRV_TOOL_FMT_LLAMA3);
    s = srv_tool_style_of("{% if tools %}[AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]");
    CHECK(s.template_takes_tools && s.format == SRV_TOOL_FMT_MISTRAL);
    /* it names tools, but writes calls in a way nucleus cannot parse: nucleus describes them */
    s = srv_tool_style_of("{% if tools %}<|tool|>{{ tools }}{% endif %}");
    CHECK(!s.template_takes_tools && s.format == SRV_TOOL_FMT_HERMES);
}

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

/* The tools the parsing tests' replies call. */
#define TOOL(name) "{\"type\":\"function\",\"function\":{\"name\":\"" name "\"}}"
static const char ALL_TOOLS[] = "[" TOOL("get_weather") "," TOOL("a") "," TOOL("b") "," TOOL("f") "]";

static void expect_calls_of(srv_tool_format f, const char *text, const char *tools, bool parallel, size_t content_end,
                            int n, const want_call *want) {
    srv_tool_calls c;
    CHECK(srv_tool_calls_parse(f, text, strlen(text), tools, parallel, &c) == 0);
    CHECK_MSG(c.n == n, "%d calls instead of %d in %s", c.n, n, text);
    CHECK_MSG(c.content_end == content_end, "content ends at %zu, not %zu, in %s", c.content_end, content_end, text);
    for (int k = 0; k < c.n && k < n; k++) {
        CHECK_MSG(!strcmp(c.calls[k].name, want[k].name), "name %s in %s", c.calls[k].name, text);
        CHECK_MSG(!strcmp(c.calls[k].arguments, want[k].arguments), "arguments %s in %s", c.calls[k].arguments, text);
        CHECK(!strncmp(c.calls[k].id, "call_", 5) && strlen(c.calls[k].id) == 29);
        CHECK(strspn(c.calls[k].id + 5, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == 24);
    }
    if (c.n == 2) CHECK(strcmp(c.calls[0].id, c.calls[1].id) != 0);
    srv_tool_calls_free(&c);
}

static void expect_calls(srv_tool_format f, const char *text, size_t content_end, int n, const want_call *want) {
    expect_calls_of(f, text, ALL_TOOLS, true, content_end, n, want);
}

/* Calls the request did not ask for are content: a tool it did not declare, arguments an escaped
 * NUL would cut short; parallel_tool_calls false keeps the first call. */
static void test_parse_limits(void) {
    const srv_tool_format H = SRV_TOOL_FMT_HERMES;
    const char *undeclared = "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>";
    expect_calls_of(H, undeclared, ALL_TOOLS, true, strlen(undeclared), 0, NULL);
    expect_calls_of(H, undeclared, NULL, true, strlen(undeclared), 0, NULL);
    const char *mixed = "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"rm_rf\"}</tool_call>";
    expect_calls_of(H, mixed, ALL_TOOLS, true, strlen(mixed), 0, NULL);
    expect_calls_of(SRV_TOOL_FMT_MISTRAL, "[{\"name\": \"rm_rf\", \"arguments\": {}}]", ALL_TOOLS, true, 36, 0, NULL);
    const char *nul = "<tool_call>{\"name\": \"f\", \"arguments\": {\"path\": \"/tmp/x\\u0000/etc/passwd\"}}</tool_call>";
    expect_calls_of(H, nul, ALL_TOOLS, true, strlen(nul), 0, NULL);
    want_call esc[] = {{"f", "{\"s\":\"a\\\\u0000b\"}"}}; /* an escaped backslash, then text: not a NUL */
    expect_calls_of(H, "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"a\\\\u0000b\"}}</tool_call>", ALL_TOOLS, true,
                    0, 1, esc);
    want_call first[] = {{"a", "{}"}};
    const char *two = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
                      "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>";
    expect_calls_of(H, two, ALL_TOOLS, false, 0, 1, first);
    expect_calls_of(SRV_TOOL_FMT_MISTRAL, "[{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\"}]", ALL_TOOLS, false, 0, 1,
                    first);
}

static void test_parse_hermes(void) {
    const srv_tool_format H = SRV_TOOL_FMT_HERMES;
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
    /* not calls: the whole text is content */
    const char *plain[] = {"Just text.", "<tool_call>not json</tool_call>", "<tool_call>{\"name\": 5}</tool_call>",
                           "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"name\":\"f\"}</tool_call> and more",
                           "<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>", "<tool_call>{\"name\":\"f\""};
    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++) expect_calls(H, plain[i], strlen(plain[i]), 0, NULL);
}

static void test_parse_llama3_mistral(void) {
    want_call w1[] = {{"get_weather", "{\"city\":\"Oslo\"}"}};
    expect_calls(SRV_TOOL_FMT_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", 0, 1, w1);
    expect_calls(SRV_TOOL_FMT_LLAMA3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", 0,
                 1, w1);
    want_call w2[] = {{"a", "{}"}, {"b", "{\"n\":1}"}};
    expect_calls(SRV_TOOL_FMT_LLAMA3, " {\"name\":\"a\",\"parameters\":{}}; {\"name\":\"b\",\"parameters\":{\"n\":1}}", 0,
                 2, w2);
    expect_calls(SRV_TOOL_FMT_LLAMA3, "The answer is {\"a\": 1}", 22, 0, NULL);
    expect_calls(SRV_TOOL_FMT_LLAMA3, "{\"a\": 1}", 8, 0, NULL);
    expect_calls(SRV_TOOL_FMT_MISTRAL,
                 "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"n\": 1}}]", 0, 2,
                 w2);
    expect_calls(SRV_TOOL_FMT_MISTRAL, "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]", 0, 1, w1);
    expect_calls(SRV_TOOL_FMT_MISTRAL, "[TOOL_CALLS][]", 14, 0, NULL);
    expect_calls(SRV_TOOL_FMT_MISTRAL, "[1, 2]", 6, 0, NULL);
    expect_calls(SRV_TOOL_FMT_MISTRAL, "Sure: [{\"name\": \"a\"}]", 21, 0, NULL);
}

static void expect_ready(srv_tool_format f, const char *text, size_t want) {
    size_t got = srv_tool_content_ready(f, text, strlen(text));
    CHECK_MSG(got == want, "%zu bytes of '%s' ready, not %zu", got, text, want);
}

static void test_stream_ready(void) {
    const srv_tool_format H = SRV_TOOL_FMT_HERMES;
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
    expect_ready(SRV_TOOL_FMT_LLAMA3, "  ", 0);
    expect_ready(SRV_TOOL_FMT_LLAMA3, " {\"name", 0);
    expect_ready(SRV_TOOL_FMT_LLAMA3, "<|python", 0);
    expect_ready(SRV_TOOL_FMT_LLAMA3, "It is", 5);
    expect_ready(SRV_TOOL_FMT_MISTRAL, "[TOOL", 0);
    expect_ready(SRV_TOOL_FMT_MISTRAL, "[{", 0);
    expect_ready(SRV_TOOL_FMT_MISTRAL, "No.", 3);
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
    char *h = srv_tool_grammar(SRV_TOOL_FMT_HERMES, tools, NULL, true, &e);
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
    h = srv_tool_grammar(SRV_TOOL_FMT_HERMES, tools, "now", false, &e);
    if (h) {
        CHECK(grammar_takes(h, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
        CHECK(!grammar_takes(h, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
                                "{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
        CHECK(!grammar_takes(h, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\", \"unit\": "
                                "\"C\"}}\n</tool_call>"));
    }
    free(h);
    h = srv_tool_grammar(SRV_TOOL_FMT_LLAMA3, tools, NULL, true, &e);
    if (h) {
        CHECK(grammar_takes(h, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"unit\": \"F\"}}"));
        CHECK(!grammar_takes(h, "{\"name\": \"now\", \"arguments\": {}}"));
    }
    free(h);
    h = srv_tool_grammar(SRV_TOOL_FMT_MISTRAL, tools, NULL, true, &e);
    if (h) {
        CHECK(grammar_takes(h, "[{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"now\", \"arguments\": {}}]"));
        CHECK(!grammar_takes(h, "[]"));
    }
    free(h);
    /* a parameters schema that cannot become a grammar: a 400 naming the tool */
    h = srv_tool_grammar(SRV_TOOL_FMT_HERMES,
                         "[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"object\"}}},"
                         "{\"type\":\"function\",\"function\":{\"name\":\"b\",\"parameters\":{\"if\":{}}}}]",
                         NULL, true, &e);
    CHECK(h == NULL && e.status == 400 && !strcmp(e.param, "tools[1].function.parameters"));
    CHECK_MSG(strstr(e.message, "if") != NULL, "%s", e.message);
    free(h);
}

int main(void) {
    test_parse_limits();
    test_styles();
    test_describe();
    test_parse_hermes();
    test_parse_llama3_mistral();
    test_stream_ready();
    test_grammar();
    return test_summary("test_tool_calls");
}
