#include "format/gguf_write.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"

typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
} bytes;

struct gguf_out {
    uint32_t alignment;
    uint64_t n_kv, n_tensors;
    bytes kvs, table;
    uint64_t data_bytes; /* the data section so far, each tensor padded */
};

static int put(bytes *b, const void *src, size_t n) {
    if (!n) return 0;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

/* GGUF is little-endian, as the reader asserts of the host. */
static int put_u32(bytes *b, uint32_t v) { return put(b, &v, 4); }
static int put_u64(bytes *b, uint64_t v) { return put(b, &v, 8); }
static int put_str(bytes *b, const char *s) { return put_u64(b, strlen(s)) || put(b, s, strlen(s)) ? -1 : 0; }

static uint64_t pad(uint64_t n, uint32_t alignment) { return (n + alignment - 1) / alignment * alignment; }

gguf_out *gguf_out_new(uint32_t alignment) {
    gguf_out *o = calloc(1, sizeof *o);
    if (o) o->alignment = alignment;
    return o;
}

void gguf_out_free(gguf_out *o) {
    if (!o) return;
    free(o->kvs.p);
    free(o->table.p);
    free(o);
}

int gguf_out_kv_raw(gguf_out *o, const uint8_t *b, uint64_t len) {
    o->n_kv++;
    return put(&o->kvs, b, len);
}

int gguf_out_kv_u32(gguf_out *o, const char *key, uint32_t v) {
    o->n_kv++;
    return put_str(&o->kvs, key) || put_u32(&o->kvs, GGUF_T_UINT32) || put_u32(&o->kvs, v) ? -1 : 0;
}

int gguf_out_kv_f32(gguf_out *o, const char *key, float v) {
    o->n_kv++;
    return put_str(&o->kvs, key) || put_u32(&o->kvs, GGUF_T_FLOAT32) || put(&o->kvs, &v, 4) ? -1 : 0;
}

int gguf_out_kv_bool(gguf_out *o, const char *key, bool v) {
    uint8_t b = v;
    o->n_kv++;
    return put_str(&o->kvs, key) || put_u32(&o->kvs, GGUF_T_BOOL) || put(&o->kvs, &b, 1) ? -1 : 0;
}

static int put_strn(bytes *b, const char *s, size_t len) { return put_u64(b, len) || put(b, s, len) ? -1 : 0; }

int gguf_out_kv_str(gguf_out *o, const char *key, const char *s, size_t len) {
    o->n_kv++;
    return put_str(&o->kvs, key) || put_u32(&o->kvs, GGUF_T_STRING) || put_strn(&o->kvs, s, len) ? -1 : 0;
}

static int put_arr_head(gguf_out *o, const char *key, gguf_vtype elem, uint64_t n) {
    o->n_kv++;
    return put_str(&o->kvs, key) || put_u32(&o->kvs, GGUF_T_ARRAY) || put_u32(&o->kvs, elem) || put_u64(&o->kvs, n) ? -1 : 0;
}

int gguf_out_kv_arr_i32(gguf_out *o, const char *key, const int32_t *v, uint64_t n) {
    return put_arr_head(o, key, GGUF_T_INT32, n) || put(&o->kvs, v, (size_t)n * 4) ? -1 : 0;
}

int gguf_out_kv_arr_f32(gguf_out *o, const char *key, const float *v, uint64_t n) {
    return put_arr_head(o, key, GGUF_T_FLOAT32, n) || put(&o->kvs, v, (size_t)n * 4) ? -1 : 0;
}

int gguf_out_kv_arr_str(gguf_out *o, const char *key, const char *const *strs, const size_t *lens, uint64_t n) {
    if (put_arr_head(o, key, GGUF_T_STRING, n)) return -1;
    for (uint64_t i = 0; i < n; i++)
        if (put_strn(&o->kvs, strs[i], lens[i])) return -1;
    return 0;
}

int gguf_out_tensor(gguf_out *o, const char *name, uint32_t n_dims, const uint64_t ne[4], uint32_t type,
                    uint64_t n_bytes) {
    if (put_str(&o->table, name) || put_u32(&o->table, n_dims)) return -1;
    for (uint32_t d = 0; d < n_dims; d++)
        if (put_u64(&o->table, ne[d])) return -1;
    if (put_u32(&o->table, type) || put_u64(&o->table, o->data_bytes)) return -1;
    o->n_tensors++;
    o->data_bytes += pad(n_bytes, o->alignment);
    return 0;
}

static int write_all(FILE *fp, const void *p, size_t n, const char *path, nc_err *err) {
    if (n && fwrite(p, 1, n, fp) != n) return nc_fail(err, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

static int write_padding(FILE *fp, uint64_t n, uint32_t alignment, const char *path, nc_err *err) {
    static const uint8_t zeros[256];
    for (uint64_t left = pad(n, alignment) - n; left;) {
        size_t k = left < sizeof zeros ? (size_t)left : sizeof zeros;
        if (write_all(fp, zeros, k, path, err)) return -1;
        left -= k;
    }
    return 0;
}

int gguf_out_write_header(gguf_out *o, FILE *fp, const char *path, nc_err *err) {
    bytes h = {0};
    int rc = put(&h, "GGUF", 4) || put_u32(&h, 3) || put_u64(&h, o->n_tensors) || put_u64(&h, o->n_kv) ? -1 : 0;
    if (rc) return nc_fail(err, "out of memory");
    rc = write_all(fp, h.p, h.len, path, err) || write_all(fp, o->kvs.p, o->kvs.len, path, err) ||
         write_all(fp, o->table.p, o->table.len, path, err) ||
         write_padding(fp, h.len + o->kvs.len + o->table.len, o->alignment, path, err);
    free(h.p);
    return rc ? -1 : 0;
}

int gguf_out_write_data(gguf_out *o, FILE *fp, const void *data, uint64_t n_bytes, const char *path, nc_err *err) {
    if (write_all(fp, data, (size_t)n_bytes, path, err)) return -1;
    return write_padding(fp, n_bytes, o->alignment, path, err);
}
