/* The safetensors reader on files written here: valid ones (every dtype, scalars, empty tensors,
 * rank above 4, metadata, header padding) read back exactly, and every kind of corruption refused
 * with an error that names it (and the tensor and offset where there is one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/safetensors.h"
#include "test.h"

/* ---- writing files ------------------------------------------------------------------------- */

typedef struct blob {
    unsigned char *p;
    size_t n;
} blob;

/* 8-byte length, the header text (padded with spaces to a multiple of 8 when pad), data bytes
 * 0, 1, 2, ... (mod 251). */
static blob make(const char *header, size_t data_len, bool pad) {
    size_t h = strlen(header), hp = pad ? (h + 7) / 8 * 8 : h;
    blob b = {malloc(8 + hp + data_len + 1), 8 + hp + data_len};
    uint64_t n = hp;
    memcpy(b.p, &n, 8);
    memcpy(b.p + 8, header, h);
    memset(b.p + 8 + h, ' ', hp - h);
    for (size_t i = 0; i < data_len; i++) b.p[8 + hp + i] = (unsigned char)(i % 251);
    return b;
}

static st_file *open_blob(const blob *b, nc_err *err) {
    st_file *f = NULL;
    st_open_buffer(&f, b->p, b->n, "t.safetensors", err);
    return f;
}

/* The header must be refused with an error holding every needle (up to three). */
static void expect_error_blob(blob b, const char *what, const char *n1, const char *n2, const char *n3) {
    nc_err err = {{0}};
    st_file *f = open_blob(&b, &err);
    bool ok = !f && strncmp(err.msg, "t.safetensors: ", 15) == 0 && strstr(err.msg, n1) && (!n2 || strstr(err.msg, n2)) &&
              (!n3 || strstr(err.msg, n3));
    CHECK_MSG(ok, "%s: expected an error naming '%s'%s%s, got '%s'", what, n1, n2 ? " and " : "", n2 ? n2 : "",
              f ? "(opened)" : err.msg);
    st_close(f);
    free(b.p);
}

static void expect_error(const char *header, size_t data_len, const char *what, const char *n1, const char *n2,
                         const char *n3) {
    expect_error_blob(make(header, data_len, true), what, n1, n2, n3);
}

/* ---- valid files ----------------------------------------------------------------------------- */

#define VALID                                                                                            \
    "{\"__metadata__\": {\"format\": \"pt\", \"note\": \"x\"}, "                                            \
    "\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]}, "                          \
    "\"b\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [24, 32]}, "                           \
    "\"blk.0.x_blocks\": {\"dtype\": \"U8\", \"shape\": [3], \"data_offsets\": [32, 35]}, "                \
    "\"empty\": {\"dtype\": \"F16\", \"shape\": [0, 5], \"data_offsets\": [35, 35]}, "                     \
    "\"s\": {\"dtype\": \"I8\", \"shape\": [], \"data_offsets\": [35, 36], \"extra\": 1}, "                \
    "\"five\": {\"dtype\": \"F16\", \"shape\": [1, 2, 1, 3, 2], \"data_offsets\": [36, 60]}, "             \
    "\"f4\": {\"dtype\": \"F4\", \"shape\": [2, 2], \"data_offsets\": [60, 62]}}"

