/* Speculative decoding's proposers (see nc_spec_params): a draft model whose passes run over all
 * sequences at once, or prompt lookup; the draft state each sequence carries; the adaptive draft
 * length. seq.c verifies what they propose. */
#ifndef NC_SAMPLING_SPEC_H
#define NC_SAMPLING_SPEC_H

#include "sampling/sampler.h"
#include "sampling/seq.h"

/* What one sequence proposed for the next pass, and what its proposals have done so far. */
struct spec_state {
    spec_drafter *d;
    int32_t kv;             /* its sequence in the draft's cache */
    nc_sampler *sampler;    /* the draft's chain (the sequence's parameters, its own seed) */
    int32_t n_draft;        /* proposed for the next pass; the tokens wait in seq.tokens[n_tokens..] */
    float *q;               /* per draft: the draft's distribution by id (draft_max x n_vocab) */
    bool *certain;          /* per draft: q is one token's (not written) */
    double alpha;           /* acceptance estimate (exponential moving average per draft token) */
    int32_t idle;           /* passes without drafts since the last, while drafting does not pay */
    int32_t probe_every;    /* passes between two probes then */
    nc_spec_stats stats;
};

/* On when the parameters name a draft model or prompt lookup. */
bool spec_wanted(const nc_spec_params *p);
/* A proposer for the sequences of context c of model m (the draft is checked against it). */
int spec_drafter_new(spec_drafter **out, const nc_spec_params *p, const nc_model *m, nc_err *err);
void spec_drafter_free(spec_drafter *d);
int32_t spec_drafter_max(const spec_drafter *d);  /* drafts per sequence and pass, at most */

int spec_state_new(spec_state **out, spec_drafter *d, const nc_sampler_params *sampling, int32_t kv, nc_err *err);
void spec_state_free(spec_state *st);

/* Drafts for the n sequences (each within room[i] tokens, 0: none), written after their tokens.
 * The draft model's passes hold every sequence still drafting. */
int spec_propose(spec_drafter *d, seq *const *seqs, const int32_t *room, int32_t n, nc_err *err);
sampler_proposal spec_proposal(const spec_state *st, int32_t i);
/* n_accepted of the drafts were kept (the sequence's tokens have their replacement): the
 * statistics, the draft length and the draft's cache follow. */
void spec_verified(spec_state *st, const seq *s, int32_t n_accepted, int32_t n_made);
/* The sequence's cache was cleared or changed under it (a preemption, a context shift): the
 * draft's forgets it too. */
void spec_forget(spec_state *st);

#endif
