/* libFuzzer harness for the server's request parser (src/server/request.c): any body must give
 * either a request that keeps the parser's promises or a 400 naming a field, never a crash, a
 * leak or undefined behaviour. The first byte picks the endpoint (and for /slots/{id}, the id
 * and the action from small tables); the rest is the body.
 *
 * The Makefile's generic fuzz rule links only src/common.c and the format layer, so the parser
 * (which needs nothing but cJSON) is compiled into this harness directly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/request.c"

static const srv_limits limits = {.n_vocab = 32000, .max_n = 8};

static void check(bool ok) {
    if (!ok) abort();
}

static void check_error(const srv_error *e) {
    check(e->status == 400 && e->type && e->message[0]);
    check(memchr(e->param, 0, sizeof e->param) && memchr(e->message, 0, sizeof e->message));
}

static void check_request(const srv_request *r) {
    check(r->n >= 1 && r->n <= limits.max_n && r->best_of >= r->n && r->best_of <= limits.max_n);
    check(r->temperature >= 0 && r->temperature <= 2 && r->top_p >= 0 && r->top_p <= 1 && r->top_k >= 0);
    check(r->top_logprobs >= 0 && r->top_logprobs <= SRV_MAX_TOP_LOGPROBS && r->max_tokens >= 0);
    check(r->n_stop >= 0 && r->n_stop <= SRV_MAX_STOP);
    for (int32_t i = 0; i < r->n_stop; i++) check(r->stop[i][0] != 0);
    for (int32_t i = 0; i < r->n_logit_bias; i++)
        check(r->logit_bias[i].token >= 0 && r->logit_bias[i].token < limits.n_vocab);
    if (r->api == SRV_API_CHAT) {
        cJSON *m = cJSON_Parse(r->messages_json);
        check(cJSON_IsArray(m) && cJSON_GetArraySize(m) > 0);
        cJSON_Delete(m);
        cJSON *t = r->tools_json ? cJSON_Parse(r->tools_json) : NULL;
        check(!r->tools_json || (cJSON_IsArray(t) && cJSON_GetArraySize(t) == r->n_tools && r->n_tools <= SRV_MAX_TOOLS));
        cJSON_Delete(t);
        check((r->tool_choice == SRV_TOOLS_NAMED) == (r->tool_choice_name != NULL));
        check(!(r->grammar && r->json_schema));
        return;
    }
    check(r->n_prompts >= 1 && r->n_prompts <= SRV_MAX_PROMPTS);
    for (int32_t i = 0; i < r->n_prompts; i++) {
        const srv_prompt *p = &r->prompts[i];
        check(!p->text != !p->tokens);
        for (int32_t k = 0; k < p->n_tokens; k++) check(p->tokens[k] >= 0 && p->tokens[k] < limits.n_vocab);
    }
}

/* A file name that stays in the directory it is joined to. */
static void check_slot(const srv_slot_req *r) {
    size_t n = strnlen(r->filename, sizeof r->filename);
    check(r->id >= 0 && r->id < limits.max_n && n >= 1 && n <= SRV_SLOT_NAME_MAX && r->filename[0] != '.');
    check(!strstr(r->filename, "..") && !strchr(r->filename, '/') && !strchr(r->filename, '\\'));
    check(r->op == SRV_SLOT_SAVE || r->op == SRV_SLOT_RESTORE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    srv_error e;
    switch (data[0] % 8) {
    case 0:
    case 1: {
        srv_request r;
        if (srv_request_parse(data[0] % 2 ? SRV_API_CHAT : SRV_API_COMPLETIONS, body, len, &limits, &r, &e) == 0)
            check_request(&r);
        else
            check_error(&e);
        srv_request_free(&r);
        break;
    }
    case 2: {
        srv_tokenize_req t;
        if (srv_tokenize_parse(body, len, &t, &e) == 0) check(t.content && strlen(t.content) == t.len);
        else check_error(&e);
        srv_tokenize_free(&t);
        break;
    }
    case 3: {
        srv_detokenize_req d;
        if (srv_detokenize_parse(body, len, limits.n_vocab, &d, &e) == 0) check(d.n_tokens >= 0);
        else check_error(&e);
        srv_detokenize_free(&d);
        break;
    }
    default: {
        static const char *const ids[] = {"0", "7", "8", "00", "", "x", "4294967296", "-1"};
        static const char *const actions[] = {"save", "restore", NULL, "erase"};
        srv_slot_req r;
        if (srv_slot_parse(ids[(data[0] >> 3) % 8], actions[data[0] % 4], body, len, limits.max_n, &r, &e) == 0)
            check_slot(&r);
        else
            check_error(&e);
        break;
    }
    }
    return 0;
}
