/* llama.cpp's own endpoints, for the clients written against llama-server (llama.vim,
 * llama.vscode, scripts): POST /completion and POST /infill (a prompt's continuation with
 * llama.cpp's request fields, defaults and response: content, tokens, stop_type, stopping_word,
 * timings, completion_probabilities, generation_settings; streamed as data-only events ending
 * with one whose "stop" is true), GET /props and GET /slots. /infill builds a fill-in-the-middle
 * prompt from the model's FIM tokens. The request readers are pure (fuzzed); the prompt builder
 * needs the model's vocabulary. */
#ifndef NC_SERVER_LLAMA_API_H
#define NC_SERVER_LLAMA_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nucleus.h"
#include "server/dialect.h"
#include "server/request.h"
#include "server/scheduler.h"

/* /infill's parts besides the /completion fields. */
typedef struct srv_infill {
    char *prefix, *suffix; /* input_prefix, input_suffix ("" when not given) */
    char **extra_names, **extra_texts; /* input_extra: [{"filename", "text"}] */
    int32_t n_extra;
} srv_infill;
void srv_infill_free(srv_infill *f);

/* The body of POST /completion (infill NULL) or /infill (its parts into *infill) as a completions
 * request with llama.cpp's defaults (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, no
 * n_predict limit); *writer: srv_llama's state for the reply. One prompt per request. */
int srv_llama_request(const char *body, size_t len, const srv_limits *lim, const char *model, const nc_model *m,
                      int32_t n_ctx, srv_request *out, srv_infill *infill, void **writer, srv_error *e);
/* Whether the reply shows its tokens (return_tokens, n_probs, a stream's "tokens"): the job must
 * then keep a record per token. */
bool srv_llama_wants_tokens(const void *writer);

/* The model's fill-in-the-middle tokens (found by their texts: <|fim_prefix|>, <fim_prefix>,
 * <PRE>, DeepSeek's ...); false when it has none. */
typedef struct srv_fim_tokens {
    int32_t pre, suf, mid, rep, sep; /* rep, sep: -1 when absent */
} srv_fim_tokens;
bool srv_fim_tokens_of(const nc_model *m, srv_fim_tokens *out);
/* The infill prompt (llama.cpp's layout): [BOS] [FIM_REP "myproject\n"] ([FIM_SEP] name "\n" text)*
 * [FIM_SEP "filename\n"] FIM_PRE prefix prompt FIM_SUF suffix FIM_MID, the extra context, then the
 * prefix's start and the suffix's end dropped until it fits n_ctx with room for n_predict (a
 * quarter of the context when 0) tokens. *ids malloc'd. 400 when the model has no FIM tokens. */
int srv_infill_prompt(const nc_model *m, int32_t n_ctx, const srv_infill *f, const char *prompt, size_t prompt_len,
                      int32_t n_predict, int32_t **ids, int32_t *n, srv_error *e);

extern const srv_dialect srv_llama;

/* GET /props of one model. */
typedef struct srv_props {
    const char *model, *path, *chat_template;
    int32_t n_ctx, n_slots;
    bool speculative;
} srv_props;
char *srv_json_props(const srv_props *p);
/* GET /lora-adapters: the adapters applied at start-up, [{"id", "path", "scale"}] (llama.cpp's). */
char *srv_json_lora_adapters(const char *const *paths, const float *scales, int32_t n);
/* GET /slots: the slots' states. */
char *srv_json_slots(const srv_slot_info *slots, int32_t n, int32_t n_ctx, bool speculative);

#endif
