/* One batched forward pass of a decoder-only transformer, as the model's architecture row
 * (model/arch.h) describes it:
 *
 *   h = embed(token) * embedding scale
 *   every layer:  a = attention(norm(h))            q/k norms, RoPE, GQA, window, soft-cap, sinks
 *                 h = h + residual scale * post_norm(W_o a + b_o)
 *                 f = ffn(norm(h))                  gated (SwiGLU, GeGLU, gpt-oss's), or experts
 *                 h = h + residual scale * post_norm(f)
 *   logits = softcap(W_out norm(h) * logit scale)
 *
 * where each norm is present or not as the architecture places it. A batch is any list of
 * (token, position, sequence, want-logits); prefill and decode are the same code. Long batches
 * run in micro-batches of n_batch tokens.
 *
 * Each layer is a few jobs on the thread pool, split into chunks the threads claim: Q/K/V (a
 * chunk is one head: its rows, bias, q/k norm, RoPE and its write to the cache), attention (a
 * chunk is a block of one sequence's tokens and one group of query heads sharing a KV head), the
 * output projection (added straight to the residual stream when nothing comes between), the FFN's
 * gate and up with the activation, and the down projection. RMSNorm and the quantisation of
 * activations happen where their input is complete: for a few tokens each thread normalises its
 * own copy before its first chunk (no extra barrier), for more a job of its own normalises them
 * once. A mixture-of-experts FFN routes every token, groups the tokens by expert, and runs each
 * expert's products once for all its tokens. */
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
    float *kv_keys, *kv_values;      /* a span of a quantised cache dequantised (kv_span_keys / _values),
                                        NULL when the cache holds floats */
    uint64_t *attn_score;            /* [FWD_ATTN_SPAN] one span's attention weights (H2O's scores) */
} fwd_thread;

/* Cells per step of the streaming softmax (a sliding layer's ring is a multiple of it), the most
 * query tokens of one sequence attended together (their keys and values read once), and the most
 * query heads per KV head. */
#define FWD_ATTN_SPAN KV_BLOCK
#define FWD_ATTN_BLOCK 16
#define FWD_MAX_GROUP 64

/* Micro-batches of at most this many tokens normalise per thread. */
#define FWD_PRIVATE_T 4

/* The experts' part of a micro-batch: each (token, slot) of the routing is a row, rows grouped by
 * expert. */
typedef struct fwd_moe {
    int32_t *expert;                 /* [n_batch][k] chosen experts of each token, best first */
    float *weight;                   /* [n_batch][k] their weights */
    float *logits;                   /* [n_batch][n_expert] router outputs */
    int32_t *start;                  /* [n_expert + 1] first row of each expert */
    int32_t *row;                    /* [n_batch][k] the row of each (token, slot) */
    int32_t *token;                  /* [n_batch * k] the token of each row */
    int32_t *chunks;                 /* (expert, first output row) of each chunk of an expert job */
    int32_t n_chunks;
    float *in;                       /* [rows][n_embd] gathered inputs, and quantised */
    uint8_t *inq;
    float *act;                      /* [rows][n_ff_exp] activations, and quantised */
    uint8_t *actq;
    float *out;                      /* [rows][n_embd] expert outputs */
    float *gate_up;                  /* [n_threads][n_batch][2 * ffn rows] fused products (transposed weights) */
} fwd_moe;

typedef struct fwd_gpu fwd_gpu; /* forward_gpu.c */

typedef struct fwd_state {
    const model *m;
    kv_cache kv;
    pool *pool;
    int32_t n_batch, n_threads;      /* micro-batch capacity */
    bool fast;                       /* int8 activations where they keep llama.cpp's precision */
    int32_t ffn_rows, exp_rows, out_rows, embd_rows; /* rows per chunk of the FFN, experts, output, n_embd-row jobs */
    /* activations, [n_batch][dim], 64-byte aligned; *q: the quantised rows (act_* bytes each) */
    float *x;                        /* residual stream */
    float *xn;                       /* normalised input of the next products */
    uint8_t *xnq;
    float *q, *k, *v, *attn, *ffn;   /* attn: attention output, ffn: the FFN's activations */
    uint8_t *attnq, *ffnq;
    float *o;                        /* a block's output before its post-norm and residual add */
    size_t act_embd, act_q, act_ff, act_ffe; /* bytes per quantised row of each width (int16: the larger) */
    fwd_thread *thr;                 /* [n_threads] */
    int n_ropes;                     /* 1, or 2 when sliding layers rotate differently */
    double *inv_freq[2];             /* [n_rot/2] of each rope */
    float rope_mscale[2];
    float *rope_cos[2], *rope_sin[2]; /* [n_batch][n_rot/2] */
    fwd_moe moe;
    int32_t *cells;                  /* cache cell of each micro-batch entry */
    int32_t *out_tokens;             /* micro-batch entries that want logits */
    int32_t *attn_blocks, n_attn_blocks; /* starts of the query blocks of the micro-batch (+ end) */
    /* logits of the last batch, and the final hidden states they were projected from */
    float *logits;
    float *hidden;                   /* [logits_cap][n_embd]: after the final norm */
    int32_t logits_cap;              /* rows allocated */
    int32_t *logit_row;              /* batch entry -> row in logits, or -1 */
    int32_t logit_row_cap, n_entries;
    fwd_gpu *gpu;                    /* the pass runs on a CUDA GPU (forward_gpu.c), or NULL: */
    int32_t gpu_first;               /* from this layer on, and the output projection */
} fwd_state;

