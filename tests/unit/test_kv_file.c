/* KV cache files (src/kv/kv_file*.c, nc_kv_seq_save / nc_kv_file_*): round trips restore every
 * row and the recurrent state bit for bit (layers of their own shapes, values inside the keys,
 * layers without cells) and give the logits a fresh prefill gives, rings save only what they
 * hold, and every malformed, corrupt or foreign file is refused with a message naming the problem. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "format/ggml_types.h"
#include "kv/kv_cache.h"
#include "kv/kv_file.h"
#include "kv/kv_state.h"
#include "test.h"
#include "test_files.h"

static char tmp_dir[64];

static const char *tmp_path(const char *name) {
    static char path[4][128];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", tmp_dir, name);
    return p;
}

static bool has(const nc_err *err, const char *needle) { return strstr(err->msg, needle) != NULL; }

/* ---- the cache and the file, without a model ------------------------------------------------- */

static const kv_file_id test_model = {.fingerprint = 0x0123456789abcdefull, .arch = "llama", .name = "test model"};

/* A cache of one KV head of kv_dim dimensions. */
static int init(kv_cache *kv, int32_t n_layer, int32_t n_seq, int32_t n_ctx, int32_t kv_dim, uint32_t type_k,
                uint32_t type_v, int64_t n_cells, int32_t ring, const bool *ring_layer, nc_err *err) {
    kv_config cfg = {.n_layer = n_layer, .n_seq = n_seq, .n_ctx = n_ctx, .n_head_kv = 1, .head_dim = kv_dim,
                     .type_k = type_k, .type_v = type_v, .n_cells = n_cells, .ring = ring, .ring_layer = ring_layer};
    return kv_init(kv, &cfg, err);
}

/* Bytes of a row of n elements of a type, from GGML's formats: Q8_0 and Q4_0 blocks of 32
 * elements take 34 and 18 bytes. */
static size_t row_bytes(uint32_t type, size_t n) {
    return type == GGML_TYPE_F32 ? 4 * n : type == GGML_TYPE_F16 ? 2 * n : type == GGML_TYPE_Q8_0 ? n / 32 * 34 : n / 32 * 18;
}

/* Cells from..to-1 of seq get keys and values of their own in every layer with cells (distinct per
 * layer, cell, dimension; a layer keeping its values in its keys gets keys alone). */
static void fill_cells(kv_cache *kv, int32_t seq, int32_t from, int32_t to) {
    nc_err err;
    float k[128], v[128];
    for (int32_t c = from; c < to; c++) {
        int32_t cell = kv_append(kv, seq, c, (c * 7 + seq) % 500, &err);
        CHECK(cell == c);
        kv_ring_claim(kv, seq, c);
        for (int l = 0; l < kv->n_layer; l++) {
            const kv_layer *L = &kv->layer[l];
            if (!kv_has_cells(kv, l)) continue;
            for (int d = 0; d < L->kv_dim; d++) k[d] = (float)c + 0.5f * (float)d + 1000.0f * (float)l;
            for (int d = 0; d < L->v_dim; d++) v[d] = -(float)c - 0.25f * (float)d - 1000.0f * (float)l;
            kv_store(kv, l, seq, cell, c, 0, L->kv_dim, k, NULL);
            if (!L->v_in_k) kv_store(kv, l, seq, cell, c, 0, L->v_dim, NULL, v);
        }
    }
    kv_commit(kv);
}

static void fill(kv_cache *kv, int32_t seq, int32_t n) { fill_cells(kv, seq, 0, n); }

/* The first n cells of seq a and seq b hold the same tokens, positions and row bytes, in every
 * layer with cells. */
static bool same_cells(const kv_cache *a, int32_t sa, const kv_cache *b, int32_t sb, int32_t n) {
    if (kv_seq_len(a, sa) < n || kv_seq_len(b, sb) < n) return false;
    uint8_t ra[1024], rbuf[1024];
    for (int32_t c = 0; c < n; c++) {
        if (kv_tokens(a, sa)[c] != kv_tokens(b, sb)[c] || kv_positions(a, sa)[c] != kv_positions(b, sb)[c]) return false;
        for (int l = 0; l < a->n_layer; l++) {
            size_t kb = kv_k_row_bytes(a, l), vb = kv_v_row_bytes(a, l);
            if (!kv_has_cells(a, l)) continue;
            kv_read_row(a, l, sa, c, ra, ra + kb);
            kv_read_row(b, l, sb, c, rbuf, rbuf + kb);
            if (memcmp(ra, rbuf, kb + vb)) return false;
        }
    }
    return true;
}

/* The identity of a file of this cache, its layer table (keys, values: 0 when they live in the
 * keys, state) written into `layers`, as the cache's layers say. */
static kv_file_id id_of(const kv_cache *kv, kv_file_layer *layers) {
    kv_file_id id = test_model;
    id.n_layer = (uint32_t)kv->n_layer;
    id.type_k = kv->type_k;
    id.type_v = kv->type_v;
    for (int l = 0; l < kv->n_layer; l++) {
        const kv_layer *L = &kv->layer[l];
        layers[l] = (kv_file_layer){(uint32_t)L->kv_dim, L->v_in_k ? 0u : (uint32_t)L->v_dim, (uint32_t)L->state};
    }
    id.layers = layers;
    return id;
}

/* Parse a file written by kv_seq_save. */
static int parse_file(const char *path, kv_file_view *v, uint8_t **bytes, size_t *len, nc_err *err) {
    *bytes = (uint8_t *)test_read_all(path, len);
    if (!*bytes) return nc_fail(err, "cannot read %s", path);
    return kv_file_parse(v, *bytes, *len, path, err);
}

