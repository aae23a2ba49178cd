#include <string.h>

#include "format/ggml_types.h"
#include "kv/kv_cache.h"
#include "tensor/quant.h"
#include "test.h"

static void check_type(uint32_t type) {
    kv_cache kv;
    nc_err err;
    CHECK(kv_init(&kv, 2, 3, 4, 8, type, 0, NULL, &err) == 0);
    size_t elem = type == GGML_TYPE_F16 ? 2 : 4;
    CHECK(kv_bytes_per_token(&kv) == 2 * 2 * 8 * elem);
    /* cells fill in order, positions must increase */
    CHECK(kv_append(&kv, 0, 0, &err) == 0);
    CHECK(kv_append(&kv, 0, 1, &err) == 1);
    CHECK(kv_append(&kv, 0, 1, &err) == -1 && strstr(err.msg, "position 1") != NULL);
    CHECK(kv_append(&kv, 0, 5, &err) == 2); /* gaps are allowed */
    CHECK(kv_append(&kv, 3, 0, &err) == -1 && strstr(err.msg, "sequence id 3") != NULL);
    CHECK(kv_append(&kv, -1, 0, &err) == -1);
    CHECK(kv_append(&kv, 0, 6, &err) == 3);
    CHECK(kv_append(&kv, 0, 7, &err) == -1 && strstr(err.msg, "full") != NULL);
    /* keys transposed, values by cell: both read back (F16 rounds 0.1 to 0.0999755859375) */
    float k[8], v[8];
    for (int i = 0; i < 8; i++) { k[i] = 0.1f * i + 1; v[i] = -2.0f * i; }
    kv_store(&kv, 1, 0, 2, k, v);
    CHECK(kv_get_k(&kv, 1, 0, 2, 0) == 1.0f && kv_get_v(&kv, 1, 0, 2, 7) == -14.0f);
    CHECK_NEAR(kv_get_k(&kv, 1, 0, 2, 3), 1.3, type == GGML_TYPE_F16 ? 1e-3 : 1e-7);
    /* the key row of dimension d holds cell c at element c; the value row of cell c, dimension d at d */
    float v7, k3;
    if (type == GGML_TYPE_F16) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)kv_v(&kv, 1, 0, 2) + 7 * elem, 2);
        v7 = quant_fp16_to_f32(h);
        memcpy(&h, (const uint8_t *)kv_kt(&kv, 1, 0, 3) + 2 * elem, 2);
        k3 = quant_fp16_to_f32(h);
    } else {
        memcpy(&v7, (const uint8_t *)kv_v(&kv, 1, 0, 2) + 7 * elem, 4);
        memcpy(&k3, (const uint8_t *)kv_kt(&kv, 1, 0, 3) + 2 * elem, 4);
    }
    CHECK(v7 == -14.0f && k3 == kv_get_k(&kv, 1, 0, 2, 3));
    CHECK((const uint8_t *)kv_kt(&kv, 1, 0, 1) - (const uint8_t *)kv_kt(&kv, 1, 0, 0) == (long)kv_kt_row_bytes(&kv, 1));
    CHECK((const uint8_t *)kv_v(&kv, 1, 0, 1) - (const uint8_t *)kv_v(&kv, 1, 0, 0) == (long)kv_v_row_bytes(&kv));
    CHECK(kv_kt_row_bytes(&kv, 1) == 4 * elem && kv_v_row_bytes(&kv) == 8 * elem);
    /* sequences are separate blocks */
    CHECK(kv_append(&kv, 1, 0, &err) == 0);
    CHECK(kv_get_k(&kv, 1, 1, 0, 3) == 0.0f);
    /* copy */
    CHECK(kv_seq_copy(&kv, 0, 2, &err) == 0);
    CHECK(kv.len[2] == 4 && kv_positions(&kv, 2)[2] == 5);
    CHECK(kv_get_k(&kv, 1, 2, 2, 0) == 1.0f && kv_get_v(&kv, 1, 2, 2, 7) == -14.0f);
    CHECK(kv_seq_copy(&kv, 0, 9, &err) == -1);
    /* truncate then append continues after the kept cells */
    kv_seq_truncate(&kv, 0, 2);
    CHECK(kv.len[0] == 2);
    CHECK(kv_append(&kv, 0, 2, &err) == 2);
    kv_seq_truncate(&kv, 0, 0);
    CHECK(kv.len[0] == 0 && kv_append(&kv, 0, 0, &err) == 0);
    kv_free(&kv);
}

