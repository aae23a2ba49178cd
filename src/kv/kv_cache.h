/* The KV cache, reached only through these functions.
 *
 * Paged (vLLM's PagedAttention, Kwon et al. 2023): one pool of blocks of KV_BLOCK cells serves
 * every sequence. A sequence is a table of blocks (its cell c lives in cell c % KV_BLOCK of block
 * table[c / KV_BLOCK]) and the position and token of each cell; its memory grows a block at a
 * time with what it holds, and claiming a cell when no block is left fails with a message the
 * caller can act on (wait, preempt). A block of KV_BLOCK cells is one span of the attention's
 * streaming softmax, so the layout inside a block is the layout attention reads.
 *
 * Blocks are shared, copy-on-write: copying a sequence (beams, n choices) copies its table and
 * counts references; a sequence about to write into a block another sequence (or the prefix
 * index) still relies on copies it first. Prefix sharing (vLLM's automatic prefix caching): a
 * full block whose cells hold positions 0.. of a sequence is indexed by a hash chained over all
 * tokens up to its end; when a sequence lets go of a block that is indexed (or of a partly filled
 * block, kept for its tokens), the block stays in the pool, least recently used first to be
 * reclaimed. kv_seq_reuse_prefix finds the longest cached prefix of a token list: whole blocks
 * are shared; of the first block that matches only in part, a cached one nobody holds is taken
 * over, one another sequence holds is copied up to where it differs.
 *
 * Sliding-window layers keep only their window: a ring of `ring` cells per sequence in which
 * position p lives in cell p % ring (ring is a multiple of KV_BLOCK, so a span of positions
 * aligned to it is a contiguous run of cells). The ring holds the window plus a micro-batch, so a
 * batch's keys never overwrite ones its own queries still see; truncating a sequence by more
 * than that loses positions a later window needs, which kv_window_check reports. A ring is not a
 * prefix of anything: a cache with rings shares no prefixes (copies still work).
 *
 * Keys and values each have their own element type: F16 (default: half the memory and half the
 * bytes attention reads per step), F32, or GGML's Q8_0 / Q4_0 blocks (32 elements and an F16
 * scale: 8.5 and 4.5 bits an element). Float keys are stored transposed, [kv_dim][cells] per
 * block (or ring), and values by cell, [cells][kv_dim]: so both products of attention run along
 * the vector lanes with no sum across lanes (which, for a head of 64 dimensions, cost more than
 * the products): kernels_mix computes a head's scores with its cells in the lanes and the
 * weighted sum of its values with its dimensions in them. Quantised keys cannot be transposed (a
 * group of 32 cells would share a scale that depends on tokens not yet seen), so they are stored
 * by cell like values, quantised along each head's dimensions (head_dim a multiple of 32), and
 * attention reads a span of them dequantised into the layouts above (kv_span_keys,
 * kv_span_values). Each layer has its own shape: heads and head sizes (Gemma 4's differ between
 * layers), none at all (a recurrent layer, or one reading another layer's cache), or one latent
 * row a token whose first dims are also its values (multi-head latent attention: stored by cell,
 * its values read in place).
 *
 * Recurrent layers (kv_state.c) keep a fixed-size state per sequence instead: the state after
 * the sequence's tokens so far. It cannot be cut back to an earlier token, so the cache keeps
 * checkpoints of it: a sequence's own (the state before its last pass that took several tokens,
 * and after it: a rejected speculation goes back to the first, a saved prompt ends at the second),
 * and shared ones found by the hash of the tokens they absorbed (at every block boundary of a
 * sequence whose cells hold positions 0.., and, when such a sequence lets go of its cells, at its
 * end and at its own checkpoints, the end of its prompt among them; and a loaded file's states):
 * the prefix cache of recurrent layers. Going back to position n takes the latest
 * checkpoint at or before n (kv_state_restore_point); the tokens between it and n are computed
 * again by the caller (forward.c), which gives the same state, bit for bit. */
#ifndef NC_KV_CACHE_H
#define NC_KV_CACHE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "kv/kv_evict.h"
#include "kv/kv_file.h"

#define KV_BLOCK 256

typedef struct kv_block {
    int32_t ref;            /* sequence tables holding it */
    int32_t n;              /* cells holding keys and values, from the first */
    bool chained;           /* its cells hold positions from KV_BLOCK * index, of a sequence from 0 */
    bool indexed;           /* full and in the prefix index under `hash` */
    uint64_t parent, hash;  /* chain hash before its first token, and through its n-th (when full) */
    int32_t prev, next;     /* in the free list or the list of cached blocks, or -1 */
} kv_block;

