/* GGUF reader: files built in memory by a small writer (every value type, nested arrays, custom
 * alignment, v2 and v3), the shared real models (facts read off with an independent script),
 * and one hostile file per validation rule, each checking the message names the right thing. */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/ggml_types.h"
#include "format/gguf.h"
#include "format/gguf_dump.h"
#include "test.h"

/* ---- a minimal GGUF writer ------------------------------------------------------------------ */

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
} wbuf;

static void w_bytes(wbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void w_u8(wbuf *b, uint8_t v) { w_bytes(b, &v, 1); }
static void w_u16(wbuf *b, uint16_t v) { w_bytes(b, &v, 2); }
static void w_u32(wbuf *b, uint32_t v) { w_bytes(b, &v, 4); }
static void w_u64(wbuf *b, uint64_t v) { w_bytes(b, &v, 8); }
static void w_f32(wbuf *b, float v) { w_bytes(b, &v, 4); }
static void w_f64(wbuf *b, double v) { w_bytes(b, &v, 8); }
static void w_strn(wbuf *b, const char *s, size_t n) { w_u64(b, n); w_bytes(b, s, n); }
static void w_str(wbuf *b, const char *s) { w_strn(b, s, strlen(s)); }
static void w_pad(wbuf *b, size_t align) { while (b->n % align) w_u8(b, 0); }

static void w_header(wbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    w_bytes(b, "GGUF", 4);
    w_u32(b, version);
    w_u64(b, n_tensors);
    w_u64(b, n_kv);
}

/* Starts a pair; returns its offset. */
static size_t w_key(wbuf *b, const char *key, uint32_t type) {
    size_t at = b->n;
    w_str(b, key);
    w_u32(b, type);
    return at;
}

static size_t w_tensor(wbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    size_t at = b->n;
    w_str(b, name);
    w_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) w_u64(b, ne[d]);
    w_u32(b, type);
    w_u64(b, off);
    return at;
}

static int open_buf(gguf_file **f, const wbuf *b, nc_err *err) {
    memset(err->msg, 0, sizeof err->msg);
    return gguf_open_buffer(f, b->p, b->n, "mem.gguf", err);
}

#define CHECK_HAS(msg, sub) CHECK_MSG(strstr((msg), (sub)) != NULL, "'%s' not in '%s'", (sub), (msg))

/* ---- the feature file ------------------------------------------------------------------------- */

static const float tensor_a[8] = {1, -2, 3.5f, 0.25f, 5, 6, 7, -8};

typedef struct feature_file {
    wbuf b;
    size_t off_u8, off_u64, off_i32, off_name, off_bin, off_tokens, off_align;
    size_t info_a, info_b, data_start;
} feature_file;

/* Every value type, nested arrays, string arrays, alignment 64, and two tensors; the last tensor
 * ends exactly at the end of the file so that any truncation must be refused. */
static void build_feature_file(feature_file *ff, uint32_t version) {
    wbuf *b = &ff->b;
    memset(ff, 0, sizeof *ff);
    w_header(b, version, 2, 21);
    ff->off_u8 = w_key(b, "t.u8", GGUF_T_UINT8), w_u8(b, 200);
    w_key(b, "t.i8", GGUF_T_INT8), w_u8(b, (uint8_t)-100);
    w_key(b, "t.u16", GGUF_T_UINT16), w_u16(b, 60000);
    w_key(b, "t.i16", GGUF_T_INT16), w_u16(b, (uint16_t)-30000);
    w_key(b, "t.u32", GGUF_T_UINT32), w_u32(b, 4000000000u);
    ff->off_i32 = w_key(b, "t.i32", GGUF_T_INT32), w_u32(b, (uint32_t)-2000000000);
    w_key(b, "t.f32", GGUF_T_FLOAT32), w_f32(b, 0.5f);
    w_key(b, "t.bool", GGUF_T_BOOL), w_u8(b, 1);
    ff->off_name = w_key(b, "general.name", GGUF_T_STRING), w_str(b, "hello \"world\"");
    ff->off_u64 = w_key(b, "t.u64", GGUF_T_UINT64), w_u64(b, (1ull << 63) + 5);
    w_key(b, "t.i64", GGUF_T_INT64), w_u64(b, (uint64_t)-(1ll << 62));
    w_key(b, "t.f64", GGUF_T_FLOAT64), w_f64(b, 3.25e100);
    ff->off_bin = w_key(b, "t.binary", GGUF_T_STRING), w_strn(b, "a\0b\xff\n", 5);
    w_key(b, "t.arr_u8", GGUF_T_ARRAY), w_u32(b, GGUF_T_UINT8), w_u64(b, 3), w_bytes(b, "\x01\x02\xfe", 3);
    w_key(b, "t.arr_i16", GGUF_T_ARRAY), w_u32(b, GGUF_T_INT16), w_u64(b, 2), w_u16(b, (uint16_t)-7), w_u16(b, 9);
    w_key(b, "t.arr_f32", GGUF_T_ARRAY), w_u32(b, GGUF_T_FLOAT32), w_u64(b, 2), w_f32(b, 1.5f), w_f32(b, -2.5f);
    ff->off_tokens = w_key(b, "t.tokens", GGUF_T_ARRAY);
    w_u32(b, GGUF_T_STRING), w_u64(b, 3), w_str(b, "a"), w_str(b, ""), w_str(b, "ccc");
    /* [[1, 2], [3]] of uint32 and [["x"], []] of strings */
    w_key(b, "t.nested", GGUF_T_ARRAY), w_u32(b, GGUF_T_ARRAY), w_u64(b, 2);
    w_u32(b, GGUF_T_UINT32), w_u64(b, 2), w_u32(b, 1), w_u32(b, 2);
    w_u32(b, GGUF_T_UINT32), w_u64(b, 1), w_u32(b, 3);
    w_key(b, "t.nested_str", GGUF_T_ARRAY), w_u32(b, GGUF_T_ARRAY), w_u64(b, 2);
    w_u32(b, GGUF_T_STRING), w_u64(b, 1), w_str(b, "x");
    w_u32(b, GGUF_T_STRING), w_u64(b, 0);
    w_key(b, "t.empty", GGUF_T_ARRAY), w_u32(b, GGUF_T_INT32), w_u64(b, 0);
    ff->off_align = w_key(b, "general.alignment", GGUF_T_UINT32), w_u32(b, 64);
    ff->info_a = w_tensor(b, "a", 2, (const uint64_t[]){4, 2}, 0, 0);
    ff->info_b = w_tensor(b, "blk.0.b", 2, (const uint64_t[]){32, 3}, 8, 64);
    w_pad(b, 64);
    ff->data_start = b->n;
    w_bytes(b, tensor_a, sizeof tensor_a);
    w_pad(b, 64);
    for (int i = 0; i < 3 * 34; i++) w_u8(b, (uint8_t)i);
}

