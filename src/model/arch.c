/* The architecture table (see arch.h). */
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

/* Default names of every role: GGUF as llama.cpp's converter writes them, Hugging Face as
 * transformers saves a Llama-family checkpoint. NULL: not present unless a row names it. */
static const char *const gguf_default[N_ROLES] = {
    [T_TOK_EMBD] = "token_embd.weight",
    [T_OUTPUT] = "output.weight",
    [T_OUTPUT_NORM] = "output_norm.weight",
    [T_ROPE_FREQS] = "rope_freqs.weight",
    [T_ROPE_LONG] = "rope_factors_long.weight",
    [T_ROPE_SHORT] = "rope_factors_short.weight",
    [L_ATTN_NORM] = "blk.%d.attn_norm.weight",
    [L_ATTN_POST_NORM] = "blk.%d.post_attention_norm.weight",
    [L_FFN_NORM] = "blk.%d.ffn_norm.weight",
    [L_FFN_POST_NORM] = "blk.%d.post_ffw_norm.weight",
    [L_Q] = "blk.%d.attn_q.weight",
    [L_K] = "blk.%d.attn_k.weight",
    [L_V] = "blk.%d.attn_v.weight",
    [L_QKV] = "blk.%d.attn_qkv.weight",
    [L_O] = "blk.%d.attn_output.weight",
    [L_Q_BIAS] = "blk.%d.attn_q.bias",
    [L_K_BIAS] = "blk.%d.attn_k.bias",
    [L_V_BIAS] = "blk.%d.attn_v.bias",
    [L_O_BIAS] = "blk.%d.attn_output.bias",
    [L_Q_NORM] = "blk.%d.attn_q_norm.weight",
    [L_K_NORM] = "blk.%d.attn_k_norm.weight",
    [L_SINKS] = "blk.%d.attn_sinks.weight",
    [L_GATE] = "blk.%d.ffn_gate.weight",
    [L_UP] = "blk.%d.ffn_up.weight",
    [L_DOWN] = "blk.%d.ffn_down.weight",
    [L_ROUTER] = "blk.%d.ffn_gate_inp.weight",
    [L_ROUTER_BIAS] = "blk.%d.ffn_gate_inp.bias",
    [L_GATE_EXPS] = "blk.%d.ffn_gate_exps.weight",
    [L_UP_EXPS] = "blk.%d.ffn_up_exps.weight",
    [L_DOWN_EXPS] = "blk.%d.ffn_down_exps.weight",
    [L_GATE_UP_EXPS] = "blk.%d.ffn_gate_up_exps.weight",
    [L_GATE_EXPS_BIAS] = "blk.%d.ffn_gate_exps.bias",
    [L_UP_EXPS_BIAS] = "blk.%d.ffn_up_exps.bias",
    [L_DOWN_EXPS_BIAS] = "blk.%d.ffn_down_exps.bias",
    [L_EXP_PROBS_B] = "blk.%d.exp_probs_b.bias",
    [L_ROUTER_SCALE] = "blk.%d.ffn_gate_inp.scale",
    [L_DOWN_EXPS_SCALE] = "blk.%d.ffn_down_exps.scale",
    [L_SH_GATE] = "blk.%d.ffn_gate_shexp.weight",
    [L_SH_UP] = "blk.%d.ffn_up_shexp.weight",
    [L_SH_DOWN] = "blk.%d.ffn_down_shexp.weight",
    [L_SH_GATE_INP] = "blk.%d.ffn_gate_inp_shexp.weight",
    [L_SSM_IN] = "blk.%d.ssm_in.weight",
    [L_SSM_BETA] = "blk.%d.ssm_beta.weight",
    [L_SSM_ALPHA] = "blk.%d.ssm_alpha.weight",
    [L_SSM_CONV] = "blk.%d.ssm_conv1d.weight",
    [L_SSM_CONV_BIAS] = "blk.%d.ssm_conv1d.bias",
    [L_SSM_DT] = "blk.%d.ssm_dt.bias",
    [L_SSM_A] = "blk.%d.ssm_a",
    [L_SSM_D] = "blk.%d.ssm_d",
    [L_SSM_NORM] = "blk.%d.ssm_norm.weight",
    [L_SSM_OUT] = "blk.%d.ssm_out.weight",
    [L_Q_A] = "blk.%d.attn_q_a.weight",
    [L_Q_A_NORM] = "blk.%d.attn_q_a_norm.weight",
    [L_Q_B] = "blk.%d.attn_q_b.weight",
    [L_KV_A] = "blk.%d.attn_kv_a_mqa.weight",
    [L_KV_A_NORM] = "blk.%d.attn_kv_a_norm.weight",
    [L_K_B] = "blk.%d.attn_k_b.weight",
    [L_V_B] = "blk.%d.attn_v_b.weight",
    [L_FFN_POST_NORM_1] = "blk.%d.post_ffw_norm_1.weight",
    [L_FFN_PRE_NORM_2] = "blk.%d.pre_ffw_norm_2.weight",
    [L_FFN_POST_NORM_2] = "blk.%d.post_ffw_norm_2.weight",
    [L_PL_GATE] = "blk.%d.inp_gate.weight",
    [L_PL_PROJ] = "blk.%d.proj.weight",
    [L_PL_POST_NORM] = "blk.%d.post_norm.weight",
    [L_OUT_SCALE] = "blk.%d.layer_output_scale.weight",
    [T_PL_EMBD] = "per_layer_token_embd.weight",
    [T_PL_MODEL_PROJ] = "per_layer_model_proj.weight",
    [T_PL_PROJ_NORM] = "per_layer_proj_norm.weight",
};

