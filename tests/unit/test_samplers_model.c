/* Decoding with a real model (stories260K, vocabulary 512): beam search against an exact search,
 * width 1 against greedy, stop strings split across tokens, the generation driver (shared
 * prefill, thread-count reproducibility, min_tokens, ignore_eos), DRY breakers, logprobs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "test.h"

static nc_model *model;
static nc_model_info info;
static const int32_t PROMPT[5] = {1, 403, 407, 261, 378}; /* "Once upon a time" */

static nc_context *context(int32_t n_seq, int32_t threads, int32_t n_ctx) {
    nc_context *c = NULL;
    nc_err err;
    nc_context_params cp = {.n_ctx = n_ctx, .n_seq_max = n_seq, .n_threads = threads};
    if (nc_context_new(&c, model, &cp, &err)) fprintf(stderr, "context: %s\n", err.msg);
    return c;
}

static nc_gen_params greedy_params(int32_t max_tokens) {
    nc_gen_params gp = {.stop = {.max_tokens = max_tokens}};
    nc_sampler_params_default(&gp.sampling);
    gp.sampling.temp = 0;
    return gp;
}

/* ---- the exact best continuation: depth-first over the whole vocabulary ---- */

typedef struct exact {
    nc_context *c;
    int32_t seq, depth, n_prompt;
    float lp[3][512];
    int32_t path[3], best_path[3];
    double best;
    long nodes;
} exact;

/* log-softmax with end-of-generation tokens banned, as ignore_eos does for the beams */
static void log_softmax_no_eog(const float *logits, float *lp) {
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < info.n_vocab; i++)
        if (!nc_token_is_eog(model, i) && logits[i] > mx) mx = logits[i];
    for (int i = 0; i < info.n_vocab; i++)
        if (!nc_token_is_eog(model, i)) z += exp((double)logits[i] - mx);
    for (int i = 0; i < info.n_vocab; i++)
        lp[i] = nc_token_is_eog(model, i) ? -INFINITY : (float)((double)logits[i] - mx - log(z));
}

static const float *sort_key;
static int by_lp_desc(const void *a, const void *b) {
    float x = sort_key[*(const int32_t *)a], y = sort_key[*(const int32_t *)b];
    return (x < y) - (x > y);
}

/* Log-probabilities only add non-positive terms, so a prefix already below the best complete
 * sequence cannot lead to a better one: the search is exact while visiting few nodes. */
static void exact_dfs(exact *x, int d, double sum) {
    int32_t order[512];
    for (int i = 0; i < info.n_vocab; i++) order[i] = i;
    sort_key = x->lp[d];
    qsort(order, (size_t)info.n_vocab, sizeof *order, by_lp_desc);
    for (int i = 0; i < info.n_vocab; i++) {
        int32_t t = order[i];
        double s = sum + x->lp[d][t];
        if (!(s > x->best)) break;
        x->path[d] = t;
        x->nodes++;
        if (d + 1 == x->depth) {
            x->best = s;
            memcpy(x->best_path, x->path, sizeof x->path);
            continue;
        }
        nc_err err;
        nc_batch_entry e = {t, x->n_prompt + d, x->seq, true};
        if (nc_forward(x->c, &e, 1, &err)) return;
        log_softmax_no_eog(nc_logits(x->c, 0), x->lp[d + 1]);
        exact_dfs(x, d + 1, s);
        nc_kv_seq_truncate(x->c, x->seq, x->n_prompt + d);
    }
}

/* After "He saw a big" the model hesitates: greedy search (and 2 beams) miss the most likely
 * 3-token continuation, 4 beams find it. */
static void test_beam_vs_exact(void) {
    const int B = 4;
    nc_context *c = context(B + 1, 2, 32); /* sequences 0..B-1 for the beams, B for the exact search */
    nc_err err;
    int32_t prompt[16];
    int n_prompt = nc_tokenize(model, "He saw a big", 12, true, false, prompt, 16, &err);
    CHECK(n_prompt > 1 && n_prompt < 16);
    exact x = {.c = c, .seq = B, .depth = 3, .n_prompt = n_prompt, .best = -INFINITY};
    nc_batch_entry batch[16];
    for (int i = 0; i < n_prompt; i++) batch[i] = (nc_batch_entry){prompt[i], i, B, i == n_prompt - 1};
    CHECK(nc_forward(c, batch, n_prompt, &err) == 0);
    log_softmax_no_eog(nc_logits(c, n_prompt - 1), x.lp[0]);
    exact_dfs(&x, 0, 0);

    nc_sampler_params proc;
    nc_sampler_params_default(&proc);
    proc.ignore_eos = true;
    nc_stop_params stop = {.max_tokens = 3};
    nc_beam_params bp = {.n_beams = B, .n_best = B, .length_penalty = 1.0f};
    nc_beam_result r;
    CHECK(nc_beam_search(c, model, prompt, n_prompt, &bp, &proc, &stop, &r, &err) == 0);
    CHECK(r.n == B);
    CHECK(r.hyps[0].n_tokens == 3 && memcmp(r.hyps[0].tokens, x.best_path, sizeof x.best_path) == 0);
    CHECK_NEAR(r.hyps[0].sum_logprob, x.best, 1e-4);
    CHECK_NEAR(r.hyps[0].score, x.best / 3.0, 1e-4); /* sum / length^1 */
    for (int32_t i = 0; i < r.n; i++) {
        CHECK(r.hyps[i].finish == NC_FINISH_LENGTH);
        if (i) CHECK(r.hyps[i].score <= r.hyps[i - 1].score);
        CHECK(r.hyps[i].sum_logprob <= x.best + 1e-6); /* nothing beats the exact best */
    }
    nc_beam_result_free(&r);
    bp.n_beams = 1; /* greedy: a worse sequence */
    bp.n_best = 1;
    CHECK(nc_beam_search(c, model, prompt, n_prompt, &bp, &proc, &stop, &r, &err) == 0);
    CHECK(r.n == 1 && r.hyps[0].sum_logprob < x.best - 0.1);
    nc_beam_result_free(&r);
    /* a beam the context ends says so: 32 cells hold 31 - n_prompt fed tokens and one drawn */
    stop.max_tokens = 0;
    CHECK(nc_beam_search(c, model, prompt, n_prompt, &bp, &proc, &stop, &r, &err) == 0);
    CHECK(r.n == 1 && r.hyps[0].n_tokens == 32 - n_prompt + 1 && r.hyps[0].finish == NC_FINISH_CONTEXT);
    nc_beam_result_free(&r);
    nc_context_free(c);
}


