/* nucleus — a small, fast LLM inference engine. This header is the library's whole contract:
 * the CLI and the server use nothing else.
 *
 * Conventions: functions that can fail return 0 on success and -1 on failure, filling an nc_err
 * whose message names the problem (file offset, field, limit). Nothing here prints or exits. */
#ifndef NUCLEUS_H
#define NUCLEUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NC_ERR_MAX 512
typedef struct nc_err {
    char msg[NC_ERR_MAX];
} nc_err;

/* ---- Models ---------------------------------------------------------------------------- */

typedef struct nc_model nc_model;

/* Open a GGUF model: validates the file, binds every tensor (mmapped, not copied) and loads the
 * tokenizer. Architectures: llama, qwen2. Element types: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K. */
int nc_model_load(nc_model **out, const char *path, nc_err *err);
void nc_model_free(nc_model *m);

typedef struct nc_model_info {
    const char *arch;          /* "llama" or "qwen2" */
    const char *name;          /* general.name, or "" */
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_rot, n_ctx_train;
    float rope_freq_base, norm_eps;
    bool rope_neox;            /* rotates the two halves of a head (qwen2) rather than pairs */
    uint64_t n_params;         /* weights in all tensors */
    uint64_t weight_bytes;     /* bytes of tensor data */
    uint64_t decode_bytes;     /* weight bytes one decode step reads (layers and output matrix) */
    uint64_t file_bytes;
} nc_model_info;
void nc_model_get_info(const nc_model *m, nc_model_info *info);

/* Print a GGUF file's metadata (long arrays abbreviated) and tensor table; the file may be any
 * valid GGUF (vocab-only, other architectures). */
int nc_inspect(const char *path, FILE *out, nc_err *err);

/* The kernel set chosen for this CPU ("avx512", "avx2", "scalar"). */
const char *nc_kernels_name(void);

/* This machine's memory read bandwidth with n_threads threads (bytes/s, best of a few passes
 * over a 1 GiB buffer): the ceiling of decoding is bandwidth / decode_bytes tokens/s. */
double nc_measure_read_bandwidth(int n_threads);

/* ---- Tokenizer ------------------------------------------------------------------------- */

int32_t nc_token_bos(const nc_model *m);     /* -1 when the vocabulary has none */
int32_t nc_token_eos(const nc_model *m);
bool nc_token_is_eog(const nc_model *m, int32_t id);  /* end of generation (EOS, end of turn) */
bool nc_vocab_adds_bos(const nc_model *m);

/* Tokenize text. add_special: BOS/EOS as the vocabulary asks; parse_special: text such as
 * "<s>" becomes its control token. Returns the token count (if > cap, only cap were written and
 * the caller should retry with a larger buffer), or -1 with err set. */
int nc_tokenize(const nc_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                int32_t *out, int cap, nc_err *err);

/* A vocabulary without a model: vocab-only GGUF files work too. */
typedef struct nc_vocab_file nc_vocab_file;
int nc_vocab_file_load(nc_vocab_file **out, const char *path, nc_err *err);
void nc_vocab_file_free(nc_vocab_file *v);
int nc_vocab_file_tokenize(const nc_vocab_file *v, const char *text, size_t len, bool add_special,
                           bool parse_special, int32_t *out, int cap, nc_err *err);

/* Streaming detokenizer: text comes out only when it ends on a complete UTF-8 character. */
typedef struct nc_detok nc_detok;
nc_detok *nc_detok_new(const nc_model *m);
void nc_detok_free(nc_detok *d);
/* Append a token; returns the number of bytes of completed text written to out. When that is
 * more than cap, nothing was written nor consumed: call again with a buffer that large. */
int nc_detok_push(nc_detok *d, int32_t token, char *out, int cap);
/* Text still held back (an incomplete character becomes U+FFFD); cap >= 8. */
int nc_detok_flush(nc_detok *d, char *out, int cap);

/* ---- Inference ------------------------------------------------------------------------- */

typedef struct nc_context nc_context;

typedef struct nc_context_params {
    int32_t n_ctx;        /* cells per sequence (0: min(model's training context, 4096)) */
    int32_t n_seq_max;    /* sequences the KV cache holds (0: 1) */
    int32_t n_threads;    /* 0: all online cores */
    int32_t n_batch;      /* tokens per internal micro-batch (0: 512) */
    bool kv_f32;          /* keep the KV cache in F32 instead of F16 */
} nc_context_params;

int nc_context_new(nc_context **out, nc_model *m, const nc_context_params *p, nc_err *err);
void nc_context_free(nc_context *c);
int32_t nc_context_n_ctx(const nc_context *c);
int32_t nc_context_n_threads(const nc_context *c);

/* One entry of a batch: the token at a position of a sequence, and whether its logits are
 * wanted. A batch may mix sequences and holds any number of tokens (prefill, decode, or both). */
typedef struct nc_batch_entry {
    int32_t token;
    int32_t pos;
    int32_t seq;
    bool logits;
} nc_batch_entry;

/* Run the model over a batch, appending its keys and values to the KV cache. Positions of a
 * sequence must continue where the sequence's cache ends. */
int nc_forward(nc_context *c, const nc_batch_entry *batch, int n, nc_err *err);

/* Logits of the i-th entry of the last batch that asked for logits (n_vocab floats), else NULL. */
const float *nc_logits(const nc_context *c, int i);

/* KV cache management. Positions are per sequence. */
int32_t nc_kv_seq_len(const nc_context *c, int32_t seq);        /* cells in use */
void nc_kv_seq_clear(nc_context *c, int32_t seq);
/* Keep only the first n_keep cells of a sequence. */
void nc_kv_seq_truncate(nc_context *c, int32_t seq, int32_t n_keep);
/* Make dst a copy of src's cache (shared prompts, beams). */
int nc_kv_seq_copy(nc_context *c, int32_t src, int32_t dst, nc_err *err);
uint64_t nc_kv_bytes_per_token(const nc_context *c);  /* all layers, keys and values */
uint64_t nc_kv_bytes_total(const nc_context *c);

/* ---- Sampling -------------------------------------------------------------------------- */

/* xoshiro256** seeded through splitmix64: the same seed gives the same stream everywhere. */
typedef struct nc_rng {
    uint64_t s[4];
} nc_rng;
void nc_rng_seed(nc_rng *r, uint64_t seed);
uint64_t nc_rng_next(nc_rng *r);
double nc_rng_uniform(nc_rng *r);  /* [0, 1) with 53 random bits */

/* Highest logit (lowest id on ties). */
int32_t nc_sample_greedy(const float *logits, int32_t n);
/* Softmax(logits / temp) then one draw; temp <= 0 means greedy. */
int32_t nc_sample_temperature(const float *logits, int32_t n, float temp, nc_rng *rng);

#ifdef __cplusplus
}
#endif
#endif
