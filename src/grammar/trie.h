/* The token trie, shared by vocab_trie.c (which builds it) and matcher.c (which walks it). */
#ifndef NC_GRAMMAR_TRIE_H
#define NC_GRAMMAR_TRIE_H

#include "grammar/grammar.h"

/* Nodes in depth-first order (children in byte order), the root left out: node i at depth[i]
 * (1 for a token's first byte) on byte[i]; its subtree ends before skip[i]; the tokens whose text
 * ends there are ids[tok_first[i] .. tok_first[i + 1]). */
struct gr_vocab {
    int32_t n_tokens;
    int32_t n_nodes, max_depth;
    uint8_t *byte;
    uint16_t *depth;
    int32_t *skip;
    int32_t *tok_first;  /* n_nodes + 1 */
    int32_t *ids;
    uint8_t *eog;        /* per token */
    uint32_t *piece_off; /* n_tokens + 1 into text */
    uint8_t *text;
};

#endif
