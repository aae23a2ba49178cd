/* Anthropic's Messages API in and out (see anthropic.h). The request becomes an OpenAI chat body
 * (cJSON) which request.c then checks as any other, so both APIs mean the same by the same
 * field; what only Anthropic has (content blocks, tool_result, thinking) is turned into what the
 * chat template reads (tool messages, tool_calls, reasoning_content). */
#include "server/anthropic.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/prepare.h"

/* ---- Reading the request ------------------------------------------------------------------- */

/* cache_control {"type": "ephemeral", "ttl"?}: the prefix cache keeps every prompt's blocks
 * anyway, so a breakpoint asks for nothing more. */
static int cache_control(const cJSON *obj, const char *where, srv_error *e) {
    const cJSON *cc = srv_member(obj, "cache_control");
    if (!cc) return 0;
    const cJSON *type = cJSON_IsObject(cc) ? srv_member(cc, "type") : NULL, *ttl = cJSON_IsObject(cc) ? srv_member(cc, "ttl") : NULL;
    static const char *const fields[] = {"type", "ttl", NULL};
    char param[128];
    snprintf(param, sizeof param, "%s%scache_control", where, *where ? "." : "");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "ephemeral") || (ttl && !cJSON_IsString(ttl)))
        return srv_refuse(e, param, "'%s' must be {\"type\": \"ephemeral\"}", param);
    return srv_only(cc, fields, param, e);
}

/* A text block {"type": "text", "text", "cache_control"?, "citations"?: null}: its text. */
static const char *text_block(const cJSON *b, const char *where, srv_error *e) {
    static const char *const fields[] = {"type", "text", "cache_control", "citations", NULL};
    const cJSON *text = srv_member(b, "text");
    if (srv_only(b, fields, where, e) || cache_control(b, where, e)) return NULL;
    if (srv_member(b, "citations") && !(cJSON_IsArray(srv_member(b, "citations")) && !srv_member(b, "citations")->child)) {
        srv_refuse(e, where, "'%s.citations' is not supported", where);
        return NULL;
    }
    if (!cJSON_IsString(text)) {
        srv_refuse(e, where, "'%s.text' must be a string", where);
        return NULL;
    }
    return text->valuestring;
}

/* A string, or an array of text blocks, as one text (malloc'd). */
static char *plain_text(const cJSON *v, const char *where, srv_error *e) {
    if (cJSON_IsString(v)) {
        char *s = strdup(v->valuestring);
        if (!s) srv_oom(e);
        return s;
    }
    if (!cJSON_IsArray(v)) {
        srv_refuse(e, where, "'%s' must be a string or an array of text blocks", where);
        return NULL;
    }
    char *acc = strdup("");
    bool first = true;
    int k = 0;
    for (const cJSON *b = v->child; b && acc; b = b->next, k++) {
        char bw[160];
        snprintf(bw, sizeof bw, "%s[%d]", where, k);
        const cJSON *type = cJSON_IsObject(b) ? srv_member(b, "type") : NULL;
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text")) {
            free(acc);
            srv_refuse(e, bw, "'%s' must be a text block ({\"type\": \"text\", \"text\"})", bw);
            return NULL;
        }
        const char *t = text_block(b, bw, e);
        if (!t) {
            free(acc);
            return NULL;
        }
        if (first) {
            free(acc);
            acc = strdup(t);
            first = false;
        } else {
            acc = srv_append_line(acc, t);
        }
    }
    if (!acc) srv_oom(e);
    return acc;
}

/* A tool_result block as OpenAI's tool message. */
static int tool_result(const cJSON *b, const char *where, cJSON *out, srv_error *e) {
    static const char *const fields[] = {"type", "tool_use_id", "content", "is_error", "cache_control", NULL};
    const cJSON *id = srv_member(b, "tool_use_id"), *content = srv_member(b, "content"), *is_error = srv_member(b, "is_error");
    if (srv_only(b, fields, where, e) || cache_control(b, where, e)) return -1;
    if (!cJSON_IsString(id)) return srv_refuse(e, where, "'%s.tool_use_id' must be a string", where);
    if (is_error && !cJSON_IsBool(is_error)) return srv_refuse(e, where, "'%s.is_error' must be a boolean", where);
    char cw[160];
    snprintf(cw, sizeof cw, "%s.content", where);
    char *text = content ? plain_text(content, cw, e) : strdup("");
    if (!text) return content ? -1 : srv_oom(e);
    /* the tool failed: the model is told so, as Anthropic's own prompt does */
    if (cJSON_IsTrue(is_error)) {
        char *marked = malloc(strlen(text) + 8);
        if (marked) sprintf(marked, "Error: %s", text);
        free(text);
        if (!(text = marked)) return srv_oom(e);
    }
    cJSON *m = cJSON_CreateObject();
    bool ok = m && srv_add_str(m, "role", "tool") && srv_add_str(m, "tool_call_id", id->valuestring) &&
              srv_add_str(m, "content", text) && cJSON_AddItemToArray(out, m);
    free(text);
    if (!ok) {
        cJSON_Delete(m);
        return srv_oom(e);
    }
    return 0;
}

