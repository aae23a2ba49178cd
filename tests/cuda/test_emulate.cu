/* Checks src/cuda/emulate.h, the CPU emulation of CUDA the backend's tests run on, against
 * host-computed expectations. The same file builds for a GPU:
 *   g++ -std=c++17 -x c++ -DNC_CUDA_EMULATE -Isrc tests/cuda/test_emulate.cu -o test_emulate
 *   nvcc -std=c++17 -arch=sm_80 tests/cuda/test_emulate.cu -o test_emulate
 * so a GPU run checks that the emulator's expectations are CUDA's. */
#include <stdint.h>

#include "cuda/kernel.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <vector>

#ifdef NC_CUDA_EMULATE
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

static int n_pass, n_fail;
static void check(bool ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(bool ok, const char *name, const char *fmt, ...) {
    printf("%s %s", ok ? "PASS" : "FAIL", name);
    if (!ok && *fmt) {
        va_list ap;
        va_start(ap, fmt);
        printf(": ");
        vprintf(fmt, ap);
        va_end(ap);
    }
    printf("\n");
    fflush(stdout);
    ok ? n_pass++ : n_fail++;
}

#define CK(call)                                                                         \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            printf("FAIL %s (line %d): %s\n", #call, __LINE__, cudaGetErrorString(e_)); \
            printf("test_emulate: %d passed, %d failed\n", n_pass, n_fail + 1);         \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)
#define SYNC()                       \
    do {                             \
        CK(cudaGetLastError());      \
        CK(cudaDeviceSynchronize()); \
    } while (0)

static uint32_t rng_state = 12345;
static uint32_t rnd() { /* xorshift32 */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 17, rng_state ^= rng_state << 5;
    return rng_state;
}

template <class T> static T *to_dev(const std::vector<T> &v) {
    void *p;
    CK(cudaMalloc(&p, v.size() * sizeof(T) + 1));
    CK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return (T *)p;
}
template <class T> static T *dev_zero(size_t n) {
    void *p;
    CK(cudaMalloc(&p, n * sizeof(T)));
    CK(cudaMemset(p, 0, n * sizeof(T)));
    return (T *)p;
}
template <class T> static std::vector<T> from_dev(const T *d, size_t n) {
    std::vector<T> v(n);
    CK(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

/* ---- kernels ---------------------------------------------------------------------------------- */
#define FULL 0xffffffffu

__global__ void k_block_sum(const int *in, unsigned n, int *out) {
    __shared__ int sh[1024];
    unsigned nt = blockDim.x * blockDim.y * blockDim.z;
    unsigned tid = threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
    unsigned i = blockIdx.x * nt + tid;
    sh[tid] = i < n ? in[i] : 0;
    __syncthreads();
    for (unsigned s = 512; s > 0; s >>= 1) {
        if (tid < s && tid + s < nt) sh[tid] += sh[tid + s];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sh[0];
}

__global__ void k_warp_xor(const int *in, int *out) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    out[i] = v; /* every lane: the warp's sum */
}
__global__ void k_warp_down(const float *in, float *out) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = in[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL, v, o);
    if ((threadIdx.x & 31) == 0) out[i / 32] = v;
}
__global__ void k_warp_64(const long long *in, long long *out, double *dout) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    long long v = in[i];
    double d = (double)in[i] * 0.5;
    for (int o = 1; o < 32; o <<= 1) v += __shfl_xor_sync(FULL, v, o), d += __shfl_down_sync(FULL, d, o);
    out[i] = v;
    if ((threadIdx.x & 31) == 0) dout[i / 32] = d;
}

#define N_MODES 9
__global__ void k_shfl_modes(int *out) {
    int t = threadIdx.x, lane = t & 31, v = 1000 + t;
    int *o = out + t * N_MODES;
    o[0] = __shfl_sync(FULL, v, 5);
    o[1] = __shfl_sync(FULL, v, 3, 8);
    o[2] = __shfl_sync(FULL, v, lane + 9, 8);
    o[3] = __shfl_up_sync(FULL, v, 3, 16);
    o[4] = __shfl_down_sync(FULL, v, 5, 8);
    o[5] = __shfl_xor_sync(FULL, v, 8, 8);
    o[6] = __shfl_xor_sync(FULL, v, 2, 4);
    o[7] = __shfl_down_sync(FULL, v, 1);
    o[8] = (int)__shfl_sync(FULL, (float)v + 0.25f, 31 - lane); /* float */
}

__global__ void k_vote(const int *in, unsigned *out) {
    int t = threadIdx.x, p = in[t] & 1;
    out[t * 4 + 0] = __ballot_sync(FULL, p);
    out[t * 4 + 1] = __any_sync(FULL, p);
    out[t * 4 + 2] = __all_sync(FULL, p);
    out[t * 4 + 3] = __ballot_sync(FULL, 1);
}

