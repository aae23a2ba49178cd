#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "threads/pool.h"

typedef struct sum_job { const int *data; int n; long long partial[8]; atomic_int calls; } sum_job;

static void sum_worker(void *arg, int ith, int nth) {
    sum_job *j = arg;
    int b, e;
    pool_split(j->n, ith, nth, &b, &e);
    long long s = 0;
    for (int i = b; i < e; i++) s += j->data[i];
    j->partial[ith] = s;
    atomic_fetch_add(&j->calls, 1);
}

/* pool_run_chunks' record: which thread ran each chunk, in which order per thread. */
enum { MAX_N = 64 };
typedef struct chunk_job {
    int n, stall;                   /* stall: thread 1's first chunk sleeps 30 ms */
    atomic_int runs[MAX_N];         /* times each chunk ran */
    int by[MAX_N];                  /* the thread that ran it */
    int order[4][MAX_N], n_order[4]; /* each thread's chunks in the order it ran them */
    atomic_int prepared[4];
} chunk_job;

static void chunk_prepare(void *arg, int ith) { atomic_fetch_add(&((chunk_job *)arg)->prepared[ith], 1); }

static void chunk_run(void *arg, int c, int ith) {
    chunk_job *j = arg;
    if (j->stall && ith == 1 && j->n_order[1] == 0) {
        struct timespec ts = {0, 30 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_add(&j->runs[c], 1);
    j->by[c] = ith;
    j->order[ith][j->n_order[ith]++] = c;
}

/* Every chunk runs once; a thread runs its own share (pool_split) from its start, in order, and
 * others' chunks only from their ends; prepare runs once on each thread that ran a chunk. */
static int chunks_ok(const chunk_job *j, int nth) {
    for (int c = 0; c < j->n; c++)
        if (atomic_load(&j->runs[c]) != 1) return 0;
    for (int i = 0; i < nth; i++) {
        int b, e, own = 0;
        pool_split(j->n, i, nth, &b, &e);
        for (int k = 0; k < j->n_order[i]; k++) {
            int c = j->order[i][k];
            if (c >= b && c < e) {
                if (c != b + own++) return 0;
            }
        }
        if (atomic_load(&j->prepared[i]) != (j->n_order[i] > 0)) return 0;
    }
    return 1;
}

static void test_chunks(void) {
    for (int nth = 1; nth <= 4; nth++) {
        pool *p = pool_create(nth);
        int ok = 1;
        for (int rep = 0; rep < 500; rep++) {
            chunk_job *j = calloc(1, sizeof *j);
            j->n = rep % MAX_N;
            pool_run_chunks(p, &(pool_task){.prepare = chunk_prepare, .chunk = chunk_run, .arg = j, .n_chunks = j->n});
            ok &= chunks_ok(j, nth);
            free(j);
        }
        CHECK_MSG(ok, "threads=%d", nth);
        /* a thread held up in its first chunk: the others take the rest of its share, from the end */
        if (nth >= 2) {
            chunk_job *j = calloc(1, sizeof *j);
            j->n = 8 * nth;
            j->stall = 1;
            pool_run_chunks(p, &(pool_task){.prepare = chunk_prepare, .chunk = chunk_run, .arg = j, .n_chunks = j->n});
            CHECK(chunks_ok(j, nth));
            CHECK_MSG(j->n_order[1] <= 2, "the held-up thread ran %d chunks", j->n_order[1]);
            free(j);
        }
        pool_free(p);
    }
}

static pthread_t main_thread;
static volatile sig_atomic_t signalled, on_main;

static void on_usr1(int sig) {
    (void)sig;
    signalled = 1;
    on_main = pthread_equal(pthread_self(), main_thread);
}

/* The workers take no process-directed signal: sent while the creating thread blocks it, it stays
 * pending (a worker with it unblocked would run the handler at once) and reaches that thread
 * when it unblocks it, as chat's Ctrl-C must reach the thread waiting at the prompt. */
static void test_signals(void) {
    main_thread = pthread_self();
    struct sigaction sa = {.sa_handler = on_usr1};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigset_t usr1, old;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pool *p = pool_create(4);
    pthread_sigmask(SIG_BLOCK, &usr1, &old);
    kill(getpid(), SIGUSR1);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CHECK_MSG(!signalled, "a worker ran the handler");
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    CHECK(signalled && on_main);
    pool_free(p);
}

int main(void) {
    test_signals();
    test_chunks();
    /* pool_split covers [0, n) exactly, in order, sizes differing by at most one */
    for (int n = 0; n < 50; n++)
        for (int nth = 1; nth <= 7; nth++) {
            int expect = 0, ok = 1;
            for (int i = 0; i < nth; i++) {
                int b, e;
                pool_split(n, i, nth, &b, &e);
                ok &= b == expect && e >= b && (e - b) <= n / nth + 1 && (e - b) >= n / nth;
                expect = e;
            }
            CHECK_MSG(ok && expect == n, "n=%d nth=%d", n, nth);
        }
    int data[1000];
    long long want = 0;
    for (int i = 0; i < 1000; i++) { data[i] = i * 7 - 300; want += data[i]; }
    for (int nt = 1; nt <= 4; nt++) {
        pool *p = pool_create(nt);
        CHECK(p != NULL);
        CHECK(pool_size(p) == nt);
        /* many short jobs in a row: each must see every thread exactly once */
        int all_ok = 1;
        for (int rep = 0; rep < 2000; rep++) {
            sum_job j = {.data = data, .n = 1000};
            atomic_init(&j.calls, 0);
            pool_run(p, sum_worker, &j);
            long long got = 0;
            for (int i = 0; i < nt; i++) got += j.partial[i];
            all_ok &= got == want && atomic_load(&j.calls) == nt;
        }
        CHECK_MSG(all_ok, "threads=%d", nt);
        pool_free(p);
    }
    /* a pool that sat idle long enough for its workers to sleep still runs jobs */
    pool *p = pool_create(2);
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    sum_job j = {.data = data, .n = 1000};
    atomic_init(&j.calls, 0);
    pool_run(p, sum_worker, &j);
    CHECK(j.partial[0] + j.partial[1] == want);
    pool_free(p);
    return test_summary("pool");
}
