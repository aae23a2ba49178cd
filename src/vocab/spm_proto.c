/* The protobuf wire format, as much as sentencepiece_model.proto needs: a message is a sequence
 * of (tag, value) pairs, tag = field number << 3 | wire type; wire types 0 (varint), 1 (8 bytes),
 * 2 (a varint length, then that many bytes: strings, bytes, sub-messages) and 5 (4 bytes).
 * Little-endian throughout. */
#include "vocab/spm_proto.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the protobuf reader assumes a little-endian host");

#define MAX_FILE_BYTES (1ull << 31)
#define MAX_PIECES (1u << 24)
#define MAX_FIELD ((1u << 29) - 1)

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_SGROUP = 3, WIRE_EGROUP = 4, WIRE_I32 = 5 };

typedef unsigned long long ull;

/* A cursor over one message, [pos, end) of the buffer, and what it is for messages. */
typedef struct reader {
    const uint8_t *base;
    uint64_t pos, end;
    const char *file;
    nc_err *err;
    char ctx[64]; /* "piece #12 (offset 345)" */
} reader;

typedef struct field {
    uint32_t num, wire;
    uint64_t at;    /* offset of the tag */
    uint64_t v;     /* varint, I64 and I32 values */
    spm_bytes b;    /* LEN values */
    uint64_t b_at;  /* offset of the LEN value's first byte */
} field;

