/* Sampler parameters: defaults (llama.cpp's) and range checks naming the field. */
#include <math.h>
#include <string.h>

#include "common.h"
#include "sampling/sampler.h"

static const char *const default_breakers[] = {"\n", ":", "\"", "*"};

void nc_sampler_params_default(nc_sampler_params *p) {
    *p = (nc_sampler_params){
        .temp = 0.8f, .dynatemp_exponent = 1.0f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .typical_p = 1.0f, .top_n_sigma = -1.0f,
        .repeat_penalty = 1.0f, .repeat_last_n = 64, .dry_base = 1.75f, .dry_allowed_length = 2,
        .dry_penalty_last_n = -1, .dry_breakers = default_breakers, .n_dry_breakers = 4, .xtc_threshold = 0.1f,
        .mirostat_tau = 5.0f, .mirostat_eta = 0.1f, .logprobs_mode = NC_LOGPROBS_RAW};
}

static int check_range(const char *name, double v, double lo, double hi, nc_err *err) {
    if (isnan(v) || v < lo || v > hi) return nc_fail(err, "%s: %g is outside the allowed range [%g, %g]", name, v, lo, hi);
    return 0;
}

/* A probability cutoff: 0 (off) up to, not including, 1 (which would remove every token). */
static int check_cutoff(const char *name, double v, nc_err *err) {
    if (isnan(v) || v < 0 || v >= 1) return nc_fail(err, "%s: %g is outside the allowed range [0, 1)", name, v);
    return 0;
}

static int check_int(const char *name, long v, long lo, long hi, nc_err *err) {
    if (v < lo || v > hi) return nc_fail(err, "%s: %ld is outside the allowed range %ld..%ld", name, v, lo, hi);
    return 0;
}

static int check_breakers(const nc_sampler_params *p, nc_err *err) {
    if (p->n_dry_breakers < 0 || (p->n_dry_breakers > 0 && !p->dry_breakers))
        return nc_fail(err, "dry_breakers: %d strings given without an array", p->n_dry_breakers);
    for (int32_t i = 0; i < p->n_dry_breakers; i++)
        if (!p->dry_breakers[i] || !*p->dry_breakers[i]) return nc_fail(err, "dry_breakers: string %d is empty", i);
    return 0;
}

static int check_bias(const nc_sampler_params *p, nc_err *err) {
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return nc_fail(err, "logit_bias: %d entries given without an array", p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        float b = p->logit_bias[i].bias;
        if (isnan(b) || b == INFINITY)
            return nc_fail(err, "logit_bias: the bias of token %d must be finite or -inf", p->logit_bias[i].token);
    }
    return 0;
}

int nc_sampler_params_check(const nc_sampler_params *p, nc_err *err) {
    if (check_range("temp", p->temp, 0, 1e6, err) || check_int("top_k", p->top_k, 0, INT32_MAX, err) ||
        check_range("top_p", p->top_p, 0, 1, err) || check_range("min_p", p->min_p, 0, 1, err) ||
        check_range("typical_p", p->typical_p, 0, 1, err) || check_range("top_n_sigma", p->top_n_sigma, -1, 1e6, err) ||
        check_cutoff("epsilon_cutoff", p->epsilon_cutoff, err) || check_cutoff("eta_cutoff", p->eta_cutoff, err) ||
        check_range("dynatemp_range", p->dynatemp_range, 0, 1e6, err) ||
        check_range("dynatemp_exponent", p->dynatemp_exponent, 0, 1e6, err) ||
        check_int("min_keep", p->min_keep, 0, INT32_MAX, err) ||
        check_range("repeat_penalty", p->repeat_penalty, 1e-6, 1e6, err) ||
        check_int("repeat_last_n", p->repeat_last_n, -1, INT32_MAX, err) ||
        check_range("frequency_penalty", p->frequency_penalty, -2, 2, err) ||
        check_range("presence_penalty", p->presence_penalty, -2, 2, err) ||
        check_int("no_repeat_ngram", p->no_repeat_ngram, 0, INT32_MAX, err) ||
        check_range("dry_multiplier", p->dry_multiplier, 0, 1e6, err) || check_range("dry_base", p->dry_base, 1, 1e6, err) ||
        check_int("dry_allowed_length", p->dry_allowed_length, 1, INT32_MAX, err) ||
        check_int("dry_penalty_last_n", p->dry_penalty_last_n, -1, INT32_MAX, err) || check_breakers(p, err) ||
        check_range("xtc_probability", p->xtc_probability, 0, 1, err) ||
        check_range("xtc_threshold", p->xtc_threshold, 0, 1, err) || check_int("mirostat", p->mirostat, 0, 2, err) ||
        check_range("mirostat_tau", p->mirostat_tau, 0, 1e6, err) ||
        check_range("mirostat_eta", p->mirostat_eta, 0, 1, err) || check_bias(p, err) ||
        check_int("min_tokens", p->min_tokens, 0, INT32_MAX, err) ||
        check_int("n_logprobs", p->n_logprobs, 0, NC_LOGPROBS_MAX, err) ||
        check_int("logprobs_mode", p->logprobs_mode, NC_LOGPROBS_RAW, NC_LOGPROBS_PROCESSED, err))
        return -1;
    return 0;
}
