/* Speculative decoding's flags (llama.cpp's names), for `run` and `serve`, and what they open:
 * the draft model and its context. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

const char *cli_spec_usage(void) {
    return "speculative decoding (the same tokens or distribution, fewer passes of the model):\n"
           "  -md, --draft-model FILE  a draft model sharing the model's vocabulary proposes tokens\n"
           "  --lookup-ngram N    or prompt lookup: the tokens after the latest earlier occurrence of the last\n"
           "                      N (down to 1) tokens of the prompt and text\n"
           "  --draft-max N (16)  tokens proposed per step at most; --draft-min N (0): fewer are not verified\n"
           "  --draft-fixed       propose --draft-max every step (default: the length adapts to the acceptance)\n";
}

int cli_spec_arg(int argc, char **argv, int *i, cli_spec *sp) {
    const char *a = argv[*i], *v;
    long *n = !strcmp(a, "--draft-max") ? &sp->draft_max
            : !strcmp(a, "--draft-min") ? &sp->draft_min
            : !strcmp(a, "--lookup-ngram") ? &sp->lookup_ngram : NULL;
    if (!strcmp(a, "--draft-fixed")) {
        sp->fixed = true;
        return 1;
    }
    if (!strcmp(a, "-md") || !strcmp(a, "--draft-model") || !strcmp(a, "--model-draft"))
        return (sp->draft_path = cli_value(argc, argv, i)) ? 1 : -1;
    if (!n) return 0;
    long lo = n == &sp->draft_min ? 0 : 1, hi = n == &sp->lookup_ngram ? 64 : 256;
    if (!(v = cli_value(argc, argv, i)) || !cli_int(a, v, lo, hi, n)) return -1;
    if (n == &sp->draft_max) sp->max_given = true;
    return 1;
}

bool cli_spec_on(const cli_spec *sp) { return sp->draft_path || sp->lookup_ngram; }

bool cli_spec_finish(const cli_spec *sp) {
    if (sp->draft_path && sp->lookup_ngram) {
        fprintf(stderr, "error: --draft-model and --lookup-ngram are exclusive: pick one proposer\n");
        return false;
    }
    if (!cli_spec_on(sp) && (sp->max_given || sp->draft_min || sp->fixed)) {
        fprintf(stderr, "error: --draft-max, --draft-min and --draft-fixed need --draft-model FILE or --lookup-ngram N\n");
        return false;
    }
    long max = sp->max_given ? sp->draft_max : 16;
    if (sp->draft_min > max) {
        fprintf(stderr, "error: --draft-min: %ld is more than --draft-max (%ld)\n", sp->draft_min, max);
        return false;
    }
    return true;
}

int cli_spec_open(const cli_spec *sp, const nc_model *m, const nc_context_params *mp, nc_spec_params *out,
                  nc_model **dm, nc_context **dc, nc_err *err) {
    *out = (nc_spec_params){.lookup_ngram = (int32_t)sp->lookup_ngram, .draft_max = (int32_t)sp->draft_max,
                            .draft_min = (int32_t)sp->draft_min, .fixed = sp->fixed};
    *dm = NULL;
    *dc = NULL;
    if (!sp->draft_path) return 0;
    nc_context_params cp = {.n_ctx = mp->n_ctx, .n_seq_max = mp->n_seq_max, .n_threads = mp->n_threads, .fast = mp->fast};
    if (nc_model_load(dm, sp->draft_path, err) || nc_spec_check_vocab(m, *dm, err) || nc_context_new(dc, *dm, &cp, err)) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        snprintf(err->msg, sizeof err->msg, "--draft-model %.200s: %.280s", sp->draft_path, why);
        nc_context_free(*dc);
        nc_model_free(*dm);
        *dm = NULL;
        *dc = NULL;
        return -1;
    }
    out->draft = *dc;
    out->draft_model = *dm;
    return 0;
}

void cli_spec_report(const nc_spec_stats *st) {
    fprintf(stderr, "[speculative] drafted %lld, accepted %lld (%.1f%%) | mean accepted length %.2f tokens per pass "
                    "of the model, %.3f passes per token | draft model rows %lld\n",
            (long long)st->drafted,
            (long long)st->accepted, st->drafted ? 100.0 * (double)st->accepted / (double)st->drafted : 0.0,
            st->passes ? (double)st->generated / (double)st->passes : 0.0,
            st->generated ? (double)st->passes / (double)st->generated : 0.0, (long long)st->draft_rows);
}
