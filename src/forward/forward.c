#include "forward/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/quant.h"

static size_t q_dim(const model_hparams *hp) { return (size_t)hp->n_head * hp->head_dim; }
static size_t kv_dim(const model_hparams *hp) { return (size_t)hp->n_head_kv * hp->head_dim; }

/* Activations start on a cache line: with 64-byte vectors a misaligned row makes most loads span
 * two lines. */
static void *alloc64(size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64); }

/* Rows per chunk of a matrix job: about eight chunks per thread, so the work balances and a
 * descheduled thread holds up at most a small chunk; a multiple of 32 (the groups of the
 * quantised activations, the packed panels of the matmul); and where chunks of up to half that
 * size allow it, a chunk count that is a multiple of the thread count. (576 rows on 2 threads:
 * 18 chunks of 32 rather than 9 of 64, whose 5:4 split idles a thread for a ninth of the job.) */
static int32_t chunk_rows(int rows, int n_threads) {
    int units = (rows + 31) / 32, target = 8 * n_threads, per = (units + target - 1) / target;
    for (int p = per; p >= 1 && 2 * p >= per; p--)
        if ((units + p - 1) / p % n_threads == 0) return 32 * p;
    return 32 * per;
}

static int n_chunks(int rows, int cr) { return (rows + cr - 1) / cr; }

static bool int_weight(const model_weight *w) { return w->data && kernels_int_type(w->type) != 0; }

/* ---- set-up ---------------------------------------------------------------------------------- */

static bool any_expert_int(const model *m) {
    for (int il = 0; il < m->hp.n_layer; il++) {
        const model_layer *L = &m->layers[il];
        for (int e = 0; L->router.data && e < m->hp.n_expert; e++)
            if ((L->exp_gate && (int_weight(&L->exp_gate[e]) || int_weight(&L->exp_up[e]))) ||
                (L->exp_gate_up && int_weight(&L->exp_gate_up[e])) || int_weight(&L->exp_down[e]))
                return true;
    }
    return false;
}

static int alloc_moe(fwd_state *s) {
    const model_hparams *hp = &s->m->hp;
    fwd_moe *mo = &s->moe;
    size_t B = (size_t)s->n_batch, K = (size_t)hp->n_expert_used, N = (size_t)hp->n_expert;
    size_t E = (size_t)hp->n_embd, F = (size_t)hp->n_ff_exp, rows = B * K;
    size_t max_chunks = N * (size_t)(n_chunks((int)(F > E ? F : E), s->exp_rows > s->embd_rows ? s->embd_rows : s->exp_rows) + 1);
    mo->expert = malloc(rows * sizeof *mo->expert);
    mo->weight = malloc(rows * sizeof *mo->weight);
    mo->logits = malloc(B * N * sizeof *mo->logits);
    mo->start = malloc((N + 1) * sizeof *mo->start);
    mo->row = malloc(rows * sizeof *mo->row);
    mo->token = malloc(rows * sizeof *mo->token);
    mo->chunks = malloc(2 * max_chunks * sizeof *mo->chunks);
    mo->in = alloc64(rows * E * sizeof(float));
    mo->act = alloc64(rows * F * sizeof(float));
    mo->out = alloc64(rows * E * sizeof(float));
    mo->gate_up = alloc64((size_t)s->n_threads * B * 2 * (size_t)s->exp_rows * sizeof(float));
    bool ok = mo->expert && mo->weight && mo->logits && mo->start && mo->row && mo->token && mo->chunks && mo->in &&
              mo->act && mo->out && mo->gate_up;
    if (ok && any_expert_int(s->m)) {
        mo->inq = alloc64(rows * s->act_embd);
        mo->actq = alloc64(rows * s->act_ffe);
        ok = mo->inq && mo->actq;
    }
    return ok ? 0 : -1;
}

static void free_moe(fwd_moe *mo) {
    free(mo->expert);
    free(mo->weight);
    free(mo->logits);
    free(mo->start);
    free(mo->row);
    free(mo->token);
    free(mo->chunks);
    free(mo->in);
    free(mo->inq);
    free(mo->act);
    free(mo->actq);
    free(mo->out);
    free(mo->gate_up);
}

/* Sliding layers keep a ring of their window plus a micro-batch, rounded to whole spans, when that
 * is smaller than the context (and swa_full does not ask for every position); 0 when they keep the
 * whole context. */
static int32_t ring_cells(const model *m, int32_t n_ctx, int32_t n_batch, bool swa_full) {
    int64_t r = ((int64_t)m->hp.swa_window + n_batch - 1 + FWD_ATTN_SPAN - 1) / FWD_ATTN_SPAN * FWD_ATTN_SPAN;
    return m->hp.swa_window > 0 && r < n_ctx && !swa_full ? (int32_t)r : 0;
}

static int init_cache(fwd_state *s, int32_t n_ctx, int32_t n_seq, int64_t n_cells, uint32_t type_k, uint32_t type_v,
                      bool swa_full, nc_err *err) {
    const model_hparams *hp = &s->m->hp;
    bool *sliding = malloc((size_t)hp->n_layer * sizeof *sliding);
    if (!sliding) return nc_fail(err, "out of memory");
    for (int il = 0; il < hp->n_layer; il++) sliding[il] = s->m->layers[il].sliding;
    kv_config cfg = {.n_layer = hp->n_layer, .n_seq = n_seq, .n_ctx = n_ctx, .n_head_kv = hp->n_head_kv,
                     .head_dim = hp->head_dim, .type_k = type_k, .type_v = type_v, .n_cells = n_cells,
                     .ring = ring_cells(s->m, n_ctx, s->n_batch, swa_full), .ring_layer = sliding};
    int r = kv_init(&s->kv, &cfg, err);
    free(sliding);
    return r;
}

static bool same_rope(const model_rope *a, const model_rope *b) { return memcmp(a, b, sizeof *a) == 0; }

