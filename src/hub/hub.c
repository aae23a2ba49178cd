/* nc_hub_get: a name on the hub to a model on disk. The repository's files are listed (the hub's
 * tree API, page after page), the files the name means are chosen (pick.c), and each is fetched
 * into the cache or found there (fetch.c); offline, the cache's files stand for the listing. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hub/hub.h"

enum { LISTING_MAX = 64 << 20, PAGES_MAX = 64, INDEX_MAX = 64 << 20 };

static bool hex_string(const char *s, size_t n) {
    if (strlen(s) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

/* One page of the tree listing: [{"type": "file", "path", "size", "oid", "lfs": {"oid", "size"}}, ...].
 * Directories, and files whose path the cache could not hold, are left out. */
static int parse_listing(const hub_ctx *ctx, const char *body, size_t len, hub_files *fs, nc_err *err) {
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return nc_fail(err, "%s: the file listing from %s is not a JSON array", ctx->repo, ctx->endpoint);
    }
    const cJSON *item;
    int rc = 0;
    cJSON_ArrayForEach(item, root) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "type"), *path = cJSON_GetObjectItemCaseSensitive(item, "path"),
                    *size = cJSON_GetObjectItemCaseSensitive(item, "size"), *oid = cJSON_GetObjectItemCaseSensitive(item, "oid"),
                    *lfs = cJSON_GetObjectItemCaseSensitive(item, "lfs");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "file") || !cJSON_IsString(path) || !hub_path_ok(path->valuestring))
            continue;
        bool is_lfs = cJSON_IsObject(lfs);
        if (is_lfs) {
            oid = cJSON_GetObjectItemCaseSensitive(lfs, "oid");
            const cJSON *lsize = cJSON_GetObjectItemCaseSensitive(lfs, "size");
            if (cJSON_IsNumber(lsize)) size = lsize;
            if (!cJSON_IsString(oid) || !hex_string(oid->valuestring, 64)) {
                rc = nc_fail(err, "%s: the listing gives %s an LFS oid that is not a SHA-256", ctx->repo, path->valuestring);
                break;
            }
        }
        if (!cJSON_IsNumber(size) || size->valuedouble < 0 || size->valuedouble > 9007199254740992.0) {
            rc = nc_fail(err, "%s: the listing gives %s no size", ctx->repo, path->valuestring);
            break;
        }
        const char *id = cJSON_IsString(oid) && hex_string(oid->valuestring, is_lfs ? 64 : 40) ? oid->valuestring : "";
        if ((rc = hub_files_add(fs, path->valuestring, (uint64_t)size->valuedouble, id, is_lfs, err))) break;
    }
    cJSON_Delete(root);
    return rc;
}

static int list_remote(const hub_ctx *ctx, hub_files *fs, nc_err *err) {
    char url[2048];
    if (snprintf(url, sizeof url, "%s/api/models/%s/tree/main?recursive=true", ctx->endpoint, ctx->repo) >= (int)sizeof url)
        return nc_fail(err, "the endpoint's URL is too long");
    for (int page = 0; page < PAGES_MAX; page++) {
        hub_answer a;
        char *body;
        size_t len;
        if (hub_http_get_text(url, ctx->token, LISTING_MAX, &body, &len, &a))
            return nc_fail(err, "%s: cannot list its files at %s: %s (--offline takes a model from the cache)", ctx->repo,
                           ctx->endpoint, a.failure);
        if (a.status != 200) {
            free(body);
            return hub_http_fail(ctx, &a, NULL, err);
        }
        int rc = parse_listing(ctx, body, len, fs, err);
        free(body);
        if (rc) return -1;
        if (!*a.next) return 0;
        /* the token goes only where the endpoint is */
        size_t n = strlen(ctx->endpoint);
        if (strncmp(a.next, ctx->endpoint, n) || a.next[n] != '/')
            return nc_fail(err, "%s: the listing's next page is on another server (%s)", ctx->repo, a.next);
        snprintf(url, sizeof url, "%s", a.next);
    }
    return nc_fail(err, "%s: the file listing has more than %d pages", ctx->repo, PAGES_MAX);
}

