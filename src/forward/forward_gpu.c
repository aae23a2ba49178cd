/* The forward pass on a CUDA GPU (cuda/cuda.h): the same pass as forward.c, top to bottom, with
 * every layer's products, norms, rotation, cache writes and attention on the device. The host
 * keeps what is cheap and shared with the CPU pass: the cache's bookkeeping (kv_cache.c: which
 * cell of which block holds what; the device holds the cells' keys and values, in the same pool
 * slots, f16, [slot][kv_dim] per layer), the embedding lookup and the rotary tables. Per
 * micro-batch the host sends, in one queue of copies from pinned memory, the embedded tokens, the
 * rotary table, each token's cache slot and the list of slots each token sees; it reads back the
 * logits and final hidden states of the tokens that asked.
 *
 * A pass is a few hundred launches, which would cost more than a small model's decode step
 * itself: micro-batches of up to GPU_GRAPH_T tokens run as a CUDA graph captured once per (tokens,
 * outputs) shape and replayed (every buffer the pass reads or writes has a fixed address, so only
 * the data changes). NUCLEUS_CUDA_GRAPHS=0 launches every operation instead.
 *
 * What runs here: dense decoder-only models, their norms before, after or around each block,
 * gated FFNs (SiLU, GELU, gpt-oss's), Q/K/V and output biases, q/k norms per head or over all
 * heads, RoPE on all or some layers (two tables where sliding layers rotate differently),
 * sliding windows (the cache then keeps every position: swa_full), soft-capped scores and
 * logits, and an f16 cache. Experts and attention sinks are refused at set-up (fwd_gpu_init). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward/forward.h"

#ifdef NC_CUDA
#include "cuda/cuda.h"
#include "format/ggml_types.h"

typedef struct gpu_layer {
    cu_mat wq, wk, wv, wo, gate, up, down;
    float *attn_norm, *ffn_norm, *attn_post_norm, *ffn_post_norm;  /* device copies, or NULL */
    float *q_norm, *k_norm, *bq, *bk, *bv, *bo;
    uint16_t *k, *v;                                                /* the layer's cache */
} gpu_layer;

/* What a micro-batch sends: the same layout in pinned host memory and on the device. */
typedef struct gpu_step {
    float *x;                                   /* [n_batch][n_embd] embedded tokens (then the residual stream) */
    float *cs[2], *sn[2];                       /* [n_batch][n_rot / 2] rotary tables (full, sliding layers) */
    int32_t *slots, *rows, *vis_off, *n_vis;    /* [n_batch] cache slot, rows wanting logits, visible slots */
    int32_t *vis_lo;                            /* [n_batch] the first of them a sliding layer sees */
    int32_t *vis;                               /* [vis_cap] the slot lists */
} gpu_step;

#define GPU_GRAPH_T 64 /* micro-batches of at most this many tokens run as graphs */
#define GPU_GRAPHS 8   /* shapes kept */

struct fwd_gpu {
    cu_dev *dev;
    gpu_layer *layers;
    cu_mat output;
    float *output_norm;
    gpu_step dev_step, host_step;
    void *dev_block, *host_block;               /* their allocations */
    int32_t vis_cap;                            /* n_seq * n_ctx: the most slots a micro-batch's lists hold */
    float *xn, *q, *k, *v, *attn, *o, *gate, *up, *logits; /* activations, [n_batch][width] */
    int32_t *h_seq_off;                         /* [n_seq]: where a sequence's list starts, or -1 */
    bool use_graphs;
    struct { int T, n_out; cu_graph *graph; } graphs[GPU_GRAPHS];
    int n_graphs, next_graph;                   /* kept, and the next to replace */
    uint64_t weight_bytes, cache_bytes;
    char mirror_err[256];                       /* a failed copy of cache cells, reported by the next pass */
};

static const model_hparams *hparams(const fwd_state *s) { return &s->m->hp; }

