/* Speculative decoding's proposers and draft state (see spec.h and nc_spec_params). */
#include "sampling/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

enum { DRAFT_MAX_DEFAULT = 16, PROBE = 16 };

struct spec_drafter {
    nc_spec_params p;
    int32_t max, n_vocab;
    double cost;            /* a draft pass's cost in model passes (0: prompt lookup) */
    nc_batch_entry *batch;  /* the draft's passes */
    int32_t cap_batch;
    int32_t *row;           /* per sequence of a pass: its logits entry, -1 when it drafts no more */
    int32_t *want;          /* per sequence of a pass: the drafts it may make */
    int32_t cap_seqs;
};

bool spec_wanted(const nc_spec_params *p) { return p->draft || p->lookup_ngram > 0; }

/* ---- the draft's vocabulary ---- */

int nc_spec_check_vocab(const nc_model *m, const nc_model *draft, nc_err *err) {
    nc_model_info a, b;
    nc_model_get_info(m, &a);
    nc_model_get_info(draft, &b);
    if (a.n_vocab != b.n_vocab)
        return nc_fail(err, "the draft's vocabulary has %d tokens and the model's %d: a draft must share the model's vocabulary",
                       b.n_vocab, a.n_vocab);
    if (nc_token_bos(m) != nc_token_bos(draft) || nc_token_eos(m) != nc_token_eos(draft))
        return nc_fail(err, "the draft's special tokens differ from the model's (BOS %d vs %d, EOS %d vs %d)",
                       nc_token_bos(draft), nc_token_bos(m), nc_token_eos(draft), nc_token_eos(m));
    char x[256], y[256];
    for (int32_t id = 0; id < a.n_vocab; id++) {
        int nx = nc_token_piece(m, id, x, (int)sizeof x), ny = nc_token_piece(draft, id, y, (int)sizeof y);
        if (nx != ny || (nx > 0 && memcmp(x, y, (size_t)(nx < (int)sizeof x ? nx : (int)sizeof x)) != 0))
            return nc_fail(err, "the draft's vocabulary differs from the model's at token %d ('%.*s' vs '%.*s')", id,
                           ny > 0 && ny < 64 ? ny : 0, y, nx > 0 && nx < 64 ? nx : 0, x);
        if (nc_token_is_eog(m, id) != nc_token_is_eog(draft, id))
            return nc_fail(err, "the draft's end-of-generation tokens differ from the model's at token %d", id);
    }
    return 0;
}

/* ---- the proposer ---- */

int spec_drafter_new(spec_drafter **out, const nc_spec_params *p, const nc_model *m, nc_err *err) {
    *out = NULL;
    if (p->draft && !p->draft_model) return nc_fail(err, "speculative decoding: a draft context needs its model");
    if (p->draft && p->lookup_ngram > 0)
        return nc_fail(err, "speculative decoding: a draft model and prompt lookup are exclusive (pick one)");
    if (p->lookup_ngram < 0 || p->lookup_ngram > 64)
        return nc_fail(err, "lookup_ngram: %d is outside the allowed range 1..64", p->lookup_ngram);
    int32_t max = p->draft_max ? p->draft_max : DRAFT_MAX_DEFAULT;
    if (max < 1 || max > 256) return nc_fail(err, "draft_max: %d is outside the allowed range 1..256", max);
    if (p->draft_min < 0 || p->draft_min > max)
        return nc_fail(err, "draft_min: %d is outside the allowed range 0..%d (draft_max)", p->draft_min, max);
    if (p->draft && nc_spec_check_vocab(m, p->draft_model, err)) return -1;
    spec_drafter *d = calloc(1, sizeof *d);
    if (!d) return nc_fail(err, "out of memory");
    nc_model_info mi;
    nc_model_get_info(m, &mi);
    *d = (spec_drafter){.p = *p, .max = max, .n_vocab = mi.n_vocab};
    if (p->draft) {
        /* decoding reads the weights once per pass: the draft costs its share of the bytes */
        nc_model_info di;
        nc_model_get_info(p->draft_model, &di);
        d->cost = mi.decode_bytes ? (double)di.decode_bytes / (double)mi.decode_bytes : 1;
    }
    *out = d;
    return 0;
}