/* A tool_use block as one of OpenAI's tool_calls. */
static int tool_use(const cJSON *b, const char *where, cJSON *calls, srv_error *e) {
    static const char *const fields[] = {"type", "id", "name", "input", "cache_control", NULL};
    const cJSON *id = srv_member(b, "id"), *name = srv_member(b, "name"), *input = srv_member(b, "input");
    if (srv_only(b, fields, where, e) || cache_control(b, where, e)) return -1;
    if (!cJSON_IsString(id) || !cJSON_IsString(name))
        return srv_refuse(e, where, "'%s' needs 'id' and 'name' strings", where);
    if (input && !cJSON_IsObject(input)) return srv_refuse(e, where, "'%s.input' must be an object", where);
    char *args = input ? cJSON_PrintUnformatted(input) : strdup("{}");
    cJSON *c = cJSON_CreateObject(), *fn = NULL;
    bool ok = args && c && srv_add_str(c, "id", id->valuestring) && srv_add_str(c, "type", "function") &&
              (fn = cJSON_AddObjectToObject(c, "function")) && srv_add_str(fn, "name", name->valuestring) &&
              srv_add_str(fn, "arguments", args) && cJSON_AddItemToArray(calls, c);
    free(args);
    if (!ok) {
        cJSON_Delete(c);
        return srv_oom(e);
    }
    return 0;
}

/* One Anthropic message, as one or more OpenAI messages appended to out. */
static int message(const cJSON *msg, int i, cJSON *out, srv_error *e) {
    static const char *const fields[] = {"role", "content", NULL};
    char where[64];
    snprintf(where, sizeof where, "messages[%d]", i);
    if (!cJSON_IsObject(msg)) return srv_refuse(e, where, "'%s' must be an object", where);
    if (srv_only(msg, fields, where, e)) return -1;
    const cJSON *role = srv_member(msg, "role"), *content = srv_member(msg, "content");
    static const char *const roles[] = {"user", "assistant", "system", NULL};
    if (!cJSON_IsString(role) || !srv_listed(roles, role->valuestring))
        return srv_refuse(e, where, "'%s.role' must be \"user\" or \"assistant\"", where);
    const char *r = role->valuestring;
    char cw[96];
    snprintf(cw, sizeof cw, "%s.content", where);
    if (cJSON_IsString(content) || !strcmp(r, "system")) {
        char *text = content ? plain_text(content, cw, e) : NULL;
        if (!text) return content ? -1 : srv_refuse(e, cw, "'%s' is required", cw);
        cJSON *m = cJSON_CreateObject();
        bool ok = m && srv_add_str(m, "role", r) && srv_add_str(m, "content", text) && cJSON_AddItemToArray(out, m);
        free(text);
        if (!ok) cJSON_Delete(m);
        return ok ? 0 : srv_oom(e);
    }
    if (!cJSON_IsArray(content)) return srv_refuse(e, cw, "'%s' must be a string or an array of content blocks", cw);
    char *text = NULL, *thinking = NULL;
    cJSON *calls = cJSON_CreateArray();
    if (!calls) return srv_oom(e);
    bool assistant = !strcmp(r, "assistant");
    int k = 0, rc = 0;
    for (const cJSON *b = content->child; b && !rc; b = b->next, k++) {
        char bw[128];
        snprintf(bw, sizeof bw, "%s[%d]", cw, k);
        const cJSON *type = cJSON_IsObject(b) ? srv_member(b, "type") : NULL;
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        if (!strcmp(t, "text")) {
            const char *s = text_block(b, bw, e);
            if (!s) rc = -1;
            else if (!(text = srv_append_line(text, s))) rc = srv_oom(e);
        } else if (!strcmp(t, "tool_result") && !assistant) {
            rc = tool_result(b, bw, out, e);
        } else if (!strcmp(t, "tool_use") && assistant) {
            rc = tool_use(b, bw, calls, e);
        } else if (!strcmp(t, "thinking") && assistant) {
            static const char *const tf[] = {"type", "thinking", "signature", NULL};
            const cJSON *th = srv_member(b, "thinking"), *sig = srv_member(b, "signature");
            if (srv_only(b, tf, bw, e)) rc = -1;
            else if (!cJSON_IsString(th) || (sig && !cJSON_IsString(sig)))
                rc = srv_refuse(e, bw, "'%s' needs 'thinking' (and 'signature') strings", bw);
            else if (!(thinking = srv_append_line(thinking, th->valuestring))) rc = srv_oom(e);
        } else if (!cJSON_IsObject(b) || !cJSON_IsString(type)) {
            rc = srv_refuse(e, bw, "'%s' must be a content block with a 'type'", bw);
        } else {
            rc = srv_refuse(e, bw, "'%s': content blocks of type \"%.40s\" are not supported in %s messages (this server "
                        "reads text, tool_use, tool_result and thinking)", bw, t, r);
        }
    }
    /* the tool results went out first, as OpenAI's tool messages, right after the calls they answer */
    if (!rc && (text || cJSON_GetArraySize(calls) > 0 || thinking || !content->child)) {
        cJSON *m = cJSON_CreateObject();
        bool ok = m && srv_add_str(m, "role", r) && srv_add_str(m, "content", text ? text : "") &&
                  (!thinking || srv_add_str(m, "reasoning_content", thinking)) &&
                  (cJSON_GetArraySize(calls) == 0 || (cJSON_AddItemToObject(m, "tool_calls", calls) && !(calls = NULL))) &&
                  cJSON_AddItemToArray(out, m);
        if (!ok) {
            cJSON_Delete(m);
            rc = srv_oom(e);
        }
    }
    cJSON_Delete(calls);
    free(text);
    free(thinking);
    return rc;
}

