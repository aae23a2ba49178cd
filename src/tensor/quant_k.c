/* Writers of the K-quants (Q3_K, Q4_K, Q5_K, Q6_K): super-blocks of 256 weights in sub-blocks with
 * integer scales under an fp16 super-block scale (layouts in quant.h). Each sub-block's scale (and
 * offset) comes from a search that minimises its squared error: a range of candidate step sizes,
 * each rounding the weights and refitting scale and offset by least squares on those integers,
 * then rounding again under the refit; the best candidate wins (9 candidates: a finer grid gains
 * under 0.1% of error on tiny-k at twice the time). The sub-block scales are then rounded to the
 * format's integers under the super-block scale, and every weight is rounded once more under the
 * scale it will actually be read with. */
#include <math.h>
#include <string.h>

#include "tensor/quant.h"

#define QK_K 256
#define N_STEPS 4 /* candidate steps on each side of the plain range / levels */

static void store_fp16(uint8_t *p, float v) {
    uint16_t h = quant_f32_to_fp16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Round to the nearest integer (ties to even) for |v| < 2^22, in plain float arithmetic that the
 * compiler vectorises (baseline x86-64 has no vector rounding instruction). */
static float round_near(float v) { return (v + 12582912.0f) - 12582912.0f; }

/* x ≈ a * q + c, q in 0..nmax, c <= 0, 32 weights: the integers (as floats) and the squared error. */
static float affine_round(const float *x, float nmax, float a, float c, float *q) {
    float ia = a > 0 ? 1.0f / a : 0.0f, e[32], err = 0.0f;
    for (int i = 0; i < 32; i++) {
        float v = round_near((x[i] - c) * ia);
        q[i] = v < 0.0f ? 0.0f : v > nmax ? nmax : v;
        e[i] = a * q[i] + c - x[i];
        e[i] *= e[i];
    }
    for (int i = 0; i < 32; i++) err += e[i];
    return err;
}

/* The least-squares (a, c) for fixed integers q, with c held at or below 0. False when the
 * integers are all equal (no slope to fit). */
static bool affine_refit(const float *x, const float *q, float *a, float *c) {
    const int n = 32;
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; i++) {
        sq += q[i];
        sqq += (double)q[i] * q[i];
        sx += x[i];
        sqx += (double)q[i] * x[i];
    }
    double det = n * sqq - sq * sq;
    if (det <= 0) return false;
    double aa = (n * sqx - sq * sx) / det, cc = (sx - aa * sq) / n;
    if (cc > 0) {
        cc = 0;
        aa = sqq > 0 ? sqx / sqq : 0;
    }
    if (aa <= 0) return false;
    *a = (float)aa;
    *c = (float)cc;
    return true;
}

