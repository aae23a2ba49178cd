/* Calls written as Python (SRV_CALLS_PYTHONIC, LFM2 / LFM2.5): section_open [NAME(KEY=VALUE, ...),
 * ...] section_close, the values Python literals (strings in either quote, numbers, True / False /
 * None, lists, tuples, dicts; JSON's true / false / null are taken too). Also the other way: an
 * assistant message's calls written so, into its content, for templates that render no calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/marker.h"
#include "server/tool_calls.h"

#define PY_MAX_DEPTH 64

static bool ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static bool word_at(const char *t, size_t n, size_t i, const char *w) {
    size_t k = strlen(w);
    return n - i >= k && !memcmp(t + i, w, k) && (i + k == n || !ident_char(t[i + k]));
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* n hex digits at t[i..): their value, or -1. */
static long hex_at(const char *t, size_t len, size_t i, int n) {
    long v = 0;
    for (int k = 0; k < n; k++) {
        int d = i + (size_t)k < len ? hex_digit(t[i + (size_t)k]) : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t utf8_put(char *o, unsigned long cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string in ' or " at t[*i]: its value (NULL when it does not end, or holds a NUL, which
 * cJSON's strings would end at). */
static cJSON *py_string(const char *t, size_t n, size_t *i) {
    char q = t[*i];
    char *s = malloc(n - *i + 1), *o = s;
    if (!s) return NULL;
    size_t j = *i + 1;
    for (; j < n && t[j] != q; j++) {
        if (t[j] != '\\') {
            if (!t[j]) break;
            *o++ = t[j];
            continue;
        }
        if (++j == n) break;
        long cp = -2;
        switch (t[j]) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case '\\': case '\'': case '"': case '/': *o++ = t[j]; break;
        case 'x': cp = hex_at(t, n, j + 1, 2), j += 2; break;
        case 'u': cp = hex_at(t, n, j + 1, 4), j += 4; break;
        case 'U': cp = hex_at(t, n, j + 1, 8), j += 8; break;
        default: *o++ = '\\', *o++ = t[j]; /* Python keeps an unknown escape as it is */
        }
        if (cp == -2) continue;
        if (cp >= 0xD800 && cp < 0xDC00 && j + 6 < n && t[j + 1] == '\\' && t[j + 2] == 'u') { /* a pair */
            long lo = hex_at(t, n, j + 3, 4);
            if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00), j += 6;
        }
        if (cp <= 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) { /* bad, a NUL or a lone half */
            j = n; /* (not a quote the escape's digits may have reached) */
            break;
        }
        o += utf8_put(o, (unsigned long)cp);
    }
    cJSON *v = NULL;
    if (j < n && t[j] == q) {
        *o = 0;
        v = cJSON_CreateString(s);
        *i = j + 1;
    }
    free(s);
    return v;
}

static cJSON *py_number(const char *t, size_t n, size_t *i) {
    size_t j = *i, digits = 0;
    char buf[64];
    if (j < n && (t[j] == '-' || t[j] == '+')) j++;
    for (; j < n && ((t[j] >= '0' && t[j] <= '9') || t[j] == '.' || t[j] == 'e' || t[j] == 'E' ||
                     ((t[j] == '-' || t[j] == '+') && (t[j - 1] == 'e' || t[j - 1] == 'E')));
         j++)
        digits += t[j] >= '0' && t[j] <= '9';
    if (!digits || j - *i >= sizeof buf) return NULL;
    memcpy(buf, t + *i, j - *i);
    buf[j - *i] = 0;
    char *end;
    double d = strtod(buf, &end);
    if (*end) return NULL;
    *i = j;
    return cJSON_CreateNumber(d);
}

static cJSON *py_value(const char *t, size_t n, size_t *i, int depth);

/* [v, ...], (v, ...) or {k: v, ...} at t[*i] (a trailing comma allowed). */
static cJSON *py_container(const char *t, size_t n, size_t *i, int depth) {
    char open = t[*i], close = open == '[' ? ']' : open == '(' ? ')' : '}';
    cJSON *c = open == '{' ? cJSON_CreateObject() : cJSON_CreateArray();
    size_t j = mk_skip_blanks(t, n, *i + 1);
    while (c && j < n && t[j] != close) {
        cJSON *key = NULL, *v;
        if (open == '{') {
            key = j < n && (t[j] == '"' || t[j] == '\'') ? py_string(t, n, &j) : NULL;
            j = mk_skip_blanks(t, n, j);
            if (!key || j >= n || t[j] != ':') {
                cJSON_Delete(key);
                break;
            }
            j = mk_skip_blanks(t, n, j + 1);
        }
        v = py_value(t, n, &j, depth + 1);
        if (!v) {
            cJSON_Delete(key);
            break;
        }
        if (key) {
            cJSON_DeleteItemFromObjectCaseSensitive(c, key->valuestring);
            cJSON_AddItemToObject(c, key->valuestring, v);
        } else {
            cJSON_AddItemToArray(c, v);
        }
        cJSON_Delete(key);
        j = mk_skip_blanks(t, n, j);
        if (j < n && t[j] == ',') j = mk_skip_blanks(t, n, j + 1);
        else if (j < n && t[j] != close) break;
    }
    if (!c || j >= n || t[j] != close) {
        cJSON_Delete(c);
        return NULL;
    }
    *i = j + 1;
    return c;
}

static cJSON *py_value(const char *t, size_t n, size_t *i, int depth) {
    if (*i >= n || depth > PY_MAX_DEPTH) return NULL;
    char c = t[*i];
    static const struct {
        const char *word;
        int type;
    } words[] = {{"True", cJSON_True}, {"False", cJSON_False}, {"None", cJSON_NULL},
                 {"true", cJSON_True}, {"false", cJSON_False}, {"null", cJSON_NULL}};
    for (size_t k = 0; k < sizeof words / sizeof *words; k++)
        if (word_at(t, n, *i, words[k].word)) {
            *i += strlen(words[k].word);
            return words[k].type == cJSON_True ? cJSON_CreateTrue() : words[k].type == cJSON_False ? cJSON_CreateFalse()
                                                                                                 : cJSON_CreateNull();
        }
    if (c == '"' || c == '\'') return py_string(t, n, i);
    if (c == '[' || c == '(' || c == '{') return py_container(t, n, i, depth);
    return py_number(t, n, i);
}

/* NAME(KEY=VALUE, ...) at t[*i]: 0 appended (*i past it), 1 none (cut or malformed), -1 out of
 * memory. */
static int py_call(const srv_call_syntax *sx, const char *t, size_t n, size_t *i, srv_tool_calls *out) {
    size_t j = *i, s = j;
    while (j < n && (ident_char(t[j]) || t[j] == '.')) j++;
    if (j == s) return 1;
    size_t name_end = j;
    j = mk_skip_blanks(t, n, j);
    if (j >= n || t[j] != '(') return 1;
    cJSON *args = cJSON_CreateObject();
    if (!args) return -1;
    j = mk_skip_blanks(t, n, j + 1);
    bool ok = true;
    while (ok && j < n && t[j] != ')') {
        size_t k = j;
        while (j < n && ident_char(t[j])) j++;
        size_t k_end = j;
        j = mk_skip_blanks(t, n, j);
        ok = k_end > k && j < n && t[j] == '=';
        if (!ok) break;
        j = mk_skip_blanks(t, n, j + 1);
        cJSON *v = py_value(t, n, &j, 0);
        char *key = v ? strndup(t + k, k_end - k) : NULL;
        ok = key != NULL;
        if (ok) {
            cJSON_DeleteItemFromObjectCaseSensitive(args, key);
            cJSON_AddItemToObject(args, key, v);
        } else {
            cJSON_Delete(v);
        }
        free(key);
        j = mk_skip_blanks(t, n, j);
        if (ok && j < n && t[j] == ',') j = mk_skip_blanks(t, n, j + 1);
        else ok = ok && j < n && t[j] == ')';
    }
    int rc = 1;
    if (ok && j < n && t[j] == ')') {
        char *printed = cJSON_PrintUnformatted(args), *name = strndup(t + s, name_end - s);
        rc = printed && name ? srv_tool_calls_add(out, name, printed, sx->short_ids) : -1;
        cJSON_free(printed);
        free(name);
        if (!rc) *i = j + 1;
    }
    cJSON_Delete(args);
    return rc;
}

static int py_item(const char *t, size_t n, size_t *i, const void *sx, srv_tool_calls *out) {
    return py_call(sx, t, n, i, out);
}

int srv_calls_python(const srv_call_syntax *sx, const char *t, size_t n, size_t *at, int32_t max, srv_tool_calls *out) {
    size_t i = *at;
    if (sx->section_open && mk_match(t, n, i, sx->section_open, &i) != MK_YES) return 0;
    i = mk_skip_blanks(t, n, i);
    if (i >= n || t[i] != '[') return 0;
    int rc = srv_calls_list(t, n, mk_skip_blanks(t, n, i + 1), at, max, out, py_item, sx);
    if (rc <= 0) return rc;
    size_t end;
    if (sx->section_close && mk_match(t, n, *at, sx->section_close, &end) == MK_YES) *at = end;
    return 0;
}

/* ---- Calls fed back ------------------------------------------------------------------------ */

static void py_write(FILE *f, const cJSON *v) {
    if (cJSON_IsTrue(v)) fputs("True", f);
    else if (cJSON_IsFalse(v)) fputs("False", f);
    else if (cJSON_IsNull(v) || !v) fputs("None", f);
    else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        fputc(cJSON_IsArray(v) ? '[' : '{', f);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) fputs(", ", f);
            if (cJSON_IsObject(v)) {
                cJSON *k = cJSON_CreateString(c->string);
                char *ks = k ? cJSON_PrintUnformatted(k) : NULL;
                if (ks) fprintf(f, "%s: ", ks);
                cJSON_free(ks);
                cJSON_Delete(k);
            }
            py_write(f, c);
        }
        fputc(cJSON_IsArray(v) ? ']' : '}', f);
    } else { /* strings and numbers as JSON writes them, which Python reads alike */
        char *s = cJSON_PrintUnformatted(v);
        if (s) fputs(s, f);
        cJSON_free(s);
    }
}

