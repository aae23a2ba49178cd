/* LoRA adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") in the GGUF
 * form llama.cpp's convert_lora_to_gguf.py writes: general.type "adapter", general.architecture
 * the base model's, adapter.type "lora", adapter.lora.alpha, and per adapted weight W the pair
 * "W.lora_a" (ggml shape [W's inputs, rank]) and "W.lora_b" ([rank, W's outputs]). A product W x
 * then computes W x + scale * B (A x), scale being the user's times alpha / rank (the user's alone
 * when alpha is 0 or absent), as llama.cpp applies them. The pairs are kept as f32 copies beside
 * the base weights, which stay as they are: the backend adds the low-rank product (cpu.c). */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "tensor/quant.h"

/* The 2-D weights of a layer whose products go through the backend's `mul`: an adapter may adapt
 * them (a copy of another, as V of K's projection, is listed too: it is multiplied on its own). */
static int layer_weights(model_layer *L, model_weight **out) {
    model_weight *all[] = {&L->wq,     &L->wk,      &L->wv,        &L->wo,      &L->ffn_gate, &L->ffn_up,   &L->ffn_down,
                           &L->router, &L->sh_gate, &L->sh_up,     &L->sh_down, &L->ssm.in,   &L->ssm.gate, &L->ssm.beta,
                           &L->ssm.alpha, &L->ssm.out, &L->mla.q_a, &L->mla.q_b, &L->mla.kv_a, &L->pl_gate, &L->pl_proj};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]->data && !all[i]->transposed) out[n++] = all[i];
    return n;
}
#define LAYER_WEIGHTS 21

/* Every weight an adapter may adapt: the layers', the output's (unless it is the token
 * embeddings' table), Gemma 4's per-layer projection. */
static int adaptable(model *m, model_weight **out) {
    int n = 0;
    if (m->output.data && m->output.data != m->tok_embd.data) out[n++] = &m->output;
    if (m->pl_model_proj.data) out[n++] = &m->pl_model_proj;
    for (int il = 0; il < m->hp.n_layer; il++) n += layer_weights(&m->layers[il], out + n);
    return n;
}

/* Why a tensor of the model cannot be adapted, or NULL when the model has no tensor of that name. */
static const char *not_adaptable(const model *m, const char *name) {
    if (m->tok_embd.name && !strcmp(name, m->tok_embd.name))
        return "the token embeddings (a lookup, not a product) cannot take a LoRA";
    for (int il = 0; il < m->hp.n_layer; il++) {
        const model_layer *L = &m->layers[il];
        const model_weight *ex[] = {L->exp_gate, L->exp_up, L->exp_gate_up, L->exp_down, L->mla.k_b, L->mla.v_b};
        for (size_t i = 0; i < sizeof ex / sizeof *ex; i++)
            if (ex[i] && ex[i]->name && !strcmp(name, ex[i]->name))
                return i < 4 ? "LoRA on the experts' weights is not supported"
                             : "LoRA on latent attention's per-head matrices is not supported";
    }
    return NULL;
}

static int check_keys(const gguf_file *f, const char *path, const model *m, double *alpha, nc_err *err) {
    gguf_str s;
    int r = gguf_get_str(f, "general.type", &s, err);
    if (r < 0) return nc_fail_prefix(err, "%s: ", path);
    if (r == 0 || !gguf_str_eq(s, "adapter"))
        return nc_fail(err, "%s: not a LoRA adapter (general.type is %s%.*s%s, not \"adapter\")", path, r ? "\"" : "",
                       r ? (int)(s.len > 64 ? 64 : s.len) : 6, r ? s.data : "absent", r ? "\"" : "");
    const gguf_kv *arch = gguf_find_kv(f, "general.architecture"), *mine = gguf_find_kv(m->file, "general.architecture");
    bool named = arch && arch->type == GGUF_T_STRING, have = mine && mine->type == GGUF_T_STRING;
    if (!named || !have || arch->v.s.len != mine->v.s.len || memcmp(arch->v.s.data, mine->v.s.data, arch->v.s.len))
        return nc_fail(err, "%s: an adapter for the architecture '%.*s', the model is '%.*s'", path,
                       named ? (int)(arch->v.s.len > 64 ? 64 : arch->v.s.len) : 1, named ? arch->v.s.data : "?",
                       have ? (int)(mine->v.s.len > 64 ? 64 : mine->v.s.len) : 1, have ? mine->v.s.data : "?");
    if ((r = gguf_get_str(f, "adapter.type", &s, err)) < 0) return nc_fail_prefix(err, "%s: ", path);
    if (r == 0 || !gguf_str_eq(s, "lora"))
        return nc_fail(err, "%s: adapter.type is %s%.*s%s: only \"lora\" adapters are supported", path, r ? "\"" : "",
                       r ? (int)(s.len > 64 ? 64 : s.len) : 6, r ? s.data : "absent", r ? "\"" : "");
    *alpha = 0;
    if (gguf_get_float(f, "adapter.lora.alpha", alpha, err) < 0) return nc_fail_prefix(err, "%s: ", path);
    for (size_t i = 0; i < gguf_n_kv(f); i++) {
        const char *k = gguf_kv_at(f, i)->key;
        if (!strncmp(k, "general.", 8) || !strcmp(k, "adapter.type") || !strcmp(k, "adapter.lora.alpha")) continue;
        if (!strcmp(k, "adapter.alora.invocation_tokens"))
            return nc_fail(err, "%s: an activated LoRA (adapter.alora.invocation_tokens): not supported", path);
        return nc_fail(err, "%s: unknown key '%s' in a LoRA adapter", path, k);
    }
    return 0;
}

