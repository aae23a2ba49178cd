/* The vocabulary of a model: token texts, types and scores from GGUF metadata or a Hugging Face
 * tokenizer.json, tokenisation and detokenisation. Kinds: SentencePiece ("llama"), byte-level
 * BPE ("gpt2") with the pre-tokenizer of its model family, and the BPE-over-characters form in
 * which tokenizer.json files carry SentencePiece models.
 *
 * Behaviour follows llama.cpp (src/llama-vocab.cpp), which produced the test vectors:
 * - Special tokens are split out of the text first (longest text first). User-defined tokens
 *   are always split out; control and unknown tokens only with parse_special.
 * - SentencePiece: spaces become U+2581; a U+2581 is prepended (tokenizer.ggml.add_space_prefix)
 *   at the start of the text and after every special token; then adjacent symbols are merged by
 *   score; leftover symbols become <0xNN> byte tokens.
 * - Byte-level BPE: the pre-tokenizer (tokenizer.ggml.pre) cuts the text into words, each
 *   word's bytes are merged by rank (tokenizer.ggml.merges); see bpe.c and pretok.c.
 * - Detokenisation drops the one leading space of the first piece (add_space_prefix).
 * Nothing here prints; failures return -1 with err set. */
#ifndef NC_VOCAB_H
#define NC_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "format/gguf.h"

typedef enum vocab_kind {
    VOCAB_SPM,     /* SentencePiece, tokenizer.ggml.model "llama": merges by score */
    VOCAB_BPE,     /* byte-level BPE, tokenizer.ggml.model "gpt2": merges by rank */
    VOCAB_SPM_BPE, /* tokenizer.json BPE over characters with U+2581 spaces and byte fallback */
} vocab_kind;

/* tokenizer.ggml.token_type values (0 is "undefined", rendered like an unused token). */
typedef enum vocab_token_type {
    VOCAB_TT_UNDEFINED = 0,
    VOCAB_TT_NORMAL = 1,
    VOCAB_TT_UNKNOWN = 2,
    VOCAB_TT_CONTROL = 3,
    VOCAB_TT_USER_DEFINED = 4,
    VOCAB_TT_UNUSED = 5,
    VOCAB_TT_BYTE = 6,
} vocab_token_type;

typedef struct vocab vocab;

/* Reads the tokenizer.ggml.* metadata. Everything is copied: f may be closed afterwards.
 * Malformed metadata (array length mismatches, ids out of range, bad token types, duplicate
 * texts, byte tokens not spelled <0xNN>) is an error naming the key. */
int vocab_load(vocab **out, const gguf_file *f, nc_err *err);

/* Reads a Hugging Face tokenizer.json: model BPE, either byte-level (pre_tokenizer ByteLevel,
 * alone or after Split / Digits / Punctuation steps) or SentencePiece-style (normalizer
 * Prepend("\u2581") + Replace(" ", "\u2581"), or a Metaspace pre_tokenizer; byte_fallback).
 * Added tokens become control tokens (special) or user-defined ones. BOS / EOS: the
 * post_processor's template, else tokenizer_config.json and config.json beside the file;
 * tokenizer_config.json's add_bos_token / add_eos_token override the template, and
 * generation_config.json's eos_token_id list marks end-of-generation tokens (see
 * vocab_load_hf_dir). A malformed file beside it is an error naming that file.
 * Anything else (other models, normalizers, pre-tokenizer types) is an error naming it. */
int vocab_load_hf(vocab **out, const char *tokenizer_json_path, nc_err *err);

/* Reads a SentencePiece tokenizer.model (a protobuf ModelProto, spm_proto.h) into the vocabulary
 * llama.cpp's converter makes of it (tokenizer.ggml.model "llama"): the pieces' texts, scores and
 * types, add_space_prefix from the normalizer's add_dummy_prefix, BOS / EOS / UNK from the
 * trainer_spec, BOS added. The normalizer's rules (charsmap, remove_extra_whitespaces), which
 * llama.cpp drops, are kept for the encoder (spm_norm.c). Malformed files are errors naming the
 * field and its offset. */
int vocab_load_spm(vocab **out, const char *path, nc_err *err);
/* The same from bytes (tests, fuzzing); name is used in messages. */
int vocab_load_spm_buffer(vocab **out, const void *data, size_t size, const char *name, nc_err *err);

/* The tokenizer of a Hugging Face model directory: tokenizer.json when present, else
 * tokenizer.model (then sized to config.json's vocab_size and amended by added_tokens.json and
 * tokenizer_config.json's added_tokens_decoder, as llama.cpp's converter does). Then, either way:
 * tokenizer_config.json's bos_token / eos_token (strings or {"content"} objects) and
 * add_bos_token / add_eos_token; config.json's bos_token_id / eos_token_id where those leave a
 * token unset; and every id of generation_config.json's eos_token_id (an id or a list; else
 * config.json's) ends generation (vocab_is_eog). Malformed JSON files are errors naming them. */
int vocab_load_hf_dir(vocab **out, const char *dir, nc_err *err);
/* The same from dir's tokenizer.model even when a tokenizer.json is beside it (llama.cpp's
 * converter prefers the SentencePiece model for Llama-family and Gemma models). */
