/* AVX2 + FMA + F16C kernels (8 f32 lanes), the same scheme as the AVX-512 set: the integer types
 * take integer activations (matvec 8 rows at a time with an exact reduction, matmul a packed
 * panel of 16 rows; see the integer section); the float types one f32 chain per lane and row,
 * whatever the batch (their section). */
#if defined(__x86_64__) && defined(__AVX2__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "kernels/kernels_x86.h"
#include "tensor/quant.h"

/* acc plus the sums of pairs of int16 products of a and b: vpmaddwd then vpaddd, or one vpdpwssd
 * where kernels_avxvnni.c compiles this file with AVX-VNNI. The same integers either way. */
KERNELS_INLINE __m256i madd_add(__m256i acc, __m256i a, __m256i b) {
#ifdef KERNELS_AVX_VNNI
    return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

static inline float hsum(__m256 v) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

/* ---- F32, F16, BF16 ----
 * A row's result for a token is defined by its 8 lanes: lane l is the f32 fma chain, from 0, over
 * the row's elements k = l (mod 8) in increasing k, weights widened to f32 exactly (a last
 * partial step of 8 reads zeros past the row); the result is hsum of the lanes (the AVX-512 set's
 * definition with 8 lanes). Every path computes those chains, so each row's bits are the same
 * whatever the batch:
 * - float_tile (decode and 2-3 tokens): a few rows at once, the weights widened in registers,
 *   rows x tokens independent chains (4 x 1, 4 x 2, 3 x 3: at most 13 of the 16 registers);
 * - float_matmul (4 tokens and more): 4 rows of a k-block widened once into an f32 panel in L1,
 *   then tiles of 3 tokens: 12 chains (all 16 registers with the 3 tokens' vectors and a row's),
 *   7 loads per 12 FMAs and no conversion, so the FMAs bound it; 4 rows by 3 tokens rather than
 *   3 by 4, as the AVX-512 set's 6 by 4: the activations come from L2, the panel from L1. The
 *   next panel's weights are fetched while a panel computes. */

/* Elements [i, i + n) of a row (n <= 8), zeros past them. */
KERNELS_INLINE __m256 load_w_part(uint32_t type, const uint8_t *w, int i, int n) {
    size_t esz = type == GGML_TYPE_F32 ? 4 : 2;
    uint8_t b[32] = {0};
    memcpy(b, w + esz * (size_t)i, esz * (size_t)n);
    if (type == GGML_TYPE_F32) return _mm256_loadu_ps((const float *)b);
    __m128i h = _mm_loadu_si128((const __m128i *)b);
    if (type == GGML_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); /* bf16 */
}

KERNELS_INLINE __m256 load_w(uint32_t type, const uint8_t *w, int i) {
    if (type == GGML_TYPE_F32) return _mm256_loadu_ps((const float *)w + i);
    __m128i h = _mm_loadu_si128((const __m128i *)(w + 2 * (size_t)i));
    if (type == GGML_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); /* bf16 */
}

/* Activations [i, i + n) (n <= 8), zeros past them. */
KERNELS_INLINE __m256 load_x_part(const float *x, int i, int n) {
    float b[8] = {0};
    memcpy(b, x + i, sizeof(float) * (size_t)n);
    return _mm256_loadu_ps(b);
}

#define FV_R 4 /* rows of a float_tile at most */
#define FV_T 3 /* its tokens at most */

/* Rows [0, nr) (nr <= FV_R) of W (rows rb apart) times nt <= FV_T tokens (X, cols apart) into
 * out[t][r]; nr and nt constants after inlining, so the chains stay in registers. The rows are as
 * many streams, which the hardware prefetchers follow poorly: the next tile's rows are fetched
 * into L2 as one linear stream instead, as many bytes per step as this tile reads. */
KERNELS_INLINE void float_tile(uint32_t type, const uint8_t *W, size_t rb, int nr, int cols, const float *X, int nt,
                               float out[FV_T][FV_R]) {
    __m256 acc[FV_T][FV_R];
#pragma GCC unroll 3
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) acc[t][r] = _mm256_setzero_ps();
    const size_t esz = type == GGML_TYPE_F32 ? 4 : 2;
    int nu = cols / 8;
    for (int u = 0; u < nu; u++) {
        for (size_t o = 0; o < (size_t)nr * 8 * esz; o += 64)
            _mm_prefetch((const char *)W + nr * rb + (size_t)nr * 8 * esz * (size_t)u + o, _MM_HINT_T1);
        __m256 w[FV_R];
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) w[r] = load_w(type, W + r * rb, 8 * u);
#pragma GCC unroll 3
        for (int t = 0; t < nt; t++) {
            __m256 x = _mm256_loadu_ps(X + (size_t)t * cols + 8 * u);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) acc[t][r] = _mm256_fmadd_ps(w[r], x, acc[t][r]);
        }
    }
    if (cols % 8) {
        __m256 w[FV_R];
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) w[r] = load_w_part(type, W + r * rb, 8 * nu, cols % 8);
#pragma GCC unroll 3
        for (int t = 0; t < nt; t++) {
            __m256 x = load_x_part(X + (size_t)t * cols, 8 * nu, cols % 8);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) acc[t][r] = _mm256_fmadd_ps(w[r], x, acc[t][r]);
        }
    }
#pragma GCC unroll 3
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 4
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

#define FM_R 4    /* rows of a panel */
#define FM_T 3    /* tokens of a tile */
#define FM_KB 512 /* elements of a k-block (a panel: 8 KB of f32) */
#define FM_TB 96  /* tokens whose chains are kept between k-blocks (12 KB) */

/* The 12 chains of a panel (FM_R rows of kn elements, f32) and FM_T tokens (xp[t]: their elements
 * of the k-block), continued from part[r][t] (or from 0 when first) and stored back. The tokens'
 * activations (from L2) are held while each row's weights (from the panel in L1) pass. */
KERNELS_INLINE void float_micro(const float panel[FM_R][FM_KB], const float *const xp[FM_T], int kn,
                                __m256 part[FM_R][FM_T], int first) {
    __m256 acc[FM_R][FM_T];
#pragma GCC unroll 4
    for (int r = 0; r < FM_R; r++)
#pragma GCC unroll 3
        for (int t = 0; t < FM_T; t++) acc[r][t] = first ? _mm256_setzero_ps() : part[r][t];
    int nu = kn / 8;
    for (int u = 0; u < nu; u++) {
        __m256 x[FM_T];
#pragma GCC unroll 3
        for (int t = 0; t < FM_T; t++) x[t] = _mm256_loadu_ps(xp[t] + 8 * u);
#pragma GCC unroll 4
        for (int r = 0; r < FM_R; r++) {
            __m256 w = _mm256_load_ps(&panel[r][8 * u]);
#pragma GCC unroll 3
            for (int t = 0; t < FM_T; t++) acc[r][t] = _mm256_fmadd_ps(w, x[t], acc[r][t]);
        }
    }
    if (kn % 8) { /* the panel holds zeros past the row */
        __m256 x[FM_T];
#pragma GCC unroll 3
        for (int t = 0; t < FM_T; t++) x[t] = load_x_part(xp[t], 8 * nu, kn % 8);
#pragma GCC unroll 4
        for (int r = 0; r < FM_R; r++) {
            __m256 w = _mm256_load_ps(&panel[r][8 * nu]);
#pragma GCC unroll 3
            for (int t = 0; t < FM_T; t++) acc[r][t] = _mm256_fmadd_ps(w, x[t], acc[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < FM_R; r++)
#pragma GCC unroll 3
        for (int t = 0; t < FM_T; t++) part[r][t] = acc[r][t];
}

/* Rows [0, nr) of W, elements [k0, k0 + kn), widened into the panel; zeros past them. */
KERNELS_INLINE void float_panel(uint32_t type, const uint8_t *W, size_t rb, int nr, int k0, int kn,
                                float panel[FM_R][FM_KB]) {
    int nu = kn / 8, np = (kn + 7) / 8;
    for (int r = 0; r < FM_R; r++) {
        const uint8_t *w = W + (size_t)r * rb;
        if (r >= nr) {
            for (int u = 0; u < np; u++) _mm256_store_ps(&panel[r][8 * u], _mm256_setzero_ps());
            continue;
        }
        for (int u = 0; u < nu; u++) _mm256_store_ps(&panel[r][8 * u], load_w(type, w, k0 + 8 * u));
        if (kn % 8) _mm256_store_ps(&panel[r][8 * nu], load_w_part(type, w, k0 + 8 * nu, kn % 8));
    }
}

KERNELS_INLINE void float_matmul(uint32_t type, const uint8_t *W, size_t rb, int cols, const float *X, int T, float *Y,
                                 int ldy, int r0, int r1, int add) {
    static const float zeros[FM_KB] __attribute__((aligned(32)));
    float panel[FM_R][FM_KB] __attribute__((aligned(32)));
    __m256 part[FM_TB / FM_T][FM_R][FM_T];
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

/* Decode takes 4 rows (4 weight streams, 4 chains), 2-3 tokens the tiles, more the panels. */
KERNELS_INLINE void float_mul(uint32_t type, const uint8_t *W, size_t rb, int cols, const float *X, int T, float *Y,
                              int ldy, int r0, int r1, int add) {
    switch (T) {
    case 1: float_tiles(type, W, rb, cols, X, 1, 4, Y, ldy, r0, r1, add); break;
    case 2: float_tiles(type, W, rb, cols, X, 2, 4, Y, ldy, r0, r1, add); break;
    case 3: float_tiles(type, W, rb, cols, X, 3, 3, Y, ldy, r0, r1, add); break;
    default: float_matmul(type, W, rb, cols, X, T, Y, ldy, r0, r1, add); break;
    }
}

static void matvec(uint32_t type, const void *W, size_t row_bytes, int cols, const float *x, float *y, int r0, int r1,
                   int add) {
    switch (type) {
    case GGML_TYPE_F32: float_tiles(GGML_TYPE_F32, W, row_bytes, cols, x, 1, 4, y, 0, r0, r1, add); break;
    case GGML_TYPE_F16: float_tiles(GGML_TYPE_F16, W, row_bytes, cols, x, 1, 4, y, 0, r0, r1, add); break;
    case GGML_TYPE_BF16: float_tiles(GGML_TYPE_BF16, W, row_bytes, cols, x, 1, 4, y, 0, r0, r1, add); break;
    default: break;
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
 * matvec: 8 rows at a time. Each row's products of a group go to one vector of 8 partial sums
 * (vpmaddwd on int16; int8 activations are widened first), an exact reduction puts each row's
 * S (S_a and S_b for the types with scales per 16) in its own lane, and the f32 scaling runs on 8
 * rows at once.
 * matmul: up to 16 rows are first packed (each group's weights as signed int16, transposed so a
 * vector holds one k-pair of 8 rows, and the rows' scales as f32), then every tile of tokens
 * multiplies the packed panel with broadcast activation pairs: no reduction, one vpmaddwd and one
 * vpaddd per 16 multiply-adds. Both give S exactly, so their results agree bit for bit. Both are
 * specialised per type and format (KERNELS_DEFINE_INT). What each type brings: how a group's
 * integers unpack (weights_i16) and where its scales come from (group_scales, kblock_scales). */

static void quantize_act(kernels_act fmt, const float *x, int cols, int g0, int g1, void *dst) {
    float qmax = fmt == KERNELS_ACT_I16 ? ACT_QMAX_I16 : ACT_QMAX_I8;
    act_group *grp = (act_group *)((uint8_t *)dst + act_q_bytes(fmt, cols));
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int g = g0; g < g1; g++) {
        __m256 v[4], m = _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 32 * g + 8 * i);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
        __m256 id = _mm256_set1_ps(amax != 0.0f ? qmax / amax : 0.0f);
        __m256i q[4], sum = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
            sum = _mm256_add_epi32(sum, q[i]);
        }
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
        grp[g].d = amax / qmax;
        grp[g].sum = _mm_cvtsi128_si32(s4);
        __m256i h16 = _mm256_add_epi32(q[0], q[1]); /* weights 0-15 */
        __m128i s16 = _mm_add_epi32(_mm256_castsi256_si128(h16), _mm256_extracti128_si256(h16, 1));
        s16 = _mm_add_epi32(s16, _mm_shuffle_epi32(s16, _MM_SHUFFLE(1, 0, 3, 2)));
        s16 = _mm_add_epi32(s16, _mm_shuffle_epi32(s16, _MM_SHUFFLE(2, 3, 0, 1)));
        grp[g].sum16 = _mm_cvtsi128_si32(s16);
        /* the packs work within 128-bit lanes; the permutes restore the order */
        __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
        if (fmt == KERNELS_ACT_I16) {
            _mm256_storeu_si256((__m256i *)((int16_t *)dst + 32 * g), _mm256_permute4x64_epi64(p01, 0xD8));
            _mm256_storeu_si256((__m256i *)((int16_t *)dst + 32 * g + 16), _mm256_permute4x64_epi64(p23, 0xD8));
        } else {
            __m256i b = _mm256_packs_epi16(p01, p23);
            b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)((int8_t *)dst + 32 * g), b);
        }
    }
}

static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline __m256i load16_u8(const uint8_t *p) { return _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p)); }

