/* The GPU forward pass through the public API (stories260K), what the golden records do not
 * reach: the CPU pass's logits for the same tokens (within f32 rounding); a prefix taken over from
 * the cache (a whole block shared, 43 cells copied on the device) giving the same bits as
 * computing it, and so does a cache saved from the GPU and loaded into another context's; every
 * cell moved 1000 positions later (the keys turned on the device) leaving the next token's logits
 * where they were. All of it with every layer on the GPU and with the layers split between the
 * CPU and the GPU. Emulated in make test; on a GPU with make cuda (skipped, saying so, without
 * one). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nucleus.h"
#include "test.h"

static float max_diff(const float *a, const float *b, int n) {
    float d = 0;
    for (int i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
    return d;
}

/* Every check with the last n_gpu layers on the GPU (-1: all of them). */
static void check_split(nc_model *m, int32_t n_gpu) {
    nc_model_info info;
    nc_model_get_info(m, &info);
    nc_err err;
    enum { N = 300 };
    int V = info.n_vocab;
    int32_t tok[N + 1];
    for (int i = 0; i <= N; i++) tok[i] = 1 + (i * 37 + i / 7) % (V - 1);
    nc_batch_entry b[N];
    for (int i = 0; i < N; i++) b[i] = (nc_batch_entry){tok[i], i, 0, i == N - 1};
    float *ref = malloc(sizeof(float) * V), *cpu = malloc(sizeof(float) * V);

    nc_context *c;
    nc_context_params p = {.n_ctx = 1024, .n_seq_max = 3, .n_threads = 2, .n_gpu_layers = n_gpu};
    CHECK(nc_context_new(&c, m, &p, &err) == 0);
    printf("device: %s\n", nc_context_device(c));
    CHECK(nc_forward(c, b, N, &err) == 0);
    memcpy(ref, nc_logits(c, N - 1), sizeof(float) * V);

    nc_context *cc; /* the CPU's logits for the same tokens */
    nc_context_params pc = p;
    pc.n_gpu_layers = 0;
    CHECK(nc_context_new(&cc, m, &pc, &err) == 0);
    CHECK(nc_forward(cc, b, N, &err) == 0);
    memcpy(cpu, nc_logits(cc, N - 1), sizeof(float) * V);
    nc_context_free(cc);
    CHECK_MSG(max_diff(ref, cpu, V) < 1e-3f, "GPU (%d layers) and CPU logits differ by %g", n_gpu, max_diff(ref, cpu, V));
    /* another sequence takes the first 299 from the cache: the same bits for the last token */
    CHECK(nc_kv_seq_reuse_prefix(c, 1, tok, N - 1) == N - 1);
    nc_batch_entry last = {tok[N - 1], N - 1, 1, true};
    CHECK(nc_forward(c, &last, 1, &err) == 0);
    CHECK_MSG(max_diff(nc_logits(c, 0), ref, V) == 0, "prefix reuse moved logits by %g", max_diff(nc_logits(c, 0), ref, V));

    /* the first 299 cells saved from the GPU and loaded into a fresh context's GPU: the same bits */
    char kvpath[] = "/tmp/nucleus-gpu-kv-XXXXXX";
    int fd = mkstemp(kvpath);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    CHECK(nc_kv_seq_save(c, 0, N - 1, kvpath, NULL, &err) == 0);
    nc_context *c2;
    nc_kv_file *f = NULL;
    CHECK(nc_context_new(&c2, m, &p, &err) == 0);
    CHECK(nc_kv_file_open(&f, c2, kvpath, &err) == 0);
    CHECK(f && nc_kv_file_load(f, 0, N - 1, &err) == 0);
    nc_kv_file_close(f);
    last.seq = 0;
    CHECK(nc_forward(c2, &last, 1, &err) == 0);
    CHECK_MSG(max_diff(nc_logits(c2, 0), ref, V) == 0, "a saved and loaded cache moved logits by %g",
              max_diff(nc_logits(c2, 0), ref, V));
    nc_context_free(c2);
    unlink(kvpath);

    /* every cell 1000 positions later: the next token's logits stay, to the f16 keys' rounding */
    nc_batch_entry next = {tok[N], N, 1, true};
    CHECK(nc_forward(c, &next, 1, &err) == 0);
    memcpy(ref, nc_logits(c, 0), sizeof(float) * V);
    nc_kv_seq_truncate(c, 1, N);
    int32_t cells[N], pos[N];
    for (int i = 0; i < N; i++) cells[i] = i, pos[i] = i + 1000;
    CHECK(nc_kv_seq_keep(c, 1, cells, N, pos, &err) == 0);
    next.pos = N + 1000;
    CHECK(nc_forward(c, &next, 1, &err) == 0);
    float d = max_diff(nc_logits(c, 0), ref, V);
    CHECK_MSG(d < 2e-2f, "shifted by 1000: logits moved by %g", d);

    nc_context_free(c);
    free(ref), free(cpu);
}

int main(void) {
    const char *shared = getenv("SHARED");
    char path[512];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", shared ? shared : "../shared");
    nc_err err;
    nc_model *m;
    if (nc_model_load(&m, path, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    nc_context *c;
    nc_context_params p = {.n_ctx = 64, .n_gpu_layers = -1};
    if (nc_context_new(&c, m, &p, &err)) {
        printf("SKIPPED: no GPU: %s\n", err.msg);
        nc_model_free(m);
        return test_summary("test_gpu_forward");
    }
    nc_context_free(c);
    check_split(m, -1);
    check_split(m, 3); /* layers 0-1 on the CPU, 2-4 on the GPU: each its part of the cache */
    nc_model_free(m);
    return test_summary("test_gpu_forward");
}
