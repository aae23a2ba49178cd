#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/quant.h"

const char *model_arch_name(model_arch a) { return a == ARCH_QWEN2 ? "qwen2" : "llama"; }

typedef struct binder {
    model *m;
    const gguf_file *f;
    const char *arch;
    nc_err *err;
} binder;

static int arch_from_file(const gguf_file *f, model_arch *arch, gguf_str *name, nc_err *err) {
    int r = gguf_get_str(f, "general.architecture", name, err);
    if (r < 0) return -1;
    if (r == 0) return nc_fail(err, "%s: missing key 'general.architecture'", gguf_path(f));
    if (gguf_str_eq(*name, "llama")) *arch = ARCH_LLAMA;
    else if (gguf_str_eq(*name, "qwen2")) *arch = ARCH_QWEN2;
    else {
        const gguf_kv *kv = gguf_find_kv(f, "general.architecture");
        return nc_fail(err, "%s: architecture '%.*s' (key at offset %llu) is not supported; supported: llama, qwen2",
                       gguf_path(f), (int)(name->len > 64 ? 64 : name->len), name->data,
                       (unsigned long long)kv->offset);
    }
    return 0;
}

/* An hparam "<arch>.<suffix>"; required ones fail when absent, others take `dflt`. */
static int hp_u32(binder *b, const char *suffix, bool required, int64_t dflt, int32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", b->arch, suffix);
    uint32_t v;
    int r = gguf_get_uint32(b->f, key, &v, b->err);
    if (r < 0) return -1;
    if (r == 0) {
        if (required) return nc_fail(b->err, "%s: missing key '%s'", gguf_path(b->f), key);
        *out = (int32_t)dflt;
        return 0;
    }
    if (v == 0 || v > (1u << 30)) {
        const gguf_kv *kv = gguf_find_kv(b->f, key);
        return nc_fail(b->err, "%s: key '%s' (offset %llu) has value %u, outside 1..2^30", gguf_path(b->f), key,
                       (unsigned long long)kv->offset, v);
    }
    *out = (int32_t)v;
    return 0;
}

static int hp_f32(binder *b, const char *suffix, double dflt, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", b->arch, suffix);
    double v;
    int r = gguf_get_float(b->f, key, &v, b->err);
    if (r < 0) return -1;
    *out = (float)(r == 0 ? dflt : v);
    return 0;
}

static int read_hparams(binder *b, model_hparams *hp) {
    if (hp_u32(b, "embedding_length", true, 0, &hp->n_embd) || hp_u32(b, "block_count", true, 0, &hp->n_layer) ||
        hp_u32(b, "attention.head_count", true, 0, &hp->n_head) ||
        hp_u32(b, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv) ||
        hp_u32(b, "feed_forward_length", true, 0, &hp->n_ff) ||
        hp_u32(b, "context_length", false, 2048, &hp->n_ctx_train) ||
        hp_u32(b, "attention.key_length", false, hp->n_embd / hp->n_head, &hp->head_dim))
        return -1;
    if (hp_u32(b, "rope.dimension_count", false, hp->head_dim, &hp->n_rot) ||
        hp_f32(b, "rope.freq_base", 10000.0, &hp->rope_freq_base) ||
        hp_f32(b, "attention.layer_norm_rms_epsilon", 1e-5, &hp->norm_eps))
        return -1;
    const char *path = gguf_path(b->f);
    if (hp->head_dim <= 0) return nc_fail(b->err, "%s: head dimension is 0 (%s.attention.key_length)", path, b->arch);
    if (hp->n_head % hp->n_head_kv)
        return nc_fail(b->err, "%s: %s.attention.head_count %d is not a multiple of head_count_kv %d", path, b->arch,
                       hp->n_head, hp->n_head_kv);
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return nc_fail(b->err, "%s: %s.rope.dimension_count %d must be even and at most the head dimension %d", path,
                       b->arch, hp->n_rot, hp->head_dim);
    if (!(hp->rope_freq_base > 0)) return nc_fail(b->err, "%s: %s.rope.freq_base must be positive", path, b->arch);
    if (!(hp->norm_eps >= 0)) return nc_fail(b->err, "%s: %s.attention.layer_norm_rms_epsilon must be >= 0", path, b->arch);
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", b->arch);
    gguf_str scaling;
    int r = gguf_get_str(b->f, key, &scaling, b->err);
    if (r < 0) return -1;
    if (r == 1 && !gguf_str_eq(scaling, "none"))
        return nc_fail(b->err, "%s: key '%s' = '%.*s': rope scaling of this type is not supported (none; Llama 3 scaling comes as the rope_freqs tensor)",
                       path, key, (int)(scaling.len > 32 ? 32 : scaling.len), scaling.data);
    return 0;
}

