/* The hub's HTTP requests, through libcurl: a GET whose 2xx body streams to a sink, the headers
 * that say more than the status (the hub's X-Error-Code and X-Error-Message, a 206's
 * Content-Range, a listing's Link to its next page), and the body of an error kept for its
 * message. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hub/hub.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CURLcode init_rc;
static void init(void) { init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

typedef struct transfer {
    CURL *curl;
    const hub_sink *sink;
    hub_answer *answer;
    bool began, is_error;
    uint64_t range_start;  /* from the answer's Content-Range */
    char body[1024];       /* an error answer's body, for its message */
    size_t n_body;
} transfer;

/* src into dst, cut to fit */
static void set(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

/* "Name: value" into out (trimmed) when the header line is name's. */
static bool header_value(const char *line, size_t n, const char *name, char *out, size_t cap) {
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) || line[k] != ':') return false;
    const char *v = line + k + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) end--;
    snprintf(out, cap, "%.*s", (int)(end - v), v);
    return true;
}

/* Link: <url>; rel="next", ... : the next page's url. */
static void link_next(const char *value, char *out, size_t cap) {
    for (const char *p = value; (p = strchr(p, '<'));) {
        const char *close = strchr(p, '>');
        if (!close) return;
        const char *comma = strchr(close, ','), *rel = strstr(close, "rel=\"next\"");
        if (rel && (!comma || rel < comma)) {
            snprintf(out, cap, "%.*s", (int)(close - p - 1), p + 1);
            return;
        }
        p = close;
    }
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *user) {
    transfer *t = user;
    size_t n = size * nmemb;
    char value[2048];
    if (n >= 5 && !strncmp(line, "HTTP/", 5)) { /* a new answer (after a redirect): forget the last one's */
        t->answer->error_code[0] = t->answer->message[0] = t->answer->next[0] = 0;
        t->range_start = 0;
    } else if (header_value(line, n, "X-Error-Code", value, sizeof value))
        set(t->answer->error_code, sizeof t->answer->error_code, value);
    else if (header_value(line, n, "X-Error-Message", value, sizeof value))
        set(t->answer->message, sizeof t->answer->message, value);
    else if (header_value(line, n, "Link", value, sizeof value))
        link_next(value, t->answer->next, sizeof t->answer->next);
    else if (header_value(line, n, "Content-Range", value, sizeof value)) {
        unsigned long long start;
        if (sscanf(value, "bytes %llu-", &start) == 1) t->range_start = start;
    }
    return n;
}

static bool begin(transfer *t) {
    long status = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
    t->answer->status = status;
    t->began = true;
    t->is_error = status < 200 || status > 299;
    if (!t->is_error && t->sink->begin && !t->sink->begin(t->sink->user, status, status == 206 ? t->range_start : 0)) {
        t->answer->aborted = true;
        return false;
    }
    return true;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *user) {
    transfer *t = user;
    size_t n = size * nmemb;
    if (!t->began && !begin(t)) return 0;
    if (t->is_error) {
        size_t take = n < sizeof t->body - 1 - t->n_body ? n : sizeof t->body - 1 - t->n_body;
        memcpy(t->body + t->n_body, data, take);
        t->n_body += take;
        return n;
    }
    if (!t->sink->write(t->sink->user, data, n)) {
        t->answer->aborted = true;
        return 0;
    }
    return n;
}

/* An error answer's message: the hub's X-Error-Message, else {"error": "..."}, else the text. */
static void error_message(transfer *t) {
    hub_answer *a = t->answer;
    if (*a->message || !t->n_body) return;
    t->body[t->n_body] = 0;
    cJSON *j = cJSON_Parse(t->body);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (cJSON_IsString(e)) snprintf(a->message, sizeof a->message, "%s", e->valuestring);
    else if (!j) {
        size_t k = 0;
        for (size_t i = 0; i < t->n_body && k + 1 < sizeof a->message; i++) /* one line of printable text */
            a->message[k++] = (unsigned char)t->body[i] < 0x20 ? ' ' : t->body[i];
        a->message[k] = 0;
    }
    cJSON_Delete(j);
}

