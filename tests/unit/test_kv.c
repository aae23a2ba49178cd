#include <stdlib.h>
#include <string.h>

#include "format/ggml_types.h"
#include "kv/kv_cache.h"
#include "tensor/quant.h"
#include "test.h"

static const uint32_t TYPES[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};
#define N_TYPES (sizeof TYPES / sizeof TYPES[0])
#define MAX_DIM 256

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

/* Key and value of a token as the tests write them: dimension d of token t in layer l. */
static float key_of(int32_t t, int l, int d) { return (float)(t % 1000) + 0.125f * d + 8.0f * l; }
static float val_of(int32_t t, int l, int d) { return -(float)(t % 1000) - 0.25f * d - 8.0f * l; }

/* A token's key row (kv_dim) and value row (v_dim) in layer l. */
static void token_kv(const kv_cache *kv, int l, int32_t tok, float *k, float *v) {
    for (int d = 0; d < kv->layer[l].kv_dim; d++) k[d] = key_of(tok, l, d);
    for (int d = 0; d < kv->layer[l].v_dim; d++) v[d] = val_of(tok, l, d);
}

/* Claim a cell and store its token's keys and values in every layer with cells, a head at a time
 * as the forward pass does (values of a layer that keeps them in its keys are not stored). */
static int32_t put(kv_cache *kv, int32_t seq, int32_t pos, int32_t tok) {
    nc_err err;
    int32_t c = kv_append(kv, seq, pos, tok, &err);
    if (c < 0) return c;
    kv_ring_claim(kv, seq, pos);
    float k[MAX_DIM], v[MAX_DIM];
    for (int l = 0; l < kv->n_layer; l++) {
        const kv_layer *L = &kv->layer[l];
        token_kv(kv, l, tok, k, v);
        for (int h = 0; h < L->n_head_kv; h++) {
            kv_store(kv, l, seq, c, pos, h * L->head_dim, L->head_dim, k + h * L->head_dim, NULL);
            if (!L->v_in_k) kv_store(kv, l, seq, c, pos, h * L->head_dim_v, L->head_dim_v, NULL, v + h * L->head_dim_v);
        }
    }
    return c;
}

/* Token tok's keys and values in layer l as kv stores them: kv_dim keys, v_dim values (those of a
 * layer keeping them in its keys: each key head's first head_dim_v dims). */
static void stored_kv(const kv_cache *kv, int l, int32_t tok, float *ek, float *ev) {
    const kv_layer *L = &kv->layer[l];
    float k[MAX_DIM], v[MAX_DIM];
    token_kv(kv, l, tok, k, v);
    stored(L->type_k, k, L->kv_dim, ek); /* the layer's types: latent rows keep theirs (kv_latent_type) */
    if (!L->v_in_k) stored(L->type_v, v, L->v_dim, ev);
    else
        for (int d = 0; d < L->v_dim; d++) ev[d] = ek[d / L->head_dim_v * L->head_dim + d % L->head_dim_v];
}

/* Dimension d of token tok's key / value in layer l as kv stores them. */
static float stored_key(const kv_cache *kv, int l, int32_t tok, int d) {
    float ek[MAX_DIM], ev[MAX_DIM];
    stored_kv(kv, l, tok, ek, ev);
    return ek[d];
}

static float stored_val(const kv_cache *kv, int l, int32_t tok, int d) {
    float ek[MAX_DIM], ev[MAX_DIM];
    stored_kv(kv, l, tok, ek, ev);
    return ev[d];
}

/* Every cell of seq holds the keys and values of its token as the types store them, in every
 * layer with cells (kv_get_v of a layer keeping values in its keys reads them there). */
