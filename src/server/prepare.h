/* From a validated request to a job the scheduler can run: the chat template rendered, prompts
 * tokenized and checked against the context, OpenAI options mapped onto the sampler chain, the
 * stop rules and beam search. Runs on connection threads: everything here is read-only. */
#ifndef NC_SERVER_PREPARE_H
#define NC_SERVER_PREPARE_H

#include "nucleus.h"
#include "server/job.h"
#include "server/tool_calls.h"
#include "server/request.h"

typedef struct srv_model_ctx {
    const nc_model *m;
    nc_chat_template *chat; /* the model's tokenizer.chat_template, or ChatML */
    srv_chat_format fmt;    /* that template's reasoning and call formats */
    int32_t n_ctx, n_vocab, n_slots;
    bool split_reasoning;   /* --reasoning-format auto (the default): reasoning_content */
    int32_t reasoning_budget; /* --reasoning-budget: tokens of reasoning, then its end is forced;
                                 -1: no limit (0 also renders the template with enable_thinking
                                 false) */
} srv_model_ctx;

/* Parse template_src (Jinja; an error when it cannot be parsed), or when NULL the model's template
 * (ChatML when it has none). note receives what the operator should know when ChatML is used: the
 * model has no template, or its template could not be parsed. */
int srv_model_ctx_init(srv_model_ctx *mc, const nc_model *m, int32_t n_ctx, int32_t n_slots, const char *template_src,
                       char *note, size_t note_cap, nc_err *err);
void srv_model_ctx_free(srv_model_ctx *mc);

/* Text -> token ids (malloc'd). */
int srv_tokenize(const nc_model *m, const char *text, size_t len, bool add_special, bool parse_special, int32_t **ids,
                 int32_t *n, srv_error *e);
/* Token ids -> text as a continuation (malloc'd, UTF-8 repaired). */
int srv_detokenize(const nc_model *m, const int32_t *ids, int32_t n, char **text, size_t *len, srv_error *e);

/* Whether the request's work should stop (user: the caller's; server/watch.h: its client left,
 * its deadline passed, the server stops); asked every 10 ms while the template renders and the
 * grammar compiles, so that work nobody waits for ends. NULL: never asked. */
typedef bool (*srv_gone_fn)(void *user);

/* The prompt text a chat request renders to (POST /apply-template), with the template's
 * variables as the request sets them; *add_bos: the vocabulary wants a BOS the template did not
 * write. *opened: the prompt opened the reasoning (the reply starts inside it). Errors: 400 (the
 * template failed), 499 when gone(user) said to stop (the render was abandoned). */
int srv_render_chat(const srv_model_ctx *mc, const srv_request *r, srv_gone_fn gone, void *user, char **text,
                    size_t *len, bool *add_bos, bool *opened, srv_error *e);

/* Build the job of a request (one reference, not submitted). Errors are 400s (template errors,
 * prompts empty or longer than the context), 499 when gone(user) said to stop while the
 * template rendered or the grammar compiled or 500s (out of memory). */
int srv_prepare_job(const srv_model_ctx *mc, const srv_request *r, srv_gone_fn gone, void *user, srv_job **out,
                    srv_error *e);

/* A random 64-bit value for seeds and ids. */
uint64_t srv_random_u64(void);

#endif