/* 16 bytes of nibbles as int16: w[0] the low nibbles (weights 0-15), w[1] the high ones. */
KERNELS_INLINE void nibbles_i16(const uint8_t *qs, __m256i w[2]) {
    __m256i v = load16_u8(qs);
    w[0] = _mm256_and_si256(v, _mm256_set1_epi16(0xF));
    w[1] = _mm256_srli_epi16(v, 4);
}

/* The same nibbles as indices into 16 int8 values. */
KERNELS_INLINE void lookup_i16(const uint8_t *qs, const int8_t values[16], __m256i w[2]) {
    const __m128i lo4 = _mm_set1_epi8(0xF), table = _mm_loadu_si128((const __m128i *)values);
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    w[0] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(table, _mm_and_si128(b, lo4)));
    w[1] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), lo4)));
}

/* Bits 16h .. 16h+15 of m as int16 lanes of -1 (set) or 0. */
KERNELS_INLINE __m256i bits16(uint32_t m, int h) {
    const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, (short)0x8000);
    return _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16((short)(m >> (16 * h))), bit), bit);
}

/* Bit j of each of 16 bytes as int16 lanes of -1 (set) or 0. */
KERNELS_INLINE __m256i bit_of_bytes(const uint8_t *q, int j) {
    const __m256i bit = _mm256_set1_epi16((short)(1 << j));
    return _mm256_cmpeq_epi16(_mm256_and_si256(load16_u8(q), bit), bit);
}

/* The 2-bit fields at bits 2p of 32 bytes (Q2_K, Q3_K) as int16. */
KERNELS_INLINE void crumbs_i16(const uint8_t *q, int p, __m256i w[2]) {
    __m128i n = _mm_cvtsi32_si128(2 * p);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) w[h] = _mm256_and_si256(_mm256_srl_epi16(load16_u8(q + 16 * h), n), _mm256_set1_epi16(3));
}

/* The nibbles j % 2 of 32 bytes (Q4_K, Q5_K) as int16. */
KERNELS_INLINE void nibble_run_i16(const uint8_t *q, int j, __m256i w[2]) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256i v = load16_u8(q + 16 * h);
        w[h] = j % 2 ? _mm256_srli_epi16(v, 4) : _mm256_and_si256(v, _mm256_set1_epi16(0xF));
    }
}

/* IQ3_S group j of block b: eight grid entries of four magnitudes, signs from 32 bits. */
KERNELS_INLINE void iq3_s_i16(const uint8_t *b, int j, __m256i w[2]) {
    __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b + offsetof(block_IQ3_S, qs) + 8 * j)));
    __m256i high = _mm256_sllv_epi32(_mm256_set1_epi32(b[offsetof(block_IQ3_S, qh) + j]), _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1));
    idx = _mm256_or_si256(idx, _mm256_and_si256(high, _mm256_set1_epi32(256))); /* bit i of qh to bit 8 of entry i */
    __m256i mag = _mm256_i32gather_epi32((const int *)quant_iq3_s_grid, idx, 4);
    uint32_t signs = ld32(b + offsetof(block_IQ3_S, signs) + 4 * j);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256i v = _mm256_cvtepu8_epi16(h ? _mm256_extracti128_si256(mag, 1) : _mm256_castsi256_si128(mag));
        __m256i neg = bits16(signs, h);
        w[h] = _mm256_sub_epi16(_mm256_xor_si256(v, neg), neg);
    }
}

/* Group g's 32 weights of a row as int16, w[0] weights 0-15, w[1] 16-31: the integers w of the
 * definition, except Q4_0 (its nibbles) and Q6_K (the value + 32), whose offsets come out through
 * the activations' sums (matvec) or are subtracted when packing (matmul). */
KERNELS_INLINE void weights_i16(uint32_t type, const uint8_t *row, int g, __m256i w[2]) {
    const uint8_t *b = int_block(type, row, g);
    const int j = g % int_block_groups(type);
    const __m256i c16 = _mm256_set1_epi16(16);
    switch (type) {
    case GGML_TYPE_Q8_0:
        w[0] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 2)));
        w[1] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 18)));
        break;
    case GGML_TYPE_Q4_0: nibbles_i16(b + 2, w); break;
    case GGML_TYPE_Q4_1: nibbles_i16(b + 4, w); break;
    case GGML_TYPE_Q5_0: /* (q | h << 4) - 16: minus 16 where the fifth bit is clear */
        nibbles_i16(b + 6, w);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) w[h] = _mm256_sub_epi16(w[h], _mm256_andnot_si256(bits16(ld32(b + 2), h), c16));
        break;
    case GGML_TYPE_Q5_1:
        nibbles_i16(b + 8, w);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) w[h] = _mm256_add_epi16(w[h], _mm256_and_si256(bits16(ld32(b + 4), h), c16));
        break;
    case GGML_TYPE_IQ4_NL: lookup_i16(b + 2, quant_iq4_values, w); break;
    case GGML_TYPE_MXFP4: lookup_i16(b + 1, quant_e2m1x2_values, w); break;
    case GGML_TYPE_Q2_K: crumbs_i16(b + offsetof(block_Q2_K, qs) + 32 * (j / 4), j % 4, w); break;
    case GGML_TYPE_Q3_K: /* minus 4 where the high bit is clear */
        crumbs_i16(b + offsetof(block_Q3_K, qs) + 32 * (j / 4), j % 4, w);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
            w[h] = _mm256_sub_epi16(w[h], _mm256_andnot_si256(bit_of_bytes(b + offsetof(block_Q3_K, hmask) + 16 * h, j),
                                                              _mm256_set1_epi16(4)));
        break;
    case GGML_TYPE_Q4_K: nibble_run_i16(b + offsetof(block_Q4_K, qs) + 32 * (j / 2), j, w); break;
    case GGML_TYPE_Q5_K:
        nibble_run_i16(b + offsetof(block_Q5_K, qs) + 32 * (j / 2), j, w);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
            w[h] = _mm256_add_epi16(w[h], _mm256_and_si256(bit_of_bytes(b + offsetof(block_Q5_K, qh) + 16 * h, j), c16));
        break;
    case GGML_TYPE_Q6_K: {
        __m128i nib = _mm_cvtsi32_si128(4 * Q6K_NIBBLE(j)), sh = _mm_cvtsi32_si128(Q6K_QH_SHIFT(j));
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i ql = load16_u8(b + Q6K_QL(j) + 16 * h), qh = load16_u8(b + Q6K_QH(j) + 16 * h);
            w[h] = _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi16(ql, nib), _mm256_set1_epi16(0xF)),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, sh), _mm256_set1_epi16(3)), 4));
        }
        break;
    }
    case GGML_TYPE_IQ4_XS: lookup_i16(b + offsetof(block_IQ4_XS, qs) + 16 * j, quant_iq4_values, w); break;
    default: iq3_s_i16(b, j, w);
    }
}

/* What weights_i16 adds to each weight: subtracted when packing. */
KERNELS_INLINE int16_t stored_offset(uint32_t type) {
    return type == GGML_TYPE_Q4_0 ? 8 : type == GGML_TYPE_Q6_K ? 32 : 0;
}

/* In lane j (= 4L + i), the sum of 128-bit lane L of R[i]. */
KERNELS_INLINE __m256i transpose_add4(const __m256i R[4]) {
    __m256i s01 = _mm256_add_epi32(_mm256_unpacklo_epi32(R[0], R[1]), _mm256_unpackhi_epi32(R[0], R[1]));
    __m256i s23 = _mm256_add_epi32(_mm256_unpacklo_epi32(R[2], R[3]), _mm256_unpackhi_epi32(R[2], R[3]));
    return _mm256_add_epi32(_mm256_unpacklo_epi64(s01, s23), _mm256_unpackhi_epi64(s01, s23));
}

/* Eight vectors of 8 partial sums to one vector of totals: with row r's partial sums in
 * P[SLOT8(r)], lane r of the result is row r's total. */
#define SLOT8(r) (2 * ((r) % 4) + (r) / 4)
KERNELS_INLINE __m256i reduce8(const __m256i P[8]) {
    __m256i R[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        R[i] = _mm256_add_epi32(_mm256_permute2x128_si256(P[2 * i], P[2 * i + 1], 0x20),
                                _mm256_permute2x128_si256(P[2 * i], P[2 * i + 1], 0x31));
    return transpose_add4(R);
}

/* The 16-bit word at the bottom of each 32-bit lane, packed into 8 words. */
KERNELS_INLINE __m128i low_words(__m256i v) {
    const __m256i pick = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9,
                                          12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, pick), 0x08));
}

/* fp16 values in the low 16 bits of each dword, as f32. */
KERNELS_INLINE __m256 low_halves(__m256i v) { return _mm256_cvtph_ps(low_words(v)); }

/* The dword at base + idx of 8 rows. */
KERNELS_INLINE __m256i gather_rows(const uint8_t *base, __m256i idx) { return _mm256_i32gather_epi32((const int *)base, idx, 1); }

/* (v >> shift) & mask as f32. */
KERNELS_INLINE __m256 field_ps(__m256i v, int shift, int mask) {
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, shift), _mm256_set1_epi32(mask)));
}

/* MXFP4's scales 2^(e-128) (quant_e8m0_half) from E8M0 bytes, one per dword: the exponent e - 1,
 * or below e = 2 a subnormal's bit; e = 255 is NaN. */
KERNELS_INLINE __m256 e8m0_half(__m256i e) {
    __m256i v = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    v = _mm256_blendv_epi8(v, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e));
    v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(e, _mm256_set1_epi32(0xFF)));
    return _mm256_castsi256_ps(v);
}

/* Where kblock_scales reads 8 rows' 256-blocks: plain rows (blk: row 0's block; idx: the rows'
 * byte offsets from it), whose fields take gathers, or half h of an interleaved record (blk: the
 * record), whose region holds a dword of each row per 32 bytes, its fp16 d (Q3_K's, Q6_K's) in
 * the array ahead of it. */
typedef struct kfields {
    const uint8_t *blk;
    __m256i idx;
    int ilv, h;
} kfields;

/* The dword at block offset o of the 8 rows. */
KERNELS_INLINE __m256i field_dword(uint32_t type, kfields f, size_t o) {
    if (!f.ilv) return gather_rows(f.blk + o, f.idx);
    return _mm256_loadu_si256((const __m256i *)(f.blk + ilv_head(type) + 64 * ilv_line_of(type, o) + 32 * (size_t)f.h));
}

/* The fp16 at block offset o, the block's last two bytes, as f32 (in rows from the dword ending
 * there: one from o would read past the last row). */
KERNELS_INLINE __m256 field_last_half(uint32_t type, kfields f, size_t o) {
    if (!f.ilv) return low_halves(_mm256_srli_epi32(gather_rows(f.blk + o - 2, f.idx), 16));
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(f.blk + 16 * (size_t)f.h)));
}

/* The scales of a 256-block of 8 rows (f), per sub-block of 16 weights i (0..15): a in ka[i], b in
 * kb[i]; the types with one scale per 32 fill only the even i (group j: 2j). All exact products.
 * Unpacked once per block: the 6-bit scales of Q4_K cost more to unpack than a group's
 * arithmetic. */
