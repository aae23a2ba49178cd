/* The sampler chain without a model: every stage against distributions worked out by hand
 * (numbers from Python, hardcoded), statistical checks of the draw, parameter validation,
 * explain records and log-probabilities. */
#include <math.h>
#include <string.h>

#include <stdlib.h>

#include "nucleus.h"
#include "sampling/sampler.h"
#include "test.h"

static const float L5[5] = {3, 2, 1, 0.5f, 0.1f};

/* A sampler over n logits with the defaults changed by the caller, all stages off but those. */
static nc_sampler_params neutral(const char *order) {
    nc_sampler_params p;
    nc_sampler_params_default(&p);
    p.temp = 1;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.n_dry_breakers = 0;
    p.samplers = order;
    p.seed = 1234;
    return p;
}

static nc_sampler *make(const nc_sampler_params *p, int32_t n_vocab) {
    nc_sampler *s = NULL;
    nc_err err;
    if (nc_sampler_new(&s, NULL, n_vocab, p, &err)) fprintf(stderr, "sampler: %s\n", err.msg);
    return s;
}

/* The processed distribution as p[id] (0 for removed tokens); returns how many tokens remain. */
static int32_t dist(const nc_sampler_params *p, const float *logits, int32_t n, const int32_t *hist, int32_t n_hist,
                    float *probs) {
    nc_sampler *s = make(p, n);
    if (!s) return -1;
    nc_token_prob out[128];
    int32_t k = nc_sampler_apply(s, logits, hist, n_hist, 0, out, 128);
    for (int32_t i = 0; i < n; i++) probs[i] = 0;
    for (int32_t i = 0; i < k && i < 128; i++) probs[out[i].token] = out[i].p;
    nc_sampler_free(s);
    return k;
}

static void check_probs(const char *what, const float *got, const double *want, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        CHECK_MSG(fabs(got[i] - want[i]) < 2e-6, "%s: p[%d] = %.9f, want %.9f", what, i, got[i], want[i]);
}

static void test_temperature(void) {
    float p[5];
    nc_sampler_params sp = neutral("temperature");
    sp.temp = 0.5f;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 5);
    check_probs("T=0.5", p, (double[]){0.859537462, 0.116325746, 0.015742978, 0.005791518, 0.002602297}, 5);
    sp.temp = 2;
    dist(&sp, L5, 5, NULL, 0, p);
    check_probs("T=2", p, (double[]){0.400723677, 0.243051196, 0.147418002, 0.114809256, 0.093997868}, 5);
    sp.temp = 1; /* a neutral temperature leaves the stage out: plain softmax */
    dist(&sp, L5, 5, NULL, 0, p);
    check_probs("T=1", p, (double[]){0.609636050, 0.224272569, 0.082505268, 0.050041974, 0.033544139}, 5);
    /* T = 0 is greedy; ties go to the lower id */
    sp.temp = 0;
    float tie[4] = {1, 5, 5, 2};
    CHECK(dist(&sp, tie, 4, NULL, 0, p) == 1 && p[1] == 1.0f);
    nc_sampler *s = make(&sp, 4);
    int same = 1;
    for (int i = 0; i < 50; i++) same &= nc_sampler_sample(s, tie, NULL, 0, 0, NULL) == 1;
    CHECK(same);
    nc_sampler_free(s);
}

static void test_top_k_min_p(void) {
    float p[5];
    nc_sampler_params sp = neutral("top_k");
    sp.top_k = 2;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 2);
    check_probs("top-k 2", p, (double[]){0.731058579, 0.268941421, 0, 0, 0}, 5);
    sp.top_k = 1; /* greedy */
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 1 && p[0] == 1.0f);
    sp.min_keep = 3; /* min_keep wins over k */
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 3);
    sp = neutral("min_p");
    sp.min_p = 0.3f; /* p_i / p_max = e^(l_i - 3): e^-1 = 0.37 kept, e^-2 = 0.14 not */
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 2);
    check_probs("min-p 0.3", p, (double[]){0.731058579, 0.268941421, 0, 0, 0}, 5);
    sp = neutral("temperature;min_p");
    sp.temp = 0.5f;
    sp.min_p = 0.1f; /* ratios e^(2(l_i - 3)): e^-2 = 0.135 kept, e^-4 = 0.018 not */
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 2);
    check_probs("T 0.5, min-p 0.1", p, (double[]){0.880797078, 0.119202922, 0, 0, 0}, 5);
    sp.min_p = 0.9f;
    sp.min_keep = 3;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 3);
}

