/* Tool calling over the model's own conventions (see tool_calls.h): tools described to templates
 * that take none, and the calls of the JSON-shaped syntaxes parsed out of replies. */
#include "server/tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "nucleus.h"
#include "server/marker.h"
#include "common.h"
#include "server/prepare.h"

/* ---- Describing tools to a template that does not take them -------------------------------- */

static const char TOOLS_INTRO[] =
    "# Tools\n\nYou may call functions to answer. Their signatures, in JSON, are inside <tools></tools>:\n<tools>";
static const char TOOLS_HOWTO[] =
    "\n</tools>\n\nTo call a function, reply with a JSON object holding its name and arguments inside "
    "<tool_call></tool_call> tags, one block per call:\n<tool_call>\n{\"name\": <function name>, \"arguments\": "
    "<arguments as a JSON object>}\n</tool_call>";

/* The description of tools (a JSON array), malloc'd. */
static char *tools_text(const cJSON *tools) {
    size_t cap = sizeof TOOLS_INTRO + sizeof TOOLS_HOWTO + 1;
    char **lines = calloc((size_t)cJSON_GetArraySize(tools) + 1, sizeof *lines);
    int n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        if (!lines || !(lines[n] = cJSON_PrintUnformatted(t))) break;
        cap += strlen(lines[n++]) + 1;
    }
    char *out = lines && n == cJSON_GetArraySize(tools) ? malloc(cap) : NULL;
    if (out) {
        strcpy(out, TOOLS_INTRO);
        for (int i = 0; i < n; i++) strcat(strcat(out, "\n"), lines[i]);
        strcat(out, TOOLS_HOWTO);
    }
    for (int i = 0; i < n; i++) cJSON_free(lines[i]);
    free(lines);
    return out;
}

/* Replace obj's string member name with a + sep + b (a may be ""). */
static bool set_joined(cJSON *obj, const char *name, const char *a, const char *sep, const char *b) {
    size_t n = strlen(a) + strlen(sep) + strlen(b) + 1;
    char *s = malloc(n);
    if (!s) return false;
    snprintf(s, n, "%s%s%s", a, *a ? sep : "", b);
    cJSON *v = cJSON_CreateString(s);
    free(s);
    return v && cJSON_ReplaceItemInObjectCaseSensitive(obj, name, v);
}

static bool starts_with(const char *t, size_t n, size_t i, const char *lit) {
    size_t k = strlen(lit);
    return n - i >= k && !memcmp(t + i, lit, k);
}

static const char *content_of(const cJSON *msg) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    return cJSON_IsString(c) ? c->valuestring : "";
}

/* An assistant message's tool_calls as <tool_call> blocks after its content. */
static bool calls_into_content(cJSON *msg) {
    cJSON *calls = cJSON_DetachItemFromObjectCaseSensitive(msg, "tool_calls");
    if (!calls) return true;
    bool ok = true;
    const cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        cJSON *call = cJSON_CreateObject();
        ok = ok && call && cJSON_AddItemReferenceToObject(call, "name", cJSON_GetObjectItemCaseSensitive(fn, "name")) &&
             cJSON_AddItemReferenceToObject(call, "arguments", cJSON_GetObjectItemCaseSensitive(fn, "arguments"));
        char *json = ok ? cJSON_PrintUnformatted(call) : NULL;
        cJSON_Delete(call);
        size_t n = json ? strlen(json) + 32 : 0;
        char *block = json ? malloc(n) : NULL;
        if (block) snprintf(block, n, "<tool_call>\n%s\n</tool_call>", json);
        ok = ok && block && set_joined(msg, "content", content_of(msg), "\n", block);
        free(block);
        cJSON_free(json);
    }
    cJSON_Delete(calls);
    return ok;
}

/* A tool result as a user turn: <tool_response> blocks, consecutive results in one turn (then
 * msg is deleted and *merged set). */