/* Keys of type tk and values of type tv, 64 dimensions: a round trip through a file. */
static void check_round_trip(uint32_t tk, uint32_t tv) {
    kv_cache a, b;
    nc_err err;
    CHECK(init(&a, 3, 2, 600, 64, tk, tv, 0, 0, NULL, &err) == 0);
    CHECK(init(&b, 3, 1, 600, 64, tk, tv, 0, 0, NULL, &err) == 0);
    fill(&a, 1, 300); /* two blocks and part of a third */
    const char *path = tmp_path("round.kv");
    uint64_t bytes = 0;
    CHECK(kv_seq_save(&a, 1, 300, &test_model, path, &bytes, &err) == 0);
    CHECK(bytes == KV_FILE_HEADER + 3 * 12 + 8 * 300 + 3 * 300 * (row_bytes(tk, 64) + row_bytes(tv, 64)) + 8);
    kv_file_view v;
    uint8_t *data;
    size_t len = 0;
    CHECK_MSG(parse_file(path, &v, &data, &len, &err) == 0, "%s", err.msg);
    CHECK(len == bytes && v.n_cells == 300 && v.id.n_layer == 3 && v.id.type_k == tk && v.id.type_v == tv &&
          v.cell_bytes == 3 * (row_bytes(tk, 64) + row_bytes(tv, 64)) && v.state_floats == 0 && v.n_states == 0);
    for (int l = 0; l < 3; l++)
        CHECK(v.id.layers == v.layers && v.layers[l].k_dim == 64 && v.layers[l].v_dim == 64 && v.layers[l].state == 0);
    CHECK(v.rows == data + KV_FILE_HEADER + 3 * 12 + 8 * 300 && v.rows + 300 * v.cell_bytes == data + len - 8);
    CHECK(!strcmp(v.id.arch, "llama") && !strcmp(v.id.name, "test model") && v.id.fingerprint == test_model.fingerprint);
    kv_file_layer layers[3], layers_of[3];
    kv_file_id want = id_of(&a, layers), of = kv_file_id_of(&a, &test_model, layers_of);
    CHECK_MSG(kv_file_check(&v, &want, 500, path, &err) == 0, "%s", err.msg);
    CHECK(of.n_layer == 3 && !memcmp(layers_of, layers, sizeof layers) && kv_file_check(&v, &of, 500, path, &err) == 0);
    /* all of it, then a part, then nothing: without recurrent state, every cell asked for */
    CHECK_MSG(kv_seq_load(&b, 0, &v, 300, path, &err) == 300, "%s", err.msg);
    CHECK(kv_seq_len(&b, 0) == 300 && same_cells(&a, 1, &b, 0, 300));
    CHECK(kv_seq_load(&b, 0, &v, 100, path, &err) == 100 && kv_seq_len(&b, 0) == 100 && same_cells(&a, 1, &b, 0, 100));
    CHECK(kv_get_k(&b, 2, 0, 99, 3) == kv_get_k(&a, 2, 1, 99, 3) && kv_get_v(&b, 1, 0, 7, 2) == kv_get_v(&a, 1, 1, 7, 2));
    CHECK(kv_seq_load(&b, 0, &v, 0, path, &err) == 0 && kv_seq_len(&b, 0) == 0);
    CHECK(kv_seq_load(&b, 0, &v, 300, path, &err) == 300);
    /* refusals */
    CHECK(kv_seq_load(&b, 0, &v, 301, path, &err) == -1 && has(&err, "the file holds 300"));
    CHECK(kv_seq_load(&b, 1, &v, 10, path, &err) == -1 && has(&err, "sequence id 1"));
    kv_cache small;
    CHECK(init(&small, 3, 1, 200, 64, tk, tv, 0, 0, NULL, &err) == 0);
    CHECK(kv_seq_load(&small, 0, &v, 300, path, &err) == -1 && has(&err, "do not fit a context of 200"));
    CHECK(kv_seq_load(&small, 0, &v, 200, path, &err) == 200 && same_cells(&a, 1, &small, 0, 200));
    kv_free(&small);
    /* a pool too small for the cells: the sequence is left empty */
    kv_cache tight;
    CHECK(init(&tight, 3, 2, 600, 64, tk, tv, 256, 0, NULL, &err) == 0);
    CHECK(kv_seq_load(&tight, 0, &v, 300, path, &err) == -1 && has(&err, "pool") && kv_seq_len(&tight, 0) == 0);
    kv_free(&tight);
    CHECK(kv_seq_save(&a, 0, 1, &test_model, path, NULL, &err) == -1 && has(&err, "sequence 0 is empty"));
    CHECK(kv_seq_save(&a, 1, 301, &test_model, path, NULL, &err) == -1 && has(&err, "which holds 300"));
    CHECK(kv_seq_save(&a, 2, 1, &test_model, path, NULL, &err) == -1 && has(&err, "sequence id 2"));
    CHECK(kv_seq_save(&a, 1, 10, &test_model, "/nonexistent-dir/x.kv", NULL, &err) == -1 &&
          has(&err, "/nonexistent-dir/x.kv") && has(&err, "No such file"));
    /* the failed saves left the first file whole, and no temporary file behind */
    kv_file_view again;
    uint8_t *data2;
    CHECK(parse_file(path, &again, &data2, &len, &err) == 0 && again.n_cells == 300);
    kv_file_view_free(&again);
    free(data2);
    kv_file_view_free(&v);
    free(data);
    kv_free(&a);
    kv_free(&b);
}

/* A sliding layer kept in a ring of 256 cells: a sequence the ring still holds whole saves and
 * loads into a ring or a full layout; once the ring has dropped positions, saving is refused. */
static void check_ring(void) {
    const bool ring_layer[2] = {true, false};
    kv_cache a, full, ring;
    nc_err err;
    CHECK(init(&a, 2, 2, 1024, 8, GGML_TYPE_F16, GGML_TYPE_F16, 0, 256, ring_layer, &err) == 0);
    CHECK(init(&full, 2, 1, 1024, 8, GGML_TYPE_F16, GGML_TYPE_F16, 0, 0, NULL, &err) == 0);
    CHECK(init(&ring, 2, 1, 1024, 8, GGML_TYPE_F16, GGML_TYPE_F16, 0, 256, ring_layer, &err) == 0);
    fill(&a, 0, 200);
    fill(&a, 1, 300);
    const char *path = tmp_path("ring.kv");
    CHECK_MSG(kv_seq_save(&a, 0, 200, &test_model, path, NULL, &err) == 0, "%s", err.msg);
    kv_file_view v;
    uint8_t *data;
    size_t len;
    CHECK(parse_file(path, &v, &data, &len, &err) == 0);
    CHECK(kv_seq_load(&full, 0, &v, 200, path, &err) == 200 && same_cells(&a, 0, &full, 0, 200));
    CHECK(kv_seq_load(&ring, 0, &v, 200, path, &err) == 200 && same_cells(&a, 0, &ring, 0, 200));
    CHECK(kv_ring_positions(&ring, 0)[199] == 199 && kv_ring_positions(&ring, 0)[200] == -1);
    kv_file_view_free(&v);
    free(data);
    /* positions 0..43 of sequence 1 were overwritten by 256..299 */
    CHECK(kv_seq_save(&a, 1, 300, &test_model, path, NULL, &err) == -1 && has(&err, "no longer hold position 0") &&
          has(&err, "swa_full"));
    CHECK(kv_seq_save(&a, 1, 50, &test_model, path, NULL, &err) == -1);
    kv_free(&a);
    kv_free(&full);
    kv_free(&ring);
}

