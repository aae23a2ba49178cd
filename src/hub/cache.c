/* The cache on disk: where it is, the files of a repository (ROOT/USER/REPO/PATH), the id each
 * was checked against (a sidecar ".NAME.oid" beside it), a download under way (NAME.part), and
 * nc_hub_list / nc_hub_remove. Only regular files are taken for cached ones: a FIFO, device or
 * symlink placed there is neither read nor counted. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hub/hub.h"

int hub_cache_root(const char *given, char *out, size_t cap, nc_err *err) {
    const char *env;
    int n;
    if (given && *given) n = snprintf(out, cap, "%s", given);
    else if ((env = getenv("NUCLEUS_CACHE")) && *env) n = snprintf(out, cap, "%s", env);
    else if ((env = getenv("XDG_CACHE_HOME")) && env[0] == '/') n = snprintf(out, cap, "%s/nucleus", env); /* relative: ignored, as the XDG spec says */
    else if ((env = getenv("HOME")) && *env) n = snprintf(out, cap, "%s/.cache/nucleus", env);
    else return nc_fail(err, "no cache directory: set NUCLEUS_CACHE (neither XDG_CACHE_HOME nor HOME is set)");
    if (n < 0 || (size_t)n >= cap) return nc_fail(err, "the cache directory's path is too long");
    while (n > 1 && out[n - 1] == '/') out[--n] = 0;
    return 0;
}

int nc_hub_cache_dir(const nc_hub_params *p, char *out, size_t cap, nc_err *err) {
    return hub_cache_root(p ? p->cache : NULL, out, cap, err);
}

bool hub_join(char *buf, size_t cap, const char *a, const char *b, const char *c) {
    int n = c ? snprintf(buf, cap, "%s/%s/%s", a, b, c) : snprintf(buf, cap, "%s/%s", a, b);
    return n >= 0 && (size_t)n < cap;
}

int hub_mkdirs(const char *path, nc_err *err) {
    char buf[8192];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return nc_fail(err, "%s: the path is too long", path);
    for (char *p = buf + 1; (p = strchr(p, '/')); p++) {
        *p = 0;
        struct stat st;
        if (mkdir(buf, 0755) && (errno != EEXIST || stat(buf, &st) || !S_ISDIR(st.st_mode)))
            return nc_fail(err, "%s: cannot make the directory: %s", buf, errno == EEXIST ? "a file is in its place" : strerror(errno));
        *p = '/';
    }
    return 0;
}

int hub_open_regular(const char *path) {
    /* O_NONBLOCK: opening a FIFO does not wait for a writer; O_NOFOLLOW: a symlink is refused */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return -1;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    return fd;
}

/* ---- sidecars ---- */

/* dir/.NAME.oid for dir/NAME */
static bool sidecar(const char *file, char *buf, size_t cap) {
    const char *slash = strrchr(file, '/');
    int n = slash ? snprintf(buf, cap, "%.*s/.%s.oid", (int)(slash - file), file, slash + 1)
                  : snprintf(buf, cap, ".%s.oid", file);
    return n >= 0 && (size_t)n < cap;
}

bool hub_oid_read(const char *file, char oid[65]) {
    char path[8192];
    int fd = sidecar(file, path, sizeof path) ? hub_open_regular(path) : -1;
    if (fd < 0) return false;
    ssize_t n = read(fd, oid, 64);
    close(fd);
    if (n <= 0) return false;
    oid[n] = 0;
    for (ssize_t i = 0; i < n; i++)
        if (!((oid[i] >= '0' && oid[i] <= '9') || (oid[i] >= 'a' && oid[i] <= 'f'))) return false;
    return true;
}

int hub_oid_write(const char *file, const char *oid, nc_err *err) {
    char path[8192], tmp[8300];
    if (!sidecar(file, path, sizeof path)) return nc_fail(err, "%s: the path is too long", file);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    bool ok = f && fputs(oid, f) >= 0;
    if (f && fclose(f)) ok = false;
    if (!ok || rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return nc_fail(err, "%s: %s", path, strerror(e));
    }
    return 0;
}

/* ---- walking ---- */

typedef int (*visit_fn)(const char *abs, const char *rel, const struct stat *st, void *user);

/* Every regular file under abs (names starting with '.' left out), rel its path below the
 * walk's start. */
static int walk(const char *abs, const char *rel, int depth, visit_fn fn, void *user, nc_err *err) {
    DIR *d = opendir(abs);
    if (!d) return errno == ENOENT || errno == ENOTDIR ? 0 : nc_fail(err, "%s: %s", abs, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char a[8192], r[8192];
        struct stat st;
        if (!hub_join(a, sizeof a, abs, e->d_name, NULL) || (*rel ? !hub_join(r, sizeof r, rel, e->d_name, NULL)
                                                                  : snprintf(r, sizeof r, "%s", e->d_name) >= (int)sizeof r))
            continue;
        if (lstat(a, &st)) continue;
        if (S_ISDIR(st.st_mode) && depth < 16) rc = walk(a, r, depth + 1, fn, user, err);
        else if (S_ISREG(st.st_mode)) rc = fn(a, r, &st, user);
    }
    closedir(d);
    return rc;
}

