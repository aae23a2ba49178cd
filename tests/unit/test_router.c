/* Router mode without models: --models-dir scans and INI presets (server/presets.h), and the
 * router's policy (server/router.h) over a fake loader: load on first use, --models-max and
 * --memory-budget evicting the least recently used idle model, a busy one retiring (and staying
 * when room was made otherwise), a failing
 * model failing alone and not tried again until its file changes, unload waiting for leases,
 * requests waiting for a load (at most --max-queue, and not once their client left, their
 * deadline passed or the server stops), idle
 * unloading, 404 naming the models. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server/models.h"
#include "server/presets.h"
#include "server/router.h"
#include "server/scheduler.h"
#include "test.h"

static char dir[256];

static void write_file(const char *rel, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void make_dir(const char *rel) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    mkdir(path, 0755);
}

static void test_scan(void) {
    write_file("alpha.gguf", "GGUF");
    write_file("beta.GGUF", "GGUF");
    write_file("mmproj-alpha.gguf", "x");
    write_file("notes.txt", "x");
    write_file("big-00001-of-00002.gguf", "GGUF");
    write_file("big-00002-of-00002.gguf", "GGUF");
    make_dir("hf");
    write_file("hf/config.json", "{}");
    make_dir("one");
    write_file("one/weights-q8.gguf", "GGUF");
    write_file("one/mmproj-f16.gguf", "x");
    make_dir("two");
    write_file("two/a.gguf", "GGUF");
    write_file("two/b.gguf", "GGUF");
    make_dir("empty");
    srv_presets ps = {0};
    nc_err err;
    CHECK_MSG(srv_presets_scan_dir(&ps, dir, &err) == 0, "%s", err.msg);
    const char *want[] = {"alpha", "beta", "big", "hf", "one"};
    CHECK_MSG(ps.n == 5, "%d models", ps.n);
    for (int i = 0; i < ps.n && i < 5; i++) CHECK_MSG(!strcmp(ps.p[i].id, want[i]), "%s at %d", ps.p[i].id, i);
    srv_preset *big = srv_presets_find(&ps, "big"), *one = srv_presets_find(&ps, "one"), *hf = srv_presets_find(&ps, "hf");
    /* a split set: one model, loaded from its first part, the size of both */
    CHECK(big && strstr(big->path, "/big-00001-of-00002.gguf") && big->est_bytes == 8);
    CHECK(one && strstr(one->path, "one/weights-q8.gguf"));
    CHECK(hf && strstr(hf->path, "/hf") && hf->est_bytes == 2);
    CHECK(srv_presets_find(&ps, "alpha")->est_bytes == 4);
    srv_presets_free(&ps);

    /* a name found twice */
    make_dir("alpha");
    write_file("alpha/config.json", "{}");
    CHECK(srv_presets_scan_dir(&ps, dir, &err) == -1 && strstr(err.msg, "two models are named 'alpha'"));
    srv_presets_free(&ps);
    CHECK(srv_presets_scan_dir(&ps, "/nonexistent-dir", &err) == -1 && strstr(err.msg, "/nonexistent-dir"));
}

static int ini(srv_presets *ps, const char *text, nc_err *err) {
    char file[512];
    snprintf(file, sizeof file, "%s/models.ini", dir);
    return srv_presets_parse_ini(ps, text, strlen(text), file, err);
}

static void expect_ini_error(const char *text, const char *needle) {
    srv_presets ps = {0};
    nc_err err = {{0}};
    CHECK_MSG(ini(&ps, text, &err) == -1, "accepted: %s", text);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "'%s' does not say '%s'", err.msg, needle);
    srv_presets_free(&ps);
}

