/* The CUDA backend's operations (cuda/cuda.h) against float64 references computed here: every
 * weight layout of the products (and a type uploaded as F32), norms, rotation, the activation,
 * the cache's writes, attention across spans with GQA and per-token visibility, and device
 * copies. Also the determinism promise: a token's outputs are the same bits whatever the batch.
 * Built twice: emulated on the CPU (build/emu/tests, in make test) and for the GPU
 * (build/cuda/tests, make cuda-tests), which skips, saying so, when no GPU is found. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda.h"
#include "format/ggml_types.h"
#include "kernels/kernels.h"
#include "tensor/quant.h"
#include "test.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static cu_dev *dev;

static void *dup_to_dev(const void *src, size_t bytes) {
    nc_err err;
    void *p = cu_alloc(dev, bytes, &err);
    if (!p || cu_put(dev, p, src, bytes, &err)) {
        fprintf(stderr, "device copy: %s\n", err.msg);
        exit(1);
    }
    return p;
}

static void from_dev(void *dst, const void *src, size_t bytes) {
    nc_err err;
    if (cu_sync(dev, &err) || cu_get(dev, dst, src, bytes, &err)) {
        fprintf(stderr, "device read: %s\n", err.msg);
        exit(1);
    }
}

/* ---- products ---- */

/* Random blocks of the types no writer makes: random bytes, with their f16 scales set to
 * numbers of about 1 / 64. */
static void random_blocks(uint32_t type, uint8_t *row, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) row[i] = (uint8_t)(frand() * 128 + 128);
    size_t bb = quant_type_of(type)->block_bytes;
    for (size_t b = 0; b < bytes; b += bb) {
        size_t at[2] = {0, 0};
        int n = 0;
        if (type == GGML_TYPE_Q2_K) at[n++] = offsetof(block_Q2_K, d), at[n++] = offsetof(block_Q2_K, dmin);
        if (type == GGML_TYPE_IQ4_XS) at[n++] = offsetof(block_IQ4_XS, d);
        if (type == GGML_TYPE_IQ3_S) at[n++] = offsetof(block_IQ3_S, d);
        for (int i = 0; i < n; i++) {
            uint16_t h = quant_f32_to_fp16((1.0f + frand()) / 64);
            row[b + at[i]] = (uint8_t)h, row[b + at[i] + 1] = (uint8_t)(h >> 8);
        }
    }
}

/* What the CPU's kernels give for the T tokens of x (their default mode, int16 activations):
 * the quantised products' definition (kernels_impl.h), which the GPU's must match bit for bit. */
static void cpu_mul(uint32_t type, const uint8_t *wq, size_t rb, int rows, int cols, const float *x, int T, float *y) {
    size_t ab = kernels_act_bytes(KERNELS_ACT_I16, cols);
    uint8_t *xq = aligned_alloc(64, ab * (size_t)T);
    for (int t = 0; t < T; t++) kernels_quantize_act(KERNELS_ACT_I16, x + (size_t)t * cols, cols, xq + ab * (size_t)t);
    kernels_mul(type, wq, rb, cols, x, KERNELS_ACT_I16, xq, T, y, rows, 0, rows, 0, NULL);
    free(xq);
}

/* T tokens of x times a rows x cols matrix of `type`: the quantised types against the CPU kernels'
 * bits, the float ones against float64; token 5 alone against the batch. */
