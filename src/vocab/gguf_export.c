/* A Hugging Face directory's vocabulary as the tokenizer.ggml.* metadata llama.cpp's
 * convert_hf_to_gguf.py writes for it (see vocab_write_gguf in vocab.h). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf_write.h"
#include "vocab/vocab_impl.h"

/* The converter pads a vocabulary shorter than config.json's vocab_size with unused tokens of
 * these texts (its get_vocab_base / _create_vocab_sentencepiece). */
#define PAD_FMT "[PAD%d]"
#define PAD_SCORE -1000.0f

typedef struct texts {
    const char **s;
    size_t *len;
    char *pads; /* the padding tokens' texts, 16 bytes each */
} texts;

static void texts_free(texts *t) {
    free(t->s);
    free(t->len);
    free(t->pads);
}

/* Token texts, padded to n. */
static int token_texts(const vocab *v, int32_t n, texts *t) {
    t->s = calloc((size_t)n, sizeof *t->s);
    t->len = calloc((size_t)n, sizeof *t->len);
    t->pads = calloc((size_t)(n - v->n_tokens) + 1, 16);
    if (!t->s || !t->len || !t->pads) return -1;
    for (int32_t i = 0; i < n; i++) {
        if (i < v->n_tokens) {
            t->s[i] = vtok_text(v, i);
            t->len[i] = v->tok[i].text_len;
        } else {
            char *p = t->pads + (size_t)(i - v->n_tokens) * 16;
            t->len[i] = (size_t)snprintf(p, 16, PAD_FMT, i);
            t->s[i] = p;
        }
    }
    return 0;
}

static int by_rank(const void *a, const void *b) {
    int32_t x = ((const bpe_merge *)a)->rank, y = ((const bpe_merge *)b)->rank;
    return (x > y) - (x < y);
}

/* The merges in rank order as "left right" (tokenizer.json's pairs, joined by a space). */
static int write_merges(const vocab *v, gguf_out *o) {
    bpe_merge *m = malloc(sizeof *m * ((size_t)v->n_merges + 1));
    const char **s = calloc((size_t)v->n_merges + 1, sizeof *s);
    size_t *len = calloc((size_t)v->n_merges + 1, sizeof *len);
    int n = 0, rc = -1;
    if (!m || !s || !len) goto out;
    for (size_t i = 0; v->merges && i <= v->merge_mask; i++)
        if (v->merges[i].left >= 0) m[n++] = v->merges[i];
    qsort(m, (size_t)n, sizeof *m, by_rank);
    for (int i = 0; i < n; i++) {
        const vocab_token *l = &v->tok[m[i].left], *r = &v->tok[m[i].right];
        char *j = malloc(l->text_len + r->text_len + 2);
        if (!j) goto out;
        memcpy(j, vtok_text(v, m[i].left), l->text_len);
        j[l->text_len] = ' ';
        memcpy(j + l->text_len + 1, vtok_text(v, m[i].right), r->text_len + 1);
        s[i] = j;
        len[i] = l->text_len + r->text_len + 1;
    }
    rc = gguf_out_kv_arr_str(o, "tokenizer.ggml.merges", s, len, (uint64_t)n);
out:
    for (int i = 0; s && i < n; i++) free((char *)s[i]);
    free(s);
    free(len);
    free(m);
    return rc;
}

/* SentencePiece-style BPE from tokenizer.json alone: the converter's LlamaHfVocab gives every
 * token the score -1000 and the control type to the tokenizer's special ids (the unknown token
 * among them), keeping byte and user-defined tokens. */
static uint8_t llama_hf_type(const vocab *v, const hf_side *side, int32_t id) {
    static const char *const kinds[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
    uint8_t t = v->tok[id].file_type;
    if (t == VOCAB_TT_CONTROL || t == VOCAB_TT_UNKNOWN) return VOCAB_TT_CONTROL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && t == VOCAB_TT_NORMAL; i++)
        if (hf_side_token_id(v, side, kinds[i]) == id) return VOCAB_TT_CONTROL;
    return t;
}