static const gguf_tensor *find(binder *b, const char *name, bool required) {
    const gguf_tensor *t = gguf_find_tensor(b->f, name);
    if (!t && required) nc_fail(b->err, "%s: missing tensor '%s'", gguf_path(b->f), name);
    return t;
}

static int check_shape(binder *b, const gguf_tensor *t, uint32_t n_dims, int64_t ne0, int64_t ne1) {
    bool ok = t->ne[0] == (uint64_t)ne0 && t->ne[1] == (uint64_t)(n_dims > 1 ? ne1 : 1) && t->ne[2] == 1 && t->ne[3] == 1;
    if (ok) return 0;
    char want[64];
    if (n_dims == 1) snprintf(want, sizeof want, "[%lld]", (long long)ne0);
    else snprintf(want, sizeof want, "[%lld, %lld]", (long long)ne0, (long long)ne1);
    return nc_fail(b->err, "%s: tensor '%s' (table entry at offset %llu) has shape [%llu, %llu, %llu, %llu], expected %s",
                   gguf_path(b->f), t->name, (unsigned long long)t->info_offset, (unsigned long long)t->ne[0],
                   (unsigned long long)t->ne[1], (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], want);
}

static int check_type(binder *b, const gguf_tensor *t) {
    if (quant_type_supported(t->type)) return 0;
    char buf[24];
    return nc_fail(b->err, "%s: tensor '%s' (table entry at offset %llu) has type %s, which nucleus cannot compute with; supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K",
                   gguf_path(b->f), t->name, (unsigned long long)t->info_offset, ggml_type_name(t->type, buf));
}

static void account(binder *b, const gguf_tensor *t) {
    b->m->n_params += t->n_elems;
    b->m->weight_bytes += t->n_bytes;
}

static int bind_matrix(binder *b, const char *name, int64_t cols, int64_t rows, bool required, model_weight *w) {
    const gguf_tensor *t = find(b, name, required);
    if (!t) return required ? -1 : 0;
    if (check_shape(b, t, 2, cols, rows) || check_type(b, t)) return -1;
    account(b, t);
    w->name = t->name;
    w->data = t->data;
    w->type = t->type;
    w->rows = (int32_t)rows;
    w->cols = (int32_t)cols;
    w->row_bytes = quant_row_bytes(t->type, cols);
    return 0;
}

/* 1-D tensors (norms, biases, rope factors) are tiny: use them in place when they are aligned
 * F32, else convert once to an owned f32 copy so the forward pass reads plain floats. */
static int bind_vector(binder *b, const char *name, int64_t n, bool required, const float **out) {
    *out = NULL;
    const gguf_tensor *t = find(b, name, required);
    if (!t) return required ? -1 : 0;
    if (check_shape(b, t, 1, n, 1) || check_type(b, t)) return -1;
    account(b, t);
    if (t->type == GGML_TYPE_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        *out = t->data;
        return 0;
    }
    float *copy = malloc((size_t)n * sizeof *copy);
    float **list = realloc(b->m->owned, (size_t)(b->m->n_owned + 1) * sizeof *list);
    if (!copy || !list) {
        free(copy);
        if (list) b->m->owned = list;
        return nc_fail(b->err, "out of memory converting tensor '%s'", name);
    }
    b->m->owned = list;
    list[b->m->n_owned++] = copy;
    quant_dequantize_row(t->type, t->data, copy, n);
    *out = copy;
    return 0;
}

