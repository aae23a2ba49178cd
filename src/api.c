/* The public API (include/nucleus.h): thin wrappers that tie the layers together. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/membw.h"
#include "common.h"
#include "format/gguf.h"
#include "format/ggml_types.h"
#include "format/gguf_dump.h"
#include "format/hf_dir.h"
#include "format/hf_dump.h"
#include "format/mapped.h"
#include "forward/forward.h"
#include "grammar/grammar.h"
#include "kernels/kernels.h"
#include "kv/kv_file.h"
#include "kv/kv_policy.h"
#include "model/model.h"
#include "tensor/quant.h"
#include "vocab/vocab.h"

struct nc_model {
    model *m;
    vocab *v;
    char *chat_template;  /* a Hugging Face directory's (GGUF files keep theirs in the metadata) */
    size_t chat_template_len;
    pthread_mutex_t grammar_lock;  /* guards grammar_vocab, built on the first grammar's use */
    gr_vocab *grammar_vocab;
    atomic_int n_contexts;         /* adapters are added before the first */
};

struct nc_context {
    nc_model *model;
    fwd_state fwd;
    int32_t n_threads;
    char device[384];
};

struct nc_vocab_file {
    gguf_file *f;
    vocab *v;
};

struct nc_detok {
    vocab_stream stream;
};

/* A Hugging Face directory: config.json and safetensors, its tokenizer and chat template. */
static int load_hf(nc_model *nm, const char *path, nc_err *err) {
    hf_dir *d;
    if (hf_dir_open(&d, path, err)) return -1;
    if (model_bind_hf(&nm->m, d, err)) {
        hf_dir_close(d);
        return -1;
    }
    if (vocab_load_hf_dir(&nm->v, path, err)) return -1;
    return hf_dir_chat_template(d, &nm->chat_template, &nm->chat_template_len, err) < 0 ? -1 : 0;
}

static int load_gguf(nc_model *nm, const char *path, nc_err *err) {
    gguf_file *f;
    if (gguf_open(&f, path, err)) return -1;
    /* llama.cpp's gguf-split writes a model into parts, the first holding the metadata */
    int parts = gguf_split_count(f, err);
    gguf_split *split = NULL;
    if (parts < 0 || (parts > 1 && gguf_split_open(&split, f, err))) {
        gguf_close(f);
        return -1;
    }
    if (split ? model_bind_split(&nm->m, split, f, err) : model_bind(&nm->m, f, err)) {
        if (split) gguf_split_close(split);
        else gguf_close(f);
        return -1;
    }
    return vocab_load(&nm->v, f, err);
}

int nc_model_load(nc_model **out, const char *path, nc_err *err) {
    *out = NULL;
    nc_model *nm = calloc(1, sizeof *nm);
    if (!nm) return nc_fail(err, "out of memory");
    pthread_mutex_init(&nm->grammar_lock, NULL);
    struct stat st;
    bool dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (dir ? load_hf(nm, path, err) : load_gguf(nm, path, err)) {
        nc_model_free(nm);
        return -1;
    }
    if (vocab_n_tokens(nm->v) < nm->m->hp.n_vocab) {
        nc_fail(err, "%s: the vocabulary has %d tokens but the token embedding has %d rows", path, vocab_n_tokens(nm->v),
                nm->m->hp.n_vocab);
        nc_model_free(nm);
        return -1;
    }
    model_interleave(nm->m);
    *out = nm;
    return 0;
}

int nc_model_add_lora(nc_model *m, const char *path, float scale, nc_err *err) {
    if (atomic_load(&m->n_contexts) > 0)
        return nc_fail(err, "%s: adapters are added before the model's first context is made", path);
    if (!(scale == scale) || scale > 1e6f || scale < -1e6f) return nc_fail(err, "%s: LoRA scale %g", path, scale);
    return model_add_lora(m->m, path, scale, err);
}

int32_t nc_model_n_lora(const nc_model *m) { return m->m->n_lora; }

void nc_model_free(nc_model *m) {
    if (!m) return;
    gr_vocab_free(m->grammar_vocab);
    pthread_mutex_destroy(&m->grammar_lock);
    free(m->chat_template);
    vocab_free(m->v);
    model_free(m->m);
    free(m);
}

