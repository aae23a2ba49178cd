/* Internal to the model layer: the binder that model.c (GGUF), model_hf.c (Hugging Face
 * directories) and layers.c (each layer's kinds and tensors) share. A format supplies a lookup of
 * tensors by name; the binder finds each role's tensor under the architecture's names for that
 * format, checks it and fills the model. */
#ifndef NC_MODEL_BIND_H
#define NC_MODEL_BIND_H

#include "model/model.h"

#define BIND_NAME_MAX 160

typedef const fmt_tensor *(*bind_lookup)(const void *src, const char *name);

typedef struct binder {
    model *m;
    const arch_desc *a;
    const void *src;        /* the gguf_file (its metadata) or hf_dir */
    const void *tensors;    /* what lookup searches: src, or every part of a split GGUF */
    bind_lookup lookup;
    bool hf_names;          /* the source names tensors as transformers does */
    bool own_swa_rope;      /* sliding layers rotate as hp.rope[1] says, not as the others do */
    const char *path;       /* for messages */
    nc_err *err;
    /* per layer, from the file (NULL: the model's value for every layer) */
    const bool *sliding, *rope;
    const int32_t *head_kv, *ff;      /* head_count_kv, feed_forward_length */
    int32_t interval;                 /* full_attention_interval */
    int32_t shared_kv_layers;         /* the last layers reading an earlier layer's cache */
    int32_t head_dim_swa, n_rot_swa;  /* sliding layers' head size and rotated dims (0: the others') */
    bool rope_off;                    /* the file turns the rotation off */
    double mscale;                    /* YaRN's attention magnitude (DeepSeek's attention scale is its square) */
} binder;

/* The tensor of role r in layer il (expert e), or NULL; name receives the name looked up ("" when
 * the architecture has no such role in this format). */
const fmt_tensor *bind_find(binder *b, tensor_role r, int il, int e, char name[BIND_NAME_MAX]);
/* Check the hyper-parameters in b->m->hp (arch, sizes, rope) and bind every tensor. */
int bind_model(binder *b);

/* ---- model.c's tensor binding, for layers.c ---- */
int bind_missing(binder *b, const char *name);
/* A 2-D weight of rows x cols (ggml order [cols, rows]); absent and not required: w zeroed, 0. */
int bind_matrix(binder *b, tensor_role r, int il, int64_t cols, int64_t rows, bool required, model_weight *w);
/* Small tensors as f32 copies (norms, biases, per-head parameters) of n_dims dims of `shape`. */
int bind_floats(binder *b, tensor_role r, int il, int n_dims, const int64_t *shape, bool required, const float **out);
int bind_vector(binder *b, tensor_role r, int il, int64_t n, bool required, const float **out);
/* n_expert weights of rows x cols (one 3-D tensor, or one per expert); 1 when bound, 0 absent. */
int bind_experts(binder *b, tensor_role r, int il, int64_t cols, int64_t rows, bool transposed, model_weight **out);
/* `n` matrices of rows x cols from one 3-D tensor [cols, rows, n] (MLA's per-head k_b, v_b). */
int bind_stack(binder *b, tensor_role r, int il, int64_t cols, int64_t rows, int64_t n, model_weight **out);
/* Views of rows [r0, r0 + rows) of a fused matrix, every `step`-th row. */
model_weight bind_view(const model_weight *w, int r0, int rows, int step);
/* Memory the model owns (freed by model_free). */
void *bind_own(binder *b, size_t bytes);

/* layers.c: layer il's kinds, shape and tensors. */
int bind_layer(binder *b, int il, model_layer *L);

#endif
