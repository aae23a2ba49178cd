/* The KV cache: for every layer, keys and values of n_seq sequences, each sequence owning a
 * contiguous block of n_ctx cells (GQA stores only the n_head_kv heads). Cells of a sequence
 * are filled in order; each remembers the position of its token, which the attention mask
 * compares against. Sequences can be cleared, truncated and copied (shared prompts, beams). */
#ifndef NC_KV_CACHE_H
#define NC_KV_CACHE_H

#include <stdint.h>

#include "common.h"

typedef struct kv_cache {
    int32_t n_layer, n_seq, n_ctx, kv_dim;  /* kv_dim = n_head_kv * head_dim */
    float **k, **v;                         /* per layer: [n_seq][n_ctx][kv_dim] */
    int32_t *pos;                           /* [n_seq][n_ctx] */
    int32_t *len;                           /* [n_seq] cells in use */
} kv_cache;

int kv_init(kv_cache *kv, int32_t n_layer, int32_t n_seq, int32_t n_ctx, int32_t kv_dim, nc_err *err);
void kv_free(kv_cache *kv);

static inline float *kv_k(const kv_cache *kv, int layer, int seq, int cell) {
    return kv->k[layer] + ((size_t)seq * kv->n_ctx + cell) * kv->kv_dim;
}
static inline float *kv_v(const kv_cache *kv, int layer, int seq, int cell) {
    return kv->v[layer] + ((size_t)seq * kv->n_ctx + cell) * kv->kv_dim;
}
static inline const int32_t *kv_positions(const kv_cache *kv, int seq) { return kv->pos + (size_t)seq * kv->n_ctx; }

/* Claim the next cell of `seq` for a token at `pos`; positions of a sequence must increase.
 * Returns the cell index, or -1 with err set (unknown sequence, full, position out of order). */
int32_t kv_append(kv_cache *kv, int32_t seq, int32_t pos, nc_err *err);

void kv_seq_truncate(kv_cache *kv, int32_t seq, int32_t n_keep);
int kv_seq_copy(kv_cache *kv, int32_t src, int32_t dst, nc_err *err);
uint64_t kv_bytes_per_token(const kv_cache *kv);

#endif
