/* Pre-tokenizers of byte-level BPE vocabularies: the text is cut into pieces ("words") before
 * BPE merges run inside each piece. Internal to the vocab layer.
 *
 * A pre-tokenizer is a list of steps, as a Hugging Face tokenizer.json pre_tokenizer Sequence
 * is: each step runs a pattern over every piece the steps before it produced, and both the
 * matches and the text between them become pieces (Split with behaviour "Isolated"; Digits,
 * Punctuation and ByteLevel's own regex are such splits too). A step marked "mapped" runs after
 * ByteLevel, i.e. on the text with each byte replaced by its printable stand-in (GPT-2's
 * bytes_to_unicode), as Falcon's digit splits do. */
#ifndef NC_VOCAB_PRETOK_H
#define NC_VOCAB_PRETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

typedef struct pretok pretok;

/* GPT-2's ByteLevel regex (tokenizers' ByteLevel with use_regex = true). */
#define PRETOK_RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* tokenizers' Digits pre-tokenizer (char::is_numeric is the general category N), with
 * individual_digits and without. */
#define PRETOK_RE_DIGIT "\\p{N}"
#define PRETOK_RE_DIGITS "\\p{N}+"
/* tokenizers' Punctuation pre-tokenizer: ASCII punctuation (which includes the symbols
 * $ + < = > ^ ` | ~) or general category P; the runs are its Contiguous behaviour. */
#define PRETOK_RE_PUNCT "[\\p{P}$+<=>^`|~]"
#define PRETOK_RE_PUNCT_RUNS PRETOK_RE_PUNCT "+"

typedef struct pretok_step_def {
    const char *pattern; /* PCRE2 syntax, compiled with UTF and UCP */
    bool mapped;         /* runs on the byte-level-mapped text */
} pretok_step_def;

/* A pre-tokenizer from its steps (at most PRETOK_MAX_STEPS); name is kept for messages. */
#define PRETOK_MAX_STEPS 8
int pretok_build(pretok **out, const char *name, const pretok_step_def *steps, int n_steps, nc_err *err);

/* What a family's tokenizer does besides pre-tokenizing (llama.cpp sets the first two for
 * Llama 3). */
typedef struct pretok_family {
    bool ignore_merges; /* the BPE model takes a piece that is a token whole */
    bool add_bos;       /* a BOS token is added unless the file says otherwise */
    bool nfc;           /* the tokenizer.json normalizer is NFC (llama.cpp skips it) */
} pretok_family;

/* The pre-tokenizer llama.cpp names by tokenizer.ggml.pre. An unknown name is an error listing
 * the known ones. */
int pretok_for_name(pretok **out, const char *name, size_t len, pretok_family *fam, nc_err *err);

/* The family name whose steps equal these (so that a tokenizer.json can be reported as, say,
 * "llama-bpe"), or NULL. */
const char *pretok_family_of(const pretok_step_def *steps, int n_steps);

const char *pretok_name(const pretok *p);
void pretok_free(pretok *p);

/* A piece: bytes [off, off + len) of the text. */
typedef struct pt_piece {
    uint32_t off, len;
} pt_piece;

/* Scratch space for pretok_split, reusable across calls; zero-initialise, free with
 * pt_work_free. After pretok_split the pieces are pieces[0..n_pieces), in text order. */
typedef struct pt_work {
    pt_piece *pieces, *spare;
    size_t n_pieces, cap, cap_spare;
    void *match;          /* pcre2_match_data */
    char *mapped;         /* a piece in byte-level form */
    uint32_t *raw_of;     /* byte offset in mapped -> byte offset in the piece */
    size_t cap_mapped;
} pt_work;

/* Splits text[0..len) (len < 2^32). Invalid UTF-8 never matches a pattern, so it ends up in the
 * pieces between matches. */
int pretok_split(const pretok *p, const char *text, size_t len, pt_work *w, nc_err *err);
void pt_work_free(pt_work *w);

/* GPT-2's bytes_to_unicode: the code point standing for byte b in byte-level token texts. */
uint32_t bytelevel_cp(uint8_t b);
/* The inverse: the byte a code point stands for, or -1. */
int bytelevel_byte(uint32_t cp);

#endif
