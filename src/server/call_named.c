/* Calls led by the function's name (SRV_CALLS_NAMED): DeepSeek's, Kimi-K2's, Qwen3-Coder's XML,
 * GLM's keys and values, MiniMax-M2's invokes, Mistral's [TOOL_CALLS]NAME[ARGS]... The arguments
 * are one JSON object, or parameters one by one whose values are bare text: a parameter's value
 * is a JSON string unless the tool's schema gives it another type (then its text is parsed as
 * JSON, with Python's True / False / None, which templates write for booleans and null). */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/marker.h"
#include "server/tool_calls.h"

/* OpenAI's function names: letters, digits, '_' and '-'. */
static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* The schema of parameter key of tool name, or NULL. */
static const cJSON *param_schema(const cJSON *tools, const char *name, const char *key) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(n) || strcmp(n->valuestring, name)) continue;
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(fn, "parameters"), "properties");
        return cJSON_GetObjectItemCaseSensitive(props, key);
    }
    return NULL;
}

/* The schema says the value is a string and nothing else. */
static bool string_only(const cJSON *s) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(type)) return !strcmp(type->valuestring, "string");
    if (cJSON_IsArray(type)) {
        const cJSON *t;
        cJSON_ArrayForEach(t, type) if (!cJSON_IsString(t) || strcmp(t->valuestring, "string")) return false;
        return type->child != NULL;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (cJSON_IsArray(e) && e->child) {
        cJSON_ArrayForEach(e, e) if (!cJSON_IsString(e)) return false;
        return true;
    }
    return !type && (cJSON_GetObjectItemCaseSensitive(s, "format") || cJSON_GetObjectItemCaseSensitive(s, "pattern") ||
                     cJSON_GetObjectItemCaseSensitive(s, "maxLength") || cJSON_GetObjectItemCaseSensitive(s, "minLength"));
}

cJSON *srv_param_value(const char *tools_json, const char *name, const char *key, const char *text, size_t len) {
    char *s = malloc(len + 1); /* the text may hold NULs: all of its bytes, then one */
    if (!s) return NULL;
    memcpy(s, text, len);
    s[len] = 0;
    cJSON *tools = tools_json ? cJSON_Parse(tools_json) : NULL, *v = NULL;
    const cJSON *schema = param_schema(tools, name, key);
    if (!string_only(schema)) {
        const char *end = NULL;
        v = cJSON_ParseWithLengthOpts(s, len, &end, false);
        if (v && (size_t)(end - s) != len) { /* JSON then more text: the whole is a string */
            cJSON_Delete(v);
            v = NULL;
        }
        if (!v && schema) { /* Python's spellings, as templates render booleans and None */
            if (!strcmp(s, "True")) v = cJSON_CreateTrue();
            else if (!strcmp(s, "False")) v = cJSON_CreateFalse();
            else if (!strcmp(s, "None")) v = cJSON_CreateNull();
        }
    }
    if (!v) v = cJSON_CreateString(s);
    cJSON_Delete(tools);
    free(s);
    return v;
}

/* The key of a parameter: the text up to the first byte of the marker after it. */
static bool param_key(const char *t, size_t n, size_t *i, char stop, char **key) {
    size_t s = *i;
    while (*i < n && t[*i] != stop && t[*i] != '\n' && t[*i] != '<') ++*i;
    if (*i == n || *i == s) return false;
    return (*key = strndup(t + s, *i - s)) != NULL;
}

static bool ends_with_newline(const char *m) { return *m && m[strlen(m) - 1] == '\n'; }

/* Parameters one by one into args: 1 when done (no more), 0 when one was cut or malformed (the
 * call is incomplete), -1 out of memory. */
static int named_params(const srv_call_syntax *sx, const char *t, size_t n, size_t *i, const char *tools_json,
                        const char *name, cJSON *args) {
    for (;;) {
        size_t end, close_at;
        if (mk_match(t, n, *i, sx->param_open, &end) != MK_YES) return 1;
        char *key = NULL;
        size_t j = end;
        if (!param_key(t, n, &j, *mk_lead(sx->param_name_end), &key)) return 0;
        if (mk_match(t, n, j, sx->param_name_end, &end) != MK_YES ||
            mk_find(t, n, end, sx->param_close, &close_at) != MK_YES) {
            free(key);
            return 0;
        }
        /* the newlines the template writes around a value are the markers' */
        size_t v = end, w = close_at;
        if (ends_with_newline(sx->param_name_end) && v < w && t[v] == '\n') v++;
        if (mk_blank(*sx->param_close) && w > v && t[w - 1] == '\n') w--;
        if (mk_blank(*sx->param_close) && w > v && t[w - 1] == '\r') w--;
        cJSON *value = srv_param_value(tools_json, name, key, t + v, w - v);
        bool ok = value && (cJSON_DeleteItemFromObjectCaseSensitive(args, key), cJSON_AddItemToObject(args, key, value));
        free(key);
        if (!ok) {
            cJSON_Delete(value);
            return -1;
        }
        mk_match(t, n, close_at, sx->param_close, i);
    }
}