static void test_ini(void) {
    srv_presets ps = {0};
    nc_err err;
    srv_preset *p = NULL;
    CHECK(srv_presets_scan_dir(&ps, dir, &err) == -1); /* alpha twice, from test_scan */
    srv_presets_free(&ps);
    const char *text = "version = 1\n; comment\n# comment\n[*]\nctx-size = 1024\nparallel = 3\n"
                       "[coder]\nmodel = sub/coder.gguf\nnp = 2\ncache-type = q8_0\nmodel-draft = /abs/draft.gguf\n"
                       "chat-template-file = t.jinja\nload-on-startup = true\n"
                       "[small]\n m = /abs/small.gguf \n c = 512\n ctk = f32\nalias = tiny\n";
    CHECK_MSG(ini(&ps, text, &err) == 0, "%s", err.msg);
    CHECK(ps.n == 2);
    p = srv_presets_find(&ps, "coder");
    CHECK(p && p->n_ctx == 1024 && p->n_parallel == 2 && p->type_k == NC_CACHE_Q8_0 && p->type_v == NC_CACHE_Q8_0);
    CHECK(p && p->load_on_startup && p->draft && !strcmp(p->draft, "/abs/draft.gguf"));
    CHECK(p && strstr(p->path, "/sub/coder.gguf") && !strncmp(p->path, dir, strlen(dir)));
    CHECK(p && p->chat_template && strstr(p->chat_template, "/t.jinja"));
    p = srv_presets_find(&ps, "tiny");
    CHECK(p && !strcmp(p->path, "/abs/small.gguf") && p->n_ctx == 512 && p->n_parallel == 3 && p->type_k == NC_CACHE_F32 &&
          p->type_v == NC_CACHE_DEFAULT && !p->load_on_startup);
    CHECK(!srv_presets_find(&ps, "small"));
    srv_presets_free(&ps);

    /* options for a model of --models-dir, and [*] over the others */
    unlink("/dev/null/x");
    char scan[512];
    snprintf(scan, sizeof scan, "%s/scan", dir);
    mkdir(scan, 0755);
    char f[600];
    snprintf(f, sizeof f, "%s/m1.gguf", scan);
    fclose(fopen(f, "w"));
    snprintf(f, sizeof f, "%s/m2.gguf", scan);
    fclose(fopen(f, "w"));
    CHECK(srv_presets_scan_dir(&ps, scan, &err) == 0 && ps.n == 2);
    CHECK_MSG(ini(&ps, "[m1]\nctx-size = 256\n[*]\nparallel = 5\n", &err) == 0, "%s", err.msg);
    CHECK(srv_presets_find(&ps, "m1")->n_ctx == 256 && srv_presets_find(&ps, "m1")->n_parallel == 5);
    CHECK(srv_presets_find(&ps, "m2")->n_ctx == 0 && srv_presets_find(&ps, "m2")->n_parallel == 5);
    srv_presets_free(&ps);

    expect_ini_error("[a]\nmodel = x.gguf\nfrobnicate = 1\n", "models.ini:3: unknown key 'frobnicate'");
    expect_ini_error("ctx-size = 5\n", "models.ini:1: 'ctx-size' is outside any section");
    expect_ini_error("[a]\nmodel = x.gguf\nctx-size = big\n", "'ctx-size' must be an integer");
    expect_ini_error("[a]\nmodel = x.gguf\nparallel = 0\n", "'parallel' must be an integer from 1 to 256");
    expect_ini_error("[a]\nmodel = x.gguf\ncache-type-k = q5\n", "must be f16, f32, q8_0 or q4_0");
    expect_ini_error("[a]\nmodel = x.gguf\n[a]\nmodel = y.gguf\n", "section [a] is given twice");
    expect_ini_error("[a\nmodel = x.gguf\n", "a section is written [NAME]");
    expect_ini_error("[nothere]\nctx-size = 5\n", "names no model of --models-dir");
    expect_ini_error("[a]\n", "section [a] is empty");
    expect_ini_error("[*]\nmodel = x.gguf\n", "[*] cannot set 'model'");
    expect_ini_error("[a]\nmodel = x.gguf\nload-on-startup = yes\n", "'load-on-startup' must be true or false");
    expect_ini_error("[a b]\nmodel = x.gguf\n", "a model's name must be");
    expect_ini_error("[a]\nmodel = x.gguf\n[b]\nmodel = y.gguf\nalias = a\n", "two models are named 'a'");
    expect_ini_error("[a]\nmodel x.gguf\n", "expected KEY = VALUE");
    expect_ini_error("[a]\nmodel =\n", "'model' needs a path");
    /* a FIFO given as --models is refused at once, not read (which would block) */
    char fifo[512];
    snprintf(fifo, sizeof fifo, "%s/models-fifo.ini", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(srv_presets_load_ini(&ps, fifo, &err) == -1 && strstr(err.msg, "models-fifo.ini: a FIFO, not a regular file"));
    srv_presets_free(&ps);
        char nul[] = "[a]\nmodel = x\0.gguf\n";
    CHECK(srv_presets_parse_ini(&ps, nul, sizeof nul - 1, "f.ini", &err) == -1 && strstr(err.msg, "NUL"));
    srv_presets_free(&ps);
}

/* ---- The router over a fake loader --------------------------------------------------------- */

static void sleep_s(double s) { nanosleep(&(struct timespec){.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)}, NULL); }

