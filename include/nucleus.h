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

/* The library is compiled with hidden visibility: what this header declares is what
 * libnucleus.so exports. */
#pragma GCC visibility push(default)

#define NC_ERR_MAX 512
typedef struct nc_err {
    char msg[NC_ERR_MAX];
} nc_err;

/* ---- Models ---------------------------------------------------------------------------- */

typedef struct nc_model nc_model;

/* Open a model: a GGUF file or a Hugging Face directory (config.json, safetensors, tokenizer).
 * Validates it, binds every tensor (mmapped, not copied) and loads the tokenizer. Architectures
 * and element types: docs/models.md; an unsupported one is an error naming it. */
int nc_model_load(nc_model **out, const char *path, nc_err *err);
void nc_model_free(nc_model *m);

/* Apply a LoRA adapter (Hu et al. 2021) to the model: a GGUF file in llama.cpp's adapter form
 * (general.type "adapter", adapter.type "lora", adapter.lora.alpha, tensors NAME.lora_a [inputs,
 * rank] and NAME.lora_b [rank, outputs] for the weights NAME it adapts). Each product of such a
 * weight becomes W x + s B (A x), s = scale * alpha / rank (scale alone without alpha); adapters
 * add up. Before the model's first context; the CPU backend only; a GGUF model only. On failure
 * the model is unchanged and err names the key, tensor or shape. */
int nc_model_add_lora(nc_model *m, const char *path, float scale, nc_err *err);
/* Adapters applied so far. */
int32_t nc_model_n_lora(const nc_model *m);

typedef struct nc_model_info {
    const char *arch;          /* the architecture ("llama", "qwen3", "gemma3", ...) */
    const char *name;          /* general.name, or "" */
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_rot, n_ctx_train;
    float rope_freq_base, norm_eps;
    bool rope_neox;            /* rotates the two halves of a head (qwen2) rather than pairs */
    int32_t n_expert, n_expert_used; /* mixture of experts (0: a dense FFN) */
    int32_t swa_window;        /* sliding-window layers see this many positions (0: none) */
    uint64_t n_params;         /* weights in all tensors */
    uint64_t weight_bytes;     /* bytes of tensor data */
    uint64_t decode_bytes;     /* weight bytes one decode step reads (layers and output matrix) */
    uint64_t file_bytes;
} nc_model_info;
void nc_model_get_info(const nc_model *m, nc_model_info *info);
/* A string of the model file's metadata, e.g. "tokenizer.chat_template": it points into the
 * mapped file, is not NUL-terminated and lives as long as the model. NULL when the key is absent
 * or its value is not a string. */
const char *nc_model_meta_str(const nc_model *m, const char *key, size_t *len);

/* The metadata as llama.cpp's llama_model_meta_* functions give it: every key of the model file
 * whose value is not an array, in the file's order, with its value as text (integers in decimal,
 * floats as "%f", booleans "true" / "false", strings as they are). A Hugging Face directory has
 * one: its chat template. nc_model_meta_key: the i-th key (NUL-terminated, living as long as the
 * model), NULL for i outside 0..count-1. nc_model_meta_value: its value into buf, returning the
 * length (nothing is written when that is > cap), -1 for i outside. */
int32_t nc_model_meta_count(const nc_model *m);
const char *nc_model_meta_key(const nc_model *m, int32_t i);
int nc_model_meta_value(const nc_model *m, int32_t i, char *buf, int cap);

/* Print a GGUF file's metadata (long arrays abbreviated) and tensor table; the file may be any
 * valid GGUF (vocab-only, other architectures). A Hugging Face directory: its config.json, weight
 * files and tensors. */
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
/* The bytes of one token, control tokens as their text ("<|im_end|>"): returns the length
 * (nothing is written when it is > cap), or -1 for an id outside the vocabulary. */
int nc_token_piece(const nc_model *m, int32_t id, char *buf, int cap);

/* The text of ids as llama.cpp's detokenize gives it: the pieces one after the other, control
 * tokens as their text when special and empty otherwise, the first piece without its leading
 * space when the tokenizer adds a space prefix. Returns the length (when it is > cap, the
 * caller should retry with a buffer that large), or -1 for an id outside the vocabulary. */
int nc_detokenize(const nc_model *m, const int32_t *ids, int n, bool special, char *out, int cap);

/* Tokenize text. add_special: BOS/EOS as the vocabulary asks; parse_special: text such as
 * "<s>" becomes its control token. Returns the token count (if > cap, only cap were written and
 * the caller should retry with a larger buffer), or -1 with err set. */
int nc_tokenize(const nc_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                int32_t *out, int cap, nc_err *err);

/* A vocabulary without a model: a GGUF file (vocab-only files work too), a Hugging Face
 * tokenizer.json, or a directory holding one. */
typedef struct nc_vocab_file nc_vocab_file;
int nc_vocab_file_load(nc_vocab_file **out, const char *path, nc_err *err);
void nc_vocab_file_free(nc_vocab_file *v);
int nc_vocab_file_tokenize(const nc_vocab_file *v, const char *text, size_t len, bool add_special,
                           bool parse_special, int32_t *out, int cap, nc_err *err);
/* The bytes of one token, as nc_token_piece gives them. */
int nc_vocab_file_piece(const nc_vocab_file *v, int32_t id, char *buf, int cap);

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

/* Element types of the KV cache, as llama.cpp names them (--cache-type-k / --cache-type-v):
 * f16, f32, and GGML's q8_0 / q4_0 blocks (32 elements and an f16 scale: 34 / 18 bytes per 32),
 * which take about half / a quarter of f16's memory and move the log-probabilities further from
 * the exact ones (docs/correctness.md). The quantised types need a head_dim that is a multiple of
 * 32; nc_context_new refuses them for other models. NC_CACHE_DEFAULT is the model's default: f16,
 * or f32 for an architecture whose attention F16's rounding moves far (Gemma 4: q and k
 * RMS-normed and not scaled down, so a key's rounding reaches the logits whole);
 * nc_context_cache_types says what a context chose. */
typedef enum nc_cache_type { NC_CACHE_DEFAULT = 0, NC_CACHE_F16, NC_CACHE_F32, NC_CACHE_Q8_0, NC_CACHE_Q4_0 } nc_cache_type;