/* Bytes of a weight's own elements (a view of a fused matrix counts only its rows). */
static uint64_t matrix_bytes(const model_weight *w) {
    if (!w->data) return 0;
    if (w->transposed) return (uint64_t)w->cols * w->row_bytes;
    return (uint64_t)w->rows * quant_row_bytes(w->type, w->cols);
}

/* The weight bytes one decode step reads: every layer's attention, its dense FFN or the router and
 * n_expert_used experts, and the output matrix. */
static uint64_t decode_bytes(const model *m) {
    const model_hparams *hp = &m->hp;
    uint64_t n = matrix_bytes(&m->output);
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &m->layers[il];
        const model_weight *ws[MODEL_LAYER_WEIGHTS + 2 * L->n_head];
        for (int i = 0, k = model_layer_weights(L, ws); i < k; i++) n += matrix_bytes(ws[i]);
        if (!L->router.data) continue;
        uint64_t expert = matrix_bytes(&L->exp_down[0]) +
                          (L->exp_gate ? matrix_bytes(&L->exp_gate[0]) + matrix_bytes(&L->exp_up[0])
                                       : matrix_bytes(&L->exp_gate_up[0]));
        n += (uint64_t)hp->n_expert_used * expert;
    }
    return n;
}

const char *nc_model_meta_str(const nc_model *m, const char *key, size_t *len) {
    if (!m->m->file) { /* a Hugging Face directory offers its chat template under the GGUF key */
        if (strcmp(key, "tokenizer.chat_template") || !m->chat_template) return NULL;
        *len = m->chat_template_len;
        return m->chat_template;
    }
    const gguf_kv *kv = gguf_find_kv(m->m->file, key);
    if (!kv || kv->type != GGUF_T_STRING) return NULL;
    *len = (size_t)kv->v.s.len;
    return kv->v.s.data;
}

/* The i-th key/value pair of a GGUF file's metadata that is not an array (llama.cpp leaves arrays
 * out of its model's metadata too). */
static const gguf_kv *meta_at(const nc_model *m, int32_t i) {
    if (!m->m->file || i < 0) return NULL;
    for (size_t k = 0, n = gguf_n_kv(m->m->file); k < n; k++) {
        const gguf_kv *kv = gguf_kv_at(m->m->file, k);
        if (kv->type != GGUF_T_ARRAY && i-- == 0) return kv;
    }
    return NULL;
}

int32_t nc_model_meta_count(const nc_model *m) {
    if (!m->m->file) return m->chat_template ? 1 : 0;
    int32_t n = 0;
    for (size_t k = 0, nk = gguf_n_kv(m->m->file); k < nk; k++) n += gguf_kv_at(m->m->file, k)->type != GGUF_T_ARRAY;
    return n;
}

const char *nc_model_meta_key(const nc_model *m, int32_t i) {
    if (!m->m->file) return i == 0 && m->chat_template ? "tokenizer.chat_template" : NULL;
    const gguf_kv *kv = meta_at(m, i);
    return kv ? kv->key : NULL;
}

int nc_model_meta_value(const nc_model *m, int32_t i, char *buf, int cap) {
    const char *s = NULL;
    size_t len = 0;
    char num[64];
    if (!m->m->file) {
        if (i != 0 || !m->chat_template) return -1;
        s = m->chat_template;
        len = m->chat_template_len;
    } else {
        const gguf_kv *kv = meta_at(m, i);
        if (!kv) return -1;
        int n = 0;
        switch (kv->type) { /* as llama.cpp's gguf_kv_to_str: std::to_string of a number */
        case GGUF_T_STRING: s = kv->v.s.data; len = (size_t)kv->v.s.len; break;
        case GGUF_T_BOOL: s = kv->v.b ? "true" : "false"; len = strlen(s); break;
        case GGUF_T_FLOAT32:
        case GGUF_T_FLOAT64: n = snprintf(num, sizeof num, "%f", kv->v.f); break;
        case GGUF_T_INT8:
        case GGUF_T_INT16:
        case GGUF_T_INT32:
        case GGUF_T_INT64: n = snprintf(num, sizeof num, "%lld", (long long)kv->v.i); break;
        default: n = snprintf(num, sizeof num, "%llu", (unsigned long long)kv->v.u); break;
        }
        if (!s) {
            s = num;
            len = n > 0 && n < (int)sizeof num ? (size_t)n : 0;
        }
    }
    if (len > INT32_MAX) return -1;
    if (len > 0 && (int)len <= cap) memcpy(buf, s, len);
    return (int)len;
}

