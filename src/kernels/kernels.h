/* Numerical kernels, one implementation per instruction set (scalar, AVX2, AVX-512 on x86-64;
 * scalar, NEON on AArch64), chosen at run time (cpuid, the auxiliary vector) by kernels_init().
 * Weights are read block by block from their stored type (never dequantised a whole matrix at a
 * time). Float weight types (F32, F16, BF16) take f32
 * activations; the integer types take activations quantised per group of 32 (int16 by default,
 * int8 in the fast mode) and sum exact integer products per group before scaling in f32. */
#ifndef NC_KERNELS_H
#define NC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* On x86-64 the sets rank scalar < AVX2 < AVX-VNNI (the AVX2 set with vpdpwssd) < AVX-512. */
typedef enum kernels_isa { KERNELS_SCALAR = 0, KERNELS_AVX2 = 1, KERNELS_AVX512 = 2, KERNELS_NEON = 3,
                           KERNELS_AVXVNNI = 4 } kernels_isa;
#define KERNELS_ISA_COUNT 5

/* Detect the CPU and select the best set (idempotent, thread-safe). The environment variable
 * NUCLEUS_ISA=scalar|avx2|avxvnni|avx512|neon caps the choice (for tests and benchmarks); a set of
 * the other architecture caps nothing. */
void kernels_init(void);
kernels_isa kernels_active(void);
const char *kernels_name(void); /* "avx512", "avxvnni", "avx2", "neon", "scalar" */
/* Force a set (tests compare sets against each other); returns the set actually in force: the
 * best one this CPU has up to isa (on AArch64: NEON for any isa but scalar). */
kernels_isa kernels_force(kernels_isa isa);

/* y[r - r0] = dot(row r of W, x) for rows r in [r0, r1).
 * W: rows of `cols` elements of `type`, row r at W + r * row_bytes: row_bytes is a stride, at least
 * quant_row_bytes(type, cols) (larger for a view of every other row of a fused matrix, say);
 * x: cols floats (quantised to KERNELS_ACT_I16 first for the integer types). */
void kernels_matvec(uint32_t type, const void *W, size_t row_bytes, int cols, const float *x,
                    float *y, int r0, int r1);

/* Y[t * ldy + r] = dot(row r of W, X + t * cols) for rows r in [r0, r1) and t in [0, T):
 * the prefill product, organised so each weight block is read once per tile of tokens. */
void kernels_matmul(uint32_t type, const void *W, size_t row_bytes, int cols, const float *X, int T,
                    float *Y, int ldy, int r0, int r1);

/* ---- integer activations ----------------------------------------------------------------
 * Weights of the integer types (every quantised type: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K .. Q6_K,
 * IQ4_NL, IQ3_S, IQ4_XS, MXFP4) are multiplied with activations quantised per group of 32:
 * x ~ d * q with d = max|x| / QMAX and q integers (QMAX = 32767 for KERNELS_ACT_I16, the default:
 * about 1.5e-5 of the group's largest value; 127 for KERNELS_ACT_I8, llama.cpp's Q8 activations,
 * the fast mode). A row's result is defined exactly from the integers (see kernels_impl.h), so
 * every set and every path (matvec, packed matmul) gives the same bits. */
typedef enum kernels_act { KERNELS_ACT_I16 = 0, KERNELS_ACT_I8 = 1 } kernels_act;

/* True for the weight types computed with integer activations. */
int kernels_int_type(uint32_t type);
/* True for those whose kernels take KERNELS_ACT_I8 as it is: Q8_0, Q4_0, Q4_K, Q6_K. Every integer
 * type accepts either format (the others are handed int8 activations widened to int16 per call:
 * the same result, at the cost of a copy, so the fast mode should choose int8 only for these). */
int kernels_int8_type(uint32_t type);
/* Bytes of one token's quantised activations (cols a multiple of 32): a multiple of 64. */
size_t kernels_act_bytes(kernels_act fmt, int cols);
/* Quantise one token's activations into dst (kernels_act_bytes long, 64-byte aligned). */
void kernels_quantize_act(kernels_act fmt, const float *x, int cols, void *dst);
/* Only groups [g0, g1) (elements 32 * g0 .. 32 * g1 - 1) of the token; x and dst the whole row. */
void kernels_quantize_act_part(kernels_act fmt, const float *x, int cols, int g0, int g1, void *dst);

/* The forward pass's product: Y[t * ldy + r - r0] (+)= dot(row r of W, token t) for rows [r0, r1)
 * and T tokens. Float weight types read x ([T][cols] f32); integer types read xq ([T] rows of
 * kernels_act_bytes(fmt, cols), quantised by kernels_quantize_act). With add, the result is added
 * to Y (the residual stream) instead of stored. scratch: kernels_mul_scratch_bytes() bytes,
 * 64-byte aligned, private to the calling thread (NULL: allocated per call). */
void kernels_mul(uint32_t type, const void *W, size_t row_bytes, int cols, const float *x, kernels_act fmt,
                 const void *xq, int T, float *Y, int ldy, int r0, int r1, int add, void *scratch);
size_t kernels_mul_scratch_bytes(void);

