/* OpenAI request bodies -> srv_request. Each field has one small reader that either leaves the
 * default, stores a checked value, or refuses with a 400 naming the field. JSON null counts as
 * "not given" everywhere, as OpenAI's clients send it for unset options. */
#include "server/request.h"

#include "common.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

static void error_vset(srv_error *e, int status, const char *type, const char *code, const char *param,
                       const char *fmt, va_list ap) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    vsnprintf(e->message, sizeof e->message, fmt, ap);
}

void srv_error_set(srv_error *e, int status, const char *type, const char *code, const char *param,
                   const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_vset(e, status, type, code, param, fmt, ap);
    va_end(ap);
}

bool srv_request_id_sane(const char *id) {
    size_t n = 0;
    for (; id[n]; n++) {
        unsigned char c = (unsigned char)id[n];
        bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (n == SRV_REQUEST_ID_MAX || (!word && !strchr("._:/+=@-", c))) return false;
    }
    return n > 0;
}

bool srv_json_media_type(const char *ct) {
    if (!ct) return false;
    while (*ct == ' ' || *ct == '\t') ct++;
    size_t n = strlen("application/json");
    if (strncasecmp(ct, "application/json", n)) return false;
    for (ct += n; *ct == ' ' || *ct == '\t'; ct++) {}
    return *ct == 0 || *ct == ';';
}

bool srv_host_allowed(const char *host, const char *allowed) {
    if (!host || !strcmp(allowed, "*")) return true;
    /* the name without its port: "[v6]:port", "name:port"; anything after the name but a port
     * makes it another name ("[::1]x.evil.com") */
    size_t n = host[0] == '[' && strchr(host, ']') ? (size_t)(strchr(host, ']') - host) + 1 : strcspn(host, ":");
    if (host[n] == ':') {
        size_t digits = strspn(host + n + 1, "0123456789");
        if (digits == 0 || digits > 5 || host[n + 1 + digits]) return false;
    } else if (host[n]) {
        return false;
    }
    for (const char *a = allowed; *a;) {
        size_t m = strcspn(a, ",");
        if (m == n && n > 0 && !strncasecmp(a, host, n)) return true;
        a += m + (a[m] == ',');
    }
    return false;
}

char *srv_default_allowed_hosts(const char *bind_host) {
    bool loopback = !strncmp(bind_host, "127.", 4) || !strcmp(bind_host, "::1") || !strcasecmp(bind_host, "localhost");
    if (!loopback) return strdup("*");
    size_t n = strlen(bind_host) + 40;
    char *s = malloc(n);
    if (s) snprintf(s, n, strchr(bind_host, ':') ? "localhost,127.0.0.1,[::1],[%s]" : "localhost,127.0.0.1,[::1],%s", bind_host);
    return s;
}

/* A 400 about one field; returns -1 so readers can `return refuse(...)`. */
__attribute__((format(printf, 3, 4))) static int refuse(srv_error *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_vset(e, 400, "invalid_request_error", NULL, param, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- Generic readers ----------------------------------------------------------------------- */

/* The member, or NULL when absent or null. */
static const cJSON *member(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int opt_bool(const cJSON *obj, const char *name, bool *out, srv_error *e) {
    const cJSON *v = member(obj, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return refuse(e, name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

static int opt_number(const cJSON *obj, const char *name, double lo, double hi, double *out, srv_error *e) {
    const cJSON *v = member(obj, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return refuse(e, name, "'%s' must be a number", name);
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi)) return refuse(e, name, "'%s' must be between %g and %g, got %g", name, lo, hi, d);
    *out = d;
    return 0;
}

static int opt_float(const cJSON *obj, const char *name, double lo, double hi, float *out, srv_error *e) {
    double d = *out;
    if (opt_number(obj, name, lo, hi, &d, e)) return -1;
    *out = (float)d;
    return 0;
}

static bool is_integer(const cJSON *v) { return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble); }

static int opt_int(const cJSON *obj, const char *name, int32_t lo, int32_t hi, int32_t *out, srv_error *e) {
    const cJSON *v = member(obj, name);
    if (!v) return 0;
    if (!is_integer(v)) return refuse(e, name, "'%s' must be an integer", name);
    double d = v->valuedouble;
    if (d < lo || d > hi) return refuse(e, name, "'%s' must be between %d and %d, got %.17g", name, lo, hi, d);
    *out = (int32_t)d;
    return 0;
}

/* A malloc'd copy of a string member; *out stays NULL when absent. */
static int opt_string(const cJSON *obj, const char *name, char **out, srv_error *e) {
    const cJSON *v = member(obj, name);
    if (!v) return 0;
    if (!cJSON_IsString(v)) return refuse(e, name, "'%s' must be a string", name);
    if (!(*out = strdup(v->valuestring))) return refuse(e, name, "out of memory");
    return 0;
}

/* An array of token ids, each in [0, n_vocab). */
static int token_array(const cJSON *arr, const char *param, int32_t n_vocab, int32_t **ids, int32_t *n,
                       srv_error *e) {
    int count = cJSON_GetArraySize(arr);
    *ids = malloc((size_t)(count > 0 ? count : 1) * sizeof **ids);
    if (!*ids) return refuse(e, param, "out of memory");
    *n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, arr) {
        if (!is_integer(t) || t->valuedouble < 0 || t->valuedouble >= n_vocab)
            return refuse(e, param, "'%s' holds %s: token ids must be integers from 0 to %d", param,
                          is_integer(t) ? "an id outside the vocabulary" : "a value that is not an integer",
                          n_vocab - 1);
        (*ids)[(*n)++] = (int32_t)t->valuedouble;
    }
    return 0;
}

static int by_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* The first key an object of v (v itself or one inside) holds twice, with the JSON pointer of that
 * object into where[cap]; NULL when there is none, or when memory ran out (*oom). cJSON keeps
 * both members and finds the first, while another reader of the same body may take the last: a
 * request that means two things is refused. Sorting each object's keys keeps this O(n log n). */
static const char *duplicate_key(const cJSON *v, char *where, size_t cap, bool *oom) {
    size_t len = strlen(where);
    int n = 0, i = 0;
    for (const cJSON *c = v->child; c; c = c->next) n++;
    if (cJSON_IsObject(v) && n > 1) {
        const cJSON **keys = malloc((size_t)n * sizeof *keys);
        if (!keys) {
            *oom = true;
            return NULL;
        }
        for (const cJSON *c = v->child; c; c = c->next) keys[i++] = c;
        qsort(keys, (size_t)n, sizeof *keys, by_key);
        const char *twice = NULL;
        for (i = 1; i < n && !twice; i++)
            if (!strcmp(keys[i - 1]->string, keys[i]->string)) twice = keys[i]->string;
        free(keys);
        if (twice) return twice;
    }
    i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        if (!c->child) continue;
        if (cJSON_IsObject(v)) snprintf(where + len, cap - len, "/%s", c->string);
        else snprintf(where + len, cap - len, "/%d", i);
        const char *twice = duplicate_key(c, where, cap, oom);
        if (twice || *oom) return twice;
        where[len] = 0;
    }
    return NULL;
}

static cJSON *parse_object(const char *body, size_t len, srv_error *e) {
    long nul = nc_json_escaped_nul(body, len);
    if (nul >= 0) {
        refuse(e, "", "the body holds an escaped NUL (\\u0000) at byte %ld: text may not contain NUL characters", nul);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        refuse(e, "", "the body is not valid JSON (error near byte %zu)", at);
        return NULL;
    }
    for (const char *p = end; p && p < body + len; p++)
        if (!strchr(" \t\r\n", *p) || !*p) {
            cJSON_Delete(root);
            refuse(e, "", "the body is not valid JSON (trailing data at byte %zu)", (size_t)(p - body));
            return NULL;
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        refuse(e, "", "the body must be a JSON object");
        return NULL;
    }
    char where[160] = "";
    bool oom = false;
    const char *twice = duplicate_key(root, where, sizeof where, &oom);
    if (twice || oom) {
        if (oom) srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        else if (*where) refuse(e, "", "the body has the key '%.100s' twice (in %s)", twice, where);
        else refuse(e, twice, "the body has the key '%.100s' twice (in the top-level object)", twice);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* ---- Chat messages ------------------------------------------------------------------------- */

static bool known_role(const char *role) {
    static const char *const roles[] = {"system", "user", "assistant", "developer", "tool"};
    for (size_t i = 0; i < sizeof roles / sizeof *roles; i++)
        if (!strcmp(role, roles[i])) return true;
    return false;
}

/* The text of an array of content parts: every part must be {"type": "text", "text": string};
 * the texts are joined with newlines. */
static char *join_text_parts(const cJSON *parts, const char *param, srv_error *e) {
    char where[128];
    size_t total = 0;
    int i = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, parts) {
        snprintf(where, sizeof where, "%s[%d]", param, i++);
        const cJSON *type = cJSON_IsObject(part) ? member(part, "type") : NULL;
        const cJSON *text = cJSON_IsObject(part) ? member(part, "text") : NULL;
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0) {
            refuse(e, where, "'%s' must be a content part of type \"text\" (other types are not supported)", where);
            return NULL;
        }
        if (!cJSON_IsString(text)) {
            refuse(e, where, "'%s.text' must be a string", where);
            return NULL;
        }
        total += strlen(text->valuestring) + 1;
    }
    char *out = malloc(total + 1), *w = out;
    if (!out) {
        refuse(e, param, "out of memory");
        return NULL;
    }
    cJSON_ArrayForEach(part, parts) {
        const char *text = member(part, "text")->valuestring;
        if (w > out) *w++ = '\n';
        size_t n = strlen(text);
        memcpy(w, text, n);
        w += n;
    }
    *w = 0;
    return out;
}

/* A message's content as one malloc'd string: a string, an array of text parts, or (for the
 * assistant and tool roles, which may carry only tool calls) null as "". */
static char *message_content(const cJSON *msg, const char *role, const char *param, srv_error *e) {
    const cJSON *c = member(msg, "content");
    char *s = NULL;
    if (!c && (!strcmp(role, "assistant") || !strcmp(role, "tool"))) s = strdup("");
    else if (cJSON_IsString(c)) s = strdup(c->valuestring);
    else if (cJSON_IsArray(c)) return join_text_parts(c, param, e);
    else {
        refuse(e, param, "'%s' must be a string or an array of text parts", param);
        return NULL;
    }
    if (!s) refuse(e, param, "out of memory");
    return s;
}

/* OpenAI's function names: 1 to 64 of a-z A-Z 0-9 _ -. */
static bool function_name_ok(const char *s) {
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
    return n >= 1 && n <= 64 && !s[n];
}

/* A string member that must be there. */
static const cJSON *need_string(const cJSON *obj, const char *name, const char *where, srv_error *e) {
    const cJSON *v = member(obj, name);
    if (!cJSON_IsString(v)) {
        refuse(e, where, "'%s.%s' must be a string", where, name);
        return NULL;
    }
    return v;
}

/* Fields of an object other than the allowed ones (null ones count as absent). */
static int refuse_extra(const cJSON *obj, const char *const *allowed, const char *where, srv_error *e) {
    const cJSON *f;
    cJSON_ArrayForEach(f, obj) {
        if (cJSON_IsNull(f)) continue;
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++) ok = !strcmp(f->string, *a);
        if (!ok) return refuse(e, where, "'%s.%.64s' is not supported by this server", where, f->string);
    }
    return 0;
}

/* An assistant message's tool call, {"id", "type": "function", "function": {"name", "arguments"}},
 * copied with the arguments parsed when they hold JSON: chat templates render them with tojson
 * and expect a mapping (as transformers is given one). */
static cJSON *tool_call_copy(const cJSON *call, const char *where, srv_error *e) {
    static const char *const call_fields[] = {"id", "type", "function", NULL};
    static const char *const fn_fields[] = {"name", "arguments", NULL};
    char fwhere[128];
    snprintf(fwhere, sizeof fwhere, "%s.function", where);
    if (!cJSON_IsObject(call)) {
        refuse(e, where, "'%s' must be an object", where);
        return NULL;
    }
    const cJSON *type = member(call, "type"), *fn = member(call, "function"), *id = member(call, "id");
    if (refuse_extra(call, call_fields, where, e)) return NULL;
    if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "function"))) {
        refuse(e, where, "'%s.type' must be \"function\"", where);
        return NULL;
    }
    if (id && !cJSON_IsString(id)) {
        refuse(e, where, "'%s.id' must be a string", where);
        return NULL;
    }
    if (!cJSON_IsObject(fn)) {
        refuse(e, fwhere, "'%s' must be an object", fwhere);
        return NULL;
    }
    const cJSON *name = need_string(fn, "name", fwhere, e), *args = need_string(fn, "arguments", fwhere, e);
    if (!name || !args || refuse_extra(fn, fn_fields, fwhere, e)) return NULL;
    cJSON *out = cJSON_CreateObject();
    if (out && id) cJSON_AddStringToObject(out, "id", id->valuestring);
    if (out) cJSON_AddStringToObject(out, "type", "function");
    cJSON *f = out ? cJSON_AddObjectToObject(out, "function") : NULL;
    bool ok = f && cJSON_AddStringToObject(f, "name", name->valuestring) && cJSON_GetArraySize(out) == 2 + (id != NULL);
    cJSON *parsed = ok ? cJSON_Parse(args->valuestring) : NULL;
    if (parsed) {
        ok = cJSON_AddItemToObject(f, "arguments", parsed);
        if (!ok) cJSON_Delete(parsed);
    } else if (ok) {
        ok = cJSON_AddStringToObject(f, "arguments", args->valuestring) != NULL;
    }
    if (!ok) {
        cJSON_Delete(out);
        refuse(e, where, "out of memory");
        return NULL;
    }
    return out;
}