/* ---- an independent beam search: Hugging Face's (group) beam search, written plainly ---- */

enum { REF_MAX = 48 };
typedef struct ref_seq {
    int32_t tok[REF_MAX]; /* generated tokens */
    int32_t n;
    double sum, score;
} ref_seq;

/* log-softmax of the logits after prompt + gen, computed afresh in sequence `seq` (no cache
 * sharing), with `eos_bias` added to the end-of-generation tokens' logits. */
static void ref_logprobs(nc_context *c, int32_t seq, const int32_t *prompt, int32_t n_prompt, const ref_seq *gen,
                         float eos_bias, double *lp) {
    nc_batch_entry b[64];
    int32_t n = 0;
    for (int32_t i = 0; i < n_prompt; i++, n++) b[n] = (nc_batch_entry){prompt[i], n, seq, false};
    for (int32_t i = 0; i < gen->n; i++, n++) b[n] = (nc_batch_entry){gen->tok[i], n, seq, false};
    b[n - 1].logits = true;
    nc_err err;
    nc_kv_seq_clear(c, seq);
    if (nc_forward(c, b, n, &err)) fprintf(stderr, "reference forward: %s\n", err.msg);
    const float *l = nc_logits(c, n - 1);
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < info.n_vocab; v++) {
        lp[v] = (double)(l[v] + (nc_token_is_eog(model, v) ? eos_bias : 0.0f));
        mx = lp[v] > mx ? lp[v] : mx;
    }
    for (int v = 0; v < info.n_vocab; v++) z += exp(lp[v] - mx);
    for (int v = 0; v < info.n_vocab; v++) lp[v] -= mx + log(z);
}

typedef struct ref_cand {
    double total;
    int32_t beam, token;
} ref_cand;

static int ref_cand_order(const void *pa, const void *pb) {
    const ref_cand *a = pa, *b = pb;
    if (a->total != b->total) return a->total > b->total ? -1 : 1;
    if (a->beam != b->beam) return a->beam - b->beam;
    return a->token - b->token;
}

static void ref_add_hyp(ref_seq *hyps, int32_t *n, int32_t cap, const ref_seq *h) {
    if (*n == cap && !(h->score > hyps[cap - 1].score)) return;
    if (*n == cap) (*n)--;
    int32_t at = (*n)++;
    while (at > 0 && hyps[at - 1].score < h->score) {
        hyps[at] = hyps[at - 1];
        at--;
    }
    hyps[at] = *h;
}

/* Groups one after the other each step; a group's log-probabilities lose `lambda` per beam of an
 * earlier group that took the same token this step; 2g candidates per beam; an ending candidate
 * ranked below g is dropped; per-group stop rule of BeamHypotheses.is_done. Writes all groups'
 * hypotheses, best first, into out (B of them at most); returns how many. */
static int32_t ref_beam_search(nc_context *c, int32_t seq, const int32_t *prompt, int32_t n_prompt, int32_t B,
                               int32_t G, double lambda, double alpha, nc_early_stopping es, int32_t max_new,
                               float eos_bias, ref_seq *out) {
    int32_t g = B / G, nb[8] = {0}, nh[8] = {0}, nn[8] = {0};
    ref_seq beams[8][8], next[8][8], hyps[8][8];
    bool done[8] = {false};
    static double lp[512];
    for (int32_t k = 0; k < G; k++) {
        beams[k][0] = (ref_seq){.n = 0};
        nb[k] = 1;
    }
    for (int32_t step = 0; step < max_new; step++) {
        int32_t chosen[64], n_chosen = 0;
        for (int32_t k = 0; k < G; k++) {
            if (done[k]) continue;
            ref_cand cand[128];
            int32_t n_cand = 0;
            for (int32_t b = 0; b < nb[k]; b++) {
                ref_logprobs(c, seq, prompt, n_prompt, &beams[k][b], eos_bias, lp);
                for (int32_t j = 0; j < n_chosen; j++) lp[chosen[j]] -= lambda;
                bool taken[512] = {false};
                for (int32_t r = 0; r < 2 * g; r++) { /* the 2g best, lower id first on ties */
                    int32_t best = -1;
                    for (int32_t v = 0; v < info.n_vocab; v++)
                        if (!taken[v] && lp[v] > -INFINITY && (best < 0 || lp[v] > lp[best])) best = v;
                    if (best < 0) break;
                    taken[best] = true;
                    cand[n_cand++] = (ref_cand){beams[k][b].sum + lp[best], b, best};
                }
            }
            qsort(cand, (size_t)n_cand, sizeof *cand, ref_cand_order);
            nn[k] = 0;
            for (int32_t r = 0; r < n_cand && nn[k] < g; r++) {
                ref_seq h = beams[k][cand[r].beam];
                h.tok[h.n++] = cand[r].token;
                h.sum = cand[r].total;
                if (nc_token_is_eog(model, cand[r].token)) {
                    h.score = h.sum / pow(h.n, alpha);
                    if (r < g) ref_add_hyp(hyps[k], &nh[k], g, &h);
                } else {
                    next[k][nn[k]++] = h;
                    chosen[n_chosen++] = cand[r].token;
                }
            }
        }
        bool all_done = true;
        for (int32_t k = 0; k < G; k++) {
            if (done[k]) continue;
            if (step + 1 == max_new) { /* the live beams finish at the length limit */
                for (int32_t j = 0; j < nn[k]; j++) {
                    next[k][j].score = next[k][j].sum / pow(next[k][j].n, alpha);
                    ref_add_hyp(hyps[k], &nh[k], g, &next[k][j]);
                }
                continue;
            }
            double len = es == NC_EARLY_STOP_NEVER && alpha > 0 ? max_new : step + 1;
            done[k] = nn[k] == 0 || (nh[k] == g && (es == NC_EARLY_STOP_FIRST ||
                                                    hyps[k][nh[k] - 1].score >= next[k][0].sum / pow(len, alpha)));
            memcpy(beams[k], next[k], sizeof next[k]);
            nb[k] = nn[k];
            all_done &= done[k];
        }
        if (all_done) break;
    }
    int32_t n = 0;
    for (int32_t k = 0; k < G; k++)
        for (int32_t i = 0; i < nh[k]; i++) ref_add_hyp(out, &n, B, &hyps[k][i]);
    return n;
}

