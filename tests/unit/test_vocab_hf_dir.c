/* Tokenizers of Hugging Face directories: every shared/archs/<name>/hf against its golden prompts
 * and against the GGUF llama.cpp's converter made of it (token table, special tokens, EOG set, and
 * the tokenisation of a few hundred varied strings); SentencePiece tokenizer.model files alone;
 * the side files (tokenizer_config.json, config.json, generation_config.json, added tokens) in
 * directories written here; and malformed tokenizer.model files, each refused by name. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "test.h"
#include "test_files.h"
#include "vocab/spm_proto.h"
#include "vocab/vocab.h"
#include "vocab/vocab_impl.h" /* to flip the GGUF's add_space_prefix for gemma2 (see test_arch) */

#define MAX_IDS 8192

static const char *const ARCHS[] = {"gemma2", "gemma3",  "gptoss", "granite",  "llama3", "mixtral",
                                    "olmo2",  "phi3",    "qwen2",  "qwen3",    "qwen3moe", "smollm3"};

/* ---- files ------------------------------------------------------------------------------------- */

static void remove_file(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    remove(path);
}

static vocab *load_gguf(const char *path) {
    nc_err err;
    gguf_file *f;
    vocab *v = NULL;
    if (gguf_open(&f, path, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return NULL;
    }
    if (vocab_load(&v, f, &err)) CHECK_MSG(0, "%s", err.msg);
    gguf_close(f);
    return v;
}

static vocab *load_dir(const char *dir) {
    nc_err err;
    vocab *v = NULL;
    if (vocab_load_hf_dir(&v, dir, &err)) CHECK_MSG(0, "%s", err.msg);
    return v;
}

/* ---- helpers ----------------------------------------------------------------------------------- */

static int tokenize(const vocab *v, const char *s, size_t n, bool add, bool parse, int32_t *out) {
    nc_err err;
    int r = vocab_tokenize(v, s, n, add, parse, out, MAX_IDS, &err);
    if (r < 0) fprintf(stderr, "tokenize failed: %s\n", err.msg);
    return r > MAX_IDS ? -1 : r;
}

static void print_ids(const char *label, const int32_t *ids, int n) {
    fprintf(stderr, "  %s (%d):", label, n);
    for (int i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

static bool same_ids(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && na >= 0 && memcmp(a, b, (size_t)na * sizeof *a) == 0;
}

static bool check_ids(const char *what, const int32_t *got, int ng, const int32_t *want, int nw) {
    bool ok = same_ids(got, ng, want, nw);
    CHECK_MSG(ok, "%s", what);
    if (!ok) {
        print_ids("got ", got, ng);
        print_ids("want", want, nw);
    }
    return ok;
}

/* ---- the shared directories ---------------------------------------------------------------------- */

typedef int (*tokenize_fn)(const vocab *v, const char *s, size_t n, bool add, bool parse, int32_t *out);

/* SentencePiece's normalizer applied here, then the vocabulary's encoder without it: what
 * tokenisation gives once the encoder applies v->norm itself (texts without special tokens). */
static int tokenize_normalized(const vocab *v, const char *s, size_t n, bool add, bool parse, int32_t *out) {
    vocab *w = (vocab *)v;
    uint32_t nn = 0;
    char *norm = w->norm ? spm_norm_apply(w->norm, s, n, w->add_space_prefix, &nn) : NULL;
    if (!norm) return -1;
    spm_norm *keep = w->norm;
    bool prefix = w->add_space_prefix;
    w->norm = NULL;
    w->add_space_prefix = false;
    int r = tokenize(w, norm, nn, add, parse, out);
    w->norm = keep;
    w->add_space_prefix = prefix;
    free(norm);
    return r;
}

/* Whether the encoder applies v->norm (a text the normalizer changes tokenizes differently with
 * and without it). */
static bool encoder_normalizes(vocab *v) {
    static int32_t a[64], b[64];
    if (!v->norm) return false;
    int na = tokenize(v, "a\n\n   b", 8, false, false, a);
    spm_norm *keep = v->norm;
    v->norm = NULL;
    int nb = tokenize(v, "a\n\n   b", 8, false, false, b);
    v->norm = keep;
    return !same_ids(a, na, b, nb);
}

/* Every golden record's prompt gives its prompt_ids (with BOS when the tokenizer adds one). */
static void check_golden(const vocab *v, const char *name, tokenize_fn tok) {
    char path[1024];
    snprintf(path, sizeof path, "%s/archs/%s/golden.jsonl", test_shared_dir(), name);
    char *text = test_read_all(path, NULL);
    CHECK_MSG(text, "%s: cannot read", path);
    int records = 0;
    for (char *line = text; text && line && *line; records++) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        cJSON *r = cJSON_Parse(line);
        const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(r, "prompt");
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(r, "prompt_ids");
        CHECK_MSG(cJSON_IsString(prompt) && cJSON_IsArray(ids), "%s: record %d", path, records);
        if (cJSON_IsString(prompt) && cJSON_IsArray(ids)) {
            static int32_t want[MAX_IDS], got[MAX_IDS];
            int nw = 0;
            const cJSON *e;
            cJSON_ArrayForEach(e, ids) if (nw < MAX_IDS) want[nw++] = (int32_t)e->valuedouble;
            int ng = tok(v, prompt->valuestring, strlen(prompt->valuestring), true, false, got);
            char what[160];
            snprintf(what, sizeof what, "%s: golden prompt %d", name, records);
            check_ids(what, got, ng, want, nw);
        }
        cJSON_Delete(r);
        line = nl ? nl + 1 : NULL;
    }
    CHECK_MSG(records == 2, "%s: %d records, expected 2", path, records);
    free(text);
}

/* The same table as the GGUF: texts, types, scores (SentencePiece), special ids and flags, and
 * end-of-generation marks. */
static void check_table(const vocab *d, const vocab *g, const char *name) {
    CHECK_MSG(vocab_n_tokens(d) == vocab_n_tokens(g), "%s: %d tokens vs %d in the GGUF", name, vocab_n_tokens(d),
              vocab_n_tokens(g));
    CHECK_MSG(vocab_get_kind(d) == vocab_get_kind(g) || (vocab_get_kind(g) == VOCAB_BPE && vocab_get_kind(d) == VOCAB_BPE),
              "%s: kind %d vs %d", name, vocab_get_kind(d), vocab_get_kind(g));
    int text_diff = 0, type_diff = 0, score_diff = 0, eog_diff = 0;
    for (int32_t id = 0; id < vocab_n_tokens(d) && id < vocab_n_tokens(g); id++) {
        size_t ld, lg;
        const char *td = vocab_token_text(d, id, &ld), *tg = vocab_token_text(g, id, &lg);
        if (ld != lg || memcmp(td, tg, ld) != 0) text_diff++;
        if (vocab_token_type_of(d, id) != vocab_token_type_of(g, id)) type_diff++;
        if (vocab_get_kind(g) == VOCAB_SPM && d->tok[id].score != g->tok[id].score) score_diff++;
        if (vocab_is_eog(d, id) != vocab_is_eog(g, id)) eog_diff++;
    }
    CHECK_MSG(text_diff == 0, "%s: %d token texts differ from the GGUF's", name, text_diff);
    CHECK_MSG(type_diff == 0, "%s: %d token types differ from the GGUF's", name, type_diff);
    CHECK_MSG(score_diff == 0, "%s: %d scores differ from the GGUF's", name, score_diff);
    CHECK_MSG(eog_diff == 0, "%s: %d end-of-generation marks differ from the GGUF's", name, eog_diff);
    CHECK_MSG(vocab_bos(d) == vocab_bos(g) && vocab_eos(d) == vocab_eos(g), "%s: BOS %d EOS %d vs the GGUF's %d %d",
              name, vocab_bos(d), vocab_eos(d), vocab_bos(g), vocab_eos(g));
    CHECK_MSG(vocab_add_bos(d) == vocab_add_bos(g) && vocab_add_eos(d) == vocab_add_eos(g),
              "%s: add BOS/EOS %d/%d vs the GGUF's %d/%d", name, vocab_add_bos(d), vocab_add_eos(d), vocab_add_bos(g),
              vocab_add_eos(g));
}

/* Strings beyond tests/data/multilingual.txt: code, whitespace runs, special tokens. */
static const char *const EXTRA[] = {
    "",
    " ",
    "  ",
    "\n",
    "\n\n\n",
    "\t\t x",
    "a  b   c    d     e",
    "   leading and trailing   ",
    "line one\nline two\r\nline three\n\n",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (i = 0; i < 10; i++) { x += a[i] * b[i]; } // dot",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|endoftext|>more text",
    "<|im_end|><|im_end|>  <|im_start|>",
    "<s>hello</s>",
    "<bos><eos><start_of_turn>user\nhi<end_of_turn>\n",
    " <end_of_turn> x",
    "<pad><unk>",
    "<|im_start|",
    "\xe2\x96\x81 already a mark \xe2\x96\x81\xe2\x96\x81",
    "emoji \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd and CJK \xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c",
    "caf\xc3\xa9 vs cafe\xcc\x81 (NFC and NFD)",
    "numbers 1234567890 3.14159 -42 1e-10 0x1F",
    "MiXeD CaSe AND ALL CAPS and punctuation!?!... ;:,",
    "https://example.com/path?query=1&b=2#frag",
};

static int n_compared;

/* text through both vocabularies with every combination of add_special and parse_special. */
static void compare_text(const vocab *d, const vocab *g, const char *name, const char *text, size_t n) {
    static int32_t a[MAX_IDS], b[MAX_IDS];
    bool ok = true;
    for (int k = 0; k < 4 && ok; k++) {
        bool add = k & 1, parse = k & 2;
        int na = tokenize(d, text, n, add, parse, a), nb = tokenize(g, text, n, add, parse, b);
        if (!same_ids(a, na, b, nb)) {
            ok = false;
            fprintf(stderr, "%s: '%.*s' (add_special %d, parse_special %d):\n", name, (int)(n < 80 ? n : 80), text, add,
                    parse);
            print_ids("dir ", a, na);
            print_ids("gguf", b, nb);
        }
    }
    CHECK_MSG(ok, "%s: the directory and the GGUF tokenize a text differently", name);
    n_compared++;
}

static void compare_strings(const vocab *d, const vocab *g, const char *name) {
    char path[1024];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/tests/data/multilingual.txt", getenv("NUCLEUS_ROOT") ? getenv("NUCLEUS_ROOT") : ".");
    char *text = test_read_all(path, &len);
    CHECK_MSG(text, "cannot read %s", path);
    int before = n_compared;
    if (text) {
        compare_text(d, g, name, text, len); /* the whole file at once */
        for (char *line = text; line < text + len;) {
            char *nl = memchr(line, '\n', (size_t)(text + len - line));
            size_t n = nl ? (size_t)(nl - line) : (size_t)(text + len - line);
            compare_text(d, g, name, line, n);
            line += n + 1;
        }
    }
    for (size_t i = 0; i < sizeof EXTRA / sizeof EXTRA[0]; i++) compare_text(d, g, name, EXTRA[i], strlen(EXTRA[i]));
    /* every special token's text between words */
    for (int32_t id = 0; id < vocab_n_tokens(g); id++) {
        int type = vocab_token_type_of(g, id);
        if (type != VOCAB_TT_CONTROL && type != VOCAB_TT_USER_DEFINED && type != VOCAB_TT_UNKNOWN) continue;
        char buf[256];
        size_t tn;
        const char *t = vocab_token_text(g, id, &tn);
        int n = snprintf(buf, sizeof buf, "a %.*s b%.*s", (int)(tn < 100 ? tn : 100), t, (int)(tn < 100 ? tn : 100), t);
        compare_text(d, g, name, buf, (size_t)n);
    }
    CHECK_MSG(n_compared - before >= 240, "%s: only %d strings compared", name, n_compared - before);
    free(text);
}

static void test_arch(const char *name) {
    char dir[1024], gpath[1024];
    snprintf(dir, sizeof dir, "%s/archs/%s/hf", test_shared_dir(), name);
    snprintf(gpath, sizeof gpath, "%s/archs/%s/%s-f16.gguf", test_shared_dir(), name, name);
    vocab *d = load_dir(dir), *g = load_gguf(gpath);
    /* gemma2's tokenizer.model asks for SentencePiece's normalizer (nmt_nfkc charsmap,
     * remove_extra_whitespaces), which transformers applies (its golden prompt_ids collapse the
     * code prompt's newlines and indentation) and llama.cpp does not. */
    bool norm = d && d->norm;
    CHECK_MSG(norm == (strcmp(name, "gemma2") == 0), "%s: normalizer %d", name, norm);
    if (d) check_golden(d, name, norm && !encoder_normalizes(d) ? tokenize_normalized : tokenize);
    spm_norm *keep = d ? d->norm : NULL;
    if (d) d->norm = NULL; /* llama.cpp's encoding, to compare with the GGUF */
    if (d && g) {
        if (strcmp(name, "gemma2") == 0) {
            /* The directory's tokenizer.model says add_dummy_prefix (its default, true), and
             * transformers' golden prompt_ids carry the prefix ("▁The"); llama.cpp's converter
             * writes add_space_prefix = false for every Gemma 2 (the released models have
             * add_dummy_prefix = false). Compare with the GGUF's flag set as the file says. */
            CHECK(vocab_get_kind(d) == VOCAB_SPM && d->add_space_prefix && !g->add_space_prefix);
            g->add_space_prefix = true;
        }
        check_table(d, g, name);
        compare_strings(d, g, name);
    }
    if (d) d->norm = keep;
    vocab_free(d);
    vocab_free(g);
}

/* ---- tokenizer.model alone ------------------------------------------------------------------------ */

static void test_spm_files(void) {
    char path[1024];
    nc_err err;
    vocab *v = NULL;
    snprintf(path, sizeof path, "%s/archs/gemma2/hf/tokenizer.model", test_shared_dir());
    CHECK_MSG(vocab_load_spm(&v, path, &err) == 0, "%s", err.msg);
    if (v) {
        size_t n;
        const char *t = vocab_token_text(v, 545, &n);
        CHECK(vocab_n_tokens(v) == 1024 && n == 6 && memcmp(t, "\xe2\x96\x81The", 6) == 0 && v->tok[545].score == -283.0f);
        CHECK(vocab_get_kind(v) == VOCAB_SPM && v->unk == 3 && vocab_bos(v) == 2 && vocab_eos(v) == 1 && vocab_add_bos(v) &&
              !vocab_add_eos(v) && v->add_space_prefix);
        /* the converter's types: USER_DEFINED pieces are normal, <end_of_turn> then a control EOG */
        CHECK(vocab_token_type_of(v, 0) == VOCAB_TT_CONTROL && vocab_token_type_of(v, 3) == VOCAB_TT_UNKNOWN &&
              vocab_token_type_of(v, 4) == VOCAB_TT_NORMAL && vocab_token_type_of(v, 6) == VOCAB_TT_BYTE &&
              vocab_is_eog(v, 5) && vocab_is_eog(v, 1) && !vocab_is_eog(v, 4));
        vocab_free(v);
    }
    /* phi3's directory keeps a tokenizer.model beside its tokenizer.json (its GGUF is made from
     * the latter: tokenizer_class GPT2Tokenizer): the model alone is a SentencePiece vocabulary
     * that encodes every text losslessly (byte fallback). */
    snprintf(path, sizeof path, "%s/archs/phi3/hf/tokenizer.model", test_shared_dir());
    CHECK_MSG(vocab_load_spm(&v, path, &err) == 0, "%s", err.msg);
    if (v) {
        CHECK(vocab_n_tokens(v) == 1024 && v->unk == 3 && vocab_bos(v) == 2 && vocab_eos(v) == 1 && v->byte_tok[0] == 6);
        spm_norm_free(v->norm); /* the encoder alone: its normalizer (nmt_nfkc) is not lossless */
        v->norm = NULL;
        int round_trips = 0, lines = 0;
        char root[1024];
        snprintf(root, sizeof root, "%s/tests/data/multilingual.txt", getenv("NUCLEUS_ROOT") ? getenv("NUCLEUS_ROOT") : ".");
        size_t len;
        char *text = test_read_all(root, &len);
        for (char *line = text; text && line < text + len; lines++) {
            static int32_t ids[MAX_IDS];
            static char back[4 * MAX_IDS];
            char *nl = memchr(line, '\n', (size_t)(text + len - line));
            size_t ln = nl ? (size_t)(nl - line) : (size_t)(text + len - line);
            int k = tokenize(v, line, ln, false, false, ids);
            int m = k >= 0 ? vocab_detokenize(v, ids, k, false, back, sizeof back) : -1;
            if (m == (int)ln && memcmp(back, line, ln) == 0) round_trips++;
            line += ln + 1;
        }
        CHECK_MSG(lines > 200 && round_trips == lines, "phi3 tokenizer.model: %d of %d lines round-trip", round_trips,
                  lines);
        free(text);
        vocab_free(v);
    }
    /* The phi3 directory itself loads its tokenizer.json, as llama.cpp's converter did. */
    snprintf(path, sizeof path, "%s/archs/phi3/hf", test_shared_dir());
    v = load_dir(path);
    CHECK(v && vocab_get_kind(v) == VOCAB_BPE);
    vocab_free(v);
    CHECK(vocab_load_spm(&v, "/nonexistent/tokenizer.model", &err) == -1 && strstr(err.msg, "/nonexistent/tokenizer.model"));
}

/* SentencePiece's normalizer with gemma2's nmt_nfkc charsmap and remove_extra_whitespaces. */
static void expect_norm(const spm_norm *nm, const char *in, bool prefix, const char *want) {
    uint32_t n = 0;
    char *out = spm_norm_apply(nm, in, strlen(in), prefix, &n);
    CHECK_MSG(out && n == strlen(want) && memcmp(out, want, n) == 0, "normalize '%s': got '%.*s', want '%s'", in,
              out ? (int)n : 0, out ? out : "", want);
    free(out);
}

static void test_normalizer(void) {
    char path[1024];
    nc_err err;
    vocab *v = NULL;
    snprintf(path, sizeof path, "%s/archs/gemma2/hf/tokenizer.model", test_shared_dir());
    if (vocab_load_spm(&v, path, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    CHECK(v->norm != NULL);
    if (v->norm) {
        const spm_norm *nm = v->norm;
#define M "\xe2\x96\x81"
        expect_norm(nm, "a b", true, M "a" M "b");
        expect_norm(nm, "a b", false, "a" M "b");
        expect_norm(nm, "  a\n\n  b\tc  ", true, M "a" M "b" M "c");
        expect_norm(nm, " \n\t ", true, "");
        expect_norm(nm, "", true, "");
        expect_norm(nm, "\xef\xbc\xa1\xef\xbc\xa2", true, M "AB");          /* full-width letters: NFKC */
        expect_norm(nm, "\xe2\x91\xa0 \xef\xac\x81", true, M "1" M "fi");   /* circled one, the fi ligature */
        expect_norm(nm, "caf\xc3\xa9", true, M "caf\xc3\xa9");               /* NFC already */
        expect_norm(nm, "cafe\xcc\x81", true, M "caf\xc3\xa9");              /* composed */
        expect_norm(nm, "x\xff", true, M "x\xef\xbf\xbd");                  /* an ill-formed byte: U+FFFD */
        expect_norm(nm, "<start_of_turn>  x", true, M "<start_of_turn>" M "x"); /* user-defined: kept */
#undef M
    }
    vocab_free(v);
}

/* ---- protobuf written here ------------------------------------------------------------------------- */

typedef struct pbuf {
    uint8_t *p;
    size_t n, cap;
} pbuf;

static void pb_raw(pbuf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n) + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void pb_varint(pbuf *b, uint64_t v) {
    uint8_t t[10];
    size_t n = 0;
    do {
        t[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) t[n] |= 0x80;
        n++;
    } while (v);
    pb_raw(b, t, n);
}

static void pb_tag(pbuf *b, uint32_t field, uint32_t wire) { pb_varint(b, (uint64_t)field << 3 | wire); }
static void pb_int(pbuf *b, uint32_t field, int64_t v) { pb_tag(b, field, 0), pb_varint(b, (uint64_t)v); }
static void pb_bytes(pbuf *b, uint32_t field, const void *d, size_t n) {
    pb_tag(b, field, 2);
    pb_varint(b, n);
    pb_raw(b, d, n);
}
static void pb_str(pbuf *b, uint32_t field, const char *s) { pb_bytes(b, field, s, strlen(s)); }
static void pb_float(pbuf *b, uint32_t field, float f) { pb_tag(b, field, 5), pb_raw(b, &f, 4); }
static void pb_msg(pbuf *b, uint32_t field, pbuf *m) {
    pb_bytes(b, field, m->p, m->n);
    free(m->p);
    *m = (pbuf){0};
}

typedef struct piece_def {
    const char *text;
    float score;
    int type;
} piece_def;

/* <unk> <s> </s>, bytes 0x20 and 0x61 ('a'), ▁, a, b, ▁a, ab, ▁ab */
static const piece_def PIECES[] = {
    {"<unk>", 0, 2}, {"<s>", 0, 3}, {"</s>", 0, 3}, {"<0x20>", 0, 6}, {"<0x61>", 0, 6}, {"\xe2\x96\x81", -1, 1},
    {"a", -2, 1},    {"b", -3, 1},  {"\xe2\x96\x81" "a", -4, 1},  {"ab", -5, 1},  {"\xe2\x96\x81" "ab", -6, 0},
};
#define N_PIECES (int)(sizeof PIECES / sizeof PIECES[0])

typedef struct model_opts {
    int n_pieces;
    bool dummy_prefix, byte_fallback;
    int model_type;
    const piece_def *override; /* replaces piece override_at */
    int override_at;
} model_opts;

static pbuf model_bytes(const model_opts *o) {
    pbuf b = {0}, m = {0};
    for (int i = 0; i < o->n_pieces; i++) {
        const piece_def *p = o->override && i == o->override_at ? o->override : &PIECES[i];
        pb_str(&m, 1, p->text);
        pb_float(&m, 2, p->score);
        if (p->type) pb_int(&m, 3, p->type); /* type 0: left out, NORMAL by default */
        pb_int(&m, 999, 7);                  /* an unknown field, skipped */
        pb_msg(&b, 1, &m);
    }
    pb_int(&m, 3, o->model_type);
    pb_int(&m, 4, o->n_pieces);
    pb_int(&m, 35, o->byte_fallback);
    pb_int(&m, 40, 0);
    pb_int(&m, 41, 1);
    pb_int(&m, 42, 2);
    pb_int(&m, 43, -1); /* a negative int32: ten bytes */
    pb_str(&m, 1, "corpus.txt");
    pb_msg(&b, 2, &m);
    pb_str(&m, 1, "identity");
    pb_bytes(&m, 2, "\x04\0\0\0\0\0\0\0", 8); /* a charsmap: a one-unit trie, no replacements */
    pb_int(&m, 3, o->dummy_prefix);
    pb_int(&m, 4, 0);
    pb_msg(&b, 3, &m);
    pb_str(&m, 1, "x");
    pb_msg(&b, 5, &m); /* denormalizer_spec: skipped */
    return b;
}

static model_opts default_model(void) { return (model_opts){N_PIECES, true, true, 2, NULL, 0}; }

static vocab *model_vocab(const model_opts *o, nc_err *err) {
    pbuf b = model_bytes(o);
    vocab *v = NULL;
    vocab_load_spm_buffer(&v, b.p, b.n, "test.model", err);
    free(b.p);
    return v;
}

/* A charsmap mapping "A" to "a" and "B" to nothing (make_seeds.py's tiny_charsmap). */
static pbuf tiny_charsmap(void) {
    static uint32_t units[324];
    memset(units, 0, sizeof units);
    units[0] = 256u << 10;
    const uint32_t keys[2][2] = {{0x41, 0}, {0x42, 2}};
    for (int k = 0; k < 2; k++) {
        uint32_t at = 256 ^ keys[k][0];
        units[at] = 1u << 10 | 1u << 8 | keys[k][0];
        units[at ^ 1] = 1u << 31 | keys[k][1];
    }
    pbuf b = {0};
    uint32_t size = sizeof units;
    pb_raw(&b, &size, 4);
    pb_raw(&b, units, sizeof units);
    pb_raw(&b, "a\0\0", 3);
    return b;
}

static void test_tiny_charsmap(void) {
    pbuf b = {0}, m = {0}, cm = tiny_charsmap();
    for (int i = 0; i < N_PIECES; i++) {
        pb_str(&m, 1, PIECES[i].text);
        if (PIECES[i].type) pb_int(&m, 3, PIECES[i].type);
        pb_msg(&b, 1, &m);
    }
    pb_bytes(&m, 2, cm.p, cm.n);
    pb_msg(&b, 3, &m); /* remove_extra_whitespaces and add_dummy_prefix by default */
    nc_err err;
    vocab *v = NULL;
    CHECK_MSG(vocab_load_spm_buffer(&v, b.p, b.n, "tiny.model", &err) == 0, "%s", err.msg);
    if (v && v->norm) {
        expect_norm(v->norm, "AbB  A", true, "\xe2\x96\x81" "ab\xe2\x96\x81" "a");
        expect_norm(v->norm, "B", true, "");
    } else CHECK_MSG(0, "no normalizer");
    vocab_free(v);
    /* a trie size that does not fit the blob */
    cm.p[0] = 0xff;
    free(b.p);
    b = (pbuf){0};
    pb_str(&m, 1, "<unk>");
    pb_int(&m, 3, 2);
    pb_msg(&b, 1, &m);
    pb_bytes(&m, 2, cm.p, cm.n);
    pb_msg(&b, 3, &m);
    v = NULL;
    CHECK(vocab_load_spm_buffer(&v, b.p, b.n, "tiny.model", &err) == -1 && strstr(err.msg, "trie size"));
    free(b.p);
    free(cm.p);
}

static void test_synth_model(void) {
    nc_err err;
    model_opts o = default_model();
    vocab *v = model_vocab(&o, &err);
    CHECK_MSG(v, "%s", err.msg);
    if (!v) return;
    spm_proto m;
    pbuf b = model_bytes(&o);
    CHECK(spm_proto_parse(&m, b.p, b.n, "t", &err) == 0);
    CHECK(m.n_pieces == N_PIECES && m.model_type == 2 && m.byte_fallback && m.pad_id == -1 && m.eos_id == 2 &&
          m.charsmap.len == 8 && !m.remove_extra_whitespaces && m.add_dummy_prefix && m.escape_whitespaces &&
          m.normalizer_name.len == 8 && m.pieces[10].type == SPM_NORMAL && m.pieces[3].type == SPM_BYTE);
    spm_proto_free(&m);
    free(b.p);
    int32_t ids[64];
    /* "ab ab": ▁ab (merged by score), ▁ab; a space prefix from add_dummy_prefix */
    int n = tokenize(v, "ab ab", 5, true, false, ids);
    check_ids("synthetic model", ids, n, (const int32_t[]){1, 10, 10}, 3);
    n = tokenize(v, "c", 1, false, false, ids); /* no piece, no byte token: <unk> */
    check_ids("synthetic model, unknown", ids, n, (const int32_t[]){5, 0}, 2);
    vocab_free(v);
    o.dummy_prefix = false;
    v = model_vocab(&o, &err);
    if (v) {
        n = tokenize(v, "ab", 2, false, false, ids);
        check_ids("no dummy prefix", ids, n, (const int32_t[]){9}, 1);
        vocab_free(v);
    }
}

static void expect_model_error(const model_opts *o, const char *needle, const char *what) {
    nc_err err = {{0}};
    vocab *v = model_vocab(o, &err);
    CHECK_MSG(!v && strstr(err.msg, needle) && strncmp(err.msg, "test.model: ", 12) == 0,
              "%s: expected an error naming '%s', got '%s'", what, needle, v ? "(loaded)" : err.msg);
    vocab_free(v);
}

static void expect_bytes_error(const void *data, size_t n, const char *needle, const char *what) {
    nc_err err = {{0}};
    vocab *v = NULL;
    int rc = vocab_load_spm_buffer(&v, data, n, "test.model", &err);
    CHECK_MSG(rc == -1 && !v && strstr(err.msg, needle), "%s: expected an error naming '%s', got '%s'", what, needle,
              v ? "(loaded)" : err.msg);
    vocab_free(v);
}

static void test_model_errors(void) {
    model_opts o = default_model();
    o.model_type = 3;
    expect_model_error(&o, "model_type WORD is not supported", "WORD model");
    o = default_model();
    o.override = &(piece_def){"", 0, 1};
    o.override_at = 6;
    expect_model_error(&o, "piece #6 (offset", "empty piece");
    o.override = &(piece_def){"b", 0, 1};
    expect_model_error(&o, "token 'b' appears twice", "duplicate piece");
    o.override = &(piece_def){"<unk2>", 0, 2};
    expect_model_error(&o, "both have type UNKNOWN", "two unknown pieces");
    o.override = &(piece_def){"<0xZZ>", 0, 6};
    expect_model_error(&o, "is not spelled <0xNN>", "bad byte piece");
    o.override = &(piece_def){"x", 0, 7};
    expect_model_error(&o, "type (field 3) at offset", "bad piece type");
    o.override = &(piece_def){"x", NAN, 1};
    expect_model_error(&o, "is NaN", "NaN score");
    o.override = &(piece_def){"x", 0, 1};
    o.override_at = 0;
    expect_model_error(&o, "no piece has type UNKNOWN", "no unknown piece");
    o = default_model();
    o.n_pieces = 0;
    expect_model_error(&o, "no pieces", "empty model");

    /* the wire format */
    pbuf good = model_bytes(&(model_opts){N_PIECES, true, true, 2, NULL, 0});
    expect_bytes_error(good.p, good.n - 1, "runs past the end", "truncated");
    static const uint8_t varint_long[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    expect_bytes_error(varint_long, sizeof varint_long, "does not fit 64 bits", "varint overflow");
    static const uint8_t varint_cut[] = {0x08, 0xff, 0xff};
    expect_bytes_error(varint_cut, sizeof varint_cut, "truncated varint", "varint cut");
    static const uint8_t field0[] = {0x00, 0x01};
    expect_bytes_error(field0, sizeof field0, "field number 0", "field 0");
    static const uint8_t group[] = {0x0b, 0x0c};
    expect_bytes_error(group, sizeof group, "groups (wire type 3)", "group");
    static const uint8_t wire7[] = {0x0f};
    expect_bytes_error(wire7, sizeof wire7, "invalid wire type 7", "wire type 7");
    static const uint8_t piece_varint[] = {0x08, 0x01};
    expect_bytes_error(piece_varint, sizeof piece_varint, "pieces (field 1) at offset 0 has wire type 0", "wire mismatch");
    static const uint8_t big_len[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f};
    expect_bytes_error(big_len, sizeof big_len, "runs past the end of the message", "length past the end");
    static const uint8_t inner[] = {0x0a, 0x03, 0x0a, 0x05, 0x61}; /* a piece whose text overruns the piece */
    expect_bytes_error(inner, sizeof inner, "piece #0 (offset 0): field 1 at offset 2", "nested overrun");
    expect_bytes_error("", 0, "no pieces", "empty file");
    free(good.p);
}

/* ---- directories written here --------------------------------------------------------------------- */

static void link_shared(const char *dir, const char *from, const char *name) {
    char src[2048], dst[1024], cwd[512];
    if (test_shared_dir()[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(src, sizeof src, "%s/%s", test_shared_dir(), from);
    else snprintf(src, sizeof src, "%s/%s/%s", cwd, test_shared_dir(), from);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    remove(dst);
    CHECK_MSG(symlink(src, dst) == 0, "cannot link %s", dst);
}

static void expect_dir_error(const char *dir, const char *needle, const char *what) {
    nc_err err = {{0}};
    vocab *v = NULL;
    int rc = vocab_load_hf_dir(&v, dir, &err);
    CHECK_MSG(rc == -1 && !v && strstr(err.msg, needle), "%s: expected an error naming '%s', got '%s'", what, needle,
              v ? "(loaded)" : err.msg);
    vocab_free(v);
}

static void test_spm_dir(const char *dir) {
    link_shared(dir, "archs/gemma2/hf/tokenizer.model", "tokenizer.model");
    test_write_text(dir, "config.json", "{\"vocab_size\": 1030, \"bos_token_id\": 2, \"eos_token_id\": 1}");
    test_write_text(dir, "tokenizer_config.json",
               "{\"add_eos_token\": true, \"bos_token\": {\"content\": \"<s>\"}, \"eos_token\": \"<end_of_turn>\", "
               "\"added_tokens_decoder\": {\"4\": {\"content\": \"<start_of_turn>\", \"special\": true}, \"1025\": "
               "{\"content\": \"\\u2581user\\u2581tok\", \"special\": false}, \"1026\": {\"content\": \"<|tool|>\"}, "
               "\"5000\": {\"content\": \"ignored\"}}}");
    test_write_text(dir, "generation_config.json", "{\"eos_token_id\": [1, 5, 700]}");
    test_write_text(dir, "added_tokens.json", "{\"<extra>\": 1027}");
    vocab *v = load_dir(dir);
    if (v) {
        size_t n;
        const char *t = vocab_token_text(v, 1029, &n);
        CHECK(vocab_n_tokens(v) == 1030 && n == 9 && memcmp(t, "[PAD1029]", 9) == 0 &&
              vocab_token_type_of(v, 1029) == VOCAB_TT_UNUSED && v->tok[1029].score == -10000.0f);
        CHECK(vocab_token_type_of(v, 4) == VOCAB_TT_CONTROL && v->tok[4].score == -1000.0f);
        t = vocab_token_text(v, 1025, &n);
        CHECK(n == 9 && memcmp(t, " user tok", 9) == 0 && vocab_token_type_of(v, 1025) == VOCAB_TT_USER_DEFINED);
        CHECK(vocab_token_type_of(v, 1026) == VOCAB_TT_CONTROL && vocab_token_type_of(v, 1027) == VOCAB_TT_USER_DEFINED);
        /* bos by text, eos <end_of_turn> by text; EOS added; generation_config's list ends generation */
        CHECK(vocab_bos(v) == 2 && vocab_eos(v) == 5 && vocab_add_eos(v) && vocab_add_bos(v));
        CHECK(vocab_is_eog(v, 1) && vocab_is_eog(v, 5) && vocab_is_eog(v, 700) && !vocab_is_eog(v, 701));
        int32_t ids[64];
        int k = tokenize(v, "x user tok", 10, true, false, ids); /* the user-defined token is split out */
        CHECK(k >= 3 && ids[0] == 2 && ids[k - 2] == 1025 && ids[k - 1] == 5);
        vocab_free(v);
    }
    test_write_text(dir, "generation_config.json", "{\"eos_token_id\": 1030}");
    expect_dir_error(dir, "generation_config.json: eos_token_id 1030 is not a token id", "eos id out of range");
    test_write_text(dir, "generation_config.json", "{\"eos_token_id\": [1, \"x\"]}");
    expect_dir_error(dir, "generation_config.json: eos_token_id \"x\"", "eos id a string");
    test_write_text(dir, "generation_config.json", "{\"eos_token_id\": ");
    expect_dir_error(dir, "generation_config.json: not valid JSON", "malformed generation_config.json");
    remove_file(dir, "generation_config.json");
    test_write_text(dir, "config.json", "{\"vocab_size\": 1024, \"eos_token_id\": [1, 4]}");
    v = load_dir(dir); /* config.json's list when there is no generation_config.json */
    CHECK(v && vocab_n_tokens(v) == 1024 && vocab_is_eog(v, 4));
    vocab_free(v);
    test_write_text(dir, "config.json", "{\"vocab_size\": -3}");
    expect_dir_error(dir, "config.json: vocab_size is not a positive whole number", "negative vocab_size");
    test_write_text(dir, "config.json", "{\"vocab_size\": 1024}");
    test_write_text(dir, "tokenizer_config.json", "{\"add_eos_token\": true, \"eos_token\": \"<nope>\"}");
    v = load_dir(dir); /* the trainer_spec's eos_id when no file names one */
    CHECK(v && vocab_eos(v) == 1 && vocab_add_eos(v));
    vocab_free(v);
    test_write_text(dir, "tokenizer_config.json", "[1, 2]");
    expect_dir_error(dir, "tokenizer_config.json: not a JSON object", "tokenizer_config.json an array");
    remove_file(dir, "tokenizer_config.json");
    remove_file(dir, "added_tokens.json");
    remove_file(dir, "config.json");
    remove_file(dir, "tokenizer.model");
}

static void test_json_dir(const char *dir) {
    link_shared(dir, "archs/llama3/hf/tokenizer.json", "tokenizer.json");
    test_write_text(dir, "tokenizer_config.json", "{\"add_bos_token\": true, \"bos_token\": \"<|endoftext|>\"}");
    test_write_text(dir, "generation_config.json", "{\"eos_token_id\": [2, 77]}");
    vocab *v = load_dir(dir);
    if (v) {
        CHECK(vocab_add_bos(v) && vocab_bos(v) == 0 && vocab_eos(v) == 2 && vocab_is_eog(v, 77) && !vocab_is_eog(v, 78));
        int32_t ids[64];
        int k = tokenize(v, "hi", 2, true, false, ids);
        CHECK(k >= 2 && ids[0] == 0);
        vocab_free(v);
    }
    test_write_text(dir, "tokenizer_config.json", "{\"add_bos_token\": true, \"bos_token\": \"<nope>\"}");
    expect_dir_error(dir, "add_bos_token is true but the vocabulary has no BOS token", "add_bos without BOS");
    /* the same files beside a tokenizer.json loaded by its path */
    test_write_text(dir, "tokenizer_config.json", "{}");
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    nc_err err;
    CHECK(vocab_load_hf(&v, path, &err) == 0 && vocab_is_eog(v, 77));
    vocab_free(v);
    remove_file(dir, "tokenizer_config.json");
    remove_file(dir, "generation_config.json");
    remove_file(dir, "tokenizer.json");
    expect_dir_error(dir, "no tokenizer.json or tokenizer.model", "no tokenizer");
    expect_dir_error("/nonexistent-dir", "not a directory", "no directory");
}

int main(void) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++) test_arch(ARCHS[i]);
    fprintf(stderr, "%d strings compared with the GGUFs\n", n_compared);
    test_spm_files();
    test_normalizer();
    test_synth_model();
    test_tiny_charsmap();
    test_model_errors();
    char dir[] = "/tmp/nc_test_vocab_dir_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    test_spm_dir(dir);
    test_json_dir(dir);
    rmdir(dir);
    return test_summary("vocab_hf_dir");
}
