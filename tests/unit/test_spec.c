/* Speculative decoding's draw (sampler_draw against a proposal) is lossless: whatever the draft
 * proposes, the token drawn is distributed as the sampler chain's distribution. Checked by a
 * chi-square test over 20,000 draws against the chain's distribution computed here from the
 * logits (softmax of logits / T over the top k), against the acceptance rate sum min(p, q) the
 * rule predicts, and at a fixed context of a real model with its Q8_0 file as the draft. Also:
 * greedy keeps exactly the argmax, prompt lookup's proposals, and the vocabulary check. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "sampling/sampler.h"
#include "sampling/seq.h"
#include "sampling/spec.h"
#include "test.h"
#include "test_files.h"

enum { V = 8, DRAWS = 20000 };

/* The chi-square quantile at 1 - 1e-4 for df degrees of freedom (Wilson-Hilferty: within 1% for
 * df >= 3): a correct sampler fails one run in 10,000. */
static double chi2_critical(int df) {
    double z = 3.719, h = 2.0 / (9.0 * df), t = 1 - h + z * sqrt(h);
    return df * t * t * t;
}

/* Pearson's statistic of counts against probabilities; bins expecting fewer than 5 draws are
 * pooled into one. *df receives the degrees of freedom. */
static double chi2(const long *count, const double *p, int n, long total, int *df) {
    double stat = 0, pool_e = 0;
    long pool_o = 0;
    int bins = 0;
    for (int i = 0; i < n; i++) {
        double e = p[i] * (double)total;
        if (e < 5) {
            pool_e += e;
            pool_o += count[i];
            continue;
        }
        stat += (count[i] - e) * (count[i] - e) / e;
        bins++;
    }
    if (pool_e > 0) {
        stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        bins++;
    }
    *df = bins - 1;
    return stat;
}

/* softmax(logits / t) over the k largest, zero elsewhere (distinct logits). */
static void chain_reference(const float *logits, int n, double t, int k, double *p) {
    double z = 0;
    for (int i = 0; i < n; i++) {
        int above = 0;
        for (int j = 0; j < n; j++) above += logits[j] > logits[i];
        p[i] = above < k ? exp(logits[i] / t) : 0;
        z += p[i];
    }
    for (int i = 0; i < n; i++) p[i] /= z;
}

static int32_t draw_from(const double *q, int n, nc_rng *rng) {
    double u = nc_rng_uniform(rng), acc = 0;
    for (int i = 0; i < n; i++)
        if (u < (acc += q[i])) return i;
    return n - 1;
}

static nc_sampler *chain(float temp, int32_t top_k, uint64_t seed) {
    nc_sampler_params sp;
    nc_sampler_params_default(&sp);
    sp.temp = temp;
    sp.top_k = top_k;
    sp.top_p = 1;
    sp.min_p = 0;
    sp.seed = seed;
    nc_sampler *s = NULL;
    nc_err err;
    CHECK_MSG(!nc_sampler_new(&s, NULL, V, &sp, &err), "%s", err.msg);
    return s;
}

static const float LOGITS[V] = {2.0f, 1.2f, 0.7f, 0.1f, -0.3f, -1.0f, 1.6f, -2.5f};

/* A draft distribution q over V (dense), its proposal drawn from q: the draws follow p, and the
 * share accepted is sum min(p, q). */
