/* Element types: the trait table, half-float conversions, every quantised type's integer form
 * (its definition, from which dequantisation follows), and the writers. */
#include "tensor/quant.h"

#include <math.h>
#include <stdio.h>
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

float quant_fp16_to_f32(uint16_t h) { return qf_fp16(h); }

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

float quant_e8m0_half(uint8_t e) { return qf_e8m0_half(e); }

/* ---- the format constants ---- */

const int8_t quant_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

const int8_t quant_e2m1x2_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* IQ3_S's grid, as a set: an entry's four magnitudes 2c + 1 (c = 0..7, from its lowest byte up)
 * make a 12-bit code c0 + 8 c1 + 64 c2 + 512 c3, and bit `code` of this 4096-bit map is set for
 * the 512 codes of the grid. The grid lists its entries in increasing order, which is the order
 * of their codes, so entry i is the i-th set bit. */
static const uint32_t iq3_s_codes[128] = {
    0x082357a7, 0x92050aa5, 0x22892317, 0x04220010, 0x112249a3, 0x09000aa4, 0x4a052208, 0x22800510,
    0x04128801, 0x01000209, 0x08450014, 0x084000a2, 0x02000a40, 0x02000400, 0x08450015, 0x00001100,
    0x5205ab17, 0x04025000, 0x0902114b, 0x41000502, 0x0411a401, 0x04012009, 0x11820992, 0x01040002,
    0x0a001428, 0x00001144, 0x05020902, 0x00000200, 0x00910000, 0x00000050, 0x2002050a, 0x01040002,
    0x058a55ab, 0x2980052a, 0x12248905, 0x00000204, 0x810a0092, 0x12008802, 0x0a140225, 0x00400104,
    0x24090082, 0x24000002, 0x80040210, 0x01000801, 0x00020085, 0x00022000, 0x01400220, 0x00000108,
    0x2a04aa04, 0x02080294, 0x000a102a, 0x44010001, 0x14010401, 0x00000100, 0x018a1102, 0x0800208a,
    0x02044208, 0x00110400, 0x04200502, 0x08004010, 0x00004000, 0x00000002, 0x2005000a, 0x00000000,
    0x04910411, 0x01000102, 0x21040a84, 0x00002208, 0x0802210a, 0x01048001, 0x22050a10, 0x00000000,
    0x80100005, 0x02000001, 0x000200a0, 0x00040000, 0x10000800, 0x00010000, 0x01002100, 0x00000208,
    0x00041104, 0x10400491, 0x0402042a, 0x04000000, 0x41080201, 0x00000800, 0x00800184, 0x08200210,
    0x04010012, 0x00000040, 0x00400400, 0x00000a00, 0x00000000, 0x00000004, 0x00040014, 0x00000000,
    0x0a002a00, 0x00010000, 0x00810001, 0x00100000, 0x10000400, 0x01042004, 0x00021001, 0x00000001,
    0x00200000, 0x00040008, 0x10000009, 0x00010000, 0x00000020, 0x00000001, 0x00000a00, 0x00000000,
    0x40050091, 0x00041001, 0x00100204, 0x00000028, 0x01024112, 0x00000200, 0x24000004, 0x00000800,
    0x00010822, 0x00000100, 0x00040000, 0x00000004, 0x02000004, 0x00000000, 0x00000001, 0x00000000,
};

static uint32_t iq3_s_grid[512];
const uint32_t *const quant_iq3_s_grid = iq3_s_grid;

static void build_grid(void) {
    int n = 0;
    for (uint32_t code = 0; code < 4096; code++) {
        if (!(iq3_s_codes[code / 32] >> (code % 32) & 1)) continue;
        uint32_t e = 0;
        for (int i = 0; i < 4; i++) e |= (2 * ((code >> (3 * i)) & 7) + 1) << (8 * i);
        iq3_s_grid[n++] = e;
    }
}

/* ---- integer forms: group j of a block ---- */

/* Group j of a block from the type's form in quant_form.h. */
#define GROUP_FROM_FORM(NAME, GROUPS, HALVES, MIN, WRITER)                          \
    static void group_##NAME(const uint8_t *blk, int j, quant_group *o) {           \
        for (int k = 0; k < 32; k++) o->w[k] = (int16_t)qf_w_##NAME(blk, j, k);      \
        qf_ab_##NAME(blk, j, o->a, o->b);                                           \
    }
QUANT_INT_TYPES(GROUP_FROM_FORM)

/* ---- float types ---- */

static void dequant_f32(const uint8_t *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

static void dequant_f16(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = quant_fp16_to_f32(load_u16(src + 2 * i));
}

static void dequant_bf16(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = quant_bf16_to_f32(load_u16(src + 2 * i));
}

static void quant_f32(const float *x, uint8_t *dst, int64_t n) { memcpy(dst, x, (size_t)n * sizeof(float)); }

static void quant_f16(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) store_u16(dst + 2 * i, quant_f32_to_fp16(x[i]));
}

static void quant_bf16(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) store_u16(dst + 2 * i, quant_f32_to_bf16(x[i]));
}

/* ---- writers of blocks of 32 ---- */

