/* The NEON kernel set (AArch64, 4 f32 lanes), compiled three times: kernels_neon.c (ASIMD only),
 * kernels_neon_dot.c (with SDOT) and kernels_neon_i8mm.c (SDOT and I8MM), which define NEON_SDOT,
 * NEON_I8MM and NEON_OPS (the table's name) first.
 *
 * Integer types: a tile is 4 rows (one per lane) by 1 (matvec) or TT (matmul) tokens. Each group
 * of each row is unpacked once per tile into 32 signed int8 weights (every type's integers w fit),
 * multiplied with each token's activations into int32 partial sums (int16 activations: widening
 * multiply-accumulates, or where the CPU has I8MM their two bytes by SDOT and USDOT; int8: SDOT,
 * or widening multiplies and pairwise adds without it; SMMLA (and USMMLA for int16's low bytes)
 * on 2 rows by 2 tokens at a time in a matmul tile where the CPU has I8MM), and
 * the 4 rows' sums are reduced exactly into one vector, lane r holding row r's S (S_a and S_b for
 * the types with scales per 16). The f32 scaling then runs on the 4 rows at once in the defined
 * order (kernels_impl.h), so every path gives the scalar set's bits. A 256-block's scales are
 * decoded once per tile (they serve its 8 groups) in vectors, a row at a time, then transposed to
 * a row per lane (tile_kscales); the one-group blocks' scales are read per row.
 *
 * Float types: 4 weights per step FMA'd with x into four accumulators per token (step u to
 * accumulator u % NACC), KT tokens per tile: per-token order is independent of the tile. kernels_mix
 * runs the defined fma chains with the columns along the lanes. The element-wise helpers use the
 * SIMD sets' exp (kernels_impl.h). */
#ifndef NC_KERNELS_NEON_H
#define NC_KERNELS_NEON_H

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "tensor/quant.h"

#define KT 4   /* tokens per float matmul tile */
#define NACC 4 /* accumulators per token */

static inline float fp16_at(const uint8_t *p) {
    __fp16 h;
    memcpy(&h, p, sizeof h);
    return (float)h; /* exact */
}

static inline uint16_t u16_at(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ---- F32, F16, BF16: 4 weights per step ---- */

/* Weights i .. i+3 of a row (byte loads: rows need no alignment). */
KERNELS_INLINE float32x4_t load_w(uint32_t type, const uint8_t *w, int i) {
    if (type == GGML_TYPE_F32) return vreinterpretq_f32_u8(vld1q_u8(w + 4 * (size_t)i));
    uint16x4_t h = vreinterpret_u16_u8(vld1_u8(w + 2 * (size_t)i));
    if (type == GGML_TYPE_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16)); /* bf16 */
}

/* Weight j of a row, as load_w's lane. */
KERNELS_INLINE float weight_at(uint32_t type, const uint8_t *w, int j) {
    if (type == GGML_TYPE_F32) {
        float f;
        memcpy(&f, w + 4 * (size_t)j, sizeof f);
        return f;
    }
    if (type == GGML_TYPE_F16) return fp16_at(w + 2 * (size_t)j);
    return quant_bf16_to_f32(u16_at(w + 2 * (size_t)j));
}

KERNELS_INLINE void float_step(float32x4_t acc[KT][NACC], int k, float32x4_t wv, const float *X, int cols, int i,
                               int nt) {
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) acc[t][k] = vfmaq_f32(acc[t][k], wv, vld1q_f32(X + (size_t)t * cols + i));
}

/* Step u of 4 weights goes to accumulator u % NACC, a last partial step (zero padded) too: so a
 * row padded with zero activations gives the same bits as the shorter row. */
KERNELS_INLINE void float_rows(uint32_t type, const uint8_t *w, int cols, const float *X, int nt, float *out) {
    float32x4_t acc[KT][NACC];
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (int k = 0; k < NACC; k++) acc[t][k] = vdupq_n_f32(0.0f);
    int nu = cols / 4, u = 0;
    for (; u + NACC <= nu; u += NACC) {
#pragma GCC unroll 4
        for (int k = 0; k < NACC; k++) float_step(acc, k, load_w(type, w, 4 * (u + k)), X, cols, 4 * (u + k), nt);
    }
#pragma GCC unroll 4
    for (int k = 0; k < NACC - 1; k++)
        if (u + k < nu) float_step(acc, k, load_w(type, w, 4 * (u + k)), X, cols, 4 * (u + k), nt);
    int rest = cols % 4, i = 4 * nu;
    if (rest) {
        size_t esize = type == GGML_TYPE_F32 ? 4 : 2;
        uint8_t wb[16] = {0};
        memcpy(wb, w + esize * (size_t)i, esize * (size_t)rest);
        float32x4_t wv = load_w(type, wb, 0);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            float xb[4] = {0};
            memcpy(xb, X + (size_t)t * cols + i, sizeof(float) * (size_t)rest);
#pragma GCC unroll 4
            for (int k = 0; k < NACC; k++) /* constant indices keep acc in registers */
                if (k == nu % NACC) acc[t][k] = vfmaq_f32(acc[t][k], wv, vld1q_f32(xb));
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) out[t] = vaddvq_f32(vaddq_f32(vaddq_f32(acc[t][0], acc[t][1]), vaddq_f32(acc[t][2], acc[t][3])));
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

/* The scalar set's quantisation (kernels_scalar.c) on 4 lanes: max |x| (maxnm skips a NaN, as the
 * scalar comparison does), x * (qmax / max) rounded to nearest even, the sums exact. */
static void quantize_act(kernels_act fmt, const float *x, int cols, int g0, int g1, void *dst) {
    float qmax = fmt == KERNELS_ACT_I16 ? ACT_QMAX_I16 : ACT_QMAX_I8;
    act_group *grp = (act_group *)((uint8_t *)dst + act_q_bytes(fmt, cols));
    for (int g = g0; g < g1; g++) {
        float32x4_t v[8], m = vdupq_n_f32(0.0f);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            v[i] = vld1q_f32(x + 32 * g + 4 * i);
            m = vmaxnmq_f32(m, vabsq_f32(v[i]));
        }
        float amax = vmaxnmvq_f32(m), id = amax != 0.0f ? qmax / amax : 0.0f;
        int32x4_t q[8], s16 = vdupq_n_s32(0), s = vdupq_n_s32(0);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            q[i] = vcvtnq_s32_f32(vmulq_n_f32(v[i], id));
            s = vaddq_s32(s, q[i]);
            if (i == 3) s16 = s;
        }
        grp[g].d = amax / qmax;
        grp[g].sum = vaddvq_s32(s);
        grp[g].sum16 = vaddvq_s32(s16);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            int16x8_t h = vcombine_s16(vqmovn_s32(q[2 * i]), vqmovn_s32(q[2 * i + 1]));
            if (fmt == KERNELS_ACT_I16) vst1q_s16((int16_t *)dst + 32 * g + 8 * i, h);
            else vst1_s8((int8_t *)dst + 32 * g + 8 * i, vqmovn_s16(h));
        }
    }
}

