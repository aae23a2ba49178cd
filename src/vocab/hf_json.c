/* Loading a Hugging Face tokenizer.json (the format of the tokenizers library) into a vocab.
 *
 * Supported: model "BPE" with
 * - byte-level pre-tokenization: pre_tokenizer ByteLevel, alone or in a Sequence with Split
 *   (regex or string, behaviour Isolated), Digits and Punctuation steps, any of which may come
 *   after ByteLevel (they then run on the mapped text); normalizer null or NFC;
 * - SentencePiece style: normalizer Sequence[Prepend("▁"), Replace(" ", "▁")] and no
 *   pre_tokenizer, or no normalizer and a Metaspace pre_tokenizer (replacement "▁",
 *   prepend_scheme always / first / never, split or not); usually with byte_fallback.
 * The NFC normalizer is applied to the whole text before special tokens are split out
 * (Hugging Face normalizes the text between them; special token texts are NFC already).
 * Added tokens are split out of the text before everything else (llama.cpp's order); their
 * single_word flag is not honoured.
 * BOS and EOS: the post_processor's TemplateProcessing decides whether they are added and which
 * they are; otherwise bos_token / eos_token of tokenizer_config.json, then bos_token_id /
 * eos_token_id of config.json, both beside tokenizer.json. tokenizer_config.json's
 * add_bos_token / add_eos_token override the template, and generation_config.json's
 * eos_token_id (else config.json's) lists more end-of-generation tokens (hf_side.c). */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/hf_dir.h"
#include "vocab/vocab_impl.h"

typedef struct hf_ctx {
    const char *path;
    vocab *v;
    cJSON *root;
    const char **texts; /* per id, NULL for a hole */
    uint8_t *types, *flags;
} hf_ctx;

/* ---- files ---------------------------------------------------------------------------------- */

#define MAX_TOKENIZER_BYTES ((size_t)1 << 31)

/* The file parsed, or -1 with err naming it. */
static int parse_file(const char *path, cJSON **out, nc_err *err) {
    char *text;
    size_t len;
    *out = NULL;
    int r = hf_read_path(path, MAX_TOKENIZER_BYTES, &text, &len, err);
    if (r == 0) return nc_fail(err, "%s: cannot open: no such file", path);
    if (r < 0) return -1;
    *out = cJSON_ParseWithLength(text, len);
    free(text);
    return *out ? 0 : nc_fail(err, "%s: not valid JSON (%zu bytes read)", path, len);
}

/* ---- small JSON helpers ---------------------------------------------------------------------- */

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static bool bool_of(const cJSON *o, const char *key, bool dflt) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(x) ? cJSON_IsTrue(x) : dflt;
}

static bool is_type(const cJSON *o, const char *type) {
    const char *t = str_of(o, "type");
    return t && strcmp(t, type) == 0;
}

/* A JSON value that is null, absent, or an empty string. */
static bool unset(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return !x || cJSON_IsNull(x) || (cJSON_IsString(x) && x->valuestring[0] == '\0');
}

/* ---- tokens ----------------------------------------------------------------------------------- */

/* A token id (a whole number in [0, 2^30)), or -1. */
static int32_t json_id(const cJSON *x) {
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > INT32_MAX / 2 ||
        x->valuedouble != (double)(int32_t)x->valuedouble)
        return -1;
    return (int32_t)x->valuedouble;
}