/* Loaded cells go to the prefix cache like computed ones once their sequence lets go of them;
 * cells kv_seq_keep had moved are saved as such (n_exact) and, loaded, are no prefix of anything. */
static void check_prefix_cache(void) {
    kv_cache a, b;
    nc_err err;
    CHECK(init(&a, 2, 1, 600, 8, GGML_TYPE_F16, GGML_TYPE_F16, 0, 0, NULL, &err) == 0);
    CHECK(init(&b, 2, 2, 600, 8, GGML_TYPE_F16, GGML_TYPE_F16, 0, 0, NULL, &err) == 0);
    fill(&a, 0, 300);
    int32_t tok[300];
    memcpy(tok, kv_tokens(&a, 0), sizeof tok);
    const char *path = tmp_path("exact.kv");
    CHECK(kv_seq_save(&a, 0, 300, &test_model, path, NULL, &err) == 0);
    kv_file_view v;
    uint8_t *data;
    size_t len;
    CHECK(parse_file(path, &v, &data, &len, &err) == 0 && v.n_exact == 300);
    CHECK(kv_seq_load(&b, 0, &v, 300, path, &err) == 300 && kv_seq_n_exact(&b, 0) == 300);
    kv_seq_truncate(&b, 0, 0);
    CHECK(kv_seq_reuse_prefix(&b, 1, tok, 300) == 300 && same_cells(&a, 0, &b, 1, 300));
    kv_seq_truncate(&b, 1, 0);
    kv_file_view_free(&v);
    free(data);
    /* keep cells 0..9 and 100..299 at positions 0..209: the first 10 stay exact */
    int32_t cells[210], pos[210];
    for (int32_t i = 0; i < 210; i++) {
        cells[i] = i < 10 ? i : i + 90;
        pos[i] = i;
    }
    CHECK(kv_seq_keep(&a, 0, cells, 210, pos, NULL, &err) == 0 && kv_seq_n_exact(&a, 0) == 10);
    CHECK(kv_seq_save(&a, 0, 210, &test_model, path, NULL, &err) == 0);
    CHECK(parse_file(path, &v, &data, &len, &err) == 0 && v.n_exact == 10 && v.n_cells == 210);
    kv_free(&b); /* a cache without the first file's blocks */
    CHECK(init(&b, 2, 2, 600, 8, GGML_TYPE_F16, GGML_TYPE_F16, 0, 0, NULL, &err) == 0);
    CHECK(kv_seq_load(&b, 0, &v, 210, path, &err) == 210 && kv_seq_n_exact(&b, 0) == 10 && same_cells(&a, 0, &b, 0, 210));
    kv_seq_truncate(&b, 0, 0);
    CHECK(kv_seq_reuse_prefix(&b, 1, kv_tokens(&a, 0), 210) == 0);
    /* a prefix of only exact cells loads as exact */
    CHECK(kv_seq_load(&b, 0, &v, 8, path, &err) == 8 && kv_seq_n_exact(&b, 0) == 8);
    kv_file_view_free(&v);
    free(data);
    kv_free(&a);
    kv_free(&b);
}

/* ---- hostile files: the parser refuses each with a message naming it ------------------------- */

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i);
}

static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Recompute the checksum of a file image, as a hostile writer would. */
static void reseal(uint8_t *d, size_t n) {
    nc_hasher h;
    nc_hash_init(&h);
    nc_hash_update(&h, d, n - 8);
    uint64_t s = nc_hash_final(&h);
    put32(d + n - 8, (uint32_t)s);
    put32(d + n - 4, (uint32_t)(s >> 32));
}

/* Parse a changed copy of the file image: refused, with `needle` in the message, nothing held. */
static void refused(const uint8_t *orig, size_t n, size_t at, const void *bytes, size_t k, bool seal, size_t size,
                    const char *needle) {
    uint8_t *d = malloc(n + 16);
    memcpy(d, orig, n);
    memset(d + n, 0, 16);
    if (k) memcpy(d + at, bytes, k);
    if (seal) reseal(d, size);
    kv_file_view v;
    nc_err err;
    int rc = kv_file_parse(&v, d, size, "bad.kv", &err);
    CHECK_MSG(rc == -1 && has(&err, needle) && !strncmp(err.msg, "bad.kv: ", 8) && !v.tokens && !v.pos && !v.layers,
              "want '%s', got rc %d: %s", needle, rc, rc ? err.msg : "");
    free(d);
}

/* A copy of a file image with k bytes at `at` replaced (free it). */
static uint8_t *patched(const uint8_t *orig, size_t n, size_t at, const void *bytes, size_t k) {
    uint8_t *d = malloc(n);
    memcpy(d, orig, n);
    memcpy(d + at, bytes, k);
    return d;
}

