/* Kernels: for every type and every instruction set this machine has, matvec and matmul against a
 * float64 dot product of the dequantised rows; bit-exact agreement between matvec and matmul and
 * across row splits and token counts; for the integer types, every set and path against the
 * defined computation (kernels_impl.h, written out here from the types' integer form), with
 * strided rows; the sets against each other; a real model row. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tensor/quant.h"
#include "test.h"

#define ROWS 7
#define MAXT 9

static const char *const isa_names[] = {"scalar", "avx2", "avx512", "neon", "avxvnni"};

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* A half-float scale in [lo, hi) with random sign when asked. */
static uint16_t rand_scale(float lo, float hi, int signed_) {
    float s = lo + (hi - lo) * (frand() + 1.0f) / 2.0f;
    if (signed_ && rand() % 2) s = -s;
    return quant_f32_to_fp16(s);
}

/* Where a block keeps its fp16 scales: off[0] the scale d, off[1] the min (or dmin) or -1. */
static void scale_offsets(uint32_t type, int off[2]) {
    off[0] = 0, off[1] = -1;
    switch (type) {
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: off[1] = 2; break;
    case GGML_TYPE_Q2_K: off[0] = 80, off[1] = 82; break;
    case GGML_TYPE_Q3_K: off[0] = 108; break;
    case GGML_TYPE_Q6_K: off[0] = 208; break;
    default: break;
    }
}

/* Random weights of a type: random quant bytes with sane scales (fp16 scales as in real files,
 * signed where the format's are; MXFP4 exponents around 2^0). */
static void fill_weights(uint32_t type, uint8_t *w, int rows, int cols) {
    size_t rb = quant_row_bytes(type, cols), n = rb * (size_t)rows;
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)rand();
    const quant_type *qt = quant_type_of(type);
    for (int r = 0; r < rows; r++) {
        uint8_t *row = w + rb * (size_t)r;
        if (type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16) {
            for (int i = 0; i < cols; i++) {
                float f = frand();
                if (type == GGML_TYPE_F32) memcpy(row + 4 * i, &f, 4);
                else put16(row + 2 * i, type == GGML_TYPE_F16 ? quant_f32_to_fp16(f) : quant_f32_to_bf16(f));
            }
            continue;
        }
        int off[2], big = qt->block_elems == 256;
        scale_offsets(type, off);
        for (int b = 0; b < cols / (int)qt->block_elems; b++) {
            uint8_t *blk = row + qt->block_bytes * (size_t)b;
            if (type == GGML_TYPE_MXFP4) {
                blk[0] = (uint8_t)(122 + rand() % 10);
                continue;
            }
            put16(blk + off[0], big ? rand_scale(0.0005f, 0.01f, !qt->has_min) : rand_scale(0.001f, 0.1f, 1));
            if (off[1] >= 0) put16(blk + off[1], big ? rand_scale(0.001f, 0.01f, 0) : rand_scale(0.01f, 0.5f, 1));
        }
    }
}

typedef struct {
    uint32_t type;
    const char *name;
    int cols[6];
} type_case;

#define COLS_32 {32, 64, 96, 160, 288, 1024}
#define COLS_256 {256, 512, 768, 1280, 2304, 256}
static const type_case cases[] = {
    {GGML_TYPE_F32, "F32", {1, 5, 16, 37, 64, 300}},
    {GGML_TYPE_F16, "F16", {3, 8, 17, 40, 128, 333}},
    {GGML_TYPE_BF16, "BF16", {2, 15, 16, 47, 96, 250}},
    {GGML_TYPE_Q4_0, "Q4_0", COLS_32},
    {GGML_TYPE_Q4_1, "Q4_1", COLS_32},
    {GGML_TYPE_Q5_0, "Q5_0", COLS_32},
    {GGML_TYPE_Q5_1, "Q5_1", COLS_32},
    {GGML_TYPE_Q8_0, "Q8_0", COLS_32},
    {GGML_TYPE_Q2_K, "Q2_K", COLS_256},
    {GGML_TYPE_Q3_K, "Q3_K", COLS_256},
    {GGML_TYPE_Q4_K, "Q4_K", COLS_256},
    {GGML_TYPE_Q5_K, "Q5_K", COLS_256},
    {GGML_TYPE_Q6_K, "Q6_K", COLS_256},
    {GGML_TYPE_IQ4_NL, "IQ4_NL", COLS_32},
    {GGML_TYPE_IQ3_S, "IQ3_S", COLS_256},
    {GGML_TYPE_IQ4_XS, "IQ4_XS", COLS_256},
    {GGML_TYPE_MXFP4, "MXFP4", COLS_32},
};
#define NCASES (sizeof cases / sizeof cases[0])

typedef struct {
    uint32_t type;
    int cols;
    size_t rb;
    const uint8_t *w;   /* ROWS rows rb apart, deliberately misaligned */
    const float *X;     /* MAXT tokens, misaligned */
    double ref[MAXT][ROWS], mag[MAXT][ROWS]; /* exact dot and sum |w*x| */
} problem;

static void reference(problem *p) {
    float *deq = malloc(sizeof(float) * (size_t)p->cols);
    for (int r = 0; r < ROWS; r++) {
        quant_dequantize_row(p->type, p->w + p->rb * r, deq, p->cols);
        for (int t = 0; t < MAXT; t++) {
            double s = 0, m = 0;
            for (int i = 0; i < p->cols; i++) {
                double v = (double)deq[i] * p->X[(size_t)t * p->cols + i];
                s += v;
                m += fabs(v);
            }
            p->ref[t][r] = s;
            p->mag[t][r] = m;
        }
    }
    free(deq);
}

static int near_ref(const problem *p, int t, int r, float got) {
    return fabs((double)got - p->ref[t][r]) <= 1e-4 * p->mag[t][r] + 1e-6;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* matvec over all rows and over sub-ranges: close to the reference, bit-identical across splits.
 * Leaves the full-range result for token t in mv[t]. */
static void check_matvec(const problem *p, const char *what, float mv[MAXT][ROWS]) {
    int bad_ref = 0, bad_split = 0;
    for (int t = 0; t < MAXT; t++) {
        const float *x = p->X + (size_t)t * p->cols;
        kernels_matvec(p->type, p->w, p->rb, p->cols, x, mv[t], 0, ROWS);
        for (int r = 0; r < ROWS; r++) bad_ref += !near_ref(p, t, r, mv[t][r]);
        static const int splits[][2] = {{1, 4}, {3, ROWS}, {6, ROWS}, {0, 1}, {2, 3}};
        for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++) {
            int r0 = splits[s][0], r1 = splits[s][1];
            float y[ROWS + 1];
            y[r1 - r0] = 12345.0f; /* must stay untouched */
            kernels_matvec(p->type, p->w, p->rb, p->cols, x, y, r0, r1);
            for (int r = r0; r < r1; r++) bad_split += !same_bits(y[r - r0], mv[t][r]);
            bad_split += y[r1 - r0] != 12345.0f;
        }
    }
    CHECK_MSG(bad_ref == 0, "%s matvec: %d results off the reference", what, bad_ref);
    CHECK_MSG(bad_split == 0, "%s matvec: %d results change with r0/r1", what, bad_split);
}

