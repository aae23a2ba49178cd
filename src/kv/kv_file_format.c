/* The KV cache file format (kv_file.h): the header, and the parser that checks a whole file. It
 * depends on nothing but common.c and the ggml type table, so the fuzz harness compiles it alone. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "format/ggml_types.h"
#include "kv/kv_file.h"

static uint32_t get_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }
static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i);
}
static void put_u64(uint8_t *p, uint64_t v) {
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

/* The types a cache keeps: elements per block and bytes per block (GGML's formats). */
static bool type_shape(uint32_t type, uint32_t *block, uint32_t *bytes) {
    switch (type) {
    case GGML_TYPE_F32: *block = 1, *bytes = 4; return true;
    case GGML_TYPE_F16: *block = 1, *bytes = 2; return true;
    case GGML_TYPE_Q8_0: *block = 32, *bytes = 34; return true;
    case GGML_TYPE_Q4_0: *block = 32, *bytes = 18; return true;
    default: return false;
    }
}

size_t kv_file_row_bytes(uint32_t type, uint32_t n) {
    uint32_t block, bytes;
    if (!type_shape(type, &block, &bytes) || n % block) return 0;
    return (size_t)n / block * bytes;
}

/* A layer's key type: latent rows (keys holding the values) have theirs (kv_latent_type). */
static uint32_t layer_type_k(const kv_file_id *id, const kv_file_layer *L) {
    return L->k_dim && !L->v_dim ? kv_latent_type(id->type_k) : id->type_k;
}

size_t kv_file_cell_bytes(const kv_file_id *id) {
    size_t n = 0;
    for (uint32_t l = 0; l < id->n_layer; l++)
        n += kv_file_row_bytes(layer_type_k(id, &id->layers[l]), id->layers[l].k_dim) +
             kv_file_row_bytes(id->type_v, id->layers[l].v_dim);
    return n;
}

static size_t state_floats(const kv_file_id *id) {
    size_t n = 0;
    for (uint32_t l = 0; l < id->n_layer; l++) n += id->layers[l].state;
    return n;
}

void kv_file_header(uint8_t *out, const kv_file_id *id, uint32_t n_cells, uint32_t n_exact, uint32_t n_states) {
    memset(out, 0, KV_FILE_HEADER);
    memcpy(out, KV_FILE_MAGIC, 4);
    put_u32(out + 4, KV_FILE_VERSION);
    put_u64(out + 8, id->fingerprint);
    memcpy(out + 16, id->arch, strnlen(id->arch, sizeof id->arch - 1));
    memcpy(out + 48, id->name, strnlen(id->name, sizeof id->name - 1));
    put_u32(out + 112, id->n_layer);
    put_u32(out + 116, n_states);
    put_u32(out + 120, id->type_k);
    put_u32(out + 124, id->type_v);
    put_u32(out + 128, (uint32_t)kv_file_cell_bytes(id));
    put_u32(out + 132, (uint32_t)state_floats(id));
    put_u32(out + 136, n_cells);
    put_u32(out + 140, n_exact);
    for (uint32_t l = 0; l < id->n_layer; l++) {
        put_u32(out + KV_FILE_HEADER + 12 * l, id->layers[l].k_dim);
        put_u32(out + KV_FILE_HEADER + 12 * l + 4, id->layers[l].v_dim);
        put_u32(out + KV_FILE_HEADER + 12 * l + 8, id->layers[l].state);
    }
}

/* A NUL-terminated text field of the header (what follows the NUL is ignored). */
static int get_text(char *out, size_t cap, const uint8_t *p, const char *field, size_t off, const char *name,
                    nc_err *err) {
    const uint8_t *nul = memchr(p, 0, cap);
    if (!nul) return nc_fail(err, "%s: the %s field (offset %zu) is not NUL-terminated", name, field, off);
    memset(out, 0, cap);
    memcpy(out, p, (size_t)(nul - p));
    return 0;
}

