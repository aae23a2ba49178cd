/* The CPU backend's attention (cpu.h; backend.h's attend). */
#include <math.h>
#include <string.h>

#include "forward/cpu.h"

/* The query blocks of a micro-batch: runs of consecutive entries of one sequence, at most
 * CPU_ATTN_BLOCK long. */
void cpu_attn_blocks(fwd_state *s, const nc_batch_entry *e, int T) {
    cpu_state *cpu = cpu_of(s);
    int n = 0;
    for (int t = 0; t < T; t++)
        if (t == 0 || e[t].seq != e[t - 1].seq || t - cpu->attn_blocks[n - 1] == CPU_ATTN_BLOCK) cpu->attn_blocks[n++] = t;
    cpu->attn_blocks[n] = T;
    cpu->n_attn_blocks = n;
}

typedef struct attn_job {
    fwd_state *s;
    const fwd_attn *a;
} attn_job;

/* The values' head size. */
static int dim_v(const fwd_attn *a) { return a->dim_v ? a->dim_v : a->dim; }

/* Row r of a query block's output (token t0 + r / rep, head r % rep of group g), as the block's
 * queries are laid out in attn_q. */
static float *attn_row(const fwd_state *s, const fwd_attn *a, int t0, int g, int r) {
    int rep = a->n_head / a->n_head_kv;
    return cpu_row(s, a->out, t0 + r / rep) + (size_t)(g * rep + r % rep) * dim_v(a);
}

/* Which spans a block visits: cells of the sequence (full layers), or positions (sliding layers
 * keeping a ring); both in spans of KV_BLOCK (= CPU_ATTN_SPAN) starting at its multiples. */
typedef struct attn_cells {
    bool ring;
    int32_t begin, end;              /* span coordinates (cells, or positions) to visit */
} attn_cells;

static attn_cells block_cells(const fwd_state *s, int layer, int seq, int32_t lo, int32_t hi) {
    const kv_cache *kv = &s->kv;
    attn_cells c = {.ring = kv_is_ring(kv, layer)};
    if (c.ring) {
        c.begin = lo / CPU_ATTN_SPAN * CPU_ATTN_SPAN;
        c.end = hi + 1;
    } else {
        const int32_t *pos = kv_positions(kv, seq);
        int32_t n = kv_seq_len(kv, seq);
        c.begin = fwd_lower_bound(pos, n, lo) / CPU_ATTN_SPAN * CPU_ATTN_SPAN;
        c.end = fwd_lower_bound(pos, n, hi + 1);
    }
    return c;
}

/* The cells [*a, *z) of the span at c0 (nc cells, positions `label`) whose positions lie in
 * [lo, hi]: a contiguous run, since positions increase along a sequence's cells and a ring span
 * holds consecutive positions. */
static void span_range(const attn_cells *c, const int32_t *label, int32_t c0, int nc, int32_t lo, int32_t hi, int *a,
                       int *z) {
    if (c->ring) { /* cell c0 + k holds position c0 + k, when it holds it at all */
        int32_t first = lo > c0 ? lo : c0, last = hi < c0 + nc - 1 ? hi : c0 + nc - 1;
        *a = first - c0;
        *z = last >= first ? last - c0 + 1 : *a;
    } else {
        *a = fwd_lower_bound(label, nc, lo);
        *z = fwd_lower_bound(label, nc, hi + 1);
    }
}

/* Row pr's logits over its visible cells [a, z) of the span at c0: soft-capped when the model
 * caps them (the scale is then applied here), and -inf for a ring cell that holds another
 * position than its own (a gap in them). */
static void row_logits(float *pr, const attn_cells *c, const int32_t *label, int32_t c0, int a, int z, float scale,
                       float cap) {
    if (cap > 0) kernels_softcap(pr + a, z - a, scale, cap);
    for (int i = a; c->ring && i < z; i++)
        if (label[i] != c0 + i) pr[i] = -INFINITY;
}

/* H2O's accumulated attention (kv_evict.h): once a block's rows have their final maxima and sums,
 * each visible cell's softmax weight in every row, added to the cell's score. A second pass over
 * the keys recomputes the logits (the same bits as the first pass) rather than keeping every
 * span's; each weight is rounded to fixed point on its own, so a cell's score is the same integer
 * whatever block, batch or thread added its weights. */
