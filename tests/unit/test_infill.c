/* The infill sampler stage (llama.cpp's, for fill-in-the-middle: src/sampling/infill.c) over
 * hand-made distributions of stories260K's tokens, and in a chain. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nucleus.h"
#include "sampling/sampler.h"
#include "test.h"

static nc_model *model;

/* Run the stage over ids with probabilities p (n of them); the list it leaves in c. */
static void run(cand_list *c, cand *buf, const int32_t *ids, const float *p, int n, const uint8_t *is_eog, int32_t eos) {
    for (int i = 0; i < n; i++) buf[i] = (cand){.id = ids[i], .logit = logf(p[i]), .p = p[i]};
    *c = (cand_list){.data = buf, .n = n};
    CHECK(smp_infill(c, model, is_eog, eos) == 0);
}

static void test_infill(void) {
    nc_model_info info;
    nc_model_get_info(model, &info);
    int32_t n = info.n_vocab, a = -1, b = -1, eos = nc_token_eos(model);
    uint8_t *is_eog = calloc((size_t)n, 1);
    char pa[64], pb[64];
    for (int32_t id = 0; id < n; id++) is_eog[id] = nc_token_is_eog(model, id);
    /* two text tokens, the first's text a prefix of the second's */
    for (int32_t i = 0; i < n && a < 0; i++) {
        int la = nc_token_piece(model, i, pa, sizeof pa);
        if (is_eog[i] || la < 2 || la >= (int)sizeof pa) continue;
        for (int32_t j = 0; j < n && a < 0; j++) {
            int lb = nc_token_piece(model, j, pb, sizeof pb);
            if (j != i && !is_eog[j] && lb > la && lb < (int)sizeof pb && !memcmp(pa, pb, (size_t)la)) a = i, b = j;
        }
    }
    int32_t other = -1; /* a text token that starts neither */
    for (int32_t i = n - 1; i >= 0 && other < 0; i--) {
        int lo = nc_token_piece(model, i, pb, sizeof pb);
        if (!is_eog[i] && i != a && i != b && lo > 0 && lo < (int)sizeof pb && memcmp(pa, pb, 1)) other = i;
    }
    CHECK(a >= 0 && other >= 0 && eos >= 0 && is_eog[eos]);
    cand buf[4];
    cand_list c;
    /* 3 x p(end) x n = 1.8 > p(text) 0.85: only the end */
    run(&c, buf, (int32_t[]){a, b, other, eos}, (float[]){0.30f, 0.25f, 0.30f, 0.15f}, 4, is_eog, eos);
    CHECK(c.n == 1 && c.data[0].id == eos && fabsf(c.data[0].p - 1) < 1e-6f);
    /* a and b merged into a (0.70); other (0.29) then falls under 1 / (2 + 1); the end stays */
    run(&c, buf, (int32_t[]){a, b, other, eos}, (float[]){0.40f, 0.30f, 0.29f, 0.01f}, 4, is_eog, eos);
    CHECK_MSG(c.n == 2 && c.data[0].id == a && c.data[1].id == eos, "n %d, first %d", c.n, c.data[0].id);
    CHECK(fabsf(c.data[0].p - 0.70f / 0.71f) < 1e-4f && c.probs && c.sorted);
    CHECK(fabsf(c.data[0].logit - logf(c.data[0].p)) < 1e-6f); /* the draw's softmax gives the same */
    /* two texts kept: both above 1/3 */
    run(&c, buf, (int32_t[]){a, other, eos}, (float[]){0.55f, 0.44f, 0.01f}, 3, is_eog, eos);
    CHECK(c.n == 3 && c.data[0].id == a && c.data[1].id == other);
    /* nothing as likely as 0.2: the end of text (six texts starting with six letters) */
    int32_t six[7], k = 0;
    char seen[256] = {0};
    for (int32_t i = 0; i < n && k < 6; i++) {
        int l = nc_token_piece(model, i, pb, sizeof pb);
        if (is_eog[i] || l < 1 || l >= (int)sizeof pb || seen[(unsigned char)pb[0]]) continue;
        seen[(unsigned char)pb[0]] = 1;
        six[k++] = i;
    }
    six[6] = eos;
    cand big[7];
    CHECK(k == 6);
    run(&c, big, six, (float[]){0.17f, 0.17f, 0.17f, 0.17f, 0.16f, 0.16f, 0.0001f}, 7, is_eog, eos);
    CHECK_MSG(c.n == 1 && c.data[0].id == eos, "n %d", c.n);
    free(is_eog);
    /* in a chain: "samplers": "top_k;top_p;infill", as llama.vim asks; refused without a model */
    nc_sampler_params sp;
    nc_sampler_params_default(&sp);
    sp.samplers = "top_k;top_p;infill";
    sp.top_k = 40;
    nc_sampler *smp;
    nc_err err;
    CHECK(nc_sampler_new(&smp, model, n, &sp, &err) == 0 && strstr(nc_sampler_describe(smp), "infill"));
    float *logits = calloc((size_t)n, sizeof *logits);
    logits[a] = 10;
    logits[b] = 9.5f;
    int32_t hist[1] = {1};
    int32_t tok = nc_sampler_sample(smp, logits, hist, 1, 1, NULL);
    CHECK_MSG(tok == a, "drew %d, not %d", tok, a); /* b merged into a, everything else far less likely */
    free(logits);
    nc_sampler_free(smp);
    CHECK(nc_sampler_new(&smp, NULL, n, &sp, &err) == -1 && strstr(err.msg, "infill"));
}

int main(void) {
    const char *shared = getenv("SHARED");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", shared ? shared : "../shared");
    nc_err err;
    if (nc_model_load(&model, path, &err)) {
        CHECK_MSG(0, "cannot load %s: %s", path, err.msg);
        return test_summary("test_infill");
    }
    test_infill();
    nc_model_free(model);
    return test_summary("test_infill");
}
