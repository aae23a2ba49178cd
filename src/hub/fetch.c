/* One file into the cache: taken as it is when the cache has it with the hub's size and id, else
 * downloaded into NAME.part (resumed from what an earlier download left there, by a Range
 * request), its SHA-256 computed on the way and compared with the hub's LFS oid, and only then
 * renamed to NAME. A .part is locked while it grows, so two downloads of one file cannot
 * interleave. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "hub/hub.h"
#include "hub/sha256.h"

int hub_http_fail(const hub_ctx *ctx, const hub_answer *a, const char *what, nc_err *err) {
    char detail[300] = "";
    if (*a->message) snprintf(detail, sizeof detail, ": \"%s\"", a->message);
    bool token = *ctx->token != 0;
    if (!strcmp(a->error_code, "RepoNotFound") || (!what && a->status == 404))
        return nc_fail(err, "%s: no such repository on %s (HTTP %ld%s)%s", ctx->repo, ctx->endpoint, a->status, detail,
                       token ? "" : "; a private one needs HF_TOKEN");
    if (!strcmp(a->error_code, "GatedRepo") || a->status == 401 || a->status == 403)
        return nc_fail(err, "%s: access refused (HTTP %ld%s): a gated or private repository needs HF_TOKEN set to a token of "
                            "an account that may read it (accept its terms on its page)%s", ctx->repo, a->status, detail,
                       token ? "; the HF_TOKEN given has no access" : "");
    if (a->status == 404 || !strcmp(a->error_code, "EntryNotFound"))
        return nc_fail(err, "%s: %s is not in the repository (HTTP %ld%s)", ctx->repo, what ? what : "the file", a->status, detail);
    return nc_fail(err, "%s: %s: HTTP %ld%s", ctx->repo, what ? what : "the file listing", a->status, detail);
}

int hub_hash_file(int fd, uint64_t n, char hex[65], nc_err *err) {
    enum { CHUNK = 1 << 20 };
    char *buf = malloc(CHUNK);
    if (!buf) return nc_fail(err, "out of memory");
    hub_sha256 s;
    hub_sha256_init(&s);
    uint64_t at = 0;
    while (at < n) {
        ssize_t got = pread(fd, buf, n - at < CHUNK ? (size_t)(n - at) : CHUNK, (off_t)at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            free(buf);
            return nc_fail(err, "reading at byte %" PRIu64 ": %s", at, got ? strerror(errno) : "the file is shorter");
        }
        hub_sha256_update(&s, buf, (size_t)got);
        at += (uint64_t)got;
    }
    free(buf);
    hub_sha256_hex(&s, hex);
    return 0;
}

/* ---- the download ---- */

typedef struct download {
    const hub_ctx *ctx;
    const hub_file *f;
    int fd;
    uint64_t done;
    hub_sha256 sha;
    nc_hub_progress pr;
    int write_errno;     /* a write failed (a full disk) */
    bool stopped;        /* the progress callback said stop */
    char wrong[160];     /* the server's answer does not fit the file */
} download;

static bool report(download *d, nc_hub_event ev) {
    d->pr.event = ev;
    d->pr.done = d->done;
    if (d->ctx->progress && d->ctx->progress(&d->pr, d->ctx->user)) d->stopped = true;
    return !d->stopped;
}

static bool on_begin(void *user, long status, uint64_t start) {
    download *d = user;
    if (status == 206) {
        if (start == d->done) return true;
        snprintf(d->wrong, sizeof d->wrong, "the server resumed at byte %" PRIu64 ", not %" PRIu64, start, d->done);
        return false;
    }
    if (d->done) { /* the whole file, though a range was asked for: start again */
        if (ftruncate(d->fd, 0) || lseek(d->fd, 0, SEEK_SET)) {
            d->write_errno = errno;
            return false;
        }
        d->done = 0;
        d->pr.resumed = 0;
        hub_sha256_init(&d->sha);
    }
    return true;
}

