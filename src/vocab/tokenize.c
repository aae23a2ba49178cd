/* Tokenisation: special tokens are split out of the text first (llama.cpp's
 * tokenizer_st_partition), then each remaining text fragment is encoded. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "vocab/vocab_impl.h"

/* Texts longer than this are refused, so that symbol indices and token counts fit in int. */
#define MAX_TEXT ((size_t)INT32_MAX / 8)

/* A piece of the input: raw text [off, off + len), or the special token id (id >= 0). */
typedef struct frag {
    size_t off, len;
    int32_t id;
} frag;

typedef struct frag_list {
    frag *a;
    size_t n, cap;
} frag_list;

static bool frag_push(frag_list *l, frag f) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        frag *a = realloc(l->a, cap * sizeof *a);
        if (!a) return false;
        l->a = a;
        l->cap = cap;
    }
    l->a[l->n++] = f;
    return true;
}

/* isspace() in the C locale, as llama.cpp's RSTRIP uses. */
static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

/* Splits one raw fragment at every occurrence of token id, leftmost first, appending to out. */
static bool split_fragment(const vocab *v, const char *text, frag fr, int32_t id, frag_list *out) {
    const char *t = vtok_text(v, id);
    size_t tn = v->tok[id].text_len;
    bool rstrip = v->tok[id].flags & VTOK_RSTRIP, lstrip = v->tok[id].flags & VTOK_LSTRIP;
    while (fr.len > 0) {
        const char *m = memmem(text + fr.off, fr.len, t, tn);
        if (!m) return frag_push(out, fr);
        size_t at = (size_t)(m - text), end = fr.off + fr.len, before = at;
        while (lstrip && before > fr.off && is_space(text[before - 1])) before--;
        if (before > fr.off && !frag_push(out, (frag){fr.off, before - fr.off, -1})) return false;
        if (!frag_push(out, (frag){0, 0, id})) return false;
        fr.off = at + tn;
        while (rstrip && fr.off < end && is_space(text[fr.off])) fr.off++;
        fr.len = end - fr.off;
    }
    return true;
}

static bool split_all(const vocab *v, const char *text, int32_t id, const frag_list *in, frag_list *out) {
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        bool ok = in->a[i].id >= 0 ? frag_push(out, in->a[i]) : split_fragment(v, text, in->a[i], id, out);
        if (!ok) return false;
    }
    return true;
}

/* Control and unknown tokens are recognised only with parse_special; user-defined tokens always
 * (llama.cpp, following Hugging Face tokenizers' added tokens). */
static bool wanted(const vocab *v, int32_t id, bool parse_special) {
    uint8_t type = v->tok[id].type;
    return parse_special || (type != VOCAB_TT_CONTROL && type != VOCAB_TT_UNKNOWN);
}

/* One pass over the fragments per special token, longest token text first. */
static int partition(const vocab *v, const char *text, size_t len, bool parse_special, frag_list *out, nc_err *err) {
    frag_list spare = {0};
    bool ok = frag_push(out, (frag){0, len, -1});
    for (int32_t i = 0; ok && i < v->n_specials; i++) {
        int32_t id = v->specials[i];
        if (!wanted(v, id, parse_special) || !memmem(text, len, vtok_text(v, id), v->tok[id].text_len)) continue;
        ok = split_all(v, text, id, out, &spare);
        frag_list t = *out;
        *out = spare;
        spare = t;
    }
    free(spare.a);
    return ok ? 0 : nc_fail(err, "tokenize: out of memory");
}

static int encode_fragment(const vocab *v, const char *text, size_t len, bool space_prefix, tok_sink *sink,
                           nc_err *err) {
    switch (v->kind) {
    case VOCAB_SPM: return spm_encode(v, text, len, space_prefix, sink, err);
    case VOCAB_BPE:
    case VOCAB_SPM_BPE: return bpe_encode(v, text, len, space_prefix, sink, err);
    }
    return nc_fail(err, "tokenize: unknown vocabulary kind %d", (int)v->kind);
}

/* A space prefix goes before the first text fragment and before every fragment that follows a
 * special token (llama.cpp's is_prev_special, Hugging Face's per-section normalizer), not before
 * text that follows text; with prefix_first_only only at the start of the text (Metaspace's
 * prepend_scheme "first"). */
static int encode_all(const vocab *v, const char *text, const frag_list *fl, tok_sink *sink, nc_err *err) {
    bool after_special = true;
    for (size_t i = 0; i < fl->n; i++) {
        const frag *f = &fl->a[i];
        if (f->id >= 0) sink_put(sink, f->id);
        else if (encode_fragment(v, text + f->off, f->len,
                                 v->add_space_prefix && (v->prefix_first_only ? f->off == 0 : after_special), sink,
                                 err))
            return -1;
        after_special = f->id >= 0;
    }
    return 0;
}

int vocab_tokenize(const vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                   int32_t *out, int cap, nc_err *err) {
    if (!text && len) return nc_fail(err, "tokenize: text is NULL but its length is %zu", len);
    if (cap < 0 || (cap > 0 && !out)) return nc_fail(err, "tokenize: bad output buffer (capacity %d)", cap);
    if (len > MAX_TEXT) return nc_fail(err, "tokenize: the text has %zu bytes, more than %zu", len, MAX_TEXT);
    char *norm = NULL; /* the NFC form, when the vocabulary asks for it and it differs */
    size_t norm_len;
    if (v->nfc && nfc_normalize(text, len, &norm, &norm_len)) return nc_fail(err, "tokenize: out of memory");
    if (norm) {
        text = norm;
        len = norm_len;
    }
    tok_sink sink = {out, (size_t)cap, 0};
    frag_list frags = {0};
    int rc = len > 0 ? partition(v, text, len, parse_special, &frags, err) : 0;
    if (rc == 0) {
        if (add_special && v->add_bos) sink_put(&sink, v->bos);
        rc = encode_all(v, text, &frags, &sink, err);
        if (add_special && v->add_eos) sink_put(&sink, v->eos);
    }
    free(frags.a);
    free(norm);
    if (rc) return -1;
    if (sink.n > INT_MAX) return nc_fail(err, "tokenize: %zu tokens, more than an int can count", sink.n);
    return (int)sink.n;
}
