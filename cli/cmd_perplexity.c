/* nucleus perplexity: how well a model predicts a text, in windows of the context, as
 * llama-perplexity measures it (chunks of n_ctx tokens, each starting with BOS, the second half of
 * each scored) or in sliding windows with a stride (Hugging Face's perplexity guide); and the KL
 * divergence of a model's next-token distributions from a base model's, saved to a file first
 * (llama-perplexity's --kl-divergence-base / --kl-divergence). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "common.h" /* nc_open_regular */

#define USAGE                                                                                                      \
    "usage: nucleus perplexity [-m MODEL | -hf USER/REPO[:QUANT]] -f FILE [-c CTX] [--stride S] [--chunks N] [-t THREADS]\n"               \
    "                          [--kl-divergence-base BASE [--kl-divergence]] [--json] " CLI_CACHE_USAGE " [--fast] " CLI_DEVICE_USAGE "\n" \
    "                          " CLI_LORA_USAGE "\n"                                                           \
    "  -f FILE            the text (\"-\": stdin), tokenized whole with BOS as the model's vocabulary asks\n"   \
    "  -c CTX             window length in tokens (512, or the model's training context when shorter)\n"          \
    "                     default scheme (llama-perplexity's): chunks of CTX tokens, each starting with BOS,\n"   \
    "                     the tokens of the second half of each scored\n"                                          \
    "  --stride S         sliding windows of CTX tokens S apart instead: every token after the first is scored\n" \
    "                     once, each window scoring its last S tokens (1 <= S < CTX)\n"                           \
    "  --chunks N         only the first N windows\n"                                                               \
    "  --kl-divergence-base BASE  alone: save this model's distributions over the scored tokens to BASE;\n"      \
    "                     with --kl-divergence: read them and report the KL divergence from them, the\n"         \
    "                     perplexity ratio and how often both models rank the same token first\n"                  \
    "  --json             the result as one JSON object\n"                                                         \
    CLI_HF_HELP CLI_FAST_HELP CLI_CACHE_HELP CLI_DEVICE_HELP CLI_LORA_HELP                                        \
    "Progress (with an ETA) goes to stderr: a bar on a terminal, else a line every tenth of the windows.\n"

typedef struct ppl_opts {
    const char *model, *file, *base;
    long n_ctx, stride, chunks, threads;
    bool kld, json, fast;
    nc_cache_type type_k, type_v;
    int32_t n_gpu_layers;
    cli_hf hf;
    cli_lora lora;
} ppl_opts;