/* Far beyond any adapter's rank, so that sums of ranks stay small integers. */
#define LORA_MAX_RANK 65536

/* A pair of the adapter: the base weight's name, its two tensors, the model weights of that name
 * (a fused matrix's views share it: each takes B's rows of its own, `off` and `step` apart). */
typedef struct pair {
    char base[256];
    const gguf_tensor *a, *b;
    model_weight *w[8];
    int64_t off[8], step[8];
    int n;
} pair;

/* Find pair p's weights and check its shapes and types. */
static int check_pair(const model *m, model_weight **ws, int n_ws, const char *path, pair *p, nc_err *err) {
    const uint8_t *first = NULL;
    for (int i = 0; i < n_ws; i++)
        if (ws[i]->name && !strcmp(ws[i]->name, p->base)) {
            if (p->n == 8) return nc_fail(err, "%s: '%s' is used by more than 8 products", path, p->base);
            p->w[p->n++] = ws[i];
            if (!first || (const uint8_t *)ws[i]->data < first) first = ws[i]->data;
        }
    if (p->n == 0) {
        const char *why = not_adaptable(m, p->base);
        return why ? nc_fail(err, "%s: tensor '%s': %s", path, p->base, why)
                   : nc_fail(err, "%s: the model has no weight '%s' to adapt (an adapter for another model?)", path, p->base);
    }
    const gguf_tensor *a = p->a, *b = p->b;
    if (a->n_dims == 2 && a->ne[1] > LORA_MAX_RANK)
        return nc_fail(err, "%s: '%s.lora_a' has rank %llu, more than the %d allowed", path, p->base,
                       (unsigned long long)a->ne[1], LORA_MAX_RANK);
    if (a->n_dims != 2 || b->n_dims != 2 || a->ne[1] != b->ne[0])
        return nc_fail(err, "%s: '%s.lora_a' [%llu, %llu] and '%s.lora_b' [%llu, %llu]: expected [inputs, rank] and "
                            "[rank, outputs]", path, p->base, (unsigned long long)a->ne[0], (unsigned long long)a->ne[1],
                       p->base, (unsigned long long)b->ne[0], (unsigned long long)b->ne[1]);
    if (!quant_type_supported(a->type) || !quant_type_supported(b->type))
        return nc_fail(err, "%s: '%s.lora_%c' has a type nucleus cannot compute with; supported: %s", path, p->base,
                       quant_type_supported(a->type) ? 'b' : 'a', quant_supported_names());
    size_t stored = quant_row_bytes(p->w[0]->type, p->w[0]->cols); /* a row of the tensor as the file holds it */
    for (int i = 0; i < p->n; i++) {
        const model_weight *w = p->w[i];
        p->off[i] = ((const uint8_t *)w->data - first) / (int64_t)stored;
        p->step[i] = (int64_t)(w->row_bytes / stored);
        int64_t outputs = p->off[i] + (w->rows - 1) * p->step[i] + 1;
        if ((int64_t)a->ne[0] != w->cols || outputs > (int64_t)b->ne[1])
            return nc_fail(err, "%s: '%s' has %d inputs and %lld outputs, its adapter %llu and %llu", path, p->base,
                           w->cols, (long long)outputs, (unsigned long long)a->ne[0], (unsigned long long)b->ne[1]);
    }
    return 0;
}

/* An adapter tensor's values as f32 rows into dst. */
static void floats_of(const gguf_tensor *t, float *dst) {
    size_t row = quant_row_bytes(t->type, (int64_t)t->ne[0]);
    for (uint64_t r = 0; r < t->n_elems / t->ne[0]; r++)
        quant_dequantize_row(t->type, (const uint8_t *)t->data + r * row, dst + r * t->ne[0], (int64_t)t->ne[0]);
}