KERNELS_INLINE void kblock_scales(uint32_t type, kfields f, __m256 ka[16], __m256 kb[16]) {
    switch (type) {
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: {
        __m256i dd = field_dword(type, f, 0); /* d | dmin << 16 */
        __m256 d = low_halves(dd), ndmin = _mm256_sub_ps(_mm256_setzero_ps(), low_halves(_mm256_srli_epi32(dd, 16)));
        __m256i a = field_dword(type, f, 4), b = field_dword(type, f, 8), c = field_dword(type, f, 12);
        /* quant_q4_K_scales64 on 8 rows at once: four sub-blocks per word */
        const __m256i lo6 = _mm256_set1_epi32(0x3F3F3F3F), lo4 = _mm256_set1_epi32(0x0F0F0F0F);
        const __m256i top2 = _mm256_set1_epi32(0x30303030);
        __m256i sc[2] = {_mm256_and_si256(a, lo6),
                         _mm256_or_si256(_mm256_and_si256(c, lo4), _mm256_and_si256(_mm256_srli_epi32(a, 2), top2))};
        __m256i m[2] = {_mm256_and_si256(b, lo6),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(c, 4), lo4), _mm256_and_si256(_mm256_srli_epi32(b, 2), top2))};
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            ka[2 * j] = _mm256_mul_ps(d, field_ps(sc[j / 4], 8 * (j % 4), 0xFF));
            kb[2 * j] = _mm256_mul_ps(ndmin, field_ps(m[j / 4], 8 * (j % 4), 0xFF));
        }
        break;
    }
    case GGML_TYPE_Q6_K: {
        __m256 d = field_last_half(type, f, offsetof(block_Q6_K, d));
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m256i w = field_dword(type, f, offsetof(block_Q6_K, scales) + 4 * q);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) /* byte k, sign-extended */
                ka[4 * q + k] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(w, 24 - 8 * k), 24)));
        }
        break;
    }
    case GGML_TYPE_Q3_K: {
        const size_t s = offsetof(block_Q3_K, scales);
        __m256 d = field_last_half(type, f, offsetof(block_Q3_K, d));
        __m256i lo[2] = {field_dword(type, f, s), field_dword(type, f, s + 4)}, hi = field_dword(type, f, s + 8);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) { /* nibble i / 8 of byte i % 8, then bits 2 (i / 4) of byte 8 + i % 4 */
            __m256i v = _mm256_and_si256(_mm256_srli_epi32(lo[(i % 8) / 4], 8 * (i % 4) + 4 * (i / 8)), _mm256_set1_epi32(0xF));
            v = _mm256_or_si256(v, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hi, 8 * (i % 4) + 2 * (i / 4)),
                                                                     _mm256_set1_epi32(3)), 4));
            ka[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(v, _mm256_set1_epi32(32))));
        }
        break;
    }
    case GGML_TYPE_Q2_K: {
        __m256i dd = field_dword(type, f, offsetof(block_Q2_K, d)); /* d | dmin << 16 */
        __m256 d = low_halves(dd), ndmin = _mm256_sub_ps(_mm256_setzero_ps(), low_halves(_mm256_srli_epi32(dd, 16)));
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m256i w = field_dword(type, f, offsetof(block_Q2_K, scales) + 4 * q);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                ka[4 * q + k] = _mm256_mul_ps(d, field_ps(w, 8 * k, 0xF));
                kb[4 * q + k] = _mm256_mul_ps(ndmin, field_ps(w, 8 * k + 4, 0xF));
            }
        }
        break;
    }
    case GGML_TYPE_IQ4_XS: {
        __m256i dh = field_dword(type, f, 0), l = field_dword(type, f, offsetof(block_IQ4_XS, scales_l)); /* d | scales_h << 16 */
        __m256 d = low_halves(dh);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m256i ls = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(l, 4 * j), _mm256_set1_epi32(0xF)),
                                         _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(dh, 16 + 2 * j), _mm256_set1_epi32(3)), 4));
            ka[2 * j] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))));
        }
        break;
    }
    default: { /* IQ3_S */
        __m256 d = low_halves(field_dword(type, f, 0));
        __m256i s = field_dword(type, f, offsetof(block_IQ3_S, scales));
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            ka[2 * j] = _mm256_mul_ps(d, _mm256_fmadd_ps(field_ps(s, 4 * j, 0xF), _mm256_set1_ps(2.0f), _mm256_set1_ps(1.0f)));
    }
    }
}

static inline int ld16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* The fp16 block scales at offset o of 8 rows, as f32 (word inserts: no store-forwarding stall). */
KERNELS_INLINE __m256 row_scales(const uint8_t *const row[8], size_t o) {
    __m128i a = _mm_cvtsi32_si128(ld16(row[0] + o));
    a = _mm_insert_epi16(a, ld16(row[1] + o), 1);
    a = _mm_insert_epi16(a, ld16(row[2] + o), 2);
    a = _mm_insert_epi16(a, ld16(row[3] + o), 3);
    a = _mm_insert_epi16(a, ld16(row[4] + o), 4);
    a = _mm_insert_epi16(a, ld16(row[5] + o), 5);
    a = _mm_insert_epi16(a, ld16(row[6] + o), 6);
    return _mm256_cvtph_ps(_mm_insert_epi16(a, ld16(row[7] + o), 7)); /* exact */
}

/* The scales a and offsets b (per half) of group g of 8 rows: from the block's (ka, kb from
 * kblock_scales) for the 256-blocks, else from each row's block (base: row 0's row; idx: the
 * rows' offsets). */
KERNELS_INLINE void group_scales(uint32_t type, const uint8_t *const row[8], const uint8_t *base, __m256i idx, int g,
                                 const __m256 ka[16], const __m256 kb[16], __m256 a[2], __m256 b[2]) {
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
        __m256i dm = gather_rows(base + o, idx);
        a[0] = low_halves(dm);
        b[0] = low_halves(_mm256_srli_epi32(dm, 16));
    } else if (type == GGML_TYPE_MXFP4) {
        a[0] = e8m0_half(_mm256_and_si256(gather_rows(base + o, idx), _mm256_set1_epi32(0xFF)));
    } else {
        a[0] = row_scales(row, o);
    }
}

/* acc plus group g's scaled sums, half h's part of the defined order (kernels_impl.h): half 0 only
 * for the types with scales per 16 (S_a), half 1 the rest (S or S_b, then the offsets). */
KERNELS_INLINE __m256 scale_half(uint32_t type, int h, __m256 acc, __m256i S, const __m256 a[2], const __m256 b[2],
                                 const act_group *x) {
    __m256 d = _mm256_set1_ps(x->d);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), _mm256_mul_ps(a[int_halves(type) ? h : 0], d), acc);
    if (h == 1 && int_has_min(type) && int_halves(type)) {
        acc = _mm256_fmadd_ps(b[0], _mm256_set1_ps(x->d * (float)x->sum16), acc);
        acc = _mm256_fmadd_ps(b[1], _mm256_set1_ps(x->d * (float)(x->sum - x->sum16)), acc);
    } else if (h == 1 && int_has_min(type)) {
        acc = _mm256_fmadd_ps(b[0], _mm256_set1_ps(x->d * (float)x->sum), acc);
    }
    return acc;
}

/* One token's group g activations as int16: x[0] elements 0-15, x[1] 16-31. */
KERNELS_INLINE void act_i16(kernels_act fmt, const void *xq, int g, __m256i x[2]) {
    if (fmt == KERNELS_ACT_I16) {
        x[0] = _mm256_loadu_si256((const __m256i *)((const int16_t *)xq + 32 * g));
        x[1] = _mm256_loadu_si256((const __m256i *)((const int16_t *)xq + 32 * g + 16));
    } else {
        x[0] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)((const int8_t *)xq + 32 * g)));
        x[1] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)((const int8_t *)xq + 32 * g + 16)));
    }
}

/* The K-quants (Q2_K to Q5_K) in matvec with int16 activations, as the AVX-512 set does them: a
 * 256-block stores a group's 32 weights as bit fields of 32 consecutive bytes (byte l: weight
 * l), so a row's bytes fill one vector as they are. Each 16-bit word (bytes 2i, 2i + 1) is split
 * in place rather than widened: masked, its low byte is weight 2i; shifted down 8, its high byte
 * weight 2i + 1; multiplied with the group's even and odd activations (kq_acts). The order of the
 * products changes, not S. Each 128-bit lane keeps 16 consecutive weights (k < 16, k >= 16), so
 * the halves of the types with scales per 16 stay apart.
 * kquant_bytes: bytes whose bits [0, kquant_bits) hold each weight's stored integer (w, or w + 4
 * for Q3_K); the bits above are masked off by kq_products. 16-bit shifts move bits across the
 * bytes of a word only outside the fields used. */
KERNELS_INLINE int kquant_words(uint32_t type) {
    return type == GGML_TYPE_Q2_K || type == GGML_TYPE_Q3_K || type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K;
}
KERNELS_INLINE int kquant_bits(uint32_t type) {
    return type == GGML_TYPE_Q2_K ? 2 : type == GGML_TYPE_Q3_K ? 3 : type == GGML_TYPE_Q4_K ? 4 : 5;
}
KERNELS_INLINE __m256i row_bytes32(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
/* Bits shifted by s within each word: left for s > 0, right for s < 0. */
KERNELS_INLINE __m256i shift_bits(__m256i v, int s) {
    return s > 0 ? _mm256_slli_epi16(v, s) : s < 0 ? _mm256_srli_epi16(v, -s) : v;
}
KERNELS_INLINE __m256i kquant_bytes(uint32_t type, const uint8_t *row, int g) {
    const uint8_t *p = int_block(type, row, g);
    const int j = g % 8;
    switch (type) {
    case GGML_TYPE_Q2_K: /* crumb j % 4 */
        return shift_bits(row_bytes32(p + offsetof(block_Q2_K, qs) + 32 * (j / 4)), -2 * (j % 4));
    case GGML_TYPE_Q3_K: { /* crumb j % 4, and bit j of hmask as bit 2 */
        __m256i q = shift_bits(row_bytes32(p + offsetof(block_Q3_K, qs) + 32 * (j / 4)), -2 * (j % 4));
        __m256i h = shift_bits(row_bytes32(p + offsetof(block_Q3_K, hmask)), 2 - j);
        return _mm256_or_si256(_mm256_and_si256(q, _mm256_set1_epi8(3)), _mm256_and_si256(h, _mm256_set1_epi8(4)));
    }
    case GGML_TYPE_Q4_K: /* nibble j % 2 */
        return shift_bits(row_bytes32(p + offsetof(block_Q4_K, qs) + 32 * (j / 2)), -4 * (j % 2));
    default: { /* Q5_K: nibble j % 2, and bit j of qh as bit 4 */
        __m256i q = shift_bits(row_bytes32(p + offsetof(block_Q5_K, qs) + 32 * (j / 2)), -4 * (j % 2));
        __m256i h = shift_bits(row_bytes32(p + offsetof(block_Q5_K, qh)), 4 - j);
        return _mm256_or_si256(_mm256_and_si256(q, _mm256_set1_epi8(0xF)), _mm256_and_si256(h, _mm256_set1_epi8(0x10)));
    }
    }
}

/* A group's int16 activations split into even (xe) and odd (xo) ones, each 128-bit lane the
 * 8 of its 16: lane 0 x[0], x[2], .. x[14] (xe) and x[1], .. x[15] (xo), lane 1 from x[16]. */
KERNELS_INLINE void kq_acts(const int16_t *x, __m256i *xe, __m256i *xo) {
    __m256i a = _mm256_loadu_si256((const __m256i *)x), b = _mm256_loadu_si256((const __m256i *)(x + 16));
    __m256i ae = _mm256_srai_epi32(_mm256_slli_epi32(a, 16), 16), be = _mm256_srai_epi32(_mm256_slli_epi32(b, 16), 16);
    /* packs puts a's and b's lanes side by side (a.0, b.0 | a.1, b.1); the permute restores k order */
    *xe = _mm256_permute4x64_epi64(_mm256_packs_epi32(ae, be), _MM_SHUFFLE(3, 1, 2, 0));
    *xo = _mm256_permute4x64_epi64(_mm256_packs_epi32(_mm256_srai_epi32(a, 16), _mm256_srai_epi32(b, 16)), _MM_SHUFFLE(3, 1, 2, 0));
}

/* A row's group products: per 128-bit lane (weights 0-15, 16-31), four dwords of partial sums. */
KERNELS_INLINE __m256i kq_products(uint32_t type, const uint8_t *row, int g, __m256i xe, __m256i xo) {
    const __m256i m = _mm256_set1_epi16((short)((1 << kquant_bits(type)) - 1));
    __m256i q = kquant_bytes(type, row, g), ev = _mm256_and_si256(q, m), od = _mm256_srli_epi16(q, 8);
    if (!(type == GGML_TYPE_Q4_K && g % 2)) od = _mm256_and_si256(od, m); /* Q4_K's high nibbles: nothing above */
    return madd_add(_mm256_madd_epi16(ev, xe), od, xo);
}

/* The group's exact S of 8 rows (lane r: row r) by kq_products; halves: S[0], S[1]. */
KERNELS_INLINE void kq_sums(uint32_t type, const uint8_t *const row[8], int g, const void *xq, const act_group *xg,
                            __m256i S[2]) {
    __m256i xe, xo, P[8];
    kq_acts((const int16_t *)xq + 32 * g, &xe, &xo);
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) P[r] = kq_products(type, row[r], g, xe, xo);
    if (int_halves(type)) { /* lanes 4L + i of T[q]: half L of row 4q + i */
        const __m256i T[2] = {transpose_add4(P), transpose_add4(P + 4)};
        S[0] = _mm256_permute2x128_si256(T[0], T[1], 0x20);
        S[1] = _mm256_permute2x128_si256(T[0], T[1], 0x31);
    } else {
        const __m256i Q[8] = {P[0], P[4], P[1], P[5], P[2], P[6], P[3], P[7]}; /* P[SLOT8(r)] = row r */
        S[0] = reduce8(Q);
    }
    if (type == GGML_TYPE_Q3_K) { /* the stored w + 4 */
        S[0] = _mm256_sub_epi32(S[0], _mm256_set1_epi32(4 * xg->sum16));
        S[1] = _mm256_sub_epi32(S[1], _mm256_set1_epi32(4 * (xg->sum - xg->sum16)));
    }
}