int hub_http_get(const char *url, const char *token, uint64_t from, const hub_sink *sink, hub_answer *answer) {
    *answer = (hub_answer){0};
    pthread_once(&init_once, init);
    if (init_rc != CURLE_OK) {
        snprintf(answer->failure, sizeof answer->failure, "libcurl: %s", curl_easy_strerror(init_rc));
        return -1;
    }
    transfer t = {.curl = curl_easy_init(), .sink = sink, .answer = answer};
    struct curl_slist *headers = NULL;
    char auth[1100], range[64];
    if (!t.curl) {
        snprintf(answer->failure, sizeof answer->failure, "libcurl: cannot make a handle");
        return -1;
    }
    if (token && *token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        headers = curl_slist_append(headers, auth); /* curl drops it on a redirect to another host */
    }
    curl_easy_setopt(t.curl, CURLOPT_URL, url);
    curl_easy_setopt(t.curl, CURLOPT_HTTPHEADER, headers);
    if (from) {
        snprintf(range, sizeof range, "%" PRIu64 "-", from);
        curl_easy_setopt(t.curl, CURLOPT_RANGE, range);
    }
    /* the hub answers a file with a redirect to its content store */
    curl_easy_setopt(t.curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(t.curl, CURLOPT_MAXREDIRS, 10L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(t.curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(t.curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
    curl_easy_setopt(t.curl, CURLOPT_USERAGENT, "nucleus/0.1");
    curl_easy_setopt(t.curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(t.curl, CURLOPT_CONNECTTIMEOUT, 30L);
    /* a connection that stays silent this long is taken for a dropped one (and resumed) */
    curl_easy_setopt(t.curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(t.curl, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(t.curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(t.curl, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(t.curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(t.curl, CURLOPT_WRITEDATA, &t);
    CURLcode rc = curl_easy_perform(t.curl);
    if (rc == CURLE_OK && !t.began) begin(&t); /* an empty body */
    if (rc != CURLE_OK && !answer->aborted)
        snprintf(answer->failure, sizeof answer->failure, "%s", curl_easy_strerror(rc));
    if (rc == CURLE_OK && t.is_error) error_message(&t);
    if (!t.began) curl_easy_getinfo(t.curl, CURLINFO_RESPONSE_CODE, &answer->status);
    curl_easy_cleanup(t.curl);
    curl_slist_free_all(headers);
    return rc == CURLE_OK ? 0 : -1;
}

/* ---- into memory ---- */

typedef struct text_sink {
    char *buf;
    size_t len, max;
    bool too_long;
} text_sink;

static bool text_write(void *user, const void *data, size_t n) {
    text_sink *s = user;
    if (n > s->max - s->len) {
        s->too_long = true;
        return false;
    }
    char *grown = realloc(s->buf, s->len + n + 1);
    if (!grown) return false;
    memcpy(grown + s->len, data, n);
    s->buf = grown;
    s->len += n;
    grown[s->len] = 0;
    return true;
}

int hub_http_get_text(const char *url, const char *token, size_t max, char **body, size_t *len, hub_answer *answer) {
    text_sink s = {.max = max};
    hub_sink sink = {.write = text_write, .user = &s};
    int rc = hub_http_get(url, token, 0, &sink, answer);
    if (rc == 0 && !s.buf && answer->status >= 200 && answer->status <= 299 && !(s.buf = calloc(1, 1))) {
        snprintf(answer->failure, sizeof answer->failure, "out of memory");
        rc = -1;
    }
    if (rc) {
        if (answer->aborted)
            snprintf(answer->failure, sizeof answer->failure, s.too_long ? "the answer is longer than %zu bytes" : "out of memory", max);
        free(s.buf);
        return -1;
    }
    *body = s.buf;
    *len = s.len;
    return 0;
}

static bool isalnum_ascii(unsigned char c) { return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z'); }

char *hub_url_path(const char *path) {
    size_t n = strlen(path), k = 0;
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        /* RFC 3986's unreserved characters, and '/' between components */
        if (isalnum_ascii(*p) || strchr("-._~/", *p)) out[k++] = (char)*p;
        else {
            out[k++] = '%';
            out[k++] = hex[*p >> 4];
            out[k++] = hex[*p & 15];
        }
    }
    out[k] = 0;
    return out;
}
