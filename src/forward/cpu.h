/* The CPU backend's own state (backend.h's operations on the CPU kernels, cpu*.c), shared by its
 * files. Each operation is one or two jobs on the thread pool, split into chunks the threads claim:
 * products by ranges of rows (a head's rows where the heads are finished as they are made:
 * norm, rotation and the cache write in the same chunk), attention by blocks of one sequence's
 * queries and one group of query heads, the experts by (expert, range of rows). RMSNorm and the
 * quantisation of activations happen where their input is complete: for a few tokens each thread
 * normalises its own copy before its first chunk (no barrier), for more a job of its own does it
 * once. */
#ifndef NC_FWD_CPU_H
#define NC_FWD_CPU_H

#include "forward/forward.h"
#include "threads/pool.h"

/* Cells per step of the streaming softmax (a sliding layer's ring is a multiple of it), the most
 * query tokens of one sequence attended together (their keys and values read once), and the most
 * query heads per KV head. */
#define CPU_ATTN_SPAN KV_BLOCK
#define CPU_ATTN_BLOCK 16
#define CPU_MAX_GROUP 256

/* Micro-batches of at most this many tokens normalise per thread. */
#define CPU_PRIVATE_T 4

/* Scratch of one thread. */
typedef struct cpu_thread {
    float *xn;                       /* a private normalised input, [CPU_PRIVATE_T][widest input] */
    uint8_t *xq;                     /* its quantisation */
    void *pack;                      /* kernels_mul scratch */
    float *gate, *up;                /* one chunk's products, [n_batch][chunk rows] */
    /* attention of one block of queries (CPU_ATTN_BLOCK tokens x group heads = R rows) */
    float *attn_q;                   /* [R][head_dim] the queries */
    float *scores;                   /* [R][CPU_ATTN_SPAN] weights of one span */
    float *attn_part;                /* [R][head_dim] one span's share of the output; a DeltaNet head's recall */
    float *attn_max;                 /* [R] running maxima */
    double *attn_sum;                /* [R] running sums */
    float *kv_keys, *kv_values;      /* a span of a quantised cache dequantised (kv_span_keys / _values),
                                        NULL when the cache holds floats */
    uint64_t *attn_score;            /* [CPU_ATTN_SPAN] one span's attention weights (H2O's scores) */
    float *heads;                    /* a head's inputs gathered (mul_heads), [n_batch][widest] and their quantisation */
} cpu_thread;

/* The experts' scratch: the rows of a micro-batch's routing (fwd_moe), gathered. */
typedef struct cpu_moe {
    int32_t *chunks;                 /* (expert, first output row) of each chunk of an expert job */
    float *in;                       /* [rows][n_embd] gathered inputs, and quantised */
    uint8_t *inq;
    float *act;                      /* [rows][n_ff_exp] activations, and quantised */
    uint8_t *actq;
    float *out;                      /* [rows][n_embd] expert outputs */
    float *gate_up;                  /* [n_threads][n_batch][2 * chunk rows] fused products */
} cpu_moe;

typedef struct cpu_state {
    pool *pool;
    float *buf[FB_COUNT];            /* the activations ([n_batch][width]; FB_X, FB_ROUTER and FB_LOGITS
                                        are the host's arrays) */
    uint8_t *bufq[FB_COUNT];         /* their int16 quantisations, where products may need them */
    int32_t max_chunk;               /* rows of the largest chunk of a product into scratch */
    cpu_thread *thr;                 /* [n_threads] */
    int32_t *attn_blocks, n_attn_blocks; /* starts of the query blocks of the micro-batch (+ end) */
    cpu_moe moe;
    float *lora_u;                   /* [n_batch][model.lora_rank] the LoRA adapters' low-rank inputs */
} cpu_state;

static inline cpu_state *cpu_of(const fwd_state *s) { return s->cpu; }

/* Token t's row of a view, and its quantisation. */
static inline float *cpu_row(const fwd_state *s, fwd_view v, int t) {
    return cpu_of(s)->buf[v.buf] + v.off + (size_t)t * v.ld;
}
/* Token t's quantised row of a view holding rows of `cols` floats (from its first float):
 * kernels_act_bytes(int16, cols) apart, as the products read them. */
static inline uint8_t *cpu_qrow(const fwd_state *s, fwd_view v, int t, int cols) {
    return cpu_of(s)->bufq[v.buf] + (size_t)t * kernels_act_bytes(KERNELS_ACT_I16, cols);
}

/* Rows per chunk of a product of `rows` outputs: about eight chunks per thread, a multiple of 32. */
int32_t cpu_chunk_rows(int rows, int n_threads);

/* Rows [r0, r1) of w times T input rows (f32 X; Xq quantised as fmt) into Y (ldy apart), added
 * to it when add. */
void cpu_weight_mul(const model_weight *w, const float *X, kernels_act fmt, const uint8_t *Xq, int T, float *Y, int ldy,
                    int r0, int r1, bool add, void *scratch);

/* cpu_attention.c, cpu_experts.c, cpu_elementwise.c, cpu_recurrent.c */
bool cpu_attend(fwd_state *s, const fwd_attn *a, int T);
void cpu_attn_blocks(fwd_state *s, const nc_batch_entry *e, int T);
int cpu_experts(fwd_state *s, const fwd_experts *x, nc_err *err);
int cpu_experts_init(fwd_state *s, nc_err *err);
void cpu_experts_free(fwd_state *s);
void cpu_ew(fwd_state *s, const fwd_ew *e, int T);
void cpu_conv(fwd_state *s, const fwd_conv *c, int T);
void cpu_scan(fwd_state *s, const fwd_scan *c, int T);

#endif
