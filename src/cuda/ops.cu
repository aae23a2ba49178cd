/* The CUDA backend's kernels and their host side (cuda.h says what each promises). The same
 * source builds for the GPU with nvcc and for the CPU with cuda/emulate.h (make emu), so the
 * kernels use only what the emulator provides: static __shared__ arrays, __syncthreads and the
 * warp shuffles. */
#include "cuda/kernel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "cuda/cuda.h"
#include "format/ggml_types.h"
#include "kernels/kernels_impl.h" /* the activations' constants, as the CPU kernels have them */
#include "tensor/quant.h"
}

/* NUCLEUS_CUDA_PROFILE=1: each operation timed with events (waiting for each), summed by kind
 * and printed on stderr when the device is closed. */
typedef struct cu_prof {
    cudaEvent_t start, stop;
    struct { const char *name; double ms, bytes; long calls; } op[16];
    int n;
} cu_prof;

struct cu_dev {
    cudaStream_t stream;
    cudaError_t first;      /* the first failure since the last cu_sync */
    char desc[320];
    cu_prof *prof;          /* or NULL */
    uint8_t *act;           /* the quantised products' activations (cu_reserve; k_quant says how) */
    size_t act_elems;       /* tokens x columns they hold */
    bool mma;               /* quantised products on the tensor cores (NUCLEUS_CUDA_MMA=0: not) */
};

/* Remember the first failure of a call or a launch. */
static void note(cu_dev *d, cudaError_t e) {
    if (e != cudaSuccess && d->first == cudaSuccess) d->first = e;
}
static void note_launch(cu_dev *d) { note(d, cudaGetLastError()); }

static int fail_cuda(nc_err *err, cudaError_t e, const char *what) {
    return nc_fail(err, "CUDA: %s: %s", what, cudaGetErrorString(e));
}

/* ---- profile ---------------------------------------------------------------------------------- */

static void prof_begin(cu_dev *d) {
    if (d->prof) note(d, cudaEventRecord(d->prof->start, d->stream));
}

/* The operation queued since prof_begin: its time, under `name`, with the bytes it must move. */
static void prof_end(cu_dev *d, const char *name, double bytes) {
    cu_prof *p = d->prof;
    if (!p) return;
    float ms = 0;
    note(d, cudaEventRecord(p->stop, d->stream));
    note(d, cudaEventSynchronize(p->stop));
    note(d, cudaEventElapsedTime(&ms, p->start, p->stop));
    int i = 0;
    while (i < p->n && strcmp(p->op[i].name, name)) i++;
    if (i == p->n) {
        if (p->n == (int)(sizeof p->op / sizeof p->op[0])) return;
        p->op[p->n++].name = name;
    }
    p->op[i].ms += ms;
    p->op[i].bytes += bytes;
    p->op[i].calls++;
}

static void prof_report(const cu_prof *p) {
    double total = 0;
    for (int i = 0; i < p->n; i++) total += p->op[i].ms;
    fprintf(stderr, "cuda profile (%.1f ms in %d kinds of operation):\n", total, p->n);
    for (int i = 0; i < p->n; i++) {
        double gbs = p->op[i].ms > 0 ? p->op[i].bytes / (p->op[i].ms * 1e6) : 0;
        fprintf(stderr, "  %-10s %10.2f ms %5.1f%% %8ld calls %8.3f ms each", p->op[i].name, p->op[i].ms,
                100 * p->op[i].ms / (total > 0 ? total : 1), p->op[i].calls, p->op[i].ms / p->op[i].calls);
        if (gbs > 0) fprintf(stderr, "  %7.1f GB/s", gbs);
        fputc('\n', stderr);
    }
}

extern "C" bool cu_profiling(const cu_dev *d) { return d->prof != NULL; }

/* ---- the device ------------------------------------------------------------------------------ */

extern "C" int cu_open(cu_dev **out, nc_err *err) {
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return fail_cuda(err, e, "no usable GPU (cudaGetDeviceCount)");
    if (n == 0) return nc_fail(err, "CUDA: no GPU found");
    cudaDeviceProp p;
    if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess)
        return fail_cuda(err, e, "device 0");
    /* IQ3_S's grid, which its form reads on the device (quant_form.h) */
    if ((e = cudaMemcpyToSymbol(qf_iq3_s_grid_dev, quant_iq3_s_grid, sizeof qf_iq3_s_grid_dev)) != cudaSuccess)
        return fail_cuda(err, e, "copying IQ3_S's grid");
    cu_dev *d = (cu_dev *)calloc(1, sizeof *d);
    if (!d) return nc_fail(err, "out of memory");
    if ((e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        free(d);
        return fail_cuda(err, e, "creating a stream");
    }
    snprintf(d->desc, sizeof d->desc, "%s, %.0f GiB, compute %d.%d", p.name, (double)p.totalGlobalMem / (1 << 30),
             p.major, p.minor);
    const char *mma = getenv("NUCLEUS_CUDA_MMA");
    d->mma = !mma || strcmp(mma, "0") != 0;
    const char *prof = getenv("NUCLEUS_CUDA_PROFILE");
    if (prof && !strcmp(prof, "1") && (d->prof = (cu_prof *)calloc(1, sizeof *d->prof)) &&
        (cudaEventCreate(&d->prof->start) != cudaSuccess || cudaEventCreate(&d->prof->stop) != cudaSuccess)) {
        free(d->prof);
        d->prof = NULL;
    }
    *out = d;
    return 0;
}

extern "C" void cu_close(cu_dev *d) {
    if (!d) return;
    cudaStreamSynchronize(d->stream);
    if (d->prof) {
        prof_report(d->prof);
        cudaEventDestroy(d->prof->start);
        cudaEventDestroy(d->prof->stop);
        free(d->prof);
    }
    cudaFree(d->act);
    cudaStreamDestroy(d->stream);
    free(d);
}

extern "C" const char *cu_describe(const cu_dev *d) { return d->desc; }

extern "C" size_t cu_free_bytes(const cu_dev *d) {
    size_t free_b = 0, total = 0;
    return cudaMemGetInfo(&free_b, &total) == cudaSuccess ? free_b : 0;
}

extern "C" int cu_reserve(cu_dev *d, int tokens, int cols, nc_err *err) {
    size_t n = (size_t)((tokens + 7) / 8 * 8) * (size_t)cols;
    if (n <= d->act_elems) return 0;
    cudaFree(d->act);
    d->act_elems = 0;
    if (!(d->act = (uint8_t *)cu_alloc(d, 2 * n + n / 32 * sizeof(act_group), err))) return -1;
    d->act_elems = n;
    return 0;
}

extern "C" void *cu_alloc(cu_dev *d, size_t bytes, nc_err *err) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        nc_fail(err, "CUDA: out of device memory for %zu bytes (%zu free): %s", bytes, cu_free_bytes(d),
                cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

extern "C" void cu_free(cu_dev *d, void *p) {
    if (p) cudaFree(p);
}

extern "C" int cu_put(cu_dev *d, void *dst, const void *src, size_t bytes, nc_err *err) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->stream);
    /* the source may be the caller's to reuse as soon as this returns */
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->stream);
    return e == cudaSuccess ? 0 : fail_cuda(err, e, "copy to the device");
}

extern "C" int cu_get(cu_dev *d, void *dst, const void *src, size_t bytes, nc_err *err) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, d->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->stream);
    return e == cudaSuccess ? 0 : fail_cuda(err, e, "copy from the device");
}

extern "C" int cu_zero(cu_dev *d, void *dst, size_t bytes, nc_err *err) {
    cudaError_t e = cudaMemsetAsync(dst, 0, bytes, d->stream);
    return e == cudaSuccess ? 0 : fail_cuda(err, e, "clearing device memory");
}

extern "C" int cu_move(cu_dev *d, void *dst, const void *src, size_t bytes, nc_err *err) {
    const char *a = (const char *)dst, *b = (const char *)src;
    cudaError_t e;
    if (a + bytes <= b || b + bytes <= a) {
        e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, d->stream);
    } else { /* overlapping: cudaMemcpy does not promise memmove's result, so through a copy */
        void *tmp = cu_alloc(d, bytes, err);
        if (!tmp) return -1;
        e = cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, d->stream);
        if (e == cudaSuccess) e = cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, d->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(d->stream);
        cudaFree(tmp);
    }
    return e == cudaSuccess ? 0 : fail_cuda(err, e, "copy within the device");
}

extern "C" int cu_sync(cu_dev *d, nc_err *err) {
    cudaError_t e = cudaStreamSynchronize(d->stream);
    note(d, e);
    note_launch(d);
    e = d->first;
    d->first = cudaSuccess;
    return e == cudaSuccess ? 0 : fail_cuda(err, e, "a queued operation failed");
}

extern "C" void *cu_host_alloc(cu_dev *d, size_t bytes, nc_err *err) {
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        fail_cuda(err, e, "pinned host memory");
        return NULL;
    }
    return p;
}

extern "C" void cu_host_free(cu_dev *d, void *p) {
    if (p) cudaFreeHost(p);
}

extern "C" void cu_put_async(cu_dev *d, void *dst, const void *src, size_t bytes) {
    note(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->stream));
}

/* ---- graphs ---------------------------------------------------------------------------------- */

struct cu_graph {
    cudaGraphExec_t exec;
};

extern "C" int cu_capture_begin(cu_dev *d, nc_err *err) {
    cudaError_t e = cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeThreadLocal);
    return e == cudaSuccess ? 0 : fail_cuda(err, e, "starting a graph capture");
}

extern "C" int cu_capture_end(cu_dev *d, cu_graph **out, nc_err *err) {
    *out = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(d->stream, &g);
    if (e == cudaSuccess && d->first != cudaSuccess) e = d->first; /* a launch failed while capturing */
    cu_graph *c = (cu_graph *)calloc(1, sizeof *c);
    if (e == cudaSuccess && !c) e = cudaErrorMemoryAllocation;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&c->exec, g, 0);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        free(c);
        d->first = cudaSuccess;
        cudaGetLastError();
        return fail_cuda(err, e, "capturing a graph");
    }
    *out = c;
    return 0;
}

extern "C" void cu_graph_run(cu_dev *d, cu_graph *g) { note(d, cudaGraphLaunch(g->exec, d->stream)); }

extern "C" void cu_graph_free(cu_graph *g) {
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    free(g);
}

/* ---- weights --------------------------------------------------------------------------------- */

enum { GROUP = 32 };

