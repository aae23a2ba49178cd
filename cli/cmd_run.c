/* nucleus run: prefill the prompt once, then decode with the sampler chain (or beam search),
 * streaming the text as soon as it is safe to show: complete UTF-8 characters and nothing that
 * may still turn out to be part of a stop string. Explanations and log-probabilities go to
 * stderr, so stdout stays the text. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"

typedef struct run_opts {
    const char *model, *prompt, *prompt_cache;
    const char *prompt_arg, *prompt_file; /* -p TEXT and -f FILE as given ("-": stdin) */
    char *prompt_owned;                   /* the prompt when read or unescaped */
    bool escape, special, fast;
    long threads, ctx;
    nc_cache_type type_k, type_v;
    int32_t n_gpu_layers;
    cli_decoding dec;
    cli_spec spec;
    cli_hf hf;
    cli_lora lora;
} run_opts;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage_to(FILE *out) {
    fprintf(out,
            "usage: nucleus run [-m MODEL | -hf USER/REPO[:QUANT]] (-p PROMPT | -f FILE) [-e] [--special] [-n N] [-t THREADS] [-c CTX]\n"
            "                   " CLI_CACHE_USAGE " " CLI_DEVICE_USAGE " [--fast] [--prompt-cache FILE] " CLI_LORA_USAGE "\n"
            "                   [decoding options]\n"
            "  -m, --model FILE   the model (GGUF file or Hugging Face directory)\n"
            CLI_HF_HELP
            "  -p, --prompt TEXT  the prompt; '-' reads it from stdin\n"
            "  -f, --file FILE    the prompt is FILE's text ('-': stdin); one final newline is dropped, as llama.cpp\n"
            "  -e, --escape       process escapes in the prompt: \\n \\r \\t \\\\ \\\" \\' \\xHH (as llama.cpp's -e)\n"
            "  --special          special-token text in the prompt (e.g. <|im_start|>) becomes its token\n"
            "  -n, --n-predict N  tokens to generate at most (128; -1: until the context is full)\n"
            "  -t, --threads N    threads (default: all cores)\n"
            "  -c, --ctx-size N   context in tokens (default: the prompt plus -n, within the training length)\n"
            "  -N SAMPLES         several samples: each one's header (--- sample i of N ---) on stderr, text on stdout\n"
            CLI_CACHE_HELP CLI_DEVICE_HELP CLI_FAST_HELP CLI_LORA_HELP
            "  --prompt-cache FILE  reuse the prompt's keys and values saved in FILE as far as the prompt starts\n"
            "                       the same, then save this prompt's there; a FILE of another model, or damaged,\n"
            "                       is an error and is left as it is\n%s%s%s",
            cli_decoding_usage(), cli_context_usage(), cli_spec_usage());
}

static void usage(void) { usage_to(stderr); }

static int parse_n_predict(const char *flag, const char *v, run_opts *o) {
    long n;
    if (!cli_int(flag, v, -1, 1 << 24, &n)) return 2;
    if (n == 0) {
        fprintf(stderr, "error: %s: allowed values are -1 (until the context is full) and 1..%d\n", flag, 1 << 24);
        return 2;
    }
    o->dec.stop.max_tokens = n < 0 ? 0 : (int32_t)n;
    return 0;
}

/* The prompt from -p or -f (a file, or stdin for "-"), with -e's escapes processed. */
static int read_prompt(run_opts *o) {
    const char *src = o->prompt_file ? o->prompt_file : o->prompt_arg;
    bool from_text = !o->prompt_file && strcmp(src, "-") != 0;
    if (from_text) {
        if (!*src) { fprintf(stderr, "error: -p: the prompt is empty\n"); return -1; }
        o->prompt = src;
    } else {
        size_t len;
        if (!(o->prompt_owned = cli_read_text(src, &len))) return -1;
        const char *what = !strcmp(src, "-") ? "stdin" : src;
        if (len == 0) { fprintf(stderr, "error: %s: the prompt is empty\n", what); return -1; }
        if (strlen(o->prompt_owned) != len) { fprintf(stderr, "error: %s: the prompt holds a NUL byte\n", what); return -1; }
        if (o->prompt_owned[len - 1] == '\n') o->prompt_owned[--len] = 0; /* llama.cpp drops one final newline */
        o->prompt = o->prompt_owned;
    }
    if (o->escape) {
        char *unescaped = cli_unescape("-e", o->prompt);
        if (!unescaped) return -1;
        free(o->prompt_owned);
        o->prompt = o->prompt_owned = unescaped;
    }
    return 0;
}