static void test_dense_draft(void) {
    nc_sampler *s = chain(0.9f, 5, 11);
    if (!s) return;
    double p[V], q[V] = {0.05, 0.30, 0.05, 0.20, 0.10, 0.10, 0.15, 0.05};
    float qf[V];
    for (int i = 0; i < V; i++) qf[i] = (float)q[i];
    chain_reference(LOGITS, V, 0.9, 5, p);
    nc_rng rng;
    nc_rng_seed(&rng, 99);
    long count[V] = {0}, accepted = 0;
    for (int i = 0; i < DRAWS; i++) {
        sampler_proposal prop = {draw_from(q, V, &rng), qf};
        bool ok;
        count[sampler_draw(s, LOGITS, NULL, 0, 0, &prop, &ok, NULL)]++;
        accepted += ok;
    }
    int df;
    double stat = chi2(count, p, V, DRAWS, &df);
    CHECK_MSG(stat < chi2_critical(df), "chi-square %.2f over %d dof (critical %.2f)", stat, df, chi2_critical(df));
    CHECK(count[4] == 0 && count[5] == 0 && count[7] == 0); /* outside the top 5: never drawn */
    double expect = 0;
    for (int i = 0; i < V; i++) expect += p[i] < q[i] ? p[i] : q[i];
    double sd = sqrt(expect * (1 - expect) / DRAWS);
    CHECK_MSG(fabs((double)accepted / DRAWS - expect) < 4 * sd, "accepted %.4f, rule predicts %.4f",
              (double)accepted / DRAWS, expect);
    nc_sampler_free(s);
}

/* A certain proposal (prompt lookup): kept with probability p(x), tokens the chain removed
 * included; the draws still follow p. */
static void test_certain_draft(void) {
    nc_sampler *s = chain(1.3f, 6, 5);
    if (!s) return;
    double p[V], guess[V] = {0.1, 0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.2}; /* how the proposals are picked */
    chain_reference(LOGITS, V, 1.3, 6, p);
    nc_rng rng;
    nc_rng_seed(&rng, 7);
    long count[V] = {0}, kept_of[V] = {0}, proposed[V] = {0};
    for (int i = 0; i < DRAWS; i++) {
        sampler_proposal prop = {draw_from(guess, V, &rng), NULL};
        bool ok;
        count[sampler_draw(s, LOGITS, NULL, 0, 0, &prop, &ok, NULL)]++;
        proposed[prop.token]++;
        kept_of[prop.token] += ok;
    }
    int df;
    double stat = chi2(count, p, V, DRAWS, &df);
    CHECK_MSG(stat < chi2_critical(df), "chi-square %.2f over %d dof (critical %.2f)", stat, df, chi2_critical(df));
    CHECK(kept_of[7] == 0); /* removed by top-k: never kept */
    double sd = sqrt(p[0] * (1 - p[0]) / proposed[0]);
    CHECK_MSG(fabs((double)kept_of[0] / proposed[0] - p[0]) < 4 * sd, "token 0 kept %.4f, p %.4f",
              (double)kept_of[0] / proposed[0], p[0]);
    nc_sampler_free(s);
}

/* Greedy: the argmax whatever is proposed, and a proposal of the argmax is kept. */
static void test_greedy(void) {
    nc_sampler *s = chain(0, 0, 1);
    if (!s) return;
    float q[V] = {0.01f, 0.9f, 0.01f, 0.01f, 0.01f, 0.01f, 0.04f, 0.01f};
    bool all = true, ok;
    for (int32_t t = 0; t < V; t++) {
        sampler_proposal dense = {t, q}, certain = {t, NULL};
        all &= sampler_draw(s, LOGITS, NULL, 0, 0, &dense, &ok, NULL) == 0 && ok == (t == 0);
        all &= sampler_draw(s, LOGITS, NULL, 0, 0, &certain, &ok, NULL) == 0 && ok == (t == 0);
    }
    CHECK(all);
    nc_sampler_free(s);
}

/* ---- a real model and its Q8_0 draft at a fixed context ---- */

static const float *logits_after(nc_context *c, const int32_t *ids, int n) {
    nc_batch_entry b[16];
    nc_err err;
    for (int i = 0; i < n; i++) b[i] = (nc_batch_entry){ids[i], i, 0, i == n - 1};
    nc_kv_seq_clear(c, 0);
    if (nc_forward(c, b, n, &err)) {
        CHECK_MSG(0, "forward: %s", err.msg);
        return NULL;
    }
    return nc_logits(c, n - 1);
}