typedef struct kv_seq {
    int32_t len;            /* cells in use */
    int32_t *pos, *tok;     /* [n_ctx] position and token of each cell */
    int32_t *table;         /* [n_ctx / KV_BLOCK, rounded up] block of each logical block, -1 */
    bool chained;           /* every cell holds its own index as position (prefixes can be shared) */
    int32_t exact;          /* cells [0, exact) hold what computing their tokens afresh would: cells
                               kv_seq_keep moved saw tokens that are gone */
    _Atomic uint64_t *score; /* [n_ctx] attention each cell has received (kv_evict.h), while H2O asks */
    kv_budget budget;       /* what the sequence keeps after each forward pass (kv_apply_budget) */
} kv_seq;

typedef struct kv_stats {
    int32_t n_blocks, used, cached, free;  /* pool blocks: held by sequences, kept for reuse, empty */
    uint64_t lookups, hits;                /* kv_seq_reuse_prefix calls, and those that reused a token */
    uint64_t tokens_looked_up, tokens_reused;
    uint64_t evictions;                    /* cached blocks reclaimed for new ones */
} kv_stats;

/* One layer's part of the cache. */
typedef struct kv_layer {
    int32_t n_head_kv, head_dim, head_dim_v; /* 0 heads: the layer keeps no keys and values */
    int32_t kv_dim, v_dim;                  /* n_head_kv * head_dim, n_head_kv * head_dim_v */
    uint32_t type_k, type_v;                /* the cache's types (latent rows: kv_latent_type) */
    size_t k_cell, v_cell;                  /* bytes of one cell's keys, values (0: values in the keys) */
    bool k_by_cell;                         /* keys stored by cell (quantised, or holding the values), not transposed */
    bool v_in_k;                            /* each key head's first head_dim_v dims are its values */
    bool ring;                              /* a sliding window kept in a ring */
    uint8_t *k, *v;                         /* the pool's blocks (or the sequences' rings), layouts above */
    int32_t state;                          /* floats of recurrent state per sequence (0: none) */
    size_t state_at;                        /* where they start in a sequence's state (kv_state.c) */
} kv_layer;

/* A recurrent state as it was after `pos` tokens (kv_state.c). */
typedef struct kv_checkpoint {
    int32_t pos;                            /* tokens absorbed; -1: the slot is free */
    uint64_t hash;                          /* chain hash of those tokens */
    int32_t owner;                          /* the sequence it is one of two own checkpoints of, or -1: shared */
    uint64_t used;                          /* when it was last made or taken (shared ones: least recent goes first) */
    float *state;                           /* every recurrent layer's state, state_floats */
} kv_checkpoint;

typedef struct kv_cache {
    int32_t n_layer, n_seq, n_ctx;
    uint32_t type_k, type_v;                /* GGML_TYPE_F16, F32, Q8_0 or Q4_0 */
    kv_layer *layer;                        /* [n_layer] */
    int32_t n_blocks, max_blocks;           /* the pool; blocks a sequence can hold */
    kv_block *blocks;
    int32_t free_head;                      /* free blocks, a stack */
    int32_t lru_head, lru_tail;             /* cached blocks no sequence holds, oldest first */
    int32_t *index;                         /* open addressing: hash -> block, -1 empty */
    int32_t index_cap;
    int32_t *block_tok;                     /* [n_blocks][KV_BLOCK] tokens of each block's cells */
    kv_seq *seqs;
    kv_stats stats;
    /* sliding layers kept in rings */
    int32_t ring;                           /* cells of a ring (0: none) */
    int32_t *ring_pos;                      /* [n_seq][ring] position held by each ring cell, or -1 */
    int32_t *ring_hole;                     /* [n_seq] newest position a truncation lost from the ring, or -1 */
    /* a copy of the cells kept elsewhere (the GPU's cache, src/cuda/backend.c), or NULL: told of every
     * copy or move of cells between blocks, (dst block, first cell, src block, first cell, n) */
    void (*mirror)(void *ctx, int32_t dst, int32_t to, int32_t src, int32_t from, int32_t n);
    void *mirror_ctx;
    /* recurrent state (kv_state.c) */
    size_t state_floats;                    /* of every recurrent layer, per sequence (0: none) */
    float *state;                           /* [n_seq][state_floats] */
    int32_t *state_pos;                     /* [n_seq] tokens each sequence's state has absorbed */
    kv_checkpoint *ckpt;                    /* [n_ckpt]: two own per sequence, then the shared ones */
    int32_t n_ckpt;
    uint64_t ckpt_clock;
} kv_cache;