static void test_mul_t(uint32_t type, int rows, int cols, int T) {
    size_t rb = quant_row_bytes(type, cols);
    uint8_t *wq = malloc((size_t)rows * rb);
    float *w = malloc((size_t)rows * cols * sizeof *w), *x = malloc((size_t)T * cols * sizeof *x);
    float *bias = malloc((size_t)rows * sizeof *bias), *y0 = malloc((size_t)T * rows * sizeof *y0);
    float *y = malloc((size_t)T * rows * sizeof *y), *y1 = malloc((size_t)rows * sizeof *y1);
    for (int i = 0; i < rows * cols; i++) w[i] = frand();
    const quant_type *qt = quant_type_of(type);
    for (int r = 0; r < rows; r++) {
        if (qt->quantize)
            CHECK(quant_quantize_row(type, w + (size_t)r * cols, wq + (size_t)r * rb, cols));
        else
            random_blocks(type, wq + (size_t)r * rb, rb);
        quant_dequantize_row(type, wq + (size_t)r * rb, w + (size_t)r * cols, cols); /* the exact weights */
    }
    for (int i = 0; i < T * cols; i++) x[i] = frand();
    for (int r = 0; r < rows; r++) bias[r] = frand();
    for (int i = 0; i < T * rows; i++) y0[i] = frand();
    /* the quantised types give the CPU's bits */
    bool exact = qt->group != NULL;
    float *cpu = malloc((size_t)T * rows * sizeof *cpu);
    if (exact) cpu_mul(type, wq, rb, rows, cols, x, T, cpu);
    nc_err err;
    cu_mat m;
    int rc = cu_upload(dev, &m, wq, type, rows, cols, rb, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    float *dx = dup_to_dev(x, (size_t)T * cols * 4), *dy = dup_to_dev(y0, (size_t)T * rows * 4);
    float *db = dup_to_dev(bias, (size_t)rows * 4), *dy1 = dup_to_dev(y0, (size_t)rows * 4);
    for (int pass = 0; pass < 2; pass++) { /* plain; then added to y0 with bias and scale */
        bool add = pass == 1;
        float scale = add ? 0.75f : 1.0f;
        if (add) CHECK(cu_put(dev, dy, y0, (size_t)T * rows * 4, &err) == 0);
        cu_mul(dev, &m, dx, cols, T, dy, rows, add ? db : NULL, add, scale);
        from_dev(y, dy, (size_t)T * rows * 4);
        int bad = 0;
        for (int t = 0; t < T; t++)
            for (int r = 0; r < rows; r++) {
                double got = y[t * rows + r];
                if (exact) { /* the same float operations as the kernel's store */
                    float v = scale * (cpu[t * rows + r] + (add ? bias[r] : 0.0f)), want = add ? y0[t * rows + r] + v : v;
                    if (memcmp(&y[t * rows + r], &want, sizeof want) != 0 && bad++ < 3)
                        fprintf(stderr, "type %u %dx%d add %d: y[%d][%d] = %.9g, the CPU's %.9g\n", type, rows, cols, add, t,
                                r, got, want);
                    continue;
                }
                double s = 0, mag = 0;
                for (int k = 0; k < cols; k++) {
                    s += (double)w[(size_t)r * cols + k] * x[(size_t)t * cols + k];
                    mag += fabs((double)w[(size_t)r * cols + k] * x[(size_t)t * cols + k]);
                }
                double want = add ? y0[t * rows + r] + scale * (s + bias[r]) : s;
                if (!(fabs(got - want) <= 2e-6 * (mag + 1)) && bad++ < 3)
                    fprintf(stderr, "type %u %dx%d add %d: y[%d][%d] = %.9g, want %.9g\n", type, rows, cols, add, t, r, got, want);
            }
        CHECK_MSG(bad == 0, "type %u %dx%d add %d: %d wrong", type, rows, cols, add, bad);
        /* token 5 alone gives the same bits as in the batch of 13 */
        if (add) CHECK(cu_put(dev, dy1, y0 + 5 * rows, (size_t)rows * 4, &err) == 0);
        cu_mul(dev, &m, dx + 5 * cols, cols, 1, dy1, rows, add ? db : NULL, add, scale);
        from_dev(y1, dy1, (size_t)rows * 4);
        CHECK_MSG(memcmp(y1, y + 5 * rows, (size_t)rows * 4) == 0, "type %u add %d: a token alone differs from the batch",
                  type, add);
    }
    cu_mat_free(dev, &m);
    cu_free(dev, dx);
    cu_free(dev, dy);
    cu_free(dev, db);
    cu_free(dev, dy1);
    free(wq), free(w), free(x), free(bias), free(y0), free(y), free(y1), free(cpu);
}

/* cu_mul_n: products of one input give what each gives alone (of one token: those of one type
 * share a launch, here a Q8_0 and a Q4_0 pair of 40 and 13 rows and an F16 between). */
static void test_mul_n(int T) {
    enum { TMAX = 5, R = 40, C = 128, N = 5 };
    static const uint32_t types[N] = {GGML_TYPE_Q8_0, GGML_TYPE_F16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0};
    static const int rows[N] = {R, R, R, 13, R};
    float w[R * C], x[TMAX * C], alone[TMAX * R], together[TMAX * R];
    uint8_t wq[R * C * 2];
    for (int i = 0; i < T * C; i++) x[i] = frand();
    float *dx = dup_to_dev(x, sizeof x), *dy[N];
    cu_mat m[N];
    cu_out out[N];
    nc_err err;
    for (int k = 0; k < N; k++) {
        size_t rb = quant_row_bytes(types[k], C);
        for (int i = 0; i < R * C; i++) w[i] = frand();
        for (int r = 0; r < rows[k]; r++) quant_quantize_row(types[k], w + r * C, wq + r * rb, C);
        CHECK(cu_upload(dev, &m[k], wq, types[k], rows[k], C, rb, &err) == 0);
        dy[k] = dup_to_dev(x, sizeof alone);
        out[k] = (cu_out){&m[k], dy[k], rows[k], NULL, false, 1.0f};
    }
    cu_mul_n(dev, dx, C, T, out, N, false);
    for (int k = 0; k < N; k++) {
        size_t n = (size_t)T * rows[k] * sizeof(float);
        from_dev(together, dy[k], n);
        cu_mul(dev, &m[k], dx, C, T, dy[k], rows[k], NULL, false, 1.0f);
        from_dev(alone, dy[k], n);
        CHECK_MSG(memcmp(alone, together, n) == 0, "cu_mul_n, %d tokens, type %u: differs from cu_mul", T, types[k]);
        cu_mat_free(dev, &m[k]);
        cu_free(dev, dy[k]);
    }
    cu_free(dev, dx);
}

/* cu_rms_norm and cu_glu that quantise their output for the products (ready) give the products
 * cu_mul_n gives when it quantises the same input itself, for one token and for 9. */
static void test_ready(int T) {
    enum { TMAX = 9, R = 24, C = 96 };
    float x[TMAX * C], u[TMAX * C], nw[C], w[R * C], alone[TMAX * R], fused[TMAX * R];
    uint8_t wq[R * C];
    for (int i = 0; i < TMAX * C; i++) x[i] = frand(), u[i] = frand();
    for (int i = 0; i < C; i++) nw[i] = frand();
    for (int i = 0; i < R * C; i++) w[i] = frand();
    size_t rb = quant_row_bytes(GGML_TYPE_Q4_0, C);
    for (int r = 0; r < R; r++) quant_quantize_row(GGML_TYPE_Q4_0, w + r * C, wq + r * rb, C);
    nc_err err;
    cu_mat m;
    CHECK(cu_upload(dev, &m, wq, GGML_TYPE_Q4_0, R, C, rb, &err) == 0);
    float *dx = dup_to_dev(x, sizeof x), *du = dup_to_dev(u, sizeof u), *dw = dup_to_dev(nw, sizeof nw);
    float *dn = dup_to_dev(x, sizeof x), *dy = dup_to_dev(alone, sizeof alone);
    cu_out o = {&m, dy, R, NULL, false, 1.0f};
    size_t n = (size_t)T * R * sizeof(float);
    for (int glu = 0; glu < 2; glu++) {
        for (int ready = 0; ready < 2; ready++) {
            if (glu)
                cu_glu(dev, KERNELS_SILU, dn, dx, du, T, C, C, 1, ready);
            else
                cu_rms_norm(dev, dn, dx, NULL, dw, C, T, 1e-5f, ready);
            cu_mul_n(dev, dn, C, T, &o, 1, ready);
            from_dev(ready ? fused : alone, dy, n);
        }
        CHECK_MSG(memcmp(alone, fused, n) == 0, "%s quantised for %d tokens: the products differ", glu ? "glu" : "rms_norm", T);
    }
    cu_mat_free(dev, &m);
    cu_free(dev, dx), cu_free(dev, du), cu_free(dev, dw), cu_free(dev, dn), cu_free(dev, dy);
}

/* ---- norms, rotation, activation ---- */

static void test_rms_norm(void) {
    enum { T = 3, N = 300 };
    float x[T * N], w[N], y[T * N];
    for (int i = 0; i < T * N; i++) x[i] = frand() * 3;
    for (int i = 0; i < N; i++) w[i] = frand();
    int32_t rows[2] = {2, 0};
    float *dx = dup_to_dev(x, sizeof x), *dw = dup_to_dev(w, sizeof w), *dy = dup_to_dev(x, sizeof x);
    int32_t *drows = dup_to_dev(rows, sizeof rows);
    cu_rms_norm(dev, dy, dx, drows, dw, N, 2, 1e-5f, false);
    from_dev(y, dy, 2 * N * sizeof(float));
    for (int i = 0; i < 2; i++) {
        const float *xr = x + rows[i] * N;
        double ss = 0;
        for (int k = 0; k < N; k++) ss += (double)xr[k] * xr[k];
        double sc = 1.0 / sqrt(ss / N + 1e-5);
        int bad = 0;
        for (int k = 0; k < N; k++) bad += fabs(y[i * N + k] - xr[k] * sc * w[k]) > 1e-6 * (fabs(xr[k] * sc * w[k]) + 1e-3);
        CHECK_MSG(bad == 0, "rms_norm row %d: %d wrong", i, bad);
    }
    cu_rms_norm(dev, dy, dx, NULL, NULL, N, T, 1e-5f, false); /* no weight: a copy */
    from_dev(y, dy, sizeof y);
    CHECK(memcmp(x, y, sizeof x) == 0);
    cu_free(dev, dx), cu_free(dev, dw), cu_free(dev, dy), cu_free(dev, drows);
}

/* The gated activations against their definitions in double: SiLU, GELU's tanh form, gpt-oss's
 * clamped SiLU with its slope and the +1 on the linear part. */
static void test_glu(kernels_glu act) {
    enum { N = 1000 };
    float g[N], u[N], y[N];
    for (int i = 0; i < N; i++) g[i] = 10 * frand(), u[i] = 10 * frand();
    float *dg = dup_to_dev(g, sizeof g), *du = dup_to_dev(u, sizeof u);
    cu_glu(dev, act, dg, dg, du, 1, N, N, 1, false); /* in place, as the forward pass does */
    from_dev(y, dg, sizeof y);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double x = g[i], v = u[i], want;
        if (act == KERNELS_SILU) want = x / (1 + exp(-x)) * v;
        else if (act == KERNELS_GELU_TANH) want = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) * v;
        else {
            x = x < 7 ? x : 7;
            v = v < -7 ? -7 : v > 7 ? 7 : v;
            want = x / (1 + exp(-1.702 * x)) * (v + 1);
        }
        bad += fabs(y[i] - want) > 2e-6 * (fabs(want) + 1e-3);
    }
    CHECK_MSG(bad == 0, "glu %d: %d wrong", (int)act, bad);
    cu_free(dev, dg), cu_free(dev, du);
}

