#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "common.h" /* nc_open_regular */

bool cli_int(const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end) {
        fprintf(stderr, "error: %s: expected an integer, got '%s'\n", flag, s);
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "error: %s: %ld is outside the allowed range %ld..%ld\n", flag, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, "error: %s: expected a number, got '%s'\n", flag, s);
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "error: %s: %g is outside the allowed range [%g, %g]\n", flag, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_u64(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-') {
        fprintf(stderr, "error: %s: expected a non-negative integer, got '%s'\n", flag, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_ids(const char *flag, const char *s, int32_t **ids, int *n) {
    size_t cap = 16;
    int count = 0;
    int32_t *out = malloc(cap * sizeof *out);
    if (!out) return false;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "error: %s: expected comma-separated token ids, bad item at '%s'\n", flag, p);
            free(out);
            return false;
        }
        if ((size_t)count == cap) {
            int32_t *grown = realloc(out, 2 * cap * sizeof *out);
            if (!grown) { free(out); return false; }
            out = grown;
            cap *= 2;
        }
        out[count++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (count == 0) {
        fprintf(stderr, "error: %s: no token ids given\n", flag);
        free(out);
        return false;
    }
    *ids = out;
    *n = count;
    return true;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "error: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

/* Cuts path at its last '/': the directory above (false when there is none). */
static bool parent_dir(char *path) {
    char *slash = strrchr(path, '/');
    if (!slash || slash == path) return false;
    *slash = 0;
    return true;
}

const char *cli_default_model(void) {
    const char *env = getenv("NUCLEUS_MODEL");
    if (env && *env) return env;
    /* The places, from the binary's directory: PREFIX/bin/nucleus has the model in
     * PREFIX/share/nucleus; build/nucleus and build/san/nucleus sit one and two levels below the
     * repository's models/. */
    static char places[3][4096 + 64];
    char dir[4096];
    int n_places = 0;
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n > 0) {
        dir[n] = 0;
        if (parent_dir(dir) && parent_dir(dir)) {
            snprintf(places[n_places++], sizeof places[0], "%s/share/nucleus/stories260K.gguf", dir);
            snprintf(places[n_places++], sizeof places[0], "%s/models/stories260K.gguf", dir);
            if (parent_dir(dir)) snprintf(places[n_places++], sizeof places[0], "%s/models/stories260K.gguf", dir);
        }
    }
    for (int i = 0; i < n_places; i++)
        if (access(places[i], R_OK) == 0) return places[i];
    fprintf(stderr, "error: no -m MODEL given, and the default model is not in its places:");
    for (int i = 0; i < n_places; i++) fprintf(stderr, "%s %s", i ? "," : "", places[i]);
    fprintf(stderr, "%s\n", n_places ? "" : " the binary's own path is unknown");
    return NULL;
}

static int oom(nc_err *err) {
    snprintf(err->msg, sizeof err->msg, "out of memory");
    return -1;
}

int cli_tokenize(const nc_model *m, const char *text, bool add_special, bool parse_special, int32_t **ids,
                 nc_err *err) {
    size_t len = strlen(text);
    int cap = (int)(len + 8 < INT_MAX / 2 ? len + 8 : INT_MAX / 2);
    int32_t *out = malloc((size_t)cap * sizeof *out);
    if (!out) return oom(err);
    int n = nc_tokenize(m, text, len, add_special, parse_special, out, cap, err);
    if (n > cap) { /* cannot happen for SentencePiece/BPE (at most one token per byte + specials) */
        free(out);
        out = malloc((size_t)n * sizeof *out);
        if (!out) return oom(err);
        n = nc_tokenize(m, text, len, add_special, parse_special, out, n, err);
    }
    if (n < 0) { free(out); return -1; }
    *ids = out;
    return n;
}

static const char *const cache_names[] = {[NC_CACHE_DEFAULT] = "default", [NC_CACHE_F16] = "f16", [NC_CACHE_F32] = "f32",
                                          [NC_CACHE_Q8_0] = "q8_0", [NC_CACHE_Q4_0] = "q4_0"};

const char *cli_cache_type_name(nc_cache_type t) {
    return (unsigned)t < sizeof cache_names / sizeof cache_names[0] ? cache_names[t] : "?";
}

static bool cache_type(const char *flag, const char *s, nc_cache_type *out) {
    for (size_t i = NC_CACHE_F16; i < sizeof cache_names / sizeof cache_names[0]; i++)
        if (!strcmp(s, cache_names[i])) {
            *out = (nc_cache_type)i;
            return true;
        }
    fprintf(stderr, "error: %s: expected f16, f32, q8_0 or q4_0, got '%s'\n", flag, s);
    return false;
}

const char *cli_kv_summary(const nc_context *c, char *buf, size_t cap) {
    nc_cache_type k, v, latent;
    nc_context_cache_types(c, &k, &v);
    int n = snprintf(buf, cap, "keys %s, values %s", cli_cache_type_name(k), cli_cache_type_name(v));
    if (nc_kv_latent_type(c, &latent)) n += snprintf(buf + n, cap - n, " (latent %s)", cli_cache_type_name(latent));
    n += snprintf(buf + n, cap - n, ": %.1f KiB per token", nc_kv_bytes_per_token(c) / 1024.0);
    if (nc_kv_state_bytes(c)) snprintf(buf + n, cap - n, ", recurrent state %.1f KiB a sequence", nc_kv_state_bytes(c) / 1024.0);
    return buf;
}

const char *cli_cache_types(nc_cache_type k, nc_cache_type v, char buf[16]) {
    if (k == v) return cli_cache_type_name(k);
    snprintf(buf, 16, "%s/%s", cli_cache_type_name(k), cli_cache_type_name(v));
    return buf;
}

int cli_cache_arg(int argc, char **argv, int *i, nc_cache_type *k, nc_cache_type *v) {
    const char *a = argv[*i], *s;
    bool both = !strcmp(a, "--cache-type"), keys = !strcmp(a, "--cache-type-k") || !strcmp(a, "-ctk"),
         values = !strcmp(a, "--cache-type-v") || !strcmp(a, "-ctv");
    if (!both && !keys && !values) return 0;
    nc_cache_type t;
    if (!(s = cli_value(argc, argv, i)) || !cache_type(a, s, &t)) return -1;
    if (both || keys) *k = t;
    if (both || values) *v = t;
    return 1;
}

int cli_device_arg(int argc, char **argv, int *i, int32_t *n_gpu_layers) {
    const char *a = argv[*i], *s;
    if (!strcmp(a, "--device")) {
        if (!(s = cli_value(argc, argv, i))) return -1;
        if (!strcmp(s, "cpu")) *n_gpu_layers = 0;
        else if (!strcmp(s, "cuda")) *n_gpu_layers = -1;
        else {
            fprintf(stderr, "error: --device: expected cpu or cuda, got '%s'\n", s);
            return -1;
        }
        return 1;
    }
    if (strcmp(a, "-ngl") && strcmp(a, "--n-gpu-layers") && strcmp(a, "--gpu-layers")) return 0;
    long n;
    if (!(s = cli_value(argc, argv, i)) || !cli_int(a, s, -1, 1 << 20, &n)) return -1;
    *n_gpu_layers = (int32_t)n;
    return 1;
}

/* ---- prompt text: files, stdin, escapes ---- */

char *cli_read_text(const char *path, size_t *len) {
    bool in = !strcmp(path, "-");
    nc_err err;
    int fd = in ? -1 : nc_open_regular(path, &err);
    if (!in && fd < 0) { /* (EINVAL: not a regular file, which err names) */
        if (errno == EINVAL) fprintf(stderr, "error: %s\n", err.msg);
        else fprintf(stderr, "error: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    FILE *f = in ? stdin : fdopen(fd, "rb");
    if (!f) {
        fprintf(stderr, "error: %s: %s\n", path, strerror(errno));
        close(fd);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *grown = realloc(buf, 2 * cap + 1);
        if (!grown) { free(buf); buf = NULL; break; }
        buf = grown;
        cap *= 2;
    }
    int read_errno = ferror(f) ? errno : 0;
    if (!in) fclose(f);
    if (!buf || read_errno) {
        fprintf(stderr, "error: %s: %s\n", in ? "stdin" : path, buf ? strerror(read_errno) : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One escape at s (just past the backslash) into *out; the bytes it took, or 0 when it is not one. */
static int one_escape(const char *s, char *out) {
    static const char from[] = "nrt\\\"'", to[] = "\n\r\t\\\"'";
    const char *k = *s ? strchr(from, *s) : NULL;
    if (k) {
        *out = to[k - from];
        return 1;
    }
    if (*s == 'x' && hex_digit(s[1]) >= 0 && hex_digit(s[2]) >= 0) {
        *out = (char)(hex_digit(s[1]) * 16 + hex_digit(s[2]));
        return *out ? 3 : 0; /* a NUL byte would end the prompt */
    }
    return 0;
}

char *cli_unescape(const char *flag, const char *s) {
    char *out = malloc(strlen(s) + 1), *o = out;
    if (!out) {
        fprintf(stderr, "error: out of memory\n");
        return NULL;
    }
    for (const char *p = s; *p; p++) {
        if (*p != '\\') { *o++ = *p; continue; }
        int took = one_escape(p + 1, o);
        if (!took) {
            fprintf(stderr, "error: %s: bad escape '\\%.*s' at byte %zu (known: \\n \\r \\t \\\\ \\\" \\' \\xHH, "
                            "HH two hex digits, not 00)\n", flag, p[1] == 'x' ? 3 : 1, p + 1, (size_t)(p - s));
            free(out);
            return NULL;
        }
        o++;
        p += took;
    }
    *o = 0;
    return out;
}
