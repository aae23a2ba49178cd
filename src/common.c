#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int nc_fail(nc_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int nc_fail_prefix(nc_err *err, const char *fmt, ...) {
    if (err) {
        char old[sizeof err->msg];
        memcpy(old, err->msg, sizeof old);
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        size_t used = n < 0 ? 0 : (size_t)n < sizeof err->msg ? (size_t)n : sizeof err->msg - 1;
        size_t room = sizeof err->msg - 1 - used;
        size_t old_len = strnlen(old, sizeof old - 1);
        char *p = err->msg + used;
        if (room >= 2) { memcpy(p, ": ", 2); p += 2; room -= 2; }
        size_t k = old_len < room ? old_len : room;
        memcpy(p, old, k);
        p[k] = 0;
    }
    return -1;
}

/* ---- nc_hasher ---- */

#define HASH_MUL 0x9e3779b97f4a7c15ull

static uint64_t load_le64(const uint8_t *p) {
    uint64_t w = 0;
    for (int i = 7; i >= 0; i--) w = w << 8 | p[i];
    return w;
}

static uint64_t hash_word(uint64_t h, uint64_t w) {
    h = (h ^ w) * HASH_MUL;
    return h ^ (h >> 32);
}

void nc_hash_init(nc_hasher *s) { *s = (nc_hasher){.h = 0x6e636b7663616368ull}; }

void nc_hash_update(nc_hasher *s, const void *data, size_t n) {
    const uint8_t *p = data;
    unsigned have = (unsigned)(s->len % 8);
    s->len += n;
    if (have) { /* complete the pending word first */
        size_t k = 8 - have < n ? 8 - have : n;
        memcpy(s->tail + have, p, k);
        p += k;
        n -= k;
        if (have + k < 8) return;
        s->h = hash_word(s->h, load_le64(s->tail));
    }
    for (; n >= 8; p += 8, n -= 8) s->h = hash_word(s->h, load_le64(p));
    memcpy(s->tail, p, n);
}

uint64_t nc_hash_final(const nc_hasher *s) {
    uint8_t last[8] = {0};
    memcpy(last, s->tail, s->len % 8);
    uint64_t h = hash_word(hash_word(s->h, load_le64(last)), s->len);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull; /* splitmix64's finaliser */
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

int nc_open_regular(const char *path, nc_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        nc_fail(err, "%s: cannot open: %s", path, strerror(e));
        errno = e;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        nc_fail(err, "%s: cannot stat: %s", path, strerror(e));
        errno = e;
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        const char *kind = S_ISFIFO(st.st_mode)  ? "a FIFO"
                           : S_ISDIR(st.st_mode) ? "a directory"
                           : S_ISCHR(st.st_mode) ? "a character device"
                           : S_ISBLK(st.st_mode) ? "a block device"
                           : S_ISSOCK(st.st_mode) ? "a socket"
                                                  : "a special file";
        nc_fail(err, "%s: %s, not a regular file", path, kind);
        errno = EINVAL;
        return -1;
    }
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        nc_fail(err, "%s: cannot open: %s", path, strerror(e));
        errno = e;
        return -1;
    }
    return fd;
}

long nc_json_escaped_nul(const char *body, size_t len) {
    for (size_t i = 0; i + 1 < len; i++) {
        if (body[i] != '\\') continue;
        if (body[i + 1] == 'u' && i + 6 <= len && !memcmp(body + i + 2, "0000", 4)) return (long)i;
        i++;
    }
    return -1;
}

bool nc_poll_ended(nc_poll *p) {
    if (!p || !p->gone) return false;
    if (p->ended) return true;
    if (p->calls++ % 64) return false;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    if (now < p->next) return false;
    p->next = now + 0.01;
    return p->ended = p->gone(p->user);
}
