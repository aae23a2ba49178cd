/* The decoding flags of `nucleus run`, with llama.cpp's names where it has them. Every value is
 * checked here, so a bad one is refused before the model is loaded, with the flag's name and
 * the allowed range. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct float_flag {
    const char *flag;
    size_t offset;  /* of a float in nc_sampler_params */
    double lo, hi;
} float_flag;

static const float_flag FLOAT_FLAGS[] = {
    {"--temp", offsetof(nc_sampler_params, temp), 0, 100},
    {"--top-p", offsetof(nc_sampler_params, top_p), 0, 1},
    {"--min-p", offsetof(nc_sampler_params, min_p), 0, 1},
    {"--typical", offsetof(nc_sampler_params, typical_p), 0, 1},
    {"--top-nsigma", offsetof(nc_sampler_params, top_n_sigma), -1, 100},
    {"--epsilon-cutoff", offsetof(nc_sampler_params, epsilon_cutoff), 0, 1},  /* 1 itself: cli_decoding_finish */
    {"--eta-cutoff", offsetof(nc_sampler_params, eta_cutoff), 0, 1},
    {"--dynatemp-range", offsetof(nc_sampler_params, dynatemp_range), 0, 100},
    {"--dynatemp-exp", offsetof(nc_sampler_params, dynatemp_exponent), 0, 100},
    {"--repeat-penalty", offsetof(nc_sampler_params, repeat_penalty), 0.01, 100},
    {"--presence-penalty", offsetof(nc_sampler_params, presence_penalty), -2, 2},
    {"--frequency-penalty", offsetof(nc_sampler_params, frequency_penalty), -2, 2},
    {"--mirostat-lr", offsetof(nc_sampler_params, mirostat_eta), 0, 1},
    {"--mirostat-ent", offsetof(nc_sampler_params, mirostat_tau), 0, 100},
    {"--dry-multiplier", offsetof(nc_sampler_params, dry_multiplier), 0, 100},
    {"--dry-base", offsetof(nc_sampler_params, dry_base), 1, 100},
    {"--xtc-probability", offsetof(nc_sampler_params, xtc_probability), 0, 1},
    {"--xtc-threshold", offsetof(nc_sampler_params, xtc_threshold), 0, 1},
};

typedef struct int_flag {
    const char *flag;
    size_t offset;  /* of an int32_t in cli_decoding */
    long lo, hi;
} int_flag;

#define SP(field) offsetof(cli_decoding, sp) + offsetof(nc_sampler_params, field)
static const int_flag INT_FLAGS[] = {
    {"--top-k", SP(top_k), 0, 1 << 30},
    {"--min-keep", SP(min_keep), 0, 1 << 30},
    {"--repeat-last-n", SP(repeat_last_n), -1, 1 << 30},
    {"--mirostat", SP(mirostat), 0, 2},
    {"--dry-allowed-length", SP(dry_allowed_length), 1, 1 << 20},
    {"--dry-penalty-last-n", SP(dry_penalty_last_n), -1, 1 << 30},
    {"--no-repeat-ngram", SP(no_repeat_ngram), 0, 1 << 20},
    {"--min-tokens", SP(min_tokens), 0, 1 << 30},
    {"--logprobs", SP(n_logprobs), 0, NC_LOGPROBS_MAX},
    {"-N", offsetof(cli_decoding, n_samples), 1, 256},
    {"--beams", offsetof(cli_decoding, beam) + offsetof(nc_beam_params, n_beams), 1, 1024},
    {"--n-best", offsetof(cli_decoding, beam) + offsetof(nc_beam_params, n_best), 1, 1024},
    {"--num-beam-groups", offsetof(cli_decoding, beam) + offsetof(nc_beam_params, n_groups), 1, 1024},
};

