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
 *         112  u32 n_layer, kv_dim     the cache's shape
 *         120  u32 type_k, type_v      its key and value element types (ggml ids: F16, F32, Q8_0, Q4_0)
 *         128  u32 k_row_bytes         bytes of one key row: kv_dim elements of type_k
 *         132  u32 v_row_bytes         and of one value row
 *         136  u32 n_cells             cells saved (at least 1)
 *         140  u32 n_exact             the first n_exact cells hold what computing their tokens
 *                                      afresh gives; the others were moved (kv_seq_keep: context
 *                                      shift) and, loaded, are no prefix of anything
 *         144  i32 tokens[n_cells], i32 positions[n_cells]
 *              rows: for each layer, for each cell, its key row then its value row, each in
 *              dimension order (quantised rows: GGML's blocks of 32 dimensions, as the cache
 *              keeps them, so saving and loading round nothing)
 *         end  u64 checksum            nc_hash of every byte before it
 *
 * Every layer holds every saved cell: a cache whose sliding-window layers keep a ring can only
 * save cells the ring still holds (kv_seq_save says so); such a file loads into any layout.
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
#define KV_FILE_VERSION 1u
#define KV_FILE_HEADER 144
#define KV_FILE_MAX_CELLS (1 << 24)

/* What a file belongs to: the model, and the cache's shape and key and value types. */
typedef struct kv_file_id {
    uint64_t fingerprint;
    char arch[32], name[64];   /* NUL-terminated */
    uint32_t n_layer, kv_dim, type_k, type_v;
} kv_file_id;

/* A parsed file: its header, its tokens and positions (decoded), and where its rows are. */
typedef struct kv_file_view {
    kv_file_id id;
    int32_t n_cells, n_exact;
    size_t k_row_bytes, v_row_bytes;
    int32_t *tokens, *pos;     /* [n_cells], owned */
    const uint8_t *rows;       /* inside the bytes parsed: [n_layer][n_cells] key row, value row */
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

/* Bytes of a row of kv_dim elements of `type`; 0 when a cache cannot keep that type or kv_dim is
 * not whole blocks of it. */
size_t kv_file_row_bytes(uint32_t type, uint32_t kv_dim);

/* The header of a file of n_cells cells (n_exact of them exact) with the given identity. */
void kv_file_header(uint8_t out[KV_FILE_HEADER], const kv_file_id *id, uint32_t n_cells, uint32_t n_exact);

/* ---- Between a file and the cache (kv_file.c) ---- */

typedef struct kv_cache kv_cache;

/* A file's identity for this cache: the model's (fingerprint, arch, name) and the cache's shape
 * and key and value types. */
kv_file_id kv_file_id_of(const kv_cache *kv, const kv_file_id *model);

/* Save the first n cells of seq to path, the model's identity taken from `model` (fingerprint,
 * arch, name) and the cache's from kv. Written to a temporary file beside path, synced, then
 * renamed over it: path is the old file or the whole new one, never a part. *bytes: the size. */
int kv_seq_save(const kv_cache *kv, int32_t seq, int32_t n, const kv_file_id *model, const char *path,
                uint64_t *bytes, nc_err *err);
/* Replace seq's cells with the first n cells of a parsed, checked file. n beyond the file or
 * the context is refused with the sequence as it was; a pool that runs out of blocks half-way
 * leaves it empty. */
int kv_seq_load(kv_cache *kv, int32_t seq, const kv_file_view *v, int32_t n, const char *name, nc_err *err);

#endif
