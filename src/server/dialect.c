/* What the dialects share: reading their requests' members, named server-sent events and text
 * joined as it is written. */
#include "server/dialect.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int srv_refuse(srv_error *e, const char *param, const char *fmt, ...) {
    char msg[sizeof e->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_error_set(e, 400, "invalid_request_error", NULL, param, "%s", msg);
    return -1;
}

int srv_oom(srv_error *e) {
    srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return -1;
}

const cJSON *srv_member(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

bool srv_listed(const char *const *list, const char *name) {
    for (; *list; list++)
        if (!strcmp(*list, name)) return true;
    return false;
}

int srv_only(const cJSON *obj, const char *const *allowed, const char *where, srv_error *e) {
    for (const cJSON *f = obj->child; f; f = f->next) {
        for (const cJSON *g = obj->child; g != f; g = g->next)
            if (!strcmp(g->string, f->string))
                return srv_refuse(e, f->string, "'%s%s%s' is given twice", where, *where ? "." : "", f->string);
        if (cJSON_IsNull(f) || srv_listed(allowed, f->string)) continue;
        char param[128];
        snprintf(param, sizeof param, "%s%s%.64s", where, *where ? "." : "", f->string);
        return srv_refuse(e, param, "'%s' is not supported by this server", param);
    }
    return 0;
}

int srv_copy_member(const cJSON *root, const char *from, cJSON *oa, const char *to, srv_error *e) {
    const cJSON *v = srv_member(root, from);
    if (!v) return 0;
    cJSON *c = cJSON_Duplicate(v, true);
    if (!c || !cJSON_AddItemToObject(oa, to, c)) {
        cJSON_Delete(c);
        return srv_oom(e);
    }
    return 0;
}

bool srv_add_str(cJSON *o, const char *k, const char *v) { return cJSON_AddStringToObject(o, k, v) != NULL; }

bool srv_put_text(cJSON *o, const char *k, const char *s, size_t n) {
    char *clean = srv_utf8_clean(s, n);
    bool ok = clean && cJSON_AddStringToObject(o, k, clean);
    free(clean);
    return ok;
}

char *srv_json_print(cJSON *root, bool ok) {
    char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}

char *srv_append_line(char *acc, const char *text) {
    size_t a = acc ? strlen(acc) : 0, b = strlen(text);
    char *out = realloc(acc, a + b + 2);
    if (!out) {
        free(acc);
        return NULL;
    }
    if (a) out[a++] = '\n';
    memcpy(out + a, text, b + 1);
    return out;
}

char *srv_sse_named(const char *name, char *json) {
    if (!json) return NULL;
    size_t n = strlen(name) + strlen(json) + 20;
    char *out = malloc(n);
    if (out) snprintf(out, n, "event: %s\ndata: %s\n\n", name, json);
    free(json);
    return out;
}

char *srv_text_cat(char *a, char *b) {
    if (!a || !b) {
        free(a);
        free(b);
        return NULL;
    }
    size_t na = strlen(a), nb = strlen(b);
    char *out = realloc(a, na + nb + 1);
    if (!out) {
        free(a);
        free(b);
        return NULL;
    }
    memcpy(out + na, b, nb + 1);
    free(b);
    return out;
}
