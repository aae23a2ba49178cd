/* AVX-512 kernels (16 f32 lanes; F, BW, VL, DQ and VNNI). Weights are widened in registers, never
 * dequantised a matrix at a time. The integer types take integer activations (see the integer
 * section below); the float types are described in their section. */
#if defined(__x86_64__) && defined(__AVX512F__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "kernels/kernels_x86.h"
#include "tensor/quant.h"

static inline float hsum(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

/* ---- F32, F16, BF16 ----
 * A row's result for a token is defined by its 16 lanes: lane l is the f32 fma chain, from 0,
 * over the row's elements k = l (mod 16) in increasing k, weights widened to f32 exactly (a
 * last partial step of 16 reads zeros past the row); the result is hsum of the lanes. Every path
 * computes those chains, so each row's bits are the same whatever the batch:
 * - float_tile (decode and up to 6 tokens): a few rows at once, the weights widened in
 *   registers, rows x tokens independent chains. Decode takes 2 rows: two streams from memory
 *   (8 rows read 30 GB/s on one core where 2 read 38, kernels_bench), 32 chains enough to feed
 *   the bandwidth; 2-3 tokens take 8 rows, 4-6 take 4;
 * - float_matmul (7 tokens and more): 6 rows of a k-block widened once into an f32 panel in L1,
 *   then tiles of 4 tokens: 24 chains in registers, 10 loads per 24 FMAs, so the FMAs bound it.
 *   6 rows by 4 tokens rather than 4 by 6: the panel's rows come from L1, the tokens' activations
 *   from L2 (a block of FM_TB tokens by FM_KB elements), so the tile takes fewer of the farther
 *   loads; the next panel's weights are fetched while a panel computes. */

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

#define FV_R 8 /* rows of a float_tile at most */
#define FV_T 6 /* its tokens at most */

/* Rows [0, nr) (nr <= FV_R) of W (rows rb apart) times nt <= FV_T tokens (X, cols apart) into
 * out[t][r]; nr and nt constants after inlining, so the chains stay in registers and no row is a
 * branch. The rows are as many streams, which the hardware prefetchers follow poorly: the next
 * tile's rows are fetched into L2 as one linear stream instead, as many bytes per step as this
 * tile reads. */
KERNELS_INLINE void float_tile(uint32_t type, const uint8_t *W, size_t rb, int nr, int cols, const float *X, int nt,
                               float out[FV_T][FV_R]) {
    __m512 acc[FV_T][FV_R];
#pragma GCC unroll 6
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) acc[t][r] = _mm512_setzero_ps();
    const size_t esz = type == GGML_TYPE_F32 ? 4 : 2;
    int nu = cols / 16;
    for (int u = 0; u < nu; u++) {
        for (size_t o = 0; o < (size_t)nr * 16 * esz; o += 64)
            _mm_prefetch((const char *)W + nr * rb + (size_t)nr * 16 * esz * (size_t)u + o, _MM_HINT_T1);
        __m512 w[FV_R];
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) w[r] = load_w(type, W + r * rb, 16 * u);
#pragma GCC unroll 6
        for (int t = 0; t < nt; t++) {
            __m512 x = _mm512_loadu_ps(X + (size_t)t * cols + 16 * u);
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) acc[t][r] = _mm512_fmadd_ps(w[r], x, acc[t][r]);
        }
    }
    if (cols % 16) {
        __mmask16 m = (__mmask16)((1u << (cols % 16)) - 1);
        __m512 w[FV_R];
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) w[r] = load_w_part(type, W + r * rb, 16 * nu, m);
#pragma GCC unroll 6
        for (int t = 0; t < nt; t++) {
            __m512 x = _mm512_maskz_loadu_ps(m, X + (size_t)t * cols + 16 * nu);
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) acc[t][r] = _mm512_fmadd_ps(w[r], x, acc[t][r]);
        }
    }
#pragma GCC unroll 6
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) out[t][r] = hsum(acc[t][r]);
}

/* Rows [r0, r1) of W times nt tokens, tiles of nr rows (both constants after inlining), the
 * rows left one by one. */
KERNELS_INLINE void float_tiles(uint32_t type, const uint8_t *W, size_t rb, int cols, const float *X, int nt, int nr,
                                float *Y, int ldy, int r0, int r1, int add) {
    for (int r = r0; r < r1;) {
        int n = r1 - r < nr ? 1 : nr;
        float out[FV_T][FV_R];
        if (n == nr) float_tile(type, W + (size_t)r * rb, rb, nr, cols, X, nt, out);
        else float_tile(type, W + (size_t)r * rb, rb, 1, cols, X, nt, out);
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < n; i++) kernels_store(&Y[(size_t)t * ldy + (r - r0) + i], out[t][i], add);
        r += n;
    }
}

#define FM_R 6    /* rows of a panel */
#define FM_T 4    /* tokens of a tile */
#define FM_KB 512 /* elements of a k-block (a panel: 12 KB of f32) */
#define FM_TB 96  /* tokens whose chains are kept between k-blocks (36 KB) */

/* The 24 chains of a panel (FM_R rows of kn elements, f32) and FM_T tokens (xp[t]: their
 * elements of the k-block), continued from part[r][t] (or from 0 when first) and stored back. */
KERNELS_INLINE void float_micro(const float panel[FM_R][FM_KB], const float *const xp[FM_T], int kn, __m512 part[FM_R][FM_T],
                                int first) {
    __m512 acc[FM_R][FM_T];
#pragma GCC unroll 6
    for (int r = 0; r < FM_R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < FM_T; t++) acc[r][t] = first ? _mm512_setzero_ps() : part[r][t];
    int nu = kn / 16;
    for (int u = 0; u < nu; u++) {
        __m512 w[FM_R];
#pragma GCC unroll 6
        for (int r = 0; r < FM_R; r++) w[r] = _mm512_load_ps(&panel[r][16 * u]);
#pragma GCC unroll 4
        for (int t = 0; t < FM_T; t++) {
            __m512 x = _mm512_loadu_ps(xp[t] + 16 * u);
#pragma GCC unroll 6
            for (int r = 0; r < FM_R; r++) acc[r][t] = _mm512_fmadd_ps(w[r], x, acc[r][t]);
        }
    }
    if (kn % 16) { /* the panel holds zeros past the row */
        __mmask16 m = (__mmask16)((1u << (kn % 16)) - 1);
#pragma GCC unroll 4
        for (int t = 0; t < FM_T; t++) {
            __m512 x = _mm512_maskz_loadu_ps(m, xp[t] + 16 * nu);
#pragma GCC unroll 6
            for (int r = 0; r < FM_R; r++) acc[r][t] = _mm512_fmadd_ps(_mm512_load_ps(&panel[r][16 * nu]), x, acc[r][t]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < FM_R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < FM_T; t++) part[r][t] = acc[r][t];
}

/* Rows [0, nr) of W, elements [k0, k0 + kn), widened into the panel; zeros past them. */
KERNELS_INLINE void float_panel(uint32_t type, const uint8_t *W, size_t rb, int nr, int k0, int kn,
                                float panel[FM_R][FM_KB]) {
    int nu = kn / 16, np = (kn + 15) / 16;
    for (int r = 0; r < FM_R; r++) {
        const uint8_t *w = W + (size_t)r * rb;
        if (r >= nr) {
            for (int u = 0; u < np; u++) _mm512_store_ps(&panel[r][16 * u], _mm512_setzero_ps());
            continue;
        }
        for (int u = 0; u < nu; u++) _mm512_store_ps(&panel[r][16 * u], load_w(type, w, k0 + 16 * u));
        if (kn % 16)
            _mm512_store_ps(&panel[r][16 * nu], load_w_part(type, w, k0 + 16 * nu, (__mmask16)((1u << (kn % 16)) - 1)));
    }
}

KERNELS_INLINE void float_matmul(uint32_t type, const uint8_t *W, size_t rb, int cols, const float *X, int T, float *Y,
                                 int ldy, int r0, int r1, int add) {
    static const float zeros[FM_KB] __attribute__((aligned(64)));
    float panel[FM_R][FM_KB] __attribute__((aligned(64)));
    __m512 part[FM_TB / FM_T][FM_R][FM_T];
    for (int tb = 0; tb < T; tb += FM_TB) {
        int nt = T - tb < FM_TB ? T - tb : FM_TB;
        for (int ra = r0; ra < r1; ra += FM_R) {
            int nr = r1 - ra < FM_R ? r1 - ra : FM_R;
            for (int k0 = 0; k0 < cols; k0 += FM_KB) {
                int kn = cols - k0 < FM_KB ? cols - k0 : FM_KB;
                float_panel(type, W + (size_t)ra * rb, rb, nr, k0, kn, panel);
                for (int tt = 0; tt < nt; tt += FM_T) {
                    x86_prefetch_next_panel(W, rb, type == GGML_TYPE_F32 ? 4 : 2, cols, FM_KB, r1, ra, FM_R, k0, kn,
                                            tt / FM_T, (nt + FM_T - 1) / FM_T);
                    const float *xp[FM_T];
                    for (int t = 0; t < FM_T; t++)
                        xp[t] = tt + t < nt ? X + (size_t)(tb + tt + t) * cols + k0 : zeros;
                    float_micro((const float(*)[FM_KB])panel, xp, kn, part[tt / FM_T], k0 == 0);
                }
            }
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < nr; r++)
                    kernels_store(&Y[(size_t)(tb + t) * ldy + (ra + r - r0)], hsum(part[t / FM_T][r][t % FM_T]), add);
        }
    }
}

static void matvec(uint32_t type, const void *W, size_t row_bytes, int cols, const float *x, float *y, int r0, int r1,
                   int add) {
    switch (type) {
    case GGML_TYPE_F32: float_tiles(GGML_TYPE_F32, W, row_bytes, cols, x, 1, 2, y, 0, r0, r1, add); break;
    case GGML_TYPE_F16: float_tiles(GGML_TYPE_F16, W, row_bytes, cols, x, 1, 2, y, 0, r0, r1, add); break;
    case GGML_TYPE_BF16: float_tiles(GGML_TYPE_BF16, W, row_bytes, cols, x, 1, 2, y, 0, r0, r1, add); break;
    default: break;
    }
}

/* A few tokens (a speculative verification, a small server batch) go through the tiles, the
 * weights widened in registers; more through the panels. */
KERNELS_INLINE void float_mul(uint32_t type, const uint8_t *W, size_t rb, int cols, const float *X, int T, float *Y,
                              int ldy, int r0, int r1, int add) {
    switch (T) {
    case 1: float_tiles(type, W, rb, cols, X, 1, 2, Y, ldy, r0, r1, add); break;
    case 2: float_tiles(type, W, rb, cols, X, 2, FV_R, Y, ldy, r0, r1, add); break;
    case 3: float_tiles(type, W, rb, cols, X, 3, FV_R, Y, ldy, r0, r1, add); break;
    case 4: float_tiles(type, W, rb, cols, X, 4, 4, Y, ldy, r0, r1, add); break;
    case 5: float_tiles(type, W, rb, cols, X, 5, 4, Y, ldy, r0, r1, add); break;
    case 6: float_tiles(type, W, rb, cols, X, 6, 4, Y, ldy, r0, r1, add); break;
    default: float_matmul(type, W, rb, cols, X, T, Y, ldy, r0, r1, add); break;
    }
}

static void matmul(uint32_t type, const void *W, size_t row_bytes, int cols, const float *X, int T, float *Y, int ldy,
                   int r0, int r1, int add) {
    switch (type) {
    case GGML_TYPE_F32: float_mul(GGML_TYPE_F32, W, row_bytes, cols, X, T, Y, ldy, r0, r1, add); break;
    case GGML_TYPE_F16: float_mul(GGML_TYPE_F16, W, row_bytes, cols, X, T, Y, ldy, r0, r1, add); break;
    case GGML_TYPE_BF16: float_mul(GGML_TYPE_BF16, W, row_bytes, cols, X, T, Y, ldy, r0, r1, add); break;
    default: break;
    }
}

/* ---- integer activations ----
 * matvec: 16 rows at a time. For each group of 32 weights, every row's integer products go to
 * one vector of 16 partial sums (vpmaddwd: pairs of int16; vpdpbusd: quads of int8), and an
 * exact reduction tree turns the 16 vectors into one vector holding each row's S (S_a and S_b for
 * the types with scales per 16), one row per lane; the f32 scaling then runs on 16 rows at once.
 * matmul: up to 32 rows are first packed (the weights of each group as int16 or uint8, transposed
 * so a vector holds one k-pair or k-quad of 16 rows, and the rows' scales as f32), then every
 * tile of tokens multiplies the packed panel with broadcast activations: no reduction at all, one
 * vpdpwssd per 32 multiply-adds. Both give S exactly, so their results agree bit for bit.
 * What each type brings: how a group's integers unpack (weights_i16; weights_u8x2 for int8
 * activations) and where its scales come from (group_scales, kblock_scales). */

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
        grp[g].sum16 = _mm512_reduce_add_epi32(qa);
        if (fmt == KERNELS_ACT_I16) {
            _mm256_storeu_si256((__m256i *)((int16_t *)dst + 32 * g), _mm512_cvtepi32_epi16(qa));
            _mm256_storeu_si256((__m256i *)((int16_t *)dst + 32 * g + 16), _mm512_cvtepi32_epi16(qb));
        } else {
            _mm_storeu_si128((__m128i *)((int8_t *)dst + 32 * g), _mm512_cvtepi32_epi8(qa));
            _mm_storeu_si128((__m128i *)((int8_t *)dst + 32 * g + 16), _mm512_cvtepi32_epi8(qb));
        }
    }
}

