/* Run-time choice of the kernel set: on x86-64 cpuid says what the CPU has, xgetbv whether the
 * OS saves the wider registers; on AArch64 the auxiliary vector's HWCAP says whether SDOT is
 * there (ASIMD always is). NUCLEUS_ISA may cap the choice. The AVX-512 set needs F, BW, VL, DQ
 * and VNNI (its file is compiled with all of them); the AVX-VNNI set, AVX2 and AVX-VNNI (the
 * VEX-encoded one, CPUID.(EAX=7,ECX=1):EAX[4]); AMX is never used. The NEON set is built
 * three times (kernels_neon.c; kernels_neon_dot.c with SDOT; kernels_neon_i8mm.c with SDOT and
 * I8MM): the same results, the one the CPU can run taken. */
#include "kernels/kernels.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_impl.h"

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

/* -1 until kernels_init() has run; then the kernels_isa in force. */
static _Atomic int active_isa = -1;

#if defined(__x86_64__)
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Whether the CPU has AVX-VNNI (which the best set, AVX-512, need not). */
static bool has_avx_vnni(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}

static kernels_isa detect_isa(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return KERNELS_SCALAR;
    bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12), f16c = c & (1u << 29);
    if (!osxsave || !avx || !fma || !f16c) return KERNELS_SCALAR;
    uint64_t xcr0 = read_xcr0();
    if ((xcr0 & 0x6) != 0x6) return KERNELS_SCALAR; /* SSE and AVX state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return KERNELS_SCALAR;
    if (!(b & (1u << 5))) return KERNELS_SCALAR; /* AVX2 */
    bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
    bool vnni = c & (1u << 11);
    bool zmm_state = (xcr0 & 0xE0) == 0xE0; /* opmask, upper ZMM0-15, ZMM16-31 */
    if (f && dq && bw && vl && vnni && zmm_state) return KERNELS_AVX512;
    return has_avx_vnni() ? KERNELS_AVXVNNI : KERNELS_AVX2;
}

static int rank(kernels_isa isa) {
    static const int r[KERNELS_ISA_COUNT] = {[KERNELS_SCALAR] = 0, [KERNELS_AVX2] = 1, [KERNELS_AVXVNNI] = 2,
                                             [KERNELS_AVX512] = 3};
    return r[isa];
}

/* The best set up to want, in the order scalar < AVX2 < AVX-VNNI < AVX-512 (a CPU with AVX-512
 * may lack AVX-VNNI: then AVX2 is the one below); a NEON request is no cap. */
static kernels_isa cap(kernels_isa want) {
    kernels_isa have = detect_isa();
    if (want == KERNELS_NEON || rank(want) >= rank(have)) return have;
    return want == KERNELS_AVXVNNI && !has_avx_vnni() ? KERNELS_AVX2 : want;
}
#elif defined(__aarch64__)
static kernels_isa detect_isa(void) { return getauxval(AT_HWCAP) & HWCAP_ASIMD ? KERNELS_NEON : KERNELS_SCALAR; }

/* Scalar < NEON; a request for an x86 set is no cap. */
static kernels_isa cap(kernels_isa want) { return want == KERNELS_SCALAR ? KERNELS_SCALAR : detect_isa(); }

/* The NEON set's build for the CPU: with SDOT (FEAT_DotProd) for the int8 products, and I8MM
 * (FEAT_I8MM) for the matmul's. */
static const kernels_ops *neon_ops(void) {
    if (!(getauxval(AT_HWCAP) & HWCAP_ASIMDDP)) return &kernels_neon_ops;
    return getauxval(AT_HWCAP2) & HWCAP2_I8MM ? &kernels_neon_i8mm_ops : &kernels_neon_dot_ops;
}
#else
static kernels_isa detect_isa(void) { return KERNELS_SCALAR; }
static kernels_isa cap(kernels_isa want) { return KERNELS_SCALAR; }
#endif

