/* The JSON files a Hugging Face directory keeps beside its tokenizer, and what they say about
 * special tokens: tokenizer_config.json (bos_token / eos_token, add_bos_token / add_eos_token),
 * config.json (bos_token_id / eos_token_id, vocab_size), generation_config.json (eos_token_id:
 * every listed id ends generation) and added_tokens.json. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/hf_dir.h"
#include "vocab/vocab_impl.h"

int hf_side_load(hf_side *s, const char *dir, nc_err *err) {
    *s = (hf_side){0};
    if (!(s->dir = strdup(dir))) return nc_fail(err, "%s: out of memory", dir);
    if (hf_read_json(dir, "tokenizer_config.json", true, &s->tok_config, err) < 0 ||
        hf_read_json(dir, "config.json", true, &s->config, err) < 0 ||
        hf_read_json(dir, "generation_config.json", true, &s->gen_config, err) < 0 ||
        hf_read_json(dir, "added_tokens.json", true, &s->added, err) < 0) {
        hf_side_free(s);
        return -1;
    }
    return 0;
}

int hf_side_load_beside(hf_side *s, const char *file_path, nc_err *err) {
    const char *slash = strrchr(file_path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == file_path) snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - file_path) < sizeof dir)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - file_path), file_path);
    else return nc_fail(err, "%s: path too long", file_path);
    return hf_side_load(s, dir, err);
}

void hf_side_free(hf_side *s) {
    cJSON_Delete(s->tok_config);
    cJSON_Delete(s->config);
    cJSON_Delete(s->gen_config);
    cJSON_Delete(s->added);
    free(s->dir);
    *s = (hf_side){0};
}

/* ---- special ids ------------------------------------------------------------------------------ */

/* bos_token / eos_token: a string or an object with "content". */
static const char *config_token(const cJSON *cfg, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(x)) return x->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(x, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

static int32_t id_of_text(const vocab *v, const char *s) { return s ? vocab_find(v, s, strlen(s)) : -1; }

/* A token id of v: a whole number in [0, n_tokens), else -1. */
static int32_t json_token_id(const vocab *v, const cJSON *x) {
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0) || x->valuedouble >= v->n_tokens ||
        x->valuedouble != (double)(int32_t)x->valuedouble)
        return -1;
    return (int32_t)x->valuedouble;
}

static int32_t config_id(const vocab *v, const cJSON *cfg, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsArray(x)) x = cJSON_GetArrayItem(x, 0);
    return json_token_id(v, x);
}

int32_t hf_side_token_id(const vocab *v, const hf_side *s, const char *kind) {
    char key[32];
    snprintf(key, sizeof key, "%s_token", kind);
    int32_t id = id_of_text(v, config_token(s->tok_config, key));
    snprintf(key, sizeof key, "%s_token_id", kind);
    return id >= 0 ? id : config_id(v, s->config, key);
}

void hf_side_special_ids(vocab *v, const hf_side *s) {
    if (!s) return;
    if (v->bos < 0) v->bos = hf_side_token_id(v, s, "bos");
    if (v->eos < 0) v->eos = hf_side_token_id(v, s, "eos");
}

int hf_side_add_flags(vocab *v, const hf_side *s, nc_err *err) {
    if (!s) return 0;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(s->tok_config, "add_bos_token");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s->tok_config, "add_eos_token");
    if (cJSON_IsBool(b)) v->add_bos = cJSON_IsTrue(b);
    if (cJSON_IsBool(e)) v->add_eos = cJSON_IsTrue(e);
    if (v->add_bos && v->bos < 0)
        return nc_fail(err, "%s/tokenizer_config.json: add_bos_token is true but the vocabulary has no BOS token "
                            "(bos_token, config.json's bos_token_id)",
                       s->dir);
    if (v->add_eos && v->eos < 0)
        return nc_fail(err, "%s/tokenizer_config.json: add_eos_token is true but the vocabulary has no EOS token "
                            "(eos_token, config.json's eos_token_id)",
                       s->dir);
    return 0;
}

static int mark_eog_id(vocab *v, const cJSON *x, const char *dir, const char *file, nc_err *err) {
    int32_t id = json_token_id(v, x);
    if (id < 0) {
        char *text = cJSON_PrintUnformatted(x);
        int rc = nc_fail(err, "%s/%s: eos_token_id %.40s is not a token id of the vocabulary (%d tokens)", dir, file,
                         text ? text : "?", v->n_tokens);
        free(text);
        return rc;
    }
    v->tok[id].flags |= VTOK_EOG;
    if (v->eos < 0) v->eos = id;
    return 0;
}

int hf_side_eog(vocab *v, const hf_side *s, nc_err *err) {
    if (!s) return 0;
    const char *file = "generation_config.json";
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s->gen_config, "eos_token_id");
    if (!x || cJSON_IsNull(x)) {
        file = "config.json";
        x = cJSON_GetObjectItemCaseSensitive(s->config, "eos_token_id");
    }
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsArray(x)) return mark_eog_id(v, x, s->dir, file, err);
    const cJSON *e;
    cJSON_ArrayForEach(e, x) {
        if (mark_eog_id(v, e, s->dir, file, err)) return -1;
    }
    return 0;
}

int hf_side_vocab_size(const hf_side *s, int32_t *n, nc_err *err) {
    static const char *const keys[] = {"vocab_size_per_layer_input", "vocab_size"};
    *n = 0;
    if (!s || !s->config) return 0;
    const cJSON *x = NULL;
    const char *key = NULL;
    for (size_t i = 0; i < 2 && (!x || cJSON_IsNull(x)); i++)
        x = cJSON_GetObjectItemCaseSensitive(s->config, key = keys[i]);
    if (!x || cJSON_IsNull(x)) {
        x = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s->config, "text_config"), "vocab_size");
        key = "text_config.vocab_size";
    }
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 1) || x->valuedouble > INT32_MAX / 2 ||
        x->valuedouble != (double)(int32_t)x->valuedouble)
        return nc_fail(err, "%s/config.json: %s is not a positive whole number", s->dir, key);
    *n = (int32_t)x->valuedouble;
    return 0;
}
