/* Grammar-constrained decoding: GBNF grammars (llama.cpp's format,
 * https://github.com/ggml-org/llama.cpp/blob/master/grammars/README.md), a pushdown matcher over
 * Unicode code points fed with bytes, and the per-vocabulary token trie the sampler's mask walks.
 *
 * gbnf.c parses the text into a rule table: every rule is a list of alternatives, each a sequence
 * of elements (a character class, a reference to a rule) ended by GR_END. Groups and repetitions
 * become generated rules, so the matcher sees only classes and references.
 * matcher.c runs it: a state is a set of stacks of positions (shared, hash-consed), advanced one
 * byte at a time; sets are interned with a cached transition per byte, so walking the token trie
 * mostly follows cached transitions.
 * vocab_trie.c holds the tokens' texts as a trie in depth-first order, built once per model. */
#ifndef NC_GRAMMAR_H
#define NC_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* Limits that keep a hostile grammar from exhausting memory or time (docs/structured-output.md). */
#define GR_MAX_TEXT (1 << 20)      /* bytes of grammar text */
#define GR_MAX_RULES (1 << 16)     /* rules, generated ones included */
#define GR_MAX_ELEMS (1 << 20)     /* elements of all rules after expanding repetitions */
#define GR_MAX_REPEAT 10000        /* m and n of {m,n} */
#define GR_MAX_NEST 256            /* nested parentheses */

typedef enum gr_kind { GR_END, GR_CHAR, GR_REF } gr_kind;

typedef struct gr_elem {
    uint8_t kind;   /* gr_kind */
    bool negated;   /* GR_CHAR: [^...] */
    int32_t a, b;   /* GR_CHAR: ranges [a, a + b) of gr_grammar.ranges; GR_REF: a is the rule */
} gr_elem;

typedef struct gr_range {
    uint32_t lo, hi;  /* code points, inclusive */
} gr_range;

typedef struct gr_grammar {
    gr_elem *elems;
    int32_t n_elems;
    gr_range *ranges;
    int32_t n_ranges;
    int32_t *alt_start;  /* element index where each alternative starts */
    int32_t *rule_alt;   /* rule r's alternatives: alt_start[rule_alt[r] .. rule_alt[r + 1]) */
    int32_t n_rules;
    char **names;        /* rule names, generated ones "parent~N" */
    int32_t root;
} gr_grammar;

/* Parse GBNF text (len bytes, not NUL-terminated necessarily). Errors name line:column and the
 * problem: syntax, undefined rules, no `root`, rules defined twice, left recursion, limits. */
int gr_parse(gr_grammar **out, const char *text, size_t len, nc_err *err);
/* gr_parse asking poll once per rule: NC_POLL_ABANDONED once it says the caller is gone. */
int gr_parse_watched(gr_grammar **out, const char *text, size_t len, nc_poll *poll, nc_err *err);
void gr_free(gr_grammar *g);

/* ---- the matcher (matcher.c) ---- */

typedef struct gr_matcher gr_matcher;
int gr_matcher_new(gr_matcher **out, const gr_grammar *g, nc_err *err);
void gr_matcher_free(gr_matcher *m);
/* Back to the start of the grammar (caches are kept). */
void gr_matcher_reset(gr_matcher *m);
/* Feed bytes (a token's text): false when the grammar cannot go on with them; the state is then
 * dead (nothing but a reset brings it back). */
bool gr_matcher_feed(gr_matcher *m, const uint8_t *bytes, size_t n);
/* The grammar is complete here (the text so far is a sentence of it). */
bool gr_matcher_can_end(const gr_matcher *m);
bool gr_matcher_dead(const gr_matcher *m);
/* Whether a limit cut the matcher's work since its last reset: an absurdly ambiguous grammar
 * (stacks dropped past MAX_SET, the closure budgets, the node arena). Its masks and what feeding
 * allows may then disagree; for any other grammar they agree exactly. */
bool gr_matcher_cut(const gr_matcher *m);

/* ---- the vocabulary trie (vocab_trie.c) ---- */

typedef struct gr_vocab gr_vocab;
/* piece(user, id, buf, cap): the bytes of token id as generated text (nothing for control
 * tokens), as vocab_token_piece returns them. eog(user, id): it ends generation. */
typedef int (*gr_piece_fn)(void *user, int32_t id, char *buf, int cap);
typedef bool (*gr_eog_fn)(void *user, int32_t id);
int gr_vocab_build(gr_vocab **out, int32_t n_tokens, gr_piece_fn piece, gr_eog_fn eog, void *user, nc_err *err);
void gr_vocab_free(gr_vocab *v);
int32_t gr_vocab_n_tokens(const gr_vocab *v);
/* A token's bytes (len 0 for control tokens). */
const uint8_t *gr_vocab_piece(const gr_vocab *v, int32_t id, uint32_t *len);
bool gr_vocab_is_eog(const gr_vocab *v, int32_t id);
/* The model's trie, built on first use and kept (thread-safe) until the model is freed; api.c
 * owns it because only it sees both the model and the vocabulary. NULL with err set on failure. */
const gr_vocab *nc_model_grammar_vocab(const nc_model *m, nc_err *err);

/* allowed[id] for id < n (n <= the vocabulary's size): 1 when the token's bytes can continue the
 * grammar from the matcher's state, EOG tokens when it can end here. Returns how many are allowed.
 * Walks the trie depth first from the current state, skipping a subtree as soon as no stack
 * survives its prefix. */
int32_t gr_matcher_mask(gr_matcher *m, const gr_vocab *v, uint8_t *allowed, int32_t n);

#endif
