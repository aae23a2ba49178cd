/* The CUDA backend: the kernels layer's GPU half (src/cuda/ops.cu), reached from C through these
 * functions. Built with `make CUDA=1` or `make cuda` (nvcc); `make emu` compiles the same source
 * as C++ for the CPU with cuda/emulate.h, which runs every kernel's threads as fibers, so `make
 * test` checks the GPU code's logic on machines without a GPU.
 *
 * Every product promises what the CPU kernels promise (kernels.h): a per-row reduction order
 * that depends on nothing but the row, so a token's outputs are the same bits whatever the batch
 * holds. The quantised types give the CPU's results bit for bit: the activations are quantised as
 * the CPU's default mode does (int16 per group of 32), each weight is the integer w of its type's
 * form (tensor/quant_form.h), the integer sums of w times q are exact (one token's on the CUDA
 * cores by dp4a over q's high and low bytes; more tokens' on the tensor cores, integer
 * mma.m16n8k32 / m16n8k16 over the same bytes, or on the CUDA cores with NUCLEUS_CUDA_MMA=0), and
 * the float chain over a row's groups is kernels_impl.h's, in group order. The float types run on
 * the FMA units: lane l of a warp takes elements 8l..8l + 7 of every 256 of the row, sums their
 * products in order in f32 and adds to its sum; the lanes' sums meet in a fixed butterfly, with
 * the activations f32.
 *
 * Device memory is reached through opaque pointers; the operations are queued on the device's
 * stream in order, and cu_sync waits for them and reports the first failure. */
#ifndef NC_CUDA_H
#define NC_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cu_dev cu_dev;

/* A weight matrix in device memory, in the layout the products read: Q4_0 and Q8_0 as two
 * planes (the quants of each row's groups, 16 or 32 bytes a group, then an f16 scale per group),
 * the other quantised types as the file's blocks, F16, BF16 and F32 as dense rows. */
typedef struct cu_mat {
    uint32_t type;          /* the file's type */
    int32_t rows, cols;
    void *q;                /* quants or elements */
    void *d;                /* Q4_0 / Q8_0: the group scales, [rows][cols / 32] f16 */
    size_t bytes;
} cu_mat;

/* One layer's KV cache on the device: a row of kv_dim elements of its keys' and its values' types
 * (F32, F16, or GGML's Q8_0 / Q4_0 blocks of 32, as kv_cache.c stores rows) per pool slot. */
typedef struct cu_cache {
    uint8_t *k, *v;
    uint32_t type_k, type_v;
    int kv_dim;
} cu_cache;
#define CU_MAX_KV_DIM 8192 /* the widest rows a context shift turns */

/* Open the first device; fails with a message when there is none (or no driver). */
int cu_open(cu_dev **out, nc_err *err);
void cu_close(cu_dev *d);
/* "<name>, <N> GiB, compute <major>.<minor>" */
const char *cu_describe(const cu_dev *d);
/* Whether NUCLEUS_CUDA_PROFILE=1 asked for each operation to be timed (summed by kind and printed
 * on stderr by cu_close); callers then launch every operation rather than replay graphs. */
bool cu_profiling(const cu_dev *d);
/* Bytes of device memory free now. */
size_t cu_free_bytes(const cu_dev *d);

/* Room for the products' inputs of up to `tokens` tokens of `cols` columns (the quantised
 * products quantise their activations into it first): set before any such product (and before
 * capturing a graph), or the product fails. */
int cu_reserve(cu_dev *d, int tokens, int cols, nc_err *err);
void *cu_alloc(cu_dev *d, size_t bytes, nc_err *err);
void cu_free(cu_dev *d, void *p);
/* Copies between host and device memory, queued in order with the operations. cu_get waits. */
int cu_put(cu_dev *d, void *dst, const void *src, size_t bytes, nc_err *err);
int cu_get(cu_dev *d, void *dst, const void *src, size_t bytes, nc_err *err);
int cu_zero(cu_dev *d, void *dst, size_t bytes, nc_err *err);
/* Copy n bytes within device memory; the ranges may overlap (a cache cell moved in place). */
int cu_move(cu_dev *d, void *dst, const void *src, size_t bytes, nc_err *err);
/* Wait for everything queued; -1 with the first failure since the last call. */
int cu_sync(cu_dev *d, nc_err *err);
/* Pinned host memory, and a copy to the device queued without waiting: its source must stay as
 * it is until the next cu_sync (from pinned memory the copy runs while the host goes on). */
void *cu_host_alloc(cu_dev *d, size_t bytes, nc_err *err);
void cu_host_free(cu_dev *d, void *p);
void cu_put_async(cu_dev *d, void *dst, const void *src, size_t bytes);

/* Graphs (CUDA graphs): the operations queued between cu_capture_begin and cu_capture_end are
 * recorded instead of run; cu_graph_run queues them again, with the arguments they had, for the
 * cost of one launch. Nothing may wait on the device while capturing. */
typedef struct cu_graph cu_graph;
int cu_capture_begin(cu_dev *d, nc_err *err);
int cu_capture_end(cu_dev *d, cu_graph **out, nc_err *err);
void cu_graph_run(cu_dev *d, cu_graph *g);
void cu_graph_free(cu_graph *g);

/* Upload `rows` rows of `cols` elements of a GGUF type (row r at data + r * row_bytes). */
int cu_upload(cu_dev *d, cu_mat *m, const void *data, uint32_t type, int32_t rows, int32_t cols, size_t row_bytes,
              nc_err *err);
void cu_mat_free(cu_dev *d, cu_mat *m);

/* ---- operations (queued; failures surface in cu_sync) ---- */

