/* Internal interface between the dispatcher (kernels.c) and the kernel sets, one per
 * instruction set (kernels_scalar.c, kernels_avx2.c, kernels_avx512.c, kernels_neon.h).
 *
 * Determinism: a row's result depends only on the row and the token's activations: not on r0/r1
 * (thread split), on T, on decode versus prefill, or on which path (matvec, packed matmul) ran.
 *
 * Float weight types (F32, F16, BF16): each set defines a row's dot product with one token as a
 * fixed sequence of float operations, which every path performs whatever the tiles: the scalar,
 * AVX2 and NEON sets through a single function per type, "<type>_rows(w, cols, X, nt, out)",
 * evaluating nt tokens at once with the same operations per token (the tokens only share the
 * decoded weights; matvec calls it with nt = 1, matmul with tiles of KT tokens and one smaller
 * tile of the leftover tokens); the AVX-512 set as 16 lane chains (kernels_avx512.c), computed by
 * register tiles of rows and tokens or by f32 panels. These results do depend on the instruction
 * set (lane counts differ).
 *
 * Integer weight types (every quantised type: QUANT_INT_TYPES) are defined exactly, identically
 * in every set, from the type's integer form (tensor/quant.h: per group of 32 weights, integers
 * w_k and per half a scale a and an offset b, weight k = a * w_k + b). Activations come quantised
 * per group of 32 (act_group: scale d, integers q, their sums). Over each group g, the integer dot
 * products of the weights' integers with the q are exact in int32, whatever order a set adds in:
 * S = sum_k w_k * q_k, or for the types with scales per 16 weights ("halves": Q2_K, Q3_K, Q6_K)
 * S_a over k < 16 and S_b over k >= 16. Then, in group order, starting from acc = 0 (each product
 * of two scales rounded to f32 first, then the fma):
 *   one scale per 32:   acc = fma(S, a * d, acc)
 *   halves:             acc = fma(S_a, a_a * d, acc);  acc = fma(S_b, a_b * d, acc)
 * and for the types with offsets (mins), after those:
 *   one offset per 32:  acc = fma(b, d * sum, acc)                          (Q4_1, Q5_1, Q4_K, Q5_K)
 *   halves:             acc = fma(b_a, d * sum16, acc);  acc = fma(b_b, d * (sum - sum16), acc)  (Q2_K)
 * The types' a and b (all exact in f32):
 *   Q8_0, Q4_0, Q5_0, IQ4_NL (w: int8, nibble - 8, 5 bits - 16, IQ4 value): a = the block's fp16 d
 *   MXFP4 (w: the E2M1 value times 2, -12..12):                a = 2^(e-128) from the E8M0 byte
 *   Q4_1, Q5_1 (w: 0..15, 0..31):                              a = d, b = m (fp16)
 *   Q4_K, Q5_K (w: 0..15, 0..31):                              a = dk * sc, b = -(dmin * m)
 *   Q2_K (w: 0..3; per 16):                                    a = dk * sc, b = -(dmin * m)
 *   Q3_K (w: -4..3; per 16):                                   a = dk * (sc - 32)
 *   Q6_K (w: -32..31; per 16):                                 a = dk * sc
 *   IQ4_XS (w: IQ4 value):                                     a = dk * (ls - 32)
 *   IQ3_S (w: +-grid magnitude, -15..15):                      a = dk * (1 + 2 s)
 * where dk, dmin are a 256-block's fp16 scales and sc, m, ls, s its sub-blocks' integer scales
 * and mins. So the sets may vectorise across rows (packed matmul: one row per lane) or across a
 * row's weights (matvec: integer partial sums reduced exactly) and still agree bit for bit. The
 * build uses -std=c11, where GCC does not contract a*b+c into fma on its own; the kernels spell
 * every fma explicitly. */
#ifndef NC_KERNELS_IMPL_H
#define NC_KERNELS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "format/ggml_types.h"
#include "kernels/kernels.h"
#include "tensor/quant.h"

