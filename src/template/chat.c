/* Chat rendering as transformers' apply_chat_template does it, and the ChatML fallback. */
#include <string.h>

#include "template/internal.h"

/* ChatML, for models without a template. Content may be a string or a list of parts, of which
 * the text parts are used. */
static const char chatml_source[] =
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}\n"
    "{%- if message['content'] is string -%}\n"
    "{{- message['content'] -}}\n"
    "{%- else -%}\n"
    "{%- for part in message['content'] if part['type'] == 'text' -%}{{- part['text'] -}}{%- endfor -%}\n"
    "{%- endif -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n";

const char *tmpl_chatml_source(void) { return chatml_source; }

static int set_string(tmpl_value *ctx, const char *key, const char *s, nc_err *err) {
    if (!s) return 0;
    tmpl_value *v = tmpl_value_new_string(s, strlen(s));
    if (tmpl_value_dict_set(ctx, key, v)) return nc_fail(err, "out of memory");
    return 0;
}

/* The variables of a chat render; NULL with err set on bad input. */
static tmpl_value *chat_context(const char *messages_json, bool add_generation_prompt, const char *bos_token,
                                const char *eos_token, const char *extra_json, nc_err *err) {
    if (!messages_json) {
        nc_fail(err, "no messages");
        return NULL;
    }
    tmpl_value *messages = tmpl_value_from_json(messages_json, strlen(messages_json), err);
    if (!messages) {
        nc_fail_prefix(err, "messages");
        return NULL;
    }
    if (messages->type != TV_LIST) {
        tmpl_value_free(messages);
        nc_fail(err, "messages must be a JSON array");
        return NULL;
    }
    tmpl_value *ctx = tmpl_value_new_dict(), *extra = NULL;
    if (!ctx || tmpl_value_dict_set(ctx, "messages", messages) ||
        tmpl_value_dict_set(ctx, "add_generation_prompt", tmpl_value_new_bool(add_generation_prompt)) ||
        tmpl_value_dict_set(ctx, "tools", tmpl_value_new_none()) ||
        tmpl_value_dict_set(ctx, "documents", tmpl_value_new_none())) {
        if (!ctx) tmpl_value_free(messages);
        tmpl_value_free(ctx);
        nc_fail(err, "out of memory");
        return NULL;
    }
    if (set_string(ctx, "bos_token", bos_token, err) || set_string(ctx, "eos_token", eos_token, err)) {
        tmpl_value_free(ctx);
        return NULL;
    }
    if (extra_json) {
        extra = tmpl_value_from_json(extra_json, strlen(extra_json), err);
        if (!extra || extra->type != TV_DICT) {
            if (extra) nc_fail(err, "the extra template variables must be a JSON object");
            else nc_fail_prefix(err, "extra template variables");
            tmpl_value_free(extra);
            tmpl_value_free(ctx);
            return NULL;
        }
        for (size_t i = 0; i < extra->u.dict.len; i++) { /* move each entry over */
            tv_entry *e = &extra->u.dict.ent[i];
            if (tv_dict_set(NULL, ctx, e->key, e->val)) {
                e->key = e->val = NULL;
                tmpl_value_free(extra);
                tmpl_value_free(ctx);
                nc_fail(err, "out of memory");
                return NULL;
            }
            e->key = e->val = NULL;
        }
        tmpl_value_free(extra);
    }
    return ctx;
}

int tmpl_render_chat_limits(const tmpl *t, const char *messages_json, bool add_generation_prompt,
                            const char *bos_token, const char *eos_token, const char *extra_json,
                            const tmpl_limits *lim, char **out, size_t *out_len, nc_err *err) {
    *out = NULL;
    tmpl_value *ctx = chat_context(messages_json, add_generation_prompt, bos_token, eos_token, extra_json, err);
    if (!ctx) return -1;
    int rc = lim ? tmpl_render_limits(t, ctx, lim, out, out_len, err) : tmpl_render(t, ctx, out, out_len, err);
    tmpl_value_free(ctx);
    return rc;
}

int tmpl_render_chat(const tmpl *t, const char *messages_json, bool add_generation_prompt, const char *bos_token,
                     const char *eos_token, const char *extra_json, char **out, size_t *out_len, nc_err *err) {
    return tmpl_render_chat_limits(t, messages_json, add_generation_prompt, bos_token, eos_token, extra_json, NULL,
                                   out, out_len, err);
}