static const char *const hf_default[N_ROLES] = {
    [T_TOK_EMBD] = "model.embed_tokens.weight",
    [T_OUTPUT] = "lm_head.weight",
    [T_OUTPUT_NORM] = "model.norm.weight",
    [L_ATTN_NORM] = "model.layers.%d.input_layernorm.weight",
    [L_FFN_NORM] = "model.layers.%d.post_attention_layernorm.weight",
    [L_Q] = "model.layers.%d.self_attn.q_proj.weight",
    [L_K] = "model.layers.%d.self_attn.k_proj.weight",
    [L_V] = "model.layers.%d.self_attn.v_proj.weight",
    [L_O] = "model.layers.%d.self_attn.o_proj.weight",
    [L_Q_BIAS] = "model.layers.%d.self_attn.q_proj.bias",
    [L_K_BIAS] = "model.layers.%d.self_attn.k_proj.bias",
    [L_V_BIAS] = "model.layers.%d.self_attn.v_proj.bias",
    [L_O_BIAS] = "model.layers.%d.self_attn.o_proj.bias",
    [L_Q_NORM] = "model.layers.%d.self_attn.q_norm.weight",
    [L_K_NORM] = "model.layers.%d.self_attn.k_norm.weight",
    [L_SINKS] = "model.layers.%d.self_attn.sinks",
    [L_GATE] = "model.layers.%d.mlp.gate_proj.weight",
    [L_UP] = "model.layers.%d.mlp.up_proj.weight",
    [L_DOWN] = "model.layers.%d.mlp.down_proj.weight",
    [L_ROUTER] = "model.layers.%d.mlp.gate.weight",
    [L_GATE_EXPS] = "model.layers.%d.mlp.experts.%d.gate_proj.weight",
    [L_UP_EXPS] = "model.layers.%d.mlp.experts.%d.up_proj.weight",
    [L_DOWN_EXPS] = "model.layers.%d.mlp.experts.%d.down_proj.weight",
};

/* Gemma 2/3: norms before and after both blocks. */
static const arch_override gemma_hf[] = {
    {L_ATTN_POST_NORM, "model.layers.%d.post_attention_layernorm.weight"},
    {L_FFN_NORM, "model.layers.%d.pre_feedforward_layernorm.weight"},
    {L_FFN_POST_NORM, "model.layers.%d.post_feedforward_layernorm.weight"},
    {0, NULL},
};