static void check_hostile(void) {
    kv_cache a;
    nc_err err;
    CHECK(init(&a, 2, 1, 64, 4, GGML_TYPE_F16, GGML_TYPE_F16, 0, 0, NULL, &err) == 0);
    fill(&a, 0, 5);
    const char *path = tmp_path("hostile.kv");
    CHECK(kv_seq_save(&a, 0, 5, &test_model, path, NULL, &err) == 0);
    size_t n;
    uint8_t *d = (uint8_t *)test_read_all(path, &n);
    /* the header, a table of 2 layers (offsets 144 and 156), tokens at 168, positions at 188 */
    size_t table = KV_FILE_HEADER, tokens = table + 2 * 12, positions = tokens + 20, rows = positions + 20;
    CHECK(d && n == KV_FILE_HEADER + 24 + 40 + 2 * 5 * 2 * 8 + 8);
    if (!d) return;
    uint8_t one = 0xff, q8[4], big[4], zero[4] = {0}, neg[4], f16_inf[2] = {0x00, 0x7c}, f16_nan[2] = {0x01, 0xfe};
    put32(q8, GGML_TYPE_Q8_0);
    put32(big, 0x7fffffff);
    put32(neg, 0xfffffffe);
    refused(d, n, 0, NULL, 0, false, 0, "the file is empty");
    refused(d, n, 0, "GGUF", 4, false, n, "not a nucleus KV cache file (it starts with the bytes 47475546");
    refused(d, n, 0, NULL, 0, false, 3, "not a nucleus KV cache file");
    refused(d, n, 0, NULL, 0, false, 100, "too short");
    refused(d, n, 0, NULL, 0, false, n - 1, "the file is truncated; the checksum does not match either");
    refused(d, n, 0, NULL, 0, false, n + 1, "longer than that");
    refused(d, n, rows + 3, &one, 1, false, n, "checksum mismatch");
    refused(d, n, 120, &one, 1, false, n, "key type type 255 (offset 120) is not one a KV cache keeps (F16, F32, "
                                          "Q8_0, Q4_0); the checksum does not match either: the file is corrupt");
    refused(d, n, n - 1, &one, 1, false, n, "checksum mismatch");        /* in the checksum */
    refused(d, n, 4, "\3\0\0\0", 4, true, n, "version 3 (offset 4) is not supported; this build reads version 2");
    refused(d, n, 4, "\1\0\0\0", 4, true, n, "version 1 (offset 4) is not supported"); /* a file of the first format */
    refused(d, n, 112, zero, 4, true, n, "n_layer 0 (offset 112)");
    refused(d, n, 112, "\1\20\0\0", 4, true, n, "n_layer 4097 (offset 112) is outside 1..4096");
    refused(d, n, 112, "\240\17\0\0", 4, true, n, "too short for the table of its 4000 layers");
    refused(d, n, 116, big, 4, true, n, "n_states 2147483647 (offset 116) is more than 4");
    refused(d, n, 116, &one, 1, true, n, "n_states 255 (offset 116) is more than 4");
    refused(d, n, 116, "\1\0\0\0", 4, true, n, "n_states 1 (offset 116) for a cache without recurrent state");
    refused(d, n, 124, &one, 1, true, n, "value type type 255 (offset 124)");
    refused(d, n, 120, q8, 4, true, n, "layer 0 (offset 144): key width 4 is not whole blocks of 32 Q8_0 elements");
    refused(d, n, 124, q8, 4, true, n, "layer 0 (offset 148): value width 4 is not whole blocks of 32 Q8_0 elements");
    refused(d, n, 128, "\7\0\0\0", 4, true, n, "cell_bytes 7 (offset 128) is not what the layer table makes (32)");
    refused(d, n, 132, "\20\0\0\0", 4, true, n, "state_floats 16 (offset 132) is not what the layer table makes (0)");
    refused(d, n, 136, big, 4, true, n, "n_cells 2147483647 (offset 136) is outside");
    refused(d, n, 136, zero, 4, true, n, "n_cells 0");
    refused(d, n, 136, "\0\0\0\1", 4, true, n, "the file is truncated"); /* 2^24 cells: sizes, not memory */
    refused(d, n, 140, "\6\0\0\0", 4, true, n, "n_exact 6 (offset 140) is more than n_cells 5");
    uint8_t text[32];
    memset(text, 'a', sizeof text);
    refused(d, n, 16, text, 32, true, n, "architecture field (offset 16) is not NUL-terminated");
    refused(d, n, tokens + 8, neg, 4, true, n, "the token of cell 2 (offset 176) is -2");
    refused(d, n, positions + 12, zero, 4, true, n, "the position of cell 3 (offset 200) is 0, not after");
    refused(d, n, positions, neg, 4, true, n, "is -2, negative");
    refused(d, n, rows + 2 * 8 * 1 + 8 + 6, f16_inf, 2, true, n, "layer 0, cell 1: element 3 of the value row");
    refused(d, n, rows + 2 * 8 * 5, f16_nan, 2, true, n, "layer 1, cell 0: element 0 of the key row");

    /* a damaged layer table: widths and states out of range, values without keys, a table that
     * makes other cell bytes or state than the header says, or other sizes than the file has */
    refused(d, n, table + 12, big, 4, true, n, "layer 1 (offset 156): key width 2147483647, value width 4, state 0: out of range");
    refused(d, n, table, zero, 4, true, n, "layer 0 (offset 144): key width 0, value width 4, state 0: out of range");
    refused(d, n, table + 12 + 8, "\1\0\0\20", 4, true, n, "layer 1 (offset 156): key width 4, value width 4, state 268435457: out of range");
    refused(d, n, table + 12, "\10\0\0\0", 4, true, n, "cell_bytes 32 (offset 128) is not what the layer table makes (40)");
    refused(d, n, table + 12 + 4, "\2\0\0\0", 4, true, n, "cell_bytes 32 (offset 128) is not what the layer table makes (28)");
    refused(d, n, table + 12 + 8, "\3\0\0\0", 4, true, n, "state_floats 0 (offset 132) is not what the layer table makes (3)");
    uint8_t *e = patched(d, n, table + 12, zero, 4); /* layer 1 keeps no cells: its rows are too many */
    memcpy(e + table + 12 + 4, zero, 4);
    refused(e, n, 128, "\20\0\0\0", 4, true, n, "the file is longer than that");
    free(e);
    e = patched(d, n, table + 12 + 8, "\3\0\0\0", 4); /* a state of 3 floats the file does not have */
    memcpy(e + 132, "\3\0\0\0", 4);
    refused(e, n, 116, "\1\0\0\0", 4, true, n, "1 states of 3 floats) makes 392: the file is truncated");
    free(e);

    /* an intact file of another model, shape, type or vocabulary */
    kv_file_view v;
    CHECK(kv_file_parse(&v, d, n, "f.kv", &err) == 0);
    kv_file_layer layers[2], other_layers[2];
    kv_file_id want = id_of(&a, layers);
    CHECK(kv_file_check(&v, &want, 500, "f.kv", &err) == 0);
    kv_file_id other = want;
    snprintf(other.arch, sizeof other.arch, "qwen2");
    snprintf(other.name, sizeof other.name, "other");
    CHECK(kv_file_check(&v, &other, 500, "f.kv", &err) == -1 &&
          has(&err, "f.kv: written for another model, 'test model' (llama, 2 layers, 32 bytes a cell); this one is 'other' (qwen2"));
    other = want;
    other.layers = other_layers;
    memcpy(other_layers, layers, sizeof layers);
    other_layers[1].k_dim = 8;
    CHECK(kv_file_check(&v, &other, 500, "f.kv", &err) == -1 && has(&err, "this one is 'test model' (llama, 2 layers, 40 bytes a cell)"));
    memcpy(other_layers, layers, sizeof layers);
    other_layers[0].v_dim = 0; /* values in the keys: a latent row, kept in F32 where keys are F16 */
    CHECK(kv_file_check(&v, &other, 500, "f.kv", &err) == -1 && has(&err, "(llama, 2 layers, 32 bytes a cell)"));
    memcpy(other_layers, layers, sizeof layers);
    other_layers[1].state = 2; /* the same rows, a recurrent state */
    CHECK(kv_file_check(&v, &other, 500, "f.kv", &err) == -1 && has(&err, "written for another model"));
    other = want;
    other.n_layer = 1;
    CHECK(kv_file_check(&v, &other, 500, "f.kv", &err) == -1 && has(&err, "this one is 'test model' (llama, 1 layers"));
    other = want;
    other.fingerprint ^= 1;
    CHECK(kv_file_check(&v, &other, 500, "f.kv", &err) == -1 && has(&err, "same architecture and shape") &&
          has(&err, "fingerprint 0123456789abcdef"));
    other = want;
    other.type_k = GGML_TYPE_F32;
    CHECK(kv_file_check(&v, &other, 500, "f.kv", &err) == -1 &&
          has(&err, "its cache keeps keys as F16 and values as F16; this context keeps F32 and F16"));
    other = want;
    other.type_v = GGML_TYPE_Q8_0;
    CHECK(kv_file_check(&v, &other, 500, "f.kv", &err) == -1 && has(&err, "this context keeps F16 and Q8_0"));
    CHECK(kv_file_check(&v, &want, 20, "f.kv", &err) == -1 && has(&err, "the token of cell 3 is 21, outside this model's vocabulary of 20"));
    kv_file_view_free(&v);
    free(d);
    kv_free(&a);

    /* quantised rows: a block's scale must be finite (the codes are any bytes) */
    CHECK(init(&a, 1, 1, 64, 64, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, 0, 0, NULL, &err) == 0);
    fill(&a, 0, 2);
    CHECK(kv_seq_save(&a, 0, 2, &test_model, path, NULL, &err) == 0);
    d = (uint8_t *)test_read_all(path, &n);
    CHECK(d && n == KV_FILE_HEADER + 12 + 16 + 2 * (68 + 36) + 8);
    if (!d) return;
    rows = KV_FILE_HEADER + 12 + 16;
    refused(d, n, rows + 34, f16_inf, 2, true, n, "layer 0, cell 0: the scale of block 1 of the key row");
    refused(d, n, rows + 68 + 104 + 18, f16_nan, 2, true, n, "layer 0, cell 1: the scale of block 1 of the value row");
    e = malloc(n);
    memcpy(e, d, n);
    memset(e + rows + 36, 0xff, 32); /* a block's codes are any bytes */
    reseal(e, n);
    CHECK(kv_file_parse(&v, e, n, "q.kv", &err) == 0);
    kv_file_view_free(&v);
    free(e);
    free(d);
    kv_free(&a);
}

