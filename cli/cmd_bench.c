/* nucleus bench: prefill (pp) and decode (tg) speed in the manner of llama-bench — random tokens,
 * a warm-up pass, then r repetitions, mean ± standard deviation — plus this machine's memory read
 * bandwidth and decode speed as a share of the ceiling it sets (bandwidth / bytes per token).
 * With -d DEPTH, as llama-bench's, the cache first holds DEPTH random tokens (their prefill not
 * timed) and each test runs on top of them: prefill and decode at a long context. With --all-logits
 * the prefill computes every row's logits, as a speculative verification pass does (bench/spec.sh
 * predicts its speed-ups from such passes), where a prompt's prefill needs only the last row's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

typedef struct bench_opts {
    const char *model;
    long n_prompt, n_gen, depth, threads, reps;
    bool json, no_bandwidth, fast, all_logits;
    nc_cache_type type_k, type_v;
    int32_t n_gpu_layers;
    cli_hf hf;
    cli_lora lora;
} bench_opts;

typedef struct stats { double mean, sd; } stats;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static stats summarize(const double *v, int n) {
    stats s = {0, 0};
    for (int i = 0; i < n; i++) s.mean += v[i] / n;
    for (int i = 0; i < n && n > 1; i++) s.sd += (v[i] - s.mean) * (v[i] - s.mean) / (n - 1);
    s.sd = sqrt(s.sd);
    return s;
}

#define USAGE                                                                                                    \
    "usage: nucleus bench [-m MODEL | -hf USER/REPO[:QUANT]] [-p 128] [-n 64] [-d 0] [-t THREADS] [-r 5] " CLI_CACHE_USAGE               \
    " [--fast] [--all-logits] [--json] [--no-bandwidth] " CLI_DEVICE_USAGE "\n"                                  \
    "                    " CLI_LORA_USAGE "\n"                                  \
    "  -p N, -n N         prompt tokens prefilled (pp) and tokens decoded (tg) per repetition (llama-bench's)\n" \
    "  -d N, --n-depth N  tokens already in the context when each test starts (llama-bench's; their prefill\n"  \
    "                     is not timed): rows read 'pp128 @ d4096'\n"                                             \
    "  -r N               repetitions after a warm-up (mean +- standard deviation)\n"                          \
    CLI_HF_HELP CLI_FAST_HELP                                                                                  \
    "  --all-logits       the prefill computes every row's logits, as a speculative verification pass\n"     \
    "                     (rows read 'pp17 all'); by default only the last row's, as a prompt's\n"          \
    "  --no-bandwidth     skip measuring the memory read bandwidth (on the GPU it is not measured)\n"          \
    CLI_CACHE_HELP CLI_DEVICE_HELP CLI_LORA_HELP

/* 0: run; 2: refused (message printed); -1: help was asked for (printed). */
static int parse(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.n_prompt = 128, .n_gen = 64, .reps = 5};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = cli_cache_arg(argc, argv, &i, &o->type_k, &o->type_v);
        if (r == 0) r = cli_device_arg(argc, argv, &i, &o->n_gpu_layers);
        if (r == 0) r = cli_hf_arg(argc, argv, &i, &o->hf);
        if (r == 0) r = cli_lora_arg(argc, argv, &i, &o->lora);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(USAGE, stdout); return -1; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(o->model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-p")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 0, 1 << 16, &o->n_prompt)) return 2; }
        else if (!strcmp(a, "-n")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 0, 1 << 16, &o->n_gen)) return 2; }
        else if (!strcmp(a, "-d") || !strcmp(a, "--n-depth")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 0, 1 << 20, &o->depth)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 512, &o->threads)) return 2; }
        else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1000, &o->reps)) return 2; }
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--no-bandwidth")) o->no_bandwidth = true;
        else if (!strcmp(a, "--fast")) o->fast = true;
        else if (!strcmp(a, "--all-logits")) o->all_logits = true;
        else {
            fprintf(stderr, "error: bench: unknown option '%s'\n" USAGE, a);
            return 2;
        }
    }
    return cli_model_path(&o->model, &o->hf);
}

/* One prefill of n tokens at positions from..from+n-1 of sequence 0, the logits of every row or of
 * the last; returns seconds. */