typedef struct nc_context_params {
    int32_t n_ctx;        /* cells per sequence (0: min(model's training context, 4096)) */
    int32_t n_seq_max;    /* sequences the KV cache holds (0: 1) */
    int64_t kv_cells;     /* the KV cache's pool, shared by all sequences, in tokens
                             (0: n_seq_max * n_ctx, room for every sequence to fill its context) */
    int32_t n_threads;    /* 0: all online cores */
    int32_t n_batch;      /* tokens per internal micro-batch (0: 512) */
    nc_cache_type type_k; /* the KV cache's keys (0: the model's default) */
    nc_cache_type type_v; /* and values (0: the model's default) */
    bool swa_full;        /* sliding-window layers keep every position, not a ring of their window
                             (more memory; a ring can only save or keep what it still holds) */
    bool fast;            /* int8 activations for Q8_0/Q4_0 weights' normalised inputs (faster prefill) */
    int32_t n_gpu_layers; /* layers on the first CUDA GPU, the last ones (llama.cpp's -ngl): 0 none; N: the last
                             N with the output projection and their part of the KV cache, the CPU running
                             the others; -1 (or n_layer and more): every layer; needs a build with the
                             CUDA backend (make CUDA=1) */
} nc_context_params;

int nc_context_new(nc_context **out, nc_model *m, const nc_context_params *p, nc_err *err);
void nc_context_free(nc_context *c);
int32_t nc_context_n_ctx(const nc_context *c);
int32_t nc_context_n_threads(const nc_context *c);
/* Where the forward pass runs: "cpu", or the GPU's name, memory and what it holds. */
const char *nc_context_device(nc_context *c);

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
/* The final hidden state of the same entry (n_embd floats): the residual stream after the final
 * norm, the input of the output projection (transformers' hidden_states[-1]), else NULL. */
const float *nc_hidden(const nc_context *c, int i);

/* KV cache management. Positions are per sequence.
 *
 * The cache is a pool of blocks of NC_KV_BLOCK cells shared by every sequence (paged, as vLLM's
 * PagedAttention): a sequence holds the blocks its cells need, nc_forward fails with a message
 * naming the pool when none is left (nc_kv_blocks_needed / nc_kv_blocks_available let a caller
 * plan around that). Copies share blocks, copy-on-write. The blocks of prompts that started at
 * position 0 stay cached after their sequence lets go of them, found again by a hash of their
 * tokens (least recently used ones are reclaimed first): nc_kv_seq_reuse_prefix. */
#define NC_KV_BLOCK 256
int32_t nc_kv_seq_len(const nc_context *c, int32_t seq);        /* cells in use */
/* The token of each cell in use (after a context shift, not the sequence's whole text); NULL for
 * an unknown sequence. Valid until the sequence changes. */
const int32_t *nc_kv_seq_tokens(const nc_context *c, int32_t seq);
/* The position after its last cell's (0 when empty): where its next token goes, past the gaps a
 * compression window leaves (nc_kv_seq_set_budget keeps positions). */
int32_t nc_kv_seq_pos_next(const nc_context *c, int32_t seq);
void nc_kv_seq_clear(nc_context *c, int32_t seq);
/* Keep only the first n_keep cells of a sequence. */
void nc_kv_seq_truncate(nc_context *c, int32_t seq, int32_t n_keep);
/* Make dst a copy of src's cache (shared prompts, beams). */
int nc_kv_seq_copy(nc_context *c, int32_t src, int32_t dst, nc_err *err);
/* An empty sequence takes the longest cached prefix of tokens[0..n), at positions 0..: returns
 * the number of tokens it now holds, whose keys and values need no computing. Pass n - 1 for a
 * prompt whose last token's logits are wanted. Same tokens, same results: a cached cell holds
 * exactly what computing it again would. 0 when the model keeps sliding layers in rings. */
int32_t nc_kv_seq_reuse_prefix(nc_context *c, int32_t seq, const int32_t *tokens, int32_t n);
/* Keep only the cells cells[0..n) (increasing) of a sequence, which become its cells 0..n-1 at
 * positions new_pos[0..n) (increasing); their keys are rotated for the new positions (RoPE), so
 * the sequence goes on as if those tokens had always been there: context shift, attention sinks
 * and compression windows are policies over this. */
int nc_kv_seq_keep(nc_context *c, int32_t seq, const int32_t *cells, int32_t n, const int32_t *new_pos, nc_err *err);

/* Eviction policies over nc_kv_seq_keep, for a sequence whose context is full. Both keep the
 * first cells and the most recent ones and leave the positions of a sequence whose cell i held
 * position i (as nc_generate and the server make them) at 0..len-1 again, so its next token goes
 * at position nc_kv_seq_len. n_discard 0 drops each policy's own share (below).
 *
 * Context shift (llama.cpp's): keep the first n_keep cells, drop the n_discard after them (0:
 * half of the cells after n_keep), and move the rest back n_discard positions. */
int nc_kv_seq_shift(nc_context *c, int32_t seq, int32_t n_keep, int32_t n_discard, nc_err *err);
/* Attention sinks (StreamingLLM, Xiao et al. 2023): keep the first n_sink cells (the "sinks" that
 * models attend to whatever they hold) and the most recent ones, dropping the n_discard oldest
 * after the sinks (0: a quarter of the cells after the sinks, at least one); the kept cells take
 * their places in the cache as positions. */
int nc_kv_seq_sink(nc_context *c, int32_t seq, int32_t n_sink, int32_t n_discard, nc_err *err);

/* What generation does when a sequence's context is full. */
typedef enum nc_ctx_mode {
    NC_CTX_STOP,   /* end the sequence: NC_FINISH_CONTEXT */
    NC_CTX_SHIFT,  /* context shift: keep the first tokens of the prompt, drop half of the rest */
    NC_CTX_SINKS,  /* attention sinks: keep n_sink first tokens and a window of recent ones */
} nc_ctx_mode;

typedef struct nc_ctx_policy {
    nc_ctx_mode mode;
    int32_t n_keep;  /* NC_CTX_SHIFT: prompt tokens kept, besides the BOS the prompt starts with, which
                        is always kept (llama.cpp's --keep); -1: the whole prompt */
    int32_t n_sink;  /* NC_CTX_SINKS: first tokens kept, >= 1 (StreamingLLM uses 4) */
} nc_ctx_policy;

/* Whether the policy can run in a context of n_ctx cells for a prompt of n_prompt tokens
 * (bos_first: the prompt starts with the BOS token): an unknown mode, a count out of range, or a
 * kept part that leaves nothing to evict (a context shift drops half of at least two cells) is
 * refused, naming the field. */
