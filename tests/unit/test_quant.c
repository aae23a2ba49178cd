/* Element types: half-float conversions on known bit patterns, the trait table, hand-built and
 * random blocks of every type against values worked out from the formats' definitions, the
 * formats' constants, the writers (nearest values, round trips), the files llama.cpp quantised
 * (shared/quants) against their F16 original, and the first block of a real Q8_0 model file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "tensor/quant.h"
#include "test.h"

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void test_fp16_to_f32(void) {
    CHECK(quant_fp16_to_f32(0x3C00) == 1.0f);
    CHECK(quant_fp16_to_f32(0xC000) == -2.0f);
    CHECK(quant_fp16_to_f32(0x7BFF) == 65504.0f);
    CHECK(quant_fp16_to_f32(0x0001) == 0x1p-24f);          /* smallest subnormal */
    CHECK(quant_fp16_to_f32(0x03FF) == 1023 * 0x1p-24f);   /* largest subnormal */
    CHECK(quant_fp16_to_f32(0x8001) == -0x1p-24f);
    CHECK(quant_fp16_to_f32(0x0400) == 0x1p-14f);          /* smallest normal */
    CHECK(quant_fp16_to_f32(0x3555) == 0x1.554p-2f);       /* 0.333251953125 */
    CHECK(bits(quant_fp16_to_f32(0x0000)) == 0);
    CHECK(bits(quant_fp16_to_f32(0x8000)) == 0x80000000u);
    CHECK(quant_fp16_to_f32(0x7C00) == INFINITY);
    CHECK(quant_fp16_to_f32(0xFC00) == -INFINITY);
    CHECK(isnan(quant_fp16_to_f32(0x7E00)));
    CHECK(isnan(quant_fp16_to_f32(0x7C01)));
    CHECK(isnan(quant_fp16_to_f32(0xFE00)));
}

static void test_f32_to_fp16(void) {
    CHECK(quant_f32_to_fp16(1.0f) == 0x3C00);
    CHECK(quant_f32_to_fp16(-2.0f) == 0xC000);
    CHECK(quant_f32_to_fp16(65504.0f) == 0x7BFF);
    CHECK(quant_f32_to_fp16(65519.0f) == 0x7BFF);          /* below the halfway point */
    CHECK(quant_f32_to_fp16(65520.0f) == 0x7C00);          /* halfway: even is 65536 = inf */
    CHECK(quant_f32_to_fp16(1e6f) == 0x7C00);
    CHECK(quant_f32_to_fp16(-1e6f) == 0xFC00);
    CHECK(quant_f32_to_fp16(INFINITY) == 0x7C00);
    CHECK(quant_f32_to_fp16(-INFINITY) == 0xFC00);
    uint16_t n = quant_f32_to_fp16(NAN);
    CHECK((n & 0x7C00) == 0x7C00 && (n & 0x3FF) != 0);
    n = quant_f32_to_fp16(from_bits(0x7F800001u));         /* payload only in the low bits */
    CHECK((n & 0x7C00) == 0x7C00 && (n & 0x3FF) != 0);
    CHECK(quant_f32_to_fp16(0.1f) == 0x2E66);
    CHECK(quant_f32_to_fp16(-0.0f) == 0x8000);
    CHECK(quant_f32_to_fp16(1.0f + 0x1p-11f) == 0x3C00);   /* tie: to even */
    CHECK(quant_f32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3C02); /* tie: to even (up) */
    CHECK(quant_f32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3C01);
    CHECK(quant_f32_to_fp16(0x1p-24f) == 0x0001);
    CHECK(quant_f32_to_fp16(0x1p-25f) == 0x0000);          /* tie between 0 and 2^-24 */
    CHECK(quant_f32_to_fp16(1.5f * 0x1p-25f) == 0x0001);
    CHECK(quant_f32_to_fp16(3 * 0x1p-25f) == 0x0002);      /* tie between 1 and 2 units */
    CHECK(quant_f32_to_fp16(5 * 0x1p-25f) == 0x0002);      /* tie between 2 and 3 units */
    CHECK(quant_f32_to_fp16(-3 * 0x1p-25f) == 0x8002);
    CHECK(quant_f32_to_fp16(1023.5f * 0x1p-24f) == 0x0400); /* rounds up into the normals */
    CHECK(quant_f32_to_fp16(0x1p-14f) == 0x0400);
    CHECK(quant_f32_to_fp16(1e-10f) == 0x0000);
    CHECK(quant_f32_to_fp16(from_bits(1)) == 0x0000);      /* f32 subnormal */
    /* Every finite half survives the round trip. */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++)
        if ((h & 0x7C00) != 0x7C00 && quant_f32_to_fp16(quant_fp16_to_f32((uint16_t)h)) != h) bad++;
    CHECK_MSG(bad == 0, "%d halves do not round-trip", bad);
}

static void test_bf16(void) {
    CHECK(quant_bf16_to_f32(0x3F80) == 1.0f);
    CHECK(quant_bf16_to_f32(0xC000) == -2.0f);
    CHECK(quant_bf16_to_f32(0x7F80) == INFINITY);
    CHECK(quant_bf16_to_f32(0x0001) == 0x1p-133f);         /* subnormal */
    CHECK(isnan(quant_bf16_to_f32(0x7FC0)));
    CHECK(quant_f32_to_bf16(1.0f) == 0x3F80);
    CHECK(quant_f32_to_bf16(-2.0f) == 0xC000);
    CHECK(quant_f32_to_bf16(1.0f + 0x1p-8f) == 0x3F80);    /* tie: to even */
    CHECK(quant_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82); /* tie: to even (up) */
    CHECK(quant_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3F81);
    CHECK(quant_f32_to_bf16(1.0f + 0x1p-8f - 0x1p-20f) == 0x3F80);
    CHECK(quant_f32_to_bf16(INFINITY) == 0x7F80);
    CHECK(quant_f32_to_bf16(from_bits(0x7F7FFFFFu)) == 0x7F80); /* FLT_MAX rounds to inf */
    uint16_t n = quant_f32_to_bf16(from_bits(0x7F800001u));
    CHECK((n & 0x7F80) == 0x7F80 && (n & 0x7F) != 0);
    n = quant_f32_to_bf16(from_bits(0xFFC00000u));
    CHECK((n & 0x7F80) == 0x7F80 && (n & 0x7F) != 0 && (n & 0x8000));
}

