/* Memory read bandwidth of this machine, measured the way decoding uses memory: every thread of
 * the pool streams through its share of a buffer far larger than the caches. */
#ifndef NC_MEMBW_H
#define NC_MEMBW_H

#include <stddef.h>

#include "threads/pool.h"

/* Best of `reps` passes over a buffer of `bytes`, in bytes per second; 0 if out of memory. */
double membw_read(pool *p, size_t bytes, int reps);

#endif