typedef struct fake {
    pthread_mutex_t mu;
    int opens[8], closes[8];
    int live;              /* instances not closed */
    int max_live;          /* the most at once */
    double bytes[8];
} fake;

typedef struct inst {
    int index;
} inst;

static int index_of(const srv_preset *p) { return p->id[0] - 'a'; }

static int fake_open(void *user, const srv_preset *p, void **out, double *bytes, nc_err *err) {
    fake *f = user;
    int i = index_of(p);
    pthread_mutex_lock(&f->mu);
    f->opens[i]++;
    pthread_mutex_unlock(&f->mu);
    if (strstr(p->path, "slow")) sleep_s(0.5);
    if (strstr(p->path, "broken")) {
        snprintf(err->msg, sizeof err->msg, "%s: bad magic", p->path);
        return -1;
    }
    inst *in = malloc(sizeof *in);
    in->index = i;
    *out = in;
    *bytes = f->bytes[i] ? f->bytes[i] : 100;
    pthread_mutex_lock(&f->mu);
    if (++f->live > f->max_live) f->max_live = f->live;
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static void fake_close(void *user, void *p) {
    fake *f = user;
    inst *in = p;
    pthread_mutex_lock(&f->mu);
    f->closes[in->index]++;
    f->live--;
    pthread_mutex_unlock(&f->mu);
    free(in);
}

/* Models a, b, c, ... at the paths given. */
static srv_router *router_of(const char *const *paths, int n, srv_router_config cfg, fake *f) {
    srv_presets ps = {.p = calloc((size_t)n, sizeof *ps.p), .n = n};
    for (int i = 0; i < n; i++) {
        char id[2] = {(char)('a' + i), 0};
        ps.p[i].id = strdup(id);
        ps.p[i].path = strdup(paths[i]);
        ps.p[i].est_bytes = f->bytes[i] ? f->bytes[i] : 100;
    }
    pthread_mutex_init(&f->mu, NULL);
    srv_router_ops ops = {.open = fake_open, .close = fake_close, .user = f};
    srv_router *rt;
    nc_err err;
    if (srv_router_new(&rt, &ps, &cfg, &ops, &err)) {
        srv_presets_free(&ps);
        return NULL;
    }
    return rt;
}

typedef struct states {
    char s[8][16];
} states;

static void note_state(void *user, const srv_model_status *st) {
    states *s = user;
    snprintf(s->s[st->preset->id[0] - 'a'], sizeof s->s[0], "%s", srv_model_state_name(st->state));
}

static const char *state_of(srv_router *rt, int i) {
    static states s;
    srv_router_each(rt, note_state, &s);
    return s.s[i];
}

static void use(srv_router *rt, const char *name) {
    srv_lease l;
    srv_error e;
    CHECK_MSG(srv_router_acquire(rt, name, NULL, &l, &e) == 0, "%s: %s", name, e.message);
    srv_router_release(rt, &l);
}

static void test_lru(void) {
    const char *paths[] = {"/m/a", "/m/b", "/m/c"};
    fake f = {0};
    srv_router *rt = router_of(paths, 3, (srv_router_config){.models_max = 2}, &f);
    CHECK(!strcmp(state_of(rt, 0), "unloaded"));
    use(rt, "a");
    use(rt, "b");
    use(rt, "a"); /* b is now the least recently used */
    CHECK(f.opens[0] == 1 && f.opens[1] == 1);
    use(rt, "c");
    CHECK(!strcmp(state_of(rt, 0), "loaded") && !strcmp(state_of(rt, 1), "unloaded") && !strcmp(state_of(rt, 2), "loaded"));
    CHECK(f.closes[1] == 1 && f.max_live == 2);
    srv_error e;
    srv_lease l;
    CHECK(srv_router_acquire(rt, "zzz", NULL, &l, &e) == -1 && e.status == 404 && !strcmp(e.code, "model_not_found"));
    CHECK(strstr(e.message, "a, b, c") != NULL);
    CHECK(srv_router_acquire(rt, NULL, NULL, &l, &e) == -1 && e.status == 400 && !strcmp(e.param, "model"));
    /* unload and load */
    CHECK(srv_router_unload(rt, "a", &e) == 0 && !strcmp(state_of(rt, 0), "unloaded"));
    CHECK(srv_router_unload(rt, "a", &e) == 0);
    CHECK(srv_router_load(rt, "b", NULL, &e) == 0 && !strcmp(state_of(rt, 1), "loaded") && f.opens[1] == 2);
    srv_router_free(rt);
    CHECK(f.live == 0);
}

static void test_budget(void) {
    const char *paths[] = {"/m/a", "/m/b", "/m/c"};
    fake f = {.bytes = {400, 400, 400}};
    srv_router *rt = router_of(paths, 3, (srv_router_config){.memory_budget = 900}, &f);
    use(rt, "a");
    use(rt, "b"); /* 400 + 400 */
    CHECK(f.max_live == 2);
    use(rt, "c"); /* 1200 would not fit: a goes */
    CHECK(f.max_live == 2 && f.closes[0] == 1);
    srv_router_free(rt);
    /* a model larger than the whole budget */
    fake g = {0};
    rt = router_of(paths, 1, (srv_router_config){.memory_budget = 50}, &g);
    srv_error e;
    srv_lease l;
    CHECK(srv_router_acquire(rt, "a", NULL, &l, &e) == -1 && e.status == 500 && strstr(e.message, "--memory-budget"));
    srv_router_free(rt);
}

typedef struct holder {
    srv_router *rt;
    const char *name;
    double seconds;
    int rc;
} holder;

static void *hold(void *arg) {
    holder *h = arg;
    srv_lease l;
    srv_error e;
    h->rc = srv_router_acquire(h->rt, h->name, NULL, &l, &e);
    if (!h->rc) {
        sleep_s(h->seconds);
        srv_router_release(h->rt, &l);
    }
    return NULL;
}

static void test_busy(void) {
    const char *paths[] = {"/m/a", "/m/b", "/m/c"};
    fake f = {0};
    srv_router *rt = router_of(paths, 3, (srv_router_config){.models_max = 2, .max_waiting = -1}, &f);
    /* a and b busy: c waits until the least recently used of them is free, then takes its place */
    holder ha = {rt, "a", 0.3, -1}, hb = {rt, "b", 0.6, -1};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, hold, &ha);
    sleep_s(0.05);
    pthread_create(&tb, NULL, hold, &hb);
    sleep_s(0.05);
    use(rt, "c");
    CHECK(f.closes[0] == 1 && f.closes[1] == 0 && f.max_live == 2);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(ha.rc == 0 && hb.rc == 0);
    /* an unload waits for the request using the model */
    holder hc = {rt, "c", 0.3, -1};
    pthread_t tc;
    pthread_create(&tc, NULL, hold, &hc);
    sleep_s(0.05);
    srv_error e;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(srv_router_unload(rt, "c", &e) == 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    CHECK_MSG(waited > 0.15, "the unload waited %.3f s", waited);
    pthread_join(tc, NULL);
    CHECK(!strcmp(state_of(rt, 2), "unloaded"));
    srv_router_free(rt);
    /* a (the least recently used) retires for c, then b's lease ends first: b goes instead, and a,
       no longer in the way, stays loaded once its request ends */
    fake g = {0};
    rt = router_of(paths, 3, (srv_router_config){.models_max = 2, .max_waiting = -1}, &g);
    ha = (holder){rt, "a", 0.6, -1};
    hb = (holder){rt, "b", 0.2, -1};
    pthread_create(&ta, NULL, hold, &ha);
    sleep_s(0.05);
    pthread_create(&tb, NULL, hold, &hb);
    sleep_s(0.05);
    use(rt, "c");
    CHECK(g.closes[0] == 0 && g.closes[1] == 1);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    use(rt, "c");
    CHECK_MSG(!strcmp(state_of(rt, 0), "loaded") && g.closes[0] == 0, "a is %s", state_of(rt, 0));
    use(rt, "a");
    CHECK(g.opens[0] == 1);
    srv_router_free(rt);
}

static void test_failure(void) {
    char broken[512];
    snprintf(broken, sizeof broken, "%s/broken.gguf", dir);
    write_file("broken.gguf", "nope");
    const char *paths[] = {"/m/a", broken, "/m/c"};
    fake f = {0};
    srv_router *rt = router_of(paths, 3, (srv_router_config){.models_max = 2}, &f);
    use(rt, "a");
    use(rt, "c");
    srv_lease l;
    srv_error e;
    CHECK(srv_router_acquire(rt, "b", NULL, &l, &e) == -1 && e.status == 500 && !strcmp(e.code, "model_load_failed"));
    CHECK(strstr(e.message, "bad magic") != NULL);
    CHECK(!strcmp(state_of(rt, 1), "failed") && f.opens[1] == 1);
    /* not tried again (nor anything unloaded for it) while the file is as it was */
    int closes = f.closes[0] + f.closes[2];
    CHECK(srv_router_acquire(rt, "b", NULL, &l, &e) == -1 && f.opens[1] == 1 && f.closes[0] + f.closes[2] == closes);
    use(rt, "a");
    use(rt, "c");
    /* POST /models/load tries again; so does a request once the file changed */
    CHECK(srv_router_load(rt, "b", NULL, &e) == -1 && f.opens[1] == 2);
    sleep_s(0.02);
    write_file("broken.gguf", "still broken, but changed");
    CHECK(srv_router_acquire(rt, "b", NULL, &l, &e) == -1 && f.opens[1] == 3);
    srv_router_free(rt);
    CHECK(f.live == 0);
}

static void test_idle(void) {
    const char *paths[] = {"/m/a", "/m/b"};
    fake f = {0};
    srv_router *rt = router_of(paths, 2, (srv_router_config){.sleep_idle = 1}, &f);
    use(rt, "a");
    holder hb = {rt, "b", 1.6, -1};
    pthread_t tb;
    pthread_create(&tb, NULL, hold, &hb);
    sleep_s(1.4);
    CHECK_MSG(!strcmp(state_of(rt, 0), "unloaded"), "a is %s", state_of(rt, 0));
    CHECK(!strcmp(state_of(rt, 1), "loaded")); /* busy, however long */
    pthread_join(tb, NULL);
    srv_router_free(rt);
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* Requests waiting for a model being loaded: at most max_waiting (then 503), and one whose client
 * left (499), whose deadline passed or whose server stops (503 saying which) stops waiting while
 * the load goes on for the others. */
static void test_waiting(void) {
    const char *paths[] = {"/m/slow-a", "/m/slow-b", "/m/slow-c"};
    fake f = {0};
    srv_router *rt = router_of(paths, 3, (srv_router_config){.max_waiting = 1}, &f);
    holder loader = {rt, "a", 0, -1}, waiter = {rt, "a", 0, -1};
    pthread_t tl, tw;
    pthread_create(&tl, NULL, hold, &loader);
    sleep_s(0.1);
    pthread_create(&tw, NULL, hold, &waiter);
    sleep_s(0.1);
    srv_lease l;
    srv_error e;
    CHECK_MSG(srv_router_acquire(rt, "a", NULL, &l, &e) == -1 && e.status == 503 && !strcmp(e.code, "server_overloaded"),
              "%d %s", e.status, e.message);
    CHECK(strstr(e.message, "--max-queue") != NULL);
    pthread_join(tl, NULL);
    pthread_join(tw, NULL);
    CHECK(loader.rc == 0 && waiter.rc == 0 && f.opens[0] == 1);
    /* a client gone: its wait ends within 100 ms, not with the load */
    holder lb = {rt, "b", 0, -1};
    pthread_create(&tl, NULL, hold, &lb);
    sleep_s(0.1);
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    close(sv[1]);
    srv_watch gone = {.fd = sv[0]};
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(srv_router_acquire(rt, "b", &gone, &l, &e) == -1 && e.status == 499);
    double waited = seconds_since(&t0);
    CHECK_MSG(waited < 0.3, "the wait of a client gone took %.3f s", waited);
    CHECK(srv_router_load(rt, "b", &gone, &e) == -1 && e.status == 499);
    close(sv[0]);
    pthread_join(tl, NULL);
    CHECK(lb.rc == 0 && !strcmp(state_of(rt, 1), "loaded"));
    /* the deadline (--request-timeout) passing while it waits, and the server stopping: 503 */
    holder lc = {rt, "c", 0, -1};
    pthread_create(&tl, NULL, hold, &lc);
    sleep_s(0.1);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    srv_watch late = {.fd = -1, .deadline = srv_now() + 0.1, .timeout = 7};
    CHECK_MSG(srv_router_acquire(rt, "c", &late, &l, &e) == -1 && e.status == 503 && !strcmp(e.code, "request_timeout"),
              "%d %s", e.status, e.message);
    CHECK_MSG(strstr(e.message, "deadline of 7 s (--request-timeout)") != NULL, "%s", e.message);
    waited = seconds_since(&t0);
    CHECK_MSG(waited > 0.09 && waited < 0.3, "the wait to a deadline 0.1 s away took %.3f s", waited);
    atomic_bool stopping = true;
    srv_watch stop = {.fd = -1, .stopping = &stopping};
    CHECK_MSG(srv_router_load(rt, "c", &stop, &e) == -1 && e.status == 503 && !strcmp(e.code, "draining"), "%d %s",
              e.status, e.message);
    pthread_join(tl, NULL);
    CHECK(lc.rc == 0 && !strcmp(state_of(rt, 2), "loaded"));
    srv_router_free(rt);
    CHECK(f.live == 0);
}

/* /v1/models' object of a model not loaded, and of one that failed. */
static void test_model_object(void) {
    srv_preset p = {.id = "m1", .path = "/m/m1.gguf", .est_bytes = 1234};
    srv_model_status st = {.preset = &p, .state = SRV_MODEL_UNLOADED, .bytes = 1234, .loads = 2};
    cJSON *o = srv_model_object(&st, 42);
    char *s = cJSON_PrintUnformatted(o);
    CHECK_MSG(s && !strcmp(s, "{\"id\":\"m1\",\"object\":\"model\",\"created\":42,\"owned_by\":\"nucleus\",\"path\":\"/m/m1.gguf\","
                         "\"status\":{\"value\":\"unloaded\"},\"meta\":{\"size\":1234,\"requests\":0,\"idle_seconds\":0,\"loads\":2}}"),
              "%s", s);
    free(s);
    cJSON_Delete(o);
    st.state = SRV_MODEL_FAILED;
    snprintf(st.error, sizeof st.error, "bad magic");
    o = srv_model_object(&st, 42);
    const cJSON *status = cJSON_GetObjectItem(o, "status");
    CHECK(!strcmp(cJSON_GetObjectItem(status, "value")->valuestring, "failed") &&
          !strcmp(cJSON_GetObjectItem(status, "reason")->valuestring, "bad magic"));
    cJSON_Delete(o);
}

/* -m: one model answering to every name, which cannot be unloaded. */
static void test_single(void) {
    const char *paths[] = {"/m/a"};
    fake f = {0};
    srv_router *rt = router_of(paths, 1, (srv_router_config){.any_name = true}, &f);
    srv_error e;
    use(rt, "gpt-4o");
    use(rt, NULL);
    CHECK(f.opens[0] == 1);
    CHECK(srv_router_unload(rt, "a", &e) == -1 && e.status == 400);
    srv_router_free(rt);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/test_router_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_scan();
    test_ini();
    test_lru();
    test_budget();
    test_busy();
    test_waiting();
    test_failure();
    test_idle();
    test_single();
    test_model_object();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    return test_summary("test_router");
}