static const char USAGE[] =
    "sampling (default chain: penalties -> logit bias -> temperature -> top-k -> top-p -> min-p -> sample):\n"
    "  --temp T (0.8; 0 = greedy)  --top-k K (40; 0 = off)  --top-p P (0.95)  --min-p P (0.05)  --typical P (1 = off)\n"
    "  --top-nsigma N (-1 = off)  --epsilon-cutoff E (0 = off)  --eta-cutoff E (0 = off)  --min-keep N\n"
    "  --dynatemp-range R (0 = off)  --dynatemp-exp X (1)  --xtc-probability P  --xtc-threshold T (0.1)\n"
    "  --repeat-penalty F (1 = off)  --repeat-last-n N (64; -1 = all)  --presence-penalty F  --frequency-penalty F\n"
    "  --no-repeat-ngram N  --dry-multiplier F  --dry-base F (1.75)  --dry-allowed-length N (2)\n"
    "  --dry-penalty-last-n N (-1 = all)  --dry-sequence-breaker STR (repeatable; 'none' clears the defaults)\n"
    "  --mirostat 0|1|2  --mirostat-lr ETA (0.1)  --mirostat-ent TAU (5)  --logit-bias ID(+|-)BIAS (-inf bans)\n"
    "  --samplers 'penalties;dry;no_repeat_ngram;logit_bias;temperature;top_n_sigma;top_k;typ_p;top_p;min_p;epsilon;\n"
    "             eta;xtc'\n"
    "  --seed S (-1: a random one, the default)\n"
    "stopping: --stop STR (repeatable)  --stop-ids 1,2  --min-tokens N  --ignore-eos\n"
    "beams: --beams N  --length-penalty A (1)  --n-best K (1)  --early-stopping[=true|false|never] (false)\n"
    "  --num-beam-groups G (1; diverse beam search)  --diversity-penalty D (0)\n"
    "contrastive search: --penalty-alpha A (0..1; 0 = greedy) with --top-k K candidates (40)\n"
    "output: -N SAMPLES  --logprobs N  --logprobs-mode raw|processed  --explain[=text|json]\n"
    "structured output (one of; runs first in the chain, allows only text the grammar generates):\n"
    "  --grammar GBNF  --grammar-file FILE (llama.cpp's GBNF)  -j, --json-schema JSON  --json-schema-file FILE\n";

static const char CONTEXT_USAGE[] =
    "a full context (default: generation stops and says so):\n"
    "  --context-shift     keep the first prompt tokens (--keep), drop half of the rest, go on\n"
    "  --keep N            prompt tokens a shift keeps besides the BOS (0; -1 = the whole prompt)\n"
    "  --attention-sinks N keep the first N tokens (StreamingLLM uses 4) and a window of the recent ones\n";

const char *cli_context_usage(void) { return CONTEXT_USAGE; }

const char *cli_decoding_usage(void) { return USAGE; }

int cli_context_arg(int argc, char **argv, int *i, cli_context *cx) {
    const char *a = argv[*i], *v;
    long n;
    if (!strcmp(a, "--context-shift")) {
        cx->shift = true;
        return 1;
    }
    bool keep = !strcmp(a, "--keep"), sinks = !strcmp(a, "--attention-sinks");
    if (!keep && !sinks) return 0;
    if (!(v = cli_value(argc, argv, i)) || !cli_int(a, v, keep ? -1 : 1, 1 << 30, &n)) return -1;
    if (keep) {
        cx->keep_given = true;
        cx->policy.n_keep = (int32_t)n;
    } else {
        cx->sinks_given = true;
        cx->policy.n_sink = (int32_t)n;
    }
    return 1;
}

bool cli_context_finish(cli_context *cx) {
    if (cx->shift && cx->sinks_given) {
        fprintf(stderr, "error: --context-shift and --attention-sinks are two ways to go on past a full context: "
                        "choose one\n");
        return false;
    }
    if (cx->keep_given && !cx->shift) {
        fprintf(stderr, "error: --keep: says what a context shift keeps; it needs --context-shift\n");
        return false;
    }
    cx->policy.mode = cx->shift ? NC_CTX_SHIFT : cx->sinks_given ? NC_CTX_SINKS : NC_CTX_STOP;
    return true;
}

void cli_decoding_init(cli_decoding *d) {
    *d = (cli_decoding){.n_samples = 1, .beam = {.n_beams = 1, .n_best = 1, .length_penalty = 1.0f}};
    nc_sampler_params_default(&d->sp);
    d->stop.max_tokens = 128;
}

