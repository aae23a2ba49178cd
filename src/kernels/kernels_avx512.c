/* AVX-512 kernels (16 f32 lanes). Weights are widened in registers, never dequantised a matrix at
 * a time. Q8_0 and Q4_0 take integer activations (see the integer section below). Float types:
 * 16 weights per step, FMA'd with x. Q4_K and Q6_K: each sub-block's weights are
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

/* Lane k of the result is table[codes[k] & 15]: 4-bit codes to floats in one permute. */
static inline __m512 nibble_lookup(__m512i codes, __m512 table) { return _mm512_permutexvar_ps(codes, table); }

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
KERNELS_DEFINE_DRIVERS(q4_K, KT)
KERNELS_DEFINE_DRIVERS(q6_K, KT)
KERNELS_DEFINE_DISPATCH()

/* ---- integer activations: Q8_0 and Q4_0 ----
 * matvec: 16 rows at a time. For each group of 32 weights, every row's integer products go to
 * one vector of 16 partial sums (vpmaddwd: pairs of int16; vpdpbusd: quads of int8), and an
 * exact reduction tree turns the 16 vectors into one vector holding each row's S_g, one row per
 * lane; the f32 scaling then runs on 16 rows at once.
 * matmul: up to 32 rows are first packed (the weights of each group as int16 or uint8, transposed
 * so a vector holds one k-pair or k-quad of 16 rows, and the rows' scales as f32), then every
 * tile of tokens multiplies the packed panel with broadcast activations: no reduction at all, one
 * vpdpwssd per 32 multiply-adds. Both give S_g exactly, so their results agree bit for bit. */

static void quantize_act(kernels_act fmt, const float *x, int cols, int g0, int g1, void *dst) {
    float qmax = fmt == KERNELS_ACT_I16 ? ACT_QMAX_I16 : ACT_QMAX_I8;
    act_group *grp = (act_group *)((uint8_t *)dst + act_q_bytes(fmt, cols));
    for (int g = g0; g < g1; g++) {
        __m512 a = _mm512_loadu_ps(x + 32 * g), b = _mm512_loadu_ps(x + 32 * g + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
        __m512 id = _mm512_set1_ps(amax != 0.0f ? qmax / amax : 0.0f);
        __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, id)), qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, id));
        grp[g].d = amax / qmax;
        grp[g].sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
        if (fmt == KERNELS_ACT_I16) {
            _mm256_storeu_si256((__m256i *)((int16_t *)dst + 32 * g), _mm512_cvtepi32_epi16(qa));
            _mm256_storeu_si256((__m256i *)((int16_t *)dst + 32 * g + 16), _mm512_cvtepi32_epi16(qb));
        } else {
            _mm_storeu_si128((__m128i *)((int8_t *)dst + 32 * g), _mm512_cvtepi32_epi8(qa));
            _mm_storeu_si128((__m128i *)((int8_t *)dst + 32 * g + 16), _mm512_cvtepi32_epi8(qb));
        }
    }
}

/* A block's 32 weights as int16: Q8_0 signed; Q4_0 the unsigned nibbles (0..15; the offset of 8
 * is taken out later through the activations' sum), low nibbles first. */
KERNELS_INLINE __m512i weights_i16(uint32_t type, const uint8_t *blk) {
    if (type == GGML_TYPE_Q8_0) return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(blk + 2)));
    const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    __m512i w = _mm512_cvtepu8_epi16(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + 2))));
    return _mm512_and_si512(_mm512_srlv_epi16(w, shift), _mm512_set1_epi16(0xF));
}

/* Two rows' blocks as uint8 in one vector, rows a then b: Q4_0 nibbles as they are; Q8_0 plus
 * 128 (x ^ 0x80), taken out later through the activations' sum. */
KERNELS_INLINE __m512i weights_u8x2(uint32_t type, const uint8_t *a, const uint8_t *b) {
    if (type == GGML_TYPE_Q8_0) {
        __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a + 2))),
                                       _mm256_loadu_si256((const __m256i *)(b + 2)), 1);
        return _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
    }
    __m512i w = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(a + 2)))),
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b + 2))), 1);
    w = _mm512_mask_srli_epi16(w, 0xFF00FF00u, w, 4); /* high nibbles in the odd 128-bit lanes */
    return _mm512_and_si512(w, _mm512_set1_epi8(0xF));
}

/* What S' (the product with the stored form) exceeds S by, per unit of the activations' sum. */
KERNELS_INLINE int32_t weight_offset(uint32_t type, kernels_act fmt) {
    if (type == GGML_TYPE_Q4_0) return 8;
    return fmt == KERNELS_ACT_I8 ? 128 : 0;
}