/* ---- layers of their own shapes, and recurrent state ------------------------------------------ */

/* Two heads of 32, a recurrent layer of 6 floats of state (no cells), a latent layer of 80
 * dimensions whose first 64 are its values, another recurrent layer of 3 floats. */
static const kv_layer_config mixed[4] = {{.n_head_kv = 2, .head_dim = 32, .head_dim_v = 32},
                                         {.state = 6},
                                         {.n_head_kv = 1, .head_dim = 80, .head_dim_v = 64, .v_in_k = true},
                                         {.state = 3}};

/* Float i of the state after pos tokens: negative subnormals, large and small normal numbers, so
 * that a round trip changing any bit shows. */
static uint32_t state_bits(int32_t pos, int32_t i) {
    float x = 1e30f / (float)(pos + 1) - (float)i;
    uint32_t u;
    memcpy(&u, &x, 4);
    return i % 3 == 0 ? 0x80000000u | (uint32_t)(pos * 131 + i) : i % 3 == 1 ? u : (uint32_t)(pos * 7 + i) << 20;
}

static bool state_bits_are(const kv_cache *kv, int32_t seq, int32_t pos) {
    for (size_t i = 0; i < kv->state_floats; i++) {
        uint32_t u;
        memcpy(&u, kv_state(kv, 0, seq) + i, 4);
        if (u != (pos ? state_bits(pos, (int32_t)i) : 0)) return false;
    }
    return kv->state_pos[seq] == pos;
}

/* Cells from..to-1 of seq in one pass, as forward.c makes one: its own checkpoints before and after. */
static void pass(kv_cache *kv, int32_t seq, int32_t from, int32_t to) {
    kv_state_checkpoint(kv, seq, false);
    fill_cells(kv, seq, from, to);
    for (size_t i = 0; i < kv->state_floats; i++) {
        uint32_t u = state_bits(to, (int32_t)i);
        memcpy(kv_state(kv, 0, seq) + i, &u, 4);
    }
    kv->state_pos[seq] = to;
    kv_state_checkpoint(kv, seq, true);
}

/* A file of per-layer shapes and recurrent states: the layer table says each layer's keys,
 * values (0: inside the keys; none without cells) and state; rows are written for the layers with
 * cells only; the states of the saved cells' prefixes (the sequence's at its end, its checkpoint
 * before its last pass) go and come back bit for bit; loaded, the latest at or before the cells
 * asked for is the sequence's and the earlier ones shared checkpoints. */
