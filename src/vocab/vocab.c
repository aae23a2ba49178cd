/* Loading a vocabulary from GGUF metadata, the steps shared with the tokenizer.json loader
 * (text -> id index, special tokens, rendered pieces), and accessors. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vocab/vocab_impl.h"

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_TYPES "tokenizer.ggml.token_type"
#define KEY_BOS "tokenizer.ggml.bos_token_id"
#define KEY_EOS "tokenizer.ggml.eos_token_id"
#define KEY_UNK "tokenizer.ggml.unknown_token_id"
#define KEY_EOT "tokenizer.ggml.eot_token_id"
#define KEY_EOM "tokenizer.ggml.eom_token_id"
#define KEY_ADD_BOS "tokenizer.ggml.add_bos_token"
#define KEY_ADD_EOS "tokenizer.ggml.add_eos_token"
#define KEY_ADD_PREFIX "tokenizer.ggml.add_space_prefix"
#define KEY_PRE "tokenizer.ggml.pre"
#define KEY_MERGES "tokenizer.ggml.merges"

/* The three parallel arrays describing the tokens (scores and types may be absent). */
typedef struct token_arrays {
    const gguf_kv *texts, *scores, *types;
    int32_t n;
} token_arrays;

/* A token text for messages: at most 40 bytes, unprintable bytes as \xNN. */
static const char *shown(char *buf, size_t cap, const char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 40) { o += (size_t)snprintf(buf + o, cap - o, "..."); break; }
        if (isprint(c)) buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", c);
    }
    buf[o] = '\0';
    return buf;
}

/* ---- the text -> id index ---------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

int32_t vocab_find(const vocab *v, const char *s, size_t n) {
    for (size_t i = hash_bytes(s, n) & v->mask;; i = (i + 1) & v->mask) {
        int32_t id = v->slots[i];
        if (id < 0) return -1;
        const vocab_token *t = &v->tok[id];
        if (t->text_len == n && memcmp(v->text + t->text_off, s, n) == 0) return id;
    }
}

static int build_index(vocab *v, const char *where, nc_err *err) {
    size_t slots = 1;
    while (slots < 2 * (size_t)v->n_tokens) slots *= 2; /* load factor <= 1/2 */
    v->slots = malloc(slots * sizeof *v->slots);
    if (!v->slots) return nc_fail(err, "%s: out of memory for the token index", where);
    memset(v->slots, 0xff, slots * sizeof *v->slots);
    v->mask = slots - 1;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const vocab_token *t = &v->tok[id];
        int32_t dup = vocab_find(v, vtok_text(v, id), t->text_len);
        if (dup >= 0) {
            char s[200];
            return nc_fail(err, "%s: token '%s' appears twice (ids %d and %d)", where,
                           shown(s, sizeof s, vtok_text(v, id), t->text_len), dup, id);
        }
        size_t i = hash_bytes(vtok_text(v, id), t->text_len) & v->mask;
        while (v->slots[i] >= 0) i = (i + 1) & v->mask;
        v->slots[i] = id;
    }
    return 0;
}

/* ---- token arrays --------------------------------------------------------------------------- */

static int read_model_kind(vocab *v, const gguf_file *f, nc_err *err) {
    gguf_str s;
    int r = gguf_get_str(f, KEY_MODEL, &s, err);
    if (r < 0) return -1;
    if (r == 0) return nc_fail(err, "%s: no tokenizer: key '%s' is missing", gguf_path(f), KEY_MODEL);
    if (gguf_str_eq(s, "llama") || gguf_str_eq(s, "gpt2")) {
        v->kind = gguf_str_eq(s, "llama") ? VOCAB_SPM : VOCAB_BPE;
        return 0;
    }
    char name[200];
    return nc_fail(err, "%s: %s is '%s', which is not supported (supported: 'llama', i.e. SentencePiece, and "
                        "'gpt2', i.e. byte-level BPE)",
                   gguf_path(f), KEY_MODEL, shown(name, sizeof name, s.data, s.len));
}

/* An optional array that must have one element per token. */
static int read_parallel(const gguf_file *f, const char *key, gguf_vtype elem, uint64_t n, const gguf_kv **out,
                         nc_err *err) {
    *out = NULL;
    int r = gguf_get_arr(f, key, elem, out, err);
    if (r <= 0) return r;
    if ((*out)->v.arr.n != n)
        return nc_fail(err, "%s: %s has %llu elements but %s has %llu tokens", gguf_path(f), key,
                       (unsigned long long)(*out)->v.arr.n, KEY_TOKENS, (unsigned long long)n);
    return 0;
}

