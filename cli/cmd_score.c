/* nucleus score: log-probabilities in exactly the JSON shape of shared/tools/reference-forward,
 * so the two can be compared field by field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Python's repr(round(v, 6)): 6 decimals without trailing zeros, and scientific notation
 * below 1e-4 ("1.2e-05"), as json.dumps prints the reference's numbers. */
static void print_pyfloat(FILE *out, double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.6f", fabs(v));
    const char *sign = signbit(v) ? "-" : "";
    char *dot = strchr(buf, '.');
    char *end = buf + strlen(buf);
    while (end > dot + 2 && end[-1] == '0') *--end = 0;
    if (strcmp(buf, "0.0") == 0 || fabs(v) >= 1e-4 || strtod(buf, NULL) >= 1e-4) {
        fprintf(out, "%s%s", sign, buf);
        return;
    }
    /* 0.0000ddd: digits after the leading zeros form the mantissa */
    const char *d = dot + 1;
    int exp10 = -1;
    while (*d == '0') { d++; exp10--; }
    char digits[16];
    snprintf(digits, sizeof digits, "%s", d);
    char *dend = digits + strlen(digits);
    while (dend > digits + 1 && dend[-1] == '0') *--dend = 0;
    if (strlen(digits) == 1) fprintf(out, "%s%se-%02d", sign, digits, -exp10);
    else fprintf(out, "%s%c.%se-%02d", sign, digits[0], digits + 1, -exp10);
}

static void log_softmax(const float *logits, int n, double *out) {
    double mx = logits[0], z = 0;
    for (int i = 1; i < n; i++) if (logits[i] > mx) mx = logits[i];
    for (int i = 0; i < n; i++) z += exp((double)logits[i] - mx);
    double lz = log(z);
    for (int i = 0; i < n; i++) out[i] = (double)logits[i] - mx - lz;
}

/* The k best [id, logprob] pairs, highest first, lower id first on ties (numpy's stable argsort). */
static void print_top(FILE *out, const double *lp, int n, int k) {
    int *best = malloc((size_t)k * sizeof *best);
    int nb = 0;
    for (int i = 0; i < n; i++) {
        if (nb == k && lp[i] <= lp[best[k - 1]]) continue;
        int j = nb < k ? nb++ : k - 1;
        while (j > 0 && lp[best[j - 1]] < lp[i]) { best[j] = best[j - 1]; j--; }
        best[j] = i;
    }
    fputc('[', out);
    for (int j = 0; j < nb; j++) {
        fprintf(out, j ? ", [%d, " : "[%d, ", best[j]);
        print_pyfloat(out, lp[best[j]]);
        fputc(']', out);
    }
    fputc(']', out);
    free(best);
}

static void print_ids(const int32_t *ids, int n) {
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    putchar(']');
}

static int fail(const nc_err *err) {
    fprintf(stderr, "error: %s\n", err->msg);
    return 1;
}

#define USAGE                                                                                                   \
    "usage: nucleus score [-m MODEL] --ids 1,2,3 [--all] [--top K] [--greedy N] [-t THREADS] [-c CTX] "         \
    CLI_CACHE_USAGE " [--fast] " CLI_DEVICE_USAGE "\n"                                                          \
    "  --ids 1,2,3        the token ids; the log-probabilities of the next token after them, as JSON\n"          \
    "  --all              every position's (teacher forcing) instead of the last one's\n"                       \
    "  --top K            the K most likely tokens per position (5)\n"                                           \
    "  --greedy N         N greedy steps after the ids, each with its top K\n"                                  \
    CLI_FAST_HELP CLI_CACHE_HELP CLI_DEVICE_HELP

