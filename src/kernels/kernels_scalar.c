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

static float load_fp16(const uint8_t *p) { return quant_fp16_to_f32(load_u16(p)); }

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

/* The 32 integer weights of group g of a row. */
static void int_weights(uint32_t type, const uint8_t *row, int g, int32_t w[32]) {
    if (type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0) {
        const uint8_t *blk = row + (size_t)g * int_block_bytes(type);
        for (int k = 0; k < 32; k++)
            w[k] = type == GGML_TYPE_Q8_0 ? (int8_t)blk[2 + k] : ((blk[2 + k % 16] >> (k < 16 ? 0 : 4)) & 0xF) - 8;
    } else if (type == GGML_TYPE_Q4_K) { /* sub-block j: nibble j % 2 of bytes 32 * (j / 2) .. +31 */
        const uint8_t *qs = row + (size_t)(g / 8) * sizeof(block_q4_K) + 4 + K_SCALE_SIZE;
        int j = g % 8;
        for (int k = 0; k < 32; k++) w[k] = (qs[32 * (j / 2) + k] >> (4 * (j % 2))) & 0xF;
    } else {
        const uint8_t *blk = row + (size_t)(g / 8) * sizeof(block_q6_K);
        int j = g % 8;
        for (int k = 0; k < 32; k++)
            w[k] = (((blk[Q6K_QL(j) + k] >> (4 * Q6K_NIBBLE(j))) & 0xF) |
                    (((blk[Q6K_QH(j) + k] >> Q6K_QH_SHIFT(j)) & 3) << 4)) - 32;
    }
}

/* The defining computation (kernels_impl.h) for one row and one token. */
static float int_row(uint32_t type, const uint8_t *w, int cols, kernels_act fmt, const void *xq) {
    const act_group *grp = act_groups(xq, fmt, cols);
    float acc = 0.0f;
    uint8_t sc[8], m[8]; /* Q4_K: the current block's sub-block scales and mins, unpacked once */
    for (int g = 0; g < cols / 32; g++) {
        int32_t wi[32], s[2] = {0, 0};
        int_weights(type, w, g, wi);
        for (int k = 0; k < 32; k++)
            s[k / 16] += wi[k] * (fmt == KERNELS_ACT_I16 ? ((const int16_t *)xq)[32 * g + k] : ((const int8_t *)xq)[32 * g + k]);
        float d = grp[g].d;
        if (type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0) {
            acc = fmaf((float)(s[0] + s[1]), load_fp16(w + (size_t)g * int_block_bytes(type)) * d, acc);
        } else if (type == GGML_TYPE_Q4_K) {
            const uint8_t *blk = w + (size_t)(g / 8) * sizeof(block_q4_K);
            if (g % 8 == 0) quant_q4_K_scales(blk + 4, sc, m);
            float dsc = load_fp16(blk) * (float)sc[g % 8], dm = load_fp16(blk + 2) * (float)m[g % 8];
            acc = fmaf((float)(s[0] + s[1]), dsc * d, acc);
            acc = fmaf(-dm, d * (float)grp[g].sum, acc);
        } else {
            const uint8_t *blk = w + (size_t)(g / 8) * sizeof(block_q6_K);
            const int8_t *sc6 = (const int8_t *)(blk + offsetof(block_q6_K, scales)) + 2 * (g % 8);
            float dk = load_fp16(blk + offsetof(block_q6_K, d));
            acc = fmaf((float)s[0], dk * (float)sc6[0] * d, acc);
            acc = fmaf((float)s[1], dk * (float)sc6[1] * d, acc);
        }
    }
    return acc;
}

static void matvec_q(uint32_t type, const void *W, size_t row_bytes, int cols, kernels_act fmt, const void *xq,
                     float *y, int r0, int r1, int add) {
    for (int r = r0; r < r1; r++)
        kernels_store(&y[r - r0], int_row(type, (const uint8_t *)W + (size_t)r * row_bytes, cols, fmt, xq), add);
}

static void matmul_q(uint32_t type, const void *W, size_t row_bytes, int cols, kernels_act fmt, const void *Xq,
                     int T, float *Y, int ldy, int r0, int r1, int add, void *scratch) {
    for (int t = 0; t < T; t++)
        matvec_q(type, W, row_bytes, cols, fmt, (const uint8_t *)Xq + (size_t)t * act_row_bytes(fmt, cols),
                 Y + (size_t)t * ldy, r0, r1, add);
}

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

static void swiglu(float *out, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
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

/* Eight independent 64-bit chains keep enough loads in flight without SIMD. */
static uint64_t read_bytes(const void *p, size_t n) {
    const uint64_t *q = p;
    uint64_t a[8] = {0};
    for (size_t i = 0; i < n / 8; i += 8)
        for (int k = 0; k < 8; k++) a[k] ^= q[i + k];
    return a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
}

const kernels_ops kernels_scalar_ops = {matvec,   matmul,  quantize_act, matvec_q,    matmul_q, mix,
                                        rms_norm, swiglu,  softmax_span, f32_to_f16, read_bytes};
