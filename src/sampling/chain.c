/* The sampler: a chain of stages built from the parameters, run over one row of logits, then
 * the draw. Every stage can write what it did into the explain record. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "sampling/sampler.h"

/* The grammar stage is not in any order: when there is a grammar it runs first, so that every
 * later stage (penalties, truncation, the draw) sees only tokens the grammar allows. */
static const stage_kind DEFAULT_ORDER[] = {ST_PENALTIES, ST_DRY, ST_NGRAM, ST_BIAS, ST_TEMP, ST_TOP_N_SIGMA, ST_TOP_K,
                                           ST_TYPICAL, ST_TOP_P, ST_MIN_P, ST_EPSILON, ST_ETA, ST_XTC};
#define N_DEFAULT_ORDER ((int32_t)(sizeof DEFAULT_ORDER / sizeof DEFAULT_ORDER[0]))

/* ---- building the chain ---- */

/* "top-k", "Top_K" and "top_k" are the same name. */
static bool name_is(const char *s, size_t len, const char *name) {
    if (!name || strlen(name) != len) return false;
    for (size_t i = 0; i < len; i++) {
        char a = s[i] == '-' ? '_' : s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] - 'A' + 'a') : s[i];
        if (a != name[i]) return false;
    }
    return true;
}

static int lookup_stage(const char *s, size_t len, nc_err *err) {
    if (name_is(s, len, STAGES[ST_GRAMMAR].name))
        return nc_fail(err, "sampler stage 'grammar' cannot be ordered: it always runs first when a grammar is given");
    for (int k = 0; k < ST_COUNT; k++)
        if (k != ST_GRAMMAR && (name_is(s, len, STAGES[k].name) || name_is(s, len, STAGES[k].alias))) return k;
    char known[256] = "";
    for (int k = 0; k < ST_COUNT; k++)
        if (k != ST_GRAMMAR)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", k ? ", " : "", STAGES[k].name);
    return nc_fail(err, "unknown sampler stage '%.*s' (known: %s)", (int)len, s, known);
}

/* Parse "top_k;top_p,temperature" into kinds, each at most once. */
static int parse_order(const char *spec, stage_kind *order, int32_t *n, nc_err *err) {
    bool seen[ST_COUNT] = {false};
    *n = 0;
    const char *p = spec;
    while (*p) {
        while (*p == ' ' || *p == ';' || *p == ',') p++;
        if (!*p) break;
        size_t len = strcspn(p, ";, ");
        int k = lookup_stage(p, len, err);
        if (k < 0) return -1;
        if (seen[k]) return nc_fail(err, "sampler stage '%s' is listed twice", STAGES[k].name);
        seen[k] = true;
        order[(*n)++] = (stage_kind)k;
        p += len;
    }
    return 0;
}

static bool in_chain(const nc_sampler *s, stage_kind k) {
    for (int32_t i = 0; i < s->n_chain; i++)
        if (s->chain[i] == k) return true;
    return false;
}

/* The active stages in the given order. Logit bias (with the end-of-generation bans) always
 * runs, first when the order does not name it, as in llama.cpp; under Mirostat the truncation
 * stages are left out. */
static void build_chain(nc_sampler *s, const stage_kind *order, int32_t n_order) {
    s->n_chain = 0;
    if (STAGES[ST_GRAMMAR].active(&s->p)) s->chain[s->n_chain++] = ST_GRAMMAR;
    bool named_bias = false;
    for (int32_t i = 0; i < n_order; i++) named_bias |= order[i] == ST_BIAS;
    if (!named_bias && STAGES[ST_BIAS].active(&s->p)) s->chain[s->n_chain++] = ST_BIAS;
    for (int32_t i = 0; i < n_order; i++) {
        const stage_def *d = &STAGES[order[i]];
        if (!d->active(&s->p) || (s->p.mirostat && d->role == ROLE_TRUNCATION)) continue;
        s->chain[s->n_chain++] = order[i];
    }
}

static void describe_chain(nc_sampler *s) {
    char *d = s->describe;
    size_t cap = sizeof s->describe, len = 0;
    for (int32_t i = 0; i < s->n_chain; i++) {
        const stage_def *st = &STAGES[s->chain[i]];
        double v = st->param(&s->p);
        if (isnan(v)) len += (size_t)snprintf(d + len, cap - len, "%s -> ", st->label);
        else len += (size_t)snprintf(d + len, cap - len, "%s %g -> ", st->label, v);
    }
    if (s->p.mirostat) snprintf(d + len, cap - len, "mirostat %d (tau %g, eta %g)", s->p.mirostat, s->p.mirostat_tau,
                                s->p.mirostat_eta);
    else snprintf(d + len, cap - len, "dist");
}

