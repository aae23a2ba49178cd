/* emulate.h: run CUDA kernels on the CPU. A .cu file compiled as C++17 with
 * `g++ -std=c++17 -x c++ -DNC_CUDA_EMULATE` includes this instead of cuda_runtime.h.
 *
 * What it emulates: the CUDA keywords; threadIdx/blockIdx/blockDim/gridDim; launches (through
 * NC_LAUNCH / NC_LAUNCH_SMEM); __syncthreads, __syncwarp, the warp shuffles and votes with
 * CUDA's semantics (masks, width sub-sections, exited threads not counting); a few intrinsics;
 * f16 conversions bit-exact with the hardware's; and a synchronous subset of the runtime API on
 * host memory (cudaMalloc is malloc, every stream and copy completes at once).
 *
 * How: a launch runs the blocks one after the other (x fastest, then y, z), on the calling OS
 * thread. Each CUDA thread of a block is a fiber with its own stack; a fiber runs until it
 * waits at a barrier or returns, then the next ready one runs. So __shared__ is simply `static`
 * (one block is alive at a time), and atomics need no atomicity.
 *
 * What it does not: no memory model and no race detection (lanes run one at a time and switch
 * only at barriers, so a missing __syncthreads or __syncwarp goes unnoticed); warp lanes are not
 * in lock-step except at the intrinsics; shared memory keeps its contents from block to block
 * (uninitialised reads go unnoticed); no concurrency between blocks, streams or host threads
 * (launch from one host thread at a time; no launch from inside a kernel); no textures,
 * cooperative groups or inline PTX (kernel.h gives the tensor cores' mma its own emulation). A
 * barrier that can never be released aborts with a message. Graphs: a stream being captured
 * records launches (their arguments evaluated at the launch, as CUDA does) and async copies, and
 * cudaGraphLaunch replays them in order.
 *
 * For kernel authors: __shared__ expands to `static`, so `extern __shared__` (use
 * NC_DYNAMIC_SHARED with NC_LAUNCH_SMEM) and `static __shared__` do not compile. A template
 * kernel with several arguments goes into NC_LAUNCH in parentheses: NC_LAUNCH((k<a, b>), ...).
 * cudaMalloc gives exactly the bytes asked for, so with -fsanitize=address overruns are caught.
 *
 * Fibers: on x86-64 ELF, a hand-written switch (callee-saved registers, MXCSR, x87 control word;
 * ~7 ns; a lane's shuffle ~35 ns) - not compatible with CET shadow stacks, should a system enforce
 * them. Elsewhere, or with -DNC_EMU_UCONTEXT, makecontext/swapcontext (a syscall per switch, ~160
 * ns: portable but slow).
 * AddressSanitizer works: the switches are announced to it. Each fiber has a NC_EMU_STACK_SIZE
 * (default 128 KiB) stack with a guard page below it, so deep recursion or a huge local array
 * faults instead of corrupting a neighbour. */
#ifndef NC_CUDA_EMULATE_H
#define NC_CUDA_EMULATE_H
#ifdef NC_CUDA_EMULATE

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <memory> /* before __noinline__ below: libstdc++'s shared_ptr uses __attribute__((__noinline__)) */
#include <functional>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && defined(__ELF__) && !defined(NC_EMU_UCONTEXT)
#define NC_EMU_ASM 1
#else
#define NC_EMU_ASM 0
#include <ucontext.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
#define NC_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NC_EMU_ASAN 1
#endif
#endif
#ifndef NC_EMU_ASAN
#define NC_EMU_ASAN 0
#endif
#if NC_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifndef NC_EMU_STACK_SIZE
#define NC_EMU_STACK_SIZE (128 * 1024)
#endif

/* ---- keywords, built-in variables, vector types --------------------------------------------- */
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#pragma GCC diagnostic ignored "-Wunknown-pragmas" /* #pragma unroll; GCC 13+ (older: -Wno-unknown-pragmas) */

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};
inline uint3 threadIdx, blockIdx; /* set by the scheduler before it resumes a thread */
inline dim3 blockDim, gridDim;
constexpr int warpSize = 32;

