#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *grown = realloc(buf, 2 * cap + 1);
        if (!grown) { free(buf); buf = NULL; break; }
        buf = grown;
        cap *= 2;
    }
    bool failed = ferror(f);
    fclose(f);
    if (!buf || failed) { free(buf); return NULL; }
    buf[n] = 0;
    *len = n;
    return buf;
}

int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *text = NULL, *file = NULL;
    bool add_special = true, parse_special = false, json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(path = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!(text = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!(file = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--no-bos")) add_special = false;
        else if (!strcmp(a, "--special")) parse_special = true;
        else if (!strcmp(a, "--json")) json = true;
        else {
            fprintf(stderr, "error: tokenize: unknown option '%s'\n"
                            "usage: nucleus tokenize [-m MODEL] (-p TEXT | -f FILE) [--no-bos] [--special] [--json]\n", a);
            return 2;
        }
    }
    if (!!text == !!file) {
        fprintf(stderr, "error: tokenize: give exactly one of -p TEXT or -f FILE\n");
        return 2;
    }
    if (!path) path = cli_default_model();
    size_t len = 0;
    char *owned = NULL;
    if (file) {
        if (!(owned = read_file(file, &len))) { perror(file); return 1; }
        text = owned;
    } else {
        len = strlen(text);
    }
    nc_err err;
    nc_vocab_file *v;
    if (nc_vocab_file_load(&v, path, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        free(owned);
        return 1;
    }
    int cap = (int)len + 8;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int n = ids ? nc_vocab_file_tokenize(v, text, len, add_special, parse_special, ids, cap, &err) : -1;
    if (n > cap) {
        int32_t *grown = realloc(ids, (size_t)n * sizeof *ids);
        ids = grown;
        n = grown ? nc_vocab_file_tokenize(v, text, len, add_special, parse_special, ids, n, &err) : -1;
    }
    int rc = 0;
    if (n < 0) {
        fprintf(stderr, "error: %s\n", ids ? err.msg : "out of memory");
        rc = 1;
    } else {
        if (json) putchar('[');
        for (int i = 0; i < n; i++) printf(i ? (json ? ", %d" : " %d") : "%d", ids[i]);
        puts(json ? "]" : "");
    }
    free(ids);
    free(owned);
    nc_vocab_file_free(v);
    return rc;
}
