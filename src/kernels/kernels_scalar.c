/* Portable kernels: the fallback on CPUs without AVX2 and on other architectures, and the plain
 * statement of the integer path's arithmetic, which the SIMD sets reproduce bit for bit.
 * Float types decode a run of weights once for all tokens of the tile. Per-token order is
 * independent of the tile size (see kernels_impl.h). */
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "tensor/quant.h"

#define KT 4 /* tokens per matmul tile */

static uint16_t load_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* Sum of w[i] * x[i], in index order. */
static float dot_seq(const float *w, const float *x, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += w[i] * x[i];
    return s;
}

static float load_w(uint32_t type, const uint8_t *w, int i) {
    switch (type) {
    case GGML_TYPE_F16: return quant_fp16_to_f32(load_u16(w + 2 * (size_t)i));
    case GGML_TYPE_BF16: return quant_bf16_to_f32(load_u16(w + 2 * (size_t)i));
    default: {
        float f;
        memcpy(&f, w + 4 * (size_t)i, sizeof f);
        return f;
    }
    }
}

/* F32, F16, BF16: partial sums over runs of 32 elements, added in order (a row padded with zero
 * activations gives the same bits as the shorter row). */
KERNELS_INLINE void float_rows(uint32_t type, const uint8_t *w, int cols, const float *X, int nt,
                               float *out) {
    float acc[KT] = {0};
    for (int i0 = 0; i0 < cols; i0 += 32) {
        int n = cols - i0 < 32 ? cols - i0 : 32;
        float wf[32];
        for (int i = 0; i < n; i++) wf[i] = load_w(type, w, i0 + i);
        for (int t = 0; t < nt; t++) acc[t] += dot_seq(wf, X + (size_t)t * cols + i0, n);
    }
    for (int t = 0; t < nt; t++) out[t] = acc[t];
}

KERNELS_INLINE void f32_rows(const uint8_t *w, int cols, const float *X, int nt, float *out) {
    float_rows(GGML_TYPE_F32, w, cols, X, nt, out);
}
KERNELS_INLINE void f16_rows(const uint8_t *w, int cols, const float *X, int nt, float *out) {
    float_rows(GGML_TYPE_F16, w, cols, X, nt, out);
}
KERNELS_INLINE void bf16_rows(const uint8_t *w, int cols, const float *X, int nt, float *out) {
    float_rows(GGML_TYPE_BF16, w, cols, X, nt, out);
}

KERNELS_DEFINE_DRIVERS(f32, KT)
KERNELS_DEFINE_DRIVERS(f16, KT)
KERNELS_DEFINE_DRIVERS(bf16, KT)
KERNELS_DEFINE_DISPATCH()

/* ---- integer activations ---- */

static void quantize_act(kernels_act fmt, const float *x, int cols, int g0, int g1, void *dst) {
    float qmax = fmt == KERNELS_ACT_I16 ? ACT_QMAX_I16 : ACT_QMAX_I8;
    act_group *grp = (act_group *)((uint8_t *)dst + act_q_bytes(fmt, cols));
    for (int g = g0; g < g1; g++) {
        float amax = 0.0f;
        const float *xg = x + 32 * g;
        for (int k = 0; k < 32; k++) amax = fabsf(xg[k]) > amax ? fabsf(xg[k]) : amax;
        float id = amax != 0.0f ? qmax / amax : 0.0f;
        int32_t sum = 0;
        for (int k = 0; k < 32; k++) {
            int32_t q = (int32_t)nearbyintf(xg[k] * id); /* round half to even, as cvtps2dq */
            sum += q;
            if (k == 15) grp[g].sum16 = sum;
            if (fmt == KERNELS_ACT_I16) ((int16_t *)dst)[32 * g + k] = (int16_t)q;
            else ((int8_t *)dst)[32 * g + k] = (int8_t)q;
        }
        grp[g].d = amax / qmax;
        grp[g].sum = sum;
    }
}

/* The defining computation (kernels_impl.h) for one row and nt <= KQ tokens (xq: their
 * activations, xs bytes apart), from the type's integer form: each group is unpacked once for all
 * the tokens, and each token's result is the same whatever nt is. */
#define KQ 8
static void int_rows(uint32_t type, kernels_act fmt, const uint8_t *w, int cols, const uint8_t *xq, size_t xs, int nt,
                     float *out) {
    const quant_type *qt = quant_type_of(type);
    const int gpb = (int)qt->block_elems / 32;
    float acc[KQ] = {0};
    for (int g = 0; g < cols / 32; g++) {
        quant_group q;
        qt->group(w + (size_t)(g / gpb) * qt->block_bytes, g % gpb, &q);
        for (int t = 0; t < nt; t++) {
            const uint8_t *x = xq + xs * (size_t)t;
            const act_group *a = &act_groups(x, fmt, cols)[g];
            int32_t s[2] = {0, 0};
            if (fmt == KERNELS_ACT_I16)
                for (int k = 0; k < 32; k++) s[k / 16] += q.w[k] * ((const int16_t *)x)[32 * g + k];
            else
                for (int k = 0; k < 32; k++) s[k / 16] += q.w[k] * ((const int8_t *)x)[32 * g + k];
            if (qt->halves) {
                acc[t] = fmaf((float)s[0], q.a[0] * a->d, acc[t]);
                acc[t] = fmaf((float)s[1], q.a[1] * a->d, acc[t]);
            } else {
                acc[t] = fmaf((float)(s[0] + s[1]), q.a[0] * a->d, acc[t]);
            }
            if (qt->has_min && qt->halves) {
                acc[t] = fmaf(q.b[0], a->d * (float)a->sum16, acc[t]);
                acc[t] = fmaf(q.b[1], a->d * (float)(a->sum - a->sum16), acc[t]);
            } else if (qt->has_min) {
                acc[t] = fmaf(q.b[0], a->d * (float)a->sum, acc[t]);
            }
        }
    }
    for (int t = 0; t < nt; t++) out[t] = acc[t];
}

