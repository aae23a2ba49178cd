/* Inside the sampler chain: the candidate list every stage transforms in place, the stages as
 * plain functions over it, and the sampler object that strings them together. */
#ifndef NC_SAMPLING_SAMPLER_H
#define NC_SAMPLING_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "nucleus.h"

typedef struct cand {
    int32_t id;
    float logit;
    float p;
} cand;

/* The candidate list. `sorted`: descending logit, lower id first on ties — the one order every
 * stage, every boundary and the final draw use, which makes ties deterministic. `by_id`:
 * data[i].id == i for all i (the untouched vocabulary), so a token is found in O(1). `probs`:
 * p is the softmax of this list's logits (a truncation leaves p as it was and clears the flag,
 * so the probability of what was kept can still be summed). */
typedef struct cand_list {
    cand *data;
    int32_t n;
    bool sorted, by_id, probs;
} cand_list;

/* candidates.c */
void cands_init(cand_list *c, cand *buf, const float *logits, int32_t n);  /* NaN becomes -inf */
void cands_sort(cand_list *c);
void cands_softmax(cand_list *c);  /* sorts, then fills p (all -inf: uniform) */
int32_t cands_find(const cand_list *c, int32_t id);  /* index, or -1 */
void cands_truncate(cand_list *c, int32_t n);        /* keep the first n of a sorted list */
void cands_remove_first(cand_list *c, int32_t n);    /* drop the first n of a sorted list */
double cands_mass(const cand_list *c);               /* sum of p */
/* Index of a draw from p (a softmaxed list), walking the sorted order. */
int32_t cands_draw(const cand_list *c, nc_rng *rng);
/* Indices of the n largest finite values of v, largest first, lower index first on ties. */
int32_t top_indices(const float *v, int32_t n_v, int32_t n, int32_t *best);

/* truncation.c: shape and truncation stages. Each keeps at least max(min_keep, 1). */
void smp_temperature(cand_list *c, float t);
void smp_top_k(cand_list *c, int32_t k, int32_t min_keep);
void smp_top_p(cand_list *c, float p, int32_t min_keep);
void smp_min_p(cand_list *c, float p, int32_t min_keep);
void smp_typical(cand_list *c, float p, int32_t min_keep);
void smp_top_n_sigma(cand_list *c, float n);
double smp_dynatemp(cand_list *c, float t, float range, float exponent);  /* returns the T applied */
void smp_epsilon(cand_list *c, float epsilon, int32_t min_keep);
double smp_eta(cand_list *c, float epsilon, int32_t min_keep);            /* returns the cutoff */
/* Returns whether the coin came up (the stage acted this step). */
bool smp_xtc(cand_list *c, float probability, float threshold, int32_t min_keep, nc_rng *rng);

/* penalties.c: history-based logit processors. Each returns how many tokens it changed. */
int32_t smp_penalties(cand_list *c, const int32_t *window, int32_t n_window, float repeat, float frequency,
                      float presence, int32_t *scratch);
int32_t smp_no_repeat_ngram(cand_list *c, const int32_t *history, int32_t n_history, int32_t n);
int32_t smp_logit_bias(cand_list *c, const nc_logit_bias *bias, int32_t n_bias);
int32_t smp_ban(cand_list *c, const int32_t *ids, int32_t n_ids);

/* dry.c. breaker: per token id, nonzero when the token breaks a repeat (may be NULL). scratch:
 * 4 * n_window ints. *longest receives the longest repeat found (0 if none). */
typedef struct dry_params {
    float multiplier, base;
    int32_t allowed_length;
} dry_params;
int32_t smp_dry(cand_list *c, const int32_t *window, int32_t n_window, const uint8_t *breaker, dry_params p,
                int32_t *scratch, int32_t *longest);

/* mirostat.c: a truncation that depends on mu (v1 returns its k); after the draw, mu moves by
 * the surprise of the drawn token, whose probability among the kept ones is p. */
int32_t smp_mirostat_v1_truncate(cand_list *c, int32_t n_vocab, double mu);
void smp_mirostat_v2_truncate(cand_list *c, double mu);
void smp_mirostat_update(float p, float tau, float eta, double *mu);

/* ---- the chain (stages.c, chain.c) ---- */

typedef enum stage_kind {
    ST_PENALTIES, ST_DRY, ST_NGRAM, ST_BIAS, ST_TEMP, ST_TOP_N_SIGMA, ST_TOP_K, ST_TYPICAL, ST_TOP_P, ST_MIN_P, ST_EPSILON,
    ST_ETA, ST_XTC, ST_GRAMMAR,
    ST_COUNT
} stage_kind;

typedef enum stage_role {
    ROLE_PROCESSOR,   /* adjusts logits from the history; kept for beam search (grammar: always first) */
    ROLE_SHAPE,       /* temperature, fixed or dynamic */
    ROLE_TRUNCATION,  /* removes candidates; left out under Mirostat, which truncates itself */
} stage_role;

