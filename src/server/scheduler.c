/* The engine thread and its slots (see scheduler.h).
 *
 * Locking: s->mu guards the queue, the list of held jobs and the counters other threads read
 * (n_jobs, n_queue, accepting). Slots belong to the engine thread alone; it changes which job a
 * slot serves only while holding s->mu (reap, admit), and runs forward passes and sampling
 * without it, so submissions never wait for a step. Jobs have their own lock for output. */
#include "server/scheduler.h"

#include "common.h"
#include "sampling/seq.h"
#include "sampling/spec.h"
#include "server/explain.h"
#include "server/prepare.h"
#include "server/slot_files.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef enum slot_state {
    SLOT_FREE,
    SLOT_PREFILL,  /* a group's leader feeding its prompt, or a preempted slot feeding its cache again */
    SLOT_WAIT,     /* a follower, waiting for its leader's prompt cache */
    SLOT_DECODE,
    SLOT_DONE,     /* finished: released at the next reap */
} slot_state;

typedef struct slot {
    slot_state state;
    srv_job *job;
    int32_t prompt, choice;
    int32_t leader;        /* the slot whose cache the group's prompt goes into */
    uint64_t order;        /* admission order: prompts are prefilled first come, first served */
    seq seq;               /* its sampler, stop rules, tokens (the prompt, then generated ones), drafts */
    int32_t n_fed;         /* tokens in the cache */
    int32_t n_target;      /* tokens to feed before sampling (the prompt), or before decoding again */
    bool resume;           /* feeding its cache again after a preemption: nothing is sampled */
    int32_t *replay;       /* resuming: the tokens its cache held (the history but its last token,
                              unless a context shift or attention sinks dropped some) */
    bool looked_up;        /* the prefix cache was asked for the tokens to feed */
    bool counted;          /* what it found of the prompt went into the job's cached tokens */
    int32_t row;           /* entry of the current batch holding this slot's logits, or -1 */
    double t_last;         /* when its last token came, 0 before the first */
    double t_first;        /* when its first token came */
    bool newline_seen;     /* its text holds a newline (t_max_predict_ms) */
    srv_think_watch think; /* its reasoning against the job's budget */
    int32_t *last;         /* free: the tokens its cache held when its last request ended (or of the
                              file restored into it), which a save looks for in the prefix cache */
    int32_t n_last;
} slot;

struct srv_sched {
    nc_context *c;
    const nc_model *m;
    srv_metrics *metrics;
    int32_t n_slots, max_queue, chunk, n_vocab, n_ctx;
    bool rings;            /* sliding-window layers may keep rings, which share no prefixes */
    nc_ctx_policy context; /* what a slot whose context is full does */
    spec_drafter *drafter; /* speculative decoding (NULL: off) */
    slot *slots;
    seq **drafting;        /* the decoding slots' sequences proposing drafts this step */
    int32_t *room;
    nc_batch_entry *batch;
    uint64_t next_order;
    int64_t step_tokens;   /* tokens sampled in the current step */

    pthread_mutex_t mu;
    pthread_cond_t wake;   /* work arrived, or a job was cancelled */
    pthread_cond_t idle;   /* n_jobs dropped to 0 */
    pthread_cond_t acted;  /* a slot action is done */
    srv_slot_action *actions; /* waiting for the engine, oldest first */
    srv_job **queue;       /* jobs with prompts still waiting for slots, oldest first */
    int32_t n_queue;
    srv_job **held;        /* every job the scheduler references (queued or running) */
    int32_t n_jobs;
    int32_t n_busy;        /* slots not free */
    bool accepting, stopping;
    bool joined;           /* srv_sched_stop has joined (or is joining) the engine thread */
    pthread_t thread;
};

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- Jobs held by the scheduler (under mu) ------------------------------------------------- */

static bool job_dead(srv_job *j) {
    if (atomic_load(&j->cancelled)) return true;
    pthread_mutex_lock(&j->mu);
    bool failed = j->failed;
    pthread_mutex_unlock(&j->mu);
    return failed;
}

static bool in_queue(const srv_sched *s, const srv_job *j) {
    for (int32_t i = 0; i < s->n_queue; i++)
        if (s->queue[i] == j) return true;
    return false;
}

static void remove_from(srv_job **arr, int32_t *n, const srv_job *j) {
    for (int32_t i = 0; i < *n; i++)
        if (arr[i] == j) {
            memmove(arr + i, arr + i + 1, (size_t)(*n - i - 1) * sizeof *arr);
            (*n)--;
            return;
        }
}

/* Drop the scheduler's reference once the job has neither queued prompts nor slots. */
static void retire_if_done(srv_sched *s, srv_job *j) {
    if (j->live_slots > 0 || in_queue(s, j)) return;
    remove_from(s->held, &s->n_jobs, j);
    srv_job_unref(j);
    if (s->n_jobs == 0) pthread_cond_broadcast(&s->idle);
}

static int fail_msg(nc_err *err, const char *msg) {
    snprintf(err->msg, sizeof err->msg, "%s", msg);
    return -1;
}

static void fail_job(srv_job *j, int status, const char *type, const char *msg) {
    srv_error e;
    srv_error_set(&e, status, type, NULL, NULL, "%s", msg);
    srv_job_fail(j, &e);
}

/* ---- Slots (engine thread) ----------------------------------------------------------------- */

/* The slot's cells go to the prefix cache; their tokens (the first of its history) stay with it. */
static void release_slot(srv_sched *s, int32_t i) {
    slot *sl = &s->slots[i];
    srv_job *j = sl->job;
    int32_t *last = sl->seq.tokens, n_last = nc_kv_seq_len(s->c, i);
    sl->seq.tokens = NULL;
    seq_free(&sl->seq);
    free(sl->replay);
    nc_kv_seq_clear(s->c, i);
    *sl = (slot){.state = SLOT_FREE, .row = -1, .last = last, .n_last = n_last};
    s->n_busy--;
    j->live_slots--;
    retire_if_done(s, j);
}

/* Free finished slots and those of jobs whose client left or that failed; drop such jobs from
 * the queue. Under mu. */