__global__ void k_submask(int *out) { /* two half-warps shuffle apart, with their own masks */
    int lane = threadIdx.x & 31, v = lane * 3 + 1;
    if (lane < 16) {
        for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0x0000ffffu, v, o);
    } else {
        v = __shfl_xor_sync(0xffff0000u, v, 1);
        __syncwarp(0xffff0000u);
    }
    __syncwarp();
    out[threadIdx.x] = v;
}

__global__ void k_exit_release(int *out) { /* lanes 16..31 return while 0..15 wait at a full-mask shuffle */
    int lane = threadIdx.x & 31, v = lane + 1;
    if (lane >= 16) return;
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    out[threadIdx.x] = v;
}

__global__ void k_index(int *out, unsigned *who) {
    unsigned gx = blockIdx.x * blockDim.x + threadIdx.x, gy = blockIdx.y * blockDim.y + threadIdx.y;
    unsigned gz = blockIdx.z * blockDim.z + threadIdx.z;
    unsigned W = gridDim.x * blockDim.x, H = gridDim.y * blockDim.y;
    unsigned idx = (gz * H + gy) * W + gx;
    out[idx] = (int)idx;
    who[idx] = blockIdx.x | blockIdx.y << 5 | blockIdx.z << 10 | threadIdx.x << 15 | threadIdx.y << 21 | threadIdx.z << 27;
}

__global__ void k_dp4a(const int *a, const int *b, const int *c, int n, int *s, unsigned *u) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    s[i] = __dp4a(a[i], b[i], c[i]);
    u[i] = __dp4a((unsigned)a[i], (unsigned)b[i], (unsigned)c[i]);
}

__global__ void k_half(const float *f, uint16_t *fh, int nf, const uint16_t *h, float *hf, int nh) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nf) fh[i] = f2h(f[i]);
    if (i < nh) hf[i] = h2f(h[i]);
}
__global__ void k_half_roundtrip(unsigned *bad) { /* every finite half and infinity survives h -> f -> h */
    unsigned h = blockIdx.x * blockDim.x + threadIdx.x;
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) return; /* NaN */
    if (f2h(h2f((uint16_t)h)) != h) atomicAdd(bad, 1u);
}

/* Threads return before barriers that the others still reach. */
__global__ void k_early_return(const int *in, int active, int *out) {
    __shared__ int sh[256];
    int t = threadIdx.x;
    if (t >= active) return;
    sh[t] = in[blockIdx.x * 256 + t];
    __syncthreads();
    if (t != 0 && t >= active / 2) return;
    if (t < active / 2) sh[t] += sh[t + active / 2]; /* the odd one out is added by thread 0 below */
    __syncthreads();
    if (t == 0) {
        int s = (active & 1) ? sh[active - 1] : 0;
        for (int i = 0; i < active / 2; i++) s += sh[i];
        out[blockIdx.x] = s;
    }
}

__global__ void k_dyn_smem(const float *in, float *out, int n) {
    NC_DYNAMIC_SHARED(float, buf);
    int t = threadIdx.x;
    buf[t] = in[blockIdx.x * n + t];
    __syncthreads();
    out[blockIdx.x * n + t] = buf[n - 1 - t];
}

__global__ void k_atomics(int *cnt, float *fsum, int *mx, unsigned long long *big, int *cnt2) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(cnt, 1);
    atomicAdd(fsum, 0.5f);
    atomicMax(mx, g);
    atomicAdd(big, 1ull << 33);
    int c = __syncthreads_count(threadIdx.x % 3 == 0);
    int any = __syncthreads_or(threadIdx.x == 7), all = __syncthreads_and(threadIdx.x < 1000);
    if (threadIdx.x == 0) atomicAdd(cnt2, c * 100 + any * 10 + all);
}

__global__ void k_shfl_bench(int iters, unsigned *out) {
    unsigned v = threadIdx.x * 2654435761u;
    for (int i = 0; i < iters; i++) v += __shfl_xor_sync(FULL, v, i & 31) ^ (unsigned)i;
    out[threadIdx.x] = v;
}
__global__ void k_sync_bench(int iters, unsigned *out) {
    __shared__ unsigned sh[256];
    unsigned t = threadIdx.x, v = t;
    for (int i = 0; i < iters; i++) {
        sh[t] = v;
        __syncthreads();
        v += sh[(t + 1) % blockDim.x];
        __syncthreads();
    }
    out[t] = v;
}

#ifdef NC_CUDA_EMULATE
__global__ void k_deadlock() { /* lane 0 waits for the block, its warp-mates wait for lane 0 */
    if ((threadIdx.x & 31) == 0) __syncthreads();
    else __syncwarp();
}
#endif