void cli_decoding_free(cli_decoding *d) {
    for (int i = 0; i < d->n_owned; i++) free(d->owned[i]);
    free(d->owned);
    free(d->stops);
    free(d->breakers);
    free(d->stop_ids);
    free(d->bias);
}

/* arr (n elements of `size` bytes) with room for one more; NULL (arr untouched) when out of memory. */
static void *one_more(void *arr, int32_t n, size_t size) { return realloc(arr, (size_t)(n + 1) * size); }

/* A copy of s with the escapes \n \t \r \\ \" \' replaced, owned by d. */
static const char *unescape(cli_decoding *d, const char *s) {
    char **owned = one_more(d->owned, d->n_owned, sizeof *owned);
    if (!owned) return NULL;
    d->owned = owned;
    char *out = malloc(strlen(s) + 1), *o = out;
    if (!out) return NULL;
    owned[d->n_owned++] = out;
    for (; *s; s++) {
        if (*s != '\\' || !s[1]) { *o++ = *s; continue; }
        s++;
        switch (*s) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        default: *o++ = *s; break; /* \\ \" \' */
        }
    }
    *o = 0;
    return out;
}

static int oom(void) {
    fprintf(stderr, "error: out of memory\n");
    return -1;
}

static int add_stop(cli_decoding *d, const char *flag, const char *v) {
    const char *s = unescape(d, v);
    if (!s) return oom();
    if (!*s) {
        fprintf(stderr, "error: %s: the stop string is empty\n", flag);
        return -1;
    }
    const char **stops = one_more(d->stops, d->stop.n_stop, sizeof *stops);
    if (!stops) return oom();
    d->stops = stops;
    stops[d->stop.n_stop++] = s;
    d->stop.stop = stops;
    return 1;
}

/* The first --dry-sequence-breaker replaces the defaults; "none" leaves no breaker (llama.cpp). */
static int add_breaker(cli_decoding *d, const char *flag, const char *v) {
    if (!d->breakers_set) {
        d->breakers_set = true;
        d->sp.dry_breakers = NULL;
        d->sp.n_dry_breakers = 0;
    }
    if (!strcmp(v, "none")) return 1;
    const char *s = unescape(d, v);
    if (!s) return oom();
    if (!*s) {
        fprintf(stderr, "error: %s: the breaker is empty (use 'none' for no breakers)\n", flag);
        return -1;
    }
    const char **breakers = one_more(d->breakers, d->sp.n_dry_breakers, sizeof *breakers);
    if (!breakers) return oom();
    d->breakers = breakers;
    breakers[d->sp.n_dry_breakers++] = s;
    d->sp.dry_breakers = breakers;
    return 1;
}

static int add_stop_ids(cli_decoding *d, const char *flag, const char *v) {
    int32_t *ids;
    int n;
    if (!cli_ids(flag, v, &ids, &n)) return -1;
    int32_t *grown = realloc(d->stop_ids, (size_t)(d->stop.n_stop_ids + n) * sizeof *grown);
    if (!grown) { free(ids); return oom(); }
    memcpy(grown + d->stop.n_stop_ids, ids, (size_t)n * sizeof *ids);
    free(ids);
    d->stop_ids = grown;
    d->stop.stop_ids = grown;
    d->stop.n_stop_ids += n;
    return 1;
}

/* ID(+|-)BIAS, as llama.cpp: "15043+1", "15043-0.5", "2-inf" (a ban). */
static int add_bias(cli_decoding *d, const char *flag, const char *v) {
    char *end;
    errno = 0;
    long id = strtol(v, &end, 10);
    bool ok = !errno && end != v && id >= 0 && id <= INT32_MAX && (*end == '+' || *end == '-');
    char *bend = end;
    double b = ok ? strtod(end, &bend) : 0;
    if (!ok || bend == end || *bend || isnan(b) || b == INFINITY) {
        fprintf(stderr, "error: %s: expected TOKEN_ID followed by +BIAS or -BIAS (a finite number, or -inf to ban), "
                        "got '%s'\n", flag, v);
        return -1;
    }
    nc_logit_bias *bias = one_more(d->bias, d->sp.n_logit_bias, sizeof *bias);
    if (!bias) return oom();
    d->bias = bias;
    bias[d->sp.n_logit_bias++] = (nc_logit_bias){(int32_t)id, (float)b};
    d->sp.logit_bias = bias;
    return 1;
}

