/* The CPU backend (cpu.h): set-up, products, norms, heads and the residual. */
#include "forward/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/quant.h"

/* Activations start on a cache line: with 64-byte vectors a misaligned row makes most loads span
 * two lines. */
static void *alloc64(size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64); }

static bool int_weight(const model_weight *w) { return w && w->data && kernels_int_type(w->type) != 0; }

/* Rows per chunk of a matrix job: about eight chunks per thread, so the work balances and a
 * descheduled thread holds up at most a small chunk; a multiple of 32 (the groups of the
 * quantised activations, the packed panels of the matmul); and where chunks of up to half that
 * size allow it, a chunk count that is a multiple of the thread count. (576 rows on 2 threads:
 * 18 chunks of 32 rather than 9 of 64, whose 5:4 split idles a thread for a ninth of the job.) */
int32_t cpu_chunk_rows(int rows, int n_threads) {
    int units = (rows + 31) / 32, target = 8 * n_threads, per = (units + target - 1) / target;
    for (int p = per; p >= 1 && 2 * p >= per; p--)
        if ((units + p - 1) / p % n_threads == 0) return 32 * p;
    return 32 * per;
}

static int n_chunks(int rows, int cr) { return (rows + cr - 1) / cr; }

void cpu_weight_mul(const model_weight *w, const float *X, kernels_act fmt, const uint8_t *Xq, int T, float *Y, int ldy,
                    int r0, int r1, bool add, void *scratch) {
    if (w->transposed) { /* Hugging Face's [in][out] experts (float only): X A over columns r0..r1 */
        kernels_mix(w->type, (const uint8_t *)w->data + quant_row_bytes(w->type, r0), w->row_bytes, w->cols, r1 - r0, X,
                    w->cols, T, Y, ldy);
        return;
    }
    if (w->ilv) kernels_mul(w->type | KERNELS_ILV, w->ilv, w->row_bytes, w->cols, X, fmt, Xq, T, Y, ldy, r0, r1, add, scratch);
    else kernels_mul(w->type, w->data, w->row_bytes, w->cols, X, fmt, Xq, T, Y, ldy, r0, r1, add, scratch);
}

/* RMSNorm of x into out; no weight: x scaled to unit RMS. */
static void rms(float *out, const float *x, const float *w, int n, float eps) {
    if (w) {
        kernels_rms_norm(out, x, w, n, eps);
        return;
    }
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * inv;
}

/* ---- the operations ---------------------------------------------------------------------- */

/* The input of a product: its rows, normalised when it asks (per thread for a few tokens, else
 * once into FB_XN), and quantised when a weight needs integers. */
typedef struct mul_job {
    fwd_state *s;
    const fwd_in *in;
    const fwd_out *out;
    int n;
    kernels_act fmt;                 /* of the quantised input */
    bool quant;                      /* some weight takes integers */
    bool private_in;                 /* each thread normalises its own copy */
    const float *x;                  /* otherwise the shared rows */
    const uint8_t *xq;
    int32_t first[9];                /* first chunk of each output (+ the end) */
    int32_t rows[8];                 /* rows per chunk of each output (a head's where it has heads) */
    int32_t parts[8];                /* token parts per head */
    int32_t lora_at[8][2];           /* where the adapters' inputs of w and up of each output start in a
                                        token's row of cpu_state.lora_u (-1: none) */
    int32_t lora_ld;                 /* floats of that row */
} mul_job;

/* The activations of a normalised input: int8 in the fast mode when every integer weight is
 * Q8_0 or Q4_0, int16 otherwise. */
static kernels_act input_fmt(const fwd_state *s, const fwd_out *out, int n) {
    bool i8 = s->fast;
    for (int i = 0; i < n; i++) {
        const model_weight *w[2] = {out[i].w, out[i].up};
        for (int j = 0; j < 2; j++)
            if (int_weight(w[j]) && w[j]->type != GGML_TYPE_Q8_0 && w[j]->type != GGML_TYPE_Q4_0) i8 = false;
    }
    return i8 ? KERNELS_ACT_I8 : KERNELS_ACT_I16;
}

