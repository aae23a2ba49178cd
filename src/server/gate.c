#include "server/gate.h"

#include <time.h>

void srv_gate_init(srv_gate *g, int max_running, int max_waiting) {
    *g = (srv_gate){.max_running = max_running, .max_waiting = max_waiting};
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
}

void srv_gate_destroy(srv_gate *g) {
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
}

int srv_gate_enter(srv_gate *g, const srv_watch *w, srv_error *e) {
    pthread_mutex_lock(&g->mu);
    if (g->running >= g->max_running && g->waiting >= g->max_waiting) {
        pthread_mutex_unlock(&g->mu);
        srv_error_set(e, 503, "server_error", "server_overloaded", NULL,
                      "the server is busy (--parallel %d requests render chat templates, compile grammars or "
                      "tokenize, --max-queue %d wait), retry later",
                      g->max_running, g->max_waiting);
        return -1;
    }
    g->waiting++;
    /* the watch is looked at every 50 ms of the wait */
    while (g->running >= g->max_running) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 50000000;
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&g->cv, &g->mu, &until);
        if (g->running >= g->max_running && srv_watch_gone((void *)w)) {
            g->waiting--;
            pthread_mutex_unlock(&g->mu);
            srv_watch_error(w, e);
            return -1;
        }
    }
    g->waiting--;
    g->running++;
    pthread_mutex_unlock(&g->mu);
    return 0;
}

void srv_gate_leave(srv_gate *g) {
    pthread_mutex_lock(&g->mu);
    g->running--;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}
