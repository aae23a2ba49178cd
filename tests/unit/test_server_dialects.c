/* The other APIs' requests and replies without a model: Anthropic's Messages
 * (server/anthropic.h), OpenAI's Responses (server/responses.h) and llama.cpp's /completion
 * (server/llama_api.h) translated into chat and completions requests, their refusals naming the
 * field, and the replies written whole and as events from a reply made here. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/anthropic.h"
#include "server/llama_api.h"
#include "server/responses.h"
#include "test.h"

static const srv_limits lim = {.n_vocab = 1000, .max_n = 4};

static cJSON *messages_of(const srv_request *r) { return cJSON_Parse(r->messages_json); }

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int anth(const char *body, bool count, srv_request *r, srv_error *e) {
    memset(e, 0, sizeof *e);
    return srv_anthropic_request(body, strlen(body), count, &lim, r, e);
}

static void anth_refused(const char *body, const char *param, const char *needle) {
    srv_request r;
    srv_error e;
    CHECK_MSG(anth(body, false, &r, &e) == -1, "accepted: %s", body);
    CHECK_MSG(e.status == 400 && !strcmp(e.param, param), "param '%s' (%s) instead of '%s' for %s", e.param, e.message,
              param, body);
    CHECK_MSG(!needle || strstr(e.message, needle), "'%s' lacks '%s'", e.message, needle);
}

static void test_anthropic_request(void) {
    srv_request r;
    srv_error e;
    const char *body =
        "{\"model\":\"m\",\"max_tokens\":50,\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
        "\"stop_sequences\":[\"END\"],\"temperature\":0.5,\"top_k\":5,\"metadata\":{\"user_id\":\"u\"},"
        "\"tools\":[{\"name\":\"get_weather\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},"
        "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"s\"},"
        "{\"type\":\"text\",\"text\":\"Let me see.\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Oslo\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":[{\"type\":\"text\",\"text\":\"sunny\"}]},"
        "{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_2\",\"content\":\"broken\",\"is_error\":true},{\"type\":\"text\",\"text\":\"Thanks\"}]}]}";
    CHECK_MSG(anth(body, false, &r, &e) == 0, "%s (%s)", e.message, e.param);
    CHECK(r.api == SRV_API_CHAT && r.max_tokens == 50 && r.n_stop == 1 && !strcmp(r.stop[0], "END"));
    CHECK(r.temperature == 0.5f && r.top_k == 5 && r.reasoning_budget == 1024);
    CHECK(r.tool_choice == SRV_TOOLS_REQUIRED && !r.parallel_tool_calls && r.n_tools == 1);
    CHECK(r.template_kwargs_json && strstr(r.template_kwargs_json, "\"enable_thinking\":true"));
    cJSON *m = messages_of(&r);
    CHECK(cJSON_GetArraySize(m) == 6);
    const cJSON *sys = cJSON_GetArrayItem(m, 0), *asst = cJSON_GetArrayItem(m, 2), *t1 = cJSON_GetArrayItem(m, 3),
                *t2 = cJSON_GetArrayItem(m, 4), *u = cJSON_GetArrayItem(m, 5);
    CHECK(!strcmp(str(sys, "role"), "system") && !strcmp(str(sys, "content"), "Be brief."));
    CHECK(!strcmp(str(asst, "role"), "assistant") && !strcmp(str(asst, "content"), "Let me see.") &&
          !strcmp(str(asst, "reasoning_content"), "hmm"));
    const cJSON *call = cJSON_GetArrayItem(cJSON_GetObjectItem(asst, "tool_calls"), 0);
    CHECK(call && !strcmp(str(call, "id"), "toolu_1"));
    const cJSON *fn = cJSON_GetObjectItem(call, "function");
    CHECK(fn && !strcmp(str(fn, "name"), "get_weather") && cJSON_IsObject(cJSON_GetObjectItem(fn, "arguments")));
    CHECK(!strcmp(str(t1, "role"), "tool") && !strcmp(str(t1, "tool_call_id"), "toolu_1") && !strcmp(str(t1, "content"), "sunny"));
    CHECK(!strcmp(str(t2, "content"), "Error: broken"));
    CHECK(!strcmp(str(u, "role"), "user") && !strcmp(str(u, "content"), "Thanks"));
    cJSON_Delete(m);
    srv_request_free(&r);

    CHECK(anth("{\"model\":\"m\",\"max_tokens\":5,\"thinking\":{\"type\":\"disabled\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
               false, &r, &e) == 0);
    CHECK(r.reasoning_budget == 0 && strstr(r.template_kwargs_json, "\"enable_thinking\":false"));
    srv_request_free(&r);
    CHECK(anth("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", true, &r, &e) == 0);
    CHECK(r.reasoning_budget == SRV_BUDGET_SERVER);
    srv_request_free(&r);
    CHECK(anth("{\"model\":\"m\",\"max_tokens\":5,\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"},"
               "\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"output_config\":{\"effort\":\"max\"},"
               "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", false, &r, &e) == 0);
    CHECK(r.tool_choice == SRV_TOOLS_NAMED && !strcmp(r.tool_choice_name, "f") && !strcmp(r.reasoning_effort, "high"));
    srv_request_free(&r);

    anth_refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens", "required");
    anth_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"frob\":1}", "frob", NULL);
    anth_refused("{\"model\":\"m\",\"max_tokens\":5,\"temperature\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                 "temperature", "0 to 1");
    anth_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}",
                 "messages[0].content[0]", "\"image\"");
    anth_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"b\"}]}]}",
                 "messages[0].content[0]", "user messages");
    anth_refused("{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}],"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "tools[0]", "server tools");
    anth_refused("{\"model\":\"m\",\"max_tokens\":5,\"thinking\":{\"type\":\"enabled\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                 "thinking.budget_tokens", NULL);
    anth_refused("{\"model\":\"m\",\"max_tokens\":5,\"stop_sequences\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\","
                 "\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                 "stop_sequences", NULL);
    anth_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "messages[0]", NULL);
    anth_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[]}", "messages", NULL);
    anth_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"x\":1}]}",
                 "messages[0].x", NULL);
    anth_refused("{\"model\":\"m\",\"max_tokens\":5,\"cache_control\":{\"type\":\"forever\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                 "cache_control", NULL);
    CHECK(anth("{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", true, &r, &e) == -1 &&
          !strcmp(e.param, "stream"));
    CHECK(anth("[1]", false, &r, &e) == -1 && e.status == 400);
}

/* A reply as the reply splitter would give it. */
static srv_reply reply_of(const char *reasoning, const char *content, const char *call_name, const char *call_args) {
    srv_reply r = {.reasoning = strdup(reasoning), .content = strdup(content), .n_reasoning = strlen(reasoning),
                   .n_content = strlen(content)};
    if (call_name) srv_tool_calls_add(&r.calls, call_name, call_args, false);
    return r;
}

