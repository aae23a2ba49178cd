/* The vocabulary as a byte trie in depth-first order, built once per model (api.c caches it):
 * the mask walks it from the grammar's state and skips a whole subtree, all the tokens sharing a
 * prefix, as soon as the prefix cannot continue the grammar. Control tokens (no text) and
 * end-of-generation tokens are left out of the trie; the mask decides those apart. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/trie.h"

#define MAX_PIECE 65535  /* depth is a uint16_t; no vocabulary has such tokens */

static int cmp_piece(const void *a, const void *b, void *ctx) {
    const gr_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->piece_off[x + 1] - v->piece_off[x], ly = v->piece_off[y + 1] - v->piece_off[y];
    int c = memcmp(v->text + v->piece_off[x], v->text + v->piece_off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

/* Every token's bytes into v->text, and which end generation. */
static int collect_pieces(gr_vocab *v, gr_piece_fn piece, gr_eog_fn eog, void *user, nc_err *err) {
    size_t cap = 1 << 20, used = 0;
    int bcap = 256;
    char *buf = malloc((size_t)bcap);
    v->text = malloc(cap);
    if (!buf || !v->text) { free(buf); return nc_fail(err, "out of memory"); }
    for (int32_t id = 0; id < v->n_tokens; id++) {
        v->piece_off[id] = (uint32_t)used;
        v->eog[id] = eog(user, id);
        int n = v->eog[id] ? 0 : piece(user, id, buf, bcap);
        if (n > bcap) {
            char *g = realloc(buf, (size_t)n);
            if (!g) { free(buf); return nc_fail(err, "out of memory"); }
            buf = g;
            bcap = n;
            n = piece(user, id, buf, bcap);
        }
        if (n < 0 || n > MAX_PIECE) n = 0;
        if (used + (size_t)n > cap || used + (size_t)n > UINT32_MAX) {
            while (used + (size_t)n > cap) cap *= 2;
            uint8_t *t = cap <= UINT32_MAX ? realloc(v->text, cap) : NULL;
            if (!t) { free(buf); return nc_fail(err, "out of memory"); }
            v->text = t;
        }
        memcpy(v->text + used, buf, (size_t)n);
        used += (size_t)n;
    }
    v->piece_off[v->n_tokens] = (uint32_t)used;
    free(buf);
    return 0;
}

/* Nodes from the sorted pieces: each piece adds the nodes past its common prefix with the one
 * before; a node's subtree ends where a later piece leaves its prefix. */
static int build_nodes(gr_vocab *v, const int32_t *order, int32_t n, nc_err *err) {
    size_t cap = (size_t)n * 2 + 16;
    v->byte = malloc(cap);
    v->depth = malloc(cap * sizeof *v->depth);
    v->skip = malloc(cap * sizeof *v->skip);
    v->tok_first = malloc((cap + 1) * sizeof *v->tok_first);
    v->ids = malloc(((size_t)n + 1) * sizeof *v->ids);
    int32_t *open = malloc((MAX_PIECE + 2) * sizeof *open);
    if (!v->byte || !v->depth || !v->skip || !v->tok_first || !v->ids || !open) { free(open); return nc_fail(err, "out of memory"); }
    int32_t n_open = 0, n_ids = 0;
    const uint8_t *prev = NULL;
    uint32_t prev_len = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t id = order[k];
        const uint8_t *s = v->text + v->piece_off[id];
        uint32_t len = v->piece_off[id + 1] - v->piece_off[id], common = 0;
        while (prev && common < len && common < prev_len && s[common] == prev[common]) common++;
        while (n_open > (int32_t)common) v->skip[open[--n_open]] = v->n_nodes; /* leaving their subtrees */
        for (uint32_t d = common; d < len; d++) {
            if ((size_t)v->n_nodes + 1 >= cap) {
                cap *= 2;
                uint8_t *b = realloc(v->byte, cap);
                if (b) v->byte = b;
                uint16_t *dp = realloc(v->depth, cap * sizeof *dp);
                if (dp) v->depth = dp;
                int32_t *sk = realloc(v->skip, cap * sizeof *sk);
                if (sk) v->skip = sk;
                int32_t *tf = realloc(v->tok_first, (cap + 1) * sizeof *tf);
                if (tf) v->tok_first = tf;
                if (!b || !dp || !sk || !tf) { free(open); return nc_fail(err, "out of memory"); }
            }
            int32_t i = v->n_nodes++;
            v->byte[i] = s[d];
            v->depth[i] = (uint16_t)(d + 1);
            v->tok_first[i] = n_ids;
            open[n_open++] = i;
        }
        v->ids[n_ids++] = id; /* ends at the deepest open node: the last one made */
        if ((int32_t)len > v->max_depth) v->max_depth = (int32_t)len;
        prev = s;
        prev_len = len;
    }
    while (n_open > 0) v->skip[open[--n_open]] = v->n_nodes;
    v->tok_first[v->n_nodes] = n_ids;
    free(open);
    return 0;
}

int gr_vocab_build(gr_vocab **out, int32_t n_tokens, gr_piece_fn piece, gr_eog_fn eog, void *user, nc_err *err) {
    *out = NULL;
    gr_vocab *v = calloc(1, sizeof *v);
    if (!v) return nc_fail(err, "out of memory");
    v->n_tokens = n_tokens;
    v->piece_off = malloc(((size_t)n_tokens + 1) * sizeof *v->piece_off);
    v->eog = malloc((size_t)n_tokens + 1);
    int32_t *order = malloc(((size_t)n_tokens + 1) * sizeof *order), n = 0;
    int rc = !v->piece_off || !v->eog || !order ? nc_fail(err, "out of memory") : collect_pieces(v, piece, eog, user, err);
    if (rc == 0) {
        for (int32_t id = 0; id < n_tokens; id++)
            if (v->piece_off[id + 1] > v->piece_off[id]) order[n++] = id;
        qsort_r(order, (size_t)n, sizeof *order, cmp_piece, v);
        rc = build_nodes(v, order, n, err);
    }
    free(order);
    if (rc) {
        gr_vocab_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

void gr_vocab_free(gr_vocab *v) {
    if (!v) return;
    free(v->byte), free(v->depth), free(v->skip), free(v->tok_first), free(v->ids);
    free(v->eog), free(v->piece_off), free(v->text);
    free(v);
}

int32_t gr_vocab_n_tokens(const gr_vocab *v) { return v->n_tokens; }

const uint8_t *gr_vocab_piece(const gr_vocab *v, int32_t id, uint32_t *len) {
    *len = v->piece_off[id + 1] - v->piece_off[id];
    return v->text + v->piece_off[id];
}

bool gr_vocab_is_eog(const gr_vocab *v, int32_t id) { return v->eog[id] != 0; }