void nc_model_get_info(const nc_model *nm, nc_model_info *info) {
    const model *m = nm->m;
    const model_hparams *hp = &m->hp;
    *info = (nc_model_info){
        .arch = model_arch_name(m), .name = m->name, .n_vocab = hp->n_vocab, .n_embd = hp->n_embd,
        .n_layer = hp->n_layer, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
        .n_ff = hp->n_ff, .n_rot = hp->n_rot, .n_ctx_train = hp->n_ctx_train, .rope_freq_base = (float)hp->rope[0].base,
        .norm_eps = hp->norm_eps, .rope_neox = hp->rope_neox, .n_expert = hp->n_expert,
        .n_expert_used = hp->n_expert_used, .swa_window = hp->swa_window, .n_params = m->n_params,
        .weight_bytes = m->weight_bytes, .decode_bytes = decode_bytes(m),
        .file_bytes = m->file_bytes};
}

double nc_measure_read_bandwidth(int n_threads) {
    pool *p = pool_create(n_threads > 0 ? n_threads : 1);
    if (!p) return 0;
    double bw = membw_read(p, (size_t)1 << 30, 5);
    pool_free(p);
    return bw;
}

int nc_inspect(const char *path, FILE *out, nc_err *err) {
    struct stat st;
    int r;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        hf_dir *d;
        if (hf_dir_open(&d, path, err)) return -1;
        r = hf_dump(d, out);
        hf_dir_close(d);
    } else {
        gguf_file *f;
        if (gguf_open(&f, path, err)) return -1;
        r = gguf_dump(f, out);
        gguf_close(f);
    }
    if (r) return nc_fail(err, "could not write the dump");
    /* what the layers are, where it is a model nucleus loads; why not, where it is not */
    nc_model *m;
    nc_err why;
    if (nc_model_load(&m, path, &why)) {
        fprintf(out, "as a model: not loadable: %s\n", why.msg);
        return 0;
    }
    fprintf(out, "layers (%d, %s):\n", m->m->hp.n_layer, model_arch_name(m->m));
    char line[256];
    for (int il = 0; il < m->m->hp.n_layer; il++) fprintf(out, "  %3d  %s\n", il, model_layer_kind(m->m, il, line, sizeof line));
    nc_model_free(m);
    return ferror(out) ? nc_fail(err, "could not write the dump") : 0;
}

const char *nc_kernels_name(void) {
    kernels_init();
    return kernels_name();
}

/* ---- tokenizer ---- */

int32_t nc_token_bos(const nc_model *m) { return vocab_bos(m->v); }
int32_t nc_token_eos(const nc_model *m) { return vocab_eos(m->v); }
bool nc_token_is_eog(const nc_model *m, int32_t id) { return vocab_is_eog(m->v, id); }
bool nc_vocab_adds_bos(const nc_model *m) { return vocab_add_bos(m->v); }
int nc_token_piece(const nc_model *m, int32_t id, char *buf, int cap) { return vocab_token_piece(m->v, id, true, buf, cap); }
int nc_detokenize(const nc_model *m, const int32_t *ids, int n, bool special, char *out, int cap) {
    return vocab_detokenize(m->v, ids, n, special, out, cap);
}

/* The grammar's view of a token: the bytes it adds to generated text (control tokens none). */
static int grammar_piece(void *user, int32_t id, char *buf, int cap) { return vocab_token_piece(user, id, false, buf, cap); }
static bool grammar_eog(void *user, int32_t id) { return vocab_is_eog(user, id); }

const gr_vocab *nc_model_grammar_vocab(const nc_model *m, nc_err *err) {
    nc_model *mm = (nc_model *)m; /* the cache is logically const: built once, then shared read-only */
    pthread_mutex_lock(&mm->grammar_lock);
    if (!mm->grammar_vocab) gr_vocab_build(&mm->grammar_vocab, vocab_n_tokens(m->v), grammar_piece, grammar_eog, m->v, err);
    const gr_vocab *v = mm->grammar_vocab;
    pthread_mutex_unlock(&mm->grammar_lock);
    return v;
}

