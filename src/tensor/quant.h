/* Element types the engine computes with: one trait table entry per type (quant_type_of), the
 * block layouts, dequantisation and the writers. Layouts follow ggml (ggml-common.h; gguf-py's
 * quants.py); MXFP4 follows the OCP Microscaling spec (MX v1.0). Multi-byte fields are
 * little-endian and blocks in a file are not aligned for the structs: read fields by offset.
 *
 * Every quantised type is defined here once, by its integer form (quant_group): per group of 32
 * weights, 32 small integers w and per half (16 weights) a scale a and an offset b, weight
 * k = a * w[k] + b. Dequantisation computes exactly that (a * w is exact in f32, so each value is
 * the float nearest to the exact one, as a float64 reference rounded to f32 gives), the scalar
 * kernels compute their products from it, and the SIMD kernels reproduce it (kernels_impl.h). */
#ifndef NC_QUANT_H
#define NC_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/ggml_types.h"

#define K_SCALE_SIZE 12

/* Blocks of 32 weights. fp16 scales d (and mins m); nibbles: byte i holds weight i (low) and
 * weight 16 + i (high); Q5's fifth bits: bit i of the little-endian word qh is weight i's. */
typedef struct { uint16_t d; uint8_t qs[16]; } block_Q4_0;                  /* 18: d * (q - 8) */
typedef struct { uint16_t d, m; uint8_t qs[16]; } block_Q4_1;               /* 20: d * q + m */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } block_Q5_0;   /* 22: d * (q - 16) */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } block_Q5_1; /* 24: d * q + m */
typedef struct { uint16_t d; int8_t qs[32]; } block_Q8_0;                   /* 34: d * q */
typedef struct { uint16_t d; uint8_t qs[16]; } block_IQ4_NL;                /* 18: d * kvalue[q] */
typedef struct { uint8_t e; uint8_t qs[16]; } block_MXFP4;                  /* 17: 2^(e-127) * E2M1[q] */

/* Blocks of 256 (K-quants and i-quants): sub-blocks of 32 or 16 weights with integer scales. */
typedef struct {                   /* 84: d * sc * q - dmin * m, per 16 */
    uint8_t scales[16];            /* sub-block i: scale (low nibble) and min (high nibble) */
    uint8_t qs[64];                /* 2 bits: weight 128n + 32j + l at bits 2j of qs[32n + l] */
    uint16_t d, dmin;
} block_Q2_K;
typedef struct {                   /* 110: d * (sc - 32) * (q - 4 * !hbit), per 16 */
    uint8_t hmask[32];             /* the high bit of weight 32i + l: bit i of hmask[l] */
    uint8_t qs[64];                /* low 2 bits as Q2_K's */
    uint8_t scales[12];            /* 16 scales of 6 bits: low 4 bits in the nibble i / 8 of byte
                                      i % 8, top 2 bits at bit 2 * (i / 4) of byte 8 + i % 4 */
    uint16_t d;
} block_Q3_K;
typedef struct {                   /* 144: d * sc * q - dmin * m, per 32 */
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE];  /* 8 sub-block scales and mins, 6 bits each (quant_q4_K_scales) */
    uint8_t qs[128];               /* sub-block j: nibble j % 2 of qs[32 * (j / 2) + l] */
} block_Q4_K;
typedef struct {                   /* 176: d * sc * q - dmin * m, per 32 */
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE];  /* as Q4_K's */
    uint8_t qh[32];                /* the fifth bit of sub-block j's weight l: bit j of qh[l] */
    uint8_t qs[128];               /* as Q4_K's */
} block_Q5_K;
typedef struct {                   /* 210: d * sc * (q - 32), per 16 */
    uint8_t ql[128];               /* low 4 bits */
    uint8_t qh[64];                /* high 2 bits */
    int8_t scales[16];
    uint16_t d;
} block_Q6_K;
typedef struct {                   /* 136: d * (ls - 32) * kvalue[q], per 32 */
    uint16_t d;
    uint16_t scales_h;             /* top 2 bits of sub-block j's 6-bit ls at bit 2j */
    uint8_t scales_l[4];           /* low 4 bits: nibble j % 2 of byte j / 2 */
    uint8_t qs[128];               /* sub-block j: qs[16j .. 16j + 15], nibbles as Q4_0's */
} block_IQ4_XS;
typedef struct {                   /* 110: d * (1 + 2 * s) * ±grid, per 32 */
    uint16_t d;
    uint8_t qs[64];                /* sub-block j, quad i (weights 4i .. 4i+3): grid entry qs[8j + i] */
    uint8_t qh[8];                 /* ... plus 256 * bit i of qh[j] */
    uint8_t signs[32];             /* weight 32j + k negative: bit k % 8 of signs[4j + k / 8] */
    uint8_t scales[4];             /* s of sub-block j: nibble j % 2 of byte j / 2 */
} block_IQ3_S;

/* IQ3_S: the 512 grid entries, four magnitudes (1, 3, .., 15) per entry in the bytes of a
 * little-endian word (the format's constants; quant_form.h reads them). */
