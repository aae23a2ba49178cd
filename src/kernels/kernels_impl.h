/* Internal interface between the dispatcher (kernels.c) and the kernel sets, one per
 * instruction set (kernels_scalar.c, kernels_avx2.c, kernels_avx512.c).
 *
 * Determinism: a row's result depends only on the row and the token's activations: not on r0/r1
 * (thread split), on T, on decode versus prefill, or on which path (matvec, packed matmul) ran.
 *
 * Float weight types (F32, F16, BF16): every set computes the dot product of a weight row with
 * one token through a single function per type, "<type>_rows(w, cols, X, nt, out)", which
 * evaluates nt tokens at once but performs, for each token, exactly the same sequence of float
 * operations whatever nt is (the tokens only share the decoded weights). Matvec calls it with
 * nt = 1, matmul with a tile of tokens and then nt = 1 for the leftover tokens. These results do
 * depend on the instruction set (lane counts differ).
 *
 * Integer weight types (Q8_0, Q4_0) are defined exactly, identically in every set. Activations
 * come quantised per group of 32 (act_group: scale d, integers q, their sum). For each group g
 * the integer dot product S_g = sum_k w_k * q_k of the block's integer weights (Q8_0: -128..127,
 * Q4_0: nibble - 8) is exact in int32, whatever order a set adds in; then, in group order,
 *     acc = fma((float)S_g, dw_g * d_g, acc)        (acc starts at 0; dw_g the block's scale)
 * with dw_g * d_g rounded to f32 first. So the sets may vectorise across rows (packed matmul:
 * one row per lane) or across a row's weights (matvec: integer partial sums reduced exactly) and
 * still agree bit for bit. The build uses -std=c11, where GCC does not contract a*b+c into fma on
 * its own; the kernels spell every fma explicitly. */
#ifndef NC_KERNELS_IMPL_H
#define NC_KERNELS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "format/ggml_types.h"
#include "kernels/kernels.h"

/* One group of 32 quantised activations: x_k ~ d * q_k, and sum = sum_k q_k (which turns a
 * product with unsigned or offset weights into the signed one). */
typedef struct act_group {
    float d;
    int32_t sum;
} act_group;

#define ACT_QMAX_I16 32767.0f
#define ACT_QMAX_I8 127.0f

/* A token's quantised activations: the integers (int16 or int8, cols of them) padded to 64
 * bytes, then the act_group of every 32. */
static inline size_t act_q_bytes(kernels_act fmt, int cols) {
    size_t n = (size_t)cols * (fmt == KERNELS_ACT_I16 ? 2 : 1);
    return (n + 63) / 64 * 64;
}
static inline size_t act_row_bytes(kernels_act fmt, int cols) {
    return act_q_bytes(fmt, cols) + ((size_t)cols / 32 * sizeof(act_group) + 63) / 64 * 64;
}
static inline const act_group *act_groups(const void *xq, kernels_act fmt, int cols) {
    return (const act_group *)((const uint8_t *)xq + act_q_bytes(fmt, cols));
}

/* Bytes of one block of 32 weights of an integer type, and where its fp16 scale sits. */
static inline size_t int_block_bytes(uint32_t type) { return type == GGML_TYPE_Q8_0 ? 34 : 18; }

typedef struct kernels_ops {
    /* Float weight types, f32 activations; y[r - r0] (+)= for matvec, Y[t * ldy + r - r0] for matmul. */
    void (*matvec)(uint32_t type, const void *W, size_t row_bytes, int cols, const float *x, float *y,
                   int r0, int r1, int add);
    void (*matmul)(uint32_t type, const void *W, size_t row_bytes, int cols, const float *X, int T,
                   float *Y, int ldy, int r0, int r1, int add);
    /* Integer weight types. */
    /* Groups [g0, g1) of one token's activations (x and dst: the whole row). */
    void (*quantize_act)(kernels_act fmt, const float *x, int cols, int g0, int g1, void *dst);
    void (*matvec_q)(uint32_t type, const void *W, size_t row_bytes, int cols, kernels_act fmt, const void *xq,
                     float *y, int r0, int r1, int add);
    /* Xq: T rows of act_row_bytes(fmt, cols); Y[t * ldy + r - r0]; scratch:
     * kernels_mul_scratch_bytes(cols), aligned. */
    void (*matmul_q)(uint32_t type, const void *W, size_t row_bytes, int cols, kernels_act fmt, const void *Xq,
                     int T, float *Y, int ldy, int r0, int r1, int add, void *scratch);
    float (*dot_f32)(const float *a, const float *b, int n);
    void (*axpy_f32)(float *y, float a, const float *x, int n);
} kernels_ops;

extern const kernels_ops kernels_scalar_ops;
#if defined(__x86_64__)
extern const kernels_ops kernels_avx2_ops;
extern const kernels_ops kernels_avx512_ops;
#endif

#if defined(__GNUC__)
#define KERNELS_INLINE static inline __attribute__((always_inline))
/* Per-block scales are stored to a small array and each is then broadcast from memory into the
 * FMAs. Without this barrier the compiler forwards the stored vector and builds every broadcast
 * from shuffles, and the shuffle unit is what the SIMD loops run short of. */
#define FROM_MEMORY(array) __asm__("" : "+m"(array))
#else
#define KERNELS_INLINE static inline
#define FROM_MEMORY(array) ((void)0)
#endif

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
            for (; t < T; t++)                                                                    \
                for (int r = ra; r < rz; r++) {                                                   \
                    float out;                                                                    \
                    name##_rows((const uint8_t *)W + (size_t)r * row_bytes, cols,                 \
                                X + (size_t)t * cols, 1, &out);                                   \
                    kernels_store(&Y[(size_t)t * ldy + (r - r0)], out, add);                             \
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
        case GGML_TYPE_Q4_K: q4_K_matvec(W, row_bytes, cols, x, y, r0, r1, add); break;           \
        case GGML_TYPE_Q6_K: q6_K_matvec(W, row_bytes, cols, x, y, r0, r1, add); break;           \
        default: break;                                                                           \
        }                                                                                         \
    }                                                                                             \
    static void matmul(uint32_t type, const void *W, size_t row_bytes, int cols, const float *X, \
                       int T, float *Y, int ldy, int r0, int r1, int add) {                       \
        switch (type) {                                                                           \
        case GGML_TYPE_F32: f32_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1, add); break;     \
        case GGML_TYPE_F16: f16_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1, add); break;     \
        case GGML_TYPE_BF16: bf16_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1, add); break;   \
        case GGML_TYPE_Q4_K: q4_K_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1, add); break;   \
        case GGML_TYPE_Q6_K: q6_K_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1, add); break;   \
        default: break;                                                                           \
        }                                                                                         \
    }

#endif