/* tools: [{"name", "description"?, "input_schema", "cache_control"?, "type"?: "custom"}] as
 * OpenAI's function tools. Anthropic's server tools (web search, code execution ...) are not
 * run here. */
static int tools(const cJSON *v, cJSON *oa, srv_error *e) {
    static const char *const fields[] = {"name", "description", "input_schema", "cache_control", "type", NULL};
    if (!cJSON_IsArray(v)) return srv_refuse(e, "tools", "'tools' must be an array");
    cJSON *arr = cJSON_AddArrayToObject(oa, "tools");
    if (!arr) return srv_oom(e);
    int i = 0;
    for (const cJSON *t = v->child; t; t = t->next, i++) {
        char where[32];
        snprintf(where, sizeof where, "tools[%d]", i);
        if (!cJSON_IsObject(t)) return srv_refuse(e, where, "'%s' must be an object", where);
        const cJSON *type = srv_member(t, "type"), *name = srv_member(t, "name"), *desc = srv_member(t, "description"),
                    *schema = srv_member(t, "input_schema");
        if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "custom")))
            return srv_refuse(e, where, "'%s': tools of type \"%.40s\" (Anthropic's server tools) are not run by this "
                          "server; give client tools ({\"name\", \"input_schema\"})", where,
                          cJSON_IsString(type) ? type->valuestring : "?");
        if (srv_only(t, fields, where, e) || cache_control(t, where, e)) return -1;
        if (!cJSON_IsString(name)) return srv_refuse(e, where, "'%s.name' must be a string", where);
        if (desc && !cJSON_IsString(desc)) return srv_refuse(e, where, "'%s.description' must be a string", where);
        if (!cJSON_IsObject(schema)) return srv_refuse(e, where, "'%s.input_schema' must be a JSON Schema (an object)", where);
        cJSON *tool = cJSON_CreateObject(), *fn = NULL, *params = cJSON_Duplicate(schema, true);
        bool ok = tool && params && srv_add_str(tool, "type", "function") && (fn = cJSON_AddObjectToObject(tool, "function")) &&
                  srv_add_str(fn, "name", name->valuestring) && (!desc || srv_add_str(fn, "description", desc->valuestring)) &&
                  cJSON_AddItemToObject(fn, "parameters", params) && (params = NULL, cJSON_AddItemToArray(arr, tool));
        cJSON_Delete(params);
        if (!ok) {
            cJSON_Delete(tool);
            return srv_oom(e);
        }
    }
    return 0;
}

/* tool_choice: {"type": "auto" | "any" | "tool" (with "name") | "none",
 * "disable_parallel_tool_use"?}. */
