#include "kv/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "format/ggml_types.h"
#include "kernels/kernels.h"
#include "kv/kv_state.h"
#include "tensor/quant.h"

#define CHAIN_SEED KV_CHAIN_SEED
#define chain_hash kv_chain_hash

/* ---- the prefix index: linear probing over the hashes of full blocks ------------------------ */

static int32_t *block_tokens(const kv_cache *kv, int32_t b) { return kv->block_tok + (size_t)b * KV_BLOCK; }

static int32_t index_find(const kv_cache *kv, uint64_t h, const int32_t *tok) {
    uint32_t mask = (uint32_t)kv->index_cap - 1;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        int32_t b = kv->index[i];
        if (b < 0) return -1;
        if (kv->blocks[b].hash == h && !memcmp(block_tokens(kv, b), tok, KV_BLOCK * sizeof *tok)) return b;
    }
}

static void index_insert(kv_cache *kv, int32_t b) {
    uint32_t mask = (uint32_t)kv->index_cap - 1;
    uint32_t i = (uint32_t)kv->blocks[b].hash & mask;
    while (kv->index[i] >= 0) i = (i + 1) & mask;
    kv->index[i] = b;
    kv->blocks[b].indexed = true;
}

/* Backward-shift deletion keeps every probe sequence unbroken without tombstones. */
static void index_remove(kv_cache *kv, int32_t b) {
    uint32_t mask = (uint32_t)kv->index_cap - 1;
    uint32_t i = (uint32_t)kv->blocks[b].hash & mask;
    while (kv->index[i] != b) i = (i + 1) & mask;
    for (uint32_t j = (i + 1) & mask; kv->index[j] >= 0; j = (j + 1) & mask) {
        uint32_t home = (uint32_t)kv->blocks[kv->index[j]].hash & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) { /* j's entry may move back to i */
            kv->index[i] = kv->index[j];
            i = j;
        }
    }
    kv->index[i] = -1;
    kv->blocks[b].indexed = false;
}

/* ---- the pool: a stack of free blocks, a list of cached ones ----------------------------------- */

static void lru_unlink(kv_cache *kv, int32_t b) {
    kv_block *k = &kv->blocks[b];
    if (k->prev >= 0) kv->blocks[k->prev].next = k->next;
    else kv->lru_head = k->next;
    if (k->next >= 0) kv->blocks[k->next].prev = k->prev;
    else kv->lru_tail = k->prev;
    k->prev = k->next = -1;
    kv->stats.cached--;
}

static void lru_push(kv_cache *kv, int32_t b) {
    kv_block *k = &kv->blocks[b];
    k->prev = kv->lru_tail;
    k->next = -1;
    if (kv->lru_tail >= 0) kv->blocks[kv->lru_tail].next = b;
    else kv->lru_head = b;
    kv->lru_tail = b;
    kv->stats.cached++;
}

static void free_push(kv_cache *kv, int32_t b) {
    kv->blocks[b] = (kv_block){.prev = -1, .next = kv->free_head};
    kv->free_head = b;
    kv->stats.free++;
}

/* A block of the pool for a sequence: a free one, else the least recently used cached one; -1
 * when every block is held. */
static int32_t block_take_new(kv_cache *kv) {
    int32_t b = kv->free_head;
    if (b >= 0) {
        kv->free_head = kv->blocks[b].next;
        kv->stats.free--;
    } else {
        b = kv->lru_head;
        if (b < 0) return -1;
        lru_unlink(kv, b);
        if (kv->blocks[b].indexed) index_remove(kv, b);
        kv->stats.evictions++;
    }
    kv->blocks[b] = (kv_block){.ref = 1, .prev = -1, .next = -1};
    kv->stats.used++;
    return b;
}

/* One more holder of a block that may be cached. */
static void block_hold(kv_cache *kv, int32_t b) {
    if (kv->blocks[b].ref++ == 0) {
        lru_unlink(kv, b);
        kv->stats.used++;
    }
}

/* A holder lets go: a block nobody holds stays cached when its tokens can be found again. */
static void block_release(kv_cache *kv, int32_t b) {
    kv_block *k = &kv->blocks[b];
    if (--k->ref > 0) return;
    kv->stats.used--;
    if (k->indexed || (k->chained && k->n > 0 && !kv->ring)) lru_push(kv, b);
    else free_push(kv, b);
}

/* Bytes of one element of a layer's transposed (float) keys. */
static size_t k_elem(const kv_layer *L) { return L->type_k == GGML_TYPE_F32 ? 4 : 2; }

/* Copy the first n cells of block src (keys, values, tokens) into block dst. */
static void copy_cells(kv_cache *kv, int32_t dst, int32_t src, int32_t n) {
    for (int l = 0; l < kv->n_layer; l++) {
        const kv_layer *L = &kv->layer[l];
        if (L->ring || !L->n_head_kv) continue;
        size_t e = k_elem(L);
        size_t kb = KV_BLOCK * L->k_cell, vb = KV_BLOCK * L->v_cell; /* a block's bytes */
        uint8_t *kd = L->k + (size_t)dst * kb;
        const uint8_t *ks = L->k + (size_t)src * kb;
        if (L->k_by_cell) memcpy(kd, ks, (size_t)n * L->k_cell);
        else
            for (size_t d = 0; d < (size_t)L->kv_dim; d++)
                memcpy(kd + d * KV_BLOCK * e, ks + d * KV_BLOCK * e, (size_t)n * e);
        if (L->v_cell) memcpy(L->v + (size_t)dst * vb, L->v + (size_t)src * vb, (size_t)n * L->v_cell);
    }
    memcpy(block_tokens(kv, dst), block_tokens(kv, src), (size_t)n * sizeof(int32_t));
    if (kv->mirror) kv->mirror(kv->mirror_ctx, dst, 0, src, 0, n);
}

/* ---- set-up ------------------------------------------------------------------------------- */

