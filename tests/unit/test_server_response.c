/* The server's response bodies: OpenAI shapes for errors, completions, chat, stream chunks,
 * logprobs and usage, checked by parsing them back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/response.h"
#include "test.h"

/* Token texts: 7 is a lone UTF-8 lead byte, 8 is "é", others "t<id>". */
static int fake_piece(void *ctx, int32_t token, char *buf, int cap) {
    (void)ctx;
    char tmp[32];
    int n = token == 7 ? snprintf(tmp, sizeof tmp, "\xE2") : token == 8 ? snprintf(tmp, sizeof tmp, "\xC3\xA9")
                                                                         : snprintf(tmp, sizeof tmp, "t%d", token);
    if (n <= cap) memcpy(buf, tmp, (size_t)n);
    return n;
}

static cJSON *parsed(char *s) {
    CHECK(s != NULL);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    CHECK_MSG(j != NULL, "not JSON: %s", s ? s : "(null)");
    free(s);
    return j;
}

static const char *str(const cJSON *o, const char *path0, const char *path1) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, path0);
    if (path1) v = cJSON_GetObjectItemCaseSensitive(v, path1);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num(const cJSON *o, const char *a, const char *b) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b) v = cJSON_GetObjectItemCaseSensitive(v, b);
    return cJSON_IsNumber(v) ? v->valuedouble : -12345;
}

static bool is_null(const cJSON *o, const char *a) { return cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, a)); }

static void test_error_shape(void) {
    srv_error e;
    srv_error_set(&e, 400, "invalid_request_error", NULL, "temperature", "'temperature' must be %s", "a number");
    cJSON *j = parsed(srv_json_error(&e));
    CHECK(str(j, "error", "message") && !strcmp(str(j, "error", "message"), "'temperature' must be a number"));
    CHECK(str(j, "error", "type") && !strcmp(str(j, "error", "type"), "invalid_request_error"));
    CHECK(str(j, "error", "param") && !strcmp(str(j, "error", "param"), "temperature"));
    CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), "code")));
    cJSON_Delete(j);
    srv_error_set(&e, 401, "invalid_request_error", "invalid_api_key", "", "bad key \xFF");
    j = parsed(srv_json_error(&e));
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(err, "param")));
    CHECK(str(j, "error", "code") && !strcmp(str(j, "error", "code"), "invalid_api_key"));
    CHECK(str(j, "error", "message") && !strcmp(str(j, "error", "message"), "bad key \xEF\xBF\xBD"));
    cJSON_Delete(j);
}

