#include "quantize/quantize.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/gguf_write.h"
#include "quantize/hf_convert.h"
#include "tensor/quant.h"
#include "threads/pool.h"

#define QUANTIZATION_VERSION 2
#define CHUNK_ROWS 16

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool is_float(uint32_t type) { return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16; }

/* The plan of one tensor: its place in the input and its output type. */
typedef struct plan {
    const gguf_tensor *t;
    uint32_t to;
    bool fallback;
} plan;

/* The layer of "blk.N....", -1 for the tensors outside the layers. */
static long layer_of(const char *name) {
    if (strncmp(name, "blk.", 4)) return -1;
    char *end;
    long n = strtol(name + 4, &end, 10);
    return end > name + 4 && *end == '.' ? n : -1;
}

/* llama-quantize's order (that of llama.cpp's model loader): by layer, the others first, then by name. */
static int by_layer_then_name(const void *a, const void *b) {
    const gguf_tensor *x = ((const plan *)a)->t, *y = ((const plan *)b)->t;
    long lx = layer_of(x->name), ly = layer_of(y->name);
    return lx != ly ? (lx < ly ? -1 : 1) : strcmp(x->name, y->name);
}

static int check_input(const qz_params *p, const gguf_file *f, nc_err *err) {
    struct stat si, so;
    if (stat(p->output, &so) == 0 && stat(p->input, &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        return nc_fail(err, "the output %s is the input file", p->output);
    for (size_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (is_float(t->type) || !qz_is_quantisable(t->name, t->n_dims, t->ne)) continue;
        char buf[24];
        if (!p->allow_requantize)
            return nc_fail(err, "%s: tensor '%s' is already quantised (%s); requantising loses quality: pass "
                           "--allow-requantize to do it anyway", p->input, t->name, ggml_type_name(t->type, buf));
        if (!quant_type_supported(t->type))
            return nc_fail(err, "%s: tensor '%s' has type %s, which nucleus cannot dequantise", p->input, t->name,
                           ggml_type_name(t->type, buf));
    }
    return 0;
}

static int make_plans(const qz_params *p, const gguf_file *f, plan *plans, int *n_quantised, nc_err *err) {
    qz_counts c = {.has_output = gguf_find_tensor(f, "output.weight") != NULL};
    size_t n = gguf_n_tensors(f);
    for (size_t i = 0; i < n; i++) {
        const char *name = gguf_tensor_at(f, i)->name;
        c.n_attn_v += strstr(name, "attn_v.weight") != NULL;
        c.n_ffn_down += strstr(name, "ffn_down") != NULL;
    }
    for (size_t i = 0; i < n; i++) plans[i].t = gguf_tensor_at(f, i);
    qsort(plans, n, sizeof *plans, by_layer_then_name);
    *n_quantised = 0;
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *t = plans[i].t;
        plans[i].to = t->type;
        if (!qz_is_quantisable(t->name, t->n_dims, t->ne)) continue;
        uint32_t want;
        plans[i].to = qz_tensor_type(p->ftype, &p->rules, &c, t->name, t->ne[0], &want);
        plans[i].fallback = plans[i].to != want;
        if (plans[i].to == UINT32_MAX) {
            char buf[24];
            return nc_fail(err, "%s: tensor '%s' has rows of %llu weights, not a multiple of %s's block of %u, and %s has "
                           "no fallback type (llama-quantize refuses it too); a K-quant file type falls back for such rows",
                           p->input, t->name, (unsigned long long)t->ne[0], ggml_type_name(want, buf),
                           ggml_type_get(want)->block_elems, ggml_type_name(want, buf));
        }
        *n_quantised += plans[i].to != t->type;
    }
    return 0;
}

/* One tensor's conversion, shared by the threads: rows in chunks of CHUNK_ROWS. */
typedef struct job {
    const gguf_tensor *t;
    uint32_t to;
    int64_t cols, rows;
    size_t in_row, out_row;
    uint8_t *out;
    float **scratch; /* a row of floats per thread */
    int64_t bad_row; /* the first row found holding a NaN or an infinity (INT64_MAX: none) */
} job;

static bool all_finite(const float *x, int64_t n) {
    int finite = 1;
    for (int64_t i = 0; i < n; i++) finite &= isfinite(x[i]) != 0;
    return finite;
}

static void run_chunk(void *arg, int chunk, int ith) {
    job *j = arg;
    int64_t r0 = (int64_t)chunk * CHUNK_ROWS, r1 = r0 + CHUNK_ROWS < j->rows ? r0 + CHUNK_ROWS : j->rows;
    float *x = j->scratch[ith];
    for (int64_t r = r0; r < r1; r++) {
        quant_dequantize_row(j->t->type, (const uint8_t *)j->t->data + j->in_row * (size_t)r, x, j->cols);
        if (!all_finite(x, j->cols)) {
            /* the writers' rounding is undefined on such values: keep the lowest such row */
            int64_t seen = __atomic_load_n(&j->bad_row, __ATOMIC_RELAXED);
            while (r < seen && !__atomic_compare_exchange_n(&j->bad_row, &seen, r, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
            continue;
        }
        quant_quantize_row(j->to, x, j->out + j->out_row * (size_t)r, j->cols);
    }
}

typedef struct state {
    const qz_params *p;
    gguf_file *f;
    plan *plans;
    gguf_out *o;
    FILE *fp;
    pool *pl;
    float **scratch;
    uint8_t *buf;
    size_t buf_cap;
} state;

static int header(state *s, nc_err *err) {
    gguf_file *f = s->f;
    s->o = gguf_out_new(gguf_alignment(f));
    if (!s->o) return nc_fail(err, "out of memory");
    for (size_t i = 0; i < gguf_n_kv(f); i++) {
        const char *key = gguf_kv_at(f, i)->key;
        if (!strcmp(key, "general.file_type") || !strcmp(key, "general.quantization_version")) continue;
        uint64_t len;
        const uint8_t *b = gguf_kv_bytes(f, i, &len);
        if (gguf_out_kv_raw(s->o, b, len)) return nc_fail(err, "out of memory");
    }
    if (gguf_out_kv_u32(s->o, "general.quantization_version", QUANTIZATION_VERSION) ||
        gguf_out_kv_u32(s->o, "general.file_type", s->p->ftype->id))
        return nc_fail(err, "out of memory");
    for (size_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = s->plans[i].t;
        uint64_t bytes = s->plans[i].to == t->type ? t->n_bytes
                       : quant_row_bytes(s->plans[i].to, (int64_t)t->ne[0]) * (t->n_elems / t->ne[0]);
        if (gguf_out_tensor(s->o, t->name, t->n_dims, t->ne, s->plans[i].to, bytes)) return nc_fail(err, "out of memory");
    }
    return gguf_out_write_header(s->o, s->fp, s->p->output, err);
}

/* The bytes of output tensor i in its type: the input's own when the type stays. */
static const uint8_t *convert(state *s, size_t i, uint64_t *n_bytes, nc_err *err) {
    const gguf_tensor *t = s->plans[i].t;
    uint32_t to = s->plans[i].to;
    if (to == t->type) {
        *n_bytes = t->n_bytes;
        return t->data;
    }
    job j = {.t = t, .to = to, .cols = (int64_t)t->ne[0], .rows = (int64_t)(t->n_elems / t->ne[0]), .bad_row = INT64_MAX};
    j.in_row = quant_row_bytes(t->type, j.cols);
    j.out_row = quant_row_bytes(to, j.cols);
    *n_bytes = j.out_row * (size_t)j.rows;
    if (*n_bytes > s->buf_cap) {
        free(s->buf);
        s->buf = malloc(*n_bytes);
        s->buf_cap = s->buf ? *n_bytes : 0;
        if (!s->buf) return nc_fail(err, "out of memory for tensor '%s' (%llu bytes)", t->name, (unsigned long long)*n_bytes), NULL;
    }
    j.out = s->buf;
    j.scratch = s->scratch;
    pool_task task = {.chunk = run_chunk, .arg = &j, .n_chunks = (int)((j.rows + CHUNK_ROWS - 1) / CHUNK_ROWS)};
    pool_run_chunks(s->pl, &task);
    if (j.bad_row != INT64_MAX)
        return nc_fail(err, "%s: tensor '%s', row %lld: a NaN or infinite value (the file is damaged or was "
                       "written wrong)", s->p->input, t->name, (long long)j.bad_row), NULL;
    return s->buf;
}

static int body(state *s, qz_result *res, double t0, nc_err *err) {
    size_t n = gguf_n_tensors(s->f);
    uint64_t total_in = 0, done_in = 0, done_out = 0, max_cols = 0;
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(s->f, i);
        total_in += t->n_bytes;
        max_cols = t->ne[0] > max_cols ? t->ne[0] : max_cols;
    }
    int nth = pool_size(s->pl);
    s->scratch = calloc((size_t)nth, sizeof *s->scratch);
    if (!s->scratch) return nc_fail(err, "out of memory");
    for (int k = 0; k < nth; k++)
        if (!(s->scratch[k] = malloc(sizeof(float) * (size_t)max_cols))) return nc_fail(err, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *t = s->plans[i].t;
        uint64_t bytes;
        const uint8_t *data = convert(s, i, &bytes, err);
        if (!data || gguf_out_write_data(s->o, s->fp, data, bytes, s->p->output, err)) return -1;
        done_in += t->n_bytes;
        done_out += bytes;
        if (s->p->progress) {
            qz_progress pr = {.index = (int)i + 1, .n_tensors = (int)n, .name = t->name, .from = t->type,
                              .to = s->plans[i].to, .bytes_in = t->n_bytes, .bytes_out = bytes, .done_in = done_in,
                              .total_in = total_in, .done_out = done_out, .seconds = now() - t0,
                              .fallback = s->plans[i].fallback};
            memcpy(pr.ne, t->ne, sizeof pr.ne);
            s->p->progress(s->p->ud, &pr);
        }
    }
    res->bytes_in = total_in;
    res->bytes_out = done_out;
    res->n_tensors = (int)n;
    return 0;
}

static void cleanup(state *s) {
    if (s->scratch)
        for (int k = 0; k < pool_size(s->pl); k++) free(s->scratch[k]);
    free(s->scratch);
    free(s->buf);
    free(s->plans);
    gguf_out_free(s->o);
    if (s->pl) pool_free(s->pl);
    gguf_close(s->f);
}

/* A Hugging Face directory becomes a GGUF file beside the output first (hf_convert.h): path
 * receives its name. */
static int convert_hf(const qz_params *p, char *path, size_t cap, nc_err *err) {
    if ((size_t)snprintf(path, cap, "%s.hf-XXXXXX", p->output) >= cap) return nc_fail(err, "%s: path too long", p->output);
    int fd = mkstemp(path);
    if (fd < 0) return nc_fail(err, "cannot write beside %s: %s", p->output, strerror(errno));
    close(fd);
    if (hfc_convert(p->input, path, p->convert_progress, p->ud, err) == 0) return 0;
    unlink(path);
    *path = 0;
    return -1;
}

int qz_quantize(const qz_params *p, qz_result *res, nc_err *err) {
    double t0 = now();
    state s = {.p = p};
    struct stat st;
    memset(res, 0, sizeof *res);
    char converted[4096] = "";
    if (stat(p->input, &st) == 0 && S_ISDIR(st.st_mode) && convert_hf(p, converted, sizeof converted, err)) return -1;
    int rc = gguf_open(&s.f, *converted ? converted : p->input, err);
    if (*converted) unlink(converted); /* the mapping keeps it readable */
    if (rc) return -1;
    rc = -1;
    if (check_input(p, s.f, err)) goto out;
    if (!(s.plans = calloc(gguf_n_tensors(s.f) + 1, sizeof *s.plans))) {
        nc_fail(err, "out of memory");
        goto out;
    }
    if (make_plans(p, s.f, s.plans, &res->n_quantised, err)) goto out;
    if (!(s.pl = pool_create(p->n_threads > 0 ? p->n_threads : 1))) {
        nc_fail(err, "cannot start %d threads", p->n_threads);
        goto out;
    }
    if (!(s.fp = fopen(p->output, "wb"))) {
        nc_fail(err, "cannot write %s: %s", p->output, strerror(errno));
        goto out;
    }
    rc = header(&s, err) || body(&s, res, t0, err) ? -1 : 0;
    if (fclose(s.fp) && !rc) rc = nc_fail(err, "%s: write failed: %s", p->output, strerror(errno));
    if (rc) unlink(p->output);
out:
    cleanup(&s);
    res->seconds = now() - t0;
    return rc;
}