static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* 16 bytes of nibbles as 32 int16: the low nibbles (weights 0-15) in the low 256 bits, the high
 * ones (16-31) above. */
KERNELS_INLINE __m512i nibbles_i16(const uint8_t *qs) {
    const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    __m512i w = _mm512_cvtepu8_epi16(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs)));
    return _mm512_and_si512(_mm512_srlv_epi16(w, shift), _mm512_set1_epi16(0xF));
}

/* The same nibbles as indices into 16 int8 values. */
KERNELS_INLINE __m512i lookup_i16(const uint8_t *qs, const int8_t values[16]) {
    const __m128i lo4 = _mm_set1_epi8(0xF);
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m256i idx = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(b, lo4)),
                                          _mm_and_si128(_mm_srli_epi16(b, 4), lo4), 1);
    __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)values));
    return _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(table, idx));
}

/* The 2-bit fields at bits 2p of 32 bytes (Q2_K, Q3_K) as int16. */
KERNELS_INLINE __m512i crumbs_i16(const uint8_t *q, int p) {
    __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)q));
    return _mm512_and_si512(_mm512_srl_epi16(w, _mm_cvtsi32_si128(2 * p)), _mm512_set1_epi16(3));
}

/* The nibbles j % 2 of 32 bytes (Q4_K, Q5_K) as int16. */
KERNELS_INLINE __m512i nibble_run_i16(const uint8_t *q, int j) {
    __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)q));
    return j % 2 ? _mm512_srli_epi16(w, 4) : _mm512_and_si512(w, _mm512_set1_epi16(0xF));
}

/* Bit j of each of 32 bytes, as a mask. */
KERNELS_INLINE __mmask32 bit_of_bytes(const uint8_t *q, int j) {
    return _mm256_test_epi8_mask(_mm256_loadu_si256((const __m256i *)q), _mm256_set1_epi8((char)(1 << j)));
}

/* IQ3_S group j of block b: eight grid entries of four magnitudes, signs from 32 bits. */
KERNELS_INLINE __m512i iq3_s_i16(const uint8_t *b, int j) {
    __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b + offsetof(block_IQ3_S, qs) + 8 * j)));
    __m256i high = _mm256_sllv_epi32(_mm256_set1_epi32(b[offsetof(block_IQ3_S, qh) + j]), _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1));
    idx = _mm256_or_si256(idx, _mm256_and_si256(high, _mm256_set1_epi32(256))); /* bit i of qh to bit 8 of entry i */
    __m512i w = _mm512_cvtepu8_epi16(_mm256_i32gather_epi32((const int *)quant_iq3_s_grid, idx, 4));
    return _mm512_mask_sub_epi16(w, ld32(b + offsetof(block_IQ3_S, signs) + 4 * j), _mm512_setzero_si512(), w);
}

/* Q6_K group j (of its block at blk) as bytes 0..63 (the value + 32). */
KERNELS_INLINE __m256i q6_K_u8(const uint8_t *blk, int j) {
    __m256i ql = _mm256_loadu_si256((const __m256i *)(blk + Q6K_QL(j)));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + Q6K_QH(j)));
    ql = _mm256_and_si256(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * Q6K_NIBBLE(j))), _mm256_set1_epi8(0xF));
    qh = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(Q6K_QH_SHIFT(j))), _mm256_set1_epi8(3));
    return _mm256_or_si256(ql, _mm256_slli_epi16(qh, 4)); /* each byte's two bits move to bits 4-5 */
}

/* Group g's 32 weights of a row as int16, weights 0-15 in the low 256 bits: the integers w of the
 * definition, except Q4_0 (its nibbles) and Q6_K (the value + 32), whose offsets come out later
 * through the activations' sums (group_offsets) or when packing (stored_offset). */
KERNELS_INLINE __m512i weights_i16(uint32_t type, const uint8_t *row, int g) {
    const uint8_t *b = int_block(type, row, g);
    const int j = g % int_block_groups(type);
    const __m512i c16 = _mm512_set1_epi16(16);
    switch (type) {
    case GGML_TYPE_Q8_0: return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(b + 2)));
    case GGML_TYPE_Q4_0: return nibbles_i16(b + 2);
    case GGML_TYPE_Q4_1: return nibbles_i16(b + 4);
    case GGML_TYPE_Q5_0: { /* (q | h << 4) - 16: minus 16 where the fifth bit is clear */
        __m512i w = nibbles_i16(b + 6);
        return _mm512_mask_sub_epi16(w, ~ld32(b + 2), w, c16);
    }
    case GGML_TYPE_Q5_1: {
        __m512i w = nibbles_i16(b + 8);
        return _mm512_mask_add_epi16(w, ld32(b + 4), w, c16);
    }
    case GGML_TYPE_IQ4_NL: return lookup_i16(b + 2, quant_iq4_values);
    case GGML_TYPE_MXFP4: return lookup_i16(b + 1, quant_e2m1x2_values);
    case GGML_TYPE_Q2_K: return crumbs_i16(b + offsetof(block_Q2_K, qs) + 32 * (j / 4), j % 4);
    case GGML_TYPE_Q3_K: { /* minus 4 where the high bit is clear */
        __m512i w = crumbs_i16(b + offsetof(block_Q3_K, qs) + 32 * (j / 4), j % 4);
        return _mm512_mask_sub_epi16(w, ~bit_of_bytes(b + offsetof(block_Q3_K, hmask), j), w, _mm512_set1_epi16(4));
    }
    case GGML_TYPE_Q4_K: return nibble_run_i16(b + offsetof(block_Q4_K, qs) + 32 * (j / 2), j);
    case GGML_TYPE_Q5_K: {
        __m512i w = nibble_run_i16(b + offsetof(block_Q5_K, qs) + 32 * (j / 2), j);
        return _mm512_mask_add_epi16(w, bit_of_bytes(b + offsetof(block_Q5_K, qh), j), w, c16);
    }
    case GGML_TYPE_Q6_K: return _mm512_cvtepu8_epi16(q6_K_u8(b, j));
    case GGML_TYPE_IQ4_XS: return lookup_i16(b + offsetof(block_IQ4_XS, qs) + 16 * j, quant_iq4_values);
    default: return iq3_s_i16(b, j);
    }
}

/* What weights_i16 adds to each weight: subtracted when packing. */
KERNELS_INLINE int16_t stored_offset(uint32_t type) {
    return type == GGML_TYPE_Q4_0 ? 8 : type == GGML_TYPE_Q6_K ? 32 : 0;
}

/* Group g of rows a and b as uint8 in one vector (a in the low 256 bits), for the types of
 * int_takes_i8: Q4_0 and Q4_K nibbles as they are, Q8_0 plus 128 (x ^ 0x80), Q6_K the value + 32. */
KERNELS_INLINE __m512i weights_u8x2(uint32_t type, const uint8_t *a, const uint8_t *b, int g) {
    const uint8_t *pa = int_block(type, a, g), *pb = int_block(type, b, g);
    switch (type) {
    case GGML_TYPE_Q8_0: {
        __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(pa + 2))),
                                       _mm256_loadu_si256((const __m256i *)(pb + 2)), 1);
        return _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
    }
    case GGML_TYPE_Q4_0: {
        __m512i w = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(pa + 2)))),
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(pb + 2))), 1);
        w = _mm512_mask_srli_epi16(w, 0xFF00FF00u, w, 4); /* high nibbles in the odd 128-bit lanes */
        return _mm512_and_si512(w, _mm512_set1_epi8(0xF));
    }
    case GGML_TYPE_Q4_K: {
        size_t o = offsetof(block_Q4_K, qs) + 32 * ((g % 8) / 2);
        __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(pa + o))),
                                       _mm256_loadu_si256((const __m256i *)(pb + o)), 1);
        if (g % 2) w = _mm512_srli_epi16(w, 4);
        return _mm512_and_si512(w, _mm512_set1_epi8(0xF));
    }
    default: return _mm512_inserti64x4(_mm512_castsi256_si512(q6_K_u8(pa, g % 8)), q6_K_u8(pb, g % 8), 1);
    }
}

/* How much the stored form's products exceed S for group g (both halves for Q6_K): a multiple of
 * the activations' sum, which is why act_group carries it. */
KERNELS_INLINE void group_offsets(uint32_t type, kernels_act fmt, const act_group *a, int32_t off[2]) {
    off[0] = off[1] = 0;
    if (type == GGML_TYPE_Q4_0) off[0] = 8 * a->sum;
    else if (type == GGML_TYPE_Q8_0 && fmt == KERNELS_ACT_I8) off[0] = 128 * a->sum;
    else if (type == GGML_TYPE_Q6_K) {
        off[0] = 32 * a->sum16;
        off[1] = 32 * (a->sum - a->sum16);
    }
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

/* The halves: R[i] (i < 8) holds rows 2i and 2i+1 as 128-bit lanes (2i first half, 2i second
 * half, 2i+1 first, 2i+1 second); out: each row's total of each half, lane r = row r. */
KERNELS_INLINE void reduce_halves(const __m512i R[8], __m512i S[2]) {
    const __m512i ia = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 16, 24, 17, 25, 18, 26, 19, 27);
    const __m512i ib = _mm512_setr_epi32(4, 12, 5, 13, 6, 14, 7, 15, 20, 28, 21, 29, 22, 30, 23, 31);
    __m512i v0 = transpose_add4(R), v1 = transpose_add4(R + 4);
    S[0] = _mm512_permutex2var_epi32(v0, ia, v1);
    S[1] = _mm512_permutex2var_epi32(v0, ib, v1);
}

/* fp16 values in the low 16 bits of each dword, as f32. */
KERNELS_INLINE __m512 low_halves(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }

/* The dword at base + idx of 16 rows. */
KERNELS_INLINE __m512i gather_rows(const uint8_t *base, __m512i idx) { return _mm512_i32gather_epi32(idx, base, 1); }

/* MXFP4's scales 2^(e-128) (quant_e8m0_half) from E8M0 bytes, one per dword: the exponent e - 1,
 * or below e = 2 a subnormal's bit; e = 255 is NaN. */
KERNELS_INLINE __m512 e8m0_half(__m512i e) {
    __m512i v = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    v = _mm512_mask_sllv_epi32(v, _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), _mm512_set1_epi32(0x00200000), e);
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0xFF)), _mm512_set1_epi32(0x7FC00000));
    return _mm512_castsi512_ps(v);
}

/* Bits [8k + s, 8k + s + n) of each dword's byte k... as f32: (v >> shift) & mask. */
KERNELS_INLINE __m512 field_ps(__m512i v, int shift, int mask) {
    return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, (unsigned)shift), _mm512_set1_epi32(mask)));
}

/* Where kblock_scales reads 16 rows' 256-blocks: plain rows (blk: row 0's block; idx: the rows'
 * byte offsets from it), whose fields take gathers, or an interleaved record (blk: the record,
 * ilv), whose region holds a dword of each row per 64 bytes, its fp16 d (Q3_K's, Q6_K's) in the
 * array ahead of it. */
typedef struct kfields {
    const uint8_t *blk;
    __m512i idx;
    int ilv;
} kfields;

/* The dword at block offset o of the 16 rows. */
KERNELS_INLINE __m512i field_dword(uint32_t type, kfields f, size_t o) {
    if (!f.ilv) return gather_rows(f.blk + o, f.idx);
    return _mm512_loadu_si512(f.blk + ilv_head(type) + 64 * ilv_line_of(type, o));
}

