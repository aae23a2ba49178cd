/* OpenAI's Responses API in and out (see responses.h). The request becomes a chat body (cJSON)
 * that request.c checks as any other; items become the messages a chat template reads. */
#include "server/responses.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "server/prepare.h"

/* ---- Reading the request ------------------------------------------------------------------- */

/* A message's content: a string, or parts input_text / output_text / refusal (their texts). */
static char *content_text(const cJSON *c, const char *where, srv_error *e) {
    if (cJSON_IsString(c)) {
        char *s = strdup(c->valuestring);
        if (!s) srv_oom(e);
        return s;
    }
    if (!cJSON_IsArray(c)) {
        srv_refuse(e, where, "'%s' must be a string or an array of content parts", where);
        return NULL;
    }
    char *acc = NULL;
    int k = 0;
    for (const cJSON *p = c->child; p; p = p->next, k++) {
        char pw[160];
        snprintf(pw, sizeof pw, "%s[%d]", where, k);
        static const char *const fields[] = {"type", "text", "annotations", "logprobs", "refusal", NULL};
        const cJSON *type = cJSON_IsObject(p) ? srv_member(p, "type") : NULL;
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        const char *key = !strcmp(t, "refusal") ? "refusal" : "text";
        const cJSON *text = cJSON_IsObject(p) ? srv_member(p, key) : NULL;
        if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text") && strcmp(t, "refusal")) {
            free(acc);
            srv_refuse(e, pw, "'%s': content parts of type \"%.40s\" are not supported (this server reads input_text, "
                   "output_text and refusal)", pw, cJSON_IsString(type) ? t : "?");
            return NULL;
        }
        if (srv_only(p, fields, pw, e) || !cJSON_IsString(text)) {
            free(acc);
            if (cJSON_IsString(text)) return NULL;
            srv_refuse(e, pw, "'%s.%s' must be a string", pw, key);
            return NULL;
        }
        if (!(acc = srv_append_line(acc, text->valuestring))) {
            srv_oom(e);
            return NULL;
        }
    }
    if (!acc && !(acc = strdup(""))) srv_oom(e);
    return acc;
}

/* The conversation being built: messages, and an earlier turn's reasoning waiting for the
 * assistant message it belongs to. */
typedef struct convo {
    cJSON *msgs;
    char *reasoning;
} convo;

static cJSON *new_message(convo *cv, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !srv_add_str(m, "role", role) || !srv_add_str(m, "content", content) || !cJSON_AddItemToArray(cv->msgs, m)) {
        cJSON_Delete(m);
        return NULL;
    }
    if (!strcmp(role, "assistant") && cv->reasoning) {
        bool ok = srv_add_str(m, "reasoning_content", cv->reasoning);
        free(cv->reasoning);
        cv->reasoning = NULL;
        if (!ok) return NULL;
    }
    return m;
}

/* The last message when it is the assistant's (calls join it), else NULL. */
static cJSON *last_assistant(convo *cv) {
    cJSON *last = cJSON_GetArrayItem(cv->msgs, cJSON_GetArraySize(cv->msgs) - 1);
    const cJSON *role = last ? cJSON_GetObjectItemCaseSensitive(last, "role") : NULL;
    return role && !strcmp(role->valuestring, "assistant") && !cv->reasoning ? last : NULL;
}

static int item_message(convo *cv, const cJSON *it, const char *where, srv_error *e) {
    static const char *const fields[] = {"type", "role", "content", "id", "status", "phase", NULL};
    static const char *const roles[] = {"user", "assistant", "system", "developer", NULL};
    if (srv_only(it, fields, where, e)) return -1;
    const cJSON *role = srv_member(it, "role"), *c = srv_member(it, "content");
    if (!cJSON_IsString(role) || !srv_listed(roles, role->valuestring))
        return srv_refuse(e, where, "'%s.role' must be \"user\", \"assistant\", \"system\" or \"developer\"", where);
    char cw[160];
    snprintf(cw, sizeof cw, "%s.content", where);
    if (!c) return srv_refuse(e, cw, "'%s' is required", cw);
    char *text = content_text(c, cw, e);
    if (!text) return -1;
    cJSON *m = new_message(cv, role->valuestring, text);
    free(text);
    return m ? 0 : srv_oom(e);
}

static int item_call(convo *cv, const cJSON *it, const char *where, srv_error *e) {
    static const char *const fields[] = {"type", "id", "call_id", "name", "arguments", "status", NULL};
    if (srv_only(it, fields, where, e)) return -1;
    const cJSON *id = srv_member(it, "call_id"), *name = srv_member(it, "name"), *args = srv_member(it, "arguments");
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args))
        return srv_refuse(e, where, "'%s' needs 'call_id', 'name' and 'arguments' strings", where);
    cJSON *m = last_assistant(cv);
    if (!m && !(m = new_message(cv, "assistant", ""))) return srv_oom(e);
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (!calls && !(calls = cJSON_AddArrayToObject(m, "tool_calls"))) return srv_oom(e);
    cJSON *c = cJSON_CreateObject(), *fn = NULL;
    bool ok = c && srv_add_str(c, "id", id->valuestring) && srv_add_str(c, "type", "function") &&
              (fn = cJSON_AddObjectToObject(c, "function")) && srv_add_str(fn, "name", name->valuestring) &&
              srv_add_str(fn, "arguments", args->valuestring) && cJSON_AddItemToArray(calls, c);
    if (!ok) cJSON_Delete(c);
    return ok ? 0 : srv_oom(e);
}

