/* Tokenizer throughput, one thread: MB/s of text through vocab_tokenize (pre-tokenizer, BPE
 * merges, special-token partition), for any vocabulary nucleus reads.
 *
 * Build (from the repository root, after `make`):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -o build/tokenize_bench bench/tokenize_bench.c \
 *      build/rel/libnucleus.a -lm -lpthread -lpcre2-8 -lcjson
 * Run: build/tokenize_bench [VOCAB] [TEXT_FILE] [MEGABYTES]
 *   VOCAB      a GGUF file or a tokenizer.json (default: the Llama 3 vocabulary in ../shared)
 *   TEXT_FILE  repeated up to MEGABYTES (default 8) of input (default: the GPL-3 text that
 *              Debian ships, English prose) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/gguf.h"
#include "vocab/vocab.h"

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n)) && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n > 0 ? (size_t)n : 0;
    return buf;
}

/* The sample repeated up to want bytes, cut at a line end. */
static char *repeat(const char *sample, size_t n, size_t want, size_t *len) {
    char *text = malloc(want + n);
    size_t o = 0;
    while (text && o < want) {
        memcpy(text + o, sample, n);
        o += n;
    }
    *len = o;
    return text;
}

static int load(vocab **v, const char *path) {
    nc_err err;
    size_t n = strlen(path);
    if (n > 5 && strcmp(path + n - 5, ".json") == 0) {
        if (vocab_load_hf(v, path, &err) == 0) return 0;
    } else {
        gguf_file *f;
        if (gguf_open(&f, path, &err) == 0) {
            int rc = vocab_load(v, f, &err);
            gguf_close(f);
            if (rc == 0) return 0;
        }
    }
    fprintf(stderr, "%s\n", err.msg);
    return -1;
}

int main(int argc, char **argv) {
    const char *vocab_path = argc > 1 ? argv[1] : "../shared/vocab/llama-bpe/ggml-vocab-llama-bpe.gguf";
    const char *text_path = argc > 2 ? argv[2] : "/usr/share/common-licenses/GPL-3";
    double mb = argc > 3 ? atof(argv[3]) : 8.0;
    vocab *v;
    double t0 = cpu_seconds();
    if (load(&v, vocab_path)) return 1;
    double t_load = cpu_seconds() - t0;
    size_t n_sample, len;
    char *sample = read_file(text_path, &n_sample);
    char *text = sample ? repeat(sample, n_sample, (size_t)(mb * 1e6), &len) : NULL;
    int32_t *ids = text ? malloc(len * sizeof *ids) : NULL;
    if (!ids) {
        fprintf(stderr, "cannot read %s\n", text_path);
        return 1;
    }
    nc_err err;
    double best = 1e30;
    int n_tok = 0;
    for (int rep = 0; rep < 3; rep++) { /* the best of three runs */
        t0 = cpu_seconds();
        n_tok = vocab_tokenize(v, text, len, false, false, ids, (int)len, &err);
        double t = cpu_seconds() - t0;
        if (n_tok < 0) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        if (t < best) best = t;
    }
    printf("vocab %s (%s, pre-tokenizer '%s'), loaded in %.2f s\n", vocab_path,
           vocab_get_kind(v) == VOCAB_SPM ? "SentencePiece" : "BPE", vocab_pre_name(v), t_load);
    printf("text %s x %zu: %.2f MB -> %d tokens (%.2f bytes/token)\n", text_path, len / n_sample, (double)len / 1e6,
           n_tok, (double)len / n_tok);
    printf("tokenize: %.3f s, %.1f MB/s, %.0f tokens/s (one thread, CPU time)\n", best, (double)len / 1e6 / best,
           n_tok / best);
    free(ids);
    free(text);
    free(sample);
    vocab_free(v);
    return 0;
}