static bool holds(const kv_cache *kv, int32_t seq) {
    float ek[MAX_DIM], ev[MAX_DIM];
    for (int32_t c = 0; c < kv_seq_len(kv, seq); c++)
        for (int l = 0; l < kv->n_layer; l++) {
            if (!kv_has_cells(kv, l)) continue;
            stored_kv(kv, l, kv_tokens(kv, seq)[c], ek, ev);
            for (int d = 0; d < kv->layer[l].kv_dim; d++)
                if (kv_get_k(kv, l, seq, c, d) != ek[d]) return false;
            for (int d = 0; d < kv->layer[l].v_dim; d++)
                if (kv_get_v(kv, l, seq, c, d) != ev[d]) return false;
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
    kv_mat km = kv_span_keys(&kv, 1, &sp, 1, 4, sk), vm = kv_span_values(&kv, 1, &sp, 1, 4, sv);
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
    CHECK(kv_get_k(&kv, 0, 0, 599, 0) == stored_key(&kv, 0, 599, 0) && kv_get_v(&kv, 0, 0, 400, 1) == stored_val(&kv, 0, 400, 1));
    CHECK(kv_get_k(&kv, 1, 0, 343, 0) == stored_key(&kv, 1, 343, 0)); /* the full layer keeps everything */
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
    CHECK(kv_ring_positions(&kv, 1)[589 % 256] == 589 && kv_get_k(&kv, 0, 1, 589, 31) == stored_key(&kv, 0, 589, 31));
    CHECK(kv_get_v(&kv, 0, 1, 400, 5) == stored_val(&kv, 0, 400, 5));
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
            same &= kv_get_k(&kv, 1, 0, i, d) == stored_key(&kv, 1, 1000 + cells[i], d) &&
                    kv_get_v(&kv, 1, 0, i, d) == stored_val(&kv, 1, 1000 + cells[i], d);
            /* the ring held positions 444..699 of which the kept 650..699 moved */
            if (cells[i] >= 650)
                same &= kv_holds(&kv, 0, 0, i) && kv_get_k(&kv, 0, 0, i, d) == stored_key(&kv, 0, 1000 + cells[i], d) &&
                        kv_get_v(&kv, 0, 0, i, d) == stored_val(&kv, 0, 1000 + cells[i], d);
        }
    }
    char name[24];
    CHECK_MSG(same, "%s: kept cells lost their keys or values", ggml_type_name(type, name));
    CHECK(!kv_holds(&kv, 0, 0, 3)); /* position 200 had left the ring */
    float k[64];
    kv_read_k(&kv, 1, 0, n - 1, k);
    CHECK(k[33] == stored_key(&kv, 1, 1699, 33));
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

/* Layers of their own shapes: two heads of 32, one head of 64, none (a layer keeping no cells),
 * and values inside the keys (two latent heads of 80 dimensions whose first 64 are their values;
 * 96 for quantised keys, which take whole blocks of 32). Each layer stores and reads back its own
 * rows, attention reads each layer's spans in the layer's layout, copies and kept cells carry
 * every layer, and only layers with cells cost bytes. */