/* nc_beam_search against the reference: the same hypotheses, tokens and scores. */
static void check_against_reference(nc_context *c, const int32_t *prompt, int32_t n_prompt, const nc_beam_params *bp,
                                     int32_t max_new, float eos_bias, const char *what) {
    ref_seq want[8];
    int32_t n_want = ref_beam_search(c, bp->n_beams, prompt, n_prompt, bp->n_beams, bp->n_groups ? bp->n_groups : 1,
                                     bp->diversity_penalty, bp->length_penalty, bp->early_stopping, max_new, eos_bias,
                                     want);
    nc_sampler_params proc;
    nc_sampler_params_default(&proc);
    nc_logit_bias bias[4];
    proc.n_logit_bias = 0;
    for (int32_t v = 0; v < info.n_vocab && eos_bias != 0; v++)
        if (nc_token_is_eog(model, v)) bias[proc.n_logit_bias++] = (nc_logit_bias){v, eos_bias};
    proc.logit_bias = bias;
    nc_stop_params stop = {.max_tokens = max_new};
    nc_beam_result r;
    nc_err err;
    for (int32_t q = 0; q < bp->n_beams; q++) nc_kv_seq_clear(c, q);
    CHECK_MSG(nc_beam_search(c, model, prompt, n_prompt, bp, &proc, &stop, &r, &err) == 0, "%s: %s", what, err.msg);
    CHECK_MSG(r.n == (n_want < bp->n_best ? n_want : bp->n_best), "%s: %d hypotheses, want %d", what, r.n, n_want);
    for (int32_t i = 0; i < r.n && i < n_want; i++) {
        bool same = r.hyps[i].n_tokens == want[i].n &&
                    !memcmp(r.hyps[i].tokens, want[i].tok, (size_t)want[i].n * sizeof *want[i].tok);
        CHECK_MSG(same, "%s: hypothesis %d has %d tokens, the reference's %d", what, i, r.hyps[i].n_tokens, want[i].n);
        CHECK_MSG(fabs(r.hyps[i].score - want[i].score) < 1e-4 * (1 + fabs(want[i].score)),
                  "%s: hypothesis %d scores %.6f, the reference %.6f", what, i, r.hyps[i].score, want[i].score);
    }
    nc_beam_result_free(&r);
}

/* early_stopping "never" against the heuristic where they differ: after "Once" with the end of
 * generation pushed up (+23), 2 hypotheses end at 15 tokens and the heuristic (best live sum
 * over 15^3) stops; "never" scores the live beams at 30^3, goes on, and a 30-token beam wins. */
static void test_beam_early_stopping(void) {
    nc_context *c = context(5, 2, 64);
    int32_t prompt[8];
    nc_err err;
    int32_t n_prompt = nc_tokenize(model, "Once", 4, true, false, prompt, 8, &err);
    CHECK(n_prompt == 2);
    nc_beam_params bp = {.n_beams = 2, .n_best = 2, .length_penalty = 3.0f};
    check_against_reference(c, prompt, n_prompt, &bp, 30, 23, "heuristic");
    bp.early_stopping = NC_EARLY_STOP_NEVER;
    check_against_reference(c, prompt, n_prompt, &bp, 30, 23, "never");
    bp.early_stopping = NC_EARLY_STOP_FIRST;
    check_against_reference(c, prompt, n_prompt, &bp, 30, 23, "true");
    bp.length_penalty = -0.5f; /* a negative penalty: "never" is the heuristic */
    bp.early_stopping = NC_EARLY_STOP_NEVER;
    check_against_reference(c, prompt, n_prompt, &bp, 30, 23, "never, alpha -0.5");
    /* the two rules disagree on the best hypothesis here */
    nc_sampler_params proc;
    nc_sampler_params_default(&proc);
    nc_logit_bias eos = {2, 23};
    CHECK(nc_token_is_eog(model, 2));
    proc.logit_bias = &eos;
    proc.n_logit_bias = 1;
    nc_stop_params stop = {.max_tokens = 30};
    nc_beam_result h, n;
    bp = (nc_beam_params){.n_beams = 2, .n_best = 1, .length_penalty = 3.0f};
    CHECK(nc_beam_search(c, model, prompt, n_prompt, &bp, &proc, &stop, &h, &err) == 0);
    bp.early_stopping = NC_EARLY_STOP_NEVER;
    CHECK(nc_beam_search(c, model, prompt, n_prompt, &bp, &proc, &stop, &n, &err) == 0);
    CHECK(h.n == 1 && n.n == 1 && h.hyps[0].n_tokens == 15 && h.hyps[0].finish == NC_FINISH_STOP);
    CHECK(n.hyps[0].n_tokens == 30 && n.hyps[0].finish == NC_FINISH_LENGTH && n.hyps[0].score > h.hyps[0].score);
    nc_beam_result_free(&h);
    nc_beam_result_free(&n);
    bp.early_stopping = 3;
    CHECK(nc_beam_search(c, model, prompt, n_prompt, &bp, &proc, &stop, &h, &err) == -1 &&
          strstr(err.msg, "early_stopping: 3"));
    nc_context_free(c);
}