static int ctx_init(hub_ctx *ctx, const hub_ref *ref, const nc_hub_params *p, nc_err *err) {
    const char *endpoint = p->endpoint ? p->endpoint : getenv("HF_ENDPOINT"),
               *token = p->token ? p->token : getenv("HF_TOKEN");
    if (!endpoint || !*endpoint) endpoint = "https://huggingface.co";
    if (strncmp(endpoint, "http://", 7) && strncmp(endpoint, "https://", 8))
        return nc_fail(err, "the hub's endpoint '%s' (HF_ENDPOINT) is not an http:// or https:// URL", endpoint);
    if (snprintf(ctx->endpoint, sizeof ctx->endpoint, "%s", endpoint) >= (int)sizeof ctx->endpoint)
        return nc_fail(err, "the hub's endpoint is too long");
    for (size_t n = strlen(ctx->endpoint); n > 8 && ctx->endpoint[n - 1] == '/';) ctx->endpoint[--n] = 0;
    if (!token) token = "";
    if (strlen(token) >= sizeof ctx->token) return nc_fail(err, "HF_TOKEN is too long");
    for (const char *c = token; *c; c++)
        if ((unsigned char)*c < 0x21 || *c == 0x7f) return nc_fail(err, "HF_TOKEN holds a space or a control character");
    strcpy(ctx->token, token);
    if (hub_cache_root(p->cache, ctx->root, sizeof ctx->root, err)) return -1;
    if (!hub_join(ctx->dir, sizeof ctx->dir, ctx->root, ref->repo, NULL)) return nc_fail(err, "the cache's path is too long");
    ctx->repo = ref->repo;
    ctx->offline = p->offline;
    ctx->progress = p->progress;
    ctx->user = p->user;
    return 0;
}

/* A small file of the cache, whole (malloc'd, NUL-terminated). */
static int read_cached(const hub_ctx *ctx, const char *name, char **out, size_t *len, nc_err *err) {
    char path[8192];
    if (!hub_join(path, sizeof path, ctx->dir, name, NULL)) return nc_fail(err, "%s: the path is too long", name);
    int fd = hub_open_regular(path);
    if (fd < 0) return nc_fail(err, "%s: %s", path, strerror(errno));
    off_t n = lseek(fd, 0, SEEK_END);
    char *buf = n >= 0 && n <= INDEX_MAX ? malloc((size_t)n + 1) : NULL;
    if (!buf || pread(fd, buf, (size_t)n, 0) != n) {
        free(buf);
        close(fd);
        return nc_fail(err, "%s: cannot be read whole", path);
    }
    close(fd);
    buf[n] = 0;
    *out = buf;
    *len = (size_t)n;
    return 0;
}

int nc_hub_get(const char *ref_text, const nc_hub_params *p, char *path, size_t cap, nc_err *err) {
    static const nc_hub_params none;
    hub_ref ref;
    hub_ctx ctx = {0};
    hub_files fs = {0};
    hub_plan plan = {0};
    char where[HUB_REPO_MAX + 64];
    int rc = -1;
    if (!p) p = &none;
    if (hub_ref_parse(ref_text, &ref, err) || ctx_init(&ctx, &ref, p, err)) return -1;
    if (ctx.offline) {
        if (hub_cache_files(ctx.dir, &fs, err)) return -1;
        if (!fs.n) return nc_fail(err, "%s is not in the cache (%s): run without --offline to download it", ref.repo, ctx.root);
        snprintf(where, sizeof where, "the cache's copy of %s", ref.repo);
    } else {
        if (list_remote(&ctx, &fs, err)) goto out;
        snprintf(where, sizeof where, "%s", ref.repo);
    }
    if (hub_pick(&fs, &ref, where, &plan, err)) goto out;
    if (plan.kind == HUB_SAFETENSORS && plan.index) { /* the index first: it names the shards */
        const hub_file *index = hub_files_find(&fs, "model.safetensors.index.json");
        char *json = NULL;
        size_t len = 0;
        if (hub_fetch(&ctx, index, 0, 0, err) || read_cached(&ctx, index->path, &json, &len, err)) goto out;
        int bad = hub_pick_shards(&fs, json, len, where, &plan, err);
        free(json);
        if (bad) goto out;
    }
    int n = 0, count = 0;
    for (size_t i = 0; i < plan.n; i++) count += strcmp(fs.v[plan.files[i]].path, "model.safetensors.index.json") != 0;
    for (size_t i = 0; i < plan.n; i++) {
        const hub_file *f = &fs.v[plan.files[i]];
        if (plan.kind == HUB_SAFETENSORS && !strcmp(f->path, "model.safetensors.index.json")) continue;
        if (hub_fetch(&ctx, f, ++n, count, err)) goto out;
    }
    bool fits = plan.kind == HUB_GGUF ? hub_join(path, cap, ctx.dir, fs.v[plan.main].path, NULL)
                                      : (size_t)snprintf(path, cap, "%s", ctx.dir) < cap;
    rc = fits ? 0 : nc_fail(err, "the model's path does not fit %zu bytes", cap);
out:
    hub_plan_free(&plan);
    hub_files_free(&fs);
    return rc;
}
