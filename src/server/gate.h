/* Admission of the work requests do on their connection threads before (or instead of) a job:
 * chat template renders, grammar compilations, tokenizing and detokenizing. At most --parallel
 * requests do it at once and --max-queue more wait for their turn; the rest are refused with 503,
 * so that a flood of hostile templates or texts cannot take every core. A request waiting leaves
 * when its watch says so (its client left, its deadline passed, the server stops). */
#ifndef NC_SERVER_GATE_H
#define NC_SERVER_GATE_H

#include <pthread.h>

#include "server/watch.h"

typedef struct srv_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* a request left */
    int running, waiting;
    int max_running, max_waiting;
} srv_gate;

void srv_gate_init(srv_gate *g, int max_running, int max_waiting);
void srv_gate_destroy(srv_gate *g);
/* 0: admitted (srv_gate_leave when done). -1 with e: 503 naming the limits when the queue is
 * full, or srv_watch_error's when the watch stopped the wait (499: the client left). */
int srv_gate_enter(srv_gate *g, const srv_watch *w, srv_error *e);
void srv_gate_leave(srv_gate *g);

#endif