static kernels_isa env_cap(void) {
    const char *s = getenv("NUCLEUS_ISA");
    if (!s) return KERNELS_AVX512;
    if (!strcmp(s, "scalar")) return KERNELS_SCALAR;
    if (!strcmp(s, "avx2")) return KERNELS_AVX2;
    if (!strcmp(s, "avxvnni")) return KERNELS_AVXVNNI;
    if (!strcmp(s, "neon")) return KERNELS_NEON;
    return KERNELS_AVX512;
}

void kernels_init(void) {
    /* Detection is pure, so racing first calls store the same value. */
    if (atomic_load_explicit(&active_isa, memory_order_acquire) < 0)
        atomic_store_explicit(&active_isa, (int)cap(env_cap()), memory_order_release);
}

kernels_isa kernels_active(void) {
    kernels_init();
    return (kernels_isa)atomic_load_explicit(&active_isa, memory_order_acquire);
}

const char *kernels_name(void) {
    static const char *const names[] = {"scalar", "avx2", "avx512", "neon", "avxvnni"};
    return names[kernels_active()];
}

kernels_isa kernels_force(kernels_isa isa) {
    kernels_isa got = cap(isa);
    atomic_store_explicit(&active_isa, (int)got, memory_order_release);
    return got;
}

static const kernels_ops *ops(void) {
    switch (kernels_active()) {
#if defined(__x86_64__)
    case KERNELS_AVX512: return &kernels_avx512_ops;
    case KERNELS_AVX2: return &kernels_avx2_ops;
    case KERNELS_AVXVNNI: return &kernels_avxvnni_ops;
#elif defined(__aarch64__)
    case KERNELS_NEON: return neon_ops();
#endif
    default: return &kernels_scalar_ops;
    }
}

int kernels_int_type(uint32_t type) { return type < GGML_TYPE_COUNT && kernels_scalar_ops.q[type].matvec != NULL; }

int kernels_int8_type(uint32_t type) { return kernels_int_type(type) && int_takes_i8(type); }

size_t kernels_act_bytes(kernels_act fmt, int cols) { return act_row_bytes(fmt, cols); }

/* Groups [g0, g1) of a token's int16 integers q into its byte planes p and their high bytes' sums
 * (act_planes). Written so that the compiler vectorises it (restrict parameters; >> 8 is
 * arithmetic in GCC and Clang): a verification pass quantises some 200,000 activations per layer. */
static void planes_of(const int16_t *restrict q, uint8_t *restrict p, int32_t *restrict hsum, int g0, int g1) {
    for (int g = g0; g < g1; g++) {
        const int16_t *qg = q + 32 * g;
        uint8_t *lo = p + 64 * (size_t)g;
        int32_t h = 0;
        for (int k = 0; k < 32; k++) {
            lo[k] = (uint8_t)qg[k];
            lo[32 + k] = (uint8_t)(qg[k] >> 8);
            h += qg[k] >> 8;
        }
        hsum[g] = h;
    }
}

static void split_planes(void *xq, int cols, int g0, int g1) {
    uint8_t *p = (uint8_t *)act_planes(xq, cols);
    planes_of(xq, p, (int32_t *)(void *)(p + 2 * (size_t)cols), g0, g1);
}

void kernels_quantize_act(kernels_act fmt, const float *x, int cols, void *dst) {
    kernels_quantize_act_part(fmt, x, cols, 0, cols / 32, dst);
}

void kernels_quantize_act_part(kernels_act fmt, const float *x, int cols, int g0, int g1, void *dst) {
    ops()->quantize_act(fmt, x, cols, g0, g1, dst);
    if (fmt == KERNELS_ACT_I16) split_planes(dst, cols, g0, g1);
}

size_t kernels_mul_scratch_bytes(void) { return KERNELS_MUL_SCRATCH; }

/* T tokens' int8 activations as int16 (the same integers and groups): what the types without int8
 * kernels are handed. */