static void test_valid(void) {
    nc_err err;
    blob b = make(VALID, 62, true);
    st_file *f = open_blob(&b, &err);
    CHECK_MSG(f, "%s", err.msg);
    if (!f) {
        free(b.p);
        return;
    }
    uint64_t hl = st_header_len(f);
    CHECK(hl % 8 == 0 && st_data_offset(f) == 8 + hl && st_file_size(f) == b.n && st_n_tensors(f) == 7);
    CHECK(st_n_metadata(f) == 2 && strcmp(st_metadata(f, "format"), "pt") == 0 && !st_metadata(f, "w"));
    const char *k, *val;
    CHECK(st_metadata_at(f, 1, &k, &val) == 0 && strcmp(k, "note") == 0 && strcmp(val, "x") == 0);
    CHECK(st_metadata_at(f, 2, &k, &val) == -1);

    const st_tensor *w = st_find_tensor(f, "w");
    CHECK(w && w == st_tensor_at(f, 0) && strcmp(w->t.name, "w") == 0);
    if (w) {
        CHECK(w->dtype == ST_F32 && w->t.type == 0 && w->rank == 2 && w->t.n_dims == 2);
        CHECK(w->t.ne[0] == 3 && w->t.ne[1] == 2 && w->t.ne[2] == 1 && w->t.ne[3] == 1);
        CHECK(w->t.n_elems == 6 && w->t.n_bytes == 24 && w->t.data_offset == 8 + hl);
        CHECK(w->t.data == b.p + 8 + hl && memcmp(w->t.data, b.p + 8 + hl, 24) == 0);
        /* info_offset: the key "w" in the header text */
        CHECK(w->t.info_offset > 8 && memcmp(b.p + w->t.info_offset, "\"w\"", 3) == 0);
    }
    const st_tensor *t = st_find_tensor(f, "b");
    CHECK(t && t->dtype == ST_BF16 && t->t.type == 30 && t->t.ne[0] == 4 && t->t.n_bytes == 8 &&
          t->t.data_offset == 8 + hl + 24 && ((const unsigned char *)t->t.data)[0] == 24);
    CHECK(t && memcmp(b.p + t->t.info_offset, "\"b\"", 3) == 0);
    t = st_find_tensor(f, "blk.0.x_blocks");
    char buf[24];
    CHECK(t && t->dtype == ST_U8 && t->t.type == ST_TYPE_BASE + ST_U8 && strcmp(st_type_name(t->t.type, buf), "U8") == 0);
    t = st_find_tensor(f, "empty");
    CHECK(t && t->t.n_elems == 0 && t->t.n_bytes == 0 && t->t.ne[0] == 5 && t->t.ne[1] == 0 && t->rank == 2);
    t = st_find_tensor(f, "s");
    CHECK(t && t->rank == 0 && t->t.n_dims == 1 && t->t.ne[0] == 1 && t->t.n_elems == 1 && t->t.type == 24);
    t = st_find_tensor(f, "five"); /* [1, 2, 1, 3, 2]: ne = 2, 3, 1, 1*2 */
    CHECK(t && t->rank == 5 && t->t.n_dims == 4 && t->t.ne[0] == 2 && t->t.ne[1] == 3 && t->t.ne[2] == 1 &&
          t->t.ne[3] == 2 && t->t.n_elems == 12 && t->shape[4] == 2);
    t = st_find_tensor(f, "f4");
    CHECK(t && t->dtype == ST_F4 && t->t.n_bytes == 2 && strcmp(st_type_name(t->t.type, buf), "F4") == 0);
    CHECK(!st_find_tensor(f, "__metadata__") && !st_find_tensor(f, "nope") && !st_find_tensor(f, NULL));
    CHECK(!st_tensor_at(f, 7));
    st_close(f);
    free(b.p);

    /* unpadded header, no metadata, no tensors at all */
    b = make("{}", 0, false);
    f = open_blob(&b, &err);
    CHECK_MSG(f && st_n_tensors(f) == 0 && st_n_metadata(f) == 0, "%s", f ? "" : err.msg);
    st_close(f);
    free(b.p);
}

static void test_dtypes(void) {
    static const struct {
        const char *name;
        uint32_t bits, type;
    } want[] = {{"BOOL", 8, ST_TYPE_BASE + ST_BOOL}, {"F4", 4, ST_TYPE_BASE + ST_F4},
                {"F6_E2M3", 6, ST_TYPE_BASE + ST_F6_E2M3}, {"F6_E3M2", 6, ST_TYPE_BASE + ST_F6_E3M2},
                {"U8", 8, ST_TYPE_BASE + ST_U8}, {"I8", 8, 24}, {"F8_E5M2", 8, ST_TYPE_BASE + ST_F8_E5M2},
                {"F8_E4M3", 8, ST_TYPE_BASE + ST_F8_E4M3}, {"F8_E8M0", 8, ST_TYPE_BASE + ST_F8_E8M0},
                {"I16", 16, 25}, {"U16", 16, ST_TYPE_BASE + ST_U16}, {"F16", 16, 1}, {"BF16", 16, 30},
                {"I32", 32, 26}, {"U32", 32, ST_TYPE_BASE + ST_U32}, {"F32", 32, 0},
                {"C64", 64, ST_TYPE_BASE + ST_C64}, {"F64", 64, 28}, {"I64", 64, 27},
                {"U64", 64, ST_TYPE_BASE + ST_U64}};
    CHECK(sizeof want / sizeof want[0] == ST_N_DTYPES);
    for (int d = 0; d < ST_N_DTYPES; d++) {
        char buf[24];
        CHECK_MSG(strcmp(st_dtype_name((st_dtype)d), want[d].name) == 0 && st_dtype_bits((st_dtype)d) == want[d].bits &&
                      st_dtype_type((st_dtype)d) == want[d].type && st_dtype_from_name(want[d].name) == d &&
                      strcmp(st_type_name(want[d].type, buf), want[d].name) == 0,
                  "dtype %s", want[d].name);
        /* a one-tensor file of each dtype: 24 elements are whole bytes for every size */
        char header[200];
        uint64_t bytes = 24ull * want[d].bits / 8;
        snprintf(header, sizeof header, "{\"t\": {\"dtype\": \"%s\", \"shape\": [4, 6], \"data_offsets\": [0, %llu]}}",
                 want[d].name, (unsigned long long)bytes);
        blob b = make(header, bytes, true);
        nc_err err;
        st_file *f = open_blob(&b, &err);
        CHECK_MSG(f && st_tensor_at(f, 0)->dtype == (st_dtype)d && st_tensor_at(f, 0)->t.n_bytes == bytes, "%s: %s",
                  want[d].name, f ? "" : err.msg);
        st_close(f);
        free(b.p);
    }
    char buf[24];
    CHECK(!st_dtype_name(ST_N_DTYPES) && st_dtype_from_name("f32") == -1 && st_dtype_from_name(NULL) == -1);
    CHECK(strcmp(st_type_name(12, buf), "Q4_K") == 0 && strcmp(st_type_name(9999, buf), "type 9999") == 0);
}