/* The tool-calling members of a message, copied into m: "tool_calls" (assistant),
 * "tool_call_id" (tool), "name" (any). */
static int message_tool_fields(const cJSON *msg, const char *role, int i, cJSON *m, srv_error *e) {
    char where[96];
    const cJSON *name = member(msg, "name"), *call_id = member(msg, "tool_call_id"), *calls = member(msg, "tool_calls");
    snprintf(where, sizeof where, "messages[%d].name", i);
    if (name && !cJSON_IsString(name)) return refuse(e, where, "'%s' must be a string", where);
    if (name && !cJSON_AddStringToObject(m, "name", name->valuestring)) return refuse(e, where, "out of memory");
    snprintf(where, sizeof where, "messages[%d].tool_call_id", i);
    if (call_id && strcmp(role, "tool")) return refuse(e, where, "'%s' belongs to messages of role \"tool\"", where);
    if (call_id && !cJSON_IsString(call_id)) return refuse(e, where, "'%s' must be a string", where);
    if (call_id && !cJSON_AddStringToObject(m, "tool_call_id", call_id->valuestring))
        return refuse(e, where, "out of memory");
    snprintf(where, sizeof where, "messages[%d].tool_calls", i);
    if (!calls || (cJSON_IsArray(calls) && !calls->child)) return 0;
    if (strcmp(role, "assistant")) return refuse(e, where, "'%s' belongs to messages of role \"assistant\"", where);
    if (!cJSON_IsArray(calls)) return refuse(e, where, "'%s' must be an array", where);
    cJSON *out = cJSON_AddArrayToObject(m, "tool_calls");
    if (!out) return refuse(e, where, "out of memory");
    int k = 0;
    const cJSON *call;
    cJSON_ArrayForEach(call, calls) {
        char cwhere[96];
        snprintf(cwhere, sizeof cwhere, "messages[%d].tool_calls[%d]", i, k++);
        cJSON *copy = tool_call_copy(call, cwhere, e);
        if (!copy) return -1;
        if (!cJSON_AddItemToArray(out, copy)) {
            cJSON_Delete(copy);
            return refuse(e, where, "out of memory");
        }
    }
    return 0;
}

/* One message, normalised to {"role", "content": string} (and its tool-calling members),
 * appended to out. */
/* An assistant's earlier reasoning, "reasoning_content" (llama.cpp's, DeepSeek's) or "reasoning"
 * (vLLM's, OpenRouter's), as "reasoning_content": templates that render it (Qwen3, GLM ...)
 * find it there. */