/* ---- interleaved weights ---------------------------------------------------------------------
 * A decode step reads every weight once per token, and the matvec kernels spend more of their
 * time reducing each row's products across the vector lanes than multiplying. In the interleaved
 * layout the rows go in tiles of KERNELS_ILV_ROWS (16); a tile's blocks (the type's: 32 or 256
 * weights) in order, each as a record of the 16 rows' blocks: first the rows' fp16 d where a
 * block is 2 bytes over a multiple of 4 (MXFP4: its E8M0 byte), in row order, then the rest of
 * the blocks dword by dword (ilv_region): dword c of rows 0..15, then dword c + 1. A 64-byte load
 * then holds 4 bytes of each of 16 rows, a quad of weights (or the K-quants' scales) per lane,
 * which multiplies with a broadcast quad of activations: the
 * rows stay in the lanes and nothing is reduced across them (the packed matmul's form, kept at
 * rest). The matrix keeps its size and its rows' byte offsets at tile boundaries: rows
 * [16i, 16i + 16) are still at W + 16i * row_bytes. The integers, hence the results, are the row
 * layout's bit for bit. */
#define KERNELS_ILV_ROWS 16
/* Or'ed into kernels_mul's type: W is interleaved (its rows a multiple of 16, row_bytes the
 * type's row size; r0 and r1 any rows, those of a tile cut by them are put back in order). */
#define KERNELS_ILV 0x10000u
/* True when the active set multiplies this type faster interleaved (AVX-512: Q4_0, Q4_K, Q6_K,
 * MXFP4, Q8_0; AVX2 and AVX-VNNI these and Q2_K, Q3_K, Q5_K, Q4_1, Q5_0, Q5_1, IQ4_NL); every
 * set accepts interleaved weights of these types (putting rows back in order where it has no
 * kernel for them). */
int kernels_ilv_type(uint32_t type);
/* rows (a multiple of 16) of cols elements of type, plain rows in src, into dst interleaved. */
void kernels_interleave(uint32_t type, const void *src, void *dst, int rows, int cols);

/* Rows of A weighted by X: for r < R and columns j < N, Y[r * ldy + j] = sum over k < K of
 * X[r * ldx + k] * A[k][j], where A's rows (F32, F16 or BF16) are row_bytes apart. Each result is one
 * f32 fma chain over k in increasing order, acc = fma(x_k, a_kj, acc) from 0: the same bits in
 * every set whatever R, N and tiling (the columns run along the vector lanes; no sum crosses
 * lanes), and a weight x_k of 0 leaves the chain as it was (finite A). Attention's two products:
 * the scores q K^T over the transposed keys (k: dimensions, j: cells) and the output p V over
 * the values stored by cell (k: cells, j: dimensions). */
void kernels_mix(uint32_t type, const void *A, size_t row_bytes, int K, int N, const float *X, int ldx, int R, float *Y,
                 int ldy);

/* Element-wise helpers of the forward pass. Each result depends only on its inputs (and the set:
 * the SIMD sets use their own exp, within 2 ulp of the exact value). */
/* out = RMSNorm(x) * w: x * (1 / sqrt(mean(x^2) + eps)) * w. */
void kernels_rms_norm(float *out, const float *x, const float *w, int n, float eps);
/* The gated activations out = act(g) * u of the FFNs:
 *   KERNELS_SILU       silu(g) * u = g / (1 + exp(-g)) * u                          (SwiGLU)
 *   KERNELS_GELU_TANH  gelu_tanh(g) * u = g / (1 + exp(-2 y)) * u,                  (GeGLU)
 *                      y = sqrt(2 / pi) (g + 0.044715 g^3): 0.5 g (1 + tanh y) rewritten as a
 *                      sigmoid, which has no cancellation near zero
 *   KERNELS_SILU_OAI   gpt-oss: x = min(g, 7), v = clamp(u, -7, 7): x / (1 + exp(-1.702 x)) * (v + 1) */
typedef enum kernels_glu { KERNELS_SILU, KERNELS_GELU_TANH, KERNELS_SILU_OAI } kernels_glu;
void kernels_glu_act(kernels_glu act, float *out, const float *g, const float *u, int n);
/* Soft-capping (Gemma 2): x = cap * tanh(x * scale / cap), tanh z computed as
 * sign(z) (1 - e) / (1 + e) with e = exp(-2 |z|). */
void kernels_softcap(float *x, int n, float scale, float cap);
/* One span of a streaming softmax: p *= scale; *max = max(*max, max p); p = exp(p - *max);
 * returns the sum of the new p. */
float kernels_softmax_span(float *p, int n, float scale, float *max);
/* n elements (a multiple of 32) of Q8_0 or Q4_0 blocks to f32 (the quantised KV cache's spans):
 * d * q and d * (q - 8), the values quant_dequantize_row gives, bit for bit, in every set. */
void kernels_dequantize(uint32_t type, const void *src, float *dst, int n);
/* Round to nearest even fp16, as quant_f32_to_fp16. */
void kernels_f32_to_f16(uint16_t *dst, const float *src, int n);
/* Read n bytes (a multiple of 256, p 64-byte aligned) as fast as the set can, returning their
 * XOR folded to 64 bits (so the reads cannot be optimised away): memory bandwidth benchmarks. */
uint64_t kernels_read(const void *p, size_t n);

#endif
