/* The batched forward pass through the public API on the real stories260K model: the batch is
 * the unit of work, so prefill, decode, mixed sequences and thread counts must all agree. */
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "test.h"
#include "test_files.h"

static char model_path[4096];

static nc_context *new_ctx(nc_model *m, int n_seq, int threads, int n_batch) {
    nc_err err;
    nc_context *c;
    nc_context_params p = {.n_ctx = 64, .n_seq_max = n_seq, .n_threads = threads, .n_batch = n_batch};
    if (nc_context_new(&c, m, &p, &err)) {
        fprintf(stderr, "context: %s\n", err.msg);
        return NULL;
    }
    return c;
}

static float max_diff(const float *a, const float *b, int n) {
    float d = 0;
    for (int i = 0; i < n; i++) d = fabsf(a[i] - b[i]) > d ? fabsf(a[i] - b[i]) : d;
    return d;
}

static nc_context *new_ctx_mode(nc_model *m, int threads, int n_batch, bool fast) {
    nc_err err;
    nc_context *c;
    nc_context_params p = {.n_ctx = 64, .n_threads = threads, .n_batch = n_batch, .fast = fast};
    if (nc_context_new(&c, m, &p, &err)) {
        fprintf(stderr, "context: %s\n", err.msg);
        return NULL;
    }
    return c;
}

/* A context longer than one span of the streaming attention (256 cells): one prefill, micro-batches
 * on 2 threads, and decoding the last tokens one by one give the same logits bit for bit. */
static void test_long_context(nc_model *m) {
    enum { N = 600 };
    nc_err err;
    nc_context *c[2] = {NULL, NULL};
    nc_context_params p1 = {.n_ctx = N, .n_threads = 1}, p2 = {.n_ctx = N, .n_threads = 2, .n_batch = 77};
    CHECK(nc_context_new(&c[0], m, &p1, &err) == 0 && nc_context_new(&c[1], m, &p2, &err) == 0);
    nc_batch_entry *b = malloc(sizeof *b * N);
    for (int i = 0; i < N; i++) b[i] = (nc_batch_entry){i ? 3 + (i * 7919) % 509 : 1, i, 0, i >= N - 3};
    CHECK(nc_forward(c[0], b, N, &err) == 0 && nc_forward(c[1], b, N - 3, &err) == 0);
    int V = 512;
    float worst = 0;
    for (int k = 0; k < 3; k++) {
        CHECK(nc_forward(c[1], &b[N - 3 + k], 1, &err) == 0);
        worst = fmaxf(worst, max_diff(nc_logits(c[1], 0), nc_logits(c[0], N - 3 + k), V));
    }
    CHECK_MSG(worst == 0, "%d cells: decode differs from prefill by %g", N, worst);
    free(b);
    nc_context_free(c[0]);
    nc_context_free(c[1]);
}

/* Log-probabilities of the logits of entry i. */
static void log_probs(const float *l, int V, double *out) {
    double mx = l[0], sum = 0;
    for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < V; i++) sum += exp(l[i] - mx);
    for (int i = 0; i < V; i++) out[i] = l[i] - mx - log(sum);
}

/* A quantised model (Q8_0: the integer kernels): in both activation modes the logits are
 * bit-identical whatever the thread count, micro-batch size, or decode versus prefill (the
 * integer path is exact per row); the fast mode moves log-probabilities by a little, not by
 * nothing and not by much. */
