/* The infill stage (llama.cpp's "infill" sampler, which llama.vim and llama.vscode ask for when
 * filling in the middle of code): end the fill when ending is likely enough, add the probability
 * of tokens that spell the same start into one of them, and keep only the likely ones.
 *
 * Facts from llama.cpp's description of its sampler: ending wins when 3 x p(end) x n exceeds
 * p(text) over the n candidates; a token whose text is a prefix of another's is merged with it
 * into the more probable of the two; text tokens under 0.2 are dropped (none left: the end of
 * text alone), then, renormalised, those under 1 / (texts kept + 1). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampling/sampler.h"

/* The pairwise merge is quadratic: beyond these candidates (after a top-k, there are far fewer)
 * the least probable are dropped first. */
#define INFILL_MAX 1024
#define PIECE_MAX 64

static void normalise(cand_list *c) {
    double sum = 0;
    for (int32_t i = 0; i < c->n; i++) sum += c->data[i].p;
    for (int32_t i = 0; i < c->n; i++) c->data[i].p = sum > 0 ? (float)(c->data[i].p / sum) : 1.0f / (float)c->n;
}

/* Keep the candidates keep() says, in order. */
static void keep_where(cand_list *c, const uint8_t *is_eog, float threshold) {
    int32_t n = 0;
    for (int32_t i = 0; i < c->n; i++)
        if (is_eog[c->data[i].id] || c->data[i].p >= threshold) c->data[n++] = c->data[i];
    c->n = n;
}

static int32_t text_tokens(const cand_list *c, const uint8_t *is_eog) {
    int32_t n = 0;
    for (int32_t i = 0; i < c->n; i++) n += !is_eog[c->data[i].id];
    return n;
}

/* The list's logits made the logs of its probabilities, so that the draw's softmax gives them. */
static void settle(cand_list *c) {
    for (int32_t i = 0; i < c->n; i++) c->data[i].logit = c->data[i].p > 0 ? logf(c->data[i].p) : -INFINITY;
    c->sorted = false;
    c->by_id = false;
    cands_sort(c);
    c->probs = true;
}

int smp_infill(cand_list *c, const nc_model *m, const uint8_t *is_eog, int32_t end_token) {
    cands_softmax(c);
    if (c->n > INFILL_MAX) {
        cands_truncate(c, INFILL_MAX);
        normalise(c);
    }
    double p_text = 0, p_end = 0;
    for (int32_t i = 0; i < c->n; i++) {
        if (is_eog[c->data[i].id]) p_end += c->data[i].p;
        else p_text += c->data[i].p;
    }
    if (3 * p_end * c->n > p_text) { /* ending is likely enough: only the end tokens */
        keep_where(c, is_eog, INFINITY);
        normalise(c);
        settle(c);
        return 0;
    }
    /* the candidates' texts, once */
    char (*piece)[PIECE_MAX] = malloc((size_t)c->n * sizeof *piece);
    int *len = malloc((size_t)c->n * sizeof *len);
    if (!piece || !len) {
        free(piece);
        free(len);
        return -1;
    }
    for (int32_t i = 0; i < c->n; i++) {
        len[i] = is_eog[c->data[i].id] ? 0 : nc_token_piece(m, c->data[i].id, piece[i], PIECE_MAX);
        if (len[i] > PIECE_MAX) len[i] = 0; /* a text this long starts no other */
    }
    for (int32_t a = 0; a < c->n; a++)
        for (int32_t b = 0; b < c->n && c->data[a].p > 0; b++) {
            if (a == b || c->data[b].p <= 0 || len[a] <= 0 || len[a] > len[b] || memcmp(piece[a], piece[b], (size_t)len[a]))
                continue;
            int32_t into = c->data[b].p > c->data[a].p ? b : a, from = into == a ? b : a;
            c->data[into].p += c->data[from].p;
            c->data[from].p = 0;
        }
    free(piece);
    free(len);
    keep_where(c, is_eog, 0.2f);
    int32_t texts = text_tokens(c, is_eog);
    if (texts == 0) { /* nothing likely enough to write: the end of text */
        c->n = 1;
        c->data[0] = (cand){.id = end_token, .logit = 0, .p = 1};
        settle(c);
        return 0;
    }
    normalise(c);
    keep_where(c, is_eog, 1.0f / (float)(texts + 1));
    normalise(c);
    settle(c);
    return 0;
}