static void test_type_info(void) {
    static const uint32_t yes[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
                                   GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                                   GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ3_S,
                                   GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4};
    static const uint32_t no[] = {GGML_TYPE_Q8_1, GGML_TYPE_Q8_K, 16, 17, 18, 19, 22, 24, 28, 29, 34, 35, 77};
    int bad = 0;
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        const quant_type *t = quant_type_of(yes[i]);
        const ggml_type_info *g = ggml_type_get(yes[i]);
        bad += !quant_type_supported(yes[i]) || !t || !g || strcmp(t->name, g->name) != 0 ||
               t->block_elems != g->block_elems || t->block_bytes != g->block_bytes ||
               (t->group != NULL) == (t->dequantize != NULL) || (t->group && t->block_elems % 32);
    }
    CHECK_MSG(bad == 0, "%d supported types with wrong table entries", bad);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) CHECK(!quant_type_supported(no[i]) && !quant_type_of(no[i]));
    CHECK(strcmp(quant_supported_names(), "F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "
                                          "IQ4_NL, IQ3_S, IQ4_XS, BF16, MXFP4") == 0);
    /* the layouts' sizes (ggml-common.h's static asserts) */
    CHECK(sizeof(block_Q4_0) == 18 && sizeof(block_Q4_1) == 20 && sizeof(block_Q5_0) == 22 && sizeof(block_Q5_1) == 24);
    CHECK(sizeof(block_Q8_0) == 34 && sizeof(block_IQ4_NL) == 18 && sizeof(block_MXFP4) == 17);
    CHECK(sizeof(block_Q2_K) == 84 && sizeof(block_Q3_K) == 110 && sizeof(block_Q4_K) == 144);
    CHECK(sizeof(block_Q5_K) == 176 && sizeof(block_Q6_K) == 210 && sizeof(block_IQ4_XS) == 136 && sizeof(block_IQ3_S) == 110);
    CHECK(quant_row_bytes(GGML_TYPE_F32, 5) == 20);
    CHECK(quant_row_bytes(GGML_TYPE_F16, 3) == 6);
    CHECK(quant_row_bytes(GGML_TYPE_BF16, 8) == 16);
    CHECK(quant_row_bytes(GGML_TYPE_Q8_0, 128) == 136);
    CHECK(quant_row_bytes(GGML_TYPE_Q4_0, 64) == 36);
    CHECK(quant_row_bytes(GGML_TYPE_Q4_K, 512) == 288);
    CHECK(quant_row_bytes(GGML_TYPE_Q6_K, 256) == 210);
    CHECK(quant_row_bytes(GGML_TYPE_MXFP4, 64) == 34);
    CHECK(quant_row_bytes(77, 32) == 0);
}

static void test_float_rows(void) {
    uint8_t h[8];
    put16(h, 0x3C00); put16(h + 2, 0xC000); put16(h + 4, 0x0001); put16(h + 6, 0x7BFF);
    float out[4];
    quant_dequantize_row(GGML_TYPE_F16, h, out, 4);
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0x1p-24f && out[3] == 65504.0f);
    put16(h, 0x3F80); put16(h + 2, 0xC040); put16(h + 4, 0x3E00); put16(h + 6, 0x8000);
    quant_dequantize_row(GGML_TYPE_BF16, h, out, 4);
    CHECK(out[0] == 1.0f && out[1] == -3.0f && out[2] == 0.125f && bits(out[3]) == 0x80000000u);
    float src[3] = {0.5f, -7.25f, 3e-3f}, dst[3];
    quant_dequantize_row(GGML_TYPE_F32, src, dst, 3);
    CHECK(memcmp(src, dst, sizeof src) == 0);
    uint8_t q[6];
    quant_quantize_row(GGML_TYPE_F16, src, q, 3);
    CHECK(q[0] == 0x00 && q[1] == 0x38 && q[2] == 0x40 && q[3] == 0xC7); /* 0x3800, 0xC740 */
    quant_quantize_row(GGML_TYPE_BF16, src, q, 3);
    CHECK(q[0] == 0x00 && q[1] == 0x3F && q[2] == 0xE8 && q[3] == 0xC0); /* 0x3F00, 0xC0E8 */
}

static void test_q8_0_block(void) {
    uint8_t blk[2 * 34];
    put16(blk, 0x3800); /* d = 0.5 */
    for (int j = 0; j < 32; j++) blk[2 + j] = (uint8_t)(int8_t)(8 * j - 128);
    put16(blk + 34, 0xB400); /* d = -0.25 */
    for (int j = 0; j < 32; j++) blk[36 + j] = (uint8_t)(int8_t)(127 - j);
    float out[64];
    quant_dequantize_row(GGML_TYPE_Q8_0, blk, out, 64);
    CHECK(out[0] == -64.0f && out[1] == -60.0f && out[16] == 0.0f && out[31] == 60.0f);
    CHECK(out[32] == -31.75f && out[63] == -24.0f);
    int bad = 0;
    for (int j = 0; j < 32; j++) bad += out[j] != 0.5f * (8 * j - 128) || out[32 + j] != -0.25f * (127 - j);
    CHECK(bad == 0);
}

static void test_q4_0_block(void) {
    uint8_t blk[18];
    put16(blk, 0xC000); /* d = -2 */
    for (int j = 0; j < 16; j++) blk[2 + j] = (uint8_t)(j | (15 - j) << 4);
    float out[32];
    quant_dequantize_row(GGML_TYPE_Q4_0, blk, out, 32);
    /* weight j: low nibble j, weight j+16: high nibble 15-j; both minus 8, times -2 */
    CHECK(out[0] == 16.0f && out[8] == 0.0f && out[15] == -14.0f);
    CHECK(out[16] == -14.0f && out[23] == 0.0f && out[31] == 16.0f);
    int bad = 0;
    for (int j = 0; j < 16; j++) bad += out[j] != -2.0f * (j - 8) || out[16 + j] != -2.0f * (7 - j);
    CHECK(bad == 0);
}

/* Scales sc = {1, 2, 3, 63, 17, 33, 48, 60}, mins m = {5, 0, 62, 7, 40, 19, 63, 1}, packed by
 * hand: bytes 0-3 = sc[0..3] | top two bits of sc[4..7] << 6, bytes 4-7 = m[0..3] | top two
 * bits of m[4..7] << 6, bytes 8-11 = low nibble of sc[4..7] | low nibble of m[4..7] << 4. */
static const uint8_t q4k_packed[12] = {0x41, 0x82, 0xC3, 0xFF, 0x85, 0x40, 0xFE, 0x07, 0x81, 0x31, 0xF0, 0x1C};
static const int q4k_sc[8] = {1, 2, 3, 63, 17, 33, 48, 60}, q4k_m[8] = {5, 0, 62, 7, 40, 19, 63, 1};

