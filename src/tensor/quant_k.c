/* Writers of the K-quants (Q4_K, Q5_K, Q6_K): super-blocks of 256 weights in sub-blocks with
 * integer scales under an fp16 super-block scale (layouts in quant.h). Each sub-block's scale (and
 * offset) comes from a search that minimises its squared error: a range of candidate step sizes,
 * each rounding the weights and refitting scale and offset by least squares on those integers,
 * then rounding again under the refit; the best candidate wins. The sub-block scales are then
 * rounded to the format's integers under the super-block scale, and every weight is rounded once
 * more under the scale it will actually be read with. */
#include <math.h>
#include <string.h>

#include "tensor/quant.h"

#define QK_K 256
#define N_STEPS 8 /* candidate steps on each side of the plain range / levels */

static void store_fp16(uint8_t *p, float v) {
    uint16_t h = quant_f32_to_fp16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* x ≈ a * q + c, q in 0..nmax, c <= 0: the integers under (a, c) and their squared error. */
static double affine_round(const float *x, int n, int nmax, float a, float c, uint8_t *q) {
    double err = 0;
    float ia = a > 0 ? 1.0f / a : 0.0f;
    for (int i = 0; i < n; i++) {
        q[i] = (uint8_t)clampi((int)lrintf((x[i] - c) * ia), 0, nmax);
        double e = (double)a * q[i] + c - x[i];
        err += e * e;
    }
    return err;
}

/* The least-squares (a, c) for fixed integers q, with c held at or below 0. False when the
 * integers are all equal (no slope to fit). */
static bool affine_refit(const float *x, int n, const uint8_t *q, float *a, float *c) {
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

/* The sub-block's best (a, c): a > 0 (or 0 for a constant block), c <= 0. */
static void affine_search(const float *x, int n, int nmax, float *a_out, float *c_out) {
    float lo = 0.0f, hi = x[0];
    for (int i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    *a_out = 0.0f;
    *c_out = lo;
    if (hi <= lo) return;
    uint8_t q[32];
    double best = affine_round(x, n, nmax, (hi - lo) / (float)nmax, lo, q);
    *a_out = (hi - lo) / (float)nmax;
    for (int s = -N_STEPS; s <= N_STEPS; s++) {
        float a = (hi - lo) / ((float)nmax + 0.12f * (float)s), c = lo;
        affine_round(x, n, nmax, a, c, q);
        for (int pass = 0; pass < 2 && affine_refit(x, n, q, &a, &c); pass++) {
            double err = affine_round(x, n, nmax, a, c, q);
            if (err < best) {
                best = err;
                *a_out = a;
                *c_out = c;
            }
        }
    }
}

/* x ≈ a * q, q in -32..31 (Q6_K): the integers and the squared error. */
static double sym_round(const float *x, int n, float a, int8_t *q) {
    double err = 0;
    float ia = a != 0 ? 1.0f / a : 0.0f;
    for (int i = 0; i < n; i++) {
        q[i] = (int8_t)clampi((int)lrintf(x[i] * ia), -32, 31);
        double e = (double)a * q[i] - x[i];
        err += e * e;
    }
    return err;
}

static float sym_search(const float *x, int n) {
    float max = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > fabsf(max)) max = x[i];
    if (max == 0.0f) return 0.0f;
    int8_t q[16];
    float best_a = max / -32.0f;
    double best = sym_round(x, n, best_a, q);
    for (int s = -N_STEPS; s <= N_STEPS; s++) {
        float a = max / -(32.0f + 0.25f * (float)s);
        sym_round(x, n, a, q);
        double sqx = 0, sqq = 0;
        for (int i = 0; i < n; i++) {
            sqx += (double)q[i] * x[i];
            sqq += (double)q[i] * q[i];
        }
        if (sqq == 0) continue;
        a = (float)(sqx / sqq);
        double err = sym_round(x, n, a, q);
        if (err < best) {
            best = err;
            best_a = a;
        }
    }
    return best_a;
}

/* Q4_K and Q5_K: eight sub-blocks of 32 with 6-bit scales and mins; the integers of weight k in
 * q[k]. Returns the fp16-rounded d and dmin through the block's first four bytes. */
static void q45_K_block(const float *x, int nmax, uint8_t *blk, uint8_t q[QK_K]) {
    float a[8], m[8], amax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        float c;
        affine_search(x + 32 * j, 32, nmax, &a[j], &c);
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
        affine_round(x + 32 * j, 32, nmax, d * (float)sc[j], -(dmin * (float)mn[j]), q + 32 * j);
    }
    uint8_t *p = blk + 4; /* the 12 scale bytes, as quant_q4_K_scales reads them */
    for (int j = 0; j < 4; j++) {
        p[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        p[j + 4] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
        p[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | (mn[j + 4] & 0xF) << 4);
    }
}

/* Sub-block j's low nibbles: nibble j % 2 of qs[32 * (j / 2) + l]. */
static void put_q4_K_nibbles(uint8_t *qs, const uint8_t q[QK_K]) {
    for (int j = 0; j < 8; j += 2)
        for (int l = 0; l < 32; l++)
            qs[16 * j + l] = (uint8_t)((q[32 * j + l] & 0xF) | (q[32 * (j + 1) + l] & 0xF) << 4);
}

void quant_q4_K(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QK_K, dst += sizeof(block_Q4_K)) {
        uint8_t q[QK_K];
        q45_K_block(x, 15, dst, q);
        put_q4_K_nibbles(dst + offsetof(block_Q4_K, qs), q);
    }
}

void quant_q5_K(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QK_K, dst += sizeof(block_Q5_K)) {
        uint8_t q[QK_K];
        q45_K_block(x, 31, dst, q);
        uint8_t *qh = dst + offsetof(block_Q5_K, qh);
        memset(qh, 0, 32);
        for (int j = 0; j < 8; j++)
            for (int l = 0; l < 32; l++) qh[l] |= (uint8_t)((q[32 * j + l] >> 4) << j);
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
            a[s] = sym_search(x + 16 * s, 16);
            amax = fabsf(a[s]) > amax ? fabsf(a[s]) : amax;
        }
        store_fp16(dst + offsetof(block_Q6_K, d), amax / 127.0f);
        float d = quant_fp16_to_f32((uint16_t)(dst[offsetof(block_Q6_K, d)] | dst[offsetof(block_Q6_K, d) + 1] << 8));
        int8_t *scales = (int8_t *)(dst + offsetof(block_Q6_K, scales));
        int8_t q[QK_K];
        for (int s = 0; s < 16; s++) {
            scales[s] = (int8_t)(d > 0 ? clampi((int)lrintf(a[s] / d), -127, 127) : 0);
            sym_round(x + 16 * s, 16, d * (float)scales[s], q + 16 * s);
        }
        uint8_t *ql = dst + offsetof(block_Q6_K, ql), *qh = dst + offsetof(block_Q6_K, qh);
        memset(ql, 0, 128);
        memset(qh, 0, 64);
        for (int k = 0; k < QK_K; k++) {
            int j = k / 32, h = j / 4, p = j % 4, l = k % 32, v = q[k] + 32;
            ql[64 * h + 32 * (p % 2) + l] |= (uint8_t)((v & 0xF) << (4 * (p / 2)));
            qh[32 * h + l] |= (uint8_t)((v >> 4) << (2 * p));
        }
    }
}
