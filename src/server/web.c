/* The embedded page's lookup and CORS's origin matching (see web.h). */
#include "server/web.h"

#include <string.h>
#include <strings.h>

const srv_asset *srv_asset_find(const char *url) {
    if (!strcmp(url, "/")) url = "/index.html";
    /* where browsers and other clients look for a site's icon without a <link rel="icon"> */
    if (!strcmp(url, "/favicon.ico")) url = "/favicon.svg";
    for (int i = 0; i < srv_n_assets; i++)
        if (!strcmp(url, srv_assets[i].path)) return &srv_assets[i];
    return NULL;
}

bool srv_etag_matches(const char *inm, const char *etag) {
    if (!inm) return false;
    size_t n = strlen(etag);
    for (const char *p = inm; *p;) {
        p += strspn(p, " \t,");
        if (!strncmp(p, "W/", 2)) p += 2;
        if (*p == '*' || (!strncmp(p, etag, n) && (p[n] == 0 || p[n] == ',' || p[n] == ' ' || p[n] == '\t'))) return true;
        p += strcspn(p, ",");
    }
    return false;
}

static size_t span(const char *s, size_t n, const char *set) {
    size_t i = 0;
    while (i < n && s[i] && strchr(set, s[i])) i++;
    return i;
}

#define DIGITS "0123456789"
#define LETTERS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

/* scheme://host[:port] and nothing more: a scheme of letters (then letters, digits, + - .), a
 * host name or address ([...] for IPv6), an optional port of 1 to 5 digits. */
static bool origin_sane(const char *o, size_t n) {
    if (n == 0 || n > SRV_ORIGIN_MAX) return false;
    size_t i = span(o, n, LETTERS);
    if (i == 0) return false;
    i += span(o + i, n - i, LETTERS DIGITS "+-.");
    if (n - i < 3 || strncmp(o + i, "://", 3)) return false;
    i += 3;
    size_t host;
    if (i < n && o[i] == '[') {
        host = span(o + i + 1, n - i - 1, DIGITS "abcdefABCDEF:.");
        if (host == 0 || i + 1 + host >= n || o[i + 1 + host] != ']') return false;
        i += host + 2;
    } else {
        host = span(o + i, n - i, LETTERS DIGITS "-._~");
        if (host == 0) return false;
        i += host;
    }
    if (i < n && o[i] == ':') {
        size_t port = span(o + i + 1, n - i - 1, DIGITS);
        if (port == 0 || port > 5) return false;
        i += 1 + port;
    }
    return i == n;
}

bool srv_origin_allowed(const char *origin, const char *allowed) {
    if (!origin || !allowed) return false;
    size_t n = strlen(origin);
    if (!origin_sane(origin, n)) return false;
    for (const char *p = allowed; *p;) {
        p += strspn(p, " ,");
        size_t len = strcspn(p, ",");
        size_t e = len;
        while (e > 0 && p[e - 1] == ' ') e--;
        if (e > 0 && p[e - 1] == '/') e--;
        if ((e == 1 && *p == '*') || (e == n && !strncasecmp(p, origin, n))) return true;
        p += len;
    }
    return false;
}
