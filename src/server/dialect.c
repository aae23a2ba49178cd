/* What the dialects share: named server-sent events and text joined as it is written. */
#include "server/dialect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *srv_sse_named(const char *name, char *json) {
    if (!json) return NULL;
    size_t n = strlen(name) + strlen(json) + 20;
    char *out = malloc(n);
    if (out) snprintf(out, n, "event: %s\ndata: %s\n\n", name, json);
    free(json);
    return out;
}

char *srv_text_cat(char *a, char *b) {
    if (!a || !b) {
        free(a);
        free(b);
        return NULL;
    }
    size_t na = strlen(a), nb = strlen(b);
    char *out = realloc(a, na + nb + 1);
    if (!out) {
        free(a);
        free(b);
        return NULL;
    }
    memcpy(out + na, b, nb + 1);
    free(b);
    return out;
}
