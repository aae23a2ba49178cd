/* OpenAI response bodies built with cJSON. Every builder makes a tree, prints it unformatted and
 * frees the tree; any allocation failure on the way gives NULL. */
#include "server/response.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* ---- UTF-8 --------------------------------------------------------------------------------- */

/* Length of the well-formed UTF-8 character at s (no overlongs, surrogates or values past
 * U+10FFFF), or 0 when the bytes there are not one. */
static size_t utf8_char_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c >= 0x01 && c < 0x80) return 1;
    size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0;  /* overlong */
    if (c == 0xED && s[1] > 0x9F) return 0;  /* surrogate */
    if (c == 0xF0 && s[1] < 0x90) return 0;  /* overlong */
    if (c == 0xF4 && s[1] > 0x8F) return 0;  /* past U+10FFFF */
    return len;
}

char *srv_utf8_clean(const char *text, size_t n) {
    char *out = malloc(3 * n + 1), *w = out;
    if (!out) return NULL;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_char_len(s + i, n - i);
        if (len) {
            memcpy(w, s + i, len);
            w += len;
            i += len;
        } else {
            memcpy(w, "\xEF\xBF\xBD", 3); /* U+FFFD for one bad byte */
            w += 3;
            i++;
        }
    }
    *w = 0;
    return out;
}

/* ---- Small builders ------------------------------------------------------------------------ */

static cJSON *text_item(const char *text, size_t n) {
    char *clean = srv_utf8_clean(text, n);
    cJSON *s = clean ? cJSON_CreateString(clean) : NULL;
    free(clean);
    return s;
}

/* Add item to obj under name; false (and item freed) when either is missing. */
bool srv_json_put(cJSON *obj, const char *name, cJSON *item) {
    if (!obj || !item) {
        cJSON_Delete(item);
        return false;
    }
    cJSON_AddItemToObject(obj, name, item);
    return true;
}

bool srv_json_append(cJSON *arr, cJSON *item) {
    if (!arr || !item) {
        cJSON_Delete(item);
        return false;
    }
    cJSON_AddItemToArray(arr, item);
    return true;
}

static bool put_text(cJSON *obj, const char *name, const char *text, size_t n) {
    return srv_json_put(obj, name, text_item(text, n));
}

/* A string, or null for NULL. */
static bool put_str(cJSON *obj, const char *name, const char *s) {
    return srv_json_put(obj, name, s ? cJSON_CreateString(s) : cJSON_CreateNull());
}

static bool put_num(cJSON *obj, const char *name, double v) { return srv_json_put(obj, name, cJSON_CreateNumber(v)); }

/* JSON has no infinities: a banned alternative reports OpenAI's floor of -9999. */
static double json_logprob(float lp) { return isfinite(lp) ? lp : -9999.0; }

static char *print_and_free(cJSON *root, bool ok) {
    char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}

/* A token's bytes into buf (of cap bytes); 0 when it has none or they do not fit. */
static int token_bytes(const srv_resp_meta *m, int32_t token, char *buf, int cap) {
    int n = m->piece ? m->piece(m->piece_ctx, token, buf, cap) : -1;
    return n < 0 || n > cap ? 0 : n;
}

static const char *finish_reason(nc_finish f) { return f == NC_FINISH_NONE ? NULL : nc_finish_name(f); }

/* ---- Logprobs ------------------------------------------------------------------------------ */

enum { PIECE_CAP = 256 };