int nc_ctx_policy_check(const nc_ctx_policy *p, int32_t n_ctx, int32_t n_prompt, bool bos_first, nc_err *err);
/* Whether the context's model can drop tokens as the policy would: a context shift or attention
 * sinks are refused on a model with recurrent layers (their state holds every token seen). */
int nc_ctx_policy_supported(const nc_context *c, const nc_ctx_policy *p, nc_err *err);
/* Apply the policy to a sequence whose first n_prompt tokens are its prompt: nc_kv_seq_shift or
 * nc_kv_seq_sink with their own shares. Returns the number of cells dropped (0 for NC_CTX_STOP),
 * or -1 with err set. */
int32_t nc_kv_seq_make_room(nc_context *c, int32_t seq, const nc_ctx_policy *p, int32_t n_prompt, nc_err *err);

/* Compression windows: a budget of cells a sequence keeps. After every nc_forward, a sequence
 * holding more than `budget` cells keeps `budget` of them, always its `recent` most recent, and
 * lets the others go; their positions stay (attention masks by position, so the gaps change
 * nothing but what is seen), so the caller goes on at the positions of the text. The rest of the
 * budget goes to:
 *   NC_KV_WINDOW  nothing else: the last `budget` cells (recent is ignored);
 *   NC_KV_SINKS   the first budget - recent cells, StreamingLLM's attention sinks (Xiao et al.
 *                 2023, arXiv:2309.17453);
 *   NC_KV_H2O     the budget - recent cells that have received the most attention, summed over
 *                 every later query, head and layer: the Heavy-Hitter Oracle (Zhang et al. 2023,
 *                 arXiv:2306.14048), with one set of tokens for all heads and layers (the paper
 *                 keeps one per head). The forward pass adds up the attention only for sequences
 *                 under H2O, at the cost of a second pass over their keys.
 * A query sees at most budget + the tokens of its batch: the context must hold them (budget is at
 * most n_ctx - 1; a long prompt can go in batches of up to n_ctx - budget tokens). A budget belongs
 * to the sequence id (copies do not take it) and holds until set again; NC_KV_NONE removes it. */
typedef enum nc_kv_policy { NC_KV_NONE, NC_KV_WINDOW, NC_KV_SINKS, NC_KV_H2O } nc_kv_policy;
int nc_kv_seq_set_budget(nc_context *c, int32_t seq, nc_kv_policy policy, int32_t budget, int32_t recent, nc_err *err);
/* The attention each cell of a sequence has received while under H2O (a softmax weight of 1 from
 * each query head of each layer that saw it), for its first min(cap, length) cells: returns its
 * length. */
int32_t nc_kv_seq_attention(const nc_context *c, int32_t seq, double *out, int32_t cap);
/* Blocks the pool must provide for n more tokens of seq, and the blocks it can provide now. */
int32_t nc_kv_blocks_needed(const nc_context *c, int32_t seq, int32_t n);
int32_t nc_kv_blocks_available(const nc_context *c);
uint64_t nc_kv_bytes_per_token(const nc_context *c);  /* keys and values of the layers keeping every token */
uint64_t nc_kv_bytes_total(const nc_context *c);      /* the whole cache (sliding layers keep only their window,
                                                         recurrent layers their state) */
/* The recurrent state of one sequence (gated DeltaNet, Mamba2, short convolutions: a fixed size,
 * whatever the context), 0 for attention-only models. Such models refuse context shifts,
 * attention sinks and compression windows (their state holds every token seen): nc_kv_seq_keep
 * says so. A sequence truncated to an earlier position goes back to the latest checkpoint of its
 * state at or before it, and the tokens from there are computed again (the same bits). */
uint64_t nc_kv_state_bytes(const nc_context *c);
/* Whether the model's attention caches a latent per token (multi-head latent attention, whose
 * keys hold the values) and the type it is kept in: f32 when f16 is asked, since the latent is
 * read by every head through the absorbed projections and F16's rounding of it moves the
 * log-probabilities by more than a whole head's keys would. */
bool nc_kv_latent_type(const nc_context *c, nc_cache_type *type);
/* The key and value types a context keeps (NC_CACHE_DEFAULT resolved). */
void nc_context_cache_types(const nc_context *c, nc_cache_type *k, nc_cache_type *v);

typedef struct nc_kv_stats {
    int32_t n_blocks, used, cached, free;  /* pool blocks: held by sequences, cached for reuse, empty */
    uint64_t lookups, hits;                /* nc_kv_seq_reuse_prefix calls, and those that reused tokens */
    uint64_t tokens_looked_up, tokens_reused;
    uint64_t evictions;                    /* cached blocks reclaimed */
} nc_kv_stats;
void nc_kv_get_stats(const nc_context *c, nc_kv_stats *out);

/* Saving a sequence's cache to a file and loading it back (docs/kv-cache.md). The
 * file holds a fingerprint of the model (architecture, hyper-parameters, a sample of every
 * weight), the cache's shape and key and value types, the cells' tokens and positions, their keys and
 * values as the cache stores them, and a checksum; a file from another model or cache, truncated
 * or corrupt, is refused with a message naming the file and what is wrong, before the cache is
 * touched. Loaded cells are what computing their tokens gives, and like computed ones they stay
 * in the prefix cache when their sequence lets go of them: nc_generate and nc_beam_search take a
 * prompt loaded into sequence 0 from there (not cells nc_kv_seq_keep had moved).
 *
 * Save the first n cells of seq (n <= 0: all of them) to path, atomically (a temporary file
 * beside it, synced, then renamed over it). Sliding-window layers kept in rings can only save
 * the positions their ring still holds: a context with swa_full saves any. *bytes (may be
 * NULL): the file's size. */
int nc_kv_seq_save(nc_context *c, int32_t seq, int32_t n, const char *path, uint64_t *bytes, nc_err *err);

