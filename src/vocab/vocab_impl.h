/* Internals shared by the vocab layer's source files; no other layer includes this. */
#ifndef NC_VOCAB_IMPL_H
#define NC_VOCAB_IMPL_H

#include "vocab/pretok.h"
#include "vocab/vocab.h"

/* Per-token flags. RSTRIP / LSTRIP: whitespace after / before the token is dropped when it is
 * split out of the text (llama.cpp's LLAMA_TOKEN_ATTR_RSTRIP / LSTRIP, Hugging Face's added-token
 * rstrip / lstrip). */
enum { VTOK_EOG = 1u << 0, VTOK_RSTRIP = 1u << 1, VTOK_LSTRIP = 1u << 2 };

/* One BPE merge: the pair (left, right) of token ids becomes token id at this rank (lower ranks
 * merge first). A slot with left < 0 is empty. */
typedef struct bpe_merge {
    int32_t left, right, rank, id;
} bpe_merge;

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

    /* BPE (VOCAB_BPE, VOCAB_SPM_BPE) */
    pretok *pre;                   /* VOCAB_BPE: how the text is cut into words */
    bool nfc;                      /* the text is put in Unicode NFC first (tokenizer.json) */
    bool ignore_merges;            /* a word that is a token is taken whole (Llama 3) */
    bool byte_fallback, fuse_unk;  /* VOCAB_SPM_BPE: characters without a token become <0xNN> */
    /* VOCAB_SPM_BPE with a Metaspace pre-tokenizer rather than the Prepend normalizer: the space
     * mark is added only where the text does not start with one (and, with prepend_scheme
     * "first", only at the start of the whole text); split_at_mark cuts words before each mark. */
    bool prefix_unless_space, prefix_first_only, split_at_mark;
    bpe_merge *merges;             /* open addressing on (left, right) */
    size_t merge_mask;
    int32_t n_merges;
    int32_t unit_tok[256];         /* VOCAB_BPE: the token of each byte's stand-in, -1 if none */
    int32_t *raw_slots;            /* VOCAB_BPE: rendered bytes -> normal token (same size as slots) */
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

/* The steps shared by the GGUF and tokenizer.json loaders once tok[], text and kind are set:
 * vocab_index builds the text -> id index (duplicate texts are an error); vocab_finish, once the
 * special ids and flags are set too, checks byte tokens and builds the end-of-generation marks,
 * the special token list, rendered pieces and (BPE) the byte tables. where names the source in
 * messages. */
int vocab_index(vocab *v, const char *where, nc_err *err);
int vocab_finish(vocab *v, const char *where, nc_err *err);

/* Unicode NFC of text[0..len) (nfc.c): *out = NULL when nothing can change (no code point at
 * or above U+0300), else a new buffer of *out_len bytes for the caller to free. Bytes that are
 * not well-formed UTF-8 stay as they are and never compose. -1 when out of memory. */
int nfc_normalize(const char *text, size_t len, char **out, size_t *out_len);

/* ---- BPE (bpe.c) ---- */

/* Room for n merges; then add them in rank order. A merge whose parts or result are no token is
 * skipped (Hugging Face refuses such files, llama.cpp ignores the pair when encoding); a pair
 * seen before keeps its first rank (llama.cpp). */
int bpe_merges_init(vocab *v, size_t n, const char *where, nc_err *err);
void bpe_merge_add(vocab *v, const char *left, size_t left_len, const char *right, size_t right_len);
/* The unit tokens and the index of rendered bytes; after vocab_finish's pieces. */
int bpe_prepare(vocab *v, const char *where, nc_err *err);
/* Byte-level BPE or BPE over characters of one raw-text fragment. */
int bpe_encode(const vocab *v, const char *text, size_t len, bool space_prefix, tok_sink *sink, nc_err *err);
/* A byte-level token text to the bytes it stands for (never longer); characters that stand for
 * no byte are copied as they are, and then *clean is false. */
size_t bytelevel_decode(const char *s, size_t n, char *out, bool *clean);

#endif
