/* nucleus quantize: a GGUF file to one of llama.cpp's file types (src/quantize), with a progress
 * bar on a terminal and one line per tensor otherwise. Arguments as llama-quantize's. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "format/ggml_types.h"
#include "model/arch.h"
#include "quantize/quantize.h"
#include "tensor/quant.h"

#define USAGE                                                                                                  \
    "usage: nucleus quantize [options] INPUT OUTPUT TYPE [THREADS]\n"                                          \
    "       nucleus quantize [options] -hf USER/REPO[:QUANT] OUTPUT TYPE [THREADS]\n"                          \
    "  quantize INPUT (F32, F16 or BF16 weights) into the GGUF file OUTPUT, of file type TYPE. INPUT is a\n"     \
    "  GGUF file or a Hugging Face directory (config.json, *.safetensors, tokenizer.json or\n"                  \
    "  tokenizer.model), converted first as llama.cpp's convert_hf_to_gguf.py would (to F32, F16 or\n"          \
    "  BF16: a plain conversion); its config.json's model_type one of\n"                                        \
    "    %s\n"                                                                                                  \
    "  TYPE:\n"                                                                                                 \
    "%s"                                                                                                       \
    "  (Q3_K, Q4_K and Q5_K mean the _M types). 1-D tensors and norms stay as they are; output.weight\n"       \
    "  becomes Q6_K (Q8_0 in Q8_0 files); the _M types give some layers' attn_v and ffn_down Q6_K\n"         \
    "  (docs/quantize.md).\n"                                                                                 \
    "  -hf USER/REPO[:QUANT] takes INPUT from Hugging Face's hub (a safetensors repository, or a GGUF file),\n"   \
    "  downloaded once into the cache (nucleus pull -h); --offline: from the cache only.\n"                       \
    "options:\n"                                                                                               \
    "  -t, --threads N             threads (default 2; or THREADS after TYPE)\n"                                \
    "  --allow-requantize          accept quantised tensors in INPUT (dequantised, then quantised again)\n"     \
    "  --pure                      every quantised tensor gets TYPE's base type (no mix, no Q6_K output)\n"     \
    "  --output-tensor-type T      the type of output.weight (f32, f16, bf16, q8_0, q4_0, ..., q3_k, ..., q6_k)\n"         \
    "  --token-embedding-type T    the type of token_embd.weight\n"

static void usage(FILE *out) {
    char types[1024];
    size_t len = 0;
    for (size_t i = 0; i < qz_ftype_count(); i++) {
        const qz_ftype *ft = qz_ftype_at(i);
        len += (size_t)snprintf(types + len, sizeof types - len, "    %-8s %s\n", ft->name, ft->about);
    }
    fprintf(out, USAGE, arch_hf_list(), types);
}

/* A tensor type for the override flags: one that has a writer. */
static bool tensor_type_arg(const char *flag, const char *s, uint32_t *out) {
    for (uint32_t t = 0; t < GGML_TYPE_COUNT; t++) {
        const quant_type *qt = quant_type_of(t);
        if (qt && qt->quantize && !strcasecmp(qt->name, s) && t != GGML_TYPE_IQ4_NL && t != GGML_TYPE_MXFP4) {
            *out = t;
            return true;
        }
    }
    fprintf(stderr, "error: %s: unknown tensor type '%s' (one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, "
            "q3_k, q4_k, q5_k, q6_k)\n", flag, s);
    return false;
}

typedef struct bar {
    bool tty;
} bar;

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

static void dims(char *buf, size_t cap, const uint64_t ne[4]) {
    int n = 4;
    while (n > 1 && ne[n - 1] == 1) n--;
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < n; d++) len += (size_t)snprintf(buf + len, cap - len, "%s%llu", d ? ", " : "", (unsigned long long)ne[d]);
    snprintf(buf + len, cap - len, "]");
}