/* Diverse beam search against the reference, with and without endings; G = B groups of one beam
 * without a penalty are B copies of greedy search; groups must divide the beams. */
static void test_diverse_beams(void) {
    nc_context *c = context(5, 2, 64);
    nc_err err;
    int32_t prompt[16];
    int32_t n_prompt = nc_tokenize(model, "He saw a big", 12, true, false, prompt, 16, &err);
    nc_beam_params bp = {.n_beams = 4, .n_best = 4, .length_penalty = 1.0f, .n_groups = 2, .diversity_penalty = 1.5f};
    check_against_reference(c, prompt, n_prompt, &bp, 8, 0, "2 groups, penalty 1.5");
    bp.diversity_penalty = 0.3f;
    bp.n_groups = 4;
    check_against_reference(c, prompt, n_prompt, &bp, 8, 0, "4 groups, penalty 0.3");
    bp = (nc_beam_params){.n_beams = 4, .n_best = 4, .length_penalty = 1.0f, .n_groups = 2, .diversity_penalty = 0.5f};
    check_against_reference(c, prompt, n_prompt, &bp, 30, 21, "2 groups with endings");
    bp.early_stopping = NC_EARLY_STOP_NEVER;
    check_against_reference(c, prompt, n_prompt, &bp, 30, 21, "2 groups with endings, never");
    /* a strong penalty makes the groups' first tokens differ */
    nc_stop_params stop = {.max_tokens = 4};
    nc_beam_result r;
    bp = (nc_beam_params){.n_beams = 2, .n_best = 2, .length_penalty = 1.0f, .n_groups = 2, .diversity_penalty = 100};
    CHECK(nc_beam_search(c, model, prompt, n_prompt, &bp, NULL, &stop, &r, &err) == 0);
    CHECK(r.n == 2 && r.hyps[0].tokens[0] != r.hyps[1].tokens[0]);
    nc_beam_result_free(&r);
    bp.diversity_penalty = 0; /* no penalty: every group of one beam is greedy */
    CHECK(nc_beam_search(c, model, prompt, n_prompt, &bp, NULL, &stop, &r, &err) == 0);
    CHECK(r.n == 2 && !memcmp(r.hyps[0].tokens, r.hyps[1].tokens, 4 * sizeof *r.hyps[0].tokens));
    nc_beam_result_free(&r);
    bp.n_groups = 3;
    CHECK(nc_beam_search(c, model, prompt, n_prompt, &bp, NULL, &stop, &r, &err) == -1 &&
          strstr(err.msg, "n_groups: 3 does not divide n_beams (2)"));
    bp.n_groups = 2;
    bp.diversity_penalty = -1;
    CHECK(nc_beam_search(c, model, prompt, n_prompt, &bp, NULL, &stop, &r, &err) == -1 &&
          strstr(err.msg, "diversity_penalty"));
    nc_context_free(c);
}


/* ---- contrastive search ---- */

static int collect_tokens(const nc_gen_event *ev, void *user) {
    int32_t *n = user;
    (*n)++;
    return ev->token < 0;
}

/* penalty_alpha 0 scores candidates by probability alone: greedy search, token for token. */
static void test_contrastive_greedy(void) {
    nc_context *c = context(5, 2, 64);
    nc_err err;
    const char *prompts[] = {"Once upon a time", "He saw a big", "The little girl"};
    for (int i = 0; i < 3; i++) {
        int32_t prompt[16];
        int32_t n_prompt = nc_tokenize(model, prompts[i], (int32_t)strlen(prompts[i]), true, false, prompt, 16, &err);
        for (int ngram = 0; ngram <= 3; ngram += 3) {
            nc_gen_params gp = greedy_params(40);
            gp.sampling.no_repeat_ngram = ngram;
            nc_gen_result g, r;
            for (int32_t q = 0; q < 5; q++) nc_kv_seq_clear(c, q);
            CHECK(nc_generate(c, model, prompt, n_prompt, &gp, NULL, NULL, &g, &err) == 0);
            nc_contrastive_params cp = {.penalty_alpha = 0, .top_k = 4};
            int32_t events = 0;
            CHECK(nc_contrastive_search(c, model, prompt, n_prompt, &cp, &gp.sampling, &gp.stop, collect_tokens, &events,
                                        &r, &err) == 0);
            CHECK_MSG(r.n_samples == 1 && r.samples[0].n_tokens == g.samples[0].n_tokens &&
                          !memcmp(r.samples[0].tokens, g.samples[0].tokens,
                                  (size_t)g.samples[0].n_tokens * sizeof *g.samples[0].tokens),
                      "'%s' (no-repeat-ngram %d): contrastive search at alpha 0 is not greedy", prompts[i], ngram);
            CHECK(events == r.samples[0].n_tokens && r.samples[0].finish == g.samples[0].finish);
            nc_gen_result_free(&g);
            nc_gen_result_free(&r);
        }
    }
    nc_context_free(c);
}

/* The formula, step by step, recomputed here: every candidate's sequence run afresh in its own
 * sequence, hidden states from nc_hidden, cosines and scores in double. */
