/* AVX-512 kernels (16 f32 lanes). Weights are widened to f32 in registers, never dequantised a
 * matrix at a time. Q8_0 and Q4_0: a block's integers are multiplied with x and summed per lane,
 * then scaled by the block's d into an accumulator. Q4_K and Q6_K: each sub-block's weights are
 * first made exact f32 values (d*sc*q - dmin*m is one fmsub of exactly representable parts: the
 * dequantised value bit for bit), then FMA'd with x; this is fewer operations per weight than
 * applying scale and min to sums, and a matmul tile then reuses finished weights. Each token has
 * NACC accumulators to keep dependency chains short (FMA latency is four cycles): block b goes to
 * accumulator b % NACC, the 16-weight vector v of a K-quant block to v % NACC; a row's result is
 * the fixed-order sum of its accumulators.
 * Per-token order is independent of the tile (see kernels_impl.h). */
#if defined(__x86_64__) && defined(__AVX512F__)

#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "tensor/quant.h"

#define KT 4   /* tokens per matmul tile */
#define NACC 4 /* accumulators per token */

static inline __m512 bcast_fp16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
}

static inline float hsum(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

KERNELS_INLINE void zero_acc(__m512 acc[KT][NACC], int nt) {
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 8
        for (int k = 0; k < NACC; k++) acc[t][k] = _mm512_setzero_ps();
}

KERNELS_INLINE void reduce_acc(__m512 acc[KT][NACC], int nt, float *out) {
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        out[t] = hsum(_mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]), _mm512_add_ps(acc[t][2], acc[t][3])));
}

/* ---- F32, F16, BF16: 16 weights per step ---- */

KERNELS_INLINE __m512 widen_w(uint32_t type, __m256i h) {
    if (type == GGML_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* bf16 */
}

KERNELS_INLINE __m512 load_w(uint32_t type, const uint8_t *w, int i) {
    if (type == GGML_TYPE_F32) return _mm512_loadu_ps((const float *)w + i);
    return widen_w(type, _mm256_loadu_si256((const __m256i *)(w + 2 * (size_t)i)));
}

KERNELS_INLINE __m512 load_w_part(uint32_t type, const uint8_t *w, int i, __mmask16 m) {
    if (type == GGML_TYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)w + i);
    return widen_w(type, _mm256_maskz_loadu_epi16(m, w + 2 * (size_t)i));
}

KERNELS_INLINE void float_step(__m512 acc[KT][NACC], int k, __m512 wv, const float *X, int cols,
                               int i, int nt) {
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        acc[t][k] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(X + (size_t)t * cols + i), acc[t][k]);
}

/* Step u of 16 weights goes to accumulator u % NACC; a last partial step to accumulator 0. */
KERNELS_INLINE void float_rows(uint32_t type, const uint8_t *w, int cols, const float *X, int nt,
                               float *out) {
    __m512 acc[KT][NACC];
    zero_acc(acc, nt);
    int nu = cols / 16, u = 0;
    for (; u + NACC <= nu; u += NACC) {
#pragma GCC unroll 4
        for (int k = 0; k < NACC; k++) float_step(acc, k, load_w(type, w, 16 * (u + k)), X, cols, 16 * (u + k), nt);
    }
#pragma GCC unroll 4
    for (int k = 0; k < NACC - 1; k++)
        if (u + k < nu) float_step(acc, k, load_w(type, w, 16 * (u + k)), X, cols, 16 * (u + k), nt);
    if (cols % 16) {
        int i = 16 * nu;
        __mmask16 m = (__mmask16)((1u << (cols % 16)) - 1);
        __m512 wv = load_w_part(type, w, i, m);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++)
            acc[t][0] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, X + (size_t)t * cols + i), acc[t][0]);
    }
    reduce_acc(acc, nt, out);
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

/* ---- Q8_0 and Q4_0: blocks of 32 ---- */

/* Lane k of the result is table[codes[k] & 15]: 4-bit codes to floats in one permute. */
static inline __m512 nibble_lookup(__m512i codes, __m512 table) { return _mm512_permutexvar_ps(codes, table); }

/* A block's weights 0-15 and 16-31 as integers, and its scale. Converting the scale on its own
 * (broadcast, then vcvtph2ps) measured faster than converting 16 blocks' scales together. */
typedef struct { __m512 lo, hi, d; } dec32;