int32_t spec_drafter_max(const spec_drafter *d) { return d->max; }

void spec_drafter_free(spec_drafter *d) {
    if (!d) return;
    free(d->batch);
    free(d->row);
    free(d->want);
    free(d);
}

/* ---- a sequence's state ---- */

int spec_state_new(spec_state **out, spec_drafter *d, const nc_sampler_params *sampling, int32_t kv, nc_err *err) {
    spec_state *st = calloc(1, sizeof *st);
    if (!st) return nc_fail(err, "out of memory");
    *st = (spec_state){.d = d, .kv = kv, .alpha = 0.6, .probe_every = PROBE};
    *out = st;
    if (!d->p.draft) return 0;
    nc_sampler_params sp = *sampling;
    sp.seed = sampling->seed ^ 0x9e3779b97f4a7c15ull; /* its own draws, not the model's */
    sp.explain = false;
    sp.n_logprobs = 0;
    /* The draft samples without the grammar. Either way the verification is lossless (the model's
       chain, grammar first, gives p, and rejection sampling against any q yields p); unconstrained
       saves masking the vocabulary once per draft token, which costs far more relative to a small
       draft model's step than to the model's, and a draft that strays is simply rejected. */
    sp.grammar = NULL;
    st->q = malloc((size_t)d->max * (size_t)d->n_vocab * sizeof *st->q);
    st->certain = malloc((size_t)d->max * sizeof *st->certain);
    if (!st->q || !st->certain) return nc_fail(err, "out of memory");
    if (nc_sampler_new(&st->sampler, d->p.draft_model, d->n_vocab, &sp, err)) return -1;
    nc_kv_seq_clear(d->p.draft, kv);
    return 0;
}

void spec_state_free(spec_state *st) {
    if (!st) return;
    if (st->d->p.draft) nc_kv_seq_clear(st->d->p.draft, st->kv);
    nc_sampler_free(st->sampler);
    free(st->q);
    free(st->certain);
    free(st);
}

sampler_proposal spec_proposal(const spec_state *st, int32_t i) {
    const float *q = st->q && !st->certain[i] ? st->q + (size_t)i * (size_t)st->d->n_vocab : NULL;
    return (sampler_proposal){-1, q}; /* the token waits after the sequence's: seq.c reads it there */
}

/* The draft length with the most tokens per unit of cost (Leviathan et al. 2023, section 3.4):
 * gamma drafts give (1 - alpha^(gamma+1)) / (1 - alpha) tokens per pass of the model, at the
 * cost of 1 + (draft + VERIFY) * gamma passes: the draft's own passes and the extra rows of the
 * model's. None when no length beats plain decoding (1 token per pass); then a probe of one
 * draft keeps the estimate of alpha alive, after PROBE passes, twice as many after each probe
 * that did not make drafting pay (up to 64 x PROBE): a pair whose drafts are kept but cost more
 * than they save (a draft nearly as slow as its model) probes ever more rarely, since each probe
 * costs the draft's catch-up over the tokens since the last one. Deterministic (no clocks): the
 * same seed draws the same tokens. */
/* A verified row's share of a pass. Decoding reads the weights once per pass, so an extra row costs
 * only its arithmetic: on the 2-core AVX-512 machines we measure, prefill runs about 5x faster per
 * token than decode (TinyLlama Q4_0 153 vs 32 tok/s, TinyStories-656K 64k vs 14k), a fifth. */
static const double VERIFY = 0.2;

static int32_t draft_length(const spec_drafter *d, spec_state *st) {
    if (d->p.fixed) return d->max;
    double a = st->alpha < 0.01 ? 0.01 : st->alpha > 0.99 ? 0.99 : st->alpha, best = 1;
    int32_t lo = d->p.draft_min > 1 ? d->p.draft_min : 1, at = 0;
    for (int32_t g = lo; g <= d->max; g++) {
        double f = (1 - pow(a, g + 1)) / ((1 - a) * (1 + (d->cost + VERIFY) * g));
        if (f > best) {
            best = f;
            at = g;
        }
    }
    if (at > 0) {
        st->idle = 0;
        st->probe_every = PROBE;
        return at;
    }
    if (++st->idle < st->probe_every) return 0;
    st->idle = 0;
    if (st->probe_every < 64 * PROBE) st->probe_every *= 2; /* back to PROBE once drafting pays */
    return lo;
}

