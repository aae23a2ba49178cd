/* The grammar of a required call (tool_choice "required" or a named function), in the syntax of
 * the template: the calls written as the template writes them (its markers with its blanks),
 * each call's arguments held to its tool's "parameters" schema, the function's name one of the
 * tools'. A '*' of a marker (an index, an id the model chooses) is written as 1 to 24 letters,
 * digits and '_'. Parameters written one by one (Qwen3-Coder, GLM, MiniMax ...) come in the schema's
 * order, the optional ones maybe; a string parameter's value is text without '<' (where the
 * markers start), or one of its enum's strings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "nucleus.h"
#include "server/tool_calls.h"

/* s as a GBNF string literal's body: quotes, backslashes and control characters escaped. */
static void gbnf_escaped(FILE *g, const char *s, size_t n) {
    for (size_t i = 0; i < n && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(g, "\\%c", c);
        else if (c == '\n') fputs("\\n", g);
        else if (c < 0x20) fprintf(g, "\\x%02X", c);
        else fputc(c, g);
    }
}

/* A marker as GBNF: literals, with its '*' as letters and digits; nothing for NULL. */
static void marker(FILE *g, const char *m) {
    if (!m || !*m) return;
    fputs(" ", g);
    for (const char *p = m; *p;) {
        size_t k = strcspn(p, "*");
        if (k) {
            fputs("\"", g);
            gbnf_escaped(g, p, k);
            fputs("\" ", g);
        }
        p += k;
        if (*p == SRV_MARKER_ANY) {
            fputs("[a-zA-Z0-9_]{1,24} ", g);
            p++;
        }
    }
}

static void literal(FILE *g, const char *s) {
    fputs(" \"", g);
    gbnf_escaped(g, s, strlen(s));
    fputs("\"", g);
}

static const cJSON *fn_of(const cJSON *tool) { return cJSON_GetObjectItemCaseSensitive(tool, "function"); }
static const char *tool_name(const cJSON *tool) {
    return cJSON_GetObjectItemCaseSensitive(fn_of(tool), "name")->valuestring;
}

/* JSON's literals true, false and null in GBNF rules as Python's True, False, None (in place: the
 * same lengths); a literal's quote after a backslash is inside another literal. */
static void pythonic_literals(char *rules) {
    static const char *const from[] = {"\"true\"", "\"false\"", "\"null\""};
    static const char *const to[] = {"\"True\"", "\"False\"", "\"None\""};
    for (int k = 0; k < 3; k++)
        for (char *p = rules; (p = strstr(p, from[k])); p++)
            if (p == rules || p[-1] != '\\') memcpy(p, to[k], strlen(to[k]));
}

/* What stops a compilation: the caller's gone(user) (server/prepare.h's srv_gone_fn). */
typedef struct tool_watch {
    bool (*gone)(void *user);
    void *user;
} tool_watch;

/* A schema's grammar under rule `root`, appended to g (its literals Python's when python). 0, or
 * -1 with the 400 naming param, or 499 when w said to stop. */
static int schema_rules_as(FILE *g, const cJSON *schema, const char *root, const char *param, bool python,
                           const tool_watch *w, srv_error *e) {
    char *text = cJSON_PrintUnformatted(schema), *rules = NULL;
    nc_err err;
    int rc = text ? nc_json_schema_to_grammar_watched(text, root, w->gone, w->user, &rules, &err) : -1;
    free(text);
    if (rc) {
        if (!text) srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        else if (w->gone && w->gone(w->user))
            srv_error_set(e, 499, "invalid_request_error", NULL, NULL, "%s", NC_POLL_ABANDONED);
        else srv_error_set(e, 400, "invalid_request_error", NULL, param, "%s: %s", param, err.msg);
        return -1;
    }
    if (python) pythonic_literals(rules);
    fputs(rules, g);
    free(rules);
    return 0;
}

static int schema_rules(FILE *g, const cJSON *schema, const char *root, const char *param, const tool_watch *w,
                        srv_error *e) {
    return schema_rules_as(g, schema, root, param, false, w, e);
}

/* A tool's parameters, or OpenAI's function without arguments: {}. */
static cJSON *params_of(const cJSON *tool) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(fn_of(tool), "parameters");
    return p ? cJSON_Duplicate(p, true) : cJSON_Parse("{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}");
}

static bool is_string_only(const cJSON *s) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type"), *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (cJSON_IsString(type)) return !strcmp(type->valuestring, "string");
    if (!type && cJSON_IsArray(en) && en->child) {
        const cJSON *v;
        cJSON_ArrayForEach(v, en) if (!cJSON_IsString(v)) return false;
        return true;
    }
    return false;
}

static bool required(const cJSON *params, const char *key) {
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(params, "required")) if (cJSON_IsString(r) &&
                                                                                   !strcmp(r->valuestring, key)) return true;
    return false;
}

