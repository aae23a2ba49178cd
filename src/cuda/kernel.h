/* What CUDA source needs in both builds (src/cuda/ops.cu and the tests in tests/cuda): the runtime, the
 * launch macros and the f16 conversions, from CUDA when nvcc compiles it, from cuda/emulate.h
 * when it is compiled as C++ for the CPU (NC_CUDA_EMULATE). */
#ifndef NC_CUDA_KERNEL_H
#define NC_CUDA_KERNEL_H

#include <stdint.h>

#ifdef NC_CUDA_EMULATE
#include "cuda/emulate.h"
static __device__ inline float h2f(uint16_t h) { return emu_half_to_float(h); }
static __device__ inline uint16_t f2h(float f) { return emu_float_to_half_rn(f); }
#else
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define NC_LAUNCH(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#define NC_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...) kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define NC_DYNAMIC_SHARED(type, name)                              \
    extern __shared__ __align__(16) unsigned char nc_dyn_smem_[]; \
    type *name = reinterpret_cast<type *>(nc_dyn_smem_)
static __device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
static __device__ __forceinline__ uint16_t f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }
#endif

/* f32 to bf16, rounding to nearest even (finite values; both builds, the same bits). */
static __device__ inline uint16_t bf16_rn(float f) {
    uint32_t u = __float_as_uint(f);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static __device__ inline float bf16_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* One warp's D = A B + D on the tensor cores, PTX mma.m16n8k16 with bf16 inputs and f32
 * accumulators (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"): with
 * g = lane / 4 and q = lane % 4, a[0] holds A[g][2q, 2q + 1], a[1] A[g + 8][2q, 2q + 1], a[2]
 * A[g][2q + 8, 2q + 9], a[3] A[g + 8][2q + 8, 2q + 9] (the lower column in the low half); b[0]
 * B[2q, 2q + 1][g], b[1] B[2q + 8, 2q + 9][g]; c[0], c[1] D[g][2q, 2q + 1], c[2], c[3]
 * D[g + 8][2q, 2q + 1]. The emulator sums each element's 16 products in k order. */
#ifdef NC_CUDA_EMULATE
static __device__ inline float emu_frag(const uint32_t *w, int half) { return bf16_f32((uint16_t)(w[0] >> (16 * half))); }
static __device__ inline void mma_bf16(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    static uint32_t sa[1024][4], sb[1024][2];
    const int tid = threadIdx.x, base = tid & ~31, lane = tid & 31, g = lane >> 2, q = lane & 3;
    memcpy(sa[tid], a, sizeof sa[tid]);
    memcpy(sb[tid], b, sizeof sb[tid]);
    __syncwarp();
    for (int i = 0; i < 4; i++) {
        int row = g + (i >= 2 ? 8 : 0), col = 2 * q + (i & 1);
        float s = c[i];
        for (int k = 0; k < 16; k++) {
            float av = emu_frag(&sa[base + (row % 8) * 4 + (k % 8) / 2][row / 8 + 2 * (k / 8)], k % 2);
            float bv = emu_frag(&sb[base + col * 4 + (k % 8) / 2][k / 8], k % 2);
            s = fmaf(av, bv, s);
        }
        c[i] = s;
    }
    __syncwarp();
}
#else
static __device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

#endif
