#include <stdlib.h>
#include <string.h>

#include "format/ggml_types.h"
#include "kv/kv_cache.h"
#include "tensor/quant.h"
#include "test.h"

static const uint32_t TYPES[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};
#define N_TYPES (sizeof TYPES / sizeof TYPES[0])
#define MAX_DIM 64

static bool quantised(uint32_t type) { return type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0; }

/* Bytes of n elements, from the formats: 4 and 2 a float, 34 and 18 per block of 32. */
static size_t cell_bytes(uint32_t type, int n) {
    switch (type) {
    case GGML_TYPE_F32: return 4 * (size_t)n;
    case GGML_TYPE_F16: return 2 * (size_t)n;
    case GGML_TYPE_Q8_0: return 34 * (size_t)n / 32;
    default: return 18 * (size_t)n / 32;
    }
}

/* What a cache of `type` holds for x[0..n): x itself, rounded to F16, or through the block format
 * (the tensor module's writer and reader, which test_quant checks against ggml's). */
static void stored(uint32_t type, const float *x, int n, float *out) {
    if (quantised(type)) {
        uint8_t blocks[MAX_DIM / 32 * 34];
        CHECK(quant_quantize_row(type, x, blocks, n));
        quant_dequantize_row(type, blocks, out, n);
    } else {
        for (int i = 0; i < n; i++) out[i] = type == GGML_TYPE_F16 ? quant_fp16_to_f32(quant_f32_to_fp16(x[i])) : x[i];
    }
}

/* The largest error of the format for a block whose largest magnitude is amax: F16 2^-11
 * relative; Q8_0 half a step of amax / 127 plus the F16 rounding of the scale (times |q| <= 127);
 * Q4_0 a whole step of amax / 8 (the top code 15 is 7 steps up, where -amax would need 8) plus
 * the scale's rounding (times |q - 8| <= 8). */
static float format_error(uint32_t type, float amax) {
    switch (type) {
    case GGML_TYPE_F32: return 0;
    case GGML_TYPE_F16: return amax / 2048;
    case GGML_TYPE_Q8_0: return amax * (0.5f / 127 + 1.0f / 2048);
    default: return amax * (1.0f / 8 + 8.0f / 8 / 2048);
    }
}

