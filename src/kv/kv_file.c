/* Saving a sequence's cells to a file and loading them back (kv_file.h), one row at a time
 * through the cache's row accessors. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/kv_cache.h"
#include "kv/kv_file.h"

/* A stream of bytes to a file, hashed on the way. */
typedef struct writer {
    FILE *f;
    nc_hasher h;
    uint64_t n;
    bool failed;
} writer;

static void put(writer *w, const void *p, size_t n) {
    nc_hash_update(&w->h, p, n);
    w->n += n;
    if (!w->failed && fwrite(p, 1, n, w->f) != n) w->failed = true;
}

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i);
}

/* An int32 array, little-endian. */
static void put_ints(writer *w, const int32_t *a, int32_t n) {
    uint8_t buf[4096];
    for (int32_t i = 0; i < n;) {
        int32_t m = 0;
        for (; m < (int32_t)sizeof buf / 4 && i < n; m++, i++) put_le32(buf + 4 * m, (uint32_t)a[i]);
        put(w, buf, 4 * (size_t)m);
    }
}

/* The file's contents after the header: tokens, positions, rows, the states, the checksum. */
static void put_body(writer *w, const kv_cache *kv, int32_t seq, int32_t n, int n_states, const int32_t *state_pos,
                     const float *const *states, uint8_t *row) {
    put_ints(w, kv_tokens(kv, seq), n);
    put_ints(w, kv_positions(kv, seq), n);
    for (int l = 0; l < kv->n_layer; l++) {
        size_t kb = kv_k_row_bytes(kv, l), vb = kv_v_row_bytes(kv, l);
        for (int32_t c = 0; kv_has_cells(kv, l) && c < n; c++) {
            kv_read_row(kv, l, seq, c, row, row + kb);
            put(w, row, kb + vb);
        }
    }
    uint8_t buf[4];
    for (int k = 0; k < n_states; k++) {
        put_le32(buf, (uint32_t)state_pos[k]);
        put(w, buf, 4);
        for (size_t i = 0; i < kv->state_floats; i++) {
            uint32_t bits;
            memcpy(&bits, &states[k][i], 4);
            put_le32(buf, bits);
            put(w, buf, 4);
        }
    }
    uint64_t sum = nc_hash_final(&w->h);
    uint8_t tail[8];
    put_le32(tail, (uint32_t)sum);
    put_le32(tail + 4, (uint32_t)(sum >> 32));
    if (!w->failed && fwrite(tail, 1, 8, w->f) != 8) w->failed = true;
    w->n += 8;
}

/* A new file beside path, named path.tmp.PID.N (created, not opened over an existing one, with
 * the permissions the umask gives). */
static FILE *create_temp(const char *path, char *tmp, size_t cap) {
    static atomic_uint counter;
    for (int tries = 0; tries < 100; tries++) {
        snprintf(tmp, cap, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&counter, 1));
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) {
            FILE *f = fdopen(fd, "wb");
            if (!f) {
                close(fd);
                unlink(tmp);
            }
            return f;
        }
        if (errno != EEXIST) return NULL;
    }
    return NULL;
}

kv_file_id kv_file_id_of(const kv_cache *kv, const kv_file_id *model, kv_file_layer *layers) {
    kv_file_id id = *model;
    id.n_layer = (uint32_t)kv->n_layer;
    id.type_k = kv->type_k;
    id.type_v = kv->type_v;
    for (int l = 0; l < kv->n_layer; l++) {
        const kv_layer *L = &kv->layer[l];
        layers[l] = (kv_file_layer){(uint32_t)L->kv_dim, L->v_in_k ? 0 : (uint32_t)L->v_dim, (uint32_t)L->state};
    }
    id.layers = layers;
    return id;
}

