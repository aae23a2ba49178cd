/* The eviction policies: the pure functions that choose cells and positions (against lists
 * written out by hand from their definitions), and the library's shift / sink / make-room on a
 * real model (stories260K) against the same moves spelt out with nc_kv_seq_keep, and against
 * attention's dependence on relative positions only. */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_policy.h"
#include "nucleus.h"
#include "test.h"
#include "test_files.h"

static bool same(const int32_t *a, const int32_t *b, int n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }

static void test_pure(void) {
    int32_t pos[10], cells[10], np[10];
    for (int i = 0; i < 10; i++) pos[i] = i;
    /* shift: keep 2, drop 4 -> cells 0 1 | 6 7 8 9, the latter 4 positions back */
    CHECK(kv_policy_shift(pos, 10, 2, 4, cells, np) == 6);
    CHECK(same(cells, (int32_t[]){0, 1, 6, 7, 8, 9}, 6) && same(np, (int32_t[]){0, 1, 2, 3, 4, 5}, 6));
    /* positions with gaps keep their gaps: only the moved cells change, by the amount dropped */
    int32_t gappy[6] = {0, 1, 5, 6, 9, 20};
    CHECK(kv_policy_shift(gappy, 6, 1, 2, cells, np) == 4);
    CHECK(same(cells, (int32_t[]){0, 3, 4, 5}, 4) && same(np, (int32_t[]){0, 4, 7, 18}, 4));
    /* nothing kept first, nothing dropped */
    CHECK(kv_policy_shift(pos, 10, 0, 3, cells, np) == 7 && cells[0] == 3 && np[0] == 0 && np[6] == 6);
    CHECK(kv_policy_shift(pos, 10, 4, 0, cells, np) == 10 && same(cells, pos, 10) && same(np, pos, 10));
    /* counts that do not fit */
    CHECK(kv_policy_shift(pos, 10, 8, 3, cells, np) == -1);
    CHECK(kv_policy_shift(pos, 10, -1, 3, cells, np) == -1);
    CHECK(kv_policy_shift(pos, 10, 2, -1, cells, np) == -1);
    /* sinks: 4 sinks, drop 3 -> cells 0..3 | 7 8 9 at their places 0..6 */
    CHECK(kv_policy_sinks(10, 4, 3, cells, np) == 7);
    CHECK(same(cells, (int32_t[]){0, 1, 2, 3, 7, 8, 9}, 7) && same(np, (int32_t[]){0, 1, 2, 3, 4, 5, 6}, 7));
    CHECK(kv_policy_sinks(10, 10, 1, cells, np) == -1 && kv_policy_sinks(10, 0, 11, cells, np) == -1);
    /* shares: half of what follows the kept cells; a quarter of the window, at least one */
    CHECK(kv_policy_shift_discard(2048, 1) == 1023 && kv_policy_shift_discard(256, 0) == 128);
    CHECK(kv_policy_shift_discard(5, 4) == 0 && kv_policy_shift_discard(3, 5) == 0);
    CHECK(kv_policy_sinks_discard(256, 4) == 63 && kv_policy_sinks_discard(6, 4) == 1);
    CHECK(kv_policy_sinks_discard(4, 4) == 0);
    /* --keep as llama.cpp counts it: the BOS comes on top; -1 or more than the prompt: all of it */
    CHECK(kv_policy_keep(0, 5, true) == 1 && kv_policy_keep(0, 5, false) == 0);
    CHECK(kv_policy_keep(2, 5, true) == 3 && kv_policy_keep(2, 5, false) == 2);
    CHECK(kv_policy_keep(4, 5, true) == 5 && kv_policy_keep(-1, 5, true) == 5 && kv_policy_keep(9, 5, false) == 5);
}

/* ---- on the model ---- */

static nc_model *model;
static int32_t n_vocab;
enum { N = 60 };
static int32_t tok[N + 1];