/* A JSON grammar asks a vocabulary without '{' (TinyStories-656K's has none) for the impossible:
 * a request should hear so rather than get an empty reply. */
int nc_grammar_check_model(const nc_model *m, const char *gbnf, nc_err *err) {
    return nc_grammar_check_model_watched(m, gbnf, NULL, NULL, err);
}

int nc_grammar_check_model_watched(const nc_model *m, const char *gbnf, bool (*gone)(void *user), void *user,
                                   nc_err *err) {
    gr_grammar *g = NULL;
    gr_matcher *mt = NULL;
    uint8_t *allowed = NULL;
    nc_poll poll = {.gone = gone, .user = user};
    const gr_vocab *v = nc_model_grammar_vocab(m, err);
    int rc = !v || gr_parse_watched(&g, gbnf, strlen(gbnf), &poll, err) || gr_matcher_new(&mt, g, err) ? -1 : 0;
    int32_t n = v ? gr_vocab_n_tokens(v) : 0;
    if (!rc && !(allowed = malloc((size_t)n))) rc = nc_fail(err, "out of memory");
    if (!rc && gr_matcher_mask(mt, v, allowed, n) == 0)
        rc = nc_fail(err, "no token of the model's vocabulary can begin a sentence of the grammar (none has a text "
                          "it may start with)");
    free(allowed);
    gr_matcher_free(mt);
    gr_free(g);
    return rc;
}

int nc_tokenize(const nc_model *m, const char *text, size_t len, bool add_special, bool parse_special, int32_t *out,
                int cap, nc_err *err) {
    return vocab_tokenize(m->v, text, len, add_special, parse_special, out, cap, err);
}

/* A GGUF file, a Hugging Face tokenizer.json (any path ending in ".json"), or a directory
 * holding a tokenizer.json or tokenizer.model. */
int nc_vocab_file_load(nc_vocab_file **out, const char *path, nc_err *err) {
    *out = NULL;
    nc_vocab_file *vf = calloc(1, sizeof *vf);
    if (!vf) return nc_fail(err, "out of memory");
    size_t n = strlen(path);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (vocab_load_hf_dir(&vf->v, path, err)) { free(vf); return -1; }
    } else if (n >= 5 && strcmp(path + n - 5, ".json") == 0) {
        if (vocab_load_hf(&vf->v, path, err)) { free(vf); return -1; }
    } else {
        if (gguf_open(&vf->f, path, err)) { free(vf); return -1; }
        if (vocab_load(&vf->v, vf->f, err)) { gguf_close(vf->f); free(vf); return -1; }
    }
    *out = vf;
    return 0;
}

void nc_vocab_file_free(nc_vocab_file *vf) {
    if (!vf) return;
    vocab_free(vf->v);
    gguf_close(vf->f);
    free(vf);
}

int nc_vocab_file_tokenize(const nc_vocab_file *vf, const char *text, size_t len, bool add_special, bool parse_special,
                           int32_t *out, int cap, nc_err *err) {
    return vocab_tokenize(vf->v, text, len, add_special, parse_special, out, cap, err);
}

int nc_vocab_file_piece(const nc_vocab_file *vf, int32_t id, char *buf, int cap) {
    return vocab_token_piece(vf->v, id, true, buf, cap);
}

nc_detok *nc_detok_new(const nc_model *m) {
    nc_detok *d = calloc(1, sizeof *d);
    if (d) vocab_stream_init(&d->stream, m->v);
    return d;
}
void nc_detok_free(nc_detok *d) { free(d); }
int nc_detok_push(nc_detok *d, int32_t token, char *out, int cap) { return vocab_stream_push(&d->stream, token, out, cap); }
int nc_detok_flush(nc_detok *d, char *out, int cap) { return vocab_stream_flush(&d->stream, out, cap); }

/* ---- inference ---- */

/* The element type of a cache type; false for a value outside the enum. */
static const uint32_t cache_types[] = {[NC_CACHE_F16] = GGML_TYPE_F16, [NC_CACHE_F32] = GGML_TYPE_F32,
                                       [NC_CACHE_Q8_0] = GGML_TYPE_Q8_0, [NC_CACHE_Q4_0] = GGML_TYPE_Q4_0};

