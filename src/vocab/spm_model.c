/* A vocabulary from a SentencePiece tokenizer.model, made as llama.cpp's converter makes the GGUF
 * of a directory holding one (convert_hf_to_gguf.py, _create_vocab_sentencepiece), so that
 * tokenisation equals the GGUF's:
 * - vocab_size tokens: config.json's vocab_size when given, else the model's piece count; ids
 *   past the pieces are unused "[PAD<id>]" tokens with score -10000, pieces past vocab_size are
 *   dropped;
 * - each piece's text and score; its type UNKNOWN, CONTROL, UNUSED or BYTE as the model says,
 *   NORMAL otherwise (USER_DEFINED pieces too, as the converter has it);
 * - added_tokens.json ({"text": id}) and tokenizer_config.json's added_tokens_decoder
 *   ({"id": {"content", "special"}}) replace tokens, with score -1000: special ones (or ones
 *   that look special: <|...|>, <unused...>, <pad>, <mask>, ...) become control tokens, the
 *   others user-defined with U+2581 written as a space;
 * - the space prefix is the normalizer's add_dummy_prefix (llama.cpp's add_space_prefix).
 * Special ids: tokenizer_config.json and config.json (hf_side.c), else the trainer_spec's
 * bos_id / eos_id; the unknown token is the model's UNKNOWN piece. BOS is added unless
 * tokenizer_config.json says otherwise (llama.cpp's default for SentencePiece), EOS is not.
 *
 * Checked as SentencePiece checks a model when it loads it: at least one piece, none empty or
 * repeated, exactly one UNKNOWN piece, byte pieces spelled <0xNN>. Model types WORD and CHAR and
 * the options treat_whitespace_as_suffix and escape_whitespaces = false are refused: llama.cpp's
 * tokenizer would silently encode differently from them. The normalizer's rules (precompiled
 * charsmap, remove_extra_whitespaces), which llama.cpp drops, are kept in v->norm (spm_norm.c)
 * for the encoder, as SentencePiece and transformers apply them. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/hf_dir.h"
#include "vocab/spm_proto.h"
#include "vocab/vocab_impl.h"

#define MAX_VOCAB (1 << 24)

typedef struct spm_tok {
    const char *s;   /* in the model buffer, a JSON file, or owned */
    uint32_t len;
    float score;
    uint8_t type;    /* vocab_token_type */
    bool owned;
} spm_tok;

typedef struct spm_build {
    const spm_proto *m;
    const char *where;
    spm_tok *tok;
    int32_t n;
    int32_t unk;
} spm_build;

static void build_free(spm_build *b) {
    for (int32_t i = 0; b->tok && i < b->n; i++)
        if (b->tok[i].owned) free((char *)b->tok[i].s);
    free(b->tok);
}

/* ---- the model's pieces --------------------------------------------------------------------- */

static uint8_t token_type(uint8_t piece_type) {
    switch (piece_type) {
    case SPM_UNKNOWN: return VOCAB_TT_UNKNOWN;
    case SPM_CONTROL: return VOCAB_TT_CONTROL;
    case SPM_UNUSED: return VOCAB_TT_UNUSED;
    case SPM_BYTE: return VOCAB_TT_BYTE;
    default: return VOCAB_TT_NORMAL;
    }
}

static int check_model(const spm_build *b, nc_err *err) {
    const spm_proto *m = b->m;
    static const char *const kinds[] = {"", "UNIGRAM", "BPE", "WORD", "CHAR"};
    if (m->n_pieces == 0) return nc_fail(err, "%s: the model has no pieces", b->where);
    if (m->model_type != SPM_MODEL_UNIGRAM && m->model_type != SPM_MODEL_BPE)
        return nc_fail(err, "%s: trainer_spec.model_type %s is not supported (only UNIGRAM and BPE)", b->where,
                       kinds[m->model_type]);
    if (m->treat_whitespace_as_suffix)
        return nc_fail(err, "%s: trainer_spec.treat_whitespace_as_suffix is not supported", b->where);
    if (!m->escape_whitespaces)
        return nc_fail(err, "%s: normalizer_spec.escape_whitespaces = false is not supported", b->where);
    int32_t unk = -1;
    for (uint32_t i = 0; i < m->n_pieces; i++) {
        const spm_piece *p = &m->pieces[i];
        if (p->text.len == 0) return nc_fail(err, "%s: piece #%u (offset %llu) is empty", b->where, i,
                                             (unsigned long long)p->offset);
        if (p->type != SPM_UNKNOWN) continue;
        if (unk >= 0)
            return nc_fail(err, "%s: pieces #%d and #%u (offset %llu) both have type UNKNOWN", b->where, unk, i,
                           (unsigned long long)p->offset);
        unk = (int32_t)i;
    }
    if (unk < 0) return nc_fail(err, "%s: no piece has type UNKNOWN (SentencePiece needs one)", b->where);
    return 0;
}

