/* What a language binding pulls from the library (python/ is one): a generation taken one token
 * at a time (nc_gen_begin / nc_gen_next, against nc_generate's callback), freed half-way, failing
 * half-way; a whole text detokenized (nc_detokenize); the metadata enumerated (nc_model_meta_*),
 * of a GGUF file and of a Hugging Face directory. On stories260K (vocabulary 512) and qwen2's
 * directory. */
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "test.h"

static nc_model *model;
static const int32_t PROMPT[5] = {1, 403, 407, 261, 378}; /* "Once upon a time" */

static nc_context *context(int32_t n_seq, int32_t n_ctx, int64_t kv_cells) {
    nc_context *c = NULL;
    nc_err err;
    nc_context_params cp = {.n_ctx = n_ctx, .n_seq_max = n_seq, .n_threads = 2, .kv_cells = kv_cells};
    if (nc_context_new(&c, model, &cp, &err)) fprintf(stderr, "context: %s\n", err.msg);
    return c;
}

/* An event as both ways deliver it, with copies of what is only valid during the call. */
typedef struct event {
    int32_t sample, step, token;
    char text[64];
    nc_finish finish;
    bool has_info, has_explain;
    float logprob;
    int32_t n_top, explain_token, n_stages;
} event;

typedef struct events {
    event ev[256];
    int n;
} events;

static void record(events *e, const nc_gen_event *ev) {
    if (e->n == (int)(sizeof e->ev / sizeof e->ev[0])) return;
    event *r = &e->ev[e->n++];
    *r = (event){.sample = ev->sample, .step = ev->step, .token = ev->token, .finish = ev->finish,
                 .has_info = ev->info != NULL, .has_explain = ev->explain != NULL};
    int n = ev->n_text < (int)sizeof r->text - 1 ? ev->n_text : (int)sizeof r->text - 1;
    memcpy(r->text, ev->text, (size_t)n);
    if (ev->info) {
        r->logprob = ev->info->logprob;
        r->n_top = ev->info->n_top;
    }
    if (ev->explain) {
        r->explain_token = ev->explain->token;
        r->n_stages = ev->explain->n_stages;
    }
}

static int on_event(const nc_gen_event *ev, void *user) {
    record(user, ev);
    return 0;
}

static bool same_events(const events *a, const events *b) {
    if (a->n != b->n) return false;
    for (int i = 0; i < a->n; i++) {
        const event *x = &a->ev[i], *y = &b->ev[i];
        if (x->sample != y->sample || x->step != y->step || x->token != y->token || strcmp(x->text, y->text) ||
            x->finish != y->finish || x->has_info != y->has_info || x->has_explain != y->has_explain ||
            x->logprob != y->logprob || x->n_top != y->n_top || x->explain_token != y->explain_token ||
            x->n_stages != y->n_stages)
            return false;
    }
    return true;
}

/* Pull every event of a generation; returns nc_gen_next's last status. */
static int pull_prompt(nc_context *c, const int32_t *prompt, int32_t n_prompt, const nc_gen_params *gp, events *e,
                       nc_gen_result *res) {
    nc_gen *g;
    nc_err err;
    if (nc_gen_begin(&g, c, model, prompt, n_prompt, gp, &err)) {
        fprintf(stderr, "begin: %s\n", err.msg);
        return -1;
    }
    nc_gen_event ev;
    int r;
    while ((r = nc_gen_next(g, &ev, &err)) == 1) record(e, &ev);
    if (r == 0) {
        CHECK(nc_gen_next(g, &ev, &err) == 0); /* done stays done */
        CHECK(nc_gen_get_result(g, res, &err) == 0);
    }
    nc_gen_free(g);
    return r;
}

static int pull(nc_context *c, const nc_gen_params *gp, events *e, nc_gen_result *res) {
    return pull_prompt(c, PROMPT, 5, gp, e, res);
}

