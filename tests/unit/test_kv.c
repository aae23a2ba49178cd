#include <string.h>

#include "format/ggml_types.h"
#include "kv/kv_cache.h"
#include "tensor/quant.h"
#include "test.h"

/* Key and value of a token as the tests write them: dimension d of token t. */
static float key_of(int32_t t, int d) { return (float)(t % 1000) + 0.125f * d; }
static float val_of(int32_t t, int d) { return -(float)(t % 1000) - 0.25f * d; }

static int32_t put(kv_cache *kv, int32_t seq, int32_t pos, int32_t tok) {
    nc_err err;
    int32_t c = kv_append(kv, seq, pos, tok, &err);
    if (c < 0) return c;
    kv_ring_claim(kv, seq, pos);
    float k[8], v[8];
    for (int d = 0; d < kv->kv_dim; d++) {
        k[d] = key_of(tok, d);
        v[d] = val_of(tok, d);
    }
    for (int l = 0; l < kv->n_layer; l++) kv_store(kv, l, seq, c, pos, 0, kv->kv_dim, k, v);
    return c;
}

/* Every cell of seq holds the keys and values of its token, in every layer. */
static bool holds(const kv_cache *kv, int32_t seq) {
    for (int32_t c = 0; c < kv_seq_len(kv, seq); c++)
        for (int l = 0; l < kv->n_layer; l++)
            for (int d = 0; d < kv->kv_dim; d++)
                if (kv_get_k(kv, l, seq, c, d) != key_of(kv_tokens(kv, seq)[c], d) ||
                    kv_get_v(kv, l, seq, c, d) != val_of(kv_tokens(kv, seq)[c], d))
                    return false;
    return true;
}

static void check_type(uint32_t type) {
    kv_cache kv;
    nc_err err;
    CHECK(kv_init(&kv, 2, 3, 4, 8, type, 0, 0, NULL, &err) == 0);
    size_t elem = type == GGML_TYPE_F16 ? 2 : 4;
    CHECK(kv_bytes_per_token(&kv) == 2 * 2 * 8 * elem);
    CHECK(kv.n_blocks == 3 && kv_bytes_total(&kv) == 3ull * KV_BLOCK * 2 * 2 * 8 * elem); /* a block per sequence */
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
    /* keys transposed, values by cell: both read back (F16 rounds 0.1 to 0.0999755859375) */
    float k[8], v[8];
    for (int i = 0; i < 8; i++) { k[i] = 0.1f * i + 1; v[i] = -2.0f * i; }
    kv_store(&kv, 1, 0, 2, 5, 0, 8, k, v);
    CHECK(kv_get_k(&kv, 1, 0, 2, 0) == 1.0f && kv_get_v(&kv, 1, 0, 2, 7) == -14.0f);
    CHECK_NEAR(kv_get_k(&kv, 1, 0, 2, 3), 1.3, type == GGML_TYPE_F16 ? 1e-3 : 1e-7);
    /* the span of cells 0..255: key row of dimension d holds cell c at element c, the value row of
     * cell c dimension d at element d; labels are the positions */
    kv_span sp = kv_span_at(&kv, 1, 0, 0);
    float v7, k3;
    if (type == GGML_TYPE_F16) {
        uint16_t h;
        memcpy(&h, sp.v + 2 * sp.v_row + 7 * elem, 2);
        v7 = quant_fp16_to_f32(h);
        memcpy(&h, sp.kt + 3 * sp.kt_row + 2 * elem, 2);
        k3 = quant_fp16_to_f32(h);
    } else {
        memcpy(&v7, sp.v + 2 * sp.v_row + 7 * elem, 4);
        memcpy(&k3, sp.kt + 3 * sp.kt_row + 2 * elem, 4);
    }
    CHECK(v7 == -14.0f && k3 == kv_get_k(&kv, 1, 0, 2, 3));
    CHECK(sp.kt_row == KV_BLOCK * elem && sp.v_row == 8 * elem && sp.label[2] == 5);
    /* sequences hold separate blocks */
    CHECK(kv_append(&kv, 1, 0, 5, &err) == 0);
    CHECK(kv_get_k(&kv, 1, 1, 0, 3) == 0.0f);
    CHECK(kv_span_at(&kv, 1, 1, 0).kt != sp.kt);
    /* a copy shares the block until one of them writes */
    CHECK(kv_seq_copy(&kv, 0, 2, &err) == 0);
    CHECK(kv_seq_len(&kv, 2) == 4 && kv_positions(&kv, 2)[2] == 5 && kv_get_stats(&kv).used == 2);
    CHECK(kv_get_k(&kv, 1, 2, 2, 0) == 1.0f && kv_get_v(&kv, 1, 2, 2, 7) == -14.0f);
    CHECK(kv_seq_copy(&kv, 0, 9, &err) == -1);
    /* truncate then append: the shared block is copied first, the copy keeps its cells */
    kv_seq_truncate(&kv, 0, 2);
    CHECK(kv_seq_len(&kv, 0) == 2 && kv_blocks_needed(&kv, 0, 1) == 1);
    CHECK(kv_append(&kv, 0, 2, 9, &err) == 2 && kv_get_stats(&kv).used == 3);
    for (int i = 0; i < 8; i++) k[i] = 100;
    kv_store(&kv, 1, 0, 2, 2, 0, 8, k, NULL);
    CHECK(kv_get_k(&kv, 1, 0, 2, 0) == 100.0f && kv_get_k(&kv, 1, 2, 2, 0) == 1.0f);
    CHECK(kv_get_k(&kv, 1, 0, 0, 0) == kv_get_k(&kv, 1, 2, 0, 0));
    kv_seq_truncate(&kv, 0, 0);
    CHECK(kv_seq_len(&kv, 0) == 0 && kv_append(&kv, 0, 0, 5, &err) == 0);
    kv_free(&kv);
}