static nc_context *context(int32_t n_ctx, int32_t n_seq) {
    nc_context *c = NULL;
    nc_err err;
    nc_context_params cp = {.n_ctx = n_ctx, .n_seq_max = n_seq, .n_threads = 2,
                            .type_k = NC_CACHE_F32, .type_v = NC_CACHE_F32};
    if (nc_context_new(&c, model, &cp, &err)) fprintf(stderr, "context: %s\n", err.msg);
    return c;
}

/* tok[0..N) into seq at positions 0.. */
static void prefill(nc_context *c, int32_t seq) {
    nc_batch_entry b[N];
    nc_err err;
    for (int i = 0; i < N; i++) b[i] = (nc_batch_entry){tok[i], i, seq, false};
    nc_kv_seq_clear(c, seq);
    CHECK(nc_forward(c, b, N, &err) == 0);
}

/* The logits of tok[N] fed at pos into seq (malloc'd). */
static float *next_logits(nc_context *c, int32_t seq, int32_t pos) {
    nc_batch_entry e = {tok[N], pos, seq, true};
    nc_err err;
    float *out = malloc(sizeof(float) * (size_t)n_vocab);
    CHECK(nc_forward(c, &e, 1, &err) == 0);
    memcpy(out, nc_logits(c, 0), sizeof(float) * (size_t)n_vocab);
    return out;
}

static float max_diff(const float *a, const float *b) {
    float d = 0;
    for (int i = 0; i < n_vocab; i++)
        if (fabsf(a[i] - b[i]) > d) d = fabsf(a[i] - b[i]);
    return d;
}

/* The cells kept and the positions given, spelt out: cells [0, first) and [first + drop, N). */
static int32_t spelt_out(int32_t first, int32_t drop, bool by_place, int32_t *cells, int32_t *pos) {
    int32_t n = 0;
    for (int32_t i = 0; i < first; i++, n++) { cells[n] = i; pos[n] = i; }
    for (int32_t i = first + drop; i < N; i++, n++) { cells[n] = i; pos[n] = by_place ? n : i - drop; }
    return n;
}

static void test_model(void) {
    nc_err err;
    nc_context *c = context(64, 3);
    int32_t cells[N], pos[N];
    /* 1. shift with nothing kept first = the window of the last cells, all moved by the same
     * amount: attention with RoPE sees relative positions only, so the next token's logits are
     * those of the same cells left where they were (F32 cache: to the rotation's rounding) */
    prefill(c, 0);
    CHECK(nc_kv_seq_shift(c, 0, 0, 20, &err) == 0 && nc_kv_seq_len(c, 0) == N - 20);
    float *shifted = next_logits(c, 0, N - 20);
    prefill(c, 1);
    for (int i = 0; i < N - 20; i++) { cells[i] = 20 + i; pos[i] = 20 + i; }
    CHECK(nc_kv_seq_keep(c, 1, cells, N - 20, pos, &err) == 0);
    float *unmoved = next_logits(c, 1, N);
    CHECK_MSG(max_diff(shifted, unmoved) < 2e-4f, "a window shifted back 20 moved the logits by %g",
              max_diff(shifted, unmoved));
    free(shifted);
    free(unmoved);
    /* 2. shift keeping 5 first: the very cells and positions spelt out by hand, bit for bit */
    prefill(c, 0);
    CHECK(nc_kv_seq_shift(c, 0, 5, 0, &err) == 0 && nc_kv_seq_len(c, 0) == N - (N - 5) / 2);
    float *a = next_logits(c, 0, N - (N - 5) / 2);
    prefill(c, 1);
    int32_t n = spelt_out(5, (N - 5) / 2, false, cells, pos);
    CHECK(nc_kv_seq_keep(c, 1, cells, n, pos, &err) == 0);
    float *b = next_logits(c, 1, n);
    CHECK(max_diff(a, b) == 0);
    free(a);
    free(b);
    /* 3. sinks: 4 first cells and the recent ones at their places; the default share is a quarter
     * of the window; on contiguous positions that is the shift keeping the sinks, bit for bit */
    prefill(c, 0);
    CHECK(nc_kv_seq_sink(c, 0, 4, 0, &err) == 0 && nc_kv_seq_len(c, 0) == N - (N - 4) / 4);
    a = next_logits(c, 0, N - (N - 4) / 4);
    prefill(c, 1);
    n = spelt_out(4, (N - 4) / 4, true, cells, pos);
    CHECK(nc_kv_seq_keep(c, 1, cells, n, pos, &err) == 0);
    b = next_logits(c, 1, n);
    CHECK(max_diff(a, b) == 0);
    free(b);
    prefill(c, 2);
    CHECK(nc_kv_seq_shift(c, 2, 4, (N - 4) / 4, &err) == 0);
    b = next_logits(c, 2, n);
    CHECK(max_diff(a, b) == 0);
    free(a);
    free(b);
    /* refusals name what is wrong */
    prefill(c, 0);
    CHECK(nc_kv_seq_shift(c, 0, 50, 20, &err) == -1 && strstr(err.msg, "does not fit") != NULL);
    CHECK(nc_kv_seq_shift(c, 0, N - 1, 0, &err) == -1 && strstr(err.msg, "none to drop") != NULL);
    CHECK(nc_kv_seq_sink(c, 0, 4, -2, &err) == -1 && strstr(err.msg, "attention sinks") != NULL);
    CHECK(nc_kv_seq_sink(c, 7, 4, 0, &err) == -1 && strstr(err.msg, "sequence id 7") != NULL);
    CHECK(nc_kv_seq_len(c, 0) == N);
    nc_context_free(c);
}