static bool is_part(const char *name) {
    size_t n = strlen(name);
    return n > 5 && !strcmp(name + n - 5, ".part");
}

typedef struct files_walk {
    hub_files *out;
    nc_err *err;
} files_walk;

static int add_cached(const char *abs, const char *rel, const struct stat *st, void *user) {
    files_walk *w = user;
    if (is_part(rel) || !hub_path_ok(rel)) return 0;
    char oid[65] = "";
    if (!hub_oid_read(abs, oid)) oid[0] = 0;
    return hub_files_add(w->out, rel, (uint64_t)st->st_size, oid, strlen(oid) == 64, w->err);
}

static int cmp_path(const void *a, const void *b) { return strcmp(((const hub_file *)a)->path, ((const hub_file *)b)->path); }

int hub_cache_files(const char *dir, hub_files *out, nc_err *err) {
    *out = (hub_files){0};
    files_walk w = {out, err};
    if (walk(dir, "", 0, add_cached, &w, err)) {
        hub_files_free(out);
        return -1;
    }
    if (out->n) qsort(out->v, out->n, sizeof *out->v, cmp_path); /* readdir's order is the disk's */
    return 0;
}

/* ---- nc_hub_list ---- */

typedef struct entry {
    char *repo, *file;
    uint64_t size;
    bool partial;
} entry;

typedef struct list_walk {
    entry *v;
    size_t n, cap;
    const char *repo;
    nc_err *err;
} list_walk;

static int add_entry(const char *abs, const char *rel, const struct stat *st, void *user) {
    list_walk *w = user;
    bool partial = is_part(rel);
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        entry *v = realloc(w->v, cap * sizeof *v);
        if (!v) return nc_fail(w->err, "out of memory");
        w->v = v;
        w->cap = cap;
    }
    entry *e = &w->v[w->n];
    *e = (entry){.repo = strdup(w->repo), .file = strndup(rel, strlen(rel) - (partial ? 5 : 0)), .size = (uint64_t)st->st_size,
                 .partial = partial};
    if (!e->repo || !e->file) {
        free(e->repo);
        free(e->file);
        return nc_fail(w->err, "out of memory");
    }
    w->n++;
    return 0;
}

static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    int c = strcmp(x->repo, y->repo);
    return c ? c : strcmp(x->file, y->file);
}

/* The directories one level below dir (names not starting with '.'), each called with fn. */
static int each_subdir(const char *dir, int (*fn)(const char *abs, const char *name, void *user), void *user, nc_err *err) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : nc_fail(err, "%s: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        char a[8192];
        struct stat st;
        if (e->d_name[0] == '.' || !hub_join(a, sizeof a, dir, e->d_name, NULL) || lstat(a, &st) || !S_ISDIR(st.st_mode)) continue;
        rc = fn(a, e->d_name, user);
    }
    closedir(d);
    return rc;
}

typedef struct user_walk {
    list_walk *w;
    const char *user;
} user_walk;

static int list_repo(const char *abs, const char *name, void *u) {
    user_walk *uw = u;
    char repo[HUB_REPO_MAX * 2];
    snprintf(repo, sizeof repo, "%s/%s", uw->user, name);
    uw->w->repo = repo;
    return walk(abs, "", 0, add_entry, uw->w, uw->w->err);
}

static int list_user(const char *abs, const char *name, void *u) {
    user_walk uw = {u, name};
    return each_subdir(abs, list_repo, &uw, ((list_walk *)u)->err);
}

int nc_hub_list(const nc_hub_params *p, int (*each)(const nc_hub_entry *e, void *user), void *user, nc_err *err) {
    char root[4096];
    if (hub_cache_root(p ? p->cache : NULL, root, sizeof root, err)) return -1;
    list_walk w = {.err = err};
    int rc = each_subdir(root, list_user, &w, err);
    if (!rc && w.n) qsort(w.v, w.n, sizeof *w.v, cmp_entry);
    for (size_t i = 0; i < w.n && !rc; i++) {
        nc_hub_entry e = {.repo = w.v[i].repo, .file = w.v[i].file, .size = w.v[i].size, .partial = w.v[i].partial};
        if (each(&e, user)) break;
    }
    for (size_t i = 0; i < w.n; i++) {
        free(w.v[i].repo);
        free(w.v[i].file);
    }
    free(w.v);
    return rc;
}