static void test_top_p(void) {
    float p[64];
    nc_sampler_params sp = neutral("top_p");
    /* softmax(L5) = .6096 .2243 .0825 .0500 .0335: cumulative .6096 .8339 .9164 .9665 1 */
    sp.top_p = 0.8f;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 2);
    check_probs("top-p 0.8", p, (double[]){0.731058579, 0.268941421, 0, 0, 0}, 5);
    sp.top_p = 0.9f;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 3);
    sp.top_p = 0.95f;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 4);
    sp.top_p = 0; /* at least one token */
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 1 && p[0] == 1.0f);
    sp.min_keep = 3;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 3);
    /* a tie at the boundary keeps the lower id: ids 1 and 2 have p .3995 each, top-p 0.3 keeps one */
    sp = neutral("top_p");
    sp.top_p = 0.3f;
    float tie[4] = {0, 2, 2, 1};
    CHECK(dist(&sp, tie, 4, NULL, 0, p) == 1 && p[1] == 1.0f && p[2] == 0);
    /* nucleus sizes: a confident model keeps one token, a flat one keeps most */
    float confident[64], flat[64];
    for (int i = 0; i < 64; i++) {
        confident[i] = i == 17 ? 10.0f : 0.0f;
        flat[i] = 0.5f;
    }
    sp.top_p = 0.9f; /* confident: p = e^10 / (e^10 + 63) = .9971 */
    CHECK(dist(&sp, confident, 64, NULL, 0, p) == 1 && p[17] == 1.0f);
    /* flat: every p = 1/64 exactly; 58/64 = .906 is the first cumulative sum >= .9 */
    CHECK(dist(&sp, flat, 64, NULL, 0, p) == 58);
    sp.top_p = 0.5f;
    CHECK(dist(&sp, flat, 64, NULL, 0, p) == 32 && p[31] > 0 && p[32] == 0);
}

static void test_typical_sigma(void) {
    float p[5];
    /* H = 1.1066; |-ln p_i - H| = .612 .388 1.388 1.888 2.288: the typical order is 1, 0, 2, 3, 4 */
    nc_sampler_params sp = neutral("typ_p");
    sp.typical_p = 0.2f; /* the most typical token alone reaches .2 — not the most likely one */
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 1 && p[1] == 1.0f);
    sp.typical_p = 0.5f;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 2);
    check_probs("typical 0.5", p, (double[]){0.731058579, 0.268941421, 0, 0, 0}, 5);
    sp.typical_p = 0.9f;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 3);
    check_probs("typical 0.9", p, (double[]){0.665240956, 0.244728471, 0.090030573, 0, 0}, 5);
    /* mean 1.32, population deviation 1.0534: n = 1 keeps l >= 1.947, n = 2 keeps l >= 0.893 */
    sp = neutral("top_n_sigma");
    sp.top_n_sigma = 1;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 2);
    sp.top_n_sigma = 2;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 3);
    sp.top_n_sigma = 0.5f;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 1);
    /* invariant under temperature: the same set at T = 0.5 */
    sp = neutral("temperature;top_n_sigma");
    sp.temp = 0.5f;
    sp.top_n_sigma = 1;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 2);
}

/* Epsilon and eta (Hewitt et al., 2022, as transformers' EpsilonLogitsWarper and EtaLogitsWarper):
 * numbers from numpy. softmax(L5) = .6096 .2243 .0825 .0500 .0335, entropy H = 1.10656. */
static void test_epsilon_eta(void) {
    float p[10];
    nc_sampler_params sp = neutral("epsilon");
    sp.epsilon_cutoff = 0.06f; /* .0825 kept, .0500 not */
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 3);
    check_probs("epsilon 0.06", p, (double[]){0.665240956, 0.244728471, 0.090030573, 0, 0}, 5);
    sp.epsilon_cutoff = 0.9f; /* nothing reaches it: the most likely token stays, or min_keep of them */
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 1 && p[0] == 1.0f);
    sp.min_keep = 2;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 2);
    /* a tie at the boundary: p = .3995 for ids 1 and 2, both at or above .3, both kept (a cutoff on
     * p never splits equal logits); min_keep 1 under a higher cutoff keeps the lower id */
    float tie[4] = {0, 2, 2, 1};
    sp.min_keep = 0;
    sp.epsilon_cutoff = 0.3f;
    CHECK(dist(&sp, tie, 4, NULL, 0, p) == 2 && p[1] > 0 && p[2] > 0);
    sp.epsilon_cutoff = 0.5f;
    CHECK(dist(&sp, tie, 4, NULL, 0, p) == 1 && p[1] == 1.0f);
    /* eta = min(e, sqrt(e) exp(-H)): at e = .1, sqrt(.1) e^-H = .1046, so .1 (2 kept); at e = .3 the
     * entropy term .1811 is the cutoff (2 kept, where epsilon .3 would keep 1) */
    sp = neutral("eta");
    sp.eta_cutoff = 0.1f;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 2);
    check_probs("eta 0.1", p, (double[]){0.731058579, 0.268941421, 0, 0, 0}, 5);
    sp.eta_cutoff = 0.3f;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 2);
    sp = neutral("epsilon");
    sp.epsilon_cutoff = 0.3f;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 1);
    /* a flat distribution (logits 1, .9, ..., .1; H = 2.26235, p from .1505 down to .0612): eta .1
     * lowers its cutoff to sqrt(.1) e^-H = .0329 and keeps all ten, epsilon .1 keeps five */
    float flat[10];
    for (int i = 0; i < 10; i++) flat[i] = 1.0f - 0.1f * (float)i;
    sp = neutral("eta");
    sp.eta_cutoff = 0.1f;
    CHECK(dist(&sp, flat, 10, NULL, 0, p) == 10);
    sp = neutral("epsilon");
    sp.epsilon_cutoff = 0.1f;
    CHECK(dist(&sp, flat, 10, NULL, 0, p) == 5);
    /* explain: the cutoff eta actually used */
    sp = neutral("eta");
    sp.eta_cutoff = 0.3f;
    sp.explain = true;
    nc_sampler *s = make(&sp, 5);
    nc_sampler_sample(s, L5, NULL, 0, 0, NULL);
    const nc_explain *e = nc_sampler_explain(s);
    CHECK(e->n_stages == 2 && !strcmp(e->stage[0].name, "eta"));
    CHECK_MSG(strstr(e->stage[0].what, "eta 0.3 (cutoff 0.181): kept 2 of 5, mass 0.834") != NULL, "%s",
              e->stage[0].what);
    nc_sampler_free(s);
}