static constexpr bool planar(uint32_t t) { return t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q8_0; }
/* The other quantised types stay in the file's blocks, read through their form (quant_form.h). */
static bool native(uint32_t t) {
    const quant_type *q = quant_type_of(t);
    return q && q->group && !planar(t);
}
static size_t elem_bytes(uint32_t t) { return t == GGML_TYPE_F32 ? 4 : 2; }
/* Q4_0 / Q8_0: quant bytes of a group in the planes, and of a GGUF block (an f16 scale first). */
static size_t plane_bytes(uint32_t t) { return t == GGML_TYPE_Q4_0 ? 16 : 32; }

/* Rows of the device layout made from rows of the file, `n` at a time (a bounded host buffer). */
static void host_rows(const cu_mat *m, const uint8_t *src, size_t row_bytes, int32_t n, uint8_t *q, uint8_t *dsc) {
    size_t ng = (size_t)m->cols / GROUP, pb = plane_bytes(m->type);
    for (int32_t r = 0; r < n; r++) {
        const uint8_t *row = src + (size_t)r * row_bytes;
        if (planar(m->type)) {
            for (size_t g = 0; g < ng; g++) {
                const uint8_t *blk = row + g * (2 + pb);
                memcpy(dsc + ((size_t)r * ng + g) * 2, blk, 2);
                memcpy(q + ((size_t)r * ng + g) * pb, blk + 2, pb);
            }
        } else if (native(m->type)) {
            size_t rb = quant_row_bytes(m->type, m->cols);
            memcpy(q + (size_t)r * rb, row, rb);
        } else {
            memcpy(q + (size_t)r * m->cols * elem_bytes(m->type), row, (size_t)m->cols * elem_bytes(m->type));
        }
    }
}

extern "C" int cu_upload(cu_dev *d, cu_mat *m, const void *data, uint32_t type, int32_t rows, int32_t cols,
                         size_t row_bytes, nc_err *err) {
    memset(m, 0, sizeof *m);
    m->type = type;
    m->rows = rows;
    m->cols = cols;
    if (planar(type) && cols % GROUP)
        return nc_fail(err, "%d columns: not whole groups of %d", cols, GROUP);
    if (!quant_type_supported(type)) return nc_fail(err, "type %u cannot be read", type);
    if (native(type) && cols % (int32_t)quant_type_of(type)->block_elems)
        return nc_fail(err, "%d columns: not whole blocks of %u", cols, quant_type_of(type)->block_elems);
    size_t q_row = planar(m->type)   ? (size_t)cols / GROUP * plane_bytes(m->type)
                   : native(m->type) ? quant_row_bytes(m->type, cols)
                                     : (size_t)cols * elem_bytes(m->type);
    size_t d_row = planar(m->type) ? (size_t)cols / GROUP * 2 : 0;
    m->bytes = (size_t)rows * (q_row + d_row);
    m->q = cu_alloc(d, (size_t)rows * q_row, err);
    if (!m->q) return -1;
    if (d_row && !(m->d = cu_alloc(d, (size_t)rows * d_row, err))) {
        cu_mat_free(d, m);
        return -1;
    }
    int32_t chunk = (int32_t)((64u << 20) / (q_row + d_row + 1)) + 1;
    uint8_t *hq = (uint8_t *)malloc((size_t)chunk * q_row), *hd = (uint8_t *)malloc((size_t)chunk * d_row + 1);
    int rc = hq && hd ? 0 : nc_fail(err, "out of memory staging a weight for the device");
    for (int32_t r0 = 0; rc == 0 && r0 < rows; r0 += chunk) {
        int32_t n = rows - r0 < chunk ? rows - r0 : chunk;
        host_rows(m, (const uint8_t *)data + (size_t)r0 * row_bytes, row_bytes, n, hq, hd);
        rc = cu_put(d, (uint8_t *)m->q + (size_t)r0 * q_row, hq, (size_t)n * q_row, err);
        if (rc == 0 && d_row) rc = cu_put(d, (uint8_t *)m->d + (size_t)r0 * d_row, hd, (size_t)n * d_row, err);
    }
    free(hq);
    free(hd);
    if (rc) cu_mat_free(d, m);
    return rc;
}

extern "C" void cu_mat_free(cu_dev *d, cu_mat *m) {
    cu_free(d, m->q);
    cu_free(d, m->d);
    m->q = m->d = NULL;
}

/* ---- products ------------------------------------------------------------------------------ */

/* A weight as the kernels see it. */
struct mat_view {
    const uint8_t *q;
    const uint16_t *d;
    int rows, cols;
    size_t rb; /* bytes a row, for the types in the file's blocks */
};

/* A quantised type's form (quant_form.h) to the kernels: groups of 32 a block, whether scales go
 * by halves of 16 and whether there are offsets (quant.h's list), and whether its weights stay in
 * the file's blocks (native: all but Q4_0 and Q8_0, which are split into planes). */
template <uint32_t TYPE> struct form {
    enum { native = 0, halves = 0, has_min = 0 };
};
#define FORM(NAME, GROUPS, HALVES, MIN, WRITER)                                                                 \
    template <> struct form<GGML_TYPE_##NAME> {                                                                 \
        enum { native = !planar(GGML_TYPE_##NAME), groups = GROUPS, halves = HALVES, has_min = MIN };      \
        static constexpr size_t bytes = sizeof(block_##NAME);                                                   \
        static __device__ __forceinline__ int w(const uint8_t *b, int j, int k) { return qf_w_##NAME(b, j, k); } \
        static __device__ __forceinline__ void ab(const uint8_t *b, int j, float a[2], float o[2]) {            \
            qf_ab_##NAME(b, j, a, o);                                                                           \
        }                                                                                                       \
    };
QUANT_INT_TYPES(FORM)
#undef FORM

/* Elements e0..e0 + 7 of row r of a float type (e0 a multiple of 8); those past the row's end
 * read as 0; vec: the row's length is a multiple of 8, so they are read 16 bytes at a time. */
template <uint32_t TYPE>
static __device__ __forceinline__ void load8(const mat_view &w, int r, int e0, bool vec, float v[8]) {
    size_t at = (size_t)r * w.cols + e0;
    if (TYPE == GGML_TYPE_F32) {
        const float *p = (const float *)w.q + at;
        if (vec) {
            float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = e0 + j < w.cols ? p[j] : 0.0f;
        }
        return;
    }
    const uint16_t *p = (const uint16_t *)w.q + at;
    uint16_t h[8];
    if (vec) {
        uint4 u = *(const uint4 *)p;
        uint32_t word[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 8; j++) h[j] = (uint16_t)(word[j / 2] >> (16 * (j % 2)));
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) h[j] = e0 + j < w.cols ? p[j] : 0;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = TYPE == GGML_TYPE_F16 ? h2f(h[j]) : __uint_as_float((uint32_t)h[j] << 16);
}

/* Activations e0..e0 + 7 of one token (0 past the row's end). */
static __device__ __forceinline__ void load_x8(const float *x, int e0, int n, bool vec, float v[8]) {
    if (vec) {
        float4 a = *(const float4 *)(x + e0), b = *(const float4 *)(x + e0 + 4);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = e0 + j < n ? x[e0 + j] : 0.0f;
    }
}

enum { MUL_WARPS = 4, MUL_TT = 8 };

/* A product's output for token t and row r: scale (acc + bias[r]), stored or added (cuda.h). */
static __device__ __forceinline__ void put_out(float *y, int ldy, int t, int r, float acc, const float *bias, int add,
                                               float scale) {
    float *yt = y + (size_t)t * ldy + r;
    float v = scale * (acc + (bias ? bias[r] : 0.0f));
    *yt = add ? *yt + v : v;
}

/* Float weights (F32, F16, BF16): warp w of block (bx, by) computes row bx * MUL_WARPS + w for
 * tokens by * MUL_TT.. in the order cuda.h gives: lane l takes elements 8l..8l + 7 of each 256,
 * whose products it sums in order and adds to its sum; then the lanes' sums meet in a butterfly.
 * A warp's loads of a row and of an activation row are each 256 contiguous elements. */
template <uint32_t TYPE>
static __global__ void __launch_bounds__(MUL_WARPS * 32)
    k_mul(mat_view w, const float *__restrict__ x, int ldx, int T, float *y, int ldy, const float *__restrict__ bias,
          int add, float scale) {
    const int lane = threadIdx.x & 31, r = blockIdx.x * MUL_WARPS + (threadIdx.x >> 5);
    if (r >= w.rows) return; /* the whole warp: no shuffle is left waiting */
    const int t0 = blockIdx.y * MUL_TT, nt = T - t0 < MUL_TT ? T - t0 : MUL_TT;
    const bool vw = w.cols % 8 == 0, vx = vw && ldx % 4 == 0;
    float acc[MUL_TT];
#pragma unroll
    for (int t = 0; t < MUL_TT; t++) acc[t] = 0.0f;
#pragma unroll 4
    for (int e0 = lane * 8; e0 < w.cols; e0 += 256) {
        float v[8];
        load8<TYPE>(w, r, e0, vw, v);
#pragma unroll
        for (int t = 0; t < MUL_TT; t++) {
            if (t >= nt) break;
            float xv[8];
            load_x8(x + (size_t)(t0 + t) * ldx, e0, w.cols, vx, xv);
            float p = v[0] * xv[0];
#pragma unroll
            for (int j = 1; j < 8; j++) p = fmaf(v[j], xv[j], p);
            acc[t] += p;
        }
    }
#pragma unroll
    for (int t = 0; t < MUL_TT; t++) {
        if (t >= nt) break; /* nt is the same for the whole warp */
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], o);
    }
    if (lane != 0) return;
#pragma unroll
    for (int t = 0; t < MUL_TT; t++) {
        if (t >= nt) break;
        put_out(y, ldy, t0 + t, r, acc[t], bias, add, scale);
    }
}

/* ---- quantised products: the CPU's definition (kernels_impl.h), bit for bit ---------------------
 * The activations are quantised as the CPU's default mode does (int16 q per group of 32, its
 * scale d and sums), the integer sums S of w times q are exact (on the tensor cores: q = 256 hi +
 * lo, the s8 high and u8 low bytes, two integer mmas), and the float chain over a row's groups
 * runs in group order with the CPU's operations, so a product is the CPU's result bit for bit. */

/* The activations of T tokens (T8: T rounded up to 8) at act: the high bytes of their q,
 * [T8][cols] int8, then the low bytes, [T8][cols] uint8, then an act_group per token and group. */
static __device__ __forceinline__ size_t act_plane(int T, int cols) { return (size_t)(T + 7) / 8 * 8 * cols; }

/* Quantise a token's group, a warp's 32 values (lane k its element k), into the activations of
 * T tokens of `cols` columns at act: quantise_act of kernels_scalar.c (d = max |x| / 32767, q = x
 * * 32767 / max |x| rounded to nearest even), each operation rounded alone as there (the maximum
 * and the integer sums come out the same in any order; a NaN is passed over by the maximum as
 * there). Each plane's 32 bytes of a group are one warp's store. The whole warp calls it. */
static __device__ void quantise_group(float v, int t, int gi, int T, int cols, uint8_t *act) {
    const int k = threadIdx.x & 31;
    const size_t plane = act_plane(T, cols), at = (size_t)t * cols + 32 * gi + k;
    float amax = fabsf(v) > 0.0f ? fabsf(v) : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, amax, o);
        amax = other > amax ? other : amax;
    }
    const float id = amax != 0.0f ? ACT_QMAX_I16 / amax : 0.0f;
    const int q = __float2int_rn(__fmul_rn(v, id));
    act[at] = (uint8_t)(q >> 8); /* q = 256 hi + lo, hi signed */
    act[plane + at] = (uint8_t)(q & 0xff);
    int half = q; /* summed over each half of the warp, then the halves */
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) half += __shfl_xor_sync(0xffffffffu, half, o);
    const int sum16 = __shfl_sync(0xffffffffu, half, 0), sum = sum16 + __shfl_sync(0xffffffffu, half, 16);
    if (k != 0) return;
    act_group *grp = (act_group *)(act + 2 * plane) + (size_t)t * (cols / 32) + gi;
    grp->d = amax / ACT_QMAX_I16;
    grp->sum = sum;
    grp->sum16 = sum16;
}