/* One call at t[*i]: 0 appended (*i past it), 1 none (or cut, or malformed), -1 out of memory. */
static int named_call(const srv_call_syntax *sx, const char *t, size_t n, size_t *i, const char *tools_json,
                      srv_tool_calls *out) {
    size_t j, end;
    if (mk_match(t, n, *i, sx->call_open, &j) != MK_YES) return 1;
    size_t s = j;
    while (j < n && name_char(t[j])) j++;
    if (j == s || j == n || mk_match(t, n, j, sx->name_end, &end) != MK_YES) return 1;
    char *name = strndup(t + s, j - s);
    cJSON *args = NULL;
    int rc = name ? 0 : -1;
    j = end;
    if (!rc && sx->param_open) {
        args = cJSON_CreateObject();
        rc = !args ? -1 : named_params(sx, t, n, &j, tools_json, name, args) == 1 ? 0 : 1;
    } else if (!rc) {
        j = mk_skip_blanks(t, n, j);
        const char *stop = NULL;
        args = j < n && t[j] == '{' ? cJSON_ParseWithLengthOpts(t + j, n - j, &stop, false) : NULL;
        if (args && cJSON_IsObject(args)) j = (size_t)(stop - t);
        else rc = 1;
    }
    /* a call's end: its marker, or the reply's (a call cut there is not complete unless its
       arguments were: JSON objects end by themselves, parameters by the call's marker) */
    if (!rc && sx->call_close) {
        mk_result r = mk_match(t, n, j, sx->call_close, &end);
        if (r == MK_YES) j = end;
        else if (sx->param_open || mk_skip_blanks(t, n, j) < n) rc = 1;
        else j = n;
    }
    char *printed = !rc ? cJSON_PrintUnformatted(args) : NULL;
    if (!rc && !printed) rc = -1;
    if (!rc) rc = srv_tool_calls_add(out, name, printed, sx->short_ids);
    if (!rc) *i = j;
    cJSON_free(printed);
    cJSON_Delete(args);
    free(name);
    return rc;
}

static void closed_or_end(const char *t, size_t n, size_t *at, const char *close) {
    size_t end;
    if (mk_match(t, n, *at, close, &end) == MK_YES) *at = end;
}

int srv_calls_named(const srv_call_syntax *sx, const char *t, size_t n, size_t *at, const char *tools_json, int32_t max,
                    srv_tool_calls *out) {
    size_t i = *at;
    if (sx->section_open && mk_match(t, n, i, sx->section_open, &i) != MK_YES) return 0;
    int rc, got = 0;
    while ((rc = named_call(sx, t, n, &i, tools_json, out)) == 0) {
        *at = i;
        got++;
        if (sx->one_call || out->n >= max) break;
    }
    if (rc < 0) return -1;
    if (got && sx->section_close) closed_or_end(t, n, at, sx->section_close);
    return 0;
}

/* ---- A reply that opens with its recipient (Functionary v3.2) ------------------------------ */

mk_result srv_text_recipient(const srv_call_syntax *sx, const char *t, size_t n, size_t i, bool done, size_t *end) {
    const char *w = sx->text_recipient;
    size_t k = strlen(w), m = n - i < k ? n - i : k;
    if (memcmp(t + i, w, m)) return MK_NO;
    if (m < k || i + k == n) return done ? MK_NO : MK_PARTIAL; /* "al", or "all" and nothing after it yet */
    if (name_char(t[i + k])) return MK_NO;           /* a call's name: "alloc" */
    *end = mk_skip_blanks(t, n, i + k);
    return MK_YES;
}

bool srv_call_head_possible(const srv_call_syntax *sx, const char *t, size_t n, size_t i) {
    size_t j = i, end;
    while (j < n && name_char(t[j])) j++;
    if (j == n) return true; /* a name still being written (or nothing yet) */
    if (j == i) return false;
    mk_result r = mk_match(t, n, j, sx->name_end, &end);
    if (r == MK_PARTIAL) return true;
    if (r == MK_NO) return false;
    end = mk_skip_blanks(t, n, end);
    return end == n || t[end] == '{';
}
