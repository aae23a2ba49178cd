/* GGUF reader (versions 2 and 3): header, metadata, tensor table; the file is mmapped and the
 * tensor data is used in place, never copied. Spec: ggml's docs/gguf.md.
 *
 * gguf_open validates everything a later stage would trust: every length and count against the
 * file size, strings, value types, array element counts (no overflow), general.alignment (a
 * power of two), the tensor table (names unique and non-empty, 1..4 dims, every dim > 0, known
 * type, rows a whole number of blocks, element count x type size = byte size without overflow,
 * offsets aligned and data inside the file, tensors not overlapping). Each failure is an error
 * that names the problem, the key or tensor, and the file offset where it was found. */
#ifndef NC_GGUF_H
#define NC_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "format/tensor.h"

typedef enum gguf_vtype {
    GGUF_T_UINT8 = 0,
    GGUF_T_INT8 = 1,
    GGUF_T_UINT16 = 2,
    GGUF_T_INT16 = 3,
    GGUF_T_UINT32 = 4,
    GGUF_T_INT32 = 5,
    GGUF_T_FLOAT32 = 6,
    GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8,
    GGUF_T_ARRAY = 9,
    GGUF_T_UINT64 = 10,
    GGUF_T_INT64 = 11,
    GGUF_T_FLOAT64 = 12,
} gguf_vtype;

/* A string inside the mapping: not NUL-terminated, may hold any bytes. */
typedef struct gguf_str {
    const char *data;
    uint64_t len;
} gguf_str;

typedef struct gguf_kv {
    const char *key;     /* NUL-terminated copy of the key */
    uint64_t offset;     /* file offset where this key/value pair starts */
    gguf_vtype type;
    union {
        uint64_t u;      /* UINT8/16/32/64 */
        int64_t i;       /* INT8/16/32/64 */
        double f;        /* FLOAT32/64 */
        bool b;          /* BOOL */
        gguf_str s;      /* STRING */
        struct {         /* ARRAY */
            gguf_vtype type;     /* element type */
            uint64_t n;          /* element count */
            const void *data;    /* numeric elements in the mapping (little-endian, maybe unaligned) */
            const gguf_str *strs;/* STRING elements (an index built at open) */
        } arr;
    } v;
} gguf_kv;

/* A tensor of the table (see format/tensor.h). */
typedef fmt_tensor gguf_tensor;

typedef struct gguf_file gguf_file;

/* Open and validate a file (mmapped read-only). On failure *out is NULL and err says why. */
int gguf_open(gguf_file **out, const char *path, nc_err *err);
/* Parse a buffer the caller keeps alive (fuzzing, tests); name is used in messages. */
int gguf_open_buffer(gguf_file **out, const void *data, size_t size, const char *name, nc_err *err);
void gguf_close(gguf_file *f);

const char *gguf_path(const gguf_file *f);
uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_file_size(const gguf_file *f);
uint32_t gguf_alignment(const gguf_file *f);
uint64_t gguf_data_offset(const gguf_file *f);   /* start of the tensor data section */

size_t gguf_n_kv(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, size_t i);
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
/* Pair i as the file encodes it (key, value type, value): *len bytes inside the mapping, for
 * copying metadata into another file unchanged. NULL when i is out of range. */
const uint8_t *gguf_kv_bytes(const gguf_file *f, size_t i, uint64_t *len);

size_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters: return 1 when found with a usable type, 0 when the key is absent, and -1 with
 * err set ("key 'x' at offset N has type string, expected an integer") when the type is wrong.
 * gguf_get_int accepts any integer type (and bool); gguf_get_float any float or integer type. */
int gguf_get_int(const gguf_file *f, const char *key, int64_t *out, nc_err *err);
int gguf_get_uint32(const gguf_file *f, const char *key, uint32_t *out, nc_err *err); /* range-checked */
int gguf_get_float(const gguf_file *f, const char *key, double *out, nc_err *err);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out, nc_err *err);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, nc_err *err);
/* An array whose elements have type elem (for integer elem, any integer element type is accepted). */
int gguf_get_arr(const gguf_file *f, const char *key, gguf_vtype elem, const gguf_kv **out, nc_err *err);

/* Elements of an array value (i < n; integer/float conversions as above). */
int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i);
double gguf_arr_float(const gguf_kv *kv, uint64_t i);
gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i);

const char *gguf_vtype_name(gguf_vtype t);
bool gguf_str_eq(gguf_str s, const char *cstr);

/* Printable form of s for messages and listings, written into dst (always NUL-terminated when
 * cap > 0): quotes, backslashes and control bytes become escapes (\n, \t, \", \xNN), well-formed
 * UTF-8 is kept as is. Stops before dst would overflow and returns how many bytes of s it
 * rendered, so a caller can tell that the string was cut. */
uint64_t gguf_escape(char *dst, size_t cap, gguf_str s);

#endif
