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
    "usage: nucleus serve [-m MODEL | -hf USER/REPO[:QUANT] | --models-dir DIR | --models FILE] [--host 127.0.0.1]\n" \
    "                     [--port 8080] [--parallel N] [-c CTX] [-t THREADS]\n"                                 \
    "                     [--models-max N] [--memory-budget BYTES] [--sleep-idle-seconds S]\n"                  \
    "                     [--api-key KEY | --api-key-file FILE] [--max-queue Q] [--prefill-chunk N] [--kv-size N]\n"                 \
    "                     " CLI_CACHE_USAGE " " CLI_DEVICE_USAGE " [--fast] [--slot-save-path DIR [--slot-save-max-bytes N]] [--swa-full]\n"                        \
    "                     [--context-shift [--keep N] | --attention-sinks N]\n"                              \
    "                     [-md FILE | --lookup-ngram N] [--draft-max N] [--draft-min N] [--draft-fixed] " CLI_LORA_USAGE "\n" \
    "                     [--alias NAME] [--chat-template FILE] [--reasoning-format auto|none] [--reasoning-budget N]\n" \
    "                     [--allowed-hosts LIST] [--cors ORIGINS] [--max-connections N] [--max-conn-per-ip N] [--timeout-headers S] [--timeout-body S]\n" \
    "                     [--request-timeout S]\n" \
    CLI_HF_HELP                                                                                                \
    "  --models-dir DIR   router mode: serve every model in DIR (NAME.gguf, Hugging Face directories,\n"       \
    "                     a directory holding one GGUF), each loaded when a request's \"model\" names it\n"    \
    "  --models FILE      router mode: an INI file of presets ([alias] model = PATH, ctx-size, parallel,\n"    \
    "                     cache-type-k/v, model-draft, chat-template-file, load-on-startup; [*] for all)\n"    \
    "  --models-max N     models in memory at once; the least recently used idle one is unloaded (0: no limit)\n" \
    "  --memory-budget B  bytes (K, M, G, T suffixes) the models in memory may take together (0: no limit)\n" \
    "  --sleep-idle-seconds S  unload a model no request used for S seconds\n"                                 \
    "  --allowed-hosts LIST  Host names answered (comma-separated; '*': any); default on a loopback\n"      \
    "                     address: localhost, 127.0.0.1, [::1]; elsewhere any (DNS rebinding)\n"             \
    "  --cors ORIGINS        pages on these origins (comma-separated, e.g. http://localhost:5173; '*':\n"   \
    "                     any) may call the API from a browser; off by default\n"                          \
    "  --max-connections N   open connections, a thread each (default 1024)\n"                                \
    "  --max-conn-per-ip N   from one client address, an IPv6 client's /64 counting as one (default 64;\n"    \
    "                     0: no limit, e.g. behind a balancer)\n"                                            \
    "  --timeout-headers S   a request's headers must arrive within S seconds of the connection opening\n"    \
    "                     or of its previous answer, else the connection is closed (default 15)\n"            \
    "  --timeout-body S   its body within S seconds of its headers (default 60)\n"                           \
    "  --request-timeout S  a request's work ends S seconds after its body arrived (default 600; 0: no\n"  \
    "                     deadline): a generation keeps its text (finish \"length\"), other work gets 503\n" \
    "  --api-key KEY      every endpoint but /health needs Authorization: Bearer KEY; --api-key-file FILE\n"   \
    "                     reads it from a file (kept out of the process list), else $NUCLEUS_API_KEY\n"      \
    "  --alias NAME       the model's id in /v1/models and in responses (default: the file name)\n"          \
    "  --chat-template FILE  a Jinja chat template used instead of the model's tokenizer.chat_template\n"   \
    "  --reasoning-format F  auto (default): a chat reply's reasoning (<think>...</think>, gpt-oss's\n"      \
    "                     analysis ...) goes to reasoning_content; none: it stays in the content\n"          \
    "  --reasoning-budget N  tokens of reasoning, then the template's end of reasoning is forced\n"         \
    "                     (default -1: no limit; 0 also renders the template with enable_thinking false)\n" \
    "  --parallel N       slots: requests (choices) decoded together (default 4)\n"                            \
    "  -c CTX             context per slot in tokens (default: the model's, at most 4096)\n"                   \
    "  --kv-size N        tokens of KV cache all slots share, in blocks of 256 (default: parallel x CTX);\n"   \
    "                     a slot holds what it uses, prompts' blocks stay cached for reuse\n"                  \
    "  --max-queue Q      requests that may wait for a slot; past them, 503 (default 64)\n"                    \
    "  --prefill-chunk N  prompt tokens prefilled per step, alongside the decoding slots (default 256)\n"      \
    "  --port 0           picks a free port (printed)\n"                                                       \
    "  --slot-save-path DIR  POST /slots/ID?action=save|restore {\"filename\": NAME} saves a slot's last\n"    \
    "                     request to DIR/NAME or restores one from there into the prefix cache (off without)\n" \
    "  --slot-save-max-bytes N  what the files in DIR may hold after a save (suffix K, M, G, T: powers of\n" \
    "                     1024; default 10G); a save past it gets 507\n"                                  \
    "  --swa-full         sliding-window layers keep every position: their prompts can be cached and saved\n" \
    "  --context-shift, --keep N, --attention-sinks N: as in `nucleus run`, for requests that set\n"         \
    "                     max_tokens (others end at a full context, finish \"length\")\n"                      \
    CLI_CACHE_HELP CLI_DEVICE_HELP CLI_FAST_HELP CLI_LORA_HELP