static bool quantised(uint32_t type) { return type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0; }

/* The element type of the keys or values (`what`), for a layer of heads of head_dim. */
static int check_type(const char *what, uint32_t type, int32_t head_dim, int layer, nc_err *err) {
    char buf[24];
    const char *name = ggml_type_name(type, buf);
    if (type != GGML_TYPE_F16 && type != GGML_TYPE_F32 && !quantised(type))
        return nc_fail(err, "KV cache %s of type %s: the types are F16, F32, Q8_0 and Q4_0", what, name);
    if (quantised(type) && head_dim % 32)
        return nc_fail(err, "KV cache %s of type %s are quantised per head in blocks of 32 dimensions: layer %d's "
                            "head_dim %d is not a multiple of 32 (use f16 or f32)", what, name, layer, head_dim);
    return 0;
}

/* Layer l's shape from the configuration. */
static kv_layer_config layer_config(const kv_config *cfg, int l) {
    if (cfg->layers) return cfg->layers[l];
    return (kv_layer_config){.n_head_kv = cfg->n_head_kv, .head_dim = cfg->head_dim, .head_dim_v = cfg->head_dim,
                             .ring = cfg->ring_layer && cfg->ring_layer[l]};
}

int kv_init(kv_cache *kv, const kv_config *cfg, nc_err *err) {
    memset(kv, 0, sizeof *kv);
    int32_t n_layer = cfg->n_layer, n_seq = cfg->n_seq, n_ctx = cfg->n_ctx, ring = cfg->ring;
    int64_t n_cells = cfg->n_cells;
    if (ring < 0 || ring % KV_BLOCK)
        return nc_fail(err, "KV ring of %d cells: must be a multiple of %d", ring, KV_BLOCK);
    if (n_seq < 1 || n_ctx < 1 || n_layer < 1 || n_cells < 0)
        return nc_fail(err, "KV cache of %d sequences x %d cells x %d layers: every size must be positive", n_seq, n_ctx,
                       n_layer);
    kv->max_blocks = (n_ctx + KV_BLOCK - 1) / KV_BLOCK;
    int64_t blocks = n_cells ? (n_cells + KV_BLOCK - 1) / KV_BLOCK : (int64_t)n_seq * kv->max_blocks;
    uint64_t cell = 0, state = 0, pool_bytes, ring_bytes, cells;
    kv->layer = calloc((size_t)n_layer, sizeof *kv->layer);
    if (!kv->layer) return nc_fail(err, "out of memory allocating the KV cache");
    kv->n_layer = n_layer;
    for (int l = 0; l < n_layer; l++) {
        kv_layer_config c = layer_config(cfg, l);
        kv_layer *L = &kv->layer[l];
        if (c.n_head_kv < 0 || (c.n_head_kv > 0 && (c.head_dim < 1 || c.head_dim_v < 1 || (c.v_in_k && c.head_dim_v > c.head_dim))) ||
            c.state < 0 || (int64_t)c.n_head_kv * c.head_dim > (1 << 24)) {
            kv_free(kv);
            return nc_fail(err, "KV cache layer %d: %d heads of %d (values %d) dimensions, %d floats of state: out of range",
                           l, c.n_head_kv, c.head_dim, c.head_dim_v, c.state);
        }
        if (c.n_head_kv > 0 && (check_type("keys", c.v_in_k ? kv_latent_type(cfg->type_k) : cfg->type_k, c.head_dim, l, err) ||
                                (!c.v_in_k && check_type("values", cfg->type_v, c.head_dim_v, l, err)))) {
            kv_free(kv);
            return -1;
        }
        L->n_head_kv = c.n_head_kv;
        L->head_dim = c.n_head_kv ? c.head_dim : 0;
        L->head_dim_v = c.n_head_kv ? c.head_dim_v : 0;
        L->kv_dim = L->n_head_kv * L->head_dim;
        L->v_dim = L->n_head_kv * L->head_dim_v;
        L->v_in_k = c.n_head_kv && c.v_in_k;
        L->type_k = L->v_in_k ? kv_latent_type(cfg->type_k) : cfg->type_k;
        L->type_v = L->v_in_k ? L->type_k : cfg->type_v;
        L->k_by_cell = quantised(L->type_k) || L->v_in_k;
        L->k_cell = quant_row_bytes(L->type_k, L->kv_dim);
        L->v_cell = L->v_in_k ? 0 : quant_row_bytes(L->type_v, L->v_dim);
        L->ring = c.n_head_kv && c.ring && ring > 0;
        L->state = c.state;
        L->state_at = state;
        state += (uint64_t)c.state;
        cell = L->k_cell + L->v_cell > cell ? L->k_cell + L->v_cell : cell;
        if (L->ring) kv->ring = ring;
    }
    if (blocks > (1 << 24) || !nc_mul_u64((uint64_t)blocks * KV_BLOCK, cell, &pool_bytes) || pool_bytes > (1ull << 40) ||
        !nc_mul_u64((uint64_t)n_seq * (uint64_t)ring, cell, &ring_bytes) || ring_bytes > (1ull << 40) ||
        !nc_mul_u64((uint64_t)n_seq, (uint64_t)n_ctx + (uint64_t)ring, &cells) || cells > (1ull << 32) ||
        state > (1ull << 34) / (uint64_t)n_seq) {
        kv_free(kv);
        return nc_fail(err, "KV cache of %d sequences x %d cells (pool of %lld blocks) is too large", n_seq, n_ctx,
                       (long long)blocks);
    }
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->type_k = cfg->type_k;
    kv->type_v = cfg->type_v;
    kv->n_blocks = (int32_t)blocks;
    kv->index_cap = 16;
    while (kv->index_cap < 2 * kv->n_blocks) kv->index_cap *= 2;
    kv->blocks = malloc((size_t)kv->n_blocks * sizeof *kv->blocks);
    kv->index = malloc((size_t)kv->index_cap * sizeof *kv->index);
    kv->block_tok = malloc((size_t)kv->n_blocks * KV_BLOCK * sizeof *kv->block_tok);
    kv->seqs = calloc((size_t)n_seq, sizeof *kv->seqs);
    if (!kv->blocks || !kv->index || !kv->block_tok || !kv->seqs) goto oom;
    for (int32_t s = 0; s < n_seq; s++) {
        kv_seq *q = &kv->seqs[s];
        q->pos = malloc((size_t)n_ctx * sizeof *q->pos);
        q->tok = malloc((size_t)n_ctx * sizeof *q->tok);
        q->table = malloc((size_t)kv->max_blocks * sizeof *q->table);
        q->score = calloc((size_t)n_ctx, sizeof *q->score);
        if (!q->pos || !q->tok || !q->table || !q->score) goto oom;
        memset(q->table, 0xFF, (size_t)kv->max_blocks * sizeof *q->table); /* -1 */
        q->chained = true;
        q->exact = n_ctx;
    }
    memset(kv->index, 0xFF, (size_t)kv->index_cap * sizeof *kv->index);
    kv->free_head = kv->lru_head = kv->lru_tail = -1;
    kv->stats.n_blocks = kv->n_blocks;
    for (int32_t b = kv->n_blocks - 1; b >= 0; b--) free_push(kv, b); /* block 0 on top */
    if (kv->ring) {
        kv->ring_pos = malloc((size_t)n_seq * (size_t)ring * sizeof *kv->ring_pos);
        kv->ring_hole = malloc((size_t)n_seq * sizeof *kv->ring_hole);
        if (!kv->ring_pos || !kv->ring_hole) goto oom;
        memset(kv->ring_pos, 0xFF, (size_t)n_seq * (size_t)ring * sizeof *kv->ring_pos); /* -1 */
        memset(kv->ring_hole, 0xFF, (size_t)n_seq * sizeof *kv->ring_hole);
    }
    /* calloc of large blocks maps zero pages lazily, and free blocks are a stack: the pool costs
     * resident memory for the most blocks ever held at once, not for its capacity. */
    for (int l = 0; l < n_layer; l++) {
        kv_layer *L = &kv->layer[l];
        if (!L->n_head_kv) continue;
        size_t n = L->ring ? (size_t)n_seq * (size_t)ring : (size_t)blocks * KV_BLOCK; /* cells */
        L->k = calloc(n ? n * L->k_cell : 1, 1);
        L->v = calloc(n && L->v_cell ? n * L->v_cell : 1, 1);
        if (!L->k || !L->v) goto oom;
    }
    kv->state_floats = (size_t)state;
    if (kv_state_init(kv, cfg->n_shared_ckpt)) goto oom;
    return 0;
oom:
    kv_free(kv);
    return nc_fail(err, "out of memory allocating the KV cache (%d sequences x %d cells x %d layers, %lld blocks)",
                   n_seq, n_ctx, n_layer, (long long)blocks);
}