static bool same_tokens(const nc_gen_result *a, const nc_gen_result *b) {
    if (a->n_samples != b->n_samples) return false;
    for (int32_t i = 0; i < a->n_samples; i++) {
        const nc_gen_sample *x = &a->samples[i], *y = &b->samples[i];
        if (x->n_tokens != y->n_tokens || x->finish != y->finish ||
            memcmp(x->tokens, y->tokens, (size_t)x->n_tokens * sizeof(int32_t)))
            return false;
    }
    return true;
}

/* Three samples with logprobs and explanations: the events pulled are the callback's, in order. */
static void test_pull_is_callback(void) {
    nc_gen_params gp = {.stop = {.max_tokens = 30}, .n_samples = 3};
    nc_sampler_params_default(&gp.sampling);
    gp.sampling.seed = 7;
    gp.sampling.temp = 1.0f;
    gp.sampling.n_logprobs = 3;
    gp.sampling.explain = true;
    const char *stops[1] = {"."};
    gp.stop.stop = stops;
    gp.stop.n_stop = 1;
    nc_context *c = context(3, 64, 0);
    static events called, pulled;
    nc_gen_result want, got;
    nc_err err;
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, on_event, &called, &want, &err) == 0);
    CHECK(pull(c, &gp, &pulled, &got) == 0);
    CHECK(called.n > 3 && called.ev[0].has_info && called.ev[0].has_explain && called.ev[0].n_top == 3);
    CHECK_MSG(same_events(&called, &pulled), "%d events called, %d pulled", called.n, pulled.n);
    CHECK(same_tokens(&want, &got));
    CHECK(got.n_cached == 4 && got.t_gen > 0); /* the prompt came from the prefix cache the second time */
    int last_of_sample[3] = {-1, -1, -1};
    for (int i = 0; i < pulled.n; i++) last_of_sample[pulled.ev[i].sample] = i;
    for (int s = 0; s < 3; s++) CHECK(last_of_sample[s] >= 0 && pulled.ev[last_of_sample[s]].finish != NC_FINISH_NONE);
    nc_gen_result_free(&want);
    nc_gen_result_free(&got);
    nc_context_free(c);
}

/* Prompt lookup on a prompt that repeats itself: the same greedy tokens, pulled, with the
 * statistics of the drafts. */
static void test_pull_speculative(void) {
    const char *text = "Once upon a time, there was a little girl named Lily. She loved to play. Once upon a time, "
                       "there was a little girl named Lily. She loved to play. Once upon a time, there was";
    int32_t ids[128];
    nc_err err;
    int n = nc_tokenize(model, text, strlen(text), true, false, ids, 128, &err);
    CHECK(n > 40 && n < 128);
    nc_gen_params gp = {.stop = {.max_tokens = 60}};
    nc_sampler_params_default(&gp.sampling);
    gp.sampling.temp = 0;
    nc_context *c = context(1, 256, 0);
    static events plain, spec;
    nc_gen_result a, b;
    CHECK(pull_prompt(c, ids, n, &gp, &plain, &a) == 0);
    gp.spec.lookup_ngram = 3;
    CHECK(pull_prompt(c, ids, n, &gp, &spec, &b) == 0);
    CHECK(same_tokens(&a, &b));
    CHECK_MSG(a.spec.drafted == 0 && b.spec.drafted > 0 && b.spec.accepted > 0 && b.spec.passes < b.spec.generated,
              "drafted %lld, accepted %lld, %lld passes for %lld tokens", (long long)b.spec.drafted,
              (long long)b.spec.accepted, (long long)b.spec.passes, (long long)b.spec.generated);
    nc_gen_result_free(&a);
    nc_gen_result_free(&b);
    nc_context_free(c);
}

/* Freed after three tokens: the result so far says so, the sequence keeps its cells until cleared,
 * which gives every block back, and the context generates as before. */