/* The fp16 at block offset o, the block's last two bytes, as f32 (in rows from the dword ending
 * there: one from o would read past the last row). */
KERNELS_INLINE __m512 field_last_half(uint32_t type, kfields f, size_t o) {
    if (!f.ilv) return low_halves(_mm512_srli_epi32(gather_rows(f.blk + o - 2, f.idx), 16));
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)f.blk));
}

/* The scales of a 256-block of 16 rows (f), per sub-block of 16 weights i (0..15): a in ka[i], b
 * in kb[i]; the types with one scale per 32 fill only the even i (group j: 2j). All exact
 * products (kernels_impl.h). */
KERNELS_INLINE void kblock_scales(uint32_t type, kfields f, __m512 ka[16], __m512 kb[16]) {
    switch (type) {
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: {
        __m512i dd = field_dword(type, f, 0); /* d | dmin << 16 */
        __m512 d = low_halves(dd), ndmin = _mm512_sub_ps(_mm512_setzero_ps(), low_halves(_mm512_srli_epi32(dd, 16)));
        __m512i a = field_dword(type, f, 4), b = field_dword(type, f, 8), c = field_dword(type, f, 12);
        /* quant_q4_K_scales64 on 16 rows at once: four sub-blocks per word */
        const __m512i lo6 = _mm512_set1_epi32(0x3F3F3F3F), lo4 = _mm512_set1_epi32(0x0F0F0F0F), top2 = _mm512_set1_epi32(0x30303030);
        __m512i sc[2] = {_mm512_and_si512(a, lo6),
                         _mm512_or_si512(_mm512_and_si512(c, lo4), _mm512_and_si512(_mm512_srli_epi32(a, 2), top2))};
        __m512i m[2] = {_mm512_and_si512(b, lo6),
                        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(c, 4), lo4), _mm512_and_si512(_mm512_srli_epi32(b, 2), top2))};
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            ka[2 * j] = _mm512_mul_ps(d, field_ps(sc[j / 4], 8 * (j % 4), 0xFF));
            kb[2 * j] = _mm512_mul_ps(ndmin, field_ps(m[j / 4], 8 * (j % 4), 0xFF));
        }
        break;
    }
    case GGML_TYPE_Q6_K: {
        __m512 d = field_last_half(type, f, offsetof(block_Q6_K, d));
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m512i w = field_dword(type, f, offsetof(block_Q6_K, scales) + 4 * q);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) /* byte k, sign-extended */
                ka[4 * q + k] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(w, 24 - 8 * k), 24)));
        }
        break;
    }
    case GGML_TYPE_Q3_K: {
        const size_t s = offsetof(block_Q3_K, scales);
        __m512 d = field_last_half(type, f, offsetof(block_Q3_K, d));
        __m512i lo[2] = {field_dword(type, f, s), field_dword(type, f, s + 4)}, hi = field_dword(type, f, s + 8);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) { /* nibble i / 8 of byte i % 8, then bits 2 (i / 4) of byte 8 + i % 4 */
            __m512i v = _mm512_and_si512(_mm512_srli_epi32(lo[(i % 8) / 4], (unsigned)(8 * (i % 4) + 4 * (i / 8))), _mm512_set1_epi32(0xF));
            v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hi, (unsigned)(8 * (i % 4) + 2 * (i / 4))),
                                                                     _mm512_set1_epi32(3)), 4));
            ka[i] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(v, _mm512_set1_epi32(32))));
        }
        break;
    }
    case GGML_TYPE_Q2_K: {
        __m512i dd = field_dword(type, f, offsetof(block_Q2_K, d)); /* d | dmin << 16 */
        __m512 d = low_halves(dd), ndmin = _mm512_sub_ps(_mm512_setzero_ps(), low_halves(_mm512_srli_epi32(dd, 16)));
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m512i w = field_dword(type, f, offsetof(block_Q2_K, scales) + 4 * q);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                ka[4 * q + k] = _mm512_mul_ps(d, field_ps(w, 8 * k, 0xF));
                kb[4 * q + k] = _mm512_mul_ps(ndmin, field_ps(w, 8 * k + 4, 0xF));
            }
        }
        break;
    }
    case GGML_TYPE_IQ4_XS: {
        __m512i dh = field_dword(type, f, 0), l = field_dword(type, f, offsetof(block_IQ4_XS, scales_l)); /* d | scales_h << 16 */
        __m512 d = low_halves(dh);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m512i ls = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(l, (unsigned)(4 * j)), _mm512_set1_epi32(0xF)),
                                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(dh, (unsigned)(16 + 2 * j)), _mm512_set1_epi32(3)), 4));
            ka[2 * j] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))));
        }
        break;
    }
    default: { /* IQ3_S */
        __m512 d = low_halves(field_dword(type, f, 0));
        __m512i s = field_dword(type, f, offsetof(block_IQ3_S, scales));
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            ka[2 * j] = _mm512_mul_ps(d, _mm512_fmadd_ps(field_ps(s, 4 * j, 0xF), _mm512_set1_ps(2.0f), _mm512_set1_ps(1.0f)));
    }
    }
}

static inline int ld16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* The fp16 scales at offset o of 16 rows, as f32: word inserts (a gather measured slower). */
KERNELS_INLINE __m128i scales8(const uint8_t *const row[8], size_t o) {
    __m128i a = _mm_cvtsi32_si128(ld16(row[0] + o));
    a = _mm_insert_epi16(a, ld16(row[1] + o), 1);
    a = _mm_insert_epi16(a, ld16(row[2] + o), 2);
    a = _mm_insert_epi16(a, ld16(row[3] + o), 3);
    a = _mm_insert_epi16(a, ld16(row[4] + o), 4);
    a = _mm_insert_epi16(a, ld16(row[5] + o), 5);
    a = _mm_insert_epi16(a, ld16(row[6] + o), 6);
    return _mm_insert_epi16(a, ld16(row[7] + o), 7);
}
KERNELS_INLINE __m512 row_scales(const uint8_t *const row[16], size_t o) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(scales8(row, o)), scales8(row + 8, o), 1));
}

/* Q4_0 and IQ4_NL: the fp16 scales of 4 consecutive blocks of 16 rows, as f32 vectors s[0..4).
 * The 18-byte blocks put 4 scales within 56 bytes: one masked load per row takes them (no byte
 * past the last scale is read), then a tree of word permutes turns rows x blocks into blocks x
 * rows: fewer instructions than 16 word inserts per block (measured 5% faster; for Q8_0's 34-byte
 * blocks, two per load, no gain). */
KERNELS_INLINE void scales4_18(const uint8_t *const row[16], size_t o, __m512 s[4]) {
    const __mmask64 m = ((__mmask64)1 << 56) - 1;
    /* pairs of rows: words [row 2i: blocks 0..3, row 2i+1: blocks 0..3] (a block is 9 words) */
    const __m512i idx1 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          59, 50, 41, 32, 27, 18, 9, 0);
    /* concatenations: 4 rows (16 words), then 8 rows (32 words), row-major */
    const __m512i idx2 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 39, 38, 37, 36, 35, 34,
                                          33, 32, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i idx3 = _mm512_set_epi16(47, 46, 45, 44, 43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 15, 14,
                                          13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512i w[8], x[4], y[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        w[i] = _mm512_permutex2var_epi16(_mm512_maskz_loadu_epi8(m, row[2 * i] + o), idx1,
                                         _mm512_maskz_loadu_epi8(m, row[2 * i + 1] + o));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) x[i] = _mm512_permutex2var_epi16(w[2 * i], idx2, w[2 * i + 1]);
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) y[i] = _mm512_permutex2var_epi16(x[2 * i], idx3, x[2 * i + 1]);
    /* y[h] word 4r + k: row 8h + r, block k. Blocks k, k+1 of all 16 rows per vector: */
    const __m512i idx01 = _mm512_set_epi16(61, 57, 53, 49, 45, 41, 37, 33, 29, 25, 21, 17, 13, 9, 5, 1, 60, 56, 52,
                                           48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0);
    const __m512i idx23 = _mm512_add_epi16(idx01, _mm512_set1_epi16(2));
    __m512i v01 = _mm512_permutex2var_epi16(y[0], idx01, y[1]), v23 = _mm512_permutex2var_epi16(y[0], idx23, y[1]);
    s[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(v01));
    s[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v01, 1));
    s[2] = _mm512_cvtph_ps(_mm512_castsi512_si256(v23));
    s[3] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v23, 1));
}

/* The scales a and offsets b (per half) of group g of 16 rows: from the block's (ka, kb from
 * kblock_scales) for the 256-blocks, else from each row's block (base: row 0's row; idx: the
 * rows' offsets). */
KERNELS_INLINE void group_scales(uint32_t type, const uint8_t *const row[16], const uint8_t *base, __m512i idx, int g,
                                 const __m512 ka[16], const __m512 kb[16], __m512 a[2], __m512 b[2]) {
    if (int_block_groups(type) > 1) {
        int j = g % 8;
        a[0] = ka[2 * j];
        if (int_halves(type)) a[1] = ka[2 * j + 1];
        if (int_has_min(type)) b[0] = kb[2 * j];
        if (int_has_min(type) && int_halves(type)) b[1] = kb[2 * j + 1];
        return;
    }
    size_t o = (size_t)g * int_block_bytes(type);
    if (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1) { /* d | m << 16 */
        __m512i dm = gather_rows(base + o, idx);
        a[0] = low_halves(dm);
        b[0] = low_halves(_mm512_srli_epi32(dm, 16));
    } else if (type == GGML_TYPE_MXFP4) {
        a[0] = e8m0_half(_mm512_and_si512(gather_rows(base + o, idx), _mm512_set1_epi32(0xFF)));
    } else {
        a[0] = row_scales(row, o);
    }
}

/* acc plus group g's scaled sums, in the defined order (kernels_impl.h). */
KERNELS_INLINE __m512 scale_group(uint32_t type, __m512 acc, const __m512i S[2], const __m512 a[2], const __m512 b[2],
                                  const act_group *x) {
    __m512 d = _mm512_set1_ps(x->d);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[0]), _mm512_mul_ps(a[0], d), acc);
    if (int_halves(type)) acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[1]), _mm512_mul_ps(a[1], d), acc);
    if (int_has_min(type) && int_halves(type)) {
        acc = _mm512_fmadd_ps(b[0], _mm512_set1_ps(x->d * (float)x->sum16), acc);
        acc = _mm512_fmadd_ps(b[1], _mm512_set1_ps(x->d * (float)(x->sum - x->sum16)), acc);
    } else if (int_has_min(type)) {
        acc = _mm512_fmadd_ps(b[0], _mm512_set1_ps(x->d * (float)x->sum), acc);
    }
    return acc;
}

KERNELS_INLINE void store_rows(float *y, __m512 v, int n, int add) {
    __mmask16 m = (__mmask16)((1u << n) - 1);
    if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, y));
    _mm512_mask_storeu_ps(y, m, v);
}

/* The types whose group of 32 is 16 bytes of nibbles, weights 0-15 (low) and 16-31 (high), and
 * where group g's bytes start in its block. */
KERNELS_INLINE int split_nibbles(uint32_t type) {
    return type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1 ||
           type == GGML_TYPE_IQ4_NL || type == GGML_TYPE_MXFP4 || type == GGML_TYPE_IQ4_XS;
}
KERNELS_INLINE size_t nibbles_at(uint32_t type, int g) {
    switch (type) {
    case GGML_TYPE_Q4_1: return offsetof(block_Q4_1, qs);
    case GGML_TYPE_Q5_0: return offsetof(block_Q5_0, qs);
    case GGML_TYPE_Q5_1: return offsetof(block_Q5_1, qs);
    case GGML_TYPE_MXFP4: return offsetof(block_MXFP4, qs);
    case GGML_TYPE_IQ4_XS: return offsetof(block_IQ4_XS, qs) + 16 * (size_t)(g % 8);
    default: return 2;
    }
}

/* Those types' group g of rows a and b as weights_i16 gives them, two rows per vector: weights
 * 0-15 of a, then of b, in *lo; weights 16-31 in *hi. */