int fwd_init(fwd_state *s, const model *m, int32_t n_ctx, int32_t n_seq, int32_t n_threads, int32_t n_batch,
             int64_t n_cells, uint32_t type_k, uint32_t type_v, bool swa_full, bool fast, int32_t n_gpu, nc_err *err) {
    memset(s, 0, sizeof *s);
    const model_hparams *hp = &m->hp;
    s->m = m;
    s->n_batch = n_batch;
    s->n_threads = n_threads;
    s->fast = fast;
    kernels_init();
    /* attention quantises the output of each group of query heads on its own */
    int span = hp->n_head / hp->n_head_kv * hp->head_dim;
    if (hp->n_head / hp->n_head_kv > FWD_MAX_GROUP)
        return nc_fail(err, "%d query heads per KV head: at most %d are supported", hp->n_head / hp->n_head_kv,
                       FWD_MAX_GROUP);
    for (int il = 0; il < hp->n_layer; il++)
        if (int_weight(&m->layers[il].wo) && span % 32)
            return nc_fail(err, "attn_output.weight of layer %d: quantised, with query-head groups of %d dimensions "
                                "(not a multiple of 32)", il, span);
    /* the GPU pass reads sliding layers' windows out of the full cache, not a ring */
    if (init_cache(s, n_ctx, n_seq, n_cells, type_k, type_v, swa_full || n_gpu > 0, err)) return -1;
    s->pool = pool_create(n_threads);
    size_t B = (size_t)n_batch, E = (size_t)hp->n_embd, Q = q_dim(hp), KV = kv_dim(hp);
    size_t F = (size_t)(hp->n_ff > 0 ? hp->n_ff : 1), FE = (size_t)(hp->n_ff_exp > 0 ? hp->n_ff_exp : 1);
    size_t half = (size_t)hp->n_rot / 2;
    s->ffn_rows = chunk_rows((int)F, n_threads);
    s->exp_rows = chunk_rows((int)FE, n_threads);
    s->embd_rows = chunk_rows(hp->n_embd, n_threads);
    s->out_rows = chunk_rows(hp->n_vocab, n_threads);
    /* integer types need whole groups of 32; a width that is not a multiple of 32 only meets
     * float weights, whose kernels never read these buffers */
    s->act_embd = kernels_act_bytes(KERNELS_ACT_I16, (int)(E / 32 * 32));
    s->act_q = kernels_act_bytes(KERNELS_ACT_I16, (int)(Q / 32 * 32));
    s->act_ff = kernels_act_bytes(KERNELS_ACT_I16, (int)(F / 32 * 32));
    s->act_ffe = kernels_act_bytes(KERNELS_ACT_I16, (int)(FE / 32 * 32));
    s->x = alloc64(B * E * sizeof(float));
    s->xn = alloc64(B * E * sizeof(float));
    s->xnq = alloc64(B * s->act_embd);
    s->q = alloc64(B * Q * sizeof(float));
    s->k = alloc64(B * KV * sizeof(float));
    s->v = alloc64(B * KV * sizeof(float));
    s->attn = alloc64(B * Q * sizeof(float));
    s->attnq = alloc64(B * s->act_q);
    s->ffn = alloc64(B * F * sizeof(float));
    s->ffnq = alloc64(B * s->act_ff);
    s->o = alloc64(B * E * sizeof(float));
    s->n_ropes = same_rope(&hp->rope[0], &hp->rope[1]) ? 1 : 2;
    for (int k = 0; k < s->n_ropes; k++) {
        s->rope_cos[k] = malloc((B * half + 1) * sizeof(float));
        s->rope_sin[k] = malloc((B * half + 1) * sizeof(float));
        s->inv_freq[k] = malloc((half + 1) * sizeof(double));
    }
    s->cells = malloc(B * sizeof(int32_t));
    s->out_tokens = malloc(B * sizeof(int32_t));
    s->attn_blocks = malloc((B + 1) * sizeof(int32_t));
    s->thr = calloc((size_t)n_threads, sizeof *s->thr);
    bool ok = s->pool && s->x && s->xn && s->xnq && s->q && s->k && s->v && s->attn && s->attnq && s->ffn &&
              s->ffnq && s->o && s->cells && s->out_tokens && s->attn_blocks && s->thr;
    for (int k = 0; k < s->n_ropes; k++) ok = ok && s->rope_cos[k] && s->rope_sin[k] && s->inv_freq[k];
    size_t group = (size_t)(hp->n_head / hp->n_head_kv), rows = (size_t)(s->ffn_rows > s->exp_rows ? s->ffn_rows : s->exp_rows);
    for (int i = 0; ok && i < n_threads; i++) {
        fwd_thread *t = &s->thr[i];
        t->xn = alloc64(FWD_PRIVATE_T * E * sizeof(float));
        t->xq = alloc64(FWD_PRIVATE_T * s->act_embd);
        t->pack = alloc64(kernels_mul_scratch_bytes());
        t->gate = alloc64(B * rows * sizeof(float));
        t->up = alloc64(B * rows * sizeof(float));
        size_t R = FWD_ATTN_BLOCK * group;
        t->attn_q = alloc64(R * (size_t)hp->head_dim * sizeof(float));
        t->scores = alloc64(R * FWD_ATTN_SPAN * sizeof(float));
        t->attn_part = alloc64(R * (size_t)hp->head_dim * sizeof(float));
        t->attn_max = malloc(R * sizeof(float));
        t->attn_sum = malloc(R * sizeof(double));
        t->attn_score = malloc(FWD_ATTN_SPAN * sizeof(uint64_t));
        ok = t->xn && t->xq && t->pack && t->gate && t->up && t->attn_q && t->scores && t->attn_part && t->attn_max &&
             t->attn_sum && t->attn_score;
        size_t kv_floats = kv_scratch_floats(&s->kv);
        if (ok && kv_floats) {
            t->kv_keys = alloc64(kv_floats * sizeof(float));
            t->kv_values = alloc64(kv_floats * sizeof(float));
            ok = t->kv_keys && t->kv_values;
        }
    }
    if (ok && hp->n_expert > 0) ok = alloc_moe(s) == 0;
    if (!ok) {
        fwd_free(s);
        return nc_fail(err, "out of memory for the forward pass scratch (batch %d, context %d)", n_batch, n_ctx);
    }
    for (int k = 0; k < s->n_ropes; k++)
        s->rope_mscale[k] = (float)model_rope_freqs(&hp->rope[k], hp->n_rot, n_ctx, s->inv_freq[k]);
    s->gpu_first = n_gpu >= hp->n_layer ? 0 : hp->n_layer - n_gpu;
    if (n_gpu > 0 && fwd_gpu_init(s, err)) {
        fwd_free(s);
        return -1;
    }
    return 0;
}

void fwd_free(fwd_state *s) {
    fwd_gpu_free(s);
    kv_free(&s->kv);
    if (s->pool) pool_free(s->pool);
    for (int i = 0; s->thr && i < s->n_threads; i++) {
        fwd_thread *t = &s->thr[i];
        free(t->xn);
        free(t->xq);
        free(t->pack);
        free(t->gate);
        free(t->up);
        free(t->attn_q);
        free(t->scores);
        free(t->attn_part);
        free(t->attn_max);
        free(t->attn_sum);
        free(t->kv_keys);
        free(t->kv_values);
        free(t->attn_score);
    }
    free(s->thr);
    free(s->x);
    free(s->xn);
    free(s->xnq);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->attn);
    free(s->attnq);
    free(s->ffn);
    free(s->ffnq);
    free(s->o);
    for (int k = 0; k < 2; k++) {
        free(s->rope_cos[k]);
        free(s->rope_sin[k]);
        free(s->inv_freq[k]);
    }
    free_moe(&s->moe);
    free(s->cells);
    free(s->out_tokens);
    free(s->attn_blocks);
    free(s->logits);
    free(s->hidden);
    free(s->logit_row);
    memset(s, 0, sizeof *s);
}

/* ---- element-wise pieces ------------------------------------------------------------------- */

/* The gated FFN's activation, out = act(g) * u, as the architecture defines it. */
static void glu(arch_act act, float *out, const float *g, const float *u, int n) {
    static const kernels_glu kind[] = {[ACT_SILU] = KERNELS_SILU, [ACT_GELU_TANH] = KERNELS_GELU_TANH,
                                       [ACT_SWIGLU_OAI] = KERNELS_SILU_OAI};
    kernels_glu_act(kind[act], out, g, u, n);
}

/* cap * tanh(x * scale / cap): Gemma 2's soft-capping of attention scores and logits. */
static void softcap(float *x, int n, float scale, float cap) { kernels_softcap(x, n, scale, cap); }

/* RMSNorm of x into out; no weight (a block without that norm): a copy. */
static void norm_or_copy(float *out, const float *x, const float *w, int n, float eps) {
    if (w) kernels_rms_norm(out, x, w, n, eps);
    else if (out != x) memcpy(out, x, (size_t)n * sizeof *out);
}

/* ---- normalised inputs ------------------------------------------------------------------- */

/* The input of a group of products: RMSNorm(x) * w of the listed tokens (x itself when w is NULL),
 * and its quantisation when one of the products has an integer weight type. */
typedef struct norm_spec {
    const float *w;
    bool quantise;
    kernels_act fmt;
    const int32_t *tokens;           /* rows of x to normalise, NULL: 0..T-1 */
} norm_spec;

static void norm_tokens(const fwd_state *s, const norm_spec *ns, int i0, int i1, float *xn, uint8_t *xq) {
    const model_hparams *hp = &s->m->hp;
    int E = hp->n_embd;
    for (int i = i0; i < i1; i++) {
        int t = ns->tokens ? ns->tokens[i] : i;
        norm_or_copy(xn + (size_t)i * E, s->x + (size_t)t * E, ns->w, E, hp->norm_eps);
        if (ns->quantise) kernels_quantize_act(ns->fmt, xn + (size_t)i * E, E, xq + kernels_act_bytes(ns->fmt, E) * i);
    }
}

/* ---- matrix jobs ---------------------------------------------------------------------------- */

/* One job of products over the same input: each chunk is a range of rows of one weight. */
typedef struct mat_job {
    fwd_state *s;
    int T, layer;
    const nc_batch_entry *entries;
    const model_layer *L;
    norm_spec norm;                  /* the input is RMSNorm(x): per thread (private) or shared */
    bool private_in;
    const float *in;                 /* otherwise the input rows, f32 and quantised */
    const uint8_t *inq;
    int rows_per_chunk;
    const model_weight *w;           /* the weight of single-weight jobs */
    float *out;                      /* its output, [T][ldy] */
    int ldy;
    bool add;                        /* add to out (the residual) */
    kernels_act fmt;                 /* of the quantised input */
} mat_job;