/* y[t][r] = (add ? y[t][r] : 0) + scale * (sum_k w[r][k] x[t][k] + bias[r]) for t < T, r < rows;
 * ldx, ldy: floats between tokens' rows; bias may be NULL. */
void cu_mul(cu_dev *d, const cu_mat *w, const float *x, int ldx, int T, float *y, int ldy, const float *bias,
            bool add, float scale);
/* Several products of one input (Q, K and V; gate and up): what cu_mul does for each, the input
 * prepared once, or before (ready: the cu_rms_norm or cu_glu that wrote x quantised it, and
 * nothing has quantised another input since). */
typedef struct cu_out {
    const cu_mat *w;
    float *y;
    int ldy;
    const float *bias;
    bool add;
    float scale;
} cu_out;
void cu_mul_n(cu_dev *d, const float *x, int ldx, int T, const cu_out *out, int n, bool ready);
/* Whether w's products take the quantised activations: only then is it worth an operation
 * quantising what it writes for them (the quant of cu_rms_norm, cu_glu and cu_attention). */
bool cu_quantised(const cu_mat *w);
/* y[i] = RMSNorm(x[rows ? rows[i] : i]) * w for i < T, n floats a row; w NULL: a copy. quant: y
 * (T rows of n) quantised too, for a cu_mul_n of it with ready; whether it was (n whole groups of
 * 32) is returned. */
bool cu_rms_norm(cu_dev *d, float *y, const float *x, const int32_t *rows, const float *w, int n, int T, float eps,
                 bool quant);
/* Keys already in a layer's cache turned for new positions (context shift): the keys of slots
 * slots[0..n) read as floats, rotated as cu_rope says by the rows of cs / sn ([n][n_rot / 2]),
 * stored back in the cache's type. */
void cu_turn_keys(cu_dev *d, cu_cache c, int n_head_kv, int head_dim, int n_rot, bool neox, const int32_t *slots,
                  const float *cs, const float *sn, int n);
/* x[i] += scale * RMSNorm(o[i]) * w for i < T, n floats a row: a block's output through its
 * post-norm into the residual stream. */
void cu_norm_add(cu_dev *d, float *x, const float *o, const float *w, int n, int T, float eps, float scale);
/* out[t][i] = act(g[t * ldg + i * step]) * u[t * ldg + i * step] for t < T, i < F (out: [T][F]);
 * act a kernels_glu (SiLU, GELU's tanh form, gpt-oss's). step 2 reads interleaved gate/up rows.
 * quant: out quantised too, as cu_rms_norm's (when F is whole groups of 32: returned). */
bool cu_glu(cu_dev *d, int act, float *out, const float *g, const float *u, int T, int F, int ldg, int step, bool quant);
/* dst[r] = src[idx[r]], and dst[idx[r]] = src[r], for r < rows: rows of n floats (any 4-byte
 * data: the bits are copied). */
void cu_gather(cu_dev *d, float *dst, const float *src, const int32_t *idx, int rows, int n);
void cu_scatter(cu_dev *d, float *dst, const float *src, const int32_t *idx, int rows, int n);
/* o[t] = the sum over k < K, in order, of w[t][k] * y[row[t][k]] (fma; rows of n floats): the
 * experts' outputs of each token weighted. */
void cu_combine(cu_dev *d, float *o, const float *y, const int32_t *row, const float *w, int T, int K, int n);
/* Bytes of a cache row of n elements of `type`. */
size_t cu_row_bytes(uint32_t type, int n);
/* Copy rows of `bytes` bytes: row r of src (src_idx[r] when not NULL) to row r of dst (dst_idx[r]). */
void cu_rows(cu_dev *d, void *dst, const void *src, const int32_t *dst_idx, const int32_t *src_idx, int rows,
             size_t bytes);
/* Rotary position embedding: the first n_rot dimensions of each head (head_dim floats apart) of
 * T tokens rotated by the table cs / sn ([T][n_rot / 2] cos and sin): pairs (2i, 2i + 1), or
 * (i, i + n_rot / 2) when neox. */
typedef struct cu_rope {
    int head_dim, n_rot;
    bool neox;
    const float *cs, *sn;
} cu_rope;
/* Store the keys and values of T tokens (kv_dim floats each, ld apart) into slots cells[t] of a
 * layer's cache, in its types (rounded or quantised as kv_cache.c does); with rope (else NULL),
 * the queries q (n_head heads, ldq floats apart) and the keys are rotated in place first: a
 * decode's three operations in one launch. q, k or v may be NULL: nothing of it is done. */
void cu_kv_store(cu_dev *d, cu_cache c, const cu_rope *rope, float *q, int ldq, int n_head, float *k, const float *v, int ld,
                 int T, const int32_t *cells);
/* Attention of T query tokens: token t attends to cells vis_lo[t]..n_vis[t] - 1 (vis_lo NULL:
 * from 0; a sliding window) of its list vis + vis_off[t] (cache slots, in position order) with
 * the softmax of scale * q.k over them, soft-capped to cap * tanh(scale * q.k / cap) when cap > 0,
 * with one more logit sinks[head] whose value is zero when sinks is not NULL (gpt-oss); n_head
 * query heads share each of n_head_kv key heads; q and out: [T][n_head * head_dim]. quant: out
 * quantised too, as cu_rms_norm's (when head_dim is whole groups of 32: returned). */
bool cu_attention(cu_dev *d, float *out, const float *q, cu_cache c, int T, int n_head, int head_dim, float scale,
                  float cap, const float *sinks, const int32_t *vis, const int32_t *vis_off, const int32_t *vis_lo,
                  const int32_t *n_vis, bool quant);

#ifdef __cplusplus
}
#endif

#endif