KERNELS_INLINE void weights_i16x2(uint32_t type, const uint8_t *a, const uint8_t *b, int g, __m512i *lo, __m512i *hi) {
    const uint8_t *pa = int_block(type, a, g), *pb = int_block(type, b, g);
    const size_t o = nibbles_at(type, g);
    __m256i bytes = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(pa + o))),
                                            _mm_loadu_si128((const __m128i *)(pb + o)), 1);
    if (type == GGML_TYPE_IQ4_NL || type == GGML_TYPE_IQ4_XS || type == GGML_TYPE_MXFP4) { /* looked up as bytes */
        const int8_t *values = type == GGML_TYPE_MXFP4 ? quant_e2m1x2_values : quant_iq4_values;
        const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)values)), lo4 = _mm256_set1_epi8(0xF);
        *lo = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(table, _mm256_and_si256(bytes, lo4)));
        *hi = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(bytes, 4), lo4)));
        return;
    }
    __m512i w = _mm512_cvtepu8_epi16(bytes);
    *lo = _mm512_and_si512(w, _mm512_set1_epi16(0xF));
    *hi = _mm512_srli_epi16(w, 4);
    if (type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1) { /* the fifth bits: a's and b's words side by side */
        uint32_t ha = ld32(pa + (type == GGML_TYPE_Q5_0 ? 2 : 4)), hb = ld32(pb + (type == GGML_TYPE_Q5_0 ? 2 : 4));
        __mmask32 mlo = (ha & 0xFFFF) | hb << 16, mhi = ha >> 16 | (hb & 0xFFFF0000u);
        const __m512i c16 = _mm512_set1_epi16(16);
        if (type == GGML_TYPE_Q5_1) {
            *lo = _mm512_mask_add_epi16(*lo, mlo, *lo, c16);
            *hi = _mm512_mask_add_epi16(*hi, mhi, *hi, c16);
        } else {
            *lo = _mm512_mask_sub_epi16(*lo, ~mlo, *lo, c16);
            *hi = _mm512_mask_sub_epi16(*hi, ~mhi, *hi, c16);
        }
    }
}

/* The K-quants (Q2_K to Q6_K) in matvec with int16 activations: each 256-block stores a group's
 * 32 weights as bit fields of 32 consecutive bytes (l = 0..31, the weight's index), so two rows'
 * bytes fill one vector as they are: row a's in the low 256 bits, row b's above. Rather than
 * widening bytes to words (a cross-lane vpmovzxbw per row) and then the madd, each 16-bit word
 * (bytes 2i, 2i+1) is split in place: its low byte is weight 2i, its high byte weight 2i+1. Two
 * in-lane masks give the even and the odd weights as int16, multiplied with the group's even
 * and odd activations (computed once per group, shared by the 16 rows): the order of the products
 * changes, not S. Each 128-bit lane keeps 16 consecutive weights of one row, so the halves (k < 16,
 * k >= 16) stay apart for the types with scales per 16.
 * kquant_bytes: bytes whose bits [0, bits) hold the stored integer of each weight (higher bits are
 * masked off later); stored = w for Q4_K, Q5_K, Q2_K; w + 32 for Q6_K; w + 4 for Q3_K. */
KERNELS_INLINE int kquant_words(uint32_t type) {
    return type == GGML_TYPE_Q2_K || type == GGML_TYPE_Q3_K || type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K ||
           type == GGML_TYPE_Q6_K;
}
KERNELS_INLINE int kquant_bits(uint32_t type) {
    return type == GGML_TYPE_Q2_K ? 2 : type == GGML_TYPE_Q3_K ? 3 : type == GGML_TYPE_Q4_K ? 4 : type == GGML_TYPE_Q5_K ? 5 : 6;
}
KERNELS_INLINE __m512i rows2_bytes(const uint8_t *a, const uint8_t *b, size_t o) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a + o))),
                              _mm256_loadu_si256((const __m256i *)(b + o)), 1);
}
/* Bits of every byte rotated left by s (-7..7) within its dword: for the bit fields used below,
 * the bits that land in the field come from the same byte, whatever the direction. */
KERNELS_INLINE __m512i rotate_bits(__m512i v, int s) { return _mm512_rolv_epi32(v, _mm512_set1_epi32(s & 31)); }
/* Bits [0, lobits) of each byte from lo, the rest from hi (vpternlog: c ? a : b with c the mask). */
KERNELS_INLINE __m512i merge_nibble(__m512i lo, __m512i hi, int lobits) {
    return _mm512_ternarylogic_epi32(lo, hi, _mm512_set1_epi8((char)((1 << lobits) - 1)), 0xE4);
}
KERNELS_INLINE __m512i kquant_bytes(uint32_t type, const uint8_t *a, const uint8_t *b, int g) {
    const uint8_t *pa = int_block(type, a, g), *pb = int_block(type, b, g);
    const int j = g % 8;
    switch (type) {
    case GGML_TYPE_Q2_K: /* crumb j % 4 */
        return rotate_bits(rows2_bytes(pa, pb, offsetof(block_Q2_K, qs) + 32 * (size_t)(j / 4)), -2 * (j % 4));
    case GGML_TYPE_Q3_K: { /* crumb j % 4, and bit j of hmask to bit 2 */
        __m512i q = rotate_bits(rows2_bytes(pa, pb, offsetof(block_Q3_K, qs) + 32 * (size_t)(j / 4)), -2 * (j % 4));
        return merge_nibble(q, rotate_bits(rows2_bytes(pa, pb, offsetof(block_Q3_K, hmask)), 2 - j), 2);
    }
    case GGML_TYPE_Q4_K: { /* nibble j % 2 */
        __m512i q = rows2_bytes(pa, pb, offsetof(block_Q4_K, qs) + 32 * (size_t)(j / 2));
        return j % 2 ? _mm512_srli_epi16(q, 4) : q;
    }
    case GGML_TYPE_Q5_K: { /* nibble j % 2, and bit j of qh to bit 4 */
        __m512i q = rows2_bytes(pa, pb, offsetof(block_Q5_K, qs) + 32 * (size_t)(j / 2));
        if (j % 2) q = _mm512_srli_epi16(q, 4);
        return merge_nibble(q, rotate_bits(rows2_bytes(pa, pb, offsetof(block_Q5_K, qh)), 4 - j), 4);
    }
    default: { /* Q6_K: nibble of ql, two bits of qh to bits 4-5 (see Q6K_QL) */
        __m512i ql = rows2_bytes(pa, pb, Q6K_QL(j));
        if (Q6K_NIBBLE(j)) ql = _mm512_srli_epi16(ql, 4);
        return merge_nibble(ql, rotate_bits(rows2_bytes(pa, pb, Q6K_QH(j)), 4 - Q6K_QH_SHIFT(j)), 4);
    }
    }
}

/* Group g's products of rows a and b: per 128-bit lane (row a weights 0-15, 16-31, row b's the
 * same), four dwords of partial sums. xe, xo: the group's even and odd activations, in both
 * 256-bit halves. */
KERNELS_INLINE __m512i kquant_products(uint32_t type, const uint8_t *a, const uint8_t *b, int g, __m512i xe, __m512i xo) {
    const __m512i m = _mm512_set1_epi16((short)((1 << kquant_bits(type)) - 1));
    __m512i q = kquant_bytes(type, a, b, g), ev = _mm512_and_si512(q, m), od = _mm512_srli_epi16(q, 8);
    if (!(type == GGML_TYPE_Q4_K && g % 2)) od = _mm512_and_si512(od, m); /* Q4_K's high nibbles: nothing above */
    return _mm512_dpwssd_epi32(_mm512_madd_epi16(ev, xe), od, xo);
}

/* The group's exact S of 16 rows (lane r = row r); halves: S[0], S[1]. */
KERNELS_INLINE void group_sums(uint32_t type, kernels_act fmt, const uint8_t *const row[16], int g, const void *xq,
                               const act_group *a, __m512i S[2]) {
    if (fmt == KERNELS_ACT_I16 && kquant_words(type)) {
        __m512i x = _mm512_loadu_si512((const int16_t *)xq + 32 * g), P[8];
        __m512i xe = _mm512_broadcast_i64x4(_mm512_cvtepi32_epi16(x));
        __m512i xo = _mm512_broadcast_i64x4(_mm512_cvtepi32_epi16(_mm512_srai_epi32(x, 16)));
        if (int_halves(type)) {
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) P[i] = kquant_products(type, row[2 * i], row[2 * i + 1], g, xe, xo);
            reduce_halves(P, S);
        } else {
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++) { /* rows (p % 2) * 8 + p / 2 and 4 more: see reduce8x2 */
                int ra = (p % 2) * 8 + p / 2;
                P[p] = kquant_products(type, row[ra], row[ra + 4], g, xe, xo);
            }
            S[0] = reduce8x2(P);
        }
        if (type == GGML_TYPE_Q3_K) { /* the stored w + 4 */
            S[0] = _mm512_sub_epi32(S[0], _mm512_set1_epi32(4 * a->sum16));
            S[1] = _mm512_sub_epi32(S[1], _mm512_set1_epi32(4 * (a->sum - a->sum16)));
        }
    } else if (fmt == KERNELS_ACT_I16 && split_nibbles(type)) {
        /* Two rows per vector, 16 weights each: rows a and b's weights 0-15 in one vector, their
         * weights 16-31 in another, against x's two halves broadcast: half the unpacking and
         * reduction work of one row per vector. */
        const __m256i *xg = (const __m256i *)((const int16_t *)xq + 32 * g);
        __m512i x0 = _mm512_broadcast_i64x4(_mm256_loadu_si256(xg)), x1 = _mm512_broadcast_i64x4(_mm256_loadu_si256(xg + 1));
        __m512i P[8];
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++) { /* rows (p % 2) * 8 + p / 2 and 4 more: see reduce8x2 */
            int ra = (p % 2) * 8 + p / 2;
            __m512i lo, hi;
            weights_i16x2(type, row[ra], row[ra + 4], g, &lo, &hi);
            P[p] = _mm512_dpwssd_epi32(_mm512_madd_epi16(lo, x0), hi, x1); /* VNNI: the add fused */
        }
        S[0] = reduce8x2(P);
    } else if (fmt == KERNELS_ACT_I16) {
        __m512i x = _mm512_loadu_si512((const int16_t *)xq + 32 * g), P[16];
        if (int_halves(type)) {
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++) P[r] = _mm512_madd_epi16(weights_i16(type, row[r], g), x);
            __m512i R[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) R[i] = fold_pairs(P[2 * i], P[2 * i + 1]);
            reduce_halves(R, S);
        } else {
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++) P[SLOT16(r)] = _mm512_madd_epi16(weights_i16(type, row[r], g), x);
            S[0] = reduce16(P);
        }
    } else {
        __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const int8_t *)xq + 32 * g)));
        __m512i P[8];
        if (int_halves(type)) {
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                P[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), weights_u8x2(type, row[2 * i], row[2 * i + 1], g), x);
            reduce_halves(P, S);
        } else {
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++) { /* rows (p % 2) * 8 + p / 2 and 4 more: see reduce8x2 */
                int ra = (p % 2) * 8 + p / 2;
                P[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), weights_u8x2(type, row[ra], row[ra + 4], g), x);
            }
            S[0] = reduce8x2(P);
        }
    }
    int32_t off[2];
    group_offsets(type, fmt, a, off);
    if (off[0]) S[0] = _mm512_sub_epi32(S[0], _mm512_set1_epi32(off[0]));
    if (off[1]) S[1] = _mm512_sub_epi32(S[1], _mm512_set1_epi32(off[1]));
}

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

/* Group g's exact sums S of 16 rows for T tokens at once (T >= 2, int16 activations): the rows'
 * weights are unpacked once and transposed in registers, rows along the lanes, so that each
 * token's sums are 16 multiply-adds of a broadcast activation pair, with no horizontal reduction
 * (the packed matmul's tile, without its packing to memory). group_sums instead unpacks and
 * reduces per token (for Q8_0 about 45 shuffles and adds, three times the products), cheaper
 * only when there is one token to pay for the transpose. The integers are the same, so the
 * results are. Measured (kernels_bench, 128 rows in cache, GB/s x tokens for 4 tokens, against
 * group_sums per token): Q8_0 50 vs 44, Q4_K 25 vs 20.5, Q5_K 27 vs 21, Q6_K 29 vs 23, Q2_K 12.4
 * vs 11, Q3_K level; at 2 tokens both are level. The nibble types of split_nibbles keep
 * group_sums, whose two rows per vector unpack more cheaply than 16 single rows (2 tokens cost
 * 1.5 matvecs there, 2.3 this way). */
