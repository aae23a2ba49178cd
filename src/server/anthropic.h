/* Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens, as Anthropic's
 * clients (Claude Code, the SDKs) speak it. A request is translated into a chat request
 * (server/request.h) and checked there too; the reply is written as a Message (content blocks
 * "thinking" from the reasoning, "text", "tool_use" from the calls; stop_reason, usage), or as
 * its server-sent events (message_start, ping, content_block_start / _delta / _stop,
 * message_delta, message_stop, error). Errors are {"type": "error", "error": {"type",
 * "message"}}. Pure functions over bodies (fuzzed by tests/fuzz/fuzz_request.c). */
#ifndef NC_SERVER_ANTHROPIC_H
#define NC_SERVER_ANTHROPIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/dialect.h"
#include "server/request.h"

/* The body of POST /v1/messages (count: of /v1/messages/count_tokens, where max_tokens may be
 * left out and stream is refused) as a chat request. A field Anthropic's API has and this server
 * does not implement is a 400 naming it. */
int srv_anthropic_request(const char *body, size_t len, bool count, const srv_limits *lim, srv_request *out,
                          srv_error *e);

extern const srv_dialect srv_anthropic;
/* The writer of one reply (srv_anthropic's state): the model's name as the request gave it. */
void *srv_anthropic_new(const char *model);

char *srv_anthropic_error(const srv_error *e);
/* /v1/messages/count_tokens: {"input_tokens": n}. */
char *srv_anthropic_count(int64_t input_tokens);

#endif