static cJSON *events_of(const char *sse, int *n, char names[][48], int cap) {
    cJSON *arr = cJSON_CreateArray();
    *n = 0;
    for (const char *p = sse; (p = strstr(p, "event: "));) {
        const char *nl = strchr(p, '\n'), *data = strstr(p, "data: "), *end = data ? strstr(data, "\n\n") : NULL;
        if (!nl || !data || !end) break;
        if (*n < cap) snprintf(names[*n], 48, "%.*s", (int)(nl - p - 7), p + 7);
        char *json = strndup(data + 6, (size_t)(end - data - 6));
        cJSON_AddItemToArray(arr, cJSON_Parse(json));
        free(json);
        (*n)++;
        p = end;
    }
    return arr;
}

static void test_anthropic_reply(void) {
    srv_usage u = {.prompt_tokens = 20, .completion_tokens = 7, .cached_tokens = 5};
    srv_reply rp = reply_of("I think.", "Hello", "get_weather", "{\"city\":\"Oslo\"}");
    srv_dialect_end d = {.reply = &rp, .finish = NC_FINISH_STOP, .usage = &u};
    void *w = srv_anthropic_new("m1");
    char *whole = srv_anthropic.whole(w, &d);
    cJSON *j = cJSON_Parse(whole);
    CHECK(j && !strcmp(str(j, "type"), "message") && !strcmp(str(j, "model"), "m1") && !strcmp(str(j, "stop_reason"), "tool_use"));
    const cJSON *c = cJSON_GetObjectItem(j, "content");
    CHECK(cJSON_GetArraySize(c) == 3);
    CHECK(!strcmp(str(cJSON_GetArrayItem(c, 0), "type"), "thinking") && !strcmp(str(cJSON_GetArrayItem(c, 0), "thinking"), "I think."));
    CHECK(!strcmp(str(cJSON_GetArrayItem(c, 1), "text"), "Hello"));
    const cJSON *use = cJSON_GetArrayItem(c, 2);
    CHECK(!strcmp(str(use, "type"), "tool_use") && !strcmp(str(cJSON_GetObjectItem(use, "input"), "city"), "Oslo"));
    const cJSON *usage = cJSON_GetObjectItem(j, "usage");
    CHECK(cJSON_GetObjectItem(usage, "input_tokens")->valueint == 15 &&
          cJSON_GetObjectItem(usage, "cache_read_input_tokens")->valueint == 5 &&
          cJSON_GetObjectItem(usage, "output_tokens")->valueint == 7);
    cJSON_Delete(j);
    free(whole);

    /* the events: start, ping, thinking (with its signature), text, the call, the end */
    char *sse = srv_anthropic.begin(w, 20); /* one call per statement: each moves the writer on */
    sse = srv_text_cat(sse, srv_anthropic.delta(w, "I ", 2, "", 0, NULL, 0));
    sse = srv_text_cat(sse, srv_anthropic.delta(w, "think.", 6, "Hel", 3, NULL, 0));
    sse = srv_text_cat(sse, srv_anthropic.delta(w, "", 0, "lo", 2, NULL, 0));
    sse = srv_text_cat(sse, srv_anthropic.end(w, &d));
    char names[32][48];
    int n;
    cJSON *ev = events_of(sse, &n, names, 32);
    const char *want[] = {"message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
                          "content_block_delta", "content_block_stop", "content_block_start", "content_block_delta",
                          "content_block_delta", "content_block_stop", "content_block_start", "content_block_delta",
                          "content_block_stop", "message_delta", "message_stop"};
    CHECK_MSG(n == 16, "%d events: %s", n, sse);
    for (int i = 0; i < n && i < 16; i++) CHECK_MSG(!strcmp(names[i], want[i]), "event %d: %s, not %s", i, names[i], want[i]);
    CHECK(!strcmp(str(cJSON_GetObjectItem(cJSON_GetArrayItem(ev, 5), "delta"), "type"), "signature_delta"));
    CHECK(cJSON_GetObjectItem(cJSON_GetArrayItem(ev, 8), "index")->valueint == 1);
    CHECK(!strcmp(str(cJSON_GetObjectItem(cJSON_GetArrayItem(ev, 12), "delta"), "partial_json"), "{\"city\":\"Oslo\"}"));
    CHECK(!strcmp(str(cJSON_GetObjectItem(cJSON_GetArrayItem(ev, 14), "delta"), "stop_reason"), "tool_use"));
    cJSON_Delete(ev);
    free(sse);
    srv_anthropic.free(w);
    srv_reply_free(&rp);

    /* a stop string, and an error in Anthropic's shape */
    srv_reply plain = reply_of("", "Hi", NULL, NULL);
    srv_dialect_end ds = {.reply = &plain, .finish = NC_FINISH_STOP, .stop_word = "END", .usage = &u};
    w = srv_anthropic_new("m1");
    whole = srv_anthropic.whole(w, &ds);
    CHECK(strstr(whole, "\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\"") != NULL);
    free(whole);
    srv_anthropic.free(w);
    srv_reply_free(&plain);
    srv_error e;
    srv_error_set(&e, 404, "invalid_request_error", "model_not_found", "model", "no such model");
    char *err = srv_anthropic_error(&e);
    CHECK(!strcmp(err, "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\",\"message\":\"no such model\"}}"));
    free(err);
    /* a stream that fails ends with an error event */
    w = srv_anthropic_new("m1");
    srv_error_set(&e, 503, "server_error", NULL, NULL, "shutting down");
    err = srv_anthropic.error(w, &e);
    CHECK(!strcmp(err, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"shutting down\"}}\n\n"));
    free(err);
    srv_anthropic.free(w);
}

