/* Rotary frequencies of every scaling kind (model_rope_freqs) against references: Llama 3's
 * against the per-frequency factors llama.cpp's converter wrote into shared/archs/llama3's GGUF
 * from the same config.json; YaRN (gpt-oss-20b's parameters, with and without rounding the
 * correction range) and LongRoPE (made-up factors) against values from transformers'
 * modeling_rope_utils formulas evaluated in float64 in Python. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "model/model.h"
#include "tensor/quant.h"
#include "test.h"

static double rel(double a, double b) { return fabs(a - b) / fabs(b); }

static void test_llama3(const char *shared) {
    char path[4096];
    snprintf(path, sizeof path, "%s/archs/llama3/llama3-f16.gguf", shared);
    gguf_file *f;
    nc_err err;
    if (gguf_open(&f, path, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        CHECK(0);
        return;
    }
    const gguf_tensor *t = gguf_find_tensor(f, "rope_freqs.weight");
    CHECK(t && t->ne[0] == 8);
    float div[8];
    quant_dequantize_row(t->type, t->data, div, 8);
    /* config.json: rope_theta 500000, factor 8, low 1, high 4, original context 8192; head_dim 16 */
    model_rope r = {.base = 500000, .kind = ROPE_LLAMA3, .factor = 8, .orig_ctx = 8192, .low_freq_factor = 1,
                    .high_freq_factor = 4};
    double ours[8], worst = 0;
    CHECK(model_rope_freqs(&r, 16, 2048, ours) == 1.0);
    for (int i = 0; i < 8; i++) worst = fmax(worst, rel(ours[i], pow(500000, -2.0 * i / 16) / div[i]));
    CHECK_MSG(worst < 1e-6, "llama3 rope vs the GGUF's rope_freqs: relative %g", worst);
    /* the file's factors as divisors of the default rope give the same */
    model_rope g = {.base = 500000, .kind = ROPE_DEFAULT, .freq_factors = div};
    double viaf[8];
    model_rope_freqs(&g, 16, 2048, viaf);
    for (int i = 0; i < 8; i++) CHECK(rel(viaf[i], ours[i]) < 1e-6);
    gguf_close(f);
}

static void test_yarn(void) {
    static const int idx[] = {0, 5, 10, 15, 20, 31};
    static const double exact[] = {1.0, 0.15532298948448497, 0.019335001126540362, 0.0010526021013863359,
                                   1.818833668168956e-05, 3.0235114281192144e-07};
    static const double rounded[] = {1.0, 0.15532298948448497, 0.019450967544057934, 0.001206130969041873,
                                     1.818833668168956e-05, 3.0235114281192144e-07};
    for (int t = 0; t < 2; t++) {
        model_rope r = {.base = 150000, .kind = ROPE_YARN, .factor = 32, .orig_ctx = 4096, .beta_fast = 32,
                        .beta_slow = 1, .exact_range = t == 0};
        double f[32];
        double scale = model_rope_freqs(&r, 64, 4096, f);
        CHECK(rel(scale, 1.3465735902799727) < 1e-12);
        for (int k = 0; k < 6; k++)
            CHECK_MSG(rel(f[idx[k]], (t == 0 ? exact : rounded)[k]) < 1e-9, "yarn (%s range) frequency %d: %.17g",
                      t == 0 ? "exact" : "rounded", idx[k], f[idx[k]]);
    }
}

static void test_longrope(void) {
    float shortf[48], longf[48];
    for (int i = 0; i < 48; i++) {
        shortf[i] = 1.0f + 0.01f * (float)i;
        longf[i] = 1.0f + 0.5f * (float)i;
    }
    model_rope r = {.base = 10000, .kind = ROPE_LONGROPE, .factor = 131072.0 / 4096, .orig_ctx = 4096,
                    .freq_factors = shortf, .long_factors = longf};
    static const int idx[] = {0, 7, 30, 47};
    static const double want_short[] = {1.0, 0.2439399266993025, 0.002432521277052599, 8.241684752575433e-05};
    static const double want_long[] = {1.0, 0.05800349368183415, 0.00019764235376052369, 4.94501085154526e-06};
    double f[48];
    /* short factors up to the original context, long ones past it (the context size decides) */
    for (int pass = 0; pass < 2; pass++) {
        double scale = model_rope_freqs(&r, 96, pass ? 8192 : 4096, f);
        CHECK(rel(scale, 1.1902380714238083) < 1e-12);
        for (int k = 0; k < 4; k++) CHECK(rel(f[idx[k]], (pass ? want_long : want_short)[k]) < 1e-6);
    }
}

int main(void) {
    const char *shared = getenv("SHARED");
    test_llama3(shared ? shared : "../shared");
    test_yarn();
    test_longrope();
    return test_summary("rope");
}
