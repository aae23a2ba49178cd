/* The CPU backend's mixture of experts (cpu.h; backend.h's experts): the routed rows gathered,
 * each expert's products run once for all its rows, each token's outputs combined. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward/cpu.h"
#include "tensor/quant.h"

static bool int_weight(const model_weight *w) { return w->data && kernels_int_type(w->type) != 0; }

static int n_chunks(int rows, int cr) { return (rows + cr - 1) / cr; }

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

typedef struct moe_job {
    fwd_state *s;
    const fwd_experts *x;
    int32_t rows_ff, rows_embd;      /* rows per chunk of the two expert jobs */
    size_t act_embd, act_ffe;        /* bytes of a quantised row of n_embd, n_ff_exp */
} moe_job;

/* List (expert, first row) chunks over `rows` output rows of every expert that has tokens. */
static int list_chunks(fwd_state *s, int rows, int per) {
    cpu_moe *mo = &cpu_of(s)->moe;
    int n = 0;
    for (int e = 0; e < s->m->hp.n_expert; e++)
        if (s->moe.start[e + 1] > s->moe.start[e])
            for (int r0 = 0; r0 < rows; r0 += per) {
                mo->chunks[2 * n] = e;
                mo->chunks[2 * n + 1] = r0;
                n++;
            }
    return n;
}

static void add_bias(float *y, int ldy, int n_rows, const float *bias, int n) {
    for (int r = 0; bias && r < n_rows; r++)
        for (int i = 0; i < n; i++) y[(size_t)r * ldy + i] += bias[i];
}

/* Rows [r0, r1) of one expert's gate and up for its tokens, then the activation. */
static void gate_up_chunk(void *arg, int c, int ith) {
    const moe_job *j = arg;
    fwd_state *s = j->s;
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = j->x->L;
    cpu_moe *mo = &cpu_of(s)->moe;
    cpu_thread *th = &cpu_of(s)->thr[ith];
    int e = mo->chunks[2 * c], r0 = mo->chunks[2 * c + 1], F = hp->n_ff_exp, E = hp->n_embd;
    int r1 = r0 + j->rows_ff < F ? r0 + j->rows_ff : F, n = r1 - r0;
    int first = s->moe.start[e], T = s->moe.start[e + 1] - first;
    const float *X = mo->in + (size_t)first * E;
    const uint8_t *Xq = mo->inq ? mo->inq + (size_t)first * j->act_embd : NULL;
    if (L->exp_gate) {
        cpu_weight_mul(&L->exp_gate[e], X, KERNELS_ACT_I16, Xq, T, th->gate, n, r0, r1, false, th->pack);
        cpu_weight_mul(&L->exp_up[e], X, KERNELS_ACT_I16, Xq, T, th->up, n, r0, r1, false, th->pack);
        add_bias(th->gate, n, T, L->exp_gate_b ? L->exp_gate_b + (size_t)e * F + r0 : NULL, n);
        add_bias(th->up, n, T, L->exp_up_b ? L->exp_up_b + (size_t)e * F + r0 : NULL, n);
    } else { /* fused: output rows of gate and up interleaved, or gate's then up's */
        float *gu = mo->gate_up + (size_t)ith * s->n_batch * 2 * j->rows_ff;
        const model_weight *w = &L->exp_gate_up[e];
        const float *b = L->exp_gate_up_b ? L->exp_gate_up_b + (size_t)e * 2 * F : NULL;
        if (hp->gate_up == GATE_UP_INTERLEAVED) {
            cpu_weight_mul(w, X, KERNELS_ACT_I16, Xq, T, gu, 2 * n, 2 * r0, 2 * r1, false, th->pack);
            add_bias(gu, 2 * n, T, b ? b + 2 * r0 : NULL, 2 * n);
            for (int t = 0; t < T; t++)
                for (int i = 0; i < n; i++) {
                    th->gate[(size_t)t * n + i] = gu[(size_t)t * 2 * n + 2 * i];
                    th->up[(size_t)t * n + i] = gu[(size_t)t * 2 * n + 2 * i + 1];
                }
        } else {
            cpu_weight_mul(w, X, KERNELS_ACT_I16, Xq, T, th->gate, n, r0, r1, false, th->pack);
            cpu_weight_mul(w, X, KERNELS_ACT_I16, Xq, T, th->up, n, F + r0, F + r1, false, th->pack);
            add_bias(th->gate, n, T, b ? b + r0 : NULL, n);
            add_bias(th->up, n, T, b ? b + F + r0 : NULL, n);
        }
    }
    static const kernels_glu kind[] = {[ACT_SILU] = KERNELS_SILU, [ACT_GELU_TANH] = KERNELS_GELU_TANH,
                                       [ACT_SWIGLU_OAI] = KERNELS_SILU_OAI};
    bool quantise = mo->actq != NULL && int_weight(&L->exp_down[e]);
    for (int t = 0; t < T; t++) {
        float *a = mo->act + (size_t)(first + t) * F;
        kernels_glu_act(kind[hp->arch->act], a + r0, th->gate + (size_t)t * n, th->up + (size_t)t * n, n);
        if (quantise)
            kernels_quantize_act_part(KERNELS_ACT_I16, a, F, r0 / 32, r1 / 32, mo->actq + (size_t)(first + t) * j->act_ffe);
    }
}