/* The activations of a job's normalised input: int8 in the fast mode when every integer weight of
 * the job is Q8_0 or Q4_0, int16 otherwise. */
static kernels_act normed_fmt(const fwd_state *s, const model_weight *const *w, int n) {
    bool i8 = s->fast;
    for (int i = 0; i < n; i++)
        if (int_weight(w[i]) && w[i]->type != GGML_TYPE_Q8_0 && w[i]->type != GGML_TYPE_Q4_0) i8 = false;
    return i8 ? KERNELS_ACT_I8 : KERNELS_ACT_I16;
}

static void prepare_private(void *arg, int ith) {
    mat_job *j = arg;
    fwd_thread *t = &j->s->thr[ith];
    norm_tokens(j->s, &j->norm, 0, j->T, t->xn, t->xq);
}

/* This chunk's input: the thread's private copy or the shared rows. */
static void job_input(const mat_job *j, int ith, const float **in, const uint8_t **inq) {
    if (j->private_in) {
        *in = j->s->thr[ith].xn;
        *inq = j->s->thr[ith].xq;
    } else {
        *in = j->in;
        *inq = j->inq;
    }
}

/* Rows [r0, r1) of w times T input rows (f32 X, quantised Xq rows of xq_bytes) into Y (ldy apart).
 * A transposed weight (Hugging Face's [in][out] experts, float only) is the product X A over
 * its columns r0..r1, which kernels_mix computes. */
static void weight_mul(const model_weight *w, const float *X, kernels_act fmt, const uint8_t *Xq, int T, float *Y,
                       int ldy, int r0, int r1, bool add, void *scratch) {
    if (w->transposed) {
        kernels_mix(w->type, (const uint8_t *)w->data + quant_row_bytes(w->type, r0), w->row_bytes, w->cols, r1 - r0, X,
                    w->cols, T, Y, ldy);
        return;
    }
    if (w->ilv) kernels_mul(w->type | KERNELS_ILV, w->ilv, w->row_bytes, w->cols, X, fmt, Xq, T, Y, ldy, r0, r1, add, scratch);
    else kernels_mul(w->type, w->data, w->row_bytes, w->cols, X, fmt, Xq, T, Y, ldy, r0, r1, add, scratch);
}

/* Rows [r0, r1) of w for tokens [t0, t1) of the job's input into Y (token t0's row first). */
static void mul_tokens(const mat_job *j, const model_weight *w, const float *in, const uint8_t *inq, int t0, int t1,
                       float *Y, int ldy, int r0, int r1, bool add, int ith) {
    weight_mul(w, in ? in + (size_t)t0 * w->cols : NULL, j->fmt,
               inq ? inq + (size_t)t0 * kernels_act_bytes(j->fmt, w->cols) : NULL, t1 - t0, Y, ldy, r0, r1, add,
               j->s->thr[ith].pack);
}

static void single_chunk(void *arg, int c, int ith) {
    const mat_job *j = arg;
    const float *in;
    const uint8_t *inq;
    job_input(j, ith, &in, &inq);
    int r0 = c * j->rows_per_chunk, r1 = r0 + j->rows_per_chunk < j->w->rows ? r0 + j->rows_per_chunk : j->w->rows;
    mul_tokens(j, j->w, in, inq, 0, j->T, j->out + r0, j->ldy, r0, r1, j->add, ith);
}

static void norm_chunk(void *arg, int c, int ith) {
    const mat_job *j = arg;
    norm_tokens(j->s, &j->norm, c, c + 1, j->s->xn, j->s->xnq);
}

/* Normalise the job's tokens once into the shared xn / xnq. */
static void run_norm(fwd_state *s, mat_job *j) {
    pool_run_chunks(s->pool, &(pool_task){.chunk = norm_chunk, .arg = j, .n_chunks = j->T});
    j->in = s->xn;
    j->inq = s->xnq;
}

/* Runs job j with the normalised input: few tokens normalise per thread as the job starts, more
 * in a job of their own. */
static void run_normed(fwd_state *s, mat_job *j, void (*chunk)(void *, int, int), int n) {
    j->private_in = j->T <= FWD_PRIVATE_T;
    if (!j->private_in) run_norm(s, j);
    pool_run_chunks(s->pool, &(pool_task){.prepare = j->private_in ? prepare_private : NULL, .chunk = chunk, .arg = j,
                                           .n_chunks = n});
}

/* ---- queries, keys and values ----------------------------------------------------------------- */

/* Rotate the first n_rot dimensions of one head: pairs of adjacent dimensions (2i, 2i+1), or
 * dimension i with i + n_rot/2 ("neox": the halves, as transformers' rotate_half). */
static void rope_head(float *v, const model_hparams *hp, const float *cs, const float *sn) {
    int half = hp->n_rot / 2;
    for (int i = 0; i < half; i++) {
        int a = hp->rope_neox ? i : 2 * i, b = hp->rope_neox ? i + half : 2 * i + 1;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs[i] - x1 * sn[i];
        v[b] = x0 * sn[i] + x1 * cs[i];
    }
}

/* The token parts of a QKV job: when the heads do not divide evenly among the threads
 * (SmolLM2's 15 heads would split 8:7), each head's tokens of a prompt are split between them,
 * at the cost of packing the head's weights once per part; a few tokens stay one part (a head's
 * rows are the smallest useful chunk). */
static int qkv_parts(const fwd_state *s, int T) {
    const model_hparams *hp = &s->m->hp;
    return T >= 16 && (hp->n_head + 2 * hp->n_head_kv) % s->n_threads ? s->n_threads : 1;
}

/* The rotary table of a layer for the tokens of the micro-batch. */
static void layer_rope(const fwd_state *s, const model_layer *L, const float **cs, const float **sn) {
    int k = L->sliding && s->n_ropes > 1;
    *cs = s->rope_cos[k];
    *sn = s->rope_sin[k];
}

/* Head h of token t's key and/or value into its cache cell. */
static void store_head(const mat_job *j, int t, int h, const float *k, const float *v) {
    fwd_state *s = j->s;
    int hd = s->m->hp.head_dim;
    kv_store(&s->kv, j->layer, j->entries[t].seq, s->cells[t], j->entries[t].pos, h * hd, hd, k, v);
}

/* A query or key head after its projection: bias, per-head norm, rotation; keys and values go
 * to the cache. kind: 0 query, 1 key, 2 value. */
static void finish_head(const mat_job *j, int t, int kind, int h, float *v, const float *bias) {
    fwd_state *s = j->s;
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = j->L;
    int hd = hp->head_dim;
    if (bias)
        for (int i = 0; i < hd; i++) v[i] += bias[h * hd + i];
    if (hp->arch->qk_norm == QK_NORM_ALL) { /* normalised over all heads once every head is done */
        if (kind == 2) store_head(j, t, h, NULL, v);
        return;
    }
    if (kind < 2 && hp->arch->qk_norm == QK_NORM_HEAD) kernels_rms_norm(v, v, kind ? L->k_norm : L->q_norm, hd, hp->norm_eps);
    if (kind < 2 && L->rope) {
        const float *cs, *sn;
        layer_rope(s, L, &cs, &sn);
        size_t half = (size_t)hp->n_rot / 2;
        rope_head(v, hp, cs + t * half, sn + t * half);
    }
    if (kind > 0)
        store_head(j, t, h, kind == 1 ? v : NULL, kind == 2 ? v : NULL);
}

/* One head of Q, K or V for one part of the tokens. Heads 0..n_head-1 are query heads, then the
 * key heads, then the values; chunk c is part c % parts of head c / parts. */
static void qkv_chunk(void *arg, int c, int ith) {
    const mat_job *j = arg;
    fwd_state *s = j->s;
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = j->L;
    int hd = hp->head_dim, nq = hp->n_head, nkv = hp->n_head_kv, parts = qkv_parts(s, j->T), t0, t1;
    pool_split(j->T, c % parts, parts, &t0, &t1);
    c /= parts;
    const model_weight *w;
    const float *bias;
    float *out;
    int h, ld, kind;
    if (c < nq) { w = &L->wq; bias = L->bq; out = s->q; h = c; ld = (int)q_dim(hp); kind = 0; }
    else if (c < nq + nkv) { w = &L->wk; bias = L->bk; out = s->k; h = c - nq; ld = (int)kv_dim(hp); kind = 1; }
    else { w = &L->wv; bias = L->bv; out = s->v; h = c - nq - nkv; ld = (int)kv_dim(hp); kind = 2; }
    const float *in;
    const uint8_t *inq;
    job_input(j, ith, &in, &inq);
    mul_tokens(j, w, in, inq, t0, t1, out + (size_t)t0 * ld + h * hd, ld, h * hd, (h + 1) * hd, false, ith);
    for (int t = t0; t < t1; t++) finish_head(j, t, kind, h, out + (size_t)t * ld + h * hd, bias);
}

