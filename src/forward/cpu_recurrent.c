/* The CPU backend's recurrent operations (backend.h's conv and scan): each sequence's tokens in
 * order, the work split by channels (the convolution) or heads (the recurrences), so that a
 * token's result takes the same operations whether it came in a prompt or alone: the state after
 * it is the same bits however the tokens were batched.
 *
 * The recurrences' state is [state_dim][head_dim] per head (a row per key / state dimension), and
 * everything done to it is element-wise along the rows or a sum over the rows, each of the
 * head_dim lanes on its own: the loops below run along a row in vectors of VL floats (GCC's vector
 * extension; target_clones compiles them for AVX-512, AVX2 and the baseline, picked at load).
 * No lane ever meets another, and products and sums are separate operations (no fused
 * multiply-add; C11 mode does not contract them), so every instruction set gives the same bits as
 * the scalar tail loops that finish rows whose length is not a multiple of VL. */
#include <math.h>
#include <stdbool.h>

#include "forward/cpu.h"

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static float silu(float x) { return x * sigmoid(x); }
/* ln(1 + e^x), as x itself where e^x would swamp the 1 */
static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* VL floats, loaded from and stored to any float address (the state rows are not 64-byte aligned
 * in general). */
#define VL 16
typedef float vf __attribute__((vector_size(VL * sizeof(float)), aligned(sizeof(float)), may_alias));
/* Lanes are walked W vectors at a time: 2W independent sums in flight hide the adds' latency. */
#define W 4
/* The loops over those vectors (and Mamba2's tokens) unrolled, so that their sums live in
 * registers: -O2 does not unroll them by itself, and then keeps them in memory. */
#define UNROLL _Pragma("GCC unroll 8")

#if defined(__x86_64__) && defined(__GNUC__)
#define SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default"), noinline))
#else
#define SIMD_CLONES
#endif

/* Channels per chunk of the convolution. */
#define CONV_CHANNELS 64

typedef struct conv_job {
    fwd_state *s;
    const fwd_conv *c;
    int T;
} conv_job;

/* One token of the convolution over n channels, the taps and the history transposed (a row of
 * CONV_CHANNELS per tap, oldest input first): acc = sum_k w[k] hist[k] + w[K-1] in (+ bias), in
 * the order of the taps as the scalar loop of the tail; then the history moves on by the input. */
SIMD_CLONES static void conv_token(int n, int K, const float *wt, float *hist, const float *in, const float *bias,
                                   float *acc) {
    int i = 0;
    for (; i + VL <= n; i += VL) {
        vf a = (vf){0}, x = *(const vf *)(in + i);
        for (int k = 0; k < K - 1; k++) a = a + *(const vf *)(wt + k * CONV_CHANNELS + i) * *(vf *)(hist + k * CONV_CHANNELS + i);
        a = a + *(const vf *)(wt + (K - 1) * CONV_CHANNELS + i) * x;
        if (bias) a = a + *(const vf *)(bias + i);
        *(vf *)(acc + i) = a;
        for (int k = 0; k < K - 2; k++) *(vf *)(hist + k * CONV_CHANNELS + i) = *(vf *)(hist + (k + 1) * CONV_CHANNELS + i);
        *(vf *)(hist + (K - 2) * CONV_CHANNELS + i) = x;
    }
    for (; i < n; i++) {
        float a = 0.0f;
        for (int k = 0; k < K - 1; k++) a = a + wt[k * CONV_CHANNELS + i] * hist[k * CONV_CHANNELS + i];
        a = a + wt[(K - 1) * CONV_CHANNELS + i] * in[i];
        if (bias) a = a + bias[i];
        acc[i] = a;
        for (int k = 0; k < K - 2; k++) hist[k * CONV_CHANNELS + i] = hist[(k + 1) * CONV_CHANNELS + i];
        hist[(K - 2) * CONV_CHANNELS + i] = in[i];
    }
}