/* Dynamic temperature (llama.cpp's temp_ext): T = T_min + (T_max - T_min) (H / ln n)^x over
 * [max(0, t - r), t + r]; H / ln 5 = .68755 for L5. Numbers from numpy. */
static void test_dynatemp(void) {
    float p[5];
    nc_sampler_params sp = neutral("temperature");
    sp.temp = 1;
    sp.dynatemp_range = 0.5f; /* T = .5 + .68755 = 1.18754 */
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 5);
    check_probs("dynatemp 1 +- .5", p, (double[]){0.54787707, 0.23603422, 0.10168732, 0.06674408, 0.0476573}, 5);
    sp.dynatemp_exponent = 2; /* T = .5 + .68755^2 = .97272 */
    dist(&sp, L5, 5, NULL, 0, p);
    check_probs("dynatemp exponent 2", p, (double[]){0.61999831, 0.22177605, 0.07933024, 0.04744613, 0.03144926}, 5);
    sp.temp = 0.8f; /* T_min clamps at 0: T = 1.8 * .68755^.5 = 1.49253 */
    sp.dynatemp_range = 1;
    sp.dynatemp_exponent = 0.5f;
    dist(&sp, L5, 5, NULL, 0, p);
    check_probs("dynatemp .8 +- 1", p, (double[]){0.47525613, 0.24319171, 0.12444281, 0.08901851, 0.06809085}, 5);
    /* a certain step (entropy 0) with T_min = 0: greedy, not a division by zero */
    float sure[3] = {5, -INFINITY, -INFINITY};
    CHECK(dist(&sp, sure, 3, NULL, 0, p) == 1 && p[0] == 1.0f);
    /* explain names the temperature it used */
    sp.temp = 1;
    sp.dynatemp_range = 0.5f;
    sp.dynatemp_exponent = 1;
    sp.explain = true;
    nc_sampler *s = make(&sp, 5);
    nc_sampler_sample(s, L5, NULL, 0, 0, NULL);
    const nc_explain *e = nc_sampler_explain(s);
    CHECK_MSG(strstr(e->stage[0].what, "temperature 1, dynamic range 0.5 exponent 1: logits divided by 1.188") != NULL,
              "%s", e->stage[0].what);
    CHECK(strcmp(nc_sampler_describe(s), "temperature 1 -> dist") == 0);
    nc_sampler_free(s);
}

static void test_xtc(void) {
    float p[5];
    nc_sampler_params sp = neutral("xtc");
    sp.xtc_probability = 1;
    sp.xtc_threshold = 0.2f; /* ids 0 (.61) and 1 (.22) reach .2: all but the least likely go */
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 4);
    check_probs("xtc 0.2", p, (double[]){0, 0.574521724, 0.211354731, 0.128193124, 0.085930421}, 5);
    sp.xtc_threshold = 0.5f; /* only one token above: nothing removed */
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 5);
    sp.xtc_threshold = 0.2f;
    sp.min_keep = 5; /* would leave 4 < min_keep */
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 5);
    /* probability 0.5: about half of the steps remove the top token */
    sp = neutral("xtc");
    sp.xtc_probability = 0.5f;
    sp.xtc_threshold = 0.2f;
    nc_sampler *s = make(&sp, 5);
    int fired = 0;
    nc_token_prob out[5];
    for (int i = 0; i < 10000; i++) fired += nc_sampler_apply(s, L5, NULL, 0, 0, out, 5) == 4;
    CHECK_MSG(fired > 4800 && fired < 5200, "xtc fired %d of 10000", fired);
    nc_sampler_free(s);
}