/* ---- checks ----------------------------------------------------------------------------------- */
static void test_block_sum() {
    const dim3 shapes[] = {dim3(1), dim3(32), dim3(96), dim3(100), dim3(256), dim3(1024), dim3(16, 6),
                           dim3(8, 4, 4), dim3(7, 3, 5), dim3(32, 32)};
    for (const dim3 &b : shapes) {
        unsigned nt = b.x * b.y * b.z, nb = 5, n = nb * nt - (nt > 17 ? 17 : 0);
        std::vector<int> in(n);
        for (int &x : in) x = (int)(rnd() % 2001) - 1000;
        std::vector<int> want(nb, 0);
        for (unsigned i = 0; i < n; i++) want[i / nt] += in[i];
        int *d_in = to_dev(in), *d_out = dev_zero<int>(nb);
        NC_LAUNCH(k_block_sum, dim3(nb), b, 0, d_in, n, d_out);
        SYNC();
        std::vector<int> got = from_dev(d_out, nb);
        char name[80];
        snprintf(name, sizeof name, "block reduction, block %ux%ux%u", b.x, b.y, b.z);
        check(got == want, name, "block 0: got %d, want %d", got[0], want[0]);
        CK(cudaFree(d_in));
        CK(cudaFree(d_out));
    }
}

static void test_warp_reductions() {
    const int nb = 3, nt = 256, n = nb * nt;
    std::vector<int> in(n);
    std::vector<float> fin(n);
    std::vector<long long> lin(n);
    for (int i = 0; i < n; i++) in[i] = (int)(rnd() % 100000), fin[i] = (float)(rnd() % 1000), lin[i] = (long long)rnd() << 20;
    int *d_in = to_dev(in), *d_out = dev_zero<int>(n);
    float *d_fin = to_dev(fin), *d_fout = dev_zero<float>(n / 32);
    long long *d_lin = to_dev(lin), *d_lout = dev_zero<long long>(n);
    double *d_dout = dev_zero<double>(n / 32);
    NC_LAUNCH(k_warp_xor, nb, nt, 0, d_in, d_out);
    NC_LAUNCH(k_warp_down, nb, nt, 0, d_fin, d_fout);
    NC_LAUNCH(k_warp_64, nb, nt, 0, d_lin, d_lout, d_dout);
    SYNC();
    std::vector<int> out = from_dev(d_out, n);
    std::vector<float> fout = from_dev(d_fout, n / 32);
    std::vector<long long> lout = from_dev(d_lout, n);
    std::vector<double> dout = from_dev(d_dout, n / 32);
    int bad_x = 0, bad_d = 0, bad_l = 0, bad_dd = 0;
    for (int w = 0; w < n / 32; w++) {
        long long s = 0, ls = 0;
        float fs = 0;
        for (int l = 0; l < 32; l++) s += in[w * 32 + l], fs += fin[w * 32 + l], ls += lin[w * 32 + l];
        for (int l = 0; l < 32; l++) bad_x += out[w * 32 + l] != s, bad_l += lout[w * 32 + l] != ls;
        bad_d += fout[w] != fs, bad_dd += dout[w] != (double)ls * 0.5;
    }
    check(!bad_x, "warp reduction, __shfl_xor_sync (int, all lanes)", "%d wrong", bad_x);
    check(!bad_d, "warp reduction, __shfl_down_sync (float, lane 0)", "%d wrong", bad_d);
    check(!bad_l, "warp reduction, __shfl_xor_sync (long long)", "%d wrong", bad_l);
    check(!bad_dd, "warp reduction, __shfl_down_sync (double)", "%d wrong", bad_dd);
    cudaFree(d_in), cudaFree(d_out), cudaFree(d_fin), cudaFree(d_fout), cudaFree(d_lin), cudaFree(d_lout), cudaFree(d_dout);
}

static void test_shfl_modes() {
    const int nt = 64;
    int *d = dev_zero<int>(nt * N_MODES);
    NC_LAUNCH(k_shfl_modes, 1, nt, 0, d);
    SYNC();
    std::vector<int> got = from_dev(d, nt * N_MODES);
    const char *what[N_MODES] = {"__shfl_sync broadcast of lane 5", "__shfl_sync width 8",
                                 "__shfl_sync width 8, source lane out of range (modulo width)",
                                 "__shfl_up_sync width 16", "__shfl_down_sync width 8",
                                 "__shfl_xor_sync width 8, mask 8 (later group: own value)",
                                 "__shfl_xor_sync width 4", "__shfl_down_sync, last lane keeps its own",
                                 "__shfl_sync float, reversed lanes"};
    for (int m = 0; m < N_MODES; m++) {
        int bad = 0, first = -1;
        for (int t = 0; t < nt; t++) {
            int lane = t & 31, base = t - lane, want;
            switch (m) {
            case 0: want = base + 5; break;
            case 1: want = base + (lane / 8) * 8 + 3; break;
            case 2: want = base + (lane / 8) * 8 + (lane + 9) % 8; break;
            case 3: want = lane % 16 >= 3 ? t - 3 : t; break;
            case 4: want = lane % 8 + 5 < 8 ? t + 5 : t; break;
            case 5: want = (lane & 8) ? t - 8 : t; break; /* group 1, 3 read the earlier group */
            case 6: want = t ^ 2; break;
            case 7: want = lane < 31 ? t + 1 : t; break;
            default: want = base + 31 - lane; break;
            }
            if (got[t * N_MODES + m] != 1000 + want && bad++ == 0) first = t;
        }
        check(!bad, what[m], "%d wrong, first thread %d got %d", bad, first, first >= 0 ? got[first * N_MODES + m] : 0);
    }
    cudaFree(d);
}

