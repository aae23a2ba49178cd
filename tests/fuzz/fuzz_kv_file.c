/* libFuzzer harness for saved KV cache files (src/kv/kv_file_format.c): any bytes are either
 * refused with a message that starts with the file's name, holding nothing, or give a view that
 * keeps the parser's promises (sizes that add up to the input's, tokens and increasing positions,
 * no more exact cells than cells, rows inside the input, finite elements); a parsed file is then checked against identities
 * that match it or differ from it in one field. A mutated file almost never keeps its checksum,
 * so every input is also parsed with its last 8 bytes replaced by the right checksum: what lies
 * behind the checksum is fuzzed too. libFuzzer hands over an exactly-sized heap buffer (and the
 * resealed copy is one as well), so AddressSanitizer catches any read past its end. Like the other harnesses, it
 * includes the source it exercises (it depends only on src/common.c and the ggml type table). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_file_format.c"

static volatile uint64_t sink; /* keeps the reads from being optimised away */

static void check(bool ok) {
    if (!ok) __builtin_trap();
}

static void check_ids(const kv_file_view *v) {
    nc_err err;
    kv_file_id want = v->id;
    bool in_vocab = true;
    for (int32_t c = 0; c < v->n_cells; c++) in_vocab = in_vocab && v->tokens[c] < 1000;
    check((kv_file_check(v, &want, 1000, "fuzz.kv", &err) == 0) == in_vocab);
    kv_file_id other = want;
    other.fingerprint ^= 1;
    check(kv_file_check(v, &other, 1000, "fuzz.kv", &err) == -1 && !strncmp(err.msg, "fuzz.kv: ", 9));
    other = want;
    other.type_k = want.type_k == GGML_TYPE_F16 ? GGML_TYPE_F32 : GGML_TYPE_F16;
    check(kv_file_check(v, &other, 1000, "fuzz.kv", &err) == -1);
    other = want;
    other.type_v = want.type_v == GGML_TYPE_Q8_0 ? GGML_TYPE_Q4_0 : GGML_TYPE_Q8_0;
    check(kv_file_check(v, &other, 1000, "fuzz.kv", &err) == -1);
    other = want;
    other.n_layer++;
    check(kv_file_check(v, &other, 1000, "fuzz.kv", &err) == -1);
}

static void parse_one(const uint8_t *data, size_t size) {
    kv_file_view v;
    nc_err err;
    if (kv_file_parse(&v, data, size, "fuzz.kv", &err) != 0) {
        check(!v.tokens && !v.pos && !strncmp(err.msg, "fuzz.kv: ", 9));
        return;
    }
    check(v.n_cells >= 1 && v.n_cells <= KV_FILE_MAX_CELLS && v.n_exact >= 0 && v.n_exact <= v.n_cells &&
          v.k_row_bytes == kv_file_row_bytes(v.id.type_k, v.id.kv_dim) && v.k_row_bytes > 0 &&
          v.v_row_bytes == kv_file_row_bytes(v.id.type_v, v.id.kv_dim) && v.v_row_bytes > 0);
    check(v.id.arch[sizeof v.id.arch - 1] == 0 && v.id.name[sizeof v.id.name - 1] == 0);
    size_t rows = (size_t)v.id.n_layer * (size_t)v.n_cells * (v.k_row_bytes + v.v_row_bytes);
    check(v.rows == data + KV_FILE_HEADER + 8 * (size_t)v.n_cells && v.rows + rows + 8 == data + size);
    for (int32_t c = 0; c < v.n_cells; c++)
        check(v.tokens[c] >= 0 && v.pos[c] >= 0 && (c == 0 || v.pos[c] > v.pos[c - 1]));
    sink += v.rows[0] + v.rows[rows - 1];
    check_ids(&v);
    kv_file_view_free(&v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse_one(data, size);
    if (size < KV_FILE_HEADER + 8) return 0;
    uint8_t *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data, size);
    nc_hasher h;
    nc_hash_init(&h);
    nc_hash_update(&h, copy, size - 8);
    put_u64(copy + size - 8, nc_hash_final(&h));
    parse_one(copy, size);
    free(copy);
    return 0;
}