static void test_completion(void) {
    srv_resp_meta m = {SRV_API_COMPLETIONS, "cmpl-1", "stories", 1700000000, fake_piece, NULL};
    srv_logprob lp[2] = {{.token = 3, .logprob = -0.5f, .n_top = 2, .top = {{3, -0.5f}, {8, -1.25f}}},
                         {.token = 7, .logprob = -INFINITY, .n_top = 0}};
    srv_choice_view c[2] = {{.index = 0, .text = "t3\xE2", .n_text = 3, .logprobs = true, .lp = lp, .n_lp = 2,
                             .finish = NC_FINISH_LENGTH},
                            {.index = 1, .text = "ok", .n_text = 2, .finish = NC_FINISH_STOP}};
    srv_usage u = {.prompt_tokens = 5, .completion_tokens = 4, .cached_tokens = 3};
    cJSON *j = parsed(srv_json_response(&m, c, 2, &u));
    CHECK(!strcmp(str(j, "id", NULL), "cmpl-1") && !strcmp(str(j, "object", NULL), "text_completion"));
    CHECK(num(j, "created", NULL) == 1700000000 && !strcmp(str(j, "model", NULL), "stories"));
    CHECK(num(j, "usage", "prompt_tokens") == 5 && num(j, "usage", "completion_tokens") == 4 &&
          num(j, "usage", "total_tokens") == 9);
    const cJSON *details = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "usage"),
                                                            "prompt_tokens_details");
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(details, "cached_tokens")) == 3);
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "choices");
    CHECK(cJSON_GetArraySize(ch) == 2);
    const cJSON *c0 = cJSON_GetArrayItem(ch, 0), *c1 = cJSON_GetArrayItem(ch, 1);
    CHECK(!strcmp(str(c0, "text", NULL), "t3\xEF\xBF\xBD") && !strcmp(str(c0, "finish_reason", NULL), "length"));
    CHECK(num(c1, "index", NULL) == 1 && is_null(c1, "logprobs") && !strcmp(str(c1, "finish_reason", NULL), "stop"));
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(c0, "logprobs");
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(l, "tokens");
    const cJSON *lps = cJSON_GetObjectItemCaseSensitive(l, "token_logprobs");
    const cJSON *tops = cJSON_GetObjectItemCaseSensitive(l, "top_logprobs");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(l, "text_offset");
    CHECK(cJSON_GetArraySize(toks) == 2 && !strcmp(cJSON_GetArrayItem(toks, 0)->valuestring, "t3"));
    CHECK(!strcmp(cJSON_GetArrayItem(toks, 1)->valuestring, "\xEF\xBF\xBD"));
    CHECK(cJSON_GetArrayItem(lps, 0)->valuedouble == -0.5 && cJSON_GetArrayItem(lps, 1)->valuedouble == -9999);
    CHECK(cJSON_GetArrayItem(offs, 0)->valuedouble == 0 && cJSON_GetArrayItem(offs, 1)->valuedouble == 2);
    const cJSON *top0 = cJSON_GetArrayItem(tops, 0);
    CHECK(cJSON_GetArraySize(top0) == 2 && num(top0, "t3", NULL) == -0.5 && num(top0, "\xC3\xA9", NULL) == -1.25);
    CHECK(cJSON_GetArraySize(cJSON_GetArrayItem(tops, 1)) == 0);
    cJSON_Delete(j);
}

/* Speculative decoding's drafts in "timings" (llama.cpp's names), only when the server speculates. */
static void test_timings(void) {
    srv_resp_meta m = {SRV_API_COMPLETIONS, "cmpl-3", "stories", 1, fake_piece, NULL};
    srv_choice_view c = {.index = 0, .text = "ok", .n_text = 2, .finish = NC_FINISH_STOP};
    srv_usage u = {.prompt_tokens = 2, .completion_tokens = 9, .speculative = true,
                   .spec = {.drafted = 12, .accepted = 7, .passes = 3, .generated = 9}};
    cJSON *j = parsed(srv_json_response(&m, &c, 1, &u));
    CHECK(num(j, "timings", "draft_n") == 12 && num(j, "timings", "draft_n_accepted") == 7 &&
          num(j, "timings", "passes") == 3 && num(j, "timings", "predicted_n") == 9);
    cJSON_Delete(j);
    u.speculative = false;
    j = parsed(srv_json_response(&m, &c, 1, &u));
    CHECK(j && !cJSON_GetObjectItemCaseSensitive(j, "timings"));
    cJSON_Delete(j);
}