/* A cache type's GGML type, NC_CACHE_DEFAULT as the model's row says. */
static bool cache_ggml_type(const nc_model *m, nc_cache_type t, uint32_t *out) {
    if (t == NC_CACHE_DEFAULT) t = m->m->hp.arch->kv_f32 ? NC_CACHE_F32 : NC_CACHE_F16;
    if ((unsigned)t >= sizeof cache_types / sizeof cache_types[0]) return false;
    *out = cache_types[t];
    return true;
}

static nc_cache_type cache_type_of(uint32_t ggml_type) {
    nc_cache_type t = NC_CACHE_F16;
    while ((unsigned)t < sizeof cache_types / sizeof cache_types[0] - 1 && cache_types[t] != ggml_type) t++;
    return t;
}

int nc_context_new(nc_context **out, nc_model *m, const nc_context_params *p, nc_err *err) {
    *out = NULL;
    nc_context_params d = p ? *p : (nc_context_params){0};
    if (d.n_ctx < 0 || d.n_seq_max < 0 || d.n_threads < 0 || d.n_batch < 0 || d.kv_cells < 0)
        return nc_fail(err, "context parameters must not be negative (n_ctx %d, n_seq_max %d, n_threads %d, n_batch %d, "
                            "kv_cells %lld)", d.n_ctx, d.n_seq_max, d.n_threads, d.n_batch, (long long)d.kv_cells);
    if (d.n_ctx == 0) d.n_ctx = m->m->hp.n_ctx_train < 4096 ? m->m->hp.n_ctx_train : 4096;
    if (d.n_seq_max == 0) d.n_seq_max = 1;
    if (d.n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        d.n_threads = n > 0 ? (int32_t)n : 1;
    }
    if (d.n_threads > 512) return nc_fail(err, "n_threads %d is above the limit of 512", d.n_threads);
    if (d.n_batch == 0) d.n_batch = 512;
    uint32_t type_k, type_v;
    if (!cache_ggml_type(m, d.type_k, &type_k) || !cache_ggml_type(m, d.type_v, &type_v))
        return nc_fail(err, "cache types %d (keys) and %d (values): each must be an nc_cache_type (default, f16, f32, q8_0, q4_0)",
                       (int)d.type_k, (int)d.type_v);
    if (d.n_gpu_layers < -1) return nc_fail(err, "n_gpu_layers %d: -1 (every layer), 0 (none) or a count", d.n_gpu_layers);
    int32_t n_layer = m->m->hp.n_layer, n_gpu = d.n_gpu_layers < 0 || d.n_gpu_layers > n_layer ? n_layer : d.n_gpu_layers;
    nc_context *c = calloc(1, sizeof *c);
    if (!c) return nc_fail(err, "out of memory");
    c->model = m;
    c->n_threads = d.n_threads;
    atomic_fetch_add(&m->n_contexts, 1);
    if (fwd_init(&c->fwd, m->m, d.n_ctx, d.n_seq_max, d.n_threads, d.n_batch, d.kv_cells,
                 type_k, type_v, d.swa_full, d.fast, n_gpu, err)) {
        atomic_fetch_sub(&m->n_contexts, 1);
        free(c);
        return -1;
    }
    *out = c;
    return 0;
}

void nc_context_free(nc_context *c) {
    if (!c) return;
    atomic_fetch_sub(&c->model->n_contexts, 1);
    fwd_free(&c->fwd);
    free(c);
}

int32_t nc_context_n_ctx(const nc_context *c) { return kv_n_ctx(&c->fwd.kv); }
int32_t nc_context_n_threads(const nc_context *c) { return c->n_threads; }

const char *nc_context_device(nc_context *c) { return fwd_describe(&c->fwd, c->device, sizeof c->device); }

int nc_forward(nc_context *c, const nc_batch_entry *batch, int n, nc_err *err) {
    return fwd_run(&c->fwd, batch, n, err);
}

const float *nc_logits(const nc_context *c, int i) { return fwd_logits(&c->fwd, i); }
const float *nc_hidden(const nc_context *c, int i) { return fwd_hidden(&c->fwd, i); }

_Static_assert(NC_KV_BLOCK == KV_BLOCK, "one block size");