static int parse_header(kv_file_view *v, const uint8_t *data, size_t size, const char *name, nc_err *err) {
    if (size == 0) return nc_fail(err, "%s: the file is empty, not a nucleus KV cache file", name);
    if (size < 4 || memcmp(data, KV_FILE_MAGIC, 4)) {
        char seen[9] = "";
        for (size_t i = 0; i < 4 && i < size; i++) snprintf(seen + 2 * i, 3, "%02x", data[i]);
        return nc_fail(err, "%s: not a nucleus KV cache file (it starts with the bytes %s, not \"%s\")", name, seen,
                       KV_FILE_MAGIC);
    }
    if (size < KV_FILE_HEADER + 8)
        return nc_fail(err, "%s: %zu bytes, too short for a KV cache file (its header alone takes %d)", name, size,
                       KV_FILE_HEADER + 8);
    uint32_t version = get_u32(data + 4);
    if (version != KV_FILE_VERSION)
        return nc_fail(err, "%s: KV cache file version %" PRIu32 " (offset 4) is not supported; this build reads version %u",
                       name, version, KV_FILE_VERSION);
    kv_file_id *id = &v->id;
    id->fingerprint = get_u64(data + 8);
    if (get_text(id->arch, sizeof id->arch, data + 16, "architecture", 16, name, err) ||
        get_text(id->name, sizeof id->name, data + 48, "model name", 48, name, err))
        return -1;
    id->n_layer = get_u32(data + 112);
    id->type_k = get_u32(data + 120);
    id->type_v = get_u32(data + 124);
    uint32_t n_states = get_u32(data + 116), cell_bytes = get_u32(data + 128), n_state = get_u32(data + 132);
    uint32_t n_cells = get_u32(data + 136), n_exact = get_u32(data + 140);
    if (id->n_layer < 1 || id->n_layer > KV_FILE_MAX_LAYERS)
        return nc_fail(err, "%s: n_layer %" PRIu32 " (offset 112) is outside 1..%d", name, id->n_layer, KV_FILE_MAX_LAYERS);
    for (int kind = 0; kind < 2; kind++) { /* keys, then values */
        uint32_t type = kind ? id->type_v : id->type_k, block, bytes;
        char tb[24];
        if (!type_shape(type, &block, &bytes))
            return nc_fail(err, "%s: %s type %s (offset %d) is not one a KV cache keeps (F16, F32, Q8_0, Q4_0)", name,
                           kind ? "value" : "key", ggml_type_name(type, tb), 120 + 4 * kind);
    }
    if (n_cells < 1 || n_cells > KV_FILE_MAX_CELLS)
        return nc_fail(err, "%s: n_cells %" PRIu32 " (offset 136) is outside 1..%d", name, n_cells, KV_FILE_MAX_CELLS);
    if (n_exact > n_cells)
        return nc_fail(err, "%s: n_exact %" PRIu32 " (offset 140) is more than n_cells %" PRIu32, name, n_exact, n_cells);
    if (n_states > KV_FILE_MAX_STATES)
        return nc_fail(err, "%s: n_states %" PRIu32 " (offset 116) is more than %d", name, n_states, KV_FILE_MAX_STATES);
    size_t table = KV_FILE_HEADER + 12 * (size_t)id->n_layer;
    if (size < table + 8)
        return nc_fail(err, "%s: %zu bytes, too short for the table of its %" PRIu32 " layers", name, size, id->n_layer);
    if (!(v->layers = malloc(id->n_layer * sizeof *v->layers))) return nc_fail(err, "%s: out of memory", name);
    id->layers = v->layers;
    for (uint32_t l = 0; l < id->n_layer; l++) {
        size_t at = KV_FILE_HEADER + 12 * (size_t)l;
        kv_file_layer *L = &v->layers[l];
        *L = (kv_file_layer){get_u32(data + at), get_u32(data + at + 4), get_u32(data + at + 8)};
        if (L->k_dim > (1u << 20) || L->v_dim > (1u << 20) || L->state > (1u << 28) || (!L->k_dim && L->v_dim))
            return nc_fail(err, "%s: layer %" PRIu32 " (offset %zu): key width %" PRIu32 ", value width %" PRIu32
                                ", state %" PRIu32 ": out of range", name, l, at, L->k_dim, L->v_dim, L->state);
        for (int kind = 0; kind < 2; kind++) {
            uint32_t type = kind ? id->type_v : layer_type_k(id, L), n = kind ? L->v_dim : L->k_dim, block = 1, bytes;
            char tb[24];
            type_shape(type, &block, &bytes);
            if (n % block)
                return nc_fail(err, "%s: layer %" PRIu32 " (offset %zu): %s width %" PRIu32 " is not whole blocks of %" PRIu32
                                    " %s elements", name, l, at + 4 * kind, kind ? "value" : "key", n, block,
                               ggml_type_name(type, tb));
        }
    }
    if (cell_bytes != kv_file_cell_bytes(id))
        return nc_fail(err, "%s: cell_bytes %" PRIu32 " (offset 128) is not what the layer table makes (%zu)", name,
                       cell_bytes, kv_file_cell_bytes(id));
    if (n_state != state_floats(id))
        return nc_fail(err, "%s: state_floats %" PRIu32 " (offset 132) is not what the layer table makes (%zu)", name,
                       n_state, state_floats(id));
    v->n_cells = (int32_t)n_cells;
    v->n_exact = (int32_t)n_exact;
    if (n_states && !n_state)
        return nc_fail(err, "%s: n_states %" PRIu32 " (offset 116) for a cache without recurrent state", name, n_states);
    v->cell_bytes = cell_bytes;
    v->state_floats = n_state;
    v->n_states = (int32_t)n_states;
    /* at most 2^24 cells x 2^32 bytes and 4 x 2^40 bytes of state: no overflow in 64 bits */
    uint64_t want = table + 8ull * n_cells + (uint64_t)n_cells * cell_bytes + n_states * (4 + 4ull * n_state) + 8;
    if (want != size)
        return nc_fail(err, "%s: %zu bytes, but its header (%" PRIu32 " cells of %" PRIu32 " bytes in %" PRIu32
                            " layers, %" PRIu32 " states of %" PRIu32 " floats) makes %" PRIu64 ": the file is %s",
                       name, size, n_cells, cell_bytes, id->n_layer, n_states, n_state, want,
                       size < want ? "truncated" : "longer than that");
    return 0;
}

