/* Contrastive search (Su et al. 2022, "A Contrastive Framework for Neural Text Generation"; as
 * transformers runs it for penalty_alpha > 0 with top_k): at every step the k most probable
 * tokens v of the processed distribution are fed to the model, each in its own copy of the
 * sequence, all in one batch; the one kept maximises
 *
 *     (1 - alpha) p(v) - alpha max_j cos(h_v, h_j)
 *
 * h_v the candidate's final hidden state (after the final norm: transformers' hidden_states[-1])
 * and h_j those of every earlier token, prompt included: the degeneration penalty, which keeps the
 * text from repeating itself. alpha = 0 is greedy search. The kept candidate's sequence, its
 * cache, its logits and its hidden state carry the search on; the other sequences are copied from
 * it at the next step (blocks are shared until they diverge).
 *
 * Ties (equal scores) keep the earlier candidate: the more probable one, the lower id on equal
 * probabilities — the chain's rule, and transformers' argmax over its top-k order.
 *
 * Explained (processing->explain), a step's record holds one entry per candidate (the first
 * NC_EXPLAIN_STAGES - 1 of them) named "contrastive": its probability as `mass`, its largest
 * cosine as `param`, then the choice. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "sampling/sampler.h"
#include "sampling/seq.h"

typedef struct cs_run {
    nc_context *c;
    seq s;               /* the text (its sampler: the processors; s.kv: the sequence carrying the search) */
    int32_t k, E, V, n_prompt, room;  /* room: tokens the context holds after the prompt */
    double alpha;
    float *ctx_h;        /* unit-length hidden states of every token so far, [n_h][E] */
    int32_t n_h;
    float *logits;       /* the next token's logits */
    float *prob;         /* their processed probabilities, by id */
    int32_t *cand, *cand_seq;
    nc_batch_entry *batch;
    bool explain;
    nc_explain ex;
} cs_run;

/* v / |v| into out (a zero vector stays zero: its cosine with anything is 0). */
static void unit(float *out, const float *v, int32_t n) {
    double ss = 0;
    for (int32_t i = 0; i < n; i++) ss += (double)v[i] * v[i];
    double inv = ss > 0 ? 1.0 / sqrt(ss) : 0;
    for (int32_t i = 0; i < n; i++) out[i] = (float)(v[i] * inv);
}

/* The largest cosine similarity between h (unit length) and the context's hidden states. */
static double max_cosine(const cs_run *r, const float *h) {
    double best = -INFINITY;
    for (int32_t j = 0; j < r->n_h; j++) {
        const float *x = r->ctx_h + (size_t)j * r->E;
        double dot = 0;
        for (int32_t i = 0; i < r->E; i++) dot += (double)x[i] * h[i];
        best = dot > best ? dot : best;
    }
    return best;
}

/* The prompt into the search's sequence, every position's hidden state kept. */
static int prefill(cs_run *r, const int32_t *prompt, nc_err *err) {
    for (int32_t q = 0; q < r->k; q++) nc_kv_seq_clear(r->c, q);
    r->s.kv = 0;
    for (int32_t i = 0; i < r->n_prompt; i++) r->batch[i] = (nc_batch_entry){prompt[i], i, 0, true};
    if (nc_forward(r->c, r->batch, r->n_prompt, err)) return -1;
    for (int32_t i = 0; i < r->n_prompt; i++) unit(r->ctx_h + (size_t)i * r->E, nc_hidden(r->c, i), r->E);
    r->n_h = r->n_prompt;
    memcpy(r->logits, nc_logits(r->c, r->n_prompt - 1), (size_t)r->V * sizeof *r->logits);
    return 0;
}

/* The processed distribution's k most probable tokens into r->cand (returns how many), every
 * token's probability into r->prob (which holds the logits while the candidates are picked). */
static int32_t candidates(cs_run *r) {
    const cand_list *c = sampler_process(r->s.sampler, r->logits, r->s.tokens, r->s.n_tokens, r->n_prompt);
    double mx = -INFINITY, z = 0;
    for (int32_t i = 0; i < c->n; i++) mx = c->data[i].logit > mx ? c->data[i].logit : mx;
    if (mx == -INFINITY) return 0;
    for (int32_t i = 0; i < c->n; i++) z += exp((double)c->data[i].logit - mx);
    for (int32_t i = 0; i < c->n; i++) r->prob[i] = c->data[i].logit; /* id order (sampler_process) */
    int32_t n = top_indices(r->prob, r->V, r->k, r->cand);
    for (int32_t i = 0; i < c->n; i++) r->prob[i] = (float)(exp((double)c->data[i].logit - mx) / z);
    return n;
}

