/* nucleus score: log-probabilities in exactly the JSON shape of shared/tools/reference-forward,
 * so the two can be compared field by field. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

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

static void print_ids(FILE *out, const int32_t *ids, int n) {
    fputc('[', out);
    for (int i = 0; i < n; i++) fprintf(out, i ? ", %d" : "%d", ids[i]);
    fputc(']', out);
}

#define USAGE                                                                                                   \
    "usage: nucleus score [-m MODEL] --ids 1,2,3 [--all] [--top K] [--greedy N] [-t THREADS] [-c CTX] "         \
    CLI_CACHE_USAGE " [--fast] " CLI_DEVICE_USAGE " [--batch FILE]\n"                                          \
    "                     " CLI_LORA_USAGE "\n"                                                                \
    "  --ids 1,2,3        the token ids; the log-probabilities of the next token after them, as JSON\n"          \
    "  --all              every position's (teacher forcing) instead of the last one's\n"                       \
    "  --top K            the K most likely tokens per position (5)\n"                                           \
    "  --greedy N         N greedy steps after the ids, each with its top K\n"                                  \
    CLI_FAST_HELP CLI_CACHE_HELP CLI_DEVICE_HELP CLI_LORA_HELP                                                  \
    "  --batch FILE       many requests in one process (FILE, or - for stdin): each line a JSON array of\n"     \
    "                     score's arguments (e.g. [\"--ids\", \"1,2\", \"--all\"]) added after the command\n"   \
    "                     line's; one line of JSON out per line in, in order, flushed: the result, or\n"        \
    "                     {\"error\": MESSAGE}. The model stays loaded while the lines name the same one\n"     \
    "                     (and the same adapters).\n"                                                        \
    "                     Exit status 1 when any line failed\n"

/* One request's options. */
typedef struct score_opts {
    const char *path, *batch;
    int32_t *ids;
    int n_ids;
    long top, greedy, threads, ctx;
    bool all, fast;
    nc_cache_type type_k, type_v;
    int32_t ngl;
    cli_lora lora;
} score_opts;

/* Reads argv into *o (a request of --batch when batch_line). 0: parsed; 1: help printed; 2: refused
 * (message printed). */
