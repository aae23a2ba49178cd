#include "kv/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "format/ggml_types.h"
#include "kernels/kernels.h"
#include "tensor/quant.h"

int kv_init(kv_cache *kv, int32_t n_layer, int32_t n_seq, int32_t n_ctx, int32_t kv_dim, uint32_t type, int32_t ring,
            const bool *ring_layer, nc_err *err) {
    memset(kv, 0, sizeof *kv);
    if (type != GGML_TYPE_F16 && type != GGML_TYPE_F32)
        return nc_fail(err, "KV cache type must be F16 or F32");
    if (ring < 0 || ring % 256) return nc_fail(err, "KV ring of %d cells: must be a multiple of 256", ring);
    kv->n_layer = n_layer;
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    kv->type = type;
    kv->elem = type == GGML_TYPE_F16 ? 2 : 4;
    uint64_t full, in_ring, cells;
    if (!nc_mul_u64((uint64_t)n_seq * (uint64_t)n_ctx, (uint64_t)kv_dim * kv->elem, &full) || full > (1ull << 40) ||
        !nc_mul_u64((uint64_t)n_seq * (uint64_t)ring, (uint64_t)kv_dim * kv->elem, &in_ring) || in_ring > (1ull << 40) ||
        !nc_mul_u64((uint64_t)n_seq, (uint64_t)n_ctx + (uint64_t)ring, &cells) || cells > (1ull << 32))
        return nc_fail(err, "KV cache of %d sequences x %d cells x %d is too large", n_seq, n_ctx, kv_dim);
    kv->kt = calloc((size_t)n_layer, sizeof *kv->kt);
    kv->v = calloc((size_t)n_layer, sizeof *kv->v);
    kv->cells = calloc((size_t)n_layer, sizeof *kv->cells);
    kv->in_ring = calloc((size_t)n_layer, sizeof *kv->in_ring);
    kv->pos = calloc((size_t)n_seq * (size_t)n_ctx, sizeof *kv->pos);
    kv->len = calloc((size_t)n_seq, sizeof *kv->len);
    if (!kv->kt || !kv->v || !kv->cells || !kv->in_ring || !kv->pos || !kv->len) goto oom;
    for (int l = 0; l < n_layer; l++) {
        kv->in_ring[l] = ring_layer && ring_layer[l] && ring > 0;
        kv->cells[l] = kv->in_ring[l] ? ring : n_ctx;
        if (kv->in_ring[l]) kv->ring = ring;
    }
    if (kv->ring) {
        kv->ring_pos = malloc((size_t)n_seq * (size_t)ring * sizeof *kv->ring_pos);
        kv->ring_hole = malloc((size_t)n_seq * sizeof *kv->ring_hole);
        if (!kv->ring_pos || !kv->ring_hole) goto oom;
        memset(kv->ring_pos, 0xFF, (size_t)n_seq * (size_t)ring * sizeof *kv->ring_pos); /* -1 */
        memset(kv->ring_hole, 0xFF, (size_t)n_seq * sizeof *kv->ring_hole);
    }
    /* calloc of large blocks maps zero pages lazily: untouched cells cost no resident memory. */
    for (int l = 0; l < n_layer; l++) {
        size_t bytes = (size_t)(kv->in_ring[l] ? in_ring : full);
        kv->kt[l] = calloc(bytes ? bytes : 1, 1);
        kv->v[l] = calloc(bytes ? bytes : 1, 1);
        if (!kv->kt[l] || !kv->v[l]) goto oom;
    }
    return 0;
oom:
    kv_free(kv);
    return nc_fail(err, "out of memory allocating the KV cache (%d sequences x %d cells x %d layers)", n_seq, n_ctx,
                   n_layer);
}

void kv_free(kv_cache *kv) {
    for (int l = 0; kv->kt && l < kv->n_layer; l++) free(kv->kt[l]);
    for (int l = 0; kv->v && l < kv->n_layer; l++) free(kv->v[l]);
    free(kv->kt);
    free(kv->v);
    free(kv->cells);
    free(kv->in_ring);
    free(kv->pos);
    free(kv->len);
    free(kv->ring_pos);
    free(kv->ring_hole);
    memset(kv, 0, sizeof *kv);
}

static float get(const kv_cache *kv, const uint8_t *src) {
    if (kv->type == GGML_TYPE_F16) {
        uint16_t h;
        memcpy(&h, src, 2);
        return quant_fp16_to_f32(h);
    }
    float x;
    memcpy(&x, src, 4);
    return x;
}

/* F16 elements are converted by the kernels (F16C where the CPU has it), a run at a time. */
void kv_store_part(kv_cache *kv, int layer, int seq, int cell, int dim0, int n, const float *k, const float *v) {
    uint16_t h[64];
    for (int i0 = 0; i0 < n; i0 += 64) {
        int m = n - i0 < 64 ? n - i0 : 64;
        if (k) { /* transposed: one element per row of the key matrix */
            if (kv->type == GGML_TYPE_F16) kernels_f32_to_f16(h, k + i0, m);
            for (int i = 0; i < m; i++) {
                uint8_t *dst = (uint8_t *)kv_kt(kv, layer, seq, dim0 + i0 + i) + (size_t)cell * kv->elem;
                if (kv->type == GGML_TYPE_F16) memcpy(dst, &h[i], 2);
                else memcpy(dst, &k[i0 + i], 4);
            }
        }
        if (v) {
            uint8_t *dst = (uint8_t *)kv_v(kv, layer, seq, cell) + (size_t)(dim0 + i0) * kv->elem;
            if (kv->type == GGML_TYPE_F16) {
                kernels_f32_to_f16(h, v + i0, m);
                memcpy(dst, h, (size_t)m * 2);
            } else {
                memcpy(dst, v + i0, (size_t)m * 4);
            }
        }
    }
}

