/* nucleus run: prefill the prompt in one batch, then generate token by token, streaming the
 * text as soon as each piece ends on a complete UTF-8 character. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

typedef struct run_opts {
    const char *model, *prompt;
    long n_predict, threads, ctx;
    double temp;
    uint64_t seed;
    bool seed_given;
} run_opts;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(void) {
    fprintf(stderr, "usage: nucleus run [-m MODEL] -p PROMPT [-n N] [--temp T] [--seed S] [-t THREADS] [-c CTX]\n");
}

static int parse(int argc, char **argv, run_opts *o) {
    *o = (run_opts){.n_predict = 128, .temp = 0.8};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(o->model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!(o->prompt = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 0, 1 << 24, &o->n_predict)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 512, &o->threads)) return 2; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 24, &o->ctx)) return 2; }
        else if (!strcmp(a, "--temp")) { if (!(v = cli_value(argc, argv, &i)) || !cli_float(a, v, 0, 100, &o->temp)) return 2; }
        else if (!strcmp(a, "--seed")) { if (!(v = cli_value(argc, argv, &i)) || !cli_u64(a, v, &o->seed)) return 2; o->seed_given = true; }
        else { fprintf(stderr, "error: run: unknown option '%s'\n", a); usage(); return 2; }
    }
    if (!o->prompt) { fprintf(stderr, "error: run: -p PROMPT is required\n"); usage(); return 2; }
    if (!o->model) o->model = cli_default_model();
    if (!o->seed_given) o->seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    return 0;
}

static void emit(const char *text, int n) {
    if (n > 0) {
        fwrite(text, 1, (size_t)n, stdout);
        fflush(stdout);
    }
}

/* Print the text completed by one more token (pieces longer than the buffer are rare: long
 * whitespace or code tokens; the detokenizer then says how much room it needs). */
static void emit_token(nc_detok *dt, int32_t tok) {
    char buf[512];
    int n = nc_detok_push(dt, tok, buf, sizeof buf);
    if (n <= (int)sizeof buf) {
        emit(buf, n);
        return;
    }
    char *big = malloc((size_t)n);
    if (big) emit(big, nc_detok_push(dt, tok, big, n));
    free(big);
}

int cmd_run(int argc, char **argv) {
    run_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    nc_err err;
    nc_model *m = NULL;
    nc_context *c = NULL;
    nc_detok *dt = NULL;
    int32_t *prompt = NULL;
    double t0 = now_s();
    if (nc_model_load(&m, o.model, &err)) goto fail;
    nc_model_info info;
    nc_model_get_info(m, &info);
    int n_prompt = cli_tokenize(m, o.prompt, true, &prompt, &err);
    if (n_prompt < 0) goto fail;
    if (n_prompt == 0) { snprintf(err.msg, sizeof err.msg, "the prompt is empty and the model adds no BOS token"); goto fail; }
    long n_ctx = o.ctx ? o.ctx : n_prompt + o.n_predict;
    if (!o.ctx && n_ctx > info.n_ctx_train) n_ctx = info.n_ctx_train > n_prompt ? info.n_ctx_train : n_prompt + 1;
    if (n_prompt > n_ctx) {
        snprintf(err.msg, sizeof err.msg, "the prompt has %d tokens, more than the context of %ld (-c)", n_prompt, n_ctx);
        goto fail;
    }
    nc_context_params cp = {.n_ctx = (int32_t)n_ctx, .n_threads = (int32_t)o.threads};
    if (nc_context_new(&c, m, &cp, &err)) goto fail;
    double t_load = now_s() - t0;
    dt = nc_detok_new(m);
    nc_batch_entry *batch = calloc((size_t)n_prompt, sizeof *batch);
    if (!dt || !batch) { free(batch); snprintf(err.msg, sizeof err.msg, "out of memory"); goto fail; }
    for (int i = 0; i < n_prompt; i++) batch[i] = (nc_batch_entry){prompt[i], i, 0, i == n_prompt - 1};

    fwrite(o.prompt, 1, strlen(o.prompt), stdout);
    fflush(stdout);
    double t1 = now_s();
    int frc = nc_forward(c, batch, n_prompt, &err);
    free(batch);
    if (frc) goto fail;
    double t_prompt = now_s() - t1;
    const float *logits = nc_logits(c, n_prompt - 1);

    nc_rng rng;
    nc_rng_seed(&rng, o.seed);
    char piece[16];
    int n_gen = 0, pos = n_prompt;
    const char *stop = "length";
    double t2 = now_s();
    while (n_gen < o.n_predict) {
        int32_t tok = nc_sample_temperature(logits, info.n_vocab, (float)o.temp, &rng);
        if (nc_token_is_eog(m, tok)) { stop = "end of generation token"; break; }
        emit_token(dt, tok);
        n_gen++;
        if (n_gen == o.n_predict) break;
        if (pos >= n_ctx) { stop = "context full"; break; }
        nc_batch_entry e = {tok, pos++, 0, true};
        if (nc_forward(c, &e, 1, &err)) goto fail;
        logits = nc_logits(c, 0);
    }
    emit(piece, nc_detok_flush(dt, piece, sizeof piece));
    double t_gen = now_s() - t2;
    putchar('\n');
    fflush(stdout);

    fprintf(stderr, "\n[model] %s: %s, %d layers, %.1f MB, kernels %s, %d threads, seed %llu\n", o.model, info.arch,
            info.n_layer, info.file_bytes / 1e6, nc_kernels_name(), nc_context_n_threads(c),
            (unsigned long long)o.seed);
    fprintf(stderr, "[kv cache] %.1f KiB per token, %.2f MiB for %d tokens\n", nc_kv_bytes_per_token(c) / 1024.0,
            nc_kv_bytes_total(c) / (1024.0 * 1024.0), nc_context_n_ctx(c));
    fprintf(stderr, "[time] load %.1f ms | prompt %d tokens, %.1f tok/s | generated %d tokens, %.1f tok/s | stop: %s\n",
            t_load * 1e3, n_prompt, n_prompt / (t_prompt > 0 ? t_prompt : 1e-9), n_gen,
            n_gen > 0 ? n_gen / (t_gen > 0 ? t_gen : 1e-9) : 0.0, stop);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "error: %s\n", err.msg);
    rc = 1;
done:
    free(prompt);
    nc_detok_free(dt);
    nc_context_free(c);
    nc_model_free(m);
    return rc;
}
