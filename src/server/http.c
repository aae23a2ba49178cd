/* libmicrohttpd glue: routing, authentication, body limits, JSON replies and the server-sent
 * events writer.
 *
 * The daemon runs one thread per connection, so a handler may block: a request that does not
 * stream waits in the access handler for its job, a streaming one waits inside the content
 * reader for the next piece. While waiting, both look at the socket every 100 ms: a client that
 * has closed it cancels its job, which frees its slots at the engine's next step.
 *
 * The listener opens before the model loads and stays open while the server drains, so a load
 * balancer or an orchestrator can tell "not ready" from "gone": /health answers 503 with
 * {"status":"loading"} or {"status":"draining"}, and generation requests get 503, which a
 * balancer retries on another replica. */
#include "server/server.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "server/access.h"
#include "server/anthropic.h"
#include "server/conn_guard.h"
#include "server/dialect.h"
#include "server/embed.h"
#include "server/instance.h"
#include "server/job.h"
#include "server/llama_api.h"
#include "server/metrics.h"
#include "server/models.h"
#include "server/prepare.h"
#include "server/request.h"
#include "server/response.h"
#include "server/responses.h"
#include "server/router.h"
#include "server/scheduler.h"
#include "server/watch.h"
#include "server/web.h"

/* What the server can do now; only srv_start and srv_stop change it. */
enum { SRV_LOADING, SRV_READY, SRV_DRAINING };

struct srv_server {
    struct MHD_Daemon *d;
    atomic_int state;      /* SRV_READY (stored with release) publishes everything below */
    atomic_int active;     /* requests between their headers and their response's last byte */
    atomic_bool stopping;  /* srv_stop began: waits for a model to load end (503) */
    srv_router *router;    /* the models: one (-m), or those of --models-dir / --models */
    srv_instance *single;  /* -m: the one model, loaded from srv_start to srv_stop */
    srv_config base;       /* what every model is served with (presets change some) */
    nc_model *given, *given_draft; /* -m: the models srv_start was given */
    srv_metrics metrics;   /* requests and responses; each model keeps its own others */
    bool metrics_ready;
    char *api_key, *model_id;
    char *allowed_hosts;   /* srv_host_allowed's list */
    char *cors;            /* --cors: srv_origin_allowed's list, or NULL (off) */
    char *slot_dir;        /* --slot-save-path, or NULL */
    uint64_t slot_max_bytes; /* what its files may hold */
    pthread_mutex_t slot_mu; /* one save at a time: the budget and the files being written are the
                                directory's, whichever model saves */
    size_t max_body;
    double drain_seconds;
    double request_seconds; /* --request-timeout: a computing request's deadline (0: none) */
    conn_guard *guard;     /* the deadlines of headers and bodies */
    int port;
    bool loopback;         /* the listening address is a loopback one */
    int64_t created;
    char note[512];
};

/* One HTTP request, from its headers to its response. */
typedef struct conn_req {
    srv_endpoint ep;
    srv_lease lease;       /* the model it uses (released when it is answered, or by its stream) */
    bool refused;          /* decided from the headers (or the body's size): answer `early` */
    srv_error early;
    const char *allow;     /* Allow header of a 405 */
    const srv_asset *asset; /* a file of the web page to send */
    bool preflight;        /* a CORS preflight from an allowed origin: 204 */
    char *body;
    size_t len, cap;
    srv_access acc;        /* its access-log line */
    double deadline;       /* srv_now() seconds when its work must end (0: none) */
    bool logged;           /* a stream took acc and writes the line when it ends */
} conn_req;

/* The request the calling connection thread is answering (the daemon runs a thread per
 * connection), so that send_body can note the status for the access log. */
static _Thread_local conn_req *answering;

/* ---- Replies ------------------------------------------------------------------------------- */

/* The X-Request-Id of the request being answered: the client's when sane, else a fresh one. The
 * daemon runs each connection, its access handler and its content reader, on one thread, so a
 * thread-local holds it from the headers to the response without passing it everywhere. */
static _Thread_local char request_id[SRV_REQUEST_ID_MAX + 1];

static void take_request_id(struct MHD_Connection *conn) {
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-Id");
    if (h && srv_request_id_sane(h)) snprintf(request_id, sizeof request_id, "%s", h);
    else snprintf(request_id, sizeof request_id, "%016llx%016llx", (unsigned long long)srv_random_u64(),
                  (unsigned long long)srv_random_u64());
}

/* The request's Origin when --cors allows it, else "": its responses then say it may read them.
 * Thread-local as request_id is. */
static _Thread_local char cors_origin[SRV_ORIGIN_MAX + 1];

static void take_origin(const srv_server *sv, struct MHD_Connection *conn) {
    const char *o = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    if (srv_origin_allowed(o, sv->cors)) snprintf(cors_origin, sizeof cors_origin, "%s", o);
    else cors_origin[0] = 0;
}

/* The headers every response to an allowed origin carries; Vary, so that a cache in between
 * keeps one copy per origin. */
static void add_cors_headers(struct MHD_Response *r) {
    if (!cors_origin[0]) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", cors_origin);
    MHD_add_response_header(r, "Access-Control-Expose-Headers", "X-Request-Id");
    MHD_add_response_header(r, "Vary", "Origin");
}

/* Queue body (malloc'd, taken) as the response. allow: the Allow header of a 405. */
static enum MHD_Result send_body(srv_server *sv, struct MHD_Connection *conn, int status, char *body,
                                 const char *type, const char *allow) {
    if (!body) return MHD_NO; /* out of memory: drop the connection */
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, "X-Request-Id", request_id);
    if (status == 503) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (allow) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    add_cors_headers(r);
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    srv_metrics_response(&sv->metrics, status);
    if (answering) answering->acc.status = status;
    return ok;
}

static enum MHD_Result send_json(srv_server *sv, struct MHD_Connection *conn, int status, char *json) {
    return send_body(sv, conn, status, json, "application/json", NULL);
}

/* Anthropic's endpoints answer errors in Anthropic's shape, every other one in OpenAI's. */
static bool anthropic_ep(srv_endpoint ep) { return ep == SRV_EP_MESSAGES || ep == SRV_EP_COUNT_TOKENS; }

static char *error_body(const conn_req *rq, const srv_error *e) {
    return rq && anthropic_ep(rq->ep) ? srv_anthropic_error(e) : srv_json_error(e);
}

static enum MHD_Result send_error(srv_server *sv, struct MHD_Connection *conn, const srv_error *e) {
    return send_body(sv, conn, e->status, error_body(answering, e), "application/json", NULL);
}

/* ---- Routing and early refusals ------------------------------------------------------------ */

typedef struct route {
    const char *path;
    const char *method;    /* GET routes answer HEAD too */
    srv_endpoint ep;
} route;

static const route routes[] = {
    {"/health", "GET", SRV_EP_HEALTH},
    {"/v1/models", "GET", SRV_EP_MODELS},
    {"/v1/completions", "POST", SRV_EP_COMPLETIONS},
    {"/v1/chat/completions", "POST", SRV_EP_CHAT},
    {"/tokenize", "POST", SRV_EP_TOKENIZE},
    {"/detokenize", "POST", SRV_EP_DETOKENIZE},
    {"/metrics", "GET", SRV_EP_METRICS},
    {"/v1/embeddings", "POST", SRV_EP_EMBEDDINGS},
    {"/apply-template", "POST", SRV_EP_APPLY_TEMPLATE},
    {"/v1/messages", "POST", SRV_EP_MESSAGES},
    {"/v1/messages/count_tokens", "POST", SRV_EP_COUNT_TOKENS},
    {"/v1/responses", "POST", SRV_EP_RESPONSES},
    {"/completion", "POST", SRV_EP_COMPLETION},
    {"/infill", "POST", SRV_EP_INFILL},
    {"/props", "GET", SRV_EP_PROPS},
    {"/slots", "GET", SRV_EP_SLOTS_LIST},
    {"/models/load", "POST", SRV_EP_MODELS_LOAD},
    {"/models/unload", "POST", SRV_EP_MODELS_UNLOAD},
    {"/lora-adapters", "GET", SRV_EP_LORA_ADAPTERS},
};

/* /v1/models/{id}: the id is checked when answering. */
static const route model_route = {"/v1/models/", "GET", SRV_EP_MODELS};

/* Every /slots/{id}: the id is checked with the body. */
static const route slots_route = {"/slots/", "POST", SRV_EP_SLOTS};

static const route *find_route(const char *url) {
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (!strcmp(url, routes[i].path)) return &routes[i];
    if (!strncmp(url, slots_route.path, strlen(slots_route.path))) return &slots_route;
    if (!strncmp(url, model_route.path, strlen(model_route.path))) return &model_route;
    return NULL;
}

static bool method_ok(const route *rt, const char *method) {
    return !strcmp(method, rt->method) || (!strcmp(rt->method, "GET") && !strcmp(method, "HEAD"));
}

/* Compare without an early exit, so the time taken does not tell how much of the key matched. */
static bool same_secret(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    unsigned char diff = na != nb;
    for (size_t i = 0; i < na; i++) diff |= (unsigned char)(a[i] ^ b[i % (nb ? nb : 1)]);
    return diff == 0;
}

/* Authorization: Bearer KEY (OpenAI's clients), or x-api-key: KEY (Anthropic's). */
static bool authorized(const srv_server *sv, struct MHD_Connection *conn) {
    if (!sv->api_key) return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *x = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
    return (h && !strncmp(h, "Bearer ", 7) && same_secret(h + 7, sv->api_key)) || (x && same_secret(x, sv->api_key));
}

/* How many headers of one name a request has. */
typedef struct header_count {
    const char *name;
    int n;
} header_count;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind, (void)value;
    header_count *c = cls;
    if (!strcasecmp(key, c->name)) c->n++;
    return MHD_YES;
}

