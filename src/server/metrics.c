/* Prometheus text exposition (version 0.0.4) of the server's counters, gauges and histograms. */
#include "server/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double ttft_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double token_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

const char *srv_endpoint_path(srv_endpoint ep) {
    static const char *const paths[SRV_EP_COUNT] = {"/health",    "/v1/models",  "/v1/completions",
                                                    "/v1/chat/completions", "/tokenize", "/detokenize",
                                                    "/metrics",   "/slots",      "/v1/embeddings", "/apply-template",
                                                    "other"};
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

static void render_histogram(FILE *f, const char *name, const char *help, const srv_histogram *h) {
    header(f, name, "histogram", help);
    uint64_t cumulative = 0;
    for (int b = 0; b < h->n_bounds; b++) {
        cumulative += h->counts[b];
        fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[b], (unsigned long long)cumulative);
    }
    fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count);
    fprintf(f, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
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
    header(f, "nucleus_prompt_tokens_total", "counter", "Prompt tokens prefilled.");
    fprintf(f, "nucleus_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
    header(f, "nucleus_generated_tokens_total", "counter", "Tokens generated.");
    fprintf(f, "nucleus_generated_tokens_total %llu\n", (unsigned long long)m->generated_tokens);
}

static void render_gauges(FILE *f, const srv_metrics *m) {
    header(f, "nucleus_queue_length", "gauge", "Requests waiting for a slot.");
    fprintf(f, "nucleus_queue_length %lld\n", (long long)m->queue_length);
    header(f, "nucleus_slots_busy", "gauge", "Slots (sequences) generating or prefilling.");
    fprintf(f, "nucleus_slots_busy %lld\n", (long long)m->busy_slots);
    header(f, "nucleus_slots_total", "gauge", "Slots of the server (--parallel).");
    fprintf(f, "nucleus_slots_total %lld\n", (long long)m->n_slots);
}

static void render_kv(FILE *f, const srv_metrics *m) {
    const nc_kv_stats *k = &m->kv;
    header(f, "nucleus_kv_blocks", "gauge", "Blocks of the KV pool (256 tokens each), by state.");
    fprintf(f, "nucleus_kv_blocks{state=\"used\"} %d\nnucleus_kv_blocks{state=\"cached\"} %d\n"
               "nucleus_kv_blocks{state=\"free\"} %d\n", k->used, k->cached, k->free);
    header(f, "nucleus_prefix_cache_queries_total", "counter", "Prompts looked up in the prefix cache.");
    fprintf(f, "nucleus_prefix_cache_queries_total %llu\n", (unsigned long long)k->lookups);
    header(f, "nucleus_prefix_cache_hits_total", "counter", "Prompts that found a cached prefix.");
    fprintf(f, "nucleus_prefix_cache_hits_total %llu\n", (unsigned long long)k->hits);
    header(f, "nucleus_prefix_cache_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.");
    fprintf(f, "nucleus_prefix_cache_tokens_total %llu\n", (unsigned long long)k->tokens_looked_up);
    header(f, "nucleus_prefix_cache_hit_tokens_total", "counter", "Prompt tokens found in the prefix cache.");
    fprintf(f, "nucleus_prefix_cache_hit_tokens_total %llu\n", (unsigned long long)k->tokens_reused);
    header(f, "nucleus_prefix_cache_hit_rate", "gauge", "Share of looked-up prompt tokens found in the cache.");
    fprintf(f, "nucleus_prefix_cache_hit_rate %.6f\n",
            k->tokens_looked_up ? (double)k->tokens_reused / (double)k->tokens_looked_up : 0.0);
    header(f, "nucleus_kv_evictions_total", "counter", "Cached blocks reclaimed for new tokens.");
    fprintf(f, "nucleus_kv_evictions_total %llu\n", (unsigned long long)k->evictions);
    header(f, "nucleus_preemptions_total", "counter", "Sequences whose cache was taken back (they resume later).");
    fprintf(f, "nucleus_preemptions_total %llu\n", (unsigned long long)m->preemptions);
}

static void render_spec(FILE *f, const nc_spec_stats *s) {
    header(f, "nucleus_spec_draft_tokens_total", "counter", "Tokens proposed by speculative decoding and verified.");
    fprintf(f, "nucleus_spec_draft_tokens_total %lld\n", (long long)s->drafted);
    header(f, "nucleus_spec_accepted_tokens_total", "counter", "Proposed tokens the model kept.");
    fprintf(f, "nucleus_spec_accepted_tokens_total %lld\n", (long long)s->accepted);
    header(f, "nucleus_spec_acceptance_rate", "gauge", "Share of proposed tokens kept.");
    fprintf(f, "nucleus_spec_acceptance_rate %.6f\n", s->drafted ? (double)s->accepted / (double)s->drafted : 0.0);
    header(f, "nucleus_spec_passes_total", "counter", "A sequence's passes through the model while speculating.");
    fprintf(f, "nucleus_spec_passes_total %lld\n", (long long)s->passes);
    header(f, "nucleus_spec_tokens_per_pass", "gauge", "Tokens generated per pass of a sequence (the mean accepted length + 1).");
    fprintf(f, "nucleus_spec_tokens_per_pass %.6f\n", s->passes ? (double)s->generated / (double)s->passes : 0.0);
    header(f, "nucleus_spec_draft_rows_total", "counter", "Positions the draft model computed (its catch-up and its drafts).");
    fprintf(f, "nucleus_spec_draft_rows_total %lld\n", (long long)s->draft_rows);
}

char *srv_metrics_render(srv_metrics *m) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    pthread_mutex_lock(&m->mu);
    render_counters(f, m);
    render_gauges(f, m);
    render_kv(f, m);
    render_spec(f, &m->spec);
    render_histogram(f, "nucleus_time_to_first_token_seconds", "Time from a request's arrival to its first token.",
                     &m->ttft);
    render_histogram(f, "nucleus_time_per_output_token_seconds", "Time between consecutive tokens of a sequence.",
                     &m->token_latency);
    pthread_mutex_unlock(&m->mu);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}