static void test_contrastive_formula(void) {
    enum { K = 4, STEPS = 10 };
    const double alpha = 0.6;
    nc_context *c = context(K + 2, 2, 64); /* 0..K-1 for the search, K + 1 for the recomputation */
    nc_err err;
    int32_t toks[64];
    int32_t n_prompt = nc_tokenize(model, "He saw a big", 12, true, false, toks, 16, &err), n = n_prompt;
    int32_t want[STEPS];
    int32_t E = info.n_embd, V = info.n_vocab;
    float *hs = malloc((size_t)64 * (size_t)E * sizeof *hs), *cand_h = malloc((size_t)E * sizeof *cand_h);
    double *p = malloc((size_t)V * sizeof *p);
    int32_t differs_from_greedy = 0;
    for (int step = 0; step < STEPS; step++) {
        nc_batch_entry b[64];
        for (int32_t i = 0; i < n; i++) b[i] = (nc_batch_entry){toks[i], i, K + 1, true};
        nc_kv_seq_clear(c, K + 1);
        CHECK(nc_forward(c, b, n, &err) == 0);
        for (int32_t i = 0; i < n; i++) memcpy(hs + (size_t)i * E, nc_hidden(c, i), (size_t)E * sizeof *hs);
        const float *l = nc_logits(c, n - 1);
        double mx = -INFINITY, z = 0;
        for (int32_t v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
        for (int32_t v = 0; v < V; v++) z += exp(l[v] - mx);
        for (int32_t v = 0; v < V; v++) p[v] = exp(l[v] - mx) / z;
        int32_t cand[K];
        bool taken[512] = {false};
        for (int j = 0; j < K; j++) {
            cand[j] = -1;
            for (int32_t v = 0; v < V; v++)
                if (!taken[v] && (cand[j] < 0 || p[v] > p[cand[j]])) cand[j] = v;
            taken[cand[j]] = true;
        }
        int32_t best = -1;
        double best_score = -INFINITY;
        for (int j = 0; j < K; j++) {
            b[n] = (nc_batch_entry){cand[j], n, K + 1, true};
            nc_kv_seq_clear(c, K + 1);
            for (int32_t i = 0; i < n; i++) b[i].logits = false;
            CHECK(nc_forward(c, b, n + 1, &err) == 0);
            memcpy(cand_h, nc_hidden(c, n), (size_t)E * sizeof *cand_h);
            double cn = 0, cos_max = -INFINITY;
            for (int32_t d = 0; d < E; d++) cn += (double)cand_h[d] * cand_h[d];
            for (int32_t i = 0; i < n; i++) {
                double dot = 0, hn = 0;
                for (int32_t d = 0; d < E; d++) {
                    dot += (double)hs[(size_t)i * E + d] * cand_h[d];
                    hn += (double)hs[(size_t)i * E + d] * hs[(size_t)i * E + d];
                }
                double cos = dot / sqrt(hn * cn);
                cos_max = cos > cos_max ? cos : cos_max;
            }
            double score = (1 - alpha) * p[cand[j]] - alpha * cos_max;
            if (score > best_score) {
                best_score = score;
                best = cand[j];
            }
        }
        differs_from_greedy += best != cand[0];
        want[step] = toks[n++] = best;
    }
    nc_contrastive_params cp = {.penalty_alpha = (float)alpha, .top_k = K};
    nc_stop_params stop = {.max_tokens = STEPS};
    nc_sampler_params none;
    nc_sampler_params_default(&none);
    nc_gen_result r;
    CHECK(nc_contrastive_search(c, model, toks, n_prompt, &cp, &none, &stop, NULL, NULL, &r, &err) == 0);
    CHECK(r.samples[0].n_tokens == STEPS && r.samples[0].finish == NC_FINISH_LENGTH);
    CHECK_MSG(!memcmp(r.samples[0].tokens, want, sizeof want), "contrastive search differs from the recomputation");
    CHECK(differs_from_greedy > 0); /* the penalty changed some choice */
    nc_gen_result_free(&r);
    /* a full context ends it; too few sequences and bad parameters are refused */
    stop.max_tokens = 0;
    nc_context *small = context(K, 2, 16);
    CHECK(nc_contrastive_search(small, model, toks, n_prompt, &cp, &none, &stop, NULL, NULL, &r, &err) == 0);
    CHECK(r.samples[0].n_tokens == 16 - n_prompt && r.samples[0].finish == NC_FINISH_CONTEXT);
    nc_gen_result_free(&r);
    cp.top_k = K + 1;
    CHECK_MSG(nc_contrastive_search(small, model, toks, n_prompt, &cp, &none, &stop, NULL, NULL, &r, &err) == -1 &&
                  strstr(err.msg, "n_seq_max >= 5"), "%s", err.msg);
    cp.top_k = 0;
    CHECK(nc_contrastive_search(small, model, toks, n_prompt, &cp, &none, &stop, NULL, NULL, &r, &err) == -1 &&
          strstr(err.msg, "top_k: 0"));
    cp = (nc_contrastive_params){.penalty_alpha = 1.5f, .top_k = 2};
    CHECK(nc_contrastive_search(small, model, toks, n_prompt, &cp, &none, &stop, NULL, NULL, &r, &err) == -1 &&
          strstr(err.msg, "penalty_alpha: 1.5"));
    nc_context_free(small);
    free(hs);
    free(cand_h);
    free(p);
    nc_context_free(c);
}

/* ---- beams and greedy ---- */

typedef struct collected {
    char text[4096];
    int n;
} collected;

static int collect_text(const nc_gen_event *ev, void *user) {
    collected *t = user;
    if (t->n + ev->n_text < (int)sizeof t->text) {
        memcpy(t->text + t->n, ev->text, (size_t)ev->n_text);
        t->n += ev->n_text;
        t->text[t->n] = 0;
    }
    return 0;
}

static void test_width_one_is_greedy(int32_t no_repeat_ngram) {
    nc_context *c = context(1, 2, 64);
    nc_err err;
    nc_gen_params gp = greedy_params(40);
    gp.sampling.no_repeat_ngram = no_repeat_ngram;
    nc_gen_result g;
    collected text = {.n = 0};
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, collect_text, &text, &g, &err) == 0);
    nc_beam_params bp = {.n_beams = 1, .length_penalty = 1.0f};
    nc_beam_result r;
    CHECK(nc_beam_search(c, model, PROMPT, 5, &bp, &gp.sampling, &gp.stop, &r, &err) == 0);
    CHECK(r.n == 1 && r.hyps[0].n_tokens == g.samples[0].n_tokens);
    CHECK(memcmp(r.hyps[0].tokens, g.samples[0].tokens, (size_t)g.samples[0].n_tokens * sizeof(int32_t)) == 0);
    CHECK_MSG(strcmp(r.hyps[0].text, text.text) == 0, "beam '%s' vs greedy '%s'", r.hyps[0].text, text.text);
    if (no_repeat_ngram == 2) { /* no bigram of prompt + continuation occurs twice */
        int32_t all[64];
        memcpy(all, PROMPT, sizeof PROMPT);
        memcpy(all + 5, r.hyps[0].tokens, (size_t)r.hyps[0].n_tokens * sizeof(int32_t));
        int n = 5 + r.hyps[0].n_tokens, repeats = 0;
        for (int i = 0; i + 1 < n; i++)
            for (int j = i + 1; j + 1 < n; j++) repeats += all[i] == all[j] && all[i + 1] == all[j + 1];
        CHECK_MSG(repeats == 0, "%d repeated bigrams", repeats);
    }
    nc_gen_result_free(&g);
    nc_beam_result_free(&r);
    nc_context_free(c);
}

