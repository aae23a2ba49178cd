/* The forward pass on a CUDA GPU (cuda/cuda.h): the same pass as forward.c, top to bottom, with
 * every layer's products, norms, rotation, cache writes and attention on the device. The host
 * keeps what is cheap and shared with the CPU pass: the cache's bookkeeping (kv_cache.c: which
 * cell of which block holds what; the device holds the cells' keys and values, in the same pool
 * slots, a row per slot in the cache's types, as kv_cache.c stores rows), the embedding lookup
 * and the rotary tables. Per
 * micro-batch the host sends, in one queue of copies from pinned memory, the embedded tokens, the
 * rotary table, each token's cache slot and the list of slots each token sees; it reads back the
 * logits and final hidden states of the tokens that asked.
 *
 * A pass is a few hundred launches, which would cost more than a small model's decode step
 * itself: micro-batches of up to GPU_GRAPH_T tokens run as a CUDA graph captured once per (tokens,
 * outputs) shape and replayed (every buffer the pass reads or writes has a fixed address, so only
 * the data changes). NUCLEUS_CUDA_GRAPHS=0 launches every operation instead.
 *
 * The GPU takes the last layers, gpu_first.. (every layer when it is 0), and the output
 * projection; the CPU pass runs the layers before, and its residual stream is what the GPU pass
 * starts from. The cache's cells of each layer live where the layer runs.
 *
 * What runs here: dense decoder-only models, their norms before, after or around each block,
 * gated FFNs (SiLU, GELU, gpt-oss's), Q/K/V and output biases, q/k norms per head or over all
 * heads, RoPE on all or some layers (two tables where sliding layers rotate differently),
 * sliding windows (the cache then keeps every position: swa_full), soft-capped scores and
 * logits, attention sinks, and every cache type. A mixture of experts routes on the host (the
 * router's logits come back, fwd_route chooses as on the CPU), then each expert that has tokens
 * runs its products over them, gathered, and a kernel combines each token's experts in slot
 * order; the round trip per layer rules out graphs for such models. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward/forward.h"

#ifdef NC_CUDA
#include "cuda/cuda.h"
#include "format/ggml_types.h"
#include "tensor/quant.h"

typedef struct gpu_layer {
    cu_mat wq, wk, wv, wo, gate, up, down;
    float *attn_norm, *ffn_norm, *attn_post_norm, *ffn_post_norm;  /* device copies, or NULL */
    float *q_norm, *k_norm, *bq, *bk, *bv, *bo, *sinks;
    uint8_t *k, *v;                                                 /* the layer's cache (cu_cache) */
    /* experts: the router and n_expert of each matrix (gate and up, or fused), their biases */
    cu_mat router, *exp_gate, *exp_up, *exp_gate_up, *exp_down;
    float *exp_gate_b, *exp_up_b, *exp_gate_up_b, *exp_down_b;
} gpu_layer;

/* A micro-batch's expert work: (token, slot) rows grouped by expert. */
typedef struct gpu_moe {
    float *logits;                              /* [n_batch][n_expert] router outputs */
    float *in, *gate, *up, *gate_up, *act, *out; /* per row: inputs, products, activations, outputs */
    float *weight;                              /* [n_batch][k] the slots' weights */
    int32_t *token, *row;                       /* [rows] each row's token; [n_batch][k] each slot's row */
    int32_t *h_token, *h_row, *start, *next;    /* host copies; [n_expert + 1] first row of each expert, a cursor */
} gpu_moe;

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
    gpu_moe moe;
    int32_t *h_seq_off;                         /* [n_seq]: where a sequence's list starts, or -1 */
    bool use_graphs;
    struct { int T, n_out; cu_graph *graph; } graphs[GPU_GRAPHS];
    int n_graphs, next_graph;                   /* kept, and the next to replace */
    uint64_t weight_bytes, cache_bytes;
    char mirror_err[256];                       /* a failed copy of cache cells, reported by the next pass */
};