/* Feed the candidates at position pos, each in its own sequence: the first in the search's, the
 * others in copies of it (top_k sequences in all). */
static int feed(cs_run *r, int32_t n, int32_t pos, nc_err *err) {
    for (int32_t j = 0, q = 0; j < n; j++) {
        if (j == 0) r->cand_seq[j] = r->s.kv;
        else {
            if (q == r->s.kv) q++;
            r->cand_seq[j] = q++;
            if (nc_kv_seq_copy(r->c, r->s.kv, r->cand_seq[j], err))
                return nc_fail_prefix(err, "contrastive search with top_k %d needs a context with n_seq_max >= %d", r->k,
                                      r->k);
        }
        r->batch[j] = (nc_batch_entry){r->cand[j], pos, r->cand_seq[j], true};
    }
    return nc_forward(r->c, r->batch, n, err);
}

/* The choice, after the candidates' entries: "contrastive: chose 432 (score 0.41) of 4". */
static void record(cs_run *r, int32_t n, int32_t best, double score) {
    nc_explain *e = &r->ex;
    nc_explain_stage *st = &e->stage[e->n_stages++];
    *st = (nc_explain_stage){.param = r->alpha, .n_before = n, .n_after = 1, .mass = r->prob[r->cand[best]]};
    snprintf(st->name, sizeof st->name, "contrastive");
    snprintf(st->what, sizeof st->what, "contrastive alpha %g, top-k %d: chose %d (score %.4f) of %d candidates",
             r->alpha, r->k, r->cand[best], score, n);
    e->token = r->cand[best];
    e->p = r->prob[r->cand[best]];
    e->n_candidates = n;
    e->n_top = n < NC_EXPLAIN_TOP ? n : NC_EXPLAIN_TOP;
    for (int32_t i = 0; i < e->n_top; i++) e->top[i] = (nc_token_prob){r->cand[i], r->prob[r->cand[i]]};
}

/* The candidate with the best contrastive score (the first of equals); its unit hidden state
 * goes to the end of the context's. */
static int32_t choose(cs_run *r, int32_t n) {
    float *h = r->ctx_h + (size_t)r->n_h * r->E; /* scratch until chosen */
    int32_t best = 0;
    double best_score = -INFINITY;
    r->ex.n_stages = 0;
    for (int32_t j = 0; j < n; j++) {
        unit(h, nc_hidden(r->c, j), r->E);
        double p = r->prob[r->cand[j]], cos = max_cosine(r, h), score = (1 - r->alpha) * p - r->alpha * cos;
        if (score > best_score || j == 0) {
            best = j;
            best_score = score;
        }
        if (!r->explain || r->ex.n_stages == NC_EXPLAIN_STAGES - 1) continue;
        nc_explain_stage *st = &r->ex.stage[r->ex.n_stages++];
        *st = (nc_explain_stage){.param = cos, .n_before = r->V, .n_after = n, .mass = p};
        snprintf(st->name, sizeof st->name, "contrastive");
        snprintf(st->what, sizeof st->what, "contrastive alpha %g: candidate %d p %.4f, max cosine %.4f, score %.4f",
                 r->alpha, r->cand[j], p, cos, score);
    }
    unit(h, nc_hidden(r->c, best), r->E);
    r->n_h++;
    if (r->explain) record(r, n, best, best_score);
    return best;
}

static int search(cs_run *r, nc_gen_callback cb, void *user, nc_gen_sample *out, nc_err *err) {
    for (int32_t step = 0;; step++) {
        int32_t n = candidates(r);
        if (n == 0) return nc_fail(err, "contrastive search: every token is banned at step %d", step);
        if (feed(r, n, r->n_prompt + step, err) || seq_reserve(&r->s, 1, err)) return -1;
        int32_t j = choose(r, n);
        r->s.kv = r->cand_seq[j];
        memcpy(r->logits, nc_logits(r->c, j), (size_t)r->V * sizeof *r->logits);
        seq_token t;
        seq_accept(&r->s, r->cand[j], &t);
        nc_gen_event ev = {.step = step, .token = t.token, .text = t.text, .n_text = t.n_text, .finish = t.finish,
                           .explain = r->explain ? &r->ex : NULL};
        out->tokens[out->n_tokens++] = ev.token;
        if (ev.finish == NC_FINISH_NONE && out->n_tokens == r->room) ev.finish = NC_FINISH_CONTEXT;
        out->finish = ev.finish;
        if (cb && cb(&ev, user)) return nc_fail(err, "generation aborted by the callback");
        if (ev.finish != NC_FINISH_NONE) return 0;
    }
}

