/* The autoregressive driver: prefill once, share the prompt's cache between the samples, then
 * one batched forward call per step for every unfinished sample. Each sample has its own
 * sampler and stop checker; the driver only moves tokens between them and the model, and makes
 * room in a full cache when a context policy (kv/kv_policy.h) says how. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "sampling/sampler.h"

double sampling_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct gen_seq {
    nc_sampler *sampler;
    nc_stopper *stopper;
    int32_t *history;  /* prompt, then generated tokens: the whole text, whatever the cache forgot */
    int32_t n_history, cap_history;
    int32_t row;       /* its entry in the last batch */
    nc_finish finish;
    int32_t n_evictions, n_evicted;
} gen_seq;

typedef struct gen_run {
    nc_context *c;
    const nc_model *m;
    int32_t n_prompt, n_vocab, n_seq, n_ctx;
    int32_t max_tokens;  /* what the stop rules count to (0: no limit) */
    bool ctx_bound;      /* max_tokens is the room left in the context, not the caller's limit */
    nc_ctx_policy policy;
    int32_t n_cached;    /* prompt tokens the prefix cache held */
    bool logprobs;     /* the events carry nc_sample_info */
    gen_seq *seq;
    nc_batch_entry *batch;
    float *first_logits;  /* the prompt's last row, shared by every sample's first step */
} gen_run;

void nc_gen_result_free(nc_gen_result *r) {
    if (!r) return;
    for (int32_t i = 0; r->samples && i < r->n_samples; i++) free(r->samples[i].tokens);
    free(r->samples);
    memset(r, 0, sizeof *r);
}

static void run_free(gen_run *g) {
    for (int32_t i = 0; g->seq && i < g->n_seq; i++) {
        nc_sampler_free(g->seq[i].sampler);
        nc_stopper_free(g->seq[i].stopper);
        free(g->seq[i].history);
    }
    free(g->seq);
    free(g->batch);
    free(g->first_logits);
}

static int run_init(gen_run *g, const int32_t *prompt, const nc_gen_params *p, nc_err *err) {
    g->seq = calloc((size_t)g->n_seq, sizeof *g->seq);
    g->batch = malloc((size_t)(g->n_prompt > g->n_seq ? g->n_prompt : g->n_seq) * sizeof *g->batch);
    g->first_logits = malloc((size_t)g->n_vocab * sizeof *g->first_logits);
    if (!g->seq || !g->batch || !g->first_logits) return nc_fail(err, "out of memory");
    nc_stop_params sp = p->stop;
    sp.max_tokens = g->max_tokens;
    for (int32_t i = 0; i < g->n_seq; i++) {
        gen_seq *s = &g->seq[i];
        nc_sampler_params smp = p->sampling;
        smp.seed = p->sampling.seed + (uint64_t)i;
        if (nc_sampler_new(&s->sampler, g->m, g->n_vocab, &smp, err) || nc_stopper_new(&s->stopper, g->m, &sp, err))
            return -1;
        s->cap_history = g->n_prompt + (g->max_tokens ? g->max_tokens : g->n_ctx);
        s->history = malloc((size_t)s->cap_history * sizeof *s->history);
        if (!s->history) return nc_fail(err, "out of memory");
        memcpy(s->history, prompt, (size_t)g->n_prompt * sizeof *prompt);
        s->n_history = g->n_prompt;
    }
    return 0;
}

const float *sampling_prefill(nc_context *c, const int32_t *prompt, int32_t n_prompt, nc_batch_entry *batch,
                              int32_t *n_cached, nc_err *err) {
    nc_kv_seq_clear(c, 0);
    int32_t from = nc_kv_seq_reuse_prefix(c, 0, prompt, n_prompt - 1);
    for (int32_t i = from; i < n_prompt; i++) batch[i - from] = (nc_batch_entry){prompt[i], i, 0, i == n_prompt - 1};
    if (nc_forward(c, batch, n_prompt - from, err)) return NULL;
    *n_cached = from;
    return nc_logits(c, n_prompt - 1 - from);
}

/* Prompt into sequence 0 (what the prefix cache holds of it is not computed again), then its cache
 * copied to every other sample's sequence. */
static int prefill(gen_run *g, const int32_t *prompt, nc_err *err) {
    const float *last = sampling_prefill(g->c, prompt, g->n_prompt, g->batch, &g->n_cached, err);
    if (!last) return -1;
    memcpy(g->first_logits, last, (size_t)g->n_vocab * sizeof *g->first_logits);
    for (int32_t i = 1; i < g->n_seq; i++)
        if (nc_kv_seq_copy(g->c, 0, i, err))
            return nc_fail_prefix(err, "%d samples need a context with n_seq_max >= %d", g->n_seq, g->n_seq);
    return 0;
}

/* Draw the next token of one sample and tell the caller. Returns -1 when the callback aborts (or
 * the history cannot grow). */