static void test_quantised(void) {
    nc_model *m = test_load_model("models/tinystories-656k/TinyStories-656K-Q8_0.gguf");
    if (!m) return;
    nc_err err;
    nc_model_info info;
    nc_model_get_info(m, &info);
    int V = info.n_vocab;
    enum { N = 12 };
    const int32_t toks[N] = {1, 450, 1067, 372, 263, 1121, 29892, 1058, 471, 263, 2217, 7826};
    nc_batch_entry batch[N];
    for (int i = 0; i < N; i++) batch[i] = (nc_batch_entry){toks[i] % V, i, 0, true};
    float *logits[2];
    for (int fast = 0; fast < 2; fast++) {
        nc_context *c1 = new_ctx_mode(m, 1, 512, fast), *c2 = new_ctx_mode(m, 2, 5, fast);
        CHECK(c1 && c2);
        if (!c1 || !c2) return;
        logits[fast] = malloc(sizeof(float) * N * V);
        CHECK(nc_forward(c1, batch, N, &err) == 0);
        for (int i = 0; i < N; i++) memcpy(logits[fast] + i * V, nc_logits(c1, i), sizeof(float) * V);
        CHECK(nc_forward(c2, batch, N, &err) == 0);
        float worst = 0;
        for (int i = 0; i < N; i++) worst = fmaxf(worst, max_diff(nc_logits(c2, i), logits[fast] + i * V, V));
        CHECK_MSG(worst == 0, "fast=%d: 2 threads / micro-batches of 5 differ by %g", fast, worst);
        nc_kv_seq_clear(c2, 0);
        worst = 0;
        for (int i = 0; i < N; i++) {
            CHECK(nc_forward(c2, &batch[i], 1, &err) == 0);
            worst = fmaxf(worst, max_diff(nc_logits(c2, 0), logits[fast] + i * V, V));
        }
        CHECK_MSG(worst == 0, "fast=%d: decode differs from prefill by %g", fast, worst);
        nc_context_free(c1);
        nc_context_free(c2);
    }
    double *a = malloc(sizeof(double) * V), *b = malloc(sizeof(double) * V), dev = 0;
    for (int i = 0; i < N; i++) {
        log_probs(logits[0] + i * V, V, a);
        log_probs(logits[1] + i * V, V, b);
        for (int k = 0; k < V; k++)
            if (a[k] > -10) dev = fmax(dev, fabs(a[k] - b[k]));
    }
    /* int8 on Q/K/V and gate/up: the golden test measures up to ~0.15 against the exact reference */
    CHECK_MSG(dev > 1e-4 && dev < 0.3, "fast vs default: largest log-probability change %g", dev);
    free(a);
    free(b);
    free(logits[0]);
    free(logits[1]);
    nc_model_free(m);
}

/* Quantised KV caches (Qwen3's heads of 32 dimensions: whole blocks): with each type for keys and
 * values, one prefill of 300 tokens (past a span of 256 cells) on 1 thread, micro-batches of 77 on
 * 2 threads and decoding the last tokens one by one give the same logits bit for bit, and a copy
 * of a sequence continues as the original; the logits differ from the F16 cache's (the type is in
 * force) but stay near them. A model whose head_dim is not a multiple of 32 is refused by name. */
static void test_quantised_cache(nc_model *stories) {
    enum { N = 300 };
    nc_model *m = test_load_model("archs/qwen3/qwen3-f16.gguf");
    if (!m) return;
    nc_err err;
    nc_model_info info;
    nc_model_get_info(m, &info);
    int V = info.n_vocab;
    nc_batch_entry *b = malloc(sizeof *b * (N + 2));
    for (int i = 0; i < N; i++) b[i] = (nc_batch_entry){(5 + 37 * i) % V, i, 0, i >= N - 3};
    float *f16 = malloc(sizeof(float) * V);
    nc_context *c0;
    nc_context_params p0 = {.n_ctx = N + 1, .n_threads = 1};
    CHECK(nc_context_new(&c0, m, &p0, &err) == 0 && nc_forward(c0, b, N, &err) == 0);
    memcpy(f16, nc_logits(c0, N - 1), sizeof(float) * V);
    nc_context_free(c0);
    static const nc_cache_type types[][2] = {
        {NC_CACHE_Q8_0, NC_CACHE_Q8_0}, {NC_CACHE_Q4_0, NC_CACHE_Q4_0}, {NC_CACHE_Q8_0, NC_CACHE_Q4_0}, {NC_CACHE_F32, NC_CACHE_Q8_0}};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        nc_context *c[2] = {NULL, NULL};
        nc_context_params p1 = {.n_ctx = N + 1, .n_threads = 1, .type_k = types[ti][0], .type_v = types[ti][1]};
        nc_context_params p2 = p1;
        p2.n_threads = 2;
        p2.n_batch = 77;
        p2.n_seq_max = 2;
        CHECK(nc_context_new(&c[0], m, &p1, &err) == 0 && nc_context_new(&c[1], m, &p2, &err) == 0);
        if (!c[0] || !c[1]) break;
        CHECK(nc_forward(c[0], b, N, &err) == 0 && nc_forward(c[1], b, N - 3, &err) == 0);
        float worst = 0, moved = 0;
        for (int k = 0; k < 3; k++) {
            CHECK(nc_forward(c[1], &b[N - 3 + k], 1, &err) == 0);
            worst = fmaxf(worst, max_diff(nc_logits(c[1], 0), nc_logits(c[0], N - 3 + k), V));
        }
        moved = max_diff(nc_logits(c[0], N - 1), f16, V);
        /* the copy and the original take the same next token */
        CHECK(nc_kv_seq_copy(c[1], 0, 1, &err) == 0);
        nc_batch_entry two[2] = {{7, N, 0, true}, {7, N, 1, true}};
        CHECK(nc_forward(c[1], two, 2, &err) == 0);
        float copy = max_diff(nc_logits(c[1], 0), nc_logits(c[1], 1), V);
        CHECK_MSG(worst == 0 && copy == 0 && moved > 0 && moved < 1,
                  "cache types %d/%d: decode vs prefill %g, copy vs original %g, change from F16 %g", types[ti][0],
                  types[ti][1], worst, copy, moved);
        nc_context_free(c[0]);
        nc_context_free(c[1]);
    }
    nc_context *q;
    nc_context_params pq = {.n_ctx = 8, .n_threads = 1, .type_v = NC_CACHE_Q4_0};
    CHECK(nc_context_new(&q, stories, &pq, &err) == -1 && strstr(err.msg, "head_dim 8 is not a multiple of 32") != NULL);
    pq = (nc_context_params){.n_ctx = 8, .type_k = (nc_cache_type)9};
    CHECK(nc_context_new(&q, stories, &pq, &err) == -1 && strstr(err.msg, "nc_cache_type") != NULL);
    free(f16);
    free(b);
    nc_model_free(m);
}

