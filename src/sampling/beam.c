/* Beam search (as Hugging Face's BeamSearchScorer runs it): every step, each live beam proposes
 * its 2B most likely continuations; over all of them, best total log-probability first, a
 * continuation that ends the sequence (end-of-generation, stop token, stop string) becomes a
 * finished hypothesis if it ranks among the first B, the others fill the B beams of the next
 * step. Finished hypotheses score sum / length^alpha; the B best are kept.
 *
 * Cache: beam i lives in one sequence of the KV cache. When a beam's continuations are chosen,
 * the first keeps the beam's sequence and each further one gets a sequence freed by a beam that
 * had no continuation, filled by nc_kv_seq_copy (copy on divergence). All beams' new tokens go
 * through the model in one nc_forward call.
 *
 * Diverse beam search runs the same per group (B / G beams, 2B / G continuations per beam, B / G
 * finished hypotheses): the live beams of all groups sit in one array, group by group, and each
 * group starts from its own copy of the prompt's sequence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "sampling/sampler.h"
#include "sampling/seq.h"

typedef struct beam {
    seq s;          /* its tokens (the prompt, then generated ones) and its cache sequence */
    int32_t row, parent, group;
    double sum;     /* log-probability of the generated tokens */
} beam;

typedef struct expansion {
    int32_t beam, token;
    double total;
} expansion;

typedef struct beam_run {
    nc_context *c;
    const nc_model *m;
    const nc_stop_params *stop;
    int32_t B, n_prompt, n_vocab, max_tokens;
    bool ctx_bound;      /* max_tokens is the room left in the context, not the caller's limit */
    double alpha;
    nc_early_stopping early_stopping;
    int32_t G, g;        /* groups, and beams per group (g = B / G) */
    double diversity;
    int (*cancelled)(void *user);
    void *cancelled_user;
    bool *done;          /* per group: its search has stopped */
    nc_sampler *proc;
    beam *cur, *nxt;
    int32_t n_cur, n_nxt;
    expansion *exp;
    int32_t *best;       /* 2B */
    float *lp;           /* log-probabilities of one beam's next token */
    nc_batch_entry *batch;
    bool *taken, *seq_busy;
    nc_beam_hyp *hyps;   /* group k's at hyps[k * g], best first, at most g */
    int32_t *n_hyps;     /* per group */
} beam_run;

void nc_beam_result_free(nc_beam_result *r) {
    if (!r) return;
    for (int32_t i = 0; r->hyps && i < r->n; i++) {
        free(r->hyps[i].tokens);
        free(r->hyps[i].text);
    }
    free(r->hyps);
    memset(r, 0, sizeof *r);
}

/* The text of tokens, NUL-terminated (malloc'd; NULL when out of memory). */
static char *render(const nc_model *m, const int32_t *toks, int32_t n) {
    nc_detok *dt = nc_detok_new(m);
    int32_t cap = 256, len = 0;
    char *s = malloc((size_t)cap);
    for (int32_t i = 0; dt && s && i <= n; i++) {
        int room = cap - len - 1, k;
        k = i < n ? nc_detok_push(dt, toks[i], s + len, room) : nc_detok_flush(dt, s + len, room);
        if (k > room) {
            cap = 2 * (len + k + 1);
            char *grown = realloc(s, (size_t)cap);
            if (!grown) break;
            s = grown;
            i--; /* nothing was consumed: again with room */
            continue;
        }
        if (k > 0) len += k;
    }
    nc_detok_free(dt);
    if (s) s[len] = 0;
    return s;
}

/* ---- finished hypotheses ---- */

static void hyp_free(nc_beam_hyp *h) {
    free(h->tokens);
    free(h->text);
}

/* Keep the hypothesis if it is among the g best of group k: gen holds its n_gen generated tokens,
 * the first n_text of which make its text, cut at byte `cut` when cut >= 0 (a stop string). */
static int add_hyp(beam_run *r, int32_t k, const int32_t *gen, int32_t n_gen, int32_t n_text, int32_t cut,
                   double sum, nc_finish finish, nc_err *err) {
    double score = sum / pow((double)n_gen, r->alpha);
    nc_beam_hyp *hyps = r->hyps + (size_t)k * r->g;
    int32_t *n_hyps = &r->n_hyps[k];
    if (*n_hyps == r->g && !(score > hyps[r->g - 1].score)) return 0;
    nc_beam_hyp h = {.tokens = malloc((size_t)n_gen * sizeof *h.tokens), .n_tokens = n_gen,
                     .text = render(r->m, gen, n_text), .sum_logprob = sum, .score = score, .finish = finish};
    if (!h.tokens || !h.text) {
        hyp_free(&h);
        return nc_fail(err, "out of memory");
    }
    memcpy(h.tokens, gen, (size_t)n_gen * sizeof *gen);
    if (cut >= 0) h.text[cut] = 0;
    if (*n_hyps == r->g) hyp_free(&hyps[--*n_hyps]);
    int32_t at = *n_hyps;
    while (at > 0 && hyps[at - 1].score < score) {
        hyps[at] = hyps[at - 1];
        at--;
    }
    hyps[at] = h;
    ++*n_hyps;
    return 0;
}