void kv_free(kv_cache *kv) {
    for (int l = 0; kv->layer && l < kv->n_layer; l++) {
        free(kv->layer[l].k);
        free(kv->layer[l].v);
    }
    for (int32_t s = 0; kv->seqs && s < kv->n_seq; s++) {
        free(kv->seqs[s].pos);
        free(kv->seqs[s].tok);
        free(kv->seqs[s].table);
        free(kv->seqs[s].score);
    }
    kv_state_free(kv);
    free(kv->layer);
    free(kv->blocks);
    free(kv->index);
    free(kv->block_tok);
    free(kv->seqs);
    free(kv->ring_pos);
    free(kv->ring_hole);
    memset(kv, 0, sizeof *kv);
}

/* ---- where a cell lives ------------------------------------------------------------------- */

kv_span kv_span_at(const kv_cache *kv, int layer, int32_t seq, int32_t first) {
    const kv_layer *L = &kv->layer[layer];
    /* the span lies in a region of n cells: a pool block, or the sequence's ring at `cell` */
    size_t n = L->ring ? (size_t)kv->ring : KV_BLOCK, cell = L->ring ? (size_t)(first % kv->ring) : 0;
    size_t region = L->ring ? (size_t)seq : (size_t)kv->seqs[seq].table[first / KV_BLOCK];
    const uint8_t *k = L->k + region * n * L->k_cell;
    const uint8_t *v = L->v_in_k ? k : L->v + region * n * L->v_cell;
    size_t k_next = L->k_by_cell ? L->k_cell : k_elem(L); /* bytes from a cell's keys to the next's */
    return (kv_span){.k = k + cell * k_next, .v = L->v_in_k ? k + cell * k_next : v + cell * L->v_cell,
                     .k_row = L->k_by_cell ? L->k_cell : n * k_elem(L), .v_row = L->v_in_k ? L->k_cell : L->v_cell,
                     .label = L->ring ? kv_ring_positions(kv, seq) + cell : kv->seqs[seq].pos + first};
}

/* The span holding a sequence's cell, and the cell's index in it. */
static kv_span cell_span(const kv_cache *kv, int layer, int32_t seq, int32_t cell, int32_t pos, int32_t *at) {
    int32_t first = kv_is_ring(kv, layer) ? pos / KV_BLOCK * KV_BLOCK : cell / KV_BLOCK * KV_BLOCK;
    *at = kv_is_ring(kv, layer) ? pos % KV_BLOCK : cell % KV_BLOCK;
    return kv_span_at(kv, layer, seq, first);
}

/* ---- what attention reads ----------------------------------------------------------------- */

/* Floats from a row of converted keys to the next: a span's cells and a cache line more, since
 * rows a power of two apart would put a cell's column of stores into a few cache sets. */
#define KEY_ROW (KV_BLOCK + 16)

/* n elements of a row of `type` as floats. */
static void to_floats(uint32_t type, const uint8_t *row, float *out, int n) {
    if (quantised(type)) kernels_dequantize(type, row, out, n);
    else quant_dequantize_row(type, row, out, n);
}