static int message_reasoning(const cJSON *msg, const char *role, int i, cJSON *m, srv_error *e) {
    const cJSON *rc = member(msg, "reasoning_content"), *r = member(msg, "reasoning");
    char where[96];
    snprintf(where, sizeof where, "messages[%d].%s", i, rc ? "reasoning_content" : "reasoning");
    if (rc && r) return refuse(e, where, "'messages[%d]': give 'reasoning_content' or 'reasoning', not both", i);
    const cJSON *v = rc ? rc : r;
    if (!v) return 0;
    if (strcmp(role, "assistant")) return refuse(e, where, "'%s' belongs to messages of role \"assistant\"", where);
    if (!cJSON_IsString(v)) return refuse(e, where, "'%s' must be a string", where);
    return cJSON_AddStringToObject(m, "reasoning_content", v->valuestring) ? 0 : refuse(e, where, "out of memory");
}

static int add_message(const cJSON *msg, int i, cJSON *out, srv_error *e) {
    static const char *const fields[] = {"role", "content", "name", "tool_call_id", "tool_calls", "reasoning_content",
                                         "reasoning", NULL};
    char param[96];
    snprintf(param, sizeof param, "messages[%d]", i);
    if (!cJSON_IsObject(msg)) return refuse(e, param, "'%s' must be an object", param);
    if (refuse_extra(msg, fields, param, e)) return -1;
    snprintf(param, sizeof param, "messages[%d].role", i);
    const cJSON *role = member(msg, "role");
    if (!cJSON_IsString(role) || !known_role(role->valuestring))
        return refuse(e, param, "'%s' must be one of \"system\", \"user\", \"assistant\", \"developer\", \"tool\"",
                      param);
    snprintf(param, sizeof param, "messages[%d].content", i);
    char *content = message_content(msg, role->valuestring, param, e);
    if (!content) return -1;
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddItemToArray(out, m)) {
        cJSON_Delete(m);
        free(content);
        return refuse(e, param, "out of memory");
    }
    bool ok = cJSON_AddStringToObject(m, "role", role->valuestring) && cJSON_AddStringToObject(m, "content", content);
    free(content);
    if (!ok) return refuse(e, param, "out of memory");
    return message_tool_fields(msg, role->valuestring, i, m, e) || message_reasoning(msg, role->valuestring, i, m, e)
               ? -1 : 0;
}

static int parse_messages(const cJSON *root, srv_request *r, srv_error *e) {
    const cJSON *msgs = member(root, "messages");
    if (!msgs) return refuse(e, "messages", "'messages' is required");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return refuse(e, "messages", "'messages' must be a non-empty array");
    cJSON *out = cJSON_CreateArray();
    if (!out) return refuse(e, "messages", "out of memory");
    int i = 0;
    const cJSON *msg;
    cJSON_ArrayForEach(msg, msgs) {
        if (add_message(msg, i++, out, e)) {
            cJSON_Delete(out);
            return -1;
        }
    }
    r->messages_json = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    return r->messages_json ? 0 : refuse(e, "messages", "out of memory");
}

/* ---- Completions prompts ------------------------------------------------------------------- */

static int text_prompt(const cJSON *v, srv_prompt *p, const char *param, srv_error *e) {
    p->text_len = strlen(v->valuestring);
    if (!(p->text = strdup(v->valuestring))) return refuse(e, param, "out of memory");
    return 0;
}

/* Field `name` ("prompt", "input"): a string, an array of strings, an array of token ids, or an
 * array of such arrays, into *out (n of them, calloc'd; the caller frees them on failure too). */
static int prompt_list(const cJSON *root, const char *name, const srv_limits *lim, srv_prompt **out, int32_t *n_out,
                       srv_error *e) {
    const cJSON *v = member(root, name);
    if (!v) return refuse(e, name, "'%s' is required", name);
    bool one = cJSON_IsString(v) || (cJSON_IsArray(v) && cJSON_IsNumber(v->child));
    int n = one ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (!one && !cJSON_IsArray(v))
        return refuse(e, name, "'%s' must be a string, an array of strings or an array of token ids", name);
    if (n == 0) return refuse(e, name, "'%s' must not be an empty array", name);
    if (n > SRV_MAX_PROMPTS) return refuse(e, name, "'%s' holds %d prompts, more than %d", name, n, SRV_MAX_PROMPTS);
    if (!(*out = calloc((size_t)n, sizeof **out))) return refuse(e, name, "out of memory");
    *n_out = n;
    if (one)
        return cJSON_IsString(v) ? text_prompt(v, &(*out)[0], name, e)
                                 : token_array(v, name, lim->n_vocab, &(*out)[0].tokens, &(*out)[0].n_tokens, e);
    int i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, v) {
        char param[32];
        snprintf(param, sizeof param, "%s[%d]", name, i);
        srv_prompt *p = &(*out)[i++];
        if (cJSON_IsString(item)) {
            if (text_prompt(item, p, param, e)) return -1;
        } else if (cJSON_IsArray(item) && cJSON_GetArraySize(item) > 0) {
            if (token_array(item, param, lim->n_vocab, &p->tokens, &p->n_tokens, e)) return -1;
        } else {
            return refuse(e, param, "'%s' must be a string or a non-empty array of token ids", param);
        }
    }
    return 0;
}

static int parse_prompt(const cJSON *root, const srv_limits *lim, srv_request *r, srv_error *e) {
    return prompt_list(root, "prompt", lim, &r->prompts, &r->n_prompts, e);
}

/* ---- Decoding options ---------------------------------------------------------------------- */

/* "stop": a string or an array of strings; empty strings stop nothing and are dropped. */
static int parse_stop(const cJSON *root, srv_request *r, srv_error *e) {
    const cJSON *v = member(root, "stop");
    if (!v) return 0;
    if (!cJSON_IsString(v) && !cJSON_IsArray(v))
        return refuse(e, "stop", "'stop' must be a string or an array of strings");
    int n = cJSON_IsString(v) ? 1 : cJSON_GetArraySize(v);
    if (n > SRV_MAX_STOP) return refuse(e, "stop", "'stop' holds %d strings, more than %d", n, SRV_MAX_STOP);
    if (!(r->stop = calloc((size_t)(n > 0 ? n : 1), sizeof *r->stop))) return refuse(e, "stop", "out of memory");
    const cJSON *one = cJSON_IsString(v) ? v : v->child;
    for (int i = 0; i < n; i++, one = one->next) {
        if (!cJSON_IsString(one)) return refuse(e, "stop", "'stop[%d]' must be a string", i);
        if (!*one->valuestring) continue;
        if (!(r->stop[r->n_stop] = strdup(one->valuestring))) return refuse(e, "stop", "out of memory");
        r->n_stop++;
    }
    return 0;
}

/* A decimal token id as an object key, e.g. "50256"; -1 when it is not one. */
static long parse_token_key(const char *key) {
    if (!key || !*key || strlen(key) > 10) return -1;
    long id = 0;
    for (const char *p = key; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        id = id * 10 + (*p - '0');
    }
    return id;
}

/* "logit_bias": {"token id": bias in [-100, 100]}; -100 bans the token as OpenAI promises. */
static int parse_logit_bias(const cJSON *root, const srv_limits *lim, srv_request *r, srv_error *e) {
    const cJSON *v = member(root, "logit_bias");
    if (!v) return 0;
    if (!cJSON_IsObject(v)) return refuse(e, "logit_bias", "'logit_bias' must be an object of token ids to biases");
    int n = cJSON_GetArraySize(v);
    if (n > SRV_MAX_LOGIT_BIAS)
        return refuse(e, "logit_bias", "'logit_bias' has %d entries, more than %d", n, SRV_MAX_LOGIT_BIAS);
    if (!(r->logit_bias = malloc((size_t)(n > 0 ? n : 1) * sizeof *r->logit_bias)))
        return refuse(e, "logit_bias", "out of memory");
    const cJSON *item;
    cJSON_ArrayForEach(item, v) {
        long id = parse_token_key(item->string);
        if (id < 0 || id >= lim->n_vocab)
            return refuse(e, "logit_bias", "'logit_bias' keys must be token ids from 0 to %d", lim->n_vocab - 1);
        if (!cJSON_IsNumber(item) || !(item->valuedouble >= -100 && item->valuedouble <= 100))
            return refuse(e, "logit_bias", "'logit_bias' values must be numbers from -100 to 100");
        float bias = item->valuedouble <= -100 ? -INFINITY : (float)item->valuedouble;
        r->logit_bias[r->n_logit_bias++] = (nc_logit_bias){(int32_t)id, bias};
    }
    return 0;
}