/* Hugging Face's is_done for group k, whose best live beam is `best` (gen_len tokens): g
 * hypotheses are finished, and early stopping is on, or the best live beam cannot beat the worst
 * of them — scored at its current length (the heuristic), or, under "never" with a positive
 * length penalty, at the longest it may grow (max_tokens), where a negative sum scores highest. */
static bool group_done(const beam_run *r, int32_t k, const beam *best, int32_t gen_len) {
    if (r->n_hyps[k] < r->g) return false;
    if (r->early_stopping == NC_EARLY_STOP_FIRST) return true;
    int32_t len = r->early_stopping == NC_EARLY_STOP_NEVER && r->alpha > 0 ? r->max_tokens : gen_len;
    double best_live = best->sum / pow((double)len, r->alpha);
    return r->hyps[(size_t)k * r->g + r->n_hyps[k] - 1].score >= best_live;
}

/* ---- one step ---- */

/* log-softmax of the processed logits of one beam into r->lp. */
static void beam_logprobs(beam_run *r, const beam *b, const float *row) {
    const cand_list *c = sampler_process(r->proc, row, b->s.tokens, b->s.n_tokens, r->n_prompt);
    double mx = -INFINITY, z = 0;
    for (int32_t i = 0; i < c->n; i++) mx = c->data[i].logit > mx ? c->data[i].logit : mx;
    for (int32_t i = 0; i < c->n; i++) z += exp((double)c->data[i].logit - mx);
    double lse = mx == -INFINITY ? 0 : mx + log(z); /* all banned: every lp is -inf, no continuation */
    for (int32_t i = 0; i < c->n; i++) r->lp[i] = (float)((double)c->data[i].logit - lse);
}

static int by_total(const void *pa, const void *pb) {
    const expansion *a = pa, *b = pb;
    if (a->total != b->total) return a->total > b->total ? -1 : 1;
    if (a->beam != b->beam) return (a->beam > b->beam) - (a->beam < b->beam);
    return (a->token > b->token) - (a->token < b->token);
}

/* The continuations of group k's live beams, best first. Each token chosen by a beam of an
 * earlier group at this step (the next beams already selected) costs diversity_penalty. */
static int32_t expand(beam_run *r, int32_t group) {
    int32_t n_exp = 0;
    for (int32_t b = 0; b < r->n_cur; b++) {
        const beam *bm = &r->cur[b];
        if (bm->group != group) continue;
        beam_logprobs(r, bm, nc_logits(r->c, bm->row));
        for (int32_t j = 0; j < r->n_nxt; j++) r->lp[seq_last(&r->nxt[j].s)] -= (float)r->diversity;
        int32_t k = top_indices(r->lp, r->n_vocab, 2 * r->g, r->best);
        for (int32_t j = 0; j < k; j++) r->exp[n_exp++] = (expansion){b, r->best[j], bm->sum + r->lp[r->best[j]]};
    }
    qsort(r->exp, (size_t)n_exp, sizeof *r->exp, by_total);
    return n_exp;
}

enum { GOES_ON = -2, END_TOKEN = -1 }; /* or >= 0: the byte offset of a stop string */

/* Whether a continuation ends its sequence, into *end. Returns -1 when out of memory. */
static int ending(beam_run *r, beam *parent, int32_t token, int32_t *end, nc_err *err) {
    *end = GOES_ON;
    if (stop_is_end_token(r->m, r->stop, token)) {
        *end = END_TOKEN;
        return 0;
    }
    if (r->stop->n_stop == 0) return 0;
    seq *ps = &parent->s;
    ps->tokens[ps->n_tokens] = token; /* room is reserved for it */
    char *text = render(r->m, ps->tokens + r->n_prompt, seq_n_generated(ps) + 1);
    if (!text) return nc_fail(err, "out of memory");
    int32_t at = stop_find(r->stop->stop, r->stop->n_stop, text, (int32_t)strlen(text));
    free(text);
    if (at >= 0) *end = at;
    return 0;
}

