/* What a backend computes for the forward pass (forward.c): the table of operations the walk over
 * a model's layers calls, one table per backend (cpu.c: the CPU kernels on the thread pool;
 * src/cuda/backend.c: the CUDA GPU). The walk says what a layer computes, in order, as the
 * model's paper does; a backend says how, on its memory. A new layer kind is written once in the
 * walk and once in each backend's operations; an operation a backend lacks is NULL, and a model
 * that needs it is refused at load, naming the operation (fwd_init).
 *
 * Activations live in the backend's memory, in buffers named by fwd_buf: [n_batch][width] floats
 * each, the width the walk asks for (fwd_state.width). The walk refers to them by views (a buffer,
 * the first float of token 0's row, the floats between tokens' rows), to weights by their
 * model_weight (a backend keeps its own copy of each where it must: the GPU's device memory) and
 * to vectors (norms, biases) by their host pointers. Per micro-batch, the host's part (the
 * embedded tokens, the rotary tables, the cache's bookkeeping, the experts' routing) is in
 * fwd_state; begin() takes what the backend needs of it. */
#ifndef NC_FWD_BACKEND_H
#define NC_FWD_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "kernels/kernels.h"
#include "model/model.h"

typedef struct fwd_state fwd_state;

typedef enum fwd_buf {
    FB_X,      /* the residual stream */
    FB_XN,     /* a normalised input (of products, of the router and experts, of the output) */
    FB_Q,      /* queries (the projections of a mixer) */
    FB_K,      /* keys */
    FB_V,      /* values */
    FB_ATTN,   /* the mixer's output, the input of its output projection */
    FB_FFN,    /* the FFN's activations, the input of its down projection */
    FB_O,      /* a block's output before its post-norm and the residual */
    FB_ROUTER, /* a mixture's router logits */
    FB_LOGITS, /* the output projection of the tokens that want logits */
    FB_T1,     /* scratch of the mixers and FFNs that need more (recurrent mixers, latent attention, */
    FB_T2,     /*  the FFN beside the experts, per-layer embeddings) */
    FB_PL,     /* Gemma 4: every layer's per-layer input, [n_layer][n_embd_per_layer] */
    FB_COUNT
} fwd_buf;

/* Token t's row of a view: buf + off + t * ld floats. */
typedef struct fwd_view {
    fwd_buf buf;
    int32_t off, ld;
} fwd_view;

/* The input of products: x (cols floats a token), RMS-normalised with `norm` first unless it is
 * NULL; the tokens `rows` of the micro-batch (NULL: the first T). ready: x was quantised for
 * integer weights by the operation that wrote it (its return value). */
typedef struct fwd_in {
    fwd_view x;
    int32_t cols, T;
    const float *norm;
    const int32_t *rows;
    bool ready;
} fwd_in;

/* What each head of a row of projections gets after its product, in order: its RMS norm (`norm`
 * a weight of `dim`; `plain`: no weight), its rotation (rotary table `rope` of fwd_state, the
 * first n_rot of the head's dims; -1: none), and, for keys and values, its store into the cache
 * (`layer`; -1: not now). Heads are `stride` floats apart in the row (dim, or more where a
 * projection interleaves another output). */
typedef enum fwd_head_kind { FWD_QUERY, FWD_KEY, FWD_VALUE } fwd_head_kind;
typedef struct fwd_heads {
    fwd_head_kind kind;
    int32_t n, dim, stride;
    const float *norm;
    bool plain;
    bool norm_last;            /* the norm after the rotation (Llama 4) */
    int8_t rope;
    int32_t n_rot;             /* dims the rotation turns (the first of each head) */
    bool temperature;          /* queries times the token's attention temperature (fwd_state.temp) */
    int32_t layer;
    int32_t offset;            /* the first of the cache row's dims this head set goes to (head 0's) */
} fwd_heads;

/* An activation applied alone (an MLP's, a gate's): relu(x)^2, GELU's tanh form. */
typedef enum fwd_act { FWD_ACT_NONE, FWD_ACT_RELU2, FWD_ACT_GELU_TANH } fwd_act;

/* One product of an input: y = scale * (w x + bias), added to y when `add`; a gated pair when
 * `up` is set: y = act(w x + bias) * (up x) (the GLU of an FFN); quant: y is also quantised for
 * a product that takes it next (whole groups of 32). heads: finish each head of y as it says. */