static int n_headers(struct MHD_Connection *conn, const char *name) {
    header_count c = {name, 0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, count_header, &c);
    return c.n;
}

__attribute__((format(printf, 4, 5))) static void refuse(conn_req *rq, int status, const char *code, const char *fmt,
                                                          ...) {
    rq->refused = true;
    va_list ap;
    va_start(ap, fmt);
    char msg[sizeof rq->early.message];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_error_set(&rq->early, status, "invalid_request_error", code, NULL, "%s", msg);
}

/* A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method) while --cors is on:
 * answered before anything else, as it carries neither the key nor a body. An origin not in the
 * list gets 403 (with CORS off, OPTIONS is any other method: 404, 401 or 405). */
static bool preflight(srv_server *sv, struct MHD_Connection *conn, const char *method, conn_req *rq) {
    if (!sv->cors || strcmp(method, "OPTIONS") ||
        !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Method"))
        return false;
    const char *o = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    if (!o) return false;
    if (cors_origin[0]) rq->preflight = true;
    else refuse(rq, 403, "origin_not_allowed", "Origin '%.200s' is not one this server answers to (--cors)", o);
    return true;
}

/* A file of the web page: served without the API key (it holds no data; the page asks for the
 * key and sends it with its API calls), GET and HEAD only. */
static bool web_file(const char *url, const char *method, conn_req *rq) {
    if (!(rq->asset = srv_asset_find(url))) return false;
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        rq->allow = "GET, HEAD";
        refuse(rq, 405, "method_not_allowed", "%s %s is not allowed; use GET", method, url);
    }
    return true;
}

/* Everything decidable from the request line and headers: 404, 401, 405, 413. */
static void first_look(srv_server *sv, struct MHD_Connection *conn, const char *url, const char *method,
                       const char *version, conn_req *rq) {
    take_request_id(conn);
    take_origin(sv, conn);
    const route *rt = find_route(url);
    rq->ep = rt ? rt->ep : SRV_EP_OTHER;
    srv_metrics_request(&sv->metrics, rq->ep);
    if (preflight(sv, conn, method, rq)) return;
    /* RFC 9112 3.2: exactly one Host, required from HTTP/1.1 on; which of two a check would see
     * and a proxy would route by is ambiguous */
    int n_hosts = n_headers(conn, MHD_HTTP_HEADER_HOST);
    if (n_hosts > 1) return refuse(rq, 400, "invalid_request_error", "the request has %d Host headers", n_hosts);
    if (n_hosts == 0 && strcmp(version, MHD_HTTP_VERSION_1_0))
        return refuse(rq, 400, "invalid_request_error", "the request has no Host header (%s requires one)", version);
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!srv_host_allowed(host, sv->allowed_hosts))
        return refuse(rq, 403, "host_not_allowed", "Host '%.200s' is not one this server answers to (--allowed-hosts)", host);
    if (!rt && web_file(url, method, rq)) return;
    /* the key first: without it, not even which paths exist is told */
    if ((!rt || rt->ep != SRV_EP_HEALTH) && !authorized(sv, conn))
        return refuse(rq, 401, "invalid_api_key", "missing or wrong API key (Authorization: Bearer KEY, or x-api-key: KEY)");
    if (!rt) return refuse(rq, 404, "not_found", "no such endpoint: %s", url);
    if (!method_ok(rt, method)) {
        rq->allow = !strcmp(rt->method, "GET") ? "GET, HEAD" : rt->method;
        return refuse(rq, 405, "method_not_allowed", "%s %s is not allowed; use %s", method, url, rt->method);
    }
    /* a JSON body, said so: a page on another origin can only send the types of an HTML form
     * (text/plain, form encodings) without a CORS preflight, so this refuses cross-site forms */
    if (!strcmp(rt->method, "POST")) {
        const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        if (!srv_json_media_type(ct))
            return refuse(rq, 415, "unsupported_media_type",
                          "the body must be JSON sent with Content-Type: application/json (got %.100s%s%s)",
                          ct ? "'" : "none", ct ? ct : "", ct ? "'" : "");
    }
    int n_lengths = n_headers(conn, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (n_lengths > 1) /* RFC 9110 8.6: which one frames the body is ambiguous (request smuggling) */
        return refuse(rq, 400, "invalid_request_error", "the request has %d Content-Length headers", n_lengths);
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > sv->max_body)
        refuse(rq, 413, "request_too_large", "the body is larger than the limit of %zu bytes", sv->max_body);
}

/* Keep the body up to the limit; past it, discard the rest and answer 413. */
static void take_body(srv_server *sv, conn_req *rq, const char *data, size_t size) {
    if (rq->refused) return;
    if (rq->len + size > sv->max_body) {
        free(rq->body);
        rq->body = NULL;
        rq->len = rq->cap = 0;
        return refuse(rq, 413, "request_too_large", "the body is larger than the limit of %zu bytes", sv->max_body);
    }
    if (rq->len + size + 1 > rq->cap) {
        size_t cap = 2 * (rq->len + size + 1);
        char *grown = realloc(rq->body, cap);
        if (!grown) {
            srv_error_set(&rq->early, 500, "server_error", NULL, NULL, "out of memory for the body");
            rq->refused = true;
            return;
        }
        rq->body = grown;
        rq->cap = cap;
    }
    memcpy(rq->body + rq->len, data, size);
    rq->len += size;
    rq->body[rq->len] = 0;
}

/* ---- Client presence ----------------------------------------------------------------------- */

static int conn_fd(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* What ends a request's wait for its model to be loaded: its client leaving, the server
 * stopping, its deadline. */
static srv_watch model_watch(const srv_server *sv, struct MHD_Connection *conn, const conn_req *rq) {
    return (srv_watch){.fd = conn_fd(conn), .deadline = rq->deadline, .timeout = sv->request_seconds,
                       .stopping = &sv->stopping};
}

/* What ends the request's work on model in: its client leaving, the server stopping, its
 * deadline. */
static srv_watch watch_of(const srv_server *sv, srv_instance *in, struct MHD_Connection *conn, const conn_req *rq) {
    return (srv_watch){.fd = conn_fd(conn), .deadline = rq->deadline, .timeout = sv->request_seconds,
                       .stopping = &in->stopping};
}

/* ---- Generation replies -------------------------------------------------------------------- */

static int piece_of(void *ctx, int32_t token, char *buf, int cap) { return nc_token_piece(ctx, token, buf, cap); }

static void reply_meta(srv_instance *in, srv_api api, char *id, size_t id_cap, srv_resp_meta *m) {
    snprintf(id, id_cap, "%s-%016llx", api == SRV_API_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)srv_random_u64());
    *m = (srv_resp_meta){.api = api, .id = id, .model = in->id, .created = (int64_t)time(NULL),
                         .piece = piece_of, .piece_ctx = (void *)in->mc.m};
}

/* Under j->mu. */
static srv_usage job_usage(const srv_job *j) {
    srv_usage u = {.cached_tokens = j->cached_tokens, .speculative = j->speculative, .spec = j->spec};
    for (int32_t p = 0; p < j->n_prompts; p++) u.prompt_tokens += j->n_prompt[p];
    for (int32_t i = 0; i < j->n_choices; i++) u.completion_tokens += j->out[i].n_tokens;
    return u;
}

/* Choice i's text split into reasoning, content and calls (chat; a completion's text is all
 * content). done: the choice is finished (else what a stream may send now). Under j->mu.
 * -1: out of memory. */
static int choice_reply(const srv_job *j, int32_t i, bool done, srv_reply *r) {
    const srv_choice_out *o = &j->out[i];
    return srv_reply_parse(&j->reply, o->text, o->n_text, done, r);
}

/* What a dialect is told of the one choice that ended (its reply r). Under j->mu. */
static srv_dialect_end dialect_end(const srv_job *j, const srv_reply *r, const srv_usage *u) {
    const srv_choice_out *o = &j->out[0];
    return (srv_dialect_end){.reply = r, .finish = o->finish, .usage = u, .lp = o->lp, .n_lp = o->n_lp,
                             .stop_word = o->stop_word >= 0 && o->stop_word < j->stop.n_stop ? j->stop.stop[o->stop_word] : NULL,
                             .prompt = j->prompts[0], .n_prompt = j->n_prompt[0],
                             .prompt_ms = j->t_first > 0 ? (j->t_first - j->t_submit) * 1000 : 0,
                             .predicted_ms = j->t_first > 0 ? (j->t_last - j->t_first) * 1000 : 0};
}

/* How a generation is answered: OpenAI's shapes (d NULL), or a dialect's (ds: its state). */
typedef struct reply_kind {
    srv_api api;
    const srv_dialect *d;
    void *ds;
} reply_kind;

static enum MHD_Result reply_whole(srv_server *sv, srv_instance *in, struct MHD_Connection *conn, srv_job *j,
                                   const srv_resp_meta *m, const reply_kind *k) {
    int fd = conn_fd(conn);
    uint64_t seen = 0;
    while (!srv_job_finished(j)) {
        seen = srv_job_wait(j, seen, 100);
        if (srv_peer_gone(fd)) {
            srv_sched_cancel(in->sched, j);
            return MHD_NO;
        }
    }
    pthread_mutex_lock(&j->mu);
    if (j->failed) {
        srv_error e = j->error;
        pthread_mutex_unlock(&j->mu);
        return send_error(sv, conn, &e);
    }
    srv_choice_view *views = calloc((size_t)j->n_choices, sizeof *views);
    srv_reply *replies = calloc((size_t)j->n_choices, sizeof *replies);
    bool ok = views && replies;
    for (int32_t i = 0; ok && i < j->n_choices; i++) {
        const srv_choice_out *o = &j->out[i];
        ok = choice_reply(j, i, true, &replies[i]) == 0;
        views[i] = (srv_choice_view){.index = i, .text = replies[i].content, .n_text = replies[i].n_content,
                                     .reasoning = replies[i].reasoning, .n_reasoning = replies[i].n_reasoning,
                                     .logprobs = j->logprobs, .lp = o->lp, .n_lp = o->n_lp, .finish = o->finish,
                                     .explain = j->explain_top_n > 0, .steps = o->steps, .n_steps = o->n_steps,
                                     .prompt = j->prompts[i / j->n], .n_prompt = j->n_prompt[i / j->n],
                                     .calls = j->tool_calls ? &replies[i].calls : NULL};
    }
    srv_usage u = job_usage(j);
    char *body = NULL;
    if (ok && k->d) {
        srv_dialect_end end = dialect_end(j, &replies[0], &u);
        body = k->d->whole(k->ds, &end);
    } else if (ok) {
        body = srv_json_response(m, views, j->n_choices, &u);
    }
    pthread_mutex_unlock(&j->mu);
    for (int32_t i = 0; replies && i < j->n_choices; i++) srv_reply_free(&replies[i]);
    free(replies);
    free(views);
    return send_json(sv, conn, 200, body);
}