static void make_q4_K(uint8_t *blk, uint16_t d, uint16_t dmin) {
    put16(blk, d);
    put16(blk + 2, dmin);
    memcpy(blk + 4, q4k_packed, 12);
    for (int i = 0; i < 128; i++) blk[16 + i] = (uint8_t)(i * 7 + 3);
}

static void test_q4_K_block(void) {
    uint8_t sc[8], m[8];
    quant_q4_K_scales(q4k_packed, sc, m);
    int bad = 0;
    for (int j = 0; j < 8; j++) bad += sc[j] != q4k_sc[j] || m[j] != q4k_m[j];
    CHECK_MSG(bad == 0, "unpacked scales differ");

    uint8_t blk[2 * 144];
    make_q4_K(blk, 0x3800, 0x3400);        /* d = 0.5, dmin = 0.25: all values exact */
    make_q4_K(blk + 144, 0x3C01, 0x2E66);  /* d = 1 + 2^-10, dmin ~ 0.1: the subtraction rounds */
    float out[512];
    quant_dequantize_row(GGML_TYPE_Q4_K, blk, out, 512);
    /* From the python reference: qs[i] = 7i + 3; weight 64c + l is the low nibble of
     * qs[32c + l] with sub-block 2c, weight 64c + 32 + l its high nibble with sub-block 2c+1. */
    CHECK(out[0] == 0.25f);     /* qs 3: 0.5*1*3 - 0.25*5 */
    CHECK(out[5] == 1.75f);     /* qs 38: 0.5*1*6 - 1.25 */
    CHECK(out[33] == 0.0f);     /* qs 10 high nibble 0: -0.25*0 */
    CHECK(out[70] == 4.0f);
    CHECK(out[100] == 470.75f); /* sub-block 3 (sc 63, m 7) */
    CHECK(out[130] == -1.5f);   /* sub-block 4: sc, m from the high bits */
    CHECK(out[160] == 193.25f); /* sub-block 5 */
    CHECK(out[200] == 248.25f); /* sub-block 6 */
    CHECK(out[230] == 359.75f); /* sub-block 7 */
    CHECK(out[255] == 209.75f);
    /* Second block: each weight is float(d*sc*q - dmin*m), one rounding of the exact value. */
    double d = 1.0 + 0x1p-10, dmin = 0.0999755859375;
    bad = 0;
    for (int i = 0; i < 256; i++) {
        int j = i / 32, byte = 16 + 32 * (i / 64) + i % 32;
        int q = j % 2 ? blk[byte] >> 4 : blk[byte] & 0xF;
        float want = (float)(d * q4k_sc[j] * q - dmin * q4k_m[j]);
        if (out[256 + i] != want) bad++;
    }
    CHECK_MSG(bad == 0, "%d Q4_K weights differ", bad);
}

static void make_q6_K(uint8_t *blk, uint16_t d) {
    for (int i = 0; i < 128; i++) blk[i] = (uint8_t)(i * 37 + 11);        /* ql */
    for (int i = 0; i < 64; i++) blk[128 + i] = (uint8_t)(i * 53 + 7);    /* qh */
    for (int i = 0; i < 16; i++) blk[192 + i] = (uint8_t)(int8_t)(i * 9 - 70); /* scales */
    put16(blk + 208, d);
}