static int read_arrays(token_arrays *a, const gguf_file *f, nc_err *err) {
    int r = gguf_get_arr(f, KEY_TOKENS, GGUF_T_STRING, &a->texts, err);
    if (r < 0) return -1;
    if (r == 0) return nc_fail(err, "%s: key '%s' (the token list) is missing", gguf_path(f), KEY_TOKENS);
    uint64_t n = a->texts->v.arr.n;
    if (n == 0) return nc_fail(err, "%s: %s is empty", gguf_path(f), KEY_TOKENS);
    if (n > INT32_MAX / 2)
        return nc_fail(err, "%s: %s has %llu tokens, more than supported", gguf_path(f), KEY_TOKENS,
                       (unsigned long long)n);
    a->n = (int32_t)n;
    if (read_parallel(f, KEY_SCORES, GGUF_T_FLOAT32, n, &a->scores, err) < 0) return -1;
    return read_parallel(f, KEY_TYPES, GGUF_T_INT32, n, &a->types, err) < 0 ? -1 : 0;
}

/* llama.cpp renames an empty token to "[EMPTY_<id>]" so that every text is a distinct key. */
static size_t empty_name(char *buf, size_t cap, int32_t id) { return (size_t)snprintf(buf, cap, "[EMPTY_%d]", id); }

static int copy_texts(vocab *v, const token_arrays *a, const gguf_file *f, nc_err *err) {
    char name[32];
    uint64_t total = 0;
    for (int32_t i = 0; i < a->n; i++) {
        uint64_t len = gguf_arr_str(a->texts, (uint64_t)i).len;
        total += (len ? len : empty_name(name, sizeof name, i)) + 1;
    }
    if (total > UINT32_MAX)
        return nc_fail(err, "%s: %s holds %llu bytes of text, more than supported", gguf_path(f), KEY_TOKENS,
                       (unsigned long long)total);
    v->text = malloc(total);
    if (!v->text) return nc_fail(err, "%s: out of memory for %llu bytes of token text", gguf_path(f),
                                 (unsigned long long)total);
    uint32_t off = 0;
    for (int32_t i = 0; i < a->n; i++) {
        gguf_str s = gguf_arr_str(a->texts, (uint64_t)i);
        size_t len = s.len ? (size_t)s.len : empty_name(name, sizeof name, i);
        memcpy(v->text + off, s.len ? s.data : name, len);
        v->text[off + len] = '\0';
        v->tok[i].text_off = off;
        v->tok[i].text_len = (uint32_t)len;
        off += (uint32_t)len + 1;
    }
    return 0;
}

static int read_scores_types(vocab *v, const token_arrays *a, const gguf_file *f, nc_err *err) {
    for (int32_t i = 0; i < a->n; i++) {
        vocab_token *t = &v->tok[i];
        t->score = a->scores ? (float)gguf_arr_float(a->scores, (uint64_t)i) : 0.0f;
        if (isnan(t->score)) return nc_fail(err, "%s: %s[%d] is NaN", gguf_path(f), KEY_SCORES, i);
        int64_t type = a->types ? gguf_arr_int(a->types, (uint64_t)i) : VOCAB_TT_NORMAL;
        if (type < VOCAB_TT_UNDEFINED || type > VOCAB_TT_BYTE)
            return nc_fail(err, "%s: %s[%d] is %lld, not a token type (0..6)", gguf_path(f), KEY_TYPES, i,
                           (long long)type);
        t->type = (uint8_t)type;
    }
    return 0;
}

/* ---- special ids and flags ------------------------------------------------------------------ */

/* A token id key, if present. -1 (or 0xFFFFFFFF, as some converters write it) means "none". */
static int read_id(const gguf_file *f, const char *key, int32_t n, int32_t *id, nc_err *err) {
    int64_t x;
    int r = gguf_get_int(f, key, &x, err);
    if (r <= 0) return r;
    if (x == -1 || x == (int64_t)UINT32_MAX) *id = -1;
    else if (x < 0 || x >= n)
        return nc_fail(err, "%s: %s is %lld, outside the vocabulary of %d tokens", gguf_path(f), key, (long long)x,
                       n);
    else *id = (int32_t)x;
    return 0;
}

static int read_bool(const gguf_file *f, const char *key, bool *out, nc_err *err) {
    return gguf_get_bool(f, key, out, err) < 0 ? -1 : 0;
}

/* Defaults are llama.cpp's for SentencePiece: <unk> 0, <s> 1, </s> 2; BOS added, EOS not. For
 * byte-level BPE no special ids, BOS added only for the families that ask for it (Llama 3), and
 * never a space prefix. */