static int parse_opts(int argc, char **argv, score_opts *o, bool batch_line) {
    *o = (score_opts){.top = 5, .type_k = NC_CACHE_DEFAULT, .type_v = NC_CACHE_DEFAULT};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = cli_cache_arg(argc, argv, &i, &o->type_k, &o->type_v);
        if (r == 0) r = cli_device_arg(argc, argv, &i, &o->ngl);
        if (r == 0) r = cli_lora_arg(argc, argv, &i, &o->lora);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (batch_line) {
                fprintf(stderr, "error: score: %s in a --batch request\n", a);
                return 2;
            }
            fputs(USAGE, stdout);
            return 1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(o->path = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--ids")) {
            free(o->ids);
            o->ids = NULL;
            if (!(v = cli_value(argc, argv, &i)) || !cli_ids(a, v, &o->ids, &o->n_ids)) return 2;
        }
        else if (!strcmp(a, "--top")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 20, &o->top)) return 2; }
        else if (!strcmp(a, "--greedy")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 0, 1 << 20, &o->greedy)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 512, &o->threads)) return 2; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 24, &o->ctx)) return 2; }
        else if (!strcmp(a, "--batch") && !batch_line) { if (!(o->batch = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--all")) o->all = true;
        else if (!strcmp(a, "--fast")) o->fast = true;
        else {
            fprintf(stderr, "error: score: unknown option '%s'\n" USAGE, a);
            return 2;
        }
    }
    return 0;
}

/* One request on a loaded model: its JSON into out. 0, or 1 with the reason in msg. */
static int score_one(nc_model *m, const score_opts *o, FILE *out, char *msg, size_t msg_size) {
    nc_err err;
    nc_context *c = NULL;
    int rc = 1, n_ids = o->n_ids;
    int total = n_ids + (int)o->greedy;
    int32_t *ids = malloc((size_t)total * sizeof *ids);
    nc_batch_entry *batch = calloc((size_t)n_ids, sizeof *batch);
    double *lp = NULL;
    char *steps = NULL;
    size_t steps_len = 0;
    FILE *sf = NULL;
    nc_model_info info;
    nc_model_get_info(m, &info);
    if (!ids || !batch || !(lp = malloc((size_t)info.n_vocab * sizeof *lp))) {
        snprintf(msg, msg_size, "out of memory");
        goto done;
    }
    memcpy(ids, o->ids, (size_t)n_ids * sizeof *ids);
    for (int i = 0; i < n_ids; i++)
        if (ids[i] >= info.n_vocab) {
            snprintf(msg, msg_size, "--ids: token id %d is outside the vocabulary 0..%d", ids[i], info.n_vocab - 1);
            goto done;
        }
    nc_context_params cp = {.n_ctx = o->ctx ? (int32_t)o->ctx : total, .n_threads = (int32_t)o->threads,
                            .type_k = o->type_k, .type_v = o->type_v, .fast = o->fast, .n_gpu_layers = o->ngl};
    if (nc_context_new(&c, m, &cp, &err)) goto failed;
    for (int i = 0; i < n_ids; i++) batch[i] = (nc_batch_entry){ids[i], i, 0, o->all || i == n_ids - 1};
    if (nc_forward(c, batch, n_ids, &err)) goto failed;
    if (o->all) {
        fprintf(out, "{\"ids\": ");
        print_ids(out, ids, n_ids);
        fprintf(out, ", \"top_logprobs\": [");
        for (int i = 0; i < n_ids; i++) {
            log_softmax(nc_logits(c, i), info.n_vocab, lp);
            if (i) fprintf(out, ", ");
            print_top(out, lp, info.n_vocab, (int)o->top);
        }
        fprintf(out, "]}\n");
        rc = 0;
        goto done;
    }
    /* As the reference: the distribution after the prompt, then (with --greedy N) N steps that
     * each take the most likely token and report the next distribution. */
    int n_out = 0;
    const float *logits = nc_logits(c, n_ids - 1);
    /* The steps come after "ids" in the output but are known first: collect them aside. */
    if (!(sf = open_memstream(&steps, &steps_len))) {
        snprintf(msg, msg_size, "out of memory");
        goto done;
    }
    for (long step = 0; step < (o->greedy > 0 ? o->greedy : 1); step++) {
        log_softmax(logits, info.n_vocab, lp);
        if (step) fprintf(sf, ", ");
        print_top(sf, lp, info.n_vocab, (int)o->top);
        if (!o->greedy) break;
        int32_t next = nc_sample_greedy(logits, info.n_vocab);
        ids[n_ids + n_out++] = next;
        if (step + 1 == o->greedy) break;
        nc_batch_entry e = {next, n_ids + n_out - 1, 0, true};
        if (nc_forward(c, &e, 1, &err)) goto failed;
        logits = nc_logits(c, 0);
    }
    fclose(sf);
    sf = NULL;
    fprintf(out, "{\"prompt_ids\": ");
    print_ids(out, ids, n_ids);
    fprintf(out, ", \"ids\": ");
    print_ids(out, ids + n_ids, n_out);
    fprintf(out, ", \"top_logprobs\": [%s]}\n", steps);
    rc = 0;
    goto done;
failed:
    snprintf(msg, msg_size, "%s", err.msg);
done:
    if (sf) fclose(sf);
    free(steps);
    free(lp);
    free(batch);
    free(ids);
    nc_context_free(c);
    return rc;
}

/* A JSON string's body (the quotes not included) for a message. */
static void print_json_text(FILE *out, const char *s) {
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(out, "\\%c", ch);
        else if (ch < 0x20) fprintf(out, "\\u%04x", ch);
        else fputc(ch, out);
    }
}

