/* What to keep of a full sequence: the eviction policies as pure functions over cell counts and
 * positions, so the generation driver, the server and the tests share them. kv_seq_keep (through
 * the forward pass, which re-rotates the moved keys) carries out what they decide.
 *
 * Both policies keep a run of first cells and the most recent ones, and leave the positions
 * contiguous again (a sequence whose cell i held position i does so again), so the next token
 * goes at the sequence's length. They differ in what they are for:
 *
 * - Context shift (llama.cpp's --context-shift): the first n_keep cells are the part of the prompt
 *   that must stay (instructions); half of the rest goes at once, so a shift happens every
 *   (n_ctx - n_keep) / 2 tokens. Kept cells move back by the number dropped.
 * - Attention sinks (StreamingLLM, Xiao et al. 2023, "Efficient Streaming Language Models with
 *   Attention Sinks"): models put much of their attention on the very first tokens whatever they
 *   say, and attention over a plain window of recent tokens falls apart once those are gone; a few
 *   "sink" tokens kept at the start (4 in the paper) plus the recent window keep it sane for any
 *   length at constant memory. StreamingLLM evicts one token per step and gives the kept tokens
 *   their places in the cache as positions; here a quarter of the window goes at a time, so the
 *   cost of moving cells and re-rotating their keys (O(context) each time) is paid every
 *   window / 4 tokens instead of every token, while the window seen never falls below three
 *   quarters of what fits. Positions are places in the cache, as in the paper. */
#ifndef NC_KV_POLICY_H
#define NC_KV_POLICY_H

#include <stdbool.h>
#include <stdint.h>

/* Context shift: of n_cells cells at positions pos[] (increasing, as a sequence's are), keep the
 * first n_keep and those from n_keep + n_discard on, the latter n_discard positions earlier.
 * Writes the kept cells and their new positions (n_cells - n_discard entries) and returns how
 * many; -1 when the counts do not fit (n_keep, n_discard >= 0, n_keep + n_discard <= n_cells). */
int32_t kv_policy_shift(const int32_t *pos, int32_t n_cells, int32_t n_keep, int32_t n_discard, int32_t *cells,
                        int32_t *new_pos);
/* Attention sinks: keep the first n_sink cells and those from n_sink + n_discard on, at
 * positions 0.. (their places). Returns how many are kept, or -1 when the counts do not fit. */
int32_t kv_policy_sinks(int32_t n_cells, int32_t n_sink, int32_t n_discard, int32_t *cells, int32_t *new_pos);

/* What each drops when the cache is full: half of the cells after the kept ones (llama.cpp's),
 * a quarter of the window after the sinks (at least one). */
int32_t kv_policy_shift_discard(int32_t n_cells, int32_t n_keep);
int32_t kv_policy_sinks_discard(int32_t n_cells, int32_t n_sink);

/* The cells a context shift keeps at the start for a prompt of n_prompt tokens, from the user's
 * n_keep as llama.cpp's --keep counts it: prompt tokens besides the BOS the prompt starts with
 * (which is always kept), -1 or more than the prompt meaning the whole prompt. */
int32_t kv_policy_keep(int32_t n_keep, int32_t n_prompt, bool bos_first);

#endif