/* OLMo 2 normalises all query heads together and all key heads together: per token, after
 * every head's projection; then the rotation and the keys' write to the cache. */
static void qk_all_chunk(void *arg, int t, int ith) {
    const mat_job *j = arg;
    fwd_state *s = j->s;
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = j->L;
    int hd = hp->head_dim;
    float *q = s->q + (size_t)t * q_dim(hp), *k = s->k + (size_t)t * kv_dim(hp);
    kernels_rms_norm(q, q, L->q_norm, (int)q_dim(hp), hp->norm_eps);
    kernels_rms_norm(k, k, L->k_norm, (int)kv_dim(hp), hp->norm_eps);
    const float *cs, *sn;
    layer_rope(s, L, &cs, &sn);
    size_t half = (size_t)hp->n_rot / 2;
    for (int h = 0; L->rope && h < hp->n_head; h++) rope_head(q + h * hd, hp, cs + t * half, sn + t * half);
    for (int h = 0; h < hp->n_head_kv; h++) {
        if (L->rope) rope_head(k + h * hd, hp, cs + t * half, sn + t * half);
        store_head(j, t, h, k + h * hd, NULL);
    }
}

/* ---- attention ---------------------------------------------------------------------------- */

typedef struct attn_job {
    fwd_state *s;
    int layer, T;
    const nc_batch_entry *entries;
    bool quantise;                   /* the output projection has an integer type */
} attn_job;

/* Row r of a query block's output (token t0 + r / rep, head r % rep of group g), as the block's
 * queries are laid out in attn_q. */
static float *attn_row(const fwd_state *s, int t0, int g, int r) {
    const model_hparams *hp = &s->m->hp;
    int rep = hp->n_head / hp->n_head_kv;
    return s->attn + (size_t)(t0 + r / rep) * q_dim(hp) + (size_t)(g * rep + r % rep) * hp->head_dim;
}

/* Which spans a block visits: cells of the sequence (full layers), or positions (sliding layers
 * keeping a ring); both in spans of KV_BLOCK (= FWD_ATTN_SPAN) starting at its multiples. */
typedef struct attn_cells {
    bool ring;
    int32_t begin, end;              /* span coordinates (cells, or positions) to visit */
} attn_cells;

static attn_cells block_cells(const fwd_state *s, int layer, int seq, int32_t lo, int32_t hi) {
    const kv_cache *kv = &s->kv;
    attn_cells c = {.ring = kv_is_ring(kv, layer)};
    if (c.ring) {
        c.begin = lo / FWD_ATTN_SPAN * FWD_ATTN_SPAN;
        c.end = hi + 1;
    } else {
        const int32_t *pos = kv_positions(kv, seq);
        int32_t n = kv_seq_len(kv, seq);
        c.begin = fwd_lower_bound(pos, n, lo) / FWD_ATTN_SPAN * FWD_ATTN_SPAN;
        c.end = fwd_lower_bound(pos, n, hi + 1);
    }
    return c;
}

/* The cells [*a, *z) of the span at c0 (nc cells, positions `label`) whose positions lie in
 * [lo, hi]: a contiguous run, since positions increase along a sequence's cells and a ring span
 * holds consecutive positions. */
static void span_range(const attn_cells *c, const int32_t *label, int32_t c0, int nc, int32_t lo, int32_t hi, int *a,
                       int *z) {
    if (c->ring) { /* cell c0 + k holds position c0 + k, when it holds it at all */
        int32_t first = lo > c0 ? lo : c0, last = hi < c0 + nc - 1 ? hi : c0 + nc - 1;
        *a = first - c0;
        *z = last >= first ? last - c0 + 1 : *a;
    } else {
        *a = fwd_lower_bound(label, nc, lo);
        *z = fwd_lower_bound(label, nc, hi + 1);
    }
}

/* Row pr's logits over its visible cells [a, z) of the span at c0: soft-capped when the model
 * caps them (the scale is then applied here), and -inf for a ring cell that holds another
 * position than its own (a gap in them). */
static void row_logits(float *pr, const attn_cells *c, const int32_t *label, int32_t c0, int a, int z, float scale,
                       float cap) {
    if (cap > 0) softcap(pr + a, z - a, scale, cap);
    for (int i = a; c->ring && i < z; i++)
        if (label[i] != c0 + i) pr[i] = -INFINITY;
}

/* H2O's accumulated attention (kv_evict.h): once a block's rows have their final maxima and sums,
 * each visible cell's softmax weight in every row, added to the cell's score. A second pass over
 * the keys recomputes the logits (the same bits as the first pass) rather than keeping every
 * span's; each weight is rounded to fixed point on its own, so a cell's score is the same integer
 * whatever block, batch or thread added its weights. */
static void add_attention_scores(fwd_state *s, int layer, int seq, int g, int R, const attn_cells *cells,
                                 const int32_t *lo, const int32_t *hi, fwd_thread *th) {
    const model_hparams *hp = &s->m->hp;
    kv_cache *kv = &s->kv;
    int hd = hp->head_dim, rep = hp->n_head / hp->n_head_kv;
    float scale = hp->attn_scale, cap = hp->attn_softcap;
    for (int32_t c0 = cells->begin; c0 < cells->end; c0 += FWD_ATTN_SPAN) {
        int nc = cells->end - c0 < FWD_ATTN_SPAN ? cells->end - c0 : FWD_ATTN_SPAN;
        kv_span sp = kv_span_at(kv, layer, seq, c0);
        kv_mat keys = kv_span_keys(kv, &sp, g, nc, th->kv_keys);
        kernels_mix(keys.type, keys.a, keys.row_bytes, hd, nc, th->attn_q, hd, R, th->scores, nc);
        memset(th->attn_score, 0, sizeof(uint64_t) * (size_t)nc);
        for (int r = 0; r < R; r++) {
            int a, z;
            span_range(cells, sp.label, c0, nc, lo[r / rep], hi[r / rep], &a, &z);
            if (z <= a) continue;
            float *pr = th->scores + (size_t)r * nc, m = th->attn_max[r];
            row_logits(pr, cells, sp.label, c0, a, z, scale, cap);
            kernels_softmax_span(pr + a, z - a, cap > 0 ? 1.0f : scale, &m); /* exp(logit - the row's maximum) */
            double w = KV_SCORE_ONE / th->attn_sum[r];
            for (int c = a; c < z; c++) th->attn_score[c] += (uint64_t)((double)pr[c] * w + 0.5);
        }
        for (int c = 0; c < nc; c++)
            if (th->attn_score[c]) kv_score_add(kv, seq, c0 + c, th->attn_score[c]);
    }
}

/* Causal attention of a block of queries: consecutive tokens t0..t0+nt-1 of one sequence, and the
 * query heads of group g, which share one KV head (GQA). Query i sees the cached positions in
 * [lo_i, pos_i]: everything up to its own position, or the last swa_window of them in a sliding
 * layer (the batch's keys are already in the cache). Streaming softmax: the cells go by in spans
 * of FWD_ATTN_SPAN, each adding to running maxima, sums and outputs (rescaled when the maximum
 * grows), so no score matrix longer than a span exists whatever the context; an attention sink
 * (gpt-oss) starts the running sum as one more logit with no value. Both products go through the
 * kernels, so the block reads its keys and values once: the scores of all its queries
 * (kernels_mix over the transposed keys), then their weighted sums of the values (kernels_mix over
 * the values by cell). Each query's softmax runs over exactly its visible cells of a span, its
 * hidden cells get weight zero (which leaves its fma chains as they were), and spans sit at fixed
 * multiples of the span: a token's result is the same bits whatever block, batch, or decode
 * versus prefill computed it. */
