/* Element types: half-float conversions on known bit patterns, hand-built blocks of every type
 * against values worked out from the block layouts, quantise/dequantise round trips, and the
 * first block of a real Q8_0 model file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/quant.h"
#include "test.h"

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
    CHECK(quant_type_supported(GGML_TYPE_F32) && quant_type_supported(GGML_TYPE_F16));
    CHECK(quant_type_supported(GGML_TYPE_BF16) && quant_type_supported(GGML_TYPE_Q8_0));
    CHECK(quant_type_supported(GGML_TYPE_Q4_0) && quant_type_supported(GGML_TYPE_Q4_K));
    CHECK(quant_type_supported(GGML_TYPE_Q6_K));
    CHECK(!quant_type_supported(GGML_TYPE_Q4_1) && !quant_type_supported(GGML_TYPE_Q5_K));
    CHECK(!quant_type_supported(77));
    CHECK(sizeof(block_q8_0) == 34 && sizeof(block_q4_0) == 18);
    CHECK(sizeof(block_q4_K) == 144 && sizeof(block_q6_K) == 210);
    CHECK(quant_row_bytes(GGML_TYPE_F32, 5) == 20);
    CHECK(quant_row_bytes(GGML_TYPE_F16, 3) == 6);
    CHECK(quant_row_bytes(GGML_TYPE_BF16, 8) == 16);
    CHECK(quant_row_bytes(GGML_TYPE_Q8_0, 128) == 136);
    CHECK(quant_row_bytes(GGML_TYPE_Q4_0, 64) == 36);
    CHECK(quant_row_bytes(GGML_TYPE_Q4_K, 512) == 288);
    CHECK(quant_row_bytes(GGML_TYPE_Q6_K, 256) == 210);
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
    test_quantize_exact();
    test_round_trip();
    test_real_file();
    return test_summary("test_quant");
}
