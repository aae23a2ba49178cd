/* Eviction policies (see kv_policy.h). */
#include "kv/kv_policy.h"

static bool counts_fit(int32_t n_cells, int32_t n_first, int32_t n_discard) {
    return n_cells >= 0 && n_first >= 0 && n_discard >= 0 && n_first <= n_cells - n_discard;
}

int32_t kv_policy_shift(const int32_t *pos, int32_t n_cells, int32_t n_keep, int32_t n_discard, int32_t *cells,
                        int32_t *new_pos) {
    if (!counts_fit(n_cells, n_keep, n_discard)) return -1;
    int32_t n = 0;
    for (int32_t c = 0; c < n_cells; c++) {
        if (c >= n_keep && c < n_keep + n_discard) continue;
        /* positions increase by at least one a cell, so the moved ones stay above the kept ones
         * and at or above 0 */
        cells[n] = c;
        new_pos[n++] = c < n_keep ? pos[c] : pos[c] - n_discard;
    }
    return n;
}

int32_t kv_policy_sinks(int32_t n_cells, int32_t n_sink, int32_t n_discard, int32_t *cells, int32_t *new_pos) {
    if (!counts_fit(n_cells, n_sink, n_discard)) return -1;
    int32_t n = 0;
    for (int32_t c = 0; c < n_cells; c++) {
        if (c >= n_sink && c < n_sink + n_discard) continue;
        cells[n] = c;
        new_pos[n] = n;
        n++;
    }
    return n;
}

int32_t kv_policy_shift_discard(int32_t n_cells, int32_t n_keep) {
    return n_cells > n_keep ? (n_cells - n_keep) / 2 : 0;
}

int32_t kv_policy_sinks_discard(int32_t n_cells, int32_t n_sink) {
    if (n_cells <= n_sink) return 0;
    int32_t quarter = (n_cells - n_sink) / 4;
    return quarter > 0 ? quarter : 1;
}

int32_t kv_policy_keep(int32_t n_keep, int32_t n_prompt, bool bos_first) {
    if (n_keep < 0 || n_keep >= n_prompt) return n_prompt;
    int32_t keep = n_keep + (bos_first ? 1 : 0);
    return keep < n_prompt ? keep : n_prompt;
}