/* ---- corruption -------------------------------------------------------------------------------- */

#define T1(dtype, shape, offs) "{\"a\": {\"dtype\": " dtype ", \"shape\": " shape ", \"data_offsets\": " offs "}}"

static void test_header_errors(void) {
    /* the length prefix */
    blob b = {malloc(4), 4};
    memset(b.p, 0, 4);
    expect_error_blob(b, "truncated prefix", "4 bytes, too short for the 8-byte header length", NULL, NULL);
    b = make("{}", 0, false);
    uint64_t n = 1000;
    memcpy(b.p, &n, 8);
    expect_error_blob(b, "length past the end", "header length 1000 (at offset 0) exceeds the 2 bytes", "truncated", NULL);
    b = make("{}", 0, false);
    n = 200000000;
    memcpy(b.p, &n, 8);
    expect_error_blob(b, "length over the limit", "header length 200000000", "more than the 100000000 allowed", NULL);
    b = make("{}", 0, false);
    n = 0;
    memcpy(b.p, &n, 8);
    expect_error_blob(b, "zero length", "too short for a JSON object", NULL, NULL);
    /* the JSON */
    expect_error("{\"a\": {\"dtype\": \"F32\",, }", 0, "bad JSON", "malformed JSON at offset", NULL, NULL);
    expect_error("[1, 2]", 0, "not an object", "not an object", NULL, NULL);
    expect_error_blob(make("{} x", 0, false), "garbage after the JSON", "unexpected byte 0x78 at offset 11", NULL, NULL);
    expect_error("{\"a\xff\": 1}", 0, "invalid UTF-8", "byte 0xff at offset 11 is not valid UTF-8", NULL, NULL);
    expect_error("{\"__metadata__\": [1]}", 0, "metadata not an object", "\"__metadata__\"", "is not an object", NULL);
    expect_error("{\"__metadata__\": {\"k\": 1}}", 0, "metadata value not a string", "value of 'k' is not a string", NULL,
                 NULL);
    expect_error("{\"__metadata__\": {}, \"__metadata__\": {}}", 0, "metadata twice", "appears twice", NULL, NULL);
}

static void test_entry_errors(void) {
    expect_error("{\"a\": 5}", 0, "entry not an object", "tensor 'a' (header entry at offset 9)", "not an object", NULL);
    expect_error("{\"\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}}", 4, "empty name",
                 "empty tensor name", NULL, NULL);
    expect_error(T1("\"F128\"", "[1]", "[0, 16]"), 16, "unknown dtype", "tensor 'a'", "unknown dtype 'F128'", NULL);
    expect_error(T1("32", "[1]", "[0, 4]"), 4, "dtype not a string", "\"dtype\" is not a string", NULL, NULL);
    expect_error("{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "no dtype", "no \"dtype\"", NULL, NULL);
    expect_error(T1("\"F32\"", "5", "[0, 4]"), 4, "shape not an array", "\"shape\" is not an array", NULL, NULL);
    expect_error(T1("\"F32\"", "[2, -1]", "[0, 4]"), 4, "negative dim", "shape[1] is not a whole number", NULL, NULL);
    expect_error(T1("\"F32\"", "[1.5]", "[0, 4]"), 4, "fractional dim", "shape[0] is not a whole number", NULL, NULL);
    expect_error(T1("\"F32\"", "[1,1,1,1,1,1,1,1,1]", "[0, 4]"), 4, "rank 9", "9 dimensions, more than the 8", NULL, NULL);
    expect_error(T1("\"F32\"", "[4294967296, 4294967296]", "[0, 4]"), 4, "element count overflow",
                 "the element count overflows", NULL, NULL);
    expect_error(T1("\"F64\"", "[1073741824, 1073741824]", "[0, 4]"), 4, "byte size overflow", "byte size overflows", NULL,
                 NULL);
    expect_error(T1("\"F4\"", "[3]", "[0, 2]"), 2, "sub-byte count", "3 elements of 4 bits are not a whole number of bytes",
                 NULL, NULL);
    expect_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "no offsets", "no \"data_offsets\"", NULL, NULL);
    expect_error(T1("\"F32\"", "[1]", "[0]"), 4, "one offset", "is not an array [begin, end]", NULL, NULL);
    expect_error(T1("\"F32\"", "[1]", "[0, \"4\"]"), 4, "offset a string", "are not whole numbers", NULL, NULL);
    expect_error(T1("\"F32\"", "[1]", "[8, 4]"), 8, "begin after end", "data_offsets [8, 4): begin is after end", NULL,
                 NULL);
    expect_error(T1("\"F32\"", "[2, 3]", "[0, 20]"), 20, "size mismatch", "shape [2, 3] of F32 is 24 bytes",
                 "data_offsets [0, 20) hold 20", NULL);
    expect_error(T1("\"F32\"", "[2]", "[0, 8]"), 4, "offsets outside", "extend past the data section (4 bytes",
                 NULL, NULL);
    expect_error("{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}, "
                 "\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [4, 8]}}",
                 8, "duplicate name", "tensor 'a' (header entry at offset 69)", "duplicate name (first defined at offset 9)",
                 NULL);
}