static void progress(void *ud, const qz_progress *p) {
    const bar *b = ud;
    char fbuf[24], tbuf[24], shape[64];
    const char *from = ggml_type_name(p->from, fbuf), *to = ggml_type_name(p->to, tbuf);
    if (!b->tty) {
        dims(shape, sizeof shape, p->ne);
        fprintf(stderr, "[%3d/%3d] %-32s %-22s %-5s -> %-5s %9.3f -> %8.3f MiB%s\n", p->index, p->n_tensors, p->name,
                shape, from, to, mib(p->bytes_in), mib(p->bytes_out), p->fallback ? " (row length: fallback)" : "");
        return;
    }
    double frac = p->total_in ? (double)p->done_in / (double)p->total_in : 1.0;
    double eta = frac > 0 ? p->seconds * (1.0 - frac) / frac : 0.0;
    char cells[31];
    int filled = (int)(frac * 30.0);
    for (int i = 0; i < 30; i++) cells[i] = i < filled ? '#' : '.';
    cells[30] = 0;
    fprintf(stderr, "\r[%s] %3d/%d %5.1f%% %8.1f/%.1f MiB  ETA %4.0fs  %-28.28s %s\033[K", cells, p->index, p->n_tensors,
            100.0 * frac, mib(p->done_in), mib(p->total_in), eta, p->name, to);
    if (p->index == p->n_tensors) fputc('\n', stderr);
}

/* A Hugging Face input's conversion, before the quantisation's own progress. */
static void converting(void *ud, int index, int n_tensors, const char *name) {
    const bar *b = ud;
    if (b->tty) fprintf(stderr, "\rconverting %3d/%d %-40.40s\033[K%s", index, n_tensors, name, index == n_tensors ? "\n" : "");
    else fprintf(stderr, "convert [%3d/%3d] %s\n", index, n_tensors, name);
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[4] = {0};
    int n_pos = 0;
    long threads = 2;
    qz_params p = {.rules = {.output_type = UINT32_MAX, .embd_type = UINT32_MAX}};
    cli_hf hf = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = cli_hf_arg(argc, argv, &i, &hf);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 512, &threads)) return 2;
        } else if (!strcmp(a, "--allow-requantize")) {
            p.allow_requantize = true;
        } else if (!strcmp(a, "--pure")) {
            p.rules.pure = true;
        } else if (!strcmp(a, "--output-tensor-type")) {
            if (!(v = cli_value(argc, argv, &i)) || !tensor_type_arg(a, v, &p.rules.output_type)) return 2;
        } else if (!strcmp(a, "--token-embedding-type")) {
            if (!(v = cli_value(argc, argv, &i)) || !tensor_type_arg(a, v, &p.rules.embd_type)) return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "error: quantize: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (n_pos < 4) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "error: quantize: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (hf.repo && n_pos < 4) { /* INPUT comes from the hub: the others move up one place */
        memmove(pos + 1, pos, sizeof *pos * 3);
        pos[0] = NULL;
        n_pos++;
    } else if (hf.repo) {
        fprintf(stderr, "error: quantize: with -hf, OUTPUT TYPE [THREADS] only ('%s' is one too many)\n", pos[3]);
        return 2;
    }
    if (n_pos < 3) {
        fprintf(stderr, "error: quantize: expected %s\n", hf.repo ? "OUTPUT TYPE after -hf USER/REPO" : "INPUT OUTPUT TYPE");
        usage(stderr);
        return 2;
    }
    if (!(p.ftype = qz_ftype_find(pos[2]))) {
        fprintf(stderr, "error: quantize: unknown type '%s'; valid types: %s\n", pos[2], qz_ftype_names());
        return 2;
    }
    if (n_pos == 4 && !cli_int("THREADS", pos[3], 1, 512, &threads)) return 2;
    int rc = cli_model_path(&pos[0], &hf);
    if (rc) return rc;
    bar b = {.tty = isatty(fileno(stderr))};
    p.input = pos[0];
    p.output = pos[1];
    p.n_threads = (int)threads;
    p.progress = progress;
    p.convert_progress = converting;
    p.ud = &b;
    qz_result r;
    nc_err err;
    if (qz_quantize(&p, &r, &err)) {
        if (b.tty) fputc('\n', stderr);
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "quantize: %s -> %s (%s): %d tensors, %d quantised; %.2f MiB -> %.2f MiB in %.2f s\n", p.input,
            p.output, p.ftype->name, r.n_tensors, r.n_quantised, mib(r.bytes_in), mib(r.bytes_out), r.seconds);
    return 0;
}