void kv_store(kv_cache *kv, int layer, int seq, int cell, const float *k, const float *v) {
    kv_store_part(kv, layer, seq, cell, 0, kv->kv_dim, k, v);
}

float kv_get_k(const kv_cache *kv, int layer, int seq, int cell, int dim) {
    return get(kv, (const uint8_t *)kv_kt(kv, layer, seq, dim) + (size_t)cell * kv->elem);
}

float kv_get_v(const kv_cache *kv, int layer, int seq, int cell, int dim) {
    return get(kv, (const uint8_t *)kv_v(kv, layer, seq, cell) + (size_t)dim * kv->elem);
}

int32_t kv_append(kv_cache *kv, int32_t seq, int32_t pos, nc_err *err) {
    if (seq < 0 || seq >= kv->n_seq)
        return nc_fail(err, "sequence id %d is outside 0..%d (n_seq_max)", seq, kv->n_seq - 1);
    int32_t n = kv->len[seq];
    if (n >= kv->n_ctx)
        return nc_fail(err, "sequence %d is full: the context holds %d tokens (raise -c / n_ctx)", seq, kv->n_ctx);
    if (pos < 0 || (n > 0 && pos <= kv_positions(kv, seq)[n - 1]))
        return nc_fail(err, "sequence %d: position %d does not follow the cached position %d", seq, pos,
                       n > 0 ? kv_positions(kv, seq)[n - 1] : -1);
    kv->pos[(size_t)seq * kv->n_ctx + n] = pos;
    kv->len[seq] = n + 1;
    return n;
}

void kv_ring_claim(kv_cache *kv, int32_t seq, int32_t pos) {
    if (kv->ring) kv->ring_pos[(size_t)seq * kv->ring + pos % kv->ring] = pos;
}

int kv_window_check(const kv_cache *kv, int32_t seq, int32_t pos, int32_t window, nc_err *err) {
    if (!kv->ring || kv->ring_hole[seq] < 0 || kv->ring_hole[seq] <= pos - window) return 0;
    return nc_fail(err, "sequence %d: the sliding-window cache lost position %d when the sequence was truncated by "
                        "more than it holds; clear the sequence and prefill it again",
                   seq, kv->ring_hole[seq]);
}

void kv_seq_truncate(kv_cache *kv, int32_t seq, int32_t n_keep) {
    if (seq < 0 || seq >= kv->n_seq) return;
    if (n_keep < 0) n_keep = 0;
    if (n_keep < kv->len[seq]) kv->len[seq] = n_keep;
    if (!kv->ring) return;
    /* Forget the ring cells of the dropped positions; the positions they had overwritten are
     * lost, and any kept position whose cell no longer holds it is a hole a later window may need. */
    const int32_t *pos = kv_positions(kv, seq);
    int32_t last = n_keep ? pos[n_keep - 1] : -1, *rp = kv->ring_pos + (size_t)seq * kv->ring;
    for (int c = 0; c < kv->ring; c++)
        if (rp[c] > last) rp[c] = -1;
    kv->ring_hole[seq] = -1;
    for (int i = n_keep - 1; i >= 0 && pos[i] > last - kv->ring; i--)
        if (rp[pos[i] % kv->ring] != pos[i]) {
            kv->ring_hole[seq] = pos[i];
            break;
        }
}

int kv_seq_copy(kv_cache *kv, int32_t src, int32_t dst, nc_err *err) {
    if (src < 0 || src >= kv->n_seq || dst < 0 || dst >= kv->n_seq)
        return nc_fail(err, "sequence copy %d -> %d: ids must be in 0..%d", src, dst, kv->n_seq - 1);
    if (src == dst) return 0;
    int32_t n = kv->len[src];
    for (int l = 0; l < kv->n_layer; l++) {
        int32_t cells = kv_is_ring(kv, l) ? kv->ring : n; /* a ring is copied whole */
        for (int d = 0; d < kv->kv_dim; d++)
            memcpy((void *)kv_kt(kv, l, dst, d), kv_kt(kv, l, src, d), (size_t)cells * kv->elem);
        memcpy((void *)kv_v(kv, l, dst, 0), kv_v(kv, l, src, 0), (size_t)cells * kv_v_row_bytes(kv));
    }
    memcpy(kv->pos + (size_t)dst * kv->n_ctx, kv_positions(kv, src), (size_t)n * sizeof *kv->pos);
    kv->len[dst] = n;
    if (kv->ring) {
        memcpy(kv->ring_pos + (size_t)dst * kv->ring, kv_ring_positions(kv, src), (size_t)kv->ring * sizeof *kv->ring_pos);
        kv->ring_hole[dst] = kv->ring_hole[src];
    }
    return 0;
}

uint64_t kv_bytes_per_token(const kv_cache *kv) {
    uint64_t n = 0;
    for (int l = 0; l < kv->n_layer; l++)
        if (!kv_is_ring(kv, l)) n += 2u * (uint64_t)kv->kv_dim * kv->elem;
    return n;
}

uint64_t kv_bytes_total(const kv_cache *kv) {
    uint64_t n = 0;
    for (int l = 0; l < kv->n_layer; l++) n += 2u * (uint64_t)kv->kv_dim * kv->elem * (uint64_t)kv->cells[l] * (uint64_t)kv->n_seq;
    return n;
}
