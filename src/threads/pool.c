#include "threads/pool.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long a thread polls before sleeping: tens of microseconds (a pause is 10-140 cycles),
 * longer than the gap between two jobs of one forward pass, far shorter than a human pause. */
#define SPIN_ITERS 2000

/* Each thread's share of the current job is a range of chunks in a claim word of its own: the
 * job's tag (which job), and the range [lo, hi) not yet claimed, so that one atomic read tells a
 * thread all it needs and one compare-and-swap claims a chunk of exactly that job. A thread
 * claims its own share from the front, in order, then the others' from their backs. A thread
 * that slept through several jobs sees a newer tag and simply works on the newer job. The tag
 * wraps after 2^24 jobs (hours of decoding); a thread would have to stall that long between its
 * load and its compare-and-swap to be confused.
 * Why shares rather than one counter that every thread takes the next chunk from: a matrix
 * job's chunks are consecutive rows, so a thread that takes every other chunk reads its weights
 * as a stream broken at every chunk, and each break costs the prefetches that cross it (into the
 * chunk another thread takes) and a cold start. With shares each thread reads one stream:
 * TinyLlama-1.1B Q4_0 decoding on 2 threads 96 -> 112 tok/s. Taking from the others' backs
 * keeps what a single counter gave: a descheduled thread delays the job by at most the chunk it
 * holds. */
#define IDX_BITS 20
#define TAG_SHIFT (2 * IDX_BITS)
#define IDX_MASK ((UINT64_C(1) << IDX_BITS) - 1)

typedef struct share { _Alignas(64) _Atomic uint64_t claim; } share;

struct pool {
    int n_threads;
    pthread_t *threads;
    pool_task task;          /* the current job; written before its claim words are published */
    pool_fn fn;              /* pool_run's function, called through static_chunk */
    void *fn_arg;
    share *shares;           /* one per thread */
    uint64_t tag;            /* the current job's (the caller's copy) */
    _Alignas(64) atomic_int done;          /* chunks of the current job finished */
    _Alignas(64) atomic_uint generation;   /* bumped once per job; idle workers wait for it */
    atomic_bool quit;
    pthread_mutex_t mu;
    pthread_cond_t wake;     /* signalled when generation changes */
    pthread_cond_t all_done; /* signalled when the last chunk is done and the caller sleeps */
    atomic_int sleepers;     /* workers blocked on `wake` */
    atomic_bool caller_sleeping;
};

typedef struct worker_arg { pool *p; int ith; } worker_arg;

static uint64_t claim_word(uint64_t tag, uint64_t lo, uint64_t hi) {
    return (tag << TAG_SHIFT) | (hi << IDX_BITS) | lo;
}

/* Claims a chunk of share s: its first (front) or its last; returns its index and tag, or -1
 * when the share is empty. */
static int64_t claim(share *s, bool front, uint64_t *tag) {
    uint64_t cur = atomic_load_explicit(&s->claim, memory_order_acquire);
    for (;;) {
        uint64_t lo = cur & IDX_MASK, hi = (cur >> IDX_BITS) & IDX_MASK;
        if (lo >= hi) return -1;
        /* acquire on success: the job's fields, written before its claim words, are visible; they
         * cannot change until this chunk is done */
        uint64_t next = front ? claim_word(cur >> TAG_SHIFT, lo + 1, hi) : claim_word(cur >> TAG_SHIFT, lo, hi - 1);
        if (atomic_compare_exchange_weak_explicit(&s->claim, &cur, next, memory_order_acquire, memory_order_acquire)) {
            *tag = cur >> TAG_SHIFT;
            return (int64_t)(front ? lo : hi - 1);
        }
    }
}

/* Claims chunks of the published job until none is left: thread ith's own share first, then the
 * others' (the next thread's first); runs prepare before the first chunk this thread takes of a
 * job. *prepared holds the tag of the last job prepared for. */
static void work(pool *p, int ith, uint64_t *prepared) {
    for (int k = 0; k < p->n_threads; k++) {
        share *s = &p->shares[(ith + k) % p->n_threads];
        uint64_t tag;
        int64_t c;
        while ((c = claim(s, k == 0, &tag)) >= 0) {
            const pool_task *t = &p->task;
            int n = t->n_chunks; /* read before the last chunk's count lets the caller move on */
            if (*prepared != tag) {
                *prepared = tag;
                if (t->prepare) t->prepare(t->arg, ith);
            }
            t->chunk(t->arg, (int)c, ith);
            if (atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1 == n &&
                atomic_load(&p->caller_sleeping)) {
                pthread_mutex_lock(&p->mu);
                pthread_cond_signal(&p->all_done);
                pthread_mutex_unlock(&p->mu);
            }
        }
    }
}