struct __align__(8) float2 { float x, y; };
struct __align__(16) float4 { float x, y, z, w; };
struct __align__(8) int2 { int x, y; };
struct __align__(16) int4 { int x, y, z, w; };
struct __align__(8) uint2 { unsigned x, y; };
struct __align__(16) uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }

/* ---- the runtime API's types (launch errors are reported through cudaGetLastError) ----------- */
enum cudaError {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9, cudaErrorNoDevice = 100, cudaErrorInvalidDevice = 101,
    cudaErrorStreamCaptureUnsupported = 900,
};
typedef enum cudaError cudaError_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
/* A stream being captured into a graph records its launches and copies instead of running them. */
struct CUstream_st {
    unsigned flags;
    std::vector<std::function<void()>> *capture;
};
struct CUevent_st { double ms; };
typedef CUstream_st *cudaStream_t;
typedef CUevent_st *cudaEvent_t;
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02

/* ---- the scheduler ---------------------------------------------------------------------------- */
#if NC_EMU_ASM
/* nc_emu_ctx_switch(save, to): push the callee-saved registers and the FP control words, store
 * rsp in *save, load rsp = to, pop the same from there and return into the other fiber. Weak and
 * hidden, so every translation unit may carry a copy. A new fiber "returns" into
 * nc_emu_fiber_start with r12 = its entry function and rsp 16-byte aligned. */
extern "C" void nc_emu_ctx_switch(void **save, void *to) __attribute__((visibility("hidden")));
extern "C" void nc_emu_fiber_start(void) __attribute__((visibility("hidden")));
__asm__(".ifndef nc_emu_ctx_switch\n" /* once per assembly file (LTO joins them) */
        ".pushsection .text\n"
        ".weak nc_emu_ctx_switch\n.hidden nc_emu_ctx_switch\n.type nc_emu_ctx_switch,@function\n"
        ".p2align 4\nnc_emu_ctx_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $16, %rsp\n  fnstcw (%rsp)\n  stmxcsr 8(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  fldcw (%rsp)\n  ldmxcsr 8(%rsp)\n  addq $16, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
        ".size nc_emu_ctx_switch, .-nc_emu_ctx_switch\n"
        ".weak nc_emu_fiber_start\n.hidden nc_emu_fiber_start\n.type nc_emu_fiber_start,@function\n"
        "nc_emu_fiber_start:\n  .cfi_startproc\n  .cfi_undefined rip\n  callq *%r12\n  ud2\n  .cfi_endproc\n"
        ".size nc_emu_fiber_start, .-nc_emu_fiber_start\n"
        ".popsection\n.endif\n");
#endif

namespace emu {
constexpr int kMaxThreads = 1024;
constexpr size_t kStack = (NC_EMU_STACK_SIZE + 4095) & ~(size_t)4095;
enum : uint8_t { kReady, kWaitBlock, kWaitWarp, kDone };
#if NC_EMU_ASM
struct Ctx { void *sp; };
#else
struct Ctx { ucontext_t uc; };
#endif
struct Thread {
    Ctx ctx;
    uint3 tid;
    uint64_t slot;   /* the value a lane offers to a shuffle, vote or __syncthreads_count */
    unsigned wmask;  /* the mask it waits with at a warp barrier */
    uint8_t state;
};
struct State {
    Thread thr[kMaxThreads];
    char *stack[kMaxThreads]; /* allocated on first use, kept for the process's life */
    Ctx main;
    int cur = -1, n = 0, live = 0, arrived = 0; /* running thread; threads, live ones, at __syncthreads */
    int queue[kMaxThreads], qhead = 0, qcount = 0; /* ready threads, in FIFO order */
    unsigned wlive[32], warrived[32]; /* per warp: lanes not yet returned; lanes at a warp barrier */
    uint64_t bcount = 0;              /* the nonzero slots at the last __syncthreads release */
    void (*fn)(void *) = nullptr;
    void *arg = nullptr;
    const char *kernel = "";
    char *dyn_smem = nullptr;
    size_t dyn_cap = 0;
    uint64_t mxcsr = 0x1f80, fpucw = 0x37f;
    bool in_launch = false;
#if NC_EMU_ASAN
    const void *main_bottom = nullptr;
    size_t main_size = 0;
    bool from_main = false;
#endif
};
inline State g;
inline cudaError_t last_error = cudaSuccess;

[[noreturn]] __attribute__((format(printf, 1, 2))) inline void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("nucleus CUDA emulator: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

inline void fiber_entry();
#if NC_EMU_ASM
inline void ctx_init(Ctx *c, char *stack) {
    uint64_t *r = (uint64_t *)(stack + kStack) - 3; /* the return slot: 8 mod 16 */
    r[0] = (uint64_t)(uintptr_t)&nc_emu_fiber_start;
    r[-1] = r[-2] = r[-4] = r[-5] = r[-6] = 0;      /* rbp, rbx, r13, r14, r15 */
    r[-3] = (uint64_t)(uintptr_t)&fiber_entry;      /* r12 */
    r[-7] = g.mxcsr;
    r[-8] = g.fpucw;
    c->sp = r - 8;
}
inline void ctx_swap(Ctx *from, Ctx *to) { nc_emu_ctx_switch(&from->sp, to->sp); }
#else
inline void ctx_init(Ctx *c, char *stack) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = kStack;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, &fiber_entry, 0);
}
inline void ctx_swap(Ctx *from, Ctx *to) { swapcontext(&from->uc, &to->uc); }
#endif

