/* A Hugging Face directory's config.json as hyper-parameters, in both styles transformers writes:
 * version 4 (rope_theta, rope_scaling, partial_rotary_factor, sliding_window_pattern, ...) and
 * version 5 (rope_parameters, per layer type or not, and layer_types). The tensors are then bound
 * by the shared binder under transformers' names (arch.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/hf_dir.h"
#include "model/bind.h"

typedef struct hf_reader {
    binder *b;
    const cJSON *cfg;
} hf_reader;

static const cJSON *item(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A number field: 1 found, 0 absent (or null), -1 wrong type. */
static int number(hf_reader *r, const cJSON *obj, const char *key, double *out) {
    const cJSON *v = item(obj, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return nc_fail(r->b->err, "%s/config.json: \"%s\" must be a number", r->b->path, key);
    *out = v->valuedouble;
    return 1;
}

static int num_or(hf_reader *r, const cJSON *obj, const char *key, double dflt, double *out) {
    *out = dflt;
    return number(r, obj, key, out) < 0 ? -1 : 0;
}

/* An integer field in 0..2^30. */
static int int_or(hf_reader *r, const char *key, bool required, int64_t dflt, int32_t *out) {
    double v;
    int got = number(r, r->cfg, key, &v);
    if (got < 0) return -1;
    if (got == 0) {
        if (required) return nc_fail(r->b->err, "%s/config.json: missing \"%s\"", r->b->path, key);
        *out = (int32_t)dflt;
        return 0;
    }
    if (v != floor(v) || v < 0 || v > (double)(1 << 30))
        return nc_fail(r->b->err, "%s/config.json: \"%s\" = %g is not an integer in 0..2^30", r->b->path, key, v);
    *out = (int32_t)v;
    return 0;
}

static const char *string(const cJSON *obj, const char *key) {
    const cJSON *v = item(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Per-frequency factors of LongRoPE (n_rot/2 numbers) as an owned array. */
static int factors(hf_reader *r, const cJSON *rope, const char *key, int n, const float **out) {
    const cJSON *a = item(rope, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return nc_fail(r->b->err, "%s/config.json: rope \"%s\" must be a list of %d numbers (rotary dimensions / 2)",
                       r->b->path, key, n);
    float *f = malloc((size_t)n * sizeof *f);
    void **list = f ? realloc(r->b->m->owned, (size_t)(r->b->m->n_owned + 1) * sizeof *list) : NULL;
    if (!list) {
        free(f);
        return nc_fail(r->b->err, "out of memory");
    }
    r->b->m->owned = list;
    list[r->b->m->n_owned++] = f;
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0))
            return nc_fail(r->b->err, "%s/config.json: rope \"%s\" holds a value that is not a positive number",
                           r->b->path, key);
        f[i++] = (float)x->valuedouble;
    }
    *out = f;
    return 0;
}

/* One rope description: {rope_theta, rope_type | type, factor, ...}; base: rope_theta when the
 * dictionary has none (version 4 keeps it beside rope_scaling). */
static int read_rope(hf_reader *r, const cJSON *d, double base, model_rope *out) {
    const model_hparams *hp = &r->b->m->hp;
    *out = (model_rope){.base = base, .kind = ROPE_DEFAULT};
    if (!d) return 0;
    if (!cJSON_IsObject(d)) return nc_fail(r->b->err, "%s/config.json: rope parameters must be an object", r->b->path);
    const char *type = string(d, "rope_type");
    if (!type) type = string(d, "type");
    if (!type) type = "default";
    double orig = 0, mpe = hp->n_ctx_train;
    if (num_or(r, d, "rope_theta", base, &out->base) || num_or(r, d, "factor", 0, &out->factor) ||
        num_or(r, r->cfg, "original_max_position_embeddings", 0, &orig) ||
        num_or(r, d, "original_max_position_embeddings", orig, &out->orig_ctx) ||
        num_or(r, d, "low_freq_factor", 1, &out->low_freq_factor) ||
        num_or(r, d, "high_freq_factor", 4, &out->high_freq_factor) ||
        num_or(r, d, "beta_fast", 32, &out->beta_fast) || num_or(r, d, "beta_slow", 1, &out->beta_slow) ||
        num_or(r, d, "attention_factor", 0, &out->attn_factor))
        return -1;
    const cJSON *trunc = item(d, "truncate");
    out->exact_range = cJSON_IsFalse(trunc);
    if (!strcmp(type, "default")) return 0;
    if (!strcmp(type, "linear")) out->kind = ROPE_LINEAR;
    else if (!strcmp(type, "llama3")) out->kind = ROPE_LLAMA3;
    else if (!strcmp(type, "yarn")) out->kind = ROPE_YARN;
    else if (!strcmp(type, "longrope") || !strcmp(type, "su")) out->kind = ROPE_LONGROPE;
    else
        return nc_fail(r->b->err, "%s/config.json: rope type \"%s\" is not supported (default, linear, llama3, yarn, longrope)",
                       r->b->path, type);
    if (out->kind == ROPE_YARN && out->factor == 0 && out->orig_ctx > 0) out->factor = mpe / out->orig_ctx;
    if (out->kind == ROPE_LONGROPE) {
        if (out->factor == 0 && out->orig_ctx > 0) out->factor = mpe / out->orig_ctx;
        int n = hp->n_rot / 2;
        if (factors(r, d, "short_factor", n, &out->freq_factors) || factors(r, d, "long_factor", n, &out->long_factors))
            return -1;
    } else if (!(out->factor > 0)) {
        return nc_fail(r->b->err, "%s/config.json: rope type \"%s\" needs a positive \"factor\"", r->b->path, type);
    }
    return 0;
}

/* Rotary embeddings: version 5's rope_parameters (one dictionary, or one per layer type), or
 * version 4's rope_theta / rope_scaling / rope_local_base_freq. Also the rotated dimensions. */
static int read_ropes(hf_reader *r, model_hparams *hp) {
    const cJSON *params = item(r->cfg, "rope_parameters"), *full = params, *sliding = params;
    if (params && !item(params, "rope_theta") && (item(params, "full_attention") || item(params, "sliding_attention"))) {
        full = item(params, "full_attention");
        sliding = item(params, "sliding_attention");
        if (!full) full = sliding;
        if (!sliding) sliding = full;
    }
    double base, prf = 1.0;
    if (num_or(r, r->cfg, "rope_theta", 10000.0, &base) || num_or(r, r->cfg, "partial_rotary_factor", 1.0, &prf) ||
        (full && num_or(r, full, "partial_rotary_factor", prf, &prf)))
        return -1;
    if (!(prf > 0 && prf <= 1))
        return nc_fail(r->b->err, "%s/config.json: partial_rotary_factor %g is outside (0, 1]", r->b->path, prf);
    hp->n_rot = (int32_t)(hp->head_dim * prf) / 2 * 2;
    if (!params) full = sliding = item(r->cfg, "rope_scaling");
    if (read_rope(r, full, base, &hp->rope[0])) return -1;
    double local;
    int got = params ? 0 : number(r, r->cfg, "rope_local_base_freq", &local); /* Gemma 3, version 4 */
    if (got < 0) return -1;
    r->b->own_swa_rope = got || sliding != full;
    if (got) hp->rope[1] = (model_rope){.base = local, .kind = ROPE_DEFAULT};
    else if (sliding == full) hp->rope[1] = hp->rope[0]; /* bind_model copies it again once factors are bound */
    else if (read_rope(r, sliding, base, &hp->rope[1])) return -1;
    hp->rope[0].n_rot = hp->rope[1].n_rot = hp->n_rot;
    return 0;
}

/* layer_types (version 5), else the architecture's pattern (Gemma: sliding_window_pattern), else
 * every layer when a window is set (Mistral). */
static int read_layers(hf_reader *r, int32_t window, bool *sliding, bool *rope) {
    const model_hparams *hp = &r->b->m->hp;
    const arch_desc *a = r->b->a;
    int n = hp->n_layer;
    const cJSON *types = item(r->cfg, "layer_types");
    if (types) {
        if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != n)
            return nc_fail(r->b->err, "%s/config.json: \"layer_types\" must list the %d layers", r->b->path, n);
        int i = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, types) {
            const char *s = cJSON_IsString(t) ? t->valuestring : "";
            if (strcmp(s, "sliding_attention") && strcmp(s, "full_attention"))
                return nc_fail(r->b->err, "%s/config.json: layer type \"%s\" is not supported (full_attention, sliding_attention)",
                               r->b->path, s);
            sliding[i++] = !strcmp(s, "sliding_attention");
        }
    } else {
        int32_t period;
        if (int_or(r, "sliding_window_pattern", false, a->swa_period, &period)) return -1;
        const cJSON *use = item(r->cfg, "use_sliding_window");
        bool all = !a->swa_period && window > 0 && !cJSON_IsFalse(use);
        for (int il = 0; il < n; il++) sliding[il] = all || (period > 0 && (il + 1) % period != 0);
    }
    /* SmolLM3: no_rope_layers[il] is 1 where the layer rotates */
    const cJSON *nr = item(r->cfg, "no_rope_layers");
    if (nr) {
        if (!cJSON_IsArray(nr) || cJSON_GetArraySize(nr) != n)
            return nc_fail(r->b->err, "%s/config.json: \"no_rope_layers\" must list the %d layers", r->b->path, n);
        int i = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, nr) rope[i++] = !cJSON_IsNumber(x) || x->valuedouble != 0;
    } else {
        int32_t every;
        if (int_or(r, "no_rope_layer_interval", false, a->no_rope_period, &every)) return -1;
        for (int il = 0; il < n; il++) rope[il] = !(every > 0 && (il + 1) % every == 0);
    }
    return 0;
}

