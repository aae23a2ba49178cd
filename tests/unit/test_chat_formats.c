/* The chat formats of today's models: which reasoning style and call syntax each real template
 * of llama.cpp's set gets (tests/data/templates), and, for every family, replies written as its
 * documentation and model card show them (plain, reasoning only, reasoning and answer, one call,
 * parallel calls, calls after text, a cut call, a malformed call) split into reasoning, content
 * and calls; every prefix of each reply, as a stream sees it, splits into prefixes of the whole
 * reply's reasoning and content; and the grammar of a required call takes the family's own call
 * text. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar/grammar.h"
#include "server/chat_format.h"
#include "server/marker.h"
#include "server/reply.h"
#include "server/tool_calls.h"
#include "test.h"

/* ---- Detection over the real templates ----------------------------------------------------- */

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

typedef struct detect_case {
    const char *file, *reasoning, *calls; /* NULL reasoning: none; calls NULL: described (Hermes) */
} detect_case;

static void test_detection(void) {
    static const detect_case cases[] = {
        {"Qwen-Qwen3-0.6B", "think", "hermes"},
        {"Qwen-QwQ-32B", "think", "hermes"},
        {"Qwen-Qwen2.5-7B-Instruct", NULL, "hermes"},
        {"Qwen3.5-4B", "think", "qwen3-coder"},
        {"Qwen3-Coder", NULL, "qwen3-coder"},
        {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "think", "qwen3-coder"},
        {"stepfun-ai-Step-3.5-Flash", "think", "qwen3-coder"},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", NULL, "hermes"},
        {"ibm-granite-granite-4.0", NULL, "hermes"},
        {"ibm-granite-granite-3.3-2B-Instruct", "think", "granite-3.3"},
        {"meta-llama-Llama-3.1-8B-Instruct", NULL, "llama3"},
        {"meta-llama-Llama-3.3-70B-Instruct", NULL, "llama3"},
        {"mistralai-Mistral-Nemo-Instruct-2407", NULL, "mistral"},
        {"Mistral-Small-3.2-24B-Instruct-2506", NULL, "mistral-small-3.2"},
        {"mistralai-Ministral-3-14B-Reasoning-2512", "mistral", "magistral"},
        {"unsloth-mistral-Devstral-Small-2507", NULL, "magistral"},
        {"llama-cpp-deepseek-r1", "think", "deepseek-r1"},
        {"deepseek-ai-DeepSeek-V3.2", "think", "deepseek-v3.2"},
        {"moonshotai-Kimi-K2", NULL, "kimi-k2"},
        {"Kimi-K2-Thinking", "think", "kimi-k2"},
        {"GLM-4.6", "think", "glm-4.5"},
        {"GLM-4.7-Flash", "think", "glm-4.5"},
        {"MiniMax-M2", "think", "minimax-m2"},
        {"ByteDance-Seed-OSS", "seed-oss", "seed-oss"},
        {"openai-gpt-oss-120b", "harmony", "harmony"},
        {"meetkai-functionary-medium-v3.1", NULL, "functionary-v3.1"},
        {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", "command-r7b", "command-r7b"},
        {"NVIDIA-Nemotron-Nano-v2", "think", "nemotron-v2"},
        {"Apertus-8B-Instruct", NULL, "apertus"},
        {"unsloth-Apriel-1.5", NULL, "apriel"},
        {"fireworks-ai-llama-3-firefunction-v2", NULL, "firefunction-v2"},
        {"upstage-Solar-Open-100B", NULL, "solar-open"},
        {"GigaChat3.1-10B-A1.8B", NULL, "gigachat-3.1"},
        {"LFM2-8B-A1B", NULL, "lfm2"},
        {"GigaChat3-10B-A1.8B", NULL, "gigachat-3"},
        {"CohereForAI-c4ai-command-r-plus-tool_use", NULL, "command-r-plus"},
        {"LFM2.5-Instruct", "think", "lfm2"},
        {"meetkai-functionary-medium-v3.2", NULL, "functionary-v3.2"},
        {"google-gemma-4-31B-it", "gemma4", NULL},
        /* templates that render no tools, or calls in a syntax nucleus does not read: described */
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "think", NULL},
        {"HuggingFaceTB-SmolLM3-3B", "think", NULL},
        {"microsoft-Phi-3.5-mini-instruct", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/data/templates/%s.jinja", cases[i].file);
        char *src = read_file(path);
        CHECK_MSG(src != NULL, "cannot read %s", path);
        if (!src) continue;
        srv_chat_format f = srv_chat_format_of(src);
        const char *r = f.reasoning ? f.reasoning->name : NULL;
        CHECK_MSG(cases[i].reasoning ? r && !strcmp(r, cases[i].reasoning) : !r, "%s: reasoning %s", cases[i].file,
                  r ? r : "none");
        CHECK_MSG(f.template_takes_tools == (cases[i].calls != NULL), "%s: takes tools %d", cases[i].file,
                  f.template_takes_tools);
        const char *want = cases[i].calls ? cases[i].calls : "hermes";
        CHECK_MSG(!strcmp(f.calls->name, want), "%s: calls %s, not %s", cases[i].file, f.calls->name, want);
        free(src);
    }
    srv_chat_format chatml = srv_chat_format_of(NULL);
    CHECK(!chatml.reasoning && !chatml.template_takes_tools && !strcmp(chatml.calls->name, "hermes"));
}

/* ---- Replies of each family ---------------------------------------------------------------- */

/* How a family writes things, from its documentation (%N: the function's name, %A: its arguments
 * as JSON, %P: its parameters one by one as param, with %K the key and %V the value, %Y: its
 * arguments as Python's keyword arguments). */
typedef struct family {
    const char *name, *reasoning, *calls;
    const char *think_open, *think_close;  /* what the model writes around its reasoning */
    const char *open, *call, *sep, *close; /* around the calls, one call, between calls */
    const char *param;
    const char *text_then_calls;           /* between a text and the calls */
    const char *text_lead;                 /* before a text (Functionary v3.2's recipient "all\n",
                                              its prompt having written ">>>"); NULL: nothing */
} family;

static const family FAMILIES[] = {
    {"qwen3", "think", "hermes", "<think>\n", "\n</think>\n\n", "",
     "<tool_call>\n{\"name\": \"%N\", \"arguments\": %A}\n</tool_call>", "\n", "", NULL, "\n\n", NULL},
    {"qwen3.5", "think", "qwen3-coder", "<think>\n", "\n</think>\n\n", "",
     "<tool_call>\n<function=%N>\n%P</function>\n</tool_call>", "\n", "", "<parameter=%K>\n%V\n</parameter>\n", "\n\n", NULL},
    {"deepseek-r1", "think", "deepseek-r1", "<think>\n", "\n</think>\n\n",
     "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
     "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>function<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>%N\n```json\n%A\n```<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>",
     "\n", "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>", NULL, "", NULL},
    {"deepseek-v3.1", "think", "deepseek-v3.1", "<think>", "</think>",
     "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
     "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>%N<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>%A<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>",
     "", "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>", NULL, "", NULL},
    {"kimi-k2", "think", "kimi-k2", "<think>", "</think>", "<|tool_calls_section_begin|>",
     "<|tool_call_begin|>functions.%N:%I<|tool_call_argument_begin|>%A<|tool_call_end|>", "",
     "<|tool_calls_section_end|>", NULL, "", NULL},
    {"glm-4.6", "think", "glm-4.5", "<think>", "</think>\n", "", "<tool_call>%N\n%P</tool_call>", "\n", "",
     "<arg_key>%K</arg_key>\n<arg_value>%V</arg_value>\n", "\n", NULL},
    {"minimax-m2", "think", "minimax-m2", "<think>\n", "\n</think>\n\n", "<minimax:tool_call>\n",
     "<invoke name=\"%N\">\n%P</invoke>\n", "", "</minimax:tool_call>", "<parameter name=\"%K\">%V</parameter>\n", "\n\n", NULL},
    {"seed-oss", "seed-oss", "seed-oss", "<seed:think>", "</seed:think>\n", "",
     "<seed:tool_call>\n<function=%N>\n%P</function>\n</seed:tool_call>", "\n", "", "<parameter=%K>%V</parameter>\n",
     "\n\n", NULL},
    {"deepseek-v3.2", "think", "deepseek-v3.2", "<think>", "</think>",
     "\n\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "function_calls>\n", "<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "invoke name=\"%N\">\n%P</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "invoke>\n",
     "", "</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "function_calls>",
     "<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "parameter name=\"%K\" string=\"true\">%V</\xef\xbd\x9c" "DSML\xef\xbd\x9c" "parameter>\n", "", NULL},
    {"magistral", "mistral", "magistral", "[THINK]", "[/THINK]", "", "[TOOL_CALLS]%N[ARGS]%A", "", "", NULL, "", NULL},
    {"mistral-small-3.2", NULL, "mistral-small-3.2", NULL, NULL, "", "[TOOL_CALLS]%N[CALL_ID]a1b2c3d4e[ARGS]%A", "", "",
     NULL, "", NULL},
    {"mistral-nemo", NULL, "mistral", NULL, NULL, "[TOOL_CALLS][", "{\"name\": \"%N\", \"arguments\": %A}", ", ", "]",
     NULL, "", NULL},
    {"llama3", NULL, "llama3", NULL, NULL, "", "{\"name\": \"%N\", \"parameters\": %A}", "; ", "", NULL, NULL, NULL},
    {"functionary-v3.1", NULL, "functionary-v3.1", NULL, NULL, "", "<function=%N>%A</function>", "", "", NULL, "", NULL},
    {"command-r7b", "command-r7b", "command-r7b", "<|START_THINKING|>", "<|END_THINKING|>", "<|START_ACTION|>[\n    ",
     "{\"tool_call_id\": \"%I\", \"tool_name\": \"%N\", \"parameters\": %A}", ",\n    ", "\n]<|END_ACTION|>", NULL, "", NULL},
    {"nemotron-v2", "think", "nemotron-v2", "<think>\n", "\n</think>\n\n", "<TOOLCALL>[",
     "{\"name\": \"%N\", \"arguments\": %A}", ", ", "]</TOOLCALL>", NULL, "\n", NULL},
    {"granite-3.3", NULL, "granite-3.3", NULL, NULL, "<|tool_call|>[", "{\"name\": \"%N\", \"arguments\": %A}", ", ", "]",
     NULL, "", NULL},
    {"apertus", NULL, "apertus", NULL, NULL, "<|tools_prefix|>[", "{\"%N\": %A}", ", ", "]<|tools_suffix|>", NULL, "", NULL},
    {"apriel", NULL, "apriel", NULL, NULL, "<tool_calls>[", "{\"name\": \"%N\", \"arguments\": %A}", ", ",
     "]</tool_calls>", NULL, "\n", NULL},
    {"firefunction-v2", NULL, "firefunction-v2", NULL, NULL, " functools[", "{\"name\": \"%N\", \"arguments\": %A}", ", ",
     "]", NULL, "", NULL},
    {"solar-open", NULL, "solar-open", NULL, NULL, "<|tool_calls|>",
     "<|tool_call:begin|>call_%I<|tool_call:name|>%N<|tool_call:args|>%A<|tool_call:end|>", "", "<|calls|>", NULL, "", NULL},
    {"gigachat-3.1", NULL, "gigachat-3.1", NULL, NULL, "", "<|function_call|>{\"name\": \"%N\", \"arguments\": %A}", "", "",
     NULL, "", NULL},
    {"gigachat-3", NULL, "gigachat-3", NULL, NULL, "",
     "<|message_sep|>\n\nfunction call<|role_sep|>\n{\"name\": \"%N\", \"arguments\": %A}", "", "", NULL, "", NULL},
    {"command-r-plus", NULL, "command-r-plus", NULL, NULL, "Action:\n```json\n[\n    ",
     "{\"tool_name\": \"%N\", \"parameters\": %A}", ",\n    ", "\n]```", NULL, "\n", NULL},
    {"lfm2", NULL, "lfm2", NULL, NULL, "<|tool_call_start|>[", "%N(%Y)", ", ", "]<|tool_call_end|>", NULL, "", NULL},
    {"lfm2.5", "think", "lfm2", "<think>", "</think>\n", "<|tool_call_start|>[", "%N(%Y)", ", ", "]<|tool_call_end|>",
     NULL, "\n", NULL},
    /* the prompt ends with ">>>": the reply opens with "all\n" and text, or with a call */
    {"functionary-v3.2", NULL, "functionary-v3.2", NULL, NULL, "", "%N\n%A", ">>>", "", NULL, ">>>", "all\n"},
};

/* Two calls: get_weather with a string and an integer, now without arguments. */
static const char *const NAMES[] = {"get_weather", "now"};
static const char *const ARGS[] = {"{\"city\": \"Oslo\", \"days\": 2}", "{}"};
static const char *const ARGS_OUT[] = {"{\"city\":\"Oslo\",\"days\":2}", "{}"};
static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]";