/* Lane l of a 16-byte vector: bit l % 8 (of byte l / 8 of a pair of bytes). */
static const uint8_t bit_lanes[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};

/* Bits 16h .. 16h+15 of the little-endian bits at p, as bytes of 0xFF (set) or 0. */
KERNELS_INLINE uint8x16_t bits16(const uint8_t *p, int h) {
    return vtstq_u8(vcombine_u8(vdup_n_u8(p[2 * h]), vdup_n_u8(p[2 * h + 1])), vld1q_u8(bit_lanes));
}

/* Bit j of each of 16 bytes as 0xFF (set) or 0. */
KERNELS_INLINE uint8x16_t bit_of_bytes(const uint8_t *q, int j) { return vtstq_u8(vld1q_u8(q), vdupq_n_u8((uint8_t)(1 << j))); }

KERNELS_INLINE uint8x16_t shr_u8(uint8x16_t v, int n) { return vshlq_u8(v, vdupq_n_s8((int8_t)-n)); }

/* 16 bytes of nibbles: u[0] the low nibbles (weights 0-15), u[1] the high ones. */
KERNELS_INLINE void nibbles(const uint8_t *qs, uint8x16_t u[2]) {
    uint8x16_t v = vld1q_u8(qs);
    u[0] = vandq_u8(v, vdupq_n_u8(0xF));
    u[1] = vshrq_n_u8(v, 4);
}

/* The same nibbles as indices into 16 int8 values. */
KERNELS_INLINE void lookup(const uint8_t *qs, const int8_t values[16], int8x16_t w[2]) {
    uint8x16_t u[2];
    nibbles(qs, u);
    int8x16_t table = vld1q_s8(values);
    w[0] = vqtbl1q_s8(table, u[0]);
    w[1] = vqtbl1q_s8(table, u[1]);
}

/* The 2-bit fields at bits 2p of 32 bytes (Q2_K, Q3_K). */
KERNELS_INLINE void crumbs(const uint8_t *q, int p, uint8x16_t u[2]) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) u[h] = vandq_u8(shr_u8(vld1q_u8(q + 16 * h), 2 * p), vdupq_n_u8(3));
}

/* The nibbles j % 2 of 32 bytes (Q4_K, Q5_K). */
KERNELS_INLINE void nibble_run(const uint8_t *q, int j, uint8x16_t u[2]) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        uint8x16_t v = vld1q_u8(q + 16 * h);
        u[h] = j % 2 ? vshrq_n_u8(v, 4) : vandq_u8(v, vdupq_n_u8(0xF));
    }
}

/* IQ3_S group j of block b: eight grid entries of four magnitudes (the bytes of each word, in
 * weight order), signs from 32 bits. */
KERNELS_INLINE void iq3_s_i8(const uint8_t *b, int j, int8x16_t w[2]) {
    const uint8_t *qs = b + offsetof(block_IQ3_S, qs) + 8 * j, qh = b[offsetof(block_IQ3_S, qh) + j];
    uint32_t mag[8];
    for (int i = 0; i < 8; i++) mag[i] = quant_iq3_s_grid[qs[i] | (qh >> i & 1) << 8];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        uint8x16_t neg = bits16(b + offsetof(block_IQ3_S, signs) + 4 * j, h);
        uint8x16_t v = vld1q_u8((const uint8_t *)mag + 16 * h);
        w[h] = vreinterpretq_s8_u8(vsubq_u8(veorq_u8(v, neg), neg)); /* -v where neg is all ones */
    }
}

/* Group g's 32 integers w of a row (the definition's), w[0] weights 0-15, w[1] 16-31. */
KERNELS_INLINE void weights_i8(uint32_t type, const uint8_t *row, int g, int8x16_t w[2]) {
    const uint8_t *b = int_block(type, row, g);
    const int j = g % int_block_groups(type);
    uint8x16_t u[2];
    int8x16_t off = vdupq_n_s8(0); /* subtracted from u */
    switch (type) {
    case GGML_TYPE_Q8_0:
        u[0] = vld1q_u8(b + 2);
        u[1] = vld1q_u8(b + 18);
        break;
    case GGML_TYPE_Q4_0:
        nibbles(b + 2, u);
        off = vdupq_n_s8(8);
        break;
    case GGML_TYPE_Q4_1: nibbles(b + 4, u); break;
    case GGML_TYPE_Q5_0: /* the fifth bit on top, minus 16 */
        nibbles(b + 6, u);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) u[h] = vorrq_u8(u[h], vandq_u8(bits16(b + 2, h), vdupq_n_u8(16)));
        off = vdupq_n_s8(16);
        break;
    case GGML_TYPE_Q5_1:
        nibbles(b + 8, u);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) u[h] = vorrq_u8(u[h], vandq_u8(bits16(b + 4, h), vdupq_n_u8(16)));
        break;
    case GGML_TYPE_IQ4_NL: lookup(b + 2, quant_iq4_values, w); return;
    case GGML_TYPE_MXFP4: lookup(b + 1, quant_e2m1x2_values, w); return;
    case GGML_TYPE_Q2_K: crumbs(b + offsetof(block_Q2_K, qs) + 32 * (j / 4), j % 4, u); break;
    case GGML_TYPE_Q3_K: /* 4 added where the high bit is set, then minus 4 */
        crumbs(b + offsetof(block_Q3_K, qs) + 32 * (j / 4), j % 4, u);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
            u[h] = vorrq_u8(u[h], vandq_u8(bit_of_bytes(b + offsetof(block_Q3_K, hmask) + 16 * h, j), vdupq_n_u8(4)));
        off = vdupq_n_s8(4);
        break;
    case GGML_TYPE_Q4_K: nibble_run(b + offsetof(block_Q4_K, qs) + 32 * (j / 2), j, u); break;
    case GGML_TYPE_Q5_K:
        nibble_run(b + offsetof(block_Q5_K, qs) + 32 * (j / 2), j, u);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
            u[h] = vorrq_u8(u[h], vandq_u8(bit_of_bytes(b + offsetof(block_Q5_K, qh) + 16 * h, j), vdupq_n_u8(16)));
        break;
    case GGML_TYPE_Q6_K:
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            uint8x16_t ql = vld1q_u8(b + Q6K_QL(j) + 16 * h), qh = vld1q_u8(b + Q6K_QH(j) + 16 * h);
            u[h] = vorrq_u8(vandq_u8(shr_u8(ql, 4 * Q6K_NIBBLE(j)), vdupq_n_u8(0xF)),
                            vshlq_n_u8(vandq_u8(shr_u8(qh, Q6K_QH_SHIFT(j)), vdupq_n_u8(3)), 4));
        }
        off = vdupq_n_s8(32);
        break;
    case GGML_TYPE_IQ4_XS: lookup(b + offsetof(block_IQ4_XS, qs) + 16 * j, quant_iq4_values, w); return;
    default: iq3_s_i8(b, j, w); return;
    }
    w[0] = vsubq_s8(vreinterpretq_s8_u8(u[0]), off);
    w[1] = vsubq_s8(vreinterpretq_s8_u8(u[1]), off);
}

