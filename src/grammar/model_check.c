/* Whether a model's vocabulary can begin a grammar's sentences at all: a JSON grammar asks a
 * vocabulary without '{' (TinyStories-656K's has none) for the impossible, and a request should
 * hear so rather than get an empty reply. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "grammar/grammar.h"

int nc_grammar_check_model(const nc_model *m, const char *gbnf, nc_err *err) {
    gr_grammar *g = NULL;
    gr_matcher *mt = NULL;
    uint8_t *allowed = NULL;
    const gr_vocab *v = nc_model_grammar_vocab(m, err);
    int rc = !v || gr_parse(&g, gbnf, strlen(gbnf), err) || gr_matcher_new(&mt, g, err) ? -1 : 0;
    int32_t n = v ? gr_vocab_n_tokens(v) : 0;
    if (!rc && !(allowed = malloc((size_t)n))) rc = nc_fail(err, "out of memory");
    if (!rc && gr_matcher_mask(mt, v, allowed, n) == 0)
        rc = nc_fail(err, "no token of the model's vocabulary can begin a sentence of the grammar (none has a text "
                          "it may start with)");
    free(allowed);
    gr_matcher_free(mt);
    gr_free(g);
    return rc;
}
