/* Server metrics in Prometheus' text format: requests by endpoint, responses by status, prompt
 * and generated tokens, queue length, busy slots, the KV pool and its prefix cache (blocks by
 * state, hit rate, evictions, preemptions), and histograms of the time to first token and
 * of the time between tokens. Every function is thread-safe. */
#ifndef NC_SERVER_METRICS_H
#define NC_SERVER_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "nucleus.h"

typedef enum srv_endpoint {
    SRV_EP_HEALTH,
    SRV_EP_MODELS,
    SRV_EP_COMPLETIONS,
    SRV_EP_CHAT,
    SRV_EP_TOKENIZE,
    SRV_EP_DETOKENIZE,
    SRV_EP_METRICS,
    SRV_EP_SLOTS,          /* /slots/{id} */
    SRV_EP_EMBEDDINGS,
    SRV_EP_APPLY_TEMPLATE, /* /apply-template */
    SRV_EP_MESSAGES,       /* /v1/messages (Anthropic's) */
    SRV_EP_COUNT_TOKENS,   /* /v1/messages/count_tokens */
    SRV_EP_RESPONSES,      /* /v1/responses */
    SRV_EP_COMPLETION,     /* /completion (llama.cpp's) */
    SRV_EP_INFILL,         /* /infill */
    SRV_EP_PROPS,          /* GET /props */
    SRV_EP_SLOTS_LIST,     /* GET /slots */
    SRV_EP_MODELS_LOAD,    /* /models/load */
    SRV_EP_MODELS_UNLOAD,  /* /models/unload */
    SRV_EP_LORA_ADAPTERS,  /* GET /lora-adapters */
    SRV_EP_OTHER,
    SRV_EP_COUNT
} srv_endpoint;

const char *srv_endpoint_path(srv_endpoint ep);  /* "/v1/completions"; "other" */

#define SRV_HIST_MAX_BUCKETS 16

typedef struct srv_histogram {
    const double *bounds;  /* upper bounds, increasing; +Inf is implied */
    int n_bounds;
    uint64_t counts[SRV_HIST_MAX_BUCKETS + 1];  /* per bucket (not cumulative), last one +Inf */
    double sum;
    uint64_t count;
} srv_histogram;

typedef struct srv_metrics {
    pthread_mutex_t mu;
    uint64_t requests[SRV_EP_COUNT];
    uint64_t responses[600];  /* by HTTP status */
    uint64_t prompt_tokens, generated_tokens;
    int64_t queue_length, busy_slots, n_slots;
    nc_kv_stats kv;                 /* the KV pool and its prefix cache, as of the engine's last step */
    uint64_t preemptions;           /* sequences whose cache was taken back to make room */
    nc_spec_stats spec;             /* speculative decoding: drafts, kept ones, slots' passes, their tokens */
    srv_histogram ttft, token_latency;
} srv_metrics;

void srv_metrics_init(srv_metrics *m, int n_slots);
void srv_metrics_destroy(srv_metrics *m);
/* dst (not initialised) becomes a copy of src's values, with a lock of its own. */
void srv_metrics_copy(srv_metrics *dst, srv_metrics *src);
void srv_metrics_request(srv_metrics *m, srv_endpoint ep);
void srv_metrics_response(srv_metrics *m, int status);
void srv_metrics_tokens(srv_metrics *m, int64_t prompt, int64_t generated);
void srv_metrics_gauges(srv_metrics *m, int64_t queue_length, int64_t busy_slots);
void srv_metrics_kv(srv_metrics *m, const nc_kv_stats *kv);
void srv_metrics_preempted(srv_metrics *m);
void srv_metrics_spec(srv_metrics *m, const nc_spec_stats *step);
void srv_metrics_ttft(srv_metrics *m, double seconds);
void srv_metrics_token_latency(srv_metrics *m, double seconds);
/* The exposition text, malloc'd; NULL when out of memory: the requests and responses of server,
 * then the other series of each model (labelled {model="..."} with labels, else the one model's
 * unlabelled). */
char *srv_metrics_render(srv_metrics *server, srv_metrics *const *models, const char *const *labels, int n);

#endif