/* The first feature of the model (or cache) the GPU pass lacks, or NULL. */
static const char *missing_feature(const fwd_state *s) {
    const model_hparams *hp = hparams(s);
    const arch_desc *a = hp->arch;
    if (hp->n_expert > 0) return "mixture-of-experts layers";
    if (a->sinks) return "attention sinks";
    if (hp->head_dim > 256) return "heads of more than 256 dimensions";
    if (s->kv.type_k != GGML_TYPE_F16 || s->kv.type_v != GGML_TYPE_F16) return "a KV cache type other than f16";
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &s->m->layers[il];
        const model_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up, &L->ffn_down};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
            if (!w[i]->data || w[i]->transposed) return "a layer without a dense gated FFN";
    }
    return NULL;
}

static int put_floats(fwd_gpu *g, float **dst, const float *src, size_t n, nc_err *err) {
    *dst = NULL;
    if (!src) return 0;
    if (!(*dst = cu_alloc(g->dev, n * sizeof(float), err))) return -1;
    g->weight_bytes += n * sizeof(float);
    return cu_put(g->dev, *dst, src, n * sizeof(float), err);
}

static int put_weight(fwd_gpu *g, cu_mat *m, const model_weight *w, nc_err *err) {
    if (cu_upload(g->dev, m, w->data, w->type, w->rows, w->cols, w->row_bytes, err))
        return nc_fail_prefix(err, "%s", w->name);
    g->weight_bytes += m->bytes;
    return 0;
}

static int upload_layer(fwd_state *s, int il, nc_err *err) {
    fwd_gpu *g = s->gpu;
    const model_hparams *hp = hparams(s);
    const model_layer *L = &s->m->layers[il];
    gpu_layer *G = &g->layers[il];
    size_t E = (size_t)hp->n_embd, Q = (size_t)hp->n_head * hp->head_dim, KV = (size_t)hp->n_head_kv * hp->head_dim;
    /* q/k norms: one of head_dim for every head, or over all heads at once */
    size_t qn = hp->arch->qk_norm == QK_NORM_HEAD ? (size_t)hp->head_dim : Q, kn = qn == Q ? KV : qn;
    bool qk = hp->arch->qk_norm != QK_NORM_NONE;
    if (put_weight(g, &G->wq, &L->wq, err) || put_weight(g, &G->wk, &L->wk, err) || put_weight(g, &G->wv, &L->wv, err) ||
        put_weight(g, &G->wo, &L->wo, err) || put_weight(g, &G->gate, &L->ffn_gate, err) ||
        put_weight(g, &G->up, &L->ffn_up, err) || put_weight(g, &G->down, &L->ffn_down, err) ||
        put_floats(g, &G->attn_norm, L->attn_norm, E, err) || put_floats(g, &G->ffn_norm, L->ffn_norm, E, err) ||
        put_floats(g, &G->attn_post_norm, L->attn_post_norm, E, err) ||
        put_floats(g, &G->ffn_post_norm, L->ffn_post_norm, E, err) ||
        put_floats(g, &G->q_norm, qk ? L->q_norm : NULL, qn, err) || put_floats(g, &G->k_norm, qk ? L->k_norm : NULL, kn, err) ||
        put_floats(g, &G->bq, L->bq, Q, err) || put_floats(g, &G->bk, L->bk, KV, err) ||
        put_floats(g, &G->bv, L->bv, KV, err) || put_floats(g, &G->bo, L->bo, E, err))
        return nc_fail_prefix(err, "layer %d to the GPU", il);
    size_t cache = (size_t)kv_pool_cells(&s->kv) * KV * sizeof(uint16_t);
    if (!(G->k = cu_alloc(g->dev, cache, err)) || !(G->v = cu_alloc(g->dev, cache, err)))
        return nc_fail_prefix(err, "the KV cache of layer %d on the GPU", il);
    g->cache_bytes += 2 * cache;
    return 0;
}

