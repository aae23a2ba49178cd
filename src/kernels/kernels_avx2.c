/* AVX2 + FMA + F16C kernels (8 f32 lanes), the same scheme as the AVX-512 set: the integer types
 * take integer activations (8 rows at a time, exact reduction, see the integer section); float
 * types FMA 8 weights per step with x, into four accumulators per token (FMA latency is four
 * cycles): step u goes to accumulator u % NACC. With 16 vector registers, a matmul tile is two
 * tokens. Per-token order is independent of the tile (see kernels_impl.h). */
#if defined(__x86_64__) && defined(__AVX2__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "tensor/quant.h"

#define KT 2   /* tokens per matmul tile */
#define NACC 4 /* accumulators per token */

static inline __m256 bcast_fp16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _mm256_cvtph_ps(_mm_set1_epi16((short)h));
}

static inline float hsum(__m256 v) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

/* 8 int8 values (the low 8 bytes of v) as floats. */
static inline __m256 i8_to_f32(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

KERNELS_INLINE void zero_acc(__m256 acc[KT][NACC], int nt) {
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 8
        for (int k = 0; k < NACC; k++) acc[t][k] = _mm256_setzero_ps();
}

KERNELS_INLINE void reduce_acc(__m256 acc[KT][NACC], int nt, float *out) {
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        out[t] = hsum(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]), _mm256_add_ps(acc[t][2], acc[t][3])));
}

/* ---- F32, F16, BF16: 8 weights per step ---- */

KERNELS_INLINE __m256 load_w(uint32_t type, const uint8_t *w, int i) {
    if (type == GGML_TYPE_F32) return _mm256_loadu_ps((const float *)w + i);
    __m128i h = _mm_loadu_si128((const __m128i *)(w + 2 * (size_t)i));
    if (type == GGML_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); /* bf16 */
}

KERNELS_INLINE void float_step(__m256 acc[KT][NACC], int k, __m256 wv, const float *X, int cols,
                               int i, int nt) {
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        acc[t][k] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(X + (size_t)t * cols + i), acc[t][k]);
}

/* Step u of 8 weights goes to accumulator u % NACC, a last partial step (zero padded) too: so a
 * row padded with zero activations gives the same bits as the shorter row (attention relies on
 * it). */
KERNELS_INLINE void float_rows(uint32_t type, const uint8_t *w, int cols, const float *X, int nt,
                               float *out) {
    __m256 acc[KT][NACC];
    zero_acc(acc, nt);
    int nu = cols / 8, u = 0;
    for (; u + NACC <= nu; u += NACC) {
#pragma GCC unroll 8
        for (int k = 0; k < NACC; k++) float_step(acc, k, load_w(type, w, 8 * (u + k)), X, cols, 8 * (u + k), nt);
    }
#pragma GCC unroll 8
    for (int k = 0; k < NACC - 1; k++)
        if (u + k < nu) float_step(acc, k, load_w(type, w, 8 * (u + k)), X, cols, 8 * (u + k), nt);
    int rest = cols % 8, i = 8 * nu;
    if (rest) {
        size_t esize = type == GGML_TYPE_F32 ? 4 : 2;
        uint8_t wb[32] = {0};
        memcpy(wb, w + esize * (size_t)i, esize * (size_t)rest);
        __m256 wv = load_w(type, wb, 0);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            float xb[8] = {0};
            memcpy(xb, X + (size_t)t * cols + i, sizeof(float) * (size_t)rest);
#pragma GCC unroll 4
            for (int k = 0; k < NACC; k++) /* constant indices keep acc in registers */
                if (k == nu % NACC) acc[t][k] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xb), acc[t][k]);
        }
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

KERNELS_DEFINE_DRIVERS(f32, KT)
KERNELS_DEFINE_DRIVERS(f16, KT)
KERNELS_DEFINE_DRIVERS(bf16, KT)
KERNELS_DEFINE_DISPATCH()

/* ---- integer activations: Q8_0 and Q4_0 ----
 * 8 rows at a time: each row's products go to one vector of 8 partial sums (vpmaddwd on int16;
 * int8 activations are widened first), an exact reduction puts each row's S_g in its own lane,
 * and the f32 scaling runs on 8 rows at once. There is no VNNI here, so the packed layout of the
 * AVX-512 matmul would not pay: the matmul runs the matvec over cache-sized blocks of rows. */

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

/* One row's 8 partial sums of group g times x, weights 0-15 with x0 and 16-31 with x1 (P[0], P[1]:
 * Q6_K keeps its halves apart, the others add them into P[0]). Q4_0 and Q6_K use the stored
 * unsigned forms (nibble, value + 32); their offsets come out through the activations' sums. */