typedef struct serve_opts {
    const char *model, *alias, *template_path, *key_path;
    const char *models_dir, *models_file; /* router mode */
    char *template_src;    /* the --chat-template file's text */
    char *key_src;         /* the --api-key-file's text */
    const char *key_from;  /* where the API key came from */
    srv_config cfg;
    cli_context context;
    cli_spec spec;
    cli_hf hf;
    cli_lora lora;
} serve_opts;

/* The value after a numeric flag into *out, within [lo, hi]. */
static bool int_flag(int argc, char **argv, int *i, long lo, long hi, long *out) {
    const char *flag = argv[*i], *v = cli_value(argc, argv, i);
    return v && cli_int(flag, v, lo, hi, out);
}

/* A byte count: digits and an optional K, M, G or T (powers of 1024); at least 1 when positive. */
static bool byte_flag(int argc, char **argv, int *i, bool positive, uint64_t *out) {
    const char *flag = argv[*i], *v = cli_value(argc, argv, i);
    if (!v) return false;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    int shift = !*end ? 0 : !strcmp(end, "K") ? 10 : !strcmp(end, "M") ? 20 : !strcmp(end, "G") ? 30 : !strcmp(end, "T") ? 40 : -1;
    if (errno || end == v || *v == '-' || shift < 0 || (positive && n == 0) || n > (UINT64_MAX >> shift)) {
        fprintf(stderr, "error: %s: expected a byte count%s (digits, then K, M, G or T), got '%s'\n", flag,
                positive ? " of at least 1" : "", v);
        return false;
    }
    *out = (uint64_t)n << shift;
    return true;
}

