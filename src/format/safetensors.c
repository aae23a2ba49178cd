#include "format/safetensors.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/ggml_types.h"
#include "format/mapped.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the safetensors reader assumes a little-endian host");

/* JSON numbers are doubles: whole numbers up to 2^53 are exact, and no file is that large. */
#define MAX_JSON_INT 9007199254740992.0

typedef unsigned long long ull;

static const struct {
    const char *name;
    uint32_t bits;
    uint32_t type; /* the ggml id, or 0 for "none" (F32, id 0, is set explicitly) */
    int has_ggml;
} dtypes[ST_N_DTYPES] = {
    [ST_BOOL] = {"BOOL", 8, 0, 0},         [ST_F4] = {"F4", 4, 0, 0},
    [ST_F6_E2M3] = {"F6_E2M3", 6, 0, 0},   [ST_F6_E3M2] = {"F6_E3M2", 6, 0, 0},
    [ST_U8] = {"U8", 8, 0, 0},             [ST_I8] = {"I8", 8, 24, 1},
    [ST_F8_E5M2] = {"F8_E5M2", 8, 0, 0},   [ST_F8_E4M3] = {"F8_E4M3", 8, 0, 0},
    [ST_F8_E8M0] = {"F8_E8M0", 8, 0, 0},   [ST_I16] = {"I16", 16, 25, 1},
    [ST_U16] = {"U16", 16, 0, 0},          [ST_F16] = {"F16", 16, GGML_TYPE_F16, 1},
    [ST_BF16] = {"BF16", 16, GGML_TYPE_BF16, 1}, [ST_I32] = {"I32", 32, 26, 1},
    [ST_U32] = {"U32", 32, 0, 0},          [ST_F32] = {"F32", 32, GGML_TYPE_F32, 1},
    [ST_C64] = {"C64", 64, 0, 0},          [ST_F64] = {"F64", 64, 28, 1},
    [ST_I64] = {"I64", 64, 27, 1},         [ST_U64] = {"U64", 64, 0, 0},
};

const char *st_dtype_name(st_dtype d) { return (unsigned)d < ST_N_DTYPES ? dtypes[d].name : NULL; }
uint32_t st_dtype_bits(st_dtype d) { return (unsigned)d < ST_N_DTYPES ? dtypes[d].bits : 0; }

int st_dtype_from_name(const char *name) {
    for (int d = 0; d < ST_N_DTYPES; d++)
        if (name && strcmp(dtypes[d].name, name) == 0) return d;
    return -1;
}

uint32_t st_dtype_type(st_dtype d) {
    if ((unsigned)d >= ST_N_DTYPES) return ST_TYPE_BASE + ST_N_DTYPES;
    return dtypes[d].has_ggml ? dtypes[d].type : ST_TYPE_BASE + (uint32_t)d;
}

const char *st_type_name(uint32_t type, char buf[24]) {
    if (type >= ST_TYPE_BASE && type - ST_TYPE_BASE < ST_N_DTYPES) return dtypes[type - ST_TYPE_BASE].name;
    return ggml_type_name(type, buf);
}

/* ---- the file object -------------------------------------------------------------------- */

typedef struct meta_kv {
    const char *key, *value; /* strings of the parsed header */
} meta_kv;

struct st_file {
    char *path;
    const uint8_t *base;
    uint64_t size;
    void *map;           /* the mmapped file, or NULL for a caller's buffer */
    uint64_t header_len; /* N */
    cJSON *root;         /* the parsed header: tensor names and metadata point into it */
    st_tensor *tensors;
    size_t n_tensors;
    size_t *slots;       /* open addressing, name -> tensor index + 1; 0 = empty */
    size_t mask;
    meta_kv *meta;
    size_t n_meta;
};

/* Parser state, for messages: the tensor being read and where its key is. */
typedef struct parser {
    st_file *f;
    nc_err *err;
    const char *name;   /* NULL outside a tensor entry */
    uint64_t key_off;   /* file offset of that entry's key */
} parser;

static const char *shown(char *buf, size_t cap, const char *s) {
    size_t o = 0;
    for (; *s && o + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') o += (size_t)snprintf(buf + o, cap - o, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else buf[o++] = (char)c;
    }
    if (*s) o += (size_t)snprintf(buf + o, cap - o, "...");
    buf[o] = 0;
    return buf;
}