/* The cache's bookkeeping copied or moved cells between blocks (copy-on-write, eviction): the
 * device's cells follow. */
static void mirror_cells(void *ctx, int32_t dst, int32_t to, int32_t src, int32_t from, int32_t n) {
    fwd_state *s = ctx;
    fwd_gpu *g = s->gpu;
    size_t row = (size_t)s->kv.kv_dim * sizeof(uint16_t);
    size_t d0 = ((size_t)dst * KV_BLOCK + (size_t)to) * row, s0 = ((size_t)src * KV_BLOCK + (size_t)from) * row;
    nc_err err = {0};
    for (int il = 0; il < hparams(s)->n_layer && !g->mirror_err[0]; il++) {
        gpu_layer *G = &g->layers[il];
        if (cu_move(g->dev, (uint8_t *)G->k + d0, (uint8_t *)G->k + s0, (size_t)n * row, &err) ||
            cu_move(g->dev, (uint8_t *)G->v + d0, (uint8_t *)G->v + s0, (size_t)n * row, &err))
            snprintf(g->mirror_err, sizeof g->mirror_err, "moving cached cells on the GPU: %.200s", err.msg);
    }
}

/* The micro-batch inputs laid out from `base` (NULL: only their size), into the host or the
 * device copy as base is one or the other; each part 64-byte aligned. Returns the bytes. */
static size_t step_layout(fwd_state *s, void *base) {
    fwd_gpu *g = s->gpu;
    const model_hparams *hp = hparams(s);
    size_t B = (size_t)s->n_batch, half = (size_t)hp->n_rot / 2 + 1, at = 0;
    gpu_step *st = base == g->dev_block ? &g->dev_step : &g->host_step;
    struct { void **p; size_t bytes; } part[] = {
        {(void **)&st->x, B * (size_t)hp->n_embd * 4}, {(void **)&st->cs[0], B * half * 4},
        {(void **)&st->sn[0], B * half * 4}, {(void **)&st->cs[1], B * half * 4}, {(void **)&st->sn[1], B * half * 4},
        {(void **)&st->slots, B * 4}, {(void **)&st->rows, B * 4}, {(void **)&st->vis_off, B * 4},
        {(void **)&st->n_vis, B * 4}, {(void **)&st->vis_lo, B * 4}, {(void **)&st->vis, (size_t)g->vis_cap * 4}};
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) {
        if (base) *part[i].p = (char *)base + at;
        at += (part[i].bytes + 63) / 64 * 64;
    }
    return at;
}

