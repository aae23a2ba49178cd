/* The router's models in memory (see router.h).
 *
 * Locking: rt->mu guards every model's state, leases and times; rt->changed is broadcast at every
 * change a waiter may need (a load or an unload ends, a lease is released). Loads and unloads run
 * without the lock: a model is marked LOADING or UNLOADING first, so no other thread touches its
 * instance meanwhile. */
#include "server/router.h"

#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

/* Why a loaded model takes no new leases and goes once idle. */
typedef enum retire {
    RETIRE_NO,
    RETIRE_FOR_ROOM, /* chosen for eviction while busy: kept after all if room is made otherwise */
    RETIRE_ASKED,    /* POST /models/unload */
} retire;

typedef struct model {
    srv_preset *p;
    srv_model_state state;
    void *inst;
    double bytes;          /* loaded: what it holds */
    int32_t leases;
    int32_t waiting;       /* requests waiting for it (srv_router_config.max_waiting) */
    retire retiring;       /* no new leases, unloaded when idle */
    double last_used;      /* monotonic seconds at its last release (or load) */
    uint64_t attempts;     /* loads begun: a waiter knows whether the failure it sees is news */
    uint64_t loads;
    int64_t loaded_at;
    char error[NC_ERR_MAX];
    struct timespec failed_mtime; /* its file when the load failed: tried again once it changes */
    off_t failed_size;
} model;

struct srv_router {
    srv_presets ps;
    model *models;
    int32_t n;
    srv_router_config cfg;
    srv_router_ops ops;
    pthread_mutex_t mu;
    pthread_cond_t changed;
    bool closed;
    bool watching;         /* the idle watcher runs */
    pthread_t watcher;
};