static void test_q6_K_block(void) {
    uint8_t blk[2 * 210];
    make_q6_K(blk, 0x3000);        /* d = 0.125 */
    make_q6_K(blk + 210, 0x3BFF);  /* d = 1 - 2^-11: 11 significant bits */
    float out[512];
    quant_dequantize_row(GGML_TYPE_Q6_K, blk, out, 512);
    /* Weight 0: ql[0] = 11 -> 0xB, qh[0] = 7 -> bits 0-1 = 3: q = 0x3B - 32 = 27, scale -70. */
    CHECK(out[0] == -236.25f);
    CHECK(out[1] == 280.0f);
    CHECK(out[17] == 244.0f);   /* scale 1 */
    CHECK(out[40] == -123.5f);  /* ql[40] low nibble, qh[8] bits 2-3 */
    CHECK(out[77] == -127.5f);  /* ql[13] high nibble, qh[13] bits 4-5 */
    CHECK(out[100] == -38.0f);  /* ql[36] high nibble, qh[4] bits 6-7 */
    CHECK(out[127] == 12.25f);
    CHECK(out[128] == 6.75f);   /* second half: ql[64], qh[32], scale 8 */
    CHECK(out[150] == -9.625f);
    CHECK(out[200] == -118.75f);
    CHECK(out[255] == -211.25f);
    /* Second block: weight i of half h, run g = (i%128)/32, l = i%32 takes the nibble g/2 of
     * ql[64h + 32(g%2) + l] and bits 2g, 2g+1 of qh[32h + l]; its scale is scales[i/16]. */
    const uint8_t *b2 = blk + 210;
    double d = 1.0 - 0x1p-11;
    int bad = 0;
    for (int i = 0; i < 256; i++) {
        int h = i / 128, g = i % 128 / 32, l = i % 32;
        int lo = (b2[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0xF;
        int hi = (b2[128 + 32 * h + l] >> (2 * g)) & 3;
        float want = (float)(d * (int8_t)b2[192 + i / 16] * ((lo | hi << 4) - 32));
        if (out[256 + i] != want) bad++;
    }
    CHECK_MSG(bad == 0, "%d Q6_K weights differ", bad);
}

/* ---- every quantised type against its definition ----
 * The reference values below are written out per weight from the formats' definitions (ggml's
 * block layouts in ggml-common.h and gguf-py's quants.py; MXFP4 from the OCP Microscaling spec),
 * in double precision, then rounded to f32 once: what a float64 dequantiser gives. */

static double fp16d(const uint8_t *p) { return quant_fp16_to_f32((uint16_t)(p[0] | p[1] << 8)); }
static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* IQ4_NL's and IQ4_XS's 16 values (ggml-common.h kvalues_iq4nl). */
static const int iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Weight i (0..31) of a block of 16 nibble bytes: low nibbles first, then high. */
static int nib32(const uint8_t *qs, int i) { return (qs[i % 16] >> (i < 16 ? 0 : 4)) & 15; }

static double ref_q4_1(const uint8_t *b, int i) { return fp16d(b) * nib32(b + 4, i) + fp16d(b + 2); }

static double ref_q5_0(const uint8_t *b, int i) {
    int q = nib32(b + 6, i) | (int)((le32(b + 2) >> i) & 1) << 4;
    return fp16d(b) * (q - 16);
}

static double ref_q5_1(const uint8_t *b, int i) {
    int q = nib32(b + 8, i) | (int)((le32(b + 4) >> i) & 1) << 4;
    return fp16d(b) * q + fp16d(b + 2);
}

/* Q2_K: scales[16] | qs[64] | d | dmin. Weight i = 128n + 32j + l: bits 2j of qs[32n + l];
 * sub-block i / 16: scale = low nibble, min = high nibble of scales[i / 16]. */
static double ref_q2_K(const uint8_t *b, int i) {
    int n = i / 128, j = i % 128 / 32, l = i % 32, q = (b[16 + 32 * n + l] >> (2 * j)) & 3, sc = b[i / 16];
    return fp16d(b + 80) * (sc & 15) * q - fp16d(b + 82) * (sc >> 4);
}

/* Q3_K: hmask[32] | qs[64] | scales[12] | d. Weight i = 128n + 32j + l: low bits as Q2_K, minus 4
 * unless bit 4n + j of hmask[l] is set; 6-bit scale s of sub-block i / 16 (low 4 bits: nibble s / 8
 * of byte s % 8; high 2 bits: bits 2 (s / 4) of byte 8 + s % 4), minus 32. */
static double ref_q3_K(const uint8_t *b, int i) {
    int n = i / 128, j = i % 128 / 32, l = i % 32, s = i / 16;
    int q = ((b[32 + 32 * n + l] >> (2 * j)) & 3) - ((b[l] >> (4 * n + j)) & 1 ? 0 : 4);
    int sc = ((b[96 + s % 8] >> (4 * (s / 8))) & 15) | ((b[104 + s % 4] >> (2 * (s / 4))) & 3) << 4;
    return fp16d(b + 108) * (sc - 32) * q;
}

/* Q5_K: d | dmin | scales[12] (as Q4_K's) | qh[32] | qs[128]. Sub-block j = i / 32, l = i % 32:
 * nibble j % 2 of qs[32 (j / 2) + l] plus 16 times bit j of qh[l]. */
static double ref_q5_K(const uint8_t *b, int i) {
    uint8_t sc[8], m[8];
    quant_q4_K_scales(b + 4, sc, m);
    int j = i / 32, l = i % 32;
    int q = ((b[48 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 15) | ((b[16 + l] >> j) & 1) << 4;
    return fp16d(b) * sc[j] * q - fp16d(b + 2) * m[j];
}

static double ref_iq4_nl(const uint8_t *b, int i) { return fp16d(b) * iq4nl_values[nib32(b + 2, i)]; }

/* IQ4_XS: d | scales_h (16 bits) | scales_l[4] | qs[128]. Sub-block j = i / 32: 6-bit ls = nibble j % 2
 * of scales_l[j / 2] | bits 2j of scales_h << 4, scale d (ls - 32); its nibbles in qs[16j ..]. */
static double ref_iq4_xs(const uint8_t *b, int i) {
    int j = i / 32, ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((b[2] | b[3] << 8) >> (2 * j)) & 3) << 4;
    return fp16d(b) * (ls - 32) * iq4nl_values[nib32(b + 8 + 16 * j, i % 32)];
}

/* IQ3_S: d | qs[64] | qh[8] | signs[32] | scales[4]. Quad m = i / 4: grid entry qs[m] + 256 * bit
 * m % 8 of qh[m / 8], magnitude = its byte i % 4; negative if bit i % 8 of signs[i / 8]; scale
 * d (1 + 2 s), s = nibble j % 2 of scales[j / 2] for sub-block j = i / 32. */
static double ref_iq3_s(const uint8_t *b, int i) {
    int m = i / 4, j = i / 32, s = (b[106 + j / 2] >> (4 * (j % 2))) & 15;
    uint32_t e = quant_iq3_s_grid[b[2 + m] | ((b[66 + m / 8] >> (m % 8)) & 1) << 8];
    int v = (int)(e >> (8 * (i % 4)) & 0xFF);
    return fp16d(b) * (1 + 2 * s) * ((b[74 + i / 8] >> (i % 8)) & 1 ? -v : v);
}

/* OCP MX v1.0: E2M1 (1 sign, 2 exponent bits with bias 1, 1 mantissa bit; exponent 0 is
 * subnormal: 0.5 m), scale E8M0 2^(e - 127), NaN for e = 255. */
static double e2m1(int c) {
    int sign = c >> 3, ex = (c >> 1) & 3, m = c & 1;
    double v = ex == 0 ? 0.5 * m : ldexp(1.0 + 0.5 * m, ex - 1);
    return sign ? -v : v;
}

static double ref_mxfp4(const uint8_t *b, int i) {
    if (b[0] == 255) return NAN;
    return ldexp(e2m1(nib32(b + 1, i)), b[0] - 127);
}

typedef struct {
    uint32_t type;
    const char *name;
    double (*ref)(const uint8_t *block, int i);
    int fp16[2]; /* offsets of fp16 fields (kept finite); -1 for none */
} ref_case;

static const ref_case ref_cases[] = {
    {GGML_TYPE_Q4_1, "Q4_1", ref_q4_1, {0, 2}},     {GGML_TYPE_Q5_0, "Q5_0", ref_q5_0, {0, -1}},
    {GGML_TYPE_Q5_1, "Q5_1", ref_q5_1, {0, 2}},     {GGML_TYPE_Q2_K, "Q2_K", ref_q2_K, {80, 82}},
    {GGML_TYPE_Q3_K, "Q3_K", ref_q3_K, {108, -1}},  {GGML_TYPE_Q5_K, "Q5_K", ref_q5_K, {0, 2}},
    {GGML_TYPE_IQ4_NL, "IQ4_NL", ref_iq4_nl, {0, -1}}, {GGML_TYPE_IQ4_XS, "IQ4_XS", ref_iq4_xs, {0, -1}},
    {GGML_TYPE_IQ3_S, "IQ3_S", ref_iq3_s, {0, -1}}, {GGML_TYPE_MXFP4, "MXFP4", ref_mxfp4, {-1, -1}},
};

/* Random blocks (every fp16 scale a random finite half: subnormal, negative, large) against the
 * reference, value by value; and the integer form's shape: one scale (and offset) per 32 unless
 * the type has halves, offsets 0 unless it has mins. */
static void test_blocks_against_definitions(void) {
    srand(11);
    for (size_t c = 0; c < sizeof ref_cases / sizeof ref_cases[0]; c++) {
        const ref_case *rc = &ref_cases[c];
        const quant_type *t = quant_type_of(rc->type);
        enum { NB = 6 };
        size_t bb = t->block_bytes;
        int n = (int)t->block_elems * NB;
        uint8_t *buf = malloc(bb * NB);
        float *out = malloc(sizeof(float) * (size_t)n);
        int bad = 0, bad_shape = 0, nans = 0;
        for (int rep = 0; rep < 40; rep++) {
            for (size_t i = 0; i < bb * NB; i++) buf[i] = (uint8_t)rand();
            for (int b = 0; b < NB; b++)
                for (int k = 0; k < 2; k++)
                    if (rc->fp16[k] >= 0 && (buf[bb * b + rc->fp16[k] + 1] & 0x7C) == 0x7C)
                        buf[bb * b + rc->fp16[k] + 1] &= 0xBF; /* an inf or nan exponent: make it finite */
            if (rep == 0 && rc->type == GGML_TYPE_MXFP4) /* every scale byte once */
                for (int b = 0; b < NB; b++) buf[bb * b] = (uint8_t)(b < 3 ? b : 250 + b);
            quant_dequantize_row(rc->type, buf, out, n);
            for (int i = 0; i < n; i++) {
                float want = (float)rc->ref(buf + bb * (size_t)(i / t->block_elems), i % (int)t->block_elems);
                nans += isnan(want);
                bad += isnan(want) ? !isnan(out[i]) : out[i] != want;
            }
            for (int b = 0; b < NB; b++)
                for (int j = 0; j < (int)t->block_elems / 32; j++) {
                    quant_group q;
                    t->group(buf + bb * b, j, &q);
                    if (!t->halves) bad_shape += memcmp(&q.a[0], &q.a[1], 4) != 0 || memcmp(&q.b[0], &q.b[1], 4) != 0;
                    if (!t->has_min) bad_shape += q.b[0] != 0.0f || q.b[1] != 0.0f;
                }
        }
        CHECK_MSG(bad == 0, "%s: %d of %d values differ from the definition", rc->name, bad, 40 * n);
        CHECK_MSG(bad_shape == 0, "%s: %d groups of the wrong shape", rc->name, bad_shape);
        CHECK_MSG((rc->type == GGML_TYPE_MXFP4) == (nans > 0), "%s: %d NaN values", rc->name, nans);
        free(buf);
        free(out);
    }
}

/* A few values worked out by hand per type, against both the reference functions above and the
 * dequantiser (so neither can drift with the other). */
static void test_hand_values(void) {
    float out[256];
    uint8_t b[176];
    /* Q4_1: d = 0.5, m = -1; byte j = j | (15 - j) << 4 */
    put16(b, 0x3800), put16(b + 2, 0xBC00);
    for (int j = 0; j < 16; j++) b[4 + j] = (uint8_t)(j | (15 - j) << 4);
    quant_dequantize_row(GGML_TYPE_Q4_1, b, out, 32);
    CHECK(out[0] == -1.0f && out[15] == 6.5f && out[16] == 6.5f && out[31] == -1.0f && out[3] == 0.5f);
    CHECK(ref_q4_1(b, 3) == 0.5);
    /* Q5_0: d = 0.25, fifth bits of weights 0 and 31, byte j = j | j << 4 */
    memset(b, 0, sizeof b);
    put16(b, 0x3400);
    b[2] = 0x01, b[5] = 0x80;
    for (int j = 0; j < 16; j++) b[6 + j] = (uint8_t)(j | j << 4);
    quant_dequantize_row(GGML_TYPE_Q5_0, b, out, 32);
    CHECK(out[0] == 0.0f && out[1] == -3.75f && out[16] == -4.0f && out[31] == 3.75f);
    CHECK(ref_q5_0(b, 1) == -3.75);
    /* Q5_1: d = 1, m = 0.5, fifth bits of weights 1 and 16 */
    memset(b, 0, sizeof b);
    put16(b, 0x3C00), put16(b + 2, 0x3800);
    b[4] = 0x02, b[6] = 0x01;
    for (int j = 0; j < 16; j++) b[8 + j] = (uint8_t)(j | j << 4);
    quant_dequantize_row(GGML_TYPE_Q5_1, b, out, 32);
    CHECK(out[0] == 0.5f && out[1] == 17.5f && out[16] == 16.5f && out[17] == 1.5f && out[31] == 15.5f);
    /* Q2_K: d = 0.5, dmin = 0.25, scales[i] = i | (15 - i) << 4, every qs byte 0xE4 (field j = j) */
    memset(b, 0, sizeof b);
    for (int i = 0; i < 16; i++) b[i] = (uint8_t)(i | (15 - i) << 4);
    memset(b + 16, 0xE4, 64);
    put16(b + 80, 0x3800), put16(b + 82, 0x3400);
    quant_dequantize_row(GGML_TYPE_Q2_K, b, out, 256);
    CHECK(out[0] == -3.75f && out[32] == -2.25f && out[255] == 22.5f && out[200] == 11.25f);
    CHECK(ref_q2_K(b, 200) == 11.25);
    /* Q3_K: d = 1, every scale 33 (+1 after the offset): low nibbles 1, high bits 2; the high
     * bit of weight 0 clear (-4), all others set; qs 0xE4 */
    memset(b, 0, sizeof b);
    memset(b, 0xFF, 32);
    b[0] = 0xFE;
    memset(b + 32, 0xE4, 64);
    memset(b + 96, 0x11, 8);
    memset(b + 104, 0xAA, 4);
    put16(b + 108, 0x3C00);
    quant_dequantize_row(GGML_TYPE_Q3_K, b, out, 256);
    CHECK(out[0] == -4.0f && out[1] == 0.0f && out[32] == 1.0f && out[96] == 3.0f && out[255] == 3.0f);
    b[96] = 0x1F; /* scale 0: low nibble 15 -> 47 - 32 = 15 */
    quant_dequantize_row(GGML_TYPE_Q3_K, b, out, 256);
    CHECK(out[0] == -60.0f && out[16] == 0.0f && out[32] == 1.0f);
    CHECK(ref_q3_K(b, 0) == -60.0);
    /* Q5_K: Q4_K's hand-packed scales; d = 0.5, dmin = 0.25; qh[l] = 1 for l < 16 (sub-block 0) */
    memset(b, 0, sizeof b);
    put16(b, 0x3800), put16(b + 2, 0x3400);
    memcpy(b + 4, q4k_packed, 12);
    memset(b + 16, 0x01, 16);
    for (int i = 0; i < 128; i++) b[48 + i] = (uint8_t)(i * 7 + 3);
    quant_dequantize_row(GGML_TYPE_Q5_K, b, out, 256);
    CHECK(out[0] == 8.25f);   /* (3 | 16) * 0.5 * 1 - 0.25 * 5 */
    CHECK(out[16] == 0.25f);  /* qs[16] = 115: nibble 3, no fifth bit */
    CHECK(out[100] == 470.75f); /* as Q4_K's: sub-block 3 */
    CHECK(ref_q5_K(b, 100) == 470.75);
    /* IQ4_NL: d = 0.5, byte j = j | (15 - j) << 4 */
    put16(b, 0x3800);
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | (15 - j) << 4);
    quant_dequantize_row(GGML_TYPE_IQ4_NL, b, out, 32);
    CHECK(out[0] == -63.5f && out[15] == 56.5f && out[16] == 56.5f && out[8] == 0.5f && out[24] == -5.0f);
    /* IQ4_XS: d = 0.25; sub-block 0: ls = 1 (scale -7.75), sub-block 1: ls = 2 | 3 << 4 = 50 (4.5) */
    memset(b, 0, sizeof b);
    put16(b, 0x3400), put16(b + 2, 0x000C);
    b[4] = 0x21;
    for (int j = 0; j < 128; j++) b[8 + j] = (uint8_t)(j % 16 | (15 - j % 16) << 4);
    quant_dequantize_row(GGML_TYPE_IQ4_XS, b, out, 256);
    CHECK(out[0] == -7.75f * -127 && out[33] == 4.5f * -104 && out[64] == -8.0f * -127 && out[47] == 4.5f * 113);
    CHECK(ref_iq4_xs(b, 33) == 4.5 * -104);
    /* IQ3_S: d = 1; sub-block 0 scale 1, sub-block 1 scale 3; grid entries 0 (1,1,1,1), 1
     * (3,1,1,1); weight 0 negative; then quad 0 takes entry 256 (7,5,9,5) */
    memset(b, 0, sizeof b);
    put16(b, 0x3C00);
    b[3] = 1;          /* qs[1] */
    b[74] = 0x01;      /* signs[0] */
    b[106] = 0x10;     /* scales[0]: s = 0, then 1 */
    quant_dequantize_row(GGML_TYPE_IQ3_S, b, out, 256);
    CHECK(out[0] == -1.0f && out[1] == 1.0f && out[4] == 3.0f && out[5] == 1.0f && out[32] == 3.0f);
    b[66] = 0x01;      /* qh[0] bit 0 */
    quant_dequantize_row(GGML_TYPE_IQ3_S, b, out, 256);
    CHECK(out[0] == -7.0f && out[1] == 5.0f && out[2] == 9.0f && out[3] == 5.0f && out[4] == 3.0f);
    CHECK(ref_iq3_s(b, 2) == 9.0);
}

/* IQ3_S's grid against ggml-common.h's iq3s_grid: entries spot-checked, every entry's bytes odd
 * magnitudes 1..15, in increasing order, and the sum and XOR of all 512. */
static void test_iq3_s_grid(void) {
    static const struct { int i; uint32_t v; } spot[] = {
        {0, 0x01010101}, {1, 0x01010103}, {2, 0x01010105}, {17, 0x0101090f}, {100, 0x010f0101}, {255, 0x05090501},
        {256, 0x05090507}, {300, 0x07030503}, {444, 0x0b0f0109}, {510, 0x0f0d0703}, {511, 0x0f0f0101},
    };
    const uint32_t *g = quant_iq3_s_grid;
    int bad = 0;
    for (size_t k = 0; k < sizeof spot / sizeof spot[0]; k++) bad += g[spot[k].i] != spot[k].v;
    uint32_t sum = 0, x = 0;
    for (int i = 0; i < 512; i++) {
        sum += g[i];
        x ^= g[i];
        for (int c = 0; c < 4; c++) {
            uint32_t v = g[i] >> (8 * c) & 0xFF;
            bad += v % 2 == 0 || v > 15;
        }
        bad += i > 0 && g[i] <= g[i - 1];
    }
    CHECK_MSG(bad == 0 && sum == 0x68949e56u && x == 0x0c00020eu, "grid: %d bad, sum %08x, xor %08x", bad, sum, x);
}

/* The constants against their definitions: IQ4_NL's published values; E2M1 from its bits (OCP);
 * E8M0 scales 2^(e-127) (halved: 2^(e-128)), NaN for 255. The tables and quant_form.h's packed
 * words alike. */
static void test_constants(void) {
    int bad = 0;
    for (int i = 0; i < 16; i++) {
        bad += quant_iq4_values[i] != iq4nl_values[i];
        bad += quant_e2m1x2_values[i] != 2.0 * e2m1(i);
        bad += qf_iq4((uint32_t)i) != iq4nl_values[i] || qf_e2m1x2((uint32_t)i) != 2.0 * e2m1(i); /* quant_form.h's */
    }
    for (int e = 0; e < 255; e++) bad += quant_e8m0_half((uint8_t)e) != (float)ldexp(1.0, e - 128);
    bad += !isnan(quant_e8m0_half(255));
    CHECK_MSG(bad == 0, "%d constants differ", bad);
    CHECK(quant_e8m0_half(0) == 0x1p-128f && quant_e8m0_half(127) == 0.5f && quant_e8m0_half(254) == 0x1p126f);
}

/* Writers: every written value is the nearest representable one for the stored scales (MXFP4
 * and IQ4_NL: among their values; Q4_1, Q5_0, Q5_1 within the rounding of ggml's reference, which
 * quantises against the unrounded scale), MXFP4's shared exponent is floor(log2(max |x|)) - 2, and
 * the error stays within half a step (plus the fp16 rounding of the scales). */
static void test_writers(void) {
    srand(5);
    float x[256], back[256];
    uint8_t buf[256 * 2];
    int bad[5] = {0};
    for (int rep = 0; rep < 60; rep++) {
        float scale = ldexpf(1.0f, rep % 20 - 10);
        for (int i = 0; i < 256; i++) x[i] = scale * (frand() + (rep % 3 == 0 ? 0.7f : 0.0f));
        if (rep % 7 == 0) x[rep % 32] = 0.0f;
        if (rep == 1) memset(x, 0, 32 * sizeof(float)); /* a block of zeros */
        for (int b = 0; b < 8; b++) {
            const float *xb = x + 32 * b;
            float mn = xb[0], mx = xb[0], amax = 0;
            for (int j = 0; j < 32; j++) {
                mn = fminf(mn, xb[j]);
                mx = fmaxf(mx, xb[j]);
                amax = fmaxf(amax, fabsf(xb[j]));
            }
            /* Q4_1 / Q5_1: step (max - min) / 15 or 31, offset min */
            for (int k = 0; k < 2; k++) {
                uint32_t type = k ? GGML_TYPE_Q5_1 : GGML_TYPE_Q4_1;
                float top = k ? 31.0f : 15.0f;
                CHECK(quant_quantize_row(type, xb, buf, 32));
                quant_dequantize_row(type, buf, back, 32);
                double d = (mx - mn) / top;
                for (int j = 0; j < 32; j++)
                    bad[k] += fabs((double)xb[j] - back[j]) >
                              (0.5 * d + top * d * 0x1p-11 + fabs(mn) * 0x1p-11) * (1 + 1e-6) + (top + 1) * 0x1p-25;
            }
            /* Q5_0: step amax / 16; the clamp at 31 costs one step at the other end */
            CHECK(quant_quantize_row(GGML_TYPE_Q5_0, xb, buf, 32));
            quant_dequantize_row(GGML_TYPE_Q5_0, buf, back, 32);
            for (int j = 0; j < 32; j++) bad[2] += fabs((double)xb[j] - back[j]) > 1.01 * amax / 16 + 16 * 0x1p-25;
            /* IQ4_NL and MXFP4: nearest among the values for the stored scale */
            CHECK(quant_quantize_row(GGML_TYPE_IQ4_NL, xb, buf, 32));
            quant_dequantize_row(GGML_TYPE_IQ4_NL, buf, back, 32);
            double dn = fp16d(buf);
            for (int j = 0; j < 32; j++)
                for (int v = 0; v < 16; v++) bad[3] += fabs((double)xb[j] - back[j]) > fabs(xb[j] - dn * iq4nl_values[v]) * (1 + 1e-6);
            CHECK(quant_quantize_row(GGML_TYPE_MXFP4, xb, buf, 32));
            quant_dequantize_row(GGML_TYPE_MXFP4, buf, back, 32);
            int want_e = amax > 0 ? ilogbf(amax) - 2 + 127 : 0;
            bad[4] += buf[0] != want_e;
            for (int j = 0; j < 32; j++)
                for (int c = 0; c < 16; c++) {
                    double v = ldexp(e2m1(c), buf[0] - 127), e = fabs((double)xb[j] - v), got = fabs((double)xb[j] - back[j]);
                    bad[4] += got > e || (got == e && fabs(back[j]) > fabs(v)); /* ties to the smaller magnitude */
                }
        }
    }
    CHECK_MSG(bad[0] == 0, "Q4_1 writer: %d values off", bad[0]);
    CHECK_MSG(bad[1] == 0, "Q5_1 writer: %d values off", bad[1]);
    CHECK_MSG(bad[2] == 0, "Q5_0 writer: %d values off", bad[2]);
    CHECK_MSG(bad[3] == 0, "IQ4_NL writer: %d values not the nearest", bad[3]);
    CHECK_MSG(bad[4] == 0, "MXFP4 writer: %d values not the nearest or exponents wrong", bad[4]);
    /* hand-made MXFP4 block: max 5 -> e = 2 - 2 + 127, scale 1: 5 is a tie of 4 and 6 -> 4;
     * 0.25 a tie of 0 and 0.5 -> 0; 7 clamps to 6; -1.25 a tie -> -1; 2.9 -> 3 */
    float y[32] = {5.0f, 0.25f, 7.0f, -1.25f, 2.9f, -6.0f, 0.74f};
    CHECK(quant_quantize_row(GGML_TYPE_MXFP4, y, buf, 32));
    quant_dequantize_row(GGML_TYPE_MXFP4, buf, back, 32);
    CHECK(buf[0] == 127 && back[0] == 4.0f && back[1] == 0.0f && back[2] == 6.0f && back[3] == -1.0f && back[4] == 3.0f && back[5] == -6.0f &&
          back[6] == 0.5f && back[31] == 0.0f);
    CHECK(!quant_quantize_row(GGML_TYPE_Q2_K, y, buf, 256) && !quant_quantize_row(GGML_TYPE_IQ3_S, y, buf, 256));
}

/* The files of shared/quants (a model quantised by llama.cpp's llama-quantize from its F16 file):
 * every quantised tensor dequantises close to the F16 tensor it was made from, its relative RMS
 * error within what its bits allow (a wrong layout gives about 1.4). */
static void test_quants_files(void) {
    static const char *const files[] = {"q4_1", "q5_0", "q5_1", "q2_k", "q3_k_s", "q3_k_m", "q4_k_s",
                                        "q5_k_s", "q5_k_m", "iq3_s", "iq4_nl", "iq4_xs"};
    static const struct { uint32_t type; double limit; } limits[] = {
        {GGML_TYPE_Q2_K, 0.45}, {GGML_TYPE_Q3_K, 0.25}, {GGML_TYPE_IQ3_S, 0.25}, {GGML_TYPE_Q4_0, 0.15},
        {GGML_TYPE_Q4_1, 0.15}, {GGML_TYPE_Q4_K, 0.12}, {GGML_TYPE_IQ4_NL, 0.12}, {GGML_TYPE_IQ4_XS, 0.12},
        {GGML_TYPE_Q5_0, 0.07}, {GGML_TYPE_Q5_1, 0.07}, {GGML_TYPE_Q5_K, 0.06}, {GGML_TYPE_Q6_K, 0.03},
        {GGML_TYPE_Q8_0, 0.01},
    };
    const char *shared = getenv("SHARED") ? getenv("SHARED") : "../shared";
    char path[512];
    nc_err err;
    gguf_file *ref;
    snprintf(path, sizeof path, "%s/quants/tiny-k-f16.gguf", shared);
    CHECK_MSG(gguf_open(&ref, path, &err) == 0, "%s", err.msg);
    if (!ref) return;
    double worst[GGML_TYPE_COUNT] = {0};
    int seen[GGML_TYPE_COUNT] = {0}, unknown = 0;
    for (size_t fi = 0; fi < sizeof files / sizeof files[0]; fi++) {
        gguf_file *f;
        snprintf(path, sizeof path, "%s/quants/tiny-k-%s.gguf", shared, files[fi]);
        CHECK_MSG(gguf_open(&f, path, &err) == 0, "%s", err.msg);
        if (!f) continue;
        for (size_t i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i), *r = gguf_find_tensor(ref, t->name);
            const quant_type *qt = quant_type_of(t->type);
            if (!qt) unknown++;
            if (!qt || !qt->group || !r || r->n_elems != t->n_elems) continue;
            int64_t cols = (int64_t)t->ne[0], rows = (int64_t)(t->n_elems / t->ne[0]);
            float *a = malloc(sizeof(float) * (size_t)cols), *b = malloc(sizeof(float) * (size_t)cols);
            double e2 = 0, r2 = 0;
            for (int64_t row = 0; row < rows; row++) {
                quant_dequantize_row(t->type, (const uint8_t *)t->data + quant_row_bytes(t->type, cols) * (size_t)row, a, cols);
                quant_dequantize_row(r->type, (const uint8_t *)r->data + quant_row_bytes(r->type, cols) * (size_t)row, b, cols);
                for (int64_t k = 0; k < cols; k++) {
                    e2 += ((double)a[k] - b[k]) * ((double)a[k] - b[k]);
                    r2 += (double)b[k] * b[k];
                }
            }
            double rel = sqrt(e2 / r2);
            if (rel > worst[t->type]) worst[t->type] = rel;
            seen[t->type]++;
            free(a);
            free(b);
        }
        gguf_close(f);
    }
    gguf_close(ref);
    CHECK_MSG(unknown == 0, "%d tensors of types nucleus cannot compute with", unknown);
    for (size_t k = 0; k < sizeof limits / sizeof limits[0]; k++) {
        uint32_t type = limits[k].type;
        char buf[24];
        if (type != GGML_TYPE_Q4_0 && type != GGML_TYPE_Q8_0) CHECK_MSG(seen[type] > 0, "no %s tensor in the files", ggml_type_name(type, buf));
        CHECK_MSG(worst[type] <= limits[k].limit, "%s: relative RMS error %.4f (limit %.2f)", ggml_type_name(type, buf),
                  worst[type], limits[k].limit);
        if (seen[type]) printf("  %-7s %3d tensors, worst relative RMS error %.4f\n", ggml_type_name(type, buf), seen[type], worst[type]);
    }
}

static void test_quantize_exact(void) {
    float x[32] = {0};
    x[0] = -16.0f; x[1] = 15.0f; x[2] = 1.0f; x[3] = 3.0f; x[4] = 5.0f;
    uint8_t q[34];
    quant_quantize_row(GGML_TYPE_Q8_0, x, q, 32);
    /* d = 16/127 stored as fp16 0x3008; q = round(x * 127/16) */
    CHECK(q[0] == 0x08 && q[1] == 0x30);
    CHECK((int8_t)q[2] == -127 && (int8_t)q[3] == 119 && (int8_t)q[4] == 8);
    CHECK((int8_t)q[5] == 24 && (int8_t)q[6] == 40 && (int8_t)q[7] == 0);

    float y[32] = {0};
    y[0] = -4.0f; y[1] = 3.9f; y[2] = 0.2f; y[16] = -1.3f; y[17] = 1.26f;
    uint8_t p[18];
    quant_quantize_row(GGML_TYPE_Q4_0, y, p, 32);
    /* max = -4 -> d = 0.5 (0x3800); q = min(15, (int)(y * 2 + 8.5)) */
    CHECK(p[0] == 0x00 && p[1] == 0x38);
    CHECK(p[2] == (0 | 5 << 4));   /* y[0] -> 0, y[16] -> 5 */
    CHECK(p[3] == (15 | 11 << 4)); /* y[1] clamps to 15, y[17] -> 11 */
    CHECK(p[4] == (8 | 8 << 4));   /* 0.2 -> 8, 0 -> 8 */
    float z[32] = {0};
    quant_quantize_row(GGML_TYPE_Q4_0, z, p, 32); /* all zero: d = 0 / -8 = -0 (as ggml), q = 8 */
    CHECK(p[0] == 0x00 && p[1] == 0x80 && p[2] == 0x88 && p[17] == 0x88);
}

static void test_round_trip(void) {
    srand(7);
    float x[256], back[256];
    uint8_t buf[256 * 2];
    for (int rep = 0; rep < 20; rep++) {
        float scale = (float)(rep + 1) * 0.37f;
        for (int i = 0; i < 256; i++) x[i] = scale * ((float)rand() / RAND_MAX * 2.0f - 1.0f);
        quant_quantize_row(GGML_TYPE_Q8_0, x, buf, 256);
        quant_dequantize_row(GGML_TYPE_Q8_0, buf, back, 256);
        int bad = 0;
        for (int b = 0; b < 8; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
            for (int j = 0; j < 32; j++) bad += fabsf(x[32 * b + j] - back[32 * b + j]) > 0.51f * amax / 127 + amax * 0x1p-11f;
        }
        CHECK_MSG(bad == 0, "Q8_0 round trip: %d values off", bad);
        quant_quantize_row(GGML_TYPE_Q4_0, x, buf, 256);
        quant_dequantize_row(GGML_TYPE_Q4_0, buf, back, 256);
        bad = 0;
        for (int b = 0; b < 8; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
            /* step amax/8; the clamp at 15 costs up to one step at the other end */
            for (int j = 0; j < 32; j++) bad += fabsf(x[32 * b + j] - back[32 * b + j]) > 1.01f * amax / 8;
        }
        CHECK_MSG(bad == 0, "Q4_0 round trip: %d values off", bad);
    }
}

/* token_embd.weight of TinyStories-656K-Q8_0.gguf starts at byte 51360 (tensor data at 50848,
 * tensor offset 512). Its first block, read with python: d = 0x1FC8 = 0.007598876953125. */
static void test_real_file(void) {
    const char *shared = getenv("SHARED") ? getenv("SHARED") : "../shared";
    char path[512];
    snprintf(path, sizeof path, "%s/models/tinystories-656k/TinyStories-656K-Q8_0.gguf", shared);
    FILE *f = fopen(path, "rb");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f) return;
    uint8_t blk[34];
    int ok = fseek(f, 51360, SEEK_SET) == 0 && fread(blk, 1, 34, f) == 34;
    fclose(f);
    CHECK(ok);
    if (!ok) return;
    static const int q[32] = {-90, -3, 78, -22, 46, 108, 85, -71, -12, 71, 63, -89, 29, -35, -46, 80,
                              106, -38, 53, -83, 30, -29, -38, -58, 70, 44, 30, -4, -127, 42, 86, 31};
    CHECK(blk[0] == 0xC8 && blk[1] == 0x1F);
    float out[32];
    quant_dequantize_row(GGML_TYPE_Q8_0, blk, out, 32);
    int bad = 0;
    for (int j = 0; j < 32; j++) bad += out[j] != (float)(0.007598876953125 * q[j]);
    CHECK_MSG(bad == 0, "%d values of the file's first block differ", bad);
    CHECK(out[0] == -0.683898926f && out[28] == -0.965057373f);
}

int main(void) {
    test_fp16_to_f32();
    test_f32_to_fp16();
    test_bf16();
    test_type_info();
    test_float_rows();
    test_q8_0_block();
    test_q4_0_block();
    test_q4_K_block();
    test_q6_K_block();
    test_iq3_s_grid();
    test_constants();
    test_blocks_against_definitions();
    test_hand_values();
    test_writers();
    test_quants_files();
    test_quantize_exact();
    test_round_trip();
    test_real_file();
    return test_summary("test_quant");
}
