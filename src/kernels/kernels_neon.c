/* The NEON set with ASIMD only (every AArch64 CPU): kernels_neon.h with the int8 products by
 * widening multiplies. */
#if defined(__aarch64__)
#define NEON_SDOT 0
#define NEON_I8MM 0
#define NEON_OPS kernels_neon_ops
#include "kernels/kernels_neon.h"
#endif