/* ---- Server-sent events -------------------------------------------------------------------- */

typedef struct stream_cursor {
    size_t text;           /* bytes of the choice's content sent */
    size_t reasoning;      /* bytes of its reasoning sent */
    int32_t lp;            /* logprob entries sent */
    int32_t steps;         /* nucleus_explain steps sent */
    bool prompt_sent;      /* nucleus_explain's prompt_tokens (in the choice's first chunk) */
    size_t lp_offset;      /* completions' text_offset of the next entry */
    bool role_sent, finish_sent;
    bool parsed;           /* the finished text was parsed into calls */
    srv_reply whole;       /* then: the whole reply */
} stream_cursor;

typedef struct sse_stream {
    srv_server *sv;
    srv_instance *in;
    srv_lease lease;       /* the model, held until the daemon lets go of the stream */
    srv_job *j;
    srv_resp_meta meta;
    reply_kind kind;       /* OpenAI's chunks, or a dialect's events */
    bool begun;            /* the dialect's first events are out */
    char id[64];
    bool include_usage;
    int fd;
    uint64_t seen;
    stream_cursor *cur;
    char *buf;             /* events formatted, not yet handed to the daemon */
    size_t len, off, cap;
    bool ended, broken;    /* [DONE] is in buf; out of memory */
    srv_access acc;        /* written, with the job's tokens, when the daemon lets go of the stream */
} sse_stream;

static bool sse_reserve(sse_stream *st, size_t extra) {
    if (st->len + extra <= st->cap) return true;
    size_t cap = 2 * (st->len + extra);
    char *grown = realloc(st->buf, cap);
    if (!grown) return false;
    st->buf = grown;
    st->cap = cap;
    return true;
}

static void sse_append(sse_stream *st, const char *s, size_t n) {
    memcpy(st->buf + st->len, s, n);
    st->len += n;
}

/* One event "data: JSON\n\n" (json malloc'd, taken; NULL means out of memory). */
static void sse_event(sse_stream *st, char *json) {
    size_t n = json ? strlen(json) : 0;
    if (!json || !sse_reserve(st, n + 8)) {
        free(json);
        st->broken = true;
        return;
    }
    sse_append(st, "data: ", 6);
    sse_append(st, json, n);
    sse_append(st, "\n\n", 2);
    free(json);
}

/* Events a dialect wrote whole (malloc'd, taken; NULL means out of memory). */
static void sse_raw(sse_stream *st, char *text) {
    size_t n = text ? strlen(text) : 0;
    if (!text || !sse_reserve(st, n + 1)) {
        free(text);
        st->broken = true;
        return;
    }
    sse_append(st, text, n);
    free(text);
}

/* nucleus_explain's part of a chunk: the steps not sent yet, and the prompt's ids in the
 * choice's first chunk. Under j->mu. */
static void explain_view(const srv_job *j, int32_t i, stream_cursor *cu, srv_choice_view *v) {
    if (j->explain_top_n <= 0) return;
    const srv_choice_out *o = &j->out[i];
    v->explain = true;
    v->steps = o->steps + cu->steps;
    v->n_steps = o->n_steps - cu->steps;
    cu->steps = o->n_steps;
    if (!cu->prompt_sent) {
        v->prompt = j->prompts[i / j->n];
        v->n_prompt = j->n_prompt[i / j->n];
        cu->prompt_sent = true;
    }
}

/* The reply of choice i as far as it may be shown: the whole one once the choice is done
 * (parsed once, into cu->whole), else *now (freed by the caller). NULL: out of memory. */
static const srv_reply *reply_so_far(sse_stream *st, int32_t i, srv_reply *now) {
    const srv_choice_out *o = &st->j->out[i];
    stream_cursor *cu = &st->cur[i];
    if (o->done && !cu->parsed) {
        cu->parsed = true;
        if (choice_reply(st->j, i, true, &cu->whole)) return NULL;
    } else if (!o->done) {
        if (choice_reply(st->j, i, false, now)) return NULL;
        return now;
    }
    return &cu->whole;
}

/* A dialect's events for the one choice: its start, what is new of the reasoning, the content
 * and the token records, its end. Under j->mu. */
static void sse_dialect(sse_stream *st) {
    srv_job *j = st->j;
    const srv_choice_out *o = &j->out[0];
    stream_cursor *cu = &st->cur[0];
    const srv_dialect *d = st->kind.d;
    if (!st->begun) {
        sse_raw(st, d->begin(st->kind.ds, j->n_prompt[0]));
        st->begun = true;
    }
    if (j->failed) return;
    srv_reply now = {0};
    const srv_reply *r = reply_so_far(st, 0, &now);
    if (!r) {
        st->broken = true;
        srv_reply_free(&now);
        return;
    }
    size_t rs = r->n_reasoning > cu->reasoning ? cu->reasoning : r->n_reasoning;
    size_t cs = r->n_content > cu->text ? cu->text : r->n_content;
    if (r->n_reasoning > rs || r->n_content > cs || o->n_lp > cu->lp) {
        sse_raw(st, d->delta(st->kind.ds, r->reasoning ? r->reasoning + rs : "", r->n_reasoning - rs,
                             r->content ? r->content + cs : "", r->n_content - cs, o->lp + cu->lp, o->n_lp - cu->lp));
        if (r->n_content > cu->text) cu->text = r->n_content;
        if (r->n_reasoning > cu->reasoning) cu->reasoning = r->n_reasoning;
        cu->lp = o->n_lp;
    }
    srv_reply_free(&now);
    if (o->done && !cu->finish_sent) {
        srv_usage u = job_usage(j);
        srv_dialect_end end = dialect_end(j, &cu->whole, &u);
        sse_raw(st, d->end(st->kind.ds, &end));
        cu->finish_sent = true;
    }
}

/* The chunks one choice owes the client: the assistant role (chat, once), new text, logprobs and
 * explain steps, the finish reason (once its text is all out). Under j->mu. */
static void sse_choice(sse_stream *st, int32_t i) {
    const srv_choice_out *o = &st->j->out[i];
    stream_cursor *cu = &st->cur[i];
    if (st->meta.api == SRV_API_CHAT && !cu->role_sent) {
        srv_choice_view v = {.index = i, .text = ""};
        explain_view(st->j, i, cu, &v);
        sse_event(st, srv_json_chunk(&st->meta, &v, true, st->include_usage));
        cu->role_sent = true;
    }
    /* what may still become a call or close the reasoning is held back until the choice is done */
    srv_reply now = {0};
    const srv_reply *r = reply_so_far(st, i, &now);
    if (!r) {
        st->broken = true;
        srv_reply_free(&now);
        return;
    }
    /* each delta is what the split gives beyond what went out (it only grows) */
    size_t rs = r->n_reasoning > cu->reasoning ? cu->reasoning : r->n_reasoning;
    size_t cs = r->n_content > cu->text ? cu->text : r->n_content;
    if (r->n_reasoning > rs || r->n_content > cs || o->n_lp > cu->lp || o->n_steps > cu->steps) {
        srv_choice_view v = {.index = i, .text = r->content ? r->content + cs : "", .n_text = r->n_content - cs,
                             .reasoning = r->reasoning ? r->reasoning + rs : "", .n_reasoning = r->n_reasoning - rs,
                             .logprobs = st->j->logprobs, .lp = o->lp + cu->lp, .n_lp = o->n_lp - cu->lp,
                             .text_offset = cu->lp_offset};
        explain_view(st->j, i, cu, &v);
        sse_event(st, srv_json_chunk(&st->meta, &v, false, st->include_usage));
        for (int32_t k = cu->lp; k < o->n_lp; k++) {
            int n = nc_token_piece(st->meta.piece_ctx, o->lp[k].token, NULL, 0);
            cu->lp_offset += n > 0 ? (size_t)n : 0;
        }
        if (r->n_content > cu->text) cu->text = r->n_content;
        if (r->n_reasoning > cu->reasoning) cu->reasoning = r->n_reasoning;
        cu->lp = o->n_lp;
    }
    srv_reply_free(&now);
    if (o->done && !cu->finish_sent && !st->j->failed) {
        const srv_tool_calls *calls = &cu->whole.calls;
        for (int32_t k = 0; k < calls->n; k++) /* OpenAI's order: the call's name, then its arguments */
            for (int head = 1; head >= 0; head--)
                sse_event(st, srv_json_tool_call_chunk(&st->meta, i, k, &calls->calls[k], head, st->include_usage));
        srv_choice_view v = {.index = i, .text = "", .finish = o->finish, .calls = calls};
        sse_event(st, srv_json_chunk(&st->meta, &v, false, st->include_usage));
        cu->finish_sent = true;
    }
}

/* Format whatever the job has that the client has not seen; at the end an error event (if the
 * job failed), the usage chunk (if asked), and [DONE] (OpenAI's streams; a dialect's end with
 * its own last event). */
