/* The autoregressive driver: prefill once, share the prompt's cache between the samples, then
 * one batched forward call per step for every unfinished sample (with speculative decoding, its
 * drafts beside its last token). Each sample is a sequence object (seq.h); the driver only moves
 * tokens between them and the model, and makes room in a full cache when a context policy
 * (kv/kv_policy.h) says how. A generation is an object the caller pulls tokens from (nc_gen_next);
 * the tokens of one step wait in a queue until taken, and nc_generate is the loop that hands each
 * to a callback. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "sampling/sampler.h"
#include "sampling/seq.h"
#include "sampling/spec.h"

double sampling_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One token drawn, kept until the caller takes it: its event, with the text, log-probabilities and
 * explanation copied (the sequence's own are overwritten by its next token). */
typedef struct gen_queued {
    nc_gen_event ev;
    size_t text_at;        /* its text in gen->text */
    nc_sample_info info;
    nc_explain explain;
    bool has_info, has_explain;
} gen_queued;

struct nc_gen {
    nc_context *c;
    int32_t n_prompt, n_seq, n_ctx;
    nc_ctx_policy policy;
    int32_t n_cached;    /* prompt tokens the prefix cache held */
    seq *seq;
    seq **drafting;      /* the sequences proposing drafts this step */
    int32_t *room;
    int32_t *row;        /* per sequence: its entry in the last batch */
    nc_batch_entry *batch;
    spec_drafter *drafter;
    gen_queued *queue;   /* the tokens of the last step not yet taken, from queue[head] */
    int32_t n_queued, head, cap_queued;
    char *text;          /* their texts */
    size_t n_text, cap_text;
    bool stepped;        /* the sequences have drawn from the last forward pass */
    bool done, failed, oom;
    double t_begin, t_prefilled, t_end, t_model;
};

void nc_gen_result_free(nc_gen_result *r) {
    if (!r) return;
    for (int32_t i = 0; r->samples && i < r->n_samples; i++) free(r->samples[i].tokens);
    free(r->samples);
    memset(r, 0, sizeof *r);
}

void nc_gen_free(nc_gen *g) {
    if (!g) return;
    for (int32_t i = 0; g->seq && i < g->n_seq; i++) seq_free(&g->seq[i]);
    free(g->seq);
    free(g->drafting);
    free(g->room);
    free(g->row);
    free(g->batch);
    spec_drafter_free(g->drafter);
    free(g->queue);
    free(g->text);
    free(g);
}

