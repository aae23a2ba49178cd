/* nucleus pull, list and rm: models from Hugging Face's hub into the cache, what the cache holds,
 * and taking them out again (src/hub, nc_hub_*). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char PULL_USAGE[] =
    "usage: nucleus pull USER/REPO[:QUANT] [--offline]\n"
    "  Fetch a model from Hugging Face's hub into the cache and print its path (a GGUF file, or the directory of\n"
    "  a safetensors model); every command takes it with -hf USER/REPO[:QUANT] as well.\n"
    "  QUANT: the GGUF file whose name ends in that type (Q4_K_M in Model-Q4_K_M.gguf; any case), or a file's\n"
    "  path in the repository. Without it: Q4_K_M, else the nearest the repository has. A split GGUF comes\n"
    "  with all its parts; a repository without GGUF files gives its safetensors model (config.json, the\n"
    "  tokenizer's files, the weights).\n"
    "  A download goes into FILE.part, which an interrupted one leaves for the next to resume; the file is\n"
    "  taken once whole and its SHA-256 equals the hub's.\n"
    "  --offline          the cache only, no network\n"
    "environment:\n"
    "  HF_TOKEN           a Hugging Face token, for gated and private repositories\n"
    "  HF_ENDPOINT        the hub or a mirror (default https://huggingface.co)\n"
    "  NUCLEUS_CACHE      the cache (default $XDG_CACHE_HOME/nucleus, else ~/.cache/nucleus)\n"
    "related: nucleus list (what the cache holds), nucleus rm USER/REPO[:QUANT]\n";

static bool help(int argc, char **argv, const char *usage) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return true;
        }
    return false;
}

int cmd_pull(int argc, char **argv) {
    if (help(argc, argv, PULL_USAGE)) return 0;
    cli_hf hf = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--offline")) hf.offline = true;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "error: pull: unknown option '%s'\n%s", argv[i], PULL_USAGE);
            return 2;
        } else if (hf.repo) {
            fprintf(stderr, "error: pull: one model at a time ('%s' and '%s')\n", hf.repo, argv[i]);
            return 2;
        } else hf.repo = argv[i];
    }
    if (!hf.repo) {
        fprintf(stderr, "error: pull: which model? %s", PULL_USAGE);
        return 2;
    }
    const char *model = NULL;
    int rc = cli_model_path(&model, &hf);
    if (!rc) printf("%s\n", model);
    return rc;
}

/* ---- list ---- */

typedef struct rows {
    nc_hub_entry *v;
    size_t n, cap;
    bool oom;
} rows;

static int keep(const nc_hub_entry *e, void *user) {
    rows *r = user;
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 32;
        nc_hub_entry *v = realloc(r->v, cap * sizeof *v);
        if (!v) return r->oom = true;
        r->v = v;
        r->cap = cap;
    }
    nc_hub_entry *k = &r->v[r->n];
    *k = *e;
    k->repo = strdup(e->repo);
    k->file = strdup(e->file);
    r->n++;
    if (!k->repo || !k->file) r->oom = true;
    return r->oom;
}


int cmd_list(int argc, char **argv) {
    static const char usage[] = "usage: nucleus list\n"
                                "  The files of the cache ($NUCLEUS_CACHE, else $XDG_CACHE_HOME/nucleus, else\n"
                                "  ~/.cache/nucleus): repository, file, size; \"(partial)\" marks a download to resume.\n";
    if (help(argc, argv, usage)) return 0;
    if (argc > 1) {
        fprintf(stderr, "error: list: unexpected argument '%s'\n%s", argv[1], usage);
        return 2;
    }
    rows r = {0};
    nc_err err;
    char dir[4096];
    int rc = 0;
    if (nc_hub_cache_dir(NULL, dir, sizeof dir, &err) || nc_hub_list(NULL, keep, &r, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        rc = 1;
    } else if (r.oom) {
        fprintf(stderr, "error: out of memory\n");
        rc = 1;
    } else if (!r.n) {
        fprintf(stderr, "the cache (%s) holds no model: nucleus pull USER/REPO[:QUANT] fetches one\n", dir);
    } else {
        int w_repo = 4, w_file = 4;
        uint64_t total = 0;
        for (size_t i = 0; i < r.n; i++) {
            int a = (int)strlen(r.v[i].repo), b = (int)strlen(r.v[i].file);
            if (a > w_repo) w_repo = a;
            if (b > w_file) w_file = b;
            total += r.v[i].size;
        }
        char s[24];
        printf("%-*s  %-*s  %10s\n", w_repo, "REPO", w_file, "FILE", "SIZE");
        for (size_t i = 0; i < r.n; i++)
            printf("%-*s  %-*s  %10s%s\n", w_repo, r.v[i].repo, w_file, r.v[i].file, cli_bytes(r.v[i].size, s),
                   r.v[i].partial ? "  (partial)" : "");
        fprintf(stderr, "%zu file%s, %s, in %s\n", r.n, r.n == 1 ? "" : "s", cli_bytes(total, s), dir);
    }
    for (size_t i = 0; i < r.n; i++) {
        free((char *)r.v[i].repo);
        free((char *)r.v[i].file);
    }
    free(r.v);
    return rc;
}

/* ---- rm ---- */

int cmd_rm(int argc, char **argv) {
    static const char usage[] = "usage: nucleus rm USER/REPO[:QUANT]\n"
                                "  Remove a repository's files from the cache, or with QUANT only that GGUF file (every\n"
                                "  part of a split, and a partial download of it).\n";
    if (help(argc, argv, usage)) return 0;
    if (argc != 2 || argv[1][0] == '-') {
        if (argc > 1 && argv[1][0] == '-') fprintf(stderr, "error: rm: unknown option '%s'\n%s", argv[1], usage);
        else fprintf(stderr, "error: rm: one USER/REPO[:QUANT]\n%s", usage);
        return 2;
    }
    int32_t n;
    uint64_t bytes;
    nc_err err;
    char dir[4096], s[24];
    if (nc_hub_cache_dir(NULL, dir, sizeof dir, &err) || nc_hub_remove(argv[1], NULL, &n, &bytes, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "removed %s from %s: %d file%s, %s\n", argv[1], dir, n, n == 1 ? "" : "s", cli_bytes(bytes, s));
    return 0;
}