static void sse_format(sse_stream *st) {
    srv_job *j = st->j;
    pthread_mutex_lock(&j->mu);
    st->seen = j->version;
    if (st->kind.d) sse_dialect(st);
    else
        for (int32_t i = 0; i < j->n_choices; i++) sse_choice(st, i);
    if (j->n_done == j->n_choices) {
        srv_usage u = job_usage(j);
        if (st->kind.d) {
            if (j->failed) sse_raw(st, st->kind.d->error(st->kind.ds, &j->error));
        } else {
            if (j->failed) sse_event(st, srv_json_error(&j->error));
            else if (st->include_usage) sse_event(st, srv_json_usage_chunk(&st->meta, &u));
            if (sse_reserve(st, 14)) sse_append(st, "data: [DONE]\n\n", 14);
            else st->broken = true;
        }
        st->ended = true;
    }
    pthread_mutex_unlock(&j->mu);
}

/* Fill the buffer with the next events, waiting for the engine as long as there are none.
 * -1: the client left (its job is cancelled) or memory ran out. */
static int sse_fill(sse_stream *st) {
    st->len = st->off = 0;
    for (;;) {
        sse_format(st);
        if (st->broken) return -1;
        if (st->len > 0 || st->ended) return 0;
        srv_job_wait(st->j, st->seen, 100);
        if (srv_peer_gone(st->fd)) {
            srv_sched_cancel(st->in->sched, st->j);
            return -1;
        }
    }
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    sse_stream *st = cls;
    (void)pos;
    if (st->off == st->len) {
        if (st->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (sse_fill(st)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = st->len - st->off < max ? st->len - st->off : max;
    memcpy(buf, st->buf + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

/* The daemon is done with the stream: a job still running lost its client. */
static void sse_free(void *cls) {
    sse_stream *st = cls;
    if (!srv_job_finished(st->j)) srv_sched_cancel(st->in->sched, st->j);
    pthread_mutex_lock(&st->j->mu);
    srv_usage u = job_usage(st->j);
    pthread_mutex_unlock(&st->j->mu);
    st->acc.prompt_tokens = u.prompt_tokens;
    st->acc.completion_tokens = u.completion_tokens;
    srv_access_write(&st->acc);
    for (int32_t i = 0; st->cur && i < st->j->n_choices; i++) srv_reply_free(&st->cur[i].whole);
    srv_job_unref(st->j);
    if (st->kind.d) st->kind.d->free(st->kind.ds);
    srv_router_release(st->sv->router, &st->lease); /* last: the model may go now */
    free(st->cur);
    free(st->buf);
    free(st);
}

/* The stream takes the request's lease on its model and the dialect's state. */
static enum MHD_Result reply_stream(srv_server *sv, srv_instance *in, struct MHD_Connection *conn, conn_req *rq,
                                    srv_job *j, reply_kind *k, bool include_usage) {
    sse_stream *st = calloc(1, sizeof *st);
    if (st) st->cur = calloc((size_t)j->n_choices, sizeof *st->cur);
    if (!st || !st->cur) {
        if (st) free(st);
        srv_sched_cancel(in->sched, j);
        return MHD_NO;
    }
    st->sv = sv;
    st->in = in;
    st->lease = rq->lease;
    rq->lease = (srv_lease){.index = -1};
    st->kind = *k;
    k->ds = NULL;
    st->j = j;
    srv_job_ref(j);
    st->acc = rq->acc;
    st->acc.status = 200;
    rq->logged = true;
    st->include_usage = include_usage;
    st->fd = conn_fd(conn);
    reply_meta(in, k->api, st->id, sizeof st->id, &st->meta);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, st, sse_free);
    if (!r) {
        sse_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Request-Id", request_id);
    MHD_add_response_header(r, "X-Accel-Buffering", "no"); /* nginx: pass each event on at once */
    add_cors_headers(r);
    enum MHD_Result ok = MHD_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    srv_metrics_response(&sv->metrics, 200);
    return ok;
}

/* Work the watch stopped (e 499 from the work or the gate): no answer when the client left, else
 * the 503 of a shutdown or of the deadline. */
static enum MHD_Result send_stopped(srv_server *sv, struct MHD_Connection *conn, const srv_watch *w, srv_error *e) {
    if (e->status == 499) srv_watch_error(w, e);
    return e->status == 499 ? MHD_NO : send_error(sv, conn, e);
}

/* /infill's prompt, from the model's FIM tokens, in place of r's text. */
static int infill_prompt(const srv_instance *in, const srv_infill *f, srv_request *r, srv_error *e) {
    srv_prompt *p = &r->prompts[0];
    int32_t *ids, n;
    if (srv_infill_prompt(in->m, in->mc.n_ctx, f, p->text ? p->text : "", p->text_len, r->max_tokens, &ids, &n, e))
        return -1;
    free(p->text);
    *p = (srv_prompt){.tokens = ids, .n_tokens = n};
    return 0;
}

/* A parsed request run as a job and answered, whole or streamed, in k's shape; f: /infill's
 * parts, its prompt built under the same admission (NULL otherwise). r is freed. */
static enum MHD_Result run_request(srv_server *sv, srv_instance *in, struct MHD_Connection *conn, conn_req *rq,
                                   srv_request *r, const srv_infill *f, reply_kind *k, bool keep_tokens) {
    srv_error e;
    srv_job *j;
    srv_watch w = watch_of(sv, in, conn, rq);
    int rc = srv_gate_enter(&in->gate, &w, &e);
    if (!rc) {
        if (f) rc = infill_prompt(in, f, r, &e);
        if (!rc) rc = srv_prepare_job(&in->mc, r, srv_watch_gone, &w, &j, &e);
        srv_gate_leave(&in->gate);
    }
    bool stream = r->stream, include_usage = r->include_usage;
    srv_request_free(r);
    if (rc) return send_stopped(sv, conn, &w, &e);
    if (keep_tokens) j->logprobs = true; /* a record per token, with its id */
    j->deadline = rq->deadline;
    j->t_submit = srv_now();
    if (srv_sched_submit(in->sched, j)) {
        srv_job_unref(j);
        srv_error_set(&e, 503, "server_error", "server_overloaded", NULL,
                      "the server is busy (all slots and the queue are taken), retry later");
        return send_error(sv, conn, &e);
    }
    enum MHD_Result ok;
    rq->acc.kind = SRV_ACCESS_GENERATION;
    if (stream) {
        ok = reply_stream(sv, in, conn, rq, j, k, include_usage);
    } else {
        srv_resp_meta m;
        char id[64];
        reply_meta(in, k->api, id, sizeof id, &m);
        ok = reply_whole(sv, in, conn, j, &m, k);
        pthread_mutex_lock(&j->mu);
        srv_usage u = job_usage(j);
        pthread_mutex_unlock(&j->mu);
        rq->acc.prompt_tokens = u.prompt_tokens;
        rq->acc.completion_tokens = u.completion_tokens;
    }
    srv_job_unref(j);
    return ok;
}

static srv_limits limits_of(const srv_instance *in) { return (srv_limits){.n_vocab = in->mc.n_vocab, .max_n = in->mc.n_slots}; }

static enum MHD_Result handle_generation(srv_server *sv, srv_instance *in, struct MHD_Connection *conn, conn_req *rq,
                                         srv_api api) {
    srv_request r;
    srv_error e;
    srv_limits lim = limits_of(in);
    if (srv_request_parse(api, rq->body ? rq->body : "", rq->len, &lim, &r, &e)) return send_error(sv, conn, &e);
    reply_kind k = {.api = api};
    return run_request(sv, in, conn, rq, &r, NULL, &k, false);
}

/* POST /v1/messages (Anthropic's). */
static enum MHD_Result handle_messages(srv_server *sv, srv_instance *in, struct MHD_Connection *conn, conn_req *rq) {
    srv_request r;
    srv_error e;
    srv_limits lim = limits_of(in);
    if (srv_anthropic_request(rq->body ? rq->body : "", rq->len, false, &lim, &r, &e)) return send_error(sv, conn, &e);
    reply_kind k = {.api = SRV_API_CHAT, .d = &srv_anthropic, .ds = srv_anthropic_new(in->id)};
    if (!k.ds) {
        srv_request_free(&r);
        return MHD_NO;
    }
    enum MHD_Result ok = run_request(sv, in, conn, rq, &r, NULL, &k, false);
    srv_anthropic.free(k.ds);
    return ok;
}

/* POST /v1/responses (OpenAI's, stateless). */
static enum MHD_Result handle_responses(srv_server *sv, srv_instance *in, struct MHD_Connection *conn, conn_req *rq) {
    srv_request r;
    srv_error e;
    srv_limits lim = limits_of(in);
    reply_kind k = {.api = SRV_API_CHAT, .d = &srv_responses};
    if (srv_responses_request(rq->body ? rq->body : "", rq->len, &lim, in->id, &r, &k.ds, &e))
        return send_error(sv, conn, &e);
    enum MHD_Result ok = run_request(sv, in, conn, rq, &r, NULL, &k, false);
    srv_responses.free(k.ds);
    return ok;
}

/* POST /completion and /infill (llama.cpp's): /infill's prompt is built from the model's FIM
 * tokens. */
static enum MHD_Result handle_llama(srv_server *sv, srv_instance *in, struct MHD_Connection *conn, conn_req *rq,
                                    bool infill) {
    srv_request r;
    srv_error e;
    srv_infill f;
    srv_limits lim = limits_of(in);
    reply_kind k = {.api = SRV_API_COMPLETIONS, .d = &srv_llama};
    if (srv_llama_request(rq->body ? rq->body : "", rq->len, &lim, in->id, in->m, in->mc.n_ctx, &r, infill ? &f : NULL,
                          &k.ds, &e))
        return send_error(sv, conn, &e);
    bool tokens = srv_llama_wants_tokens(k.ds);
    enum MHD_Result ok = run_request(sv, in, conn, rq, &r, infill ? &f : NULL, &k, tokens);
    if (infill) srv_infill_free(&f);
    srv_llama.free(k.ds);
    return ok;
}

/* ---- Other endpoints ----------------------------------------------------------------------- */

static enum MHD_Result handle_tokenize(srv_server *sv, srv_instance *in, struct MHD_Connection *conn, conn_req *rq) {
    srv_tokenize_req t;
    srv_error e;
    if (srv_tokenize_parse(rq->body ? rq->body : "", rq->len, &t, &e)) return send_error(sv, conn, &e);
    int32_t *ids, n;
    srv_watch w = watch_of(sv, in, conn, rq);
    int rc = srv_gate_enter(&in->gate, &w, &e);
    if (!rc) {
        rc = srv_tokenize(in->mc.m, t.content, t.len, t.add_special, t.parse_special, &ids, &n, &e);
        srv_gate_leave(&in->gate);
    }
    srv_tokenize_free(&t);
    if (rc) return send_stopped(sv, conn, &w, &e);
    char *body = srv_json_tokens(ids, n);
    free(ids);
    return send_json(sv, conn, 200, body);
}

static enum MHD_Result handle_detokenize(srv_server *sv, srv_instance *in, struct MHD_Connection *conn, conn_req *rq) {
    srv_detokenize_req d;
    srv_error e;
    if (srv_detokenize_parse(rq->body ? rq->body : "", rq->len, in->mc.n_vocab, &d, &e))
        return send_error(sv, conn, &e);
    char *text;
    size_t len;
    srv_watch w = watch_of(sv, in, conn, rq);
    int rc = srv_gate_enter(&in->gate, &w, &e);
    if (!rc) {
        rc = srv_detokenize(in->mc.m, d.tokens, d.n_tokens, &text, &len, &e);
        srv_gate_leave(&in->gate);
    }
    srv_detokenize_free(&d);
    if (rc) return send_stopped(sv, conn, &w, &e);
    char *body = srv_json_content(text, len);
    free(text);
    return send_json(sv, conn, 200, body);
}

/* The embeddings of a request admitted by handle_embeddings; a client that leaves ends them
 * within a chunk of tokens, and gets no answer; past the deadline they end with its 503. */
static enum MHD_Result embed_request(srv_server *sv, srv_instance *in, struct MHD_Connection *conn, conn_req *rq) {
    srv_embed_req r;
    srv_error e;
    srv_limits lim = limits_of(in);
    if (srv_embed_parse(rq->body ? rq->body : "", rq->len, &lim, &r, &e)) return send_error(sv, conn, &e);
    srv_watch w = watch_of(sv, in, conn, rq);
    int32_t n_embd = in->emb.n_embd;
    float *vectors = malloc((size_t)r.n_inputs * (size_t)n_embd * sizeof *vectors);
    int rc = vectors ? 0 : -1;
    if (!vectors) srv_error_set(&e, 500, "server_error", NULL, NULL, "out of memory for the embeddings");
    for (int32_t i = 0; !rc && i < r.n_inputs; i++) {
        const srv_prompt *p = &r.inputs[i];
        int32_t *ids = p->tokens, n = p->n_tokens;
        if (p->text) rc = srv_tokenize(in->mc.m, p->text, p->text_len, true, true, &ids, &n, &e);
        if (!rc && n == 0) {
            srv_error_set(&e, 400, "invalid_request_error", NULL, "input", "input %d has no tokens", i);
            rc = -1;
        }
        if (!rc) rc = srv_embed(&in->emb, ids, n, vectors + (size_t)i * n_embd, srv_watch_gone, &w, &e);
        rq->acc.prompt_tokens += n;
        if (p->text) free(ids);
    }
    char *body = rc ? NULL : srv_json_embeddings(in->id, vectors, r.n_inputs, n_embd, r.base64,
                                                 rq->acc.prompt_tokens);
    free(vectors);
    srv_embed_free(&r);
    return rc ? send_stopped(sv, conn, &w, &e) : send_json(sv, conn, 200, body);
}

/* POST /apply-template (llama.cpp's): the prompt a chat request renders to, with its tools,
 * chat_template_kwargs and reasoning_effort, as the model would be given it. */
static enum MHD_Result handle_apply_template(srv_server *sv, srv_instance *in, struct MHD_Connection *conn, conn_req *rq) {
    srv_request r;
    srv_error e;
    srv_limits lim = limits_of(in);
    if (srv_request_parse(SRV_API_CHAT, rq->body ? rq->body : "", rq->len, &lim, &r, &e)) return send_error(sv, conn, &e);
    char *text;
    size_t len;
    bool add_bos, opened;
    srv_watch w = watch_of(sv, in, conn, rq);
    int rc = srv_gate_enter(&in->gate, &w, &e);
    if (!rc) {
        rc = srv_render_chat(&in->mc, &r, srv_watch_gone, &w, &text, &len, &add_bos, &opened, &e);
        srv_gate_leave(&in->gate);
    }
    srv_request_free(&r);
    if (rc) return send_stopped(sv, conn, &w, &e);
    char *body = srv_json_prompt(text, len);
    free(text);
    return send_json(sv, conn, 200, body);
}

/* POST /v1/embeddings: each input tokenized (a text with BOS as the vocabulary wants and special
 * tokens parsed, as llama.cpp's server) and embedded in turn. One request per model computes at a
 * time (its embedder's context), and as for generation at most --max-queue wait: more get 503. */
static enum MHD_Result handle_embeddings(srv_server *sv, srv_instance *in, struct MHD_Connection *conn, conn_req *rq) {
    srv_error e;
    rq->acc.kind = SRV_ACCESS_EMBEDDING;
    if (atomic_fetch_add(&in->embedding, 1) > in->max_queue) {
        atomic_fetch_sub(&in->embedding, 1);
        srv_error_set(&e, 503, "server_error", "server_overloaded", NULL,
                      "the server is busy (an embedding is computing and %d wait: --max-queue), retry later",
                      in->max_queue);
        return send_error(sv, conn, &e);
    }
    enum MHD_Result ok = embed_request(sv, in, conn, rq);
    atomic_fetch_sub(&in->embedding, 1);
    return ok;
}

/* POST /v1/messages/count_tokens (Anthropic's): the tokens of the prompt the request renders to. */
static enum MHD_Result handle_count_tokens(srv_server *sv, srv_instance *in, struct MHD_Connection *conn, conn_req *rq) {
    srv_request r;
    srv_error e;
    srv_limits lim = limits_of(in);
    if (srv_anthropic_request(rq->body ? rq->body : "", rq->len, true, &lim, &r, &e)) return send_error(sv, conn, &e);
    char *text;
    size_t len;
    bool add_bos, opened;
    int32_t *ids = NULL, n = 0;
    srv_watch w = watch_of(sv, in, conn, rq);
    int rc = srv_gate_enter(&in->gate, &w, &e);
    if (!rc) {
        rc = srv_render_chat(&in->mc, &r, srv_watch_gone, &w, &text, &len, &add_bos, &opened, &e);
        if (!rc) {
            rc = srv_tokenize(in->mc.m, text, len, add_bos, true, &ids, &n, &e);
            free(text);
        }
        srv_gate_leave(&in->gate);
    }
    srv_request_free(&r);
    free(ids);
    return rc ? send_stopped(sv, conn, &w, &e) : send_json(sv, conn, 200, srv_anthropic_count(n));
}

/* GET /props (llama.cpp's): the model, its context, template and defaults. */
static enum MHD_Result handle_props(srv_server *sv, srv_instance *in, struct MHD_Connection *conn) {
    srv_props p = {.model = in->id, .path = in->path, .chat_template = nc_chat_template_source(in->mc.chat),
                   .n_ctx = in->mc.n_ctx, .n_slots = in->mc.n_slots, .speculative = in->draft != NULL};
    return send_json(sv, conn, 200, srv_json_props(&p));
}

/* GET /slots (llama.cpp's): each slot's state; ?fail_on_no_slot=1: 503 when none is free. */
static enum MHD_Result handle_slot_list(srv_server *sv, srv_instance *in, struct MHD_Connection *conn) {
    int32_t n = srv_sched_n_slots(in->sched);
    srv_slot_info *info = calloc((size_t)n, sizeof *info);
    if (!info) return MHD_NO;
    srv_sched_slots(in->sched, info);
    const char *f = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "fail_on_no_slot");
    bool any_free = false;
    for (int32_t i = 0; i < n; i++) any_free = any_free || !info[i].busy;
    char *body = srv_json_slots(info, n, in->mc.n_ctx, in->draft != NULL);
    free(info);
    if (f && strcmp(f, "0") && !any_free) {
        free(body);
        srv_error e;
        srv_error_set(&e, 503, "server_error", "no_slot_available", NULL, "no slot is free");
        return send_error(sv, conn, &e);
    }
    return send_json(sv, conn, 200, body);
}

/* The models' objects for /v1/models (want NULL: every model) or /v1/models/{id}. */
typedef struct model_list {
    cJSON *data;
    const char *want;      /* one model's name, or NULL */
    cJSON *found;
    int64_t created;
    bool single;           /* -m: the model answers to its name only */
    bool oom;
} model_list;

static void list_model(void *user, const srv_model_status *st) {
    model_list *l = user;
    if (l->want && strcmp(l->want, st->preset->id)) return;
    cJSON *o = srv_model_object(st, l->created);
    if (!o) l->oom = true;
    else if (l->want) l->found = o;
    else if (!cJSON_AddItemToArray(l->data, o)) cJSON_Delete(o);
}

/* GET /v1/models: every model with its status. */
static enum MHD_Result handle_models(srv_server *sv, struct MHD_Connection *conn) {
    cJSON *root = cJSON_CreateObject();
    model_list l = {.data = root ? cJSON_AddArrayToObject(root, "data") : NULL, .created = sv->created};
    bool ok = l.data && cJSON_AddStringToObject(root, "object", "list");
    if (ok) srv_router_each(sv->router, list_model, &l);
    char *body = ok && !l.oom ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return send_json(sv, conn, 200, body);
}

/* GET /v1/models/{id}: the model named, else OpenAI's 404 naming the models served. */
static enum MHD_Result handle_model(srv_server *sv, struct MHD_Connection *conn, const char *url) {
    const char *id = url + strlen(model_route.path);
    model_list l = {.want = id, .created = sv->created};
    srv_router_each(sv->router, list_model, &l);
    if (l.found) {
        char *body = cJSON_PrintUnformatted(l.found);
        cJSON_Delete(l.found);
        return send_json(sv, conn, 200, body);
    }
    srv_error e;
    if (srv_router_count(sv->router) == 1 && sv->single)
        srv_error_set(&e, 404, "invalid_request_error", "model_not_found", "model",
                      "The model '%.200s' does not exist (this server has '%.200s')", id, sv->single->id);
    else
        srv_error_set(&e, 404, "invalid_request_error", "model_not_found", "model", "The model '%.200s' does not exist", id);
    return send_error(sv, conn, &e);
}

/* POST /models/load and /models/unload {"model"}: {"success": true, "model", "status"}. */
static enum MHD_Result handle_load(srv_server *sv, struct MHD_Connection *conn, conn_req *rq, bool load) {
    srv_error e;
    char *name = NULL;
    int rc = srv_body_model(rq->body ? rq->body : "", rq->len, &name, &e);
    if (!rc && !name) {
        srv_error_set(&e, 400, "invalid_request_error", NULL, "model", "'model' is required");
        rc = -1;
    }
    srv_watch w = model_watch(sv, conn, rq);
    if (!rc) rc = load ? srv_router_load(sv->router, name, &w, &e) : srv_router_unload(sv->router, name, &e);
    char *body = NULL;
    if (!rc) {
        cJSON *o = cJSON_CreateObject();
        bool ok = o && cJSON_AddTrueToObject(o, "success") && cJSON_AddStringToObject(o, "model", name) &&
                  cJSON_AddStringToObject(o, "status", load ? "loaded" : "unloaded");
        body = ok ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
    }
    free(name);
    if (rc && e.status == 499) return MHD_NO; /* nobody to answer */
    return rc ? send_error(sv, conn, &e) : send_json(sv, conn, 200, body);
}

/* POST /slots/{id}?action=save|restore {"filename"}: the file is NAME in --slot-save-path. */
static enum MHD_Result handle_slots(srv_server *sv, srv_instance *in, struct MHD_Connection *conn, const char *url,
                                    conn_req *rq) {
    srv_error e;
    if (!sv->slot_dir) {
        srv_error_set(&e, 501, "not_supported_error", "not_supported", NULL,
                      "saving and restoring slots is off: start the server with --slot-save-path DIR");
        return send_error(sv, conn, &e);
    }
    srv_slot_req r;
    const char *action = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "action");
    if (srv_slot_parse(url + strlen(slots_route.path), action, rq->body ? rq->body : "", rq->len, in->mc.n_slots, &r,
                       &e))
        return send_error(sv, conn, &e);
    char *path = malloc(strlen(sv->slot_dir) + strlen(r.filename) + 2);
    if (!path) return MHD_NO;
    sprintf(path, "%s/%s", sv->slot_dir, r.filename);
    srv_slot_action a = {.op = r.op, .slot = r.id, .path = path, .name = r.filename, .dir = sv->slot_dir,
                         .max_bytes = sv->slot_max_bytes};
    bool save = r.op == SRV_SLOT_SAVE;
    if (save) pthread_mutex_lock(&sv->slot_mu);
    int status = srv_sched_slot_action(in->sched, &a);
    if (save) pthread_mutex_unlock(&sv->slot_mu);
    free(path);
    if (status != 200) {
        srv_error_set(&e, status, status >= 500 ? "server_error" : "invalid_request_error", NULL,
                      status == 409 ? "id_slot" : status == 400 || status == 404 ? "filename" : NULL, "%s", a.message);
        return send_error(sv, conn, &e);
    }
    return send_json(sv, conn, 200, srv_json_slot(r.id, r.filename, r.op == SRV_SLOT_SAVE, a.n_tokens, a.n_bytes, a.ms));
}

/* 503 while loading (anything but /health and /metrics) or draining (what computes: generation,
 * embeddings, slot files): a balancer retries the request elsewhere. true when it was sent. */
static bool unavailable(srv_server *sv, struct MHD_Connection *conn, const conn_req *rq, int state,
                        enum MHD_Result *sent) {
    bool generation = rq->ep == SRV_EP_COMPLETIONS || rq->ep == SRV_EP_CHAT || rq->ep == SRV_EP_SLOTS ||
                      rq->ep == SRV_EP_MESSAGES || rq->ep == SRV_EP_RESPONSES || rq->ep == SRV_EP_COMPLETION ||
                      rq->ep == SRV_EP_INFILL || rq->ep == SRV_EP_MODELS_LOAD || rq->ep == SRV_EP_EMBEDDINGS;
    srv_error e;
    if (state == SRV_LOADING && rq->ep != SRV_EP_HEALTH && rq->ep != SRV_EP_METRICS)
        srv_error_set(&e, 503, "server_error", "loading", NULL, "the model is loading, retry later");
    else if (state == SRV_DRAINING && generation)
        srv_error_set(&e, 503, "server_error", "draining", NULL, "the server is shutting down, retry elsewhere");
    else return false;
    *sent = send_error(sv, conn, &e);
    return true;
}

/* Queue a response without a body of its own making (a preflight's, a file's, a 304). */
static enum MHD_Result send_static(srv_server *sv, struct MHD_Connection *conn, int status, struct MHD_Response *r) {
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "X-Request-Id", request_id);
    add_cors_headers(r);
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    srv_metrics_response(&sv->metrics, status);
    if (answering) answering->acc.status = status;
    return ok;
}

static enum MHD_Result send_preflight(srv_server *sv, struct MHD_Connection *conn) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (r) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type, X-Request-Id");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    return send_static(sv, conn, 204, r);
}

/* A file of the page: revalidated at every use (no-cache) by its ETag, which changes with its
 * bytes, so a new build's page is never mixed with an old one's cached scripts. */
static enum MHD_Result send_asset(srv_server *sv, struct MHD_Connection *conn, const srv_asset *a) {
    const char *inm = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    bool fresh = srv_etag_matches(inm, a->etag);
    struct MHD_Response *r = MHD_create_response_from_buffer(fresh ? 0 : a->size, fresh ? (void *)"" : (void *)a->data,
                                                             MHD_RESPMEM_PERSISTENT);
    if (r) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, a->type);
        MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, a->etag);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(r, "Content-Security-Policy", SRV_WEB_CSP);
        MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    }
    return send_static(sv, conn, fresh ? 304 : 200, r);
}