/* Channels [c0, c1) of every token. A sequence's state holds, per channel, its last K - 1 inputs
 * oldest first (channel-major); a run of the batch's tokens of one sequence works on a transposed
 * copy (a row per tap, the channels along it), written back after the run. */
static void conv_chunk(void *arg, int chunk, int ith) {
    const conv_job *j = arg;
    fwd_state *s = j->s;
    const fwd_conv *c = j->c;
    int K = c->k, c0 = chunk * CONV_CHANNELS, n = c0 + CONV_CHANNELS < c->channels ? CONV_CHANNELS : c->channels - c0;
    float wt[K][CONV_CHANNELS], hist[K - 1][CONV_CHANNELS], acc[CONV_CHANNELS];
    for (int i = 0; i < n; i++)
        for (int k = 0; k < K; k++) wt[k][i] = c->w[(size_t)(c0 + i) * K + k];
    for (int t0 = 0; t0 < j->T;) {
        float *state = kv_state(&s->kv, c->layer, s->entries[t0].seq) + (size_t)c0 * (K - 1);
        for (int i = 0; i < n; i++)
            for (int k = 0; k < K - 1; k++) hist[k][i] = state[(size_t)i * (K - 1) + k];
        int t = t0;
        for (; t < j->T && s->entries[t].seq == s->entries[t0].seq; t++) {
            float *out = cpu_row(s, c->out, t) + c0;
            conv_token(n, K, &wt[0][0], &hist[0][0], cpu_row(s, c->in, t) + c0, c->bias ? c->bias + c0 : NULL, acc);
            for (int i = 0; i < n; i++) out[i] = c->silu ? silu(acc[i]) : acc[i];
        }
        for (int i = 0; i < n; i++)
            for (int k = 0; k < K - 1; k++) state[(size_t)i * (K - 1) + k] = hist[k][i];
        t0 = t;
    }
}

void cpu_conv(fwd_state *s, const fwd_conv *c, int T) {
    conv_job j = {s, c, T};
    pool_run_chunks(cpu_of(s)->pool,
                    &(pool_task){.chunk = conv_chunk, .arg = &j, .n_chunks = (c->channels + CONV_CHANNELS - 1) / CONV_CHANNELS});
}

typedef struct scan_job {
    fwd_state *s;
    const fwd_scan *c;
    int T;
} scan_job;

/* The L2 norm's scale of a vector (llama.cpp's: 1 / max(|x|, eps), the sum in double). */
static float l2_scale(const float *x, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float norm = sqrtf((float)ss);
    return 1.0f / (norm > eps ? norm : eps);
}

/* ---- gated DeltaNet ----
 * Per token, the state of a head goes through S = decay S; recall = S^T k; delta = beta (v -
 * recall); S += k delta^T; y = S^T q. Written as such it takes four passes over S (64 KiB a head
 * for Qwen3.5's 128 x 128), which the recurrence of a prompt repeats for every token. Two
 * rewrites make it one pass a token:
 *  - y = (decay S)^T q + (k . q) delta: the output comes from the decayed state before the write,
 *    in the pass that computes the recall;
 *  - the write S += k delta^T of token t is left pending and done in token t + 1's pass, just
 *    before its decay (the same two roundings as when done on its own).
 * The last token of a run of one sequence's tokens (a decode step's only one) has no next pass:
 * its pass only reads, and a second one stores S = (S + pending) decay + k delta^T, computing the
 * decayed elements again (the same roundings), so that the state between calls is what token by
 * token would leave. A decode step thus reads its state twice and writes it once. */

/* Lanes [r, r + nw VL) of deltanet_pass (nw a constant where it is inlined: the loops over w unroll
 * and the 2 nw sums stay in registers). */
