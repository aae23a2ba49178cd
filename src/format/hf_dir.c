#include "format/hf_dir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define MAX_JSON_BYTES (1ull << 30)     /* tokenizer.json files run to tens of MB */
#define MAX_TEMPLATE_BYTES (16u << 20)
#define WHAT_DIR_HOLDS                                                                            \
    "a Hugging Face model directory holds config.json and the weights as model.safetensors or as " \
    "shards listed by " INDEX_NAME

typedef unsigned long long ull;

/* Open addressing from names to item numbers (tensors, shard names). */
typedef struct str_index {
    size_t *slots; /* item + 1; 0 = empty */
    size_t mask;
} str_index;

struct hf_dir {
    char *path;
    cJSON *config;
    st_file **files;
    char **file_names; /* as the index names them (or SINGLE_NAME) */
    size_t n_files;
    const st_tensor **tensors;
    uint32_t *tensor_file; /* file number of each tensor */
    size_t n_tensors;
    str_index index;       /* tensor name -> position in tensors */
    const char **alias_names; /* names a file's __metadata__ gives to one of its tensors */
    size_t *alias_target;     /* position in tensors */
    size_t n_aliases;
    str_index alias_index;
    uint64_t file_bytes;
};

/* ---- small helpers ------------------------------------------------------------------------- */

bool hf_join(char *buf, size_t cap, const char *dir, const char *name) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    return n >= 0 && (size_t)n < cap;
}

/* Whether dir/name is there, whatever it is: reading it refuses what is not a regular file, and
 * says so (a FIFO named model.safetensors is not "missing"). */
static bool present(const char *dir, const char *name) {
    char path[4096];
    struct stat st;
    return hf_join(path, sizeof path, dir, name) && stat(path, &st) == 0;
}

static size_t hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return (size_t)h;
}

static bool index_init(str_index *ix, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    ix->slots = calloc(cap, sizeof *ix->slots);
    ix->mask = cap - 1;
    return ix->slots != NULL;
}

/* The slot of name: empty, or holding the item whose name (names(ctx, item)) equals it. */
static size_t *index_slot(const str_index *ix, const char *name, const char *(*name_of)(const void *, size_t),
                          const void *ctx) {
    size_t i = hash_str(name) & ix->mask;
    while (ix->slots[i] && strcmp(name_of(ctx, ix->slots[i] - 1), name) != 0) i = (i + 1) & ix->mask;
    return &ix->slots[i];
}

static const char *tensor_name(const void *ctx, size_t i) { return ((const hf_dir *)ctx)->tensors[i]->t.name; }
static const char *file_name(const void *ctx, size_t i) { return ((const hf_dir *)ctx)->file_names[i]; }
static const char *alias_name(const void *ctx, size_t i) { return ((const hf_dir *)ctx)->alias_names[i]; }

/* ---- files ---------------------------------------------------------------------------------- */