static void test_model_draft(void) {
    nc_model *m = test_load_model("models/tinystories-656k/hf"), *d = test_load_model("models/tinystories-656k/TinyStories-656K-Q8_0.gguf");
    nc_context *mc = NULL, *dc = NULL;
    nc_context_params cp = {.n_ctx = 32, .n_threads = 1};
    nc_err err;
    if (!m || !d || nc_context_new(&mc, m, &cp, &err) || nc_context_new(&dc, d, &cp, &err)) {
        CHECK_MSG(0, "setup: %s", m && d ? err.msg : "models");
        goto done;
    }
    CHECK(nc_spec_check_vocab(m, d, &err) == 0);
    nc_model_info info;
    nc_model_get_info(m, &info);
    int32_t ids[] = {1, 80, 147, 201, 282, 57}; /* "Once upon a time" */
    int32_t nv = info.n_vocab;
    float *target = malloc((size_t)nv * sizeof *target), *draft = malloc((size_t)nv * sizeof *draft),
          *q = malloc((size_t)nv * sizeof *q);
    const float *lt = logits_after(mc, ids, 6), *ld = logits_after(dc, ids, 6);
    nc_sampler_params sp;
    nc_sampler_params_default(&sp);
    sp.temp = 1.5f; /* a wide distribution: many tokens to get right */
    sp.top_k = 30;
    sp.top_p = 1;
    sp.min_p = 0;
    nc_sampler *ts = NULL, *ds = NULL, *ref = NULL;
    if (!target || !draft || !q || !lt || !ld) goto free_bufs;
    memcpy(target, lt, (size_t)nv * sizeof *target);
    memcpy(draft, ld, (size_t)nv * sizeof *draft);
    sp.seed = 3;
    CHECK(!nc_sampler_new(&ts, m, nv, &sp, &err));
    sp.seed = 4;
    CHECK(!nc_sampler_new(&ds, d, nv, &sp, &err) && !nc_sampler_new(&ref, m, nv, &sp, &err));
    if (!ts || !ds || !ref) goto free_bufs;
    nc_token_prob chainp[64];
    int32_t k = nc_sampler_apply(ref, target, NULL, 0, 0, chainp, 64);
    long *count = calloc((size_t)nv, sizeof *count), accepted = 0;
    for (int i = 0; count && i < DRAWS; i++) {
        int32_t x = sampler_propose(ds, draft, ids, 6, 6, q);
        sampler_proposal prop = {x, sampler_proposal_certain(ds) ? NULL : q};
        bool ok;
        count[sampler_draw(ts, target, ids, 6, 6, &prop, &ok, NULL)]++;
        accepted += ok;
    }
    long in_chain = 0, c64[64];
    double p64[64];
    for (int32_t i = 0; count && i < k; i++) {
        c64[i] = count[chainp[i].token];
        p64[i] = chainp[i].p;
        in_chain += c64[i];
    }
    int df;
    double stat = count ? chi2(c64, p64, k, DRAWS, &df) : 1e9;
    CHECK_MSG(k == 30 && in_chain == DRAWS, "chain kept %d, draws in it %ld", k, in_chain);
    CHECK_MSG(stat < chi2_critical(df), "chi-square %.2f over %d dof (critical %.2f)", stat, df, chi2_critical(df));
    CHECK_MSG(accepted > DRAWS / 2, "the Q8_0 draft was accepted %ld times of %d", accepted, DRAWS);
    free(count);
free_bufs:
    nc_sampler_free(ts);
    nc_sampler_free(ds);
    nc_sampler_free(ref);
    free(target);
    free(draft);
    free(q);
done:
    nc_context_free(mc);
    nc_context_free(dc);
    nc_model_free(m);
    nc_model_free(d);
}

