/* Render chat templates with nucleus's template engine, for comparisons with other engines.
 *
 *   render_template TEMPLATE_FILE [CONTEXT_JSON_FILE]
 *       prints the rendering of the template with the variables of the JSON object (if given);
 *       on an error prints it to stderr and exits with 1.
 *   render_template --chatml
 *       prints the ChatML template used for models without one.
 *   render_template --jsonl
 *       reads one JSON object per line from stdin and writes one per line to stdout:
 *       {"template": T, "context": {...}}                 → tmpl_render
 *       {"template": T, "messages": [...], "add_generation_prompt": B, "bos_token": S,
 *        "eos_token": S, "extra": {...}}                   → tmpl_render_chat
 *       answering {"ok": true, "output": "..."} or {"ok": false, "error": "..."}.
 *
 * Build: cc -std=c11 -D_GNU_SOURCE -Iinclude -Isrc tests/tools/render_template.c src/common.c \
 *        src/template/[a-z]*.c -lcjson -lm -o build/render_template */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "template/template.h"

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = read_all(f, len);
    fclose(f);
    return s;
}

static int render_files(const char *tpath, const char *cpath) {
    size_t tlen, clen;
    char *src = read_file(tpath, &tlen), *ctx_json = cpath ? read_file(cpath, &clen) : NULL;
    if (!src || (cpath && !ctx_json)) {
        fprintf(stderr, "render_template: cannot read %s\n", !src ? tpath : cpath);
        return 2;
    }
    nc_err err = {{0}};
    tmpl *t = NULL;
    tmpl_value *ctx = ctx_json ? tmpl_value_from_json(ctx_json, clen, &err) : tmpl_value_new_dict();
    char *out = NULL;
    size_t out_len = 0;
    int rc = ctx && !tmpl_parse(&t, src, tlen, &err) && !tmpl_render(t, ctx, &out, &out_len, &err) ? 0 : 1;
    if (rc) fprintf(stderr, "%s\n", err.msg);
    else fwrite(out, 1, out_len, stdout);
    free(out);
    tmpl_free(t);
    tmpl_value_free(ctx);
    free(src);
    free(ctx_json);
    return rc;
}

static char *print_member(const cJSON *obj, const char *name) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, name);
    return m && !cJSON_IsNull(m) ? cJSON_PrintUnformatted(m) : NULL;
}

static const char *string_member(const cJSON *obj, const char *name) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(m) ? m->valuestring : NULL;
}

/* One request line → one answer object. */
static cJSON *answer(const char *line) {
    cJSON *req = cJSON_Parse(line), *ans = cJSON_CreateObject();
    nc_err err = {{0}};
    char *out = NULL, *messages = NULL, *extra = NULL;
    size_t out_len = 0;
    tmpl *t = NULL;
    int rc = -1;
    const char *src = req ? string_member(req, "template") : NULL;
    if (!src) {
        snprintf(err.msg, sizeof err.msg, "bad request line");
    } else if (!tmpl_parse(&t, src, strlen(src), &err)) {
        if (cJSON_GetObjectItemCaseSensitive(req, "messages")) {
            messages = print_member(req, "messages");
            extra = print_member(req, "extra");
            bool gen = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "add_generation_prompt"));
            rc = tmpl_render_chat(t, messages, gen, string_member(req, "bos_token"), string_member(req, "eos_token"),
                                  extra, &out, &out_len, &err);
        } else {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(req, "context");
            tmpl_value *ctx = c ? tmpl_value_from_cjson(c, &err) : tmpl_value_new_dict();
            if (ctx) rc = tmpl_render(t, ctx, &out, &out_len, &err);
            tmpl_value_free(ctx);
        }
    }
    cJSON_AddBoolToObject(ans, "ok", rc == 0);
    if (rc == 0) cJSON_AddStringToObject(ans, "output", out);
    else cJSON_AddStringToObject(ans, "error", err.msg);
    free(out);
    free(messages);
    free(extra);
    tmpl_free(t);
    cJSON_Delete(req);
    return ans;
}

static int render_jsonl(void) {
    size_t len;
    char *all = read_all(stdin, &len);
    if (!all) return 2;
    for (char *line = all, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        if (!*line) continue;
        cJSON *ans = answer(line);
        char *text = cJSON_PrintUnformatted(ans);
        puts(text ? text : "{\"ok\":false,\"error\":\"out of memory\"}");
        free(text);
        cJSON_Delete(ans);
    }
    free(all);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--jsonl")) return render_jsonl();
    if (argc == 2 && !strcmp(argv[1], "--chatml")) return fputs(tmpl_chatml_source(), stdout) < 0;
    if (argc == 2 || argc == 3) return render_files(argv[1], argc == 3 ? argv[2] : NULL);
    fprintf(stderr, "usage: render_template TEMPLATE_FILE [CONTEXT_JSON_FILE] | --jsonl | --chatml\n");
    return 2;
}