/* One layer's shape: heads of keys and values (0: no cache), a ring, values inside the keys,
 * floats of recurrent state per sequence. */
typedef struct kv_layer_config {
    int32_t n_head_kv, head_dim, head_dim_v;
    bool ring, v_in_k;
    int32_t state;
} kv_layer_config;

typedef struct kv_config {
    int32_t n_layer, n_seq, n_ctx;  /* layers, sequences, cells per sequence */
    int32_t n_head_kv, head_dim;    /* every layer's, unless `layers` says */
    const kv_layer_config *layers;  /* [n_layer], or NULL */
    uint32_t type_k, type_v;        /* GGML_TYPE_F16, F32, Q8_0 or Q4_0 (head_dim a multiple of 32) */
    int64_t n_cells;                /* the pool's capacity in cells, rounded up to whole blocks
                                       (0: n_seq * n_ctx, room for every sequence to fill its context) */
    int32_t ring;                   /* cells of a sliding layer's ring (a multiple of KV_BLOCK), */
    const bool *ring_layer;         /* for the layers marked here (NULL: none; `layers` says it otherwise) */
    int32_t n_shared_ckpt;          /* shared checkpoints of recurrent state kept (0: 2 per sequence) */
} kv_config;

int kv_init(kv_cache *kv, const kv_config *cfg, nc_err *err);
void kv_free(kv_cache *kv);

static inline bool kv_is_ring(const kv_cache *kv, int layer) { return kv->layer[layer].ring; }
/* Whether a layer keeps keys and values. */
static inline bool kv_has_cells(const kv_cache *kv, int layer) { return kv->layer[layer].n_head_kv > 0; }
static inline int32_t kv_n_seq(const kv_cache *kv) { return kv->n_seq; }
static inline int32_t kv_n_ctx(const kv_cache *kv) { return kv->n_ctx; }
static inline int32_t kv_seq_len(const kv_cache *kv, int32_t seq) { return kv->seqs[seq].len; }
static inline const int32_t *kv_positions(const kv_cache *kv, int seq) { return kv->seqs[seq].pos; }
static inline const int32_t *kv_tokens(const kv_cache *kv, int seq) { return kv->seqs[seq].tok; }

/* H2O's attention scores (kv_evict.h): whether the forward pass adds a sequence's attention
 * weights to its cells, the adding (from any thread: integers, so the order does not matter), and
 * a cell's score. A claimed cell starts at 0; scores follow their cells through kv_seq_keep and
 * kv_seq_copy. */
static inline bool kv_scoring(const kv_cache *kv, int32_t seq) { return kv->seqs[seq].budget.policy == KV_POLICY_H2O; }
static inline void kv_score_add(kv_cache *kv, int32_t seq, int32_t cell, uint64_t w) {
    atomic_fetch_add_explicit(&kv->seqs[seq].score[cell], w, memory_order_relaxed);
}
static inline uint64_t kv_score(const kv_cache *kv, int32_t seq, int32_t cell) {
    return atomic_load_explicit(&kv->seqs[seq].score[cell], memory_order_relaxed);
}

/* Cells of the pool (its blocks' cells; rings not counted), and the pool slot of a sequence's
 * cell, block * KV_BLOCK + its place in the block: where a copy of the cache kept elsewhere
 * (kv_set_mirror) holds it. */
static inline int64_t kv_pool_cells(const kv_cache *kv) { return (int64_t)kv->n_blocks * KV_BLOCK; }
static inline int32_t kv_cell_slot(const kv_cache *kv, int32_t seq, int32_t cell) {
    return kv->seqs[seq].table[cell / KV_BLOCK] * KV_BLOCK + cell % KV_BLOCK;
}
static inline void kv_set_mirror(kv_cache *kv, void (*mirror)(void *, int32_t, int32_t, int32_t, int32_t, int32_t),
                                 void *ctx) {
    kv->mirror = mirror;
    kv->mirror_ctx = ctx;
}

/* ---- What attention reads ---- */

/* A span of KV_BLOCK cells of one layer, starting at a multiple of KV_BLOCK: cell `first` of a
 * sequence (full layers), or position `first` (ring layers: the ring cells holding positions
 * first..). Float keys of dimension d at k + d * k_row (transposed), quantised keys of the span's
 * cell c at k + c * k_row; values of cell c at v + c * v_row. */
typedef struct kv_span {
    const uint8_t *k, *v;
    size_t k_row, v_row;
    const int32_t *label;   /* position held by each cell of the span */
} kv_span;
kv_span kv_span_at(const kv_cache *kv, int layer, int32_t seq, int32_t first);