static void test_chat(void) {
    srv_resp_meta m = {SRV_API_CHAT, "chatcmpl-2", "smol", 1, fake_piece, NULL};
    srv_logprob lp = {.token = 8, .logprob = -0.25f, .n_top = 1, .top = {{8, -0.25f}}};
    srv_choice_view c = {.index = 0, .text = "\xC3\xA9", .n_text = 2, .logprobs = true, .lp = &lp, .n_lp = 1,
                         .finish = NC_FINISH_STOP};
    srv_usage u = {.prompt_tokens = 3, .completion_tokens = 1};
    cJSON *j = parsed(srv_json_response(&m, &c, 1, &u));
    CHECK(!strcmp(str(j, "object", NULL), "chat.completion"));
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    CHECK(!strcmp(str(c0, "message", "role"), "assistant") && !strcmp(str(c0, "message", "content"), "\xC3\xA9"));
    CHECK(!strcmp(str(c0, "finish_reason", NULL), "stop"));
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c0, "logprobs"), "content");
    const cJSON *e0 = cJSON_GetArrayItem(content, 0);
    CHECK(cJSON_GetArraySize(content) == 1 && !strcmp(str(e0, "token", NULL), "\xC3\xA9") && num(e0, "logprob", NULL) == -0.25);
    const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(e0, "bytes");
    CHECK(cJSON_GetArraySize(bytes) == 2 && cJSON_GetArrayItem(bytes, 0)->valuedouble == 0xC3 &&
          cJSON_GetArrayItem(bytes, 1)->valuedouble == 0xA9);
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(e0, "top_logprobs");
    CHECK(cJSON_GetArraySize(top) == 1 && !strcmp(str(cJSON_GetArrayItem(top, 0), "token", NULL), "\xC3\xA9"));
    cJSON_Delete(j);
}

static void test_chunks(void) {
    srv_resp_meta m = {SRV_API_CHAT, "chatcmpl-3", "smol", 1, fake_piece, NULL};
    srv_choice_view first = {.index = 1, .text = "", .n_text = 0};
    cJSON *j = parsed(srv_json_chunk(&m, &first, true, true));
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    CHECK(!strcmp(str(j, "object", NULL), "chat.completion.chunk") && is_null(j, "usage"));
    CHECK(num(c0, "index", NULL) == 1 && !strcmp(str(c0, "delta", "role"), "assistant"));
    CHECK(!strcmp(str(c0, "delta", "content"), "") && is_null(c0, "finish_reason") && is_null(c0, "logprobs"));
    cJSON_Delete(j);

    srv_choice_view last = {.index = 0, .finish = NC_FINISH_LENGTH};
    j = parsed(srv_json_chunk(&m, &last, false, false));
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c0, "delta")) == 0);
    CHECK(!strcmp(str(c0, "finish_reason", NULL), "length") && !cJSON_GetObjectItemCaseSensitive(j, "usage"));
    cJSON_Delete(j);

    srv_usage u = {.prompt_tokens = 2, .completion_tokens = 7};
    j = parsed(srv_json_usage_chunk(&m, &u));
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "choices")) == 0 && num(j, "usage", "total_tokens") == 9);
    cJSON_Delete(j);

    m.api = SRV_API_COMPLETIONS;
    srv_choice_view piece = {.index = 0, .text = "Hello", .n_text = 5};
    j = parsed(srv_json_chunk(&m, &piece, false, false));
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    CHECK(!strcmp(str(j, "object", NULL), "text_completion") && !strcmp(str(c0, "text", NULL), "Hello"));
    cJSON_Delete(j);
}

static void test_small_bodies(void) {
    int32_t ids[3] = {1, 20, 300};
    char *s = srv_json_tokens(ids, 3);
    CHECK(s && !strcmp(s, "{\"tokens\":[1,20,300]}"));
    free(s);
    s = srv_json_content("a\0b\xF0\x9F\x98\x80\xED\xA0\x80", 10);
    CHECK_MSG(s && !strcmp(s, "{\"content\":\"a\xEF\xBF\xBD" "b\xF0\x9F\x98\x80\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"}"),
              "%s", s ? s : "(null)");
    free(s);
    s = srv_json_slot(1, "a.bin", true, 20, 13104, 0.5);
    CHECK_MSG(s && !strcmp(s, "{\"id_slot\":1,\"filename\":\"a.bin\",\"n_saved\":20,\"n_written\":13104,"
                              "\"timings\":{\"save_ms\":0.5}}"), "%s", s ? s : "(null)");
    free(s);
    s = srv_json_slot(0, "b", false, 3, 7, 2);
    CHECK_MSG(s && !strcmp(s, "{\"id_slot\":0,\"filename\":\"b\",\"n_restored\":3,\"n_read\":7,"
                              "\"timings\":{\"restore_ms\":2}}"), "%s", s ? s : "(null)");
    free(s);
    s = srv_utf8_clean("\xC0\xAF\xE0\x80\x80\xF4\x90\x80\x80ok", 11);
    CHECK(s && !strncmp(s, "\xEF\xBF\xBD\xEF\xBF\xBD", 6) && strlen(s) == 9 * 3 + 2 && !strcmp(s + 27, "ok"));
    free(s);
}