KERNELS_INLINE void group_sums_tokens(uint32_t type, const uint8_t *const row[16], int g, const uint8_t *Xq, size_t xs,
                                      int T, const act_group *const grp[], __m512i S[][2]) {
    __m512i v[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) v[r] = weights_i16(type, row[r], g);
    transpose16(v); /* v[j] lane r: row r's weights 2j and 2j + 1 */
    for (int t = 0; t < T; t++) {
        const int32_t *x = (const int32_t *)(const void *)(Xq + xs * (size_t)t) + 16 * g; /* int16 pairs */
        __m512i c[4]; /* four chains: the products' latency is covered within the token */
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) c[k] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            c[0] = _mm512_dpwssd_epi32(c[0], v[2 * j], _mm512_set1_epi32(x[2 * j]));
            c[1] = _mm512_dpwssd_epi32(c[1], v[2 * j + 1], _mm512_set1_epi32(x[2 * j + 1]));
            c[2] = _mm512_dpwssd_epi32(c[2], v[8 + 2 * j], _mm512_set1_epi32(x[8 + 2 * j]));
            c[3] = _mm512_dpwssd_epi32(c[3], v[9 + 2 * j], _mm512_set1_epi32(x[9 + 2 * j]));
        }
        __m512i lo = _mm512_add_epi32(c[0], c[1]), hi = _mm512_add_epi32(c[2], c[3]);
        if (int_halves(type)) S[t][0] = lo, S[t][1] = hi;
        else S[t][0] = _mm512_add_epi32(lo, hi);
        int32_t off[2];
        group_offsets(type, KERNELS_ACT_I16, &grp[t][g], off);
        if (off[0]) S[t][0] = _mm512_sub_epi32(S[t][0], _mm512_set1_epi32(off[0]));
        if (off[1]) S[t][1] = _mm512_sub_epi32(S[t][1], _mm512_set1_epi32(off[1]));
    }
}

/* Rows [0, n) (n <= 16) of W (rows rb apart, rs bytes each) times T tokens (T <= MV_T; Xq's rows xs
 * apart), Y[t * ldy + 0..n). Missing rows repeat the last one (results dropped). T = 1 is the
 * matvec; a few tokens at once (a speculative draft's verification, a small batch) share each
 * group's rows, unpacking, scales and prefetches, every token's results bit for bit its
 * matvec's, while the weights come from memory once: the packed matmul's packing costs more than
 * it saves below a dozen tokens, and T matvecs would read the weights T times. */
#define MV_T 8
KERNELS_INLINE void matvec_q16(uint32_t type, kernels_act fmt, const uint8_t *W, size_t rb, size_t rs, int n,
                                      int cols, const uint8_t *Xq, size_t xs, int T, float *Y, int ldy, int add) {
    const act_group *grp[MV_T];
    const uint8_t *row[16];
    int32_t offs[16];
    for (int t = 0; t < T; t++) grp[t] = act_groups(Xq + xs * (size_t)t, fmt, cols);
    for (int i = 0; i < 16; i++) {
        offs[i] = (int32_t)((size_t)(i < n ? i : n - 1) * rb);
        row[i] = W + offs[i];
    }
    const __m512i idx = _mm512_loadu_si512(offs);
    const int G = cols / 32, by4 = type == GGML_TYPE_Q4_0 || type == GGML_TYPE_IQ4_NL;
    const size_t pf_step = 16 * rs / (size_t)G;
    __m512 acc[MV_T], ka[16], kb[16], a4[4];
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int g = 0; g < G; g++) {
        /* The 16 rows are read as 16 slow streams, which the hardware prefetchers follow poorly;
         * the next tile, when its rows are contiguous, is fetched linearly, as fast as this one is
         * consumed (else row by row). Into L2, not L1: a tile is 18-50 KB, and the next one
         * fetched into a 32 KB L1 beside the current one is evicted before it is used (T0
         * measured 30 tok/s, T2 41-43 tok/s decoding TinyLlama Q4_0 with 2 threads on Zen 4). */
        if (rb == rs)
            for (size_t p = 0; p < pf_step; p += 64) _mm_prefetch((const char *)W + 16 * rb + g * pf_step + p, _MM_HINT_T2);
        else
            for (int i = 16; i < 32; i++) _mm_prefetch((const char *)W + i * rb + (size_t)g * rs / (size_t)G, _MM_HINT_T2);
        if (int_block_groups(type) > 1 && g % 8 == 0) kblock_scales(type, (kfields){int_block(type, W, g), idx, 0}, ka, kb);
        __m512 a[2], b[2];
        if (by4 && g % 4 == 0 && g + 4 <= G) scales4_18(row, (size_t)g * 18, a4);
        if (by4 && g - g % 4 + 4 <= G) a[0] = a4[g % 4]; /* by fours except the last blocks */
        else group_scales(type, row, W, idx, g, ka, kb, a, b);
        __m512i S[MV_T][2];
        if (T > 1 && fmt == KERNELS_ACT_I16 && !split_nibbles(type)) group_sums_tokens(type, row, g, Xq, xs, T, grp, S);
        else
            for (int t = 0; t < T; t++) group_sums(type, fmt, row, g, Xq + xs * (size_t)t, &grp[t][g], S[t]);
        for (int t = 0; t < T; t++) acc[t] = scale_group(type, acc[t], S[t], a, b, &grp[t][g]);
    }
    for (int t = 0; t < T; t++) store_rows(Y + (size_t)t * ldy, acc[t], n, add);
}

KERNELS_INLINE void matvec_tiles(uint32_t type, kernels_act fmt, const uint8_t *W, size_t row_bytes, int cols,
                                 const void *xq, float *y, int r0, int r1, int add) {
    const size_t rs = (size_t)(cols / 32 / int_block_groups(type)) * int_block_bytes(type);
    for (int r = r0; r < r1; r += 16)
        matvec_q16(type, fmt, W + (size_t)r * row_bytes, row_bytes, rs, r1 - r < 16 ? r1 - r : 16, cols, xq, 0, 1,
                   y + (r - r0), 0, add);
}

/* ---- interleaved weights (kernels.h, KERNELS_ILV) ----
 * A record's 64-byte loads hold 4 bytes of each of the 16 rows: group j's stored integers come out
 * as 8 vectors of u8 quads (lane r: row r's weights 4i..4i+3), each multiplied with a broadcast
 * quad of activations by vpdpbusd, so every lane sums one row and nothing is reduced across lanes
 * (group_sums spends about as much on its reduction tree as on the products). The int16
 * activations go as two byte planes, q = 256 hi + lo with lo unsigned: vpdpbusd takes the lo
 * plane as its unsigned operand against the weights, and the weights, made unsigned (ilv_bias),
 * as the unsigned one against the signed hi plane (Q8_0's, up to 255, go against the lo plane in
 * their signed form), so the weights are never widened to 16 bits and S is exact. */

/* What ilv_quads adds to each weight to make it unsigned: Q4_0's nibbles are w + 8, Q6_K's
 * stored form w + 32, MXFP4's looked-up values (2 x E2M1, -12..12) go in as w + 12, Q8_0's bytes
 * as w + 128 (x ^ 0x80, as weights_u8x2 gives them). */
KERNELS_INLINE int ilv_bias(uint32_t type) {
    return type == GGML_TYPE_Q4_0    ? 8
           : type == GGML_TYPE_Q6_K  ? 32
           : type == GGML_TYPE_MXFP4 ? 12
           : type == GGML_TYPE_Q8_0  ? 128
                                     : 0;
}

/* How much the products of ilv_quads' integers exceed S for a group (group_offsets for its form).
 * Q8_0's int16 products take the signed bytes against the low plane and w + 128 against the high
 * one, so they exceed S by 128 x 256 x the high plane's sum (hsum); every other form of int16
 * products uses the same integers against both planes, exceeding S by the bias times the sum. */
KERNELS_INLINE void ilv_offsets(uint32_t type, kernels_act fmt, const act_group *a, int32_t hsum, int32_t off[2]) {
    group_offsets(type, fmt, a, off);
    if (type == GGML_TYPE_MXFP4) off[0] = ilv_bias(type) * a->sum;
    if (type == GGML_TYPE_Q8_0 && fmt == KERNELS_ACT_I16) off[0] = ilv_bias(type) * 256 * hsum;
}

/* Group j's stored integers of a record's 16 rows (region: the record's interleaved dwords), plus
 * ilv_bias. */
KERNELS_INLINE void ilv_quads(uint32_t type, const uint8_t *region, int j, __m512i q[8]) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        /* Q4_0, MXFP4: weights 0-15 are the low nibbles of qs[0..16), 16-31 the high ones */
        if (type == GGML_TYPE_Q4_0 || type == GGML_TYPE_MXFP4) {
            __m512i v = _mm512_loadu_si512(region + (size_t)(i % 4) * 64);
            q[i] = _mm512_and_si512(i / 4 ? _mm512_srli_epi16(v, 4) : v, _mm512_set1_epi8(0xF));
            if (type == GGML_TYPE_MXFP4) { /* the codes' values + 12, looked up in each 128-bit lane */
                __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)quant_e2m1x2_values));
                q[i] = _mm512_shuffle_epi8(_mm512_add_epi8(table, _mm512_set1_epi8((char)ilv_bias(type))), q[i]);
            }
        } else if (type == GGML_TYPE_Q8_0) { /* the bytes + 128 */
            q[i] = _mm512_xor_si512(_mm512_loadu_si512(region + (size_t)i * 64), _mm512_set1_epi8((char)0x80));
        } else if (type == GGML_TYPE_Q4_K) { /* nibble j % 2 of qs[32 (j / 2) + l] */
            __m512i v = _mm512_loadu_si512(region + (ilv_line_of(type, offsetof(block_Q4_K, qs)) + (size_t)(8 * (j / 2) + i)) * 64);
            q[i] = _mm512_and_si512(j % 2 ? _mm512_srli_epi16(v, 4) : v, _mm512_set1_epi8(0xF));
        } else { /* Q6_K: w + 32, a nibble of ql and two bits of qh (see Q6K_QL) */
            __m512i ql = _mm512_loadu_si512(region + (size_t)(Q6K_QL(j) / 4 + i) * 64);
            __m512i qh = _mm512_loadu_si512(region + (size_t)(Q6K_QH(j) / 4 + i) * 64);
            if (Q6K_NIBBLE(j)) ql = _mm512_srli_epi16(ql, 4);
            q[i] = _mm512_and_si512(merge_nibble(ql, rotate_bits(qh, 4 - Q6K_QH_SHIFT(j)), 4), _mm512_set1_epi8(0x3F));
        }
    }
}

/* The scales a and offsets b of group j of a record (rec) of 16 interleaved rows: from the block's
 * ka and kb, read by kblock_scales at j = 0, for the 256-blocks; Q4_0's and Q8_0's d and MXFP4's
 * E8M0 byte from the record. */
KERNELS_INLINE void ilv_scales(uint32_t type, const uint8_t *rec, int j, __m512 ka[16], __m512 kb[16],
                               __m512 a[2], __m512 b[2]) {
    if (type == GGML_TYPE_MXFP4) { /* the rows' E8M0 bytes */
        a[0] = e8m0_half(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)rec)));
        return;
    }
    if (int_block_groups(type) == 1) {
        a[0] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)rec));
        return;
    }
    if (j == 0) kblock_scales(type, (kfields){rec, _mm512_setzero_si512(), 1}, ka, kb);
    group_scales(type, NULL, NULL, _mm512_setzero_si512(), j, ka, kb, a, b);
}

/* The most tokens matvec_ilv takes in one call: it keeps a float vector per token and tile across
 * the row (in memory: the integer sums live within a group), so a group's unpacked weights,
 * scales and prefetches, and the loop over its tokens, serve every token. Chunks of at most 12
 * tokens (9 and 8 for 17) cost 5-13% against one of 17 (a 2048 x 2048 matrix, one core: Q4_0
 * 385 -> 413 GFLOP/s, Q8_0 349 -> 378, Q4_K 329 -> 351, Q6_K 239 -> 309, MXFP4 361 -> 385; Q4_0
 * read from memory 379 -> 401); from 64 tokens on, the tokens per weight read no longer matter
 * (Q4_0 from memory 406 GFLOP/s at 64 tokens and at 128). */
#define ILV_MV_MAX 64

/* nt (1 or 2) tiles of 16 interleaved rows (tile_bytes apart) times T tokens (T <= ILV_MV_MAX) into
 * Y[t * ldy + 0..16 nt). planes + t ps: token t's int16 activations as byte planes (act_planes:
 * per group 64, the low bytes then the high bytes; after them the high bytes' sum of each group,
 * which Q8_0 reads); or, for int8 activations (fmt), the activations themselves (32 bytes a
 * group), multiplied once.
 * Two tiles side by side share each broadcast quad of activations, the token's group offsets and
 * the loop's work between two products (faster, measured in ilv_mul). Not, as first thought,
 * because a broadcast halves vpdpbusd's rate: 12 chains of vpdpbusd with an embedded broadcast
 * run as fast as with register operands on the Zen 5 machine of 2026-11-28, and 12 broadcast
 * loads beside 12 vpdpbusd cost nothing. */