/* A matrix as kernels_mix reads it: rows of `type` elements (F16 or F32), row_bytes apart. */
typedef struct kv_mat {
    uint32_t type;
    const uint8_t *a;
    size_t row_bytes;
} kv_mat;
/* The keys of KV head g of a layer over the span's first n cells, [head_dim][n] (a row per
 * dimension), and its values, [n][head_dim_v] (a row per cell). Float types are read in place;
 * quantised ones (and keys stored by cell) are converted into scratch (kv_scratch_floats floats,
 * the caller's own). */
kv_mat kv_span_keys(const kv_cache *kv, int layer, const kv_span *sp, int g, int n, float *scratch);
kv_mat kv_span_values(const kv_cache *kv, int layer, const kv_span *sp, int g, int n, float *scratch);
/* Floats of scratch one kv_span_keys or kv_span_values call may fill: 0 when no layer needs any. */
size_t kv_scratch_floats(const kv_cache *kv);
static inline const int32_t *kv_ring_positions(const kv_cache *kv, int seq) {
    return kv->ring_pos + (size_t)seq * kv->ring;
}

/* ---- Writing ---- */

/* Claim the next cell of `seq` for `token` at `pos`; positions of a sequence must increase.
 * Takes a block from the pool when the sequence enters a new one, and copies a shared block
 * before the sequence writes into it. Returns the cell index, or -1 with err set (unknown
 * sequence, context full, pool exhausted, position out of order). */
int32_t kv_append(kv_cache *kv, int32_t seq, int32_t pos, int32_t token, nc_err *err);
/* Give the ring cell of position pos to it (when the token's micro-batch starts: earlier
 * micro-batches of the same call still read what it held). */
void kv_ring_claim(kv_cache *kv, int32_t seq, int32_t pos);
/* Whether a query at pos can see its window (p - window, p] of seq: fails when a truncation lost
 * some of it. */
int kv_window_check(const kv_cache *kv, int32_t seq, int32_t pos, int32_t window, nc_err *err);
/* Write the keys and values of dimensions [dim0, dim0 + n) of the token in cell `cell` (position
 * pos) of a sequence (the forward pass stores each head as soon as its projection is done: dim0
 * and n are multiples of head_dim, so whole blocks of a quantised type); k or v may be NULL. */
void kv_store(kv_cache *kv, int layer, int32_t seq, int32_t cell, int32_t pos, int dim0, int n, const float *k,
              const float *v);
/* The claimed cells now hold their keys and values: index the blocks they filled. */
void kv_commit(kv_cache *kv);
/* Read back as floats (tests, debugging). */
float kv_get_k(const kv_cache *kv, int layer, int32_t seq, int32_t cell, int dim);
float kv_get_v(const kv_cache *kv, int layer, int32_t seq, int32_t cell, int dim);

/* ---- One cell's rows, as stored (saving and restoring) ---- */

/* Bytes of the key row and of the value row of one cell of a layer: kv_dim (v_dim) elements of
 * the cache's key or value type, in dimension order (quantised: blocks of 32 dimensions); 0 for a
 * layer without cells, and values kept in the keys. */
static inline size_t kv_k_row_bytes(const kv_cache *kv, int layer) { return kv->layer[layer].k_cell; }
static inline size_t kv_v_row_bytes(const kv_cache *kv, int layer) { return kv->layer[layer].v_cell; }
/* Copy the key and value rows of a sequence's cell out of the cache, or into it (the cell
 * claimed by kv_append and, for ring layers, the ring cell of its position by kv_ring_claim). */
void kv_read_row(const kv_cache *kv, int layer, int32_t seq, int32_t cell, uint8_t *k, uint8_t *v);
void kv_write_row(kv_cache *kv, int layer, int32_t seq, int32_t cell, const uint8_t *k, const uint8_t *v);
/* The first cells of seq that hold what computing their tokens afresh would (kv_seq_keep's moved
 * cells do not); and, for a sequence being restored, "the cells appended from now on were moved":
 * they are no prefix of anything, as kv_seq_keep leaves them. */
static inline int32_t kv_seq_n_exact(const kv_cache *kv, int32_t seq) {
    const kv_seq *q = &kv->seqs[seq];
    return q->exact < q->len ? q->exact : q->len;
}
void kv_seq_mark_moved(kv_cache *kv, int32_t seq);

/* ---- Recurrent state (kv_state.c) ---- */

