/* Numerical kernels, one implementation per instruction set (scalar, AVX2, AVX-512), chosen at
 * run time from cpuid by kernels_init(). Weights are read block by block from their stored type
 * (never dequantised a whole matrix at a time); activations are f32 and every dot product
 * accumulates in f32, so the default path stays close to the exact reference. */
#ifndef NC_KERNELS_H
#define NC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef enum kernels_isa { KERNELS_SCALAR = 0, KERNELS_AVX2 = 1, KERNELS_AVX512 = 2 } kernels_isa;

/* Detect the CPU and select the best set (idempotent, thread-safe). The environment variable
 * NUCLEUS_ISA=scalar|avx2|avx512 caps the choice (for tests and benchmarks). */
void kernels_init(void);
kernels_isa kernels_active(void);
const char *kernels_name(void); /* "avx512", "avx2", "scalar" */
/* Force a set (tests compare sets against each other); returns the set actually in force. */
kernels_isa kernels_force(kernels_isa isa);

/* y[r - r0] = dot(row r of W, x) for rows r in [r0, r1).
 * W: rows of `cols` elements of `type`, each row `row_bytes` long; x: cols floats. */
void kernels_matvec(uint32_t type, const void *W, size_t row_bytes, int cols, const float *x,
                    float *y, int r0, int r1);

/* Y[t * ldy + r] = dot(row r of W, X + t * cols) for rows r in [r0, r1) and t in [0, T):
 * the prefill product, organised so each weight block is read once per tile of tokens. */
void kernels_matmul(uint32_t type, const void *W, size_t row_bytes, int cols, const float *X, int T,
                    float *Y, int ldy, int r0, int r1);

/* Plain f32 helpers used by the forward pass (attention, norms). */
float kernels_dot_f32(const float *a, const float *b, int n);
/* y += a * x */
void kernels_axpy_f32(float *y, float a, const float *x, int n);

#endif