static int step_one(gen_run *g, int32_t i, int32_t step, nc_gen_callback cb, void *user, nc_err *err) {
    gen_seq *s = &g->seq[i];
    if (s->n_history == s->cap_history) { /* only without max_tokens, when a policy makes room */
        int32_t *grown = realloc(s->history, 2 * (size_t)s->cap_history * sizeof *grown);
        if (!grown) return nc_fail(err, "out of memory");
        s->history = grown;
        s->cap_history *= 2;
    }
    const float *row = step == 0 ? g->first_logits : nc_logits(g->c, s->row);
    nc_sample_info info, *want = g->logprobs ? &info : NULL;
    int32_t tok = nc_sampler_sample(s->sampler, row, s->history, s->n_history, g->n_prompt, want);
    nc_gen_event ev = {.sample = i, .step = step, .token = tok, .info = want,
                       .explain = nc_sampler_explain(s->sampler)};
    ev.finish = nc_stopper_push(s->stopper, tok, &ev.text, &ev.n_text);
    if (ev.finish == NC_FINISH_LENGTH && g->ctx_bound) ev.finish = NC_FINISH_CONTEXT;
    s->finish = ev.finish;
    s->history[s->n_history++] = tok;
    if (cb && cb(&ev, user)) return nc_fail(err, "generation aborted by the callback");
    return 0;
}

static int collect(const gen_run *g, nc_gen_result *out, nc_err *err) {
    out->samples = calloc((size_t)g->n_seq, sizeof *out->samples);
    if (!out->samples) return nc_fail(err, "out of memory");
    out->n_samples = g->n_seq;
    for (int32_t i = 0; i < g->n_seq; i++) {
        const gen_seq *s = &g->seq[i];
        nc_gen_sample *r = &out->samples[i];
        r->n_tokens = s->n_history - g->n_prompt;
        r->finish = s->finish;
        r->n_evictions = s->n_evictions;
        r->n_evicted = s->n_evicted;
        r->tokens = malloc((size_t)(r->n_tokens > 0 ? r->n_tokens : 1) * sizeof *r->tokens);
        if (!r->tokens) return nc_fail(err, "out of memory");
        memcpy(r->tokens, s->history + g->n_prompt, (size_t)r->n_tokens * sizeof *r->tokens);
    }
    return 0;
}

static int generate(gen_run *g, const int32_t *prompt, nc_gen_callback cb, void *user, nc_gen_result *out,
                    nc_err *err) {
    double t0 = sampling_now();
    if (prefill(g, prompt, err)) return -1;
    double t1 = sampling_now();
    for (int32_t step = 0;; step++) {
        int32_t n_batch = 0;
        for (int32_t i = 0; i < g->n_seq; i++) {
            gen_seq *s = &g->seq[i];
            if (s->finish) continue;
            if (step_one(g, i, step, cb, user, err)) return -1;
            if (s->finish) continue;
            if (nc_kv_seq_len(g->c, i) == g->n_ctx) { /* only with a policy: otherwise max_tokens ends it first */
                int32_t dropped = nc_kv_seq_make_room(g->c, i, &g->policy, g->n_prompt, err);
                if (dropped < 0) return -1;
                s->n_evictions++;
                s->n_evicted += dropped;
            }
            s->row = n_batch;
            /* after its last cell's position: a context shift or sinks moved the cells back */
            g->batch[n_batch++] = (nc_batch_entry){s->history[s->n_history - 1], nc_kv_seq_pos_next(g->c, i), i, true};
        }
        if (n_batch == 0) break;
        if (nc_forward(g->c, g->batch, n_batch, err)) return -1;
    }
    out->t_prompt = t1 - t0;
    out->n_cached = g->n_cached;
    out->t_gen = sampling_now() - t1;
    return collect(g, out, err);
}

int nc_generate(nc_context *c, const nc_model *m, const int32_t *prompt, int32_t n_prompt, const nc_gen_params *p,
                nc_gen_callback cb, void *user, nc_gen_result *out, nc_err *err) {
    memset(out, 0, sizeof *out);
    int32_t n_seq = p->n_samples ? p->n_samples : 1, n_ctx = nc_context_n_ctx(c);
    if (n_seq < 1) return nc_fail(err, "n_samples: %d is not positive", n_seq);
    if (p->stop.max_tokens < 0) return nc_fail(err, "max_tokens: %d is negative", p->stop.max_tokens);
    if (n_prompt < 1) return nc_fail(err, "the prompt is empty");
    if (n_prompt > n_ctx)
        return nc_fail(err, "the prompt has %d tokens, more than the context of %d", n_prompt, n_ctx);
    int32_t bos = nc_token_bos(m);
    if (nc_ctx_policy_check(&p->context, n_ctx, n_prompt, bos >= 0 && prompt[0] == bos, err))
        return nc_fail_prefix(err, "context policy");
    nc_model_info info;
    nc_model_get_info(m, &info);
    gen_run g = {.c = c, .m = m, .n_prompt = n_prompt, .n_vocab = info.n_vocab, .n_seq = n_seq, .n_ctx = n_ctx,
                 .max_tokens = p->stop.max_tokens, .policy = p->context, .logprobs = p->sampling.n_logprobs > 0};
    /* without a policy, positions n_prompt..n_ctx-1 can be fed back, and one more token can be
     * drawn after them */
    int32_t room = n_ctx - n_prompt + 1;
    if (p->context.mode == NC_CTX_STOP && (g.max_tokens == 0 || g.max_tokens > room)) {
        g.max_tokens = room;
        g.ctx_bound = true;
    }
    int rc = run_init(&g, prompt, p, err) || generate(&g, prompt, cb, user, out, err) ? -1 : 0;
    run_free(&g);
    if (rc) nc_gen_result_free(out);
    return rc;
}