/* The token count: one more than the largest id in model.vocab and added_tokens. */
static int count_tokens(hf_ctx *c, const cJSON *vocab_obj, const cJSON *added, nc_err *err) {
    int32_t max = -1, id;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab_obj) {
        if ((id = json_id(e)) < 0) return nc_fail(err, "%s: model.vocab: '%.100s' has no valid id", c->path, e->string);
        if (id > max) max = id;
    }
    cJSON_ArrayForEach(e, added) {
        if ((id = json_id(cJSON_GetObjectItemCaseSensitive(e, "id"))) < 0 || !str_of(e, "content"))
            return nc_fail(err, "%s: added_tokens: an entry without a valid id and content", c->path);
        if (id > max) max = id;
    }
    if (max < 0) return nc_fail(err, "%s: model.vocab is empty", c->path);
    /* ids are dense in real files; a few gaps are allowed, a huge id in a small file is not */
    int32_t entries = cJSON_GetArraySize(vocab_obj) + cJSON_GetArraySize(added);
    if (max > 2 * entries + 1024)
        return nc_fail(err, "%s: token id %d in a vocabulary of %d entries", c->path, max, entries);
    c->v->n_tokens = max + 1;
    return 0;
}

static int byte_token_text(const char *s) {
    unsigned x;
    char tail;
    return strlen(s) == 6 && sscanf(s, "<0x%2X%c", &x, &tail) == 2 && tail == '>' ? (int)x : -1;
}

/* Vocabulary entries are normal tokens, except <0xNN> with byte_fallback (byte tokens) and the
 * model's unk_token. */
static void read_model_vocab(hf_ctx *c, const cJSON *vocab_obj, const char *unk) {
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab_obj) {
        int32_t id = json_id(e); /* checked by count_tokens */
        c->texts[id] = e->string;
        c->types[id] = VOCAB_TT_NORMAL;
        if (c->v->byte_fallback && byte_token_text(e->string) >= 0) c->types[id] = VOCAB_TT_BYTE;
        if (unk && strcmp(e->string, unk) == 0) c->types[id] = VOCAB_TT_UNKNOWN;
    }
}

/* Added tokens: special ones are control tokens (matched only with parse_special), the others
 * user-defined (always matched), as llama.cpp's converter types them. */
static void read_added(hf_ctx *c, const cJSON *added, const char *unk) {
    const cJSON *e;
    cJSON_ArrayForEach(e, added) {
        int32_t id = json_id(cJSON_GetObjectItemCaseSensitive(e, "id")); /* checked by count_tokens */
        const char *content = str_of(e, "content");
        c->texts[id] = content;
        c->types[id] = bool_of(e, "special", false) ? VOCAB_TT_CONTROL : VOCAB_TT_USER_DEFINED;
        if (unk && strcmp(content, unk) == 0) c->types[id] = VOCAB_TT_UNKNOWN;
        c->flags[id] = (uint8_t)((bool_of(e, "rstrip", false) ? VTOK_RSTRIP : 0) |
                                 (bool_of(e, "lstrip", false) ? VTOK_LSTRIP : 0));
    }
}

/* Ids no entry names (gaps) become unused tokens "[PAD<id>]", as llama.cpp's converter does. */
static int copy_token_texts(hf_ctx *c, nc_err *err) {
    vocab *v = c->v;
    size_t total = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) total += (c->texts[i] ? strlen(c->texts[i]) : 20) + 1;
    if (total > UINT32_MAX) return nc_fail(err, "%s: %zu bytes of token text, more than supported", c->path, total);
    v->text = malloc(total);
    if (!v->text) return nc_fail(err, "%s: out of memory", c->path);
    uint32_t off = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        char pad[24];
        const char *s = c->texts[i];
        if (!s || !*s) {
            snprintf(pad, sizeof pad, "[PAD%d]", i);
            s = pad;
        }
        size_t n = strlen(s);
        memcpy(v->text + off, s, n + 1);
        v->tok[i] = (vocab_token){.text_off = off, .text_len = (uint32_t)n, .type = c->texts[i] ? c->types[i] : VOCAB_TT_UNUSED,
                                  .flags = c->flags[i]};
        off += (uint32_t)n + 1;
    }
    return 0;
}