/* 0: run; 2: refused (message printed); -1: help was printed. */
static int parse(int argc, char **argv, ppl_opts *o) {
    *o = (ppl_opts){0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = cli_cache_arg(argc, argv, &i, &o->type_k, &o->type_v);
        if (r == 0) r = cli_device_arg(argc, argv, &i, &o->n_gpu_layers);
        if (r == 0) r = cli_hf_arg(argc, argv, &i, &o->hf);
        if (r == 0) r = cli_lora_arg(argc, argv, &i, &o->lora);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(USAGE, stdout); return -1; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(o->model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!(o->file = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 3, 1 << 20, &o->n_ctx)) return 2; }
        else if (!strcmp(a, "--stride")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 20, &o->stride)) return 2; }
        else if (!strcmp(a, "--chunks")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1L << 30, &o->chunks)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 512, &o->threads)) return 2; }
        else if (!strcmp(a, "--kl-divergence-base")) { if (!(o->base = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--kl-divergence")) o->kld = true;
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--fast")) o->fast = true;
        else {
            fprintf(stderr, "error: perplexity: unknown option '%s'\n" USAGE, a);
            return 2;
        }
    }
    if (!o->file) {
        fprintf(stderr, "error: perplexity: -f FILE is required\n");
        return 2;
    }
    if (o->kld && !o->base) {
        fprintf(stderr, "error: perplexity: --kl-divergence needs --kl-divergence-base FILE (saved by a run without --kl-divergence)\n");
        return 2;
    }
    if (o->stride && o->n_ctx && o->stride >= o->n_ctx) {
        fprintf(stderr, "error: --stride: %ld must be less than the context (-c %ld)\n", o->stride, o->n_ctx);
        return 2;
    }
    return cli_model_path(&o->model, &o->hf);
}

/* ---- windows ---- */

/* A window runs the model over tokens[start .. start + n_ctx - 1) (its first one replaced by BOS
 * when the vocabulary adds one) and scores the tokens at its positions lo .. n_ctx - 1, each from
 * the logits of the position before. */
typedef struct window { int32_t start, lo; } window;

/* The windows over n tokens (n >= n_ctx), at most max of them (0: all); returns their count. */
static int plan_windows(int32_t n, int32_t n_ctx, int32_t stride, long max, window *out) {
    int k = 0;
    if (!stride) {
        /* llama-perplexity: the logits of positions n_ctx/2 .. n_ctx - 2 are scored. */
        for (int32_t s = 0; s + n_ctx <= n && (!max || k < max); s += n_ctx) out[k++] = (window){s, n_ctx / 2 + 1};
        return k;
    }
    out[k++] = (window){0, 1};
    int32_t s = 0;
    while ((!max || k < max) && s + stride + n_ctx <= n) {
        s += stride;
        out[k++] = (window){s, n_ctx - stride};
    }
    /* The tail a whole stride does not reach: one last window ending at the text's end. */
    int32_t done = s + n_ctx;
    if ((!max || k < max) && done < n) out[k++] = (window){n - n_ctx, n_ctx - (n - done)};
    return k;
}

/* ---- the base file ----
 *
 * Little-endian: the magic "NCKLDv1\n"; u32 n_vocab, n_ctx, stride (0: chunks), windows, tokens;
 * the text's token ids (i32 each); then one record per scored token, in order: f32 lo, f32 step,
 * f32 the scored token's log-probability, i32 the most likely token, and the n_vocab
 * log-probabilities as u16 q, each lo + step * q. lo is the smallest log-probability but at least
 * -LP_FLOOR; those clamped there (q = 0 with lo = -LP_FLOOR) are left out of the divergence. */
#define KLD_MAGIC "NCKLDv1\n"
#define LP_FLOOR 20.0
#define HEADER_BYTES (8 + 5 * 4)
#define RECORD_HEAD 16

typedef struct base_file {
    FILE *f;
    const char *path;
    uint8_t *rec; /* one record */
    size_t rec_bytes;
} base_file;

static void put_u32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get_u32(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static void put_f32(uint8_t *p, float v) { uint32_t u; memcpy(&u, &v, 4); put_u32(p, u); }
static float get_f32(const uint8_t *p) { uint32_t u = get_u32(p); float v; memcpy(&v, &u, 4); return v; }

static int write_header(base_file *b, int32_t n_vocab, int32_t n_ctx, int32_t stride, int n_win, const int32_t *tok,
                        int32_t n_tok) {
    uint8_t h[HEADER_BYTES];
    memcpy(h, KLD_MAGIC, 8);
    uint32_t v[5] = {(uint32_t)n_vocab, (uint32_t)n_ctx, (uint32_t)stride, (uint32_t)n_win, (uint32_t)n_tok};
    for (int i = 0; i < 5; i++) put_u32(h + 8 + 4 * i, v[i]);
    if (fwrite(h, 1, sizeof h, b->f) != sizeof h) return -1;
    for (int32_t i = 0; i < n_tok; i++) {
        uint8_t t[4];
        put_u32(t, (uint32_t)tok[i]);
        if (fwrite(t, 1, 4, b->f) != 4) return -1;
    }
    return 0;
}

/* Check a base file against this run; false with "error: BASE: what differs" printed. */
static bool check_header(base_file *b, int32_t n_vocab, int32_t n_ctx, int32_t stride, int n_win, const int32_t *tok,
                         int32_t n_tok, uint64_t n_scored) {
    uint8_t h[HEADER_BYTES];
    if (fread(h, 1, sizeof h, b->f) != sizeof h || memcmp(h, KLD_MAGIC, 8)) {
        fprintf(stderr, "error: %s: not a nucleus KL-divergence base file (saved by nucleus perplexity "
                        "--kl-divergence-base without --kl-divergence)\n", b->path);
        return false;
    }
    uint32_t vocab = get_u32(h + 8), ctx = get_u32(h + 12), str = get_u32(h + 16), win = get_u32(h + 20),
             ntok = get_u32(h + 24);
    if (vocab != (uint32_t)n_vocab) {
        fprintf(stderr, "error: %s: saved from a model with a vocabulary of %u tokens; this model has %d (another model)\n",
                b->path, vocab, n_vocab);
        return false;
    }
    if (ctx != (uint32_t)n_ctx) {
        fprintf(stderr, "error: %s: saved with a context of %u tokens (-c %u); this run has -c %d\n", b->path, ctx, ctx, n_ctx);
        return false;
    }
    if (str != (uint32_t)stride) {
        fprintf(stderr, "error: %s: saved with %s; this run has %s\n", b->path, str ? "--stride" : "chunks (no --stride)",
                stride ? "--stride" : "chunks (no --stride)");
        if (str && stride) fprintf(stderr, "  (--stride %u there, %d here)\n", str, stride);
        return false;
    }
    if (ntok != (uint32_t)n_tok) {
        fprintf(stderr, "error: %s: saved from a text of %u tokens; this text has %d (another text or tokenizer)\n",
                b->path, ntok, n_tok);
        return false;
    }
    for (int32_t i = 0; i < n_tok; i++) {
        uint8_t t[4];
        if (fread(t, 1, 4, b->f) != 4) {
            fprintf(stderr, "error: %s: truncated in its token ids\n", b->path);
            return false;
        }
        if ((int32_t)get_u32(t) != tok[i]) {
            fprintf(stderr, "error: %s: saved from another text (or tokenizer): token %d is %d there, %d here\n",
                    b->path, i, (int32_t)get_u32(t), tok[i]);
            return false;
        }
    }
    if (win != (uint32_t)n_win) {
        fprintf(stderr, "error: %s: holds %u windows; this run has %d (--chunks)\n", b->path, win, n_win);
        return false;
    }
    struct stat st;
    uint64_t want = HEADER_BYTES + 4 * (uint64_t)n_tok + n_scored * b->rec_bytes;
    if (fstat(fileno(b->f), &st) == 0 && (uint64_t)st.st_size != want) {
        fprintf(stderr, "error: %s: %lld bytes, but its header asks for %llu (truncated or corrupt)\n", b->path,
                (long long)st.st_size, (unsigned long long)want);
        return false;
    }
    return true;
}

/* Whether two paths name one existing file. */
static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* ---- statistics ---- */

typedef struct kld_stats {
    double nll, nll2, nll_base, nll_base2, nll_nll_base, kld, kld2, dp, dp2, dp4;
    uint64_t same_top, count;
    float *kld_values, *dp_values; /* per scored token, for the percentiles */
} kld_stats;

/* mean and its standard error, as llama-perplexity computes them */
static void mean_unc(double sum, double sum2, uint64_t n, double *mean, double *unc) {
    *mean = n ? sum / (double)n : 0;
    double var = n ? sum2 / (double)n - *mean * *mean : 0;
    *unc = var > 0 && n > 1 ? sqrt(var / (double)(n - 1)) : 0;
}

static double covariance(double a, double b, double ab, uint64_t n) {
    return n > 1 ? (ab / (double)n - (a / (double)n) * (b / (double)n)) / (double)(n - 1) : 0;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* llama-perplexity's: linear between the neighbouring sorted values */
static double percentile(const float *v, uint64_t n, double frac) {
    double p = frac * (double)(n - 1);
    uint64_t i = (uint64_t)p;
    p -= (double)i;
    return (1 - p) * v[i] + p * v[i + 1 < n ? i + 1 : i];
}

static void log_softmax(const float *logits, int n, double *out) {
    double mx = logits[0], z = 0;
    for (int i = 1; i < n; i++) if (logits[i] > mx) mx = logits[i];
    for (int i = 0; i < n; i++) z += exp((double)logits[i] - mx);
    double lz = log(z);
    for (int i = 0; i < n; i++) out[i] = (double)logits[i] - mx - lz;
}

static int argmax(const double *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (v[i] > v[best]) best = i;
    return best;
}

/* One scored token's record for the base file. */
static void encode_record(const double *lp, int n, int32_t target, uint8_t *rec) {
    double lo = 0, hi = lp[0];
    for (int i = 0; i < n; i++) {
        if (lp[i] < lo) lo = lp[i];
        if (lp[i] > hi) hi = lp[i];
    }
    if (lo < -LP_FLOOR) lo = -LP_FLOOR;
    float step = (float)((hi - lo) / 65535.0);
    put_f32(rec, (float)lo);
    put_f32(rec + 4, step);
    put_f32(rec + 8, (float)lp[target]);
    put_u32(rec + 12, (uint32_t)argmax(lp, n));
    for (int i = 0; i < n; i++) {
        double q = step > 0 ? round((lp[i] - (float)lo) / step) : 0;
        uint16_t u = q < 0 ? 0 : q > 65535 ? 65535 : (uint16_t)q;
        rec[RECORD_HEAD + 2 * i] = (uint8_t)u;
        rec[RECORD_HEAD + 2 * i + 1] = (uint8_t)(u >> 8);
    }
}

/* Compare this model's log-probabilities lp with a base record. The base distribution is
 * renormalised over the entries kept, so that the rounding of its log-probabilities moves the
 * divergence only at second order (a model against itself gives ~1e-9, not the rounding error). */
static bool compare_record(const double *lp, int n, int32_t target, const uint8_t *rec, kld_stats *k, double *lb) {
    float lo = get_f32(rec), step = get_f32(rec + 4), tlp = get_f32(rec + 8);
    uint32_t top = get_u32(rec + 12);
    if (!isfinite(lo) || !isfinite(step) || !isfinite(tlp) || step < 0 || lo > 0 || lo < -LP_FLOOR - 1 || tlp > 0 ||
        top >= (uint32_t)n)
        return false;
    bool clamped = lo <= (float)-LP_FLOOR;
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < n; i++) {
        unsigned q = rec[RECORD_HEAD + 2 * i] | (unsigned)rec[RECORD_HEAD + 2 * i + 1] << 8;
        lb[i] = clamped && q == 0 ? -INFINITY : (double)lo + (double)step * q;
        if (lb[i] > mx) mx = lb[i];
    }
    for (int i = 0; i < n; i++) z += exp(lb[i] - mx);
    double lz = mx + log(z), kl = 0;
    for (int i = 0; i < n; i++)
        if (lb[i] > -INFINITY) kl += exp(lb[i] - lz) * (lb[i] - lz - lp[i]);
    double nll = -lp[target], nll_base = -(double)tlp;
    double dp = exp(-nll) - exp(-nll_base);
    k->kld_values[k->count] = (float)kl;
    k->dp_values[k->count] = (float)dp;
    k->nll_base += nll_base;
    k->nll_base2 += nll_base * nll_base;
    k->nll_nll_base += nll * nll_base;
    k->kld += kl;
    k->kld2 += kl * kl;
    k->dp += dp;
    k->dp2 += dp * dp;
    k->dp4 += dp * dp * dp * dp;
    k->same_top += (uint32_t)argmax(lp, n) == top;
    return true;
}

/* ---- progress ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fmt_time(double s, char *buf, size_t cap) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

/* After window done of n: a bar redrawn in place on a terminal, else a line every tenth. */
static void progress(int done, int n, double t0, double nll, uint64_t count, bool tty) {
    double el = now_s() - t0, eta = el / done * (n - done);
    char e[32], r[32];
    fmt_time(eta, e, sizeof e);
    fmt_time(el, r, sizeof r);
    double ppl = exp(nll / (double)count);
    if (tty) {
        char bar[31];
        int fill = (int)(30.0 * done / n);
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
        bar[30] = 0;
        fprintf(stderr, "\r[%s] %d/%d  PPL %.4f  %s elapsed, ETA %s ", bar, done, n, ppl, r, e);
        if (done == n) fputc('\n', stderr);
    } else if (done == n || done * 10L / n != (done - 1) * 10L / n) {
        fprintf(stderr, "perplexity: %d/%d windows, PPL %.4f, %s elapsed, ETA %s\n", done, n, ppl, r, e);
    }
    fflush(stderr);
}

/* ---- the command ---- */

static void print_kld(const kld_stats *k, double ppl, double ppl_unc, double lnppl_unc) {
    double lb_mean, lb_unc, kl, kl_unc, dp, dp_unc, mse, mse_unc;
    mean_unc(k->nll_base, k->nll_base2, k->count, &lb_mean, &lb_unc);
    double ppl_b = exp(lb_mean), ppl_b_unc = ppl_b * lb_unc;
    double cov = covariance(k->nll, k->nll_base, k->nll_nll_base, k->count);
    double cor = lnppl_unc > 0 && lb_unc > 0 ? cov / (lnppl_unc * lb_unc) : 0;
    double lr = log(ppl) - lb_mean, lr_var = lnppl_unc * lnppl_unc + lb_unc * lb_unc - 2 * cov;
    double lr_unc = sqrt(lr_var > 0 ? lr_var : 0);
    double diff_var = ppl_unc * ppl_unc + ppl_b_unc * ppl_b_unc - 2 * ppl * ppl_b * cov;
    mean_unc(k->kld, k->kld2, k->count, &kl, &kl_unc);
    mean_unc(k->dp, k->dp2, k->count, &dp, &dp_unc);
    mean_unc(k->dp2, k->dp4, k->count, &mse, &mse_unc);
    double rms = sqrt(mse), rms_unc = rms > 0 ? 0.5 / rms * mse_unc : 0;
    double top = (double)k->same_top / (double)k->count;
    double top_unc = k->count > 1 ? sqrt(top * (1 - top) / (double)(k->count - 1)) : 0;
    const float *kv = k->kld_values, *dv = k->dp_values;
    uint64_t n = k->count;
    printf("Mean PPL(Q)                   : %10.6f +/- %10.6f\n", ppl, ppl_unc);
    printf("Mean PPL(base)                : %10.6f +/- %10.6f\n", ppl_b, ppl_b_unc);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * cor);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f +/- %10.6f\n", lr, lr_unc);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f +/- %10.6f\n", exp(lr), exp(lr) * lr_unc);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f +/- %10.6f\n", ppl - ppl_b, sqrt(diff_var > 0 ? diff_var : 0));
    printf("Mean    KLD: %10.6f +/- %10.6f\n", kl, kl_unc);
    printf("Maximum KLD: %10.6f\n", kv[n - 1]);
    printf("99.9%%   KLD: %10.6f\n", percentile(kv, n, 0.999));
    printf("99.0%%   KLD: %10.6f\n", percentile(kv, n, 0.99));
    printf("Median  KLD: %10.6f\n", percentile(kv, n, 0.5));
    printf("Minimum KLD: %10.6f\n", kv[0]);
    printf("Mean    Dp: %8.4f +/- %6.4f %%\n", 100 * dp, 100 * dp_unc);
    printf("Maximum Dp: %8.4f %%\n", 100 * dv[n - 1]);
    printf("Median  Dp: %8.4f %%\n", 100 * percentile(dv, n, 0.5));
    printf("Minimum Dp: %8.4f %%\n", 100 * dv[0]);
    printf("RMS Dp    : %8.4f +/- %6.4f %%\n", 100 * rms, 100 * rms_unc);
    printf("Same top p: %8.4f +/- %6.4f %%\n", 100 * top, 100 * top_unc);
}

