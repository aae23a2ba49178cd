/* GBNF grammars: hand-written sentences accepted or refused as each grammar's definition says,
 * UTF-8 (multi-byte characters in literals and classes, text split inside a character), escapes,
 * comments, parse errors with line:column, hostile grammars refused quickly, and the vocabulary
 * mask on real vocabularies against a plain per-token check. Then the sampler stage: only
 * end-of-generation tokens once the grammar is done, and a history that is not an extension of
 * the last one (a rollback) starting the state over. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "nucleus.h"
#include "test.h"
#include "test_files.h"

/* 2: text is a complete sentence, 1: a prefix of one, 0: neither. Text is fed in pieces cut at
 * the given byte offsets (0 ends the list), to split characters and tokens anywhere. */
static int match_cut(const char *grammar, const char *text, const size_t *cuts) {
    nc_err err;
    gr_grammar *g;
    gr_matcher *m;
    if (gr_parse(&g, grammar, strlen(grammar), &err)) {
        CHECK_MSG(0, "grammar does not parse: %s", err.msg);
        return -1;
    }
    if (gr_matcher_new(&m, g, &err)) {
        gr_free(g);
        return -1;
    }
    size_t at = 0, n = strlen(text);
    bool ok = true;
    for (int i = 0; cuts && cuts[i] && ok; i++) {
        ok = gr_matcher_feed(m, (const uint8_t *)text + at, cuts[i] - at);
        at = cuts[i];
    }
    if (ok) ok = gr_matcher_feed(m, (const uint8_t *)text + at, n - at);
    int r = !ok ? 0 : gr_matcher_can_end(m) ? 2 : 1;
    gr_matcher_free(m);
    gr_free(g);
    return r;
}

static int match(const char *grammar, const char *text) { return match_cut(grammar, text, NULL); }

#define ACCEPT(g, t) CHECK_MSG(match(g, t) == 2, "'%s' should be accepted", t)
#define PREFIX(g, t) CHECK_MSG(match(g, t) == 1, "'%s' should be a prefix only", t)
#define REJECT(g, t) CHECK_MSG(match(g, t) == 0, "'%s' should be rejected", t)

static void test_recursion(void) {
    const char *g = "root ::= expr\n"
                    "expr ::= term (\"+\" term)*\n"
                    "term ::= num | \"(\" expr \")\"\n"
                    "num ::= [0-9]+\n";
    ACCEPT(g, "1+2");
    ACCEPT(g, "(1+(22+3))+4");
    ACCEPT(g, "((((7))))");
    PREFIX(g, "(1+");
    PREFIX(g, "");
    REJECT(g, "+1");
    REJECT(g, "1)");
    REJECT(g, "(1+2))");
    /* right recursion, deep: a balanced string 2000 levels down */
    const char *b = "root ::= \"(\" root \")\" | \"x\"";
    char deep[4100];
    memset(deep, '(', 2000);
    deep[2000] = 'x';
    memset(deep + 2001, ')', 2000);
    deep[4001] = 0;
    ACCEPT(b, deep);
    deep[4000] = 0;
    PREFIX(b, deep);
}

static void test_repetition(void) {
    const char *g = "root ::= \"a\"{2,3} \"b\"{2} \"c\"{1,} \"d\"?";
    ACCEPT(g, "aabbc");
    ACCEPT(g, "aaabbcccd");
    ACCEPT(g, "aabbcd");
    PREFIX(g, "aabb");
    REJECT(g, "abbc");
    REJECT(g, "aaaabbc");
    REJECT(g, "aabbbc");
    REJECT(g, "aabbcdd");
    const char *upto = "root ::= \"xy\"{,2}";
    ACCEPT(upto, "");
    ACCEPT(upto, "xyxy");
    PREFIX(upto, "xyx");
    REJECT(upto, "xyxyx");
    const char *plus = "root ::= (\"a\" | \"bc\")+ \";\"";
    ACCEPT(plus, "abcbca;");
    REJECT(plus, ";");
    REJECT(plus, "ab;");
    const char *nested = "root ::= ((\"a\" \"b\"?)* \",\")*";
    ACCEPT(nested, "aab,,ab,");
    REJECT(nested, "b,");
}