/* In lane j (= 4L + i), the sum of lane L (a 128-bit lane) of R[i]: four 4x4 transposes with adds. */
KERNELS_INLINE __m512i transpose_add4(const __m512i R[4]) {
    __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(R[0], R[1]), _mm512_unpackhi_epi32(R[0], R[1]));
    __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(R[2], R[3]), _mm512_unpackhi_epi32(R[2], R[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}

/* Halves a and b of 256 bits each: R with 128-bit lanes (a0+a1, a2+a3, b0+b1, b2+b3). */
KERNELS_INLINE __m512i fold_pairs(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Sixteen vectors of 16 partial sums to one vector of their totals: with row r's partial sums in
 * P[SLOT16(r)], lane r of the result is row r's total. */
#define SLOT16(r) (4 * ((r) % 4) + (r) / 4)
KERNELS_INLINE __m512i reduce16(const __m512i P[16]) {
    __m512i Q[8], R[4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        Q[i] = _mm512_add_epi32(_mm512_shuffle_i64x2(P[2 * i], P[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                _mm512_shuffle_i64x2(P[2 * i], P[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) R[i] = fold_pairs(Q[2 * i], Q[2 * i + 1]);
    return transpose_add4(R);
}

/* Eight vectors, each two rows of 8 partial sums (one per 256-bit half), to one vector of
 * totals; row r must sit in half (r / 4) % 2 of P[2 * (r % 4) + r / 8]. */
KERNELS_INLINE __m512i reduce8x2(const __m512i P[8]) {
    __m512i R[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) R[i] = fold_pairs(P[2 * i], P[2 * i + 1]);
    return transpose_add4(R);
}

/* The fp16 scales of one block of 16 rows (byte offsets idx from base) as f32. */
KERNELS_INLINE __m512 gather_scales(const uint8_t *base, __m512i idx) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(idx, base, 1)));
}

KERNELS_INLINE void store_rows(float *y, __m512 v, int n, int add) {
    __mmask16 m = (__mmask16)((1u << n) - 1);
    if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, y));
    _mm512_mask_storeu_ps(y, m, v);
}

/* Rows [0, n) (n <= 16) of W, y[0..n). Missing rows repeat the last one (results dropped). */
KERNELS_INLINE void matvec_q16(uint32_t type, kernels_act fmt, const uint8_t *W, size_t rb, int n, int cols,
                               const void *xq, float *y, int add) {
    const size_t bytes = int_block_bytes(type);
    const act_group *grp = act_groups(xq, fmt, cols);
    const uint8_t *row[16];
    int32_t offs[16];
    for (int i = 0; i < 16; i++) {
        offs[i] = (int32_t)((size_t)(i < n ? i : n - 1) * rb);
        row[i] = W + offs[i];
    }
    const __m512i idx = _mm512_loadu_si512(offs);
    const int32_t off = weight_offset(type, fmt);
    __m512 acc = _mm512_setzero_ps();
    for (int g = 0; g < cols / 32; g++) {
        size_t o = (size_t)g * bytes;
        /* The 16 rows are read as 16 slow streams, which the hardware prefetchers follow poorly;
         * the next tile is contiguous, so fetch it linearly, as fast as this one is consumed. */
        for (size_t p = 16 * o; p < 16 * (o + bytes); p += 64) _mm_prefetch((const char *)W + 16 * rb + p, _MM_HINT_T0);
        __m512i S;
        if (fmt == KERNELS_ACT_I16) {
            __m512i x = _mm512_loadu_si512((const int16_t *)xq + 32 * g), P[16];
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++) P[SLOT16(r)] = _mm512_madd_epi16(weights_i16(type, row[r] + o), x);
            S = reduce16(P);
        } else {
            __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const int8_t *)xq + 32 * g)));
            __m512i P[8];
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++) { /* rows (p % 2) * 8 + p / 2 and 4 more: see reduce8x2 */
                int ra = (p % 2) * 8 + p / 2;
                P[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), weights_u8x2(type, row[ra] + o, row[ra + 4] + o), x);
            }
            S = reduce8x2(P);
        }
        if (off) S = _mm512_sub_epi32(S, _mm512_set1_epi32(off * grp[g].sum));
        __m512 s = _mm512_mul_ps(gather_scales(W + o, idx), _mm512_set1_ps(grp[g].d));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), s, acc);
    }
    store_rows(y, acc, n, add);
}