/* The products' first step: a warp a token's group. */
enum { QUANT_WARPS = 4 };
static __global__ void __launch_bounds__(QUANT_WARPS * 32) k_quant(const float *x, int ldx, int T, int cols, uint8_t *act) {
    const int t = blockIdx.y, gi = blockIdx.x * QUANT_WARPS + (threadIdx.x >> 5);
    if (gi >= cols / 32) return; /* the whole warp */
    quantise_group(x[(size_t)t * ldx + 32 * gi + (threadIdx.x & 31)], t, gi, T, cols, act);
}

/* Nibbles 0..15 in each byte to the signed bytes nibble - 8 (no borrow crosses a byte: each is
 * 128 + nibble - 8 before its top bit is flipped back). */
static __device__ __forceinline__ uint32_t nibbles_s8(uint32_t u) { return ((u | 0x80808080u) - 0x08080808u) ^ 0x80808080u; }

/* Row r's group gi as two words of the mma's A operand, its integers w as bytes: elements 4q..4q
 * + 3 in wd[0], 16 + 4q.. in wd[1]. Q4_0 and Q8_0 from their planes (Q4_0: element j in byte
 * j % 16, the low nibble for j < 16), the other types from their blocks through their forms. */
template <uint32_t TYPE>
static __device__ __forceinline__ void group_words(const mat_view &w, int r, int gi, int q, uint32_t wd[2]) {
    if constexpr (form<TYPE>::native) {
        using F = form<TYPE>;
        const uint8_t *blk = w.q + (size_t)r * w.rb + (size_t)(gi / F::groups) * F::bytes;
        const int j = gi % F::groups;
        wd[0] = wd[1] = 0;
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 4; e++) wd[h] |= (uint32_t)(uint8_t)F::w(blk, j, 16 * h + 4 * q + e) << (8 * e);
    } else if (TYPE == GGML_TYPE_Q4_0) {
        uint32_t u = *(const uint32_t *)(w.q + ((size_t)r * (w.cols / GROUP) + gi) * 16 + 4 * q);
        wd[0] = nibbles_s8(u & 0x0F0F0F0Fu);
        wd[1] = nibbles_s8((u >> 4) & 0x0F0F0F0Fu);
    } else {
        const uint32_t *p = (const uint32_t *)(w.q + ((size_t)r * (w.cols / GROUP) + gi) * 32);
        wd[0] = p[q];
        wd[1] = p[4 + q];
    }
}

/* The group's scales a and offsets b by half. */
template <uint32_t TYPE>
static __device__ __forceinline__ void group_scales(const mat_view &w, int r, int gi, float a[2], float b[2]) {
    if constexpr (form<TYPE>::native) {
        using F = form<TYPE>;
        F::ab(w.q + (size_t)r * w.rb + (size_t)(gi / F::groups) * F::bytes, gi % F::groups, a, b);
    } else {
        a[0] = a[1] = h2f(w.d[(size_t)r * (w.cols / GROUP) + gi]);
        b[0] = b[1] = 0.0f;
    }
}

/* Both, for a lane of the mma; all 0 for a row past the last (!in). */
template <uint32_t TYPE>
static __device__ __forceinline__ void group_frag(const mat_view &w, int r, bool in, int gi, int q, uint32_t wd[2],
                                                  float a[2], float b[2]) {
    if (!in) {
        wd[0] = wd[1] = 0;
        a[0] = a[1] = b[0] = b[1] = 0.0f;
        return;
    }
    group_words<TYPE>(w, r, gi, q, wd);
    group_scales<TYPE>(w, r, gi, a, b);
}

/* Two 16-byte pieces as 8 words, the first's first. */
static __device__ __forceinline__ void words8(uint4 a, uint4 b, uint32_t w[8]) {
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}

/* A Q4_0 / Q8_0 group's quants in its plane: 16-byte pieces (1 or 2) of row r's group gi, as
 * loaded; then as its 32 integers w, bytes, elements 4e..4e + 3 in wd[e] (group_words' order). */
template <uint32_t TYPE> struct planar_pieces {
    enum { n = TYPE == GGML_TYPE_Q8_0 ? 2 : 1 };
};
template <uint32_t TYPE>
static __device__ __forceinline__ void planar_load(const mat_view &w, int r, int gi, uint4 u[]) {
    const uint4 *p = (const uint4 *)(w.q + ((size_t)r * (w.cols / GROUP) + gi) * 16 * planar_pieces<TYPE>::n);
#pragma unroll
    for (int h = 0; h < planar_pieces<TYPE>::n; h++) u[h] = p[h];
}
template <uint32_t TYPE> static __device__ __forceinline__ void planar_words(const uint4 u[], uint32_t wd[8]) {
    if (TYPE == GGML_TYPE_Q4_0) {
        const uint32_t b[4] = {u[0].x, u[0].y, u[0].z, u[0].w};
#pragma unroll
        for (int e = 0; e < 4; e++)
            wd[e] = nibbles_s8(b[e] & 0x0F0F0F0Fu), wd[4 + e] = nibbles_s8((b[e] >> 4) & 0x0F0F0F0Fu);
    } else {
        words8(u[0], u[planar_pieces<TYPE>::n - 1], wd);
    }
}

/* Row r's group gi whole, as planar_words gives it: the planes' 16-byte loads, the other types
 * through their forms. */
template <uint32_t TYPE>
static __device__ __forceinline__ void group_all(const mat_view &w, int r, int gi, uint32_t wd[8]) {
    if constexpr (form<TYPE>::native) {
#pragma unroll
        for (int q = 0; q < 4; q++) {
            uint32_t two[2];
            group_words<TYPE>(w, r, gi, q, two);
            wd[q] = two[0], wd[4 + q] = two[1];
        }
    } else {
        uint4 u[planar_pieces<TYPE>::n];
        planar_load<TYPE>(w, r, gi, u);
        planar_words<TYPE>(u, wd);
    }
}

/* The same group's 32 integers and its scales, for the CUDA cores' kernel. */
template <uint32_t TYPE>
static __device__ __forceinline__ void group_ints(const mat_view &w, int r, int gi, int v[32], float a[2], float b[2]) {
    for (int q = 0; q < 4; q++) {
        uint32_t wd[2];
        group_words<TYPE>(w, r, gi, q, wd);
        for (int e = 0; e < 4; e++) {
            v[4 * q + e] = (int8_t)(wd[0] >> (8 * e));
            v[16 + 4 * q + e] = (int8_t)(wd[1] >> (8 * e));
        }
    }
    group_scales<TYPE>(w, r, gi, a, b);
}

/* Group g's step of a row's float chain for one token (kernels_impl.h) as its terms: the chain
 * is acc = fmaf(f[k], m[k], acc) for k < group_terms_n::n, in order. s0, s1 the integer sums by half
 * as floats (s0 the whole group's for the types with one scale), a, b the group's scales and
 * offsets, x the token's act_group. */
template <uint32_t TYPE> struct group_terms_n {
    enum { n = (form<TYPE>::halves ? 2 : 1) * (form<TYPE>::has_min ? 2 : 1) };
};
template <uint32_t TYPE>
static __device__ __forceinline__ void group_terms(float s0, float s1, const float a[2], const float b[2],
                                                   const act_group &x, float f[], float m[]) {
    int n = 0;
    f[n] = s0, m[n++] = __fmul_rn(a[0], x.d);
    if (form<TYPE>::halves) f[n] = s1, m[n++] = __fmul_rn(a[1], x.d);
    if (form<TYPE>::has_min && form<TYPE>::halves) {
        f[n] = b[0], m[n++] = __fmul_rn(x.d, (float)x.sum16);
        f[n] = b[1], m[n++] = __fmul_rn(x.d, (float)(x.sum - x.sum16));
    } else if (form<TYPE>::has_min) {
        f[n] = b[0], m[n++] = __fmul_rn(x.d, (float)x.sum);
    }
}

template <uint32_t TYPE>
static __device__ __forceinline__ float chain(float acc, float s0, float s1, const float a[2], const float b[2],
                                              const act_group &x) {
    float f[group_terms_n<TYPE>::n], m[group_terms_n<TYPE>::n];
    group_terms<TYPE>(s0, s1, a, b, x, f, m);
#pragma unroll
    for (int k = 0; k < group_terms_n<TYPE>::n; k++) acc = fmaf(f[k], m[k], acc);
    return acc;
}

/* One 16 x 8 tile's exact integer sums over a group: the weights' fragment a (rows g, g + 8) times
 * a token's activations (this lane's column of B), their high bytes bh and their low ones bl
 * (elements 4q.. and 16 + 4q..), as 256 hi + lo: s[h][i] for half h (one sum for the types with
 * one scale) and the mma's element i. */