static int collect_eog(nc_sampler *s, const nc_model *m, nc_err *err) {
    if (!in_chain(s, ST_BIAS) || !(s->p.min_tokens > 0 || s->p.ignore_eos)) return 0;
    if (!m) return nc_fail(err, "min_tokens and ignore_eos need the model's end-of-generation tokens");
    s->eog = malloc((size_t)s->n_vocab * sizeof *s->eog);
    if (!s->eog) return nc_fail(err, "out of memory");
    for (int32_t id = 0; id < s->n_vocab; id++)
        if (nc_token_is_eog(m, id)) s->eog[s->n_eog++] = id;
    return 0;
}

/* A token breaks DRY repeats when its text contains one of the breaker strings. (llama.cpp also
 * matches a breaker spread over several tokens; with single-character breakers, the default,
 * the two agree.) */
static int collect_breakers(nc_sampler *s, const nc_model *m, const nc_sampler_params *p, nc_err *err) {
    if (!in_chain(s, ST_DRY) || p->n_dry_breakers == 0) return 0;
    if (!m) return nc_fail(err, "dry_breakers need the model's token texts (or pass n_dry_breakers = 0)");
    s->breaker = calloc((size_t)s->n_vocab, 1);
    nc_detok *dt = nc_detok_new(m);
    if (!s->breaker || !dt) {
        nc_detok_free(dt);
        return nc_fail(err, "out of memory");
    }
    char text[256];
    for (int32_t id = 0; id < s->n_vocab; id++) {
        int n = nc_detok_push(dt, id, text, (int)sizeof text - 8);
        if (n < 0 || n > (int)sizeof text - 8) n = 0; /* longer pieces are not breakers' business */
        n += nc_detok_flush(dt, text + n, 8);
        text[n] = 0;
        for (int32_t b = 0; b < p->n_dry_breakers && !s->breaker[id]; b++)
            s->breaker[id] = strstr(text, p->dry_breakers[b]) != NULL;
    }
    nc_detok_free(dt);
    return 0;
}

/* The grammar, its matcher, and the model's token trie (built once per model, shared). */
static int compile_grammar(nc_sampler *s, const nc_model *m, const nc_sampler_params *p, nc_err *err) {
    if (!p->grammar || !*p->grammar) return 0;
    if (!m) return nc_fail(err, "a grammar needs the model's token texts");
    if (gr_parse(&s->grammar, p->grammar, strlen(p->grammar), err)) return -1;
    if (!(s->gvocab = nc_model_grammar_vocab(m, err))) return -1;
    if (gr_matcher_new(&s->matcher, s->grammar, err)) return -1;
    s->allowed = malloc((size_t)s->n_vocab);
    if (!s->allowed) return nc_fail(err, "out of memory");
    for (int32_t id = 0; id < s->n_vocab && id < gr_vocab_n_tokens(s->gvocab); id++) s->n_grammar_eog += gr_vocab_is_eog(s->gvocab, id);
    return 0;
}

static int copy_bias(nc_sampler *s, const nc_sampler_params *p, nc_err *err) {
    if (p->n_logit_bias == 0) return 0;
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= s->n_vocab)
            return nc_fail(err, "logit_bias: token %d is outside the vocabulary (0..%d)", p->logit_bias[i].token,
                           s->n_vocab - 1);
    s->bias = malloc((size_t)p->n_logit_bias * sizeof *s->bias);
    if (!s->bias) return nc_fail(err, "out of memory");
    memcpy(s->bias, p->logit_bias, (size_t)p->n_logit_bias * sizeof *s->bias);
    return 0;
}

/* A greedy chain (temperature 0, nothing but the logit bias before it, no explain record) keeps
 * one token, the highest logit after the bias and bans, ties to the lower id: the highest among
 * the tokens the bias leaves alone, or one it touches. greedy_candidates lists just those, so
 * that the step need not build the vocabulary's candidate list (cands_init) and scan it: 3.4 us
 * of TinyStories-656K's 21.7 us step, and the same for every row a speculative pass verifies. */
