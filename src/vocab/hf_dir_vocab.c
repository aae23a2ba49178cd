/* The tokenizer of a Hugging Face model directory: tokenizer.json when present (as llama.cpp's
 * converter and transformers' fast tokenizers prefer it), else the SentencePiece
 * tokenizer.model; with the special tokens of the JSON files beside it (hf_side.c). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "format/hf_dir.h"
#include "vocab/vocab_impl.h"

#define MAX_MODEL_BYTES ((size_t)1 << 31)

/* Whether dir/name is there, whatever it is (its reader refuses what is not a regular file). */
static bool has_file(const char *dir, const char *name) {
    char path[4096];
    struct stat st;
    return hf_join(path, sizeof path, dir, name) && stat(path, &st) == 0;
}

static int load_spm_model(vocab **out, const char *dir, const hf_side *side, nc_err *err) {
    char path[4096], *data;
    size_t len;
    if (!hf_join(path, sizeof path, dir, "tokenizer.model")) return nc_fail(err, "%s: path too long", dir);
    int r = hf_read_path(path, MAX_MODEL_BYTES, &data, &len, err);
    if (r == 0) return nc_fail(err, "%s: cannot open", path);
    if (r < 0) return -1;
    r = vocab_load_spm_side(out, data, len, path, side, err);
    free(data);
    return r;
}

int vocab_load_hf_dir(vocab **out, const char *dir, nc_err *err) {
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return nc_fail(err, "%s: not a directory", dir);
    bool json = has_file(dir, "tokenizer.json");
    if (!json && !has_file(dir, "tokenizer.model"))
        return nc_fail(err, "%s: no tokenizer.json or tokenizer.model (a Hugging Face directory keeps its tokenizer "
                            "in one of them)",
                       dir);
    hf_side side;
    if (hf_side_load(&side, dir, err)) return -1;
    int rc;
    if (json) {
        char path[4096];
        rc = hf_join(path, sizeof path, dir, "tokenizer.json") ? vocab_load_hf_side(out, path, &side, err)
                                                              : nc_fail(err, "%s: path too long", dir);
    } else rc = load_spm_model(out, dir, &side, err);
    hf_side_free(&side);
    return rc;
}

int vocab_load_hf_dir_spm(vocab **out, const char *dir, nc_err *err) {
    *out = NULL;
    hf_side side;
    if (hf_side_load(&side, dir, err)) return -1;
    int rc = load_spm_model(out, dir, &side, err);
    hf_side_free(&side);
    return rc;
}
