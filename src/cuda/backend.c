/* The forward pass's operations on a CUDA GPU (forward/backend.h over cuda/cuda.h): the walk of
 * forward.c, run with every product, norm, rotation, cache write and attention on the device.
 * The host keeps what is cheap and shared with the CPU: the cache's bookkeeping (kv_cache.c:
 * which cell of which block holds what; the device holds the cells' keys and values, in the same
 * pool slots, a row per slot in the cache's types, as kv_cache.c stores rows), the embedding
 * lookup, the rotary tables and the experts' routing. Per micro-batch the host sends, in one
 * queue of copies from pinned memory, the embedded tokens (or the CPU's residual stream), the
 * rotary tables, each token's cache slot and the list of slots each token sees.
 *
 * A pass is a few hundred launches, which would cost more than a small model's decode step
 * itself: a stretch of up to GPU_GRAPH_T tokens runs as a CUDA graph captured once per (tokens,
 * outputs) shape and replayed (every buffer the pass reads or writes has a fixed address, so only
 * the data changes). NUCLEUS_CUDA_GRAPHS=0 launches every operation instead. A mixture of experts
 * routes on the host (the router's logits come back), which rules out graphs for such models.
 *
 * The GPU takes the last layers (every layer when the split is 0) and the output projection; the
 * cache's cells of each layer live where the layer runs. Weights and vectors are found by their
 * host address (a table of them made at set-up). This build is linked only with the CUDA kernels
 * (make CUDA=1, or the emulator of make emu); forward.c finds it through fwd_cuda. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda.h"
#include "format/ggml_types.h"
#include "forward/forward.h"
#include "tensor/quant.h"

/* A micro-batch's expert work: (token, slot) rows grouped by expert. */
typedef struct gpu_moe {
    float *in, *gate, *up, *gate_up, *act, *out; /* per row: inputs, products, activations, outputs */
    float *weight;                              /* [n_batch][k] the slots' weights */
    int32_t *token, *row;                       /* [rows] each row's token; [n_batch][k] each slot's row */
} gpu_moe;

/* What a micro-batch sends: the same layout in pinned host memory and on the device. */
typedef struct gpu_step {
    float *x;                                   /* [n_batch][n_embd] the residual stream */
    float *cs[FWD_MAX_ROPES], *sn[FWD_MAX_ROPES]; /* [n_batch][n_rot / 2] rotary tables */
    int32_t *slots, *rows, *vis_off, *n_vis;    /* [n_batch] cache slot, rows wanting logits, visible slots */
    int32_t *vis_lo;                            /* [n_batch] the first of them a sliding layer sees */
    int32_t *vis;                               /* [vis_cap] the slot lists */
} gpu_step;

/* Device copies of the host's weights and vectors, by host address: open addressing. */
typedef struct gpu_entry {
    const void *host;
    void *dev;                                  /* cu_mat * for a weight, float * for a vector */
} gpu_entry;

#define GPU_GRAPH_T 64 /* micro-batches of at most this many tokens run as graphs */
#define GPU_GRAPHS 8   /* shapes kept */

typedef struct fwd_gpu {
    cu_dev *dev;
    int il0;                                    /* its first layer */
    gpu_entry *table;
    size_t table_cap, table_n;
    cu_mat *mats;                               /* the weights, table_n at most */
    size_t n_mats;
    float *buf[FB_COUNT];                       /* activations, [n_batch][width]; FB_X is the step's x */
    float *gate, *up;                           /* a gated product's halves */
    uint8_t **k, **v;                           /* [n_layer] each layer's cache (cu_cache), from il0 */
    gpu_step dev_step, host_step;
    void *dev_block, *host_block;               /* their allocations */
    int32_t vis_cap;                            /* n_seq * n_ctx: the most slots a micro-batch's lists hold */
    gpu_moe moe;
    int32_t *h_token, *h_seq_off;               /* host: [rows], [n_seq] where a sequence's list starts */
    bool use_graphs;
    struct { int T, n_out; cu_graph *graph; } graphs[GPU_GRAPHS];
    int n_graphs, next_graph;                   /* kept, and the next to replace */
    uint64_t weight_bytes, cache_bytes;
    char mirror_err[256];                       /* a failed copy of cache cells, reported by the next pass */
} fwd_gpu;

static fwd_gpu *gpu_of(const fwd_state *s) { return s->gpu; }

static float *buf(const fwd_state *s, fwd_view v) { return gpu_of(s)->buf[v.buf] + v.off; }