/* Group k's next beams, appended to r->nxt; its finished hypotheses. */
static int select_next(beam_run *r, int32_t group, int32_t n_exp, nc_err *err) {
    int32_t n_live = 0;
    for (int32_t rank = 0; rank < n_exp && n_live < r->g; rank++) {
        const expansion *e = &r->exp[rank];
        beam *parent = &r->cur[e->beam];
        int32_t end, n_gen = seq_n_generated(&parent->s) + 1;
        if (ending(r, parent, e->token, &end, err)) return -1;
        if (end != GOES_ON) {
            parent->s.tokens[parent->s.n_tokens] = e->token;
            if (rank < r->g && add_hyp(r, group, parent->s.tokens + r->n_prompt, n_gen,
                                       end == END_TOKEN ? n_gen - 1 : n_gen, end >= 0 ? end : -1, e->total,
                                       NC_FINISH_STOP, err))
                return -1;
            continue;
        }
        beam *child = &r->nxt[r->n_nxt++];
        n_live++;
        seq_set_tokens(&child->s, parent->s.tokens, parent->s.n_tokens);
        child->s.tokens[child->s.n_tokens++] = e->token;
        child->sum = e->total;
        child->parent = e->beam;
        child->group = group;
    }
    return 0;
}

/* Give every new beam a cache sequence: a parent's first continuation keeps its sequence, the
 * others copy it into a sequence no new beam uses. */
static int assign_sequences(beam_run *r, nc_err *err) {
    memset(r->taken, 0, (size_t)r->B * sizeof *r->taken);
    memset(r->seq_busy, 0, (size_t)r->B * sizeof *r->seq_busy);
    for (int32_t j = 0; j < r->n_nxt; j++) {
        beam *b = &r->nxt[j];
        b->s.kv = -1;
        if (r->taken[b->parent]) continue;
        r->taken[b->parent] = true;
        b->s.kv = r->cur[b->parent].s.kv;
        r->seq_busy[b->s.kv] = true;
    }
    int32_t free_seq = 0;
    for (int32_t j = 0; j < r->n_nxt; j++) {
        beam *b = &r->nxt[j];
        if (b->s.kv >= 0) continue;
        while (r->seq_busy[free_seq]) free_seq++;
        b->s.kv = free_seq;
        r->seq_busy[free_seq] = true;
        if (nc_kv_seq_copy(r->c, r->cur[b->parent].s.kv, b->s.kv, err))
            return nc_fail_prefix(err, "beam search with %d beams needs a context with n_seq_max >= %d", r->B, r->B);
    }
    return 0;
}

static int forward_beams(beam_run *r, nc_err *err) {
    int32_t n = 0;
    for (int32_t j = 0; j < r->n_nxt; j++) r->nxt[j].row = seq_batch(&r->nxt[j].s, r->c, r->batch, &n);
    return nc_forward(r->c, r->batch, n, err);
}

static int finish_live(beam_run *r, nc_err *err) {
    for (int32_t j = 0; j < r->n_nxt; j++) {
        beam *b = &r->nxt[j];
        int32_t n_gen = seq_n_generated(&b->s);
        nc_finish why = r->ctx_bound ? NC_FINISH_CONTEXT : NC_FINISH_LENGTH;
        if (add_hyp(r, b->group, b->s.tokens + r->n_prompt, n_gen, n_gen, -1, b->sum, why, err)) return -1;
    }
    return 0;
}

/* Mark the groups that stop after this step (gen_len tokens) and drop their beams; a group
 * without live beams has stopped too. Returns how many beams go on. */
static int32_t stop_groups(beam_run *r, int32_t gen_len) {
    int32_t first = 0, n = 0;
    for (int32_t k = 0; k < r->G; k++) {
        if (r->done[k]) continue;
        int32_t end = first;
        while (end < r->n_nxt && r->nxt[end].group == k) end++;
        r->done[k] = end == first || group_done(r, k, &r->nxt[first], gen_len);
        for (int32_t j = first; j < end && !r->done[k]; j++) {
            beam t = r->nxt[n];
            r->nxt[n++] = r->nxt[j];
            r->nxt[j] = t;  /* the token buffers stay owned, swapped */
        }
        first = end;
    }
    return r->n_nxt = n;
}

