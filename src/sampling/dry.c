/* DRY, "Don't Repeat Yourself" (p-e-w, text-generation-webui #5677; llama.cpp's semantics).
 *
 * For every token t the model could emit, let n be the length of the longest suffix of the
 * window that also occurs earlier in the window immediately followed by t: emitting t would
 * extend a repeat of length n. If n >= allowed_length, logit(t) -= multiplier *
 * base^(n - allowed_length). A repeat may not reach back across a sequence breaker (a token
 * whose text contains one of the breaker strings): n is capped by the distance from the end of
 * the window to the most recent breaker.
 *
 * Suffix matches come from the Z-function of the reversed window r (r[0] is the last token):
 * z[i] is the length of the longest common prefix of r and r[i..], i.e. the longest suffix of
 * the window that also ends i tokens earlier, and the token that followed that earlier
 * occurrence is r[i - 1]. Linear time (Gusfield, "Algorithms on Strings, Trees and Sequences",
 * 1997, section 1.4). */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "sampling/sampler.h"

static void z_function(const int32_t *s, int32_t n, int32_t *z) {
    z[0] = n;
    int32_t l = 0, r = 0; /* [l, r) is the rightmost match window found so far */
    for (int32_t i = 1; i < n; i++) {
        int32_t zi = 0;
        if (i < r) zi = r - i < z[i - l] ? r - i : z[i - l];
        while (i + zi < n && s[zi] == s[i + zi]) zi++;
        if (i + zi > r) {
            l = i;
            r = i + zi;
        }
        z[i] = zi;
    }
}

typedef struct repeat {
    int32_t token, length;
} repeat;

static int by_token_then_longest(const void *pa, const void *pb) {
    const repeat *a = pa, *b = pb;
    if (a->token != b->token) return (a->token > b->token) - (a->token < b->token);
    return (a->length < b->length) - (a->length > b->length);
}

/* Tokens since the most recent breaker at the end of the window. */
static int32_t distance_to_breaker(const int32_t *w, int32_t n, const uint8_t *breaker) {
    int32_t d = 0;
    while (d < n && !(breaker && breaker[w[n - 1 - d]])) d++;
    return d;
}

static float dry_penalty(dry_params p, int32_t length) {
    double pen = (double)p.multiplier * pow((double)p.base, (double)(length - p.allowed_length));
    return pen > FLT_MAX ? FLT_MAX : (float)pen;
}

int32_t smp_dry(cand_list *c, const int32_t *window, int32_t n_window, const uint8_t *breaker, dry_params p,
                int32_t *scratch, int32_t *longest) {
    *longest = 0;
    if (n_window < 2) return 0;
    int32_t limit = distance_to_breaker(window, n_window, breaker);
    if (limit < p.allowed_length) return 0;
    int32_t *r = scratch, *z = scratch + n_window;
    repeat *reps = (repeat *)(scratch + 2 * n_window);
    for (int32_t k = 0; k < n_window; k++) r[k] = window[n_window - 1 - k];
    z_function(r, n_window, z);
    int32_t n_reps = 0;
    for (int32_t i = 1; i < n_window; i++) {
        int32_t len = z[i] < limit ? z[i] : limit;
        if (len >= p.allowed_length) reps[n_reps++] = (repeat){r[i - 1], len};
    }
    qsort(reps, (size_t)n_reps, sizeof *reps, by_token_then_longest);
    int32_t changed = 0;
    for (int32_t i = 0; i < n_reps; i++) {
        if (i > 0 && reps[i].token == reps[i - 1].token) continue; /* the longest comes first */
        if (reps[i].length > *longest) *longest = reps[i].length;
        int32_t at = cands_find(c, reps[i].token);
        if (at < 0) continue;
        c->data[at].logit -= dry_penalty(p, reps[i].length);
        changed++;
    }
    if (changed) c->probs = false;
    return changed;
}
