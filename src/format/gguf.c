#include "format/gguf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/ggml_types.h"
#include "format/mapped.h"

/* GGUF is little-endian; values are read by copying their bytes into host integers. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the GGUF reader assumes a little-endian host");

#define DEFAULT_ALIGNMENT 32u
#define MAX_ARRAY_DEPTH 8 /* nesting bound for arrays of arrays: keeps the recursion shallow */
/* The smallest encodings, used to refuse counts the remaining bytes cannot hold before
 * allocating for them: a pair is key length (8) + a 1-byte key + value type (4) + a 1-byte value;
 * a tensor entry is name length (8) + a 1-byte name + n_dims (4) + one dim (8) + type (4) + offset (8). */
#define MIN_KV_BYTES 14u
#define MIN_TENSOR_BYTES 33u

typedef unsigned long long ull;

/* Open-addressing hash index from names to item numbers (keys, tensor names). */
typedef struct name_index {
    size_t *slots;      /* item number + 1; 0 marks an empty slot */
    size_t mask;
    const char **names; /* names[i] is the name of item i */
} name_index;

struct gguf_file {
    char *path;
    const uint8_t *base;
    uint64_t size;
    void *map; /* the mmapped file, or NULL for a caller's buffer */
    uint32_t version, alignment;
    uint64_t data_offset;
    uint64_t kv_end; /* file offset just past the last key/value pair */
    gguf_kv *kvs;
    size_t n_kv;
    gguf_tensor *tensors;
    size_t n_tensors;
    name_index kv_index, tensor_index;
};

/* Parser state: a bounds-checked cursor plus what is being read, for error messages. */
typedef struct parser {
    gguf_file *f;
    nc_err *err;
    uint64_t pos;
    const char *kind;  /* "key" or "tensor"; NULL while reading the header */
    const char *name;  /* the item's name once read */
    uint64_t index;    /* the item's number, shown while its name is unknown */
    uint64_t item_off; /* file offset where the item starts */
} parser;

/* ---- messages ---------------------------------------------------------------------------- */

static const char *shown(char *buf, size_t cap, const char *s, size_t len) {
    uint64_t used = gguf_escape(buf, cap - 4, (gguf_str){s, len});
    if (used < len) strcat(buf, "...");
    return buf;
}

static void describe_item(const parser *p, char *ctx, size_t cap) {
    char name[96];
    const char *entry = strcmp(p->kind, "tensor") == 0 ? "table entry" : "entry";
    if (p->name)
        snprintf(ctx, cap, "%s '%s' (%s at offset %llu)", p->kind, shown(name, sizeof name, p->name, strlen(p->name)),
                 entry, (ull)p->item_off);
    else
        snprintf(ctx, cap, "%s #%llu (%s at offset %llu)", p->kind, (ull)p->index, entry, (ull)p->item_off);
}

