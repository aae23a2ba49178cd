/* Element types: half-float conversions and the scalar block (de)quantisers.
 * Dequantisation computes each value in f32 from exactly representable parts (fp16 scale times
 * small integers), so the result is the float nearest to the exact value, which is what a float64
 * reference rounded to f32 gives. */
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t load_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static void store_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

float quant_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t man = h & 0x3FF;
    if (exp == 0x1F) return bits_f32(sign | 0x7F800000u | (man << 13)); /* inf, nan keeps payload */
    if (exp != 0) return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
    /* zero or subnormal: man * 2^-24, exact in f32 */
    float v = (float)man * 0x1p-24f;
    return sign ? -v : v;
}

uint16_t quant_f32_to_fp16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t exp = (u >> 23) & 0xFF;
    uint32_t man = u & 0x7FFFFF;
    if (exp == 0xFF) return (uint16_t)(sign | 0x7C00 | (man ? 0x200 | (man >> 13) : 0));
    int e = (int)exp - 127 + 15; /* biased half exponent */
    if (e >= 0x1F) return (uint16_t)(sign | 0x7C00);
    if (e <= 0) {
        /* Subnormal half (or zero): shift the full significand down, rounding to nearest even. */
        if (e < -10) return sign;
        uint32_t sig = man | 0x800000;
        int shift = 14 - e;
        uint32_t q = sig >> shift, rem = sig & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q); /* q may carry into the smallest normal: still correct */
    }
    uint32_t q = ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++; /* carry may round up to inf: correct */
    return (uint16_t)(sign | q);
}

float quant_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t quant_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((u >> 16) | 0x40); /* quiet the nan */
    u += 0x7FFF + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

bool quant_type_supported(uint32_t type) {
    switch (type) {
    case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_K: case GGML_TYPE_Q6_K: return true;
    default: return false;
    }
}

size_t quant_row_bytes(uint32_t type, int64_t n) {
    const ggml_type_info *ti = ggml_type_get(type);
    if (!ti || n < 0) return 0;
    return (size_t)(n / ti->block_elems) * ti->block_bytes;
}

static void dequant_q8_0(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += sizeof(block_q8_0), dst += QK8_0) {
        float d = quant_fp16_to_f32(load_u16(src));
        const int8_t *qs = (const int8_t *)(src + 2);
        for (int j = 0; j < QK8_0; j++) dst[j] = d * (float)qs[j];
    }
}

static void dequant_q4_0(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += sizeof(block_q4_0), dst += QK4_0) {
        float d = quant_fp16_to_f32(load_u16(src));
        const uint8_t *qs = src + 2;
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[j] = d * (float)((qs[j] & 0xF) - 8);
            dst[j + QK4_0 / 2] = d * (float)((qs[j] >> 4) - 8);
        }
    }
}

static void dequant_q4_K(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += sizeof(block_q4_K), dst += QK_K) {
        float d = quant_fp16_to_f32(load_u16(src));
        float dmin = quant_fp16_to_f32(load_u16(src + 2));
        const uint8_t *qs = src + 4 + K_SCALE_SIZE;
        uint8_t sc[8], m[8];
        quant_q4_K_scales(src + 4, sc, m);
        for (int j = 0; j < QK_K / 32; j++) {
            /* d*sc*q and dmin*m are exact in f32; only the difference rounds. */
            float dsc = d * (float)sc[j], dm = dmin * (float)m[j];
            const uint8_t *q = qs + 32 * (j / 2);
            int shift = 4 * (j % 2);
            for (int l = 0; l < 32; l++) dst[32 * j + l] = dsc * (float)((q[l] >> shift) & 0xF) - dm;
        }
    }
}

void quant_q6_K_unpack(const uint8_t *ql, const uint8_t *qh, int8_t out[128]) {
    for (int l = 0; l < 32; l++) {
        out[l] = (int8_t)(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
        out[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        out[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        out[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
}

static void dequant_q6_K(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += sizeof(block_q6_K), dst += QK_K) {
        /* Fields by offset: blocks in a file are not aligned for the struct. */
        const int8_t *scales = (const int8_t *)(src + offsetof(block_q6_K, scales));
        float d = quant_fp16_to_f32(load_u16(src + offsetof(block_q6_K, d)));
        for (int h = 0; h < 2; h++) {
            int8_t q[128];
            quant_q6_K_unpack(src + 64 * h, src + offsetof(block_q6_K, qh) + 32 * h, q);
            /* d*sc*q needs at most 11+7+5 significant bits: exact in f32. */
            for (int l = 0; l < 128; l++) dst[128 * h + l] = d * (float)scales[8 * h + l / 16] * (float)q[l];
        }
    }
}

void quant_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    switch (type) {
    case GGML_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = quant_fp16_to_f32(load_u16(s + 2 * i));
        break;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = quant_bf16_to_f32(load_u16(s + 2 * i));
        break;
    case GGML_TYPE_Q8_0: dequant_q8_0(s, dst, n / QK8_0); break;
    case GGML_TYPE_Q4_0: dequant_q4_0(s, dst, n / QK4_0); break;
    case GGML_TYPE_Q4_K: dequant_q4_K(s, dst, n / QK_K); break;
    case GGML_TYPE_Q6_K: dequant_q6_K(s, dst, n / QK_K); break;
    default: break;
    }
}

static float block_amax(const float *x, int n, float *signed_max) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    if (signed_max) *signed_max = max;
    return amax;
}

/* As ggml's reference: the scale is kept unrounded for quantising and multiplied in as 1/d. */
static void quant_q8_0(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QK8_0, dst += sizeof(block_q8_0)) {
        float d = block_amax(x, QK8_0, NULL) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        store_u16(dst, quant_f32_to_fp16(d));
        for (int j = 0; j < QK8_0; j++) dst[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}

static void quant_q4_0(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += QK4_0, dst += sizeof(block_q4_0)) {
        float max;
        block_amax(x, QK4_0, &max);
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        store_u16(dst, quant_f32_to_fp16(d));
        for (int j = 0; j < QK4_0 / 2; j++) {
            int lo = (int)(x[j] * id + 8.5f), hi = (int)(x[j + QK4_0 / 2] * id + 8.5f);
            lo = lo < 15 ? lo : 15;
            hi = hi < 15 ? hi : 15;
            dst[2 + j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    switch (type) {
    case GGML_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++) store_u16(d + 2 * i, quant_f32_to_fp16(src[i]));
        break;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) store_u16(d + 2 * i, quant_f32_to_bf16(src[i]));
        break;
    case GGML_TYPE_Q8_0: quant_q8_0(src, d, n / QK8_0); break;
    case GGML_TYPE_Q4_0: quant_q4_0(src, d, n / QK4_0); break;
    default: break;
    }
}
