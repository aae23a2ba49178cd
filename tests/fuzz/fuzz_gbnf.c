/* libFuzzer harness for the GBNF parser and matcher (src/grammar/gbnf.c, matcher.c, vocab_trie.c):
 * the input is grammar text, then optionally a NUL byte and a text to feed. Any grammar must parse
 * or fail with a message, never crash, leak or hang; a parsed grammar is fed the text one byte at a
 * time, and at every step the vocabulary mask over a small fixed vocabulary (ASCII, multi-byte
 * characters, pieces of characters, multi-character tokens) must equal a plain per-token check:
 * a fresh matcher fed the text so far and then the token, unless a limit cut either matcher's work
 * (an absurdly ambiguous grammar, gr_matcher_cut: the limits bound mask and feed differently).
 * The reference check costs a fresh feed per token and byte, each bounded only by the matcher's
 * work budget, so an ambiguous grammar could keep one input for tens of seconds: it stops after
 * CHECK_SECONDS of CPU, leaving the fuzzer's timeout to catch a single call that hangs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"

static const char *const TOKENS[] = {
    "a", "b", "z", "0", "9", " ", "\n", "\"", "\\", "{", "}", "[", "]", ",", ":", "-", ".", "ab", "abc", "true",
    "null", "\": ", "\", \"", "{\"", "\xc3\xa9", "\xc3", "\xa9", "\xe6\x97\xa5", "\xe6", "\x97\xa5", "\xf0\x9f\x98\x80",
    "\xf0\x9f", "\xed\xa0\x80", "\xff", "x\xc3", "\xa9x", "12", "-1", "  ", "\t", "",
};
#define N_TOKENS ((int32_t)(sizeof TOKENS / sizeof *TOKENS))
#define EOG_ID (N_TOKENS)
#define CHECK_SECONDS 2

static int piece(void *user, int32_t id, char *buf, int cap) {
    if (id >= N_TOKENS) return 0;
    int n = (int)strlen(TOKENS[id]);
    if (n <= cap) memcpy(buf, TOKENS[id], (size_t)n);
    return n;
}
static bool is_eog(void *user, int32_t id) { return id == EOG_ID; }

static void check(bool ok) {
    if (!ok) abort();
}

static gr_vocab *vocab(void) {
    static gr_vocab *v;
    nc_err err;
    if (!v) check(gr_vocab_build(&v, N_TOKENS + 1, piece, is_eog, NULL, &err) == 0);
    return v;
}

/* The mask from m's state (after text[0..n)) against feeding each token to a fresh matcher; false
 * once a limit cut either, or the clock passed deadline (nothing more to compare for this input). */
static bool check_mask(gr_matcher *m, gr_matcher *fresh, const uint8_t *text, size_t n, clock_t deadline) {
    uint8_t allowed[N_TOKENS + 1];
    int32_t count = gr_matcher_mask(m, vocab(), allowed, N_TOKENS + 1), want_count = 0;
    bool want[N_TOKENS + 1];
    for (int32_t id = 0; id <= N_TOKENS; id++) {
        if (id == EOG_ID) want[id] = gr_matcher_can_end(m);
        else {
            gr_matcher_reset(fresh);
            size_t len = strlen(TOKENS[id]);
            want[id] = len > 0 && gr_matcher_feed(fresh, text, n) && gr_matcher_feed(fresh, (const uint8_t *)TOKENS[id], len);
            if (gr_matcher_cut(fresh) || clock() > deadline) return false;
        }
    }
    if (gr_matcher_cut(m)) return false;
    for (int32_t id = 0; id <= N_TOKENS; id++) {
        check(want[id] == (allowed[id] != 0));
        want_count += want[id];
    }
    check(count == want_count);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    const uint8_t *text = nul ? nul + 1 : data + size;
    size_t tlen = nul ? size - glen - 1 : 0;
    nc_err err;
    gr_grammar *g;
    if (gr_parse(&g, (const char *)data, glen, &err)) {
        check(err.msg[0] != 0);
        return 0;
    }
    gr_matcher *m, *fresh;
    if (gr_matcher_new(&m, g, &err) == 0) {
        check(gr_matcher_new(&fresh, g, &err) == 0);
        clock_t deadline = clock() + CHECK_SECONDS * CLOCKS_PER_SEC;
        bool go = check_mask(m, fresh, text, 0, deadline);
        for (size_t i = 0; go && i < tlen && i < 64 && clock() <= deadline; i++) {
            if (!gr_matcher_feed(m, text + i, 1)) {
                check(gr_matcher_dead(m) && !gr_matcher_can_end(m));
                break;
            }
            go = check_mask(m, fresh, text, i + 1, deadline);
        }
        gr_matcher_free(fresh);
        gr_matcher_free(m);
    }
    gr_free(g);
    return 0;
}