/* matmul for T = 1..MAXT and several row ranges: each result bit-identical to matvec, and
 * outside [r0, r1) (and beyond ROWS, in the ldy padding) nothing written. */
static void check_matmul(const problem *p, const char *what, float mv[MAXT][ROWS]) {
    int ldy = ROWS + 3, bad = 0, spill = 0;
    float Y[MAXT * (ROWS + 3)];
    static const int ranges[][2] = {{0, ROWS}, {0, 3}, {3, ROWS}, {5, 6}};
    for (int T = 1; T <= MAXT; T++) {
        for (size_t g = 0; g < sizeof ranges / sizeof ranges[0]; g++) {
            int r0 = ranges[g][0], r1 = ranges[g][1];
            for (int i = 0; i < MAXT * ldy; i++) Y[i] = -777.0f;
            kernels_matmul(p->type, p->w, p->rb, p->cols, p->X, T, Y, ldy, r0, r1);
            for (int t = 0; t < MAXT; t++)
                for (int r = 0; r < ldy; r++) {
                    float y = Y[t * ldy + r];
                    if (t < T && r >= r0 && r < r1) bad += !same_bits(y, mv[t][r]);
                    else spill += y != -777.0f;
                }
        }
    }
    CHECK_MSG(bad == 0, "%s matmul: %d results differ from matvec", what, bad);
    CHECK_MSG(spill == 0, "%s matmul: %d writes outside the range", what, spill);
}

static int available(kernels_isa isa) { return kernels_force(isa) == isa; }

static void test_type(const type_case *tc) {
    for (int ci = 0; ci < 6; ci++) {
        int cols = tc->cols[ci];
        /* rows a stride apart (odd ones: 5 bytes more than a row) */
        size_t rs = quant_row_bytes(tc->type, cols);
        problem p = {.type = tc->type, .cols = cols, .rb = rs + (ci % 2 ? 5 : 0)};
        uint8_t *wbuf = malloc(p.rb * ROWS + 1), *one = malloc(rs);
        float *xbuf = malloc(sizeof(float) * ((size_t)MAXT * cols + 1));
        memset(wbuf, 0xFF, p.rb * ROWS + 1); /* the gaps: NaN patterns for the float types */
        for (int r = 0; r < ROWS; r++) {
            fill_weights(tc->type, one, 1, cols);
            memcpy(wbuf + 1 + p.rb * r, one, rs);
        }
        free(one);
        /* odd tokens get a positive mean, so Q4_K's min terms do not cancel out */
        for (int t = 0; t < MAXT; t++)
            for (int i = 0; i < cols; i++) xbuf[1 + (size_t)t * cols + i] = frand() + (t % 2 ? 0.5f : 0.0f);
        p.w = wbuf + 1;
        p.X = xbuf + 1;
        reference(&p);
        float first[MAXT][ROWS];
        int have_first = 0;
        for (int isa = KERNELS_SCALAR; isa < KERNELS_ISA_COUNT; isa++) {
            if (!available((kernels_isa)isa)) continue;
            char what[64];
            snprintf(what, sizeof what, "%s %s cols=%d", isa_names[isa], tc->name, cols);
            float mv[MAXT][ROWS];
            check_matvec(&p, what, mv);
            check_matmul(&p, what, mv);
            if (!have_first) {
                memcpy(first, mv, sizeof mv);
                have_first = 1;
                continue;
            }
            int bad = 0; /* the sets agree with the scalar set within twice the tolerance */
            for (int t = 0; t < MAXT; t++)
                for (int r = 0; r < ROWS; r++)
                    bad += fabs((double)mv[t][r] - first[t][r]) > 2e-4 * p.mag[t][r] + 2e-6;
            CHECK_MSG(bad == 0, "%s: %d results differ from the scalar set", what, bad);
        }
        free(wbuf);
        free(xbuf);
    }
}

/* Hand-made rows: exact results every set must reproduce. The activations are integers times a
 * power of two, with a largest value of 32767 * 2^-k in each group, so their int16 quantisation
 * (scale 2^-k) is exact too. */
static void test_exact_rows(void) {
    const float u = 32767.0f / 32768.0f;
    uint8_t q8[2 * 34];
    put16(q8, 0x3800);  /* 0.5 */
    put16(q8 + 34, 0xC000); /* -2 */
    for (int j = 0; j < 32; j++) {
        q8[2 + j] = (uint8_t)(int8_t)(j - 16);
        q8[36 + j] = (uint8_t)(int8_t)(j % 2 ? 3 : -1);
    }
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = i < 32 ? u : 0.25f * u;
    /* block 0: 0.5 * u * sum(j - 16) = -8u; block 1: -2 * 0.25u * (16*3 - 16) = -16u */
    uint8_t q4[18];
    put16(q4, 0x3C00);
    for (int j = 0; j < 16; j++) q4[2 + j] = (uint8_t)(9 | 7 << 4); /* +1 for 0-15, -1 for 16-31 */
    float x4[32]; /* 2i for weights i < 15, 32u for i = 15, i - 16 after */
    for (int i = 0; i < 32; i++) x4[i] = i < 15 ? 2.0f * (float)i : i == 15 ? 32.0f * u : (float)(i - 16);
    for (int isa = KERNELS_SCALAR; isa < KERNELS_ISA_COUNT; isa++) {
        if (!available((kernels_isa)isa)) continue;
        float y = 0;
        kernels_matvec(GGML_TYPE_Q8_0, q8, 68, 64, x, &y, 0, 1);
        CHECK_MSG(y == -24.0f * u, "%s Q8_0: %.9g", isa_names[isa], (double)y);
        kernels_matvec(GGML_TYPE_Q4_0, q4, 18, 32, x4, &y, 0, 1);
        CHECK_MSG(y == 210.0f + 32.0f * u - 120.0f, "%s Q4_0: %.9g", isa_names[isa], (double)y);
    }
}

/* ---- the integer path against its definition (kernels_impl.h) ---- */

/* Beyond one block of the packed matmul (128 rows, 128 tokens, 512 columns): each token's
 * result equals its matvec bit for bit, in the SIMD sets (the scalar set's matmul is its matvec
 * token by token); int8 activations for the types that take them natively. */