kv_mat kv_span_keys(const kv_cache *kv, int layer, const kv_span *sp, int g, int n, float *scratch) {
    const kv_layer *L = &kv->layer[layer];
    int hd = L->head_dim;
    if (!L->k_by_cell) return (kv_mat){L->type_k, sp->k + (size_t)g * (size_t)hd * sp->k_row, sp->k_row};
    /* a cell's head at a time into the scratch's last row, then down a column of the rows above */
    const uint8_t *head = sp->k + quant_row_bytes(L->type_k, (int64_t)g * hd);
    float *cell = scratch + (size_t)KEY_ROW * (size_t)hd;
    for (int c = 0; c < n; c++) {
        to_floats(L->type_k, head + (size_t)c * sp->k_row, cell, hd);
        for (int d = 0; d < hd; d++) scratch[(size_t)d * KEY_ROW + (size_t)c] = cell[d];
    }
    return (kv_mat){GGML_TYPE_F32, (const uint8_t *)scratch, KEY_ROW * sizeof(float)};
}

kv_mat kv_span_values(const kv_cache *kv, int layer, const kv_span *sp, int g, int n, float *scratch) {
    const kv_layer *L = &kv->layer[layer];
    uint32_t type = L->type_v;
    int hd = L->head_dim_v, stride = L->v_in_k ? L->head_dim : hd; /* values in the keys: a key head's first dims */
    const uint8_t *head = sp->v + quant_row_bytes(type, (int64_t)g * stride);
    if (!quantised(type)) return (kv_mat){type, head, sp->v_row};
    for (int c = 0; c < n; c++) kernels_dequantize(type, head + (size_t)c * sp->v_row, scratch + (size_t)c * hd, hd);
    return (kv_mat){GGML_TYPE_F32, (const uint8_t *)scratch, (size_t)hd * sizeof(float)};
}

size_t kv_scratch_floats(const kv_cache *kv) { /* the keys' rows and a cell's keys, or a span's values */
    size_t n = 0;
    for (int l = 0; l < kv->n_layer; l++) {
        const kv_layer *L = &kv->layer[l];
        size_t f = L->k_by_cell || quantised(L->type_v) ? (size_t)(KEY_ROW + 1) * (size_t)L->head_dim : 0;
        size_t v = quantised(L->type_v) ? (size_t)KV_BLOCK * (size_t)L->head_dim_v : 0;
        n = f > n ? f : n;
        n = v > n ? v : n;
    }
    return n;
}

/* ---- writing ------------------------------------------------------------------------------ */

/* n floats into a row of `type` elements (F16 converted by the kernels, F16C where the CPU has
 * it, a run at a time; quantised types in whole blocks). */
static void put_row(uint32_t type, uint8_t *dst, const float *src, int n) {
    if (quantised(type)) {
        quant_quantize_row(type, src, dst, n);
    } else if (type == GGML_TYPE_F16) {
        uint16_t h[64];
        for (int i0 = 0; i0 < n; i0 += 64) {
            int m = n - i0 < 64 ? n - i0 : 64;
            kernels_f32_to_f16(h, src + i0, m);
            memcpy(dst + (size_t)i0 * 2, h, (size_t)m * 2);
        }
    } else {
        memcpy(dst, src, (size_t)n * 4);
    }
}

/* n floats down a column of the transposed keys: element i at dst + i * row. */
static void put_column(uint32_t type, uint8_t *dst, size_t row, const float *src, int n) {
    uint16_t h[64];
    for (int i0 = 0; i0 < n; i0 += 64) {
        int m = n - i0 < 64 ? n - i0 : 64;
        if (type == GGML_TYPE_F16) kernels_f32_to_f16(h, src + i0, m);
        for (int i = 0; i < m; i++) {
            uint8_t *d = dst + (size_t)(i0 + i) * row;
            if (type == GGML_TYPE_F16) memcpy(d, &h[i], 2);
            else memcpy(d, &src[i0 + i], 4);
        }
    }
}

void kv_store(kv_cache *kv, int layer, int32_t seq, int32_t cell, int32_t pos, int dim0, int n, const float *k,
              const float *v) {
    const kv_layer *L = &kv->layer[layer];
    int32_t at;
    kv_span sp = cell_span(kv, layer, seq, cell, pos, &at);
    uint8_t *keys = (uint8_t *)sp.k;
    if (k && L->k_by_cell) put_row(L->type_k, keys + (size_t)at * sp.k_row + quant_row_bytes(L->type_k, dim0), k, n);
    else if (k) put_column(L->type_k, keys + (size_t)dim0 * sp.k_row + (size_t)at * k_elem(L), sp.k_row, k, n);
    if (v && !L->v_in_k) put_row(L->type_v, (uint8_t *)sp.v + (size_t)at * sp.v_row + quant_row_bytes(L->type_v, dim0), v, n);
}

/* Element i of a row of `type` elements. */
static float get(uint32_t type, const uint8_t *row, int i) {
    if (quantised(type)) {
        float x[32];
        quant_dequantize_row(type, row + quant_row_bytes(type, i / 32 * 32), x, 32);
        return x[i % 32];
    }
    if (type == GGML_TYPE_F16) {
        uint16_t h;
        memcpy(&h, row + (size_t)i * 2, 2);
        return quant_fp16_to_f32(h);
    }
    float x;
    memcpy(&x, row + (size_t)i * 4, 4);
    return x;
}

float kv_get_k(const kv_cache *kv, int layer, int32_t seq, int32_t cell, int dim) {
    int32_t at;
    kv_span sp = cell_span(kv, layer, seq, cell, kv->seqs[seq].pos[cell], &at);
    const kv_layer *L = &kv->layer[layer];
    if (L->k_by_cell) return get(L->type_k, sp.k + (size_t)at * sp.k_row, dim);
    return get(L->type_k, sp.k + (size_t)dim * sp.k_row, at);
}