static void norm_rows(const mul_job *j, int t0, int t1, float *xn, uint8_t *xq) {
    fwd_state *s = j->s;
    const fwd_in *in = j->in;
    int E = in->cols;
    for (int t = t0; t < t1; t++) {
        const float *x = cpu_row(s, in->x, in->rows ? in->rows[t] : t);
        float *y = xn + (size_t)t * E;
        if (in->norm) kernels_rms_norm(y, x, in->norm, E, s->m->hp.norm_eps);
        else memcpy(y, x, (size_t)E * sizeof *y);
        if (j->quant) kernels_quantize_act(j->fmt, y, E, xq + kernels_act_bytes(j->fmt, E) * t);
    }
}

static void prepare_private(void *arg, int ith) {
    const mul_job *j = arg;
    cpu_thread *t = &cpu_of(j->s)->thr[ith];
    norm_rows(j, 0, j->in->T, t->xn, t->xq);
}

static void norm_chunk(void *arg, int c, int ith) {
    const mul_job *j = arg;
    norm_rows(j, c, c + 1, cpu_of(j->s)->buf[FB_XN], cpu_of(j->s)->bufq[FB_XN]);
}

static void add_bias(float *y, int ldy, int n_rows, const float *bias, int n) {
    for (int r = 0; bias && r < n_rows; r++)
        for (int i = 0; i < n; i++) y[(size_t)r * ldy + i] += bias[i];
}

/* Head h of token t finished: its norm (before or after the rotation), rotation, temperature,
 * and store into the cache. */
static void finish_head(fwd_state *s, const fwd_heads *h, float *v, int t, int head) {
    const model_hparams *hp = &s->m->hp;
    bool norm = h->norm || h->plain;
    if (norm && !h->norm_last) rms(v, v, h->norm, h->dim, hp->norm_eps);
    if (h->rope >= 0) {
        size_t half = (size_t)hp->rope[h->rope].n_rot / 2; /* the table's rows */
        fwd_rope_head(v, h->n_rot, hp->rope_neox, s->rope_cos[h->rope] + t * half, s->rope_sin[h->rope] + t * half);
    }
    if (norm && h->norm_last) rms(v, v, h->norm, h->dim, hp->norm_eps);
    if (h->temperature)
        for (int i = 0; i < h->dim; i++) v[i] *= s->temp[t];
    if (h->kind != FWD_QUERY && h->layer >= 0)
        kv_store(&s->kv, h->layer, s->entries[t].seq, s->cells[t], s->entries[t].pos, h->offset + head * h->dim, h->dim,
                 h->kind == FWD_KEY ? v : NULL, h->kind == FWD_VALUE ? v : NULL);
}

/* An activation alone, in place. */
static void act_alone(fwd_act act, float *y, int n) {
    for (int i = 0; act == FWD_ACT_RELU2 && i < n; i++) y[i] = y[i] > 0 ? y[i] * y[i] : 0.0f;
    if (act == FWD_ACT_GELU_TANH) { /* GeGLU's gate alone: gelu(g) = gelu(g) * 1 */
        float one[64];
        for (int i = 0; i < 64; i++) one[i] = 1.0f;
        for (int i0 = 0; i0 < n; i0 += 64) kernels_glu_act(KERNELS_GELU_TANH, y + i0, y + i0, one, n - i0 < 64 ? n - i0 : 64);
    }
}

/* LoRA adapters (model/lora.c): the low-rank inputs a x of every adapter of the job's weights, per
 * token, from the float input, into cpu_state.lora_u. */
static void lora_in_chunk(void *arg, int t, int ith) {
    const mul_job *j = arg;
    const float *x = j->x + (size_t)t * j->in->cols;
    float *u = cpu_of(j->s)->lora_u + (size_t)t * j->lora_ld;
    for (int i = 0; i < j->n; i++)
        for (int k = 0; k < 2; k++) {
            const model_weight *w = k ? j->out[i].up : j->out[i].w;
            float *ui = u + j->lora_at[i][k];
            for (const model_lora *l = w && j->lora_at[i][k] >= 0 ? w->lora : NULL; l; ui += l->rank, l = l->next)
                for (int32_t q = 0; q < l->rank; q++) {
                    const float *a = l->a + (size_t)q * w->cols;
                    double d = 0;
                    for (int32_t c = 0; c < w->cols; c++) d += (double)a[c] * x[c];
                    ui[q] = (float)d;
                }
        }
}

/* y[t][r] += scale * b[r] . u[t] for rows r0..r1-1 of tokens t0..t0+nt-1 (y: row r0 of token t0,
 * ldy apart), each adapter of w in turn; u: token t0's low-rank inputs of w, ldu apart. */