static int tool_choice(const cJSON *v, cJSON *oa, srv_error *e) {
    static const char *const fields[] = {"type", "name", "disable_parallel_tool_use", NULL};
    const cJSON *type = cJSON_IsObject(v) ? srv_member(v, "type") : NULL;
    if (!cJSON_IsString(type))
        return srv_refuse(e, "tool_choice", "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
    if (srv_only(v, fields, "tool_choice", e)) return -1;
    const char *t = type->valuestring;
    const cJSON *name = srv_member(v, "name"), *dp = srv_member(v, "disable_parallel_tool_use");
    if (dp && !cJSON_IsBool(dp)) return srv_refuse(e, "tool_choice", "'tool_choice.disable_parallel_tool_use' must be a boolean");
    if (cJSON_IsTrue(dp) && !cJSON_AddFalseToObject(oa, "parallel_tool_calls")) return srv_oom(e);
    if (!strcmp(t, "tool")) {
        if (!cJSON_IsString(name)) return srv_refuse(e, "tool_choice", "'tool_choice' of type \"tool\" needs 'name'");
        cJSON *c = cJSON_AddObjectToObject(oa, "tool_choice"), *fn = NULL;
        return c && srv_add_str(c, "type", "function") && (fn = cJSON_AddObjectToObject(c, "function")) &&
                       srv_add_str(fn, "name", name->valuestring) ? 0 : srv_oom(e);
    }
    if (name) return srv_refuse(e, "tool_choice", "'tool_choice.name' goes with type \"tool\"");
    const char *mapped = !strcmp(t, "auto") ? "auto" : !strcmp(t, "any") ? "required" : !strcmp(t, "none") ? "none" : NULL;
    if (!mapped) return srv_refuse(e, "tool_choice", "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"");
    return srv_add_str(oa, "tool_choice", mapped) ? 0 : srv_oom(e);
}

/* thinking: {"type": "enabled", "budget_tokens"} | {"type": "disabled"} | {"type": "adaptive"}:
 * the template's enable_thinking, and the reasoning budget. */
static int thinking(const cJSON *v, cJSON *oa, int32_t *budget, srv_error *e) {
    static const char *const fields[] = {"type", "budget_tokens", "display", NULL};
    const cJSON *type = cJSON_IsObject(v) ? srv_member(v, "type") : NULL, *bt = cJSON_IsObject(v) ? srv_member(v, "budget_tokens") : NULL;
    if (!cJSON_IsString(type))
        return srv_refuse(e, "thinking", "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N}, {\"type\": "
                      "\"disabled\"} or {\"type\": \"adaptive\"}");
    if (srv_only(v, fields, "thinking", e)) return -1;
    const char *t = type->valuestring;
    bool on = !strcmp(t, "enabled") || !strcmp(t, "adaptive");
    if (!on && strcmp(t, "disabled"))
        return srv_refuse(e, "thinking.type", "'thinking.type' must be \"enabled\", \"disabled\" or \"adaptive\"");
    if (!strcmp(t, "enabled")) {
        if (!cJSON_IsNumber(bt) || bt->valuedouble != floor(bt->valuedouble) || bt->valuedouble < 1 ||
            bt->valuedouble > INT32_MAX)
            return srv_refuse(e, "thinking.budget_tokens", "'thinking.budget_tokens' must be a positive integer");
        *budget = (int32_t)bt->valuedouble;
    } else if (bt) {
        return srv_refuse(e, "thinking.budget_tokens", "'thinking.budget_tokens' goes with type \"enabled\"");
    } else {
        *budget = on ? -1 : 0; /* disabled: the reasoning ends as soon as it opens */
    }
    cJSON *kw = cJSON_AddObjectToObject(oa, "chat_template_kwargs");
    return kw && cJSON_AddBoolToObject(kw, "enable_thinking", on) ? 0 : srv_oom(e);
}

/* output_config: {"effort"?, "format"?: {"type": "json_schema", "schema"}}. */
static int output_config(const cJSON *v, cJSON *oa, srv_error *e) {
    static const char *const fields[] = {"effort", "format", NULL};
    static const char *const ffields[] = {"type", "schema", NULL};
    if (!cJSON_IsObject(v)) return srv_refuse(e, "output_config", "'output_config' must be an object");
    if (srv_only(v, fields, "output_config", e)) return -1;
    const cJSON *effort = srv_member(v, "effort"), *format = srv_member(v, "format");
    if (effort) {
        static const char *const levels[] = {"low", "medium", "high", "xhigh", "max", NULL};
        if (!cJSON_IsString(effort) || !srv_listed(levels, effort->valuestring))
            return srv_refuse(e, "output_config.effort", "'output_config.effort' must be low, medium, high, xhigh or max");
        const char *lvl = !strcmp(effort->valuestring, "xhigh") || !strcmp(effort->valuestring, "max")
                              ? "high" : effort->valuestring; /* templates know OpenAI's three */
        if (!srv_add_str(oa, "reasoning_effort", lvl)) return srv_oom(e);
    }
    if (format) {
        const cJSON *type = cJSON_IsObject(format) ? srv_member(format, "type") : NULL, *schema = srv_member(format, "schema");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "json_schema") || !cJSON_IsObject(schema))
            return srv_refuse(e, "output_config.format", "'output_config.format' must be {\"type\": \"json_schema\", \"schema\"}");
        if (srv_only(format, ffields, "output_config.format", e)) return -1;
        cJSON *s = cJSON_Duplicate(schema, true);
        if (!s || !cJSON_AddItemToObject(oa, "json_schema", s)) {
            cJSON_Delete(s);
            return srv_oom(e);
        }
    }
    return 0;
}

