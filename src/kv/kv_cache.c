#include "kv/kv_cache.h"

#include <stdlib.h>
#include <string.h>

int kv_init(kv_cache *kv, int32_t n_layer, int32_t n_seq, int32_t n_ctx, int32_t kv_dim, nc_err *err) {
    memset(kv, 0, sizeof *kv);
    kv->n_layer = n_layer;
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    uint64_t per_layer;
    if (!nc_mul_u64((uint64_t)n_seq * (uint64_t)n_ctx, (uint64_t)kv_dim, &per_layer) || per_layer > (1ull << 40))
        return nc_fail(err, "KV cache of %d sequences x %d cells x %d is too large", n_seq, n_ctx, kv_dim);
    kv->k = calloc((size_t)n_layer, sizeof *kv->k);
    kv->v = calloc((size_t)n_layer, sizeof *kv->v);
    kv->pos = calloc((size_t)n_seq * (size_t)n_ctx, sizeof *kv->pos);
    kv->len = calloc((size_t)n_seq, sizeof *kv->len);
    if (!kv->k || !kv->v || !kv->pos || !kv->len) goto oom;
    /* calloc of large blocks maps zero pages lazily: untouched cells cost no resident memory. */
    for (int l = 0; l < n_layer; l++) {
        kv->k[l] = calloc(per_layer, sizeof(float));
        kv->v[l] = calloc(per_layer, sizeof(float));
        if (!kv->k[l] || !kv->v[l]) goto oom;
    }
    return 0;
oom:
    kv_free(kv);
    return nc_fail(err, "out of memory allocating the KV cache (%d sequences x %d cells x %d layers)", n_seq, n_ctx,
                   n_layer);
}

void kv_free(kv_cache *kv) {
    for (int l = 0; kv->k && l < kv->n_layer; l++) free(kv->k[l]);
    for (int l = 0; kv->v && l < kv->n_layer; l++) free(kv->v[l]);
    free(kv->k);
    free(kv->v);
    free(kv->pos);
    free(kv->len);
    memset(kv, 0, sizeof *kv);
}

int32_t kv_append(kv_cache *kv, int32_t seq, int32_t pos, nc_err *err) {
    if (seq < 0 || seq >= kv->n_seq)
        return nc_fail(err, "sequence id %d is outside 0..%d (n_seq_max)", seq, kv->n_seq - 1);
    int32_t n = kv->len[seq];
    if (n >= kv->n_ctx)
        return nc_fail(err, "sequence %d is full: the context holds %d tokens (raise -c / n_ctx)", seq, kv->n_ctx);
    if (pos < 0 || (n > 0 && pos <= kv_positions(kv, seq)[n - 1]))
        return nc_fail(err, "sequence %d: position %d does not follow the cached position %d", seq, pos,
                       n > 0 ? kv_positions(kv, seq)[n - 1] : -1);
    kv->pos[(size_t)seq * kv->n_ctx + n] = pos;
    kv->len[seq] = n + 1;
    return n;
}

void kv_seq_truncate(kv_cache *kv, int32_t seq, int32_t n_keep) {
    if (seq < 0 || seq >= kv->n_seq) return;
    if (n_keep < 0) n_keep = 0;
    if (n_keep < kv->len[seq]) kv->len[seq] = n_keep;
}

int kv_seq_copy(kv_cache *kv, int32_t src, int32_t dst, nc_err *err) {
    if (src < 0 || src >= kv->n_seq || dst < 0 || dst >= kv->n_seq)
        return nc_fail(err, "sequence copy %d -> %d: ids must be in 0..%d", src, dst, kv->n_seq - 1);
    if (src == dst) return 0;
    int32_t n = kv->len[src];
    size_t row = (size_t)kv->kv_dim * sizeof(float);
    for (int l = 0; l < kv->n_layer; l++) {
        memcpy(kv_k(kv, l, dst, 0), kv_k(kv, l, src, 0), (size_t)n * row);
        memcpy(kv_v(kv, l, dst, 0), kv_v(kv, l, src, 0), (size_t)n * row);
    }
    memcpy(kv->pos + (size_t)dst * kv->n_ctx, kv_positions(kv, src), (size_t)n * sizeof *kv->pos);
    kv->len[dst] = n;
    return 0;
}

uint64_t kv_bytes_per_token(const kv_cache *kv) {
    return (uint64_t)kv->n_layer * 2u * (uint64_t)kv->kv_dim * sizeof(float);
}