/* One group of 32 quantised activations: x_k ~ d * q_k; sum = sum_k q_k (the min terms, and it
 * turns a product with unsigned or offset weights into the signed one), sum16 the same over
 * k < 16 (the halves). */
typedef struct act_group {
    float d;
    int32_t sum, sum16;
} act_group;

#define ACT_QMAX_I16 32767.0f
#define ACT_QMAX_I8 127.0f

/* A token's quantised activations: the integers (int16 or int8, cols of them) padded to 64
 * bytes, the act_group of every 32 (padded likewise), and for int16 the same integers as byte
 * planes (act_planes). */
static inline size_t act_q_bytes(kernels_act fmt, int cols) {
    size_t n = (size_t)cols * (fmt == KERNELS_ACT_I16 ? 2 : 1);
    return (n + 63) / 64 * 64;
}
static inline size_t act_groups_bytes(int cols) { return ((size_t)cols / 32 * sizeof(act_group) + 63) / 64 * 64; }
/* The int16 integers as byte planes, for the byte dot products of the interleaved kernels
 * (vpdpbusd): per group 64 bytes, the 32 low bytes (q & 255, unsigned) then the 32 high bytes
 * (q >> 8, signed), q = 256 hi + lo; after all groups, each group's sum of its high bytes (int32).
 * Written once when a token is quantised (kernels.c), not by every product that reads them (once
 * per chunk of rows and per matrix: 1.5-2% of a verification pass, TinyLlama Q4_0, two threads).
 * Every set writes them, so that activations quantised by one set multiply in any other; the sets
 * without interleaved kernels, and the packed matmul, read only the int16 values (the planes cost
 * them one vectorised pass over each token). */
static inline size_t act_planes_bytes(kernels_act fmt, int cols) {
    return fmt == KERNELS_ACT_I16 ? (2 * (size_t)cols + (size_t)cols / 32 * 4 + 63) / 64 * 64 : 0;
}
static inline size_t act_row_bytes(kernels_act fmt, int cols) {
    return act_q_bytes(fmt, cols) + act_groups_bytes(cols) + act_planes_bytes(fmt, cols);
}
static inline const act_group *act_groups(const void *xq, kernels_act fmt, int cols) {
    return (const act_group *)((const uint8_t *)xq + act_q_bytes(fmt, cols));
}
static inline const uint8_t *act_planes(const void *xq, int cols) {
    return (const uint8_t *)xq + act_q_bytes(KERNELS_ACT_I16, cols) + act_groups_bytes(cols);
}

/* Bytes of kernels_mul's scratch: room for the most a set's packed matmul needs (AVX-512's
 * panel, 32 rows by 512 int16 weights and four f32 scales per row and group, and block of f32
 * accumulators, 128 rows by 128 tokens: 168 KB). */
#define KERNELS_MUL_SCRATCH (1 << 20)

/* A type's block and the shape of its definition (above) as compile-time constants for the
 * specialised kernels: bytes and groups of 32 per block, scales per 16 weights, offsets. From the
 * list of quantised types (tensor/quant.h). */
#define KERNELS_BYTES_CASE(NAME, GROUPS, HALVES, MIN, WRITER) case GGML_TYPE_##NAME: return sizeof(block_##NAME);
#define KERNELS_GROUPS_CASE(NAME, GROUPS, HALVES, MIN, WRITER) case GGML_TYPE_##NAME: return GROUPS;
#define KERNELS_HALVES_CASE(NAME, GROUPS, HALVES, MIN, WRITER) case GGML_TYPE_##NAME: return HALVES;
#define KERNELS_MIN_CASE(NAME, GROUPS, HALVES, MIN, WRITER) case GGML_TYPE_##NAME: return MIN;
static inline size_t int_block_bytes(uint32_t type) {
    switch (type) { QUANT_INT_TYPES(KERNELS_BYTES_CASE) default: return 0; }
}
static inline int int_block_groups(uint32_t type) {
    switch (type) { QUANT_INT_TYPES(KERNELS_GROUPS_CASE) default: return 1; }
}
static inline int int_halves(uint32_t type) {
    switch (type) { QUANT_INT_TYPES(KERNELS_HALVES_CASE) default: return 0; }
}
static inline int int_has_min(uint32_t type) {
    switch (type) { QUANT_INT_TYPES(KERNELS_MIN_CASE) default: return 0; }
}
/* The block holding group g of a row. */
static inline const uint8_t *int_block(uint32_t type, const uint8_t *row, int g) {
    return row + (size_t)(g / int_block_groups(type)) * int_block_bytes(type);
}