static int fail(const reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(const reader *r, const char *fmt, ...) {
    char msg[NC_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nc_fail(r->err, "%s: %s: %s", r->file, r->ctx, msg);
}

static reader sub_reader(const reader *r, const field *f, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static reader sub_reader(const reader *r, const field *f, const char *fmt, ...) {
    reader s = {r->base, f->b_at, f->b_at + f->b.len, r->file, r->err, {0}};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s.ctx, sizeof s.ctx, fmt, ap);
    va_end(ap);
    return s;
}

/* ---- wire format --------------------------------------------------------------------------- */

static int read_varint(reader *r, uint64_t *out, const char *what) {
    uint64_t v = 0, at = r->pos;
    for (int i = 0; i < 10; i++) {
        if (r->pos >= r->end)
            return fail(r, "%s at offset %llu: truncated varint (the message ends at %llu)", what, (ull)at,
                        (ull)r->end);
        uint8_t b = r->base[r->pos++];
        if (i == 9 && b > 1) return fail(r, "%s at offset %llu: varint does not fit 64 bits", what, (ull)at);
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return fail(r, "%s at offset %llu: varint longer than 10 bytes", what, (ull)at); /* not reached */
}

static int need(const reader *r, uint64_t n, const field *f) {
    if (n <= r->end - r->pos) return 0;
    return fail(r, "field %u at offset %llu: its %llu-byte value runs past the end of the message (%llu bytes left)",
                f->num, (ull)f->at, (ull)n, (ull)(r->end - r->pos));
}

/* The next field of the message; the value is read (or, for LEN, delimited) whatever the field. */
static int next_field(reader *r, field *f) {
    uint64_t tag;
    f->at = r->pos;
    if (read_varint(r, &tag, "tag")) return -1;
    f->num = (uint32_t)(tag >> 3);
    f->wire = (uint32_t)(tag & 7);
    if ((tag >> 3) == 0 || (tag >> 3) > MAX_FIELD)
        return fail(r, "tag at offset %llu: field number %llu is outside 1..%u", (ull)f->at, (ull)(tag >> 3),
                    MAX_FIELD);
    switch (f->wire) {
    case WIRE_VARINT: return read_varint(r, &f->v, "value");
    case WIRE_I64:
    case WIRE_I32: {
        uint64_t n = f->wire == WIRE_I64 ? 8 : 4;
        if (need(r, n, f)) return -1;
        f->v = 0;
        memcpy(&f->v, r->base + r->pos, n);
        r->pos += n;
        return 0;
    }
    case WIRE_LEN: {
        uint64_t len;
        if (read_varint(r, &len, "length")) return -1;
        if (need(r, len, f)) return -1;
        f->b_at = r->pos;
        f->b = (spm_bytes){(const char *)r->base + r->pos, (uint32_t)len}; /* < MAX_FILE_BYTES */
        r->pos += len;
        return 0;
    }
    case WIRE_SGROUP:
    case WIRE_EGROUP:
        return fail(r, "field %u at offset %llu: groups (wire type %u) are not supported", f->num, (ull)f->at, f->wire);
    default: return fail(r, "field %u at offset %llu: invalid wire type %u", f->num, (ull)f->at, f->wire);
    }
}

static const char *wire_name(uint32_t w) {
    return w == WIRE_VARINT ? "varint" : w == WIRE_I64 ? "fixed64" : w == WIRE_LEN ? "length-delimited" : "fixed32";
}

static int expect(const reader *r, const field *f, uint32_t wire, const char *name) {
    if (f->wire == wire) return 0;
    return fail(r, "%s (field %u) at offset %llu has wire type %u (%s), expected %u (%s)", name, f->num, (ull)f->at,
                f->wire, wire_name(f->wire), wire, wire_name(wire));
}

static int get_bool(const reader *r, const field *f, const char *name, bool *out) {
    if (expect(r, f, WIRE_VARINT, name)) return -1;
    *out = f->v != 0;
    return 0;
}

/* int32 fields are varints of the sign-extended value; protobuf keeps the low 32 bits. */
static int get_int32(const reader *r, const field *f, const char *name, int32_t *out) {
    if (expect(r, f, WIRE_VARINT, name)) return -1;
    *out = (int32_t)(uint32_t)f->v;
    return 0;
}

static int get_bytes(const reader *r, const field *f, const char *name, spm_bytes *out) {
    if (expect(r, f, WIRE_LEN, name)) return -1;
    *out = f->b;
    return 0;
}

/* ---- messages --------------------------------------------------------------------------------- */

static int read_piece(reader *r, spm_piece *p) {
    field f;
    *p = (spm_piece){.type = SPM_NORMAL, .offset = r->pos};
    while (r->pos < r->end) {
        if (next_field(r, &f)) return -1;
        if (f.num == 1) {
            if (get_bytes(r, &f, "piece", &p->text)) return -1;
        } else if (f.num == 2) {
            if (expect(r, &f, WIRE_I32, "score")) return -1;
            uint32_t raw = (uint32_t)f.v;
            memcpy(&p->score, &raw, 4);
            if (isnan(p->score)) return fail(r, "score (field 2) at offset %llu is NaN", (ull)f.at);
        } else if (f.num == 3) {
            if (expect(r, &f, WIRE_VARINT, "type")) return -1;
            if (f.v < SPM_NORMAL || f.v > SPM_BYTE)
                return fail(r, "type (field 3) at offset %llu is %llu, not a piece type (1..6)", (ull)f.at, (ull)f.v);
            p->type = (uint8_t)f.v;
        }
    }
    return 0;
}

static int read_trainer_spec(reader *r, spm_proto *m) {
    field f;
    m->has_trainer_spec = true;
    while (r->pos < r->end) {
        if (next_field(r, &f)) return -1;
        int rc = 0;
        switch (f.num) {
        case 3:
            rc = get_int32(r, &f, "model_type", &m->model_type);
            if (rc == 0 && (m->model_type < SPM_MODEL_UNIGRAM || m->model_type > SPM_MODEL_CHAR))
                rc = fail(r, "model_type (field 3) at offset %llu is %d, not a model type (1..4)", (ull)f.at,
                          m->model_type);
            break;
        case 4: rc = get_int32(r, &f, "vocab_size", &m->vocab_size); break;
        case 22: rc = get_bool(r, &f, "split_by_whitespace", &m->split_by_whitespace); break;
        case 24: rc = get_bool(r, &f, "treat_whitespace_as_suffix", &m->treat_whitespace_as_suffix); break;
        case 25: rc = get_bool(r, &f, "split_digits", &m->split_digits); break;
        case 26: rc = get_bool(r, &f, "allow_whitespace_only_pieces", &m->allow_whitespace_only_pieces); break;
        case 35: rc = get_bool(r, &f, "byte_fallback", &m->byte_fallback); break;
        case 40: rc = get_int32(r, &f, "unk_id", &m->unk_id); break;
        case 41: rc = get_int32(r, &f, "bos_id", &m->bos_id); break;
        case 42: rc = get_int32(r, &f, "eos_id", &m->eos_id); break;
        case 43: rc = get_int32(r, &f, "pad_id", &m->pad_id); break;
        case 45: rc = get_bytes(r, &f, "unk_piece", &m->unk_piece); break;
        case 46: rc = get_bytes(r, &f, "bos_piece", &m->bos_piece); break;
        case 47: rc = get_bytes(r, &f, "eos_piece", &m->eos_piece); break;
        case 48: rc = get_bytes(r, &f, "pad_piece", &m->pad_piece); break;
        default: break; /* training options: nothing a tokenizer needs */
        }
        if (rc) return -1;
    }
    return 0;
}

static int read_normalizer_spec(reader *r, spm_proto *m) {
    field f;
    m->has_normalizer_spec = true;
    while (r->pos < r->end) {
        if (next_field(r, &f)) return -1;
        int rc = 0;
        switch (f.num) {
        case 1: rc = get_bytes(r, &f, "name", &m->normalizer_name); break;
        case 2: rc = get_bytes(r, &f, "precompiled_charsmap", &m->charsmap); break;
        case 3: rc = get_bool(r, &f, "add_dummy_prefix", &m->add_dummy_prefix); break;
        case 4: rc = get_bool(r, &f, "remove_extra_whitespaces", &m->remove_extra_whitespaces); break;
        case 5: rc = get_bool(r, &f, "escape_whitespaces", &m->escape_whitespaces); break;
        default: break;
        }
        if (rc) return -1;
    }
    return 0;
}

static int add_piece(reader *r, spm_proto *m, const field *f, uint32_t *cap) {
    if (expect(r, f, WIRE_LEN, "pieces")) return -1;
    if (m->n_pieces == *cap) {
        if (*cap >= MAX_PIECES) return fail(r, "more than %u pieces (at offset %llu)", MAX_PIECES, (ull)f->at);
        uint32_t n = *cap ? 2 * *cap : 256;
        spm_piece *p = realloc(m->pieces, n * sizeof *p);
        if (!p) return fail(r, "out of memory for %u pieces", n);
        m->pieces = p;
        *cap = n;
    }
    reader s = sub_reader(r, f, "piece #%u (offset %llu)", m->n_pieces, (ull)f->at);
    if (read_piece(&s, &m->pieces[m->n_pieces])) return -1;
    m->pieces[m->n_pieces++].offset = f->at;
    return 0;
}

static void set_defaults(spm_proto *m) {
    *m = (spm_proto){
        .model_type = SPM_MODEL_UNIGRAM, .vocab_size = 8000, .split_by_whitespace = true,
        .unk_id = 0, .bos_id = 1, .eos_id = 2, .pad_id = -1,
        .unk_piece = {"<unk>", 5}, .bos_piece = {"<s>", 3}, .eos_piece = {"</s>", 4}, .pad_piece = {"<pad>", 5},
        .add_dummy_prefix = true, .remove_extra_whitespaces = true, .escape_whitespaces = true,
    };
}

static int read_model(reader *r, spm_proto *m) {
    field f;
    uint32_t cap = 0;
    while (r->pos < r->end) {
        if (next_field(r, &f)) return -1;
        reader s;
        switch (f.num) {
        case 1:
            if (add_piece(r, m, &f, &cap)) return -1;
            break;
        case 2:
            if (expect(r, &f, WIRE_LEN, "trainer_spec")) return -1;
            s = sub_reader(r, &f, "trainer_spec (offset %llu)", (ull)f.at);
            if (read_trainer_spec(&s, m)) return -1;
            break;
        case 3:
            if (expect(r, &f, WIRE_LEN, "normalizer_spec")) return -1;
            s = sub_reader(r, &f, "normalizer_spec (offset %llu)", (ull)f.at);
            if (read_normalizer_spec(&s, m)) return -1;
            break;
        default: break; /* self_test_data, denormalizer_spec, extensions: skipped */
        }
    }
    return 0;
}

int spm_proto_parse(spm_proto *m, const void *data, size_t size, const char *name, nc_err *err) {
    set_defaults(m);
    reader r = {data, 0, data ? size : 0, name ? name : "<buffer>", err, "model"};
    if (size > MAX_FILE_BYTES) return fail(&r, "%zu bytes, more than the %llu supported", size, MAX_FILE_BYTES);
    if (read_model(&r, m)) {
        spm_proto_free(m);
        return -1;
    }
    return 0;
}

void spm_proto_free(spm_proto *m) {
    free(m->pieces);
    m->pieces = NULL;
    m->n_pieces = 0;
}
