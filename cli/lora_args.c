/* LoRA adapters on the command line (llama.cpp's flags), for every command that runs a model. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cli_lora_arg(int argc, char **argv, int *i, cli_lora *l) {
    const char *a = argv[*i], *path, *v;
    bool scaled = !strcmp(a, "--lora-scaled");
    if (!scaled && strcmp(a, "--lora")) return 0;
    if (l->n == CLI_LORA_MAX) {
        fprintf(stderr, "error: %s: at most %d adapters\n", a, CLI_LORA_MAX);
        return -1;
    }
    double scale = 1;
    if (scaled && *i + 2 >= argc) {
        fprintf(stderr, "error: --lora-scaled needs FILE and SCALE\n");
        return -1;
    }
    if (!(path = cli_value(argc, argv, i))) return -1;
    if (scaled && (!(v = cli_value(argc, argv, i)) || !cli_float(a, v, -1e6, 1e6, &scale))) return -1;
    l->path[l->n] = path;
    l->scale[l->n++] = (float)scale;
    return 1;
}

int cli_model_load(nc_model **m, const char *path, const cli_lora *l, nc_err *err) {
    if (nc_model_load(m, path, err)) return -1;
    for (int k = 0; l && k < l->n; k++)
        if (nc_model_add_lora(*m, l->path[k], l->scale[k], err)) {
            nc_model_free(*m);
            *m = NULL;
            return -1;
        }
    return 0;
}