static void check_state_file(void) {
    kv_cache a, b, c;
    nc_err err;
    kv_config cfg = {.n_layer = 4, .n_seq = 2, .n_ctx = 600, .layers = mixed, .type_k = GGML_TYPE_F16,
                     .type_v = GGML_TYPE_F16};
    CHECK_MSG(kv_init(&a, &cfg, &err) == 0, "%s", err.msg);
    cfg.n_seq = 1;
    CHECK(kv_init(&b, &cfg, &err) == 0);
    pass(&a, 1, 0, 10);
    pass(&a, 1, 10, 20); /* its own checkpoints at 10 and 20 */
    CHECK(state_bits_are(&a, 1, 20));
    const char *path = tmp_path("state.kv");
    uint64_t bytes = 0;
    size_t cell = 2 * 64 * 2 + 80 * 4; /* two heads of keys and values in F16, a latent row in F32 */
    CHECK_MSG(kv_seq_save(&a, 1, 20, &test_model, path, &bytes, &err) == 0, "%s", err.msg);
    CHECK(bytes == KV_FILE_HEADER + 4 * 12 + 8 * 20 + 20 * cell + 2 * (4 + 9 * 4) + 8);
    kv_file_view v;
    uint8_t *data;
    size_t len;
    CHECK_MSG(parse_file(path, &v, &data, &len, &err) == 0, "%s", err.msg);
    const kv_file_layer table[4] = {{64, 64, 0}, {0, 0, 6}, {80, 0, 0}, {0, 0, 3}};
    CHECK(v.n_cells == 20 && v.n_states == 2 && v.state_pos[0] == 10 && v.state_pos[1] == 20 && v.state_floats == 9 &&
          v.cell_bytes == cell && v.id.n_layer == 4 && !memcmp(v.layers, table, sizeof table));
    CHECK(v.rows == data + KV_FILE_HEADER + 48 + 160 && v.states[0] == v.rows + 20 * cell + 4 &&
          v.states[1] == v.states[0] + 36 + 4 && v.states[1] + 36 + 8 == data + len);
    bool same = true;
    for (int i = 0; i < 9; i++)
        same = same && get32(v.states[0] + 4 * i) == state_bits(10, i) && get32(v.states[1] + 4 * i) == state_bits(20, i);
    CHECK_MSG(same, "the file's states are not the sequence's, bit for bit");
    kv_file_layer want_layers[4];
    kv_file_id want = id_of(&a, want_layers);
    CHECK(!memcmp(want_layers, table, sizeof table) && kv_file_check(&v, &want, 500, path, &err) == 0);
    /* all of it: cells and state; the earlier state a shared checkpoint */
    CHECK_MSG(kv_seq_load(&b, 0, &v, 20, path, &err) == 20, "%s", err.msg);
    CHECK(kv_seq_len(&b, 0) == 20 && same_cells(&a, 1, &b, 0, 20) && state_bits_are(&b, 0, 20));
    CHECK(kv_get_v(&b, 2, 0, 19, 63) == kv_get_v(&a, 2, 1, 19, 63) && kv_get_v(&b, 2, 0, 19, 63) == kv_get_k(&a, 2, 1, 19, 63));
    CHECK(kv_state_find(&b, v.tokens, 20) == 10);
    /* fewer cells than the last state absorbed: the cells as far as the one before, the rest to
     * compute afresh; fewer than any: nothing */
    CHECK(kv_seq_load(&b, 0, &v, 19, path, &err) == 10 && kv_seq_len(&b, 0) == 10 && state_bits_are(&b, 0, 10) &&
          same_cells(&a, 1, &b, 0, 10));
    CHECK(kv_seq_load(&b, 0, &v, 20, path, &err) == 20 && state_bits_are(&b, 0, 20));
    CHECK(kv_seq_load(&b, 0, &v, 10, path, &err) == 10 && state_bits_are(&b, 0, 10));
    CHECK(kv_seq_load(&b, 0, &v, 9, path, &err) == 0 && kv_seq_len(&b, 0) == 0 && state_bits_are(&b, 0, 0));
    /* a cache of another shape: values of their own in the latent layer, or another state */
    kv_layer_config other[4];
    memcpy(other, mixed, sizeof other);
    other[2].v_in_k = false;
    cfg.layers = other;
    CHECK(kv_init(&c, &cfg, &err) == 0);
    kv_file_id theirs = id_of(&c, want_layers);
    CHECK(kv_file_check(&v, &theirs, 500, path, &err) == -1 && has(&err, "written for another model"));
    CHECK(kv_seq_load(&c, 0, &v, 20, path, &err) == -1 && has(&err, "layer 2's shape") && kv_seq_len(&c, 0) == 0);
    kv_free(&c);
    memcpy(other, mixed, sizeof other);
    other[3].state = 4;
    CHECK(kv_init(&c, &cfg, &err) == 0);
    CHECK(kv_seq_load(&c, 0, &v, 20, path, &err) == -1 && has(&err, "layer 3's shape"));
    kv_free(&c);
    cfg.layers = mixed;
    /* the states of a file are checked like its rows: every float finite; their positions
     * increasing within the cells; the count within the limit and the size */
    size_t at = (size_t)(v.states[1] - data), p0 = (size_t)(v.states[0] - data) - 4, p1 = at - 4;
    refused(data, len, at + 8, "\0\0\300\177", 4, true, len, "element 2 of recurrent state 1");
    char needle[96];
    snprintf(needle, sizeof needle, "element 8 of recurrent state 1 (offset %zu) is not finite", at + 32);
    refused(data, len, at + 32, "\0\0\200\377", 4, true, len, needle);
    snprintf(needle, sizeof needle, "the position of recurrent state 0 (offset %zu) is 21, outside 1..n_cells", p0);
    refused(data, len, p0, "\25\0\0\0", 4, true, len, needle);
    refused(data, len, p0, "\0\0\0\0", 4, true, len, "is 0, outside 1..n_cells");
    snprintf(needle, sizeof needle, "the position of recurrent state 1 (offset %zu) is 10, not after the previous", p1);
    refused(data, len, p1, "\12\0\0\0", 4, true, len, needle);
    refused(data, len, 116, "\5\0\0\0", 4, true, len, "n_states 5 (offset 116) is more than 4");
    refused(data, len, 116, "\1\0\0\0", 4, true, len, "1 states of 9 floats) makes");
    kv_file_view_free(&v);
    free(data);

    /* 15 of the 20 cells: the states at or before them, after 10 */
    CHECK(kv_seq_save(&a, 1, 15, &test_model, path, &bytes, &err) == 0);
    CHECK(parse_file(path, &v, &data, &len, &err) == 0 && v.n_cells == 15 && v.n_states == 1 && v.state_pos[0] == 10);
    same = true;
    for (int i = 0; i < 9; i++) same = same && get32(v.states[0] + 4 * i) == state_bits(10, i);
    CHECK(same);
    CHECK(kv_seq_load(&b, 0, &v, 15, path, &err) == 10 && kv_seq_len(&b, 0) == 10 && state_bits_are(&b, 0, 10) &&
          same_cells(&a, 1, &b, 0, 10));
    CHECK(kv_seq_load(&b, 0, &v, 10, path, &err) == 10 && state_bits_are(&b, 0, 10));
    CHECK(kv_seq_load(&b, 0, &v, 9, path, &err) == 0 && kv_seq_len(&b, 0) == 0 && state_bits_are(&b, 0, 0));
    kv_file_view_free(&v);
    free(data);
    /* without a state at or before them, none (the state after nothing): its cells are all
     * computed again */
    CHECK(kv_seq_save(&a, 1, 5, &test_model, path, NULL, &err) == 0);
    CHECK(parse_file(path, &v, &data, &len, &err) == 0 && v.n_cells == 5 && v.n_states == 0);
    CHECK(kv_seq_load(&b, 0, &v, 5, path, &err) == 0 && kv_seq_len(&b, 0) == 0 && state_bits_are(&b, 0, 0));
    kv_file_view_free(&v);
    free(data);
    kv_free(&a);
    kv_free(&b);
}

