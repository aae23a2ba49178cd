/* /v1/embeddings: one vector per input, the mean of the final hidden states (after the final norm,
 * nc_hidden) over every token of the input, BOS included, scaled to unit L2 norm. The inputs run
 * one at a time on a context of their own (one sequence of the slots' context length, made by the
 * first request), so embeddings neither wait for nor take the generation slots. */
#ifndef NC_SERVER_EMBED_H
#define NC_SERVER_EMBED_H

#include <pthread.h>
#include <stdatomic.h>

#include "nucleus.h"
#include "server/request.h"

typedef struct srv_embedder {
    nc_model *m;
    nc_context *c;         /* NULL until the first request */
    pthread_mutex_t mu;    /* one input at a time */
    int32_t n_ctx, n_threads, n_embd;
    atomic_bool stopped;   /* srv_embedder_stop: every embedding ends at its next chunk */
} srv_embedder;

void srv_embedder_init(srv_embedder *e, nc_model *m, int32_t n_ctx, int32_t n_threads);
void srv_embedder_free(srv_embedder *e);
/* Whether the caller's work should stop (user: the caller's): its client left, its deadline passed. */
typedef bool (*srv_embed_gone_fn)(void *user);
/* The embedding of ids (n >= 1) into out[n_embd], a chunk of tokens at a time: before each, and
 * every 100 ms while another input holds the embedder, gone (when not NULL) and the embedder's
 * stop are looked at, so that an embedding whose client left, whose deadline passed or that the
 * server's shutdown ends stops within a chunk. Errors: 400 for an input longer than the context,
 * 499 when gone said so, 503 when the server stops, 500 for the engine's. */
int srv_embed(srv_embedder *e, const int32_t *ids, int32_t n, float *out, srv_embed_gone_fn gone, void *user,
              srv_error *err);
/* Shutdown: embeddings running or waiting end with 503 at their next chunk, later ones at once. */
void srv_embedder_stop(srv_embedder *e);

#endif
