/* Each quantised type's integer form (quant.h) one weight at a time: qf_w_<TYPE>(block, j, k) is
 * w[k] of group j of a block, and qf_ab_<TYPE>(block, j, a, b) the group's scales a[2] and
 * offsets b[2] (per half of 16 weights). quant.c builds its groups from these and the CUDA
 * kernels read their weights with them (src/cuda/ops.cu), so a type is defined once for both.
 * Included by quant.h after the block layouts; written to compile as C and as CUDA C++ (QF_FN
 * makes the functions callable on the device too). */
#ifndef NC_QUANT_FORM_H
#define NC_QUANT_FORM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define QF_FN static __host__ __device__ __forceinline__
#else
#define QF_FN static inline
#endif

/* Little-endian fields (as files store them) from bytes. */
QF_FN uint32_t qf_le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
QF_FN uint32_t quant_load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

QF_FN float qf_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE half to f32, exactly (quant_fp16_to_f32). */
QF_FN float qf_fp16(uint32_t h) {
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    if (exp == 0x1F) return qf_bits_f32(sign | 0x7F800000u | (man << 13)); /* inf, nan keeps payload */
    if (exp != 0) return qf_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
    /* zero or subnormal: man * 2^-24, exact in f32 */
    float v = (float)man * 0x1p-24f;
    return sign ? -v : v;
}

/* An E8M0 scale byte (MXFP4) times 1/2: 2^(e - 128), as bits (subnormal below e = 2, where
 * 2^-128 is bit 21 of the significand); e = 255 is NaN (OCP MX v1.0). */