typedef struct fwd_out {
    const model_weight *w;
    fwd_view y;
    const float *bias;
    bool add, quant;
    float scale;
    const model_weight *up;
    kernels_glu act;
    fwd_act act_only;          /* without up: y = act(w x + bias) (FWD_ACT_NONE: the product itself) */
    const fwd_heads *heads;
} fwd_out;

/* Causal attention of the micro-batch's queries over a layer's cache: query head h of token t
 * (q: n_head heads of dim floats, q_stride apart) sees the cached keys of its sequence at
 * positions pos - window < p <= pos (window 0: every earlier one), with the softmax of
 * scale * q.k (soft-capped when softcap > 0), an extra logit sinks[h] without value when sinks is
 * set; n_head / n_head_kv query heads share a key head. quant: the output quantised too (the output
 * projection's input; returned). */
typedef struct fwd_attn {
    int32_t layer;
    fwd_view q, out;
    int32_t n_head, n_head_kv, dim, q_stride;
    int32_t dim_v;             /* the values' head size (latent attention's; 0: dim) */
    float scale, softcap;
    const float *sinks;
    int32_t window;
    int32_t chunk;             /* a query sees only its chunk's positions, [pos / chunk * chunk, pos] (0: all) */
    bool quant;
} fwd_attn;

/* Element-wise operations over T tokens' rows, in groups of n floats (`groups` a token; each
 * view's groups `stride` floats apart, n when 0):
 *   FWD_MUL          y = a * b
 *   FWD_SIGMOID_MUL  y = a * sigmoid(b)              (an output gate)
 *   FWD_SILU_MUL     y = a * silu(b)
 *   FWD_SCALE        y = a * scale
 *   FWD_ADD_SCALE    y = (a + b) * scale
 *   FWD_ADD          y = a + b
 *   FWD_DOT_SIGMOID  y[i] = a[i] * sigmoid(b . w) for each group (w: n floats; Qwen3.5's shared expert gate) */
typedef enum fwd_ew_kind { FWD_MUL, FWD_SIGMOID_MUL, FWD_SILU_MUL, FWD_SCALE, FWD_ADD_SCALE, FWD_ADD, FWD_DOT_SIGMOID } fwd_ew_kind;
typedef struct fwd_ew {
    fwd_ew_kind kind;
    fwd_view y, a, b;
    int32_t n, groups;
    int32_t y_stride, a_stride, b_stride;
    float scale;
    const float *w;
} fwd_ew;

/* A causal depthwise convolution over time of `channels` channels of a view, with the layer's
 * state of each sequence (the K - 1 inputs before the batch's, kv_state): out[t][c] = bias[c] +
 * sum_k w[c][k] in[t - K + 1 + k][c], then silu when asked; the state keeps the last K - 1 inputs. */
typedef struct fwd_conv {
    int32_t layer, channels, k;
    fwd_view in, out;
    const float *w, *bias;
    bool silu;
} fwd_conv;

/* A recurrence over each sequence's tokens in order, with the layer's state (after the
 * convolution's in kv_state):
 *   gated DeltaNet (Yang et al. 2024): per value head h (key head h % key heads), q and k
 *     L2-normalised, q scaled by 1/sqrt(d_k); S = exp(g) S; S += beta (v - S k) k^T; o = S q, with
 *     g = softplus(alpha + dt_bias) * a and beta = sigmoid(beta's logit);
 *   Mamba2 (Dao & Gu 2024): per head h (group h / (heads / groups)), dt = softplus(dt + dt_bias);
 *     S = exp(dt a) S + dt x B^T; y = S C + d x. */
typedef enum fwd_scan_kind { FWD_DELTANET, FWD_MAMBA2 } fwd_scan_kind;
typedef struct fwd_scan {
    fwd_scan_kind kind;
    int32_t layer;
    int32_t heads, groups, head_dim, state_dim; /* value heads and their size; key heads / groups and their size */
    fwd_view x;                /* DeltaNet: [q | k | v] of the convolution; Mamba2: [x | B | C] */
    fwd_view gate, beta;       /* DeltaNet: alpha's and beta's logits per head; Mamba2: dt per head (gate) */
    fwd_view y;                /* [heads][head_dim] */
    const float *dt_bias, *a, *d;
} fwd_scan;

/* The experts of a mixture for the micro-batch: the routing is in fwd_state.moe (each token's
 * experts and weights, the (token, slot) rows grouped by expert); `in` the normalised inputs of
 * the tokens; out = the weighted sum of each token's experts' outputs. */
