/* The web page's server side: the embedded files, ETag matching, CORS's origin matching, and
 * nucleus_explain's steps (top logits, log-sum-exp, the JSON). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/explain.h"
#include "server/web.h"
#include "test.h"

static void test_assets(void) {
    const srv_asset *index = srv_asset_find("/");
    CHECK(index && index == srv_asset_find("/index.html"));
    CHECK(index && !strcmp(index->type, "text/html; charset=utf-8") && index->size > 0);
    CHECK(index && index->etag[0] == '"' && strlen(index->etag) == 18);
    const srv_asset *js = srv_asset_find("/app.js");
    CHECK(js && !strcmp(js->type, "text/javascript; charset=utf-8") && strcmp(js->etag, index->etag));
    CHECK(srv_asset_find("/style.css") && srv_asset_find("/markdown.js") && srv_asset_find("/inspector.js") &&
          srv_asset_find("/store.js"));
    const srv_asset *icon = srv_asset_find("/favicon.svg");
    CHECK(icon && !strcmp(icon->type, "image/svg+xml") && srv_asset_find("/favicon.ico") == icon);
    static const char *const absent[] = {"", "/nothing", "/../index.html", "//index.html", "/index.html/", "/INDEX.HTML",
                                         "/web/app.js", "/index.html?x"};
    for (size_t i = 0; i < sizeof absent / sizeof *absent; i++) CHECK_MSG(!srv_asset_find(absent[i]), "%s", absent[i]);
    CHECK(srv_assets[srv_n_assets].path == NULL);
}

static void test_etags(void) {
    const char *tag = "\"0123456789abcdef\"";
    CHECK(srv_etag_matches(tag, tag));
    CHECK(srv_etag_matches("*", tag));
    CHECK(srv_etag_matches("W/\"0123456789abcdef\"", tag));
    CHECK(srv_etag_matches("\"x\", \"0123456789abcdef\"", tag));
    CHECK(srv_etag_matches("\"x\",W/\"0123456789abcdef\"", tag));
    CHECK(!srv_etag_matches(NULL, tag));
    CHECK(!srv_etag_matches("", tag));
    CHECK(!srv_etag_matches("\"0123456789abcde\"", tag));
    CHECK(!srv_etag_matches("\"0123456789abcdef\"x", tag));
    CHECK(!srv_etag_matches("\"0123456789abcdef0\"", tag));
}

static void test_origins(void) {
    const char *list = "http://localhost:5173, https://App.Example/ ,http://[::1]:8080";
    static const char *const yes[] = {"http://localhost:5173", "https://app.example", "HTTPS://APP.EXAMPLE",
                                      "http://[::1]:8080"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) CHECK_MSG(srv_origin_allowed(yes[i], list), "%s", yes[i]);
    static const char *const no[] = {
        "http://localhost",        "http://localhost:5174",   "https://localhost:5173", "http://localhost:5173/",
        "http://localhost:5173/x", "https://app.example:443", "https://app.example.evil", "http://[::1]",
        "null",                    "",                        "localhost:5173",         "http://localhost:5173 ",
        "http://local host:5173",  "http://localhost:5173,https://app.example",   "http://[::1]:8080:1",
        "http://localhost:123456", "://localhost:5173",       "http://",                "1http://localhost:5173",
        "http://[::1",             "http://[zz]:8080",        "http://localhost:5173\n"};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) CHECK_MSG(!srv_origin_allowed(no[i], list), "'%s'", no[i]);
    CHECK(!srv_origin_allowed("http://localhost:5173", NULL)); /* CORS off */
    CHECK(!srv_origin_allowed(NULL, list));
    CHECK(srv_origin_allowed("https://anything.example:8443", "*"));
    CHECK(srv_origin_allowed("http://a.b", " * "));
    CHECK(!srv_origin_allowed("null", "*"));
    CHECK(!srv_origin_allowed("http://a.b/c", "*"));
    CHECK(!srv_origin_allowed("http://a.b", ""));
    CHECK(!srv_origin_allowed("http://a.b", ","));
    char big[SRV_ORIGIN_MAX + 2];
    memset(big, 'a', sizeof big);
    memcpy(big, "http://", 7);
    big[SRV_ORIGIN_MAX + 1] = 0; /* one byte over */
    CHECK(!srv_origin_allowed(big, "*"));
    big[SRV_ORIGIN_MAX] = 0;
    CHECK(srv_origin_allowed(big, "*"));
    for (int c = 1; c < 256; c++) { /* every byte in a host: only the name characters pass */
        char o[32];
        snprintf(o, sizeof o, "http://a%cb", c);
        bool want = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("-._~", c);
        CHECK_MSG(srv_origin_allowed(o, "*") == want, "byte %d", c);
    }
}

