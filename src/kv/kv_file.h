/* A sequence's KV cache saved to a file, and loaded back (`run --prompt-cache`, the server's
 * slot save / restore).
 *
 * The file says which model and which cache it belongs to, so that a file from another model,
 * other key or value types or another shape is refused with a message saying so, never loaded.
 * Little-endian throughout:
 *
 *   offset  0  "NCKV"                  magic
 *           4  u32 version             KV_FILE_VERSION
 *           8  u64 fingerprint         of the model's hyper-parameters and weights (model_fingerprint)
 *          16  char arch[32]           the architecture, NUL-padded (for messages)
 *          48  char name[64]           the model's name, NUL-padded (for messages)
 *         112  u32 n_layer
 *         116  u32 n_states            recurrent states saved (0..KV_FILE_MAX_STATES; 0 without state)
 *         120  u32 type_k, type_v      the key and value element types (ggml ids: F16, F32, Q8_0, Q4_0)
 *         128  u32 cell_bytes          bytes of one cell's rows in every layer (keys and values)
 *         132  u32 state_floats        floats of recurrent state (every recurrent layer's)
 *         136  u32 n_cells             cells saved (at least 1)
 *         140  u32 n_exact             the first n_exact cells hold what computing their tokens
 *                                      afresh gives; the others were moved (kv_seq_keep: context
 *                                      shift) and, loaded, are no prefix of anything
 *         144  per layer: u32 k_dim, v_dim, state   its key and value row widths (0: no cells;
 *                                      v_dim 0 with keys: values inside the keys) and state floats
 *              i32 tokens[n_cells], i32 positions[n_cells]
 *              rows: for each layer with cells, for each cell, its key row then its value row,
 *              each in dimension order (quantised rows: GGML's blocks of 32 dimensions, as the
 *              cache keeps them, so saving and loading round nothing)
 *              per state, in increasing order of pos: u32 pos (1..n_cells), the tokens it has
 *              absorbed, then f32 state[state_floats] (every recurrent layer's, in layer order)
 *         end  u64 checksum            nc_hash of every byte before it
 *
 * Every layer holds every saved cell: a cache whose sliding-window layers keep a ring can only
 * save cells the ring still holds (kv_seq_save says so); such a file loads into any layout. The
 * states are those the cache held for prefixes of the cells (the sequence's own at its end, the
 * checkpoints of its prompt): loaded, the latest becomes the sequence's, carried forward by
 * computing the tokens after it again (forward.c), and the earlier ones checkpoints the prefix
 * cache finds (a restored server slot then serves the same prompt again from the checkpoint
 * before its last token).
 *
 * The parser (kv_file_parse, kv_file_check) works on bytes alone, with nothing of the cache, so
 * it can be fuzzed by itself (tests/fuzz/fuzz_kv_file.c); kv_seq_save / kv_seq_load move cells
 * between a file and the cache through the cache's row accessors (kv_read_row, kv_write_row), so
 * they do not depend on how a block lays its cells out. */
#ifndef NC_KV_FILE_H
#define NC_KV_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define KV_FILE_MAGIC "NCKV"
#define KV_FILE_VERSION 2u
#define KV_FILE_HEADER 144
#define KV_FILE_MAX_CELLS (1 << 24)
#define KV_FILE_MAX_LAYERS 4096
#define KV_FILE_MAX_STATES 4

/* The type latent rows (values inside the keys) are kept in for a cache of key type `type`: F32
 * where it is F16. A latent row is every head's keys and values at once, compressed already
 * (multi-head latent attention); rounding it to F16 moves the log-probabilities of DeepSeek's
 * test model by 0.66 (a routing flip) where F32 costs half of what F16 full keys and values
 * would. The quantised types stay as asked. */
static inline uint32_t kv_latent_type(uint32_t type) { return type == 1 /* GGML_TYPE_F16 */ ? 0 /* F32 */ : type; }

/* One layer's shape in a file. */
typedef struct kv_file_layer {
    uint32_t k_dim, v_dim, state;
} kv_file_layer;