static inline __attribute__((always_inline)) void deltanet_lanes(float *S, int DK, int DV, int r, int nw, const float *kp,
                                                                   const float *dp, float decay, const float *k,
                                                                   const float *q, bool store, float *recall,
                                                                   float *yq) {
    vf d[W], ar[W], ay[W];
    UNROLL
    for (int w = 0; w < nw; w++) {
        d[w] = kp ? *(const vf *)(dp + r + w * VL) : (vf){0};
        ar[w] = ay[w] = (vf){0};
    }
    for (int i = 0; i < DK; i++) {
        float *row = S + (size_t)i * DV + r;
        UNROLL
        for (int w = 0; w < nw; w++) {
            vf x = *(vf *)(row + w * VL);
            if (kp) x = x + d[w] * kp[i];
            x = x * decay;
            if (store) *(vf *)(row + w * VL) = x;
            ar[w] = ar[w] + x * k[i];
            ay[w] = ay[w] + x * q[i];
        }
    }
    UNROLL
    for (int w = 0; w < nw; w++) {
        *(vf *)(recall + r + w * VL) = ar[w];
        *(vf *)(yq + r + w * VL) = ay[w];
    }
}

/* One token's pass over a head's state S (DK rows of DV): each element first takes the pending
 * write (S + kp[i] dp[r], when kp is set), then the decay, and is stored back when `store`;
 * recall = S^T k and yq = S^T q of the result, each a sum over the rows in order. */
SIMD_CLONES static void deltanet_pass(float *S, int DK, int DV, const float *kp, const float *dp, float decay,
                                      const float *k, const float *q, bool store, float *recall, float *yq) {
    int r = 0;
    for (; r + W * VL <= DV; r += W * VL) deltanet_lanes(S, DK, DV, r, W, kp, dp, decay, k, q, store, recall, yq);
    for (; r + VL <= DV; r += VL) deltanet_lanes(S, DK, DV, r, 1, kp, dp, decay, k, q, store, recall, yq);
    for (; r < DV; r++) { /* the same operations, one lane at a time */
        float ar = 0.0f, ay = 0.0f;
        for (int i = 0; i < DK; i++) {
            float x = S[(size_t)i * DV + r];
            if (kp) x = x + dp[r] * kp[i];
            x = x * decay;
            if (store) S[(size_t)i * DV + r] = x;
            ar = ar + x * k[i];
            ay = ay + x * q[i];
        }
        recall[r] = ar, yq[r] = ay;
    }
}

/* The store after a run's last token, whose pass did not store: S = (S + kp dp^T) decay + k d^T
 * (kp NULL: no pending write). */
SIMD_CLONES static void deltanet_store(float *S, int DK, int DV, const float *kp, const float *dp, float decay,
                                       const float *k, const float *d) {
    for (int i = 0; i < DK; i++) {
        float *row = S + (size_t)i * DV;
        int r = 0;
        for (; r + VL <= DV; r += VL) {
            vf x = *(vf *)(row + r);
            if (kp) x = x + *(const vf *)(dp + r) * kp[i];
            *(vf *)(row + r) = x * decay + *(const vf *)(d + r) * k[i];
        }
        for (; r < DV; r++) {
            float x = row[r];
            if (kp) x = x + dp[r] * kp[i];
            row[r] = x * decay + d[r] * k[i];
        }
    }
}

/* Gated DeltaNet, value head h: its state S is [state_dim][head_dim] (a row per key dimension)
 * after the convolution's state. */
