#include "quantize/mix.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "format/ggml_types.h"

static const qz_ftype ftypes[] = {
    {"F32", 0, GGML_TYPE_F32, "32-bit floats"},
    {"F16", 1, GGML_TYPE_F16, "16-bit floats"},
    {"BF16", 32, GGML_TYPE_BF16, "bfloat16"},
    {"Q8_0", 7, GGML_TYPE_Q8_0, "8.5 bits per weight"},
    {"Q4_0", 2, GGML_TYPE_Q4_0, "4.5 bpw"},
    {"Q4_1", 3, GGML_TYPE_Q4_1, "5.0 bpw"},
    {"Q5_0", 8, GGML_TYPE_Q5_0, "5.5 bpw"},
    {"Q5_1", 9, GGML_TYPE_Q5_1, "6.0 bpw"},
    {"Q3_K_S", 11, GGML_TYPE_Q3_K, "Q3_K"},
    {"Q3_K_M", 12, GGML_TYPE_Q3_K, "Q3_K, attn_v Q4_K/Q5_K, attn_output and ffn_down Q4_K"},
    {"Q3_K_L", 13, GGML_TYPE_Q3_K, "Q3_K, attn_v, attn_output and ffn_down Q5_K"},
    {"Q4_K_S", 14, GGML_TYPE_Q4_K, "Q4_K, attn_v of layers 0-3 Q5_K"},
    {"Q4_K_M", 15, GGML_TYPE_Q4_K, "Q4_K, some attn_v and ffn_down Q6_K"},
    {"Q5_K_S", 16, GGML_TYPE_Q5_K, "Q5_K"},
    {"Q5_K_M", 17, GGML_TYPE_Q5_K, "Q5_K, some attn_v and ffn_down Q6_K"},
    {"Q6_K", 18, GGML_TYPE_Q6_K, "6.56 bpw"},
};
#define N_FTYPES (sizeof ftypes / sizeof ftypes[0])

const qz_ftype *qz_ftype_find(const char *name) {
    if (!strcasecmp(name, "Q3_K")) name = "Q3_K_M";
    if (!strcasecmp(name, "Q4_K")) name = "Q4_K_M";
    if (!strcasecmp(name, "Q5_K")) name = "Q5_K_M";
    for (size_t i = 0; i < N_FTYPES; i++)
        if (!strcasecmp(name, ftypes[i].name)) return &ftypes[i];
    return NULL;
}

const char *qz_ftype_names(void) {
    static char buf[256];
    if (!buf[0]) {
        size_t len = 0;
        for (size_t i = 0; i < N_FTYPES; i++)
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", i ? ", " : "", ftypes[i].name);
    }
    return buf;
}

size_t qz_ftype_count(void) { return N_FTYPES; }
const qz_ftype *qz_ftype_at(size_t i) { return i < N_FTYPES ? &ftypes[i] : NULL; }

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

bool qz_is_quantisable(const char *name, uint32_t n_dims, const uint64_t ne[4]) {
    uint32_t dims = 0;
    for (uint32_t d = 0; d < n_dims; d++)
        if (ne[d] > 1) dims = d + 1;
    if (dims < 2 || !ends_with(name, "weight")) return false;
    static const char *const kept[] = {"_norm.weight", "ffn_gate_inp.weight", "pos_embd", "token_types"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        if (strstr(name, kept[i])) return false;
    return true;
}

/* llama.cpp's choice of layers that get more bits: the first and last eighth, every third between. */
static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static uint32_t by_rules(const qz_ftype *ft, const qz_rules *r, qz_counts *c, const char *name) {
    bool k_m = ft->id == 15 || ft->id == 17, k_s4 = ft->id == 14, k3_m = ft->id == 12, k3_l = ft->id == 13;
    bool is_output = !strcmp(name, "output.weight") || (!c->has_output && !strcmp(name, "token_embd.weight"));
    bool quantised = ft->type != GGML_TYPE_F32 && ft->type != GGML_TYPE_F16 && ft->type != GGML_TYPE_BF16;
    if (is_output) {
        if (r->output_type != UINT32_MAX) return r->output_type;
        if (!r->pure && quantised) return ft->type == GGML_TYPE_Q8_0 ? GGML_TYPE_Q8_0 : GGML_TYPE_Q6_K;
    }
    if (!strcmp(name, "token_embd.weight") && r->embd_type != UINT32_MAX) return r->embd_type;
    if (r->pure || !quantised) return ft->type;
    if (strstr(name, "attn_v.weight")) {
        int i = c->i_attn_v++;
        if (k3_m) return i < 2 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
        if (k3_l) return GGML_TYPE_Q5_K;
        if (k_m && more_bits(i, c->n_attn_v)) return GGML_TYPE_Q6_K;
        if (k_s4 && i < 4) return GGML_TYPE_Q5_K;
    } else if (strstr(name, "ffn_down")) {
        int i = c->i_ffn_down++;
        if (k3_m) return i < c->n_ffn_down / 16 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
        if (k3_l) return GGML_TYPE_Q5_K;
        if (k_m && more_bits(i, c->n_ffn_down)) return GGML_TYPE_Q6_K;
        if (k_s4 && i < c->n_ffn_down / 8) return GGML_TYPE_Q5_K;
    } else if (strstr(name, "attn_output.weight")) {
        if (k3_m) return GGML_TYPE_Q4_K;
        if (k3_l) return GGML_TYPE_Q5_K;
    } else if (strstr(name, "attn_qkv.weight")) {
        if (k3_m || k3_l) return GGML_TYPE_Q4_K;
        if (ft->id == 15) return GGML_TYPE_Q5_K;
        if (ft->id == 17) return GGML_TYPE_Q6_K;
    }
    return ft->type;
}

uint32_t qz_tensor_type(const qz_ftype *ft, const qz_rules *r, qz_counts *c, const char *name, uint64_t ne0,
                        uint32_t *wanted) {
    uint32_t t = *wanted = by_rules(ft, r, c, name);
    if (ne0 % ggml_type_get(t)->block_elems == 0) return t;
    switch (t) {
    case GGML_TYPE_Q3_K: t = GGML_TYPE_IQ4_NL; break;
    case GGML_TYPE_Q4_K: t = GGML_TYPE_Q5_0; break;
    case GGML_TYPE_Q5_K: t = GGML_TYPE_Q5_1; break;
    case GGML_TYPE_Q6_K: t = GGML_TYPE_Q8_0; break;
    default: return UINT32_MAX;
    }
    return ne0 % ggml_type_get(t)->block_elems ? GGML_TYPE_F16 : t;
}