static bool result_into_user_turn(cJSON *arr, cJSON *msg, cJSON *prev, bool *merged) {
    size_t n = strlen(content_of(msg)) + 40;
    char *block = malloc(n);
    if (!block) return false;
    snprintf(block, n, "<tool_response>\n%s\n</tool_response>", content_of(msg));
    bool ok;
    *merged = prev && !strcmp(cJSON_GetObjectItemCaseSensitive(prev, "role")->valuestring, "user") &&
              starts_with(content_of(prev), strlen(content_of(prev)), 0, "<tool_response>");
    if (*merged) {
        ok = set_joined(prev, "content", content_of(prev), "\n", block);
        cJSON_Delete(cJSON_DetachItemViaPointer(arr, msg));
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(msg, "tool_call_id");
        cJSON_DeleteItemFromObjectCaseSensitive(msg, "name");
        ok = cJSON_ReplaceItemInObjectCaseSensitive(msg, "role", cJSON_CreateString("user")) &&
             set_joined(msg, "content", "", "", block);
    }
    free(block);
    return ok;
}

/* The description joins the first system message, or becomes one. */
static bool add_description(cJSON *arr, const cJSON *tools) {
    char *text = tools_text(tools);
    if (!text) return false;
    cJSON *first = arr->child;
    bool ok;
    if (first && !strcmp(cJSON_GetObjectItemCaseSensitive(first, "role")->valuestring, "system")) {
        ok = set_joined(first, "content", content_of(first), "\n\n", text);
    } else {
        cJSON *sys = cJSON_CreateObject();
        ok = sys && cJSON_AddStringToObject(sys, "role", "system") && cJSON_AddStringToObject(sys, "content", text) &&
             cJSON_InsertItemInArray(arr, 0, sys);
        if (!ok) cJSON_Delete(sys);
    }
    free(text);
    return ok;
}

char *srv_tools_describe(const char *messages_json, const char *tools_json) {
    cJSON *arr = cJSON_Parse(messages_json), *tools = tools_json ? cJSON_Parse(tools_json) : NULL;
    bool ok = cJSON_IsArray(arr) && (!tools_json || cJSON_IsArray(tools));
    cJSON *prev = NULL;
    for (cJSON *m = ok ? arr->child : NULL, *next; ok && m; m = next) {
        next = m->next;
        const char *role = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
        if (!strcmp(role, "tool")) {
            bool merged = false;
            ok = result_into_user_turn(arr, m, prev, &merged);
            if (merged) continue; /* m is gone into prev */
        } else if (!strcmp(role, "assistant")) {
            ok = calls_into_content(m);
        }
        prev = m;
    }
    if (ok && tools) ok = add_description(arr, tools);
    char *out = ok ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    cJSON_Delete(tools);
    return out;
}

/* ---- Calls fed back as text ------------------------------------------------------------------ */

char *srv_calls_args_as_text(const char *messages_json) {
    cJSON *arr = cJSON_Parse(messages_json), *m;
    bool ok = cJSON_IsArray(arr);
    cJSON_ArrayForEach(m, arr) {
        cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) {
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            if (!args || cJSON_IsString(args)) continue;
            char *text = cJSON_PrintUnformatted(args);
            cJSON *s = text ? cJSON_CreateString(text) : NULL;
            cJSON_free(text);
            ok = ok && s && cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", s);
            if (!ok) cJSON_Delete(s);
        }
    }
    char *out = ok ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    return out;
}

/* ---- Calls -------------------------------------------------------------------------------- */

/* Random letters and digits into id[0..n). */
static void random_alnum(char *id, int n) {
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t r = srv_random_u64();
    for (int i = 0; i < n; i++) {
        if (i % 10 == 0 && i) r = srv_random_u64(); /* 10 draws of 62 use 60 of 64 bits */
        id[i] = alnum[r % 62];
        r /= 62;
    }
}

/* OpenAI's shape, "call_" and 24 letters and digits; or Mistral's, 9 letters and digits (its
 * templates refuse any other when the call comes back). */