KERNELS_INLINE void matvec_tiles(uint32_t type, kernels_act fmt, const uint8_t *W, size_t row_bytes, int cols,
                                 const void *xq, float *y, int r0, int r1, int add) {
    for (int r = r0; r < r1; r++) {
        float out;
        int_rows(type, fmt, W + (size_t)r * row_bytes, cols, xq, 0, 1, &out);
        kernels_store(&y[r - r0], out, add);
    }
}

KERNELS_INLINE void matmul_blocks(uint32_t type, kernels_act fmt, const uint8_t *W, size_t row_bytes, int cols,
                                  const uint8_t *Xq, int T, float *Y, int ldy, int r0, int r1, int add, void *scratch) {
    const size_t xs = act_row_bytes(fmt, cols);
    for (int r = r0; r < r1; r++)
        for (int t0 = 0; t0 < T; t0 += KQ) {
            float out[KQ];
            int nt = T - t0 < KQ ? T - t0 : KQ;
            int_rows(type, fmt, W + (size_t)r * row_bytes, cols, Xq + xs * (size_t)t0, xs, nt, out);
            for (int t = 0; t < nt; t++) kernels_store(&Y[(size_t)(t0 + t) * ldy + (r - r0)], out[t], add);
        }
}

QUANT_INT_TYPES(KERNELS_DEFINE_INT)

/* ---- kernels_mix: the defined fma chains, one output at a time ---- */

static void mix(uint32_t type, const void *A, size_t row_bytes, int K, int N, const float *X, int ldx, int R, float *Y,
                int ldy) {
    for (int r = 0; r < R; r++)
        for (int j = 0; j < N; j++) {
            float acc = 0;
            for (int k = 0; k < K; k++)
                acc = fmaf(X[(size_t)r * ldx + k], load_w(type, (const uint8_t *)A + (size_t)k * row_bytes, j), acc);
            Y[(size_t)r * ldy + j] = acc;
        }
}

/* ---- element-wise helpers ---- */

static void rms_norm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

static void glu(kernels_glu act, float *out, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) {
        float x = g[i], v = u[i];
        switch (act) {
        case KERNELS_SILU: out[i] = x / (1.0f + expf(-x)) * v; break;
        case KERNELS_GELU_TANH: out[i] = x / (1.0f + expf(GELU_2C * (x + GELU_A * x * x * x))) * v; break;
        case KERNELS_SILU_OAI:
            x = x < OAI_LIMIT ? x : OAI_LIMIT;
            v = v < -OAI_LIMIT ? -OAI_LIMIT : v > OAI_LIMIT ? OAI_LIMIT : v;
            out[i] = x / (1.0f + expf(-OAI_ALPHA * x)) * (v + 1.0f);
            break;
        }
    }
}

static void softcap(float *x, int n, float scale, float cap) {
    for (int i = 0; i < n; i++) {
        float z = x[i] * (scale / cap), e = expf(-2.0f * fabsf(z)), t = (1.0f - e) / (1.0f + e);
        x[i] = cap * (z < 0 ? -t : t);
    }
}

static float softmax_span(float *p, int n, float scale, float *max) {
    float m = *max, sum = 0;
    for (int i = 0; i < n; i++) {
        p[i] *= scale;
        m = p[i] > m ? p[i] : m;
    }
    for (int i = 0; i < n; i++) {
        p[i] = expf(p[i] - m);
        sum += p[i];
    }
    *max = m;
    return sum;
}

static void f32_to_f16(uint16_t *dst, const float *src, int n) {
    for (int i = 0; i < n; i++) dst[i] = quant_f32_to_fp16(src[i]);
}

static void dequantize(uint32_t type, const uint8_t *src, float *dst, int n) { quant_dequantize_row(type, src, dst, n); }

/* Eight independent 64-bit chains keep enough loads in flight without SIMD. */
static uint64_t read_bytes(const void *p, size_t n) {
    const uint64_t *q = p;
    uint64_t a[8] = {0};
    for (size_t i = 0; i < n / 8; i += 8)
        for (int k = 0; k < 8; k++) a[k] ^= q[i + k];
    return a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
}

const kernels_ops kernels_scalar_ops = {
    .matvec = matvec,
    .matmul = matmul,
    .quantize_act = quantize_act,
    .q = {QUANT_INT_TYPES(KERNELS_INT_ENTRY)},
    .mix = mix,
    .rms_norm = rms_norm,
    .glu = glu,
    .softcap = softcap,
    .softmax_span = softmax_span,
    .f32_to_f16 = f32_to_f16,
    .dequantize = dequantize,
    .read = read_bytes,
};