static void print_kld_json(const kld_stats *k, double ppl, double lnppl_unc) {
    double lb_mean, lb_unc, kl, kl_unc, dp, dp_unc, mse, mse_unc;
    mean_unc(k->nll_base, k->nll_base2, k->count, &lb_mean, &lb_unc);
    double cov = covariance(k->nll, k->nll_base, k->nll_nll_base, k->count);
    double lr = log(ppl) - lb_mean, lr_var = lnppl_unc * lnppl_unc + lb_unc * lb_unc - 2 * cov;
    mean_unc(k->kld, k->kld2, k->count, &kl, &kl_unc);
    mean_unc(k->dp, k->dp2, k->count, &dp, &dp_unc);
    mean_unc(k->dp2, k->dp4, k->count, &mse, &mse_unc);
    double top = (double)k->same_top / (double)k->count;
    uint64_t n = k->count;
    printf(", \"ppl_base\": %.10g, \"ppl_base_err\": %.10g, \"ln_ppl_ratio\": %.10g, \"ln_ppl_ratio_err\": %.10g, "
           "\"kld\": %.10g, \"kld_err\": %.10g, \"kld_max\": %.10g, \"kld_median\": %.10g, \"kld_99\": %.10g, "
           "\"delta_p\": %.10g, \"delta_p_rms\": %.10g, \"same_top\": %.10g, \"same_top_err\": %.10g",
           exp(lb_mean), exp(lb_mean) * lb_unc, lr, sqrt(lr_var > 0 ? lr_var : 0), kl, kl_unc,
           (double)k->kld_values[n - 1], percentile(k->kld_values, n, 0.5), percentile(k->kld_values, n, 0.99), dp,
           sqrt(mse), top, n > 1 ? sqrt(top * (1 - top) / (double)(n - 1)) : 0);
}