static void check_shapes(uint32_t tk, uint32_t tv) {
    kv_cache kv;
    nc_err err;
    int mla = quantised(tk) ? 96 : 80;
    kv_layer_config layers[4] = {{.n_head_kv = 2, .head_dim = 32, .head_dim_v = 32},
                                 {.n_head_kv = 1, .head_dim = 64, .head_dim_v = 64},
                                 {.n_head_kv = 0},
                                 {.n_head_kv = 2, .head_dim = mla, .head_dim_v = 64, .v_in_k = true}};
    kv_config cfg = {.n_layer = 4, .n_seq = 2, .n_ctx = 600, .layers = layers, .type_k = tk, .type_v = tv};
    CHECK_MSG(kv_init(&kv, &cfg, &err) == 0, "%s", err.msg);
    CHECK(kv_has_cells(&kv, 0) && kv_has_cells(&kv, 1) && !kv_has_cells(&kv, 2) && kv_has_cells(&kv, 3));
    CHECK(kv.layer[0].kv_dim == 64 && kv.layer[0].v_dim == 64 && kv.layer[1].kv_dim == 64 && kv.layer[2].kv_dim == 0 &&
          kv.layer[2].v_dim == 0 && kv.layer[3].kv_dim == 2 * mla && kv.layer[3].v_dim == 128 && kv.layer[3].v_in_k);
    uint32_t tl = kv_latent_type(tk); /* latent rows: F32 where the keys are F16 */
    size_t k64 = cell_bytes(tk, 64), v64 = cell_bytes(tv, 64), kl = cell_bytes(tl, 2 * mla);
    CHECK(kv.layer[3].type_k == tl && kv.layer[3].type_v == tl && kv.layer[0].type_k == tk && kv.layer[0].type_v == tv);
    CHECK(kv_k_row_bytes(&kv, 0) == k64 && kv_v_row_bytes(&kv, 0) == v64 && kv_k_row_bytes(&kv, 1) == k64 &&
          kv_v_row_bytes(&kv, 1) == v64 && kv_k_row_bytes(&kv, 2) == 0 && kv_v_row_bytes(&kv, 2) == 0 &&
          kv_k_row_bytes(&kv, 3) == kl && kv_v_row_bytes(&kv, 3) == 0);
    /* a token costs the rows of the layers with cells; the latent layer its keys alone */
    CHECK(kv_bytes_per_token(&kv) == 2 * (k64 + v64) + kl);
    CHECK(kv_bytes_total(&kv) == (uint64_t)kv.n_blocks * KV_BLOCK * (2 * (k64 + v64) + kl));
    CHECK(!kv_recurrent(&kv) && kv_state_bytes(&kv) == 0 && kv_state_restore_point(&kv, 0, 5) == 5);
    /* the latent layer's keys are kept by cell: converted for attention into scratch */
    size_t nf = kv_scratch_floats(&kv);
    CHECK(nf >= (size_t)(KV_BLOCK + 1) * (size_t)mla);
    for (int p = 0; p < 300; p++) CHECK(put(&kv, 0, p, 100 + p) == p);
    kv_commit(&kv);
    CHECK(holds(&kv, 0));
    /* the layers do not share storage: a row written into one leaves the others alone */
    CHECK(kv_get_k(&kv, 0, 0, 7, 5) == stored_key(&kv, 0, 107, 5) && kv_get_k(&kv, 1, 0, 7, 5) == stored_key(&kv, 1, 107, 5) &&
          kv_get_k(&kv, 3, 0, 7, 5) == stored_key(&kv, 3, 107, 5) && stored_key(&kv, 0, 107, 5) != stored_key(&kv, 3, 107, 5));
    /* what attention reads of cells 256..299 of each layer, head by head: keys [head_dim][cells],
     * values [cells][head_dim_v]; the latent layer's values are its keys' first 64 dims, in place
     * for float keys */
    float *sk = malloc(nf * sizeof(float)), *sv = malloc(nf * sizeof(float));
    bool same = true;
    for (int l = 0; l < 4; l++) {
        const kv_layer *L = &kv.layer[l];
        if (!kv_has_cells(&kv, l)) continue;
        kv_span sp = kv_span_at(&kv, l, 0, KV_BLOCK);
        CHECK(sp.label[0] == KV_BLOCK && sp.label[43] == 299);
        for (int g = 0; g < L->n_head_kv; g++) {
            kv_mat km = kv_span_keys(&kv, l, &sp, g, 44, sk), vm = kv_span_values(&kv, l, &sp, g, 44, sv);
            if (L->v_in_k && !quantised(tk))
                CHECK(vm.a == sp.k + g * cell_bytes(tl, mla) && vm.type == tl && vm.row_bytes == kl);
            for (int c = 0; c < 44; c++) {
                float ek[MAX_DIM], ev[MAX_DIM];
                stored_kv(&kv, l, 100 + KV_BLOCK + c, ek, ev);
                for (int d = 0; d < L->head_dim; d++) same = same && mat_at(km, d, c) == ek[g * L->head_dim + d];
                for (int d = 0; d < L->head_dim_v; d++) same = same && mat_at(vm, c, d) == ev[g * L->head_dim_v + d];
            }
        }
    }
    char tn[24], vn[24];
    CHECK_MSG(same, "keys %s, values %s: a layer's span does not read what it stored", ggml_type_name(tk, tn),
              ggml_type_name(tv, vn));
    free(sk);
    free(sv);
    /* a copy shares the blocks; writing into a shared block copies it in every layer */
    CHECK(kv_seq_copy(&kv, 0, 1, &err) == 0 && kv_seq_len(&kv, 1) == 300 && holds(&kv, 1));
    kv_seq_truncate(&kv, 1, 280);
    CHECK(put(&kv, 1, 280, 7777) == 280 && kv_get_stats(&kv).used == 3);
    CHECK(kv_cell_slot(&kv, 1, 279) != kv_cell_slot(&kv, 0, 279) && kv_cell_slot(&kv, 1, 10) == kv_cell_slot(&kv, 0, 10));
    CHECK(holds(&kv, 0) && holds(&kv, 1) && kv_tokens(&kv, 0)[280] == 380 && kv_tokens(&kv, 1)[280] == 7777);
    CHECK(kv_get_v(&kv, 3, 1, 280, 127) == stored_val(&kv, 3, 7777, 127) && kv_get_v(&kv, 3, 0, 280, 127) == stored_val(&kv, 3, 380, 127));
    /* keeping cells 0..3 and 100..299 of seq 0 moves them down in every layer, across the block
     * boundary; seq 1, sharing the first block, keeps its own */
    int32_t cells[204], pos[204];
    for (int i = 0; i < 204; i++) cells[i] = i < 4 ? i : i + 96, pos[i] = i;
    CHECK(kv_seq_keep(&kv, 0, cells, 204, pos, NULL, &err) == 0 && kv_seq_len(&kv, 0) == 204);
    CHECK(kv_tokens(&kv, 0)[4] == 200 && kv_tokens(&kv, 0)[203] == 399 && holds(&kv, 0) && holds(&kv, 1));
    CHECK(kv_get_v(&kv, 3, 0, 203, 1) == stored_val(&kv, 3, 399, 1) && kv_get_k(&kv, 0, 0, 4, 63) == stored_key(&kv, 0, 200, 63));
    float k[MAX_DIM];
    kv_read_k(&kv, 3, 0, 150, k);
    CHECK(k[2 * mla - 1] == stored_key(&kv, 3, 346, 2 * mla - 1));
    kv_free(&kv);
    if (tk != GGML_TYPE_F16 || tv != GGML_TYPE_F16) return;
    /* shapes refused: values wider than the keys they live in, quantised keys of 80 dimensions,
     * negative heads; a cache of no cells in any layer is still a cache */
    layers[3] = (kv_layer_config){.n_head_kv = 2, .head_dim = 64, .head_dim_v = 80, .v_in_k = true};
    CHECK(kv_init(&kv, &cfg, &err) == -1 && strstr(err.msg, "layer 3: 2 heads of 64 (values 80)") != NULL);
    layers[3] = (kv_layer_config){.n_head_kv = 1, .head_dim = 80, .head_dim_v = 64, .v_in_k = true};
    cfg.type_k = GGML_TYPE_Q8_0;
    CHECK(kv_init(&kv, &cfg, &err) == -1 && strstr(err.msg, "layer 3's head_dim 80 is not a multiple of 32") != NULL);
    cfg.type_k = GGML_TYPE_F16;
    layers[2].n_head_kv = -1;
    CHECK(kv_init(&kv, &cfg, &err) == -1 && strstr(err.msg, "layer 2") != NULL);
    kv_layer_config none[2] = {{.n_head_kv = 0}, {.n_head_kv = 0}};
    cfg = (kv_config){.n_layer = 2, .n_seq = 1, .n_ctx = 8, .layers = none, .type_k = GGML_TYPE_F16, .type_v = GGML_TYPE_F16};
    CHECK(kv_init(&kv, &cfg, &err) == 0 && kv_bytes_per_token(&kv) == 0 && kv_scratch_floats(&kv) == 0);
    CHECK(put(&kv, 0, 0, 1) == 0 && put(&kv, 0, 1, 2) == 1 && kv_seq_len(&kv, 0) == 2);
    kv_free(&kv);
    /* values wider than their keys, quantised: the scratch holds a whole span of them */
    kv_layer_config wide[1] = {{.n_head_kv = 1, .head_dim = 32, .head_dim_v = 64}};
    cfg = (kv_config){.n_layer = 1, .n_seq = 1, .n_ctx = KV_BLOCK, .layers = wide, .type_k = GGML_TYPE_F16,
                      .type_v = GGML_TYPE_Q8_0};
    CHECK(kv_init(&kv, &cfg, &err) == 0);
    for (int p = 0; p < KV_BLOCK; p++) put(&kv, 0, p, p);
    nf = kv_scratch_floats(&kv);
    CHECK(nf >= (size_t)KV_BLOCK * 64);
    sv = malloc(nf * sizeof(float));
    kv_span sp = kv_span_at(&kv, 0, 0, 0);
    kv_mat vm = kv_span_values(&kv, 0, &sp, 0, KV_BLOCK, sv);
    CHECK(mat_at(vm, KV_BLOCK - 1, 63) == stored_val(&kv, 0, KV_BLOCK - 1, 63));
    free(sv);
    kv_free(&kv);
}

