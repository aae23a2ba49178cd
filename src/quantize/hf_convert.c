/* Hugging Face directory -> GGUF (see hf_convert.h). The facts of llama.cpp's converter used
 * here (convert_hf_to_gguf.py, gguf-py; checked against the files it wrote in shared/archs):
 * - tensor names: the GGUF and transformers names of each role (model/arch.c);
 * - Llama-family models (llama, mixtral, granite, smollm3) rotate pairs in GGUF: the converter
 *   permutes the rows of q_proj (n_head heads) and k_proj (n_head_kv heads) from transformers'
 *   halves, row h*d + 2i + t coming from row h*d + t*d/2 + i (d = head_dim);
 * - Gemma stores RMSNorm weights w and computes with 1 + w; the converter writes 1 + w (in F32)
 *   for every tensor named *norm.weight;
 * - per-expert matrices are stacked into one [n_expert, rows, cols] tensor per role; gpt-oss's
 *   [n_expert, in, out] matrices are transposed, and its fused gate_up (weights and biases)
 *   split into even (gate) and odd (up) outputs;
 * - Llama 3 rope scaling becomes a rope_freqs tensor of per-frequency divisors, computed in F32;
 * - 1-D tensors, norms, biases, ffn_gate_inp and attn_sinks are F32 whatever the output type;
 * - a tied output (lm_head missing, or the embeddings' tensor under either name) is not written;
 * - general.name: the directory's name, words title-cased; general.size_label: the parameter
 *   count rounded (K, M, B, T), "Ex" per-expert size for MoE (expert weights counted once). */
#include "quantize/hf_convert.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/ggml_types.h"
#include "format/gguf_write.h"
#include "format/hf_dir.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "tensor/quant.h"
#include "vocab/vocab.h"

#define NAME_MAX_LEN 160

/* ---- hyper-parameter keys, per architecture ---------------------------------------------------- */

/* Keys beyond the ones every converted model has (block_count, context_length, embedding_length,
 * feed_forward_length, head counts, rms epsilon; expert counts for MoE; key/value_length when
 * config.json gives head_dim). */
enum {
    K_FREQ_BASE = 1 << 0,     /* rope.freq_base (Gemma 2's converter omits it) */
    K_VOCAB_ROPE = 1 << 1,    /* vocab_size and rope.dimension_count (the Llama class) */
    K_ROPE_DIMS = 1 << 2,     /* rope.dimension_count alone (Phi-3: the rotated part) */
    K_SCALING = 1 << 3,       /* rope.scaling.* for linear and YaRN ropes */
    K_SWA_BASE = 1 << 4,      /* rope.freq_base_swa (Gemma 3) */
    K_SWA = 1 << 5,           /* attention.sliding_window (0 when config.json has none) */
    K_SOFTCAP = 1 << 6,       /* attn_logit_softcapping, final_logit_softcapping (Gemma 2) */
    K_GRANITE = 1 << 7,       /* attention.scale, embedding_scale, residual_scale, logit_scale */
    K_EXPERT_FF = 1 << 8,     /* expert_feed_forward_length */
    K_ORIG_CTX = 1 << 9,      /* rope.scaling.original_context_length (Phi-3 writes it always) */
    K_NO_PREFIX = 1 << 10,    /* tokenizer.ggml.add_space_prefix false for SentencePiece (Gemma) */
    K_SPM_FIRST = 1 << 11,    /* the vocabulary from tokenizer.model when there is one (Llama's and
                                 Gemma's set_vocab try SentencePiece first; Phi-3's converter read
                                 shared/archs/phi3's tokenizer.json though a tokenizer.model is there) */
};

typedef struct arch_keys {
    const char *arch;  /* arch_desc.name */
    const char *gguf;  /* general.architecture the converter writes */
    unsigned keys;
} arch_keys;