static int resp(const char *body, srv_request *r, void **w, srv_error *e) {
    memset(e, 0, sizeof *e);
    return srv_responses_request(body, strlen(body), &lim, "m1", r, w, e);
}

static void resp_refused(const char *body, const char *param) {
    srv_request r;
    srv_error e;
    void *w;
    CHECK_MSG(resp(body, &r, &w, &e) == -1 && w == NULL, "accepted: %s", body);
    CHECK_MSG(e.status == 400 && !strcmp(e.param, param), "param '%s' (%s) instead of '%s'", e.param, e.message, param);
}

static void test_responses(void) {
    srv_request r;
    srv_error e;
    void *w;
    const char *body =
        "{\"model\":\"m\",\"instructions\":\"Be brief.\",\"max_output_tokens\":30,\"store\":false,\"include\":[\"reasoning.encrypted_content\"],"
        "\"reasoning\":{\"effort\":\"low\",\"summary\":\"auto\"},\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},"
        "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"},\"strict\":true}],"
        "\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Hi\"}]},"
        "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"hmm\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"f\",\"arguments\":\"{}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"42\"},"
        "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"It is 42.\",\"annotations\":[]}]},"
        "{\"role\":\"user\",\"content\":\"Thanks\"}]}";
    CHECK_MSG(resp(body, &r, &w, &e) == 0, "%s (%s)", e.message, e.param);
    CHECK(r.max_tokens == 30 && r.tool_choice == SRV_TOOLS_NAMED && !strcmp(r.reasoning_effort, "low"));
    cJSON *m = messages_of(&r);
    CHECK_MSG(cJSON_GetArraySize(m) == 6, "%s", r.messages_json);
    const cJSON *a = cJSON_GetArrayItem(m, 2);
    CHECK(!strcmp(str(cJSON_GetArrayItem(m, 0), "role"), "system"));
    CHECK(!strcmp(str(a, "role"), "assistant") && !strcmp(str(a, "reasoning_content"), "hmm") &&
          cJSON_GetArraySize(cJSON_GetObjectItem(a, "tool_calls")) == 1);
    CHECK(!strcmp(str(cJSON_GetArrayItem(m, 3), "tool_call_id"), "call_1"));
    CHECK(!strcmp(str(cJSON_GetArrayItem(m, 4), "content"), "It is 42."));
    cJSON_Delete(m);
    srv_request_free(&r);

    /* the reply: whole, and as events numbered in order */
    srv_usage u = {.prompt_tokens = 9, .completion_tokens = 30};
    srv_reply rp = reply_of("hmm", "ok", "f", "{\"x\":1}");
    srv_dialect_end d = {.reply = &rp, .finish = NC_FINISH_LENGTH, .usage = &u};
    char *whole = srv_responses.whole(w, &d);
    cJSON *j = cJSON_Parse(whole);
    CHECK(j && !strcmp(str(j, "status"), "incomplete") && !strcmp(str(j, "model"), "m1") && !strcmp(str(j, "instructions"), "Be brief."));
    const cJSON *out = cJSON_GetObjectItem(j, "output");
    CHECK(cJSON_GetArraySize(out) == 3 && !strcmp(str(cJSON_GetArrayItem(out, 0), "type"), "reasoning") &&
          !strcmp(str(cJSON_GetArrayItem(out, 0), "encrypted_content"), "hmm") &&
          !strcmp(str(cJSON_GetArrayItem(out, 2), "call_id"), rp.calls.calls[0].id));
    cJSON_Delete(j);
    free(whole);
    srv_responses.free(w);
    CHECK(resp("{\"input\":\"Hi\",\"max_output_tokens\":5}", &r, &w, &e) == 0);
    srv_request_free(&r);
    char *sse = srv_responses.begin(w, 9);
    sse = srv_text_cat(sse, srv_responses.delta(w, "hm", 2, "", 0, NULL, 0));
    sse = srv_text_cat(sse, srv_responses.delta(w, "m", 1, "o", 1, NULL, 0));
    sse = srv_text_cat(sse, srv_responses.delta(w, "", 0, "k", 1, NULL, 0));
    sse = srv_text_cat(sse, srv_responses.end(w, &d));
    char names[40][48];
    int n;
    cJSON *ev = events_of(sse, &n, names, 40);
    const char *want[] = {"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
                          "response.reasoning_text.delta", "response.reasoning_text.delta", "response.reasoning_text.done",
                          "response.content_part.done", "response.output_item.done", "response.output_item.added",
                          "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
                          "response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.output_item.added", "response.function_call_arguments.delta",
                          "response.function_call_arguments.done", "response.output_item.done", "response.incomplete"};
    CHECK_MSG(n == 21, "%d events", n);
    for (int i = 0; i < n && i < 21; i++) {
        CHECK_MSG(!strcmp(names[i], want[i]), "event %d: %s, not %s", i, names[i], want[i]);
        const cJSON *x = cJSON_GetArrayItem(ev, i);
        CHECK(cJSON_GetObjectItem(x, "sequence_number")->valueint == i && !strcmp(str(x, "type"), names[i]));
    }
    CHECK(!strcmp(str(cJSON_GetArrayItem(ev, 6), "text"), "hmm") && !strcmp(str(cJSON_GetArrayItem(ev, 13), "text"), "ok"));
    CHECK(cJSON_GetObjectItem(cJSON_GetArrayItem(ev, 16), "output_index")->valueint == 2);
    cJSON_Delete(ev);
    free(sse);
    srv_error_set(&e, 400, "invalid_request_error", NULL, "grammar", "the grammar could not go on");
    char *err = srv_responses.error(w, &e);
    CHECK(err && strstr(err, "event: error\ndata: {\"code\":null,\"message\":\"the grammar could not go on\",\"param\":\"grammar\","
                              "\"type\":\"error\",\"sequence_number\":21}"));
    free(err);
    srv_responses.free(w);
    srv_reply_free(&rp);

    resp_refused("{\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", "previous_response_id");
    resp_refused("{\"input\":\"x\",\"store\":true}", "store");
    resp_refused("{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", "input[0]");
    resp_refused("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}", "input[0].content[0]");
    resp_refused("{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0]");
    resp_refused("{\"input\":\"x\",\"reasoning\":{\"summary\":\"detailed\"}}", "reasoning.summary");
    resp_refused("{\"input\":\"x\",\"include\":[\"message.output_text.logprobs\"]}", "include");
    resp_refused("{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens");
    resp_refused("{\"input\":\"x\",\"temperature\":3}", "temperature");
    resp_refused("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"a b\",\"schema\":{}}}}", "text.format");
    resp_refused("{\"instructions\":\"x\"}", "input");
    resp_refused("{\"input\":\"x\",\"frob\":1}", "frob");
}

