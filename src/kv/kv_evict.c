#include "kv/kv_evict.h"

#include <stdlib.h>

#include "kv/kv_cache.h"

static const char *policy_name(kv_policy p) {
    static const char *names[] = {[KV_POLICY_NONE] = "none", [KV_POLICY_WINDOW] = "window",
                                  [KV_POLICY_SINKS] = "sinks", [KV_POLICY_H2O] = "h2o"};
    return names[p];
}

int kv_budget_check(kv_budget *b, int32_t n_ctx, nc_err *err) {
    if (b->policy < KV_POLICY_NONE || b->policy > KV_POLICY_H2O)
        return nc_fail(err, "KV eviction policy %d is unknown", (int)b->policy);
    if (b->policy == KV_POLICY_NONE) return 0;
    if (b->policy == KV_POLICY_WINDOW) b->recent = b->budget;
    if (b->budget < 1 || b->budget >= n_ctx)
        return nc_fail(err, "KV budget of %d cells (%s): must be in 1..%d, below the context of %d", b->budget,
                       policy_name(b->policy), n_ctx - 1, n_ctx);
    if (b->recent < 0 || b->recent > b->budget)
        return nc_fail(err, "KV recent window of %d cells (%s): must be in 0..%d, the budget", b->recent,
                       policy_name(b->policy), b->budget);
    return 0;
}

typedef struct scored {
    uint64_t score;
    int32_t cell;
} scored;

/* Heaviest first; the earlier cell first on equal scores. */
static int heavier_first(const void *pa, const void *pb) {
    const scored *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return (a->cell > b->cell) - (a->cell < b->cell);
}

int32_t kv_evict_select(const kv_budget *b, const uint64_t *score, int32_t len, int32_t *keep, nc_err *err) {
    int32_t n = b->policy == KV_POLICY_NONE || len <= b->budget ? len : b->budget;
    int32_t recent = n < len ? b->recent : len, older = len - recent; /* cells [older, len) are recent */
    int32_t others = n - recent;                                       /* kept among cells [0, older) */
    if (b->policy == KV_POLICY_H2O && others > 0) {
        scored *by = malloc((size_t)older * sizeof *by);
        if (!by) return nc_fail(err, "out of memory choosing the KV cells to keep");
        for (int32_t c = 0; c < older; c++) by[c] = (scored){score[c], c};
        qsort(by, (size_t)older, sizeof *by, heavier_first);
        for (int32_t c = 0; c < older; c++) keep[c] = 0; /* a mark per cell, then its index */
        for (int32_t i = 0; i < others; i++) keep[by[i].cell] = 1;
        free(by);
        int32_t k = 0;
        for (int32_t c = 0; c < older; c++)
            if (keep[c]) keep[k++] = c;
    } else { /* SINKS: the first cells */
        for (int32_t c = 0; c < others; c++) keep[c] = c;
    }
    for (int32_t i = 0; i < recent; i++) keep[others + i] = older + i;
    return n;
}

int kv_set_budget(kv_cache *kv, int32_t seq, kv_budget b, nc_err *err) {
    if (seq < 0 || seq >= kv_n_seq(kv)) return nc_fail(err, "sequence id %d is outside 0..%d", seq, kv_n_seq(kv) - 1);
    if (kv_budget_check(&b, kv_n_ctx(kv), err)) return -1;
    kv->seqs[seq].budget = b;
    return 0;
}

int kv_apply_budget(kv_cache *kv, int32_t seq, nc_err *err) {
    const kv_budget *b = &kv->seqs[seq].budget;
    int32_t len = kv_seq_len(kv, seq);
    if (b->policy == KV_POLICY_NONE || len <= b->budget) return 0;
    uint64_t *score = malloc((size_t)len * sizeof *score);
    int32_t *keep = malloc((size_t)len * sizeof *keep), *pos = malloc((size_t)b->budget * sizeof *pos);
    int rc = -1;
    if (!score || !keep || !pos) {
        nc_fail(err, "out of memory evicting KV cells of sequence %d", seq);
        goto done;
    }
    for (int32_t c = 0; c < len; c++) score[c] = kv_score(kv, seq, c);
    int32_t n = kv_evict_select(b, score, len, keep, err);
    if (n < 0) goto done;
    for (int32_t i = 0; i < n; i++) pos[i] = kv_positions(kv, seq)[keep[i]];
    rc = kv_seq_keep(kv, seq, keep, n, pos, NULL, err);
done:
    free(score);
    free(keep);
    free(pos);
    return rc;
}
