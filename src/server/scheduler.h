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
 * (no other job advances meanwhile, and the job cannot be cancelled half-way). */
#ifndef NC_SERVER_SCHEDULER_H
#define NC_SERVER_SCHEDULER_H

#include "nucleus.h"
#include "server/job.h"
#include "server/metrics.h"

typedef struct srv_sched_config {
    int32_t n_slots;       /* the context's n_seq_max */
    int32_t max_queue;     /* unfinished jobs beyond n_slots before submissions are refused */
    int32_t chunk;         /* prompt tokens prefilled per step (across slots) */
    nc_ctx_policy context; /* what a full slot does (see srv_config) */
} srv_sched_config;

typedef struct srv_sched srv_sched;

/* Starts the engine thread. c must have n_seq_max >= n_slots and n_batch >= n_slots + chunk. */
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

double srv_now(void);  /* monotonic seconds */

#endif