#if NC_EMU_ASAN
inline void asan_arrived(void *fake) {
    const void *bottom;
    size_t size;
    __sanitizer_finish_switch_fiber(fake, &bottom, &size);
    if (g.from_main) g.from_main = false, g.main_bottom = bottom, g.main_size = size;
}
#endif

/* Switch from `from` to thread `to` (-1: the scheduler); `gone`: `from` never runs again. */
inline void switch_to(Ctx *from, int to, bool gone) {
#if NC_EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(gone ? nullptr : &fake, to < 0 ? g.main_bottom : g.stack[to],
                                   to < 0 ? g.main_size : kStack);
#else
    (void)gone;
#endif
    ctx_swap(from, to < 0 ? &g.main : &g.thr[to].ctx);
#if NC_EMU_ASAN
    asan_arrived(fake);
#endif
}

inline void push(int t) {
    g.thr[t].state = kReady;
    g.queue[(g.qhead + g.qcount++) & (kMaxThreads - 1)] = t;
}
/* The running thread `me` waits (or has returned): run the next ready thread, or go back to the
 * scheduler when none is. */
inline void yield(int me, bool gone) {
    int next = -1;
    if (g.qcount) {
        next = g.queue[g.qhead];
        g.qhead = (g.qhead + 1) & (kMaxThreads - 1), g.qcount--;
        threadIdx = g.thr[next].tid;
    }
    g.cur = next;
    switch_to(&g.thr[me].ctx, next, gone);
}

inline void release_block(int me) {
    uint64_t count = me >= 0 && g.thr[me].slot != 0;
    for (int t = 0; t < g.n; t++)
        if (g.thr[t].state == kWaitBlock) count += g.thr[t].slot != 0, push(t);
    g.bcount = count;
    g.arrived = 0;
}
inline void block_sync() {
    int me = g.cur;
    if (g.arrived + 1 == g.live) return release_block(me);
    g.arrived++;
    g.thr[me].state = kWaitBlock;
    yield(me, false);
}

inline void release_warp(int w, unsigned lanes) {
    g.warrived[w] &= ~lanes;
    for (; lanes; lanes &= lanes - 1) push(w * 32 + __builtin_ctz(lanes));
}
/* A warp barrier among the live lanes of `mask` (the caller's own lane always included). */
inline void warp_sync(unsigned mask) {
    int me = g.cur, w = me >> 5;
    unsigned self = 1u << (me & 31), others = (mask | self) & g.wlive[w] & ~self;
    if ((others & ~g.warrived[w]) == 0) return release_warp(w, others);
    g.warrived[w] |= self;
    g.thr[me].wmask = mask | self;
    g.thr[me].state = kWaitWarp;
    yield(me, false);
}