/* ---- removing ---- */

bool hub_cache_unlink(const char *file, uint64_t *bytes) {
    char side[8192], part[8192];
    const char *paths[3] = {file, sidecar(file, side, sizeof side) ? side : NULL,
                            snprintf(part, sizeof part, "%s.part", file) < (int)sizeof part ? part : NULL};
    bool any = false;
    for (int i = 0; i < 3; i++) {
        struct stat st;
        if (!paths[i] || lstat(paths[i], &st) || S_ISDIR(st.st_mode) || unlink(paths[i])) continue;
        if (i != 1) { /* the sidecar is not a file of the model */
            *bytes += (uint64_t)st.st_size;
            any = true;
        }
    }
    return any;
}

void hub_cache_prune(const char *dir, const char *root) {
    char buf[8192];
    snprintf(buf, sizeof buf, "%s", dir);
    size_t n_root = strlen(root);
    while (strlen(buf) > n_root && !strncmp(buf, root, n_root) && buf[n_root] == '/' && rmdir(buf) == 0) {
        char *slash = strrchr(buf, '/');
        if (!slash) break;
        *slash = 0;
    }
}

/* Everything under path (symlinks removed, not followed); files that are not the cache's own
 * counted. */
static void rm_tree(const char *path, int32_t *n_files, uint64_t *bytes) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char a[8192];
        struct stat st;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !hub_join(a, sizeof a, path, e->d_name, NULL) || lstat(a, &st))
            continue;
        if (S_ISDIR(st.st_mode)) {
            rm_tree(a, n_files, bytes);
            rmdir(a);
        } else if (unlink(a) == 0 && e->d_name[0] != '.') {
            (*n_files)++;
            *bytes += (uint64_t)st.st_size;
        }
    }
    closedir(d);
}

typedef struct quant_walk {
    const char *quant, *dir, *root;
    int32_t *n_files;
    uint64_t *bytes;
} quant_walk;

/* A file of the quant: its tag, or its whole path (a .part counts as the file it becomes). */
static int rm_quant(const char *abs, const char *rel, const struct stat *st, void *user) {
    quant_walk *q = user;
    char name[HUB_PATH_MAX + 8];
    snprintf(name, sizeof name, "%.*s", (int)(strlen(rel) - (is_part(rel) ? 5 : 0)), rel);
    hub_gguf_name g;
    const char *base = strrchr(name, '/');
    if (!hub_gguf_name_parse(name, &g) ||
        (strcasecmp(g.tag, q->quant) && strcmp(name, q->quant) && strcmp(base ? base + 1 : name, q->quant)))
        return 0;
    char file[8192];
    if (hub_join(file, sizeof file, q->dir, name, NULL) && hub_cache_unlink(file, q->bytes)) {
        (*q->n_files)++;
        *strrchr(file, '/') = 0; /* its directory goes too when that was its last file */
        hub_cache_prune(file, q->root);
    }
    return 0;
}

int nc_hub_remove(const char *ref_text, const nc_hub_params *p, int32_t *n_files, uint64_t *bytes, nc_err *err) {
    *n_files = 0;
    *bytes = 0;
    hub_ref ref;
    char root[4096], dir[4096 + HUB_REPO_MAX + 2];
    struct stat st;
    if (hub_ref_parse(ref_text, &ref, err) || hub_cache_root(p ? p->cache : NULL, root, sizeof root, err)) return -1;
    if (!hub_join(dir, sizeof dir, root, ref.repo, NULL)) return nc_fail(err, "the cache's path is too long");
    if (lstat(dir, &st) || !S_ISDIR(st.st_mode)) return nc_fail(err, "%s is not in the cache (%s)", ref.repo, root);
    if (!*ref.quant) {
        rm_tree(dir, n_files, bytes);
        hub_cache_prune(dir, root);
        return 0;
    }
    quant_walk q = {ref.quant, dir, root, n_files, bytes};
    if (walk(dir, "", 0, rm_quant, &q, err)) return -1;
    if (!*n_files) {
        hub_files fs;
        char tags[512] = "";
        if (!hub_cache_files(dir, &fs, err)) {
            size_t n = 0;
            for (size_t i = 0; i < fs.n; i++) {
                hub_gguf_name g;
                if (hub_gguf_name_parse(fs.v[i].path, &g) && g.index == 1 && n + 1 < sizeof tags)
                    n += (size_t)snprintf(tags + n, sizeof tags - n, "%s%s", n ? ", " : "", *g.tag ? g.tag : fs.v[i].path);
            }
            hub_files_free(&fs);
        }
        return nc_fail(err, "the cache has no file of %s:%s%s%s", ref.repo, ref.quant, *tags ? "; it has: " : "", tags);
    }
    hub_cache_prune(dir, root);
    return 0;
}