/* The value of largest magnitude (the first of equals), and that magnitude. */
static float block_amax(const float *x, float *signed_max) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    if (signed_max) *signed_max = max;
    return amax;
}

/* Weights 0-15 in the low nibbles, 16-31 in the high ones. */
static void put_nibbles(uint8_t *qs, const int q[32]) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((q[j] & 0xF) | (q[j + 16] & 0xF) << 4);
}

/* Bit 4 of each q into a little-endian word. */
static void put_fifth_bits(uint8_t *qh, const int q[32]) {
    uint32_t h = 0;
    for (int j = 0; j < 32; j++) h |= (uint32_t)(q[j] >> 4 & 1) << j;
    for (int i = 0; i < 4; i++) qh[i] = (uint8_t)(h >> (8 * i));
}

/* As ggml's reference: the scale is kept unrounded for quantising and multiplied in as 1/d. */
static void quant_q8_0(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 32, dst += sizeof(block_Q8_0)) {
        float d = block_amax(x, NULL) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        store_u16(dst, quant_f32_to_fp16(d));
        for (int j = 0; j < 32; j++) dst[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}

/* Q4_0 and Q5_0: d = max / -2^(bits-1) from the value of largest magnitude, q = x / d + offset
 * truncated after adding 0.5, clamped to the top code. */
static void quant_sym(const float *x, int bits, int q[32], float *d_out) {
    float max;
    block_amax(x, &max);
    int half = 1 << (bits - 1), top = (1 << bits) - 1;
    float d = max / (float)-half;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) {
        int v = (int)(x[j] * id + ((float)half + 0.5f));
        q[j] = v < top ? v : top;
    }
    *d_out = d;
}

static void quant_q4_0(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 32, dst += sizeof(block_Q4_0)) {
        int q[32];
        float d;
        quant_sym(x, 4, q, &d);
        store_u16(dst, quant_f32_to_fp16(d));
        put_nibbles(dst + 2, q);
    }
}

static void quant_q5_0(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 32, dst += sizeof(block_Q5_0)) {
        int q[32];
        float d;
        quant_sym(x, 5, q, &d);
        store_u16(dst, quant_f32_to_fp16(d));
        put_fifth_bits(dst + 2, q);
        put_nibbles(dst + 6, q);
    }
}

/* Q4_1 and Q5_1: d = (max - min) / top, m = min, q = (x - min) / d truncated after adding 0.5. */
static void quant_affine(const float *x, int bits, int q[32], float *d_out, float *m_out) {
    float min = x[0], max = x[0];
    for (int j = 1; j < 32; j++) {
        min = x[j] < min ? x[j] : min;
        max = x[j] > max ? x[j] : max;
    }
    int top = (1 << bits) - 1;
    float d = (max - min) / (float)top;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) {
        int v = (int)((x[j] - min) * id + 0.5f);
        q[j] = v < top ? v : top;
    }
    *d_out = d;
    *m_out = min;
}

static void quant_q4_1(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 32, dst += sizeof(block_Q4_1)) {
        int q[32];
        float d, m;
        quant_affine(x, 4, q, &d, &m);
        store_u16(dst, quant_f32_to_fp16(d));
        store_u16(dst + 2, quant_f32_to_fp16(m));
        put_nibbles(dst + 4, q);
    }
}

static void quant_q5_1(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 32, dst += sizeof(block_Q5_1)) {
        int q[32];
        float d, m;
        quant_affine(x, 5, q, &d, &m);
        store_u16(dst, quant_f32_to_fp16(d));
        store_u16(dst + 2, quant_f32_to_fp16(m));
        put_fifth_bits(dst + 4, q);
        put_nibbles(dst + 8, q);
    }
}

/* The index of the value nearest v among n ascending values (the lower one on a tie). */
static int nearest(const int8_t *values, int n, float v) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (fabsf(v - (float)values[i]) < fabsf(v - (float)values[best])) best = i;
    return best;
}

/* IQ4_NL: the value of largest magnitude on the end value -127, each weight to its nearest value,
 * then the least-squares scale for those values, stored as fp16, and the weights again to their
 * nearest values under it. */
static void quant_iq4_nl(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 32, dst += sizeof(block_IQ4_NL)) {
        float max;
        block_amax(x, &max);
        float d = max / (float)quant_iq4_values[0], id = d != 0.0f ? 1.0f / d : 0.0f;
        double sxv = 0, svv = 0;
        for (int j = 0; j < 32; j++) {
            int v = quant_iq4_values[nearest(quant_iq4_values, 16, x[j] * id)];
            sxv += (double)x[j] * v;
            svv += (double)v * v;
        }
        uint16_t h = quant_f32_to_fp16(svv > 0 ? (float)(sxv / svv) : 0.0f);
        d = quant_fp16_to_f32(h);
        id = d != 0.0f ? 1.0f / d : 0.0f;
        int q[32];
        for (int j = 0; j < 32; j++) q[j] = nearest(quant_iq4_values, 16, x[j] * id);
        store_u16(dst, h);
        put_nibbles(dst + 2, q);
    }
}

