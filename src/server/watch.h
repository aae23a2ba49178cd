/* What ends a request's work before it is done: its client leaving, the server stopping, or its
 * deadline (--request-timeout). Asked by everything that computes or waits on a connection's
 * thread: chat template renders, grammar and JSON Schema compilations, embeddings, waits for
 * admission (server/gate.h). Generation jobs carry the deadline to the engine (srv_job.deadline). */
#ifndef NC_SERVER_WATCH_H
#define NC_SERVER_WATCH_H

#include <stdatomic.h>
#include <stdbool.h>

#include "server/request.h"

typedef enum srv_stop_why { SRV_GO_ON, SRV_STOP_CLIENT, SRV_STOP_SERVER, SRV_STOP_DEADLINE } srv_stop_why;

typedef struct srv_watch {
    int fd;                      /* the connection's socket (-1: none) */
    double deadline;             /* srv_now() seconds (0: none) */
    double timeout;              /* --request-timeout's seconds, for the message */
    const atomic_bool *stopping; /* set when the server stops (NULL: never) */
} srv_watch;

/* Whether the peer closed its end of socket fd (or reset it). Bytes waiting (a pipelined
 * request) mean it is still there. */
bool srv_peer_gone(int fd);
srv_stop_why srv_watch_why(const srv_watch *w);
/* srv_watch_why != SRV_GO_ON, as a srv_gone_fn (w: the srv_watch). */
bool srv_watch_gone(void *w);
/* The error of work the watch stopped: 499 when its client left (nothing to answer), 503 when the
 * server stops or the deadline passed (naming --request-timeout). */
void srv_watch_error(const srv_watch *w, srv_error *e);

#endif