static void add_attention_scores(fwd_state *s, const fwd_attn *at, int seq, int g, int R, const attn_cells *cells,
                                 const int32_t *lo, const int32_t *hi, cpu_thread *th) {
    kv_cache *kv = &s->kv;
    int hd = at->dim, rep = at->n_head / at->n_head_kv;
    float scale = at->scale, cap = at->softcap;
    for (int32_t c0 = cells->begin; c0 < cells->end; c0 += CPU_ATTN_SPAN) {
        int nc = cells->end - c0 < CPU_ATTN_SPAN ? cells->end - c0 : CPU_ATTN_SPAN;
        kv_span sp = kv_span_at(kv, at->layer, seq, c0);
        kv_mat keys = kv_span_keys(kv, at->layer, &sp, g, nc, th->kv_keys);
        kernels_mix(keys.type, keys.a, keys.row_bytes, hd, nc, th->attn_q, hd, R, th->scores, nc);
        memset(th->attn_score, 0, sizeof(uint64_t) * (size_t)nc);
        for (int r = 0; r < R; r++) {
            int a, z;
            span_range(cells, sp.label, c0, nc, lo[r / rep], hi[r / rep], &a, &z);
            if (z <= a) continue;
            float *pr = th->scores + (size_t)r * nc, m = th->attn_max[r];
            row_logits(pr, cells, sp.label, c0, a, z, scale, cap);
            kernels_softmax_span(pr + a, z - a, cap > 0 ? 1.0f : scale, &m); /* exp(logit - the row's maximum) */
            double w = KV_SCORE_ONE / th->attn_sum[r];
            for (int c = a; c < z; c++) th->attn_score[c] += (uint64_t)((double)pr[c] * w + 0.5);
        }
        for (int c = 0; c < nc; c++)
            if (th->attn_score[c]) kv_score_add(kv, seq, c0 + c, th->attn_score[c]);
    }
}

/* Causal attention of a block of queries: consecutive tokens t0..t0+nt-1 of one sequence, and the
 * query heads of group g, which share one KV head (GQA). Query i sees the cached positions in
 * [lo_i, pos_i]: everything up to its own position, or the last `window` of them in a sliding
 * layer (the batch's keys are already in the cache). Streaming softmax: the cells go by in spans
 * of CPU_ATTN_SPAN, each adding to running maxima, sums and outputs (rescaled when the maximum
 * grows), so no score matrix longer than a span exists whatever the context; an attention sink
 * (gpt-oss) starts the running sum as one more logit with no value. Both products go through the
 * kernels, so the block reads its keys and values once: the scores of all its queries
 * (kernels_mix over the transposed keys), then their weighted sums of the values (kernels_mix over
 * the values by cell). Each query's softmax runs over exactly its visible cells of a span, its
 * hidden cells get weight zero (which leaves its fma chains as they were), and spans sit at fixed
 * multiples of the span: a token's result is the same bits whatever block, batch, or decode
 * versus prefill computed it. */
