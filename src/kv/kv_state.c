/* The recurrent layers' state and its checkpoints (kv_cache.h; kv_state.h). A sequence's state is
 * one array of every recurrent layer's floats; state_pos says how many of its tokens it has
 * absorbed. Checkpoints are copies of such arrays with the position and the chain hash of the
 * tokens they absorbed, so a checkpoint is good for any sequence whose first tokens are those:
 * the sequence's own two (before and after its last pass of several tokens) and the shared ones,
 * taken at block boundaries and where a sequence let go of its cells, least recently used first
 * to be replaced. */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_state.h"

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t kv_chain_hash(uint64_t parent, const int32_t *tok, int n) {
    uint64_t h = parent;
    for (int i = 0; i < n; i++) h = mix64(h ^ (uint32_t)tok[i]) + 0x9e3779b97f4a7c15ull;
    return h;
}

static float *seq_state(const kv_cache *kv, int32_t seq) { return kv->state + (size_t)seq * kv->state_floats; }

int kv_state_init(kv_cache *kv, int32_t n_shared) {
    if (!kv->state_floats) return 0;
    kv->state = calloc((size_t)kv->n_seq * kv->state_floats, sizeof(float));
    kv->state_pos = calloc((size_t)kv->n_seq, sizeof *kv->state_pos);
    kv->n_ckpt = 2 * kv->n_seq + (n_shared > 0 ? n_shared : 2 * kv->n_seq);
    kv->ckpt = calloc((size_t)kv->n_ckpt, sizeof *kv->ckpt);
    if (!kv->state || !kv->state_pos || !kv->ckpt) return -1;
    for (int32_t i = 0; i < kv->n_ckpt; i++) kv->ckpt[i] = (kv_checkpoint){.pos = -1, .owner = i < 2 * kv->n_seq ? i / 2 : -1};
    return 0;
}

void kv_state_free(kv_cache *kv) {
    for (int32_t i = 0; kv->ckpt && i < kv->n_ckpt; i++) free(kv->ckpt[i].state);
    free(kv->ckpt);
    free(kv->state);
    free(kv->state_pos);
}

uint64_t kv_checkpoint_bytes(const kv_cache *kv) {
    uint64_t n = 0;
    for (int32_t i = 0; i < kv->n_ckpt; i++) n += kv->ckpt[i].state ? kv->state_floats * sizeof(float) : 0;
    return n;
}

/* Store seq's state now into slot c. */
static void save(kv_cache *kv, kv_checkpoint *c, int32_t seq) {
    if (!c->state && !(c->state = malloc(kv->state_floats * sizeof(float)))) {
        c->pos = -1; /* out of memory: no checkpoint, which only costs computing again */
        return;
    }
    int32_t pos = kv->state_pos[seq];
    memcpy(c->state, seq_state(kv, seq), kv->state_floats * sizeof(float));
    c->pos = pos;
    c->hash = kv_chain_hash(KV_CHAIN_SEED, kv_tokens(kv, seq), pos);
    c->used = ++kv->ckpt_clock;
}

void kv_state_checkpoint(kv_cache *kv, int32_t seq, bool after) {
    if (kv_recurrent(kv) && kv->state_pos[seq] <= kv_seq_len(kv, seq)) save(kv, &kv->ckpt[2 * seq + after], seq);
}

/* Whether checkpoint c holds the first tokens of a sequence holding tok[0..n), for a position <= n. */
static bool holds(const kv_checkpoint *c, const int32_t *tok, int32_t n) {
    return c->pos >= 0 && c->pos <= n && c->hash == kv_chain_hash(KV_CHAIN_SEED, tok, c->pos);
}

/* A shared slot for a state of `pos` tokens of tok[]: NULL when one holds it already (then marked
 * used), else a free one, else the least recently used. */
static kv_checkpoint *shared_slot(kv_cache *kv, const int32_t *tok, int32_t pos) {
    kv_checkpoint *slot = NULL;
    for (int32_t i = 2 * kv->n_seq; i < kv->n_ckpt; i++) {
        kv_checkpoint *c = &kv->ckpt[i];
        if (c->pos == pos && holds(c, tok, pos)) { /* kept already */
            c->used = ++kv->ckpt_clock;
            return NULL;
        }
        if (!slot || (slot->pos >= 0 && (c->pos < 0 || c->used < slot->used))) slot = c;
    }
    return slot;
}

void kv_state_share(kv_cache *kv, int32_t seq) {
    if (!kv_recurrent(kv) || !kv->seqs[seq].chained || kv->state_pos[seq] > kv_seq_len(kv, seq) || !kv->state_pos[seq])
        return;
    kv_checkpoint *slot = shared_slot(kv, kv_tokens(kv, seq), kv->state_pos[seq]);
    if (slot) save(kv, slot, seq);
}

void kv_state_release(kv_cache *kv, int32_t seq) {
    if (!kv_recurrent(kv) || !kv->seqs[seq].chained) return;
    kv_state_share(kv, seq);
    /* its own checkpoints hold prefixes of its tokens too (the end of its prompt, typically): what a
     * later request of the same prompt takes */
    for (int k = 0; k < 2; k++) {
        kv_checkpoint *own = &kv->ckpt[2 * seq + k];
        if (own->pos <= 0 || !holds(own, kv_tokens(kv, seq), kv_seq_len(kv, seq))) continue;
        kv_checkpoint *slot = shared_slot(kv, kv_tokens(kv, seq), own->pos);
        if (!slot || (!slot->state && !(slot->state = malloc(kv->state_floats * sizeof(float))))) continue;
        memcpy(slot->state, own->state, kv->state_floats * sizeof(float));
        slot->pos = own->pos;
        slot->hash = own->hash;
        slot->used = ++kv->ckpt_clock;
    }
}