static int fail(const parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(const parser *p, const char *fmt, ...) {
    char msg[NC_ERR_MAX], ctx[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p->kind) describe_item(p, ctx, sizeof ctx);
    else snprintf(ctx, sizeof ctx, "header");
    return nc_fail(p->err, "%s: %s: %s", p->f->path, ctx, msg);
}

static void begin_item(parser *p, const char *kind, uint64_t index) {
    p->kind = kind;
    p->name = NULL;
    p->index = index;
    p->item_off = p->pos;
}

/* ---- cursor ------------------------------------------------------------------------------ */

static uint64_t remaining(const parser *p) { return p->f->size - p->pos; }

static int need(const parser *p, uint64_t n, const char *field) {
    if (n <= remaining(p)) return 0;
    return fail(p, "truncated file: %s at offset %llu needs %llu bytes but the file ends at %llu", field,
                (ull)p->pos, (ull)n, (ull)p->f->size);
}

static int read_u32(parser *p, const char *field, uint32_t *out) {
    if (need(p, 4, field)) return -1;
    memcpy(out, p->f->base + p->pos, 4);
    p->pos += 4;
    return 0;
}

static int read_u64(parser *p, const char *field, uint64_t *out) {
    if (need(p, 8, field)) return -1;
    memcpy(out, p->f->base + p->pos, 8);
    p->pos += 8;
    return 0;
}

static int read_str(parser *p, const char *field, gguf_str *out) {
    uint64_t at = p->pos, len;
    if (read_u64(p, field, &len)) return -1;
    if (len > remaining(p))
        return fail(p, "%s length %llu (at offset %llu) exceeds the %llu bytes left in the file", field, (ull)len,
                    (ull)at, (ull)remaining(p));
    out->data = (const char *)p->f->base + p->pos;
    out->len = len;
    p->pos += len;
    return 0;
}

/* A key or tensor name: non-empty, no NUL bytes (it is kept as a C string). */
static int read_name(parser *p, const char *field, char **out) {
    uint64_t at = p->pos;
    gguf_str s;
    if (read_str(p, field, &s)) return -1;
    if (s.len == 0) return fail(p, "empty %s at offset %llu", field, (ull)at);
    if (memchr(s.data, 0, s.len)) return fail(p, "%s at offset %llu contains a NUL byte", field, (ull)at);
    if (!(*out = malloc(s.len + 1))) return fail(p, "out of memory for a %llu-byte %s", (ull)s.len, field);
    memcpy(*out, s.data, s.len);
    (*out)[s.len] = 0;
    p->name = *out;
    return 0;
}

/* ---- name index ---------------------------------------------------------------------------- */

static int index_init(name_index *ix, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    ix->slots = calloc(cap, sizeof *ix->slots);
    ix->names = calloc(n ? n : 1, sizeof *ix->names);
    ix->mask = cap - 1;
    return ix->slots && ix->names ? 0 : -1;
}

static void index_free(name_index *ix) {
    free(ix->slots);
    free(ix->names);
}

static size_t hash_name(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return (size_t)h;
}

static size_t *index_slot(const name_index *ix, const char *name) {
    size_t i = hash_name(name) & ix->mask;
    while (ix->slots[i] && strcmp(ix->names[ix->slots[i] - 1], name) != 0) i = (i + 1) & ix->mask;
    return &ix->slots[i];
}

/* Adds item i; returns false (and leaves the index alone) when the name is already there. */
static bool index_add(name_index *ix, const char *name, size_t i, size_t *existing) {
    size_t *slot = index_slot(ix, name);
    if (*slot) {
        *existing = *slot - 1;
        return false;
    }
    ix->names[i] = name;
    *slot = i + 1;
    return true;
}

static long index_find(const name_index *ix, const char *name) {
    if (!ix->slots || !name) return -1;
    size_t *slot = index_slot(ix, name);
    return *slot ? (long)(*slot - 1) : -1;
}

/* ---- values ------------------------------------------------------------------------------ */

static bool vtype_known(uint32_t t) { return t <= GGUF_T_FLOAT64; }

static bool vtype_is_int(gguf_vtype t) {
    return t <= GGUF_T_INT32 || t == GGUF_T_UINT64 || t == GGUF_T_INT64;
}

static bool vtype_is_float(gguf_vtype t) { return t == GGUF_T_FLOAT32 || t == GGUF_T_FLOAT64; }

/* Bytes of a fixed-size value; 0 for strings and arrays. */
static uint64_t scalar_bytes(gguf_vtype t) {
    switch (t) {
    case GGUF_T_UINT8: case GGUF_T_INT8: case GGUF_T_BOOL: return 1;
    case GGUF_T_UINT16: case GGUF_T_INT16: return 2;
    case GGUF_T_UINT32: case GGUF_T_INT32: case GGUF_T_FLOAT32: return 4;
    case GGUF_T_UINT64: case GGUF_T_INT64: case GGUF_T_FLOAT64: return 8;
    default: return 0;
    }
}

/* The smallest encoding of one value: a string is at least its length, an array its header. */
static uint64_t min_value_bytes(gguf_vtype t) {
    if (t == GGUF_T_STRING) return 8;
    if (t == GGUF_T_ARRAY) return 12;
    return scalar_bytes(t);
}

/* Little-endian bytes of a fixed-size value, zero-extended. */
static uint64_t load_raw(const void *src, uint64_t n) {
    uint64_t raw = 0;
    memcpy(&raw, src, n);
    return raw;
}

static int read_scalar(parser *p, gguf_vtype t, gguf_kv *kv) {
    uint64_t n = scalar_bytes(t);
    if (need(p, n, "value")) return -1;
    const uint8_t *src = p->f->base + p->pos;
    uint64_t raw = load_raw(src, n);
    switch (t) {
    case GGUF_T_INT8: kv->v.i = (int8_t)raw; break;
    case GGUF_T_INT16: kv->v.i = (int16_t)raw; break;
    case GGUF_T_INT32: kv->v.i = (int32_t)raw; break;
    case GGUF_T_INT64: kv->v.i = (int64_t)raw; break;
    case GGUF_T_FLOAT32: {
        float x;
        memcpy(&x, src, 4);
        kv->v.f = x;
        break;
    }
    case GGUF_T_FLOAT64: memcpy(&kv->v.f, src, 8); break;
    case GGUF_T_BOOL:
        if (raw > 1) return fail(p, "bool value %llu at offset %llu is neither 0 nor 1", (ull)raw, (ull)p->pos);
        kv->v.b = raw != 0;
        break;
    default: kv->v.u = raw; break;
    }
    p->pos += n;
    return 0;
}

static int check_bools(const parser *p, uint64_t n) {
    const uint8_t *b = p->f->base + p->pos;
    for (uint64_t i = 0; i < n; i++)
        if (b[i] > 1)
            return fail(p, "bool array element %llu at offset %llu has value %u, neither 0 nor 1", (ull)i,
                        (ull)(p->pos + i), b[i]);
    return 0;
}

static int read_str_elems(parser *p, uint64_t n, gguf_kv *kv) {
    gguf_str *strs = NULL;
    if (kv && n) {
        if (!(strs = malloc(n * sizeof *strs))) return fail(p, "out of memory for %llu strings", (ull)n);
        kv->v.arr.strs = strs;
    }
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s;
        if (read_str(p, "string element", &s)) return -1;
        if (strs) strs[i] = s;
    }
    return 0;
}