static int parse_args(int argc, char **argv, serve_opts *o) {
    long v;
    uint64_t bytes;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        int r = cli_cache_arg(argc, argv, &i, &o->cfg.type_k, &o->cfg.type_v);
        if (r == 0) r = cli_device_arg(argc, argv, &i, &o->cfg.n_gpu_layers);
        if (r == 0) r = cli_context_arg(argc, argv, &i, &o->context);
        if (r == 0) r = cli_spec_arg(argc, argv, &i, &o->spec);
        if (r == 0) r = cli_hf_arg(argc, argv, &i, &o->hf);
        if (r == 0) r = cli_lora_arg(argc, argv, &i, &o->lora);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) ok = (o->model = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--host")) ok = (o->cfg.host = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--alias")) ok = (o->alias = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--chat-template")) ok = (o->template_path = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--api-key")) ok = (o->cfg.api_key = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--api-key-file")) ok = (o->key_path = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--allowed-hosts")) ok = (o->cfg.allowed_hosts = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--cors")) ok = (o->cfg.cors = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--slot-save-path")) ok = (o->cfg.slot_save_path = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--models-dir")) ok = (o->models_dir = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--models") || !strcmp(a, "--models-preset")) ok = (o->models_file = cli_value(argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--models-max"))
            ok = int_flag(argc, argv, &i, 0, SRV_MAX_MODELS, &v) && ((o->cfg.models_max = (int32_t)v), true);
        else if (!strcmp(a, "--sleep-idle-seconds"))
            ok = int_flag(argc, argv, &i, 1, 1L << 30, &v) && ((o->cfg.sleep_idle_seconds = (double)v), true);
        else if (!strcmp(a, "--memory-budget"))
            ok = byte_flag(argc, argv, &i, false, &bytes) && ((o->cfg.memory_budget = (double)bytes), true);
        else if (!strcmp(a, "--reasoning-format")) {
            const char *f = cli_value(argc, argv, &i);
            ok = f && (!strcmp(f, "auto") || !strcmp(f, "deepseek") || !strcmp(f, "none"));
            if (f && !ok) fprintf(stderr, "error: --reasoning-format must be auto or none, got '%s'\n", f);
            if (ok) o->cfg.reasoning_none = !strcmp(f, "none");
        } else if (!strcmp(a, "--reasoning-budget"))
            ok = int_flag(argc, argv, &i, -1, 1 << 30, &v) && ((o->cfg.reasoning_budget = (int32_t)v), true);
        else if (!strcmp(a, "--slot-save-max-bytes")) ok = byte_flag(argc, argv, &i, true, &o->cfg.slot_save_max_bytes);
        else if (!strcmp(a, "--swa-full")) o->cfg.swa_full = true;
        else if (!strcmp(a, "--fast")) o->cfg.fast = true;
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
        else if (!strcmp(a, "--max-connections"))
            ok = int_flag(argc, argv, &i, 1, 1 << 16, &v) && ((o->cfg.max_connections = (int)v), true);
        else if (!strcmp(a, "--max-conn-per-ip"))
            ok = int_flag(argc, argv, &i, 0, 1 << 16, &v) && ((o->cfg.max_conn_per_ip = v ? (int)v : -1), true);
        else if (!strcmp(a, "--timeout-headers"))
            ok = int_flag(argc, argv, &i, 1, 3600, &v) && ((o->cfg.header_seconds = (double)v), true);
        else if (!strcmp(a, "--timeout-body"))
            ok = int_flag(argc, argv, &i, 1, 3600, &v) && ((o->cfg.body_seconds = (double)v), true);
        else if (!strcmp(a, "--request-timeout"))
            ok = int_flag(argc, argv, &i, 0, 1L << 30, &v) && ((o->cfg.request_seconds = (double)v), true);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(USAGE, stdout);
            fputs(cli_spec_usage(), stdout);
            return -1;
        } else {
            fprintf(stderr, "error: serve: unknown option '%s'\n" USAGE, a);
            return 2;
        }
        if (!ok) return 2;
    }
    bool router = o->models_dir || o->models_file;
    if (router && (o->model || o->hf.repo)) {
        fprintf(stderr, "error: serve: give -m MODEL or -hf USER/REPO (one model), or --models-dir / --models "
                        "(several), not both\n");
        return 2;
    }
    if (!router && (o->cfg.models_max || o->cfg.memory_budget > 0 || o->cfg.sleep_idle_seconds > 0)) {
        fprintf(stderr, "error: serve: --models-max, --memory-budget and --sleep-idle-seconds need --models-dir or --models\n");
        return 2;
    }
    if (router && (o->alias || o->template_path || o->spec.draft_path)) {
        fprintf(stderr, "error: serve: in router mode, --alias, --chat-template and -md are set per model in --models "
                "(alias, chat-template-file, model-draft)\n");
        return 2;
    }
    if (router && o->lora.n) {
        fprintf(stderr, "error: serve: --lora applies to one model: router mode does not take adapters\n");
        return 2;
    }
    if (!cli_context_finish(&o->context) || !cli_spec_finish(&o->spec)) return 2;
    o->cfg.spec = (nc_spec_params){.lookup_ngram = (int32_t)o->spec.lookup_ngram, .draft_max = (int32_t)o->spec.draft_max,
                                   .draft_min = (int32_t)o->spec.draft_min, .fixed = o->spec.fixed};
    o->cfg.context = o->context.policy;
    if (o->cfg.api_key && !*o->cfg.api_key) {
        fprintf(stderr, "error: --api-key: the key is empty\n");
        return 2;
    }
    if (o->cfg.api_key) o->key_from = "--api-key";
    if (o->cfg.slot_save_max_bytes && !o->cfg.slot_save_path) {
        fprintf(stderr, "error: --slot-save-max-bytes: give --slot-save-path DIR too\n");
        return 2;
    }
    if (o->alias && !*o->alias) {
        fprintf(stderr, "error: --alias: the name is empty\n");
        return 2;
    }
    /* router mode names no model here: cli_model_path would pick the default one (it still
     * refuses --offline without -hf) */
    if (router && !o->hf.offline) return 0;
    return cli_model_path(&o->model, &o->hf);
}

/* The API key from --api-key-file (its text less trailing white space) or $NUCLEUS_API_KEY when no
 * flag gives one: a key on the command line is visible to every user in /proc/PID/cmdline. */
