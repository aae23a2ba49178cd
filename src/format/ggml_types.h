/* The ggml tensor element types that GGUF files name by id: block size and bytes per block.
 * The reader needs every type's layout to validate a tensor table, even for types the engine
 * cannot compute with (those are refused later, by the model layer, with the type's name). */
#ifndef NC_GGML_TYPES_H
#define NC_GGML_TYPES_H

#include <stdbool.h>
#include <stdint.h>

enum {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_MXFP4 = 39,
    GGML_TYPE_COUNT = 40, /* one past the largest id known here */
};

typedef struct ggml_type_info {
    const char *name;        /* "Q4_K" */
    uint32_t block_elems;    /* weights per block (1 for plain floats) */
    uint32_t block_bytes;    /* bytes per block */
} ggml_type_info;

/* NULL for an id that is not a known ggml type. */
const ggml_type_info *ggml_type_get(uint32_t type);

/* Name for messages: the type's name, or "type 77" for an unknown id (buf must hold 24 bytes). */
const char *ggml_type_name(uint32_t type, char buf[24]);

#endif
