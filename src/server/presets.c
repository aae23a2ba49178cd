/* --models-dir and --models FILE into the router's presets (see presets.h). */
#include "server/presets.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "hub/hub.h"

__attribute__((format(printf, 2, 3))) static int fail(nc_err *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && !strcasecmp(s + n - t, tail);
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* NAME-00001-of-00003.gguf: the length of NAME, the part and the count; 0 when not a split part. */
static size_t split_part(const char *file, int *part, int *count) {
    size_t n = strlen(file);
    const char *tail = "-00000-of-00000.gguf";
    size_t t = strlen(tail);
    if (n <= t) return 0;
    const char *s = file + n - t;
    for (size_t i = 0; i < t; i++) {
        bool digit = tail[i] == '0';
        if (digit ? !isdigit((unsigned char)s[i]) : tolower((unsigned char)s[i]) != tail[i]) return 0;
    }
    *part = atoi(s + 1);
    *count = atoi(s + 10);
    return n - t;
}

/* The bytes of a split set's other parts when path is its first part (NAME-00001-of-00003.gguf:
 * the loader reads them all, found beside it by name), else 0. */
static double later_parts_bytes(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    int part, count;
    size_t stem = split_part(base, &part, &count);
    if (!stem || part != 1) return 0;
    int head = (int)((size_t)(base - path) + stem);
    size_t cap = (size_t)head + 32;
    char *p = malloc(cap);
    double total = 0;
    struct stat st;
    for (int i = 2; p && i <= count; i++) {
        snprintf(p, cap, "%.*s-%05d-of-%05d.gguf", head, path, i, count);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) total += (double)st.st_size;
    }
    free(p);
    return total;
}

double srv_path_bytes(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return (double)st.st_size + later_parts_bytes(path);
    DIR *d = opendir(path);
    if (!d) return 0;
    double total = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char *p = join(path, de->d_name);
        if (p && stat(p, &st) == 0 && S_ISREG(st.st_mode)) total += (double)st.st_size;
        free(p);
    }
    closedir(d);
    return total;
}

/* A name requests can give: 1 to SRV_PRESET_NAME_MAX printable ASCII characters, no quote or
 * backslash (it is a label value in /metrics). */
static bool name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > SRV_PRESET_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\') return false;
    return true;
}

srv_preset *srv_presets_find(const srv_presets *ps, const char *id) {
    for (int32_t i = 0; i < ps->n; i++)
        if (!strcmp(ps->p[i].id, id)) return &ps->p[i];
    return NULL;
}

static void preset_free(srv_preset *p) {
    free(p->id);
    free(p->path);
    free(p->draft);
    free(p->chat_template);
}

void srv_presets_free(srv_presets *ps) {
    for (int32_t i = 0; i < ps->n; i++) preset_free(&ps->p[i]);
    free(ps->p);
    ps->p = NULL;
    ps->n = 0;
}

/* A new preset named id at path (both copied); NULL with err set. */
static srv_preset *add(srv_presets *ps, const char *id, size_t id_len, const char *path, nc_err *err) {
    char name[SRV_PRESET_NAME_MAX + 2];
    snprintf(name, sizeof name, "%.*s", (int)(id_len < sizeof name - 1 ? id_len : sizeof name - 1), id);
    if (id_len > SRV_PRESET_NAME_MAX || !name_ok(name)) {
        fail(err, "'%.*s' (%s): a model's name must be 1 to %d printable characters without spaces, quotes or backslashes",
             (int)(id_len < 64 ? id_len : 64), id, path, SRV_PRESET_NAME_MAX);
        return NULL;
    }
    srv_preset *old = srv_presets_find(ps, name);
    if (old) {
        fail(err, "two models are named '%s': %s and %s", name, old->path, path);
        return NULL;
    }
    if (ps->n >= SRV_MAX_MODELS) {
        fail(err, "more than %d models", SRV_MAX_MODELS);
        return NULL;
    }
    srv_preset *grown = realloc(ps->p, (size_t)(ps->n + 1) * sizeof *grown);
    if (!grown) {
        fail(err, "out of memory");
        return NULL;
    }
    ps->p = grown;
    srv_preset *p = &ps->p[ps->n];
    *p = (srv_preset){.id = strdup(name), .path = strdup(path)};
    if (!p->id || !p->path) {
        preset_free(p);
        fail(err, "out of memory");
        return NULL;
    }
    ps->n++;
    p->est_bytes = srv_path_bytes(path);
    return p;
}