static void matvec_q(uint32_t type, const void *W, size_t row_bytes, int cols, kernels_act fmt, const void *xq,
                     float *y, int r0, int r1, int add) {
    for (int r = r0; r < r1; r += 16)
        matvec_q16(type, fmt, (const uint8_t *)W + (size_t)r * row_bytes, row_bytes, r1 - r < 16 ? r1 - r : 16,
                   cols, xq, y + (r - r0), add);
}

/* Packed panel of up to 32 rows (two sets of 16 lanes): for group g, step j (k-pair for int16,
 * k-quad for uint8) and set s, 64 bytes at ((g * 16 + j) * 2 + s) * 64, then the scales: 16
 * floats at sc + (g * 2 + s) * 16. */
#define PANEL_ROWS 32

static inline float *panel_scales(void *panel, int cols) { return (float *)((uint8_t *)panel + (size_t)cols * 64); }

/* Rows as 16 vectors of 16 dwords in, columns out: c[j] lane i = r[i] lane j. */
KERNELS_INLINE void transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) { /* u[4m + c], 128-bit lane l: column 4l + c of rows 4m..4m+3 */
        u[4 * m] = _mm512_unpacklo_epi64(t[4 * m], t[4 * m + 2]);
        u[4 * m + 1] = _mm512_unpackhi_epi64(t[4 * m], t[4 * m + 2]);
        u[4 * m + 2] = _mm512_unpacklo_epi64(t[4 * m + 1], t[4 * m + 3]);
        u[4 * m + 3] = _mm512_unpackhi_epi64(t[4 * m + 1], t[4 * m + 3]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) { /* 4x4 transpose of 128-bit lanes of u[c], u[4 + c], u[8 + c], u[12 + c] */
        __m512i x0 = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(1, 0, 1, 0));
        __m512i x1 = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 2, 3, 2));
        __m512i x2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(1, 0, 1, 0));
        __m512i x3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 2, 3, 2));
        r[c] = _mm512_shuffle_i32x4(x0, x2, _MM_SHUFFLE(2, 0, 2, 0));
        r[4 + c] = _mm512_shuffle_i32x4(x0, x2, _MM_SHUFFLE(3, 1, 3, 1));
        r[8 + c] = _mm512_shuffle_i32x4(x1, x3, _MM_SHUFFLE(2, 0, 2, 0));
        r[12 + c] = _mm512_shuffle_i32x4(x1, x3, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* Pack rows [0, n) of W (n <= 32). int16: signed weights (Q4_0 nibble - 8), so the packed
 * product is S itself; uint8: as weights_u8x2, corrected through the activations' sum. */
static void pack_panel(uint32_t type, kernels_act fmt, const uint8_t *W, size_t rb, int n, int cols, void *panel) {
    const size_t bytes = int_block_bytes(type);
    float *sc = panel_scales(panel, cols);
    for (int s = 0; s < (n + 15) / 16; s++) {
        const uint8_t *row[16];
        int32_t offs[16];
        for (int i = 0; i < 16; i++) {
            int r = 16 * s + i;
            offs[i] = (int32_t)((size_t)(r < n ? r : n - 1) * rb);
            row[i] = W + offs[i];
        }
        const __m512i idx = _mm512_loadu_si512(offs);
        for (int g = 0; g < cols / 32; g++) {
            size_t o = (size_t)g * bytes;
            __m512i v[16];
            if (fmt == KERNELS_ACT_I16) {
                const __m512i off = _mm512_set1_epi16(type == GGML_TYPE_Q4_0 ? 8 : 0);
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++) v[i] = _mm512_sub_epi16(weights_i16(type, row[i] + o), off);
            } else { /* 32 bytes per row: both 256-bit halves of a pair's vector */
#pragma GCC unroll 8
                for (int i = 0; i < 16; i += 2) {
                    __m512i w = weights_u8x2(type, row[i] + o, row[i + 1] + o);
                    v[i] = _mm512_castsi256_si512(_mm512_castsi512_si256(w));
                    v[i + 1] = _mm512_castsi256_si512(_mm512_extracti64x4_epi64(w, 1));
                }
            }
            transpose16(v);
            uint8_t *dst = (uint8_t *)panel + (size_t)g * 16 * 128 + (size_t)s * 64;
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) _mm512_store_si512(dst + (size_t)j * 128, v[j]);
            _mm512_store_ps(sc + (size_t)(g * 2 + s) * 16, gather_scales(W + o, idx));
        }
    }
}

/* One tile: NS sets of 16 packed rows times NT tokens, over all groups. Kept generic in NT and
 * NS (compile-time constants after inlining); every (row, token) does the same operations. */
