/* The hub layer's own pieces behind nc_hub_* (include/nucleus.h): which files a name means
 * (pick.c), the HTTP requests (http.c), the cache on disk (cache.c), one file fetched into it
 * (fetch.c), and the whole request (hub.c). */
#ifndef NC_HUB_H
#define NC_HUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* ---- names and files (pick.c) ---- */

#define HUB_REPO_MAX 256
#define HUB_PATH_MAX 1024

/* "USER/REPO[:QUANT]": repo as the hub spells it, quant "" when none was given. */
typedef struct hub_ref {
    char repo[HUB_REPO_MAX];
    char quant[128];
} hub_ref;
/* USER and REPO are letters, digits, '_', '-' and '.', neither starting nor ending with '-' or
 * '.' (the hub's own rule); an error says what is wrong with s. */
int hub_ref_parse(const char *s, hub_ref *out, nc_err *err);

/* A file of a repository: its path there, its size, and its id on the hub (LFS files: the
 * SHA-256 of its bytes, 64 hex digits; others: git's blob id, or "" when unknown). */
typedef struct hub_file {
    char *path;
    uint64_t size;
    char oid[65];
    bool lfs;
} hub_file;
typedef struct hub_files {
    hub_file *v;
    size_t n, cap;
} hub_files;
int hub_files_add(hub_files *fs, const char *path, uint64_t size, const char *oid, bool lfs, nc_err *err);
const hub_file *hub_files_find(const hub_files *fs, const char *path);
void hub_files_free(hub_files *fs);

/* Whether a path from the hub may become a path in the cache: relative, components not empty,
 * not "." or "..", none starting with '.' (the cache's own files do), no control characters or
 * backslashes, at most HUB_PATH_MAX bytes. */
bool hub_path_ok(const char *path);

/* What a GGUF file's name says: its quant tag ("Q4_K_M", upper case; "" when the name has none)
 * and, for a part of a split, its index and count (else 1 of 1). false: not a model's GGUF
 * (another extension, or a projector or importance matrix). */
typedef struct hub_gguf_name {
    char tag[64];
    int index, count;
    size_t stem_len;   /* bytes of the path before "-00001-of-00003.gguf" (or ".gguf") */
} hub_gguf_name;
bool hub_gguf_name_parse(const char *path, hub_gguf_name *out);

/* What to fetch for a name: the GGUF file of the quant (every part of a split), or a
 * safetensors model's files. */
typedef enum hub_kind { HUB_GGUF, HUB_SAFETENSORS } hub_kind;
typedef struct hub_plan {
    hub_kind kind;
    size_t *files;     /* indices into the listing, in the order to fetch */
    size_t n, cap;
    size_t main;       /* HUB_GGUF: the file to load (the first part) */
    bool index;        /* HUB_SAFETENSORS: the weights are shards named by model.safetensors.index.json */
} hub_plan;
/* Choose among a repository's files (the hub's listing, or the cache's when offline); where
 * names the source in errors ("the repository", "the cache"). */
int hub_pick(const hub_files *fs, const hub_ref *ref, const char *where, hub_plan *plan, nc_err *err);
/* The shards a safetensors index (its JSON text) names, added to the plan. */
int hub_pick_shards(const hub_files *fs, const char *index_json, size_t len, const char *where, hub_plan *plan,
                    nc_err *err);
void hub_plan_free(hub_plan *plan);

/* ---- HTTP (http.c) ---- */

/* Where the body of a 2xx answer goes: begin once (the status, and for a 206 the first byte's
 * offset from Content-Range), then write as bytes arrive; false from either aborts. */
typedef struct hub_sink {
    bool (*begin)(void *user, long status, uint64_t start);
    bool (*write)(void *user, const void *data, size_t n);
    void *user;
} hub_sink;

typedef struct hub_answer {
    long status;            /* the final answer's HTTP status (0: none came) */
    char error_code[64];    /* its X-Error-Code header (the hub's "RepoNotFound", "GatedRepo", ...) */
    char message[256];      /* X-Error-Message, else the "error" of a JSON body, else the body's start */
    char next[2048];        /* the Link header's rel="next" URL (a listing's next page), or "" */
    char failure[256];      /* a transfer that failed: why (curl's words), else "" */
    bool aborted;           /* the sink stopped it */
} hub_answer;

/* GET url (redirects followed, http and https only) with "Authorization: Bearer token" when token
 * is not empty, and "Range: bytes=from-" when from > 0. A 2xx body goes to the sink, another's is
 * kept for the message. 0: an answer came whole (any status); -1: the transfer failed or was
 * aborted (answer->failure, ->aborted). */
int hub_http_get(const char *url, const char *token, uint64_t from, const hub_sink *sink, hub_answer *answer);
/* The same into memory (at most max bytes; more is a failure): *body malloc'd, NUL-terminated. */
int hub_http_get_text(const char *url, const char *token, size_t max, char **body, size_t *len, hub_answer *answer);
/* A path with each component percent-encoded as a URL needs (malloc'd; NULL: out of memory). */
char *hub_url_path(const char *path);

/* ---- the cache (cache.c) ---- */

int hub_cache_root(const char *given, char *out, size_t cap, nc_err *err);
/* buf = a/b[/c]; false when it does not fit. */
bool hub_join(char *buf, size_t cap, const char *a, const char *b, const char *c);
/* Make every directory of path but its last component. */
int hub_mkdirs(const char *path, nc_err *err);
/* The complete files under dir (a repository's directory), paths relative to it, with the oid
 * each was checked against (its sidecar); a missing dir gives none. */
int hub_cache_files(const char *dir, hub_files *out, nc_err *err);
/* The oid recorded beside a cached file (its sidecar ".NAME.oid"): false when there is none. */
bool hub_oid_read(const char *file, char oid[65]);
int hub_oid_write(const char *file, const char *oid, nc_err *err);
/* Remove a cached file with its sidecar and its .part; bytes removed added to *bytes. false: none of them was there. */
bool hub_cache_unlink(const char *file, uint64_t *bytes);
/* Remove dir and then its parent when they are empty (after the last file of a repository went). */
void hub_cache_prune(const char *dir, const char *root);
/* Open a file for reading only if it is a regular file (not a FIFO, device or symlink): a file
 * descriptor, or -1 with errno set (EINVAL: not a regular file). */
int hub_open_regular(const char *path);

/* ---- one file (fetch.c) ---- */

typedef struct hub_ctx {
    char endpoint[1024];
    char token[1024];
    char root[4096];        /* the cache */
    char dir[4096 + HUB_REPO_MAX + 2]; /* root/USER/REPO */
    const char *repo;
    bool offline;
    int (*progress)(const nc_hub_progress *p, void *user);
    void *user;
} hub_ctx;
/* Make f present and checked at ctx->dir/f->path: taken from the cache when there with the same
 * size and id, else downloaded (resumed from its .part). index, count: for the progress. */
int hub_fetch(const hub_ctx *ctx, const hub_file *f, int index, int count, nc_err *err);
/* Hex SHA-256 of a whole file (fd read from its start). */
int hub_hash_file(int fd, uint64_t n, char hex[65], nc_err *err);
/* The error for an HTTP answer that is not a success, about what (a repository, a file). */
int hub_http_fail(const hub_ctx *ctx, const hub_answer *a, const char *what, nc_err *err);

#endif
