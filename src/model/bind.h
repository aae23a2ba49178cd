/* Internal to the model layer: the binder that model.c (GGUF) and model_hf.c (Hugging Face
 * directories) share. A format supplies a lookup of tensors by name; the binder finds each role's
 * tensor under the architecture's names for that format, checks it and fills the model. */
#ifndef NC_MODEL_BIND_H
#define NC_MODEL_BIND_H

#include "model/model.h"

#define BIND_NAME_MAX 160

typedef const fmt_tensor *(*bind_lookup)(const void *src, const char *name);

typedef struct binder {
    model *m;
    const arch_desc *a;
    const void *src;        /* the gguf_file or hf_dir */
    bind_lookup lookup;
    bool hf_names;          /* the source names tensors as transformers does */
    bool own_swa_rope;      /* sliding layers rotate as hp.rope[1] says, not as the others do */
    const char *path;       /* for messages */
    nc_err *err;
} binder;

/* The tensor of role r in layer il (expert e), or NULL; name receives the name looked up ("" when
 * the architecture has no such role in this format). */
const fmt_tensor *bind_find(binder *b, tensor_role r, int il, int e, char name[BIND_NAME_MAX]);
/* Check the hyper-parameters in b->m->hp (arch, sizes, rope) and bind every tensor. sliding and
 * rope: per layer (NULL: none slide / all rotate). */
int bind_model(binder *b, const bool *sliding, const bool *rope);

#endif