/* Chat: "logprobs": bool and "top_logprobs": int. Completions: "logprobs": int (alternatives). */
static int parse_logprobs(const cJSON *root, srv_request *r, srv_error *e) {
    if (r->api == SRV_API_COMPLETIONS) {
        int32_t top = -1;
        if (opt_int(root, "logprobs", 0, SRV_MAX_TOP_LOGPROBS, &top, e)) return -1;
        r->logprobs = top >= 0;
        r->top_logprobs = top > 0 ? top : 0;
        return 0;
    }
    if (opt_bool(root, "logprobs", &r->logprobs, e) ||
        opt_int(root, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &r->top_logprobs, e))
        return -1;
    if (member(root, "top_logprobs") && !r->logprobs)
        return refuse(e, "top_logprobs", "'top_logprobs' needs 'logprobs' to be true");
    return 0;
}

/* "seed": any integer a 64-bit signed or unsigned value holds (negative ones wrap). */
static int parse_seed(const cJSON *root, srv_request *r, srv_error *e) {
    const cJSON *v = member(root, "seed");
    if (!v) return 0;
    if (!is_integer(v) || v->valuedouble < -9223372036854775808.0 || v->valuedouble >= 18446744073709551616.0)
        return refuse(e, "seed", "'seed' must be a 64-bit integer");
    double d = v->valuedouble;
    r->seed = d < 0 ? (uint64_t)(int64_t)d : (uint64_t)d;
    r->seed_given = true;
    return 0;
}