/* Whether the endpoint works on one model (named by the body's "model", or for GET by ?model=). */
static bool model_ep(srv_endpoint ep) {
    switch (ep) {
    case SRV_EP_HEALTH: case SRV_EP_MODELS: case SRV_EP_METRICS: case SRV_EP_MODELS_LOAD: case SRV_EP_MODELS_UNLOAD:
    case SRV_EP_LORA_ADAPTERS: case SRV_EP_OTHER: case SRV_EP_COUNT: return false;
    default: return true;
    }
}

/* Lease the model the request names (loading it first when needed). false: *sent answers it. */
static bool take_model(srv_server *sv, struct MHD_Connection *conn, conn_req *rq, srv_instance **in, enum MHD_Result *sent) {
    srv_error e;
    char *name = NULL;
    int rc = 0;
    if (rq->ep == SRV_EP_PROPS || rq->ep == SRV_EP_SLOTS_LIST) {
        const char *q = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "model");
        if (q && !(name = strdup(q))) return (*sent = MHD_NO), false;
    } else {
        rc = srv_body_model(rq->body ? rq->body : "", rq->len, &name, &e);
    }
    srv_watch w = model_watch(sv, conn, rq);
    if (!rc) rc = srv_router_acquire(sv->router, name, &w, &rq->lease, &e);
    free(name);
    if (rc) {
        *sent = e.status == 499 ? MHD_NO : send_error(sv, conn, &e); /* 499: nobody to answer */
        return false;
    }
    *in = rq->lease.inst;
    return true;
}

