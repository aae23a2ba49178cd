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
    uint8_t file_type;             /* the type as loaded, before mark_eog's change (vocab_write_gguf) */
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

    /* VOCAB_SPM from a tokenizer.model: SentencePiece's normalizer, NULL when it only escapes
     * spaces (spm_norm.c). */
    struct spm_norm *norm;
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

/* ---- Hugging Face directories (hf_side.c, spm_model.c, hf_dir_vocab.c) ---- */

/* The JSON files beside a tokenizer in a Hugging Face directory; NULL for an absent file. */
typedef struct hf_side {
    char *dir;
    struct cJSON *tok_config; /* tokenizer_config.json */
    struct cJSON *config;     /* config.json */
    struct cJSON *gen_config; /* generation_config.json */
    struct cJSON *added;      /* added_tokens.json */
} hf_side;

/* Reads the files of dir (a malformed one is an error naming it). */
int hf_side_load(hf_side *s, const char *dir, nc_err *err);
/* The same for the directory holding file_path. */
int hf_side_load_beside(hf_side *s, const char *file_path, nc_err *err);
void hf_side_free(hf_side *s);
/* BOS / EOS not set yet (< 0): tokenizer_config.json's bos_token / eos_token (a string or an
 * object with "content") by text, then config.json's bos_token_id / eos_token_id (an id, or the
 * first of a list). Needs the text index. */
void hf_side_special_ids(vocab *v, const hf_side *s);
/* One special token as llama.cpp's converter finds it (its SpecialVocab): tokenizer_config.json's
 * "<kind>_token" by text, else config.json's "<kind>_token_id"; -1 when neither names a token. */
int32_t hf_side_token_id(const vocab *v, const hf_side *s, const char *kind);
/* tokenizer_config.json's add_bos_token / add_eos_token, when booleans, override the
 * tokenizer's own choice (as llama.cpp's converter lets them); asking for a token the
 * vocabulary lacks is an error. */
int hf_side_add_flags(vocab *v, const hf_side *s, nc_err *err);
/* After vocab_finish: every id of generation_config.json's eos_token_id (an id or a list), else
 * of config.json's, ends generation (and the first becomes EOS when there is none). An id
 * outside the vocabulary is an error naming the file. */
int hf_side_eog(vocab *v, const hf_side *s, nc_err *err);
/* config.json's vocabulary size (vocab_size_per_layer_input, vocab_size, then
 * text_config.vocab_size): *n = 0 when absent; -1 when it is not a positive whole number. */
int hf_side_vocab_size(const hf_side *s, int32_t *n, nc_err *err);

/* SentencePiece's normalizer (spm_norm.c), as the model's normalizer_spec asks: *out NULL when
 * it does nothing beyond escaping spaces (no charsmap, remove_extra_whitespaces false). */
struct spm_proto;
typedef struct spm_norm spm_norm;
int spm_norm_new(spm_norm **out, const struct spm_proto *m, const char *where, nc_err *err);
void spm_norm_free(spm_norm *n);
/* text[0..len) normalized, spaces escaped as U+2581, one more in front with space_prefix: a new
 * string of *out_len bytes (NUL-terminated), or NULL when out of memory. */
char *spm_norm_apply(const spm_norm *n, const char *text, size_t len, bool space_prefix, uint32_t *out_len);

/* tokenizer.json with the side files already read (hf_json.c). */
int vocab_load_hf_side(vocab **out, const char *tokenizer_json_path, const hf_side *side, nc_err *err);
/* tokenizer.model bytes (the caller keeps them alive until this returns) as llama.cpp's converter
 * makes a vocabulary of them; side may be NULL (a tokenizer.model alone) (spm_model.c). */
int vocab_load_spm_side(vocab **out, const void *data, size_t size, const char *name, const hf_side *side,
                        nc_err *err);

#endif
