/* Tool calling over the model's own conventions (see tool_calls.h for the formats). */
#include "server/tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "nucleus.h"
#include "server/prepare.h"

/* ---- The template's style ------------------------------------------------------------------ */

srv_tool_style srv_tool_style_of(const char *src) {
    srv_tool_style s = {.format = SRV_TOOL_FMT_HERMES};
    if (!src) return s;
    /* A template that never names `tools` cannot render them: nucleus describes them instead. */
    s.template_takes_tools = strstr(src, "tools") != NULL;
    if (strstr(src, "[TOOL_CALLS]")) s.format = SRV_TOOL_FMT_MISTRAL;
    else if (strstr(src, "<tool_call>")) s.format = SRV_TOOL_FMT_HERMES;
    else if (strstr(src, "<|python_tag|>") || (strstr(src, "<|start_header_id|>") && s.template_takes_tools))
        s.format = SRV_TOOL_FMT_LLAMA3;
    /* a template whose own format is none of these gets nucleus's description */
    else s.template_takes_tools = false;
    return s;
}

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
              !strncmp(content_of(prev), "<tool_response>", 15);
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

/* ---- The grammar of a required call -------------------------------------------------------- */

/* s as a GBNF string literal's body: quotes, backslashes and control characters escaped. */
static void gbnf_escaped(FILE *g, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(g, "\\%c", c);
        else if (c == '\n') fputs("\\n", g);
        else if (c < 0x20) fprintf(g, "\\x%02X", c);
        else fputc(c, g);
    }
}

static const char *tool_name(const cJSON *tool) {
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tool, "function"), "name")->valuestring;
}

/* Tool k's rules: its arguments' grammar (rules named tc-K-args...) and
 * tc-K ::= "{\"name\": \"NAME\", \"arguments\": " tc-K-args "}". */
static int tool_rules(FILE *g, const cJSON *tool, int k, const char *args_key, srv_error *e) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
    const char *name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    /* no parameters: OpenAI's function without arguments, {} */
    char *schema = params ? cJSON_PrintUnformatted(params) : strdup("{\"type\":\"object\",\"properties\":{},"
                                                                    "\"additionalProperties\":false}");
    char root[32], *rules = NULL;
    snprintf(root, sizeof root, "tc-%d-args", k);
    nc_err err;
    int rc = schema ? nc_json_schema_to_grammar(schema, root, &rules, &err) : -1;
    free(schema);
    if (rc) {
        char param[64];
        snprintf(param, sizeof param, "tools[%d].function.parameters", k);
        if (schema) srv_error_set(e, 400, "invalid_request_error", NULL, param, "%s: %s", param, err.msg);
        else srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    fprintf(g, "%s\ntc-%d ::= \"{\\\"name\\\": \\\"", rules, k);
    gbnf_escaped(g, name);
    fprintf(g, "\\\", \\\"%s\\\": \" %s \"}\"\n", args_key, root);
    free(rules);
    return 0;
}

char *srv_tool_grammar(srv_tool_format f, const char *tools_json, const char *only, bool parallel, srv_error *e) {
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
        if (!rc && (!only || !strcmp(tool_name(t), only)))
            rc = tool_rules(g, t, k, f == SRV_TOOL_FMT_LLAMA3 ? "parameters" : "arguments", e);
        k++;
    }
    int more = parallel ? SRV_MAX_PARALLEL_CALLS - 1 : 0;
    if (f == SRV_TOOL_FMT_HERMES)
        fprintf(g, "tc-block ::= \"<tool_call>\\n\" tc-call \"\\n</tool_call>\"\nroot ::= tc-block (\"\\n\" tc-block){0,%d}\n", more);
    else if (f == SRV_TOOL_FMT_MISTRAL)
        fprintf(g, "root ::= \"[\" tc-call (\", \" tc-call){0,%d} \"]\"\n", more);
    else
        fputs("root ::= tc-call\n", g); /* Llama 3's reply is one call */
    fclose(g);
    cJSON_Delete(tools);
    if (rc) {
        free(text);
        return NULL;
    }
    return text;
}

/* ---- Parsing calls out of a reply ---------------------------------------------------------- */

