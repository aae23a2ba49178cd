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

int fwd_init(fwd_state *s, const model *m, int32_t n_ctx, int32_t n_seq, int32_t n_threads, int32_t n_batch,
             uint32_t kv_type, bool fast, nc_err *err) {
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
        if (kernels_int_type(m->layers[il].wo.type) && span % 32)
            return nc_fail(err, "attn_output.weight of layer %d: quantised, with query-head groups of %d dimensions "
                                "(not a multiple of 32)", il, span);
    if (kv_init(&s->kv, hp->n_layer, n_seq, n_ctx, (int32_t)kv_dim(hp), kv_type, err)) return -1;
    s->pool = pool_create(n_threads);
    size_t B = (size_t)n_batch, E = (size_t)hp->n_embd, Q = q_dim(hp), KV = kv_dim(hp), F = (size_t)hp->n_ff;
    size_t half = (size_t)hp->n_rot / 2;
    s->ffn_rows = chunk_rows(hp->n_ff, n_threads);
    s->embd_rows = chunk_rows(hp->n_embd, n_threads);
    s->out_rows = chunk_rows(hp->n_vocab, n_threads);
    /* integer types need whole groups of 32; a width that is not a multiple of 32 only meets
     * float weights, whose kernels never read these buffers */
    s->act_embd = kernels_act_bytes(KERNELS_ACT_I16, (int)(E / 32 * 32));
    s->act_q = kernels_act_bytes(KERNELS_ACT_I16, (int)(Q / 32 * 32));
    s->act_ff = kernels_act_bytes(KERNELS_ACT_I16, (int)(F / 32 * 32));
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
    s->rope_cos = malloc((B * half + 1) * sizeof(float));
    s->rope_sin = malloc((B * half + 1) * sizeof(float));
    s->inv_freq = malloc((half + 1) * sizeof(double));
    s->cells = malloc(B * sizeof(int32_t));
    s->out_tokens = malloc(B * sizeof(int32_t));
    s->attn_blocks = malloc((B + 1) * sizeof(int32_t));
    s->thr = calloc((size_t)n_threads, sizeof *s->thr);
    bool ok = s->pool && s->x && s->xn && s->xnq && s->q && s->k && s->v && s->attn && s->attnq && s->ffn &&
              s->ffnq && s->rope_cos && s->rope_sin && s->inv_freq && s->cells && s->out_tokens && s->attn_blocks && s->thr;
    size_t group = (size_t)(hp->n_head / hp->n_head_kv);
    for (int i = 0; ok && i < n_threads; i++) {
        fwd_thread *t = &s->thr[i];
        t->xn = alloc64(FWD_PRIVATE_T * E * sizeof(float));
        t->xq = alloc64(FWD_PRIVATE_T * s->act_embd);
        t->pack = alloc64(kernels_mul_scratch_bytes());
        t->gate = alloc64(B * (size_t)s->ffn_rows * sizeof(float));
        t->up = alloc64(B * (size_t)s->ffn_rows * sizeof(float));
        size_t R = FWD_ATTN_BLOCK * group;
        t->attn_q = alloc64(R * (size_t)hp->head_dim * sizeof(float));
        t->scores = alloc64(R * FWD_ATTN_SPAN * sizeof(float));
        t->attn_part = alloc64(R * (size_t)hp->head_dim * sizeof(float));
        t->attn_max = malloc(R * sizeof(float));
        t->attn_sum = malloc(R * sizeof(double));
        ok = t->xn && t->xq && t->pack && t->gate && t->up && t->attn_q && t->scores && t->attn_part && t->attn_max &&
             t->attn_sum;
    }
    if (!ok) {
        fwd_free(s);
        return nc_fail(err, "out of memory for the forward pass scratch (batch %d, context %d)", n_batch, n_ctx);
    }
    /* theta_i = base^(-2i/n_rot), divided by the file's per-frequency factor when it has one
     * (Llama 3 stores its rope scaling that way, as the rope_freqs tensor). */
    for (size_t i = 0; i < half; i++) {
        double f = pow((double)hp->rope_freq_base, -2.0 * (double)i / (double)hp->n_rot);
        s->inv_freq[i] = m->rope_freqs ? f / (double)m->rope_freqs[i] : f;
    }
    return 0;
}

