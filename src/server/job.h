/* A generation job: one HTTP request's prompts, decoding parameters and growing output, shared
 * by the connection thread that made it and the engine thread that runs it.
 *
 * Threads: the fields under "input" are written before srv_sched_submit and only read after;
 * "output" is guarded by mu (changes bump version and broadcast cv); "engine" fields belong to
 * the engine thread alone. The job is reference-counted: the connection holds one reference,
 * the scheduler another while the job is queued or running. */
#ifndef NC_SERVER_JOB_H
#define NC_SERVER_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "nucleus.h"
#include "server/request.h"
#include "server/reply.h"
#include "server/response.h"
#include "server/tool_calls.h"

typedef struct srv_choice_out {
    char *text;            /* everything shown so far */
    size_t n_text, cap_text;
    srv_logprob *lp;       /* per token, when the request asked for logprobs */
    int32_t n_lp, cap_lp;
    int32_t n_tokens;      /* tokens generated */
    char **steps;          /* nucleus_explain: one JSON object per drawn token (server/explain.h) */
    int32_t n_steps, cap_steps;
    nc_finish finish;
    int32_t stop_word;     /* finished by stop string stop[stop_word]; -1: not by a stop string */
    bool done;
} srv_choice_out;

typedef struct srv_job {
    /* input */
    int32_t n_prompts;
    int32_t **prompts;     /* token ids of each prompt */
    int32_t *n_prompt;
    int32_t n;             /* choices per prompt; choice index = prompt * n + j */
    int32_t n_choices;
    nc_sampler_params sampling;  /* seed of choice i: sampling.seed + i */
    nc_logit_bias *bias;   /* sampling.logit_bias points here */
    nc_stop_params stop;   /* max_tokens 0: until the context is full */
    char **stop_strings;   /* stop.stop points here */
    char **breakers;       /* sampling.dry_breakers points here when the request gave some */
    int32_t n_breakers;
    char *samplers;        /* sampling.samplers */
    char *grammar;         /* sampling.grammar */
    bool logprobs;
    bool tool_calls;       /* the output may hold calls, to be parsed out */
    srv_reply_opts reply;  /* how a chat's output splits into reasoning, content and calls
                              (reply.tools_json points to tools_json) */
    char *tools_json;
    const srv_reasoning_style *thinking;  /* the template's reasoning markers (the budget's) */
    int32_t reasoning_budget;  /* tokens of reasoning before budget_end is forced; -1: no limit */
    int32_t *budget_end;   /* the reasoning's end marker, tokenized (NULL: no budget) */
    int32_t n_budget_end;
    int32_t t_max_predict_ms;  /* request's; 0: no limit */
    int32_t n_indent;      /* request's (llama.cpp's n_indent); 0: off */
    int32_t t_max_prompt_ms; /* request's; 0: no limit */
    double deadline;       /* --request-timeout's, srv_now() seconds: past it every choice ends with
                              what it has (finish "length"), queued or running; 0: none */
    bool cache_prompt;     /* the prefix cache may serve the prompt */
    int32_t id_slot;       /* the slot to run in; -1: any */
    int32_t explain_top_n; /* nucleus_explain: raw logits reported per step (0: off) */
    bool beam;             /* run with nc_beam_search, alone on the engine */
    nc_beam_params beam_params;
    bool contrastive;      /* run with nc_contrastive_search, alone on the engine */
    nc_contrastive_params contrastive_params;
    double t_submit;

    /* output */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t version;      /* bumped at every change */
    srv_choice_out *out;
    size_t explain_bytes;  /* of every choice's steps (at most SRV_MAX_EXPLAIN_BYTES) */
    int32_t n_done;
    double t_first, t_last; /* monotonic seconds of the first and the latest token posted */
    bool failed;
    srv_error error;

    /* engine */
    int32_t next_prompt;   /* the next prompt to give slots */
    int32_t live_slots;
    bool first_token_seen;
    int64_t cached_tokens; /* prompt tokens the prefix cache held (under mu once a slot is running) */
    bool speculative;      /* its slots decode speculatively */
    nc_spec_stats spec;    /* their drafts and passes (under mu) */

    atomic_bool cancelled; /* the client went away: the engine drops the job at its next step */
    atomic_int refs;
} srv_job;

/* A job for n_prompts prompts of n choices each, holding one reference; NULL when out of memory. */
srv_job *srv_job_new(int32_t n_prompts, int32_t n);
void srv_job_ref(srv_job *j);
void srv_job_unref(srv_job *j);
/* Hand prompt i's ids to the job (which frees them). */
void srv_job_set_prompt(srv_job *j, int32_t i, int32_t *ids, int32_t n);
/* Copy what the request's decoding parameters point to (stop strings, logit biases, DRY
 * breakers, the sampler order) into the job and point j->sampling and j->stop at the copies.
 * -1: out of memory. */
int srv_job_own_params(srv_job *j, const srv_request *r);

/* Engine side: append to a choice (text, an optional logprob, tokens made); a finish other than
 * NC_FINISH_NONE completes it. */
void srv_job_post(srv_job *j, int32_t choice, const char *text, size_t n_text, const srv_logprob *lp,
                  int32_t n_tokens, nc_finish finish);
/* Engine side, before the token's srv_job_post: its explain step (a JSON object, malloc'd, taken;
 * NULL: out of memory, which fails the job; so does a step past SRV_MAX_EXPLAIN_BYTES, with a 400
 * naming the limit). */
void srv_job_post_step(srv_job *j, int32_t choice, char *step);
/* Engine side, before the last token's srv_job_post: the choice ends on stop string k. */
void srv_job_set_stop_word(srv_job *j, int32_t choice, int32_t k);
/* End the job with an error (choices not done are done). */
void srv_job_fail(srv_job *j, const srv_error *e);

/* Connection side. Both take mu. */
bool srv_job_finished(srv_job *j);
/* Wait until version differs from seen or the job is finished, at most timeout_ms; returns the
 * version. */
uint64_t srv_job_wait(srv_job *j, uint64_t seen, int timeout_ms);

#endif