static void test_top_logits(void) {
    const float x[] = {0.5f, 3.0f, NAN, 3.0f, -INFINITY, 2.0f, 7.0f, 3.0f};
    int32_t ids[8];
    CHECK(srv_top_logits(x, 8, 4, ids) == 4);
    CHECK(ids[0] == 6 && ids[1] == 1 && ids[2] == 3 && ids[3] == 7); /* ties: lower id first */
    CHECK(srv_top_logits(x, 8, 8, ids) == 7);                        /* NaN never taken */
    CHECK(ids[4] == 5 && ids[5] == 0 && ids[6] == 4);
    CHECK(srv_top_logits(x, 8, 0, ids) == 0);
    CHECK(srv_top_logits(x, 2, 5, ids) == 2 && ids[0] == 1 && ids[1] == 0);
    const float y[] = {1000.0f, 1000.0f, -1000.0f};
    CHECK_NEAR(srv_logsumexp(y, 3), 1000.0 + log(2.0), 1e-9);
    const float z[] = {-INFINITY, -INFINITY};
    CHECK(isinf(srv_logsumexp(z, 2)) && srv_logsumexp(z, 2) < 0);
}

static int piece(void *ctx, int32_t token, char *buf, int cap) {
    (void)ctx;
    const char *p = token == 1 ? "\xff<b>\"" : "tok";
    int n = (int)strlen(p);
    if (n <= cap) memcpy(buf, p, (size_t)n);
    return n;
}

static void test_step_json(void) {
    float logits[300];
    for (int i = 0; i < 300; i++) logits[i] = (float)(i % 7) - (float)i * 0.01f;
    logits[1] = 9.0f;
    nc_explain ex = {.n_stages = 1, .token = 1, .p = 0.75f, .n_candidates = 3, .n_top = 1};
    ex.stage[0] = (nc_explain_stage){.name = "top-k", .param = 3, .n_before = 300, .n_after = 3, .mass = 0.9, .what = "top-k 3"};
    ex.top[0] = (nc_token_prob){1, 0.75f};
    srv_explain_step in = {.choice = 2, .step = 5, .token = 1, .finish = NC_FINISH_LENGTH, .ex = &ex, .logits = logits,
                           .n_vocab = 300, .top_n = 200};
    char *s = srv_json_explain_step(&in, piece, NULL);
    cJSON *o = s ? cJSON_Parse(s) : NULL;
    CHECK(o != NULL);
    if (o) {
        CHECK(cJSON_GetObjectItem(o, "sample")->valueint == 2 && cJSON_GetObjectItem(o, "step")->valueint == 5);
        CHECK(!strcmp(cJSON_GetObjectItem(o, "piece")->valuestring, "\xEF\xBF\xBD<b>\"")); /* the bad byte repaired */
        CHECK(!strcmp(cJSON_GetObjectItem(o, "finish")->valuestring, "length"));
        cJSON *st = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "stages"), 0);
        CHECK(st && !strcmp(cJSON_GetObjectItem(st, "name")->valuestring, "top-k") &&
              cJSON_GetObjectItem(st, "n_after")->valueint == 3);
        cJSON *raw = cJSON_GetObjectItem(o, "raw"), *top = cJSON_GetObjectItem(raw, "top");
        CHECK(cJSON_GetArraySize(top) == 200 && cJSON_GetObjectItem(raw, "n_vocab")->valueint == 300);
        double lse = cJSON_GetObjectItem(raw, "logsumexp")->valuedouble;
        CHECK_NEAR(lse, srv_logsumexp(logits, 300), 1e-8);
        cJSON *first = cJSON_GetArrayItem(top, 0);
        CHECK(cJSON_GetObjectItem(first, "token")->valueint == 1);
        CHECK_NEAR(cJSON_GetObjectItem(first, "logprob")->valuedouble, 9.0 - lse, 1e-6);
        CHECK_NEAR(cJSON_GetObjectItem(raw, "token_logit")->valuedouble, 9.0, 0);
        cJSON_Delete(o);
    }
    free(s);
}

int main(void) {
    test_assets();
    test_etags();
    test_origins();
    test_top_logits();
    test_step_json();
    return test_summary("test_server_web");
}
