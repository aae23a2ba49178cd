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
#include "format/gguf_split.h"
#include "model/arch.h"

typedef struct hf_dir hf_dir;

/* A 2-D weight: `rows` outputs of `cols` inputs (y = W x). Stored row by row (row r at
 * data + r * row_bytes; row_bytes may exceed a row's size: a view of every other row of a fused
 * matrix), or, when `transposed`, input by input (element (r, k) at data + k * row_bytes + r * size:
 * Hugging Face's [in][out] expert tensors), which only float types can be. */
/* One LoRA adapter's pair for a weight (model/lora.c): its product w x gains scale * b (a x); a
 * [rank][cols] and b's row r at b + r * ldb (rank floats), then the next adapter's pair. */
typedef struct model_lora {
    const float *a, *b;
    int32_t ldb, rank;
    float scale;
    const struct model_lora *next;
} model_lora;

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
    const model_lora *lora;            /* the adapters' pairs for it, or NULL */
} model_weight;

/* A recurrent mixer's weights (DeltaNet, Mamba2, short convolution): an input projection whose
 * channels a causal depthwise convolution of `conv_k` taps mixes over time, the recurrence's
 * parameters, a gated norm and the output projection. */
typedef struct model_ssm {
    model_weight in;                   /* DeltaNet: q, k, v; Mamba2: z, x, B, C, dt; short conv: B, C, x */
    model_weight gate;                 /* DeltaNet: z, the output gate */
    model_weight beta, alpha;          /* DeltaNet: the write strength and the decay's input, per value head */
    model_weight out;
    const float *conv;                 /* [channels][conv_k] taps, the last one the current token's */
    const float *conv_bias;            /* [channels] (Mamba2) or NULL */
    const float *dt_bias, *a, *d;      /* per head: the time step's bias, A (as stored: negative), D (Mamba2) */
    const float *norm;                 /* the gated RMS norm's weight (a group's, or every channel's) */
    int32_t channels;                  /* of the convolution */
} model_ssm;

/* Multi-head latent attention (DeepSeek-V2, Liu et al. 2024), in its absorbed form: the cache
 * holds per token one row [latent | rotated key part]; each query head's non-rotated part is
 * taken into the latent space through k_b, and each head's output out of it through v_b. */
typedef struct model_mla {
    model_weight q_a, q_b, kv_a;       /* q_a absent: wq projects the queries at once */
    const float *q_a_norm, *kv_a_norm;
    model_weight *k_b, *v_b;           /* [n_head]: k_b latent x nope, v_b v_dim x latent */
} model_mla;

typedef struct model_layer {
    layer_mixer mixer;
    layer_ffn ffn;
    /* attention's shape in this layer (per layer: Gemma 4's, Granite 4.0-H's differ) */
    int32_t n_head, n_head_kv, head_dim, head_dim_v, n_rot, n_ff;
    int8_t rope_table;                 /* which of hp.rope (0 full layers, 1 sliding), -1: no rotation */
    int32_t kv_layer;                  /* the layer whose cache it attends to: itself, or an earlier one
                                          (Gemma 4's last layers share the cache of the last to have one) */
    bool sliding;                      /* attends to the last swa_window positions only */
    bool rope;                         /* rotary embedding of q and k */
    bool q_gate;                       /* the query projection holds per head [q | gate]: the output of
                                          the head is multiplied by sigmoid(gate) (Qwen3.5) */
    bool v_norm;                       /* values RMS-normalised without weight (Gemma 4) */
    bool qk_norm_plain;                /* q and k RMS-normalised without weight after the rotation (Llama 4) */
    bool temperature;                  /* queries scaled by the attention temperature (Llama 4, Mistral 3) */
    int32_t chunk;                     /* attends within its chunk of this many positions (Llama 4); 0: no */
    const float *attn_norm, *attn_post_norm, *ffn_norm, *ffn_post_norm; /* [n_embd], as arch_norms says */
    const float *q_norm, *k_norm;      /* [head_dim] (per head) or [n_head(_kv) * head_dim] (all heads) */
    model_weight wq, wk, wv, wo;       /* wq, wk, wv may be views into one fused matrix; wv may be wk */
    const float *bq, *bk, *bv, *bo;    /* biases or NULL */
    const float *sinks;                /* [n_head] attention-sink logits, or NULL */
    model_ssm ssm;
    model_mla mla;
    model_weight ffn_gate, ffn_up, ffn_down; /* dense FFN; gate and up may be views into one matrix */
    /* mixture of experts (hp.n_expert > 0): router, then n_expert of each expert weight; gate and
     * up come fused (exp_gate_up, outputs laid out as hp.gate_up) when exp_gate is NULL */
    model_weight router;
    const float *router_bias;
    const float *exp_probs_b;          /* [n_expert] a bias of the selection only (DeepSeek-V3, GLM-4.5) */
    const float *router_scale;         /* [n_embd] the router's input is RMSNorm(x) / sqrt(n_embd) * this (Gemma 4) */
    model_weight *exp_gate, *exp_up, *exp_gate_up, *exp_down;
    const float *exp_gate_b, *exp_up_b, *exp_gate_up_b, *exp_down_b; /* [n_expert][rows], or NULL */
    const float *exp_down_scale;       /* [n_expert] each expert's output scale (Gemma 4), or NULL */
    model_weight sh_gate, sh_up, sh_down; /* a shared expert (run on every token), or none */
    const float *sh_gate_inp;          /* [n_embd]: the shared expert scaled by sigmoid(this . x) (Qwen3.5), or NULL */
    /* Gemma 4: a dense FFN beside the experts, each with its own norms, summed before ffn_post_norm */
    const float *ffn_post_norm_1, *ffn_pre_norm_2, *ffn_post_norm_2;
    /* Gemma 4's per-layer embeddings: x += post_norm(proj(gelu(inp_gate x) * this layer's input)) */
    model_weight pl_gate, pl_proj;
    const float *pl_post_norm;
    float out_scale;                   /* the layer's output times this (Gemma 4's layer scalar; 1: none) */
} model_layer;