/* ---- --models-dir ------------------------------------------------------------------------- */

static bool projector(const char *file) { return !strncasecmp(file, "mmproj", 6); }

/* The one GGUF model file in sub (a model's own directory), or NULL (none, or several): a split
 * set's first part counts as its one file. */
static char *only_gguf(const char *sub) {
    DIR *d = opendir(sub);
    if (!d) return NULL;
    char *found = NULL;
    int n = 0;
    bool split = false;
    struct dirent *de;
    while ((de = readdir(d))) {
        int part, count;
        if (de->d_name[0] == '.' || !ends_with(de->d_name, ".gguf") || projector(de->d_name)) continue;
        char *p = join(sub, de->d_name);
        if (!p || !is_file(p)) {
            free(p);
            continue;
        }
        if (split_part(de->d_name, &part, &count)) {
            if (part == 1) {
                free(found);
                found = p;
                split = true;
            } else {
                free(p);
            }
            continue;
        }
        n++;
        if (!split) {
            free(found);
            found = p;
        } else {
            free(p);
        }
    }
    closedir(d);
    if (n > 1 && !split) {
        free(found);
        return NULL;
    }
    return found;
}

static int scan_entry(srv_presets *ps, const char *dir, const char *name, nc_err *err) {
    char *path = join(dir, name);
    if (!path) return fail(err, "out of memory");
    int rc = 0, part, count;
    if (is_dir(path)) {
        char *config = join(path, "config.json");
        char *gguf = config && is_file(config) ? NULL : only_gguf(path);
        if (!config) rc = fail(err, "out of memory");
        else if (is_file(config)) rc = add(ps, name, strlen(name), path, err) ? 0 : -1;
        else if (gguf) rc = add(ps, name, strlen(name), gguf, err) ? 0 : -1;
        free(config);
        free(gguf);
    } else if (is_file(path) && ends_with(name, ".gguf") && !projector(name)) {
        /* a split set is one model, named without the part's suffix, loaded from its first part */
        size_t stem = split_part(name, &part, &count);
        if (!stem) rc = add(ps, name, strlen(name) - 5, path, err) ? 0 : -1;
        else if (part == 1) rc = add(ps, name, stem, path, err) ? 0 : -1;
    }
    free(path);
    return rc;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int srv_presets_scan_dir(srv_presets *ps, const char *dir, nc_err *err) {
    DIR *d = opendir(dir);
    if (!d) return fail(err, "--models-dir %s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) {
            char **grown = realloc(names, (cap = cap ? 2 * cap : 16) * sizeof *names);
            if (!grown) rc = fail(err, "out of memory");
            else names = grown;
        }
        if (!rc && !(names[n++] = strdup(de->d_name))) rc = fail(err, "out of memory");
    }
    closedir(d);
    if (!rc && n) qsort(names, n, sizeof *names, by_name); /* listed in a stable order */
    for (size_t i = 0; !rc && i < n; i++) rc = scan_entry(ps, dir, names[i], err);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* ---- the download cache --------------------------------------------------------------------- */

typedef struct cache_scan {
    srv_presets *ps;
    const char *root;
    nc_err *err;
    int rc;
} cache_scan;

/* A cached model as `nucleus pull` and -hf name it: USER/REPO:QUANT for a GGUF file (its first
 * part for a split; the file's name without .gguf where it has no quant tag), USER/REPO for a
 * Hugging Face directory (its config.json). A name taken already (another file of the same
 * quant) keeps the first, in the cache's sorted order. */
static int cache_entry(const nc_hub_entry *e, void *user) {
    cache_scan *c = user;
    hub_gguf_name g;
    char name[SRV_PRESET_NAME_MAX + 2], path[4096];
    int n, m;
    if (e->partial) return 0;
    if (!strcmp(e->file, "config.json")) {
        n = snprintf(name, sizeof name, "%s", e->repo);
        m = snprintf(path, sizeof path, "%s/%s", c->root, e->repo);
    } else if (hub_gguf_name_parse(e->file, &g) && g.index == 1) {
        const char *base = strrchr(e->file, '/') ? strrchr(e->file, '/') + 1 : e->file;
        n = g.tag[0] ? snprintf(name, sizeof name, "%s:%s", e->repo, g.tag)
                     : snprintf(name, sizeof name, "%s:%.*s", e->repo, (int)(g.stem_len - (size_t)(base - e->file)), base);
        m = snprintf(path, sizeof path, "%s/%s/%s", c->root, e->repo, e->file);
    } else {
        return 0;
    }
    if (n < 0 || (size_t)n > SRV_PRESET_NAME_MAX || m < 0 || (size_t)m >= sizeof path || srv_presets_find(c->ps, name))
        return 0;
    if (!add(c->ps, name, (size_t)n, path, c->err)) c->rc = -1;
    return c->rc;
}

int srv_presets_scan_cache(srv_presets *ps, nc_err *err) {
    char root[4096];
    nc_err ignored;
    if (nc_hub_cache_dir(NULL, root, sizeof root, &ignored) || !is_dir(root)) return 0; /* no cache: nothing */
    cache_scan c = {.ps = ps, .root = root, .err = err};
    if (nc_hub_list(NULL, cache_entry, &c, err)) return -1;
    return c.rc;
}

/* ---- --models FILE ------------------------------------------------------------------------ */

/* The options a section may set; "*" sets them for every preset. */
typedef struct ini_opts {
    char *model, *draft, *chat_template, *alias;
    int32_t n_ctx, n_parallel;
    int64_t kv_cells;
    nc_cache_type type_k, type_v;
    int load_on_startup;   /* -1: not said */
    bool given;            /* any key at all */
} ini_opts;

static void opts_free(ini_opts *o) {
    free(o->model);
    free(o->draft);
    free(o->chat_template);
    free(o->alias);
    *o = (ini_opts){.load_on_startup = -1};
}

static bool cache_type(const char *v, nc_cache_type *out) {
    static const struct { const char *name; nc_cache_type t; } types[] = {
        {"f16", NC_CACHE_F16}, {"f32", NC_CACHE_F32}, {"q8_0", NC_CACHE_Q8_0}, {"q4_0", NC_CACHE_Q4_0}};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcasecmp(v, types[i].name)) {
            *out = types[i].t;
            return true;
        }
    return false;
}