/* The scale a (and offset b) of one block of a row, for the types with one group per block
 * (quant.c's group_<type>); the 256-blocks' come from tile_kscales. */
KERNELS_INLINE void block_scales(uint32_t type, const uint8_t *blk, float *a, float *b) {
    switch (type) {
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_1:
        *a = fp16_at(blk);
        *b = fp16_at(blk + 2);
        break;
    case GGML_TYPE_MXFP4: *a = qf_e8m0_half(blk[0]); break;
    default: *a = fp16_at(blk); /* Q4_0, Q5_0, Q8_0, IQ4_NL */
    }
}

/* A 256-block's sub-block integers for one row (blk), as quant.c's group_<type> defines them:
 * the scales' integers in *sc (lanes 0-15 per 16 weights, or lanes 0-7 per 32) and the minima's
 * in *mn (the types with minima), with the block's d and dmin; all within int8. Loads stay inside
 * the block. */
KERNELS_INLINE void kblock_ints(uint32_t type, const uint8_t *blk, int8x16_t *sc, int8x16_t *mn, float *d, float *dmin) {
    switch (type) {
    case GGML_TYPE_Q2_K: {
        uint8x16_t v = vld1q_u8(blk + offsetof(block_Q2_K, scales));
        *sc = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0xF)));
        *mn = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
        *d = fp16_at(blk + offsetof(block_Q2_K, d)), *dmin = fp16_at(blk + offsetof(block_Q2_K, dmin));
        break;
    }
    case GGML_TYPE_Q3_K: { /* scale i: nibble i / 8 of byte i % 8, bits 2 (i / 4) of byte 8 + i % 4 as its top two */
        const uint8x16_t v = vld1q_u8(blk + offsetof(block_Q3_K, scales) - 2); /* byte k of scales in lane k + 2 */
        static const uint8_t lo_idx[16] = {2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5, 6, 7, 8, 9};
        static const int8_t lo_sh[16] = {0, 0, 0, 0, 0, 0, 0, 0, -4, -4, -4, -4, -4, -4, -4, -4};
        static const uint8_t hi_idx[16] = {10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13};
        static const int8_t hi_sh[16] = {0, 0, 0, 0, -2, -2, -2, -2, -4, -4, -4, -4, -6, -6, -6, -6};
        uint8x16_t lo = vandq_u8(vshlq_u8(vqtbl1q_u8(v, vld1q_u8(lo_idx)), vld1q_s8(lo_sh)), vdupq_n_u8(0xF));
        uint8x16_t hi = vandq_u8(vshlq_u8(vqtbl1q_u8(v, vld1q_u8(hi_idx)), vld1q_s8(hi_sh)), vdupq_n_u8(3));
        *sc = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hi, 4))), vdupq_n_s8(32));
        *d = fp16_at(blk + offsetof(block_Q3_K, d));
        break;
    }
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: { /* quant_q4_K_scales: lanes 0-7 the scales, 8-15 the minima */
        const uint8x16_t v = vld1q_u8(blk); /* d, dmin, then byte k of scales in lane k + 4 */
        static const uint8_t lo_idx[16] = {4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15};
        static const int8_t lo_sh[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -4, -4, -4, -4};
        static const uint8_t lo_mask[16] = {63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15};
        static const uint8_t hi_idx[16] = {255, 255, 255, 255, 4, 5, 6, 7, 255, 255, 255, 255, 8, 9, 10, 11};
        uint8x16_t lo = vandq_u8(vshlq_u8(vqtbl1q_u8(v, vld1q_u8(lo_idx)), vld1q_s8(lo_sh)), vld1q_u8(lo_mask));
        uint8x16_t hi = vandq_u8(vshrq_n_u8(vqtbl1q_u8(v, vld1q_u8(hi_idx)), 2), vdupq_n_u8(0x30)); /* bits 6-7 to 4-5 */
        int8x16_t both = vreinterpretq_s8_u8(vorrq_u8(lo, hi));
        *sc = both;
        *mn = vextq_s8(both, both, 8);
        *d = fp16_at(blk), *dmin = fp16_at(blk + 2);
        break;
    }
    case GGML_TYPE_Q6_K:
        *sc = vld1q_s8((const int8_t *)blk + offsetof(block_Q6_K, scales));
        *d = fp16_at(blk + offsetof(block_Q6_K, d));
        break;
    case GGML_TYPE_IQ4_XS: { /* ls of sub-block j: nibble j % 2 of scales_l[j / 2], bits 2j of scales_h on top */
        const uint8x16_t v = vcombine_u8(vld1_u8(blk), vdup_n_u8(0)); /* d, scales_h, scales_l */
        static const uint8_t lo_idx[16] = {4, 4, 5, 5, 6, 6, 7, 7, 16, 16, 16, 16, 16, 16, 16, 16};
        static const int8_t lo_sh[16] = {0, -4, 0, -4, 0, -4, 0, -4};
        static const uint8_t hi_idx[16] = {2, 2, 2, 2, 3, 3, 3, 3, 16, 16, 16, 16, 16, 16, 16, 16};
        static const int8_t hi_sh[16] = {0, -2, -4, -6, 0, -2, -4, -6};
        uint8x16_t lo = vandq_u8(vshlq_u8(vqtbl1q_u8(v, vld1q_u8(lo_idx)), vld1q_s8(lo_sh)), vdupq_n_u8(0xF));
        uint8x16_t hi = vandq_u8(vshlq_u8(vqtbl1q_u8(v, vld1q_u8(hi_idx)), vld1q_s8(hi_sh)), vdupq_n_u8(3));
        *sc = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hi, 4))), vdupq_n_s8(32));
        *d = fp16_at(blk);
        break;
    }
    default: { /* IQ3_S: 1 + 2 s, s the nibble j % 2 of scales[j / 2] */
        const uint8x16_t v = vcombine_u8(vld1_u8(blk + offsetof(block_IQ3_S, scales) - 4), vdup_n_u8(0));
        static const uint8_t idx[16] = {4, 4, 5, 5, 6, 6, 7, 7, 16, 16, 16, 16, 16, 16, 16, 16};
        static const int8_t sh[16] = {0, -4, 0, -4, 0, -4, 0, -4};
        uint8x16_t n = vandq_u8(vshlq_u8(vqtbl1q_u8(v, vld1q_u8(idx)), vld1q_s8(sh)), vdupq_n_u8(0xF));
        *sc = vreinterpretq_s8_u8(vaddq_u8(vshlq_n_u8(n, 1), vdupq_n_u8(1)));
        *d = fp16_at(blk);
    }
    }
}

