/* A Hugging Face model directory, as transformers saves it: config.json, the weights as
 * model.safetensors or as shards listed by model.safetensors.index.json, and the tokenizer and
 * generation files beside them (read by the vocab layer; the JSON helpers here serve both).
 *
 * hf_dir_open reads config.json (kept parsed), then model.safetensors when present (as
 * transformers prefers it), else every shard that the index's weight_map names, each opened and
 * validated by the safetensors reader (format/safetensors.h). It checks that every name in the
 * weight_map is in the shard the map names, that shard names stay inside the directory (no
 * absolute paths, no ".." component; symlinks are followed, as the Hugging Face cache uses them),
 * and that no tensor is in two shards. Tensors of a shard that the weight_map leaves out are
 * kept. All tensors are then found by name through one hash index. Weights stay mmapped.
 *
 * Tied weights: safetensors' save_model keeps one copy and records each removed name in the
 * file's __metadata__ ("model.embed_tokens.weight": "lm_head.weight"); such names are found by
 * hf_dir_find_tensor (returning the kept tensor, whose name is the kept one) but not listed. */
#ifndef NC_HF_DIR_H
#define NC_HF_DIR_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "format/safetensors.h"
#include "format/tensor.h"

typedef struct hf_dir hf_dir;

/* Open a directory. A missing config.json or weights file is an error naming the missing file
 * and what a Hugging Face directory must contain. */
int hf_dir_open(hf_dir **out, const char *dir, nc_err *err);
void hf_dir_close(hf_dir *d);

const char *hf_dir_path(const hf_dir *d);      /* as given, without a trailing slash */
const cJSON *hf_dir_config(const hf_dir *d);   /* config.json, an object */
uint64_t hf_dir_file_bytes(const hf_dir *d);   /* bytes of all weight files */

/* Weight files (one, or the shards in the order the index first names them). */
size_t hf_dir_n_files(const hf_dir *d);
const st_file *hf_dir_file_at(const hf_dir *d, size_t i);

/* All tensors, file by file in header order. */
size_t hf_dir_n_tensors(const hf_dir *d);
const fmt_tensor *hf_dir_tensor_at(const hf_dir *d, size_t i);
const fmt_tensor *hf_dir_find_tensor(const hf_dir *d, const char *name); /* NULL when absent; aliases too */
/* The same with the safetensors details (dtype, shape as in the file, offsets). */
const st_tensor *hf_dir_find_st_tensor(const hf_dir *d, const char *name);
/* The file holding a tensor of this directory. */
const st_file *hf_dir_file_of(const hf_dir *d, const fmt_tensor *t);

/* The chat template: chat_template.jinja when present, else chat_template.json's
 * "chat_template", else tokenizer_config.json's "chat_template" (a string, or a list of
 * {"name", "template"} objects of which the one named "default" wins). Returns 1 with *out a
 * NUL-terminated copy (free it) of *len bytes, 0 when there is none (*out NULL), -1 with err set
 * when a file is unreadable or malformed (or the value has the wrong type). Same convention as
 * the gguf_get_* getters. */
int hf_dir_chat_template(const hf_dir *d, char **out, size_t *len, nc_err *err);

/* ---- JSON files beside the weights (shared with the vocab layer) ---- */

/* dir/name parsed: 1 with *out set (free with cJSON_Delete), 0 when the file does not exist
 * (*out NULL), -1 with err naming the file and the offset of the error when it cannot be read or
 * is not valid JSON, or (object_only) is not a JSON object. */
int hf_read_json(const char *dir, const char *name, bool object_only, cJSON **out, nc_err *err);
/* A whole file: 1 with *out (NUL-terminated, free it) and *len, 0 when absent, -1 on error.
 * Files above max bytes are an error. */
int hf_read_file(const char *dir, const char *name, size_t max, char **out, size_t *len, nc_err *err);
/* The same for a path. */
int hf_read_path(const char *path, size_t max, char **out, size_t *len, nc_err *err);
/* dir + "/" + name into buf; false when it does not fit. */
bool hf_join(char *buf, size_t cap, const char *dir, const char *name);

#endif