/* The pairs of a file (every tensor NAME.lora_a beside its NAME.lora_b), checked. */
static int read_pairs(const model *m, const gguf_file *f, model_weight **ws, int n_ws, const char *path, pair *out,
                      int *n_out, nc_err *err) {
    int n = 0;
    for (size_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        size_t len = strlen(t->name);
        if (len < 8 || (strcmp(t->name + len - 7, ".lora_a") && strcmp(t->name + len - 7, ".lora_b")))
            return nc_fail(err, "%s: tensor '%s': a LoRA adapter holds only NAME.lora_a and NAME.lora_b", path, t->name);
        if (len - 7 >= sizeof out->base) return nc_fail(err, "%s: tensor name '%.64s...' is too long", path, t->name);
        char other[sizeof out->base + 8];
        snprintf(other, sizeof other, "%.*s.lora_%c", (int)(len - 7), t->name, t->name[len - 1] == 'a' ? 'b' : 'a');
        const gguf_tensor *o = gguf_find_tensor(f, other);
        if (!o) return nc_fail(err, "%s: '%s' has no '%s'", path, t->name, other);
        if (t->name[len - 1] == 'b') continue;
        pair *p = &out[n++];
        *p = (pair){.a = t, .b = o};
        memcpy(p->base, t->name, len - 7);
        p->base[len - 7] = '\0';
        if (check_pair(m, ws, n_ws, path, p, err)) return -1;
    }
    if (n == 0) return nc_fail(err, "%s: a LoRA adapter without a single NAME.lora_a / NAME.lora_b pair", path);
    *n_out = n;
    return 0;
}

/* The largest sum of the ranks of one layer's adapted weights, or of the output's: one product
 * call's weights are of one layer, so this bounds its low-rank inputs per token. */
static int32_t rank_per_layer(model *m) {
    int32_t best = 0;
    model_weight *ws[LAYER_WEIGHTS + 2];
    for (int il = -1; il < m->hp.n_layer; il++) {
        int n = il < 0 ? 0 : layer_weights(&m->layers[il], ws);
        if (il < 0) {
            ws[n++] = &m->output;
            ws[n++] = &m->pl_model_proj;
        }
        int32_t sum = 0;
        for (int i = 0; i < n; i++)
            for (const model_lora *l = ws[i]->lora; l; l = l->next) sum += l->rank;
        best = sum > best ? sum : best;
    }
    return best;
}

int model_add_lora(model *m, const char *path, float scale, nc_err *err) {
    if (!m->file) return nc_fail(err, "%s: LoRA adapters apply to GGUF models (this one is a Hugging Face directory)", path);
    gguf_file *f;
    if (gguf_open(&f, path, err)) return -1;
    int rc = model_add_lora_file(m, f, path, scale, err);
    gguf_close(f);
    return rc;
}

int model_add_lora_file(model *m, const gguf_file *f, const char *path, float scale, nc_err *err) {
    if (!m->file) return nc_fail(err, "%s: LoRA adapters apply to GGUF models (this one is a Hugging Face directory)", path);
    double alpha;
    model_weight **ws = malloc((size_t)(2 + m->hp.n_layer * LAYER_WEIGHTS) * sizeof *ws);
    pair *pairs = malloc((gguf_n_tensors(f) + 1) * sizeof *pairs);
    int n = 0, rc = check_keys(f, path, m, &alpha, err);
    if (!rc && (!ws || !pairs)) rc = nc_fail(err, "out of memory");
    if (!rc) rc = read_pairs(m, f, ws, adaptable(m, ws), path, pairs, &n, err);
    /* everything checked: each pair's A and B in an allocation of its own (so that a read past one
     * is caught where the sanitizers watch), kept by the model; then the weights' lists take them.
     * The model is unchanged by an adapter that fails. */
    size_t nodes = 0;
    for (int i = 0; !rc && i < n; i++) nodes += (size_t)pairs[i].n;
    void **list = NULL, **mine = rc ? NULL : calloc((size_t)(2 * n + 1), sizeof *mine);
    bool have = mine && (mine[2 * n] = malloc(nodes * sizeof(model_lora)));
    for (int i = 0; have && i < n; i++)
        have = (mine[2 * i] = malloc(pairs[i].a->n_elems * sizeof(float))) &&
               (mine[2 * i + 1] = malloc(pairs[i].b->n_elems * sizeof(float)));
    if (have) list = realloc(m->owned, (size_t)(m->n_owned + 2 * n + 1) * sizeof *list);
    if (!rc && !list) {
        for (int i = 0; mine && i < 2 * n + 1; i++) free(mine[i]);
        rc = nc_fail(err, "%s: out of memory for the adapter", path);
    }
    if (!rc) {
        m->owned = list;
        memcpy(list + m->n_owned, mine, (size_t)(2 * n + 1) * sizeof *list);
        m->n_owned += 2 * n + 1;
        model_lora *node = mine[2 * n];
        for (int i = 0; i < n; i++) {
            const pair *p = &pairs[i];
            float *A = mine[2 * i], *B = mine[2 * i + 1];
            floats_of(p->a, A);
            floats_of(p->b, B);
            int32_t rank = (int32_t)p->a->ne[1];
            float s = alpha != 0 ? (float)(scale * alpha / rank) : scale;
            for (int k = 0; k < p->n; k++, node++) {
                *node = (model_lora){.a = A, .b = B + p->off[k] * rank, .ldb = (int32_t)(p->step[k] * rank),
                                     .rank = rank, .scale = s, .next = p->w[k]->lora};
                p->w[k]->lora = node;
            }
        }
        m->n_lora++;
        m->lora_rank = rank_per_layer(m);
    }
    free(mine);
    free(ws);
    free(pairs);
    return rc;
}
