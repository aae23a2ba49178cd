/* Internal interface between the dispatcher (kernels.c) and the kernel sets, one per
 * instruction set (kernels_scalar.c, kernels_avx2.c, kernels_avx512.c).
 *
 * Determinism: every set computes the dot product of a weight row with one token through a
 * single function per type, "<type>_rows(w, cols, X, nt, out)", which evaluates nt tokens at
 * once but performs, for each token, exactly the same sequence of float operations whatever nt
 * is (the tokens only share the decoded weights). Matvec calls it with nt = 1, matmul with a
 * tile of tokens and then nt = 1 for the leftover tokens, and rows are never combined, so a
 * row's result depends only on the row and the token's activations: not on r0/r1 (thread split),
 * on T, or on decode versus prefill. It does depend on the instruction set (lane counts differ).
 * The build uses -std=c11, where GCC does not contract a*b+c into fma on its own; the kernels
 * spell every fma explicitly. */
#ifndef NC_KERNELS_IMPL_H
#define NC_KERNELS_IMPL_H

#include <stddef.h>
#include <stdint.h>

typedef struct kernels_ops {
    void (*matvec)(uint32_t type, const void *W, size_t row_bytes, int cols, const float *x, float *y,
                   int r0, int r1);
    void (*matmul)(uint32_t type, const void *W, size_t row_bytes, int cols, const float *X, int T,
                   float *Y, int ldy, int r0, int r1);
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

/* Defines name##_matvec and name##_matmul (the arguments of kernels_matvec / kernels_matmul
 * minus the type) from name##_rows. The matmul goes over blocks of rows small enough to stay in
 * cache, and within one over tiles of KT tokens, so each weight block is decoded once per tile
 * and the weights are read from memory once. */
#define KERNELS_DEFINE_DRIVERS(name, KT)                                                          \
    static void name##_matvec(const void *W, size_t row_bytes, int cols, const float *x,         \
                              float *y, int r0, int r1) {                                         \
        for (int r = r0; r < r1; r++)                                                             \
            name##_rows((const uint8_t *)W + (size_t)r * row_bytes, cols, x, 1, &y[r - r0]);      \
    }                                                                                             \
    static void name##_matmul(const void *W, size_t row_bytes, int cols, const float *X, int T,  \
                              float *Y, int ldy, int r0, int r1) {                                \
        int tile = kernels_row_tile(row_bytes);                                                   \
        for (int ra = r0; ra < r1; ra += tile) {                                                  \
            int rz = r1 - ra > tile ? ra + tile : r1, t = 0;                                      \
            for (; t + (KT) <= T; t += (KT)) {                                                    \
                for (int r = ra; r < rz; r++) {                                                   \
                    float out[KT];                                                                \
                    name##_rows((const uint8_t *)W + (size_t)r * row_bytes, cols,                 \
                                X + (size_t)t * cols, (KT), out);                                 \
                    for (int k = 0; k < (KT); k++) Y[(size_t)(t + k) * ldy + r] = out[k];         \
                }                                                                                 \
            }                                                                                     \
            for (; t < T; t++)                                                                    \
                for (int r = ra; r < rz; r++)                                                     \
                    name##_rows((const uint8_t *)W + (size_t)r * row_bytes, cols,                 \
                                X + (size_t)t * cols, 1, &Y[(size_t)t * ldy + r]);                \
        }                                                                                         \
    }

/* The switch over types shared by every set's kernels_matvec / kernels_matmul. */
#define KERNELS_DEFINE_DISPATCH()                                                                 \
    static void matvec(uint32_t type, const void *W, size_t row_bytes, int cols, const float *x, \
                       float *y, int r0, int r1) {                                                \
        switch (type) {                                                                           \
        case GGML_TYPE_F32: f32_matvec(W, row_bytes, cols, x, y, r0, r1); break;                  \
        case GGML_TYPE_F16: f16_matvec(W, row_bytes, cols, x, y, r0, r1); break;                  \
        case GGML_TYPE_BF16: bf16_matvec(W, row_bytes, cols, x, y, r0, r1); break;                \
        case GGML_TYPE_Q8_0: q8_0_matvec(W, row_bytes, cols, x, y, r0, r1); break;                \
        case GGML_TYPE_Q4_0: q4_0_matvec(W, row_bytes, cols, x, y, r0, r1); break;                \
        case GGML_TYPE_Q4_K: q4_K_matvec(W, row_bytes, cols, x, y, r0, r1); break;                \
        case GGML_TYPE_Q6_K: q6_K_matvec(W, row_bytes, cols, x, y, r0, r1); break;                \
        default: break;                                                                           \
        }                                                                                         \
    }                                                                                             \
    static void matmul(uint32_t type, const void *W, size_t row_bytes, int cols, const float *X, \
                       int T, float *Y, int ldy, int r0, int r1) {                                \
        switch (type) {                                                                           \
        case GGML_TYPE_F32: f32_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1); break;          \
        case GGML_TYPE_F16: f16_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1); break;          \
        case GGML_TYPE_BF16: bf16_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1); break;        \
        case GGML_TYPE_Q8_0: q8_0_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1); break;        \
        case GGML_TYPE_Q4_0: q4_0_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1); break;        \
        case GGML_TYPE_Q4_K: q4_K_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1); break;        \
        case GGML_TYPE_Q6_K: q6_K_matmul(W, row_bytes, cols, X, T, Y, ldy, r0, r1); break;        \
        default: break;                                                                           \
        }                                                                                         \
    }

#endif