KERNELS_INLINE void matvec_ilv(uint32_t type, kernels_act fmt, int nt, const uint8_t *tile, size_t tile_bytes, int cols,
                               const uint8_t *planes, size_t ps, const act_group *const grp[], int T, float *Y, int ldy,
                               int add) {
    const size_t rec = KERNELS_ILV_ROWS * int_block_bytes(type);
    const int bg = int_block_groups(type);
    __m512 acc[2][ILV_MV_MAX], ka[2][16], kb[2][16];
    for (int u = 0; u < nt; u++)
        for (int t = 0; t < T; t++) acc[u][t] = _mm512_setzero_ps();
    for (int b = 0; b < cols / (32 * bg); b++) {
#pragma GCC unroll 8
        for (int j = 0; j < bg; j++) {
            const int g = bg * b + j;
            __m512i q[2][8];
            __m512 a[2][2], bs[2][2];
#pragma GCC unroll 2
            for (int u = 0; u < nt; u++) {
                const uint8_t *r = tile + u * tile_bytes + (size_t)b * rec;
                /* each tile is a stream, fetched 16 / nt KB ahead into L1, each group its share of it
                 * (past the tile's end, the same tile of the next nt: nt - 1 tiles further on) */
                for (size_t o = (size_t)j * rec / (size_t)bg; o < (size_t)(j + 1) * rec / (size_t)bg; o += 64) {
                    size_t at = (size_t)b * rec + o + 16384 / (size_t)nt;
                    _mm_prefetch((const char *)tile + u * tile_bytes + at + (at >= tile_bytes ? (size_t)(nt - 1) * tile_bytes : 0),
                                 _MM_HINT_T0);
                }
                ilv_quads(type, r + ilv_head(type), j, q[u]);
                ilv_scales(type, r, j, ka[u], kb[u], a[u], bs[u]);
            }
            for (int t = 0; t < T; t++) {
                __m512i S[2][2], H[2][2];
                for (int u = 0; u < nt; u++) S[u][0] = S[u][1] = H[u][0] = H[u][1] = _mm512_setzero_si512();
                if (fmt == KERNELS_ACT_I16) {
                    const int32_t *lo = (const int32_t *)(const void *)(planes + ps * (size_t)t + 64 * (size_t)g);
                    const int32_t *hi = lo + 8;
#pragma GCC unroll 8
                    for (int i = 0; i < 8; i++) { /* two chains: the halves (weights 0-15, 16-31) */
                        const __m512i l = _mm512_set1_epi32(lo[i]), h = _mm512_set1_epi32(hi[i]);
#pragma GCC unroll 2
                        for (int u = 0; u < nt; u++) {
                            __m512i w = q[u][i];
                            if (type == GGML_TYPE_Q8_0) w = _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
                            S[u][i / 4] = _mm512_dpbusd_epi32(S[u][i / 4], l, w);
                            H[u][i / 4] = _mm512_dpbusd_epi32(H[u][i / 4], q[u][i], h);
                        }
                    }
#pragma GCC unroll 2
                    for (int u = 0; u < nt; u++)
#pragma GCC unroll 2
                        for (int h = 0; h < 2; h++) S[u][h] = _mm512_add_epi32(_mm512_slli_epi32(H[u][h], 8), S[u][h]);
                } else {
                    const int32_t *x = (const int32_t *)(const void *)(planes + ps * (size_t)t + 32 * (size_t)g);
#pragma GCC unroll 8
                    for (int i = 0; i < 8; i++) {
                        const __m512i v = _mm512_set1_epi32(x[i]);
#pragma GCC unroll 2
                        for (int u = 0; u < nt; u++) S[u][i / 4] = _mm512_dpbusd_epi32(S[u][i / 4], q[u][i], v);
                    }
                }
                int32_t off[2], hsum = 0;
                if (type == GGML_TYPE_Q8_0 && fmt == KERNELS_ACT_I16)
                    memcpy(&hsum, planes + ps * (size_t)t + 2 * (size_t)cols + 4 * (size_t)g, 4);
                ilv_offsets(type, fmt, &grp[t][g], hsum, off);
#pragma GCC unroll 2
                for (int u = 0; u < nt; u++) {
                    if (!int_halves(type)) S[u][0] = _mm512_add_epi32(S[u][0], S[u][1]);
                    if (off[0]) S[u][0] = _mm512_sub_epi32(S[u][0], _mm512_set1_epi32(off[0]));
                    if (off[1]) S[u][1] = _mm512_sub_epi32(S[u][1], _mm512_set1_epi32(off[1]));
                    acc[u][t] = scale_group(type, acc[u][t], S[u], a[u], bs[u], &grp[t][g]);
                }
            }
        }
    }
    for (int u = 0; u < nt; u++)
        for (int t = 0; t < T; t++) store_rows(Y + (size_t)t * ldy + u * KERNELS_ILV_ROWS, acc[u][t], KERNELS_ILV_ROWS, add);
}

/* The packed matmul is blocked for the caches: a block of MM_TB tokens and MM_RB rows keeps its
 * f32 accumulators in scratch (64 KB); the weights go by k-blocks of MM_KG groups (512 k), each
 * 32-row panel of a k-block packed once (40 KB) and used by every token of the block, whose
 * activations for the k-block (up to 128 KB of int16) stay in L2 across the block's panels. */
#define MM_TB 128
#define MM_RB 128
#define MM_KG 16
#define PANEL_NT 4 /* tokens per tile: 8 int and 8 float accumulators for two sets of 16 rows */

/* A packed panel of up to 32 rows (two sets of 16 lanes) over MM_KG groups: for group g, step j
 * (k-pair for int16, k-quad for uint8) and set s, 64 bytes at ((g * 16 + j) * 2 + s) * 64; then
 * four scale vectors per group and set, 16 floats each at ((g * 2 + s) * 4 + v) * 16: a and b of
 * the first half, then of the second (the same for the types with scales per 32). */
#define PANEL_BYTES (MM_KG * 16 * 128)
#define PANEL_SCALES (MM_KG * 2 * 4 * 16)
_Static_assert(PANEL_BYTES + PANEL_SCALES * 4 + MM_RB * MM_TB * 4 <= KERNELS_MUL_SCRATCH, "matmul scratch");

/* Pack groups [g0, g0 + ng) of rows [0, n) of W (n <= 32; g0 a multiple of 8). int16: the signed
 * weights (the stored form minus its offset), so the packed product is S itself; uint8: the
 * stored form of weights_u8x2, corrected through the activations' sums. */
KERNELS_INLINE void pack_panel(uint32_t type, kernels_act fmt, const uint8_t *W, size_t rb, int n, int g0, int ng,
                               uint8_t *panel) {
    const __m512i off16 = _mm512_set1_epi16(stored_offset(type));
    float *sc = (float *)(panel + PANEL_BYTES);
    for (int s = 0; s < (n + 15) / 16; s++) {
        const uint8_t *row[16];
        int32_t offs[16];
        for (int i = 0; i < 16; i++) {
            int r = 16 * s + i;
            offs[i] = (int32_t)((size_t)(r < n ? r : n - 1) * rb);
            row[i] = W + offs[i];
        }
        const __m512i idx = _mm512_loadu_si512(offs);
        __m512 ka[16], kb[16];
        for (int gi = 0; gi < ng; gi++) {
            int g = g0 + gi;
            __m512i v[16];
            if (fmt == KERNELS_ACT_I16) {
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++) v[i] = _mm512_sub_epi16(weights_i16(type, row[i], g), off16);
            } else { /* 32 bytes per row: both 256-bit halves of a pair's vector */
#pragma GCC unroll 8
                for (int i = 0; i < 16; i += 2) {
                    __m512i w = weights_u8x2(type, row[i], row[i + 1], g);
                    v[i] = _mm512_castsi256_si512(_mm512_castsi512_si256(w));
                    v[i + 1] = _mm512_castsi256_si512(_mm512_extracti64x4_epi64(w, 1));
                }
            }
            transpose16(v);
            uint8_t *dst = panel + (size_t)gi * 16 * 128 + (size_t)s * 64;
            int steps = fmt == KERNELS_ACT_I16 ? 16 : 8;
#pragma GCC unroll 16
            for (int j = 0; j < steps; j++) _mm512_store_si512(dst + (size_t)j * 128, v[j]);
            if (int_block_groups(type) > 1 && (gi == 0 || g % 8 == 0)) kblock_scales(type, (kfields){int_block(type, W, g), idx, 0}, ka, kb);
            __m512 a[2], b[2];
            group_scales(type, row, W, idx, g, ka, kb, a, b);
            float *gs = sc + (size_t)(gi * 2 + s) * 64;
            _mm512_store_ps(gs, a[0]);
            if (int_has_min(type)) _mm512_store_ps(gs + 16, b[0]);
            if (int_halves(type)) _mm512_store_ps(gs + 32, a[1]);
            if (int_halves(type) && int_has_min(type)) _mm512_store_ps(gs + 48, b[1]);
        }
    }
}

/* pack_panel's panel from interleaved weights (n a multiple of 16: whole tiles): each group's
 * record already holds quads of its 16 rows (lane r: row r), so a step of int8 activations is a
 * quad as it is and the two k-pairs of int16 ones are its bytes spread to words; no transpose. */
KERNELS_INLINE void pack_panel_ilv(uint32_t type, kernels_act fmt, const uint8_t *W, size_t rb, int n, int g0, int ng,
                                   uint8_t *panel) {
    const __m512i off16 = _mm512_set1_epi16((int16_t)ilv_bias(type));
    /* in each dword, bytes 0 and 1 (2 and 3) to the low bytes of two words; 0x80: a zero */
    const __m512i even = _mm512_set4_epi32((int)0x800D800C, (int)0x80098008, (int)0x80058004, (int)0x80018000),
                  odd = _mm512_set4_epi32((int)0x800F800E, (int)0x800B800A, (int)0x80078006, (int)0x80038002);
    const int bg = int_block_groups(type);
    const size_t recb = KERNELS_ILV_ROWS * int_block_bytes(type);
    float *sc = (float *)(panel + PANEL_BYTES);
    for (int s = 0; s < n / 16; s++) {
        const uint8_t *tile = W + (size_t)16 * s * rb;
        __m512 ka[16], kb[16];
        for (int gi = 0; gi < ng; gi++) {
            int g = g0 + gi, j = g % bg;
            const uint8_t *rec = tile + (size_t)(g / bg) * recb;
            __m512i q[8];
            ilv_quads(type, rec + ilv_head(type), j, q);
            uint8_t *dst = panel + (size_t)gi * 16 * 128 + (size_t)s * 64;
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                if (fmt == KERNELS_ACT_I16) {
                    __m512i lo = _mm512_sub_epi16(_mm512_shuffle_epi8(q[i], even), off16);
                    __m512i hi = _mm512_sub_epi16(_mm512_shuffle_epi8(q[i], odd), off16);
                    _mm512_store_si512(dst + (size_t)(2 * i) * 128, lo);
                    _mm512_store_si512(dst + (size_t)(2 * i + 1) * 128, hi);
                } else {
                    _mm512_store_si512(dst + (size_t)i * 128, q[i]);
                }
            }
            if (gi == 0 && j) kblock_scales(type, (kfields){rec, _mm512_setzero_si512(), 1}, ka, kb); /* a k-block starting inside a record */
            __m512 a[2], b[2];
            ilv_scales(type, rec, j, ka, kb, a, b);
            float *gs = sc + (size_t)(gi * 2 + s) * 64;
            _mm512_store_ps(gs, a[0]);
            if (int_has_min(type)) _mm512_store_ps(gs + 16, b[0]);
            if (int_halves(type)) _mm512_store_ps(gs + 32, a[1]);
            if (int_halves(type) && int_has_min(type)) _mm512_store_ps(gs + 48, b[1]);
        }
    }
}

/* One tile: NS sets of 16 packed rows times NT tokens over the panel's ng groups (absolute
 * groups g0...), continuing the accumulators in acc ([t][2][16] floats, MM_TB * 32 apart per
 * panel). Generic in type, format, NT and NS (compile-time constants after inlining); every
 * (row, token) does the same operations. The steps of a group go in two halves: the types with
 * scales per 16 scale each half's S on its own; the others carry the integer sums across. */