static bool int_value(const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return false;
    *out = x;
    return true;
}

/* A path as given, or relative to the INI file's directory. */
static char *ini_path(const char *file, const char *v) {
    const char *slash = strrchr(file, '/');
    if (v[0] == '/' || !slash) return strdup(v);
    size_t n = (size_t)(slash - file) + strlen(v) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%.*s/%s", (int)(slash - file), file, v);
    return p;
}

static bool listed(const char *key, const char *const *names) {
    for (; *names; names++)
        if (!strcmp(key, *names)) return true;
    return false;
}

static int set_key(ini_opts *o, const char *key, const char *v, const char *file, int line, nc_err *err) {
    long long x;
    char **path = listed(key, (const char *const[]){"model", "m", NULL})                  ? &o->model
                  : listed(key, (const char *const[]){"model-draft", "md", NULL})         ? &o->draft
                  : listed(key, (const char *const[]){"chat-template-file", NULL})        ? &o->chat_template
                                                                                          : NULL;
    o->given = true;
    if (path) {
        if (!*v) return fail(err, "%s:%d: '%s' needs a path", file, line, key);
        free(*path);
        return (*path = ini_path(file, v)) ? 0 : fail(err, "out of memory");
    }
    if (!strcmp(key, "alias")) {
        free(o->alias);
        return (o->alias = strdup(v)) ? 0 : fail(err, "out of memory");
    }
    if (listed(key, (const char *const[]){"ctx-size", "c", NULL})) {
        if (!int_value(v, 0, 1 << 20, &x)) return fail(err, "%s:%d: '%s' must be an integer from 0 to %d", file, line, key, 1 << 20);
        o->n_ctx = (int32_t)x;
    } else if (listed(key, (const char *const[]){"parallel", "np", NULL})) {
        if (!int_value(v, 1, 256, &x)) return fail(err, "%s:%d: '%s' must be an integer from 1 to 256", file, line, key);
        o->n_parallel = (int32_t)x;
    } else if (!strcmp(key, "kv-size")) {
        if (!int_value(v, 1, 1LL << 30, &x)) return fail(err, "%s:%d: 'kv-size' must be a positive integer", file, line);
        o->kv_cells = x;
    } else if (listed(key, (const char *const[]){"cache-type-k", "ctk", "cache-type-v", "ctv", "cache-type", NULL})) {
        nc_cache_type t;
        if (!cache_type(v, &t)) return fail(err, "%s:%d: '%s' must be f16, f32, q8_0 or q4_0", file, line, key);
        if (strcmp(key, "cache-type-v") && strcmp(key, "ctv")) o->type_k = t;
        if (strcmp(key, "cache-type-k") && strcmp(key, "ctk")) o->type_v = t;
    } else if (!strcmp(key, "load-on-startup")) {
        if (strcmp(v, "true") && strcmp(v, "false"))
            return fail(err, "%s:%d: 'load-on-startup' must be true or false", file, line);
        o->load_on_startup = !strcmp(v, "true");
    } else {
        return fail(err, "%s:%d: unknown key '%.64s' (model, ctx-size, parallel, kv-size, cache-type-k, cache-type-v, "
                    "cache-type, model-draft, chat-template-file, alias, load-on-startup)", file, line, key);
    }
    return 0;
}