/* A property's schema with the $defs its $refs may point to (in params); NULL when out of memory. */
static cJSON *property_schema(const cJSON *params, const cJSON *p) {
    cJSON *sub = cJSON_Duplicate(p, true);
    for (const char *defs_key = "$defs"; sub && defs_key; defs_key = strcmp(defs_key, "$defs") ? NULL : "definitions") {
        const cJSON *defs = cJSON_GetObjectItemCaseSensitive(params, defs_key);
        if (defs && !cJSON_GetObjectItemCaseSensitive(sub, defs_key))
            cJSON_AddItemToObject(sub, defs_key, cJSON_Duplicate(defs, true));
    }
    return sub;
}

/* Parameters one by one: rule tc-K-args. */
static int param_rules(FILE *g, const srv_call_syntax *sx, const cJSON *params, int k, const char *where,
                       const tool_watch *w, srv_error *e) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties"), *p;
    int i = 0;
    fprintf(g, "tc-%d-args ::=", k);
    cJSON_ArrayForEach(p, props) fprintf(g, " tc-%d-p%d%s", k, i++, required(params, p->string) ? "" : "?");
    fputs(i ? "\n" : " \"\"\n", g);
    i = 0;
    cJSON_ArrayForEach(p, props) {
        char value[48];
        snprintf(value, sizeof value, "tc-%d-p%d-value", k, i);
        fprintf(g, "tc-%d-p%d ::=", k, i);
        marker(g, sx->param_open);
        literal(g, p->string);
        marker(g, sx->param_name_end);
        fprintf(g, " %s", value);
        marker(g, sx->param_close);
        fputs("\n", g);
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(p, "enum");
        if (is_string_only(p) && cJSON_IsArray(en)) {
            fprintf(g, "%s ::=", value);
            const cJSON *v;
            cJSON_ArrayForEach(v, en) fprintf(g, "%s", v == en->child ? "" : " |"), literal(g, v->valuestring);
            fputs("\n", g);
        } else if (is_string_only(p)) {
            const cJSON *max = cJSON_GetObjectItemCaseSensitive(p, "maxLength");
            const cJSON *min = cJSON_GetObjectItemCaseSensitive(p, "minLength");
            int lo = cJSON_IsNumber(min) ? (int)min->valuedouble : 0;
            if (cJSON_IsNumber(max)) fprintf(g, "%s ::= [^<]{%d,%d}\n", value, lo, (int)max->valuedouble);
            else fprintf(g, "%s ::= [^<]{%d,}\n", value, lo);
        } else { /* JSON, with the $defs its $refs may point to */
            cJSON *sub = property_schema(params, p);
            char param[160];
            snprintf(param, sizeof param, "%s.properties.%.40s", where, p->string);
            int rc = sub ? schema_rules(g, sub, value, param, w, e) : -1;
            cJSON_Delete(sub);
            if (rc) return -1;
        }
        i++;
    }
    return 0;
}

/* Keyword arguments, KEY=VALUE joined by ", ", in the schema's order, the optional ones maybe:
 * rule tc-K-args. tc-K-aI: those from the I-th on when none came before, tc-K-bI: when some did. */
static int python_rules(FILE *g, const cJSON *params, int k, const char *where, const tool_watch *w,
                        srv_error *e) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties"), *p;
    int n = cJSON_GetArraySize(props), i = 0;
    fprintf(g, "tc-%d-args ::= tc-%d-a0\ntc-%d-a%d ::= \"\"\ntc-%d-b%d ::= \"\"\n", k, k, k, n, k, n);
    cJSON_ArrayForEach(p, props) {
        bool req = required(params, p->string);
        fprintf(g, "tc-%d-a%d ::=", k, i);
        literal(g, p->string);
        fprintf(g, " \"=\" tc-%d-p%d-value tc-%d-b%d", k, i, k, i + 1);
        if (!req) fprintf(g, " | tc-%d-a%d", k, i + 1);
        fprintf(g, "\ntc-%d-b%d ::= \", \"", k, i);
        literal(g, p->string);
        fprintf(g, " \"=\" tc-%d-p%d-value tc-%d-b%d", k, i, k, i + 1);
        if (!req) fprintf(g, " | tc-%d-b%d", k, i + 1);
        fputs("\n", g);
        char value[48], param[160];
        snprintf(value, sizeof value, "tc-%d-p%d-value", k, i);
        snprintf(param, sizeof param, "%s.properties.%.40s", where, p->string);
        cJSON *sub = property_schema(params, p);
        int rc = sub ? schema_rules_as(g, sub, value, param, true, w, e) : -1;
        cJSON_Delete(sub);
        if (rc) return -1;
        i++;
    }
    return 0;
}