/* One group's step of 8 rows for one token: the rows' exact S (S_a, S_b), scaled into acc. */
KERNELS_INLINE __m256 group_step(uint32_t type, kernels_act fmt, const uint8_t *const row[8], int g, const void *xq,
                                 const act_group *xg, const __m256 a[2], const __m256 b[2], __m256 acc) {
    const int halves = int_halves(type);
    __m256i x[2], P[2][8];
    act_i16(fmt, xq, g, x);
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        __m256i w[2];
        weights_i16(type, row[r], g, w);
        if (halves) { /* the halves stay apart */
            P[0][SLOT8(r)] = _mm256_madd_epi16(w[0], x[0]);
            P[1][SLOT8(r)] = _mm256_madd_epi16(w[1], x[1]);
        } else {
            P[0][SLOT8(r)] = madd_add(_mm256_madd_epi16(w[0], x[0]), w[1], x[1]);
        }
    }
    __m256i S = reduce8(P[0]);
    if (type == GGML_TYPE_Q4_0) S = _mm256_sub_epi32(S, _mm256_set1_epi32(8 * xg->sum));
    if (type == GGML_TYPE_Q6_K) S = _mm256_sub_epi32(S, _mm256_set1_epi32(32 * xg->sum16));
    if (halves) {
        acc = scale_half(type, 0, acc, S, a, b, xg);
        S = reduce8(P[1]);
        if (type == GGML_TYPE_Q6_K) S = _mm256_sub_epi32(S, _mm256_set1_epi32(32 * (xg->sum - xg->sum16)));
    }
    return scale_half(type, 1, acc, S, a, b, xg);
}

/* Rows [0, n) (n <= 8) of W (rows rb apart, rs bytes each) times T tokens (T <= MV_T; Xq's rows xs
 * apart), Y[t * ldy + 0..n). Missing rows repeat the last one (results dropped). T = 1 is the
 * matvec; a few tokens at once (a speculative draft's verification, a small batch) share each
 * group's rows and scales, every token's results bit for bit its matvec's, while the weights come
 * from memory once: the packed matmul's packing costs more than it saves below a dozen tokens. */
#define MV_T 8
KERNELS_INLINE void matvec_q8(uint32_t type, kernels_act fmt, const uint8_t *W, size_t rb, size_t rs, int n, int cols,
                              const uint8_t *Xq, size_t xs, int T, float *Y, int ldy, int add) {
    const act_group *grp[MV_T];
    for (int t = 0; t < T; t++) grp[t] = act_groups(Xq + xs * (size_t)t, fmt, cols);
    const uint8_t *row[8];
    int32_t offs[8];
    for (int i = 0; i < 8; i++) {
        offs[i] = (int32_t)((size_t)(i < n ? i : n - 1) * rb);
        row[i] = W + offs[i];
    }
    const __m256i idx = _mm256_loadu_si256((const __m256i *)offs);
    const int G = cols / 32;
    const size_t pf_step = 8 * rs / (size_t)G;
    __m256 acc[MV_T], ka[16], kb[16];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int g = 0; g < G; g++) {
        /* The next tile of 8 rows into L2 as this one is consumed: see the AVX-512 matvec. */
        if (rb == rs)
            for (size_t p = 0; p < pf_step; p += 64) _mm_prefetch((const char *)W + 8 * rb + g * pf_step + p, _MM_HINT_T2);
        else
            for (int i = 8; i < 16; i++) _mm_prefetch((const char *)W + i * rb + (size_t)g * rs / (size_t)G, _MM_HINT_T2);
        if (int_block_groups(type) > 1 && g % 8 == 0) kblock_scales(type, (kfields){int_block(type, W, g), idx, 0, 0}, ka, kb);
        __m256 a[2], b[2];
        group_scales(type, row, W, idx, g, ka, kb, a, b);
        if (T == 1 && fmt == KERNELS_ACT_I16 && kquant_words(type)) {
            /* a matvec's K-quants by words; with more tokens the rows' widened weights, shared by all
             * of them, are cheaper (kq_products' split words held for several tokens measured slower) */
            __m256i S[2];
            kq_sums(type, row, g, Xq, &grp[0][g], S);
            if (int_halves(type)) acc[0] = scale_half(type, 0, acc[0], S[0], a, b, &grp[0][g]);
            acc[0] = scale_half(type, 1, acc[0], S[int_halves(type)], a, b, &grp[0][g]);
            continue;
        }
        for (int t = 0; t < T; t++)
            acc[t] = group_step(type, fmt, row, g, Xq + xs * (size_t)t, &grp[t][g], a, b, acc[t]);
    }
    for (int t = 0; t < T; t++) {
        float out[8];
        _mm256_storeu_ps(out, acc[t]);
        for (int i = 0; i < n; i++) kernels_store(&Y[(size_t)t * ldy + i], out[i], add);
    }
}

KERNELS_INLINE void matvec_tiles(uint32_t type, kernels_act fmt, const uint8_t *W, size_t row_bytes, int cols,
                                 const void *xq, float *y, int r0, int r1, int add) {
    const size_t rs = (size_t)(cols / 32 / int_block_groups(type)) * int_block_bytes(type);
    for (int r = r0; r < r1; r += 8)
        matvec_q8(type, fmt, W + (size_t)r * row_bytes, row_bytes, rs, r1 - r < 8 ? r1 - r : 8, cols, xq, 0, 1,
                  y + (r - r0), 0, add);
}

/* ---- interleaved weights (kernels.h, KERNELS_ILV) ----
 * A record's 64-byte lines hold 4 bytes of each of 16 rows; this set reads a line as two halves
 * of 8 rows (32 bytes). vpunpck[lh]bw widens a half within its 128-bit lanes: the low words take
 * rows 0, 1 | 4, 5 of the half, the high words rows 2, 3 | 6, 7, a row's quad of weights in two
 * dwords. vpmaddwd against a broadcast quad of int16 activations leaves in each dword the sum of
 * two products of one row, and after a group one vphaddd of the two vectors puts each row's sum in
 * its own lane, in row order: S exactly, at one vpmaddwd and one vpaddd per 16 products (the
 * packed matmul's rate) with no packing, no reduction across lanes, and the widening of a
 * group's weights shared by every token of the call. Without VNNI, vpmaddwd and the f32
 * multiplies share two pipes (Zen 3 measured: 2 a cycle of either, 3 vector operations a cycle in
 * all), so a token's group of 16 rows costs 32 vpmaddwd, 32 adds and 6 scaling operations. The
 * types whose weights fit the byte products go by bytes instead (ilv_by_bytes, below), without
 * the widening. */

/* The most tokens ilv_matvec takes (its f32 accumulators: 2 KB); above, ilv_mul packs the tiles
 * for the packed matmul, whose inner loop is faster than ilv_matvec's (TinyLlama-1.1B Q4_0, two
 * threads, Zen 3, every row's logits: 64 tokens 52 tok/s by ilv_matvec against 61-68 as rows; 17
 * tokens alike; 4 and 8 tokens 44-53 against 36-42 as rows, which matvec_q8 unpacks once per
 * token). */
#define ILV_MAX_TOKENS 32

KERNELS_INLINE __m256i ilv_line(const uint8_t *region, int line, int h) {
    return _mm256_loadu_si256((const __m256i *)(region + (size_t)line * 64 + 32 * h));
}

/* Q3_K's stored w + 4 (0..7) of quad c of group j, half h of a record: crumb j % 4 of
 * qs[32 (j / 4) + l] (the region's lines 8..23), and bit j of hmask[l] (lines 0..7) as bit 2. */
KERNELS_INLINE __m256i ilv_q3k(const uint8_t *region, int j, int h, int c) {
    __m256i q = shift_bits(ilv_line(region, 8 + 8 * (j / 4) + c, h), -2 * (j % 4));
    __m256i m = shift_bits(ilv_line(region, c, h), 2 - j);
    return _mm256_or_si256(_mm256_and_si256(q, _mm256_set1_epi8(3)), _mm256_and_si256(m, _mm256_set1_epi8(4)));
}

/* Half h of a line as int16 words (w[0]: rows 0, 1, 4, 5; w[1]: rows 2, 3, 6, 7), bytes unsigned
 * or signed. */
KERNELS_INLINE void widen_u8(__m256i v, __m256i w[2]) {
    w[0] = _mm256_unpacklo_epi8(v, _mm256_setzero_si256());
    w[1] = _mm256_unpackhi_epi8(v, _mm256_setzero_si256());
}
KERNELS_INLINE void widen_i8(__m256i v, __m256i w[2]) {
    __m256i s = _mm256_cmpgt_epi8(_mm256_setzero_si256(), v);
    w[0] = _mm256_unpacklo_epi8(v, s);
    w[1] = _mm256_unpackhi_epi8(v, s);
}

/* The types whose weights are signed bytes (Q8_0's, IQ4_NL's values): ilv_quad gives them + 128,
 * ilv_words as they are. */
KERNELS_INLINE int ilv_signed(uint32_t type) { return type == GGML_TYPE_Q8_0 || type == GGML_TYPE_IQ4_NL; }

/* Quad c (weights 4c..4c+3) of group j, half h of a record's 16 rows (region: its interleaved
 * dwords): lane i row i's four stored integers as unsigned bytes, plus ilv_bias (Q4_0's nibbles
 * w + 8, Q5_0's w + 16, MXFP4's values + 12, Q6_K's w + 32, Q3_K's w + 4; Q4_1's, Q5_1's and the
 * K-quants' with a min as they are), and the signed types' bytes + 128 (ilv_tokens_bytes takes
 * these out again). */