static int read_tokens(hf_ctx *c, const cJSON *model, nc_err *err) {
    const cJSON *vocab_obj = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(c->root, "added_tokens");
    if (!cJSON_IsObject(vocab_obj)) return nc_fail(err, "%s: model.vocab is missing or not an object", c->path);
    if (added && !cJSON_IsArray(added)) return nc_fail(err, "%s: added_tokens is not an array", c->path);
    if (count_tokens(c, vocab_obj, added, err)) return -1;
    int32_t n = c->v->n_tokens;
    c->texts = calloc((size_t)n, sizeof *c->texts);
    c->types = calloc((size_t)n, 1);
    c->flags = calloc((size_t)n, 1);
    c->v->tok = calloc((size_t)n, sizeof *c->v->tok);
    if (!c->texts || !c->types || !c->flags || !c->v->tok) return nc_fail(err, "%s: out of memory", c->path);
    const char *unk = str_of(model, "unk_token");
    read_model_vocab(c, vocab_obj, unk);
    read_added(c, added, unk);
    return copy_token_texts(c, err);
}

/* ---- merges ------------------------------------------------------------------------------------ */

/* model.merges: "left right" strings (split at the first space after the first character) or,
 * in newer files, [left, right] pairs. */
static int read_merges(hf_ctx *c, const cJSON *model, nc_err *err) {
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges)) return nc_fail(err, "%s: model.merges is missing or not an array", c->path);
    if (bpe_merges_init(c->v, (size_t)cJSON_GetArraySize(merges), c->path, err)) return -1;
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, merges) {
        const char *l = NULL, *r = NULL;
        size_t ln = 0;
        if (cJSON_IsString(m) && m->valuestring[0]) {
            l = m->valuestring;
            r = strchr(l + 1, ' ');
            ln = r ? (size_t)(r - l) : 0;
            if (r) r++;
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            l = m->child->valuestring;
            ln = strlen(l);
            r = m->child->next->valuestring;
        }
        if (!l || !r) return nc_fail(err, "%s: model.merges[%d] is not a pair of tokens", c->path, i);
        bpe_merge_add(c->v, l, ln, r, strlen(r));
        i++;
    }
    return 0;
}

/* ---- pre-tokenizer ----------------------------------------------------------------------------- */

typedef struct step_list {
    pretok_step_def def[PRETOK_MAX_STEPS];
    char *owned[PRETOK_MAX_STEPS]; /* patterns built here */
    int n;
    bool byte_level;
} step_list;

static int add_step(step_list *s, const char *pattern, char *owned, const char *path, nc_err *err) {
    if (s->n == PRETOK_MAX_STEPS) {
        free(owned);
        return nc_fail(err, "%s: pre_tokenizer: more than %d steps", path, PRETOK_MAX_STEPS);
    }
    s->owned[s->n] = owned;
    s->def[s->n++] = (pretok_step_def){owned ? owned : pattern, s->byte_level};
    return 0;
}

/* A literal string as a PCRE2 pattern: every ASCII non-alphanumeric character escaped. */
static char *quote(const char *s) {
    char *q = malloc(2 * strlen(s) + 1), *o = q;
    if (!q) return NULL;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch < 0x80 && !((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))) *o++ = '\\';
        *o++ = *s;
    }
    *o = '\0';
    return q;
}

static int add_split(step_list *s, const cJSON *st, const char *path, nc_err *err) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(st, "pattern");
    const char *behavior = str_of(st, "behavior"), *re = str_of(pat, "Regex"), *lit = str_of(pat, "String");
    if (!behavior || strcmp(behavior, "Isolated") != 0 || bool_of(st, "invert", false))
        return nc_fail(err, "%s: pre_tokenizer Split: behavior '%s'%s is not supported (only Isolated)", path,
                       behavior ? behavior : "(none)", bool_of(st, "invert", false) ? " with invert" : "");
    if (re) return add_step(s, re, NULL, path, err);
    char *q = lit ? quote(lit) : NULL;
    if (!q) return nc_fail(err, "%s: pre_tokenizer Split: pattern is neither Regex nor String", path);
    return add_step(s, q, q, path, err);
}