static void test_layout_errors(void) {
    expect_error("{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}, "
                 "\"b\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [2, 6]}}",
                 6, "overlap", "tensor 'b'", "data_offsets [2, 6) overlap the data [0, 4) of tensor 'a'", NULL);
    expect_error("{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}, "
                 "\"b\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [6, 10]}}",
                 10, "gap", "tensor 'b'", "leave a gap of 2 bytes", "after tensor 'a'");
    expect_error(T1("\"U8\"", "[4]", "[2, 6]"), 6, "gap at the start", "gap of 2 bytes", "at the start of the data section",
                 NULL);
    expect_error(T1("\"U8\"", "[4]", "[0, 4]"), 7, "trailing bytes", "3 bytes after the last tensor's data", NULL, NULL);
    /* the same range twice under two names overlaps too */
    expect_error("{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}, "
                 "\"b\": {\"dtype\": \"I8\", \"shape\": [2, 2], \"data_offsets\": [0, 4]}}",
                 4, "same range", "overlap the data [0, 4)", NULL, NULL);
}

/* Every prefix of a valid file is refused, never read past. */
static void test_truncations(void) {
    blob b = make(VALID, 62, true);
    int refused = 0;
    for (size_t n = 0; n < b.n; n++) {
        unsigned char *copy = malloc(n ? n : 1); /* exact size: ASan sees any read past it */
        memcpy(copy, b.p, n);
        st_file *f = NULL;
        nc_err err;
        if (st_open_buffer(&f, copy, n, "t.safetensors", &err) == -1 && !f) refused++;
        st_close(f);
        free(copy);
    }
    CHECK_MSG(refused == (int)b.n, "%d of %zu truncated files refused", refused, b.n);
    free(b.p);
}

/* ---- files on disk --------------------------------------------------------------------------- */

static void test_files(void) {
    char dir[] = "/tmp/nc_test_st_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "mkdtemp");
        return;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    blob b = make(VALID, 62, true);
    FILE *fp = fopen(path, "wb");
    CHECK(fp && fwrite(b.p, 1, b.n, fp) == b.n);
    if (fp) fclose(fp);
    nc_err err;
    st_file *f = NULL;
    CHECK_MSG(st_open(&f, path, &err) == 0, "%s", err.msg);
    if (f) {
        const st_tensor *w = st_find_tensor(f, "w");
        CHECK(strcmp(st_path(f), path) == 0 && w && memcmp(w->t.data, b.p + w->t.data_offset, w->t.n_bytes) == 0);
        st_close(f);
    }
    fp = fopen(path, "wb"); /* an empty file */
    if (fp) fclose(fp);
    CHECK(st_open(&f, path, &err) == -1 && strstr(err.msg, path) && strstr(err.msg, "0 bytes, too short"));
    CHECK(st_open(&f, dir, &err) == -1 && strstr(err.msg, "not a regular file"));
    remove(path);
    CHECK(st_open(&f, path, &err) == -1 && strstr(err.msg, "cannot open") && !f);
    rmdir(dir);
    free(b.p);
}

int main(void) {
    test_valid();
    test_dtypes();
    test_header_errors();
    test_entry_errors();
    test_layout_errors();
    test_truncations();
    test_files();
    return test_summary("safetensors");
}