/* ---- the table of device copies ------------------------------------------------------------- */

static size_t slot_of(const fwd_gpu *g, const void *host) {
    size_t h = (size_t)((uintptr_t)host >> 3) * 0x9e3779b97f4a7c15ull;
    size_t i = h & (g->table_cap - 1);
    while (g->table[i].host && g->table[i].host != host) i = (i + 1) & (g->table_cap - 1);
    return i;
}

static void *dev_of(const fwd_state *s, const void *host) {
    if (!host) return NULL;
    const fwd_gpu *g = gpu_of(s);
    return g->table[slot_of(g, host)].dev;
}

static const cu_mat *mat(const fwd_state *s, const model_weight *w) { return dev_of(s, w); }
static const float *vec(const fwd_state *s, const float *v) { return dev_of(s, v); }

static int put_floats(fwd_gpu *g, const float *src, size_t n, nc_err *err) {
    if (!src || g->table[slot_of(g, src)].host) return 0;
    float *dst = cu_alloc(g->dev, n * sizeof(float), err);
    if (!dst) return -1;
    g->table[slot_of(g, src)] = (gpu_entry){src, dst};
    g->table_n++;
    g->weight_bytes += n * sizeof(float);
    return cu_put(g->dev, dst, src, n * sizeof(float), err);
}

static int put_weight(fwd_gpu *g, const model_weight *w, nc_err *err) {
    if (!w || !w->data || g->table[slot_of(g, w)].host) return 0;
    cu_mat *m = &g->mats[g->n_mats];
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
    g->n_mats++;
    g->table[slot_of(g, w)] = (gpu_entry){w, m};
    g->table_n++;
    g->weight_bytes += m->bytes;
    return 0;
}

/* Every weight and vector of a layer the walk may pass, and its cache. */
static int upload_layer(fwd_state *s, int il, nc_err *err) {
    fwd_gpu *g = gpu_of(s);
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = &s->m->layers[il];
    size_t E = (size_t)hp->n_embd, Q = (size_t)hp->n_head * hp->head_dim, KV = (size_t)hp->n_head_kv * hp->head_dim;
    size_t qn = hp->arch->qk_norm == QK_NORM_HEAD ? (size_t)hp->head_dim : Q, kn = qn == Q ? KV : qn;
    const model_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up, &L->ffn_down, &L->router};
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        if (put_weight(g, w[i], err)) return nc_fail_prefix(err, "layer %d to the GPU", il);
    struct { const float *p; size_t n; } f[] = {
        {L->attn_norm, E}, {L->ffn_norm, E}, {L->attn_post_norm, E}, {L->ffn_post_norm, E},
        {hp->arch->qk_norm ? L->q_norm : NULL, qn}, {hp->arch->qk_norm ? L->k_norm : NULL, kn}, {L->bq, Q}, {L->bk, KV},
        {L->bv, KV}, {L->bo, E}, {L->sinks, (size_t)hp->n_head}};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (put_floats(g, f[i].p, f[i].n, err)) return nc_fail_prefix(err, "layer %d to the GPU", il);
    if (L->router.data) {
        size_t N = (size_t)hp->n_expert, FE = (size_t)hp->n_ff_exp;
        for (int e = 0; e < hp->n_expert; e++) {
            const model_weight *x[] = {L->exp_gate ? &L->exp_gate[e] : NULL, L->exp_up ? &L->exp_up[e] : NULL,
                                       L->exp_gate_up ? &L->exp_gate_up[e] : NULL, &L->exp_down[e]};
            for (size_t i = 0; i < sizeof x / sizeof *x; i++)
                if (put_weight(g, x[i], err)) return nc_fail_prefix(err, "the experts of layer %d to the GPU", il);
        }
        if (put_floats(g, L->exp_gate_b, N * FE, err) || put_floats(g, L->exp_up_b, N * FE, err) ||
            put_floats(g, L->exp_gate_up_b, N * 2 * FE, err) || put_floats(g, L->exp_down_b, N * E, err))
            return nc_fail_prefix(err, "the experts of layer %d to the GPU", il);
    }
    size_t ck = (size_t)kv_pool_cells(&s->kv) * kv_k_row_bytes(&s->kv, il), cv = (size_t)kv_pool_cells(&s->kv) * kv_v_row_bytes(&s->kv, il);
    if (!(g->k[il] = cu_alloc(g->dev, ck, err)) || !(g->v[il] = cu_alloc(g->dev, cv, err)))
        return nc_fail_prefix(err, "the KV cache of layer %d on the GPU", il);
    g->cache_bytes += ck + cv;
    return 0;
}

