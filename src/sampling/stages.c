/* The stages of the chain: each calls its algorithm (truncation.c, penalties.c, dry.c) and, when
 * explaining, reports what it did. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampling/sampler.h"

/* ---- helpers for the stages ---- */

static int32_t *scratch_ints(nc_sampler *s, size_t n) {
    if (n == 0) n = 1;
    if (n > s->scratch_cap) {
        int32_t *grown = realloc(s->scratch, n * sizeof *grown);
        if (!grown) return NULL;
        s->scratch = grown;
        s->scratch_cap = n;
    }
    return s->scratch;
}

/* The last `last_n` tokens of the history (-1: all of it): its start, its length in *n. */
static const int32_t *window(const step_in *in, int32_t last_n, int32_t *n) {
    *n = last_n < 0 || last_n > in->n_history ? in->n_history : last_n;
    return *n > 0 ? in->history + in->n_history - *n : in->history;
}

void stage_report(nc_explain_stage *r, const char *label, double param, int32_t before, const cand_list *c,
                   double mass) {
    snprintf(r->name, sizeof r->name, "%s", label);
    r->param = param;
    r->n_before = before;
    r->n_after = c->n;
    r->mass = mass;
}

/* Truncation stages share their report: "top-p 0.90: kept 12 of 40, mass 0.903". The input is
 * softmaxed first when explaining, so the kept tokens' p still sum to the mass they carried. */
static void truncation_report(nc_explain_stage *r, const char *label, double param, int32_t before,
                              const cand_list *c) {
    double mass = c->n == before ? 1.0 : cands_mass(c);
    stage_report(r, label, param, before, c, mass);
    snprintf(r->what, sizeof r->what, "%s %g: kept %d of %d, mass %.3f", label, param, c->n, before, mass);
}

/* ---- the stages ---- */

static bool penalties_active(const nc_sampler_params *p) {
    return p->repeat_last_n != 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0 || p->presence_penalty != 0);
}
static double penalties_param(const nc_sampler_params *p) { return p->repeat_penalty; }
static void penalties_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    int32_t n, before = c->n, changed = -1;
    const int32_t *w = window(in, s->p.repeat_last_n, &n);
    int32_t *scratch = scratch_ints(s, (size_t)n);
    if (scratch)
        changed = smp_penalties(c, w, n, s->p.repeat_penalty, s->p.frequency_penalty, s->p.presence_penalty, scratch);
    if (!r) return;
    stage_report(r, "penalties", s->p.repeat_penalty, before, c, 1.0);
    if (changed < 0) snprintf(r->what, sizeof r->what, "penalties: skipped, out of memory");
    else
        snprintf(r->what, sizeof r->what, "penalties (repeat %g, frequency %g, presence %g) over the last %d tokens: "
                 "%d tokens penalised", s->p.repeat_penalty, s->p.frequency_penalty, s->p.presence_penalty, n, changed);
}

static bool dry_active(const nc_sampler_params *p) { return p->dry_multiplier > 0 && p->dry_penalty_last_n != 0; }
static double dry_param(const nc_sampler_params *p) { return p->dry_multiplier; }
static void dry_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    int32_t n, before = c->n, changed = -1, longest = 0;
    const int32_t *w = window(in, s->p.dry_penalty_last_n, &n);
    int32_t *scratch = scratch_ints(s, 4 * (size_t)n);
    dry_params dp = {s->p.dry_multiplier, s->p.dry_base, s->p.dry_allowed_length};
    if (scratch) changed = smp_dry(c, w, n, s->breaker, dp, scratch, &longest);
    if (!r) return;
    stage_report(r, "dry", s->p.dry_multiplier, before, c, 1.0);
    if (changed < 0) snprintf(r->what, sizeof r->what, "dry: skipped, out of memory");
    else
        snprintf(r->what, sizeof r->what, "dry x%g base %g allowed %d: %d tokens penalised, longest repeat %d",
                 s->p.dry_multiplier, s->p.dry_base, s->p.dry_allowed_length, changed, longest);
}

static bool ngram_active(const nc_sampler_params *p) { return p->no_repeat_ngram > 0; }
static double ngram_param(const nc_sampler_params *p) { return p->no_repeat_ngram; }
static void ngram_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    int32_t before = c->n, banned = smp_no_repeat_ngram(c, in->history, in->n_history, s->p.no_repeat_ngram);
    if (!r) return;
    stage_report(r, "no-repeat-ngram", s->p.no_repeat_ngram, before, c, 1.0);
    snprintf(r->what, sizeof r->what, "no-repeat-ngram %d: %d tokens banned", s->p.no_repeat_ngram, banned);
}