/* OLMo 2: norms after the blocks only (post_attention_layernorm is no pre-FFN norm here). */
static const arch_override olmo2_hf[] = {
    {L_FFN_NORM, NULL},
    {L_ATTN_POST_NORM, "model.layers.%d.post_attention_layernorm.weight"},
    {L_FFN_POST_NORM, "model.layers.%d.post_feedforward_layernorm.weight"},
    {0, NULL},
};

/* Phi-3: Q/K/V in one matrix, gate and up in one matrix (gate rows first). */
static const arch_override phi3_gguf[] = {
    {L_GATE_UP, "blk.%d.ffn_up.weight"},
    {L_GATE, NULL},
    {L_UP, NULL},
    {0, NULL},
};
static const arch_override phi3_hf[] = {
    {L_QKV, "model.layers.%d.self_attn.qkv_proj.weight"},
    {L_GATE_UP, "model.layers.%d.mlp.gate_up_proj.weight"},
    {0, NULL},
};

static const arch_override mixtral_hf[] = {
    {L_ROUTER, "model.layers.%d.block_sparse_moe.gate.weight"},
    {L_GATE_EXPS, "model.layers.%d.block_sparse_moe.experts.%d.w1.weight"},
    {L_UP_EXPS, "model.layers.%d.block_sparse_moe.experts.%d.w3.weight"},
    {L_DOWN_EXPS, "model.layers.%d.block_sparse_moe.experts.%d.w2.weight"},
    {0, NULL},
};

/* gpt-oss: llama.cpp's converter names the norm before the FFN post_attention_norm; the
 * checkpoints hold gate and up interleaved in one matrix per layer for all experts. */
static const arch_override gptoss_gguf[] = {
    {L_FFN_NORM, "blk.%d.post_attention_norm.weight"},
    {0, NULL},
};
static const arch_override gptoss_hf[] = {
    {L_ROUTER, "model.layers.%d.mlp.router.weight"},
    {L_ROUTER_BIAS, "model.layers.%d.mlp.router.bias"},
    {L_GATE_EXPS, NULL},
    {L_UP_EXPS, NULL},
    {L_GATE_UP_EXPS, "model.layers.%d.mlp.experts.gate_up_proj"},
    {L_GATE_UP_EXPS_BIAS, "model.layers.%d.mlp.experts.gate_up_proj_bias"},
    {L_DOWN_EXPS, "model.layers.%d.mlp.experts.down_proj"},
    {L_DOWN_EXPS_BIAS, "model.layers.%d.mlp.experts.down_proj_bias"},
    {0, NULL},
};

/* Qwen3.5: post_attention_norm is the norm before the FFN; the DeltaNet layers' q, k, v in one
 * projection, their output gate z in another. */
static const arch_override qwen35_gguf[] = {
    {L_FFN_NORM, "blk.%d.post_attention_norm.weight"},
    {L_SSM_IN, "blk.%d.attn_qkv.weight"},
    {L_SSM_GATE, "blk.%d.attn_gate.weight"},
    {0, NULL},
};

/* GLM-4.5: post_attention_norm is the norm before the FFN. */
static const arch_override glm4moe_gguf[] = {
    {L_FFN_NORM, "blk.%d.post_attention_norm.weight"},
    {0, NULL},
};

/* LFM2: the short convolutions' projections; the final norm is named token_embd_norm. */
static const arch_override lfm2_gguf[] = {
    {T_OUTPUT_NORM, "token_embd_norm.weight"},
    {L_SSM_IN, "blk.%d.shortconv.in_proj.weight"},
    {L_SSM_CONV, "blk.%d.shortconv.conv.weight"},
    {L_SSM_OUT, "blk.%d.shortconv.out_proj.weight"},
    {0, NULL},
};

#define TYPES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NO_HF ((const char *const[]){NULL}) /* read from GGUF files only */