/* o's options onto p, over what is there (a section's over the defaults'). */
static int apply(srv_preset *p, const ini_opts *o, nc_err *err) {
    if (o->n_ctx) p->n_ctx = o->n_ctx;
    if (o->n_parallel) p->n_parallel = o->n_parallel;
    if (o->kv_cells) p->kv_cells = o->kv_cells;
    if (o->type_k) p->type_k = o->type_k;
    if (o->type_v) p->type_v = o->type_v;
    if (o->load_on_startup >= 0) p->load_on_startup = o->load_on_startup;
    if (o->draft) {
        free(p->draft);
        if (!(p->draft = strdup(o->draft))) return fail(err, "out of memory");
    }
    if (o->chat_template) {
        free(p->chat_template);
        if (!(p->chat_template = strdup(o->chat_template))) return fail(err, "out of memory");
    }
    return 0;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && strchr(" \t\r", s[n - 1])) s[--n] = 0;
    return s;
}

/* A section of the file: its name (NULL: [*]), options and line. */
typedef struct ini_section {
    char *name;
    ini_opts o;
    int line;
} ini_section;

/* The sections, once the whole file is read, into the presets: [*]'s options under every preset
 * (those of --models-dir too), each section's over them; a section with "model" is a new preset,
 * one without gives options to a model of --models-dir. */
static int apply_sections(srv_presets *ps, ini_section *sec, int n, const char *file, nc_err *err) {
    const ini_opts *all = NULL;
    for (int i = 0; i < n; i++)
        if (!sec[i].name) all = &sec[i].o;
    for (int i = 0; i < n; i++) {
        ini_section *s = &sec[i];
        if (!s->name) continue;
        if (!s->o.model && !s->o.given) return fail(err, "%s:%d: section [%s] is empty", file, s->line, s->name);
        const char *id = s->o.alias ? s->o.alias : s->name;
        if (s->o.model) {
            if (!add(ps, id, strlen(id), s->o.model, err)) {
                char why[sizeof err->msg];
                snprintf(why, sizeof why, "%s", err->msg);
                return fail(err, "%s:%d: %.400s", file, s->line, why);
            }
        } else if (s->o.alias) {
            return fail(err, "%s:%d: [%s]: 'alias' needs 'model' (a model of --models-dir keeps its name)", file,
                        s->line, s->name);
        } else if (!srv_presets_find(ps, s->name)) {
            return fail(err, "%s:%d: section [%s] has no 'model' and names no model of --models-dir", file, s->line,
                        s->name);
        }
    }
    for (int32_t k = 0; k < ps->n; k++) {
        srv_preset *p = &ps->p[k];
        if (all && apply(p, all, err)) return -1;
        for (int i = 0; i < n; i++) {
            const char *id = sec[i].o.alias ? sec[i].o.alias : sec[i].name;
            if (sec[i].name && !strcmp(id, p->id) && apply(p, &sec[i].o, err)) return -1;
        }
    }
    return 0;
}