static int add_punctuation(step_list *s, const cJSON *st, const char *path, nc_err *err) {
    const char *behavior = str_of(st, "behavior");
    if (!behavior || strcmp(behavior, "Isolated") == 0) return add_step(s, PRETOK_RE_PUNCT, NULL, path, err);
    if (strcmp(behavior, "Contiguous") == 0) return add_step(s, PRETOK_RE_PUNCT_RUNS, NULL, path, err);
    return nc_fail(err, "%s: pre_tokenizer Punctuation: behavior '%s' is not supported", path, behavior);
}

/* ByteLevel: its regex split (if use_regex), and every later step runs on the mapped text. */
static int add_byte_level(step_list *s, const cJSON *st, const char *path, nc_err *err) {
    if (s->byte_level) return nc_fail(err, "%s: pre_tokenizer: ByteLevel appears twice", path);
    if (bool_of(st, "add_prefix_space", false))
        return nc_fail(err, "%s: pre_tokenizer ByteLevel with add_prefix_space is not supported", path);
    if (bool_of(st, "use_regex", true) && add_step(s, PRETOK_RE_GPT2, NULL, path, err)) return -1;
    s->byte_level = true;
    return 0;
}

static int add_pre_step(step_list *s, const cJSON *st, const char *path, nc_err *err) {
    if (is_type(st, "ByteLevel")) return add_byte_level(s, st, path, err);
    if (is_type(st, "Split")) return add_split(s, st, path, err);
    if (is_type(st, "Punctuation")) return add_punctuation(s, st, path, err);
    if (is_type(st, "Digits"))
        return add_step(s, bool_of(st, "individual_digits", false) ? PRETOK_RE_DIGIT : PRETOK_RE_DIGITS, NULL, path, err);
    const char *t = str_of(st, "type");
    return nc_fail(err, "%s: pre_tokenizer type '%s' is not supported (supported: ByteLevel, Split, Digits, "
                        "Punctuation, and a Sequence of them)",
                   path, t ? t : "(none)");
}

static int read_steps(step_list *s, const cJSON *pre, const char *path, nc_err *err) {
    if (!is_type(pre, "Sequence")) return add_pre_step(s, pre, path, err);
    const cJSON *st;
    cJSON_ArrayForEach(st, cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers")) {
        if (add_pre_step(s, st, path, err)) return -1;
    }
    return 0;
}

/* The steps, named after the family they match (else "custom"). */
static int read_pre_tokenizer(hf_ctx *c, const cJSON *pre, nc_err *err) {
    step_list s = {0};
    int rc = read_steps(&s, pre, c->path, err);
    if (rc == 0 && !s.byte_level)
        rc = nc_fail(err, "%s: pre_tokenizer has no ByteLevel step, which byte-level BPE needs", c->path);
    if (rc == 0) {
        const char *fam = pretok_family_of(s.def, s.n);
        char name[64];
        snprintf(name, sizeof name, "%.*s", fam ? (int)strcspn(fam, "|") : 6, fam ? fam : "custom");
        rc = pretok_build(&c->v->pre, name, s.def, s.n, err);
        if (rc) nc_fail_prefix(err, "%s", c->path);
    }
    for (int i = 0; i < s.n; i++) free(s.owned[i]);
    return rc;
}

/* ---- normalizer and kind ----------------------------------------------------------------------- */

static bool is_prepend_mark(const cJSON *n) {
    const char *p = str_of(n, "prepend");
    return is_type(n, "Prepend") && p && strcmp(p, "\xe2\x96\x81") == 0;
}

static bool is_replace_space(const cJSON *n) {
    const char *from = str_of(cJSON_GetObjectItemCaseSensitive(n, "pattern"), "String"), *to = str_of(n, "content");
    return is_type(n, "Replace") && from && to && strcmp(from, " ") == 0 && strcmp(to, "\xe2\x96\x81") == 0;
}