/* The policy as generation applies it: the prompt's share resolved (BOS on top), the checks. */
static void test_make_room(void) {
    nc_err err;
    nc_context *c = context(N, 1);
    int32_t bos = nc_token_bos(model);
    CHECK(tok[0] == bos);
    nc_ctx_policy shift = {.mode = NC_CTX_SHIFT, .n_keep = 2}, sinks = {.mode = NC_CTX_SINKS, .n_sink = 4};
    prefill(c, 0);
    /* keep BOS + 2 of a 10-token prompt, drop half of the other 57 */
    CHECK(nc_kv_seq_make_room(c, 0, &shift, 10, &err) == 28 && nc_kv_seq_len(c, 0) == N - 28);
    prefill(c, 0);
    CHECK(nc_kv_seq_make_room(c, 0, &sinks, 10, &err) == 14 && nc_kv_seq_len(c, 0) == N - 14);
    prefill(c, 0);
    nc_ctx_policy stop = {.mode = NC_CTX_STOP};
    CHECK(nc_kv_seq_make_room(c, 0, &stop, 10, &err) == 0 && nc_kv_seq_len(c, 0) == N);
    /* the whole prompt kept leaves too little of the context */
    shift.n_keep = -1;
    CHECK(nc_kv_seq_make_room(c, 0, &shift, N - 1, &err) == -1 && strstr(err.msg, "n_keep") != NULL);
    CHECK(nc_ctx_policy_check(&shift, N, N - 2, true, &err) == 0);
    CHECK(nc_ctx_policy_check(&shift, N, N - 1, true, &err) == -1);
    shift.n_keep = -2;
    CHECK(nc_ctx_policy_check(&shift, N, 5, true, &err) == -1 && strstr(err.msg, "n_keep: -2") != NULL);
    sinks.n_sink = 0;
    CHECK(nc_ctx_policy_check(&sinks, N, 5, true, &err) == -1 && strstr(err.msg, "n_sink") != NULL);
    sinks.n_sink = N;
    CHECK(nc_ctx_policy_check(&sinks, N, 5, true, &err) == -1 && strstr(err.msg, "n_sink") != NULL);
    sinks.n_sink = N - 1;
    CHECK(nc_ctx_policy_check(&sinks, N, 5, true, &err) == 0);
    nc_ctx_policy odd = {.mode = (nc_ctx_mode)7};
    CHECK(nc_ctx_policy_check(&odd, N, 5, true, &err) == -1 && strstr(err.msg, "unknown mode 7") != NULL);
    CHECK(nc_kv_seq_len(c, 0) == N);
    nc_context_free(c);
}