/* An array value; kv is NULL for arrays nested in an array, which are validated and skipped. */
static int read_array(parser *p, gguf_kv *kv, int depth) {
    uint64_t at = p->pos, n;
    uint32_t et;
    if (read_u32(p, "array element type", &et)) return -1;
    if (!vtype_known(et)) return fail(p, "unknown array element type %u at offset %llu", et, (ull)at);
    if (et == GGUF_T_ARRAY && depth >= MAX_ARRAY_DEPTH)
        return fail(p, "arrays nested deeper than %d levels (at offset %llu)", MAX_ARRAY_DEPTH, (ull)at);
    if (read_u64(p, "array length", &n)) return -1;
    uint64_t min = min_value_bytes((gguf_vtype)et);
    if (n > remaining(p) / min)
        return fail(p, "array of %llu %s elements (header at offset %llu) needs at least %llu bytes per element "
                       "but only %llu bytes are left in the file",
                    (ull)n, gguf_vtype_name((gguf_vtype)et), (ull)at, (ull)min, (ull)remaining(p));
    if (kv) {
        kv->v.arr.type = (gguf_vtype)et;
        kv->v.arr.n = n;
        kv->v.arr.data = p->f->base + p->pos;
    }
    if (et == GGUF_T_STRING) return read_str_elems(p, n, kv);
    if (et == GGUF_T_ARRAY) {
        for (uint64_t i = 0; i < n; i++)
            if (read_array(p, NULL, depth + 1)) return -1;
        return 0;
    }
    if (et == GGUF_T_BOOL && check_bools(p, n)) return -1;
    p->pos += n * min;
    return 0;
}

static int read_kv(parser *p, size_t i) {
    gguf_file *f = p->f;
    gguf_kv *kv = &f->kvs[i];
    size_t first;
    char *key;
    begin_item(p, "key", i);
    kv->offset = p->pos;
    if (read_name(p, "key", &key)) return -1;
    kv->key = key;
    if (!index_add(&f->kv_index, kv->key, i, &first))
        return fail(p, "duplicate key (first defined at offset %llu)", (ull)f->kvs[first].offset);
    uint64_t type_at = p->pos;
    uint32_t t;
    if (read_u32(p, "value type", &t)) return -1;
    if (!vtype_known(t)) return fail(p, "unknown value type %u at offset %llu", t, (ull)type_at);
    kv->type = (gguf_vtype)t;
    if (t == GGUF_T_ARRAY) return read_array(p, kv, 1);
    if (t == GGUF_T_STRING) return read_str(p, "string value", &kv->v.s);
    return read_scalar(p, kv->type, kv);
}