static void reap(srv_sched *s) {
    for (int32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->state != SLOT_FREE && (sl->state == SLOT_DONE || job_dead(sl->job))) release_slot(s, i);
    }
    for (int32_t i = 0; i < s->n_queue;) {
        srv_job *j = s->queue[i];
        if (!job_dead(j)) {
            i++;
            continue;
        }
        remove_from(s->queue, &s->n_queue, j);
        retire_if_done(s, j);
    }
}

/* Set up slot i for one choice: its sampler (seed + choice), stop rules (max_tokens capped by the
 * room left in the context, unless the context policy makes room: only for requests that set
 * max_tokens, as llama.cpp's server, so none runs for ever) and history. */
static int init_slot(srv_sched *s, int32_t i, srv_job *j, int32_t p, int32_t choice, int32_t leader, nc_err *err) {
    slot *sl = &s->slots[i];
    free(sl->last);
    int32_t n_prompt = j->n_prompt[p];
    *sl = (slot){.state = leader < 0 ? SLOT_PREFILL : SLOT_WAIT, .job = j, .prompt = p, .choice = choice,
                 .leader = leader < 0 ? i : leader, .order = s->next_order++, .row = -1, .n_target = n_prompt};
    s->n_busy++;
    j->live_slots++;
    j->speculative = s->drafter != NULL;
    nc_stop_params st = j->stop;
    int32_t room = s->n_ctx - n_prompt + 1, bos = nc_token_bos(s->m);
    nc_err unfit; /* a shift keeping a prompt too long for it: the request ends at a full context */
    bool go_on = st.max_tokens > 0 && s->context.mode != NC_CTX_STOP &&
                 !nc_ctx_policy_check(&s->context, s->n_ctx, n_prompt, bos >= 0 && j->prompts[p][0] == bos, &unfit);
    if (!go_on) st.max_tokens = st.max_tokens > 0 && st.max_tokens < room ? st.max_tokens : room;
    seq_config cfg = {.m = s->m, .n_vocab = s->n_vocab, .sampling = &j->sampling, .stop = &st, .drafter = s->drafter};
    if (seq_init(&sl->seq, &cfg, i, (uint64_t)choice, j->prompts[p], n_prompt, err)) {
        sl->state = SLOT_DONE; /* never stepped: the next reap frees it with its job */
        return -1;
    }
    sl->seq.info = j->logprobs; /* the drawn token's log-probability, even with no top ones */
    srv_think_watch_init(&sl->think, j->reply.in_reasoning);
    if (j->budget_end && j->reasoning_budget == 0 && j->reply.in_reasoning) { /* no reasoning at all */
        sl->think.state = SRV_THINK_PAST;
        return seq_force(&sl->seq, j->budget_end, j->n_budget_end, err);
    }
    return 0;
}

static int32_t free_slots(const srv_sched *s) { return s->n_slots - s->n_busy; }

static int32_t first_free_slot(const srv_sched *s) {
    for (int32_t i = 0; i < s->n_slots; i++)
        if (s->slots[i].state == SLOT_FREE) return i;
    return -1;
}

/* Give the job's next prompt its n slots. On failure the job fails (its slots are reaped). */
static void start_group(srv_sched *s, srv_job *j) {
    int32_t p = j->next_prompt++, leader = -1;
    for (int32_t c = 0; c < j->n; c++) {
        int32_t i = j->id_slot >= 0 ? j->id_slot : first_free_slot(s);
        nc_err err;
        if (init_slot(s, i, j, p, p * j->n + c, leader, &err)) {
            fail_job(j, 500, "server_error", err.msg);
            return;
        }
        if (leader < 0) leader = i;
    }
}

/* ---- Beam search (engine thread, the slots empty) ------------------------------------------ */

static bool past_deadline(const srv_job *j) { return j->deadline > 0 && srv_now() >= j->deadline; }

/* The choices of prompt p not done yet end as they are (finish "length"): the deadline passed. */
static void end_late(srv_job *j, int32_t p) {
    for (int32_t c = p * j->n; c < (p + 1) * j->n; c++) {
        pthread_mutex_lock(&j->mu);
        bool done = j->out[c].done;
        pthread_mutex_unlock(&j->mu);
        if (!done) srv_job_post(j, c, "", 0, NULL, 0, NC_FINISH_LENGTH);
    }
}

static int beam_cancelled(void *j) { return job_dead(j) || past_deadline(j); }

/* The search polls its job every step: a client that left or a shutdown ends it. */
static void beam_one(srv_sched *s, srv_job *j, int32_t p) {
    nc_beam_params bp = j->beam_params;
    bp.n_best = j->n;
    bp.cancelled = beam_cancelled;
    bp.cancelled_user = j;
    for (int32_t q = 0; q < bp.n_beams; q++) nc_kv_seq_clear(s->c, q);
    nc_beam_result res;
    nc_err err;
    int rc = nc_beam_search(s->c, s->m, j->prompts[p], j->n_prompt[p], &bp, &j->sampling, &j->stop, &res, &err);
    for (int32_t q = 0; q < bp.n_beams; q++) nc_kv_seq_clear(s->c, q);
    if (rc) { /* the deadline: no hypothesis is finished, so there is no text to keep */
        if (!job_dead(j)) past_deadline(j) ? end_late(j, p) : fail_job(j, 500, "server_error", err.msg);
        return;
    }
    if (!j->first_token_seen) srv_metrics_ttft(s->metrics, srv_now() - j->t_submit);
    j->first_token_seen = true;
    int64_t made = 0;
    for (int32_t i = 0; i < j->n; i++) {
        const nc_beam_hyp *h = i < res.n ? &res.hyps[i] : NULL;
        srv_job_post(j, p * j->n + i, h ? h->text : "", h ? strlen(h->text) : 0, NULL, h ? h->n_tokens : 0,
                     h ? h->finish : NC_FINISH_STOP);
        made += h ? h->n_tokens : 0;
    }
    srv_metrics_tokens(s->metrics, j->n_prompt[p], made);
    nc_beam_result_free(&res);
}

/* Contrastive search streams its tokens as they are chosen. */
typedef struct contrastive_post {
    srv_sched *s;
    srv_job *j;
    int32_t choice;
    bool late;             /* the deadline ended it (its last token posted with finish "length") */
} contrastive_post;