static void new_call_id(char id[30], bool short_id) {
    if (short_id) {
        random_alnum(id, 9);
        id[9] = 0;
        return;
    }
    memcpy(id, "call_", 5);
    random_alnum(id + 5, 24);
    id[29] = 0;
}

int srv_tool_calls_add(srv_tool_calls *out, const char *name, const char *arguments, bool short_id) {
    srv_tool_call *grown = realloc(out->calls, (size_t)(out->n + 1) * sizeof *grown);
    if (!grown) return -1;
    out->calls = grown;
    srv_tool_call *c = &out->calls[out->n];
    c->name = strdup(name);
    c->arguments = strdup(arguments);
    if (!c->name || !c->arguments) {
        free(c->name);
        free(c->arguments);
        return -1;
    }
    new_call_id(c->id, short_id);
    out->n++;
    return 0;
}

/* The call in obj ({name_key: NAME, args_key: ARGUMENTS}, or {NAME: ARGUMENTS} without a name
 * key), appended. 0: appended; 1: obj is not a call; -1: out of memory. Llama 3's calls may say
 * "arguments" too. */
static int add_call(const srv_call_syntax *sx, const cJSON *obj, srv_tool_calls *out) {
    if (!cJSON_IsObject(obj)) return 1;
    const cJSON *name, *args;
    if (sx->name_key) {
        name = cJSON_GetObjectItemCaseSensitive(obj, sx->name_key);
        args = cJSON_GetObjectItemCaseSensitive(obj, sx->args_key);
        if (!args && sx->kind == SRV_CALLS_JSON_BARE) args = cJSON_GetObjectItemCaseSensitive(obj, "arguments");
        if (!cJSON_IsString(name)) return 1;
    } else { /* one member */
        if (!obj->child || obj->child->next) return 1;
        name = NULL;
        args = obj->child;
    }
    const char *fn = name ? name->valuestring : obj->child->string;
    if (!*fn || (args && !cJSON_IsObject(args) && !cJSON_IsString(args))) return 1;
    if (cJSON_IsString(args)) { /* arguments given as JSON text: an object's, or it is no call */
        cJSON *inner = cJSON_Parse(args->valuestring);
        bool object = cJSON_IsObject(inner);
        cJSON_Delete(inner);
        if (!object) return 1;
    }
    char *printed = args && cJSON_IsObject(args) ? cJSON_PrintUnformatted(args) : NULL;
    if (args && cJSON_IsObject(args) && !printed) return -1;
    int rc = srv_tool_calls_add(out, fn, printed ? printed : args ? args->valuestring : "{}", sx->short_ids);
    cJSON_free(printed);
    return rc;
}

/* The JSON value at text[*i], parsed; *i moves past it. NULL when there is none, or when it
 * holds an escaped NUL (cJSON's strings would end there). */
static cJSON *json_at(const char *t, size_t n, size_t *i) {
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(t + *i, n - *i, &end, false);
    if (v && nc_json_escaped_nul(t + *i, (size_t)(end - (t + *i))) >= 0) {
        cJSON_Delete(v);
        return NULL;
    }
    if (v) *i = (size_t)(end - t);
    return v;
}

/* A closing marker after a call: there, or the reply ended (a block the end of generation cut
 * short of its marker still holds its call). */
static bool closed(const char *t, size_t n, size_t *i, const char *close) {
    size_t end;
    mk_result r = close ? mk_match(t, n, *i, close, &end) : MK_YES;
    if (r == MK_YES) *i = close ? end : *i;
    else if (mk_skip_blanks(t, n, *i) == n) *i = n;
    else return false;
    return true;
}