/* One call, {"function": {"name", "arguments"}}, as NAME(KEY=VALUE, ...). */
static void py_write_call(FILE *f, const cJSON *call) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    cJSON *parsed = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
    if (parsed) args = parsed;
    fprintf(f, "%s(", cJSON_IsString(name) ? name->valuestring : "");
    if (cJSON_IsObject(args))
        for (const cJSON *a = args->child; a; a = a->next) {
            fprintf(f, "%s%s=", a == args->child ? "" : ", ", a->string);
            py_write(f, a);
        }
    fputc(')', f);
    cJSON_Delete(parsed);
}

char *srv_calls_python_into_content(const srv_call_syntax *sx, const char *messages_json) {
    cJSON *arr = cJSON_Parse(messages_json);
    bool ok = cJSON_IsArray(arr);
    cJSON *m;
    cJSON_ArrayForEach(m, arr) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (content && !cJSON_IsString(content) && !cJSON_IsNull(content)) continue; /* parts: left as they are */
        cJSON *calls = ok ? cJSON_DetachItemFromObjectCaseSensitive(m, "tool_calls") : NULL;
        if (!cJSON_IsArray(calls) || !calls->child) {
            cJSON_Delete(calls);
            continue;
        }
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f) {
            ok = false;
            cJSON_Delete(calls);
            break;
        }
        if (cJSON_IsString(content)) fputs(content->valuestring, f);
        fprintf(f, "%s[", sx->section_open ? sx->section_open : "");
        for (const cJSON *c = calls->child; c; c = c->next) {
            if (c != calls->child) fputs(", ", f);
            py_write_call(f, c);
        }
        fprintf(f, "]%s", sx->section_close ? sx->section_close : "");
        fclose(f);
        cJSON *s = text ? cJSON_CreateString(text) : NULL;
        free(text);
        cJSON_DeleteItemFromObjectCaseSensitive(m, "content");
        ok = s && cJSON_AddItemToObject(m, "content", s);
        if (!ok) cJSON_Delete(s);
        cJSON_Delete(calls);
    }
    char *out = ok ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    return out;
}