static nc_context *arch_ctx(nc_model *m, int n_ctx, int n_seq, int threads, int n_batch) {
    nc_err err;
    nc_context *c;
    nc_context_params p = {.n_ctx = n_ctx, .n_seq_max = n_seq, .n_threads = threads, .n_batch = n_batch};
    if (nc_context_new(&c, m, &p, &err)) {
        fprintf(stderr, "context: %s\n", err.msg);
        return NULL;
    }
    return c;
}

/* Every architecture (shared/archs: q/k norms, sliding windows kept in a ring, soft-caps, sinks,
 * experts grouped by expert, fused QKV, post-norms, ...): one prefill on 1 thread is the
 * reference; 2 threads with micro-batches of 7, token-by-token decoding, a context too small for
 * the sliding layers' ring (their window then lives in the full layout), a sequence interleaved
 * with another in every batch, and decoding again after a rollback all give the same logits bit
 * for bit. 40 tokens: past the models' window of 8 and several micro-batches. */
static void test_architectures(const char *shared) {
    /* the families of 2026 too (their files are F32): gated DeltaNet, Mamba2 and short
     * convolutions carrying their state across batches, latent attention, shared KV layers */
    static const char *const archs[] = {"llama3",    "qwen2",     "qwen3",  "qwen3moe",      "mixtral",  "gemma2",
                                        "gemma3",    "phi3",      "olmo2",  "granite",       "smollm3",  "gptoss",
                                        "qwen35",    "qwen35moe", "gemma4", "granitehybrid", "lfm2",     "deepseek2",
                                        "glm4moe",   "mistral3",  "nemotron_h", "llama4"};
    enum { N = 40 };
    for (size_t ai = 0; ai < sizeof archs / sizeof archs[0]; ai++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/archs/%s/%s-%s.gguf", shared, archs[ai], archs[ai], ai < 12 ? "f16" : "f32");
        nc_err err;
        nc_model *m;
        if (nc_model_load(&m, path, &err)) {
            fprintf(stderr, "load: %s\n", err.msg);
            CHECK(0);
            continue;
        }
        nc_model_info info;
        nc_model_get_info(m, &info);
        int V = info.n_vocab;
        nc_batch_entry batch[2 * N];
        for (int i = 0; i < N; i++) batch[i] = (nc_batch_entry){(5 + 37 * i) % V, i, 0, true};
        nc_context *c1 = arch_ctx(m, 2048, 1, 1, 512), *c2 = arch_ctx(m, 2048, 2, 2, 7), *c3 = arch_ctx(m, 64, 1, 2, 7);
        CHECK(c1 && c2 && c3);
        if (!c1 || !c2 || !c3) return;
        float *ref = malloc(sizeof(float) * N * V);
        CHECK(nc_forward(c1, batch, N, &err) == 0);
        for (int i = 0; i < N; i++) memcpy(ref + (size_t)i * V, nc_logits(c1, i), sizeof(float) * V);
        float prefill = 0, small = 0, decode = 0, mixed = 0, again = 0;
        CHECK(nc_forward(c2, batch, N, &err) == 0);
        for (int i = 0; i < N; i++) prefill = fmaxf(prefill, max_diff(nc_logits(c2, i), ref + (size_t)i * V, V));
        CHECK(nc_forward(c3, batch, N, &err) == 0);
        for (int i = 0; i < N; i++) small = fmaxf(small, max_diff(nc_logits(c3, i), ref + (size_t)i * V, V));
        nc_kv_seq_clear(c2, 0);
        for (int i = 0; i < N; i++) {
            CHECK(nc_forward(c2, &batch[i], 1, &err) == 0);
            decode = fmaxf(decode, max_diff(nc_logits(c2, 0), ref + (size_t)i * V, V));
        }
        /* back by 5 tokens and on again */
        nc_kv_seq_truncate(c2, 0, N - 5);
        CHECK(nc_forward(c2, &batch[N - 5], 5, &err) == 0);
        for (int i = 0; i < 5; i++) again = fmaxf(again, max_diff(nc_logits(c2, i), ref + (size_t)(N - 5 + i) * V, V));
        nc_kv_seq_clear(c2, 0);
        nc_kv_seq_clear(c2, 1);
        for (int i = 0; i < N; i++) {
            batch[2 * i] = (nc_batch_entry){(5 + 37 * i) % V, i, 0, true};
            batch[2 * i + 1] = (nc_batch_entry){(11 + 53 * i) % V, i, 1, true};
        }
        CHECK(nc_forward(c2, batch, 2 * N, &err) == 0);
        for (int i = 0; i < N; i++) mixed = fmaxf(mixed, max_diff(nc_logits(c2, 2 * i), ref + (size_t)i * V, V));
        CHECK_MSG(prefill == 0 && small == 0 && decode == 0 && mixed == 0 && again == 0,
                  "%s: differences from one prefill: 2 threads / micro-batches %g, small context %g, decode %g, "
                  "interleaved %g, after rollback %g", archs[ai], prefill, small, decode, mixed, again);
        free(ref);
        nc_context_free(c1);
        nc_context_free(c2);
        nc_context_free(c3);
        nc_model_free(m);
    }
}