/* ---- generation under a policy ---- */

static const int32_t PROMPT[5] = {1, 403, 407, 261, 378}; /* "Once upon a time" */
enum { CTX = 32 };

static nc_gen_params greedy(int32_t max_tokens, nc_ctx_policy policy) {
    nc_gen_params gp = {.stop = {.max_tokens = max_tokens}, .context = policy};
    nc_sampler_params_default(&gp.sampling);
    gp.sampling.temp = 0;
    gp.sampling.ignore_eos = true;
    return gp;
}

static int argmax_no_eog(const float *logits) {
    int best = -1;
    for (int i = 0; i < n_vocab; i++)
        if (!nc_token_is_eog(model, i) && (best < 0 || logits[i] > logits[best])) best = i;
    return best;
}

/* The same greedy decode driven by hand: prompt and tokens fed one by one, and when the cache is
 * full the policy's move made explicitly (shift: BOS kept, half of the other 31 dropped; sinks:
 * 4 kept, a quarter of the 28 after them). Returns how many of g's tokens it reproduces. */
static int32_t replay(const nc_gen_sample *g, bool sinks) {
    nc_context *c = NULL;
    nc_err err;
    nc_context_params cp = {.n_ctx = CTX, .n_threads = 2};
    if (nc_context_new(&c, model, &cp, &err)) return -1;
    nc_batch_entry b[5];
    for (int i = 0; i < 5; i++) b[i] = (nc_batch_entry){PROMPT[i], i, 0, i == 4};
    int32_t same = 0;
    if (nc_forward(c, b, 5, &err) == 0)
        for (; same < g->n_tokens && argmax_no_eog(nc_logits(c, 4 * (same == 0))) == g->tokens[same]; same++) {
            if (nc_kv_seq_len(c, 0) == CTX &&
                (sinks ? nc_kv_seq_sink(c, 0, 4, 7, &err) : nc_kv_seq_shift(c, 0, 1, 15, &err)))
                break;
            nc_batch_entry e = {g->tokens[same], nc_kv_seq_len(c, 0), 0, true};
            if (same + 1 < g->n_tokens && nc_forward(c, &e, 1, &err)) break;
        }
    nc_context_free(c);
    return same;
}

static int abort_at_200(const nc_gen_event *ev, void *user) {
    *(int32_t *)user = ev->step + 1;
    return ev->step + 1 == 200;
}

