/* libFuzzer harness for SentencePiece tokenizer.model files: the protobuf reader
 * (vocab/spm_proto.c) on the raw input, every piece's bytes read; then, when it parses,
 * SentencePiece's normalizer built from its normalizer_spec (vocab/spm_norm.c: a hostile
 * charsmap trie) applied to a few texts. libFuzzer hands over an exactly-sized heap buffer, so
 * AddressSanitizer catches any read past its end. Like the other harnesses, it includes the
 * sources it exercises (they depend only on src/common.c). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vocab/spm_norm.c"
#include "vocab/spm_proto.c"

static volatile uint64_t sink; /* keeps the reads from being optimised away */

static void walk_norm(const spm_proto *m) {
    static const char *const texts[] = {"Hello world", "  a  b\n\tc  ", "\xe2\x96\x81x <s> </s> <unk>",
                                        "\xff\xfe\xc3", "AB ab \xef\xbc\xa1 \xe2\x91\xa0", ""};
    spm_norm *nm;
    nc_err err;
    if (spm_norm_new(&nm, m, "fuzz.model", &err) != 0) {
        if (nm != NULL || strncmp(err.msg, "fuzz.model: ", 12) != 0) __builtin_trap();
        return;
    }
    if (!nm) return; /* nothing beyond escaping spaces */
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        uint32_t n;
        char *out = spm_norm_apply(nm, texts[i], strlen(texts[i]), i & 1, &n);
        if (!out || out[n] != 0) __builtin_trap();
        sink += n + (uint8_t)out[0];
        free(out);
    }
    spm_norm_free(nm);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    spm_proto m;
    nc_err err;
    if (spm_proto_parse(&m, data, size, "fuzz.model", &err) != 0) {
        if (m.pieces || strncmp(err.msg, "fuzz.model: ", 12) != 0) __builtin_trap();
        return 0;
    }
    for (uint32_t i = 0; i < m.n_pieces; i++) {
        const spm_piece *p = &m.pieces[i];
        if (p->type < SPM_NORMAL || p->type > SPM_BYTE || p->offset >= size) __builtin_trap();
        if (p->text.len &&
            ((const uint8_t *)p->text.data < data || (const uint8_t *)p->text.data + p->text.len > data + size))
            __builtin_trap();
        if (p->text.len) sink += (uint8_t)p->text.data[0] + (uint8_t)p->text.data[p->text.len - 1];
    }
    sink += m.unk_piece.len + m.normalizer_name.len + m.charsmap.len;
    walk_norm(&m);
    spm_proto_free(&m);
    return 0;
}
