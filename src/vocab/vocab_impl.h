/* Internals shared by the vocab layer's source files; no other layer includes this. */
#ifndef NC_VOCAB_IMPL_H
#define NC_VOCAB_IMPL_H

#include "vocab/vocab.h"

/* Per-token flags. RSTRIP: whitespace after the token is dropped when it is split out of the
 * text (llama.cpp's LLAMA_TOKEN_ATTR_RSTRIP). */
enum { VTOK_EOG = 1u << 0, VTOK_RSTRIP = 1u << 1 };

typedef struct vocab_token {
    uint32_t text_off, text_len;   /* raw text in vocab.text (NUL-terminated there) */
    uint32_t piece_off, piece_len; /* rendered bytes in vocab.pieces, as with special = true */
    float score;
    uint8_t type;                  /* vocab_token_type */
    uint8_t flags;
} vocab_token;

struct vocab {
    vocab_kind kind;
    int32_t n_tokens;
    vocab_token *tok;
    char *text, *pieces;
    int32_t *slots;                /* open addressing: text -> id, -1 = empty */
    size_t mask;                   /* slot count - 1 (a power of two) */
    int32_t bos, eos, unk, eot, eom;
    bool add_bos, add_eos, add_space_prefix;
    int32_t byte_tok[256];         /* token for a raw byte, -1 if none */
    int32_t *specials;             /* control, user-defined and unknown tokens, longest text first */
    int32_t n_specials;
};

/* Collects token ids: counts them all, stores the first cap. */
typedef struct tok_sink {
    int32_t *out;
    size_t cap, n;
} tok_sink;

static inline void sink_put(tok_sink *s, int32_t id) {
    if (s->n < s->cap) s->out[s->n] = id;
    s->n++;
}

static inline const char *vtok_text(const vocab *v, int32_t id) { return v->text + v->tok[id].text_off; }

/* The id whose text is exactly s[0..n), or -1. */
int32_t vocab_find(const vocab *v, const char *s, size_t n);

/* SentencePiece encoding of one raw-text fragment (no special tokens inside). */
int spm_encode(const vocab *v, const char *text, size_t len, bool space_prefix, tok_sink *sink, nc_err *err);

#endif