static const char HERMES_OPEN[] = "<tool_call>", HERMES_CLOSE[] = "</tool_call>";
static const char PYTHON_TAG[] = "<|python_tag|>", MISTRAL_TAG[] = "[TOOL_CALLS]";

static size_t skip_space(const char *t, size_t n, size_t i) {
    while (i < n && strchr(" \t\r\n", t[i]) && t[i]) i++;
    return i;
}

static bool starts_with(const char *t, size_t n, size_t i, const char *lit) {
    size_t k = strlen(lit);
    return n - i >= k && !memcmp(t + i, lit, k);
}

/* "call_" and 24 random letters and digits, OpenAI's shape. */
static void new_call_id(char id[30]) {
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    memcpy(id, "call_", 5);
    uint64_t r = srv_random_u64();
    for (int i = 0; i < 24; i++) {
        if (i == 10) r = srv_random_u64(); /* 10 draws of 62 use 60 of 64 bits */
        id[5 + i] = alnum[r % 62];
        r /= 62;
    }
    id[29] = 0;
}

/* Append the call in obj ({"name", "arguments" | "parameters"}) to out. 0: appended; 1: obj is
 * not a call; -1: out of memory. */
static int add_call(const cJSON *obj, srv_tool_calls *out) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(obj, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(obj, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(obj, "parameters");
    if (!cJSON_IsObject(obj) || !cJSON_IsString(name) || !*name->valuestring ||
        (args && !cJSON_IsObject(args) && !cJSON_IsString(args)))
        return 1;
    srv_tool_call *grown = realloc(out->calls, (size_t)(out->n + 1) * sizeof *grown);
    if (!grown) return -1;
    out->calls = grown;
    srv_tool_call *c = &out->calls[out->n];
    c->name = strdup(name->valuestring);
    char *printed = args && cJSON_IsObject(args) ? cJSON_PrintUnformatted(args) : NULL;
    if (args && cJSON_IsObject(args) && !printed) return -1;
    c->arguments = strdup(printed ? printed : args && cJSON_IsString(args) ? args->valuestring : "{}");
    cJSON_free(printed);
    if (!c->name || !c->arguments) {
        free(c->name);
        free(c->arguments);
        return -1;
    }
    new_call_id(c->id);
    out->n++;
    return 0;
}

/* The JSON value at text[*i], parsed; *i moves past it. NULL when there is none, or when it
 * holds an escaped NUL (cJSON's strings would end there). */
static cJSON *json_at(const char *t, size_t n, size_t *i) {
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(t + *i, n - *i, &end, false);
    if (v && srv_json_escaped_nul(t + *i, (size_t)(end - (t + *i))) >= 0) {
        cJSON_Delete(v);
        return NULL;
    }
    if (v) *i = (size_t)(end - t);
    return v;
}

/* One call object at text[*i]: 0 added, 1 none there, -1 out of memory. */
static int call_at(const char *t, size_t n, size_t *i, srv_tool_calls *out) {
    cJSON *v = json_at(t, n, i);
    int rc = v ? add_call(v, out) : 1;
    cJSON_Delete(v);
    return rc;
}

static int parse_hermes(const char *t, size_t n, srv_tool_calls *out) {
    const char *open = memmem(t, n, HERMES_OPEN, strlen(HERMES_OPEN));
    if (!open) return 1;
    out->content_end = (size_t)(open - t);
    for (size_t i = out->content_end; (i = skip_space(t, n, i)) < n;) {
        if (!starts_with(t, n, i, HERMES_OPEN)) return 1;
        i = skip_space(t, n, i + strlen(HERMES_OPEN));
        int rc = call_at(t, n, &i, out);
        if (rc) return rc;
        i = skip_space(t, n, i);
        if (starts_with(t, n, i, HERMES_CLOSE)) i += strlen(HERMES_CLOSE);
        else if (i < n) return 1; /* an unclosed block may only end the reply */
    }
    return 0;
}

static int parse_llama3(const char *t, size_t n, srv_tool_calls *out) {
    size_t i = skip_space(t, n, 0);
    if (starts_with(t, n, i, PYTHON_TAG)) i = skip_space(t, n, i + strlen(PYTHON_TAG));
    if (i == n || t[i] != '{') return 1;
    while (i < n) {
        int rc = call_at(t, n, &i, out);
        if (rc) return rc;
        i = skip_space(t, n, i);
        if (i < n && t[i] == ';') i = skip_space(t, n, i + 1);
    }
    return 0;
}

static int parse_mistral(const char *t, size_t n, srv_tool_calls *out) {
    size_t i = skip_space(t, n, 0);
    if (starts_with(t, n, i, MISTRAL_TAG)) i = skip_space(t, n, i + strlen(MISTRAL_TAG));
    if (i == n || t[i] != '[') return 1;
    cJSON *arr = json_at(t, n, &i);
    int rc = cJSON_IsArray(arr) && arr->child && skip_space(t, n, i) == n ? 0 : 1;
    const cJSON *c;
    cJSON_ArrayForEach(c, arr) if (!rc) rc = add_call(c, out);
    cJSON_Delete(arr);
    return rc;
}

void srv_tool_calls_free(srv_tool_calls *c) {
    for (int32_t i = 0; i < c->n; i++) {
        free(c->calls[i].name);
        free(c->calls[i].arguments);
    }
    free(c->calls);
    memset(c, 0, sizeof *c);
}

/* 0 when every call names one of tools (a JSON array), 1 when one does not, -1 out of memory. */
static int declared(const srv_tool_calls *calls, const char *tools_json) {
    cJSON *tools = cJSON_Parse(tools_json ? tools_json : "[]");
    if (!tools) return -1;
    int rc = 0;
    for (int32_t k = 0; k < calls->n && rc == 0; k++) {
        rc = 1;
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) if (!strcmp(tool_name(t), calls->calls[k].name)) rc = 0;
    }
    cJSON_Delete(tools);
    return rc;
}