/* MXFP4 (OCP MX v1.0): the shared exponent is floor(log2(max |x|)) minus E2M1's largest exponent
 * (2), biased by 127 (0 for a block of zeros; clamped to 0..254); each weight takes the E2M1 value
 * nearest x / 2^(e-127) (the smaller magnitude on a tie, as ggml's writer), values past 6 clamp. */
static void quant_mxfp4(const float *x, uint8_t *dst, int64_t nb) {
    static const int8_t pos[8] = {0, 1, 2, 3, 4, 6, 8, 12}; /* quant_e2m1x2_values[0..7] */
    for (int64_t b = 0; b < nb; b++, x += 32, dst += sizeof(block_MXFP4)) {
        float amax = block_amax(x, NULL);
        int e = 0;
        if (amax > 0.0f) {
            int ex;
            frexpf(amax, &ex); /* amax = f * 2^ex, f in [0.5, 1): floor(log2(amax)) = ex - 1 */
            e = ex - 1 - 2 + 127;
            e = e < 0 ? 0 : e > 254 ? 254 : e;
        }
        float id = 1.0f / quant_e8m0_half((uint8_t)e); /* a power of two: exact (e <= 254) */
        int q[32];
        for (int j = 0; j < 32; j++) {
            int i = nearest(pos, 8, fabsf(x[j]) * id);
            q[j] = i | (x[j] < 0.0f && i ? 8 : 0);
        }
        dst[0] = (uint8_t)e;
        put_nibbles(dst + 1, q);
    }
}

/* ---- the trait table ---- */

#define FLOAT_TYPE(id, deq, q) [id] = {.block_elems = 1, .dequantize = deq, .quantize = q},
#define INT_TYPE(NAME, GROUPS, HALVES, MIN, WRITER)                                                \
    [GGML_TYPE_##NAME] = {.block_elems = 32 * (GROUPS), .block_bytes = sizeof(block_##NAME), .group = group_##NAME, \
                          .halves = HALVES, .has_min = MIN, .quantize = WRITER},

static quant_type types[GGML_TYPE_COUNT] = {
    FLOAT_TYPE(GGML_TYPE_F32, dequant_f32, quant_f32)
    FLOAT_TYPE(GGML_TYPE_F16, dequant_f16, quant_f16)
    FLOAT_TYPE(GGML_TYPE_BF16, dequant_bf16, quant_bf16)
    QUANT_INT_TYPES(INT_TYPE)
};

static char supported_names[256];

/* The names come from the format layer's table of all ggml types (and the float types' sizes). */
static void build_names(void) {
    size_t len = 0;
    for (uint32_t id = 0; id < GGML_TYPE_COUNT; id++) {
        quant_type *t = &types[id];
        if (!t->group && !t->dequantize) continue;
        const ggml_type_info *gi = ggml_type_get(id);
        t->name = gi->name;
        if (t->dequantize) t->block_bytes = gi->block_bytes;
        len += (size_t)snprintf(supported_names + len, sizeof supported_names - len, "%s%s", len ? ", " : "", t->name);
    }
}

/* The tables are built when the program is loaded, before any thread can read them. */
__attribute__((constructor)) static void build_tables(void) {
    build_grid();
    build_names();
}

const quant_type *quant_type_of(uint32_t type) {
    if (type >= GGML_TYPE_COUNT) return NULL;
    const quant_type *t = &types[type];
    return t->group || t->dequantize ? t : NULL;
}

bool quant_type_supported(uint32_t type) { return quant_type_of(type) != NULL; }

const char *quant_supported_names(void) { return supported_names; }

size_t quant_row_bytes(uint32_t type, int64_t n) {
    const ggml_type_info *ti = ggml_type_get(type);
    if (!ti || n < 0) return 0;
    return (size_t)(n / ti->block_elems) * ti->block_bytes;
}

/* The 32 values of a group: a * w is exact, so each value rounds once, in the addition of b (a
 * half at a time, in loops the compiler vectorises: the KV cache dequantises spans with them). */
static void group_values(const quant_group *q, bool has_min, float *dst) {
    for (int h = 0; h < 2; h++) {
        const int16_t *w = q->w + 16 * h;
        float a = q->a[h], b = q->b[h], *out = dst + 16 * h;
        if (has_min)
            for (int k = 0; k < 16; k++) out[k] = a * (float)w[k] + b;
        else
            for (int k = 0; k < 16; k++) out[k] = a * (float)w[k];
    }
}

void quant_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const quant_type *t = quant_type_of(type);
    if (!t) return;
    const uint8_t *s = src;
    if (t->dequantize) {
        t->dequantize(s, dst, n);
        return;
    }
    int gpb = (int)t->block_elems / 32;
    for (int64_t g = 0; g < n / 32; g++, dst += 32) {
        quant_group q;
        t->group(s + (size_t)(g / gpb) * t->block_bytes, (int)(g % gpb), &q);
        group_values(&q, t->has_min, dst);
    }
}

bool quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    const quant_type *t = quant_type_of(type);
    if (!t || !t->quantize) return false;
    t->quantize(src, dst, n / t->block_elems);
    return true;
}