static int fail(const parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(const parser *p, const char *fmt, ...) {
    char msg[NC_ERR_MAX], name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p->name)
        return nc_fail(p->err, "%s: tensor '%s' (header entry at offset %llu): %s", p->f->path,
                       shown(name, sizeof name, p->name), (ull)p->key_off, msg);
    return nc_fail(p->err, "%s: header: %s", p->f->path, msg);
}

/* ---- name index --------------------------------------------------------------------------- */

static size_t hash_name(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return (size_t)h;
}

static size_t *slot_of(const st_file *f, const char *name) {
    size_t i = hash_name(name) & f->mask;
    while (f->slots[i] && strcmp(f->tensors[f->slots[i] - 1].t.name, name) != 0) i = (i + 1) & f->mask;
    return &f->slots[i];
}

/* ---- header text ------------------------------------------------------------------------- */

/* Offset of the first byte that is not well-formed UTF-8, or len. */
static size_t utf8_invalid_at(const uint8_t *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        size_t n;
        uint8_t lo = 0x80, hi = 0xbf;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xc2 && c <= 0xdf) n = 2;
        else if (c >= 0xe0 && c <= 0xef) {
            n = 3;
            if (c == 0xe0) lo = 0xa0;
            else if (c == 0xed) hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 4;
            if (c == 0xf0) lo = 0x90;
            else if (c == 0xf4) hi = 0x8f;
        } else return i;
        if (len - i < n || s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k < n; k++)
            if ((s[i + k] & 0xc0) != 0x80) return i;
        i += n;
    }
    return len;
}

/* The offsets (in the header text) of the top-level object's keys, in order. cJSON keeps an
 * object's members in text order, so the i-th key found here belongs to the i-th member. The
 * text has been parsed already, so this scan only tracks strings and nesting. */
static size_t *key_offsets(const char *s, size_t len, size_t n_keys) {
    size_t *offs = calloc(n_keys ? n_keys : 1, sizeof *offs), k = 0;
    if (!offs) return NULL;
    int depth = 0;
    bool expect_key = false;
    for (size_t i = 0; i < len && k < n_keys; i++) {
        char c = s[i];
        if (c == '"') {
            if (depth == 1 && expect_key) offs[k++] = i;
            expect_key = false;
            for (i++; i < len && s[i] != '"'; i++)
                if (s[i] == '\\') i++;
        } else if (c == '{' || c == '[') {
            depth++;
            expect_key = depth == 1 && c == '{';
        } else if (c == '}' || c == ']') depth--;
        else if (c == ',' && depth == 1) expect_key = true;
    }
    return offs;
}

static int parse_json(parser *p, cJSON **root) {
    st_file *f = p->f;
    const char *text = (const char *)f->base + 8;
    size_t n = (size_t)f->header_len;
    size_t bad = utf8_invalid_at((const uint8_t *)text, n);
    if (bad < n) return fail(p, "byte 0x%02x at offset %llu is not valid UTF-8", (uint8_t)text[bad], (ull)(8 + bad));
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts(text, n, &end, false);
    if (!*root) {
        size_t at = end && end >= text && end <= text + n ? (size_t)(end - text) : 0;
        return fail(p, "malformed JSON at offset %llu (byte %llu of the %llu-byte header)", (ull)(8 + at), (ull)at,
                    (ull)n);
    }
    /* Writers pad the header with spaces to a multiple of 8 bytes; nothing else may follow. */
    for (size_t i = (size_t)(end - text); i < n; i++)
        if (text[i] != ' ' && text[i] != '\t' && text[i] != '\n' && text[i] != '\r')
            return fail(p, "unexpected byte 0x%02x at offset %llu after the JSON object", (uint8_t)text[i],
                        (ull)(8 + i));
    if (!cJSON_IsObject(*root)) return fail(p, "the JSON is not an object (at offset 8)");
    return 0;
}

/* ---- entries -------------------------------------------------------------------------------- */

/* A JSON number that is a whole number in [0, 2^53]. */
static bool json_uint(const cJSON *x, uint64_t *out) {
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0) || x->valuedouble > MAX_JSON_INT) return false;
    double d = x->valuedouble;
    if (d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
}