/* Chat: {"token", "logprob", "bytes": [..]} plus "top_logprobs" for a chosen token. */
static cJSON *chat_token_lp(const srv_resp_meta *m, int32_t token, float logprob) {
    char buf[PIECE_CAP];
    int n = token_bytes(m, token, buf, sizeof buf);
    cJSON *o = cJSON_CreateObject(), *bytes = cJSON_CreateArray();
    bool ok = put_text(o, "token", buf, (size_t)n) && put_num(o, "logprob", json_logprob(logprob));
    for (int i = 0; ok && i < n; i++) ok = srv_json_append(bytes, cJSON_CreateNumber((unsigned char)buf[i]));
    if (!srv_json_put(o, "bytes", bytes) || !ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *chat_logprobs(const srv_resp_meta *m, const srv_choice_view *c) {
    cJSON *o = cJSON_CreateObject(), *content = NULL;
    bool ok = srv_json_put(o, "content", content = cJSON_CreateArray()) && srv_json_put(o, "refusal", cJSON_CreateNull());
    for (int32_t i = 0; ok && i < c->n_lp; i++) {
        const srv_logprob *lp = &c->lp[i];
        cJSON *entry = chat_token_lp(m, lp->token, lp->logprob), *top = NULL;
        ok = srv_json_append(content, entry) && srv_json_put(entry, "top_logprobs", top = cJSON_CreateArray());
        for (int32_t k = 0; ok && k < lp->n_top; k++)
            ok = srv_json_append(top, chat_token_lp(m, lp->top[k].token, lp->top[k].logprob));
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Completions: {"tokens", "token_logprobs", "top_logprobs": [{text: logprob}], "text_offset"}. */
static cJSON *completion_logprobs(const srv_resp_meta *m, const srv_choice_view *c) {
    cJSON *o = cJSON_CreateObject(), *tokens = NULL, *lps = NULL, *tops = NULL, *offsets = NULL;
    bool ok = srv_json_put(o, "tokens", tokens = cJSON_CreateArray()) &&
              srv_json_put(o, "token_logprobs", lps = cJSON_CreateArray()) &&
              srv_json_put(o, "top_logprobs", tops = cJSON_CreateArray()) &&
              srv_json_put(o, "text_offset", offsets = cJSON_CreateArray());
    size_t offset = c->text_offset;
    char buf[PIECE_CAP];
    for (int32_t i = 0; ok && i < c->n_lp; i++) {
        const srv_logprob *lp = &c->lp[i];
        int n = token_bytes(m, lp->token, buf, sizeof buf);
        cJSON *top = cJSON_CreateObject();
        ok = srv_json_append(tokens, text_item(buf, (size_t)n)) && srv_json_append(lps, cJSON_CreateNumber(json_logprob(lp->logprob))) &&
             srv_json_append(offsets, cJSON_CreateNumber((double)offset)) && srv_json_append(tops, top);
        offset += (size_t)n;
        for (int32_t k = 0; ok && k < lp->n_top; k++) {
            int tn = token_bytes(m, lp->top[k].token, buf, sizeof buf);
            char *key = srv_utf8_clean(buf, (size_t)tn);
            ok = key && srv_json_put(top, key, cJSON_CreateNumber(json_logprob(lp->top[k].logprob)));
            free(key);
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *logprobs_item(const srv_resp_meta *m, const srv_choice_view *c) {
    if (!c->logprobs) return cJSON_CreateNull();
    return m->api == SRV_API_CHAT ? chat_logprobs(m, c) : completion_logprobs(m, c);
}

/* ---- Responses ----------------------------------------------------------------------------- */

static cJSON *envelope(const srv_resp_meta *m, const char *object, cJSON **choices) {
    cJSON *o = cJSON_CreateObject();
    *choices = NULL;
    bool ok = put_str(o, "id", m->id) && put_str(o, "object", object) && put_num(o, "created", (double)m->created) &&
              put_str(o, "model", m->model) && srv_json_put(o, "choices", *choices = cJSON_CreateArray());
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *usage_item(const srv_usage *u) {
    cJSON *o = cJSON_CreateObject();
    bool ok = put_num(o, "prompt_tokens", (double)u->prompt_tokens) &&
              put_num(o, "completion_tokens", (double)u->completion_tokens) &&
              put_num(o, "total_tokens", (double)(u->prompt_tokens + u->completion_tokens));
    cJSON *details = ok ? cJSON_CreateObject() : NULL;
    ok = ok && srv_json_put(o, "prompt_tokens_details", details) && put_num(details, "cached_tokens", (double)u->cached_tokens);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* One call as OpenAI writes it: {"id", "type": "function", "function": {"name", "arguments"}};
 * a stream's head has empty arguments and its tail only the arguments. */
static cJSON *tool_call_item(const srv_tool_call *c, int32_t k, bool head, bool tail) {
    cJSON *o = cJSON_CreateObject(), *fn = NULL;
    bool ok = (k < 0 || put_num(o, "index", k)) &&
              (!head || (put_str(o, "id", c->id) && put_str(o, "type", "function"))) &&
              srv_json_put(o, "function", fn = cJSON_CreateObject()) && (!head || put_str(fn, "name", c->name)) &&
              put_str(fn, "arguments", tail ? c->arguments : "");
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

char *srv_json_tool_calls(const srv_tool_calls *calls) {
    cJSON *arr = cJSON_CreateArray();
    bool ok = arr != NULL;
    for (int32_t k = 0; ok && k < calls->n; k++) ok = srv_json_append(arr, tool_call_item(&calls->calls[k], -1, true, true));
    char *out = ok ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    return out;
}

static bool put_tool_calls(cJSON *msg, const srv_tool_calls *calls) {
    cJSON *arr = cJSON_CreateArray();
    bool ok = srv_json_put(msg, "tool_calls", arr);
    for (int32_t k = 0; ok && k < calls->n; k++) ok = srv_json_append(arr, tool_call_item(&calls->calls[k], -1, true, true));
    return ok;
}

static bool has_calls(const srv_choice_view *c) { return c->calls && c->calls->n > 0; }

static bool put_content(cJSON *msg, const srv_choice_view *c) {
    if (has_calls(c) && c->n_text == 0) return srv_json_put(msg, "content", cJSON_CreateNull());
    return put_text(msg, "content", c->text, c->n_text);
}

/* nucleus_explain: {"prompt_tokens": [...] (once per choice), "steps": [...]}. */
static bool put_explain(cJSON *o, const srv_choice_view *c) {
    if (!c->explain) return true;
    cJSON *x = cJSON_CreateObject(), *steps = NULL;
    bool ok = srv_json_put(o, "nucleus_explain", x) &&
              (!c->prompt || srv_json_put(x, "prompt_tokens", cJSON_CreateIntArray(c->prompt, c->n_prompt))) &&
              srv_json_put(x, "steps", steps = cJSON_CreateArray());
    for (int32_t i = 0; ok && i < c->n_steps; i++) ok = srv_json_append(steps, cJSON_CreateRaw(c->steps[i]));
    return ok;
}

/* "tool_calls" when the choice ended in calls, else its own reason (a reply cut by max_tokens
 * after its calls says so: the calls it holds are the complete ones). */
static const char *choice_finish(const srv_choice_view *c) {
    return has_calls(c) && c->finish == NC_FINISH_STOP ? "tool_calls" : finish_reason(c->finish);
}

static bool put_reasoning(cJSON *msg, const srv_choice_view *c) {
    return !c->n_reasoning || put_text(msg, "reasoning_content", c->reasoning, c->n_reasoning);
}

static cJSON *choice_item(const srv_resp_meta *m, const srv_choice_view *c) {
    cJSON *o = cJSON_CreateObject();
    bool ok = put_num(o, "index", c->index);
    if (m->api == SRV_API_CHAT) {
        cJSON *msg = NULL;
        ok = ok && srv_json_put(o, "message", msg = cJSON_CreateObject()) && put_str(msg, "role", "assistant") &&
             put_content(msg, c) && put_reasoning(msg, c) && srv_json_put(msg, "refusal", cJSON_CreateNull()) &&
             (!has_calls(c) || put_tool_calls(msg, c->calls));
    } else {
        ok = ok && put_text(o, "text", c->text, c->n_text);
    }
    ok = ok && srv_json_put(o, "logprobs", logprobs_item(m, c)) && put_str(o, "finish_reason", choice_finish(c)) &&
         put_explain(o, c);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* llama.cpp's server reports drafts in "timings": draft_n proposed, draft_n_accepted kept; and
 * the model's passes that made the completion tokens. */
static bool put_timings(cJSON *root, const srv_usage *u) {
    if (!u->speculative) return true;
    cJSON *t = cJSON_CreateObject();
    return srv_json_put(root, "timings", t) && put_num(t, "predicted_n", (double)u->completion_tokens) &&
           put_num(t, "draft_n", (double)u->spec.drafted) && put_num(t, "draft_n_accepted", (double)u->spec.accepted) &&
           put_num(t, "passes", (double)u->spec.passes);
}

char *srv_json_response(const srv_resp_meta *m, const srv_choice_view *choices, int n, const srv_usage *u) {
    cJSON *arr, *root = envelope(m, m->api == SRV_API_CHAT ? "chat.completion" : "text_completion", &arr);
    bool ok = root != NULL;
    for (int i = 0; ok && i < n; i++) ok = srv_json_append(arr, choice_item(m, &choices[i]));
    ok = ok && srv_json_put(root, "usage", usage_item(u)) && put_timings(root, u);
    return print_and_free(root, ok);
}

static cJSON *chunk_choice(const srv_resp_meta *m, const srv_choice_view *c, bool role_delta) {
    cJSON *o = cJSON_CreateObject();
    bool ok = put_num(o, "index", c->index);
    if (m->api == SRV_API_CHAT) {
        cJSON *delta = NULL;
        ok = ok && srv_json_put(o, "delta", delta = cJSON_CreateObject()) &&
             (!role_delta || put_str(delta, "role", "assistant")) &&
             ((c->n_text == 0 && (!role_delta || c->n_reasoning)) || put_text(delta, "content", c->text, c->n_text)) &&
             put_reasoning(delta, c);
    } else {
        ok = ok && put_text(o, "text", c->text, c->n_text);
    }
    ok = ok && srv_json_put(o, "logprobs", logprobs_item(m, c)) && put_str(o, "finish_reason", choice_finish(c)) &&
         put_explain(o, c);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

char *srv_json_tool_call_chunk(const srv_resp_meta *m, int32_t index, int32_t k, const srv_tool_call *c, bool head,
                               bool usage_null) {
    cJSON *arr, *root = envelope(m, "chat.completion.chunk", &arr);
    cJSON *choice = cJSON_CreateObject(), *delta = NULL, *calls = NULL;
    bool ok = srv_json_append(arr, choice) && put_num(choice, "index", index) &&
              srv_json_put(choice, "delta", delta = cJSON_CreateObject()) && srv_json_put(delta, "tool_calls", calls = cJSON_CreateArray()) &&
              srv_json_append(calls, tool_call_item(c, k, head, !head)) && srv_json_put(choice, "logprobs", cJSON_CreateNull()) &&
              srv_json_put(choice, "finish_reason", cJSON_CreateNull()) && (!usage_null || srv_json_put(root, "usage", cJSON_CreateNull()));
    return print_and_free(root, ok);
}

char *srv_json_chunk(const srv_resp_meta *m, const srv_choice_view *c, bool role_delta, bool usage_null) {
    cJSON *arr, *root = envelope(m, m->api == SRV_API_CHAT ? "chat.completion.chunk" : "text_completion", &arr);
    bool ok = root && srv_json_append(arr, chunk_choice(m, c, role_delta)) &&
              (!usage_null || srv_json_put(root, "usage", cJSON_CreateNull()));
    return print_and_free(root, ok);
}

char *srv_json_usage_chunk(const srv_resp_meta *m, const srv_usage *u) {
    cJSON *arr, *root = envelope(m, m->api == SRV_API_CHAT ? "chat.completion.chunk" : "text_completion", &arr);
    return print_and_free(root, root && srv_json_put(root, "usage", usage_item(u)) && put_timings(root, u));
}

char *srv_json_error(const srv_error *e) {
    cJSON *root = cJSON_CreateObject(), *err = NULL;
    bool ok = srv_json_put(root, "error", err = cJSON_CreateObject()) &&
              put_text(err, "message", e->message, strlen(e->message)) &&
              put_str(err, "type", e->type) && put_str(err, "param", e->param[0] ? e->param : NULL) &&
              put_str(err, "code", e->code);
    return print_and_free(root, ok);
}

/* n floats as their little-endian float32 bytes in base64 (OpenAI's encoding_format "base64"). */
static char *base64_floats(const float *v, int32_t n) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t len = (size_t)n * 4;
    unsigned char *b = malloc(len ? len : 1);
    char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;
    if (!b || !out) {
        free(b);
        free(out);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) b[4 * i + k] = (unsigned char)(u >> (8 * k));
    }
    for (size_t i = 0; i < len; i += 3) {
        uint32_t w = (uint32_t)b[i] << 16 | (i + 1 < len ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < len ? b[i + 2] : 0);
        *o++ = digits[w >> 18 & 63];
        *o++ = digits[w >> 12 & 63];
        *o++ = i + 1 < len ? digits[w >> 6 & 63] : '=';
        *o++ = i + 2 < len ? digits[w & 63] : '=';
    }
    *o = 0;
    free(b);
    return out;
}

static cJSON *embedding_value(const float *v, int32_t n, bool base64) {
    if (base64) {
        char *s = base64_floats(v, n);
        cJSON *item = s ? cJSON_CreateString(s) : NULL;
        free(s);
        return item;
    }
    cJSON *arr = cJSON_CreateArray();
    for (int32_t i = 0; arr && i < n; i++)
        if (!srv_json_append(arr, cJSON_CreateNumber(v[i]))) {
            cJSON_Delete(arr);
            return NULL;
        }
    return arr;
}

char *srv_json_embeddings(const char *model_id, const float *vectors, int32_t n, int32_t n_embd, bool base64,
                          int64_t prompt_tokens) {
    cJSON *root = cJSON_CreateObject(), *data = NULL, *usage = NULL;
    bool ok = put_str(root, "object", "list") && srv_json_put(root, "data", data = cJSON_CreateArray());
    for (int32_t i = 0; ok && i < n; i++) {
        cJSON *item = cJSON_CreateObject();
        ok = srv_json_append(data, item) && put_str(item, "object", "embedding") && put_num(item, "index", i) &&
             srv_json_put(item, "embedding", embedding_value(vectors + (size_t)i * n_embd, n_embd, base64));
    }
    ok = ok && put_str(root, "model", model_id) && srv_json_put(root, "usage", usage = cJSON_CreateObject()) &&
         put_num(usage, "prompt_tokens", (double)prompt_tokens) && put_num(usage, "total_tokens", (double)prompt_tokens);
    return print_and_free(root, ok);
}

char *srv_json_tokens(const int32_t *ids, int32_t n) {
    cJSON *root = cJSON_CreateObject(), *arr = NULL;
    bool ok = srv_json_put(root, "tokens", arr = cJSON_CreateArray());
    for (int32_t i = 0; ok && i < n; i++) ok = srv_json_append(arr, cJSON_CreateNumber(ids[i]));
    return print_and_free(root, ok);
}

char *srv_json_content(const char *text, size_t len) {
    cJSON *root = cJSON_CreateObject();
    return print_and_free(root, put_text(root, "content", text, len));
}

char *srv_json_prompt(const char *text, size_t len) {
    cJSON *root = cJSON_CreateObject();
    return print_and_free(root, put_text(root, "prompt", text, len));
}

char *srv_json_slot(int32_t id, const char *filename, bool save, int32_t n_tokens, uint64_t n_bytes, double ms) {
    cJSON *root = cJSON_CreateObject(), *timings = NULL;
    bool ok = put_num(root, "id_slot", id) && put_str(root, "filename", filename) &&
              put_num(root, save ? "n_saved" : "n_restored", n_tokens) &&
              put_num(root, save ? "n_written" : "n_read", (double)n_bytes) &&
              srv_json_put(root, "timings", timings = cJSON_CreateObject()) && put_num(timings, save ? "save_ms" : "restore_ms", ms);
    return print_and_free(root, ok);
}