/* Rows [r0, r1) of one expert's down projection for its tokens, plus its bias. */
static void down_chunk(void *arg, int c, int ith) {
    const moe_job *j = arg;
    fwd_state *s = j->s;
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = j->x->L;
    cpu_moe *mo = &cpu_of(s)->moe;
    int e = mo->chunks[2 * c], r0 = mo->chunks[2 * c + 1], F = hp->n_ff_exp, E = hp->n_embd;
    int r1 = r0 + j->rows_embd < E ? r0 + j->rows_embd : E;
    int first = s->moe.start[e], T = s->moe.start[e + 1] - first;
    float *Y = mo->out + (size_t)first * E + r0;
    cpu_weight_mul(&L->exp_down[e], mo->act + (size_t)first * F, KERNELS_ACT_I16,
                   mo->actq ? mo->actq + (size_t)first * j->act_ffe : NULL, T, Y, E, r0, r1, false,
                   cpu_of(s)->thr[ith].pack);
    add_bias(Y, E, T, L->exp_down_b ? L->exp_down_b + (size_t)e * E + r0 : NULL, r1 - r0);
}

/* Gather the input of (token, slot) i into its row, and its quantisation (the norm's when it made
 * one; quantised here when the slot's weight scales the input). */
static void gather_chunk(void *arg, int i, int ith) {
    const moe_job *j = arg;
    fwd_state *s = j->s;
    cpu_moe *mo = &cpu_of(s)->moe;
    int E = s->m->hp.n_embd, K = s->m->hp.n_expert_used, t = i / K, r = s->moe.row[i];
    float *in = mo->in + (size_t)r * E;
    const float *x = cpu_row(s, j->x->in, t);
    if (j->x->weight_input)
        for (int k = 0; k < E; k++) in[k] = s->moe.weight[i] * x[k];
    else
        memcpy(in, x, (size_t)E * sizeof(float));
    if (!mo->inq) return;
    if (j->x->ready && !j->x->weight_input) memcpy(mo->inq + (size_t)r * j->act_embd, cpu_qrow(s, j->x->in, t, E), j->act_embd);
    else kernels_quantize_act(KERNELS_ACT_I16, in, E, mo->inq + (size_t)r * j->act_embd);
}

/* o = fma(w, y, o) over n floats, as a call of libm's fmaf per element did: compiled by
 * target_clones for x86-64-v4 and -v3, whose FMA instructions the blocks of 16 become (GCC's
 * basic-block vectoriser), and the baseline, which still calls fmaf. A fused multiply-add is correctly rounded wherever it is computed, so every
 * version gives the same bits. */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), noinline))
#endif
static void add_scaled(float *restrict o, const float *restrict y, float w, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) o[i + l] = fmaf(w, y[i + l], o[i + l]);
    for (; i < n; i++) o[i] = fmaf(w, y[i], o[i]);
}

