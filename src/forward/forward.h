/* One batched forward pass of a llama-family decoder:
 * embed -> n_layer x (RMSNorm, Q/K/V, RoPE, attention over the KV cache, output projection,
 * RMSNorm, SwiGLU FFN) -> RMSNorm -> logits for the entries that ask for them.
 * A batch is any list of (token, position, sequence, want-logits); prefill and decode are the
 * same code. Long batches run in micro-batches of n_batch tokens.
 *
 * Each layer is five jobs on the thread pool, split into chunks the threads claim: Q/K/V (a chunk
 * is one head: its rows, bias, RoPE and its write to the cache), attention (a chunk is one token
 * and one group of query heads sharing a KV head), the output projection (added to the residual
 * stream), gate and up with SwiGLU, and the down projection (added to the residual). RMSNorm and
 * the quantisation of activations happen where their input is complete: for a few tokens each
 * thread normalises its own copy before its first chunk (no extra barrier), for more a job of its
 * own normalises them once; attention and SwiGLU quantise their own outputs. */
#ifndef NC_FORWARD_H
#define NC_FORWARD_H

#include "common.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "threads/pool.h"

/* Scratch of one thread. */
typedef struct fwd_thread {
    float *xn;                       /* a private normalised input, [FWD_PRIVATE_T][n_embd] */
    uint8_t *xq;                     /* its quantisation */
    void *pack;                      /* kernels_mul scratch */
    float *gate, *up;                /* one FFN chunk's outputs, [n_batch][ffn_rows] */
    /* attention of one block of queries (FWD_ATTN_BLOCK tokens x group heads = R rows) */
    float *attn_q;                   /* [R][head_dim] the queries */
    float *scores;                   /* [R][FWD_ATTN_SPAN] weights of one span */
    float *attn_part;                /* [R][head_dim] one span's share of the output */
    float *attn_max;                 /* [R] running maxima */
    double *attn_sum;                /* [R] running sums */
} fwd_thread;

/* Cells per step of the streaming softmax, the most query tokens of one sequence attended
 * together (their keys and values read once), and the most query heads per KV head. */
#define FWD_ATTN_SPAN 256
#define FWD_ATTN_BLOCK 16
#define FWD_MAX_GROUP 64

/* Micro-batches of at most this many tokens normalise per thread. */
#define FWD_PRIVATE_T 4

typedef struct fwd_state {
    const model *m;
    kv_cache kv;
    pool *pool;
    int32_t n_batch, n_threads;      /* micro-batch capacity */
    bool fast;                       /* int8 activations where they keep llama.cpp's precision */
    int32_t ffn_rows, out_rows, embd_rows; /* rows per chunk of the FFN, output and n_embd-row jobs */
    /* activations, [n_batch][dim], 64-byte aligned; *q: the quantised rows (act_* bytes each) */
    float *x;                        /* residual stream */
    float *xn;                       /* normalised input of the next products */
    uint8_t *xnq;
    float *q, *k, *v, *attn, *ffn;   /* attn: attention output, ffn: SwiGLU output */
    uint8_t *attnq, *ffnq;
    size_t act_embd, act_q, act_ff;  /* bytes per quantised row of each width (int16: the larger) */
    fwd_thread *thr;                 /* [n_threads] */
    float *rope_cos, *rope_sin;      /* [n_batch][n_rot/2] */
    double *inv_freq;                /* [n_rot/2] */
    int32_t *cells;                  /* cache cell of each micro-batch entry */
    int32_t *out_tokens;             /* micro-batch entries that want logits */
    int32_t *attn_blocks, n_attn_blocks; /* starts of the query blocks of the micro-batch (+ end) */
    /* logits of the last batch */
    float *logits;
    int32_t logits_cap;              /* rows allocated */
    int32_t *logit_row;              /* batch entry -> row in logits, or -1 */
    int32_t logit_row_cap, n_entries;
} fwd_state;

/* kv_type: GGML_TYPE_F16 or GGML_TYPE_F32. Products with integer weight types take int16
 * activations; fast: int8 for the products of RMS-normalised inputs (Q/K/V, gate/up: 64% of a
 * layer's arithmetic) with Q8_0 or Q4_0 weights, which keeps the deviation from the exact
 * reference below llama.cpp's. Int8 everywhere would not, nor int8 on Q4_K: see the README's
 * Performance section. */
int fwd_init(fwd_state *s, const model *m, int32_t n_ctx, int32_t n_seq, int32_t n_threads, int32_t n_batch,
             uint32_t kv_type, bool fast, nc_err *err);
void fwd_free(fwd_state *s);

int fwd_run(fwd_state *s, const nc_batch_entry *batch, int n, nc_err *err);
const float *fwd_logits(const fwd_state *s, int i);

#endif