static int set_explain(cli_decoding *d, const char *a) {
    const char *mode = a + strlen("--explain");
    if (!*mode || !strcmp(mode, "=text")) d->explain = CLI_EXPLAIN_TEXT;
    else if (!strcmp(mode, "=json")) d->explain = CLI_EXPLAIN_JSON;
    else {
        fprintf(stderr, "error: --explain: expected --explain, --explain=text or --explain=json, got '%s'\n", a);
        return -1;
    }
    d->sp.explain = true;
    return 1;
}

static int set_logprobs_mode(cli_decoding *d, const char *flag, const char *v) {
    if (!strcmp(v, "raw")) d->sp.logprobs_mode = NC_LOGPROBS_RAW;
    else if (!strcmp(v, "processed")) d->sp.logprobs_mode = NC_LOGPROBS_PROCESSED;
    else {
        fprintf(stderr, "error: %s: expected raw or processed, got '%s'\n", flag, v);
        return -1;
    }
    return 1;
}

/* Hugging Face's early_stopping: --early-stopping (True), =false (the default heuristic), =never. */
static int set_early_stopping(cli_decoding *d, const char *a) {
    const char *mode = a + strlen("--early-stopping");
    if (!*mode || !strcmp(mode, "=true")) d->beam.early_stopping = NC_EARLY_STOP_FIRST;
    else if (!strcmp(mode, "=false")) d->beam.early_stopping = NC_EARLY_STOP_HEURISTIC;
    else if (!strcmp(mode, "=never")) d->beam.early_stopping = NC_EARLY_STOP_NEVER;
    else {
        fprintf(stderr, "error: --early-stopping: expected --early-stopping, =true, =false or =never, got '%s'\n", a);
        return -1;
    }
    return 1;
}

/* Keep a malloc'd string until cli_decoding_free. */
static bool own(cli_decoding *d, char *s) {
    char **owned = one_more(d->owned, d->n_owned, sizeof *owned);
    if (!owned) return false;
    d->owned = owned;
    owned[d->n_owned++] = s;
    return true;
}

/* --grammar TEXT, --grammar-file FILE, --json-schema JSON (-j), --json-schema-file FILE: the GBNF
 * text of the grammar stage (a schema converted here, so its errors come before the model loads). */
static int set_grammar(cli_decoding *d, const char *flag, const char *v) {
    if (d->grammar_flag) {
        fprintf(stderr, "error: %s: %s already gives the grammar; give one of --grammar, --grammar-file, "
                        "--json-schema, --json-schema-file\n", flag, d->grammar_flag);
        return -1;
    }
    bool file = strstr(flag, "-file") != NULL, schema = strstr(flag, "json") || !strcmp(flag, "-j");
    size_t len;
    char *text = file ? cli_read_text(v, &len) : strdup(v);
    if (!text) return file ? -1 : oom();
    if (!own(d, text)) { free(text); return oom(); }
    if (!*text) {
        fprintf(stderr, "error: %s: the %s is empty\n", flag, schema ? "schema" : "grammar");
        return -1;
    }
    if (schema) {
        nc_err err;
        char *gbnf;
        if (nc_json_schema_to_grammar(text, NULL, &gbnf, &err)) {
            fprintf(stderr, "error: %s: %s\n", flag, err.msg);
            return -1;
        }
        if (!own(d, gbnf)) { free(gbnf); return oom(); }
        text = gbnf;
    }
    nc_err err;
    if (nc_grammar_check(text, &err)) {
        fprintf(stderr, "error: %s: %s\n", flag, err.msg);
        return -1;
    }
    d->grammar_flag = flag;
    d->sp.grammar = text;
    return 1;
}