void fwd_free(fwd_state *s) {
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
    free(s->rope_cos);
    free(s->rope_sin);
    free(s->inv_freq);
    free(s->cells);
    free(s->out_tokens);
    free(s->attn_blocks);
    free(s->logits);
    free(s->logit_row);
    memset(s, 0, sizeof *s);
}

/* ---- normalised inputs ------------------------------------------------------------------- */

/* The input of a group of products: RMSNorm(x) * w of the listed tokens, and its quantisation
 * when one of the products has an integer weight type. */
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
        kernels_rms_norm(xn + (size_t)i * E, s->x + (size_t)t * E, ns->w, E, hp->norm_eps);
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
    size_t inq_bytes;
    int rows_per_chunk;
    const model_weight *w;           /* the weight of single-weight jobs */
    float *out;                      /* its output, [T][ldy] */
    int ldy;
    bool add;                        /* add to out (the residual) */
    kernels_act fmt;                 /* of the quantised input */
} mat_job;

static bool int_weight(const model_weight *w) { return kernels_int_type(w->type) != 0; }

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

/* Rows [r0, r1) of w for tokens [t0, t1) of the job's input into Y (token t0's row first). */
static void mul_tokens(const mat_job *j, const model_weight *w, const float *in, const uint8_t *inq, int t0, int t1,
                       float *Y, int ldy, int r0, int r1, bool add, int ith) {
    kernels_mul(w->type, w->data, w->row_bytes, w->cols, in ? in + (size_t)t0 * w->cols : NULL, j->fmt,
                inq ? inq + (size_t)t0 * kernels_act_bytes(j->fmt, w->cols) : NULL, t1 - t0, Y, ldy, r0, r1, add,
                j->s->thr[ith].pack);
}

static void mul(const mat_job *j, const model_weight *w, const float *in, const uint8_t *inq, float *Y, int ldy,
                int r0, int r1, bool add, int ith) {
    mul_tokens(j, w, in, inq, 0, j->T, Y, ldy, r0, r1, add, ith);
}

static void single_chunk(void *arg, int c, int ith) {
    const mat_job *j = arg;
    const float *in;
    const uint8_t *inq;
    job_input(j, ith, &in, &inq);
    int r0 = c * j->rows_per_chunk, r1 = r0 + j->rows_per_chunk < j->w->rows ? r0 + j->rows_per_chunk : j->w->rows;
    mul(j, j->w, in, inq, j->out + r0, j->ldy, r0, r1, j->add, ith);
}

static void norm_chunk(void *arg, int c, int ith) {
    const mat_job *j = arg;
    norm_tokens(j->s, &j->norm, c, c + 1, j->s->xn, j->s->xnq);
}

/* Runs job j with the normalised input: few tokens normalise per thread as the job starts, more
 * in a job of their own. */
static void run_normed(fwd_state *s, mat_job *j, void (*chunk)(void *, int, int), int n) {
    j->private_in = j->T <= FWD_PRIVATE_T;
    if (!j->private_in) {
        pool_run_chunks(s->pool, &(pool_task){.chunk = norm_chunk, .arg = j, .n_chunks = j->T});
        j->in = s->xn;
        j->inq = s->xnq;
    }
    pool_run_chunks(s->pool, &(pool_task){.prepare = j->private_in ? prepare_private : NULL, .chunk = chunk, .arg = j,
                                           .n_chunks = n});
}

/* Rotate the first n_rot dimensions of one head: llama pairs adjacent dimensions (2i, 2i+1);
 * qwen2 ("neox" in ggml) pairs dimension i with i + n_rot/2. */
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