static void *widen_act(const uint8_t *xq, int T, int cols) {
    size_t s8 = act_row_bytes(KERNELS_ACT_I8, cols), s16 = act_row_bytes(KERNELS_ACT_I16, cols);
    uint8_t *w = aligned_alloc(64, s16 * (size_t)T);
    if (!w) abort();
    memset(w, 0, s16 * (size_t)T);
    for (int t = 0; t < T; t++) {
        const int8_t *q8 = (const int8_t *)(xq + s8 * (size_t)t);
        int16_t *q16 = (int16_t *)(w + s16 * (size_t)t);
        for (int i = 0; i < cols; i++) q16[i] = q8[i];
        memcpy((void *)act_groups(q16, KERNELS_ACT_I16, cols), act_groups(q8, KERNELS_ACT_I8, cols),
               (size_t)cols / 32 * sizeof(act_group));
        split_planes(q16, cols, 0, cols / 32);
    }
    return w;
}

int kernels_ilv_type(uint32_t type) {
    size_t q0, qn;
    return type < 64 && ilv_region(type, &q0, &qn) && (ops()->ilv_types >> type & 1);
}

/* Rows [r0, r1) of interleaved weights put back in order, the tiles holding them 128 rows at a
 * time, then the rows' kernels (the same integers, so the same results): where the set has no
 * kernel for the product, and for the rows of a tile cut by r0 or r1. */
static void ilv_unpacked(uint32_t type, const uint8_t *W, int cols, kernels_act fmt, const void *xq, int T, float *Y,
                         int ldy, int r0, int r1, int add, void *scratch) {
    enum { N = 128 };
    size_t rb = quant_row_bytes(type, cols);
    uint8_t *rows = aligned_alloc(64, N * rb);
    if (!rows) abort();
    for (int a = r0 / KERNELS_ILV_ROWS * KERNELS_ILV_ROWS; a < r1; a += N) {
        int b = a + N < r1 ? a + N : (r1 + KERNELS_ILV_ROWS - 1) / KERNELS_ILV_ROWS * KERNELS_ILV_ROWS;
        int lo = a > r0 ? a : r0, hi = b < r1 ? b : r1;
        ilv_deinterleave(type, W + (size_t)a * rb, rows, b - a, cols);
        kernels_mul(type, rows, rb, cols, NULL, fmt, xq, T, Y + (lo - r0), ldy, lo - a, hi - a, add, scratch);
    }
    free(rows);
}

/* Rows [r0, r1) of interleaved weights: whole tiles by the set's kernel, the cut ones unpacked. */
static void mul_interleaved(uint32_t type, const uint8_t *W, int cols, kernels_act fmt, const void *xq, int T,
                            float *Y, int ldy, int r0, int r1, int add, void *scratch) {
    const kernels_ops *o = ops();
    int a = (r0 + KERNELS_ILV_ROWS - 1) / KERNELS_ILV_ROWS * KERNELS_ILV_ROWS, b = r1 / KERNELS_ILV_ROWS * KERNELS_ILV_ROWS;
    if (a >= b) {
        ilv_unpacked(type, W, cols, fmt, xq, T, Y, ldy, r0, r1, add, scratch);
        return;
    }
    if (r0 < a) ilv_unpacked(type, W, cols, fmt, xq, T, Y, ldy, r0, a, add, scratch);
    if (o->ilv_mul && (o->ilv_types >> type & 1))
        o->ilv_mul(type, W, cols, fmt, xq, T, Y + (a - r0), ldy, a, b, add, scratch);
    else
        ilv_unpacked(type, W, cols, fmt, xq, T, Y + (a - r0), ldy, a, b, add, scratch);
    if (b < r1) ilv_unpacked(type, W, cols, fmt, xq, T, Y + (b - r0), ldy, b, r1, add, scratch);
}