/* Layer's state of a sequence: its convolution's then its recurrence's floats (kv_layer.state). */
static inline float *kv_state(const kv_cache *kv, int layer, int32_t seq) {
    return kv->state + (size_t)seq * kv->state_floats + kv->layer[layer].state_at;
}
static inline bool kv_recurrent(const kv_cache *kv) { return kv->state_floats > 0; }
/* The position the state of seq will be back at when it is truncated to n cells: the latest
 * checkpoint at or before n that holds its tokens (0 when none does). kv_seq_truncate goes there;
 * the caller computes the tokens from there to n again. Equal to n for a cache without recurrent
 * state. */
int32_t kv_state_restore_point(const kv_cache *kv, int32_t seq, int32_t n);
/* The states that hold prefixes of seq's first n tokens, its own now (when it has absorbed no more
 * than n) and the checkpoints of its tokens (its own and shared ones): the latest `max` positions
 * above 0, in increasing order, into pos[] and states[] (state_floats each, pointers into the
 * cache, good until it changes). Returns how many. */
int kv_state_prefixes(const kv_cache *kv, int32_t seq, int32_t n, int max, int32_t *pos, const float **states);
/* seq's state, absorbing its first pos tokens: `bytes` (state_floats little-endian f32, as a
 * file holds them), or zeros when NULL. */
void kv_state_set(kv_cache *kv, int32_t seq, const uint8_t *bytes, int32_t pos);
/* A shared checkpoint of a state (bytes as kv_state_set reads them) after the first pos tokens
 * of tok[] (a loaded file's earlier states, for the prefix cache). */
void kv_state_offer(kv_cache *kv, const int32_t *tok, int32_t pos, const uint8_t *bytes);
/* A checkpoint of seq's state now (its own: `after` says whether before or after a pass). */
void kv_state_checkpoint(kv_cache *kv, int32_t seq, bool after);
/* A shared checkpoint of seq's state now, found again by the hash of its tokens. */
void kv_state_share(kv_cache *kv, int32_t seq);
/* Bytes of state per sequence, and of the checkpoint slots allocated so far. */
static inline uint64_t kv_state_bytes(const kv_cache *kv) { return kv->state_floats * sizeof(float); }
uint64_t kv_checkpoint_bytes(const kv_cache *kv);

/* ---- Sequences ---- */

/* Keep the first n_keep cells of seq; with recurrent state, back at kv_state_restore_point(seq,
 * n_keep): the cells after it go too. */
void kv_seq_truncate(kv_cache *kv, int32_t seq, int32_t n_keep);
/* Keep only cells[0..n) of seq (increasing), which become its cells 0..n-1 with positions
 * new_pos[0..n) (increasing): the eviction policies (context shift, attention sinks, compression
 * windows) decide what to keep; re-rotating the keys for their new positions is the caller's (the
 * forward pass knows the rotary embedding). Ring layers move what they hold to the new positions.
 * old_pos (n entries, may be NULL) receives the kept cells' former positions. */
int kv_seq_keep(kv_cache *kv, int32_t seq, const int32_t *cells, int32_t n, const int32_t *new_pos, int32_t *old_pos,
                nc_err *err);
/* Whether a layer holds the keys and values of a sequence's cell (a ring may have overwritten it). */
bool kv_holds(const kv_cache *kv, int layer, int32_t seq, int32_t cell);
/* The keys of one cell of a layer as floats (kv_dim of them). */
void kv_read_k(const kv_cache *kv, int layer, int32_t seq, int32_t cell, float *out);
/* Make dst share src's cells (copy-on-write). */
int kv_seq_copy(kv_cache *kv, int32_t src, int32_t dst, nc_err *err);
/* An empty sequence takes the longest cached prefix of tokens[0..n) (at most n cells), at
 * positions 0..: returns how many cells it now holds (0 when nothing is cached, or the cache has
 * rings). With recurrent state, the longest such prefix whose state a shared checkpoint holds. */
int32_t kv_seq_reuse_prefix(kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n);
/* Blocks the pool must provide for seq to take n more cells (new blocks, and the copy of a
 * shared block it would write into), and blocks it can provide now (free and cached). */
int32_t kv_blocks_needed(const kv_cache *kv, int32_t seq, int32_t n);
int32_t kv_blocks_available(const kv_cache *kv);

/* ---- Accounting ---- */

/* Bytes one more cached token takes (layers that keep every token), and the whole allocation. */
uint64_t kv_bytes_per_token(const kv_cache *kv);
uint64_t kv_bytes_total(const kv_cache *kv);
kv_stats kv_get_stats(const kv_cache *kv);

#endif