int cmd_perplexity(int argc, char **argv) {
    ppl_opts o;
    int r = parse(argc, argv, &o);
    if (r) return r < 0 ? 0 : r;
    const char *path = o.model;
    size_t len = 0;
    char *text = cli_read_text(o.file, &len);
    if (!text) return 1;
    int rc = 1;
    nc_err err;
    nc_model *m = NULL;
    nc_context *c = NULL;
    int32_t *tok = NULL;
    window *win = NULL;
    nc_batch_entry *batch = NULL;
    double *lp = NULL, *lb = NULL;
    base_file base = {.path = o.base};
    kld_stats k = {0};
    bool writing = o.base && !o.kld, created = false;
    if (len == 0 || strlen(text) != len) {
        fprintf(stderr, "error: %s: %s\n", o.file, len ? "holds a NUL byte: not a text" : "empty");
        goto done;
    }
    if (cli_model_load(&m, path, &o.lora, &err)) goto fail;
    nc_model_info info;
    nc_model_get_info(m, &info);
    int32_t n_ctx = (int32_t)o.n_ctx;
    if (!n_ctx) n_ctx = info.n_ctx_train > 0 && info.n_ctx_train < 512 ? info.n_ctx_train : 512;
    if (o.stride && o.stride >= n_ctx) {
        fprintf(stderr, "error: --stride: %ld must be less than the context (%d)\n", o.stride, n_ctx);
        goto done;
    }
    int32_t n_tok = cli_tokenize(m, text, true, false, &tok, &err);
    if (n_tok < 0) goto fail;
    if (n_tok < n_ctx) {
        fprintf(stderr, "error: %s: %d tokens, shorter than one window of %d (-c)\n", o.file, n_tok, n_ctx);
        goto done;
    }
    win = malloc(((size_t)n_tok / (o.stride ? (size_t)o.stride : (size_t)n_ctx) + 2) * sizeof *win);
    batch = malloc((size_t)n_ctx * sizeof *batch);
    lp = malloc((size_t)info.n_vocab * sizeof *lp);
    if (!win || !batch || !lp) { fprintf(stderr, "error: out of memory\n"); goto done; }
    int n_win = plan_windows(n_tok, n_ctx, (int32_t)o.stride, o.chunks, win);
    uint64_t n_scored = 0;
    for (int w = 0; w < n_win; w++) n_scored += (uint64_t)(n_ctx - win[w].lo);

    if (writing && (same_file(o.base, o.file) || same_file(o.base, path))) {
        fprintf(stderr, "error: --kl-divergence-base: %s is the %s; the base file would overwrite it\n", o.base,
                same_file(o.base, o.file) ? "text" : "model");
        goto done;
    }
    if (o.base) {
        base.rec_bytes = RECORD_HEAD + 2 * (size_t)info.n_vocab;
        base.rec = malloc(base.rec_bytes);
        nc_err oerr;
        int fd = writing ? -1 : nc_open_regular(o.base, &oerr); /* reading: a FIFO would block */
        if (!writing && fd < 0) { fprintf(stderr, "error: %s\n", oerr.msg); goto done; }
        base.f = writing ? fopen(o.base, "wb") : fdopen(fd, "rb");
        if (!base.f) {
            if (fd >= 0) close(fd);
            fprintf(stderr, "error: %s: %s\n", o.base, strerror(errno));
            goto done;
        }
        created = writing;
        if (!base.rec) { fprintf(stderr, "error: out of memory\n"); goto done; }
        if (writing && write_header(&base, info.n_vocab, n_ctx, (int32_t)o.stride, n_win, tok, n_tok)) goto write_fail;
        if (o.kld) {
            if (!check_header(&base, info.n_vocab, n_ctx, (int32_t)o.stride, n_win, tok, n_tok, n_scored)) goto done;
            lb = malloc((size_t)info.n_vocab * sizeof *lb);
            k.kld_values = malloc(n_scored * sizeof *k.kld_values);
            k.dp_values = malloc(n_scored * sizeof *k.dp_values);
            if (!lb || !k.kld_values || !k.dp_values) { fprintf(stderr, "error: out of memory\n"); goto done; }
        }
    }

    nc_context_params cp = {.n_ctx = n_ctx, .n_threads = (int32_t)o.threads, .type_k = o.type_k, .type_v = o.type_v,
                            .fast = o.fast, .n_gpu_layers = o.n_gpu_layers};
    if (nc_context_new(&c, m, &cp, &err)) goto fail;
    bool add_bos = nc_vocab_adds_bos(m) && nc_token_bos(m) >= 0;
    fprintf(stderr, "perplexity: %d tokens, %d windows of %d (%s), %llu tokens scored, %d threads\n", n_tok, n_win,
            n_ctx, o.stride ? "sliding" : "chunks", (unsigned long long)n_scored, nc_context_n_threads(c));
    bool tty = isatty(fileno(stderr));
    double t0 = now_s(), nll = 0, nll2 = 0;
    uint64_t count = 0;
    for (int w = 0; w < n_win; w++) {
        const window *wd = &win[w];
        for (int32_t p = 0; p < n_ctx - 1; p++)
            batch[p] = (nc_batch_entry){p == 0 && add_bos ? nc_token_bos(m) : tok[wd->start + p], p, 0, p >= wd->lo - 1};
        nc_kv_seq_clear(c, 0);
        if (nc_forward(c, batch, n_ctx - 1, &err)) {
            if (tty && w) fputc('\n', stderr); /* past the bar */
            goto fail;
        }
        for (int32_t p = wd->lo; p < n_ctx; p++) {
            int32_t target = tok[wd->start + p];
            log_softmax(nc_logits(c, p - 1), info.n_vocab, lp);
            double v = -lp[target];
            nll += v;
            nll2 += v * v;
            if (writing) {
                encode_record(lp, info.n_vocab, target, base.rec);
                if (fwrite(base.rec, 1, base.rec_bytes, base.f) != base.rec_bytes) goto write_fail;
            } else if (o.kld) {
                if (fread(base.rec, 1, base.rec_bytes, base.f) != base.rec_bytes ||
                    !compare_record(lp, info.n_vocab, target, base.rec, &k, lb)) {
                    if (tty) fputc('\n', stderr);
                    fprintf(stderr, "error: %s: record %llu is corrupt\n", o.base, (unsigned long long)count);
                    goto done;
                }
                k.count++;
            }
            count++;
        }
        progress(w + 1, n_win, t0, nll, count, tty);
    }
    if (writing) {
        FILE *f = base.f;
        base.f = NULL;
        if (fclose(f)) goto write_fail;
    }

    double mean, lnppl_unc;
    mean_unc(nll, nll2, count, &mean, &lnppl_unc);
    double ppl = exp(mean), ppl_unc = ppl * lnppl_unc;
    double secs = now_s() - t0;
    if (o.kld) {
        k.nll = nll;
        k.nll2 = nll2;
        qsort(k.kld_values, k.count, sizeof *k.kld_values, cmp_float);
        qsort(k.dp_values, k.count, sizeof *k.dp_values, cmp_float);
    }
    if (o.json) {
        printf("{\"ppl\": %.10g, \"ppl_err\": %.10g, \"nll\": %.10g, \"tokens\": %d, \"scored\": %llu, \"windows\": %d, "
               "\"n_ctx\": %d, \"stride\": %ld, \"seconds\": %.3f",
               ppl, ppl_unc, mean, n_tok, (unsigned long long)count, n_win, n_ctx, o.stride, secs);
        if (o.kld) print_kld_json(&k, ppl, lnppl_unc);
        printf("}\n");
    } else {
        if (o.kld) print_kld(&k, ppl, ppl_unc, lnppl_unc);
        printf("PPL = %.4f +/- %.5f\n", ppl, ppl_unc);
    }
    if (writing) fprintf(stderr, "perplexity: saved %llu distributions to %s\n", (unsigned long long)count, o.base);
    fprintf(stderr, "perplexity: %.2f s, %.1f tokens/s\n", secs, (double)n_win * (n_ctx - 1) / (secs > 0 ? secs : 1));
    rc = 0;
    goto done;
write_fail:
    fprintf(stderr, "error: %s: %s\n", o.base, errno ? strerror(errno) : "write failed");
    goto done;
fail:
    fprintf(stderr, "error: %s\n", err.msg);
done:
    if (base.f) fclose(base.f);
    /* a half-written base file would only be refused later */
    if (rc && created) remove(o.base);
    free(base.rec);
    free(k.kld_values);
    free(k.dp_values);
    free(lb);
    free(lp);
    free(batch);
    free(win);
    free(tok);
    free(text);
    nc_context_free(c);
    nc_model_free(m);
    return rc;
}
