/* The public reading of a chat reply (nc_chat_reply_parse, nc_chat_reasoning_field), through
 * include/nucleus.h only, on real templates (tests/data/templates) given to qwen2's model as a
 * server's --chat-template is: Qwen3 (think, Hermes calls), Qwen3.5 (a prompt that opens the
 * reasoning; qwen3-coder calls), gpt-oss (harmony channels), Functionary v3.2 (a prompt that
 * opens the recipient) and Qwen2.5 (no reasoning). Plain
 * replies, reasoning and answer, a tool call in OpenAI's shape with its id, a reply cut inside its
 * reasoning, reasoning kept in the content, and every prefix read as a stream (done false): a
 * prefix of the whole reply's reasoning and content. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "nucleus.h"
#include "test.h"

static nc_model *model;

static const char *TOOLS = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
                           "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
                           "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"]}}}]";

static nc_chat_template *load_template(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "tests/data/templates/%s.jinja", name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        CHECK_MSG(0, "cannot open %s", path);
        return NULL;
    }
    static char src[1 << 17];
    size_t n = fread(src, 1, sizeof src, f);
    fclose(f);
    nc_chat_template *t = NULL;
    nc_err err;
    if (nc_chat_template_from_source(&t, model, src, n, &err)) CHECK_MSG(0, "%s: %s", name, err.msg);
    return t;
}

/* The whole reply of text split as expected, and every prefix of it read as a stream giving
 * prefixes of the whole's reasoning and content. */
static void expect(const char *what, const nc_chat_template *t, const nc_reply_params *p, const char *text,
                   const char *reasoning, const char *content, int32_t n_calls) {
    nc_chat_reply r;
    nc_err err;
    size_t n = strlen(text);
    if (nc_chat_reply_parse(t, p, text, n, true, &r, &err)) {
        CHECK_MSG(0, "%s: %s", what, err.msg);
        return;
    }
    CHECK_MSG(!strcmp(r.reasoning, reasoning) && r.n_reasoning == strlen(reasoning), "%s: reasoning [%s]", what,
              r.reasoning);
    CHECK_MSG(!strcmp(r.content, content) && r.n_content == strlen(content), "%s: content [%s]", what, r.content);
    CHECK_MSG(r.n_tool_calls == n_calls, "%s: %d calls", what, r.n_tool_calls);
    cJSON *calls = cJSON_Parse(r.tool_calls);
    CHECK_MSG(cJSON_IsArray(calls) && cJSON_GetArraySize(calls) == n_calls, "%s: tool_calls %s", what, r.tool_calls);
    cJSON_Delete(calls);
    bool prefixes = true;
    for (size_t k = 0; k <= n && prefixes; k++) {
        nc_chat_reply s;
        if (nc_chat_reply_parse(t, p, text, k, false, &s, &err)) break;
        prefixes = s.n_reasoning <= r.n_reasoning && !memcmp(s.reasoning, r.reasoning, s.n_reasoning) &&
                   s.n_content <= r.n_content && !memcmp(s.content, r.content, s.n_content) && s.n_tool_calls == 0;
        if (!prefixes) fprintf(stderr, "  %s: prefix %zu: [%s] [%s]\n", what, k, s.reasoning, s.content);
        nc_chat_reply_free(&s);
    }
    CHECK_MSG(prefixes, "%s: a streamed prefix is not a prefix of the whole", what);
    nc_chat_reply_free(&r);
}