int hf_read_path(const char *path, size_t max, char **out, size_t *len, nc_err *err) {
    *out = NULL;
    *len = 0;
    int fd = nc_open_regular(path, err);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    FILE *fp = fdopen(fd, "rb");
    struct stat st;
    if (!fp || fstat(fd, &st) != 0) {
        int e = errno;
        if (fp) fclose(fp);
        else close(fd);
        return nc_fail(err, "%s: cannot read: %s", path, strerror(e));
    }
    if ((uint64_t)st.st_size > max) {
        fclose(fp);
        return nc_fail(err, "%s: %llu bytes, more than the %zu allowed", path, (ull)st.st_size, max);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(fp);
        return nc_fail(err, "%s: out of memory for %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, fp);
    int bad = ferror(fp);
    fclose(fp);
    if (got != n || bad) {
        free(buf);
        return nc_fail(err, "%s: read %zu of %zu bytes", path, got, n);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 1;
}

int hf_read_file(const char *dir, const char *name, size_t max, char **out, size_t *len, nc_err *err) {
    char path[4096];
    *out = NULL;
    *len = 0;
    if (!hf_join(path, sizeof path, dir, name)) return nc_fail(err, "%s/%s: path too long", dir, name);
    return hf_read_path(path, max, out, len, err);
}

int hf_read_json(const char *dir, const char *name, bool object_only, cJSON **out, nc_err *err) {
    char *text;
    size_t len;
    *out = NULL;
    int r = hf_read_file(dir, name, MAX_JSON_BYTES, &text, &len, err);
    if (r <= 0) return r;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
    size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    if (j) /* only whitespace may follow the value */
        while (at < len && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r')) at++;
    free(text);
    if (!j || at < len) {
        cJSON_Delete(j);
        return nc_fail(err, "%s/%s: not valid JSON (error at byte offset %zu of %zu)", dir, name, at, len);
    }
    if (object_only && !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return nc_fail(err, "%s/%s: not a JSON object", dir, name);
    }
    *out = j;
    return 1;
}

/* ---- weights -------------------------------------------------------------------------------- */

/* A shard name from the index: relative, without "." / ".." components or empty ones, so that
 * it names a file inside the directory (lexically: symlinks inside are followed). */
static bool shard_name_ok(const char *s) {
    if (!*s || *s == '/' || strlen(s) > 1024) return false;
    for (const char *p = s; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) return false;
        p += n;
        if (*p == '/') p++;
        if (!*p && p[-1] == '/') return false; /* trailing slash */
    }
    return strchr(s, '\\') == NULL;
}

static int add_file(hf_dir *d, const char *name, nc_err *err) {
    char path[4096];
    if (!hf_join(path, sizeof path, d->path, name)) return nc_fail(err, "%s/%s: path too long", d->path, name);
    size_t i = d->n_files;
    d->file_names[i] = strdup(name);
    if (!d->file_names[i]) return nc_fail(err, "%s: out of memory", path);
    d->n_files++;
    if (st_open(&d->files[i], path, err)) return -1;
    d->file_bytes += st_file_size(d->files[i]);
    return 0;
}

/* The distinct shard names of the weight map, in order of first mention. */
static int open_shards(hf_dir *d, const cJSON *map, nc_err *err) {
    size_t n = (size_t)cJSON_GetArraySize(map);
    str_index seen = {0};
    d->files = calloc(n ? n : 1, sizeof *d->files);
    d->file_names = calloc(n ? n : 1, sizeof *d->file_names);
    if (!d->files || !d->file_names || !index_init(&seen, n))
        return nc_fail(err, "%s/%s: out of memory for %zu entries", d->path, INDEX_NAME, n);
    int rc = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        char shown[128];
        if (!cJSON_IsString(e)) {
            rc = nc_fail(err, "%s/%s: weight_map: the value of '%.100s' is not a file name", d->path, INDEX_NAME,
                         e->string);
            break;
        }
        if (!shard_name_ok(e->valuestring)) {
            snprintf(shown, sizeof shown, "%.100s", e->valuestring);
            rc = nc_fail(err, "%s/%s: weight_map: tensor '%.100s' is in shard '%s', a path that leaves the directory "
                              "(shards must be relative paths without '.' or '..')",
                         d->path, INDEX_NAME, e->string, shown);
            break;
        }
        size_t *slot = index_slot(&seen, e->valuestring, file_name, d);
        if (*slot) continue;
        if (!present(d->path, e->valuestring)) {
            rc = nc_fail(err, "%s/%s: weight_map names shard '%.200s' (for tensor '%.100s'), which is missing", d->path,
                         INDEX_NAME, e->valuestring, e->string);
            break;
        }
        if ((rc = add_file(d, e->valuestring, err))) break;
        *slot = d->n_files;
    }
    free(seen.slots);
    return rc;
}

/* Every name of the weight map is a tensor of the shard it names. */
static int check_weight_map(const hf_dir *d, const cJSON *map, nc_err *err) {
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        const st_tensor *t = hf_dir_find_st_tensor(d, e->string);
        const st_file *f = t ? hf_dir_file_of(d, &t->t) : NULL;
        size_t i = 0;
        while (f && i < d->n_files && d->files[i] != f) i++;
        if (!t)
            return nc_fail(err, "%s/%s: weight_map names tensor '%.100s' in shard '%.200s', which does not hold it",
                           d->path, INDEX_NAME, e->string, e->valuestring);
        if (strcmp(d->file_names[i], e->valuestring) != 0)
            return nc_fail(err, "%s/%s: weight_map names tensor '%.100s' in shard '%.200s', but it is in '%.200s'",
                           d->path, INDEX_NAME, e->string, e->valuestring, d->file_names[i]);
    }
    return 0;
}

static int open_index(hf_dir *d, cJSON **index, nc_err *err) {
    if (hf_read_json(d->path, INDEX_NAME, true, index, err) < 0) return -1;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(*index, "weight_map");
    if (!cJSON_IsObject(map)) return nc_fail(err, "%s/%s: no \"weight_map\" object", d->path, INDEX_NAME);
    if (!map->child) return nc_fail(err, "%s/%s: \"weight_map\" is empty", d->path, INDEX_NAME);
    return open_shards(d, map, err);
}

static int missing_weights(const hf_dir *d, nc_err *err) {
    static const char *const others[] = {"pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt",
                                         "consolidated.safetensors", "tf_model.h5"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        if (present(d->path, others[i]))
            return nc_fail(err, "%s: no %s or %s, only %s (only safetensors weights are supported); " WHAT_DIR_HOLDS,
                           d->path, SINGLE_NAME, INDEX_NAME, others[i]);
    return nc_fail(err, "%s: no %s or %s: " WHAT_DIR_HOLDS, d->path, SINGLE_NAME, INDEX_NAME);
}

/* One index over the tensors of every file; a name in two files is an error. */
static int index_tensors(hf_dir *d, nc_err *err) {
    size_t n = 0;
    for (size_t i = 0; i < d->n_files; i++) n += st_n_tensors(d->files[i]);
    d->tensors = malloc((n ? n : 1) * sizeof *d->tensors);
    d->tensor_file = malloc((n ? n : 1) * sizeof *d->tensor_file);
    if (!d->tensors || !d->tensor_file || !index_init(&d->index, n))
        return nc_fail(err, "%s: out of memory for %zu tensors", d->path, n);
    for (size_t i = 0; i < d->n_files; i++) {
        for (size_t k = 0; k < st_n_tensors(d->files[i]); k++) {
            const st_tensor *t = st_tensor_at(d->files[i], k);
            size_t *slot = index_slot(&d->index, t->t.name, tensor_name, d);
            if (*slot)
                return nc_fail(err, "%s: tensor '%.100s' is in two files: %.200s (header offset %llu) and %.200s (header "
                                    "offset %llu)",
                               d->path, t->t.name, d->file_names[d->tensor_file[*slot - 1]],
                               (ull)d->tensors[*slot - 1]->t.info_offset, d->file_names[i], (ull)t->t.info_offset);
            d->tensors[d->n_tensors] = t;
            d->tensor_file[d->n_tensors] = (uint32_t)i;
            *slot = ++d->n_tensors;
        }
    }
    return 0;
}

/* Tied weights saved by safetensors' save_model keep one copy; the file's __metadata__ maps each
 * removed name to the kept one ("model.embed_tokens.weight": "lm_head.weight"). Such a pair, whose
 * key is no tensor and whose value is a tensor of the same file, makes the key an alias. */
static int index_aliases(hf_dir *d, nc_err *err) {
    size_t n = 0;
    for (size_t i = 0; i < d->n_files; i++) n += st_n_metadata(d->files[i]);
    d->alias_names = malloc((n ? n : 1) * sizeof *d->alias_names);
    d->alias_target = malloc((n ? n : 1) * sizeof *d->alias_target);
    if (!d->alias_names || !d->alias_target || !index_init(&d->alias_index, n))
        return nc_fail(err, "%s: out of memory", d->path);
    for (size_t i = 0; i < d->n_files; i++) {
        for (size_t k = 0; k < st_n_metadata(d->files[i]); k++) {
            const char *key, *value;
            st_metadata_at(d->files[i], k, &key, &value);
            const st_tensor *t = st_find_tensor(d->files[i], value);
            if (!t || *index_slot(&d->index, key, tensor_name, d)) continue;
            size_t *slot = index_slot(&d->alias_index, key, alias_name, d);
            if (*slot) continue; /* the first file's alias wins */
            d->alias_names[d->n_aliases] = key;
            d->alias_target[d->n_aliases] = *index_slot(&d->index, value, tensor_name, d) - 1;
            *slot = ++d->n_aliases;
        }
    }
    return 0;
}

static int open_weights(hf_dir *d, nc_err *err) {
    if (present(d->path, SINGLE_NAME)) {
        d->files = calloc(1, sizeof *d->files);
        d->file_names = calloc(1, sizeof *d->file_names);
        if (!d->files || !d->file_names) return nc_fail(err, "%s: out of memory", d->path);
        return add_file(d, SINGLE_NAME, err) || index_tensors(d, err) || index_aliases(d, err) ? -1 : 0;
    }
    if (!present(d->path, INDEX_NAME)) return missing_weights(d, err);
    cJSON *index = NULL;
    int rc = open_index(d, &index, err);
    if (rc == 0) rc = index_tensors(d, err);
    if (rc == 0) rc = index_aliases(d, err);
    if (rc == 0) rc = check_weight_map(d, cJSON_GetObjectItemCaseSensitive(index, "weight_map"), err);
    cJSON_Delete(index);
    return rc;
}

static int open_dir(hf_dir *d, nc_err *err) {
    struct stat st;
    if (stat(d->path, &st) != 0) return nc_fail(err, "%s: cannot open: %s", d->path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return nc_fail(err, "%s: not a directory", d->path);
    int r = hf_read_json(d->path, "config.json", true, &d->config, err);
    if (r < 0) return -1;
    if (r == 0) return nc_fail(err, "%s: no config.json: " WHAT_DIR_HOLDS, d->path);
    return open_weights(d, err);
}

int hf_dir_open(hf_dir **out, const char *dir, nc_err *err) {
    *out = NULL;
    hf_dir *d = calloc(1, sizeof *d);
    if (!d || !(d->path = strdup(dir))) {
        free(d);
        return nc_fail(err, "%s: out of memory", dir);
    }
    size_t n = strlen(d->path);
    while (n > 1 && d->path[n - 1] == '/') d->path[--n] = 0;
    if (open_dir(d, err)) {
        hf_dir_close(d);
        return -1;
    }
    *out = d;
    return 0;
}

void hf_dir_close(hf_dir *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n_files; i++) {
        st_close(d->files[i]);
        free(d->file_names[i]);
    }
    free(d->files);
    free(d->file_names);
    free(d->tensors);
    free(d->tensor_file);
    free(d->index.slots);
    free(d->alias_names);
    free(d->alias_target);
    free(d->alias_index.slots);
    cJSON_Delete(d->config);
    free(d->path);
    free(d);
}

/* ---- accessors ------------------------------------------------------------------------------- */

const char *hf_dir_path(const hf_dir *d) { return d->path; }
const cJSON *hf_dir_config(const hf_dir *d) { return d->config; }
uint64_t hf_dir_file_bytes(const hf_dir *d) { return d->file_bytes; }
size_t hf_dir_n_files(const hf_dir *d) { return d->n_files; }
const st_file *hf_dir_file_at(const hf_dir *d, size_t i) { return i < d->n_files ? d->files[i] : NULL; }
size_t hf_dir_n_tensors(const hf_dir *d) { return d->n_tensors; }
const fmt_tensor *hf_dir_tensor_at(const hf_dir *d, size_t i) { return i < d->n_tensors ? &d->tensors[i]->t : NULL; }

static long find_pos(const hf_dir *d, const char *name) {
    if (!name || !d->index.slots) return -1;
    size_t *slot = index_slot(&d->index, name, tensor_name, d);
    if (*slot) return (long)(*slot - 1);
    if (!d->alias_index.slots) return -1;
    slot = index_slot(&d->alias_index, name, alias_name, d);
    return *slot ? (long)d->alias_target[*slot - 1] : -1;
}

const st_tensor *hf_dir_find_st_tensor(const hf_dir *d, const char *name) {
    long i = find_pos(d, name);
    return i < 0 ? NULL : d->tensors[i];
}

const fmt_tensor *hf_dir_find_tensor(const hf_dir *d, const char *name) {
    const st_tensor *t = hf_dir_find_st_tensor(d, name);
    return t ? &t->t : NULL;
}

const st_file *hf_dir_file_of(const hf_dir *d, const fmt_tensor *t) {
    long i = t ? find_pos(d, t->name) : -1;
    return i >= 0 && &d->tensors[i]->t == t ? d->files[d->tensor_file[i]] : NULL;
}

/* ---- chat template -------------------------------------------------------------------------- */

static int copy_template(const char *s, char **out, size_t *len, const char *where, nc_err *err) {
    if (!(*out = strdup(s))) return nc_fail(err, "%s: out of memory", where);
    *len = strlen(s);
    return 1;
}

/* A "chat_template" value: a string, or a list of {"name", "template"} where "default" wins. */
static int template_value(const cJSON *v, const char *where, char **out, size_t *len, nc_err *err) {
    if (cJSON_IsString(v)) return copy_template(v->valuestring, out, len, where, err);
    if (!cJSON_IsArray(v))
        return nc_fail(err, "%s: \"chat_template\" is neither a string nor a list of named templates", where);
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, v) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(e, "template");
        if (!cJSON_IsString(name) || !cJSON_IsString(tmpl))
            return nc_fail(err, "%s: \"chat_template\"[%d] is not an object with string \"name\" and \"template\"",
                           where, i);
        if (strcmp(name->valuestring, "default") == 0) return copy_template(tmpl->valuestring, out, len, where, err);
        i++;
    }
    return nc_fail(err, "%s: \"chat_template\" lists %d templates but none named \"default\"", where, i);
}

static int template_from_json(const hf_dir *d, const char *name, char **out, size_t *len, nc_err *err) {
    cJSON *j;
    int r = hf_read_json(d->path, name, true, &j, err);
    if (r <= 0) return r;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    char where[4200];
    snprintf(where, sizeof where, "%s/%s", d->path, name);
    r = v && !cJSON_IsNull(v) ? template_value(v, where, out, len, err) : 0;
    cJSON_Delete(j);
    return r;
}

int hf_dir_chat_template(const hf_dir *d, char **out, size_t *len, nc_err *err) {
    *out = NULL;
    *len = 0;
    int r = hf_read_file(d->path, "chat_template.jinja", MAX_TEMPLATE_BYTES, out, len, err);
    if (r != 0) return r;
    if ((r = template_from_json(d, "chat_template.json", out, len, err)) != 0) return r;
    return template_from_json(d, "tokenizer_config.json", out, len, err);
}