/* SentencePiece's spaces as normalizers: Sequence[Prepend("▁"), Replace(" ", "▁")]. */
static bool is_spm_normalizer(const cJSON *n) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
    return is_type(n, "Sequence") && cJSON_GetArraySize(list) == 2 && is_prepend_mark(cJSON_GetArrayItem(list, 0)) &&
           is_replace_space(cJSON_GetArrayItem(list, 1));
}

static int read_model_options(hf_ctx *c, const cJSON *model, nc_err *err) {
    if (!is_type(model, "BPE")) {
        const char *t = str_of(model, "type");
        return nc_fail(err, "%s: model type '%s' is not supported (only BPE)", c->path, t ? t : "(none)");
    }
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return nc_fail(err, "%s: BPE dropout is not supported", c->path);
    if (!unset(model, "continuing_subword_prefix") || !unset(model, "end_of_word_suffix"))
        return nc_fail(err, "%s: BPE continuing_subword_prefix / end_of_word_suffix are not supported", c->path);
    c->v->ignore_merges = bool_of(model, "ignore_merges", false);
    c->v->byte_fallback = bool_of(model, "byte_fallback", false);
    c->v->fuse_unk = bool_of(model, "fuse_unk", false);
    return 0;
}

/* Metaspace: prepend_scheme (older files: add_prefix_space) and split, which defaults to true
 * as in tokenizers. */
static int read_metaspace(hf_ctx *c, const cJSON *pre, nc_err *err) {
    const char *rep = str_of(pre, "replacement"), *scheme = str_of(pre, "prepend_scheme");
    if (!rep || strcmp(rep, "\xe2\x96\x81") != 0)
        return nc_fail(err, "%s: pre_tokenizer Metaspace: replacement '%s' is not supported (only U+2581)", c->path,
                       rep ? rep : "(none)");
    if (!scheme) scheme = bool_of(pre, "add_prefix_space", true) ? "always" : "never";
    vocab *v = c->v;
    if (strcmp(scheme, "first") == 0) v->prefix_first_only = true;
    else if (strcmp(scheme, "always") != 0 && strcmp(scheme, "never") != 0)
        return nc_fail(err, "%s: pre_tokenizer Metaspace: prepend_scheme '%s' is not supported", c->path, scheme);
    v->kind = VOCAB_SPM_BPE;
    v->add_space_prefix = strcmp(scheme, "never") != 0;
    v->prefix_unless_space = true;
    v->split_at_mark = bool_of(pre, "split", true);
    return 0;
}

/* Byte-level when a pre_tokenizer is given; SentencePiece-style with the space normalizers or
 * Metaspace. */
static int read_kind(hf_ctx *c, nc_err *err) {
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(c->root, "normalizer");
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(c->root, "pre_tokenizer");
    bool no_norm = !norm || cJSON_IsNull(norm) || is_type(norm, "NFC");
    if (is_type(pre, "Metaspace")) {
        if (!norm || cJSON_IsNull(norm)) return read_metaspace(c, pre, err);
        return nc_fail(err, "%s: normalizer '%s' is not supported with a Metaspace pre_tokenizer", c->path,
                       str_of(norm, "type") ? str_of(norm, "type") : "?");
    }
    if (pre && !cJSON_IsNull(pre)) {
        if (!no_norm)
            return nc_fail(err, "%s: normalizer '%s' is not supported with a byte-level pre_tokenizer (only NFC)",
                           c->path, str_of(norm, "type") ? str_of(norm, "type") : "?");
        c->v->kind = VOCAB_BPE;
        c->v->nfc = is_type(norm, "NFC");
        return 0;
    }
    if (norm && is_spm_normalizer(norm)) {
        c->v->kind = VOCAB_SPM_BPE;
        c->v->add_space_prefix = true;
        return 0;
    }
    return nc_fail(err, "%s: neither a byte-level tokenizer (a ByteLevel pre_tokenizer) nor a SentencePiece-style "
                        "one (normalizer Sequence[Prepend(\"\\u2581\"), Replace(\" \", \"\\u2581\")] without "
                        "pre_tokenizer, or a Metaspace pre_tokenizer)",
                   c->path);
}