/* The interleaved layout (kernels.h, KERNELS_ILV) of a type: the bytes [q0, q0 + qn) of each block
 * go dword by dword across the 16 rows; the rest, at most an fp16 d (Q4_0, Q5_0, Q8_0, IQ4_NL,
 * Q3_K, Q6_K: their blocks are 2 bytes over a multiple of 4) or MXFP4's E8M0 byte, stays per row,
 * the 16 rows' in row order ahead of the dwords. The K-quants' scales go with their integers: a 64-byte load then
 * holds a dword of scales of each of 16 rows, which as row fields would take gathers. 0 for the
 * types without the layout. */
static inline int ilv_region(uint32_t type, size_t *q0, size_t *qn) {
    switch (type) {
    case GGML_TYPE_Q4_0: *q0 = offsetof(block_Q4_0, qs), *qn = sizeof(((block_Q4_0 *)0)->qs); return 1;
    case GGML_TYPE_Q4_1: *q0 = 0, *qn = sizeof(block_Q4_1); return 1;
    case GGML_TYPE_Q5_0: *q0 = offsetof(block_Q5_0, qh), *qn = sizeof(block_Q5_0) - offsetof(block_Q5_0, qh); return 1;
    case GGML_TYPE_Q5_1: *q0 = 0, *qn = sizeof(block_Q5_1); return 1;
    case GGML_TYPE_Q2_K: *q0 = 0, *qn = sizeof(block_Q2_K); return 1;
    case GGML_TYPE_Q3_K: *q0 = 0, *qn = offsetof(block_Q3_K, d); return 1;
    case GGML_TYPE_Q4_K: *q0 = 0, *qn = sizeof(block_Q4_K); return 1;
    case GGML_TYPE_Q5_K: *q0 = 0, *qn = sizeof(block_Q5_K); return 1;
    case GGML_TYPE_Q6_K: *q0 = 0, *qn = offsetof(block_Q6_K, d); return 1;
    case GGML_TYPE_IQ4_NL: *q0 = offsetof(block_IQ4_NL, qs), *qn = sizeof(((block_IQ4_NL *)0)->qs); return 1;
    case GGML_TYPE_MXFP4: *q0 = offsetof(block_MXFP4, qs), *qn = sizeof(((block_MXFP4 *)0)->qs); return 1;
    case GGML_TYPE_Q8_0: *q0 = offsetof(block_Q8_0, qs), *qn = sizeof(((block_Q8_0 *)0)->qs); return 1;
    default: *q0 = *qn = 0; return 0;
    }
}
/* The line (the 16 rows' dword) of a record's region holding the block's bytes o..o+3. */
static inline size_t ilv_line_of(uint32_t type, size_t o) {
    size_t q0, qn;
    ilv_region(type, &q0, &qn);
    return (o - q0) / 4;
}
/* A record's bytes ahead of its region: the 16 rows' fields outside it (16 x 2 for an fp16 d). */
static inline size_t ilv_head(uint32_t type) {
    size_t q0, qn;
    ilv_region(type, &q0, &qn);
    return KERNELS_ILV_ROWS * (int_block_bytes(type) - qn);
}
/* Interleaved rows [0, rows) back to plain ones (interleave.c). */
void ilv_deinterleave(uint32_t type, const void *src, void *dst, int rows, int cols);

/* The types whose kernels also take int8 activations (KERNELS_ACT_I8); kernels_mul hands the
 * others int8 activations widened to int16 (the same integers, so the same result). */