void kernels_mul(uint32_t type, const void *W, size_t row_bytes, int cols, const float *x, kernels_act fmt,
                 const void *xq, int T, float *Y, int ldy, int r0, int r1, int add, void *scratch) {
    const kernels_ops *o = ops();
    if (r0 >= r1 || T <= 0) return;
    if (!kernels_int_type(type & ~KERNELS_ILV)) {
        if (T == 1) o->matvec(type, W, row_bytes, cols, x, Y, r0, r1, add);
        else o->matmul(type, W, row_bytes, cols, x, T, Y, ldy, r0, r1, add);
        return;
    }
    void *wide = NULL, *own = NULL;
    if (fmt == KERNELS_ACT_I8 && !int_takes_i8(type & ~KERNELS_ILV)) {
        xq = wide = widen_act(xq, T, cols);
        fmt = KERNELS_ACT_I16;
    }
    if (type & KERNELS_ILV) {
        if (!scratch && !(scratch = own = aligned_alloc(64, KERNELS_MUL_SCRATCH))) abort();
        mul_interleaved(type & ~KERNELS_ILV, W, cols, fmt, xq, T, Y, ldy, r0, r1, add, scratch);
    } else if (T == 1) {
        o->q[type].matvec(W, row_bytes, cols, fmt, xq, Y, r0, r1, add);
    } else {
        if (!scratch && !(scratch = own = aligned_alloc(64, KERNELS_MUL_SCRATCH))) abort(); /* only a broken heap */
        o->q[type].matmul(W, row_bytes, cols, fmt, xq, T, Y, ldy, r0, r1, add, scratch);
    }
    free(own);
    free(wide);
}

/* The f32 entry points quantise integer types' activations to the default format first. */
static void *quantize_tokens(const float *X, int T, int cols) {
    size_t rb = act_row_bytes(KERNELS_ACT_I16, cols);
    uint8_t *q = aligned_alloc(64, rb * (size_t)T);
    if (!q) abort();
    for (int t = 0; t < T; t++) kernels_quantize_act(KERNELS_ACT_I16, X + (size_t)t * cols, cols, q + rb * (size_t)t);
    return q;
}

void kernels_matvec(uint32_t type, const void *W, size_t row_bytes, int cols, const float *x,
                    float *y, int r0, int r1) {
    if (!kernels_int_type(type)) {
        ops()->matvec(type, W, row_bytes, cols, x, y, r0, r1, 0);
        return;
    }
    void *q = quantize_tokens(x, 1, cols);
    ops()->q[type].matvec(W, row_bytes, cols, KERNELS_ACT_I16, q, y, r0, r1, 0);
    free(q);
}

void kernels_matmul(uint32_t type, const void *W, size_t row_bytes, int cols, const float *X, int T,
                    float *Y, int ldy, int r0, int r1) {
    if (!kernels_int_type(type)) {
        ops()->matmul(type, W, row_bytes, cols, X, T, Y + r0, ldy, r0, r1, 0);
        return;
    }
    void *q = quantize_tokens(X, T, cols);
    kernels_mul(type, W, row_bytes, cols, NULL, KERNELS_ACT_I16, q, T, Y + r0, ldy, r0, r1, 0, NULL);
    free(q);
}

void kernels_mix(uint32_t type, const void *A, size_t row_bytes, int K, int N, const float *X, int ldx, int R, float *Y,
                 int ldy) {
    if (R > 0 && N > 0) ops()->mix(type, A, row_bytes, K, N, X, ldx, R, Y, ldy);
}

void kernels_rms_norm(float *out, const float *x, const float *w, int n, float eps) {
    ops()->rms_norm(out, x, w, n, eps);
}

void kernels_glu_act(kernels_glu act, float *out, const float *g, const float *u, int n) {
    ops()->glu(act, out, g, u, n);
}

void kernels_softcap(float *x, int n, float scale, float cap) { ops()->softcap(x, n, scale, cap); }

float kernels_softmax_span(float *p, int n, float scale, float *max) { return ops()->softmax_span(p, n, scale, max); }

void kernels_f32_to_f16(uint16_t *dst, const float *src, int n) { ops()->f32_to_f16(dst, src, n); }

void kernels_dequantize(uint32_t type, const void *src, float *dst, int n) { ops()->dequantize(type, src, dst, n); }

uint64_t kernels_read(const void *p, size_t n) { return ops()->read(p, n); }