static const arch_keys key_table[] = {
    {"llama", "llama", K_FREQ_BASE | K_VOCAB_ROPE | K_SCALING | K_SPM_FIRST},
    {"mixtral", "llama", K_FREQ_BASE | K_VOCAB_ROPE | K_SCALING | K_SPM_FIRST},
    {"granite", "granite", K_FREQ_BASE | K_VOCAB_ROPE | K_SCALING | K_GRANITE | K_SPM_FIRST},
    {"smollm3", "smollm3", K_FREQ_BASE | K_VOCAB_ROPE | K_SCALING | K_SPM_FIRST},
    {"qwen2", "qwen2", K_FREQ_BASE | K_SCALING},
    {"qwen3", "qwen3", K_FREQ_BASE | K_SCALING},
    {"qwen3moe", "qwen3moe", K_FREQ_BASE | K_SCALING | K_EXPERT_FF},
    {"gemma2", "gemma2", K_SWA | K_SOFTCAP | K_NO_PREFIX | K_SPM_FIRST},
    {"gemma3", "gemma3", K_FREQ_BASE | K_SCALING | K_SWA_BASE | K_SWA | K_NO_PREFIX | K_SPM_FIRST},
    {"phi3", "phi3", K_FREQ_BASE | K_ROPE_DIMS | K_ORIG_CTX | K_SWA},
    {"olmo2", "olmo2", K_FREQ_BASE | K_SCALING},
    {"gpt-oss", "gpt-oss", K_FREQ_BASE | K_SCALING | K_SWA | K_EXPERT_FF},
};

static const arch_keys *keys_of(const arch_desc *a) {
    for (size_t i = 0; i < sizeof key_table / sizeof key_table[0]; i++)
        if (!strcmp(key_table[i].arch, a->name)) return &key_table[i];
    return NULL;
}

typedef struct conv {
    const char *dir;
    hf_dir *d;
    model *m;
    const arch_keys *ak;
    gguf_out *o;
    nc_err *err;
    struct out_tensor *t;
    int n_t, cap_t;
    const st_tensor *tok_embd; /* the embeddings' checkpoint tensor */
} conv;

static int kv_u32(conv *c, const char *suffix, uint32_t v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", c->ak->gguf, suffix);
    return gguf_out_kv_u32(c->o, key, v);
}

static int kv_f32(conv *c, const char *suffix, double v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", c->ak->gguf, suffix);
    return gguf_out_kv_f32(c->o, key, (float)v);
}

static int kv_str(conv *c, const char *suffix, const char *s) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", c->ak->gguf, suffix);
    return gguf_out_kv_str(c->o, key, s, strlen(s));
}

