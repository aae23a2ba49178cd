/* Mirostat (Basu et al., "Mirostat: a neural text decoding algorithm that directly controls
 * perplexity", ICLR 2021): a feedback loop that keeps the surprise -log2 p of the drawn tokens
 * near a target tau. mu, the current truncation level, starts at 2 * tau and moves by
 * -eta * (observed surprise - tau) after every draw; the surprise is measured in the truncated,
 * renormalised distribution the token was drawn from (as llama.cpp does). */
#include <math.h>

#include "sampling/sampler.h"

/* Tokens used to estimate the Zipf exponent (the paper's m). */
#define MIROSTAT_M 100

/* Least-squares estimate of the Zipf exponent s from the most probable tokens (Algorithm 1):
 * s = sum(t_i b_i) / sum(t_i^2), t_i = ln((i + 2) / (i + 1)), b_i = ln(p_i / p_{i+1}).
 * Returns 0 when fewer than two probable tokens are left. */
static double zipf_exponent(const cand_list *c) {
    double num = 0, den = 0;
    for (int32_t i = 0; i + 1 < c->n && i < MIROSTAT_M - 1; i++) {
        if (c->data[i + 1].p <= 0) break;
        double t = log((i + 2.0) / (i + 1.0)), b = log((double)c->data[i].p / c->data[i + 1].p);
        num += t * b;
        den += t * t;
    }
    return den > 0 ? num / den : 0;
}

/* Mirostat 1: top-k with k = ((eps * 2^mu) / (1 - N^-eps))^(1/s), eps = s - 1, N the vocabulary
 * size — the k whose expected surprise under a Zipf law of exponent s is mu. */
int32_t smp_mirostat_v1_truncate(cand_list *c, int32_t n_vocab, double mu) {
    cands_softmax(c);
    int32_t k = c->n;
    double s = zipf_exponent(c);
    if (s > 0) {
        double eps = s - 1;
        double kk = pow(eps * pow(2.0, mu) / (1 - pow((double)n_vocab, -eps)), 1 / s);
        if (isfinite(kk)) k = kk < 1 ? 1 : kk >= c->n ? c->n : (int32_t)kk;
    }
    cands_truncate(c, k);
    return k;
}

/* Mirostat 2.0: keep the tokens whose surprise -log2 p is at most mu (at least one). */
void smp_mirostat_v2_truncate(cand_list *c, double mu) {
    cands_softmax(c);
    int32_t keep = 0;
    while (keep < c->n && -log2((double)c->data[keep].p) <= mu) keep++;
    cands_truncate(c, keep > 0 ? keep : 1);
}

void smp_mirostat_update(float p, float tau, float eta, double *mu) {
    double surprise = -log2((double)p);
    *mu -= eta * (surprise - tau);
}
