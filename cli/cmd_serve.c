/* nucleus serve: the OpenAI-compatible HTTP server (src/server) over one model, until SIGINT or
 * SIGTERM, which stop it gracefully. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "server/server.h"

#define USAGE                                                                                                  \
    "usage: nucleus serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--parallel N] [-c CTX] [-t THREADS]\n"  \
    "                     [--api-key KEY] [--max-queue Q] [--prefill-chunk N] [--kv-size N]\n"                 \
    "                     " CLI_CACHE_USAGE " [--slot-save-path DIR] [--swa-full]\n"                        \
    "                     [--context-shift [--keep N] | --attention-sinks N]\n"                              \
    "                     [-md FILE | --lookup-ngram N] [--draft-max N] [--draft-min N] [--draft-fixed]\n"    \
    "  --parallel N       slots: requests (choices) decoded together (default 4)\n"                            \
    "  -c CTX             context per slot in tokens (default: the model's, at most 4096)\n"                   \
    "  --kv-size N        tokens of KV cache all slots share, in blocks of 256 (default: parallel x CTX);\n"   \
    "                     a slot holds what it uses, prompts' blocks stay cached for reuse\n"                  \
    "  --max-queue Q      requests that may wait for a slot; past them, 503 (default 64)\n"                    \
    "  --prefill-chunk N  prompt tokens prefilled per step, alongside the decoding slots (default 256)\n"      \
    "  --port 0           picks a free port (printed)\n"                                                       \
    "  --slot-save-path DIR  POST /slots/ID?action=save|restore {\"filename\": NAME} saves a slot's last\n"    \
    "                     request to DIR/NAME or restores one from there into the prefix cache (off without)\n" \
    "  --swa-full         sliding-window layers keep every position: their prompts can be cached and saved\n" \
    "  --context-shift, --keep N, --attention-sinks N: as in `nucleus run`, for requests that set\n"         \
    "                     max_tokens (others end at a full context, finish \"length\")\n"                      \
    CLI_CACHE_HELP

typedef struct serve_opts {
    const char *model;
    srv_config cfg;
    cli_context context;
    cli_spec spec;
} serve_opts;

/* The value after a numeric flag into *out, within [lo, hi]. */
static bool int_flag(int argc, char **argv, int *i, long lo, long hi, long *out) {
    const char *flag = argv[*i], *v = cli_value(argc, argv, i);
    return v && cli_int(flag, v, lo, hi, out);
}

static int parse_args(int argc, char **argv, serve_opts *o) {
    long v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        int r = cli_cache_arg(argc, argv, &i, &o->cfg.type_k, &o->cfg.type_v);
        if (r == 0) r = cli_context_arg(argc, argv, &i, &o->context);
        if (r == 0) r = cli_spec_arg(argc, argv, &i, &o->spec);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) ok = (o->model = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--host")) ok = (o->cfg.host = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--api-key")) ok = (o->cfg.api_key = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--slot-save-path")) ok = (o->cfg.slot_save_path = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--swa-full")) o->cfg.swa_full = true;
        else if (!strcmp(a, "--port")) ok = int_flag(argc, argv, &i, 0, 65535, &v) && ((o->cfg.port = (int)v), true);
        else if (!strcmp(a, "--parallel") || !strcmp(a, "-np"))
            ok = int_flag(argc, argv, &i, 1, 256, &v) && ((o->cfg.n_parallel = (int32_t)v), true);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
            ok = int_flag(argc, argv, &i, 0, 1 << 20, &v) && ((o->cfg.n_ctx = (int32_t)v), true);
        else if (!strcmp(a, "--kv-size"))
            ok = int_flag(argc, argv, &i, 1, 1L << 30, &v) && ((o->cfg.kv_cells = v), true);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            ok = int_flag(argc, argv, &i, 0, 1024, &v) && ((o->cfg.n_threads = (int32_t)v), true);
        else if (!strcmp(a, "--max-queue"))
            ok = int_flag(argc, argv, &i, 0, 1 << 16, &v) && ((o->cfg.max_queue = (int32_t)v), true);
        else if (!strcmp(a, "--prefill-chunk"))
            ok = int_flag(argc, argv, &i, 1, 1 << 16, &v) && ((o->cfg.chunk = (int32_t)v), true);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(USAGE, stdout);
            fputs(cli_spec_usage(), stdout);
            return 1;
        } else {
            fprintf(stderr, "error: serve: unknown option '%s'\n" USAGE, a);
            return 2;
        }
        if (!ok) return 2;
    }
    if (!o->model) o->model = cli_default_model();
    if (!cli_context_finish(&o->context) || !cli_spec_finish(&o->spec)) return 2;
    o->cfg.spec = (nc_spec_params){.lookup_ngram = (int32_t)o->spec.lookup_ngram, .draft_max = (int32_t)o->spec.draft_max,
                                   .draft_min = (int32_t)o->spec.draft_min, .fixed = o->spec.fixed};
    o->cfg.context = o->context.policy;
    if (o->cfg.api_key && !*o->cfg.api_key) {
        fprintf(stderr, "error: --api-key: the key is empty\n");
        return 2;
    }
    return 0;
}