static bool on_write(void *user, const void *data, size_t n) {
    download *d = user;
    if (n > d->f->size - d->done) {
        snprintf(d->wrong, sizeof d->wrong, "the server sends more than the file's %" PRIu64 " bytes", d->f->size);
        return false;
    }
    for (const char *p = data, *end = p + n; p < end;) {
        ssize_t w = write(d->fd, p, (size_t)(end - p));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            d->write_errno = w < 0 ? errno : EIO;
            return false;
        }
        hub_sha256_update(&d->sha, p, (size_t)w);
        d->done += (uint64_t)w;
        p += w;
    }
    return report(d, NC_HUB_PROGRESS);
}

/* Download into d->fd from d->done to the end, trying again after a failed transfer: at once when
 * it brought bytes, else after 1 and 2 seconds, giving up at the third failure in a row that
 * brought none. */
static int transfer(download *d, const char *part, nc_err *err) {
    const hub_ctx *ctx = d->ctx;
    char url[8192], *escaped = hub_url_path(d->f->path);
    if (!escaped) return nc_fail(err, "out of memory");
    int n = snprintf(url, sizeof url, "%s/%s/resolve/main/%s", ctx->endpoint, ctx->repo, escaped);
    free(escaped);
    if (n < 0 || (size_t)n >= sizeof url) return nc_fail(err, "%s: the URL is too long", d->f->path);
    hub_sink sink = {on_begin, on_write, d};
    int quiet = 0;
    while (d->done < d->f->size) {
        uint64_t before = d->done;
        hub_answer a;
        int rc = hub_http_get(url, ctx->token, d->done, &sink, &a);
        if (d->stopped)
            return nc_fail(err, "%s: stopped; %s keeps the %" PRIu64 " bytes downloaded, for the next try to resume",
                           d->f->path, part, d->done);
        if (d->write_errno)
            return nc_fail(err, "%s: writing %s: %s (%" PRIu64 " of %" PRIu64 " bytes written; they are kept, for the next "
                                "try to resume)", d->f->path, part, strerror(d->write_errno), d->done, d->f->size);
        if (*d->wrong) return nc_fail(err, "%s: %s (%s)", d->f->path, d->wrong, url);
        if (rc == 0 && (a.status < 200 || a.status > 299)) return hub_http_fail(ctx, &a, d->f->path, err);
        if (d->done == d->f->size) break;
        const char *why = rc ? a.failure : "the answer ended early";
        quiet = d->done > before ? 0 : quiet + 1;
        if (quiet >= 3)
            return nc_fail(err, "%s: the download failed: %s (three tries in a row brought nothing; %s keeps %" PRIu64
                                " of %" PRIu64 " bytes: run again to resume)", d->f->path, why, part, d->done, d->f->size);
        d->pr.note = why;
        if (!report(d, NC_HUB_RETRY))
            return nc_fail(err, "%s: stopped; %s keeps the %" PRIu64 " bytes downloaded, for the next try to resume",
                           d->f->path, part, d->done);
        d->pr.note = NULL;
        if (quiet) sleep(1u << (quiet - 1));
    }
    return 0;
}

/* The bytes free on the disk that holds dir. */
static bool disk_free(const char *file, uint64_t *out) {
    char dir[8200];
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    struct statvfs v;
    if (statvfs(slash ? dir : ".", &v)) return false;
    *out = (uint64_t)v.f_bavail * v.f_frsize;
    return true;
}

/* The cached file at path, if it is f: its size and id (the sidecar's, or its hash when the
 * sidecar is missing, which is then written). */