/* <tool_call> {"name", "arguments"} </tool_call>, block after block. */
static int parse_tagged(const srv_call_syntax *sx, const char *t, size_t n, size_t *at, int32_t max, srv_tool_calls *out) {
    for (size_t i = *at, end;; i = *at) {
        if (mk_match(t, n, i, sx->call_open, &end) != MK_YES) return 0;
        cJSON *v = json_at(t, n, &end);
        int rc = v && closed(t, n, &end, sx->call_close) ? add_call(sx, v, out) : 1;
        cJSON_Delete(v);
        if (rc) return rc < 0 ? -1 : 0;
        *at = end;
        if (sx->one_call || out->n >= max) return 0;
    }
}

/* [{...}, {...}] after its marker: the calls one by one, so that those before a cut one stay. */
int srv_calls_list(const char *t, size_t n, size_t i, size_t *at, int32_t max, srv_tool_calls *out,
                   int (*item)(const char *t, size_t n, size_t *i, const void *user, srv_tool_calls *out),
                   const void *user) {
    for (int got = 0;; got++) {
        int rc = item(t, n, &i, user, out);
        if (rc < 0) return -1;
        if (rc) { /* the calls before it stay, the list's rest is content */
            if (got) *at = i;
            return 0;
        }
        *at = i = mk_skip_blanks(t, n, i);
        if (out->n >= max) return 0; /* what follows is content */
        if (i < n && t[i] == ',') {
            i = mk_skip_blanks(t, n, i + 1);
            continue;
        }
        if (i < n && t[i] == ']') i++;
        else if (i < n) return 0;
        *at = i;
        return 1;
    }
}

/* One item of a JSON list of calls: an object naming the call (add_call's rc). */
static int json_item(const char *t, size_t n, size_t *i, const void *sx, srv_tool_calls *out) {
    cJSON *v = *i < n && t[*i] == '{' ? json_at(t, n, i) : NULL;
    int rc = v ? add_call(sx, v, out) : 1;
    cJSON_Delete(v);
    return rc;
}

static int parse_list(const srv_call_syntax *sx, const char *t, size_t n, size_t *at, int32_t max, srv_tool_calls *out) {
    for (bool first = true;; first = false) {
        size_t i = mk_skip_blanks(t, n, *at), end;
        if (mk_match(t, n, i, sx->section_open, &end) == MK_YES) i = mk_skip_blanks(t, n, end);
        else if (!first || i >= n || t[i] != '[') return 0; /* a bare list may only begin the calls */
        if (i >= n || t[i] != '[') return 0;
        int rc = srv_calls_list(t, n, mk_skip_blanks(t, n, i + 1), at, max, out, json_item, sx);
        if (rc <= 0) return rc;
        if (sx->section_close && !closed(t, n, at, sx->section_close)) return 0;
    }
}

static const char PYTHON_TAG[] = "<|python_tag|>";

/* Llama 3: the reply is {"name", "parameters"} (after <|python_tag|>), calls separated by ';'. */
static int parse_bare(const srv_call_syntax *sx, const char *t, size_t n, size_t *at, int32_t max, srv_tool_calls *out) {
    size_t i = mk_skip_blanks(t, n, *at);
    if (starts_with(t, n, i, PYTHON_TAG)) i = mk_skip_blanks(t, n, i + strlen(PYTHON_TAG));
    while (i < n && t[i] == '{') {
        cJSON *v = json_at(t, n, &i);
        int rc = v ? add_call(sx, v, out) : 1;
        cJSON_Delete(v);
        if (rc) return rc < 0 ? -1 : 0;
        *at = i = mk_skip_blanks(t, n, i);
        if (out->n >= max) return 0;
        if (i < n && t[i] == ';') i = mk_skip_blanks(t, n, i + 1);
    }
    return 0;
}

void srv_tool_calls_free(srv_tool_calls *c) {
    for (int32_t i = 0; i < c->n; i++) {
        free(c->calls[i].name);
        free(c->calls[i].arguments);
    }
    free(c->calls);
    memset(c, 0, sizeof *c);
}