static int numeric_flag(const char *a, const char *v, cli_decoding *d) {
    for (size_t k = 0; k < sizeof FLOAT_FLAGS / sizeof *FLOAT_FLAGS; k++) {
        const float_flag *f = &FLOAT_FLAGS[k];
        if (strcmp(a, f->flag)) continue;
        double x;
        if (!cli_float(a, v, f->lo, f->hi, &x)) return -1;
        *(float *)((char *)&d->sp + f->offset) = (float)x;
        return 1;
    }
    for (size_t k = 0; k < sizeof INT_FLAGS / sizeof *INT_FLAGS; k++) {
        const int_flag *f = &INT_FLAGS[k];
        if (strcmp(a, f->flag)) continue;
        long x;
        if (!cli_int(a, v, f->lo, f->hi, &x)) return -1;
        *(int32_t *)((char *)d + f->offset) = (int32_t)x;
        if (!strcmp(a, "--beams")) d->use_beams = true;
        return 1;
    }
    return 0;
}

static bool takes_value(const char *a) {
    static const char *const with_value[] = {"--stop", "--stop-ids", "--dry-sequence-breaker", "--logit-bias",
                                             "--samplers", "--seed", "--length-penalty", "--logprobs-mode",
                                             "--diversity-penalty", "--penalty-alpha", "--grammar", "--grammar-file",
                                             "--json-schema", "-j", "--json-schema-file"};
    for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
        if (!strcmp(a, with_value[k])) return true;
    for (size_t k = 0; k < sizeof FLOAT_FLAGS / sizeof *FLOAT_FLAGS; k++)
        if (!strcmp(a, FLOAT_FLAGS[k].flag)) return true;
    for (size_t k = 0; k < sizeof INT_FLAGS / sizeof *INT_FLAGS; k++)
        if (!strcmp(a, INT_FLAGS[k].flag)) return true;
    return false;
}

static int valued_flag(const char *a, const char *v, cli_decoding *d) {
    if (!strcmp(a, "--stop")) return add_stop(d, a, v);
    if (!strcmp(a, "--stop-ids")) return add_stop_ids(d, a, v);
    if (!strcmp(a, "--dry-sequence-breaker")) return add_breaker(d, a, v);
    if (!strcmp(a, "--logit-bias")) return add_bias(d, a, v);
    if (!strcmp(a, "--logprobs-mode")) return set_logprobs_mode(d, a, v);
    if (!strncmp(a, "--grammar", 9) || !strncmp(a, "--json-schema", 13) || !strcmp(a, "-j")) return set_grammar(d, a, v);
    if (!strcmp(a, "--samplers")) {
        d->sp.samplers = v;
        return 1;
    }
    if (!strcmp(a, "--seed")) {
        d->seed_given = strcmp(v, "-1") != 0; /* -1: a random seed, as llama.cpp */
        if (!d->seed_given) return 1;
        return cli_u64(a, v, &d->sp.seed) ? 1 : -1;
    }
    if (!strcmp(a, "--penalty-alpha")) {
        double x;
        if (!cli_float(a, v, 0, 1, &x)) return -1;
        d->contrastive.penalty_alpha = (float)x;
        d->use_contrastive = true;
        return 1;
    }
    if (!strcmp(a, "--length-penalty") || !strcmp(a, "--diversity-penalty")) {
        bool length = a[2] == 'l';
        double x;
        if (!cli_float(a, v, length ? -10 : 0, length ? 10 : 1000, &x)) return -1;
        *(length ? &d->beam.length_penalty : &d->beam.diversity_penalty) = (float)x;
        return 1;
    }
    return numeric_flag(a, v, d);
}

int cli_decoding_arg(int argc, char **argv, int *i, cli_decoding *d) {
    const char *a = argv[*i];
    int r = cli_context_arg(argc, argv, i, &d->context);
    if (r) return r;
    if (!strcmp(a, "--ignore-eos")) { d->sp.ignore_eos = true; return 1; }
    if (!strncmp(a, "--early-stopping", strlen("--early-stopping")) && (a[16] == 0 || a[16] == '='))
        return set_early_stopping(d, a);
    if (!strncmp(a, "--explain", strlen("--explain")) && (a[9] == 0 || a[9] == '=')) return set_explain(d, a);
    if (!takes_value(a)) return 0;
    const char *v = cli_value(argc, argv, i);
    return v ? valued_flag(a, v, d) : -1;
}