static int mark_touched(nc_sampler *s, nc_err *err) {
    int32_t k = 0;
    while (k < s->n_chain && s->chain[k] == ST_BIAS) k++;
    if (!(s->p.temp <= 0) || s->p.dynatemp_range > 0 || s->p.explain || k == s->n_chain || s->chain[k] != ST_TEMP)
        return 0;
    s->touched = calloc((size_t)s->n_vocab, 1);
    s->touched_ids = malloc(((size_t)s->p.n_logit_bias + (size_t)s->n_eog + 1) * sizeof *s->touched_ids);
    if (!s->touched || !s->touched_ids) return nc_fail(err, "out of memory");
    for (int32_t i = 0; i < s->p.n_logit_bias + s->n_eog; i++) {
        int32_t id = i < s->p.n_logit_bias ? s->bias[i].token : s->eog[i - s->p.n_logit_bias];
        if (id < 0 || id >= s->n_vocab || s->touched[id]) continue;
        s->touched[id] = 1;
        s->touched_ids[s->n_touched++] = id;
    }
    return 0;
}

static void greedy_candidates(nc_sampler *s, const float *logits) {
    int32_t best = -1, n = 0;
    float top = -INFINITY;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (!s->touched[i] && (best < 0 || logits[i] > top)) { /* a NaN is never above: -inf, as cands_init */
            best = i;
            top = isnan(logits[i]) ? -INFINITY : logits[i];
        }
    if (best >= 0) s->buf[n++] = (cand){best, top, 0};
    for (int32_t i = 0; i < s->n_touched; i++) {
        int32_t id = s->touched_ids[i];
        s->buf[n++] = (cand){id, isnan(logits[id]) ? -INFINITY : logits[id], 0};
    }
    s->list = (cand_list){.data = s->buf, .n = n, .sorted = false, .by_id = false, .probs = false};
}

int nc_sampler_new(nc_sampler **out, const nc_model *m, int32_t n_vocab, const nc_sampler_params *p, nc_err *err) {
    *out = NULL;
    if (n_vocab <= 0) return nc_fail(err, "sampler: n_vocab must be positive, got %d", n_vocab);
    if (nc_sampler_params_check(p, err)) return -1;
    stage_kind order[ST_COUNT];
    int32_t n_order = N_DEFAULT_ORDER;
    if (p->samplers) {
        if (parse_order(p->samplers, order, &n_order, err)) return -1;
    } else memcpy(order, DEFAULT_ORDER, sizeof DEFAULT_ORDER);
    nc_sampler *s = calloc(1, sizeof *s);
    if (!s) return nc_fail(err, "out of memory");
    s->p = *p;
    s->p.logit_bias = NULL;
    s->p.dry_breakers = NULL;
    s->p.samplers = NULL;
    s->n_vocab = n_vocab;
    build_chain(s, order, n_order);
    describe_chain(s);
    s->p.grammar = NULL; /* the text is compiled below; the sampler keeps no pointer into it */
    s->buf = malloc((size_t)n_vocab * sizeof *s->buf);
    if (!s->buf) { nc_sampler_free(s); return nc_fail(err, "out of memory"); }
    if (copy_bias(s, p, err) || collect_eog(s, m, err) || collect_breakers(s, m, p, err) ||
        compile_grammar(s, m, p, err) || mark_touched(s, err)) {
        nc_sampler_free(s);
        return -1;
    }
    nc_sampler_reset(s, p->seed);
    *out = s;
    return 0;
}

void nc_sampler_free(nc_sampler *s) {
    if (!s) return;
    gr_matcher_free(s->matcher);
    gr_free(s->grammar);
    free(s->consumed);
    free(s->allowed);
    free(s->bias);
    free(s->eog);
    free(s->breaker);
    free(s->buf);
    free(s->scratch);
    free(s->touched);
    free(s->touched_ids);
    free(s);
}

void nc_sampler_reset(nc_sampler *s, uint64_t seed) {
    nc_rng_seed(&s->rng, seed);
    s->mu = 2.0 * s->p.mirostat_tau;
}

const char *nc_sampler_describe(const nc_sampler *s) { return s->describe; }

const nc_explain *nc_sampler_explain(const nc_sampler *s) { return s->p.explain ? &s->ex : NULL; }

/* ---- running it ---- */