static int post_contrastive_token(const nc_gen_event *ev, void *user) {
    contrastive_post *cp = user;
    if (!cp->j->first_token_seen) srv_metrics_ttft(cp->s->metrics, srv_now() - cp->j->t_submit);
    cp->j->first_token_seen = true;
    cp->late = ev->finish == NC_FINISH_NONE && past_deadline(cp->j);
    srv_job_post(cp->j, cp->choice, ev->text, (size_t)ev->n_text, NULL, 1, cp->late ? NC_FINISH_LENGTH : ev->finish);
    return job_dead(cp->j) || cp->late;
}

static void contrastive_one(srv_sched *s, srv_job *j, int32_t p) {
    contrastive_post cp = {s, j, p * j->n, false};
    nc_gen_result res;
    nc_err err;
    int rc = nc_contrastive_search(s->c, s->m, j->prompts[p], j->n_prompt[p], &j->contrastive_params, &j->sampling,
                                   &j->stop, post_contrastive_token, &cp, &res, &err);
    for (int32_t q = 0; q < j->contrastive_params.top_k; q++) nc_kv_seq_clear(s->c, q);
    if (rc) {
        if (!job_dead(j) && !cp.late) fail_job(j, 500, "server_error", err.msg);
        return;
    }
    srv_metrics_tokens(s->metrics, j->n_prompt[p], res.samples[0].n_tokens);
    nc_gen_result_free(&res);
}

/* Runs with mu released; the job has left the queue. */
static void run_beam_job(srv_sched *s, srv_job *j) {
    remove_from(s->queue, &s->n_queue, j);
    pthread_mutex_unlock(&s->mu);
    for (int32_t p = 0; p < j->n_prompts && !job_dead(j); p++) {
        if (past_deadline(j)) end_late(j, p);
        else (j->contrastive ? contrastive_one : beam_one)(s, j, p);
    }
    pthread_mutex_lock(&s->mu);
    retire_if_done(s, j);
}

/* Move queued prompts into free slots, oldest first; a job waits until it has a slot for every
 * choice of a prompt, and a beam-search job until all slots are free. Under mu. */
static void admit(srv_sched *s) {
    while (s->n_queue > 0 && !s->stopping) {
        srv_job *j = s->queue[0];
        if (j->beam || j->contrastive) {
            if (s->n_busy > 0) return;
            run_beam_job(s, j);
            continue;
        }
        if (free_slots(s) < j->n) return;
        if (j->id_slot >= 0 && s->slots[j->id_slot].state != SLOT_FREE) return; /* it waits for its slot */
        /* the blocks of the prompt and its first token, and a copy of that last block for every
         * other choice: wait for them while others run; alone, the pool can never hold it */
        int32_t need = j->n_prompt[j->next_prompt] / NC_KV_BLOCK + j->n;
        if (nc_kv_blocks_available(s->c) < need) {
            if (s->n_busy > 0) return;
            char msg[200];
            snprintf(msg, sizeof msg, "the prompt needs %d blocks of the KV cache and the pool has %d (raise --kv-size)",
                     need, nc_kv_blocks_available(s->c));
            fail_job(j, 400, "invalid_request_error", msg);
            remove_from(s->queue, &s->n_queue, j);
            retire_if_done(s, j);
            continue;
        }
        start_group(s, j);
        if (j->next_prompt == j->n_prompts || job_dead(j)) {
            remove_from(s->queue, &s->n_queue, j);
            retire_if_done(s, j);
        }
    }
}

/* ---- Saving and restoring slots (engine thread, between steps) ------------------------------ */

__attribute__((format(printf, 3, 4))) static void act_fail(srv_slot_action *a, int status, const char *fmt, ...) {
    a->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->message, sizeof a->message, fmt, ap);
    va_end(ap);
}

/* A library message names the file by its path: name it as the client did. */
static void act_fail_err(srv_slot_action *a, int status, const nc_err *err) {
    size_t n = strlen(a->path);
    if (!strncmp(err->msg, a->path, n)) act_fail(a, status, "%s%s", a->name, err->msg + n);
    else act_fail(a, status, "%s", err->msg);
}

static const char *ring_hint(const srv_sched *s) {
    return s->rings ? " (the model's sliding-window layers keep rings, which share no prefixes: serve with --swa-full)"
                    : "";
}

/* Cells 0..n of the slot's sequence into the file under the directory's budget: written beside
 * it first (as ".saving-NAME", a name no client can give), then renamed over it, or removed when
 * the directory would hold more than max_bytes. */
static void save_in_budget(srv_sched *s, srv_slot_action *a, int32_t n) {
    nc_err err;
    uint64_t used;
    size_t cap = strlen(a->dir) + strlen(a->name) + 16;
    char *tmp = malloc(cap);
    const char *why = err.msg;
    if (!tmp) {
        act_fail(a, 500, "out of memory");
        return;
    }
    snprintf(tmp, cap, "%s/.saving-%s", a->dir, a->name);
    if (srv_slot_dir_bytes(a->dir, a->name, &used, &err)) {
        act_fail(a, 500, "%s", err.msg);
    } else if (used >= a->max_bytes) {
        act_fail(a, 507, "the slot files hold %llu bytes, the limit of --slot-save-max-bytes (%llu): delete some",
                 (unsigned long long)used, (unsigned long long)a->max_bytes);
    } else if (nc_kv_seq_save(s->c, a->slot, n, tmp, &a->n_bytes, &err)) {
        if (!strncmp(why, tmp, strlen(tmp))) why += strlen(tmp); /* named as the client did */
        act_fail(a, 500, "%s%s%s", a->name, why == err.msg ? ": " : "", why);
    } else if (used + a->n_bytes > a->max_bytes) {
        unlink(tmp);
        act_fail(a, 507, "%s would be %llu bytes; the slot files hold %llu: more than the limit of --slot-save-max-bytes "
                         "(%llu)", a->name, (unsigned long long)a->n_bytes, (unsigned long long)used,
                 (unsigned long long)a->max_bytes);
    } else if (rename(tmp, a->path)) {
        act_fail(a, 500, "%s: cannot be written: %s", a->name, strerror(errno));
        unlink(tmp);
    } else {
        a->status = 200;
        a->n_tokens = n;
    }
    free(tmp);
}