QF_FN float qf_e8m0_half(uint32_t e) {
    if (e == 0xFF) return qf_bits_f32(0x7FC00000u);
    return qf_bits_f32(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

/* The 16 values of IQ4_NL's and IQ4_XS's codes, and MXFP4's E2M1 values doubled (the format's
 * constants, quant_iq4_values and quant_e2m1x2_values), one byte each in two words. */
QF_FN int qf_iq4(uint32_t q) {
    uint64_t v = q < 8 ? 0xF6EADDCFBFAD9881ull : 0x7159453526190D01ull;
    return (int8_t)(uint8_t)(v >> (8 * (q & 7)));
}
QF_FN int qf_e2m1x2(uint32_t q) {
    uint64_t v = q < 8 ? 0x0C08060403020100ull : 0xF4F8FAFCFDFEFF00ull;
    return (int8_t)(uint8_t)(v >> (8 * (q & 7)));
}

/* Weight k of 16 nibble bytes: low nibbles 0-15, high nibbles 16-31. */
QF_FN uint32_t qf_nibble(const uint8_t *qs, int k) { return (uint32_t)(qs[k % 16] >> (k < 16 ? 0 : 4)) & 0xF; }
/* Bit k of a little-endian bit field. */
QF_FN uint32_t qf_bit(const uint8_t *bits, int k) { return (uint32_t)(bits[k / 8] >> (k % 8)) & 1; }
/* Q2_K and Q3_K: the 2-bit field of weight l of group j (weights 32j .. 32j+31). */
QF_FN uint32_t qf_crumb(const uint8_t *qs, int j, int l) { return (uint32_t)(qs[32 * (j / 4) + l] >> (2 * (j % 4))) & 3; }

/* Q4_K and Q5_K: the eight 6-bit scales and mins packed in a block's 12 scale bytes. Sub-block
 * j < 4 keeps its scale and min in the low 6 bits of bytes j and j+4; sub-block j >= 4 keeps
 * their low 4 bits in the nibbles of byte j+4 and their top 2 bits in the top bits of bytes j-4
 * and j. Worked on four bytes at a time (four sub-blocks side by side in one word); byte j of *sc
 * and *m (least significant first) is sub-block j's scale and min. */
QF_FN void quant_q4_K_scales64(const uint8_t packed[12], uint64_t *sc, uint64_t *m) {
    uint32_t a = quant_load_le32(packed), b = quant_load_le32(packed + 4), c = quant_load_le32(packed + 8);
    uint32_t lo6 = 0x3F3F3F3Fu, lo4 = 0x0F0F0F0Fu, top2 = 0x30303030u; /* masks per byte */
    *sc = (a & lo6) | (uint64_t)((c & lo4) | ((a >> 2) & top2)) << 32;
    *m = (b & lo6) | (uint64_t)(((c >> 4) & lo4) | ((b >> 2) & top2)) << 32;
}

/* One scale and offset for both halves. */
QF_FN void qf_set(float a[2], float b[2], float av, float bv) {
    a[0] = a[1] = av;
    b[0] = b[1] = bv;
}

/* ---- the types (layouts in quant.h) ---- */

QF_FN int qf_w_Q4_0(const uint8_t *blk, int j, int k) { return (int)qf_nibble(blk + 2, k) - 8; }
QF_FN void qf_ab_Q4_0(const uint8_t *blk, int j, float a[2], float b[2]) { qf_set(a, b, qf_fp16(qf_le16(blk)), 0.0f); }

QF_FN int qf_w_Q4_1(const uint8_t *blk, int j, int k) { return (int)qf_nibble(blk + 4, k); }
QF_FN void qf_ab_Q4_1(const uint8_t *blk, int j, float a[2], float b[2]) {
    qf_set(a, b, qf_fp16(qf_le16(blk)), qf_fp16(qf_le16(blk + 2)));
}

QF_FN int qf_w_Q5_0(const uint8_t *blk, int j, int k) { return (int)(qf_nibble(blk + 6, k) | qf_bit(blk + 2, k) << 4) - 16; }
QF_FN void qf_ab_Q5_0(const uint8_t *blk, int j, float a[2], float b[2]) { qf_set(a, b, qf_fp16(qf_le16(blk)), 0.0f); }

QF_FN int qf_w_Q5_1(const uint8_t *blk, int j, int k) { return (int)(qf_nibble(blk + 8, k) | qf_bit(blk + 4, k) << 4); }
QF_FN void qf_ab_Q5_1(const uint8_t *blk, int j, float a[2], float b[2]) {
    qf_set(a, b, qf_fp16(qf_le16(blk)), qf_fp16(qf_le16(blk + 2)));
}

QF_FN int qf_w_Q8_0(const uint8_t *blk, int j, int k) { return (int8_t)blk[2 + k]; }
QF_FN void qf_ab_Q8_0(const uint8_t *blk, int j, float a[2], float b[2]) { qf_set(a, b, qf_fp16(qf_le16(blk)), 0.0f); }

QF_FN int qf_w_Q2_K(const uint8_t *blk, int j, int k) { return (int)qf_crumb(blk + offsetof(block_Q2_K, qs), j, k); }
QF_FN void qf_ab_Q2_K(const uint8_t *blk, int j, float a[2], float b[2]) {
    const uint8_t *sc = blk + offsetof(block_Q2_K, scales) + 2 * j;
    float d = qf_fp16(qf_le16(blk + offsetof(block_Q2_K, d))), dmin = qf_fp16(qf_le16(blk + offsetof(block_Q2_K, dmin)));
    for (int h = 0; h < 2; h++) {
        a[h] = d * (float)(sc[h] & 0xF);
        b[h] = -(dmin * (float)(sc[h] >> 4));
    }
}

QF_FN int qf_w_Q3_K(const uint8_t *blk, int j, int k) {
    return (int)qf_crumb(blk + offsetof(block_Q3_K, qs), j, k) - (blk[offsetof(block_Q3_K, hmask) + k] >> j & 1 ? 0 : 4);
}
/* Q3_K's 6-bit scale i (0..15), offset by 32. */
QF_FN int qf_q3_K_scale(const uint8_t *s, int i) {
    return (((s[i % 8] >> (4 * (i / 8))) & 0xF) | ((s[8 + i % 4] >> (2 * (i / 4))) & 3) << 4) - 32;
}
QF_FN void qf_ab_Q3_K(const uint8_t *blk, int j, float a[2], float b[2]) {
    float d = qf_fp16(qf_le16(blk + offsetof(block_Q3_K, d)));
    for (int h = 0; h < 2; h++) {
        a[h] = d * (float)qf_q3_K_scale(blk + offsetof(block_Q3_K, scales), 2 * j + h);
        b[h] = 0.0f;
    }
}

/* Q4_K and Q5_K share the scales and the low nibbles; Q5_K adds a fifth bit from qh. */
QF_FN int qf_w_Q4_K(const uint8_t *blk, int j, int k) {
    return (blk[offsetof(block_Q4_K, qs) + 32 * (j / 2) + k] >> (4 * (j % 2))) & 0xF;
}
QF_FN void qf_ab_Q4_K(const uint8_t *blk, int j, float a[2], float b[2]) {
    uint64_t sc, m;
    quant_q4_K_scales64(blk + offsetof(block_Q4_K, scales), &sc, &m);
    qf_set(a, b, qf_fp16(qf_le16(blk)) * (float)(uint8_t)(sc >> (8 * j)),
           -(qf_fp16(qf_le16(blk + 2)) * (float)(uint8_t)(m >> (8 * j))));
}

QF_FN int qf_w_Q5_K(const uint8_t *blk, int j, int k) {
    return ((blk[offsetof(block_Q5_K, qs) + 32 * (j / 2) + k] >> (4 * (j % 2))) & 0xF) |
           (blk[offsetof(block_Q5_K, qh) + k] >> j & 1) << 4;
}
QF_FN void qf_ab_Q5_K(const uint8_t *blk, int j, float a[2], float b[2]) { qf_ab_Q4_K(blk, j, a, b); }

/* Group j of half h = j / 4, part p = j % 4: nibble p / 2 of ql[64h + 32 * (p % 2) + k] and bits
 * 2p, 2p+1 of qh[32h + k] on top. */
QF_FN int qf_w_Q6_K(const uint8_t *blk, int j, int k) {
    int p = j % 4;
    uint32_t lo = blk[offsetof(block_Q6_K, ql) + 64 * (j / 4) + 32 * (p % 2) + k] >> (4 * (p / 2));
    uint32_t hi = blk[offsetof(block_Q6_K, qh) + 32 * (j / 4) + k] >> (2 * p);
    return (int)((lo & 0xF) | (hi & 3) << 4) - 32;
}
QF_FN void qf_ab_Q6_K(const uint8_t *blk, int j, float a[2], float b[2]) {
    float d = qf_fp16(qf_le16(blk + offsetof(block_Q6_K, d)));
    for (int h = 0; h < 2; h++) {
        a[h] = d * (float)(int8_t)blk[offsetof(block_Q6_K, scales) + 2 * j + h];
        b[h] = 0.0f;
    }
}

QF_FN int qf_w_IQ4_NL(const uint8_t *blk, int j, int k) { return qf_iq4(qf_nibble(blk + 2, k)); }
QF_FN void qf_ab_IQ4_NL(const uint8_t *blk, int j, float a[2], float b[2]) { qf_set(a, b, qf_fp16(qf_le16(blk)), 0.0f); }

QF_FN int qf_w_IQ4_XS(const uint8_t *blk, int j, int k) {
    return qf_iq4(qf_nibble(blk + offsetof(block_IQ4_XS, qs) + 16 * j, k));
}
QF_FN void qf_ab_IQ4_XS(const uint8_t *blk, int j, float a[2], float b[2]) {
    int ls = ((blk[offsetof(block_IQ4_XS, scales_l) + j / 2] >> (4 * (j % 2))) & 0xF) |
             ((qf_le16(blk + offsetof(block_IQ4_XS, scales_h)) >> (2 * j)) & 3) << 4;
    qf_set(a, b, qf_fp16(qf_le16(blk)) * (float)(ls - 32), 0.0f);
}

/* IQ3_S: weights 4i..4i+3 of group j are the magnitudes of grid entry qs[8j + i] + 256 * bit i of
 * qh[j] (quant_iq3_s_grid, built when the program loads), signed by bits 32j.. of signs. Device
 * code reads its own copy of the grid, which cu_open fills (src/cuda/ops.cu; in the emulator too,
 * so the tests see that copy): in global memory, through the L1 cache, not in constant memory,
 * which serialises a warp's lanes looking up different entries. */
#if defined(__CUDACC__) || defined(NC_CUDA_EMULATE)
static __device__ uint32_t qf_iq3_s_grid_dev[512];
#endif
QF_FN uint32_t qf_iq3_s_entry(uint32_t i) {
#if defined(__CUDA_ARCH__) || defined(NC_CUDA_EMULATE)
    return qf_iq3_s_grid_dev[i];
#else
    return quant_iq3_s_grid[i];
#endif
}
QF_FN int qf_w_IQ3_S(const uint8_t *blk, int j, int k) {
    uint32_t i = (uint32_t)k / 4, q = blk[offsetof(block_IQ3_S, qs) + 8 * j + i];
    uint32_t e = qf_iq3_s_entry(q | qf_bit(blk + offsetof(block_IQ3_S, qh) + j, (int)i) << 8);
    int v = (int)(e >> (8 * (k % 4)) & 0xFF);
    return qf_bit(blk + offsetof(block_IQ3_S, signs) + 4 * j, k) ? -v : v;
}
QF_FN void qf_ab_IQ3_S(const uint8_t *blk, int j, float a[2], float b[2]) {
    int s = (blk[offsetof(block_IQ3_S, scales) + j / 2] >> (4 * (j % 2))) & 0xF;
    qf_set(a, b, qf_fp16(qf_le16(blk)) * (float)(1 + 2 * s), 0.0f);
}

/* The E2M1 values doubled, so the scale is 2^(e-128): both exact. */
QF_FN int qf_w_MXFP4(const uint8_t *blk, int j, int k) { return qf_e2m1x2(qf_nibble(blk + 1, k)); }
QF_FN void qf_ab_MXFP4(const uint8_t *blk, int j, float a[2], float b[2]) { qf_set(a, b, qf_e8m0_half(blk[0]), 0.0f); }

#endif