int kv_seq_save(const kv_cache *kv, int32_t seq, int32_t n, const kv_file_id *model, const char *path,
                uint64_t *bytes, nc_err *err) {
    if (seq < 0 || seq >= kv->n_seq)
        return nc_fail(err, "%s: sequence id %d is outside 0..%d (n_seq_max)", path, seq, kv->n_seq - 1);
    int32_t len = kv_seq_len(kv, seq);
    if (len == 0) return nc_fail(err, "%s: sequence %d is empty: nothing to save", path, seq);
    if (n < 1 || n > len)
        return nc_fail(err, "%s: cannot save %d cells of sequence %d, which holds %d", path, n, seq, len);
    for (int32_t c = 0; c < n; c++)
        for (int l = 0; l < kv->n_layer; l++)
            if (!kv_holds(kv, l, seq, c))
                return nc_fail(err,
                               "%s: sequence %d: the sliding-window layers no longer hold position %d (cell %d): "
                               "they keep the last %d positions in a ring; a context that keeps every position "
                               "(swa_full) can save it",
                               path, seq, kv_positions(kv, seq)[c], c, kv->ring);
    int32_t n_exact = kv_seq_n_exact(kv, seq) < n ? kv_seq_n_exact(kv, seq) : n;
    size_t cap = strlen(path) + 48, widest = 0, header = KV_FILE_HEADER + 12 * (size_t)kv->n_layer;
    for (int l = 0; l < kv->n_layer; l++)
        if (kv_k_row_bytes(kv, l) + kv_v_row_bytes(kv, l) > widest) widest = kv_k_row_bytes(kv, l) + kv_v_row_bytes(kv, l);
    char *tmp = malloc(cap);
    uint8_t *row = malloc(widest + 1), *head = malloc(header);
    kv_file_layer *layers = malloc((size_t)kv->n_layer * sizeof *layers);
    if (!tmp || !row || !head || !layers) {
        free(tmp);
        free(row);
        free(head);
        free(layers);
        return nc_fail(err, "%s: out of memory", path);
    }
    kv_file_id id = kv_file_id_of(kv, model, layers);
    int32_t state_pos[KV_FILE_MAX_STATES];
    const float *states[KV_FILE_MAX_STATES];
    int n_states = kv_state_prefixes(kv, seq, n, KV_FILE_MAX_STATES, state_pos, states);
    writer w = {.f = create_temp(path, tmp, cap)};
    if (!w.f) {
        nc_fail(err, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        free(tmp);
        free(row);
        free(head);
        free(layers);
        return -1;
    }
    errno = 0;
    nc_hash_init(&w.h);
    kv_file_header(head, &id, (uint32_t)n, (uint32_t)n_exact, (uint32_t)n_states);
    put(&w, head, header);
    put_body(&w, kv, seq, n, n_states, state_pos, states, row);
    free(row);
    free(head);
    free(layers);
    int e = 0;
    if (w.failed || fflush(w.f) || fsync(fileno(w.f))) e = errno ? errno : EIO;
    if (fclose(w.f) && !e) e = errno ? errno : EIO;
    if (!e && rename(tmp, path)) e = errno;
    if (e) {
        unlink(tmp);
        nc_fail(err, "%s: cannot write the KV cache file: %s", path, strerror(e));
        free(tmp);
        return -1;
    }
    free(tmp);
    if (bytes) *bytes = w.n;
    return 0;
}

int32_t kv_seq_load(kv_cache *kv, int32_t seq, const kv_file_view *v, int32_t n, const char *name, nc_err *err) {
    if (seq < 0 || seq >= kv->n_seq)
        return nc_fail(err, "%s: sequence id %d is outside 0..%d (n_seq_max)", name, seq, kv->n_seq - 1);
    if (n < 0 || n > v->n_cells) return nc_fail(err, "%s: cannot load %d cells: the file holds %d", name, n, v->n_cells);
    if (n > kv->n_ctx)
        return nc_fail(err, "%s: %d tokens do not fit a context of %d cells per sequence (raise -c / n_ctx)", name, n,
                       kv->n_ctx);
    if (v->id.n_layer != (uint32_t)kv->n_layer || v->id.type_k != kv->type_k || v->id.type_v != kv->type_v)
        return nc_fail(err, "%s: its cache shape (%u layers, types %u, %u) is not this cache's (%d, %u, %u)", name,
                       v->id.n_layer, v->id.type_k, v->id.type_v, kv->n_layer, kv->type_k, kv->type_v);
    for (int l = 0; l < kv->n_layer; l++) {
        const kv_layer *L = &kv->layer[l];
        int32_t v_dim = L->v_in_k ? 0 : L->v_dim;
        if (v->layers[l].k_dim != (uint32_t)L->kv_dim || v->layers[l].v_dim != (uint32_t)v_dim ||
            v->layers[l].state != (uint32_t)L->state)
            return nc_fail(err, "%s: layer %d's shape (keys %u, values %u, state %u) is not this cache's (%d, %d, %d)", name,
                           l, v->layers[l].k_dim, v->layers[l].v_dim, v->layers[l].state, L->kv_dim, v_dim, L->state);
    }
    /* the cells as far as the latest state at or before n goes; past it, the caller computes them again */
    int latest = -1;
    for (int k = 0; k < v->n_states; k++)
        if (v->state_pos[k] <= n) latest = k;
    int32_t m = !kv_recurrent(kv) ? n : latest >= 0 ? v->state_pos[latest] : 0;
    kv_seq_truncate(kv, seq, 0);
    const uint8_t *rows = v->rows;
    for (int32_t c = 0; c < m; c++) {
        if (c == v->n_exact) kv_seq_mark_moved(kv, seq);
        int32_t cell = kv_append(kv, seq, v->pos[c], v->tokens[c], err);
        if (cell < 0) {
            kv_seq_truncate(kv, seq, 0);
            return nc_fail_prefix(err, "%s: cell %d", name, c);
        }
        kv_ring_claim(kv, seq, v->pos[c]);
    }
    for (int l = 0; l < kv->n_layer; l++) {
        size_t kb = kv_k_row_bytes(kv, l), cell_bytes = kb + kv_v_row_bytes(kv, l);
        for (int32_t c = 0; kv_has_cells(kv, l) && c < m; c++) {
            const uint8_t *r = rows + (size_t)c * cell_bytes;
            kv_write_row(kv, l, seq, c, r, r + kb);
        }
        if (kv_has_cells(kv, l)) rows += (size_t)v->n_cells * cell_bytes;
    }
    if (kv_recurrent(kv)) { /* the state, and a checkpoint of it: the prefix cache finds it once the sequence lets go */
        kv_state_set(kv, seq, latest >= 0 ? v->states[latest] : NULL, m);
        kv_state_checkpoint(kv, seq, true);
        for (int k = 0; k < latest; k++) kv_state_offer(kv, v->tokens, v->state_pos[k], v->states[k]);
    }
    kv_commit(kv);
    return m;
}