/* ---- through the public API, with models ------------------------------------------------------- */

static nc_context *new_ctx(nc_model *m, int32_t n_ctx, int32_t n_batch, bool swa_full, nc_cache_type type) {
    nc_err err;
    nc_context *c;
    nc_context_params p = {.n_ctx = n_ctx, .n_threads = 2, .n_batch = n_batch, .swa_full = swa_full, .type_k = type,
                           .type_v = type};
    if (nc_context_new(&c, m, &p, &err)) {
        fprintf(stderr, "context: %s\n", err.msg);
        return NULL;
    }
    return c;
}

static bool run_tokens(nc_context *c, const int32_t *tok, int32_t from, int32_t to, nc_err *err) {
    nc_batch_entry *b = malloc((size_t)(to - from) * sizeof *b);
    for (int32_t i = from; i < to; i++) b[i - from] = (nc_batch_entry){tok[i], i, 0, true};
    bool ok = nc_forward(c, b, to - from, err) == 0;
    free(b);
    return ok;
}

/* The logits of rows 0..n of the last batch equal ref's rows from..from+n, bit for bit. */
static bool same_logits(nc_context *c, const float *ref, int32_t from, int32_t n, int32_t V) {
    for (int32_t i = 0; i < n; i++)
        if (!nc_logits(c, i) || memcmp(nc_logits(c, i), ref + (size_t)(from + i) * V, (size_t)V * sizeof(float)))
            return false;
    return true;
}

/* A prompt of N tokens prefilled in `src` (logits everywhere) and saved: a fresh context
 * (n_batch `batch`, rings or not) that loads the first k cells and computes the rest gives the
 * same logits bit for bit, for k = N - 1 and k = N / 2; so does one more token after all N. */
static void check_model_round_trip(nc_model *m, nc_context *src, int32_t dst_batch, nc_cache_type type, int32_t N,
                                   const char *what) {
    nc_model_info info;
    nc_model_get_info(m, &info);
    int32_t V = info.n_vocab;
    int32_t *tok = malloc((size_t)(N + 1) * sizeof *tok);
    for (int32_t i = 0; i <= N; i++) tok[i] = i == 0 ? 1 : (5 + 37 * i) % V;
    float *ref = malloc((size_t)(N + 1) * (size_t)V * sizeof *ref);
    nc_err err;
    nc_kv_seq_clear(src, 0);
    CHECK(run_tokens(src, tok, 0, N, &err));
    for (int32_t i = 0; i < N; i++) memcpy(ref + (size_t)i * V, nc_logits(src, i), (size_t)V * sizeof *ref);
    const char *path = tmp_path("model.kv");
    uint64_t bytes = 0;
    CHECK_MSG(nc_kv_seq_save(src, 0, 0, path, &bytes, &err) == 0, "%s: %s", what, err.msg);
    CHECK(run_tokens(src, tok, N, N + 1, &err));
    memcpy(ref + (size_t)N * V, nc_logits(src, 0), (size_t)V * sizeof *ref);
    nc_context *dst = new_ctx(m, 2048, dst_batch, false, type);
    nc_kv_file *f = NULL;
    CHECK_MSG(dst && nc_kv_file_open(&f, dst, path, &err) == 0, "%s: %s", what, err.msg);
    if (!f) {
        nc_context_free(dst);
        free(ref);
        free(tok);
        return;
    }
    nc_kv_file_info fi;
    nc_kv_file_get_info(f, &fi);
    CHECK(fi.n_tokens == N && fi.n_bytes == bytes && !memcmp(fi.tokens, tok, (size_t)N * sizeof *tok));
    const int32_t ks[] = {N - 1, N / 2};
    for (size_t i = 0; i < 2; i++) {
        int32_t k = ks[i];
        CHECK(nc_kv_file_load(f, 0, k, &err) == 0 && nc_kv_seq_len(dst, 0) == k);
        CHECK(run_tokens(dst, tok, k, N, &err));
        CHECK_MSG(same_logits(dst, ref, k, N - k, V), "%s: logits after loading %d of %d cells differ", what, k, N);
    }
    CHECK(nc_kv_file_load(f, 0, N, &err) == 0 && run_tokens(dst, tok, N, N + 1, &err));
    CHECK_MSG(same_logits(dst, ref, N, 1, V), "%s: logits after loading all %d cells differ", what, N);
    nc_kv_file_close(f);
    nc_context_free(dst);
    free(ref);
    free(tok);
}

