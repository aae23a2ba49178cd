/* The NEON set for CPUs with SDOT and I8MM (FEAT_I8MM, Armv8.6; the Makefile compiles this file
 * with both enabled): kernels_neon_dot.c's, with the int8 products of the matmul's 4-token tiles
 * by SMMLA. The same results: the products are exact integers either way. */
#if defined(__aarch64__)
#define NEON_SDOT 1
#define NEON_I8MM 1
#define NEON_OPS kernels_neon_i8mm_ops
#include "kernels/kernels_neon.h"
#endif