/* --batch: a request per line, each answered with one line. */
static int score_batch(const char *batch, int argc, char **argv) {
    FILE *in = strcmp(batch, "-") ? fopen(batch, "r") : stdin;
    if (!in) {
        fprintf(stderr, "error: --batch: %s: %s\n", batch, strerror(errno));
        return 1;
    }
    nc_model *m = NULL;
    char *loaded = NULL, *line = NULL, msg[1024];
    size_t cap = 0;
    int failures = 0;
    while (getline(&line, &cap, in) >= 0) {
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        score_opts o = {0};
        int n = 0, rc = 2;
        char **args = NULL;
        cJSON *req = cJSON_Parse(line);
        msg[0] = 0;
        if (cJSON_IsArray(req) && (n = cJSON_GetArraySize(req)) < (1 << 20) && (args = calloc((size_t)argc + (size_t)n + 1, sizeof *args))) {
            int k = 0;
            for (int i = 0; i < argc; i++)
                if (!strcmp(argv[i], "--batch")) i++;
                else args[k++] = argv[i];
            const cJSON *a;
            bool strings = true;
            cJSON_ArrayForEach(a, req) {
                if (cJSON_IsString(a)) args[k++] = a->valuestring;
                else strings = false;
            }
            if (strings) rc = parse_opts(k, args, &o, true);
            else snprintf(msg, sizeof msg, "a request is a JSON array of strings");
        } else snprintf(msg, sizeof msg, "a request is a JSON array of strings");
        if (rc == 0 && !o.ids) snprintf(msg, sizeof msg, "--ids is required"), rc = 2;
        else if (rc == 2 && !msg[0]) snprintf(msg, sizeof msg, "invalid arguments (the reason is on stderr)");
        if (rc == 0) {
            const char *path = o.path ? o.path : cli_default_model();
            if (!path) snprintf(msg, sizeof msg, "no model: give -m"), rc = 2;
            else {
                char key[8192]; /* the model and its adapters */
                int at = snprintf(key, sizeof key, "%s", path);
                for (int k = 0; k < o.lora.n && at > 0 && (size_t)at < sizeof key; k++)
                    at += snprintf(key + at, sizeof key - (size_t)at, "\n%s\t%.9g", o.lora.path[k], o.lora.scale[k]);
                bool fits = at > 0 && (size_t)at < sizeof key;
                if (!fits || !loaded || strcmp(loaded, key)) {
                    nc_err err;
                    nc_model_free(m);
                    m = NULL;
                    free(loaded);
                    loaded = NULL;
                    if (cli_model_load(&m, path, &o.lora, &err)) snprintf(msg, sizeof msg, "%s", err.msg), rc = 1;
                    else loaded = strdup(key);
                }
            }
        }
        char *res = NULL;
        size_t res_len = 0;
        FILE *rf = open_memstream(&res, &res_len);
        if (rc == 0 && rf) rc = score_one(m, &o, rf, msg, sizeof msg);
        if (rf) fclose(rf);
        if (rc == 0 && res) fputs(res, stdout);
        else {
            failures++;
            if (rc == 1 && !msg[0]) snprintf(msg, sizeof msg, "out of memory");
            fputs("{\"error\": \"", stdout);
            print_json_text(stdout, msg);
            fputs("\"}\n", stdout);
            if (rc != 2 || strcmp(msg, "invalid arguments (the reason is on stderr)")) fprintf(stderr, "error: %s\n", msg);
        }
        fflush(stdout);
        free(res);
        free(args);
        free(o.ids);
        cJSON_Delete(req);
    }
    free(line);
    free(loaded);
    nc_model_free(m);
    if (in != stdin) fclose(in);
    return failures ? 1 : 0;
}

int cmd_score(int argc, char **argv) {
    score_opts o;
    int r = parse_opts(argc - 1, argv + 1, &o, false);
    if (r) {
        free(o.ids);
        return r == 1 ? 0 : 2;
    }
    if (o.batch) {
        free(o.ids);
        return score_batch(o.batch, argc - 1, argv + 1);
    }
    if (!o.ids) {
        fprintf(stderr, "error: score: --ids is required\n");
        return 2;
    }
    const char *path = o.path ? o.path : cli_default_model();
    if (!path) {
        free(o.ids);
        return 2;
    }
    nc_err err;
    nc_model *m = NULL;
    int rc = 1;
    char msg[1024];
    if (cli_model_load(&m, path, &o.lora, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        goto done;
    }
    if (score_one(m, &o, stdout, msg, sizeof msg)) fprintf(stderr, "error: %s\n", msg);
    else rc = 0;
done:
    free(o.ids);
    nc_model_free(m);
    return rc;
}