/* Lanes 4q .. 4q + 3 of 16 int8 values, as f32 (exact). */
KERNELS_INLINE float32x4_t quarter_f32(int8x16_t v, int q) {
    int16x8_t h = q < 2 ? vmovl_s8(vget_low_s8(v)) : vmovl_high_s8(v);
    return vcvtq_f32_s32(q % 2 ? vmovl_high_s16(h) : vmovl_s16(vget_low_s16(h)));
}

/* Columns of 4 rows' vectors (lane r of out[i]: element i of rows[r]). */
KERNELS_INLINE void transpose4(const float32x4_t rows[4], float32x4_t out[4]) {
    float64x2_t t0 = vreinterpretq_f64_f32(vtrn1q_f32(rows[0], rows[1])), t1 = vreinterpretq_f64_f32(vtrn2q_f32(rows[0], rows[1]));
    float64x2_t t2 = vreinterpretq_f64_f32(vtrn1q_f32(rows[2], rows[3])), t3 = vreinterpretq_f64_f32(vtrn2q_f32(rows[2], rows[3]));
    out[0] = vreinterpretq_f32_f64(vtrn1q_f64(t0, t2));
    out[1] = vreinterpretq_f32_f64(vtrn1q_f64(t1, t3));
    out[2] = vreinterpretq_f32_f64(vtrn2q_f64(t0, t2));
    out[3] = vreinterpretq_f32_f64(vtrn2q_f64(t1, t3));
}

/* A 256-block's scales for the 4 rows of a tile at once (blk[r]: row r's block), in vectors with
 * row r in lane r: A[i] (and B[i]) for sub-block i of 16, the types with one scale per 32 the even
 * i. The scalar set's products (d * sc, and -(dmin * m) as (-dmin) * m: the same bits), decoded in
 * vectors rather than a byte at a time. */
KERNELS_INLINE void tile_kscales(uint32_t type, const uint8_t *const blk[4], float32x4_t A[16], float32x4_t B[16]) {
    const int n = int_halves(type) ? 4 : 2, min = int_has_min(type); /* vectors of 4 scales per row */
    float32x4_t ra[4][4], rb[4][4]; /* [quarter][row] */
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        int8x16_t sc, mn = vdupq_n_s8(0);
        float d, dmin = 0;
        kblock_ints(type, blk[r], &sc, &mn, &d, &dmin);
#pragma GCC unroll 4
        for (int q = 0; q < n; q++) {
            ra[q][r] = vmulq_n_f32(quarter_f32(sc, q), d);
            if (min) rb[q][r] = vmulq_n_f32(quarter_f32(mn, q), -dmin);
        }
    }
    const int step = int_halves(type) ? 1 : 2;
#pragma GCC unroll 4
    for (int q = 0; q < n; q++) {
        float32x4_t c[4];
        transpose4(ra[q], c);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) A[step * (4 * q + k)] = c[k];
        if (!min) continue;
        transpose4(rb[q], c);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) B[step * (4 * q + k)] = c[k];
    }
}

#define NR 4 /* rows per integer tile: one per lane */
#define TT 4 /* tokens per integer matmul tile */

/* One row's group times one token's int16 activations (x[0..3]: elements 0-7 .. 24-31): p[0] the
 * partial sums over weights 0-15, p[1] over 16-31, four lanes each (at most 8 products of
 * 128 * 32767: exact in int32). */
KERNELS_INLINE void dot_i16(const int16x8_t w[4], const int16x8_t x[4], int32x4_t p[2]) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        int32x4_t s = vmull_s16(vget_low_s16(w[2 * h]), vget_low_s16(x[2 * h]));
        s = vmlal_high_s16(s, w[2 * h], x[2 * h]);
        s = vmlal_s16(s, vget_low_s16(w[2 * h + 1]), vget_low_s16(x[2 * h + 1]));
        p[h] = vmlal_high_s16(s, w[2 * h + 1], x[2 * h + 1]);
    }
}

/* The same with int8 activations (x[0]: elements 0-15, x[1]: 16-31). Without SDOT, pairs of
 * products (at most 2 * 128 * 127 < 2^15) are added in int16 lanes, then pairwise into int32. */
KERNELS_INLINE void dot_i8(const int8x16_t w[2], const int8x16_t x[2], int32x4_t p[2]) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
#if NEON_SDOT
        p[h] = vdotq_s32(vdupq_n_s32(0), w[h], x[h]);
#else
        p[h] = vpaddlq_s16(vmlal_high_s8(vmull_s8(vget_low_s8(w[h]), vget_low_s8(x[h])), w[h], x[h]));
#endif
    }
}

/* Four rows' partial sums to one vector: lane r is the total of P[r]. */
KERNELS_INLINE int32x4_t row_sums(const int32x4_t P[NR]) {
    return vpaddq_s32(vpaddq_s32(P[0], P[1]), vpaddq_s32(P[2], P[3]));
}

/* acc plus a group's scaled sums in the defined order: S (or S_a, S_b) times a * d, then the
 * offsets. S[h] lane r: row r's sum over half h (S[0] the whole group without halves). */