/* The managed cache on the real model: a reused prefix gives the very bits computing it again
 * gives; moving every cell by the same distance changes nothing (attention with RoPE sees only
 * relative positions), which the keys' re-rotation must honour; a pool too small for a batch
 * refuses it whole. */
static void test_managed_cache(nc_model *m, int V) {
    enum { N = 300 };
    int32_t tok[N + 1];
    for (int i = 0; i <= N; i++) tok[i] = 1 + (i * 37 + i / 7) % (V - 1);
    nc_batch_entry *b = malloc(sizeof *b * (N + 1));
    float *ref = malloc(sizeof(float) * V);
    nc_err err;
    for (int f32 = 0; f32 < 2; f32++) {
        nc_context *c;
        nc_context_params p = {.n_ctx = 1024, .n_seq_max = 3, .n_threads = 2,
                               .type_k = f32 ? NC_CACHE_F32 : NC_CACHE_F16, .type_v = f32 ? NC_CACHE_F32 : NC_CACHE_F16};
        CHECK(nc_context_new(&c, m, &p, &err) == 0);
        for (int i = 0; i < N; i++) b[i] = (nc_batch_entry){tok[i], i, 0, i == N - 1};
        CHECK(nc_forward(c, b, N, &err) == 0);
        memcpy(ref, nc_logits(c, N - 1), sizeof(float) * V);
        /* another sequence takes the first 299 from the cache (a whole block, 43 cells copied) */
        CHECK(nc_kv_seq_reuse_prefix(c, 1, tok, N - 1) == N - 1);
        nc_batch_entry last = {tok[N - 1], N - 1, 1, true};
        CHECK(nc_forward(c, &last, 1, &err) == 0);
        CHECK_MSG(max_diff(nc_logits(c, 0), ref, V) == 0, "prefix reuse moved logits by %g",
                  max_diff(nc_logits(c, 0), ref, V));
        /* and again after both let go: the blocks stayed cached */
        nc_kv_seq_clear(c, 0);
        nc_kv_seq_clear(c, 1);
        CHECK(nc_kv_seq_reuse_prefix(c, 2, tok, N - 1) == N - 1);
        last.seq = 2;
        CHECK(nc_forward(c, &last, 1, &err) == 0);
        CHECK(max_diff(nc_logits(c, 0), ref, V) == 0);
        /* every cell 1000 positions later: the next token's logits stay (F32: to rounding of the
         * rotation; F16 keys round again after it) */
        nc_batch_entry next = {tok[N], N, 2, true};
        CHECK(nc_forward(c, &next, 1, &err) == 0);
        memcpy(ref, nc_logits(c, 0), sizeof(float) * V);
        nc_kv_seq_truncate(c, 2, N);
        int32_t cells[N], pos[N];
        for (int i = 0; i < N; i++) { cells[i] = i; pos[i] = i + 1000; }
        CHECK(nc_kv_seq_keep(c, 2, cells, N, pos, &err) == 0);
        next.pos = N + 1000;
        CHECK(nc_forward(c, &next, 1, &err) == 0);
        float d = max_diff(nc_logits(c, 0), ref, V);
        CHECK_MSG(d < (f32 ? 2e-4f : 2e-2f), "shifted by 1000 (f32 %d): logits moved by %g", f32, d);
        /* moved cells are no one's prefix: a new sequence finds only what a fresh one holds */
        nc_kv_seq_clear(c, 0);
        nc_kv_seq_clear(c, 1);
        for (int i = 0; i < 10; i++) { cells[i] = i < 4 ? i : i + 100; pos[i] = i; }
        CHECK(nc_kv_seq_keep(c, 2, cells, 10, pos, &err) == 0 && nc_kv_seq_len(c, 2) == 10);
        int32_t moved[10];
        for (int i = 0; i < 10; i++) moved[i] = tok[cells[i]];
        CHECK(nc_kv_seq_reuse_prefix(c, 0, moved, 10) == 4);
        CHECK(nc_kv_seq_keep(c, 2, (int32_t[]){3, 2}, 2, pos, &err) == -1 && strstr(err.msg, "out of order") != NULL);
        nc_context_free(c);
    }
    /* a pool of two blocks for two sequences of 1024: the second one's batch is refused whole */
    nc_context *c;
    nc_context_params p = {.n_ctx = 1024, .n_seq_max = 2, .n_threads = 1, .kv_cells = 2 * NC_KV_BLOCK};
    CHECK(nc_context_new(&c, m, &p, &err) == 0);
    for (int i = 0; i < N; i++) b[i] = (nc_batch_entry){tok[i], i, 0, false};
    CHECK(nc_forward(c, b, N, &err) == 0);
    for (int i = 0; i < N; i++) b[i].seq = 1;
    CHECK(nc_kv_blocks_needed(c, 1, N) == 2 && nc_kv_blocks_available(c) == 0);
    CHECK(nc_forward(c, b, N, &err) == -1 && strstr(err.msg, "pool is exhausted") != NULL);
    CHECK(nc_kv_seq_len(c, 1) == 0 && nc_kv_seq_len(c, 0) == N);
    nc_kv_stats st;
    nc_kv_get_stats(c, &st);
    CHECK(st.used == 2 && st.n_blocks == 2);
    nc_context_free(c);
    free(b);
    free(ref);
}

