/* The candidate list: sorting in the one deterministic order, softmax, lookup, the draw. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* A key whose ascending unsigned order is the logit's descending order (-0 and +0 equal). */
static uint32_t desc_key(float f) {
    uint32_t u;
    if (f == 0) f = 0; /* folds -0 into +0 */
    memcpy(&u, &f, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~u;
}

/* LSD radix sort, 4 passes of 8 bits. It is stable, so a list still in id order comes out in
 * the comparator's order (ties by lower id) — and in O(n): the full vocabulary is sorted on
 * every step when no top-k cuts it first, where qsort cost ~10 ms for 49k candidates. */
static bool radix_sort_by_id_order(cand_list *c) {
    size_t n = (size_t)c->n;
    cand *tmp = malloc(n * sizeof *tmp);
    uint32_t *keys = malloc(2 * n * sizeof *keys);
    if (!tmp || !keys) {
        free(tmp);
        free(keys);
        return false;
    }
    uint32_t *k_src = keys, *k_dst = keys + n;
    cand *src = c->data, *dst = tmp;
    for (size_t i = 0; i < n; i++) k_src[i] = desc_key(src[i].logit);
    for (int shift = 0; shift < 32; shift += 8) {
        size_t count[257] = {0};
        for (size_t i = 0; i < n; i++) count[((k_src[i] >> shift) & 0xFF) + 1]++;
        for (int b = 0; b < 256; b++) count[b + 1] += count[b];
        for (size_t i = 0; i < n; i++) {
            size_t at = count[(k_src[i] >> shift) & 0xFF]++;
            dst[at] = src[i];
            k_dst[at] = k_src[i];
        }
        cand *t = src; src = dst; dst = t;
        uint32_t *kt = k_src; k_src = k_dst; k_dst = kt;
    }
    /* four passes: the sorted data is back in c->data */
    free(tmp);
    free(keys);
    return true;
}

void cands_sort(cand_list *c) {
    if (c->sorted) return;
    if (!(c->by_id && c->n > 64 && radix_sort_by_id_order(c)))
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