/* GET /metrics: the requests and responses, then each loaded model's series (labelled by model
 * in router mode), from copies taken while the router holds them loaded. */
typedef struct metrics_list {
    srv_metrics *m[SRV_MAX_MODELS];
    char *labels[SRV_MAX_MODELS];
    int n;
    bool oom;
} metrics_list;

static void collect_metrics(void *user, const srv_model_status *st) {
    metrics_list *l = user;
    srv_instance *in = st->inst;
    if (!in || l->n >= SRV_MAX_MODELS) return;
    srv_metrics *copy = malloc(sizeof *copy);
    char *label = strdup(in->id);
    if (!copy || !label) {
        free(copy);
        free(label);
        l->oom = true;
        return;
    }
    srv_metrics_copy(copy, &in->metrics);
    l->m[l->n] = copy;
    l->labels[l->n++] = label;
}

static enum MHD_Result handle_metrics(srv_server *sv, struct MHD_Connection *conn) {
    metrics_list l = {.n = 0};
    if (sv->router) srv_router_each(sv->router, collect_metrics, &l);
    char *body = l.oom ? NULL
                       : srv_metrics_render(&sv->metrics, l.m, sv->single ? NULL : (const char *const *)l.labels, l.n);
    for (int i = 0; i < l.n; i++) {
        srv_metrics_destroy(l.m[i]);
        free(l.m[i]);
        free(l.labels[i]);
    }
    return send_body(sv, conn, 200, body, "text/plain; version=0.0.4", NULL);
}

