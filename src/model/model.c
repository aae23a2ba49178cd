/* Binding a model's tensors (see model.h): the parts shared by both formats, and GGUF's
 * hyper-parameters. The Hugging Face directory's config.json is read in model_hf.c. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/safetensors.h"
#include "model/bind.h"
#include "tensor/quant.h"

const char *model_arch_name(const model *m) { return m->hp.arch->name; }

/* ---- tensors ------------------------------------------------------------------------------ */

const fmt_tensor *bind_find(binder *b, tensor_role r, int il, int e, char name[BIND_NAME_MAX]) {
    const char *pat = b->hf_names ? arch_hf_name(b->a, r) : arch_gguf_name(b->a, r);
    name[0] = 0;
    if (!pat) return NULL;
    snprintf(name, BIND_NAME_MAX, pat, il, e); /* a pattern uses none, one or both numbers */
    return b->lookup(b->tensors, name);
}

int bind_missing(binder *b, const char *name) {
    return nc_fail(b->err, "%s: missing tensor '%s' (a %s model needs it)", b->path, name, b->a->name);
}

static void shape_str(const fmt_tensor *t, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < t->n_dims && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%llu", d ? ", " : "", (unsigned long long)t->ne[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* ne[] must be exactly want[0..n) (then ones). */
static int check_shape(binder *b, const fmt_tensor *t, int n, const int64_t *want) {
    bool ok = true;
    for (int d = 0; d < 4; d++) ok = ok && t->ne[d] == (uint64_t)(d < n ? want[d] : 1);
    if (ok) return 0;
    char have[96], exp[96];
    shape_str(t, have, sizeof have);
    size_t k = (size_t)snprintf(exp, sizeof exp, "[");
    for (int d = 0; d < n && k < sizeof exp; d++) k += (size_t)snprintf(exp + k, sizeof exp - k, "%s%lld", d ? ", " : "", (long long)want[d]);
    if (k < sizeof exp) snprintf(exp + k, sizeof exp - k, "]");
    return nc_fail(b->err, "%s: tensor '%s' (%s at offset %llu) has shape %s, expected %s (%s order: row length first)",
                   b->path, t->name, b->hf_names ? "header entry" : "table entry", (unsigned long long)t->info_offset,
                   have, exp, b->hf_names ? "reversed safetensors" : "ggml");
}

static int check_type(binder *b, const fmt_tensor *t) {
    if (quant_type_supported(t->type)) return 0;
    char buf[24];
    return nc_fail(b->err, "%s: tensor '%s' (offset %llu) has type %s, which nucleus cannot compute with; supported: %s",
                   b->path, t->name, (unsigned long long)t->info_offset, st_type_name(t->type, buf),
                   quant_supported_names());
}

static void account(binder *b, const fmt_tensor *t) {
    b->m->n_params += t->n_elems;
    b->m->weight_bytes += t->n_bytes;
}

void *bind_own(binder *b, size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    void **list = p ? realloc(b->m->owned, (size_t)(b->m->n_owned + 1) * sizeof *list) : NULL;
    if (!list) {
        free(p);
        nc_fail(b->err, "out of memory binding the model");
        return NULL;
    }
    b->m->owned = list;
    list[b->m->n_owned++] = p;
    return p;
}

static void set_weight(model_weight *w, const fmt_tensor *t, const void *data, int64_t cols, int64_t rows) {
    w->name = t->name;
    w->data = data;
    w->type = t->type;
    w->rows = (int32_t)rows;
    w->cols = (int32_t)cols;
    w->row_bytes = quant_row_bytes(t->type, cols);
    w->transposed = false;
}

int bind_matrix(binder *b, tensor_role r, int il, int64_t cols, int64_t rows, bool required, model_weight *w) {
    char name[BIND_NAME_MAX];
    const fmt_tensor *t = bind_find(b, r, il, 0, name);
    memset(w, 0, sizeof *w);
    if (!t) return required ? bind_missing(b, name[0] ? name : arch_gguf_name(b->a, r)) : 0;
    if (check_shape(b, t, 2, (int64_t[]){cols, rows}) || check_type(b, t)) return -1;
    account(b, t);
    set_weight(w, t, t->data, cols, rows);
    return 0;
}

static bool is_norm(tensor_role r) {
    return r == T_OUTPUT_NORM || r == L_ATTN_NORM || r == L_ATTN_POST_NORM || r == L_FFN_NORM ||
           r == L_FFN_POST_NORM || r == L_Q_NORM || r == L_K_NORM;
}

/* 1-D and small 2-D tensors (norms, biases, sinks, rope factors) become f32 copies, so the
 * forward pass reads plain floats whatever the file stores. Hugging Face's Gemma norms hold w
 * where the model computes with 1 + w (llama.cpp's converter stores 1 + w): added here. */
int bind_floats(binder *b, tensor_role r, int il, int n_dims, const int64_t *shape, bool required, const float **out) {
    char name[BIND_NAME_MAX];
    const fmt_tensor *t = bind_find(b, r, il, 0, name);
    *out = NULL;
    if (!t) return required ? bind_missing(b, name[0] ? name : arch_gguf_name(b->a, r)) : 0;
    if (check_shape(b, t, n_dims, shape) || check_type(b, t)) return -1;
    account(b, t);
    float *copy = bind_own(b, (size_t)t->n_elems * sizeof(float));
    if (!copy) return -1;
    int64_t row = (int64_t)t->ne[0];
    for (uint64_t i = 0; i < t->n_elems; i += (uint64_t)row)
        quant_dequantize_row(t->type, (const uint8_t *)t->data + i / (uint64_t)row * quant_row_bytes(t->type, row),
                             copy + i, row);
    if (b->hf_names && b->a->hf_norm_plus_one && is_norm(r))
        for (uint64_t i = 0; i < t->n_elems; i++) copy[i] += 1.0f;
    *out = copy;
    return 0;
}

int bind_vector(binder *b, tensor_role r, int il, int64_t n, bool required, const float **out) {
    return bind_floats(b, r, il, 1, (int64_t[]){n}, required, out);
}

/* n_expert weights of rows x cols: one 3-D tensor (ggml order [cols, rows, n_expert], or
 * [rows, cols, n_expert] when the checkpoint stores them transposed), or one 2-D tensor per
 * expert when the name pattern numbers them. Returns 1 when bound, 0 when absent. */
/* gpt-oss as released: each 3-D expert tensor as MXFP4 (OCP MX v1.0) in "<name>_blocks" (U8,
 * [n][rows][cols / 32][16]) and "<name>_scales" (U8, [n][rows][cols / 32], E8M0), rows being
 * outputs. transformers decodes element 2i of a block from the low nibble of byte i and 2i + 1
 * from the high one; GGUF's MXFP4 block, which the kernels read, puts its scale in front and holds
 * elements i and i + 16 in byte i. So these experts are repacked into that layout once, at load:
 * the one place nucleus copies weights (same size; the kernels need a block's scale beside its
 * nibbles). Returns 1 when bound, 0 when there are no blocks. */
static int bind_mxfp4_experts(binder *b, const char *name, int64_t cols, int64_t rows, model_weight *w) {
    char bn[BIND_NAME_MAX + 8], sn[BIND_NAME_MAX + 8];
    snprintf(bn, sizeof bn, "%s_blocks", name);
    snprintf(sn, sizeof sn, "%s_scales", name);
    const fmt_tensor *blocks = b->lookup(b->tensors, bn), *scales = b->lookup(b->tensors, sn);
    if (!blocks) return 0;
    if (!scales) return nc_fail(b->err, "%s: '%s' has no '%s' (MXFP4 needs both)", b->path, bn, sn);
    int64_t n = b->m->hp.n_expert, g = cols / 32;
    if (cols % 32) return nc_fail(b->err, "%s: '%s': MXFP4 rows of %lld are not whole blocks of 32", b->path, bn, (long long)cols);
    uint32_t u8 = st_dtype_type(ST_U8);
    const fmt_tensor *ts[2] = {blocks, scales};
    for (int k = 0; k < 2; k++)
        if (ts[k]->type != u8) {
            char buf[24];
            return nc_fail(b->err, "%s: tensor '%s' has type %s; MXFP4 blocks and scales are U8", b->path, ts[k]->name,
                           st_type_name(ts[k]->type, buf));
        }
    if (check_shape(b, blocks, 4, (int64_t[]){16, g, rows, n}) || check_shape(b, scales, 3, (int64_t[]){g, rows, n}))
        return -1;
    size_t nb = (size_t)(n * rows * g);
    block_MXFP4 *dst = bind_own(b, nb * sizeof *dst);
    if (!dst) return -1;
    const uint8_t *q = blocks->data, *e = scales->data;
    for (size_t i = 0; i < nb; i++, q += 16) {
        dst[i].e = e[i];
        for (int j = 0; j < 16; j++) {
            int lo = q[j / 2] >> (j % 2 * 4) & 15, hi = q[(j + 16) / 2] >> (j % 2 * 4) & 15;
            dst[i].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
    b->m->n_params += (uint64_t)(n * rows * cols);
    b->m->weight_bytes += blocks->n_bytes + scales->n_bytes;
    for (int64_t x = 0; x < n; x++)
        w[x] = (model_weight){.name = blocks->name, .data = dst + x * rows * g, .type = GGML_TYPE_MXFP4,
                              .rows = (int32_t)rows, .cols = (int32_t)cols,
                              .row_bytes = quant_row_bytes(GGML_TYPE_MXFP4, cols)};
    return 1;
}

int bind_experts(binder *b, tensor_role r, int il, int64_t cols, int64_t rows, bool transposed, model_weight **out) {
    int n = b->m->hp.n_expert;
    const char *pat = b->hf_names ? arch_hf_name(b->a, r) : arch_gguf_name(b->a, r);
    char name[BIND_NAME_MAX];
    *out = NULL;
    if (!pat) return 0;
    model_weight *w = bind_own(b, (size_t)n * sizeof *w);
    if (!w) return -1;
    bool per_expert = strstr(strstr(pat, "%d") + 2, "%d") != NULL;
    if (per_expert) {
        for (int e = 0; e < n; e++) {
            const fmt_tensor *t = bind_find(b, r, il, e, name);
            if (!t) {
                if (e == 0) return 0;
                return bind_missing(b, name);
            }
            if (check_shape(b, t, 2, (int64_t[]){cols, rows}) || check_type(b, t)) return -1;
            account(b, t);
            set_weight(&w[e], t, t->data, cols, rows);
        }
    } else {
        const fmt_tensor *t = bind_find(b, r, il, 0, name);
        if (!t) {
            int got = b->hf_names ? bind_mxfp4_experts(b, name, cols, rows, w) : 0;
            if (got > 0) *out = w;
            return got;
        }
        int64_t shape[3] = {transposed ? rows : cols, transposed ? cols : rows, n};
        if (check_shape(b, t, 3, shape) || check_type(b, t)) return -1;
        if (transposed && t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16 && t->type != GGML_TYPE_BF16)
            return nc_fail(b->err, "%s: tensor '%s' is stored [in][out] and quantised: not supported", b->path, t->name);
        account(b, t);
        size_t per = (size_t)(t->n_bytes / (uint64_t)n);
        for (int e = 0; e < n; e++) {
            set_weight(&w[e], t, (const uint8_t *)t->data + (size_t)e * per, cols, rows);
            if (transposed) {
                w[e].transposed = true;
                w[e].row_bytes = quant_row_bytes(t->type, rows);
            }
        }
    }
    *out = w;
    return 1;
}

int bind_stack(binder *b, tensor_role r, int il, int64_t cols, int64_t rows, int64_t n, model_weight **out) {
    char name[BIND_NAME_MAX];
    const fmt_tensor *t = bind_find(b, r, il, 0, name);
    *out = NULL;
    if (!t) return bind_missing(b, name[0] ? name : arch_gguf_name(b->a, r));
    if (check_shape(b, t, 3, (int64_t[]){cols, rows, n}) || check_type(b, t)) return -1;
    model_weight *w = bind_own(b, (size_t)n * sizeof *w);
    if (!w) return -1;
    account(b, t);
    size_t per = (size_t)(t->n_bytes / (uint64_t)n);
    for (int64_t i = 0; i < n; i++) set_weight(&w[i], t, (const uint8_t *)t->data + (size_t)i * per, cols, rows);
    *out = w;
    return 0;
}

/* ---- GGUF hyper-parameters ---------------------------------------------------------------- */

static int gguf_u32(binder *b, const char *suffix, bool required, int64_t dflt, int32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", b->a->gguf, suffix);
    uint32_t v;
    int r = gguf_get_uint32(b->src, key, &v, b->err);
    if (r < 0) return -1;
    if (r == 0) {
        if (required) return nc_fail(b->err, "%s: missing key '%s'", b->path, key);
        *out = (int32_t)dflt;
        return 0;
    }
    if (v > (1u << 30)) {
        const gguf_kv *kv = gguf_find_kv(b->src, key);
        return nc_fail(b->err, "%s: key '%s' (offset %llu) has value %u, above 2^30", b->path, key,
                       (unsigned long long)kv->offset, v);
    }
    *out = (int32_t)v;
    return 0;
}

/* A key that is one integer for every layer or an array of one per layer (Gemma 4's
 * feed_forward_length, LFM2's head_count_kv): its values into out[n_layer], and the largest. */
static int gguf_per_layer(binder *b, const char *suffix, bool required, int64_t dflt, int32_t *out, int32_t *max) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", b->a->gguf, suffix);
    const gguf_kv *kv = gguf_find_kv(b->src, key);
    int n = b->m->hp.n_layer;
    *max = 0;
    if (kv && kv->type == GGUF_T_ARRAY) {
        if (kv->v.arr.type > GGUF_T_INT32 || kv->v.arr.n != (uint64_t)n)
            return nc_fail(b->err, "%s: key '%s' (offset %llu) must be an integer or %d integers, one per layer (it holds "
                                   "%llu)", b->path, key, (unsigned long long)kv->offset, n, (unsigned long long)kv->v.arr.n);
        for (int il = 0; il < n; il++) {
            int64_t v = gguf_arr_int(kv, (uint64_t)il);
            if (v < 0 || v > (1 << 30))
                return nc_fail(b->err, "%s: key '%s' (offset %llu), layer %d: %lld is outside 0..2^30", b->path, key,
                               (unsigned long long)kv->offset, il, (long long)v);
            out[il] = (int32_t)v;
            *max = out[il] > *max ? out[il] : *max;
        }
        return 0;
    }
    int32_t v;
    if (gguf_u32(b, suffix, required, dflt, &v)) return -1;
    for (int il = 0; il < n; il++) out[il] = v;
    *max = v;
    return 0;
}

static int gguf_f64(binder *b, const char *suffix, double dflt, double *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", b->a->gguf, suffix);
    int r = gguf_get_float(b->src, key, out, b->err);
    if (r < 0) return -1;
    if (r == 0) *out = dflt;
    else if (!isfinite(*out)) return nc_fail(b->err, "%s: key '%s' is %g, not a finite number", b->path, key, *out);
    return 0;
}

static int gguf_f32(binder *b, const char *suffix, double dflt, float *out) {
    double v;
    if (gguf_f64(b, suffix, dflt, &v)) return -1;
    *out = (float)v;
    return 0;
}

static int gguf_bool(binder *b, const char *suffix, bool dflt, bool *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", b->a->gguf, suffix);
    *out = dflt;
    return gguf_get_bool(b->src, key, out, b->err) < 0 ? -1 : 0;
}

/* rope.scaling.* of the file: none, linear, yarn, longrope (Llama 3's scaling is the rope_freqs
 * tensor, bound later as per-frequency divisors). */
static int gguf_rope(binder *b, model_hparams *hp) {
    model_rope *r = &hp->rope[0];
    r->n_rot = hp->n_rot;
    if (gguf_f64(b, "rope.freq_base", 10000.0, &r->base)) return -1;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", b->a->gguf);
    gguf_str type = {"none", 4};
    if (gguf_get_str(b->src, key, &type, b->err) < 0) return -1;
    double linear, log_mul;
    if (gguf_f64(b, "rope.scale_linear", 0, &linear) || gguf_f64(b, "rope.scaling.factor", linear, &r->factor) ||
        gguf_f64(b, "rope.scaling.original_context_length", hp->n_ctx_train, &r->orig_ctx) ||
        gguf_f64(b, "rope.scaling.yarn_beta_fast", 32, &r->beta_fast) ||
        gguf_f64(b, "rope.scaling.yarn_beta_slow", 1, &r->beta_slow) ||
        gguf_f64(b, "rope.scaling.attn_factor", 0, &r->attn_factor) ||
        gguf_f64(b, "rope.scaling.yarn_log_multiplier", 0, &log_mul))
        return -1;
    r->exact_range = b->a->yarn_exact_range;
    if (gguf_str_eq(type, "none")) r->kind = linear > 1 ? ROPE_LINEAR : ROPE_DEFAULT;
    else if (gguf_str_eq(type, "linear")) r->kind = ROPE_LINEAR;
    else if (gguf_str_eq(type, "yarn")) r->kind = ROPE_YARN;
    else if (gguf_str_eq(type, "longrope")) r->kind = ROPE_LONGROPE;
    else
        return nc_fail(b->err, "%s: key '%s' = '%.*s': rope scaling of this type is not supported (none, linear, yarn, longrope)",
                       b->path, key, (int)(type.len > 32 ? 32 : type.len), type.data);
    if (r->kind != ROPE_DEFAULT && r->kind != ROPE_LONGROPE && !(r->factor > 0))
        return nc_fail(b->err, "%s: rope scaling '%.*s' needs a positive %s.rope.scaling.factor", b->path,
                       (int)type.len, type.data, b->a->gguf);
    /* YaRN's magnitude with a yarn_log_multiplier m (DeepSeek-V3, Mistral 3: mscale 1 and
     * mscale_all_dim m): mscale(factor, 1) / mscale(factor, m), mscale(s, k) = 1 + 0.1 k ln s; the
     * file stores DeepSeek's m times 0.1. Its attention scale is then mscale(factor, m)^2 / sqrt(head
     * size), set with the layers. */
    b->mscale = 1;
    if (r->kind == ROPE_YARN && log_mul != 0 && r->attn_factor == 0 && r->factor > 1) {
        double m = b->a->yarn_log_mul_tenth ? log_mul / 0.1 : log_mul;
        r->attn_factor = (1 + 0.1 * log(r->factor)) / (1 + 0.1 * m * log(r->factor));
        b->mscale = 1 + 0.1 * m * log(r->factor);
    }
    /* sliding layers: their own base (and rotated dims) when the file gives one (Gemma 3, 4), unscaled */
    hp->rope[1] = *r;
    double swa_base;
    if (gguf_f64(b, "rope.freq_base_swa", 0, &swa_base)) return -1;
    if (swa_base > 0) {
        hp->rope[1] = (model_rope){.n_rot = b->n_rot_swa, .base = swa_base, .kind = ROPE_DEFAULT};
        b->own_swa_rope = true;
    }
    return 0;
}

/* Which layers slide: attention.sliding_window_pattern (a bool per layer, or a period), else the
 * architecture's period. */
static int gguf_sliding(binder *b, bool *sliding) {
    const model_hparams *hp = &b->m->hp;
    int period = b->a->swa_period;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", b->a->gguf);
    const gguf_kv *kv = gguf_find_kv(b->src, key);
    if (kv && kv->type == GGUF_T_ARRAY) {
        if (kv->v.arr.n != (uint64_t)hp->n_layer || (kv->v.arr.type != GGUF_T_BOOL && kv->v.arr.type > GGUF_T_INT32))
            return nc_fail(b->err, "%s: key '%s' must be %d booleans, one per layer (it holds %llu)", b->path, key,
                           hp->n_layer, (unsigned long long)kv->v.arr.n);
        for (int il = 0; il < hp->n_layer; il++) sliding[il] = gguf_arr_int(kv, (uint64_t)il) != 0;
        return 0;
    }
    if (kv && gguf_u32(b, "attention.sliding_window_pattern", false, period, &period)) return -1;
    /* without a pattern a window applies to every layer (Phi-3-mini's 2047) */
    for (int il = 0; il < hp->n_layer; il++) sliding[il] = period > 0 ? (il + 1) % period != 0 : hp->swa_window > 0;
    return 0;
}

/* The keys of the families with more than attention layers: recurrent mixers, latent attention,
 * expert routing, per-layer embeddings. Absent keys leave their zeros. */
static int gguf_more(binder *b, model_hparams *hp) {
    int32_t gating = 1, nextn = 0;
    bool finetuned = true;
    if (gguf_u32(b, "ssm.conv_kernel", false, 0, &hp->ssm_conv) || gguf_u32(b, "ssm.state_size", false, 0, &hp->ssm_state) ||
        gguf_u32(b, "ssm.group_count", false, 0, &hp->ssm_groups) ||
        gguf_u32(b, "ssm.inner_size", false, 0, &hp->ssm_inner) ||
        gguf_u32(b, "ssm.time_step_rank", false, 0, &hp->ssm_heads) ||
        gguf_u32(b, "shortconv.l_cache", false, hp->ssm_conv, &hp->ssm_conv) ||
        gguf_u32(b, "full_attention_interval", false, 4, &b->interval) ||
        gguf_u32(b, "attention.q_lora_rank", false, 0, &hp->mla_q_lora) ||
        gguf_u32(b, "attention.kv_lora_rank", false, 0, &hp->mla_kv_lora) ||
        gguf_u32(b, "attention.key_length_mla", false, 0, &hp->mla_nope) ||
        gguf_u32(b, "attention.value_length_mla", false, 0, &hp->mla_v) ||
        gguf_u32(b, "expert_gating_func", false, 1, &gating) ||
        gguf_u32(b, "expert_group_count", false, 0, &hp->n_group) ||
        gguf_u32(b, "expert_group_used_count", false, 0, &hp->n_group_used) ||
        gguf_f32(b, "expert_weights_scale", 1, &hp->expert_scale) ||
        gguf_u32(b, "expert_shared_feed_forward_length", false, 0, &hp->n_ff_shexp) ||
        gguf_u32(b, "embedding_length_per_layer_input", false, 0, &hp->n_embd_per_layer) ||
        gguf_u32(b, "attention.shared_kv_layers", false, 0, &b->shared_kv_layers) ||
        gguf_u32(b, "nextn_predict_layers", false, 0, &nextn) ||
        gguf_f32(b, "attention.temperature_scale", 0, &hp->temperature_scale) ||
        gguf_bool(b, "rope.scaling.finetuned", true, &finetuned))
        return -1;
    if (b->a->layers == LAYERS_INTERVAL && b->interval < 1)
        return nc_fail(b->err, "%s: %s.full_attention_interval %d: every Nth layer attends, N at least 1", b->path,
                       b->a->gguf, b->interval);
    if (gating != 1 && gating != 2)
        return nc_fail(b->err, "%s: %s.expert_gating_func %d is not supported (1: softmax, 2: sigmoid)", b->path,
                       b->a->gguf, gating);
    hp->gating = gating == 2 ? GATING_SIGMOID : GATING_SOFTMAX;
    if (hp->mla_nope) { /* key_length_mla is the non-rotated and the rotated part */
        if (b->a->yarn_log_mul_tenth && hp->attn_scale == 0) hp->attn_scale = (float)(b->mscale * b->mscale / sqrt(hp->mla_nope));
        hp->mla_nope -= hp->n_rot;
    }
    b->rope_off = (b->a->rope_switch && !finetuned) || b->a->no_rope;
    if (b->a->nextn) {
        if (nextn < 0 || nextn >= hp->n_layer)
            return nc_fail(b->err, "%s: %s.nextn_predict_layers %d leaves no layer of the %d to run", b->path, b->a->gguf,
                           nextn, hp->n_layer);
        hp->n_layer -= nextn;
    }
    if (b->a->nope_temperature > 0) { /* Llama 4: hard-coded in llama.cpp's loader, as in the checkpoints */
        hp->temperature_scale = b->a->nope_temperature;
        hp->temperature_floor = (float)b->a->chunk;
        hp->temperature_offset = 1;
    } else {
        hp->temperature_floor = (float)hp->rope[0].orig_ctx;
    }
    if (b->a->expert_weight_input) { /* Llama 4: a routed expert's weight scales its input, one sigmoid, unnormalised */
        hp->expert_weight_input = true;
        hp->gating = GATING_SIGMOID;
        hp->expert_norm = false;
    }
    return 0;
}

static int gguf_hparams(binder *b, model_hparams *hp, int32_t *head_kv, int32_t *ff) {
    int32_t window, head_kv_max, ff_max;
    if (gguf_u32(b, "embedding_length", true, 0, &hp->n_embd) || gguf_u32(b, "block_count", true, 0, &hp->n_layer))
        return -1;
    if (hp->n_layer <= 0 || hp->n_layer > 4096) return nc_fail(b->err, "%s: %s.block_count %d is outside 1..4096", b->path, b->a->gguf, hp->n_layer);
    if (gguf_u32(b, "attention.head_count", true, 0, &hp->n_head) ||
        gguf_per_layer(b, "attention.head_count_kv", false, hp->n_head, head_kv, &head_kv_max) ||
        gguf_per_layer(b, "feed_forward_length", false, 0, ff, &ff_max) ||
        gguf_u32(b, "context_length", false, 2048, &hp->n_ctx_train) ||
        gguf_u32(b, "attention.key_length", false, hp->n_head ? hp->n_embd / hp->n_head : 0, &hp->head_dim) ||
        gguf_u32(b, "attention.key_length_swa", false, 0, &b->head_dim_swa) ||
        gguf_u32(b, "rope.dimension_count", false, hp->head_dim, &hp->n_rot) ||
        gguf_u32(b, "rope.dimension_count_swa", false, hp->n_rot, &b->n_rot_swa) ||
        gguf_u32(b, "expert_count", false, 0, &hp->n_expert) ||
        gguf_u32(b, "expert_used_count", false, 0, &hp->n_expert_used) ||
        gguf_u32(b, "expert_feed_forward_length", false, ff_max, &hp->n_ff_exp) ||
        gguf_u32(b, "attention.sliding_window", false, 0, &window) ||
        gguf_f32(b, "attention.layer_norm_rms_epsilon", 1e-5, &hp->norm_eps) ||
        gguf_f32(b, "attention.scale", 0, &hp->attn_scale) ||
        gguf_f32(b, "attn_logit_softcapping", 0, &hp->attn_softcap) ||
        gguf_f32(b, "final_logit_softcapping", 0, &hp->final_softcap) ||
        gguf_f32(b, "embedding_scale", 1, &hp->embd_scale) || gguf_f32(b, "residual_scale", 1, &hp->residual_scale) ||
        gguf_f32(b, "logit_scale", 1, &hp->logit_scale))
        return -1;
    hp->n_head_kv = head_kv_max;
    hp->n_ff = ff_max;
    hp->swa_window = window;
    /* llama.cpp's logit_scale divides the logits (Granite's logits_scaling) */
    hp->logit_scale = hp->logit_scale != 0 ? 1.0f / hp->logit_scale : 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", b->a->gguf);
    hp->expert_norm = true; /* Mixtral and Qwen3-MoE renormalise; the key says otherwise */
    if (gguf_get_bool(b->src, key, &hp->expert_norm, b->err) < 0) return -1;
    if (gguf_rope(b, hp) || gguf_more(b, hp)) return -1;
    hp->rope_neox = !b->a->gguf_rope_pairs;
    if (hp->attn_scale == 0) hp->attn_scale = b->a->attn_scale;
    if (hp->attn_scale == 0 && hp->n_layer == b->a->gguf_wide_query_layers && hp->n_head > 0)
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    return 0;
}

/* ---- binding ------------------------------------------------------------------------------ */

static int check_hparams(binder *b) {
    const model_hparams *hp = &b->m->hp;
    const char *p = b->path;
    if (hp->n_embd <= 0 || hp->n_head <= 0 || hp->n_head_kv < 0 || hp->head_dim <= 0)
        return nc_fail(b->err, "%s: embedding length %d, heads %d, KV heads %d and head dimension %d must be positive",
                       p, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim);
    if ((int64_t)hp->n_head * hp->head_dim > (1 << 20))
        return nc_fail(b->err, "%s: %d heads of %d dimensions is too large", p, hp->n_head, hp->head_dim);
    for (int k = 0; k < 2; k++) {
        const model_rope *r = &hp->rope[k];
        if (r->n_rot > (k ? (b->head_dim_swa ? b->head_dim_swa : hp->head_dim) : hp->head_dim) || r->n_rot % 2 || r->n_rot < 0)
            return nc_fail(b->err, "%s: the rotary dimension count %d%s must be even and at most the head dimension %d", p,
                           r->n_rot, k ? " of the sliding-window layers" : "", k && b->head_dim_swa ? b->head_dim_swa : hp->head_dim);
        if (!(r->base > 0)) return nc_fail(b->err, "%s: the rope base must be positive", p);
        if ((r->kind == ROPE_LLAMA3 || r->kind == ROPE_YARN || r->kind == ROPE_LONGROPE) && !(r->orig_ctx > 0))
            return nc_fail(b->err, "%s: rope scaling needs a positive original context length", p);
        if (r->kind == ROPE_LLAMA3 && !(r->high_freq_factor > r->low_freq_factor))
            return nc_fail(b->err, "%s: Llama 3 rope scaling needs high_freq_factor > low_freq_factor", p);
    }
    if (!(hp->norm_eps >= 0)) return nc_fail(b->err, "%s: the RMS norm epsilon must be >= 0", p);
    if (hp->n_expert < 0 || hp->n_expert > 4096 || hp->n_expert_used < 0 || hp->n_expert_used > hp->n_expert ||
        (hp->n_expert > 0 && hp->n_expert_used == 0))
        return nc_fail(b->err, "%s: %d experts with %d used per token: need 1 <= used <= experts <= 4096", p,
                       hp->n_expert, hp->n_expert_used);
    if (hp->n_group > 0 && (hp->n_expert % hp->n_group || hp->n_group_used < 1 || hp->n_group_used > hp->n_group ||
                            hp->n_expert_used > hp->n_group_used * (hp->n_expert / hp->n_group)))
        return nc_fail(b->err, "%s: %d experts in %d groups, %d of them used, for %d experts a token: the groups must "
                               "divide the experts and hold the experts used", p, hp->n_expert, hp->n_group,
                       hp->n_group_used, hp->n_expert_used);
    if (hp->swa_window < 0) return nc_fail(b->err, "%s: negative sliding window", p);
    if (hp->expert_scale == 0) b->m->hp.expert_scale = 1; /* no scale of the chosen experts' weights */
    if (hp->attn_scale == 0) b->m->hp.attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    if (!(hp->attn_scale > 0)) return nc_fail(b->err, "%s: the attention scale must be positive", p);
    if (!(hp->attn_softcap >= 0) || !(hp->final_softcap >= 0))
        return nc_fail(b->err, "%s: soft-capping values must be >= 0", p);
    return 0;
}

model_weight bind_view(const model_weight *w, int r0, int rows, int step) {
    model_weight v = *w;
    v.data = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    v.rows = rows;
    v.row_bytes = w->row_bytes * (size_t)step;
    return v;
}

int bind_model(binder *b) {
    model *m = b->m;
    model_hparams *hp = &m->hp;
    hp->arch = b->a;
    if (check_hparams(b)) return -1;
    char name[BIND_NAME_MAX];
    const fmt_tensor *emb = bind_find(b, T_TOK_EMBD, 0, 0, name);
    if (!emb) return bind_missing(b, name);
    if (emb->ne[1] == 0 || emb->ne[1] > (1u << 24))
        return nc_fail(b->err, "%s: tensor '%s' has %llu rows, outside 1..2^24", b->path, name,
                       (unsigned long long)emb->ne[1]);
    hp->n_vocab = (int32_t)emb->ne[1];
    int64_t E = hp->n_embd, V = hp->n_vocab;
    if (bind_matrix(b, T_TOK_EMBD, 0, E, V, true, &m->tok_embd) || bind_matrix(b, T_OUTPUT, 0, E, V, false, &m->output) ||
        bind_vector(b, T_OUTPUT_NORM, 0, E, true, &m->output_norm) ||
        bind_vector(b, T_ROPE_FREQS, 0, hp->rope[0].n_rot / 2, false, &hp->rope[0].freq_factors))
        return -1;
    /* LongRoPE in a GGUF file is its two factor tensors (llama.cpp's converter writes no scaling
     * type for Phi-3); a Hugging Face config gave them already */
    const float *lf, *sf;
    if (bind_vector(b, T_ROPE_SHORT, 0, hp->n_rot / 2, false, &sf) ||
        bind_vector(b, T_ROPE_LONG, 0, hp->n_rot / 2, false, &lf))
        return -1;
    if (lf || sf) {
        model_rope *r = &hp->rope[0];
        if (!lf || !sf) return nc_fail(b->err, "%s: LongRoPE needs both rope factor tensors (long and short)", b->path);
        r->kind = ROPE_LONGROPE;
        r->freq_factors = sf;
        r->long_factors = lf;
        if (!(r->factor > 0)) r->factor = r->orig_ctx > 0 ? hp->n_ctx_train / r->orig_ctx : 1.0;
    }
    if (!b->own_swa_rope) hp->rope[1] = hp->rope[0]; /* with the factors bound just now */
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    if (hp->n_embd_per_layer > 0) { /* Gemma 4: a table of every layer's inputs, and a projection of x to them */
        int64_t P = (int64_t)hp->n_embd_per_layer * hp->n_layer;
        if (bind_matrix(b, T_PL_EMBD, 0, P, V, true, &m->pl_embd) || bind_matrix(b, T_PL_MODEL_PROJ, 0, E, P, true, &m->pl_model_proj) ||
            bind_vector(b, T_PL_PROJ_NORM, 0, hp->n_embd_per_layer, true, &m->pl_proj_norm))
            return -1;
    }
    m->layers = bind_own(b, (size_t)hp->n_layer * sizeof *m->layers);
    if (!m->layers) return -1;
    for (int il = 0; il < hp->n_layer; il++)
        if (bind_layer(b, il, &m->layers[il])) return -1;
    return 0;
}

/* A GGUF model: metadata from file, tensors found by lookup in `tensors` (the file, or a split's
 * parts). */
static int bind_gguf(model **out, gguf_file *file, const void *tensors, bind_lookup lookup, nc_err *err) {
    *out = NULL;
    gguf_str arch_name;
    int r = gguf_get_str(file, "general.architecture", &arch_name, err);
    if (r < 0) return -1;
    if (r == 0) return nc_fail(err, "%s: missing key 'general.architecture'", gguf_path(file));
    const arch_desc *a = arch_by_gguf(arch_name.data, arch_name.len);
    if (!a) {
        const gguf_kv *kv = gguf_find_kv(file, "general.architecture");
        return nc_fail(err, "%s: architecture '%.*s' (key at offset %llu) is not supported; supported: %s",
                       gguf_path(file), (int)(arch_name.len > 64 ? 64 : arch_name.len), arch_name.data,
                       (unsigned long long)kv->offset, arch_gguf_list());
    }
    model *m = calloc(1, sizeof *m);
    if (!m) return nc_fail(err, "out of memory");
    binder b = {.m = m, .a = a, .src = file, .tensors = tensors, .lookup = lookup, .path = gguf_path(file), .err = err};
    bool *sliding = NULL, *rope = NULL;
    int32_t *head_kv = NULL, *ff = NULL, n;
    if (gguf_u32(&b, "block_count", true, 0, &n)) goto fail;
    if (n <= 0 || n > 4096) {
        nc_fail(err, "%s: %s.block_count %d is outside 1..4096", b.path, a->gguf, n);
        goto fail;
    }
    sliding = calloc((size_t)n, sizeof *sliding);
    rope = calloc((size_t)n, sizeof *rope);
    head_kv = calloc((size_t)n, sizeof *head_kv);
    ff = calloc((size_t)n, sizeof *ff);
    if (!sliding || !rope || !head_kv || !ff) { nc_fail(err, "out of memory"); goto fail; }
    if (gguf_hparams(&b, &m->hp, head_kv, ff) || gguf_sliding(&b, sliding)) goto fail;
    for (int il = 0; il < m->hp.n_layer; il++)
        rope[il] = !b.rope_off && !(a->no_rope_period && (il + 1) % a->no_rope_period == 0);
    b.sliding = sliding;
    b.rope = rope;
    b.head_kv = head_kv;
    b.ff = ff;
    gguf_str name;
    if (gguf_get_str(file, "general.name", &name, NULL) == 1)
        snprintf(m->name, sizeof m->name, "%.*s", (int)(name.len > 127 ? 127 : name.len), name.data);
    if (bind_model(&b)) goto fail;
    free(sliding);
    free(rope);
    free(head_kv);
    free(ff);
    m->file = file;
    *out = m;
    return 0;
fail:
    free(sliding);
    free(rope);
    free(head_kv);
    free(ff);
    model_free(m);
    return -1;
}

int model_bind(model **out, gguf_file *file, nc_err *err) {
    if (bind_gguf(out, file, file, (bind_lookup)gguf_find_tensor, err)) return -1;
    (*out)->source = file;
    (*out)->close = (void (*)(void *))gguf_close;
    (*out)->file_bytes = gguf_file_size(file);
    return 0;
}

int model_bind_split(model **out, gguf_split *split, gguf_file *first, nc_err *err) {
    if (bind_gguf(out, first, split, (bind_lookup)gguf_split_find_tensor, err)) return -1;
    (*out)->source = split;
    (*out)->close = (void (*)(void *))gguf_split_close;
    (*out)->file_bytes = gguf_split_bytes(split);
    return 0;
}

void model_free(model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    if (m->close) m->close(m->source);
    free(m);
}
