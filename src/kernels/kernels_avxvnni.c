/* The AVX2 set with AVX-VNNI, for CPUs that have it without AVX-512 (Intel since Alder Lake, AMD's
 * Zen 5 desktop parts): kernels_avx2.c compiled again with its int16 multiply-adds fused into the
 * VEX-encoded vpdpwssd on ymm registers (madd_add). The integers are the same, so every result is
 * the AVX2 set's, bit for bit (tests/unit/test_kernels.c compares them). */
#define KERNELS_AVX_VNNI 1
#include "kernels/kernels_avx2.c"
