#include <string.h>

#include "format/ggml_types.h"
#include "kv/kv_cache.h"
#include "tensor/quant.h"
#include "test.h"

static void check_type(uint32_t type) {
    kv_cache kv;
    nc_err err;
    CHECK(kv_init(&kv, 2, 3, 4, 8, type, &err) == 0);
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
    CHECK((const uint8_t *)kv_kt(&kv, 1, 0, 1) - (const uint8_t *)kv_kt(&kv, 1, 0, 0) == (long)kv_kt_row_bytes(&kv));
    CHECK((const uint8_t *)kv_v(&kv, 1, 0, 1) - (const uint8_t *)kv_v(&kv, 1, 0, 0) == (long)kv_v_row_bytes(&kv));
    CHECK(kv_kt_row_bytes(&kv) == 4 * elem && kv_v_row_bytes(&kv) == 8 * elem);
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

int main(void) {
    check_type(GGML_TYPE_F32);
    check_type(GGML_TYPE_F16);
    kv_cache kv;
    nc_err err;
    /* absurd sizes and types fail cleanly */
    CHECK(kv_init(&kv, 1, 1 << 20, 1 << 20, 1 << 20, GGML_TYPE_F16, &err) == -1 && strstr(err.msg, "too large") != NULL);
    CHECK(kv_init(&kv, 1, 1, 1, 1, GGML_TYPE_Q8_0, &err) == -1 && strstr(err.msg, "F16 or F32") != NULL);
    return test_summary("kv");
}