static void test_penalties(void) {
    float p[5], logits[5] = {3, -2, 1, 0.5f, 0.1f};
    int32_t hist[3] = {0, 1, 1};
    /* repetition 2: 3 -> 1.5 (divided), -2 -> -4 (multiplied), once per token however often */
    nc_sampler_params sp = neutral("penalties");
    sp.repeat_penalty = 2;
    dist(&sp, logits, 5, hist, 3, p);
    check_probs("repeat 2", p, (double[]){0.449419249, 0.001836674, 0.272586553, 0.165332102, 0.110825422}, 5);
    /* OpenAI: logit -= count * 0.5 + 0.25: 3 -> 2.25, -2 -> -3.25 */
    sp = neutral("penalties");
    sp.frequency_penalty = 0.5f;
    sp.presence_penalty = 0.25f;
    dist(&sp, logits, 5, hist, 3, p);
    check_probs("frequency+presence", p, (double[]){0.632571217, 0.002585174, 0.181234688, 0.109924395, 0.073684525}, 5);
    /* the window: the last 2 tokens are {1, 1}, so token 0 goes free */
    sp.repeat_last_n = 2;
    dist(&sp, logits, 5, hist, 3, p);
    check_probs("window 2", p, (double[]){0.784699024, 0.001514825, 0.106197465, 0.064412018, 0.043176667}, 5);
    /* an empty history changes nothing */
    sp.repeat_last_n = 64;
    dist(&sp, logits, 5, NULL, 0, p);
    check_probs("no history", p, (double[]){0.781749924, 0.005267390, 0.105798347, 0.064169941, 0.043014398}, 5);
    sp.explain = true;
    nc_sampler *s = make(&sp, 5);
    nc_sampler_sample(s, logits, NULL, 0, 0, NULL);
    CHECK(strstr(nc_sampler_explain(s)->stage[0].what, "over the last 0 tokens: 0 tokens penalised") != NULL);
    nc_sampler_sample(s, logits, hist, 3, 0, NULL);
    CHECK(strstr(nc_sampler_explain(s)->stage[0].what, "over the last 3 tokens: 2 tokens penalised") != NULL);
    nc_sampler_free(s);
}

static void test_no_repeat_ngram(void) {
    float flat[10] = {0}, p[10];
    int32_t hist[5] = {5, 6, 7, 5, 6};
    nc_sampler_params sp = neutral("no_repeat_ngram");
    sp.no_repeat_ngram = 3; /* the last 2 tokens (5 6) were followed by 7 before */
    dist(&sp, flat, 10, hist, 5, p);
    CHECK(p[7] == 0 && fabsf(p[0] - 1.0f / 9) < 1e-6f);
    sp.no_repeat_ngram = 2; /* (6) was followed by 7 */
    dist(&sp, flat, 10, hist, 5, p);
    CHECK(p[7] == 0 && p[5] > 0 && p[6] > 0);
    sp.no_repeat_ngram = 1; /* every token seen is banned */
    dist(&sp, flat, 10, hist, 5, p);
    CHECK(p[5] == 0 && p[6] == 0 && p[7] == 0 && fabsf(p[0] - 1.0f / 7) < 1e-6f);
    sp.no_repeat_ngram = 4; /* (7 5 6) never occurred before */
    dist(&sp, flat, 10, hist, 5, p);
    CHECK(fabsf(p[7] - 0.1f) < 1e-6f);
    sp.no_repeat_ngram = 3; /* a history shorter than n - 1 bans nothing */
    dist(&sp, flat, 10, hist, 1, p);
    CHECK(fabsf(p[7] - 0.1f) < 1e-6f);
    int32_t loop[6] = {1, 2, 1, 2, 1, 2}; /* (2) was followed by 1; (1 2) by 1 */
    sp.no_repeat_ngram = 2;
    dist(&sp, flat, 10, loop, 6, p);
    CHECK(p[1] == 0 && p[2] > 0);
}

static void test_dry(void) {
    float flat[10] = {0}, p[10];
    /* the window ends with "1 2 3", which occurred before followed by 4: a repeat of length 3,
     * penalty 0.8 * 1.75^(3 - 2) = 1.4 on token 4 */
    int32_t hist[8] = {1, 2, 3, 4, 9, 1, 2, 3};
    nc_sampler_params sp = neutral("dry");
    sp.dry_multiplier = 0.8f;
    dist(&sp, flat, 10, hist, 8, p);
    check_probs("dry", p, (double[]){0.108147895, 0.108147895, 0.108147895, 0.108147895, 0.026668943,
                                     0.108147895, 0.108147895, 0.108147895, 0.108147895, 0.108147895}, 10);
    sp.dry_allowed_length = 4; /* a repeat of 3 is allowed */
    dist(&sp, flat, 10, hist, 8, p);
    CHECK(fabsf(p[4] - 0.1f) < 1e-6f);
    sp.dry_allowed_length = 2;
    sp.dry_penalty_last_n = 4; /* window "9 1 2 3": no earlier occurrence */
    dist(&sp, flat, 10, hist, 8, p);
    CHECK(fabsf(p[4] - 0.1f) < 1e-6f);
    /* breakers need the vocabulary: refused without a model */
    nc_sampler_params_default(&sp);
    sp.dry_multiplier = 0.8f;
    nc_sampler *s;
    nc_err err;
    CHECK(nc_sampler_new(&s, NULL, 10, &sp, &err) == -1 && strstr(err.msg, "dry_breakers"));
}

