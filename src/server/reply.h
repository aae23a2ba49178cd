/* A chat reply split into what OpenAI's clients read: the reasoning (message.reasoning_content),
 * the content and the tool calls, from the text the model generated, by the template's formats
 * (chat_format.h). Whole, or while it streams: then what the split gives are prefixes of the
 * whole reply's reasoning and content, never more, so a stream's deltas add up to the whole.
 *
 * Reasoning: what the model wrote between its family's markers at the start of the reply (or
 * from the start, when the prompt opened them), its blanks trimmed; a reply that ends inside it
 * (cut by max_tokens, or ended) is reasoning to its end. gpt-oss: the analysis channel's
 * messages are the reasoning, the final channel's the content (harmony.c). */
#ifndef NC_SERVER_REPLY_H
#define NC_SERVER_REPLY_H

#include <stdbool.h>
#include <stddef.h>

#include "server/chat_format.h"
#include "server/tool_calls.h"

typedef struct srv_reply_opts {
    const srv_reasoning_style *reasoning;  /* NULL: nothing is reasoning (the template has none,
                                              or reasoning_format "none") */
    bool in_reasoning;                     /* the prompt opened the reasoning (srv_reasoning_opened) */
    const srv_call_syntax *calls;          /* NULL: no calls are looked for */
    const srv_call_syntax *opened;         /* the syntax whose call marker the prompt ended with
                                              (srv_call_opened; Functionary v3.2's ">>>"), also
                                              when no calls are looked for: the reply opens with
                                              its recipient, "all" before text (dropped), else a
                                              call's name; NULL: none */
    const char *tools_json;                /* the request's tools (parameters' types), or NULL */
    bool first_call_only;                  /* parallel_tool_calls false: what follows the first call is content */
} srv_reply_opts;

typedef struct srv_reply {
    char *reasoning, *content;             /* malloc'd, NUL-terminated ("" when none) */
    size_t n_reasoning, n_content;
    srv_tool_calls calls;
} srv_reply;

/* Split text[0..n). done: the reply is whole (calls are parsed); else what can be shown now.
 * -1: out of memory. */
int srv_reply_parse(const srv_reply_opts *o, const char *text, size_t n, bool done, srv_reply *out);
void srv_reply_free(srv_reply *r);

/* Whether a prompt leaves the reply inside the reasoning: it ends, but for blanks, with the
 * style's opening marker (Qwen3.5's, DeepSeek R1's and GLM 4.7's templates write "<think>"). */
bool srv_reasoning_opened(const srv_reasoning_style *s, const char *prompt, size_t n);

/* Whether a prompt leaves the reply at a recipient: syntax sx has one (text_recipient) and the
 * prompt ends with its call marker (Functionary v3.2's template ends with ">>>"). */
bool srv_call_opened(const srv_call_syntax *sx, const char *prompt, size_t n);

/* The reasoning budget (--reasoning-budget) over a reply being generated: after each token,
 * whether the reasoning has taken its budget of tokens and its end must be forced now. */
enum { SRV_THINK_BEFORE, SRV_THINK_IN, SRV_THINK_PAST };
typedef struct srv_think_watch {
    int state;             /* before the reasoning, inside it, past it (or its end forced) */
    int32_t tokens;        /* tokens inside it so far */
    size_t scan;           /* the text before this holds no end marker */
} srv_think_watch;
void srv_think_watch_init(srv_think_watch *w, bool in_reasoning);
bool srv_think_budget_spent(srv_think_watch *w, const srv_reasoning_style *s, const char *text, size_t n,
                            int32_t budget);

/* GBNF rules defining rule "lead": the rest of a reasoning the prompt opened, up to and with its
 * closing marker, and the blanks after it (what a constrained reply writes before its JSON or its
 * calls). malloc'd; NULL when out of memory. */
char *srv_reasoning_lead(const srv_reasoning_style *s);

/* ---- Internal: reply.c and harmony.c -------------------------------------------------------- */

typedef struct srv_text {
    char *s;
    size_t n, cap;
    bool oom;
} srv_text;
void srv_text_put(srv_text *b, const char *s, size_t n);
/* gpt-oss's replies. */
int srv_harmony_parse(const srv_reply_opts *o, const char *t, size_t n, bool done, srv_text *reasoning,
                      srv_text *content, srv_tool_calls *calls);

#endif