int main(void) {
    const char *shared = getenv("SHARED");
    snprintf(model_path, sizeof model_path, "%s/models/stories260K/stories260K.gguf", shared ? shared : "../shared");
    nc_err err;
    nc_model *m;
    if (nc_model_load(&m, model_path, &err)) {
        fprintf(stderr, "load: %s\n", err.msg);
        CHECK(0);
        return test_summary("forward");
    }
    nc_model_info info;
    nc_model_get_info(m, &info);
    CHECK(strcmp(info.arch, "llama") == 0);
    CHECK(info.n_vocab == 512 && info.n_layer == 5 && info.n_embd == 64 && info.n_head == 8 && info.n_head_kv == 4);
    int V = info.n_vocab;
    const int32_t a[] = {1, 403, 407, 261, 378, 306, 397, 288};
    const int32_t b[] = {1, 306, 336, 372, 348};
    enum { NA = 8, NB = 5 };

    /* reference: prefill of `a` with logits everywhere, 1 thread */
    nc_context *c1 = new_ctx(m, 1, 1, 512);
    nc_batch_entry batch[NA + NB];
    for (int i = 0; i < NA; i++) batch[i] = (nc_batch_entry){a[i], i, 0, true};
    CHECK(nc_forward(c1, batch, NA, &err) == 0);
    float *ref = malloc(sizeof(float) * NA * V);
    for (int i = 0; i < NA; i++) memcpy(ref + i * V, nc_logits(c1, i), sizeof(float) * V);
    CHECK(nc_kv_seq_len(c1, 0) == NA);

    /* token by token gives the same logits (same reduction order in matvec and matmul) */
    nc_kv_seq_clear(c1, 0);
    float worst = 0;
    for (int i = 0; i < NA; i++) {
        nc_batch_entry e = {a[i], i, 0, true};
        CHECK(nc_forward(c1, &e, 1, &err) == 0);
        worst = fmaxf(worst, max_diff(nc_logits(c1, 0), ref + i * V, V));
    }
    CHECK_MSG(worst < 1e-5f, "decode vs prefill differ by %g", worst);

    /* 2 threads and micro-batches of 3 tokens */
    nc_context *c2 = new_ctx(m, 2, 2, 3);
    CHECK(nc_forward(c2, batch, NA, &err) == 0);
    worst = 0;
    for (int i = 0; i < NA; i++) worst = fmaxf(worst, max_diff(nc_logits(c2, i), ref + i * V, V));
    CHECK_MSG(worst == 0, "2 threads / micro-batches differ by %g", worst);

    /* two sequences in one batch, interleaved, equal running them apart */
    nc_kv_seq_clear(c2, 0);
    int n = 0, ia = 0, ib = 0;
    while (ia < NA || ib < NB) {
        if (ia < NA) { batch[n++] = (nc_batch_entry){a[ia], ia, 0, ia == NA - 1}; ia++; }
        if (ib < NB) { batch[n++] = (nc_batch_entry){b[ib], ib, 1, ib == NB - 1}; ib++; }
    }
    CHECK(nc_forward(c2, batch, n, &err) == 0);
    int last_a = -1, last_b = -1;
    for (int i = 0; i < n; i++) {
        if (batch[i].seq == 0 && batch[i].logits) last_a = i;
        if (batch[i].seq == 1 && batch[i].logits) last_b = i;
    }
    CHECK(max_diff(nc_logits(c2, last_a), ref + (NA - 1) * V, V) == 0);
    CHECK(nc_logits(c2, 0) == NULL); /* no logits were asked for entry 0 */
    float *lb = malloc(sizeof(float) * V);
    memcpy(lb, nc_logits(c2, last_b), sizeof(float) * V);
    nc_context *c3 = new_ctx(m, 1, 1, 512);
    for (int i = 0; i < NB; i++) batch[i] = (nc_batch_entry){b[i], i, 0, i == NB - 1};
    CHECK(nc_forward(c3, batch, NB, &err) == 0);
    CHECK(max_diff(nc_logits(c3, NB - 1), lb, V) == 0);

    /* copying a sequence's cache: continuing either copy gives the same logits */
    CHECK(nc_kv_seq_copy(c2, 1, 0, &err) == 0);
    nc_batch_entry two[2] = {{400, NB, 0, true}, {400, NB, 1, true}};
    CHECK(nc_forward(c2, two, 2, &err) == 0);
    CHECK(max_diff(nc_logits(c2, 0), nc_logits(c2, 1), V) == 0);

    /* bad batches are refused and leave the cache as it was */
    nc_batch_entry bad[2] = {{5, NB + 1, 0, true}, {V, NB + 2, 0, true}};
    CHECK(nc_forward(c2, bad, 2, &err) == -1 && strstr(err.msg, "outside the vocabulary") != NULL);
    CHECK(nc_kv_seq_len(c2, 0) == NB + 1);
    nc_batch_entry stale = {5, 0, 0, true};
    CHECK(nc_forward(c2, &stale, 1, &err) == -1 && strstr(err.msg, "position") != NULL);
    nc_batch_entry wrong_seq = {5, 0, 7, true};
    CHECK(nc_forward(c2, &wrong_seq, 1, &err) == -1 && strstr(err.msg, "sequence") != NULL);
    CHECK(nc_forward(c2, batch, 0, &err) == -1);

    /* the context fills up with a clear error */
    nc_context *small;
    nc_context_params sp = {.n_ctx = 4, .n_threads = 1};
    CHECK(nc_context_new(&small, m, &sp, &err) == 0);
    for (int i = 0; i < 5; i++) batch[i] = (nc_batch_entry){a[i], i, 0, false};
    CHECK(nc_forward(small, batch, 5, &err) == -1 && strstr(err.msg, "full") != NULL);
    CHECK(nc_kv_seq_len(small, 0) == 0);
    nc_context_free(small);

    test_long_context(m);
    test_managed_cache(m, V);
    test_quantised();
    test_quantised_cache(m);
    test_architectures(shared ? shared : "../shared");

    free(lb);
    free(ref);
    nc_context_free(c1);
    nc_context_free(c2);
    nc_context_free(c3);
    nc_model_free(m);
    return test_summary("forward");
}