typedef struct text {
    char s[4096];
    size_t n;
} text;

static void put(text *t, const char *s) {
    size_t k = strlen(s);
    if (t->n + k < sizeof t->s) memcpy(t->s + t->n, s, k + 1), t->n += k;
}

/* One call of call k, in the family's syntax. */
static void write_call(text *t, const family *f, int k) {
    char idx[16];
    snprintf(idx, sizeof idx, "%d", k);
    for (const char *p = f->call; *p; p++) {
        if (*p != '%') {
            char c[2] = {*p, 0};
            put(t, c);
            continue;
        }
        switch (*++p) {
        case 'N': put(t, NAMES[k]); break;
        case 'A': put(t, ARGS[k]); break;
        case 'I': put(t, idx); break;
        case 'Y': put(t, k == 0 ? "city=\"Oslo\", days=2" : ""); break; /* Python's keyword arguments */
        case 'P':
            if (k == 0) { /* city Oslo, days 2 */
                const char *kv[2][2] = {{"city", "Oslo"}, {"days", "2"}};
                for (int q = 0; q < 2; q++)
                    for (const char *r = f->param; *r; r++) {
                        if (*r == '%' && r[1] == 'K') put(t, kv[q][0]), r++;
                        else if (*r == '%' && r[1] == 'V') put(t, kv[q][1]), r++;
                        else {
                            char c[2] = {*r, 0};
                            put(t, c);
                        }
                    }
            }
            break;
        }
    }
}

