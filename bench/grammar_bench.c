/* The grammar stage's cost per generated token next to the model's decode step.
 *
 * For a JSON document (generic JSON grammar, then a JSON-schema grammar), the document is
 * tokenized with the model's vocabulary and followed token by token as a generation would: at each
 * step the vocabulary mask is computed from the grammar's state (gr_matcher_mask, what the sampler
 * stage does) and the token fed. Reported: the mean and worst mask time per token (a fresh
 * matcher per case, so the cold start of a request is included), the one-off trie build, and the
 * model's decode step (one token through nc_forward after a short prompt, mean of 16), with the
 * ratio mask / step.
 *
 * Build: make build/grammar_bench.  Run: build/grammar_bench MODEL [THREADS]  (bench/grammar.sh) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "nucleus.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char DOC[] =
    "{\"name\": \"Ada Lovelace\", \"born\": \"1815-12-10\", \"languages\": [\"English\", \"French\", \"Italian\"], "
    "\"id\": \"123e4567-e89b-12d3-a456-426614174000\", \"notes\": \"wrote the first program \\u2014 for the Analytical "
    "Engine; \\\"poetical science\\\" \xe6\x97\xa5\xe6\x9c\xac\", \"scores\": [1, 2.5, -300, 4e2], \"active\": true, "
    "\"spouse\": {\"name\": \"William King\", \"born\": \"1805-02-21\", \"languages\": [], "
    "\"id\": \"00000000-0000-4000-8000-000000000001\", \"notes\": \"\", \"scores\": [], \"active\": false, \"spouse\": null}}";

static const char SCHEMA[] =
    "{\"$defs\": {\"person\": {\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\", \"maxLength\": 64}, \"born\": {\"type\": \"string\", \"format\": \"date\"}, "
    "\"languages\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 8}, "
    "\"id\": {\"type\": \"string\", \"format\": \"uuid\"}, \"notes\": {\"type\": \"string\"}, "
    "\"scores\": {\"type\": \"array\", \"items\": {\"type\": \"number\"}}, \"active\": {\"type\": \"boolean\"}, "
    "\"spouse\": {\"anyOf\": [{\"$ref\": \"#/$defs/person\"}, {\"type\": \"null\"}]}}, "
    "\"required\": [\"name\", \"born\", \"languages\", \"id\", \"notes\", \"scores\", \"active\", \"spouse\"]}}, "
    "\"$ref\": \"#/$defs/person\"}";

/* Mean and worst mask time per token over the document; -1 when the grammar refuses a token. */
static int mask_run(const gr_vocab *v, const char *gbnf, const int32_t *ids, int32_t n, int32_t n_vocab, double *mean,
                    double *worst, double *first) {
    nc_err err;
    gr_grammar *g;
    gr_matcher *m;
    if (gr_parse(&g, gbnf, strlen(gbnf), &err) || gr_matcher_new(&m, g, &err)) {
        fprintf(stderr, "grammar: %s\n", err.msg);
        return -1;
    }
    uint8_t *allowed = malloc((size_t)n_vocab);
    double total = 0;
    *worst = 0;
    int rc = 0;
    for (int32_t i = 0; i < n && rc == 0; i++) {
        double t0 = now();
        gr_matcher_mask(m, v, allowed, n_vocab);
        uint32_t len;
        const uint8_t *piece = gr_vocab_piece(v, ids[i], &len);
        bool ok = allowed[ids[i]] && gr_matcher_feed(m, piece, len);
        double dt = now() - t0;
        if (!ok) {
            fprintf(stderr, "token %d (%d) refused by the grammar\n", i, ids[i]);
            rc = -1;
        }
        if (i == 0) *first = dt;
        total += dt;
        if (dt > *worst) *worst = dt;
    }
    *mean = total / n;
    free(allowed);
    gr_matcher_free(m);
    gr_free(g);
    return rc;
}

/* Mean seconds of one decode step (one token, batch of one) after an 8-token prompt. */
static double decode_step(nc_model *model, int32_t threads) {
    nc_context_params cp = {.n_ctx = 64, .n_threads = threads};
    nc_context *c;
    nc_err err;
    if (nc_context_new(&c, model, &cp, &err)) {
        fprintf(stderr, "context: %s\n", err.msg);
        return -1;
    }
    nc_batch_entry b[8];
    for (int i = 0; i < 8; i++) b[i] = (nc_batch_entry){.token = 100 + i, .pos = i, .seq = 0, .logits = i == 7};
    nc_forward(c, b, 8, &err);
    double total = 0;
    for (int i = 0; i < 18; i++) {
        nc_batch_entry e = {.token = 200 + i, .pos = 8 + i, .seq = 0, .logits = true};
        double t0 = now();
        if (nc_forward(c, &e, 1, &err)) {
            fprintf(stderr, "forward: %s\n", err.msg);
            break;
        }
        if (i >= 2) total += now() - t0; /* two warm-up steps */
    }
    nc_context_free(c);
    return total / 16;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [THREADS]\n", argv[0]);
        return 2;
    }
    int32_t threads = argc > 2 ? atoi(argv[2]) : 0;
    nc_model *model;
    nc_err err;
    if (nc_model_load(&model, argv[1], &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    nc_model_info info;
    nc_model_get_info(model, &info);
    double t0 = now();
    const gr_vocab *v = nc_model_grammar_vocab(model, &err);
    double t_trie = now() - t0;
    if (!v) {
        fprintf(stderr, "trie: %s\n", err.msg);
        return 1;
    }
    int32_t ids[4096];
    int n = nc_tokenize(model, DOC, strlen(DOC), false, false, ids, 4096, &err);
    char *json = NULL, *schema = NULL;
    if (n <= 0 || n > 4096 || nc_json_schema_to_grammar("{}", NULL, &json, &err) ||
        nc_json_schema_to_grammar(SCHEMA, NULL, &schema, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    double step = decode_step(model, threads);
    printf("model %s: %s, vocabulary %d tokens; trie built once per model in %.1f ms\n", argv[1], info.arch,
           info.n_vocab, 1e3 * t_trie);
    printf("decode step (1 token, %s threads): %.2f ms\n", threads ? argv[2] : "all", 1e3 * step);
    printf("| grammar | tokens | mask per token, mean | worst | first (cold) | mean / decode step |\n|---|---|---|---|---|---|\n");
    const char *names[2] = {"JSON (any value)", "JSON schema (recursive person)"};
    const char *grammars[2] = {json, schema};
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        double mean = 0, worst = 0, first = 0;
        if (mask_run(v, grammars[k], ids, n, info.n_vocab, &mean, &worst, &first)) rc = 1;
        printf("| %s | %d | %.3f ms | %.3f ms | %.3f ms | %.1f%% |\n", names[k], n, 1e3 * mean, 1e3 * worst, 1e3 * first,
               100 * mean / step);
    }
    free(json), free(schema);
    nc_model_free(model);
    return rc;
}