/* ---- recurrent state ---- */

/* The tests' recurrent layers: float i of layer l's state after a token is half what it was
 * plus the token's share; want_state computes the state after tok[0..n) from nothing. */
static float state_next(float s, int32_t tok, int l, int32_t i) { return 0.5f * s + (float)(tok % 101) + 0.125f * (float)i + (float)l; }

static void want_state(const kv_cache *kv, const int32_t *tok, int32_t n, float *out) {
    memset(out, 0, kv->state_floats * sizeof *out);
    for (int32_t t = 0; t < n; t++)
        for (int l = 0; l < kv->n_layer; l++)
            for (int32_t i = 0; i < kv->layer[l].state; i++) {
                float *s = out + kv->layer[l].state_at + i;
                *s = state_next(*s, tok[t], l, i);
            }
}

/* seq's state is the one after tok[0..n), bit for bit, and says so. */
static bool state_is(const kv_cache *kv, int32_t seq, const int32_t *tok, int32_t n) {
    float want[64];
    want_state(kv, tok, n, want);
    return kv->state_pos[seq] == n && !memcmp(kv_state(kv, 0, seq), want, kv->state_floats * sizeof(float));
}

/* Sequence 0's states of prefixes of tok[0..n), the latest max: at the positions want[0..k), each
 * the state after them. */