KERNELS_INLINE void row_partials(uint32_t type, const uint8_t *row, int g, __m256i x0, __m256i x1, __m256i P[2]) {
    __m256i w0, w1;
    if (type == GGML_TYPE_Q8_0) {
        const uint8_t *blk = row + (size_t)g * 34;
        w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 2)));
        w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 18)));
    } else if (type == GGML_TYPE_Q4_0) {
        __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(row + (size_t)g * 18 + 2)));
        w0 = _mm256_and_si256(v, _mm256_set1_epi16(0xF));
        w1 = _mm256_srli_epi16(v, 4);
    } else if (type == GGML_TYPE_Q4_K) { /* sub-block j: nibble j % 2 of bytes 32 * (j / 2) .. +31 */
        const uint8_t *q = row + (size_t)(g / 8) * sizeof(block_q4_K) + 4 + K_SCALE_SIZE + 32 * ((g % 8) / 2);
        __m128i sh = _mm_cvtsi32_si128(4 * (g % 2));
        w0 = _mm256_and_si256(_mm256_srl_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)q)), sh), _mm256_set1_epi16(0xF));
        w1 = _mm256_and_si256(_mm256_srl_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(q + 16))), sh),
                              _mm256_set1_epi16(0xF));
    } else {
        const uint8_t *blk = row + (size_t)(g / 8) * sizeof(block_q6_K);
        int j = g % 8;
        __m128i nib = _mm_cvtsi32_si128(4 * Q6K_NIBBLE(j)), sh = _mm_cvtsi32_si128(Q6K_QH_SHIFT(j));
        __m256i w[2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i ql = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(blk + Q6K_QL(j) + 16 * h)));
            __m256i qh = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(blk + Q6K_QH(j) + 16 * h)));
            w[h] = _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi16(ql, nib), _mm256_set1_epi16(0xF)),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, sh), _mm256_set1_epi16(3)), 4));
        }
        P[0] = _mm256_madd_epi16(w[0], x0);
        P[1] = _mm256_madd_epi16(w[1], x1);
        return;
    }
    P[0] = _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
    P[1] = _mm256_setzero_si256();
}

static inline float load_fp16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

/* Per-row scales of the 8 groups of the K-quant block holding group g, over the 8 rows: a[j][r]
 * = d * sc and b[j][r] = dmin * m of sub-block j (Q4_K); for Q6_K's groups a and b are d * sc of
 * each half. Unpacked once per block: the 6-bit scales of Q4_K cost more to unpack than the
 * group's arithmetic. */
static void kblock_scales(uint32_t type, const uint8_t *const row[8], int g, float a[8][8], float b[8][8]) {
    for (int r = 0; r < 8; r++) {
        if (type == GGML_TYPE_Q4_K) {
            const uint8_t *blk = row[r] + (size_t)(g / 8) * sizeof(block_q4_K);
            uint8_t sc[8], m[8];
            quant_q4_K_scales(blk + 4, sc, m);
            float d = load_fp16(blk), dmin = load_fp16(blk + 2);
            for (int j = 0; j < 8; j++) {
                a[j][r] = d * (float)sc[j];
                b[j][r] = dmin * (float)m[j];
            }
        } else {
            const uint8_t *blk = row[r] + (size_t)(g / 8) * sizeof(block_q6_K);
            const int8_t *sc = (const int8_t *)(blk + offsetof(block_q6_K, scales));
            float d = load_fp16(blk + offsetof(block_q6_K, d));
            for (int j = 0; j < 8; j++) {
                a[j][r] = d * (float)sc[2 * j];
                b[j][r] = d * (float)sc[2 * j + 1];
            }
        }
    }
}

/* The block scales of group g (Q8_0, Q4_0) over the 8 rows. */
static __m256 block_scales(uint32_t type, const uint8_t *const row[8], int g) {
    uint16_t h[8];
    for (int r = 0; r < 8; r++) memcpy(&h[r], row[r] + (size_t)g * int_block_bytes(type), sizeof h[r]);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)); /* exact, as load_fp16 */
}