static void test_int_blocks(void) {
    enum { R = 150, T = 131, COLS = 768 };
    for (size_t c = 0; c < 2 * NCASES; c++) {
        kernels_act fmt = (kernels_act)(c % 2);
        uint32_t type = cases[c / 2].type;
        if (!kernels_int_type(type) || (fmt == KERNELS_ACT_I8 && !kernels_int8_type(type))) continue;
        size_t rb = quant_row_bytes(type, COLS), xs = kernels_act_bytes(fmt, COLS);
        uint8_t *w = malloc(rb * R), *Xq = aligned_alloc(64, xs * T);
        float *x = malloc(sizeof(float) * COLS), *Y = malloc(sizeof(float) * T * R), y[R];
        fill_weights(type, w, R, COLS);
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < COLS; i++) x[i] = frand();
            kernels_quantize_act(fmt, x, COLS, Xq + xs * t);
        }
        for (int isa = KERNELS_AVX2; isa < KERNELS_ISA_COUNT; isa++) {
            if (!available((kernels_isa)isa)) continue;
            int bad = 0;
            kernels_mul(type, w, rb, COLS, NULL, fmt, Xq, T, Y, R, 0, R, 0, NULL);
            for (int t = 0; t < T; t++) {
                kernels_mul(type, w, rb, COLS, NULL, fmt, Xq + xs * t, 1, y, R, 0, R, 0, NULL);
                for (int r = 0; r < R; r++) bad += !same_bits(y[r], Y[t * R + r]);
            }
            CHECK_MSG(bad == 0, "%s %s fmt=%d: %d matmul results differ from matvec", isa_names[isa], cases[c / 2].name,
                      (int)(c % 2), bad);
        }
        free(w);
        free(Xq);
        free(x);
        free(Y);
    }
}

/* The quantised activations of one token, read back: integers, group scales and sums (the group
 * headers follow the integers, padded to 64 bytes: f32 d, int32 sum, int32 sum of the first 16). */
static void read_act(kernels_act fmt, const uint8_t *xq, int cols, int32_t *q, float *d, int32_t *sum, int32_t *sum16) {
    size_t qb = ((size_t)cols * (fmt == KERNELS_ACT_I16 ? 2 : 1) + 63) / 64 * 64;
    for (int i = 0; i < cols; i++) {
        if (fmt == KERNELS_ACT_I16) {
            int16_t v;
            memcpy(&v, xq + 2 * i, 2);
            q[i] = v;
        } else {
            q[i] = (int8_t)xq[i];
        }
    }
    for (int g = 0; g < cols / 32; g++) {
        memcpy(&d[g], xq + qb + 12 * g, 4);
        memcpy(&sum[g], xq + qb + 12 * g + 4, 4);
        memcpy(&sum16[g], xq + qb + 12 * g + 8, 4);
    }
}

/* The int16 activations' byte planes (after the group headers, padded to 64 bytes; per group 32
 * low bytes, then 32 high bytes, q = 256 hi + lo; after all groups each group's sum of its high
 * bytes): 1 when they hold q exactly. */
static int planes_hold(const uint8_t *xq, int cols, const int32_t *q) {
    size_t qb = (2 * (size_t)cols + 63) / 64 * 64, pb = qb + ((size_t)cols / 32 * 12 + 63) / 64 * 64;
    const uint8_t *p = xq + pb;
    for (int g = 0; g < cols / 32; g++) {
        int32_t hsum = 0, want;
        for (int k = 0; k < 32; k++) {
            int lo = p[64 * g + k], hi = (int8_t)p[64 * g + 32 + k];
            if (256 * hi + lo != q[32 * g + k]) return 0;
            hsum += hi;
        }
        memcpy(&want, p + 2 * (size_t)cols + 4 * (size_t)g, 4);
        if (hsum != want) return 0;
    }
    return 1;
}

/* The defined result (kernels_impl.h: exact integer sums per group, then the f32 fma chain in
 * the defined order), written out here from the type's integer form (quant_group, checked
 * against the formats' definitions in test_quant), and the bound on its distance from the exact
 * product with the unquantised x: every |x - d*q| <= d/2 (times |w|), plus f32 rounding. deq: the
 * row dequantised. */
static float int_defined(uint32_t type, const uint8_t *row, const float *deq, int cols, const int32_t *q, const float *d,
                         const int32_t *sum, const int32_t *sum16, const float *x, double *bound) {
    const quant_type *qt = quant_type_of(type);
    float acc = 0;
    double err = 0, mag = 0;
    for (int i = 0; i < cols; i++) {
        err += fabs((double)deq[i]) * d[i / 32] * 0.5;
        mag += fabs((double)deq[i] * x[i]);
    }
    int per = (int)qt->block_elems / 32;
    for (int g = 0; g < cols / 32; g++) {
        quant_group grp;
        qt->group(row + qt->block_bytes * (size_t)(g / per), g % per, &grp);
        int64_t S[2] = {0, 0};
        for (int k = 0; k < 32; k++) S[k / 16] += (int64_t)grp.w[k] * q[32 * g + k];
        if (qt->halves) {
            acc = fmaf((float)S[0], grp.a[0] * d[g], acc);
            acc = fmaf((float)S[1], grp.a[1] * d[g], acc);
        } else {
            acc = fmaf((float)(S[0] + S[1]), grp.a[0] * d[g], acc);
        }
        if (qt->has_min && qt->halves) {
            acc = fmaf(grp.b[0], d[g] * (float)sum16[g], acc);
            acc = fmaf(grp.b[1], d[g] * (float)(sum[g] - sum16[g]), acc);
        } else if (qt->has_min) {
            acc = fmaf(grp.b[0], d[g] * (float)sum[g], acc);
        }
    }
    *bound = err * 1.0001 + 1e-6 * mag + 1e-30;
    return acc;
}

static int sets_agree_on_quantisation(kernels_act fmt, const float *x, int cols) {
    size_t n = kernels_act_bytes(fmt, cols);
    uint8_t *a = aligned_alloc(64, n), *b = aligned_alloc(64, n);
    int32_t *qa = malloc(sizeof(int32_t) * cols), *qb = malloc(sizeof(int32_t) * cols), sa[2][72], sb[2][72];
    float da[72], db[72];
    int same = 1;
    kernels_force(KERNELS_SCALAR);
    kernels_quantize_act(fmt, x, cols, a);
    read_act(fmt, a, cols, qa, da, sa[0], sa[1]);
    for (int isa = KERNELS_AVX2; isa < KERNELS_ISA_COUNT; isa++) {
        if (!available((kernels_isa)isa)) continue;
        kernels_quantize_act(fmt, x, cols, b);
        read_act(fmt, b, cols, qb, db, sb[0], sb[1]);
        same &= memcmp(qa, qb, sizeof(int32_t) * cols) == 0 && memcmp(da, db, 4 * (cols / 32)) == 0 &&
                memcmp(sa[0], sb[0], 4 * (cols / 32)) == 0 && memcmp(sa[1], sb[1], 4 * (cols / 32)) == 0;
    }
    free(a);
    free(b);
    free(qa);
    free(qb);
    return same;
}