static int read_metadata(parser *p, const cJSON *m) {
    st_file *f = p->f;
    if (!cJSON_IsObject(m)) return fail(p, "\"__metadata__\" (at offset %llu) is not an object", (ull)p->key_off);
    size_t n = (size_t)cJSON_GetArraySize(m);
    f->meta = calloc(n ? n : 1, sizeof *f->meta);
    if (!f->meta) return fail(p, "out of memory for %zu metadata entries", n);
    const cJSON *e;
    cJSON_ArrayForEach(e, m) {
        char key[96];
        if (!cJSON_IsString(e))
            return fail(p, "\"__metadata__\" (at offset %llu): value of '%s' is not a string", (ull)p->key_off,
                        shown(key, sizeof key, e->string));
        f->meta[f->n_meta++] = (meta_kv){e->string, e->valuestring};
    }
    return 0;
}

static void format_shape(char *buf, size_t cap, const st_tensor *t) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < t->rank && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%llu", d ? ", " : "", (ull)t->shape[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static int read_dtype(parser *p, const cJSON *entry, st_tensor *t) {
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    char s[64];
    if (!dt) return fail(p, "no \"dtype\"");
    if (!cJSON_IsString(dt)) return fail(p, "\"dtype\" is not a string");
    int d = st_dtype_from_name(dt->valuestring);
    if (d < 0) return fail(p, "unknown dtype '%s'", shown(s, sizeof s, dt->valuestring));
    t->dtype = (st_dtype)d;
    return 0;
}

static int read_shape(parser *p, const cJSON *entry, st_tensor *t) {
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    if (!sh) return fail(p, "no \"shape\"");
    if (!cJSON_IsArray(sh)) return fail(p, "\"shape\" is not an array");
    int rank = cJSON_GetArraySize(sh);
    if (rank > ST_MAX_DIMS) return fail(p, "shape has %d dimensions, more than the %d supported", rank, ST_MAX_DIMS);
    t->rank = (uint32_t)rank;
    uint32_t d = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, sh) {
        if (!json_uint(x, &t->shape[d])) return fail(p, "shape[%u] is not a whole number >= 0", d);
        d++;
    }
    return 0;
}

static int read_offsets(parser *p, const cJSON *entry, st_tensor *t) {
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    if (!off) return fail(p, "no \"data_offsets\"");
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return fail(p, "\"data_offsets\" is not an array [begin, end]");
    if (!json_uint(off->child, &t->begin) || !json_uint(off->child->next, &t->end))
        return fail(p, "\"data_offsets\" are not whole numbers >= 0");
    if (t->begin > t->end) return fail(p, "data_offsets [%llu, %llu): begin is after end", (ull)t->begin, (ull)t->end);
    return 0;
}

/* Element count and bytes from the shape and dtype (no overflow), checked against the offsets
 * and the data section. */
static int check_size(parser *p, st_tensor *t) {
    st_file *f = p->f;
    uint64_t n = 1, bits;
    char shape[160];
    format_shape(shape, sizeof shape, t);
    for (uint32_t d = 0; d < t->rank; d++)
        if (!nc_mul_u64(n, t->shape[d], &n) || n > (uint64_t)INT64_MAX)
            return fail(p, "shape %s: the element count overflows", shape);
    if (!nc_mul_u64(n, dtypes[t->dtype].bits, &bits))
        return fail(p, "shape %s of %s: the byte size overflows", shape, dtypes[t->dtype].name);
    if (bits % 8)
        return fail(p, "shape %s of %s: %llu elements of %u bits are not a whole number of bytes", shape,
                    dtypes[t->dtype].name, (ull)n, dtypes[t->dtype].bits);
    uint64_t bytes = bits / 8, section = f->size - 8 - f->header_len;
    if (t->end - t->begin != bytes)
        return fail(p, "shape %s of %s is %llu bytes but data_offsets [%llu, %llu) hold %llu", shape,
                    dtypes[t->dtype].name, (ull)bytes, (ull)t->begin, (ull)t->end, (ull)(t->end - t->begin));
    if (t->end > section)
        return fail(p, "data_offsets [%llu, %llu) extend past the data section (%llu bytes, file offsets %llu..%llu)",
                    (ull)t->begin, (ull)t->end, (ull)section, (ull)(8 + f->header_len), (ull)f->size);
    t->t.n_elems = n;
    t->t.n_bytes = bytes;
    return 0;
}