static void test_feature_values(uint32_t version) {
    feature_file ff;
    build_feature_file(&ff, version);
    gguf_file *f;
    nc_err err;
    CHECK_MSG(open_buf(&f, &ff.b, &err) == 0, "%s", err.msg);
    if (!f) return;
    CHECK(gguf_version(f) == version);
    CHECK(gguf_n_kv(f) == 21);
    CHECK(gguf_n_tensors(f) == 2);
    CHECK(gguf_alignment(f) == 64);
    CHECK(gguf_file_size(f) == ff.b.n);
    CHECK(gguf_data_offset(f) == ff.data_start);
    CHECK(ff.data_start % 64 == 0);
    CHECK(strcmp(gguf_path(f), "mem.gguf") == 0);

    const gguf_kv *kv = gguf_find_kv(f, "t.u8");
    CHECK(kv && kv->type == GGUF_T_UINT8 && kv->v.u == 200 && kv->offset == ff.off_u8);
    CHECK(gguf_kv_at(f, 0) == kv && gguf_kv_at(f, 21) == NULL);
    kv = gguf_find_kv(f, "t.i8");
    CHECK(kv && kv->type == GGUF_T_INT8 && kv->v.i == -100);
    kv = gguf_find_kv(f, "t.u16");
    CHECK(kv && kv->v.u == 60000);
    kv = gguf_find_kv(f, "t.i16");
    CHECK(kv && kv->v.i == -30000);
    kv = gguf_find_kv(f, "t.u32");
    CHECK(kv && kv->v.u == 4000000000u);
    kv = gguf_find_kv(f, "t.i32");
    CHECK(kv && kv->v.i == -2000000000);
    kv = gguf_find_kv(f, "t.f32");
    CHECK(kv && kv->type == GGUF_T_FLOAT32 && kv->v.f == 0.5);
    kv = gguf_find_kv(f, "t.bool");
    CHECK(kv && kv->type == GGUF_T_BOOL && kv->v.b);
    kv = gguf_find_kv(f, "t.u64");
    CHECK(kv && kv->v.u == (1ull << 63) + 5);
    kv = gguf_find_kv(f, "t.i64");
    CHECK(kv && kv->v.i == -(1ll << 62));
    kv = gguf_find_kv(f, "t.f64");
    CHECK(kv && kv->type == GGUF_T_FLOAT64 && kv->v.f == 3.25e100);
    kv = gguf_find_kv(f, "t.binary");
    CHECK(kv && kv->v.s.len == 5 && memcmp(kv->v.s.data, "a\0b\xff\n", 5) == 0);
    CHECK(gguf_find_kv(f, "t.missing") == NULL);
    CHECK(gguf_find_kv(f, "t.u") == NULL);

    kv = gguf_find_kv(f, "t.arr_u8");
    CHECK(kv && kv->v.arr.type == GGUF_T_UINT8 && kv->v.arr.n == 3);
    if (kv) CHECK(gguf_arr_int(kv, 0) == 1 && gguf_arr_int(kv, 2) == 254 && gguf_arr_float(kv, 1) == 2.0);
    kv = gguf_find_kv(f, "t.arr_i16");
    if (kv) CHECK(gguf_arr_int(kv, 0) == -7 && gguf_arr_int(kv, 1) == 9);
    kv = gguf_find_kv(f, "t.arr_f32");
    if (kv) CHECK(gguf_arr_float(kv, 0) == 1.5 && gguf_arr_float(kv, 1) == -2.5);
    kv = gguf_find_kv(f, "t.tokens");
    CHECK(kv && kv->v.arr.type == GGUF_T_STRING && kv->v.arr.n == 3 && kv->offset == ff.off_tokens);
    if (kv) {
        CHECK(gguf_str_eq(gguf_arr_str(kv, 0), "a"));
        CHECK(gguf_str_eq(gguf_arr_str(kv, 1), ""));
        CHECK(gguf_str_eq(gguf_arr_str(kv, 2), "ccc"));
        CHECK(gguf_arr_str(kv, 3).len == 0); /* out of range */
    }
    kv = gguf_find_kv(f, "t.nested");
    CHECK(kv && kv->v.arr.type == GGUF_T_ARRAY && kv->v.arr.n == 2);
    kv = gguf_find_kv(f, "t.nested_str");
    CHECK(kv && kv->v.arr.type == GGUF_T_ARRAY && kv->v.arr.n == 2);
    kv = gguf_find_kv(f, "t.empty");
    CHECK(kv && kv->v.arr.type == GGUF_T_INT32 && kv->v.arr.n == 0);

    const gguf_tensor *t = gguf_find_tensor(f, "a");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 4 && t->ne[1] == 2 && t->ne[2] == 1 && t->ne[3] == 1);
    if (t) {
        CHECK(t->type == GGML_TYPE_F32 && t->n_elems == 8 && t->n_bytes == 32);
        CHECK(t->info_offset == ff.info_a && t->data_offset == ff.data_start);
        CHECK(memcmp(t->data, tensor_a, sizeof tensor_a) == 0);
        CHECK(t->data == ff.b.p + ff.data_start);
    }
    t = gguf_find_tensor(f, "blk.0.b");
    CHECK(t && gguf_tensor_at(f, 1) == t && gguf_tensor_at(f, 2) == NULL);
    if (t) {
        CHECK(t->type == GGML_TYPE_Q8_0 && t->n_elems == 96 && t->n_bytes == 102);
        CHECK(t->info_offset == ff.info_b && t->data_offset == ff.data_start + 64);
        CHECK(((const uint8_t *)t->data)[101] == 101);
        CHECK(t->data_offset + t->n_bytes == ff.b.n);
    }
    CHECK(gguf_find_tensor(f, "blk.0") == NULL);
    gguf_close(f);
    free(ff.b.p);
}