static const cJSON *cfg_item(conv *c, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(hf_dir_config(c->d), key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static double cfg_num(conv *c, const char *key, double dflt) {
    const cJSON *v = cfg_item(c, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static int rope_scaling_keys(conv *c, const model_rope *r) {
    if (r->kind == ROPE_LINEAR) return kv_str(c, "rope.scaling.type", "linear") || kv_f32(c, "rope.scaling.factor", r->factor);
    if (r->kind != ROPE_YARN) return 0;
    return kv_str(c, "rope.scaling.type", "yarn") || kv_f32(c, "rope.scaling.factor", r->factor) ||
           kv_u32(c, "rope.scaling.original_context_length", (uint32_t)r->orig_ctx) ||
           kv_f32(c, "rope.scaling.yarn_beta_fast", r->beta_fast) || kv_f32(c, "rope.scaling.yarn_beta_slow", r->beta_slow);
}

static int hparam_keys(conv *c) {
    const model_hparams *hp = &c->m->hp;
    unsigned k = c->ak->keys;
    int rc = kv_u32(c, "block_count", (uint32_t)hp->n_layer) || kv_u32(c, "context_length", (uint32_t)hp->n_ctx_train) ||
             kv_u32(c, "embedding_length", (uint32_t)hp->n_embd) || kv_u32(c, "feed_forward_length", (uint32_t)hp->n_ff) ||
             kv_u32(c, "attention.head_count", (uint32_t)hp->n_head) ||
             kv_u32(c, "attention.head_count_kv", (uint32_t)hp->n_head_kv) ||
             ((k & K_FREQ_BASE) && kv_f32(c, "rope.freq_base", hp->rope[0].base)) ||
             kv_f32(c, "attention.layer_norm_rms_epsilon", hp->norm_eps) ||
             (hp->n_expert && (kv_u32(c, "expert_count", (uint32_t)hp->n_expert) ||
                               kv_u32(c, "expert_used_count", (uint32_t)hp->n_expert_used))) ||
             (cfg_item(c, "head_dim") && (kv_u32(c, "attention.key_length", (uint32_t)hp->head_dim) ||
                                          kv_u32(c, "attention.value_length", (uint32_t)hp->head_dim))) ||
             ((k & K_VOCAB_ROPE) && kv_u32(c, "vocab_size", (uint32_t)hp->n_vocab)) ||
             ((k & (K_VOCAB_ROPE | K_ROPE_DIMS)) && kv_u32(c, "rope.dimension_count", (uint32_t)hp->n_rot)) ||
             ((k & K_SCALING) && rope_scaling_keys(c, &hp->rope[0])) ||
             ((k & K_SWA_BASE) && kv_f32(c, "rope.freq_base_swa", hp->rope[1].base)) ||
             ((k & K_ORIG_CTX) && kv_u32(c, "rope.scaling.original_context_length", (uint32_t)hp->rope[0].orig_ctx)) ||
             ((k & K_SWA) && kv_u32(c, "attention.sliding_window", (uint32_t)cfg_num(c, "sliding_window", 0))) ||
             ((k & K_SOFTCAP) && (kv_f32(c, "attn_logit_softcapping", hp->attn_softcap) ||
                                  kv_f32(c, "final_logit_softcapping", hp->final_softcap))) ||
             ((k & K_GRANITE) && (kv_f32(c, "attention.scale", hp->attn_scale) ||
                                  kv_f32(c, "embedding_scale", hp->embd_scale) ||
                                  kv_f32(c, "residual_scale", hp->residual_scale) ||
                                  kv_f32(c, "logit_scale", cfg_num(c, "logits_scaling", 1)))) ||
             ((k & K_EXPERT_FF) && kv_u32(c, "expert_feed_forward_length", (uint32_t)hp->n_ff_exp));
    return rc ? nc_fail(c->err, "out of memory") : 0;
}

/* ---- tensors ----------------------------------------------------------------------------------- */

typedef enum xform {
    X_COPY,
    X_PLUS_ONE,  /* Gemma's norms: 1 + w */
    X_PERMUTE,   /* halves to pairs per head (arg: heads) */
    X_STACK,     /* n_src experts one after the other */
    X_TRANSPOSE, /* [E][A][C] -> [E][C/step][A], taking columns step*j + parity (gpt-oss experts) */
    X_ROPE_FREQS /* generated: Llama 3's divisors */
} xform;

typedef struct out_tensor {
    char name[NAME_MAX_LEN];
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type, src_type;
    xform x;
    int arg, step, parity;
    const st_tensor **src;
    int n_src;
} out_tensor;

static uint64_t n_elems(const out_tensor *t) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d];
    return n;
}

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

static out_tensor *add_tensor(conv *c, const char *name) {
    if (c->n_t == c->cap_t) {
        int cap = c->cap_t ? 2 * c->cap_t : 64;
        out_tensor *t = realloc(c->t, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        c->t = t;
        c->cap_t = cap;
    }
    out_tensor *t = &c->t[c->n_t++];
    *t = (out_tensor){0};
    snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

/* The checkpoint tensor `name` (or the one it is an alias of), or NULL; a type other than F32,
 * F16 and BF16 is an error. */
static int find(conv *c, const char *name, const st_tensor **out) {
    const st_tensor *t = *out = hf_dir_find_st_tensor(c->d, name);
    if (!t) return 0;
    uint32_t ty = t->t.type;
    if (ty == GGML_TYPE_F32 || ty == GGML_TYPE_F16 || ty == GGML_TYPE_BF16) return 0;
    return nc_fail(c->err, "%s: tensor '%s' is %s: quantize converts F32, F16 and BF16 checkpoints only", c->dir, name,
                   st_dtype_name(t->dtype));
}

/* Shape in GGUF order from a row-major shape. */
static void set_shape(out_tensor *t, const uint64_t *shape, uint32_t rank) {
    t->n_dims = rank;
    for (uint32_t d = 0; d < 4; d++) t->ne[d] = d < rank ? shape[rank - 1 - d] : 1;
}

/* The converter writes these F32 whatever --outtype says. */
static bool always_f32(const out_tensor *t, tensor_role r) {
    return t->n_dims <= 1 || ends_with(t->name, "norm.weight") || ends_with(t->name, ".bias") || r == L_ROUTER ||
           r == L_SINKS;
}

static int plan_one(conv *c, tensor_role r, const char *gguf_name, const st_tensor **src, int n_src, xform x) {
    out_tensor *t = add_tensor(c, gguf_name);
    if (!t) return nc_fail(c->err, "out of memory");
    t->src = src;
    t->n_src = n_src;
    t->x = x;
    t->src_type = src[0]->t.type;
    uint64_t shape[ST_MAX_DIMS + 1];
    uint32_t rank = src[0]->rank;
    if (rank == 0) shape[0] = 1, rank = 1; /* a scalar: the converter writes [1] */
    else if (rank > 3) return nc_fail(c->err, "%s: tensor '%s' has %u dimensions", c->dir, src[0]->t.name, rank);
    if (src[0]->rank) memcpy(shape + (x == X_STACK), src[0]->shape, rank * sizeof *shape);
    if (x == X_STACK) shape[0] = (uint64_t)n_src, rank++;
    set_shape(t, shape, rank);
    if (x == X_PERMUTE) {
        t->arg = r == L_Q ? c->m->hp.n_head : c->m->hp.n_head_kv;
        if (rank != 2 || shape[0] % (uint64_t)(2 * t->arg))
            return nc_fail(c->err, "%s: tensor '%s': %llu rows are not %d heads of an even size", c->dir,
                           src[0]->t.name, (unsigned long long)shape[0], t->arg);
    }
    t->type = always_f32(t, r) || x == X_PLUS_ONE ? GGML_TYPE_F32 : t->src_type;
    return 0;
}

/* gpt-oss's [E][in][out] experts (and [E][out] biases): transposed, columns step*j + parity. */
static int plan_transposed(conv *c, tensor_role r, const char *gguf_name, const st_tensor *src, int step, int parity) {
    bool bias = src->rank == 2;
    if (src->rank < 2 || src->rank > 3 || src->shape[src->rank - 1] % (uint64_t)step)
        return nc_fail(c->err, "%s: tensor '%s' is not [experts][in][out]", c->dir, src->t.name);
    uint64_t shape[3] = {src->shape[0], src->shape[src->rank - 1] / (uint64_t)step, bias ? 1 : src->shape[1]};
    const st_tensor **one = malloc(sizeof *one);
    out_tensor *t = one ? add_tensor(c, gguf_name) : NULL;
    if (!t) {
        free(one);
        return nc_fail(c->err, "out of memory");
    }
    *one = src;
    t->x = X_TRANSPOSE;
    t->step = step;
    t->parity = parity;
    t->src = one;
    t->n_src = 1;
    t->src_type = src->t.type;
    set_shape(t, shape, bias ? 2 : 3);
    t->type = always_f32(t, r) ? GGML_TYPE_F32 : t->src_type;
    return 0;
}

static int count_d(const char *fmt) {
    int n = 0;
    for (const char *p = fmt; (p = strstr(p, "%d")); p += 2) n++;
    return n;
}

/* One role of layer il (-1: model-wide): its checkpoint tensor(s), if any, and what they become. */
static int plan_role(conv *c, tensor_role r, int il) {
    const arch_desc *a = c->m->hp.arch;
    const char *hf = arch_hf_name(a, r), *gg = arch_gguf_name(a, r);
    if (!hf) return 0;
    char name[NAME_MAX_LEN], out[NAME_MAX_LEN];
    int n_exp = c->m->hp.n_expert, n_src = count_d(hf) == 2 ? n_exp : 1;
    const st_tensor **src = calloc((size_t)n_src + 1, sizeof *src);
    if (!src) return nc_fail(c->err, "out of memory");
    for (int e = 0; e < n_src; e++) {
        snprintf(name, sizeof name, hf, il, e);
        if (find(c, name, &src[e])) goto fail;
        if (!src[e] && e > 0) {
            nc_fail(c->err, "%s: expert tensor '%s' is missing", c->dir, name);
            goto fail;
        }
        if (!src[e]) break;
        if (e > 0 && (src[e]->dtype != src[0]->dtype || src[e]->rank != src[0]->rank ||
                      memcmp(src[e]->shape, src[0]->shape, src[0]->rank * sizeof *src[0]->shape))) {
            nc_fail(c->err, "%s: expert tensor '%s' differs in type or shape from expert 0's", c->dir, name);
            goto fail;
        }
    }
    /* a tied output (lm_head the embeddings' tensor, or an alias of it) is not written; the
     * embeddings are, even when the checkpoint keeps them under lm_head's name */
    if (!src[0] || (r == T_OUTPUT && c->tok_embd == src[0])) {
        free(src);
        return 0;
    }
    if (r == T_TOK_EMBD) c->tok_embd = src[0];
    if (r == L_GATE_UP_EXPS || r == L_GATE_UP_EXPS_BIAS) {
        bool bias = r == L_GATE_UP_EXPS_BIAS;
        char up[NAME_MAX_LEN];
        snprintf(out, sizeof out, arch_gguf_name(a, bias ? L_GATE_EXPS_BIAS : L_GATE_EXPS), il);
        snprintf(up, sizeof up, arch_gguf_name(a, bias ? L_UP_EXPS_BIAS : L_UP_EXPS), il);
        int rc = plan_transposed(c, r, out, src[0], 2, 0) || plan_transposed(c, r, up, src[0], 2, 1) ? -1 : 0;
        free(src);
        return rc;
    }
    if (!gg) {
        nc_fail(c->err, "%s: tensor '%s' has no GGUF name for %s", c->dir, name, a->name);
        goto fail;
    }
    snprintf(out, sizeof out, gg, il);
    if (a->hf_experts_transposed && r == L_DOWN_EXPS) {
        int rc = plan_transposed(c, r, out, src[0], 1, 0);
        free(src);
        return rc;
    }
    xform x = n_src > 1 ? X_STACK
            : a->gguf_rope_pairs && (r == L_Q || r == L_K) ? X_PERMUTE
            : a->hf_norm_plus_one && ends_with(out, "norm.weight") ? X_PLUS_ONE
            : X_COPY;
    return plan_one(c, r, out, src, n_src, x);
fail:
    free(src);
    return -1;
}

static int plan_rope_freqs(conv *c) {
    const model_hparams *hp = &c->m->hp;
    if (hp->rope[0].kind != ROPE_LLAMA3) return 0;
    out_tensor *t = add_tensor(c, arch_gguf_name(hp->arch, T_ROPE_FREQS));
    if (!t) return nc_fail(c->err, "out of memory");
    uint64_t n = (uint64_t)hp->head_dim / 2;
    set_shape(t, &n, 1);
    t->x = X_ROPE_FREQS;
    t->type = t->src_type = GGML_TYPE_F32;
    return 0;
}

static int plan_tensors(conv *c) {
    static const tensor_role global[] = {T_TOK_EMBD, T_OUTPUT, T_OUTPUT_NORM};
    if (plan_rope_freqs(c)) return -1;
    for (size_t i = 0; i < sizeof global / sizeof global[0]; i++)
        if (plan_role(c, global[i], -1)) return -1;
    for (int il = 0; il < c->m->hp.n_layer; il++)
        for (int r = L_ATTN_NORM; r < N_ROLES; r++)
            if (plan_role(c, (tensor_role)r, il)) return -1;
    return 0;
}

static int by_address(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)*(const void *const *)a, y = (uintptr_t)*(const void *const *)b;
    return (x > y) - (x < y);
}

/* Every checkpoint tensor must have found a place (the converter refuses the others too);
 * rotary inverse frequencies, which transformers recomputes, are skipped as it skips them. */
static int check_all_used(conv *c) {
    size_t n = 0;
    for (int k = 0; k < c->n_t; k++) n += (size_t)c->t[k].n_src;
    const fmt_tensor **used = malloc((n + 1) * sizeof *used);
    if (!used) return nc_fail(c->err, "out of memory");
    n = 0;
    for (int k = 0; k < c->n_t; k++)
        for (int i = 0; i < c->t[k].n_src; i++) used[n++] = &c->t[k].src[i]->t;
    qsort(used, n, sizeof *used, by_address);
    int rc = 0;
    for (size_t i = 0; i < hf_dir_n_tensors(c->d) && !rc; i++) {
        const fmt_tensor *f = hf_dir_tensor_at(c->d, i);
        if (!ends_with(f->name, "rotary_emb.inv_freq") && !bsearch(&f, used, n, sizeof *used, by_address))
            rc = nc_fail(c->err, "%s: tensor '%s' has no place in a %s GGUF (the checkpoint holds more than the "
                         "text model nucleus converts)", c->dir, f->name, c->m->hp.arch->name);
    }
    free(used);
    return rc;
}

/* ---- general.* ----------------------------------------------------------------------------------- */

/* The converter's rounding: 2 significant digits at least, no decimals once the integer part has them. */
static void count_label(char *buf, size_t cap, uint64_t n) {
    static const struct { double scale; const char *suffix; } units[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
    size_t u = 0;
    while (u < 3 && (double)n <= units[u].scale) u++;
    double x = (double)n / units[u].scale;
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%.0f", rint(x)); /* Python rounds halves to even */
    int fix = 2 - (len == 1 && digits[0] == '0' ? 0 : len);
    snprintf(buf, cap, "%.*f%s", fix > 0 ? fix : 0, x, units[u].suffix);
}

/* "4x183K" for MoE (shared parameters plus one expert's), "205K" otherwise. */
static void size_label(conv *c, char *buf, size_t cap) {
    uint64_t total = 0, expert = 0;
    int n_exp = c->m->hp.n_expert;
    for (int k = 0; k < c->n_t; k++) {
        uint64_t n = n_elems(&c->t[k]);
        total += n;
        if (strstr(c->t[k].name, "_exps.weight")) expert += n;
    }
    if (!n_exp || !expert) {
        count_label(buf, cap, total);
        return;
    }
    int len = snprintf(buf, cap, "%dx", n_exp);
    count_label(buf + len, cap - (size_t)len, total - expert + expert / (uint64_t)n_exp);
}

/* The directory's name, '-' as spaces, each word that is all lower-case and not a number or a
 * version ("v2") capitalised: how the converter titles a model it knows no better name for. */
static void model_name(const char *dir, char *buf, size_t cap) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t start = n;
    while (start > 0 && dir[start - 1] != '/') start--;
    snprintf(buf, cap, "%.*s", (int)(n - start), dir + start);
    for (char *w = buf; *w; w++)
        if (*w == '-') *w = ' ';
    for (char *w = buf; *w;) {
        size_t len = strcspn(w, " ");
        bool lower = true;
        for (size_t i = 0; i < len; i++) lower = lower && !isupper((unsigned char)w[i]);
        bool number = isdigit((unsigned char)w[0]) || (w[0] == 'v' && isdigit((unsigned char)w[1]));
        if (lower && !number) w[0] = (char)toupper((unsigned char)w[0]);
        w += len;
        w += *w == ' ';
    }
}

static int general_keys(conv *c) {
    char name[256], label[64];
    model_name(c->dir, name, sizeof name);
    size_label(c, label, sizeof label);
    int rc = gguf_out_kv_str(c->o, "general.architecture", c->ak->gguf, strlen(c->ak->gguf)) ||
             gguf_out_kv_str(c->o, "general.type", "model", 5) || gguf_out_kv_str(c->o, "general.name", name, strlen(name)) ||
             gguf_out_kv_str(c->o, "general.size_label", label, strlen(label));
    return rc ? nc_fail(c->err, "out of memory") : 0;
}

static int tokenizer_keys(conv *c) {
    vocab *v;
    char spm[4096];
    struct stat st;
    bool use_spm = (c->ak->keys & K_SPM_FIRST) && hf_join(spm, sizeof spm, c->dir, "tokenizer.model") &&
                   stat(spm, &st) == 0;
    if (use_spm ? vocab_load_hf_dir_spm(&v, c->dir, c->err) : vocab_load_hf_dir(&v, c->dir, c->err)) return -1;
    int rc = vocab_write_gguf(v, c->dir, c->m->hp.n_vocab, c->ak->keys & K_NO_PREFIX, c->o, c->err);
    vocab_free(v);
    if (rc) return -1;
    char *tmpl;
    size_t len;
    int got = hf_dir_chat_template(c->d, &tmpl, &len, c->err);
    if (got < 0) return -1;
    rc = got && gguf_out_kv_str(c->o, "tokenizer.chat_template", tmpl, len) ? nc_fail(c->err, "out of memory") : 0;
    free(tmpl);
    return rc;
}

/* ---- data ------------------------------------------------------------------------------------------ */

/* Llama 3's per-frequency divisors, in F32 as the converter computes them with torch. */
static void llama3_freqs(const model_hparams *hp, float *out, int n) {
    const model_rope *r = &hp->rope[0];
    float lo_wavelen = (float)(r->orig_ctx / r->low_freq_factor), hi_wavelen = (float)(r->orig_ctx / r->high_freq_factor);
    for (int i = 0; i < n; i++) {
        float freq = 1.0f / powf((float)r->base, (float)(2 * i) / (float)hp->head_dim);
        float wavelen = (float)(2 * M_PI) / freq;
        if (wavelen < hi_wavelen) out[i] = 1.0f;
        else if (wavelen > lo_wavelen) out[i] = (float)r->factor;
        else {
            float smooth = ((float)r->orig_ctx / wavelen - (float)r->low_freq_factor) /
                           (float)(r->high_freq_factor - r->low_freq_factor);
            out[i] = 1.0f / ((1.0f - smooth) / (float)r->factor + smooth);
        }
    }
}

/* The elements of t in its source type, in output order, into raw. */
static void gather(const out_tensor *t, uint8_t *raw) {
    size_t es = ggml_type_get(t->src_type)->block_bytes;
    const st_tensor *s = t->src[0];
    const uint8_t *in = s->t.data;
    if (t->x == X_COPY || t->x == X_PLUS_ONE) {
        memcpy(raw, in, s->t.n_bytes);
    } else if (t->x == X_STACK) {
        for (int e = 0; e < t->n_src; e++) memcpy(raw + (size_t)e * s->t.n_bytes, t->src[e]->t.data, s->t.n_bytes);
    } else if (t->x == X_PERMUTE) {
        uint64_t rows = s->shape[0], row = s->shape[1] * es, hd = rows / (uint64_t)t->arg;
        for (uint64_t r = 0; r < rows; r++) {
            uint64_t h = r / hd, w = r % hd, from = h * hd + (w % 2) * (hd / 2) + w / 2;
            memcpy(raw + r * row, in + from * row, row);
        }
    } else if (t->x == X_TRANSPOSE) {
        /* [E][J][A] from [E][A][cols], J = cols / step; a bias is [E][J] from [E][cols] */
        bool bias = t->n_dims == 2;
        uint64_t a_n = bias ? 1 : t->ne[0], j_n = t->ne[bias ? 0 : 1], e_n = t->ne[bias ? 1 : 2];
        uint64_t cols = s->shape[s->rank - 1];
        for (uint64_t e = 0; e < e_n; e++)
            for (uint64_t j = 0; j < j_n; j++)
                for (uint64_t a = 0; a < a_n; a++) {
                    uint64_t from = (e * a_n + a) * cols + (uint64_t)t->step * j + (uint64_t)t->parity;
                    memcpy(raw + ((e * j_n + j) * a_n + a) * es, in + from * es, es);
                }
    }
}

/* t's bytes in its output type; buf grows as needed. */
static const uint8_t *tensor_data(conv *c, const out_tensor *t, uint8_t **buf, size_t *cap, uint64_t *n_bytes) {
    uint64_t n = n_elems(t);
    size_t es = ggml_type_get(t->src_type)->block_bytes;
    size_t need = (size_t)n * (es + 4);
    if (need > *cap) {
        uint8_t *b = realloc(*buf, need);
        if (!b) return nc_fail(c->err, "out of memory for tensor '%s'", t->name), NULL;
        *buf = b;
        *cap = need;
    }
    uint8_t *raw = *buf + (size_t)n * 4;
    float *f = (float *)*buf;
    *n_bytes = (uint64_t)quant_row_bytes(t->type, (int64_t)n);
    if (t->x == X_ROPE_FREQS) {
        llama3_freqs(&c->m->hp, f, (int)n);
        return *buf;
    }
    gather(t, raw);
    if (t->type == t->src_type && t->x != X_PLUS_ONE) return raw;
    quant_dequantize_row(t->src_type, raw, f, (int64_t)n);
    if (t->x == X_PLUS_ONE)
        for (uint64_t i = 0; i < n; i++) f[i] += 1.0f;
    return *buf;
}

static int write_file(conv *c, const char *out_path, hfc_progress progress, void *ud) {
    FILE *fp = fopen(out_path, "wb");
    if (!fp) return nc_fail(c->err, "cannot write %s: %s", out_path, strerror(errno));
    int rc = 0;
    for (int k = 0; k < c->n_t && !rc; k++) {
        uint64_t bytes = (uint64_t)quant_row_bytes(c->t[k].type, (int64_t)n_elems(&c->t[k]));
        rc = gguf_out_tensor(c->o, c->t[k].name, c->t[k].n_dims, c->t[k].ne, c->t[k].type, bytes)
                 ? nc_fail(c->err, "out of memory") : 0;
    }
    rc = rc || gguf_out_write_header(c->o, fp, out_path, c->err);
    uint8_t *buf = NULL;
    size_t cap = 0;
    for (int k = 0; k < c->n_t && !rc; k++) {
        if (progress) progress(ud, k + 1, c->n_t, c->t[k].name);
        uint64_t bytes;
        const uint8_t *data = tensor_data(c, &c->t[k], &buf, &cap, &bytes);
        rc = !data || gguf_out_write_data(c->o, fp, data, bytes, out_path, c->err);
    }
    free(buf);
    if (fclose(fp) && !rc) rc = nc_fail(c->err, "%s: write failed", out_path);
    return rc ? -1 : 0;
}

/* ---- entry --------------------------------------------------------------------------------------- */

/* A quantised checkpoint (config.json's quantization_config: gpt-oss's MXFP4, GPTQ, AWQ, FP8...). */
static int refuse_quantised(conv *c) {
    const cJSON *q = cfg_item(c, "quantization_config");
    if (!q) return 0;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
    return nc_fail(c->err, "%s: a quantised checkpoint (config.json's quantization_config, quant_method \"%s\"): "
                   "quantize converts F32, F16 and BF16 checkpoints only", c->dir,
                   cJSON_IsString(m) ? m->valuestring : "?");
}

static int open_model(conv *c) {
    if (hf_dir_open(&c->d, c->dir, c->err) || refuse_quantised(c)) return -1;
    if (model_bind_hf(&c->m, c->d, c->err)) return -1;
    c->ak = keys_of(c->m->hp.arch);
    if (!c->ak) return nc_fail(c->err, "%s: nucleus cannot convert %s models yet", c->dir, c->m->hp.arch->name);
    /* the converter writes LongRoPE's factors as rope_factors_long / _short tensors: not done here */
    if (c->m->hp.rope[0].kind == ROPE_LONGROPE)
        return nc_fail(c->err, "%s: LongRoPE scaling (Phi-3's long-context models) cannot be converted yet", c->dir);
    return 0;
}

int hfc_convert(const char *dir, const char *out_path, hfc_progress progress, void *ud, nc_err *err) {
    conv c = {.dir = dir, .err = err};
    int rc = open_model(&c);
    if (!rc && !(c.o = gguf_out_new(32))) rc = nc_fail(err, "out of memory");
    rc = rc || plan_tensors(&c) || check_all_used(&c) || general_keys(&c) || hparam_keys(&c) || tokenizer_keys(&c) ||
         write_file(&c, out_path, progress, ud);
    for (int k = 0; k < c.n_t; k++) free(c.t[k].src);
    free(c.t);
    gguf_out_free(c.o);
    if (c.m) model_free(c.m); /* closes the directory */
    else hf_dir_close(c.d);
    return rc ? -1 : 0;
}