/* For every integer type, both activation formats and every set: matvec (T = 1) and the packed
 * matmul give the defined result bit for bit, for any row range and token count (1..40), with rows
 * a stride apart that is not their size (an odd number of bytes more); add adds; the result is
 * within the quantisation bound of the exact product, and the int16 bound is far below the int8
 * one. The types without int8 kernels take int8 activations widened: the same definition. */
static void test_int_path(void) {
    static const int col_index[] = {0, 1, 2, 4, 5};
    static const int Ts[] = {1, 2, 3, 4, 7, 9, 12, 16, 17, 40};
    enum { R = 37, NT = 40, GAP = 37 };
    for (size_t ti = 0; ti < NCASES; ti++)
        for (size_t ci = 0; ci < 5; ci++) {
            uint32_t type = cases[ti].type;
            if (!kernels_int_type(type)) continue;
            const char *tname = cases[ti].name;
            int cols = cases[ti].cols[col_index[ci]];
            size_t rs = quant_row_bytes(type, cols), rb = rs + GAP;
            uint8_t *w = malloc(rb * R), *one = malloc(rs);
            for (int r = 0; r < R; r++) {
                fill_weights(type, one, 1, cols);
                memcpy(w + rb * r, one, rs);
                for (int i = 0; i < GAP; i++) w[rb * r + rs + i] = (uint8_t)rand(); /* not part of the row */
            }
            float *X = malloc(sizeof(float) * (size_t)NT * cols), *deq = malloc(sizeof(float) * (size_t)R * cols);
            for (int r = 0; r < R; r++) quant_dequantize_row(type, w + rb * r, deq + (size_t)r * cols, cols);
            for (int i = 0; i < NT * cols; i++) X[i] = frand() * (i % 97 == 0 ? 20.0f : 1.0f) + (i / cols % 2 ? 0.3f : 0.0f);
            double worst_rel[2] = {0, 0};
            for (int f = 0; f < 2; f++) {
                kernels_act fmt = (kernels_act)f;
                size_t xs = kernels_act_bytes(fmt, cols);
                uint8_t *Xq = aligned_alloc(64, xs * NT);
                int32_t *q = malloc(sizeof(int32_t) * cols), sum[72], sum16[72];
                float d[72], *want = malloc(sizeof(float) * NT * R), *Y = malloc(sizeof(float) * NT * (R + 2));
                void *scratch = aligned_alloc(64, kernels_mul_scratch_bytes());
                int agree = 1;
                for (int t = 0; t < NT; t += 7) agree &= sets_agree_on_quantisation(fmt, X + (size_t)t * cols, cols);
                CHECK_MSG(agree, "%s cols=%d fmt=%d: the sets quantise differently", tname, cols, f);
                kernels_force(KERNELS_SCALAR);
                int bad_bound = 0, bad_planes = 0;
                for (int t = 0; t < NT; t++) {
                    kernels_quantize_act(fmt, X + (size_t)t * cols, cols, Xq + xs * t);
                    read_act(fmt, Xq + xs * t, cols, q, d, sum, sum16);
                    int32_t qs = 0, qs16 = 0;
                    for (int k = 0; k < 32; k++) {
                        qs += q[k];
                        qs16 += k < 16 ? q[k] : 0;
                    }
                    bad_bound += qs != sum[0] || qs16 != sum16[0];
                    bad_planes += fmt == KERNELS_ACT_I16 && !planes_hold(Xq + xs * t, cols, q);
                    for (int r = 0; r < R; r++) {
                        double bound, exact = 0, scale = 0;
                        const float *x = X + (size_t)t * cols;
                        const float *dr = deq + (size_t)r * cols;
                        want[t * R + r] = int_defined(type, w + rb * r, dr, cols, q, d, sum, sum16, x, &bound);
                        for (int i = 0; i < cols; i++) {
                            exact += (double)dr[i] * x[i];
                            scale += fabs((double)dr[i] * x[i]);
                        }
                        double dev = fabs(want[t * R + r] - exact);
                        bad_bound += dev > bound;
                        if (dev / scale > worst_rel[f]) worst_rel[f] = dev / scale;
                    }
                }
                CHECK_MSG(bad_planes == 0, "%s cols=%d: %d tokens' byte planes do not hold their int16 activations", tname,
                          cols, bad_planes);
                CHECK_MSG(bad_bound == 0, "%s cols=%d fmt=%d: %d results outside the quantisation bound", tname, cols, f,
                          bad_bound);
                for (int isa = KERNELS_SCALAR; isa < KERNELS_ISA_COUNT; isa++) {
                    if (!available((kernels_isa)isa)) continue;
                    int bad = 0;
                    static const int ranges[][2] = {{0, R}, {0, 16}, {3, 35}, {16, 33}, {36, 37}};
                    for (size_t g = 0; g < sizeof ranges / sizeof ranges[0]; g++) {
                        int r0 = ranges[g][0], r1 = ranges[g][1];
                        for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
                            int T = Ts[k];
                            if (isa == KERNELS_SCALAR && T != 1 && T != 3 && T != NT) continue; /* slow, and simple */
                            for (int i = 0; i < NT * (R + 2); i++) Y[i] = -777.0f;
                            kernels_mul(type, w, rb, cols, NULL, fmt, Xq, T, Y + r0, R + 2, r0, r1, 0, scratch);
                            for (int t = 0; t < NT; t++)
                                for (int r = 0; r < R + 2; r++) {
                                    float y = Y[t * (R + 2) + r];
                                    bad += t < T && r >= r0 && r < r1 ? !same_bits(y, want[t * R + r]) : y != -777.0f;
                                }
                        }
                    }
                    /* add: onto 0.75 */
                    for (int i = 0; i < NT * (R + 2); i++) Y[i] = 0.75f;
                    kernels_mul(type, w, rb, cols, NULL, fmt, Xq, NT, Y, R + 2, 0, R, 1, NULL);
                    for (int t = 0; t < NT; t++)
                        for (int r = 0; r < R; r++) bad += !same_bits(Y[t * (R + 2) + r], 0.75f + want[t * R + r]);
                    for (int t = 0; t < NT; t += 5) {
                        for (int i = 0; i < R + 2; i++) Y[i] = 0.75f;
                        kernels_mul(type, w, rb, cols, NULL, fmt, Xq + xs * t, 1, Y, R + 2, 0, R, 1, NULL);
                        for (int r = 0; r < R; r++) bad += !same_bits(Y[r], 0.75f + want[t * R + r]);
                    }
                    CHECK_MSG(bad == 0, "%s %s cols=%d fmt=%d: %d results differ from the definition", isa_names[isa],
                              tname, cols, f, bad);
                }
                free(Xq);
                free(q);
                free(want);
                free(Y);
                free(scratch);
            }
            /* int16 keeps ~15 bits of every group, int8 ~7: their errors differ by ~2^8 */
            CHECK_MSG(worst_rel[0] < 5e-4 && worst_rel[0] * 16 < worst_rel[1] + 1e-12,
                      "%s cols=%d: relative deviations int16 %g, int8 %g", tname, cols, worst_rel[0], worst_rel[1]);
            free(w);
            free(one);
            free(X);
            free(deq);
        }
}