static void test_llama(void) {
    srv_request r;
    srv_error e;
    srv_infill f;
    void *w;
    const char *body = "{\"prompt\":\"Once\",\"n_predict\":7,\"seed\":-1,\"logit_bias\":[[5,false],[6,1.5]],\"n_indent\":4,"
                       "\"stop\":[\"\\n\"],\"return_tokens\":true,\"cache_prompt\":false,\"samplers\":[\"top_k\",\"temperature\"]}";
    CHECK(srv_llama_request(body, strlen(body), &lim, "m1", NULL, 512, &r, NULL, &w, &e) == 0);
    CHECK(r.api == SRV_API_COMPLETIONS && r.max_tokens == 7 && !r.seed_given && r.n_indent == 4 && !r.cache_prompt);
    CHECK(r.top_k == 40 && r.temperature == 0.8f && r.top_p == 0.95f && r.min_p == 0.05f);
    CHECK(r.n_logit_bias == 2 && r.logit_bias[0].token == 5 && r.logit_bias[0].bias < -1e30f && r.logit_bias[1].bias == 1.5f);
    CHECK(srv_llama_wants_tokens(w));
    srv_request_free(&r);
    srv_llama.free(w);
    body = "{\"prompt\":\"x\",\"t_max_prompt_ms\":500,\"samplers\":[\"top_k\",\"top_p\",\"infill\"]}";
    CHECK(srv_llama_request(body, strlen(body), &lim, "m1", NULL, 512, &r, NULL, &w, &e) == 0);
    CHECK(r.t_max_prompt_ms == 500 && r.samplers && !strcmp(r.samplers, "top_k;top_p;infill"));
    srv_request_free(&r);
    srv_llama.free(w);
    body = "{\"prompt\":[1,2,3]}";
    CHECK(srv_llama_request(body, strlen(body), &lim, "m1", NULL, 512, &r, NULL, &w, &e) == 0);
    CHECK(r.max_tokens == 0 && r.prompts[0].n_tokens == 3 && !srv_llama_wants_tokens(w) && r.t_max_prompt_ms == 0);
    srv_request_free(&r);
    srv_llama.free(w);
    body = "{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"input_extra\":[{\"filename\":\"x.c\",\"text\":\"int x;\"},{\"text\":\"y\"}]}";
    CHECK(srv_llama_request(body, strlen(body), &lim, "m1", NULL, 512, &r, &f, &w, &e) == 0);
    CHECK(!strcmp(f.prefix, "a") && !strcmp(f.suffix, "b") && f.n_extra == 2 && !strcmp(f.extra_names[1], "tmp"));
    CHECK(r.prompts[0].text && r.prompts[0].text_len == 0);
    srv_infill_free(&f);
    srv_request_free(&r);
    srv_llama.free(w);
    const char *refused[][2] = {{"{\"prompt\":[1,\"a\"]}", "prompt"}, {"{\"prompt\":[\"a\",\"b\"]}", "prompt"},
                                {"{\"prompt\":\"a\",\"n_keep\":3}", "n_keep"}, {"{\"prompt\":\"a\",\"max_tokens\":3}", "max_tokens"},
                                {"{\"prompt\":\"a\",\"n_cmpl\":2}", "n_cmpl"}, {"{\"prompt\":\"a\",\"input_prefix\":\"x\"}", "input_prefix"},
                                {"{\"prompt\":\"a\",\"logit_bias\":[[\"hello\",1]]}", "logit_bias"},
                                {"{\"prompt\":\"a\",\"t_max_prompt_ms\":0.5}", "t_max_prompt_ms"},
                                {"{\"prompt\":\"a\",\"n_predict\":0}", "n_predict"}, {"{}", "prompt"},
                                {"{\"prompt\":\"a\",\"frob\":1}", "frob"}};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        int rc = srv_llama_request(refused[i][0], strlen(refused[i][0]), &lim, "m1", NULL, 512, &r, NULL, &w, &e);
        CHECK_MSG(rc == -1 && e.status == 400 && !strcmp(e.param, refused[i][1]), "%s: rc %d param '%s' (%s)", refused[i][0],
                  rc, e.param, e.message);
    }
}

int main(void) {
    test_anthropic_request();
    test_anthropic_reply();
    test_responses();
    test_llama();
    return test_summary("test_server_dialects");
}