template <uint32_t TYPE, int NS>
static __device__ __forceinline__ void tile_sums(const uint32_t a[4], const uint32_t bh[2], const uint32_t bl[2],
                                                 int s[NS][4]) {
    int sh[NS][4] = {}, sl[NS][4] = {};
    if (form<TYPE>::halves) {
        mma_s8_k16<false>(sh[0], a, bh[0]);
        mma_s8_k16<false>(sh[NS - 1], a + 2, bh[1]);
        mma_s8_k16<true>(sl[0], a, bl[0]);
        mma_s8_k16<true>(sl[NS - 1], a + 2, bl[1]);
    } else {
        mma_s8_k32<false>(sh[0], a, bh);
        mma_s8_k32<true>(sl[0], a, bl);
    }
#pragma unroll
    for (int h = 0; h < NS; h++)
#pragma unroll
        for (int i = 0; i < 4; i++) s[h][i] = 256 * sh[h][i] + sl[h][i];
}

/* Token t's B words of group gi from the activation planes (0 from T on). */
static __device__ __forceinline__ void act_words(const uint32_t *hi, const uint32_t *lo, int cols, int gi, int t, int T,
                                                 int q, uint32_t bh[2], uint32_t bl[2]) {
    const size_t at = ((size_t)t * cols + (size_t)gi * GROUP) / 4 + q;
    bh[0] = t < T ? hi[at] : 0u, bh[1] = t < T ? hi[at + 4] : 0u;
    bl[0] = t < T ? lo[at] : 0u, bl[1] = t < T ? lo[at + 4] : 0u;
}

/* k_mul_mma's blocks: MMA_WARPS warps taking 16 rows and up to MMA_SPLIT tiles of 8 tokens, and
 * MMA_SPLIT / tiles groups of 32 a warp at a time (untuned). */
enum { MMA_WARPS = 8, MMA_SPLIT = 4 };
/* From this many tokens on, k_mul_tile; below, k_mul_mma in blocks of up to 32 tokens, whose split
 * groups keep more loads in flight than k_mul_tile's 64-row blocks would (a 4096-row matrix gives
 * it 64 blocks of 64 tokens). Untuned: the first GPU run of both (bench/gpu.sh's steps) sets it. */
enum { TILE_FROM = 64 };

/* Quantised products of a few tokens (a decode, a speculative verification, a server step) on
 * the tensor cores: block (bx, by) takes rows bx * 16.. and tokens by * 8 * TILES..; the groups go
 * by chunks of MMA_WARPS x MMA_SPLIT / TILES, warp w taking groups w, w + MMA_WARPS, .. of each (so
 * that a decode, one token, still has a warp per 16 rows and an eighth of their length, with 4
 * groups' loads in flight at once): their integer sums, exact (mma.m16n8k32, or m16n8k16 per half
 * for the types scaled by halves: w times the high bytes, and times the low ones), go through
 * shared memory to the warps that keep the chains (output e of a lane: warp e % MMA_WARPS), which
 * take the chunk's groups in order. */
template <uint32_t TYPE, int TILES>
static __global__ void __launch_bounds__(MMA_WARPS * 32)
    k_mul_mma(mat_view w, const uint8_t *__restrict__ act, int T, float *y, int ldy, const float *__restrict__ bias,
              int add, float scale) {
    constexpr int NS = form<TYPE>::halves ? 2 : 1;       /* sums a group */
    constexpr int PER = MMA_SPLIT / TILES;               /* groups a warp takes of each chunk */
    constexpr int CHUNK = MMA_WARPS * PER, E = TILES * 4; /* a lane's outputs */
    constexpr int OUT = (E + MMA_WARPS - 1) / MMA_WARPS;  /* those a warp keeps the chains of */
    __shared__ float sums[CHUNK][NS][E][32]; /* by group of the chunk, lane by lane */
    __shared__ float scales[CHUNK][16][4];   /* a[0], a[1], b[0], b[1] by group and row */
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3, wi = threadIdx.x >> 5;
    const int r0 = blockIdx.x * 16, ra = r0 + g, rb = r0 + g + 8, ng = w.cols / GROUP;
    const bool ina = ra < w.rows, inb = rb < w.rows;
    const int t0 = blockIdx.y * 8 * TILES;
    const size_t plane = act_plane(T, w.cols);
    const uint32_t *hi = (const uint32_t *)act, *lo = (const uint32_t *)(act + plane);
    const act_group *ag = (const act_group *)(act + 2 * plane);
    float acc[OUT];
#pragma unroll
    for (int o = 0; o < OUT; o++) acc[o] = 0.0f;
    for (int c0 = 0; c0 < ng; c0 += CHUNK) {
        uint32_t wa[PER][2], wb[PER][2];
        float sa[PER][2] = {}, oa[PER][2] = {}, sb[PER][2] = {}, ob[PER][2] = {}; /* (group_frag sets them: for GCC) */
#pragma unroll
        for (int u = 0; u < PER; u++) { /* the loads first, all in flight together */
            const int gi = c0 + u * MMA_WARPS + wi;
            group_frag<TYPE>(w, ina ? ra : r0, ina && gi < ng, gi, q, wa[u], sa[u], oa[u]);
            group_frag<TYPE>(w, inb ? rb : r0, inb && gi < ng, gi, q, wb[u], sb[u], ob[u]);
        }
#pragma unroll
        for (int u = 0; u < PER; u++) {
            const int j = u * MMA_WARPS + wi, gi = c0 + j;
            if (gi >= ng) break; /* the same for the whole warp */
            if (q == 0) {
                scales[j][g][0] = sa[u][0], scales[j][g][1] = sa[u][1], scales[j][g][2] = oa[u][0], scales[j][g][3] = oa[u][1];
                scales[j][g + 8][0] = sb[u][0], scales[j][g + 8][1] = sb[u][1], scales[j][g + 8][2] = ob[u][0];
                scales[j][g + 8][3] = ob[u][1];
            }
            const uint32_t a[4] = {wa[u][0], wb[u][0], wa[u][1], wb[u][1]};
#pragma unroll
            for (int n = 0; n < TILES; n++) {
                if (t0 + 8 * n >= T) break; /* the same for the whole warp */
                int sx[NS][4];
                uint32_t bh[2], bl[2];
                act_words(hi, lo, w.cols, gi, t0 + 8 * n + g, T, q, bh, bl);
                tile_sums<TYPE, NS>(a, bh, bl, sx);
#pragma unroll
                for (int h = 0; h < NS; h++)
#pragma unroll
                    for (int i = 0; i < 4; i++) sums[j][h][4 * n + i][lane] = (float)sx[h][i];
            }
        }
        __syncthreads();
#pragma unroll
        for (int o = 0; o < OUT; o++) { /* this warp's outputs: the chunk's groups in order */
            const int e = wi + MMA_WARPS * o, n = e / 4, i = e % 4, t = t0 + 8 * n + 2 * q + (i & 1), row = i < 2 ? g : g + 8;
            if (e >= E || t >= T) continue;
            for (int j = 0; j < CHUNK && c0 + j < ng; j++) {
                const float *sc = scales[j][row];
                const float ab[2][2] = {{sc[0], sc[1]}, {sc[2], sc[3]}};
                acc[o] = chain<TYPE>(acc[o], sums[j][0][e][lane], sums[j][NS - 1][e][lane], ab[0], ab[1],
                                     ag[(size_t)t * ng + c0 + j]);
            }
        }
        __syncthreads(); /* the chunk's sums are read: the next may be written */
    }
#pragma unroll
    for (int o = 0; o < OUT; o++) {
        const int e = wi + MMA_WARPS * o, n = e / 4, i = e % 4, t = t0 + 8 * n + 2 * q + (i & 1), r = i < 2 ? ra : rb;
        if (e >= E || r >= w.rows || t >= T) continue;
        put_out(y, ldy, t, r, acc[o], bias, add, scale);
    }
}

/* Quantised products of many tokens (a prefill) on the tensor cores, tiled in shared memory: a
 * block of TILE_WM x TILE_WN warps takes TILE_BM rows and TILE_BN tokens, warp (wm, wn) a 32 x 32
 * corner of them (2 x 4 tiles of 16 x 8), and the groups go TILE_KG at a time: the block's threads
 * copy a stage's weights (each integer a byte: Q4_0's nibbles spread as they are stored, the other
 * native types decoded through their forms), their scales, and the tokens' activation bytes and
 * act_groups into shared memory, and load the next stage while the warps take this one's groups
 * through the mmas, each group's exact sums straight into its (row, token) chain, in group order:
 * the same bits as the other kernels. Shared memory holds the words k-major ([group][word][row or
 * token], rows padded by 8 words, so that a fragment's 32 loads fall in 32 banks). */
enum { TILE_WM = 2, TILE_WN = 2, TILE_KG = 4 };
enum { TILE_BM = 32 * TILE_WM, TILE_BN = 32 * TILE_WN, TILE_THREADS = 32 * TILE_WM * TILE_WN };
static_assert(TILE_THREADS / TILE_BM * 2 == TILE_KG && TILE_THREADS / TILE_BN * 2 == TILE_KG,
              "a thread loads two groups of one row and two of one token a stage");

template <uint32_t TYPE> struct tile_scales {
    enum { a = form<TYPE>::halves ? 2 : 1, b = form<TYPE>::has_min ? (form<TYPE>::halves ? 2 : 1) : 0 };
};

/* A thread's part of a stage: two groups of one row (Q4_0, Q8_0: their planes' bytes and scales,
 * as loaded; the others: decoded) and two groups of one token's activations. */
template <uint32_t TYPE> struct tile_part {
    uint4 u[2][planar_pieces<TYPE>::n];
    uint16_t d[2];
    uint32_t wd[2][8];
    float a[2][2], b[2][2];
    uint4 hi[2][2], lo[2][2];
    act_group x[2];
};

template <uint32_t TYPE> struct tile_smem {
    uint32_t w[TILE_KG][8][TILE_BM + 8];
    float sc[TILE_KG][TILE_BM][tile_scales<TYPE>::a + tile_scales<TYPE>::b];
    uint32_t hi[TILE_KG][8][TILE_BN + 8], lo[TILE_KG][8][TILE_BN + 8];
    act_group x[TILE_KG][TILE_BN];
};