static void lora_add(const model_weight *w, const float *u, int ldu, int nt, float *y, int ldy, int r0, int r1) {
    for (const model_lora *l = w->lora; l; u += l->rank, l = l->next)
        for (int t = 0; t < nt; t++)
            for (int r = r0; r < r1; r++) {
                const float *b = l->b + (size_t)r * l->ldb, *ut = u + (size_t)t * ldu;
                double d = 0;
                for (int32_t q = 0; q < l->rank; q++) d += (double)b[q] * ut[q];
                y[(size_t)t * ldy + (r - r0)] += l->scale * (float)d;
            }
}

static void mul_chunk(void *arg, int c, int ith) {
    const mul_job *j = arg;
    fwd_state *s = j->s;
    cpu_state *cpu = cpu_of(s);
    cpu_thread *th = &cpu->thr[ith];
    int i = 0;
    while (c >= j->first[i + 1]) i++;
    const fwd_out *o = &j->out[i];
    c -= j->first[i];
    const float *x = j->private_in ? th->xn : j->x;
    const uint8_t *xq = j->private_in ? th->xq : j->xq;
    size_t xq_bytes = kernels_act_bytes(j->fmt, j->in->cols);
    int T = j->in->T, t0 = 0, t1 = T, r0, r1;
    if (o->heads) { /* a head's rows, for one part of the tokens */
        pool_split(T, c % j->parts[i], j->parts[i], &t0, &t1);
        r0 = c / j->parts[i] * o->heads->stride;
        r1 = r0 + o->heads->stride;
    } else {
        r0 = c * j->rows[i];
        r1 = r0 + j->rows[i] < o->w->rows ? r0 + j->rows[i] : o->w->rows;
    }
    int n = r1 - r0, nt = t1 - t0;
    const float *X = x ? x + (size_t)t0 * j->in->cols : NULL;
    const uint8_t *Xq = xq ? xq + (size_t)t0 * xq_bytes : NULL;
    float *Y = cpu_row(s, o->y, t0) + r0;
    float scale = o->scale != 0 ? o->scale : 1.0f;
    const float *U = j->lora_ld ? cpu->lora_u + (size_t)t0 * j->lora_ld : NULL;
    if (o->up) { /* gated: act(w x + b) * up x */
        cpu_weight_mul(o->w, X, j->fmt, Xq, nt, th->gate, n, r0, r1, false, th->pack);
        cpu_weight_mul(o->up, X, j->fmt, Xq, nt, th->up, n, r0, r1, false, th->pack);
        if (o->w->lora) lora_add(o->w, U + j->lora_at[i][0], j->lora_ld, nt, th->gate, n, r0, r1);
        if (o->up->lora) lora_add(o->up, U + j->lora_at[i][1], j->lora_ld, nt, th->up, n, r0, r1);
        add_bias(th->gate, n, nt, o->bias ? o->bias + r0 : NULL, n);
        for (int t = 0; t < nt; t++)
            kernels_glu_act(o->act, Y + (size_t)t * o->y.ld, th->gate + (size_t)t * n, th->up + (size_t)t * n, n);
    } else if (o->add && (o->bias || scale != 1.0f)) { /* into scratch, then y += scale * (w x + b) */
        cpu_weight_mul(o->w, X, j->fmt, Xq, nt, th->gate, n, r0, r1, false, th->pack);
        if (o->w->lora) lora_add(o->w, U + j->lora_at[i][0], j->lora_ld, nt, th->gate, n, r0, r1);
        add_bias(th->gate, n, nt, o->bias ? o->bias + r0 : NULL, n);
        for (int t = 0; t < nt; t++)
            for (int r = 0; r < n; r++) Y[(size_t)t * o->y.ld + r] += scale * th->gate[(size_t)t * n + r];
    } else {
        cpu_weight_mul(o->w, X, j->fmt, Xq, nt, Y, o->y.ld, r0, r1, o->add, th->pack);
        if (o->w->lora) lora_add(o->w, U + j->lora_at[i][0], j->lora_ld, nt, Y, o->y.ld, r0, r1);
        add_bias(Y, o->y.ld, nt, o->bias ? o->bias + r0 : NULL, n);
        if (scale != 1.0f)
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < n; r++) Y[(size_t)t * o->y.ld + r] *= scale;
        for (int t = 0; o->act_only && t < nt; t++) act_alone(o->act_only, Y + (size_t)t * o->y.ld, n);
    }
    for (int t = t0; o->heads && t < t1; t++) finish_head(s, o->heads, cpu_row(s, o->y, t) + r0, t, r0 / o->heads->stride);
    if (o->quant) /* rows of the view's own width, o->w->rows */
        for (int t = t0; t < t1; t++)
            kernels_quantize_act_part(KERNELS_ACT_I16, cpu_row(s, o->y, t), o->w->rows, r0 / 32, r1 / 32,
                                      cpu_qrow(s, o->y, t, o->w->rows));
}