const char *srv_model_state_name(srv_model_state s) {
    static const char *const names[] = {"unloaded", "loading", "loaded", "unloading", "failed"};
    return s >= 0 && s <= SRV_MODEL_FAILED ? names[s] : "unknown";
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- Finding models ------------------------------------------------------------------------ */

static model *find(srv_router *rt, const char *name) {
    if (rt->cfg.any_name && rt->n == 1) return &rt->models[0];
    for (int32_t i = 0; i < rt->n; i++)
        if (!strcmp(rt->models[i].p->id, name)) return &rt->models[i];
    return NULL;
}

/* The models served, for a 404's message: "a, b, c" cut to fit. */
static void list_names(const srv_router *rt, char *out, size_t cap) {
    size_t at = 0;
    out[0] = 0;
    for (int32_t i = 0; i < rt->n && at + 8 < cap; i++) {
        int w = snprintf(out + at, cap - at, "%s%s", i ? ", " : "", rt->models[i].p->id);
        if (w < 0 || (size_t)w >= cap - at) {
            snprintf(out + (cap > 4 ? cap - 4 : 0), cap > 4 ? 4 : cap, "...");
            break;
        }
        at += (size_t)w;
    }
}

static int lookup(srv_router *rt, const char *name, model **out, srv_error *e) {
    if ((!name || !*name) && !(rt->cfg.any_name && rt->n == 1)) {
        if (rt->n == 1) {
            *out = &rt->models[0];
            return 0;
        }
        char names[400];
        list_names(rt, names, sizeof names);
        srv_error_set(e, 400, "invalid_request_error", NULL, "model",
                      "'model' is required: this server serves several models (%s)", names);
        return -1;
    }
    if ((*out = find(rt, name ? name : ""))) return 0;
    char names[400];
    list_names(rt, names, sizeof names);
    srv_error_set(e, 404, "invalid_request_error", "model_not_found", "model",
                  "The model '%.128s' does not exist (this server has: %s)", name, names);
    return -1;
}

/* ---- Loading and unloading (called under mu; each drops it while it works) ---------------- */

/* Take m out of memory: no lease holds it. */
static void unload(srv_router *rt, model *m) {
    m->state = SRV_MODEL_UNLOADING;
    void *inst = m->inst;
    pthread_mutex_unlock(&rt->mu);
    rt->ops.close(rt->ops.user, inst);
#if defined(__GLIBC__)
    malloc_trim(0); /* the KV caches were large blocks: give their pages back to the system */
#endif
    pthread_mutex_lock(&rt->mu);
    m->inst = NULL;
    m->bytes = 0;
    m->retiring = RETIRE_NO;
    m->state = SRV_MODEL_UNLOADED;
    pthread_cond_broadcast(&rt->changed);
}

/* Load m; under mu again on return, its state LOADED or FAILED. */
static void load(srv_router *rt, model *m) {
    m->state = SRV_MODEL_LOADING;
    m->attempts++;
    m->error[0] = 0;
    pthread_mutex_unlock(&rt->mu);
    void *inst = NULL;
    double bytes = 0;
    nc_err err = {{0}};
    int rc = rt->ops.open(rt->ops.user, m->p, &inst, &bytes, &err);
    pthread_mutex_lock(&rt->mu);
    if (rc) {
        m->state = SRV_MODEL_FAILED;
        snprintf(m->error, sizeof m->error, "%s", err.msg[0] ? err.msg : "the model could not be loaded");
        struct stat st;
        bool seen = stat(m->p->path, &st) == 0;
        m->failed_mtime = seen ? st.st_mtim : (struct timespec){0};
        m->failed_size = seen ? st.st_size : -1;
    } else {
        m->state = SRV_MODEL_LOADED;
        m->inst = inst;
        m->bytes = bytes;
        m->loads++;
        m->loaded_at = (int64_t)time(NULL);
        m->last_used = now_s();
    }
    pthread_cond_broadcast(&rt->changed);
}

static bool resident(const model *m) {
    return m->state == SRV_MODEL_LOADED || m->state == SRV_MODEL_LOADING || m->state == SRV_MODEL_UNLOADING;
}

/* What a model in memory holds, or is expected to. */
static double weight(const model *m) { return m->state == SRV_MODEL_LOADED && m->bytes > 0 ? m->bytes : m->p->est_bytes; }

/* The least recently used loaded model (idle ones only when idle), other than m; NULL if none. */
static model *lru(srv_router *rt, const model *m, bool idle) {
    model *best = NULL;
    for (int32_t i = 0; i < rt->n; i++) {
        model *c = &rt->models[i];
        if (c == m || c->state != SRV_MODEL_LOADED || (idle && c->leases > 0)) continue;
        if (!best || c->last_used < best->last_used) best = c;
    }
    return best;
}

/* Whether m may load now: under --models-max and --memory-budget once it is in. If not, makes
 * room (unloads an idle model, dropping mu meanwhile, or retires a busy one) and returns false:
 * the caller looks again, waiting when nothing could be done. *waited: nothing could. */
static bool room_for(srv_router *rt, model *m, bool *wait) {
    int32_t n = 0;
    double bytes = 0;
    for (int32_t i = 0; i < rt->n; i++)
        if (resident(&rt->models[i])) {
            n++;
            bytes += weight(&rt->models[i]);
        }
    bool count_ok = rt->cfg.models_max <= 0 || n < rt->cfg.models_max;
    bool bytes_ok = rt->cfg.memory_budget <= 0 || bytes + m->p->est_bytes <= rt->cfg.memory_budget || n == 0;
    *wait = false;
    if (count_ok && bytes_ok) {
        /* a busy model retired to make room that was then made otherwise (an idle one went,
           or a load failed) stays: else it would go once idle, for nobody */
        for (int32_t i = 0; i < rt->n; i++)
            if (rt->models[i].retiring == RETIRE_FOR_ROOM) {
                rt->models[i].retiring = RETIRE_NO;
                pthread_cond_broadcast(&rt->changed);
            }
        return true;
    }
    model *victim = lru(rt, m, true);
    if (victim) {
        unload(rt, victim);
        return false;
    }
    victim = lru(rt, m, false);
    if (victim && !victim->retiring) {
        bool retiring = false; /* one retires at a time: the next only if it is still not enough */
        for (int32_t i = 0; i < rt->n; i++) retiring = retiring || rt->models[i].retiring != RETIRE_NO;
        if (!retiring) victim->retiring = RETIRE_FOR_ROOM;
    }
    *wait = true;
    return false;
}

/* A retiring model whose last lease ended goes now. */
static void reap_retired(srv_router *rt) {
    for (int32_t i = 0; i < rt->n; i++) {
        model *m = &rt->models[i];
        if (m->retiring && m->state == SRV_MODEL_LOADED && m->leases == 0) unload(rt, m);
    }
}

/* Whether m's file is as it was when its load failed (then failing again is certain). */
static bool still_broken(const model *m) {
    struct stat st;
    if (stat(m->p->path, &st) != 0) return m->failed_size == -1;
    return st.st_size == m->failed_size && st.st_mtim.tv_sec == m->failed_mtime.tv_sec &&
           st.st_mtim.tv_nsec == m->failed_mtime.tv_nsec;
}

static int load_failed(const model *m, srv_error *e) {
    srv_error_set(e, 500, "server_error", "model_load_failed", "model", "the model '%.128s' could not be loaded: %.300s",
                  m->p->id, m->error);
    return -1;
}

static int closed_error(srv_error *e) {
    srv_error_set(e, 503, "server_error", "draining", NULL, "the server is shutting down, retry elsewhere");
    return -1;
}

/* Wait under mu for a change to m: at most 100 ms when there is a watch w (then -1 with
 * srv_watch_error's e once it says to stop); -1 with e 503 when max_waiting requests wait for m
 * already. */
static int wait_for(srv_router *rt, model *m, const srv_watch *w, srv_error *e) {
    if (rt->cfg.max_waiting >= 0 && m->waiting >= rt->cfg.max_waiting) {
        srv_error_set(e, 503, "server_error", "server_overloaded", NULL,
                      "the server is busy (%d requests wait for the model '%.128s': --max-queue), retry later",
                      m->waiting, m->p->id);
        return -1;
    }
    m->waiting++;
    if (w) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&rt->changed, &rt->mu, &until);
    } else {
        pthread_cond_wait(&rt->changed, &rt->mu);
    }
    m->waiting--;
    if (w && srv_watch_gone((void *)w)) {
        srv_watch_error(w, e);
        return -1;
    }
    return 0;
}

