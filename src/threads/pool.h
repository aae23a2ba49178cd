/* One persistent pool of worker threads. pool_run() hands the same job to every thread
 * (the caller takes part as thread 0) and returns when all have finished; jobs split their work
 * by thread index. Workers spin briefly between jobs (a decode step issues dozens of jobs a
 * millisecond apart) and then sleep on a condition variable, so an idle pool costs no CPU. */
#ifndef NC_POOL_H
#define NC_POOL_H

typedef void (*pool_fn)(void *arg, int ith, int nth);

typedef struct pool pool;

/* n_threads >= 1 (the caller counts as one). Returns NULL when threads cannot be created. */
pool *pool_create(int n_threads);
void pool_free(pool *p);
int pool_size(const pool *p);
void pool_run(pool *p, pool_fn fn, void *arg);

/* The [begin, end) share of n items for thread ith of nth (contiguous, sizes differ by <= 1). */
void pool_split(int n, int ith, int nth, int *begin, int *end);

#endif