/* One head of Q, K or V for one part of the tokens: its rows, bias, rotary embedding, and for K
 * and V the write to the cache. Heads 0..n_head-1 are query heads, then the key heads, then the
 * values; chunk c is part c % parts of head c / parts. */
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
    int h, ld, kind; /* 0 query, 1 key, 2 value */
    if (c < nq) { w = &L->wq; bias = L->bq; out = s->q; h = c; ld = (int)q_dim(hp); kind = 0; }
    else if (c < nq + nkv) { w = &L->wk; bias = L->bk; out = s->k; h = c - nq; ld = (int)kv_dim(hp); kind = 1; }
    else { w = &L->wv; bias = L->bv; out = s->v; h = c - nq - nkv; ld = (int)kv_dim(hp); kind = 2; }
    const float *in;
    const uint8_t *inq;
    job_input(j, ith, &in, &inq);
    mul_tokens(j, w, in, inq, t0, t1, out + (size_t)t0 * ld + h * hd, ld, h * hd, (h + 1) * hd, false, ith);
    size_t half = (size_t)hp->n_rot / 2;
    for (int t = t0; t < t1; t++) {
        float *v = out + (size_t)t * ld + h * hd;
        if (bias)
            for (int i = 0; i < hd; i++) v[i] += bias[h * hd + i];
        if (kind < 2) rope_head(v, hp, s->rope_cos + t * half, s->rope_sin + t * half);
        if (kind > 0)
            kv_store_part(&s->kv, j->layer, j->entries[t].seq, s->cells[t], h * hd, hd, kind == 1 ? v : NULL,
                          kind == 2 ? v : NULL);
    }
}

