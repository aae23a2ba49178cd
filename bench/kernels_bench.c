/* Kernel throughput, one thread: matvec in GB/s of weights read (decode is bandwidth bound) for a
 * matrix that fits in cache and one that does not, and matmul in GFLOP/s for a tile of tokens
 * (prefill is compute bound). Every type, every instruction set the machine has.
 *
 * Build (from the repository root): make build/kernels_bench
 * Run: build/kernels_bench [seconds per measurement, default 1] [types, e.g. Q4_K or Q4_0,Q4_K,Q8_0]
 * (every type the engine computes with by default); build/kernels_bench --insns ISA TYPE T N runs
 * products untimed for bench/insns.sh's instruction counts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "tensor/quant.h"

/* CPU time of this thread: other work on a shared machine does not count against the kernel
 * (it can still compete for caches and memory bandwidth). */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Where a block keeps its fp16 scales (the scale d, and a min or dmin, or -1). */
static void scale_offsets(uint32_t type, int off[2]) {
    off[0] = 0, off[1] = -1;
    switch (type) {
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: off[1] = 2; break;
    case GGML_TYPE_Q2_K: off[0] = 80, off[1] = 82; break;
    case GGML_TYPE_Q3_K: off[0] = 108; break;
    case GGML_TYPE_Q6_K: off[0] = 208; break;
    case GGML_TYPE_MXFP4: off[0] = -1; break;
    default: break;
    }
}

/* Random bytes with every half-float scale field set to a small normal value (random bytes
 * there could be inf or nan, which some CPUs handle slowly); MXFP4's exponents 2^-7. */
