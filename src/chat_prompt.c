/* The public chat prompt (nc_chat_template in nucleus.h): the model's template, or ChatML, with
 * the vocabulary's BOS and EOS texts, rendered as transformers' apply_chat_template does. Kept out
 * of src/template, which stands alone without a model (tests build the template engine by itself). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "template/template.h"

struct nc_chat_template {
    const nc_model *m;
    tmpl *t;
    char *source;               /* the Jinja text of t */
    char *bos_text, *eos_text;  /* NULL when the vocabulary has none */
    atomic_bool cancel;         /* set by nc_chat_template_cancel: renders fail */
};

/* A token's text (control tokens as text), malloc'd; NULL for no token. */
static char *token_text(const nc_model *m, int32_t id) {
    int n = id >= 0 ? nc_token_piece(m, id, NULL, 0) : -1;
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s) return NULL;
    nc_token_piece(m, id, s, n);
    s[n] = 0;
    return s;
}

int nc_chat_template_new(nc_chat_template **out, const nc_model *m, char *note, size_t note_cap, nc_err *err) {
    *out = NULL;
    if (note_cap) note[0] = 0;
    nc_chat_template *ct = calloc(1, sizeof *ct);
    if (!ct) return nc_fail(err, "out of memory");
    ct->m = m;
    size_t len = 0;
    const char *src = nc_model_meta_str(m, "tokenizer.chat_template", &len);
    nc_err perr;
    if (!src) snprintf(note, note_cap, "the model has no chat template: chats use ChatML");
    else if (tmpl_parse(&ct->t, src, len, &perr))
        snprintf(note, note_cap, "the model's chat template cannot be used (%s); chats use ChatML", perr.msg);
    else ct->source = strndup(src, len);
    const char *chatml = tmpl_chatml_source();
    if (!ct->t && tmpl_parse(&ct->t, chatml, strlen(chatml), err)) {
        nc_chat_template_free(ct);
        return -1;
    }
    if (!ct->source) ct->source = strdup(chatml);
    if (!ct->source) {
        nc_chat_template_free(ct);
        return nc_fail(err, "out of memory");
    }
    ct->bos_text = token_text(m, nc_token_bos(m));
    ct->eos_text = token_text(m, nc_token_eos(m));
    *out = ct;
    return 0;
}

int nc_chat_template_from_source(nc_chat_template **out, const nc_model *m, const char *src, size_t len, nc_err *err) {
    *out = NULL;
    nc_chat_template *ct = calloc(1, sizeof *ct);
    if (!ct) return nc_fail(err, "out of memory");
    ct->m = m;
    if (tmpl_parse(&ct->t, src, len, err)) { /* no ChatML fallback: the caller asked for this one */
        nc_chat_template_free(ct);
        return -1;
    }
    if (!(ct->source = strndup(src, len))) {
        nc_chat_template_free(ct);
        return nc_fail(err, "out of memory");
    }
    ct->bos_text = token_text(m, nc_token_bos(m));
    ct->eos_text = token_text(m, nc_token_eos(m));
    *out = ct;
    return 0;
}

void nc_chat_template_free(nc_chat_template *ct) {
    if (!ct) return;
    tmpl_free(ct->t);
    free(ct->source);
    free(ct->bos_text);
    free(ct->eos_text);
    free(ct);
}

void nc_chat_template_cancel(nc_chat_template *ct) { atomic_store(&ct->cancel, true); }

const char *nc_chat_template_source(const nc_chat_template *ct) { return ct->source; }

int nc_chat_render(const nc_chat_template *ct, const char *messages_json, const char *extra_json,
                   bool add_generation_prompt, char **text, size_t *len, bool *add_bos, nc_err *err) {
    return nc_chat_render_watched(ct, messages_json, extra_json, add_generation_prompt, NULL, NULL, text, len, add_bos,
                                  err);
}

int nc_chat_render_watched(const nc_chat_template *ct, const char *messages_json, const char *extra_json,
                           bool add_generation_prompt, bool (*gone)(void *user), void *user, char **text,
                           size_t *len, bool *add_bos, nc_err *err) {
    tmpl_limits lim;
    tmpl_limits_default(&lim);
    lim.cancel = &ct->cancel;
    lim.gone = gone;
    lim.gone_user = user;
    if (tmpl_render_chat_limits(ct->t, messages_json, add_generation_prompt, ct->bos_text, ct->eos_text, extra_json, &lim,
                                text, len, err))
        return -1;
    *add_bos = nc_vocab_adds_bos(ct->m) && !(ct->bos_text && !strncmp(*text, ct->bos_text, strlen(ct->bos_text)));
    return 0;
}
