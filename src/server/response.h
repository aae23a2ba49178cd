/* JSON bodies in OpenAI's shapes: errors, completions and chat completions (whole or as stream
 * chunks), logprobs, usage, tokenize / detokenize (the model list: server/models.h). Each returns a malloc'd
 * NUL-terminated string (free() it), or NULL when out of memory. Text is made valid UTF-8
 * (invalid bytes and NULs become U+FFFD) so every body is valid JSON. */
#ifndef NC_SERVER_RESPONSE_H
#define NC_SERVER_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "nucleus.h"
#include "server/request.h"
#include "server/tool_calls.h"

/* The bytes of a token, as nc_token_piece: the length, nothing written when it is > cap. */
typedef int (*srv_piece_fn)(void *ctx, int32_t token, char *buf, int cap);

/* What a response is about. */
typedef struct srv_resp_meta {
    srv_api api;
    const char *id;            /* "cmpl-..." or "chatcmpl-..." */
    const char *model;
    int64_t created;           /* Unix seconds */
    srv_piece_fn piece;        /* token texts of logprobs */
    void *piece_ctx;
} srv_resp_meta;

/* One generated token's log-probability and its alternatives. */
typedef struct srv_logprob {
    int32_t token;
    float logprob;
    int32_t n_top;
    nc_token_logprob top[NC_LOGPROBS_MAX];
} srv_logprob;

/* A choice, or the part of it a stream chunk carries. */
typedef struct srv_choice_view {
    int32_t index;
    const char *text;          /* chat: the content */
    size_t n_text;
    const char *reasoning;     /* chat: reasoning_content (none when n_reasoning is 0) */
    size_t n_reasoning;
    bool logprobs;             /* the request asked for them: lp[0..n_lp) */
    const srv_logprob *lp;
    int32_t n_lp;
    size_t text_offset;        /* completions: where lp[0]'s text starts in the choice's text */
    nc_finish finish;          /* NC_FINISH_NONE: null */
    const srv_tool_calls *calls;  /* chat: calls made (then an empty content is null, and a reply
                                     that stopped says "tool_calls"; one cut says "length") */
    bool explain;              /* nucleus_explain: "nucleus_explain": {"prompt_tokens"?, "steps"} */
    char *const *steps;        /* steps[0..n_steps): JSON objects (server/explain.h) */
    int32_t n_steps;
    const int32_t *prompt;     /* the prompt's ids, sent once per choice (NULL: not in this one) */
    int32_t n_prompt;
} srv_choice_view;

typedef struct srv_usage {
    int64_t prompt_tokens, completion_tokens;
    int64_t cached_tokens;  /* prompt tokens whose keys and values came from the prefix cache */
    bool speculative;       /* the server decodes speculatively: "timings" reports the drafts */
    nc_spec_stats spec;
} srv_usage;

/* Add item to obj as name / to arr; false (item freed) when either is NULL (out of memory), so a
 * body is built as one chain of &&. */
bool srv_json_put(cJSON *obj, const char *name, cJSON *item);
bool srv_json_append(cJSON *arr, cJSON *item);

char *srv_json_error(const srv_error *e);
/* A message's calls as OpenAI writes them: [{"id", "type": "function", "function": {"name",
 * "arguments"}}, ...] ("[]" when none). malloc'd; NULL when out of memory. */
char *srv_json_tool_calls(const srv_tool_calls *calls);
/* The whole response of a request that did not stream. */
char *srv_json_response(const srv_resp_meta *m, const srv_choice_view *choices, int n, const srv_usage *u);
/* One stream chunk for one choice. Chat: role_delta adds {"role": "assistant"} to the delta (the
 * first chunk of a choice). usage_null adds "usage": null (the request asked for usage). */
char *srv_json_chunk(const srv_resp_meta *m, const srv_choice_view *c, bool role_delta, bool usage_null);
/* A chat stream chunk for call k of choice `index`: its head ({"index", "id", "type", "function":
 * {"name", "arguments": ""}}), or its arguments ({"index", "function": {"arguments"}}). */
char *srv_json_tool_call_chunk(const srv_resp_meta *m, int32_t index, int32_t k, const srv_tool_call *c, bool head,
                               bool usage_null);
/* The last chunk when usage was asked for: no choices, the usage. */
char *srv_json_usage_chunk(const srv_resp_meta *m, const srv_usage *u);
/* /v1/embeddings: {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
 * "model", "usage": {"prompt_tokens", "total_tokens"}}; vectors: n rows of n_embd. */
char *srv_json_embeddings(const char *model_id, const float *vectors, int32_t n, int32_t n_embd, bool base64,
                          int64_t prompt_tokens);
char *srv_json_tokens(const int32_t *ids, int32_t n);
char *srv_json_content(const char *text, size_t len);
/* POST /apply-template (llama.cpp's shape): {"prompt": text}. */
char *srv_json_prompt(const char *text, size_t len);
/* The reply to POST /slots/{id}?action= (llama.cpp's shape): save {"id_slot", "filename",
 * "n_saved", "n_written", "timings": {"save_ms"}}, restore {..., "n_restored", "n_read",
 * "timings": {"restore_ms"}}. */
char *srv_json_slot(int32_t id, const char *filename, bool save, int32_t n_tokens, uint64_t n_bytes, double ms);

/* text[0..n) as valid UTF-8 without NULs: malloc'd, NUL-terminated. */
char *srv_utf8_clean(const char *text, size_t n);

#endif
