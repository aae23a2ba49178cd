/* nucleus quantize's parts: the K-quant writers against llama-quantize's tensors of the same
 * source (shared/quants: tiny-k-f16.gguf and its Q3_K_M / Q4_K_S / Q5_K_M files), their edge cases, the
 * type rules (llama-quantize's documented mixes) and the GGUF writer read back by the reader. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/gguf_write.h"
#include "quantize/mix.h"
#include "tensor/quant.h"
#include "test.h"

static const char *shared_dir(void) { return getenv("SHARED") ? getenv("SHARED") : "../shared"; }

/* Relative RMS error of n values against x. */
static double rel_rms(const float *y, const float *x, int64_t n) {
    double e2 = 0, r2 = 0;
    for (int64_t i = 0; i < n; i++) {
        e2 += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        r2 += (double)x[i] * x[i];
    }
    return r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
}

/* Every Q3_K, Q4_K, Q5_K and Q6_K tensor of llama-quantize's files: our writer's relative RMS error on
 * the same F16 rows is at most 1.05 x that of llama-quantize's tensor (a wrong layout gives ~1.4). */
static void test_k_writers_against_llama(void) {
    static const char *const files[] = {"q3_k_m", "q4_k_s", "q5_k_m"};
    char path[512];
    nc_err err;
    gguf_file *src;
    snprintf(path, sizeof path, "%s/quants/tiny-k-f16.gguf", shared_dir());
    CHECK_MSG(gguf_open(&src, path, &err) == 0, "%s", err.msg);
    if (!src) return;
    int seen[GGML_TYPE_COUNT] = {0};
    for (size_t fi = 0; fi < 3; fi++) {
        gguf_file *f;
        snprintf(path, sizeof path, "%s/quants/tiny-k-%s.gguf", shared_dir(), files[fi]);
        CHECK_MSG(gguf_open(&f, path, &err) == 0, "%s", err.msg);
        if (!f) continue;
        for (size_t i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i), *x = gguf_find_tensor(src, t->name);
            if (t->type < GGML_TYPE_Q3_K || t->type > GGML_TYPE_Q6_K) continue;
            int64_t n = (int64_t)t->n_elems;
            float *fx = malloc(sizeof(float) * (size_t)n), *theirs = malloc(sizeof(float) * (size_t)n);
            float *ours = malloc(sizeof(float) * (size_t)n);
            uint8_t *q = malloc(quant_row_bytes(t->type, n));
            quant_dequantize_row(x->type, x->data, fx, n);
            quant_dequantize_row(t->type, t->data, theirs, n);
            CHECK(quant_quantize_row(t->type, fx, q, n));
            quant_dequantize_row(t->type, q, ours, n);
            double eo = rel_rms(ours, fx, n), et = rel_rms(theirs, fx, n);
            char buf[24];
            CHECK_MSG(eo <= 1.05 * et, "%s %s (%s): our error %.5f, llama-quantize's %.5f", files[fi], t->name,
                      ggml_type_name(t->type, buf), eo, et);
            seen[t->type]++;
            free(fx);
            free(theirs);
            free(ours);
            free(q);
        }
        gguf_close(f);
    }
    gguf_close(src);
    CHECK(seen[GGML_TYPE_Q3_K] > 0 && seen[GGML_TYPE_Q4_K] > 0 && seen[GGML_TYPE_Q5_K] > 0 && seen[GGML_TYPE_Q6_K] > 0);
}

/* Edge cases: zeros stay zeros; a constant block; one outlier among small values; only negative
 * or only positive values; small and large values (scales far below 2^-24 underflow the fp16
 * scale d, in llama.cpp's files as here). Every value finite, every block within its type's
 * error bound. */
