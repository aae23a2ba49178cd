/* OpenAI request bodies -> validated C structs. Pure functions over the body bytes (no I/O, no
 * model): they can be fuzzed alone. Every refusal is a 400 naming the offending field in
 * srv_error.param, in the shape of OpenAI's errors. Depends only on cJSON. */
#ifndef NC_SERVER_REQUEST_H
#define NC_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nucleus.h" /* nc_logit_bias (a type only: nothing of the library is linked) */

#define SRV_MAX_STOP 16        /* stop strings per request */
#define SRV_MAX_PROMPTS 64     /* prompts in one completions request */
#define SRV_MAX_LOGIT_BIAS 1024
#define SRV_MAX_TOP_LOGPROBS 20
#define SRV_MAX_TOOLS 128      /* OpenAI's limit */
#define SRV_MAX_BREAKERS 64    /* dry_sequence_breakers */
#define SRV_MAX_FIELD_TEXT (1 << 20)  /* grammar, samplers: bytes */
#define SRV_EXPLAIN_TOP_N 20       /* nucleus_explain: true */
#define SRV_MAX_EXPLAIN_TOP_N 200  /* nucleus_explain.top_n at most */
#define SRV_MAX_EXPLAIN_BYTES (16u << 20) /* nucleus_explain: the steps of one request, in bytes of JSON;
                                            past them the request fails (a response would otherwise
                                            grow with n x max_tokens x top_n) */

/* An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}. */
typedef struct srv_error {
    int status;            /* HTTP status */
    const char *type;      /* "invalid_request_error", "server_error" ... */
    const char *code;      /* NULL: JSON null */
    char param[96];        /* "": JSON null */
    char message[512];
} srv_error;