static bool seq_ok(const nc_context *c, int32_t seq) { return seq >= 0 && seq < kv_n_seq(&c->fwd.kv); }
int32_t nc_kv_seq_len(const nc_context *c, int32_t seq) { return seq_ok(c, seq) ? kv_seq_len(&c->fwd.kv, seq) : 0; }
const int32_t *nc_kv_seq_tokens(const nc_context *c, int32_t seq) {
    return seq_ok(c, seq) ? kv_tokens(&c->fwd.kv, seq) : NULL;
}
int32_t nc_kv_seq_pos_next(const nc_context *c, int32_t seq) {
    int32_t n = nc_kv_seq_len(c, seq);
    return n ? kv_positions(&c->fwd.kv, seq)[n - 1] + 1 : 0;
}
void nc_kv_seq_clear(nc_context *c, int32_t seq) { kv_seq_truncate(&c->fwd.kv, seq, 0); }
void nc_kv_seq_truncate(nc_context *c, int32_t seq, int32_t n_keep) {
    nc_err err; /* a failure leaves the sequence empty, which the caller sees in its length */
    fwd_seq_truncate(&c->fwd, seq, n_keep, &err);
}
int nc_kv_seq_copy(nc_context *c, int32_t src, int32_t dst, nc_err *err) { return kv_seq_copy(&c->fwd.kv, src, dst, err); }
int32_t nc_kv_seq_reuse_prefix(nc_context *c, int32_t seq, const int32_t *tokens, int32_t n) {
    return kv_seq_reuse_prefix(&c->fwd.kv, seq, tokens, n);
}
int nc_kv_seq_keep(nc_context *c, int32_t seq, const int32_t *cells, int32_t n, const int32_t *new_pos, nc_err *err) {
    if (n < 0) return nc_fail(err, "kept cell count %d is negative", n);
    return fwd_seq_keep(&c->fwd, seq, cells, n, new_pos, err);
}

/* A context shift (sinks: attention sinks) keeping the first `first` cells and dropping the
 * n_discard after them (kv/kv_policy.h decides the cells and positions). */
static int evict(nc_context *c, int32_t seq, bool sinks, int32_t first, int32_t n_discard, nc_err *err) {
    const char *what = sinks ? "attention sinks" : "context shift";
    if (!seq_ok(c, seq)) return nc_fail(err, "%s: sequence id %d is outside 0..%d", what, seq, kv_n_seq(&c->fwd.kv) - 1);
    const kv_cache *kv = &c->fwd.kv;
    int32_t len = kv_seq_len(kv, seq);
    if (first < 0 || n_discard < 0 || first + n_discard > len)
        return nc_fail(err, "%s: keeping the first %d cells and dropping %d after them does not fit in the %d cells of "
                            "sequence %d", what, first, n_discard, len, seq);
    if (n_discard == 0)
        return nc_fail(err, "%s: sequence %d has %d cells, %d kept first: none to drop", what, seq, len, first);
    int32_t *cells = malloc(2 * (size_t)len * sizeof *cells);
    if (!cells) return nc_fail(err, "%s: out of memory", what);
    int32_t n = sinks ? kv_policy_sinks(len, first, n_discard, cells, cells + len)
                      : kv_policy_shift(kv_positions(kv, seq), len, first, n_discard, cells, cells + len);
    int rc = nc_kv_seq_keep(c, seq, cells, n, cells + len, err);
    free(cells);
    return rc;
}

int nc_kv_seq_shift(nc_context *c, int32_t seq, int32_t n_keep, int32_t n_discard, nc_err *err) {
    if (n_discard == 0 && seq_ok(c, seq)) n_discard = kv_policy_shift_discard(kv_seq_len(&c->fwd.kv, seq), n_keep);
    return evict(c, seq, false, n_keep, n_discard, err);
}

int nc_kv_seq_sink(nc_context *c, int32_t seq, int32_t n_sink, int32_t n_discard, nc_err *err) {
    if (n_discard == 0 && seq_ok(c, seq)) n_discard = kv_policy_sinks_discard(kv_seq_len(&c->fwd.kv, seq), n_sink);
    return evict(c, seq, true, n_sink, n_discard, err);
}

