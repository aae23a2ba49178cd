/* Compression windows (src/kv/kv_evict.h): which cells each policy keeps, H2O's attention scores
 * against a direct computation from the weights, and budgets on the real model. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/ggml_types.h"
#include "format/gguf.h"
#include "kv/kv_cache.h"
#include "kv/kv_evict.h"
#include "model/model.h"
#include "tensor/quant.h"
#include "test.h"
#include "test_files.h"

static char model_path[4096];

static bool same(const int32_t *a, const int32_t *b, int n) { return memcmp(a, b, sizeof *a * (size_t)n) == 0; }

static int32_t select_cells(kv_policy p, int32_t budget, int32_t recent, const uint64_t *score, int32_t len,
                            int32_t *keep) {
    nc_err err;
    kv_budget b = {p, budget, recent};
    CHECK(kv_budget_check(&b, 1000, &err) == 0);
    return kv_evict_select(&b, score, len, keep, &err);
}

/* Kept sets worked out by hand. */
static void test_select(void) {
    int32_t keep[16];
    const uint64_t score[10] = {5, 1, 9, 3, 9, 0, 2, 7, 100, 100};
    CHECK(select_cells(KV_POLICY_WINDOW, 4, 0, score, 10, keep) == 4 && same(keep, (int32_t[]){6, 7, 8, 9}, 4));
    CHECK(select_cells(KV_POLICY_SINKS, 5, 3, score, 10, keep) == 5 && same(keep, (int32_t[]){0, 1, 7, 8, 9}, 5));
    /* H2O: the last 2, then the 3 heaviest of cells 0..7: 9 (cell 2), 9 (cell 4), 7 (cell 7) */
    CHECK(select_cells(KV_POLICY_H2O, 5, 2, score, 10, keep) == 5 && same(keep, (int32_t[]){2, 4, 7, 8, 9}, 5));
    /* recent 0: the heaviest of all (100, 100, 9, 9); recent = budget: a window */
    CHECK(select_cells(KV_POLICY_H2O, 4, 0, score, 10, keep) == 4 && same(keep, (int32_t[]){2, 4, 8, 9}, 4));
    CHECK(select_cells(KV_POLICY_H2O, 3, 3, score, 10, keep) == 3 && same(keep, (int32_t[]){7, 8, 9}, 3));
    /* equal scores: the earlier cells win */
    const uint64_t ties[6] = {4, 4, 4, 4, 1, 1};
    CHECK(select_cells(KV_POLICY_H2O, 3, 1, ties, 6, keep) == 3 && same(keep, (int32_t[]){0, 1, 5}, 3));
    /* within the budget (or no policy) everything stays */
    for (kv_policy p = KV_POLICY_NONE; p <= KV_POLICY_H2O; p++)
        CHECK(select_cells(p, 10, p == KV_POLICY_NONE ? 0 : 5, score, 10, keep) == 10 &&
              same(keep, (int32_t[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 10));
    /* budgets no sequence can keep */
    nc_err err;
    kv_budget b = {KV_POLICY_H2O, 0, 0};
    CHECK(kv_budget_check(&b, 64, &err) == -1 && strstr(err.msg, "1..63") != NULL);
    b = (kv_budget){KV_POLICY_SINKS, 64, 4};
    CHECK(kv_budget_check(&b, 64, &err) == -1 && strstr(err.msg, "below the context of 64") != NULL);
    b = (kv_budget){KV_POLICY_H2O, 8, 9};
    CHECK(kv_budget_check(&b, 64, &err) == -1 && strstr(err.msg, "recent window of 9") != NULL);
    b = (kv_budget){KV_POLICY_H2O, 8, -1};
    CHECK(kv_budget_check(&b, 64, &err) == -1);
    b = (kv_budget){(kv_policy)7, 8, 1};
    CHECK(kv_budget_check(&b, 64, &err) == -1 && strstr(err.msg, "policy 7") != NULL);
    b = (kv_budget){KV_POLICY_WINDOW, 8, 99};
    CHECK(kv_budget_check(&b, 64, &err) == 0 && b.recent == 8);
}

/* Every cell of seq holds the keys and values written for its token, in every layer. */
static float key_of(int32_t t, int d) { return (float)t + 0.125f * d; }
static float val_of(int32_t t, int d) { return -(float)t - 0.25f * d; }
static bool holds(const kv_cache *kv, int32_t seq) {
    for (int32_t c = 0; c < kv_seq_len(kv, seq); c++)
        for (int l = 0; l < kv->n_layer; l++)
            for (int d = 0; d < kv->layer[l].kv_dim; d++)
                if (kv_get_k(kv, l, seq, c, d) != key_of(kv_tokens(kv, seq)[c], d) ||
                    kv_get_v(kv, l, seq, c, d) != val_of(kv_tokens(kv, seq)[c], d))
                    return false;
    return true;
}

/* Evictions move the kept cells down in runs: a window drops the first cell (runs broken at
 * every block boundary, on both ends), H2O a cell in the middle, and any subset keeps what its
 * cells held. */
static void test_moves(void) {
    kv_cache kv;
    nc_err err;
    CHECK(kv_init(&kv, &(kv_config){.n_layer = 2, .n_seq = 1, .n_ctx = 1024, .n_head_kv = 1, .head_dim = 6,
                               .type_k = GGML_TYPE_F32, .type_v = GGML_TYPE_F32, .n_cells = 0}, &err) == 0);
    for (int c = 0; c < 700; c++) {
        CHECK(kv_append(&kv, 0, c, 1000 + c, &err) == c);
        float k[6], v[6];
        for (int d = 0; d < 6; d++) k[d] = key_of(1000 + c, d), v[d] = val_of(1000 + c, d);
        for (int l = 0; l < 2; l++) kv_store(&kv, l, 0, c, c, 0, 6, k, v);
    }
    kv.seqs[0].budget = (kv_budget){KV_POLICY_WINDOW, 699, 699};
    CHECK(kv_apply_budget(&kv, 0, &err) == 0 && kv_seq_len(&kv, 0) == 699 && kv_tokens(&kv, 0)[0] == 1001);
    CHECK(holds(&kv, 0) && kv_tokens(&kv, 0)[698] == 1699 && kv_positions(&kv, 0)[255] == 256);
    for (int c = 0; c < 699; c++) kv_score_add(&kv, 0, c, c == 5 ? 1 : 10); /* H2O lets cell 5 go */
    kv.seqs[0].budget = (kv_budget){KV_POLICY_H2O, 698, 100};
    CHECK(kv_apply_budget(&kv, 0, &err) == 0 && kv_seq_len(&kv, 0) == 698 && holds(&kv, 0));
    CHECK(kv_tokens(&kv, 0)[4] == 1005 && kv_tokens(&kv, 0)[5] == 1007 && kv_positions(&kv, 0)[5] == 7);
    CHECK(kv_score(&kv, 0, 5) == 10 && kv_tokens(&kv, 0)[697] == 1699);
    int32_t cells[400], pos[400];
    int n = 0;
    for (int c = 0; c < 698 && n < 400; c += 1 + c % 3) cells[n] = c, pos[n] = kv_positions(&kv, 0)[c], n++;
    int32_t want[400];
    for (int i = 0; i < n; i++) want[i] = kv_tokens(&kv, 0)[cells[i]];
    CHECK(kv_seq_keep(&kv, 0, cells, n, pos, NULL, &err) == 0 && kv_seq_len(&kv, 0) == n && holds(&kv, 0));
    CHECK(same(kv_tokens(&kv, 0), want, n));
    kv_free(&kv);
}

/* kv_apply_budget on the cache itself: kept cells keep their positions, tokens and scores; the
 * others are gone. */
static void test_apply(void) {
    kv_cache kv;
    nc_err err;
    CHECK(kv_init(&kv, &(kv_config){.n_layer = 1, .n_seq = 2, .n_ctx = 600, .n_head_kv = 1, .head_dim = 4,
                               .type_k = GGML_TYPE_F32, .type_v = GGML_TYPE_F32, .n_cells = 0}, &err) == 0);
    const uint64_t score[10] = {5, 1, 9, 3, 9, 0, 2, 7, 100, 100};
    for (int c = 0; c < 10; c++) {
        CHECK(kv_append(&kv, 0, 2 * c, 50 + c, &err) == c);
        kv_score_add(&kv, 0, c, score[c]);
    }
    CHECK(kv_apply_budget(&kv, 0, &err) == 0 && kv_seq_len(&kv, 0) == 10); /* no budget */
    kv.seqs[0].budget = (kv_budget){KV_POLICY_H2O, 5, 2};
    CHECK(kv_apply_budget(&kv, 0, &err) == 0 && kv_seq_len(&kv, 0) == 5);
    const int32_t kept[5] = {2, 4, 7, 8, 9};
    for (int i = 0; i < 5; i++) {
        CHECK(kv_positions(&kv, 0)[i] == 2 * kept[i] && kv_tokens(&kv, 0)[i] == 50 + kept[i]);
        CHECK(kv_score(&kv, 0, i) == score[kept[i]]);
    }
    /* a copy takes the scores, a new cell starts at 0 */
    CHECK(kv_seq_copy(&kv, 0, 1, &err) == 0 && kv_score(&kv, 1, 3) == 100);
    CHECK(kv_append(&kv, 1, 30, 7, &err) == 5 && kv_score(&kv, 1, 5) == 0);
    /* a sequence past a block: cells move across blocks */
    kv_seq_truncate(&kv, 0, 0);
    for (int c = 0; c < 300; c++) {
        CHECK(kv_append(&kv, 0, c, c, &err) == c);
        kv_score_add(&kv, 0, c, c == 7 || c == 100 ? 1000 : 1);
    }
    kv.seqs[0].budget = (kv_budget){KV_POLICY_H2O, 4, 2};
    CHECK(kv_apply_budget(&kv, 0, &err) == 0 && kv_seq_len(&kv, 0) == 4);
    CHECK(same(kv_positions(&kv, 0), (int32_t[]){7, 100, 298, 299}, 4) && kv_score(&kv, 0, 1) == 1000);
    kv_free(&kv);
    /* a pool with just the blocks of a full context: the prefix index gives up the sequence's
     * first block (full, indexed) rather than wanting a copy of it */
    CHECK(kv_init(&kv, &(kv_config){.n_layer = 1, .n_seq = 1, .n_ctx = 512, .n_head_kv = 1, .head_dim = 4,
                               .type_k = GGML_TYPE_F32, .type_v = GGML_TYPE_F32, .n_cells = 512}, &err) == 0);
    for (int c = 0; c < 511; c++) CHECK(kv_append(&kv, 0, c, c, &err) == c);
    kv_commit(&kv);
    CHECK(kv.blocks[kv.seqs[0].table[0]].indexed && kv_blocks_available(&kv) == 0);
    kv.seqs[0].budget = (kv_budget){KV_POLICY_SINKS, 300, 296};
    CHECK(kv_apply_budget(&kv, 0, &err) == 0 && kv_seq_len(&kv, 0) == 300);
    CHECK(kv_positions(&kv, 0)[3] == 3 && kv_positions(&kv, 0)[4] == 511 - 296 && kv_positions(&kv, 0)[299] == 510);
    CHECK(!kv.blocks[kv.seqs[0].table[0]].indexed && kv_get_stats(&kv).used == 2);
    kv_free(&kv);
}

/* ---- a direct computation of the attention weights ---- */

static void row(const model_weight *w, int r, float *out) {
    quant_dequantize_row(w->type, (const char *)w->data + (size_t)r * w->row_bytes, out, w->cols);
}

static void matvec(const model_weight *w, const double *x, double *y) {
    float *r = malloc(sizeof(float) * (size_t)w->cols);
    for (int i = 0; i < w->rows; i++) {
        row(w, i, r);
        double s = 0;
        for (int k = 0; k < w->cols; k++) s += (double)r[k] * x[k];
        y[i] = s;
    }
    free(r);
}

static void rms_norm(const double *x, const float *w, int n, double eps, double *out) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
}

/* Rotation of the adjacent pairs (2i, 2i + 1) of a head by pos * base^(-2i / n_rot). */
static void rope(double *v, int pos, int n_rot, double base) {
    for (int i = 0; i < n_rot / 2; i++) {
        double a = pos * pow(base, -2.0 * i / n_rot), x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * cos(a) - x1 * sin(a);
        v[2 * i + 1] = x0 * sin(a) + x1 * cos(a);
    }
}

/* Llama in double from the file's weights (stories260K: no biases, no q/k norms, pairs rotated):
 * w[c] = the softmax weight every query t >= c gives token c, summed over heads and layers. */
static void direct_scores(const model *m, const int32_t *tok, int n, double *w) {
    const model_hparams *hp = &m->hp;
    int E = hp->n_embd, H = hp->n_head, hd = hp->head_dim, G = hp->n_head_kv, F = hp->n_ff, KV = G * hd;
    double *x = calloc((size_t)n * E, sizeof *x), *xn = malloc(sizeof *xn * E), *q = malloc(sizeof *q * (size_t)n * H * hd);
    double *k = malloc(sizeof *k * (size_t)n * KV), *v = malloc(sizeof *v * (size_t)n * KV);
    double *att = malloc(sizeof *att * (size_t)H * hd), *o = malloc(sizeof *o * E), *p = malloc(sizeof *p * n);
    double *g = malloc(sizeof *g * F), *u = malloc(sizeof *u * F);
    float *e = malloc(sizeof *e * E);
    for (int t = 0; t < n; t++) {
        row(&m->tok_embd, tok[t], e);
        for (int i = 0; i < E; i++) x[(size_t)t * E + i] = e[i];
    }
    for (int c = 0; c < n; c++) w[c] = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &m->layers[il];
        for (int t = 0; t < n; t++) {
            rms_norm(x + (size_t)t * E, L->attn_norm, E, hp->norm_eps, xn);
            matvec(&L->wq, xn, q + (size_t)t * H * hd);
            matvec(&L->wk, xn, k + (size_t)t * KV);
            matvec(&L->wv, xn, v + (size_t)t * KV);
            for (int h = 0; h < H; h++) rope(q + ((size_t)t * H + h) * hd, t, hp->n_rot, hp->rope[0].base);
            for (int h = 0; h < G; h++) rope(k + ((size_t)t * G + h) * hd, t, hp->n_rot, hp->rope[0].base);
        }
        for (int t = 0; t < n; t++) { /* queries in order: token t's attention, then its FFN */
            for (int h = 0; h < H; h++) {
                const double *qh = q + ((size_t)t * H + h) * hd;
                int kvh = h / (H / G);
                double mx = -INFINITY, sum = 0;
                for (int c = 0; c <= t; c++) {
                    double d = 0;
                    for (int i = 0; i < hd; i++) d += qh[i] * k[((size_t)c * G + kvh) * hd + i];
                    p[c] = d / sqrt((double)hd);
                    mx = fmax(mx, p[c]);
                }
                for (int c = 0; c <= t; c++) sum += p[c] = exp(p[c] - mx);
                for (int i = 0; i < hd; i++) att[h * hd + i] = 0;
                for (int c = 0; c <= t; c++) {
                    w[c] += p[c] / sum;
                    for (int i = 0; i < hd; i++) att[h * hd + i] += p[c] / sum * v[((size_t)c * G + kvh) * hd + i];
                }
            }
            double *xt = x + (size_t)t * E;
            matvec(&L->wo, att, o);
            for (int i = 0; i < E; i++) xt[i] += o[i];
            rms_norm(xt, L->ffn_norm, E, hp->norm_eps, xn);
            matvec(&L->ffn_gate, xn, g);
            matvec(&L->ffn_up, xn, u);
            for (int i = 0; i < F; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            double *dn = malloc(sizeof *dn * E);
            matvec(&L->ffn_down, g, dn);
            for (int i = 0; i < E; i++) xt[i] += dn[i];
            free(dn);
        }
    }
    free(x), free(xn), free(q), free(k), free(v), free(att), free(o), free(p), free(g), free(u), free(e);
}

static nc_context *new_ctx(nc_model *m, int n_ctx, int n_seq, int threads, int n_batch, bool f32) {
    nc_context *c = NULL;
    nc_err err;
    nc_context_params p = {.n_ctx = n_ctx, .n_seq_max = n_seq, .n_threads = threads, .n_batch = n_batch,
                           .type_k = f32 ? NC_CACHE_F32 : NC_CACHE_F16, .type_v = f32 ? NC_CACHE_F32 : NC_CACHE_F16};
    if (nc_context_new(&c, m, &p, &err)) fprintf(stderr, "context: %s\n", err.msg);
    return c;
}

static int prefill(nc_context *c, const int32_t *tok, int n, int seq, bool logits) {
    nc_batch_entry *b = malloc(sizeof *b * (size_t)n);
    for (int i = 0; i < n; i++) b[i] = (nc_batch_entry){tok[i], i, seq, logits};
    nc_err err;
    int r = nc_forward(c, b, n, &err);
    if (r) fprintf(stderr, "forward: %s\n", err.msg);
    free(b);
    return r;
}

/* The scores nucleus accumulates are the attention weights computed directly. */
static void test_scores_direct(nc_model *nm) {
    nc_err err;
    gguf_file *f;
    model *m;
    if (gguf_open(&f, model_path, &err) || model_bind(&m, f, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        CHECK(0);
        return;
    }
    CHECK(!m->hp.rope_neox && m->hp.n_rot == m->hp.head_dim && m->hp.attn_softcap == 0 && !m->layers[0].bq);
    enum { N = 300 }; /* two spans of the streaming softmax */
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = i ? 1 + (i * 37 + i / 7) % 511 : 1;
    double *want = malloc(sizeof(double) * N), *got = malloc(sizeof(double) * N);
    direct_scores(m, tok, N, want);
    nc_context *c = new_ctx(nm, 512, 1, 1, 512, true);
    CHECK(nc_kv_seq_set_budget(c, 0, NC_KV_H2O, 511, 8, &err) == 0);
    CHECK(prefill(c, tok, N, 0, false) == 0);
    CHECK(nc_kv_seq_attention(c, 0, got, N) == N);
    double total = 0, worst = 0;
    for (int i = 0; i < N; i++) {
        worst = fmax(worst, fabs(got[i] - want[i]) / fmax(1, want[i]));
        total += want[i];
    }
    CHECK_MSG(worst < 1e-5, "scores differ from the direct computation by %g (relative)", worst);
    CHECK_NEAR(total, N * 8 * 5, 1e-8); /* the reference itself: 300 queries x 8 heads x 5 layers */
    free(want);
    free(got);
    nc_context_free(c);
    model_free(m);
}

/* On a long sequence (two spans of the streaming softmax): every query head of every layer gives
 * a weight of 1 in all, so the scores sum to queries x heads x layers; micro-batches and threads
 * give the same integers, token-by-token decoding the same to rounding. */
static void test_scores_sum(nc_model *m) {
    enum { N = 300 };
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = i ? 1 + (i * 37 + i / 7) % 511 : 1;
    double *a = malloc(sizeof(double) * N), *b = malloc(sizeof(double) * N);
    nc_err err;
    nc_context *c1 = new_ctx(m, 512, 1, 1, 512, false), *c2 = new_ctx(m, 512, 1, 2, 7, false);
    CHECK(nc_kv_seq_set_budget(c1, 0, NC_KV_H2O, 511, 16, &err) == 0);
    CHECK(nc_kv_seq_set_budget(c2, 0, NC_KV_H2O, 511, 16, &err) == 0);
    CHECK(prefill(c1, tok, N, 0, false) == 0 && prefill(c2, tok, N, 0, false) == 0);
    CHECK(nc_kv_seq_attention(c1, 0, a, N) == N && nc_kv_seq_attention(c2, 0, b, N) == N);
    double sum = 0;
    bool equal = true;
    for (int i = 0; i < N; i++) {
        sum += a[i];
        equal = equal && a[i] == b[i];
    }
    CHECK_NEAR(sum, N * 8 * 5, 1e-4 * N * 8 * 5);
    CHECK_MSG(equal, "2 threads and micro-batches of 7 give other scores");
    nc_kv_seq_clear(c2, 0);
    for (int i = 0; i < N; i++) {
        nc_batch_entry e = {tok[i], i, 0, false};
        CHECK(nc_forward(c2, &e, 1, &err) == 0);
    }
    CHECK(nc_kv_seq_attention(c2, 0, b, N) == N);
    double worst = 0;
    for (int i = 0; i < N; i++) worst = fmax(worst, fabs(a[i] - b[i]) / fmax(1, a[i]));
    CHECK_MSG(worst < 1e-4, "decode and prefill scores differ by %g", worst);
    nc_context_free(c1);
    nc_context_free(c2);
    free(a);
    free(b);
}

/* A budget the sequence never exceeds changes no logit; one it exceeds keeps the cells the
 * policy says, at their positions. */
static void test_budgets(nc_model *m, int V) {
    enum { N = 40 };
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = i ? 1 + (i * 53 + i / 3) % 511 : 1;
    nc_err err;
    nc_context *ref = new_ctx(m, 64, 1, 1, 512, false);
    for (kv_policy p = KV_POLICY_WINDOW; p <= KV_POLICY_H2O; p++) {
        nc_context *c = new_ctx(m, 64, 1, 2, 512, false);
        CHECK(nc_kv_seq_set_budget(c, 0, (nc_kv_policy)p, N, 4, &err) == 0);
        nc_kv_seq_clear(ref, 0);
        bool equal = true;
        for (int i = 0; i < N; i++) {
            nc_batch_entry e = {tok[i], i, 0, true};
            CHECK(nc_forward(c, &e, 1, &err) == 0 && nc_forward(ref, &e, 1, &err) == 0);
            equal = equal && memcmp(nc_logits(c, 0), nc_logits(ref, 0), sizeof(float) * (size_t)V) == 0;
        }
        CHECK_MSG(equal, "policy %d within its budget moved the logits", (int)p);
        CHECK(nc_kv_seq_len(c, 0) == N);
        nc_context_free(c);
    }
    nc_context_free(ref);

    /* sequence 0 scores without evicting, sequence 1 (same tokens, same batch) keeps 12 under H2O
     * with 4 recent: the 8 heaviest of sequence 0's cells 0..35, then 36..39 */
    nc_context *c = new_ctx(m, 64, 2, 2, 512, false);
    CHECK(nc_kv_seq_set_budget(c, 0, NC_KV_H2O, 63, 4, &err) == 0 && nc_kv_seq_set_budget(c, 1, NC_KV_H2O, 12, 4, &err) == 0);
    nc_batch_entry b[2 * N];
    for (int i = 0; i < N; i++) {
        b[i] = (nc_batch_entry){tok[i], i, 0, false};
        b[N + i] = (nc_batch_entry){tok[i], i, 1, false};
    }
    CHECK(nc_forward(c, b, 2 * N, &err) == 0);
    double s0[N], s1[N];
    CHECK(nc_kv_seq_attention(c, 0, s0, N) == N && nc_kv_seq_attention(c, 1, s1, N) == 12);
    bool chosen[N] = {false};
    for (int k = 0; k < 8; k++) { /* the heaviest not yet chosen, the earlier on ties */
        int best = -1;
        for (int i = 0; i < N - 4; i++)
            if (!chosen[i] && (best < 0 || s0[i] > s0[best])) best = i;
        chosen[best] = true;
    }
    for (int i = N - 4; i < N; i++) chosen[i] = true;
    int k = 0;
    bool kept = true;
    for (int i = 0; i < N; i++) {
        if (!chosen[i]) continue;
        kept = kept && s1[k] == s0[i];
        k++;
    }
    CHECK_MSG(k == 12 && kept, "H2O kept other cells than the 8 heaviest and the 4 recent");
    /* one more token: one more cell goes */
    nc_batch_entry next = {tok[0], N, 1, true};
    CHECK(nc_forward(c, &next, 1, &err) == 0 && nc_kv_seq_len(c, 1) == 12 && nc_kv_seq_len(c, 0) == N);
    nc_context_free(c);
}

/* nc_generate under a budget goes on at the positions of the text (past the gaps evictions
 * leave): its greedy tokens are those of a decode driven by hand, token by token at positions
 * 0.., with the same budget (4 sinks and a window of 28). */
static void test_generate(nc_model *m, int V) {
    enum { P = 6, G = 120 };
    int32_t prompt[P] = {1, 403, 407, 261, 378, 306}, want[G];
    nc_err err;
    nc_context *c = new_ctx(m, 256, 1, 2, 512, false);
    CHECK(nc_kv_seq_set_budget(c, 0, NC_KV_SINKS, 32, 28, &err) == 0);
    nc_batch_entry b[P];
    for (int i = 0; i < P; i++) b[i] = (nc_batch_entry){prompt[i], i, 0, i == P - 1};
    CHECK_MSG(nc_forward(c, b, P, &err) == 0, "prefill: %s", err.msg);
    for (int t = 0; t < G; t++) {
        const float *l = nc_logits(c, t == 0 ? P - 1 : 0); /* the entry of the batch */
        int best = -1; /* end-of-generation tokens banned, as ignore_eos does */
        for (int v = 0; v < V; v++)
            if (!nc_token_is_eog(m, v) && (best < 0 || l[v] > l[best])) best = v;
        want[t] = best;
        nc_batch_entry e = {best, P + t, 0, true};
        CHECK_MSG(nc_forward(c, &e, 1, &err) == 0, "step %d: %s", t, err.msg);
    }
    CHECK(nc_kv_seq_len(c, 0) == 32 && nc_kv_seq_pos_next(c, 0) == P + G);
    nc_kv_seq_clear(c, 0);
    nc_gen_params gp = {.stop = {.max_tokens = G}};
    nc_sampler_params_default(&gp.sampling);
    gp.sampling.temp = 0;
    gp.sampling.ignore_eos = true;
    nc_gen_result r;
    CHECK_MSG(nc_generate(c, m, prompt, P, &gp, NULL, NULL, &r, &err) == 0, "%s", err.msg);
    CHECK_MSG(r.n_samples == 1 && r.samples[0].n_tokens == G && same(r.samples[0].tokens, want, G),
              "nc_generate under a budget left the hand-driven decode");
    nc_gen_result_free(&r);
    nc_context_free(c);
}

/* Gemma 2 (shared/archs: 2 sliding layers with a window of 8, 2 full ones, 4 heads, soft-capped
 * attention): where the sliding layers keep rings (a context of 1024, micro-batches of 16: rings
 * of 256 cells) they do not vote, so 300 queries give 300 x 4 x 2; where they keep every cell (a
 * context of 512 and micro-batches of 512) they vote over their window, 300 x 4 x 4. Under a
 * budget the rings follow the kept cells. */
static void test_sliding(void) {
    nc_model *m = test_load_model("archs/gemma2/gemma2-f16.gguf");
    if (!m) return;
    nc_err err;
    nc_model_info info;
    nc_model_get_info(m, &info);
    CHECK(info.n_layer == 4 && info.n_head == 4 && info.swa_window == 8);
    enum { N = 300 };
    int32_t tok[N + 40];
    for (int i = 0; i < N + 40; i++) tok[i] = i ? 3 + (i * 37 + i / 7) % (info.n_vocab - 3) : 2;
    double *s = malloc(sizeof(double) * N);
    for (int ring = 0; ring < 2; ring++) {
        nc_context *c = new_ctx(m, ring ? 1024 : 512, 1, 2, ring ? 16 : 512, false);
        CHECK(nc_kv_seq_set_budget(c, 0, NC_KV_H2O, N, 8, &err) == 0);
        CHECK(prefill(c, tok, N, 0, false) == 0 && nc_kv_seq_attention(c, 0, s, N) == N);
        double sum = 0;
        for (int i = 0; i < N; i++) sum += s[i];
        double want = N * 4.0 * (ring ? 2 : 4);
        CHECK_MSG(fabs(sum - want) < 1e-4 * want, "gemma2 (rings %d): scores sum to %g, not %g", ring, sum, want);
        CHECK(nc_kv_seq_set_budget(c, 0, NC_KV_H2O, 32, 12, &err) == 0);
        for (int i = N; i < N + 40; i++) {
            nc_batch_entry e = {tok[i], i, 0, true};
            CHECK(nc_forward(c, &e, 1, &err) == 0 && nc_kv_seq_len(c, 0) == 32);
        }
        nc_context_free(c);
    }
    free(s);
    nc_model_free(m);
}

int main(void) {
    snprintf(model_path, sizeof model_path, "%s/models/stories260K/stories260K.gguf", test_shared_dir());
    test_select();
    test_apply();
    test_moves();
    nc_model *m = test_load_model("models/stories260K/stories260K.gguf");
    if (!m) return test_summary("kv_evict");
    nc_model_info info;
    nc_model_get_info(m, &info);
    CHECK(info.n_layer == 5 && info.n_head == 8);
    test_scores_direct(m);
    test_scores_sum(m);
    test_budgets(m, info.n_vocab);
    test_generate(m, info.n_vocab);
    nc_model_free(m);
    test_sliding();
    return test_summary("kv_evict");
}