static int run_init(nc_gen *g, const nc_model *m, const int32_t *prompt, const nc_gen_params *p, int32_t max_tokens,
                    bool ctx_bound, nc_err *err) {
    nc_model_info info;
    nc_model_get_info(m, &info);
    bool spec = spec_wanted(&p->spec);
    int32_t per_seq = 1 + (spec ? (p->spec.draft_max ? p->spec.draft_max : 16) : 0);
    int32_t cap = g->n_prompt > g->n_seq * per_seq ? g->n_prompt : g->n_seq * per_seq;
    g->seq = calloc((size_t)g->n_seq, sizeof *g->seq);
    g->drafting = malloc((size_t)g->n_seq * sizeof *g->drafting);
    g->room = malloc((size_t)g->n_seq * sizeof *g->room);
    g->row = malloc((size_t)g->n_seq * sizeof *g->row);
    g->batch = malloc((size_t)cap * sizeof *g->batch);
    /* a step draws at most every draft and the token after them, for every sequence */
    g->cap_queued = g->n_seq * per_seq;
    g->queue = malloc((size_t)g->cap_queued * sizeof *g->queue);
    if (!g->seq || !g->drafting || !g->room || !g->row || !g->batch || !g->queue) return nc_fail(err, "out of memory");
    if (spec && spec_drafter_new(&g->drafter, &p->spec, m, err)) return nc_fail_prefix(err, "speculative decoding");
    nc_stop_params sp = p->stop;
    sp.max_tokens = max_tokens;
    seq_config cfg = {.m = m, .n_vocab = info.n_vocab, .sampling = &p->sampling, .stop = &sp, .ctx_bound = ctx_bound,
                      .drafter = g->drafter};
    for (int32_t i = 0; i < g->n_seq; i++)
        if (seq_init(&g->seq[i], &cfg, i, (uint64_t)i, prompt, g->n_prompt, err)) return -1;
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
 * copied to every other sample's sequence; every sample's first draw reads the prompt's last row. */
static int prefill(nc_gen *g, const int32_t *prompt, nc_err *err) {
    if (!sampling_prefill(g->c, prompt, g->n_prompt, g->batch, &g->n_cached, err)) return -1;
    for (int32_t i = 0; i < g->n_seq; i++) g->row[i] = g->n_prompt - 1 - g->n_cached;
    for (int32_t i = 1; i < g->n_seq; i++)
        if (nc_kv_seq_copy(g->c, 0, i, err))
            return nc_fail_prefix(err, "%d samples need a context with n_seq_max >= %d", g->n_seq, g->n_seq);
    return 0;
}

/* Every token drawn waits in the queue, with copies of what the sequence will overwrite. */
static int enqueue(void *user, seq *s, const seq_token *t) {
    nc_gen *g = user;
    if (g->n_text + (size_t)t->n_text > g->cap_text) {
        size_t cap = 2 * g->cap_text > g->n_text + (size_t)t->n_text ? 2 * g->cap_text : g->n_text + (size_t)t->n_text;
        char *grown = realloc(g->text, cap);
        if (!grown) {
            g->oom = true;
            return 1;
        }
        g->text = grown;
        g->cap_text = cap;
    }
    gen_queued *q = &g->queue[g->n_queued++]; /* cap_queued: no step draws more */
    q->ev = (nc_gen_event){.sample = (int32_t)(s - g->seq), .step = seq_n_generated(s) - 1, .token = t->token,
                           .n_text = t->n_text, .finish = t->finish};
    q->text_at = g->n_text;
    if (t->n_text) memcpy(g->text + g->n_text, t->text, (size_t)t->n_text);
    g->n_text += (size_t)t->n_text;
    if ((q->has_info = t->info != NULL)) q->info = *t->info;
    if ((q->has_explain = t->explain != NULL)) q->explain = *t->explain;
    return 0;
}

static int collect(const nc_gen *g, nc_gen_result *out, nc_err *err) {
    out->samples = calloc((size_t)g->n_seq, sizeof *out->samples);
    if (!out->samples) return nc_fail(err, "out of memory");
    out->n_samples = g->n_seq;
    for (int32_t i = 0; i < g->n_seq; i++) {
        const seq *s = &g->seq[i];
        nc_gen_sample *r = &out->samples[i];
        r->n_tokens = seq_n_generated(s);
        r->finish = s->finish;
        r->n_evictions = s->n_evictions;
        r->n_evicted = s->n_evicted;
        r->tokens = malloc((size_t)(r->n_tokens > 0 ? r->n_tokens : 1) * sizeof *r->tokens);
        if (!r->tokens) return nc_fail(err, "out of memory");
        memcpy(r->tokens, s->tokens + s->n_prompt, (size_t)r->n_tokens * sizeof *r->tokens);
        if (s->spec) {
            const nc_spec_stats *st = &s->spec->stats;
            out->spec.drafted += st->drafted;
            out->spec.accepted += st->accepted;
            out->spec.generated += st->generated;
            out->spec.draft_rows += st->draft_rows;
            out->spec.passes = st->passes > out->spec.passes ? st->passes : out->spec.passes;
        }
    }
    return 0;
}

/* The unfinished samples' drafts for the next pass, within their room. */
static int propose(nc_gen *g, nc_err *err) {
    int32_t n = 0;
    for (int32_t i = 0; i < g->n_seq; i++) {
        seq *s = &g->seq[i];
        if (s->finish) continue;
        g->room[n] = seq_draft_room(s, g->c);
        g->drafting[n++] = s;
    }
    return spec_propose(g->drafter, g->drafting, g->room, n, err);
}

/* Every unfinished sample draws from the last pass: its tokens go to the queue. */
static int draw(nc_gen *g, nc_err *err) {
    g->n_queued = g->head = 0;
    g->n_text = 0;
    for (int32_t i = 0; i < g->n_seq; i++)
        if (!g->seq[i].finish && seq_step(&g->seq[i], g->c, g->row[i], enqueue, g, err) < 0)
            return g->oom ? nc_fail(err, "out of memory") : -1;
    g->stepped = true;
    return 0;
}

/* The next forward pass: room made in full caches, drafts proposed, every unfinished sample's
 * entries in one batch. None left: the generation is done. */
static int advance(nc_gen *g, nc_err *err) {
    int32_t n_batch = 0;
    for (int32_t i = 0; i < g->n_seq; i++) { /* a full cache: only with a policy, else max_tokens ends it first */
        seq *s = &g->seq[i];
        if (!s->finish && nc_kv_seq_len(g->c, i) == g->n_ctx && seq_make_room(s, g->c, &g->policy, err)) return -1;
    }
    if (g->drafter && propose(g, err)) return -1;
    for (int32_t i = 0; i < g->n_seq; i++)
        if (!g->seq[i].finish) g->row[i] = seq_batch(&g->seq[i], g->c, g->batch, &n_batch);
    if (n_batch == 0) {
        g->done = true;
        g->t_end = sampling_now();
        return 0;
    }
    double tf = sampling_now();
    if (nc_forward(g->c, g->batch, n_batch, err)) return -1;
    g->t_model += sampling_now() - tf;
    g->stepped = false;
    return 0;
}

int nc_gen_begin(nc_gen **out, nc_context *c, const nc_model *m, const int32_t *prompt, int32_t n_prompt,
                 const nc_gen_params *p, nc_err *err) {
    *out = NULL;
    int32_t n_seq = p->n_samples ? p->n_samples : 1, n_ctx = nc_context_n_ctx(c);
    if (n_seq < 1) return nc_fail(err, "n_samples: %d is not positive", n_seq);
    if (p->stop.max_tokens < 0) return nc_fail(err, "max_tokens: %d is negative", p->stop.max_tokens);
    if (n_prompt < 1) return nc_fail(err, "the prompt is empty");
    if (n_prompt > n_ctx)
        return nc_fail(err, "the prompt has %d tokens, more than the context of %d", n_prompt, n_ctx);
    int32_t bos = nc_token_bos(m);
    if (nc_ctx_policy_check(&p->context, n_ctx, n_prompt, bos >= 0 && prompt[0] == bos, err) ||
        nc_ctx_policy_supported(c, &p->context, err))
        return nc_fail_prefix(err, "context policy");
    nc_gen *g = calloc(1, sizeof *g);
    if (!g) return nc_fail(err, "out of memory");
    *g = (nc_gen){.c = c, .n_prompt = n_prompt, .n_seq = n_seq, .n_ctx = n_ctx, .policy = p->context};
    /* without a policy, positions n_prompt..n_ctx-1 can be fed back, and one more token can be
     * drawn after them */
    int32_t room = n_ctx - n_prompt + 1, max_tokens = p->stop.max_tokens;
    bool ctx_bound = false;
    if (p->context.mode == NC_CTX_STOP && (max_tokens == 0 || max_tokens > room)) {
        max_tokens = room;
        ctx_bound = true;
    }
    g->t_begin = sampling_now();
    if (run_init(g, m, prompt, p, max_tokens, ctx_bound, err) || prefill(g, prompt, err)) {
        nc_gen_free(g);
        return -1;
    }
    g->t_prefilled = sampling_now();
    *out = g;
    return 0;
}

int nc_gen_next(nc_gen *g, nc_gen_event *ev, nc_err *err) {
    if (g->failed) return nc_fail(err, "the generation failed earlier");
    while (g->head == g->n_queued) {
        if (g->done) return 0;
        if (g->stepped ? advance(g, err) : draw(g, err)) {
            g->failed = true;
            return -1;
        }
    }
    const gen_queued *q = &g->queue[g->head++];
    *ev = q->ev;
    ev->text = g->text ? g->text + q->text_at : "";
    ev->info = q->has_info ? &q->info : NULL;
    ev->explain = q->has_explain ? &q->explain : NULL;
    return 1;
}

int nc_gen_get_result(const nc_gen *g, nc_gen_result *out, nc_err *err) {
    memset(out, 0, sizeof *out);
    out->t_prompt = g->t_prefilled - g->t_begin;
    out->t_gen = (g->done ? g->t_end : sampling_now()) - g->t_prefilled;
    out->t_model = g->t_model;
    out->n_cached = g->n_cached;
    if (collect(g, out, err)) {
        nc_gen_result_free(out);
        return -1;
    }
    return 0;
}

int nc_generate(nc_context *c, const nc_model *m, const int32_t *prompt, int32_t n_prompt, const nc_gen_params *p,
                nc_gen_callback cb, void *user, nc_gen_result *out, nc_err *err) {
    memset(out, 0, sizeof *out);
    nc_gen *g;
    if (nc_gen_begin(&g, c, m, prompt, n_prompt, p, err)) return -1;
    nc_gen_event ev;
    int r;
    while ((r = nc_gen_next(g, &ev, err)) == 1)
        if (cb && cb(&ev, user)) {
            r = nc_fail(err, "generation aborted by the callback");
            break;
        }
    if (r == 0) r = nc_gen_get_result(g, out, err);
    nc_gen_free(g);
    return r ? -1 : 0;
}