/* Whether an F16 or F32 number's exponent bits are all ones (infinity or NaN). */
static bool non_finite(const uint8_t *p, uint32_t bytes) {
    return bytes == 2 ? (p[1] & 0x7c) == 0x7c : ((p[3] & 0x7f) == 0x7f && (p[2] & 0x80));
}

/* Every number of the rows and the state is finite: each element of a float row, each block's
 * F16 scale (its first two bytes) of a quantised one. */
static int check_rows(const kv_file_view *v, const uint8_t *data, const char *name, nc_err *err) {
    const uint8_t *p = v->rows;
    for (uint32_t l = 0; l < v->id.n_layer; l++)
        for (int32_t c = 0; v->layers[l].k_dim && c < v->n_cells; c++)
            for (int kind = 0; kind < 2; kind++) {
                uint32_t type = kind ? v->id.type_v : layer_type_k(&v->id, &v->layers[l]), block = 1, bytes = 1; /* checked */
                size_t n = kv_file_row_bytes(type, kind ? v->layers[l].v_dim : v->layers[l].k_dim);
                type_shape(type, &block, &bytes);
                for (size_t i = 0; i < n; i += bytes)
                    if (non_finite(p + i, block > 1 ? 2 : bytes))
                        return nc_fail(err, "%s: layer %" PRIu32 ", cell %d: %s %zu of the %s row (offset %zu) is not finite",
                                       name, l, c, block > 1 ? "the scale of block" : "element", i / bytes,
                                       kind ? "value" : "key", (size_t)(p + i - data));
                p += n;
            }
    for (int32_t k = 0; k < v->n_states; k++)
        for (size_t i = 0; i < v->state_floats; i++)
            if (non_finite(v->states[k] + 4 * i, 4))
                return nc_fail(err, "%s: element %zu of recurrent state %d (offset %zu) is not finite", name, i, k,
                               (size_t)(v->states[k] + 4 * i - data));
    return 0;
}

/* The checksum of a file of at least a header: whether it matches, and both values. */
static bool checksum_ok(const uint8_t *data, size_t size, uint64_t *stored, uint64_t *computed) {
    if (size < KV_FILE_HEADER + 8) return false;
    nc_hasher h;
    nc_hash_init(&h);
    nc_hash_update(&h, data, size - 8);
    *stored = get_u64(data + size - 8);
    *computed = nc_hash_final(&h);
    return *stored == *computed;
}

