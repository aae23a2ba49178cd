/* libFuzzer harness for the JSON Schema converter (src/grammar/json_schema.c): any input must give
 * either an error naming the problem or GBNF text that our own parser accepts, whose rules are all
 * named after the root (root_name, picked by the first byte), and whose matcher can start. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

static void check(bool ok) {
    if (!ok) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const ROOTS[] = {NULL, "root", "call-0-args", "x"};
    if (size == 0) return 0;
    const char *root = ROOTS[data[0] % 4];
    char *json = malloc(size);
    memcpy(json, data + 1, size - 1);
    json[size - 1] = 0;
    char *gbnf = NULL;
    nc_err err;
    if (nc_json_schema_to_grammar(json, root, &gbnf, &err)) {
        check(gbnf == NULL && err.msg[0] != 0);
        free(json);
        return 0;
    }
    const char *r = root ? root : "root";
    size_t rl = strlen(r);
    for (const char *line = gbnf; *line; line = strchr(line, '\n') + 1) {
        size_t n = strcspn(line, " ");
        check(!strncmp(line, r, rl) && (n == rl || line[rl] == '-'));
    }
    /* the caller's grammar around it: root ::= the schema's rule */
    size_t len = strlen(gbnf) + rl + 32;
    char *full = malloc(len);
    snprintf(full, len, "%s%s", strcmp(r, "root") ? "root ::= " : "", strcmp(r, "root") ? r : "");
    size_t at = strlen(full);
    snprintf(full + at, len - at, "%s%s", at ? "\n" : "", gbnf);
    gr_grammar *g;
    gr_matcher *m;
    if (gr_parse(&g, full, strlen(full), &err)) {
        fprintf(stderr, "the converter's grammar does not parse: %s\n%s\n", err.msg, full);
        abort();
    }
    if (gr_matcher_new(&m, g, &err) == 0) gr_matcher_free(m);
    gr_free(g);
    free(full);
    free(gbnf);
    free(json);
    return 0;
}
