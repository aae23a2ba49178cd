/* Router mode: which of a server's models are in memory. Each model (a preset, server/presets.h)
 * is unloaded, loading, loaded, unloading or failed (with the loader's message). A request leases
 * the model it names: a loaded one at once; an unloaded one is loaded first, the request waiting
 * (a failed one is tried again). Before a load, while --models-max models are in memory (or the
 * new one would take them past --memory-budget bytes), the least recently used idle model is
 * unloaded; when every one is busy, the least recently used stops taking new requests and goes
 * once its running ones end. With --sleep-idle-seconds a model nobody used for that long is
 * unloaded. An unload waits for the model's running requests. A model that fails to load fails
 * only the requests that wanted it. As many requests may wait for one model (its load, or room
 * for it) as --max-queue lets wait for its slots; more get 503, and one stops waiting when its
 * client leaves, its deadline passes or the server stops (server/watch.h).
 *
 * How a model is made and freed is the caller's (srv_router_ops), so the policy is tested alone
 * (tests/unit/test_router.c). Thread-safe; loads run on the thread of the request that needed
 * them, without the lock. */
#ifndef NC_SERVER_ROUTER_H
#define NC_SERVER_ROUTER_H

#include <stdbool.h>
#include <stdint.h>

#include "nucleus.h"
#include "server/presets.h"
#include "server/request.h"
#include "server/watch.h"

typedef enum srv_model_state {
    SRV_MODEL_UNLOADED,
    SRV_MODEL_LOADING,
    SRV_MODEL_LOADED,
    SRV_MODEL_UNLOADING,
    SRV_MODEL_FAILED,
} srv_model_state;

const char *srv_model_state_name(srv_model_state s); /* "unloaded", "loading", ... */

typedef struct srv_router_ops {
    /* Make preset p's model: *inst (opaque here) and the bytes it holds. -1 with err. */
    int (*open)(void *user, const srv_preset *p, void **inst, double *bytes, nc_err *err);
    void (*close)(void *user, void *inst);
    void *user;
} srv_router_ops;

typedef struct srv_router_config {
    int32_t models_max;    /* models in memory at once (0: no limit) */
    double memory_budget;  /* bytes the models in memory may hold together (0: no limit) */
    double sleep_idle;     /* seconds without a request before a model is unloaded (0: never) */
    bool any_name;         /* one model, answering to every name (nucleus serve -m) */
    int32_t max_waiting;   /* requests that may wait for one model (-1: no limit) */
} srv_router_config;

typedef struct srv_router srv_router;

/* The router takes ps (left empty). Starts the idle watcher when sleep_idle > 0. */
int srv_router_new(srv_router **out, srv_presets *ps, const srv_router_config *cfg, const srv_router_ops *ops,
                   nc_err *err);
/* Stop taking leases and loads (503), unload everything, free. Leases must have been released. */
void srv_router_free(srv_router *rt);

typedef struct srv_lease {
    int32_t index;         /* the model's */
    void *inst;
} srv_lease;

/* Lease the model named (NULL or "": the only model of a router of one, else a 400 naming
 * "model"), loading it first when it is not in memory. w (NULL: none) is looked at every 100 ms
 * while the request waits for its model (being loaded by another request, or for room) and ends
 * the wait when it says to stop; a load the request runs itself goes to its end (other requests
 * may want the model). Errors: 404 (code model_not_found) naming the models served, 500 (code
 * model_load_failed) with the loader's message, 503 while stopping or when max_waiting requests
 * wait for the model already (code server_overloaded), srv_watch_error's when w ended the wait
 * (499: its client left; 503: the server stops, or the deadline passed). */
int srv_router_acquire(srv_router *rt, const char *name, const srv_watch *w, srv_lease *out, srv_error *e);
void srv_router_release(srv_router *rt, srv_lease *l);
/* POST /models/load: the model in memory (nothing leased); errors as srv_router_acquire's. */
int srv_router_load(srv_router *rt, const char *name, const srv_watch *w, srv_error *e);
/* POST /models/unload: out of memory once its running requests end. A model of a router of one
 * cannot be unloaded (400). */
int srv_router_unload(srv_router *rt, const char *name, srv_error *e);
/* Stop taking new leases and loads: they get 503 from now on. */
void srv_router_close(srv_router *rt);

/* What /v1/models shows of one model. */
typedef struct srv_model_status {
    const srv_preset *preset;
    srv_model_state state;
    char error[NC_ERR_MAX]; /* failed: the loader's message */
    double bytes;          /* loaded: what it holds; else what loading it is expected to take */
    int32_t leases;        /* requests using it */
    double idle_seconds;   /* since its last request ended (loaded, not leased) */
    int64_t loaded_at;     /* Unix seconds of its last load (0: never) */
    uint64_t loads;        /* times it was loaded */
    void *inst;            /* loaded: the instance (valid while the callback runs) */
} srv_model_status;

int32_t srv_router_count(const srv_router *rt);
/* Call fn for each model, in the presets' order, under the router's lock: st->inst stays loaded
 * while fn runs (fn must not call the router). */
void srv_router_each(srv_router *rt, void (*fn)(void *user, const srv_model_status *st), void *user);
/* The preset of the model named (as acquire finds it), or NULL. */
const srv_preset *srv_router_preset(const srv_router *rt, const char *name);

#endif