static int parse(int argc, char **argv, run_opts *o) {
    *o = (run_opts){0};
    cli_decoding_init(&o->dec);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage_to(stdout); return -1; }
        int r = cli_decoding_arg(argc, argv, &i, &o->dec);
        if (r == 0) r = cli_cache_arg(argc, argv, &i, &o->type_k, &o->type_v);
        if (r == 0) r = cli_device_arg(argc, argv, &i, &o->n_gpu_layers);
        if (r == 0) r = cli_spec_arg(argc, argv, &i, &o->spec);
        if (r == 0) r = cli_hf_arg(argc, argv, &i, &o->hf);
        if (r == 0) r = cli_lora_arg(argc, argv, &i, &o->lora);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(o->model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!(o->prompt_arg = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!(o->prompt_file = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-e") || !strcmp(a, "--escape")) o->escape = true;
        else if (!strcmp(a, "--special")) o->special = true;
        else if (!strcmp(a, "--fast")) o->fast = true;
        else if (!strcmp(a, "--prompt-cache")) { if (!(o->prompt_cache = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { if (!(v = cli_value(argc, argv, &i)) || parse_n_predict(a, v, o)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 512, &o->threads)) return 2; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 24, &o->ctx)) return 2; }
        else { fprintf(stderr, "error: run: unknown option '%s'\n", a); usage(); return 2; }
    }
    if (!cli_decoding_finish(&o->dec) || !cli_spec_finish(&o->spec)) return 2;
    if ((o->dec.use_beams || o->dec.use_contrastive) && cli_spec_on(&o->spec)) {
        fprintf(stderr, "error: run: %s does not decode speculatively (drop it or the draft flags)\n",
                o->dec.use_beams ? "beam search (--beams)" : "contrastive search (--penalty-alpha)");
        return 2;
    }
    if (o->prompt_cache && o->dec.use_contrastive) {
        fprintf(stderr, "error: --prompt-cache: contrastive search (--penalty-alpha) computes every prompt token's hidden "
                        "state, so it neither reuses nor saves a prompt cache\n");
        return 2;
    }
    if (!o->prompt_arg && !o->prompt_file) { fprintf(stderr, "error: run: -p PROMPT or -f FILE is required\n"); usage(); return 2; }
    if (o->prompt_arg && o->prompt_file) { fprintf(stderr, "error: run: give one of -p PROMPT and -f FILE, not both\n"); return 2; }
    if (read_prompt(o)) return 2;
    int rc = cli_model_path(&o->model, &o->hf);
    if (rc) return rc;
    if (!o->dec.seed_given) o->dec.sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    return 0;
}

/* ---- printing tokens ---- */

/* The text of one token on its own (for explanations), cut to the buffer. */
static int piece(nc_detok *dt, int32_t id, char *buf, int cap) {
    int n = nc_detok_push(dt, id, buf, cap - 8);
    if (n > cap - 8) n = 0;
    return n + nc_detok_flush(dt, buf + n, 8);
}

/* A JSON string literal: quotes, backslashes and control characters escaped. */
static void put_quoted(FILE *f, const char *s, int n) {
    fputc('"', f);
    for (int i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch == '\t') fputs("\\t", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static void put_token(FILE *f, nc_detok *dt, int32_t id) {
    char buf[256];
    fprintf(f, "%d ", id);
    put_quoted(f, buf, piece(dt, id, buf, sizeof buf));
}

static void put_json_token(FILE *f, nc_detok *dt, int32_t id) {
    char buf[256];
    fprintf(f, "\"token\":%d,\"piece\":", id);
    put_quoted(f, buf, piece(dt, id, buf, sizeof buf));
}

static void put_json_number(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fputs("null", f);
}

/* ---- the generation callback ---- */

typedef struct run_out {
    const cli_decoding *dec;
    nc_detok *dt;      /* token pieces for explanations */
    int32_t n_samples;
    char **text;       /* per sample, when several are printed at the end */
    size_t *len;
    bool oom;
} run_out;

static void explain_text(const run_out *o, const nc_gen_event *ev) {
    const nc_explain *e = ev->explain;
    if (o->n_samples > 1) fprintf(stderr, "[explain] sample %d step %d\n", ev->sample, ev->step);
    else fprintf(stderr, "[explain] step %d\n", ev->step);
    for (int32_t i = 0; i < e->n_stages; i++) fprintf(stderr, "  %s\n", e->stage[i].what);
    fputs("  chose ", stderr);
    put_token(stderr, o->dt, e->token);
    fprintf(stderr, " p %.3f of %d |", e->p, e->n_candidates);
    for (int32_t i = 0; i < e->n_top; i++) {
        fputs(i ? ", " : " ", stderr);
        put_token(stderr, o->dt, e->top[i].token);
        fprintf(stderr, " %.3f", e->top[i].p);
    }
    fputc('\n', stderr);
}

static void json_stage(const nc_explain_stage *s) {
    fputs("{\"name\":", stderr);
    put_quoted(stderr, s->name, (int)strlen(s->name));
    fputs(",\"param\":", stderr);
    put_json_number(stderr, s->param);
    fprintf(stderr, ",\"n_before\":%d,\"n_after\":%d,\"mass\":", s->n_before, s->n_after);
    put_json_number(stderr, s->mass);
    fputs(",\"what\":", stderr);
    put_quoted(stderr, s->what, (int)strlen(s->what));
    fputc('}', stderr);
}

static void json_logprobs(const run_out *o, const nc_sample_info *info) {
    fputs(",\"logprob\":", stderr);
    put_json_number(stderr, info->logprob);
    fputs(",\"top_logprobs\":[", stderr);
    for (int32_t i = 0; i < info->n_top; i++) {
        fputs(i ? ",{" : "{", stderr);
        put_json_token(stderr, o->dt, info->top[i].token);
        fputs(",\"logprob\":", stderr);
        put_json_number(stderr, info->top[i].logprob);
        fputc('}', stderr);
    }
    fputc(']', stderr);
}

/* One JSON line per step: {"sample":0,"step":3,"stages":[...],"token":...,"p":...,"top":[...]}. */
static void explain_json(const run_out *o, const nc_gen_event *ev) {
    const nc_explain *e = ev->explain;
    fprintf(stderr, "{\"sample\":%d,\"step\":%d,\"stages\":[", ev->sample, ev->step);
    for (int32_t i = 0; i < e->n_stages; i++) {
        if (i) fputc(',', stderr);
        json_stage(&e->stage[i]);
    }
    fputs("],", stderr);
    put_json_token(stderr, o->dt, e->token);
    fprintf(stderr, ",\"p\":%.6g,\"n_candidates\":%d,\"top\":[", e->p, e->n_candidates);
    for (int32_t i = 0; i < e->n_top; i++) {
        fputs(i ? ",{" : "{", stderr);
        put_json_token(stderr, o->dt, e->top[i].token);
        fprintf(stderr, ",\"p\":%.6g}", e->top[i].p);
    }
    fputc(']', stderr);
    if (o->dec->sp.n_logprobs) json_logprobs(o, ev->info);
    fprintf(stderr, ",\"finish\":\"%s\"}\n", nc_finish_name(ev->finish));
}

static void logprobs_text(const run_out *o, const nc_gen_event *ev) {
    const nc_sample_info *info = ev->info;
    if (o->n_samples > 1) fprintf(stderr, "[logprobs] sample %d step %d: ", ev->sample, ev->step);
    else fprintf(stderr, "[logprobs] step %d: ", ev->step);
    put_token(stderr, o->dt, info->token);
    fprintf(stderr, " %.4f |", info->logprob);
    for (int32_t i = 0; i < info->n_top; i++) {
        fputs(i ? ", " : " ", stderr);
        put_token(stderr, o->dt, info->top[i].token);
        fprintf(stderr, " %.4f", info->top[i].logprob);
    }
    fputc('\n', stderr);
}

static bool append_text(run_out *o, int32_t sample, const char *text, int32_t n) {
    char *grown = realloc(o->text[sample], o->len[sample] + (size_t)n + 1);
    if (!grown) return false;
    memcpy(grown + o->len[sample], text, (size_t)n);
    o->len[sample] += (size_t)n;
    grown[o->len[sample]] = 0;
    o->text[sample] = grown;
    return true;
}

static int on_event(const nc_gen_event *ev, void *user) {
    run_out *o = user;
    if (o->dec->explain == CLI_EXPLAIN_TEXT) explain_text(o, ev);
    else if (o->dec->explain == CLI_EXPLAIN_JSON) explain_json(o, ev);
    if (o->dec->sp.n_logprobs && o->dec->explain != CLI_EXPLAIN_JSON) logprobs_text(o, ev);
    if (o->n_samples == 1) {
        fwrite(ev->text, 1, (size_t)ev->n_text, stdout);
        fflush(stdout);
    } else if (ev->n_text > 0 && !append_text(o, ev->sample, ev->text, ev->n_text)) {
        o->oom = true;
        return 1;
    }
    return 0;
}

/* ---- the two decoders ---- */

typedef struct run_stats {
    double t_prompt, t_gen, t_model; /* t_model: of t_gen, in the model's passes (0: not measured) */
    int32_t n_gen, n_cached;  /* n_cached: prompt tokens taken from the cache, not computed */
    char finish[64];
    bool context_full;              /* a sample (the best beam) ended because the context was full */
    int32_t n_evictions, n_evicted; /* what the context policy did, over all samples */
    nc_spec_stats spec;
} run_stats;

static int run_sampling(nc_context *c, const nc_model *m, const run_opts *o, const nc_spec_params *spec,
                        const int32_t *prompt, int n_prompt, run_stats *st, nc_err *err) {
    run_out out = {.dec = &o->dec, .dt = nc_detok_new(m), .n_samples = o->dec.n_samples};
    out.text = calloc((size_t)out.n_samples, sizeof *out.text);
    out.len = calloc((size_t)out.n_samples, sizeof *out.len);
    int rc = -1;
    nc_gen_result res;
    nc_gen_params gp = {.sampling = o->dec.sp, .stop = o->dec.stop, .n_samples = o->dec.n_samples,
                        .context = o->dec.context.policy, .spec = *spec};
    if (!out.dt || !out.text || !out.len) snprintf(err->msg, sizeof err->msg, "out of memory");
    else if (out.n_samples == 1) {
        fputs(o->prompt, stdout);
        fflush(stdout);
    }
    if (out.dt && out.text && out.len &&
        !(o->dec.use_contrastive ? nc_contrastive_search(c, m, prompt, n_prompt, &o->dec.contrastive, &o->dec.sp,
                                                         &o->dec.stop, on_event, &out, &res, err)
                                 : nc_generate(c, m, prompt, n_prompt, &gp, on_event, &out, &res, err))) {
        int32_t n_stuck = 0;
        for (int32_t i = 0; i < res.n_samples; i++) {
            const nc_gen_sample *s = &res.samples[i];
            if (out.n_samples > 1) { /* the header on stderr: stdout holds only the texts */
                fflush(stdout);
                fprintf(stderr, "--- sample %d of %d: %d tokens, finish %s ---\n", i + 1, res.n_samples, s->n_tokens,
                        nc_finish_name(s->finish));
                printf("%s%s\n", o->prompt, out.text[i] ? out.text[i] : "");
            }
            st->n_gen += s->n_tokens;
            st->context_full |= s->finish == NC_FINISH_CONTEXT;
            n_stuck += s->finish == NC_FINISH_GRAMMAR;
            st->n_evictions += s->n_evictions;
            st->n_evicted += s->n_evicted;
            size_t len = strlen(st->finish);
            snprintf(st->finish + len, sizeof st->finish - len, "%s%s", i ? "," : "", nc_finish_name(s->finish));
        }
        if (out.n_samples == 1) putchar('\n');
        fflush(stdout);
        if (n_stuck)
            fprintf(stderr, "warning: %d of %d samples stopped where no token of the model's vocabulary continues the "
                            "grammar: their text is not a complete sentence of it\n", n_stuck, res.n_samples);
        st->t_prompt = res.t_prompt;
        st->t_gen = res.t_gen;
        st->t_model = res.t_model;
        st->n_cached = res.n_cached;
        st->spec = res.spec;
        nc_gen_result_free(&res);
        rc = 0;
    } else if (out.oom) snprintf(err->msg, sizeof err->msg, "out of memory");
    for (int32_t i = 0; out.text && i < out.n_samples; i++) free(out.text[i]);
    free(out.text);
    free(out.len);
    nc_detok_free(out.dt);
    return rc;
}

static int run_beams(nc_context *c, const nc_model *m, const run_opts *o, const int32_t *prompt, int n_prompt,
                     run_stats *st, nc_err *err) {
    nc_beam_result res;
    if (nc_beam_search(c, m, prompt, n_prompt, &o->dec.beam, &o->dec.sp, &o->dec.stop, &res, err)) return -1;
    for (int32_t i = 0; i < res.n; i++) {
        const nc_beam_hyp *h = &res.hyps[i];
        if (res.n > 1)
            printf("--- beam %d of %d: score %.4f, logprob %.4f, %d tokens, finish %s ---\n", i + 1, res.n, h->score,
                   h->sum_logprob, h->n_tokens, nc_finish_name(h->finish));
        printf("%s%s\n", o->prompt, h->text);
        if (res.n == 1)
            fprintf(stderr, "[beam] score %.4f, logprob %.4f, %d tokens, finish %s\n", h->score, h->sum_logprob,
                    h->n_tokens, nc_finish_name(h->finish));
        st->n_gen += h->n_tokens;
    }
    fflush(stdout);
    snprintf(st->finish, sizeof st->finish, "%s", res.n ? nc_finish_name(res.hyps[0].finish) : "");
    st->context_full = res.n && res.hyps[0].finish == NC_FINISH_CONTEXT;
    st->t_prompt = res.t_prompt;
    st->t_gen = res.t_gen;
    st->n_cached = res.n_cached;
    nc_beam_result_free(&res);
    return 0;
}

static void print_stats(const run_opts *o, const nc_model_info *info, nc_context *c, double t_load, int n_prompt,
                        const run_stats *st) {
    fprintf(stderr, "\n[model] %s: %s, %d layers, %.1f MB, kernels %s, %d threads, seed %llu\n", o->model, info->arch,
            info->n_layer, info->file_bytes / 1e6, nc_kernels_name(), nc_context_n_threads(c),
            (unsigned long long)o->dec.sp.seed);
    if (strcmp(nc_context_device(c), "cpu")) fprintf(stderr, "[gpu] %s\n", nc_context_device(c));
    char kv[160];
    fprintf(stderr, "[kv cache] %s, %.2f MiB for %d tokens\n", cli_kv_summary(c, kv, sizeof kv),
            nc_kv_bytes_total(c) / (1024.0 * 1024.0), nc_context_n_ctx(c));
    char reused[48] = "";
    if (st->n_cached) snprintf(reused, sizeof reused, " (%d reused)", st->n_cached);
    char passes[48] = "";
    if (st->t_model > 0 && st->t_gen > 0)
        snprintf(passes, sizeof passes, " (%.1f%% in the model's passes)", 100 * st->t_model / st->t_gen);
    fprintf(stderr, "[time] load %.1f ms | prompt %d tokens%s, %.1f tok/s | generated %d tokens, %.1f tok/s%s | stop: %s\n",
            t_load * 1e3, n_prompt, reused, (n_prompt - st->n_cached) / (st->t_prompt > 0 ? st->t_prompt : 1e-9),
            st->n_gen, st->n_gen > 0 ? st->n_gen / (st->t_gen > 0 ? st->t_gen : 1e-9) : 0.0, passes, st->finish);
}

/* Cells per sequence: -c, else the prompt plus what may be generated, within the training
 * context (a longer prompt is refused rather than run past what the model was trained on). */
static long context_size(const run_opts *o, const nc_model_info *info, int n_prompt) {
    if (o->ctx) return o->ctx;
    long want = o->dec.stop.max_tokens ? n_prompt + o->dec.stop.max_tokens : info->n_ctx_train;
    return want < info->n_ctx_train ? want : info->n_ctx_train;
}

/* A refused context policy: which flag, in which context (before the library's reason). */
static void policy_refused(nc_err *err, const char *flag, long n_ctx) {
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    snprintf(err->msg, sizeof err->msg, "%s cannot run in a context of %ld tokens: %.400s", flag, n_ctx, why);
}

/* Why the text ended early, or what the context policy did (stderr). */
static void print_context(const run_opts *o, nc_context *c, const run_stats *st) {
    int32_t n_ctx = nc_context_n_ctx(c);
    if (st->context_full)
        fprintf(stderr, "[stopped: the context is full (%d tokens)%s]\n", n_ctx,
                o->dec.use_beams || o->dec.use_contrastive ? "" : "; use --context-shift or --attention-sinks N to go on");
    if (st->n_evictions)
        fprintf(stderr, "[context] %s made room %d times in the %d-token context, dropping %d tokens\n",
                o->dec.context.shift ? "context shift" : "attention sinks", st->n_evictions, n_ctx, st->n_evicted);
}

/* ---- --prompt-cache ---- */

/* "--prompt-cache: " before err's message, and `after` behind it. Returns -1. */
static int cache_error(nc_err *err, const char *after) {
    char msg[2 * sizeof err->msg];
    int n = snprintf(msg, sizeof msg, "--prompt-cache: %s%s", err->msg, after);
    size_t k = n < 0 ? 0 : (size_t)n < sizeof err->msg ? (size_t)n : sizeof err->msg - 1;
    memcpy(err->msg, msg, k);
    err->msg[k] = 0;
    return -1;
}

/* Load the cells of FILE that hold the start of the prompt into sequence 0: the generation takes
 * them from the prefix cache. *n_saved: the tokens FILE holds, -1 when it does not exist. A file
 * that cannot be used (another model, damaged, not a cache file) is an error: it is left for the
 * user to look at. */
static int prompt_cache_load(nc_context *c, const char *path, const int32_t *prompt, int n_prompt, int32_t *n_saved,
                             bool *same, nc_err *err) {
    struct stat st;
    *n_saved = -1;
    *same = false;
    if (stat(path, &st) != 0 && errno == ENOENT) return 0;
    nc_kv_file *f;
    if (nc_kv_file_open(&f, c, path, err))
        return cache_error(err, " (the file is left as it is: delete it or name another file)");
    nc_kv_file_info fi;
    nc_kv_file_get_info(f, &fi);
    int32_t k = 0;
    while (k < fi.n_tokens && k < n_prompt && fi.tokens[k] == prompt[k]) k++;
    *n_saved = fi.n_tokens;
    *same = k == n_prompt && fi.n_tokens == n_prompt;
    int rc = nc_kv_file_load(f, 0, k, err);
    nc_kv_file_close(f);
    return rc ? cache_error(err, "") : 0;
}

/* After the generation: the prompt's cells into FILE, unless it holds exactly them already. */
static int prompt_cache_save(nc_context *c, const char *path, int n_prompt, int32_t n_saved, bool same,
                             const run_stats *st, nc_err *err) {
    fprintf(stderr, "[prompt cache] %s: ", path);
    if (n_saved < 0) fprintf(stderr, "not found, ");
    else fprintf(stderr, "holds %d tokens, ", n_saved);
    fprintf(stderr, "reused %d of the prompt's %d tokens", st->n_cached, n_prompt);
    if (same) {
        fprintf(stderr, "; it holds this prompt already\n");
        return 0;
    }
    /* a context shift or attention sinks moved cells of the prompt: the file marks them as moved,
     * and a later run reuses only the cells before them */
    int32_t n = nc_kv_seq_len(c, 0) < n_prompt ? nc_kv_seq_len(c, 0) : n_prompt;
    uint64_t bytes;
    if (nc_kv_seq_save(c, 0, n, path, &bytes, err)) {
        fputc('\n', stderr);
        return cache_error(err, "");
    }
    fprintf(stderr, "; saved the prompt (%.1f KiB%s)\n", bytes / 1024.0,
            st->n_evictions ? ", with the cells the context policy moved" : "");
    return 0;
}

static void describe_chain(const nc_model *m, int32_t n_vocab, const cli_decoding *d) {
    nc_sampler *s;
    nc_err err;
    if (d->explain == CLI_EXPLAIN_TEXT && d->use_contrastive)
        fprintf(stderr, "[explain] contrastive search: penalty-alpha %g, top-k %d\n", d->contrastive.penalty_alpha,
                d->contrastive.top_k);
    else if (d->explain == CLI_EXPLAIN_TEXT && !nc_sampler_new(&s, m, n_vocab, &d->sp, &err)) {
        fprintf(stderr, "[explain] chain: %s\n", nc_sampler_describe(s));
        nc_sampler_free(s);
    }
}

int cmd_run(int argc, char **argv) {
    run_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) {
        free(o.prompt_owned);
        cli_decoding_free(&o.dec);
        return rc < 0 ? 0 : rc; /* -1: help was asked for */
    }
    nc_err err;
    nc_model *m = NULL;
    nc_context *c = NULL, *dc = NULL;
    nc_model *dm = NULL;
    nc_spec_params spec;
    int32_t *prompt = NULL;
    double t0 = now_s();
    if (cli_model_load(&m, o.model, &o.lora, &err)) goto fail;
    nc_model_info info;
    nc_model_get_info(m, &info);
    int n_prompt = cli_tokenize(m, o.prompt, true, o.special, &prompt, &err);
    if (n_prompt < 0) goto fail;
    if (n_prompt == 0) { snprintf(err.msg, sizeof err.msg, "the prompt is empty and the model adds no BOS token"); goto fail; }
    long n_ctx = context_size(&o, &info, n_prompt);
    if (n_prompt > n_ctx) {
        if (o.ctx) snprintf(err.msg, sizeof err.msg, "the prompt has %d tokens, more than the context of %ld (-c)",
                            n_prompt, n_ctx);
        else snprintf(err.msg, sizeof err.msg, "the prompt has %d tokens, more than the model's context of %ld "
                                               "(its training length; -c N runs a larger one)", n_prompt, n_ctx);
        goto fail;
    }
    const cli_context *cx = &o.dec.context;
    int32_t bos = nc_token_bos(m);
    if (nc_ctx_policy_check(&cx->policy, (int32_t)n_ctx, n_prompt, bos >= 0 && prompt[0] == bos, &err)) {
        policy_refused(&err, cx->shift ? "--context-shift" : "--attention-sinks", n_ctx);
        goto fail;
    }
    /* a saved prompt needs every position of sliding-window layers, not only a ring's worth (and
     * rings share no prefixes) */
    nc_context_params cp = {.n_ctx = (int32_t)n_ctx, .n_threads = (int32_t)o.threads,
                            .n_seq_max = o.dec.use_beams         ? o.dec.beam.n_beams
                                         : o.dec.use_contrastive ? o.dec.contrastive.top_k
                                                                 : o.dec.n_samples,
                            .type_k = o.type_k, .type_v = o.type_v, .swa_full = o.prompt_cache != NULL, .fast = o.fast,
                            .n_gpu_layers = o.n_gpu_layers};
    if (nc_context_new(&c, m, &cp, &err) || nc_ctx_policy_supported(c, &cx->policy, &err) ||
        cli_spec_open(&o.spec, m, &cp, &spec, &dm, &dc, &err))
        goto fail;
    int32_t n_saved = -1;
    bool same = false;
    if (o.prompt_cache && prompt_cache_load(c, o.prompt_cache, prompt, n_prompt, &n_saved, &same, &err)) goto fail;
    double t_load = now_s() - t0;
    describe_chain(m, info.n_vocab, &o.dec);
    run_stats st = {0};
    if (o.dec.use_beams ? run_beams(c, m, &o, prompt, n_prompt, &st, &err)
                        : run_sampling(c, m, &o, &spec, prompt, n_prompt, &st, &err))
        goto fail;
    print_context(&o, c, &st);
    if (o.prompt_cache && prompt_cache_save(c, o.prompt_cache, n_prompt, n_saved, same, &st, &err)) goto fail;
    print_stats(&o, &info, c, t_load, n_prompt, &st);
    if (cli_spec_on(&o.spec)) cli_spec_report(&st.spec);
    rc = 0;
    goto done;
fail:
    fflush(stdout);
    fprintf(stderr, "error: %s\n", err.msg);
    rc = 1;
done:
    free(prompt);
    nc_context_free(c);
    nc_model_free(m);
    nc_context_free(dc);
    nc_model_free(dm);
    cli_decoding_free(&o.dec);
    free(o.prompt_owned);
    return rc;
}