KERNELS_INLINE __m256i ilv_quad(uint32_t type, const uint8_t *region, int j, int h, int c) {
    const __m256i nib8 = _mm256_set1_epi8(0xF);
    if (type == GGML_TYPE_Q4_0 || type == GGML_TYPE_MXFP4 || type == GGML_TYPE_IQ4_NL) {
        /* quads 0-3 the low nibbles of lines 0-3, 4-7 the high */
        __m256i v = ilv_line(region, c % 4, h);
        __m256i q = _mm256_and_si256(c / 4 ? _mm256_srli_epi16(v, 4) : v, nib8);
        if (type == GGML_TYPE_Q4_0) return q;
        if (type == GGML_TYPE_IQ4_NL) { /* the indices' values + 128, as Q8_0's bytes */
            __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4_values));
            return _mm256_shuffle_epi8(_mm256_xor_si256(table, _mm256_set1_epi8((char)0x80)), q);
        }
        /* MXFP4: the codes' values + 12, looked up in each 128-bit lane */
        __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_e2m1x2_values));
        return _mm256_shuffle_epi8(_mm256_add_epi8(table, _mm256_set1_epi8(12)), q);
    }
    if (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1) { /* nibbles as Q4_0's */
        const size_t qs = type == GGML_TYPE_Q4_1   ? offsetof(block_Q4_1, qs)
                          : type == GGML_TYPE_Q5_0 ? offsetof(block_Q5_0, qs)
                                                   : offsetof(block_Q5_1, qs);
        __m256i v = ilv_line(region, (int)ilv_line_of(type, qs) + c % 4, h);
        __m256i q = _mm256_and_si256(c / 4 ? _mm256_srli_epi16(v, 4) : v, nib8);
        if (type == GGML_TYPE_Q4_1) return q;
        /* Q5's fifth bits, bit 4c + i of qh as bit 4 of byte i: byte c / 2 of each row's qh copied
           into the dword's bytes, each testing its own bit */
        const size_t qh = type == GGML_TYPE_Q5_0 ? offsetof(block_Q5_0, qh) : offsetof(block_Q5_1, qh);
        const __m256i pick = _mm256_add_epi8(_mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0,
                                                              0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12),
                                             _mm256_set1_epi8((char)(c / 2)));
        const __m256i bit = _mm256_set1_epi32((int)(0x08040201u << 4 * (c % 2)));
        __m256i hb = _mm256_and_si256(_mm256_shuffle_epi8(ilv_line(region, (int)ilv_line_of(type, qh), h), pick), bit);
        return _mm256_or_si256(q, _mm256_and_si256(_mm256_cmpeq_epi8(hb, bit), _mm256_set1_epi8(0x10)));
    }
    if (type == GGML_TYPE_Q8_0) return _mm256_xor_si256(ilv_line(region, c, h), _mm256_set1_epi8((char)0x80));
    if (type == GGML_TYPE_Q2_K) { /* crumb j % 4 of qs[32 (j / 4) + l] */
        __m256i v = ilv_line(region, (int)ilv_line_of(type, offsetof(block_Q2_K, qs)) + 8 * (j / 4) + c, h);
        return _mm256_and_si256(_mm256_srli_epi16(v, 2 * (j % 4)), _mm256_set1_epi8(3));
    }
    if (type == GGML_TYPE_Q3_K) return ilv_q3k(region, j, h, c);
    if (type == GGML_TYPE_Q4_K) { /* nibble j % 2 of qs[32 (j / 2) + l] */
        __m256i v = ilv_line(region, (int)ilv_line_of(type, offsetof(block_Q4_K, qs)) + 8 * (j / 2) + c, h);
        return _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, nib8);
    }
    if (type == GGML_TYPE_Q5_K) { /* Q4_K's nibble, and bit j of qh[l] as bit 4 */
        __m256i v = ilv_line(region, (int)ilv_line_of(type, offsetof(block_Q5_K, qs)) + 8 * (j / 2) + c, h);
        __m256i m = shift_bits(ilv_line(region, (int)ilv_line_of(type, offsetof(block_Q5_K, qh)) + c, h), 4 - j);
        return _mm256_or_si256(_mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, nib8),
                               _mm256_and_si256(m, _mm256_set1_epi8(0x10)));
    }
    /* Q6_K: w + 32, a nibble of ql and two bits of qh as bits 4-5 (see Q6K_QL) */
    __m256i ql = ilv_line(region, Q6K_QL(j) / 4 + c, h), qh = ilv_line(region, Q6K_QH(j) / 4 + c, h);
    const int shift = Q6K_QH_SHIFT(j);
    if (Q6K_NIBBLE(j)) ql = _mm256_srli_epi16(ql, 4);
    /* 16-bit shifts: the bits crossing from a neighbour byte land outside the masks */
    qh = shift <= 4 ? _mm256_slli_epi16(qh, 4 - shift) : _mm256_srli_epi16(qh, shift - 4);
    return _mm256_or_si256(_mm256_and_si256(ql, nib8), _mm256_and_si256(qh, _mm256_set1_epi8(0x30)));
}

/* Quads c and c + 4 of group j, half h of a record's 16 rows as words: w[q][0..1] quad c + 4q,
 * widened as above: ilv_quad's integers, the signed types' as they are (what ilv_offsets
 * subtracts is ilv_bias times the activations' sum). */
KERNELS_INLINE void ilv_words(uint32_t type, const uint8_t *region, int j, int h, int c, __m256i w[2][2]) {
#pragma GCC unroll 2
    for (int q = 0; q < 2; q++) {
        __m256i v = ilv_quad(type, region, j, h, c + 4 * q);
        if (ilv_signed(type)) widen_i8(_mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)), w[q]);
        else widen_u8(v, w[q]);
    }
}

/* What ilv_words adds to each weight. */
KERNELS_INLINE int ilv_bias(uint32_t type) {
    return type == GGML_TYPE_Q4_0    ? 8
           : type == GGML_TYPE_Q5_0  ? 16
           : type == GGML_TYPE_MXFP4 ? 12
           : type == GGML_TYPE_Q6_K  ? 32
           : type == GGML_TYPE_Q3_K  ? 4
                                     : 0;
}

/* How much the products of ilv_words' integers exceed S (S_a, S_b for Q6_K): the bias times the
 * activations' sum. */
KERNELS_INLINE void ilv_offsets(uint32_t type, const act_group *a, int32_t off[2]) {
    off[0] = ilv_bias(type) * (int_halves(type) ? a->sum16 : a->sum);
    off[1] = ilv_bias(type) * (a->sum - a->sum16);
}

/* The scales a (and offsets b) of group j, half h of a record (rec): the d of the other types of
 * 32 weights and MXFP4's E8M0 byte from the array ahead of the record's dwords, Q4_1's and Q5_1's
 * d and m from its first line, the 256-blocks' from ka and kb (kblock_scales of the block). */
KERNELS_INLINE void ilv_scales(uint32_t type, const uint8_t *rec, int h, int j, const __m256 ka[16],
                               const __m256 kb[16], __m256 a[2], __m256 b[2]) {
    if (type == GGML_TYPE_MXFP4)
        a[0] = e8m0_half(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(rec + 8 * h))));
    else if (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1) { /* d | m << 16, the region's first line */
        __m256i dm = ilv_line(rec + ilv_head(type), 0, h);
        a[0] = low_halves(dm);
        b[0] = low_halves(_mm256_srli_epi32(dm, 16));
    } else if (int_block_groups(type) == 1)
        a[0] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(rec + 16 * h)));
    else
        group_scales(type, NULL, NULL, _mm256_setzero_si256(), j, ka, kb, a, b);
}

/* The packed matmul is blocked for the caches: a block of MM_TB tokens and MM_RB rows keeps its
 * f32 accumulators in scratch (32 KB); the weights go by k-blocks of MM_KG groups (512 k), each
 * 16-row panel of a k-block packed once (20 KB) and used by every token of the block, whose
 * activations for the k-block stay in L2 across the block's panels. */
#define MM_TB 128
#define MM_RB 64
#define MM_KG 16
#define PANEL_NT 4 /* tokens per tile: 8 int32 accumulators for two sets of 8 rows */

/* A packed panel of up to 16 rows (two sets of 8 lanes) over MM_KG groups: for group g, step j
 * (k-pair, 0..15) and set s, 32 bytes at ((g * 16 + j) * 2 + s) * 32; then four scale vectors per
 * group and set, 8 floats each at ((g * 2 + s) * 4 + v) * 8: a and b of the first half, then of
 * the second (the types with scales per 32 store the first only). */
#define PANEL_BYTES (MM_KG * 16 * 64)
#define PANEL_SCALES (MM_KG * 2 * 4 * 8)
_Static_assert(PANEL_BYTES + PANEL_SCALES * 4 + MM_RB * MM_TB * 4 <= KERNELS_MUL_SCRATCH, "matmul scratch");

/* Rows as 8 vectors of 8 dwords in, columns out: c[j] lane i = r[i] lane j. */
KERNELS_INLINE void transpose8(__m256i r[8]) {
    __m256i t[8], u[8];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm256_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
#pragma GCC unroll 2
    for (int m = 0; m < 2; m++) { /* u[4m + c], 128-bit lane l: column 4l + c of rows 4m..4m+3 */
        u[4 * m] = _mm256_unpacklo_epi64(t[4 * m], t[4 * m + 2]);
        u[4 * m + 1] = _mm256_unpackhi_epi64(t[4 * m], t[4 * m + 2]);
        u[4 * m + 2] = _mm256_unpacklo_epi64(t[4 * m + 1], t[4 * m + 3]);
        u[4 * m + 3] = _mm256_unpackhi_epi64(t[4 * m + 1], t[4 * m + 3]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
    }
}

/* A group's scales into a panel (gs: its 32 floats for the set): a and b of the first half, then
 * of the second (the types with scales per 32 store the first only). */
KERNELS_INLINE void panel_scales(uint32_t type, float *gs, const __m256 a[2], const __m256 b[2]) {
    _mm256_store_ps(gs, a[0]);
    if (int_has_min(type)) _mm256_store_ps(gs + 8, b[0]);
    if (int_halves(type)) _mm256_store_ps(gs + 16, a[1]);
    if (int_halves(type) && int_has_min(type)) _mm256_store_ps(gs + 24, b[1]);
}

/* Pack groups [g0, g0 + ng) of rows [0, n) of W (n <= 16; g0 a multiple of 8): the signed
 * weights (the stored form minus its offset), so the packed product is S itself. */
KERNELS_INLINE void pack_panel(uint32_t type, const uint8_t *W, size_t rb, int n, int g0, int ng, uint8_t *panel) {
    const __m256i off = _mm256_set1_epi16(stored_offset(type));
    float *sc = (float *)(panel + PANEL_BYTES);
    for (int s = 0; s < (n + 7) / 8; s++) {
        const uint8_t *row[8];
        int32_t offs[8];
        for (int i = 0; i < 8; i++) {
            int r = 8 * s + i;
            offs[i] = (int32_t)((size_t)(r < n ? r : n - 1) * rb);
            row[i] = W + offs[i];
        }
        const __m256i idx = _mm256_loadu_si256((const __m256i *)offs);
        __m256 ka[16], kb[16];
        for (int gi = 0; gi < ng; gi++) {
            int g = g0 + gi;
            __m256i v[16];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                __m256i w[2];
                weights_i16(type, row[i], g, w);
                v[i] = _mm256_sub_epi16(w[0], off);     /* k-pairs 0-7 */
                v[8 + i] = _mm256_sub_epi16(w[1], off); /* k-pairs 8-15 */
            }
            transpose8(v);
            transpose8(v + 8);
            uint8_t *dst = panel + (size_t)gi * 16 * 64 + (size_t)s * 32;
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) _mm256_store_si256((__m256i *)(dst + (size_t)j * 64), v[j]);
            if (int_block_groups(type) > 1 && (gi == 0 || g % 8 == 0)) kblock_scales(type, (kfields){int_block(type, W, g), idx, 0, 0}, ka, kb);
            __m256 a[2], b[2];
            group_scales(type, row, W, idx, g, ka, kb, a, b);
            panel_scales(type, sc + (size_t)(gi * 2 + s) * 32, a, b);
        }
    }
}

/* pack_panel for a tile of 16 interleaved rows (a record per block): each half's words
 * (ilv_words: rows 0, 1, 4, 5 and 2, 3, 6, 7, a k-pair per dword) regrouped by k-pair with two
 * in-lane shuffles, less their bias; the scales from the record. */
KERNELS_INLINE void pack_panel_ilv(uint32_t type, const uint8_t *W, int g0, int ng, uint8_t *panel) {
    const size_t rec = KERNELS_ILV_ROWS * int_block_bytes(type);
    const int bg = int_block_groups(type);
    const __m256i bias = _mm256_set1_epi16((short)ilv_bias(type));
    float *sc = (float *)(panel + PANEL_BYTES);
    for (int s = 0; s < 2; s++) {
        __m256 ka[16], kb[16];
        for (int gi = 0; gi < ng; gi++) {
            const int g = g0 + gi, j = g % bg;
            const uint8_t *r = W + (size_t)(g / bg) * rec;
            uint8_t *dst = panel + (size_t)gi * 16 * 64 + (size_t)s * 32;
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                __m256i w[2][2];
                ilv_words(type, r + ilv_head(type), j, s, c, w);
#pragma GCC unroll 2
                for (int q = 0; q < 2; q++) { /* quad c + 4q: k-pairs 2c + 8q and the next */
                    __m256i a = _mm256_shuffle_epi32(_mm256_sub_epi16(w[q][0], bias), 0xD8);
                    __m256i b = _mm256_shuffle_epi32(_mm256_sub_epi16(w[q][1], bias), 0xD8);
                    uint8_t *kp = dst + (size_t)(2 * c + 8 * q) * 64;
                    _mm256_store_si256((__m256i *)kp, _mm256_unpacklo_epi64(a, b));
                    _mm256_store_si256((__m256i *)(kp + 64), _mm256_unpackhi_epi64(a, b));
                }
            }
            if (bg > 1 && (gi == 0 || j == 0)) kblock_scales(type, (kfields){r, _mm256_setzero_si256(), 1, s}, ka, kb);
            __m256 a[2], b[2];
            ilv_scales(type, r, s, j, ka, kb, a, b);
            panel_scales(type, sc + (size_t)(gi * 2 + s) * 32, a, b);
        }
    }
}