/* out[t] = the weighted sum of token t's expert outputs, in the order of its slots. */
static void combine_chunk(void *arg, int t, int ith) {
    const moe_job *j = arg;
    fwd_state *s = j->s;
    int E = s->m->hp.n_embd, K = s->m->hp.n_expert_used;
    float *o = cpu_row(s, j->x->out, t);
    memset(o, 0, (size_t)E * sizeof *o);
    for (int k = 0; k < K; k++) {
        float w = j->x->weight_input ? 1.0f : s->moe.weight[t * K + k];
        add_scaled(o, cpu_of(s)->moe.out + (size_t)s->moe.row[t * K + k] * E, w, E);
    }
}

int cpu_experts(fwd_state *s, const fwd_experts *x, nc_err *err) {
    const model_hparams *hp = &s->m->hp;
    pool *p = cpu_of(s)->pool;
    moe_job j = {.s = s, .x = x, .rows_ff = cpu_chunk_rows(hp->n_ff_exp, s->n_threads),
                 .rows_embd = cpu_chunk_rows(hp->n_embd, s->n_threads),
                 .act_embd = kernels_act_bytes(KERNELS_ACT_I16, hp->n_embd),
                 .act_ffe = kernels_act_bytes(KERNELS_ACT_I16, hp->n_ff_exp / 32 * 32)};
    pool_run_chunks(p, &(pool_task){.chunk = gather_chunk, .arg = &j, .n_chunks = x->T * hp->n_expert_used});
    pool_run_chunks(p, &(pool_task){.chunk = gate_up_chunk, .arg = &j, .n_chunks = list_chunks(s, hp->n_ff_exp, j.rows_ff)});
    pool_run_chunks(p, &(pool_task){.chunk = down_chunk, .arg = &j, .n_chunks = list_chunks(s, hp->n_embd, j.rows_embd)});
    pool_run_chunks(p, &(pool_task){.chunk = combine_chunk, .arg = &j, .n_chunks = x->T});
    return 0;
}

static void *alloc64(size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64); }

int cpu_experts_init(fwd_state *s, nc_err *err) {
    const model_hparams *hp = &s->m->hp;
    cpu_moe *mo = &cpu_of(s)->moe;
    size_t B = (size_t)s->n_batch, K = (size_t)hp->n_expert_used, N = (size_t)hp->n_expert;
    size_t E = (size_t)hp->n_embd, F = (size_t)hp->n_ff_exp, rows = B * K;
    int32_t rows_ff = cpu_chunk_rows((int)F, s->n_threads), rows_embd = cpu_chunk_rows((int)E, s->n_threads);
    size_t max_chunks = N * (size_t)(n_chunks((int)(F > E ? F : E), rows_ff < rows_embd ? rows_ff : rows_embd) + 1);
    mo->chunks = malloc(2 * max_chunks * sizeof *mo->chunks);
    mo->in = alloc64(rows * E * sizeof(float));
    mo->act = alloc64(rows * F * sizeof(float));
    mo->out = alloc64(rows * E * sizeof(float));
    mo->gate_up = alloc64((size_t)s->n_threads * B * 2 * (size_t)rows_ff * sizeof(float));
    bool ok = mo->chunks && mo->in && mo->act && mo->out && mo->gate_up;
    if (ok && any_expert_int(s->m)) {
        mo->inq = alloc64(rows * kernels_act_bytes(KERNELS_ACT_I16, (int)E));
        mo->actq = alloc64(rows * kernels_act_bytes(KERNELS_ACT_I16, (int)(F / 32 * 32)));
        ok = mo->inq && mo->actq;
    }
    return ok ? 0 : nc_fail(err, "out of memory for the experts' scratch");
}

void cpu_experts_free(fwd_state *s) {
    cpu_moe *mo = &cpu_of(s)->moe;
    free(mo->chunks);
    free(mo->in);
    free(mo->inq);
    free(mo->act);
    free(mo->actq);
    free(mo->out);
    free(mo->gate_up);
}
