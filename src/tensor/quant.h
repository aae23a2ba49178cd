/* Element types the engine computes with, their block layouts and dequantisation.
 * Layouts follow ggml (ggml-common.h / docs of the GGUF quant formats); every block stores its
 * scale(s) as IEEE half floats. */
#ifndef NC_QUANT_H
#define NC_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/ggml_types.h"

#define QK4_0 32
#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;        /* 18 bytes */
typedef struct { uint16_t d; int8_t qs[QK8_0]; } block_q8_0;              /* 34 bytes */
typedef struct {                                                          /* 144 bytes */
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE];  /* 8 sub-block scales and mins, 6 bits each, packed */
    uint8_t qs[QK_K / 2];
} block_q4_K;
typedef struct {                                                          /* 210 bytes */
    uint8_t ql[QK_K / 2];          /* low 4 bits */
    uint8_t qh[QK_K / 4];          /* high 2 bits */
    int8_t scales[QK_K / 16];      /* 16 sub-block scales */
    uint16_t d;
} block_q6_K;

float quant_fp16_to_f32(uint16_t h);
uint16_t quant_f32_to_fp16(float f);   /* round to nearest even */
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);   /* round to nearest even */

/* True for the types the engine computes with: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K. */
bool quant_type_supported(uint32_t type);

/* Bytes taken by n elements of type (n a multiple of the block size). */
size_t quant_row_bytes(uint32_t type, int64_t n);

/* Dequantise n elements (a multiple of the type's block size) into dst. */
void quant_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Quantise n floats into blocks (reference rounding as ggml does); for tests and KV storage.
 * Supported for F32, F16, BF16, Q8_0, Q4_0. */
void quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* A little-endian word (as files store them) from bytes. */
static inline uint32_t quant_load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Q4_K: the eight 6-bit scales and mins packed in a block's 12 scale bytes. Sub-block j < 4
 * keeps its scale and min in the low 6 bits of bytes j and j+4; sub-block j >= 4 keeps their low
 * 4 bits in the nibbles of byte j+4 and their top 2 bits in the top bits of bytes j-4 and j.
 * Worked on four bytes at a time (four sub-blocks side by side in one word); byte j of *sc and
 * *m (least significant first) is sub-block j's scale and min. */
static inline void quant_q4_K_scales64(const uint8_t packed[K_SCALE_SIZE], uint64_t *sc, uint64_t *m) {
    uint32_t a = quant_load_le32(packed), b = quant_load_le32(packed + 4), c = quant_load_le32(packed + 8);
    uint32_t lo6 = 0x3F3F3F3Fu, lo4 = 0x0F0F0F0Fu, top2 = 0x30303030u; /* masks per byte */
    *sc = (a & lo6) | (uint64_t)((c & lo4) | ((a >> 2) & top2)) << 32;
    *m = (b & lo6) | (uint64_t)(((c >> 4) & lo4) | ((b >> 2) & top2)) << 32;
}

/* The same as eight bytes each. */
static inline void quant_q4_K_scales(const uint8_t packed[K_SCALE_SIZE], uint8_t sc[8], uint8_t m[8]) {
    uint64_t s, n;
    quant_q4_K_scales64(packed, &s, &n);
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(s >> (8 * j));
        m[j] = (uint8_t)(n >> (8 * j));
    }
}

/* Q6_K: the 128 signed 6-bit values (-32..31) of one half block from its 64 ql and 32 qh bytes,
 * in weight order. */
void quant_q6_K_unpack(const uint8_t *ql, const uint8_t *qh, int8_t out[128]);

#endif