typedef enum rope_kind { ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3, ROPE_YARN, ROPE_LONGROPE } rope_kind;

/* Rotary position embedding of one kind of layer: theta_i = base^(-2i/n_rot), reshaped by the
 * scaling kind (see model_rope_freqs). */
typedef struct model_rope {
    int32_t n_rot;                     /* dimensions rotated (the first of each head) */
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

/* How a mixture chooses its experts: softmax or sigmoid of the router's logits, the best k
 * (DeepSeek-V3: a selection bias, then only the best groups' experts), their weights taken from
 * the unbiased scores, renormalised and scaled as the model says. */
typedef enum expert_gating { GATING_SOFTMAX, GATING_SIGMOID } expert_gating;

typedef struct model_hparams {
    const arch_desc *arch;
    /* the widest of each per-layer quantity (model_layer has each layer's) */
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_rot, n_ctx_train;
    int32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    bool expert_norm;                  /* renormalise the chosen experts' weights to sum to 1 */
    expert_gating gating;
    int32_t n_group, n_group_used;     /* expert groups, and how many keep their experts (0: no groups) */
    float expert_scale;                /* the chosen experts' weights times this (1: none) */
    bool expert_weight_input;          /* the weight scales an expert's input, not its output (Llama 4) */
    /* the recurrent mixers: conv taps, Mamba2's d_state / DeltaNet's key head size, groups (DeltaNet's
     * key heads), inner size (value heads x value head size), heads (DeltaNet: value heads) */
    int32_t ssm_conv, ssm_state, ssm_groups, ssm_inner, ssm_heads;
    int32_t mla_q_lora, mla_kv_lora, mla_nope, mla_v;  /* multi-head latent attention's widths */
    int32_t n_embd_per_layer;          /* Gemma 4's per-layer embeddings (0: none) */
    float temperature_scale;           /* attention temperature: q * (1 + scale ln(1 + floor((pos + offset) / floor))) */
    float temperature_floor, temperature_offset;
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
    gguf_file *file;                   /* the source: a GGUF file (a split's first part), or a Hugging Face directory */
    hf_dir *hf;
    uint64_t file_bytes;               /* of the source's files */
    void *source;                      /* the one of them that is set, closed by model_free */
    void (*close)(void *source);
    model_hparams hp;
    char name[128];
    model_weight tok_embd, output;     /* output aliases tok_embd when tied */
    const float *output_norm;
    model_weight pl_embd, pl_model_proj; /* Gemma 4's per-layer embeddings: a table and a projection of x */
    const float *pl_proj_norm;
    model_layer *layers;
    void **owned;                      /* f32 copies and arrays made at load */
    int n_owned;
    uint64_t n_params, weight_bytes;
    int32_t n_lora;                    /* LoRA adapters applied (model_add_lora) */
    int32_t lora_rank;                 /* the largest sum of their ranks over one layer's weights */
} model;

/* Bind the tensors of an open GGUF file / Hugging Face directory (the model keeps it and
 * model_free closes it; on failure the caller still owns it). */
int model_bind(model **out, gguf_file *file, nc_err *err);
/* A GGUF split into parts (format/gguf_split.h): the metadata of `first`, its first part, the
 * tensors of all (the model keeps the split and closes it). */
int model_bind_split(model **out, gguf_split *split, gguf_file *first, nc_err *err);
int model_bind_hf(model **out, hf_dir *dir, nc_err *err);
void model_free(model *m);

const char *model_arch_name(const model *m);

/* A line naming layer il's kinds and shape ("gated DeltaNet, 32 value heads of 128, ... | gated
 * FFN 9216"), into buf. */
const char *model_layer_kind(const model *m, int il, char *buf, size_t n);

/* Every 2-D weight of a layer but its experts (MODEL_LAYER_WEIGHTS at most, plus 2 n_head of
 * latent attention's per-head matrices), each once, into out: returns the count. */
#define MODEL_LAYER_WEIGHTS 21
int model_layer_weights(const model_layer *L, const model_weight **out);

/* Apply the LoRA adapter of a GGUF file (llama.cpp's adapter form) to the weights it names, with
 * the user's scale (times its alpha / rank); the model is unchanged when it fails, naming the
 * key or tensor. Adapters add up. Before any context runs the model. */
int model_add_lora(model *m, const char *path, float scale, nc_err *err);
/* The same from an open adapter file (path names it in messages); the file stays the caller's. */
int model_add_lora_file(model *m, const gguf_file *f, const char *path, float scale, nc_err *err);

/* Interleaved copies (model->owned) of the weights the active kernel set multiplies faster that
 * way (kernels_ilv_type: on AVX-512 the Q4_0, Q4_K, Q6_K, MXFP4 and Q8_0 matrices, on AVX2 and
 * AVX-VNNI Q2_K, Q3_K, Q5_K, Q4_1, Q5_0, Q5_1 and IQ4_NL too), then the file's pages of those
 * weights dropped from the mapping, so memory holds them once. Where the copies cannot be
 * allocated the weights stay as they are.
 * NUCLEUS_REPACK=0 turns it off (processes then share the file's pages, without the interleaved
 * kernels' speed-up). Returns the bytes allocated. */
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