static void test_vote() {
    const int nt = 40; /* warp 1 has 8 lanes */
    std::vector<int> in(nt);
    for (int t = 0; t < nt; t++) in[t] = t < 32 ? (int)(rnd() % 7) : 2 * t + 1;
    in[0] = 0, in[1] = 1; /* warp 0: mixed */
    int *d_in = to_dev(in);
    unsigned *d = dev_zero<unsigned>(nt * 4);
    NC_LAUNCH(k_vote, 1, nt, 0, d_in, d);
    SYNC();
    std::vector<unsigned> got = from_dev(d, nt * 4);
    int bad = 0;
    for (int t = 0; t < nt; t++) {
        int w0 = t & ~31, lanes = t < 32 ? 32 : 8;
        unsigned ballot = 0, live = lanes == 32 ? FULL : 0xffu;
        for (int l = 0; l < lanes; l++) ballot |= (unsigned)(in[w0 + l] & 1) << l;
        bad += got[t * 4] != ballot || got[t * 4 + 1] != (ballot != 0) || got[t * 4 + 2] != (ballot == live) ||
               got[t * 4 + 3] != live;
    }
    check(!bad, "__ballot_sync / __any_sync / __all_sync (incl. a partial warp)", "%d threads wrong", bad);
    cudaFree(d_in), cudaFree(d);
}

static void test_submask() {
    int *d = dev_zero<int>(64);
    NC_LAUNCH(k_submask, 1, 64, 0, d);
    SYNC();
    std::vector<int> got = from_dev(d, 64);
    int bad = 0, low = 0;
    for (int l = 0; l < 16; l++) low += l * 3 + 1;
    for (int t = 0; t < 64; t++) {
        int lane = t & 31;
        bad += got[t] != (lane < 16 ? low : (lane ^ 1) * 3 + 1);
    }
    check(!bad, "divergent half-warps shuffling with their own masks", "%d wrong", bad);
    CK(cudaMemset(d, 0, 64 * sizeof(int)));
    NC_LAUNCH(k_exit_release, 1, 64, 0, d);
    SYNC();
    got = from_dev(d, 64);
    bad = 0;
    for (int t = 0; t < 64; t++) bad += got[t] != ((t & 31) < 16 ? 136 : 0);
    check(!bad, "a full-mask shuffle among the lanes left after half the warp returned", "%d wrong", bad);
    cudaFree(d);
}

static void test_index() {
    const dim3 cases[][2] = {{dim3(5, 3), dim3(16, 8)}, {dim3(3, 2, 2), dim3(4, 3, 2)}, {dim3(2, 3, 4), dim3(32, 1, 2)}};
    for (auto &c : cases) {
        dim3 g = c[0], b = c[1];
        unsigned W = g.x * b.x, H = g.y * b.y, D = g.z * b.z, n = W * H * D;
        std::vector<int> init(n, -1);
        int *d_out = to_dev(init);
        unsigned *d_who = dev_zero<unsigned>(n);
        NC_LAUNCH(k_index, g, b, 0, d_out, d_who);
        SYNC();
        std::vector<int> out = from_dev(d_out, n);
        std::vector<unsigned> who = from_dev(d_who, n);
        int bad = 0;
        for (unsigned i = 0; i < n; i++) {
            unsigned x = i % W, y = i / W % H, z = i / (W * H);
            unsigned want = x / b.x | (y / b.y) << 5 | (z / b.z) << 10 | (x % b.x) << 15 | (y % b.y) << 21 | (z % b.z) << 27;
            bad += out[i] != (int)i || who[i] != want;
        }
        char name[96];
        snprintf(name, sizeof name, "indexing, grid %ux%ux%u block %ux%ux%u", g.x, g.y, g.z, b.x, b.y, b.z);
        check(!bad, name, "%d of %u wrong", bad, n);
        cudaFree(d_out), cudaFree(d_who);
    }
}