static const model_hparams *hparams(const fwd_state *s) { return &s->m->hp; }

/* Layer il's cache on the device. */
static cu_cache cache_of(const fwd_state *s, int il) {
    return (cu_cache){s->gpu->layers[il].k, s->gpu->layers[il].v, s->kv.type_k, s->kv.type_v, s->kv.kv_dim};
}

/* The first feature of the model (or cache) the GPU pass lacks, or NULL. */
static const char *missing_feature(const fwd_state *s) {
    const model_hparams *hp = hparams(s);
    if (hp->head_dim > 256) return "heads of more than 256 dimensions";
    if (s->kv.kv_dim > CU_MAX_KV_DIM) return "KV rows wider than CU_MAX_KV_DIM";
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &s->m->layers[il];
        const model_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up, &L->ffn_down};
        for (size_t i = 0; !L->router.data && i < sizeof w / sizeof w[0]; i++)
            if (!w[i]->data) return "a layer without a gated FFN";
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
    int rc;
    if (w->transposed) { /* stored input by input (Hugging Face's expert tensors): rows made here, as F32 */
        size_t size = w->type == GGML_TYPE_F32 ? 4 : 2;
        float *rows = malloc((size_t)w->rows * w->cols * sizeof *rows);
        if (!rows) return nc_fail(err, "%s: out of memory", w->name);
        for (int32_t k = 0; k < w->cols; k++)
            for (int32_t r = 0; r < w->rows; r++)
                quant_dequantize_row(w->type, (const char *)w->data + (size_t)k * w->row_bytes + (size_t)r * size,
                                     rows + (size_t)r * w->cols + k, 1);
        rc = cu_upload(g->dev, m, rows, GGML_TYPE_F32, w->rows, w->cols, (size_t)w->cols * 4, err);
        free(rows);
    } else {
        rc = cu_upload(g->dev, m, w->data, w->type, w->rows, w->cols, w->row_bytes, err);
    }
    if (rc) return nc_fail_prefix(err, "%s", w->name);
    g->weight_bytes += m->bytes;
    return 0;
}

/* n_expert of one expert matrix (or none: NULL) into *out. */
static int put_experts(fwd_gpu *g, cu_mat **out, const model_weight *w, int n, nc_err *err) {
    *out = NULL;
    if (!w) return 0;
    if (!(*out = calloc((size_t)n, sizeof **out))) return nc_fail(err, "out of memory");
    for (int e = 0; e < n; e++)
        if (put_weight(g, &(*out)[e], &w[e], err)) return -1;
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
        put_floats(g, &G->bv, L->bv, KV, err) || put_floats(g, &G->bo, L->bo, E, err) ||
        put_floats(g, &G->sinks, L->sinks, (size_t)hp->n_head, err))
        return nc_fail_prefix(err, "layer %d to the GPU", il);
    if (L->router.data) {
        size_t N = (size_t)hp->n_expert, FE = (size_t)hp->n_ff_exp;
        if (put_weight(g, &G->router, &L->router, err) || put_experts(g, &G->exp_gate, L->exp_gate, hp->n_expert, err) ||
            put_experts(g, &G->exp_up, L->exp_up, hp->n_expert, err) ||
            put_experts(g, &G->exp_gate_up, L->exp_gate_up, hp->n_expert, err) ||
            put_experts(g, &G->exp_down, L->exp_down, hp->n_expert, err) ||
            put_floats(g, &G->exp_gate_b, L->exp_gate_b, N * FE, err) || put_floats(g, &G->exp_up_b, L->exp_up_b, N * FE, err) ||
            put_floats(g, &G->exp_gate_up_b, L->exp_gate_up_b, N * 2 * FE, err) ||
            put_floats(g, &G->exp_down_b, L->exp_down_b, N * E, err))
            return nc_fail_prefix(err, "the experts of layer %d to the GPU", il);
    }
    size_t ck = (size_t)kv_pool_cells(&s->kv) * kv_k_row_bytes(&s->kv), cv = (size_t)kv_pool_cells(&s->kv) * kv_v_row_bytes(&s->kv);
    if (!(G->k = cu_alloc(g->dev, ck, err)) || !(G->v = cu_alloc(g->dev, cv, err)))
        return nc_fail_prefix(err, "the KV cache of layer %d on the GPU", il);
    g->cache_bytes += ck + cv;
    return 0;
}