/* The slot's last request, as far as the prefix cache still holds it, into the file. */
static void save_slot(srv_sched *s, srv_slot_action *a) {
    slot *sl = &s->slots[a->slot];
    int32_t n = sl->n_last ? nc_kv_seq_reuse_prefix(s->c, a->slot, sl->last, sl->n_last) : 0;
    if (sl->n_last == 0) act_fail(a, 409, "slot %d has no request to save", a->slot);
    else if (n == 0)
        act_fail(a, 409, "nothing of slot %d's last request (%d tokens) is in the prefix cache any more%s", a->slot,
                 sl->n_last, ring_hint(s));
    else save_in_budget(s, a, n);
    nc_kv_seq_clear(s->c, a->slot);
}

/* The file, checked whole, into the prefix cache through the slot's sequence; the slot's cache
 * as it was otherwise. */
static void restore_slot(srv_sched *s, srv_slot_action *a) {
    struct stat st;
    nc_kv_file *f;
    nc_kv_file_info fi;
    nc_err err;
    if (stat(a->path, &st) != 0 && errno == ENOENT) {
        act_fail(a, 404, "%s: no such slot file", a->name);
        return;
    }
    if (nc_kv_file_open(&f, s->c, a->path, &err)) {
        act_fail_err(a, 400, &err);
        return;
    }
    nc_kv_file_get_info(f, &fi);
    int32_t *tokens = malloc((size_t)fi.n_tokens * sizeof *tokens);
    if (!tokens) act_fail(a, 500, "out of memory");
    else if (fi.n_tokens > s->n_ctx)
        act_fail(a, 400, "%s holds %d tokens, more than a slot's context of %d (-c)", a->name, fi.n_tokens, s->n_ctx);
    else if (nc_kv_file_load(f, a->slot, fi.n_tokens, &err))
        act_fail(a, 503, "the KV cache pool has no room for %d tokens now: retry when requests have ended",
                 fi.n_tokens);
    else {
        memcpy(tokens, fi.tokens, (size_t)fi.n_tokens * sizeof *tokens);
        nc_kv_seq_clear(s->c, a->slot); /* its blocks go to the prefix cache: are they found there? */
        a->n_tokens = nc_kv_seq_reuse_prefix(s->c, a->slot, tokens, fi.n_tokens);
        nc_kv_seq_clear(s->c, a->slot);
        a->n_bytes = fi.n_bytes;
        a->status = 200;
        if (a->n_tokens == 0) act_fail(a, 409, "%s cannot go into the prefix cache%s", a->name, ring_hint(s));
    }
    if (a->status == 200) {
        slot *sl = &s->slots[a->slot];
        free(sl->last);
        sl->last = tokens;
        sl->n_last = a->n_tokens;
    } else {
        free(tokens);
    }
    nc_kv_file_close(f);
}

static void run_action(srv_sched *s, srv_slot_action *a) {
    double t0 = srv_now();
    if (s->slots[a->slot].state != SLOT_FREE)
        act_fail(a, 409, "slot %d is busy with a request: save or restore it once the request has ended", a->slot);
    else if (a->op == SRV_SLOT_SAVE) save_slot(s, a);
    else restore_slot(s, a);
    a->ms = (srv_now() - t0) * 1e3;
}

/* Run the waiting actions, mu released while each runs. Under mu. */
static void run_actions(srv_sched *s) {
    while (s->actions) {
        srv_slot_action *a = s->actions;
        s->actions = a->next;
        pthread_mutex_unlock(&s->mu);
        run_action(s, a);
        pthread_mutex_lock(&s->mu);
        a->done = true;
        pthread_cond_broadcast(&s->acted);
    }
}

/* The engine is leaving: answer what is still waiting. Under mu. */
static void end_actions(srv_sched *s) {
    for (srv_slot_action *a = s->actions; a; a = a->next) {
        act_fail(a, 503, "the server is shutting down");
        a->done = true;
    }
    s->actions = NULL;
    pthread_cond_broadcast(&s->acted);
}

/* ---- One step (engine thread, mu released) ------------------------------------------------- */

/* The cache of slot i goes back to the pool (its blocks stay cached for a while): a decoding slot
 * feeds the tokens its cache held again later and goes on where it was (its sampler and stop
 * state are kept, so the tokens are those it would have drawn; after a context shift the
 * recomputed cells saw only the kept tokens, so what follows may differ); a prefilling one
 * starts its prompt again. vLLM's preemption by recomputation. */
static void preempt(srv_sched *s, int32_t i) {
    slot *sl = &s->slots[i];
    if (sl->state == SLOT_DECODE) {
        int32_t n = nc_kv_seq_len(s->c, i);
        int32_t *replay = malloc(((size_t)n + 1) * sizeof *replay);
        if (!replay) {
            fail_job(sl->job, 500, "server_error", "out of memory preempting a request");
            sl->row = -2;
            return;
        }
        memcpy(replay, nc_kv_seq_tokens(s->c, i), (size_t)n * sizeof *replay);
        free(sl->replay);
        sl->replay = replay;
        sl->state = SLOT_PREFILL;
        sl->resume = true;
        sl->n_target = n;
    }
    nc_kv_seq_clear(s->c, i);
    sl->n_fed = 0;
    sl->looked_up = false;
    srv_metrics_preempted(s->metrics);
}

/* Make `need` blocks available, preempting the slots admitted after sl (youngest first) that hold
 * cells and are not in this step's batch. False when that is not enough. */
static bool make_room(srv_sched *s, const slot *sl, int32_t need) {
    while (nc_kv_blocks_available(s->c) < need) {
        int32_t victim = -1;
        for (int32_t i = 0; i < s->n_slots; i++) {
            const slot *v = &s->slots[i];
            if ((v->state == SLOT_DECODE || v->state == SLOT_PREFILL) && v->order > sl->order && v->row == -1 &&
                nc_kv_seq_len(s->c, i) > 0 && (victim < 0 || v->order > s->slots[victim].order))
                victim = i;
        }
        if (victim < 0) return false;
        preempt(s, victim);
    }
    return true;
}

/* The first time a slot feeds its tokens, the prefix cache may hold some of them: a prompt's all
 * but its last token (whose logits are wanted), a resumed cache all of it. */
