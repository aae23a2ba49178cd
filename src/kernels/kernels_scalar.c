/* Portable kernels: the fallback on CPUs without AVX2 and on other architectures, and the plain
 * statement of the integer path's arithmetic, which the SIMD sets reproduce bit for bit.
 * Float types decode one block of weights once for all tokens of the tile; Q4_K and Q6_K (still on
 * f32 activations) decode each sub-block to its exact f32 values. Per-token order is independent
 * of the tile size (see kernels_impl.h). */
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

/* F32, F16, BF16: partial sums over runs of 32 elements, added in order. */
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

/* Q4_K: per sub-block of 32, the exact weights d*sc*q - dmin*m, then acc += sum(w * x). */
KERNELS_INLINE void q4_K_rows(const uint8_t *w, int cols, const float *X, int nt, float *out) {
    float acc[KT] = {0};
    for (int b = 0; b < cols / QK_K; b++, w += sizeof(block_q4_K)) {
        float d = load_fp16(w), dmin = load_fp16(w + 2);
        const uint8_t *qs = w + 4 + K_SCALE_SIZE;
        uint8_t sc[8], m[8];
        quant_q4_K_scales(w + 4, sc, m);
        for (int j = 0; j < 8; j++) {
            float wf[32], dsc = d * (float)sc[j], dm = dmin * (float)m[j];
            for (int l = 0; l < 32; l++) wf[l] = dsc * (float)((qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) - dm;
            for (int t = 0; t < nt; t++) acc[t] += dot_seq(wf, X + (size_t)t * cols + QK_K * b + 32 * j, 32);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = acc[t];
}

/* Q6_K: per sub-block of 16, the exact weights d*sc*q, then acc += sum(w * x). */
KERNELS_INLINE void q6_K_rows(const uint8_t *w, int cols, const float *X, int nt, float *out) {
    float acc[KT] = {0};
    for (int b = 0; b < cols / QK_K; b++, w += sizeof(block_q6_K)) {
        const int8_t *scales = (const int8_t *)(w + offsetof(block_q6_K, scales));
        float d = load_fp16(w + offsetof(block_q6_K, d));
        for (int h = 0; h < 2; h++) {
            int8_t q[128];
            quant_q6_K_unpack(w + 64 * h, w + offsetof(block_q6_K, qh) + 32 * h, q);
            for (int j = 0; j < 8; j++) {
                float wf[16], dsc = d * (float)scales[8 * h + j];
                for (int l = 0; l < 16; l++) wf[l] = dsc * (float)q[16 * j + l];
                for (int t = 0; t < nt; t++)
                    acc[t] += dot_seq(wf, X + (size_t)t * cols + QK_K * b + 128 * h + 16 * j, 16);
            }
        }
    }
    for (int t = 0; t < nt; t++) out[t] = acc[t];
}

KERNELS_DEFINE_DRIVERS(f32, KT)
KERNELS_DEFINE_DRIVERS(f16, KT)
KERNELS_DEFINE_DRIVERS(bf16, KT)
KERNELS_DEFINE_DRIVERS(q4_K, KT)
KERNELS_DEFINE_DRIVERS(q6_K, KT)
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
            if (fmt == KERNELS_ACT_I16) ((int16_t *)dst)[32 * g + k] = (int16_t)q;
            else ((int8_t *)dst)[32 * g + k] = (int8_t)q;
        }
        grp[g].d = amax / qmax;
        grp[g].sum = sum;
    }
}

/* A block's 32 integer weights. */
static void int_weights(uint32_t type, const uint8_t *blk, int32_t w[32]) {
    if (type == GGML_TYPE_Q8_0) {
        for (int k = 0; k < 32; k++) w[k] = (int8_t)blk[2 + k];
    } else {
        for (int k = 0; k < 16; k++) {
            w[k] = (blk[2 + k] & 0xF) - 8;
            w[k + 16] = (blk[2 + k] >> 4) - 8;
        }
    }
}

/* The defining computation (kernels_impl.h) for one row and one token. */
static float int_row(uint32_t type, const uint8_t *w, int cols, kernels_act fmt, const void *xq) {
    const act_group *grp = act_groups(xq, fmt, cols);
    size_t bytes = int_block_bytes(type);
    float acc = 0.0f;
    for (int g = 0; g < cols / 32; g++, w += bytes) {
        int32_t wi[32], s = 0;
        int_weights(type, w, wi);
        for (int k = 0; k < 32; k++)
            s += wi[k] * (fmt == KERNELS_ACT_I16 ? ((const int16_t *)xq)[32 * g + k] : ((const int8_t *)xq)[32 * g + k]);
        acc = fmaf((float)s, load_fp16(w) * grp[g].d, acc);
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

/* Four interleaved partial sums: shorter dependency chains and smaller rounding error. */
static float dot_f32(const float *a, const float *b, int n) {
    float s[4] = {0};
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) s[k] += a[i + k] * b[i + k];
    for (; i < n; i++) s[0] += a[i] * b[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

static void axpy_f32(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

const kernels_ops kernels_scalar_ops = {matvec, matmul, quantize_act, matvec_q, matmul_q, dot_f32, axpy_f32};