static void wait_for_job(pool *p, unsigned seen) {
    for (int i = 0; i < SPIN_ITERS; i++) {
        if (atomic_load_explicit(&p->generation, memory_order_acquire) != seen) return;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while (atomic_load(&p->generation) == seen) pthread_cond_wait(&p->wake, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
}

static void *worker_main(void *raw) {
    worker_arg *wa = raw;
    pool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    unsigned seen = 0;
    uint64_t prepared = UINT64_MAX;
    for (;;) {
        wait_for_job(p, seen);
        seen = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (atomic_load(&p->quit)) return NULL;
        work(p, ith, &prepared);
    }
}

pool *pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    /* its counters are aligned to cache lines (sizeof is then a multiple of the alignment) */
    pool *p = aligned_alloc(_Alignof(pool), sizeof *p);
    if (!p) return NULL;
    memset(p, 0, sizeof *p);
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->all_done, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    p->shares = aligned_alloc(_Alignof(share), (size_t)n_threads * sizeof *p->shares);
    if (!p->threads || !p->shares) {
        free(p->threads);
        free(p->shares);
        free(p);
        return NULL;
    }
    for (int i = 0; i < n_threads; i++) atomic_init(&p->shares[i].claim, 0);
    /* The workers block every signal (they inherit the mask): a process-directed signal such as
     * chat's Ctrl-C then goes to a thread of the application's, never to a worker, where its
     * handler would run without interrupting the thread that waits for it. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->p = p;
            wa->ith = i;
        }
        if (!wa || pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            p->n_threads = i;
            pool_free(p);
            return NULL;
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return p;
}

void pool_free(pool *p) {
    if (!p) return;
    atomic_store(&p->quit, true);
    /* Taking the mutex orders the store against a worker that is about to sleep. */
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->all_done);
    free(p->threads);
    free(p->shares);
    free(p);
}

int pool_size(const pool *p) { return p->n_threads; }

void pool_run_chunks(pool *p, const pool_task *task) {
    int n = task->n_chunks;
    if (n <= 0) return;
    uint64_t prepared = UINT64_MAX;
    if (p->n_threads == 1) {
        if (task->prepare) task->prepare(task->arg, 0);
        for (int i = 0; i < n; i++) task->chunk(task->arg, i, 0);
        return;
    }
    p->task = *task;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    p->tag = (p->tag + 1) & ((UINT64_C(1) << (64 - TAG_SHIFT)) - 1);
    for (int i = 0; i < p->n_threads; i++) {
        int b, e;
        pool_split(n, i, p->n_threads, &b, &e);
        atomic_store_explicit(&p->shares[i].claim, claim_word(p->tag, (uint64_t)b, (uint64_t)e), memory_order_release);
    }
    /* Sequentially consistent on purpose: this increment and the one of `sleepers` in
     * wait_for_job must not both miss each other, or a sleeping worker would never see the job. */
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    work(p, 0, &prepared);
    /* Every chunk is claimed; wait for those still running elsewhere. */
    for (int i = 0; i < SPIN_ITERS; i++) {
        if (atomic_load_explicit(&p->done, memory_order_acquire) == n) return;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_sleeping, true);
    while (atomic_load(&p->done) != n) pthread_cond_wait(&p->all_done, &p->mu);
    atomic_store(&p->caller_sleeping, false);
    pthread_mutex_unlock(&p->mu);
}

/* pool_run's chunks are the thread indices: chunk i runs fn(arg, i, nth) on whichever thread
 * claims it, so every index runs exactly once. */
static void static_chunk(void *arg, int chunk, int ith) {
    (void)ith;
    pool *p = arg;
    p->fn(p->fn_arg, chunk, p->n_threads);
}

void pool_run(pool *p, pool_fn fn, void *arg) {
    if (p->n_threads == 1) { fn(arg, 0, 1); return; }
    p->fn = fn;
    p->fn_arg = arg;
    pool_task t = {.chunk = static_chunk, .arg = p, .n_chunks = p->n_threads};
    pool_run_chunks(p, &t);
}

void pool_split(int n, int ith, int nth, int *begin, int *end) {
    int base = n / nth, extra = n % nth;
    *begin = ith * base + (ith < extra ? ith : extra);
    *end = *begin + base + (ith < extra ? 1 : 0);
}