static bool bias_active(const nc_sampler_params *p) { return p->n_logit_bias > 0 || p->min_tokens > 0 || p->ignore_eos; }
static double bias_param(const nc_sampler_params *p) { return p->n_logit_bias; }
static void bias_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    int32_t before = c->n, biased = smp_logit_bias(c, s->bias, s->p.n_logit_bias), banned = 0;
    /* A grammar that is complete with nothing more to allow ends the text whatever min_tokens and
       ignore_eos say: banning the end there would leave no token at all. */
    bool ban_eog = (s->p.ignore_eos || in->n_history - in->n_prompt < s->p.min_tokens) && !s->grammar_ended;
    if (ban_eog) banned = smp_ban(c, s->eog, s->n_eog);
    if (!r) return;
    stage_report(r, "logit-bias", s->p.n_logit_bias, before, c, 1.0);
    snprintf(r->what, sizeof r->what, "logit-bias: %d tokens biased, %d end-of-generation tokens banned%s", biased,
             banned, !ban_eog ? "" : s->p.ignore_eos ? " (ignore-eos)" : " (before min-tokens)");
}

static bool temp_active(const nc_sampler_params *p) { return p->temp != 1.0f || p->dynatemp_range > 0; }
static double temp_param(const nc_sampler_params *p) { return p->temp; }
static void temp_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    int32_t before = c->n;
    if (s->p.dynatemp_range > 0) {
        double t = smp_dynatemp(c, s->p.temp, s->p.dynatemp_range, s->p.dynatemp_exponent);
        if (!r) return;
        stage_report(r, "temperature", s->p.temp, before, c, c->n == before ? 1.0 : cands_mass(c));
        snprintf(r->what, sizeof r->what, "temperature %g, dynamic range %g exponent %g: logits divided by %.4g%s",
                 s->p.temp, s->p.dynatemp_range, s->p.dynatemp_exponent, t, c->n < before ? " (greedy)" : "");
        return;
    }
    if (r && s->p.temp <= 0) cands_softmax(c);
    smp_temperature(c, s->p.temp);
    if (!r) return;
    if (s->p.temp <= 0) {
        truncation_report(r, "temperature", 0, before, c);
        snprintf(r->what, sizeof r->what, "temperature 0 (greedy): kept 1 of %d, mass %.3f", before, r->mass);
    } else {
        stage_report(r, "temperature", s->p.temp, before, c, 1.0);
        snprintf(r->what, sizeof r->what, "temperature %g: logits divided by %g", s->p.temp, s->p.temp);
    }
}

static bool top_n_sigma_active(const nc_sampler_params *p) { return p->top_n_sigma > 0; }
static double top_n_sigma_param(const nc_sampler_params *p) { return p->top_n_sigma; }
static void top_n_sigma_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    int32_t before = c->n;
    if (r) cands_softmax(c);
    smp_top_n_sigma(c, s->p.top_n_sigma);
    if (r) truncation_report(r, "top-n-sigma", s->p.top_n_sigma, before, c);
}

static bool top_k_active(const nc_sampler_params *p) { return p->top_k > 0; }
static double top_k_param(const nc_sampler_params *p) { return p->top_k; }
static void top_k_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    int32_t before = c->n;
    if (r) cands_softmax(c);
    smp_top_k(c, s->p.top_k, s->p.min_keep);
    if (r) truncation_report(r, "top-k", s->p.top_k, before, c);
}

static bool typical_active(const nc_sampler_params *p) { return p->typical_p < 1.0f; }
static double typical_param(const nc_sampler_params *p) { return p->typical_p; }
static void typical_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    int32_t before = c->n;
    smp_typical(c, s->p.typical_p, s->p.min_keep);
    if (r) truncation_report(r, "typical-p", s->p.typical_p, before, c);
}

static bool top_p_active(const nc_sampler_params *p) { return p->top_p < 1.0f; }
static double top_p_param(const nc_sampler_params *p) { return p->top_p; }
static void top_p_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    int32_t before = c->n;
    smp_top_p(c, s->p.top_p, s->p.min_keep);
    if (r) truncation_report(r, "top-p", s->p.top_p, before, c);
}