typedef struct fwd_experts {
    const model_layer *L;
    fwd_view in, out;
    int32_t T;
    bool ready;                /* `in` was quantised by the operation that wrote it */
    bool weight_input;         /* each row's weight scales the expert's input, the outputs summed as they are (Llama 4) */
} fwd_experts;

typedef struct fwd_backend {
    const char *name;
    bool lora;                 /* mul adds the weights' LoRA pairs (model_weight.lora) */
    /* Set up what the backend needs for the layers il0..n_layer-1 it runs (il0 = n_layer: only
     * the output) and buffers of fwd_state.width; free it. */
    int (*init)(fwd_state *s, int il0, nc_err *err);
    void (*free)(fwd_state *s);
    /* A line for the start-up message ("" on the CPU). */
    const char *(*describe)(const fwd_state *s, char *buf, size_t n);
    /* A micro-batch of T entries begins (the walk has embedded its tokens into fwd_state.x, made
     * its rotary tables and claimed its cells). */
    int (*begin)(fwd_state *s, const nc_batch_entry *e, int T, nc_err *err);
    /* Run the walk's run(s, arg) over a stretch of layers and the output (a GPU replays a graph
     * of it where it can); n_out tokens want logits. */
    int (*segment)(fwd_state *s, int T, int n_out, int (*run)(fwd_state *, void *, nc_err *), void *arg, nc_err *err);
    /* Rows of floats between the host and the backend: T rows of n floats of a view. */
    int (*get)(fwd_state *s, float *dst, fwd_view src, int32_t n, int T, nc_err *err);
    int (*put)(fwd_state *s, fwd_view dst, const float *src, int32_t n, int T, nc_err *err);

    /* ---- the operations of a layer ---- */
    /* Products of one input; whether every output asking for it was quantised (failures surface
     * at the end of the micro-batch). */
    bool (*mul)(fwd_state *s, const fwd_in *in, const fwd_out *out, int n);
    /* dst = RMSNorm(src) * w per group of n floats (w NULL: no weight), groups per token, for the
     * tokens `rows` of src (NULL: the first T) into dst's first T rows; quant: dst quantised too
     * (for a product next; returned). */
    bool (*norm)(fwd_state *s, fwd_view dst, fwd_view src, const int32_t *rows, int32_t n, int32_t groups, const float *w,
                 int T, bool quant);
    /* Each head of T rows of a view finished as h says (fwd_heads; its norm, rotation and store). */
    void (*heads)(fwd_state *s, fwd_view v, const fwd_heads *h, int T);
    bool (*attend)(fwd_state *s, const fwd_attn *a, int T);
    /* x += scale * RMSNorm(o) * w (w NULL: x += scale * o), n floats a token. */
    void (*add)(fwd_state *s, fwd_view x, fwd_view o, int32_t n, const float *w, float scale, int T);
    int (*experts)(fwd_state *s, const fwd_experts *x, nc_err *err);
    void (*ew)(fwd_state *s, const fwd_ew *e, int T);
    void (*conv)(fwd_state *s, const fwd_conv *c, int T);
    void (*scan)(fwd_state *s, const fwd_scan *c, int T);
    /* Per head h of n: out[t][h] = w[h] in[t][h] (heads of in `in_stride` floats apart, of out
     * `out_stride`): the latent attention's products in and out of its latent. */
    void (*mul_heads)(fwd_state *s, const model_weight *w, int32_t n, fwd_view in, int32_t in_stride, fwd_view out,
                      int32_t out_stride, int T);

    /* ---- the cache ---- */
    /* Keys of the layers it holds, of a sequence's moved cells, turned for their new positions
     * (fwd_seq_keep). */
    int (*turn_keys)(fwd_state *s, int32_t seq, int32_t n, const int32_t *new_pos, const int32_t *old,
                     const float *cs, nc_err *err);
    /* Cells 0..n-1 of seq between the host's copy of the cache and the backend's (NULL: the
     * backend works on the host's). */
    int (*cache_sync)(fwd_state *s, int32_t seq, int32_t n, bool to_host, nc_err *err);
} fwd_backend;

extern const fwd_backend fwd_cpu;
/* The CUDA backend (src/cuda/backend.c), in builds that link it (weak: NULL otherwise). */
extern const fwd_backend fwd_cuda __attribute__((weak));

#endif
