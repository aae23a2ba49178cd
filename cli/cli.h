/* Shared pieces of the nucleus command line: option parsing helpers and the subcommands. */
#ifndef NC_CLI_H
#define NC_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "nucleus.h"

/* Option values: parse or print "error: FLAG: ..." and return false. */
bool cli_int(const char *flag, const char *s, long lo, long hi, long *out);
bool cli_float(const char *flag, const char *s, double lo, double hi, double *out);
bool cli_u64(const char *flag, const char *s, uint64_t *out);
/* "1,2,3" -> ids (malloc'd); false with a message on a bad list. */
bool cli_ids(const char *flag, const char *s, int32_t **ids, int *n);
/* The KV cache flags: --cache-type-k / -ctk T (keys), --cache-type-v / -ctv T (values),
 * --cache-type T (both), T one of f16, f32, q8_0, q4_0. 1: argv[*i] was one, consumed with its
 * value; 0: not one; -1: refused (message printed). */
int cli_cache_arg(int argc, char **argv, int *i, nc_cache_type *k, nc_cache_type *v);
const char *cli_cache_type_name(nc_cache_type t);
/* Both, for reports: "f16" when keys and values share the type, else "q8_0/q4_0" (keys/values). */
/* The start-up line's words on the cache: "keys f16, values f16[ (latent f32)]: X KiB per token[,
 * recurrent state Y KiB a sequence]". */
const char *cli_kv_summary(const nc_context *c, char *buf, size_t cap);
const char *cli_cache_types(nc_cache_type k, nc_cache_type v, char buf[16]);
#define CLI_CACHE_USAGE "[--cache-type-k T] [--cache-type-v T]"
#define CLI_CACHE_HELP                                                                                        \
    "  --cache-type-k T, --cache-type-v T  KV cache keys / values: f16 (default), f32, q8_0, q4_0 (-ctk, -ctv;\n" \
    "                     --cache-type T sets both; q8_0 and q4_0 need a head_dim that is a multiple of 32)\n"
/* Where the model runs: --device cpu|cuda, -ngl / --n-gpu-layers N (nc_context_params.n_gpu_layers:
 * 0 the CPU, N the last N layers on the GPU, -1 every layer). 1: argv[*i] was one, consumed with
 * its value; 0: not one; -1: refused (message printed). */
int cli_device_arg(int argc, char **argv, int *i, int32_t *n_gpu_layers);
#define CLI_DEVICE_USAGE "[--device cpu|cuda] [-ngl N]"
#define CLI_DEVICE_HELP                                                                                      \
    "  --device cpu|cuda  where the model runs (cuda: every layer and the KV cache on the first GPU; needs a\n"  \
    "                     build with `make CUDA=1`); -ngl N: the last N layers and the output on the GPU, the\n" \
    "                     others on the CPU (0: the CPU; -1, or the layer count and more: every layer)\n"
/* The fast mode (nc_context_params.fast), for every command that runs the model. */
#define CLI_FAST_HELP                                                                                            \
    "  --fast             int8 activations for the Q8_0/Q4_0 products of normalised inputs: faster prefill\n"     \
    "                     and speculative verification, log-probabilities up to ~0.13 further from the\n"     \
    "                     exact ones (docs/correctness.md)\n"
/* LoRA adapters (cli/lora_args.c): --lora FILE (scale 1), --lora-scaled FILE SCALE, each repeatable.
 * 1: argv[*i] was one, consumed with its values; 0: not one; -1: refused (message printed). */
#define CLI_LORA_MAX 16
typedef struct cli_lora {
    const char *path[CLI_LORA_MAX];
    float scale[CLI_LORA_MAX];
    int n;
} cli_lora;
int cli_lora_arg(int argc, char **argv, int *i, cli_lora *l);
/* nc_model_load, then the adapters in order (nc_model_add_lora; l may be NULL): on failure *m is
 * NULL and err says why. */
int cli_model_load(nc_model **m, const char *path, const cli_lora *l, nc_err *err);
#define CLI_LORA_USAGE "[--lora FILE] [--lora-scaled FILE SCALE]"
#define CLI_LORA_HELP                                                                                        \
    "  --lora FILE        apply a LoRA adapter (a GGUF in llama.cpp's adapter form) to the model; --lora-scaled\n" \
    "                     FILE S: with scale S (default 1); repeatable: adapters add up (the CPU backend)\n"
/* The value after a flag, or NULL with a message when argv ends. */
const char *cli_value(int argc, char **argv, int *i);

/* The model used when -m is not given: $NUCLEUS_MODEL, else stories260K.gguf found relative to
 * the executable (models/ of the repository it was built in, or PREFIX/share/nucleus once
 * installed), so it runs from any directory. NULL, with a message naming the places, when it is
 * in none (the commands then exit with 2, as for a missing option). */
const char *cli_default_model(void);

/* The model from Hugging Face's hub (cli/hub_args.c), beside -m on every command that loads one:
 * -hf / --hf-repo USER/REPO[:QUANT], --offline (the cache only). */
typedef struct cli_hf {
    const char *repo;
    bool offline;
    char path[4096];  /* where the cache holds it */
} cli_hf;
/* 1: argv[*i] was one, consumed with its value; 0: not one; -1: refused (message printed). */
int cli_hf_arg(int argc, char **argv, int *i, cli_hf *hf);
/* The model to load into *model: -m's (*model already set), else -hf's (found in the cache or
 * downloaded now, with its progress on stderr), else the default model. 0, or the exit status
 * with a message printed: 2 for flags that do not go together, 1 for a download that failed. */