static int parse_stream(const cJSON *root, srv_request *r, srv_error *e) {
    if (opt_bool(root, "stream", &r->stream, e)) return -1;
    const cJSON *so = member(root, "stream_options");
    if (!so) return 0;
    if (!r->stream) return refuse(e, "stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (!cJSON_IsObject(so)) return refuse(e, "stream_options", "'stream_options' must be an object");
    const cJSON *u = member(so, "include_usage");
    if (u && !cJSON_IsBool(u)) return refuse(e, "stream_options.include_usage", "'include_usage' must be a boolean");
    r->include_usage = cJSON_IsTrue(u);
    return 0;
}

/* max_completion_tokens (chat) wins over max_tokens, its deprecated name. */
static int parse_max_tokens(const cJSON *root, srv_request *r, srv_error *e) {
    r->max_tokens = r->api == SRV_API_COMPLETIONS ? 16 : 0;
    if (opt_int(root, "max_tokens", 1, INT32_MAX, &r->max_tokens, e)) return -1;
    return r->api == SRV_API_CHAT ? opt_int(root, "max_completion_tokens", 1, INT32_MAX, &r->max_tokens, e) : 0;
}

static int parse_sampling(const cJSON *root, srv_request *r, srv_error *e) {
    if (opt_float(root, "temperature", 0, 2, &r->temperature, e) || opt_float(root, "top_p", 0, 1, &r->top_p, e) ||
        opt_int(root, "top_k", -1, INT32_MAX, &r->top_k, e) || opt_float(root, "min_p", 0, 1, &r->min_p, e) ||
        opt_float(root, "typical_p", 0, 1, &r->typical_p, e) ||
        opt_float(root, "epsilon_cutoff", 0, 1, &r->epsilon_cutoff, e) ||
        opt_float(root, "eta_cutoff", 0, 1, &r->eta_cutoff, e) ||
        opt_float(root, "dynatemp_range", 0, 100, &r->dynatemp_range, e) ||
        opt_float(root, "dynatemp_exponent", 0, 100, &r->dynatemp_exponent, e) ||
        opt_float(root, "presence_penalty", -2, 2, &r->presence_penalty, e) ||
        opt_float(root, "frequency_penalty", -2, 2, &r->frequency_penalty, e) ||
        opt_float(root, "repetition_penalty", 1e-3, 100, &r->repetition_penalty, e) ||
        opt_int(root, "no_repeat_ngram_size", 0, INT32_MAX, &r->no_repeat_ngram_size, e) ||
        opt_int(root, "min_tokens", 0, INT32_MAX, &r->min_tokens, e) || opt_bool(root, "ignore_eos", &r->ignore_eos, e))
        return -1;
    if (r->top_k < 0) r->top_k = 0; /* -1 is vLLM's "off" */
    if (r->epsilon_cutoff >= 1) return refuse(e, "epsilon_cutoff", "'epsilon_cutoff' must be below 1 (0: off)");
    if (r->eta_cutoff >= 1) return refuse(e, "eta_cutoff", "'eta_cutoff' must be below 1 (0: off)");
    return 0;
}

/* early_stopping: true, false or "never" (vLLM's, after transformers'). */
static int parse_early_stopping(const cJSON *root, srv_request *r, srv_error *e) {
    const cJSON *v = member(root, "early_stopping");
    if (!v) return 0;
    if (cJSON_IsBool(v)) r->early_stopping = cJSON_IsTrue(v) ? NC_EARLY_STOP_FIRST : NC_EARLY_STOP_HEURISTIC;
    else if (cJSON_IsString(v) && !strcmp(v->valuestring, "never")) r->early_stopping = NC_EARLY_STOP_NEVER;
    else return refuse(e, "early_stopping", "'early_stopping' must be true, false or \"never\"");
    return 0;
}

/* A count of sequences (n, best_of, beam groups): each takes a slot, so above the slots the
 * refusal names the server's flag that sets them, the one thing that lets such a request in. */
static int opt_slots(const cJSON *obj, const char *name, const srv_limits *lim, int32_t *out, srv_error *e) {
    const cJSON *v = member(obj, name);
    if (v && is_integer(v) && v->valuedouble > lim->max_n)
        return refuse(e, name, "'%s' is %.17g, more than the server's %d slots (--parallel %d); start it with a "
                      "larger --parallel", name, v->valuedouble, lim->max_n, lim->max_n);
    return opt_int(obj, name, 1, lim->max_n, out, e);
}

/* n, best_of and beam search: beams are best_of (default n) and return the n best. Without beam
 * search best_of may only restate n. */
static int parse_choices(const cJSON *root, const srv_limits *lim, srv_request *r, srv_error *e) {
    bool best_given = member(root, "best_of") != NULL;
    if (opt_slots(root, "n", lim, &r->n, e) || opt_slots(root, "best_of", lim, &r->best_of, e) ||
        opt_bool(root, "use_beam_search", &r->use_beam_search, e) ||
        opt_float(root, "length_penalty", -1e6, 1e6, &r->length_penalty, e) || parse_early_stopping(root, r, e) ||
        opt_slots(root, "num_beam_groups", lim, &r->num_beam_groups, e) ||
        opt_float(root, "diversity_penalty", 0, 1e6, &r->diversity_penalty, e))
        return -1;
    if (!best_given) r->best_of = r->n;
    if (r->best_of % r->num_beam_groups)
        return refuse(e, "num_beam_groups", "'num_beam_groups' (%d) must divide the beams ('best_of', %d)",
                      r->num_beam_groups, r->best_of);
    if (r->best_of < r->n) return refuse(e, "best_of", "'best_of' must be at least 'n'");
    if (!r->use_beam_search) {
        if (r->best_of != r->n) return refuse(e, "best_of", "'best_of' greater than 'n' needs 'use_beam_search'");
        return 0;
    }
    if (r->stream) return refuse(e, "stream", "beam search ('use_beam_search') cannot stream");
    if (r->logprobs) return refuse(e, "logprobs", "beam search ('use_beam_search') does not report logprobs");
    return 0;
}

/* penalty_alpha (transformers'): contrastive search with top_k candidates, each in a sequence of
 * the cache, so at most the server's slots; one choice, no logprobs, no beams. */
static int parse_contrastive(const cJSON *root, const srv_limits *lim, srv_request *r, srv_error *e) {
    r->contrastive = member(root, "penalty_alpha") != NULL;
    if (!r->contrastive) return 0;
    if (opt_float(root, "penalty_alpha", 0, 1, &r->penalty_alpha, e)) return -1;
    if (r->top_k < 1 || r->top_k > lim->max_n)
        return refuse(e, "top_k", "contrastive search ('penalty_alpha') needs 'top_k' candidates between 1 and %d "
                      "(the server's slots, --parallel)", lim->max_n);
    if (r->use_beam_search) return refuse(e, "use_beam_search", "'penalty_alpha' and 'use_beam_search' exclude each other");
    if (r->n > 1) return refuse(e, "n", "contrastive search ('penalty_alpha') is deterministic: 'n' must be 1");
    if (r->logprobs) return refuse(e, "logprobs", "contrastive search ('penalty_alpha') does not report logprobs");
    return 0;
}

/* ---- Samplers under llama.cpp's server's names ---------------------------------------------- */

/* A list of strings: one string or an array of them (each 1 to 256 bytes), into a calloc'd
 * array of copies. */
static int string_list(const cJSON *v, const char *name, int32_t max, char ***out, int32_t *n, srv_error *e) {
    int count = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (count < 0) return refuse(e, name, "'%s' must be a string or an array of strings", name);
    if (count > max) return refuse(e, name, "'%s' holds %d strings, more than %d", name, count, max);
    if (!(*out = calloc((size_t)count + 1, sizeof **out))) return refuse(e, name, "out of memory");
    const cJSON *one = cJSON_IsString(v) ? v : v->child;
    for (int i = 0; i < count; i++, one = one->next) {
        if (!cJSON_IsString(one) || !*one->valuestring || strlen(one->valuestring) > 256)
            return refuse(e, name, "'%s[%d]' must be a string of 1 to 256 bytes", name, i);
        if (!((*out)[i] = strdup(one->valuestring))) return refuse(e, name, "out of memory");
        *n = i + 1;
    }
    return 0;
}

/* "samplers": the stage order, an array of names or one string of names separated by ';'
 * (llama.cpp's forms); the names are checked with the other sampling parameters. */
static int parse_samplers(const cJSON *root, srv_request *r, srv_error *e) {
    const cJSON *v = member(root, "samplers");
    if (!v) return 0;
    char **names = NULL;
    int32_t n = 0;
    int rc = string_list(v, "samplers", 64, &names, &n, e);
    size_t len = 1;
    for (int32_t i = 0; !rc && i < n; i++) len += strlen(names[i]) + 1;
    if (!rc && !(r->samplers = calloc(len, 1))) rc = refuse(e, "samplers", "out of memory");
    for (int32_t i = 0; !rc && i < n; i++) {
        if (i) strcat(r->samplers, ";");
        strcat(r->samplers, names[i]);
    }
    for (int32_t i = 0; names && i < n; i++) free(names[i]);
    free(names);
    return rc;
}

static int parse_llama_samplers(const cJSON *root, srv_request *r, srv_error *e) {
    if (opt_float(root, "repeat_penalty", 1e-3, 100, &r->repetition_penalty, e) ||
        opt_int(root, "repeat_last_n", -1, INT32_MAX, &r->repeat_last_n, e) ||
        opt_int(root, "min_keep", 0, INT32_MAX, &r->min_keep, e) ||
        opt_float(root, "top_n_sigma", -1, 1e6, &r->top_n_sigma, e) ||
        opt_float(root, "xtc_probability", 0, 1, &r->xtc_probability, e) ||
        opt_float(root, "xtc_threshold", 0, 1, &r->xtc_threshold, e) || opt_int(root, "mirostat", 0, 2, &r->mirostat, e) ||
        opt_float(root, "mirostat_tau", 0, 100, &r->mirostat_tau, e) ||
        opt_float(root, "mirostat_eta", 0, 1, &r->mirostat_eta, e) ||
        opt_float(root, "dry_multiplier", 0, 100, &r->dry_multiplier, e) ||
        opt_float(root, "dry_base", 1, 100, &r->dry_base, e) ||
        opt_int(root, "dry_allowed_length", 1, 1 << 20, &r->dry_allowed_length, e) ||
        opt_int(root, "dry_penalty_last_n", -1, INT32_MAX, &r->dry_penalty_last_n, e) || parse_samplers(root, r, e))
        return -1;
    if (member(root, "repeat_penalty") && member(root, "repetition_penalty"))
        return refuse(e, "repeat_penalty", "'repeat_penalty' and 'repetition_penalty' name the same thing: give one");
    const cJSON *b = member(root, "dry_sequence_breakers");
    r->dry_breakers_given = b != NULL;
    return b ? string_list(b, "dry_sequence_breakers", SRV_MAX_BREAKERS, &r->dry_breakers, &r->n_dry_breakers, e) : 0;
}

/* ---- Structured output: grammar, json_schema, response_format ------------------------------ */

static int schema_text(const cJSON *schema, const char *param, srv_request *r, srv_error *e) {
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return refuse(e, param, "'%s' must be a JSON Schema (an object)", param);
    if (!(r->json_schema = cJSON_PrintUnformatted(schema))) return refuse(e, param, "out of memory");
    r->schema_param = param;
    return 0;
}

/* OpenAI's response_format: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema",
 * "json_schema": {"name", "schema", "strict"?, "description"?}}. The output is held to the schema
 * whether or not "strict" is set. */
static int parse_response_format(const cJSON *root, srv_request *r, srv_error *e) {
    static const char *const rf_fields[] = {"type", "json_schema", NULL};
    static const char *const js_fields[] = {"name", "schema", "strict", "description", NULL};
    const cJSON *rf = member(root, "response_format");
    if (!rf) return 0;
    if (!cJSON_IsObject(rf)) return refuse(e, "response_format", "'response_format' must be an object");
    const cJSON *type = member(rf, "type");
    if (!cJSON_IsString(type)) return refuse(e, "response_format.type", "'response_format.type' must be a string");
    if (refuse_extra(rf, rf_fields, "response_format", e)) return -1;
    const char *t = type->valuestring;
    if (!strcmp(t, "text")) return 0;
    if (!strcmp(t, "json_object")) {
        if (!(r->json_schema = strdup("{\"type\":\"object\"}"))) return refuse(e, "response_format", "out of memory");
        r->schema_param = "response_format";
        return 0;
    }
    if (strcmp(t, "json_schema"))
        return refuse(e, "response_format.type",
                      "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    const cJSON *js = member(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return refuse(e, "response_format.json_schema", "'response_format.json_schema' must be an object");
    if (refuse_extra(js, js_fields, "response_format.json_schema", e)) return -1;
    const cJSON *name = member(js, "name"), *strict = member(js, "strict");
    if (!cJSON_IsString(name) || !function_name_ok(name->valuestring))
        return refuse(e, "response_format.json_schema.name",
                      "'response_format.json_schema.name' must be 1 to 64 of a-z A-Z 0-9 _ -");
    if (strict && !cJSON_IsBool(strict))
        return refuse(e, "response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
    const cJSON *schema = member(js, "schema");
    if (!schema) /* OpenAI's default: any JSON object */
        return (r->json_schema = strdup("{\"type\":\"object\"}")) ? (r->schema_param = "response_format.json_schema", 0)
                                                                 : refuse(e, "response_format", "out of memory");
    return schema_text(schema, "response_format.json_schema.schema", r, e);
}

static int parse_structured(const cJSON *root, srv_request *r, srv_error *e) {
    if (opt_string(root, "grammar", &r->grammar, e)) return -1;
    if (r->grammar && strlen(r->grammar) > SRV_MAX_FIELD_TEXT)
        return refuse(e, "grammar", "'grammar' is longer than %d bytes", SRV_MAX_FIELD_TEXT);
    const cJSON *js = member(root, "json_schema"), *rf = member(root, "response_format");
    if (js && rf) return refuse(e, "json_schema", "give 'json_schema' or 'response_format', not both");
    if (js ? schema_text(js, "json_schema", r, e) : parse_response_format(root, r, e)) return -1;
    if (r->grammar && r->json_schema)
        return refuse(e, "grammar", "'grammar' and '%s' both constrain the output: give one", r->schema_param);
    return 0;
}

/* ---- Tools --------------------------------------------------------------------------------- */

/* One tool, {"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}},
 * checked; its name must not repeat an earlier one's. */
static int check_tool(const cJSON *tool, int i, const cJSON *tools, srv_error *e) {
    static const char *const tool_fields[] = {"type", "function", NULL};
    static const char *const fn_fields[] = {"name", "description", "parameters", "strict", NULL};
    char where[64], fwhere[80];
    snprintf(where, sizeof where, "tools[%d]", i);
    snprintf(fwhere, sizeof fwhere, "tools[%d].function", i);
    if (!cJSON_IsObject(tool)) return refuse(e, where, "'%s' must be an object", where);
    const cJSON *type = member(tool, "type"), *fn = member(tool, "function");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
        return refuse(e, where, "'%s.type' must be \"function\" (the only kind of tool)", where);
    if (refuse_extra(tool, tool_fields, where, e)) return -1;
    if (!cJSON_IsObject(fn)) return refuse(e, fwhere, "'%s' must be an object", fwhere);
    if (refuse_extra(fn, fn_fields, fwhere, e)) return -1;
    const cJSON *name = member(fn, "name"), *desc = member(fn, "description"), *params = member(fn, "parameters"),
                *strict = member(fn, "strict");
    if (!cJSON_IsString(name) || !function_name_ok(name->valuestring))
        return refuse(e, fwhere, "'%s.name' must be 1 to 64 of a-z A-Z 0-9 _ -", fwhere);
    if (desc && !cJSON_IsString(desc)) return refuse(e, fwhere, "'%s.description' must be a string", fwhere);
    if (params && !cJSON_IsObject(params))
        return refuse(e, fwhere, "'%s.parameters' must be a JSON Schema (an object)", fwhere);
    if (strict && !cJSON_IsBool(strict)) return refuse(e, fwhere, "'%s.strict' must be a boolean", fwhere);
    for (const cJSON *t = tools->child; t != tool; t = t->next)
        if (!strcmp(member(member(t, "function"), "name")->valuestring, name->valuestring))
            return refuse(e, fwhere, "'%s.name': two tools are named \"%.64s\"", fwhere, name->valuestring);
    return 0;
}

/* "tool_choice": "auto" | "none" | "required" | {"type": "function", "function": {"name"}}. */
static int parse_tool_choice(const cJSON *root, const cJSON *tools, srv_request *r, srv_error *e) {
    const cJSON *v = member(root, "tool_choice");
    if (!v) return 0;
    if (!tools) return refuse(e, "tool_choice", "'tool_choice' needs 'tools'");
    if (cJSON_IsString(v)) {
        static const char *const names[] = {"auto", "none", "required"};
        for (int k = 0; k < 3; k++)
            if (!strcmp(v->valuestring, names[k])) {
                r->tool_choice = (srv_tool_choice[]){SRV_TOOLS_AUTO, SRV_TOOLS_NONE, SRV_TOOLS_REQUIRED}[k];
                return 0;
            }
        return refuse(e, "tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or a function");
    }
    const cJSON *type = cJSON_IsObject(v) ? member(v, "type") : NULL, *fn = cJSON_IsObject(v) ? member(v, "function") : NULL;
    const cJSON *name = cJSON_IsObject(fn) ? member(fn, "name") : NULL;
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
        return refuse(e, "tool_choice",
                      "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                      "\"function\": {\"name\": ...}}");
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) if (!strcmp(member(member(t, "function"), "name")->valuestring, name->valuestring)) {
        r->tool_choice = SRV_TOOLS_NAMED;
        return (r->tool_choice_name = strdup(name->valuestring)) ? 0 : refuse(e, "tool_choice", "out of memory");
    }
    return refuse(e, "tool_choice", "'tool_choice' names \"%.64s\", which is not among the tools", name->valuestring);
}

static int parse_tools(const cJSON *root, srv_request *r, srv_error *e) {
    r->parallel_tool_calls = true;
    const cJSON *tools = member(root, "tools");
    if (tools) {
        if (!cJSON_IsArray(tools)) return refuse(e, "tools", "'tools' must be an array");
        r->n_tools = cJSON_GetArraySize(tools);
        if (r->n_tools > SRV_MAX_TOOLS)
            return refuse(e, "tools", "'tools' holds %d tools, more than %d", r->n_tools, SRV_MAX_TOOLS);
        int i = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) if (check_tool(t, i++, tools, e)) return -1;
        if (r->n_tools && !(r->tools_json = cJSON_PrintUnformatted(tools))) return refuse(e, "tools", "out of memory");
        if (!r->n_tools) tools = NULL; /* [] is no tools, as OpenAI's clients may send */
    }
    if (opt_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, e) || parse_tool_choice(root, tools, r, e))
        return -1;
    if (r->tools_json && (r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED) &&
        (r->grammar || r->json_schema))
        return refuse(e, "tool_choice", "a required tool call is constrained by its own grammar: '%s' cannot be given too",
                      r->grammar ? "grammar" : r->schema_param);
    return 0;
}