/* A draft of another vocabulary is refused with the difference named. */
static void test_vocab_refused(void) {
    nc_model *m = test_load_model("models/tinystories-656k/TinyStories-656K-Q8_0.gguf"),
             *d = test_load_model("models/stories260K/stories260K.gguf");
    nc_err err;
    if (m && d) {
        CHECK(nc_spec_check_vocab(m, d, &err) != 0);
        CHECK_MSG(strstr(err.msg, "512") && strstr(err.msg, "2048"), "%s", err.msg);
        nc_context *c = NULL, *dc = NULL;
        nc_context_params cp = {.n_ctx = 16, .n_threads = 1};
        if (!nc_context_new(&c, m, &cp, &err) && !nc_context_new(&dc, d, &cp, &err)) {
            nc_gen_params gp = {.stop = {.max_tokens = 4}, .spec = {.draft = dc, .draft_model = d}};
            nc_sampler_params_default(&gp.sampling);
            int32_t ids[] = {1, 80};
            nc_gen_result r;
            CHECK(nc_generate(c, m, ids, 2, &gp, NULL, NULL, &r, &err) != 0);
            CHECK_MSG(strstr(err.msg, "speculative decoding") && strstr(err.msg, "vocabulary"), "%s", err.msg);
        }
        nc_context_free(c);
        nc_context_free(dc);
    }
    nc_model_free(m);
    nc_model_free(d);
}

/* Prompt lookup (Saxena 2023) proposes what followed the latest earlier occurrence of the longest
 * suffix of the text, up to lookup_ngram tokens, the copy running on into its own proposals. */
static void test_lookup(void) {
    nc_model *m = test_load_model("models/tinystories-656k/TinyStories-656K-Q8_0.gguf");
    if (!m) return;
    static const struct {
        const char *what;
        int32_t text[24], n, want[6], n_want;
    } cases[] = {
        {"the latest of two occurrences", {5, 1, 2, 3, 9, 8, 1, 2, 3, 7, 4, 4, 1, 2, 3}, 15, {7, 4, 4, 1, 2, 3}, 6},
        {"the latest of two shorter occurrences", {5, 2, 3, 9, 8, 2, 3, 7, 4, 1, 2, 3}, 12, {7, 4, 1, 2, 3, 7}, 6},
        {"the longest suffix before a later shorter one",
         {9, 2, 3, 20, 21, 22, 23, 24, 25, 3, 30, 31, 32, 33, 34, 35, 9, 2, 3}, 19, {20, 21, 22, 23, 24, 25}, 6},
        {"the copy runs on into its proposals", {1, 5, 6, 5, 6}, 5, {5, 6, 5, 6, 5, 6}, 6},
        {"suffixes of lookup_ngram tokens at most: the latest of those",
         {1, 2, 3, 4, 50, 9, 2, 3, 4, 60, 1, 2, 3, 4}, 14, {60, 1, 2, 3, 4, 60}, 6},
        {"no earlier occurrence", {1, 2, 3, 4}, 4, {0}, 0},
        {"one token", {4}, 1, {0}, 0},
    };
    nc_spec_params sp = {.lookup_ngram = 3, .draft_max = 6, .fixed = true};
    nc_sampler_params sampling;
    nc_sampler_params_default(&sampling);
    nc_err err;
    spec_drafter *d = NULL;
    CHECK_MSG(spec_drafter_new(&d, &sp, m, &err) == 0, "%s", err.msg);
    for (size_t k = 0; d && k < sizeof cases / sizeof cases[0]; k++) {
        seq s;
        if (seq_init_bare(&s, 0, cases[k].n, &err) || spec_state_new(&s.spec, d, &sampling, 0, &err)) {
            CHECK_MSG(0, "setup: %s", err.msg);
            seq_free(&s);
            break;
        }
        seq_set_tokens(&s, cases[k].text, cases[k].n);
        seq *one = &s;
        int32_t room = 6;
        CHECK_MSG(spec_propose(d, &one, &room, 1, &err) == 0, "%s", err.msg);
        int32_t n = seq_n_draft(&s);
        bool same = n == cases[k].n_want;
        for (int32_t i = 0; same && i < n; i++) same = s.tokens[s.n_tokens + i] == cases[k].want[i];
        CHECK_MSG(same, "%s: %d drafts, first %d", cases[k].what, n, n > 0 ? s.tokens[s.n_tokens] : -1);
        seq_free(&s);
    }
    spec_drafter_free(d);
    nc_model_free(m);
}

int main(void) {
    test_dense_draft();
    test_certain_draft();
    test_greedy();
    test_model_draft();
    test_vocab_refused();
    test_lookup();
    return test_summary("spec");
}
