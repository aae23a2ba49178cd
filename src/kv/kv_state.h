/* Internal to the kv layer: the recurrent state's bookkeeping (kv_state.c) that kv_cache.c calls
 * as sequences are made, copied, cut and taken from the prefix cache. */
#ifndef NC_KV_STATE_H
#define NC_KV_STATE_H

#include "kv/kv_cache.h"

/* The chain hash of the empty prefix, and of a prefix continued by n tokens. */
#define KV_CHAIN_SEED 0x6e75636c65757321ull /* "nucleus!" */
uint64_t kv_chain_hash(uint64_t parent, const int32_t *tok, int n);

/* The sequences' states (zero) and the checkpoint slots; their states are allocated when first used. */
int kv_state_init(kv_cache *kv, int32_t n_shared);
void kv_state_free(kv_cache *kv);
/* dst's state becomes src's (not its checkpoints). */
void kv_state_copy(kv_cache *kv, int32_t src, int32_t dst);
/* A sequence letting go of its cells: its state at its end and its own checkpoints become
 * shared ones, for the prefix cache. */
void kv_state_release(kv_cache *kv, int32_t seq);
/* seq's state goes back to kv_state_restore_point(seq, n), which is returned. */
int32_t kv_state_restore(kv_cache *kv, int32_t seq, int32_t n);
/* The longest m <= n whose tokens[0..m) a shared checkpoint holds (0: none), and an empty
 * sequence's state taken from it. */
int32_t kv_state_find(const kv_cache *kv, const int32_t *tokens, int32_t n);
void kv_state_take(kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t m);

#endif
