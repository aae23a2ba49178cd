/* One model being served: its context (slots, KV pool, prefix cache), the draft model's context
 * with speculative decoding, the continuous-batching scheduler, the chat template, the embedder
 * and the model's own metrics. A server holds one (nucleus serve -m) or, in router mode, as many
 * as its models currently loaded (server/router.h), each made and freed here. */
#ifndef NC_SERVER_INSTANCE_H
#define NC_SERVER_INSTANCE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "nucleus.h"
#include "server/embed.h"
#include "server/gate.h"
#include "server/metrics.h"
#include "server/prepare.h"
#include "server/scheduler.h"
#include "server/server.h"

typedef struct srv_instance {
    char *id;              /* the name requests give as "model" */
    char *path;            /* the model's file or directory ("" when not known) */
    nc_model *m, *dm;      /* the model and the draft model */
    bool owns_models;      /* loaded here (router mode), so freed here */
    nc_context *c, *draft;
    srv_sched *sched;
    srv_metrics metrics;   /* tokens, slots, KV pool, prefix cache, latencies of this model */
    srv_model_ctx mc;
    srv_embedder emb;
    atomic_int embedding;  /* /v1/embeddings requests computing or waiting for its embedder */
    srv_gate gate;         /* renders, grammar compilations, tokenizing: --parallel at once, --max-queue wait */
    atomic_bool stopping;  /* the server stops: renders, compilations and waits for the gate end */
    int32_t max_queue;     /* --max-queue: how many requests may wait, for a slot or the embedder */
    bool mc_ready, metrics_ready, emb_ready, gate_ready;
    int32_t n_parallel;
    int64_t created;       /* Unix seconds */
    double bytes;          /* what it holds in memory: weights, KV caches (the draft's too) */
    char note[512];        /* a remark for the operator ("" when none), e.g. ChatML used */
} srv_instance;

/* Serve m (and the draft model dm, may be NULL) with cfg's slots, context, cache types, chat
 * template, speculative decoding and queue limit. owns: srv_instance_free frees m and dm too. On
 * failure nothing is left (the models are freed when owned) and err says why. */
int srv_instance_new(srv_instance **out, const char *id, const char *path, nc_model *m, nc_model *dm, bool owns,
                     const srv_config *cfg, nc_err *err);
/* Load path (a GGUF file or a Hugging Face directory), the draft model when draft_path is given,
 * and serve them: srv_instance_new with owns. */
int srv_instance_open(srv_instance **out, const char *id, const char *path, const char *draft_path,
                      const srv_config *cfg, nc_err *err);
/* Refuse new jobs, give running ones drain_seconds to finish, then fail what is left (503) and
 * free everything. */
void srv_instance_free(srv_instance *in, double drain_seconds);

#endif