/* The token parts of a head's chunk: when the heads do not divide evenly among the threads
 * (SmolLM2's 15 heads would split 8:7), each head's tokens of a prompt are split between them,
 * at the cost of packing the head's weights once per part; a few tokens stay one part (a head's
 * rows are the smallest useful chunk). */
static int head_parts(const fwd_state *s, const fwd_out *out, int n, int T) {
    int heads = 0;
    for (int i = 0; i < n; i++) heads += out[i].heads ? out[i].heads->n : 0;
    return T >= 16 && heads % s->n_threads ? s->n_threads : 1;
}

static void quant_chunk(void *arg, int t, int ith) {
    const mul_job *j = arg;
    kernels_quantize_act(j->fmt, cpu_row(j->s, j->in->x, t), j->in->cols, cpu_qrow(j->s, j->in->x, t, j->in->cols));
}

static bool cpu_mul(fwd_state *s, const fwd_in *in, const fwd_out *out, int n) {
    cpu_state *cpu = cpu_of(s);
    mul_job j = {.s = s, .in = in, .out = out, .n = n, .fmt = KERNELS_ACT_I16};
    for (int i = 0; i < n; i++) j.quant = j.quant || int_weight(out[i].w) || int_weight(out[i].up);
    if (in->norm) j.fmt = input_fmt(s, out, n);
    int parts = head_parts(s, out, n, in->T);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++) {
            const model_weight *w = k ? out[i].up : out[i].w;
            j.lora_at[i][k] = w && w->lora ? j.lora_ld : -1;
            for (const model_lora *l = w ? w->lora : NULL; l; l = l->next) j.lora_ld += l->rank;
        }
        j.parts[i] = parts;
        j.rows[i] = out[i].heads ? out[i].heads->stride : cpu_chunk_rows(out[i].w->rows, s->n_threads);
        j.first[i + 1] = j.first[i] + (out[i].heads ? out[i].heads->n * parts : n_chunks(out[i].w->rows, j.rows[i]));
    }
    void (*prepare)(void *, int) = NULL;
    if (in->norm && in->T <= CPU_PRIVATE_T && !j.lora_ld) {
        j.private_in = true;
        prepare = prepare_private;
    } else if (in->norm) { /* normalised once, shared */
        pool_run_chunks(cpu->pool, &(pool_task){.chunk = norm_chunk, .arg = &j, .n_chunks = in->T});
        j.x = cpu->buf[FB_XN];
        j.xq = cpu->bufq[FB_XN];
    } else {
        j.x = cpu_row(s, in->x, 0); /* the kernels read rows of cols floats one after the other */
        j.xq = j.quant ? cpu_qrow(s, in->x, 0, in->cols) : NULL;
        if (j.quant && !in->ready) pool_run_chunks(cpu->pool, &(pool_task){.chunk = quant_chunk, .arg = &j, .n_chunks = in->T});
    }
    if (j.lora_ld) pool_run_chunks(cpu->pool, &(pool_task){.chunk = lora_in_chunk, .arg = &j, .n_chunks = in->T});
    pool_run_chunks(cpu->pool, &(pool_task){.prepare = prepare, .chunk = mul_chunk, .arg = &j, .n_chunks = j.first[n]});
    bool quantised = true;
    for (int i = 0; i < n; i++)
        if (out[i].quant && (out[i].w->rows % 32 || out[i].y.off)) quantised = false;
    return quantised;
}

typedef struct norm_job {
    fwd_state *s;
    fwd_view dst, src;
    const int32_t *rows;
    int32_t n, groups;
    const float *w;
    bool quant;
} norm_job;