typedef struct nc_kv_file nc_kv_file;
/* Open and check a saved cache for use with this context (its model, shape, key and value types). */
int nc_kv_file_open(nc_kv_file **out, nc_context *c, const char *path, nc_err *err);
void nc_kv_file_close(nc_kv_file *f);
typedef struct nc_kv_file_info {
    int32_t n_tokens;
    const int32_t *tokens;  /* the saved cells' tokens (valid until nc_kv_file_close) */
    uint64_t n_bytes;       /* the file's size */
} nc_kv_file_info;
void nc_kv_file_get_info(const nc_kv_file *f, nc_kv_file_info *info);
/* Replace seq's cells with the file's first n cells (0 <= n <= n_tokens), into the context the
 * file was opened for. More cells than the context's n_ctx are refused with the sequence as it
 * was; a pool that runs out of blocks half-way leaves the sequence empty. */
int nc_kv_file_load(nc_kv_file *f, int32_t seq, int32_t n, nc_err *err);

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

/* ---- Decoding: the sampler chain, stop rules, generation, beam search --------------------- */

/* A JSON Schema as a GBNF grammar (for nc_sampler_params.grammar) generating JSON text valid
 * against it (docs/structured-output.md lists the keywords supported and refused). The rule for
 * the schema's value is named root_name (NULL: "root"); every other rule it emits is named
 * root_name followed by '-', so conversions with different root names can be concatenated into
 * one grammar beside rules of the caller's own. Whitespace: between two JSON tokens at most one
 * optional blank, a space or a newline followed by up to 16 spaces or tabs (none before the value
 * or after it), so even a random model cannot loop for ever on blanks. "{}" gives any JSON value,
 * {"type":"object"} any JSON object. *gbnf is malloc'd (free it); on failure the error names the
 * keyword and where it is (a JSON pointer). */
int nc_json_schema_to_grammar(const char *schema_json, const char *root_name, char **gbnf, nc_err *err);
/* Whether GBNF text parses (as nc_sampler_new would compile it), without a model: -1 with the
 * error (line:column and the problem) when not. For checking a request before it is queued. */
int nc_grammar_check(const char *gbnf, nc_err *err);
/* nc_grammar_check, and that some token of m's vocabulary can begin a sentence of the grammar
 * (a JSON grammar cannot be followed by a vocabulary without '{'). */
int nc_grammar_check_model(const nc_model *m, const char *gbnf, nc_err *err);

/* A sampler turns one row of logits plus the history of the sequence into the next token. It is
 * a chain of small stages, each transforming the candidate list (id, logit, probability) in
 * place; their order is data (`samplers`). Default order:
 *   penalties;dry;no_repeat_ngram;logit_bias;temperature;top_n_sigma;top_k;typ_p;top_p;min_p;xtc
 * then a seeded draw; with a grammar (`grammar`), its stage runs before all of them. A stage
 * whose parameter is neutral is left out, so with the defaults the
 * chain is penalties -> logit bias -> temperature -> top-k -> top-p -> min-p -> sample (the
 * penalties stage appears once a penalty is set). With Mirostat the truncation stages are left
 * out and Mirostat makes the draw, as in llama.cpp. `infill` (llama.cpp's fill-in-the-middle
 * stage: ends the fill when ending is likely, merges tokens whose texts start alike, keeps the
 * likely ones) runs only where `samplers` names it, and reads token texts from the model, which
 * must then outlive the sampler. The state of a sampler (generator, Mirostat's
 * mu, explain record) is its own: one per sequence, stepping alongside any number of others. */

typedef struct nc_logit_bias {
    int32_t token;
    float bias;  /* added to the logit; -INFINITY bans the token */
} nc_logit_bias;

typedef enum nc_logprobs_mode {
    NC_LOGPROBS_RAW,        /* log-softmax of the model's logits */
    NC_LOGPROBS_PROCESSED,  /* log of the distribution the token was drawn from */
} nc_logprobs_mode;

#define NC_LOGPROBS_MAX 20

typedef struct nc_sampler_params {
    uint64_t seed;
    float temp;                 /* logits / temp; 0 keeps only the most likely token (greedy) */
    float dynatemp_range;       /* 0: off; llama.cpp's dynamic temperature: T in [temp - range, temp + range]
                                   from the normalised entropy H / ln n of the step's distribution */
    float dynatemp_exponent;    /* T = T_min + (T_max - T_min) * (H / ln n)^exponent (default 1) */
    int32_t top_k;              /* 0: off */
    float top_p;                /* 1: off; ties at the boundary go to the lower token id */
    float min_p;                /* 0: off; keep p >= min_p * p_max */
    float typical_p;            /* 1: off; locally typical sampling (Meister et al., 2023) */
    float top_n_sigma;          /* <= 0: off; keep logit >= max - n * stddev (Tang et al., 2024) */
    float epsilon_cutoff;       /* 0: off; keep p >= epsilon (Hewitt et al., 2022), below 1 */
    float eta_cutoff;           /* 0: off; keep p >= min(eta, sqrt(eta) * exp(-entropy)), below 1 */
    int32_t min_keep;           /* truncation stages keep at least this many (and at least 1) */
    float repeat_penalty;       /* 1: off; CTRL: positive logits divided, negative multiplied */
    int32_t repeat_last_n;      /* history window of the three penalties; -1: all, 0: off */
    float frequency_penalty;    /* OpenAI: logit -= count * frequency + (count > 0) * presence */
    float presence_penalty;
    int32_t no_repeat_ngram;    /* 0: off; Hugging Face's no_repeat_ngram_size */
    float dry_multiplier;       /* 0: off; DRY (p-e-w), llama.cpp semantics */
    float dry_base;
    int32_t dry_allowed_length;
    int32_t dry_penalty_last_n; /* -1: all, 0: off */
    const char *const *dry_breakers;  /* strings; a token whose text contains one breaks a repeat */
    int32_t n_dry_breakers;
    float xtc_probability;      /* 0: off; XTC (p-e-w), llama.cpp semantics */
    float xtc_threshold;        /* > 0.5: off */
    int32_t mirostat;           /* 0: off, 1: Mirostat, 2: Mirostat 2.0 (Basu et al., 2021) */
    float mirostat_tau, mirostat_eta;
    const nc_logit_bias *logit_bias;
    int32_t n_logit_bias;
    int32_t min_tokens;         /* end-of-generation tokens are banned before this many are made */
    bool ignore_eos;            /* end-of-generation tokens are always banned */
    const char *samplers;       /* stage order, names separated by ';' or ','; NULL: default */
    int32_t n_logprobs;         /* alternatives reported per token, 0..NC_LOGPROBS_MAX */
    nc_logprobs_mode logprobs_mode;
    bool explain;               /* keep a record of what every stage did (nc_sampler_explain) */
    const char *grammar;        /* GBNF text (llama.cpp's format); NULL or "": none. The stage
                                   `grammar` then runs first: every token whose text cannot continue
                                   the grammar is set to -inf, end-of-generation tokens are allowed
                                   only where the grammar can be complete; where nothing else can
                                   follow they alone remain, overriding min_tokens and ignore_eos
                                   (docs/structured-output.md) */
} nc_sampler_params;