static void test_dp4a() {
    const int n = 1000;
    std::vector<int> a(n), b(n), c(n);
    for (int i = 0; i < n; i++) a[i] = (int)rnd(), b[i] = (int)rnd(), c[i] = (int)rnd();
    a[0] = b[0] = (int)0x80808080u, c[0] = 0x7fffffff; /* -128 * -128 four times, and wrap-around */
    int *da = to_dev(a), *db = to_dev(b), *dc = to_dev(c), *ds = dev_zero<int>(n);
    unsigned *du = dev_zero<unsigned>(n);
    NC_LAUNCH(k_dp4a, (n + 127) / 128, 128, 0, da, db, dc, n, ds, du);
    SYNC();
    std::vector<int> s = from_dev(ds, n);
    std::vector<unsigned> u = from_dev(du, n);
    int bad_s = 0, bad_u = 0;
    for (int i = 0; i < n; i++) {
        long long ws = c[i];
        unsigned long long wu = (unsigned)c[i];
        for (int k = 0; k < 4; k++) {
            ws += (long long)(signed char)(a[i] >> 8 * k) * (signed char)(b[i] >> 8 * k);
            wu += (unsigned long long)((unsigned)a[i] >> 8 * k & 0xff) * ((unsigned)b[i] >> 8 * k & 0xff);
        }
        bad_s += s[i] != (int)(uint32_t)ws, bad_u += u[i] != (unsigned)wu;
    }
    check(!bad_s, "__dp4a signed", "%d wrong", bad_s);
    check(!bad_u, "__dp4a unsigned", "%d wrong", bad_u);
    cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(ds), cudaFree(du);
}

/* One warp's integer mmas (cuda/kernel.h) of A (16 x 32 bytes, row-major) and B (8 columns of 32
 * bytes): the fragments built element by element from the PTX ISA's tables; out[0] the k32
 * product with B signed, out[1] with B unsigned, out[2] and out[3] the k16 products of the first
 * and second 16 k, signed; each 16 x 8, row-major. */
__global__ void k_mma(const uint8_t *A, const uint8_t *B, int *out) {
    const int lane = threadIdx.x, g = lane / 4, q = lane % 4;
    uint32_t a[4], b[2];
    for (int r = 0; r < 4; r++) { /* a[r]: row g (r even) or g + 8, k 4q.. (r < 2) or 16 + 4q.. */
        a[r] = 0;
        for (int e = 0; e < 4; e++) a[r] |= (uint32_t)A[(g + 8 * (r & 1)) * 32 + 16 * (r / 2) + 4 * q + e] << (8 * e);
    }
    for (int r = 0; r < 2; r++) { /* b[r]: column g, k 16r + 4q.. */
        b[r] = 0;
        for (int e = 0; e < 4; e++) b[r] |= (uint32_t)B[g * 32 + 16 * r + 4 * q + e] << (8 * e);
    }
    int c[4][4] = {};
    mma_s8_k32<false>(c[0], a, b);
    mma_s8_k32<true>(c[1], a, b);
    mma_s8_k16<false>(c[2], a, b[0]);
    mma_s8_k16<false>(c[3], a + 2, b[1]);
    for (int m = 0; m < 4; m++)
        for (int i = 0; i < 4; i++) out[m * 128 + (g + 8 * (i / 2)) * 8 + 2 * q + (i & 1)] = c[m][i];
}

static void test_mma() {
    std::vector<uint8_t> a(16 * 32), b(8 * 32);
    for (auto &v : a) v = (uint8_t)rnd();
    for (auto &v : b) v = (uint8_t)rnd();
    a[0] = b[0] = 0x80; /* -128 (signed) or 128 (unsigned) */
    uint8_t *da = to_dev(a), *db = to_dev(b);
    int *dout = dev_zero<int>(4 * 128);
    NC_LAUNCH(k_mma, 1, 32, 0, da, db, dout);
    SYNC();
    std::vector<int> out = from_dev(dout, 4 * 128);
    int bad[4] = {0, 0, 0, 0};
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 8; c++) {
            int w[4] = {0, 0, 0, 0};
            for (int k = 0; k < 32; k++) {
                int av = (int8_t)a[r * 32 + k], bs = (int8_t)b[c * 32 + k];
                w[0] += av * bs, w[1] += av * b[c * 32 + k], w[k < 16 ? 2 : 3] += av * bs;
            }
            for (int m = 0; m < 4; m++) bad[m] += out[m * 128 + r * 8 + c] != w[m];
        }
    check(!bad[0], "mma m16n8k32 s8.s8", "%d of 128 wrong", bad[0]);
    check(!bad[1], "mma m16n8k32 s8.u8", "%d of 128 wrong", bad[1]);
    check(!bad[2] && !bad[3], "mma m16n8k16 s8.s8, both halves of k", "%d, %d of 128 wrong", bad[2], bad[3]);
    cudaFree(da), cudaFree(db), cudaFree(dout);
}