static void run_chain(nc_sampler *s, const float *logits, const step_in *in, bool processors_only, bool record) {
    if (s->touched && !processors_only) greedy_candidates(s, logits);
    else cands_init(&s->list, s->buf, logits, s->n_vocab);
    s->ex.n_stages = 0;
    for (int32_t i = 0; i < s->n_chain; i++) {
        const stage_def *d = &STAGES[s->chain[i]];
        if (processors_only && d->role != ROLE_PROCESSOR) continue;
        nc_explain_stage *r = record ? &s->ex.stage[s->ex.n_stages++] : NULL;
        d->apply(s, in, &s->list, r);
    }
}

const cand_list *sampler_process(nc_sampler *s, const float *logits, const int32_t *history, int32_t n_history,
                                 int32_t n_prompt) {
    step_in in = {history, n_history, n_prompt};
    run_chain(s, logits, &in, true, false);
    return &s->list;
}

/* max(0, p - q) of one candidate. */
static double residual(cand t, const sampler_proposal *prop) {
    double q = prop->q ? prop->q[t.id] : t.id == prop->token;
    return t.p > q ? t.p - q : 0;
}

/* The draw against a draft's proposal (Leviathan et al. 2023, "Fast Inference from Transformers
 * via Speculative Decoding", and Chen et al. 2023): the draft's token x is kept with probability
 * min(1, p(x) / q(x)); otherwise the token is drawn from max(0, p - q), normalised. Whatever q is,
 * the token drawn is distributed as p, the chain's distribution c (normalised). q: the draft's
 * distribution by token id, or NULL when the proposal was certain (prompt lookup), q(x) = 1. */
static int32_t draw_against(const cand_list *c, const sampler_proposal *prop, nc_rng *rng, bool *accepted) {
    int32_t i = cands_find(c, prop->token);
    double px = i >= 0 ? c->data[i].p : 0, qx = prop->q ? prop->q[prop->token] : 1;
    *accepted = px > 0 && nc_rng_uniform(rng) * qx < px;
    if (*accepted) return i;
    double total = 0;
    for (int32_t j = 0; j < c->n; j++) total += residual(c->data[j], prop);
    if (!(total > 0)) return cands_draw(c, rng); /* p = q up to rounding: x was kept with probability ~1 */
    double u = nc_rng_uniform(rng) * total, acc = 0;
    int32_t last = 0;
    for (int32_t j = 0; j < c->n; j++) {
        double r = residual(c->data[j], prop);
        if (r <= 0) continue;
        acc += r;
        last = j;
        if (u < acc) return j;
    }
    return last;
}

/* The last stage: Mirostat's truncation, then the draw from what is left, plain or against a
 * draft's proposal (prop). */
static int32_t draw(nc_sampler *s, const sampler_proposal *prop, bool *accepted, nc_explain_stage *r) {
    cand_list *c = &s->list;
    int32_t before = c->n, k = 0;
    double mu0 = s->mu;
    cands_softmax(c);
    if (s->p.mirostat == 1) k = smp_mirostat_v1_truncate(c, s->n_vocab, s->mu);
    else if (s->p.mirostat == 2) smp_mirostat_v2_truncate(c, s->mu);
    double mass = c->n == before ? 1.0 : cands_mass(c);
    if (s->p.mirostat) cands_softmax(c); /* Mirostat draws from the kept tokens, normalised */
    int32_t idx = prop ? draw_against(c, prop, &s->rng, accepted) : cands_draw(c, &s->rng);
    if (s->p.mirostat) smp_mirostat_update(c->data[idx].p, s->p.mirostat_tau, s->p.mirostat_eta, &s->mu);
    if (!r) return idx;
    const cand *t = &c->data[idx];
    char how[32] = "";
    if (prop) snprintf(how, sizeof how, " (draft %d %s)", prop->token, *accepted ? "accepted" : "rejected");
    if (s->p.mirostat) {
        stage_report(r, "mirostat", s->p.mirostat, before, c, mass);
        int n = snprintf(r->what, sizeof r->what, "mirostat %d: ", s->p.mirostat);
        if (s->p.mirostat == 1) n += snprintf(r->what + n, sizeof r->what - (size_t)n, "k %d, ", k);
        snprintf(r->what + n, sizeof r->what - (size_t)n, "kept %d of %d, mass %.3f, drew %d (p %.3f)%s, mu %.3f -> %.3f",
                 c->n, before, mass, t->id, t->p, how, mu0, s->mu);
    } else {
        stage_report(r, "dist", NAN, before, c, 1.0);
        snprintf(r->what, sizeof r->what, "dist: drew %d (p %.3f) from %d candidates%s", t->id, t->p, c->n, how);
    }
    return idx;
}