static int read_key(serve_opts *o) {
    if (!o->key_path) {
        const char *env = getenv("NUCLEUS_API_KEY");
        if (o->cfg.api_key || !env) return 0;
        if (!*env) { /* set, so meant to protect the server: starting open would fail open */
            fprintf(stderr, "error: NUCLEUS_API_KEY is set but empty: give the key, or unset it to serve "
                            "without authentication\n");
            return -1;
        }
        o->cfg.api_key = env;
        o->key_from = "$NUCLEUS_API_KEY";
        return 0;
    }
    if (o->cfg.api_key) {
        fprintf(stderr, "error: --api-key and --api-key-file: give one\n");
        return -1;
    }
    size_t len;
    if (!(o->key_src = cli_read_text(o->key_path, &len))) return -1;
    while (len > 0 && strchr(" \t\r\n", o->key_src[len - 1])) o->key_src[--len] = 0;
    if (len == 0 || strlen(o->key_src) != len) {
        fprintf(stderr, "error: --api-key-file %s: %s\n", o->key_path, len ? "the key holds a NUL byte" : "the file holds no key");
        return -1;
    }
    o->cfg.api_key = o->key_src;
    o->key_from = "--api-key-file";
    return 0;
}

static void opts_free(serve_opts *o) {
    free(o->template_src);
    free(o->key_src);
}

/* The --chat-template file's text into cfg (the server parses it). */
static int read_template(serve_opts *o) {
    if (!o->template_path) return 0;
    size_t len;
    if (!(o->template_src = cli_read_text(o->template_path, &len))) return -1;
    if (len == 0 || strlen(o->template_src) != len) {
        fprintf(stderr, "error: --chat-template %s: %s\n", o->template_path,
                len == 0 ? "the file is empty" : "the file holds a NUL byte");
        return -1;
    }
    o->cfg.chat_template = o->template_src;
    return 0;
}

/* Who may use the server, with a warning where anyone may: the summary's last lines, in either
 * mode. */
static void print_access(const serve_opts *o, const srv_server *sv) {
    srv_info si;
    srv_get_info(sv, &si);
    if (si.authenticated) fprintf(stderr, "  authentication: on (API key from %s)\n", o->key_from);
    else fprintf(stderr, "  authentication: off (no API key)\n");
    if (!si.authenticated && !si.loopback)
        fprintf(stderr, "warning: listening on %s, beyond loopback, without an API key: whoever reaches the port "
                        "can use the server (--api-key-file FILE or $NUCLEUS_API_KEY)\n",
                o->cfg.host);
    if (si.any_host)
        fprintf(stderr, "warning: the Host check is off (%s): a web page on any site can reach the server "
                        "through DNS rebinding; --allowed-hosts NAMES turns it on\n",
                o->cfg.allowed_hosts ? "--allowed-hosts '*'" : "every Host is answered on a non-loopback address");
}