static inline int int_takes_i8(uint32_t type) {
    return type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q6_K;
}

/* Q6_K: the 32 values (-32..31) of group j (0..7) of a block: in half h = j / 4 (ql + 64h,
 * qh + 32h), part p = j % 4 takes nibble p / 2 of ql[32 * (p % 2) + l] and bits 2p, 2p+1 of
 * qh[l] as its top two bits, for l = 0..31. */
#define Q6K_QL(j) (64 * ((j) / 4) + 32 * ((j) % 2 ? 1 : 0))
#define Q6K_NIBBLE(j) (((j) % 4) / 2)
#define Q6K_QH(j) (128 + 32 * ((j) / 4))
#define Q6K_QH_SHIFT(j) (2 * ((j) % 4))

/* One integer type's products. Xq: T rows of act_row_bytes(fmt, cols); y[r - r0] (+)= for
 * matvec, Y[t * ldy + r - r0] for matmul; scratch: KERNELS_MUL_SCRATCH bytes, 64-byte aligned.
 * fmt is KERNELS_ACT_I8 only for the types of int_takes_i8. */
typedef struct kernels_int_ops {
    void (*matvec)(const void *W, size_t row_bytes, int cols, kernels_act fmt, const void *xq, float *y, int r0, int r1,
                   int add);
    void (*matmul)(const void *W, size_t row_bytes, int cols, kernels_act fmt, const void *Xq, int T, float *Y, int ldy,
                   int r0, int r1, int add, void *scratch);
} kernels_int_ops;

typedef struct kernels_ops {
    /* Float weight types, f32 activations; y[r - r0] (+)= for matvec, Y[t * ldy + r - r0] for matmul. */
    void (*matvec)(uint32_t type, const void *W, size_t row_bytes, int cols, const float *x, float *y,
                   int r0, int r1, int add);
    void (*matmul)(uint32_t type, const void *W, size_t row_bytes, int cols, const float *X, int T,
                   float *Y, int ldy, int r0, int r1, int add);
    /* Integer weight types. */
    /* Groups [g0, g1) of one token's activations (x and dst: the whole row). */
    void (*quantize_act)(kernels_act fmt, const float *x, int cols, int g0, int g1, void *dst);
    kernels_int_ops q[GGML_TYPE_COUNT]; /* by type; NULL entries for the others */
    /* Interleaved weights (KERNELS_ILV) of the types in ilv_types (a bit per type): Y as the int
     * matmul's, rows [r0, r1) multiples of 16; int8 activations only for the types of
     * int_takes_i8 (kernels_mul widens the others'). Interleaved weights of other types, or in a
     * set without ilv_mul, kernels_mul multiplies as rows put back in order. */
    uint64_t ilv_types;
    void (*ilv_mul)(uint32_t type, const void *W, int cols, kernels_act fmt, const void *Xq, int T, float *Y, int ldy,
                    int r0, int r1, int add, void *scratch);
    void (*mix)(uint32_t type, const void *A, size_t row_bytes, int K, int N, const float *X, int ldx, int R, float *Y,
                int ldy);
    void (*rms_norm)(float *out, const float *x, const float *w, int n, float eps);
    void (*glu)(kernels_glu act, float *out, const float *g, const float *u, int n);
    void (*softcap)(float *x, int n, float scale, float cap);
    float (*softmax_span)(float *p, int n, float scale, float *max);
    void (*f32_to_f16)(uint16_t *dst, const float *src, int n);
    void (*dequantize)(uint32_t type, const uint8_t *src, float *dst, int n);
    uint64_t (*read)(const void *p, size_t n);
} kernels_ops;

/* A set's integer entry points for each type, from its generic
 * matvec_tiles(type, fmt, W, row_bytes, cols, xq, y, r0, r1, add) and
 * matmul_blocks(type, fmt, W, row_bytes, cols, Xq, T, Y, ldy, r0, r1, add, scratch), specialised on
 * the type and the format (both compile-time constants there, so the inlined kernels lose their
 * branches on them): KERNELS_DEFINE_INT defines them, KERNELS_INT_ENTRY names them in the table
 * (QUANT_INT_TYPES(KERNELS_DEFINE_INT) and .q = {QUANT_INT_TYPES(KERNELS_INT_ENTRY)}). */
