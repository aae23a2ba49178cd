/* The sequence object (see seq.h). */
#include "sampling/seq.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "sampling/spec.h"

int seq_init_bare(seq *s, int32_t kv, int32_t cap, nc_err *err) {
    *s = (seq){.kv = kv, .cap = cap > 0 ? cap : 1};
    s->tokens = malloc((size_t)s->cap * sizeof *s->tokens);
    return s->tokens ? 0 : nc_fail(err, "out of memory");
}

int seq_init(seq *s, const seq_config *cfg, int32_t kv, uint64_t seed_offset, const int32_t *prompt, int32_t n_prompt,
             nc_err *err) {
    /* the whole generation fits at once when it is bounded; else the history grows */
    int32_t cap = n_prompt + (cfg->stop->max_tokens ? cfg->stop->max_tokens : 256) + 1;
    if (seq_init_bare(s, kv, cap, err)) return -1;
    memcpy(s->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
    s->n_tokens = s->n_prompt = n_prompt;
    s->max_tokens = cfg->stop->max_tokens;
    s->ctx_bound = cfg->ctx_bound;
    s->info = cfg->sampling->n_logprobs > 0;
    nc_sampler_params sp = *cfg->sampling;
    sp.seed = cfg->sampling->seed + seed_offset;
    if (nc_sampler_new(&s->sampler, cfg->m, cfg->n_vocab, &sp, err) || nc_stopper_new(&s->stopper, cfg->m, cfg->stop, err))
        return -1;
    return cfg->drafter ? spec_state_new(&s->spec, cfg->drafter, &sp, kv, err) : 0;
}

void seq_free(seq *s) {
    free(s->forced);
    nc_sampler_free(s->sampler);
    nc_stopper_free(s->stopper);
    spec_state_free(s->spec);
    free(s->tokens);
    *s = (seq){0};
}

int seq_reserve(seq *s, int32_t n, nc_err *err) {
    if (s->n_tokens + n <= s->cap) return 0;
    int32_t cap = 2 * s->cap > s->n_tokens + n ? 2 * s->cap : s->n_tokens + n;
    int32_t *grown = realloc(s->tokens, (size_t)cap * sizeof *grown);
    if (!grown) return nc_fail(err, "out of memory");
    s->tokens = grown;
    s->cap = cap;
    return 0;
}

void seq_set_tokens(seq *s, const int32_t *tokens, int32_t n) {
    memmove(s->tokens, tokens, (size_t)n * sizeof *tokens);
    s->n_tokens = n;
}

int32_t seq_last(const seq *s) { return s->tokens[s->n_tokens - 1]; }

int32_t seq_n_generated(const seq *s) { return s->n_tokens - s->n_prompt; }

int32_t seq_n_draft(const seq *s) { return s->spec ? s->spec->n_draft : 0; }

void seq_drop_drafts(seq *s) {
    if (s->spec) s->spec->n_draft = 0;
}

int32_t seq_draft_room(const seq *s, const nc_context *c) {
    /* all k drafts kept make k + 1 tokens and k + 1 new cells */
    int32_t room = nc_context_n_ctx(c) - nc_kv_seq_len(c, s->kv) - 1;
    if (s->max_tokens > 0 && s->max_tokens - seq_n_generated(s) - 1 < room) room = s->max_tokens - seq_n_generated(s) - 1;
    return room > 0 ? room : 0;
}

int32_t seq_batch(seq *s, nc_context *c, nc_batch_entry *batch, int32_t *n) {
    int32_t row = *n, pos = nc_kv_seq_pos_next(c, s->kv), k = seq_n_draft(s);
    /* after its last cell's position: a context shift or sinks moved the cells back */
    batch[(*n)++] = (nc_batch_entry){seq_last(s), pos, s->kv, true};
    for (int32_t i = 0; i < k; i++) batch[(*n)++] = (nc_batch_entry){s->tokens[s->n_tokens + i], pos + 1 + i, s->kv, true};
    return row;
}

int seq_make_room(seq *s, nc_context *c, const nc_ctx_policy *policy, nc_err *err) {
    int32_t dropped = nc_kv_seq_make_room(c, s->kv, policy, s->n_prompt, err);
    if (dropped < 0) return -1;
    s->n_evictions++;
    s->n_evicted += dropped;
    if (s->spec) spec_forget(s->spec); /* the draft's positions no longer follow the model's */
    return 0;
}

void seq_accept(seq *s, int32_t token, seq_token *t) {
    t->token = token;
    t->finish = nc_stopper_push(s->stopper, token, &t->text, &t->n_text);
    if (t->finish == NC_FINISH_LENGTH && s->ctx_bound) t->finish = NC_FINISH_CONTEXT;
    if (nc_sampler_grammar_stuck(s->sampler)) t->finish = NC_FINISH_GRAMMAR;
    s->finish = t->finish;
    s->tokens[s->n_tokens++] = token; /* a kept draft is already there */
}

int seq_force(seq *s, const int32_t *tokens, int32_t n, nc_err *err) {
    int32_t *copy = malloc(((size_t)n + 1) * sizeof *copy);
    if (!copy) return nc_fail(err, "out of memory");
    memcpy(copy, tokens, (size_t)n * sizeof *copy);
    free(s->forced);
    s->forced = copy;
    s->n_forced = n;
    s->i_forced = 0;
    return 0;
}

bool seq_forcing(const seq *s) { return s->i_forced < s->n_forced; }

int32_t seq_step(seq *s, nc_context *c, int32_t row, seq_emit emit, void *user, nc_err *err) {
    int32_t k = seq_n_draft(s), n_accepted = 0, made = 0;
    if (seq_reserve(s, k + 1, err)) return -1;
    for (int32_t i = 0; i <= k; i++) {
        sampler_proposal prop;
        if (i < k) {
            prop = spec_proposal(s->spec, i);
            prop.token = s->tokens[s->n_tokens]; /* the draft waits where the token goes */
        }
        bool accepted = false;
        nc_sample_info info;
        seq_token t = {.info = s->info ? &info : NULL, .logits = nc_logits(c, row + i)};
        int32_t token = sampler_draw(s->sampler, t.logits, s->tokens, s->n_tokens, s->n_prompt,
                                     i < k ? &prop : NULL, &accepted, s->info ? &info : NULL);
        t.explain = nc_sampler_explain(s->sampler);
        if (seq_forcing(s)) { /* a draft there is not what is written: it goes */
            token = s->forced[s->i_forced++];
            accepted = false;
            if (s->info) sampler_forced_info(s->sampler, t.logits, token, &info);
        }
        seq_accept(s, token, &t);
        made++;
        n_accepted += accepted;
        if (emit && emit(user, s, &t)) return nc_fail(err, "generation aborted by the callback");
        if (s->finish || !accepted) break;
    }
    if (s->spec) {
        if (k > 0) nc_kv_seq_truncate(c, s->kv, nc_kv_seq_len(c, s->kv) - (k - n_accepted));
        spec_verified(s->spec, s, n_accepted, made);
    }
    return made;
}