static ini_section *new_section(ini_section **sec, int *n, const char *name, int line, nc_err *err) {
    ini_section *grown = realloc(*sec, (size_t)(*n + 1) * sizeof *grown);
    if (!grown) {
        fail(err, "out of memory");
        return NULL;
    }
    *sec = grown;
    ini_section *s = &grown[*n];
    *s = (ini_section){.name = name ? strdup(name) : NULL, .o = {.load_on_startup = -1}, .line = line};
    if (name && !s->name) {
        fail(err, "out of memory");
        return NULL;
    }
    (*n)++;
    return s;
}

int srv_presets_parse_ini(srv_presets *ps, const char *text, size_t len, const char *file, nc_err *err) {
    if (memchr(text, 0, len)) return fail(err, "%s: the file holds a NUL byte", file);
    char *copy = strndup(text, len);
    if (!copy) return fail(err, "out of memory");
    ini_section *sec = NULL, *cur = NULL;
    int n_sec = 0, rc = 0, line = 0;
    for (char *s = copy, *next; !rc && s; s = next) {
        next = strchr(s, '\n');
        if (next) *next++ = 0;
        line++;
        char *t = trim(s);
        if (!*t || *t == ';' || *t == '#') continue;
        if (*t == '[') {
            char *close = strchr(t, ']');
            if (!close || *trim(close + 1)) {
                rc = fail(err, "%s:%d: a section is written [NAME]", file, line);
                break;
            }
            *close = 0;
            char *name = trim(t + 1);
            bool all = !strcmp(name, "*");
            if (!all && (strlen(name) > SRV_PRESET_NAME_MAX || !name_ok(name))) {
                rc = fail(err, "%s:%d: [%.64s]: a model's name must be 1 to %d printable characters without spaces",
                          file, line, name, SRV_PRESET_NAME_MAX);
                break;
            }
            for (int i = 0; !rc && i < n_sec; i++)
                if (all ? !sec[i].name : sec[i].name && !strcmp(sec[i].name, name))
                    rc = fail(err, "%s:%d: section [%s] is given twice", file, line, name);
            if (!rc && !(cur = new_section(&sec, &n_sec, all ? NULL : name, line, err))) rc = -1;
            continue;
        }
        char *eq = strchr(t, '=');
        if (!eq) {
            rc = fail(err, "%s:%d: expected KEY = VALUE or [SECTION]", file, line);
            break;
        }
        *eq = 0;
        char *key = trim(t), *value = trim(eq + 1);
        if (!cur) {
            if (!strcmp(key, "version") && !strcmp(value, "1")) continue; /* llama.cpp's files start so */
            rc = fail(err, "%s:%d: '%.64s' is outside any section ([*] or [NAME])", file, line, key);
        } else if (!cur->name && (!strcmp(key, "model") || !strcmp(key, "m") || !strcmp(key, "alias"))) {
            rc = fail(err, "%s:%d: [*] cannot set '%s'", file, line, key);
        } else {
            rc = set_key(&cur->o, key, value, file, line, err);
        }
    }
    if (!rc) rc = apply_sections(ps, sec, n_sec, file, err);
    for (int i = 0; i < n_sec; i++) {
        free(sec[i].name);
        opts_free(&sec[i].o);
    }
    free(sec);
    free(copy);
    return rc;
}

char *srv_read_text(const char *path, size_t max, size_t *len, nc_err *err) {
    int fd = nc_open_regular(path, err); /* a FIFO or a device named by mistake would block the read */
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        fail(err, "%s: %s", path, strerror(e));
        return NULL;
    }
    if ((size_t)st.st_size > max) {
        close(fd);
        fail(err, "%s: larger than %zu bytes", path, max);
        return NULL;
    }
    char *text = malloc((size_t)st.st_size + 1);
    size_t n = 0;
    while (text && n < (size_t)st.st_size) {
        ssize_t got = read(fd, text + n, (size_t)st.st_size - n);
        if (got <= 0) break;
        n += (size_t)got;
    }
    close(fd);
    if (!text || n != (size_t)st.st_size) {
        free(text);
        fail(err, "%s: %s", path, text ? "cannot be read whole" : "out of memory");
        return NULL;
    }
    text[n] = 0;
    *len = n;
    return text;
}

int srv_presets_load_ini(srv_presets *ps, const char *file, nc_err *err) {
    size_t len;
    char *text = srv_read_text(file, 1u << 24, &len, err);
    if (!text) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return fail(err, "--models %.480s", why);
    }
    int rc = srv_presets_parse_ini(ps, text, len, file, err);
    free(text);
    return rc;
}
