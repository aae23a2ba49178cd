/* One batched forward pass of a llama-family decoder:
 * embed -> n_layer x (RMSNorm, Q/K/V, RoPE, attention over the KV cache, output projection,
 * RMSNorm, SwiGLU FFN) -> RMSNorm -> logits for the entries that ask for them.
 * A batch is any list of (token, position, sequence, want-logits); prefill and decode are the
 * same code. Long batches run in micro-batches of n_batch tokens. */
#ifndef NC_FORWARD_H
#define NC_FORWARD_H

#include "common.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "threads/pool.h"

typedef struct fwd_state {
    const model *m;
    kv_cache kv;
    pool *pool;
    int32_t n_batch;                 /* micro-batch capacity */
    /* activations, [n_batch][dim] */
    float *x, *h, *q, *k, *v, *attn, *gate, *up;
    float *scores;                   /* per thread: group x n_ctx attention weights */
    float *rope_cos, *rope_sin;      /* [n_batch][n_rot/2] */
    double *inv_freq;                /* [n_rot/2] */
    int32_t *cells;                  /* cache cell of each micro-batch entry */
    /* logits of the last batch */
    float *logits;
    int32_t logits_cap;              /* rows allocated */
    int32_t *logit_row;              /* batch entry -> row in logits, or -1 */
    int32_t logit_row_cap, n_entries;
} fwd_state;

/* kv_type: GGML_TYPE_F16 or GGML_TYPE_F32. */
int fwd_init(fwd_state *s, const model *m, int32_t n_ctx, int32_t n_seq, int32_t n_threads, int32_t n_batch,
             uint32_t kv_type, nc_err *err);
void fwd_free(fwd_state *s);

int fwd_run(fwd_state *s, const nc_batch_entry *batch, int n, nc_err *err);
const float *fwd_logits(const fwd_state *s, int i);

#endif