/* The generic description: ne[] is the shape reversed; a rank above 4 folds its leading
 * dimensions into ne[3] (n_elems stays right; no model tensor has such a rank). */
static void describe(st_file *f, st_tensor *t) {
    fmt_tensor *g = &t->t;
    g->n_dims = t->rank ? (t->rank < 4 ? t->rank : 4) : 1;
    for (int i = 0; i < 4; i++) g->ne[i] = 1;
    for (uint32_t i = 0; i < t->rank; i++) {
        uint32_t k = i < 4 ? i : 3;
        g->ne[k] *= t->shape[t->rank - 1 - i];
    }
    g->type = st_dtype_type(t->dtype);
    g->data_offset = 8 + f->header_len + t->begin;
    g->data = f->base + g->data_offset;
}

static int read_tensor(parser *p, const cJSON *entry, st_tensor *t) {
    st_file *f = p->f;
    t->t.name = entry->string;
    t->t.info_offset = p->key_off;
    if (!entry->string[0]) return fail(p, "empty tensor name");
    if (!cJSON_IsObject(entry)) return fail(p, "the entry is not an object");
    if (read_dtype(p, entry, t) || read_shape(p, entry, t) || read_offsets(p, entry, t) || check_size(p, t)) return -1;
    describe(f, t);
    size_t *slot = slot_of(f, t->t.name);
    if (*slot) {
        const st_tensor *first = &f->tensors[*slot - 1];
        return fail(p, "duplicate name (first defined at offset %llu)", (ull)first->t.info_offset);
    }
    *slot = (size_t)(t - f->tensors) + 1;
    return 0;
}

static int read_entries(parser *p) {
    st_file *f = p->f;
    size_t n = (size_t)cJSON_GetArraySize(f->root);
    size_t *offs = key_offsets((const char *)f->base + 8, (size_t)f->header_len, n);
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    f->slots = calloc(cap, sizeof *f->slots);
    f->mask = cap - 1;
    if (!offs || !f->tensors || !f->slots) {
        free(offs);
        return fail(p, "out of memory for %zu header entries", n);
    }
    size_t k = 0;
    int rc = 0;
    bool have_meta = false;
    for (const cJSON *e = f->root->child; e && rc == 0; e = e->next, k++) {
        p->key_off = 8 + offs[k];
        if (strcmp(e->string, "__metadata__") == 0) {
            if (have_meta) rc = fail(p, "\"__metadata__\" appears twice (at offset %llu)", (ull)p->key_off);
            have_meta = true;
            if (rc == 0) rc = read_metadata(p, e);
            continue;
        }
        p->name = e->string;
        rc = read_tensor(p, e, &f->tensors[f->n_tensors++]);
        p->name = NULL;
    }
    free(offs);
    return rc;
}

/* ---- layout of the data section --------------------------------------------------------------- */

static int cmp_by_offset(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* The tensors must tile the data section: sorted by offset, each begins where the previous one
 * ended, and the last ends at the end of the file. */
static int check_layout(parser *p) {
    st_file *f = p->f;
    uint64_t section = f->size - 8 - f->header_len;
    const st_tensor **order = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *order);
    if (!order) return fail(p, "out of memory for %zu tensors", f->n_tensors);
    for (size_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, f->n_tensors, sizeof *order, cmp_by_offset);
    uint64_t at = 0;
    const st_tensor *prev = NULL;
    int rc = 0;
    for (size_t i = 0; i < f->n_tensors && rc == 0; i++) {
        const st_tensor *t = order[i];
        char other[128];
        p->name = t->t.name;
        p->key_off = t->t.info_offset;
        if (t->begin < at)
            rc = fail(p, "data_offsets [%llu, %llu) overlap the data [%llu, %llu) of tensor '%s'", (ull)t->begin,
                      (ull)t->end, (ull)prev->begin, (ull)prev->end, shown(other, sizeof other, prev->t.name));
        else if (t->begin > at)
            rc = fail(p, "data_offsets [%llu, %llu) leave a gap of %llu bytes (file offsets %llu..%llu) %s%s%s",
                      (ull)t->begin, (ull)t->end, (ull)(t->begin - at), (ull)(8 + f->header_len + at),
                      (ull)(8 + f->header_len + t->begin), prev ? "after tensor '" : "at the start of the data section",
                      prev ? shown(other, sizeof other, prev->t.name) : "", prev ? "'" : "");
        at = t->end;
        prev = t;
    }
    p->name = NULL;
    free(order);
    if (rc == 0 && at != section)
        rc = fail(p, "%llu bytes after the last tensor's data (file offsets %llu..%llu) belong to no tensor",
                  (ull)(section - at), (ull)(8 + f->header_len + at), (ull)f->size);
    return rc;
}

