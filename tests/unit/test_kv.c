#include <string.h>

#include "kv/kv_cache.h"
#include "test.h"

int main(void) {
    kv_cache kv;
    nc_err err;
    CHECK(kv_init(&kv, 2, 3, 4, 8, &err) == 0);
    CHECK(kv_bytes_per_token(&kv) == 2 * 2 * 8 * sizeof(float));
    /* cells fill in order, positions must increase */
    CHECK(kv_append(&kv, 0, 0, &err) == 0);
    CHECK(kv_append(&kv, 0, 1, &err) == 1);
    CHECK(kv_append(&kv, 0, 1, &err) == -1 && strstr(err.msg, "position 1") != NULL);
    CHECK(kv_append(&kv, 0, 5, &err) == 2);  /* gaps are allowed */
    CHECK(kv_append(&kv, 3, 0, &err) == -1 && strstr(err.msg, "sequence id 3") != NULL);
    CHECK(kv_append(&kv, -1, 0, &err) == -1);
    CHECK(kv_append(&kv, 0, 6, &err) == 3);
    CHECK(kv_append(&kv, 0, 7, &err) == -1 && strstr(err.msg, "full") != NULL);
    /* sequences are separate blocks */
    kv_k(&kv, 1, 0, 2)[3] = 42.0f;
    kv_v(&kv, 1, 0, 2)[3] = -42.0f;
    CHECK(kv_append(&kv, 1, 0, &err) == 0);
    CHECK(kv_k(&kv, 1, 1, 0)[3] == 0.0f);
    /* copy */
    CHECK(kv_seq_copy(&kv, 0, 2, &err) == 0);
    CHECK(kv.len[2] == 4 && kv_positions(&kv, 2)[2] == 5);
    CHECK(kv_k(&kv, 1, 2, 2)[3] == 42.0f && kv_v(&kv, 1, 2, 2)[3] == -42.0f);
    CHECK(kv_seq_copy(&kv, 0, 9, &err) == -1);
    /* truncate then append continues after the kept cells */
    kv_seq_truncate(&kv, 0, 2);
    CHECK(kv.len[0] == 2);
    CHECK(kv_append(&kv, 0, 2, &err) == 2);
    kv_seq_truncate(&kv, 0, 0);
    CHECK(kv.len[0] == 0 && kv_append(&kv, 0, 0, &err) == 0);
    kv_free(&kv);
    /* absurd sizes fail cleanly */
    CHECK(kv_init(&kv, 1, 1 << 20, 1 << 20, 1 << 20, &err) == -1 && strstr(err.msg, "too large") != NULL);
    return test_summary("kv");
}