static bool prefix_states(const kv_cache *kv, const int32_t *tok, int32_t n, int max, const int32_t *want, int k) {
    int32_t at[4];
    const float *sts[4];
    float exact[64];
    if (kv_state_prefixes(kv, 0, n, max, at, sts) != k) return false;
    for (int i = 0; i < k; i++) {
        want_state(kv, tok, want[i], exact);
        if (at[i] != want[i] || memcmp(sts[i], exact, kv->state_floats * sizeof(float))) return false;
    }
    return true;
}

/* tok[from..to) through seq as forward.c passes them: the sequence's own checkpoints before and
 * after a pass of several tokens, a shared one where a token completes a block, the state
 * absorbing each token. */
static void pass(kv_cache *kv, int32_t seq, const int32_t *tok, int32_t from, int32_t to) {
    if (to - from > 1) kv_state_checkpoint(kv, seq, false);
    for (int32_t p = from; p < to; p++) {
        int32_t c = put(kv, seq, p, tok[p]);
        CHECK(c == p);
        for (int l = 0; l < kv->n_layer; l++)
            for (int32_t i = 0; i < kv->layer[l].state; i++) {
                float *s = kv_state(kv, l, seq) + i;
                *s = state_next(*s, tok[p], l, i);
            }
        kv->state_pos[seq] = c + 1;
        if ((p + 1) % KV_BLOCK == 0) kv_state_share(kv, seq);
    }
    kv_commit(kv);
    if (to - from > 1) kv_state_checkpoint(kv, seq, true);
}

/* Recurrent layers beside an attention layer: a state per sequence written and copied, checkpoints
 * a truncation goes back to (the latest at or before it whose tokens the sequence holds), shared
 * checkpoints the prefix cache takes back with their cells, replaced least recently used first
 * when the slots are full; and cells cannot be dropped from the middle. */