static const arch_desc table[] = {
    {.name = "llama", .gguf = "llama", .hf_types = TYPES("llama", "mistral"), .norms = NORMS_PRE,
     .gguf_rope_pairs = true},
    {.name = "mixtral", .hf_types = TYPES("mixtral"), .norms = NORMS_PRE, .gguf_rope_pairs = true,
     .hf_names = mixtral_hf},
    {.name = "granite", .gguf = "granite", .hf_types = TYPES("granite"), .norms = NORMS_PRE, .gguf_rope_pairs = true},
    {.name = "smollm3", .gguf = "smollm3", .hf_types = TYPES("smollm3"), .norms = NORMS_PRE, .gguf_rope_pairs = true,
     .no_rope_period = 4},
    {.name = "qwen2", .gguf = "qwen2", .hf_types = TYPES("qwen2"), .norms = NORMS_PRE, .qkv_bias = true},
    {.name = "qwen3", .gguf = "qwen3", .hf_types = TYPES("qwen3"), .norms = NORMS_PRE, .qk_norm = QK_NORM_HEAD},
    {.name = "qwen3moe", .gguf = "qwen3moe", .hf_types = TYPES("qwen3_moe"), .norms = NORMS_PRE,
     .qk_norm = QK_NORM_HEAD},
    {.name = "gemma2", .gguf = "gemma2", .hf_types = TYPES("gemma2"), .norms = NORMS_SANDWICH, .act = ACT_GELU_TANH,
     .embd_scale_sqrt = true, .hf_norm_plus_one = true, .swa_period = 2, .gguf_wide_query_layers = 46,
     .hf_names = gemma_hf},
    {.name = "gemma3", .gguf = "gemma3", .hf_types = TYPES("gemma3_text"), .norms = NORMS_SANDWICH,
     .qk_norm = QK_NORM_HEAD, .act = ACT_GELU_TANH, .embd_scale_sqrt = true, .hf_norm_plus_one = true,
     .swa_period = 6, .gguf_wide_query_layers = 62, .hf_names = gemma_hf},
    {.name = "phi3", .gguf = "phi3", .hf_types = TYPES("phi3"), .norms = NORMS_PRE, .hf_gate_up = GATE_UP_CONCAT,
     .gguf_names = phi3_gguf, .hf_names = phi3_hf},
    {.name = "olmo2", .gguf = "olmo2", .hf_types = TYPES("olmo2"), .norms = NORMS_POST, .qk_norm = QK_NORM_ALL,
     .hf_names = olmo2_hf},
    {.name = "gpt-oss", .gguf = "gpt-oss", .hf_types = TYPES("gpt_oss"), .norms = NORMS_PRE, .act = ACT_SWIGLU_OAI,
     .attn_bias = true, .sinks = true, .expert_bias = true, .router_softmax_topk = true,
     .hf_gate_up = GATE_UP_INTERLEAVED, .hf_experts_transposed = true, .swa_period = 2, .yarn_exact_range = true,
     .gguf_names = gptoss_gguf, .hf_names = gptoss_hf},
    /* the families of 2026 (GGUF, as llama.cpp's converter writes them) */
    {.name = "qwen35", .gguf = "qwen35", .hf_types = NO_HF, .norms = NORMS_PRE, .qk_norm = QK_NORM_HEAD,
     .layers = LAYERS_INTERVAL, .recurrent = MIXER_DELTANET, .q_gate = true, .gguf_names = qwen35_gguf},
    {.name = "qwen35moe", .gguf = "qwen35moe", .hf_types = NO_HF, .norms = NORMS_PRE, .qk_norm = QK_NORM_HEAD,
     .layers = LAYERS_INTERVAL, .recurrent = MIXER_DELTANET, .q_gate = true, .gguf_names = qwen35_gguf},
    {.name = "gemma4", .gguf = "gemma4", .hf_types = NO_HF, .norms = NORMS_SANDWICH, .qk_norm = QK_NORM_HEAD,
     .act = ACT_GELU_TANH, .embd_scale_sqrt = true, .v_norm = true, .attn_scale = 1.0f, .kv_f32 = true},
    {.name = "granitehybrid", .gguf = "granitehybrid", .hf_types = NO_HF, .norms = NORMS_PRE, .gguf_rope_pairs = true,
     .layers = LAYERS_KV_ZERO, .recurrent = MIXER_MAMBA2, .rope_switch = true},
    {.name = "nemotron_h", .gguf = "nemotron_h", .hf_types = NO_HF, .norms = NORMS_PRE, .act = ACT_RELU2,
     .layers = LAYERS_HYBRID, .recurrent = MIXER_MAMBA2, .no_rope = true},
    {.name = "lfm2", .gguf = "lfm2", .hf_types = NO_HF, .norms = NORMS_PRE, .qk_norm = QK_NORM_HEAD,
     .layers = LAYERS_KV_ZERO, .recurrent = MIXER_SHORTCONV, .gguf_names = lfm2_gguf},
    {.name = "deepseek2", .gguf = "deepseek2", .hf_types = NO_HF, .norms = NORMS_PRE, .gguf_rope_pairs = true,
     .attention = MIXER_MLA, .yarn_log_mul_tenth = true},
    {.name = "glm4moe", .gguf = "glm4moe", .hf_types = NO_HF, .norms = NORMS_PRE, .qk_norm = QK_NORM_HEAD,
     .qkv_bias = true, .nextn = true, .gguf_names = glm4moe_gguf},
    {.name = "mistral3", .gguf = "mistral3", .hf_types = NO_HF, .norms = NORMS_PRE, .gguf_rope_pairs = true},
    {.name = "llama4", .gguf = "llama4", .hf_types = NO_HF, .norms = NORMS_PRE, .gguf_rope_pairs = true,
     .no_rope_period = 4, .qk_norm_plain = true, .chunk = 8192, .nope_temperature = 0.1f, .expert_weight_input = true},
};