/* Beam and contrastive search weigh candidates a grammar would have to follow beam by beam:
 * not done (src/sampling/beam.c). */
static int refuse_constrained_search(const srv_request *r, srv_error *e) {
    bool forced_call = r->tools_json && (r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED);
    const char *what = r->grammar ? "grammar" : r->json_schema ? r->schema_param : forced_call ? "tool_choice" : NULL;
    if (what && (r->use_beam_search || r->contrastive))
        return refuse(e, what, "'%s' constrains the output with a grammar, which %s does not follow", what,
                      r->use_beam_search ? "beam search ('use_beam_search')" : "contrastive search ('penalty_alpha')");
    return 0;
}

/* ---- Reasoning and template variables ----------------------------------------------------- */

static bool listed(const char *const *list, const char *name);

/* reasoning_format: "none" (the reasoning stays in content), "auto" or "deepseek" (split out,
 * llama.cpp's names for the same). */
static int parse_reasoning_format(const cJSON *root, srv_request *r, srv_error *e) {
    const cJSON *v = member(root, "reasoning_format");
    if (!v) return 0;
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "none")) r->reasoning_format = SRV_REASONING_NONE;
    else if (cJSON_IsString(v) && (!strcmp(v->valuestring, "auto") || !strcmp(v->valuestring, "deepseek")))
        r->reasoning_format = SRV_REASONING_AUTO;
    else return refuse(e, "reasoning_format", "'reasoning_format' must be \"none\", \"auto\" or \"deepseek\"");
    return 0;
}

/* reasoning_effort: OpenAI's levels, given to the template as the variable of that name (what
 * gpt-oss's renders as "Reasoning: high"). */
static int parse_reasoning_effort(const cJSON *root, srv_request *r, srv_error *e) {
    static const char *const levels[] = {"minimal", "low", "medium", "high", NULL};
    const cJSON *v = member(root, "reasoning_effort");
    if (!v) return 0;
    if (!cJSON_IsString(v) || !listed(levels, v->valuestring))
        return refuse(e, "reasoning_effort", "'reasoning_effort' must be \"minimal\", \"low\", \"medium\" or \"high\"");
    return (r->reasoning_effort = strdup(v->valuestring)) ? 0 : refuse(e, "reasoning_effort", "out of memory");
}

/* chat_template_kwargs: variables for the template (Qwen3's enable_thinking ...); the ones the
 * request gives by other fields cannot be overridden. */
