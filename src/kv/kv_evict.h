/* Compression windows: a sequence kept under a budget of cells, by an eviction policy.
 *
 * After every forward pass, a sequence holding more cells than its budget keeps `budget` of them
 * (kv_apply_budget) and lets the others go. Every policy keeps the `recent` most recent cells;
 * the rest of the budget goes to
 *
 *   WINDOW  nothing else: the last `budget` cells (recent = budget), a plain sliding window;
 *   SINKS   the first budget - recent cells: StreamingLLM's attention sinks (Xiao et al. 2023,
 *           "Efficient Streaming Language Models with Attention Sinks", arXiv:2309.17453);
 *   H2O     the budget - recent cells that have received the most attention: the Heavy-Hitter
 *           Oracle (Zhang et al. 2023, "H2O: Heavy-Hitter Oracle for Efficient Generative
 *           Inference of Large Language Models", NeurIPS 2023, arXiv:2306.14048).
 *
 * H2O's score of a token is the attention it has received since it was cached: the softmax
 * weight every later query (its own included) gave it, summed over queries. The paper keeps a set
 * of tokens per head and layer; here a cell holds a token's keys and values for every layer and
 * head, so one set is kept per sequence and a cell's score is summed over every head of every
 * layer that keeps its full context (sliding layers kept in rings do not vote). The forward pass
 * adds the weights while a sequence's policy is H2O, in fixed point (KV_SCORE_ONE is a weight of
 * 1) so that the sum is exact whatever order the threads add in.
 *
 * Kept cells keep their positions, as the paper's implementation keeps each cached key's
 * rotation: attention masks by position, so the gaps evicted cells leave change nothing but what
 * is seen. A query then sees at most budget + (its batch's tokens) cells. */
#ifndef NC_KV_EVICT_H
#define NC_KV_EVICT_H

#include <stdint.h>

#include "common.h"

typedef enum kv_policy { KV_POLICY_NONE, KV_POLICY_WINDOW, KV_POLICY_SINKS, KV_POLICY_H2O } kv_policy;

typedef struct kv_budget {
    kv_policy policy;
    int32_t budget;  /* cells a sequence keeps between forward passes */
    int32_t recent;  /* of which the most recent ones (WINDOW: all) */
} kv_budget;

/* Attention scores are sums of softmax weights in units of 2^-24 (rounded per weight): 64 bits
 * hold 2^40 of them, the weight of 2^30 queries over 1024 heads (all layers together). */
#define KV_SCORE_ONE 16777216.0

/* Refuse a budget no sequence of n_ctx cells can keep: 1 <= budget < n_ctx (one cell is left for
 * the next token), 0 <= recent <= budget. WINDOW's recent is set to its budget. */
int kv_budget_check(kv_budget *b, int32_t n_ctx, nc_err *err);

/* The cells of a sequence of len cells that b keeps, in increasing order, into keep: all of them
 * when len <= budget (returns len), else budget of them. score[len] (H2O only): the attention each
 * cell has received; the heaviest win, the earlier cell on equal scores. Returns the count, or
 * -1 with err set when out of memory. */
int32_t kv_evict_select(const kv_budget *b, const uint64_t *score, int32_t len, int32_t *keep, nc_err *err);

typedef struct kv_cache kv_cache;

/* Put seq under budget b (checked as kv_budget_check does) until set again; KV_POLICY_NONE lifts it. */
int kv_set_budget(kv_cache *kv, int32_t seq, kv_budget b, nc_err *err);
/* Evict the cells of seq past its budget (a no-op within it or without one), positions kept. */
int kv_apply_budget(kv_cache *kv, int32_t seq, nc_err *err);

#endif