/* The loads of the stage from group c0: this thread's row r and groups c0 + 2 (i / TILE_BM) + k,
 * and its token t and groups c0 + 2 (i / TILE_BN) + k (rows, tokens and groups past the last
 * clamped to it: loaded, not used). */
template <uint32_t TYPE>
static __device__ __forceinline__ void tile_load(tile_part<TYPE> &p, const mat_view &w, const uint8_t *act, size_t plane,
                                                 int r, int t, int c0) {
    const int i = threadIdx.x, ng = w.cols / GROUP;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int gi = min(c0 + 2 * (i / TILE_BM) + k, ng - 1);
        if constexpr (form<TYPE>::native) {
            group_all<TYPE>(w, r, gi, p.wd[k]);
            group_scales<TYPE>(w, r, gi, p.a[k], p.b[k]);
        } else {
            planar_load<TYPE>(w, r, gi, p.u[k]);
            p.d[k] = w.d[(size_t)r * ng + gi];
        }
        const int gt = min(c0 + 2 * (i / TILE_BN) + k, ng - 1);
        const uint8_t *xg = act + (size_t)t * w.cols + (size_t)gt * GROUP;
        const uint4 *xh = (const uint4 *)xg, *xl = (const uint4 *)(xg + plane);
        p.hi[k][0] = xh[0], p.hi[k][1] = xh[1], p.lo[k][0] = xl[0], p.lo[k][1] = xl[1];
        p.x[k] = ((const act_group *)(act + 2 * plane))[(size_t)t * ng + gt];
    }
}

template <uint32_t TYPE>
static __device__ __forceinline__ void tile_store(const tile_part<TYPE> &p, tile_smem<TYPE> &sm) {
    const int i = threadIdx.x, row = i % TILE_BM, tok = i % TILE_BN;
    constexpr int NA = tile_scales<TYPE>::a, NB = tile_scales<TYPE>::b;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int ja = 2 * (i / TILE_BM) + k, jb = 2 * (i / TILE_BN) + k;
        uint32_t wd[8];
        float a[2] = {0.0f, 0.0f}, b[2] = {0.0f, 0.0f};
        if constexpr (form<TYPE>::native) {
#pragma unroll
            for (int e = 0; e < 8; e++) wd[e] = p.wd[k][e];
#pragma unroll
            for (int h = 0; h < 2; h++) a[h] = p.a[k][h], b[h] = p.b[k][h];
        } else {
            planar_words<TYPE>(p.u[k], wd);
            a[0] = h2f(p.d[k]);
        }
#pragma unroll
        for (int e = 0; e < 8; e++) sm.w[ja][e][row] = wd[e];
#pragma unroll
        for (int h = 0; h < NA; h++) sm.sc[ja][row][h] = a[h];
#pragma unroll
        for (int h = 0; h < NB; h++) sm.sc[ja][row][NA + h] = b[h];
        uint32_t hw[8], lw[8];
        words8(p.hi[k][0], p.hi[k][1], hw);
        words8(p.lo[k][0], p.lo[k][1], lw);
#pragma unroll
        for (int e = 0; e < 8; e++) sm.hi[jb][e][tok] = hw[e], sm.lo[jb][e][tok] = lw[e];
        sm.x[jb][tok] = p.x[k];
    }
}

template <uint32_t TYPE>
static __global__ void __launch_bounds__(TILE_THREADS)
    k_mul_tile(mat_view w, const uint8_t *__restrict__ act, int T, float *y, int ldy, const float *__restrict__ bias,
               int add, float scale) {
    constexpr int NS = form<TYPE>::halves ? 2 : 1, NA = tile_scales<TYPE>::a, NB = tile_scales<TYPE>::b;
    __shared__ tile_smem<TYPE> sm;
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3, wi = threadIdx.x >> 5;
    const int wm = wi % TILE_WM, wn = wi / TILE_WM, ng = w.cols / GROUP;
    const int r0 = blockIdx.x * TILE_BM, t0 = blockIdx.y * TILE_BN;
    const size_t plane = act_plane(T, w.cols);
    const int lr = min(r0 + (int)threadIdx.x % TILE_BM, w.rows - 1), lt = min(t0 + (int)threadIdx.x % TILE_BN, T - 1);
    float acc[2][4][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][n][i] = 0.0f;
    tile_part<TYPE> part;
    tile_load<TYPE>(part, w, act, plane, lr, lt, 0);
    for (int c0 = 0; c0 < ng; c0 += TILE_KG) {
        __syncthreads(); /* the last stage is read */
        tile_store<TYPE>(part, sm);
        __syncthreads();
        if (c0 + TILE_KG < ng) tile_load<TYPE>(part, w, act, plane, lr, lt, c0 + TILE_KG); /* in flight meanwhile */
#pragma unroll
        for (int j = 0; j < TILE_KG; j++) {
            if (c0 + j >= ng) break; /* the same for the whole block */
            uint32_t af[2][4];
            float ra[2][2][2], rb[2][2][2]; /* by tile and row (g, g + 8): the scales a and offsets b */
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const int r = wm * 32 + m * 16 + g;
                af[m][0] = sm.w[j][q][r], af[m][1] = sm.w[j][q][r + 8];
                af[m][2] = sm.w[j][4 + q][r], af[m][3] = sm.w[j][4 + q][r + 8];
#pragma unroll
                for (int hr = 0; hr < 2; hr++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        ra[m][hr][h] = h < NA ? sm.sc[j][r + 8 * hr][h] : 0.0f;
                        rb[m][hr][h] = h < NB ? sm.sc[j][r + 8 * hr][NA + h] : 0.0f;
                    }
            }
#pragma unroll
            for (int n = 0; n < 4; n++) {
                const int tk = wn * 32 + n * 8;
                const uint32_t bh[2] = {sm.hi[j][q][tk + g], sm.hi[j][4 + q][tk + g]};
                const uint32_t bl[2] = {sm.lo[j][q][tk + g], sm.lo[j][4 + q][tk + g]};
                const act_group x[2] = {sm.x[j][tk + 2 * q], sm.x[j][tk + 2 * q + 1]};
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    int sx[NS][4];
                    tile_sums<TYPE, NS>(af[m], bh, bl, sx);
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        acc[m][n][i] = chain<TYPE>(acc[m][n][i], (float)sx[0][i], (float)sx[NS - 1][i], ra[m][i / 2],
                                                   rb[m][i / 2], x[i & 1]);
                }
            }
        }
    }
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int r = r0 + wm * 32 + m * 16 + g + 8 * (i / 2), t = t0 + wn * 32 + n * 8 + 2 * q + (i & 1);
                if (r < w.rows && t < T) put_out(y, ldy, t, r, acc[m][n][i], bias, add, scale);
            }
}

/* The same on the CUDA cores (NUCLEUS_CUDA_MMA=0): warp w of block (bx, by) takes row bx *
 * MUL_WARPS + w and tokens by * MUL_TT..; lane l the groups l, l + 32, ..: their integer sums,
 * then each chunk of 32 groups goes through the chain in group order, every lane keeping it (the
 * values shuffled from the group's lane) and lane 0 storing it. */
template <uint32_t TYPE>
static __global__ void __launch_bounds__(MUL_WARPS * 32)
    k_mul_int(mat_view w, const uint8_t *__restrict__ act, int T, float *y, int ldy, const float *__restrict__ bias,
              int add, float scale) {
    const int lane = threadIdx.x & 31, r = blockIdx.x * MUL_WARPS + (threadIdx.x >> 5), ng = w.cols / GROUP;
    if (r >= w.rows) return; /* the whole warp */
    const int t0 = blockIdx.y * MUL_TT, nt = T - t0 < MUL_TT ? T - t0 : MUL_TT;
    const size_t plane = act_plane(T, w.cols);
    const int8_t *hi = (const int8_t *)act;
    const uint8_t *lo = act + plane;
    const act_group *ag = (const act_group *)(act + 2 * plane);
    float acc[MUL_TT];
#pragma unroll
    for (int t = 0; t < MUL_TT; t++) acc[t] = 0.0f;
    for (int c0 = 0; c0 < ng; c0 += 32) {
        const int gi = c0 + lane;
        int s[MUL_TT][2] = {};
        float a[2] = {0.0f, 0.0f}, b[2] = {0.0f, 0.0f};
        if (gi < ng) {
            int v[32];
            group_ints<TYPE>(w, r, gi, v, a, b);
            for (int t = 0; t < nt; t++) {
                const size_t at = (size_t)(t0 + t) * w.cols + (size_t)gi * GROUP;
                for (int k = 0; k < 32; k++) s[t][k / 16] += v[k] * (256 * hi[at + k] + lo[at + k]);
            }
        }
        for (int j = 0; j < 32 && c0 + j < ng; j++) { /* the same for the whole warp */
            float aj[2] = {__shfl_sync(0xffffffffu, a[0], j), __shfl_sync(0xffffffffu, a[1], j)};
            float bj[2] = {__shfl_sync(0xffffffffu, b[0], j), __shfl_sync(0xffffffffu, b[1], j)};
#pragma unroll
            for (int t = 0; t < MUL_TT; t++) {
                if (t >= nt) break;
                int s0 = __shfl_sync(0xffffffffu, s[t][0], j), s1 = __shfl_sync(0xffffffffu, s[t][1], j);
                float f0 = form<TYPE>::halves ? (float)s0 : (float)(s0 + s1);
                acc[t] = chain<TYPE>(acc[t], f0, (float)s1, aj, bj, ag[(size_t)(t0 + t) * ng + c0 + j]);
            }
        }
    }
    if (lane != 0) return;
#pragma unroll
    for (int t = 0; t < MUL_TT; t++) {
        if (t >= nt) break;
        put_out(y, ldy, t0 + t, r, acc[t], bias, add, scale);
    }
}

/* One token's quantised products (a decode step) on the CUDA cores, the same bits as the other
 * kernels': one launch takes up to VEC_OUTS products of one input and one type (Q, K and V; gate
 * and up), a block VEC_ROWS rows of one of them. The groups go by chunks of VEC_THREADS, thread i
 * taking group i of the chunk in each of the block's rows, the rows' loads first, all in flight
 * together (Q4_0: a warp's loads of a row are 512 contiguous bytes); the token's activations of
 * the group, read once for all the rows, times the weights by dp4a (the high bytes signed, the low
 * ones unsigned) give the exact integer sums, and those the group's terms of the float chain
 * (group_terms), which go through shared memory to the thread of each row (thread k of the block,
 * row k), which walks them in group order. While a block's few threads walk their chains, the
 * other blocks' loads keep the memory busy. */