/* ---- header and metadata ------------------------------------------------------------------ */

static int read_header(parser *p, uint64_t *n_tensors, uint64_t *n_kv) {
    if (need(p, 4, "magic")) return -1;
    if (memcmp(p->f->base, "GGUF", 4) != 0) {
        char m[24];
        return fail(p, "bad magic \"%s\" at offset 0 (expected \"GGUF\"): not a GGUF file",
                    shown(m, sizeof m, (const char *)p->f->base, 4));
    }
    p->pos = 4;
    uint32_t v;
    if (read_u32(p, "version", &v)) return -1;
    if (v == 1) return fail(p, "GGUF version 1 (at offset 4) is not supported; only versions 2 and 3 are");
    if (v != 2 && v != 3) {
        uint32_t swapped = __builtin_bswap32(v);
        if (swapped == 2 || swapped == 3)
            return fail(p, "big-endian GGUF (version %u at offset 4) is not supported", swapped);
        return fail(p, "unsupported GGUF version %u at offset 4; only versions 2 and 3 are supported", v);
    }
    p->f->version = v;
    if (read_u64(p, "tensor count", n_tensors) || read_u64(p, "key/value count", n_kv)) return -1;
    if (*n_kv > remaining(p) / MIN_KV_BYTES)
        return fail(p, "key/value count %llu (at offset 16) is more than the %llu bytes after the header can hold",
                    (ull)*n_kv, (ull)remaining(p));
    if (*n_tensors > remaining(p) / MIN_TENSOR_BYTES)
        return fail(p, "tensor count %llu (at offset 8) is more than the %llu bytes after the header can hold",
                    (ull)*n_tensors, (ull)remaining(p));
    return 0;
}

static int read_kvs(parser *p, uint64_t n) {
    gguf_file *f = p->f;
    f->kvs = calloc(n ? n : 1, sizeof *f->kvs);
    if (!f->kvs || index_init(&f->kv_index, n)) return fail(p, "out of memory for %llu key/value pairs", (ull)n);
    f->n_kv = n;
    for (size_t i = 0; i < n; i++)
        if (read_kv(p, i)) return -1;
    return 0;
}

static int apply_alignment(parser *p) {
    gguf_file *f = p->f;
    long i = index_find(&f->kv_index, "general.alignment");
    f->alignment = DEFAULT_ALIGNMENT;
    if (i < 0) return 0;
    const gguf_kv *kv = &f->kvs[i];
    p->kind = "key";
    p->name = kv->key;
    p->item_off = kv->offset;
    if (kv->type != GGUF_T_UINT32) return fail(p, "has type %s, expected uint32", gguf_vtype_name(kv->type));
    if (kv->v.u == 0 || (kv->v.u & (kv->v.u - 1)) != 0)
        return fail(p, "alignment %llu is not a nonzero power of two", (ull)kv->v.u);
    f->alignment = (uint32_t)kv->v.u;
    return 0;
}

/* ---- tensor table ------------------------------------------------------------------------ */

static int check_shape(parser *p, gguf_tensor *t, uint64_t dims_at, uint64_t type_at) {
    const ggml_type_info *ti = ggml_type_get(t->type);
    if (!ti) return fail(p, "unknown ggml type %u at offset %llu", t->type, (ull)type_at);
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (t->ne[d] == 0) return fail(p, "dimension %u is 0 (at offset %llu)", d, (ull)(dims_at + 8 * d));
        if (t->ne[d] > (uint64_t)INT64_MAX || !nc_mul_u64(n, t->ne[d], &n) || n > (uint64_t)INT64_MAX)
            return fail(p, "element count overflows at dimension %u (%llu, at offset %llu)", d, (ull)t->ne[d],
                        (ull)(dims_at + 8 * d));
    }
    if (t->ne[0] % ti->block_elems)
        return fail(p, "row length %llu is not a multiple of the %s block size %u", (ull)t->ne[0], ti->name,
                    ti->block_elems);
    t->n_elems = n;
    if (!nc_mul_u64(n / ti->block_elems, ti->block_bytes, &t->n_bytes))
        return fail(p, "byte size of %llu %s elements overflows", (ull)n, ti->name);
    return 0;
}