static bool cached(const char *path, const hub_file *f, nc_err *err) {
    struct stat st;
    char oid[65];
    if (lstat(path, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->size) return false;
    if (!*f->oid || (hub_oid_read(path, oid) && !strcmp(oid, f->oid))) return true;
    if (!f->lfs) return false;
    int fd = hub_open_regular(path);
    bool same = fd >= 0 && !hub_hash_file(fd, f->size, oid, err) && !strcmp(oid, f->oid);
    if (fd >= 0) close(fd);
    return same && !hub_oid_write(path, f->oid, err);
}

int hub_fetch(const hub_ctx *ctx, const hub_file *f, int index, int count, nc_err *err) {
    char path[8192], part[8200];
    if (!hub_join(path, sizeof path, ctx->dir, f->path, NULL)) return nc_fail(err, "%s: the path is too long", f->path);
    snprintf(part, sizeof part, "%s.part", path);
    download d = {.ctx = ctx, .f = f, .fd = -1,
                  .pr = {.repo = ctx->repo, .file = f->path, .index = index, .count = count, .total = f->size}};
    struct stat st;
    if (cached(path, f, err)) {
        d.done = f->size;
        report(&d, NC_HUB_CACHED);
        return 0;
    }
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) return nc_fail(err, "%s: in the cache but not a regular file", path);
    if (ctx->offline)
        return nc_fail(err, "%s: %s is not in the cache (%s) whole, and --offline fetches nothing", ctx->repo, f->path, ctx->dir);
    if (hub_mkdirs(path, err)) return -1;
    d.fd = open(part, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (d.fd < 0) return nc_fail(err, "%s: %s", part, strerror(errno));
    int rc = -1;
    char hex[65];
    uint64_t free_bytes;
    if (fstat(d.fd, &st) || !S_ISREG(st.st_mode)) {
        nc_fail(err, "%s: not a regular file", part);
        goto out;
    }
    if (flock(d.fd, LOCK_EX | LOCK_NB)) {
        nc_fail(err, "%s: %s", part, errno == EWOULDBLOCK ? "another download of this file is under way (its .part is locked)" : strerror(errno));
        goto out;
    }
    fcntl(d.fd, F_SETFL, 0); /* blocking writes again */
    d.done = (uint64_t)st.st_size;
    if (d.done > f->size && ftruncate(d.fd, 0) == 0) d.done = 0; /* not this file's beginning */
    hub_sha256_init(&d.sha);
    if (d.done) { /* the bytes kept are hashed again: the hash covers the whole file */
        char *buf = malloc(1 << 20);
        uint64_t at = 0;
        while (buf && at < d.done) {
            ssize_t got = pread(d.fd, buf, d.done - at < (1u << 20) ? (size_t)(d.done - at) : (1u << 20), (off_t)at);
            if (got <= 0) break;
            hub_sha256_update(&d.sha, buf, (size_t)got);
            at += (uint64_t)got;
        }
        free(buf);
        if (at != d.done) {
            nc_fail(err, "%s: cannot read the bytes kept", part);
            goto out;
        }
    }
    if (lseek(d.fd, (off_t)d.done, SEEK_SET) < 0) {
        nc_fail(err, "%s: %s", part, strerror(errno));
        goto out;
    }
    if (disk_free(part, &free_bytes) && free_bytes < f->size - d.done) {
        nc_fail(err, "%s: %s needs %.1f MB more, and the disk of %s has %.1f MB free", ctx->repo, f->path,
                (f->size - d.done) / 1e6, ctx->dir, free_bytes / 1e6);
        goto out;
    }
    d.pr.resumed = d.done;
    if (!report(&d, NC_HUB_START)) {
        nc_fail(err, "%s: stopped", f->path);
        goto out;
    }
    if (transfer(&d, part, err)) goto out;
    report(&d, NC_HUB_VERIFY);
    hub_sha256_hex(&d.sha, hex);
    if (f->lfs && strcmp(hex, f->oid)) {
        unlink(part); /* resuming it could never give the right bytes */
        nc_fail(err, "%s: %s: the SHA-256 of the bytes received is %s, the hub's listing says %s: the download was "
                     "removed, not taken (run again to fetch it anew)", ctx->repo, f->path, hex, f->oid);
        goto out;
    }
    if (fsync(d.fd) || rename(part, path)) {
        nc_fail(err, "%s: %s", path, strerror(errno));
        goto out;
    }
    if (*f->oid && hub_oid_write(path, f->oid, err)) goto out;
    report(&d, NC_HUB_DONE);
    rc = 0;
out:
    close(d.fd);
    return rc;
}