void srv_error_set(srv_error *e, int status, const char *type, const char *code, const char *param,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* X-Request-Id: the id a client or a load balancer gave, echoed on the response for tracing. One
 * is echoed only when "sane": 1 to SRV_REQUEST_ID_MAX characters of [A-Za-z0-9._:/+=@-] (what
 * UUIDs, nginx's $request_id and trace ids are made of); anything else (spaces, quotes, control
 * characters, a log line's worth of text) is replaced by a fresh id. */
#define SRV_REQUEST_ID_MAX 128
bool srv_request_id_sane(const char *id);


/* Content-Type application/json, any case, with parameters (charset) or not. */
bool srv_json_media_type(const char *content_type);

/* The Host header against the names the server answers to (DNS rebinding: a page on a name that
 * resolves to 127.0.0.1 reaches a loopback server with its own name as Host). allowed: names
 * separated by commas, or "*" for any; the header's port (digits after ':') is ignored, anything
 * else after the name refuses it, names compare without case, an IPv6 address in brackets. A
 * request without Host passes here (HTTP/1.0; the server refuses HTTP/1.1 without one). */
bool srv_host_allowed(const char *host, const char *allowed);
/* What a server bound to bind_host answers to by default: on a loopback address, localhost and
 * the loopback addresses ("localhost,127.0.0.1,[::1]" and bind_host); elsewhere "*". malloc'd. */
char *srv_default_allowed_hosts(const char *bind_host);

typedef enum srv_api { SRV_API_COMPLETIONS, SRV_API_CHAT } srv_api;

/* tool_choice: whether the model may (auto), must not (none, and the tools are then left out of
 * the prompt), must (required) or must call the one named function. */
typedef enum srv_tool_choice { SRV_TOOLS_AUTO, SRV_TOOLS_NONE, SRV_TOOLS_REQUIRED, SRV_TOOLS_NAMED } srv_tool_choice;

/* reasoning_format (llama.cpp's name): whether the reasoning is split out of the content into
 * reasoning_content. DEFAULT: as the server was started (--reasoning-format). */
typedef enum srv_reasoning_format { SRV_REASONING_DEFAULT, SRV_REASONING_NONE, SRV_REASONING_AUTO } srv_reasoning_format;

/* One prompt of a completions request: a text, or token ids given as such. */
typedef struct srv_prompt {
    char *text;            /* NUL-terminated (text_len bytes, may hold NULs); NULL for ids */
    size_t text_len;
    int32_t *tokens;
    int32_t n_tokens;
} srv_prompt;

typedef struct srv_request {
    srv_api api;
    char *model;                   /* NULL when not given */
    srv_prompt *prompts;           /* completions */
    int32_t n_prompts;
    char *messages_json;           /* chat: [{"role", "content"}], each content one string, and
                                      where given "name", "tool_call_id", "reasoning_content" (an
                                      assistant's earlier reasoning; "reasoning" is its other
                                      name) and "tool_calls" (each {"id", "type", "function":
                                      {"name", "arguments"}} with the arguments parsed when they
                                      are JSON, as templates expect) */
    char *template_kwargs_json;    /* chat_template_kwargs: a JSON object of template variables
                                      (enable_thinking ...), or NULL */
    char *reasoning_effort;        /* "minimal", "low", "medium", "high" (gpt-oss's template
                                      variable), or NULL */
    srv_reasoning_format reasoning_format;
    char *tools_json;              /* chat "tools": [{"type": "function", "function": {"name",
                                      "description"?, "parameters"?}}], or NULL */
    int32_t n_tools;
    srv_tool_choice tool_choice;
    char *tool_choice_name;        /* SRV_TOOLS_NAMED: a name among the tools */
    bool parallel_tool_calls;      /* default true */
    char *grammar;                 /* "grammar": GBNF text, or NULL */
    char *json_schema;             /* "json_schema", or response_format's schema (printed JSON); for
                                      response_format json_object "{\"type\":\"object\"}" */
    const char *schema_param;      /* the field json_schema came from, for errors */
    int32_t max_tokens;            /* 0: until end of generation or a full context */
    int32_t n;                     /* choices per prompt */
    bool stream, include_usage;
    char **stop;
    int32_t n_stop;
    bool logprobs;                 /* report the chosen tokens' log-probabilities */
    int32_t top_logprobs;          /* and this many alternatives */
    int32_t explain_top_n;         /* nucleus_explain: each token's step with this many raw logits
                                      (0: off; server/explain.h) */
    bool seed_given;
    uint64_t seed;
    float temperature, top_p, min_p, typical_p;
    float epsilon_cutoff, eta_cutoff;      /* transformers' names; 0: off */
    float dynatemp_range, dynatemp_exponent;  /* llama.cpp's server's names */
    int32_t top_k;                 /* 0: off */
    float presence_penalty, frequency_penalty, repetition_penalty;
    int32_t no_repeat_ngram_size, min_tokens;
    bool ignore_eos;
    /* the CLI's other samplers under llama.cpp's server's names, with its defaults */
    int32_t repeat_last_n, min_keep;
    float top_n_sigma;             /* <= 0: off */
    float xtc_probability, xtc_threshold;
    int32_t mirostat;
    float mirostat_tau, mirostat_eta;
    float dry_multiplier, dry_base;
    int32_t dry_allowed_length, dry_penalty_last_n;
    bool dry_breakers_given;       /* else llama.cpp's default breakers */
    char **dry_breakers;
    int32_t n_dry_breakers;
    char *samplers;                /* stage order, names separated by ';'; NULL: default */
    nc_logit_bias *logit_bias;     /* -100 became -INFINITY: a ban */
    int32_t n_logit_bias;
    bool use_beam_search;
    int32_t best_of;               /* beams (use_beam_search); otherwise equal to n */
    float length_penalty;
    nc_early_stopping early_stopping;  /* vLLM's early_stopping: false, true or "never" */
    int32_t num_beam_groups;       /* transformers' diverse beam search: groups of best_of / groups beams */
    float diversity_penalty;
    bool contrastive;              /* penalty_alpha given: contrastive search over top_k candidates */
    float penalty_alpha;
    /* llama.cpp's server's own fields */
    bool cache_prompt;             /* default true: the prefix cache may serve the prompt */
    int32_t id_slot;               /* the slot to run in; -1 (default): any */
    int32_t t_max_predict_ms;      /* once this long since the first token, the reply ends at the
                                      next token after a newline (finish "length"); 0: no limit */
} srv_request;

typedef struct srv_limits {
    int32_t n_vocab;               /* token ids (prompts, logit_bias) must be below */
    int32_t max_n;                 /* n and best_of: at most the server's slots */
} srv_limits;

/* Parse and validate a /v1/completions or /v1/chat/completions body. On failure *out is empty
 * (nothing to free) and err holds the 400. Defaults follow OpenAI: temperature 1, top_p 1, no
 * penalties; max_tokens 16 for completions, unlimited for chat. A field the server does not
 * implement is refused, not ignored (a client relying on it would be misled); JSON null counts
 * as absent. */
int srv_request_parse(srv_api api, const char *body, size_t len, const srv_limits *lim, srv_request *out,
                      srv_error *err);
void srv_request_free(srv_request *r);

/* POST /tokenize (llama.cpp's shape): {"content": string, "add_special": bool = false,
 * "parse_special": bool = true} */
typedef struct srv_tokenize_req {
    char *content;
    size_t len;
    bool add_special, parse_special;
} srv_tokenize_req;
int srv_tokenize_parse(const char *body, size_t len, srv_tokenize_req *out, srv_error *err);
void srv_tokenize_free(srv_tokenize_req *r);

/* POST /detokenize: {"tokens": [int, ...]} with every id below n_vocab. */
typedef struct srv_detokenize_req {
    int32_t *tokens;
    int32_t n_tokens;
} srv_detokenize_req;
int srv_detokenize_parse(const char *body, size_t len, int32_t n_vocab, srv_detokenize_req *out, srv_error *err);
void srv_detokenize_free(srv_detokenize_req *r);

/* POST /v1/embeddings (OpenAI's shape): {"input": string | [string, ...] | [id, ...] | [[id, ...], ...],
 * "model": string (any: there is one model), "encoding_format": "float" (default) | "base64"}.
 * At most SRV_MAX_PROMPTS inputs; empty strings and "dimensions" are refused. */
typedef struct srv_embed_req {
    srv_prompt *inputs;
    int32_t n_inputs;
    char *model;
    bool base64;           /* little-endian float32 bytes in base64, as OpenAI's */
} srv_embed_req;
int srv_embed_parse(const char *body, size_t len, const srv_limits *lim, srv_embed_req *out, srv_error *err);
void srv_embed_free(srv_embed_req *r);

/* POST /slots/{id}?action=save|restore (llama.cpp's shape): {"filename": name}. id is the rest of
 * the path after "/slots/" (a number below n_slots), action the query's value (NULL: absent), and
 * the name a plain file name, so that the file stays in the server's --slot-save-path: 1 to
 * SRV_SLOT_NAME_MAX of A-Z a-z 0-9 . _ -, neither starting with '.' nor holding "..". */
#define SRV_SLOT_NAME_MAX 128
typedef enum srv_slot_op { SRV_SLOT_SAVE, SRV_SLOT_RESTORE } srv_slot_op;
typedef struct srv_slot_req {
    int32_t id;
    srv_slot_op op;
    char filename[SRV_SLOT_NAME_MAX + 1];
} srv_slot_req;
int srv_slot_parse(const char *id, const char *action, const char *body, size_t len, int32_t n_slots,
                   srv_slot_req *out, srv_error *err);

#endif
