/* The access log: one line per request on stderr, when its response is complete (streams: when
 * the last event is out), in a fixed format (README, Server):
 *
 *   access: METHOD PATH STATUS ms=MS
 *   access: METHOD PATH STATUS ms=MS prompt_tokens=P completion_tokens=C    (generation)
 *   access: METHOD PATH STATUS ms=MS prompt_tokens=P                          (embeddings)
 *
 * STATUS is "-" when no response was sent (the client went away first); MS is the time from the
 * request's headers to the end of its response. */
#ifndef NC_SERVER_ACCESS_H
#define NC_SERVER_ACCESS_H

#include <stdbool.h>
#include <stdint.h>

typedef enum srv_access_kind { SRV_ACCESS_PLAIN, SRV_ACCESS_GENERATION, SRV_ACCESS_EMBEDDING } srv_access_kind;

typedef struct srv_access {
    char method[16];
    char path[160];        /* cut to fit; bytes outside printable ASCII become '?' */
    double t0;             /* srv_now() at the headers */
    int status;            /* 0: none sent */
    srv_access_kind kind;
    int64_t prompt_tokens, completion_tokens;
} srv_access;

void srv_access_begin(srv_access *a, const char *method, const char *path);
void srv_access_write(const srv_access *a);

#endif