static int item_output(convo *cv, const cJSON *it, const char *where, srv_error *e) {
    static const char *const fields[] = {"type", "id", "call_id", "output", "status", NULL};
    if (srv_only(it, fields, where, e)) return -1;
    const cJSON *id = srv_member(it, "call_id"), *out = srv_member(it, "output");
    if (!cJSON_IsString(id)) return srv_refuse(e, where, "'%s.call_id' must be a string", where);
    char ow[160];
    snprintf(ow, sizeof ow, "%s.output", where);
    if (!out) return srv_refuse(e, ow, "'%s' is required", ow);
    char *text = content_text(out, ow, e);
    if (!text) return -1;
    cJSON *m = new_message(cv, "tool", text);
    free(text);
    return m && srv_add_str(m, "tool_call_id", id->valuestring) ? 0 : srv_oom(e);
}

/* An earlier turn's reasoning: its reasoning_text content (or what encrypted_content carries,
 * which this server fills with the same text), else its summary, for the next assistant turn. */
static int item_reasoning(convo *cv, const cJSON *it, const char *where, srv_error *e) {
    static const char *const fields[] = {"type", "id", "summary", "content", "encrypted_content", "status", NULL};
    if (srv_only(it, fields, where, e)) return -1;
    const cJSON *content = srv_member(it, "content"), *summary = srv_member(it, "summary"), *enc = srv_member(it, "encrypted_content");
    if (enc && !cJSON_IsString(enc)) return srv_refuse(e, where, "'%s.encrypted_content' must be a string", where);
    const cJSON *parts = content && cJSON_GetArraySize(content) > 0 ? content : summary;
    if (parts && !cJSON_IsArray(parts)) return srv_refuse(e, where, "'%s.content' and '.summary' must be arrays", where);
    char *text = NULL;
    int k = 0;
    for (const cJSON *p = parts ? parts->child : NULL; p; p = p->next, k++) {
        const cJSON *type = cJSON_IsObject(p) ? srv_member(p, "type") : NULL, *t = cJSON_IsObject(p) ? srv_member(p, "text") : NULL;
        if (!cJSON_IsString(type) || (strcmp(type->valuestring, "reasoning_text") && strcmp(type->valuestring, "summary_text")) ||
            !cJSON_IsString(t)) {
            free(text);
            return srv_refuse(e, where, "'%s': parts must be {\"type\": \"reasoning_text\" or \"summary_text\", \"text\"}", where);
        }
        if (!(text = srv_append_line(text, t->valuestring))) return srv_oom(e);
    }
    if (!text && enc && !(text = strdup(enc->valuestring))) return srv_oom(e);
    if (!text) return 0;
    if (cv->reasoning) text = srv_append_line(srv_append_line(NULL, cv->reasoning), text);
    free(cv->reasoning);
    cv->reasoning = text;
    return text ? 0 : srv_oom(e);
}