static float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static void test_half() {
    struct { float f; uint16_t h; } to_h[] = {
        {1.0f, 0x3c00}, {65504.0f, 0x7bff}, {ldexpf(1, -24), 0x0001}, {-0.0f, 0x8000}, {0.0f, 0x0000},
        {INFINITY, 0x7c00}, {-INFINITY, 0xfc00}, {1 + ldexpf(1, -11), 0x3c00}, {1 + 3 * ldexpf(1, -11), 0x3c02},
        {65519.0f, 0x7bff}, {65520.0f, 0x7c00}, {-1e6f, 0xfc00}, {ldexpf(1, -25), 0x0000},
        {bits_f(0x33000001), 0x0001}, {3 * ldexpf(1, -25), 0x0002}, {5 * ldexpf(1, -25), 0x0002},
        {ldexpf(1, -14), 0x0400}, {ldexpf(1023, -24), 0x03ff}, {ldexpf(2047, -25), 0x0400},
        {0.1f, 0x2e66}, {-2.0f, 0xc000}, {1e-10f, 0x0000}, {-1e-10f, 0x8000}, {NAN, 0x7fff}, {bits_f(0xffc00001), 0x7fff},
    };
    struct { uint16_t h; uint32_t f; } to_f[] = {
        {0x3c00, 0x3f800000}, {0x7bff, 0x477fe000}, {0x0001, 0x33800000}, {0x8000, 0x80000000}, {0x7c00, 0x7f800000},
        {0xfc00, 0xff800000}, {0x03ff, 0x387fc000}, {0x0400, 0x38800000}, {0xc000, 0xc0000000}, {0x8001, 0xb3800000},
        {0x0200, 0x38000000}, {0x7e00, 0x7fffffff}, {0xfd01, 0x7fffffff},
    };
    const int nf = sizeof to_h / sizeof *to_h, nh = sizeof to_f / sizeof *to_f;
    std::vector<float> f(nf);
    std::vector<uint16_t> h(nh);
    for (int i = 0; i < nf; i++) f[i] = to_h[i].f;
    for (int i = 0; i < nh; i++) h[i] = to_f[i].h;
    float *d_f = to_dev(f), *d_hf = dev_zero<float>(nh);
    uint16_t *d_h = to_dev(h), *d_fh = dev_zero<uint16_t>(nf);
    unsigned *d_bad = dev_zero<unsigned>(1);
    NC_LAUNCH(k_half, 1, 64, 0, d_f, d_fh, nf, d_h, d_hf, nh);
    NC_LAUNCH(k_half_roundtrip, 256, 256, 0, d_bad);
    SYNC();
    std::vector<uint16_t> fh = from_dev(d_fh, nf);
    std::vector<float> hf = from_dev(d_hf, nh);
    for (int i = 0; i < nf; i++) {
        char name[96];
        snprintf(name, sizeof name, "float -> half: %a (0x%08x) -> 0x%04x", to_h[i].f, f_bits(to_h[i].f), to_h[i].h);
        check(fh[i] == to_h[i].h, name, "got 0x%04x", fh[i]);
    }
    for (int i = 0; i < nh; i++) {
        char name[96];
        snprintf(name, sizeof name, "half -> float: 0x%04x -> 0x%08x", to_f[i].h, to_f[i].f);
        check(f_bits(hf[i]) == to_f[i].f, name, "got 0x%08x", f_bits(hf[i]));
    }
    unsigned bad = from_dev(d_bad, 1)[0];
    check(!bad, "half -> float -> half round trip of every non-NaN half", "%u wrong", bad);
    cudaFree(d_f), cudaFree(d_hf), cudaFree(d_h), cudaFree(d_fh), cudaFree(d_bad);
#if defined(NC_CUDA_EMULATE) && defined(__FLT16_MAX__)
    /* the host compiler's _Float16 conversions as an independent reference */
    int bad_f = 0, bad_h = 0;
    for (int i = 0; i < (1 << 21); i++) {
        uint32_t u = i < (1 << 20) ? rnd() : (rnd() & 0x807fffffu) | (uint32_t)(100 + rnd() % 45) << 23;
        float x = bits_f(u);
        if (x != x) continue;
        _Float16 r = (_Float16)x;
        uint16_t rb;
        memcpy(&rb, &r, 2);
        bad_f += emu_float_to_half_rn(x) != rb;
    }
    for (uint32_t b = 0; b < 65536; b++) {
        _Float16 r;
        uint16_t hb = (uint16_t)b;
        memcpy(&r, &hb, 2);
        float want = (float)r;
        bad_h += want == want && f_bits(emu_half_to_float(hb)) != f_bits(want);
    }
    check(!bad_f, "float -> half matches _Float16 on 2M floats", "%d wrong", bad_f);
    check(!bad_h, "half -> float matches _Float16 on every non-NaN half", "%d wrong", bad_h);
#endif
}

