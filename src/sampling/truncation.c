/* Stages that reshape or truncate the distribution: temperature (fixed or dynamic), top-k, top-p,
 * min-p, typical-p, top-n-sigma, epsilon, eta, XTC. Every boundary is decided in the list's sorted order (descending logit,
 * lower id first), so a tie at a boundary always keeps the lower token id. */
#include <math.h>
#include <stdlib.h>

#include "sampling/sampler.h"

static int32_t at_least(int32_t min_keep, int32_t n) {
    int32_t k = min_keep > 1 ? min_keep : 1;
    return k < n ? k : n;
}

static bool better(const cand *a, const cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/* Temperature (Ackley et al., 1985): softmax(l / T). T = 0 is its limit: all mass on the most
 * likely token, which is greedy decoding. */
void smp_temperature(cand_list *c, float t) {
    if (c->n == 0) return;
    if (t <= 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < c->n; i++)
            if (better(&c->data[i], &c->data[best])) best = i;
        cand keep = c->data[best];
        c->data[0] = keep;
        c->n = 1;
        c->sorted = true;
        c->by_id = false;
        c->probs = false;
        return;
    }
    for (int32_t i = 0; i < c->n; i++) c->data[i].logit /= t;
    c->probs = false;
}

/* Shannon entropy (nats) of a softmaxed list. */
static double entropy(const cand_list *c) {
    double h = 0;
    for (int32_t i = 0; i < c->n; i++)
        if (c->data[i].p > 0) h -= c->data[i].p * log(c->data[i].p);
    return h;
}

/* Dynamic temperature (llama.cpp's temp_ext): T = t_min + (t_max - t_min) * (H / ln n)^exponent
 * over [max(0, t - range), t + range], H the entropy of this list's softmax and ln n its largest
 * possible value: a confident step is cooled, a flat one heated. Returns the T applied (a T of
 * 0, where t - range <= 0 meets a certain step, is greedy). */
double smp_dynatemp(cand_list *c, float t, float range, float exponent) {
    if (c->n <= 1) return t;
    double lo = t - range > 0 ? (double)t - range : 0, hi = (double)t + range;
    cands_softmax(c);
    double norm = entropy(c) / log((double)c->n);
    double dyn = lo + (hi - lo) * pow(norm, exponent);
    smp_temperature(c, (float)dyn);
    return dyn;
}

static void swap(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Restore the heap below i: data[0..k) is a heap whose root is the worst of the kept. */
static void sift_down(cand *h, int32_t k, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, worst = i;
        if (l < k && better(&h[worst], &h[l])) worst = l;
        if (r < k && better(&h[worst], &h[r])) worst = r;
        if (worst == i) return;
        swap(&h[i], &h[worst]);
        i = worst;
    }
}

/* Move the k best candidates to the front in O(n log k) with a heap of the best seen so far,
 * rooted at the worst of them, then sort just those k. */
static void select_best(cand_list *c, int32_t k) {
    cand *h = c->data;
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(h, k, i);
    for (int32_t i = k; i < c->n; i++) {
        if (better(&h[i], &h[0])) {
            swap(&h[0], &h[i]);
            sift_down(h, k, 0);
        }
    }
    cand_list head = {.data = h, .n = k};
    cands_sort(&head);
    c->n = k;
    c->sorted = true;
    c->by_id = false;
    c->probs = false;
}

/* Top-k (Fan et al., 2018): the k most likely tokens. */
void smp_top_k(cand_list *c, int32_t k, int32_t min_keep) {
    if (k <= 0) return;
    if (k < min_keep) k = min_keep;
    if (k >= c->n) return;
    if (c->sorted) cands_truncate(c, k);
    else select_best(c, k);
}

/* Top-p, nucleus sampling (Holtzman et al., 2020): the smallest prefix of the sorted list whose
 * probability reaches p. */
void smp_top_p(cand_list *c, float p, int32_t min_keep) {
    if (p >= 1.0f || c->n == 0) return;
    cands_softmax(c);
    double cum = 0;
    int32_t keep = c->n;
    for (int32_t i = 0; i < c->n; i++) {
        cum += c->data[i].p;
        if (cum >= p && i + 1 >= min_keep) {
            keep = i + 1;
            break;
        }
    }
    cands_truncate(c, keep);
}

/* Min-p (Nguyen et al., 2024): p_i >= min_p * p_max, i.e. l_i >= l_max + ln(min_p). */
void smp_min_p(cand_list *c, float p, int32_t min_keep) {
    if (p <= 0 || c->n == 0) return;
    cands_sort(c);
    double floor_logit = (double)c->data[0].logit + log((double)p);
    int32_t keep = 1;
    while (keep < c->n && (double)c->data[keep].logit >= floor_logit) keep++;
    int32_t lo = at_least(min_keep, c->n);
    cands_truncate(c, keep > lo ? keep : lo);
}

typedef struct typical_entry {
    double score;
    int32_t index;
} typical_entry;