static void test_bias(void) {
    float p[5];
    nc_sampler_params sp = neutral("logit_bias");
    nc_logit_bias bias[2] = {{4, 2.9f}, {0, -INFINITY}}; /* token 4: 0.1 -> 3.0; token 0 banned */
    sp.logit_bias = bias;
    sp.n_logit_bias = 2;
    dist(&sp, L5, 5, NULL, 0, p);
    double z = exp(2) + exp(1) + exp(0.5) + exp(3);
    CHECK(p[0] == 0);
    CHECK_NEAR(p[4], exp(3) / z, 2e-6);
    CHECK_NEAR(p[1], exp(2) / z, 2e-6);
    /* logit bias always runs, first when --samplers does not name it */
    sp.samplers = "top_k";
    sp.top_k = 1;
    dist(&sp, L5, 5, NULL, 0, p);
    CHECK(p[4] == 1.0f);
    /* min_tokens and ignore_eos need the model's end-of-generation tokens */
    sp.min_tokens = 3;
    nc_sampler *s;
    nc_err err;
    CHECK(nc_sampler_new(&s, NULL, 5, &sp, &err) == -1 && strstr(err.msg, "min_tokens"));
    sp.min_tokens = 0;
    bias[0].token = 5;
    CHECK(nc_sampler_new(&s, NULL, 5, &sp, &err) == -1 && strstr(err.msg, "outside the vocabulary"));
}

/* Mirostat's truncation, read from the explain record. */
static void test_mirostat(void) {
    nc_sampler_params sp = neutral("");
    sp.explain = true;
    sp.mirostat = 2;
    sp.mirostat_tau = 1; /* mu = 2: keep surprise <= 2 bits, p >= .25: token 0 alone */
    sp.mirostat_eta = 1;
    nc_sampler *s = make(&sp, 5);
    CHECK(nc_sampler_sample(s, L5, NULL, 0, 0, NULL) == 0);
    const nc_explain *e = nc_sampler_explain(s);
    CHECK(e->n_stages == 1 && e->stage[0].n_after == 1 && e->p == 1.0f);
    /* surprise 0: mu = 2 - 1 * (0 - 1) = 3, so p >= .125 now keeps tokens 0 and 1 */
    nc_sampler_sample(s, L5, NULL, 0, 0, NULL);
    CHECK(e->stage[0].n_after == 2);
    CHECK(strstr(e->stage[0].what, "mu 3.000 ->") != NULL);
    nc_sampler_reset(s, 1);
    nc_sampler_sample(s, L5, NULL, 0, 0, NULL);
    CHECK(e->stage[0].n_after == 1);
    nc_sampler_free(s);
    /* Mirostat 1, tau 1 (mu 2): Zipf exponent s = 1.7130, k = ((0.713 * 4) / (1 - 5^-0.713))^(1/1.713) = 2.30 */
    sp.mirostat = 1;
    s = make(&sp, 5);
    nc_sampler_sample(s, L5, NULL, 0, 0, NULL);
    e = nc_sampler_explain(s);
    CHECK(e->stage[0].n_after == 2 && strstr(e->stage[0].what, "k 2,"));
    nc_sampler_free(s);
    sp.mirostat_tau = 5; /* mu 10: k = 58.7, all 5 */
    s = make(&sp, 5);
    nc_sampler_sample(s, L5, NULL, 0, 0, NULL);
    CHECK(nc_sampler_explain(s)->stage[0].n_after == 5);
    nc_sampler_free(s);
    /* under Mirostat the truncation stages are left out of the default chain */
    nc_sampler_params_default(&sp);
    sp.n_dry_breakers = 0;
    sp.mirostat = 2;
    s = make(&sp, 5);
    CHECK(strcmp(nc_sampler_describe(s), "temperature 0.8 -> mirostat 2 (tau 5, eta 0.1)") == 0);
    nc_sampler_free(s);
}

