/* Files for the unit tests: where shared/ is, its models loaded, whole files read, small files
 * written. */
#ifndef NC_TEST_FILES_H
#define NC_TEST_FILES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "test.h"

static inline const char *test_shared_dir(void) {
    const char *s = getenv("SHARED");
    return s && *s ? s : "../shared";
}

/* The model at shared/rel, or NULL after a failed check naming the error. */
static inline nc_model *test_load_model(const char *rel) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", test_shared_dir(), rel);
    nc_err err;
    nc_model *m;
    if (nc_model_load(&m, path, &err)) {
        CHECK_MSG(0, "cannot load %s: %s", path, err.msg);
        return NULL;
    }
    return m;
}

/* The whole file, NUL-terminated (free it), or NULL; *len (when given) its size. */
static inline char *test_read_all(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    char *buf = NULL;
    long n = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
    if (n >= 0 && fseek(fp, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
        if (fread(buf, 1, (size_t)n, fp) != (size_t)n) {
            free(buf);
            buf = NULL;
        } else {
            buf[n] = '\0';
            if (len) *len = (size_t)n;
        }
    }
    fclose(fp);
    return buf;
}

static inline void test_write_file(const char *dir, const char *name, const void *data, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    CHECK_MSG(fp && fwrite(data, 1, n, fp) == n, "cannot write %s", path);
    if (fp) fclose(fp);
}

static inline void test_write_text(const char *dir, const char *name, const char *text) {
    test_write_file(dir, name, text, strlen(text));
}

#endif
