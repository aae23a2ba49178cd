/* gpt-oss's replies (OpenAI's harmony format): messages, each a header naming its channel (and
 * a recipient for a call) then <|message|> and a body ended by <|end|>, <|call|> or
 * <|return|>; the next message starts with <|start|>assistant. The prompt ends with
 * <|start|>assistant, so the reply starts with its first header:
 *   <|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...
 *   <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
 * (the recipient may come before the channel: " to=functions.NAME<|channel|>commentary json").
 * Analysis is the reasoning, final and commentary without a recipient the content; a message to
 * functions.NAME is a call whose body is its arguments. */
#include <string.h>

#include <cjson/cJSON.h>

#include "server/marker.h"
#include "server/reply.h"

static const char MESSAGE[] = "<|message|>", CHANNEL[] = "<|channel|>", START[] = "<|start|>", TO[] = "to=functions.";
static const char *const ENDS[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};

typedef struct hmsg {
    size_t start;              /* its header's first byte */
    size_t body, body_end;     /* its body */
    size_t next;               /* where the next message starts */
    bool ended;                /* a marker ended it */
    char channel[16];
    char to[72];               /* the function called, or "" */
} hmsg;

/* The earliest of the markers that end a body in t[i..n); *partial: none, but the text's end may
 * begin one (at *at). */
static size_t body_end(const char *t, size_t n, size_t i, size_t *len, bool *partial) {
    size_t best = n;
    *partial = false;
    *len = 0;
    for (size_t k = 0; k < sizeof ENDS / sizeof *ENDS; k++) {
        size_t at;
        mk_result r = mk_find(t, n, i, ENDS[k], &at);
        if (r != MK_NO && at < best) {
            best = at;
            *partial = r == MK_PARTIAL;
            *len = k == 3 ? 0 : strlen(ENDS[k]); /* a new message without an end: <|start|> is its */
        }
    }
    return best;
}

/* The header t[h..e): its channel and recipient. */
static void header(const char *t, size_t h, size_t e, hmsg *m) {
    const char *c = memmem(t + h, e - h, CHANNEL, strlen(CHANNEL));
    if (c) {
        c += strlen(CHANNEL);
        size_t k = 0;
        while (c < t + e && k + 1 < sizeof m->channel && ((*c >= 'a' && *c <= 'z') || *c == '_')) m->channel[k++] = *c++;
        m->channel[k] = 0;
    }
    const char *to = memmem(t + h, e - h, TO, strlen(TO));
    if (to) {
        to += strlen(TO);
        size_t k = 0;
        while (to < t + e && k + 1 < sizeof m->to &&
               ((*to >= 'a' && *to <= 'z') || (*to >= 'A' && *to <= 'Z') || (*to >= '0' && *to <= '9') || *to == '_' ||
                *to == '-'))
            m->to[k++] = *to++;
        m->to[k] = 0;
    }
}

/* The message starting at t[i]: 1 read (complete or cut), 0 none (not a header), -1 the text
 * ends inside its header. */
static int read_message(const char *t, size_t n, size_t i, hmsg *m) {
    *m = (hmsg){.start = i};
    size_t h = i, end;
    mk_result start = mk_match(t, n, h, START, &end);
    if (start == MK_PARTIAL) return -1;
    if (start == MK_YES) { /* <|start|>assistant */
        h = end;
        while (h < n && t[h] >= 'a' && t[h] <= 'z') h++;
    }
    if (h == n) return -1;
    if (mk_match(t, n, h, CHANNEL, &end) != MK_YES && mk_match(t, n, h, " to=", &end) != MK_YES)
        return mk_match(t, n, h, CHANNEL, &end) == MK_PARTIAL || mk_match(t, n, h, " to=", &end) == MK_PARTIAL ? -1 : 0;
    size_t at;
    mk_result r = mk_find(t, n, h, MESSAGE, &at);
    if (r != MK_YES) return -1;
    header(t, h, at, m);
    m->body = at + strlen(MESSAGE);
    size_t len;
    bool partial;
    m->body_end = body_end(t, n, m->body, &len, &partial);
    m->ended = m->body_end < n && !partial;
    m->next = m->ended ? m->body_end + len : n;
    return 1;
}

/* A call's arguments: its body when it is a JSON object. 0 added, 1 not a call (malformed, a tool
 * the request did not declare, or a second call where only one may be), -1 no memory. */
static int harmony_call(const srv_reply_opts *o, const hmsg *m, const char *t, srv_tool_calls *calls) {
    if (!srv_tool_declared(o->tools_json, m->to) || (o->first_call_only && calls->n)) return 1;
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(t + m->body, m->body_end - m->body, &end, false);
    bool ok = cJSON_IsObject(v) && mk_skip_blanks(t, m->body_end, (size_t)(end - t)) == m->body_end;
    char *args = ok ? cJSON_PrintUnformatted(v) : NULL;
    cJSON_Delete(v);
    if (ok && !args) return -1;
    int rc = ok ? srv_tool_calls_add(calls, m->to, args, false) : 1;
    cJSON_free(args);
    return rc;
}

int srv_harmony_parse(const srv_reply_opts *o, const char *t, size_t n, bool done, srv_text *reasoning,
                      srv_text *content, srv_tool_calls *calls) {
    size_t i = 0;
    bool first_content = true, first_reasoning = true;
    while (i < n) {
        hmsg m;
        int got = read_message(t, n, i, &m);
        if (got < 0 && !done) return 0; /* a header being written */
        if (got <= 0) { /* not harmony after all, or a header cut: content as written */
            srv_text_put(content, t + i, n - i);
            return 0;
        }
        /* an unended body being streamed: without what may be the start of its end marker */
        size_t e = m.body_end;
        bool last = !m.ended && !done;
        if (m.to[0] && o->calls && calls) {
            if (!done) return 0; /* calls, and what follows them, wait for the whole reply */
            int rc = harmony_call(o, &m, t, calls);
            if (rc < 0) return -1;
            if (rc) srv_text_put(content, t + m.start, m.next - m.start); /* cut or malformed: kept */
        } else if (!strcmp(m.channel, "analysis")) {
            if (!first_reasoning) srv_text_put(reasoning, "\n", 1);
            srv_text_put(reasoning, t + m.body, e - m.body);
            first_reasoning = false;
        } else {
            if (!first_content) srv_text_put(content, "\n", 1);
            srv_text_put(content, t + m.body, e - m.body);
            first_content = false;
        }
        if (last) return 0;
        i = m.next;
    }
    return 0;
}