extern const uint32_t *const quant_iq3_s_grid;

#include "tensor/quant_form.h" /* each type's integer form, weight by weight */

/* The integer form of one group of 32 weights: weight k = a[k / 16] * w[k] + b[k / 16], where
 * a * w is exact in f32. For types with one scale per 32 weights a[0] == a[1] and b[0] == b[1]. */
typedef struct quant_group {
    int16_t w[32];
    float a[2], b[2];
} quant_group;

/* The trait table entry of a type the engine computes with. */
typedef struct quant_type {
    const char *name;
    uint32_t block_elems, block_bytes;
    /* Float types (F32, F16, BF16): n elements to f32. NULL for the quantised types. */
    void (*dequantize)(const uint8_t *src, float *dst, int64_t n);
    /* Quantised types: the integer form of group j (0 .. block_elems / 32 - 1) of a block. */
    void (*group)(const uint8_t *block, int j, quant_group *out);
    bool halves;  /* a and b are per 16 weights (they may differ between a group's halves) */
    bool has_min; /* b is not 0 */
    /* A writer of nb blocks (nb elements for the float types), or NULL. */
    void (*quantize)(const float *src, uint8_t *dst, int64_t nb);
} quant_type;

/* The quantised types, one line each: X(name, groups of 32 per block, halves, has_min, writer or
 * NULL). The table entry of type GGML_TYPE_<name> has the layout block_<name> and takes its
 * integer form from qf_w_<name> and qf_ab_<name> (quant_form.h); the kernels specialise on the
 * same list (kernels_impl.h, cuda/ops.cu). */
#define QUANT_INT_TYPES(X)                      \
    X(Q4_0, 1, false, false, quant_q4_0)        \
    X(Q4_1, 1, false, true, quant_q4_1)         \
    X(Q5_0, 1, false, false, quant_q5_0)        \
    X(Q5_1, 1, false, true, quant_q5_1)         \
    X(Q8_0, 1, false, false, quant_q8_0)        \
    X(Q2_K, 8, true, true, NULL)                \
    X(Q3_K, 8, true, false, quant_q3_K)         \
    X(Q4_K, 8, false, true, quant_q4_K)         \
    X(Q5_K, 8, false, true, quant_q5_K)         \
    X(Q6_K, 8, true, false, quant_q6_K)         \
    X(IQ4_NL, 1, false, false, quant_iq4_nl)    \
    X(IQ4_XS, 8, false, false, NULL)            \
    X(MXFP4, 1, false, false, quant_mxfp4)      \
    X(IQ3_S, 8, false, false, NULL)

/* The K-quant writers (quant_k.c): nb blocks of 256 from src, each sub-block's scale searched for
 * the least squared error. */
void quant_q3_K(const float *src, uint8_t *dst, int64_t nb);
void quant_q4_K(const float *src, uint8_t *dst, int64_t nb);
void quant_q5_K(const float *src, uint8_t *dst, int64_t nb);
void quant_q6_K(const float *src, uint8_t *dst, int64_t nb);

/* The entry of a type, NULL for one the engine cannot compute with. */
const quant_type *quant_type_of(uint32_t type);

/* True for the types the engine computes with (quant_type_of is not NULL). */
bool quant_type_supported(uint32_t type);

/* Their names, for messages: "F32, F16, Q4_0, ..." (in type id order). */
const char *quant_supported_names(void);

/* Bytes taken by n elements of type (n a multiple of the block size). */
size_t quant_row_bytes(uint32_t type, int64_t n);

/* Dequantise n elements (a multiple of the type's block size) into dst. */
void quant_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Quantise n floats into blocks, for `nucleus quantize`, tests and KV storage: F32, F16, BF16,
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (ggml's reference rounding), Q3_K, Q4_K, Q5_K, Q6_K (quant_k.c), IQ4_NL (nearest values with a least-squares scale) and MXFP4
 * (the OCP shared exponent, nearest values). True if the type has a writer. */
bool quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

float quant_fp16_to_f32(uint16_t h);
uint16_t quant_f32_to_fp16(float f);   /* round to nearest even */
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);   /* round to nearest even */
/* An E8M0 scale byte (MXFP4) times 1/2: 2^(e - 128); e = 255 is NaN (OCP MX v1.0). */
float quant_e8m0_half(uint8_t e);

/* IQ4_NL and IQ4_XS: the 16 values of the 4-bit indices (the format's constants). */
extern const int8_t quant_iq4_values[16];
/* MXFP4: the E2M1 values of the 4-bit codes, times 2 (0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives). */
extern const int8_t quant_e2m1x2_values[16];
/* The same as eight bytes each. */
static inline void quant_q4_K_scales(const uint8_t packed[K_SCALE_SIZE], uint8_t sc[8], uint8_t m[8]) {
    uint64_t s, n;
    quant_q4_K_scales64(packed, &s, &n);
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(s >> (8 * j));
        m[j] = (uint8_t)(n >> (8 * j));
    }
}

#endif