/* MXFP4's scale bytes at the ends of their range: subnormal scales (e = 0, 1), the first normal
 * one, the largest (results overflow to infinity) and NaN (e = 255, OCP): every set and path gives
 * the scalar set's bits, and NaN for the NaN blocks. */
static void test_mxfp4_scales(void) {
    enum { R = 19, COLS = 64, T = 5 };
    static const uint8_t es[] = {0, 1, 2, 127, 254, 255, 100, 3};
    size_t rb = quant_row_bytes(GGML_TYPE_MXFP4, COLS), xs = kernels_act_bytes(KERNELS_ACT_I16, COLS);
    uint8_t *w = malloc(rb * R), *Xq = aligned_alloc(64, xs * T);
    float x[COLS], want[T][R], Y[T][R];
    fill_weights(GGML_TYPE_MXFP4, w, R, COLS);
    for (int r = 0; r < R; r++)
        for (int b = 0; b < 2; b++) w[rb * r + 17 * b] = es[(r + 3 * b) % 8];
    kernels_force(KERNELS_SCALAR);
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < COLS; i++) x[i] = frand();
        kernels_quantize_act(KERNELS_ACT_I16, x, COLS, Xq + xs * t);
    }
    for (int t = 0; t < T; t++) kernels_mul(GGML_TYPE_MXFP4, w, rb, COLS, NULL, KERNELS_ACT_I16, Xq + xs * t, 1, want[t], R, 0, R, 0, NULL);
    int nan = 0, inf = 0, bad_nan = 0;
    for (int r = 0; r < R; r++) {
        int has_nan = es[r % 8] == 255 || es[(r + 3) % 8] == 255;
        bad_nan += has_nan != !!isnan(want[0][r]);
        nan += has_nan;
        inf += isinf(want[0][r]);
    }
    CHECK_MSG(bad_nan == 0 && nan > 0 && inf > 0, "MXFP4 scalar: %d NaN rows wrong (%d NaN, %d inf)", bad_nan, nan, inf);
    for (int isa = KERNELS_AVX2; isa < KERNELS_ISA_COUNT; isa++) {
        if (!available((kernels_isa)isa)) continue;
        int bad = 0;
        kernels_mul(GGML_TYPE_MXFP4, w, rb, COLS, NULL, KERNELS_ACT_I16, Xq, T, &Y[0][0], R, 0, R, 0, NULL);
        for (int t = 0; t < T; t++)
            for (int r = 0; r < R; r++) bad += isnan(want[t][r]) ? !isnan(Y[t][r]) : !same_bits(Y[t][r], want[t][r]);
        for (int t = 0; t < T; t++) {
            kernels_mul(GGML_TYPE_MXFP4, w, rb, COLS, NULL, KERNELS_ACT_I16, Xq + xs * t, 1, Y[t], R, 0, R, 0, NULL);
            for (int r = 0; r < R; r++) bad += isnan(want[t][r]) ? !isnan(Y[t][r]) : !same_bits(Y[t][r], want[t][r]);
        }
        CHECK_MSG(bad == 0, "%s MXFP4 extreme scales: %d results differ", isa_names[isa], bad);
    }
    free(w);
    free(Xq);
}

/* Every type the engine computes with has kernels: the float types' or the integer ones. */
static void test_coverage(void) {
    int missing = 0, listed = 0, supported = 0;
    for (uint32_t type = 0; type < GGML_TYPE_COUNT; type++) {
        const quant_type *qt = quant_type_of(type);
        if (!qt) {
            missing += kernels_int_type(type);
            continue;
        }
        supported++;
        int is_int = qt->group != NULL;
        missing += is_int != kernels_int_type(type);
        for (size_t i = 0; i < NCASES; i++) listed += cases[i].type == type;
    }
    CHECK_MSG(missing == 0, "%d types with kernels and no trait entry, or the other way", missing);
    CHECK_MSG(listed == supported && supported == (int)NCASES, "the cases cover %d of %d types", listed, supported);
    CHECK(kernels_int8_type(GGML_TYPE_Q8_0) && kernels_int8_type(GGML_TYPE_Q4_0) && !kernels_int8_type(GGML_TYPE_Q5_0));
    CHECK(!kernels_int_type(GGML_TYPE_Q8_K) && !kernels_int_type(GGML_TYPE_F16) && !kernels_int_type(9999));
}

/* token_embd.weight of TinyStories-656K-Q8_0.gguf (2048 rows of 128, Q8_0, at byte 51360) times
 * output_norm.weight (128 f32 at byte 50848); float64 dots computed with python. */
static void test_real_rows(void) {
    const char *shared = getenv("SHARED") ? getenv("SHARED") : "../shared";
    char path[512];
    snprintf(path, sizeof path, "%s/models/tinystories-656k/TinyStories-656K-Q8_0.gguf", shared);
    FILE *f = fopen(path, "rb");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f) return;
    static uint8_t emb[2048 * 136];
    float norm[128];
    int ok = fseek(f, 50848, SEEK_SET) == 0 && fread(norm, 4, 128, f) == 128 &&
             fseek(f, 51360, SEEK_SET) == 0 && fread(emb, 136, 2048, f) == 2048;
    fclose(f);
    CHECK(ok);
    if (!ok) return;
    /* int16 activations: |x - d*q| <= d/2 per element, with d = max|x| / 32767 per group of 32;
     * the norm weights' groups peak near 0.86 (d/2 ~ 1.3e-5), and row 2047 moves by 3.4e-5 */
    for (int isa = KERNELS_SCALAR; isa < KERNELS_ISA_COUNT; isa++) {
        if (!available((kernels_isa)isa)) continue;
        float y[2048];
        kernels_matvec(GGML_TYPE_Q8_0, emb, 136, 128, norm, y, 0, 2048);
        CHECK_NEAR(y[7], 1.7331596426665783, 1e-4);
        CHECK_NEAR(y[2047], -0.27190492302179337, 1e-4);
    }
}

/* Float types: a row continued with arbitrary weights against zero activations gives the same bits
 * as the row alone. */