/* x += scale * RMSNorm(o) * w. */
static void test_norm_add(void) {
    enum { T = 2, N = 96 };
    float x[T * N], o[T * N], w[N], y[T * N];
    for (int i = 0; i < T * N; i++) x[i] = frand(), o[i] = 5 * frand();
    for (int i = 0; i < N; i++) w[i] = frand();
    float *dx = dup_to_dev(x, sizeof x), *dout = dup_to_dev(o, sizeof o), *dw = dup_to_dev(w, sizeof w);
    cu_norm_add(dev, dx, dout, dw, N, T, 1e-6f, 0.5f);
    from_dev(y, dx, sizeof y);
    int bad = 0;
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int k = 0; k < N; k++) ss += (double)o[t * N + k] * o[t * N + k];
        double inv = 1 / sqrt(ss / N + 1e-6);
        for (int k = 0; k < N; k++) bad += fabs(y[t * N + k] - (x[t * N + k] + 0.5 * o[t * N + k] * inv * w[k])) > 1e-6;
    }
    CHECK_MSG(bad == 0, "norm_add: %d wrong", bad);
    cu_free(dev, dx), cu_free(dev, dout), cu_free(dev, dw);
}

/* ---- the cache and attention ---- */

/* Row i of a cache of `type` as kv_cache.c stores it (quant_quantize_row), and read back. */
static bool cache_row(uint32_t type, const float *x, int n, uint8_t *row, float *back) {
    if (!quant_quantize_row(type, x, row, n)) return false;
    quant_dequantize_row(type, row, back, n);
    return true;
}