static void test_beam_rules(void) {
    nc_context *c = context(3, 2, 64);
    nc_err err;
    nc_beam_result r;
    /* n best with scores: sorted, score = sum / length^alpha */
    nc_beam_params bp = {.n_beams = 3, .n_best = 3, .length_penalty = 0.7f};
    nc_stop_params stop = {.max_tokens = 24};
    CHECK(nc_beam_search(c, model, PROMPT, 5, &bp, NULL, &stop, &r, &err) == 0);
    CHECK(r.n == 3);
    for (int32_t i = 0; i < r.n; i++) {
        CHECK_NEAR(r.hyps[i].score, r.hyps[i].sum_logprob / pow(r.hyps[i].n_tokens, (double)0.7f), 1e-9);
        if (i) CHECK(r.hyps[i].score <= r.hyps[i - 1].score);
    }
    nc_beam_result_free(&r);
    /* a stop string ends a beam; it is not in the text */
    const char *dot[1] = {"."};
    stop = (nc_stop_params){.max_tokens = 40, .stop = dot, .n_stop = 1};
    CHECK(nc_beam_search(c, model, PROMPT, 5, &bp, NULL, &stop, &r, &err) == 0);
    int stopped = 0;
    for (int32_t i = 0; i < r.n; i++) {
        CHECK(strchr(r.hyps[i].text, '.') == NULL);
        stopped += r.hyps[i].finish == NC_FINISH_STOP;
    }
    CHECK(stopped > 0);
    nc_beam_result_free(&r);
    /* more beams than cache sequences is refused */
    bp.n_beams = 4;
    CHECK(nc_beam_search(c, model, PROMPT, 5, &bp, NULL, &stop, &r, &err) == -1 && strstr(err.msg, "n_seq_max >= 4"));
    bp.n_beams = 2;
    CHECK(nc_beam_search(c, model, PROMPT, 5, &bp, NULL, &stop, &r, &err) == -1 && strstr(err.msg, "n_best"));
    nc_context_free(c);
}

/* ---- stop rules ---- */

static nc_finish push(nc_stopper *s, int32_t tok, char *shown) {
    const char *t;
    int32_t n;
    nc_finish f = nc_stopper_push(s, tok, &t, &n);
    strncat(shown, t, (size_t)n);
    return f;
}

static void test_stop_strings(void) {
    nc_stopper *s;
    nc_err err;
    char shown[256] = "";
    /* " Once" " upon" " a" " time": "on a ti" spans three tokens */
    const char *stops[2] = {"on a ti", "zzz"};
    nc_stop_params sp = {.stop = stops, .n_stop = 2};
    CHECK(nc_stopper_new(&s, model, &sp, &err) == 0);
    CHECK(push(s, 403, shown) == NC_FINISH_NONE && !strcmp(shown, " Once"));
    CHECK(push(s, 407, shown) == NC_FINISH_NONE && !strcmp(shown, " Once up")); /* "on" held back */
    CHECK(push(s, 261, shown) == NC_FINISH_NONE && !strcmp(shown, " Once up"));  /* "on a" held back */
    CHECK(push(s, 378, shown) == NC_FINISH_STOP && !strcmp(shown, " Once up"));  /* never shown */
    CHECK(nc_stopper_n_tokens(s) == 4);
    nc_stopper_free(s);
    /* a partial match that does not complete is released */
    shown[0] = 0;
    const char *stop2[1] = {"on the"};
    sp = (nc_stop_params){.stop = stop2, .n_stop = 1};
    CHECK(nc_stopper_new(&s, model, &sp, &err) == 0);
    push(s, 407, shown);
    CHECK(!strcmp(shown, " up"));
    CHECK(push(s, 261, shown) == NC_FINISH_NONE && !strcmp(shown, " upon a"));
    /* end of generation: not shown, held text released */
    CHECK(push(s, 407, shown) == NC_FINISH_NONE && !strcmp(shown, " upon a up"));
    CHECK(push(s, nc_token_eos(model), shown) == NC_FINISH_STOP && !strcmp(shown, " upon a upon"));
    nc_stopper_free(s);
    /* max_tokens: the last token's text and the held text come out */
    shown[0] = 0;
    sp.max_tokens = 2;
    CHECK(nc_stopper_new(&s, model, &sp, &err) == 0);
    push(s, 403, shown);
    CHECK(push(s, 407, shown) == NC_FINISH_LENGTH && !strcmp(shown, " Once upon"));
    nc_stopper_free(s);
    /* stop token ids stop like end of generation and are not shown */
    shown[0] = 0;
    int32_t ids[1] = {261};
    sp = (nc_stop_params){.stop_ids = ids, .n_stop_ids = 1};
    CHECK(nc_stopper_new(&s, model, &sp, &err) == 0);
    push(s, 403, shown);
    CHECK(push(s, 261, shown) == NC_FINISH_STOP && !strcmp(shown, " Once"));
    nc_stopper_free(s);
    const char *empty[1] = {""};
    sp = (nc_stop_params){.stop = empty, .n_stop = 1};
    CHECK(nc_stopper_new(&s, model, &sp, &err) == -1 && strstr(err.msg, "empty"));
}