static void look_up(srv_sched *s, slot *sl) {
    int32_t id = (int32_t)(sl - s->slots);
    sl->looked_up = true;
    /* cache_prompt false: the prompt is computed again, whatever the cache holds */
    sl->n_fed = !sl->resume && !sl->job->cache_prompt
                    ? 0
                    : nc_kv_seq_reuse_prefix(s->c, id, sl->resume ? sl->replay : sl->seq.tokens, sl->n_target - !sl->resume);
    if (!sl->resume && !sl->counted) {
        sl->counted = true;
        pthread_mutex_lock(&sl->job->mu);
        sl->job->cached_tokens += sl->n_fed;
        pthread_mutex_unlock(&sl->job->mu);
    }
}

/* A preempted slot has its cache back: it decodes again. */
static void resumed(slot *sl) {
    sl->state = SLOT_DECODE;
    sl->resume = false;
    free(sl->replay);
    sl->replay = NULL;
}

/* Feed chunks of prefilling slots, oldest first, within the step's budget and the pool (blocks
 * `reserved` are already promised to the batch). A chunk ends at the next multiple of the chunk
 * size (or the target) whatever else is in the batch. */
static int add_prefill(srv_sched *s, int n, int32_t reserved) {
    int32_t budget = s->chunk;
    for (;;) {
        slot *next = NULL;
        for (int32_t i = 0; i < s->n_slots; i++) {
            slot *sl = &s->slots[i];
            if (sl->state == SLOT_PREFILL && sl->row == -1 && (!next || sl->order < next->order)) next = sl;
        }
        if (!next) return n;
        int32_t id = (int32_t)(next - s->slots);
        if (!next->looked_up) {
            look_up(s, next);
            if (nc_kv_blocks_available(s->c) < reserved) { /* what it took was promised to the batch */
                nc_kv_seq_clear(s->c, id);
                next->n_fed = 0;
                next->looked_up = false;
                return n;
            }
        }
        if (next->resume && next->n_fed == next->n_target) { /* all of it was cached */
            resumed(next);
            continue;
        }
        int32_t end = (next->n_fed / s->chunk + 1) * s->chunk;
        if (end > next->n_target) end = next->n_target;
        int32_t need = nc_kv_blocks_needed(s->c, id, end - next->n_fed);
        if (end - next->n_fed > budget || !make_room(s, next, reserved + need)) return n;
        budget -= end - next->n_fed;
        reserved += need;
        bool last = end == next->n_target;
        const int32_t *feed = next->resume ? next->replay : next->seq.tokens;
        for (int32_t pos = next->n_fed; pos < end; pos++)
            s->batch[n++] = (nc_batch_entry){feed[pos], pos, id, last && !next->resume && pos == end - 1};
        next->row = last && !next->resume ? n - 1 : -2; /* -2: in this batch, no logits */
        next->n_fed = end;
        if (last && next->resume) resumed(next); /* its last token goes in the next step */
    }
}

static void observe_token(srv_sched *s, slot *sl, srv_job *j) {
    double t = srv_now();
    if (!j->first_token_seen) srv_metrics_ttft(s->metrics, t - j->t_submit);
    else if (sl->t_last > 0) srv_metrics_token_latency(s->metrics, t - sl->t_last);
    j->first_token_seen = true;
    sl->t_last = t;
    s->step_tokens++;
}

typedef struct slot_ref {
    srv_sched *s;
    slot *sl;
} slot_ref;

static int piece_of(void *m, int32_t token, char *buf, int cap) { return nc_token_piece(m, token, buf, cap); }

/* nucleus_explain: the step of the token just drawn, from the row it was drawn from. */
static void post_step(srv_sched *s, slot *sl, seq *q, const seq_token *t) {
    srv_explain_step in = {.choice = sl->choice, .step = seq_n_generated(q) - 1, .token = t->token,
                           .eog = nc_token_is_eog(s->m, t->token), .finish = t->finish, .ex = t->explain,
                           .logits = t->logits, .n_vocab = s->n_vocab, .top_n = sl->job->explain_top_n};
    srv_job_post_step(sl->job, sl->choice, srv_json_explain_step(&in, piece_of, (void *)s->m));
}

/* The server's deadline, and llama.cpp's t_max_predict_ms: past it since the first token, the
 * reply ends once it holds a newline. The finish the token is posted with. */
static nc_finish time_limit(slot *sl, const srv_job *j, seq *q, const seq_token *t) {
    if (t->finish != NC_FINISH_NONE || (j->t_max_predict_ms <= 0 && j->deadline <= 0)) return t->finish;
    double now = srv_now();
    bool late = j->deadline > 0 && now >= j->deadline;
    if (!late && j->t_max_predict_ms > 0) {
        if (sl->t_first == 0) sl->t_first = now;
        sl->newline_seen = sl->newline_seen || memchr(t->text, '\n', (size_t)t->n_text);
        late = sl->newline_seen && (now - sl->t_first) * 1000 >= j->t_max_predict_ms;
    }
    if (!late) return NC_FINISH_NONE;
    q->finish = NC_FINISH_LENGTH;
    return NC_FINISH_LENGTH;
}

/* The reasoning budget: once the reasoning took it, its end marker is written next. */
static void watch_budget(slot *sl, srv_job *j, seq *q) {
    pthread_mutex_lock(&j->mu);
    const srv_choice_out *o = &j->out[sl->choice];
    bool spent = srv_think_budget_spent(&sl->think, j->thinking, o->text ? o->text : "", o->n_text, j->reasoning_budget);
    pthread_mutex_unlock(&j->mu);
    nc_err err;
    if (spent && seq_force(q, j->budget_end, j->n_budget_end, &err)) fail_job(j, 500, "server_error", err.msg);
}

/* Which stop string ended the choice: the one that starts where its shown text (shown bytes)
 * ends in the text of its generated tokens; -1 when none does (an end-of-generation token). */