/* ---- set-up ------------------------------------------------------------------------------ */

/* Layer il's cache on the device. */
static cu_cache cache_of(const fwd_state *s, int il) {
    const fwd_gpu *g = gpu_of(s);
    return (cu_cache){g->k[il], g->v[il], s->kv.type_k, s->kv.type_v, s->kv.layer[il].kv_dim};
}

/* The first feature of the model (or cache) the GPU pass lacks, or NULL, and the layer that has
 * it (-1: the model): it runs attention layers of the model's one shape with gated FFNs or
 * softmax-routed experts. */
static const char *missing_feature(const fwd_state *s, int il0, int *layer) {
    const model_hparams *hp = &s->m->hp;
    *layer = -1;
    if (hp->head_dim > 256) return "heads of more than 256 dimensions";
    if (hp->gating != GATING_SOFTMAX || hp->n_group || hp->expert_weight_input || hp->n_embd_per_layer)
        return "this model's expert routing or per-layer embeddings";
    for (int il = il0; il < hp->n_layer; il++) {
        const model_layer *L = &s->m->layers[il];
        *layer = il;
        if (L->mixer != MIXER_ATTENTION) return "recurrent and latent attention layers";
        if (L->kv_layer != il || L->q_gate || L->v_norm || L->qk_norm_plain || L->temperature || L->chunk ||
            L->head_dim != hp->head_dim || L->n_head_kv != hp->n_head_kv || (L->n_rot && L->n_rot != hp->n_rot))
            return "attention of other shapes than the model's own (gated, shared, chunked, per-layer heads or rotations, temperature)";
        if (s->kv.layer[il].kv_dim > CU_MAX_KV_DIM) return "KV rows wider than CU_MAX_KV_DIM";
        if (L->ffn != FFN_GATED && L->ffn != FFN_MOE) return "a layer without a gated FFN";
        if (L->sh_gate.data || L->exp_probs_b || L->router_scale || L->ffn_post_norm_1 || L->out_scale != 1.0f)
            return "shared experts, expert selection biases and the FFN beside the experts";
    }
    return NULL;
}

/* The cache's bookkeeping copied or moved cells between blocks (copy-on-write, eviction): the
 * device's cells follow. */
static void mirror_cells(void *ctx, int32_t dst, int32_t to, int32_t src, int32_t from, int32_t n) {
    fwd_state *s = ctx;
    fwd_gpu *g = gpu_of(s);
    size_t kr = kv_k_row_bytes(&s->kv, g->il0), vr = kv_v_row_bytes(&s->kv, g->il0); /* every layer's: one shape */
    size_t d0 = (size_t)dst * KV_BLOCK + (size_t)to, s0 = (size_t)src * KV_BLOCK + (size_t)from; /* slots */
    nc_err err = {0};
    for (int il = g->il0; il < s->m->hp.n_layer && !g->mirror_err[0]; il++)
        if (cu_move(g->dev, g->k[il] + d0 * kr, g->k[il] + s0 * kr, (size_t)n * kr, &err) ||
            cu_move(g->dev, g->v[il] + d0 * vr, g->v[il] + s0 * vr, (size_t)n * vr, &err))
            snprintf(g->mirror_err, sizeof g->mirror_err, "moving cached cells on the GPU: %.200s", err.msg);
}

/* The micro-batch inputs laid out from `base` (NULL: only their size), into the host or the
 * device copy as base is one or the other; each part 64-byte aligned. Returns the bytes. */
