/* The sequence object (DESIGN.md): what one generated sequence carries — its sampler, its stop
 * checker, its history, the room it has left and its draft state. The CLI driver, beam search
 * and the server's slots keep their sequences as these, and the step after a forward pass (the
 * draw, the verification of drafts, the stop rules, the roll-back of what was rejected) is
 * written once, here. */
#ifndef NC_SAMPLING_SEQ_H
#define NC_SAMPLING_SEQ_H

#include <stdbool.h>
#include <stdint.h>

#include "nucleus.h"

typedef struct spec_state spec_state;
typedef struct spec_drafter spec_drafter;

typedef struct seq {
    int32_t kv;              /* its sequence in the model's KV cache */
    nc_sampler *sampler;     /* NULL for beam search's beams: the search scores them */
    nc_stopper *stopper;     /* NULL likewise */
    int32_t *tokens;         /* the prompt, then the generated tokens: the whole text, whatever the
                                cache forgot; drafts wait after them until verified */
    int32_t n_tokens, cap, n_prompt;
    int32_t max_tokens;      /* what the stop rules count to (0: no limit) */
    bool ctx_bound;          /* max_tokens is the room left in the context: that finish says so */
    bool info;               /* draws report nc_sample_info */
    nc_finish finish;
    int32_t n_evictions, n_evicted;  /* times a context policy made room, and the cells it dropped */
    spec_state *spec;        /* draft state (NULL: no speculation) */
    int32_t *forced;         /* tokens its next steps take instead of drawing (seq_force) */
    int32_t n_forced, i_forced;
} seq;

/* How the sequences of one generation are made. */
typedef struct seq_config {
    const nc_model *m;
    int32_t n_vocab;
    const nc_sampler_params *sampling;  /* a sequence's seed: sampling->seed + its seed offset */
    const nc_stop_params *stop;         /* max_tokens: as seq.max_tokens */
    bool ctx_bound;
    spec_drafter *drafter;              /* NULL: no speculation */
} seq_config;

int seq_init(seq *s, const seq_config *cfg, int32_t kv, uint64_t seed_offset, const int32_t *prompt, int32_t n_prompt,
             nc_err *err);
/* A bare sequence (tokens only, for beam search): room for cap tokens. */
int seq_init_bare(seq *s, int32_t kv, int32_t cap, nc_err *err);
void seq_free(seq *s);
/* Room for n more tokens after n_tokens. */
int seq_reserve(seq *s, int32_t n, nc_err *err);
void seq_set_tokens(seq *s, const int32_t *tokens, int32_t n);  /* within cap */
int32_t seq_last(const seq *s);
int32_t seq_n_generated(const seq *s);

/* Its next batch entries at *n: its last token at the position after its cells, then its drafts;
 * returns the entry of the last token (its logits row). The batch needs 1 + seq_n_draft entries. */
int32_t seq_batch(seq *s, nc_context *c, nc_batch_entry *batch, int32_t *n);
int32_t seq_n_draft(const seq *s);
void seq_drop_drafts(seq *s);  /* the next pass verifies none */
/* The drafts it may still propose: within its context and its max_tokens. */
int32_t seq_draft_room(const seq *s, const nc_context *c);
/* Its cache is full: the context policy makes room. -1 on error. */
int seq_make_room(seq *s, nc_context *c, const nc_ctx_policy *policy, nc_err *err);

/* Its next steps take tokens[0..n) in turn instead of drawing (drafts are not verified while
 * they do): text the caller must see written, e.g. the end of a reasoning out of budget. The
 * sampler still runs (its state and reports go on); the reported log-probability is the
 * forced token's under the raw logits. */
int seq_force(seq *s, const int32_t *tokens, int32_t n, nc_err *err);
bool seq_forcing(const seq *s);

/* One token drawn, as the step reports it. */
typedef struct seq_token {
    int32_t token;
    const char *text;              /* to show now (valid until the next token) */
    int32_t n_text;
    nc_finish finish;
    const nc_sample_info *info;    /* NULL unless seq.info */
    const nc_explain *explain;     /* NULL unless the sampler explains */
    const float *logits;           /* the row it was drawn from (n_vocab; valid until the next pass) */
} seq_token;
/* Return nonzero to stop. */
typedef int (*seq_emit)(void *user, seq *s, const seq_token *t);

/* A token chosen for the sequence (room reserved): through the stop rules into *t, appended. */
void seq_accept(seq *s, int32_t token, seq_token *t);

/* After the forward pass: the next token from the logits of batch entry `row` — with drafts,
 * verified one by one against the entries after it, every kept draft then the token that
 * replaces the first rejected one (or follows the last kept) — each through the stop rules and
 * to emit; the cells of rejected drafts leave both caches. Returns the tokens drawn, or -1
 * (emit stopped it: err says so). */
int32_t seq_step(seq *s, nc_context *c, int32_t row, seq_emit emit, void *user, nc_err *err);

#endif
