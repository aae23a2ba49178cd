/* One persistent pool of worker threads; the caller takes part as thread 0.
 *
 * Two kinds of job:
 * - pool_run() hands the same function to every thread, which splits the work by thread index;
 *   it returns when all have finished.
 * - pool_run_chunks() splits a job into chunks, and the chunks into one share per thread
 *   (pool_split): each thread claims its own share's chunks one at a time, in order, then helps
 *   with the others' from their ends. It returns when every chunk is done, and needs no thread
 *   that has not claimed one: on a busy machine a descheduled worker delays the job by at most
 *   the chunk it holds, not by its whole share. An optional prepare() runs on each thread before
 *   its first chunk (the per-thread input a chunk needs, e.g. a normalised copy of the
 *   activations, without a barrier of its own).
 * Workers spin briefly between jobs (a decode step issues a job every few microseconds) and then
 * sleep on a condition variable, so an idle pool costs no CPU. */
#ifndef NC_POOL_H
#define NC_POOL_H

typedef void (*pool_fn)(void *arg, int ith, int nth);

typedef struct pool_task {
    void (*prepare)(void *arg, int ith);          /* NULL, or once per thread before its first chunk */
    void (*chunk)(void *arg, int chunk, int ith); /* chunk in [0, n_chunks), on thread ith */
    void *arg;
    int n_chunks;                                 /* at most POOL_MAX_CHUNKS */
} pool_task;

#define POOL_MAX_CHUNKS (1 << 20)

typedef struct pool pool;

/* n_threads >= 1 (the caller counts as one). Returns NULL when threads cannot be created. */
pool *pool_create(int n_threads);
void pool_free(pool *p);
int pool_size(const pool *p);
void pool_run(pool *p, pool_fn fn, void *arg);
void pool_run_chunks(pool *p, const pool_task *task);

/* The [begin, end) share of n items for thread ith of nth (contiguous, sizes differ by <= 1). */
void pool_split(int n, int ith, int nth, int *begin, int *end);

#endif