static void test_classes(void) {
    const char *ident = "root ::= [a-zA-Z_] [a-zA-Z0-9_]*";
    ACCEPT(ident, "_a9Z");
    REJECT(ident, "9a");
    REJECT(ident, "a-b");
    const char *str = "root ::= \"\\\"\" [^\"\\\\]* \"\\\"\"";  /* "..." without quotes or backslashes inside */
    ACCEPT(str, "\"abc d\"");
    ACCEPT(str, "\"\"");
    REJECT(str, "\"a\"b");
    REJECT(str, "\"a\\");
    const char *any = "root ::= \"<\" . \">\"";
    ACCEPT(any, "<\xc3\xa9>");
    ACCEPT(any, "<\xf0\x9f\x98\x80>");
    REJECT(any, "<ab>");
    const char *dash = "root ::= [-a]+ [\\]\\-]";  /* a leading '-' is itself; escaped ] and - */
    ACCEPT(dash, "-a-]");
    ACCEPT(dash, "a-");
    REJECT(dash, "b]");
}

static void test_utf8(void) {
    /* "héllo " then Greek small letters then " 日本" */
    const char *g = "root ::= \"h\xc3\xa9llo \" [\xce\xb1-\xcf\x89]+ \" \xe6\x97\xa5\xe6\x9c\xac\"";
    const char *ok = "h\xc3\xa9llo \xce\xb1\xce\xb2 \xe6\x97\xa5\xe6\x9c\xac";
    ACCEPT(g, ok);
    REJECT(g, "h\xc3\xa9llo a");
    REJECT(g, "hello \xce\xb1 \xe6\x97\xa5\xe6\x9c\xac");
    /* split inside characters: after the lead byte of é, inside 日 */
    size_t cuts1[] = {2, 0}, cuts2[] = {strlen(ok) - 4, strlen(ok) - 2, 0};
    CHECK(match_cut(g, ok, cuts1) == 2);
    CHECK(match_cut(g, ok, cuts2) == 2);
    /* a partial character that can only become something the grammar refuses is refused at once:
       0xE6 starts a 3-byte character, but only Greek letters (2 bytes) or a space may come */
    PREFIX(g, "h\xc3\xa9llo \xce");
    REJECT(g, "h\xc3\xa9llo \xe6");
    REJECT(g, "h\xc3\xa9llo \xce\xb1\xc3\xa9");  /* é is not in α-ω */
    /* invalid UTF-8 is never accepted: overlong, stray continuation, surrogate */
    const char *any = "root ::= .*";
    REJECT(any, "\xc0\xaf");
    REJECT(any, "\x80");
    REJECT(any, "\xed\xa0\x80");
    REJECT(any, "\xe0\x80");   /* overlong: refused at its second byte */
    REJECT(any, "\xed\xa5");   /* the start of a surrogate, for '.' and for a negated class */
    REJECT("root ::= [^a]*", "\xed\xa0");
    PREFIX("root ::= [^a]*", "\xed\x9f");
    PREFIX(any, "\xe6\x97");
}

static void test_escapes_comments(void) {
    const char *g = "root ::= \"\\x41\\u00e9\\U0001F600\\t\\n\\r\\\\\\\"\\'\" [\\x30-\\x39]";
    ACCEPT(g, "A\xc3\xa9\xf0\x9f\x98\x80\t\n\r\\\"'5");
    REJECT(g, "A\xc3\xa9\xf0\x9f\x98\x80\t\n\r\\\"'x");
    const char *c = "# a greeting\n"
                    "root ::= greeting # what comes first\n"
                    "   ( \" \" name )?   # then maybe a name\n"
                    "\n"
                    "greeting ::= \"hi\" |\n"
                    "  \"hello\"\n"
                    "name ::= [a-z]+\n";
    ACCEPT(c, "hello bob");
    ACCEPT(c, "hi");
    REJECT(c, "hey");
    REJECT(c, "hi Bob");
    const char *empty_alt = "root ::= \"a\" | ";
    ACCEPT(empty_alt, "");
    ACCEPT(empty_alt, "a");
}