static int read_tensor_info(parser *p, size_t i) {
    gguf_file *f = p->f;
    gguf_tensor *t = &f->tensors[i];
    size_t first;
    char *name;
    begin_item(p, "tensor", i);
    t->info_offset = p->pos;
    if (read_name(p, "tensor name", &name)) return -1;
    t->name = name;
    if (!index_add(&f->tensor_index, t->name, i, &first))
        return fail(p, "duplicate tensor name (first entry at offset %llu)", (ull)f->tensors[first].info_offset);
    uint64_t at = p->pos;
    if (read_u32(p, "dimension count", &t->n_dims)) return -1;
    if (t->n_dims < 1 || t->n_dims > 4)
        return fail(p, "dimension count %u at offset %llu is outside 1..4", t->n_dims, (ull)at);
    uint64_t dims_at = p->pos;
    for (uint32_t d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        if (read_u64(p, "dimension", &t->ne[d])) return -1;
    uint64_t type_at = p->pos;
    /* data_offset holds the offset relative to the data section until place_tensors() */
    if (read_u32(p, "tensor type", &t->type) || read_u64(p, "data offset", &t->data_offset)) return -1;
    return check_shape(p, t, dims_at, type_at);
}

static int read_tensor_table(parser *p, uint64_t n) {
    gguf_file *f = p->f;
    if (n > remaining(p) / MIN_TENSOR_BYTES)
        return fail(p, "tensor count %llu (at offset 8) is more than the %llu bytes left after the metadata (at "
                       "offset %llu) can hold",
                    (ull)n, (ull)remaining(p), (ull)p->pos);
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    if (!f->tensors || index_init(&f->tensor_index, n)) return fail(p, "out of memory for %llu tensors", (ull)n);
    f->n_tensors = n;
    for (size_t i = 0; i < n; i++)
        if (read_tensor_info(p, i)) return -1;
    return 0;
}

static void focus_tensor(parser *p, const gguf_tensor *t) {
    p->kind = "tensor";
    p->name = t->name;
    p->item_off = t->info_offset;
}

static int cmp_by_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    if (x->data_offset != y->data_offset) return x->data_offset < y->data_offset ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int check_overlaps(parser *p) {
    gguf_file *f = p->f;
    if (f->n_tensors < 2) return 0;
    const gguf_tensor **order = malloc(f->n_tensors * sizeof *order);
    if (!order) return fail(p, "out of memory for %zu tensors", f->n_tensors);
    for (size_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, f->n_tensors, sizeof *order, cmp_by_offset);
    int rc = 0;
    for (size_t i = 1; i < f->n_tensors && rc == 0; i++) {
        const gguf_tensor *a = order[i - 1], *b = order[i];
        if (a->data_offset + a->n_bytes > b->data_offset) {
            char name[96];
            focus_tensor(p, b);
            rc = fail(p, "data [%llu, %llu) overlaps the data [%llu, %llu) of tensor '%s'", (ull)b->data_offset,
                      (ull)(b->data_offset + b->n_bytes), (ull)a->data_offset, (ull)(a->data_offset + a->n_bytes),
                      shown(name, sizeof name, a->name, strlen(a->name)));
        }
    }
    free(order);
    return rc;
}

/* Resolves data offsets against the aligned start of the data section and checks each range. */
static int place_tensors(parser *p) {
    gguf_file *f = p->f;
    uint64_t a = f->alignment;
    uint64_t section = p->pos + (a - p->pos % a) % a; /* pos <= size, so this cannot overflow */
    for (size_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t rel = t->data_offset, start, end;
        focus_tensor(p, t);
        if (rel % a)
            return fail(p, "data offset %llu is not a multiple of the alignment %llu", (ull)rel, (ull)a);
        if (!nc_add_u64(section, rel, &start) || !nc_add_u64(start, t->n_bytes, &end))
            return fail(p, "data offset %llu (%llu bytes) overflows 64 bits", (ull)rel, (ull)t->n_bytes);
        if (end > f->size)
            return fail(p, "data [%llu, %llu) extends past the end of the file (%llu bytes)", (ull)start, (ull)end,
                        (ull)f->size);
        t->data_offset = start;
        t->data = f->base + start;
    }
    /* A file without tensors (a vocabulary) may end before the padding: keep the section inside
     * the file so that size - data_offset never wraps. */
    f->data_offset = section < f->size ? section : f->size;
    return check_overlaps(p);
}

static int parse(gguf_file *f, nc_err *err) {
    parser p = {.f = f, .err = err};
    uint64_t n_tensors, n_kv;
    if (read_header(&p, &n_tensors, &n_kv) || read_kvs(&p, n_kv) || apply_alignment(&p)) return -1;
    f->kv_end = p.pos;
    p.kind = NULL;
    if (read_tensor_table(&p, n_tensors)) return -1;
    return place_tensors(&p);
}

/* ---- opening and closing ------------------------------------------------------------------ */

static gguf_file *file_new(const char *name, nc_err *err) {
    gguf_file *f = calloc(1, sizeof *f);
    if (f && !(f->path = strdup(name))) {
        free(f);
        f = NULL;
    }
    if (!f) nc_fail(err, "%s: out of memory", name);
    return f;
}

int gguf_open_buffer(gguf_file **out, const void *data, size_t size, const char *name, nc_err *err) {
    *out = NULL;
    gguf_file *f = file_new(name ? name : "<buffer>", err);
    if (!f) return -1;
    f->base = data;
    f->size = data ? size : 0;
    if (parse(f, err)) {
        gguf_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

int gguf_open(gguf_file **out, const char *path, nc_err *err) {
    *out = NULL;
    const void *data;
    size_t size;
    void *map;
    if (fmt_map(path, &data, &size, &map, err)) return -1;
    gguf_file *f = file_new(path, err);
    if (!f) {
        fmt_unmap(map, size);
        return -1;
    }
    f->base = data;
    f->size = size;
    f->map = map;
    if (parse(f, err)) {
        gguf_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kvs[i];
        free((char *)kv->key);
        if (kv->type == GGUF_T_ARRAY && kv->v.arr.type == GGUF_T_STRING) free((gguf_str *)kv->v.arr.strs);
    }
    for (size_t i = 0; i < f->n_tensors; i++) free((char *)f->tensors[i].name);
    free(f->kvs);
    free(f->tensors);
    index_free(&f->kv_index);
    index_free(&f->tensor_index);
    fmt_unmap(f->map, f->size);
    free(f->path);
    free(f);
}

/* ---- accessors ----------------------------------------------------------------------------- */

const char *gguf_path(const gguf_file *f) { return f->path; }
uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint64_t gguf_file_size(const gguf_file *f) { return f->size; }
uint32_t gguf_alignment(const gguf_file *f) { return f->alignment; }
uint64_t gguf_data_offset(const gguf_file *f) { return f->data_offset; }

size_t gguf_n_kv(const gguf_file *f) { return f->n_kv; }
const gguf_kv *gguf_kv_at(const gguf_file *f, size_t i) { return i < f->n_kv ? &f->kvs[i] : NULL; }
const uint8_t *gguf_kv_bytes(const gguf_file *f, size_t i, uint64_t *len) {
    if (i >= f->n_kv) return NULL;
    uint64_t end = i + 1 < f->n_kv ? f->kvs[i + 1].offset : f->kv_end;
    *len = end - f->kvs[i].offset;
    return f->base + f->kvs[i].offset;
}
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    long i = index_find(&f->kv_index, key);
    return i < 0 ? NULL : &f->kvs[i];
}

size_t gguf_n_tensors(const gguf_file *f) { return f->n_tensors; }
const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i) { return i < f->n_tensors ? &f->tensors[i] : NULL; }
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    long i = index_find(&f->tensor_index, name);
    return i < 0 ? NULL : &f->tensors[i];
}