int nc_ctx_policy_check(const nc_ctx_policy *p, int32_t n_ctx, int32_t n_prompt, bool bos_first, nc_err *err) {
    switch (p->mode) {
    case NC_CTX_STOP: return 0;
    case NC_CTX_SHIFT: {
        if (p->n_keep < -1) return nc_fail(err, "n_keep: %d is below -1 (the whole prompt)", p->n_keep);
        int32_t keep = kv_policy_keep(p->n_keep, n_prompt, bos_first);
        if (n_ctx - keep < 2)
            return nc_fail(err, "n_keep: keeping %d tokens of the prompt leaves %d of the %d-token context to shift "
                                "(at least 2 needed)", keep, n_ctx - keep, n_ctx);
        return 0;
    }
    case NC_CTX_SINKS:
        if (p->n_sink < 1 || p->n_sink >= n_ctx)
            return nc_fail(err, "n_sink: %d is outside 1..%d (a context of %d tokens keeps a window of at least one "
                                "recent token besides the sinks)", p->n_sink, n_ctx - 1, n_ctx);
        return 0;
    }
    return nc_fail(err, "context policy: unknown mode %d", (int)p->mode);
}

int nc_ctx_policy_supported(const nc_context *c, const nc_ctx_policy *p, nc_err *err) {
    if (p->mode == NC_CTX_STOP || !kv_recurrent(&c->fwd.kv)) return 0;
    return nc_fail(err, "%s: this model's recurrent layers carry a state of every token seen, which cannot drop "
                        "tokens (a context shift and attention sinks are for attention-only models)",
                   p->mode == NC_CTX_SHIFT ? "context shift" : "attention sinks");
}

int32_t nc_kv_seq_make_room(nc_context *c, int32_t seq, const nc_ctx_policy *p, int32_t n_prompt, nc_err *err) {
    if (!seq_ok(c, seq)) return nc_fail(err, "sequence id %d is outside 0..%d", seq, kv_n_seq(&c->fwd.kv) - 1);
    const kv_cache *kv = &c->fwd.kv;
    int32_t len = kv_seq_len(kv, seq), bos = nc_token_bos(c->model);
    bool bos_first = len > 0 && bos >= 0 && kv_tokens(kv, seq)[0] == bos;
    if (nc_ctx_policy_check(p, kv_n_ctx(kv), n_prompt, bos_first, err)) return -1;
    if (p->mode == NC_CTX_STOP) return 0;
    int32_t first = p->mode == NC_CTX_SHIFT ? kv_policy_keep(p->n_keep, n_prompt, bos_first) : p->n_sink;
    if (first > len) first = len;
    int32_t drop = p->mode == NC_CTX_SHIFT ? kv_policy_shift_discard(len, first) : kv_policy_sinks_discard(len, first);
    int rc = p->mode == NC_CTX_SHIFT ? nc_kv_seq_shift(c, seq, first, drop, err) : nc_kv_seq_sink(c, seq, first, drop, err);
    return rc ? -1 : drop;
}

_Static_assert((int)NC_KV_NONE == (int)KV_POLICY_NONE && (int)NC_KV_WINDOW == (int)KV_POLICY_WINDOW &&
                   (int)NC_KV_SINKS == (int)KV_POLICY_SINKS && (int)NC_KV_H2O == (int)KV_POLICY_H2O,
               "one set of policies");
int nc_kv_seq_set_budget(nc_context *c, int32_t seq, nc_kv_policy policy, int32_t budget, int32_t recent, nc_err *err) {
    kv_budget b = {.policy = (kv_policy)policy, .budget = budget, .recent = recent};
    return kv_set_budget(&c->fwd.kv, seq, b, err);
}
int32_t nc_kv_seq_attention(const nc_context *c, int32_t seq, double *out, int32_t cap) {
    int32_t n = nc_kv_seq_len(c, seq);
    for (int32_t i = 0; i < n && i < cap; i++) out[i] = (double)kv_score(&c->fwd.kv, seq, i) / KV_SCORE_ONE;
    return n;
}
int32_t nc_kv_blocks_needed(const nc_context *c, int32_t seq, int32_t n) { return kv_blocks_needed(&c->fwd.kv, seq, n); }
int32_t nc_kv_blocks_available(const nc_context *c) { return kv_blocks_available(&c->fwd.kv); }
uint64_t nc_kv_bytes_per_token(const nc_context *c) { return kv_bytes_per_token(&c->fwd.kv); }
uint64_t nc_kv_state_bytes(const nc_context *c) { return kv_state_bytes(&c->fwd.kv); }
bool nc_kv_latent_type(const nc_context *c, nc_cache_type *type) {
    for (int32_t l = 0; l < c->fwd.kv.n_layer; l++)
        if (c->fwd.kv.layer[l].v_in_k) {
            *type = cache_type_of(c->fwd.kv.layer[l].type_k);
            return true;
        }
    return false;
}
void nc_context_cache_types(const nc_context *c, nc_cache_type *k, nc_cache_type *v) {
    *k = cache_type_of(c->fwd.kv.type_k);
    *v = cache_type_of(c->fwd.kv.type_v);
}
uint64_t nc_kv_bytes_total(const nc_context *c) { return kv_bytes_total(&c->fwd.kv); }
void nc_kv_get_stats(const nc_context *c, nc_kv_stats *out) {
    kv_stats s = kv_get_stats(&c->fwd.kv);
    *out = (nc_kv_stats){.n_blocks = s.n_blocks, .used = s.used, .cached = s.cached, .free = s.free, .lookups = s.lookups,
                         .hits = s.hits, .tokens_looked_up = s.tokens_looked_up, .tokens_reused = s.tokens_reused,
                         .evictions = s.evictions};
}

