/* libFuzzer harness for the server's request parsers (src/server/request.c, and the other APIs'
 * translators: anthropic.c, responses.c, llama_api.c, presets.c's INI files): any body must give
 * either a request that keeps the parser's promises or a 400 naming a field, never a crash, a
 * leak or undefined behaviour. The first byte picks the endpoint (and for /slots/{id}, the id
 * and the action from small tables; 0xF0 and above the other APIs, whose replies to a fixed
 * reply are written too); the rest is the body.
 *
 * The Makefile's generic fuzz rule links only src/common.c and the format layer; the parsers
 * (which need nothing but cJSON) are compiled into this harness (request.c included, the others
 * beside it), with stand-ins for the few functions of the server's other files they call. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/request.c"
/* compiled beside this file (the Makefile's FUZZ_EXTRA_fuzz_request) */
#include "server/anthropic.h"
#include "server/llama_api.h"
#include "server/presets.h"
#include "server/responses.h"

/* Stand-ins: ids, text repair, OpenAI's error body, token pieces (no model is loaded here). */
uint64_t srv_random_u64(void) { return 42; }
char *srv_utf8_clean(const char *text, size_t n) {
    char *out = malloc(n + 1);
    if (out) {
        memcpy(out, text, n);
        out[n] = 0;
        for (size_t i = 0; i < n; i++)
            if (!out[i] || (unsigned char)out[i] >= 0x80) out[i] = '?';
    }
    return out;
}
char *srv_json_error(const srv_error *e) { return strdup(e->message); }
int nc_token_piece(const nc_model *m, int32_t id, char *buf, int cap) {
    (void)m;
    int n = snprintf(buf, cap > 0 ? (size_t)cap : 0, "t%d", id);
    return n;
}
int srv_tokenize(const nc_model *m, const char *text, size_t len, bool add_special, bool parse_special, int32_t **ids,
                 int32_t *n, srv_error *e) {
    (void)m, (void)text, (void)len, (void)add_special, (void)parse_special, (void)e;
    *ids = NULL;
    *n = 0;
    return 0;
}
int nc_tokenize(const nc_model *m, const char *text, size_t len, bool add_special, bool parse_special, int32_t *out,
                int cap, nc_err *err) {
    (void)m, (void)text, (void)len, (void)add_special, (void)parse_special, (void)out, (void)cap, (void)err;
    return 0;
}
int32_t nc_token_bos(const nc_model *m) { return (void)m, -1; }
bool nc_vocab_adds_bos(const nc_model *m) { return (void)m, false; }

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

/* A dialect's reply to a fixed reply, whole and as events: valid text, no crash. */
static void write_reply(const srv_dialect *d, void *w) {
    srv_reply rp = {.reasoning = "why", .n_reasoning = 3, .content = "so", .n_content = 2};
    srv_usage u = {.prompt_tokens = 3, .completion_tokens = 2};
    srv_dialect_end end = {.reply = &rp, .finish = NC_FINISH_STOP, .usage = &u, .stop_word = "x"};
    char *whole = d->whole(w, &end);
    char *ev = d->begin(w, 3);
    ev = srv_text_cat(ev, d->delta(w, "why", 3, "so", 2, NULL, 0));
    ev = srv_text_cat(ev, d->end(w, &end));
    check(whole && ev);
    free(whole);
    free(ev);
}

/* The other APIs' bodies (0xF0 and above). */
static void other_api(uint8_t which, const char *body, size_t len) {
    srv_error e;
    srv_request r;
    void *w = NULL;
    int rc;
    switch (which % 6) {
    case 0:
    case 1:
        rc = srv_anthropic_request(body, len, which % 6 == 1, &limits, &r, &e);
        if (!rc) {
            check_request(&r);
            w = srv_anthropic_new("m");
            check(w != NULL);
            write_reply(&srv_anthropic, w);
            srv_anthropic.free(w);
        }
        break;
    case 2:
        rc = srv_responses_request(body, len, &limits, "m", &r, &w, &e);
        if (!rc) {
            check_request(&r);
            write_reply(&srv_responses, w);
            srv_responses.free(w);
        }
        break;
    case 3:
    case 4: {
        srv_infill f;
        rc = srv_llama_request(body, len, &limits, "m", NULL, 512, &r, which % 6 == 4 ? &f : NULL, &w, &e);
        if (!rc) {
            check_request(&r);
            check(r.n_prompts == 1 && r.n == 1);
            write_reply(&srv_llama, w);
            srv_llama.free(w);
            if (which % 6 == 4) srv_infill_free(&f);
        }
        break;
    }
    default: {
        srv_presets ps = {0};
        nc_err err;
        if (srv_presets_parse_ini(&ps, body, len, "fuzz.ini", &err) == 0)
            for (int32_t i = 0; i < ps.n; i++) check(ps.p[i].id[0] && ps.p[i].path[0]);
        srv_presets_free(&ps);
        return;
    }
    }
    if (rc) check(e.status == 400 ? e.message[0] != 0 : e.status == 500);
    else srv_request_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    srv_error e;
    if (data[0] >= 0xF0) {
        other_api(data[0] - 0xF0, body, len);
        return 0;
    }
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