KERNELS_INLINE float32x4_t scale_group(uint32_t type, float32x4_t acc, const int32x4_t S[2], const float32x4_t a[2],
                                       const float32x4_t b[2], const act_group *x) {
    acc = vfmaq_f32(acc, vcvtq_f32_s32(S[0]), vmulq_n_f32(a[0], x->d));
    if (int_halves(type)) acc = vfmaq_f32(acc, vcvtq_f32_s32(S[1]), vmulq_n_f32(a[1], x->d));
    if (int_has_min(type) && int_halves(type)) {
        acc = vfmaq_n_f32(acc, b[0], x->d * (float)x->sum16);
        acc = vfmaq_n_f32(acc, b[1], x->d * (float)(x->sum - x->sum16));
    } else if (int_has_min(type)) {
        acc = vfmaq_n_f32(acc, b[0], x->d * (float)x->sum);
    }
    return acc;
}

#if NEON_I8MM
/* A group's int16 activations as two planes of bytes, x = 256 hi + lo with hi = x >> 8 (signed)
 * and lo = x & 0xFF (unsigned): w x sums to 256 (w . hi) + (w . lo), by SDOT and USDOT (or SMMLA
 * and USMMLA), 16 or 32 products an instruction where SMLAL takes 4; the sums stay exact (each
 * lane's dot products below 2^17 and 2^18 in magnitude). */
KERNELS_INLINE void split_i16(const int16_t *x, int8x16_t hi[2], uint8x16_t lo[2]) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        int8x16_t a = vreinterpretq_s8_s16(vld1q_s16(x + 16 * h)), b = vreinterpretq_s8_s16(vld1q_s16(x + 16 * h + 8));
        lo[h] = vreinterpretq_u8_s8(vuzp1q_s8(a, b)); /* little-endian: the low byte first */
        hi[h] = vuzp2q_s8(a, b);
    }
}
#endif

/* One token's sums S (scale_group) of a group: each row's products reduced across lanes. */
KERNELS_INLINE void token_sums(kernels_act fmt, int halves, const int8x16_t w[NR][2], const int16x8_t wh[NR][4],
                               const uint8_t *x, int g, int32x4_t S[2]) {
    int32x4_t P[2][NR];
#if NEON_I8MM
    int8x16_t hi[2];
    uint8x16_t lo[2];
    if (fmt == KERNELS_ACT_I16) split_i16((const int16_t *)x + 32 * g, hi, lo);
#endif
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        int32x4_t p[2];
#if NEON_I8MM
        if (fmt == KERNELS_ACT_I16) {
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                p[h] = vusdotq_s32(vshlq_n_s32(vdotq_s32(vdupq_n_s32(0), hi[h], w[r][h]), 8), lo[h], w[r][h]);
        } else
#endif
        if (fmt == KERNELS_ACT_I16) {
            const int16_t *xg = (const int16_t *)x + 32 * g;
            const int16x8_t xv[4] = {vld1q_s16(xg), vld1q_s16(xg + 8), vld1q_s16(xg + 16), vld1q_s16(xg + 24)};
            dot_i16(wh[r], xv, p);
        } else {
            const int8_t *xg = (const int8_t *)x + 32 * g;
            const int8x16_t xv[2] = {vld1q_s8(xg), vld1q_s8(xg + 16)};
            dot_i8(w[r], xv, p);
        }
        P[0][r] = halves ? p[0] : vaddq_s32(p[0], p[1]);
        P[1][r] = p[1];
    }
    S[0] = row_sums(P[0]);
    if (halves) S[1] = row_sums(P[1]);
}

#if NEON_I8MM
/* The sums S of TT tokens (x[t]: token t's int8 activations of the group) by SMMLA, which
 * multiplies 2 rows by 2 tokens over 8 weights into a 2x2 block (row i, token j in lane 2i + j):
 * blocks of row pairs (0, 1) and (2, 3) for a token pair, unzipped, give each token's rows in
 * lane order. */
KERNELS_INLINE void tile_sums_mmla(int halves, const int8x16_t w[NR][2], const int8_t *const x[TT], int32x4_t S[2][TT]) {
    int8x16_t xv[TT][2];
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++) {
        xv[t][0] = vld1q_s8(x[t]);
        xv[t][1] = vld1q_s8(x[t] + 16);
    }
    int32x4_t B[2][TT / 2]; /* [row pair][token pair] */
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        if (h == 0 || halves)
#pragma GCC unroll 2
            for (int rp = 0; rp < 2; rp++)
#pragma GCC unroll 2
                for (int tp = 0; tp < TT / 2; tp++) B[rp][tp] = vdupq_n_s32(0);
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) { /* weights 16h + 8c .. 16h + 8c + 7 */
            int8x16_t wp[2], xp[TT / 2];
#pragma GCC unroll 2
            for (int rp = 0; rp < 2; rp++)
                wp[rp] = c ? vcombine_s8(vget_high_s8(w[2 * rp][h]), vget_high_s8(w[2 * rp + 1][h]))
                           : vcombine_s8(vget_low_s8(w[2 * rp][h]), vget_low_s8(w[2 * rp + 1][h]));
#pragma GCC unroll 2
            for (int tp = 0; tp < TT / 2; tp++)
                xp[tp] = c ? vcombine_s8(vget_high_s8(xv[2 * tp][h]), vget_high_s8(xv[2 * tp + 1][h]))
                           : vcombine_s8(vget_low_s8(xv[2 * tp][h]), vget_low_s8(xv[2 * tp + 1][h]));
#pragma GCC unroll 2
            for (int rp = 0; rp < 2; rp++)
#pragma GCC unroll 2
                for (int tp = 0; tp < TT / 2; tp++) B[rp][tp] = vmmlaq_s32(B[rp][tp], wp[rp], xp[tp]);
        }
        if (h == 0 && !halves) continue;
        int s = halves ? h : 0;
#pragma GCC unroll 2
        for (int tp = 0; tp < TT / 2; tp++) {
            S[s][2 * tp] = vuzp1q_s32(B[0][tp], B[1][tp]);
            S[s][2 * tp + 1] = vuzp2q_s32(B[0][tp], B[1][tp]);
        }
    }
}

/* The same for int16 activations (x[t]: token t's group), by their bytes (split_i16): SMMLA on the
 * high bytes, shifted, then USMMLA on the low ones, whose unsigned operand puts the tokens first:
 * blocks of token pair and row pair (token i, row j in lane 2i + j), both products alike. */
