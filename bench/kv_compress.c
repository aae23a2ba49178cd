/* KV cache compression under a budget: perplexity of real text and KL divergence from the full
 * cache, per policy and budget (README, "KV cache compression").
 *
 * Each text (stories separated by lines "<|endoftext|>", each tokenized with the model's BOS and
 * cut at --max-tokens) is decoded teacher-forced, one token per nc_forward: first with the full
 * cache (the reference distribution at every step), then under each policy and budget B. At step
 * t the model has seen tokens 0..t, of which the cache holds at most B + 1 (B kept after the
 * previous step, and token t itself), and predicts token t + 1. Policies:
 *
 *   window     the last B tokens (NC_KV_WINDOW)
 *   sinks      the first 4 and the last B - 4 tokens (NC_KV_SINKS; StreamingLLM's 4 sinks)
 *   h2o        the last B/2 tokens (--h2o-recent: another share of B) and the others that received
 *              the most attention (NC_KV_H2O)
 *   streaming  sinks as StreamingLLM runs them (Xiao et al. 2023, section 3.2): the kept tokens
 *              take positions 0..B-1 in the cache and the next token position B, rather than
 *              their positions in the text; a keep-list applied here with nc_kv_seq_keep
 *
 * Every policy keeps positions but streaming. Output: a markdown table of perplexity and mean
 * KL(full || compressed) in nats per predicted token (over every predicted token of every text),
 * and with --csv the same as data for bench/kv_compress_plot.py.
 *
 * Build: make build/kv_compress
 * Run:   build/kv_compress -m MODEL [--tokenizer TOKENIZER] [-f TEXT] [--budgets 16,32,64,128,256]
 *                          [--h2o-recent 0.5] [--max-tokens 512] [-t THREADS] [--csv FILE]
 * TOKENIZER: a tokenizer.json or a directory holding one, to tokenize the text as the model was
 * trained when the GGUF file's vocabulary segments it otherwise (TinyStories-656K's GGUF scores
 * its pieces where its tokenizer.json merges them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"

#define SINKS 4
#define MAX_BUDGETS 16
#define MAX_BUDGET 4096

typedef struct text {
    int32_t *tok;
    int n;
} text;

typedef struct policy {
    const char *name;
    nc_kv_policy kind;
    bool streaming;
} policy;

static const policy policies[] = {
    {"window", NC_KV_WINDOW, false},
    {"sinks", NC_KV_SINKS, false},
    {"h2o", NC_KV_H2O, false},
    {"streaming", NC_KV_NONE, true},
};
enum { N_POLICIES = sizeof policies / sizeof policies[0] };

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
        if (fread(buf, 1, (size_t)n, f) == (size_t)n) buf[n] = 0;
        else {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

/* The stories of a file, tokenized (with BOS) by the model's vocabulary or by vf, each cut at max
 * tokens. */
static int load_texts(const nc_model *m, const nc_vocab_file *vf, const char *path, int max, text **out, int *n_out) {
    char *all = read_file(path);
    if (!all) {
        fprintf(stderr, "error: cannot read %s\n", path);
        return -1;
    }
    const char *sep = "<|endoftext|>";
    text *t = NULL;
    int n = 0;
    for (char *p = all; *p;) {
        char *end = strstr(p, sep);
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && (p[len - 1] == '\n' || p[len - 1] == ' ')) len--;
        while (len > 0 && (*p == '\n' || *p == ' ')) p++, len--;
        if (len > 0) {
            nc_err err = {"out of memory"};
            text *nt = realloc(t, sizeof *t * (size_t)(n + 1));
            int32_t *tok = malloc(sizeof *tok * (len + 8)); /* a token per byte at most, BOS, a space prefix */
            t = nt ? nt : t;
            int k = !nt || !tok ? -1
                    : vf        ? nc_vocab_file_tokenize(vf, p, len, true, false, tok, (int)len + 8, &err)
                                : nc_tokenize(m, p, len, true, false, tok, (int)len + 8, &err);
            if (k < 0) {
                fprintf(stderr, "error: %s: %s\n", path, err.msg);
                free(tok);
                while (n > 0) free(t[--n].tok);
                free(t);
                free(all);
                return -1;
            }
            t[n++] = (text){tok, k < max ? k : max};
        }
        if (!end) break;
        p = end + strlen(sep);
    }
    free(all);
    *out = t;
    *n_out = n;
    return 0;
}

