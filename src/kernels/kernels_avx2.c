/* AVX2 + FMA + F16C kernels (8 f32 lanes), the same scheme as the AVX-512 set: Q8_0 and Q4_0 take
 * integer activations (8 rows at a time, exact reduction, see the integer section); Q4_K and Q6_K
 * make each sub-block's weights exact f32 values first and FMA them with x. Four accumulators per
 * token (FMA latency is four cycles): step u of a float row goes to accumulator u % NACC; in
 * K-quants, the i-th vector of every 32 weights goes to accumulator i. With 16 vector registers,
 * a matmul tile is two tokens. Per-token order is independent of the tile (see kernels_impl.h). */
#if defined(__x86_64__) && defined(__AVX2__)

#include <immintrin.h>
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

/* Step u of 8 weights goes to accumulator u % NACC; a last partial step (zero padded) to 0. */
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
            acc[t][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xb), acc[t][0]);
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

/* ---- Q4_K: blocks of 256, 8 sub-blocks of 32 ---- */

/* d*sc[j] and dmin*m[j] for the 8 sub-blocks (exact products). */
KERNELS_INLINE void q4_K_scales(const uint8_t *blk, float dsc[8], float dm[8]) {
    uint64_t sc, m;
    quant_q4_K_scales64(blk + 4, &sc, &m);
    __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
    __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m)));
    _mm256_storeu_ps(dsc, _mm256_mul_ps(bcast_fp16(blk), scf));
    _mm256_storeu_ps(dm, _mm256_mul_ps(bcast_fp16(blk + 2), mf));
}

/* 32 bytes of 4-bit values (0..15) as four vectors of 8 floats, in byte order. */
static inline void u4x32_to_f32(__m256i v, __m256 q[4]) {
    __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    q[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
    q[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
    q[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
    q[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
}

KERNELS_INLINE void q4_K_rows(const uint8_t *w, int cols, const float *X, int nt, float *out) {
    __m256 acc[KT][NACC];
    zero_acc(acc, nt);
    const __m256i low4 = _mm256_set1_epi8(0xF);
    for (int b = 0; b < cols / QK_K; b++, w += sizeof(block_q4_K)) {
        float dsc[8], dm[8];
        q4_K_scales(w, dsc, dm);
        FROM_MEMORY(dsc);
        FROM_MEMORY(dm);
        const uint8_t *qs = w + 4 + K_SCALE_SIZE;
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) { /* sub-block j: nibble j % 2 of bytes 32 * (j / 2) .. +31 */
            __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * (j / 2)));
            if (j % 2) v = _mm256_srli_epi16(v, 4);
            __m256 q[4], s = _mm256_broadcast_ss(&dsc[j]), m = _mm256_broadcast_ss(&dm[j]);
            u4x32_to_f32(_mm256_and_si256(v, low4), q);
#pragma GCC unroll 8
            for (int i = 0; i < 4; i++) q[i] = _mm256_fmsub_ps(q[i], s, m); /* the exact weights */
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++) {
                const float *x = X + (size_t)t * cols + QK_K * b + 32 * j;
#pragma GCC unroll 8
                for (int i = 0; i < 4; i++) acc[t][i] = _mm256_fmadd_ps(q[i], _mm256_loadu_ps(x + 8 * i), acc[t][i]);
            }
        }
    }
    reduce_acc(acc, nt, out);
}

/* ---- Q6_K: blocks of 256, 16 sub-blocks of 16 ---- */

/* One half block: the four runs of 32 values (weights 0-31, 32-63, 64-95, 96-127), as int8. */
static inline void q6_K_half(const uint8_t *ql, const uint8_t *qh, __m256i g[4]) {
    const __m256i low4 = _mm256_set1_epi8(0xF), bits45 = _mm256_set1_epi8(0x30), off = _mm256_set1_epi8(32);
    __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    /* 16-bit shifts move bits across bytes; the masks keep only each byte's own bits. */
    g[0] = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), bits45));
    g[1] = _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45));
    g[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(h, bits45));
    g[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                           _mm256_and_si256(_mm256_srli_epi16(h, 2), bits45));
#pragma GCC unroll 8
    for (int i = 0; i < 4; i++) g[i] = _mm256_sub_epi8(g[i], off);
}

