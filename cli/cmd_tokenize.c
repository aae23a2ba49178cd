/* nucleus tokenize: token ids of a text, from any vocabulary source nc_vocab_file_load takes
 * (a GGUF file, full or vocab-only, of any architecture; a tokenizer.json or its directory). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define USAGE                                                                                          \
    "usage: nucleus tokenize [-m MODEL] (-p TEXT | -f FILE | --batch LIST) [--no-bos] [--special] [--lines] [--json | --show-pieces]\n" \
    "  -f FILE     the text of FILE ('-': stdin)\n"                                                      \
    "  --no-bos    no BOS/EOS tokens the vocabulary would add\n"                                          \
    "  --special   text such as <|im_start|> becomes its control token\n"                                \
    "  --json      ids as a JSON array\n"                                                                 \
    "  --lines     each line of the text on its own, one output line (or block of pieces) per input line\n" \
    "  --show-pieces  a line per token: its id and its text, as llama-tokenize prints them\n"             \
    "  --batch LIST  many texts in one process: each line of LIST ('-': stdin) names a file whose text\n"  \
    "              is tokenized as -f would; its output line (lines with --lines) per file, in order\n"   \
    "              (error: MESSAGE for one that fails; the exit status is then 1)\n"

typedef struct tok_opts {
    const char *path, *text, *file, *batch;
    bool add_special, parse_special, json, lines, pieces;
} tok_opts;

static int parse_args(int argc, char **argv, tok_opts *o) {
    *o = (tok_opts){.add_special = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(USAGE, stdout); return -1; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(o->path = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!(o->text = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!(o->file = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--batch")) { if (!(o->batch = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--no-bos")) o->add_special = false;
        else if (!strcmp(a, "--special")) o->parse_special = true;
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--lines")) o->lines = true;
        else if (!strcmp(a, "--show-pieces")) o->pieces = true;
        else {
            fprintf(stderr, "error: tokenize: unknown option '%s'\n" USAGE, a);
            return 2;
        }
    }
    if (!!o->text + !!o->file + !!o->batch != 1) {
        fprintf(stderr, "error: tokenize: give exactly one of -p TEXT, -f FILE or --batch LIST\n" USAGE);
        return 2;
    }
    if (o->json && o->pieces) {
        fprintf(stderr, "error: tokenize: --json and --show-pieces exclude each other\n" USAGE);
        return 2;
    }
    if (!o->path && !(o->path = cli_default_model())) return 2;
    return 0;
}

/* Tokenizes text[0..len) into *ids (grown as needed); the count, or -1 with err set. */
static int tokenize(const nc_vocab_file *v, const tok_opts *o, const char *text, size_t len, int32_t **ids, int *cap,
                    nc_err *err) {
    int n = nc_vocab_file_tokenize(v, text, len, o->add_special, o->parse_special, *ids, *cap, err);
    if (n > *cap) {
        int32_t *grown = realloc(*ids, (size_t)n * sizeof *grown);
        if (!grown) { snprintf(err->msg, sizeof err->msg, "out of memory"); return -1; }
        *ids = grown;
        *cap = n;
        n = nc_vocab_file_tokenize(v, text, len, o->add_special, o->parse_special, *ids, *cap, err);
    }
    return n;
}

static void print_ids(const int32_t *ids, int n, bool json) {
    if (json) putchar('[');
    for (int i = 0; i < n; i++) printf(i ? (json ? ", %d" : " %d") : "%d", ids[i]);
    puts(json ? "]" : "");
}

/* llama-tokenize's lines: the id right-aligned in 6 columns, then the piece's bytes as they are
 * (a newline's piece spans two lines there too). */
static int print_pieces(const nc_vocab_file *v, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) {
        char small[256], *buf = small;
        int len = nc_vocab_file_piece(v, ids[i], small, sizeof small);
        if (len > (int)sizeof small) { /* a long piece: ask again with room for it */
            if (!(buf = malloc((size_t)len))) { fprintf(stderr, "error: out of memory\n"); return 1; }
            nc_vocab_file_piece(v, ids[i], buf, len);
        }
        if (len >= 0) printf("%6d -> '%.*s'\n", ids[i], len, buf);
        if (buf != small) free(buf);
    }
    return 0;
}

/* The whole text, or with --lines each line on its own (without its '\n'), one output line
 * per input line. */
static int run(const nc_vocab_file *v, const tok_opts *o, const char *text, size_t len) {
    int cap = 256;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    nc_err err;
    int rc = ids ? 0 : 1;
    for (size_t at = 0; rc == 0 && (at < len || (!o->lines && at == 0));) {
        const char *nl = o->lines ? memchr(text + at, '\n', len - at) : NULL;
        size_t end = nl ? (size_t)(nl - text) : len;
        int n = tokenize(v, o, text + at, end - at, &ids, &cap, &err);
        if (n < 0) {
            fprintf(stderr, "error: %s\n", err.msg);
            rc = 1;
        } else if (o->pieces) rc = print_pieces(v, ids, n);
        else print_ids(ids, n, o->json);
        at = nl ? end + 1 : len + 1;
    }
    if (!ids) fprintf(stderr, "error: out of memory\n");
    free(ids);
    return rc;
}

/* --batch: each line of the list names a file, tokenized as -f would (the vocabulary loaded once). */
static int run_batch(const nc_vocab_file *v, const tok_opts *o) {
    FILE *list = strcmp(o->batch, "-") ? fopen(o->batch, "r") : stdin;
    if (!list) {
        fprintf(stderr, "error: --batch: %s: cannot open\n", o->batch);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while ((n = getline(&line, &cap, list)) >= 0) {
        if (n > 0 && line[n - 1] == '\n') line[--n] = 0;
        if (!n) continue;
        size_t len;
        char *text = cli_read_text(line, &len); /* says why on stderr when it cannot */
        if (!text || run(v, o, text, len)) {
            printf("error: %s\n", text ? "tokenizing failed" : "cannot read the file");
            rc = 1;
        }
        fflush(stdout);
        free(text);
    }
    free(line);
    if (list != stdin) fclose(list);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    tok_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc; /* -1: help was asked for */
    size_t len = o.text ? strlen(o.text) : 0;
    char *owned = NULL;
    if (o.file && !(owned = cli_read_text(o.file, &len))) return 1;
    nc_err err;
    nc_vocab_file *v;
    if (nc_vocab_file_load(&v, o.path, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        free(owned);
        return 1;
    }
    rc = o.batch ? run_batch(v, &o) : run(v, &o, owned ? owned : o.text, len);
    free(owned);
    nc_vocab_file_free(v);
    return rc;
}