enum { VEC_ROWS = 8, VEC_THREADS = 128, VEC_OUTS = 3 };
struct vec_out {
    mat_view w;
    float *y;
    const float *bias;
    int add;
    float scale;
    int end; /* the blocks of this product and the earlier ones */
};
struct vec_job {
    vec_out o[VEC_OUTS];
};

template <uint32_t TYPE>
static __global__ void __launch_bounds__(VEC_THREADS) k_mul_vec(vec_job job, const uint8_t *__restrict__ act) {
    constexpr int NT = group_terms_n<TYPE>::n;
    __shared__ float fac[VEC_THREADS][NT][VEC_ROWS + 1], mul[VEC_THREADS][NT][VEC_ROWS + 1];
    int o = 0;
    while (o < VEC_OUTS - 1 && (int)blockIdx.x >= job.o[o].end) o++;
    const vec_out &out = job.o[o];
    const mat_view &w = out.w;
    const int i = threadIdx.x, r0 = ((int)blockIdx.x - (o ? job.o[o - 1].end : 0)) * VEC_ROWS, ng = w.cols / GROUP;
    const size_t plane = act_plane(1, w.cols);
    const act_group *ag = (const act_group *)(act + 2 * plane);
    float acc = 0.0f;
    for (int c0 = 0; c0 < ng; c0 += VEC_THREADS) {
        const int gi = c0 + i;
        if (gi < ng) {
            uint32_t wd[VEC_ROWS][8];
            float a[VEC_ROWS][2], b[VEC_ROWS][2];
#pragma unroll
            for (int k = 0; k < VEC_ROWS; k++) {
                const int r = min(r0 + k, w.rows - 1); /* past the last row: computed, not stored */
                group_all<TYPE>(w, r, gi, wd[k]);
                group_scales<TYPE>(w, r, gi, a[k], b[k]);
            }
            const uint4 *xa = (const uint4 *)(act + (size_t)gi * GROUP);
            const uint4 *xl = (const uint4 *)(act + plane + (size_t)gi * GROUP);
            uint32_t hi[8], lo[8];
            words8(xa[0], xa[1], hi);
            words8(xl[0], xl[1], lo);
            const act_group x = ag[gi];
#pragma unroll
            for (int k = 0; k < VEC_ROWS; k++) {
                int s[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    int sh = 0, sl = 0;
#pragma unroll
                    for (int e = 4 * h; e < 4 * h + 4; e++) {
                        sh = __dp4a((int)wd[k][e], (int)hi[e], sh);
                        sl = dp4a_su(wd[k][e], lo[e], sl);
                    }
                    s[h] = 256 * sh + sl;
                }
                float f[NT], m[NT];
                if (form<TYPE>::halves)
                    group_terms<TYPE>((float)s[0], (float)s[1], a[k], b[k], x, f, m);
                else
                    group_terms<TYPE>((float)(s[0] + s[1]), 0.0f, a[k], b[k], x, f, m);
#pragma unroll
                for (int j = 0; j < NT; j++) fac[i][j][k] = f[j], mul[i][j][k] = m[j];
            }
        }
        __syncthreads();
        if (i < VEC_ROWS) {
            const int n = ng - c0 < VEC_THREADS ? ng - c0 : VEC_THREADS;
#pragma unroll 8
            for (int g = 0; g < n; g++)
#pragma unroll
                for (int j = 0; j < NT; j++) acc = fmaf(fac[g][j][i], mul[g][j][i], acc);
        }
        __syncthreads(); /* the chunk's terms are read: the next may be written */
    }
    if (i < VEC_ROWS && r0 + i < w.rows) put_out(out.y, 0, 0, r0 + i, acc, out.bias, out.add, out.scale);
}

extern "C" bool cu_quantised(const cu_mat *w) { return planar(w->type) || native(w->type); }

/* The profile's names of the products, by type and kernel. */
enum mul_kernel { MUL_FMA, MUL_MMA, MUL_VEC };
#define NAME_CASE(NAME, ...) \
    case GGML_TYPE_##NAME: return kind == MUL_VEC ? "vec " #NAME : kind == MUL_MMA ? "mma " #NAME : "mul " #NAME;
static const char *mul_name(uint32_t type, mul_kernel kind) {
    switch (type) {
    QUANT_INT_TYPES(NAME_CASE)
    case GGML_TYPE_F16: return "mul F16";
    case GGML_TYPE_BF16: return "mul BF16";
    default: return "mul F32";
    }
}
#undef NAME_CASE

static mat_view view_of(const cu_mat *w) {
    return {(const uint8_t *)w->q, (const uint16_t *)w->d, w->rows, w->cols,
            native(w->type) ? quant_row_bytes(w->type, w->cols) : 0};
}

/* The activations of T tokens of n columns for the products, or NULL (with a failure noted) when
 * cu_reserve left too little room. */
static uint8_t *act_for(cu_dev *d, int T, int n) {
    if ((size_t)((T + 7) / 8 * 8) * (size_t)n > d->act_elems) {
        note(d, cudaErrorInvalidValue); /* cu_reserve was not told of this size */
        return NULL;
    }
    return d->act;
}

/* One product of cu_mul_n: a quantised one from the activations already quantised, a float one
 * from x. */