static int build_init(spm_build *b, int32_t n_vocab, nc_err *err) {
    if (check_model(b, err)) return -1;
    const spm_proto *m = b->m;
    b->n = n_vocab > 0 ? n_vocab : (int32_t)m->n_pieces;
    if (b->n <= 0 || b->n > MAX_VOCAB || b->n > 4 * (int64_t)m->n_pieces + 65536)
        return nc_fail(err, "%s: a vocabulary of %d tokens for a model of %u pieces is not supported", b->where, b->n,
                       m->n_pieces);
    if (!(b->tok = calloc((size_t)b->n, sizeof *b->tok))) return nc_fail(err, "%s: out of memory", b->where);
    b->unk = -1;
    for (int32_t i = 0; i < b->n; i++) {
        spm_tok *t = &b->tok[i];
        if ((uint32_t)i < m->n_pieces) {
            const spm_piece *p = &m->pieces[i];
            *t = (spm_tok){p->text.data, p->text.len, p->score, token_type(p->type), false};
            if (p->type == SPM_UNKNOWN) b->unk = i;
            continue;
        }
        char pad[24];
        int len = snprintf(pad, sizeof pad, "[PAD%d]", i);
        char *s = strdup(pad);
        if (!s) return nc_fail(err, "%s: out of memory", b->where);
        *t = (spm_tok){s, (uint32_t)len, -10000.0f, VOCAB_TT_UNUSED, true};
    }
    return 0;
}

/* ---- added tokens ------------------------------------------------------------------------------- */

static bool starts_ends(const char *s, const char *head, const char *tail) {
    size_t n = strlen(s), h = strlen(head), t = strlen(tail);
    return n >= h + t && memcmp(s, head, h) == 0 && memcmp(s + n - t, tail, t) == 0;
}

/* The converter's does_token_look_special. */
static bool looks_special(const char *s) {
    static const char *const names[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i]) == 0) return true;
    return starts_ends(s, "<|", "|>") || starts_ends(s, "<\xef\xbd\x9c", "\xef\xbd\x9c>") ||
           starts_ends(s, "<unused", ">");
}

/* text with every U+2581 written as a space (a new string). */
static char *marks_to_spaces(const char *s) {
    char *out = malloc(strlen(s) + 1), *o = out;
    if (!out) return NULL;
    while (*s) {
        if (memcmp(s, "\xe2\x96\x81", 3) == 0) {
            *o++ = ' ';
            s += 3;
        } else *o++ = *s++;
    }
    *o = 0;
    return out;
}

static int set_added(spm_build *b, int32_t id, const char *text, bool control, nc_err *err) {
    spm_tok *t = &b->tok[id];
    char *s = control ? strdup(text) : marks_to_spaces(text);
    if (!s) return nc_fail(err, "%s: out of memory", b->where);
    if (t->owned) free((char *)t->s);
    *t = (spm_tok){s, (uint32_t)strlen(s), -1000.0f, control ? VOCAB_TT_CONTROL : VOCAB_TT_USER_DEFINED, true};
    if (id == b->unk) b->unk = -1; /* replaced */
    return 0;
}

/* An id of the vocabulary from a JSON number (added_tokens.json) or a decimal key
 * (added_tokens_decoder); ids past the vocabulary are skipped, as the converter does. */
static bool added_id(const spm_build *b, double x, int32_t *id) {
    if (!(x >= 0) || x >= b->n || x != (double)(int32_t)x) return false;
    *id = (int32_t)x;
    return true;
}

/* added_tokens.json: {"text": id}; the tokens become user-defined ones. */
static int apply_added_json(spm_build *b, const hf_side *s, nc_err *err) {
    const cJSON *e, *added = s ? s->added : NULL;
    int32_t id;
    cJSON_ArrayForEach(e, added) {
        if (!cJSON_IsNumber(e))
            return nc_fail(err, "%s/added_tokens.json: the id of '%.100s' is not a number", s->dir, e->string);
        if (added_id(b, e->valuedouble, &id) && set_added(b, id, e->string, false, err)) return -1;
    }
    return 0;
}