KERNELS_INLINE void q6_K_rows(const uint8_t *w, int cols, const float *X, int nt, float *out) {
    __m256 acc[KT][NACC];
    zero_acc(acc, nt);
    for (int b = 0; b < cols / QK_K; b++, w += sizeof(block_q6_K)) {
        float dsc[16];
        __m256 d = bcast_fp16(w + offsetof(block_q6_K, d));
        __m128i sc = _mm_loadu_si128((const __m128i *)(w + offsetof(block_q6_K, scales)));
        _mm256_storeu_ps(dsc, _mm256_mul_ps(d, i8_to_f32(sc)));
        _mm256_storeu_ps(dsc + 8, _mm256_mul_ps(d, i8_to_f32(_mm_srli_si128(sc, 8))));
        FROM_MEMORY(dsc);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i g[4];
            q6_K_half(w + 64 * h, w + offsetof(block_q6_K, qh) + 32 * h, g);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) { /* run i holds sub-blocks j and j + 1 */
                int j = 8 * h + 2 * i;
                __m128i lo = _mm256_castsi256_si128(g[i]), hi = _mm256_extracti128_si256(g[i], 1);
                __m256 s0 = _mm256_broadcast_ss(&dsc[j]), s1 = _mm256_broadcast_ss(&dsc[j + 1]);
                __m256 w0 = _mm256_mul_ps(i8_to_f32(lo), s0), w1 = _mm256_mul_ps(i8_to_f32(_mm_srli_si128(lo, 8)), s0);
                __m256 w2 = _mm256_mul_ps(i8_to_f32(hi), s1), w3 = _mm256_mul_ps(i8_to_f32(_mm_srli_si128(hi, 8)), s1);
#pragma GCC unroll 8
                for (int t = 0; t < nt; t++) {
                    const float *x = X + (size_t)t * cols + QK_K * b + 16 * j;
                    acc[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), acc[t][0]);
                    acc[t][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), acc[t][1]);
                    acc[t][2] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + 16), acc[t][2]);
                    acc[t][3] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + 24), acc[t][3]);
                }
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

/* One row's 8 partial sums of a block times x (weights 0-15 with x0, 16-31 with x1). Q4_0 uses
 * the unsigned nibbles; the offset of 8 is taken out through the activations' sum. */
KERNELS_INLINE __m256i row_partials(uint32_t type, const uint8_t *blk, __m256i x0, __m256i x1) {
    __m256i w0, w1;
    if (type == GGML_TYPE_Q8_0) {
        w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 2)));
        w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 18)));
    } else {
        __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(blk + 2)));
        w0 = _mm256_and_si256(v, _mm256_set1_epi16(0xF));
        w1 = _mm256_srli_epi16(v, 4);
    }
    return _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
}

static inline uint16_t load_u16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return h;
}

/* Rows [0, n) (n <= 8) of W, y[0..n). Missing rows repeat the last one (results dropped). */
static void matvec_q8(uint32_t type, kernels_act fmt, const uint8_t *W, size_t rb, int n, int cols,
                      const void *xq, float *y, int add) {
    const size_t bytes = int_block_bytes(type);
    const act_group *grp = act_groups(xq, fmt, cols);
    const uint8_t *row[8];
    for (int i = 0; i < 8; i++) row[i] = W + (size_t)(i < n ? i : n - 1) * rb;
    __m256 acc = _mm256_setzero_ps();
    for (int g = 0; g < cols / 32; g++) {
        size_t o = (size_t)g * bytes;
        __m256i x0, x1, P[8];
        if (fmt == KERNELS_ACT_I16) {
            x0 = _mm256_loadu_si256((const __m256i *)((const int16_t *)xq + 32 * g));
            x1 = _mm256_loadu_si256((const __m256i *)((const int16_t *)xq + 32 * g + 16));
        } else {
            x0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)((const int8_t *)xq + 32 * g)));
            x1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)((const int8_t *)xq + 32 * g + 16)));
        }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) P[SLOT8(r)] = row_partials(type, row[r] + o, x0, x1);
        __m256i S = reduce8(P);
        if (type == GGML_TYPE_Q4_0) S = _mm256_sub_epi32(S, _mm256_set1_epi32(8 * grp[g].sum));
        __m128i h = _mm_setr_epi16((short)load_u16(row[0] + o), (short)load_u16(row[1] + o), (short)load_u16(row[2] + o),
                                   (short)load_u16(row[3] + o), (short)load_u16(row[4] + o), (short)load_u16(row[5] + o),
                                   (short)load_u16(row[6] + o), (short)load_u16(row[7] + o));
        __m256 s = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(grp[g].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), s, acc);
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

static float dot_f32(const float *a, const float *b, int n) {
    __m256 acc[KT][NACC];
    zero_acc(acc, 1);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        acc[0][0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc[0][0]);
        acc[0][1] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc[0][1]);
    }
    float r;
    reduce_acc(acc, 1, &r);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

static void axpy_f32(float *y, float a, const float *x, int n) {
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

const kernels_ops kernels_avx2_ops = {matvec, matmul, quantize_act, matvec_q, matmul_q, dot_f32, axpy_f32};

#endif
