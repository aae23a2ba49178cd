/* The public API's reading of a chat reply (nc_chat_reply_parse in include/nucleus.h): the
 * server's own reader (srv_reply_parse, reply.h) over the template's formats (chat_format.h), the
 * calls in OpenAI's shape as the server writes them (response.c), for programs on the library
 * (the CLI's chat, the Python package). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "server/chat_format.h"
#include "server/reply.h"
#include "server/response.h"

int nc_chat_reply_parse(const nc_chat_template *t, const nc_reply_params *p, const char *text, size_t n, bool done,
                        nc_chat_reply *out, nc_err *err) {
    *out = (nc_chat_reply){0};
    static const nc_reply_params none = {0};
    if (!p) p = &none;
    srv_chat_format f = srv_chat_format_of(t ? nc_chat_template_source(t) : NULL);
    srv_reply_opts o = {
        .reasoning = p->keep_reasoning ? NULL : f.reasoning,
        .calls = p->tools_json ? f.calls : NULL,
        .tools_json = p->tools_json,
        .first_call_only = !p->parallel_tool_calls,
    };
    o.in_reasoning = o.reasoning && p->prompt && srv_reasoning_opened(o.reasoning, p->prompt, p->prompt_len);
    if (p->prompt && srv_call_opened(f.calls, p->prompt, p->prompt_len)) o.opened = f.calls;
    srv_reply r;
    if (srv_reply_parse(&o, text, text ? n : 0, done, &r)) goto oom;
    char *calls = srv_json_tool_calls(&r.calls);
    if (!calls) {
        srv_reply_free(&r);
        goto oom;
    }
    *out = (nc_chat_reply){.reasoning = r.reasoning, .content = r.content, .tool_calls = calls,
                           .n_reasoning = r.n_reasoning, .n_content = r.n_content, .n_tool_calls = r.calls.n};
    r.reasoning = r.content = NULL; /* now the caller's */
    srv_reply_free(&r);
    return 0;
oom:
    if (err) snprintf(err->msg, sizeof err->msg, "out of memory reading the reply");
    return -1;
}

void nc_chat_reply_free(nc_chat_reply *r) {
    if (!r) return;
    free(r->reasoning);
    free(r->content);
    free(r->tool_calls);
    memset(r, 0, sizeof *r);
}

const char *nc_chat_reasoning_field(const nc_chat_template *t) {
    srv_chat_format f = srv_chat_format_of(t ? nc_chat_template_source(t) : NULL);
    return f.reasoning ? f.reasoning->message_key : NULL;
}