static int by_score(const void *pa, const void *pb) {
    const typical_entry *a = pa, *b = pb;
    if (a->score != b->score) return a->score < b->score ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

/* Locally typical sampling (Meister et al., 2023): order tokens by how far their information
 * content -ln p is from the entropy H, keep the smallest such prefix whose probability reaches
 * p. The kept tokens stay in the list's sorted order. */
void smp_typical(cand_list *c, float p, int32_t min_keep) {
    if (p >= 1.0f || c->n == 0) return;
    cands_softmax(c);
    typical_entry *e = malloc((size_t)c->n * sizeof *e);
    if (!e) return; /* out of memory: leave the distribution as it is */
    double h = entropy(c);
    for (int32_t i = 0; i < c->n; i++) {
        double info = c->data[i].p > 0 ? -log(c->data[i].p) : INFINITY;
        e[i] = (typical_entry){fabs(info - h), i};
    }
    qsort(e, (size_t)c->n, sizeof *e, by_score);
    double cum = 0;
    int32_t keep = c->n;
    for (int32_t i = 0; i < c->n; i++) {
        cum += c->data[e[i].index].p;
        if (cum >= p && i + 1 >= min_keep) {
            keep = i + 1;
            break;
        }
    }
    /* mark the kept (p < 0 as a flag), then compact in sorted order */
    for (int32_t i = 0; i < keep; i++) c->data[e[i].index].p = -c->data[e[i].index].p - 1;
    free(e);
    int32_t n = 0;
    for (int32_t i = 0; i < c->n; i++) {
        if (c->data[i].p < 0) {
            c->data[n] = c->data[i];
            c->data[n].p = -c->data[n].p - 1;
            n++;
        }
    }
    cands_truncate(c, n);
}

/* Top-n-sigma (Tang et al., 2024): keep logits within n standard deviations of the maximum; the
 * mean and (population) deviation are over the finite logits of the list. */
void smp_top_n_sigma(cand_list *c, float n) {
    if (n <= 0 || c->n <= 1) return;
    double mx = -INFINITY, sum = 0;
    int32_t count = 0;
    for (int32_t i = 0; i < c->n; i++) {
        double l = c->data[i].logit;
        if (l == -INFINITY) continue;
        mx = l > mx ? l : mx;
        sum += l;
        count++;
    }
    if (count == 0) return;
    double mean = sum / count, var = 0;
    for (int32_t i = 0; i < c->n; i++)
        if (c->data[i].logit != -INFINITY) var += ((double)c->data[i].logit - mean) * ((double)c->data[i].logit - mean);
    double floor_logit = mx - n * sqrt(var / count);
    int32_t kept = 0;
    for (int32_t i = 0; i < c->n; i++)
        if ((double)c->data[i].logit >= floor_logit) c->data[kept++] = c->data[i];
    cands_truncate(c, kept);
}

/* Keep the tokens of probability >= floor (at least max(min_keep, 1)) of a softmaxed list. */
static void keep_above(cand_list *c, double floor_p, int32_t min_keep) {
    int32_t keep = 0;
    while (keep < c->n && (double)c->data[keep].p >= floor_p) keep++;
    int32_t lo = at_least(min_keep, c->n);
    cands_truncate(c, keep > lo ? keep : lo);
}

/* Epsilon sampling (Hewitt et al., 2022; Hugging Face's EpsilonLogitsWarper): p_i >= epsilon. */
void smp_epsilon(cand_list *c, float epsilon, int32_t min_keep) {
    if (epsilon <= 0 || c->n == 0) return;
    cands_softmax(c);
    keep_above(c, epsilon, min_keep);
}

/* Eta sampling (Hewitt et al., 2022; Hugging Face's EtaLogitsWarper): p_i >= eta with
 * eta = min(epsilon, sqrt(epsilon) * exp(-H)), H the entropy of the list's softmax. Returns eta. */
double smp_eta(cand_list *c, float epsilon, int32_t min_keep) {
    if (epsilon <= 0 || c->n == 0) return 0;
    cands_softmax(c);
    double adaptive = sqrt((double)epsilon) * exp(-entropy(c));
    double eta = adaptive < epsilon ? adaptive : (double)epsilon;
    keep_above(c, eta, min_keep);
    return eta;
}

/* XTC, exclude top choices (p-e-w; llama.cpp's definition): with the given probability, when
 * two or more tokens reach the threshold, remove all of them but the least likely one. */
bool smp_xtc(cand_list *c, float probability, float threshold, int32_t min_keep, nc_rng *rng) {
    if (probability <= 0 || threshold > 0.5f || c->n < 2) return false;
    if (nc_rng_uniform(rng) > probability) return false;
    cands_softmax(c);
    int32_t last = 0; /* the least likely token at or above the threshold */
    while (last + 1 < c->n && c->data[last + 1].p >= threshold) last++;
    if (last > 0 && c->n - last >= min_keep) cands_remove_first(c, last);
    return true;
}