/* The best (a, c) of 32 weights: a > 0 (or 0 for a constant block), c <= 0. */
static void affine_search(const float *x, float nmax, float *a_out, float *c_out) {
    float lo = 0.0f, hi = x[0];
    for (int i = 0; i < 32; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    *a_out = 0.0f;
    *c_out = lo;
    if (hi <= lo) return;
    float q[32];
    float best = affine_round(x, nmax, (hi - lo) / nmax, lo, q);
    *a_out = (hi - lo) / nmax;
    for (int s = -N_STEPS; s <= N_STEPS; s++) {
        float a = (hi - lo) / (nmax + 0.24f * (float)s), c = lo;
        affine_round(x, nmax, a, c, q);
        for (int pass = 0; pass < 2 && affine_refit(x, q, &a, &c); pass++) {
            float err = affine_round(x, nmax, a, c, q);
            if (err < best) {
                best = err;
                *a_out = a;
                *c_out = c;
            }
        }
    }
}

/* x ≈ a * q, q in -half..half-1 (Q6_K: 32, Q3_K: 4), 16 weights: the integers (as floats) and the
 * squared error. */
static float sym_round(const float *x, float half, float a, float *q) {
    float ia = a != 0 ? 1.0f / a : 0.0f, e[16], err = 0.0f;
    for (int i = 0; i < 16; i++) {
        float v = round_near(x[i] * ia);
        q[i] = v < -half ? -half : v > half - 1.0f ? half - 1.0f : v;
        e[i] = a * q[i] - x[i];
        e[i] *= e[i];
    }
    for (int i = 0; i < 16; i++) err += e[i];
    return err;
}

/* The best a of 16 weights: candidates map the value of largest magnitude to -(half + step * s). */
static float sym_search(const float *x, float half, float step) {
    float max = 0.0f;
    for (int i = 0; i < 16; i++)
        if (fabsf(x[i]) > fabsf(max)) max = x[i];
    if (max == 0.0f) return 0.0f;
    float q[16];
    float best_a = max / -half, best = sym_round(x, half, best_a, q);
    for (int s = -N_STEPS; s <= N_STEPS; s++) {
        sym_round(x, half, max / -(half + step * (float)s), q);
        float sqx = 0, sqq = 0;
        for (int i = 0; i < 16; i++) {
            sqx += q[i] * x[i];
            sqq += q[i] * q[i];
        }
        if (sqq == 0) continue;
        float a = sqx / sqq, err = sym_round(x, half, a, q);
        if (err < best) {
            best = err;
            best_a = a;
        }
    }
    return best_a;
}

/* Q4_K and Q5_K: eight sub-blocks of 32 with 6-bit scales and mins; the integers of weight k in
 * q[k]. Returns the fp16-rounded d and dmin through the block's first four bytes. */
static void q45_K_block(const float *x, float nmax, uint8_t *blk, float q[QK_K]) {
    float a[8], m[8], amax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        float c;
        affine_search(x + 32 * j, nmax, &a[j], &c);
        m[j] = -c;
        amax = a[j] > amax ? a[j] : amax;
        mmax = m[j] > mmax ? m[j] : mmax;
    }
    store_fp16(blk, amax / 63.0f);
    store_fp16(blk + 2, mmax / 63.0f);
    float d = quant_fp16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
    float dmin = quant_fp16_to_f32((uint16_t)(blk[2] | blk[3] << 8));
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0 ? clampi((int)lrintf(a[j] / d), 0, 63) : 0);
        mn[j] = (uint8_t)(dmin > 0 ? clampi((int)lrintf(m[j] / dmin), 0, 63) : 0);
        affine_round(x + 32 * j, nmax, d * (float)sc[j], -(dmin * (float)mn[j]), q + 32 * j);
    }
    uint8_t *p = blk + 4; /* the 12 scale bytes, as quant_q4_K_scales reads them */
    for (int j = 0; j < 4; j++) {
        p[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        p[j + 4] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
        p[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | (mn[j + 4] & 0xF) << 4);
    }
}

/* Sub-block j's low nibbles: nibble j % 2 of qs[32 * (j / 2) + l]. */
static void put_q4_K_nibbles(uint8_t *qs, const float q[QK_K]) {
    for (int j = 0; j < 8; j += 2)
        for (int l = 0; l < 32; l++)
            qs[16 * j + l] = (uint8_t)(((int)q[32 * j + l] & 0xF) | ((int)q[32 * (j + 1) + l] & 0xF) << 4);
}

void quant_q4_K(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QK_K, dst += sizeof(block_Q4_K)) {
        float q[QK_K];
        q45_K_block(x, 15.0f, dst, q);
        put_q4_K_nibbles(dst + offsetof(block_Q4_K, qs), q);
    }
}

void quant_q5_K(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QK_K, dst += sizeof(block_Q5_K)) {
        float q[QK_K];
        q45_K_block(x, 31.0f, dst, q);
        uint8_t *qh = dst + offsetof(block_Q5_K, qh);
        memset(qh, 0, 32);
        for (int j = 0; j < 8; j++)
            for (int l = 0; l < 32; l++) qh[l] |= (uint8_t)(((int)q[32 * j + l] >> 4) << j);
        put_q4_K_nibbles(dst + offsetof(block_Q5_K, qs), q);
    }
}