[[noreturn]] inline void thread_exit() {
    int me = g.cur, w = me >> 5;
    g.thr[me].state = kDone;
    g.live--;
    g.wlive[w] &= ~(1u << (me & 31));
    if (g.arrived > 0 && g.arrived == g.live) release_block(-1);
    for (unsigned waiting = g.warrived[w]; waiting; waiting &= waiting - 1) { /* barriers now complete */
        unsigned group = g.thr[w * 32 + __builtin_ctz(waiting)].wmask & g.wlive[w];
        if ((group & ~g.warrived[w]) == 0) release_warp(w, group);
    }
    yield(me, true);
    __builtin_unreachable();
}
inline void fiber_entry() {
#if NC_EMU_ASAN
    asan_arrived(nullptr);
#endif
    g.fn(g.arg);
    thread_exit();
}

inline void deadlock() {
    int nb = 0, nw = 0, first_w = -1;
    for (int t = 0; t < g.n; t++) {
        nb += g.thr[t].state == kWaitBlock;
        if (g.thr[t].state == kWaitWarp && nw++ == 0) first_w = t;
    }
    char where[160] = "";
    if (first_w >= 0)
        snprintf(where, sizeof where, "; the first at a warp barrier is threadIdx (%u,%u,%u), mask 0x%08x",
                 g.thr[first_w].tid.x, g.thr[first_w].tid.y, g.thr[first_w].tid.z, g.thr[first_w].wmask);
    die("deadlock in kernel %s (grid %ux%ux%u, block %ux%ux%u) at blockIdx (%u,%u,%u): %d thread(s) wait "
        "at __syncthreads, %d at a warp barrier (__syncwarp, __shfl*_sync, __ballot/any/all_sync), "
        "%d returned%s",
        g.kernel, gridDim.x, gridDim.y, gridDim.z, blockDim.x, blockDim.y, blockDim.z, blockIdx.x,
        blockIdx.y, blockIdx.z, nb, nw, g.n - g.live, where);
}

inline void run_block() {
    g.live = g.n, g.arrived = 0, g.qhead = 0, g.qcount = 0;
    for (int w = 0; w < 32; w++) {
        int k = g.n - 32 * w;
        g.wlive[w] = k >= 32 ? ~0u : k > 0 ? (1u << k) - 1 : 0u;
        g.warrived[w] = 0;
    }
    for (int t = 0; t < g.n; t++) {
#if NC_EMU_ASAN
        ASAN_UNPOISON_MEMORY_REGION(g.stack[t] + kStack - 8192, 8192); /* the last run's final frames */
#endif
        ctx_init(&g.thr[t].ctx, g.stack[t]);
        push(t);
    }
    for (int t = 0; t < ((g.n + 31) & ~31); t++) g.thr[t].slot = 0;
    g.qhead = 1, g.qcount--, g.cur = 0, threadIdx = g.thr[0].tid;
#if NC_EMU_ASAN
    g.from_main = true;
#endif
    switch_to(&g.main, 0, false); /* back here when no thread is ready */
    g.cur = -1;
    if (g.live) deadlock();
}

inline void launch(const char *name, dim3 grid, dim3 block, size_t smem, void (*fn)(void *), void *arg) {
    unsigned long long n = (unsigned long long)block.x * block.y * block.z;
    if (n == 0 || n > kMaxThreads || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
        last_error = cudaErrorInvalidValue; /* what CUDA 13.0's cudaLaunchKernel said on an H200 */
        return;
    }
    if (g.in_launch) die("launch of %s inside a kernel, or from two host threads at once: unsupported", name);
    g.in_launch = true, g.kernel = name, g.fn = fn, g.arg = arg, g.n = (int)n;
    if (smem > g.dyn_cap) {
        free(g.dyn_smem);
        g.dyn_cap = (smem + 127) & ~(size_t)127;
        if (!(g.dyn_smem = (char *)aligned_alloc(128, g.dyn_cap))) die("out of memory for %zu bytes of shared memory", smem);
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (unsigned t = 0; t < n; t++) {
        if (!g.stack[t]) {
            void *p = mmap(nullptr, kStack + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) die("cannot map a %zu-byte thread stack", kStack);
            mprotect(p, page, PROT_NONE); /* the guard page */
            g.stack[t] = (char *)p + page;
        }
        g.thr[t].tid = uint3{t % block.x, t / block.x % block.y, t / (block.x * block.y)};
    }
#if NC_EMU_ASM
    uint32_t mx;
    uint16_t cw;
    __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mx), "=m"(cw));
    g.mxcsr = mx, g.fpucw = cw;