#define KERNELS_DEFINE_INT(NAME, GROUPS, HALVES, MIN, WRITER)                                                          \
    static void matvec_##NAME(const void *W, size_t rb, int cols, kernels_act fmt, const void *xq, float *y,           \
                              int r0, int r1, int add) {                                                               \
        if (int_takes_i8(GGML_TYPE_##NAME) && fmt == KERNELS_ACT_I8)                                                   \
            matvec_tiles(GGML_TYPE_##NAME, KERNELS_ACT_I8, (const uint8_t *)W, rb, cols, xq, y, r0, r1, add);          \
        else                                                                                                           \
            matvec_tiles(GGML_TYPE_##NAME, KERNELS_ACT_I16, (const uint8_t *)W, rb, cols, xq, y, r0, r1, add);         \
    }                                                                                                                  \
    static void matmul_##NAME(const void *W, size_t rb, int cols, kernels_act fmt, const void *Xq, int T,              \
                              float *Y, int ldy, int r0, int r1, int add, void *scratch) {                             \
        if (int_takes_i8(GGML_TYPE_##NAME) && fmt == KERNELS_ACT_I8)                                                   \
            matmul_blocks(GGML_TYPE_##NAME, KERNELS_ACT_I8, (const uint8_t *)W, rb, cols, (const uint8_t *)Xq,         \
                          T, Y, ldy, r0, r1, add, scratch);                                                            \
        else                                                                                                           \
            matmul_blocks(GGML_TYPE_##NAME, KERNELS_ACT_I16, (const uint8_t *)W, rb, cols,                             \
                          (const uint8_t *)Xq, T, Y, ldy, r0, r1, add, scratch);                                       \
    }
#define KERNELS_INT_ENTRY(NAME, GROUPS, HALVES, MIN, WRITER) [GGML_TYPE_##NAME] = {matvec_##NAME, matmul_##NAME},

extern const kernels_ops kernels_scalar_ops;
#if defined(__x86_64__)
extern const kernels_ops kernels_avx2_ops;
extern const kernels_ops kernels_avxvnni_ops;
extern const kernels_ops kernels_avx512_ops;
#elif defined(__aarch64__)
extern const kernels_ops kernels_neon_ops;      /* ASIMD only */
extern const kernels_ops kernels_neon_dot_ops;  /* the same with SDOT */
extern const kernels_ops kernels_neon_i8mm_ops; /* with SDOT and I8MM */
#endif

#if defined(__GNUC__)
#define KERNELS_INLINE static inline __attribute__((always_inline))
/* An x86 vector value materialised in its register at this point: integer adds are associative,
 * and GCC otherwise rebalances a long accumulation chain into a tree of products computed ahead
 * and spilled. */
#define KEEP_IN_REGISTER(v) __asm__("" : "+x"(v))
#else
#define KERNELS_INLINE static inline
#define KEEP_IN_REGISTER(v) ((void)0)
#endif

/* The SIMD sets' exp(x) (Cephes' expf): x clamped to [EXP_LO, EXP_HI] (below EXP_LO the result
 * flushes to 0), x = n ln2 + r with ln2 = EXP_LN2_HI + EXP_LN2_LO in two parts (so r is exact),
 * e^r = 1 + r + r^2 * P(r) with P of degree 5 (EXP_P0 highest), then times 2^n: within 2 ulp. */
#define EXP_HI 88.7228f
#define EXP_LO -87.3365f
#define EXP_LOG2E 1.44269504f
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO -2.12194440e-4f
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f

/* The gated activations' constants (kernels_glu): GELU's -2 sqrt(2 / pi) and cubic coefficient;
 * gpt-oss's clamp and sigmoid slope. */
#define GELU_2C -1.5957691216f
#define GELU_A 0.044715f
#define OAI_LIMIT 7.0f
#define OAI_ALPHA 1.702f

/* Weight rows a matmul keeps hot in cache while it walks all token tiles (about 256 KB). */
static inline int kernels_row_tile(size_t row_bytes) {
    size_t n = (256u << 10) / (row_bytes ? row_bytes : 1);
    return n < 1 ? 1 : n > 4096 ? 4096 : (int)n;
}

static inline void kernels_store(float *y, float v, int add) { *y = add ? *y + v : v; }

/* Defines name##_matvec and name##_matmul (the arguments of the ops minus the type) from
 * name##_rows. The matmul goes over blocks of rows small enough to stay in cache, and within one
 * over tiles of KT tokens, so each weight block is decoded once per tile and the weights are read
 * from memory once. */
#define KERNELS_DEFINE_DRIVERS(name, KT)                                                          \
    static void name##_matvec(const void *W, size_t row_bytes, int cols, const float *x,         \
                              float *y, int r0, int r1, int add) {                                \
        for (int r = r0; r < r1; r++) {                                                           \
            float out;                                                                            \
            name##_rows((const uint8_t *)W + (size_t)r * row_bytes, cols, x, 1, &out);            \
            kernels_store(&y[r - r0], out, add);                                                  \
        }                                                                                         \
    }                                                                                             \
    static void name##_matmul(const void *W, size_t row_bytes, int cols, const float *X, int T,  \
                              float *Y, int ldy, int r0, int r1, int add) {                       \
        int tile = kernels_row_tile(row_bytes);                                                   \
        for (int ra = r0; ra < r1; ra += tile) {                                                  \
            int rz = r1 - ra > tile ? ra + tile : r1, t = 0;                                      \
            for (; t + (KT) <= T; t += (KT)) {                                                    \
                for (int r = ra; r < rz; r++) {                                                   \
                    float out[KT];                                                                \
                    name##_rows((const uint8_t *)W + (size_t)r * row_bytes, cols,                 \
                                X + (size_t)t * cols, (KT), out);                                 \
                    for (int k = 0; k < (KT); k++) kernels_store(&Y[(size_t)(t + k) * ldy + (r - r0)], out[k], add); \
                }                                                                                 \
            }                                                                                     \
            if (t < T) /* the leftover tokens as one smaller tile */                              \
                for (int r = ra; r < rz; r++) {                                                   \
                    float out[KT];                                                                \
                    name##_rows((const uint8_t *)W + (size_t)r * row_bytes, cols,                 \
                                X + (size_t)t * cols, T - t, out);                                \
                    for (int k = 0; k < T - t; k++)                                               \
                        kernels_store(&Y[(size_t)(t + k) * ldy + (r - r0)], out[k], add);         \
                }                                                                                 \
        }                                                                                         \
    }

/* The switch over float weight types shared by every set's matvec / matmul. */
#define KERNELS_DEFINE_DISPATCH()                                                                 \
    static void matvec(uint32_t type, const void *W, size_t row_bytes, int cols, const float *x, \
                       float *y, int r0, int r1, int add) {                                       \
        switch (type) {                                                                           \
        case GGML_TYPE_F32: f32_matvec(W, row_bytes, cols, x, y, r0, r1, add); break;             \
        case GGML_TYPE_F16: f16_matvec(W, row_bytes, cols, x, y, r0, r1, add); break;             \
        case GGML_TYPE_BF16: bf16_matvec(W, row_bytes, cols, x, y, r0, r1, add); break;           \
        default: break;                                                                           \
        }                                                                                         \
    }                                                                                             \
    static void matmul(uint32_t type, const void *W, size_t row_bytes, int cols, const float *X, \
                       int T, float *Y, int ldy, int r0, int r1, int add) {                       \
        switch (type) {                                                                           \
        case GGML_TYPE_F32: f32_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1, add); break;     \
        case GGML_TYPE_F16: f16_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1, add); break;     \
        case GGML_TYPE_BF16: bf16_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1, add); break;   \
        default: break;                                                                           \
        }                                                                                         \
    }

#endif