/* tokenizer_config.json's added_tokens_decoder: {"id": {"content": text, "special": bool}}. */
static int apply_added_decoder(spm_build *b, const hf_side *s, nc_err *err) {
    const cJSON *dec = s ? cJSON_GetObjectItemCaseSensitive(s->tok_config, "added_tokens_decoder") : NULL, *e;
    int32_t id;
    if (!cJSON_IsObject(dec)) return 0;
    cJSON_ArrayForEach(e, dec) {
        char *end;
        double x = strtod(e->string, &end);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (end == e->string || *end || !cJSON_IsString(content))
            return nc_fail(err, "%s/tokenizer_config.json: added_tokens_decoder['%.40s'] is not an id with a content",
                           s->dir, e->string);
        if (!added_id(b, x, &id)) continue;
        bool special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special"));
        if (set_added(b, id, content->valuestring, special || looks_special(content->valuestring), err)) return -1;
    }
    return 0;
}

/* ---- the vocabulary ------------------------------------------------------------------------------ */

static int pack(vocab *v, const spm_build *b, nc_err *err) {
    size_t total = 0;
    if (b->n <= 0 || b->n > MAX_VOCAB) return nc_fail(err, "%s: no tokens", b->where);
    for (int32_t i = 0; i < b->n; i++) total += (size_t)b->tok[i].len + 1;
    if (total > UINT32_MAX) return nc_fail(err, "%s: %zu bytes of token text, more than supported", b->where, total);
    v->n_tokens = b->n;
    v->tok = calloc((size_t)b->n, sizeof *v->tok);
    v->text = malloc(total);
    if (!v->tok || !v->text) return nc_fail(err, "%s: out of memory for %d tokens", b->where, b->n);
    uint32_t off = 0;
    for (int32_t i = 0; i < b->n; i++) {
        const spm_tok *t = &b->tok[i];
        memcpy(v->text + off, t->s, t->len);
        v->text[off + t->len] = 0;
        v->tok[i] = (vocab_token){.text_off = off, .text_len = t->len, .score = t->score, .type = t->type};
        off += t->len + 1;
    }
    return 0;
}

static int32_t model_id(const spm_build *b, int32_t id) { return id >= 0 && id < b->n ? id : -1; }

static int set_specials(vocab *v, const spm_build *b, const hf_side *side, nc_err *err) {
    v->kind = VOCAB_SPM;
    if (spm_norm_new(&v->norm, b->m, b->where, err)) return -1;
    v->add_space_prefix = b->m->add_dummy_prefix;
    v->unk = b->unk;
    v->bos = v->eos = v->eot = v->eom = -1;
    hf_side_special_ids(v, side);
    if (v->bos < 0) v->bos = model_id(b, b->m->bos_id);
    if (v->eos < 0) v->eos = model_id(b, b->m->eos_id);
    v->add_bos = v->bos >= 0;
    v->add_eos = false;
    return hf_side_add_flags(v, side, err);
}

static int load(vocab *v, spm_build *b, const hf_side *side, nc_err *err) {
    int32_t n_vocab = 0;
    if (hf_side_vocab_size(side, &n_vocab, err) || build_init(b, n_vocab, err) || apply_added_json(b, side, err) ||
        apply_added_decoder(b, side, err) || pack(v, b, err) || vocab_index(v, b->where, err) ||
        set_specials(v, b, side, err) || vocab_finish(v, b->where, err))
        return -1;
    return hf_side_eog(v, side, err);
}

int vocab_load_spm_side(vocab **out, const void *data, size_t size, const char *name, const hf_side *side,
                        nc_err *err) {
    *out = NULL;
    spm_proto m;
    if (spm_proto_parse(&m, data, size, name, err)) return -1;
    spm_build b = {.m = &m, .where = name ? name : "<buffer>"};
    vocab *v = calloc(1, sizeof *v);
    int rc = v ? load(v, &b, side, err) : nc_fail(err, "%s: out of memory", b.where);
    build_free(&b);
    spm_proto_free(&m);
    if (rc) {
        vocab_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

int vocab_load_spm_buffer(vocab **out, const void *data, size_t size, const char *name, nc_err *err) {
    return vocab_load_spm_side(out, data, size, name, NULL, err);
}

int vocab_load_spm(vocab **out, const char *path, nc_err *err) {
    *out = NULL;
    char *data;
    size_t len;
    int r = hf_read_path(path, (size_t)1 << 31, &data, &len, err);
    if (r == 0) return nc_fail(err, "%s: cannot open: no such file", path);
    if (r < 0) return -1;
    r = vocab_load_spm_buffer(out, data, len, path, err);
    free(data);
    return r;
}