static size_t step_layout(fwd_state *s, void *base) {
    fwd_gpu *g = gpu_of(s);
    const model_hparams *hp = &s->m->hp;
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

static void gpu_free(fwd_state *s) {
    fwd_gpu *g = gpu_of(s);
    if (!g) return;
    if (g->dev) {
        for (size_t i = 0; i < g->table_cap; i++)
            if (g->table[i].host && !(g->table[i].dev >= (void *)g->mats && g->table[i].dev < (void *)(g->mats + g->n_mats)))
                cu_free(g->dev, g->table[i].dev);
        for (size_t i = 0; i < g->n_mats; i++) cu_mat_free(g->dev, &g->mats[i]);
        for (int il = 0; g->k && il < s->m->hp.n_layer; il++) {
            cu_free(g->dev, g->k[il]);
            cu_free(g->dev, g->v[il]);
        }
        for (int b = 0; b < FB_COUNT; b++)
            if (b != FB_X) cu_free(g->dev, g->buf[b]);
        gpu_moe *mo = &g->moe;
        void *mp[] = {g->gate, g->up, mo->in, mo->gate, mo->up, mo->gate_up, mo->act, mo->out, mo->weight, mo->token, mo->row,
                      g->dev_block};
        for (size_t i = 0; i < sizeof mp / sizeof mp[0]; i++) cu_free(g->dev, mp[i]);
        cu_host_free(g->dev, g->host_block);
        for (int i = 0; i < g->n_graphs; i++) cu_graph_free(g->graphs[i].graph);
        cu_close(g->dev);
    }
    free(g->table);
    free(g->mats);
    free(g->k);
    free(g->v);
    free(g->h_token);
    free(g->h_seq_off);
    free(g);
    s->gpu = NULL;
}

static int gpu_init(fwd_state *s, int il0, nc_err *err) {
    const model_hparams *hp = &s->m->hp;
    int layer;
    const char *missing = missing_feature(s, il0, &layer);
    if (missing && layer < 0) return nc_fail(err, "the GPU forward pass does not support %s yet (run on the CPU)", missing);
    if (missing) return nc_fail(err, "the GPU forward pass cannot run layer %d: it does not support %s yet (run on the CPU)",
                                layer, missing);
    fwd_gpu *g = s->gpu = calloc(1, sizeof *g);
    if (!g) return nc_fail(err, "out of memory");
    g->il0 = il0;
    if (cu_open(&g->dev, err)) return -1;
    /* room for every weight and vector of every layer and the output's, twice over */
    size_t per_layer = 32 + 4 * (size_t)hp->n_expert;
    g->table_cap = 64;
    while (g->table_cap < 2 * (per_layer * (size_t)hp->n_layer + 8)) g->table_cap *= 2;
    g->table = calloc(g->table_cap, sizeof *g->table);
    g->mats = calloc(per_layer * (size_t)hp->n_layer + 8, sizeof *g->mats);
    g->k = calloc((size_t)hp->n_layer, sizeof *g->k);
    g->v = calloc((size_t)hp->n_layer, sizeof *g->v);
    if (!g->table || !g->mats || !g->k || !g->v) return nc_fail(err, "out of memory");
    for (int il = il0; il < hp->n_layer; il++)
        if (upload_layer(s, il, err)) return -1;
    if (put_weight(g, &s->m->output, err) || put_floats(g, s->m->output_norm, (size_t)hp->n_embd, err))
        return nc_fail_prefix(err, "the output projection to the GPU");
    size_t B = (size_t)s->n_batch;
    for (int b = 0; b < FB_COUNT; b++)
        if (b != FB_X && s->width[b] > 0 && !(g->buf[b] = cu_alloc(g->dev, B * (size_t)s->width[b] * sizeof(float), err)))
            return nc_fail_prefix(err, "the GPU's activations for micro-batches of %d tokens", s->n_batch);
    if (!(g->gate = cu_alloc(g->dev, B * (size_t)s->width[FB_FFN] * sizeof(float), err)) ||
        !(g->up = cu_alloc(g->dev, B * (size_t)s->width[FB_FFN] * sizeof(float), err)))
        return nc_fail_prefix(err, "the GPU's activations for micro-batches of %d tokens", s->n_batch);
    int widest = 0;
    for (int b = 0; b < FB_COUNT; b++)
        if (b != FB_LOGITS && b != FB_ROUTER && s->width[b] > widest) widest = s->width[b];
    size_t K = (size_t)hp->n_expert_used, FE = (size_t)hp->n_ff_exp, R = B * K, E = (size_t)hp->n_embd;
    /* an expert's products take up to every (token, slot) row of the micro-batch */
    if (cu_reserve(g->dev, hp->n_expert > 0 ? (int)R : s->n_batch, widest, err))
        return nc_fail_prefix(err, "the GPU's product inputs");
    if (hp->n_expert > 0) {
        gpu_moe *mo = &g->moe;
        struct { float **p; size_t n; } b[] = {{&mo->in, R * E}, {&mo->gate, R * FE}, {&mo->up, R * FE},
                                               {&mo->gate_up, R * 2 * FE}, {&mo->act, R * FE}, {&mo->out, R * E},
                                               {&mo->weight, R}};
        for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
            if (!(*b[i].p = cu_alloc(g->dev, b[i].n * sizeof(float), err))) return nc_fail_prefix(err, "the GPU's expert buffers");
        if (!(mo->token = cu_alloc(g->dev, R * 4, err)) || !(mo->row = cu_alloc(g->dev, R * 4, err)))
            return nc_fail_prefix(err, "the GPU's expert buffers");
        if (!(g->h_token = malloc(R * sizeof *g->h_token))) return nc_fail(err, "out of memory");
    }
    g->vis_cap = kv_n_seq(&s->kv) * kv_n_ctx(&s->kv);
    size_t bytes = step_layout(s, NULL);
    if (!(g->dev_block = cu_alloc(g->dev, bytes, err)) || !(g->host_block = cu_host_alloc(g->dev, bytes, err)))
        return nc_fail_prefix(err, "the GPU's inputs for micro-batches of %d tokens", s->n_batch);
    step_layout(s, g->dev_block);
    step_layout(s, g->host_block);
    g->buf[FB_X] = g->dev_step.x;
    g->h_seq_off = malloc((size_t)kv_n_seq(&s->kv) * sizeof *g->h_seq_off);
    if (!g->h_seq_off) return nc_fail(err, "out of memory");
    const char *graphs = getenv("NUCLEUS_CUDA_GRAPHS");
    g->use_graphs = (!graphs || strcmp(graphs, "0") != 0) && !cu_profiling(g->dev) && hp->n_expert == 0;
    kv_set_mirror(&s->kv, mirror_cells, s);
    return cu_sync(g->dev, err);
}

static const char *gpu_describe(const fwd_state *s, char *out, size_t n) {
    const fwd_gpu *g = gpu_of(s);
    int L = s->m->hp.n_layer;
    char layers[64] = "every layer";
    if (g->il0 > 0) snprintf(layers, sizeof layers, "layers %d-%d of %d", g->il0, L - 1, L);
    snprintf(out, n, "%s; %s and the output, weights %.1f MiB, KV cache %.1f MiB", cu_describe(g->dev), layers,
             g->weight_bytes / 1048576.0, g->cache_bytes / 1048576.0);
    return out;
}

/* ---- a micro-batch ---------------------------------------------------------------------------- */

/* Cells of a sequence holding positions < pos (positions increase along the cells). */
static int32_t cells_below(const kv_cache *kv, int32_t seq, int32_t pos) {
    return fwd_lower_bound(kv_positions(kv, seq), kv_seq_len(kv, seq), pos);
}

/* The micro-batch's inputs into pinned memory, and their copies queued: the residual stream, the
 * rotary tables, each token's slot, and for each sequence of the micro-batch the slots of its
 * cells in order, of which token t sees the first n_vis[t]; the rows of the tokens that want
 * logits. */
static int gpu_begin(fwd_state *s, const nc_batch_entry *e, int T, nc_err *err) {
    fwd_gpu *g = gpu_of(s);
    const kv_cache *kv = &s->kv;
    const gpu_step *h = &g->host_step, *d = &g->dev_step;
    size_t E = (size_t)s->m->hp.n_embd, half = (size_t)s->m->hp.n_rot / 2;
    if (g->mirror_err[0]) return nc_fail(err, "%s", g->mirror_err);
    for (int t = 0; t < T; t++)
        if (kv_scoring(kv, e[t].seq))
            return nc_fail(err, "sequence %d: H2O eviction needs attention scores, which the GPU pass does not keep",
                           e[t].seq);
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
    for (int t = 0; t < T; t++) {
        h->slots[t] = kv_cell_slot(kv, e[t].seq, s->cells[t]);
        h->vis_off[t] = g->h_seq_off[e[t].seq];
        int32_t window = s->m->hp.swa_window; /* a sliding layer sees (pos - window, pos] */
        h->n_vis[t] = cells_below(kv, e[t].seq, e[t].pos + 1);
        h->vis_lo[t] = window > 0 && e[t].pos >= window ? cells_below(kv, e[t].seq, e[t].pos - window + 1) : 0;
    }
    memcpy(h->rows, s->out_tokens, (size_t)s->n_out * sizeof *h->rows);
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

/* The stretch as a graph: the one captured for this shape, else captured now (replacing the
 * oldest when GPU_GRAPHS are kept). */
static int gpu_segment(fwd_state *s, int T, int n_out, int (*run)(fwd_state *, void *, nc_err *), void *arg, nc_err *err) {
    fwd_gpu *g = gpu_of(s);
    int rc = 0;
    if (!g->use_graphs || T > GPU_GRAPH_T) {
        rc = run(s, arg, err);
    } else {
        cu_graph *graph = NULL;
        for (int i = 0; i < g->n_graphs && !graph; i++)
            if (g->graphs[i].T == T && g->graphs[i].n_out == n_out) graph = g->graphs[i].graph;
        if (!graph) {
            if (cu_capture_begin(g->dev, err)) return -1;
            if (run(s, arg, err)) { /* a dense pass does not fail; end the capture all the same */
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
    }
    if (rc) cu_sync(g->dev, NULL);
    return rc ? rc : cu_sync(g->dev, err);
}

static int gpu_get(fwd_state *s, float *dst, fwd_view src, int32_t n, int T, nc_err *err) {
    fwd_gpu *g = gpu_of(s);
    if (src.ld == n) return cu_get(g->dev, dst, buf(s, src), (size_t)T * n * sizeof(float), err);
    for (int t = 0; t < T; t++)
        if (cu_get(g->dev, dst + (size_t)t * n, buf(s, src) + (size_t)t * src.ld, (size_t)n * sizeof(float), err)) return -1;
    return 0;
}

static int gpu_put(fwd_state *s, fwd_view dst, const float *src, int32_t n, int T, nc_err *err) {
    fwd_gpu *g = gpu_of(s);
    for (int t = 0; t < T; t++)
        if (cu_put(g->dev, buf(s, dst) + (size_t)t * dst.ld, src + (size_t)t * n, (size_t)n * sizeof(float), err)) return -1;
    return 0;
}

/* ---- the operations ----------------------------------------------------------------------- */

static cu_rope rope_of(const fwd_state *s, int table) {
    const model_hparams *hp = &s->m->hp;
    const gpu_step *st = &gpu_of(s)->dev_step;
    return (cu_rope){hp->head_dim, hp->n_rot, hp->rope_neox, st->cs[table], st->sn[table]};
}

/* The heads of views finished: per-head norms, then one launch rotating the queries and keys and
 * storing the keys and values (q: heads rotated, not stored; k, v: stored as keys, values). */
static void finish(fwd_state *s, float *q, const fwd_heads *hq, float *k, const fwd_heads *hk, const float *v,
                   const fwd_heads *hv, int T) {
    fwd_gpu *g = gpu_of(s);
    const model_hparams *hp = &s->m->hp;
    float *p[2] = {q, k};
    const fwd_heads *h[2] = {hq, hk};
    for (int i = 0; i < 2; i++)
        if (p[i] && (h[i]->norm || h[i]->plain))
            cu_rms_norm(g->dev, p[i], p[i], NULL, vec(s, h[i]->norm), h[i]->dim, T * h[i]->n, hp->norm_eps, false);
    int rope = hq && hq->rope >= 0 ? hq->rope : hk && hk->rope >= 0 ? hk->rope : -1;
    int layer = hk && hk->layer >= 0 ? hk->layer : hv && hv->layer >= 0 ? hv->layer : -1;
    bool rotate_q = hq && hq->rope >= 0, rotate_k = hk && hk->rope >= 0, store_k = hk && hk->layer >= 0;
    if (hv && hv->layer < 0) hv = NULL;
    if (!rotate_q && !rotate_k && !store_k && !hv) return;
    cu_rope r = rope >= 0 ? rope_of(s, rope) : (cu_rope){0};
    cu_cache c = layer >= 0 ? cache_of(s, layer) : (cu_cache){.kv_dim = hp->n_head_kv * hp->head_dim};
    cu_kv_store(g->dev, c, rope >= 0 ? &r : NULL, rotate_q ? q : NULL, hq ? hq->n * hq->stride : 0, hq ? hq->n : 0,
                rotate_k || store_k ? k : NULL, hv ? v : NULL, c.kv_dim, T, g->dev_step.slots);
}

static bool gpu_mul(fwd_state *s, const fwd_in *in, const fwd_out *out, int n) {
    fwd_gpu *g = gpu_of(s);
    const model_hparams *hp = &s->m->hp;
    const float *x = buf(s, in->x);
    int ldx = in->x.ld;
    bool ready = in->ready, quant = false;
    for (int i = 0; i < n; i++) quant = quant || cu_quantised(mat(s, out[i].w)) || (out[i].up && cu_quantised(mat(s, out[i].up)));
    if (in->norm) { /* normalised into FB_XN, quantised there for the products */
        ready = cu_rms_norm(g->dev, g->buf[FB_XN], x, in->rows ? g->dev_step.rows : NULL, vec(s, in->norm), in->cols, in->T,
                            hp->norm_eps, quant);
        x = g->buf[FB_XN];
        ldx = in->cols;
    }
    cu_out o[8];
    int m = 0;
    for (int i = 0; i < n; i++) {
        const fwd_out *f = &out[i];
        float scale = f->scale != 0 ? f->scale : 1.0f;
        if (f->up) { /* halves into scratch, the activation after */
            o[m++] = (cu_out){mat(s, f->w), g->gate, f->w->rows, vec(s, f->bias), false, 1.0f};
            o[m++] = (cu_out){mat(s, f->up), g->up, f->w->rows, NULL, false, 1.0f};
        } else {
            o[m++] = (cu_out){mat(s, f->w), buf(s, f->y), f->y.ld, vec(s, f->bias), f->add, scale};
        }
    }
    cu_mul_n(g->dev, x, ldx, in->T, o, m, ready);
    bool quantised = true;
    float *q = NULL, *k = NULL, *v = NULL;
    const fwd_heads *hq = NULL, *hk = NULL, *hv = NULL;
    for (int i = 0; i < n; i++) {
        const fwd_out *f = &out[i];
        if (f->up) {
            bool did = cu_glu(g->dev, f->act, buf(s, f->y), g->gate, g->up, in->T, f->w->rows, f->w->rows, 1, f->quant);
            quantised = quantised && (did || !f->quant);
        }
        if (f->heads && f->heads->kind == FWD_VALUE) v = buf(s, f->y), hv = f->heads;
        else if (f->heads && f->heads->kind == FWD_KEY) k = buf(s, f->y), hk = f->heads;
        else if (f->heads) q = buf(s, f->y), hq = f->heads;
    }
    if (hq || hk || hv) finish(s, q, hq, k, hk, v, hv, in->T);
    return quantised;
}

static bool gpu_norm(fwd_state *s, fwd_view dst, fwd_view src, const int32_t *rows, int32_t n, int32_t groups,
                     const float *w, int T, bool quant) {
    fwd_gpu *g = gpu_of(s);
    return cu_rms_norm(g->dev, buf(s, dst), buf(s, src), rows ? g->dev_step.rows : NULL, vec(s, w), n, T * groups,
                       s->m->hp.norm_eps, quant);
}

static void gpu_heads(fwd_state *s, fwd_view v, const fwd_heads *h, int T) {
    if (h->kind == FWD_VALUE) finish(s, NULL, NULL, NULL, NULL, buf(s, v), h, T);
    else if (h->kind == FWD_KEY) finish(s, NULL, NULL, buf(s, v), h, NULL, NULL, T);
    else finish(s, buf(s, v), h, NULL, NULL, NULL, NULL, T);
}

static bool gpu_attend(fwd_state *s, const fwd_attn *a, int T) {
    fwd_gpu *g = gpu_of(s);
    const gpu_step *st = &g->dev_step;
    return cu_attention(g->dev, buf(s, a->out), buf(s, a->q), cache_of(s, a->layer), T, a->n_head, a->dim, a->scale,
                        a->softcap, vec(s, a->sinks), st->vis, st->vis_off, a->window ? st->vis_lo : NULL, st->n_vis,
                        a->quant);
}

static void gpu_add(fwd_state *s, fwd_view x, fwd_view o, int32_t n, const float *w, float scale, int T) {
    cu_norm_add(gpu_of(s)->dev, buf(s, x), buf(s, o), vec(s, w), n, T, s->m->hp.norm_eps, scale);
}

/* The experts of layer L: the routed rows sent over, their inputs gathered, each expert that has
 * rows run on them, then each token's outputs combined in slot order. */
static int gpu_experts(fwd_state *s, const fwd_experts *x, nc_err *err) {
    fwd_gpu *g = gpu_of(s);
    cu_dev *d = g->dev;
    gpu_moe *mo = &g->moe;
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = x->L;
    int E = hp->n_embd, K = hp->n_expert_used, FE = hp->n_ff_exp, T = x->T;
    static const int act_kind[] = {[ACT_SILU] = KERNELS_SILU, [ACT_GELU_TANH] = KERNELS_GELU_TANH,
                                   [ACT_SWIGLU_OAI] = KERNELS_SILU_OAI};
    int act = act_kind[hp->arch->act];
    /* the copies wait (cu_put), so the host arrays may change after */
    if (cu_put(d, mo->token, s->moe.token, (size_t)T * K * 4, err) || cu_put(d, mo->row, s->moe.row, (size_t)T * K * 4, err) ||
        cu_put(d, mo->weight, s->moe.weight, (size_t)T * K * 4, err))
        return -1;
    cu_gather(d, mo->in, buf(s, x->in), mo->token, T * K, E);
    for (int e = 0; e < hp->n_expert; e++) {
        int first = s->moe.start[e], n = s->moe.start[e + 1] - first;
        if (n == 0) continue;
        const float *in = mo->in + (size_t)first * E;
        float *a = mo->act + (size_t)first * FE;
        if (L->exp_gate) {
            float *gt = mo->gate + (size_t)first * FE, *up = mo->up + (size_t)first * FE;
            cu_mul_n(d, in, E, n,
                     (cu_out[]){{mat(s, &L->exp_gate[e]), gt, FE, L->exp_gate_b ? vec(s, L->exp_gate_b) + (size_t)e * FE : NULL,
                                 false, 1.0f},
                                {mat(s, &L->exp_up[e]), up, FE, L->exp_up_b ? vec(s, L->exp_up_b) + (size_t)e * FE : NULL, false,
                                 1.0f}},
                     2, false);
            cu_glu(d, act, a, gt, up, n, FE, FE, 1, false);
        } else { /* fused: gate and up rows interleaved, or gate's then up's */
            float *gu = mo->gate_up + (size_t)first * 2 * FE;
            bool inter = hp->gate_up == GATE_UP_INTERLEAVED;
            cu_mul(d, mat(s, &L->exp_gate_up[e]), in, E, n, gu, 2 * FE,
                   L->exp_gate_up_b ? vec(s, L->exp_gate_up_b) + (size_t)e * 2 * FE : NULL, false, 1.0f);
            cu_glu(d, act, a, gu, gu + (inter ? 1 : FE), n, FE, 2 * FE, inter ? 2 : 1, false);
        }
        cu_mul(d, mat(s, &L->exp_down[e]), a, FE, n, mo->out + (size_t)first * E, E,
               L->exp_down_b ? vec(s, L->exp_down_b) + (size_t)e * E : NULL, false, 1.0f);
    }
    cu_combine(d, buf(s, x->out), mo->out, mo->row, mo->weight, T, K, E);
    return 0;
}

/* ---- the cache -------------------------------------------------------------------------------- */

static int gpu_cache_sync(fwd_state *s, int32_t seq, int32_t n, bool to_host, nc_err *err) {
    fwd_gpu *g = gpu_of(s);
    kv_cache *kv = &s->kv;
    size_t kr = kv_k_row_bytes(kv, g->il0), vr = kv_v_row_bytes(kv, g->il0); /* every layer's: one shape */
    if (n <= 0) return 0;
    int32_t *slots = malloc((size_t)n * sizeof *slots), *dslots = NULL;
    uint8_t *hk = malloc((size_t)n * kr), *hv = malloc((size_t)n * vr), *tmp = NULL;
    int rc = slots && hk && hv ? 0 : nc_fail(err, "out of memory");
    for (int32_t c = 0; rc == 0 && c < n; c++) slots[c] = kv_cell_slot(kv, seq, c);
    if (rc == 0 && (!(dslots = cu_alloc(g->dev, (size_t)n * 4, err)) ||
                    !(tmp = cu_alloc(g->dev, (size_t)n * (kr > vr ? kr : vr), err)) ||
                    cu_put(g->dev, dslots, slots, (size_t)n * 4, err)))
        rc = -1;
    for (int il = g->il0; rc == 0 && il < s->m->hp.n_layer; il++) {
        uint8_t *k = g->k[il], *v = g->v[il];
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

static int gpu_turn_keys(fwd_state *s, int32_t seq, int32_t n, const int32_t *new_pos, const int32_t *old, const float *cs,
                         nc_err *err) {
    fwd_gpu *g = gpu_of(s);
    const model_hparams *hp = &s->m->hp;
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
        for (int il = g->il0; rc == 0 && il < hp->n_layer; il++) {
            int k = fwd_rope_of(s, &s->m->layers[il]);
            if (k < 0) continue;
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

const fwd_backend fwd_cuda = {
    .name = "cuda",
    .init = gpu_init,
    .free = gpu_free,
    .describe = gpu_describe,
    .begin = gpu_begin,
    .segment = gpu_segment,
    .get = gpu_get,
    .put = gpu_put,
    .mul = gpu_mul,
    .norm = gpu_norm,
    .heads = gpu_heads,
    .attend = gpu_attend,
    .add = gpu_add,
    .experts = gpu_experts,
    .turn_keys = gpu_turn_keys,
    .cache_sync = gpu_cache_sync,
};