/* One tile: NS sets of 8 packed rows times NT tokens over the panel's ng groups (absolute groups
 * g0...), continuing the f32 accumulators in acc ([t][16] floats; zero before the first group).
 * X: the tokens' activations (xs bytes apart). int8 activations are widened into xw first, so the
 * inner loop always broadcasts an int16 pair. The steps of a group go in two halves: the types
 * with scales per 16 scale each half's S on its own; the others carry the integer sums across.
 * Every (row, token) does the same operations whatever NT and NS are. */
KERNELS_INLINE void panel_tile(uint32_t type, kernels_act fmt, const uint8_t *panel, int cols, int g0, int ng,
                               const uint8_t *X, size_t xs, int NT, int NS, float *acc) {
    const float *sc = (const float *)(panel + PANEL_BYTES);
    const int halves = int_halves(type);
    const act_group *grp[PANEL_NT];
    const int16_t *xk[PANEL_NT]; /* token t's int16 activations from group g0 on */
    int16_t xw[PANEL_NT][MM_KG * 32] __attribute__((aligned(32)));
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        grp[t] = act_groups(X + xs * (size_t)t, fmt, cols);
        if (fmt == KERNELS_ACT_I16) {
            xk[t] = (const int16_t *)(X + xs * (size_t)t) + 32 * g0;
        } else {
            for (int i = 0; i < ng; i++) act_i16(fmt, X + xs * (size_t)t, g0 + i, (__m256i *)&xw[t][32 * i]);
            xk[t] = xw[t];
        }
    }
    for (int gi = 0; gi < ng; gi++) {
        int g = g0 + gi;
        const uint8_t *pg = panel + (size_t)gi * 16 * 64;
        const float *gs = sc + (size_t)gi * 64;
        __m256i iacc[PANEL_NT][2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            if (h == 0 || halves)
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
                    for (int s = 0; s < NS; s++) iacc[t][s] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int j = 8 * h; j < 8 * h + 8; j++) {
                __m256i w[2];
#pragma GCC unroll 2
                for (int s = 0; s < NS; s++) w[s] = _mm256_load_si256((const __m256i *)(pg + j * 64 + s * 32));
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    int32_t x2; /* an int16 pair */
                    memcpy(&x2, xk[t] + 32 * gi + 2 * j, 4);
                    __m256i xb = _mm256_set1_epi32(x2);
#pragma GCC unroll 2
                    for (int s = 0; s < NS; s++) {
                        iacc[t][s] = madd_add(iacc[t][s], w[s], xb);
                        KEEP_IN_REGISTER(iacc[t][s]); /* without it: 2.5x slower */
                    }
                }
            }
            if (h == 0 && !halves) continue;
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
#pragma GCC unroll 2
                for (int s = 0; s < NS; s++) {
                    const float *v = gs + s * 32;
                    float *a = acc + t * 16 + s * 8;
                    __m256 as[2], bs[2]; /* what pack_panel stored */
                    as[0] = _mm256_load_ps(v);
                    if (halves) as[1] = _mm256_load_ps(v + 16);
                    if (int_has_min(type)) bs[0] = _mm256_load_ps(v + 8);
                    if (int_has_min(type) && halves) bs[1] = _mm256_load_ps(v + 24);
                    /* the first group's first scaling starts from zero */
                    __m256 f = g == 0 && (h == 0 || !halves) ? _mm256_setzero_ps() : _mm256_load_ps(a);
                    _mm256_store_ps(a, scale_half(type, h, f, iacc[t][s], as, bs, &grp[t][g]));
                }
            }
        }
    }
}

KERNELS_INLINE void store_rows(float *y, const float *v, int n, int add) {
    for (int i = 0; i < n; i++) kernels_store(&y[i], v[i], add);
}

/* The packed matmul of rows (ilv = 0) or of interleaved tiles (ilv = 1: r0, r1 multiples of 16,
 * T > ILV_MAX_TOKENS). */
KERNELS_INLINE void matmul_packed(uint32_t type, kernels_act fmt, const uint8_t *W, size_t row_bytes, int cols,
                                  const uint8_t *Xq, int T, float *Y, int ldy, int r0, int r1, int add, void *scratch,
                                  int ilv) {
    const size_t xs = act_row_bytes(fmt, cols);
    const int G = cols / 32;
    if (T <= MV_T && !ilv) {
        const size_t rs = (size_t)(G / int_block_groups(type)) * int_block_bytes(type);
        for (int r = r0; r < r1; r += 8)
            matvec_q8(type, fmt, W + (size_t)r * row_bytes, row_bytes, rs, r1 - r < 8 ? r1 - r : 8, cols, Xq, xs, T,
                      Y + (r - r0), ldy, add);
        return;
    }
    uint8_t *panel = scratch;
    float *acc = (float *)(panel + PANEL_BYTES + PANEL_SCALES * sizeof(float)); /* [MM_RB / 16][MM_TB][16] */
    for (int tb = 0; tb < T; tb += MM_TB) {
        int nt = T - tb < MM_TB ? T - tb : MM_TB;
        const uint8_t *X = Xq + xs * (size_t)tb;
        for (int rb0 = r0; rb0 < r1; rb0 += MM_RB) {
            int nr = r1 - rb0 < MM_RB ? r1 - rb0 : MM_RB, np = (nr + 15) / 16;
            for (int g0 = 0; g0 < G; g0 += MM_KG) {
                int ng = G - g0 < MM_KG ? G - g0 : MM_KG;
                for (int p = 0; p < np; p++) {
                    int n = nr - 16 * p < 16 ? nr - 16 * p : 16, t = 0;
                    float *pa = acc + (size_t)p * MM_TB * 16;
                    if (ilv) pack_panel_ilv(type, W + (size_t)(rb0 + 16 * p) * row_bytes, g0, ng, panel);
                    else pack_panel(type, W + (size_t)(rb0 + 16 * p) * row_bytes, row_bytes, n, g0, ng, panel);
                    if (n > 8) {
                        for (; t + PANEL_NT <= nt; t += PANEL_NT)
                            panel_tile(type, fmt, panel, cols, g0, ng, X + xs * t, xs, PANEL_NT, 2, pa + t * 16);
                        for (; t < nt; t++) panel_tile(type, fmt, panel, cols, g0, ng, X + xs * t, xs, 1, 2, pa + t * 16);
                    } else {
                        for (; t + PANEL_NT <= nt; t += PANEL_NT)
                            panel_tile(type, fmt, panel, cols, g0, ng, X + xs * t, xs, PANEL_NT, 1, pa + t * 16);
                        for (; t < nt; t++) panel_tile(type, fmt, panel, cols, g0, ng, X + xs * t, xs, 1, 1, pa + t * 16);
                    }
                }
            }
            for (int p = 0; p < np; p++) {
                int m = nr - 16 * p < 16 ? nr - 16 * p : 16;
                for (int t = 0; t < nt; t++)
                    store_rows(Y + (size_t)(tb + t) * ldy + (rb0 - r0) + 16 * p, acc + ((size_t)p * MM_TB + t) * 16, m, add);
            }
        }
    }
}

KERNELS_INLINE void matmul_blocks(uint32_t type, kernels_act fmt, const uint8_t *W, size_t row_bytes, int cols,
                                  const uint8_t *Xq, int T, float *Y, int ldy, int r0, int r1, int add, void *scratch) {
    matmul_packed(type, fmt, W, row_bytes, cols, Xq, T, Y, ldy, r0, r1, add, scratch, 0);
}

QUANT_INT_TYPES(KERNELS_DEFINE_INT)

/* Quad i of a token's group (x: the group's activations): four int16 activations, repeated
 * across the vector (int8 ones widened). */
KERNELS_INLINE __m256i act_quad(kernels_act fmt, const uint8_t *x, int i) {
    if (fmt == KERNELS_ACT_I16) {
        int64_t v;
        memcpy(&v, x + 8 * i, 8);
        return _mm256_set1_epi64x(v);
    }
    int32_t v;
    memcpy(&v, x + 4 * i, 4);
    return _mm256_cvtepi8_epi16(_mm_set1_epi32(v));
}

/* NT tokens' group on half h of a record (x[u]: token u's activations of the group, xg[u] its
 * act_group): W the half's words (ilv_words, c = 0..3), S (S_a and S_b for the types with scales
 * per 16) scaled into acc[u]. Each weight vector is loaded once for the NT tokens, up to 4 (2 for
 * the types with scales per 16, whose S_a and S_b take twice the registers). */
KERNELS_INLINE void ilv_tokens(uint32_t type, kernels_act fmt, int NT, const __m256i W[4][2][2],
                               const uint8_t *const x[], const act_group *const xg[], const __m256 a[2],
                               const __m256 b[2], __m256 acc[]) {
    const int split = int_halves(type);
    __m256i P[4][2][2]; /* [token][quads 0-3, 4-7 (apart only with scales per 16)][rows 0, 1, 4, 5 | 2, 3, 6, 7] */
#pragma GCC unroll 2
    for (int q = 0; q < 2; q++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i w0 = W[c][q][0], w1 = W[c][q][1];
            KEEP_IN_REGISTER(w0); /* loaded once for the NT tokens */
            KEEP_IN_REGISTER(w1);
            const int first = c == 0 && (q == 0 || split), k = split ? q : 0;
#pragma GCC unroll 4
            for (int u = 0; u < NT; u++) {
                __m256i xq = act_quad(fmt, x[u], c + 4 * q);
                P[u][k][0] = first ? _mm256_madd_epi16(w0, xq) : madd_add(P[u][k][0], w0, xq);
                P[u][k][1] = first ? _mm256_madd_epi16(w1, xq) : madd_add(P[u][k][1], w1, xq);
                KEEP_IN_REGISTER(P[u][k][0]); /* else GCC computes the products ahead and spills them */
                KEEP_IN_REGISTER(P[u][k][1]);
            }
        }
#pragma GCC unroll 4
    for (int u = 0; u < NT; u++) {
        int32_t off[2];
        ilv_offsets(type, xg[u], off);
        if (split) {
            __m256i Sa = _mm256_sub_epi32(_mm256_hadd_epi32(P[u][0][0], P[u][0][1]), _mm256_set1_epi32(off[0]));
            __m256i Sb = _mm256_sub_epi32(_mm256_hadd_epi32(P[u][1][0], P[u][1][1]), _mm256_set1_epi32(off[1]));
            acc[u] = scale_half(type, 1, scale_half(type, 0, acc[u], Sa, a, b, xg[u]), Sb, a, b, xg[u]);
        } else {
            __m256i S = _mm256_hadd_epi32(P[u][0][0], P[u][0][1]);
            if (off[0]) S = _mm256_sub_epi32(S, _mm256_set1_epi32(off[0]));
            acc[u] = scale_half(type, 1, acc[u], S, a, b, xg[u]);
        }
    }
}

/* ---- A group by bytes: ilv_quads' 8 vectors of unsigned quads (lane i: row i's weights 4c..4c+3
 * of the half, made unsigned), each against a broadcast quad of activations, so every dword
 * sums one row's products and nothing is widened or reduced across lanes. int16 activations go as
 * their byte planes (act_planes: q = 256 hi + lo, lo unsigned): the weights against the signed hi
 * plane, the lo plane against the weights as signed bytes (Q8_0's, signed already, against the lo
 * plane and, made unsigned, the hi one: the AVX-512 set's forms). With AVX-VNNI vpdpbusd adds
 * each quad's four products into its dword, for every type. Without it, vpmaddubsw adds two
 * products into a word with saturation, so only the 2-, 4- and 5-bit types go by bytes: a group's
 * 8 quads of nibbles (at most 15) against the hi plane, or int8 activations, stay within a signed
 * word (8 x 2 x 15 x 128 = 30720), against the lo plane within an unsigned one (8 x 2 x 15 x 255 =
 * 61200); the 5-bit types' weights as two chains of 4 quads (31744, 63240). The multiplies are
 * as many as the words' (two vpmaddubsw per 32 products against two vpmaddwd) but the weights
 * are never widened and nothing is added across lanes. S is exact either way. */