static void test_free_half_way(void) {
    nc_gen_params gp = {.stop = {.max_tokens = 40}};
    nc_sampler_params_default(&gp.sampling);
    gp.sampling.seed = 3;
    nc_context *c = context(1, 64, 0);
    static events whole;
    nc_gen_result full;
    CHECK(pull(c, &gp, &whole, &full) == 0);
    nc_kv_seq_clear(c, 0);
    nc_gen *g;
    nc_err err;
    CHECK(nc_gen_begin(&g, c, model, PROMPT, 5, &gp, &err) == 0);
    nc_gen_event ev;
    for (int i = 0; i < 3; i++) CHECK(nc_gen_next(g, &ev, &err) == 1 && ev.token == whole.ev[i].token);
    nc_gen_result part;
    CHECK(nc_gen_get_result(g, &part, &err) == 0);
    CHECK(part.n_samples == 1 && part.samples[0].n_tokens == 3 && part.samples[0].finish == NC_FINISH_NONE);
    CHECK(memcmp(part.samples[0].tokens, full.samples[0].tokens, 3 * sizeof(int32_t)) == 0);
    nc_gen_result_free(&part);
    nc_gen_free(g);
    CHECK(nc_kv_seq_len(c, 0) > 0);
    nc_kv_seq_clear(c, 0);
    nc_kv_stats st;
    nc_kv_get_stats(c, &st);
    CHECK_MSG(st.used == 0, "%d blocks still used", st.used);
    static events again;
    nc_gen_result redo;
    CHECK(pull(c, &gp, &again, &redo) == 0);
    CHECK(same_events(&whole, &again) && same_tokens(&full, &redo));
    nc_gen_result_free(&full);
    nc_gen_result_free(&redo);
    nc_gen_free(NULL);
    nc_context_free(c);
}

/* What begin refuses, and a pass that fails half-way (the pool of one block runs out). */
static void test_errors(void) {
    nc_gen_params gp = {.stop = {.max_tokens = 0}};
    nc_sampler_params_default(&gp.sampling);
    gp.sampling.ignore_eos = true;
    nc_context *c = context(1, 4, 0);
    nc_gen *g = (nc_gen *)&gp;
    nc_err err;
    CHECK(nc_gen_begin(&g, c, model, PROMPT, 5, &gp, &err) == -1 && g == NULL && strstr(err.msg, "more than the context"));
    gp.n_samples = 2;
    CHECK(nc_gen_begin(&g, c, model, PROMPT, 1, &gp, &err) == -1 && g == NULL && strstr(err.msg, "n_seq_max >= 2"));
    nc_context_free(c);
    gp.n_samples = 1;
    c = context(1, 1024, NC_KV_BLOCK);
    CHECK(nc_gen_begin(&g, c, model, PROMPT, 5, &gp, &err) == 0);
    nc_gen_event ev;
    int r, n = 0;
    while ((r = nc_gen_next(g, &ev, &err)) == 1) n++;
    CHECK_MSG(r == -1 && n == NC_KV_BLOCK - 5 + 1, "status %d after %d tokens: %s", r, n, err.msg);
    CHECK(nc_gen_next(g, &ev, &err) == -1 && strstr(err.msg, "failed earlier"));
    nc_gen_free(g);
    nc_context_free(c);
}

static void test_detokenize(void) {
    char buf[64];
    /* the first piece loses its leading space (the tokenizer adds a space prefix); a BOS first is
     * that piece, empty without special, and the space after it stays (llama.cpp's detokenize) */
    int n = nc_detokenize(model, PROMPT + 1, 4, false, buf, sizeof buf);
    CHECK(n == 16 && !memcmp(buf, "Once upon a time", 16));
    n = nc_detokenize(model, PROMPT, 5, false, buf, sizeof buf);
    CHECK(n == 17 && !memcmp(buf, " Once upon a time", 17));
    n = nc_detokenize(model, PROMPT, 5, true, buf, sizeof buf);
    CHECK(n == 20 && !memcmp(buf, "<s> Once upon a time", 20));
    CHECK(nc_detokenize(model, PROMPT + 1, 4, false, buf, 4) == 16); /* too small: the length to retry with */
    CHECK(nc_detokenize(model, PROMPT, 0, false, buf, sizeof buf) == 0);
    int32_t bad[2] = {403, 512};
    CHECK(nc_detokenize(model, bad, 2, false, buf, sizeof buf) == -1);
}