KERNELS_INLINE void panel_tile(uint32_t type, kernels_act fmt, const uint8_t *panel, int cols, int g0, int ng,
                               const uint8_t *X, size_t xs, int NT, int NS, float *acc) {
    const float *sc = (const float *)(panel + PANEL_BYTES);
    const int steps = fmt == KERNELS_ACT_I16 ? 16 : 8, halves = int_halves(type);
    __m512 facc[4][2];
    const act_group *grp[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        grp[t] = act_groups(X + xs * (size_t)t, fmt, cols);
#pragma GCC unroll 2
        for (int s = 0; s < NS; s++) facc[t][s] = g0 ? _mm512_load_ps(acc + (t * 2 + s) * 16) : _mm512_setzero_ps();
    }
    for (int gi = 0; gi < ng; gi++) {
        int g = g0 + gi;
        const uint8_t *pg = panel + (size_t)gi * 16 * 128;
        const float *gs = sc + (size_t)gi * 128;
        __m512i iacc[4][2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            if (h == 0 || halves)
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    /* the uint8 panel's offsets (zero for the int16 one) */
                    int32_t off[2] = {0, 0};
                    if (fmt == KERNELS_ACT_I8) group_offsets(type, fmt, &grp[t][g], off);
                    __m512i init = _mm512_set1_epi32(-off[h]);
#pragma GCC unroll 2
                    for (int s = 0; s < NS; s++) iacc[t][s] = init;
                }
#pragma GCC unroll 8
            for (int j = h * steps / 2; j < (h + 1) * steps / 2; j++) {
                __m512i w[2];
#pragma GCC unroll 2
                for (int s = 0; s < NS; s++) w[s] = _mm512_load_si512(pg + j * 128 + s * 64);
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    int32_t x4; /* an int16 pair or an int8 quad */
                    memcpy(&x4, X + xs * (size_t)t + (size_t)g * (fmt == KERNELS_ACT_I16 ? 64 : 32) + (size_t)j * 4, 4);
                    __m512i xb = _mm512_set1_epi32(x4);
#pragma GCC unroll 2
                    for (int s = 0; s < NS; s++)
                        iacc[t][s] = fmt == KERNELS_ACT_I16 ? _mm512_dpwssd_epi32(iacc[t][s], w[s], xb)
                                                            : _mm512_dpbusd_epi32(iacc[t][s], w[s], xb);
                }
            }
            if (h == 0 && !halves) continue;
            /* the defined order: S (or S_a, then S_b) scaled, then the offsets */
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const act_group *x = &grp[t][g];
                __m512 d = _mm512_set1_ps(x->d);
#pragma GCC unroll 2
                for (int s = 0; s < NS; s++) {
                    const float *v = gs + s * 64 + (halves ? 32 * h : 0);
                    facc[t][s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[t][s]), _mm512_mul_ps(_mm512_load_ps(v), d), facc[t][s]);
                    if (h == 1 && int_has_min(type) && halves) {
                        facc[t][s] = _mm512_fmadd_ps(_mm512_load_ps(gs + s * 64 + 16), _mm512_set1_ps(x->d * (float)x->sum16),
                                                     facc[t][s]);
                        facc[t][s] = _mm512_fmadd_ps(_mm512_load_ps(gs + s * 64 + 48),
                                                     _mm512_set1_ps(x->d * (float)(x->sum - x->sum16)), facc[t][s]);
                    } else if (h == 1 && int_has_min(type)) {
                        facc[t][s] = _mm512_fmadd_ps(_mm512_load_ps(gs + s * 64 + 16), _mm512_set1_ps(x->d * (float)x->sum),
                                                     facc[t][s]);
                    }
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
        for (int s = 0; s < NS; s++) _mm512_store_ps(acc + (t * 2 + s) * 16, facc[t][s]);
}

/* Fetch what pack_panel will read for rows [0, n) of W (rows rb apart, rs bytes each) and groups
 * [g0, g0 + ng): 32 slow strided streams, which the hardware prefetchers follow poorly, requested
 * while the current panel computes (thousands of cycles per panel, far more than the memory
 * latency). */
static void prefetch_panel(const uint8_t *W, size_t rb, size_t rs, int n, int G, int g0, int ng) {
    size_t lo = rs * (size_t)g0 / (size_t)G, hi = rs * (size_t)(g0 + ng) / (size_t)G; /* exact at block edges */
    for (int r = 0; r < n; r++)
        for (size_t o = lo & ~(size_t)63; o < hi; o += 64) _mm_prefetch((const char *)W + (size_t)r * rb + o, _MM_HINT_T0);
}

/* The same for interleaved weights: each tile's records of those groups, one stretch. */
static void prefetch_panel_ilv(const uint8_t *W, size_t rb, size_t rs, int n, int G, int g0, int ng) {
    size_t lo = rs * (size_t)g0 / (size_t)G, hi = (rs * (size_t)(g0 + ng) + (size_t)G - 1) / (size_t)G;
    for (int s = 0; s < n / 16; s++)
        for (size_t o = 16 * lo & ~(size_t)63; o < 16 * hi; o += 64)
            _mm_prefetch((const char *)W + (size_t)16 * s * rb + o, _MM_HINT_T0);
}

/* Small batches (a speculative verification, a server step of a few slots) of rows go through the
 * matvec, MV_T tokens or fewer at a time, each tile's chunks one after the other while its rows
 * are in the cache, so the weights come from memory once (interleaved tiles: see ilv_mul). The
 * packed matmul packs every panel for the few tokens, which costs more than the matvec's repeated
 * unpacking up to MV_MAX tokens of rows. kernels_mul on a 256 MB matrix, one core: rows of Q4_K,
 * 9 tokens, 77 ms by the matmul, 51 in chunks of 5 and 4 (Q8_0, 16 tokens: 51 -> 39 ms; beyond 16
 * the matmul wins for most types). */
#define MV_MAX 16
/* The chunk size for T tokens taken at most `most` at a time, evened out: 17 by 8 in 6, 6 and 5,
 * not 8, 8 and 1. */
static inline int mv_chunk(int T, int most) {
    int chunks = (T + most - 1) / most;
    return (T + chunks - 1) / chunks;
}

/* The packed matmul of rows (ilv = 0) or of interleaved tiles (ilv = 1: r0, r1 multiples of 16,
 * T > ILV_MV_MAX). */
KERNELS_INLINE void matmul_packed(uint32_t type, kernels_act fmt, const uint8_t *W, size_t row_bytes, int cols,
                                  const uint8_t *Xq, int T, float *Y, int ldy, int r0, int r1, int add, void *scratch,
                                  int ilv) {
    const size_t xs = act_row_bytes(fmt, cols);
    const int G = cols / 32;
    const size_t rs = (size_t)(G / int_block_groups(type)) * int_block_bytes(type);
    if (T <= MV_MAX && !ilv) {
        const int n = mv_chunk(T, MV_T);
        for (int r = r0; r < r1; r += 16)
            for (int t = 0; t < T; t += n)
                matvec_q16(type, fmt, W + (size_t)r * row_bytes, row_bytes, rs, r1 - r < 16 ? r1 - r : 16, cols,
                           Xq + xs * (size_t)t, xs, T - t < n ? T - t : n, Y + (size_t)t * ldy + (r - r0), ldy, add);
        return;
    }
    uint8_t *panel = scratch;
    float *acc = (float *)(panel + PANEL_BYTES + PANEL_SCALES * sizeof(float)); /* [MM_RB / 32][MM_TB][2][16] */
    for (int tb = 0; tb < T; tb += MM_TB) {
        int nt = T - tb < MM_TB ? T - tb : MM_TB;
        const uint8_t *X = Xq + xs * (size_t)tb;
        for (int rb0 = r0; rb0 < r1; rb0 += MM_RB) {
            int nr = r1 - rb0 < MM_RB ? r1 - rb0 : MM_RB, np = (nr + 31) / 32;
            for (int g0 = 0; g0 < G; g0 += MM_KG) {
                int ng = G - g0 < MM_KG ? G - g0 : MM_KG;
                for (int p = 0; p < np; p++) {
                    int n = nr - 32 * p < 32 ? nr - 32 * p : 32, t = 0;
                    float *pa = acc + (size_t)p * MM_TB * 32;
                    const uint8_t *pw = W + (size_t)(rb0 + 32 * p) * row_bytes;
                    if (ilv) pack_panel_ilv(type, fmt, pw, row_bytes, n, g0, ng, panel);
                    else pack_panel(type, fmt, pw, row_bytes, n, g0, ng, panel);
                    void (*const prefetch)(const uint8_t *, size_t, size_t, int, int, int, int) =
                        ilv ? prefetch_panel_ilv : prefetch_panel;
                    if (p + 1 < np) /* the next panel of this k-block, else the first of the next k-block */
                        prefetch(W + (size_t)(rb0 + 32 * (p + 1)) * row_bytes, row_bytes, rs,
                                 nr - 32 * (p + 1) < 32 ? nr - 32 * (p + 1) : 32, G, g0, ng);
                    else if (g0 + MM_KG < G)
                        prefetch(W + (size_t)rb0 * row_bytes, row_bytes, rs, nr < 32 ? nr : 32, G, g0 + MM_KG,
                                 G - g0 - MM_KG < MM_KG ? G - g0 - MM_KG : MM_KG);
                    if (n > 16) {
                        for (; t + PANEL_NT <= nt; t += PANEL_NT)
                            panel_tile(type, fmt, panel, cols, g0, ng, X + xs * t, xs, PANEL_NT, 2, pa + t * 32);
                        for (; t < nt; t++) panel_tile(type, fmt, panel, cols, g0, ng, X + xs * t, xs, 1, 2, pa + t * 32);
                    } else {
                        for (; t + PANEL_NT <= nt; t += PANEL_NT)
                            panel_tile(type, fmt, panel, cols, g0, ng, X + xs * t, xs, PANEL_NT, 1, pa + t * 32);
                        for (; t < nt; t++) panel_tile(type, fmt, panel, cols, g0, ng, X + xs * t, xs, 1, 1, pa + t * 32);
                    }
                }
            }
            for (int p = 0; p < np; p++)
                for (int t = 0; t < nt; t++)
                    for (int s = 0; s < 2; s++) {
                        int m = nr - 32 * p - 16 * s;
                        if (m > 0)
                            store_rows(Y + (size_t)(tb + t) * ldy + (rb0 - r0) + 32 * p + 16 * s,
                                       _mm512_load_ps(acc + ((size_t)p * MM_TB + t) * 32 + 16 * s), m > 16 ? 16 : m, add);
                    }
        }
    }
}

KERNELS_INLINE void matmul_blocks(uint32_t type, kernels_act fmt, const uint8_t *W, size_t row_bytes, int cols,
                                  const uint8_t *Xq, int T, float *Y, int ldy, int r0, int r1, int add, void *scratch) {
    matmul_packed(type, fmt, W, row_bytes, cols, Xq, T, Y, ldy, r0, r1, add, scratch, 0);
}

QUANT_INT_TYPES(KERNELS_DEFINE_INT)

/* The packed matmul of interleaved tiles, for the one type that takes it (ilv_mul), a copy per
 * activation format (as KERNELS_DEFINE_INT makes them for rows): inlined into ilv_mul, GCC's
 * register allocation of the panel tiles failed (8% slower than the rows'). */
static void ilv_matmul_Q6_K(kernels_act fmt, const void *W, int cols, const void *Xq, int T, float *Y, int ldy, int r0,
                            int r1, int add, void *scratch) {
    size_t rb = quant_row_bytes(GGML_TYPE_Q6_K, cols);
    if (fmt == KERNELS_ACT_I8)
        matmul_packed(GGML_TYPE_Q6_K, KERNELS_ACT_I8, W, rb, cols, Xq, T, Y, ldy, r0, r1, add, scratch, 1);
    else
        matmul_packed(GGML_TYPE_Q6_K, KERNELS_ACT_I16, W, rb, cols, Xq, T, Y, ldy, r0, r1, add, scratch, 1);
}
/* The types this set multiplies interleaved (its ilv_types). */
#define ILV_TYPES(X) X(Q4_0) X(Q4_K) X(Q6_K) X(MXFP4) X(Q8_0)
/* Two tiles, or one; a single token (decode) gets its own copy, compiled for exactly one token:
 * TinyStories-656K Q8_0 decode, one thread, its weights in the cache, 60-61k -> 67-71k tok/s
 * (same-run pairs; models read from memory are bound by it either way). */
