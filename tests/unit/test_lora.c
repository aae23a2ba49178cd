/* LoRA adapters through the public API (nc_model_add_lora; model/lora.c, the CPU backend's
 * products): adapters written here with the GGUF writer for stories260K. An adapter whose B is zero
 * or whose scale is 0 leaves every logit's bits as they were; one that fails leaves the model as it
 * was; adapters come before the first context; the fingerprint (what saved caches record) changes
 * with them; a prompt's pass and decoding give the same bits. The values against the exact
 * reference: tests/e2e/lora.sh. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf_write.h"
#include "nucleus.h"
#include "test.h"

#define E 64 /* stories260K's width */
static const int32_t PROMPT[8] = {1, 403, 407, 261, 378, 306, 397, 288};
static char dir[] = "/tmp/test_lora_XXXXXX";

/* An adapter of rank 2 on blk.0.attn_q.weight and blk.1.ffn_down.weight (172 inputs), B's values
 * times b_scale; `bad`: a third pair names a weight the model lacks. */
static const char *write_adapter(const char *name, float b_scale, bool bad) {
    static char path[4][256];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    gguf_out *o = gguf_out_new(32);
    gguf_out_kv_str(o, "general.architecture", "llama", 5);
    gguf_out_kv_str(o, "general.type", "adapter", 7);
    gguf_out_kv_str(o, "adapter.type", "lora", 4);
    gguf_out_kv_f32(o, "adapter.lora.alpha", 4.0f);
    const char *names[3] = {"blk.0.attn_q.weight", "blk.1.ffn_down.weight", "blk.1.attn_nothing.weight"};
    const int cols[3] = {E, 172, E}, rows[3] = {E, E, E}, n = bad ? 3 : 2;
    float *data[6];
    for (int i = 0; i < n; i++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "%s.lora_a", names[i]);
        snprintf(b, sizeof b, "%s.lora_b", names[i]);
        gguf_out_tensor(o, a, 2, (uint64_t[4]){cols[i], 2, 1, 1}, 0, (uint64_t)cols[i] * 2 * 4);
        gguf_out_tensor(o, b, 2, (uint64_t[4]){2, rows[i], 1, 1}, 0, (uint64_t)rows[i] * 2 * 4);
        data[2 * i] = malloc((size_t)cols[i] * 2 * 4);
        data[2 * i + 1] = malloc((size_t)rows[i] * 2 * 4);
        for (int k = 0; k < cols[i] * 2; k++) data[2 * i][k] = (float)((k * 37 % 19) - 9) / 20;
        for (int k = 0; k < rows[i] * 2; k++) data[2 * i + 1][k] = b_scale * (float)((k * 23 % 17) - 8) / 16;
    }
    FILE *fp = fopen(p, "wb");
    nc_err err;
    CHECK(fp && gguf_out_write_header(o, fp, p, &err) == 0);
    for (int i = 0; i < n; i++) {
        CHECK(gguf_out_write_data(o, fp, data[2 * i], (uint64_t)cols[i] * 8, p, &err) == 0);
        CHECK(gguf_out_write_data(o, fp, data[2 * i + 1], (uint64_t)rows[i] * 8, p, &err) == 0);
        free(data[2 * i]);
        free(data[2 * i + 1]);
    }
    if (fp) fclose(fp);
    gguf_out_free(o);
    return p;
}

/* The model's logits after the prompt (every position's, vocab 512 each), in one pass of the
 * prompt (decode: one token at a time), into out. */
static int logits_of(nc_model *m, bool decode, float *out) {
    nc_context *c;
    nc_err err;
    nc_context_params cp = {.n_ctx = 64, .n_threads = 2, .type_k = NC_CACHE_F32, .type_v = NC_CACHE_F32};
    if (nc_context_new(&c, m, &cp, &err)) {
        CHECK_MSG(0, "context: %s", err.msg);
        return -1;
    }
    nc_batch_entry b[8];
    for (int i = 0; i < 8; i++) b[i] = (nc_batch_entry){.token = PROMPT[i], .pos = i, .logits = true};
    int rc = 0;
    for (int i = 0; i < 8 && !rc; i += decode ? 1 : 8) {
        rc = nc_forward(c, b + i, decode ? 1 : 8, &err);
        for (int k = 0; !rc && k < (decode ? 1 : 8); k++) memcpy(out + (i + k) * 512, nc_logits(c, k), 512 * sizeof *out);
    }
    if (rc) CHECK_MSG(0, "forward: %s", err.msg);
    nc_context_free(c);
    return rc;
}