/* Q6_K: sixteen sub-blocks of 16 with int8 scales. Weight k (group j = k / 32 of half h = j / 4,
 * part p = j % 4, position l) keeps q + 32 in nibble p / 2 of ql[64h + 32 (p % 2) + l] and bits
 * 2p, 2p + 1 of qh[32h + l]. */
void quant_q6_K(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QK_K, dst += sizeof(block_Q6_K)) {
        float a[16], amax = 0.0f;
        for (int s = 0; s < 16; s++) {
            a[s] = sym_search(x + 16 * s, 32.0f, 0.5f);
            amax = fabsf(a[s]) > amax ? fabsf(a[s]) : amax;
        }
        store_fp16(dst + offsetof(block_Q6_K, d), amax / 127.0f);
        float d = quant_fp16_to_f32((uint16_t)(dst[offsetof(block_Q6_K, d)] | dst[offsetof(block_Q6_K, d) + 1] << 8));
        int8_t *scales = (int8_t *)(dst + offsetof(block_Q6_K, scales));
        float q[QK_K];
        for (int s = 0; s < 16; s++) {
            scales[s] = (int8_t)(d > 0 ? clampi((int)lrintf(a[s] / d), -127, 127) : 0);
            sym_round(x + 16 * s, 32.0f, d * (float)scales[s], q + 16 * s);
        }
        uint8_t *ql = dst + offsetof(block_Q6_K, ql), *qh = dst + offsetof(block_Q6_K, qh);
        memset(ql, 0, 128);
        memset(qh, 0, 64);
        for (int k = 0; k < QK_K; k++) {
            int j = k / 32, h = j / 4, p = j % 4, l = k % 32, v = (int)q[k] + 32;
            ql[64 * h + 32 * (p % 2) + l] |= (uint8_t)((v & 0xF) << (4 * (p / 2)));
            qh[32 * h + l] |= (uint8_t)((v >> 4) << (2 * p));
        }
    }
}

/* Q3_K: sixteen sub-blocks of 16 with 6-bit signed scales (stored + 32) and q in -4..3, stored
 * + 4: its low 2 bits as Q2_K's (weight 128n + 32j + l at bits 2j of qs[32n + l]), its high bit
 * as bit i of hmask[l] for weight 32i + l. */
void quant_q3_K(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QK_K, dst += sizeof(block_Q3_K)) {
        float a[16], amax = 0.0f;
        for (int s = 0; s < 16; s++) {
            a[s] = sym_search(x + 16 * s, 4.0f, 0.125f);
            amax = fabsf(a[s]) > amax ? fabsf(a[s]) : amax;
        }
        uint8_t *dp = dst + offsetof(block_Q3_K, d), *sc = dst + offsetof(block_Q3_K, scales);
        store_fp16(dp, amax / 31.0f);
        float d = quant_fp16_to_f32((uint16_t)(dp[0] | dp[1] << 8));
        float q[QK_K];
        memset(sc, 0, K_SCALE_SIZE);
        for (int s = 0; s < 16; s++) {
            int v = d > 0 ? clampi((int)lrintf(a[s] / d), -32, 31) : 0;
            sym_round(x + 16 * s, 4.0f, d * (float)v, q + 16 * s);
            int u = v + 32;
            sc[s % 8] |= (uint8_t)((u & 0xF) << (4 * (s / 8)));
            sc[8 + s % 4] |= (uint8_t)((u >> 4) << (2 * (s / 4)));
        }
        uint8_t *hmask = dst + offsetof(block_Q3_K, hmask), *qs = dst + offsetof(block_Q3_K, qs);
        memset(hmask, 0, 32);
        memset(qs, 0, 64);
        for (int k = 0; k < QK_K; k++) {
            int u = (int)q[k] + 4, i = k / 32, l = k % 32;
            qs[32 * (i / 4) + l] |= (uint8_t)((u & 3) << (2 * (i % 4)));
            hmask[l] |= (uint8_t)((u >> 2) << i);
        }
    }
}
