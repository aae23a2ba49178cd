/* safetensors reader: an 8-byte little-endian header length N, N bytes of JSON, then the data
 * section. The file is mmapped read-only and the tensor data is used in place, never converted.
 * Format: https://github.com/huggingface/safetensors (README, "Format").
 *
 * st_open validates everything a later stage would trust, as the reference implementation does:
 * N against the file size and a limit of 100 MB; the header is UTF-8, one JSON object (trailing
 * spaces allowed); "__metadata__", if present, maps strings to strings; every other member is a
 * tensor with a known "dtype", a "shape" of at most ST_MAX_DIMS whole numbers and
 * "data_offsets" [begin, end] with begin <= end, inside the data section, end - begin equal to
 * the shape's element count x the dtype's size (no overflow); names are unique and non-empty;
 * and the tensors tile the data section exactly: sorted by offset, each begins where the
 * previous one ended (no overlap, no gap) and the last ends at the end of the file. Each failure
 * is an error naming the file, the tensor, the problem and the file offset (the tensor's key in
 * the header, or the offending byte). */
#ifndef NC_SAFETENSORS_H
#define NC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "format/tensor.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER 100000000ull /* bytes of JSON, the reference implementation's limit */

/* Element types, in the reference implementation's order. */
typedef enum st_dtype {
    ST_BOOL,
    ST_F4,       /* 4-bit float (e2m1), two per byte */
    ST_F6_E2M3,  /* 6-bit floats, four per three bytes */
    ST_F6_E3M2,
    ST_U8,
    ST_I8,
    ST_F8_E5M2,
    ST_F8_E4M3,
    ST_F8_E8M0,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_C64,      /* complex: two F32 */
    ST_F64,
    ST_I64,
    ST_U64,
    ST_N_DTYPES
} st_dtype;

/* fmt_tensor.type of a safetensors tensor: the ggml id where ggml has the same element type
 * (F32 0, F16 1, BF16 30, I8 24, I16 25, I32 26, I64 27, F64 28), else ST_TYPE_BASE + dtype: no
 * ggml type, so the model layer's type checks refuse it; st_type_name names both kinds. */
#define ST_TYPE_BASE 0x100u

/* A tensor of the header. fmt_tensor comes first, so a pointer to one is a pointer to the other
 * (st_tensor_of converts back). In fmt: ne[] is the shape reversed (ggml order); a scalar (rank
 * 0) has n_dims 1 and ne[0] = 1; a tensor of rank > 4 has its leading dimensions folded into
 * ne[3]; data_offset is absolute; info_offset is the file offset of the tensor's key in the
 * header. An empty tensor (a dimension 0) has n_bytes 0 and data at the end of its offset. */
typedef struct st_tensor {
    fmt_tensor t;
    st_dtype dtype;
    uint32_t rank;                /* as in the file: 0..ST_MAX_DIMS */
    uint64_t shape[ST_MAX_DIMS];  /* as in the file: row-major, the last dimension contiguous */
    uint64_t begin, end;          /* data_offsets, relative to the data section */
} st_tensor;

typedef struct st_file st_file;

/* Open and validate a file (mmapped read-only). On failure *out is NULL and err says why. */
int st_open(st_file **out, const char *path, nc_err *err);
/* Parse a buffer the caller keeps alive (fuzzing, tests); name is used in messages. */
int st_open_buffer(st_file **out, const void *data, size_t size, const char *name, nc_err *err);
void st_close(st_file *f);

const char *st_path(const st_file *f);
uint64_t st_file_size(const st_file *f);
uint64_t st_header_len(const st_file *f);   /* N: bytes of JSON */
uint64_t st_data_offset(const st_file *f);  /* 8 + N: start of the data section */

/* Tensors in header order. */
size_t st_n_tensors(const st_file *f);
const st_tensor *st_tensor_at(const st_file *f, size_t i);
const st_tensor *st_find_tensor(const st_file *f, const char *name);

/* "__metadata__": string keys and values (e.g. "format": "pt"), in header order. */
size_t st_n_metadata(const st_file *f);
int st_metadata_at(const st_file *f, size_t i, const char **key, const char **value); /* 0, or -1 out of range */
const char *st_metadata(const st_file *f, const char *key); /* NULL when absent */

/* Element types: "F32", ..., NULL for an unknown one; bits per element; lookup by name (-1 if
 * unknown). */
const char *st_dtype_name(st_dtype d);
uint32_t st_dtype_bits(st_dtype d);
int st_dtype_from_name(const char *name);
uint32_t st_dtype_type(st_dtype d); /* the fmt_tensor.type of a dtype (see ST_TYPE_BASE) */

/* Name of a fmt_tensor.type for messages: a ggml type's name, a safetensors dtype's ("U8"), or
 * "type N" (buf must hold 24 bytes). */
const char *st_type_name(uint32_t type, char buf[24]);

/* The st_tensor a fmt_tensor of this reader belongs to. */
static inline const st_tensor *st_tensor_of(const fmt_tensor *t) { return (const st_tensor *)t; }

#endif
