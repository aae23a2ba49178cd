#include "bench/membw.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"

typedef struct read_job {
    const uint8_t *buf;
    size_t n;                /* in units of 256 bytes */
    uint64_t sink[64];
} read_job;

/* The widest loads the CPU has (kernels_read): a scalar loop is limited by how many loads a core
 * issues, not by memory, and measured about a third of this machine's bandwidth. The XOR result
 * is kept so the reads cannot be optimised away. */
static void read_worker(void *arg, int ith, int nth) {
    read_job *j = arg;
    int b, e;
    pool_split((int)j->n, ith, nth, &b, &e);
    j->sink[ith % 64] = kernels_read(j->buf + (size_t)b * 256, (size_t)(e - b) * 256);
}

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double membw_read(pool *p, size_t bytes, int reps) {
    size_t n = bytes / 256;
    uint8_t *buf = aligned_alloc(64, n * 256);
    if (!buf) return 0;
    memset(buf, 1, n * 256); /* fault every page in before timing */
    read_job j = {.buf = buf, .n = n};
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = seconds();
        pool_run(p, read_worker, &j);
        double dt = seconds() - t0;
        if (dt > 0 && (double)(n * 256) / dt > best) best = (double)(n * 256) / dt;
    }
    free(buf);
    return best;
}