/* 100,000 seeded draws against the distribution the chain reports (chi-square, fixed seed). */
static double chi_square(const nc_sampler_params *sp, const float *logits, int32_t n, int32_t *n_cells) {
    nc_sampler *s = make(sp, n);
    nc_token_prob d[64];
    int32_t k = nc_sampler_apply(s, logits, NULL, 0, 0, d, 64);
    double want[64] = {0};
    for (int32_t i = 0; i < k; i++) want[d[i].token] = d[i].p;
    int counts[64] = {0}, N = 100000, outside = 0;
    for (int i = 0; i < N; i++) {
        int32_t t = nc_sampler_sample(s, logits, NULL, 0, 0, NULL);
        counts[t]++;
        outside += want[t] == 0;
    }
    nc_sampler_free(s);
    double chi2 = outside ? INFINITY : 0;
    for (int32_t i = 0; i < n; i++)
        if (want[i] > 0) chi2 += (counts[i] - N * want[i]) * (counts[i] - N * want[i]) / (N * want[i]);
    *n_cells = k;
    return chi2;
}

static void test_chi_square(void) {
    int32_t cells;
    nc_sampler_params sp = neutral("temperature;top_k");
    sp.temp = 0.7f;
    sp.top_k = 4; /* softmax(L5[0..3] / 0.7) = .7546 .1808 .0433 .0212 */
    float p[5];
    dist(&sp, L5, 5, NULL, 0, p);
    check_probs("T 0.7 top-k 4", p, (double[]){0.754603469, 0.180841503, 0.043338854, 0.021216174, 0}, 5);
    double chi2 = chi_square(&sp, L5, 5, &cells);
    /* 3 degrees of freedom: P(chi2 > 16.27) = 0.001 */
    CHECK_MSG(cells == 4 && chi2 < 16.27, "chi2 %g over %d cells", chi2, cells);
    /* the default chain over 64 varied logits */
    float logits[64];
    for (int i = 0; i < 64; i++) logits[i] = (float)(3.0 * sin(i * 1.7) - 0.05 * i);
    nc_sampler_params_default(&sp);
    sp.n_dry_breakers = 0;
    sp.seed = 77;
    chi2 = chi_square(&sp, logits, 64, &cells);
    /* cells - 1 degrees of freedom; the 0.001 quantile for up to 20 is below 45.4 */
    CHECK_MSG(cells > 2 && cells <= 21 && chi2 < 45.4, "default chain chi2 %g over %d cells", chi2, cells);
}

/* The same seed gives the same tokens; reset restarts the stream. */
static void test_reproducible(void) {
    nc_sampler_params sp;
    nc_sampler_params_default(&sp);
    sp.n_dry_breakers = 0;
    sp.seed = 5;
    sp.temp = 1.5f;
    nc_sampler *a = make(&sp, 5), *b = make(&sp, 5);
    int32_t first[100];
    int same = 1, varied = 0;
    for (int i = 0; i < 100; i++) {
        first[i] = nc_sampler_sample(a, L5, NULL, 0, 0, NULL);
        same &= first[i] == nc_sampler_sample(b, L5, NULL, 0, 0, NULL);
        varied |= first[i] != first[0];
    }
    CHECK(same && varied);
    nc_sampler_reset(a, 5);
    same = 1;
    for (int i = 0; i < 100; i++) same &= first[i] == nc_sampler_sample(a, L5, NULL, 0, 0, NULL);
    CHECK(same);
    nc_sampler_free(a);
    nc_sampler_free(b);
}

static void test_order(void) {
    /* temperature before top-p (ours) flattens first and keeps more than top-p before it (llama.cpp) */
    float p[5];
    nc_sampler_params sp = neutral("temperature;top_p");
    sp.temp = 2;
    sp.top_p = 0.8f;
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 4); /* cumulative at T=2: .40 .64 .79 .91 */
    sp.samplers = "top_p;temperature";
    CHECK(dist(&sp, L5, 5, NULL, 0, p) == 2);
    /* the chain as built */
    nc_sampler_params_default(&sp);
    sp.n_dry_breakers = 0;
    nc_sampler *s = make(&sp, 5);
    CHECK(strcmp(nc_sampler_describe(s), "temperature 0.8 -> top-k 40 -> top-p 0.95 -> min-p 0.05 -> dist") == 0);
    nc_sampler_free(s);
    sp.repeat_penalty = 1.1f;
    sp.samplers = "min-p, Top_K;temp";
    s = make(&sp, 5);
    CHECK(strcmp(nc_sampler_describe(s), "min-p 0.05 -> top-k 40 -> temperature 0.8 -> dist") == 0);
    nc_sampler_free(s);
    /* epsilon and eta run after min-p by default (transformers' warpers: ... typical, epsilon, eta) */
    nc_sampler_params_default(&sp);
    sp.n_dry_breakers = 0;
    sp.epsilon_cutoff = 3e-4f;
    sp.eta_cutoff = 2e-3f;
    s = make(&sp, 5);
    CHECK(strcmp(nc_sampler_describe(s),
                 "temperature 0.8 -> top-k 40 -> top-p 0.95 -> min-p 0.05 -> epsilon 0.0003 -> eta 0.002 -> dist") == 0);
    nc_sampler_free(s);
}