#define N_ARCHS (sizeof table / sizeof table[0])

const arch_desc *arch_by_gguf(const char *name, size_t len) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (table[i].gguf && strlen(table[i].gguf) == len && memcmp(table[i].gguf, name, len) == 0) return &table[i];
    return NULL;
}

const arch_desc *arch_by_hf_type(const char *model_type) {
    for (size_t i = 0; i < N_ARCHS; i++)
        for (const char *const *t = table[i].hf_types; *t; t++)
            if (strcmp(*t, model_type) == 0) return &table[i];
    return NULL;
}

enum { LIST_GGUF, LIST_HF, LIST_GGUF_ONLY };
static const char *list(int which) {
    static _Thread_local char buf[3][512];
    char *b = buf[which];
    size_t n = 0;
    for (size_t i = 0; i < N_ARCHS; i++) {
        const char *const *names = which == LIST_HF ? table[i].hf_types : (const char *const[]){table[i].gguf, NULL};
        if (which == LIST_GGUF_ONLY && *table[i].hf_types) continue;
        for (const char *const *t = names; *t; t++) n += (size_t)snprintf(b + n, sizeof buf[0] - n, "%s%s", n ? ", " : "", *t);
    }
    return b;
}

const char *arch_gguf_list(void) { return list(LIST_GGUF); }
const char *arch_hf_list(void) { return list(LIST_HF); }
const char *arch_gguf_only_list(void) { return list(LIST_GGUF_ONLY); }

static const char *lookup(const arch_override *over, const char *const *dflt, tensor_role r) {
    for (const arch_override *o = over; o && (o->role != 0 || o->name); o++)
        if (o->role == r) return o->name;
    return dflt[r];
}

const char *arch_gguf_name(const arch_desc *a, tensor_role r) { return lookup(a->gguf_names, gguf_default, r); }
const char *arch_hf_name(const arch_desc *a, tensor_role r) { return lookup(a->hf_names, hf_default, r); }
