/* Logit processors driven by the history: repetition, frequency and presence penalties,
 * no-repeat-n-gram, logit bias and bans. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampling/sampler.h"

static int by_value(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

/* One pass per distinct token of the window (counted by sorting a copy):
 *  - repetition penalty (Keskar et al., 2019, CTRL): a positive logit is divided by the penalty,
 *    a negative one multiplied, so the token always becomes less likely for a penalty > 1;
 *  - OpenAI's frequency and presence penalties: logit -= count * frequency + (count > 0) * presence. */
int32_t smp_penalties(cand_list *c, const int32_t *window, int32_t n_window, float repeat, float frequency,
                      float presence, int32_t *scratch) {
    if (n_window == 0) return 0;
    memcpy(scratch, window, (size_t)n_window * sizeof *scratch);
    qsort(scratch, (size_t)n_window, sizeof *scratch, by_value);
    int32_t changed = 0;
    for (int32_t i = 0; i < n_window;) {
        int32_t tok = scratch[i], count = 0;
        while (i < n_window && scratch[i] == tok) { i++; count++; }
        int32_t at = cands_find(c, tok);
        if (at < 0) continue;
        float *l = &c->data[at].logit;
        *l = *l <= 0 ? *l * repeat : *l / repeat;
        *l -= (float)count * frequency + presence;
        changed++;
    }
    if (changed) c->probs = false;
    return changed;
}

static bool ban_at(cand_list *c, int32_t at) {
    if (at < 0 || c->data[at].logit == -INFINITY) return false;
    c->data[at].logit = -INFINITY;
    c->probs = false;
    return true;
}

/* Hugging Face's NoRepeatNGramLogitsProcessor: a token is banned when it would complete an
 * n-gram that already occurs in the history — every earlier n-gram whose first n-1 tokens equal
 * the last n-1 tokens of the history bans its last token. The history includes the prompt. */
int32_t smp_no_repeat_ngram(cand_list *c, const int32_t *history, int32_t n_history, int32_t n) {
    if (n <= 0 || n_history == 0 || n_history + 1 < n) return 0;
    const int32_t *prefix = history + n_history - (n - 1);
    int32_t banned = 0;
    for (int32_t start = 0; start + n <= n_history; start++) {
        if (memcmp(history + start, prefix, (size_t)(n - 1) * sizeof *history) == 0)
            banned += ban_at(c, cands_find(c, history[start + n - 1]));
    }
    return banned;
}

int32_t smp_logit_bias(cand_list *c, const nc_logit_bias *bias, int32_t n_bias) {
    int32_t changed = 0;
    for (int32_t i = 0; i < n_bias; i++) {
        int32_t at = cands_find(c, bias[i].token);
        if (at < 0) continue;
        c->data[at].logit += bias[i].bias;
        changed++;
    }
    if (changed) c->probs = false;
    return changed;
}

int32_t smp_ban(cand_list *c, const int32_t *ids, int32_t n_ids) {
    int32_t banned = 0;
    for (int32_t i = 0; i < n_ids; i++) banned += ban_at(c, cands_find(c, ids[i]));
    return banned;
}
