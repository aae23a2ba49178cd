/* The models a router serves (nucleus serve --models-dir DIR, --models FILE): what a directory
 * holds, and an INI file of presets, each an alias with its path and per-model options. Pure
 * functions over files and text, unit-tested and fuzzed alone (no model is opened here).
 *
 * A directory: every NAME.gguf (a model named NAME; mmproj*.gguf projectors are skipped), every
 * subdirectory holding config.json (a Hugging Face directory named after it), and every
 * subdirectory holding one GGUF model (named after the subdirectory). Split GGUF files
 * (NAME-00001-of-00003.gguf ...) are one model, NAME, loaded from its first part (the loader
 * finds the others beside it). Names are unique: a clash is an error naming both paths.
 *
 * The INI file (';' and '#' start comments; keys and values are trimmed):
 *
 *   [*]                      options every model gets unless its own section says otherwise
 *   ctx-size = 2048
 *   [coder]                  an alias ...
 *   model = coder-q8.gguf    ... with its model (relative paths: from the INI file's directory)
 *   parallel = 2
 *   [stories260K]            a section without "model" names a model of --models-dir: its options
 *   cache-type-k = q8_0
 *
 * Keys: model (m), ctx-size (c), parallel (np), kv-size, cache-type-k (ctk), cache-type-v (ctv),
 * cache-type (both), model-draft (md), chat-template-file, alias (the name, instead of the
 * section's), load-on-startup (true/false). Anything else is an error naming the line. */
#ifndef NC_SERVER_PRESETS_H
#define NC_SERVER_PRESETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nucleus.h"

#define SRV_PRESET_NAME_MAX 128  /* bytes of a model's name */
#define SRV_MAX_MODELS 256       /* models one router serves */

typedef struct srv_preset {
    char *id;              /* the name requests give as "model" */
    char *path;            /* the GGUF file or Hugging Face directory */
    char *draft;           /* a draft model for speculative decoding, or NULL */
    char *chat_template;   /* a Jinja file used instead of the model's template, or NULL */
    int32_t n_ctx, n_parallel;    /* 0: the server's */
    int64_t kv_cells;             /* 0: the server's */
    nc_cache_type type_k, type_v; /* NC_CACHE_DEFAULT: the server's */
    bool load_on_startup;
    double est_bytes;      /* the files' size (a split set's every part): what loading it will take
                              at least */
} srv_preset;

typedef struct srv_presets {
    srv_preset *p;
    int32_t n;
} srv_presets;

/* Add DIR's models (see above) to ps. -1 with err naming the problem. */
int srv_presets_scan_dir(srv_presets *ps, const char *dir, nc_err *err);
/* Add the models of the download cache (nucleus pull, -hf: $NUCLEUS_CACHE …), named as they are
 * pulled: USER/REPO:QUANT, or USER/REPO for a Hugging Face directory. No cache: nothing added. */
int srv_presets_scan_cache(srv_presets *ps, nc_err *err);
/* Parse an INI file's text (file: its path, for messages and relative paths) into ps: new
 * presets, and options for those of a directory already scanned. */
int srv_presets_parse_ini(srv_presets *ps, const char *text, size_t len, const char *file, nc_err *err);
/* Read and parse the INI file. */
int srv_presets_load_ini(srv_presets *ps, const char *file, nc_err *err);
/* The preset named id, or NULL. */
srv_preset *srv_presets_find(const srv_presets *ps, const char *id);
void srv_presets_free(srv_presets *ps);

/* The text of a regular file of at most max bytes (malloc'd, NUL-terminated, *len bytes), or
 * NULL with err naming the path and why (missing, not a regular file, too large). */
char *srv_read_text(const char *path, size_t max, size_t *len, nc_err *err);

/* Bytes of a file (with a split set's other parts when it is the first), or of every file in a
 * directory (not recursive); 0 when unreadable. */
double srv_path_bytes(const char *path);

#endif
