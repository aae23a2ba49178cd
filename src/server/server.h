/* `nucleus serve`: an OpenAI-compatible HTTP server over one model (-m), or in router mode over
 * several loaded on demand (server/router.h). Endpoints: GET /health, GET /v1/models,
 * POST /v1/completions, POST /v1/chat/completions, POST /tokenize, POST /detokenize,
 * GET /metrics, POST /slots/{id}?action=save|restore, GET /v1/models/{id}, POST /v1/embeddings
 * (server/embed.h), POST /apply-template, Anthropic's POST /v1/messages and
 * /v1/messages/count_tokens (server/anthropic.h), OpenAI's POST /v1/responses
 * (server/responses.h), llama.cpp's POST /completion, POST /infill, GET /props, GET /slots
 * (server/llama_api.h), POST /models/load and /models/unload, and the web page at /
 * (server/web.h). Every request gets an access-log line (server/access.h). Each model's requests
 * run through its continuous-batching scheduler (scheduler.h, server/instance.h); connections
 * are served by libmicrohttpd, one thread each. */
#ifndef NC_SERVER_SERVER_H
#define NC_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nucleus.h"
#include "server/presets.h"

typedef struct srv_config {
    const char *host;      /* numeric IPv4 or IPv6 address, or a name; "127.0.0.1" by default */
    int port;              /* 0: a free port (see srv_port) */
    int32_t n_parallel;    /* slots: sequences decoded together */
    int32_t n_ctx;         /* context cells per slot (0: min(training context, 4096)) */
    int64_t kv_cells;      /* tokens in the KV pool all slots share (0: n_parallel * n_ctx) */
    int32_t n_threads;     /* 0: all cores */
    nc_cache_type type_k, type_v; /* the KV cache's key and value types */
    int32_t n_gpu_layers;  /* nc_context_params.n_gpu_layers: 0 the CPU, -1 the GPU */
    int32_t max_queue;     /* requests allowed to wait beyond the slots */
    int32_t chunk;         /* prompt tokens prefilled per step */
    const char *api_key;   /* NULL: no authentication */
    const char *allowed_hosts; /* Host names answered, comma-separated, "*": any; NULL: see
                                  srv_default_allowed_hosts */
    const char *cors;      /* origins whose pages may call the API, comma-separated, "*": any;
                              NULL: CORS off (server/web.h) */
    size_t max_body;       /* bytes; larger bodies get 413 */
    double drain_seconds;  /* at shutdown, how long running requests may finish */
    double request_seconds; /* --request-timeout: a request's work (render, grammar, queue, generation,
                               embeddings) ends this long after its body arrived (0: no deadline) */
    double header_seconds; /* a request's headers must arrive within this of the connection opening
                              or its previous answer (0: 15) */
    double body_seconds;   /* and its body within this of the headers (0: 60) */
    int max_connections;   /* open connections, a thread each (0: 1024) */
    int max_conn_per_ip;   /* from one client address, an IPv6 one's /64 as one (0: 64; -1: no limit,
                              behind a balancer) */
    const char *model_id;  /* the name /v1/models reports (-m) */
    const char *model_path; /* -m: the model's path (/props, /v1/models) */
    int32_t models_max;    /* router mode: models in memory at once (0: no limit) */
    double memory_budget;  /* router mode: bytes the models in memory may take (0: no limit) */
    double sleep_idle_seconds; /* router mode: a model idle this long is unloaded (0: never) */
    const char *slot_save_path; /* the directory slot files are saved to and restored from; NULL: off */
    uint64_t slot_save_max_bytes; /* what the regular files of that directory may hold after a save
                                     (0: SRV_SLOT_SAVE_MAX_BYTES); a save past it gets 507 */
    bool swa_full;         /* sliding-window layers keep every position (nc_context_params.swa_full) */
    bool fast;             /* the fast mode, for the model and the draft (nc_context_params.fast) */
    nc_ctx_policy context; /* a slot whose context is full: ends (finish "length"), or, for requests
                              with max_tokens, a context shift or attention sinks make room */
    nc_model *draft_model; /* speculative decoding in every slot with this draft model (the server
                              makes its context), or with prompt lookup (spec.lookup_ngram) */
    nc_spec_params spec;   /* lookup_ngram, draft_max, draft_min, fixed */
    const char *chat_template; /* Jinja source used instead of the model's template; NULL: the model's */
    const char *const *lora_paths; /* --lora: the adapters the caller applied to the model, with their */
    const float *lora_scales;      /* scales (GET /lora-adapters lists them) */
    int32_t n_lora;
    bool reasoning_none;   /* --reasoning-format none: chat replies keep their reasoning in the
                              content (requests may say otherwise with reasoning_format) */
    int32_t reasoning_budget; /* tokens of reasoning, then its end is forced; -1: no limit (a
                                 zeroed config means 0: set it) */
} srv_config;

#define SRV_SLOT_SAVE_MAX_BYTES ((uint64_t)10 << 30)

typedef struct srv_server srv_server;

/* Open the listener before the model loads: until srv_start, /health answers 503
 * {"status":"loading"} and the other endpoints (but /metrics) 503, so a load balancer or an
 * orchestrator can wait for the replica. */
int srv_listen(srv_server **out, const srv_config *cfg, nc_err *err);
/* Serve the model: on success the server is ready (/health 200). On failure stop it (srv_stop).
 * cfg's strings must outlive the server. */
int srv_start(srv_server *s, nc_model *m, const srv_config *cfg, nc_err *err);
/* Router mode: serve the presets' models (taken; ps is left empty), each loaded when a request
 * first names it (or now, with load-on-startup) with cfg's options under its preset's.
 * cfg's strings must outlive the server. */
int srv_start_router(srv_server *s, srv_presets *ps, const srv_config *cfg, nc_err *err);
int srv_port(const srv_server *s);
/* What the server made, for its start-up summary: the model's part with -m only (zeroed in
 * router mode), the listener's always. */
typedef struct srv_info {
    int32_t n_ctx, n_threads;  /* context per slot; threads of the engine */
    double kv_bytes;           /* the whole cache */
    const nc_context *context; /* the engine's, for what its cache holds (nc_kv_*) */
    const char *device;        /* nc_context_device: "cpu" or the GPU */
    bool authenticated;        /* an API key is needed (srv_config.api_key) */
    bool any_host;             /* every Host is answered: no DNS-rebinding check */
    bool loopback;             /* the listening address is a loopback one */
} srv_info;
void srv_get_info(const srv_server *s, srv_info *out);
/* A remark for the operator ("" when none): e.g. that the model's chat template was unusable. */
const char *srv_note(const srv_server *s);
/* Graceful stop: /health answers 503 {"status":"draining"} and new generation requests 503 while
 * running requests get drain_seconds to finish (less when they finish sooner); then the listener
 * closes, the rest end with 503, and everything is freed. */
void srv_stop(srv_server *s);

#endif