static int read_specials(vocab *v, const gguf_file *f, bool bpe_add_bos, nc_err *err) {
    int32_t n = v->n_tokens;
    bool spm = v->kind == VOCAB_SPM;
    v->unk = spm ? 0 : -1;
    v->bos = spm && n > 1 ? 1 : -1;
    v->eos = spm && n > 2 ? 2 : -1;
    v->eot = v->eom = -1;
    v->add_bos = spm || bpe_add_bos;
    v->add_eos = false;
    v->add_space_prefix = spm;
    if (read_id(f, KEY_BOS, n, &v->bos, err) || read_id(f, KEY_EOS, n, &v->eos, err) ||
        read_id(f, KEY_UNK, n, &v->unk, err) || read_id(f, KEY_EOT, n, &v->eot, err) ||
        read_id(f, KEY_EOM, n, &v->eom, err) || read_bool(f, KEY_ADD_BOS, &v->add_bos, err) ||
        read_bool(f, KEY_ADD_EOS, &v->add_eos, err) ||
        (spm && read_bool(f, KEY_ADD_PREFIX, &v->add_space_prefix, err)))
        return -1;
    if (v->add_bos && v->bos < 0)
        return nc_fail(err, "%s: %s is true but there is no BOS token (%s)", gguf_path(f), KEY_ADD_BOS, KEY_BOS);
    if (v->add_eos && v->eos < 0)
        return nc_fail(err, "%s: %s is true but there is no EOS token (%s)", gguf_path(f), KEY_ADD_EOS, KEY_EOS);
    return 0;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte a "<0xNN>" text stands for, or -1. */
static int byte_of_text(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static int check_byte_tokens(const vocab *v, const char *where, nc_err *err) {
    for (int32_t id = 0; id < v->n_tokens; id++) {
        if (v->tok[id].type != VOCAB_TT_BYTE || byte_of_text(vtok_text(v, id), v->tok[id].text_len) >= 0) continue;
        char s[200];
        return nc_fail(err, "%s: token %d '%s' has type byte (%s) but is not spelled <0xNN>", where, id,
                       shown(s, sizeof s, vtok_text(v, id), v->tok[id].text_len), KEY_TYPES);
    }
    return 0;
}

/* llama.cpp's byte_to_token: the token "<0xNN>", else the one-byte token, else none. */
static void map_bytes(vocab *v) {
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        char raw = (char)b;
        int32_t id = vocab_find(v, name, sizeof name);
        v->byte_tok[b] = id >= 0 ? id : vocab_find(v, &raw, 1);
    }
}

/* llama.cpp marks end-of-generation tokens by their text and makes them control tokens even
 * when the file says otherwise (so they are hidden in output and matched only with
 * parse_special). The last two are CodeLlama's and DeepSeek's ("｜" and "▁" are U+FF5C, U+2581). */
static void mark_eog(vocab *v) {
    static const char *const texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>", "</s>", "<end_of_turn>", "<|eom_id|>", "<EOT>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>"};
    for (int32_t id = 0; id < v->n_tokens; id++) v->tok[id].file_type = v->tok[id].type;
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t id = vocab_find(v, texts[i], strlen(texts[i]));
        if (id < 0) continue;
        v->tok[id].flags |= VTOK_EOG;
        v->tok[id].type = VOCAB_TT_CONTROL;
    }
    const int32_t ids[] = {v->eos, v->eot, v->eom};
    for (size_t i = 0; i < 3; i++)
        if (ids[i] >= 0) v->tok[ids[i]].flags |= VTOK_EOG;
}

static bool is_special_type(uint8_t type) {
    return type == VOCAB_TT_CONTROL || type == VOCAB_TT_USER_DEFINED || type == VOCAB_TT_UNKNOWN;
}

typedef struct len_id {
    uint32_t len;
    int32_t id;
} len_id;

static int cmp_longest_first(const void *a, const void *b) {
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The tokens split out of text before encoding, in llama.cpp's order: longest text first
 * (ties, which llama.cpp leaves to std::sort, by id). */
static int collect_specials(vocab *v, const char *where, nc_err *err) {
    len_id *tmp = malloc((size_t)v->n_tokens * sizeof *tmp);
    v->specials = malloc((size_t)v->n_tokens * sizeof *v->specials);
    if (!tmp || !v->specials) {
        free(tmp);
        return nc_fail(err, "%s: out of memory", where);
    }
    int32_t n = 0;
    for (int32_t id = 0; id < v->n_tokens; id++)
        if (is_special_type(v->tok[id].type)) tmp[n++] = (len_id){v->tok[id].text_len, id};
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_longest_first);
    for (int32_t i = 0; i < n; i++) v->specials[i] = tmp[i].id;
    v->n_specials = n;
    free(tmp);
    return 0;
}