static void log_softmax(const float *logits, int n, double *out) {
    double mx = logits[0], z = 0;
    for (int i = 1; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < n; i++) z += exp((double)logits[i] - mx);
    double lz = log(z) + mx;
    for (int i = 0; i < n; i++) out[i] = (double)logits[i] - lz;
}

/* StreamingLLM's cache after a step: the first SINKS tokens and the last budget - SINKS, at
 * positions 0..budget-1. Returns the position of the next token. */
static int32_t streaming_keep(nc_context *c, int32_t budget, int32_t next, nc_err *err) {
    int32_t len = nc_kv_seq_len(c, 0);
    if (len <= budget) return next;
    int32_t cells[MAX_BUDGET], pos[MAX_BUDGET];
    for (int32_t i = 0; i < budget; i++) {
        cells[i] = i < SINKS ? i : len - (budget - i);
        pos[i] = i;
    }
    return nc_kv_seq_keep(c, 0, cells, budget, pos, err) ? -1 : budget;
}

/* Teacher-forced decoding of a text under a policy (budget 0: the full cache). ref: the full
 * cache's log-probabilities at every step ([n - 1][V]), filled when budget is 0. Adds the text's
 * negative log-likelihood and KL(ref || this) to *nll and *kl. */
static int run(nc_context *c, const text *t, const policy *p, int32_t budget, double h2o_recent, double *ref, int V,
               double *lp, double *nll, double *kl) {
    nc_err err;
    nc_kv_seq_clear(c, 0);
    bool full = budget == 0;
    int32_t recent = p->kind == NC_KV_SINKS ? budget - SINKS : (int32_t)(budget * h2o_recent);
    if (nc_kv_seq_set_budget(c, 0, full || p->streaming ? NC_KV_NONE : p->kind, budget, recent, &err)) goto fail;
    int32_t pos = 0;
    for (int i = 0; i + 1 < t->n; i++) {
        nc_batch_entry e = {t->tok[i], pos++, 0, true};
        if (nc_forward(c, &e, 1, &err)) goto fail;
        double *row = full ? ref + (size_t)i * V : lp;
        log_softmax(nc_logits(c, 0), V, row);
        *nll -= row[t->tok[i + 1]];
        if (!full) {
            const double *r = ref + (size_t)i * V;
            double d = 0;
            for (int v = 0; v < V; v++) d += exp(r[v]) * (r[v] - row[v]);
            *kl += d;
        }
        if (!full && p->streaming && (pos = streaming_keep(c, budget, pos, &err)) < 0) goto fail;
    }
    return 0;
fail:
    fprintf(stderr, "error: %s\n", err.msg);
    return -1;
}