/* A sliding layer kept in a ring of 256 cells beside a full layer: position p lives in cell
 * p % 256 of the ring; the ring's labels say which position each cell holds; a truncation that
 * drops positions the ring had overwritten older ones with leaves a hole that windows reaching
 * back to it report, and that clears once the window has moved past it. */
static void check_ring(void) {
    kv_cache kv;
    nc_err err;
    CHECK(kv_init(&kv, 2, 2, 1000, 4, GGML_TYPE_F32, 300, (bool[]){true, false}, &err) == -1 &&
          strstr(err.msg, "multiple of 256") != NULL);
    CHECK(kv_init(&kv, 2, 2, 1000, 4, GGML_TYPE_F32, 256, (bool[]){true, false}, &err) == 0);
    CHECK(kv_is_ring(&kv, 0) && !kv_is_ring(&kv, 1) && kv.cells[0] == 256 && kv.cells[1] == 1000);
    CHECK(kv_kt_row_bytes(&kv, 0) == 256 * 4 && kv_kt_row_bytes(&kv, 1) == 1000 * 4);
    /* the ring costs its cells whatever the context; the full layer a cell per token */
    CHECK(kv_bytes_per_token(&kv) == 2 * 4 * 4 && kv_bytes_total(&kv) == 2 * 4 * 4 * (256 + 1000) * 2);
    for (int p = 0; p < 600; p++) {
        int32_t cell = kv_append(&kv, 0, p, &err);
        CHECK(cell == p);
        kv_ring_claim(&kv, 0, p);
        CHECK(kv_layer_cell(&kv, 0, cell, p) == p % 256 && kv_layer_cell(&kv, 1, cell, p) == p);
        float k[4] = {(float)p, 0, 0, 1}, v[4] = {0, (float)p, 0, 2};
        kv_store(&kv, 0, 0, kv_layer_cell(&kv, 0, cell, p), k, v);
    }
    const int32_t *lab = kv_ring_positions(&kv, 0);
    CHECK(lab[599 % 256] == 599 && lab[344 % 256] == 344 && lab[343 % 256] == 599); /* 343 was overwritten */
    CHECK(kv_get_k(&kv, 0, 0, 599 % 256, 0) == 599.0f && kv_get_v(&kv, 0, 0, 400 % 256, 1) == 400.0f);
    CHECK(kv_window_check(&kv, 0, 600, 200, &err) == 0);
    /* back by 10: positions 590..599 had overwritten 334..343, which a window of 250 from 590
     * (341..590) needs and one of 247 (344..590) does not */
    kv_seq_truncate(&kv, 0, 590);
    CHECK(kv.len[0] == 590 && lab[595 % 256] == -1 && lab[589 % 256] == 589);
    CHECK(kv_window_check(&kv, 0, 590, 250, &err) == -1 && strstr(err.msg, "lost position 343") != NULL);
    CHECK(kv_window_check(&kv, 0, 590, 248, &err) == -1 && kv_window_check(&kv, 0, 590, 247, &err) == 0);
    CHECK(kv_window_check(&kv, 0, 594, 250, &err) == 0); /* the window moved past the hole */
    /* copies carry the labels, data and hole */
    CHECK(kv_seq_copy(&kv, 0, 1, &err) == 0);
    CHECK(kv_ring_positions(&kv, 1)[589 % 256] == 589 && kv_get_k(&kv, 0, 1, 589 % 256, 0) == 589.0f);
    CHECK(kv_window_check(&kv, 1, 590, 250, &err) == -1);
    /* clearing forgets everything */
    kv_seq_truncate(&kv, 0, 0);
    CHECK(kv_window_check(&kv, 0, 0, 250, &err) == 0 && lab[589 % 256] == -1);
    kv_free(&kv);
}

int main(void) {
    check_ring();
    check_type(GGML_TYPE_F32);
    check_type(GGML_TYPE_F16);
    kv_cache kv;
    nc_err err;
    /* absurd sizes and types fail cleanly */
    CHECK(kv_init(&kv, 1, 1 << 20, 1 << 20, 1 << 20, GGML_TYPE_F16, 0, NULL, &err) == -1 && strstr(err.msg, "too large") != NULL);
    CHECK(kv_init(&kv, 1, 1, 1, 1, GGML_TYPE_Q8_0, 0, NULL, &err) == -1 && strstr(err.msg, "F16 or F32") != NULL);
    return test_summary("kv");
}
