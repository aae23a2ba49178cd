/* The slot directory's size (see slot_files.h). */
#include "server/slot_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

int srv_slot_dir_bytes(const char *dir, const char *except, uint64_t *bytes, nc_err *err) {
    *bytes = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        if (fd >= 0) close(fd);
        return nc_fail(err, "--slot-save-path %s: %s", dir, strerror(e));
    }
    struct dirent *ent;
    struct stat st;
    while ((ent = readdir(d)))
        if (strcmp(ent->d_name, except) && fstatat(fd, ent->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode))
            *bytes += (uint64_t)st.st_size;
    closedir(d);
    return 0;
}