/* Where the calls' first marker is in t[0..n): n when nowhere; *partial when the text's end may be
 * its beginning. */
static size_t first_marker(const srv_call_syntax *sx, const char *t, size_t n, bool *partial) {
    *partial = false;
    size_t i = mk_skip_blanks(t, n, 0), at = n;
    if (sx->kind == SRV_CALLS_JSON_BARE) /* the whole reply, or nothing */
        return i < n && (t[i] == '{' || starts_with(t, n, i, PYTHON_TAG)) ? i : n;
    if (sx->kind == SRV_CALLS_JSON_LIST && i < n && t[i] == '[') return i;
    const char *m = sx->section_open ? sx->section_open : sx->call_open;
    if (!m) return n;
    mk_result r = mk_find(t, n, 0, m, &at);
    *partial = r == MK_PARTIAL;
    return r == MK_NO ? n : at;
}

bool srv_tool_declared(const char *tools_json, const char *name) {
    if (!tools_json) return true;
    cJSON *tools = cJSON_Parse(tools_json);
    bool found = false;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn ? fn : t, "name");
        found = found || (cJSON_IsString(nm) && !strcmp(nm->valuestring, name));
    }
    cJSON_Delete(tools);
    return found;
}

int srv_tool_calls_parse(const srv_call_syntax *sx, const char *text, size_t n, const char *tools_json, bool parallel,
                         srv_tool_calls *out) {
    *out = (srv_tool_calls){0};
    int32_t max = parallel ? INT32_MAX : 1; /* without parallel, what follows the first call is content */
    bool partial;
    size_t start = first_marker(sx, text, n, &partial), at = start;
    int rc = 0;
    if (start < n && !partial) {
        switch (sx->kind) {
        case SRV_CALLS_JSON_TAGGED: rc = parse_tagged(sx, text, n, &at, max, out); break;
        case SRV_CALLS_JSON_LIST: rc = parse_list(sx, text, n, &at, max, out); break;
        case SRV_CALLS_JSON_BARE: rc = parse_bare(sx, text, n, &at, max, out); break;
        case SRV_CALLS_NAMED: rc = srv_calls_named(sx, text, n, &at, tools_json, max, out); break;
        case SRV_CALLS_PYTHONIC: rc = srv_calls_python(sx, text, n, &at, max, out); break;
        case SRV_CALLS_HARMONY: break; /* its messages are parsed with its channels (harmony.c) */
        }
    }
    for (int32_t k = 0; rc == 0 && k < out->n; k++)
        if (!srv_tool_declared(tools_json, out->calls[k].name)) srv_tool_calls_free(out); /* not calls: content */
    if (rc < 0) {
        srv_tool_calls_free(out);
        return -1;
    }
    out->content_end = out->tail = n;
    if (out->n) {
        out->content_end = start;
        out->tail = mk_skip_blanks(text, n, at);
    }
    return 0;
}

/* ---- Streaming ----------------------------------------------------------------------------- */

size_t srv_tool_content_ready(const srv_call_syntax *sx, const char *t, size_t n) {
    if (n == 0 || sx->kind == SRV_CALLS_HARMONY) return n; /* t may be NULL: nothing was generated yet */
    bool partial;
    size_t ready = first_marker(sx, t, n, &partial), start = mk_skip_blanks(t, n, 0);
    if (sx->kind == SRV_CALLS_JSON_BARE) { /* the reply may be a call: hold it */
        size_t k = n - start < strlen(PYTHON_TAG) ? n - start : strlen(PYTHON_TAG);
        return start == n || t[start] == '{' || !memcmp(t + start, PYTHON_TAG, k) ? 0 : n;
    }
    if (sx->kind == SRV_CALLS_JSON_LIST && start < n && t[start] == '[') return 0;
    /* blanks before a call are not content (srv_tool_calls_parse's callers trim them): hold them
       until something else follows */
    while (ready > 0 && mk_blank(t[ready - 1])) ready--;
    return ready;
}