static void norm_op_chunk(void *arg, int t, int ith) {
    const norm_job *j = arg;
    fwd_state *s = j->s;
    const float *x = cpu_row(s, j->src, j->rows ? j->rows[t] : t);
    float *y = cpu_row(s, j->dst, t);
    for (int g = 0; g < j->groups; g++) rms(y + (size_t)g * j->n, x + (size_t)g * j->n, j->w, j->n, s->m->hp.norm_eps);
    if (j->quant) kernels_quantize_act(KERNELS_ACT_I16, y, j->n * j->groups, cpu_qrow(s, j->dst, t, j->n * j->groups));
}

static bool cpu_norm(fwd_state *s, fwd_view dst, fwd_view src, const int32_t *rows, int32_t n, int32_t groups,
                     const float *w, int T, bool quant) {
    norm_job j = {s, dst, src, rows, n, groups, w, quant && (n * groups) % 32 == 0 && dst.off == 0 && cpu_of(s)->bufq[dst.buf]};
    pool_run_chunks(cpu_of(s)->pool, &(pool_task){.chunk = norm_op_chunk, .arg = &j, .n_chunks = T});
    return j.quant;
}

typedef struct heads_job {
    fwd_state *s;
    fwd_view v;
    const fwd_heads *h;
} heads_job;

static void heads_chunk(void *arg, int t, int ith) {
    const heads_job *j = arg;
    float *row = cpu_row(j->s, j->v, t);
    for (int h = 0; h < j->h->n; h++) finish_head(j->s, j->h, row + (size_t)h * j->h->stride, t, h);
}

static void cpu_heads(fwd_state *s, fwd_view v, const fwd_heads *h, int T) {
    heads_job j = {s, v, h};
    pool_run_chunks(cpu_of(s)->pool, &(pool_task){.chunk = heads_chunk, .arg = &j, .n_chunks = T});
}

typedef struct add_job {
    fwd_state *s;
    fwd_view x, o;
    int32_t n;
    const float *w;
    float scale;
} add_job;

static void add_chunk(void *arg, int t, int ith) {
    const add_job *j = arg;
    float *x = cpu_row(j->s, j->x, t), *o = cpu_row(j->s, j->o, t);
    if (j->w) kernels_rms_norm(o, o, j->w, j->n, j->s->m->hp.norm_eps);
    for (int i = 0; i < j->n; i++) x[i] += j->scale * o[i];
}

static void cpu_add(fwd_state *s, fwd_view x, fwd_view o, int32_t n, const float *w, float scale, int T) {
    add_job j = {s, x, o, n, w, scale};
    pool_run_chunks(cpu_of(s)->pool, &(pool_task){.chunk = add_chunk, .arg = &j, .n_chunks = T});
}

/* ---- the micro-batch ----------------------------------------------------------------------- */

static int cpu_begin(fwd_state *s, const nc_batch_entry *e, int T, nc_err *err) {
    cpu_state *cpu = cpu_of(s);
    cpu->buf[FB_X] = s->x;
    cpu->buf[FB_ROUTER] = s->moe.logits;
    cpu->buf[FB_LOGITS] = s->out_logits;
    cpu_attn_blocks(s, e, T);
    return 0;
}

static int cpu_segment(fwd_state *s, int T, int n_out, int (*run)(fwd_state *, void *, nc_err *), void *arg, nc_err *err) {
    return run(s, arg, err);
}

static int cpu_get(fwd_state *s, float *dst, fwd_view src, int32_t n, int T, nc_err *err) {
    for (int t = 0; t < T; t++) {
        const float *r = cpu_row(s, src, t);
        if (r != dst + (size_t)t * n) memcpy(dst + (size_t)t * n, r, (size_t)n * sizeof *dst);
    }
    return 0;
}

static int cpu_put(fwd_state *s, fwd_view dst, const float *src, int32_t n, int T, nc_err *err) {
    for (int t = 0; t < T; t++) {
        float *r = cpu_row(s, dst, t);
        if (r != src + (size_t)t * n) memcpy(r, src + (size_t)t * n, (size_t)n * sizeof *r);
    }
    return 0;
}

/* ---- set-up --------------------------------------------------------------------------------- */

