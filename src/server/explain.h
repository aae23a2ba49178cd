/* nucleus_explain: one generated token's step as JSON, for the web page's decoding inspector.
 *
 * A step holds the stage report `nucleus run --explain=json` prints (stages, the draw, the final
 * distribution's top tokens) plus "raw": the model's own logits before any stage, the top_n
 * largest with their log-softmax over the whole vocabulary, and that vocabulary's log-sum-exp, so
 * a client can recompute the distribution at another temperature or truncation (README, Web
 * page). Pure over its inputs: no model, no server. */
#ifndef NC_SERVER_EXPLAIN_H
#define NC_SERVER_EXPLAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "nucleus.h"
#include "server/response.h"

typedef struct srv_explain_step {
    int32_t choice, step;      /* the choice's index and the token's position in its output */
    int32_t token;
    bool eog;                  /* an end-of-generation token: it ends the text and is not part of it */
    nc_finish finish;
    const nc_explain *ex;      /* the sampler's record of this draw (NULL: no stage report) */
    const float *logits;       /* the row drawn from, n_vocab long */
    int32_t n_vocab, top_n;
} srv_explain_step;

/* The step's JSON object, malloc'd; NULL when out of memory. */
char *srv_json_explain_step(const srv_explain_step *in, srv_piece_fn piece, void *piece_ctx);

/* The top k (at most n) logits' ids, largest first, lower id first on ties, into ids; returns how
 * many. NaN logits are never taken. */
int32_t srv_top_logits(const float *x, int32_t n, int32_t k, int32_t *ids);
/* log(sum(exp(x))) over n logits, in double. */
double srv_logsumexp(const float *x, int32_t n);

#endif
