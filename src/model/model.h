/* Architectures and the binding of named GGUF tensors to a model's weights.
 * Supported: llama (Llama 2/3, TinyLlama, SmolLM, Mistral without sliding window) and qwen2
 * (llama plus Q/K/V biases and "neox" rotary embeddings that rotate the halves of each head). */
#ifndef NC_MODEL_H
#define NC_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "format/gguf.h"

typedef enum model_arch { ARCH_LLAMA, ARCH_QWEN2 } model_arch;

/* A 2-D weight as stored: `rows` rows of `cols` elements, rows `row_bytes` apart.
 * In ggml order cols = ne[0], rows = ne[1]; y = W x has `rows` outputs. */
typedef struct model_weight {
    const char *name;
    const void *data;
    uint32_t type;
    int32_t rows, cols;
    size_t row_bytes;
} model_weight;

typedef struct model_layer {
    const float *attn_norm, *ffn_norm;     /* [n_embd] */
    model_weight wq, wk, wv, wo;
    const float *bq, *bk, *bv;             /* biases (qwen2), else NULL */
    model_weight ffn_gate, ffn_up, ffn_down;
} model_layer;

typedef struct model_hparams {
    model_arch arch;
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_rot, n_ctx_train;
    float rope_freq_base, norm_eps;
    bool rope_neox;
} model_hparams;

typedef struct model {
    gguf_file *file;
    model_hparams hp;
    char name[128];
    model_weight tok_embd, output;         /* output aliases tok_embd when tied */
    const float *output_norm;
    const float *rope_freqs;               /* [n_rot/2] divisors of each frequency, or NULL */
    model_layer *layers;
    float **owned;                         /* 1-D tensors converted to f32 at load */
    int n_owned;
    uint64_t n_params, weight_bytes;
} model;

/* Bind the tensors of an open file (the model keeps the file; model_free closes it). */
int model_bind(model **out, gguf_file *file, nc_err *err);
void model_free(model *m);

const char *model_arch_name(model_arch a);

#endif
