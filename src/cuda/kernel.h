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

/* One warp's integer D = A B + D on the tensor cores, PTX mma.m16n8k32 (k32) and mma.m16n8k16
 * (k16) with s8 A, s8 or u8 B (UB) and s32 accumulators (PTX ISA, "Matrix Fragments for
 * mma.m16n8k32" and "for mma.m16n8k16 with integer type"): each register holds 4 consecutive k
 * elements, the lowest in the low byte. With g = lane / 4 and q = lane % 4: k32: a[0] A[g][4q..4q
 * + 3], a[1] A[g + 8][4q..], a[2] A[g][16 + 4q..], a[3] A[g + 8][16 + 4q..]; b[0] B[4q..4q + 3][g],
 * b[1] B[16 + 4q..][g]. k16: a[0] A[g][4q..], a[1] A[g + 8][4q..]; b B[4q..][g]. c[0], c[1]
 * D[g][2q, 2q + 1], c[2], c[3] D[g + 8][2q, 2q + 1]. Exact: the products and sums are integers. The
 * emulator sums each element's products in k order. */
#ifdef NC_CUDA_EMULATE
static __device__ inline int emu_byte(uint32_t w, int k, bool u) {
    uint32_t b = (w >> (8 * (k % 4))) & 0xff;
    return u ? (int)b : (int)(int8_t)b;
}
template <int K, bool UB> static __device__ inline void emu_mma_s8(int c[4], const uint32_t *a, const uint32_t *b) {
    static uint32_t sa[1024][4], sb[1024][2];
    const int tid = threadIdx.x, base = tid & ~31, lane = tid & 31, g = lane >> 2, q = lane & 3;
    memcpy(sa[tid], a, sizeof(uint32_t) * (K / 8));
    memcpy(sb[tid], b, sizeof(uint32_t) * (K / 16));
    __syncwarp();
    for (int i = 0; i < 4; i++) {
        int row = g + (i >= 2 ? 8 : 0), col = 2 * q + (i & 1), s = c[i];
        for (int k = 0; k < K; k++) {
            int av = emu_byte(sa[base + (row % 8) * 4 + (k % 16) / 4][row / 8 + 2 * (k / 16)], k, false);
            int bv = emu_byte(sb[base + col * 4 + (k % 16) / 4][k / 16], k, UB);
            s += av * bv;
        }
        c[i] = s;
    }
    __syncwarp();
}
template <bool UB> static __device__ inline void mma_s8_k32(int c[4], const uint32_t a[4], const uint32_t b[2]) {
    emu_mma_s8<32, UB>(c, a, b);
}
template <bool UB> static __device__ inline void mma_s8_k16(int c[4], const uint32_t a[2], uint32_t b) {
    emu_mma_s8<16, UB>(c, a, &b);
}
#else
template <bool UB> static __device__ __forceinline__ void mma_s8_k32(int c[4], const uint32_t a[4], const uint32_t b[2]) {
    if (UB)
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                     "{%0, %1, %2, %3};"
                     : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                     "{%0, %1, %2, %3};"
                     : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <bool UB> static __device__ __forceinline__ void mma_s8_k16(int c[4], const uint32_t a[2], uint32_t b) {
    if (UB)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.u8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
                     : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(b));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
                     : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(b));
}
#endif

/* c + the sum of the 4 products of a's signed bytes and b's unsigned ones (PTX dp4a.s32.u32; the
 * intrinsic __dp4a takes both signed or both unsigned). */
#ifdef NC_CUDA_EMULATE
static __device__ inline int dp4a_su(uint32_t a, uint32_t b, int c) {
    for (int i = 0; i < 32; i += 8) c += (int)(int8_t)(a >> i) * (int)((b >> i) & 0xff);
    return c;
}
#else
static __device__ __forceinline__ int dp4a_su(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
#endif

#endif