static void check_recurrent(void) {
    kv_cache kv;
    nc_err err;
    kv_layer_config layers[3] = {{.n_head_kv = 1, .head_dim = 32, .head_dim_v = 32}, {.state = 5}, {.state = 3}};
    kv_config cfg = {.n_layer = 3, .n_seq = 3, .n_ctx = 1024, .layers = layers, .type_k = GGML_TYPE_F32,
                     .type_v = GGML_TYPE_F32, .n_shared_ckpt = 2};
    CHECK_MSG(kv_init(&kv, &cfg, &err) == 0, "%s", err.msg);
    CHECK(kv_recurrent(&kv) && kv.state_floats == 8 && kv.layer[1].state_at == 0 && kv.layer[2].state_at == 5);
    CHECK(kv_state_bytes(&kv) == 32 && kv_bytes_per_token(&kv) == 2 * 32 * 4 && kv_checkpoint_bytes(&kv) == 0);
    CHECK(kv_bytes_total(&kv) == (uint64_t)kv.n_blocks * KV_BLOCK * 2 * 32 * 4 + 3 * 32);
    CHECK(kv_state(&kv, 2, 1) == kv.state + 8 + 5);
    int32_t tok[600], other[600], alt[600], a[8], b[8], c[8];
    for (int i = 0; i < 600; i++) tok[i] = other[i] = alt[i] = 11 * i + 2;
    other[5] = 9999;
    for (int i = 15; i < 600; i++) alt[i] = 5000 + i;
    for (int i = 0; i < 8; i++) a[i] = 300 + i, b[i] = 400 + i, c[i] = 500 + i;

    /* seq 1 lets go of tok[0..8): a shared checkpoint there; its state is back at nothing */
    pass(&kv, 1, tok, 0, 8);
    CHECK(state_is(&kv, 1, tok, 8));
    kv_seq_truncate(&kv, 1, 0);
    CHECK(kv_seq_len(&kv, 1) == 0 && state_is(&kv, 1, tok, 0));
    /* seq 0: 10 tokens in one pass, 5 one at a time, 5 in one pass: its own checkpoints at 15
     * and 20 (the first pass's, at 0 and 10, replaced) */
    pass(&kv, 0, tok, 0, 10);
    for (int p = 10; p < 15; p++) pass(&kv, 0, tok, p, p + 1);
    pass(&kv, 0, tok, 15, 20);
    CHECK(state_is(&kv, 0, tok, 20) && holds(&kv, 0));
    CHECK(kv_state_restore_point(&kv, 0, 25) == 20 && kv_state_restore_point(&kv, 0, 20) == 20);
    CHECK(kv_state_restore_point(&kv, 0, 17) == 15 && kv_state_restore_point(&kv, 0, 15) == 15);
    CHECK(kv_state_restore_point(&kv, 0, 12) == 8 && kv_state_restore_point(&kv, 0, 7) == 0);
    /* the states of its prefixes: its own now, its own checkpoints, the shared one at 8; the
     * latest `max` of them, each the state after its position */
    int32_t at[4];
    const float *sts[4];
    CHECK(prefix_states(&kv, tok, 20, 4, (int32_t[]){8, 15, 20}, 3));
    CHECK(prefix_states(&kv, tok, 20, 2, (int32_t[]){15, 20}, 2));
    CHECK(prefix_states(&kv, tok, 17, 4, (int32_t[]){8, 15}, 2));
    CHECK(prefix_states(&kv, tok, 12, 4, (int32_t[]){8}, 1));
    CHECK(kv_state_prefixes(&kv, 0, 5, 4, at, sts) == 0);
    /* a sequence whose tokens differ at 5 finds none of tok's checkpoints */
    pass(&kv, 2, other, 0, 20);
    CHECK(kv_state_restore_point(&kv, 2, 12) == 0 && kv_state_restore_point(&kv, 2, 19) == 0);
    kv_seq_truncate(&kv, 2, 12);
    CHECK(kv_seq_len(&kv, 2) == 0 && state_is(&kv, 2, other, 0));
    /* truncating seq 0 to 17 goes back to its checkpoint at 15: the cells after it go too */
    kv_seq_truncate(&kv, 0, 17);
    CHECK(kv_seq_len(&kv, 0) == 15 && state_is(&kv, 0, tok, 15) && holds(&kv, 0));
    /* continued with other tokens, its checkpoint at 20 (of tok) no longer holds its tokens */
    for (int p = 15; p < 22; p++) pass(&kv, 0, alt, p, p + 1);
    CHECK(state_is(&kv, 0, alt, 22) && kv_state_restore_point(&kv, 0, 21) == 15);
    kv_seq_truncate(&kv, 0, 21);
    CHECK(kv_seq_len(&kv, 0) == 15 && state_is(&kv, 0, alt, 15));
    /* a copy takes the state, not the source's own checkpoints */
    pass(&kv, 0, tok, 15, 20);
    CHECK(kv_seq_copy(&kv, 0, 2, &err) == 0 && kv_seq_len(&kv, 2) == 20 && state_is(&kv, 2, tok, 20) && holds(&kv, 2));
    CHECK(kv_state_restore_point(&kv, 0, 17) == 15 && kv_state_restore_point(&kv, 2, 17) == 8);
    /* kv_seq_keep cannot drop tokens from a recurrent state */
    int32_t keep[2] = {0, 5}, kpos[2] = {0, 1};
    CHECK(kv_seq_keep(&kv, 0, keep, 2, kpos, NULL, &err) == -1 && strstr(err.msg, "recurrent") != NULL &&
          kv_seq_len(&kv, 0) == 20 && state_is(&kv, 0, tok, 20));

    /* letting go of all of seq 2 shares its state where it ended (20): the same tokens, or more
     * of them, take back its cells and state; fewer of them the checkpoint at 8; others nothing */
    kv_seq_truncate(&kv, 2, 0);
    CHECK(kv_seq_len(&kv, 2) == 0 && state_is(&kv, 2, tok, 0));
    CHECK(kv_seq_reuse_prefix(&kv, 2, tok, 20) == 20 && state_is(&kv, 2, tok, 20) && holds(&kv, 2));
    kv_seq_truncate(&kv, 2, 0);
    CHECK(kv_seq_reuse_prefix(&kv, 2, tok, 40) == 20 && kv_seq_len(&kv, 2) == 20 && state_is(&kv, 2, tok, 20));
    kv_seq_truncate(&kv, 2, 0);
    CHECK(kv_seq_reuse_prefix(&kv, 2, tok, 19) == 8 && kv_seq_len(&kv, 2) == 8 && state_is(&kv, 2, tok, 8) && holds(&kv, 2));
    kv_seq_truncate(&kv, 2, 0);
    CHECK(kv_seq_reuse_prefix(&kv, 2, other, 20) == 0 && kv_seq_len(&kv, 2) == 0 && state_is(&kv, 2, tok, 0));
    /* two shared slots, holding tok@8 (used last) and tok@20: a third checkpoint replaces tok@20 */
    pass(&kv, 2, a, 0, 5);
    kv_seq_truncate(&kv, 2, 0);
    CHECK(kv_seq_reuse_prefix(&kv, 2, tok, 20) == 8 && state_is(&kv, 2, tok, 8));
    kv_seq_truncate(&kv, 2, 0);
    CHECK(kv_seq_reuse_prefix(&kv, 2, a, 8) == 5 && state_is(&kv, 2, a, 5));
    kv_seq_truncate(&kv, 2, 0);
    /* now a@5 was used last: the next one replaces tok@8 */
    pass(&kv, 2, b, 0, 6);
    kv_seq_truncate(&kv, 2, 0);
    CHECK(kv_seq_reuse_prefix(&kv, 2, tok, 20) == 0);
    CHECK(kv_seq_reuse_prefix(&kv, 2, b, 8) == 6 && state_is(&kv, 2, b, 6));
    kv_seq_truncate(&kv, 2, 0);
    CHECK(kv_seq_reuse_prefix(&kv, 2, a, 8) == 5 && state_is(&kv, 2, a, 5));
    kv_seq_truncate(&kv, 2, 0);
    /* b@6 is the older now */
    pass(&kv, 2, c, 0, 7);
    kv_seq_truncate(&kv, 2, 0);
    CHECK(kv_seq_reuse_prefix(&kv, 2, b, 8) == 0 && kv_seq_reuse_prefix(&kv, 2, c, 8) == 7 && state_is(&kv, 2, c, 7));
    kv_seq_truncate(&kv, 2, 0);
    CHECK(kv_checkpoint_bytes(&kv) > 0 && kv_checkpoint_bytes(&kv) <= (uint64_t)kv.n_ckpt * 32 &&
          kv_checkpoint_bytes(&kv) % 32 == 0);
    /* a state set from a file's bytes (little-endian f32), or cleared */
    uint8_t bytes[32];
    for (int i = 0; i < 8; i++) {
        float x = (float)i - 2.5f;
        uint32_t u;
        memcpy(&u, &x, 4);
        for (int k = 0; k < 4; k++) bytes[4 * i + k] = (uint8_t)(u >> 8 * k);
    }
    kv_state_set(&kv, 1, bytes, 7);
    CHECK(kv.state_pos[1] == 7 && kv_state(&kv, 1, 1)[0] == -2.5f && kv_state(&kv, 2, 1)[2] == 4.5f);
    kv_state_set(&kv, 1, NULL, 7);
    CHECK(kv.state_pos[1] == 0 && kv_state(&kv, 2, 1)[2] == 0.0f);
    kv_free(&kv);

    /* a sequence passing a block boundary shares its state there: a truncation past it goes back
     * to it, not to the start */
    CHECK(kv_init(&kv, &cfg, &err) == 0);
    pass(&kv, 0, tok, 0, 300);
    CHECK(kv_state_restore_point(&kv, 0, 270) == KV_BLOCK);
    kv_seq_truncate(&kv, 0, 270);
    CHECK(kv_seq_len(&kv, 0) == KV_BLOCK && state_is(&kv, 0, tok, KV_BLOCK) && holds(&kv, 0));
    CHECK(kv_seq_reuse_prefix(&kv, 1, tok, 300) == KV_BLOCK && state_is(&kv, 1, tok, KV_BLOCK) && holds(&kv, 1));
    kv_free(&kv);

    /* the prefix cache takes cells only as far as a shared checkpoint of their state goes: with
     * checkpoints at 8 and 20 of tok, the cells of 20 reclaimed and seq 1 holding 12, a reuse of
     * tok gets 12 cells and keeps 8 */
    cfg.n_cells = 3 * KV_BLOCK;
    CHECK(kv_init(&kv, &cfg, &err) == 0);
    pass(&kv, 1, tok, 0, 8);
    for (int p = 8; p < 12; p++) pass(&kv, 1, tok, p, p + 1);
    pass(&kv, 0, tok, 0, 20);
    kv_seq_truncate(&kv, 0, 0);
    pass(&kv, 2, tok, 0, 8);
    kv_seq_truncate(&kv, 2, 0);
    for (int p = 0; p < 3; p++) CHECK(put(&kv, 0, p, 7000 + p) == p); /* the pool's last block: tok[0..20)'s */
    CHECK(kv_get_stats(&kv).evictions == 1);
    CHECK(kv_seq_reuse_prefix(&kv, 2, tok, 20) == 8 && kv_seq_len(&kv, 2) == 8 && state_is(&kv, 2, tok, 8) && holds(&kv, 2));
    kv_free(&kv);
}

int main(void) {
    check_mirror();
    check_recurrent();
    for (size_t i = 0; i < N_TYPES; i++) {
        check_ring(TYPES[i]);
        check_prefix(TYPES[i]);
        check_keep(TYPES[i]);
        for (size_t j = 0; j < N_TYPES; j++) {
            check_type(TYPES[i], TYPES[j]);
            check_shapes(TYPES[i], TYPES[j]);
        }
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