static void attend_block(fwd_state *s, const fwd_attn *at, int t0, int nt, int g, cpu_thread *th) {
    const nc_batch_entry *e = s->entries;
    const kv_cache *kv = &s->kv;
    int hd = at->dim, hv = dim_v(at), rep = at->n_head / at->n_head_kv, R = nt * rep, seq = e[t0].seq;
    int32_t window = at->window, lo[CPU_ATTN_BLOCK], hi[CPU_ATTN_BLOCK], lo_min = INT32_MAX, hi_max = 0;
    for (int i = 0; i < nt; i++) {
        hi[i] = e[t0 + i].pos;
        lo[i] = window && hi[i] - window + 1 > 0 ? hi[i] - window + 1 : 0;
        if (at->chunk && hi[i] / at->chunk * at->chunk > lo[i]) lo[i] = hi[i] / at->chunk * at->chunk;
        lo_min = lo[i] < lo_min ? lo[i] : lo_min;
        hi_max = hi[i] > hi_max ? hi[i] : hi_max;
        const float *q = cpu_row(s, at->q, t0 + i);
        for (int r = 0; r < rep; r++)
            memcpy(th->attn_q + ((size_t)i * rep + r) * hd, q + (size_t)(g * rep + r) * at->q_stride, sizeof(float) * hd);
        memset(cpu_row(s, at->out, t0 + i) + (size_t)g * rep * hv, 0, sizeof(float) * (size_t)rep * hv);
    }
    for (int r = 0; r < R; r++) { /* a sink is a first logit whose value vector is zero */
        th->attn_max[r] = at->sinks ? at->sinks[g * rep + r % rep] : -INFINITY;
        th->attn_sum[r] = at->sinks ? 1.0 : 0.0;
    }
    attn_cells cells = block_cells(s, at->layer, seq, lo_min, hi_max);
    float scale = at->scale, cap = at->softcap;
    for (int32_t c0 = cells.begin; c0 < cells.end; c0 += CPU_ATTN_SPAN) {
        int nc = cells.end - c0 < CPU_ATTN_SPAN ? cells.end - c0 : CPU_ATTN_SPAN;
        kv_span sp = kv_span_at(kv, at->layer, seq, c0);
        const int32_t *label = sp.label;
        kv_mat keys = kv_span_keys(kv, at->layer, &sp, g, nc, th->kv_keys);
        kv_mat values = kv_span_values(kv, at->layer, &sp, g, nc, th->kv_values);
        float *p = th->scores; /* [R][nc] */
        kernels_mix(keys.type, keys.a, keys.row_bytes, hd, nc, th->attn_q, hd, R, p, nc);
        bool seen[CPU_ATTN_BLOCK];
        for (int r = 0; r < R; r++) {
            int i = r / rep, a, z; /* the row's visible cells are [a, z) of the span */
            span_range(&cells, label, c0, nc, lo[i], hi[i], &a, &z);
            if (r % rep == 0) seen[i] = z > a;
            float *pr = p + (size_t)r * nc;
            if (z <= a) {
                memset(pr, 0, sizeof(float) * (size_t)nc);
                continue;
            }
            row_logits(pr, &cells, label, c0, a, z, scale, cap);
            /* exactly the visible cells: their sums then depend on the query alone, whatever cells
             * the block around it spans */
            float m = th->attn_max[r], add = kernels_softmax_span(pr + a, z - a, cap > 0 ? 1.0f : scale, &m);
            memset(pr, 0, sizeof(float) * (size_t)a);
            memset(pr + z, 0, sizeof(float) * (size_t)(nc - z));
            float corr = expf(th->attn_max[r] - m); /* 0 on the first span without a sink */
            th->attn_sum[r] = th->attn_sum[r] * corr + add;
            th->attn_max[r] = m;
            float *out = attn_row(s, at, t0, g, r);
            if (corr != 1.0f)
                for (int d = 0; d < hv; d++) out[d] *= corr;
        }
        kernels_mix(values.type, values.a, values.row_bytes, nc, hv, p, nc, R, th->attn_part, hv);
        for (int r = 0; r < R; r++) {
            if (!seen[r / rep]) continue;
            float *out = attn_row(s, at, t0, g, r);
            const float *part = th->attn_part + (size_t)r * hv;
            for (int d = 0; d < hv; d++) out[d] += part[d];
        }
    }
    for (int r = 0; r < R; r++) {
        float inv = (float)(1.0 / th->attn_sum[r]);
        float *out = attn_row(s, at, t0, g, r);
        for (int d = 0; d < hv; d++) out[d] *= inv;
    }
    if (kv_scoring(kv, seq) && !cells.ring) add_attention_scores(s, at, seq, g, R, &cells, lo, hi, th);
}

/* Chunk c: query block c / n_head_kv, KV head c % n_head_kv; the group's output quantised for the
 * output projection when asked (the groups are whole groups of 32: cpu_init checks). */
static void attn_chunk(void *arg, int c, int ith) {
    const attn_job *j = arg;
    fwd_state *s = j->s;
    const fwd_attn *a = j->a;
    cpu_state *cpu = cpu_of(s);
    int G = a->n_head_kv, b = c / G, g = c % G, width = a->n_head * dim_v(a), span = width / G;
    int t0 = cpu->attn_blocks[b], nt = cpu->attn_blocks[b + 1] - t0;
    attend_block(s, a, t0, nt, g, &cpu->thr[ith]);
    for (int t = t0; a->quant && t < t0 + nt; t++)
        kernels_quantize_act_part(KERNELS_ACT_I16, cpu_row(s, a->out, t), width, g * span / 32, (g + 1) * span / 32,
                                  cpu_qrow(s, a->out, t, width));
}

bool cpu_attend(fwd_state *s, const fwd_attn *a, int T) {
    attn_job j = {s, a};
    pool_run_chunks(cpu_of(s)->pool,
                    &(pool_task){.chunk = attn_chunk, .arg = &j, .n_chunks = cpu_of(s)->n_attn_blocks * a->n_head_kv});
    return a->quant;
}
