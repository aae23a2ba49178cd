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