static int bind_layer(binder *b, int il, model_layer *L) {
    const model_hparams *hp = &b->m->hp;
    int64_t E = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim, kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, il), n)
    if (bind_vector(b, NAME("attn_norm.weight"), E, true, &L->attn_norm) ||
        bind_matrix(b, NAME("attn_q.weight"), E, q_dim, true, &L->wq) ||
        bind_matrix(b, NAME("attn_k.weight"), E, kv_dim, true, &L->wk) ||
        bind_matrix(b, NAME("attn_v.weight"), E, kv_dim, true, &L->wv) ||
        bind_matrix(b, NAME("attn_output.weight"), q_dim, E, true, &L->wo) ||
        bind_vector(b, NAME("ffn_norm.weight"), E, true, &L->ffn_norm) ||
        bind_matrix(b, NAME("ffn_gate.weight"), E, hp->n_ff, true, &L->ffn_gate) ||
        bind_matrix(b, NAME("ffn_up.weight"), E, hp->n_ff, true, &L->ffn_up) ||
        bind_matrix(b, NAME("ffn_down.weight"), hp->n_ff, E, true, &L->ffn_down))
        return -1;
    /* qwen2 always has Q/K/V biases; llama files may carry them too (some fine-tunes do). */
    bool need_bias = hp->arch == ARCH_QWEN2;
    if (bind_vector(b, NAME("attn_q.bias"), q_dim, need_bias, &L->bq) ||
        bind_vector(b, NAME("attn_k.bias"), kv_dim, need_bias, &L->bk) ||
        bind_vector(b, NAME("attn_v.bias"), kv_dim, need_bias, &L->bv))
        return -1;
#undef NAME
    return 0;
}

int model_bind(model **out, gguf_file *file, nc_err *err) {
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) return nc_fail(err, "out of memory");
    m->file = file;
    binder b = {.m = m, .f = file, .err = err};
    gguf_str arch_name;
    if (arch_from_file(file, &m->hp.arch, &arch_name, err)) goto fail;
    b.arch = model_arch_name(m->hp.arch);
    m->hp.rope_neox = m->hp.arch == ARCH_QWEN2;
    if (read_hparams(&b, &m->hp)) goto fail;
    gguf_str name;
    if (gguf_get_str(file, "general.name", &name, NULL) == 1)
        snprintf(m->name, sizeof m->name, "%.*s", (int)(name.len > 127 ? 127 : name.len), name.data);

    const gguf_tensor *emb = find(&b, "token_embd.weight", true);
    if (!emb) goto fail;
    if (emb->ne[1] == 0 || emb->ne[1] > (1u << 24))
        { nc_fail(err, "%s: tensor 'token_embd.weight' has %llu rows, outside 1..2^24", gguf_path(file), (unsigned long long)emb->ne[1]); goto fail; }
    m->hp.n_vocab = (int32_t)emb->ne[1];
    int64_t E = m->hp.n_embd, V = m->hp.n_vocab;
    if (bind_matrix(&b, "token_embd.weight", E, V, true, &m->tok_embd) ||
        bind_matrix(&b, "output.weight", E, V, false, &m->output) ||
        bind_vector(&b, "output_norm.weight", E, true, &m->output_norm) ||
        bind_vector(&b, "rope_freqs.weight", m->hp.n_rot / 2, false, &m->rope_freqs))
        goto fail;
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) { nc_fail(err, "out of memory"); goto fail; }
    for (int il = 0; il < m->hp.n_layer; il++)
        if (bind_layer(&b, il, &m->layers[il])) goto fail;
    *out = m;
    return 0;
fail:
    m->file = NULL; /* the caller still owns the file on failure */
    model_free(m);
    return -1;
}

void model_free(model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    gguf_close(m->file);
    free(m);
}