#endif
    gridDim = grid, blockDim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) blockIdx = uint3{x, y, z}, run_block();
    g.in_launch = false;
}
template <class B> void call_body(void *p) { (*static_cast<B *>(p))(); }

template <class T> T shuffle(unsigned mask, T v, int mode, int b, int width) { /* PTX shfl.sync */
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "shuffle of a 1..8-byte value");
    int me = g.cur, lane = me & 31, seg = (32 - width) & 31, bv = b & 31;
    int lo = lane & seg, hi = lo | (31 & ~seg), j;
    switch (mode) {
    case 0: j = lo | (bv & ~seg); break;                   /* idx */
    case 1: j = lane - bv >= lo ? lane - bv : lane; break; /* up */
    case 2: j = lane + bv <= hi ? lane + bv : lane; break; /* down */
    default: j = (lane ^ bv) <= hi ? lane ^ bv : lane;     /* xor */
    }
    uint64_t s = 0;
    memcpy(&s, &v, sizeof v);
    g.thr[me].slot = s;
    warp_sync(mask);
    s = g.thr[(me & ~31) | j].slot;
    warp_sync(mask);
    memcpy(&v, &s, sizeof v);
    return v;
}
inline unsigned vote(unsigned mask, int pred, unsigned *group) {
    int me = g.cur, w = me >> 5;
    g.thr[me].slot = pred != 0;
    warp_sync(mask);
    unsigned r = 0, m = *group = (mask | 1u << (me & 31)) & g.wlive[w];
    for (; m; m &= m - 1)
        if (g.thr[w * 32 + __builtin_ctz(m)].slot) r |= m & -m;
    warp_sync(mask);
    return r;
}
} // namespace emu

/* ---- launches --------------------------------------------------------------------------------- */
template <class F> void emu_launch(const char *name, dim3 grid, dim3 block, size_t smem, F &&body) {
    using B = std::remove_reference_t<F>;
    emu::launch(name, grid, block, smem, &emu::call_body<B>, const_cast<void *>(static_cast<const void *>(&body)));
}
template <class F> void emu_launch(dim3 grid, dim3 block, F &&body) {
    emu_launch("(kernel)", grid, block, 0, static_cast<F &&>(body));
}
/* On a stream being captured, the launch is recorded (its arguments copied) for cudaGraphLaunch. */
template <class F> void emu_launch_on(cudaStream_t s, const char *name, dim3 grid, dim3 block, size_t smem, F body) {
    if (s && s->capture)
        s->capture->push_back([=]() mutable { emu_launch(name, grid, block, smem, body); });
    else
        emu_launch(name, grid, block, smem, body);
}
/* The arguments are evaluated once, at the launch, as CUDA does (a captured launch keeps their
 * values, not the expressions). */
#define NC_LAUNCH(kernel, grid, block, stream, ...)                                                   \
    emu_launch_on((stream), #kernel, (grid), (block), 0,                                           \
                  [emu_k = kernel, emu_args = std::make_tuple(__VA_ARGS__)] { std::apply(emu_k, emu_args); })
/* Dynamic shared memory: launch with NC_LAUNCH_SMEM and declare it in the kernel with
 * NC_DYNAMIC_SHARED(type, name) (a `type *name`; 128-byte aligned). For nvcc define these as
 * kernel<<<grid, block, smem, stream>>>(...) and
 * extern __shared__ __align__(16) unsigned char nc_dyn_smem_[]; type *name = (type *)nc_dyn_smem_ */
#define NC_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...)                                      \
    emu_launch_on((stream), #kernel, (grid), (block), (smem),                                      \
                  [emu_k = kernel, emu_args = std::make_tuple(__VA_ARGS__)] { std::apply(emu_k, emu_args); })