static void test_explain(void) {
    nc_sampler_params sp;
    nc_sampler_params_default(&sp);
    sp.n_dry_breakers = 0;
    sp.explain = true;
    sp.temp = 1;
    sp.top_k = 4;
    sp.top_p = 0.9f;
    sp.min_p = 0.1f;
    nc_sampler *s = make(&sp, 5);
    int32_t t = nc_sampler_sample(s, L5, NULL, 0, 0, NULL);
    const nc_explain *e = nc_sampler_explain(s);
    CHECK(e->n_stages == 4);
    CHECK(!strcmp(e->stage[0].name, "top-k") && e->stage[0].n_before == 5 && e->stage[0].n_after == 4);
    CHECK_NEAR(e->stage[0].mass, 1 - 0.033544139, 2e-6);
    /* top-p .9 over the renormalised top 4: .6307 .2320 .0854 -> kept 3, mass .9481 */
    CHECK(!strcmp(e->stage[1].name, "top-p") && e->stage[1].n_after == 3);
    CHECK(strstr(e->stage[1].what, "top-p 0.9: kept 3 of 4, mass 0.948") != NULL);
    /* min-p .1: p_2 / p_0 = e^-2 = .135 kept */
    CHECK(!strcmp(e->stage[2].name, "min-p") && e->stage[2].n_after == 3 && e->stage[2].mass == 1.0);
    CHECK(!strcmp(e->stage[3].name, "dist") && e->n_candidates == 3 && e->token == t);
    CHECK(e->n_top == 3 && e->top[0].token == 0 && e->top[1].token == 1);
    CHECK_NEAR(e->top[0].p, 0.665240956, 2e-6);
    nc_sampler_free(s);
    sp.explain = false;
    s = make(&sp, 5);
    CHECK(nc_sampler_explain(s) == NULL);
    nc_sampler_free(s);
}

static void test_logprobs(void) {
    nc_sampler_params sp = neutral("top_k");
    sp.top_k = 2;
    sp.temp = 0;
    sp.samplers = "temperature;top_k";
    sp.n_logprobs = 3;
    nc_sampler *s = make(&sp, 5);
    nc_sample_info info;
    CHECK(nc_sampler_sample(s, L5, NULL, 0, 0, &info) == 0);
    /* raw: log-softmax of the model's logits, whatever the chain did */
    CHECK_NEAR(info.logprob, -0.494893139, 1e-5);
    CHECK(info.n_top == 3 && info.top[0].token == 0 && info.top[1].token == 1 && info.top[2].token == 2);
    CHECK_NEAR(info.top[2].logprob, -2.494893139, 1e-5);
    CHECK(info.p == 1.0f);
    nc_sampler_free(s);
    /* processed: the distribution it was drawn from (top-k 2 at T = 1) */
    sp.temp = 1;
    sp.logprobs_mode = NC_LOGPROBS_PROCESSED;
    s = make(&sp, 5);
    int32_t t = nc_sampler_sample(s, L5, NULL, 0, 0, &info);
    CHECK(info.token == t && info.n_top == 2);
    CHECK_NEAR(info.top[0].logprob, log(0.731058579), 1e-5);
    CHECK_NEAR(info.top[1].logprob, log(0.268941421), 1e-5);
    CHECK_NEAR(info.logprob, log(info.p), 1e-6);
    nc_sampler_free(s);
}

static void expect_refused(nc_sampler_params sp, const char *needle) {
    nc_sampler *s = NULL;
    nc_err err = {{0}};
    int rc = nc_sampler_new(&s, NULL, 5, &sp, &err);
    CHECK_MSG(rc == -1 && s == NULL && strstr(err.msg, needle), "expected an error with '%s', got rc %d '%s'", needle,
              rc, err.msg);
}

static void test_validation(void) {
    nc_sampler_params sp = neutral(NULL), bad;
    bad = sp; bad.top_p = 1.5f; expect_refused(bad, "top_p: 1.5 is outside the allowed range [0, 1]");
    bad = sp; bad.top_k = -1; expect_refused(bad, "top_k: -1 is outside the allowed range");
    bad = sp; bad.temp = -0.1f; expect_refused(bad, "temp");
    bad = sp; bad.temp = NAN; expect_refused(bad, "temp");
    bad = sp; bad.min_p = -0.1f; expect_refused(bad, "min_p");
    bad = sp; bad.typical_p = 2; expect_refused(bad, "typical_p");
    bad = sp; bad.epsilon_cutoff = 1; expect_refused(bad, "epsilon_cutoff: 1 is outside the allowed range [0, 1)");
    bad = sp; bad.eta_cutoff = -0.1f; expect_refused(bad, "eta_cutoff");
    bad = sp; bad.dynatemp_range = -1; expect_refused(bad, "dynatemp_range");
    bad = sp; bad.dynatemp_exponent = NAN; expect_refused(bad, "dynatemp_exponent");
    bad = sp; bad.repeat_penalty = 0; expect_refused(bad, "repeat_penalty");
    bad = sp; bad.presence_penalty = 3; expect_refused(bad, "presence_penalty: 3 is outside the allowed range [-2, 2]");
    bad = sp; bad.mirostat = 3; expect_refused(bad, "mirostat: 3 is outside the allowed range 0..2");
    bad = sp; bad.dry_base = 0.5f; expect_refused(bad, "dry_base");
    bad = sp; bad.n_logprobs = 21; expect_refused(bad, "n_logprobs");
    bad = sp; bad.samplers = "top_k;bogus"; expect_refused(bad, "unknown sampler stage 'bogus'");
    bad = sp; bad.samplers = "top_k;top-k"; expect_refused(bad, "listed twice");
    nc_logit_bias inf = {1, INFINITY};
    bad = sp; bad.logit_bias = &inf; bad.n_logit_bias = 1; expect_refused(bad, "finite or -inf");
    nc_sampler *s;
    nc_err err;
    CHECK(nc_sampler_new(&s, NULL, 0, &sp, &err) == -1 && strstr(err.msg, "n_vocab"));
}