static void test_k_writers_edges(void) {
    enum { N = 256 };
    static const uint32_t types[] = {GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    static const double bound[] = {0.25, 0.12, 0.06, 0.03};
    float x[N], y[N];
    uint8_t q[256];
    for (int ti = 0; ti < 4; ti++) {
        uint32_t t = types[ti];
        memset(x, 0, sizeof x);
        CHECK(quant_quantize_row(t, x, q, N));
        quant_dequantize_row(t, q, y, N);
        int nonzero = 0;
        for (int i = 0; i < N; i++) nonzero += y[i] != 0.0f;
        CHECK_MSG(nonzero == 0, "type %u: zeros gave %d nonzero values", t, nonzero);
        for (int c = 0; c < 6; c++) {
            unsigned s = 12345u + (unsigned)c;
            for (int i = 0; i < N; i++) {
                s = s * 1103515245u + 12345u;
                float r = (float)((s >> 8) & 0xFFFF) / 65536.0f - 0.5f;
                x[i] = c == 0 ? 0.75f : c == 1 ? (i == 77 ? 50.0f : r) : c == 2 ? -fabsf(r) - 1.0f
                     : c == 3 ? fabsf(r) + 2.0f : c == 4 ? r * 1e-3f : r * 3e4f;
            }
            CHECK(quant_quantize_row(t, x, q, N));
            quant_dequantize_row(t, q, y, N);
            int finite = 1;
            for (int i = 0; i < N; i++) finite &= isfinite(y[i]);
            double e = rel_rms(y, x, N);
            CHECK_MSG(finite && e <= bound[ti], "type %u case %d: error %.4f (bound %.2f)", t, c, e, bound[ti]);
        }
    }
}

/* The rules, as llama-quantize's defaults (mix.h): a 32-layer model's attn_v / ffn_down under
 * Q4_K_M get Q6_K in layers 0-3, 28-31 and every third from 6 (6, 9, .., 27); Q4_K_S gives attn_v of layers
 * 0-3 Q5_K and ffn_down of layers 0-3 Q5_K; output Q6_K; fallbacks for short rows. */
static void test_rules(void) {
    const qz_ftype *m = qz_ftype_find("q4_k_m"), *s = qz_ftype_find("Q4_K_S"), *q8 = qz_ftype_find("Q8_0");
    CHECK(m && s && q8 && qz_ftype_find("Q4_K") == m && !qz_ftype_find("Q3_X"));
    CHECK(m->id == 15 && s->id == 14 && q8->id == 7 && qz_ftype_find("Q5_K")->id == 17);
    qz_rules r = {.output_type = UINT32_MAX, .embd_type = UINT32_MAX};
    qz_counts c = {.n_attn_v = 32, .n_ffn_down = 32, .has_output = true};
    char want[33] = "66660060060060060060060060066666", got[33] = {0};
    uint32_t wanted;
    for (int i = 0; i < 32; i++)
        got[i] = qz_tensor_type(m, &r, &c, "blk.N.attn_v.weight", 4096, &wanted) == GGML_TYPE_Q6_K ? '6' : '0';
    CHECK_MSG(!strcmp(got, want), "Q4_K_M attn_v layers %s, want %s", got, want);
    qz_counts cs = {.n_attn_v = 32, .n_ffn_down = 32, .has_output = true};
    int q5 = 0, q5d = 0;
    for (int i = 0; i < 32; i++) q5 += qz_tensor_type(s, &r, &cs, "blk.N.attn_v.weight", 4096, &wanted) == GGML_TYPE_Q5_K;
    for (int i = 0; i < 32; i++) q5d += qz_tensor_type(s, &r, &cs, "blk.N.ffn_down.weight", 4096, &wanted) == GGML_TYPE_Q5_K;
    CHECK(q5 == 4 && q5d == 4);
    /* Q3_K_M: attn_v Q5_K in layers 0-1, then Q4_K; ffn_down Q5_K in the first 1/16, then Q4_K;
     * attn_output Q4_K; rows Q3_K cannot take fall back to IQ4_NL */
    const qz_ftype *k3 = qz_ftype_find("Q3_K");
    qz_counts c3 = {.n_attn_v = 32, .n_ffn_down = 32, .has_output = true};
    int v5 = 0, d5 = 0;
    for (int i = 0; i < 32; i++) v5 += qz_tensor_type(k3, &r, &c3, "blk.N.attn_v.weight", 4096, &wanted) == GGML_TYPE_Q5_K;
    for (int i = 0; i < 32; i++) d5 += qz_tensor_type(k3, &r, &c3, "blk.N.ffn_down.weight", 4096, &wanted) == GGML_TYPE_Q5_K;
    CHECK(k3 && k3->id == 12 && v5 == 2 && d5 == 2);
    CHECK(qz_tensor_type(k3, &r, &c3, "blk.0.attn_output.weight", 4096, &wanted) == GGML_TYPE_Q4_K);
    CHECK(qz_tensor_type(k3, &r, &c3, "blk.0.ffn_up.weight", 4096, &wanted) == GGML_TYPE_Q3_K);
    CHECK(qz_tensor_type(k3, &r, &c3, "blk.0.ffn_up.weight", 64, &wanted) == GGML_TYPE_IQ4_NL);
    CHECK(qz_tensor_type(m, &r, &c, "output.weight", 4096, &wanted) == GGML_TYPE_Q6_K);
    CHECK(qz_tensor_type(q8, &r, &c, "output.weight", 4096, &wanted) == GGML_TYPE_Q8_0);
    CHECK(qz_tensor_type(m, &r, &c, "token_embd.weight", 4096, &wanted) == GGML_TYPE_Q4_K);
    qz_counts tied = {.has_output = false};
    CHECK(qz_tensor_type(m, &r, &tied, "token_embd.weight", 4096, &wanted) == GGML_TYPE_Q6_K);
    CHECK(qz_tensor_type(m, &r, &c, "blk.0.ffn_up.weight", 64, &wanted) == GGML_TYPE_Q5_0 && wanted == GGML_TYPE_Q4_K);
    CHECK(qz_tensor_type(m, &r, &c, "output.weight", 64, &wanted) == GGML_TYPE_Q8_0);
    CHECK(qz_tensor_type(m, &r, &c, "blk.0.ffn_up.weight", 172, &wanted) == GGML_TYPE_F16);
    CHECK(qz_tensor_type(q8, &r, &c, "blk.0.ffn_up.weight", 172, &wanted) == UINT32_MAX);
    qz_rules pure = {.pure = true, .output_type = UINT32_MAX, .embd_type = GGML_TYPE_Q8_0};
    CHECK(qz_tensor_type(m, &pure, &c, "output.weight", 4096, &wanted) == GGML_TYPE_Q4_K);
    CHECK(qz_tensor_type(m, &pure, &c, "token_embd.weight", 4096, &wanted) == GGML_TYPE_Q8_0);
    uint64_t ne2[4] = {4096, 4096, 1, 1}, ne1[4] = {4096, 1, 1, 1};
    CHECK(qz_is_quantisable("blk.0.attn_q.weight", 2, ne2) && !qz_is_quantisable("blk.0.attn_norm.weight", 1, ne1));
    CHECK(!qz_is_quantisable("blk.0.attn_q.weight", 2, ne1) && !qz_is_quantisable("blk.0.ffn_norm.weight", 2, ne2));
    CHECK(!qz_is_quantisable("blk.0.ffn_gate_inp.weight", 2, ne2) && !qz_is_quantisable("blk.0.attn_q.bias", 2, ne2));
}

/* The writer's file, read back by the reader: copied and new pairs, aligned tensor data. */
static void test_writer(void) {
    char path[] = "/tmp/nc_test_quantize_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    FILE *fp = fdopen(fd, "wb");
    gguf_out *o = gguf_out_new(64);
    /* a pair as a file encodes it: key "a.b", type uint8, value 7 */
    const uint8_t raw[] = {3, 0, 0, 0, 0, 0, 0, 0, 'a', '.', 'b', GGUF_T_UINT8, 0, 0, 0, 7};
    uint64_t ne[4] = {32, 2, 1, 1}, ne1[4] = {3, 1, 1, 1};
    float w[64], v[3] = {1, 2, 3};
    for (int i = 0; i < 64; i++) w[i] = (float)i - 20.0f;
    uint8_t q[68];
    quant_quantize_row(GGML_TYPE_Q8_0, w, q, 64);
    nc_err err;
    CHECK(gguf_out_kv_raw(o, raw, sizeof raw) == 0 && gguf_out_kv_u32(o, "general.alignment", 64) == 0);
    CHECK(gguf_out_tensor(o, "v", 1, ne1, GGML_TYPE_F32, 12) == 0 && gguf_out_tensor(o, "w", 2, ne, GGML_TYPE_Q8_0, 68) == 0);
    CHECK(gguf_out_write_header(o, fp, path, &err) == 0);
    CHECK(gguf_out_write_data(o, fp, v, 12, path, &err) == 0 && gguf_out_write_data(o, fp, q, 68, path, &err) == 0);
    long size = ftell(fp);
    gguf_out_free(o);
    fclose(fp);
    gguf_file *f;
    CHECK_MSG(gguf_open(&f, path, &err) == 0, "%s", err.msg);
    if (f) {
        int64_t a;
        /* header 24 + pairs 16 + 33 + table 33 + 41 = 147 -> 192; data 12 -> 64, then 68 -> 128 */
        CHECK(size == 192 + 64 + 128 && gguf_file_size(f) == (uint64_t)size && gguf_data_offset(f) == 192);
        CHECK(gguf_alignment(f) == 64 && gguf_get_int(f, "a.b", &a, &err) == 1 && a == 7);
        const gguf_tensor *tw = gguf_find_tensor(f, "w"), *tv = gguf_find_tensor(f, "v");
        CHECK(tw && tv && tw->type == GGML_TYPE_Q8_0 && tw->data_offset % 64 == 0 && !memcmp(tw->data, q, 68));
        CHECK(tv && !memcmp(tv->data, v, 12));
        uint64_t len;
        const uint8_t *b = gguf_kv_bytes(f, 0, &len);
        CHECK(b && len == sizeof raw && !memcmp(b, raw, len));
        gguf_close(f);
    }
    remove(path);
}

int main(void) {
    test_k_writers_against_llama();
    test_k_writers_edges();
    test_rules();
    test_writer();
    return test_summary("test_quantize");
}