/* One cu_kv_store with RoPE: queries and keys rotated in place (against float64, rotating 24 of
 * each head's 32 dimensions), then the rotated keys and the values stored in a cache of `type`
 * (kv_cache.c's bytes for the rotated keys the GPU gives back). */
static void test_rope_store(bool neox, uint32_t type) {
    enum { T = 2, H = 3, HKV = 2, HD = 32, ROT = 24, HALF = ROT / 2, LDQ = H * HD + 4, KVD = HKV * HD, LD = KVD + 4, SLOTS = 4 };
    float q[T * LDQ], k[T * LD], v[T * LD], gq[T * LDQ], gk[T * LD], cs[T * HALF], sn[T * HALF];
    for (int i = 0; i < T * LDQ; i++) q[i] = frand();
    for (int i = 0; i < T * LD; i++) k[i] = frand(), v[i] = frand();
    for (int i = 0; i < T * HALF; i++) {
        double a = 3 * frand();
        cs[i] = (float)cos(a), sn[i] = (float)sin(a);
    }
    int32_t cells[T] = {3, 1};
    size_t rb = cu_row_bytes(type, KVD);
    nc_err err;
    cu_cache cc = {cu_alloc(dev, SLOTS * rb, &err), cu_alloc(dev, SLOTS * rb, &err), type, type, KVD};
    float *dq = dup_to_dev(q, sizeof q), *dk = dup_to_dev(k, sizeof k), *dv = dup_to_dev(v, sizeof v);
    float *dc = dup_to_dev(cs, sizeof cs), *ds = dup_to_dev(sn, sizeof sn);
    int32_t *dcells = dup_to_dev(cells, sizeof cells);
    cu_rope rope = {HD, ROT, neox, dc, ds};
    cu_kv_store(dev, cc, &rope, dq, LDQ, H, dk, dv, LD, T, dcells);
    from_dev(gq, dq, sizeof gq);
    from_dev(gk, dk, sizeof gk);
    int bad = 0;
    for (int x = 0; x < 2; x++) { /* the queries, then the keys */
        const float *in = x ? k : q, *got = x ? gk : gq;
        int ld = x ? LD : LDQ, heads = x ? HKV : H;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < ld; j++) {
                int h = j / HD, e = j % HD, i = neox ? e % (ROT / 2) : e / 2;
                double want = in[t * ld + j];
                if (h < heads && e < ROT) { /* a rotated pair's element */
                    int a = neox ? i : 2 * i, b = neox ? i + HALF : 2 * i + 1;
                    double x0 = in[t * ld + h * HD + a], x1 = in[t * ld + h * HD + b], c = cs[t * HALF + i], s = sn[t * HALF + i];
                    want = e == a ? x0 * c - x1 * s : x0 * s + x1 * c;
                }
                bad += !(fabs(got[t * ld + j] - want) <= 1e-6);
            }
    }
    CHECK_MSG(bad == 0, "rope neox %d: %d wrong", neox, bad);
    uint8_t rows[SLOTS * 2 * KVD * 4], want[KVD * 4]; /* rows of F32 at most */
    float back[KVD];
    from_dev(rows, cc.k, SLOTS * rb);
    from_dev(rows + SLOTS * rb, cc.v, SLOTS * rb);
    for (int t = 0; t < T; t++) {
        CHECK(cache_row(type, gk + t * LD, KVD, want, back));
        CHECK_MSG(memcmp(rows + cells[t] * rb, want, rb) == 0, "rope_store type %u: token %d's keys differ from kv_cache.c's", type, t);
        CHECK(cache_row(type, v + t * LD, KVD, want, back));
        CHECK_MSG(memcmp(rows + (SLOTS + cells[t]) * rb, want, rb) == 0, "rope_store type %u: token %d's values differ", type, t);
    }
    cu_free(dev, cc.k), cu_free(dev, cc.v), cu_free(dev, dq), cu_free(dev, dk), cu_free(dev, dv);
    cu_free(dev, dc), cu_free(dev, ds), cu_free(dev, dcells);
}

