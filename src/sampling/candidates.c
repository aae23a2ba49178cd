/* The candidate list: sorting in the one deterministic order, softmax, lookup, the draw. */
#include <math.h>
#include <stdlib.h>

#include "sampling/sampler.h"

void cands_init(cand_list *c, cand *buf, const float *logits, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        float l = logits[i];
        buf[i] = (cand){i, isnan(l) ? -INFINITY : l, 0};
    }
    *c = (cand_list){.data = buf, .n = n, .sorted = false, .by_id = true, .probs = false};
}

/* Descending logit, lower id first on ties: a total order, so qsort's instability is harmless. */
static int by_logit_desc(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

void cands_sort(cand_list *c) {
    if (c->sorted) return;
    qsort(c->data, (size_t)c->n, sizeof *c->data, by_logit_desc);
    c->sorted = true;
    c->by_id = false;
}

void cands_softmax(cand_list *c) {
    if (c->probs) return;
    cands_sort(c);
    if (c->n == 0) return;
    double mx = c->data[0].logit, z = 0;
    if (mx == -INFINITY) { /* everything banned: no token is preferred */
        for (int32_t i = 0; i < c->n; i++) c->data[i].p = 1.0f / (float)c->n;
        c->probs = true;
        return;
    }
    for (int32_t i = 0; i < c->n; i++) z += exp((double)c->data[i].logit - mx);
    for (int32_t i = 0; i < c->n; i++) c->data[i].p = (float)(exp((double)c->data[i].logit - mx) / z);
    c->probs = true;
}

int32_t cands_find(const cand_list *c, int32_t id) {
    if (c->by_id) return id >= 0 && id < c->n ? id : -1;
    for (int32_t i = 0; i < c->n; i++)
        if (c->data[i].id == id) return i;
    return -1;
}

void cands_truncate(cand_list *c, int32_t n) {
    if (n < c->n) {
        c->n = n;
        c->probs = false;
        c->by_id = false;
    }
}

void cands_remove_first(cand_list *c, int32_t n) {
    if (n <= 0) return;
    c->data += n;
    c->n -= n;
    c->probs = false;
    c->by_id = false;
}

double cands_mass(const cand_list *c) {
    double s = 0;
    for (int32_t i = 0; i < c->n; i++) s += c->data[i].p;
    return s;
}

/* Inverse transform sampling over the sorted list: the first candidate whose cumulative
 * probability passes u * total. Tokens with p = 0 can never be chosen. */
int32_t cands_draw(const cand_list *c, nc_rng *rng) {
    double total = cands_mass(c), u = nc_rng_uniform(rng) * total, acc = 0;
    int32_t last = 0;
    for (int32_t i = 0; i < c->n; i++) {
        if (c->data[i].p <= 0) continue;
        acc += c->data[i].p;
        last = i;
        if (u < acc) return i;
    }
    return last; /* u landed on rounding slack at the very end */
}

int32_t top_indices(const float *v, int32_t n_v, int32_t n, int32_t *best) {
    int32_t nb = 0;
    if (n <= 0) return 0;
    for (int32_t i = 0; i < n_v; i++) {
        if (v[i] == -INFINITY || (nb == n && !(v[i] > v[best[n - 1]]))) continue;
        int32_t j = nb < n ? nb++ : n - 1; /* insertion into the short sorted list */
        while (j > 0 && v[best[j - 1]] < v[i]) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = i;
    }
    return nb;
}