#define ILV_MATVEC_CASE(NAME)                                                                         \
    case GGML_TYPE_##NAME:                                                                            \
        if (nt == 2) matvec_ilv(GGML_TYPE_##NAME, fmt, 2, tile, tile_bytes, cols, p, xs, g, m, y, ldy, add); \
        else if (m == 1) matvec_ilv(GGML_TYPE_##NAME, fmt, 1, tile, tile_bytes, cols, p, xs, g, 1, y, ldy, add); \
        else matvec_ilv(GGML_TYPE_##NAME, fmt, 1, tile, tile_bytes, cols, p, xs, g, m, y, ldy, add);         \
        break;
#define ILV_TYPE_BIT(NAME) | 1ull << GGML_TYPE_##NAME

/* The ops' ilv_mul: int16 activations, or int8 ones of the types that take them (kernels_mul
 * widens the others'), by matvec_ilv, ILV_MV_MAX tokens or fewer at a time, each tile's chunks
 * one after the other while it is in the cache. A prefill's too: the packed matmul, whose panels
 * the records make cheaper to pack, streams its weights from memory more slowly (one core, 32768 x
 * 2048 from memory, 128 tokens: Q4_0 357 -> 406 GFLOP/s, Q8_0 339 -> 381, Q4_K 317 -> 355, MXFP4
 * 369 -> 398; 48: Q4_0 316 -> 404). Except Q6_K above ILV_MV_MAX: its groups, merged from two
 * bit fields, cost the matvec the most to unpack (128 tokens: 320 by the matmul, 300 by the
 * matvec; 64: 272 and 299). */
static void ilv_mul(uint32_t type, const void *W, int cols, kernels_act fmt, const void *Xq, int T, float *Y, int ldy,
                    int r0, int r1, int add, void *scratch) {
    const size_t xs = act_row_bytes(fmt, cols);
    if (T > ILV_MV_MAX && type == GGML_TYPE_Q6_K) {
        ilv_matmul_Q6_K(fmt, W, cols, Xq, T, Y, ldy, r0, r1, add, scratch);
        return;
    }
    /* int16 activations as their byte planes (act_planes), int8 ones as they are; a token's
     * either way xs bytes after the previous one's */
    const uint8_t *planes = fmt == KERNELS_ACT_I16 ? act_planes(Xq, cols) : Xq;
    const size_t rb = quant_row_bytes(type, cols), tile_bytes = KERNELS_ILV_ROWS * rb;
    const int n = mv_chunk(T, ILV_MV_MAX);
    /* Two tiles at a time from 2 tokens on; 3 for Q8_0, whose signed weights against the lo plane
     * cost an xor per token and tile, which at 2 tokens outweighs the shared broadcasts; a single
     * token (decode) is bound by memory either way. A 2048 x 2048 Q4_0 matrix, one core, 17
     * tokens: 345 -> 409 GFLOP/s held in the cache, 350 -> 402 read from memory (32768 x 2048);
     * Q4_K, Q6_K, MXFP4 and Q8_0 gain 5-25% from 4 tokens up, and Q4_0 with int8 activations
     * 25-35%. */
    const int pair = T >= (type == GGML_TYPE_Q8_0 ? 3 : 2);
    for (int r = r0, nt; r < r1; r += nt * KERNELS_ILV_ROWS) {
        nt = pair && r + 2 * KERNELS_ILV_ROWS <= r1 ? 2 : 1;
        for (int t = 0; t < T; t += n) {
            const uint8_t *tile = (const uint8_t *)W + (size_t)r * rb, *p = planes + xs * (size_t)t;
            const act_group *g[ILV_MV_MAX];
            int m = T - t < n ? T - t : n;
            for (int i = 0; i < m; i++) g[i] = act_groups((const uint8_t *)Xq + xs * (size_t)(t + i), fmt, cols);
            float *y = Y + (size_t)t * ldy + (r - r0);
            switch (type) {
                ILV_TYPES(ILV_MATVEC_CASE)
            default: break;
            }
        }
    }
}

/* ---- element-wise helpers ---- */

/* exp_ps: see EXP_* in kernels_impl.h; times 2^n by vscalefps. */
static inline __m512 exp_ps(__m512 x) {
    x = _mm512_min_ps(x, _mm512_set1_ps(EXP_HI));
    __mmask16 small = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_LO), _CMP_LT_OQ);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_scalef_ps((__mmask16)~small, p, n);
}

static inline __mmask16 tail_mask(int left) { return left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1); }

/* ---- kernels_mix: rows of A weighted by X, the output columns along the lanes ----
 * A tile is MX_V vectors of 16 columns by up to MX_Q rows of X: for each k, row k of A is widened
 * once and FMA'd into every X row's accumulators with x_k broadcast, so each lane is the defined
 * fma chain over k; 16 independent chains cover the FMA latency. Columns past N are masked off
 * (loads of zeros, no stores). */
#define MX_Q 4
#define MX_V 4

KERNELS_INLINE void mix_tile(uint32_t type, const uint8_t *A, size_t rb, int K, int N, const float *X, int ldx,
                             int NQ, float *Y, int ldy, int j0) {
    __m512 acc[MX_Q][MX_V];
    __mmask16 m[MX_V];
#pragma GCC unroll 4
    for (int v = 0; v < MX_V; v++) {
        int left = N - j0 - 16 * v;
        m[v] = left <= 0 ? 0 : tail_mask(left);
#pragma GCC unroll 4
        for (int q = 0; q < NQ; q++) acc[q][v] = _mm512_setzero_ps();
    }
    for (int k = 0; k < K; k++) {
        const uint8_t *row = A + (size_t)k * rb;
        __m512 a[MX_V];
#pragma GCC unroll 4
        for (int v = 0; v < MX_V; v++)
            a[v] = type == GGML_TYPE_F32 ? _mm512_maskz_loadu_ps(m[v], (const float *)row + j0 + 16 * v)
                                         : widen_w(type, _mm256_maskz_loadu_epi16(m[v], row + 2 * (size_t)(j0 + 16 * v)));
#pragma GCC unroll 4
        for (int q = 0; q < NQ; q++) {
            __m512 xb = _mm512_set1_ps(X[(size_t)q * ldx + k]);
#pragma GCC unroll 4
            for (int v = 0; v < MX_V; v++) acc[q][v] = _mm512_fmadd_ps(xb, a[v], acc[q][v]);
        }
    }
#pragma GCC unroll 4
    for (int q = 0; q < NQ; q++)
#pragma GCC unroll 4
        for (int v = 0; v < MX_V; v++)
            if (m[v]) _mm512_mask_storeu_ps(Y + (size_t)q * ldy + j0 + 16 * v, m[v], acc[q][v]);
}

KERNELS_INLINE void mix_typed(uint32_t type, const void *A, size_t rb, int K, int N, const float *X, int ldx, int R,
                              float *Y, int ldy) {
    for (int j0 = 0; j0 < N; j0 += 16 * MX_V)
        for (int r = 0; r < R; r += MX_Q) {
            const float *x = X + (size_t)r * ldx;
            float *y = Y + (size_t)r * ldy;
            switch (R - r < MX_Q ? R - r : MX_Q) {
            case 1: mix_tile(type, A, rb, K, N, x, ldx, 1, y, ldy, j0); break;
            case 2: mix_tile(type, A, rb, K, N, x, ldx, 2, y, ldy, j0); break;
            case 3: mix_tile(type, A, rb, K, N, x, ldx, 3, y, ldy, j0); break;
            default: mix_tile(type, A, rb, K, N, x, ldx, 4, y, ldy, j0);
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

static void rms_norm(float *out, const float *x, const float *w, int n, float eps) {
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    double ss = _mm512_reduce_add_ps(acc);
    __m512 scale = _mm512_set1_ps((float)(1.0 / sqrt(ss / n + eps)));
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), scale);
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
    }
}

/* x * sigmoid(k x) with k = -exp's argument's slope (see kernels_glu). */
static inline __m512 x_sigmoid(__m512 x, __m512 arg) {
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(arg)));
}

static void glu(kernels_glu act, float *out, const float *g, const float *u, int n) {
    const __m512 lim = _mm512_set1_ps(OAI_LIMIT);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 x = _mm512_maskz_loadu_ps(m, g + i), v = _mm512_maskz_loadu_ps(m, u + i), r;
        if (act == KERNELS_SILU) {
            r = _mm512_mul_ps(x_sigmoid(x, _mm512_sub_ps(_mm512_setzero_ps(), x)), v);
        } else if (act == KERNELS_GELU_TANH) {
            __m512 y = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(GELU_A), x), _mm512_mul_ps(x, x), x);
            r = _mm512_mul_ps(x_sigmoid(x, _mm512_mul_ps(_mm512_set1_ps(GELU_2C), y)), v);
        } else {
            x = _mm512_min_ps(x, lim);
            v = _mm512_max_ps(_mm512_min_ps(v, lim), _mm512_sub_ps(_mm512_setzero_ps(), lim));
            r = _mm512_mul_ps(x_sigmoid(x, _mm512_mul_ps(_mm512_set1_ps(-OAI_ALPHA), x)),
                              _mm512_add_ps(v, _mm512_set1_ps(1.0f)));
        }
        _mm512_mask_storeu_ps(out + i, m, r);
    }
}

static void softcap(float *x, int n, float scale, float cap) {
    const __m512 k = _mm512_set1_ps(scale / cap), c = _mm512_set1_ps(cap), one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 z = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), k);
        __m512 e = exp_ps(_mm512_mul_ps(_mm512_set1_ps(-2.0f), _mm512_abs_ps(z)));
        __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
        /* the sign of z onto t */
        t = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), _mm512_and_si512(_mm512_castps_si512(z),
                                                                                            _mm512_set1_epi32(INT32_MIN))));
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(c, t));
    }
}

static float softmax_span(float *p, int n, float scale, float *max) {
    __m512 s = _mm512_set1_ps(scale), mv = _mm512_set1_ps(*max);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + i), s);
        _mm512_mask_storeu_ps(p + i, m, v);
        mv = _mm512_mask_max_ps(mv, m, mv, v);
    }
    float mx = _mm512_reduce_max_ps(mv);
    __m512 mm = _mm512_set1_ps(mx), sum = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p + i), mm));
        _mm512_mask_storeu_ps(p + i, m, e);
        sum = _mm512_mask_add_ps(sum, m, sum, e);
    }
    *max = mx;
    return _mm512_reduce_add_ps(sum);
}

static void f32_to_f16(uint16_t *dst, const float *src, int n) {
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

/* Sixteen codes (signed bytes) times the scale. */
static inline __m512 scaled16(__m128i q, __m512 d) { return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q))); }

/* Q8_0 and Q4_0 blocks: the 32 codes (x86_block_codes) times the F16 scale (d * q is exact in
 * f32, as in quant_dequantize_row). */
static void dequantize(uint32_t type, const uint8_t *src, float *dst, int n) {
    if (type != GGML_TYPE_Q8_0 && type != GGML_TYPE_Q4_0) {
        quant_dequantize_row(type, src, dst, n);
        return;
    }
    bool q8 = type == GGML_TYPE_Q8_0;
    size_t bytes = q8 ? sizeof(block_Q8_0) : sizeof(block_Q4_0);
    for (int i = 0; i < n; i += 32, src += bytes) {
        __m512 d = _mm512_set1_ps(x86_block_scale(src));
        __m128i lo, hi;
        x86_block_codes(q8, src, &lo, &hi);
        _mm512_storeu_ps(dst + i, scaled16(lo, d));
        _mm512_storeu_ps(dst + i + 16, scaled16(hi, d));
    }
}

/* Four independent chains of 64-byte loads: a core's full read bandwidth. */
static uint64_t read_bytes(const void *p, size_t n) {
    const uint8_t *b = p;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 256) {
        a0 = _mm512_xor_si512(a0, _mm512_load_si512(b + i));
        a1 = _mm512_xor_si512(a1, _mm512_load_si512(b + i + 64));
        a2 = _mm512_xor_si512(a2, _mm512_load_si512(b + i + 128));
        a3 = _mm512_xor_si512(a3, _mm512_load_si512(b + i + 192));
    }
    __m512i x = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    __m256i y = _mm256_xor_si256(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64(x, 1));
    __m128i h = _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
    return (uint64_t)_mm_cvtsi128_si64(h) ^ (uint64_t)_mm_extract_epi64(h, 1);
}

const kernels_ops kernels_avx512_ops = {
    .matvec = matvec,
    .matmul = matmul,
    .quantize_act = quantize_act,
    .q = {QUANT_INT_TYPES(KERNELS_INT_ENTRY)},
    .ilv_types = 0 ILV_TYPES(ILV_TYPE_BIT),
    .ilv_mul = ilv_mul,
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