static int prefill(nc_context *c, const int32_t *toks, int from, int n, bool all, double *secs, nc_err *err) {
    nc_batch_entry *b = malloc((size_t)n * sizeof *b);
    if (!b) { snprintf(err->msg, sizeof err->msg, "out of memory"); return -1; }
    for (int i = 0; i < n; i++) b[i] = (nc_batch_entry){toks[i], from + i, 0, all || i == n - 1};
    double t0 = now_s();
    int rc = nc_forward(c, b, n, err);
    *secs = now_s() - t0;
    free(b);
    return rc;
}

/* Back to the depth's tokens alone, so each repetition starts from the same cache and only the
 * test's own tokens are timed. They are filled once and kept (the test's cells cut off), except
 * with sliding-window layers: their rings have overwritten positions of the depth, so refill. */
static int to_depth(nc_context *c, const int32_t *depth_toks, int depth, bool refill, nc_err *err) {
    if (depth > 0 && !refill && nc_kv_seq_len(c, 0) >= depth) {
        nc_kv_seq_truncate(c, 0, depth);
        return 0;
    }
    nc_kv_seq_clear(c, 0);
    double secs;
    return depth > 0 ? prefill(c, depth_toks, 0, depth, false, &secs, err) : 0;
}

/* n decode steps of one token each after `depth` cells; returns seconds. */
static int time_decode(nc_context *c, const int32_t *toks, int depth, int n, double *secs, nc_err *err) {
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        nc_batch_entry e = {toks[i], depth + i, 0, true};
        if (nc_forward(c, &e, 1, err)) return -1;
    }
    *secs = now_s() - t0;
    return 0;
}

/* toks holds the depth's tokens, then the test's. */
static int measure(nc_context *c, const bench_opts *o, const int32_t *toks, bool pp, bool refill, stats *out,
                   nc_err *err) {
    int n = (int)(pp ? o->n_prompt : o->n_gen), depth = (int)o->depth;
    const int32_t *test = toks + depth;
    double secs, *rates = malloc((size_t)o->reps * sizeof *rates);
    if (!rates) { snprintf(err->msg, sizeof err->msg, "out of memory"); return -1; }
    int rc = 0;
    for (long r = -1; r < o->reps && rc == 0; r++) { /* r = -1 is the warm-up */
        rc = to_depth(c, toks, depth, refill, err);
        if (rc == 0) rc = pp ? prefill(c, test, depth, n, o->all_logits, &secs, err) : time_decode(c, test, depth, n, &secs, err);
        if (rc == 0 && r >= 0) rates[r] = n / secs;
    }
    if (rc == 0) *out = summarize(rates, (int)o->reps);
    free(rates);
    return rc;
}

/* llama-bench's row name: "pp128", or "pp128 @ d4096" on top of a depth; "pp17 all" with every
 * row's logits. */