static int parse_budgets(const char *s, int32_t *b, int *n) {
    *n = 0;
    for (char *end; *s && *n < MAX_BUDGETS; s = *end == ',' ? end + 1 : end) {
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > MAX_BUDGET || (*end && *end != ',')) return -1;
        b[(*n)++] = (int32_t)v;
    }
    return *n > 0 ? 0 : -1;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int main(int argc, char **argv) {
    const char *model_path = "../shared/models/stories260K/stories260K.gguf", *text_path = "bench/data/stories.txt",
               *csv_path = NULL, *tokenizer = NULL;
    int32_t budgets[MAX_BUDGETS] = {16, 32, 64, 128, 256};
    int n_budgets = 5, max_tokens = 512, threads = 1;
    double h2o_recent = 0.5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
        if (!strcmp(a, "-m")) model_path = v;
        else if (!strcmp(a, "-f")) text_path = v;
        else if (!strcmp(a, "--csv")) csv_path = v;
        else if (!strcmp(a, "--tokenizer")) tokenizer = v;
        else if (!strcmp(a, "--budgets")) {
            if (parse_budgets(v, budgets, &n_budgets)) goto usage;
        } else if (!strcmp(a, "--max-tokens")) {
            if ((max_tokens = atoi(v)) < 2) goto usage;
        } else if (!strcmp(a, "--h2o-recent")) {
            if ((h2o_recent = atof(v)) < 0 || h2o_recent > 1) goto usage;
        } else if (!strcmp(a, "-t")) {
            if ((threads = atoi(v)) < 1) goto usage;
        } else goto usage;
        i++;
    }
    nc_err err;
    nc_model *m;
    if (nc_model_load(&m, model_path, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    nc_model_info info;
    nc_model_get_info(m, &info);
    int V = info.n_vocab, n_texts;
    text *texts;
    nc_vocab_file *vf = NULL;
    if (tokenizer && nc_vocab_file_load(&vf, tokenizer, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    if (load_texts(m, vf, text_path, max_tokens, &texts, &n_texts)) return 1;
    nc_vocab_file_free(vf);
    int longest = 0;
    long predicted = 0;
    for (int i = 0; i < n_texts; i++) {
        longest = texts[i].n > longest ? texts[i].n : longest;
        predicted += texts[i].n - 1;
    }
    int n_ctx = longest;
    for (int b = 0; b < n_budgets; b++) n_ctx = budgets[b] > n_ctx ? budgets[b] : n_ctx;
    nc_context *c;
    nc_context_params cp = {.n_ctx = n_ctx + 1, .n_threads = threads}; /* room for the budget and one token */
    if (nc_context_new(&c, m, &cp, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    double *ref = malloc(sizeof *ref * (size_t)longest * V), *lp = malloc(sizeof *lp * V);
    double full_nll = 0, nll[N_POLICIES][MAX_BUDGETS] = {{0}}, kl[N_POLICIES][MAX_BUDGETS] = {{0}}, unused = 0;
    for (int i = 0; i < n_texts; i++) {
        if (run(c, &texts[i], &policies[0], 0, h2o_recent, ref, V, lp, &full_nll, &unused)) return 1;
        for (int p = 0; p < N_POLICIES; p++)
            for (int b = 0; b < n_budgets; b++)
                if (run(c, &texts[i], &policies[p], budgets[b], h2o_recent, ref, V, lp, &nll[p][b], &kl[p][b]))
                    return 1;
    }
    const char *name = base_name(model_path);
    printf("%s: %d texts, %ld predicted tokens (at most %d per text), full-cache perplexity %.3f\n\n", name, n_texts,
           predicted, max_tokens, exp(full_nll / (double)predicted));
    printf("| policy |");
    for (int b = 0; b < n_budgets; b++) printf(" B=%d ppl | B=%d KL |", budgets[b], budgets[b]);
    printf("\n|---|");
    for (int b = 0; b < n_budgets; b++) printf("---|---|");
    printf("\n");
    for (int p = 0; p < N_POLICIES; p++) {
        printf("| %s |", policies[p].name);
        for (int b = 0; b < n_budgets; b++)
            printf(" %.3f | %.4f |", exp(nll[p][b] / (double)predicted), kl[p][b] / (double)predicted);
        printf("\n");
    }
    if (csv_path) {
        FILE *f = fopen(csv_path, "w");
        if (!f) {
            fprintf(stderr, "error: cannot write %s\n", csv_path);
            return 1;
        }
        fprintf(f, "model,policy,budget,tokens,ppl,kl\n");
        fprintf(f, "%s,full,0,%ld,%.6f,0\n", name, predicted, exp(full_nll / (double)predicted));
        for (int p = 0; p < N_POLICIES; p++)
            for (int b = 0; b < n_budgets; b++)
                fprintf(f, "%s,%s,%d,%ld,%.6f,%.8f\n", name, policies[p].name, budgets[b], predicted,
                        exp(nll[p][b] / (double)predicted), kl[p][b] / (double)predicted);
        fclose(f);
    }
    for (int i = 0; i < n_texts; i++) free(texts[i].tok);
    free(texts);
    free(ref);
    free(lp);
    nc_context_free(c);
    nc_model_free(m);
    return 0;
usage:
    fprintf(stderr, "usage: kv_compress -m MODEL [--tokenizer TOKENIZER] [-f TEXT] [--budgets 16,32,64,128,256] [--h2o-recent 0.5] "
                    "[--max-tokens 512] [-t THREADS] [--csv FILE]\n");
    return 2;
}