static int parse(st_file *f, nc_err *err) {
    parser p = {.f = f, .err = err};
    if (f->size < 8)
        return fail(&p, "the file is %llu bytes, too short for the 8-byte header length", (ull)f->size);
    uint64_t n;
    memcpy(&n, f->base, 8);
    if (n > ST_MAX_HEADER)
        return fail(&p, "header length %llu (at offset 0) is more than the %llu allowed%s", (ull)n, (ull)ST_MAX_HEADER,
                    n > f->size ? " and than the file" : "");
    if (n > f->size - 8)
        return fail(&p, "header length %llu (at offset 0) exceeds the %llu bytes after it: truncated file", (ull)n,
                    (ull)(f->size - 8));
    if (n < 2) return fail(&p, "header length %llu (at offset 0) is too short for a JSON object", (ull)n);
    f->header_len = n;
    if (parse_json(&p, &f->root) || read_entries(&p)) return -1;
    return check_layout(&p);
}

/* ---- opening and closing ----------------------------------------------------------------------- */

static st_file *file_new(const char *name, nc_err *err) {
    st_file *f = calloc(1, sizeof *f);
    if (f && !(f->path = strdup(name))) {
        free(f);
        f = NULL;
    }
    if (!f) nc_fail(err, "%s: out of memory", name);
    return f;
}

int st_open_buffer(st_file **out, const void *data, size_t size, const char *name, nc_err *err) {
    *out = NULL;
    st_file *f = file_new(name ? name : "<buffer>", err);
    if (!f) return -1;
    f->base = data ? data : (const void *)"";
    f->size = data ? size : 0;
    if (parse(f, err)) {
        st_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

int st_open(st_file **out, const char *path, nc_err *err) {
    *out = NULL;
    const void *data;
    size_t size;
    void *map;
    if (fmt_map(path, &data, &size, &map, err)) return -1;
    st_file *f = file_new(path, err);
    if (!f) {
        fmt_unmap(map, size);
        return -1;
    }
    f->base = data;
    f->size = size;
    f->map = map;
    if (parse(f, err)) {
        st_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

void st_close(st_file *f) {
    if (!f) return;
    cJSON_Delete(f->root);
    free(f->tensors);
    free(f->slots);
    free(f->meta);
    fmt_unmap(f->map, f->size);
    free(f->path);
    free(f);
}

/* ---- accessors ----------------------------------------------------------------------------------- */

const char *st_path(const st_file *f) { return f->path; }
uint64_t st_file_size(const st_file *f) { return f->size; }
uint64_t st_header_len(const st_file *f) { return f->header_len; }
uint64_t st_data_offset(const st_file *f) { return 8 + f->header_len; }

size_t st_n_tensors(const st_file *f) { return f->n_tensors; }
const st_tensor *st_tensor_at(const st_file *f, size_t i) { return i < f->n_tensors ? &f->tensors[i] : NULL; }
const st_tensor *st_find_tensor(const st_file *f, const char *name) {
    if (!name || !f->slots) return NULL;
    size_t *slot = slot_of(f, name);
    return *slot ? &f->tensors[*slot - 1] : NULL;
}

size_t st_n_metadata(const st_file *f) { return f->n_meta; }
int st_metadata_at(const st_file *f, size_t i, const char **key, const char **value) {
    if (i >= f->n_meta) return -1;
    if (key) *key = f->meta[i].key;
    if (value) *value = f->meta[i].value;
    return 0;
}
const char *st_metadata(const st_file *f, const char *key) {
    for (size_t i = 0; key && i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}