static int search(beam_run *r, nc_err *err) {
    for (int32_t step = 0;; step++) {
        if (r->cancelled && r->cancelled(r->cancelled_user)) return nc_fail(err, "beam search cancelled");
        r->n_nxt = 0;
        for (int32_t k = 0; k < r->G; k++) {
            if (r->done[k]) continue;
            int32_t n_exp = expand(r, k);
            if (select_next(r, k, n_exp, err)) return -1;
        }
        if (r->n_nxt == 0) return 0;
        if (step + 1 == r->max_tokens) return finish_live(r, err);
        if (stop_groups(r, step + 1) == 0) return 0;
        if (assign_sequences(r, err) || forward_beams(r, err)) return -1;
        beam *t = r->cur;
        r->cur = r->nxt;
        r->nxt = t;
        r->n_cur = r->n_nxt;
    }
}

/* ---- setup ---- */

static int run_alloc(beam_run *r, const int32_t *prompt, nc_err *err) {
    int32_t B = r->B, hist_cap = r->n_prompt + r->max_tokens;
    r->cur = calloc((size_t)B, sizeof *r->cur);
    r->nxt = calloc((size_t)B, sizeof *r->nxt);
    r->exp = malloc((size_t)B * 2 * (size_t)B * sizeof *r->exp);
    r->best = malloc(2 * (size_t)B * sizeof *r->best);
    r->lp = malloc((size_t)r->n_vocab * sizeof *r->lp);
    r->batch = malloc((size_t)(r->n_prompt > B ? r->n_prompt : B) * sizeof *r->batch);
    r->taken = calloc((size_t)B, sizeof *r->taken);
    r->seq_busy = calloc((size_t)B, sizeof *r->seq_busy);
    r->hyps = calloc((size_t)B, sizeof *r->hyps);
    r->n_hyps = calloc((size_t)r->G, sizeof *r->n_hyps);
    r->done = calloc((size_t)r->G, sizeof *r->done);
    if (!r->cur || !r->nxt || !r->exp || !r->best || !r->lp || !r->batch || !r->taken || !r->seq_busy || !r->hyps ||
        !r->n_hyps || !r->done)
        return nc_fail(err, "out of memory");
    for (int32_t i = 0; i < B; i++) {
        if (seq_init_bare(&r->cur[i].s, i, hist_cap, err) || seq_init_bare(&r->nxt[i].s, i, hist_cap, err)) return -1;
        r->cur[i].s.n_prompt = r->nxt[i].s.n_prompt = r->n_prompt;
    }
    for (int32_t k = 0; k < r->G; k++) { /* one live beam per group: the prompt */
        seq_set_tokens(&r->cur[k].s, prompt, r->n_prompt);
        r->cur[k].group = k;
    }
    r->n_cur = r->G;
    return 0;
}

static void run_free(beam_run *r) {
    for (int32_t i = 0; i < r->B; i++) {
        if (r->cur) seq_free(&r->cur[i].s);
        if (r->nxt) seq_free(&r->nxt[i].s);
    }
    for (int32_t k = 0; r->hyps && r->n_hyps && k < r->G; k++)
        for (int32_t i = 0; i < r->n_hyps[k]; i++) hyp_free(&r->hyps[(size_t)k * r->g + i]);
    free(r->cur);
    free(r->nxt);
    free(r->exp);
    free(r->best);
    free(r->lp);
    free(r->batch);
    free(r->taken);
    free(r->seq_busy);
    free(r->hyps);
    free(r->n_hyps);
    free(r->done);
    nc_sampler_free(r->proc);
}

static int prefill(beam_run *r, const int32_t *prompt, int32_t *n_cached, nc_err *err) {
    if (!sampling_prefill(r->c, prompt, r->n_prompt, r->batch, n_cached, err)) return -1;
    for (int32_t k = 0; k < r->G; k++) {
        r->cur[k].row = r->n_prompt - 1 - *n_cached; /* the first expansion reads the prompt's last row */
        r->cur[k].s.kv = k;
        if (k > 0 && nc_kv_seq_copy(r->c, 0, k, err))
            return nc_fail_prefix(err, "beam search with %d beams needs a context with n_seq_max >= %d", r->B, r->B);
    }
    return 0;
}

/* Hand the n_best best hypotheses of all groups to the caller (on equal scores, the earlier
 * group's first); the others stay for run_free. */