/* The checkpoint a sequence holding tok[0..n) goes back to for position n: the latest that holds
 * its tokens (own or shared), or NULL (the empty state). */
static const kv_checkpoint *best(const kv_cache *kv, int32_t seq, const int32_t *tok, int32_t n) {
    const kv_checkpoint *b = NULL;
    for (int32_t i = 0; i < kv->n_ckpt; i++) {
        const kv_checkpoint *c = &kv->ckpt[i];
        if ((c->owner < 0 || c->owner == seq) && (!b || c->pos > b->pos) && holds(c, tok, n)) b = c;
    }
    return b;
}

int32_t kv_state_restore_point(const kv_cache *kv, int32_t seq, int32_t n) {
    if (!kv_recurrent(kv)) return n;
    if (kv->state_pos[seq] <= n) return kv->state_pos[seq];
    const kv_checkpoint *c = best(kv, seq, kv_tokens(kv, seq), n);
    return c ? c->pos : 0;
}

int32_t kv_state_restore(kv_cache *kv, int32_t seq, int32_t n) {
    if (!kv_recurrent(kv)) return n;
    if (kv->state_pos[seq] <= n) return kv->state_pos[seq];
    kv_checkpoint *c = (kv_checkpoint *)best(kv, seq, kv_tokens(kv, seq), n);
    if (c) {
        memcpy(seq_state(kv, seq), c->state, kv->state_floats * sizeof(float));
        c->used = ++kv->ckpt_clock;
    } else {
        memset(seq_state(kv, seq), 0, kv->state_floats * sizeof(float));
    }
    return kv->state_pos[seq] = c ? c->pos : 0;
}

void kv_state_copy(kv_cache *kv, int32_t src, int32_t dst) {
    if (!kv_recurrent(kv)) return;
    memcpy(seq_state(kv, dst), seq_state(kv, src), kv->state_floats * sizeof(float));
    kv->state_pos[dst] = kv->state_pos[src];
}

int32_t kv_state_find(const kv_cache *kv, const int32_t *tokens, int32_t n) {
    int32_t m = 0;
    for (int32_t i = 2 * kv->n_seq; i < kv->n_ckpt; i++)
        if (kv->ckpt[i].pos > m && holds(&kv->ckpt[i], tokens, n)) m = kv->ckpt[i].pos;
    return m;
}

void kv_state_take(kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t m) {
    memset(seq_state(kv, seq), 0, kv->state_floats * sizeof(float));
    kv->state_pos[seq] = 0;
    for (int32_t i = 2 * kv->n_seq; m > 0 && i < kv->n_ckpt; i++) {
        kv_checkpoint *c = &kv->ckpt[i];
        if (c->pos == m && holds(c, tokens, m)) {
            memcpy(seq_state(kv, seq), c->state, kv->state_floats * sizeof(float));
            c->used = ++kv->ckpt_clock;
            kv->state_pos[seq] = m;
            return;
        }
    }
}

int kv_state_prefixes(const kv_cache *kv, int32_t seq, int32_t n, int max, int32_t *pos, const float **states) {
    int k = 0;
    if (!kv_recurrent(kv) || max < 1) return 0;
    /* candidates: the sequence's state, then every checkpoint it may use; kept sorted, the
     * earliest dropped past max */
    for (int32_t i = -1; i < kv->n_ckpt; i++) {
        const kv_checkpoint *c = i >= 0 ? &kv->ckpt[i] : NULL;
        int32_t p = c ? c->pos : kv->state_pos[seq];
        if (p <= 0 || p > n || (c && ((c->owner >= 0 && c->owner != seq) || !holds(c, kv_tokens(kv, seq), n)))) continue;
        int j = 0;
        while (j < k && pos[j] < p) j++;
        if (j < k && pos[j] == p) continue; /* one state per position */
        if (k == max) {
            if (j == 0) continue; /* earlier than all kept */
            memmove(pos, pos + 1, (size_t)(j - 1) * sizeof *pos);
            memmove(states, states + 1, (size_t)(j - 1) * sizeof *states);
            j--;
        } else {
            memmove(pos + j + 1, pos + j, (size_t)(k - j) * sizeof *pos);
            memmove(states + j + 1, states + j, (size_t)(k - j) * sizeof *states);
            k++;
        }
        pos[j] = p;
        states[j] = c ? c->state : seq_state(kv, seq);
    }
    return k;
}

/* Little-endian f32 bytes (a file's) into floats; zeros for NULL. */
static void decode(float *out, const uint8_t *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = 0;
        for (int k = 0; bytes && k < 4; k++) bits |= (uint32_t)bytes[4 * i + (size_t)k] << 8 * k;
        memcpy(&out[i], &bits, 4);
    }
}

void kv_state_offer(kv_cache *kv, const int32_t *tok, int32_t pos, const uint8_t *bytes) {
    if (!kv_recurrent(kv) || pos <= 0) return;
    kv_checkpoint *slot = shared_slot(kv, tok, pos);
    if (!slot || (!slot->state && !(slot->state = malloc(kv->state_floats * sizeof(float))))) return;
    decode(slot->state, bytes, kv->state_floats);
    slot->pos = pos;
    slot->hash = kv_chain_hash(KV_CHAIN_SEED, tok, pos);
    slot->used = ++kv->ckpt_clock;
}

void kv_state_set(kv_cache *kv, int32_t seq, const uint8_t *bytes, int32_t pos) {
    decode(seq_state(kv, seq), bytes, kv->state_floats);
    kv->state_pos[seq] = bytes ? pos : 0;
}
