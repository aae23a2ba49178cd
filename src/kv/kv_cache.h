/* The KV cache: for every layer, keys and values of n_seq sequences, each sequence owning a
 * contiguous block of n_ctx cells (GQA stores only the n_head_kv heads). Cells of a sequence are
 * filled in order; each remembers the position of its token, which the attention mask compares
 * against. Sequences can be cleared, truncated and copied (shared prompts, beams).
 *
 * Elements are F16 (default: half the memory and half the bytes attention reads per step) or
 * F32. Keys are stored transposed, [seq][kv_dim][n_ctx], and values by cell, [seq][cell][kv_dim]:
 * so both products of attention run along the vector lanes with no sum across lanes (which, for
 * a head of 64 dimensions, cost more than the products): kernels_mix computes a head's scores
 * with its cells in the lanes and the weighted sum of its values with its dimensions in them. */
#ifndef NC_KV_CACHE_H
#define NC_KV_CACHE_H

#include <stdint.h>

#include "common.h"

typedef struct kv_cache {
    int32_t n_layer, n_seq, n_ctx, kv_dim;  /* kv_dim = n_head_kv * head_dim */
    uint32_t type;                          /* GGML_TYPE_F16 or GGML_TYPE_F32 */
    size_t elem;                            /* bytes per element */
    uint8_t **kt, **v;                      /* per layer, layouts above */
    int32_t *pos;                           /* [n_seq][n_ctx] */
    int32_t *len;                           /* [n_seq] cells in use */
} kv_cache;

int kv_init(kv_cache *kv, int32_t n_layer, int32_t n_seq, int32_t n_ctx, int32_t kv_dim, uint32_t type, nc_err *err);
void kv_free(kv_cache *kv);

/* Keys of one dimension across the cells of a sequence (rows of consecutive dimensions
 * kv_kt_row_bytes apart). */
static inline const void *kv_kt(const kv_cache *kv, int layer, int seq, int dim) {
    return kv->kt[layer] + ((size_t)seq * kv->kv_dim + dim) * kv->n_ctx * kv->elem;
}
static inline size_t kv_kt_row_bytes(const kv_cache *kv) { return (size_t)kv->n_ctx * kv->elem; }
/* Values of one cell (kv_dim elements; rows of consecutive cells kv_v_row_bytes apart). */
static inline const void *kv_v(const kv_cache *kv, int layer, int seq, int cell) {
    return kv->v[layer] + ((size_t)seq * kv->n_ctx + cell) * kv->kv_dim * kv->elem;
}
static inline size_t kv_v_row_bytes(const kv_cache *kv) { return (size_t)kv->kv_dim * kv->elem; }
static inline const int32_t *kv_positions(const kv_cache *kv, int seq) { return kv->pos + (size_t)seq * kv->n_ctx; }

/* Write the keys and values of one token (kv_dim floats each) into a claimed cell. */
void kv_store(kv_cache *kv, int layer, int seq, int cell, const float *k, const float *v);
/* The same for dimensions [dim0, dim0 + n) only (one head: the forward pass stores each head as
 * soon as its projection is done); k or v may be NULL. */
void kv_store_part(kv_cache *kv, int layer, int seq, int cell, int dim0, int n, const float *k, const float *v);
/* Read back as floats (tests, debugging). */
float kv_get_k(const kv_cache *kv, int layer, int seq, int cell, int dim);
float kv_get_v(const kv_cache *kv, int layer, int seq, int cell, int dim);

/* Claim the next cell of `seq` for a token at `pos`; positions of a sequence must increase.
 * Returns the cell index, or -1 with err set (unknown sequence, full, position out of order). */
int32_t kv_append(kv_cache *kv, int32_t seq, int32_t pos, nc_err *err);

void kv_seq_truncate(kv_cache *kv, int32_t seq, int32_t n_keep);
int kv_seq_copy(kv_cache *kv, int32_t src, int32_t dst, nc_err *err);
uint64_t kv_bytes_per_token(const kv_cache *kv);

#endif