/* Keys and values of types tk / tv stored into a cache (the same bytes as kv_cache.c's rows),
 * then attention over them: cap > 0 soft-caps the scores, window lets each token see only its
 * last `window` cells. */
static void test_attention(int head_dim, float cap, int window, uint32_t tk, uint32_t tv) {
    enum { SLOTS = 600, NH = 4, NKV = 2, T = 3 };
    int kvd = NKV * head_dim, qd = NH * head_dim;
    size_t kr = cu_row_bytes(tk, kvd), vr = cu_row_bytes(tv, kvd);
    float *k = malloc((size_t)SLOTS * kvd * 4), *v = malloc((size_t)SLOTS * kvd * 4), *q = malloc((size_t)T * qd * 4);
    float *ks = malloc((size_t)SLOTS * kvd * 4), *vs = malloc((size_t)SLOTS * kvd * 4); /* as stored */
    uint8_t *krows = malloc((size_t)SLOTS * kr), *vrows = malloc((size_t)SLOTS * vr), *got_rows = malloc((size_t)SLOTS * kr);
    float *out = malloc((size_t)T * qd * 4);
    int32_t slot[SLOTS], perm[SLOTS];
    for (int i = 0; i < SLOTS * kvd; i++) k[i] = frand(), v[i] = frand();
    bool written = true;
    for (int i = 0; i < SLOTS; i++) {
        written &= cache_row(tk, k + (size_t)i * kvd, kvd, krows + (size_t)i * kr, ks + (size_t)i * kvd);
        written &= cache_row(tv, v + (size_t)i * kvd, kvd, vrows + (size_t)i * vr, vs + (size_t)i * kvd);
    }
    CHECK(written);
    for (int i = 0; i < T * qd; i++) q[i] = frand() * 2;
    for (int i = 0; i < SLOTS; i++) slot[i] = i, perm[i] = i;
    for (int i = SLOTS - 1; i > 0; i--) { /* the cells a sequence sees, in a scattered order */
        int j = (int)((frand() + 1) / 2 * (i + 1)) % (i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int32_t n_vis[T] = {1, 130, 300}, vis_off[T] = {0, 0, 0}, vis_lo[T];
    for (int t = 0; t < T; t++) vis_lo[t] = window && n_vis[t] > window ? n_vis[t] - window : 0;
    float *dk = dup_to_dev(k, (size_t)SLOTS * kvd * 4), *dv = dup_to_dev(v, (size_t)SLOTS * kvd * 4);
    float *dq = dup_to_dev(q, (size_t)T * qd * 4), *dout = dup_to_dev(out, (size_t)T * qd * 4);
    int32_t *dslot = dup_to_dev(slot, sizeof slot), *dvis = dup_to_dev(perm, sizeof perm);
    int32_t *dn = dup_to_dev(n_vis, sizeof n_vis), *doff = dup_to_dev(vis_off, sizeof vis_off);
    int32_t *dlo = dup_to_dev(vis_lo, sizeof vis_lo);
    nc_err err;
    cu_cache cc = {cu_alloc(dev, (size_t)SLOTS * kr, &err), cu_alloc(dev, (size_t)SLOTS * vr, &err), tk, tv, kvd};
    cu_kv_store(dev, cc, NULL, NULL, 0, 0, dk, dv, kvd, SLOTS, dslot);
    float scale = 1.0f / sqrtf((float)head_dim);
    cu_attention(dev, dout, dq, cc, T, NH, head_dim, scale, cap, NULL, dvis, doff, window ? dlo : NULL, dn, false);
    from_dev(out, dout, (size_t)T * qd * 4);
    /* quantised for the products too (when head_dim is whole groups): a Q4_0 product of it then
     * gives what it gives when it quantises the output itself */
    bool quantised =
        cu_attention(dev, dout, dq, cc, T, NH, head_dim, scale, cap, NULL, dvis, doff, window ? dlo : NULL, dn, true);
    CHECK(quantised == (head_dim % 32 == 0));
    if (quantised) {
        enum { R = 9 };
        float *w = malloc((size_t)R * qd * 4), y[2][T * R];
        uint8_t *wq = malloc((size_t)R * qd);
        for (int i = 0; i < R * qd; i++) w[i] = frand();
        size_t rb = quant_row_bytes(GGML_TYPE_Q4_0, qd);
        for (int r = 0; r < R; r++) quant_quantize_row(GGML_TYPE_Q4_0, w + (size_t)r * qd, wq + r * rb, qd);
        cu_mat m;
        CHECK(cu_upload(dev, &m, wq, GGML_TYPE_Q4_0, R, qd, rb, &err) == 0);
        float *dy = dup_to_dev(y, sizeof y[0]);
        cu_out o = {&m, dy, R, NULL, false, 1.0f};
        for (int ready = 1; ready >= 0; ready--) { /* the attention's quantisation first: the last thing to write it */
            cu_mul_n(dev, dout, qd, T, &o, 1, ready);
            from_dev(y[ready], dy, sizeof y[0]);
        }
        CHECK_MSG(memcmp(y[0], y[1], sizeof y[0]) == 0, "attention, head_dim %d, quantised: the products differ", head_dim);
        cu_mat_free(dev, &m);
        cu_free(dev, dy);
        free(w), free(wq);
    }
    from_dev(got_rows, cc.k, (size_t)SLOTS * kr);
    CHECK_MSG(memcmp(got_rows, krows, (size_t)SLOTS * kr) == 0, "kv_store: keys of type %u differ from kv_cache.c's rows", tk);
    int bad = 0;
    double *p = malloc(SLOTS * sizeof *p);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            double mx = -INFINITY, sum = 0;
            for (int c = vis_lo[t]; c < n_vis[t]; c++) {
                const float *kv = ks + (size_t)perm[c] * kvd + g * head_dim;
                double s = 0;
                for (int d = 0; d < head_dim; d++) s += (double)q[t * qd + h * head_dim + d] * kv[d];
                p[c] = cap > 0 ? cap * tanh(s * scale / cap) : s * scale;
                if (p[c] > mx) mx = p[c];
            }
            for (int c = vis_lo[t]; c < n_vis[t]; c++) sum += p[c] = exp(p[c] - mx);
            for (int d = 0; d < head_dim; d++) {
                double o = 0;
                for (int c = vis_lo[t]; c < n_vis[t]; c++) o += p[c] / sum * vs[(size_t)perm[c] * kvd + g * head_dim + d];
                double got = out[t * qd + h * head_dim + d];
                if (fabs(got - o) > 2e-5) {
                    if (bad++ < 3) fprintf(stderr, "attention hd %d: token %d head %d dim %d: %.8g, want %.8g\n", head_dim, t, h, d, got, o);
                }
            }
        }
    CHECK_MSG(bad == 0, "attention (head_dim %d, cap %g, window %d, types %u/%u): %d wrong", head_dim, cap, window, tk, tv, bad);
    cu_free(dev, dk), cu_free(dev, dv), cu_free(dev, dq), cu_free(dev, dout), cu_free(dev, dslot), cu_free(dev, dvis);
    cu_free(dev, dn), cu_free(dev, doff), cu_free(dev, dlo), cu_free(dev, cc.k), cu_free(dev, cc.v);
    free(k), free(v), free(q), free(ks), free(vs), free(krows), free(vrows), free(got_rows), free(out), free(p);
}

static void test_move(void) {
    enum { N = 4096 };
    uint8_t a[N], want[N], got[N];
    for (int i = 0; i < N; i++) a[i] = (uint8_t)(i * 7 + 3);
    uint8_t *d = dup_to_dev(a, N);
    nc_err err;
    memcpy(want, a, N);
    memmove(want + 100, want, 2000); /* overlapping, forwards */
    CHECK(cu_move(dev, d + 100, d, 2000, &err) == 0);
    memmove(want, want + 50, 3000); /* backwards */
    CHECK(cu_move(dev, d, d + 50, 3000, &err) == 0);
    memmove(want + 3500, want, 500); /* apart */
    CHECK(cu_move(dev, d + 3500, d, 500, &err) == 0);
    from_dev(got, d, N);
    CHECK(memcmp(got, want, N) == 0);
    cu_free(dev, d);
}

static void test_mul(uint32_t type, int rows, int cols) { test_mul_t(type, rows, cols, 13); }

/* The types read from the file's blocks, through their forms. */
static void test_native_types(void) {
    static const uint32_t types[] = {GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                                     GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL,
                                     GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4, GGML_TYPE_IQ3_S};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        test_mul(types[i], 37, quant_type_of(types[i])->block_elems == 256 ? 512 : 96);
}

int main(void) {
    nc_err err;
    if (cu_open(&dev, &err)) {
        printf("SKIPPED: no GPU: %s\n", err.msg);
        return test_summary("test_ops");
    }
    printf("device: %s\n", cu_describe(dev));
    CHECK(cu_reserve(dev, 16, 4352, &err) == 0);
    test_mul(GGML_TYPE_Q4_0, 37, 256);
    test_mul(GGML_TYPE_Q8_0, 37, 256);
    test_mul(GGML_TYPE_Q8_0, 5, 2048);
    test_mul(GGML_TYPE_Q4_0, 11, 4160); /* a token's product: 130 groups, two chunks of k_mul_vec */
    test_mul(GGML_TYPE_Q4_K, 3, 4352); /* 136 groups, their terms with offsets */
    test_mul(GGML_TYPE_F16, 37, 256);
    test_mul(GGML_TYPE_F16, 9, 172); /* rows that end inside a group */
    test_mul(GGML_TYPE_BF16, 37, 96);
    test_mul(GGML_TYPE_F32, 37, 172);
    test_native_types();
    /* k_mul_mma's blocks of 16 and 32 tokens (17 to 31: one group a warp at a time; 13 tokens took
     * 16, one took 8; 45: two blocks of 32), then from TILE_FROM = 64 tokens k_mul_tile's tiles of
     * 64 rows and 64 tokens over stages of 4 groups (130 tokens of 70 rows and 13 groups: every
     * edge partial), against the CPU, and token 5 alone against them */
    test_mul_t(GGML_TYPE_Q4_0, 37, 256, 24);
    test_mul_t(GGML_TYPE_Q5_K, 19, 512, 31);
    test_mul_t(GGML_TYPE_Q4_0, 40, 256, 45);
    test_mul_t(GGML_TYPE_Q8_0, 37, 128, 70);
    test_mul_t(GGML_TYPE_Q4_0, 70, 416, 130);
    test_mul_t(GGML_TYPE_Q4_K, 37, 512, 70); /* offsets */
    test_mul_t(GGML_TYPE_Q6_K, 37, 256, 66); /* scales by halves */
    test_mul_t(GGML_TYPE_Q2_K, 21, 256, 64); /* both */
    test_mul_t(GGML_TYPE_IQ3_S, 19, 256, 65); /* the grid, copied to the device */
    test_mul_n(5);
    test_mul_n(1);
    test_ready(1);
    test_ready(9);
    test_rms_norm();
    test_rope_store(false, GGML_TYPE_F16);
    test_rope_store(true, GGML_TYPE_Q8_0);
    test_rope_store(true, GGML_TYPE_Q4_0);
    test_glu(KERNELS_SILU);
    test_glu(KERNELS_GELU_TANH);
    test_glu(KERNELS_SILU_OAI);
    test_norm_add();
    test_attention(12, 0, 0, GGML_TYPE_F16, GGML_TYPE_F16); /* rows not of whole 16-byte pieces */
    test_attention(64, 0, 0, GGML_TYPE_F16, GGML_TYPE_F16);
    test_attention(256, 0, 0, GGML_TYPE_F16, GGML_TYPE_F16);
    test_attention(64, 50.0f, 100, GGML_TYPE_F16, GGML_TYPE_F16); /* Gemma 2's soft-capping, a sliding window */
    test_attention(64, 0, 0, GGML_TYPE_F32, GGML_TYPE_F32);
    test_attention(64, 0, 0, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0);
    test_attention(32, 0, 0, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0); /* rows of 18 * 2 bytes: not word-aligned */
    test_attention(64, 0, 0, GGML_TYPE_Q8_0, GGML_TYPE_F16);
    test_move();
    cu_close(dev);
    /* the products again on the FMA units */
    setenv("NUCLEUS_CUDA_MMA", "0", 1);
    if (cu_open(&dev, &err) == 0) {
        CHECK(cu_reserve(dev, 16, 2048, &err) == 0);
        test_mul(GGML_TYPE_Q4_0, 37, 256);
        test_mul(GGML_TYPE_Q8_0, 5, 2048);
        test_native_types();
        cu_close(dev);
    }
    return test_summary("test_ops");
}