int fwd_gpu_init(fwd_state *s, nc_err *err) {
    const model_hparams *hp = hparams(s);
    const char *missing = missing_feature(s);
    if (missing) return nc_fail(err, "the GPU forward pass does not support %s yet (run on the CPU)", missing);
    fwd_gpu *g = s->gpu = calloc(1, sizeof *g);
    if (!g) return nc_fail(err, "out of memory");
    if (cu_open(&g->dev, err)) return -1;
    g->layers = calloc((size_t)hp->n_layer, sizeof *g->layers);
    if (!g->layers) return nc_fail(err, "out of memory");
    for (int il = 0; il < hp->n_layer; il++)
        if (upload_layer(s, il, err)) return -1;
    if (put_weight(g, &g->output, &s->m->output, err) ||
        put_floats(g, &g->output_norm, s->m->output_norm, (size_t)hp->n_embd, err))
        return nc_fail_prefix(err, "the output projection to the GPU");
    size_t B = (size_t)s->n_batch, E = (size_t)hp->n_embd, Q = (size_t)hp->n_head * hp->head_dim;
    size_t KV = (size_t)hp->n_head_kv * hp->head_dim, F = (size_t)hp->n_ff, V = (size_t)hp->n_vocab;
    struct { float **p; size_t n; } act[] = {{&g->xn, B * E}, {&g->q, B * Q}, {&g->k, B * KV}, {&g->v, B * KV},
                                             {&g->attn, B * Q}, {&g->o, B * E}, {&g->gate, B * F}, {&g->up, B * F},
                                             {&g->logits, B * V}};
    for (size_t i = 0; i < sizeof act / sizeof act[0]; i++)
        if (!(*act[i].p = cu_alloc(g->dev, act[i].n * sizeof(float), err)))
            return nc_fail_prefix(err, "the GPU's activations for micro-batches of %d tokens", s->n_batch);
    size_t widest = E > Q ? E : Q;
    if (F > widest) widest = F;
    if (cu_reserve(g->dev, s->n_batch, (int)widest, err)) return nc_fail_prefix(err, "the GPU's product inputs");
    g->vis_cap = kv_n_seq(&s->kv) * kv_n_ctx(&s->kv);
    size_t bytes = step_layout(s, NULL);
    if (!(g->dev_block = cu_alloc(g->dev, bytes, err)) || !(g->host_block = cu_host_alloc(g->dev, bytes, err)))
        return nc_fail_prefix(err, "the GPU's inputs for micro-batches of %d tokens", s->n_batch);
    step_layout(s, g->dev_block);
    step_layout(s, g->host_block);
    g->h_seq_off = malloc((size_t)kv_n_seq(&s->kv) * sizeof *g->h_seq_off);
    if (!g->h_seq_off) return nc_fail(err, "out of memory");
    const char *graphs = getenv("NUCLEUS_CUDA_GRAPHS");
    g->use_graphs = (!graphs || strcmp(graphs, "0") != 0) && !cu_profiling(g->dev);
    kv_set_mirror(&s->kv, mirror_cells, s);
    return cu_sync(g->dev, err);
}

void fwd_gpu_free(fwd_state *s) {
    fwd_gpu *g = s->gpu;
    if (!g) return;
    if (g->dev) {
        for (int il = 0; g->layers && il < hparams(s)->n_layer; il++) {
            gpu_layer *G = &g->layers[il];
            cu_mat *m[] = {&G->wq, &G->wk, &G->wv, &G->wo, &G->gate, &G->up, &G->down};
            for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) cu_mat_free(g->dev, m[i]);
            float *f[] = {G->attn_norm, G->ffn_norm, G->attn_post_norm, G->ffn_post_norm, G->q_norm, G->k_norm,
                          G->bq, G->bk, G->bv, G->bo};
            for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) cu_free(g->dev, f[i]);
            cu_free(g->dev, G->k);
            cu_free(g->dev, G->v);
        }
        cu_mat_free(g->dev, &g->output);
        void *p[] = {g->output_norm, g->xn, g->q, g->k, g->v, g->attn, g->o, g->gate, g->up, g->logits, g->dev_block};
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) cu_free(g->dev, p[i]);
        cu_host_free(g->dev, g->host_block);
        for (int i = 0; i < g->n_graphs; i++) cu_graph_free(g->graphs[i].graph);
        cu_close(g->dev);
    }
    free(g->layers);
    free(g->h_seq_off);
    free(g);
    s->gpu = NULL;
}

const char *fwd_gpu_describe(const fwd_state *s, char *buf, size_t n) {
    const fwd_gpu *g = s->gpu;
    snprintf(buf, n, "%s; weights %.1f MiB, KV cache %.1f MiB", cu_describe(g->dev), g->weight_bytes / 1048576.0,
             g->cache_bytes / 1048576.0);
    return buf;
}