float kv_get_v(const kv_cache *kv, int layer, int32_t seq, int32_t cell, int dim) {
    const kv_layer *L = &kv->layer[layer];
    int32_t at;
    kv_span sp = cell_span(kv, layer, seq, cell, kv->seqs[seq].pos[cell], &at);
    if (L->v_in_k) return get(L->type_k, sp.k + (size_t)at * sp.k_row, dim / L->head_dim_v * L->head_dim + dim % L->head_dim_v);
    return get(L->type_v, sp.v + (size_t)at * sp.v_row, dim);
}

/* Transposed keys: a cell's key row is gathered from (scattered to) one element per dimension;
 * keys stored by cell and values are a row already. */
void kv_read_row(const kv_cache *kv, int layer, int32_t seq, int32_t cell, uint8_t *k, uint8_t *v) {
    const kv_layer *L = &kv->layer[layer];
    int32_t at;
    kv_span sp = cell_span(kv, layer, seq, cell, kv->seqs[seq].pos[cell], &at);
    size_t e = k_elem(L);
    if (L->k_by_cell) memcpy(k, sp.k + (size_t)at * sp.k_row, L->k_cell);
    else
        for (int32_t d = 0; d < L->kv_dim; d++) memcpy(k + (size_t)d * e, sp.k + (size_t)d * sp.k_row + (size_t)at * e, e);
    if (L->v_cell) memcpy(v, sp.v + (size_t)at * sp.v_row, L->v_cell);
}

void kv_write_row(kv_cache *kv, int layer, int32_t seq, int32_t cell, const uint8_t *k, const uint8_t *v) {
    const kv_layer *L = &kv->layer[layer];
    int32_t at;
    kv_span sp = cell_span(kv, layer, seq, cell, kv->seqs[seq].pos[cell], &at);
    size_t e = k_elem(L);
    if (L->k_by_cell) memcpy((uint8_t *)sp.k + (size_t)at * sp.k_row, k, L->k_cell);
    else
        for (int32_t d = 0; d < L->kv_dim; d++)
            memcpy((uint8_t *)sp.k + (size_t)d * sp.k_row + (size_t)at * e, k + (size_t)d * e, e);
    if (L->v_cell) memcpy((uint8_t *)sp.v + (size_t)at * sp.v_row, v, L->v_cell);
}

void kv_seq_mark_moved(kv_cache *kv, int32_t seq) {
    kv_seq *q = &kv->seqs[seq];
    if (q->len < q->exact) q->exact = q->len;
    q->chained = false;
}

/* The block a sequence writes cell c into: a new one at a block's first cell, a copy of a block
 * someone else holds (or the index keeps). */
static int32_t writable_block(kv_cache *kv, kv_seq *q, int32_t c) {
    int32_t i = c / KV_BLOCK, o = c % KV_BLOCK, b = q->table[i];
    if (o == 0 && b < 0) {
        b = block_take_new(kv);
        if (b < 0) return -1;
        kv->blocks[b].chained = q->chained;
        kv->blocks[b].parent = i == 0 ? CHAIN_SEED : kv->blocks[q->table[i - 1]].hash;
        q->table[i] = b;
        return b;
    }
    if (kv->blocks[b].ref == 1 && !kv->blocks[b].indexed) return b;
    int32_t nb = block_take_new(kv);
    if (nb < 0) return -1;
    copy_cells(kv, nb, b, o);
    kv->blocks[nb].chained = kv->blocks[b].chained;
    kv->blocks[nb].parent = kv->blocks[b].parent;
    block_release(kv, b);
    q->table[i] = nb;
    return nb;
}

int32_t kv_append(kv_cache *kv, int32_t seq, int32_t pos, int32_t token, nc_err *err) {
    if (seq < 0 || seq >= kv->n_seq)
        return nc_fail(err, "sequence id %d is outside 0..%d (n_seq_max)", seq, kv->n_seq - 1);
    kv_seq *q = &kv->seqs[seq];
    int32_t c = q->len;
    if (c >= kv->n_ctx)
        return nc_fail(err, "sequence %d is full: the context holds %d tokens (raise -c / n_ctx)", seq, kv->n_ctx);
    if (pos < 0 || (c > 0 && pos <= q->pos[c - 1]))
        return nc_fail(err, "sequence %d: position %d does not follow the cached position %d", seq, pos,
                       c > 0 ? q->pos[c - 1] : -1);
    if (pos != c) q->chained = false;
    int32_t b = writable_block(kv, q, c);
    if (b < 0)
        return nc_fail(err, "the KV cache pool is exhausted: all %d blocks of %d cells are held by sequences",
                       kv->n_blocks, KV_BLOCK);
    kv_block *k = &kv->blocks[b];
    int32_t o = c % KV_BLOCK;
    k->chained = k->chained && q->chained;
    k->n = o + 1;
    block_tokens(kv, b)[o] = token;
    if (k->n == KV_BLOCK && k->chained) k->hash = chain_hash(k->parent, block_tokens(kv, b), KV_BLOCK);
    q->pos[c] = pos;
    q->tok[c] = token;
    atomic_store_explicit(&q->score[c], 0, memory_order_relaxed);
    q->len = c + 1;
    return c;
}