#define NC_DYNAMIC_SHARED(type, name) type *name = reinterpret_cast<type *>(::emu::g.dyn_smem)

/* ---- barriers, shuffles, votes ---------------------------------------------------------------- */
inline void __syncthreads() { emu::block_sync(); }
inline int __syncthreads_count(int pred) {
    emu::g.thr[emu::g.cur].slot = pred != 0;
    emu::block_sync();
    return (int)emu::g.bcount;
}
inline int __syncthreads_or(int pred) { return __syncthreads_count(pred) != 0; }
inline int __syncthreads_and(int pred) { return __syncthreads_count(!pred) == 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_sync(mask); }
template <class T> T __shfl_sync(unsigned mask, T v, int src, int width = warpSize) { return emu::shuffle(mask, v, 0, src, width); }
template <class T> T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = warpSize) { return emu::shuffle(mask, v, 1, (int)d, width); }
template <class T> T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = warpSize) { return emu::shuffle(mask, v, 2, (int)d, width); }
template <class T> T __shfl_xor_sync(unsigned mask, T v, int m, int width = warpSize) { return emu::shuffle(mask, v, 3, m, width); }
inline unsigned __ballot_sync(unsigned mask, int pred) { unsigned grp; return emu::vote(mask, pred, &grp); }
inline int __any_sync(unsigned mask, int pred) { unsigned grp; return emu::vote(mask, pred, &grp) != 0; }
inline int __all_sync(unsigned mask, int pred) { unsigned grp, r = emu::vote(mask, pred, &grp); return r == grp; }
inline unsigned __activemask() { return emu::g.wlive[emu::g.cur >> 5]; } /* the live lanes */
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}
inline void __trap() { emu::die("__trap() in kernel %s", emu::g.kernel); }

/* ---- device functions and intrinsics ---------------------------------------------------------- */
template <class T> T __ldg(const T *p) { return *p; }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __frsqrt_rn(float x) { return (float)(1.0 / sqrt((double)x)); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : x > 0.0f ? x : 0.0f; }
inline int __float2int_rn(float x) { x = rintf(x); return x != x ? 0 : x >= 2147483648.0f ? 0x7fffffff : x <= -2147483648.0f ? (-0x7fffffff - 1) : (int)x; }
inline float __int2float_rn(int i) { return (float)i; }
template <class To, class From> To emu_bits(From f) { static_assert(sizeof(To) == sizeof(From), ""); To t; memcpy(&t, &f, sizeof t); return t; }
inline int __float_as_int(float f) { return emu_bits<int>(f); }
inline float __int_as_float(int i) { return emu_bits<float>(i); }
inline unsigned __float_as_uint(float f) { return emu_bits<unsigned>(f); }
inline float __uint_as_float(unsigned u) { return emu_bits<float>(u); }
inline long long __double_as_longlong(double d) { return emu_bits<long long>(d); }
inline double __longlong_as_double(long long l) { return emu_bits<double>(l); }
inline int __dp4a(int a, int b, int c) { /* wraps modulo 2^32 like the hardware */
    unsigned r = (unsigned)c;
    for (int i = 0; i < 32; i += 8) r += (unsigned)((int)(int8_t)(a >> i) * (int)(int8_t)(b >> i));
    return (int)r;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 32; i += 8) c += ((a >> i) & 0xff) * ((b >> i) & 0xff);
    return c;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = (x >> 1 & 0x55555555u) | (x & 0x55555555u) << 1, x = (x >> 2 & 0x33333333u) | (x & 0x33333333u) << 2;
    x = (x >> 4 & 0x0f0f0f0fu) | (x & 0x0f0f0f0fu) << 4;
    return __builtin_bswap32(x);
}
/* CUDA's min/max overloads for mixed integer types (and fminf/fmaxf for floating point) */
template <class A, class B> std::common_type_t<A, B> min(A a, B b) {
    using C = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point<C>::value) return std::fmin((C)a, (C)b); else return (C)b < (C)a ? (C)b : (C)a;
}
template <class A, class B> std::common_type_t<A, B> max(A a, B b) {
    using C = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point<C>::value) return std::fmax((C)a, (C)b); else return (C)a < (C)b ? (C)b : (C)a;
}
/* Atomics: threads never run at the same time, so a plain read-modify-write is atomic. */
#define NC_EMU_ATOMIC(T, name, expr) inline T name(T *p, T v) { T o = *p; *p = (expr); return o; }
NC_EMU_ATOMIC(int, atomicAdd, (int)((unsigned)o + (unsigned)v))
NC_EMU_ATOMIC(unsigned, atomicAdd, o + v)
NC_EMU_ATOMIC(unsigned long long, atomicAdd, o + v)
NC_EMU_ATOMIC(float, atomicAdd, o + v)
NC_EMU_ATOMIC(double, atomicAdd, o + v)
NC_EMU_ATOMIC(int, atomicSub, (int)((unsigned)o - (unsigned)v))
NC_EMU_ATOMIC(unsigned, atomicSub, o - v)
NC_EMU_ATOMIC(int, atomicMax, o < v ? v : o)
NC_EMU_ATOMIC(unsigned, atomicMax, o < v ? v : o)
NC_EMU_ATOMIC(unsigned long long, atomicMax, o < v ? v : o)
NC_EMU_ATOMIC(int, atomicMin, v < o ? v : o)
NC_EMU_ATOMIC(unsigned, atomicMin, v < o ? v : o)
NC_EMU_ATOMIC(int, atomicExch, v)
NC_EMU_ATOMIC(unsigned, atomicExch, v)
NC_EMU_ATOMIC(unsigned long long, atomicExch, v)
NC_EMU_ATOMIC(float, atomicExch, v)
NC_EMU_ATOMIC(int, atomicOr, o | v)
NC_EMU_ATOMIC(unsigned, atomicOr, o | v)
NC_EMU_ATOMIC(int, atomicAnd, o & v)
NC_EMU_ATOMIC(unsigned, atomicAnd, o & v)
#undef NC_EMU_ATOMIC
template <class T> T atomicCAS(T *p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }

