#include "server/access.h"

#include <stdio.h>
#include <string.h>

#include "server/scheduler.h" /* srv_now */

/* Printable ASCII only, so a hostile path cannot forge lines or terminal escapes in the log. */
static void copy_printable(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; src[i] && i + 1 < cap; i++) dst[i] = src[i] > ' ' && src[i] < 127 ? src[i] : '?';
    dst[i] = 0;
}

void srv_access_begin(srv_access *a, const char *method, const char *path) {
    *a = (srv_access){.t0 = srv_now()};
    copy_printable(a->method, sizeof a->method, method);
    copy_printable(a->path, sizeof a->path, path);
}

void srv_access_write(const srv_access *a) {
    char line[512], status[8] = "-";
    if (a->status) snprintf(status, sizeof status, "%d", a->status);
    int n = snprintf(line, sizeof line, "access: %s %s %s ms=%.1f", a->method, a->path, status, (srv_now() - a->t0) * 1e3);
    if (n > 0 && (size_t)n < sizeof line && a->kind != SRV_ACCESS_PLAIN)
        n += snprintf(line + n, sizeof line - (size_t)n, " prompt_tokens=%lld", (long long)a->prompt_tokens);
    if (n > 0 && (size_t)n < sizeof line && a->kind == SRV_ACCESS_GENERATION)
        snprintf(line + n, sizeof line - (size_t)n, " completion_tokens=%lld", (long long)a->completion_tokens);
    fprintf(stderr, "%s\n", line); /* one call: lines of concurrent requests do not interleave */
}
