/* Prometheus text exposition (version 0.0.4) of the server's counters, gauges and histograms. */
#include "server/metrics.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double ttft_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double token_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

const char *srv_endpoint_path(srv_endpoint ep) {
    static const char *const paths[SRV_EP_COUNT] = {"/health",    "/v1/models",  "/v1/completions",
                                                    "/v1/chat/completions", "/tokenize", "/detokenize",
                                                    "/metrics",   "/slots",      "/v1/embeddings", "/apply-template",
                                                    "/v1/messages", "/v1/messages/count_tokens", "/v1/responses",
                                                    "/completion", "/infill", "/props", "/slots (GET)",
                                                    "/models/load", "/models/unload", "/lora-adapters", "other"};
    return ep >= 0 && ep < SRV_EP_COUNT ? paths[ep] : "other";
}

void srv_metrics_init(srv_metrics *m, int n_slots) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->n_slots = n_slots;
    m->ttft = (srv_histogram){.bounds = ttft_bounds, .n_bounds = sizeof ttft_bounds / sizeof *ttft_bounds};
    m->token_latency = (srv_histogram){.bounds = token_bounds, .n_bounds = sizeof token_bounds / sizeof *token_bounds};
}

void srv_metrics_destroy(srv_metrics *m) { pthread_mutex_destroy(&m->mu); }

void srv_metrics_copy(srv_metrics *dst, srv_metrics *src) {
    pthread_mutex_lock(&src->mu);
    memcpy(dst, src, sizeof *dst);
    pthread_mutex_unlock(&src->mu);
    pthread_mutex_init(&dst->mu, NULL); /* its own, not the copied bytes of src's */
}

