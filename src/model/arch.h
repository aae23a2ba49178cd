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
#include <stdint.h>

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

/* The gated FFN's activation: act(gate) * up; an MLP's: act(up). */
typedef enum arch_act {
    ACT_SILU,       /* SwiGLU: silu(g) * u */
    ACT_GELU_TANH,  /* GeGLU with the tanh approximation of GELU (Gemma) */
    ACT_SWIGLU_OAI, /* gpt-oss: g = min(g, 7), u = clamp(u, -7, 7), g * sigmoid(1.702 g) * (u + 1) */
    ACT_RELU2,      /* an MLP's relu(x)^2 (Nemotron-H; So et al. 2021, Primer) */
} arch_act;

/* What mixes a layer's tokens (the attention's place in a transformer layer). Attention keeps a
 * growing cache of keys and values; the recurrent kinds carry a fixed-size state per sequence. */
typedef enum layer_mixer {
    MIXER_ATTENTION, /* softmax attention over the KV cache */
    MIXER_NONE,      /* a layer of its feed-forward network alone (Nemotron-H's MLP layers) */
    MIXER_MLA,       /* multi-head latent attention, caching a compressed latent (DeepSeek-V2) */
    MIXER_DELTANET,  /* gated DeltaNet (Yang et al. 2024; Qwen3.5) */
    MIXER_MAMBA2,    /* Mamba2's selective state space (Dao & Gu 2024; Granite 4.0-H, Nemotron-H) */
    MIXER_SHORTCONV, /* a gated short convolution (LFM2) */
} layer_mixer;

/* The layer's feed-forward network. */
typedef enum layer_ffn {
    FFN_NONE,        /* none (Nemotron-H's mixer layers) */
    FFN_GATED,       /* act(gate x) * up x, then down (SwiGLU, GeGLU) */
    FFN_MLP,         /* down(act(up x)), no gate (Nemotron-H: relu^2) */
    FFN_MOE,         /* a mixture of experts (with shared experts, or a dense FFN beside it) */
} layer_ffn;

/* How a model's layers take their kinds (model_layer.mixer and .ffn), from the file's per-layer
 * keys. Every layer with a router is a mixture of experts; one without a dense FFN. */
typedef enum arch_layers {
    LAYERS_ATTENTION, /* every layer attends (the row's `attention` kind) */
    LAYERS_INTERVAL,  /* every full_attention_interval-th layer attends, the others are `recurrent` (Qwen3.5) */
    LAYERS_KV_ZERO,   /* layers whose head_count_kv is 0 are `recurrent` (LFM2, Granite 4.0-H) */
    LAYERS_HYBRID,    /* head_count_kv and feed_forward_length both 0: `recurrent`; feed_forward_length 0:
                         attention; otherwise an FFN alone. One residual block per layer (Nemotron-H) */
} arch_layers;

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
    L_EXP_PROBS_B, L_ROUTER_SCALE, L_DOWN_EXPS_SCALE,
    L_SH_GATE, L_SH_UP, L_SH_DOWN, L_SH_GATE_INP,           /* the shared expert */
    /* recurrent mixers (model_ssm) */
    L_SSM_IN, L_SSM_GATE, L_SSM_BETA, L_SSM_ALPHA, L_SSM_CONV, L_SSM_CONV_BIAS, L_SSM_DT, L_SSM_A, L_SSM_D,
    L_SSM_NORM, L_SSM_OUT,
    /* multi-head latent attention (model_mla) */
    L_Q_A, L_Q_A_NORM, L_Q_B, L_KV_A, L_KV_A_NORM, L_K_B, L_V_B,
    /* Gemma 4: the dense FFN beside the experts, per-layer embeddings, the layer's scalar */
    L_FFN_POST_NORM_1, L_FFN_PRE_NORM_2, L_FFN_POST_NORM_2, L_PL_GATE, L_PL_PROJ, L_PL_POST_NORM, L_OUT_SCALE,
    T_PL_EMBD, T_PL_MODEL_PROJ, T_PL_PROJ_NORM,
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
    arch_layers layers;              /* which layers attend, which recur, which have an FFN alone */
    layer_mixer attention;           /* the attending layers' mixer: attention, or latent attention */
    layer_mixer recurrent;           /* the others' (DeltaNet, Mamba2, short convolution) */
    bool q_gate;                     /* attention's query projection holds [q | gate] per head (Qwen3.5) */
    bool v_norm;                     /* values RMS-normalised without weight; no attn_v: V = K's projection (Gemma 4) */
    bool qk_norm_plain;              /* q, k RMS-normalised without weight after the rotation, rotating layers
                                        only (Llama 4) */
    int32_t chunk;                   /* rotating layers attend within chunks of this many positions (Llama 4) */
    bool rope_switch;                /* rope.scaling.finetuned = false turns the rotation off (Granite 4.0-H) */
    bool no_rope;                    /* no layer rotates (Nemotron-H) */
    float attn_scale;                /* q.k's scale when the file gives none (Gemma 4: 1, its q and k normalised); 0: 1/sqrt(head_dim) */
    bool kv_f32;                     /* the KV cache's default type is F32, not F16 (nc_cache_type says why) */
    bool nextn;                      /* the last nextn_predict_layers layers predict further tokens: not run (GLM-4.5) */
    bool expert_weight_input;        /* top-1 sigmoid routing whose weight scales the expert's input (Llama 4) */
    bool yarn_log_mul_tenth;         /* rope.scaling.yarn_log_multiplier is 0.1 x YaRN's mscale_all_dim, and the
                                        attention scale is mscale^2 / sqrt(q/k head size) (DeepSeek-V2/V3) */
    float nope_temperature;          /* layers without rotation scale their queries by the attention temperature,
                                        this scale over positions + 1 in floors of `chunk` (Llama 4); 0: the file's
                                        attention.temperature_scale, every layer, floors of the original context */
    const arch_override *gguf_names;     /* overrides of the default GGUF names, ended by {0, NULL} */
    const arch_override *hf_names;       /* overrides of the default Hugging Face names */
} arch_desc;

/* The row for a GGUF general.architecture value / a config.json model_type, or NULL. */
const arch_desc *arch_by_gguf(const char *name, size_t len);
const arch_desc *arch_by_hf_type(const char *model_type);
/* "llama, qwen2, ..." for messages. */
const char *arch_gguf_list(void);
const char *arch_hf_list(void);
const char *arch_gguf_only_list(void); /* the rows without Hugging Face model types */

/* The name of a role in the format, or NULL when the architecture has no such tensor. */
const char *arch_gguf_name(const arch_desc *a, tensor_role r);
const char *arch_hf_name(const arch_desc *a, tensor_role r);

#endif