/* Rows [r0, r1) of gate and up for all tokens, then SwiGLU into ffn (and its quantisation when
 * the down projection has an integer type; r0 and r1 are then multiples of 32). */
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
    mul(j, &L->ffn_gate, in, inq, th->gate, n, r0, r1, false, ith);
    mul(j, &L->ffn_up, in, inq, th->up, n, r0, r1, false, ith);
    bool quantise = int_weight(&L->ffn_down);
    for (int t = 0; t < j->T; t++) {
        float *o = s->ffn + (size_t)t * F;
        kernels_swiglu(o + r0, th->gate + (size_t)t * n, th->up + (size_t)t * n, n);
        if (quantise) kernels_quantize_act_part(KERNELS_ACT_I16, o, F, r0 / 32, r1 / 32, s->ffnq + (size_t)t * s->act_ff);
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

/* Causal attention of a block of queries: consecutive tokens t0..t0+nt-1 of one sequence, and the
 * query heads of group g, which share one KV head (GQA). Each query sees the cells of its sequence
 * whose position is at most its own (the batch's keys are already in the cache). Streaming
 * softmax: the cells go by in spans of FWD_ATTN_SPAN, each adding to running maxima, sums and
 * outputs (rescaled when the maximum grows), so no score matrix longer than a span exists
 * whatever the context. Both products go through the kernels, so the block reads its keys and
 * values once: the scores of all its queries (kernels_mix over the transposed keys), then their
 * weighted sums of the values (kernels_mix over the values by cell). A query's weights past its
 * own cells are zero, which leave its fma chains as they were, and the spans start at cell 0: a
 * token's result is the same bits whatever block, batch, or decode versus prefill computed it. */
static void attend_block(fwd_state *s, int layer, const nc_batch_entry *e, int t0, int nt, int g, fwd_thread *th) {
    const model_hparams *hp = &s->m->hp;
    const kv_cache *kv = &s->kv;
    int hd = hp->head_dim, rep = hp->n_head / hp->n_head_kv, R = nt * rep, seq = e[t0].seq;
    const int32_t *pos = kv_positions(kv, seq);
    int n[FWD_ATTN_BLOCK], n_max = 0;
    for (int i = 0; i < nt; i++) { /* cells visible to each query: positions increase along the cells */
        int c = kv->len[seq];
        while (c > 0 && pos[c - 1] > e[t0 + i].pos) c--;
        n[i] = c;
        n_max = c > n_max ? c : n_max;
    }
    for (int i = 0; i < nt; i++) {
        memcpy(th->attn_q + (size_t)i * rep * hd, s->q + (size_t)(t0 + i) * q_dim(hp) + (size_t)g * rep * hd,
               sizeof(float) * (size_t)rep * hd);
        memset(s->attn + (size_t)(t0 + i) * q_dim(hp) + (size_t)g * rep * hd, 0, sizeof(float) * (size_t)rep * hd);
    }
    for (int r = 0; r < R; r++) {
        th->attn_max[r] = -INFINITY;
        th->attn_sum[r] = 0;
    }
    const uint8_t *keys = kv_kt(kv, layer, seq, g * hd);
    const uint8_t *values = (const uint8_t *)kv_v(kv, layer, seq, 0) + (size_t)g * hd * kv->elem;
    float scale = 1.0f / sqrtf((float)hd);
    for (int c0 = 0; c0 < n_max; c0 += FWD_ATTN_SPAN) {
        int nc = n_max - c0 < FWD_ATTN_SPAN ? n_max - c0 : FWD_ATTN_SPAN;
        float *p = th->scores; /* [R][nc] */
        kernels_mix(kv->type, keys + (size_t)c0 * kv->elem, kv_kt_row_bytes(kv), hd, nc, th->attn_q, hd, R, p, nc);
        for (int r = 0; r < R; r++) {
            float *pr = p + (size_t)r * nc;
            int nr = n[r / rep] - c0;
            nr = nr < 0 ? 0 : nr > nc ? nc : nr;
            if (nr > 0) {
                float m = th->attn_max[r], add = kernels_softmax_span(pr, nr, scale, &m);
                float corr = expf(th->attn_max[r] - m); /* 0 on the first span */
                th->attn_sum[r] = th->attn_sum[r] * corr + add;
                th->attn_max[r] = m;
                float *out = attn_row(s, t0, g, r);
                if (corr != 1.0f)
                    for (int d = 0; d < hd; d++) out[d] *= corr;
            }
            memset(pr + nr, 0, sizeof(float) * (size_t)(nc - nr));
        }
        kernels_mix(kv->type, values + (size_t)c0 * kv_v_row_bytes(kv), kv_v_row_bytes(kv), nc, hd, p, nc, R,
                    th->attn_part, hd);
        for (int r = 0; r < R; r++) {
            if (n[r / rep] <= c0) continue;
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

/* ---- the pass ---------------------------------------------------------------------------- */

static void rope_tables(fwd_state *s, const nc_batch_entry *e, int T) {
    int half = s->m->hp.n_rot / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double a = (double)e[t].pos * s->inv_freq[i];
            s->rope_cos[t * half + i] = (float)cos(a);
            s->rope_sin[t * half + i] = (float)sin(a);
        }
}

static void embed(fwd_state *s, const nc_batch_entry *e, int T) {
    const model_weight *w = &s->m->tok_embd;
    for (int t = 0; t < T; t++)
        quant_dequantize_row(w->type, (const char *)w->data + (size_t)e[t].token * w->row_bytes,
                             s->x + (size_t)t * w->cols, w->cols);
}

static void run_layer(fwd_state *s, int il, const nc_batch_entry *e, int T) {
    const model_layer *L = &s->m->layers[il];
    const model_hparams *hp = &s->m->hp;
    int E = hp->n_embd;
    kernels_act qkv_fmt = normed_fmt(s, (const model_weight *[]){&L->wq, &L->wk, &L->wv}, 3);
    mat_job qkv = {.s = s, .T = T, .layer = il, .entries = e, .L = L, .fmt = qkv_fmt,
                   .norm = {.w = L->attn_norm, .quantise = int_weight(&L->wq) || int_weight(&L->wk) || int_weight(&L->wv),
                            .fmt = qkv_fmt}};
    run_normed(s, &qkv, qkv_chunk, (hp->n_head + 2 * hp->n_head_kv) * qkv_parts(s, T));
    attn_job aj = {.s = s, .layer = il, .T = T, .entries = e, .quantise = int_weight(&L->wo)};
    pool_run_chunks(s->pool, &(pool_task){.chunk = attn_chunk, .arg = &aj, .n_chunks = s->n_attn_blocks * hp->n_head_kv});
    mat_job wo = {.s = s, .T = T, .in = s->attn, .inq = s->attnq, .rows_per_chunk = s->embd_rows, .w = &L->wo,
                  .out = s->x, .ldy = E, .add = true, .fmt = KERNELS_ACT_I16};
    pool_run_chunks(s->pool, &(pool_task){.chunk = single_chunk, .arg = &wo, .n_chunks = n_chunks(E, s->embd_rows)});
    kernels_act ffn_fmt = normed_fmt(s, (const model_weight *[]){&L->ffn_gate, &L->ffn_up}, 2);
    mat_job ffn = {.s = s, .T = T, .L = L, .rows_per_chunk = s->ffn_rows, .fmt = ffn_fmt,
                   .norm = {.w = L->ffn_norm, .quantise = int_weight(&L->ffn_gate) || int_weight(&L->ffn_up),
                            .fmt = ffn_fmt}};
    run_normed(s, &ffn, ffn_chunk, n_chunks(hp->n_ff, s->ffn_rows));
    mat_job down = {.s = s, .T = T, .in = s->ffn, .inq = s->ffnq, .rows_per_chunk = s->embd_rows, .w = &L->ffn_down,
                    .out = s->x, .ldy = E, .add = true, .fmt = KERNELS_ACT_I16};
    pool_run_chunks(s->pool, &(pool_task){.chunk = single_chunk, .arg = &down, .n_chunks = n_chunks(E, s->embd_rows)});
}

/* Final norm of the entries that want logits, then the output projection into their rows of
 * the logits buffer. */
static void output_logits(fwd_state *s, const nc_batch_entry *e, int T, int first_entry) {
    int n_out = 0, row0 = -1;
    for (int t = 0; t < T; t++) {
        if (!e[t].logits) continue;
        if (row0 < 0) row0 = s->logit_row[first_entry + t];
        s->out_tokens[n_out++] = t;
    }
    if (n_out == 0) return;
    int V = s->m->hp.n_vocab;
    const model_weight *w = &s->m->output;
    mat_job j = {.s = s, .T = n_out, .norm = {.w = s->m->output_norm, .quantise = int_weight(w), .fmt = KERNELS_ACT_I16,
                          .tokens = s->out_tokens},
                 .fmt = KERNELS_ACT_I16,
                 .rows_per_chunk = s->out_rows, .w = w, .out = s->logits + (size_t)row0 * V, .ldy = V};
    run_normed(s, &j, single_chunk, n_chunks(V, s->out_rows));
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
        s->logits_cap = n_out;
    }
    s->n_entries = n;
    return 0;
}

/* Check every entry and claim its cache cell before computing anything, so a bad batch leaves
 * the cache as it was. */
static int claim_cells(fwd_state *s, const nc_batch_entry *batch, int n, int32_t *cells, nc_err *err) {
    int32_t *saved = malloc((size_t)s->kv.n_seq * sizeof *saved);
    if (!saved) return nc_fail(err, "out of memory");
    memcpy(saved, s->kv.len, (size_t)s->kv.n_seq * sizeof *saved);
    for (int i = 0; i < n; i++) {
        int32_t tok = batch[i].token;
        if (tok < 0 || tok >= s->m->hp.n_vocab) {
            nc_fail(err, "batch entry %d: token id %d is outside the vocabulary 0..%d", i, tok, s->m->hp.n_vocab - 1);
            goto fail;
        }
        cells[i] = kv_append(&s->kv, batch[i].seq, batch[i].pos, err);
        if (cells[i] < 0) {
            nc_fail_prefix(err, "batch entry %d", i);
            goto fail;
        }
    }
    free(saved);
    return 0;
fail:
    memcpy(s->kv.len, saved, (size_t)s->kv.n_seq * sizeof *saved);
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
        embed(s, e, T);
        rope_tables(s, e, T);
        attn_blocks(s, e, T);
        for (int il = 0; il < s->m->hp.n_layer; il++) run_layer(s, il, e, T);
        output_logits(s, e, T, start);
    }
    free(cells);
    return 0;
}

const float *fwd_logits(const fwd_state *s, int i) {
    if (i < 0 || i >= s->n_entries || s->logit_row[i] < 0) return NULL;
    return s->logits + (size_t)s->logit_row[i] * s->m->hp.n_vocab;
}