/* llama.cpp's defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_last_n 64,
 * dry_base 1.75, dry_allowed_length 2, dry_penalty_last_n -1, breakers "\n" ":" "\"" "*",
 * xtc_threshold 0.1, mirostat_tau 5, mirostat_eta 0.1, dynatemp_exponent 1; everything else off,
 * seed 0. */
void nc_sampler_params_default(nc_sampler_params *p);
/* Refuse out-of-range values with a message naming the field and the allowed range. */
int nc_sampler_params_check(const nc_sampler_params *p, nc_err *err);

typedef struct nc_sampler nc_sampler;

/* n_vocab: the length of a logits row. m may be NULL: then end-of-generation bans (min_tokens,
 * ignore_eos), DRY sequence breakers and a grammar, which need the vocabulary, are refused. A
 * grammar that does not parse fails here with its error (line:column and the problem). The
 * grammar's state follows the history: each step it consumes the generated tokens
 * (history[n_prompt..n_history)) it has not seen, starting over when the history is not an
 * extension of what it consumed (a rollback, another sequence). */
int nc_sampler_new(nc_sampler **out, const nc_model *m, int32_t n_vocab, const nc_sampler_params *p, nc_err *err);
void nc_sampler_free(nc_sampler *s);
/* Restart the generator from seed and Mirostat's mu from 2 * tau. */
void nc_sampler_reset(nc_sampler *s, uint64_t seed);
/* The chain as built, e.g. "temperature 0.8 -> top-k 40 -> top-p 0.95 -> min-p 0.05 -> dist". */
const char *nc_sampler_describe(const nc_sampler *s);

typedef struct nc_token_logprob {
    int32_t token;
    float logprob;
} nc_token_logprob;

typedef struct nc_sample_info {
    int32_t token;
    float p;               /* its probability in the distribution it was drawn from */
    float logprob;         /* its log-probability, per logprobs_mode */
    int32_t n_top;         /* min(n_logprobs, tokens with a probability) */
    nc_token_logprob top[NC_LOGPROBS_MAX];  /* most probable first, lower id first on ties */
} nc_sample_info;

/* Run the chain over one row of logits and draw a token. history: the tokens before this one
 * (the prompt, then what was generated), of which the first n_prompt are the prompt. info may
 * be NULL. */
int32_t nc_sampler_sample(nc_sampler *s, const float *logits, const int32_t *history, int32_t n_history,
                          int32_t n_prompt, nc_sample_info *info);
/* The last draw found no token that continues the grammar, the grammar incomplete: it drew an
 * end-of-generation token, and the text cannot be a sentence of the grammar. */
bool nc_sampler_grammar_stuck(const nc_sampler *s);

typedef struct nc_token_prob {
    int32_t token;
    float p;
} nc_token_prob;

/* The distribution the chain produces, without drawing (Mirostat's own truncation is not
 * applied): writes up to cap (token, p) pairs, most probable first; returns how many tokens it
 * holds. Random stages (XTC) consume the generator as nc_sampler_sample would. */
int32_t nc_sampler_apply(nc_sampler *s, const float *logits, const int32_t *history, int32_t n_history,
                         int32_t n_prompt, nc_token_prob *out, int32_t cap);

#define NC_EXPLAIN_STAGES 16
#define NC_EXPLAIN_TOP 8

typedef struct nc_explain_stage {
    char name[24];        /* "top-p" */
    double param;         /* the stage's main parameter (p, k, T, penalty ...) */
    int32_t n_before, n_after;  /* candidates in and out */
    double mass;          /* probability of what was kept, under the stage's input distribution */
    char what[160];       /* one line for people: "top-p 0.90: kept 12 of 40, mass 0.903" */
} nc_explain_stage;

typedef struct nc_explain {
    int32_t n_stages;
    nc_explain_stage stage[NC_EXPLAIN_STAGES];  /* the chain's stages, then the draw */
    int32_t token;        /* the chosen token */
    float p;              /* its probability in the final distribution */
    int32_t n_candidates; /* size of the final distribution */
    int32_t n_top;
    nc_token_prob top[NC_EXPLAIN_TOP];  /* its most probable tokens */
} nc_explain;

/* The record of the last nc_sampler_sample call when params.explain was set, else NULL. */
const nc_explain *nc_sampler_explain(const nc_sampler *s);

/* Stop rules. The end-of-generation set (nc_token_is_eog) always stops. */
typedef enum nc_finish {
    NC_FINISH_NONE,     /* still going */
    NC_FINISH_STOP,     /* end-of-generation token, stop token id or stop string */
    NC_FINISH_LENGTH,   /* max_tokens */
    NC_FINISH_CONTEXT,  /* the context is full (and no context policy makes room) */
    NC_FINISH_GRAMMAR,  /* the grammar could not go on: no token of the vocabulary continues it */
} nc_finish;
/* "", "stop", "length", and "length" for a full context too (OpenAI's finish_reason); "grammar",
 * which OpenAI has not (the server answers an error instead). */
const char *nc_finish_name(nc_finish f);

typedef struct nc_stop_params {
    int32_t max_tokens;            /* 0: no limit but the context */
    const char *const *stop;       /* stop strings: matched across tokens, never emitted */
    int32_t n_stop;
    const int32_t *stop_ids;       /* tokens that stop like end-of-generation (not emitted) */
    int32_t n_stop_ids;
} nc_stop_params;

/* The stop checker and text stream of one sequence: turns tokens into text that is safe to show
 * (complete UTF-8 characters, no part of a possible stop string). */
typedef struct nc_stopper nc_stopper;
int nc_stopper_new(nc_stopper **out, const nc_model *m, const nc_stop_params *p, nc_err *err);
void nc_stopper_free(nc_stopper *s);
/* Account for one generated token. Returns NC_FINISH_NONE to go on, else why the sequence ended;
 * *text (valid until the next call) and *n_text receive the text to show now. */