/* IEEE binary16 as bits, converted as the hardware's cvt does: round to nearest even, subnormals
 * kept, overflow to infinity, every NaN to the canonical 0x7fff / 0x7fffffff. */
inline float emu_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0x1f) u = m ? 0x7fffffffu : sign | 0x7f800000u;
    else if (e) u = sign | (e + 112) << 23 | m << 13;
    else if (!m) u = sign;
    else {
        for (e = 113; !(m & 0x400); e--) m <<= 1;
        u = sign | e << 23 | (m & 0x3ff) << 13;
    }
    return emu_bits<float>(u);
}
inline uint16_t emu_float_to_half_rn(float f) {
    uint32_t x = emu_bits<uint32_t>(f), sign = (x >> 16) & 0x8000, u = x & 0x7fffffff, r, rem;
    if (u > 0x7f800000u) return 0x7fff;
    if (u >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  /* 65520 and up round to infinity */
    if (u >= 0x38800000u) {                                   /* a normal half */
        r = (u - 0x38000000u) >> 13, rem = (u & 0x1fff) << 19;
    } else if (u <= 0x33000000u) {                            /* 2^-25 or less: zero */
        return (uint16_t)sign;
    } else {                                                  /* a subnormal half */
        uint32_t shift = 126 - (u >> 23), mant = (u & 0x7fffff) | 0x800000;
        r = mant >> shift, rem = mant << (32 - shift);
    }
    r += rem > 0x80000000u || (rem == 0x80000000u && (r & 1));
    return (uint16_t)(sign | r);
}

/* ---- the runtime API ---------------------------------------------------------------------------- */
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin;
    int warpSize, maxThreadsPerBlock, multiProcessorCount, major, minor, l2CacheSize;
};
inline cudaError_t emu_ret(cudaError_t e) { return e == cudaSuccess ? e : (emu::last_error = e); }
inline const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    }
    return "cudaErrorUnknown";
}
inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    }
    return "unrecognized error code";
}
inline cudaError_t cudaGetLastError() { cudaError_t e = emu::last_error; emu::last_error = cudaSuccess; return e; }
inline cudaError_t cudaPeekAtLastError() { return emu::last_error; }
inline cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : emu_ret(cudaErrorInvalidDevice); }
inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaDeviceReset() { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), total = (size_t)sysconf(_SC_PHYS_PAGES) * page;
#ifdef _SC_AVPHYS_PAGES
    *free_b = (size_t)sysconf(_SC_AVPHYS_PAGES) * page;