static void test_getters(void) {
    feature_file ff;
    build_feature_file(&ff, 3);
    gguf_file *f;
    nc_err err;
    if (open_buf(&f, &ff.b, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    char want[160];
    int64_t i;
    uint32_t u;
    double d;
    bool bl;
    gguf_str s;
    const gguf_kv *kv;

    CHECK(gguf_get_int(f, "t.u8", &i, &err) == 1 && i == 200);
    CHECK(gguf_get_int(f, "t.i64", &i, &err) == 1 && i == -(1ll << 62));
    CHECK(gguf_get_int(f, "t.bool", &i, &err) == 1 && i == 1);
    CHECK(gguf_get_int(f, "nope", &i, &err) == 0);
    CHECK(gguf_get_int(f, "t.u64", &i, &err) == -1);
    snprintf(want, sizeof want, "key 't.u64' at offset %zu", ff.off_u64);
    CHECK_HAS(err.msg, want);
    CHECK_HAS(err.msg, "out of range");
    CHECK(gguf_get_int(f, "general.name", &i, &err) == -1);
    snprintf(want, sizeof want, "key 'general.name' at offset %zu has type string, expected an integer", ff.off_name);
    CHECK_HAS(err.msg, want);

    CHECK(gguf_get_uint32(f, "t.u32", &u, &err) == 1 && u == 4000000000u);
    CHECK(gguf_get_uint32(f, "t.u16", &u, &err) == 1 && u == 60000);
    CHECK(gguf_get_uint32(f, "t.i32", &u, &err) == -1);
    snprintf(want, sizeof want, "key 't.i32' at offset %zu has value -2000000000, out of range for uint32", ff.off_i32);
    CHECK_HAS(err.msg, want);
    CHECK(gguf_get_uint32(f, "nope", &u, &err) == 0);

    CHECK(gguf_get_float(f, "t.f32", &d, &err) == 1 && d == 0.5);
    CHECK(gguf_get_float(f, "t.f64", &d, &err) == 1 && d == 3.25e100);
    CHECK(gguf_get_float(f, "t.i32", &d, &err) == 1 && d == -2000000000.0);
    CHECK(gguf_get_float(f, "t.u64", &d, &err) == 1 && d == 9223372036854775813.0);
    CHECK(gguf_get_float(f, "t.tokens", &d, &err) == -1);
    CHECK_HAS(err.msg, "has type array of string, expected a number");

    CHECK(gguf_get_bool(f, "t.bool", &bl, &err) == 1 && bl);
    CHECK(gguf_get_bool(f, "t.u8", &bl, &err) == -1);
    CHECK_HAS(err.msg, "has type uint8, expected bool");

    CHECK(gguf_get_str(f, "general.name", &s, &err) == 1 && gguf_str_eq(s, "hello \"world\""));
    CHECK(gguf_get_str(f, "t.binary", &s, &err) == 1 && s.len == 5);
    CHECK(gguf_get_str(f, "t.f32", &s, &err) == -1);
    CHECK_HAS(err.msg, "mem.gguf: key 't.f32' at offset");
    CHECK_HAS(err.msg, "has type float32, expected string");

    CHECK(gguf_get_arr(f, "t.arr_u8", GGUF_T_INT32, &kv, &err) == 1 && kv->v.arr.n == 3);
    CHECK(gguf_get_arr(f, "t.arr_i16", GGUF_T_UINT32, &kv, &err) == 1);
    CHECK(gguf_get_arr(f, "t.arr_f32", GGUF_T_FLOAT32, &kv, &err) == 1);
    CHECK(gguf_get_arr(f, "t.arr_u8", GGUF_T_FLOAT32, &kv, &err) == 1); /* integers read as numbers */
    CHECK(gguf_get_arr(f, "t.tokens", GGUF_T_STRING, &kv, &err) == 1 && kv->v.arr.n == 3);
    CHECK(gguf_get_arr(f, "nope", GGUF_T_STRING, &kv, &err) == 0);
    CHECK(gguf_get_arr(f, "t.arr_f32", GGUF_T_INT32, &kv, &err) == -1);
    CHECK_HAS(err.msg, "has type array of float32, expected an array of integer");
    CHECK(gguf_get_arr(f, "t.tokens", GGUF_T_INT32, &kv, &err) == -1);
    snprintf(want, sizeof want, "key 't.tokens' at offset %zu has type array of string", ff.off_tokens);
    CHECK_HAS(err.msg, want);
    CHECK(gguf_get_arr(f, "t.u8", GGUF_T_UINT8, &kv, &err) == -1);
    CHECK_HAS(err.msg, "has type uint8, expected an array of integer");
    gguf_close(f);
    free(ff.b.p);
}

/* Every proper prefix of a valid file must be refused (its last tensor ends at the end). */
static void test_every_truncation(void) {
    feature_file ff;
    build_feature_file(&ff, 3);
    int accepted = 0, unnamed = 0;
    for (size_t n = 0; n < ff.b.n; n++) {
        gguf_file *f;
        nc_err err = {{0}};
        if (gguf_open_buffer(&f, ff.b.p, n, "cut.gguf", &err) == 0) {
            accepted++;
            gguf_close(f);
        } else if (strncmp(err.msg, "cut.gguf: ", 10) != 0 || f != NULL) unnamed++;
    }
    CHECK_MSG(accepted == 0, "%d truncated files accepted", accepted);
    CHECK_MSG(unnamed == 0, "%d messages without the file name", unnamed);
    free(ff.b.p);
}

static void test_dump_built(void) {
    feature_file ff;
    build_feature_file(&ff, 2);
    gguf_file *f;
    nc_err err;
    if (open_buf(&f, &ff.b, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    CHECK(gguf_dump(f, out) == 0);
    fclose(out);
    char want[200];
    snprintf(want, sizeof want,
             "mem.gguf: GGUF version 2, 21 keys, 2 tensors, alignment 64, data offset %zu, file size %zu\n",
             ff.data_start, ff.b.n);
    CHECK_HAS(text, want);
    CHECK_HAS(text, "  array    [string x 3] \"a\", \"\", \"ccc\"\n");
    CHECK_HAS(text, "  string   \"hello \\\"world\\\"\"\n");
    CHECK_HAS(text, "  string   \"a\\x00b\\xff\\n\"\n");
    CHECK_HAS(text, "  uint64   9223372036854775813\n");
    CHECK_HAS(text, "  int8     -100\n");
    CHECK_HAS(text, "  float64  3.25e+100\n");
    CHECK_HAS(text, "  bool     true\n");
    CHECK_HAS(text, "[uint8 x 3] 1, 2, 254\n");
    CHECK_HAS(text, "[float32 x 2] 1.5, -2.5\n");
    CHECK_HAS(text, "[array x 2] ...\n");
    CHECK_HAS(text, "[int32 x 0]\n");
    CHECK_HAS(text, "Q8_0     [32, 3]");
    snprintf(want, sizeof want, "  F32      %-22s  %12d  %12zu\n", "[4, 2]", 32, ff.data_start);
    CHECK_HAS(text, want);
    CHECK_HAS(text, "total: 2 tensors, 104 elements, 134 bytes of data\n");
    free(text);
    gguf_close(f);
    free(ff.b.p);
}

static void test_escape(void) {
    char buf[64];
    CHECK(gguf_escape(buf, sizeof buf, (gguf_str){"a\"b\\c\n\t\r", 8}) == 8);
    CHECK(strcmp(buf, "a\\\"b\\\\c\\n\\t\\r") == 0);
    CHECK(gguf_escape(buf, sizeof buf, (gguf_str){"\xe2\x96\x81the\x01\xff", 8}) == 8);
    CHECK(strcmp(buf, "\xe2\x96\x81the\\x01\\xff") == 0);
    /* a cut UTF-8 sequence and an overlong encoding are escaped byte by byte */
    CHECK(gguf_escape(buf, sizeof buf, (gguf_str){"\xe2\x96", 2}) == 2 && strcmp(buf, "\\xe2\\x96") == 0);
    CHECK(gguf_escape(buf, sizeof buf, (gguf_str){"\xc0\xaf", 2}) == 2 && strcmp(buf, "\\xc0\\xaf") == 0);
    CHECK(gguf_escape(buf, 6, (gguf_str){"abcdefgh", 8}) == 5 && strcmp(buf, "abcde") == 0);
    CHECK(gguf_escape(buf, 4, (gguf_str){"a\x01", 2}) == 1 && strcmp(buf, "a") == 0);
    CHECK(gguf_escape(buf, 1, (gguf_str){"abc", 3}) == 0 && buf[0] == 0);
}

static void test_type_table(void) {
    static const struct { uint32_t id; const char *name; uint32_t elems, bytes; } known[] = {
        {0, "F32", 1, 4},        {1, "F16", 1, 2},        {2, "Q4_0", 32, 18},    {3, "Q4_1", 32, 20},
        {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},     {8, "Q8_0", 32, 34},    {9, "Q8_1", 32, 36},
        {10, "Q2_K", 256, 84},   {11, "Q3_K", 256, 110},  {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
        {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292},  {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
        {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50}, {20, "IQ4_NL", 32, 18}, {21, "IQ3_S", 256, 110},
        {22, "IQ2_S", 256, 82},  {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},       {25, "I16", 1, 2},
        {26, "I32", 1, 4},       {27, "I64", 1, 8},       {28, "F64", 1, 8},      {29, "IQ1_M", 256, 56},
        {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},  {35, "TQ2_0", 256, 66}, {39, "MXFP4", 32, 17},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        const ggml_type_info *t = ggml_type_get(known[i].id);
        CHECK_MSG(t && strcmp(t->name, known[i].name) == 0 && t->block_elems == known[i].elems &&
                      t->block_bytes == known[i].bytes,
                  "type %u", known[i].id);
    }
    static const uint32_t unknown[] = {4, 5, 31, 32, 33, 36, 37, 38, 40, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) CHECK(ggml_type_get(unknown[i]) == NULL);
    char buf[24];
    CHECK(strcmp(ggml_type_name(12, buf), "Q4_K") == 0);
    CHECK(strcmp(ggml_type_name(77, buf), "type 77") == 0);
    CHECK(strcmp(ggml_type_name(UINT32_MAX, buf), "type 4294967295") == 0);
}

/* ---- hostile files --------------------------------------------------------------------------- */

/* Parses b, expecting failure with every substring given (NULL-terminated list). */
static void expect_fail(const wbuf *b, const char *what, ...) {
    gguf_file *f;
    nc_err err;
    if (open_buf(&f, b, &err) == 0) {
        CHECK_MSG(0, "%s: accepted", what);
        gguf_close(f);
        return;
    }
    CHECK_MSG(f == NULL, "%s: out not NULL", what);
    va_list ap;
    va_start(ap, what);
    for (const char *sub; (sub = va_arg(ap, const char *));)
        CHECK_MSG(strstr(err.msg, sub) != NULL, "%s: '%s' not in '%s'", what, sub, err.msg);
    va_end(ap);
}

static void test_bad_headers(void) {
    wbuf b = {0};
    w_header(&b, 3, 0, 0);
    b.p[3] = 'X';
    expect_fail(&b, "magic", "mem.gguf: header: bad magic \"GGUX\" at offset 0", NULL);
    b.p[3] = 'F';
    memcpy(b.p + 4, &(uint32_t){1}, 4);
    expect_fail(&b, "v1", "GGUF version 1 (at offset 4) is not supported", NULL);
    memcpy(b.p + 4, &(uint32_t){4}, 4);
    expect_fail(&b, "v4", "unsupported GGUF version 4 at offset 4", NULL);
    memcpy(b.p + 4, &(uint32_t){0x03000000}, 4);
    expect_fail(&b, "big-endian", "big-endian GGUF (version 3 at offset 4)", NULL);
    memcpy(b.p + 4, &(uint32_t){3}, 4);
    b.n = 10;
    expect_fail(&b, "truncated header", "header: truncated file: tensor count at offset 8 needs 8 bytes but the file ends at 10",
                NULL);
    b.n = 2;
    expect_fail(&b, "2 bytes", "magic at offset 0 needs 4 bytes but the file ends at 2", NULL);
    b.n = 0;
    expect_fail(&b, "0 bytes", "magic at offset 0 needs 4 bytes but the file ends at 0", NULL);

    b.n = 0;
    w_header(&b, 3, 0, 1ull << 60);
    w_key(&b, "k", GGUF_T_UINT8), w_u8(&b, 1);
    expect_fail(&b, "huge kv count", "key/value count 1152921504606846976 (at offset 16)", NULL);
    b.n = 0;
    w_header(&b, 3, 1ull << 60, 1);
    w_key(&b, "k", GGUF_T_UINT8), w_u8(&b, 1);
    expect_fail(&b, "huge tensor count", "tensor count 1152921504606846976 (at offset 8)", NULL);
    /* a count that fits the header check but not what is left after the metadata */
    b.n = 0;
    w_header(&b, 3, 1, 1);
    w_key(&b, "k", GGUF_T_STRING), w_str(&b, "a string long enough to pass the first tensor check");
    expect_fail(&b, "tensor count after kvs", "tensor count 1 (at offset 8)", "after the metadata (at offset 96)",
                NULL);
    free(b.p);
}

static void test_bad_metadata(void) {
    wbuf b = {0};
    w_header(&b, 3, 0, 1);
    w_u64(&b, 1ull << 60), w_bytes(&b, "key and more padding bytes", 26);
    expect_fail(&b, "huge key length", "key #0 (entry at offset 24): key length 1152921504606846976 (at offset 24) "
                                       "exceeds the 26 bytes left in the file",
                NULL);

    b.n = 0;
    w_header(&b, 3, 0, 2);
    w_key(&b, "a", GGUF_T_UINT8), w_u8(&b, 1);
    w_key(&b, "s", GGUF_T_STRING), w_u64(&b, 1ull << 60), w_bytes(&b, "xx", 2);
    expect_fail(&b, "huge string", "key 's' (entry at offset 38): string value length 1152921504606846976 (at offset 51)",
                NULL);

    b.n = 0;
    w_header(&b, 3, 0, 2);
    w_key(&b, "a", GGUF_T_UINT8), w_u8(&b, 1);
    w_key(&b, "weird", 13), w_u64(&b, 0);
    expect_fail(&b, "unknown type", "key 'weird' (entry at offset 38): unknown value type 13 at offset 51", NULL);

    b.n = 0;
    w_header(&b, 3, 0, 1);
    w_key(&b, "arr", GGUF_T_ARRAY), w_u32(&b, 99), w_u64(&b, 0);
    expect_fail(&b, "unknown elem type", "key 'arr' (entry at offset 24): unknown array element type 99 at offset 39",
                NULL);

    b.n = 0;
    w_header(&b, 3, 0, 1);
    w_key(&b, "arr", GGUF_T_ARRAY), w_u32(&b, GGUF_T_UINT32), w_u64(&b, 1ull << 40), w_u32(&b, 7);
    expect_fail(&b, "huge array", "key 'arr'", "array of 1099511627776 uint32 elements (header at offset 39)", NULL);

    b.n = 0;
    w_header(&b, 3, 0, 1);
    w_key(&b, "arr", GGUF_T_ARRAY), w_u32(&b, GGUF_T_STRING), w_u64(&b, 2), w_str(&b, "ok"), w_u64(&b, 99);
    expect_fail(&b, "string elem past end", "key 'arr'", "string element length 99 (at offset 61)", NULL);

    b.n = 0; /* arrays nested 9 deep */
    w_header(&b, 3, 0, 1);
    w_key(&b, "deep", GGUF_T_ARRAY);
    for (int i = 0; i < 9; i++) w_u32(&b, GGUF_T_ARRAY), w_u64(&b, 1);
    w_u32(&b, GGUF_T_UINT8), w_u64(&b, 0);
    expect_fail(&b, "deep nesting", "key 'deep'", "arrays nested deeper than 8 levels", NULL);

    b.n = 0;
    w_header(&b, 3, 0, 1);
    w_key(&b, "flag", GGUF_T_BOOL), w_u8(&b, 2);
    expect_fail(&b, "bool 2", "key 'flag' (entry at offset 24): bool value 2 at offset 40 is neither 0 nor 1", NULL);

    b.n = 0;
    w_header(&b, 3, 0, 1);
    w_key(&b, "flags", GGUF_T_ARRAY), w_u32(&b, GGUF_T_BOOL), w_u64(&b, 3), w_bytes(&b, "\x01\x02\x00", 3);
    expect_fail(&b, "bool array", "key 'flags' (entry at offset 24): bool array element 1 at offset 54 has value 2",
                NULL);

    b.n = 0;
    w_header(&b, 3, 0, 1);
    w_key(&b, "", GGUF_T_UINT8), w_u8(&b, 0), w_u8(&b, 0); /* 14 bytes: what one pair needs at least */
    expect_fail(&b, "empty key", "key #0 (entry at offset 24): empty key at offset 24", NULL);

    b.n = 0;
    w_header(&b, 3, 0, 1);
    w_strn(&b, "a\0b", 3), w_u32(&b, GGUF_T_UINT8), w_u8(&b, 0);
    expect_fail(&b, "NUL in key", "key at offset 24 contains a NUL byte", NULL);

    b.n = 0;
    w_header(&b, 3, 0, 3);
    size_t first = w_key(&b, "dup", GGUF_T_UINT8);
    w_u8(&b, 1);
    w_key(&b, "other", GGUF_T_UINT8), w_u8(&b, 1);
    size_t second = w_key(&b, "dup", GGUF_T_STRING);
    w_str(&b, "x");
    char want[160];
    snprintf(want, sizeof want, "key 'dup' (entry at offset %zu): duplicate key (first defined at offset %zu)", second,
             first);
    expect_fail(&b, "duplicate key", want, NULL);

    uint64_t aligns[] = {3, 0, 96};
    for (int i = 0; i < 3; i++) {
        b.n = 0;
        w_header(&b, 3, 0, 2);
        w_key(&b, "a", GGUF_T_UINT8), w_u8(&b, 1);
        w_key(&b, "general.alignment", GGUF_T_UINT32), w_u32(&b, (uint32_t)aligns[i]);
        snprintf(want, sizeof want,
                 "key 'general.alignment' (entry at offset 38): alignment %llu is not a nonzero power of two",
                 (unsigned long long)aligns[i]);
        expect_fail(&b, "bad alignment", want, NULL);
    }
    b.n = 0;
    w_header(&b, 3, 0, 1);
    w_key(&b, "general.alignment", GGUF_T_UINT64), w_u64(&b, 32);
    expect_fail(&b, "alignment type", "key 'general.alignment' (entry at offset 24): has type uint64, expected uint32",
                NULL);
    free(b.p);
}

/* A file with one key and the given tensor entries; returns the offset of entry k via info[k]. */
typedef struct tdesc {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[5];
    uint32_t type;
    uint64_t off;
} tdesc;

static void build_tensors(wbuf *b, const tdesc *t, int n, size_t *info, size_t data_bytes) {
    b->n = 0;
    w_header(b, 3, (uint64_t)n, 1);
    w_key(b, "general.architecture", GGUF_T_STRING), w_str(b, "llama");
    for (int i = 0; i < n; i++) info[i] = w_tensor(b, t[i].name, t[i].n_dims, t[i].ne, t[i].type, t[i].off);
    w_pad(b, 32);
    for (size_t i = 0; i < data_bytes; i++) w_u8(b, 0);
}

static void expect_tensor_fail(const tdesc *t, int n, int bad, size_t data_bytes, const char *problem) {
    wbuf b = {0};
    size_t info[4];
    char want[200];
    build_tensors(&b, t, n, info, data_bytes);
    snprintf(want, sizeof want, "mem.gguf: tensor '%s' (table entry at offset %zu): ", t[bad].name, info[bad]);
    expect_fail(&b, problem, want, problem, NULL);
    free(b.p);
}

static void test_bad_tensors(void) {
    /* the valid baseline: two F32 tensors of 64 bytes; entries start at offset 69 */
    tdesc ok[2] = {{"w1", 2, {4, 4}, 0, 0}, {"w2", 1, {16}, 0, 64}};
    wbuf b = {0};
    size_t info[4];
    build_tensors(&b, ok, 2, info, 128);
    gguf_file *f;
    nc_err err;
    CHECK_MSG(open_buf(&f, &b, &err) == 0, "%s", err.msg);
    gguf_close(f);
    CHECK(info[0] == 69);
    size_t data_start = b.n - 128;
    free(b.p);

    tdesc t[2];
    char msg[200];
    memcpy(t, ok, sizeof t);
    t[1].name = "w1";
    snprintf(msg, sizeof msg, "duplicate tensor name (first entry at offset %zu)", info[0]);
    expect_tensor_fail(t, 2, 1, 128, msg);

    memcpy(t, ok, sizeof t);
    t[1].type = 4;
    snprintf(msg, sizeof msg, "unknown ggml type 4 at offset %zu", info[1] + 8 + 2 + 4 + 8);
    expect_tensor_fail(t, 2, 1, 128, msg);

    memcpy(t, ok, sizeof t);
    t[0].ne[1] = 0;
    snprintf(msg, sizeof msg, "dimension 1 is 0 (at offset %zu)", info[0] + 8 + 2 + 4 + 8);
    expect_tensor_fail(t, 2, 0, 128, msg);

    memcpy(t, ok, sizeof t);
    t[1] = (tdesc){"w2", 5, {1, 1, 1, 1, 16}, 0, 64};
    snprintf(msg, sizeof msg, "dimension count 5 at offset %zu is outside 1..4", info[1] + 8 + 2);
    expect_tensor_fail(t, 2, 1, 128, msg);
    t[1].n_dims = 0;
    snprintf(msg, sizeof msg, "dimension count 0 at offset %zu is outside 1..4", info[1] + 8 + 2);
    expect_tensor_fail(t, 2, 1, 128, msg);

    memcpy(t, ok, sizeof t);
    t[0] = (tdesc){"q", 2, {33, 2}, GGML_TYPE_Q8_0, 0};
    expect_tensor_fail(t, 2, 0, 128, "row length 33 is not a multiple of the Q8_0 block size 32");

    memcpy(t, ok, sizeof t);
    t[0] = (tdesc){"big", 3, {1ull << 32, 1ull << 31, 2}, 0, 0};
    snprintf(msg, sizeof msg, "element count overflows at dimension 1 (2147483648, at offset %zu)",
             info[0] + 8 + 3 + 4 + 8);
    expect_tensor_fail(t, 2, 0, 128, msg);
    t[0] = (tdesc){"big", 2, {1ull << 32, 1ull << 32}, 0, 0};
    expect_tensor_fail(t, 2, 0, 128, "element count overflows at dimension 1");
    t[0] = (tdesc){"big", 1, {1ull << 62}, 0, 0};
    expect_tensor_fail(t, 2, 0, 128, "byte size of 4611686018427387904 F32 elements overflows");

    memcpy(t, ok, sizeof t);
    t[1].off = 68;
    expect_tensor_fail(t, 2, 1, 128, "data offset 68 is not a multiple of the alignment 32");

    memcpy(t, ok, sizeof t);
    t[1].off = 96;
    snprintf(msg, sizeof msg, "data [%zu, %zu) extends past the end of the file (%zu bytes)", data_start + 96,
             data_start + 160, data_start + 128);
    expect_tensor_fail(t, 2, 1, 128, msg);
    t[1].off = UINT64_MAX - 31;
    expect_tensor_fail(t, 2, 1, 128, "overflows 64 bits");

    memcpy(t, ok, sizeof t);
    t[1].off = 32;
    snprintf(msg, sizeof msg, "data [%zu, %zu) overlaps the data [%zu, %zu) of tensor 'w1'", data_start + 32,
             data_start + 96, data_start, data_start + 64);
    expect_tensor_fail(t, 2, 1, 128, msg);
    t[1].off = 0; /* the same start: the later entry is the one reported */
    expect_tensor_fail(t, 2, 1, 128, "overlaps the data");

    memcpy(t, ok, sizeof t);
    t[0].name = "";
    snprintf(msg, sizeof msg, "empty tensor name at offset %zu", info[0]);
    b = (wbuf){0};
    build_tensors(&b, t, 2, info, 128);
    expect_fail(&b, "empty tensor name", "tensor #0 (table entry at offset 69)", msg, NULL);
    free(b.p);
}

static void test_open_paths(void) {
    gguf_file *f;
    nc_err err;
    CHECK(gguf_open(&f, "/nonexistent/x.gguf", &err) == -1 && f == NULL);
    CHECK_HAS(err.msg, "/nonexistent/x.gguf: cannot open");
    CHECK(gguf_open(&f, "/tmp", &err) == -1);
    CHECK_HAS(err.msg, "/tmp: a directory, not a regular file");
    /* a FIFO is refused before anything waits on it for a writer */
    char fifo[] = "/tmp/test_gguf_fifo_XXXXXX";
    int ffd = mkstemp(fifo);
    CHECK(ffd >= 0 && close(ffd) == 0 && unlink(fifo) == 0 && mkfifo(fifo, 0600) == 0);
    CHECK(gguf_open(&f, fifo, &err) == -1 && f == NULL);
    CHECK_HAS(err.msg, "a FIFO, not a regular file");
    unlink(fifo);

    char path[] = "/tmp/test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    CHECK(gguf_open(&f, path, &err) == -1);
    CHECK_HAS(err.msg, ": header: truncated file: magic at offset 0 needs 4 bytes but the file ends at 0");

    feature_file ff;
    build_feature_file(&ff, 3);
    CHECK(write(fd, ff.b.p, ff.b.n) == (ssize_t)ff.b.n);
    close(fd);
    CHECK_MSG(gguf_open(&f, path, &err) == 0, "%s", err.msg);
    if (f) {
        const gguf_tensor *t = gguf_find_tensor(f, "a");
        CHECK(strcmp(gguf_path(f), path) == 0);
        CHECK(t && memcmp(t->data, tensor_a, sizeof tensor_a) == 0);
        gguf_close(f);
    }
    unlink(path);
    free(ff.b.p);
}

/* ---- the shared real files ------------------------------------------------------------------ */

static const char *shared_dir(void) {
    const char *s = getenv("SHARED");
    return s && *s ? s : "../shared";
}

static gguf_file *open_shared(const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", shared_dir(), rel);
    gguf_file *f = NULL;
    nc_err err;
    CHECK_MSG(gguf_open(&f, path, &err) == 0, "%s", err.msg);
    return f;
}

static void check_tensor(const gguf_file *f, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1,
                         uint64_t info_off, uint64_t data_off, uint64_t n_bytes) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    CHECK_MSG(t != NULL, "tensor %s", name);
    if (!t) return;
    CHECK_MSG(t->type == type && t->ne[0] == ne0 && t->ne[1] == ne1 && t->n_dims == (ne1 > 1 ? 2u : 1u),
              "%s: type %u dims %llu x %llu", name, t->type, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1]);
    CHECK_MSG(t->info_offset == info_off && t->data_offset == data_off && t->n_bytes == n_bytes,
              "%s: info %llu data %llu bytes %llu", name, (unsigned long long)t->info_offset,
              (unsigned long long)t->data_offset, (unsigned long long)t->n_bytes);
}

static void test_stories260k(void) {
    gguf_file *f = open_shared("models/stories260K/stories260K.gguf");
    if (!f) return;
    nc_err err;
    gguf_str s;
    uint32_t u;
    double d;
    const gguf_kv *kv;
    CHECK(gguf_version(f) == 3 && gguf_n_kv(f) == 19 && gguf_n_tensors(f) == 48);
    CHECK(gguf_alignment(f) == 32 && gguf_data_offset(f) == 14176 && gguf_file_size(f) == 1185376);
    CHECK(gguf_get_str(f, "general.architecture", &s, &err) == 1 && gguf_str_eq(s, "llama"));
    CHECK(gguf_find_kv(f, "general.architecture")->offset == 10705);
    CHECK(gguf_get_uint32(f, "llama.embedding_length", &u, &err) == 1 && u == 64);
    CHECK(gguf_get_uint32(f, "llama.block_count", &u, &err) == 1 && u == 5);
    CHECK(gguf_get_uint32(f, "llama.feed_forward_length", &u, &err) == 1 && u == 172);
    CHECK(gguf_get_uint32(f, "llama.attention.head_count_kv", &u, &err) == 1 && u == 4);
    CHECK(gguf_get_uint32(f, "tokenizer.ggml.seperator_token_id", &u, &err) == 1 && u == UINT32_MAX);
    CHECK(gguf_get_float(f, "llama.attention.layer_norm_rms_epsilon", &d, &err) == 1);
    CHECK_NEAR(d, 1e-5, 1e-12);
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_T_STRING, &kv, &err) == 1);
    if (kv) {
        CHECK(kv->v.arr.n == 512 && kv->offset == 24);
        CHECK(gguf_str_eq(gguf_arr_str(kv, 0), "<unk>") && gguf_str_eq(gguf_arr_str(kv, 1), "<s>"));
        CHECK(gguf_str_eq(gguf_arr_str(kv, 2), "</s>") && gguf_str_eq(gguf_arr_str(kv, 3), "<0x00>"));
    }
    CHECK(gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_T_INT32, &kv, &err) == 1);
    if (kv) CHECK(kv->v.arr.n == 512 && gguf_arr_int(kv, 0) == 2 && gguf_arr_int(kv, 1) == 3 && gguf_arr_int(kv, 3) == 6);
    check_tensor(f, "token_embd.weight", GGML_TYPE_F32, 64, 512, 11347, 14176, 131072);
    check_tensor(f, "output_norm.weight", GGML_TYPE_F32, 64, 1, 11404, 14176 + 131072, 256);
    check_tensor(f, "blk.0.ffn_down.weight", GGML_TYPE_F32, 172, 64, 11863, 14176 + 355840, 44032);
    check_tensor(f, "blk.4.ffn_norm.weight", GGML_TYPE_F32, 64, 1, 14099, 14176 + 1170944, 256);
    CHECK(gguf_tensor_at(f, 3) == gguf_find_tensor(f, "blk.0.attn_q.weight"));
    const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    if (t) {
        float x[2];
        memcpy(x, t->data, sizeof x);
        CHECK_NEAR(x[0], -0.29474878311157227, 1e-7);
        CHECK_NEAR(x[1], 0.5618956089019775, 1e-7);
    }
    t = gguf_find_tensor(f, "blk.4.ffn_norm.weight");
    if (t) {
        float last;
        memcpy(&last, (const char *)t->data + 252, 4);
        CHECK_NEAR(last, 1.234261155128479, 1e-6);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    CHECK(gguf_dump(f, out) == 0);
    fclose(out);
    CHECK_HAS(text, "GGUF version 3, 19 keys, 48 tensors, alignment 32, data offset 14176, file size 1185376\n");
    CHECK_HAS(text, "tokenizer.ggml.tokens                   array    [string x 512] \"<unk>\", \"<s>\", \"</s>\", ...\n");
    CHECK_HAS(text, "llama.attention.layer_norm_rms_epsilon  float32  1e-05\n");
    CHECK_HAS(text, "[int32 x 512] 2, 3, 3, 6, 6, 6, 6, 6, ...\n");
    CHECK_HAS(text, "blk.0.ffn_down.weight     F32      [172, 64]                      44032        370016\n");
    free(text);
    gguf_close(f);
}

static void test_tinystories656k(void) {
    gguf_file *f = open_shared("models/tinystories-656k/TinyStories-656K-Q8_0.gguf");
    if (!f) return;
    nc_err err;
    gguf_str s;
    bool b;
    double d;
    const gguf_kv *kv;
    CHECK(gguf_version(f) == 3 && gguf_n_kv(f) == 34 && gguf_n_tensors(f) == 20);
    CHECK(gguf_data_offset(f) == 50848 && gguf_file_size(f) == 749728);
    CHECK(gguf_get_str(f, "general.name", &s, &err) == 1 && gguf_str_eq(s, "Raincandy U TinyStories 656K"));
    CHECK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b, &err) == 1 && b);
    CHECK(gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &b, &err) == 1 && !b);
    CHECK(gguf_get_float(f, "llama.rope.freq_base", &d, &err) == 1 && d == 10000.0);
    CHECK(gguf_get_arr(f, "general.languages", GGUF_T_STRING, &kv, &err) == 1 && kv->v.arr.n == 1);
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_T_STRING, &kv, &err) == 1);
    if (kv) {
        CHECK(kv->v.arr.n == 2048 && kv->offset == 1160);
        CHECK(gguf_str_eq(gguf_arr_str(kv, 1), "<|start_story|>") && gguf_str_eq(gguf_arr_str(kv, 3), "\n"));
    }
    CHECK(gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_T_FLOAT32, &kv, &err) == 1);
    if (kv) CHECK(gguf_arr_float(kv, 0) == -1000.0);
    check_tensor(f, "token_embd.weight", GGML_TYPE_Q8_0, 128, 2048, 49719, 50848 + 512, 278528);
    check_tensor(f, "blk.1.ffn_up.weight", GGML_TYPE_Q8_0, 128, 384, 50775, 50848 + 646656, 52224);
    check_tensor(f, "blk.0.ffn_down.weight", GGML_TYPE_Q8_0, 384, 128, 50071, 50848 + 331776, 52224);
    const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    if (t) CHECK(memcmp(t->data, "\xc8\x1f\xa6\xfd\x4e\xea", 6) == 0); /* fp16 scale, then -90, -3, 78, -22 */
    gguf_close(f);
}