static void attend_block(fwd_state *s, int layer, const nc_batch_entry *e, int t0, int nt, int g, fwd_thread *th) {
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = &s->m->layers[layer];
    const kv_cache *kv = &s->kv;
    int hd = hp->head_dim, rep = hp->n_head / hp->n_head_kv, R = nt * rep, seq = e[t0].seq;
    int32_t window = L->sliding ? hp->swa_window : 0, lo[FWD_ATTN_BLOCK], hi[FWD_ATTN_BLOCK], lo_min = INT32_MAX,
            hi_max = 0;
    for (int i = 0; i < nt; i++) {
        hi[i] = e[t0 + i].pos;
        lo[i] = window && hi[i] - window + 1 > 0 ? hi[i] - window + 1 : 0;
        lo_min = lo[i] < lo_min ? lo[i] : lo_min;
        hi_max = hi[i] > hi_max ? hi[i] : hi_max;
        memcpy(th->attn_q + (size_t)i * rep * hd, s->q + (size_t)(t0 + i) * q_dim(hp) + (size_t)g * rep * hd,
               sizeof(float) * (size_t)rep * hd);
        memset(s->attn + (size_t)(t0 + i) * q_dim(hp) + (size_t)g * rep * hd, 0, sizeof(float) * (size_t)rep * hd);
    }
    for (int r = 0; r < R; r++) { /* a sink is a first logit whose value vector is zero */
        th->attn_max[r] = L->sinks ? L->sinks[g * rep + r % rep] : -INFINITY;
        th->attn_sum[r] = L->sinks ? 1.0 : 0.0;
    }
    attn_cells cells = block_cells(s, layer, seq, lo_min, hi_max);
    float scale = hp->attn_scale, cap = hp->attn_softcap;
    for (int32_t c0 = cells.begin; c0 < cells.end; c0 += FWD_ATTN_SPAN) {
        int nc = cells.end - c0 < FWD_ATTN_SPAN ? cells.end - c0 : FWD_ATTN_SPAN;
        kv_span sp = kv_span_at(kv, layer, seq, c0);
        const int32_t *label = sp.label;
        kv_mat keys = kv_span_keys(kv, &sp, g, nc, th->kv_keys), values = kv_span_values(kv, &sp, g, nc, th->kv_values);
        float *p = th->scores; /* [R][nc] */
        kernels_mix(keys.type, keys.a, keys.row_bytes, hd, nc, th->attn_q, hd, R, p, nc);
        bool seen[FWD_ATTN_BLOCK];
        for (int r = 0; r < R; r++) {
            int i = r / rep, a, z; /* the row's visible cells are [a, z) of the span */
            span_range(&cells, label, c0, nc, lo[i], hi[i], &a, &z);
            if (r % rep == 0) seen[i] = z > a;
            float *pr = p + (size_t)r * nc;
            if (z <= a) {
                memset(pr, 0, sizeof(float) * (size_t)nc);
                continue;
            }
            row_logits(pr, &cells, label, c0, a, z, scale, cap);
            /* exactly the visible cells: their sums then depend on the query alone, whatever cells
             * the block around it spans */
            float m = th->attn_max[r], add = kernels_softmax_span(pr + a, z - a, cap > 0 ? 1.0f : scale, &m);
            memset(pr, 0, sizeof(float) * (size_t)a);
            memset(pr + z, 0, sizeof(float) * (size_t)(nc - z));
            float corr = expf(th->attn_max[r] - m); /* 0 on the first span without a sink */
            th->attn_sum[r] = th->attn_sum[r] * corr + add;
            th->attn_max[r] = m;
            float *out = attn_row(s, t0, g, r);
            if (corr != 1.0f)
                for (int d = 0; d < hd; d++) out[d] *= corr;
        }
        kernels_mix(values.type, values.a, values.row_bytes, nc, hd, p, nc, R, th->attn_part, hd);
        for (int r = 0; r < R; r++) {
            if (!seen[r / rep]) continue;
            float *out = attn_row(s, t0, g, r);
            const float *part = th->attn_part + (size_t)r * hd;
            for (int d = 0; d < hd; d++) out[d] += part[d];
        }
    }
    for (int r = 0; r < R; r++) {
        float inv = (float)(1.0 / th->attn_sum[r]);
        float *out = attn_row(s, t0, g, r);
        for (int d = 0; d < hd; d++) out[d] *= inv;
    }
    if (kv_scoring(kv, seq) && !cells.ring) add_attention_scores(s, layer, seq, g, R, &cells, lo, hi, th);
}

/* Chunk c: query block c / n_head_kv, KV head c % n_head_kv. */
static void attn_chunk(void *arg, int c, int ith) {
    const attn_job *j = arg;
    fwd_state *s = j->s;
    const model_hparams *hp = &s->m->hp;
    int G = hp->n_head_kv, b = c / G, g = c % G, span = hp->n_head / G * hp->head_dim;
    int t0 = s->attn_blocks[b], nt = s->attn_blocks[b + 1] - t0;
    attend_block(s, j->layer, j->entries, t0, nt, g, &s->thr[ith]);
    if (j->quantise)
        for (int t = t0; t < t0 + nt; t++)
            kernels_quantize_act_part(KERNELS_ACT_I16, s->attn + (size_t)t * q_dim(hp), (int)q_dim(hp), g * span / 32,
                                      (g + 1) * span / 32, s->attnq + (size_t)t * s->act_q);
}

/* The query blocks of a micro-batch: runs of consecutive entries of one sequence, at most
 * FWD_ATTN_BLOCK long. */
static void attn_blocks(fwd_state *s, const nc_batch_entry *e, int T) {
    int n = 0;
    for (int t = 0; t < T; t++)
        if (t == 0 || e[t].seq != e[t - 1].seq || t - s->attn_blocks[n - 1] == FWD_ATTN_BLOCK) s->attn_blocks[n++] = t;
    s->attn_blocks[n] = T;
    s->n_attn_blocks = n;
}

/* ---- residual ------------------------------------------------------------------------------- */

/* A block's output o (bias, post-norm) added to the residual stream, scaled. */
typedef struct residual_job {
    fwd_state *s;
    const float *bias, *post_norm;
} residual_job;

static void residual_chunk(void *arg, int t, int ith) {
    const residual_job *j = arg;
    fwd_state *s = j->s;
    const model_hparams *hp = &s->m->hp;
    int E = hp->n_embd;
    float *o = s->o + (size_t)t * E, *x = s->x + (size_t)t * E;
    if (j->bias)
        for (int i = 0; i < E; i++) o[i] += j->bias[i];
    norm_or_copy(o, o, j->post_norm, E, hp->norm_eps);
    for (int i = 0; i < E; i++) x[i] += hp->residual_scale * o[i];
}

/* Whether a block's output goes straight into the residual (added by the product itself). */
static bool plain_residual(const fwd_state *s, const float *bias, const float *post_norm) {
    return !bias && !post_norm && s->m->hp.residual_scale == 1.0f;
}

/* x += residual_scale * post_norm(W in + bias) for rows split into chunks. */
static void project_residual(fwd_state *s, int T, const model_weight *w, const float *in, const uint8_t *inq,
                             const float *bias, const float *post_norm) {
    int E = s->m->hp.n_embd;
    bool plain = plain_residual(s, bias, post_norm);
    mat_job j = {.s = s, .T = T, .in = in, .inq = inq, .rows_per_chunk = s->embd_rows, .w = w,
                 .out = plain ? s->x : s->o, .ldy = E, .add = plain, .fmt = KERNELS_ACT_I16};
    pool_run_chunks(s->pool, &(pool_task){.chunk = single_chunk, .arg = &j, .n_chunks = n_chunks(E, s->embd_rows)});
    if (!plain) {
        residual_job r = {.s = s, .bias = bias, .post_norm = post_norm};
        pool_run_chunks(s->pool, &(pool_task){.chunk = residual_chunk, .arg = &r, .n_chunks = T});
    }
}

/* ---- dense FFN ------------------------------------------------------------------------------- */

/* Rows [r0, r1) of gate and up for all tokens, then the activation into ffn (and its
 * quantisation when the down projection has an integer type; r0 and r1 are then multiples of 32). */
