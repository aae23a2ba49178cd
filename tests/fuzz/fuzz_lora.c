/* libFuzzer harness for LoRA adapter files (model/lora.c over the GGUF reader): each input, read
 * as a GGUF file, is applied to a fresh binding of stories260K ($NUCLEUS_FUZZ_MODEL, default
 * ../shared's). An adapter that fails must leave the model unchanged (no weight holds a pair, no
 * adapter counted, its message naming the file); one that applies has every pair read whole by
 * the fingerprint, which ASan watches. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

static volatile uint64_t sink;

static bool untouched(const model *m) {
    if (m->n_lora || m->lora_rank || m->output.lora) return false;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const model_layer *L = &m->layers[il];
        const model_weight *ws[MODEL_LAYER_WEIGHTS + 2 * L->n_head];
        for (int i = 0, n = model_layer_weights(L, ws); i < n; i++)
            if (ws[i]->lora) return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = getenv("NUCLEUS_FUZZ_MODEL");
    gguf_file *base, *f;
    model *m;
    nc_err err;
    if (gguf_open(&base, path ? path : "../shared/models/stories260K/stories260K.gguf", &err)) __builtin_trap();
    if (model_bind(&m, base, &err)) __builtin_trap();
    if (gguf_open_buffer(&f, data, size, "fuzz.gguf", &err) == 0) {
        if (model_add_lora_file(m, f, "fuzz.gguf", 0.5f, &err) == 0) {
            if (m->n_lora != 1 || m->lora_rank <= 0) __builtin_trap();
            sink += model_fingerprint(m);
        } else if (!untouched(m) || strncmp(err.msg, "fuzz.gguf", 9) != 0) {
            __builtin_trap();
        }
        gguf_close(f);
    }
    model_free(m);
    return 0;
}
