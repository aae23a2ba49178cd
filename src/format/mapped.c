#include "format/mapped.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

int fmt_map(const char *path, const void **data, size_t *size, void **map, nc_err *err) {
    *data = "";
    *size = 0;
    *map = NULL;
    int fd = nc_open_regular(path, err);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return nc_fail(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if (st.st_size == 0) {
        close(fd);
        return 0;
    }
    size_t n = (size_t)st.st_size;
    void *m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) return nc_fail(err, "%s: cannot map %zu bytes: %s", path, n, strerror(e));
    *data = m;
    *size = n;
    *map = m;
    return 0;
}

void fmt_unmap(void *map, size_t size) {
    if (map) munmap(map, size);
}