static void set_rstrip(vocab *v, const char *text, bool on) {
    int32_t id = vocab_find(v, text, strlen(text));
    if (id < 0) return;
    if (on) v->tok[id].flags |= VTOK_RSTRIP;
    else v->tok[id].flags &= (uint8_t)~VTOK_RSTRIP;
}

/* llama.cpp's per-model attributes: for Phi-3 (general.name contains "phi-3" or "phi3", any
 * case) whitespace after a special token is dropped, except after <unk>, <s>, <|endoftext|>. */
static int apply_model_rules(vocab *v, const gguf_file *f, nc_err *err) {
    gguf_str name;
    int r = gguf_get_str(f, "general.name", &name, err);
    if (r <= 0) return r;
    char low[256];
    size_t n = name.len < sizeof low - 1 ? (size_t)name.len : sizeof low - 1;
    for (size_t i = 0; i < n; i++) low[i] = (char)tolower((unsigned char)name.data[i]);
    low[n] = '\0';
    if (!strstr(low, "phi-3") && !strstr(low, "phi3")) return 0;
    for (int32_t i = 0; i < v->n_specials; i++) v->tok[v->specials[i]].flags |= VTOK_RSTRIP;
    set_rstrip(v, "</s>", true);
    set_rstrip(v, "<unk>", false);
    set_rstrip(v, "<s>", false);
    set_rstrip(v, "<|endoftext|>", false);
    return 0;
}

/* ---- pieces ------------------------------------------------------------------------------------ */

static size_t unescape_spaces(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
            out[o++] = ' ';
            i += 2;
        } else out[o++] = s[i];
    }
    return o;
}

/* What each token renders to (llama.cpp's token_to_piece with special = true): normal tokens
 * with U+2581 as a space (SentencePiece) or as the bytes their characters stand for (byte-level
 * BPE), byte tokens as the byte (not in byte-level vocabularies, where llama.cpp hides them),
 * control / unknown / user-defined tokens as their text, unused and undefined tokens as
 * nothing. */
static int build_pieces(vocab *v, const char *where, nc_err *err) {
    const vocab_token *last = &v->tok[v->n_tokens - 1];
    v->pieces = malloc((size_t)last->text_off + last->text_len + 1); /* a piece is never longer than its text */
    if (!v->pieces) return nc_fail(err, "%s: out of memory for token pieces", where);
    uint32_t off = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        vocab_token *t = &v->tok[id];
        const char *s = vtok_text(v, id);
        size_t len = 0;
        bool clean;
        if (t->type == VOCAB_TT_NORMAL && v->kind == VOCAB_BPE) len = bytelevel_decode(s, t->text_len, v->pieces + off, &clean);
        else if (t->type == VOCAB_TT_NORMAL) len = unescape_spaces(s, t->text_len, v->pieces + off);
        else if (t->type == VOCAB_TT_BYTE && v->kind != VOCAB_BPE) {
            v->pieces[off] = (char)byte_of_text(s, t->text_len);
            len = 1;
        } else if (is_special_type(t->type)) {
            memcpy(v->pieces + off, s, t->text_len);
            len = t->text_len;
        }
        t->piece_off = off;
        t->piece_len = (uint32_t)len;
        off += (uint32_t)len;
    }
    return 0;
}

/* ---- load / free -------------------------------------------------------------------------------- */

int vocab_index(vocab *v, const char *where, nc_err *err) { return build_index(v, where, err); }

int vocab_finish(vocab *v, const char *where, nc_err *err) {
    if (check_byte_tokens(v, where, err)) return -1;
    map_bytes(v);
    mark_eog(v);
    if (collect_specials(v, where, err) || build_pieces(v, where, err)) return -1;
    return bpe_prepare(v, where, err);
}

/* The merges of a byte-level vocabulary: "left right", split at the first space after the first
 * character (llama.cpp), in rank order. */
