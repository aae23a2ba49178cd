/* How well a model predicts a long text through a small cache under each way of making room
 * (StreamingLLM's Figure 3, Xiao et al. 2023): the text is fed one token at a time and every
 * token's log-likelihood under the model is summed; the cache holds CTX tokens, and when full:
 *
 *   dense    no eviction: the cache holds the whole text (a reference, and the way past the
 *            model's training length)
 *   window   the oldest quarter of the cache goes, the first tokens with it (plain window
 *            attention: nc_kv_seq_shift keeping nothing)
 *   sinks N  the first N tokens stay, a quarter of the window after them goes (--attention-sinks)
 *   shift    the BOS stays, half of the rest goes (--context-shift --keep 0)
 *   recompute  each token is predicted from the last CTX - 1 tokens computed afresh (sliding
 *            window with re-computation: what the others approximate, CTX times the work)
 *
 * Build (from the repository root): make build/context_ppl
 * Run: build/context_ppl MODEL TEXT [CTX (256)] [TOKENS (4096)] [THREADS (2)]
 * Prints, per policy, the mean negative log-likelihood (nats per token) and perplexity over the
 * tokens from tok[CTX] on (those predicted once a cache of CTX had to make room), and over the
 * whole text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"

typedef enum policy { DENSE, WINDOW, SINKS, SHIFT, RECOMPUTE } policy;

typedef struct run {
    const char *name;
    policy how;
    int32_t n_sink;
} run;

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

/* log p(next) under the logits */
static double logprob(const float *logits, int32_t n_vocab, int32_t next) {
    double mx = logits[0], z = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    for (int32_t i = 0; i < n_vocab; i++) z += exp((double)logits[i] - mx);
    return (double)logits[next] - mx - log(z);
}

/* The summed negative log-likelihood of tok[1..n) (the return value), and of the tokens
 * predicted once the cache has had to make room, from tok[ctx] on (*late, *n_late: the same
 * tokens for every policy). -1 on error. */
static double measure(nc_model *m, const int32_t *tok, int32_t n, int32_t ctx, int32_t threads, run r,
                      double *late, int32_t *n_late, nc_err *err) {
    nc_model_info info;
    nc_model_get_info(m, &info);
    nc_context *c;
    nc_context_params cp = {.n_ctx = r.how == DENSE ? n : ctx, .n_threads = threads};
    if (nc_context_new(&c, m, &cp, err)) return -1;
    double all = 0;
    *late = 0;
    *n_late = 0;
    nc_batch_entry *b = malloc(sizeof *b * (size_t)ctx);
    int rc = b ? 0 : -1;
    for (int32_t i = 0; rc == 0 && i + 1 < n; i++) {
        const float *logits;
        if (r.how == RECOMPUTE && i >= ctx) { /* the last ctx - 1 tokens afresh, at positions 0.. */
            int32_t first = i - (ctx - 2);
            nc_kv_seq_clear(c, 0);
            for (int32_t k = 0; k < ctx - 1; k++) b[k] = (nc_batch_entry){tok[first + k], k, 0, k == ctx - 2};
            if ((rc = nc_forward(c, b, ctx - 1, err))) break;
            logits = nc_logits(c, ctx - 2);
        } else {
            if (nc_kv_seq_len(c, 0) == nc_context_n_ctx(c))
                rc = r.how == WINDOW ? nc_kv_seq_shift(c, 0, 0, ctx / 4, err)
                     : r.how == SINKS ? nc_kv_seq_sink(c, 0, r.n_sink, 0, err)
                                      : nc_kv_seq_shift(c, 0, 1, 0, err);
            b[0] = (nc_batch_entry){tok[i], nc_kv_seq_len(c, 0), 0, true};
            if (rc || (rc = nc_forward(c, b, 1, err))) break;
            logits = nc_logits(c, 0);
        }
        double nll = -logprob(logits, info.n_vocab, tok[i + 1]);
        all += nll;
        if (i >= ctx) {
            *late += nll;
            (*n_late)++;
        }
    }
    free(b);
    nc_context_free(c);
    return rc ? -1 : all;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL TEXT [CTX (256)] [TOKENS (4096)] [THREADS (2)]\n", argv[0]);
        return 2;
    }
    int32_t ctx = argc > 3 ? atoi(argv[3]) : 256, max_tok = argc > 4 ? atoi(argv[4]) : 4096;
    int32_t threads = argc > 5 ? atoi(argv[5]) : 2;
    nc_err err;
    nc_model *m;
    size_t len;
    char *text = read_all(argv[2], &len);
    if (!text) {
        fprintf(stderr, "error: cannot read %s\n", argv[2]);
        return 1;
    }
    if (ctx < 8 || max_tok <= ctx || nc_model_load(&m, argv[1], &err)) {
        fprintf(stderr, "error: %s\n", ctx < 8 || max_tok <= ctx ? "need 8 <= CTX < TOKENS" : err.msg);
        return 1;
    }
    int n = nc_tokenize(m, text, len, true, false, NULL, 0, &err);
    int32_t *tok = n > 0 ? malloc(sizeof *tok * (size_t)n) : NULL;
    if (!tok || nc_tokenize(m, text, len, true, false, tok, n, &err) != n) {
        fprintf(stderr, "error: tokenizing: %s\n", n < 0 ? err.msg : "out of memory");
        return 1;
    }
    if (n > max_tok) n = max_tok;
    nc_model_info info;
    nc_model_get_info(m, &info);
    printf("%s, trained context %d; %d tokens of %s; cache %d tokens\n\n", argv[1], info.n_ctx_train, n, argv[2], ctx);
    printf("| policy | NLL from token CTX on (nats/token) | perplexity | NLL, whole text | perplexity |\n");
    printf("|---|---|---|---|---|\n");
    const run runs[] = {{"dense (no eviction)", DENSE, 0}, {"window (no sinks)", WINDOW, 0},
                        {"attention sinks 1 (the BOS)", SINKS, 1}, {"attention sinks 4", SINKS, 4},
                        {"context shift (--keep 0)", SHIFT, 0}, {"sliding window, recomputed", RECOMPUTE, 0}};
    for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
        double late;
        int32_t n_late;
        double all = measure(m, tok, n, ctx, threads, runs[k], &late, &n_late, &err);
        if (all < 0) {
            fprintf(stderr, "error: %s: %s\n", runs[k].name, err.msg);
            return 1;
        }
        printf("| %s | %.4f | %.2f | %.4f | %.2f |\n", runs[k].name, late / n_late, exp(late / n_late), all / (n - 1),
               exp(all / (n - 1)));
        fflush(stdout);
    }
    nc_model_free(m);
    free(tok);
    free(text);
    return 0;
}