KERNELS_INLINE void tile_sums_mmla_i16(int halves, const int8x16_t w[NR][2], const int16_t *const x[TT],
                                       int32x4_t S[2][TT]) {
    int8x16_t hi[TT][2];
    uint8x16_t lo[TT][2];
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++) split_i16(x[t], hi[t], lo[t]);
    int32x4_t B[TT / 2][2]; /* [token pair][row pair] */
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        int8x16_t wp[2][2], xh[2][TT / 2]; /* [c][pair] */
        uint8x16_t xl[2][TT / 2];
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) { /* weights 16h + 8c .. 16h + 8c + 7 */
#pragma GCC unroll 2
            for (int rp = 0; rp < 2; rp++)
                wp[c][rp] = c ? vcombine_s8(vget_high_s8(w[2 * rp][h]), vget_high_s8(w[2 * rp + 1][h]))
                              : vcombine_s8(vget_low_s8(w[2 * rp][h]), vget_low_s8(w[2 * rp + 1][h]));
#pragma GCC unroll 2
            for (int tp = 0; tp < TT / 2; tp++) {
                xh[c][tp] = c ? vcombine_s8(vget_high_s8(hi[2 * tp][h]), vget_high_s8(hi[2 * tp + 1][h]))
                              : vcombine_s8(vget_low_s8(hi[2 * tp][h]), vget_low_s8(hi[2 * tp + 1][h]));
                xl[c][tp] = c ? vcombine_u8(vget_high_u8(lo[2 * tp][h]), vget_high_u8(lo[2 * tp + 1][h]))
                              : vcombine_u8(vget_low_u8(lo[2 * tp][h]), vget_low_u8(lo[2 * tp + 1][h]));
            }
        }
        const int fresh = h == 0 || halves; /* without halves, half 1 adds to half 0's blocks */
#pragma GCC unroll 2
        for (int tp = 0; tp < TT / 2; tp++)
#pragma GCC unroll 2
            for (int rp = 0; rp < 2; rp++) {
                int32x4_t hs = vmmlaq_s32(vmmlaq_s32(vdupq_n_s32(0), xh[0][tp], wp[0][rp]), xh[1][tp], wp[1][rp]);
                int32x4_t b = vshlq_n_s32(hs, 8);
                if (!fresh) b = vaddq_s32(b, B[tp][rp]);
                B[tp][rp] = vusmmlaq_s32(vusmmlaq_s32(b, xl[0][tp], wp[0][rp]), xl[1][tp], wp[1][rp]);
            }
        if (h == 0 && !halves) continue;
        int s = halves ? h : 0;
#pragma GCC unroll 2
        for (int tp = 0; tp < TT / 2; tp++) {
            S[s][2 * tp] = vcombine_s32(vget_low_s32(B[tp][0]), vget_low_s32(B[tp][1]));
            S[s][2 * tp + 1] = vcombine_s32(vget_high_s32(B[tp][0]), vget_high_s32(B[tp][1]));
        }
    }
}
#endif

/* Rows row[0..3] times nt (1 or TT) tokens (X, xs bytes apart): acc[t] lane r is the defined
 * result of row r and token t. */
KERNELS_INLINE void int_tile(uint32_t type, kernels_act fmt, const uint8_t *const row[NR], int cols, const uint8_t *X,
                             size_t xs, int nt, float32x4_t acc[TT]) {
    const int G = cols / 32, gpb = int_block_groups(type), halves = int_halves(type);
    float sa[NR], sb[NR];        /* a block's scales, one group per block (block_scales) */
    float32x4_t KA[16], KB[16]; /* a 256-block's (tile_kscales) */
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) acc[t] = vdupq_n_f32(0.0f);
    for (int g = 0; g < G; g++) {
        const int j = g % gpb;
        int8x16_t w[NR][2];
        int16x8_t wh[NR][4];
        if (gpb > 1 && j == 0) {
            const uint8_t *blk[NR] = {int_block(type, row[0], g), int_block(type, row[1], g), int_block(type, row[2], g),
                                      int_block(type, row[3], g)};
            tile_kscales(type, blk, KA, KB);
        }
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            if (gpb == 1) block_scales(type, int_block(type, row[r], g), &sa[r], &sb[r]);
            weights_i8(type, row[r], g, w[r]);
            if (fmt == KERNELS_ACT_I16 && !NEON_I8MM) {
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    wh[r][2 * h] = vmovl_s8(vget_low_s8(w[r][h]));
                    wh[r][2 * h + 1] = vmovl_high_s8(w[r][h]);
                }
            }
        }
        float32x4_t a[2], b[2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            if (h == 1 && !halves) break;
            a[h] = gpb > 1 ? KA[2 * j + h] : vld1q_f32(sa);
            if (int_has_min(type)) b[h] = gpb > 1 ? KB[2 * j + h] : vld1q_f32(sb);
        }
#if NEON_I8MM
        if (nt == TT) {
            int32x4_t S[2][TT];
            if (fmt == KERNELS_ACT_I8) {
                const int8_t *xg[TT];
#pragma GCC unroll 4
                for (int t = 0; t < TT; t++) xg[t] = (const int8_t *)(X + xs * (size_t)t) + 32 * g;
                tile_sums_mmla(halves, w, xg, S);
            } else {
                const int16_t *xg[TT];
#pragma GCC unroll 4
                for (int t = 0; t < TT; t++) xg[t] = (const int16_t *)(X + xs * (size_t)t) + 32 * g;
                tile_sums_mmla_i16(halves, w, xg, S);
            }
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++) {
                const int32x4_t St[2] = {S[0][t], halves ? S[1][t] : S[0][t]};
                acc[t] = scale_group(type, acc[t], St, a, b, &act_groups(X + xs * (size_t)t, fmt, cols)[g]);
            }
            continue;
        }
#endif
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            const uint8_t *x = X + xs * (size_t)t;
            int32x4_t S[2];
            token_sums(fmt, halves, w, wh, x, g, S);
            acc[t] = scale_group(type, acc[t], S, a, b, &act_groups(x, fmt, cols)[g]);
        }
    }
}

/* Row pointers of a tile of n (<= NR) rows rb apart; missing rows repeat the last one (their
 * results are dropped). */
KERNELS_INLINE void tile_rows(const uint8_t *W, size_t rb, int n, const uint8_t *row[NR]) {
    for (int r = 0; r < NR; r++) row[r] = W + (size_t)(r < n ? r : n - 1) * rb;
}