/* n_cells: the KV pool's capacity (0: n_seq * n_ctx); type_k, type_v: the cache's key and value
 * types (GGML_TYPE_F16, F32, Q8_0, Q4_0; see kv_cache.h). swa_full: sliding layers keep every
 * position rather than a ring of their window. Products with integer weight types take int16
 * activations; fast: int8 for the products of RMS-normalised inputs (Q/K/V, gate/up: 64% of a
 * layer's arithmetic) with Q8_0 or Q4_0 weights, which keeps the deviation from the exact
 * reference below llama.cpp's. Int8 everywhere would not, nor int8 on Q4_K: see the README's
 * Performance section. n_gpu: the last n_gpu layers (all of them from n_layer on), with the
 * output projection and their part of the cache, on the first CUDA GPU (forward_gpu.c; refused,
 * with the reason, for what it lacks); 0: none. */
int fwd_init(fwd_state *s, const model *m, int32_t n_ctx, int32_t n_seq, int32_t n_threads, int32_t n_batch,
             int64_t n_cells, uint32_t type_k, uint32_t type_v, bool swa_full, bool fast, int32_t n_gpu, nc_err *err);
void fwd_free(fwd_state *s);

int fwd_run(fwd_state *s, const nc_batch_entry *batch, int n, nc_err *err);
const float *fwd_logits(const fwd_state *s, int i);
/* The final hidden state (after the final norm, the output projection's input) of entry i of the
 * last batch, n_embd floats, when the entry asked for logits; else NULL. */
const float *fwd_hidden(const fwd_state *s, int i);
/* kv_seq_keep, then the moved keys rotated for their new positions. */
int fwd_seq_keep(fwd_state *s, int32_t seq, const int32_t *cells, int32_t n, const int32_t *new_pos, nc_err *err);

/* The first index of the sorted positions pos[0..n) that is >= p. */
static inline int32_t fwd_lower_bound(const int32_t *pos, int32_t n, int32_t p) {
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (pos[mid] < p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The router's choice for token t of a mixture-of-experts layer, from its logits in
 * s->moe.logits: the experts in s->moe.expert, their weights in s->moe.weight (shared by the CPU
 * and GPU passes). */
void fwd_route(fwd_state *s, const model_layer *L, int t);

/* forward_gpu.c: set-up (s->gpu), release, a line saying what runs where, and one micro-batch
 * after forward.c embedded its tokens, made its rotary table and ran the layers before
 * gpu_first. */
int fwd_gpu_init(fwd_state *s, nc_err *err);
void fwd_gpu_free(fwd_state *s);
const char *fwd_gpu_describe(const fwd_state *s, char *buf, size_t n);
int fwd_gpu_batch(fwd_state *s, const nc_batch_entry *e, int T, int first_entry, nc_err *err);
/* After kv_seq_keep moved a sequence's cells (new_pos, old: each kept cell's positions; cs:
 * fwd_seq_keep's turn of each, cos and sin per rotary table), the same turn of the keys on the GPU. */
int fwd_gpu_turn_keys(fwd_state *s, int32_t seq, int32_t n, const int32_t *new_pos, const int32_t *old,
                      const float *cs, nc_err *err);
/* The keys and values of cells 0..n-1 of seq from the GPU into the host's copy of the cache
 * (to_host, before saving them) or back (after loading them). */
int fwd_gpu_cache_sync(fwd_state *s, int32_t seq, int32_t n, bool to_host, nc_err *err);

#endif