static int take_best(beam_run *r, int32_t n_best, nc_beam_result *out, nc_err *err) {
    out->hyps = calloc((size_t)n_best, sizeof *out->hyps);
    if (!out->hyps) return nc_fail(err, "out of memory");
    int32_t *head = calloc((size_t)r->G, sizeof *head); /* per group: hypotheses taken */
    if (!head) return nc_fail(err, "out of memory");
    while (out->n < n_best) {
        int32_t from = -1;
        for (int32_t k = 0; k < r->G; k++)
            if (head[k] < r->n_hyps[k] &&
                (from < 0 || r->hyps[(size_t)k * r->g + head[k]].score > r->hyps[(size_t)from * r->g + head[from]].score))
                from = k;
        if (from < 0) break;
        out->hyps[out->n++] = r->hyps[(size_t)from * r->g + head[from]++];
    }
    for (int32_t k = 0; k < r->G; k++) { /* what was taken leaves the groups' lists */
        nc_beam_hyp *h = r->hyps + (size_t)k * r->g;
        memmove(h, h + head[k], (size_t)(r->n_hyps[k] - head[k]) * sizeof *h);
        r->n_hyps[k] -= head[k];
    }
    free(head);
    return 0;
}

static int check_beam_params(const nc_beam_params *bp, int32_t n_prompt, nc_err *err) {
    if (bp->n_beams < 1 || bp->n_beams > 1024)
        return nc_fail(err, "n_beams: %d is outside the allowed range 1..1024", bp->n_beams);
    if (bp->n_best < 0 || bp->n_best > bp->n_beams)
        return nc_fail(err, "n_best: %d is outside the allowed range 1..%d (n_beams)", bp->n_best, bp->n_beams);
    if (!isfinite(bp->length_penalty)) return nc_fail(err, "length_penalty must be finite");
    if (bp->early_stopping < NC_EARLY_STOP_HEURISTIC || bp->early_stopping > NC_EARLY_STOP_NEVER)
        return nc_fail(err, "early_stopping: %d is not one of 0 (heuristic), 1 (true), 2 (never)", (int)bp->early_stopping);
    int32_t groups = bp->n_groups ? bp->n_groups : 1;
    if (groups < 1 || groups > bp->n_beams || bp->n_beams % groups)
        return nc_fail(err, "n_groups: %d does not divide n_beams (%d) into groups", bp->n_groups, bp->n_beams);
    if (!isfinite(bp->diversity_penalty) || bp->diversity_penalty < 0)
        return nc_fail(err, "diversity_penalty: %g must be finite and >= 0", bp->diversity_penalty);
    if (n_prompt < 1) return nc_fail(err, "the prompt is empty");
    return 0;
}

int nc_beam_search(nc_context *c, const nc_model *m, const int32_t *prompt, int32_t n_prompt,
                   const nc_beam_params *bp, const nc_sampler_params *processing, const nc_stop_params *stop,
                   nc_beam_result *out, nc_err *err) {
    memset(out, 0, sizeof *out);
    if (check_beam_params(bp, n_prompt, err)) return -1;
    /* A beam's processed distribution would need a matcher per beam, forked with it: not done. */
    if (processing && processing->grammar && *processing->grammar)
        return nc_fail(err, "grammar: not supported with beam search");
    if (stop->max_tokens < 0) return nc_fail(err, "max_tokens: %d is negative", stop->max_tokens);
    int32_t n_ctx = nc_context_n_ctx(c);
    if (n_prompt > n_ctx) return nc_fail(err, "the prompt has %d tokens, more than the context of %d", n_prompt, n_ctx);
    nc_model_info info;
    nc_model_get_info(m, &info);
    int32_t room = n_ctx - n_prompt + 1;
    beam_run r = {.c = c, .m = m, .stop = stop, .B = bp->n_beams, .n_prompt = n_prompt, .n_vocab = info.n_vocab,
                  .max_tokens = stop->max_tokens > 0 && stop->max_tokens < room ? stop->max_tokens : room,
                  .ctx_bound = stop->max_tokens == 0 || stop->max_tokens > room,
                  .alpha = bp->length_penalty, .early_stopping = bp->early_stopping,
                  .G = bp->n_groups ? bp->n_groups : 1, .diversity = bp->diversity_penalty,
                  .cancelled = bp->cancelled, .cancelled_user = bp->cancelled_user};
    r.g = r.B / r.G;
    nc_sampler_params pp;
    if (processing) pp = *processing;
    else nc_sampler_params_default(&pp);
    pp.explain = false;
    pp.n_logprobs = 0;
    double t0 = sampling_now(), t1 = t0;
    int rc = -1;
    if (!nc_sampler_new(&r.proc, m, info.n_vocab, &pp, err) && !run_alloc(&r, prompt, err) &&
        !prefill(&r, prompt, &out->n_cached, err)) {
        t1 = sampling_now();
        rc = search(&r, err) || take_best(&r, bp->n_best ? bp->n_best : 1, out, err) ? -1 : 0;
    }
    out->t_prompt = t1 - t0;
    out->t_gen = sampling_now() - t1;
    run_free(&r);
    if (rc) nc_beam_result_free(out);
    return rc;
}