static int check_params(const nc_contrastive_params *cp, int32_t n_prompt, int32_t n_ctx, nc_err *err) {
    if (!(cp->penalty_alpha >= 0 && cp->penalty_alpha <= 1))
        return nc_fail(err, "penalty_alpha: %g is outside the allowed range [0, 1]", cp->penalty_alpha);
    if (cp->top_k < 1 || cp->top_k > 1024) return nc_fail(err, "top_k: %d is outside the allowed range 1..1024", cp->top_k);
    if (n_prompt < 1) return nc_fail(err, "the prompt is empty");
    if (n_prompt >= n_ctx)
        return nc_fail(err, "the prompt has %d tokens, which leaves no room in the context of %d", n_prompt, n_ctx);
    return 0;
}

int nc_contrastive_search(nc_context *c, const nc_model *m, const int32_t *prompt, int32_t n_prompt,
                          const nc_contrastive_params *cp, const nc_sampler_params *processing,
                          const nc_stop_params *stop, nc_gen_callback cb, void *user, nc_gen_result *out, nc_err *err) {
    memset(out, 0, sizeof *out);
    int32_t n_ctx = nc_context_n_ctx(c);
    if (check_params(cp, n_prompt, n_ctx, err)) return -1;
    /* Its candidates are the top_k of the processed distribution, whatever their probability: a
       grammar would have to limit them too; not done. */
    if (processing && processing->grammar && *processing->grammar)
        return nc_fail(err, "grammar: not supported with contrastive search");
    if (stop->max_tokens < 0) return nc_fail(err, "max_tokens: %d is negative", stop->max_tokens);
    nc_model_info info;
    nc_model_get_info(m, &info);
    int32_t room = n_ctx - n_prompt; /* every chosen token is fed, so it needs a cell */
    cs_run r = {.c = c, .k = cp->top_k, .E = info.n_embd, .V = info.n_vocab, .n_prompt = n_prompt,
                .room = room, .alpha = cp->penalty_alpha, .explain = processing && processing->explain};
    nc_sampler_params pp;
    if (processing) pp = *processing;
    else nc_sampler_params_default(&pp);
    pp.explain = false;
    pp.n_logprobs = 0;
    int32_t cap = n_prompt + room;
    r.ctx_h = malloc(((size_t)cap + 1) * (size_t)r.E * sizeof *r.ctx_h);
    r.logits = malloc((size_t)r.V * sizeof *r.logits);
    r.prob = malloc((size_t)r.V * sizeof *r.prob);
    r.cand = malloc((size_t)r.k * sizeof *r.cand);
    r.cand_seq = malloc((size_t)r.k * sizeof *r.cand_seq);
    r.batch = malloc((size_t)(n_prompt > r.k ? n_prompt : r.k) * sizeof *r.batch);
    out->samples = calloc(1, sizeof *out->samples);
    out->n_samples = out->samples ? 1 : 0;
    int rc = -1;
    double t0 = sampling_now(), t1 = t0;
    seq_config sc = {.m = m, .n_vocab = r.V, .sampling = &pp, .stop = stop};
    if (!r.ctx_h || !r.logits || !r.prob || !r.cand || !r.cand_seq || !r.batch || !out->samples ||
        !(out->samples->tokens = malloc((size_t)room * sizeof *out->samples->tokens)))
        nc_fail(err, "out of memory");
    else if (!seq_init(&r.s, &sc, 0, 0, prompt, n_prompt, err) && !prefill(&r, prompt, err)) {
        t1 = sampling_now();
        rc = search(&r, cb, user, out->samples, err);
    }
    out->t_prompt = t1 - t0;
    out->t_gen = sampling_now() - t1;
    seq_free(&r.s);
    free(r.ctx_h);
    free(r.logits);
    free(r.prob);
    free(r.cand);
    free(r.cand_seq);
    free(r.batch);
    if (rc) nc_gen_result_free(out);
    return rc;
}
