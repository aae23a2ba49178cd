/* libFuzzer harness for saved KV cache files (src/kv/kv_file_format.c): any bytes are either
 * refused with a message that starts with the file's name, holding nothing, or give a view that
 * keeps the parser's promises (a layer table whose widths are whole blocks of their types and
 * make the cell bytes and state the header says; sizes that add up to the input's: header and
 * table, tokens and positions, the rows of each layer with cells, the states, the checksum; tokens
 * and increasing positions, no more exact cells than cells, states absorbing increasing counts of
 * the cells, finite elements); a parsed file is then checked against identities that match it or
 * differ from it in one field. A mutated file almost never keeps its checksum, so every input is
 * also parsed with its last 8 bytes replaced by the right checksum: what lies behind the checksum
 * is fuzzed too. libFuzzer hands over an exactly-sized heap buffer (and the resealed copy is one
 * as well), so AddressSanitizer catches any read past its end. Like the other harnesses, it
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

/* An identity differing from a file's in one layer's entry (`field`: keys, values, state), or in
 * one more layer without cells: refused either way. */
static void check_other_layers(const kv_file_view *v, int field) {
    nc_err err;
    uint32_t n = v->id.n_layer + (field == 3);
    kv_file_layer *layers = calloc(n, sizeof *layers);
    if (!layers) return;
    memcpy(layers, v->layers, v->id.n_layer * sizeof *layers);
    kv_file_layer *L = &layers[v->id.n_layer - 1];
    if (field == 0) L->k_dim = L->k_dim ? 0 : 32;
    if (field == 1) L->v_dim = L->v_dim ? 0 : 32;
    if (field == 2) L->state++;
    kv_file_id other = v->id;
    other.n_layer = n;
    other.layers = layers;
    check(kv_file_check(v, &other, 1000, "fuzz.kv", &err) == -1 && !strncmp(err.msg, "fuzz.kv: ", 9));
    free(layers);
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
    for (int field = 0; field < 4; field++) check_other_layers(v, field);
}

static void parse_one(const uint8_t *data, size_t size) {
    kv_file_view v;
    nc_err err;
    if (kv_file_parse(&v, data, size, "fuzz.kv", &err) != 0) {
        check(!v.tokens && !v.pos && !v.layers && !strncmp(err.msg, "fuzz.kv: ", 9));
        return;
    }
    check(v.n_cells >= 1 && v.n_cells <= KV_FILE_MAX_CELLS && v.n_exact >= 0 && v.n_exact <= v.n_cells &&
          v.n_states >= 0 && v.n_states <= KV_FILE_MAX_STATES && (v.state_floats || !v.n_states));
    for (int32_t k = 0; k < v.n_states; k++)
        check(v.state_pos[k] >= 1 && v.state_pos[k] <= v.n_cells && (k == 0 || v.state_pos[k] > v.state_pos[k - 1]));
    check(v.id.arch[sizeof v.id.arch - 1] == 0 && v.id.name[sizeof v.id.name - 1] == 0);
    check(v.id.n_layer >= 1 && v.id.n_layer <= KV_FILE_MAX_LAYERS && v.id.layers == v.layers);
    /* the layer table: widths of whole blocks, values only beside keys; what it makes */
    size_t cell = 0, state = 0;
    for (uint32_t l = 0; l < v.id.n_layer; l++) {
        const kv_file_layer *L = &v.layers[l];
        uint32_t type_k = L->k_dim && !L->v_dim ? kv_latent_type(v.id.type_k) : v.id.type_k; /* latent rows: theirs */
        size_t kb = kv_file_row_bytes(type_k, L->k_dim), vb = kv_file_row_bytes(v.id.type_v, L->v_dim);
        check((kb > 0) == (L->k_dim > 0) && (vb > 0) == (L->v_dim > 0) && (L->k_dim > 0 || L->v_dim == 0));
        cell += kb + vb;
        state += L->state;
    }
    check(v.cell_bytes == cell && v.cell_bytes == kv_file_cell_bytes(&v.id) && v.state_floats == state);
    /* sizes adding up: the table, tokens and positions, each layer's rows, the states, the checksum */
    const uint8_t *p = data + KV_FILE_HEADER + 12 * (size_t)v.id.n_layer + 8 * (size_t)v.n_cells;
    check(v.rows == p);
    p += (size_t)v.n_cells * v.cell_bytes;
    for (int32_t k = 0; k < v.n_states; k++, p += 4 + 4 * v.state_floats) check(v.states[k] == p + 4);
    check(p + 8 == data + size);
    for (int32_t c = 0; c < v.n_cells; c++)
        check(v.tokens[c] >= 0 && v.pos[c] >= 0 && (c == 0 || v.pos[c] > v.pos[c - 1]));
    for (int32_t k = 0; k < v.n_states; k++)
        for (size_t i = 0; i < v.state_floats; i++) check(!non_finite(v.states[k] + 4 * i, 4));
    if (v.cell_bytes) sink += v.rows[0] + v.rows[(size_t)v.n_cells * v.cell_bytes - 1];
    if (v.n_states) sink += v.states[0][0] + v.states[v.n_states - 1][4 * v.state_floats - 1];
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
