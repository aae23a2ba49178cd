#include "forward/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tensor/quant.h"

static size_t q_dim(const model_hparams *hp) { return (size_t)hp->n_head * hp->head_dim; }
static size_t kv_dim(const model_hparams *hp) { return (size_t)hp->n_head_kv * hp->head_dim; }

int fwd_init(fwd_state *s, const model *m, int32_t n_ctx, int32_t n_seq, int32_t n_threads, int32_t n_batch,
             uint32_t kv_type, nc_err *err) {
    memset(s, 0, sizeof *s);
    const model_hparams *hp = &m->hp;
    s->m = m;
    s->n_batch = n_batch;
    kernels_init();
    if (kv_init(&s->kv, hp->n_layer, n_seq, n_ctx, (int32_t)kv_dim(hp), kv_type, err)) return -1;
    s->pool = pool_create(n_threads);
    size_t B = (size_t)n_batch, E = (size_t)hp->n_embd, Q = q_dim(hp), KV = kv_dim(hp), F = (size_t)hp->n_ff;
    size_t H = E > Q ? E : Q, half = (size_t)hp->n_rot / 2;
    s->x = malloc(B * E * sizeof(float));
    s->h = malloc(B * H * sizeof(float));
    s->q = malloc(B * Q * sizeof(float));
    s->k = malloc(B * KV * sizeof(float));
    s->v = malloc(B * KV * sizeof(float));
    s->attn = malloc(B * Q * sizeof(float));
    s->gate = malloc(B * F * sizeof(float));
    s->up = malloc(B * F * sizeof(float));
    size_t group = (size_t)(hp->n_head / hp->n_head_kv);
    s->scores = malloc((size_t)n_threads * group * (size_t)n_ctx * sizeof(float));
    s->rope_cos = malloc((B * half + 1) * sizeof(float));
    s->rope_sin = malloc((B * half + 1) * sizeof(float));
    s->inv_freq = malloc((half + 1) * sizeof(double));
    s->cells = malloc(B * sizeof(int32_t));
    if (!s->pool || !s->x || !s->h || !s->q || !s->k || !s->v || !s->attn || !s->gate || !s->up || !s->scores ||
        !s->rope_cos || !s->rope_sin || !s->inv_freq || !s->cells) {
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
    free(s->x);
    free(s->h);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->attn);
    free(s->gate);
    free(s->up);
    free(s->scores);
    free(s->rope_cos);
    free(s->rope_sin);
    free(s->inv_freq);
    free(s->cells);
    free(s->logits);
    free(s->logit_row);
    memset(s, 0, sizeof *s);
}

/* ---- jobs run on the pool ---------------------------------------------------------------- */

typedef struct mm_task {
    const model_weight *w;
    const float *X;   /* [T][w->cols] */
    float *Y;         /* Y[t * ldy + r] */
    int ldy;
} mm_task;

typedef struct mm_job {
    mm_task task[3];
    int n_tasks, T;
} mm_job;

/* Every thread takes the same share of rows of each weight: outputs are split, never a
 * reduction, so a row's value does not depend on the thread count. */
static void mm_worker(void *arg, int ith, int nth) {
    const mm_job *j = arg;
    for (int i = 0; i < j->n_tasks; i++) {
        const mm_task *t = &j->task[i];
        int r0, r1;
        pool_split(t->w->rows, ith, nth, &r0, &r1);
        if (r0 >= r1) continue;
        if (j->T == 1)
            kernels_matvec(t->w->type, t->w->data, t->w->row_bytes, t->w->cols, t->X, t->Y + r0, r0, r1);
        else
            kernels_matmul(t->w->type, t->w->data, t->w->row_bytes, t->w->cols, t->X, j->T, t->Y, t->ldy, r0, r1);
    }
}

static void run_matmul(fwd_state *s, int T, int n, const mm_task *tasks) {
    mm_job j = {.n_tasks = n, .T = T};
    memcpy(j.task, tasks, (size_t)n * sizeof *tasks);
    pool_run(s->pool, mm_worker, &j);
}

typedef struct norm_job {
    fwd_state *s;
    int T;
    const float *w;       /* norm weight */
    bool add_delta;       /* x += h first (the residual of the previous block) */
} norm_job;