static void ffn_chunk(void *arg, int c, int ith) {
    const mat_job *j = arg;
    fwd_state *s = j->s;
    const model_layer *L = j->L;
    int F = s->m->hp.n_ff, r0 = c * j->rows_per_chunk, r1 = r0 + j->rows_per_chunk < F ? r0 + j->rows_per_chunk : F;
    int n = r1 - r0;
    const float *in;
    const uint8_t *inq;
    job_input(j, ith, &in, &inq);
    fwd_thread *th = &s->thr[ith];
    mul_tokens(j, &L->ffn_gate, in, inq, 0, j->T, th->gate, n, r0, r1, false, ith);
    mul_tokens(j, &L->ffn_up, in, inq, 0, j->T, th->up, n, r0, r1, false, ith);
    bool quantise = int_weight(&L->ffn_down);
    for (int t = 0; t < j->T; t++) {
        float *o = s->ffn + (size_t)t * F;
        glu(s->m->hp.arch->act, o + r0, th->gate + (size_t)t * n, th->up + (size_t)t * n, n);
        if (quantise) kernels_quantize_act_part(KERNELS_ACT_I16, o, F, r0 / 32, r1 / 32, s->ffnq + (size_t)t * s->act_ff);
    }
}

static void dense_ffn(fwd_state *s, int il, int T) {
    const model_layer *L = &s->m->layers[il];
    kernels_act fmt = normed_fmt(s, (const model_weight *[]){&L->ffn_gate, &L->ffn_up}, 2);
    mat_job ffn = {.s = s, .T = T, .L = L, .rows_per_chunk = s->ffn_rows, .fmt = fmt,
                   .norm = {.w = L->ffn_norm, .quantise = int_weight(&L->ffn_gate) || int_weight(&L->ffn_up), .fmt = fmt}};
    run_normed(s, &ffn, ffn_chunk, n_chunks(s->m->hp.n_ff, s->ffn_rows));
    project_residual(s, T, &L->ffn_down, s->ffn, s->ffnq, NULL, L->ffn_post_norm);
}

/* ---- mixture of experts ------------------------------------------------------------------------ */

/* Route token t: its router logits to k experts and weights. Ties go to the lower expert id. */
void fwd_route(fwd_state *s, const model_layer *L, int t) {
    const model_hparams *hp = &s->m->hp;
    int N = hp->n_expert, K = hp->n_expert_used;
    float *z = s->moe.logits + (size_t)t * N;
    int32_t *ex = s->moe.expert + (size_t)t * K;
    float *w = s->moe.weight + (size_t)t * K;
    if (L->router_bias)
        for (int e = 0; e < N; e++) z[e] += L->router_bias[e];
    double mx = -INFINITY, total = 0;
    for (int e = 0; e < N; e++) mx = z[e] > mx ? z[e] : mx;
    for (int e = 0; e < N; e++) total += exp((double)z[e] - mx);
    for (int k = 0; k < K; k++) { /* selection: k is small */
        int best = -1;
        for (int e = 0; e < N; e++) {
            bool taken = false;
            for (int i = 0; i < k; i++) taken = taken || ex[i] == e;
            if (!taken && (best < 0 || z[e] > z[best])) best = e;
        }
        ex[k] = best;
    }
    /* gpt-oss: softmax over the chosen logits; otherwise their share of the softmax over all
     * experts, renormalised to sum to one when the model asks (the same numbers then) */
    double chosen = 0;
    for (int k = 0; k < K; k++) chosen += exp((double)z[ex[k]] - mx);
    double denom = hp->arch->router_softmax_topk || hp->expert_norm ? chosen : total;
    for (int k = 0; k < K; k++) w[k] = (float)(exp((double)z[ex[k]] - mx) / denom);
}

/* Rows of the experts' work: (token, slot) pairs sorted by expert (then token), their inputs
 * gathered; and the chunks of the two expert jobs. */
static void group_by_expert(fwd_state *s, int T) {
    const model_hparams *hp = &s->m->hp;
    fwd_moe *mo = &s->moe;
    int N = hp->n_expert, K = hp->n_expert_used, E = hp->n_embd;
    memset(mo->start, 0, (size_t)(N + 1) * sizeof *mo->start);
    for (int i = 0; i < T * K; i++) mo->start[mo->expert[i] + 1]++;
    for (int e = 0; e < N; e++) mo->start[e + 1] += mo->start[e];
    int32_t *next = mo->chunks; /* borrowed as a cursor per expert before the chunks are listed */
    memcpy(next, mo->start, (size_t)N * sizeof *next);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
            int r = next[mo->expert[t * K + k]]++;
            mo->row[t * K + k] = r;
            mo->token[r] = t;
            memcpy(mo->in + (size_t)r * E, s->xn + (size_t)t * E, (size_t)E * sizeof(float));
            if (mo->inq) memcpy(mo->inq + (size_t)r * s->act_embd, s->xnq + (size_t)t * s->act_embd, s->act_embd);
        }
}

/* List (expert, first row) chunks over `rows` output rows of every expert that has tokens. */
static int list_chunks(fwd_state *s, int rows, int per) {
    fwd_moe *mo = &s->moe;
    int n = 0;
    for (int e = 0; e < s->m->hp.n_expert; e++)
        if (mo->start[e + 1] > mo->start[e])
            for (int r0 = 0; r0 < rows; r0 += per) {
                mo->chunks[2 * n] = e;
                mo->chunks[2 * n + 1] = r0;
                n++;
            }
    return mo->n_chunks = n;
}

typedef struct moe_job {
    fwd_state *s;
    const model_layer *L;
    kernels_act fmt;                 /* of the gathered inputs */
} moe_job;

static void add_bias(float *y, int ldy, int n_rows, const float *bias, int n) {
    for (int r = 0; bias && r < n_rows; r++)
        for (int i = 0; i < n; i++) y[(size_t)r * ldy + i] += bias[i];
}

/* Rows [r0, r1) of one expert's gate and up for its tokens, then the activation. */
static void moe_gate_up_chunk(void *arg, int c, int ith) {
    const moe_job *j = arg;
    fwd_state *s = j->s;
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = j->L;
    fwd_moe *mo = &s->moe;
    fwd_thread *th = &s->thr[ith];
    int e = mo->chunks[2 * c], r0 = mo->chunks[2 * c + 1], F = hp->n_ff_exp, E = hp->n_embd;
    int r1 = r0 + s->exp_rows < F ? r0 + s->exp_rows : F, n = r1 - r0;
    int first = mo->start[e], T = mo->start[e + 1] - first;
    const float *X = mo->in + (size_t)first * E;
    const uint8_t *Xq = mo->inq ? mo->inq + (size_t)first * s->act_embd : NULL;
    if (L->exp_gate) {
        weight_mul(&L->exp_gate[e], X, j->fmt, Xq, T, th->gate, n, r0, r1, false, th->pack);
        weight_mul(&L->exp_up[e], X, j->fmt, Xq, T, th->up, n, r0, r1, false, th->pack);
        add_bias(th->gate, n, T, L->exp_gate_b ? L->exp_gate_b + (size_t)e * F + r0 : NULL, n);
        add_bias(th->up, n, T, L->exp_up_b ? L->exp_up_b + (size_t)e * F + r0 : NULL, n);
    } else { /* fused: output rows of gate and up interleaved, or gate's then up's */
        float *gu = mo->gate_up + (size_t)ith * s->n_batch * 2 * s->exp_rows;
        const model_weight *w = &L->exp_gate_up[e];
        const float *b = L->exp_gate_up_b ? L->exp_gate_up_b + (size_t)e * 2 * F : NULL;
        if (hp->gate_up == GATE_UP_INTERLEAVED) {
            weight_mul(w, X, j->fmt, Xq, T, gu, 2 * n, 2 * r0, 2 * r1, false, th->pack);
            add_bias(gu, 2 * n, T, b ? b + 2 * r0 : NULL, 2 * n);
            for (int t = 0; t < T; t++)
                for (int i = 0; i < n; i++) {
                    th->gate[(size_t)t * n + i] = gu[(size_t)t * 2 * n + 2 * i];
                    th->up[(size_t)t * n + i] = gu[(size_t)t * 2 * n + 2 * i + 1];
                }
        } else {
            weight_mul(w, X, j->fmt, Xq, T, th->gate, n, r0, r1, false, th->pack);
            weight_mul(w, X, j->fmt, Xq, T, th->up, n, F + r0, F + r1, false, th->pack);
            add_bias(th->gate, n, T, b ? b + r0 : NULL, n);
            add_bias(th->up, n, T, b ? b + F + r0 : NULL, n);
        }
    }
    bool quantise = mo->actq != NULL && int_weight(&L->exp_down[e]);
    for (int t = 0; t < T; t++) {
        float *a = mo->act + (size_t)(first + t) * F;
        glu(hp->arch->act, a + r0, th->gate + (size_t)t * n, th->up + (size_t)t * n, n);
        if (quantise) kernels_quantize_act_part(KERNELS_ACT_I16, a, F, r0 / 32, r1 / 32, mo->actq + (size_t)(first + t) * s->act_ffe);
    }
}