nc_finish nc_stopper_push(nc_stopper *s, int32_t token, const char **text, int32_t *n_text);
int32_t nc_stopper_n_tokens(const nc_stopper *s);  /* tokens pushed */

/* ---- Chats ---------------------------------------------------------------------------------- */

/* The model's chat template (`tokenizer.chat_template`, run by our Jinja interpreter as
 * transformers' apply_chat_template runs it, with the vocabulary's BOS and EOS texts), or ChatML
 * when the model has none or it cannot be parsed: note (may be NULL with note_cap 0) then says
 * which, else it is "". */
typedef struct nc_chat_template nc_chat_template;
int nc_chat_template_new(nc_chat_template **out, const nc_model *m, char *note, size_t note_cap, nc_err *err);
/* A template given as Jinja source (e.g. a server's --chat-template file) instead of the model's:
 * an error, not ChatML, when it cannot be parsed. */
int nc_chat_template_from_source(nc_chat_template **out, const nc_model *m, const char *src, size_t len, nc_err *err);
void nc_chat_template_free(nc_chat_template *t);
/* messages_json: a JSON array of {"role", "content"} objects. *text (malloc'd, *len bytes) is
 * the conversation, ending with the assistant's turn opened when add_generation_prompt; tokenize
 * it with special tokens parsed, adding a BOS when *add_bos (the vocabulary wants one and the
 * template did not write it). extra_json (may be NULL): a JSON object whose members become
 * variables of the template too, e.g. {"tools": [...]}. */
int nc_chat_render(const nc_chat_template *t, const char *messages_json, const char *extra_json,
                   bool add_generation_prompt, char **text, size_t *len, bool *add_bos, nc_err *err);
/* The Jinja source in use (the model's, a given one, or ChatML's). */
const char *nc_chat_template_source(const nc_chat_template *t);
/* A render is bounded in steps, memory and time (a template that loops for ever fails with an
 * error). nc_chat_template_cancel, from any thread, makes the renders running now and every later
 * one fail soon with "the render was cancelled" (a server that shuts down calls it). */
void nc_chat_template_cancel(nc_chat_template *t);

/* Reading a chat reply as `nucleus serve` reads it (the same code; docs/chat-formats.md): the
 * model's reasoning, its answer and its tool calls, each family's markers recognised from the
 * template's text. Whole (done), or while it streams (done false): then reasoning and content are
 * prefixes of the whole reply's, never more, so a consumer shows what each grew by; what may
 * still become a call or a marker is held back, and calls are read only when done. */
typedef struct nc_reply_params {
    const char *prompt;        /* the rendered prompt the reply follows, or NULL: whether it opened
                                  the reasoning (Qwen3.5's and DeepSeek R1's end with "<think>"),
                                  or a recipient (Functionary v3.2's ends with ">>>") */
    size_t prompt_len;
    const char *tools_json;    /* the request's tools, OpenAI's array (their parameters' types say
                                  what a bare-text argument is); NULL: no calls are looked for */
    bool parallel_tool_calls;  /* false: what follows the first call is content */
    bool keep_reasoning;       /* reasoning_format "none": the reasoning stays in content */
} nc_reply_params;

typedef struct nc_chat_reply {
    char *reasoning;       /* malloc'd, NUL-terminated; "" when none */
    char *content;         /* "" when none (the text before the calls and what they did not take) */
    char *tool_calls;      /* a JSON array as OpenAI's message.tool_calls: [{"id": "call_…", "type":
                              "function", "function": {"name", "arguments" (JSON text)}}]; "[]" */
    size_t n_reasoning, n_content;
    int32_t n_tool_calls;
} nc_chat_reply;

/* Split text[0..n) generated after a prompt of template t. -1 only when out of memory. */
int nc_chat_reply_parse(const nc_chat_template *t, const nc_reply_params *p, const char *text, size_t n, bool done,
                        nc_chat_reply *out, nc_err *err);
void nc_chat_reply_free(nc_chat_reply *r);
/* The assistant message's field the template renders earlier reasoning from ("reasoning_content";
 * gpt-oss's "thinking"): pass a reply's reasoning back under it (or leave it out, as the template
 * drops it anyway); NULL when the template writes no reasoning that nucleus separates. */
const char *nc_chat_reasoning_field(const nc_chat_template *t);

/* Autoregressive generation of n_samples continuations of one prompt: the prompt is prefilled
 * once into sequence 0 (the part the prefix cache holds, e.g. a chat's earlier turns, is taken
 * from it) and its cache copied to sequences 1..n_samples-1 (the context needs
 * n_seq_max >= n_samples); every step runs all unfinished sequences in one nc_forward call.
 * Sample i draws with seed + i. When a sample's context is full, `context` decides: by default
 * it ends (NC_FINISH_CONTEXT); a context shift or attention sinks (nc_kv_seq_make_room) make room
 * and it goes on until max_tokens, an end of generation or a stop rule (with max_tokens 0, for
 * ever unless the callback aborts). The samplers' history (penalties, DRY, n-grams) stays the
 * whole text whatever the cache forgot. */
/* Speculative decoding: each step, a cheap proposer guesses up to draft_max next tokens, the
 * model checks them all in one forward pass, and the tokens drawn are those the model's sampler
 * chain would have drawn without them: greedy decoding gives the same tokens, sampling the same
 * distribution (the rejection rule of Leviathan et al. 2023 / Chen et al. 2023 against the
 * chain's distribution). Rejected guesses leave both caches. The proposer is a draft model
 * sharing the model's vocabulary (its context needs n_seq_max for every sequence generated,
 * positions as long as the model's), or else prompt lookup: the tokens that followed the latest
 * earlier occurrence of the last n tokens (n = lookup_ngram down to 1) in the prompt and history.
 * The number of tokens proposed adapts to the acceptance so far (Leviathan et al.'s expected
 * tokens per unit of cost, the draft's cost from its weight bytes) unless fixed is set. */
typedef struct nc_spec_params {
    nc_context *draft;          /* the draft model's context, or NULL */
    const nc_model *draft_model;
    int32_t lookup_ngram;       /* > 0 without a draft: prompt lookup with n-grams up to this long */
    int32_t draft_max;          /* tokens proposed at most per step (0: 16) */
    int32_t draft_min;          /* a step proposing fewer verifies none (0: any) */
    bool fixed;                 /* propose draft_max every step (or as many as lookup finds) */
} nc_spec_params;

/* Whether the draft shares the model's vocabulary: size, special tokens and every token's text.
 * -1 with a message naming the first difference. */