static int read_merges(vocab *v, const gguf_file *f, nc_err *err) {
    const gguf_kv *m;
    int r = gguf_get_arr(f, KEY_MERGES, GGUF_T_STRING, &m, err);
    if (r < 0) return -1;
    if (r == 0) return nc_fail(err, "%s: key '%s' is missing (byte-level BPE needs its merges)", gguf_path(f), KEY_MERGES);
    if (m->v.arr.n > INT32_MAX / 2)
        return nc_fail(err, "%s: %s has %llu merges, more than supported", gguf_path(f), KEY_MERGES,
                       (unsigned long long)m->v.arr.n);
    if (bpe_merges_init(v, (size_t)m->v.arr.n, gguf_path(f), err)) return -1;
    for (uint64_t i = 0; i < m->v.arr.n; i++) {
        gguf_str s = gguf_arr_str(m, i);
        const char *sp = s.len > 1 ? memchr(s.data + 1, ' ', (size_t)s.len - 1) : NULL;
        if (!sp) {
            char t[200];
            return nc_fail(err, "%s: %s[%llu] '%s' is not two tokens separated by a space", gguf_path(f), KEY_MERGES,
                           (unsigned long long)i, shown(t, sizeof t, s.data, s.len));
        }
        size_t left = (size_t)(sp - s.data);
        bpe_merge_add(v, s.data, left, sp + 1, (size_t)s.len - left - 1);
    }
    return 0;
}

/* The pre-tokenizer named by tokenizer.ggml.pre; without the key, llama.cpp's fallback
 * "default". */
static int read_pre(vocab *v, const gguf_file *f, pretok_family *fam, nc_err *err) {
    gguf_str s = {.data = "default", .len = 7};
    if (gguf_get_str(f, KEY_PRE, &s, err) < 0) return -1;
    if (pretok_for_name(&v->pre, s.data, (size_t)s.len, fam, err))
        return nc_fail_prefix(err, "%s: %s", gguf_path(f), KEY_PRE);
    return 0;
}

static int load_gguf(vocab *v, const gguf_file *f, nc_err *err) {
    token_arrays a;
    if (read_arrays(&a, f, err)) return -1;
    v->n_tokens = a.n;
    v->tok = calloc((size_t)a.n, sizeof *v->tok);
    if (!v->tok) return nc_fail(err, "%s: out of memory for %d tokens", gguf_path(f), a.n);
    pretok_family fam = {0};
    if (v->kind == VOCAB_BPE && read_pre(v, f, &fam, err)) return -1;
    v->ignore_merges = fam.ignore_merges;
    v->nfc = fam.nfc;
    char tokens_key[1100]; /* duplicate texts are an error naming the key */
    snprintf(tokens_key, sizeof tokens_key, "%.1000s: %s", gguf_path(f), KEY_TOKENS);
    if (copy_texts(v, &a, f, err) || read_scores_types(v, &a, f, err) || read_specials(v, f, fam.add_bos, err) ||
        vocab_index(v, tokens_key, err) || vocab_finish(v, gguf_path(f), err) || apply_model_rules(v, f, err))
        return -1;
    return v->kind == VOCAB_BPE ? read_merges(v, f, err) : 0;
}

int vocab_load(vocab **out, const gguf_file *f, nc_err *err) {
    *out = NULL;
    vocab *v = calloc(1, sizeof *v);
    if (!v) return nc_fail(err, "%s: out of memory", gguf_path(f));
    if (read_model_kind(v, f, err) || load_gguf(v, f, err)) {
        vocab_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

void vocab_free(vocab *v) {
    if (!v) return;
    free(v->tok);
    free(v->text);
    free(v->pieces);
    free(v->slots);
    free(v->specials);
    free(v->merges);
    free(v->raw_slots);
    pretok_free(v->pre);
    spm_norm_free(v->norm);
    free(v);
}

/* ---- accessors --------------------------------------------------------------------------------- */

static bool valid_id(const vocab *v, int32_t id) { return id >= 0 && id < v->n_tokens; }

vocab_kind vocab_get_kind(const vocab *v) { return v->kind; }
const char *vocab_pre_name(const vocab *v) { return v->pre ? pretok_name(v->pre) : ""; }
int32_t vocab_n_tokens(const vocab *v) { return v->n_tokens; }
int32_t vocab_bos(const vocab *v) { return v->bos; }
int32_t vocab_eos(const vocab *v) { return v->eos; }
bool vocab_add_bos(const vocab *v) { return v->add_bos; }
bool vocab_add_eos(const vocab *v) { return v->add_eos; }
bool vocab_is_eog(const vocab *v, int32_t id) { return valid_id(v, id) && (v->tok[id].flags & VTOK_EOG); }
int vocab_token_type_of(const vocab *v, int32_t id) { return valid_id(v, id) ? v->tok[id].type : -1; }

const char *vocab_token_text(const vocab *v, int32_t id, size_t *len) {
    if (!valid_id(v, id)) return NULL;
    if (len) *len = v->tok[id].text_len;
    return vtok_text(v, id);
}