/* The driver stops at a stop string split across tokens and never streams it. */
static void test_driver_stop(void) {
    nc_context *c = context(1, 2, 64);
    nc_err err;
    nc_gen_params gp = greedy_params(40);
    nc_gen_result g;
    collected all = {.n = 0};
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, collect_text, &all, &g, &err) == 0);
    /* greedy: ", there was a little girl named Lily. ..." — stop at "e gi", inside "little girl" */
    const char *stops[1] = {"e gi"};
    gp.stop.stop = stops;
    gp.stop.n_stop = 1;
    collected cut = {.n = 0};
    nc_gen_result g2;
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, collect_text, &cut, &g2, &err) == 0);
    const char *at = strstr(all.text, "e gi");
    CHECK(at != NULL && g2.samples[0].finish == NC_FINISH_STOP);
    CHECK_MSG(at && cut.n == at - all.text && strncmp(cut.text, all.text, (size_t)cut.n) == 0, "cut '%s' of '%s'",
              cut.text, all.text);
    nc_gen_result_free(&g);
    nc_gen_result_free(&g2);
    nc_context_free(c);
}

/* ---- the driver ---- */

static nc_gen_result run(int32_t threads, int32_t n_seq, const nc_gen_params *gp) {
    nc_context *c = context(n_seq, threads, 64);
    nc_gen_result g = {0};
    nc_err err;
    if (nc_generate(c, model, PROMPT, 5, gp, NULL, NULL, &g, &err)) fprintf(stderr, "generate: %s\n", err.msg);
    nc_context_free(c);
    return g;
}

static bool same_tokens(const nc_gen_sample *a, const nc_gen_sample *b) {
    return a->n_tokens == b->n_tokens && memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int32_t)) == 0;
}

static void test_driver(void) {
    nc_gen_params gp = {.stop = {.max_tokens = 48}, .n_samples = 3};
    nc_sampler_params_default(&gp.sampling);
    gp.sampling.seed = 42;
    gp.sampling.temp = 1.2f;
    gp.sampling.repeat_penalty = 1.1f;
    nc_gen_result one = run(1, 3, &gp), two = run(2, 3, &gp);
    CHECK(one.n_samples == 3 && two.n_samples == 3);
    for (int32_t i = 0; i < one.n_samples && i < two.n_samples; i++)
        CHECK_MSG(same_tokens(&one.samples[i], &two.samples[i]), "sample %d differs between 1 and 2 threads", i);
    /* samples differ from each other (seeds 42, 43, 44) */
    CHECK(!same_tokens(&one.samples[0], &one.samples[1]) && !same_tokens(&one.samples[1], &one.samples[2]));
    /* sample 0 of three (shared prefill, batched steps) is the single sample with the same seed */
    gp.n_samples = 1;
    nc_gen_result single = run(2, 1, &gp);
    CHECK(single.n_samples == 1 && same_tokens(&single.samples[0], &one.samples[0]));
    nc_gen_result_free(&one);
    nc_gen_result_free(&two);
    /* more samples than sequences is refused */
    gp.n_samples = 2;
    nc_context *c = context(1, 1, 64);
    nc_gen_result g;
    nc_err err;
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, NULL, NULL, &g, &err) == -1 && strstr(err.msg, "n_seq_max >= 2"));
    nc_context_free(c);
    /* the same context again: the prompt comes from the prefix cache, the tokens are the same */
    gp.n_samples = 1;
    c = context(1, 2, 64);
    nc_gen_result first, again;
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, NULL, NULL, &first, &err) == 0 && first.n_cached == 0);
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, NULL, NULL, &again, &err) == 0 && again.n_cached == 4);
    CHECK(same_tokens(&first.samples[0], &again.samples[0]) && same_tokens(&first.samples[0], &single.samples[0]));
    nc_gen_result_free(&single);
    nc_gen_result_free(&first);
    nc_gen_result_free(&again);
    nc_context_free(c);
}

/* With end-of-generation made overwhelming, min_tokens holds it off exactly that long and
 * ignore_eos forever. */