/* m in memory and, when lease, leased; under mu. retry: a model that failed is loaded again
 * even when its file has not changed (POST /models/load). */
static int obtain(srv_router *rt, model *m, bool lease, bool retry, const srv_watch *w, srv_error *e) {
    uint64_t seen = m->attempts;
    bool tried = false;
    for (;;) {
        if (rt->closed) return closed_error(e);
        reap_retired(rt); /* one whose requests ended while nobody waited for it */
        if (m->p->est_bytes > rt->cfg.memory_budget && rt->cfg.memory_budget > 0 && m->state != SRV_MODEL_LOADED) {
            srv_error_set(e, 500, "server_error", "model_load_failed", "model",
                          "the model '%.128s' takes %.0f bytes, more than --memory-budget %.0f", m->p->id,
                          m->p->est_bytes, rt->cfg.memory_budget);
            return -1;
        }
        switch (m->state) {
        case SRV_MODEL_LOADED:
            if (m->retiring) break;
            if (lease) m->leases++;
            m->last_used = now_s();
            return 0;
        case SRV_MODEL_FAILED:
            /* a load this request waited for (or ran) failed: that is its answer; a failure from
               before it came is tried again once the file changed (it may have been fixed), and
               not before: a load that will fail must not unload the models others use */
            if (tried || m->attempts != seen || (!retry && still_broken(m))) return load_failed(m, e);
            /* fall through */
        case SRV_MODEL_UNLOADED: {
            bool wait;
            if (room_for(rt, m, &wait)) {
                load(rt, m);
                tried = true;
                continue;
            }
            if (!wait) continue;
            break;
        }
        case SRV_MODEL_LOADING:
        case SRV_MODEL_UNLOADING: break;
        }
        if (wait_for(rt, m, w, e)) return -1;
    }
}

int srv_router_acquire(srv_router *rt, const char *name, const srv_watch *w, srv_lease *out, srv_error *e) {
    *out = (srv_lease){.index = -1};
    pthread_mutex_lock(&rt->mu);
    model *m;
    int rc = lookup(rt, name, &m, e);
    if (!rc) rc = obtain(rt, m, true, false, w, e);
    if (!rc) *out = (srv_lease){.index = (int32_t)(m - rt->models), .inst = m->inst};
    pthread_mutex_unlock(&rt->mu);
    return rc;
}

void srv_router_release(srv_router *rt, srv_lease *l) {
    if (!rt || !l || l->index < 0) return;
    pthread_mutex_lock(&rt->mu);
    model *m = &rt->models[l->index];
    m->leases--;
    m->last_used = now_s();
    if (m->leases == 0) pthread_cond_broadcast(&rt->changed);
    pthread_mutex_unlock(&rt->mu);
    *l = (srv_lease){.index = -1};
}

int srv_router_load(srv_router *rt, const char *name, const srv_watch *w, srv_error *e) {
    pthread_mutex_lock(&rt->mu);
    model *m;
    int rc = lookup(rt, name, &m, e);
    if (!rc) rc = obtain(rt, m, false, true, w, e);
    pthread_mutex_unlock(&rt->mu);
    return rc;
}

int srv_router_unload(srv_router *rt, const char *name, srv_error *e) {
    pthread_mutex_lock(&rt->mu);
    model *m;
    int rc = lookup(rt, name, &m, e);
    if (!rc && rt->cfg.any_name) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "model",
                      "this server runs one model (-m), which cannot be unloaded; --models-dir or --models serve several");
        rc = -1;
    }
    while (!rc) {
        if (m->state == SRV_MODEL_LOADED && m->leases == 0) {
            unload(rt, m);
            break;
        }
        if (m->state == SRV_MODEL_UNLOADED || m->state == SRV_MODEL_FAILED) break;
        if (m->state == SRV_MODEL_LOADED) m->retiring = RETIRE_ASKED; /* its running requests end first */
        pthread_cond_wait(&rt->changed, &rt->mu);
    }
    pthread_mutex_unlock(&rt->mu);
    return rc;
}

