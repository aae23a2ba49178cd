#include <stdio.h>
#include <string.h>

#include "cli.h"

#define USAGE                                                                                      \
    "usage: nucleus inspect [-m FILE | FILE]\n"                                                      \
    "  a GGUF file's metadata (long arrays abbreviated) and tensor table; a Hugging Face directory's\n" \
    "  config.json, weight files and tensors\n"

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (!(path = cli_value(argc, argv, &i))) return 2;
        } else if (argv[i][0] != '-' && !path) {
            path = argv[i];
        } else {
            fprintf(stderr, "error: inspect: unknown option '%s'\n" USAGE, argv[i]);
            return 2;
        }
    }
    if (!path && !(path = cli_default_model())) return 2;
    nc_err err;
    if (nc_inspect(path, stdout, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    return 0;
}
