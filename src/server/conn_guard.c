/* Per-address limits, and deadlines for headers and bodies (see conn_guard.h). */
#include "server/conn_guard.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

struct conn_entry {
    int fd;
    bool grouped;    /* key holds its address's group */
    uint8_t key[16];
    double deadline; /* 0: none */
    bool shut;
    conn_entry *prev, *next;
};

struct conn_guard {
    double header_s, body_s;
    int per_group;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    bool stopping;
    conn_entry *head;
    int64_t n_closed;
    pthread_t thread;
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Every quarter second: shut down the sockets past their deadline. shutdown() and not close():
 * the connection's thread still owns the descriptor; it sees the end of the stream and closes. */
static void *watch(void *arg) {
    conn_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stopping) {
        double t = now_s();
        for (conn_entry *e = g->head; e; e = e->next)
            if (!e->shut && e->deadline > 0 && t > e->deadline) {
                shutdown(e->fd, SHUT_RDWR);
                e->shut = true;
                g->n_closed++;
            }
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += 250000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->wake, &g->mu, &until);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int conn_guard_new(conn_guard **out, double header_s, double body_s, int per_group) {
    conn_guard *g = calloc(1, sizeof *g);
    *out = NULL;
    if (!g) return -1;
    g->per_group = per_group;
    g->header_s = header_s;
    g->body_s = body_s;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&g->thread, NULL, watch, g)) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->wake);
        free(g);
        return -1;
    }
    *out = g;
    return 0;
}

void conn_guard_free(conn_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stopping = true;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    while (g->head) {
        conn_entry *e = g->head;
        g->head = e->next;
        free(e);
    }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->wake);
    free(g);
}

bool conn_guard_group(const struct sockaddr *addr, uint8_t key[16]) {
    static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memset(key, 0, 16);
    if (addr && addr->sa_family == AF_INET) {
        memcpy(key, v4_mapped, 12);
        memcpy(key + 12, &((const struct sockaddr_in *)addr)->sin_addr, 4);
        return true;
    }
    if (!addr || addr->sa_family != AF_INET6) return false;
    const uint8_t *a = ((const struct sockaddr_in6 *)addr)->sin6_addr.s6_addr;
    memcpy(key, a, memcmp(a, v4_mapped, 12) ? 8 : 16); /* a /64, or the IPv4 address it maps */
    return true;
}

bool conn_guard_admit(conn_guard *g, const struct sockaddr *addr) {
    uint8_t key[16];
    if (g->per_group <= 0 || !conn_guard_group(addr, key)) return true;
    int n = 0;
    pthread_mutex_lock(&g->mu);
    for (conn_entry *e = g->head; e && n < g->per_group; e = e->next) n += e->grouped && !memcmp(e->key, key, 16);
    pthread_mutex_unlock(&g->mu);
    return n < g->per_group;
}

conn_entry *conn_guard_open(conn_guard *g, int fd, const struct sockaddr *addr) {
    conn_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->fd = fd;
    e->grouped = conn_guard_group(addr, e->key);
    pthread_mutex_lock(&g->mu);
    e->deadline = now_s() + g->header_s;
    e->next = g->head;
    if (g->head) g->head->prev = e;
    g->head = e;
    pthread_mutex_unlock(&g->mu);
    return e;
}

void conn_guard_close(conn_guard *g, conn_entry *e) {
    if (!e) return;
    pthread_mutex_lock(&g->mu);
    if (e->prev) e->prev->next = e->next;
    else g->head = e->next;
    if (e->next) e->next->prev = e->prev;
    pthread_mutex_unlock(&g->mu);
    free(e);
}

void conn_guard_phase(conn_guard *g, conn_entry *e, conn_phase phase) {
    if (!e) return;
    pthread_mutex_lock(&g->mu);
    e->deadline = phase == CONN_HEADERS ? now_s() + g->header_s : phase == CONN_BODY ? now_s() + g->body_s : 0;
    pthread_mutex_unlock(&g->mu);
}

int64_t conn_guard_n_closed(conn_guard *g) {
    pthread_mutex_lock(&g->mu);
    int64_t n = g->n_closed;
    pthread_mutex_unlock(&g->mu);
    return n;
}