/* ---- typed getters ------------------------------------------------------------------------- */

static void type_desc(const gguf_kv *kv, char *buf, size_t cap) {
    if (kv->type == GGUF_T_ARRAY) snprintf(buf, cap, "array of %s", gguf_vtype_name(kv->v.arr.type));
    else snprintf(buf, cap, "%s", gguf_vtype_name(kv->type));
}

static int wrong_type(const gguf_file *f, const gguf_kv *kv, const char *expected, nc_err *err) {
    char key[96], have[40];
    type_desc(kv, have, sizeof have);
    return nc_fail(err, "%s: key '%s' at offset %llu has type %s, expected %s", f->path,
                   shown(key, sizeof key, kv->key, strlen(kv->key)), (ull)kv->offset, have, expected);
}

static int out_of_range(const gguf_file *f, const gguf_kv *kv, const char *value, const char *range, nc_err *err) {
    char key[96];
    return nc_fail(err, "%s: key '%s' at offset %llu has value %s, out of range for %s", f->path,
                   shown(key, sizeof key, kv->key, strlen(kv->key)), (ull)kv->offset, value, range);
}

int gguf_get_int(const gguf_file *f, const char *key, int64_t *out, nc_err *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (kv->type == GGUF_T_BOOL) *out = kv->v.b;
    else if (kv->type == GGUF_T_UINT8 || kv->type == GGUF_T_UINT16 || kv->type == GGUF_T_UINT32 ||
             kv->type == GGUF_T_UINT64) {
        if (kv->v.u > (uint64_t)INT64_MAX) {
            char v[24];
            snprintf(v, sizeof v, "%llu", (ull)kv->v.u);
            return out_of_range(f, kv, v, "int64", err);
        }
        *out = (int64_t)kv->v.u;
    } else if (vtype_is_int(kv->type)) *out = kv->v.i;
    else return wrong_type(f, kv, "an integer", err);
    return 1;
}