/* stories260K's 19 keys, 3 of them arrays (the vocabulary), which are left out. */
static void test_metadata(void) {
    CHECK(nc_model_meta_count(model) == 16);
    CHECK(nc_model_meta_key(model, -1) == NULL && nc_model_meta_key(model, 16) == NULL);
    char buf[64];
    int found = 0;
    for (int32_t i = 0; i < nc_model_meta_count(model); i++) {
        const char *key = nc_model_meta_key(model, i);
        int n = nc_model_meta_value(model, i, buf, (int)sizeof buf - 1);
        CHECK(key && n >= 0 && n < (int)sizeof buf);
        if (!key || n < 0 || n >= (int)sizeof buf) continue;
        buf[n] = 0;
        CHECK(strncmp(key, "tokenizer.ggml.token", 20) != 0 && strcmp(key, "tokenizer.ggml.scores") != 0);
        if (!strcmp(key, "general.architecture")) found += !strcmp(buf, "llama");
        if (!strcmp(key, "llama.context_length")) found += !strcmp(buf, "2048");
        if (!strcmp(key, "tokenizer.ggml.seperator_token_id")) found += !strcmp(buf, "4294967295");
        if (!strcmp(key, "llama.attention.layer_norm_rms_epsilon")) found += !strcmp(buf, "0.000010");
    }
    CHECK_MSG(found == 4, "%d of 4 values as expected", found);
    CHECK(!strcmp(nc_model_meta_key(model, 0), "tokenizer.ggml.model"));
    CHECK(nc_model_meta_value(model, 0, buf, 2) == 5); /* too small: the length, nothing written */
    CHECK(nc_model_meta_value(model, 16, buf, sizeof buf) == -1);
}

/* A Hugging Face directory's one key: its chat template, as nc_model_meta_str gives it. */
static void test_metadata_hf(const char *shared) {
    char path[4096];
    snprintf(path, sizeof path, "%s/archs/qwen2/hf", shared);
    nc_model *m;
    nc_err err;
    if (nc_model_load(&m, path, &err)) {
        CHECK_MSG(0, "cannot load %s: %s", path, err.msg);
        return;
    }
    size_t len = 0;
    const char *tmpl = nc_model_meta_str(m, "tokenizer.chat_template", &len);
    CHECK(tmpl && len > 0 && nc_model_meta_count(m) == 1);
    CHECK(!strcmp(nc_model_meta_key(m, 0), "tokenizer.chat_template") && nc_model_meta_key(m, 1) == NULL);
    char *buf = malloc(len);
    CHECK(buf && nc_model_meta_value(m, 0, buf, (int)len) == (int)len && !memcmp(buf, tmpl, len));
    CHECK(nc_model_meta_value(m, 1, buf, (int)len) == -1);
    free(buf);
    nc_model_free(m);
}

int main(void) {
    const char *shared = getenv("SHARED");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", shared ? shared : "../shared");
    nc_err err;
    if (nc_model_load(&model, path, &err)) {
        CHECK_MSG(0, "cannot load %s: %s", path, err.msg);
        return test_summary("binding_api");
    }
    test_pull_is_callback();
    test_pull_speculative();
    test_free_half_way();
    test_errors();
    test_detokenize();
    test_metadata();
    test_metadata_hf(shared ? shared : "../shared");
    nc_model_free(model);
    return test_summary("binding_api");
}