/* The name /v1/models reports: the file name without its directory and ".gguf". */
static char *model_id(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf")) n -= 5;
    return strndup(base, n);
}

/* SIGINT and SIGTERM write to a pipe the main thread waits on: whichever thread the signal lands
 * on (the server's, the sanitizer runtime's), the main thread wakes and stops the server. */
static int stop_pipe[2] = {-1, -1};
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) {
    stop_signal = sig;
    ssize_t ignored = write(stop_pipe[1], "x", 1);
    (void)ignored;
}

static int install_stop_signals(void) {
    if (pipe(stop_pipe) != 0) return -1;
    struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that goes away must not kill the process */
    return 0;
}

static void wait_for_stop_signal(void) {
    char c;
    while (read(stop_pipe[0], &c, 1) < 0 && errno == EINTR) {}
    close(stop_pipe[0]);
    close(stop_pipe[1]);
}

int cmd_serve(int argc, char **argv) {
    serve_opts o = {.cfg = {.host = "127.0.0.1", .port = 8080, .n_parallel = 4, .max_queue = 64, .chunk = 256,
                            .max_body = 4u << 20, .drain_seconds = 5}};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    if (install_stop_signals()) {
        perror("error: serve: pipe");
        return 1;
    }
    nc_err err;
    nc_model *m = NULL, *dm = NULL;
    srv_server *sv = NULL;
    char *id = model_id(o.model);
    o.cfg.model_id = id ? id : "model";
    /* Listen first: while the models load, /health answers 503 {"status":"loading"}. */
    if (srv_listen(&sv, &o.cfg, &err)) {
        fprintf(stderr, "error: serve: %s\n", err.msg);
        free(id);
        return 1;
    }
    if (o.spec.draft_path && nc_model_load(&dm, o.spec.draft_path, &err)) {
        fprintf(stderr, "error: serve: --draft-model %s: %s\n", o.spec.draft_path, err.msg);
        srv_stop(sv);
        free(id);
        return 1;
    }
    o.cfg.draft_model = dm;
    if (nc_model_load(&m, o.model, &err) || srv_start(sv, m, &o.cfg, &err)) {
        fprintf(stderr, "error: serve: %s%s\n", dm && strstr(err.msg, "draft") ? "--draft-model: " : "", err.msg);
        srv_stop(sv);
        nc_model_free(m);
        nc_model_free(dm);
        free(id);
        return 1;
    }
    if (*srv_note(sv)) fprintf(stderr, "note: %s\n", srv_note(sv));
    char kvt[16];
    fprintf(stderr, "nucleus serve: %s, %d slots, %s kernels, KV cache %s\nlistening on http://%s%s%s:%d\n",
            o.cfg.model_id, o.cfg.n_parallel, nc_kernels_name(), cli_cache_types(o.cfg.type_k, o.cfg.type_v, kvt),
            strchr(o.cfg.host, ':') ? "[" : "", o.cfg.host,
            strchr(o.cfg.host, ':') ? "]" : "", srv_port(sv));
    if (cli_spec_on(&o.spec)) {
        if (o.spec.draft_path) fprintf(stderr, "speculative decoding: draft model %s", o.spec.draft_path);
        else fprintf(stderr, "speculative decoding: prompt lookup of %ld-grams", o.spec.lookup_ngram);
        fprintf(stderr, ", at most %ld drafts per step%s\n", o.spec.max_given ? o.spec.draft_max : 16L,
                o.spec.fixed ? "" : " (adaptive)");
    }
    wait_for_stop_signal();
    fprintf(stderr, "nucleus serve: %s, stopping\n", stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
    srv_stop(sv);
    nc_model_free(m);
    nc_model_free(dm);
    free(id);
    return 0;
}