/* The sampler order is checked by building a sampler without a model; parameters that need one
 * (end-of-generation bans, breakers, token ids) are checked once the model is loaded. */
static bool check_samplers(const cli_decoding *d) {
    if (!d->sp.samplers) return true;
    nc_sampler_params p;
    nc_sampler_params_default(&p);
    p.samplers = d->sp.samplers;
    nc_sampler *s;
    nc_err err;
    if (nc_sampler_new(&s, NULL, 1, &p, &err)) {
        fprintf(stderr, "error: --samplers: %s\n", err.msg);
        return false;
    }
    nc_sampler_free(s);
    return true;
}

/* Contrastive search takes its candidates from --top-k and decodes one sequence on its own. */
static bool contrastive_finish(cli_decoding *d) {
    if (!d->use_contrastive) return true;
    const char *other = d->use_beams ? "--beams" : d->n_samples > 1 ? "-N" : d->sp.n_logprobs ? "--logprobs"
                      : d->context.shift ? "--context-shift" : d->context.sinks_given ? "--attention-sinks" : NULL;
    if (other) {
        fprintf(stderr, "error: %s: works with sampling, not with contrastive search (--penalty-alpha)\n", other);
        return false;
    }
    if (d->sp.top_k < 1 || d->sp.top_k > 1024) {
        fprintf(stderr, "error: --penalty-alpha: contrastive search needs --top-k between 1 and 1024 candidates, got %d\n",
                d->sp.top_k);
        return false;
    }
    d->contrastive.top_k = d->sp.top_k;
    return true;
}

bool cli_decoding_finish(cli_decoding *d) {
    if (d->sp.epsilon_cutoff >= 1 || d->sp.eta_cutoff >= 1) { /* a cutoff of 1 would remove every token */
        bool eps = d->sp.epsilon_cutoff >= 1;
        fprintf(stderr, "error: %s: %g is outside the allowed range [0, 1)\n", eps ? "--epsilon-cutoff" : "--eta-cutoff",
                eps ? d->sp.epsilon_cutoff : d->sp.eta_cutoff);
        return false;
    }
    if (d->beam.n_best > d->beam.n_beams) {
        fprintf(stderr, "error: --n-best: %d is outside the allowed range 1..%d (--beams)\n", d->beam.n_best,
                d->beam.n_beams);
        return false;
    }
    int32_t groups = d->beam.n_groups ? d->beam.n_groups : 1;
    if (d->beam.n_beams % groups) {
        fprintf(stderr, "error: --num-beam-groups: %d does not divide --beams %d into equal groups\n", groups,
                d->beam.n_beams);
        return false;
    }
    if (d->use_beams && d->n_samples > 1) {
        fprintf(stderr, "error: -N: several samples cannot be combined with --beams (use --n-best)\n");
        return false;
    }
    if (d->use_beams && (d->explain || d->sp.n_logprobs)) {
        fprintf(stderr, "error: %s: works with sampling, not with --beams\n", d->explain ? "--explain" : "--logprobs");
        return false;
    }
    if (d->grammar_flag && (d->use_beams || d->use_contrastive)) {
        fprintf(stderr, "error: %s: works with sampling, not with %s\n", d->grammar_flag,
                d->use_beams ? "--beams" : "contrastive search (--penalty-alpha)");
        return false;
    }
    if (!cli_context_finish(&d->context) || !contrastive_finish(d)) return false;
    if (d->use_beams && d->context.policy.mode != NC_CTX_STOP) {
        fprintf(stderr, "error: %s: works with sampling, not with --beams (beam search stops at a full context)\n",
                d->context.shift ? "--context-shift" : "--attention-sinks");
        return false;
    }
    return check_samplers(d);
}