static void test_zero_padding(void) {
    static const uint32_t types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16};
    static const int lens[] = {1, 7, 16, 33, 70, 255};
    for (int isa = KERNELS_SCALAR; isa < KERNELS_ISA_COUNT; isa++) {
        if (!available((kernels_isa)isa)) continue;
        int bad = 0;
        for (int ti = 0; ti < 3; ti++)
            for (int li = 0; li < 6; li++) {
                int n = lens[li], m = 256 + 9;
                size_t rb = quant_row_bytes(types[ti], m);
                uint8_t *w = malloc(rb * 3), *ws = malloc(quant_row_bytes(types[ti], n) * 3 + 1);
                fill_weights(types[ti], w, 3, m);
                size_t esize = rb / (size_t)m, rbs = esize * (size_t)n;
                for (int r = 0; r < 3; r++) memcpy(ws + rbs * r, w + rb * r, rbs);
                float X[2][265] = {{0}}, Xs[2][255], Y[2][3], Ys[2][3];
                for (int t = 0; t < 2; t++)
                    for (int i = 0; i < n; i++) X[t][i] = Xs[t][i] = frand();
                float Xp[2 * 265], Xsp[2 * 255];
                for (int t = 0; t < 2; t++) {
                    memcpy(Xp + t * m, X[t], sizeof(float) * m);
                    memcpy(Xsp + t * n, Xs[t], sizeof(float) * n);
                }
                kernels_matmul(types[ti], w, rb, m, Xp, 2, &Y[0][0], 3, 0, 3);
                kernels_matmul(types[ti], ws, rbs, n, Xsp, 2, &Ys[0][0], 3, 0, 3);
                for (int t = 0; t < 2; t++)
                    for (int r = 0; r < 3; r++) bad += !same_bits(Y[t][r], Ys[t][r]);
                free(w);
                free(ws);
            }
        CHECK_MSG(bad == 0, "%s: %d padded rows differ", isa_names[isa], bad);
    }
}

/* The element-wise helpers against float64, for lengths around the vector widths (tails). */
static void test_helpers(void) {
    static const int lens[] = {1, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 100, 1000};
    for (int isa = KERNELS_SCALAR; isa < KERNELS_ISA_COUNT; isa++) {
        if (!available((kernels_isa)isa)) continue;
        int bad_norm = 0, bad_glu = 0, bad_soft = 0, bad_f16 = 0;
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            int n = lens[li];
            float x[1001], w[1001], u[1001], out[1002], p[1001];
            for (int i = 0; i < n; i++) {
                x[i] = frand() * 4.0f;
                w[i] = frand();
                u[i] = frand();
                p[i] = frand() * 30.0f;
            }
            x[0] = n > 3 ? -95.0f : x[0]; /* exp(-x) beyond the float range in the gated activations */
            out[n] = 777.0f;
            double ss = 0;
            for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
            double sc = 1.0 / sqrt(ss / n + 1e-5);
            kernels_rms_norm(out, x, w, n, 1e-5f);
            for (int i = 0; i < n; i++) bad_norm += fabs(out[i] - x[i] * sc * w[i]) > 1e-6 * fabs(x[i] * sc * w[i]) + 1e-30;
            bad_norm += out[n] != 777.0f;
            /* gpt-oss's clamps need inputs past 7: its gate and up are scaled by 3 and 12 */
            float g3[1001], u12[1001];
            for (int i = 0; i < n; i++) {
                g3[i] = 3.0f * x[i];
                u12[i] = 12.0f * u[i];
            }
            for (int act = KERNELS_SILU; act <= KERNELS_SILU_OAI; act++) {
                const float *gi = act == KERNELS_SILU_OAI ? g3 : x, *ui = act == KERNELS_SILU_OAI ? u12 : u;
                kernels_glu_act((kernels_glu)act, out, gi, ui, n);
                for (int i = 0; i < n; i++) {
                    double g = gi[i], v = ui[i], want;
                    if (act == KERNELS_SILU) want = g / (1.0 + exp(-g)) * v;
                    else if (act == KERNELS_GELU_TANH) /* the textbook form of the tanh approximation */
                        want = 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * v;
                    else {
                        g = fmin(g, 7.0);
                        v = fmin(fmax(v, -7.0), 7.0);
                        want = g / (1.0 + exp(-1.702 * g)) * (v + 1.0);
                    }
                    bad_glu += fabs(out[i] - want) > 2e-6 * fabs(want) + 1e-30;
                }
                bad_glu += out[n] != 777.0f;
            }
            /* soft-capping: cap 30, scores up to +-120 (tanh saturates) and near 0 (no cancellation
             * beyond an ulp of 1, i.e. cap * 6e-8) */
            float sc30[1002];
            for (int i = 0; i < n; i++) sc30[i] = i % 3 == 0 ? frand() * 1e-3f : frand() * 120.0f;
            sc30[n] = 777.0f;
            float keep[1001];
            memcpy(keep, sc30, sizeof(float) * n);
            kernels_softcap(sc30, n, 0.5f, 30.0f);
            for (int i = 0; i < n; i++) {
                double want = 30.0 * tanh(0.5 * keep[i] / 30.0);
                bad_glu += fabs(sc30[i] - want) > 2e-6 * fabs(want) + 30 * 1.2e-7;
            }
            bad_glu += sc30[n] != 777.0f;
            float q[1001], mx = 2.0f;
            memcpy(q, p, sizeof(float) * n);
            float sum = kernels_softmax_span(q, n, 0.5f, &mx);
            double m = 2.0, want_sum = 0;
            for (int i = 0; i < n; i++) m = fmax(m, 0.5 * p[i]);
            for (int i = 0; i < n; i++) {
                double e = exp(0.5 * p[i] - m);
                want_sum += e;
                /* p - max rounds to f32 first: 6e-8 relative of an argument up to 30 */
                bad_soft += fabs(q[i] - e) > 5e-6 * e + 1e-30;
            }
            bad_soft += mx != (float)m || fabs(sum - want_sum) > 1e-5 * want_sum;
            uint16_t h[1002];
            float f[1001];
            for (int i = 0; i < n; i++) f[i] = i % 5 == 0 ? frand() * 1e-6f : i % 7 == 0 ? frand() * 1e5f : frand() * 100.0f;
            h[n] = 0xABCD;
            kernels_f32_to_f16(h, f, n);
            for (int i = 0; i < n; i++) bad_f16 += h[i] != quant_f32_to_fp16(f[i]);
            bad_f16 += h[n] != 0xABCD;
        }
        CHECK_MSG(bad_norm == 0, "%s rms_norm: %d values off", isa_names[isa], bad_norm);
        CHECK_MSG(bad_glu == 0, "%s gated activations / soft-capping: %d values off", isa_names[isa], bad_glu);
        CHECK_MSG(bad_soft == 0, "%s softmax_span: %d values off", isa_names[isa], bad_soft);
        CHECK_MSG(bad_f16 == 0, "%s f32_to_f16: %d values differ from quant_f32_to_fp16", isa_names[isa], bad_f16);
    }
}

static void test_dispatch(void) {
    kernels_init();
    kernels_isa best = kernels_force(KERNELS_AVX512);
    CHECK(kernels_active() == best);
    CHECK(strcmp(kernels_name(), isa_names[best]) == 0);
    CHECK(kernels_force(KERNELS_SCALAR) == KERNELS_SCALAR);
    CHECK(strcmp(kernels_name(), "scalar") == 0);
    printf("kernel sets available up to %s\n", isa_names[best]);
}

