/* /v1/embeddings: one vector per input, the mean of the final hidden states (after the final norm,
 * nc_hidden) over every token of the input, BOS included, scaled to unit L2 norm. The inputs run
 * one at a time on a context of their own (one sequence of the slots' context length, made by the
 * first request), so embeddings neither wait for nor take the generation slots. */
#ifndef NC_SERVER_EMBED_H
#define NC_SERVER_EMBED_H

#include <pthread.h>

#include "nucleus.h"
#include "server/request.h"

typedef struct srv_embedder {
    nc_model *m;
    nc_context *c;         /* NULL until the first request */
    pthread_mutex_t mu;    /* one input at a time */
    int32_t n_ctx, n_threads, n_embd;
} srv_embedder;

void srv_embedder_init(srv_embedder *e, nc_model *m, int32_t n_ctx, int32_t n_threads);
void srv_embedder_free(srv_embedder *e);
/* The embedding of ids (n >= 1) into out[n_embd]. Errors: 400 for an input longer than the
 * context, 500 for the engine's. */
int srv_embed(srv_embedder *e, const int32_t *ids, int32_t n, float *out, srv_error *err);

#endif
