/* SentencePiece model files (tokenizer.model): a protobuf ModelProto, read by a small wire-format
 * reader of our own (sentencepiece_model.proto, proto2). Depends only on common.c, so fuzzers and
 * tools can link it alone.
 *
 * Read: ModelProto.pieces (piece, score, type), trainer_spec (model_type, vocab_size,
 * byte_fallback, unk/bos/eos/pad ids and pieces, treat_whitespace_as_suffix, split_digits, ...)
 * and normalizer_spec (name, precompiled_charsmap, add_dummy_prefix,
 * remove_extra_whitespaces, escape_whitespaces); self_test_data, denormalizer_spec, unknown
 * fields and extensions are skipped. Unset fields keep the .proto's defaults; a message field
 * given twice is merged and a scalar given twice keeps the last value, as protobuf does.
 *
 * The reader trusts nothing: every length against the bytes left in its message, varints of at
 * most 10 bytes that fit 64 bits, field numbers 1..2^29-1, wire types 0, 1, 2, 5 (groups are
 * refused), each known field with its declared wire type, piece types 1..6, scores not NaN, and
 * nesting bounded by the schema (sub-messages are only entered at known fields, two levels deep).
 * Failures are errors naming the file, the field and its byte offset. Semantic checks (empty or
 * duplicate pieces, the unknown piece, byte pieces) are the vocabulary builder's (spm_model.c). */
#ifndef NC_SPM_PROTO_H
#define NC_SPM_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* ModelProto.SentencePiece.Type */
enum { SPM_NORMAL = 1, SPM_UNKNOWN = 2, SPM_CONTROL = 3, SPM_USER_DEFINED = 4, SPM_UNUSED = 5, SPM_BYTE = 6 };
/* TrainerSpec.ModelType */
enum { SPM_MODEL_UNIGRAM = 1, SPM_MODEL_BPE = 2, SPM_MODEL_WORD = 3, SPM_MODEL_CHAR = 4 };

/* Bytes inside the caller's buffer: not NUL-terminated, any bytes. */
typedef struct spm_bytes {
    const char *data;
    uint32_t len;
} spm_bytes;

typedef struct spm_piece {
    spm_bytes text;
    float score;     /* default 0 */
    uint8_t type;    /* SPM_NORMAL... (default NORMAL) */
    uint64_t offset; /* file offset of the piece's message (its tag) */
} spm_piece;

typedef struct spm_proto {
    spm_piece *pieces;
    uint32_t n_pieces;

    bool has_trainer_spec;
    int32_t model_type;       /* default UNIGRAM */
    int32_t vocab_size;       /* the trainer's target, default 8000 (informative) */
    bool byte_fallback;       /* default false */
    bool treat_whitespace_as_suffix, split_digits, allow_whitespace_only_pieces; /* default false */
    bool split_by_whitespace; /* default true */
    int32_t unk_id, bos_id, eos_id, pad_id; /* default 0, 1, 2, -1 (-1: none) */
    spm_bytes unk_piece, bos_piece, eos_piece, pad_piece; /* default "<unk>", "<s>", "</s>", "<pad>" */

    bool has_normalizer_spec;
    spm_bytes normalizer_name;
    spm_bytes charsmap;       /* precompiled_charsmap (spm_norm.c) */
    bool add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces; /* default true */
} spm_proto;

/* Parse data[0..size) (the caller keeps it alive: pieces point into it). On failure *m holds
 * nothing to free and err names the problem ("name: piece #12 (offset 345): ..."). */
int spm_proto_parse(spm_proto *m, const void *data, size_t size, const char *name, nc_err *err);
void spm_proto_free(spm_proto *m);

#endif