static int input_items(convo *cv, const cJSON *input, srv_error *e) {
    if (cJSON_IsString(input)) return new_message(cv, "user", input->valuestring) ? 0 : srv_oom(e);
    if (!cJSON_IsArray(input) || !input->child) return srv_refuse(e, "input", "'input' must be a string or a non-empty array of items");
    int i = 0;
    for (const cJSON *it = input->child; it; it = it->next, i++) {
        char where[32];
        snprintf(where, sizeof where, "input[%d]", i);
        if (!cJSON_IsObject(it)) return srv_refuse(e, where, "'%s' must be an object", where);
        const cJSON *type = srv_member(it, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : type ? "?" : "message";
        int rc = !strcmp(t, "message")                ? item_message(cv, it, where, e)
                 : !strcmp(t, "function_call")        ? item_call(cv, it, where, e)
                 : !strcmp(t, "function_call_output") ? item_output(cv, it, where, e)
                 : !strcmp(t, "reasoning")            ? item_reasoning(cv, it, where, e)
                 : !strcmp(t, "item_reference")
                     ? srv_refuse(e, where, "'%s': item_reference needs stored items, and this server stores none: send the "
                              "items themselves", where)
                     : srv_refuse(e, where, "'%s': items of type \"%.40s\" are not supported (this server reads message, "
                              "function_call, function_call_output and reasoning)", where, t);
        if (rc) return -1;
    }
    return 0;
}

static int tools(const cJSON *v, cJSON *oa, srv_error *e) {
    static const char *const fields[] = {"type", "name", "description", "parameters", "strict", NULL};
    if (!cJSON_IsArray(v)) return srv_refuse(e, "tools", "'tools' must be an array");
    cJSON *arr = cJSON_AddArrayToObject(oa, "tools");
    if (!arr) return srv_oom(e);
    int i = 0;
    for (const cJSON *t = v->child; t; t = t->next, i++) {
        char where[32];
        snprintf(where, sizeof where, "tools[%d]", i);
        const cJSON *type = cJSON_IsObject(t) ? srv_member(t, "type") : NULL;
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return srv_refuse(e, where, "'%s': tools of type \"%.40s\" are not run by this server (only \"function\")", where,
                          cJSON_IsString(type) ? type->valuestring : "?");
        if (srv_only(t, fields, where, e)) return -1;
        cJSON *tool = cJSON_CreateObject(), *fn = NULL;
        bool ok = tool && srv_add_str(tool, "type", "function") && (fn = cJSON_AddObjectToObject(tool, "function")) &&
                  cJSON_AddItemToArray(arr, tool);
        if (!ok) {
            cJSON_Delete(tool);
            return srv_oom(e);
        }
        for (const char *const *k = fields + 1; *k; k++) {
            const cJSON *x = srv_member(t, *k);
            cJSON *c = x ? cJSON_Duplicate(x, true) : NULL;
            if (x && (!c || !cJSON_AddItemToObject(fn, *k, c))) {
                cJSON_Delete(c);
                return srv_oom(e);
            }
        }
    }
    return 0;
}

static int tool_choice(const cJSON *v, cJSON *oa, srv_error *e) {
    if (cJSON_IsString(v)) return srv_add_str(oa, "tool_choice", v->valuestring) ? 0 : srv_oom(e);
    static const char *const fields[] = {"type", "name", NULL};
    const cJSON *type = cJSON_IsObject(v) ? srv_member(v, "type") : NULL, *name = cJSON_IsObject(v) ? srv_member(v, "name") : NULL;
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
        return srv_refuse(e, "tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": "
                      "\"function\", \"name\"}");
    if (srv_only(v, fields, "tool_choice", e)) return -1;
    cJSON *c = cJSON_AddObjectToObject(oa, "tool_choice"), *fn = NULL;
    return c && srv_add_str(c, "type", "function") && (fn = cJSON_AddObjectToObject(c, "function")) &&
                   srv_add_str(fn, "name", name->valuestring) ? 0 : srv_oom(e);
}

/* text: {"format": {"type": "text" | "json_object" | "json_schema", ...}, "verbosity"?}. */
static int text_format(const cJSON *v, cJSON *oa, srv_error *e) {
    static const char *const fields[] = {"format", "verbosity", NULL};
    static const char *const ffields[] = {"type", "name", "schema", "strict", "description", NULL};
    if (!cJSON_IsObject(v)) return srv_refuse(e, "text", "'text' must be an object");
    if (srv_only(v, fields, "text", e)) return -1;
    const cJSON *verb = srv_member(v, "verbosity"), *f = srv_member(v, "format");
    if (verb && !(cJSON_IsString(verb) && !strcmp(verb->valuestring, "medium")))
        return srv_refuse(e, "text.verbosity", "'text.verbosity' must be \"medium\": these models have no other");
    if (!f) return 0;
    const cJSON *type = cJSON_IsObject(f) ? srv_member(f, "type") : NULL;
    if (!cJSON_IsString(type)) return srv_refuse(e, "text.format", "'text.format' must be an object with a 'type'");
    if (srv_only(f, ffields, "text.format", e)) return -1;
    const char *t = type->valuestring;
    cJSON *rf = cJSON_AddObjectToObject(oa, "response_format");
    if (!rf) return srv_oom(e);
    if (!strcmp(t, "text") || !strcmp(t, "json_object")) return srv_add_str(rf, "type", t) ? 0 : srv_oom(e);
    if (strcmp(t, "json_schema"))
        return srv_refuse(e, "text.format.type", "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    cJSON *js = NULL;
    if (!srv_add_str(rf, "type", "json_schema") || !(js = cJSON_AddObjectToObject(rf, "json_schema"))) return srv_oom(e);
    for (const char *const *k = ffields + 1; *k; k++) {
        const cJSON *x = srv_member(f, *k);
        cJSON *c = x ? cJSON_Duplicate(x, true) : NULL;
        if (x && (!c || !cJSON_AddItemToObject(js, *k, c))) {
            cJSON_Delete(c);
            return srv_oom(e);
        }
    }
    return 0;
}

/* reasoning: {"effort"?, "summary"?}: the effort goes to the template; the reasoning itself is
 * returned (reasoning_text), no summary is written, which "auto" allows. */
static int reasoning(const cJSON *v, cJSON *oa, srv_error *e) {
    static const char *const fields[] = {"effort", "summary", "generate_summary", NULL};
    static const char *const efforts[] = {"minimal", "low", "medium", "high", NULL};
    if (!cJSON_IsObject(v)) return srv_refuse(e, "reasoning", "'reasoning' must be an object");
    if (srv_only(v, fields, "reasoning", e)) return -1;
    const cJSON *effort = srv_member(v, "effort"), *summary = srv_member(v, "summary"), *gs = srv_member(v, "generate_summary");
    if (effort && (!cJSON_IsString(effort) || !srv_listed(efforts, effort->valuestring)))
        return srv_refuse(e, "reasoning.effort", "'reasoning.effort' must be \"minimal\", \"low\", \"medium\" or \"high\"");
    if ((summary && !(cJSON_IsString(summary) && !strcmp(summary->valuestring, "auto"))) ||
        (gs && !(cJSON_IsString(gs) && !strcmp(gs->valuestring, "auto"))))
        return srv_refuse(e, "reasoning.summary", "'reasoning.summary' must be \"auto\": this server writes no summaries (the "
                      "reasoning itself comes as reasoning_text)");
    return !effort || srv_add_str(oa, "reasoning_effort", effort->valuestring) ? 0 : srv_oom(e);
}

/* What the writer echoes of the request, and whether it wants encrypted_content. */
typedef struct resp_writer {
    char id[48];
    char *model;
    cJSON *echo;           /* instructions, max_output_tokens, tools ...: copied into each Response */
    bool encrypted;        /* include: ["reasoning.encrypted_content"] */
    int64_t created;
    uint64_t seq;          /* sequence_number of the next event */
    int open;              /* the item being streamed: 0 none, 1 reasoning, 2 message */
    bool msg_opened;       /* the message item was streamed */
    int n_items;           /* output items so far */
    char *reasoning, *content;  /* what the stream's deltas wrote into them */
    size_t n_reasoning, n_content;
    char rs_id[48], msg_id[48];
    int rs_index, msg_index;
} resp_writer;

static int check_fields(const cJSON *root, resp_writer *w, srv_error *e) {
    static const char *const fields[] = {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
                                         "text", "max_output_tokens", "temperature", "top_p", "stream", "store",
                                         "previous_response_id", "metadata", "user", "service_tier", "reasoning",
                                         "include", "truncation", "prompt_cache_key", "safety_identifier",
                                         "stream_options", "top_logprobs", "background", NULL};
    if (srv_member(root, "previous_response_id"))
        return srv_refuse(e, "previous_response_id", "'previous_response_id' is not supported: this server keeps no responses "
                      "(it is stateless); send the whole conversation in 'input'");
    if (srv_only(root, fields, "", e)) return -1;
    const cJSON *store = srv_member(root, "store"), *trunc = srv_member(root, "truncation"), *bg = srv_member(root, "background"),
                *tl = srv_member(root, "top_logprobs"), *inc = srv_member(root, "include"), *so = srv_member(root, "stream_options");
    if (store && !cJSON_IsBool(store)) return srv_refuse(e, "store", "'store' must be a boolean");
    if (cJSON_IsTrue(store))
        return srv_refuse(e, "store", "'store': true is not supported: this server keeps no responses (give store: false)");
    if (trunc && !(cJSON_IsString(trunc) && !strcmp(trunc->valuestring, "disabled")))
        return srv_refuse(e, "truncation", "'truncation' must be \"disabled\": a conversation longer than the context is refused");
    if (bg && !cJSON_IsFalse(bg)) return srv_refuse(e, "background", "'background' must be false: responses are not stored");
    if (tl && !(cJSON_IsNumber(tl) && tl->valuedouble == 0))
        return srv_refuse(e, "top_logprobs", "'top_logprobs' is not supported by /v1/responses (use /v1/chat/completions)");
    if (so && (!cJSON_IsObject(so) || !cJSON_IsTrue(srv_member(root, "stream"))))
        return srv_refuse(e, "stream_options", "'stream_options' must be an object, with 'stream': true");
    static const char *const so_fields[] = {"include_obfuscation", NULL};
    if (so && srv_only(so, so_fields, "stream_options", e)) return -1;
    for (const char *const *k = (const char *const[]){"prompt_cache_key", "safety_identifier", "instructions", NULL}; *k; k++)
        if (srv_member(root, *k) && !cJSON_IsString(srv_member(root, *k))) return srv_refuse(e, *k, "'%s' must be a string", *k);
    if (inc) {
        if (!cJSON_IsArray(inc)) return srv_refuse(e, "include", "'include' must be an array");
        for (const cJSON *x = inc->child; x; x = x->next) {
            if (cJSON_IsString(x) && !strcmp(x->valuestring, "reasoning.encrypted_content")) w->encrypted = true;
            else return srv_refuse(e, "include", "'include' may hold \"reasoning.encrypted_content\" only");
        }
    }
    return 0;
}

static int translate(const cJSON *root, cJSON *oa, resp_writer *w, srv_error *e) {
    if (check_fields(root, w, e)) return -1;
    const cJSON *mot = srv_member(root, "max_output_tokens"), *input = srv_member(root, "input"), *instr = srv_member(root, "instructions");
    if (mot && (!cJSON_IsNumber(mot) || mot->valuedouble != floor(mot->valuedouble) || mot->valuedouble < 1 ||
                mot->valuedouble > INT32_MAX))
        return srv_refuse(e, "max_output_tokens", "'max_output_tokens' must be a positive integer");
    if (srv_copy_member(root, "model", oa, "model", e) || srv_copy_member(root, "max_output_tokens", oa, "max_tokens", e) ||
        srv_copy_member(root, "temperature", oa, "temperature", e) || srv_copy_member(root, "top_p", oa, "top_p", e) ||
        srv_copy_member(root, "stream", oa, "stream", e) || srv_copy_member(root, "parallel_tool_calls", oa, "parallel_tool_calls", e) ||
        srv_copy_member(root, "metadata", oa, "metadata", e) || srv_copy_member(root, "user", oa, "user", e) ||
        srv_copy_member(root, "service_tier", oa, "service_tier", e))
        return -1;
    if (!input) return srv_refuse(e, "input", "'input' is required");
    convo cv = {.msgs = cJSON_AddArrayToObject(oa, "messages")};
    if (!cv.msgs) return srv_oom(e);
    if (instr && !new_message(&cv, "system", instr->valuestring)) return srv_oom(e);
    int rc = input_items(&cv, input, e);
    free(cv.reasoning); /* a reasoning item no assistant turn followed: nothing renders it */
    if (rc) return -1;
    const cJSON *t = srv_member(root, "tools"), *tc = srv_member(root, "tool_choice"), *tx = srv_member(root, "text"),
                *rs = srv_member(root, "reasoning");
    if ((t && tools(t, oa, e)) || (tc && tool_choice(tc, oa, e)) || (tx && text_format(tx, oa, e)) ||
        (rs && reasoning(rs, oa, e)))
        return -1;
    /* what each Response repeats of its request */
    static const char *const echoed[] = {"instructions", "max_output_tokens", "parallel_tool_calls", "temperature",
                                         "top_p", "tool_choice", "tools", "text", "reasoning", "metadata", "user",
                                         "service_tier", "prompt_cache_key", "safety_identifier", NULL};
    for (const char *const *k = echoed; *k; k++) {
        const cJSON *v = srv_member(root, *k);
        cJSON *c = v ? cJSON_Duplicate(v, true) : NULL;
        if (v && (!c || !cJSON_AddItemToObject(w->echo, *k, c))) {
            cJSON_Delete(c);
            return srv_oom(e);
        }
    }
    return 0;
}

static void writer_free(void *st) {
    resp_writer *w = st;
    if (!w) return;
    cJSON_Delete(w->echo);
    free(w->model);
    free(w->reasoning);
    free(w->content);
    free(w);
}

static void new_id(char *out, size_t cap, const char *prefix) {
    snprintf(out, cap, "%s_%016llx%016llx", prefix, (unsigned long long)srv_random_u64(),
             (unsigned long long)srv_random_u64());
}

int srv_responses_request(const char *body, size_t len, const srv_limits *lim, const char *model, srv_request *out,
                          void **writer, srv_error *e) {
    memset(out, 0, sizeof *out);
    *writer = NULL;
    cJSON *root = srv_json_parse_object(body, len, e);
    if (!root) return -1;
    resp_writer *w = calloc(1, sizeof *w);
    cJSON *oa = cJSON_CreateObject();
    int rc = 0;
    if (!w || !oa || !(w->echo = cJSON_CreateObject()) || !(w->model = strdup(model))) rc = srv_oom(e);
    if (!rc) rc = translate(root, oa, w, e);
    cJSON_Delete(root);
    if (!rc) {
        rc = srv_request_from_json(SRV_API_CHAT, oa, lim, out, e);
        if (rc && !strcmp(e->param, "max_tokens")) snprintf(e->param, sizeof e->param, "max_output_tokens");
        if (rc && !strncmp(e->param, "messages", 8)) snprintf(e->param, sizeof e->param, "input");
        if (rc && !strncmp(e->param, "response_format", 15)) snprintf(e->param, sizeof e->param, "text.format");
    }
    cJSON_Delete(oa);
    if (rc) {
        writer_free(w);
        return -1;
    }
    new_id(w->id, sizeof w->id, "resp");
    w->created = (int64_t)time(NULL);
    *writer = w;
    return 0;
}

/* ---- Writing the reply --------------------------------------------------------------------- */

static bool incomplete(nc_finish f) { return f == NC_FINISH_LENGTH || f == NC_FINISH_CONTEXT; }

static cJSON *reasoning_item(const resp_writer *w, const char *text, size_t n, bool done) {
    cJSON *it = cJSON_CreateObject(), *content = NULL, *part = NULL;
    bool ok = it && srv_add_str(it, "id", w->rs_id) && srv_add_str(it, "type", "reasoning") && cJSON_AddArrayToObject(it, "summary") &&
              (content = cJSON_AddArrayToObject(it, "content"));
    if (ok && done) ok = (part = cJSON_CreateObject()) && cJSON_AddItemToArray(content, part) &&
                         srv_add_str(part, "type", "reasoning_text") && srv_put_text(part, "text", text, n) &&
                         (!w->encrypted || srv_put_text(it, "encrypted_content", text, n));
    if (ok && done) ok = srv_add_str(it, "status", "completed");
    if (!ok) {
        cJSON_Delete(it);
        return NULL;
    }
    return it;
}

static cJSON *text_part(const char *text, size_t n) {
    cJSON *p = cJSON_CreateObject();
    bool ok = p && srv_add_str(p, "type", "output_text") && srv_put_text(p, "text", text, n) && cJSON_AddArrayToObject(p, "annotations") &&
              cJSON_AddArrayToObject(p, "logprobs");
    if (!ok) {
        cJSON_Delete(p);
        return NULL;
    }
    return p;
}

static cJSON *message_item(const resp_writer *w, const char *text, size_t n, const char *status, bool with_text) {
    cJSON *it = cJSON_CreateObject(), *content = NULL, *part = NULL;
    bool ok = it && srv_add_str(it, "id", w->msg_id) && srv_add_str(it, "type", "message") && srv_add_str(it, "status", status) &&
              srv_add_str(it, "role", "assistant") && (content = cJSON_AddArrayToObject(it, "content"));
    if (ok && with_text) ok = (part = text_part(text, n)) && cJSON_AddItemToArray(content, part);
    if (!ok) {
        if (part && !cJSON_GetArraySize(content)) cJSON_Delete(part);
        cJSON_Delete(it);
        return NULL;
    }
    return it;
}

static cJSON *call_item(const srv_tool_call *c, const char *status, bool with_args) {
    char id[48];
    snprintf(id, sizeof id, "fc_%s", c->id);
    cJSON *it = cJSON_CreateObject();
    bool ok = it && srv_add_str(it, "id", id) && srv_add_str(it, "type", "function_call") && srv_add_str(it, "status", status) &&
              srv_add_str(it, "call_id", c->id) && srv_add_str(it, "name", c->name) &&
              srv_add_str(it, "arguments", with_args && c->arguments ? c->arguments : "");
    if (!ok) {
        cJSON_Delete(it);
        return NULL;
    }
    return it;
}

/* The Response object: status, output (when d: the reply's items), usage (when d). */
static cJSON *response_object(resp_writer *w, const srv_dialect_end *d) {
    cJSON *r = cJSON_CreateObject(), *out = NULL;
    bool done = d != NULL, inc = d && incomplete(d->finish);
    bool ok = r && srv_add_str(r, "id", w->id) && srv_add_str(r, "object", "response") &&
              cJSON_AddNumberToObject(r, "created_at", (double)w->created) &&
              srv_add_str(r, "status", !done ? "in_progress" : inc ? "incomplete" : "completed") &&
              cJSON_AddNullToObject(r, "error") && srv_add_str(r, "model", w->model) &&
              (out = cJSON_AddArrayToObject(r, "output")) && cJSON_AddNullToObject(r, "previous_response_id") &&
              cJSON_AddFalseToObject(r, "store") && srv_add_str(r, "truncation", "disabled");
    if (ok && inc) {
        cJSON *why = cJSON_AddObjectToObject(r, "incomplete_details");
        ok = why && srv_add_str(why, "reason", "max_output_tokens");
    } else if (ok) {
        ok = cJSON_AddNullToObject(r, "incomplete_details") != NULL;
    }
    for (const cJSON *x = w->echo->child; ok && x; x = x->next) {
        cJSON *c = cJSON_Duplicate(x, true);
        ok = c && cJSON_AddItemToObject(r, x->string, c);
        if (!ok) cJSON_Delete(c);
    }
    static const struct { const char *k; int kind; } defaults[] = {
        {"instructions", 0}, {"max_output_tokens", 0}, {"tools", 1}, {"tool_choice", 2}, {"parallel_tool_calls", 3},
        {"metadata", 4}, {"temperature", 5}, {"top_p", 5}, {"text", 6}, {"reasoning", 7}, {"user", 0}};
    for (size_t i = 0; ok && i < sizeof defaults / sizeof *defaults; i++) {
        if (cJSON_GetObjectItemCaseSensitive(r, defaults[i].k)) continue;
        const char *k = defaults[i].k;
        cJSON *f = NULL;
        switch (defaults[i].kind) {
        case 0: ok = cJSON_AddNullToObject(r, k) != NULL; break;
        case 1: ok = cJSON_AddArrayToObject(r, k) != NULL; break;
        case 2: ok = srv_add_str(r, k, "auto"); break;
        case 3: ok = cJSON_AddTrueToObject(r, k) != NULL; break;
        case 4: ok = cJSON_AddObjectToObject(r, k) != NULL; break;
        case 5: ok = cJSON_AddNumberToObject(r, k, 1) != NULL; break;
        case 6: ok = (f = cJSON_AddObjectToObject(r, k)) && (f = cJSON_AddObjectToObject(f, "format")) && srv_add_str(f, "type", "text"); break;
        default: ok = (f = cJSON_AddObjectToObject(r, k)) && cJSON_AddNullToObject(f, "effort") && cJSON_AddNullToObject(f, "summary"); break;
        }
    }
    if (ok && done) {
        const srv_reply *rp = d->reply;
        cJSON *it;
        if (rp->n_reasoning) ok = (it = reasoning_item(w, rp->reasoning, rp->n_reasoning, true)) && cJSON_AddItemToArray(out, it);
        if (ok && (rp->n_content || rp->calls.n == 0))
            ok = (it = message_item(w, rp->content, rp->n_content, inc ? "incomplete" : "completed", true)) &&
                 cJSON_AddItemToArray(out, it);
        for (int32_t k = 0; ok && k < rp->calls.n; k++)
            ok = (it = call_item(&rp->calls.calls[k], "completed", true)) && cJSON_AddItemToArray(out, it);
        const srv_usage *u = d->usage;
        cJSON *usage = NULL, *det = NULL;
        ok = ok && (usage = cJSON_AddObjectToObject(r, "usage")) &&
             cJSON_AddNumberToObject(usage, "input_tokens", (double)u->prompt_tokens) &&
             (det = cJSON_AddObjectToObject(usage, "input_tokens_details")) &&
             cJSON_AddNumberToObject(det, "cached_tokens", (double)u->cached_tokens) &&
             cJSON_AddNumberToObject(usage, "output_tokens", (double)u->completion_tokens) &&
             (det = cJSON_AddObjectToObject(usage, "output_tokens_details")) &&
             cJSON_AddNumberToObject(det, "reasoning_tokens", 0) &&
             cJSON_AddNumberToObject(usage, "total_tokens", (double)(u->prompt_tokens + u->completion_tokens));
    } else if (ok) {
        ok = cJSON_AddNullToObject(r, "usage") != NULL;
    }
    if (!ok) {
        cJSON_Delete(r);
        return NULL;
    }
    return r;
}

static char *whole(void *st, const srv_dialect_end *d) {
    resp_writer *w = st;
    new_id(w->rs_id, sizeof w->rs_id, "rs");
    new_id(w->msg_id, sizeof w->msg_id, "msg");
    cJSON *r = response_object(w, d);
    return srv_json_print(r, r != NULL);
}

/* One event: data (taken) with its type and sequence number. */
static char *event(resp_writer *w, const char *type, cJSON *data) {
    bool ok = data && cJSON_AddStringToObject(data, "type", type) &&
              cJSON_AddNumberToObject(data, "sequence_number", (double)w->seq++);
    return srv_sse_named(type, srv_json_print(data, ok));
}

/* {"response": the object} as event type. */
static char *response_event(resp_writer *w, const char *type, const srv_dialect_end *d) {
    cJSON *data = cJSON_CreateObject(), *r = response_object(w, d);
    if (!data || !r || !cJSON_AddItemToObject(data, "response", r)) {
        cJSON_Delete(r);
        cJSON_Delete(data);
        return NULL;
    }
    return event(w, type, data);
}

static char *begin(void *st, int64_t prompt_tokens) {
    resp_writer *w = st;
    (void)prompt_tokens;
    new_id(w->rs_id, sizeof w->rs_id, "rs");
    new_id(w->msg_id, sizeof w->msg_id, "msg");
    char *out = response_event(w, "response.created", NULL); /* first: it takes sequence number 0 */
    return srv_text_cat(out, response_event(w, "response.in_progress", NULL));
}

/* An event about item `index` (and its content part 0 when part). */
static cJSON *item_data(int index, const char *item_id, bool part) {
    cJSON *d = cJSON_CreateObject();
    bool ok = d && (!item_id || srv_add_str(d, "item_id", item_id)) && cJSON_AddNumberToObject(d, "output_index", index) &&
              (!part || cJSON_AddNumberToObject(d, "content_index", 0));
    if (!ok) {
        cJSON_Delete(d);
        return NULL;
    }
    return d;
}

static char *item_event(resp_writer *w, const char *type, int index, cJSON *item) {
    cJSON *d = item_data(index, NULL, false);
    if (!d || !item || !cJSON_AddItemToObject(d, "item", item)) {
        cJSON_Delete(item);
        cJSON_Delete(d);
        return NULL;
    }
    return event(w, type, d);
}

static char *part_event(resp_writer *w, const char *type, int index, const char *item_id, cJSON *part) {
    cJSON *d = item_data(index, item_id, true);
    if (!d || !part || !cJSON_AddItemToObject(d, "part", part)) {
        cJSON_Delete(part);
        cJSON_Delete(d);
        return NULL;
    }
    return event(w, type, d);
}

static char *text_event(resp_writer *w, const char *type, int index, const char *item_id, const char *key, const char *s,
                        size_t n, bool logprobs) {
    cJSON *d = item_data(index, item_id, true);
    bool ok = d && srv_put_text(d, key, s, n) && (!logprobs || cJSON_AddArrayToObject(d, "logprobs"));
    if (!ok) {
        cJSON_Delete(d);
        return NULL;
    }
    return event(w, type, d);
}

static cJSON *reasoning_part(const char *s, size_t n) {
    cJSON *p = cJSON_CreateObject();
    if (!p || !srv_add_str(p, "type", "reasoning_text") || !srv_put_text(p, "text", s, n)) {
        cJSON_Delete(p);
        return NULL;
    }
    return p;
}

/* Text streamed into an item so far (what its closing events repeat). */
static bool grow(char **acc, size_t *n, const char *s, size_t k) {
    char *g = realloc(*acc, *n + k + 1);
    if (!g) return false;
    memcpy(g + *n, s, k);
    *n += k;
    g[*n] = 0;
    *acc = g;
    return true;
}

/* The item being streamed ends. */
static char *close_item(resp_writer *w, bool inc) {
    char *out = strdup("");
    const char *r = w->reasoning ? w->reasoning : "", *c = w->content ? w->content : "";
    if (w->open == 1) {
        int i = w->rs_index;
        out = srv_text_cat(out, text_event(w, "response.reasoning_text.done", i, w->rs_id, "text", r, w->n_reasoning, false));
        out = srv_text_cat(out, part_event(w, "response.content_part.done", i, w->rs_id, reasoning_part(r, w->n_reasoning)));
        out = srv_text_cat(out, item_event(w, "response.output_item.done", i, reasoning_item(w, r, w->n_reasoning, true)));
    } else if (w->open == 2) {
        int i = w->msg_index;
        out = srv_text_cat(out, text_event(w, "response.output_text.done", i, w->msg_id, "text", c, w->n_content, true));
        out = srv_text_cat(out, part_event(w, "response.content_part.done", i, w->msg_id, text_part(c, w->n_content)));
        out = srv_text_cat(out, item_event(w, "response.output_item.done", i,
                                           message_item(w, c, w->n_content, inc ? "incomplete" : "completed", true)));
    }
    w->open = 0;
    return out;
}

/* Open the reasoning (kind 1) or message (2) item unless it is the one open: the reply's
 * reasoning comes whole before its content, so the reasoning item closes when the content
 * starts. */
static char *open_item(resp_writer *w, int kind) {
    if (w->open == kind) return strdup("");
    char *out = close_item(w, false);
    w->open = kind;
    if (kind == 1) {
        w->rs_index = w->n_items++;
        out = srv_text_cat(out, item_event(w, "response.output_item.added", w->rs_index, reasoning_item(w, "", 0, false)));
        return srv_text_cat(out, part_event(w, "response.content_part.added", w->rs_index, w->rs_id, reasoning_part("", 0)));
    }
    w->msg_index = w->n_items++;
    w->msg_opened = true;
    out = srv_text_cat(out, item_event(w, "response.output_item.added", w->msg_index, message_item(w, "", 0, "in_progress", false)));
    return srv_text_cat(out, part_event(w, "response.content_part.added", w->msg_index, w->msg_id, text_part("", 0)));
}

static char *delta(void *st, const char *reasoning, size_t n_reasoning, const char *content, size_t n_content,
                   const srv_logprob *lp, int32_t n_lp) {
    (void)lp, (void)n_lp;
    resp_writer *w = st;
    char *out = strdup("");
    if (n_reasoning) {
        out = srv_text_cat(out, open_item(w, 1));
        if (!grow(&w->reasoning, &w->n_reasoning, reasoning, n_reasoning)) out = srv_text_cat(out, NULL);
        out = srv_text_cat(out, text_event(w, "response.reasoning_text.delta", w->rs_index, w->rs_id, "delta", reasoning,
                                           n_reasoning, false));
    }
    if (n_content) {
        out = srv_text_cat(out, open_item(w, 2));
        if (!grow(&w->content, &w->n_content, content, n_content)) out = srv_text_cat(out, NULL);
        out = srv_text_cat(out, text_event(w, "response.output_text.delta", w->msg_index, w->msg_id, "delta", content,
                                           n_content, true));
    }
    return out;
}

static char *end(void *st, const srv_dialect_end *d) {
    resp_writer *w = st;
    const srv_reply *rp = d->reply;
    bool inc = incomplete(d->finish);
    char *out = close_item(w, inc);
    if (!w->msg_opened && rp->calls.n == 0) { /* an empty answer is still a message, as the whole Response has */
        out = srv_text_cat(out, open_item(w, 2));
        out = srv_text_cat(out, close_item(w, inc));
    }
    for (int32_t k = 0; k < rp->calls.n; k++) {
        const srv_tool_call *c = &rp->calls.calls[k];
        int i = w->n_items++;
        char id[48];
        snprintf(id, sizeof id, "fc_%s", c->id);
        out = srv_text_cat(out, item_event(w, "response.output_item.added", i, call_item(c, "in_progress", false)));
        cJSON *dd = item_data(i, id, false);
        bool ok = dd && srv_add_str(dd, "delta", c->arguments ? c->arguments : "");
        out = srv_text_cat(out, ok ? event(w, "response.function_call_arguments.delta", dd) : (cJSON_Delete(dd), NULL));
        dd = item_data(i, id, false);
        ok = dd && srv_add_str(dd, "arguments", c->arguments ? c->arguments : "") && srv_add_str(dd, "name", c->name);
        out = srv_text_cat(out, ok ? event(w, "response.function_call_arguments.done", dd) : (cJSON_Delete(dd), NULL));
        out = srv_text_cat(out, item_event(w, "response.output_item.done", i, call_item(c, "completed", true)));
    }
    return srv_text_cat(out, response_event(w, inc ? "response.incomplete" : "response.completed", d));
}

static char *stream_error(void *st, const srv_error *e) {
    resp_writer *w = st;
    cJSON *d = cJSON_CreateObject();
    bool ok = d && (e->code ? srv_add_str(d, "code", e->code) : cJSON_AddNullToObject(d, "code") != NULL) &&
              srv_add_str(d, "message", e->message) &&
              (e->param[0] ? srv_add_str(d, "param", e->param) : cJSON_AddNullToObject(d, "param") != NULL);
    if (!ok) {
        cJSON_Delete(d);
        return NULL;
    }
    return event(w, "error", d);
}

const srv_dialect srv_responses = {.whole = whole, .begin = begin, .delta = delta, .end = end, .error = stream_error,
                                   .error_body = srv_json_error, .free = writer_free};