static uint8_t *make_weights(uint32_t type, int rows, int cols, size_t *row_bytes) {
    const quant_type *qt = quant_type_of(type);
    size_t rb = quant_row_bytes(type, cols), n = rb * (size_t)rows;
    uint8_t *w = aligned_alloc(64, (n + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)rand();
    float *f = malloc(sizeof(float) * (size_t)cols);
    for (int r = 0; r < rows; r++) {
        uint8_t *row = w + rb * (size_t)r;
        if (!qt->group) {
            for (int i = 0; i < cols; i++) f[i] = (float)rand() / RAND_MAX - 0.5f;
            quant_quantize_row(type, f, row, cols);
            continue;
        }
        int off[2];
        scale_offsets(type, off);
        for (int b = 0; b < cols / (int)qt->block_elems; b++) {
            uint8_t *s = row + qt->block_bytes * (size_t)b;
            if (type == GGML_TYPE_MXFP4) s[0] = 121;
            for (int k = 0; k < 2; k++)
                if (off[k] >= 0) s[off[k]] = 0x00, s[off[k] + 1] = 0x20; /* 0.0078125 */
        }
    }
    free(f);
    *row_bytes = rb;
    return w;
}

/* Each figure is the best of five windows of secs / 5. */
#define WINDOWS 5

/* One product as the forward pass runs it: f32 activations for float types, quantised ones in
 * format fmt for integer types. */
typedef struct problem {
    uint32_t type;
    const uint8_t *w;
    size_t rb;
    int cols;
    const float *X;
    kernels_act fmt;
    const uint8_t *Xq;
    void *scratch;
} problem;

/* chunk: rows per call (0: all rows in one call), as the forward pass splits a matrix. */
static void run(const problem *p, int T, float *Y, int rows, int chunk) {
    if (!chunk) chunk = rows;
    for (int r = 0; r < rows; r += chunk)
        kernels_mul(p->type, p->w, p->rb, p->cols, p->X, p->fmt, p->Xq, T, Y + r, rows, r,
                    rows - r < chunk ? rows : r + chunk, 0, p->scratch);
}

/* T tokens over rows rows for about secs; returns GB/s of weights (T = 1), weights times tokens
 * (T <= 8: a speculative verification or a small server batch, rows read once for all of them),
 * or GFLOP/s (the matmul). */
static double bench(const problem *p, int rows, int T, int chunk, float *Y, double secs) {
    run(p, T, Y, rows, chunk); /* warm up */
    double best = 0;
    for (int win = 0; win < WINDOWS; win++) {
        int reps = 0;
        double t0 = now(), t;
        do {
            run(p, T, Y, rows, chunk);
            reps++;
        } while ((t = now() - t0) < secs / WINDOWS);
        double rate = T <= 8 ? (double)p->rb * rows * T * reps / t / 1e9 : 2.0 * rows * p->cols * T * reps / t / 1e9;
        best = rate > best ? rate : best;
    }
    return best;
}

/* Whether name is one of the comma-separated names of list. */
static int listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

static const char *const isas[] = {"scalar", "avx2", "avx512", "neon", "avxvnni"};

/* --insns ISA TYPE T N: N products of T tokens over a matrix of 64 rows by 2048 columns, as the
 * forward pass runs them in the default mode (int16 activations; interleaved where the set
 * multiplies the type faster so), and nothing timed: bench/insns.sh counts the instructions of
 * runs with two values of N under QEMU, and their difference is the products' own. */
static int count_insns(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: kernels_bench --insns ISA TYPE T N\n");
        return 2;
    }
    int isa = -1, T = atoi(argv[4]), n = atoi(argv[5]);
    for (int i = 0; i < KERNELS_ISA_COUNT; i++)
        if (!strcmp(argv[2], isas[i])) isa = i;
    uint32_t type = GGML_TYPE_COUNT;
    for (uint32_t t = 0; t < GGML_TYPE_COUNT; t++)
        if (quant_type_of(t) && !strcmp(quant_type_of(t)->name, argv[3])) type = t;
    if (isa < 0 || (int)kernels_force((kernels_isa)isa) != isa || type == GGML_TYPE_COUNT || T < 1 || T > 256 || n < 0) {
        fprintf(stderr, "kernels_bench --insns: no set '%s' on this CPU, no type '%s', or T, N out of range\n", argv[2],
                argv[3]);
        return 2;
    }
    const int rows = 64, cols = 2048;
    size_t rb;
    uint8_t *w = make_weights(type, rows, cols, &rb);
    uint32_t as = type;
    if (kernels_ilv_type(type)) {
        uint8_t *wi = aligned_alloc(64, rb * rows);
        kernels_interleave(type, w, wi, rows, cols);
        free(w);
        w = wi, as = type | KERNELS_ILV;
    }
    float *X = aligned_alloc(64, sizeof(float) * (size_t)cols * T), *Y = malloc(sizeof(float) * (size_t)rows * T);
    for (int i = 0; i < cols * T; i++) X[i] = (float)rand() / RAND_MAX - 0.5f;
    size_t xqb = kernels_act_bytes(KERNELS_ACT_I16, cols);
    uint8_t *Xq = aligned_alloc(64, (xqb * T + 63) / 64 * 64);
    for (int t = 0; t < T; t++) kernels_quantize_act(KERNELS_ACT_I16, X + (size_t)t * cols, cols, Xq + (size_t)t * xqb);
    void *scratch = aligned_alloc(64, kernels_mul_scratch_bytes());
    problem p = {as, w, rb, cols, X, KERNELS_ACT_I16, Xq, scratch};
    double sum = 0;
    for (int i = 0; i < n; i++) {
        run(&p, T, Y, rows, 0);
        sum += Y[i % (rows * T)];
    }
    printf("%s %s T=%d N=%d: %d rows x %d columns (checksum %g)\n", isas[isa], argv[3], T, n, rows, cols, sum);
    free(w), free(X), free(Y), free(Xq), free(scratch);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--insns")) return count_insns(argc, argv);
    double secs = argc > 1 ? atof(argv[1]) : 1.0;
    static const char *const fmts[] = {"i16", "i8"};
    /* cache: 128 rows (150 KB to 1 MB); memory: 256 MB of weights, far beyond any cache */
    const int cols = 2048, small_rows = 128, T = 128;
    const size_t big_bytes = (size_t)256 << 20;
    /* Activations on a cache-line boundary: with 64-byte vectors, a misaligned x makes most loads
     * span two lines (measured: up to a third slower). */
    float *X = aligned_alloc(64, sizeof(float) * (size_t)cols * T);
    float *Y = malloc(sizeof(float) * (big_bytes / 64 + 1024 * T));
    for (int i = 0; i < cols * T; i++) X[i] = (float)rand() / RAND_MAX - 0.5f;
    size_t xqb = kernels_act_bytes(KERNELS_ACT_I16, cols);
    uint8_t *Xq = aligned_alloc(64, xqb * T);
    void *scratch = aligned_alloc(64, kernels_mul_scratch_bytes());
    printf("%-6s %-11s %14s %14s %14s %10s %10s %16s\n", "type", "isa", "matvec-cache", "matvec-memory", "64-row calls",
           "T=2 cache", "T=4 cache", "matmul T=128");
    printf("%-6s %-11s %14s %14s %14s %10s %10s %16s\n", "", "", "GB/s", "GB/s", "GB/s", "GB/s x T", "GB/s x T",
           "GFLOP/s");
    const char *only = argc > 2 ? argv[2] : NULL; /* optional: type names, "Q4_0,Q4_K" */
    for (uint32_t type = 0; type < GGML_TYPE_COUNT; type++) {
        const quant_type *qt = quant_type_of(type);
        if (!qt || (only && !listed(only, qt->name))) continue;
        size_t rb = quant_row_bytes(type, cols);
        int big_rows = (int)(big_bytes / rb) / KERNELS_ILV_ROWS * KERNELS_ILV_ROWS;
        uint8_t *w = make_weights(type, big_rows, cols, &rb), *wi = NULL;
        for (int isa = KERNELS_SCALAR; isa < KERNELS_ISA_COUNT; isa++) {
            if ((int)kernels_force((kernels_isa)isa) != isa) continue;
            /* the formats, then the interleaved layout (int16 activations) where the set has it */
            int nf = kernels_int8_type(type) ? 2 : 1, ilv = kernels_ilv_type(type);
            if (ilv && !wi) {
                wi = aligned_alloc(64, rb * (size_t)big_rows);
                kernels_interleave(type, w, wi, big_rows, cols);
            }
            for (int f = 0; f < nf + ilv; f++) {
                problem p = {type, w, rb, cols, X, (kernels_act)f, Xq, scratch};
                if (f == nf) p = (problem){type | KERNELS_ILV, wi, rb, cols, X, KERNELS_ACT_I16, Xq, scratch};
                for (int t = 0; t < T; t++)
                    kernels_quantize_act(p.fmt, X + (size_t)t * cols, cols, Xq + (size_t)t * kernels_act_bytes(p.fmt, cols));
                double cache = bench(&p, small_rows, 1, 0, Y, secs);
                double mem = bench(&p, big_rows, 1, 0, Y, secs);
                double chunked = bench(&p, big_rows, 1, 64, Y, secs);
                double t2 = bench(&p, small_rows, 2, 0, Y, secs), t4 = bench(&p, small_rows, 4, 0, Y, secs);
                double mm = bench(&p, isa ? 1024 : 32, isa ? T : 8, 0, Y, secs);
                char name[32];
                snprintf(name, sizeof name, "%s%s%s", isas[isa], kernels_int_type(type) ? " " : "",
                         f == nf ? "ilv" : kernels_int_type(type) ? fmts[f] : "");
                printf("%-6s %-11s %14.1f %14.1f %14.1f %10.1f %10.1f %16.1f\n", qt->name, name, cache, mem, chunked, t2, t4,
                       mm);
                fflush(stdout);
            }
        }
        free(w);
        free(wi);
    }
    free(X);
    free(Xq);
    free(scratch);
    free(Y);
    return 0;
}