static bool any_int(const model *m) {
    if (int_weight(&m->output)) return true;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const model_layer *L = &m->layers[il];
        const model_weight *ws[MODEL_LAYER_WEIGHTS + 2 * L->n_head];
        for (int i = 0, k = model_layer_weights(L, ws); i < k; i++)
            if (int_weight(ws[i])) return true;
        for (int e = 0; e < m->hp.n_expert; e++) {
            const model_weight *ex[] = {L->exp_gate ? &L->exp_gate[e] : NULL, L->exp_up ? &L->exp_up[e] : NULL,
                                        L->exp_gate_up ? &L->exp_gate_up[e] : NULL, L->exp_down ? &L->exp_down[e] : NULL};
            for (size_t i = 0; i < sizeof ex / sizeof *ex; i++)
                if (ex[i] && int_weight(ex[i])) return true;
        }
    }
    return false;
}

static void cpu_free(fwd_state *s) {
    cpu_state *cpu = s->cpu;
    if (!cpu) return;
    if (cpu->pool) pool_free(cpu->pool);
    for (int i = 0; cpu->thr && i < s->n_threads; i++) {
        cpu_thread *t = &cpu->thr[i];
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
        free(t->heads);
    }
    free(cpu->thr);
    for (int b = 0; b < FB_COUNT; b++) {
        if (b != FB_X && b != FB_ROUTER && b != FB_LOGITS) free(cpu->buf[b]);
        free(cpu->bufq[b]);
    }
    free(cpu->attn_blocks);
    free(cpu->lora_u);
    cpu_experts_free(s);
    free(cpu);
    s->cpu = NULL;
}

static int cpu_init(fwd_state *s, int il0, nc_err *err) {
    const model_hparams *hp = &s->m->hp;
    int group = 1, dk = 1, dv = 1; /* the widest attention of the layers */
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &s->m->layers[il];
        if (L->mixer != MIXER_ATTENTION && L->mixer != MIXER_MLA) continue;
        int g = L->n_head / L->n_head_kv, span = g * L->head_dim_v;
        group = g > group ? g : group;
        dk = L->head_dim > dk ? L->head_dim : dk;
        dv = L->head_dim_v > dv ? L->head_dim_v : dv;
        /* attention quantises the output of each group of query heads on its own */
        if (g > CPU_MAX_GROUP)
            return nc_fail(err, "layer %d: %d query heads per KV head: at most %d are supported", il, g, CPU_MAX_GROUP);
        if (int_weight(&L->wo) && L->mixer == MIXER_ATTENTION && !L->q_gate && span % 32)
            return nc_fail(err, "attn_output.weight of layer %d: quantised, with query-head groups of %d dimensions "
                                "(not a multiple of 32)", il, span);
    }
    cpu_state *cpu = s->cpu = calloc(1, sizeof *cpu);
    if (!cpu) return nc_fail(err, "out of memory");
    size_t B = (size_t)s->n_batch;
    bool quant = any_int(s->m), ok = (cpu->pool = pool_create(s->n_threads)) != NULL;
    int32_t widest = 0;
    for (int b = 0; b < FB_COUNT; b++) {
        int32_t w = s->width[b];
        widest = w > widest && b != FB_LOGITS && b != FB_ROUTER ? w : widest;
        size_t qb = kernels_act_bytes(KERNELS_ACT_I16, w / 32 * 32);
        if (b != FB_X && b != FB_ROUTER && b != FB_LOGITS && w > 0) ok = ok && (cpu->buf[b] = alloc64(B * (size_t)w * 4));
        if (quant && b != FB_ROUTER && b != FB_LOGITS && w >= 32) ok = ok && (cpu->bufq[b] = alloc64(B * qb));
        int32_t c = b == FB_LOGITS || b == FB_ROUTER ? 0 : cpu_chunk_rows(w, s->n_threads);
        cpu->max_chunk = c > cpu->max_chunk ? c : cpu->max_chunk;
    }
    cpu->attn_blocks = malloc((B + 1) * sizeof *cpu->attn_blocks);
    if (s->m->lora_rank) ok = ok && (cpu->lora_u = malloc(B * (size_t)s->m->lora_rank * sizeof *cpu->lora_u));
    cpu->thr = calloc((size_t)s->n_threads, sizeof *cpu->thr);
    ok = ok && cpu->attn_blocks && cpu->thr;
    size_t in_q = kernels_act_bytes(KERNELS_ACT_I16, widest / 32 * 32);
    for (int i = 0; ok && i < s->n_threads; i++) {
        cpu_thread *t = &cpu->thr[i];
        size_t R = CPU_ATTN_BLOCK * (size_t)group;
        t->xn = alloc64(CPU_PRIVATE_T * (size_t)widest * sizeof(float));
        t->xq = alloc64(CPU_PRIVATE_T * in_q);
        t->pack = alloc64(kernels_mul_scratch_bytes());
        t->gate = alloc64(B * (size_t)cpu->max_chunk * sizeof(float));
        t->up = alloc64(B * (size_t)cpu->max_chunk * sizeof(float));
        t->attn_q = alloc64(R * (size_t)dk * sizeof(float));
        t->scores = alloc64(R * CPU_ATTN_SPAN * sizeof(float));
        size_t part = R * (size_t)dv, recall = hp->ssm_heads ? (size_t)(hp->ssm_inner / hp->ssm_heads) : 0;
        t->attn_part = alloc64((part > recall ? part : recall) * sizeof(float)); /* also DeltaNet's recall */
        t->heads = alloc64(B * (size_t)widest * 2 * sizeof(float)); /* the rows, then their int16 quantisation */
        t->attn_max = malloc(R * sizeof(float));
        t->attn_sum = malloc(R * sizeof(double));
        t->attn_score = malloc(CPU_ATTN_SPAN * sizeof(uint64_t));
        ok = t->xn && t->xq && t->pack && t->gate && t->up && t->attn_q && t->scores && t->attn_part && t->attn_max &&
             t->attn_sum && t->attn_score && t->heads;
        size_t kv_floats = kv_scratch_floats(&s->kv);
        if (ok && kv_floats) {
            t->kv_keys = alloc64(kv_floats * sizeof(float));
            t->kv_values = alloc64(kv_floats * sizeof(float));
            ok = t->kv_keys && t->kv_values;
        }
    }
    if (ok && hp->n_expert > 0 && cpu_experts_init(s, err)) ok = false;
    if (!ok) {
        cpu_free(s);
        return nc_fail(err, "out of memory for the forward pass scratch (batch %d)", s->n_batch);
    }
    return 0;
}

