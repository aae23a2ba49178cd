#include "threads/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long a thread polls before sleeping: tens of microseconds (a pause is 10-140 cycles),
 * longer than the gap between two jobs of one forward pass, far shorter than a human pause. */
#define SPIN_ITERS 2000

struct pool {
    int n_threads;
    pthread_t *threads;
    pool_fn fn;
    void *arg;
    atomic_uint generation;  /* bumped once per job; workers wait for it to change */
    atomic_int pending;      /* workers still running the current job */
    atomic_bool quit;
    pthread_mutex_t mu;
    pthread_cond_t wake;     /* signalled when generation changes */
    pthread_cond_t done;     /* signalled when pending reaches 0 */
    atomic_int sleepers;     /* workers blocked on `wake` */
    atomic_bool caller_sleeping;
};

typedef struct worker_arg { pool *p; int ith; } worker_arg;

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

static void finish_job(pool *p) {
    if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1 &&
        atomic_load(&p->caller_sleeping)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

static void *worker_main(void *raw) {
    worker_arg *wa = raw;
    pool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        wait_for_job(p, seen);
        seen = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (atomic_load(&p->quit)) return NULL;
        p->fn(p->arg, ith, p->n_threads);
        finish_job(p);
    }
}

pool *pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) { free(p); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { p->n_threads = i; pool_free(p); return NULL; }
        wa->p = p;
        wa->ith = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n_threads = i;
            pool_free(p);
            return NULL;
        }
    }
    return p;
}

/* Sequentially consistent on purpose: the increment of `generation` here and of `sleepers` in
 * wait_for_job must not both miss each other, or a sleeping worker would never see the job. */
static void publish(pool *p) {
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
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
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

int pool_size(const pool *p) { return p->n_threads; }

void pool_run(pool *p, pool_fn fn, void *arg) {
    if (p->n_threads == 1) { fn(arg, 0, 1); return; }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->pending, p->n_threads - 1);
    publish(p);
    fn(arg, 0, p->n_threads);
    for (int i = 0; i < SPIN_ITERS; i++) {
        if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0) return;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_sleeping, true);
    while (atomic_load(&p->pending) != 0) pthread_cond_wait(&p->done, &p->mu);
    atomic_store(&p->caller_sleeping, false);
    pthread_mutex_unlock(&p->mu);
}

void pool_split(int n, int ith, int nth, int *begin, int *end) {
    int base = n / nth, extra = n % nth;
    *begin = ith * base + (ith < extra ? ith : extra);
    *end = *begin + base + (ith < extra ? 1 : 0);
}
