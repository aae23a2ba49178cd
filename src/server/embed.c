#include "server/embed.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Tokens per forward call: every entry asks for its hidden state (and so its logits), which
 * bounds the logits buffer to this many rows. */
#define EMBED_CHUNK 128

void srv_embedder_init(srv_embedder *e, nc_model *m, int32_t n_ctx, int32_t n_threads) {
    nc_model_info info;
    nc_model_get_info(m, &info);
    *e = (srv_embedder){.m = m, .n_ctx = n_ctx, .n_threads = n_threads, .n_embd = info.n_embd};
    atomic_init(&e->stopped, false);
    pthread_mutex_init(&e->mu, NULL);
}

void srv_embedder_free(srv_embedder *e) {
    nc_context_free(e->c);
    pthread_mutex_destroy(&e->mu);
    memset(e, 0, sizeof *e);
}

static int engine_error(srv_error *err, const nc_err *ne) {
    srv_error_set(err, 500, "server_error", NULL, NULL, "embeddings: %s", ne->msg);
    return -1;
}

void srv_embedder_stop(srv_embedder *e) { atomic_store(&e->stopped, true); }

/* Whether to end before the next chunk (err set then). */
static bool ended(srv_embedder *e, srv_embed_gone_fn gone, void *user, srv_error *err) {
    if (atomic_load(&e->stopped)) {
        srv_error_set(err, 503, "server_error", "draining", NULL, "the server is shutting down, retry elsewhere");
        return true;
    }
    if (gone && gone(user)) {
        srv_error_set(err, 499, "invalid_request_error", NULL, NULL, "the client closed the connection");
        return true;
    }
    return false;
}

/* Take e->mu, looking at gone and the stop every 100 ms of the wait (another request's inputs
 * may hold it for long). */
static int lock_watched(srv_embedder *e, srv_embed_gone_fn gone, void *user, srv_error *err) {
    for (;;) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100000000;
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
        if (pthread_mutex_timedlock(&e->mu, &until) == 0) return 0;
        if (ended(e, gone, user, err)) return -1;
    }
}

/* Under e->mu: sum the hidden states of ids into sum[n_embd], in chunks. */
static int sum_hidden(srv_embedder *e, const int32_t *ids, int32_t n, double *sum, srv_embed_gone_fn gone, void *user,
                      srv_error *err) {
    nc_err ne;
    if (!e->c) {
        nc_context_params cp = {.n_ctx = e->n_ctx, .n_seq_max = 1, .n_threads = e->n_threads, .n_batch = EMBED_CHUNK};
        if (nc_context_new(&e->c, e->m, &cp, &ne)) return engine_error(err, &ne);
    }
    nc_kv_seq_clear(e->c, 0);
    nc_batch_entry batch[EMBED_CHUNK];
    for (int32_t at = 0; at < n; at += EMBED_CHUNK) {
        if (ended(e, gone, user, err)) {
            nc_kv_seq_clear(e->c, 0);
            return -1;
        }
        int32_t k = n - at < EMBED_CHUNK ? n - at : EMBED_CHUNK;
        for (int32_t i = 0; i < k; i++) batch[i] = (nc_batch_entry){.token = ids[at + i], .pos = at + i, .logits = true};
        if (nc_forward(e->c, batch, k, &ne)) {
            nc_kv_seq_clear(e->c, 0);
            return engine_error(err, &ne);
        }
        for (int32_t i = 0; i < k; i++) {
            const float *h = nc_hidden(e->c, i);
            for (int32_t d = 0; h && d < e->n_embd; d++) sum[d] += h[d];
        }
    }
    nc_kv_seq_clear(e->c, 0);
    return 0;
}

int srv_embed(srv_embedder *e, const int32_t *ids, int32_t n, float *out, srv_embed_gone_fn gone, void *user,
              srv_error *err) {
    if (n > e->n_ctx) {
        srv_error_set(err, 400, "invalid_request_error", "context_length_exceeded", "input",
                      "the input has %d tokens, more than the context of %d", n, e->n_ctx);
        return -1;
    }
    double *sum = calloc((size_t)e->n_embd, sizeof *sum);
    if (!sum) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory for an embedding");
        return -1;
    }
    int rc = lock_watched(e, gone, user, err);
    if (!rc) {
        rc = sum_hidden(e, ids, n, sum, gone, user, err);
        pthread_mutex_unlock(&e->mu);
    }
    double norm = 0; /* the mean's direction is the sum's: dividing by n would cancel */
    for (int32_t d = 0; d < e->n_embd; d++) norm += sum[d] * sum[d];
    norm = sqrt(norm);
    for (int32_t d = 0; !rc && d < e->n_embd; d++) out[d] = (float)(norm > 0 ? sum[d] / norm : 0);
    free(sum);
    return rc;
}
