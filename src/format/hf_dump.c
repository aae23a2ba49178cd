#include "format/hf_dump.h"

#include <stdlib.h>
#include <string.h>

#define MAX_VALUE 96  /* characters of a config value shown before it is cut */
#define MAX_COLUMN 56 /* widest key or tensor-name column */

typedef unsigned long long ull;

static int column(size_t n) { return n > MAX_COLUMN ? MAX_COLUMN : (int)n; }

static void put_value(FILE *out, const cJSON *v) {
    char *s = cJSON_PrintUnformatted(v);
    if (!s) {
        fputs("?", out);
        return;
    }
    size_t n = strlen(s);
    if (n > MAX_VALUE) fprintf(out, "%.*s... (%zu characters)", MAX_VALUE, s, n);
    else fputs(s, out);
    free(s);
}

int hf_dump(const hf_dir *d, FILE *out) {
    const cJSON *cfg = hf_dir_config(d), *kv;
    size_t n_keys = 0, width = 0;
    cJSON_ArrayForEach(kv, cfg) {
        n_keys++;
        width = strlen(kv->string) > width ? strlen(kv->string) : width;
    }
    fprintf(out, "%s: Hugging Face directory, %zu weight files, %zu tensors, %llu bytes of weights\n", hf_dir_path(d),
            hf_dir_n_files(d), hf_dir_n_tensors(d), (ull)hf_dir_file_bytes(d));
    fprintf(out, "config.json (%zu keys):\n", n_keys);
    cJSON_ArrayForEach(kv, cfg) {
        fprintf(out, "  %-*s ", column(width), kv->string);
        put_value(out, kv);
        fputc('\n', out);
    }
    fprintf(out, "files (%zu):\n", hf_dir_n_files(d));
    for (size_t i = 0; i < hf_dir_n_files(d); i++) {
        const st_file *f = hf_dir_file_at(d, i);
        fprintf(out, "  %s  %llu bytes, %zu tensors, header %llu bytes\n", st_path(f), (ull)st_file_size(f),
                st_n_tensors(f), (ull)st_header_len(f));
    }
    width = 4;
    for (size_t i = 0; i < hf_dir_n_tensors(d); i++) {
        size_t n = strlen(hf_dir_tensor_at(d, i)->name);
        width = n > width ? n : width;
    }
    fprintf(out, "tensors (%zu):\n  %-*s %-6s %-28s %12s %12s  file\n", hf_dir_n_tensors(d), column(width), "name", "dtype",
            "shape", "bytes", "offset");
    uint64_t elems = 0, bytes = 0;
    for (size_t i = 0; i < hf_dir_n_tensors(d); i++) {
        const fmt_tensor *t = hf_dir_tensor_at(d, i);
        const st_tensor *st = hf_dir_find_st_tensor(d, t->name);
        char shape[64];
        size_t k = (size_t)snprintf(shape, sizeof shape, "[");
        for (uint32_t r = 0; st && r < st->rank && k < sizeof shape; r++)
            k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%llu", r ? ", " : "", (ull)st->shape[r]);
        if (k < sizeof shape) snprintf(shape + k, sizeof shape - k, "]");
        const st_file *f = hf_dir_file_of(d, t);
        const char *file = f ? strrchr(st_path(f), '/') : NULL;
        fprintf(out, "  %-*s %-6s %-28s %12llu %12llu  %s\n", column(width), t->name,
                st ? st_dtype_name(st->dtype) : "?", shape, (ull)t->n_bytes, (ull)t->data_offset,
                file ? file + 1 : f ? st_path(f) : "?");
        elems += t->n_elems;
        bytes += t->n_bytes;
    }
    fprintf(out, "total: %zu tensors, %llu elements, %llu bytes of data\n", hf_dir_n_tensors(d), (ull)elems, (ull)bytes);
    return ferror(out) ? -1 : 0;
}
