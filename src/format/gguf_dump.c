#include "format/gguf_dump.h"

#include <stdlib.h>
#include <string.h>

#include "format/ggml_types.h"

#define MAX_SCALAR_STR 96 /* bytes of a string value shown before it is cut */
#define MAX_ELEM_STR 32   /* bytes of each string shown in an array */
#define SHOW_STRS 3       /* string elements shown per array */
#define SHOW_NUMS 8       /* numeric elements shown per array */
#define MAX_COLUMN 48     /* widest key or tensor-name column */

typedef unsigned long long ull;

/* A quoted, escaped string; a cut string ends in "..." and gives its full length. */
static void put_str(FILE *out, gguf_str s, size_t max_bytes) {
    char buf[4 * MAX_SCALAR_STR + 1]; /* an escape takes at most 4 characters per byte */
    gguf_str head = {s.data, s.len < max_bytes ? s.len : max_bytes};
    uint64_t used = gguf_escape(buf, sizeof buf, head);
    fprintf(out, "\"%s\"", buf);
    if (used < s.len) fprintf(out, "... (%llu bytes)", (ull)s.len);
}

/* The shortest decimal form that reads back as the same float (or double). */
static void put_float(FILE *out, double v, bool single) {
    char buf[40];
    for (int prec = single ? 6 : 15; prec <= (single ? 9 : 17); prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (single ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v) break;
    }
    fputs(buf, out);
}

static bool is_unsigned(gguf_vtype t) {
    return t == GGUF_T_UINT8 || t == GGUF_T_UINT16 || t == GGUF_T_UINT32 || t == GGUF_T_UINT64;
}

static void put_elem(FILE *out, const gguf_kv *kv, uint64_t i) {
    gguf_vtype t = kv->v.arr.type;
    if (t == GGUF_T_STRING) put_str(out, gguf_arr_str(kv, i), MAX_ELEM_STR);
    else if (t == GGUF_T_FLOAT32 || t == GGUF_T_FLOAT64) put_float(out, gguf_arr_float(kv, i), t == GGUF_T_FLOAT32);
    else if (t == GGUF_T_BOOL) fputs(gguf_arr_int(kv, i) ? "true" : "false", out);
    /* gguf_arr_int wraps UINT64 values above INT64_MAX; converting back restores them */
    else if (is_unsigned(t)) fprintf(out, "%llu", (ull)(uint64_t)gguf_arr_int(kv, i));
    else fprintf(out, "%lld", (long long)gguf_arr_int(kv, i));
}

static void put_array(FILE *out, const gguf_kv *kv) {
    gguf_vtype t = kv->v.arr.type;
    uint64_t n = kv->v.arr.n;
    fprintf(out, "[%s x %llu]", gguf_vtype_name(t), (ull)n);
    if (t == GGUF_T_ARRAY) { /* nested arrays are validated but not indexed */
        if (n) fputs(" ...", out);
        return;
    }
    uint64_t shown = t == GGUF_T_STRING ? SHOW_STRS : SHOW_NUMS;
    for (uint64_t i = 0; i < n && i < shown; i++) {
        fputs(i ? ", " : " ", out);
        put_elem(out, kv, i);
    }
    if (n > shown) fputs(", ...", out);
}

static void put_value(FILE *out, const gguf_kv *kv) {
    switch (kv->type) {
    case GGUF_T_UINT8: case GGUF_T_UINT16: case GGUF_T_UINT32: case GGUF_T_UINT64:
        fprintf(out, "%llu", (ull)kv->v.u);
        break;
    case GGUF_T_INT8: case GGUF_T_INT16: case GGUF_T_INT32: case GGUF_T_INT64:
        fprintf(out, "%lld", (long long)kv->v.i);
        break;
    case GGUF_T_FLOAT32: put_float(out, kv->v.f, true); break;
    case GGUF_T_FLOAT64: put_float(out, kv->v.f, false); break;
    case GGUF_T_BOOL: fputs(kv->v.b ? "true" : "false", out); break;
    case GGUF_T_STRING: put_str(out, kv->v.s, MAX_SCALAR_STR); break;
    case GGUF_T_ARRAY: put_array(out, kv); break;
    }
}

/* A key or tensor name, escaped: names may hold any bytes but NUL. */
static const char *name_text(char *buf, size_t cap, const char *name) {
    gguf_escape(buf, cap, (gguf_str){name, strlen(name)});
    return buf;
}

static int column_width(size_t n, const char *(*name_at)(const gguf_file *, size_t), const gguf_file *f) {
    size_t w = 4;
    for (size_t i = 0; i < n; i++) {
        char buf[4 * MAX_COLUMN + 1];
        size_t len = strlen(name_text(buf, sizeof buf, name_at(f, i)));
        if (len > w) w = len;
    }
    return (int)(w < MAX_COLUMN ? w : MAX_COLUMN);
}

static const char *kv_name(const gguf_file *f, size_t i) { return gguf_kv_at(f, i)->key; }
static const char *tensor_name(const gguf_file *f, size_t i) { return gguf_tensor_at(f, i)->name; }

static void dump_kvs(const gguf_file *f, FILE *out) {
    size_t n = gguf_n_kv(f);
    int w = column_width(n, kv_name, f);
    fprintf(out, "metadata (%zu keys):\n", n);
    for (size_t i = 0; i < n; i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        char key[4 * MAX_COLUMN + 1];
        fprintf(out, "  %-*s  %-7s  ", w, name_text(key, sizeof key, kv->key), gguf_vtype_name(kv->type));
        put_value(out, kv);
        fputc('\n', out);
    }
}

static void dims_text(const gguf_tensor *t, char *buf, size_t cap) {
    size_t w = (size_t)snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < t->n_dims && w < cap; d++)
        w += (size_t)snprintf(buf + w, cap - w, "%s%llu", d ? ", " : "", (ull)t->ne[d]);
    if (w < cap) snprintf(buf + w, cap - w, "]");
}

static void dump_tensors(const gguf_file *f, FILE *out) {
    size_t n = gguf_n_tensors(f);
    int w = column_width(n, tensor_name, f);
    uint64_t elems = 0, bytes = 0;
    fprintf(out, "tensors (%zu):\n", n);
    if (n) fprintf(out, "  %-*s  %-7s  %-22s  %12s  %12s\n", w, "name", "type", "dims", "bytes", "offset");
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char name[4 * MAX_COLUMN + 1], tn[24], dims[96];
        dims_text(t, dims, sizeof dims);
        fprintf(out, "  %-*s  %-7s  %-22s  %12llu  %12llu\n", w, name_text(name, sizeof name, t->name),
                ggml_type_name(t->type, tn), dims, (ull)t->n_bytes, (ull)t->data_offset);
        elems += t->n_elems; /* tensors do not overlap in the file: both sums stay far below 2^64 */
        bytes += t->n_bytes;
    }
    fprintf(out, "total: %zu tensors, %llu elements, %llu bytes of data\n", n, (ull)elems, (ull)bytes);
}

int gguf_dump(const gguf_file *f, FILE *out) {
    fprintf(out, "%s: GGUF version %u, %zu keys, %zu tensors, alignment %u, data offset %llu, file size %llu\n",
            gguf_path(f), gguf_version(f), gguf_n_kv(f), gguf_n_tensors(f), gguf_alignment(f),
            (ull)gguf_data_offset(f), (ull)gguf_file_size(f));
    dump_kvs(f, out);
    dump_tensors(f, out);
    return ferror(out) ? -1 : 0;
}