static void test_vocab_only(void) {
    gguf_file *f = open_shared("vocab/llama-spm/ggml-vocab-llama-spm.gguf");
    if (!f) return;
    nc_err err;
    uint32_t u;
    const gguf_kv *kv;
    CHECK(gguf_n_tensors(f) == 0 && gguf_n_kv(f) == 22 && gguf_file_size(f) == 723869);
    /* the table ends at 723869 and the file has no padding: the section is clamped to the end */
    CHECK(gguf_data_offset(f) == 723869);
    CHECK(gguf_get_uint32(f, "llama.vocab_size", &u, &err) == 1 && u == 32000);
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_T_STRING, &kv, &err) == 1);
    if (kv) {
        CHECK(kv->v.arr.n == 32000 && kv->offset == 596);
        CHECK(gguf_str_eq(gguf_arr_str(kv, 13), "<0x0A>"));
        CHECK(gguf_str_eq(gguf_arr_str(kv, 29871), "\xe2\x96\x81"));
        CHECK(gguf_str_eq(gguf_arr_str(kv, 31999), "\xe7\xbb\x99"));
    }
    CHECK(gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_T_FLOAT32, &kv, &err) == 1 && kv->v.arr.n == 32000);
    CHECK(gguf_find_tensor(f, "token_embd.weight") == NULL && gguf_tensor_at(f, 0) == NULL);
    gguf_close(f);
}

int main(void) {
    test_type_table();
    test_escape();
    test_feature_values(3);
    test_feature_values(2);
    test_getters();
    test_every_truncation();
    test_dump_built();
    test_bad_headers();
    test_bad_metadata();
    test_bad_tensors();
    test_open_paths();
    test_stories260k();
    test_tinystories656k();
    test_vocab_only();
    return test_summary("gguf");
}
