/* The CPU backend's recurrent operations (backend.h's conv and scan): each sequence's tokens in
 * order, the work split by channels (the convolution) or heads (the recurrences), so that a
 * token's result takes the same operations whether it came in a prompt or alone: the state after
 * it is the same bits however the tokens were batched. */
#include <math.h>
#include <string.h>

#include "format/ggml_types.h"
#include "forward/cpu.h"

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static float silu(float x) { return x * sigmoid(x); }
/* ln(1 + e^x), as x itself where e^x would swamp the 1 */
static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Channels per chunk of the convolution. */
#define CONV_CHANNELS 64

typedef struct conv_job {
    fwd_state *s;
    const fwd_conv *c;
    int T;
} conv_job;

/* Channels [c0, c1) of every token. A sequence's state holds, per channel, its last K - 1 inputs
 * oldest first (channel-major): the sum runs from the oldest input to the token's own. */
static void conv_chunk(void *arg, int chunk, int ith) {
    const conv_job *j = arg;
    fwd_state *s = j->s;
    const fwd_conv *c = j->c;
    int K = c->k, c0 = chunk * CONV_CHANNELS, c1 = c0 + CONV_CHANNELS < c->channels ? c0 + CONV_CHANNELS : c->channels;
    for (int t = 0; t < j->T; t++) {
        float *state = kv_state(&s->kv, c->layer, s->entries[t].seq);
        const float *in = cpu_row(s, c->in, t);
        float *out = cpu_row(s, c->out, t);
        for (int ch = c0; ch < c1; ch++) {
            float *st = state + (size_t)ch * (K - 1);
            const float *w = c->w + (size_t)ch * K;
            float acc = 0.0f;
            for (int k = 0; k < K - 1; k++) acc += w[k] * st[k];
            acc += w[K - 1] * in[ch];
            for (int k = 0; k < K - 2; k++) st[k] = st[k + 1];
            st[K - 2] = in[ch];
            if (c->bias) acc += c->bias[ch];
            out[ch] = c->silu ? silu(acc) : acc;
        }
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

/* Gated DeltaNet, value head h: its state S is [state_dim][head_dim] (a row per key dimension)
 * after the convolution's state, so that both of its products with a vector, S^T k and S^T q,
 * run along the value dimensions in the vector lanes (kernels_mix: one fma chain per value
 * dimension over the key dimensions in order, the same bits in every kernel set). */
static void deltanet_head(const scan_job *j, int h, float *recall) {
    fwd_state *s = j->s;
    const fwd_scan *c = j->c;
    int DV = c->head_dim, DK = c->state_dim, HK = c->groups, kh = h % HK;
    size_t conv = (size_t)(s->m->hp.ssm_conv - 1) * (size_t)s->m->layers[c->layer].ssm.channels, n = (size_t)DK * DV;
    float eps = s->m->hp.norm_eps, q[DK], k[DK];
    for (int t = 0; t < j->T; t++) {
        float *S = kv_state(&s->kv, c->layer, s->entries[t].seq) + conv + (size_t)h * n;
        const float *x = cpu_row(s, c->x, t);
        const float *q0 = x + (size_t)kh * DK, *k0 = x + (size_t)(HK + kh) * DK, *v = x + (size_t)(2 * HK * DK + h * DV);
        float qs = l2_scale(q0, DK, eps) / sqrtf((float)DK), ks = l2_scale(k0, DK, eps);
        for (int i = 0; i < DK; i++) q[i] = q0[i] * qs, k[i] = k0[i] * ks;
        float beta = sigmoid(cpu_row(s, c->beta, t)[h]);
        float decay = expf(softplus(cpu_row(s, c->gate, t)[h] + c->dt_bias[h]) * c->a[h]);
        float *y = cpu_row(s, c->y, t) + (size_t)h * DV;
        for (size_t i = 0; i < n; i++) S[i] *= decay;
        kernels_mix(GGML_TYPE_F32, S, (size_t)DV * 4, DK, DV, k, DK, 1, recall, DV); /* what S recalls for k */
        for (int r = 0; r < DV; r++) recall[r] = (v[r] - recall[r]) * beta;       /* the delta to write */
        for (int i = 0; i < DK; i++)
            for (int r = 0; r < DV; r++) S[(size_t)i * DV + r] += k[i] * recall[r];
        kernels_mix(GGML_TYPE_F32, S, (size_t)DV * 4, DK, DV, q, DK, 1, y, DV);
    }
}

/* Mamba2, head h (group h / (heads / groups)): its state S is [state_dim][head_dim], its output
 * C^T S through the kernels as DeltaNet's. */
static void mamba2_head(const scan_job *j, int h) {
    fwd_state *s = j->s;
    const fwd_scan *c = j->c;
    int HD = c->head_dim, DS = c->state_dim, g = h / (c->heads / c->groups), IN = c->heads * HD;
    size_t conv = (size_t)(s->m->hp.ssm_conv - 1) * (size_t)s->m->layers[c->layer].ssm.channels;
    float x_dt[HD];
    for (int t = 0; t < j->T; t++) {
        float *S = kv_state(&s->kv, c->layer, s->entries[t].seq) + conv + (size_t)h * HD * DS;
        const float *xr = cpu_row(s, c->x, t), *x = xr + (size_t)h * HD;
        const float *B = xr + IN + (size_t)g * DS, *C = xr + IN + (size_t)(c->groups + g) * DS;
        float dt = softplus(cpu_row(s, c->gate, t)[h] + c->dt_bias[h]), dA = expf(dt * c->a[h]);
        float *y = cpu_row(s, c->y, t) + (size_t)h * HD;
        for (int p = 0; p < HD; p++) x_dt[p] = x[p] * dt;
        for (int n = 0; n < DS; n++)
            for (int p = 0; p < HD; p++) S[(size_t)n * HD + p] = S[(size_t)n * HD + p] * dA + B[n] * x_dt[p];
        kernels_mix(GGML_TYPE_F32, S, (size_t)HD * 4, DS, HD, C, DS, 1, y, HD);
        for (int p = 0; p < HD; p++) y[p] += x[p] * c->d[h];
    }
}

static void scan_chunk(void *arg, int h, int ith) {
    const scan_job *j = arg;
    if (j->c->kind == FWD_DELTANET) deltanet_head(j, h, cpu_of(j->s)->thr[ith].attn_part);
    else mamba2_head(j, h);
}

void cpu_scan(fwd_state *s, const fwd_scan *c, int T) {
    scan_job j = {s, c, T};
    pool_run_chunks(cpu_of(s)->pool, &(pool_task){.chunk = scan_chunk, .arg = &j, .n_chunks = c->heads});
}