int gguf_get_uint32(const gguf_file *f, const char *key, uint32_t *out, nc_err *err) {
    int64_t v;
    int r = gguf_get_int(f, key, &v, err);
    if (r <= 0) return r;
    if (v < 0 || v > (int64_t)UINT32_MAX) {
        char s[24];
        snprintf(s, sizeof s, "%lld", (long long)v);
        return out_of_range(f, gguf_find_kv(f, key), s, "uint32", err);
    }
    *out = (uint32_t)v;
    return 1;
}

int gguf_get_float(const gguf_file *f, const char *key, double *out, nc_err *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (vtype_is_float(kv->type)) *out = kv->v.f;
    else if (kv->type == GGUF_T_UINT8 || kv->type == GGUF_T_UINT16 || kv->type == GGUF_T_UINT32 ||
             kv->type == GGUF_T_UINT64)
        *out = (double)kv->v.u;
    else if (vtype_is_int(kv->type)) *out = (double)kv->v.i;
    else return wrong_type(f, kv, "a number", err);
    return 1;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out, nc_err *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_T_BOOL) return wrong_type(f, kv, "bool", err);
    *out = kv->v.b;
    return 1;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, nc_err *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_T_STRING) return wrong_type(f, kv, "string", err);
    *out = kv->v.s;
    return 1;
}

/* Element types a caller asking for elem can read with gguf_arr_int / gguf_arr_float / gguf_arr_str. */
static bool elem_compatible(gguf_vtype have, gguf_vtype want) {
    if (vtype_is_int(want)) return vtype_is_int(have);
    if (vtype_is_float(want)) return vtype_is_int(have) || vtype_is_float(have);
    return have == want;
}

int gguf_get_arr(const gguf_file *f, const char *key, gguf_vtype elem, const gguf_kv **out, nc_err *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_T_ARRAY || !elem_compatible(kv->v.arr.type, elem)) {
        char want[40];
        const char *what = vtype_is_int(elem) ? "integer" : vtype_is_float(elem) ? "number" : gguf_vtype_name(elem);
        snprintf(want, sizeof want, "an array of %s", what);
        return wrong_type(f, kv, want, err);
    }
    *out = kv;
    return 1;
}