static void write_calls(text *t, const family *f, int n) {
    put(t, f->open);
    for (int k = 0; k < n; k++) {
        if (k) put(t, f->sep);
        write_call(t, f, k);
    }
    put(t, f->close);
}

/* The reply's split, whole; and every prefix's, streamed, a prefix of the whole's. */
static void expect_reply(const family *f, const char *what, const srv_reply_opts *o, const char *t,
                         const char *reasoning, const char *content, int n_calls) {
    size_t n = strlen(t);
    srv_reply r;
    if (srv_reply_parse(o, t, n, true, &r)) {
        CHECK_MSG(0, "%s %s: out of memory", f->name, what);
        return;
    }
    CHECK_MSG(!strcmp(r.reasoning, reasoning), "%s %s: reasoning '%s', not '%s' in '%s'", f->name, what, r.reasoning,
              reasoning, t);
    if (content) CHECK_MSG(!strcmp(r.content, content), "%s %s: content '%s', not '%s' in '%s'", f->name, what,
                           r.content, content, t);
    CHECK_MSG(r.calls.n == n_calls, "%s %s: %d calls, not %d, in '%s'", f->name, what, r.calls.n, n_calls, t);
    for (int k = 0; k < r.calls.n && k < 2; k++) {
        CHECK_MSG(!strcmp(r.calls.calls[k].name, NAMES[k]), "%s %s: call %d is %s", f->name, what, k, r.calls.calls[k].name);
        CHECK_MSG(!strcmp(r.calls.calls[k].arguments, ARGS_OUT[k]), "%s %s: arguments %s", f->name, what,
                  r.calls.calls[k].arguments);
    }
    size_t last_r = 0, last_c = 0;
    bool ok = true;
    for (size_t k = 0; k <= n && ok; k++) {
        if (k < n && (t[k] & 0xC0) == 0x80) continue; /* streams carry whole characters */
        srv_reply p;
        if (srv_reply_parse(o, t, k, false, &p)) break;
        ok = p.n_reasoning >= last_r && p.n_content >= last_c && p.n_reasoning <= r.n_reasoning &&
             p.n_content <= r.n_content && !memcmp(p.reasoning, r.reasoning, p.n_reasoning) &&
             !memcmp(p.content, r.content, p.n_content) && p.calls.n == 0;
        CHECK_MSG(ok, "%s %s: after %zu bytes the stream has '%s' / '%s', not a prefix of '%s' / '%s'", f->name, what, k,
                  p.reasoning, p.content, r.reasoning, r.content);
        last_r = p.n_reasoning, last_c = p.n_content;
        srv_reply_free(&p);
    }
    srv_reply_free(&r);
}