static int parse_template_kwargs(const cJSON *root, srv_request *r, srv_error *e) {
    static const char *const taken[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token", NULL};
    const cJSON *v = member(root, "chat_template_kwargs");
    if (!v) return 0;
    if (!cJSON_IsObject(v)) return refuse(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (const cJSON *k = v->child; k; k = k->next) {
        if (listed(taken, k->string))
            return refuse(e, "chat_template_kwargs", "'chat_template_kwargs.%s' is set by the request itself, not here",
                          k->string);
        for (const cJSON *g = v->child; g != k; g = g->next)
            if (!strcmp(g->string, k->string))
                return refuse(e, "chat_template_kwargs", "'chat_template_kwargs.%.64s' is given twice", k->string);
    }
    return (r->template_kwargs_json = cJSON_PrintUnformatted(v)) ? 0 : refuse(e, "chat_template_kwargs", "out of memory");
}

static int parse_reasoning(const cJSON *root, srv_request *r, srv_error *e) {
    return parse_reasoning_format(root, r, e) || parse_reasoning_effort(root, r, e) || parse_template_kwargs(root, r, e)
               ? -1 : 0;
}

/* ---- Fields other servers take ------------------------------------------------------------- */

/* OpenAI's metadata: up to 16 string values, for the client's records (nucleus stores nothing). */
static int parse_metadata(const cJSON *root, srv_error *e) {
    const cJSON *v = member(root, "metadata");
    if (!v) return 0;
    if (!cJSON_IsObject(v) || cJSON_GetArraySize(v) > 16)
        return refuse(e, "metadata", "'metadata' must be an object of at most 16 strings");
    for (const cJSON *k = v->child; k; k = k->next)
        if (!cJSON_IsString(k) || strlen(k->string) > 64 || strlen(k->valuestring) > 512)
            return refuse(e, "metadata", "'metadata.%.64s' must be a string of at most 512 characters, its key at most 64",
                          k->string);
    return 0;
}

/* store (OpenAI keeps completions for its dashboard when true) and service_tier: nucleus stores
 * nothing and has one tier. */
static int parse_openai_compat(const cJSON *root, srv_error *e) {
    const cJSON *store = member(root, "store"), *tier = member(root, "service_tier");
    if (store && !cJSON_IsBool(store)) return refuse(e, "store", "'store' must be a boolean");
    if (cJSON_IsTrue(store)) return refuse(e, "store", "'store': true is not supported (this server stores no completions)");
    if (tier && !(cJSON_IsString(tier) && (!strcmp(tier->valuestring, "auto") || !strcmp(tier->valuestring, "default"))))
        return refuse(e, "service_tier", "'service_tier' must be \"auto\" or \"default\" (this server has one tier)");
    return parse_metadata(root, e);
}

/* llama.cpp's n_predict (max_tokens; -1: no limit) and n_probs (logprobs with that many
 * alternatives). */
static int parse_llama_limits(const cJSON *root, srv_request *r, srv_error *e) {
    const cJSON *np = member(root, "n_predict"), *probs = member(root, "n_probs");
    if (np) {
        const char *other = member(root, "max_tokens") ? "max_tokens"
                            : member(root, "max_completion_tokens") ? "max_completion_tokens" : NULL;
        if (other) return refuse(e, "n_predict", "'n_predict' and '%s' name the same thing: give one", other);
        int32_t n = 0;
        if (opt_int(root, "n_predict", -1, INT32_MAX, &n, e)) return -1;
        if (n == 0) return refuse(e, "n_predict", "'n_predict' must be -1 (no limit) or at least 1");
        r->max_tokens = n < 0 ? 0 : n;
    }
    if (probs) {
        if (member(root, "logprobs") || member(root, "top_logprobs"))
            return refuse(e, "n_probs", "'n_probs' and 'logprobs' name the same thing: give one");
        int32_t n = 0;
        if (opt_int(root, "n_probs", 0, SRV_MAX_TOP_LOGPROBS, &n, e)) return -1;
        r->logprobs = n > 0;
        r->top_logprobs = n;
    }
    return 0;
}

/* llama.cpp's cache_prompt, id_slot and t_max_predict_ms. */
static int parse_llama_slots(const cJSON *root, const srv_limits *lim, srv_request *r, srv_error *e) {
    if (opt_bool(root, "cache_prompt", &r->cache_prompt, e) ||
        opt_int(root, "id_slot", -1, lim->max_n - 1, &r->id_slot, e) ||
        opt_int(root, "t_max_predict_ms", 0, INT32_MAX, &r->t_max_predict_ms, e))
        return -1;
    if (r->id_slot >= 0 && (r->n > 1 || r->n_prompts > 1))
        return refuse(e, "id_slot", "'id_slot' runs one sequence in one slot: not with several prompts or 'n' above 1");
    if (r->id_slot >= 0 && (r->use_beam_search || r->contrastive))
        return refuse(e, "id_slot", "'id_slot' is not for beam or contrastive search, which take every slot");
    return 0;
}

static int parse_compat(const cJSON *root, const srv_limits *lim, srv_request *r, srv_error *e) {
    return parse_openai_compat(root, e) || parse_llama_limits(root, r, e) || parse_llama_slots(root, lim, r, e) ? -1 : 0;
}

/* ---- Fields -------------------------------------------------------------------------------- */

/* Every field either API takes; "user" and "metadata" are for the client's own records, accepted
 * and not used. */
static const char *const COMMON_FIELDS[] = {
    "model", "max_tokens", "stream", "stream_options", "stop", "logprobs", "seed", "temperature", "top_p", "top_k",
    "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "dynatemp_range", "dynatemp_exponent", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "repeat_penalty", "repeat_last_n", "no_repeat_ngram_size",
    "min_tokens", "min_keep", "ignore_eos", "logit_bias", "n", "best_of", "use_beam_search", "length_penalty",
    "early_stopping", "num_beam_groups", "diversity_penalty", "penalty_alpha", "top_n_sigma", "xtc_probability",
    "xtc_threshold", "mirostat", "mirostat_tau", "mirostat_eta", "dry_multiplier", "dry_base", "dry_allowed_length",
    "dry_penalty_last_n", "dry_sequence_breakers", "samplers", "grammar", "json_schema", "response_format", "user",
    "echo", "suffix", "nucleus_explain", "metadata", "store", "service_tier", "cache_prompt", "n_predict", "n_probs",
    "id_slot", "t_max_predict_ms", NULL};
static const char *const CHAT_FIELDS[] = {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                                          "parallel_tool_calls", "reasoning_format", "reasoning_effort",
                                          "chat_template_kwargs", NULL};
static const char *const COMPLETION_FIELDS[] = {"prompt", NULL};

static bool listed(const char *const *list, const char *name) {
    for (; *list; list++)
        if (!strcmp(*list, name)) return true;
    return false;
}

/* Fields nobody here implements (parse_object refused keys given twice). */
static int refuse_unknown_fields(const cJSON *root, srv_api api, srv_error *e) {
    const cJSON *f;
    cJSON_ArrayForEach(f, root) {
        if (!listed(COMMON_FIELDS, f->string) && !listed(api == SRV_API_CHAT ? CHAT_FIELDS : COMPLETION_FIELDS, f->string)) {
            if (cJSON_IsNull(f)) continue;
            const char *other = api == SRV_API_CHAT ? (listed(COMPLETION_FIELDS, f->string) ? "/v1/completions" : NULL)
                                                    : (listed(CHAT_FIELDS, f->string) ? "/v1/chat/completions" : NULL);
            if (other) return refuse(e, f->string, "'%s' belongs to %s", f->string, other);
            return refuse(e, f->string, "'%.64s' is not supported by this server", f->string);
        }
    }
    return 0;
}

/* Our extension for the web page's inspector: "nucleus_explain": true | false | {"top_n": N}
 * (README, Web page). Strict: any other value or key is refused, naming it. */
static int parse_explain(const cJSON *root, srv_request *r, srv_error *e) {
    const cJSON *v = member(root, "nucleus_explain");
    if (!v || cJSON_IsFalse(v)) return 0;
    r->explain_top_n = SRV_EXPLAIN_TOP_N;
    if (cJSON_IsObject(v)) {
        for (const cJSON *k = v->child; k; k = k->next)
            if (strcmp(k->string, "top_n"))
                return refuse(e, "nucleus_explain", "'nucleus_explain' has no field '%.64s' (only 'top_n')", k->string);
        const cJSON *n = member(v, "top_n");
        if (n && (!is_integer(n) || n->valuedouble < 1 || n->valuedouble > SRV_MAX_EXPLAIN_TOP_N))
            return refuse(e, "nucleus_explain.top_n", "'nucleus_explain.top_n' must be an integer between 1 and %d",
                          SRV_MAX_EXPLAIN_TOP_N);
        if (n) r->explain_top_n = (int32_t)n->valuedouble;
    } else if (!cJSON_IsTrue(v)) {
        return refuse(e, "nucleus_explain", "'nucleus_explain' must be true, false or {\"top_n\": N}");
    }
    if (r->use_beam_search || r->contrastive)
        return refuse(e, "nucleus_explain", "'nucleus_explain' reports sampled tokens: not with %s",
                      r->use_beam_search ? "beam search ('use_beam_search')" : "contrastive search ('penalty_alpha')");
    return 0;
}

/* OpenAI fields this server does not implement are refused rather than silently ignored. */
static int refuse_unsupported(const cJSON *root, srv_error *e) {
    if (member(root, "user") && !cJSON_IsString(member(root, "user"))) return refuse(e, "user", "'user' must be a string");
    if (cJSON_IsTrue(member(root, "echo"))) return refuse(e, "echo", "'echo' is not supported");
    const cJSON *suffix = member(root, "suffix");
    if (suffix && !(cJSON_IsString(suffix) && !*suffix->valuestring))
        return refuse(e, "suffix", "'suffix' is not supported");
    return 0;
}

static void request_defaults(srv_request *r, srv_api api) {
    *r = (srv_request){.api = api, .n = 1, .temperature = 1, .top_p = 1, .typical_p = 1, .dynatemp_exponent = 1,
                       .repetition_penalty = 1, .length_penalty = 1, .num_beam_groups = 1, .repeat_last_n = 64,
                       .xtc_threshold = 0.1f, .mirostat_tau = 5, .mirostat_eta = 0.1f, .dry_base = 1.75f,
                       .dry_allowed_length = 2, .dry_penalty_last_n = -1, .cache_prompt = true, .id_slot = -1};
}

static int parse_fields(const cJSON *root, const srv_limits *lim, srv_request *r, srv_error *e) {
    if (refuse_unknown_fields(root, r->api, e) || opt_string(root, "model", &r->model, e)) return -1;
    if (r->api == SRV_API_CHAT ? parse_messages(root, r, e) : parse_prompt(root, lim, r, e)) return -1;
    return parse_max_tokens(root, r, e) || parse_stream(root, r, e) || parse_stop(root, r, e) ||
                   parse_logprobs(root, r, e) || parse_seed(root, r, e) || parse_sampling(root, r, e) ||
                   parse_llama_samplers(root, r, e) || parse_logit_bias(root, lim, r, e) ||
                   parse_choices(root, lim, r, e) || parse_contrastive(root, lim, r, e) ||
                   parse_structured(root, r, e) || (r->api == SRV_API_CHAT && parse_tools(root, r, e)) ||
                   refuse_constrained_search(r, e) || parse_explain(root, r, e) || refuse_unsupported(root, e) ||
                   (r->api == SRV_API_CHAT && parse_reasoning(root, r, e)) || parse_compat(root, lim, r, e)
               ? -1
               : 0;
}

int srv_request_parse(srv_api api, const char *body, size_t len, const srv_limits *lim, srv_request *out,
                      srv_error *err) {
    request_defaults(out, api);
    cJSON *root = parse_object(body, len, err);
    if (!root) return -1;
    int rc = parse_fields(root, lim, out, err);
    cJSON_Delete(root);
    if (rc) {
        srv_request_free(out);
        request_defaults(out, api);
    }
    return rc;
}

static void free_prompts(srv_prompt *p, int32_t n) {
    for (int32_t i = 0; p && i < n; i++) {
        free(p[i].text);
        free(p[i].tokens);
    }
    free(p);
}

void srv_request_free(srv_request *r) {
    free(r->model);
    free_prompts(r->prompts, r->n_prompts);
    cJSON_free(r->messages_json);
    for (int32_t i = 0; r->stop && i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->logit_bias);
    cJSON_free(r->tools_json);
    free(r->tool_choice_name);
    free(r->grammar);
    cJSON_free(r->json_schema);
    for (int32_t i = 0; r->dry_breakers && i < r->n_dry_breakers; i++) free(r->dry_breakers[i]);
    free(r->dry_breakers);
    free(r->samplers);
    cJSON_free(r->template_kwargs_json);
    free(r->reasoning_effort);
    memset(r, 0, sizeof *r);
}

/* ---- /tokenize and /detokenize ------------------------------------------------------------- */

int srv_tokenize_parse(const char *body, size_t len, srv_tokenize_req *out, srv_error *err) {
    *out = (srv_tokenize_req){.parse_special = true};
    cJSON *root = parse_object(body, len, err);
    if (!root) return -1;
    int rc = 0;
    if (!member(root, "content")) rc = refuse(err, "content", "'content' is required");
    if (!rc)
        rc = opt_string(root, "content", &out->content, err) || opt_bool(root, "add_special", &out->add_special, err) ||
             opt_bool(root, "parse_special", &out->parse_special, err);
    cJSON_Delete(root);
    if (rc) {
        srv_tokenize_free(out);
        return -1;
    }
    out->len = strlen(out->content);
    return 0;
}

void srv_tokenize_free(srv_tokenize_req *r) {
    free(r->content);
    memset(r, 0, sizeof *r);
}

int srv_detokenize_parse(const char *body, size_t len, int32_t n_vocab, srv_detokenize_req *out, srv_error *err) {
    *out = (srv_detokenize_req){0};
    cJSON *root = parse_object(body, len, err);
    if (!root) return -1;
    const cJSON *v = member(root, "tokens");
    int rc = !v             ? refuse(err, "tokens", "'tokens' is required")
             : !cJSON_IsArray(v) ? refuse(err, "tokens", "'tokens' must be an array of token ids")
                                 : token_array(v, "tokens", n_vocab, &out->tokens, &out->n_tokens, err);
    cJSON_Delete(root);
    if (rc) srv_detokenize_free(out);
    return rc;
}

void srv_detokenize_free(srv_detokenize_req *r) {
    free(r->tokens);
    memset(r, 0, sizeof *r);
}

/* ---- /v1/embeddings ------------------------------------------------------------------------- */

/* Nothing to pool: an empty string (OpenAI refuses it too). */
static int refuse_empty_inputs(const srv_embed_req *r, srv_error *e) {
    for (int32_t i = 0; i < r->n_inputs; i++)
        if (r->inputs[i].text && r->inputs[i].text_len == 0)
            return r->n_inputs == 1 && i == 0 ? refuse(e, "input", "'input' must not be an empty string")
                                              : refuse(e, "input", "'input[%d]' must not be an empty string", i);
    return 0;
}

static int parse_encoding_format(const cJSON *root, srv_embed_req *r, srv_error *e) {
    char *f = NULL;
    if (opt_string(root, "encoding_format", &f, e)) return -1;
    int rc = 0;
    if (f && !strcmp(f, "base64")) r->base64 = true;
    else if (f && strcmp(f, "float"))
        rc = refuse(e, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    free(f);
    return rc;
}

int srv_embed_parse(const char *body, size_t len, const srv_limits *lim, srv_embed_req *out, srv_error *err) {
    *out = (srv_embed_req){0};
    cJSON *root = parse_object(body, len, err);
    if (!root) return -1;
    int rc = member(root, "dimensions")
                 ? refuse(err, "dimensions", "'dimensions' is not supported: embeddings have the model's width")
                 : prompt_list(root, "input", lim, &out->inputs, &out->n_inputs, err) ||
                       refuse_empty_inputs(out, err) || opt_string(root, "model", &out->model, err) ||
                       parse_encoding_format(root, out, err);
    cJSON_Delete(root);
    if (rc) srv_embed_free(out);
    return rc ? -1 : 0;
}

void srv_embed_free(srv_embed_req *r) {
    free_prompts(r->inputs, r->n_inputs);
    free(r->model);
    memset(r, 0, sizeof *r);
}

/* ---- /slots/{id}?action= ------------------------------------------------------------------- */

static bool plain_file_name(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > SRV_SLOT_NAME_MAX || s[0] == '.' || strstr(s, "..")) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i])) return false;
    return true;
}