/* ---- KV cache files ---- */

struct nc_kv_file {
    nc_context *c;
    char *path;
    const void *data;
    size_t size;
    void *map;
    kv_file_view view;
};

/* What a file saved from this context records: the model, and the cache's shape and type (its
 * layer table into `layers`, n_layer entries). */
static kv_file_id context_id(const nc_context *c, kv_file_layer *layers) {
    const model *m = c->model->m;
    kv_file_id id = {.fingerprint = model_fingerprint(m)};
    snprintf(id.arch, sizeof id.arch, "%s", model_arch_name(m));
    snprintf(id.name, sizeof id.name, "%.*s", (int)sizeof id.name - 1, m->name);
    return kv_file_id_of(&c->fwd.kv, &id, layers);
}

/* Saved caches are written from and read into the host's copy of the cells: on the GPU they are
 * brought over first (saving) or sent back after (loading). */
int nc_kv_seq_save(nc_context *c, int32_t seq, int32_t n, const char *path, uint64_t *bytes, nc_err *err) {
    if (seq >= 0 && seq < kv_n_seq(&c->fwd.kv)) {
        int32_t len = kv_seq_len(&c->fwd.kv, seq);
        if (fwd_cache_sync(&c->fwd, seq, n > 0 && n < len ? n : len, true, err)) return -1;
    }
    kv_file_layer *layers = malloc((size_t)c->fwd.kv.n_layer * sizeof *layers);
    if (!layers) return nc_fail(err, "out of memory");
    kv_file_id id = context_id(c, layers);
    int rc = kv_seq_save(&c->fwd.kv, seq, n > 0 ? n : nc_kv_seq_len(c, seq), &id, path, bytes, err);
    free(layers);
    return rc;
}

void nc_kv_file_close(nc_kv_file *f) {
    if (!f) return;
    kv_file_view_free(&f->view);
    fmt_unmap(f->map, f->size);
    free(f->path);
    free(f);
}

int nc_kv_file_open(nc_kv_file **out, nc_context *c, const char *path, nc_err *err) {
    *out = NULL;
    nc_kv_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return nc_fail(err, "out of memory");
    }
    f->c = c;
    kv_file_layer *layers = malloc((size_t)c->fwd.kv.n_layer * sizeof *layers);
    if (!layers) {
        nc_kv_file_close(f);
        return nc_fail(err, "out of memory");
    }
    kv_file_id want = context_id(c, layers);
    int rc = fmt_map(path, &f->data, &f->size, &f->map, err) || kv_file_parse(&f->view, f->data, f->size, path, err) ||
             kv_file_check(&f->view, &want, c->model->m->hp.n_vocab, path, err);
    free(layers);
    if (rc) {
        nc_kv_file_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

void nc_kv_file_get_info(const nc_kv_file *f, nc_kv_file_info *info) {
    *info = (nc_kv_file_info){.n_tokens = f->view.n_cells, .tokens = f->view.tokens, .n_bytes = f->size};
}

int nc_kv_file_load(nc_kv_file *f, int32_t seq, int32_t n, nc_err *err) {
    return fwd_seq_load(&f->c->fwd, seq, &f->view, n, f->path, err);
}