int vocab_load_hf_dir_spm(vocab **out, const char *dir, nc_err *err);
void vocab_free(vocab *v);

/* The tokenizer.ggml.* metadata llama.cpp's convert_hf_to_gguf.py writes for a vocabulary loaded
 * by vocab_load_hf_dir from dir: model ("gpt2" for byte-level BPE, "llama" for SentencePiece),
 * pre (our pre-tokenizer family name, where the converter hashes the tokenizer's output on its
 * test text; "default" for SentencePiece), tokens, scores (SentencePiece), token_type, merges
 * (BPE), padded to n_vocab (config.json's vocab_size) with "[PADi]" unused tokens; the special ids
 * of tokenizer_config.json / config.json (bos, eos, unknown, seperator, padding, cls, mask) as its
 * SpecialVocab finds them; add_bos_token / add_eos_token where tokenizer_config.json says; and
 * add_space_prefix false for a SentencePiece model without the prefix, or when no_space_prefix
 * (the converter says so for Gemma whatever the model file says). Token types are the file's:
 * not the control type vocab_is_eog's tokens get at load. A tokenizer.json of SentencePiece-style
 * BPE becomes what the converter's LlamaHfVocab makes of it: model "llama", every score -1000,
 * the special ids control tokens, no merges. A byte-level BPE whose pre-tokenizer is no known
 * family is an error. */
typedef struct gguf_out gguf_out;
int vocab_write_gguf(const vocab *v, const char *dir, int32_t n_vocab, bool no_space_prefix, gguf_out *o, nc_err *err);

vocab_kind vocab_get_kind(const vocab *v);
/* The pre-tokenizer's name (a tokenizer.ggml.pre value, or "custom" for a tokenizer.json whose
 * steps match no known family); "" for kinds without one. */
const char *vocab_pre_name(const vocab *v);
int32_t vocab_n_tokens(const vocab *v);
int32_t vocab_bos(const vocab *v); /* -1 if none */
int32_t vocab_eos(const vocab *v); /* -1 if none */
bool vocab_add_bos(const vocab *v);
bool vocab_add_eos(const vocab *v);
/* End of generation: EOS, EOT, EOM, and tokens whose text is <|eot_id|>, <|im_end|>, <|end|>,
 * <|endoftext|>, </s>, <end_of_turn>, <|eom_id|>, <EOT> or DeepSeek's <｜end▁of▁sentence｜>
 * (such tokens are treated as control tokens). */
bool vocab_is_eog(const vocab *v, int32_t id);
/* The type after load-time fixes (see vocab_is_eog), or -1 for an id out of range. */
int vocab_token_type_of(const vocab *v, int32_t id);
/* The stored text (e.g. "▁the", "<0x0A>"), or NULL for an id out of range. */
const char *vocab_token_text(const vocab *v, int32_t id, size_t *len);

/* Tokenize text[0..len). Returns the number of tokens, writing at most cap of them to out; when
 * the result is > cap, call again with a larger buffer. Returns -1 with err set on failure. */
int vocab_tokenize(const vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                   int32_t *out, int cap, nc_err *err);

/* The bytes of one token: U+2581 becomes a space (SentencePiece), <0xNN> that byte, byte-level
 * stand-ins their bytes (BPE); control and unknown tokens are empty unless special. Returns the length, writing nothing when it is > cap; -1 for an id
 * out of range. */
int vocab_token_piece(const vocab *v, int32_t id, bool special, char *buf, int cap);

/* The bytes of a whole sequence, as llama.cpp's llama_detokenize(remove_special = false,
 * unparse_special = special): with add_space_prefix, the first piece loses one leading space.
 * No UTF-8 repair (see vocab_stream). Returns the length; when it is > cap only a prefix was
 * written. -1 for an id out of range. */
int vocab_detokenize(const vocab *v, const int32_t *ids, int n, bool special, char *out, int cap);

/* Streaming detokeniser: text comes out only once it ends on a complete UTF-8 character;
 * invalid sequences become U+FFFD (one per maximal ill-formed subpart) as soon as they can no
 * longer complete. The fields are private. */
typedef struct vocab_stream {
    const vocab *v;
    bool special;     /* render control and unknown tokens as their text */
    bool strip_space; /* drop one leading space from the next piece */
    uint8_t held[4];  /* the bytes of a character still incomplete */
    uint8_t n_held, need;
} vocab_stream;

/* Starts a stream for a continuation: every space is kept and control tokens are hidden. */
void vocab_stream_init(vocab_stream *s, const vocab *v);
void vocab_stream_set_special(vocab_stream *s, bool special);
/* The ids start a sequence: drop the first piece's leading space as vocab_detokenize does. */
void vocab_stream_set_from_start(vocab_stream *s, bool from_start);
/* Bytes written to out. When the text does not fit, returns the size needed (> cap), writes
 * nothing and keeps the token: call again with a larger buffer. -1 for an id out of range. */
int vocab_stream_push(vocab_stream *s, int32_t id, char *out, int cap);
/* Ends the stream: an incomplete character becomes U+FFFD. Same return convention. */
int vocab_stream_flush(vocab_stream *s, char *out, int cap);

#endif
