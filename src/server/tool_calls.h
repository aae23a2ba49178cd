/* OpenAI tool calling over a model's own conventions (the call syntaxes of chat_format.h): the
 * conversation rewritten for a template that knows nothing of tools, the grammar that makes a
 * required call certain (call_grammar.c), and the calls parsed back out of the generated text
 * (whole, or as a stream that holds back what may become a call; name-led syntaxes in
 * call_named.c, gpt-oss's in harmony.c). */
#ifndef NC_SERVER_TOOL_CALLS_H
#define NC_SERVER_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/chat_format.h"
#include "server/marker.h"
#include "server/request.h"

/* For a template that does not take tools: messages_json (srv_request's normalised array) with
 * the tools (tools_json; may be NULL) described in the system message in the HERMES format,
 * assistant tool_calls written into their content as <tool_call> blocks and tool results given
 * as user turns in <tool_response> blocks. malloc'd; NULL when out of memory or not JSON. */
char *srv_tools_describe(const char *messages_json, const char *tools_json);

/* GBNF that admits exactly the calls tool_choice asks for, in syntax sx: one call of any tool
 * (only: NULL) or of the tool named only, up to SRV_MAX_PARALLEL_CALLS when parallel and the
 * syntax allows more than one; each call's arguments held to its tool's "parameters" schema.
 * lead: GBNF rules defining a rule named "lead" that comes before the calls (the reasoning a
 * prompt opened), or NULL. gone(user) (may be NULL) is asked while the schemas compile, as
 * nc_json_schema_to_grammar_watched asks it. malloc'd; on failure NULL with a 400 naming the tool
 * whose schema cannot be turned into a grammar, or 499 when gone said to stop. */
#define SRV_MAX_PARALLEL_CALLS 8
char *srv_tool_grammar(const srv_call_syntax *sx, const char *tools_json, const char *only, bool parallel,
                       const char *lead, bool (*gone)(void *user), void *user, srv_error *e);

typedef struct srv_tool_call {
    char id[30];           /* given by the server: "call_" and 24 letters and digits */
    char *name;
    char *arguments;       /* JSON text, as OpenAI sends it */
} srv_tool_call;

typedef struct srv_tool_calls {
    srv_tool_call *calls;
    int32_t n;
    size_t content_end;    /* where the first call's block starts: the text before is content */
    size_t tail;           /* where the text the calls did not take resumes (the first block that
                              is not a complete, well-formed call, cut or malformed, and what
                              follows): content too, after the text before the calls */
} srv_tool_calls;

/* The calls in a whole reply text[0..n) written in syntax sx. tools_json: the request's tools,
 * whose parameters' types say what a parameter written as bare text is (a string, or JSON). The
 * calls are the complete, well-formed ones in a row from the first (without parallel, the first
 * only: what follows it is content); a call to a tool tools_json does not declare, or arguments
 * holding an escaped NUL (which cJSON would cut short), make the text content. 0 with out->n == 0
 * when there is none (content_end and tail are then n); -1 out of memory. */
int srv_tool_calls_parse(const srv_call_syntax *sx, const char *text, size_t n, const char *tools_json, bool parallel,
                         srv_tool_calls *out);
/* Whether tools_json (a request's tools array) declares a function of that name (NULL: any name,
 * for callers that check no declarations). */
bool srv_tool_declared(const char *tools_json, const char *name);
void srv_tool_calls_free(srv_tool_calls *c);

/* While streaming: how many bytes of text[0..n) can go out as content now, i.e. the bytes
 * before anything that is, or may grow into, the start of a call (and the blanks before it). */
size_t srv_tool_content_ready(const srv_call_syntax *sx, const char *text, size_t n);

/* Internal to the parsers (tool_calls.c, call_named.c, harmony.c). */
/* Append a call (name and arguments as JSON text, copied) with a fresh id; -1 out of memory. */
int srv_tool_calls_add(srv_tool_calls *out, const char *name, const char *arguments, bool short_id);
/* Calls in the name-led syntax from text[i..n) (the section and call markers of sx), at most
 * max of them; *i moves past what they took. */
int srv_calls_named(const srv_call_syntax *sx, const char *t, size_t n, size_t *i, const char *tools_json, int32_t max,
                    srv_tool_calls *out);
/* After a prompt that ended with call_open (sx->text_recipient, Functionary v3.2): whether
 * t[i..n) opens with the text recipient ("all" and the blanks after it, *end past them); MK_PARTIAL
 * while the text may still grow into it (not when done). */
mk_result srv_text_recipient(const srv_call_syntax *sx, const char *t, size_t n, size_t i, bool done, size_t *end);
/* Whether t[i..n) is, or may grow into, the start of a call whose call_open the prompt wrote: a
 * name, name_end and its JSON arguments' '{' (while streaming, such a reply is held whole). */
bool srv_call_head_possible(const srv_call_syntax *sx, const char *t, size_t n, size_t i);
/* For a template that joins a call's arguments to strings (sx->args_text): messages_json with
 * each assistant message's tool_calls' arguments as JSON text. malloc'd; NULL when out of memory
 * or not JSON. */
char *srv_calls_args_as_text(const char *messages_json);
/* The calls of a list from its first item at t[i] (after its '['), each read by item (0: a call
 * added to out, 1: not a call, -1: out of memory; it moves *i past what it read), separated by
 * commas, up to the ']'. *at moves past every call read (and the ']'); a list cut short, an item
 * that is not a call and what follows the max-th call stay content. 1: the whole list was read;
 * 0: it stopped before its end; -1: out of memory. */
int srv_calls_list(const char *t, size_t n, size_t i, size_t *at, int32_t max, srv_tool_calls *out,
                   int (*item)(const char *t, size_t n, size_t *i, const void *user, srv_tool_calls *out),
                   const void *user);
/* Calls written as Python (SRV_CALLS_PYTHONIC, call_python.c), as srv_calls_named. */
int srv_calls_python(const srv_call_syntax *sx, const char *t, size_t n, size_t *i, int32_t max, srv_tool_calls *out);
/* For a template that takes tools but renders no calls (LFM2): messages_json with each assistant
 * message's tool_calls written into its content in syntax sx (a Python list). malloc'd; NULL when
 * out of memory or not JSON. */
char *srv_calls_python_into_content(const srv_call_syntax *sx, const char *messages_json);
/* Arguments written as bare text: the parameter's JSON value for tool `name` of tools_json
 * (a JSON string unless its schema says otherwise and the text is JSON). malloc'd cJSON. */
struct cJSON;
struct cJSON *srv_param_value(const char *tools_json, const char *name, const char *key, const char *text, size_t len);

#endif
