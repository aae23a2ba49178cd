/* What the web page needs of the server: its files, embedded at build time (scripts/embed.c
 * writes $(BUILD)/gen/web_assets.c from web/) and served at "/" and "/NAME", and CORS (--cors)
 * for pages on other origins that call the API. Pure functions: unit-tested alone. */
#ifndef NC_SERVER_WEB_H
#define NC_SERVER_WEB_H

#include <stdbool.h>
#include <stddef.h>

typedef struct srv_asset {
    const char *path;          /* "/index.html" */
    const char *type;          /* its Content-Type */
    const unsigned char *data;
    size_t size;
    const char *etag;          /* quoted, a hash of the bytes */
} srv_asset;

extern const srv_asset srv_assets[];  /* srv_n_assets entries, then a zeroed one */
extern const int srv_n_assets;

/* The file served at url ("/" is "/index.html"), or NULL. */
const srv_asset *srv_asset_find(const char *url);
/* If-None-Match against an ETag: "*", the tag, or a list holding it (weak or not). */
bool srv_etag_matches(const char *if_none_match, const char *etag);

/* The page's Content-Security-Policy: its own scripts, styles and API only. */
#define SRV_WEB_CSP                                                                                  \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/* CORS: the Origin header against --cors's list (origins separated by commas, e.g.
 * "http://localhost:5173,https://app.example"; "*": any). An origin is scheme://host[:port] and
 * nothing else, at most SRV_ORIGIN_MAX bytes of printable ASCII; it matches an entry that equals
 * it without regard to case (a trailing '/' in the entry ignored). "null" (a sandboxed or file
 * page) and anything malformed never match. allowed NULL: CORS is off, nothing matches. */
#define SRV_ORIGIN_MAX 255
bool srv_origin_allowed(const char *origin, const char *allowed);

#endif