KERNELS_INLINE int ilv_by_bytes(uint32_t type, int T) {
#ifdef KERNELS_AVX_VNNI
    /* the signed types (ilv_signed) for one token only: widened once, their words serve several
     * tokens at vpdpwssd's rate, where the bytes take a conversion per token (measured: Q8_0 in
     * kernels_bench's T = 4) */
    return !ilv_signed(type) || T == 1;
#else
    (void)T;
    return type == GGML_TYPE_Q2_K || type == GGML_TYPE_Q3_K || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_K ||
           type == GGML_TYPE_Q5_K || type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1;
#endif
}

/* Group j's quads of half h of a record's 16 rows (ilv_quad, c = 0..7). */
KERNELS_INLINE void ilv_quads(uint32_t type, const uint8_t *region, int j, int h, __m256i q[8]) {
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) q[c] = ilv_quad(type, region, j, h, c);
}

/* Quad c of a group's bytes (p + 4c) in every dword. */
KERNELS_INLINE __m256i quad_of(const uint8_t *p, int c) {
    int32_t v;
    memcpy(&v, p + 4 * c, 4);
    return _mm256_set1_epi32(v);
}

/* NT tokens' group on half h of a record by bytes (q: ilv_quads; x[u]: token u's group, its 64
 * bytes of planes or 32 int8 activations; hsum[u] its hi plane's sum, for the signed types), S
 * (S_a and S_b for the types with scales per 16) scaled into acc[u]. */
KERNELS_INLINE void ilv_tokens_bytes(uint32_t type, kernels_act fmt, int NT, const __m256i q[8],
                                     const uint8_t *const x[], const int32_t hsum[], const act_group *const xg[],
                                     const __m256 a[2], const __m256 b[2], __m256 acc[]) {
    const int split = int_halves(type), planes = fmt == KERNELS_ACT_I16;
    __m256i S[4][2];
#ifdef KERNELS_AVX_VNNI
    __m256i H[4][2];
#pragma GCC unroll 4
    for (int u = 0; u < NT; u++) S[u][0] = S[u][1] = H[u][0] = H[u][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        __m256i w = q[c];
        KEEP_IN_REGISTER(w);
        const int k = c / 4; /* two chains: the halves (weights 0-15, 16-31) */
#pragma GCC unroll 4
        for (int u = 0; u < NT; u++) {
            if (planes) {
                __m256i ws = ilv_signed(type) ? _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)) : w;
                S[u][k] = _mm256_dpbusd_avx_epi32(S[u][k], quad_of(x[u], c), ws);
                H[u][k] = _mm256_dpbusd_avx_epi32(H[u][k], w, quad_of(x[u] + 32, c));
                KEEP_IN_REGISTER(H[u][k]);
            } else {
                S[u][k] = _mm256_dpbusd_avx_epi32(S[u][k], w, quad_of(x[u], c));
            }
            KEEP_IN_REGISTER(S[u][k]);
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < NT; u++)
#pragma GCC unroll 2
        for (int k = 0; planes && k < 2; k++) S[u][k] = _mm256_add_epi32(_mm256_slli_epi32(H[u][k], 8), S[u][k]);
#else
    /* a chain per half (4 quads) for the types with scales per 16, and for the 5-bit types, whose 8
       quads would overflow a word (4 x 2 x 31 x 128 = 31744 signed, x 255 = 63240 unsigned) */
    const int halves = split || type == GGML_TYPE_Q5_K || type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1;
    __m256i H[4][2], L[4][2];
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        __m256i w = q[c];
        KEEP_IN_REGISTER(w);
        const int k = halves ? c / 4 : 0, first = c == 0 || (halves && c == 4);
#pragma GCC unroll 4
        for (int u = 0; u < NT; u++) {
            __m256i hp = _mm256_maddubs_epi16(w, quad_of(x[u] + (planes ? 32 : 0), c));
            H[u][k] = first ? hp : _mm256_add_epi16(H[u][k], hp);
            KEEP_IN_REGISTER(H[u][k]);
            if (planes) {
                __m256i lp = _mm256_maddubs_epi16(quad_of(x[u], c), w);
                L[u][k] = first ? lp : _mm256_add_epi16(L[u][k], lp);
                KEEP_IN_REGISTER(L[u][k]);
            }
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < NT; u++) {
#pragma GCC unroll 2
        for (int k = 0; k < 1 + halves; k++) {
            S[u][k] = _mm256_madd_epi16(H[u][k], _mm256_set1_epi16(planes ? 256 : 1));
            if (planes) { /* the lo words unsigned; a half's 4 quads of Q2_K, Q3_K (2 x 7 x 255 each) signed */
                __m256i lo = split ? _mm256_madd_epi16(L[u][k], _mm256_set1_epi16(1))
                                   : _mm256_add_epi32(_mm256_and_si256(L[u][k], _mm256_set1_epi32(0xFFFF)),
                                                      _mm256_srli_epi32(L[u][k], 16));
                S[u][k] = _mm256_add_epi32(S[u][k], lo);
            }
        }
        if (halves && !split) S[u][0] = _mm256_add_epi32(S[u][0], S[u][1]);
    }
#endif
#pragma GCC unroll 4
    for (int u = 0; u < NT; u++) {
        int32_t off[2];
        ilv_offsets(type, xg[u], off);
        if (ilv_signed(type)) off[0] = 128 * (planes ? 256 * hsum[u] : xg[u]->sum);
        if (split) {
            __m256i Sa = _mm256_sub_epi32(S[u][0], _mm256_set1_epi32(off[0]));
            __m256i Sb = _mm256_sub_epi32(S[u][1], _mm256_set1_epi32(off[1]));
            acc[u] = scale_half(type, 1, scale_half(type, 0, acc[u], Sa, a, b, xg[u]), Sb, a, b, xg[u]);
        } else {
            __m256i s0 = S[u][0];
#ifdef KERNELS_AVX_VNNI
            s0 = _mm256_add_epi32(s0, S[u][1]);
#endif
            if (off[0]) s0 = _mm256_sub_epi32(s0, _mm256_set1_epi32(off[0]));
            acc[u] = scale_half(type, 1, acc[u], s0, a, b, xg[u]);
        }
    }
}

/* Token t's group g for ilv_tokens (x: its activations) or ilv_tokens_bytes (x: its planes, or its
 * int8 activations; hsum: its hi plane's sum, for the signed types). */
KERNELS_INLINE void ilv_token(uint32_t type, kernels_act fmt, bool bytes, const uint8_t *X, size_t xs,
                              const act_group *const grp[], int t, int g, int cols, const act_group **xg,
                              const uint8_t **x, int32_t *hsum) {
    const uint8_t *xt = X + xs * (size_t)t;
    *xg = &grp[t][g];
    *hsum = 0;
    if (fmt == KERNELS_ACT_I8) {
        *x = xt + 32 * (size_t)g;
    } else if (!bytes) {
        *x = xt + 64 * (size_t)g;
    } else {
        const uint8_t *planes = act_planes(xt, cols);
        *x = planes + 64 * (size_t)g;
        if (ilv_signed(type)) memcpy(hsum, planes + 2 * (size_t)cols + 4 * (size_t)g, 4);
    }
}

/* A tile of 16 interleaved rows times T tokens (T <= ILV_MAX_TOKENS; token t's activations at
 * X + t xs, grp[t] its groups) into Y[t * ldy + 0..16). Per group and half, the weights are
 * widened once (W, 16 vectors) and every token multiplies them. */
KERNELS_INLINE void ilv_matvec(uint32_t type, kernels_act fmt, const uint8_t *tile, int cols,
                               const uint8_t *X, size_t xs, const act_group *const grp[], int T, float *Y, int ldy,
                               int add) {
    const size_t rec = KERNELS_ILV_ROWS * int_block_bytes(type);
    const int bg = int_block_groups(type);
    __m256 acc[2][ILV_MAX_TOKENS], ka[2][16], kb[2][16];
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < T; t++) acc[h][t] = _mm256_setzero_ps();
    const bool bytes = ilv_by_bytes(type, T), planes = fmt == KERNELS_ACT_I16;
    for (int blk = 0; blk < cols / (32 * bg); blk++) {
        const uint8_t *r = tile + (size_t)blk * rec;
        for (int j = 0; j < bg; j++) {
            const int g = bg * blk + j;
            /* the tile is a stream, fetched 16 KB ahead into L1, each group its share of it (past
             * the tile's end, the next tile) */
            for (size_t o = (size_t)j * rec / (size_t)bg; o < (size_t)(j + 1) * rec / (size_t)bg; o += 64)
                _mm_prefetch((const char *)r + o + 16384, _MM_HINT_T0);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i W[4][2][2], B[8];
                __m256 a[2], b[2];
                if (bytes) ilv_quads(type, r + ilv_head(type), j, h, B);
                else
#pragma GCC unroll 4
                    for (int c = 0; c < 4; c++) ilv_words(type, r + ilv_head(type), j, h, c, W[c]);
                if (bg > 1 && j == 0) kblock_scales(type, (kfields){r, _mm256_setzero_si256(), 1, h}, ka[h], kb[h]);
                ilv_scales(type, r, h, j, ka[h], kb[h], a, b);
                const __m256i(*w)[2][2] = (const __m256i(*)[2][2])W;
                /* the tokens sharing each weight vector, within the 16 registers (by bytes against
                 * planes, one: two measured slower, kernels_bench's T = 2 and 4) */
                const int most = bytes && planes ? 1 : int_halves(type) ? 2 : 4;
                int t = 0;
                for (; t + most <= T; t += most) {
                    const act_group *xg[4];
                    const uint8_t *x[4];
                    int32_t hsum[4];
#pragma GCC unroll 4
                    for (int u = 0; u < most; u++) ilv_token(type, fmt, bytes, X, xs, grp, t + u, g, cols, &xg[u], &x[u], &hsum[u]);
                    if (bytes) ilv_tokens_bytes(type, fmt, most, B, x, hsum, xg, a, b, &acc[h][t]);
                    else ilv_tokens(type, fmt, most, w, x, xg, a, b, &acc[h][t]);
                }
                for (; t < T; t++) {
                    const act_group *xg[1];
                    const uint8_t *x[1];
                    int32_t hsum[1];
                    ilv_token(type, fmt, bytes, X, xs, grp, t, g, cols, &xg[0], &x[0], &hsum[0]);
                    if (bytes) ilv_tokens_bytes(type, fmt, 1, B, x, hsum, xg, a, b, &acc[h][t]);
                    else ilv_tokens(type, fmt, 1, w, x, xg, a, b, &acc[h][t]);
                }
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int h = 0; h < 2; h++) {
            float out[8];
            _mm256_storeu_ps(out, acc[h][t]);
            for (int i = 0; i < 8; i++) kernels_store(&Y[(size_t)t * ldy + 8 * h + i], out[i], add);
        }
}

/* The types this set multiplies interleaved (its ilv_types). */
#define ILV_TYPES(X) X(Q2_K) X(Q3_K) X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(Q4_K) X(Q5_K) X(Q6_K) X(MXFP4) X(Q8_0) X(IQ4_NL)
/* The packed matmul of interleaved tiles, a copy per type and activation format (as
 * KERNELS_DEFINE_INT makes them for rows). */