/* A number member within [lo, hi] (Anthropic's ranges, narrower than OpenAI's). */
static int range(const cJSON *root, const char *name, double lo, double hi, srv_error *e) {
    const cJSON *v = srv_member(root, name);
    if (v && (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)))
        return srv_refuse(e, name, "'%s' must be a number from %g to %g", name, lo, hi);
    return 0;
}

static int translate(const cJSON *root, bool count, cJSON *oa, int32_t *budget, srv_error *e) {
    static const char *const fields[] = {"model", "max_tokens", "messages", "system", "stop_sequences", "stream",
                                         "temperature", "top_p", "top_k", "metadata", "tools", "tool_choice",
                                         "thinking", "service_tier", "cache_control", "output_config", NULL};
    if (srv_only(root, fields, "", e) || cache_control(root, "", e)) return -1;
    const cJSON *model = srv_member(root, "model"), *msgs = srv_member(root, "messages"), *mt = srv_member(root, "max_tokens");
    if (!cJSON_IsString(model)) return srv_refuse(e, "model", "'model' is required (a string)");
    if (!srv_add_str(oa, "model", model->valuestring)) return srv_oom(e);
    if (!count && !mt) return srv_refuse(e, "max_tokens", "'max_tokens' is required");
    if (mt && (!cJSON_IsNumber(mt) || mt->valuedouble != floor(mt->valuedouble) || mt->valuedouble < 1 ||
               mt->valuedouble > INT32_MAX))
        return srv_refuse(e, "max_tokens", "'max_tokens' must be a positive integer");
    if (!count && srv_copy_member(root, "max_tokens", oa, "max_tokens", e)) return -1;
    if (count && srv_member(root, "stream")) return srv_refuse(e, "stream", "'stream' is not for /v1/messages/count_tokens");
    if (range(root, "temperature", 0, 1, e) || range(root, "top_p", 0, 1, e) ||
        srv_copy_member(root, "temperature", oa, "temperature", e) || srv_copy_member(root, "top_p", oa, "top_p", e) ||
        srv_copy_member(root, "top_k", oa, "top_k", e) || srv_copy_member(root, "stream", oa, "stream", e) ||
        srv_copy_member(root, "stop_sequences", oa, "stop", e))
        return -1;
    const cJSON *meta = srv_member(root, "metadata"), *tier = srv_member(root, "service_tier");
    static const char *const meta_fields[] = {"user_id", NULL};
    if (meta && (!cJSON_IsObject(meta) || srv_only(meta, meta_fields, "metadata", e) ||
                 (srv_member(meta, "user_id") && !cJSON_IsString(srv_member(meta, "user_id")))))
        return e->message[0] && strcmp(e->param, "metadata") ? -1
               : srv_refuse(e, "metadata", "'metadata' must be {\"user_id\": string}");
    if (tier && !(cJSON_IsString(tier) && (!strcmp(tier->valuestring, "auto") || !strcmp(tier->valuestring, "standard_only"))))
        return srv_refuse(e, "service_tier", "'service_tier' must be \"auto\" or \"standard_only\" (this server has one tier)");
    /* system, then the conversation */
    cJSON *out = cJSON_AddArrayToObject(oa, "messages");
    if (!out) return srv_oom(e);
    const cJSON *sys = srv_member(root, "system");
    if (sys) {
        char *text = plain_text(sys, "system", e);
        cJSON *m = text ? cJSON_CreateObject() : NULL;
        bool ok = m && srv_add_str(m, "role", "system") && srv_add_str(m, "content", text) && cJSON_AddItemToArray(out, m);
        free(text);
        if (!ok) {
            cJSON_Delete(m);
            return text || !e->message[0] ? srv_oom(e) : -1;
        }
    }
    if (!msgs) return srv_refuse(e, "messages", "'messages' is required");
    if (!cJSON_IsArray(msgs) || !msgs->child) return srv_refuse(e, "messages", "'messages' must be a non-empty array");
    int i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next)
        if (message(m, i++, out, e)) return -1;
    const cJSON *t = srv_member(root, "tools"), *tc = srv_member(root, "tool_choice"), *th = srv_member(root, "thinking"),
                *oc = srv_member(root, "output_config");
    if (t && tools(t, oa, e)) return -1;
    if (tc && tool_choice(tc, oa, e)) return -1;
    if (th && thinking(th, oa, budget, e)) return -1;
    if (oc && output_config(oc, oa, e)) return -1;
    return 0;
}