int kv_file_parse(kv_file_view *v, const uint8_t *data, size_t size, const char *name, nc_err *err) {
    memset(v, 0, sizeof *v);
    uint64_t stored = 0, computed = 0;
    if (parse_header(v, data, size, name, err)) {
        kv_file_view_free(v);
        /* a field out of range in a file of this version whose checksum fails too: say it is damaged */
        if (err && size >= KV_FILE_HEADER + 8 && !memcmp(data, KV_FILE_MAGIC, 4) && get_u32(data + 4) == KV_FILE_VERSION &&
            !checksum_ok(data, size, &stored, &computed)) {
            size_t n = strlen(err->msg);
            snprintf(err->msg + n, sizeof err->msg - n, "; the checksum does not match either: the file is corrupt");
        }
        return -1;
    }
    if (!checksum_ok(data, size, &stored, &computed)) {
        kv_file_view_free(v);
        return nc_fail(err, "%s: checksum mismatch (stored %016" PRIx64 " at offset %zu, computed %016" PRIx64 "): the file is corrupt",
                       name, stored, size - 8, computed);
    }
    size_t n = (size_t)v->n_cells;
    v->tokens = malloc(n * sizeof *v->tokens);
    v->pos = malloc(n * sizeof *v->pos);
    if (!v->tokens || !v->pos) {
        kv_file_view_free(v);
        return nc_fail(err, "%s: out of memory for %zu tokens", name, n);
    }
    const uint8_t *tok = data + KV_FILE_HEADER + 12 * (size_t)v->id.n_layer, *pos = tok + 4 * n;
    for (size_t c = 0; c < n; c++) {
        v->tokens[c] = (int32_t)get_u32(tok + 4 * c);
        v->pos[c] = (int32_t)get_u32(pos + 4 * c);
        if (v->tokens[c] < 0) {
            nc_fail(err, "%s: the token of cell %zu (offset %zu) is %d", name, c, (size_t)(tok + 4 * c - data), v->tokens[c]);
            goto fail;
        }
        if (v->pos[c] < 0 || (c > 0 && v->pos[c] <= v->pos[c - 1])) {
            nc_fail(err, "%s: the position of cell %zu (offset %zu) is %d, %s", name, c, (size_t)(pos + 4 * c - data),
                    v->pos[c], v->pos[c] < 0 ? "negative" : "not after the previous cell's");
            goto fail;
        }
    }
    v->rows = pos + 4 * n;
    const uint8_t *st = v->rows + n * v->cell_bytes;
    for (int32_t k = 0; k < v->n_states; k++, st += 4 + 4 * v->state_floats) {
        v->state_pos[k] = (int32_t)get_u32(st);
        v->states[k] = st + 4;
        if (v->state_pos[k] < 1 || v->state_pos[k] > v->n_cells || (k > 0 && v->state_pos[k] <= v->state_pos[k - 1])) {
            nc_fail(err, "%s: the position of recurrent state %d (offset %zu) is %d, %s", name, k, (size_t)(st - data),
                    v->state_pos[k], k > 0 && v->state_pos[k] <= v->state_pos[k - 1] ? "not after the previous state's"
                                                                                     : "outside 1..n_cells");
            goto fail;
        }
    }
    if (check_rows(v, data, name, err)) goto fail;
    return 0;
fail:
    kv_file_view_free(v);
    return -1;
}

void kv_file_view_free(kv_file_view *v) {
    free(v->layers);
    free(v->tokens);
    free(v->pos);
    memset(v, 0, sizeof *v);
}

/* Whether two identities' layer tables agree. */
static bool same_layers(const kv_file_id *a, const kv_file_id *b) {
    if (a->n_layer != b->n_layer) return false;
    for (uint32_t l = 0; l < a->n_layer; l++)
        if (a->layers[l].k_dim != b->layers[l].k_dim || a->layers[l].v_dim != b->layers[l].v_dim ||
            a->layers[l].state != b->layers[l].state)
            return false;
    return true;
}

int kv_file_check(const kv_file_view *v, const kv_file_id *want, int32_t n_vocab, const char *name, nc_err *err) {
    const kv_file_id *f = &v->id;
    if (strcmp(f->arch, want->arch) || !same_layers(f, want))
        return nc_fail(err,
                       "%s: written for another model, '%s' (%s, %" PRIu32 " layers, %zu bytes a cell); this one is '%s' "
                       "(%s, %" PRIu32 " layers, %zu bytes a cell)",
                       name, f->name, f->arch, f->n_layer, kv_file_cell_bytes(f), want->name, want->arch, want->n_layer,
                       kv_file_cell_bytes(want));
    if (f->fingerprint != want->fingerprint)
        return nc_fail(err,
                       "%s: written for another model, '%s' (fingerprint %016" PRIx64 "), of the same architecture "
                       "and shape as this one, '%s' (fingerprint %016" PRIx64 "): its keys and values do not hold here",
                       name, f->name, f->fingerprint, want->name, want->fingerprint);
    char tk[24], tv[24], wk[24], wv[24];
    if (f->type_k != want->type_k || f->type_v != want->type_v)
        return nc_fail(err, "%s: its cache keeps keys as %s and values as %s; this context keeps %s and %s", name,
                       ggml_type_name(f->type_k, tk), ggml_type_name(f->type_v, tv), ggml_type_name(want->type_k, wk),
                       ggml_type_name(want->type_v, wv));
    for (int32_t c = 0; c < v->n_cells; c++)
        if (v->tokens[c] >= n_vocab)
            return nc_fail(err, "%s: the token of cell %d is %d, outside this model's vocabulary of %d", name, c,
                           v->tokens[c], n_vocab);
    return 0;
}