#define ILV_MATMUL_DEFINE(NAME)                                                                                    \
    static void ilv_matmul_##NAME(kernels_act fmt, const void *W, int cols, const void *Xq, int T, float *Y, int ldy, \
                                  int r0, int r1, int add, void *scratch) {                                       \
        size_t rb = quant_row_bytes(GGML_TYPE_##NAME, cols);                                                       \
        if (fmt == KERNELS_ACT_I8)                                                                                 \
            matmul_packed(GGML_TYPE_##NAME, KERNELS_ACT_I8, W, rb, cols, Xq, T, Y, ldy, r0, r1, add, scratch, 1);  \
        else                                                                                                       \
            matmul_packed(GGML_TYPE_##NAME, KERNELS_ACT_I16, W, rb, cols, Xq, T, Y, ldy, r0, r1, add, scratch, 1); \
    }
ILV_TYPES(ILV_MATMUL_DEFINE)
/* A single token (decode) gets its own copy, compiled for exactly one token. */
#define ILV_MATVEC(NAME, FMT)                                                            \
    if (T == 1) ilv_matvec(GGML_TYPE_##NAME, FMT, tile, cols, Xq, xs, g, 1, y, ldy, add); \
    else ilv_matvec(GGML_TYPE_##NAME, FMT, tile, cols, Xq, xs, g, T, y, ldy, add);
#define ILV_MATVEC_CASE(NAME)                                                \
    case GGML_TYPE_##NAME:                                                   \
        if (fmt == KERNELS_ACT_I8) { ILV_MATVEC(NAME, KERNELS_ACT_I8) }      \
        else { ILV_MATVEC(NAME, KERNELS_ACT_I16) }                           \
        break;
#define ILV_MATMUL_CASE(NAME) \
    case GGML_TYPE_##NAME: ilv_matmul_##NAME(fmt, W, cols, Xq, T, Y, ldy, r0, r1, add, scratch); break;
#define ILV_TYPE_BIT(NAME) | 1ull << GGML_TYPE_##NAME

/* The ops' ilv_mul: every tile by ilv_matvec, all its tokens at once, up to ILV_MAX_TOKENS; more
 * by the packed matmul. */
static void ilv_mul(uint32_t type, const void *W, int cols, kernels_act fmt, const void *Xq, int T, float *Y, int ldy,
                    int r0, int r1, int add, void *scratch) {
    if (T > ILV_MAX_TOKENS) {
        switch (type) {
            ILV_TYPES(ILV_MATMUL_CASE)
        default: break;
        }
        return;
    }
    const size_t xs = act_row_bytes(fmt, cols), rb = quant_row_bytes(type, cols);
    const act_group *g[ILV_MAX_TOKENS];
    for (int t = 0; t < T; t++) g[t] = act_groups((const uint8_t *)Xq + xs * (size_t)t, fmt, cols);
    for (int r = r0; r < r1; r += KERNELS_ILV_ROWS) {
        const uint8_t *tile = (const uint8_t *)W + (size_t)r * rb;
        float *y = Y + (r - r0);
        switch (type) {
            ILV_TYPES(ILV_MATVEC_CASE)
        default: break;
        }
    }
}

/* ---- kernels_mix: rows of A weighted by X, the output columns along the lanes ----
 * A tile is NV (1 or 2) vectors of 8 columns by up to MX_Q rows of X: for each k, row k of A is
 * widened once and FMA'd into every X row's accumulators with x_k broadcast, so each lane is the
 * defined fma chain over k. The last N % 8 columns go one at a time through the same chain in a
 * scalar register. */
#define MX_Q 4

KERNELS_INLINE void mix_tile(uint32_t type, const uint8_t *A, size_t rb, int K, const float *X, int ldx, int NQ, int NV,
                             float *Y, int ldy, int j0) {
    __m256 acc[MX_Q][2];
#pragma GCC unroll 4
    for (int q = 0; q < NQ; q++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) acc[q][v] = _mm256_setzero_ps();
    for (int k = 0; k < K; k++) {
        const uint8_t *row = A + (size_t)k * rb;
        __m256 a[2];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) a[v] = load_w(type, row, j0 + 8 * v);
#pragma GCC unroll 4
        for (int q = 0; q < NQ; q++) {
            __m256 xb = _mm256_broadcast_ss(X + (size_t)q * ldx + k);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) acc[q][v] = _mm256_fmadd_ps(xb, a[v], acc[q][v]);
        }
    }
#pragma GCC unroll 4
    for (int q = 0; q < NQ; q++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(Y + (size_t)q * ldy + j0 + 8 * v, acc[q][v]);
}

#define MIX_TILE(NV)                                                                                       \
    switch (nq) {                                                                                          \
    case 1: mix_tile(type, A, rb, K, x, ldx, 1, NV, y, ldy, j0); break;                                    \
    case 2: mix_tile(type, A, rb, K, x, ldx, 2, NV, y, ldy, j0); break;                                    \
    case 3: mix_tile(type, A, rb, K, x, ldx, 3, NV, y, ldy, j0); break;                                    \
    default: mix_tile(type, A, rb, K, x, ldx, 4, NV, y, ldy, j0);                                          \
    }

KERNELS_INLINE void mix_typed(uint32_t type, const uint8_t *A, size_t rb, int K, int N, const float *X, int ldx, int R,
                              float *Y, int ldy) {
    int n8 = N / 8 * 8;
    for (int j0 = 0; j0 < n8; j0 += 16)
        for (int r = 0; r < R; r += MX_Q) {
            const float *x = X + (size_t)r * ldx;
            float *y = Y + (size_t)r * ldy;
            int nq = R - r < MX_Q ? R - r : MX_Q;
            if (n8 - j0 >= 16) {
                MIX_TILE(2)
            } else {
                MIX_TILE(1)
            }
        }
    for (int j = n8; j < N; j++)
        for (int r = 0; r < R; r++) {
            __m128 acc = _mm_setzero_ps();
            for (int k = 0; k < K; k++) {
                const uint8_t *row = A + (size_t)k * rb;
                __m128 a = type == GGML_TYPE_F32   ? _mm_load_ss((const float *)row + j)
                           : type == GGML_TYPE_F16 ? _mm_cvtph_ps(_mm_cvtsi32_si128(ld16(row + 2 * (size_t)j)))
                                                   : _mm_castsi128_ps(_mm_cvtsi32_si128((int)((uint32_t)ld16(row + 2 * (size_t)j) << 16)));
                acc = _mm_fmadd_ss(_mm_load_ss(X + (size_t)r * ldx + k), a, acc);
            }
            Y[(size_t)r * ldy + j] = _mm_cvtss_f32(acc);
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

/* exp_ps: see EXP_* in kernels_impl.h; 2^n put in the exponent. */
static inline __m256 exp_ps(__m256 x) {
    x = _mm256_min_ps(x, _mm256_set1_ps(EXP_HI));
    __m256 small = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LO), _CMP_LT_OQ);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n: n in [-126, 128]; 128 (x near 88.7) is split as 2 * 2^127 */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i big = _mm256_cmpgt_epi32(ni, _mm256_set1_epi32(127));
    ni = _mm256_sub_epi32(ni, _mm256_and_si256(big, _mm256_set1_epi32(1)));
    __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23));
    p = _mm256_mul_ps(p, scale);
    p = _mm256_blendv_ps(p, _mm256_add_ps(p, p), _mm256_castsi256_ps(big));
    return _mm256_andnot_ps(small, p);
}

static void rms_norm(float *out, const float *x, const float *w, int n, float eps) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(x + i), acc);
    double ss = hsum(acc);
    for (; i < n; i++) ss += (double)x[i] * x[i];
    __m256 scale = _mm256_set1_ps((float)(1.0 / sqrt(ss / n + eps)));
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), scale), _mm256_loadu_ps(w + i)));
    for (; i < n; i++) out[i] = x[i] * _mm256_cvtss_f32(scale) * w[i];
}

/* Elements [i, n) as a masked tail: the helpers below run whole vectors over a copy. */
#define TAIL_COPY(dst, src, i, n) memcpy(dst, (src) + (i), sizeof(float) * (size_t)((n) - (i)))

static inline __m256 x_sigmoid(__m256 x, __m256 arg) {
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_ps(arg)));
}

static __m256 glu8(kernels_glu act, __m256 x, __m256 v) {
    const __m256 lim = _mm256_set1_ps(OAI_LIMIT), zero = _mm256_setzero_ps();
    if (act == KERNELS_SILU) return _mm256_mul_ps(x_sigmoid(x, _mm256_sub_ps(zero, x)), v);
    if (act == KERNELS_GELU_TANH) {
        __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(GELU_A), x), _mm256_mul_ps(x, x), x);
        return _mm256_mul_ps(x_sigmoid(x, _mm256_mul_ps(_mm256_set1_ps(GELU_2C), y)), v);
    }
    x = _mm256_min_ps(x, lim);
    v = _mm256_max_ps(_mm256_min_ps(v, lim), _mm256_sub_ps(zero, lim));
    return _mm256_mul_ps(x_sigmoid(x, _mm256_mul_ps(_mm256_set1_ps(-OAI_ALPHA), x)), _mm256_add_ps(v, _mm256_set1_ps(1.0f)));
}

static void glu(kernels_glu act, float *out, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i += 8) {
        if (n - i >= 8) {
            _mm256_storeu_ps(out + i, glu8(act, _mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
            continue;
        }
        float gb[8] = {0}, ub[8] = {0}, ob[8];
        TAIL_COPY(gb, g, i, n);
        TAIL_COPY(ub, u, i, n);
        _mm256_storeu_ps(ob, glu8(act, _mm256_loadu_ps(gb), _mm256_loadu_ps(ub)));
        memcpy(out + i, ob, sizeof(float) * (size_t)(n - i));
    }
}

static __m256 softcap8(__m256 x, __m256 k, __m256 c) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    __m256 z = _mm256_mul_ps(x, k);
    __m256 e = exp_ps(_mm256_mul_ps(_mm256_set1_ps(-2.0f), _mm256_andnot_ps(sign, z)));
    __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
    return _mm256_mul_ps(c, _mm256_or_ps(t, _mm256_and_ps(z, sign)));
}

static void softcap(float *x, int n, float scale, float cap) {
    const __m256 k = _mm256_set1_ps(scale / cap), c = _mm256_set1_ps(cap);
    for (int i = 0; i < n; i += 8) {
        if (n - i >= 8) {
            _mm256_storeu_ps(x + i, softcap8(_mm256_loadu_ps(x + i), k, c));
            continue;
        }
        float b[8] = {0};
        TAIL_COPY(b, x, i, n);
        _mm256_storeu_ps(b, softcap8(_mm256_loadu_ps(b), k, c));
        memcpy(x + i, b, sizeof(float) * (size_t)(n - i));
    }
}

static float softmax_span(float *p, int n, float scale, float *max) {
    __m256 s = _mm256_set1_ps(scale), mv = _mm256_set1_ps(*max);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(p + i), s);
        _mm256_storeu_ps(p + i, v);
        mv = _mm256_max_ps(mv, v);
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    float m = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    for (; i < n; i++) {
        p[i] *= scale;
        m = p[i] > m ? p[i] : m;
    }
    __m256 mm = _mm256_set1_ps(m), sum = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(p + i), mm));
        _mm256_storeu_ps(p + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    float total = hsum(sum);
    if (i < n) {
        float b[8] = {0};
        TAIL_COPY(b, p, i, n);
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(b), mm));
        _mm256_storeu_ps(b, e);
        for (int k = 0; k < n - i; k++) {
            p[i + k] = b[k];
            total += b[k];
        }
    }
    *max = m;
    return total;
}

static void f32_to_f16(uint16_t *dst, const float *src, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = quant_f32_to_fp16(src[i]);
}

/* Eight codes (signed bytes) times the scale. */
static inline __m256 scaled8(__m128i q, __m256 d) { return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))); }

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
        __m256 d = _mm256_set1_ps(x86_block_scale(src));
        __m128i lo, hi;
        x86_block_codes(q8, src, &lo, &hi);
        _mm256_storeu_ps(dst + i, scaled8(lo, d));
        _mm256_storeu_ps(dst + i + 8, scaled8(_mm_srli_si128(lo, 8), d));
        _mm256_storeu_ps(dst + i + 16, scaled8(hi, d));
        _mm256_storeu_ps(dst + i + 24, scaled8(_mm_srli_si128(hi, 8), d));
    }
}

/* Four independent chains of 32-byte loads: a core's full read bandwidth (a scalar loop is
 * limited by its load count, not by memory). */
static uint64_t read_bytes(const void *p, size_t n) {
    const uint8_t *b = p;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(b + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(b + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(b + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(b + i + 96)));
    }
    __m256i x = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    __m128i h = _mm_xor_si128(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
    return (uint64_t)_mm_cvtsi128_si64(h) ^ (uint64_t)_mm_extract_epi64(h, 1);
}

#ifdef KERNELS_AVX_VNNI
const kernels_ops kernels_avxvnni_ops = {
#else
const kernels_ops kernels_avx2_ops = {
#endif
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
