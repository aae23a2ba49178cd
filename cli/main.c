/* nucleus: the command-line front end. Each subcommand lives in its own file. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "version.h" /* NC_BUILD_DESCRIBE, written by the Makefile from `git describe` */


static void usage(FILE *out) {
    fprintf(out,
            "usage: nucleus COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  run       generate text:  nucleus run [-m MODEL] -p PROMPT [-n N] [-t THREADS] [-c CTX] [decoding options]\n"
            "  chat      talk with the model in the terminal:  nucleus chat [-m MODEL] [--system TEXT] [decoding options]\n"
            "  score     log-probabilities as JSON:  nucleus score [-m MODEL] --ids 1,2,3 [--all] [--top K] [--greedy N]\n"
            "  tokenize  print token ids:  nucleus tokenize [-m MODEL] (-p TEXT | -f FILE) [--no-bos] [--special] [--json | --lines | --show-pieces]\n"
            "  inspect   print a GGUF file's metadata and tensors:  nucleus inspect [-m FILE]\n"
            "  perplexity  perplexity of a text, or its KL divergence from a base model:  nucleus perplexity [-m MODEL] -f FILE [-c CTX] [--stride S] [--kl-divergence-base FILE [--kl-divergence]]\n"
            "  bench     prefill and decode speed:  nucleus bench [-m MODEL] [-p 128] [-n 64] [-t THREADS] [-r 5] [--json]\n"
            "  quantize  GGUF weights to Q8_0, Q4_K_M, ...:  nucleus quantize INPUT OUTPUT TYPE [-t THREADS]\n"
            "  serve     OpenAI-compatible HTTP server:  nucleus serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--parallel N] [-c CTX] [-t THREADS] [--api-key KEY] [--max-queue Q]\n"
            "  pull      fetch a model from Hugging Face's hub into the cache:  nucleus pull USER/REPO[:QUANT] [--offline]\n"
            "  list      the models in the cache:  nucleus list\n"
            "  rm        remove a model from the cache:  nucleus rm USER/REPO[:QUANT]\n"
            "\n"
            "\n"
            "Every command answers -h. nucleus --version: the build.\n"
            "run, chat, serve, bench, perplexity and quantize take -hf USER/REPO[:QUANT] instead of -m (nucleus pull -h).\n"
            "Without -m, the model is $NUCLEUS_MODEL, else stories260K.gguf: models/ of the repository this binary\n"
            "was built in, or PREFIX/share/nucleus once installed.\n");
}

/* What was built: the source (git describe at build time), the compiler, the kernel sets compiled
 * in and the one this CPU runs (NUCLEUS_ISA may cap it). */
static void version(void) {
#if defined(__clang__)
#define COMPILER "clang "
#else
#define COMPILER "gcc "
#endif
#if defined(__x86_64__)
    const char *sets = "scalar avx2 avxvnni avx512";
#elif defined(__aarch64__)
    const char *sets = "scalar neon";
#else
    const char *sets = "scalar";
#endif
#if defined(__SANITIZE_ADDRESS__)
    const char *build = "sanitized (ASan, UBSan)";
#elif defined(__OPTIMIZE__)
    const char *build = "release";
#else
    const char *build = "debug";
#endif
    printf("nucleus %s\n"
           "build: %s, C %ld, compiler %s\n"
           "kernel sets: %s (this CPU: %s)\n",
           NC_BUILD_DESCRIBE, build, (long)__STDC_VERSION__, COMPILER __VERSION__, sets, nc_kernels_name());
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        version();
        return 0;
    }
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat")) return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "score")) return cmd_score(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "perplexity")) return cmd_perplexity(argc - 1, argv + 1);
    if (!strcmp(cmd, "quantize")) return cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(cmd, "pull")) return cmd_pull(argc - 1, argv + 1);
    if (!strcmp(cmd, "list")) return cmd_list(argc - 1, argv + 1);
    if (!strcmp(cmd, "rm")) return cmd_rm(argc - 1, argv + 1);
    fprintf(stderr, "error: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