/* ---- products per head --------------------------------------------------------------------- */

typedef struct heads_mul_job {
    fwd_state *s;
    const model_weight *w;
    fwd_view in, out;
    int32_t in_stride, out_stride, T;
} heads_mul_job;

/* Head h's product for every token: its slice of the input gathered into rows of the head's
 * width (what the kernels read), then multiplied. */
static void heads_mul_chunk(void *arg, int h, int ith) {
    const heads_mul_job *j = arg;
    fwd_state *s = j->s;
    cpu_thread *th = &cpu_of(s)->thr[ith];
    const model_weight *w = &j->w[h];
    int K = w->cols;
    float *x = th->heads;
    uint8_t *xq = NULL;
    for (int t = 0; t < j->T; t++) memcpy(x + (size_t)t * K, cpu_row(s, j->in, t) + (size_t)h * j->in_stride, (size_t)K * 4);
    if (int_weight(w)) { /* the quantisation after the rows, in the same scratch */
        xq = (uint8_t *)(x + (size_t)j->T * K);
        for (int t = 0; t < j->T; t++) kernels_quantize_act(KERNELS_ACT_I16, x + (size_t)t * K, K, xq + kernels_act_bytes(KERNELS_ACT_I16, K) * t);
    }
    cpu_weight_mul(w, x, KERNELS_ACT_I16, xq, j->T, cpu_row(s, j->out, 0) + (size_t)h * j->out_stride, j->out.ld, 0, w->rows,
                   false, th->pack);
}

static void cpu_mul_heads(fwd_state *s, const model_weight *w, int32_t n, fwd_view in, int32_t in_stride, fwd_view out,
                          int32_t out_stride, int T) {
    heads_mul_job j = {s, w, in, out, in_stride, out_stride, T};
    pool_run_chunks(cpu_of(s)->pool, &(pool_task){.chunk = heads_mul_chunk, .arg = &j, .n_chunks = n});
}

const fwd_backend fwd_cpu = {
    .name = "cpu",
    .lora = true,
    .init = cpu_init,
    .free = cpu_free,
    .begin = cpu_begin,
    .segment = cpu_segment,
    .get = cpu_get,
    .put = cpu_put,
    .mul = cpu_mul,
    .norm = cpu_norm,
    .heads = cpu_heads,
    .attend = cpu_attend,
    .add = cpu_add,
    .experts = cpu_experts,
    .ew = cpu_ew,
    .conv = cpu_conv,
    .scan = cpu_scan,
    .mul_heads = cpu_mul_heads,
};
