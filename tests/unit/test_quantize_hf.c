/* Hugging Face directory -> GGUF (quantize/hf_convert.c) against llama.cpp's converter: each
 * shared/archs/<name>/hf converted to F16 by qz_quantize must be the <name>-f16.gguf that
 * convert_hf_to_gguf.py wrote of it: the same metadata pairs byte for byte, the same tensors (name,
 * shape, type) with the same bytes (Llama 3's computed rope_freqs within 1 ulp). Then the refusals:
 * not a model directory, an unsupported architecture, a quantised checkpoint, no tokenizer. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/ggml_types.h"
#include "format/gguf.h"
#include "quantize/quantize.h"
#include "test.h"

static const char *shared_dir(void) { return getenv("SHARED") ? getenv("SHARED") : "../shared"; }

static const char *const archs[] = {"llama3", "qwen2", "qwen3", "qwen3moe", "gemma2", "gemma3",
                                    "phi3",   "mixtral", "olmo2", "granite", "smollm3", "gptoss"};

static int convert(const char *in, const char *out, const char *type, nc_err *err) {
    qz_params p = {.input = in, .output = out, .ftype = qz_ftype_find(type), .n_threads = 2,
                   .rules = {.output_type = UINT32_MAX, .embd_type = UINT32_MAX}};
    qz_result r;
    return qz_quantize(&p, &r, err);
}

/* The general.* keys the converter takes from a model card (README.md), which nucleus does not
 * read: general.name (then a title from the card), basename, license, datasets, languages, ... */
static bool from_model_card(const char *key) {
    static const char *const ours[] = {"general.architecture", "general.type", "general.size_label", "general.file_type",
                                       "general.quantization_version"};
    if (strncmp(key, "general.", 8)) return false;
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        if (!strcmp(key, ours[i])) return false;
    return true;
}

static void compare_kvs(const char *arch, const gguf_file *ours, const gguf_file *theirs, bool card) {
    for (size_t i = 0; i < gguf_n_kv(theirs); i++) {
        const gguf_kv *kv = gguf_kv_at(theirs, i);
        if (card && from_model_card(kv->key)) continue;
        const gguf_kv *mine = gguf_find_kv(ours, kv->key);
        CHECK_MSG(mine != NULL, "%s: key %s missing", arch, kv->key);
        if (!mine) continue;
        uint64_t n1, n2;
        const uint8_t *b1 = gguf_kv_bytes(theirs, i, &n1);
        const uint8_t *b2 = gguf_kv_bytes(ours, (size_t)(mine - gguf_kv_at(ours, 0)), &n2);
        CHECK_MSG(n1 == n2 && !memcmp(b1, b2, n1), "%s: key %s differs (%s)", arch, kv->key, gguf_vtype_name(kv->type));
    }
    for (size_t i = 0; i < gguf_n_kv(ours); i++)
        CHECK_MSG((card && from_model_card(gguf_kv_at(ours, i)->key)) || gguf_find_kv(theirs, gguf_kv_at(ours, i)->key),
                  "%s: extra key %s", arch, gguf_kv_at(ours, i)->key);
}

/* Bytes equal; rope_freqs (computed) within one float32 ulp. */
static bool same_data(const gguf_tensor *a, const gguf_tensor *b) {
    if (a->n_bytes != b->n_bytes) return false;
    if (!memcmp(a->data, b->data, a->n_bytes)) return true;
    if (strcmp(a->name, "rope_freqs.weight") || a->type != GGML_TYPE_F32) return false;
    const float *x = a->data, *y = b->data;
    for (uint64_t i = 0; i < a->n_elems; i++)
        if (fabsf(x[i] - y[i]) > 1.2e-7f * fabsf(y[i])) return false;
    return true;
}

static void compare_tensors(const char *arch, const gguf_file *ours, const gguf_file *theirs) {
    CHECK_MSG(gguf_n_tensors(ours) == gguf_n_tensors(theirs), "%s: %zu tensors, llama.cpp %zu", arch,
              gguf_n_tensors(ours), gguf_n_tensors(theirs));
    for (size_t i = 0; i < gguf_n_tensors(theirs); i++) {
        const gguf_tensor *t = gguf_tensor_at(theirs, i), *m = gguf_find_tensor(ours, t->name);
        CHECK_MSG(m != NULL, "%s: tensor %s missing", arch, t->name);
        if (!m) continue;
        CHECK_MSG(m->n_dims == t->n_dims && !memcmp(m->ne, t->ne, sizeof m->ne) && m->type == t->type,
                  "%s: %s: shape or type differs", arch, t->name);
        if (m->type == t->type && m->n_bytes == t->n_bytes) CHECK_MSG(same_data(m, t), "%s: %s: data differs", arch, t->name);
    }
}

static void test_against_converter(void) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        char dir[512], ref[512], out[] = "/tmp/test_quantize_hf_XXXXXX";
        snprintf(dir, sizeof dir, "%s/archs/%s/hf", shared_dir(), archs[i]);
        snprintf(ref, sizeof ref, "%s/archs/%s/%s-f16.gguf", shared_dir(), archs[i], archs[i]);
        int fd = mkstemp(out);
        close(fd);
        nc_err err;
        gguf_file *ours = NULL, *theirs = NULL;
        CHECK_MSG(convert(dir, out, "F16", &err) == 0, "%s: %s", archs[i], err.msg);
        CHECK_MSG(gguf_open(&ours, out, &err) == 0, "%s", err.msg);
        CHECK_MSG(gguf_open(&theirs, ref, &err) == 0, "%s", err.msg);
        if (ours && theirs) {
            compare_kvs(archs[i], ours, theirs, false);
            compare_tensors(archs[i], ours, theirs);
        }
        gguf_close(ours);
        gguf_close(theirs);
        unlink(out);
    }
}