static void mul_one(cu_dev *d, const cu_out *o, const float *x, int ldx, int T) {
    const cu_mat *w = o->w;
    mat_view v = view_of(w);
    int a = o->add ? 1 : 0, ldy = o->ldy;
    float *y = o->y, scale = o->scale;
    const float *bias = o->bias;
    bool mma = cu_quantised(w) && d->mma;
    prof_begin(d);
    if (mma && T < TILE_FROM) { /* few tokens: the groups split among a block's warps */
        const int tiles = T <= 8 ? 1 : T <= 16 ? 2 : 4;
        dim3 grid((unsigned)((w->rows + 15) / 16), (unsigned)((T + 8 * tiles - 1) / (8 * tiles))), block(MMA_WARPS * 32);
#define MMA_CASE(NAME, ...)                                                                                          \
    case GGML_TYPE_##NAME:                                                                                           \
        if (tiles == 1)                                                                                              \
            NC_LAUNCH((k_mul_mma<GGML_TYPE_##NAME, 1>), grid, block, d->stream, v, d->act, T, y, ldy, bias, a, scale); \
        else if (tiles == 2)                                                                                         \
            NC_LAUNCH((k_mul_mma<GGML_TYPE_##NAME, 2>), grid, block, d->stream, v, d->act, T, y, ldy, bias, a, scale); \
        else                                                                                                         \
            NC_LAUNCH((k_mul_mma<GGML_TYPE_##NAME, 4>), grid, block, d->stream, v, d->act, T, y, ldy, bias, a, scale); \
        break;
        switch (w->type) { QUANT_INT_TYPES(MMA_CASE) default: break; }
#undef MMA_CASE
    } else if (mma) { /* many: tiles of TILE_BM rows and TILE_BN tokens */
        dim3 grid((unsigned)((w->rows + TILE_BM - 1) / TILE_BM), (unsigned)((T + TILE_BN - 1) / TILE_BN));
#define TILE_CASE(NAME, ...)                                                                                          \
    case GGML_TYPE_##NAME:                                                                                           \
        NC_LAUNCH(k_mul_tile<GGML_TYPE_##NAME>, grid, dim3(TILE_THREADS), d->stream, v, d->act, T, y, ldy, bias, a, scale); \
        break;
        switch (w->type) { QUANT_INT_TYPES(TILE_CASE) default: break; }
#undef TILE_CASE
    } else {
        dim3 grid((unsigned)((w->rows + MUL_WARPS - 1) / MUL_WARPS), (unsigned)((T + MUL_TT - 1) / MUL_TT)), block(MUL_WARPS * 32);
#define INT_CASE(NAME, ...)                                                                                          \
    case GGML_TYPE_##NAME: NC_LAUNCH(k_mul_int<GGML_TYPE_##NAME>, grid, block, d->stream, v, d->act, T, y, ldy, bias, a, scale); break;
#define MUL_CASE(NAME)                                                                                               \
    case GGML_TYPE_##NAME: NC_LAUNCH(k_mul<GGML_TYPE_##NAME>, grid, block, d->stream, v, x, ldx, T, y, ldy, bias, a, scale); break;
        switch (w->type) {
        QUANT_INT_TYPES(INT_CASE)
        MUL_CASE(F16)
        MUL_CASE(BF16)
        default: MUL_CASE(F32)
        }
#undef INT_CASE
#undef MUL_CASE
    }
    note_launch(d);
    prof_end(d, mul_name(w->type, mma ? MUL_MMA : MUL_FMA), (double)w->bytes + 4.0 * T * (w->cols + w->rows));
}

/* n (up to VEC_OUTS) quantised products of one token, all of one type, from the activations
 * already quantised: one launch of k_mul_vec. */
static void mul_vec(cu_dev *d, const cu_out *out, int n) {
    vec_job job = {};
    int blocks = 0;
    double bytes = 0;
    for (int k = 0; k < n; k++) {
        const cu_mat *w = out[k].w;
        blocks += (w->rows + VEC_ROWS - 1) / VEC_ROWS;
        job.o[k] = {view_of(w), out[k].y, out[k].bias, out[k].add ? 1 : 0, out[k].scale, blocks};
        bytes += (double)w->bytes + 4.0 * (w->cols + w->rows);
    }
    prof_begin(d);
#define VEC_CASE(NAME, ...)                                                                                          \
    case GGML_TYPE_##NAME:                                                                                           \
        NC_LAUNCH(k_mul_vec<GGML_TYPE_##NAME>, dim3((unsigned)blocks), dim3(VEC_THREADS), d->stream, job, d->act);    \
        break;
    switch (out[0].w->type) { QUANT_INT_TYPES(VEC_CASE) default: break; }
#undef VEC_CASE
    note_launch(d);
    prof_end(d, mul_name(out[0].w->type, MUL_VEC), bytes);
}

extern "C" void cu_mul_n(cu_dev *d, const float *x, int ldx, int T, const cu_out *out, int n, bool ready) {
    bool quant = false;
    for (int i = 0; i < n; i++) quant = quant || cu_quantised(out[i].w);
    if (quant && !ready) { /* once for all the products (they share the input, so its width) */
        int cols = out[0].w->cols;
        if (!act_for(d, T, cols)) return;
        prof_begin(d);
        NC_LAUNCH(k_quant, dim3((unsigned)((cols / 32 + QUANT_WARPS - 1) / QUANT_WARPS), (unsigned)T), dim3(QUANT_WARPS * 32),
                  d->stream, x, ldx, T, cols, d->act);
        note_launch(d);
        prof_end(d, "quantise", 0);
    }
    for (int i = 0; i < n;) {
        int k = 1; /* one token's quantised products: those of one type together */
        if (T == 1 && cu_quantised(out[i].w)) {
            while (k < VEC_OUTS && i + k < n && out[i + k].w->type == out[i].w->type) k++;
            mul_vec(d, out + i, k);
        } else {
            mul_one(d, &out[i], x, ldx, T);
        }
        i += k;
    }
}

extern "C" void cu_mul(cu_dev *d, const cu_mat *w, const float *x, int ldx, int T, float *y, int ldy,
                       const float *bias, bool add, float scale) {
    cu_out o = {w, y, ldy, bias, add, scale};
    cu_mul_n(d, x, ldx, T, &o, 1, false);
}

/* ---- cache rows ----------------------------------------------------------------------------- */

static __host__ __device__ __forceinline__ size_t cache_row(uint32_t type, int n) {
    return type == GGML_TYPE_F32 ? 4 * (size_t)n : type == GGML_TYPE_F16 ? 2 * (size_t)n
                                                  : (size_t)n / 32 * (type == GGML_TYPE_Q8_0 ? 34 : 18);
}

extern "C" size_t cu_row_bytes(uint32_t type, int n) { return cache_row(type, n); }

/* Element j of a cache row: F32, F16, or blocks of 32 (an f16 scale, then 32 int8 for Q8_0, or
 * 16 bytes of nibbles for Q4_0: element k in byte k % 16, the low nibble for k < 16), as
 * quant_dequantize_row reads them. */
static __device__ __forceinline__ float cache_elem(const uint8_t *row, uint32_t type, int j) {
    if (type == GGML_TYPE_F32) return ((const float *)row)[j];
    if (type == GGML_TYPE_F16) return h2f(((const uint16_t *)row)[j]);
    const uint8_t *b = row + (size_t)(j / 32) * (type == GGML_TYPE_Q8_0 ? 34 : 18);
    float d = h2f((uint16_t)(b[0] | b[1] << 8));
    int k = j % 32;
    if (type == GGML_TYPE_Q8_0) return d * (float)(int8_t)b[2 + k];
    return d * (float)((int)((b[2 + k % 16] >> (k / 16 * 4)) & 15) - 8);
}

/* A row of n floats into the cache's type, by the whole block: elements, or blocks of 32 a
 * thread, quantised with quant.c's rules (Q8_0: d = amax / 127, q = round(x / d); Q4_0: d = the
 * value of largest magnitude / -8, q = x / d + 8.5 truncated, at most 15), products and sums
 * rounded one by one (no fma), so the bits are the CPU's. */
static __device__ void cache_store(uint8_t *row, uint32_t type, const float *x, int n) {
    if (type == GGML_TYPE_F32) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) ((float *)row)[i] = x[i];
        return;
    }
    if (type == GGML_TYPE_F16) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) ((uint16_t *)row)[i] = f2h(x[i]);
        return;
    }
    for (int blk = threadIdx.x; blk < n / 32; blk += blockDim.x) {
        const float *xb = x + (size_t)blk * 32;
        uint8_t *b = row + (size_t)blk * (type == GGML_TYPE_Q8_0 ? 34 : 18);
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++)
            if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), max = xb[j];
        float dq = type == GGML_TYPE_Q8_0 ? amax / 127.0f : max / -8.0f, id = dq != 0.0f ? 1.0f / dq : 0.0f;
        /* One 16-bit store (a block starts at an even byte): with two byte stores of the converted
         * scale, an H200 (CUDA 13.0) wrote 0 for its low byte. */
        *(uint16_t *)b = f2h(dq);
        if (type == GGML_TYPE_Q8_0) {
            for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)roundf(__fmul_rn(xb[j], id));
        } else {
            for (int j = 0; j < 16; j++) {
                int lo = (int)__fadd_rn(__fmul_rn(xb[j], id), 8.5f), hi = (int)__fadd_rn(__fmul_rn(xb[j + 16], id), 8.5f);
                lo = lo < 15 ? lo : 15, hi = hi < 15 ? hi : 15;
                b[2 + j] = (uint8_t)((lo & 0xF) | (hi & 0xF) << 4);
            }
        }
    }
}

static __global__ void k_rows(uint8_t *dst, const uint8_t *src, const int32_t *di, const int32_t *si, int bytes) {
    const int r = blockIdx.x;
    uint8_t *t = dst + (size_t)(di ? di[r] : r) * bytes;
    const uint8_t *f = src + (size_t)(si ? si[r] : r) * bytes;
    for (int i = threadIdx.x; i < bytes; i += blockDim.x) t[i] = f[i];
}

extern "C" void cu_rows(cu_dev *d, void *dst, const void *src, const int32_t *dst_idx, const int32_t *src_idx, int rows,
                        size_t bytes) {
    prof_begin(d);
    NC_LAUNCH(k_rows, dim3((unsigned)rows), dim3(256), d->stream, (uint8_t *)dst, (const uint8_t *)src, dst_idx, src_idx,
              (int)bytes);
    note_launch(d);
    prof_end(d, "rows", 0);
}

/* ---- norms, rotation, activation ----------------------------------------------------------- */

enum { NORM_T = 256 };

/* A block per row: the sum of squares in double (as the CPU kernels), each thread over a stride,
 * then a fixed tree. */
static __global__ void __launch_bounds__(NORM_T)
    k_rms_norm(float *y, const float *x, const int32_t *rows, const float *w, int n, float eps, int add, float scale,
               uint8_t *act) {
    __shared__ double part[NORM_T];
    const int i = blockIdx.x, tid = threadIdx.x;
    const float *xr = x + (size_t)(rows ? rows[i] : i) * n;
    float *yr = y + (size_t)i * n;
    double ss = 0;
    for (int k = tid; k < n; k += NORM_T) ss += (double)xr[k] * xr[k];
    part[tid] = ss;
    __syncthreads();
    for (int h = NORM_T / 2; h > 0; h >>= 1) {
        if (tid < h) part[tid] += part[tid + h];
        __syncthreads();
    }
    float inv = (float)(1.0 / sqrt(part[0] / n + eps));
    for (int k = tid; k < n; k += NORM_T) {
        float v = w ? xr[k] * inv * w[k] : xr[k];
        yr[k] = add ? yr[k] + scale * v : v;
    }
    if (!act) return;
    __syncthreads(); /* the row as written (y may be x), each warp its groups */
    for (int gi = tid / 32; gi < n / 32; gi += NORM_T / 32)
        quantise_group(yr[32 * gi + (tid & 31)], i, gi, gridDim.x, n, act);
}

extern "C" bool cu_rms_norm(cu_dev *d, float *y, const float *x, const int32_t *rows, const float *w, int n, int T,
                            float eps, bool quant) {
    uint8_t *act = quant && n % 32 == 0 ? act_for(d, T, n) : NULL;
    prof_begin(d);
    NC_LAUNCH(k_rms_norm, dim3((unsigned)T), dim3(NORM_T), d->stream, y, x, rows, w, n, eps, 0, 1.0f, act);
    note_launch(d);
    prof_end(d, "rms_norm", 0);
    return act != NULL;
}

extern "C" void cu_norm_add(cu_dev *d, float *x, const float *o, const float *w, int n, int T, float eps, float scale) {
    prof_begin(d);
    NC_LAUNCH(k_rms_norm, dim3((unsigned)T), dim3(NORM_T), d->stream, x, o, (const int32_t *)NULL, w, n, eps, 1, scale,
              (uint8_t *)NULL);
    note_launch(d);
    prof_end(d, "norm_add", 0);
}

/* Rotate a row's n_head heads (head_dim apart) by a table row cs / sn of half pairs: the block's
 * threads take the pairs. */
static __device__ void rope_row(float *x, int n_head, int head_dim, int half, int neox, const float *cs, const float *sn) {
    for (int k = threadIdx.x; k < n_head * half; k += blockDim.x) {
        int h = k / half, i = k % half, a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float *v = x + (size_t)h * head_dim;
        float c = cs[i], s = sn[i], x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
}

/* Keys already in the cache turned for new positions: cell c (slot slots[c]) read as floats,
 * each of n_head heads rotated by the table's row c, stored back in the cache's type (as the CPU
 * does: kv_read_k, rope_head, kv_store). */
static __global__ void k_turn_keys(cu_cache cc, int n_head, int head_dim, int half, int neox, const int32_t *slots,
                                   const float *cs, const float *sn) {
    __shared__ float x[CU_MAX_KV_DIM];
    const int c = blockIdx.x;
    uint8_t *row = cc.k + (size_t)slots[c] * cache_row(cc.type_k, cc.kv_dim);
    for (int j = threadIdx.x; j < cc.kv_dim; j += blockDim.x) x[j] = cache_elem(row, cc.type_k, j);
    __syncthreads();
    rope_row(x, n_head, head_dim, half, neox, cs + (size_t)c * half, sn + (size_t)c * half);
    __syncthreads();
    cache_store(row, cc.type_k, x, cc.kv_dim);
}

extern "C" void cu_turn_keys(cu_dev *d, cu_cache c, int n_head_kv, int head_dim, int n_rot, bool neox, const int32_t *slots,
                             const float *cs, const float *sn, int n) {
    prof_begin(d);
    NC_LAUNCH(k_turn_keys, dim3((unsigned)n), dim3(128), d->stream, c, n_head_kv, head_dim, n_rot / 2, neox ? 1 : 0, slots,
              cs, sn);
    note_launch(d);
    prof_end(d, "turn_keys", 0);
}

/* The gated activations, as the CPU kernels define them (kernels_glu); with qa (F whole groups:
 * a warp's 32 elements are a group, all in or all past F) quantised for the products too. */
static __global__ void k_glu(int act, float *out, const float *g, const float *u, int F, int ldg, int step, uint8_t *qa) {
    const int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= F) return;
    float x = g[(size_t)t * ldg + (size_t)i * step], v = u[(size_t)t * ldg + (size_t)i * step], r;
    if (act == KERNELS_SILU) r = x / (1.0f + expf(-x)) * v;
    else if (act == KERNELS_GELU_TANH) r = x / (1.0f + expf(GELU_2C * (x + GELU_A * x * x * x))) * v;
    else {
        x = x < OAI_LIMIT ? x : OAI_LIMIT;
        v = v < -OAI_LIMIT ? -OAI_LIMIT : v > OAI_LIMIT ? OAI_LIMIT : v;
        r = x / (1.0f + expf(-OAI_ALPHA * x)) * (v + 1.0f);
    }
    out[(size_t)t * F + i] = r;
    if (qa) quantise_group(r, t, i / 32, gridDim.y, F, qa);
}

extern "C" bool cu_glu(cu_dev *d, int act, float *out, const float *g, const float *u, int T, int F, int ldg, int step,
                       bool quant) {
    uint8_t *qa = quant && F % 32 == 0 ? act_for(d, T, F) : NULL;
    prof_begin(d);
    NC_LAUNCH(k_glu, dim3((unsigned)((F + 255) / 256), (unsigned)T), dim3(256), d->stream, act, out, g, u, F, ldg, step, qa);
    note_launch(d);
    prof_end(d, "glu", 0);
    return qa != NULL;
}

/* ---- experts -------------------------------------------------------------------------------- */

static __global__ void k_gather(float *dst, const float *src, const int32_t *idx, int n) {
    const int r = blockIdx.x;
    const float *s = src + (size_t)idx[r] * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[(size_t)r * n + i] = s[i];
}

extern "C" void cu_gather(cu_dev *d, float *dst, const float *src, const int32_t *idx, int rows, int n) {
    prof_begin(d);
    NC_LAUNCH(k_gather, dim3((unsigned)rows), dim3(256), d->stream, dst, src, idx, n);
    note_launch(d);
    prof_end(d, "gather", 0);
}

static __global__ void k_scatter(float *dst, const float *src, const int32_t *idx, int n) {
    const int r = blockIdx.x;
    float *t = dst + (size_t)idx[r] * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) t[i] = src[(size_t)r * n + i];
}