/* kernels_mix (attention's two products, and products with weights stored transposed): every
 * set gives the defined fma chain over the rows of A (written here with fmaf) bit for bit, for
 * tile-edge row, column and X-row counts, F32, F16 and BF16 A, in both of attention's shapes (scores: K = 64 or 128 dimensions, N up to 130 cells;
 * outputs: K up to 130 cells, N = 7..128 dimensions); within rounding of the float64 sum; nothing
 * written past N columns; weights of 0 for five more rows change no bit (what attention relies
 * on for masked cells). */
static void test_mix(void) {
    static const int Ks[] = {0, 1, 7, 16, 17, 64, 128, 130};
    static const int Ns[] = {1, 7, 8, 9, 15, 16, 17, 24, 63, 64, 65, 80, 128, 130};
    static const int Rs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    enum { CAPK = 136, CAPN = 130, MAXR = 9 };
    static const uint32_t types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16};
    for (int ti = 0; ti < 3; ti++) {
        uint32_t type = types[ti];
        size_t rb = CAPN * (ti ? 2 : 4);
        uint8_t *A = malloc(rb * CAPK);
        float *a = malloc(sizeof(float) * CAPK * CAPN), *X = malloc(sizeof(float) * MAXR * CAPK);
        float *Xz = malloc(sizeof(float) * MAXR * CAPK);
        for (int k = 0; k < CAPK; k++)
            for (int j = 0; j < CAPN; j++) {
                float v = frand();
                if (ti) {
                    uint16_t h = ti == 1 ? quant_f32_to_fp16(v) : quant_f32_to_bf16(v);
                    put16(A + (size_t)k * rb + 2 * (size_t)j, h);
                    v = ti == 1 ? quant_fp16_to_f32(h) : quant_bf16_to_f32(h);
                } else {
                    memcpy(A + (size_t)k * rb + 4 * (size_t)j, &v, 4);
                }
                a[k * CAPN + j] = v;
            }
        for (int i = 0; i < MAXR * CAPK; i++) X[i] = frand();
        for (int isa = KERNELS_SCALAR; isa < KERNELS_ISA_COUNT; isa++) {
            if (!available((kernels_isa)isa)) continue;
            int bad = 0, far = 0, spill = 0, padded = 0;
            for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
                for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
                    for (size_t ri = 0; ri < sizeof Rs / sizeof Rs[0]; ri++) {
                        int K = Ks[ki], N = Ns[ni], R = Rs[ri], ldy = N + 3;
                        float Y[MAXR * (CAPN + 3)], Z[MAXR * (CAPN + 3)];
                        for (int i = 0; i < R * ldy; i++) Y[i] = 12345.0f;
                        kernels_mix(type, A, rb, K, N, X, CAPK, R, Y, ldy);
                        for (int r = 0; r < R; r++) {
                            for (int j = 0; j < N; j++) {
                                float acc = 0;
                                double exact = 0, mag = 0;
                                for (int k = 0; k < K; k++) {
                                    float x = X[r * CAPK + k], w = a[k * CAPN + j];
                                    acc = fmaf(x, w, acc);
                                    exact += (double)x * w;
                                    mag += fabs((double)x * w);
                                }
                                bad += !same_bits(acc, Y[r * ldy + j]);
                                far += fabs(Y[r * ldy + j] - exact) > 1e-6 * (K + 1) * mag;
                            }
                            for (int j = N; j < ldy; j++) spill += Y[r * ldy + j] != 12345.0f;
                        }
                        if (K + 5 <= CAPK) { /* the same with five more rows of weight 0 */
                            memcpy(Xz, X, sizeof(float) * MAXR * CAPK);
                            for (int r = 0; r < R; r++)
                                for (int k = K; k < K + 5; k++) Xz[r * CAPK + k] = 0.0f;
                            kernels_mix(type, A, rb, K + 5, N, Xz, CAPK, R, Z, ldy);
                            for (int r = 0; r < R; r++)
                                for (int j = 0; j < N; j++) padded += !same_bits(Y[r * ldy + j], Z[r * ldy + j]);
                        }
                    }
            CHECK_MSG(bad == 0, "%s mix type %u: %d results differ from the fma chain", isa_names[isa], type, bad);
            CHECK_MSG(far == 0, "%s mix type %u: %d results far from the exact sum", isa_names[isa], type, far);
            CHECK_MSG(spill == 0, "%s mix type %u: %d writes past N", isa_names[isa], type, spill);
            CHECK_MSG(padded == 0, "%s mix type %u: %d results changed by zero weights", isa_names[isa], type, padded);
        }
        free(A);
        free(a);
        free(X);
        free(Xz);
    }
}

/* kernels_dequantize: Q8_0 and Q4_0 blocks (written by the tensor module's quantisers from values
 * of every scale, F16 scales that are subnormal or zero included) give exactly
 * quant_dequantize_row's values in every set; nothing is written past n. */
static void test_dequantize(void) {
    enum { BLOCKS = 12, N = BLOCKS * 32 };
    static const uint32_t types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};
    static const float scales[] = {1.0f, 300.0f, 1e-3f, 1e-6f, 1e-9f, 0.0f};
    float x[N], want[N], got[N + 8];
    for (int i = 0; i < N; i++) x[i] = frand() * scales[(i / 32) % 6];
    for (int ti = 0; ti < 2; ti++) {
        uint8_t q[BLOCKS * 34];
        CHECK(quant_quantize_row(types[ti], x, q, N));
        quant_dequantize_row(types[ti], q, want, N);
        for (int isa = KERNELS_SCALAR; isa < KERNELS_ISA_COUNT; isa++) {
            if (!available((kernels_isa)isa)) continue;
            for (int i = 0; i < N + 8; i++) got[i] = 12345.0f;
            kernels_dequantize(types[ti], q, got, N);
            int bad = 0, spill = 0;
            for (int i = 0; i < N; i++) bad += !same_bits(got[i], want[i]);
            for (int i = N; i < N + 8; i++) spill += got[i] != 12345.0f;
            CHECK_MSG(bad == 0 && spill == 0, "%s dequantize type %u: %d values differ, %d written past n",
                      isa_names[isa], types[ti], bad, spill);
        }
    }
}

/* Interleaved weights (kernels.h, KERNELS_ILV): in every set, for token counts on both sides of
 * each change of path (one matvec call, several, even or not, Q6_K's packed matmul; a set without
 * the type's kernels, which puts the rows back in order, for 1 and 129), both activation
 * formats, row ranges aligned to the tiles (in pairs and a last one alone) and cutting them,
 * storing and adding: every result bit for bit the plain rows'; AVX-512, AVX2 and AVX-VNNI have
 * the kernels (Q2_K, Q3_K, Q5_K, Q4_1, Q5_0, Q5_1 and IQ4_NL: AVX2 and AVX-VNNI). */