KERNELS_INLINE dec32 decode32(uint32_t type, const uint8_t *blk) {
    dec32 r;
    r.d = bcast_fp16(blk);
    if (type == GGML_TYPE_Q8_0) {
        r.lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2))));
        r.hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 18))));
    } else { /* Q4_0: low nibbles are weights 0-15, high nibbles 16-31, both offset by 8 */
        const __m512 minus8 = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
        __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)));
        r.lo = nibble_lookup(v, minus8);
        r.hi = nibble_lookup(_mm512_srli_epi32(v, 4), minus8);
    }
    return r;
}

KERNELS_INLINE void blk32_step(__m512 acc[KT][NACC], int k, const uint8_t *blk, uint32_t type,
                               const float *X, int cols, int i, int nt) {
    dec32 q = decode32(type, blk);
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        const float *x = X + (size_t)t * cols + i;
        __m512 p = _mm512_mul_ps(q.lo, _mm512_loadu_ps(x));
        p = _mm512_fmadd_ps(q.hi, _mm512_loadu_ps(x + 16), p);
        acc[t][k] = _mm512_fmadd_ps(p, q.d, acc[t][k]);
    }
}

KERNELS_INLINE void blk32_rows(uint32_t type, const uint8_t *w, int cols, const float *X, int nt,
                               float *out) {
    size_t bytes = type == GGML_TYPE_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
    __m512 acc[KT][NACC];
    zero_acc(acc, nt);
    int nb = cols / 32, b = 0;
    for (; b + NACC <= nb; b += NACC) {
#pragma GCC unroll 4
        for (int k = 0; k < NACC; k++) blk32_step(acc, k, w + (b + k) * bytes, type, X, cols, 32 * (b + k), nt);
    }
#pragma GCC unroll 4
    for (int k = 0; k < NACC - 1; k++)
        if (b + k < nb) blk32_step(acc, k, w + (b + k) * bytes, type, X, cols, 32 * (b + k), nt);
    reduce_acc(acc, nt, out);
}

KERNELS_INLINE void q8_0_rows(const uint8_t *w, int cols, const float *X, int nt, float *out) {
    blk32_rows(GGML_TYPE_Q8_0, w, cols, X, nt, out);
}
KERNELS_INLINE void q4_0_rows(const uint8_t *w, int cols, const float *X, int nt, float *out) {
    blk32_rows(GGML_TYPE_Q4_0, w, cols, X, nt, out);
}

/* ---- Q4_K: blocks of 256, 8 sub-blocks of 32 ---- */

/* d*sc[j] and dmin*m[j] for the 8 sub-blocks (exact products). */
KERNELS_INLINE void q4_K_scales(const uint8_t *blk, float dsc[8], float dm[8]) {
    uint64_t sc, m;
    quant_q4_K_scales64(blk + 4, &sc, &m);
    __m256 d = _mm512_castps512_ps256(bcast_fp16(blk)), dmin = _mm512_castps512_ps256(bcast_fp16(blk + 2));
    __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
    __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m)));
    _mm256_storeu_ps(dsc, _mm256_mul_ps(d, scf));
    _mm256_storeu_ps(dm, _mm256_mul_ps(dmin, mf));
}

KERNELS_INLINE void q4_K_rows(const uint8_t *w, int cols, const float *X, int nt, float *out) {
    __m512 acc[KT][NACC];
    zero_acc(acc, nt);
    const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int b = 0; b < cols / QK_K; b++, w += sizeof(block_q4_K)) {
        float dsc[8], dm[8];
        q4_K_scales(w, dsc, dm);
        FROM_MEMORY(dsc);
        FROM_MEMORY(dm);
        const uint8_t *qs = w + 4 + K_SCALE_SIZE;
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) { /* 32 bytes: sub-block 2c in low nibbles, 2c+1 in high */
            int j = 2 * c;
            __m512i v0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qs + 32 * c)));
            __m512i v1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qs + 32 * c + 16)));
            /* the 16 weights a code can stand for in each sub-block, then one lookup per vector */
            __m512 t0 = _mm512_fmsub_ps(codes, _mm512_set1_ps(dsc[j]), _mm512_set1_ps(dm[j]));
            __m512 t1 = _mm512_fmsub_ps(codes, _mm512_set1_ps(dsc[j + 1]), _mm512_set1_ps(dm[j + 1]));
            __m512 w0 = nibble_lookup(v0, t0), w1 = nibble_lookup(v1, t0);
            __m512 w2 = nibble_lookup(_mm512_srli_epi32(v0, 4), t1), w3 = nibble_lookup(_mm512_srli_epi32(v1, 4), t1);
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++) {
                const float *x = X + (size_t)t * cols + QK_K * b + 32 * j;
                acc[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x), acc[t][0]);
                acc[t][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 16), acc[t][1]);
                acc[t][2] = _mm512_fmadd_ps(w2, _mm512_loadu_ps(x + 32), acc[t][2]);
                acc[t][3] = _mm512_fmadd_ps(w3, _mm512_loadu_ps(x + 48), acc[t][3]);
            }
        }
    }
    reduce_acc(acc, nt, out);
}