KERNELS_INLINE void store_lanes(float *y, float32x4_t v, int n, int add) {
    float out[NR];
    vst1q_f32(out, v);
    for (int r = 0; r < n; r++) kernels_store(&y[r], out[r], add);
}

KERNELS_INLINE void matvec_tiles(uint32_t type, kernels_act fmt, const uint8_t *W, size_t row_bytes, int cols,
                                 const void *xq, float *y, int r0, int r1, int add) {
    for (int r = r0; r < r1; r += NR) {
        int n = r1 - r < NR ? r1 - r : NR;
        const uint8_t *row[NR];
        float32x4_t acc[TT];
        tile_rows(W + (size_t)r * row_bytes, row_bytes, n, row);
        int_tile(type, fmt, row, cols, xq, 0, 1, acc);
        store_lanes(y + (r - r0), acc[0], n, add);
    }
}

/* Tokens whose activations stay in cache while every tile of rows passes over them. */
#define MM_TB 64

KERNELS_INLINE void matmul_blocks(uint32_t type, kernels_act fmt, const uint8_t *W, size_t row_bytes, int cols,
                                  const uint8_t *Xq, int T, float *Y, int ldy, int r0, int r1, int add, void *scratch) {
    const size_t xs = act_row_bytes(fmt, cols);
    for (int tb = 0; tb < T; tb += MM_TB) {
        int te = T - tb < MM_TB ? T : tb + MM_TB;
        for (int r = r0; r < r1; r += NR) {
            int n = r1 - r < NR ? r1 - r : NR, t = tb;
            const uint8_t *row[NR];
            float32x4_t acc[TT];
            tile_rows(W + (size_t)r * row_bytes, row_bytes, n, row);
            for (; t + TT <= te; t += TT) {
                int_tile(type, fmt, row, cols, Xq + xs * (size_t)t, xs, TT, acc);
                for (int k = 0; k < TT; k++) store_lanes(Y + (size_t)(t + k) * ldy + (r - r0), acc[k], n, add);
            }
            for (; t < te; t++) {
                int_tile(type, fmt, row, cols, Xq + xs * (size_t)t, xs, 1, acc);
                store_lanes(Y + (size_t)t * ldy + (r - r0), acc[0], n, add);
            }
        }
    }
}

QUANT_INT_TYPES(KERNELS_DEFINE_INT)

/* ---- kernels_mix: the output columns along the lanes, each lane the defined fma chain ---- */

/* NV vectors of 4 columns from j0 on, one row x of X. */
KERNELS_INLINE void mix_cols(uint32_t type, const uint8_t *A, size_t rb, int K, const float *x, int NV, float *y, int j0) {
    float32x4_t acc[4];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) acc[v] = vdupq_n_f32(0.0f);
    for (int k = 0; k < K; k++) {
        const uint8_t *row = A + (size_t)k * rb;
        float32x4_t xb = vdupq_n_f32(x[k]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[v] = vfmaq_f32(acc[v], xb, load_w(type, row, j0 + 4 * v));
    }
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) vst1q_f32(y + j0 + 4 * v, acc[v]);
}

KERNELS_INLINE void mix_typed(uint32_t type, const uint8_t *A, size_t rb, int K, int N, const float *X, int ldx, int R,
                              float *Y, int ldy) {
    for (int r = 0; r < R; r++) {
        const float *x = X + (size_t)r * ldx;
        float *y = Y + (size_t)r * ldy;
        int j = 0;
        for (; j + 16 <= N; j += 16) mix_cols(type, A, rb, K, x, 4, y, j);
        for (; j + 4 <= N; j += 4) mix_cols(type, A, rb, K, x, 1, y, j);
        for (; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc = fmaf(x[k], weight_at(type, A + (size_t)k * rb, j), acc);
            y[j] = acc;
        }
    }
}

static void mix(uint32_t type, const void *A, size_t row_bytes, int K, int N, const float *X, int ldx, int R, float *Y,
                int ldy) {
    switch (type) {
    case GGML_TYPE_F16: mix_typed(GGML_TYPE_F16, A, row_bytes, K, N, X, ldx, R, Y, ldy); break;
    case GGML_TYPE_BF16: mix_typed(GGML_TYPE_BF16, A, row_bytes, K, N, X, ldx, R, Y, ldy); break;
    default: mix_typed(GGML_TYPE_F32, A, row_bytes, K, N, X, ldx, R, Y, ldy);
    }
}

/* ---- element-wise helpers ---- */

static void rms_norm(float *out, const float *x, const float *w, int n, float eps) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    int i = 0;
    for (; i + 4 <= n; i += 4) acc = vfmaq_f32(acc, vld1q_f32(x + i), vld1q_f32(x + i));
    double ss = vaddvq_f32(acc);
    for (; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    for (i = 0; i + 4 <= n; i += 4) vst1q_f32(out + i, vmulq_f32(vmulq_n_f32(vld1q_f32(x + i), scale), vld1q_f32(w + i)));
    for (; i < n; i++) out[i] = x[i] * scale * w[i];
}

/* exp_ps: see EXP_* in kernels_impl.h; 2^n put in the exponent. */
static inline float32x4_t exp_ps(float32x4_t x) {
    x = vminq_f32(x, vdupq_n_f32(EXP_HI));
    uint32x4_t small = vcltq_f32(x, vdupq_n_f32(EXP_LO));
    float32x4_t n = vrndnq_f32(vmulq_n_f32(x, EXP_LOG2E));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(EXP_LN2_HI));
    r = vfmsq_f32(r, n, vdupq_n_f32(EXP_LN2_LO));
    float32x4_t p = vdupq_n_f32(EXP_P0);
    p = vfmaq_f32(vdupq_n_f32(EXP_P1), p, r);
    p = vfmaq_f32(vdupq_n_f32(EXP_P2), p, r);
    p = vfmaq_f32(vdupq_n_f32(EXP_P3), p, r);
    p = vfmaq_f32(vdupq_n_f32(EXP_P4), p, r);
    p = vfmaq_f32(vdupq_n_f32(EXP_P5), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    /* 2^n: n in [-126, 128]; 128 (x near 88.7) is split as 2 * 2^127 */
    int32x4_t ni = vcvtnq_s32_f32(n);
    uint32x4_t big = vcgtq_s32(ni, vdupq_n_s32(127));
    ni = vsubq_s32(ni, vandq_s32(vreinterpretq_s32_u32(big), vdupq_n_s32(1)));
    p = vmulq_f32(p, vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(ni, vdupq_n_s32(127)), 23)));
    p = vbslq_f32(big, vaddq_f32(p, p), p);
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(p), small));
}