/* The call of a reply: OpenAI's shape, with an id. */
static void expect_call(const nc_chat_template *t, const nc_reply_params *p, const char *text, const char *name,
                        const char *city) {
    nc_chat_reply r;
    nc_err err;
    if (nc_chat_reply_parse(t, p, text, strlen(text), true, &r, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    cJSON *arr = cJSON_Parse(r.tool_calls), *c = cJSON_GetArrayItem(arr, 0);
    cJSON *id = cJSON_GetObjectItem(c, "id"), *type = cJSON_GetObjectItem(c, "type");
    cJSON *fn = cJSON_GetObjectItem(c, "function");
    cJSON *nm = cJSON_GetObjectItem(fn, "name"), *args = cJSON_GetObjectItem(fn, "arguments");
    CHECK_MSG(cJSON_IsString(id) && !strncmp(id->valuestring, "call_", 5) && strlen(id->valuestring) == 29, "id in %s",
              r.tool_calls);
    CHECK(cJSON_IsString(type) && !strcmp(type->valuestring, "function"));
    CHECK(cJSON_IsString(nm) && !strcmp(nm->valuestring, name));
    cJSON *a = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
    cJSON *cy = cJSON_GetObjectItem(a, "city");
    CHECK_MSG(cJSON_IsString(cy) && !strcmp(cy->valuestring, city), "arguments in %s", r.tool_calls);
    cJSON_Delete(a);
    cJSON_Delete(arr);
    nc_chat_reply_free(&r);
}

static void test_qwen3(void) {
    nc_chat_template *t = load_template("Qwen-Qwen3-0.6B");
    if (!t) return;
    CHECK(nc_chat_reasoning_field(t) && !strcmp(nc_chat_reasoning_field(t), "reasoning_content"));
    nc_reply_params p = {.tools_json = TOOLS, .parallel_tool_calls = true};
    expect("qwen3 plain", t, &p, "The answer is 4.", "", "The answer is 4.", 0);
    expect("qwen3 reasoning and answer", t, &p, "<think>\nTwo and two.\n</think>\n\nThe answer is 4.", "Two and two.",
           "The answer is 4.", 0);
    expect("qwen3 cut reasoning", t, &p, "<think>\nTwo and", "Two and", "", 0);
    const char *call = "<think>\nThe weather tool.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
                       "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
    expect("qwen3 call", t, &p, call, "The weather tool.", "", 1);
    expect_call(t, &p, call, "get_weather", "Oslo");
    expect("qwen3 text then a call", t, &p,
           "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
           "", "Let me look.", 1);
    expect("qwen3 two calls", t, &p,
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>",
           "", "", 2);
    const char *cut = "<tool_call>\n{\"name\": \"get_weather\", \"argu";
    expect("qwen3 cut call", t, &p, cut, "", cut, 0);
    /* no tools: no calls are looked for; keep_reasoning: reasoning_format none */
    nc_reply_params none = {0};
    expect("qwen3 no tools", t, &none, call + strlen("<think>\nThe weather tool.\n</think>\n\n"), "",
           call + strlen("<think>\nThe weather tool.\n</think>\n\n"), 0);
    nc_reply_params keep = {.keep_reasoning = true};
    expect("qwen3 reasoning kept", t, &keep, "<think>\nHm.\n</think>\n\nYes.", "", "<think>\nHm.\n</think>\n\nYes.", 0);
    expect("qwen3 NULL params", t, NULL, "<think>Hm.</think>Yes.", "Hm.", "Yes.", 0);
    nc_chat_template_free(t);
}

/* The prompt t renders for one user message, with the generation prompt; NULL (a failed check)
 * when it does not render. */
static char *user_prompt(nc_chat_template *t, size_t *len) {
    char *prompt = NULL;
    bool bos;
    nc_err err;
    if (nc_chat_render(t, "[{\"role\":\"user\",\"content\":\"Weather in Oslo?\"}]", NULL, true, &prompt, len, &bos,
                       &err)) {
        CHECK_MSG(0, "render: %s", err.msg);
        return NULL;
    }
    return prompt;
}

/* Qwen3.5's prompt opens the reasoning: the reply starts inside it. */
static void test_qwen35(void) {
    nc_chat_template *t = load_template("Qwen3.5-4B");
    if (!t) return;
    size_t len = 0;
    char *prompt = user_prompt(t, &len);
    if (!prompt) {
        nc_chat_template_free(t);
        return;
    }
    nc_reply_params p = {.prompt = prompt, .prompt_len = len, .tools_json = TOOLS};
    expect("qwen3.5 opened reasoning", t, &p, "Cold, surely.\n</think>\n\nWear a coat.", "Cold, surely.", "Wear a coat.",
           0);
    expect("qwen3.5 cut inside", t, &p, "Cold, sur", "Cold, sur", "", 0);
    const char *call = "Ask the tool.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n"
                       "</parameter>\n</function>\n</tool_call>";
    expect("qwen3.5 call", t, &p, call, "Ask the tool.", "", 1);
    expect_call(t, &p, call, "get_weather", "Oslo");
    /* without the prompt the reply is not known to start inside the reasoning */
    nc_reply_params bare = {0};
    expect("qwen3.5 without the prompt", t, &bare, "Cold.</think>Coat.", "", "Cold.</think>Coat.", 0);
    free(prompt);
    nc_chat_template_free(t);
}

static void test_gpt_oss(void) {
    nc_chat_template *t = load_template("openai-gpt-oss-120b");
    if (!t) return;
    CHECK(nc_chat_reasoning_field(t) && !strcmp(nc_chat_reasoning_field(t), "thinking"));
    nc_reply_params p = {.tools_json = TOOLS};
    expect("gpt-oss plain", t, &p, "Fine.", "", "Fine.", 0);
    expect("gpt-oss reasoning and answer", t, &p,
           "<|channel|>analysis<|message|>Oslo is cold.<|end|><|start|>assistant<|channel|>final<|message|>Wear a coat.",
           "Oslo is cold.", "Wear a coat.", 0);
    expect("gpt-oss cut", t, &p, "<|channel|>analysis<|message|>Oslo is co", "Oslo is co", "", 0);
    const char *call = "<|channel|>analysis<|message|>Ask.<|end|><|start|>assistant<|channel|>commentary "
                       "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}";
    expect("gpt-oss call", t, &p, call, "Ask.", "", 1);
    expect_call(t, &p, call, "get_weather", "Oslo");
    nc_chat_template_free(t);
}

/* Functionary v3.2's prompt ends with ">>>": the reply opens with "all\n" and text, or a call. */
static void test_functionary_v32(void) {
    nc_chat_template *t = load_template("meetkai-functionary-medium-v3.2");
    if (!t) return;
    size_t len = 0;
    char *prompt = user_prompt(t, &len);
    if (!prompt) {
        nc_chat_template_free(t);
        return;
    }
    nc_reply_params p = {.prompt = prompt, .prompt_len = len, .tools_json = TOOLS, .parallel_tool_calls = true};
    expect("functionary-v3.2 text", t, &p, "all\nWear a coat.", "", "Wear a coat.", 0);
    const char *call = "get_weather\n{\"city\": \"Oslo\"}";
    expect("functionary-v3.2 call", t, &p, call, "", "", 1);
    expect_call(t, &p, call, "get_weather", "Oslo");
    expect("functionary-v3.2 text then calls", t, &p,
           "all\nLet me look.>>>get_weather\n{\"city\": \"Oslo\"}>>>get_weather\n{\"city\": \"Rome\"}", "",
           "Let me look.", 2);
    nc_reply_params no_tools = {.prompt = prompt, .prompt_len = len};
    expect("functionary-v3.2 no tools", t, &no_tools, "all\nWear a coat.", "", "Wear a coat.", 0);
    expect("functionary-v3.2 without the prompt", t, NULL, "all\nWear a coat.", "", "all\nWear a coat.", 0);
    free(prompt);
    nc_chat_template_free(t);
}

static void test_no_reasoning(void) {
    nc_chat_template *t = load_template("Qwen-Qwen2.5-7B-Instruct");
    if (!t) return;
    CHECK(nc_chat_reasoning_field(t) == NULL);
    expect("qwen2.5 think is content", t, NULL, "<think>a</think>b", "", "<think>a</think>b", 0);
    nc_chat_template_free(t);
    /* no template at all: ChatML's reading (no reasoning; Hermes calls) */
    nc_reply_params p = {.tools_json = TOOLS};
    expect("no template", NULL, &p, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>",
           "", "", 1);
    expect("empty", NULL, &p, "", "", "", 0);
}

int main(void) {
    const char *shared = getenv("SHARED");
    char path[4096];
    snprintf(path, sizeof path, "%s/archs/qwen2/qwen2-f16.gguf", shared ? shared : "../shared");
    nc_err err;
    if (nc_model_load(&model, path, &err)) {
        CHECK_MSG(0, "cannot load %s: %s", path, err.msg);
        return test_summary("chat_reply");
    }
    test_qwen3();
    test_qwen35();
    test_gpt_oss();
    test_functionary_v32();
    test_no_reasoning();
    nc_model_free(model);
    return test_summary("chat_reply");
}