/* Rows [r0, r1) of one expert's down projection for its tokens, plus its bias. */
static void moe_down_chunk(void *arg, int c, int ith) {
    const moe_job *j = arg;
    fwd_state *s = j->s;
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = j->L;
    fwd_moe *mo = &s->moe;
    int e = mo->chunks[2 * c], r0 = mo->chunks[2 * c + 1], F = hp->n_ff_exp, E = hp->n_embd;
    int r1 = r0 + s->embd_rows < E ? r0 + s->embd_rows : E;
    int first = mo->start[e], T = mo->start[e + 1] - first;
    float *Y = mo->out + (size_t)first * E + r0;
    weight_mul(&L->exp_down[e], mo->act + (size_t)first * F, KERNELS_ACT_I16,
               mo->actq ? mo->actq + (size_t)first * s->act_ffe : NULL, T, Y, E, r0, r1, false, s->thr[ith].pack);
    add_bias(Y, E, T, L->exp_down_b ? L->exp_down_b + (size_t)e * E + r0 : NULL, r1 - r0);
}

static void router_chunk(void *arg, int t, int ith) {
    const moe_job *j = arg;
    fwd_route(j->s, j->L, t);
}

/* o[t] = the weighted sum of token t's expert outputs, in the order of its slots. */
static void combine_chunk(void *arg, int t, int ith) {
    const moe_job *j = arg;
    fwd_state *s = j->s;
    const model_hparams *hp = &s->m->hp;
    int E = hp->n_embd, K = hp->n_expert_used;
    float *o = s->o + (size_t)t * E;
    memset(o, 0, (size_t)E * sizeof *o);
    for (int k = 0; k < K; k++) {
        float w = s->moe.weight[t * K + k];
        const float *y = s->moe.out + (size_t)s->moe.row[t * K + k] * E;
        for (int i = 0; i < E; i++) o[i] = fmaf(w, y[i], o[i]);
    }
}

/* The experts' FFN: normalise, route, group the tokens by expert, run each expert's products once
 * for all its tokens, combine, add to the residual. */
static void moe_ffn(fwd_state *s, int il, int T) {
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = &s->m->layers[il];
    bool quantise = s->moe.inq != NULL || int_weight(&L->router);
    mat_job norm = {.s = s, .T = T, .norm = {.w = L->ffn_norm, .quantise = quantise, .fmt = KERNELS_ACT_I16}};
    run_norm(s, &norm);
    int rr = chunk_rows(hp->n_expert, s->n_threads);
    mat_job router = {.s = s, .T = T, .in = s->xn, .inq = s->xnq, .rows_per_chunk = rr, .w = &L->router,
                      .out = s->moe.logits, .ldy = hp->n_expert, .fmt = KERNELS_ACT_I16};
    pool_run_chunks(s->pool, &(pool_task){.chunk = single_chunk, .arg = &router, .n_chunks = n_chunks(hp->n_expert, rr)});
    moe_job j = {.s = s, .L = L, .fmt = KERNELS_ACT_I16};
    pool_run_chunks(s->pool, &(pool_task){.chunk = router_chunk, .arg = &j, .n_chunks = T});
    group_by_expert(s, T);
    pool_run_chunks(s->pool, &(pool_task){.chunk = moe_gate_up_chunk, .arg = &j,
                                           .n_chunks = list_chunks(s, hp->n_ff_exp, s->exp_rows)});
    pool_run_chunks(s->pool, &(pool_task){.chunk = moe_down_chunk, .arg = &j,
                                           .n_chunks = list_chunks(s, hp->n_embd, s->embd_rows)});
    pool_run_chunks(s->pool, &(pool_task){.chunk = combine_chunk, .arg = &j, .n_chunks = T});
    residual_job r = {.s = s, .post_norm = L->ffn_post_norm};
    pool_run_chunks(s->pool, &(pool_task){.chunk = residual_chunk, .arg = &r, .n_chunks = T});
}

/* ---- the pass ---------------------------------------------------------------------------- */

static void rope_tables(fwd_state *s, const nc_batch_entry *e, int T) {
    int half = s->m->hp.n_rot / 2;
    for (int k = 0; k < s->n_ropes; k++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < half; i++) {
                double a = (double)e[t].pos * s->inv_freq[k][i];
                s->rope_cos[k][t * half + i] = (float)(cos(a) * s->rope_mscale[k]);
                s->rope_sin[k][t * half + i] = (float)(sin(a) * s->rope_mscale[k]);
            }
}

static void embed(fwd_state *s, const nc_batch_entry *e, int T) {
    const model_weight *w = &s->m->tok_embd;
    const model_hparams *hp = &s->m->hp;
    float scale = hp->embd_scale * (hp->arch->embd_scale_sqrt ? sqrtf((float)hp->n_embd) : 1.0f);
    for (int t = 0; t < T; t++) {
        float *x = s->x + (size_t)t * w->cols;
        quant_dequantize_row(w->type, (const char *)w->data + (size_t)e[t].token * w->row_bytes, x, w->cols);
        if (scale != 1.0f)
            for (int i = 0; i < w->cols; i++) x[i] *= scale;
    }
}

static void attention(fwd_state *s, int il, const nc_batch_entry *e, int T) {
    const model_layer *L = &s->m->layers[il];
    const model_hparams *hp = &s->m->hp;
    kernels_act fmt = normed_fmt(s, (const model_weight *[]){&L->wq, &L->wk, &L->wv}, 3);
    mat_job qkv = {.s = s, .T = T, .layer = il, .entries = e, .L = L, .fmt = fmt,
                   .norm = {.w = L->attn_norm, .quantise = int_weight(&L->wq) || int_weight(&L->wk) || int_weight(&L->wv),
                            .fmt = fmt}};
    run_normed(s, &qkv, qkv_chunk, (hp->n_head + 2 * hp->n_head_kv) * qkv_parts(s, T));
    if (hp->arch->qk_norm == QK_NORM_ALL)
        pool_run_chunks(s->pool, &(pool_task){.chunk = qk_all_chunk, .arg = &qkv, .n_chunks = T});
    attn_job aj = {.s = s, .layer = il, .T = T, .entries = e, .quantise = int_weight(&L->wo)};
    pool_run_chunks(s->pool, &(pool_task){.chunk = attn_chunk, .arg = &aj, .n_chunks = s->n_attn_blocks * hp->n_head_kv});
    project_residual(s, T, &L->wo, s->attn, s->attnq, L->bo, L->attn_post_norm);
}

static void run_layer(fwd_state *s, int il, const nc_batch_entry *e, int T) {
    attention(s, il, e, T);
    if (s->m->layers[il].router.data) moe_ffn(s, il, T);
    else dense_ffn(s, il, T);
}

/* Final norm of the entries that want logits, kept as their hidden states, then the output
 * projection into their rows of the logits buffer, scaled and soft-capped as the model says. */