/* A sliding layer kept in a ring of 256 cells beside a full layer: position p lives in cell
 * p % 256 of the ring; the ring's labels say which position each cell holds; a truncation that
 * drops positions the ring had overwritten older ones with leaves a hole that windows reaching
 * back to it report, and that clears once the window has moved past it. */
static void check_ring(void) {
    kv_cache kv;
    nc_err err;
    CHECK(kv_init(&kv, 2, 2, 1000, 4, GGML_TYPE_F32, 0, 300, (bool[]){true, false}, &err) == -1 &&
          strstr(err.msg, "multiple of 256") != NULL);
    CHECK(kv_init(&kv, 2, 2, 1000, 4, GGML_TYPE_F32, 0, 256, (bool[]){true, false}, &err) == 0);
    CHECK(kv_is_ring(&kv, 0) && !kv_is_ring(&kv, 1));
    CHECK(kv_span_at(&kv, 0, 0, 0).kt_row == 256 * 4);
    /* the ring costs its cells whatever the context; the full layer its pool (4 blocks a sequence) */
    CHECK(kv_bytes_per_token(&kv) == 2 * 4 * 4 && kv_bytes_total(&kv) == 2 * 4 * 4 * (256 * 2 + 8 * 256));
    for (int p = 0; p < 600; p++) CHECK(put(&kv, 0, p, p) == p);
    const int32_t *lab = kv_ring_positions(&kv, 0);
    CHECK(lab[599 % 256] == 599 && lab[344 % 256] == 344 && lab[343 % 256] == 599); /* 343 was overwritten */
    CHECK(kv_get_k(&kv, 0, 0, 599, 0) == key_of(599, 0) && kv_get_v(&kv, 0, 0, 400, 1) == val_of(400, 1));
    CHECK(kv_get_k(&kv, 1, 0, 343, 0) == key_of(343, 0)); /* the full layer keeps everything */
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
    CHECK(kv_ring_positions(&kv, 1)[589 % 256] == 589 && kv_get_k(&kv, 0, 1, 589, 0) == key_of(589, 0));
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
static void check_prefix(void) {
    kv_cache kv;
    nc_err err;
    CHECK(kv_init(&kv, 2, 3, 1024, 4, GGML_TYPE_F32, 12 * KV_BLOCK, 0, NULL, &err) == 0);
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
    CHECK(kv_get_stats(&kv).evictions == 7 && kv_blocks_available(&kv) == 0);
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
    CHECK(kv_init(&kv, 1, 2, KV_BLOCK, 4, GGML_TYPE_F32, KV_BLOCK, 0, NULL, &err) == 0 && kv.n_blocks == 1);
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
    CHECK(kv_init(&kv, 1, 2, KV_BLOCK, 4, GGML_TYPE_F32, 2 * KV_BLOCK, 0, NULL, &err) == 0);
    for (int p = 0; p < KV_BLOCK; p++) put(&kv, 0, p, tok[p]);
    kv_commit(&kv);
    CHECK(kv_seq_keep(&kv, 0, cells, KV_BLOCK - 100, moved, NULL, &err) == 0 && holds(&kv, 0));
    CHECK(kv_seq_reuse_prefix(&kv, 1, tok, KV_BLOCK) == KV_BLOCK && holds(&kv, 1));
    kv_free(&kv);
    /* a pool smaller than the sequences' contexts: claiming fails with a clear message */
    CHECK(kv_init(&kv, 1, 2, 1024, 4, GGML_TYPE_F32, 300, 0, NULL, &err) == 0 && kv.n_blocks == 2);
    for (int p = 0; p < 512; p++) CHECK(put(&kv, 0, p, p) == p);
    CHECK(kv_append(&kv, 1, 0, 1, &err) == -1 && strstr(err.msg, "pool is exhausted") != NULL);
    kv_free(&kv);
}

int main(void) {
    check_ring();
    check_type(GGML_TYPE_F32);
    check_type(GGML_TYPE_F16);
    check_prefix();
    kv_cache kv;
    nc_err err;
    /* absurd sizes and types fail cleanly */
    CHECK(kv_init(&kv, 1, 1 << 20, 1 << 20, 1 << 20, GGML_TYPE_F16, 0, 0, NULL, &err) == -1 &&
          strstr(err.msg, "too large") != NULL);
    CHECK(kv_init(&kv, 1, 1, 1, 1, GGML_TYPE_Q8_0, 0, 0, NULL, &err) == -1 && strstr(err.msg, "F16 or F32") != NULL);
    return test_summary("kv");
}
