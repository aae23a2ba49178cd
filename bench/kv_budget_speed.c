/* What a KV budget costs: prefill and decode speed without one, with H2O's scores accumulated but
 * nothing evicted, and with a window or H2O evicting a cell after every decoded token (README,
 * "KV cache compression"). Random tokens; the best of --reps runs, interleaved, since a shared
 * machine's speed moves between runs.
 *
 * Build: make build/kv_budget_speed
 * Run:   build/kv_budget_speed -m MODEL [-p 1024] [-n 128] [-t 1] [--reps 3]
 * The budget is the prefill length p: the evicting policies hold p cells while decoding, the
 * others grow to p + n. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nucleus.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct config {
    const char *name;
    nc_kv_policy policy;
    int budget, recent; /* 0: the prefill length, and half of it */
} config;

int main(int argc, char **argv) {
    const char *path = NULL;
    int P = 1024, D = 128, threads = 1, reps = 3;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(a, "-m")) path = v;
        else if (v && !strcmp(a, "-p")) P = atoi(v);
        else if (v && !strcmp(a, "-n")) D = atoi(v);
        else if (v && !strcmp(a, "-t")) threads = atoi(v);
        else if (v && !strcmp(a, "--reps")) reps = atoi(v);
        else P = 0; /* unknown: usage */
    }
    if (!path || P < 2 || D < 1 || threads < 1 || reps < 1) {
        fprintf(stderr, "usage: kv_budget_speed -m MODEL [-p 1024] [-n 128] [-t 1] [--reps 3]\n");
        return 2;
    }
    const config cf[] = {
        {"no budget", NC_KV_NONE, 0, 0},
        {"H2O, budget never reached (scores only)", NC_KV_H2O, P + D, 0},
        {"window, budget = prefill", NC_KV_WINDOW, 0, 0},
        {"H2O, budget = prefill, recent half", NC_KV_H2O, 0, 0},
    };
    enum { N_CF = sizeof cf / sizeof cf[0] };
    nc_err err;
    nc_model *m;
    if (nc_model_load(&m, path, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    nc_batch_entry *b = malloc(sizeof *b * (size_t)P);
    double pre[N_CF], dec[N_CF];
    for (int k = 0; k < N_CF; k++) pre[k] = dec[k] = 1e30;
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < N_CF; k++) {
            nc_context *c;
            nc_context_params cp = {.n_ctx = P + D + 1, .n_threads = threads};
            int budget = cf[k].budget ? cf[k].budget : P, recent = cf[k].budget ? cf[k].recent : P / 2;
            if (nc_context_new(&c, m, &cp, &err) || nc_kv_seq_set_budget(c, 0, cf[k].policy, budget, recent, &err)) {
                fprintf(stderr, "error: %s\n", err.msg);
                return 1;
            }
            for (int i = 0; i < P; i++) b[i] = (nc_batch_entry){1 + (i * 7919) % 20000, i, 0, i == P - 1};
            double t0 = now();
            if (nc_forward(c, b, P, &err)) goto fail;
            double t1 = now();
            for (int i = 0; i < D; i++) {
                nc_batch_entry e = {1 + (i * 104729) % 20000, P + i, 0, true};
                if (nc_forward(c, &e, 1, &err)) goto fail;
            }
            double t2 = now();
            pre[k] = t1 - t0 < pre[k] ? t1 - t0 : pre[k];
            dec[k] = t2 - t1 < dec[k] ? t2 - t1 : dec[k];
            nc_context_free(c);
            continue;
        fail:
            fprintf(stderr, "error: %s\n", err.msg);
            return 1;
        }
    printf("| %d threads, prefill %d, decode %d | prefill tok/s | decode ms/token |\n|---|---|---|\n", threads, P, D);
    for (int k = 0; k < N_CF; k++) printf("| %s | %.1f | %.2f |\n", cf[k].name, P / pre[k], 1e3 * dec[k] / D);
    free(b);
    nc_model_free(m);
    return 0;
}