/* What the server runs, before the `listening on` line (which scripts wait for). */
static void print_summary(const serve_opts *o, const nc_model *m, const srv_server *sv) {
    nc_model_info info;
    srv_info si;
    char kvt[16];
    nc_cache_type type_k, type_v;
    nc_model_get_info(m, &info);
    srv_get_info(sv, &si);
    nc_context_cache_types(si.context, &type_k, &type_v);
    fprintf(stderr, "nucleus serve: %s, %d slots, %s kernels, KV cache %s\n", o->cfg.model_id, o->cfg.n_parallel,
            nc_kernels_name(), cli_cache_types(type_k, type_v, kvt));
    fprintf(stderr, "  model: %s (%s, %d layers, %.1f MB), id %s\n", o->model, info.arch, info.n_layer,
            info.file_bytes / 1e6, o->cfg.model_id);
    char kv[160];
    fprintf(stderr, "  slots: %d x %d tokens of context; KV cache %s, %.2f MiB\n", o->cfg.n_parallel, si.n_ctx,
            cli_kv_summary(si.context, kv, sizeof kv), si.kv_bytes / (1024.0 * 1024.0));
    fprintf(stderr, "  threads: %d; kernels: %s; chat template: %s\n", si.n_threads, nc_kernels_name(),
            o->template_path ? o->template_path : *srv_note(sv) ? "ChatML" : "the model's");
    if (strcmp(si.device, "cpu")) fprintf(stderr, "  gpu: %s\n", si.device);
    print_access(o, sv);
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

/* Router mode: the models of --models-dir and --models, served until a signal. */
static int serve_router(serve_opts *o) {
    nc_err err;
    srv_presets ps = {0};
    if ((o->models_dir && srv_presets_scan_dir(&ps, o->models_dir, &err)) || srv_presets_scan_cache(&ps, &err) ||
        (o->models_file && srv_presets_load_ini(&ps, o->models_file, &err))) {
        fprintf(stderr, "error: serve: %s\n", err.msg);
        srv_presets_free(&ps);
        return 2;
    }
    if (ps.n == 0) {
        fprintf(stderr, "error: serve: no models found in %s\n", o->models_dir ? o->models_dir : o->models_file);
        return 2;
    }
    fprintf(stderr, "nucleus serve: router of %d models, %d slots each, %s kernels (loaded on first use", ps.n,
            o->cfg.n_parallel, nc_kernels_name());
    if (o->cfg.models_max) fprintf(stderr, ", at most %d at once", o->cfg.models_max);
    if (o->cfg.memory_budget > 0) fprintf(stderr, ", within %.0f bytes", o->cfg.memory_budget);
    if (o->cfg.sleep_idle_seconds > 0) fprintf(stderr, ", unloaded after %.0f s idle", o->cfg.sleep_idle_seconds);
    fprintf(stderr, ")\n");
    for (int32_t i = 0; i < ps.n; i++)
        fprintf(stderr, "  model %s: %s\n", ps.p[i].id, ps.p[i].path);
    o->cfg.model_id = "router";
    srv_server *sv = NULL;
    if (srv_listen(&sv, &o->cfg, &err) || srv_start_router(sv, &ps, &o->cfg, &err)) {
        fprintf(stderr, "error: serve: %s\n", err.msg);
        srv_stop(sv);
        srv_presets_free(&ps);
        return 1;
    }
    print_access(o, sv);
    fprintf(stderr, "listening on http://%s%s%s:%d\n", strchr(o->cfg.host, ':') ? "[" : "", o->cfg.host,
            strchr(o->cfg.host, ':') ? "]" : "", srv_port(sv));
    wait_for_stop_signal();
    fprintf(stderr, "nucleus serve: %s, stopping\n", stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
    srv_stop(sv);
    return 0;
}

int cmd_serve(int argc, char **argv) {
    serve_opts o = {.cfg = {.host = "127.0.0.1", .port = 8080, .n_parallel = 4, .max_queue = 64, .chunk = 256,
                            .reasoning_budget = -1,
                            .max_body = 4u << 20, .drain_seconds = 5, .request_seconds = 600}};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if (read_template(&o) || read_key(&o)) {
        opts_free(&o);
        return 2;
    }
    if (install_stop_signals()) {
        perror("error: serve: pipe");
        return 1;
    }
    if (o.models_dir || o.models_file) {
        rc = serve_router(&o);
        opts_free(&o);
        return rc;
    }
    nc_err err;
    nc_model *m = NULL, *dm = NULL;
    srv_server *sv = NULL;
    char *id = o.alias ? NULL : model_id(o.model);
    o.cfg.model_id = o.alias ? o.alias : id ? id : "model";
    o.cfg.model_path = o.model;
    /* Listen first: while the models load, /health answers 503 {"status":"loading"}. */
    if (srv_listen(&sv, &o.cfg, &err)) {
        fprintf(stderr, "error: serve: %s\n", err.msg);
        free(id);
        opts_free(&o);
        return 1;
    }
    if (o.spec.draft_path && nc_model_load(&dm, o.spec.draft_path, &err)) {
        fprintf(stderr, "error: serve: --draft-model %s: %s\n", o.spec.draft_path, err.msg);
        srv_stop(sv);
        free(id);
        opts_free(&o);
        return 1;
    }
    o.cfg.draft_model = dm;
    o.cfg.lora_paths = o.lora.path;
    o.cfg.lora_scales = o.lora.scale;
    o.cfg.n_lora = o.lora.n;
    if (cli_model_load(&m, o.model, &o.lora, &err) || srv_start(sv, m, &o.cfg, &err)) {
        fprintf(stderr, "error: serve: %s%s\n", dm && strstr(err.msg, "draft") ? "--draft-model: " : "", err.msg);
        srv_stop(sv);
        nc_model_free(m);
        nc_model_free(dm);
        free(id);
        opts_free(&o);
        return 1;
    }
    if (*srv_note(sv)) fprintf(stderr, "note: %s\n", srv_note(sv));
    print_summary(&o, m, sv);
    fprintf(stderr, "listening on http://%s%s%s:%d\n", strchr(o.cfg.host, ':') ? "[" : "", o.cfg.host,
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
    opts_free(&o);
    return 0;
}