static void test_early_return() {
    const int actives[] = {256, 200, 97, 13, 1};
    for (int active : actives) {
        const int nb = 3;
        std::vector<int> in(nb * 256);
        for (int &x : in) x = (int)(rnd() % 1000);
        std::vector<int> want(nb, 0);
        for (int bl = 0; bl < nb; bl++)
            for (int t = 0; t < active; t++) want[bl] += in[bl * 256 + t];
        int *d_in = to_dev(in), *d_out = dev_zero<int>(nb);
        NC_LAUNCH(k_early_return, nb, 256, 0, d_in, active, d_out);
        SYNC();
        char name[96];
        snprintf(name, sizeof name, "threads returning before __syncthreads (%d of 256 stay)", active);
        std::vector<int> got = from_dev(d_out, nb);
        check(got == want, name, "block 0: got %d, want %d", got[0], want[0]);
        cudaFree(d_in), cudaFree(d_out);
    }
}

static void test_dyn_smem_and_streams() {
    const int n = 200, nb = 3;
    std::vector<float> in(n * nb);
    for (int i = 0; i < n * nb; i++) in[i] = (float)i;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *d_in, *d_out;
    CK(cudaMalloc(&d_in, n * nb * sizeof(float)));
    CK(cudaMalloc(&d_out, n * nb * sizeof(float)));
    CK(cudaMemcpyAsync(d_in, in.data(), n * nb * sizeof(float), cudaMemcpyHostToDevice, s));
    CK(cudaMemsetAsync(d_out, 0, n * nb * sizeof(float), s));
    NC_LAUNCH_SMEM(k_dyn_smem, nb, n, n * sizeof(float), s, d_in, d_out, n);
    CK(cudaGetLastError());
    std::vector<float> got(n * nb);
    CK(cudaMemcpyAsync(got.data(), d_out, n * nb * sizeof(float), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    int bad = 0;
    for (int i = 0; i < n * nb; i++) bad += got[i] != in[i / n * n + n - 1 - i % n];
    check(!bad, "dynamic shared memory (NC_LAUNCH_SMEM), on a stream", "%d wrong", bad);
    CK(cudaStreamDestroy(s));
    cudaFree(d_in), cudaFree(d_out);
}

static __global__ void k_add_one(int *d, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] += 1;
}

/* A graph captured from a stream: nothing runs while capturing; each launch of the graph runs
 * its copy and kernels in order, with the values their arguments had when captured. */
static void test_graph() {
    const int n = 300;
    std::vector<int> ones(n, 1);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int *d = dev_zero<int>(n), *src = to_dev(ones);
    cudaGraph_t g;
    cudaGraphExec_t e;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaMemcpyAsync(d, src, n * sizeof(int), cudaMemcpyDeviceToDevice, s));
    int len[3] = {n, n - 1, n - 2};
    for (int k = 0; k < 3; k++) NC_LAUNCH(k_add_one, (n + 127) / 128, 128, s, d, len[k]);
    CK(cudaStreamEndCapture(s, &g));
    len[0] = len[1] = len[2] = 0; /* the graph keeps the values the arguments had */
    CK(cudaGraphInstantiate(&e, g, 0));
    SYNC();
    std::vector<int> before = from_dev(d, n);
    int ran = 0;
    for (int i = 0; i < n; i++) ran += before[i] != 0;
    check(ran == 0, "graph capture runs nothing", "%d elements written", ran);
    CK(cudaGraphLaunch(e, s));
    CK(cudaGraphLaunch(e, s));
    CK(cudaStreamSynchronize(s));
    std::vector<int> got = from_dev(d, n);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += got[i] != 1 + (i < n - 2 ? 3 : i < n - 1 ? 2 : 1);
    check(!bad, "graph launches replay the copy and the kernels in order", "%d wrong", bad);
    CK(cudaGraphExecDestroy(e));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(s));
    cudaFree(d), cudaFree(src);
}