static int32_t stop_word(srv_sched *s, const srv_job *j, const seq *q, size_t shown) {
    char *text;
    size_t n;
    srv_error e;
    int32_t found = -1;
    if (j->stop.n_stop == 0 || srv_detokenize(s->m, q->tokens + q->n_prompt, seq_n_generated(q), &text, &n, &e))
        return -1;
    const char *first = NULL;
    for (int32_t k = 0; k < j->stop.n_stop && found < 0; k++) {
        size_t len = strlen(j->stop.stop[k]);
        if (shown + len <= n && !memcmp(text + shown, j->stop.stop[k], len)) found = k;
        const char *hit = memmem(text, n, j->stop.stop[k], len);
        if (hit && (!first || hit < first)) first = hit;
    }
    for (int32_t k = 0; found < 0 && first && k < j->stop.n_stop; k++) /* text the detokenizer repaired */
        if (!strncmp(first, j->stop.stop[k], strlen(j->stop.stop[k]))) found = k;
    free(text);
    return found;
}

/* llama.cpp's n_indent: the offset in text[0..n) where the reply is cut, the first non-blank
 * character (at or after from, the new piece) of a line after the first whose indentation is
 * below n_indent; -1 when none is. The line's blanks stay, as llama.cpp keeps them. */
static long indent_cut(const char *text, size_t n, size_t from, int32_t n_indent) {
    size_t start = from;
    while (start > 0 && text[start - 1] != '\n') start--;
    for (size_t i = start; i < n; i++) {
        if (i == 0 || text[i - 1] != '\n') continue;
        size_t k = i;
        while (k < n && (text[k] == ' ' || text[k] == '\t')) k++;
        if (k < n && k >= from && text[k] != '\n' && (long)(k - i) < n_indent) return (long)k;
    }
    return -1;
}

/* The cut n_indent makes in this piece (bytes of it kept), or -1. */
static long indent_limit(const srv_job *j, int32_t choice, const seq_token *t) {
    if (j->n_indent <= 0 || t->n_text == 0) return -1;
    srv_job *jm = (srv_job *)j;
    pthread_mutex_lock(&jm->mu);
    const srv_choice_out *o = &j->out[choice];
    size_t shown = o->n_text, n = shown + (size_t)t->n_text;
    char *all = malloc(n + 1);
    long cut = -1;
    if (all) {
        memcpy(all, o->text ? o->text : "", shown);
        memcpy(all + shown, t->text, (size_t)t->n_text);
        cut = indent_cut(all, n, shown, j->n_indent);
        free(all);
    }
    pthread_mutex_unlock(&jm->mu);
    return cut < 0 ? -1 : cut - (long)shown;
}

/* A token the slot drew: to its job. */
static int post_token(void *user, seq *q, const seq_token *t) {
    slot_ref *r = user;
    srv_job *j = r->sl->job;
    observe_token(r->s, r->sl, j);
    if (j->explain_top_n > 0) post_step(r->s, r->sl, q, t);
    if (t->finish == NC_FINISH_GRAMMAR) { /* a reply cut short of what was asked is an error, not a "stop" */
        char msg[160];
        snprintf(msg, sizeof msg, "the grammar could not go on after %d tokens: no token of the model's vocabulary "
                 "continues it", seq_n_generated(q) - 1);
        fail_job(j, 400, "invalid_request_error", msg);
        return 0;
    }
    nc_finish finish = time_limit(r->sl, j, q, t);
    int32_t n_text = t->n_text;
    long keep = finish == NC_FINISH_NONE ? indent_limit(j, r->sl->choice, t) : -1;
    if (keep >= 0) {
        n_text = (int32_t)keep;
        q->finish = finish = NC_FINISH_LENGTH;
    }
    if (finish == NC_FINISH_STOP && !nc_token_is_eog(r->s->m, t->token)) {
        pthread_mutex_lock(&j->mu);
        size_t shown = j->out[r->sl->choice].n_text + (size_t)n_text;
        pthread_mutex_unlock(&j->mu);
        int32_t k = stop_word(r->s, j, q, shown);
        if (k >= 0) srv_job_set_stop_word(j, r->sl->choice, k);
    }
    /* the end-of-generation token is not part of the text, nor of its logprobs */
    bool with_lp = j->logprobs && !nc_token_is_eog(r->s->m, t->token);
    srv_logprob lp = {.token = t->token};
    if (with_lp) {
        lp.logprob = t->info->logprob;
        lp.n_top = t->info->n_top;
        memcpy(lp.top, t->info->top, (size_t)t->info->n_top * sizeof *t->info->top);
    }
    srv_job_post(j, r->sl->choice, t->text, (size_t)n_text, with_lp ? &lp : NULL, 1, finish);
    if (finish == NC_FINISH_NONE && j->budget_end) watch_budget(r->sl, j, q);
    return 0;
}

/* What a step's drafts did: to the job and the metrics. */
static void account_spec(srv_sched *s, srv_job *j, const nc_spec_stats *before, const nc_spec_stats *after) {
    nc_spec_stats d = {after->drafted - before->drafted, after->accepted - before->accepted,
                       after->passes - before->passes, after->generated - before->generated,
                       after->draft_rows - before->draft_rows};
    pthread_mutex_lock(&j->mu);
    j->spec.drafted += d.drafted;
    j->spec.accepted += d.accepted;
    j->spec.passes += d.passes;
    j->spec.generated += d.generated;
    j->spec.draft_rows += d.draft_rows;
    pthread_mutex_unlock(&j->mu);
    srv_metrics_spec(s->metrics, &d);
}

/* The slot's next tokens from the batch's entry `row` (and its drafts after it): drawn, through
 * the stop rules, posted. */
static void sample_slot(srv_sched *s, slot *sl, int32_t row) {
    srv_job *j = sl->job;
    if (atomic_load(&j->cancelled)) return;
    nc_spec_stats before = sl->seq.spec ? sl->seq.spec->stats : (nc_spec_stats){0};
    slot_ref r = {s, sl};
    nc_err err;
    if (seq_step(&sl->seq, s->c, row, post_token, &r, &err) < 0) {
        fail_job(j, 500, "server_error", err.msg);
        return;
    }
    sl->state = sl->seq.finish == NC_FINISH_NONE ? SLOT_DECODE : SLOT_DONE;
    if (sl->seq.spec) account_spec(s, j, &before, &sl->seq.spec->stats);
}

/* The decoding slots' drafts for this step, within their room (the draft model's passes run
 * over all of them at once). A failure fails their jobs. */