/* Prompt lookup (Saxena 2023): the tokens after the latest earlier occurrence of the sequence's
 * last g tokens, g from lookup_ngram down to 1. The copy may run on into the tokens it has just
 * proposed, as an LZ77 match overlaps itself: text that repeats a stretch of p tokens (a list, a
 * loop of greedy decoding) gets a full draft, where stopping at the sequence's end would give
 * only p tokens (one, for a token repeated). */
static void propose_lookup(const spec_drafter *d, seq *s, int32_t room) {
    const int32_t *t = s->tokens;
    int32_t n = s->n_tokens, found = 0, want = draft_length(d, s->spec);
    room = want < room ? want : room;
    if (room <= 0) {
        s->spec->n_draft = 0;
        return;
    }
    /* One scan back over the text finds what trying g = lookup_ngram down to 1 in turn would: the
       latest occurrence of the longest suffix. (The tries cost a scan each where the suffix does
       not recur: 1% of a TinyStories-656K paragraph copy's time, whose passes last 50 us.) */
    int32_t cap = d->p.lookup_ngram < n - 1 ? d->p.lookup_ngram : n - 1, best = 0, from = -1;
    for (int32_t j = n - 2; j >= 0 && best < cap; j--) {
        if (t[j] != t[n - 1]) continue;
        int32_t g = 1;
        while (g < cap && g <= j && t[j - g] == t[n - 1 - g]) g++;
        if (g > best) {
            best = g;
            from = j + 1;
        }
    }
    for (int32_t j = from; from >= 0 && found < room; j++) s->tokens[n + found++] = t[j]; /* j < n + found */
    s->spec->n_draft = found >= d->p.draft_min ? found : 0;
}

static int grow(spec_drafter *d, int32_t n_entries, int32_t n_seqs, nc_err *err) {
    if (n_entries > d->cap_batch) {
        nc_batch_entry *b = realloc(d->batch, (size_t)n_entries * sizeof *b);
        if (!b) return nc_fail(err, "out of memory");
        d->batch = b;
        d->cap_batch = n_entries;
    }
    if (n_seqs > d->cap_seqs) {
        int32_t *r = realloc(d->row, (size_t)n_seqs * sizeof *r), *w = r ? realloc(d->want, (size_t)n_seqs * sizeof *w) : NULL;
        if (r) d->row = r;
        if (!r || !w) return nc_fail(err, "out of memory");
        d->want = w;
        d->cap_seqs = n_seqs;
    }
    return 0;
}

/* The draft's cache catches up with the sequence (all its tokens, the prefix cache first) into
 * the pass; returns the entry whose logits give the first draft, or -1 when the pool has no room. */
static int32_t catch_up(spec_drafter *d, seq *s, int32_t *n, nc_err *err) {
    nc_context *dc = d->p.draft;
    int32_t kv = s->spec->kv, have = nc_kv_seq_len(dc, kv), upto = s->n_tokens;
    if (have >= upto) nc_kv_seq_truncate(dc, kv, have = upto - 1); /* the last token's logits are wanted */
    if (have == 0) have = nc_kv_seq_reuse_prefix(dc, kv, s->tokens, upto - 1);
    if (nc_kv_blocks_needed(dc, kv, upto - have) > nc_kv_blocks_available(dc)) return -1;
    if (grow(d, *n + upto - have, 0, err)) return -2;
    s->spec->stats.draft_rows += upto - have;
    for (int32_t i = have; i < upto; i++) d->batch[(*n)++] = (nc_batch_entry){s->tokens[i], i, kv, i == upto - 1};
    return *n - 1;
}

/* The draft model drafts for every sequence at once: one pass catching their caches up, then one
 * pass per draft token for those still drafting. */