static void test_family(const family *f) {
    const srv_call_syntax *sx = srv_call_syntax_named(f->calls);
    const srv_reasoning_style *rs = f->reasoning ? srv_reasoning_style_named(f->reasoning) : NULL;
    CHECK_MSG(sx != NULL, "no syntax %s", f->calls);
    if (!sx) return;
    srv_reply_opts o = {.reasoning = rs, .calls = sx, .tools_json = TOOLS, .opened = sx->text_recipient ? sx : NULL};
    bool many = !sx->one_call && sx->kind != SRV_CALLS_JSON_BARE;
    const char *lead = f->text_lead ? f->text_lead : "";
    text t = {0};
    put(&t, lead), put(&t, "The weather is fine.");
    expect_reply(f, "plain", &o, t.s, "", "The weather is fine.", 0);
    if (rs) {
        t = (text){0};
        put(&t, f->think_open), put(&t, "Oslo is cold."), put(&t, f->think_close);
        expect_reply(f, "reasoning only", &o, t.s, "Oslo is cold.", "", 0);
        put(&t, "Wear a coat.");
        expect_reply(f, "reasoning and answer", &o, t.s, "Oslo is cold.", "Wear a coat.", 0);
        /* the prompt opened it: the reply starts inside */
        srv_reply_opts in = o;
        in.in_reasoning = true;
        expect_reply(f, "reasoning the prompt opened", &in, t.s + strlen(f->think_open), "Oslo is cold.", "Wear a coat.", 0);
        /* cut inside the reasoning: still reasoning */
        t = (text){0};
        put(&t, f->think_open), put(&t, "Oslo is co");
        expect_reply(f, "cut reasoning", &o, t.s, "Oslo is co", "", 0);
        /* reasoning then a call */
        t = (text){0};
        put(&t, f->think_open), put(&t, "A call."), put(&t, f->think_close);
        write_calls(&t, f, 1);
        expect_reply(f, "reasoning then a call", &o, t.s, "A call.", "", 1);
        /* reasoning_format none: all content */
        srv_reply_opts none = o;
        none.reasoning = NULL;
        t = (text){0};
        put(&t, f->think_open), put(&t, "Oslo is cold."), put(&t, f->think_close), put(&t, "Wear a coat.");
        expect_reply(f, "reasoning_format none", &none, t.s, "", t.s, 0);
    }
    t = (text){0};
    write_calls(&t, f, 1);
    expect_reply(f, "one call", &o, t.s, "", "", 1);
    if (many) {
        t = (text){0};
        write_calls(&t, f, 2);
        expect_reply(f, "parallel calls", &o, t.s, "", "", 2);
        /* cut inside the second call: the first stays a call, the rest is content */
        size_t whole = t.n;
        text one = {0};
        write_calls(&one, f, 1);
        size_t cut = one.n - strlen(f->close) + (whole - one.n) / 2;
        char saved = t.s[cut];
        t.s[cut] = 0;
        srv_reply r;
        CHECK(srv_reply_parse(&o, t.s, cut, true, &r) == 0);
        CHECK_MSG(r.calls.n == 1 && r.n_content > 0 && strstr(t.s, r.content), "%s cut call: %d calls, content '%s'",
                  f->name, r.calls.n, r.content);
        srv_reply_free(&r);
        t.s[cut] = saved;
    }
    if (f->text_then_calls) {
        t = (text){0};
        put(&t, lead), put(&t, "Let me check."), put(&t, f->text_then_calls);
        write_calls(&t, f, 1);
        expect_reply(f, "calls after text", &o, t.s, "", "Let me check.", 1);
    }
    /* malformed: the arguments are not JSON, or the call does not end where it should: content */
    t = (text){0};
    write_calls(&t, f, 1);
    if (sx->param_open) { /* its end marker lost, other text after it */
        char *end = strstr(t.s, mk_lead(sx->call_close));
        if (end) strcpy(end, " and then");
    } else {
        char *bad = strstr(t.s, "\"Oslo\"");
        if (bad) bad[0] = 'O'; /* "Oslo" -> OOslo": not JSON */
    }
    expect_reply(f, "malformed call", &o, t.s, "", t.s, 0);
    /* tools off: calls are content */
    srv_reply_opts off = o;
    off.calls = NULL;
    t = (text){0};
    write_calls(&t, f, 1);
    expect_reply(f, "tools off", &off, t.s, "", t.s, 0);
    if (f->text_lead) { /* the recipient before a text is the format's, calls or not */
        t = (text){0};
        put(&t, lead), put(&t, "The weather is fine.");
        expect_reply(f, "tools off, plain", &off, t.s, "", "The weather is fine.", 0);
    }
}