/* Tool calls in OpenAI's shapes: the message's tool_calls with content null when none was said,
 * finish_reason "tool_calls"; in a stream, each call's head (id, type, name, "" arguments) then
 * its arguments. */
static void test_tool_calls(void) {
    srv_resp_meta m = {SRV_API_CHAT, "chatcmpl-4", "smol", 1, fake_piece, NULL};
    srv_tool_call call = {.id = "call_abcdefghijklmnopqrstuvwx", .name = "get_weather", .arguments = "{\"city\":\"Oslo\"}"};
    srv_tool_calls calls = {.calls = &call, .n = 1};
    srv_choice_view c = {.index = 0, .text = "<tool_call>", .n_text = 0, .finish = NC_FINISH_STOP, .calls = &calls};
    srv_usage u = {0};
    cJSON *j = parsed(srv_json_response(&m, &c, 1, &u));
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(c0, "message");
    CHECK(is_null(msg, "content") && !strcmp(str(c0, "finish_reason", NULL), "tool_calls"));
    const cJSON *tc = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(msg, "tool_calls"), 0);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(msg, "tool_calls")) == 1);
    CHECK(!strcmp(str(tc, "id", NULL), call.id) && !strcmp(str(tc, "type", NULL), "function"));
    CHECK(!strcmp(str(tc, "function", "name"), "get_weather") && !strcmp(str(tc, "function", "arguments"), call.arguments));
    CHECK(!cJSON_GetObjectItemCaseSensitive(tc, "index"));
    cJSON_Delete(j);

    c.text = "Checking.";
    c.n_text = 9;
    j = parsed(srv_json_response(&m, &c, 1, &u));
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    CHECK(!strcmp(str(c0, "message", "content"), "Checking."));
    cJSON_Delete(j);

    calls.n = 0; /* no calls: an ordinary reply */
    j = parsed(srv_json_response(&m, &c, 1, &u));
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    CHECK(!strcmp(str(c0, "finish_reason", NULL), "stop"));
    CHECK(!cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c0, "message"), "tool_calls"));
    cJSON_Delete(j);

    for (int head = 1; head >= 0; head--) {
        j = parsed(srv_json_tool_call_chunk(&m, 2, 1, &call, head, true));
        c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
        CHECK(num(c0, "index", NULL) == 2 && is_null(c0, "finish_reason") && is_null(j, "usage"));
        tc = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c0, "delta"), "tool_calls"), 0);
        CHECK(num(tc, "index", NULL) == 1);
        if (head) {
            CHECK(!strcmp(str(tc, "id", NULL), call.id) && !strcmp(str(tc, "type", NULL), "function"));
            CHECK(!strcmp(str(tc, "function", "name"), "get_weather") && !strcmp(str(tc, "function", "arguments"), ""));
        } else {
            CHECK(!cJSON_GetObjectItemCaseSensitive(tc, "id") && !str(tc, "function", "name"));
            CHECK(!strcmp(str(tc, "function", "arguments"), call.arguments));
        }
        cJSON_Delete(j);
    }
    calls.n = 1;
    srv_choice_view fin = {.index = 0, .text = "", .finish = NC_FINISH_STOP, .calls = &calls};
    j = parsed(srv_json_chunk(&m, &fin, false, false));
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    CHECK(!strcmp(str(c0, "finish_reason", NULL), "tool_calls"));
    cJSON_Delete(j);
}

int main(void) {
    test_error_shape();
    test_completion();
    test_timings();
    test_chat();
    test_chunks();
    test_small_bodies();
    test_tool_calls();
    return test_summary("test_server_response");
}