/* ---- Q6_K: blocks of 256, 16 sub-blocks of 16 ---- */

/* One half block (128 weights) as int8 values -32..31 in weight order. Weight l < 64 takes the
 * low nibble of ql[l], weight 64 + l the high one; its top two bits sit in qh[l % 32] at bit
 * 2 * (l / 32) (for 64 + l: 4 + 2 * (l / 32)). Both halves of the 512-bit registers get the same
 * qh bytes and a per-half shift moves the right pair to bits 4-5. */
KERNELS_INLINE void q6_K_half(const uint8_t *ql, const uint8_t *qh, int8_t q[128]) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30), off = _mm512_set1_epi8(32);
    const __m512i up_4_2 = _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2);   /* shift left by 4, then 2 */
    const __m512i down_0_2 = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2); /* shift right by 0, then 2 */
    __m512i l = _mm512_loadu_si512(ql);
    __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
    /* 64-bit shifts move bits across bytes; the masks keep only each byte's own bits. */
    __m512i lo = _mm512_or_si512(_mm512_and_si512(l, low4), _mm512_and_si512(_mm512_sllv_epi64(h, up_4_2), bits45));
    __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi64(l, 4), low4),
                                 _mm512_and_si512(_mm512_srlv_epi64(h, down_0_2), bits45));
    _mm512_storeu_si512(q, _mm512_sub_epi8(lo, off));
    _mm512_storeu_si512(q + 64, _mm512_sub_epi8(hi, off));
}

KERNELS_INLINE void q6_K_rows(const uint8_t *w, int cols, const float *X, int nt, float *out) {
    __m512 acc[KT][NACC];
    zero_acc(acc, nt);
    for (int b = 0; b < cols / QK_K; b++, w += sizeof(block_q6_K)) {
        float dsc[16];
        __m512 d = bcast_fp16(w + offsetof(block_q6_K, d));
        __m128i sc = _mm_loadu_si128((const __m128i *)(w + offsetof(block_q6_K, scales)));
        _mm512_storeu_ps(dsc, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc))));
        FROM_MEMORY(dsc);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            int8_t q[128];
            q6_K_half(w + 64 * h, w + offsetof(block_q6_K, qh) + 32 * h, q);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                int j = 8 * h + i; /* sub-block */
                __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 16 * i))));
                __m512 wv = _mm512_mul_ps(qf, _mm512_set1_ps(dsc[j])); /* exact: at most 23 significant bits */
#pragma GCC unroll 8
                for (int t = 0; t < nt; t++)
                    acc[t][j % NACC] =
                        _mm512_fmadd_ps(wv, _mm512_loadu_ps(X + (size_t)t * cols + QK_K * b + 16 * j), acc[t][j % NACC]);
            }
        }
    }
    reduce_acc(acc, nt, out);
}

KERNELS_DEFINE_DRIVERS(f32, KT)
KERNELS_DEFINE_DRIVERS(f16, KT)
KERNELS_DEFINE_DRIVERS(bf16, KT)
KERNELS_DEFINE_DRIVERS(q8_0, KT)
KERNELS_DEFINE_DRIVERS(q4_0, KT)
KERNELS_DEFINE_DRIVERS(q4_K, KT)
KERNELS_DEFINE_DRIVERS(q6_K, KT)
KERNELS_DEFINE_DISPATCH()

static float dot_f32(const float *a, const float *b, int n) {
    __m512 acc[KT][NACC];
    zero_acc(acc, 1);
    int i = 0;
    for (; i + 16 * NACC <= n; i += 16 * NACC)
#pragma GCC unroll 8
        for (int k = 0; k < NACC; k++)
            acc[0][k] = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16 * k), _mm512_loadu_ps(b + i + 16 * k), acc[0][k]);
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        acc[0][0] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc[0][0]);
    }
    float r;
    reduce_acc(acc, 1, &r);
    return r;
}

static void axpy_f32(float *y, float a, const float *x, int n) {
    __m512 av = _mm512_set1_ps(a);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 r = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
}

const kernels_ops kernels_avx512_ops = {matvec, matmul, dot_f32, axpy_f32};

#endif