int nc_spec_check_vocab(const nc_model *m, const nc_model *draft, nc_err *err);

typedef struct nc_spec_stats {
    int64_t drafted;    /* tokens proposed and verified */
    int64_t accepted;   /* of those, kept */
    int64_t passes;     /* forward passes of the model while generating (with or without drafts) */
    int64_t generated;  /* tokens generated in those passes */
    int64_t draft_rows; /* positions the draft model computed: its catch-up over the tokens, and its
                           drafts (0 for prompt lookup); what the draft model costs */
} nc_spec_stats;

typedef struct nc_gen_params {
    nc_sampler_params sampling;
    nc_stop_params stop;
    int32_t n_samples;  /* 0: 1 */
    nc_ctx_policy context;
    nc_spec_params spec;  /* speculative decoding when spec.draft or spec.lookup_ngram is set */
} nc_gen_params;

typedef struct nc_gen_event {
    int32_t sample, step;       /* which continuation, and the index of its token */
    int32_t token;
    const char *text;           /* text to show now (may be empty) */
    int32_t n_text;
    const nc_sample_info *info; /* NULL unless sampling.n_logprobs > 0 */
    const nc_explain *explain;  /* NULL unless sampling.explain */
    nc_finish finish;           /* set on the continuation's last event */
} nc_gen_event;
/* Return nonzero to abort the generation. */
typedef int (*nc_gen_callback)(const nc_gen_event *ev, void *user);

typedef struct nc_gen_sample {
    int32_t *tokens;  /* every token drawn, the one that stopped it included */
    int32_t n_tokens;
    nc_finish finish;
    int32_t n_evictions, n_evicted;  /* times the context policy made room, and the tokens it dropped */
} nc_gen_sample;

typedef struct nc_gen_result {
    int32_t n_samples;
    nc_gen_sample *samples;
    double t_prompt, t_gen;  /* seconds spent in prefill and in generation */
    double t_model;          /* of t_gen, the seconds in the model's forward passes; the rest is the
                                work around them (drawing, stop rules, the callback, a draft model's
                                passes), which fewer passes do not shorten */
    int32_t n_cached;        /* prompt tokens taken from the prefix cache (not computed again) */
    nc_spec_stats spec;      /* all samples together (passes: one per step, as all share it) */
} nc_gen_result;

int nc_generate(nc_context *c, const nc_model *m, const int32_t *prompt, int32_t n_prompt, const nc_gen_params *p,
                nc_gen_callback cb, void *user, nc_gen_result *out, nc_err *err);
void nc_gen_result_free(nc_gen_result *r);

/* The same generation pulled one token at a time, for callers that iterate rather than take a
 * callback (a language binding's generator, an event loop): nc_gen_begin checks the parameters and
 * prefills as nc_generate does; each nc_gen_next hands over the next token of some sample (the
 * events nc_generate's callback would get, in the same order), running the next forward pass when
 * none is waiting. nc_generate is this loop, so the same seed gives the same tokens. A generation
 * may be freed at any point; its sequences keep their cells, as after nc_generate, until the
 * caller clears them (nc_kv_seq_clear), and the prompt's blocks stay in the prefix cache. */
typedef struct nc_gen nc_gen;
int nc_gen_begin(nc_gen **out, nc_context *c, const nc_model *m, const int32_t *prompt, int32_t n_prompt,
                 const nc_gen_params *p, nc_err *err);
/* 1 with *ev filled (its text, info and explain valid until the next call), 0 when every sample
 * has finished, -1 with err set (and for every later call). */
int nc_gen_next(nc_gen *g, nc_gen_event *ev, nc_err *err);
/* What nc_generate returns, of the tokens drawn so far (free it with nc_gen_result_free). */
int nc_gen_get_result(const nc_gen *g, nc_gen_result *out, nc_err *err);
void nc_gen_free(nc_gen *g);

/* Beam search: n_beams sequences of the cache (the context needs n_seq_max >= n_beams) share the
 * prompt's prefill and are copied when a beam forks; every step runs all beams in one nc_forward
 * call. Beams are scored by the sum of log-probabilities of the processed distribution (the
 * logit processors of `processing`: penalties, DRY, no-repeat-n-gram, logit bias, min_tokens,
 * ignore_eos; no temperature or truncation); a finished hypothesis scores sum / length^alpha,
 * length counting its generated tokens with the one that ended it. Width 1 is greedy search.
 *
 * Diverse beam search (Vijayakumar et al. 2016, Hugging Face's group beam search): n_groups
 * groups of n_beams / n_groups beams each, searched one after the other at every step; a group's
 * log-probabilities lose diversity_penalty for every beam of an earlier group that chose the same
 * token at this step (Hamming diversity), and that penalty stays in its beams' sums. Each group
 * keeps its own finished hypotheses and stops on its own; the best of all groups are returned. */
typedef enum nc_early_stopping {
    NC_EARLY_STOP_HEURISTIC = 0, /* Hugging Face's False: stop when the best live beam, scored at its
                                    current length, cannot beat the worst finished hypothesis */
    NC_EARLY_STOP_FIRST = 1,     /* True: stop once n_beams hypotheses are finished */
    NC_EARLY_STOP_NEVER = 2,     /* "never": stop only when no live beam can beat them at any length
                                    (with length_penalty > 0, its sum scored at max_tokens) */
} nc_early_stopping;

typedef struct nc_beam_params {
    int32_t n_beams;
    float length_penalty;  /* alpha */
    int32_t n_best;        /* hypotheses returned, 1..n_beams (0: 1) */
    nc_early_stopping early_stopping;
    int32_t n_groups;      /* diverse beam search: groups, dividing n_beams (0: 1, plain beam search) */
    float diversity_penalty;  /* subtracted per earlier group's beam on the same token (>= 0) */
    /* Polled before every step (NULL: never): nonzero ends the search with the error "beam search
     * cancelled", for a caller whose client has gone or that is shutting down. */
    int (*cancelled)(void *user);
    void *cancelled_user;
} nc_beam_params;