/* The error for a grammar contains want. */
static void check_error(const char *grammar, const char *want) {
    nc_err err = {{0}};
    gr_grammar *g = NULL;
    int rc = gr_parse(&g, grammar, strlen(grammar), &err);
    CHECK_MSG(rc == -1 && strstr(err.msg, want), "grammar %s: got '%s', want '%s'", grammar, rc ? err.msg : "success", want);
    gr_free(g);
}

static void test_errors(void) {
    check_error("root ::= \"a\"\nfoo ::= bar", "grammar 2:9: rule 'bar' is used but not defined");
    check_error("root ::= \"abc", "grammar 1:10: unterminated string literal");
    check_error("root ::= [a-", "grammar 1:10: unterminated character class");
    check_error("foo ::= \"a\"", "no 'root' rule");
    check_error("root ::= ( \"a\"", "grammar 1:10: '(' is not closed");
    check_error("root ::= \"a\"\nroot ::= \"b\"", "grammar 2:1: rule 'root' is defined twice");
    check_error("root ::= \"\\q\"", "grammar 1:11: unknown escape '\\q'");
    check_error("root ::= \"a\"{3,1}", "grammar 1:13: repetition {3,1}: the maximum is below the minimum");
    check_error("root ::= [z-a]", "grammar 1:13: character range U+7A-U+61 is backwards");
    check_error("root ::= \"a\" )", "grammar 1:14: ')' without '('");
    check_error("root ::= \"a\"\n  bad ::", "grammar 2:7: unexpected ':'");
    check_error("root ::= []", "grammar 1:10: empty character class");
    check_error("root ::= \"\\x4\"", "grammar 1:11: \\x needs 2 hex digits");
    check_error("root ::= \"\\uD800\"", "is not a Unicode scalar value");
    check_error("root ::= \"\xff\"", "grammar 1:11: invalid UTF-8");
    check_error("root ::= x\nx ::= x \"a\"", "rule 'x' is left-recursive");
    check_error("root ::= a\na ::= b \"x\" | \"y\"\nb ::= c? a\nc ::= \"c\"", "is left-recursive");
    check_error("root ::= (\"\")* \"a\"", "is left-recursive");
    check_error("root ::= \"a\"{10001}", "repetition count above 10000");
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_hostile(void) {
    double t0 = now();
    /* 100000 nested parentheses */
    size_t n = 100000;
    char *deep = malloc(2 * n + 32);
    strcpy(deep, "root ::= ");
    memset(deep + 9, '(', n);
    strcpy(deep + 9 + n, "\"a\"");
    memset(deep + 12 + n, ')', n);
    deep[12 + 2 * n] = 0;
    check_error(deep, "parentheses nested deeper than 256");
    free(deep);
    /* repetitions multiplying past the element limit */
    char *many = malloc(300 * 10 + 64);
    strcpy(many, "root ::= ");
    for (int i = 0; i < 300; i++) strcat(many, "x{9999} ");
    strcat(many, "\nx ::= \"a\"");
    check_error(many, "expands to more than");
    free(many);
    check_error("root ::= \"a\"{99999999999999999999}", "repetition count above 10000");
    /* an absurdly ambiguous grammar still answers (bounded state sets) */
    const char *amb = "root ::= (\"a\" | \"a\" | [a-z] | .)* \"b\"";
    char text[2001];
    memset(text, 'a', 2000);
    text[2000] = 0;
    CHECK(match(amb, text) == 1);
    /* ambiguity nested in recursion: the stacks double at every x (bounded sets and work) */
    const char *expo = "root ::= a\na ::= \"x\" a b | \"x\" a c | \"\"\nb ::= \"y\"?\nc ::= \"z\"?";
    char xs[81];
    memset(xs, 'x', 80);
    xs[80] = 0;
    CHECK(match(expo, "xxyy") == 2);
    CHECK(match(expo, xs) >= 0);
    /* ten thousand-way optional chain */
    CHECK(match("root ::= \"a\"{0,10000} \"b\"", "aaaaab") == 2);
    double dt = now() - t0;
    CHECK_MSG(dt < 5.0, "hostile grammars took %.2f s", dt);
}

/* gr_matcher_cut: false for a plain grammar; true once the stacks of one doubling at every x pass
 * the bound on a state's set, until a reset. */
static void test_cut(void) {
    static const char *const grammars[2] = {"root ::= \"ab\" [0-9]*",
                                            "root ::= a\na ::= \"x\" a b | \"x\" a c | \"\"\nb ::= \"y\"?\nc ::= \"z\"?"};
    static const char *const texts[2] = {"ab12", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"};
    for (int i = 0; i < 2; i++) {
        nc_err err;
        gr_grammar *g;
        gr_matcher *m;
        if (gr_parse(&g, grammars[i], strlen(grammars[i]), &err) || gr_matcher_new(&m, g, &err)) {
            CHECK_MSG(0, "%s", err.msg);
            continue;
        }
        gr_matcher_feed(m, (const uint8_t *)texts[i], strlen(texts[i]));
        CHECK_MSG(gr_matcher_cut(m) == (i == 1), "grammar %d: cut %d", i, gr_matcher_cut(m));
        gr_matcher_reset(m);
        CHECK(!gr_matcher_cut(m));
        gr_matcher_free(m);
        gr_free(g);
    }
}

/* ---- the mask against a plain per-token check ---- */

static const char *const MASK_GRAMMARS[] = {
    "root ::= \"h\xc3\xa9\" [\xce\xb1-\xcf\x89\xe6\x97\xa5" "a-z ]* \"!\"",
    "root ::= expr\nexpr ::= term ([-+*/] term)*\nterm ::= [0-9]+ | \"(\" expr \")\" | \" \" term",
    NULL, /* the JSON grammar, filled in below */
};
static const char *const MASK_PREFIXES[] = {"", "h\xc3", "h\xc3\xa9\xce", "(1+", "{\"a", "{\"a\": [1, ", "{\"k\": \"x\\"};

static void mask_case(const nc_model *m, const gr_vocab *v, const char *grammar, const char *prefix) {
    nc_err err;
    gr_grammar *g;
    gr_matcher *mm, *brute;
    if (gr_parse(&g, grammar, strlen(grammar), &err) || gr_matcher_new(&mm, g, &err) || gr_matcher_new(&brute, g, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    if (!gr_matcher_feed(mm, (const uint8_t *)prefix, strlen(prefix))) { /* not a prefix of this grammar */
        gr_matcher_free(mm), gr_matcher_free(brute), gr_free(g);
        return;
    }
    int32_t n = gr_vocab_n_tokens(v);
    uint8_t *allowed = malloc((size_t)n);
    int32_t count = gr_matcher_mask(mm, v, allowed, n), want_count = 0, bad = 0, first_bad = -1;
    bool can_end = gr_matcher_can_end(mm);
    for (int32_t id = 0; id < n; id++) {
        bool want;
        if (nc_token_is_eog(m, id)) want = can_end;
        else {
            uint32_t len;
            const uint8_t *piece = gr_vocab_piece(v, id, &len);
            gr_matcher_reset(brute);
            want = len > 0 && gr_matcher_feed(brute, (const uint8_t *)prefix, strlen(prefix)) &&
                   gr_matcher_feed(brute, piece, len);
        }
        want_count += want;
        if (want != (allowed[id] != 0) && bad++ == 0) first_bad = id;
    }
    CHECK_MSG(bad == 0 && count == want_count, "mask for prefix '%s': %d tokens differ (first %d), %d allowed, %d wanted",
              prefix, bad, first_bad, count, want_count);
    /* again from the same state: the remembered mask */
    uint8_t *again = malloc((size_t)n);
    CHECK(gr_matcher_mask(mm, v, again, n) == count && !memcmp(again, allowed, (size_t)n));
    free(again);
    free(allowed);
    gr_matcher_free(mm), gr_matcher_free(brute), gr_free(g);
}

/* The trie's piece of every token is its text as nc_token_piece gives it, or empty (control). */
static void check_pieces(const nc_model *m, const gr_vocab *v) {
    int32_t bad = 0;
    char buf[512];
    for (int32_t id = 0; id < gr_vocab_n_tokens(v); id++) {
        uint32_t len;
        const uint8_t *p = gr_vocab_piece(v, id, &len);
        int n = nc_token_piece(m, id, buf, sizeof buf);
        if (len > 0 && (n != (int)len || memcmp(buf, p, len))) bad++;
    }
    CHECK_MSG(bad == 0, "%d pieces differ from nc_token_piece", bad);
}

static void test_mask(const char *rel) {
    nc_model *m = test_load_model(rel);
    if (!m) return;
    nc_err err;
    const gr_vocab *v = nc_model_grammar_vocab(m, &err);
    CHECK(v != NULL);
    CHECK(v == nc_model_grammar_vocab(m, &err)); /* built once, then shared */
    if (v) {
        check_pieces(m, v);
        char *json;
        CHECK(nc_json_schema_to_grammar("{}", NULL, &json, &err) == 0);
        for (int gi = 0; gi < 3; gi++)
            for (size_t pi = 0; pi < sizeof MASK_PREFIXES / sizeof *MASK_PREFIXES; pi++)
                mask_case(m, v, MASK_GRAMMARS[gi] ? MASK_GRAMMARS[gi] : json, MASK_PREFIXES[pi]);
        free(json);
    }
    nc_model_free(m);
}

/* ---- the sampler stage ---- */

static nc_sampler *grammar_sampler(const nc_model *m, int32_t n_vocab, const char *grammar) {
    nc_sampler_params p;
    nc_sampler_params_default(&p);
    p.temp = 1, p.top_k = 0, p.top_p = 1, p.min_p = 0;
    p.grammar = grammar;
    nc_sampler *s = NULL;
    nc_err err;
    if (nc_sampler_new(&s, m, n_vocab, &p, &err)) CHECK_MSG(0, "sampler: %s", err.msg);
    return s;
}

/* The tokens a sampler lets through after history (as a 0/1 array). */
static void allowed_after(nc_sampler *s, const float *logits, const int32_t *hist, int32_t n, int32_t n_prompt,
                          int32_t n_vocab, uint8_t *out) {
    nc_token_prob *d = malloc((size_t)n_vocab * sizeof *d);
    int32_t k = nc_sampler_apply(s, logits, hist, n, n_prompt, d, n_vocab);
    memset(out, 0, (size_t)n_vocab);
    for (int32_t i = 0; i < k; i++)
        if (d[i].p > 0) out[d[i].token] = 1;
    free(d);
}

/* The token whose text is exactly s. */
static int32_t find_token(const nc_model *m, int32_t n_vocab, const char *s) {
    char buf[64];
    for (int32_t id = 0; id < n_vocab; id++) {
        int n = nc_token_piece(m, id, buf, sizeof buf);
        if (n == (int)strlen(s) && !memcmp(buf, s, (size_t)n)) return id;
    }
    return -1;
}

static void test_sampler(void) {
    nc_model *m = test_load_model("models/stories260K/stories260K.gguf");
    if (!m) return;
    nc_model_info info;
    nc_model_get_info(m, &info);
    int32_t V = info.n_vocab;
    float *logits = calloc((size_t)V, sizeof *logits);
    uint8_t *a = malloc((size_t)V), *b = malloc((size_t)V);
    nc_err err;
    nc_sampler_params p;
    nc_sampler_params_default(&p);
    p.grammar = "root ::= \"a\"";
    nc_sampler *s = NULL;
    CHECK(nc_sampler_new(&s, NULL, V, &p, &err) == -1 && strstr(err.msg, "grammar needs the model"));
    p.grammar = "root ::= \"a";
    CHECK(nc_sampler_new(&s, m, V, &p, &err) == -1 && strstr(err.msg, "grammar 1:10: unterminated string literal"));
    p.samplers = "grammar;top_k";
    p.grammar = NULL;
    CHECK(nc_sampler_new(&s, m, V, &p, &err) == -1 && strstr(err.msg, "always runs first"));

    /* "a" then nothing but the end: after the token "a", only end-of-generation tokens remain */
    int32_t hist[64] = {1}, ta = find_token(m, V, "a");
    CHECK(ta >= 0);
    s = grammar_sampler(m, V, "root ::= \"a\"");
    if (s) {
        allowed_after(s, logits, hist, 1, 1, V, a);
        int32_t n_ok = 0;
        for (int32_t id = 0; id < V; id++) n_ok += a[id];
        CHECK(a[ta] && n_ok >= 1);
        for (int32_t id = 0; id < V; id++) CHECK_MSG(!a[id] || !nc_token_is_eog(m, id), "EOG %d before the end", id);
        hist[1] = ta;
        allowed_after(s, logits, hist, 2, 1, V, a);
        int32_t n_end = 0;
        for (int32_t id = 0; id < V; id++) {
            CHECK_MSG(!a[id] || nc_token_is_eog(m, id), "token %d allowed after the end", id);
            n_end += a[id];
        }
        CHECK(n_end >= 1);
        /* a rollback: the same sampler given the shorter history again allows "a" again */
        allowed_after(s, logits, hist, 1, 1, V, b);
        CHECK(b[ta]);
        nc_sampler_free(s);
    }
    /* histories that are not extensions of each other: the stage starts over and agrees with a
       fresh sampler every time */
    const char *g = "root ::= [a-z ]+ \".\"";
    s = grammar_sampler(m, V, g);
    int32_t ids[3][8];
    const char *texts[3] = {"the cat sat", "a dog", "the cat ran"};
    int32_t lens[3];
    for (int k = 0; k < 3; k++) lens[k] = nc_tokenize(m, texts[k], strlen(texts[k]), false, false, ids[k], 8, &err);
    for (int round = 0; round < 2 && s; round++)
        for (int k = 0; k < 3; k++) {
            hist[0] = 1;
            memcpy(hist + 1, ids[k], (size_t)lens[k] * sizeof *hist);
            allowed_after(s, logits, hist, 1 + lens[k], 1, V, a);
            nc_sampler *fresh = grammar_sampler(m, V, g);
            if (!fresh) break;
            allowed_after(fresh, logits, hist, 1 + lens[k], 1, V, b);
            CHECK_MSG(!memcmp(a, b, (size_t)V), "'%s' (round %d): reused and fresh samplers differ", texts[k], round);
            nc_sampler_free(fresh);
        }
    nc_sampler_free(s);
    /* beam search and contrastive search refuse a grammar */
    nc_context *ctx = NULL;
    nc_context_params cp = {.n_ctx = 64, .n_seq_max = 2};
    CHECK(nc_context_new(&ctx, m, &cp, &err) == 0);
    if (ctx) {
        nc_sampler_params_default(&p);
        p.grammar = "root ::= \"a\"";
        int32_t prompt[2] = {1, 403};
        nc_stop_params stop = {.max_tokens = 4};
        nc_beam_params bp = {.n_beams = 2, .n_best = 1, .length_penalty = 1};
        nc_beam_result br;
        CHECK(nc_beam_search(ctx, m, prompt, 2, &bp, &p, &stop, &br, &err) == -1 &&
              strstr(err.msg, "grammar: not supported with beam search"));
        nc_contrastive_params csp = {.penalty_alpha = 0.5f, .top_k = 2};
        nc_gen_result gr;
        CHECK(nc_contrastive_search(ctx, m, prompt, 2, &csp, &p, &stop, NULL, NULL, &gr, &err) == -1 &&
              strstr(err.msg, "grammar: not supported with contrastive search"));
        nc_context_free(ctx);
    }
    free(logits), free(a), free(b);
    nc_model_free(m);
}

int main(void) {
    test_recursion();
    test_repetition();
    test_classes();
    test_utf8();
    test_escapes_comments();
    test_errors();
    test_hostile();
    test_cut();
    test_mask("models/stories260K/stories260K.gguf");
    test_mask("archs/qwen2/qwen2-f16.gguf");
    test_mask("archs/gemma2/gemma2-f16.gguf");
    test_sampler();
    return test_summary("test_grammar");
}