static bool min_p_active(const nc_sampler_params *p) { return p->min_p > 0; }
static double min_p_param(const nc_sampler_params *p) { return p->min_p; }
static void min_p_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    int32_t before = c->n;
    if (r) cands_softmax(c);
    smp_min_p(c, s->p.min_p, s->p.min_keep);
    if (r) truncation_report(r, "min-p", s->p.min_p, before, c);
}

static bool epsilon_active(const nc_sampler_params *p) { return p->epsilon_cutoff > 0; }
static double epsilon_param(const nc_sampler_params *p) { return p->epsilon_cutoff; }
static void epsilon_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    int32_t before = c->n;
    smp_epsilon(c, s->p.epsilon_cutoff, s->p.min_keep);
    if (r) truncation_report(r, "epsilon", s->p.epsilon_cutoff, before, c);
}

static bool eta_active(const nc_sampler_params *p) { return p->eta_cutoff > 0; }
static double eta_param(const nc_sampler_params *p) { return p->eta_cutoff; }
static void eta_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    int32_t before = c->n;
    double eta = smp_eta(c, s->p.eta_cutoff, s->p.min_keep);
    if (!r) return;
    truncation_report(r, "eta", s->p.eta_cutoff, before, c);
    snprintf(r->what, sizeof r->what, "eta %g (cutoff %.3g): kept %d of %d, mass %.3f", s->p.eta_cutoff, eta, c->n,
             before, r->mass);
}

static bool xtc_active(const nc_sampler_params *p) { return p->xtc_probability > 0 && p->xtc_threshold <= 0.5f; }
static double xtc_param(const nc_sampler_params *p) { return p->xtc_threshold; }
static void xtc_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    int32_t before = c->n;
    if (r) cands_softmax(c);
    bool fired = smp_xtc(c, s->p.xtc_probability, s->p.xtc_threshold, s->p.min_keep, &s->rng);
    if (!r) return;
    truncation_report(r, "xtc", s->p.xtc_threshold, before, c);
    if (!fired) snprintf(r->what, sizeof r->what, "xtc %g (probability %g): not this step", s->p.xtc_threshold,
                         s->p.xtc_probability);
    else snprintf(r->what, sizeof r->what, "xtc %g (probability %g): removed %d top tokens, kept %d of %d, mass %.3f",
                  s->p.xtc_threshold, s->p.xtc_probability, before - c->n, c->n, before, r->mass);
}

/* The grammar: first bring the matcher up to the history (the tokens generated so far), then mask.
 * The state is a function of the generated tokens alone, so speculative decoding's verification
 * (which draws position by position through the same sampler) and rollbacks need no other call. */
static bool grammar_sync(nc_sampler *s, const step_in *in) {
    int32_t n = in->n_history - in->n_prompt;
    const int32_t *gen = in->history + in->n_prompt;
    if (n < 0) n = 0;
    if (n < s->n_consumed || (s->n_consumed && memcmp(gen, s->consumed, (size_t)s->n_consumed * sizeof *gen))) {
        gr_matcher_reset(s->matcher);
        s->n_consumed = 0;
    }
    if (n > s->cap_consumed) {
        int32_t *g = realloc(s->consumed, (size_t)n * sizeof *g);
        if (!g) return false;
        s->consumed = g;
        s->cap_consumed = n;
    }
    for (int32_t i = s->n_consumed; i < n; i++) {
        uint32_t len = 0;
        const uint8_t *bytes = gen[i] >= 0 && gen[i] < gr_vocab_n_tokens(s->gvocab) ? gr_vocab_piece(s->gvocab, gen[i], &len)
                                                                                    : NULL;
        if (bytes) gr_matcher_feed(s->matcher, bytes, len);
        s->consumed[s->n_consumed++] = gen[i];
    }
    return true;
}