static enum MHD_Result respond(srv_server *sv, struct MHD_Connection *conn, const char *url, conn_req *rq) {
    if (rq->refused)
        return send_body(sv, conn, rq->early.status, error_body(rq, &rq->early), "application/json", rq->allow);
    if (rq->preflight) return send_preflight(sv, conn);
    if (rq->asset) return send_asset(sv, conn, rq->asset); /* while loading too: the page waits on /health */
    int state = atomic_load_explicit(&sv->state, memory_order_acquire);
    rq->deadline = sv->request_seconds > 0 ? srv_now() + sv->request_seconds : 0;
    enum MHD_Result sent;
    if (unavailable(sv, conn, rq, state, &sent)) return sent;
    srv_instance *in = NULL;
    if (model_ep(rq->ep) && !take_model(sv, conn, rq, &in, &sent)) return sent;
    switch (rq->ep) {
    case SRV_EP_HEALTH:
        return send_json(sv, conn, state == SRV_READY ? 200 : 503,
                         strdup(state == SRV_READY     ? "{\"status\":\"ok\"}"
                                : state == SRV_LOADING ? "{\"status\":\"loading\"}"
                                                       : "{\"status\":\"draining\"}"));
    case SRV_EP_MODELS:
        if (strcmp(url, "/v1/models")) return handle_model(sv, conn, url);
        return handle_models(sv, conn);
    case SRV_EP_EMBEDDINGS: return handle_embeddings(sv, in, conn, rq);
    case SRV_EP_METRICS: return handle_metrics(sv, conn);
    case SRV_EP_LORA_ADAPTERS:
        return send_json(sv, conn, 200, srv_json_lora_adapters(sv->base.lora_paths, sv->base.lora_scales, sv->base.n_lora));
    case SRV_EP_COMPLETIONS: return handle_generation(sv, in, conn, rq, SRV_API_COMPLETIONS);
    case SRV_EP_CHAT: return handle_generation(sv, in, conn, rq, SRV_API_CHAT);
    case SRV_EP_TOKENIZE: return handle_tokenize(sv, in, conn, rq);
    case SRV_EP_DETOKENIZE: return handle_detokenize(sv, in, conn, rq);
    case SRV_EP_SLOTS: return handle_slots(sv, in, conn, url, rq);
    case SRV_EP_APPLY_TEMPLATE: return handle_apply_template(sv, in, conn, rq);
    case SRV_EP_MESSAGES: return handle_messages(sv, in, conn, rq);
    case SRV_EP_COUNT_TOKENS: return handle_count_tokens(sv, in, conn, rq);
    case SRV_EP_RESPONSES: return handle_responses(sv, in, conn, rq);
    case SRV_EP_COMPLETION: return handle_llama(sv, in, conn, rq, false);
    case SRV_EP_INFILL: return handle_llama(sv, in, conn, rq, true);
    case SRV_EP_PROPS: return handle_props(sv, in, conn);
    case SRV_EP_SLOTS_LIST: return handle_slot_list(sv, in, conn);
    case SRV_EP_MODELS_LOAD: return handle_load(sv, conn, rq, true);
    case SRV_EP_MODELS_UNLOAD: return handle_load(sv, conn, rq, false);
    default: return MHD_NO;
    }
}

/* A connection's entry in the guard (its socket context). */
static conn_entry *guard_entry(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    srv_server *sv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ca = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        *socket_context = ci ? conn_guard_open(sv->guard, ci->connect_fd, ca ? ca->client_addr : NULL) : NULL;
    } else {
        conn_guard_close(sv->guard, *socket_context);
        *socket_context = NULL;
    }
}

/* The per-address limit, by address group (conn_guard.h): an IPv6 client's whole /64 counts as
 * one address. */
static enum MHD_Result accept_policy(void *cls, const struct sockaddr *addr, socklen_t len) {
    (void)len;
    srv_server *sv = cls;
    return conn_guard_admit(sv->guard, addr) ? MHD_YES : MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv_server *sv = cls;
    conn_req *rq = *con_cls;
    if (!rq) { /* headers only: decide what can be decided, then receive the body */
        conn_guard_phase(sv->guard, guard_entry(conn), CONN_BODY);
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        rq->lease.index = -1;
        *con_cls = rq;
        srv_access_begin(&rq->acc, method, url);
        atomic_fetch_add(&sv->active, 1);
        first_look(sv, conn, url, method, version, rq);
        return MHD_YES;
    }
    if (*upload_size) {
        take_body(sv, rq, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    conn_guard_phase(sv->guard, guard_entry(conn), CONN_ANSWER);
    answering = rq;
    enum MHD_Result ok = respond(sv, conn, url, rq);
    answering = NULL;
    return ok;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_server *sv = cls;
    (void)toe;
    conn_guard_phase(sv->guard, guard_entry(conn), CONN_HEADERS); /* kept alive: the next request's */
    conn_req *rq = *con_cls;
    if (!rq) return;
    srv_router_release(sv->router, &rq->lease);
    atomic_fetch_sub(&sv->active, 1);
    if (!rq->logged) srv_access_write(&rq->acc);
    free(rq->body);
    free(rq);
    *con_cls = NULL;
}

/* ---- Start and stop ------------------------------------------------------------------------ */

/* The listening socket, bound here so that a taken port fails with its reason. SO_REUSEADDR lets a
 * restart bind over connections in TIME_WAIT; never SO_REUSEPORT, with which a second server
 * would share the port and answer half the requests with another model. */
static int listen_socket(const srv_config *cfg, bool *ipv6, nc_err *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    int gai = getaddrinfo(cfg->host, port, &hints, &ai);
    if (gai != 0) {
        snprintf(err->msg, sizeof err->msg, "--host %s: %s", cfg->host, gai_strerror(gai));
        return -1;
    }
    int one = 1, fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) || bind(fd, ai->ai_addr, ai->ai_addrlen) ||
        listen(fd, 128)) {
        snprintf(err->msg, sizeof err->msg, "cannot listen on %s port %d: %s", cfg->host, cfg->port, strerror(errno));
        if (fd >= 0) close(fd);
        fd = -1;
    }
    *ipv6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    return fd;
}

/* Whether socket fd is bound to a loopback address (127/8, ::1, or 127/8 mapped into IPv6). */
static bool bound_to_loopback(int fd) {
    struct sockaddr_storage a;
    socklen_t n = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &n)) return false;
    if (a.ss_family == AF_INET) return (ntohl(((struct sockaddr_in *)&a)->sin_addr.s_addr) >> 24) == 127;
    if (a.ss_family != AF_INET6) return false;
    const struct in6_addr *v6 = &((struct sockaddr_in6 *)&a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(v6) || (IN6_IS_ADDR_V4MAPPED(v6) && v6->s6_addr[12] == 127);
}

static int start_daemon(srv_server *sv, const srv_config *cfg, nc_err *err) {
    bool ipv6;
    int fd = listen_socket(cfg, &ipv6, err);
    if (fd < 0) return -1;
    sv->loopback = bound_to_loopback(fd);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC;
    if (ipv6) flags |= MHD_USE_IPv6;
    /* one client address may not take every connection (and thread): slowloris from one host */
    int per_ip = cfg->max_conn_per_ip ? cfg->max_conn_per_ip : 64;
    if (conn_guard_new(&sv->guard, cfg->header_seconds > 0 ? cfg->header_seconds : 15,
                       cfg->body_seconds > 0 ? cfg->body_seconds : 60, per_ip > 0 ? per_ip : 0)) {
        close(fd);
        snprintf(err->msg, sizeof err->msg, "cannot start the connection watchdog");
        return -1;
    }
    sv->d = MHD_start_daemon(flags, 0, accept_policy, sv, on_request, sv, MHD_OPTION_LISTEN_SOCKET, fd,
                             MHD_OPTION_NOTIFY_COMPLETED, on_completed, sv, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
                             sv, MHD_OPTION_CONNECTION_LIMIT,
                             (unsigned)(cfg->max_connections > 0 ? cfg->max_connections : 1024),
                             MHD_OPTION_CONNECTION_TIMEOUT, 300u, MHD_OPTION_END);
    if (!sv->d) {
        close(fd);
        snprintf(err->msg, sizeof err->msg, "cannot start the HTTP server on %s port %d", cfg->host, cfg->port);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(sv->d, MHD_DAEMON_INFO_BIND_PORT);
    sv->port = di ? di->port : cfg->port;
    return 0;
}

static void server_free(srv_server *sv) {
    srv_router_free(sv->router); /* the models' instances, after the daemon: no connection uses them */
    conn_guard_free(sv->guard); /* after the daemon: its connections are closed */
    if (sv->metrics_ready) srv_metrics_destroy(&sv->metrics);
    free(sv->api_key);
    free(sv->allowed_hosts);
    free(sv->cors);
    free(sv->model_id);
    free(sv->slot_dir);
    pthread_mutex_destroy(&sv->slot_mu);
    free(sv);
}

int srv_listen(srv_server **out, const srv_config *cfg, nc_err *err) {
    *out = NULL;
    srv_server *sv = calloc(1, sizeof *sv);
    if (!sv) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return -1;
    }
    atomic_init(&sv->state, SRV_LOADING);
    atomic_init(&sv->active, 0);
    atomic_init(&sv->stopping, false);
    pthread_mutex_init(&sv->slot_mu, NULL);
    sv->max_body = cfg->max_body;
    sv->drain_seconds = cfg->drain_seconds;
    sv->request_seconds = cfg->request_seconds;
    sv->created = (int64_t)time(NULL);
    sv->model_id = strdup(cfg->model_id ? cfg->model_id : "model");
    sv->api_key = cfg->api_key ? strdup(cfg->api_key) : NULL;
    sv->allowed_hosts = cfg->allowed_hosts ? strdup(cfg->allowed_hosts) : srv_default_allowed_hosts(cfg->host);
    sv->cors = cfg->cors ? strdup(cfg->cors) : NULL;
    srv_metrics_init(&sv->metrics, cfg->n_parallel);
    sv->metrics_ready = true;
    if (!sv->model_id || (cfg->api_key && !sv->api_key) || !sv->allowed_hosts || (cfg->cors && !sv->cors)) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        goto fail;
    }
    if (cfg->slot_save_path) {
        struct stat st;
        int rc = stat(cfg->slot_save_path, &st);
        if (rc != 0 || !S_ISDIR(st.st_mode)) {
            snprintf(err->msg, sizeof err->msg, "--slot-save-path %s: %s", cfg->slot_save_path,
                     rc != 0 ? strerror(errno) : "not a directory");
            goto fail;
        }
        sv->slot_max_bytes = cfg->slot_save_max_bytes ? cfg->slot_save_max_bytes : SRV_SLOT_SAVE_MAX_BYTES;
        if (!(sv->slot_dir = strdup(cfg->slot_save_path))) {
            snprintf(err->msg, sizeof err->msg, "out of memory");
            goto fail;
        }
    }
    if (start_daemon(sv, cfg, err)) goto fail;
    *out = sv;
    return 0;