static void propose_drafts(srv_sched *s) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->state != SLOT_DECODE || job_dead(sl->job)) continue;
        s->room[n] = seq_draft_room(&sl->seq, s->c);
        s->drafting[n++] = &sl->seq;
    }
    nc_err err;
    if (n == 0 || !spec_propose(s->drafter, s->drafting, s->room, n, &err)) return;
    for (int32_t i = 0; i < n; i++) {
        slot *sl = &s->slots[s->drafting[i]->kv];
        seq_drop_drafts(&sl->seq);
        fail_job(sl->job, 500, "server_error", err.msg);
    }
}

/* The leader's prompt is in its cache: copy it to the followers, then every choice draws its
 * first token from the same logits. */
static void finish_prefill(srv_sched *s, int32_t leader) {
    slot *ld = &s->slots[leader];
    srv_metrics_tokens(s->metrics, ld->seq.n_prompt, 0);
    for (int32_t i = 0; i < s->n_slots; i++) {
        slot *f = &s->slots[i];
        if (f->state != SLOT_WAIT || f->leader != leader) continue;
        nc_err err;
        if (nc_kv_seq_copy(s->c, leader, i, &err)) {
            fail_job(ld->job, 500, "server_error", err.msg);
            return;
        }
        f->n_fed = ld->seq.n_prompt;
    }
    for (int32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (i == leader || (sl->state == SLOT_WAIT && sl->leader == leader)) sample_slot(s, sl, ld->row);
    }
}

static void fail_batch(srv_sched *s, const nc_err *err) {
    for (int32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->row != -1) fail_job(sl->job, 500, "server_error", err->msg);
    }
}

/* Decoding slots oldest first, each with the blocks its next token needs, preempting younger
 * slots for them (or, when even that is not enough, itself), and its drafts when the pool has
 * blocks for them as it is; then prompt chunks. */
static void step(srv_sched *s) {
    int32_t n = 0, reserved = 0;
    for (int32_t i = 0; i < s->n_slots; i++) s->slots[i].row = -1;
    if (s->drafter) propose_drafts(s);
    for (;;) {
        slot *sl = NULL;
        for (int32_t i = 0; i < s->n_slots; i++) {
            slot *c = &s->slots[i];
            if (c->state == SLOT_DECODE && c->row == -1 && (!sl || c->order < sl->order)) sl = c;
        }
        if (!sl) break;
        int32_t i = (int32_t)(sl - s->slots);
        nc_err err; /* a full context: only slots whose max_tokens init_slot left past the room */
        if (nc_kv_seq_len(s->c, i) == s->n_ctx && seq_make_room(&sl->seq, s->c, &s->context, &err) < 0) {
            fail_job(sl->job, 500, "server_error", err.msg);
            sl->row = -2; /* not in this batch */
            continue;
        }
        int32_t need = nc_kv_blocks_needed(s->c, i, 1 + seq_n_draft(&sl->seq));
        if (seq_n_draft(&sl->seq) > 0 && nc_kv_blocks_available(s->c) < reserved + need) {
            seq_drop_drafts(&sl->seq);
            need = nc_kv_blocks_needed(s->c, i, 1);
        }
        if (!make_room(s, sl, reserved + need)) {
            preempt(s, i);
            continue;
        }
        reserved += need;
        sl->row = seq_batch(&sl->seq, s->c, s->batch, &n);
    }
    n = add_prefill(s, n, reserved);
    if (n == 0) return;
    nc_err err;
    if (nc_forward(s->c, s->batch, n, &err)) {
        fail_batch(s, &err);
        return;
    }
    s->step_tokens = 0;
    for (int32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->row < 0) continue;
        if (sl->state == SLOT_PREFILL) finish_prefill(s, i);
        else if (sl->state == SLOT_DECODE) sample_slot(s, sl, sl->row);
    }
    srv_metrics_tokens(s->metrics, 0, s->step_tokens);
}

/* llama.cpp's t_max_prompt_ms: a prompt still being processed that long after its request came
 * ends its choices, empty (finish "length"). The server's deadline ends them too, a preempted
 * one keeping its text, and the choices of jobs still queued. Under mu. */
static void prompt_deadlines(srv_sched *s) {
    double now = srv_now();
    for (int32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        srv_job *j = sl->job;
        if ((sl->state != SLOT_PREFILL && sl->state != SLOT_WAIT) || !j) continue;
        bool prompt_late = !sl->resume && j->t_max_prompt_ms > 0 && (now - j->t_submit) * 1000 >= j->t_max_prompt_ms;
        if (!prompt_late && !(j->deadline > 0 && now >= j->deadline)) continue;
        srv_job_post(j, sl->choice, "", 0, NULL, 0, NC_FINISH_LENGTH);
        sl->state = SLOT_DONE;
    }
    for (int32_t i = 0; i < s->n_queue;) {
        srv_job *j = s->queue[i];
        if (!(j->deadline > 0 && now >= j->deadline)) {
            i++;
            continue;
        }
        while (j->next_prompt < j->n_prompts) end_late(j, j->next_prompt++);
        remove_from(s->queue, &s->n_queue, j);
        retire_if_done(s, j);
    }
}

static void *engine_main(void *arg) {
    srv_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        prompt_deadlines(s);
        reap(s);
        run_actions(s);
        admit(s);
        srv_metrics_gauges(s->metrics, s->n_queue, s->n_busy);
        nc_kv_stats st;
        nc_kv_get_stats(s->c, &st);
        srv_metrics_kv(s->metrics, &st);
        if (s->n_busy == 0) {
            if (s->stopping) {
                reap(s); /* the jobs queued behind a search that stopping cancelled */
                break;
            }
            if (!s->actions) pthread_cond_wait(&s->wake, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        step(s);
        pthread_mutex_lock(&s->mu);
    }
    end_actions(s);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- Public -------------------------------------------------------------------------------- */

static void sched_destroy(srv_sched *s) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->acted);
    for (int32_t i = 0; s->slots && i < s->n_slots; i++) {
        free(s->slots[i].last);
        free(s->slots[i].replay);
    }
    free(s->slots);
    spec_drafter_free(s->drafter);
    free(s->drafting);
    free(s->room);
    free(s->batch);
    free(s->queue);
    free(s->held);
    free(s);
}