/* ---- The grammar of a required call, in each family's syntax ------------------------------- */

/* Whether the grammar (GBNF text) takes exactly the sentence s. */
static bool grammar_takes(const char *gbnf, const char *s) {
    gr_grammar *g = NULL;
    gr_matcher *m = NULL;
    nc_err err;
    bool ok = gr_parse(&g, gbnf, strlen(gbnf), &err) == 0 && gr_matcher_new(&m, g, &err) == 0 &&
              gr_matcher_feed(m, (const uint8_t *)s, strlen(s)) && gr_matcher_can_end(m);
    if (!g) fprintf(stderr, "grammar: %s\n%s\n", err.msg, gbnf);
    gr_matcher_free(m);
    gr_free(g);
    return ok;
}

static void test_family_grammar(const family *f) {
    if (!strcmp(f->name, "command-r7b")) return; /* its calls carry ids the grammar does not write */
    const srv_call_syntax *sx = srv_call_syntax_named(f->calls);
    srv_error e;
    char *g = srv_tool_grammar(sx, TOOLS, NULL, true, NULL, NULL, NULL, &e);
    CHECK_MSG(g != NULL, "%s: %s", f->name, e.message);
    if (!g) return;
    text t = {0};
    write_calls(&t, f, 1);
    CHECK_MSG(grammar_takes(g, t.s), "%s: the grammar refuses '%s'", f->name, t.s);
    if (!sx->one_call && sx->kind != SRV_CALLS_JSON_BARE) {
        t = (text){0};
        write_calls(&t, f, 2);
        CHECK_MSG(grammar_takes(g, t.s), "%s: the grammar refuses '%s'", f->name, t.s);
    }
    CHECK_MSG(!grammar_takes(g, "The weather is fine."), "%s: the grammar takes text", f->name);
    free(g);
    /* the named tool only, one call */
    g = srv_tool_grammar(sx, TOOLS, "now", false, NULL, NULL, NULL, &e);
    t = (text){0};
    write_calls(&t, f, 1);
    CHECK_MSG(g && !grammar_takes(g, t.s), "%s: a grammar for now takes get_weather", f->name);
    free(g);
    /* after the rest of a reasoning the prompt opened */
    if (f->reasoning) {
        const srv_reasoning_style *rs = srv_reasoning_style_named(f->reasoning);
        char *lead = srv_reasoning_lead(rs);
        g = lead ? srv_tool_grammar(sx, TOOLS, NULL, true, lead, NULL, NULL, &e) : NULL;
        t = (text){0};
        put(&t, "Cold < warm, so: "), put(&t, f->think_close);
        write_calls(&t, f, 1);
        CHECK_MSG(g && grammar_takes(g, t.s), "%s: the grammar with a lead refuses '%s'", f->name, t.s);
        t = (text){0};
        write_calls(&t, f, 1);
        CHECK_MSG(g && !grammar_takes(g, t.s), "%s: the grammar with a lead takes a call without the reasoning's end",
                  f->name);
        free(lead);
        free(g);
    }
}

/* ---- gpt-oss ------------------------------------------------------------------------------- */