static bool grammar_active(const nc_sampler_params *p) { return p->grammar && *p->grammar; }
static double grammar_param(const nc_sampler_params *p) { return NAN; }
static void grammar_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    int32_t before = c->n, allowed = 0;
    bool synced = grammar_sync(s, in);
    if (synced) allowed = gr_matcher_mask(s->matcher, s->gvocab, s->allowed, s->n_vocab);
    bool stuck = allowed == 0;
    s->grammar_stuck = stuck;
    s->grammar_ended = stuck || allowed - (gr_matcher_can_end(s->matcher) ? s->n_grammar_eog : 0) == 0;
    if (stuck) /* the text cannot go on under the grammar (or memory ran out): end it */
        for (int32_t id = 0; id < s->n_vocab; id++) s->allowed[id] = id < gr_vocab_n_tokens(s->gvocab) && gr_vocab_is_eog(s->gvocab, id);
    for (int32_t i = 0; i < c->n; i++)
        if (!s->allowed[c->data[i].id]) c->data[i].logit = -INFINITY;
    if (!r) return;
    stage_report(r, "grammar", NAN, before, c, 1.0);
    int32_t kept = 0; /* the others are -inf, still in the list */
    for (int32_t i = 0; i < c->n; i++) kept += s->allowed[c->data[i].id];
    r->n_after = kept;
    snprintf(r->what, sizeof r->what, "grammar: %d of %d tokens allowed%s%s", allowed, before,
             gr_matcher_can_end(s->matcher) ? ", may end here" : "", stuck ? " (none: only end-of-generation)" : "");
}

/* Only where `samplers` names it (llama.vim's and llama.vscode's fill-in-the-middle requests). */
static bool infill_active(const nc_sampler_params *p) { return (void)p, true; }
static double infill_param(const nc_sampler_params *p) { return (void)p, NAN; }
static void infill_apply(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r) {
    (void)in;
    int32_t before = c->n;
    int rc = smp_infill(c, s->m, s->is_eog, s->end_token);
    if (!r) return;
    stage_report(r, "infill", NAN, before, c, 1.0);
    if (rc) snprintf(r->what, sizeof r->what, "infill: skipped, out of memory");
    else snprintf(r->what, sizeof r->what, "infill: kept %d of %d%s", c->n, before,
                  c->n > 0 && s->is_eog[c->data[0].id] ? ", ending likely" : "");
}

const stage_def STAGES[ST_COUNT] = {
    [ST_PENALTIES] = {"penalties", NULL, "penalties", ROLE_PROCESSOR, penalties_active, penalties_apply, penalties_param},
    [ST_DRY] = {"dry", NULL, "dry", ROLE_PROCESSOR, dry_active, dry_apply, dry_param},
    [ST_NGRAM] = {"no_repeat_ngram", "ngram", "no-repeat-ngram", ROLE_PROCESSOR, ngram_active, ngram_apply, ngram_param},
    [ST_BIAS] = {"logit_bias", NULL, "logit-bias", ROLE_PROCESSOR, bias_active, bias_apply, bias_param},
    [ST_TEMP] = {"temperature", "temp", "temperature", ROLE_SHAPE, temp_active, temp_apply, temp_param},
    [ST_TOP_N_SIGMA] = {"top_n_sigma", NULL, "top-n-sigma", ROLE_TRUNCATION, top_n_sigma_active, top_n_sigma_apply,
                        top_n_sigma_param},
    [ST_TOP_K] = {"top_k", NULL, "top-k", ROLE_TRUNCATION, top_k_active, top_k_apply, top_k_param},
    [ST_TYPICAL] = {"typ_p", "typical_p", "typical-p", ROLE_TRUNCATION, typical_active, typical_apply, typical_param},
    [ST_TOP_P] = {"top_p", NULL, "top-p", ROLE_TRUNCATION, top_p_active, top_p_apply, top_p_param},
    [ST_MIN_P] = {"min_p", NULL, "min-p", ROLE_TRUNCATION, min_p_active, min_p_apply, min_p_param},
    [ST_EPSILON] = {"epsilon", "epsilon_cutoff", "epsilon", ROLE_TRUNCATION, epsilon_active, epsilon_apply, epsilon_param},
    [ST_ETA] = {"eta", "eta_cutoff", "eta", ROLE_TRUNCATION, eta_active, eta_apply, eta_param},
    [ST_XTC] = {"xtc", NULL, "xtc", ROLE_TRUNCATION, xtc_active, xtc_apply, xtc_param},
    [ST_INFILL] = {"infill", NULL, "infill", ROLE_TRUNCATION, infill_active, infill_apply, infill_param},
    [ST_GRAMMAR] = {"grammar", NULL, "grammar", ROLE_PROCESSOR, grammar_active, grammar_apply, grammar_param},
};