extern "C" void cu_scatter(cu_dev *d, float *dst, const float *src, const int32_t *idx, int rows, int n) {
    prof_begin(d);
    NC_LAUNCH(k_scatter, dim3((unsigned)rows), dim3(256), d->stream, dst, src, idx, n);
    note_launch(d);
    prof_end(d, "scatter", 0);
}

/* o[t] = sum over its slots k, in order, of w[t][k] * y[row[t][k]] (fma). */
static __global__ void k_combine(float *o, const float *y, const int32_t *row, const float *w, int K, int n) {
    const int t = blockIdx.x;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) acc = fmaf(w[t * K + k], y[(size_t)row[t * K + k] * n + i], acc);
        o[(size_t)t * n + i] = acc;
    }
}

extern "C" void cu_combine(cu_dev *d, float *o, const float *y, const int32_t *row, const float *w, int T, int K, int n) {
    prof_begin(d);
    NC_LAUNCH(k_combine, dim3((unsigned)T), dim3(256), d->stream, o, y, row, w, K, n);
    note_launch(d);
    prof_end(d, "combine", 0);
}

/* ---- the KV cache and attention ------------------------------------------------------------ */

/* A block a token: its queries and keys rotated (rope: when cs is not NULL), then its keys and
 * values stored; q, k or v may be NULL (nothing of it done). */
static __global__ void k_kv_store(cu_cache cc, cu_rope rope, float *q, int ldq, int n_head, float *k, const float *v, int ld,
                                  const int32_t *cells) {
    const int t = blockIdx.x, half = rope.n_rot / 2;
    if (rope.cs) {
        const float *cs = rope.cs + (size_t)t * half, *sn = rope.sn + (size_t)t * half;
        if (q) rope_row(q + (size_t)t * ldq, n_head, rope.head_dim, half, rope.neox, cs, sn);
        if (k) rope_row(k + (size_t)t * ld, cc.kv_dim / rope.head_dim, rope.head_dim, half, rope.neox, cs, sn);
        __syncthreads(); /* the keys' rotated values, for the threads that store them */
    }
    if (k) cache_store(cc.k + (size_t)cells[t] * cache_row(cc.type_k, cc.kv_dim), cc.type_k, k + (size_t)t * ld, cc.kv_dim);
    if (v) cache_store(cc.v + (size_t)cells[t] * cache_row(cc.type_v, cc.kv_dim), cc.type_v, v + (size_t)t * ld, cc.kv_dim);
}

extern "C" void cu_kv_store(cu_dev *d, cu_cache c, const cu_rope *rope, float *q, int ldq, int n_head, float *k,
                            const float *v, int ld, int T, const int32_t *cells) {
    const cu_rope none = {1, 0, false, NULL, NULL};
    prof_begin(d);
    NC_LAUNCH(k_kv_store, dim3((unsigned)T), dim3(256), d->stream, c, rope ? *rope : none, q, ldq, n_head, k, v, ld, cells);
    note_launch(d);
    prof_end(d, rope ? "rope_store" : "kv_store", 0);
}

enum { ATT_T = 128, ATT_MAX_HEAD = 256 };

/* max (op 0) or sum (op 1) of one value per thread, in a fixed tree; every thread gets it. */
static __device__ float block_reduce(float v, float *red, int op) {
    const int tid = threadIdx.x;
    red[tid] = v;
    __syncthreads();
    for (int h = ATT_T / 2; h > 0; h >>= 1) {
        if (tid < h) red[tid] = op ? red[tid] + red[tid + h] : fmaxf(red[tid], red[tid + h]);
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

/* A block per (query head, token): the cells in spans of ATT_T, a thread per cell for the
 * scores, a thread per dimension for the weighted values, with the streaming softmax (Milakov &
 * Gimelshein 2018) across spans; every sum in a fixed order. With qa (head_dim whole groups of
 * 32: a warp's dimensions are one group), the output quantised for the products too. */
static __global__ void __launch_bounds__(ATT_T)
    k_attention(float *out, const float *q, cu_cache cc, int n_head, int head_dim, float scale, float cap,
                const float *sinks, const int32_t *vis, const int32_t *vis_off, const int32_t *vis_lo, const int32_t *n_vis,
                uint8_t *qa) {
    __shared__ float qs[ATT_MAX_HEAD];
    __shared__ float p[ATT_T];
    __shared__ float red[ATT_T];
    __shared__ int32_t cell[ATT_T];
    const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x;
    const int lo = vis_lo ? vis_lo[t] : 0, g = h / (n_head / (cc.kv_dim / head_dim));
    const size_t k_row = cache_row(cc.type_k, cc.kv_dim), v_row = cache_row(cc.type_v, cc.kv_dim);
    const int n = n_vis[t] - lo;
    const int32_t *cells = vis + vis_off[t] + lo;
    const float *qr = q + ((size_t)t * n_head + h) * head_dim;
    for (int k = tid; k < head_dim; k += ATT_T) qs[k] = qr[k];
    /* a sink (gpt-oss) is a first logit whose value vector is zero */
    float m = sinks ? sinks[h] : -INFINITY, l = sinks ? 1.0f : 0.0f, o[ATT_MAX_HEAD / ATT_T] = {0.0f, 0.0f};
    __syncthreads();
    for (int c0 = 0; c0 < n; c0 += ATT_T) {
        const int c = c0 + tid, span = n - c0 < ATT_T ? n - c0 : ATT_T;
        float s = -INFINITY;
        if (c < n) {
            cell[tid] = cells[c];
            const uint8_t *krow = cc.k + (size_t)cells[c] * k_row;
            const uint16_t *kr = (const uint16_t *)krow + (size_t)g * head_dim;
            float dot = 0.0f;
            if (cc.type_k == GGML_TYPE_F16 && head_dim % 8 == 0) { /* whole 16-byte pieces: 8 halves at a time */
                for (int k0 = 0; k0 < head_dim; k0 += 8) {
                    uint4 u = *(const uint4 *)(kr + k0);
                    uint32_t word[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                    for (int j = 0; j < 8; j++) dot = fmaf(qs[k0 + j], h2f((uint16_t)(word[j / 2] >> (16 * (j % 2)))), dot);
                }
            } else {
                for (int k = 0; k < head_dim; k++) dot = fmaf(qs[k], cache_elem(krow, cc.type_k, g * head_dim + k), dot);
            }
            s = cap > 0 ? cap * tanhf(dot * (scale / cap)) : dot * scale; /* Gemma 2's soft-capping */
        }
        float m_new = fmaxf(m, block_reduce(s, red, 0));
        float e = c < n ? expf(s - m_new) : 0.0f;
        p[tid] = e;
        float sum = block_reduce(e, red, 1); /* its barriers also publish p and cell */
        float corr = expf(m - m_new);
        l = l * corr + sum;
#pragma unroll
        for (int j = 0; j < ATT_MAX_HEAD / ATT_T; j++) {
            int k = tid + j * ATT_T;
            if (k >= head_dim) break;
            float acc = o[j] * corr;
            for (int i = 0; i < span; i++)
                acc = fmaf(p[i], cache_elem(cc.v + (size_t)cell[i] * v_row, cc.type_v, g * head_dim + k), acc);
            o[j] = acc;
        }
        m = m_new;
        __syncthreads(); /* p and cell are rewritten by the next span */
    }
    float *orow = out + ((size_t)t * n_head + h) * head_dim;
#pragma unroll
    for (int j = 0; j < ATT_MAX_HEAD / ATT_T; j++) {
        int k = tid + j * ATT_T;
        if (k >= head_dim) break; /* the same for the whole warp when qa is set */
        const float v = o[j] / l;
        orow[k] = v;
        if (qa) quantise_group(v, t, (h * head_dim + k) / 32, gridDim.y, n_head * head_dim, qa);
    }
}

extern "C" bool cu_attention(cu_dev *d, float *out, const float *q, cu_cache c, int T, int n_head, int head_dim, float scale,
                             float cap, const float *sinks, const int32_t *vis, const int32_t *vis_off,
                             const int32_t *vis_lo, const int32_t *n_vis, bool quant) {
    uint8_t *qa = quant && head_dim % 32 == 0 ? act_for(d, T, n_head * head_dim) : NULL;
    prof_begin(d);
    NC_LAUNCH(k_attention, dim3((unsigned)n_head, (unsigned)T), dim3(ATT_T), d->stream, out, q, c, n_head, head_dim, scale,
              cap, sinks, vis, vis_off, vis_lo, n_vis, qa);
    note_launch(d);
    prof_end(d, "attention", 0);
    return qa != NULL;
}