void kv_commit(kv_cache *kv) {
    if (kv->ring) return;
    for (int32_t s = 0; s < kv->n_seq; s++) {
        const kv_seq *q = &kv->seqs[s];
        for (int32_t i = 0; i < q->len / KV_BLOCK; i++) {
            kv_block *k = &kv->blocks[q->table[i]];
            if (k->chained && !k->indexed && index_find(kv, k->hash, block_tokens(kv, q->table[i])) < 0)
                index_insert(kv, q->table[i]);
        }
    }
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

/* ---- sequences ---------------------------------------------------------------------------- */

static bool all_chained(const kv_seq *q, int32_t n) {
    for (int32_t c = 0; c < n; c++)
        if (q->pos[c] != c) return false;
    return true;
}

/* Keep the first n_keep cells of seq (its recurrent state is the caller's). */
static void cells_truncate(kv_cache *kv, int32_t seq, int32_t n_keep) {
    kv_seq *q = &kv->seqs[seq];
    if (n_keep >= q->len) return;
    for (int32_t i = (n_keep + KV_BLOCK - 1) / KV_BLOCK; i < kv->max_blocks && q->table[i] >= 0; i++) {
        block_release(kv, q->table[i]);
        q->table[i] = -1;
    }
    if (n_keep % KV_BLOCK) { /* the cells after n_keep are dead, unless someone else sees them */
        kv_block *k = &kv->blocks[q->table[n_keep / KV_BLOCK]];
        if (k->ref == 1 && !k->indexed) k->n = n_keep % KV_BLOCK;
    }
    q->len = n_keep;
    if (n_keep == 0) q->exact = kv->n_ctx;
    if (!q->chained) q->chained = n_keep <= q->exact && all_chained(q, n_keep);
    if (!kv->ring) return;
    /* Forget the ring cells of the dropped positions; the positions they had overwritten are
     * lost, and any kept position whose cell no longer holds it is a hole a later window may need. */
    const int32_t *pos = q->pos;
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

void kv_seq_truncate(kv_cache *kv, int32_t seq, int32_t n_keep) {
    if (seq < 0 || seq >= kv->n_seq) return;
    if (n_keep < 0) n_keep = 0;
    if (n_keep >= kv->seqs[seq].len) return;
    if (n_keep == 0) kv_state_release(kv, seq); /* the next turn of a conversation, the same prompt again */
    cells_truncate(kv, seq, kv_state_restore(kv, seq, n_keep));
}

/* Move cells from..from+n-1 to to..to+n-1 (runs that may overlap) between two stores of layer L's
 * keys and values holding `cap` cells each (a block or a ring): whole cells where they are stored
 * by cell, a row of each key dimension where the keys are transposed. */
static void move_run(const kv_cache *kv, const kv_layer *L, uint8_t *kd, uint8_t *vd, size_t to, const uint8_t *ks,
                     const uint8_t *vs, size_t from, size_t n, size_t cap) {
    if (L->k_by_cell) memmove(kd + to * L->k_cell, ks + from * L->k_cell, n * L->k_cell);
    else
        for (size_t d = 0, e = k_elem(L); d < (size_t)L->kv_dim; d++)
            memmove(kd + (d * cap + to) * e, ks + (d * cap + from) * e, n * e);
    if (L->v_cell) memmove(vd + to * L->v_cell, vs + from * L->v_cell, n * L->v_cell);
}

/* Move cells from..from+n-1 of block src to cells to..to+n-1 of block dst, in every full layer. */
static void move_cells(kv_cache *kv, int32_t dst, int32_t to, int32_t src, int32_t from, int32_t n) {
    for (int l = 0; l < kv->n_layer; l++) {
        const kv_layer *L = &kv->layer[l];
        if (L->ring || !L->n_head_kv) continue;
        size_t kb = KV_BLOCK * L->k_cell, vb = KV_BLOCK * L->v_cell; /* a block's bytes */
        move_run(kv, L, L->k + (size_t)dst * kb, L->v + (size_t)dst * vb, (size_t)to, L->k + (size_t)src * kb,
                 L->v + (size_t)src * vb, (size_t)from, (size_t)n, KV_BLOCK);
    }
    memmove(block_tokens(kv, dst) + to, block_tokens(kv, src) + from, (size_t)n * sizeof(int32_t));
    if (kv->mirror) kv->mirror(kv->mirror_ctx, dst, to, src, from, n);
}

/* The rings of seq hold what they held of the kept cells, at their new positions. */
static int keep_in_rings(kv_cache *kv, int32_t seq, const int32_t *cells, int32_t n, const int32_t *new_pos,
                         nc_err *err) {
    size_t ring = (size_t)kv->ring, most = 0;
    for (int l = 0; l < kv->n_layer; l++)
        if (kv->layer[l].ring && ring * (kv->layer[l].k_cell + kv->layer[l].v_cell) > most)
            most = ring * (kv->layer[l].k_cell + kv->layer[l].v_cell);
    uint8_t *tmp = malloc(most);
    int32_t *old = malloc(ring * sizeof *old);
    if (!tmp || !old) {
        free(tmp);
        free(old);
        return nc_fail(err, "out of memory moving the sliding-window cache");
    }
    int32_t *rp = kv->ring_pos + (size_t)seq * ring;
    memcpy(old, rp, ring * sizeof *old);
    for (size_t c = 0; c < ring; c++) rp[c] = -1;
    for (int l = 0; l < kv->n_layer; l++) {
        const kv_layer *L = &kv->layer[l];
        if (!L->ring) continue;
        size_t kb = ring * L->k_cell, vb = ring * L->v_cell;
        uint8_t *k = L->k + (size_t)seq * kb, *v = L->v + (size_t)seq * vb;
        memcpy(tmp, k, kb);
        memcpy(tmp + kb, v, vb);
        for (int32_t i = 0; i < n; i++) {
            int32_t p = kv->seqs[seq].pos[cells[i]];
            size_t from = (size_t)p % ring, to = (size_t)new_pos[i] % ring;
            if (old[from] != p) continue; /* the ring no longer held it */
            move_run(kv, L, k, v, to, tmp, tmp + kb, from, 1, ring);
            rp[to] = new_pos[i];
        }
    }
    kv->ring_hole[seq] = -1; /* what is gone was let go on purpose */
    free(tmp);
    free(old);
    return 0;
}

int kv_seq_keep(kv_cache *kv, int32_t seq, const int32_t *cells, int32_t n, const int32_t *new_pos, int32_t *old_pos,
                nc_err *err) {
    if (seq < 0 || seq >= kv->n_seq) return nc_fail(err, "sequence id %d is outside 0..%d", seq, kv->n_seq - 1);
    if (kv_recurrent(kv))
        return nc_fail(err, "sequence %d: this model's recurrent layers carry a state of every token seen, which cannot "
                            "drop tokens from its middle (context shift, attention sinks and compression windows are "
                            "for attention-only models)", seq);
    kv_seq *q = &kv->seqs[seq];
    for (int32_t i = 0; i < n; i++)
        if (cells[i] < 0 || cells[i] >= q->len || (i > 0 && (cells[i] <= cells[i - 1] || new_pos[i] <= new_pos[i - 1])) ||
            new_pos[i] < 0)
            return nc_fail(err, "sequence %d: kept cell %d (cell %d, position %d) is out of order or outside 0..%d", seq,
                           i, cells[i], new_pos[i], q->len - 1);
    for (int32_t i = 0; old_pos && i < n; i++) old_pos[i] = q->pos[cells[i]];
    int32_t f = 0; /* cells before f stay where they are */
    while (f < n && cells[f] == f) f++;
    /* the blocks written from f on become the sequence's own (copied when shared), and moved
     * cells are no prefix of anything. A block only the prefix index shares is copied while the
     * pool has room, so the prefix stays cached; when it has none (a lone sequence filling the
     * pool, as a generation under a context policy does) the index lets go of it instead. */
    for (int32_t i = f / KV_BLOCK; i <= (n - 1) / KV_BLOCK && f < n; i++) {
        int32_t b = q->table[i];
        if (kv->blocks[b].ref == 1 && kv->blocks[b].indexed && kv_blocks_available(kv) == 0) index_remove(kv, b);
        if (kv->blocks[b].ref > 1 || kv->blocks[b].indexed) {
            int32_t nb = block_take_new(kv);
            if (nb < 0) return nc_fail(err, "the KV cache pool is exhausted: no block to copy a shared one into");
            copy_cells(kv, nb, b, kv->blocks[b].n);
            kv->blocks[nb].n = kv->blocks[b].n;
            block_release(kv, b);
            q->table[i] = b = nb;
        }
        kv->blocks[b].chained = false;
    }
    if (kv->ring && keep_in_rings(kv, seq, cells, n, new_pos, err)) return -1;
    /* in runs of consecutive cells that stay within one block at both ends (a window moves its
     * whole cache by a cell: a few long runs); cell i comes from cells[i] >= i, which no earlier
     * run has written */
    for (int32_t i = f, j; i < n; i = j) {
        for (j = i + 1; j < n && cells[j] == cells[j - 1] + 1 && j % KV_BLOCK && cells[j] % KV_BLOCK; j++) continue;
        move_cells(kv, q->table[i / KV_BLOCK], i % KV_BLOCK, q->table[cells[i] / KV_BLOCK], cells[i] % KV_BLOCK, j - i);
        for (int32_t k = i; k < j; k++) q->tok[k] = q->tok[cells[k]];
    }
    for (int32_t i = 0; i < n; i++) {
        q->pos[i] = new_pos[i];
        atomic_store_explicit(&q->score[i], kv_score(kv, seq, cells[i]), memory_order_relaxed);
    }
    if (f < q->exact) q->exact = f;
    int32_t len = q->len;
    q->len = n; /* drop the blocks past the kept cells */
    for (int32_t i = (n + KV_BLOCK - 1) / KV_BLOCK; i < (len + KV_BLOCK - 1) / KV_BLOCK; i++) {
        block_release(kv, q->table[i]);
        q->table[i] = -1;
    }
    if (n % KV_BLOCK) {
        kv_block *k = &kv->blocks[q->table[n / KV_BLOCK]];
        if (k->ref == 1 && !k->indexed) k->n = n % KV_BLOCK;
    }
    q->chained = n <= q->exact && all_chained(q, n);
    return 0;
}

bool kv_holds(const kv_cache *kv, int layer, int32_t seq, int32_t cell) {
    if (!kv_is_ring(kv, layer)) return true;
    int32_t p = kv->seqs[seq].pos[cell];
    return kv_ring_positions(kv, seq)[p % kv->ring] == p;
}

void kv_read_k(const kv_cache *kv, int layer, int32_t seq, int32_t cell, float *out) {
    const kv_layer *L = &kv->layer[layer];
    int32_t at;
    kv_span sp = cell_span(kv, layer, seq, cell, kv->seqs[seq].pos[cell], &at);
    if (L->k_by_cell) to_floats(L->type_k, sp.k + (size_t)at * sp.k_row, out, L->kv_dim);
    else
        for (int d = 0; d < L->kv_dim; d++) out[d] = get(L->type_k, sp.k + (size_t)d * sp.k_row, at);
}

int kv_seq_copy(kv_cache *kv, int32_t src, int32_t dst, nc_err *err) {
    if (src < 0 || src >= kv->n_seq || dst < 0 || dst >= kv->n_seq)
        return nc_fail(err, "sequence copy %d -> %d: ids must be in 0..%d", src, dst, kv->n_seq - 1);
    if (src == dst) return 0;
    kv_seq_truncate(kv, dst, 0);
    const kv_seq *s = &kv->seqs[src];
    kv_seq *d = &kv->seqs[dst];
    int32_t nb = (s->len + KV_BLOCK - 1) / KV_BLOCK;
    for (int32_t i = 0; i < nb; i++) block_hold(kv, d->table[i] = s->table[i]);
    memcpy(d->pos, s->pos, (size_t)s->len * sizeof *d->pos);
    memcpy(d->tok, s->tok, (size_t)s->len * sizeof *d->tok);
    for (int32_t c = 0; c < s->len; c++) atomic_store_explicit(&d->score[c], kv_score(kv, src, c), memory_order_relaxed);
    d->len = s->len;
    d->chained = s->chained;
    d->exact = s->exact;
    kv_state_copy(kv, src, dst);
    if (kv->ring) { /* a ring is copied whole */
        for (int l = 0; l < kv->n_layer; l++) {
            const kv_layer *L = &kv->layer[l];
            if (!L->ring) continue;
            size_t kb = (size_t)kv->ring * L->k_cell, vb = (size_t)kv->ring * L->v_cell;
            memcpy(L->k + (size_t)dst * kb, L->k + (size_t)src * kb, kb);
            memcpy(L->v + (size_t)dst * vb, L->v + (size_t)src * vb, vb);
        }
        memcpy(kv->ring_pos + (size_t)dst * kv->ring, kv_ring_positions(kv, src), (size_t)kv->ring * sizeof *kv->ring_pos);
        kv->ring_hole[dst] = kv->ring_hole[src];
    }
    return 0;
}

/* The cached block that continues the chain `parent` with the longest run of tokens[0..n):
 * full blocks found again and partly filled ones, held or not. */
static int32_t best_continuation(const kv_cache *kv, uint64_t parent, const int32_t *tok, int32_t n, int32_t *len) {
    int32_t best = -1;
    *len = 0;
    for (int32_t b = 0; b < kv->n_blocks; b++) {
        const kv_block *k = &kv->blocks[b];
        if (!k->chained || k->n == 0 || k->parent != parent) continue; /* free blocks are neither */
        const int32_t *bt = block_tokens(kv, b);
        int32_t m = 0, lim = k->n < n ? k->n : n;
        while (m < lim && bt[m] == tok[m]) m++;
        if (m > *len) {
            *len = m;
            best = b;
        }
    }
    return best;
}

int32_t kv_seq_reuse_prefix(kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n) {
    if (seq < 0 || seq >= kv->n_seq || kv->seqs[seq].len > 0 || n <= 0) return 0;
    kv->stats.lookups++;
    kv->stats.tokens_looked_up += (uint64_t)n;
    if (kv->ring) return 0;
    kv_seq *q = &kv->seqs[seq];
    if (n > kv->n_ctx) n = kv->n_ctx;
    if (kv_recurrent(kv)) /* no further than a shared checkpoint of the recurrent state goes */
        n = kv_state_find(kv, tokens, n);
    uint64_t h = CHAIN_SEED;
    int32_t m = 0, i = 0;
    for (; m + KV_BLOCK <= n; m += KV_BLOCK, i++) {
        uint64_t hh = chain_hash(h, tokens + m, KV_BLOCK);
        int32_t b = index_find(kv, hh, tokens + m);
        if (b < 0) break;
        block_hold(kv, q->table[i] = b);
        h = hh;
    }
    int32_t part, src = best_continuation(kv, h, tokens + m, n - m, &part);
    if (src >= 0 && kv->blocks[src].ref == 0) { /* nobody holds it: it becomes this sequence's */
        block_hold(kv, q->table[i] = src);
        if (!kv->blocks[src].indexed) kv->blocks[src].n = part; /* an indexed one is copied on write */
        m += part;
    } else if (src >= 0) {
        block_hold(kv, src); /* so that taking a new block does not reclaim it */
        int32_t b = block_take_new(kv);
        if (b >= 0) {
            copy_cells(kv, b, src, part);
            kv->blocks[b] = (kv_block){.ref = 1, .n = part, .chained = true, .parent = h, .prev = -1, .next = -1};
            if (part == KV_BLOCK) kv->blocks[b].hash = chain_hash(h, block_tokens(kv, b), KV_BLOCK);
            q->table[i] = b;
            m += part;
        }
        block_release(kv, src);
    }
    for (int32_t c = 0; c < m; c++) {
        q->pos[c] = c;
        q->tok[c] = tokens[c];
    }
    q->len = m;
    q->chained = true;
    if (kv_recurrent(kv)) { /* the cells the blocks gave back, to the state's position */
        int32_t s = kv_state_find(kv, tokens, m);
        cells_truncate(kv, seq, s);
        kv_state_take(kv, seq, tokens, s);
        m = s;
    }
    if (m > 0) {
        kv->stats.hits++;
        kv->stats.tokens_reused += (uint64_t)m;
    }
    return m;
}

int32_t kv_blocks_needed(const kv_cache *kv, int32_t seq, int32_t n) {
    if (seq < 0 || seq >= kv->n_seq || n <= 0) return 0;
    const kv_seq *q = &kv->seqs[seq];
    int32_t need = (q->len + n + KV_BLOCK - 1) / KV_BLOCK - (q->len + KV_BLOCK - 1) / KV_BLOCK;
    if (q->len % KV_BLOCK) {
        const kv_block *k = &kv->blocks[q->table[q->len / KV_BLOCK]];
        need += k->ref > 1 || k->indexed;
    }
    return need;
}

int32_t kv_blocks_available(const kv_cache *kv) { return kv->stats.free + kv->stats.cached; }

/* ---- accounting --------------------------------------------------------------------------- */

uint64_t kv_bytes_per_token(const kv_cache *kv) {
    uint64_t n = 0;
    for (int l = 0; l < kv->n_layer; l++)
        if (!kv_is_ring(kv, l)) n += kv->layer[l].k_cell + kv->layer[l].v_cell;
    return n;
}

uint64_t kv_bytes_total(const kv_cache *kv) {
    uint64_t n = 0;
    for (int l = 0; l < kv->n_layer; l++)
        n += (kv->layer[l].k_cell + kv->layer[l].v_cell) *
             (kv_is_ring(kv, l) ? (uint64_t)kv->ring * (uint64_t)kv->n_seq : (uint64_t)kv->n_blocks * KV_BLOCK);
    return n + kv->state_floats * sizeof(float) * (uint64_t)kv->n_seq;
}

kv_stats kv_get_stats(const kv_cache *kv) { return kv->stats; }