static void test_generate(void) {
    nc_err err;
    nc_context *c = context(CTX, 2);
    nc_gen_result stop, shift, sinks, two;
    /* without a policy: 27 tokens fed and one more drawn fill the 32 cells, then "context full" */
    nc_gen_params gp = greedy(100, (nc_ctx_policy){.mode = NC_CTX_STOP});
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, NULL, NULL, &stop, &err) == 0);
    CHECK(stop.samples[0].n_tokens == CTX - 5 + 1 && stop.samples[0].finish == NC_FINISH_CONTEXT);
    CHECK(stop.samples[0].n_evictions == 0);
    /* context shift: all 100 tokens; the first 28 are those made before the first shift, which
     * cannot change them; shifts before feeds 28, 43, 58, 73 and 88, 15 tokens each */
    gp = greedy(100, (nc_ctx_policy){.mode = NC_CTX_SHIFT, .n_keep = 0});
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, NULL, NULL, &shift, &err) == 0);
    const nc_gen_sample *g = &shift.samples[0];
    CHECK(g->n_tokens == 100 && g->finish == NC_FINISH_LENGTH);
    CHECK(memcmp(g->tokens, stop.samples[0].tokens, sizeof(int32_t) * (CTX - 5 + 1)) == 0);
    CHECK(g->n_evictions == 5 && g->n_evicted == 75);
    CHECK_MSG(replay(g, false) == 100, "a hand-driven shift reproduces %d of 100 tokens", replay(g, false));
    /* attention sinks: 4 sinks, 7 dropped every 7 tokens after the first 28 */
    gp = greedy(100, (nc_ctx_policy){.mode = NC_CTX_SINKS, .n_sink = 4});
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, NULL, NULL, &sinks, &err) == 0);
    g = &sinks.samples[0];
    CHECK(g->n_tokens == 100 && g->finish == NC_FINISH_LENGTH);
    CHECK(memcmp(g->tokens, stop.samples[0].tokens, sizeof(int32_t) * (CTX - 5 + 1)) == 0);
    CHECK(g->n_evictions == 11 && g->n_evicted == 77);
    CHECK_MSG(replay(g, true) == 100, "hand-driven sinks reproduce %d of 100 tokens", replay(g, true));
    /* two samples share the prompt's blocks; each shift copies what it moves */
    gp = greedy(100, (nc_ctx_policy){.mode = NC_CTX_SHIFT, .n_keep = 0});
    gp.n_samples = 2;
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, NULL, NULL, &two, &err) == 0);
    for (int i = 0; i < 2; i++)
        CHECK(two.samples[i].n_tokens == 100 && !memcmp(two.samples[i].tokens, shift.samples[0].tokens, 400));
    nc_gen_result_free(&stop);
    nc_gen_result_free(&shift);
    nc_gen_result_free(&sinks);
    nc_gen_result_free(&two);
    /* the samplers see the whole text, not what the cache kept: no bigram of prompt and output
     * repeats anywhere, across the shifts */
    gp = greedy(100, (nc_ctx_policy){.mode = NC_CTX_SHIFT, .n_keep = 0});
    gp.sampling.no_repeat_ngram = 2;
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, NULL, NULL, &shift, &err) == 0);
    int32_t all[105];
    memcpy(all, PROMPT, sizeof PROMPT);
    memcpy(all + 5, shift.samples[0].tokens, 400);
    int repeats = 0;
    for (int i = 0; i + 1 < 105; i++)
        for (int j = i + 1; j + 1 < 105; j++) repeats += all[i] == all[j] && all[i + 1] == all[j + 1];
    CHECK_MSG(repeats == 0, "%d bigrams repeat", repeats);
    nc_gen_result_free(&shift);
    /* no max_tokens: it goes on past the context until the caller stops it */
    int32_t made = 0;
    gp = greedy(0, (nc_ctx_policy){.mode = NC_CTX_SINKS, .n_sink = 4});
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, abort_at_200, &made, &shift, &err) == -1 && made == 200);
    CHECK(strstr(err.msg, "aborted") != NULL);
    /* policies that cannot run are refused before anything is computed */
    gp = greedy(100, (nc_ctx_policy){.mode = NC_CTX_SINKS, .n_sink = 0});
    CHECK(nc_generate(c, model, PROMPT, 5, &gp, NULL, NULL, &shift, &err) == -1);
    CHECK(strstr(err.msg, "context policy: n_sink") != NULL);
    gp = greedy(100, (nc_ctx_policy){.mode = NC_CTX_SHIFT, .n_keep = -1});
    int32_t long_prompt[CTX - 1];
    for (int i = 0; i < CTX - 1; i++) long_prompt[i] = i ? 3 + i : PROMPT[0];
    CHECK(nc_generate(c, model, long_prompt, CTX - 1, &gp, NULL, NULL, &shift, &err) == -1);
    CHECK(strstr(err.msg, "context policy: n_keep") != NULL);
    nc_context_free(c);
}

int main(void) {
    test_pure();
    if (!(model = test_load_model("models/stories260K/stories260K.gguf"))) return test_summary("test_kv_policy");
    nc_model_info info;
    nc_model_get_info(model, &info);
    n_vocab = info.n_vocab;
    tok[0] = nc_token_bos(model);
    for (int i = 1; i <= N; i++) tok[i] = 3 + (i * 37 + i / 7) % (n_vocab - 3);
    test_model();
    test_make_room();
    test_generate();
    nc_model_free(model);
    return test_summary("test_kv_policy");
}