/* shared/models/tinystories-656k: a Llama whose tokenizer.json is SentencePiece-style BPE (no
 * tokenizer.model; the converter's LlamaHfVocab) and whose checkpoint keeps the tied embeddings
 * under lm_head's name; its Q8_0 GGUF, made by llama.cpp from the same weights, must be our Q8_0
 * file but for the model card's general.* keys. */
static void test_tinystories(void) {
    char dir[512], ref[512], out[] = "/tmp/test_quantize_hf_XXXXXX";
    snprintf(dir, sizeof dir, "%s/models/tinystories-656k/hf", shared_dir());
    snprintf(ref, sizeof ref, "%s/models/tinystories-656k/TinyStories-656K-Q8_0.gguf", shared_dir());
    int fd = mkstemp(out);
    close(fd);
    nc_err err;
    gguf_file *ours = NULL, *theirs = NULL;
    CHECK_MSG(convert(dir, out, "Q8_0", &err) == 0, "tinystories: %s", err.msg);
    CHECK_MSG(gguf_open(&ours, out, &err) == 0, "%s", err.msg);
    CHECK_MSG(gguf_open(&theirs, ref, &err) == 0, "%s", err.msg);
    if (ours && theirs) {
        compare_kvs("tinystories", ours, theirs, true);
        compare_tensors("tinystories", ours, theirs);
    }
    gguf_close(ours);
    gguf_close(theirs);
    unlink(out);
}

/* A directory of llama3's files (symlinks) but for config.json, which edit() rewrites; NULL
 * names skip a file. */
static void make_dir(char *dir, const char *const *files, const char *config) {
    char src[PATH_MAX], abs[PATH_MAX]; /* a symlink's target is taken from the link's directory */
    snprintf(src, sizeof src, "%s/archs/llama3/hf", shared_dir());
    CHECK(realpath(src, abs) != NULL);
    for (const char *const *f = files; *f; f++) {
        char from[PATH_MAX + 64], to[1024];
        snprintf(from, sizeof from, "%s/%s", abs, *f);
        snprintf(to, sizeof to, "%s/%s", dir, *f);
        CHECK(symlink(from, to) == 0);
    }
    if (!config) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *fp = fopen(path, "w");
    if (fp) fputs(config, fp), fclose(fp);
}

static void clean_dir(const char *dir) {
    static const char *const names[] = {"model.safetensors", "tokenizer.json", "tokenizer_config.json", "config.json"};
    char path[1024];
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void expect_refusal(const char *what, const char *const *files, const char *config, const char *needle) {
    char dir[] = "/tmp/test_quantize_hf_dir_XXXXXX", out[1100];
    CHECK(mkdtemp(dir) != NULL);
    make_dir(dir, files, config);
    snprintf(out, sizeof out, "%s.gguf", dir);
    nc_err err = {0};
    CHECK_MSG(convert(dir, out, "Q8_0", &err) != 0, "%s: accepted", what);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: '%s' does not say '%s'", what, err.msg, needle);
    struct stat st;
    CHECK_MSG(stat(out, &st) != 0, "%s: an output was left", what);
    clean_dir(dir);
}

/* Clear errors, nothing left behind: not a model directory, an unsupported architecture, a
 * quantised checkpoint, no tokenizer. */
static void test_refusals(void) {
    static const char *const weights[] = {"model.safetensors", "tokenizer.json", "tokenizer_config.json", NULL};
    static const char *const no_tok[] = {"model.safetensors", NULL};
    static const char *const nothing[] = {NULL};
    char cfg[4096], path[1024];
    snprintf(path, sizeof path, "%s/archs/llama3/hf/config.json", shared_dir());
    FILE *fp = fopen(path, "r");
    size_t n = fp ? fread(cfg, 1, sizeof cfg - 1, fp) : 0;
    if (fp) fclose(fp);
    cfg[n] = 0;
    char *type = strstr(cfg, "\"model_type\": \"llama\"");
    CHECK(type != NULL);
    if (!type) return;
    expect_refusal("empty directory", nothing, NULL, "config.json");
    expect_refusal("no tokenizer", no_tok, cfg, "no tokenizer.json or tokenizer.model");
    char bert[4096];
    snprintf(bert, sizeof bert, "%.*s\"model_type\": \"bert\"%s", (int)(type - cfg), cfg, type + strlen("\"model_type\": \"llama\""));
    expect_refusal("unsupported architecture", weights, bert, "model_type \"bert\" is not supported");
    char quant[4200];
    snprintf(quant, sizeof quant, "{\"quantization_config\": {\"quant_method\": \"mxfp4\"}, %s", cfg + 1);
    expect_refusal("quantised checkpoint", weights, quant, "quantised checkpoint");
}

int main(void) {
    test_against_converter();
    test_tinystories();
    test_refusals();
    return test_summary("test_quantize_hf");
}