/* An error the chat parser found, under the name Anthropic's field has. */
static void anthropic_param(srv_error *e) {
    static const struct { const char *from, *to; } names[] = {
        {"stop", "stop_sequences"}, {"json_schema", "output_config.format"}, {"reasoning_effort", "output_config.effort"},
        {"chat_template_kwargs", "thinking"}, {"parallel_tool_calls", "tool_choice"}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(e->param, names[i].from)) snprintf(e->param, sizeof e->param, "%s", names[i].to);
    if (!strncmp(e->param, "messages[", 9)) snprintf(e->param, sizeof e->param, "messages");
}

int srv_anthropic_request(const char *body, size_t len, bool count, const srv_limits *lim, srv_request *out,
                          srv_error *e) {
    memset(out, 0, sizeof *out);
    cJSON *root = srv_json_parse_object(body, len, e);
    if (!root) return -1;
    cJSON *oa = cJSON_CreateObject();
    int32_t budget = SRV_BUDGET_SERVER;
    int rc = oa ? translate(root, count, oa, &budget, e) : srv_oom(e);
    cJSON_Delete(root);
    if (!rc) {
        rc = srv_request_from_json(SRV_API_CHAT, oa, lim, out, e);
        if (rc) anthropic_param(e);
        else out->reasoning_budget = budget;
    }
    cJSON_Delete(oa);
    return rc;
}

/* ---- Writing the reply --------------------------------------------------------------------- */

typedef struct anth_writer {
    char id[48];
    char *model;
    int open;              /* the block being streamed: 0 none, 1 thinking, 2 text */
    int index;             /* the next block's index */
} anth_writer;

void *srv_anthropic_new(const char *model) {
    anth_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    snprintf(w->id, sizeof w->id, "msg_%016llx%08llx", (unsigned long long)srv_random_u64(),
             (unsigned long long)(srv_random_u64() & 0xffffffffu));
    if (!(w->model = strdup(model))) {
        free(w);
        return NULL;
    }
    return w;
}

static void writer_free(void *st) {
    anth_writer *w = st;
    if (!w) return;
    free(w->model);
    free(w);
}

static const char *stop_reason(const srv_dialect_end *d) {
    if (d->finish == NC_FINISH_LENGTH || d->finish == NC_FINISH_CONTEXT)
        return d->finish == NC_FINISH_CONTEXT ? "model_context_window_exceeded" : "max_tokens";
    if (d->reply->calls.n > 0) return "tool_use";
    return d->stop_word ? "stop_sequence" : "end_turn";
}

static bool put_usage(cJSON *o, const srv_usage *u, bool input) {
    int64_t cached = u->cached_tokens;
    return (!input || (cJSON_AddNumberToObject(o, "input_tokens", (double)(u->prompt_tokens - cached)) &&
                       cJSON_AddNumberToObject(o, "cache_creation_input_tokens", 0) &&
                       cJSON_AddNumberToObject(o, "cache_read_input_tokens", (double)cached))) &&
           cJSON_AddNumberToObject(o, "output_tokens", (double)u->completion_tokens);
}

/* A tool_use block of call c (input: its arguments parsed; {} when they are not an object). */
static cJSON *tool_use_block(const srv_tool_call *c, bool empty_input) {
    cJSON *b = cJSON_CreateObject();
    cJSON *input = empty_input ? NULL : cJSON_Parse(c->arguments ? c->arguments : "{}");
    if (!cJSON_IsObject(input)) {
        cJSON_Delete(input);
        input = cJSON_CreateObject();
    }
    bool ok = b && input && srv_add_str(b, "type", "tool_use") && srv_add_str(b, "id", c->id) && srv_add_str(b, "name", c->name) &&
              cJSON_AddItemToObject(b, "input", input);
    if (!ok) {
        if (!b || !cJSON_GetObjectItem(b, "input")) cJSON_Delete(input);
        cJSON_Delete(b);
        return NULL;
    }
    return b;
}