int srv_slot_parse(const char *id, const char *action, const char *body, size_t len, int32_t n_slots,
                   srv_slot_req *out, srv_error *err) {
    *out = (srv_slot_req){0};
    size_t nd = strspn(id, "0123456789");
    if (nd == 0 || nd > 9 || id[nd] || atol(id) >= n_slots)
        return refuse(err, "id_slot", "slot id '%.32s' (in the path /slots/ID): expected a number from 0 to %d", id,
                      n_slots - 1);
    out->id = (int32_t)atol(id);
    if (!action) return refuse(err, "action", "'action' is required in the query: ?action=save or ?action=restore");
    if (!strcmp(action, "save")) out->op = SRV_SLOT_SAVE;
    else if (!strcmp(action, "restore")) out->op = SRV_SLOT_RESTORE;
    else return refuse(err, "action", "'action' must be save or restore, got '%.32s'", action);
    cJSON *root = parse_object(body, len, err);
    if (!root) return -1;
    const cJSON *v = member(root, "filename");
    /* cJSON ends a string at an escaped NUL: refuse rather than shorten the name */
    int rc = !v ? refuse(err, "filename", "'filename' is required")
             : !cJSON_IsString(v) ? refuse(err, "filename", "'filename' must be a string")
             : !plain_file_name(v->valuestring) || memmem(body, len, "\\u0000", 6)
                 ? refuse(err, "filename",
                          "'filename' must be a plain file name: 1 to %d of A-Z a-z 0-9 . _ -, not starting with "
                          "'.' nor holding '..'", SRV_SLOT_NAME_MAX)
                 : 0;
    if (!rc) memcpy(out->filename, v->valuestring, strlen(v->valuestring) + 1);
    cJSON_Delete(root);
    return rc;
}