fail:
    server_free(sv);
    return -1;
}

/* ---- The models ---------------------------------------------------------------------------- */

/* A preset's options over the server's. */
static srv_config preset_config(const srv_config *base, const srv_preset *p) {
    srv_config c = *base;
    if (p->n_ctx) c.n_ctx = p->n_ctx;
    if (p->n_parallel) c.n_parallel = p->n_parallel;
    if (p->kv_cells) c.kv_cells = p->kv_cells;
    if (p->type_k) c.type_k = p->type_k;
    if (p->type_v) c.type_v = p->type_v;
    if (p->n_parallel && !p->kv_cells) c.kv_cells = 0; /* the pool follows the preset's slots */
    return c;
}

/* The text of a chat template file (malloc'd), or NULL with err. */
static char *read_template(const char *path, nc_err *err) {
    size_t len;
    char *text = srv_read_text(path, 16u << 20, &len, err);
    if (text && (len == 0 || strlen(text) != len)) {
        snprintf(err->msg, sizeof err->msg, "%.400s: %s", path, len == 0 ? "the file is empty" : "the file holds a NUL byte");
        free(text);
        return NULL;
    }
    if (!text) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        snprintf(err->msg, sizeof err->msg, "chat-template-file %.480s", why);
    }
    return text;
}

/* The router's loader: -m's model as given, or a preset's files loaded now. */
static int open_model(void *user, const srv_preset *p, void **inst, double *bytes, nc_err *err) {
    srv_server *sv = user;
    srv_instance *in = NULL;
    int rc;
    if (sv->given) {
        rc = srv_instance_new(&in, p->id, p->path, sv->given, sv->given_draft, false, &sv->base, err);
    } else {
        srv_config c = preset_config(&sv->base, p);
        char *tpl = p->chat_template ? read_template(p->chat_template, err) : NULL;
        if (p->chat_template && !tpl) return -1;
        if (tpl) c.chat_template = tpl;
        rc = srv_instance_open(&in, p->id, p->path, p->draft, &c, err);
        free(tpl);
    }
    if (rc) return -1;
    *inst = in;
    *bytes = in->bytes;
    return 0;
}

static void close_model(void *user, void *inst) {
    (void)user;
    srv_instance_free(inst, 0); /* unleased: no request runs on it */
}

static int make_router(srv_server *sv, srv_presets *ps, const srv_router_config *rc, nc_err *err) {
    srv_router_ops ops = {.open = open_model, .close = close_model, .user = sv};
    return srv_router_new(&sv->router, ps, rc, &ops, err);
}

/* The models in memory now, for srv_stop's steps: each one's instance (under the router's lock). */
typedef struct each_instance {
    void (*fn)(srv_instance *in, double arg);
    double arg;
} each_instance;

static void on_instance(void *user, const srv_model_status *st) {
    each_instance *e = user;
    if (st->inst) e->fn(st->inst, e->arg);
}

static void for_instances(srv_server *sv, void (*fn)(srv_instance *, double), double arg) {
    if (!sv->router) return;
    each_instance e = {fn, arg};
    srv_router_each(sv->router, on_instance, &e);
}

int srv_start(srv_server *sv, nc_model *m, const srv_config *cfg, nc_err *err) {
    srv_presets ps = {.p = calloc(1, sizeof *ps.p), .n = 1};
    if (!ps.p || !(ps.p[0].id = strdup(cfg->model_id ? cfg->model_id : "model")) ||
        !(ps.p[0].path = strdup(cfg->model_path ? cfg->model_path : ""))) {
        srv_presets_free(&ps);
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return -1;
    }
    sv->base = *cfg;
    sv->given = m;
    sv->given_draft = cfg->draft_model;
    srv_router_config rc = {.any_name = true, .max_waiting = cfg->max_queue};
    srv_error e;
    if (make_router(sv, &ps, &rc, err)) {
        srv_presets_free(&ps);
        return -1;
    }
    if (srv_router_load(sv->router, NULL, NULL, &e)) {
        /* the loader's own message, without the router's words around it */
        const char *why = strstr(e.message, "could not be loaded: ");
        snprintf(err->msg, sizeof err->msg, "%s", why ? why + strlen("could not be loaded: ") : e.message);
        return -1;
    }
    srv_lease l;
    if (srv_router_acquire(sv->router, NULL, NULL, &l, &e)) {
        snprintf(err->msg, sizeof err->msg, "%s", e.message);
        return -1;
    }
    sv->single = l.inst; /* never unloaded: a router of one keeps it until srv_stop */
    srv_router_release(sv->router, &l);
    atomic_store_explicit(&sv->state, SRV_READY, memory_order_release);
    return 0;
}

int srv_start_router(srv_server *sv, srv_presets *ps, const srv_config *cfg, nc_err *err) {
    sv->base = *cfg;
    srv_router_config rc = {.models_max = cfg->models_max, .memory_budget = cfg->memory_budget,
                            .sleep_idle = cfg->sleep_idle_seconds, .max_waiting = cfg->max_queue};
    /* kept: the router takes the presets, and they are looked at below */
    int32_t n = ps->n;
    bool *startup = calloc((size_t)(n ? n : 1), sizeof *startup);
    char **names = calloc((size_t)(n ? n : 1), sizeof *names);
    for (int32_t i = 0; startup && names && i < n; i++) {
        startup[i] = ps->p[i].load_on_startup;
        names[i] = startup[i] ? strdup(ps->p[i].id) : NULL;
    }
    int rc_ = !startup || !names ? (snprintf(err->msg, sizeof err->msg, "out of memory"), -1) : make_router(sv, ps, &rc, err);
    for (int32_t i = 0; !rc_ && i < n; i++) {
        srv_error e;
        if (startup[i] && srv_router_load(sv->router, names[i], NULL, &e))
            fprintf(stderr, "note: %s\n", e.message); /* it stays failed; the others are served */
    }
    for (int32_t i = 0; names && i < n; i++) free(names[i]);
    free(names);
    free(startup);
    if (rc_) return -1;
    atomic_store_explicit(&sv->state, SRV_READY, memory_order_release);
    return 0;
}

int srv_port(const srv_server *s) { return s->port; }

void srv_get_info(const srv_server *s, srv_info *out) {
    const srv_instance *in = s->single;
    *out = (srv_info){.authenticated = s->api_key != NULL, .any_host = !strcmp(s->allowed_hosts, "*"),
                      .loopback = s->loopback};
    if (!in) return;
    out->n_ctx = nc_context_n_ctx(in->c);
    out->n_threads = nc_context_n_threads(in->c);
    out->kv_bytes = nc_kv_bytes_total(in->c);
    out->context = in->c;
    out->device = nc_context_device(in->c);
}
const char *srv_note(const srv_server *s) { return s->single ? s->single->note : ""; }

static void drain_instance(srv_instance *in, double until) {
    double left = until - srv_now();
    if (left > 0) srv_sched_drain(in->sched, left);
}

static void cancel_renders(srv_instance *in, double arg) {
    (void)arg;
    atomic_store(&in->stopping, true); /* first: a render the flag ends finds its watch stopped */
    nc_chat_template_cancel(in->mc.chat);
}

static void stop_engine(srv_instance *in, double arg) {
    (void)arg;
    srv_embedder_stop(&in->emb); /* the embeddings left end with 503 at their next chunk */
    srv_sched_stop(in->sched);
}

void srv_stop(srv_server *sv) {
    if (!sv) return;
    /* Draining: the listener stays open so that /health says so and new generation requests get
     * a 503 a balancer retries elsewhere, while the running ones get drain_seconds to finish. */
    atomic_store_explicit(&sv->state, SRV_DRAINING, memory_order_release);
    atomic_store(&sv->stopping, true);
    double until = srv_now() + sv->drain_seconds;
    /* a chat template still rendering (a hostile one runs up to its time budget) ends now: its
     * job could not be queued any more */
    for_instances(sv, cancel_renders, 0);
    for_instances(sv, drain_instance, until);
    MHD_socket listener = MHD_quiesce_daemon(sv->d);
    if (listener != MHD_INVALID_SOCKET) close(listener);
    /* A finished job's response may still be on its way out (a stream's last events): stopping
     * the daemon now would cut it. Idle keep-alive connections hold no request and are not
     * waited for. Embeddings running get the same time. */
    while (atomic_load(&sv->active) > 0 && srv_now() < until) nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    if (sv->router) srv_router_close(sv->router); /* no more loads: requests for a model now get 503 */
    for_instances(sv, stop_engine, 0); /* jobs and embeddings left end with 503; their connections finish */
    /* a little longer for those 503s to go out (stopping the daemon cuts the connections; it waits
     * for their handlers anyway, an embedding's until its chunk ends) */
    while (atomic_load(&sv->active) > 0 && srv_now() < until + 1) nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    MHD_stop_daemon(sv->d);
    server_free(sv);
}