static inline float32x4_t x_sigmoid(float32x4_t x, float32x4_t arg) {
    return vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), exp_ps(arg)));
}

static float32x4_t glu4(kernels_glu act, float32x4_t x, float32x4_t v) {
    const float32x4_t lim = vdupq_n_f32(OAI_LIMIT);
    if (act == KERNELS_SILU) return vmulq_f32(x_sigmoid(x, vnegq_f32(x)), v);
    if (act == KERNELS_GELU_TANH) {
        float32x4_t y = vfmaq_f32(x, vmulq_n_f32(x, GELU_A), vmulq_f32(x, x));
        return vmulq_f32(x_sigmoid(x, vmulq_n_f32(y, GELU_2C)), v);
    }
    x = vminq_f32(x, lim);
    v = vmaxq_f32(vminq_f32(v, lim), vnegq_f32(lim));
    return vmulq_f32(x_sigmoid(x, vmulq_n_f32(x, -OAI_ALPHA)), vaddq_f32(v, vdupq_n_f32(1.0f)));
}

/* The last n % 4 elements run as a whole vector over a zero-padded copy. */
static void glu(kernels_glu act, float *out, const float *g, const float *u, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, glu4(act, vld1q_f32(g + i), vld1q_f32(u + i)));
    if (i < n) {
        float gb[4] = {0}, ub[4] = {0}, ob[4];
        memcpy(gb, g + i, sizeof(float) * (size_t)(n - i));
        memcpy(ub, u + i, sizeof(float) * (size_t)(n - i));
        vst1q_f32(ob, glu4(act, vld1q_f32(gb), vld1q_f32(ub)));
        memcpy(out + i, ob, sizeof(float) * (size_t)(n - i));
    }
}

/* cap * tanh(z), tanh |z| = (1 - e) / (1 + e) with e = exp(-2 |z|), z's sign put back. */
static float32x4_t softcap4(float32x4_t x, float k, float cap) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    float32x4_t z = vmulq_n_f32(x, k), e = exp_ps(vmulq_n_f32(vabsq_f32(z), -2.0f));
    float32x4_t t = vdivq_f32(vsubq_f32(one, e), vaddq_f32(one, e));
    uint32x4_t sign = vandq_u32(vreinterpretq_u32_f32(z), vdupq_n_u32(0x80000000u));
    return vmulq_n_f32(vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(t), sign)), cap);
}

static void softcap(float *x, int n, float scale, float cap) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(x + i, softcap4(vld1q_f32(x + i), scale / cap, cap));
    if (i < n) {
        float b[4] = {0};
        memcpy(b, x + i, sizeof(float) * (size_t)(n - i));
        vst1q_f32(b, softcap4(vld1q_f32(b), scale / cap, cap));
        memcpy(x + i, b, sizeof(float) * (size_t)(n - i));
    }
}

static float softmax_span(float *p, int n, float scale, float *max) {
    float32x4_t mv = vdupq_n_f32(*max);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t v = vmulq_n_f32(vld1q_f32(p + i), scale);
        vst1q_f32(p + i, v);
        mv = vmaxq_f32(mv, v);
    }
    float m = vmaxvq_f32(mv);
    for (; i < n; i++) {
        p[i] *= scale;
        m = p[i] > m ? p[i] : m;
    }
    float32x4_t mm = vdupq_n_f32(m), sum = vdupq_n_f32(0.0f);
    for (i = 0; i + 4 <= n; i += 4) {
        float32x4_t e = exp_ps(vsubq_f32(vld1q_f32(p + i), mm));
        vst1q_f32(p + i, e);
        sum = vaddq_f32(sum, e);
    }
    float total = vaddvq_f32(sum);
    if (i < n) {
        float b[4] = {0};
        memcpy(b, p + i, sizeof(float) * (size_t)(n - i));
        vst1q_f32(b, exp_ps(vsubq_f32(vld1q_f32(b), mm)));
        for (int k = 0; k < n - i; k++) {
            p[i + k] = b[k];
            total += b[k];
        }
    }
    *max = m;
    return total;
}

/* FCVTN rounds to nearest even, as quant_f32_to_fp16. */
static void f32_to_f16(uint16_t *dst, const float *src, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    for (; i < n; i++) dst[i] = quant_f32_to_fp16(src[i]);
}

/* 16 codes (signed bytes) times the scale: d * q is exact in f32, as in quant_dequantize_row. */
KERNELS_INLINE void scaled16(int8x16_t q, float d, float *dst) {
    int16x8_t h[2] = {vmovl_s8(vget_low_s8(q)), vmovl_high_s8(q)};
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
        vst1q_f32(dst + 8 * k, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(h[k]))), d));
        vst1q_f32(dst + 8 * k + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(h[k])), d));
    }
}

/* Q8_0 and Q4_0 blocks (weights_i8 gives their codes); other types through quant_dequantize_row. */
static void dequantize(uint32_t type, const uint8_t *src, float *dst, int n) {
    if (type != GGML_TYPE_Q8_0 && type != GGML_TYPE_Q4_0) {
        quant_dequantize_row(type, src, dst, n);
        return;
    }
    for (int g = 0; g < n / 32; g++) {
        int8x16_t w[2];
        weights_i8(type, src, g, w);
        float d = fp16_at(int_block(type, src, g));
        scaled16(w[0], d, dst + 32 * g);
        scaled16(w[1], d, dst + 32 * g + 16);
    }
}

/* Four independent chains of 16-byte loads. */
static uint64_t read_bytes(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64x2_t a0 = vdupq_n_u64(0), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 64) {
        a0 = veorq_u64(a0, vreinterpretq_u64_u8(vld1q_u8(b + i)));
        a1 = veorq_u64(a1, vreinterpretq_u64_u8(vld1q_u8(b + i + 16)));
        a2 = veorq_u64(a2, vreinterpretq_u64_u8(vld1q_u8(b + i + 32)));
        a3 = veorq_u64(a3, vreinterpretq_u64_u8(vld1q_u8(b + i + 48)));
    }
    uint64x2_t x = veorq_u64(veorq_u64(a0, a1), veorq_u64(a2, a3));
    return vgetq_lane_u64(x, 0) ^ vgetq_lane_u64(x, 1);
}

const kernels_ops NEON_OPS = {
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

#endif