/* x's round trip through `type` stays within the format's error, block by block. */
static bool within_error(uint32_t type, const float *x, const float *y, int n) {
    for (int b = 0; b < n; b += 32) {
        float amax = 0;
        for (int i = b; i < b + 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        for (int i = b; i < b + 32; i++)
            if (fabsf(x[i] - y[i]) > format_error(type, amax)) return false;
    }
    return true;
}

/* Element (r, c) of a matrix attention reads. */
static float mat_at(kv_mat m, int r, int c) {
    const uint8_t *p = m.a + (size_t)r * m.row_bytes;
    if (m.type == GGML_TYPE_F16) {
        uint16_t h;
        memcpy(&h, p + 2 * (size_t)c, 2);
        return quant_fp16_to_f32(h);
    }
    float x;
    memcpy(&x, p + 4 * (size_t)c, 4);
    return x;
}

/* Key and value of a token as the tests write them: dimension d of token t. */
static float key_of(int32_t t, int d) { return (float)(t % 1000) + 0.125f * d; }
static float val_of(int32_t t, int d) { return -(float)(t % 1000) - 0.25f * d; }

static void token_kv(const kv_cache *kv, int32_t tok, float *k, float *v) {
    for (int d = 0; d < kv->kv_dim; d++) {
        k[d] = key_of(tok, d);
        v[d] = val_of(tok, d);
    }
}

static int32_t put(kv_cache *kv, int32_t seq, int32_t pos, int32_t tok) {
    nc_err err;
    int32_t c = kv_append(kv, seq, pos, tok, &err);
    if (c < 0) return c;
    kv_ring_claim(kv, seq, pos);
    float k[MAX_DIM], v[MAX_DIM];
    token_kv(kv, tok, k, v);
    for (int l = 0; l < kv->n_layer; l++) kv_store(kv, l, seq, c, pos, 0, kv->kv_dim, k, v);
    return c;
}

/* Dimension d of token tok's key / value as kv stores it. */
static float stored_key(const kv_cache *kv, int32_t tok, int d) {
    float k[MAX_DIM], v[MAX_DIM], e[MAX_DIM];
    token_kv(kv, tok, k, v);
    stored(kv->type_k, k, kv->kv_dim, e);
    return e[d];
}

static float stored_val(const kv_cache *kv, int32_t tok, int d) {
    float k[MAX_DIM], v[MAX_DIM], e[MAX_DIM];
    token_kv(kv, tok, k, v);
    stored(kv->type_v, v, kv->kv_dim, e);
    return e[d];
}

/* Every cell of seq holds the keys and values of its token as the types store them, in every layer. */
static bool holds(const kv_cache *kv, int32_t seq) {
    float k[MAX_DIM], v[MAX_DIM], ek[MAX_DIM], ev[MAX_DIM];
    for (int32_t c = 0; c < kv_seq_len(kv, seq); c++) {
        token_kv(kv, kv_tokens(kv, seq)[c], k, v);
        stored(kv->type_k, k, kv->kv_dim, ek);
        stored(kv->type_v, v, kv->kv_dim, ev);
        for (int l = 0; l < kv->n_layer; l++)
            for (int d = 0; d < kv->kv_dim; d++)
                if (kv_get_k(kv, l, seq, c, d) != ek[d] || kv_get_v(kv, l, seq, c, d) != ev[d]) return false;
    }
    return true;
}

/* Keys and values of the types tk / tv, 2 heads of 32 dimensions: the stored elements, the
 * layouts attention reads, sequences and copy-on-write. */
static void check_type(uint32_t tk, uint32_t tv) {
    kv_cache kv;
    nc_err err;
    kv_config cfg = {.n_layer = 2, .n_seq = 3, .n_ctx = 4, .n_head_kv = 2, .head_dim = 32, .type_k = tk, .type_v = tv};
    CHECK(kv_init(&kv, &cfg, &err) == 0);
    size_t kc = cell_bytes(tk, 64), vc = cell_bytes(tv, 64);
    CHECK(kv_bytes_per_token(&kv) == 2 * (kc + vc));
    CHECK(kv.n_blocks == 3 && kv_bytes_total(&kv) == 3ull * KV_BLOCK * 2 * (kc + vc)); /* a block per sequence */
    /* cells fill in order, positions must increase */
    CHECK(kv_append(&kv, 0, 0, 5, &err) == 0);
    CHECK(kv_append(&kv, 0, 1, 6, &err) == 1);
    CHECK(kv_append(&kv, 0, 1, 6, &err) == -1 && strstr(err.msg, "position 1") != NULL);
    CHECK(kv_append(&kv, 0, 5, 7, &err) == 2); /* gaps are allowed */
    CHECK(kv_append(&kv, 3, 0, 5, &err) == -1 && strstr(err.msg, "sequence id 3") != NULL);
    CHECK(kv_append(&kv, -1, 0, 5, &err) == -1);
    CHECK(kv_append(&kv, 0, 6, 8, &err) == 3);
    CHECK(kv_append(&kv, 0, 7, 9, &err) == -1 && strstr(err.msg, "full") != NULL);
    CHECK(kv_get_stats(&kv).used == 1 && kv_get_stats(&kv).free == 2);
    /* keys and values read back as the type stores them, within its error */
    float k[64], v[64], ek[64], ev[64], got_k[64], got_v[64];
    for (int i = 0; i < 64; i++) { k[i] = 0.1f * i + 1 - (i % 7) * 0.3f; v[i] = -2.0f * i + (i % 5); }
    stored(tk, k, 64, ek);
    stored(tv, v, 64, ev);
    kv_store(&kv, 1, 0, 2, 5, 0, 64, k, v);
    for (int d = 0; d < 64; d++) {
        got_k[d] = kv_get_k(&kv, 1, 0, 2, d);
        got_v[d] = kv_get_v(&kv, 1, 0, 2, d);
    }
    CHECK(!memcmp(got_k, ek, sizeof ek) && !memcmp(got_v, ev, sizeof ev));
    CHECK(within_error(tk, k, got_k, 64) && within_error(tv, v, got_v, 64));
    /* a head at a time (as the forward pass stores them) leaves the other head alone */
    kv_store(&kv, 1, 0, 3, 6, 32, 32, k + 32, NULL);
    CHECK(kv_get_k(&kv, 1, 0, 3, 0) == 0.0f && kv_get_k(&kv, 1, 0, 3, 40) == ek[40] && kv_get_v(&kv, 1, 0, 3, 40) == 0);
    /* the span of cells 0..255: labels are the positions; float keys are transposed (the row of
     * dimension d holds cell c at element c), quantised keys and all values by cell */
    kv_span sp = kv_span_at(&kv, 1, 0, 0);
    CHECK(sp.label[2] == 5 && sp.v_row == vc && sp.k_row == (quantised(tk) ? kc : KV_BLOCK * cell_bytes(tk, 1)));
    /* what attention reads of head 1: keys [32][cells], values [cells][32]; floats in place,
     * quantised types dequantised into the scratch */
    size_t nf = kv_scratch_floats(&kv);
    CHECK(nf >= (quantised(tk) || quantised(tv) ? (KV_BLOCK + 1) * 32u : 0u) && (nf == 0) == (!quantised(tk) && !quantised(tv)));
    float *sk = nf ? malloc(nf * sizeof(float)) : NULL, *sv = nf ? malloc(nf * sizeof(float)) : NULL;
    kv_mat km = kv_span_keys(&kv, &sp, 1, 4, sk), vm = kv_span_values(&kv, &sp, 1, 4, sv);
    CHECK(quantised(tk) ? km.a == (const uint8_t *)sk : km.a == sp.k + 32 * sp.k_row);
    CHECK(quantised(tv) ? vm.a == (const uint8_t *)sv : vm.a == sp.v + cell_bytes(tv, 32));
    bool same = true;
    for (int d = 0; d < 32; d++) {
        same = same && mat_at(km, d, 2) == ek[32 + d] && mat_at(vm, 2, d) == ev[32 + d];
        same = same && mat_at(km, d, 3) == ek[32 + d] && mat_at(vm, 3, d) == 0 && mat_at(km, d, 0) == 0;
    }
    CHECK(same);
    free(sk);
    free(sv);
    /* sequences hold separate blocks */
    CHECK(kv_append(&kv, 1, 0, 5, &err) == 0);
    CHECK(kv_get_k(&kv, 1, 1, 0, 3) == 0.0f);
    CHECK(kv_span_at(&kv, 1, 1, 0).k != sp.k);
    /* a copy shares the block until one of them writes */
    CHECK(kv_seq_copy(&kv, 0, 2, &err) == 0);
    CHECK(kv_seq_len(&kv, 2) == 4 && kv_positions(&kv, 2)[2] == 5 && kv_get_stats(&kv).used == 2);
    CHECK(kv_get_k(&kv, 1, 2, 2, 0) == ek[0] && kv_get_v(&kv, 1, 2, 2, 63) == ev[63]);
    CHECK(kv_seq_copy(&kv, 0, 9, &err) == -1);
    /* truncate then append: the shared block is copied first, the copy keeps its cells */
    kv_seq_truncate(&kv, 0, 2);
    CHECK(kv_seq_len(&kv, 0) == 2 && kv_blocks_needed(&kv, 0, 1) == 1);
    CHECK(kv_append(&kv, 0, 2, 9, &err) == 2 && kv_get_stats(&kv).used == 3);
    float e100[64];
    for (int i = 0; i < 64; i++) k[i] = 100;
    stored(tk, k, 64, e100);
    kv_store(&kv, 1, 0, 2, 2, 0, 64, k, NULL);
    CHECK(kv_get_k(&kv, 1, 0, 2, 0) == e100[0] && kv_get_k(&kv, 1, 2, 2, 0) == ek[0]);
    CHECK(kv_get_v(&kv, 1, 2, 2, 63) == ev[63] && kv_get_k(&kv, 1, 2, 3, 40) == ek[40]);
    CHECK(kv_get_k(&kv, 1, 0, 0, 0) == kv_get_k(&kv, 1, 2, 0, 0));
    kv_seq_truncate(&kv, 0, 0);
    CHECK(kv_seq_len(&kv, 0) == 0 && kv_append(&kv, 0, 0, 5, &err) == 0);
    kv_free(&kv);
}

/* A sliding layer kept in a ring of 256 cells beside a full layer: position p lives in cell
 * p % 256 of the ring; the ring's labels say which position each cell holds; a truncation that
 * drops positions the ring had overwritten older ones with leaves a hole that windows reaching
 * back to it report, and that clears once the window has moved past it. */
static void check_ring(uint32_t type) {
    kv_cache kv;
    nc_err err;
    kv_config cfg = {.n_layer = 2, .n_seq = 2, .n_ctx = 1000, .n_head_kv = 1, .head_dim = 32, .type_k = type,
                     .type_v = type, .ring = 300, .ring_layer = (bool[]){true, false}};
    CHECK(kv_init(&kv, &cfg, &err) == -1 && strstr(err.msg, "multiple of 256") != NULL);
    cfg.ring = 256;
    CHECK(kv_init(&kv, &cfg, &err) == 0);
    CHECK(kv_is_ring(&kv, 0) && !kv_is_ring(&kv, 1));
    size_t cell = cell_bytes(type, 32);
    CHECK(kv_span_at(&kv, 0, 0, 0).k_row == (quantised(type) ? cell : 256 * cell_bytes(type, 1)));
    /* the ring costs its cells whatever the context; the full layer its pool (4 blocks a sequence) */
    CHECK(kv_bytes_per_token(&kv) == 2 * cell && kv_bytes_total(&kv) == 2 * cell * (256 * 2 + 8 * 256));
    for (int p = 0; p < 600; p++) CHECK(put(&kv, 0, p, p) == p);
    const int32_t *lab = kv_ring_positions(&kv, 0);
    CHECK(lab[599 % 256] == 599 && lab[344 % 256] == 344 && lab[343 % 256] == 599); /* 343 was overwritten */
    CHECK(kv_get_k(&kv, 0, 0, 599, 0) == stored_key(&kv, 599, 0) && kv_get_v(&kv, 0, 0, 400, 1) == stored_val(&kv, 400, 1));
    CHECK(kv_get_k(&kv, 1, 0, 343, 0) == stored_key(&kv, 343, 0)); /* the full layer keeps everything */
    CHECK(kv_span_at(&kv, 0, 0, 512).label == lab); /* positions 512.. are the ring's cells 0.. */
    CHECK(kv_window_check(&kv, 0, 600, 200, &err) == 0);
    /* back by 10: positions 590..599 had overwritten 334..343, which a window of 250 from 590
     * (341..590) needs and one of 247 (344..590) does not */
    kv_seq_truncate(&kv, 0, 590);
    CHECK(kv_seq_len(&kv, 0) == 590 && lab[595 % 256] == -1 && lab[589 % 256] == 589);
    CHECK(kv_window_check(&kv, 0, 590, 250, &err) == -1 && strstr(err.msg, "lost position 343") != NULL);
    CHECK(kv_window_check(&kv, 0, 590, 248, &err) == -1 && kv_window_check(&kv, 0, 590, 247, &err) == 0);
    CHECK(kv_window_check(&kv, 0, 594, 250, &err) == 0); /* the window moved past the hole */
    /* copies carry the labels, data and hole */
    CHECK(kv_seq_copy(&kv, 0, 1, &err) == 0);
    CHECK(kv_ring_positions(&kv, 1)[589 % 256] == 589 && kv_get_k(&kv, 0, 1, 589, 31) == stored_key(&kv, 589, 31));
    CHECK(kv_get_v(&kv, 0, 1, 400, 5) == stored_val(&kv, 400, 5));
    CHECK(kv_window_check(&kv, 1, 590, 250, &err) == -1);
    /* a ring is no prefix: nothing is reused */
    kv_commit(&kv);
    kv_seq_truncate(&kv, 1, 0);
    CHECK(kv_seq_reuse_prefix(&kv, 1, kv_tokens(&kv, 0), 500) == 0);
    /* clearing forgets everything */
    kv_seq_truncate(&kv, 0, 0);
    CHECK(kv_window_check(&kv, 0, 0, 250, &err) == 0 && lab[589 % 256] == -1);
    kv_free(&kv);
}

/* Prefix sharing: whole blocks found again by their chained hash and shared, the block that
 * matches in part copied up to where it differs; held and released blocks alike. */
static void check_prefix(uint32_t type) {
    kv_cache kv;
    nc_err err;
    kv_config cfg = {.n_layer = 2, .n_seq = 3, .n_ctx = 1024, .n_head_kv = 1, .head_dim = 32, .type_k = type,
                     .type_v = type, .n_cells = 12 * KV_BLOCK};
    CHECK(kv_init(&kv, &cfg, &err) == 0);
    int32_t tok[1024];
    for (int i = 0; i < 1024; i++) tok[i] = 7 * i + 3;
    for (int p = 0; p < 600; p++) put(&kv, 0, p, tok[p]);
    kv_commit(&kv);
    CHECK(kv_get_stats(&kv).used == 3);
    /* while seq 0 holds them: 2 blocks shared, 88 cells of the third copied */
    CHECK(kv_seq_reuse_prefix(&kv, 1, tok, 600) == 600);
    CHECK(kv_get_stats(&kv).used == 4 && holds(&kv, 1) && kv_positions(&kv, 1)[599] == 599);
    CHECK(kv_seq_reuse_prefix(&kv, 1, tok, 600) == 0); /* only empty sequences */
    kv_seq_truncate(&kv, 1, 0);
    /* a prompt that differs at 300 takes the first block and 44 cells of the second */
    int32_t other[700];
    memcpy(other, tok, sizeof other);
    other[300] = 1;
    CHECK(kv_seq_reuse_prefix(&kv, 1, other, 700) == 300 && holds(&kv, 1));
    /* a sequence that continues differently copies the shared block it writes into... */
    kv_seq_truncate(&kv, 1, 0);
    CHECK(kv_seq_reuse_prefix(&kv, 1, tok, 599) == 599);
    CHECK(put(&kv, 1, 599, 5) == 599 && holds(&kv, 1) && holds(&kv, 0));
    /* ... and whose positions do not start at 0 shares nothing */
    for (int p = 0; p < 300; p++) put(&kv, 2, p + 10, tok[p]);
    kv_commit(&kv);
    kv_seq_truncate(&kv, 1, 0);
    kv_seq_truncate(&kv, 2, 0);
    kv_seq_truncate(&kv, 0, 0);
    /* released: the full blocks and the partial ones (seq 0's, and the copies) stay cached; the
     * blocks of positions 10.. are free */
    kv_stats st = kv_get_stats(&kv);
    CHECK(st.used == 0 && st.cached == 6 && st.free == 6);
    CHECK(kv_seq_reuse_prefix(&kv, 2, tok, 1024) == 600 && holds(&kv, 2));
    kv_seq_truncate(&kv, 2, 0);
    /* the pool runs out: new prompts take the free blocks, then the oldest cached ones */
    for (int p = 0; p < 1024; p++) put(&kv, 0, p, 100000 + p);
    for (int p = 0; p < 1024; p++) put(&kv, 1, p, 200000 + p);
    CHECK(kv_blocks_available(&kv) == 4 && kv_blocks_needed(&kv, 2, 1024) == 4);
    for (int p = 0; p < 1024; p++) CHECK(put(&kv, 2, p, 300000 + p) == p);
    CHECK(kv_get_stats(&kv).evictions == 6 && kv_blocks_available(&kv) == 0);
    CHECK(kv_append(&kv, 0, 5000, 1, &err) == -1 && strstr(err.msg, "full") != NULL);
    kv_seq_truncate(&kv, 0, 1000);
    CHECK(kv_append(&kv, 0, 2000, 1, &err) == 1000); /* its own block */
    kv_seq_truncate(&kv, 1, 0);
    kv_seq_truncate(&kv, 2, 0);
    CHECK(kv_seq_reuse_prefix(&kv, 1, tok, 600) == 0);
    st = kv_get_stats(&kv);
    CHECK(st.lookups == 5 && st.hits == 4 && st.tokens_reused == 600 + 300 + 599 + 600);
    kv_free(&kv);
    /* a lone sequence filling a pool of one block it shares with the prefix index: keeping some of
     * its cells takes the block from the index (no copy can be made), and the prefix is gone */
    kv_config one = {.n_layer = 1, .n_seq = 2, .n_ctx = KV_BLOCK, .n_head_kv = 1, .head_dim = 32, .type_k = type,
                     .type_v = type, .n_cells = KV_BLOCK};
    CHECK(kv_init(&kv, &one, &err) == 0 && kv.n_blocks == 1);
    for (int p = 0; p < KV_BLOCK; p++) put(&kv, 0, p, tok[p]);
    kv_commit(&kv);
    int32_t cells[KV_BLOCK], moved[KV_BLOCK];
    for (int i = 0; i < KV_BLOCK - 100; i++) { cells[i] = i < 4 ? i : i + 100; moved[i] = i; }
    CHECK(kv_seq_keep(&kv, 0, cells, KV_BLOCK - 100, moved, NULL, &err) == 0 && holds(&kv, 0));
    CHECK(kv_seq_len(&kv, 0) == KV_BLOCK - 100 && kv_tokens(&kv, 0)[4] == tok[104]);
    kv_seq_truncate(&kv, 0, 0);
    CHECK(kv_seq_reuse_prefix(&kv, 1, tok, KV_BLOCK) == 0);
    kv_free(&kv);
    /* with room in the pool the block is copied and the prefix stays found */
    one.n_cells = 2 * KV_BLOCK;
    CHECK(kv_init(&kv, &one, &err) == 0);
    for (int p = 0; p < KV_BLOCK; p++) put(&kv, 0, p, tok[p]);
    kv_commit(&kv);
    CHECK(kv_seq_keep(&kv, 0, cells, KV_BLOCK - 100, moved, NULL, &err) == 0 && holds(&kv, 0));
    CHECK(kv_seq_reuse_prefix(&kv, 1, tok, KV_BLOCK) == KV_BLOCK && holds(&kv, 1));
    kv_free(&kv);
    /* a pool smaller than the sequences' contexts: claiming fails with a clear message */
    cfg.n_layer = 1;
    cfg.n_seq = 2;
    cfg.n_cells = 300;
    CHECK(kv_init(&kv, &cfg, &err) == 0 && kv.n_blocks == 2);
    for (int p = 0; p < 512; p++) CHECK(put(&kv, 0, p, p) == p);
    CHECK(kv_append(&kv, 1, 0, 1, &err) == -1 && strstr(err.msg, "pool is exhausted") != NULL);
    kv_free(&kv);
}

/* Moving cells (kv_seq_keep): each kept cell holds its token's keys and values at its new
 * position, in runs that cross blocks and in the ring of a sliding layer, whatever the type. */
static void check_keep(uint32_t type) {
    kv_cache kv;
    nc_err err;
    kv_config cfg = {.n_layer = 2, .n_seq = 1, .n_ctx = 1024, .n_head_kv = 2, .head_dim = 32, .type_k = type,
                     .type_v = type, .ring = 256, .ring_layer = (bool[]){true, false}};
    CHECK(kv_init(&kv, &cfg, &err) == 0);
    for (int p = 0; p < 700; p++) CHECK(put(&kv, 0, p, 1000 + p) == p);
    /* three sinks, a run across the block boundary at 256, a run at the end in the ring's window */
    int32_t cells[300], pos[300], old[300], n = 0;
    for (int c = 0; c < 3; c++) cells[n++] = c;
    for (int c = 200; c < 400; c++) cells[n++] = c;
    for (int c = 650; c < 700; c++) cells[n++] = c;
    for (int i = 0; i < n; i++) pos[i] = 2 * i;
    CHECK(kv_seq_keep(&kv, 0, cells, n, pos, old, &err) == 0 && kv_seq_len(&kv, 0) == n);
    CHECK(old[3] == 200 && old[n - 1] == 699 && kv_positions(&kv, 0)[n - 1] == 2 * (n - 1));
    bool same = true;
    for (int i = 0; i < n; i++) {
        same &= kv_tokens(&kv, 0)[i] == 1000 + cells[i];
        for (int d = 0; d < 64; d += 7) {
            same &= kv_get_k(&kv, 1, 0, i, d) == stored_key(&kv, 1000 + cells[i], d) &&
                    kv_get_v(&kv, 1, 0, i, d) == stored_val(&kv, 1000 + cells[i], d);
            /* the ring held positions 444..699 of which the kept 650..699 moved */
            if (cells[i] >= 650)
                same &= kv_holds(&kv, 0, 0, i) && kv_get_k(&kv, 0, 0, i, d) == stored_key(&kv, 1000 + cells[i], d) &&
                        kv_get_v(&kv, 0, 0, i, d) == stored_val(&kv, 1000 + cells[i], d);
        }
    }
    char name[24];
    CHECK_MSG(same, "%s: kept cells lost their keys or values", ggml_type_name(type, name));
    CHECK(!kv_holds(&kv, 0, 0, 3)); /* position 200 had left the ring */
    float k[64];
    kv_read_k(&kv, 1, 0, n - 1, k);
    CHECK(k[33] == stored_key(&kv, 1699, 33));
    kv_free(&kv);
}

/* A copy of the cells kept elsewhere (kv_set_mirror; the GPU's cache): the token each pool slot
 * holds, written where the cache says a cell lives and moved as the cache reports. */
static int32_t mirror_tok[4 * KV_BLOCK];

static void mirror_move(void *ctx, int32_t dst, int32_t to, int32_t src, int32_t from, int32_t n) {
    memmove(mirror_tok + dst * KV_BLOCK + to, mirror_tok + src * KV_BLOCK + from, (size_t)n * sizeof *mirror_tok);
}

static void mirror_put(kv_cache *kv, int32_t seq, int32_t pos, int32_t tok) {
    int32_t c = put(kv, seq, pos, tok);
    CHECK(c >= 0);
    if (c >= 0) mirror_tok[kv_cell_slot(kv, seq, c)] = tok;
}

/* The mirror holds every cell of every sequence, where kv_cell_slot says. */
static bool mirrored(const kv_cache *kv) {
    for (int32_t q = 0; q < kv_n_seq(kv); q++)
        for (int32_t c = 0; c < kv_seq_len(kv, q); c++)
            if (mirror_tok[kv_cell_slot(kv, q, c)] != kv_tokens(kv, q)[c]) return false;
    return true;
}

/* Copy-on-write, a partly shared prefix taken over, and kept cells moved all reach the mirror. */
static void check_mirror(void) {
    kv_cache kv;
    nc_err err;
    kv_config cfg = {.n_layer = 1, .n_seq = 3, .n_ctx = 600, .n_head_kv = 1, .head_dim = 8, .type_k = GGML_TYPE_F16,
                     .type_v = GGML_TYPE_F16, .n_cells = 4 * KV_BLOCK};
    CHECK(kv_init(&kv, &cfg, &err) == 0 && kv_pool_cells(&kv) == 4 * KV_BLOCK);
    kv_set_mirror(&kv, mirror_move, NULL);
    for (int p = 0; p < 300; p++) mirror_put(&kv, 0, p, 1000 + p);
    kv_commit(&kv);
    CHECK(kv_seq_copy(&kv, 0, 1, &err) == 0);
    mirror_put(&kv, 1, 300, 7); /* into the shared second block: a copy of its 44 cells first */
    CHECK(kv_cell_slot(&kv, 1, 299) != kv_cell_slot(&kv, 0, 299) && mirrored(&kv));
    int32_t cells[160], pos[160], n = 0;
    for (int c = 0; c < 10; c++) cells[n] = c, pos[n] = n, n++;
    for (int c = 150; c < 300; c++) cells[n] = c, pos[n] = n, n++;
    CHECK(kv_seq_keep(&kv, 0, cells, n, pos, NULL, &err) == 0); /* 150.. move down to 10.. */
    CHECK(kv_tokens(&kv, 0)[10] == 1150 && mirrored(&kv));
    int32_t toks[300];
    for (int i = 0; i < 300; i++) toks[i] = i < 280 ? 1000 + i : 5;
    CHECK(kv_seq_reuse_prefix(&kv, 2, toks, 300) == 280 && mirrored(&kv)); /* 256 shared, 24 copied */
    kv_free(&kv);
}

int main(void) {
    check_mirror();
    for (size_t i = 0; i < N_TYPES; i++) {
        check_ring(TYPES[i]);
        check_prefix(TYPES[i]);
        check_keep(TYPES[i]);
        for (size_t j = 0; j < N_TYPES; j++) check_type(TYPES[i], TYPES[j]);
    }
    kv_cache kv;
    nc_err err;
    /* absurd sizes and types fail cleanly */
    kv_config cfg = {.n_layer = 1, .n_seq = 1 << 20, .n_ctx = 1 << 20, .n_head_kv = 1, .head_dim = 1 << 20,
                     .type_k = GGML_TYPE_F16, .type_v = GGML_TYPE_F16};
    CHECK(kv_init(&kv, &cfg, &err) == -1 && strstr(err.msg, "too large") != NULL);
    cfg = (kv_config){.n_layer = 1, .n_seq = 1, .n_ctx = 1, .n_head_kv = 2, .head_dim = 48, .type_k = GGML_TYPE_F16,
                      .type_v = GGML_TYPE_Q5_0};
    CHECK(kv_init(&kv, &cfg, &err) == -1 && strstr(err.msg, "values of type Q5_0") != NULL &&
          strstr(err.msg, "F16, F32, Q8_0 and Q4_0") != NULL);
    /* quantised types need heads of whole blocks of 32 */
    cfg.type_v = GGML_TYPE_Q4_0;
    CHECK(kv_init(&kv, &cfg, &err) == -1 && strstr(err.msg, "head_dim 48 is not a multiple of 32") != NULL);
    cfg.type_k = GGML_TYPE_Q8_0;
    cfg.type_v = GGML_TYPE_F32;
    CHECK(kv_init(&kv, &cfg, &err) == -1 && strstr(err.msg, "keys of type Q8_0") != NULL);
    cfg.type_k = GGML_TYPE_F32;
    CHECK(kv_init(&kv, &cfg, &err) == 0 && kv_bytes_per_token(&kv) == 2 * 96 * 4);
    kv_free(&kv);
    return test_summary("kv");
}
