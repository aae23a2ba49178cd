/* The parts of a split GGUF opened together (see gguf_split.h). */
#include "format/gguf_split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gguf_split {
    gguf_file **parts;
    int n;
};

enum { SPLIT_MAX = 9999 }; /* the five digits of "-00001-of-00003" allow more, no model needs them */

int gguf_split_count(const gguf_file *first, nc_err *err) {
    int64_t count = 1;
    int r = gguf_get_int(first, "split.count", &count, err);
    if (r < 0) return -1;
    if (r == 0) return 1;
    if (count < 1 || count > SPLIT_MAX)
        return nc_fail(err, "%s: split.count %lld is outside 1..%d", gguf_path(first), (long long)count, SPLIT_MAX);
    return (int)count;
}

/* split.no of a part (0-based), or -1 with err set. */
static int part_no(const gguf_file *f, nc_err *err) {
    int64_t no;
    int r = gguf_get_int(f, "split.no", &no, err);
    if (r < 0) return -1;
    if (r == 0) return nc_fail(err, "%s: a part of a split GGUF without split.no", gguf_path(f));
    return no < 0 || no > SPLIT_MAX ? nc_fail(err, "%s: split.no %lld is out of range", gguf_path(f), (long long)no) : (int)no;
}

int gguf_split_open(gguf_split **out, gguf_file *first, nc_err *err) {
    *out = NULL;
    const char *path = gguf_path(first);
    int n = gguf_split_count(first, err), no = n > 1 ? part_no(first, err) : -1;
    if (n < 0 || (n > 1 && no < 0)) return -1;
    size_t len = strlen(path);
    char suffix[32];
    snprintf(suffix, sizeof suffix, "-00001-of-%05d.gguf", n);
    size_t k = strlen(suffix);
    if (no != 0 || len < k || strcmp(path + len - k, suffix))
        return nc_fail(err, "%s: part %d of a GGUF split into %d files: load the first part, named ...%s", path, no + 1, n, suffix);
    gguf_split *s = calloc(1, sizeof *s);
    if (!s || !(s->parts = calloc((size_t)n, sizeof *s->parts))) {
        free(s);
        return nc_fail(err, "out of memory");
    }
    s->parts[s->n++] = first;
    char *name = malloc(len + 1);
    uint64_t tensors = gguf_n_tensors(first);
    if (!name) {
        nc_fail(err, "out of memory");
        goto fail;
    }
    for (int i = 2; i <= n; i++) {
        snprintf(name, len + 1, "%.*s-%05d-of-%05d.gguf", (int)(len - k), path, i, n);
        gguf_file *f;
        if (gguf_open(&f, name, err)) {
            nc_fail_prefix(err, "part %d of %d of %s", i, n, path);
            goto fail;
        }
        s->parts[s->n++] = f;
        int count = gguf_split_count(f, err), pno = count < 0 ? -1 : part_no(f, err);
        if (count < 0 || pno < 0) goto fail;
        if (count != n || pno != i - 1) {
            nc_fail(err, "%s: split.no %d and split.count %d, where part %d of %d was expected", name, pno, count, i, n);
            goto fail;
        }
        for (size_t t = 0; t < gguf_n_tensors(f); t++) {
            const gguf_tensor *x = gguf_tensor_at(f, t);
            for (int j = 0; j < s->n - 1; j++)
                if (gguf_find_tensor(s->parts[j], x->name)) {
                    nc_fail(err, "%s: tensor '%s' is in part %d too", name, x->name, j + 1);
                    goto fail;
                }
        }
        tensors += gguf_n_tensors(f);
    }
    int64_t want;
    int r = gguf_get_int(first, "split.tensors.count", &want, err);
    if (r < 0) goto fail;
    if (r == 1 && (uint64_t)want != tensors) {
        nc_fail(err, "%s: split.tensors.count says %lld tensors, the %d parts hold %llu", path, (long long)want, n,
                (unsigned long long)tensors);
        goto fail;
    }
    free(name);
    *out = s;
    return 0;
fail:
    free(name);
    for (int i = 1; i < s->n; i++) gguf_close(s->parts[i]); /* the first stays the caller's */
    free(s->parts);
    free(s);
    return -1;
}

void gguf_split_close(gguf_split *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) gguf_close(s->parts[i]);
    free(s->parts);
    free(s);
}

const gguf_tensor *gguf_split_find_tensor(const gguf_split *s, const char *name) {
    for (int i = 0; i < s->n; i++) {
        const gguf_tensor *t = gguf_find_tensor(s->parts[i], name);
        if (t) return t;
    }
    return NULL;
}

uint64_t gguf_split_bytes(const gguf_split *s) {
    uint64_t n = 0;
    for (int i = 0; i < s->n; i++) n += gguf_file_size(s->parts[i]);
    return n;
}