static void rms_norm(const float *x, const float *w, float *out, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

static void norm_worker(void *arg, int ith, int nth) {
    const norm_job *j = arg;
    const model_hparams *hp = &j->s->m->hp;
    int E = hp->n_embd, t0, t1;
    pool_split(j->T, ith, nth, &t0, &t1);
    for (int t = t0; t < t1; t++) {
        float *x = j->s->x + (size_t)t * E, *h = j->s->h + (size_t)t * E;
        if (j->add_delta)
            for (int i = 0; i < E; i++) x[i] += h[i];
        rms_norm(x, j->w, h, E, hp->norm_eps);
    }
}

static void run_norm(fwd_state *s, int T, const float *w, bool add_delta) {
    norm_job j = {.s = s, .T = T, .w = w, .add_delta = add_delta};
    pool_run(s->pool, norm_worker, &j);
}

/* Rotate each head's first n_rot dimensions: llama pairs adjacent dimensions (2i, 2i+1);
 * qwen2 ("neox" in ggml) pairs dimension i with i + n_rot/2. */
static void rope_heads(float *x, int n_heads, const model_hparams *hp, const float *cs, const float *sn) {
    int half = hp->n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * hp->head_dim;
        for (int i = 0; i < half; i++) {
            int a = hp->rope_neox ? i : 2 * i, b = hp->rope_neox ? i + half : 2 * i + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * cs[i] - x1 * sn[i];
            v[b] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

typedef struct qkv_job {
    fwd_state *s;
    const model_layer *L;
    int layer, T;
    const nc_batch_entry *entries;
} qkv_job;

/* Biases, rotary embedding, and the write of this micro-batch's keys and values to the cache. */
static void qkv_worker(void *arg, int ith, int nth) {
    const qkv_job *j = arg;
    fwd_state *s = j->s;
    const model_hparams *hp = &s->m->hp;
    size_t Q = q_dim(hp), KV = kv_dim(hp), half = (size_t)hp->n_rot / 2;
    int t0, t1;
    pool_split(j->T, ith, nth, &t0, &t1);
    for (int t = t0; t < t1; t++) {
        float *q = s->q + t * Q, *k = s->k + t * KV, *v = s->v + t * KV;
        if (j->L->bq) for (size_t i = 0; i < Q; i++) q[i] += j->L->bq[i];
        if (j->L->bk) for (size_t i = 0; i < KV; i++) k[i] += j->L->bk[i];
        if (j->L->bv) for (size_t i = 0; i < KV; i++) v[i] += j->L->bv[i];
        const float *cs = s->rope_cos + t * half, *sn = s->rope_sin + t * half;
        rope_heads(q, hp->n_head, hp, cs, sn);
        rope_heads(k, hp->n_head_kv, hp, cs, sn);
        kv_store(&s->kv, j->layer, j->entries[t].seq, s->cells[t], k, v);
    }
}

typedef struct attn_job {
    fwd_state *s;
    int layer, T;
    const nc_batch_entry *entries;
} attn_job;

/* Causal attention of the query heads that share one KV head (a GQA group) over the cells of
 * their sequence whose position is at most the query's (the batch's own keys are already in the
 * cache). Both products go through the matrix kernels, so the group reads its keys and values
 * once: scores = K q for the group's heads together, then out = V^T p over the transposed
 * values. scores holds group x n floats. */
static void attend_group(fwd_state *s, int layer, const nc_batch_entry *e, int t, int g, float *scores) {
    const model_hparams *hp = &s->m->hp;
    const kv_cache *kv = &s->kv;
    int hd = hp->head_dim, rep = hp->n_head / hp->n_head_kv;
    const int32_t *pos = kv_positions(kv, e->seq);
    int n = kv->len[e->seq];
    while (n > 0 && pos[n - 1] > e->pos) n--;  /* positions increase along the cells */
    const float *q = s->q + (size_t)t * q_dim(hp) + (size_t)g * rep * hd;
    float *out = s->attn + (size_t)t * q_dim(hp) + (size_t)g * rep * hd;
    const void *keys = (const uint8_t *)kv_k(kv, layer, e->seq, 0) + (size_t)g * hd * kv->elem;
    if (rep == 1) kernels_matvec(kv->type, keys, kv_k_row_bytes(kv), hd, q, scores, 0, n);
    else kernels_matmul(kv->type, keys, kv_k_row_bytes(kv), hd, q, rep, scores, n, 0, n);
    float scale = 1.0f / sqrtf((float)hd);
    for (int h = 0; h < rep; h++) {
        float *p = scores + (size_t)h * n, mx = -INFINITY;
        for (int c = 0; c < n; c++) {
            p[c] *= scale;
            if (p[c] > mx) mx = p[c];
        }
        double sum = 0;
        for (int c = 0; c < n; c++) {
            p[c] = expf(p[c] - mx);
            sum += p[c];
        }
        float inv = (float)(1.0 / sum);
        for (int c = 0; c < n; c++) p[c] *= inv;
    }
    const void *values = kv_vt(kv, layer, e->seq, g * hd);
    if (rep == 1) kernels_matvec(kv->type, values, kv_vt_row_bytes(kv), n, scores, out, 0, hd);
    else kernels_matmul(kv->type, values, kv_vt_row_bytes(kv), n, scores, rep, out, hd, 0, hd);
}

static void attn_worker(void *arg, int ith, int nth) {
    const attn_job *j = arg;
    const model_hparams *hp = &j->s->m->hp;
    int G = hp->n_head_kv, rep = hp->n_head / hp->n_head_kv, i0, i1;
    float *scores = j->s->scores + (size_t)ith * rep * j->s->kv.n_ctx;
    pool_split(j->T * G, ith, nth, &i0, &i1);
    for (int i = i0; i < i1; i++) attend_group(j->s, j->layer, &j->entries[i / G], i / G, i % G, scores);
}

typedef struct swiglu_job { fwd_state *s; int T; } swiglu_job;

static void swiglu_worker(void *arg, int ith, int nth) {
    const swiglu_job *j = arg;
    size_t F = (size_t)j->s->m->hp.n_ff;
    int t0, t1;
    pool_split(j->T, ith, nth, &t0, &t1);
    for (size_t i = (size_t)t0 * F; i < (size_t)t1 * F; i++) {
        float g = j->s->gate[i];
        j->s->gate[i] = g / (1.0f + expf(-g)) * j->s->up[i];
    }
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
    size_t Q = q_dim(&s->m->hp), KV = kv_dim(&s->m->hp), E = (size_t)s->m->hp.n_embd, F = (size_t)s->m->hp.n_ff;
    run_norm(s, T, L->attn_norm, il > 0);
    run_matmul(s, T, 3, (mm_task[]){{&L->wq, s->h, s->q, (int)Q}, {&L->wk, s->h, s->k, (int)KV}, {&L->wv, s->h, s->v, (int)KV}});
    qkv_job qj = {.s = s, .L = L, .layer = il, .T = T, .entries = e};
    pool_run(s->pool, qkv_worker, &qj);
    attn_job aj = {.s = s, .layer = il, .T = T, .entries = e};
    pool_run(s->pool, attn_worker, &aj);
    run_matmul(s, T, 1, (mm_task[]){{&L->wo, s->attn, s->h, (int)E}});
    run_norm(s, T, L->ffn_norm, true);
    run_matmul(s, T, 2, (mm_task[]){{&L->ffn_gate, s->h, s->gate, (int)F}, {&L->ffn_up, s->h, s->up, (int)F}});
    swiglu_job sj = {.s = s, .T = T};
    pool_run(s->pool, swiglu_worker, &sj);
    run_matmul(s, T, 1, (mm_task[]){{&L->ffn_down, s->gate, s->h, (int)E}});
}

/* Final norm of the entries that want logits, packed to the front of h, then the output
 * projection into their rows of the logits buffer. */
static void output_logits(fwd_state *s, const nc_batch_entry *e, int T, int first_entry) {
    size_t E = (size_t)s->m->hp.n_embd;
    run_norm(s, T, s->m->output_norm, true);
    int n_out = 0, row0 = -1;
    for (int t = 0; t < T; t++) {
        if (!e[t].logits) continue;
        if (row0 < 0) row0 = s->logit_row[first_entry + t];
        if (n_out != t) memmove(s->h + n_out * E, s->h + t * E, E * sizeof(float));
        n_out++;
    }
    if (n_out == 0) return;
    int V = s->m->hp.n_vocab;
    run_matmul(s, n_out, 1, (mm_task[]){{&s->m->output, s->h, s->logits + (size_t)row0 * V, V}});
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