void srv_metrics_request(srv_metrics *m, srv_endpoint ep) {
    pthread_mutex_lock(&m->mu);
    m->requests[ep >= 0 && ep < SRV_EP_COUNT ? ep : SRV_EP_OTHER]++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_response(srv_metrics *m, int status) {
    if (status < 0 || status >= 600) return;
    pthread_mutex_lock(&m->mu);
    m->responses[status]++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_tokens(srv_metrics *m, int64_t prompt, int64_t generated) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)prompt;
    m->generated_tokens += (uint64_t)generated;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_gauges(srv_metrics *m, int64_t queue_length, int64_t busy_slots) {
    pthread_mutex_lock(&m->mu);
    m->queue_length = queue_length;
    m->busy_slots = busy_slots;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_kv(srv_metrics *m, const nc_kv_stats *kv) {
    pthread_mutex_lock(&m->mu);
    m->kv = *kv;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_preempted(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->preemptions++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_spec(srv_metrics *m, const nc_spec_stats *step) {
    pthread_mutex_lock(&m->mu);
    m->spec.drafted += step->drafted;
    m->spec.accepted += step->accepted;
    m->spec.passes += step->passes;
    m->spec.generated += step->generated;
    m->spec.draft_rows += step->draft_rows;
    pthread_mutex_unlock(&m->mu);
}

static void observe(srv_metrics *m, srv_histogram *h, double v) {
    int b = 0;
    while (b < h->n_bounds && v > h->bounds[b]) b++;
    pthread_mutex_lock(&m->mu);
    h->counts[b]++;
    h->sum += v;
    h->count++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_ttft(srv_metrics *m, double seconds) { observe(m, &m->ttft, seconds); }
void srv_metrics_token_latency(srv_metrics *m, double seconds) { observe(m, &m->token_latency, seconds); }

static void header(FILE *f, const char *name, const char *type, const char *help) {
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The models' series: each model's value under its label ({model="id"}), or the one model's
 * without one. */
typedef struct series {
    FILE *f;
    srv_metrics *const *m;
    const char *const *labels; /* NULL: one model, unlabelled */
    int n;
} series;

/* "{model="id"" + extra + "}", or "{" extra "}" / "" without a label. */
static void labels(const series *s, int i, const char *extra, char *out, size_t cap) {
    if (s->labels && extra) snprintf(out, cap, "{model=\"%s\",%s}", s->labels[i], extra);
    else if (s->labels) snprintf(out, cap, "{model=\"%s\"}", s->labels[i]);
    else if (extra) snprintf(out, cap, "{%s}", extra);
    else out[0] = 0;
}

static void render_histogram(const series *s, const char *name, const char *help, size_t offset) {
    header(s->f, name, "histogram", help);
    char lab[320], le[48];
    for (int i = 0; i < s->n; i++) {
        const srv_histogram *h = (const srv_histogram *)((const char *)s->m[i] + offset);
        uint64_t cumulative = 0;
        for (int b = 0; b < h->n_bounds; b++) {
            cumulative += h->counts[b];
            snprintf(le, sizeof le, "le=\"%g\"", h->bounds[b]);
            labels(s, i, le, lab, sizeof lab);
            fprintf(s->f, "%s_bucket%s %llu\n", name, lab, (unsigned long long)cumulative);
        }
        labels(s, i, "le=\"+Inf\"", lab, sizeof lab);
        fprintf(s->f, "%s_bucket%s %llu\n", name, lab, (unsigned long long)h->count);
        labels(s, i, NULL, lab, sizeof lab);
        fprintf(s->f, "%s_sum%s %.9g\n%s_count%s %llu\n", name, lab, h->sum, name, lab, (unsigned long long)h->count);
    }
}

static void render_counters(FILE *f, const srv_metrics *m) {
    header(f, "nucleus_requests_total", "counter", "HTTP requests received, by endpoint.");
    for (int ep = 0; ep < SRV_EP_COUNT; ep++)
        fprintf(f, "nucleus_requests_total{endpoint=\"%s\"} %llu\n", srv_endpoint_path((srv_endpoint)ep),
                (unsigned long long)m->requests[ep]);
    header(f, "nucleus_responses_total", "counter", "HTTP responses sent, by status code.");
    for (int s = 0; s < 600; s++)
        if (m->responses[s])
            fprintf(f, "nucleus_responses_total{code=\"%d\"} %llu\n", s, (unsigned long long)m->responses[s]);
}

/* One series per model: the value of each, as a double. */
typedef double (*value_fn)(const srv_metrics *m);

static void render(const series *s, const char *name, const char *type, const char *help, const char *extra,
                   value_fn v, const char *fmt) {
    if (type) header(s->f, name, type, help);
    char lab[320];
    for (int i = 0; i < s->n; i++) {
        labels(s, i, extra, lab, sizeof lab);
        fprintf(s->f, "%s%s ", name, lab);
        fprintf(s->f, fmt, v(s->m[i]));
        fputc('\n', s->f);
    }
}

#define VALUE(fname, expr) \
    static double fname(const srv_metrics *m) { return (double)(expr); }
VALUE(v_prompt, m->prompt_tokens)
VALUE(v_generated, m->generated_tokens)
VALUE(v_queue, m->queue_length)
VALUE(v_busy, m->busy_slots)
VALUE(v_slots, m->n_slots)
VALUE(v_kv_used, m->kv.used)
VALUE(v_kv_cached, m->kv.cached)
VALUE(v_kv_free, m->kv.free)
VALUE(v_lookups, m->kv.lookups)
VALUE(v_hits, m->kv.hits)
VALUE(v_looked_up, m->kv.tokens_looked_up)
VALUE(v_reused, m->kv.tokens_reused)
VALUE(v_hit_rate, m->kv.tokens_looked_up ? (double)m->kv.tokens_reused / (double)m->kv.tokens_looked_up : 0.0)
VALUE(v_evictions, m->kv.evictions)
VALUE(v_preemptions, m->preemptions)
VALUE(v_drafted, m->spec.drafted)
VALUE(v_accepted, m->spec.accepted)
VALUE(v_acceptance, m->spec.drafted ? (double)m->spec.accepted / (double)m->spec.drafted : 0.0)
VALUE(v_passes, m->spec.passes)
VALUE(v_per_pass, m->spec.passes ? (double)m->spec.generated / (double)m->spec.passes : 0.0)
VALUE(v_draft_rows, m->spec.draft_rows)

static void render_models(const series *s) {
    render(s, "nucleus_prompt_tokens_total", "counter", "Prompt tokens prefilled.", NULL, v_prompt, "%.0f");
    render(s, "nucleus_generated_tokens_total", "counter", "Tokens generated.", NULL, v_generated, "%.0f");
    render(s, "nucleus_queue_length", "gauge", "Requests waiting for a slot.", NULL, v_queue, "%.0f");
    render(s, "nucleus_slots_busy", "gauge", "Slots (sequences) generating or prefilling.", NULL, v_busy, "%.0f");
    render(s, "nucleus_slots_total", "gauge", "Slots of the server (--parallel).", NULL, v_slots, "%.0f");
    render(s, "nucleus_kv_blocks", "gauge", "Blocks of the KV pool (256 tokens each), by state.", "state=\"used\"",
           v_kv_used, "%.0f");
    render(s, "nucleus_kv_blocks", NULL, NULL, "state=\"cached\"", v_kv_cached, "%.0f");
    render(s, "nucleus_kv_blocks", NULL, NULL, "state=\"free\"", v_kv_free, "%.0f");
    render(s, "nucleus_prefix_cache_queries_total", "counter", "Prompts looked up in the prefix cache.", NULL, v_lookups, "%.0f");
    render(s, "nucleus_prefix_cache_hits_total", "counter", "Prompts that found a cached prefix.", NULL, v_hits, "%.0f");
    render(s, "nucleus_prefix_cache_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.", NULL,
           v_looked_up, "%.0f");
    render(s, "nucleus_prefix_cache_hit_tokens_total", "counter", "Prompt tokens found in the prefix cache.", NULL,
           v_reused, "%.0f");
    render(s, "nucleus_prefix_cache_hit_rate", "gauge", "Share of looked-up prompt tokens found in the cache.", NULL,
           v_hit_rate, "%.6f");
    render(s, "nucleus_kv_evictions_total", "counter", "Cached blocks reclaimed for new tokens.", NULL, v_evictions, "%.0f");
    render(s, "nucleus_preemptions_total", "counter", "Sequences whose cache was taken back (they resume later).", NULL,
           v_preemptions, "%.0f");
    render(s, "nucleus_spec_draft_tokens_total", "counter", "Tokens proposed by speculative decoding and verified.", NULL,
           v_drafted, "%.0f");
    render(s, "nucleus_spec_accepted_tokens_total", "counter", "Proposed tokens the model kept.", NULL, v_accepted, "%.0f");
    render(s, "nucleus_spec_acceptance_rate", "gauge", "Share of proposed tokens kept.", NULL, v_acceptance, "%.6f");
    render(s, "nucleus_spec_passes_total", "counter", "A sequence's passes through the model while speculating.", NULL,
           v_passes, "%.0f");
    render(s, "nucleus_spec_tokens_per_pass", "gauge", "Tokens generated per pass of a sequence (the mean accepted length + 1).",
           NULL, v_per_pass, "%.6f");
    render(s, "nucleus_spec_draft_rows_total", "counter", "Positions the draft model computed (its catch-up and its drafts).",
           NULL, v_draft_rows, "%.0f");
    render_histogram(s, "nucleus_time_to_first_token_seconds", "Time from a request's arrival to its first token.",
                     offsetof(srv_metrics, ttft));
    render_histogram(s, "nucleus_time_per_output_token_seconds", "Time between consecutive tokens of a sequence.",
                     offsetof(srv_metrics, token_latency));
}

char *srv_metrics_render(srv_metrics *server, srv_metrics *const *models, const char *const *model_labels, int n) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    pthread_mutex_lock(&server->mu);
    render_counters(f, server);
    pthread_mutex_unlock(&server->mu);
    for (int i = 0; i < n; i++) pthread_mutex_lock(&models[i]->mu);
    series s = {.f = f, .m = models, .labels = model_labels, .n = n};
    render_models(&s);
    for (int i = 0; i < n; i++) pthread_mutex_unlock(&models[i]->mu);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}
