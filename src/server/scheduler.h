/* Continuous batching: N slots (one KV-cache sequence each) and a bounded queue of jobs, run by a
 * single engine thread. Every step is one nc_forward call holding the next token of every
 * decoding slot plus prompt chunks of slots still prefilling; tokens are sampled per slot with
 * the slot's own sampler, pushed through its stop checker and posted to the job. Jobs join and
 * leave between steps, so a request never waits for another to finish once it has slots.
 *
 * A job takes n slots per prompt (its choices): the prompt is prefilled once into the first and
 * its cache copied to the others. Prompts are cut into chunks at fixed positions (multiples of
 * the chunk size), so a sequence's computation does not depend on what else is running.
 * Beam-search jobs run alone: the engine waits for the slots to empty, then runs nc_beam_search
 * (no other job advances meanwhile, and the job cannot be cancelled half-way). Contrastive-search
 * jobs too (nc_contrastive_search, its top_k candidates in the slots' sequences), streaming their
 * tokens, and stopping when the client goes.
 *
 * Between two steps the engine also saves or restores an idle slot (srv_sched_slot_action). A
 * slot's cache goes to the prefix cache when its request ends, so saving it takes the tokens of
 * that request back from there (as far as the pool has not given their blocks to others), and a
 * restored file goes there too: the next prompt that starts the same, on any slot, reuses it. */
#ifndef NC_SERVER_SCHEDULER_H
#define NC_SERVER_SCHEDULER_H

#include "nucleus.h"
#include "server/job.h"
#include "server/metrics.h"

typedef struct srv_sched_config {
    int32_t n_slots;       /* the context's n_seq_max */
    int32_t max_queue;     /* unfinished jobs beyond n_slots before submissions are refused */
    int32_t chunk;         /* prompt tokens prefilled per step (across slots) */
    bool swa_full;         /* the context keeps every position of sliding-window layers */
    nc_ctx_policy context; /* what a full slot does (see srv_config) */
    nc_spec_params spec;   /* speculative decoding per slot (the draft's context holds n_slots sequences) */
} srv_sched_config;

typedef struct srv_sched srv_sched;

/* Starts the engine thread. c must have n_seq_max >= n_slots and n_batch >= n_slots x (1 +
 * draft_max with speculation) + chunk. */
int srv_sched_new(srv_sched **out, nc_context *c, const nc_model *m, const srv_sched_config *cfg, srv_metrics *metrics,
                  nc_err *err);
/* Queue a job (taking a reference). -1 when the queue is full or the scheduler is stopping. */
int srv_sched_submit(srv_sched *s, srv_job *j);
/* The client is gone: the job's slots are freed at the next step. */
void srv_sched_cancel(srv_sched *s, srv_job *j);
/* Refuse new jobs; wait until the running ones finish or timeout_s passes. */
void srv_sched_drain(srv_sched *s, double timeout_s);
/* Fail every job left (503) and stop the engine thread; submissions are refused from now on,
 * cancellations still accepted. */
void srv_sched_stop(srv_sched *s);
/* Stop if not yet stopped, then free. */
void srv_sched_free(srv_sched *s);

/* A save or restore of one slot, run by the engine thread between two steps. */
typedef struct srv_slot_action {
    srv_slot_op op;
    int32_t slot;
    const char *path;      /* the file */
    const char *name;      /* what messages call it (the client's file name) */
    const char *dir;       /* the directory it is in (--slot-save-path) */
    uint64_t max_bytes;    /* what the directory's files may hold after a save */
    /* results */
    int status;            /* 200; 400 a file that cannot be restored here; 404 no such file to
                              restore; 409 the slot is busy, or has nothing to save or to restore
                              into the prefix cache; 500 a file that cannot be written; 503 the pool
                              has no room now, or the server is stopping; 507 the save would take
                              the directory past max_bytes */
    char message[512];     /* why, when status is not 200 */
    int32_t n_tokens;      /* tokens saved, or restored into the prefix cache */
    uint64_t n_bytes;      /* bytes written or read */
    double ms;
    /* engine */
    struct srv_slot_action *next;
    bool done;
} srv_slot_action;
/* Queue the action and wait until the engine has run it; returns a->status. */
int srv_sched_slot_action(srv_sched *s, srv_slot_action *a);

double srv_now(void);  /* monotonic seconds */

#endif
