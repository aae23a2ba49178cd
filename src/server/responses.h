/* OpenAI's Responses API, stateless: POST /v1/responses as its clients (the SDKs' responses.create,
 * Codex CLI) speak it. input (a string, or items: messages, function_call, function_call_output,
 * reasoning) and instructions become a chat request (server/request.h), checked there too; the
 * reply is written as a Response (output items: reasoning, message, function_call; status
 * completed or incomplete; usage) or as its response.* server-sent events. Nothing is stored, so
 * previous_response_id, item_reference and store: true are refused (400). Pure functions over
 * bodies (fuzzed by tests/fuzz/fuzz_request.c). */
#ifndef NC_SERVER_RESPONSES_H
#define NC_SERVER_RESPONSES_H

#include <stddef.h>

#include "server/dialect.h"
#include "server/request.h"

/* The body as a chat request, and *writer: srv_responses's state for its reply, which reports
 * model (the model that answers) and echoes the request's settings. */
int srv_responses_request(const char *body, size_t len, const srv_limits *lim, const char *model, srv_request *out,
                          void **writer, srv_error *e);

extern const srv_dialect srv_responses;

#endif