/* Rows [0, n) (n <= 8) of W, y[0..n). Missing rows repeat the last one (results dropped). */
static void matvec_q8(uint32_t type, kernels_act fmt, const uint8_t *W, size_t rb, int n, int cols,
                      const void *xq, float *y, int add) {
    const act_group *grp = act_groups(xq, fmt, cols);
    const uint8_t *row[8];
    for (int i = 0; i < 8; i++) row[i] = W + (size_t)(i < n ? i : n - 1) * rb;
    __m256 acc = _mm256_setzero_ps();
    float ka[8][8], kb[8][8]; /* K-quants: the current block's scales */
    for (int g = 0; g < cols / 32; g++) {
        __m256i x0, x1, P[2][8], S[2];
        if (fmt == KERNELS_ACT_I16) {
            x0 = _mm256_loadu_si256((const __m256i *)((const int16_t *)xq + 32 * g));
            x1 = _mm256_loadu_si256((const __m256i *)((const int16_t *)xq + 32 * g + 16));
        } else {
            x0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)((const int8_t *)xq + 32 * g)));
            x1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)((const int8_t *)xq + 32 * g + 16)));
        }
        for (int r = 0; r < 8; r++) {
            __m256i p[2];
            row_partials(type, row[r], g, x0, x1, p);
            P[0][SLOT8(r)] = p[0];
            P[1][SLOT8(r)] = p[1];
        }
        __m256 s[2], d = _mm256_set1_ps(grp[g].d);
        if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q6_K) {
            if (g % 8 == 0) kblock_scales(type, row, g, ka, kb);
            s[0] = _mm256_loadu_ps(ka[g % 8]);
            s[1] = _mm256_loadu_ps(kb[g % 8]);
        } else {
            s[0] = block_scales(type, row, g);
            s[1] = _mm256_setzero_ps();
        }
        S[0] = reduce8(P[0]);
        S[1] = _mm256_setzero_si256();
        if (type == GGML_TYPE_Q4_0) S[0] = _mm256_sub_epi32(S[0], _mm256_set1_epi32(8 * grp[g].sum));
        if (type == GGML_TYPE_Q6_K) {
            S[1] = reduce8(P[1]);
            S[0] = _mm256_sub_epi32(S[0], _mm256_set1_epi32(32 * grp[g].sum16));
            S[1] = _mm256_sub_epi32(S[1], _mm256_set1_epi32(32 * (grp[g].sum - grp[g].sum16)));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[0]), _mm256_mul_ps(s[0], d), acc);
        if (type == GGML_TYPE_Q4_K) acc = _mm256_fnmadd_ps(s[1], _mm256_set1_ps(grp[g].d * (float)grp[g].sum), acc);
        if (type == GGML_TYPE_Q6_K) acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[1]), _mm256_mul_ps(s[1], d), acc);
    }
    float out[8];
    _mm256_storeu_ps(out, acc);
    for (int i = 0; i < n; i++) kernels_store(&y[i], out[i], add);
}

static void matvec_q(uint32_t type, const void *W, size_t row_bytes, int cols, kernels_act fmt, const void *xq,
                     float *y, int r0, int r1, int add) {
    for (int r = r0; r < r1; r += 8)
        matvec_q8(type, fmt, (const uint8_t *)W + (size_t)r * row_bytes, row_bytes, r1 - r < 8 ? r1 - r : 8, cols,
                  xq, y + (r - r0), add);
}

static void matmul_q(uint32_t type, const void *W, size_t row_bytes, int cols, kernels_act fmt, const void *Xq,
                     int T, float *Y, int ldy, int r0, int r1, int add, void *scratch) {
    size_t xs = act_row_bytes(fmt, cols);
    int tile = kernels_row_tile(row_bytes);
    for (int ra = r0; ra < r1; ra += tile) {
        int rz = r1 - ra > tile ? ra + tile : r1;
        for (int t = 0; t < T; t++)
            matvec_q(type, W, row_bytes, cols, fmt, (const uint8_t *)Xq + xs * (size_t)t, Y + (size_t)t * ldy + (ra - r0), ra,
                     rz, add);
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

static void swiglu(float *out, const float *g, const float *u, int n) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < n; i += 8) {
        float gb[8] = {0}, ub[8] = {0}, ob[8];
        const float *gp = g + i, *up = u + i;
        if (n - i < 8) {
            TAIL_COPY(gb, g, i, n);
            TAIL_COPY(ub, u, i, n);
            gp = gb;
            up = ub;
        }
        __m256 gv = _mm256_loadu_ps(gp);
        __m256 r = _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, exp_ps(_mm256_xor_ps(gv, sign)))), _mm256_loadu_ps(up));
        if (n - i < 8) {
            _mm256_storeu_ps(ob, r);
            memcpy(out + i, ob, sizeof(float) * (size_t)(n - i));
        } else {
            _mm256_storeu_ps(out + i, r);
        }
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

const kernels_ops kernels_avx2_ops = {matvec,   matmul, quantize_act, matvec_q,  matmul_q,
                                      rms_norm, swiglu, softmax_span, f32_to_f16, read_bytes};

#endif