/* The cache's bookkeeping copied or moved cells between blocks (copy-on-write, eviction): the
 * device's cells follow. */
static void mirror_cells(void *ctx, int32_t dst, int32_t to, int32_t src, int32_t from, int32_t n) {
    fwd_state *s = ctx;
    fwd_gpu *g = s->gpu;
    size_t kr = kv_k_row_bytes(&s->kv), vr = kv_v_row_bytes(&s->kv);
    size_t d0 = (size_t)dst * KV_BLOCK + (size_t)to, s0 = (size_t)src * KV_BLOCK + (size_t)from; /* slots */
    nc_err err = {0};
    for (int il = s->gpu_first; il < hparams(s)->n_layer && !g->mirror_err[0]; il++) {
        gpu_layer *G = &g->layers[il];
        if (cu_move(g->dev, G->k + d0 * kr, G->k + s0 * kr, (size_t)n * kr, &err) ||
            cu_move(g->dev, G->v + d0 * vr, G->v + s0 * vr, (size_t)n * vr, &err))
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
    for (int il = s->gpu_first; il < hp->n_layer; il++)
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
    size_t widest = E > Q ? E : Q, K = (size_t)hp->n_expert_used, FE = (size_t)hp->n_ff_exp, R = B * K;
    if (F > widest) widest = F;
    if (FE > widest) widest = FE;
    /* an expert's products take up to every (token, slot) row of the micro-batch */
    if (cu_reserve(g->dev, hp->n_expert > 0 ? (int)R : s->n_batch, (int)widest, err))
        return nc_fail_prefix(err, "the GPU's product inputs");
    if (hp->n_expert > 0) {
        gpu_moe *mo = &g->moe;
        struct { float **p; size_t n; } buf[] = {{&mo->logits, B * (size_t)hp->n_expert}, {&mo->in, R * E},
                                                 {&mo->gate, R * FE}, {&mo->up, R * FE}, {&mo->gate_up, R * 2 * FE},
                                                 {&mo->act, R * FE}, {&mo->out, R * E}, {&mo->weight, R}};
        for (size_t i = 0; i < sizeof buf / sizeof buf[0]; i++)
            if (!(*buf[i].p = cu_alloc(g->dev, buf[i].n * sizeof(float), err)))
                return nc_fail_prefix(err, "the GPU's expert buffers");
        if (!(mo->token = cu_alloc(g->dev, R * 4, err)) || !(mo->row = cu_alloc(g->dev, R * 4, err)))
            return nc_fail_prefix(err, "the GPU's expert buffers");
        mo->h_token = malloc(R * sizeof *mo->h_token);
        mo->h_row = malloc(R * sizeof *mo->h_row);
        mo->start = malloc(((size_t)hp->n_expert + 1) * sizeof *mo->start);
        mo->next = malloc((size_t)hp->n_expert * sizeof *mo->next);
        if (!mo->h_token || !mo->h_row || !mo->start || !mo->next) return nc_fail(err, "out of memory");
    }
    g->vis_cap = kv_n_seq(&s->kv) * kv_n_ctx(&s->kv);
    size_t bytes = step_layout(s, NULL);
    if (!(g->dev_block = cu_alloc(g->dev, bytes, err)) || !(g->host_block = cu_host_alloc(g->dev, bytes, err)))
        return nc_fail_prefix(err, "the GPU's inputs for micro-batches of %d tokens", s->n_batch);
    step_layout(s, g->dev_block);
    step_layout(s, g->host_block);
    g->h_seq_off = malloc((size_t)kv_n_seq(&s->kv) * sizeof *g->h_seq_off);
    if (!g->h_seq_off) return nc_fail(err, "out of memory");
    const char *graphs = getenv("NUCLEUS_CUDA_GRAPHS");
    g->use_graphs = (!graphs || strcmp(graphs, "0") != 0) && !cu_profiling(g->dev) && hp->n_expert == 0;
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
            cu_free(g->dev, G->sinks);
            cu_mat_free(g->dev, &G->router);
            cu_mat *ex[] = {G->exp_gate, G->exp_up, G->exp_gate_up, G->exp_down};
            for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
                for (int e = 0; ex[i] && e < hparams(s)->n_expert; e++) cu_mat_free(g->dev, &ex[i][e]);
                free(ex[i]);
            }
            float *eb[] = {G->exp_gate_b, G->exp_up_b, G->exp_gate_up_b, G->exp_down_b};
            for (size_t i = 0; i < sizeof eb / sizeof eb[0]; i++) cu_free(g->dev, eb[i]);
        }
        gpu_moe *mo = &g->moe;
        void *mp[] = {mo->logits, mo->in, mo->gate, mo->up, mo->gate_up, mo->act, mo->out, mo->weight, mo->token, mo->row};
        for (size_t i = 0; i < sizeof mp / sizeof mp[0]; i++) cu_free(g->dev, mp[i]);
        cu_mat_free(g->dev, &g->output);
        void *p[] = {g->output_norm, g->xn, g->q, g->k, g->v, g->attn, g->o, g->gate, g->up, g->logits, g->dev_block};
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) cu_free(g->dev, p[i]);
        cu_host_free(g->dev, g->host_block);
        for (int i = 0; i < g->n_graphs; i++) cu_graph_free(g->graphs[i].graph);
        cu_close(g->dev);
    }
    free(g->layers);
    free(g->h_seq_off);
    free(g->moe.h_token);
    free(g->moe.h_row);
    free(g->moe.start);
    free(g->moe.next);
    free(g);
    s->gpu = NULL;
}