/* Cells of a sequence holding positions < pos (positions increase along the cells). */
static int32_t cells_below(const kv_cache *kv, int32_t seq, int32_t pos) {
    const int32_t *p = kv_positions(kv, seq);
    int32_t lo = 0, hi = kv_seq_len(kv, seq);
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (p[mid] < pos) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The micro-batch's inputs into pinned memory, and their copies queued: the embedded tokens, the
 * rotary table, each token's slot, and for each sequence of the micro-batch the slots of its
 * cells in order, of which token t sees the first n_vis[t]; the rows of the tokens that want
 * logits (*n_out of them). */
static int send_step(fwd_state *s, const nc_batch_entry *e, int T, int *n_out, nc_err *err) {
    fwd_gpu *g = s->gpu;
    const kv_cache *kv = &s->kv;
    const gpu_step *h = &g->host_step, *d = &g->dev_step;
    size_t E = (size_t)hparams(s)->n_embd, half = (size_t)hparams(s)->n_rot / 2;
    for (int32_t q = 0; q < kv_n_seq(kv); q++) g->h_seq_off[q] = -1;
    int32_t total = 0;
    for (int t = 0; t < T; t++)
        if (g->h_seq_off[e[t].seq] < 0) {
            g->h_seq_off[e[t].seq] = total;
            total += kv_seq_len(kv, e[t].seq);
        }
    if (total > g->vis_cap) /* cannot happen: each sequence holds at most n_ctx cells */
        return nc_fail(err, "%d cache cells seen by one micro-batch: more than %d", total, g->vis_cap);
    for (int32_t q = 0; q < kv_n_seq(kv); q++)
        for (int32_t c = 0, o = g->h_seq_off[q]; o >= 0 && c < kv_seq_len(kv, q); c++) h->vis[o + c] = kv_cell_slot(kv, q, c);
    *n_out = 0;
    for (int t = 0; t < T; t++) {
        h->slots[t] = kv_cell_slot(kv, e[t].seq, s->cells[t]);
        h->vis_off[t] = g->h_seq_off[e[t].seq];
        int32_t window = hparams(s)->swa_window; /* a sliding layer sees (pos - window, pos] */
        h->n_vis[t] = cells_below(kv, e[t].seq, e[t].pos + 1);
        h->vis_lo[t] = window > 0 && e[t].pos >= window ? cells_below(kv, e[t].seq, e[t].pos - window + 1) : 0;
        if (e[t].logits) h->rows[(*n_out)++] = t;
    }
    memcpy(h->x, s->x, (size_t)T * E * sizeof(float));
    int tables = s->n_ropes;
    for (int k = 0; k < tables; k++) {
        memcpy(h->cs[k], s->rope_cos[k], (size_t)T * half * sizeof(float));
        memcpy(h->sn[k], s->rope_sin[k], (size_t)T * half * sizeof(float));
    }
    struct { void *dst; const void *src; size_t bytes; } copy[] = {
        {d->x, h->x, (size_t)T * E * 4}, {d->cs[0], h->cs[0], (size_t)T * half * 4},
        {d->sn[0], h->sn[0], (size_t)T * half * 4}, {d->cs[1], h->cs[1], tables > 1 ? (size_t)T * half * 4 : 0},
        {d->sn[1], h->sn[1], tables > 1 ? (size_t)T * half * 4 : 0}, {d->slots, h->slots, (size_t)T * 4},
        {d->rows, h->rows, (size_t)T * 4}, {d->vis_off, h->vis_off, (size_t)T * 4}, {d->n_vis, h->n_vis, (size_t)T * 4},
        {d->vis_lo, h->vis_lo, (size_t)T * 4}, {d->vis, h->vis, (size_t)total * 4}};
    for (size_t i = 0; i < sizeof copy / sizeof copy[0]; i++)
        if (copy[i].bytes) cu_put_async(g->dev, copy[i].dst, copy[i].src, copy[i].bytes);
    return 0;
}

/* A block's output o (biased) into the residual stream: x += scale * post_norm(o). Without a
 * post-norm the product adds itself (cu_mul's add), so o is never written. */
static void residual(fwd_state *s, const cu_mat *w, const float *in, int ld, int T, const float *bias,
                     const float *post_norm) {
    fwd_gpu *g = s->gpu;
    const model_hparams *hp = hparams(s);
    int E = hp->n_embd;
    if (!post_norm) {
        cu_mul(g->dev, w, in, ld, T, g->dev_step.x, E, bias, true, hp->residual_scale);
        return;
    }
    cu_mul(g->dev, w, in, ld, T, g->o, E, bias, false, 1.0f);
    cu_norm_add(g->dev, g->dev_step.x, g->o, post_norm, E, T, hp->norm_eps, hp->residual_scale);
}

static void layer(fwd_state *s, int il, int T) {
    fwd_gpu *g = s->gpu;
    cu_dev *d = g->dev;
    const model_hparams *hp = hparams(s);
    const model_layer *L = &s->m->layers[il];
    const gpu_layer *G = &g->layers[il];
    const gpu_step *st = &g->dev_step;
    int E = hp->n_embd, hd = hp->head_dim, Q = hp->n_head * hd, KV = hp->n_head_kv * hd, F = hp->n_ff;
    int table = L->sliding && s->n_ropes > 1;
    static const int act[] = {[ACT_SILU] = KERNELS_SILU, [ACT_GELU_TANH] = KERNELS_GELU_TANH,
                              [ACT_SWIGLU_OAI] = KERNELS_SILU_OAI};
    /* attention */
    cu_rms_norm(d, g->xn, st->x, NULL, G->attn_norm, E, T, hp->norm_eps);
    cu_mul_n(d, g->xn, E, T,
             (cu_out[]){{&G->wq, g->q, Q, G->bq, false, 1.0f}, {&G->wk, g->k, KV, G->bk, false, 1.0f},
                        {&G->wv, g->v, KV, G->bv, false, 1.0f}}, 3);
    if (G->q_norm && hp->arch->qk_norm == QK_NORM_HEAD) { /* per head: T * heads rows of head_dim */
        cu_rms_norm(d, g->q, g->q, NULL, G->q_norm, hd, T * hp->n_head, hp->norm_eps);
        cu_rms_norm(d, g->k, g->k, NULL, G->k_norm, hd, T * hp->n_head_kv, hp->norm_eps);
    } else if (G->q_norm) { /* over all heads of a token (OLMo 2) */
        cu_rms_norm(d, g->q, g->q, NULL, G->q_norm, Q, T, hp->norm_eps);
        cu_rms_norm(d, g->k, g->k, NULL, G->k_norm, KV, T, hp->norm_eps);
    }
    if (L->rope) {
        cu_rope(d, g->q, Q, T, hp->n_head, hd, hp->n_rot, hp->rope_neox, st->cs[table], st->sn[table]);
        cu_rope(d, g->k, KV, T, hp->n_head_kv, hd, hp->n_rot, hp->rope_neox, st->cs[table], st->sn[table]);
    }
    cu_kv_store(d, G->k, G->v, g->k, g->v, KV, T, KV, st->slots);
    cu_attention(d, g->attn, g->q, G->k, G->v, T, hp->n_head, hp->n_head_kv, hd, hp->attn_scale, hp->attn_softcap,
                 st->vis, st->vis_off, L->sliding ? st->vis_lo : NULL, st->n_vis);
    residual(s, &G->wo, g->attn, Q, T, G->bo, G->attn_post_norm);
    /* feed-forward */
    cu_rms_norm(d, g->xn, st->x, NULL, G->ffn_norm, E, T, hp->norm_eps);
    cu_mul_n(d, g->xn, E, T, (cu_out[]){{&G->gate, g->gate, F, NULL, false, 1.0f}, {&G->up, g->up, F, NULL, false, 1.0f}}, 2);
    cu_glu(d, act[hp->arch->act], g->gate, g->gate, g->up, (size_t)T * F);
    residual(s, &G->down, g->gate, F, T, NULL, G->ffn_post_norm);
}

/* Every layer, then the final norm and the output projection of the n_out rows that want logits. */
static void pass(fwd_state *s, int T, int n_out) {
    fwd_gpu *g = s->gpu;
    const model_hparams *hp = hparams(s);
    for (int il = 0; il < hp->n_layer; il++) layer(s, il, T);
    if (n_out == 0) return;
    cu_rms_norm(g->dev, g->xn, g->dev_step.x, g->dev_step.rows, g->output_norm, hp->n_embd, n_out, hp->norm_eps);
    /* soft-capped logits are scaled inside the cap, on the host (fwd_gpu_batch) */
    float scale = hp->final_softcap > 0 ? 1.0f : hp->logit_scale;
    cu_mul(g->dev, &g->output, g->xn, hp->n_embd, n_out, g->logits, hp->n_vocab, NULL, false, scale);
}

/* The pass as a graph: the one captured for this shape, else captured now (replacing the oldest
 * when GPU_GRAPHS are kept). */
static int run_pass(fwd_state *s, int T, int n_out, nc_err *err) {
    fwd_gpu *g = s->gpu;
    if (!g->use_graphs || T > GPU_GRAPH_T) {
        pass(s, T, n_out);
        return 0;
    }
    cu_graph *graph = NULL;
    for (int i = 0; i < g->n_graphs && !graph; i++)
        if (g->graphs[i].T == T && g->graphs[i].n_out == n_out) graph = g->graphs[i].graph;
    if (!graph) {
        if (cu_capture_begin(g->dev, err)) return -1;
        pass(s, T, n_out);
        if (cu_capture_end(g->dev, &graph, err)) return -1;
        int i = g->n_graphs < GPU_GRAPHS ? g->n_graphs++ : g->next_graph++ % GPU_GRAPHS;
        cu_graph_free(g->graphs[i].graph);
        g->graphs[i].T = T;
        g->graphs[i].n_out = n_out;
        g->graphs[i].graph = graph;
    }
    cu_graph_run(g->dev, graph);
    return 0;
}

int fwd_gpu_batch(fwd_state *s, const nc_batch_entry *e, int T, int first_entry, nc_err *err) {
    fwd_gpu *g = s->gpu;
    cu_dev *d = g->dev;
    const model_hparams *hp = hparams(s);
    int E = hp->n_embd, V = hp->n_vocab, n_out = 0;
    if (g->mirror_err[0]) return nc_fail(err, "%s", g->mirror_err);
    for (int t = 0; t < T; t++)
        if (kv_scoring(&s->kv, e[t].seq))
            return nc_fail(err, "sequence %d: H2O eviction needs attention scores, which the GPU pass does not keep",
                           e[t].seq);
    if (send_step(s, e, T, &n_out, err) || run_pass(s, T, n_out, err)) {
        cu_sync(d, NULL);
        return -1;
    }
    if (n_out > 0) {
        int row0 = -1; /* the logits' row of the first token that wants them */
        for (int t = 0; row0 < 0; t++)
            if (e[t].logits) row0 = s->logit_row[first_entry + t];
        if (cu_get(d, s->hidden + (size_t)row0 * E, g->xn, (size_t)n_out * E * sizeof(float), err) ||
            cu_get(d, s->logits + (size_t)row0 * V, g->logits, (size_t)n_out * V * sizeof(float), err))
            return -1;
        for (int i = 0; hp->final_softcap > 0 && i < n_out; i++) /* Gemma 2: cap * tanh(logit * scale / cap) */
            kernels_softcap(s->logits + (size_t)(row0 + i) * V, V, hp->logit_scale, hp->final_softcap);
    }
    return cu_sync(d, err);
}

#else /* a build without CUDA */

int fwd_gpu_init(fwd_state *s, nc_err *err) {
    return nc_fail(err, "this nucleus was built without the CUDA backend (build it with `make CUDA=1`)");
}
void fwd_gpu_free(fwd_state *s) {}
const char *fwd_gpu_describe(const fwd_state *s, char *buf, size_t n) { return ""; }
int fwd_gpu_batch(fwd_state *s, const nc_batch_entry *e, int T, int first_entry, nc_err *err) {
    return nc_fail(err, "this nucleus was built without the CUDA backend");
}

#endif