typedef struct step_in {
    const int32_t *history;
    int32_t n_history, n_prompt;
} step_in;

/* The sampler object (chain.c builds it, stages.c reads its parameters and state). */
struct nc_sampler {
    nc_sampler_params p;        /* array pointers cleared: the copies below are the sampler's */
    int32_t n_vocab;
    nc_logit_bias *bias;
    int32_t *eog, n_eog;        /* end-of-generation ids, when bans may be needed */
    uint8_t *breaker;           /* per token id: breaks DRY repeats (NULL: no breakers) */
    stage_kind chain[ST_COUNT];
    int32_t n_chain;
    nc_rng rng;
    double mu;                  /* Mirostat's truncation level */
    cand *buf;
    cand_list list;
    /* greedy_candidates: the ids the stages before a greedy temperature may change (the logit
       bias's and the end-of-generation bans'), and per id whether it is one; NULL when the chain
       is not that */
    int32_t *touched_ids, n_touched;
    uint8_t *touched;
    int32_t *scratch;
    size_t scratch_cap;
    nc_explain ex;
    char describe[512];
    /* the grammar stage: its rules, matcher, the model's token trie, the generated tokens the
       matcher has consumed, and the step's mask */
    gr_grammar *grammar;
    gr_matcher *matcher;
    const gr_vocab *gvocab;
    int32_t *consumed, n_consumed, cap_consumed;
    bool grammar_stuck;         /* the last mask allowed no token (nc_sampler_grammar_stuck) */
    uint8_t *allowed;
    int32_t n_grammar_eog;  /* end-of-generation tokens among the logits */
    bool grammar_ended;     /* this step's mask allowed nothing but the end */
};

/* A stage: its names, its role, when it is active, what it does (stages.c). */
typedef struct stage_def {
    const char *name;   /* in `samplers` (llama.cpp's name where it has one) */
    const char *alias;
    const char *label;  /* in explain records */
    stage_role role;
    bool (*active)(const nc_sampler_params *p);
    void (*apply)(nc_sampler *s, const step_in *in, cand_list *c, nc_explain_stage *r);
    double (*param)(const nc_sampler_params *p);
} stage_def;

extern const stage_def STAGES[ST_COUNT];

/* Fill the common fields of a stage's explain record. */
void stage_report(nc_explain_stage *r, const char *label, double param, int32_t before, const cand_list *c,
                  double mass);

/* chain.c: the logit processors alone (penalties, DRY, n-gram, bias and bans, in chain order),
 * for beam search. Returns the full vocabulary in id order. */
const cand_list *sampler_process(nc_sampler *s, const float *logits, const int32_t *history, int32_t n_history,
                                 int32_t n_prompt);

/* chain.c, for speculative decoding. A draft's proposal at one step: its token and the draft's
 * distribution over the vocabulary by id (NULL: the proposal was certain, as prompt lookup's). */
typedef struct sampler_proposal {
    int32_t token;
    const float *q;
} sampler_proposal;

/* nc_sampler_sample's step, the draw made against prop when not NULL (*accepted: the draft's
 * token was kept); the token drawn is distributed as nc_sampler_sample's either way. */
int32_t sampler_draw(nc_sampler *s, const float *logits, const int32_t *history, int32_t n_history, int32_t n_prompt,
                     const sampler_proposal *prop, bool *accepted, nc_sample_info *info);
/* A draft's step: nc_sampler_sample's draw, and the distribution it was drawn from into q (by
 * id, n_vocab floats) unless it was certain (sampler_proposal_certain; q is not written). */
/* A token chosen for the sampler (a forced one): its log-probability and the top ones under the
 * raw logits into info. */
void sampler_forced_info(const nc_sampler *s, const float *logits, int32_t token, nc_sample_info *info);
int32_t sampler_propose(nc_sampler *s, const float *logits, const int32_t *history, int32_t n_history,
                        int32_t n_prompt, float *q);
bool sampler_proposal_certain(const nc_sampler *s);

/* stop.c helpers shared with beam search: the earliest occurrence of any stop string in text
 * (its offset, or -1), and whether a token ends generation by itself. */
int32_t stop_find(const char *const *stop, int32_t n_stop, const char *text, int32_t n_text);
bool stop_is_end_token(const nc_model *m, const nc_stop_params *p, int32_t token);

/* Monotonic seconds, for the drivers' timings. */
double sampling_now(void);

/* The drivers' prefill: the prompt into sequence 0, what the prefix cache holds of it taken from
 * there (at most n_prompt - 1 tokens, so that the last token's logits are computed); batch has
 * room for n_prompt entries. Returns the last token's logits (valid until the next forward call)
 * and the tokens taken from the cache in *n_cached, or NULL with err set. */
const float *sampling_prefill(nc_context *c, const int32_t *prompt, int32_t n_prompt, nc_batch_entry *batch,
                              int32_t *n_cached, nc_err *err);

#endif