/* Tool k's rules: tc-K, one call of it, and its arguments' tc-K-args. */
static int tool_rules(FILE *g, const srv_call_syntax *sx, const cJSON *tool, int k, const tool_watch *w,
                      srv_error *e) {
    char where[64], args[32];
    snprintf(where, sizeof where, "tools[%d].function.parameters", k);
    snprintf(args, sizeof args, "tc-%d-args", k);
    cJSON *params = params_of(tool);
    if (!params) {
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    int rc = sx->kind == SRV_CALLS_NAMED && sx->param_open ? param_rules(g, sx, params, k, where, w, e)
             : sx->kind == SRV_CALLS_PYTHONIC               ? python_rules(g, params, k, where, w, e)
                                                             : schema_rules(g, params, args, where, w, e);
    cJSON_Delete(params);
    if (rc) return -1;
    const char *name = tool_name(tool);
    fprintf(g, "tc-%d ::=", k);
    switch (sx->kind) {
    case SRV_CALLS_NAMED:
        if (!sx->text_recipient) marker(g, sx->call_open); /* else the prompt wrote the first's (root) */
        literal(g, name);
        marker(g, sx->name_end);
        fprintf(g, " %s", args);
        marker(g, sx->call_close);
        break;
    case SRV_CALLS_PYTHONIC:
        literal(g, name);
        fprintf(g, " \"(\" %s \")\"", args);
        break;
    case SRV_CALLS_HARMONY:
        literal(g, "<|channel|>commentary to=functions.");
        literal(g, name);
        fprintf(g, " \" <|constrain|>json<|message|>\" %s", args);
        break;
    default: { /* a JSON object */
        char head[200];
        if (sx->name_key) snprintf(head, sizeof head, "{\"%s\": \"%s\", \"%s\": ", sx->name_key, name, sx->args_key);
        else snprintf(head, sizeof head, "{\"%s\": ", name);
        literal(g, head);
        fprintf(g, " %s \"}\"", args);
    }
    }
    fputs("\n", g);
    return 0;
}

char *srv_tool_grammar(const srv_call_syntax *sx, const char *tools_json, const char *only, bool parallel,
                       const char *lead, bool (*gone)(void *user), void *user, srv_error *e) {
    const tool_watch w = {gone, user};
    cJSON *tools = cJSON_Parse(tools_json);
    char *text = NULL;
    size_t len = 0;
    FILE *g = tools ? open_memstream(&text, &len) : NULL;
    if (!g) {
        cJSON_Delete(tools);
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    /* tc-call ::= tc-0 | tc-1 ...: one alternative per tool that may be called */
    int k = 0, rc = 0;
    bool first = true;
    fputs("tc-call ::=", g);
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        if (!only || !strcmp(tool_name(t), only)) fprintf(g, "%s tc-%d", first ? "" : " |", k), first = false;
        k++;
    }
    fputs("\n", g);
    k = 0;
    cJSON_ArrayForEach(t, tools) {
        if (!rc && (!only || !strcmp(tool_name(t), only))) rc = tool_rules(g, sx, t, k, &w, e);
        k++;
    }
    int more = parallel && !sx->one_call && sx->kind != SRV_CALLS_JSON_BARE && sx->kind != SRV_CALLS_HARMONY
                   ? SRV_MAX_PARALLEL_CALLS - 1 : 0;
    fprintf(g, "root ::= %s", lead ? "lead" : "");
    switch (sx->kind) {
    case SRV_CALLS_JSON_TAGGED:
        fprintf(g, " tc-block (\"\\n\" tc-block){0,%d}\ntc-block ::=", more);
        marker(g, sx->call_open);
        fputs(" tc-call", g);
        marker(g, sx->call_close);
        break;
    case SRV_CALLS_JSON_LIST:
    case SRV_CALLS_PYTHONIC:
        marker(g, sx->section_open);
        /* the blanks a template writes inside its list (Command R+'s lines and indents) */
        fprintf(g, " \"[\" tc-ws tc-call (\",\" tc-ws tc-call){0,%d} tc-ws \"]\"", more);
        marker(g, sx->section_close);
        fputs("\ntc-ws ::= [ \\n]{0,8}", g);
        break;
    case SRV_CALLS_NAMED:
        marker(g, sx->section_open);
        if (sx->text_recipient) { /* Functionary v3.2: NAME\n{...}, then >>>NAME\n{...} */
            fputs(" tc-call (", g);
            marker(g, sx->call_open);
            fprintf(g, " tc-call){0,%d}", more);
        } else {
            fprintf(g, " tc-call (\"\\n\"? tc-call){0,%d}", more);
        }
        marker(g, sx->section_close);
        break;
    default: fputs(" tc-call", g); /* one call: Llama 3's reply, a harmony message */
    }
    fputs("\n", g);
    if (lead) fputs(lead, g);
    fclose(g);
    cJSON_Delete(tools);
    if (rc) {
        free(text);
        return NULL;
    }
    return text;
}
