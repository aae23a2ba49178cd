/* One batched forward pass of a decoder-only model, as its layers say (model/model.h: each
 * layer's mixer and feed-forward kinds), written once (forward.c) over a table of operations per
 * backend (backend.h: the CPU's, cpu.c; CUDA's, src/cuda/backend.c):
 *
 *   h = embed(token) * embedding scale
 *   every layer:  h = h + residual scale * post_norm(mixer(norm(h)))      attention, ...
 *                 h = h + residual scale * post_norm(ffn(norm(h)))        gated, experts, ...
 *   logits = softcap(W_out norm(h) * logit scale)
 *
 * where each norm is present or not as the architecture places it. A batch is any list of
 * (token, position, sequence, want-logits); prefill and decode are the same code. Long batches
 * run in micro-batches of n_batch tokens. The last n_gpu layers and the output may run on a GPU,
 * the others on the CPU: the residual stream crosses once per micro-batch. */
#ifndef NC_FORWARD_H
#define NC_FORWARD_H

#include "common.h"
#include "forward/backend.h"
#include "kv/kv_cache.h"
#include "kv/kv_file.h"
#include "model/model.h"

/* Rotary tables a model may use: its full-attention layers' and its sliding layers'. */
#define FWD_MAX_ROPES 2

/* The experts' part of a micro-batch, routed on the host: each (token, slot) of the routing is
 * a row, rows grouped by expert. */
typedef struct fwd_moe {
    int32_t *expert;                 /* [n_batch][k] chosen experts of each token, best first */
    float *weight;                   /* [n_batch][k] their weights */
    float *logits;                   /* [n_batch][n_expert] router outputs */
    int32_t *start;                  /* [n_expert + 1] first row of each expert */
    int32_t *row;                    /* [n_batch][k] the row of each (token, slot) */
    int32_t *token;                  /* [n_batch * k] the token of each row */
} fwd_moe;

typedef struct fwd_state {
    const model *m;
    kv_cache kv;
    int32_t n_batch, n_threads;      /* micro-batch capacity, CPU threads */
    bool fast;                       /* int8 activations where they keep llama.cpp's precision */
    int32_t n_ctx;
    int32_t width[FB_COUNT];         /* floats per token of each activation buffer */
    /* what the backends share: the host's view of the micro-batch */
    float *x;                        /* [n_batch][n_embd] the embedded tokens; the residual stream
                                        where the CPU runs the layers */
    const nc_batch_entry *entries;   /* the micro-batch */
    int32_t *cells;                  /* cache cell of each micro-batch entry */
    int32_t *out_tokens, n_out;      /* micro-batch entries that want logits */
    float *out_logits;               /* where their logits go (rows of `logits`) */
    int n_ropes;                     /* rotary tables: 1, or 2 when sliding layers rotate differently */
    double *inv_freq[FWD_MAX_ROPES]; /* [n_rot/2] of each */
    float rope_mscale[FWD_MAX_ROPES];
    float *rope_cos[FWD_MAX_ROPES], *rope_sin[FWD_MAX_ROPES]; /* [n_batch][n_rot/2] */
    float *temp;                     /* [n_batch] each token's attention temperature (model_hparams) */
    float *pl_tok;                   /* [n_batch][n_layer][n_embd_per_layer] Gemma 4's per-layer token inputs */
    fwd_moe moe;
    /* the backends: layers il < split run on `first`, the others and the output on `last` */
    const fwd_backend *first, *last;
    int32_t split;
    void *cpu, *gpu;                 /* their own state */
    /* logits of the last batch, and the final hidden states they were projected from */
    float *logits;
    float *hidden;                   /* [logits_cap][n_embd]: after the final norm */
    int32_t logits_cap;              /* rows allocated */
    int32_t *logit_row;              /* batch entry -> row in logits, or -1 */
    int32_t logit_row_cap, n_entries;
} fwd_state;

/* n_cells: the KV pool's capacity (0: n_seq * n_ctx); type_k, type_v: the cache's key and value
 * types (GGML_TYPE_F16, F32, Q8_0, Q4_0; see kv_cache.h). swa_full: sliding layers keep every
 * position rather than a ring of their window. Products with integer weight types take int16
 * activations; fast: int8 for the products of RMS-normalised inputs (Q/K/V, gate/up: 64% of a
 * layer's arithmetic) with Q8_0 or Q4_0 weights, which keeps the deviation from the exact
 * reference below llama.cpp's. Int8 everywhere would not, nor int8 on Q4_K: see
 * docs/performance.md. n_gpu: the last n_gpu layers (all of them from n_layer on), with the
 * output projection and their part of the cache, on the first CUDA GPU (src/cuda/backend.c;
 * refused, with the reason, for what it lacks); 0: none. */
int fwd_init(fwd_state *s, const model *m, int32_t n_ctx, int32_t n_seq, int32_t n_threads, int32_t n_batch,
             int64_t n_cells, uint32_t type_k, uint32_t type_v, bool swa_full, bool fast, int32_t n_gpu, nc_err *err);
void fwd_free(fwd_state *s);
/* Where the pass runs: "cpu", or the GPU's description. */
const char *fwd_describe(const fwd_state *s, char *buf, size_t n);

int fwd_run(fwd_state *s, const nc_batch_entry *batch, int n, nc_err *err);
const float *fwd_logits(const fwd_state *s, int i);
/* The final hidden state (after the final norm, the output projection's input) of entry i of the
 * last batch, n_embd floats, when the entry asked for logits; else NULL. */
const float *fwd_hidden(const fwd_state *s, int i);
/* Keep the first n cells of seq: with recurrent state, the cache goes back to its latest
 * checkpoint at or before n and the tokens from there to n are computed again (the same bits
 * they had). On failure the sequence is left empty. */
int fwd_seq_truncate(fwd_state *s, int32_t seq, int32_t n, nc_err *err);
/* kv_seq_load into seq, and the cells past the saved recurrent state computed again. */
int fwd_seq_load(fwd_state *s, int32_t seq, const kv_file_view *v, int32_t n, const char *name, nc_err *err);
/* kv_seq_keep, then the moved keys rotated for their new positions. */
int fwd_seq_keep(fwd_state *s, int32_t seq, const int32_t *cells, int32_t n, const int32_t *new_pos, nc_err *err);
/* Cells 0..n-1 of seq from the backends' copies of the cache into the host's (to_host, before
 * saving them) or back (after loading them). */
int fwd_cache_sync(fwd_state *s, int32_t seq, int32_t n, bool to_host, nc_err *err);

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

/* The rotary table a layer uses, or -1 (no rotation). */
static inline int fwd_rope_of(const fwd_state *s, const model_layer *L) {
    return L->rope_table < 0 ? -1 : s->n_ropes > 1 ? L->rope_table : 0;
}

/* Rotate the first n_rot dimensions of one head by a row of a rotary table: pairs of adjacent
 * dimensions (2i, 2i+1), or dimension i with i + n_rot/2 ("neox": the halves, as transformers'
 * rotate_half). */
void fwd_rope_head(float *v, int n_rot, bool neox, const float *cs, const float *sn);

#endif