static void test_atomics() {
    int *cnt = dev_zero<int>(1), *mx = dev_zero<int>(1), *cnt2 = dev_zero<int>(1);
    float *fsum = dev_zero<float>(1);
    unsigned long long *big = dev_zero<unsigned long long>(1);
    NC_LAUNCH(k_atomics, 4, 100, 0, cnt, fsum, mx, big, cnt2);
    SYNC();
    int c = from_dev(cnt, 1)[0], m = from_dev(mx, 1)[0], c2 = from_dev(cnt2, 1)[0];
    float fs = from_dev(fsum, 1)[0];
    unsigned long long b = from_dev(big, 1)[0];
    check(c == 400 && fs == 200.0f && m == 399 && b == 400ull << 33, "atomicAdd (int, float, u64), atomicMax",
          "count %d, float sum %g, max %d, u64 %llu", c, fs, m, b);
    check(c2 == 4 * (34 * 100 + 11), "__syncthreads_count / _or / _and", "got %d", c2);
    cudaFree(cnt), cudaFree(mx), cudaFree(cnt2), cudaFree(fsum), cudaFree(big);
}

static void test_runtime() {
    int n = 0, dev = -1;
    CK(cudaGetDeviceCount(&n));
    CK(cudaSetDevice(0));
    CK(cudaGetDevice(&dev));
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b));
    printf("device: %s, sm_%d%d, %d SMs, %zu MiB (%zu MiB free)\n", p.name, p.major, p.minor,
           p.multiProcessorCount, total_b >> 20, free_b >> 20);
    check(n >= 1 && dev == 0 && total_b > 0 && free_b <= total_b, "device count, properties, memory info", "device %d of %d", dev, n);
    /* a bad launch configuration is reported once by cudaGetLastError and does not stick */
    int *d = dev_zero<int>(64);
    NC_LAUNCH(k_warp_xor, 1, 2048, 0, d, d);
    cudaError_t e1 = cudaGetLastError(), e2 = cudaGetLastError();
    check(e1 != cudaSuccess && e2 == cudaSuccess, "a 2048-thread block fails to launch",
          "got %s then %s", cudaGetErrorString(e1), cudaGetErrorString(e2));
    cudaFree(d);
}

static void bench(const char *what, void (*kern)(int, unsigned *), int iters, double per_iter, bool shfl) {
    const int nt = 256;
    unsigned *d = dev_zero<unsigned>(nt);
    auto t0 = std::chrono::steady_clock::now();
    NC_LAUNCH(kern, 1, nt, 0, iters, d);
    SYNC();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<unsigned> got = from_dev(d, nt);
    std::vector<unsigned> v(nt), next(nt);
    for (int t = 0; t < nt; t++) v[t] = shfl ? t * 2654435761u : t;
    for (int i = 0; i < iters; i++) {
        for (int t = 0; t < nt; t++) next[t] = shfl ? v[t] + (v[(t & ~31) | ((t & 31) ^ (i & 31))] ^ (unsigned)i) : v[t] + v[(t + 1) % nt];
        v.swap(next);
    }
    check(got == v, what, "results differ");
    printf("  %s: %.0f per second (%.3f s for %.0f)\n", shfl ? "lane shuffles" : "thread barrier arrivals",
           per_iter * iters / s, s, per_iter * iters);
    cudaFree(d);
}

#ifdef NC_CUDA_EMULATE
static void test_deadlock() {
    fflush(stdout);
    int fds[2];
    if (pipe(fds) != 0) return check(false, "deadlock detection", "pipe failed");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        alarm(20); /* a hang would end here, with SIGALRM instead of SIGABRT */
        NC_LAUNCH(k_deadlock, 2, 64, 0);
        _exit(0);
    }
    close(fds[1]);
    char msg[1024] = "";
    size_t len = 0;
    ssize_t r;
    while (len < sizeof msg - 1 && (r = read(fds[0], msg + len, sizeof msg - 1 - len)) > 0) len += (size_t)r;
    msg[len] = 0;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    bool ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(msg, "deadlock in kernel k_deadlock") &&
              strstr(msg, "block 64x1x1") && strstr(msg, "__syncthreads");
    check(ok, "a deadlock aborts with a message", "status 0x%x, stderr: %s", st, msg);
    if (ok) printf("  (the message: %.*s)\n", (int)strcspn(msg, "\n"), msg);
}
#endif

int main() {
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev == 0) { /* the GPU build on a machine without one */
        printf("SKIPPED: no GPU: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        printf("test_emulate: 0 passed, 0 failed\n");
        return 0;
    }
    test_runtime();
    test_block_sum();
    test_warp_reductions();
    test_shfl_modes();
    test_vote();
    test_submask();
    test_index();
    test_dp4a();
    test_mma();
    test_half();
    test_early_return();
    test_dyn_smem_and_streams();
    test_graph();
    test_atomics();
    bench("shuffle throughput kernel (256 threads, 4096 __shfl_xor_sync each)", k_shfl_bench, 4096, 256, true);
    bench("barrier throughput kernel (256 threads, 2 x 1024 __syncthreads each)", k_sync_bench, 1024, 512, false);
#ifdef NC_CUDA_EMULATE
    test_deadlock();
#endif
    printf("test_emulate: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