static void test_harmony(void) {
    static const family h = {.name = "gpt-oss", .reasoning = "harmony", .calls = "harmony"};
    srv_reply_opts o = {.reasoning = srv_reasoning_style_named("harmony"), .calls = srv_call_syntax_named("harmony"),
                        .tools_json = TOOLS};
    const char *A = "<|channel|>analysis<|message|>Oslo is cold.<|end|>";
    const char *F = "<|start|>assistant<|channel|>final<|message|>Wear a coat.";
    const char *C = "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                    "{\"city\": \"Oslo\", \"days\": 2}";
    char t[1024];
    expect_reply(&h, "plain", &o, "The weather is fine.", "", "The weather is fine.", 0);
    expect_reply(&h, "reasoning only", &o, A, "Oslo is cold.", "", 0);
    snprintf(t, sizeof t, "%s%s", A, F);
    expect_reply(&h, "reasoning and answer", &o, t, "Oslo is cold.", "Wear a coat.", 0);
    expect_reply(&h, "answer", &o, F + strlen("<|start|>assistant"), "", "Wear a coat.", 0);
    expect_reply(&h, "cut reasoning", &o, "<|channel|>analysis<|message|>Oslo is co", "Oslo is co", "", 0);
    snprintf(t, sizeof t, "%s%s", A, C);
    expect_reply(&h, "reasoning then a call", &o, t, "Oslo is cold.", "", 1);
    expect_reply(&h, "one call", &o, C + strlen("<|start|>assistant"), "", "", 1);
    /* the recipient before the channel, as the template renders earlier calls */
    expect_reply(&h, "one call, recipient first", &o,
                 " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Oslo\", \"days\": 2}", "",
                 "", 1);
    snprintf(t, sizeof t, "<|channel|>commentary<|message|>Let me check.<|end|>%s", C);
    expect_reply(&h, "calls after text", &o, t, "", "Let me check.", 1);
    snprintf(t, sizeof t, "%s%.40s", A, C);
    expect_reply(&h, "cut call", &o, t, "Oslo is cold.", t + strlen(A), 0);
    snprintf(t, sizeof t, "%s<|start|>assistant<|channel|>commentary to=functions.now <|constrain|>json<|message|>{oops", A);
    expect_reply(&h, "malformed call", &o, t, "Oslo is cold.", t + strlen(A), 0);
    srv_reply_opts none = o;
    none.reasoning = NULL;
    snprintf(t, sizeof t, "%s%s", A, F);
    expect_reply(&h, "reasoning_format none", &none, t, "", t, 0);
    /* a required call's grammar: an analysis message may come first */
    srv_error e;
    char *lead = srv_reasoning_lead(o.reasoning);
    char *g = lead ? srv_tool_grammar(o.calls, TOOLS, NULL, true, lead, NULL, NULL, &e) : NULL;
    CHECK(g && grammar_takes(g, C + strlen("<|start|>assistant")));
    snprintf(t, sizeof t, "%s%s", A, C);
    CHECK(g && grammar_takes(g, t));
    CHECK(g && !grammar_takes(g, "<|channel|>final<|message|>No."));
    free(g);
    free(lead);
}

/* ---- The reasoning budget ------------------------------------------------------------------ */

static void test_budget(void) {
    const srv_reasoning_style *s = srv_reasoning_style_named("think");
    srv_think_watch w;
    /* opened by the reply: two tokens of reasoning, then its end is due */
    srv_think_watch_init(&w, false);
    const char *steps[] = {"<think>", "<think>\nab", "<think>\nabcd"};
    CHECK(!srv_think_budget_spent(&w, s, steps[0], strlen(steps[0]), 2));
    CHECK(!srv_think_budget_spent(&w, s, steps[1], strlen(steps[1]), 2));
    CHECK(srv_think_budget_spent(&w, s, steps[2], strlen(steps[2]), 2));
    CHECK(!srv_think_budget_spent(&w, s, steps[2], strlen(steps[2]), 2)); /* once */
    /* ended within its budget: never */
    srv_think_watch_init(&w, true);
    CHECK(!srv_think_budget_spent(&w, s, "ab</think>", 10, 2));
    CHECK(!srv_think_budget_spent(&w, s, "ab</think>cd", 12, 2));
    CHECK(!srv_think_budget_spent(&w, s, "ab</think>cdef", 14, 2));
    /* no reasoning at all */
    srv_think_watch_init(&w, false);
    CHECK(!srv_think_budget_spent(&w, s, "Hi", 2, 0));
    CHECK(!srv_think_budget_spent(&w, s, "Hi there", 8, 0));
    /* a budget of 0: due as soon as it opens */
    srv_think_watch_init(&w, false);
    CHECK(srv_think_budget_spent(&w, s, "<think>", 7, 0));
    /* which prompts leave the reply inside the reasoning */
    CHECK(srv_reasoning_opened(s, "<|im_start|>assistant\n<think>\n", 30));
    CHECK(!srv_reasoning_opened(s, "<|im_start|>assistant\n<think>\n\n</think>\n\n", 41));
    CHECK(!srv_reasoning_opened(s, "<|im_start|>assistant\n", 22));
    CHECK(!srv_reasoning_opened(NULL, "<think>", 7));
}

/* What fuzz_reply found: each a stream that was not a prefix of its whole reply, or a crash. */
static void test_fuzz_findings(void) {
    static const family hermes = {.name = "hermes"}, gpt = {.name = "gpt-oss"};
    srv_reply_opts o = {.calls = srv_call_syntax_named("hermes"), .tools_json = TOOLS};
    /* blanks before the text before a call are content, as streamed */
    expect_reply(&hermes, "leading blanks", &o,
                 "  Hi <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 2}}</tool_call>",
                 "", "  Hi", 1);
    /* a parameter's value holding a NUL (a reply's bytes are any) */
    o.calls = srv_call_syntax_named("qwen3-coder");
    const char t[] = "<tool_call>\n<function=get_weather>\n<parameter=days>\n2\0 3\n</parameter>\n</function>\n</tool_call>";
    srv_reply r;
    CHECK(srv_reply_parse(&o, t, sizeof t - 1, true, &r) == 0 && r.calls.n == 1);
    CHECK(r.calls.n == 1 && !strcmp(r.calls.calls[0].arguments, "{\"days\":\"2\"}"));
    srv_reply_free(&r);
    /* gpt-oss: a call, then more: the stream holds both until the reply is whole */
    o = (srv_reply_opts){.reasoning = srv_reasoning_style_named("harmony"), .calls = srv_call_syntax_named("harmony"),
                         .tools_json = TOOLS};
    expect_reply(&gpt, "a malformed call then an answer", &o,
                 "<|channel|>commentary to=functions.now <|constrain|>json<|message|>{x<|call|><|start|>assistant"
                 "<|channel|>final<|message|>Done.", "",
                 "<|channel|>commentary to=functions.now <|constrain|>json<|message|>{x<|call|>Done.", 0);
}

/* ---- LFM2's Python calls ------------------------------------------------------------------ */

static void test_python_calls(void) {
    const srv_call_syntax *sx = srv_call_syntax_named("lfm2");
    srv_reply_opts o = {.calls = sx};
    /* Python's literals, either quote, escapes, nested lists, tuples and dicts, blanks anywhere */
    const char *t = "<|tool_call_start|>[ f(a='it\\'s \"x\"\\n', b=True, c=None, d=[1, 2.5, -3e2, False], "
                    "e={'k': \"v\", \"n\": {'m': ()}}, g=(1,), h=\"\\u00e9\\x41\") , g2() ]<|tool_call_end|> after";
    srv_reply r;
    CHECK(srv_reply_parse(&o, t, strlen(t), true, &r) == 0);
    CHECK_MSG(r.calls.n == 2 && !strcmp(r.calls.calls[0].name, "f") && !strcmp(r.calls.calls[1].name, "g2") &&
                  !strcmp(r.calls.calls[1].arguments, "{}") && !strcmp(r.content, "after"),
              "%d calls, content '%s'", r.calls.n, r.content);
    if (r.calls.n == 2)
        CHECK_MSG(!strcmp(r.calls.calls[0].arguments,
                          "{\"a\":\"it's \\\"x\\\"\\n\",\"b\":true,\"c\":null,\"d\":[1,2.5,-300,false],"
                          "\"e\":{\"k\":\"v\",\"n\":{\"m\":[]}},\"g\":[1],\"h\":\"\xc3\xa9" "A\"}"),
                  "arguments %s", r.calls.calls[0].arguments);
    srv_reply_free(&r);
    /* not Python: content, whole */
    static const char *const bad[] = {
        "<|tool_call_start|>[f(a=)]<|tool_call_end|>", "<|tool_call_start|>[f(a='x)]<|tool_call_end|>",
        "<|tool_call_start|>[f(1)]<|tool_call_end|>",  "<|tool_call_start|>[f(a=1 b=2)]<|tool_call_end|>",
        "<|tool_call_start|>[f(a={1: 2})]<|tool_call_end|>", "<|tool_call_start|>f(a=1)<|tool_call_end|>",
        "<|tool_call_start|>[f(a='\\x00')]<|tool_call_end|>", "<|tool_call_start|>[f(a=1e)]<|tool_call_end|>",
        "<|tool_call_start|>[f(a='\\xZ')]<|tool_call_end|>", "<|tool_call_start|>[f(a='\\u12')]<|tool_call_end|>",
        "<|tool_call_start|>[f(", "<|tool_call_start|>[f(a=1, ", "<|tool_call_start|>[f(a=[1, 2", /* cut */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(srv_reply_parse(&o, bad[i], strlen(bad[i]), true, &r) == 0);
        CHECK_MSG(r.calls.n == 0 && !strcmp(r.content, bad[i]), "'%s': %d calls, content '%s'", bad[i], r.calls.n,
                  r.content);
        srv_reply_free(&r);
    }
    /* fed back: an assistant's calls into its content, as the model writes them, and read back alike */
    const char msgs[] = "[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"Let me see.\","
                        "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                        "\"arguments\":{\"city\":\"O'slo \\\"x\\\"\",\"days\":2,\"f\":[true,false,null]}}},{\"type\":\"function\","
                        "\"function\":{\"name\":\"now\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":"
                        "\"call_1\",\"content\":\"cold\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":"
                        "\"function\",\"function\":{\"name\":\"now\",\"arguments\":{}}}]}]";
    char *fed = srv_calls_python_into_content(sx, msgs);
    cJSON *arr = fed ? cJSON_Parse(fed) : NULL;
    const cJSON *a1 = cJSON_GetArrayItem(arr, 1), *a3 = cJSON_GetArrayItem(arr, 3);
    const char *c1 = cJSON_GetStringValue(cJSON_GetObjectItem(a1, "content"));
    const char *c3 = cJSON_GetStringValue(cJSON_GetObjectItem(a3, "content"));
    CHECK_MSG(c1 && !strcmp(c1, "Let me see.<|tool_call_start|>[get_weather(city=\"O'slo \\\"x\\\"\", days=2, "
                                "f=[True, False, None]), now()]<|tool_call_end|>"),
              "fed back: %s", c1 ? c1 : "(none)");
    CHECK(c3 && !strcmp(c3, "<|tool_call_start|>[now()]<|tool_call_end|>"));
    CHECK(!cJSON_GetObjectItem(a1, "tool_calls") && !cJSON_GetObjectItem(a3, "tool_calls"));
    if (c1) {
        CHECK(srv_reply_parse(&o, c1, strlen(c1), true, &r) == 0);
        CHECK(r.calls.n == 2 && !strcmp(r.content, "Let me see.") &&
              !strcmp(r.calls.calls[0].arguments, "{\"city\":\"O'slo \\\"x\\\"\",\"days\":2,\"f\":[true,false,null]}"));
        srv_reply_free(&r);
    }
    cJSON_Delete(arr);
    free(fed);
    /* the grammar writes Python's literals */
    srv_error e;
    char *g = srv_tool_grammar(sx,
                               "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                               "\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":[\"string\",\"null\"],"
                               "\"enum\":[\"true\",null]},\"c\":{\"type\":\"integer\"}},\"required\":[\"c\"]}}}]",
                               NULL, true, NULL, NULL, NULL, &e);
    CHECK(g != NULL);
    if (g) {
        CHECK(grammar_takes(g, "<|tool_call_start|>[f(a=True, b=None, c=1), f(c=2), f(b=\"true\", c=3)]<|tool_call_end|>"));
        CHECK(!grammar_takes(g, "<|tool_call_start|>[f(a=true, c=1)]<|tool_call_end|>"));
        CHECK(!grammar_takes(g, "<|tool_call_start|>[f(a=True)]<|tool_call_end|>")); /* c is required */
        CHECK(!grammar_takes(g, "<|tool_call_start|>[f(, c=1)]<|tool_call_end|>"));
    }
    free(g);
}

/* ---- Functionary v3.2's recipients -------------------------------------------------------- */

/* text splits whole into content and calls of these names (joined by ','), and every prefix,
 * streamed, into a prefix of that content and no calls. */
static void expect_split(const srv_reply_opts *o, const char *t, const char *content, const char *names) {
    size_t n = strlen(t);
    srv_reply r;
    if (srv_reply_parse(o, t, n, true, &r)) {
        CHECK_MSG(0, "'%s': out of memory", t);
        return;
    }
    char got[256] = "";
    for (int k = 0; k < r.calls.n; k++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", k ? "," : "", r.calls.calls[k].name);
    CHECK_MSG(!strcmp(r.content, content) && !strcmp(got, names), "'%s': content '%s', calls '%s', not '%s', '%s'", t,
              r.content, got, content, names);
    for (size_t k = 0; k <= n; k++) {
        srv_reply p;
        if (srv_reply_parse(o, t, k, false, &p)) break;
        bool ok = p.calls.n == 0 && p.n_content <= r.n_content && !memcmp(p.content, r.content, p.n_content);
        CHECK_MSG(ok, "'%s' after %zu bytes: the stream has '%s', not a prefix of '%s'", t, k, p.content, r.content);
        srv_reply_free(&p);
    }
    srv_reply_free(&r);
}

static void test_functionary_v32(void) {
    const srv_call_syntax *sx = srv_call_syntax_named("functionary-v3.2");
    static const char tools[] =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"city\":{\"type\":\"string\"}}}}},{\"type\":\"function\",\"function\":{\"name\":"
        "\"all_cities\"}}]";
    /* the template's generation prompt ends with >>>: the reply opens with a recipient */
    static const char prompt[] = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                                 "<|start_header_id|>assistant<|end_header_id|>\n\n>>>";
    CHECK(srv_call_opened(sx, prompt, strlen(prompt)));
    CHECK(!srv_call_opened(sx, prompt, strlen(prompt) - 3));
    CHECK(!srv_call_opened(srv_call_syntax_named("hermes"), prompt, strlen(prompt)));
    srv_reply_opts o = {.calls = sx, .opened = sx, .tools_json = tools};
    expect_split(&o, "all\n\nHello.", "Hello.", "");
    expect_split(&o, "all", "all", "");                      /* a reply of one word */
    expect_split(&o, "all_cities\n{}", "", "all_cities");    /* a name that starts with "all" */
    expect_split(&o, "alleged\n{}", "alleged\n{}", "");      /* no such tool: content */
    expect_split(&o, "Hello there>>>get_weather\n{\"city\": \"Oslo\"}", "Hello there", "get_weather");
    expect_split(&o, "get_weather\n{\"city\": \"Oslo\"}\n>>>all_cities\n{}", "", "get_weather,all_cities");
    expect_split(&o, "get_weather\n{\"city\": \"Oslo\"} and more", "and more", "get_weather");
    expect_split(&o, "get_weather\nOslo", "get_weather\nOslo", "");
    expect_split(&o, "all\nText>>>all\nMore.", "Text>>>all\nMore.", ""); /* a second text recipient: kept */
    expect_split(&o, "Cold, so\n{\"city\": 1}", "Cold, so\n{\"city\": 1}", "");
    srv_reply_opts first = o;
    first.first_call_only = true;
    expect_split(&first, "get_weather\n{}>>>all_cities\n{}", ">>>all_cities\n{}", "get_weather");
    /* the arguments go back to the template as text: it joins them to strings */
    char *fed = srv_calls_args_as_text("[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\","
                                       "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
                                       "{\"city\":\"Oslo\"}}},{\"type\":\"function\",\"function\":{\"name\":\"x\","
                                       "\"arguments\":\"{}\"}}]}]");
    CHECK_MSG(fed && !strcmp(fed, "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":"
                                  "\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
                                  "\"{\\\"city\\\":\\\"Oslo\\\"}\"}},{\"type\":\"function\",\"function\":"
                                  "{\"name\":\"x\",\"arguments\":\"{}\"}}]}]"),
              "fed back: %s", fed ? fed : "(none)");
    free(fed);
    /* the grammar writes the first call without the >>> the prompt wrote; one call without parallel */
    srv_error e;
    char *g = srv_tool_grammar(sx, tools, NULL, false, NULL, NULL, NULL, &e);
    CHECK(g && grammar_takes(g, "get_weather\n{\"city\": \"Oslo\"}"));
    CHECK(g && !grammar_takes(g, ">>>get_weather\n{\"city\": \"Oslo\"}"));
    CHECK(g && !grammar_takes(g, "get_weather\n{\"city\": \"Oslo\"}>>>all_cities\n{}"));
    CHECK(g && !grammar_takes(g, "all\nHello."));
    free(g);
}

int main(void) {
    test_detection();
    test_python_calls();
    test_functionary_v32();
    test_fuzz_findings();
    for (size_t i = 0; i < sizeof FAMILIES / sizeof *FAMILIES; i++) {
        test_family(&FAMILIES[i]);
        test_family_grammar(&FAMILIES[i]);
    }
    test_harmony();
    test_budget();
    return test_summary("test_chat_formats");
}