int srv_sched_new(srv_sched **out, nc_context *c, const nc_model *m, const srv_sched_config *cfg, srv_metrics *metrics,
                  nc_err *err) {
    *out = NULL;
    if (nc_ctx_policy_check(&cfg->context, nc_context_n_ctx(c), 0, false, err) ||
        nc_ctx_policy_supported(c, &cfg->context, err))
        return -1;
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) return fail_msg(err, "out of memory");
    nc_model_info info;
    nc_model_get_info(m, &info);
    *s = (srv_sched){.c = c, .m = m, .metrics = metrics, .n_slots = cfg->n_slots, .max_queue = cfg->max_queue,
                     .chunk = cfg->chunk, .n_vocab = info.n_vocab, .n_ctx = nc_context_n_ctx(c),
                     .rings = info.swa_window > 0 && !cfg->swa_full, .accepting = true, .context = cfg->context};
    /* room for the running and queued jobs, and for as many finished ones as there are slots (a
     * finished job is held until the engine's next reap frees its slots) */
    int32_t cap = 2 * cfg->n_slots + cfg->max_queue;
    if (spec_wanted(&cfg->spec) && spec_drafter_new(&s->drafter, &cfg->spec, m, err)) {
        free(s);
        return nc_fail_prefix(err, "speculative decoding");
    }
    int32_t per_slot = 1 + (s->drafter ? spec_drafter_max(s->drafter) : 0);
    s->slots = calloc((size_t)cfg->n_slots, sizeof *s->slots);
    s->drafting = malloc((size_t)cfg->n_slots * sizeof *s->drafting);
    s->room = malloc((size_t)cfg->n_slots * sizeof *s->room);
    s->batch = malloc(((size_t)cfg->n_slots * (size_t)per_slot + (size_t)cfg->chunk) * sizeof *s->batch);
    s->queue = malloc((size_t)cap * sizeof *s->queue);
    s->held = malloc((size_t)cap * sizeof *s->held);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->idle, NULL);
    pthread_cond_init(&s->acted, NULL);
    if (!s->slots || !s->drafting || !s->room || !s->batch || !s->queue || !s->held) {
        sched_destroy(s);
        return fail_msg(err, "out of memory");
    }
    for (int32_t i = 0; i < cfg->n_slots; i++) s->slots[i].row = -1;
    if (pthread_create(&s->thread, NULL, engine_main, s) != 0) {
        sched_destroy(s);
        return fail_msg(err, "cannot start the engine thread");
    }
    *out = s;
    return 0;
}

/* Jobs held that still run or wait: a finished one (its client has its reply and may already ask
 * again) is not, though the engine frees its slots only at its next reap. Under mu. */
static int32_t jobs_unfinished(srv_sched *s) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_jobs; i++) n += !srv_job_finished(s->held[i]);
    return n;
}

int srv_sched_submit(srv_sched *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    if (!s->accepting || s->n_jobs >= 2 * s->n_slots + s->max_queue ||
        (s->n_jobs >= s->n_slots + s->max_queue && jobs_unfinished(s) >= s->n_slots + s->max_queue)) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    srv_job_ref(j);
    s->held[s->n_jobs++] = j;
    s->queue[s->n_queue++] = j;
    srv_metrics_gauges(s->metrics, s->n_queue, s->n_busy);
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int srv_sched_slot_action(srv_sched *s, srv_slot_action *a) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        act_fail(a, 503, "the server is shutting down");
        pthread_mutex_unlock(&s->mu);
        return a->status;
    }
    a->next = NULL;
    a->done = false;
    srv_slot_action **tail = &s->actions;
    while (*tail) tail = &(*tail)->next;
    *tail = a;
    pthread_cond_signal(&s->wake);
    while (!a->done) pthread_cond_wait(&s->acted, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return a->status;
}

int32_t srv_sched_n_slots(const srv_sched *s) { return s->n_slots; }

void srv_sched_slots(srv_sched *s, srv_slot_info *out) {
    pthread_mutex_lock(&s->mu);
    for (int32_t i = 0; i < s->n_slots; i++) {
        const slot *sl = &s->slots[i];
        srv_slot_info in = {.n_remain = -1};
        /* Which job a slot serves changes only under mu; its state within a job changes in the step,
         * without it. A slot whose choice is done (its client may have the reply already; the
         * engine frees the slot at its next reap) is not busy: the choice's own flag, set under the
         * job's lock before the reply goes out, tells (two CI runs saw a slot "processing" right
         * after its reply by the state). */
        if (sl->state != SLOT_FREE && sl->job) {
            srv_job *j = sl->job;
            pthread_mutex_lock(&j->mu);
            in.busy = !j->out[sl->choice].done;
            if (in.busy) in.n_decoded = j->out[sl->choice].n_tokens;
            pthread_mutex_unlock(&j->mu);
        }
        if (in.busy) {
            srv_job *j = sl->job;
            in.prefilling = sl->state == SLOT_PREFILL || sl->state == SLOT_WAIT;
            in.task = sl->order + 1;
            in.n_prompt = j->n_prompt[sl->prompt];
            if (j->stop.max_tokens > 0) in.n_remain = j->stop.max_tokens - in.n_decoded;
        }
        out[i] = in;
    }
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_cancel(srv_sched *s, srv_job *j) {
    atomic_store(&j->cancelled, true);
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_drain(srv_sched *s, double timeout_s) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double whole = (double)(time_t)timeout_s;
    until.tv_sec += (time_t)timeout_s;
    until.tv_nsec += (long)((timeout_s - whole) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mu);
    s->accepting = false;
    int rc = 0;
    while (s->n_jobs > 0 && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&s->idle, &s->mu, &until);
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_stop(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    bool joined = s->joined;
    s->accepting = false;
    s->stopping = true;
    for (int32_t i = 0; i < s->n_jobs; i++) fail_job(s->held[i], 503, "server_error", "the server is shutting down");
    pthread_cond_signal(&s->wake);
    s->joined = true;
    pthread_mutex_unlock(&s->mu);
    /* the engine exits once it has reaped every slot and dropped every failed job */
    if (!joined) pthread_join(s->thread, NULL);
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    srv_sched_stop(s);
    sched_destroy(s);
}
