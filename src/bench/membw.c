#include "bench/membw.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct read_job {
    const uint64_t *buf;
    size_t n;
    uint64_t sink[64];
} read_job;

/* Eight independent accumulators keep enough loads in flight to saturate the memory system
 * without SIMD; the XOR result is kept so the compiler cannot drop the loads. */
static void read_worker(void *arg, int ith, int nth) {
    read_job *j = arg;
    int b, e;
    pool_split((int)(j->n / 8), ith, nth, &b, &e);
    uint64_t a[8] = {0};
    for (size_t i = (size_t)b * 8; i < (size_t)e * 8; i += 8)
        for (int k = 0; k < 8; k++) a[k] ^= j->buf[i + k];
    uint64_t x = 0;
    for (int k = 0; k < 8; k++) x ^= a[k];
    j->sink[ith % 64] = x;
}

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double membw_read(pool *p, size_t bytes, int reps) {
    size_t n = bytes / sizeof(uint64_t) / 64 * 64;
    uint64_t *buf = malloc(n * sizeof *buf);
    if (!buf) return 0;
    memset(buf, 1, n * sizeof *buf); /* fault every page in before timing */
    read_job j = {.buf = buf, .n = n};
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = seconds();
        pool_run(p, read_worker, &j);
        double dt = seconds() - t0;
        if (dt > 0 && n * sizeof *buf / dt > best) best = n * sizeof *buf / dt;
    }
    free(buf);
    return best;
}