/* What a file belongs to: the model, and the cache's shape and key and value types. */
typedef struct kv_file_id {
    uint64_t fingerprint;
    char arch[32], name[64];   /* NUL-terminated */
    uint32_t n_layer, type_k, type_v;
    const kv_file_layer *layers; /* [n_layer] */
} kv_file_id;

/* A parsed file: its header, its tokens and positions (decoded), and where its rows are. */
typedef struct kv_file_view {
    kv_file_id id;
    int32_t n_cells, n_exact;
    size_t cell_bytes;         /* one cell's rows of every layer */
    size_t state_floats;
    int32_t n_states, state_pos[KV_FILE_MAX_STATES]; /* the states, and the tokens each absorbed */
    kv_file_layer *layers;     /* [n_layer], owned (id.layers points here) */
    int32_t *tokens, *pos;     /* [n_cells], owned */
    const uint8_t *rows;       /* inside the bytes parsed: per layer with cells, [n_cells] key row, value row */
    const uint8_t *states[KV_FILE_MAX_STATES]; /* inside the bytes parsed: state_floats f32 each */
} kv_file_view;

/* Check the bytes of a whole file and decode its header, tokens and positions: the magic and
 * version, every field's range, the size the header implies against the size there is, the
 * checksum, positions that increase from 0 or more, and every element finite. `name` (the
 * file's path) starts every message, which also names the field and its offset. */
int kv_file_parse(kv_file_view *v, const uint8_t *data, size_t size, const char *name, nc_err *err);
void kv_file_view_free(kv_file_view *v);

/* Whether a parsed file belongs to `want` (a model and a cache): the architecture, shape,
 * key and value types and fingerprint, and tokens below n_vocab. The message says what differs. */
int kv_file_check(const kv_file_view *v, const kv_file_id *want, int32_t n_vocab, const char *name, nc_err *err);

/* Bytes of a row of n elements of `type`; 0 when a cache cannot keep that type or n is not whole
 * blocks of it. */
size_t kv_file_row_bytes(uint32_t type, uint32_t n);
/* Bytes of one cell's rows in every layer of an identity. */
size_t kv_file_cell_bytes(const kv_file_id *id);

/* The header (and layer table, KV_FILE_HEADER + 12 n_layer bytes) of a file of n_cells cells
 * (n_exact of them exact) with the given identity and n_states states. */
void kv_file_header(uint8_t *out, const kv_file_id *id, uint32_t n_cells, uint32_t n_exact, uint32_t n_states);

/* ---- Between a file and the cache (kv_file.c) ---- */

typedef struct kv_cache kv_cache;

/* A file's identity for this cache: the model's (fingerprint, arch, name) and the cache's shape
 * and key and value types; its layer table is written into `layers` (n_layer entries). */
kv_file_id kv_file_id_of(const kv_cache *kv, const kv_file_id *model, kv_file_layer *layers);

/* Save the first n cells of seq to path, the model's identity taken from `model` (fingerprint,
 * arch, name) and the cache's from kv, with the recurrent states that hold prefixes of them
 * (kv_state_prefixes, the latest KV_FILE_MAX_STATES). Written to a temporary file beside path, synced, then renamed over it: path is the
 * old file or the whole new one, never a part. *bytes: the size. */
int kv_seq_save(const kv_cache *kv, int32_t seq, int32_t n, const kv_file_id *model, const char *path,
                uint64_t *bytes, nc_err *err);
/* Replace seq's cells with the first n cells of a parsed, checked file, and its recurrent state
 * with the file's latest at or before n (the earlier ones become shared checkpoints): returns the
 * cells whose state that is (the caller computes the others again,
 * and the sequence then holds them; kv_seq_load leaves it holding only the first of them), or -1.
 * n beyond the file or the context is refused with the sequence as it was; a pool that runs out
 * of blocks half-way leaves it empty. */
int32_t kv_seq_load(kv_cache *kv, int32_t seq, const kv_file_view *v, int32_t n, const char *name, nc_err *err);

#endif