#else
    *free_b = total / 2;
#endif
    *total_b = total;
    return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (d != 0) return emu_ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "nucleus CUDA emulator (CPU)");
    size_t free_b;
    cudaMemGetInfo(&free_b, &p->totalGlobalMem);
    p->sharedMemPerBlock = 48 << 10, p->sharedMemPerBlockOptin = 163 << 10;
    p->warpSize = 32, p->maxThreadsPerBlock = 1024, p->multiProcessorCount = 1;
    p->major = 8, p->minor = 0, p->l2CacheSize = 4 << 20;
    return cudaSuccess;
}
template <class F> cudaError_t cudaFuncSetAttribute(F *, cudaFuncAttribute, int) { return cudaSuccess; }
inline cudaError_t cudaMalloc(void **p, size_t n) { /* exactly n bytes, so ASan sees overruns */
    if (posix_memalign(p, 64, n ? n : 1) == 0) return cudaSuccess;
    *p = nullptr;
    return emu_ret(cudaErrorMemoryAllocation);
}
template <class T> cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
inline cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
inline cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
template <class T> cudaError_t cudaMallocHost(T **p, size_t n) { return cudaMalloc((void **)p, n); }
inline cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind) {
    if (n && (!dst || !src)) return emu_ret(cudaErrorInvalidValue);
    if (n) memmove(dst, src, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s = nullptr) {
    if (s && s->capture) {
        s->capture->push_back([=] { cudaMemcpy(dst, src, n, k); });
        return cudaSuccess;
    }
    return cudaMemcpy(dst, src, n, k);
}
inline cudaError_t cudaMemset(void *p, int v, size_t n) {
    if (n && !p) return emu_ret(cudaErrorInvalidValue);
    if (n) memset(p, v, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s = nullptr) {
    if (s && s->capture) {
        s->capture->push_back([=] { cudaMemset(p, v, n); });
        return cudaSuccess;
    }
    return cudaMemset(p, v, n);
}
template <class T> cudaError_t cudaMemcpyToSymbol(const T &sym, const void *src, size_t n, size_t off = 0, cudaMemcpyKind = cudaMemcpyHostToDevice) {
    return cudaMemcpy((char *)const_cast<T *>(&sym) + off, src, n, cudaMemcpyHostToDevice);
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    *s = new CUstream_st{flags, nullptr};
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    delete s->capture;
    delete s;
    return cudaSuccess;
}
/* Waiting on a stream being captured is an error, as in CUDA (which also ends the capture). */
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    return s && s->capture ? emu_ret(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

/* Graphs: a capture's launches and copies, replayed in order. */
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1,
                             cudaStreamCaptureModeRelaxed = 2 };
struct CUgraph_st { std::vector<std::function<void()>> ops; };
struct CUgraphExec_st { std::vector<std::function<void()>> ops; };
typedef CUgraph_st *cudaGraph_t;
typedef CUgraphExec_st *cudaGraphExec_t;
inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
    if (!s || s->capture) return emu_ret(cudaErrorInvalidValue);
    s->capture = new std::vector<std::function<void()>>;
    return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    if (!s || !s->capture) return emu_ret(cudaErrorInvalidValue);
    *g = new CUgraph_st{std::move(*s->capture)};
    delete s->capture;
    s->capture = nullptr;
    return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long = 0) {
    *e = new CUgraphExec_st{g->ops};
    return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
    if (s && s->capture) return emu_ret(cudaErrorStreamCaptureUnsupported);
    for (auto &op : e->ops) op();
    return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t g) { delete g; return cudaSuccess; }
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { *e = new CUevent_st{0}; return cudaSuccess; }
inline cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr) {
    e->ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { *ms = (float)(b->ms - a->ms); return cudaSuccess; }

#endif /* NC_CUDA_EMULATE */
#endif /* NC_CUDA_EMULATE_H */