KERNELS_INLINE void panel_tile(kernels_act fmt, const uint8_t *panel, const float *sc, int cols, const uint8_t *X,
                               size_t xs, int NT, int NS, int32_t off, float *Y, int ldy, int n, int add) {
    __m512 facc[4][2];
    const act_group *grp[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        grp[t] = act_groups(X + xs * (size_t)t, fmt, cols);
#pragma GCC unroll 2
        for (int s = 0; s < NS; s++) facc[t][s] = _mm512_setzero_ps();
    }
    for (int g = 0; g < cols / 32; g++) {
        __m512i iacc[4][2];
        const uint8_t *pg = panel + (size_t)g * 16 * 128;
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m512i init = _mm512_set1_epi32(-off * grp[t][g].sum); /* zero for the int16 panel */
#pragma GCC unroll 2
            for (int s = 0; s < NS; s++) iacc[t][s] = init;
        }
        if (fmt == KERNELS_ACT_I16) {
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) {
                __m512i w[2];
#pragma GCC unroll 2
                for (int s = 0; s < NS; s++) w[s] = _mm512_load_si512(pg + j * 128 + s * 64);
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    int32_t x2;
                    memcpy(&x2, X + xs * (size_t)t + (size_t)g * 64 + (size_t)j * 4, 4);
                    __m512i xb = _mm512_set1_epi32(x2);
#pragma GCC unroll 2
                    for (int s = 0; s < NS; s++) iacc[t][s] = _mm512_dpwssd_epi32(iacc[t][s], w[s], xb);
                }
            }
        } else {
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                __m512i w[2];
#pragma GCC unroll 2
                for (int s = 0; s < NS; s++) w[s] = _mm512_load_si512(pg + j * 128 + s * 64);
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    int32_t x4;
                    memcpy(&x4, X + xs * (size_t)t + (size_t)g * 32 + (size_t)j * 4, 4);
                    __m512i xb = _mm512_set1_epi32(x4);
#pragma GCC unroll 2
                    for (int s = 0; s < NS; s++) iacc[t][s] = _mm512_dpbusd_epi32(iacc[t][s], w[s], xb);
                }
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m512 d = _mm512_set1_ps(grp[t][g].d);
#pragma GCC unroll 2
            for (int s = 0; s < NS; s++)
                facc[t][s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[t][s]),
                                             _mm512_mul_ps(_mm512_load_ps(sc + (size_t)(g * 2 + s) * 16), d), facc[t][s]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
        for (int s = 0; s < NS; s++) {
            int m = n - 16 * s;
            if (m > 0) store_rows(Y + (size_t)t * ldy + 16 * s, facc[t][s], m > 16 ? 16 : m, add);
        }
}

#define PANEL_NT 4 /* tokens per tile: 8 int and 8 float accumulators for two sets */

static void matmul_q(uint32_t type, const void *W, size_t row_bytes, int cols, kernels_act fmt, const void *Xq,
                     int T, float *Y, int ldy, int r0, int r1, int add, void *scratch) {
    const size_t xs = act_row_bytes(fmt, cols);
    const uint8_t *X = Xq;
    const int32_t off = fmt == KERNELS_ACT_I8 ? weight_offset(type, fmt) : 0;
    for (int ra = r0; ra < r1; ra += PANEL_ROWS) {
        int n = r1 - ra < PANEL_ROWS ? r1 - ra : PANEL_ROWS, t = 0;
        pack_panel(type, fmt, (const uint8_t *)W + (size_t)ra * row_bytes, row_bytes, n, cols, scratch);
        const float *sc = panel_scales(scratch, cols);
        if (n > 16) {
            for (; t + PANEL_NT <= T; t += PANEL_NT)
                panel_tile(fmt, scratch, sc, cols, X + xs * t, xs, PANEL_NT, 2, off, Y + (size_t)t * ldy + (ra - r0), ldy, n, add);
            for (; t < T; t++) panel_tile(fmt, scratch, sc, cols, X + xs * t, xs, 1, 2, off, Y + (size_t)t * ldy + (ra - r0), ldy, n, add);
        } else {
            for (; t + PANEL_NT <= T; t += PANEL_NT)
                panel_tile(fmt, scratch, sc, cols, X + xs * t, xs, PANEL_NT, 1, off, Y + (size_t)t * ldy + (ra - r0), ldy, n, add);
            for (; t < T; t++) panel_tile(fmt, scratch, sc, cols, X + xs * t, xs, 1, 1, off, Y + (size_t)t * ldy + (ra - r0), ldy, n, add);
        }
    }
}

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

const kernels_ops kernels_avx512_ops = {matvec, matmul, quantize_act, matvec_q, matmul_q, dot_f32, axpy_f32};

#endif