/* Contrastive search (Su et al. 2022; transformers' penalty_alpha with top_k): at every step the
 * top_k most probable tokens of the processed distribution (the logit processors of `processing`,
 * as beam search applies them) are fed to the model, each in its own copy of the sequence, in one
 * nc_forward call; the token kept maximises (1 - alpha) p(v) - alpha max_j cos(h_v, h_j), h_v its
 * final hidden state (nc_hidden) and h_j those of every earlier token, prompt included. alpha 0
 * is greedy search. The context needs n_seq_max >= top_k; sequences 0..top_k-1 are cleared
 * first (the prompt's hidden states are all computed: nothing is taken from the prefix cache).
 * Tokens stream through cb as with nc_generate (one sample; no logprobs or explain records); it
 * ends at an end of generation, a stop rule, max_tokens or a full context (NC_FINISH_CONTEXT). */
typedef struct nc_contrastive_params {
    float penalty_alpha;   /* the degeneration penalty's weight, 0..1 */
    int32_t top_k;         /* candidates per step, 1..1024 */
} nc_contrastive_params;

int nc_contrastive_search(nc_context *c, const nc_model *m, const int32_t *prompt, int32_t n_prompt,
                          const nc_contrastive_params *cp, const nc_sampler_params *processing,
                          const nc_stop_params *stop, nc_gen_callback cb, void *user, nc_gen_result *out, nc_err *err);

typedef struct nc_beam_hyp {
    int32_t *tokens;       /* generated tokens, the one that ended the hypothesis included */
    int32_t n_tokens;
    char *text;            /* their text, without the end token or stop string */
    double sum_logprob, score;
    nc_finish finish;
} nc_beam_hyp;

typedef struct nc_beam_result {
    int32_t n;
    nc_beam_hyp *hyps;     /* best first */
    double t_prompt, t_gen;
    int32_t n_cached;      /* prompt tokens taken from the prefix cache, as nc_generate does */
} nc_beam_result;

int nc_beam_search(nc_context *c, const nc_model *m, const int32_t *prompt, int32_t n_prompt,
                   const nc_beam_params *bp, const nc_sampler_params *processing, const nc_stop_params *stop,
                   nc_beam_result *out, nc_err *err);
void nc_beam_result_free(nc_beam_result *r);

/* ---- Getting models: Hugging Face's hub and the local cache (src/hub) -------------------------- */

/* A model named "USER/REPO[:QUANT]" as Hugging Face's hub serves it (docs/cli.md, "Getting
 * models"): the repository's files are listed (GET {endpoint}/api/models/USER/REPO/tree/main),
 * and the GGUF file of the quant is taken (QUANT compared, in any case, with the tag that ends the
 * file's name, e.g. Q4_K_M in "Model-Q4_K_M.gguf"; or QUANT is the file's whole path). Without
 * QUANT: Q4_K_M, else the nearest present in a fixed order of preference. A GGUF split into parts
 * ("-00001-of-00003.gguf") brings every part; a repository without GGUF files, its safetensors
 * model (config.json, the tokenizer's files, the weights or every shard its index names).
 * Files are downloaded into the cache ({cache}/USER/REPO/PATH) through a ".part" file that an
 * interrupted download leaves behind and the next one resumes (an HTTP Range request); a file is
 * renamed into place only once complete and, for the hub's large (LFS) files, once its SHA-256
 * equals the one the listing gives. Nothing half-written is ever taken for a model. */
typedef enum nc_hub_event {
    NC_HUB_CACHED,    /* the file is in the cache already: nothing to fetch */
    NC_HUB_START,     /* its download starts (resumed: the bytes kept from an earlier one) */
    NC_HUB_PROGRESS,  /* bytes arrived (done) */
    NC_HUB_RETRY,     /* the connection failed (note says why): trying again from done */
    NC_HUB_VERIFY,    /* all bytes are there: the SHA-256 is being checked */
    NC_HUB_DONE,      /* downloaded, checked and in its place */
} nc_hub_event;

typedef struct nc_hub_progress {
    nc_hub_event event;
    const char *repo;      /* "USER/REPO" */
    const char *file;      /* the file's path in the repository */
    int32_t index, count;  /* the file is the index-th (from 1) of count this model needs */
    uint64_t done;         /* bytes of the file present, resumed ones included */
    uint64_t total;        /* the file's size */
    uint64_t resumed;      /* bytes taken from an earlier, interrupted download */
    const char *note;      /* NC_HUB_RETRY: what failed */
} nc_hub_progress;

typedef struct nc_hub_params {
    const char *endpoint;  /* the hub or a mirror; NULL: $HF_ENDPOINT, else https://huggingface.co */
    const char *token;     /* sent as "Authorization: Bearer" (gated and private repositories);
                              NULL: $HF_TOKEN; "": none */
    const char *cache;     /* NULL: $NUCLEUS_CACHE, else $XDG_CACHE_HOME/nucleus, else ~/.cache/nucleus */
    bool offline;          /* the cache only: no network */
    /* Called as files are found, fetched and checked (NULL: silence); nonzero stops the download
     * (the .part stays, to be resumed). */
    int (*progress)(const nc_hub_progress *p, void *user);
    void *user;
} nc_hub_params;

/* Find USER/REPO[:QUANT] in the cache or fetch it: *path (cap bytes) receives the GGUF file (a
 * split's first part) or the safetensors model's directory, for nc_model_load. The errors name
 * the problem: a repository the hub does not know, a gated or private one (set a token), a quant
 * it lacks (listing those it has), a full disk, a checksum that differs, a download cut off. */
int nc_hub_get(const char *ref, const nc_hub_params *p, char *path, size_t cap, nc_err *err);

/* The cache directory that p names (made by nothing: it may not exist). */
int nc_hub_cache_dir(const nc_hub_params *p, char *out, size_t cap, nc_err *err);

typedef struct nc_hub_entry {
    const char *repo;      /* "USER/REPO" */
    const char *file;      /* its path in the repository */
    uint64_t size;         /* bytes (of a partial file: those downloaded so far) */
    bool partial;          /* an interrupted download, to be resumed */
} nc_hub_entry;
/* Every file of the cache, sorted by repository and path; each nonzero return stops the walk. */
int nc_hub_list(const nc_hub_params *p, int (*each)(const nc_hub_entry *e, void *user), void *user, nc_err *err);
/* Remove USER/REPO (every file of it) or USER/REPO:QUANT (the GGUF files of that quant, all their
 * parts, partial downloads included) from the cache; *n_files and *bytes say what went. An error
 * when nothing matched. */
int nc_hub_remove(const char *ref, const nc_hub_params *p, int32_t *n_files, uint64_t *bytes, nc_err *err);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