/* Element i of a numeric array as raw bytes, or false when i is out of range. */
static bool arr_elem(const gguf_kv *kv, uint64_t i, uint64_t *raw) {
    if (kv->type != GGUF_T_ARRAY) return false;
    uint64_t n = scalar_bytes(kv->v.arr.type);
    if (n == 0 || i >= kv->v.arr.n) return false;
    *raw = load_raw((const uint8_t *)kv->v.arr.data + i * n, n);
    return true;
}

int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i) {
    uint64_t raw;
    if (!arr_elem(kv, i, &raw)) return 0;
    switch (kv->v.arr.type) {
    case GGUF_T_INT8: return (int8_t)raw;
    case GGUF_T_INT16: return (int16_t)raw;
    case GGUF_T_INT32: return (int32_t)raw;
    case GGUF_T_FLOAT32: case GGUF_T_FLOAT64: return 0;
    default: return (int64_t)raw; /* unsigned types and bool; UINT64 above INT64_MAX wraps */
    }
}

double gguf_arr_float(const gguf_kv *kv, uint64_t i) {
    uint64_t raw;
    if (!arr_elem(kv, i, &raw)) return 0;
    if (kv->v.arr.type == GGUF_T_FLOAT32) {
        float x;
        uint32_t r32 = (uint32_t)raw;
        memcpy(&x, &r32, 4);
        return x;
    }
    if (kv->v.arr.type == GGUF_T_FLOAT64) {
        double x;
        memcpy(&x, &raw, 8);
        return x;
    }
    if (kv->v.arr.type == GGUF_T_UINT64) return (double)raw;
    return (double)gguf_arr_int(kv, i);
}

gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i) {
    if (kv->type != GGUF_T_ARRAY || kv->v.arr.type != GGUF_T_STRING || i >= kv->v.arr.n) return (gguf_str){"", 0};
    return kv->v.arr.strs[i];
}

/* ---- names and strings --------------------------------------------------------------------- */

const char *gguf_vtype_name(gguf_vtype t) {
    static const char *const names[] = {"uint8",  "int8", "uint16", "int16",  "uint32", "int32",  "float32",
                                        "bool",   "string", "array", "uint64", "int64", "float64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

bool gguf_str_eq(gguf_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && memcmp(s.data, cstr, n) == 0;
}

/* Length of the well-formed UTF-8 sequence of 2..4 bytes at s, or 0 when there is none. */
static size_t utf8_seq_len(const uint8_t *s, uint64_t avail) {
    size_t n;
    uint8_t lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (s[0] >= 0xc2 && s[0] <= 0xdf) n = 2;
    else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        n = 3;
        if (s[0] == 0xe0) lo = 0xa0;      /* overlong */
        else if (s[0] == 0xed) hi = 0x9f; /* surrogates */
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        n = 4;
        if (s[0] == 0xf0) lo = 0x90;      /* overlong */
        else if (s[0] == 0xf4) hi = 0x8f; /* above U+10FFFF */
    } else return 0;
    if (avail < n || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    return n;
}

uint64_t gguf_escape(char *dst, size_t cap, gguf_str s) {
    if (cap == 0) return 0;
    const uint8_t *b = (const uint8_t *)s.data;
    size_t w = 0;
    uint64_t i = 0;
    while (i < s.len) {
        char tmp[8];
        size_t tn, adv = 1;
        uint8_t c = b[i];
        if (c == '"' || c == '\\') tn = (size_t)snprintf(tmp, sizeof tmp, "\\%c", c);
        else if (c == '\n') tn = (size_t)snprintf(tmp, sizeof tmp, "\\n");
        else if (c == '\t') tn = (size_t)snprintf(tmp, sizeof tmp, "\\t");
        else if (c == '\r') tn = (size_t)snprintf(tmp, sizeof tmp, "\\r");
        else if (c >= 0x20 && c < 0x7f) tmp[0] = (char)c, tn = 1;
        else if ((adv = utf8_seq_len(b + i, s.len - i)) > 0) memcpy(tmp, b + i, adv), tn = adv;
        else adv = 1, tn = (size_t)snprintf(tmp, sizeof tmp, "\\x%02x", c);
        if (w + tn >= cap) break;
        memcpy(dst + w, tmp, tn);
        w += tn;
        i += adv;
    }
    dst[w] = 0;
    return i;
}