static void deltanet_head(const scan_job *j, int h) {
    fwd_state *s = j->s;
    const fwd_scan *c = j->c;
    int DV = c->head_dim, DK = c->state_dim, HK = c->groups, kh = h % HK;
    size_t conv = (size_t)(s->m->hp.ssm_conv - 1) * (size_t)s->m->layers[c->layer].ssm.channels, n = (size_t)DK * DV;
    float eps = s->m->hp.norm_eps, q[DK], kbuf[2][DK], dbuf[2][DV], recall[DV], yq[DV];
    const float *kp = NULL, *dp = NULL; /* the previous token's pending write, in the other buffers */
    for (int t = 0; t < j->T; t++) {
        int seq = s->entries[t].seq;
        float *S = kv_state(&s->kv, c->layer, seq) + conv + (size_t)h * n;
        bool last = t + 1 == j->T || s->entries[t + 1].seq != seq; /* of its run */
        const float *x = cpu_row(s, c->x, t);
        const float *q0 = x + (size_t)kh * DK, *k0 = x + (size_t)(HK + kh) * DK, *v = x + (size_t)(2 * HK * DK + h * DV);
        float *k = kbuf[t & 1], *delta = dbuf[t & 1];
        float qs = l2_scale(q0, DK, eps) / sqrtf((float)DK), ks = l2_scale(k0, DK, eps);
        for (int i = 0; i < DK; i++) q[i] = q0[i] * qs, k[i] = k0[i] * ks;
        float beta = sigmoid(cpu_row(s, c->beta, t)[h]);
        float decay = expf(softplus(cpu_row(s, c->gate, t)[h] + c->dt_bias[h]) * c->a[h]);
        deltanet_pass(S, DK, DV, kp, dp, decay, k, q, !last, recall, yq);
        float kq = 0.0f;
        for (int i = 0; i < DK; i++) kq += k[i] * q[i];
        float *y = cpu_row(s, c->y, t) + (size_t)h * DV;
        for (int r = 0; r < DV; r++) {
            delta[r] = (v[r] - recall[r]) * beta; /* what the state writes for k */
            y[r] = yq[r] + kq * delta[r];         /* what the state after the write recalls for q */
        }
        if (last) deltanet_store(S, DK, DV, kp, dp, decay, k, delta), kp = dp = NULL;
        else kp = k, dp = delta;
    }
}

/* ---- Mamba2 ----
 * Per token, S = exp(dt a) S + B (dt x)^T and y = S^T C + d x. Nothing of a token's step needs
 * the whole of the previous one, so one pass over S takes up to NT consecutive tokens of a
 * sequence: each element goes through their updates in order in a register (the same operations
 * as token by token, only not stored in between), and each token's output is summed as its state
 * goes by. */
#define NT 4

/* Lanes [p, p + nw VL) of mamba2_pass for nt tokens (nw and nt constants where it is inlined). */
static inline __attribute__((always_inline)) void mamba2_lanes(float *S, int DS, int HD, int p, int nw, int nt,
                                                                 const float *dA, const float *const *B,
                                                                 const float *const *x_dt, const float *const *C,
                                                                 float *const *y) {
    vf acc[NT][W / 2], xd[NT][W / 2];
    const float *Bu[NT], *Cu[NT]; /* local copies: the state's stores (may_alias) could change the arrays */
    float dAu[NT];
    UNROLL
    for (int u = 0; u < nt; u++) {
        Bu[u] = B[u], Cu[u] = C[u], dAu[u] = dA[u];
        UNROLL
        for (int w = 0; w < nw; w++) acc[u][w] = (vf){0}, xd[u][w] = *(const vf *)(x_dt[u] + p + w * VL);
    }
    for (int n = 0; n < DS; n++) {
        float *row = S + (size_t)n * HD + p;
        UNROLL
        for (int w = 0; w < nw; w++) {
            vf st = *(vf *)(row + w * VL);
            UNROLL
            for (int u = 0; u < nt; u++) {
                st = st * dAu[u] + xd[u][w] * Bu[u][n];
                acc[u][w] = acc[u][w] + st * Cu[u][n];
            }
            *(vf *)(row + w * VL) = st;
        }
    }
    UNROLL
    for (int u = 0; u < nt; u++)
        UNROLL
        for (int w = 0; w < nw; w++) *(vf *)(y[u] + p + w * VL) = acc[u][w];
}

/* The whole state for nt tokens: two vectors of lanes at a time (2 nt sums in flight), then one,
 * then the same operations a lane at a time. */