int cmd_score(int argc, char **argv) {
    const char *path = NULL;
    int32_t *ids = NULL;
    int n_ids = 0;
    long top = 5, greedy = 0, threads = 0, ctx = 0;
    bool all = false, fast = false;
    nc_cache_type type_k = NC_CACHE_DEFAULT, type_v = NC_CACHE_DEFAULT;
    int32_t ngl = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = cli_cache_arg(argc, argv, &i, &type_k, &type_v);
        if (r == 0) r = cli_device_arg(argc, argv, &i, &ngl);
        if (r < 0) { free(ids); return 2; }
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(USAGE, stdout);
            free(ids);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(path = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--ids")) { if (!(v = cli_value(argc, argv, &i)) || !cli_ids(a, v, &ids, &n_ids)) return 2; }
        else if (!strcmp(a, "--top")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 20, &top)) return 2; }
        else if (!strcmp(a, "--greedy")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 0, 1 << 20, &greedy)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 512, &threads)) return 2; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 24, &ctx)) return 2; }
        else if (!strcmp(a, "--all")) all = true;
        else if (!strcmp(a, "--fast")) fast = true;
        else {
            fprintf(stderr, "error: score: unknown option '%s'\n" USAGE, a);
            free(ids);
            return 2;
        }
    }
    if (!ids) {
        fprintf(stderr, "error: score: --ids is required\n");
        return 2;
    }
    if (!path && !(path = cli_default_model())) {
        free(ids);
        return 2;
    }
    nc_err err;
    nc_model *m = NULL;
    nc_context *c = NULL;
    int rc = 1;
    int total = n_ids + (int)greedy;
    int32_t *seq = realloc(ids, (size_t)total * sizeof *seq);
    nc_batch_entry *batch = calloc((size_t)n_ids, sizeof *batch);
    double *lp = NULL;
    if (!seq || !batch) { fprintf(stderr, "error: out of memory\n"); goto done; }
    ids = seq;
    if (nc_model_load(&m, path, &err)) { rc = fail(&err); goto done; }
    nc_model_info info;
    nc_model_get_info(m, &info);
    for (int i = 0; i < n_ids; i++)
        if (ids[i] >= info.n_vocab) {
            fprintf(stderr, "error: --ids: token id %d is outside the vocabulary 0..%d\n", ids[i], info.n_vocab - 1);
            goto done;
        }
    nc_context_params cp = {.n_ctx = ctx ? (int32_t)ctx : total, .n_threads = (int32_t)threads, .type_k = type_k,
                            .type_v = type_v, .fast = fast, .n_gpu_layers = ngl};
    if (nc_context_new(&c, m, &cp, &err)) { rc = fail(&err); goto done; }
    lp = malloc((size_t)info.n_vocab * sizeof *lp);
    if (!lp) { fprintf(stderr, "error: out of memory\n"); goto done; }
    for (int i = 0; i < n_ids; i++) batch[i] = (nc_batch_entry){ids[i], i, 0, all || i == n_ids - 1};
    if (nc_forward(c, batch, n_ids, &err)) { rc = fail(&err); goto done; }
    if (all) {
        printf("{\"ids\": ");
        print_ids(ids, n_ids);
        printf(", \"top_logprobs\": [");
        for (int i = 0; i < n_ids; i++) {
            log_softmax(nc_logits(c, i), info.n_vocab, lp);
            if (i) printf(", ");
            print_top(stdout, lp, info.n_vocab, (int)top);
        }
        printf("]}\n");
        rc = 0;
        goto done;
    }
    /* As the reference: the distribution after the prompt, then (with --greedy N) N steps that
     * each take the most likely token and report the next distribution. */
    printf("{\"prompt_ids\": ");
    print_ids(ids, n_ids);
    int n_out = 0;
    const float *logits = nc_logits(c, n_ids - 1);
    /* The steps come after "ids" in the output but are known first: collect them aside. */
    char *steps = NULL;
    size_t steps_len = 0;
    FILE *sf = open_memstream(&steps, &steps_len);
    if (!sf) { fprintf(stderr, "error: out of memory\n"); goto done; }
    for (long step = 0; step < (greedy > 0 ? greedy : 1); step++) {
        log_softmax(logits, info.n_vocab, lp);
        if (step) fprintf(sf, ", ");
        print_top(sf, lp, info.n_vocab, (int)top);
        if (!greedy) break;
        int32_t next = nc_sample_greedy(logits, info.n_vocab);
        ids[n_ids + n_out++] = next;
        if (step + 1 == greedy) break;
        nc_batch_entry e = {next, n_ids + n_out - 1, 0, true};
        if (nc_forward(c, &e, 1, &err)) { fclose(sf); free(steps); rc = fail(&err); goto done; }
        logits = nc_logits(c, 0);
    }
    fclose(sf);
    printf(", \"ids\": ");
    print_ids(ids + n_ids, n_out);
    printf(", \"top_logprobs\": [%s]}\n", steps);
    free(steps);
    rc = 0;
done:
    free(lp);
    free(batch);
    free(ids);
    nc_context_free(c);
    nc_model_free(m);
    return rc;
}