static int propose_draft(spec_drafter *d, seq *const *seqs, const int32_t *room, int32_t n_seqs, nc_err *err) {
    nc_context *dc = d->p.draft;
    int32_t n = 0, n_ctx = nc_context_n_ctx(dc);
    if (grow(d, n_seqs, n_seqs, err)) return -1;
    for (int32_t i = 0; i < n_seqs; i++) {
        seq *s = seqs[i];
        /* the tokens and all drafts but the last fit in the draft's positions */
        int32_t k = draft_length(d, s->spec), fits = n_ctx - s->n_tokens + 1;
        k = k < room[i] ? k : room[i];
        k = k < fits ? k : fits;
        d->want[i] = k >= (d->p.draft_min > 1 ? d->p.draft_min : 1) ? k : 0;
        d->row[i] = d->want[i] ? catch_up(d, s, &n, err) : -1;
        if (d->row[i] == -2) return -1;
        if (d->row[i] < 0) d->want[i] = 0;
    }
    for (int32_t j = 0; n > 0; j++) {
        if (nc_forward(dc, d->batch, n, err)) return nc_fail_prefix(err, "the draft model");
        int32_t next = 0;
        for (int32_t i = 0; i < n_seqs; i++) {
            if (d->row[i] < 0) continue;
            seq *s = seqs[i];
            spec_state *st = s->spec;
            float *q = st->q + (size_t)j * (size_t)d->n_vocab;
            int32_t tok = sampler_propose(st->sampler, nc_logits(dc, d->row[i]), s->tokens, s->n_tokens + j, s->n_prompt, q);
            st->certain[j] = sampler_proposal_certain(st->sampler);
            s->tokens[s->n_tokens + j] = tok;
            st->n_draft = j + 1;
            d->row[i] = -1;
            if (j + 1 == d->want[i] || nc_token_is_eog(d->p.draft_model, tok) ||
                nc_kv_blocks_needed(dc, st->kv, 1) > nc_kv_blocks_available(dc))
                continue;
            d->row[i] = next;
            d->batch[next++] = (nc_batch_entry){tok, s->n_tokens + j, st->kv, true};
            st->stats.draft_rows++;
        }
        n = next;
    }
    for (int32_t i = 0; i < n_seqs; i++)
        if (seqs[i]->spec->n_draft < d->p.draft_min) seqs[i]->spec->n_draft = 0;
    return 0;
}

int spec_propose(spec_drafter *d, seq *const *seqs, const int32_t *room, int32_t n, nc_err *err) {
    int32_t *r = malloc((size_t)(n > 0 ? n : 1) * sizeof *r);
    if (!r) return nc_fail(err, "out of memory");
    for (int32_t i = 0; i < n; i++) {
        seqs[i]->spec->n_draft = 0;
        r[i] = room[i] < d->max ? room[i] : d->max;
        if (r[i] > 0 && seq_reserve(seqs[i], r[i] + 1, err)) {
            free(r);
            return -1;
        }
        if (!d->p.draft && r[i] > 0) propose_lookup(d, seqs[i], r[i]);
    }
    int rc = d->p.draft ? propose_draft(d, seqs, r, n, err) : 0;
    free(r);
    return rc;
}

void spec_verified(spec_state *st, const seq *s, int32_t n_accepted, int32_t n_made) {
    int32_t k = st->n_draft;
    st->stats.passes++;
    st->stats.generated += n_made;
    st->stats.drafted += k;
    st->stats.accepted += n_accepted;
    /* each draft verified moves the estimate (a moving average over the last ~5); the first
     * rejected one too */
    for (int32_t i = 0; i < n_accepted; i++) st->alpha = 0.8 * st->alpha + 0.2;
    if (n_made > n_accepted && n_accepted < k) st->alpha *= 0.8;
    st->n_draft = 0;
    if (st->d->p.draft && nc_kv_seq_len(st->d->p.draft, st->kv) > s->n_tokens - 1)
        nc_kv_seq_truncate(st->d->p.draft, st->kv, s->n_tokens - 1);
}

void spec_forget(spec_state *st) {
    if (st->d->p.draft) nc_kv_seq_clear(st->d->p.draft, st->kv);
}