static void check_models(void) {
    nc_model *stories = test_load_model("models/stories260K/stories260K.gguf"),
             *tiny = test_load_model("models/tinystories-656k/TinyStories-656K-Q8_0.gguf"),
             *gemma = test_load_model("archs/gemma3/gemma3-f16.gguf"), *qwen3 = test_load_model("archs/qwen3/qwen3-f16.gguf");
    if (!stories || !tiny || !gemma || !qwen3) return;
    nc_err err;

    nc_context *c = new_ctx(stories, 256, 512, false, NC_CACHE_F16);
    check_model_round_trip(stories, c, 512, NC_CACHE_F16, 40, "stories260K");
    check_model_round_trip(stories, c, 7, NC_CACHE_F16, 40, "stories260K, micro-batches of 7");

    /* nc_generate takes what the loaded file holds of the prompt from the prefix cache: same tokens */
    const char *path = tmp_path("gen.kv");
    int32_t prompt[12] = {1, 403, 407, 261, 378, 306, 397, 288, 306, 336, 372, 348};
    nc_gen_params gp = {.stop = {.max_tokens = 16}};
    nc_sampler_params_default(&gp.sampling);
    gp.sampling.temp = 0;
    nc_gen_result fresh, reused;
    nc_context *c2 = new_ctx(stories, 128, 512, false, NC_CACHE_F16);
    CHECK(nc_generate(c2, stories, prompt, 12, &gp, NULL, NULL, &fresh, &err) == 0 && fresh.n_cached == 0);
    CHECK(nc_kv_seq_save(c2, 0, 12, path, NULL, &err) == 0);
    nc_context_free(c2);
    c2 = new_ctx(stories, 128, 512, false, NC_CACHE_F16);
    nc_kv_file *f;
    CHECK(nc_kv_file_open(&f, c2, path, &err) == 0 && nc_kv_file_load(f, 0, 12, &err) == 0);
    nc_kv_file_close(f);
    CHECK(nc_generate(c2, stories, prompt, 12, &gp, NULL, NULL, &reused, &err) == 0 && reused.n_cached == 11);
    CHECK(fresh.samples[0].n_tokens == reused.samples[0].n_tokens &&
          !memcmp(fresh.samples[0].tokens, reused.samples[0].tokens, (size_t)fresh.samples[0].n_tokens * sizeof(int32_t)));
    nc_gen_result_free(&reused);
    /* a different prompt takes only the common part */
    prompt[6] = 300;
    CHECK(nc_generate(c2, stories, prompt, 12, &gp, NULL, NULL, &reused, &err) == 0 && reused.n_cached == 6);
    nc_gen_result_free(&reused);
    nc_gen_result_free(&fresh);
    nc_context_free(c2);

    /* a context too small for the file's cells loads a prefix of them */
    c2 = new_ctx(stories, 8, 512, false, NC_CACHE_F16);
    CHECK(nc_kv_file_open(&f, c2, path, &err) == 0);
    CHECK(nc_kv_file_load(f, 0, 8, &err) == 0 && nc_kv_seq_len(c2, 0) == 8);
    CHECK(nc_kv_file_load(f, 0, 12, &err) == -1 && has(&err, "do not fit a context of 8") && nc_kv_seq_len(c2, 0) == 8);
    CHECK(nc_kv_file_load(f, 1, 8, &err) == -1 && has(&err, "sequence id 1"));
    nc_kv_file_close(f);
    nc_context_free(c2);

    /* another model, other key and value types */
    nc_context *ct = new_ctx(tiny, 64, 512, false, NC_CACHE_F16), *c32 = new_ctx(stories, 64, 512, false, NC_CACHE_F32);
    CHECK(nc_kv_file_open(&f, ct, path, &err) == -1 && has(&err, path) && has(&err, "written for another model"));
    CHECK(nc_kv_file_open(&f, c32, path, &err) == -1 && has(&err, "its cache keeps keys as F16 and values as F16; this context keeps F32 and F32"));
    CHECK(nc_kv_file_open(&f, c, tmp_path("missing.kv"), &err) == -1 && has(&err, "missing.kv: cannot open"));
    CHECK(nc_kv_file_open(&f, c, tmp_dir, &err) == -1 && has(&err, "not a regular file"));
    check_model_round_trip(stories, c32, 512, NC_CACHE_F32, 20, "stories260K, F32 cache");
    nc_context_free(ct);
    nc_context_free(c32);
    nc_context_free(c);

    /* Gemma 3 (sliding window 8 on 5 of 6 layers): with micro-batches of 7 its sliding layers keep
     * rings of 256 cells. A ring still holding the whole prompt saves it; once it has dropped
     * positions, saving is refused unless the context keeps every position (swa_full), and such
     * a file loads into a ring. */
    nc_context *rings = new_ctx(gemma, 2048, 7, false, NC_CACHE_F16), *full = new_ctx(gemma, 2048, 7, true, NC_CACHE_F16);
    check_model_round_trip(gemma, rings, 7, NC_CACHE_F16, 200, "gemma3, rings");
    check_model_round_trip(gemma, full, 7, NC_CACHE_F16, 300, "gemma3, every position, loaded into rings");
    check_model_round_trip(gemma, full, 512, NC_CACHE_F16, 300, "gemma3, every position, loaded into rings of 768");
    int32_t tok[300];
    for (int32_t i = 0; i < 300; i++) tok[i] = (5 + 37 * i) % 1024;
    nc_kv_seq_clear(rings, 0);
    CHECK(run_tokens(rings, tok, 0, 300, &err));
    CHECK(nc_kv_seq_save(rings, 0, 0, tmp_path("rings.kv"), NULL, &err) == -1 && has(&err, "swa_full"));
    nc_context_free(rings);
    nc_context_free(full);

    /* quantised caches (Qwen3: heads of 32): the rows go to the file and back as they are kept */
    for (nc_cache_type t = NC_CACHE_Q8_0; t <= NC_CACHE_Q4_0; t++) {
        nc_context *q = new_ctx(qwen3, 2048, 512, false, t);
        check_model_round_trip(qwen3, q, 512, t, 100, t == NC_CACHE_Q8_0 ? "qwen3, q8_0 cache" : "qwen3, q4_0 cache");
        nc_context_free(q);
    }
    nc_model_free(stories);
    nc_model_free(tiny);
    nc_model_free(gemma);
    nc_model_free(qwen3);
}

static void remove_tmp_dir(void) {
    DIR *d = opendir(tmp_dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') unlink(tmp_path(e->d_name));
    if (d) closedir(d);
    rmdir(tmp_dir);
}

int main(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/nc_kv_file_XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    const uint32_t types[] = {GGML_TYPE_F16, GGML_TYPE_F32, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) check_round_trip(types[i], types[j]);
    check_ring();
    check_prefix_cache();
    check_hostile();
    check_state_file();
    check_models();
    /* failed saves leave no temporary files */
    DIR *d = opendir(tmp_dir);
    struct dirent *e;
    int stray = 0;
    while (d && (e = readdir(d))) stray += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    CHECK(stray == 0);
    remove_tmp_dir();
    return test_summary("kv_file");
}
