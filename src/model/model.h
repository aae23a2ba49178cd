/* A model: its hyper-parameters and the binding of named tensors to the weights the forward pass
 * reads, from a GGUF file or a Hugging Face directory. What an architecture looks like is a row
 * of the table in arch.h; this layer reads the row, finds the tensors under the format's names,
 * checks their shapes and types, and fills the structures below. Weights are used where the
 * format mapped them (never copied); only tiny 1-D tensors (norms, biases) become f32 copies. */
#ifndef NC_MODEL_H
#define NC_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "format/gguf.h"
#include "model/arch.h"

typedef struct hf_dir hf_dir;

/* A 2-D weight: `rows` outputs of `cols` inputs (y = W x). Stored row by row (row r at
 * data + r * row_bytes; row_bytes may exceed a row's size: a view of every other row of a fused
 * matrix), or, when `transposed`, input by input (element (r, k) at data + k * row_bytes + r * size:
 * Hugging Face's [in][out] expert tensors), which only float types can be. */
typedef struct model_weight {
    const char *name;
    const void *data;
    uint32_t type;
    int32_t rows, cols;
    size_t row_bytes;
    bool transposed;
    const void *ilv;                   /* the rows interleaved for the kernel set (kernels.h,
                                          KERNELS_ILV; model_interleave), or NULL: data stays the
                                          rows as stored, for lookups and the fingerprint */
} model_weight;

typedef struct model_layer {
    bool sliding;                      /* attends to the last swa_window positions only */
    bool rope;                         /* rotary embedding of q and k */
    const float *attn_norm, *attn_post_norm, *ffn_norm, *ffn_post_norm; /* [n_embd], as arch_norms says */
    const float *q_norm, *k_norm;      /* [head_dim] (per head) or [n_head(_kv) * head_dim] (all heads) */
    model_weight wq, wk, wv, wo;       /* wq, wk, wv may be views into one fused matrix */
    const float *bq, *bk, *bv, *bo;    /* biases or NULL */
    const float *sinks;                /* [n_head] attention-sink logits, or NULL */
    model_weight ffn_gate, ffn_up, ffn_down; /* dense FFN; gate and up may be views into one matrix */
    /* mixture of experts (hp.n_expert > 0): router, then n_expert of each expert weight; gate and
     * up come fused (exp_gate_up, outputs laid out as hp.gate_up) when exp_gate is NULL */
    model_weight router;
    const float *router_bias;
    model_weight *exp_gate, *exp_up, *exp_gate_up, *exp_down;
    const float *exp_gate_b, *exp_up_b, *exp_gate_up_b, *exp_down_b; /* [n_expert][rows], or NULL */
} model_layer;

typedef enum rope_kind { ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3, ROPE_YARN, ROPE_LONGROPE } rope_kind;

/* Rotary position embedding of one kind of layer: theta_i = base^(-2i/n_rot), reshaped by the
 * scaling kind (see model_rope_freqs). */
typedef struct model_rope {
    double base;
    rope_kind kind;
    double factor;                     /* LINEAR, LLAMA3, YARN; LONGROPE: max / original context */
    double orig_ctx;                   /* LLAMA3, YARN, LONGROPE */
    double low_freq_factor, high_freq_factor; /* LLAMA3 */
    double beta_fast, beta_slow;       /* YARN */
    bool exact_range;                  /* YARN: do not round the correction range */
    double attn_factor;                /* YARN, LONGROPE: cos and sin multiplier (0: the paper's) */
    const float *freq_factors;         /* per-frequency divisors [n_rot/2] (GGUF rope_freqs, LongRoPE's
                                          short factors), or NULL */
    const float *long_factors;         /* LongRoPE: the divisors for contexts beyond orig_ctx */
} model_rope;

typedef struct model_hparams {
    const arch_desc *arch;
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_rot, n_ctx_train;
    int32_t n_expert, n_expert_used, n_ff_exp;
    bool expert_norm;                  /* renormalise the chosen experts' weights to sum to 1 */
    arch_gate_up gate_up;              /* layout of fused expert gate/up outputs */
    float norm_eps;
    bool rope_neox;                    /* rotate halves (i, i + n_rot/2), else pairs (2i, 2i + 1) */
    model_rope rope[2];                /* [0] full-attention layers, [1] sliding layers */
    int32_t swa_window;                /* sliding layers see positions p - window < q <= p; 0: none */
    float attn_scale;                  /* multiplies q.k (1/sqrt(head_dim) unless the model says) */
    float attn_softcap, final_softcap; /* cap * tanh(x / cap) of attention scores / logits; 0: off */
    float embd_scale, residual_scale, logit_scale; /* multipliers (1: none) */
} model_hparams;

typedef struct model {
    gguf_file *file;                   /* the source: a GGUF file, or a Hugging Face directory */
    hf_dir *hf;
    void *source;                      /* the one of them that is set, closed by model_free */
    void (*close)(void *source);
    model_hparams hp;
    char name[128];
    model_weight tok_embd, output;     /* output aliases tok_embd when tied */
    const float *output_norm;
    model_layer *layers;
    void **owned;                      /* f32 copies and arrays made at load */
    int n_owned;
    uint64_t n_params, weight_bytes;
} model;

/* Bind the tensors of an open GGUF file / Hugging Face directory (the model keeps it and
 * model_free closes it; on failure the caller still owns it). */
int model_bind(model **out, gguf_file *file, nc_err *err);
int model_bind_hf(model **out, hf_dir *dir, nc_err *err);
void model_free(model *m);

const char *model_arch_name(const model *m);

/* Interleaved copies (model->owned) of the weights the active kernel set multiplies faster that
 * way (kernels_ilv_type: on AVX-512 the Q4_0, Q4_K, Q6_K, MXFP4 and Q8_0 matrices), then the
 * file's pages of those weights dropped from the mapping, so memory holds them once. Where the
 * copies cannot be allocated the weights stay as they are. NUCLEUS_REPACK=0 turns it off
 * (processes then share the file's pages, without the interleaved kernels' speed-up). Returns the
 * bytes allocated. */
uint64_t model_interleave(model *m);

/* A hash of the architecture, every hyper-parameter, the norms, and every weight's type, shape
 * and a sample of its bytes (model/fingerprint.c): what a saved KV cache records so that only
 * this model loads it. */
uint64_t model_fingerprint(const model *m);

/* The inverse frequencies theta_i (i < n_rot/2) of a rope for a context of n_ctx positions, and
 * the factor its cos and sin are multiplied by, computed in double as transformers'
 * modeling_rope_utils defines each kind. */
double model_rope_freqs(const model_rope *r, int n_rot, int n_ctx, double *inv_freq);

#endif
