/* The NEON set for CPUs with SDOT (FEAT_DotProd, Armv8.2 and later; the Makefile compiles this
 * file with it enabled): kernels_neon.h with the int8 products by SDOT. The same results as
 * kernels_neon.c: the products are exact integers either way. */
#if defined(__aarch64__)
#define NEON_SDOT 1
#define NEON_I8MM 0
#define NEON_OPS kernels_neon_dot_ops
#include "kernels/kernels_neon.h"
#endif