static nc_model *load(const char *path) {
    nc_model *m = NULL;
    nc_err err;
    if (nc_model_load(&m, path, &err)) CHECK_MSG(0, "cannot load %s: %s", path, err.msg);
    return m;
}

int main(void) {
    const char *shared = getenv("SHARED");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", shared ? shared : "../shared");
    if (!mkdtemp(dir)) return 1;
    static float base[8 * 512], got[8 * 512], dec[8 * 512];
    nc_model *m = load(path);
    if (!m || logits_of(m, false, base)) return test_summary("lora");
    nc_err err;

    /* B = 0: W x + 0 */
    CHECK(nc_model_add_lora(m, write_adapter("zero.gguf", 0, false), 1.0f, &err) == 0 && nc_model_n_lora(m) == 1);
    CHECK(logits_of(m, false, got) == 0 && !memcmp(got, base, sizeof base));
    nc_model_free(m);

    /* scale 0 */
    m = load(path);
    CHECK(nc_model_add_lora(m, write_adapter("a.gguf", 1, false), 0.0f, &err) == 0);
    CHECK(logits_of(m, false, got) == 0 && !memcmp(got, base, sizeof base));
    nc_model_free(m);

    /* a failing adapter (its last pair names no weight) changes nothing; a good one then applies */
    m = load(path);
    CHECK(nc_model_add_lora(m, write_adapter("bad.gguf", 1, true), 1.0f, &err) == -1 &&
          strstr(err.msg, "the model has no weight 'blk.1.attn_nothing.weight'") && nc_model_n_lora(m) == 0);
    CHECK(logits_of(m, false, got) == 0 && !memcmp(got, base, sizeof base));
    CHECK(nc_model_add_lora(m, write_adapter("a.gguf", 1, false), 1.0f, &err) == 0 && nc_model_n_lora(m) == 1);
    CHECK(logits_of(m, false, got) == 0 && memcmp(got, base, sizeof base) != 0);
    /* decoding one token at a time gives the prompt pass's bits */
    CHECK(logits_of(m, true, dec) == 0 && !memcmp(got, dec, sizeof got));

    /* not once a context exists; again once it is gone */
    nc_context *c;
    nc_context_params cp = {.n_ctx = 16, .n_threads = 1};
    CHECK(nc_context_new(&c, m, &cp, &err) == 0);
    CHECK(nc_model_add_lora(m, write_adapter("a.gguf", 1, false), 1.0f, &err) == -1 &&
          strstr(err.msg, "before the model's first context"));
    nc_context_free(c);
    CHECK(nc_model_add_lora(m, write_adapter("a.gguf", 1, false), -1.0f, &err) == 0 && nc_model_n_lora(m) == 2);
    /* the same adapter at -1 undoes it, up to rounding */
    CHECK(logits_of(m, false, got) == 0);
    float worst = 0;
    for (int i = 0; i < 8 * 512; i++) worst = fabsf(got[i] - base[i]) > worst ? fabsf(got[i] - base[i]) : worst;
    CHECK_MSG(worst < 1e-4f, "adapter and its negation: logits %g from the base's", worst);
    CHECK(nc_model_add_lora(m, path, 1.0f, &err) == -1 && strstr(err.msg, "not a LoRA adapter"));
    CHECK(nc_model_add_lora(m, write_adapter("a.gguf", 1, false), 0.0f / 0.0f, &err) == -1 &&
          strstr(err.msg, "LoRA scale"));
    nc_model_free(m);

    /* a saved cache records the adapters: one written with an adapter is refused without it */
    char kv[512];
    snprintf(kv, sizeof kv, "%s/seq.kv", dir);
    for (int with = 1; with >= 0; with--) {
        m = load(path);
        if (with) CHECK(nc_model_add_lora(m, write_adapter("a.gguf", 1, false), 1.0f, &err) == 0);
        cp = (nc_context_params){.n_ctx = 16, .n_threads = 1};
        CHECK(nc_context_new(&c, m, &cp, &err) == 0);
        nc_batch_entry b[2] = {{.token = 1, .pos = 0}, {.token = 403, .pos = 1, .logits = true}};
        nc_kv_file *f = NULL;
        if (with) CHECK(nc_forward(c, b, 2, &err) == 0 && nc_kv_seq_save(c, 0, 0, kv, NULL, &err) == 0);
        else CHECK(nc_kv_file_open(&f, c, kv, &err) == -1 && strstr(err.msg, "written for another model"));
        nc_kv_file_close(f);
        nc_context_free(c);
        nc_model_free(m);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return test_summary("lora");
}
