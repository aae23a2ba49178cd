/* The other APIs a generation can be asked for in: Anthropic's Messages (server/anthropic.h),
 * OpenAI's Responses (server/responses.h) and llama.cpp's /completion and /infill
 * (server/llama_api.h). Each translates its request into an srv_request (so one job runs it, as
 * any other), and writes the job's one choice in its own shape, whole or as its own server-sent
 * events; http.c drives both through this table. Every function returns malloc'd text, or NULL
 * when out of memory. */
#ifndef NC_SERVER_DIALECT_H
#define NC_SERVER_DIALECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "nucleus.h"
#include "server/reply.h"
#include "server/request.h"
#include "server/response.h"

/* The choice as it ended. */
typedef struct srv_dialect_end {
    const srv_reply *reply;    /* its reasoning, content and calls */
    nc_finish finish;
    const char *stop_word;     /* the stop string that ended it, or NULL */
    const srv_usage *usage;
    const srv_logprob *lp;     /* per token, when the job keeps logprobs (n_lp of them) */
    int32_t n_lp;
    const int32_t *prompt;     /* the prompt's ids */
    int32_t n_prompt;
    double prompt_ms, predicted_ms; /* from arrival to the first token; from it to the last */
} srv_dialect_end;

typedef struct srv_dialect {
    /* The whole reply's body. */
    char *(*whole)(void *st, const srv_dialect_end *end);
    /* A stream: its first events (prompt_tokens known), then what is new of the reasoning and the
     * content (either may be empty), then the end, or an error in its place. */
    char *(*begin)(void *st, int64_t prompt_tokens);
    char *(*delta)(void *st, const char *reasoning, size_t n_reasoning, const char *content, size_t n_content,
                   const srv_logprob *lp, int32_t n_lp);
    char *(*end)(void *st, const srv_dialect_end *end);
    char *(*error)(void *st, const srv_error *e);
    /* An error answered instead of a reply (the body of a 4xx or 5xx). */
    char *(*error_body)(const srv_error *e);
    void (*free)(void *st);
} srv_dialect;

/* Reading a dialect's request (each returns -1 with e set, or 0): */
/* A 400 invalid_request_error naming param. */
int srv_refuse(srv_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A 500 "out of memory". */
int srv_oom(srv_error *e);
/* obj's member name, or NULL when absent or null. */
const cJSON *srv_member(const cJSON *obj, const char *name);
/* Whether name is in the NULL-terminated list. */
bool srv_listed(const char *const *list, const char *name);
/* Refuses members of obj other than the allowed ones (null ones pass) and members given twice;
 * where: the object's path for the messages ("" at the top). */
int srv_only(const cJSON *obj, const char *const *allowed, const char *where, srv_error *e);
/* root's member from (when present and not null), copied into oa as to. */
int srv_copy_member(const cJSON *root, const char *from, cJSON *oa, const char *to, srv_error *e);

/* Writing (false or NULL when out of memory): */
/* o[k] = v. */
bool srv_add_str(cJSON *o, const char *k, const char *v);
/* o[k] = text[0..n), invalid UTF-8 repaired. */
bool srv_put_text(cJSON *o, const char *k, const char *s, size_t n);
/* root printed unformatted when ok, NULL otherwise; root freed either way. */
char *srv_json_print(cJSON *root, bool ok);
/* text onto a growing malloc'd string (NULL: empty), a newline between parts; acc freed when out
 * of memory. */
char *srv_append_line(char *acc, const char *text);

/* "event: NAME\ndata: JSON\n\n" (json freed); NULL when out of memory. */
char *srv_sse_named(const char *name, char *json);
/* Concatenate b onto a (both malloc'd, both freed; NULL a stays NULL only when b is too). */
char *srv_text_cat(char *a, char *b);

#endif