static void test_interleaved(void) {
    enum { R = 80, COLS = 768, MT = 129 };
    static const uint32_t types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_MXFP4, GGML_TYPE_Q8_0,
                                     GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q5_K, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,
                                     GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL};
    static const int Ts[] = {1, 2, 3, 4, 7, 8, 9, 16, 17, 25, 32, 33, 64, 65, MT};
    static const int ranges[][2] = {{0, R}, {16, 48}, {5, 70}, {3, 9}, {17, 18}, {64, 80}};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        uint32_t type = types[ti];
        size_t rb = quant_row_bytes(type, COLS);
        uint8_t *w = malloc(rb * R), *wi = malloc(rb * R);
        fill_weights(type, w, R, COLS);
        kernels_interleave(type, w, wi, R, COLS);
        CHECK_MSG(memcmp(w, wi, rb * R) != 0, "type %u: interleaving moved no byte", (unsigned)type);
        float *x = malloc(sizeof(float) * COLS), *Y0 = malloc(sizeof(float) * MT * R), *Y1 = malloc(sizeof(float) * MT * R);
        for (int isa = KERNELS_SCALAR; isa < KERNELS_ISA_COUNT; isa++) {
            if (!available((kernels_isa)isa)) continue;
            int avx512_kind = type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q6_K ||
                              type == GGML_TYPE_MXFP4 || type == GGML_TYPE_Q8_0;
            if (isa == KERNELS_AVX2 || isa == KERNELS_AVXVNNI || (isa == KERNELS_AVX512 && avx512_kind))
                CHECK(kernels_ilv_type(type));
            int bad = 0;
            for (int f = 0; f < 2; f++) {
                kernels_act fmt = (kernels_act)f;
                size_t xs = kernels_act_bytes(fmt, COLS);
                uint8_t *Xq = aligned_alloc(64, xs * MT);
                for (int t = 0; t < MT; t++) {
                    for (int i = 0; i < COLS; i++) x[i] = frand() + (t % 2 ? 0.5f : 0.0f);
                    kernels_quantize_act(fmt, x, COLS, Xq + xs * t);
                }
                /* a set without the type's kernels puts the rows back in order and multiplies them
                   as rows, whatever T is: one token and one packed matmul's worth cover it */
                const int own = kernels_ilv_type(type), nT = own ? (int)(sizeof Ts / sizeof *Ts) : 2;
                for (int k = 0; k < nT; k++)
                    for (size_t g = 0; g < sizeof ranges / sizeof *ranges; g++)
                        for (int add = 0; add < 2; add++) {
                            int T = own ? Ts[k] : k ? MT : 1, r0 = ranges[g][0], r1 = ranges[g][1];
                            for (int i = 0; i < MT * R; i++) Y0[i] = Y1[i] = (float)(i % 13) - 6.0f;
                            kernels_mul(type, w, rb, COLS, NULL, fmt, Xq, T, Y0, R, r0, r1, add, NULL);
                            kernels_mul(type | KERNELS_ILV, wi, rb, COLS, NULL, fmt, Xq, T, Y1, R, r0, r1, add, NULL);
                            for (int i = 0; i < MT * R; i++) bad += !same_bits(Y0[i], Y1[i]);
                        }
                free(Xq);
            }
            CHECK_MSG(bad == 0, "%s type %u: %d interleaved results differ from the rows'", isa_names[isa],
                      (unsigned)type, bad);
        }
        free(w);
        free(wi);
        free(x);
        free(Y0);
        free(Y1);
    }
}

/* The AVX-VNNI set is the AVX2 set with its multiply-adds fused: the same bits for every integer
 * type, activation format, token count (matvec, interleaved tiles, the packed matmul) and row range.
 * Skipped (nothing counted) on a CPU without AVX-VNNI. */
static void test_avxvnni(void) {
    if (!available(KERNELS_AVXVNNI)) {
        printf("test_avxvnni: this CPU has no AVX-VNNI\n");
        kernels_force(KERNELS_AVX512);
        return;
    }
    enum { R = 48, COLS = 512, MT = 40 };
    static const int Ts[] = {1, 2, 3, 5, 8, 17, 33, MT};
    float *x = malloc(sizeof(float) * COLS), *Y[2] = {malloc(sizeof(float) * MT * R), malloc(sizeof(float) * MT * R)};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        uint32_t type = cases[c].type;
        if (!kernels_int_type(type)) continue;
        size_t rb = quant_row_bytes(type, COLS);
        uint8_t *w = malloc(rb * R), *wi = malloc(rb * R);
        fill_weights(type, w, R, COLS);
        int ilv = 0;
        for (int f = 0; f < 2; f++) {
            kernels_act fmt = (kernels_act)f;
            if (fmt == KERNELS_ACT_I8 && !kernels_int8_type(type)) continue;
            size_t xs = kernels_act_bytes(fmt, COLS);
            uint8_t *Xq = aligned_alloc(64, xs * MT);
            for (int t = 0; t < MT; t++) {
                for (int i = 0; i < COLS; i++) x[i] = frand();
                kernels_quantize_act(fmt, x, COLS, Xq + xs * t);
            }
            int bad = 0;
            for (size_t k = 0; k < sizeof Ts / sizeof *Ts; k++)
                for (int s = 0; s < 2; s++) {
                    kernels_force(s ? KERNELS_AVXVNNI : KERNELS_AVX2);
                    ilv = kernels_ilv_type(type) && R % KERNELS_ILV_ROWS == 0;
                    if (ilv) kernels_interleave(type, w, wi, R, COLS);
                    kernels_mul(type | (ilv ? KERNELS_ILV : 0), ilv ? wi : w, rb, COLS, NULL, fmt, Xq, Ts[k], Y[s], R,
                                0, R, 0, NULL);
                    if (s) for (int i = 0; i < Ts[k] * R; i++) bad += !same_bits(Y[0][i], Y[1][i]);
                }
            CHECK_MSG(bad == 0, "avxvnni %s fmt=%d: %d results differ from avx2's", cases[c].name, f, bad);
            free(Xq);
        }
        free(w);
        free(wi);
    }
    free(x);
    free(Y[0]);
    free(Y[1]);
    kernels_force(KERNELS_AVX512);
}

/* With arguments, only the tests named run (tests/e2e/neon.sh: the integer paths again on a second
 * emulated CPU); without, all of them. */
static int wanted(int argc, char **argv, const char *name) {
    if (argc < 2) return 1;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name)) return 1;
    return 0;
}
#define RUN(test) \
    if (wanted(argc, argv, #test)) test()

static void test_types(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_type(&cases[i]);
}

int main(int argc, char **argv) {
    srand(12345);
    test_dispatch();
    RUN(test_types);
    RUN(test_exact_rows);
    RUN(test_coverage);
    RUN(test_int_path);
    RUN(test_mxfp4_scales);
    RUN(test_int_blocks);
    RUN(test_real_rows);
    RUN(test_helpers);
    RUN(test_zero_padding);
    RUN(test_mix);
    RUN(test_dequantize);
    RUN(test_interleaved);
    RUN(test_avxvnni);
    return test_summary("test_kernels");
}
