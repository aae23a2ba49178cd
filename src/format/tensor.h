/* A tensor as a file describes it, whatever the format (GGUF, safetensors): the common currency
 * between the format readers and the model layer. The data is used in place (mmapped). */
#ifndef NC_FMT_TENSOR_H
#define NC_FMT_TENSOR_H

#include <stdint.h>

typedef struct fmt_tensor {
    const char *name;        /* NUL-terminated copy */
    uint32_t n_dims;
    uint64_t ne[4];          /* ggml order: ne[0] is the row length (contiguous); unused dims are 1 */
    uint32_t type;           /* ggml type id (ggml_types.h); safetensors dtypes map to F32/F16/BF16/... */
    uint64_t n_elems;
    uint64_t n_bytes;
    uint64_t data_offset;    /* absolute file offset of the data */
    uint64_t info_offset;    /* file offset of this tensor's entry (GGUF table entry, safetensors header) */
    const void *data;        /* data inside the mapping */
} fmt_tensor;

#endif