static char *whole(void *st, const srv_dialect_end *d) {
    anth_writer *w = st;
    const srv_reply *r = d->reply;
    cJSON *root = cJSON_CreateObject(), *content = NULL, *usage = NULL;
    bool ok = root && srv_add_str(root, "id", w->id) && srv_add_str(root, "type", "message") && srv_add_str(root, "role", "assistant") &&
              srv_add_str(root, "model", w->model) && (content = cJSON_AddArrayToObject(root, "content"));
    if (ok && r->n_reasoning) {
        cJSON *b = cJSON_CreateObject();
        ok = b && cJSON_AddItemToArray(content, b) && srv_add_str(b, "type", "thinking") &&
             srv_put_text(b, "thinking", r->reasoning, r->n_reasoning) && srv_add_str(b, "signature", "");
        if (!ok && b && !cJSON_GetArraySize(content)) cJSON_Delete(b);
    }
    if (ok && (r->n_content || (!r->n_reasoning && r->calls.n == 0))) {
        cJSON *b = cJSON_CreateObject();
        ok = b && cJSON_AddItemToArray(content, b) && srv_add_str(b, "type", "text") && srv_put_text(b, "text", r->content, r->n_content);
    }
    for (int32_t k = 0; ok && k < r->calls.n; k++) {
        cJSON *b = tool_use_block(&r->calls.calls[k], false);
        ok = b && cJSON_AddItemToArray(content, b);
        if (!ok) cJSON_Delete(b);
    }
    ok = ok && srv_add_str(root, "stop_reason", stop_reason(d)) &&
         (d->stop_word && d->reply->calls.n == 0 && d->finish == NC_FINISH_STOP
              ? srv_add_str(root, "stop_sequence", d->stop_word) : cJSON_AddNullToObject(root, "stop_sequence") != NULL) &&
         (usage = cJSON_AddObjectToObject(root, "usage")) && put_usage(usage, d->usage, true);
    return srv_json_print(root, ok);
}

/* One event: its JSON object (type first), made by the caller and taken. */
static char *event(const char *name, cJSON *data, bool ok) { return srv_sse_named(name, srv_json_print(data, ok)); }