static void output_logits(fwd_state *s, const nc_batch_entry *e, int T, int first_entry) {
    int n_out = 0, row0 = -1;
    for (int t = 0; t < T; t++) {
        if (!e[t].logits) continue;
        if (row0 < 0) row0 = s->logit_row[first_entry + t];
        s->out_tokens[n_out++] = t;
    }
    if (n_out == 0) return;
    const model_hparams *hp = &s->m->hp;
    int V = hp->n_vocab, E = hp->n_embd;
    for (int i = 0; i < n_out; i++) /* the same norm as the projection's input (norm_tokens) */
        norm_or_copy(s->hidden + (size_t)(row0 + i) * E, s->x + (size_t)s->out_tokens[i] * E, s->m->output_norm, E,
                     hp->norm_eps);
    const model_weight *w = &s->m->output;
    float *logits = s->logits + (size_t)row0 * V;
    mat_job j = {.s = s, .T = n_out, .norm = {.w = s->m->output_norm, .quantise = int_weight(w), .fmt = KERNELS_ACT_I16,
                          .tokens = s->out_tokens},
                 .fmt = KERNELS_ACT_I16,
                 .rows_per_chunk = s->out_rows, .w = w, .out = logits, .ldy = V};
    run_normed(s, &j, single_chunk, n_chunks(V, s->out_rows));
    for (int i = 0; i < n_out; i++) {
        float *l = logits + (size_t)i * V;
        if (hp->final_softcap > 0) softcap(l, V, hp->logit_scale, hp->final_softcap);
        else if (hp->logit_scale != 1.0f)
            for (int k = 0; k < V; k++) l[k] *= hp->logit_scale;
    }
}

static int prepare_outputs(fwd_state *s, const nc_batch_entry *batch, int n, nc_err *err) {
    if (n > s->logit_row_cap) {
        int32_t *rows = realloc(s->logit_row, (size_t)n * sizeof *rows);
        if (!rows) return nc_fail(err, "out of memory for a batch of %d entries", n);
        s->logit_row = rows;
        s->logit_row_cap = n;
    }
    int n_out = 0;
    for (int i = 0; i < n; i++) s->logit_row[i] = batch[i].logits ? n_out++ : -1;
    if (n_out > s->logits_cap) {
        float *l = realloc(s->logits, (size_t)n_out * (size_t)s->m->hp.n_vocab * sizeof(float));
        if (!l) return nc_fail(err, "out of memory for logits of %d entries", n_out);
        s->logits = l;
        float *h = realloc(s->hidden, (size_t)n_out * (size_t)s->m->hp.n_embd * sizeof(float));
        if (!h) return nc_fail(err, "out of memory for the hidden states of %d entries", n_out);
        s->hidden = h;
        s->logits_cap = n_out;
    }
    s->n_entries = n;
    return 0;
}

/* Check every entry and claim its cache cell before computing anything, so a bad batch leaves
 * the cache as it was. */
static int claim_cells(fwd_state *s, const nc_batch_entry *batch, int n, int32_t *cells, nc_err *err) {
    int32_t *saved = malloc((size_t)kv_n_seq(&s->kv) * sizeof *saved);
    if (!saved) return nc_fail(err, "out of memory");
    for (int32_t q = 0; q < kv_n_seq(&s->kv); q++) saved[q] = kv_seq_len(&s->kv, q);
    for (int i = 0; i < n; i++) {
        int32_t tok = batch[i].token;
        if (tok < 0 || tok >= s->m->hp.n_vocab) {
            nc_fail(err, "batch entry %d: token id %d is outside the vocabulary 0..%d", i, tok, s->m->hp.n_vocab - 1);
            goto fail;
        }
        cells[i] = kv_append(&s->kv, batch[i].seq, batch[i].pos, tok, err);
        if (cells[i] < 0 || kv_window_check(&s->kv, batch[i].seq, batch[i].pos, s->m->hp.swa_window, err)) {
            nc_fail_prefix(err, "batch entry %d", i);
            goto fail;
        }
    }
    free(saved);
    return 0;
fail:
    for (int32_t q = 0; q < kv_n_seq(&s->kv); q++) kv_seq_truncate(&s->kv, q, saved[q]);
    free(saved);
    return -1;
}

int fwd_run(fwd_state *s, const nc_batch_entry *batch, int n, nc_err *err) {
    s->n_entries = 0;
    if (n <= 0) return nc_fail(err, "empty batch");
    int32_t *cells = malloc((size_t)n * sizeof *cells);
    if (!cells) return nc_fail(err, "out of memory for a batch of %d entries", n);
    if (prepare_outputs(s, batch, n, err) || claim_cells(s, batch, n, cells, err)) {
        s->n_entries = 0;
        free(cells);
        return -1;
    }
    for (int start = 0; start < n; start += s->n_batch) {
        int T = n - start < s->n_batch ? n - start : s->n_batch;
        const nc_batch_entry *e = batch + start;
        memcpy(s->cells, cells + start, (size_t)T * sizeof *cells);
        for (int t = 0; t < T; t++) kv_ring_claim(&s->kv, e[t].seq, e[t].pos);
        embed(s, e, T);
        rope_tables(s, e, T);
        attn_blocks(s, e, T);
        for (int il = 0; il < (s->gpu ? s->gpu_first : s->m->hp.n_layer); il++) run_layer(s, il, e, T);
        if (s->gpu) { /* the rest on the GPU */
            if (fwd_gpu_batch(s, e, T, start, err)) { /* the cells claimed hold nothing usable */
                for (int i = n - 1; i >= 0; i--) kv_seq_truncate(&s->kv, batch[i].seq, cells[i]);
                s->n_entries = 0;
                free(cells);
                return -1;
            }
            continue;
        }
        output_logits(s, e, T, start);
    }
    kv_commit(&s->kv);
    free(cells);
    for (int32_t q = 0; q < kv_n_seq(&s->kv); q++)
        if (kv_apply_budget(&s->kv, q, err)) return nc_fail_prefix(err, "after the batch, sequence %d", q);
    return 0;
}

/* Keys carry their position's rotation (RoPE, Su et al. 2021): a rotation by angle p * theta_i
 * of each pair. Moving a key from position p to p' is one more rotation by (p' - p) * theta_i,
 * since rotations compose; the YaRN magnitude scale was applied once and stays. */
int fwd_seq_keep(fwd_state *s, int32_t seq, const int32_t *cells, int32_t n, const int32_t *new_pos, nc_err *err) {
    const model_hparams *hp = &s->m->hp;
    int half = hp->n_rot / 2, kd = (int)kv_dim(hp);
    int32_t *old = malloc(((size_t)n + 1) * sizeof *old);
    float *cs = malloc(((size_t)n * (size_t)half * 2 * (size_t)s->n_ropes + 1) * sizeof *cs);
    float *key = malloc((size_t)kd * sizeof *key);
    if (!old || !cs || !key) {
        free(old);
        free(cs);
        free(key);
        return nc_fail(err, "out of memory re-rotating %d cached keys", n);
    }
    int rc = kv_seq_keep(&s->kv, seq, cells, n, new_pos, old, err);
    for (int k = 0; rc == 0 && k < s->n_ropes; k++) /* cos, sin of each cell's turn */
        for (int32_t c = 0; c < n; c++)
            for (int i = 0; i < half; i++) {
                double a = (double)(new_pos[c] - old[c]) * s->inv_freq[k][i];
                cs[(((size_t)k * n + c) * 2) * half + i] = (float)cos(a);
                cs[(((size_t)k * n + c) * 2 + 1) * half + i] = (float)sin(a);
            }
    if (rc == 0 && s->gpu) rc = fwd_gpu_turn_keys(s, seq, n, new_pos, old, cs, err); /* its layers' keys are there */
    for (int il = 0; rc == 0 && il < (s->gpu ? s->gpu_first : hp->n_layer); il++) {
        const model_layer *L = &s->m->layers[il];
        int k = L->sliding && s->n_ropes > 1;
        for (int32_t c = 0; L->rope && c < n; c++) {
            if (new_pos[c] == old[c] || !kv_holds(&s->kv, il, seq, c)) continue;
            const float *cosv = cs + (((size_t)k * n + c) * 2) * half, *sinv = cosv + half;
            kv_read_k(&s->kv, il, seq, c, key);
            for (int h = 0; h < hp->n_head_kv; h++) rope_head(key + h * hp->head_dim, hp, cosv, sinv);
            kv_store(&s->kv, il, seq, c, new_pos[c], 0, kd, key, NULL);
        }
    }
    free(old);
    free(cs);
    free(key);
    return rc;
}

const float *fwd_logits(const fwd_state *s, int i) {
    if (i < 0 || i >= s->n_entries || s->logit_row[i] < 0) return NULL;
    return s->logits + (size_t)s->logit_row[i] * s->m->hp.n_vocab;
}

const float *fwd_hidden(const fwd_state *s, int i) {
    if (i < 0 || i >= s->n_entries || s->logit_row[i] < 0) return NULL;
    return s->hidden + (size_t)s->logit_row[i] * s->m->hp.n_embd;
}