int srv_tool_calls_parse(srv_tool_format f, const char *text, size_t n, const char *tools_json, bool parallel,
                         srv_tool_calls *out) {
    *out = (srv_tool_calls){0};
    int rc = f == SRV_TOOL_FMT_LLAMA3    ? parse_llama3(text, n, out)
             : f == SRV_TOOL_FMT_MISTRAL ? parse_mistral(text, n, out)
                                         : parse_hermes(text, n, out);
    if (rc == 0) rc = declared(out, tools_json);
    if (rc == 0 && !parallel)
        while (out->n > 1) {
            srv_tool_call *c = &out->calls[--out->n];
            free(c->name);
            free(c->arguments);
        }
    if (rc == 0) return 0;
    srv_tool_calls_free(out); /* not calls after all: the text is content */
    out->content_end = n;
    return rc < 0 ? -1 : 0;
}

/* ---- Streaming ----------------------------------------------------------------------------- */

/* Whether text[i..n) is a prefix of lit or starts with it. */
static bool may_start(const char *t, size_t n, size_t i, const char *lit) {
    size_t k = strlen(lit), m = n - i < k ? n - i : k;
    return !memcmp(t + i, lit, m);
}

size_t srv_tool_content_ready(srv_tool_format f, const char *t, size_t n) {
    if (n == 0) return 0; /* t may be NULL: nothing was generated yet */
    if (f == SRV_TOOL_FMT_HERMES) {
        const char *open = memmem(t, n, HERMES_OPEN, strlen(HERMES_OPEN));
        size_t ready = open ? (size_t)(open - t) : n;
        for (size_t k = strlen(HERMES_OPEN) - 1; !open && k > 0; k--) /* a tail that may grow into the tag */
            if (k <= n && !memcmp(t + n - k, HERMES_OPEN, k)) {
                ready = n - k;
                break;
            }
        /* blanks before a call are not content (srv_tool_calls_parse's callers trim them): hold
           them until something else follows */
        while (ready > 0 && strchr(" \t\r\n", t[ready - 1])) ready--;
        return ready;
    }
    /* the other formats' calls are the whole reply: hold it while it may be one */
    size_t i = skip_space(t, n, 0);
    if (i == n) return 0;
    bool call = f == SRV_TOOL_FMT_LLAMA3 ? t[i] == '{' || may_start(t, n, i, PYTHON_TAG)
                                         : t[i] == '[' || may_start(t, n, i, MISTRAL_TAG);
    return call ? 0 : n;
}