const char *fwd_gpu_describe(const fwd_state *s, char *buf, size_t n) {
    const fwd_gpu *g = s->gpu;
    int L = hparams(s)->n_layer;
    char layers[64] = "every layer";
    if (s->gpu_first > 0) snprintf(layers, sizeof layers, "layers %d-%d of %d", s->gpu_first, L - 1, L);
    snprintf(buf, n, "%s; %s and the output, weights %.1f MiB, KV cache %.1f MiB", cu_describe(g->dev), layers,
             g->weight_bytes / 1048576.0, g->cache_bytes / 1048576.0);
    return buf;
}

/* Cells of a sequence holding positions < pos (positions increase along the cells). */
static int32_t cells_below(const kv_cache *kv, int32_t seq, int32_t pos) {
    return fwd_lower_bound(kv_positions(kv, seq), kv_seq_len(kv, seq), pos);
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
 * post-norm the product adds itself (cu_out's add), so o is never written. ready: in was quantised
 * by the operation that wrote it (cu_mul_n). */
static void residual(fwd_state *s, const cu_mat *w, const float *in, int ld, int T, const float *bias,
                     const float *post_norm, bool ready) {
    fwd_gpu *g = s->gpu;
    const model_hparams *hp = hparams(s);
    int E = hp->n_embd;
    if (!post_norm) {
        cu_mul_n(g->dev, in, ld, T, (cu_out[]){{w, g->dev_step.x, E, bias, true, hp->residual_scale}}, 1, ready);
        return;
    }
    cu_mul_n(g->dev, in, ld, T, (cu_out[]){{w, g->o, E, bias, false, 1.0f}}, 1, ready);
    cu_norm_add(g->dev, g->dev_step.x, g->o, post_norm, E, T, hp->norm_eps, hp->residual_scale);
}

static const int glu_kind[] = {[ACT_SILU] = KERNELS_SILU, [ACT_GELU_TANH] = KERNELS_GELU_TANH,
                               [ACT_SWIGLU_OAI] = KERNELS_SILU_OAI};

/* The experts' FFN of layer il (see the head of this file); -1 when the router's logits do not
 * come back. */
static int moe_ffn(fwd_state *s, int il, int T, nc_err *err) {
    fwd_gpu *g = s->gpu;
    cu_dev *d = g->dev;
    gpu_moe *mo = &g->moe;
    const model_hparams *hp = hparams(s);
    const gpu_layer *G = &g->layers[il];
    int E = hp->n_embd, N = hp->n_expert, K = hp->n_expert_used, FE = hp->n_ff_exp, act = glu_kind[hp->arch->act];
    cu_rms_norm(d, g->xn, g->dev_step.x, NULL, G->ffn_norm, E, T, hp->norm_eps, false);
    cu_mul(d, &G->router, g->xn, E, T, mo->logits, N, NULL, false, 1.0f);
    if (cu_get(d, s->moe.logits, mo->logits, (size_t)T * N * sizeof(float), err)) return -1;
    for (int t = 0; t < T; t++) fwd_route(s, &s->m->layers[il], t);
    /* the rows grouped by expert, tokens in order within each (a counting sort) */
    memset(mo->start, 0, ((size_t)N + 1) * sizeof *mo->start);
    for (int i = 0; i < T * K; i++) mo->start[s->moe.expert[i] + 1]++;
    for (int e = 0; e < N; e++) mo->start[e + 1] += mo->start[e];
    memcpy(mo->next, mo->start, (size_t)N * sizeof *mo->next);
    for (int i = 0; i < T * K; i++) {
        int r = mo->next[s->moe.expert[i]]++;
        mo->h_row[i] = r;
        mo->h_token[r] = i / K;
    }
    if (cu_put(d, mo->token, mo->h_token, (size_t)T * K * 4, err) || cu_put(d, mo->row, mo->h_row, (size_t)T * K * 4, err) ||
        cu_put(d, mo->weight, s->moe.weight, (size_t)T * K * 4, err))
        return -1;
    cu_gather(d, mo->in, g->xn, mo->token, T * K, E);
    for (int e = 0; e < N; e++) {
        int first = mo->start[e], n = mo->start[e + 1] - first;
        if (n == 0) continue;
        const float *in = mo->in + (size_t)first * E;
        float *a = mo->act + (size_t)first * FE;
        if (G->exp_gate) {
            float *gt = mo->gate + (size_t)first * FE, *up = mo->up + (size_t)first * FE;
            cu_mul_n(d, in, E, n,
                     (cu_out[]){{&G->exp_gate[e], gt, FE, G->exp_gate_b ? G->exp_gate_b + (size_t)e * FE : NULL, false, 1.0f},
                                {&G->exp_up[e], up, FE, G->exp_up_b ? G->exp_up_b + (size_t)e * FE : NULL, false, 1.0f}},
                     2, false);
            cu_glu(d, act, a, gt, up, n, FE, FE, 1, false);
        } else { /* fused: gate and up rows interleaved, or gate's then up's */
            float *gu = mo->gate_up + (size_t)first * 2 * FE;
            bool inter = hp->gate_up == GATE_UP_INTERLEAVED;
            cu_mul(d, &G->exp_gate_up[e], in, E, n, gu, 2 * FE,
                   G->exp_gate_up_b ? G->exp_gate_up_b + (size_t)e * 2 * FE : NULL, false, 1.0f);
            cu_glu(d, act, a, gu, gu + (inter ? 1 : FE), n, FE, 2 * FE, inter ? 2 : 1, false);
        }
        cu_mul(d, &G->exp_down[e], a, FE, n, mo->out + (size_t)first * E, E,
               G->exp_down_b ? G->exp_down_b + (size_t)e * E : NULL, false, 1.0f);
    }
    cu_combine(d, g->o, mo->out, mo->row, mo->weight, T, K, E);
    cu_norm_add(d, g->dev_step.x, g->o, G->ffn_post_norm, E, T, hp->norm_eps, hp->residual_scale);
    return 0;
}

static int layer(fwd_state *s, int il, int T, nc_err *err) {
    fwd_gpu *g = s->gpu;
    cu_dev *d = g->dev;
    const model_hparams *hp = hparams(s);
    const model_layer *L = &s->m->layers[il];
    const gpu_layer *G = &g->layers[il];
    const gpu_step *st = &g->dev_step;
    int E = hp->n_embd, hd = hp->head_dim, Q = hp->n_head * hd, KV = hp->n_head_kv * hd, F = hp->n_ff;
    int table = L->sliding && s->n_ropes > 1;
    /* attention */
    /* each quantised product's input quantised by the operation that writes it (ready) where it
     * can be */
    bool ready = cu_rms_norm(d, g->xn, st->x, NULL, G->attn_norm, E, T, hp->norm_eps,
                             cu_quantised(&G->wq) || cu_quantised(&G->wk) || cu_quantised(&G->wv));
    cu_mul_n(d, g->xn, E, T,
             (cu_out[]){{&G->wq, g->q, Q, G->bq, false, 1.0f}, {&G->wk, g->k, KV, G->bk, false, 1.0f},
                        {&G->wv, g->v, KV, G->bv, false, 1.0f}}, 3, ready);
    if (G->q_norm && hp->arch->qk_norm == QK_NORM_HEAD) { /* per head: T * heads rows of head_dim */
        cu_rms_norm(d, g->q, g->q, NULL, G->q_norm, hd, T * hp->n_head, hp->norm_eps, false);
        cu_rms_norm(d, g->k, g->k, NULL, G->k_norm, hd, T * hp->n_head_kv, hp->norm_eps, false);
    } else if (G->q_norm) { /* over all heads of a token (OLMo 2) */
        cu_rms_norm(d, g->q, g->q, NULL, G->q_norm, Q, T, hp->norm_eps, false);
        cu_rms_norm(d, g->k, g->k, NULL, G->k_norm, KV, T, hp->norm_eps, false);
    }
    const cu_rope rope = {hd, hp->n_rot, hp->rope_neox, st->cs[table], st->sn[table]};
    cu_kv_store(d, cache_of(s, il), L->rope ? &rope : NULL, g->q, Q, hp->n_head, g->k, g->v, KV, T, st->slots);
    ready = cu_attention(d, g->attn, g->q, cache_of(s, il), T, hp->n_head, hd, hp->attn_scale, hp->attn_softcap, G->sinks,
                         st->vis, st->vis_off, L->sliding ? st->vis_lo : NULL, st->n_vis, cu_quantised(&G->wo));
    residual(s, &G->wo, g->attn, Q, T, G->bo, G->attn_post_norm, ready);
    /* feed-forward */
    if (L->router.data) return moe_ffn(s, il, T, err);
    ready = cu_rms_norm(d, g->xn, st->x, NULL, G->ffn_norm, E, T, hp->norm_eps,
                        cu_quantised(&G->gate) || cu_quantised(&G->up));
    cu_mul_n(d, g->xn, E, T, (cu_out[]){{&G->gate, g->gate, F, NULL, false, 1.0f}, {&G->up, g->up, F, NULL, false, 1.0f}}, 2,
             ready);
    ready = cu_glu(d, glu_kind[hp->arch->act], g->gate, g->gate, g->up, T, F, F, 1, cu_quantised(&G->down));
    residual(s, &G->down, g->gate, F, T, NULL, G->ffn_post_norm, ready);
    return 0;
}

/* Every layer, then the final norm and the output projection of the n_out rows that want logits. */
static int pass(fwd_state *s, int T, int n_out, nc_err *err) {
    fwd_gpu *g = s->gpu;
    const model_hparams *hp = hparams(s);
    for (int il = s->gpu_first; il < hp->n_layer; il++)
        if (layer(s, il, T, err)) return -1;
    if (n_out == 0) return 0;
    cu_rms_norm(g->dev, g->xn, g->dev_step.x, g->dev_step.rows, g->output_norm, hp->n_embd, n_out, hp->norm_eps, false);
    /* soft-capped logits are scaled inside the cap, on the host (fwd_gpu_batch) */
    float scale = hp->final_softcap > 0 ? 1.0f : hp->logit_scale;
    cu_mul(g->dev, &g->output, g->xn, hp->n_embd, n_out, g->logits, hp->n_vocab, NULL, false, scale);
    return 0;
}

/* The pass as a graph: the one captured for this shape, else captured now (replacing the oldest
 * when GPU_GRAPHS are kept). */
static int run_pass(fwd_state *s, int T, int n_out, nc_err *err) {
    fwd_gpu *g = s->gpu;
    if (!g->use_graphs || T > GPU_GRAPH_T) return pass(s, T, n_out, err);
    cu_graph *graph = NULL;
    for (int i = 0; i < g->n_graphs && !graph; i++)
        if (g->graphs[i].T == T && g->graphs[i].n_out == n_out) graph = g->graphs[i].graph;
    if (!graph) {
        if (cu_capture_begin(g->dev, err)) return -1;
        if (pass(s, T, n_out, err)) { /* a dense pass does not fail; end the capture all the same */
            cu_capture_end(g->dev, &graph, NULL);
            cu_graph_free(graph);
            return -1;
        }
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

int fwd_gpu_cache_sync(fwd_state *s, int32_t seq, int32_t n, bool to_host, nc_err *err) {
    fwd_gpu *g = s->gpu;
    kv_cache *kv = &s->kv;
    size_t kr = kv_k_row_bytes(kv), vr = kv_v_row_bytes(kv);
    if (n <= 0) return 0;
    int32_t *slots = malloc((size_t)n * sizeof *slots), *dslots = NULL;
    uint8_t *hk = malloc((size_t)n * kr), *hv = malloc((size_t)n * vr), *tmp = NULL;
    int rc = slots && hk && hv ? 0 : nc_fail(err, "out of memory");
    for (int32_t c = 0; rc == 0 && c < n; c++) slots[c] = kv_cell_slot(kv, seq, c);
    if (rc == 0 && (!(dslots = cu_alloc(g->dev, (size_t)n * 4, err)) ||
                    !(tmp = cu_alloc(g->dev, (size_t)n * (kr > vr ? kr : vr), err)) ||
                    cu_put(g->dev, dslots, slots, (size_t)n * 4, err)))
        rc = -1;
    for (int il = s->gpu_first; rc == 0 && il < hparams(s)->n_layer; il++) {
        uint8_t *k = g->layers[il].k, *v = g->layers[il].v;
        if (to_host) { /* the sequence's rows gathered, then brought over */
            cu_rows(g->dev, tmp, k, NULL, dslots, n, kr);
            rc = cu_get(g->dev, hk, tmp, (size_t)n * kr, err);
            if (rc == 0) cu_rows(g->dev, tmp, v, NULL, dslots, n, vr);
            if (rc == 0) rc = cu_get(g->dev, hv, tmp, (size_t)n * vr, err);
            for (int32_t c = 0; rc == 0 && c < n; c++) kv_write_row(kv, il, seq, c, hk + (size_t)c * kr, hv + (size_t)c * vr);
        } else { /* sent over, then scattered to the sequence's slots (cu_put waits, so tmp is free again) */
            for (int32_t c = 0; c < n; c++) kv_read_row(kv, il, seq, c, hk + (size_t)c * kr, hv + (size_t)c * vr);
            rc = cu_put(g->dev, tmp, hk, (size_t)n * kr, err);
            if (rc == 0) cu_rows(g->dev, k, tmp, dslots, NULL, n, kr);
            if (rc == 0) rc = cu_put(g->dev, tmp, hv, (size_t)n * vr, err);
            if (rc == 0) cu_rows(g->dev, v, tmp, dslots, NULL, n, vr);
        }
    }
    if (rc == 0) rc = cu_sync(g->dev, err);
    cu_free(g->dev, dslots);
    cu_free(g->dev, tmp);
    free(slots);
    free(hk);
    free(hv);
    return rc;
}

int fwd_gpu_turn_keys(fwd_state *s, int32_t seq, int32_t n, const int32_t *new_pos, const int32_t *old,
                      const float *cs, nc_err *err) {
    fwd_gpu *g = s->gpu;
    const model_hparams *hp = hparams(s);
    size_t half = (size_t)hp->n_rot / 2;
    int32_t *slots = malloc(((size_t)n + 1) * sizeof *slots), m = 0;
    float *tab = malloc(((size_t)n * half * 2 * (size_t)s->n_ropes + 1) * sizeof *tab);
    int32_t *dslots = NULL;
    float *dtab = NULL;
    int rc = slots && tab ? 0 : nc_fail(err, "out of memory");
    /* the moved cells, and their rows of each table: cos then sin, table by table */
    for (int32_t c = 0; rc == 0 && c < n; c++)
        if (new_pos[c] != old[c]) slots[m++] = kv_cell_slot(&s->kv, seq, c);
    for (int k = 0, i = 0; rc == 0 && k < s->n_ropes; k++, i = 0)
        for (int32_t c = 0; c < n; c++)
            if (new_pos[c] != old[c]) {
                const float *row = cs + (((size_t)k * n + c) * 2) * half;
                memcpy(tab + ((size_t)k * 2 * m + i) * half, row, half * sizeof *tab);
                memcpy(tab + ((size_t)k * 2 * m + m + i) * half, row + half, half * sizeof *tab);
                i++;
            }
    if (rc == 0 && m > 0) {
        size_t tab_bytes = (size_t)m * half * 2 * (size_t)s->n_ropes * sizeof *tab;
        if (!(dslots = cu_alloc(g->dev, (size_t)m * sizeof *slots, err)) || !(dtab = cu_alloc(g->dev, tab_bytes, err)) ||
            cu_put(g->dev, dslots, slots, (size_t)m * sizeof *slots, err) || cu_put(g->dev, dtab, tab, tab_bytes, err))
            rc = -1;
        for (int il = s->gpu_first; rc == 0 && il < hp->n_layer; il++) {
            const model_layer *L = &s->m->layers[il];
            int k = L->sliding && s->n_ropes > 1;
            if (!L->rope) continue;
            const float *cos_k = dtab + (size_t)k * 2 * m * half;
            cu_turn_keys(g->dev, cache_of(s, il), hp->n_head_kv, hp->head_dim, hp->n_rot, hp->rope_neox, dslots, cos_k,
                         cos_k + (size_t)m * half, m);
        }
        if (rc == 0) rc = cu_sync(g->dev, err);
    }
    cu_free(g->dev, dslots);
    cu_free(g->dev, dtab);
    free(slots);
    free(tab);
    return rc;
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
int fwd_gpu_turn_keys(fwd_state *s, int32_t seq, int32_t n, const int32_t *new_pos, const int32_t *old,
                      const float *cs, nc_err *err) {
    return nc_fail(err, "this nucleus was built without the CUDA backend");
}
int fwd_gpu_cache_sync(fwd_state *s, int32_t seq, int32_t n, bool to_host, nc_err *err) {
    return nc_fail(err, "this nucleus was built without the CUDA backend");
}

#endif