int cli_model_path(const char **model, cli_hf *hf);
#define CLI_HF_USAGE "[-hf USER/REPO[:QUANT] [--offline]]"
#define CLI_HF_HELP                                                                                            \
    "  -hf USER/REPO[:QUANT]  the model from Hugging Face's hub instead of -m: the GGUF file of QUANT (default\n" \
    "                     Q4_K_M, else the nearest), downloaded once into the cache (nucleus pull -h)\n"         \
    "  --offline          with -hf: the cache only, no network\n"
/* 1234567 -> "1.2 MB": B, kB, MB, GB (decimal, as the hub shows sizes). */
const char *cli_bytes(uint64_t b, char buf[24]);
/* A download's progress on stderr (a bar on a terminal, a line per tenth otherwise). */
typedef struct cli_progress {
    bool tty, drawn;
    double t_start, t_last;
    uint64_t start_bytes;
    int tenth;
} cli_progress;
void cli_hub_params(nc_hub_params *p, bool offline, cli_progress *state);
/* Ends a bar left drawn (before an error message). */
void cli_progress_end(cli_progress *state);

/* Tokenize a whole text into a malloc'd array; parse_special: text such as "<|im_start|>" becomes
 * its control token. */
int cli_tokenize(const nc_model *m, const char *text, bool add_special, bool parse_special, int32_t **ids,
                 nc_err *err);

/* The whole of a file, or of stdin for "-", NUL-terminated (malloc'd, *len bytes); NULL with
 * "error: PATH: why" printed. A path must name a regular file (a FIFO would block: pipes come
 * through "-"). */
char *cli_read_text(const char *path, size_t *len);
/* A malloc'd copy of s with llama.cpp's escapes (-e) replaced: \n \r \t \\ \" \' \xHH. Any other
 * backslash sequence (or \x00) is refused: NULL with "error: FLAG: bad escape ..." printed. */
char *cli_unescape(const char *flag, const char *s);

/* What to do when the context is full (cli/decoding_args.c), for `run` and `serve`:
 * --context-shift [--keep N] or --attention-sinks N; without either, stop and say so. */
typedef struct cli_context {
    nc_ctx_policy policy;
    bool shift, keep_given, sinks_given;
} cli_context;
/* 1: argv[*i] was one of these flags, consumed with its value; 0: not one; -1: refused (message printed). */
int cli_context_arg(int argc, char **argv, int *i, cli_context *cx);
/* Checks across these flags once all are read; false with a message. */
bool cli_context_finish(cli_context *cx);
/* Their part of a usage text. */
const char *cli_context_usage(void);

/* Decoding flags of `run` (cli/decoding_args.c): sampler chain, stop rules, beams, samples,
 * log-probabilities, explain mode, the context policy. Strings point into argv or into storage the struct owns. */
typedef enum cli_explain { CLI_EXPLAIN_OFF, CLI_EXPLAIN_TEXT, CLI_EXPLAIN_JSON } cli_explain;
typedef struct cli_decoding {
    nc_sampler_params sp;
    nc_stop_params stop;
    nc_beam_params beam;
    nc_contrastive_params contrastive;  /* top_k: the sampler's --top-k */
    cli_context context;
    bool use_beams, use_contrastive, seed_given, breakers_set;
    int32_t n_samples;
    cli_explain explain;
    const char **stops, **breakers;
    int32_t *stop_ids;
    nc_logit_bias *bias;
    char **owned; /* unescaped copies of string arguments, grammars */
    int n_owned;
    const char *grammar_flag; /* which of --grammar, --grammar-file, --json-schema(-file) gave sp.grammar */
} cli_decoding;
void cli_decoding_init(cli_decoding *d);
/* 1: argv[*i] was a decoding flag, consumed with its value; 0: not one; -1: refused (message printed). */
int cli_decoding_arg(int argc, char **argv, int *i, cli_decoding *d);
/* Checks across flags once all are read; false with a message. */
bool cli_decoding_finish(cli_decoding *d);
void cli_decoding_free(cli_decoding *d);
/* The decoding part of `run`'s usage text. */
const char *cli_decoding_usage(void);

/* Speculative decoding's flags (cli/spec_args.c), for `run` and `serve`: -md / --draft-model FILE,
 * --lookup-ngram N, --draft-max N, --draft-min N, --draft-fixed. */
typedef struct cli_spec {
    const char *draft_path;
    long draft_max, draft_min, lookup_ngram;
    bool fixed, max_given;
} cli_spec;
/* 1: argv[*i] was one, consumed with its value; 0: not one; -1: refused (message printed). */
int cli_spec_arg(int argc, char **argv, int *i, cli_spec *sp);
bool cli_spec_finish(const cli_spec *sp);
bool cli_spec_on(const cli_spec *sp);  /* a draft model or prompt lookup was asked for */
const char *cli_spec_usage(void);
/* The speculative parameters; with a draft model, it is loaded (checked against m) and given a
 * context like the model's (mp: its size, sequences, threads and fast mode; *dm, *dc: the caller
 * frees them). */
int cli_spec_open(const cli_spec *sp, const nc_model *m, const nc_context_params *mp, nc_spec_params *out,
                  nc_model **dm, nc_context **dc, nc_err *err);
/* Acceptance and passes on stderr. */
void cli_spec_report(const nc_spec_stats *st);

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_rm(int argc, char **argv);

#endif
