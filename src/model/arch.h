/* Architectures as data. A row per architecture says how its decoder layer is put together
 * (where the RMSNorms sit, q/k norms, rotary style, the FFN's activation, attention extras) and
 * where its hyper-parameters and tensors are found in a GGUF file (llama.cpp's converter names)
 * and in a Hugging Face directory (transformers' names). The forward pass reads the row; adding
 * an architecture is a row here plus the lines that are truly new.
 *
 * Every weight has a role (tensor_role); its GGUF and Hugging Face names come from the default
 * tables in arch.c, overridden per row where an architecture names it differently. Per-layer
 * names carry "%d" for the layer, expert names a second "%d" for the expert. */
#ifndef NC_ARCH_H
#define NC_ARCH_H

#include <stdbool.h>
#include <stddef.h>

/* Where the RMSNorms of a layer sit (h: the residual stream).
 * PRE:      h += attn(norm(h));        h += ffn(norm(h))                    (Llama)
 * SANDWICH: h += norm(attn(norm(h)));  h += norm(ffn(norm(h)))              (Gemma 2/3)
 * POST:     h += norm(attn(h));        h += norm(ffn(h))                    (OLMo 2) */
typedef enum arch_norms { NORMS_PRE, NORMS_SANDWICH, NORMS_POST } arch_norms;

/* RMS norms of the queries and keys after their projections. */
typedef enum arch_qk_norm {
    QK_NORM_NONE,
    QK_NORM_HEAD, /* per head, one weight of head_dim shared by the heads (Qwen3, Gemma 3) */
    QK_NORM_ALL,  /* over all heads at once, a weight of n_head * head_dim (OLMo 2) */
} arch_qk_norm;

/* The gated FFN's activation: act(gate) * up. */
typedef enum arch_act {
    ACT_SILU,      /* SwiGLU: silu(g) * u */
    ACT_GELU_TANH, /* GeGLU with the tanh approximation of GELU (Gemma) */
    ACT_SWIGLU_OAI /* gpt-oss: g = min(g, 7), u = clamp(u, -7, 7), g * sigmoid(1.702 g) * (u + 1) */
} arch_act;

typedef enum tensor_role {
    /* model-wide */
    T_TOK_EMBD, T_OUTPUT, T_OUTPUT_NORM, T_ROPE_FREQS, T_ROPE_LONG, T_ROPE_SHORT,
    /* per layer */
    L_ATTN_NORM, L_ATTN_POST_NORM, L_FFN_NORM, L_FFN_POST_NORM,
    L_Q, L_K, L_V, L_QKV, L_O, L_Q_BIAS, L_K_BIAS, L_V_BIAS, L_O_BIAS, L_Q_NORM, L_K_NORM, L_SINKS,
    L_GATE, L_UP, L_DOWN, L_GATE_UP,
    /* mixture of experts: the router, and the experts as one 3-D tensor per role (GGUF) or one
     * tensor per expert ("%d" twice; Hugging Face); gate and up may come fused (gpt-oss) */
    L_ROUTER, L_ROUTER_BIAS,
    L_GATE_EXPS, L_UP_EXPS, L_DOWN_EXPS, L_GATE_UP_EXPS,
    L_GATE_EXPS_BIAS, L_UP_EXPS_BIAS, L_DOWN_EXPS_BIAS, L_GATE_UP_EXPS_BIAS,
    N_ROLES
} tensor_role;

typedef struct arch_override {
    tensor_role role;
    const char *name;
} arch_override;

/* How a fused gate/up weight's outputs are laid out. */
typedef enum arch_gate_up {
    GATE_UP_CONCAT,     /* gate rows, then up rows (Phi-3) */
    GATE_UP_INTERLEAVED /* gate and up alternate (gpt-oss checkpoints) */
} arch_gate_up;

typedef struct arch_desc {
    const char *name;                /* ours, for messages and nc_model_info */
    const char *gguf;                /* general.architecture, or NULL (reached through hf types only) */
    const char *const *hf_types;     /* config.json model_type values, NULL-terminated */
    arch_norms norms;
    arch_qk_norm qk_norm;
    arch_act act;
    bool gguf_rope_pairs;            /* GGUF rotates pairs (2i, 2i+1): llama.cpp's converter permuted
                                        q/k rows; otherwise, and always for Hugging Face, halves (i, i + n/2) */
    bool qkv_bias;                   /* Q/K/V biases required (Qwen2) */
    bool attn_bias;                  /* Q/K/V and output biases required (gpt-oss) */
    bool sinks;                      /* a learned attention-sink logit per head (gpt-oss) */
    bool embd_scale_sqrt;            /* embeddings times sqrt(n_embd) (Gemma) */
    bool hf_norm_plus_one;           /* HF stores RMSNorm weights as w and computes (1 + w); GGUF stores 1 + w */
    bool expert_bias;                /* experts and router have biases (gpt-oss) */
    bool router_softmax_topk;        /* router: top-k of the logits, softmax over those (gpt-oss);
                                        otherwise softmax over all experts, then top-k (renormalised
                                        when the model says so) */
    arch_gate_up hf_gate_up;         /* layout of a fused gate/up in the HF checkpoint */
    bool hf_experts_transposed;      /* HF expert matrices stored [expert][in][out] (gpt-oss) */
    int swa_period;                  /* GGUF files without layer types: layer il slides unless
                                        (il + 1) % swa_period == 0 (0: no sliding layers) */
    int no_rope_period;              /* layer il has no rotary embedding when (il + 1) % it == 0 (SmolLM3; GGUF) */
    int gguf_wide_query_layers;      /* GGUF: with this many layers (Gemma's 27B models), q.k is scaled by
                                        1/sqrt(n_embd / n_head), the query_pre_attn_scalar the file omits */
    bool yarn_exact_range;           /* YaRN's correction range is not rounded to whole dimensions
                                        (gpt-oss: "truncate": false; GGUF files do not say) */
    const arch_override *gguf_names;     /* overrides of the default GGUF names, ended by {0, NULL} */
    const arch_override *hf_names;       /* overrides of the default Hugging Face names */
} arch_desc;

/* The row for a GGUF general.architecture value / a config.json model_type, or NULL. */
const arch_desc *arch_by_gguf(const char *name, size_t len);
const arch_desc *arch_by_hf_type(const char *model_type);
/* "llama, qwen2, ..." for messages. */
const char *arch_gguf_list(void);
const char *arch_hf_list(void);

/* The name of a role in the format, or NULL when the architecture has no such tensor. */
const char *arch_gguf_name(const arch_desc *a, tensor_role r);
const char *arch_hf_name(const arch_desc *a, tensor_role r);

#endif
