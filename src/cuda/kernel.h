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

#endif