static inline __attribute__((always_inline)) void mamba2_tokens(float *S, int DS, int HD, int nt, const float *dA,
                                                                  const float *const *B, const float *const *x_dt,
                                                                  const float *const *C, float *const *y) {
    int p = 0;
    for (; p + W / 2 * VL <= HD; p += W / 2 * VL) mamba2_lanes(S, DS, HD, p, W / 2, nt, dA, B, x_dt, C, y);
    for (; p + VL <= HD; p += VL) mamba2_lanes(S, DS, HD, p, 1, nt, dA, B, x_dt, C, y);
    for (; p < HD; p++) {
        float acc[NT] = {0};
        for (int n = 0; n < DS; n++) {
            float st = S[(size_t)n * HD + p];
            UNROLL
            for (int u = 0; u < nt; u++) {
                st = st * dA[u] + x_dt[u][p] * B[u][n];
                acc[u] = acc[u] + st * C[u][n];
            }
            S[(size_t)n * HD + p] = st;
        }
        UNROLL
        for (int u = 0; u < nt; u++) y[u][p] = acc[u];
    }
}

/* One pass over a head's state S (DS rows of HD) for nt <= NT tokens in order. */
SIMD_CLONES static void mamba2_pass(float *S, int DS, int HD, int nt, const float *dA, const float *const *B,
                                    const float *const *x_dt, const float *const *C, float *const *y) {
    switch (nt) { /* a copy of the loops for each count, their sums in registers */
    case 4: mamba2_tokens(S, DS, HD, 4, dA, B, x_dt, C, y); break;
    case 3: mamba2_tokens(S, DS, HD, 3, dA, B, x_dt, C, y); break;
    case 2: mamba2_tokens(S, DS, HD, 2, dA, B, x_dt, C, y); break;
    default: mamba2_tokens(S, DS, HD, 1, dA, B, x_dt, C, y); break;
    }
}

/* Mamba2, head h (group h / (heads / groups)): its state S is [state_dim][head_dim]. */
static void mamba2_head(const scan_job *j, int h) {
    fwd_state *s = j->s;
    const fwd_scan *c = j->c;
    int HD = c->head_dim, DS = c->state_dim, g = h / (c->heads / c->groups), IN = c->heads * HD;
    size_t conv = (size_t)(s->m->hp.ssm_conv - 1) * (size_t)s->m->layers[c->layer].ssm.channels;
    float x_dt[NT][HD], dA[NT];
    const float *B[NT], *C[NT], *xd[NT];
    float *y[NT];
    for (int t0 = 0; t0 < j->T;) {
        float *S = kv_state(&s->kv, c->layer, s->entries[t0].seq) + conv + (size_t)h * HD * DS;
        int nt = 0; /* the tokens of this pass: up to NT in a row of S's sequence */
        for (; nt < NT && t0 + nt < j->T && s->entries[t0 + nt].seq == s->entries[t0].seq; nt++) {
            int t = t0 + nt;
            const float *xr = cpu_row(s, c->x, t), *x = xr + (size_t)h * HD;
            B[nt] = xr + IN + (size_t)g * DS, C[nt] = xr + IN + (size_t)(c->groups + g) * DS;
            float dt = softplus(cpu_row(s, c->gate, t)[h] + c->dt_bias[h]);
            dA[nt] = expf(dt * c->a[h]);
            for (int p = 0; p < HD; p++) x_dt[nt][p] = x[p] * dt;
            xd[nt] = x_dt[nt], y[nt] = cpu_row(s, c->y, t) + (size_t)h * HD;
        }
        mamba2_pass(S, DS, HD, nt, dA, B, xd, C, y);
        UNROLL
        for (int u = 0; u < nt; u++) {
            const float *x = cpu_row(s, c->x, t0 + u) + (size_t)h * HD;
            for (int p = 0; p < HD; p++) y[u][p] += x[p] * c->d[h];
        }
        t0 += nt;
    }
}

static void scan_chunk(void *arg, int h, int ith) {
    const scan_job *j = arg;
    if (j->c->kind == FWD_DELTANET) deltanet_head(j, h);
    else mamba2_head(j, h);
}

void cpu_scan(fwd_state *s, const fwd_scan *c, int T) {
    scan_job j = {s, c, T};
    pool_run_chunks(cpu_of(s)->pool, &(pool_task){.chunk = scan_chunk, .arg = &j, .n_chunks = c->heads});
}
