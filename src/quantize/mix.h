/* What `nucleus quantize` writes each tensor as: the file types (llama.cpp's LLAMA_FTYPE names and
 * ids, which GGUF files record in general.file_type) and the rules that pick a tensor's type from
 * the file type, as llama-quantize's defaults do for dense models:
 * - only tensors whose name ends in "weight", with at least 2 dims (trailing dims of 1 ignored),
 *   and that are not norms are quantised; the rest are copied as they are;
 * - the float file types (F32, F16, BF16) convert every quantisable tensor to that type;
 * - output.weight (token_embd.weight when the output is tied to it) is Q6_K for every quantised
 *   file type but Q8_0 (which keeps Q8_0);
 * - Q4_K_M and Q5_K_M: attn_v and ffn_down of the first 1/8 of the layers, the last 1/8, and every
 *   third layer between, are Q6_K (llama.cpp's use_more_bits); attn_qkv is Q5_K / Q6_K;
 * - Q4_K_S: attn_v of layers 0-3 is Q5_K, ffn_down of the first 1/8 of the layers is Q5_K;
 * - Q3_K_M: attn_v Q5_K in layers 0-1 and Q4_K after, ffn_down Q5_K in the first 1/16 of the
 *   layers and Q4_K after, attn_output and attn_qkv Q4_K; Q3_K_L: attn_v, ffn_down, attn_output
 *   Q5_K, attn_qkv Q4_K;
 * - a row length that is not a multiple of a K-quant's 256 falls back: Q3_K to IQ4_NL, Q4_K to
 *   Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, and then a row that is not a multiple of 32 to F16; the
 *   other types have no fallback (llama-quantize refuses such a file, and so does nucleus, naming
 *   the tensor).
 * --pure turns the rules off (every quantised tensor gets the file type's base type);
 * --output-tensor-type and --token-embedding-type override the rules for those two tensors. */
#ifndef NC_QUANTIZE_MIX_H
#define NC_QUANTIZE_MIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct qz_ftype {
    const char *name;  /* "Q4_K_M" */
    uint32_t id;       /* general.file_type */
    uint32_t type;     /* the base ggml type */
    const char *about; /* for the usage text */
} qz_ftype;

/* The file type of a name (case-insensitive; Q3_K, Q4_K and Q5_K mean the _M types, as in
 * llama-quantize), or NULL. */
const qz_ftype *qz_ftype_find(const char *name);
/* "F32, F16, BF16, Q8_0, ..." for messages. */
const char *qz_ftype_names(void);
size_t qz_ftype_count(void);
const qz_ftype *qz_ftype_at(size_t i);

/* The tensor counts the rules look at, and where the planner is in the file. */
typedef struct qz_counts {
    int n_attn_v, n_ffn_down, i_attn_v, i_ffn_down;
    bool has_output; /* an output.weight tensor exists (else token_embd is the output) */
} qz_counts;

/* Options that change the rules. override types are UINT32_MAX when not given. */
typedef struct qz_rules {
    bool pure;
    uint32_t output_type, embd_type;
} qz_rules;

/* Whether a tensor is quantised at all (name and dims). */
bool qz_is_quantisable(const char *name, uint32_t n_dims, const uint64_t ne[4]);
/* The type tensor `name` (quantisable, rows of ne0) is written as; advances c's layer counters.
 * *wanted: the rules' type, which a fallback replaces when it cannot take rows of ne0. UINT32_MAX
 * when no type can (the rules' type has no fallback). */
uint32_t qz_tensor_type(const qz_ftype *ft, const qz_rules *r, qz_counts *c, const char *name, uint64_t ne0,
                        uint32_t *wanted);

#endif