/* Scores (SentencePiece kinds only) and token types, padded to n. */
static int write_scores_types(const vocab *v, const hf_side *side, int32_t n, gguf_out *o) {
    float *score = malloc(sizeof *score * (size_t)n);
    int32_t *type = malloc(sizeof *type * (size_t)n);
    int rc = -1;
    bool hf_spm = v->kind == VOCAB_SPM_BPE;
    if (score && type) {
        for (int32_t i = 0; i < n; i++) {
            score[i] = i < v->n_tokens && !hf_spm ? v->tok[i].score : PAD_SCORE;
            type[i] = i >= v->n_tokens ? VOCAB_TT_UNUSED : hf_spm ? llama_hf_type(v, side, i) : v->tok[i].file_type;
        }
        rc = (v->kind != VOCAB_BPE && gguf_out_kv_arr_f32(o, "tokenizer.ggml.scores", score, (uint64_t)n)) ||
             gguf_out_kv_arr_i32(o, "tokenizer.ggml.token_type", type, (uint64_t)n) ? -1 : 0;
    }
    free(score);
    free(type);
    return rc;
}

/* The special ids SpecialVocab looks for, under their GGUF key names (llama.cpp spells
 * "seperator"). */
static int write_special_ids(const vocab *v, const hf_side *side, gguf_out *o) {
    static const char *const kinds[][2] = {{"bos", "bos"}, {"eos", "eos"}, {"unk", "unknown"}, {"sep", "seperator"},
                                           {"pad", "padding"}, {"cls", "cls"}, {"mask", "mask"}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        int32_t id = hf_side_token_id(v, side, kinds[i][0]);
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", kinds[i][1]);
        if (id >= 0 && gguf_out_kv_u32(o, key, (uint32_t)id)) return -1;
    }
    static const char *const flags[] = {"add_bos_token", "add_eos_token"};
    for (size_t i = 0; i < 2; i++) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(side->tok_config, flags[i]);
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.%s", flags[i]);
        if (cJSON_IsBool(b) && gguf_out_kv_bool(o, key, cJSON_IsTrue(b))) return -1;
    }
    return 0;
}

int vocab_write_gguf(const vocab *v, const char *dir, int32_t n_vocab, bool no_space_prefix, gguf_out *o, nc_err *err) {
    const char *pre = v->kind == VOCAB_BPE ? vocab_pre_name(v) : "default";
    if (!strcmp(pre, "custom"))
        return nc_fail(err, "%s/tokenizer.json: the pre-tokenizer matches no family llama.cpp knows, so no "
                            "tokenizer.ggml.pre can name it", dir);
    int32_t n = n_vocab > v->n_tokens ? n_vocab : v->n_tokens;
    hf_side side;
    if (hf_side_load(&side, dir, err)) return -1;
    texts t = {0};
    const char *model = v->kind == VOCAB_BPE ? "gpt2" : "llama";
    int rc = token_texts(v, n, &t) || gguf_out_kv_str(o, "tokenizer.ggml.model", model, strlen(model)) ||
             gguf_out_kv_str(o, "tokenizer.ggml.pre", pre, strlen(pre)) ||
             gguf_out_kv_arr_str(o, "tokenizer.ggml.tokens", t.s, t.len, (uint64_t)n) ||
             write_scores_types(v, &side, n, o) || (v->kind == VOCAB_BPE && write_merges(v, o)) ||
             write_special_ids(v, &side, o) ||
             /* llama.cpp assumes the prefix for SentencePiece: only its absence is said */
             (v->kind == VOCAB_SPM && (!v->add_space_prefix || no_space_prefix) &&
              gguf_out_kv_bool(o, "tokenizer.ggml.add_space_prefix", false))
                 ? nc_fail(err, "out of memory")
                 : 0;
    texts_free(&t);
    hf_side_free(&side);
    return rc;
}
