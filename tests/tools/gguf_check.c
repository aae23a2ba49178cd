/* Opens GGUF files with the reader and prints, per file, "FILE: ok" or "FILE: error: MESSAGE".
 * Exit status 0 when every file is valid, 1 when any is refused, 2 on a usage or I/O error, 3
 * when the two ways of opening disagree.
 *
 * Each file is parsed twice: mmapped by gguf_open, and from an exactly-sized heap copy by
 * gguf_open_buffer, where AddressSanitizer sees any read past the end (a read past the end of
 * a mapping usually lands in the zeroed rest of its last page and goes unnoticed). The two
 * results must match. Each accepted file is also listed with gguf_dump (to stdout with -d,
 * else to /dev/null). Used by tests/e2e/hostile_files.sh, which counts any other outcome (a
 * crash, a sanitizer report, a mismatch) as a bug. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/gguf_dump.h"

static void *read_all(const char *path, size_t *size) {
    FILE *in = fopen(path, "rb");
    if (!in) return NULL;
    char *buf = NULL;
    if (fseek(in, 0, SEEK_END) == 0) {
        long n = ftell(in);
        rewind(in);
        /* malloc(0) may return NULL, so an empty file gets a 1-byte buffer it does not use */
        if (n >= 0 && (buf = malloc(n ? (size_t)n : 1)) && fread(buf, 1, (size_t)n, in) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        *size = (size_t)n;
    }
    fclose(in);
    return buf;
}

/* The heap-copy parse: 0 accepted, 1 refused (message in err), 2 unreadable. */
static int check_copy(const char *path, nc_err *err, FILE *listing) {
    size_t size = 0;
    void *buf = read_all(path, &size);
    if (!buf) return 2;
    gguf_file *f;
    int rc = gguf_open_buffer(&f, buf, size, path, err) == 0 ? 0 : 1;
    if (rc == 0) {
        gguf_dump(f, listing);
        gguf_close(f);
    }
    free(buf);
    return rc;
}

static int check(const char *path, FILE *listing, FILE *devnull) {
    nc_err err = {{0}}, copy_err = {{0}};
    gguf_file *f;
    int rc = gguf_open(&f, path, &err) == 0 ? 0 : 1;
    if (rc == 0) {
        rc = gguf_dump(f, listing) == 0 ? 0 : 2;
        gguf_close(f);
    }
    int copy_rc = check_copy(path, &copy_err, devnull); /* its listing would repeat the first */
    if (copy_rc == 2) { /* unreadable: the mmapped open has said why */
        printf("%s: error: %s\n", path, rc ? err.msg : "cannot read the file a second time");
        return rc ? 1 : 2;
    }
    if ((rc == 0) != (copy_rc == 0) || strcmp(err.msg, copy_err.msg) != 0) {
        fprintf(stderr, "%s: mmapped and heap copies disagree:\n  mmap: %s\n  copy: %s\n", path,
                rc ? err.msg : "ok", copy_rc ? copy_err.msg : "ok");
        return 3;
    }
    if (rc == 1) printf("%s: error: %s\n", path, err.msg);
    else printf("%s: ok\n", path);
    return rc;
}

int main(int argc, char **argv) {
    int dump = argc > 1 && strcmp(argv[1], "-d") == 0;
    if (argc < 2 + dump) {
        fprintf(stderr, "usage: gguf_check [-d] FILE...\n");
        return 2;
    }
    FILE *devnull = fopen("/dev/null", "w");
    if (!devnull) return 2;
    int worst = 0;
    for (int i = 1 + dump; i < argc; i++) {
        int rc = check(argv[i], dump ? stdout : devnull, devnull);
        if (rc > worst) worst = rc;
        fflush(stdout);
    }
    fclose(devnull);
    return worst;
}
