/* GGUF writer (version 3, spec: ggml's docs/gguf.md): metadata pairs (copied from another file or
 * new), a tensor table, then each tensor's data at an offset aligned to the file's alignment.
 * The header is built in memory, then the data is streamed after it in table order. */
#ifndef NC_GGUF_WRITE_H
#define NC_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common.h"

typedef struct gguf_out gguf_out;

/* alignment: a nonzero power of two (the file should say so in general.alignment when not 32). */
gguf_out *gguf_out_new(uint32_t alignment);
void gguf_out_free(gguf_out *o);

/* A pair exactly as a file encodes it (gguf_kv_bytes). 0, or -1 when out of memory. */
int gguf_out_kv_raw(gguf_out *o, const uint8_t *bytes, uint64_t len);
int gguf_out_kv_u32(gguf_out *o, const char *key, uint32_t v);
int gguf_out_kv_f32(gguf_out *o, const char *key, float v);
int gguf_out_kv_bool(gguf_out *o, const char *key, bool v);
int gguf_out_kv_str(gguf_out *o, const char *key, const char *s, size_t len);
/* Arrays: n int32 / float32 values, or n strings (strs[i] of lens[i] bytes). */
int gguf_out_kv_arr_i32(gguf_out *o, const char *key, const int32_t *v, uint64_t n);
int gguf_out_kv_arr_f32(gguf_out *o, const char *key, const float *v, uint64_t n);
int gguf_out_kv_arr_str(gguf_out *o, const char *key, const char *const *strs, const size_t *lens, uint64_t n);
/* The next table entry: n_dims dims of ne (ggml order), ggml type, n_bytes of data. */
int gguf_out_tensor(gguf_out *o, const char *name, uint32_t n_dims, const uint64_t ne[4], uint32_t type,
                    uint64_t n_bytes);

/* The header, pairs and table, padded to the alignment; then, tensor by tensor in table order,
 * its n_bytes of data (padded). -1 with err naming path on a write error. */
int gguf_out_write_header(gguf_out *o, FILE *fp, const char *path, nc_err *err);
int gguf_out_write_data(gguf_out *o, FILE *fp, const void *data, uint64_t n_bytes, const char *path, nc_err *err);

#endif