static void record_choice(nc_sampler *s, int32_t idx) {
    const cand_list *c = &s->list;
    nc_explain *e = &s->ex;
    e->token = c->data[idx].id;
    e->p = c->data[idx].p;
    e->n_candidates = c->n;
    e->n_top = c->n < NC_EXPLAIN_TOP ? c->n : NC_EXPLAIN_TOP;
    for (int32_t i = 0; i < e->n_top; i++) e->top[i] = (nc_token_prob){c->data[i].id, c->data[i].p};
}

static void raw_logprobs(const nc_sampler *s, const float *logits, nc_sample_info *info) {
    double mx = -INFINITY, z = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int32_t i = 0; i < s->n_vocab; i++) z += exp((double)logits[i] - mx);
    double lse = mx + log(z);
    info->logprob = (float)((double)logits[info->token] - lse);
    int32_t best[NC_LOGPROBS_MAX];
    info->n_top = top_indices(logits, s->n_vocab, s->p.n_logprobs, best);
    for (int32_t i = 0; i < info->n_top; i++) info->top[i] = (nc_token_logprob){best[i], (float)(logits[best[i]] - lse)};
}

static void processed_logprobs(const nc_sampler *s, nc_sample_info *info) {
    const cand_list *c = &s->list;
    info->logprob = logf(info->p);
    info->n_top = 0;
    for (int32_t i = 0; i < c->n && info->n_top < s->p.n_logprobs && c->data[i].p > 0; i++)
        info->top[info->n_top++] = (nc_token_logprob){c->data[i].id, logf(c->data[i].p)};
}

int32_t sampler_draw(nc_sampler *s, const float *logits, const int32_t *history, int32_t n_history, int32_t n_prompt,
                     const sampler_proposal *prop, bool *accepted, nc_sample_info *info) {
    step_in in = {history, n_history, n_prompt};
    bool record = s->p.explain, ok = false;
    run_chain(s, logits, &in, false, record);
    int32_t idx = draw(s, prop, &ok, record ? &s->ex.stage[s->ex.n_stages++] : NULL);
    if (accepted) *accepted = ok;
    if (record) record_choice(s, idx);
    int32_t token = s->list.data[idx].id;
    if (info) {
        info->token = token;
        info->p = s->list.data[idx].p;
        if (s->p.logprobs_mode == NC_LOGPROBS_RAW) raw_logprobs(s, logits, info);
        else processed_logprobs(s, info);
    }
    return token;
}

void sampler_forced_info(const nc_sampler *s, const float *logits, int32_t token, nc_sample_info *info) {
    info->token = token;
    raw_logprobs(s, logits, info);
    info->p = expf(info->logprob);
}

int32_t nc_sampler_sample(nc_sampler *s, const float *logits, const int32_t *history, int32_t n_history,
                          int32_t n_prompt, nc_sample_info *info) {
    return sampler_draw(s, logits, history, n_history, n_prompt, NULL, NULL, info);
}

int32_t sampler_propose(nc_sampler *s, const float *logits, const int32_t *history, int32_t n_history,
                        int32_t n_prompt, float *q) {
    int32_t token = sampler_draw(s, logits, history, n_history, n_prompt, NULL, NULL, NULL);
    const cand_list *c = &s->list;
    if (c->n == 1) return token; /* certain: q stays unwritten */
    memset(q, 0, (size_t)s->n_vocab * sizeof *q);
    for (int32_t i = 0; i < c->n; i++) q[c->data[i].id] = c->data[i].p;
    return token;
}

bool sampler_proposal_certain(const nc_sampler *s) { return s->list.n == 1; }

int32_t nc_sampler_apply(nc_sampler *s, const float *logits, const int32_t *history, int32_t n_history,
                         int32_t n_prompt, nc_token_prob *out, int32_t cap) {
    step_in in = {history, n_history, n_prompt};
    run_chain(s, logits, &in, false, false);
    cands_softmax(&s->list);
    for (int32_t i = 0; i < s->list.n && i < cap; i++) out[i] = (nc_token_prob){s->list.data[i].id, s->list.data[i].p};
    return s->list.n;
}

bool nc_sampler_grammar_stuck(const nc_sampler *s) { return s->grammar_stuck; }