/* The activation config.json names must be the one the architecture computes. */
static int check_activation(hf_reader *r) {
    const char *act = string(r->cfg, "hidden_activation");
    if (!act) act = string(r->cfg, "hidden_act");
    if (!act) return 0;
    arch_act want = r->b->a->act;
    bool ok = want == ACT_SWIGLU_OAI || (want == ACT_SILU && (!strcmp(act, "silu") || !strcmp(act, "swish"))) ||
              (want == ACT_GELU_TANH && (!strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_tanh")));
    if (ok) return 0;
    return nc_fail(r->b->err, "%s/config.json: activation \"%s\" is not what a %s model computes with (%s)", r->b->path,
                   act, r->b->a->name, want == ACT_SILU ? "silu" : "gelu_pytorch_tanh");
}

static int read_hparams(hf_reader *r, bool *sliding, bool *rope) {
    model_hparams *hp = &r->b->m->hp;
    const arch_desc *a = r->b->a;
    int32_t window = 0, dense_ff;
    double v;
    if (int_or(r, "hidden_size", true, 0, &hp->n_embd) || int_or(r, "num_hidden_layers", true, 0, &hp->n_layer) ||
        int_or(r, "num_attention_heads", true, 0, &hp->n_head) ||
        int_or(r, "num_key_value_heads", false, hp->n_head, &hp->n_head_kv) ||
        int_or(r, "intermediate_size", false, 0, &dense_ff) ||
        int_or(r, "max_position_embeddings", false, 2048, &hp->n_ctx_train) ||
        int_or(r, "head_dim", false, hp->n_head ? hp->n_embd / hp->n_head : 0, &hp->head_dim) ||
        int_or(r, "num_local_experts", false, 0, &hp->n_expert) ||
        int_or(r, "num_experts", false, hp->n_expert, &hp->n_expert) ||
        int_or(r, "num_experts_per_tok", false, 0, &hp->n_expert_used) ||
        int_or(r, "moe_intermediate_size", false, dense_ff, &hp->n_ff_exp) ||
        int_or(r, "sliding_window", false, 0, &window) || check_activation(r))
        return -1;
    if (hp->n_layer <= 0 || hp->n_layer > 4096)
        return nc_fail(r->b->err, "%s/config.json: num_hidden_layers %d is outside 1..4096", r->b->path, hp->n_layer);
    hp->n_ff = dense_ff;
    if (num_or(r, r->cfg, "rms_norm_eps", 1e-6, &v)) return -1;
    hp->norm_eps = (float)v;
    if (num_or(r, r->cfg, "attention_multiplier", 0, &v)) return -1;
    hp->attn_scale = (float)v;
    if (number(r, r->cfg, "query_pre_attn_scalar", &v) < 0) return -1;
    if (item(r->cfg, "query_pre_attn_scalar")) {
        if (!(v > 0)) return nc_fail(r->b->err, "%s/config.json: query_pre_attn_scalar must be positive", r->b->path);
        hp->attn_scale = (float)(1.0 / sqrt(v));
    }
    if (num_or(r, r->cfg, "attn_logit_softcapping", 0, &v)) return -1;
    hp->attn_softcap = (float)v;
    if (num_or(r, r->cfg, "final_logit_softcapping", 0, &v)) return -1;
    hp->final_softcap = (float)v;
    if (num_or(r, r->cfg, "embedding_multiplier", 1, &v)) return -1;
    hp->embd_scale = (float)v;
    if (num_or(r, r->cfg, "residual_multiplier", 1, &v)) return -1;
    hp->residual_scale = (float)v;
    if (num_or(r, r->cfg, "logits_scaling", 1, &v)) return -1;
    if (!(v > 0)) return nc_fail(r->b->err, "%s/config.json: logits_scaling must be positive", r->b->path);
    hp->logit_scale = (float)(1.0 / v);
    const cJSON *norm = item(r->cfg, "norm_topk_prob");
    hp->expert_norm = !cJSON_IsFalse(norm);
    hp->gate_up = a->hf_gate_up;
    hp->rope_neox = true; /* transformers' rotate_half */
    if (read_ropes(r, hp) || read_layers(r, window, sliding, rope)) return -1;
    bool any = false;
    for (int il = 0; il < hp->n_layer; il++) any = any || sliding[il];
    hp->swa_window = any ? window : 0;
    if (any && window <= 0)
        return nc_fail(r->b->err, "%s/config.json: sliding layers need a positive \"sliding_window\"", r->b->path);
    return 0;
}

int model_bind_hf(model **out, hf_dir *dir, nc_err *err) {
    *out = NULL;
    const cJSON *cfg = hf_dir_config(dir);
    const char *path = hf_dir_path(dir), *type = string(cfg, "model_type");
    if (!type) return nc_fail(err, "%s/config.json: missing \"model_type\"", path);
    const arch_desc *a = arch_by_hf_type(type);
    if (!a) {
        if (item(cfg, "text_config"))
            return nc_fail(err, "%s/config.json: model_type \"%s\" wraps a text model with other modalities, which is "
                                "not supported; supported: %s", path, type, arch_hf_list());
        return nc_fail(err, "%s/config.json: model_type \"%s\" is not supported; supported: %s (the families read from "
                            "GGUF files only, %s, load once llama.cpp's convert_hf_to_gguf.py has converted the directory)",
                       path, type, arch_hf_list(), arch_gguf_only_list());
    }
    model *m = calloc(1, sizeof *m);
    if (!m) return nc_fail(err, "out of memory");
    binder b = {.m = m, .a = a, .src = dir, .tensors = dir, .lookup = (bind_lookup)hf_dir_find_tensor, .hf_names = true,
                .path = path, .err = err};
    hf_reader r = {.b = &b, .cfg = cfg};
    bool *sliding = NULL, *rope = NULL;
    int32_t n;
    if (int_or(&r, "num_hidden_layers", true, 0, &n)) goto fail;
    sliding = calloc((size_t)n + 1, sizeof *sliding);
    rope = calloc((size_t)n + 1, sizeof *rope);
    if (!sliding || !rope) { nc_fail(err, "out of memory"); goto fail; }
    if (read_hparams(&r, sliding, rope)) goto fail;
    b.sliding = sliding;
    b.rope = rope;
    if (bind_model(&b)) goto fail;
    const char *slash = strrchr(path, '/');
    snprintf(m->name, sizeof m->name, "%s", slash && slash[1] ? slash + 1 : path);
    free(sliding);
    free(rope);
    m->hf = dir;
    m->file_bytes = hf_dir_file_bytes(dir);
    m->source = dir;
    m->close = (void (*)(void *))hf_dir_close;
    *out = m;
    return 0;
fail:
    free(sliding);
    free(rope);
    model_free(m);
    return -1;
}