static void test_name(char *buf, size_t cap, const char *kind, long n, bool all, long depth) {
    int at = snprintf(buf, cap, "%s%ld%s", kind, n, all ? " all" : "");
    if (depth > 0) snprintf(buf + at, cap - (size_t)at, " @ d%ld", depth);
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    nc_err err;
    nc_model *m = NULL;
    nc_context *c = NULL;
    int32_t *toks = NULL;
    if (cli_model_load(&m, o.model, &o.lora, &err)) goto fail;
    nc_model_info info;
    nc_model_get_info(m, &info);
    long n_tok = o.depth + (o.n_prompt > o.n_gen ? o.n_prompt : o.n_gen);
    nc_context_params cp = {.n_ctx = (int32_t)(n_tok + 1), .n_threads = (int32_t)o.threads, .type_k = o.type_k,
                            .type_v = o.type_v, .fast = o.fast, .n_gpu_layers = o.n_gpu_layers};
    if (nc_context_new(&c, m, &cp, &err)) goto fail;
    bool gpu = strcmp(nc_context_device(c), "cpu") != 0;
    if (gpu && !o.json) fprintf(stderr, "bench: on the GPU: %s\n", nc_context_device(c));
    toks = malloc((size_t)(n_tok + 1) * sizeof *toks);
    if (!toks) { snprintf(err.msg, sizeof err.msg, "out of memory"); goto fail; }
    nc_rng rng;
    nc_rng_seed(&rng, 1);
    for (long i = 0; i <= n_tok; i++) toks[i] = (int32_t)(nc_rng_next(&rng) % (uint64_t)info.n_vocab);
    stats pp = {0, 0}, tg = {0, 0};
    bool refill = info.swa_window > 0;
    if (o.n_prompt > 0 && measure(c, &o, toks, true, refill, &pp, &err)) goto fail;
    if (o.n_gen > 0 && measure(c, &o, toks, false, refill, &tg, &err)) goto fail;
    int threads = nc_context_n_threads(c);
    double bw = o.no_bandwidth || gpu ? 0 : nc_measure_read_bandwidth(threads);
    double ceiling = bw > 0 ? bw / (double)info.decode_bytes : 0;
    double pct = ceiling > 0 ? 100.0 * tg.mean / ceiling : 0;
    char kern[64]; /* the kernel set, and the fast mode when on */
    snprintf(kern, sizeof kern, "%s%s", gpu ? "cuda" : nc_kernels_name(), o.fast && !gpu ? " fast" : "");
    nc_cache_type type_k, type_v;
    nc_context_cache_types(c, &type_k, &type_v);
    const char *tk = cli_cache_type_name(type_k), *tv = cli_cache_type_name(type_v);
    char buf[16];
    const char *kvt = cli_cache_types(type_k, type_v, buf);
    char pp_name[48], tg_name[48];
    test_name(pp_name, sizeof pp_name, "pp", o.n_prompt, o.all_logits, o.depth);
    test_name(tg_name, sizeof tg_name, "tg", o.n_gen, false, o.depth);
    if (o.json) {
        printf("{\"model\": \"%s\", \"arch\": \"%s\", \"file_bytes\": %llu, \"decode_bytes\": %llu, \"threads\": %d, "
               "\"kernels\": \"%s\", \"fast\": %s, \"type_k\": \"%s\", \"type_v\": \"%s\", \"repetitions\": %ld, \"depth\": %ld, \"pp\": {\"tokens\": %ld, \"all_logits\": %s, \"mean\": %.2f, \"sd\": %.2f}, "
               "\"tg\": {\"tokens\": %ld, \"mean\": %.2f, \"sd\": %.2f}, \"read_bandwidth\": %.0f, "
               "\"decode_ceiling\": %.2f, \"decode_pct_of_ceiling\": %.1f, \"device\": \"%s\"}\n",
               base_name(o.model), info.arch, (unsigned long long)info.file_bytes,
               (unsigned long long)info.decode_bytes, threads, gpu ? "cuda" : nc_kernels_name(), o.fast ? "true" : "false", tk, tv, o.reps, o.depth, o.n_prompt, o.all_logits ? "true" : "false", pp.mean, pp.sd,
               o.n_gen, tg.mean, tg.sd, bw, ceiling, pct, nc_context_device(c));
    } else {
        printf("| model | size | threads | kernels | KV cache | test | tokens/s |\n|---|---|---|---|---|---|---|\n");
        if (o.n_prompt > 0)
            printf("| %s | %.1f MB | %d | %s | %s | %s | %.2f ± %.2f |\n", base_name(o.model), info.file_bytes / 1e6,
                   threads, kern, kvt, pp_name, pp.mean, pp.sd);
        if (o.n_gen > 0)
            printf("| %s | %.1f MB | %d | %s | %s | %s | %.2f ± %.2f |\n", base_name(o.model), info.file_bytes / 1e6,
                   threads, kern, kvt, tg_name, tg.mean, tg.sd);
        if (bw > 0)
            printf("\nmemory read bandwidth %.1f GB/s (%d threads); decode reads %.1f MB per token, so its ceiling is "
                   "%.1f tokens/s; %s runs at %.0f%% of it\n",
                   bw / 1e9, threads, info.decode_bytes / 1e6, ceiling, tg_name, pct);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "error: %s\n", err.msg);
    rc = 1;
done:
    free(toks);
    nc_context_free(c);
    nc_model_free(m);
    return rc;
}