/* ---- special ids ------------------------------------------------------------------------------- */

static int32_t id_of_text(const vocab *v, const char *s) { return s ? vocab_find(v, s, strlen(s)) : -1; }

/* The post_processor's TemplateProcessing (alone or inside a Sequence), or NULL. */
static const cJSON *find_template(const cJSON *pp) {
    if (is_type(pp, "TemplateProcessing")) return pp;
    const cJSON *p;
    if (is_type(pp, "Sequence")) cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(pp, "processors")) {
            if (is_type(p, "TemplateProcessing")) return p;
        }
    return NULL;
}

/* The template for one sequence: special tokens before $A are BOS, after it EOS. */
static void read_template(vocab *v, const cJSON *tp) {
    bool after = false;
    const cJSON *item;
    cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(tp, "single")) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(item, "SpecialToken");
        if (!sp) {
            after = true;
            continue;
        }
        int32_t id = id_of_text(v, str_of(sp, "id"));
        if (id < 0) continue;
        if (after) v->eos = id, v->add_eos = true;
        else v->bos = id, v->add_bos = true;
    }
}

/* BOS / EOS: the template first, then the files beside tokenizer.json (hf_side.c), whose
 * add_bos_token / add_eos_token override the template's choice. */
static int read_special_ids(hf_ctx *c, const hf_side *side, nc_err *err) {
    vocab *v = c->v;
    v->bos = v->eos = v->eot = v->eom = -1;
    v->unk = id_of_text(v, str_of(cJSON_GetObjectItemCaseSensitive(c->root, "model"), "unk_token"));
    read_template(v, find_template(cJSON_GetObjectItemCaseSensitive(c->root, "post_processor")));
    hf_side_special_ids(v, side);
    return hf_side_add_flags(v, side, err);
}

/* ---- entry ------------------------------------------------------------------------------------- */

static int load(hf_ctx *c, const hf_side *side, nc_err *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(c->root, "model");
    if (read_model_options(c, model, err) || read_kind(c, err)) return -1;
    if (c->v->kind == VOCAB_BPE && read_pre_tokenizer(c, cJSON_GetObjectItemCaseSensitive(c->root, "pre_tokenizer"), err))
        return -1;
    if (read_tokens(c, model, err) || vocab_index(c->v, c->path, err)) return -1;
    /* by text: after the index; before vocab_finish, which marks EOS */
    if (read_special_ids(c, side, err) || vocab_finish(c->v, c->path, err) || hf_side_eog(c->v, side, err)) return -1;
    return read_merges(c, model, err);
}

int vocab_load_hf_side(vocab **out, const char *path, const hf_side *side, nc_err *err) {
    *out = NULL;
    hf_ctx c = {.path = path};
    if (parse_file(path, &c.root, err)) return -1;
    c.v = calloc(1, sizeof *c.v);
    int rc = c.v ? load(&c, side, err) : nc_fail(err, "%s: out of memory", path);
    free(c.texts);
    free(c.types);
    free(c.flags);
    cJSON_Delete(c.root);
    if (rc) {
        vocab_free(c.v);
        return -1;
    }
    *out = c.v;
    return 0;
}

int vocab_load_hf(vocab **out, const char *path, nc_err *err) {
    *out = NULL;
    int fd = nc_open_regular(path, err); /* the tokenizer's own errors first */
    if (fd < 0) return -1;
    close(fd);
    hf_side side;
    if (hf_side_load_beside(&side, path, err)) return -1;
    int rc = vocab_load_hf_side(out, path, &side, err);
    hf_side_free(&side);
    return rc;
}