/* ---- The idle watcher ---------------------------------------------------------------------- */

static void *watch_idle(void *arg) {
    srv_router *rt = arg;
    double period = rt->cfg.sleep_idle / 4 < 1 ? rt->cfg.sleep_idle / 4 : 1;
    pthread_mutex_lock(&rt->mu);
    while (!rt->closed) {
        double t = now_s();
        for (int32_t i = 0; i < rt->n; i++) {
            model *m = &rt->models[i];
            if (m->state == SRV_MODEL_LOADED && m->leases == 0 && t - m->last_used >= rt->cfg.sleep_idle) {
                unload(rt, m);
                i = -1; /* the lock was dropped: look at every model again */
                t = now_s();
                if (rt->closed) break;
            }
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double whole = (double)(long)period;
        until.tv_sec += (time_t)whole;
        until.tv_nsec += (long)((period - whole) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&rt->changed, &rt->mu, &until);
    }
    pthread_mutex_unlock(&rt->mu);
    return NULL;
}

/* ---- Life ---------------------------------------------------------------------------------- */

int srv_router_new(srv_router **out, srv_presets *ps, const srv_router_config *cfg, const srv_router_ops *ops,
                   nc_err *err) {
    *out = NULL;
    if (ps->n == 0) {
        snprintf(err->msg, sizeof err->msg, "no models to serve");
        return -1;
    }
    srv_router *rt = calloc(1, sizeof *rt);
    model *models = calloc((size_t)ps->n, sizeof *models);
    if (!rt || !models) {
        free(rt);
        free(models);
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return -1;
    }
    *rt = (srv_router){.ps = *ps, .models = models, .n = ps->n, .cfg = *cfg, .ops = *ops};
    *ps = (srv_presets){0};
    for (int32_t i = 0; i < rt->n; i++) models[i] = (model){.p = &rt->ps.p[i]};
    pthread_mutex_init(&rt->mu, NULL);
    pthread_cond_init(&rt->changed, NULL);
    if (cfg->sleep_idle > 0) {
        if (pthread_create(&rt->watcher, NULL, watch_idle, rt) != 0) {
            srv_router_free(rt);
            snprintf(err->msg, sizeof err->msg, "cannot start the idle watcher");
            return -1;
        }
        rt->watching = true;
    }
    *out = rt;
    return 0;
}

void srv_router_close(srv_router *rt) {
    pthread_mutex_lock(&rt->mu);
    rt->closed = true;
    pthread_cond_broadcast(&rt->changed);
    pthread_mutex_unlock(&rt->mu);
}

void srv_router_free(srv_router *rt) {
    if (!rt) return;
    srv_router_close(rt);
    if (rt->watching) pthread_join(rt->watcher, NULL);
    pthread_mutex_lock(&rt->mu);
    for (int32_t i = 0; i < rt->n; i++) {
        model *m = &rt->models[i];
        while (m->state == SRV_MODEL_LOADING || m->state == SRV_MODEL_UNLOADING) pthread_cond_wait(&rt->changed, &rt->mu);
        if (m->state == SRV_MODEL_LOADED) unload(rt, m);
    }
    pthread_mutex_unlock(&rt->mu);
    pthread_mutex_destroy(&rt->mu);
    pthread_cond_destroy(&rt->changed);
    srv_presets_free(&rt->ps);
    free(rt->models);
    free(rt);
}

/* ---- Status -------------------------------------------------------------------------------- */

int32_t srv_router_count(const srv_router *rt) { return rt->n; }

void srv_router_each(srv_router *rt, void (*fn)(void *user, const srv_model_status *st), void *user) {
    pthread_mutex_lock(&rt->mu);
    double t = now_s();
    for (int32_t i = 0; i < rt->n; i++) {
        const model *m = &rt->models[i];
        srv_model_status st = {.preset = m->p, .state = m->state, .bytes = weight(m), .leases = m->leases,
                               .loaded_at = m->loaded_at, .loads = m->loads,
                               .inst = m->state == SRV_MODEL_LOADED ? m->inst : NULL};
        if (m->state == SRV_MODEL_LOADED && m->leases == 0) st.idle_seconds = t - m->last_used;
        snprintf(st.error, sizeof st.error, "%s", m->state == SRV_MODEL_FAILED ? m->error : "");
        fn(user, &st);
    }
    pthread_mutex_unlock(&rt->mu);
}

const srv_preset *srv_router_preset(const srv_router *rt, const char *name) {
    srv_router *r = (srv_router *)rt;
    model *m = NULL;
    pthread_mutex_lock(&r->mu);
    if (name && *name) m = find(r, name);
    else if (r->n == 1) m = &r->models[0];
    pthread_mutex_unlock(&r->mu);
    return m ? m->p : NULL;
}