static cJSON *typed(const char *type) {
    cJSON *o = cJSON_CreateObject();
    if (o && !srv_add_str(o, "type", type)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static char *begin(void *st, int64_t prompt_tokens) {
    anth_writer *w = st;
    cJSON *data = typed("message_start"), *msg = NULL, *usage = NULL;
    bool ok = data && (msg = cJSON_AddObjectToObject(data, "message")) && srv_add_str(msg, "id", w->id) &&
              srv_add_str(msg, "type", "message") && srv_add_str(msg, "role", "assistant") && cJSON_AddArrayToObject(msg, "content") &&
              srv_add_str(msg, "model", w->model) && cJSON_AddNullToObject(msg, "stop_reason") &&
              cJSON_AddNullToObject(msg, "stop_sequence") && (usage = cJSON_AddObjectToObject(msg, "usage")) &&
              cJSON_AddNumberToObject(usage, "input_tokens", (double)prompt_tokens) &&
              cJSON_AddNumberToObject(usage, "output_tokens", 0);
    cJSON *ping = typed("ping");
    return srv_text_cat(event("message_start", data, ok), event("ping", ping, ping != NULL));
}

static char *block_stop(anth_writer *w) {
    char *out = strdup("");
    if (w->open == 1) { /* a thinking block ends with its signature, which nothing here checks */
        cJSON *d = typed("content_block_delta"), *delta = NULL;
        bool ok = d && cJSON_AddNumberToObject(d, "index", w->index - 1) && (delta = cJSON_AddObjectToObject(d, "delta")) &&
                  srv_add_str(delta, "type", "signature_delta") && srv_add_str(delta, "signature", "");
        out = srv_text_cat(out, event("content_block_delta", d, ok));
    }
    if (w->open) {
        cJSON *d = typed("content_block_stop");
        out = srv_text_cat(out, event("content_block_stop", d, d && cJSON_AddNumberToObject(d, "index", w->index - 1)));
    }
    w->open = 0;
    return out;
}

/* Open a block of kind (1 thinking, 2 text) unless it is the one open. */
static char *block_start(anth_writer *w, int kind) {
    if (w->open == kind) return strdup("");
    char *out = block_stop(w);
    cJSON *d = typed("content_block_start"), *b = NULL;
    bool ok = d && cJSON_AddNumberToObject(d, "index", w->index) && (b = cJSON_AddObjectToObject(d, "content_block")) &&
              (kind == 1 ? srv_add_str(b, "type", "thinking") && srv_add_str(b, "thinking", "") && srv_add_str(b, "signature", "")
                         : srv_add_str(b, "type", "text") && srv_add_str(b, "text", ""));
    w->open = kind;
    w->index++;
    return srv_text_cat(out, event("content_block_start", d, ok));
}

static char *text_delta(anth_writer *w, int kind, const char *s, size_t n) {
    cJSON *d = typed("content_block_delta"), *delta = NULL;
    bool ok = d && cJSON_AddNumberToObject(d, "index", w->index - 1) && (delta = cJSON_AddObjectToObject(d, "delta")) &&
              srv_add_str(delta, "type", kind == 1 ? "thinking_delta" : "text_delta") &&
              srv_put_text(delta, kind == 1 ? "thinking" : "text", s, n);
    return event("content_block_delta", d, ok);
}

static char *delta(void *st, const char *reasoning, size_t n_reasoning, const char *content, size_t n_content,
                   const srv_logprob *lp, int32_t n_lp) {
    (void)lp, (void)n_lp;
    anth_writer *w = st;
    char *out = strdup("");
    /* one call per statement: the block's start changes the index its deltas carry */
    if (n_reasoning) {
        out = srv_text_cat(out, block_start(w, 1));
        out = srv_text_cat(out, text_delta(w, 1, reasoning, n_reasoning));
    }
    if (n_content) {
        out = srv_text_cat(out, block_start(w, 2));
        out = srv_text_cat(out, text_delta(w, 2, content, n_content));
    }
    return out;
}

static char *end(void *st, const srv_dialect_end *d) {
    anth_writer *w = st;
    char *out = block_stop(w);
    /* an answer with nothing at all still has its (empty) text block, as the whole Message does */
    if (w->index == 0 && d->reply->calls.n == 0) {
        out = srv_text_cat(out, block_start(w, 2));
        out = srv_text_cat(out, block_stop(w));
    }
    for (int32_t k = 0; k < d->reply->calls.n; k++) {
        const srv_tool_call *c = &d->reply->calls.calls[k];
        cJSON *s = typed("content_block_start"), *b = tool_use_block(c, true);
        bool ok = s && b && cJSON_AddNumberToObject(s, "index", w->index) && cJSON_AddItemToObject(s, "content_block", b);
        if (!ok && b && (!s || !cJSON_GetObjectItem(s, "content_block"))) cJSON_Delete(b);
        out = srv_text_cat(out, event("content_block_start", s, ok));
        cJSON *dd = typed("content_block_delta"), *delta_ = NULL;
        ok = dd && cJSON_AddNumberToObject(dd, "index", w->index) && (delta_ = cJSON_AddObjectToObject(dd, "delta")) &&
             srv_add_str(delta_, "type", "input_json_delta") && srv_add_str(delta_, "partial_json", c->arguments ? c->arguments : "{}");
        out = srv_text_cat(out, event("content_block_delta", dd, ok));
        cJSON *stop = typed("content_block_stop");
        out = srv_text_cat(out, event("content_block_stop", stop, stop && cJSON_AddNumberToObject(stop, "index", w->index)));
        w->index++;
    }
    cJSON *md = typed("message_delta"), *dl = NULL, *usage = NULL;
    bool ok = md && (dl = cJSON_AddObjectToObject(md, "delta")) && srv_add_str(dl, "stop_reason", stop_reason(d)) &&
              (d->stop_word && d->reply->calls.n == 0 && d->finish == NC_FINISH_STOP
                   ? srv_add_str(dl, "stop_sequence", d->stop_word) : cJSON_AddNullToObject(dl, "stop_sequence") != NULL) &&
              (usage = cJSON_AddObjectToObject(md, "usage")) && put_usage(usage, d->usage, true);
    out = srv_text_cat(out, event("message_delta", md, ok));
    cJSON *ms = typed("message_stop");
    return srv_text_cat(out, event("message_stop", ms, ms != NULL));
}

/* Anthropic's error types by HTTP status. */
static const char *error_type(int status) {
    switch (status) {
    case 400: case 405: case 409: case 415: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static cJSON *error_object(const srv_error *e) {
    cJSON *root = typed("error"), *err = NULL;
    bool ok = root && (err = cJSON_AddObjectToObject(root, "error")) && srv_add_str(err, "type", error_type(e->status)) &&
              srv_add_str(err, "message", e->message);
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

char *srv_anthropic_error(const srv_error *e) {
    cJSON *root = error_object(e);
    return srv_json_print(root, root != NULL);
}

static char *stream_error(void *st, const srv_error *e) {
    (void)st;
    cJSON *root = error_object(e);
    return event("error", root, root != NULL);
}

char *srv_anthropic_count(int64_t input_tokens) {
    cJSON *root = cJSON_CreateObject();
    return srv_json_print(root, root && cJSON_AddNumberToObject(root, "input_tokens", (double)input_tokens));
}

const srv_dialect srv_anthropic = {.whole = whole, .begin = begin, .delta = delta, .end = end, .error = stream_error,
                                   .error_body = srv_anthropic_error, .free = writer_free};