/* The candidate order (descending logit, lower id first on ties) is the same whichever sort
 * produces it: the radix sort used for whole vocabularies against a plain check of the order. */
static void test_sort_order(void) {
    enum { N = 5000 };
    static float logits[N];
    static cand buf[N];
    nc_rng r;
    nc_rng_seed(&r, 5);
    for (int i = 0; i < N; i++) {
        uint64_t x = nc_rng_next(&r);
        /* many ties, both zeros, infinities, negative and positive values */
        float v = (float)((int)(x % 41) - 20) * 0.25f;
        if (x % 97 == 0) v = -INFINITY;
        if (x % 89 == 0) v = -0.0f;
        if (x % 83 == 0) v = INFINITY;
        logits[i] = v;
    }
    cand_list c;
    cands_init(&c, buf, logits, N);
    cands_sort(&c);
    int ok = c.n == N;
    for (int i = 1; i < c.n && ok; i++) {
        const cand *a = &c.data[i - 1], *b = &c.data[i];
        ok = a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
    }
    CHECK_MSG(ok, "candidates out of order after sorting");
}

/* Greedy decoding with a logit bias (the step that skips the vocabulary's candidate list): the
 * highest logit after the bias, ties to the lower id, a NaN as -inf; worked out here by brute
 * force over random logits with many ties, NaNs and biases (some banning, some on one token
 * twice), and the same token as the explain record's chain, which builds the whole list. */
static void test_greedy_bias(void) {
    enum { N = 300 };
    float logits[N];
    nc_logit_bias bias[8];
    srand(7);
    int bad = 0, bad_explain = 0;
    for (int rep = 0; rep < 400; rep++) {
        for (int i = 0; i < N; i++) logits[i] = (float)(rand() % 12) - (rep % 3 ? 0 : 20);
        if (rep % 4 == 0) logits[rand() % N] = NAN;
        if (rep % 5 == 0)
            for (int i = 0; i < N; i++) logits[i] = rep % 10 ? NAN : -INFINITY; /* nothing above -inf */
        int nb = rep % 8;
        for (int b = 0; b < nb; b++) {
            int r = rand() % 3;
            bias[b].token = b == 3 ? bias[0].token : rand() % N;
            bias[b].bias = r == 0 ? -INFINITY : (float)(rand() % 7) - 3;
        }
        int want = -1;
        float top = 0;
        for (int i = 0; i < N; i++) {
            float v = isnan(logits[i]) ? -INFINITY : logits[i];
            for (int b = 0; b < nb; b++)
                if (bias[b].token == i) v += bias[b].bias;
            if (want < 0 || v > top) want = i, top = v;
        }
        nc_sampler_params sp = neutral(NULL);
        sp.temp = 0;
        sp.logit_bias = bias;
        sp.n_logit_bias = nb;
        for (int ex = 0; ex < 2; ex++) {
            sp.explain = ex;
            nc_sampler *s = make(&sp, N);
            int got = nc_sampler_sample(s, logits, NULL, 0, 0, NULL);
            if (ex) bad_explain += got != want;
            else bad += got != want;
            nc_sampler_free(s);
        }
    }
    CHECK_MSG(bad == 0, "%d greedy steps differ from the brute-force argmax", bad);
    CHECK_MSG(bad_explain == 0, "%d explained greedy steps differ from the brute-force argmax", bad_explain);
}

int main(void) {
    test_greedy_bias();
    test_temperature();
    test_top_k_min_p();
    test_top_p();
    test_typical_sigma();
    test_epsilon_eta();
    test_dynatemp();
    test_xtc();
    test_penalties();
    test_no_repeat_ngram();
    test_dry();
    test_bias();
    test_mirostat();
    test_chi_square();
    test_reproducible();
    test_order();
    test_explain();
    test_logprobs();
    test_validation();
    test_sort_order();
    return test_summary("samplers");
}
