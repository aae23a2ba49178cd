/* OpenAI tool calling over a model's own conventions: which format its chat template writes
 * calls in, the conversation rewritten for a template that knows nothing of tools, the grammar
 * that makes a required call certain, and the calls parsed back out of the generated text (whole,
 * or as a stream that holds back what may become a call). */
#ifndef NC_SERVER_TOOL_CALLS_H
#define NC_SERVER_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/request.h"

/* How calls are written:
 *   HERMES   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, one block per call
 *            (Hermes, Qwen 2.5 / 3, SmolLM3, and nucleus's own description for templates
 *            without tools);
 *   LLAMA3   {"name": "f", "parameters": {...}} as the whole reply, after <|python_tag|> or not
 *            (Llama 3.1 - 3.3's JSON tool calling);
 *   MISTRAL  [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...] (Mistral's v3 tokenizer). */
typedef enum srv_tool_format { SRV_TOOL_FMT_HERMES, SRV_TOOL_FMT_LLAMA3, SRV_TOOL_FMT_MISTRAL } srv_tool_format;

/* What a chat template (Jinja source; NULL: ChatML) does with tools: whether it renders the
 * `tools` variable itself, and the format its calls take. */
typedef struct srv_tool_style {
    bool template_takes_tools;
    srv_tool_format format;
} srv_tool_style;
srv_tool_style srv_tool_style_of(const char *template_src);

/* For a template that does not take tools: messages_json (srv_request's normalised array) with
 * the tools (tools_json; may be NULL) described in the system message in the HERMES format,
 * assistant tool_calls written into their content as <tool_call> blocks and tool results given
 * as user turns in <tool_response> blocks. malloc'd; NULL when out of memory or not JSON. */
char *srv_tools_describe(const char *messages_json, const char *tools_json);

/* GBNF that admits exactly the calls tool_choice asks for: one call of any tool (only: NULL) or
 * of the tool named only, up to SRV_MAX_PARALLEL_CALLS when parallel and the format allows more
 * than one; each call's arguments held to its tool's "parameters" schema. malloc'd; on failure
 * NULL with a 400 naming the tool whose schema cannot be turned into a grammar. */
#define SRV_MAX_PARALLEL_CALLS 8
char *srv_tool_grammar(srv_tool_format f, const char *tools_json, const char *only, bool parallel, srv_error *e);

typedef struct srv_tool_call {
    char id[30];           /* given by the server: "call_" and 24 letters and digits */
    char *name;
    char *arguments;       /* JSON text, as OpenAI sends it */
} srv_tool_call;

typedef struct srv_tool_calls {
    srv_tool_call *calls;
    int32_t n;
    size_t content_end;    /* the text before the first call: the message's content */
} srv_tool_calls;

/* The calls in a whole reply text[0..n) to the request's tools (tools_json, srv_request's). 0
 * with out->n == 0 when there is none, or when what looks like a call is not a complete,
 * well-formed call of a declared tool (a call to a tool the request did not declare, arguments
 * holding an escaped NUL, which cJSON would cut short): the text is then all content; -1 out of
 * memory. Without parallel, only the first call is kept. */
int srv_tool_calls_parse(srv_tool_format f, const char *text, size_t n, const char *tools_json, bool parallel,
                         srv_tool_calls *out);
void srv_tool_calls_free(srv_tool_calls *c);

/* While streaming: how many bytes of text[0..n) can go out as content now, i.e. the bytes
 * before anything that is, or may grow into, the start of a call. */
size_t srv_tool_content_ready(srv_tool_format f, const char *text, size_t n);


#endif
