/* The KV cache: for every layer, keys and values of n_seq sequences (GQA stores only the
 * n_head_kv heads). Each sequence owns n_ctx cells, filled in order; each remembers the position
 * of its token, which the attention mask compares against. Sequences can be cleared, truncated
 * and copied (shared prompts, beams).
 *
 * Sliding-window layers keep only their window: a ring of `ring` cells per sequence in which
 * position p lives in cell p % ring (ring is a multiple of the attention span, so a span of
 * positions aligned to it is a contiguous run of cells). The ring holds the window plus a
 * micro-batch, so a batch's keys never overwrite ones its own queries still see; truncating a
 * sequence by more than that loses positions a later window needs, which kv_window_check reports.
 *
 * Elements are F16 (default: half the memory and half the bytes attention reads per step) or
 * F32. Keys are stored transposed, [seq][kv_dim][cells], and values by cell, [seq][cell][kv_dim]:
 * so both products of attention run along the vector lanes with no sum across lanes (which, for
 * a head of 64 dimensions, cost more than the products): kernels_mix computes a head's scores
 * with its cells in the lanes and the weighted sum of its values with its dimensions in them. */
#ifndef NC_KV_CACHE_H
#define NC_KV_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

typedef struct kv_cache {
    int32_t n_layer, n_seq, n_ctx, kv_dim;  /* kv_dim = n_head_kv * head_dim */
    uint32_t type;                          /* GGML_TYPE_F16 or GGML_TYPE_F32 */
    size_t elem;                            /* bytes per element */
    uint8_t **kt, **v;                      /* per layer, layouts above */
    int32_t *cells;                         /* [n_layer] cells per sequence: n_ctx, or ring */
    bool *in_ring;                          /* [n_layer] a sliding layer kept in a ring */
    int32_t *pos;                           /* [n_seq][n_ctx] position of each cell */
    int32_t *len;                           /* [n_seq] cells in use */
    int32_t ring;                           /* ring size of sliding layers (0: none) */
    int32_t *ring_pos;                      /* [n_seq][ring] position held by each ring cell, or -1 */
    int32_t *ring_hole;                     /* [n_seq] newest position a truncation lost from the ring, or -1 */
} kv_cache;

/* ring_layer[l] (NULL: none) marks the layers stored in rings of `ring` cells (a multiple of 256). */
int kv_init(kv_cache *kv, int32_t n_layer, int32_t n_seq, int32_t n_ctx, int32_t kv_dim, uint32_t type, int32_t ring,
            const bool *ring_layer, nc_err *err);
void kv_free(kv_cache *kv);

static inline bool kv_is_ring(const kv_cache *kv, int layer) { return kv->in_ring[layer]; }

/* Keys of one dimension across the cells of a sequence (rows of consecutive dimensions
 * kv_kt_row_bytes apart). */
static inline const void *kv_kt(const kv_cache *kv, int layer, int seq, int dim) {
    return kv->kt[layer] + ((size_t)seq * kv->kv_dim + dim) * kv->cells[layer] * kv->elem;
}
static inline size_t kv_kt_row_bytes(const kv_cache *kv, int layer) { return (size_t)kv->cells[layer] * kv->elem; }
/* Values of one cell (kv_dim elements; rows of consecutive cells kv_v_row_bytes apart). */
static inline const void *kv_v(const kv_cache *kv, int layer, int seq, int cell) {
    return kv->v[layer] + ((size_t)seq * kv->cells[layer] + cell) * kv->kv_dim * kv->elem;
}
static inline size_t kv_v_row_bytes(const kv_cache *kv) { return (size_t)kv->kv_dim * kv->elem; }
static inline const int32_t *kv_positions(const kv_cache *kv, int seq) { return kv->pos + (size_t)seq * kv->n_ctx; }
static inline const int32_t *kv_ring_positions(const kv_cache *kv, int seq) {
    return kv->ring_pos + (size_t)seq * kv->ring;
}
/* The cell of a layer that holds the token of sequence cell `cell` at position pos. */
static inline int32_t kv_layer_cell(const kv_cache *kv, int layer, int32_t cell, int32_t pos) {
    return kv_is_ring(kv, layer) ? pos % kv->ring : cell;
}

/* Write the keys and values of one token (kv_dim floats each) into a claimed cell of a layer. */
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
/* Give the ring cell of position pos to it (when the token's micro-batch starts: earlier
 * micro-batches of the same call still read what it held). */
void kv_ring_claim(kv_cache *kv, int32_t seq, int32_t pos);
/* Whether a query at pos can see its window (p - window, p] of seq: fails when a truncation lost
 * some of it. */
int kv_window_check(const kv_cache *kv, int32_t seq, int32_t pos, int32_t window, nc_err *err);

void kv_seq_truncate(kv_cache *kv, int32_t seq, int32_t n_keep);
int kv_seq_copy(kv_cache *kv, int32_t src, int32_t dst, nc_err *err);
/* Bytes one more cached token takes (layers that keep every token), and the whole allocation. */
uint64_t kv_bytes_per_token(const kv_cache *kv);
uint64_t kv_bytes_total(const kv_cache *kv);

#endif