static void test_min_tokens_ignore_eos(void) {
    int32_t eos = nc_token_eos(model);
    nc_logit_bias push_eos = {eos, 100};
    nc_gen_params gp = greedy_params(30);
    gp.sampling.logit_bias = &push_eos;
    gp.sampling.n_logit_bias = 1;
    nc_gen_result g = run(1, 1, &gp);
    CHECK(g.samples[0].n_tokens == 1 && g.samples[0].tokens[0] == eos && g.samples[0].finish == NC_FINISH_STOP);
    nc_gen_result_free(&g);
    gp.sampling.min_tokens = 10;
    g = run(1, 1, &gp);
    CHECK(g.samples[0].n_tokens == 11 && g.samples[0].tokens[10] == eos && g.samples[0].finish == NC_FINISH_STOP);
    for (int i = 0; i < 10; i++) CHECK(!nc_token_is_eog(model, g.samples[0].tokens[i]));
    nc_gen_result_free(&g);
    gp.sampling.min_tokens = 0;
    gp.sampling.ignore_eos = true;
    g = run(1, 1, &gp);
    CHECK(g.samples[0].n_tokens == 30 && g.samples[0].finish == NC_FINISH_LENGTH);
    nc_gen_result_free(&g);
    /* the context bounds the length: 5 prompt tokens in 8 cells leave room to draw 4, and the
     * finish says why; max_tokens reached at that same token is max_tokens' doing */
    gp.stop.max_tokens = 0;
    nc_context *c = context(1, 1, 8);
    nc_err err;
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, NULL, NULL, &g, &err) == 0);
    CHECK(g.samples[0].n_tokens == 4 && g.samples[0].finish == NC_FINISH_CONTEXT);
    CHECK(!strcmp(nc_finish_name(g.samples[0].finish), "length"));
    nc_gen_result_free(&g);
    gp.stop.max_tokens = 9;
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, NULL, NULL, &g, &err) == 0);
    CHECK(g.samples[0].n_tokens == 4 && g.samples[0].finish == NC_FINISH_CONTEXT);
    nc_gen_result_free(&g);
    gp.stop.max_tokens = 4;
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, NULL, NULL, &g, &err) == 0);
    CHECK(g.samples[0].n_tokens == 4 && g.samples[0].finish == NC_FINISH_LENGTH);
    nc_gen_result_free(&g);
    nc_context_free(c);
}

/* DRY with the vocabulary's breakers: ":" breaks a repeat, so "A : B C A : B" does not
 * penalise C (the repeat "B" is 1 < 2), while without breakers "A : B" -> C is a repeat of 3. */
static void test_dry_breakers(void) {
    int32_t colon[4];
    nc_err err;
    int n = nc_tokenize(model, ":", 1, false, false, colon, 4, &err);
    CHECK(n >= 1);
    int32_t brk = colon[n - 1], A = 403, B = 407, C = 261;
    int32_t hist[7] = {A, brk, B, C, A, brk, B};
    float flat[512] = {0};
    nc_sampler_params sp;
    nc_sampler_params_default(&sp);
    sp.samplers = "dry";
    sp.temp = 1;
    sp.dry_multiplier = 1;
    nc_token_prob out[512];
    nc_sampler *s;
    CHECK(nc_sampler_new(&s, model, info.n_vocab, &sp, &err) == 0);
    nc_sampler_apply(s, flat, hist, 7, 0, out, 512);
    CHECK_NEAR(out[0].p, 1.0 / 512, 1e-7); /* nothing penalised */
    nc_sampler_free(s);
    sp.n_dry_breakers = 0;
    CHECK(nc_sampler_new(&s, model, info.n_vocab, &sp, &err) == 0);
    nc_sampler_apply(s, flat, hist, 7, 0, out, 512);
    /* C: -1 * 1.75^(3 - 2) */
    double z = 511 + exp(-1.75);
    CHECK(out[511].token == C);
    CHECK_NEAR(out[511].p, exp(-1.75) / z, 1e-7);
    nc_sampler_free(s);
}

/* Raw log-probabilities are the model's log-softmax. */
static void test_logprobs_raw(void) {
    nc_context *c = context(1, 1, 16);
    nc_err err;
    nc_batch_entry batch[5];
    for (int i = 0; i < 5; i++) batch[i] = (nc_batch_entry){PROMPT[i], i, 0, i == 4};
    CHECK(nc_forward(c, batch, 5, &err) == 0);
    const float *logits = nc_logits(c, 4);
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < info.n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < info.n_vocab; i++) z += exp(logits[i] - mx);
    nc_sampler_params sp;
    nc_sampler_params_default(&sp);
    sp.n_logprobs = 5;
    sp.seed = 3;
    nc_sampler *s;
    CHECK(nc_sampler_new(&s, model, info.n_vocab, &sp, &err) == 0);
    nc_sample_info si;
    int32_t t = nc_sampler_sample(s, logits, PROMPT, 5, 5, &si);
    CHECK_NEAR(si.logprob, logits[t] - mx - log(z), 1e-5);
    CHECK(si.n_top == 5 && si.top[0].token == nc_sample_greedy(logits, info.n_vocab));
    for (int i = 1; i < 5; i++) CHECK(si.top[i].logprob <= si.top[i - 1].logprob);
    nc_sampler_free(s);
    nc_context_free(c);
}

int main(void) {
    const char *shared = getenv("SHARED");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", shared ? shared : "../shared");
    nc_err err;
    if (nc_model_load(&model, path, &err)) {
        CHECK_MSG(0, "cannot load %s: %s", path, err.msg);
        return test_summary("samplers_model");
    }
    nc_model_get_info(model, &info);
    test_beam_vs_exact();
    test_beam_early_stopping();
    test_diverse_beams();
    test_contrastive_greedy();
    test_contrastive_formula();
    test_width_one_is_greedy(0);
    test_width_one_is_greedy(2);
    test_beam_rules();
    test_stop_strings();
    test_driver_stop();
    test_driver();
    test_min_tokens_ignore_eos();
    test_dry_breakers();
    test_logprobs_raw();
    nc_model_free(model);
    return test_summary("samplers_model");
}
