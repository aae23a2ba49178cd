/* The vocab layer against llama.cpp's tokenizer test vectors and the golden prompts, plus
 * streaming, special tokens and malformed metadata on small synthetic vocabularies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "test.h"
#include "test_files.h"
#include "vocab/vocab.h"

#define MAX_IDS 4096

/* ---- files ----------------------------------------------------------------------------------- */

static vocab *load_path(const char *path) {
    nc_err err;
    gguf_file *f;
    vocab *v = NULL;
    if (gguf_open(&f, path, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return NULL;
    }
    if (vocab_load(&v, f, &err)) CHECK_MSG(0, "%s", err.msg);
    gguf_close(f); /* the vocab keeps copies */
    return v;
}

static vocab *load_shared(const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", test_shared_dir(), rel);
    return load_path(path);
}

/* ---- helpers ---------------------------------------------------------------------------------- */

static int tokenize(const vocab *v, const char *s, size_t n, bool add, bool parse, int32_t *out) {
    nc_err err;
    int r = vocab_tokenize(v, s, n, add, parse, out, MAX_IDS, &err);
    if (r < 0) fprintf(stderr, "tokenize failed: %s\n", err.msg);
    if (r > MAX_IDS) return -1;
    return r;
}

static bool ids_equal(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

static void print_ids(const char *label, const int32_t *ids, int n) {
    fprintf(stderr, "  %s:", label);
    for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

static bool check_ids(const char *what, const int32_t *got, int ng, const int32_t *want, int nw) {
    bool ok = ids_equal(got, ng, want, nw);
    CHECK_MSG(ok, "%s", what);
    if (!ok) {
        print_ids("got ", got, ng);
        print_ids("want", want, nw);
    }
    return ok;
}

static bool valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (k == 0 || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return false;
        i += k;
    }
    return true;
}

static int parse_ids(const char *s, const char *end, int32_t *out) {
    int n = 0;
    while (s < end && n < MAX_IDS) {
        char *next;
        long x = strtol(s, &next, 10);
        if (next == s) break;
        out[n++] = (int32_t)x;
        s = next;
    }
    return n;
}

/* ---- llama.cpp's test vectors --------------------------------------------------------------- */

static const char SEP[] = "\n__ggml_vocab_test__\n";

/* Each input is followed by SEP; the .out file has one line of ids per input. */
static void check_vector(const vocab *v, const char *name, int k, const char *in, size_t n_in, const char *line,
                         const char *line_end) {
    static int32_t want[MAX_IDS], got[MAX_IDS];
    char out[8192];
    int nw = parse_ids(line, line_end, want);
    int ng = tokenize(v, in, n_in, false, false, got);
    char what[96];
    snprintf(what, sizeof what, "%s input %d", name, k);
    if (!check_ids(what, got, ng, want, nw)) fprintf(stderr, "  input: '%.*s'\n", (int)n_in, in);
    if (!valid_utf8((const unsigned char *)in, n_in)) return;
    int nd = vocab_detokenize(v, got, ng, false, out, sizeof out);
    CHECK_MSG(nd == (int)n_in && memcmp(out, in, n_in) == 0, "%s: round trip of '%.*s' gave '%.*s'", what,
              (int)n_in, in, nd > 0 && nd <= (int)sizeof out ? nd : 0, out);
}

static void test_vectors(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "vocab/%s/ggml-vocab-%s.gguf", name, name);
    vocab *v = load_shared(path);
    size_t n_inp, n_out;
    snprintf(path, sizeof path, "%s/vocab/%s/ggml-vocab-%s.gguf.inp", test_shared_dir(), name, name);
    char *inp = test_read_all(path, &n_inp);
    snprintf(path, sizeof path, "%s/vocab/%s/ggml-vocab-%s.gguf.out", test_shared_dir(), name, name);
    char *out = test_read_all(path, &n_out);
    CHECK_MSG(v && inp && out, "%s: cannot read the vocabulary or its test vectors", name);
    if (v && inp && out) {
        int k = 0;
        const char *p = inp, *line = out, *out_end = out + n_out;
        for (const char *sep; (sep = strstr(p, SEP)) && line < out_end; k++) {
            const char *nl = memchr(line, '\n', (size_t)(out_end - line));
            if (!nl) nl = out_end;
            check_vector(v, name, k, p, (size_t)(sep - p), line, nl);
            p = sep + strlen(SEP);
            line = nl + 1;
        }
        CHECK_MSG(k == 46 && line >= out_end && *p == '\0', "%s: %d inputs, expected 46 with one .out line each",
                  name, k);
    }
    free(inp);
    free(out);
    vocab_free(v);
}

/* ---- golden prompts --------------------------------------------------------------------------- */

static void put_utf8(char **o, unsigned cp) {
    unsigned char *u = (unsigned char *)*o;
    int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const unsigned char lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    for (int i = n - 1; i > 0; i--, cp >>= 6) u[i] = (unsigned char)(0x80 | (cp & 63));
    u[0] = (unsigned char)(lead[n] | cp);
    *o += n;
}

/* The JSON string starting after the opening quote at s, decoded into out (same size at most). */
static size_t json_string(const char *s, char *out) {
    char *o = out;
    while (*s && *s != '"') {
        if (*s != '\\') {
            *o++ = *s++;
            continue;
        }
        char e = s[1];
        s += 2;
        if (e == 'u') {
            unsigned cp = (unsigned)strtoul((char[5]){s[0], s[1], s[2], s[3], 0}, NULL, 16);
            s += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && s[0] == '\\' && s[1] == 'u') {
                unsigned lo = (unsigned)strtoul((char[5]){s[2], s[3], s[4], s[5], 0}, NULL, 16);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                s += 6;
            }
            put_utf8(&o, cp);
        } else *o++ = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e;
    }
    return (size_t)(o - out);
}

static void check_golden_line(const vocab *v, const char *file, const char *line) {
    static int32_t want[MAX_IDS], got[MAX_IDS];
    const char *p = strstr(line, "\"prompt\": \""), *q = strstr(line, "\"prompt_ids\": [");
    char *prompt = p ? malloc(strlen(p)) : NULL;
    CHECK_MSG(p && q && prompt, "%s: a line without prompt / prompt_ids", file);
    if (!p || !q || !prompt) return;
    size_t n = json_string(p + strlen("\"prompt\": \""), prompt);
    int nw = 0;
    for (const char *s = q + strlen("\"prompt_ids\": ["); *s && *s != ']' && nw < MAX_IDS;) {
        char *next;
        want[nw++] = (int32_t)strtol(s, &next, 10);
        s = next;
        while (*s == ',' || *s == ' ') s++;
    }
    int ng = tokenize(v, prompt, n, true, false, got);
    char what[256];
    snprintf(what, sizeof what, "%s: prompt '%.*s'", file, (int)n, prompt);
    check_ids(what, got, ng, want, nw);
    free(prompt);
}

static void test_golden(const char *jsonl, const char *model) {
    vocab *v = load_shared(model);
    char path[1024];
    size_t len;
    snprintf(path, sizeof path, "%s/golden/%s", test_shared_dir(), jsonl);
    char *text = test_read_all(path, &len);
    CHECK_MSG(v && text, "%s: cannot read", jsonl);
    int lines = 0;
    for (char *line = text; v && line && *line; lines++) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        check_golden_line(v, jsonl, line);
        line = nl ? nl + 1 : NULL;
    }
    CHECK_MSG(lines == 4, "%s: %d prompts, expected 4", jsonl, lines);
    free(text);
    vocab_free(v);
}

static void test_stories_prompt(void) {
    vocab *v = load_shared("models/stories260K/stories260K.gguf");
    if (!v) return;
    int32_t got[MAX_IDS];
    const int32_t want[] = {1, 403, 407, 261, 378};
    int n = tokenize(v, "Once upon a time", 16, true, false, got);
    check_ids("stories260K 'Once upon a time'", got, n, want, 5);
    char text[64];
    n = vocab_detokenize(v, got + 1, n - 1, false, text, sizeof text);
    CHECK(n == 16 && memcmp(text, "Once upon a time", 16) == 0);
    vocab_free(v);
}

/* ---- the Llama 2 vocabulary: specials, pieces, detokenisation, streaming ---------------------- */

static void test_llama_specials(const vocab *v) {
    int32_t got[MAX_IDS], ref[MAX_IDS];
    CHECK(vocab_n_tokens(v) == 32000 && vocab_bos(v) == 1 && vocab_eos(v) == 2);
    CHECK(vocab_add_bos(v) && !vocab_add_eos(v));
    CHECK(vocab_is_eog(v, 2) && !vocab_is_eog(v, 1) && !vocab_is_eog(v, 0) && !vocab_is_eog(v, -1) &&
          !vocab_is_eog(v, 32000));
    int n = tokenize(v, "Hello", 5, true, false, got);
    check_ids("BOS added", got, n, (const int32_t[]){1, 15043}, 2);
    n = tokenize(v, "", 0, true, false, got);
    check_ids("empty text with BOS", got, n, (const int32_t[]){1}, 1);
    CHECK(tokenize(v, "", 0, false, false, got) == 0);
    n = tokenize(v, "<s>Hello</s>", 12, false, true, got);
    check_ids("parsed specials", got, n, (const int32_t[]){1, 15043, 2}, 3);
    n = tokenize(v, "<s>Hello", 8, false, false, got);
    CHECK_MSG(n > 2 && got[0] != 1, "'<s>' must stay text without parse_special");
    /* After a special token the text gets the space prefix again (llama.cpp's is_prev_special). */
    n = tokenize(v, "</s> world", 10, false, true, got);
    int nr = tokenize(v, " world", 6, false, false, ref);
    CHECK(n == nr + 1 && got[0] == 2 && ids_equal(got + 1, n - 1, ref, nr));
    nc_err err;
    CHECK(vocab_tokenize(v, NULL, 3, false, false, got, 8, &err) == -1 && strstr(err.msg, "NULL"));
    CHECK(vocab_tokenize(v, "Hello world", 11, false, false, got, 1, &err) == 2 && got[0] == 15043);
}

static void test_llama_pieces(const vocab *v) {
    char buf[64];
    size_t len;
    CHECK(vocab_token_piece(v, 15043, false, buf, sizeof buf) == 6 && memcmp(buf, " Hello", 6) == 0);
    CHECK(vocab_token_piece(v, 1, false, buf, sizeof buf) == 0);
    CHECK(vocab_token_piece(v, 1, true, buf, sizeof buf) == 3 && memcmp(buf, "<s>", 3) == 0);
    CHECK(vocab_token_piece(v, 13, false, buf, sizeof buf) == 1 && buf[0] == '\n');
    CHECK(vocab_token_piece(v, 15043, false, buf, 2) == 6);
    CHECK(vocab_token_piece(v, -1, false, buf, sizeof buf) == -1 && vocab_token_piece(v, 32000, false, buf, 8) == -1);
    const char *t = vocab_token_text(v, 15043, &len);
    CHECK(t && len == 8 && memcmp(t, "\xe2\x96\x81Hello", 8) == 0);
    CHECK(vocab_token_text(v, 32000, &len) == NULL);
    CHECK(vocab_token_type_of(v, 0) == VOCAB_TT_UNKNOWN && vocab_token_type_of(v, 1) == VOCAB_TT_CONTROL &&
          vocab_token_type_of(v, 3) == VOCAB_TT_BYTE && vocab_token_type_of(v, 15043) == VOCAB_TT_NORMAL);
}

static void test_llama_detokenize(const vocab *v) {
    char buf[64];
    const int32_t hello_world[] = {15043, 3186}, with_bos[] = {1, 15043};
    CHECK(vocab_detokenize(v, hello_world, 2, false, buf, sizeof buf) == 11 && memcmp(buf, "Hello world", 11) == 0);
    /* llama.cpp: the BOS is the first piece, so it, not " Hello", is the one stripped */
    CHECK(vocab_detokenize(v, with_bos, 2, false, buf, sizeof buf) == 6 && memcmp(buf, " Hello", 6) == 0);
    CHECK(vocab_detokenize(v, with_bos, 2, true, buf, sizeof buf) == 9 && memcmp(buf, "<s> Hello", 9) == 0);
    CHECK(vocab_detokenize(v, hello_world, 2, false, buf, 4) == 11);
    CHECK(vocab_detokenize(v, (const int32_t[]){15043, -7}, 2, false, buf, sizeof buf) == -1);
}

/* Invalid UTF-8 goes byte-wise; like llama.cpp, a stray lead byte takes the bytes after it
 * into its symbol (here "\xff" + "b\xc3"), which then falls back to byte tokens. */
static void test_llama_invalid_utf8(const vocab *v) {
    int32_t got[MAX_IDS];
    const char text[] = "a\xff" "b\xc3";
    int n = tokenize(v, text, 4, false, false, got);
    CHECK(n >= 4);
    if (n < 4) return;
    const char *bytes[] = {"<0xFF>", "<0x62>", "<0xC3>"};
    for (int i = 0; i < 3; i++) {
        size_t len;
        const char *t = vocab_token_text(v, got[n - 3 + i], &len);
        CHECK_MSG(t && len == 6 && memcmp(t, bytes[i], 6) == 0, "token %d should be %s", n - 3 + i, bytes[i]);
    }
    char buf[16];
    CHECK(vocab_detokenize(v, got, n, false, buf, sizeof buf) == 4 && memcmp(buf, text, 4) == 0);
    const char junk[] = "\xf0\x28\x8c\xbc \xc0\xaf \xed\xa0\x80 \xf8\x88\x80\x80\x80 \x80";
    CHECK(tokenize(v, junk, sizeof junk - 1, true, true, got) > 0);
}

static int push(vocab_stream *s, int32_t id, char *out) { return vocab_stream_push(s, id, out, 16); }

static void test_llama_stream(const vocab *v) {
    int32_t ids[MAX_IDS];
    char out[64];
    int n = tokenize(v, "\xf0\x9f\x98\x80", 4, false, false, ids); /* an emoji: byte fallback */
    check_ids("emoji", ids, n, (const int32_t[]){29871, 243, 162, 155, 131}, 5);
    vocab_stream s;
    vocab_stream_init(&s, v);
    vocab_stream_set_from_start(&s, true);
    CHECK(push(&s, 29871, out) == 0); /* the prefix space is dropped at the start */
    CHECK(push(&s, 243, out) == 0 && push(&s, 162, out) == 0 && push(&s, 155, out) == 0);
    CHECK(vocab_stream_push(&s, 131, out, 3) == 4); /* does not fit: nothing consumed */
    CHECK(push(&s, 131, out) == 4 && memcmp(out, "\xf0\x9f\x98\x80", 4) == 0);
    CHECK(vocab_stream_flush(&s, out, sizeof out) == 0);

    vocab_stream_init(&s, v); /* a continuation keeps its spaces */
    CHECK(push(&s, 29871, out) == 1 && out[0] == ' ');
    CHECK(push(&s, 15043, out) == 6 && memcmp(out, " Hello", 6) == 0);
    CHECK(push(&s, 1, out) == 0 && push(&s, -3, out) == -1);
    vocab_stream_set_special(&s, true);
    CHECK(push(&s, 1, out) == 3 && memcmp(out, "<s>", 3) == 0);

    /* an interrupted character: one U+FFFD for the held bytes, then the new byte */
    const int32_t f0 = 0xF0 + 3, x9f = 0x9F + 3, a = 0x61 + 3, e0 = 0xE0 + 3, x80 = 0x80 + 3;
    CHECK(push(&s, f0, out) == 0 && push(&s, x9f, out) == 0);
    CHECK(push(&s, a, out) == 4 && memcmp(out, "\xef\xbf\xbd" "a", 4) == 0);
    /* E0 80 is ill-formed at its second byte: two replacements */
    CHECK(push(&s, e0, out) == 0 && push(&s, x80, out) == 6 && memcmp(out, "\xef\xbf\xbd\xef\xbf\xbd", 6) == 0);
    CHECK(push(&s, f0, out) == 0);
    CHECK(vocab_stream_flush(&s, out, 2) == 3);
    CHECK(vocab_stream_flush(&s, out, sizeof out) == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0);
    CHECK(vocab_stream_flush(&s, out, sizeof out) == 0);
}

static uint32_t lcg(uint32_t *state) { return (*state = *state * 1664525u + 1013904223u) >> 8; }

/* Random bytes tokenize to valid ids; random ids stream to valid UTF-8. */
static void test_llama_random(const vocab *v) {
    static int32_t ids[MAX_IDS];
    static char text[1 << 16];
    uint32_t st = 12345;
    bool ids_ok = true, utf8_ok = true;
    for (int round = 0; round < 200; round++) {
        char bytes[64];
        size_t n = lcg(&st) % sizeof bytes;
        for (size_t i = 0; i < n; i++) bytes[i] = lcg(&st) % 4 ? (char)lcg(&st) : "< />s"[lcg(&st) % 5];
        int k = tokenize(v, bytes, n, true, round % 2, ids);
        for (int i = 0; i < k; i++) ids_ok &= ids[i] >= 0 && ids[i] < vocab_n_tokens(v);
        ids_ok &= k >= 1;
    }
    vocab_stream s;
    vocab_stream_init(&s, v);
    vocab_stream_set_special(&s, true);
    size_t len = 0;
    for (int i = 0; i < 4000 && len + 64 < sizeof text; i++) {
        int32_t id = (int32_t)(lcg(&st) % 2 ? 3 + lcg(&st) % 256 : lcg(&st) % 32000); /* many byte tokens */
        int r = vocab_stream_push(&s, id, text + len, 64);
        utf8_ok &= r >= 0 && r <= 64;
        len += r > 0 ? (size_t)r : 0;
    }
    len += (size_t)vocab_stream_flush(&s, text + len, 64);
    CHECK(ids_ok);
    CHECK(utf8_ok && valid_utf8((const unsigned char *)text, len));
}

static void test_llama(void) {
    vocab *v = load_shared("vocab/llama-spm/ggml-vocab-llama-spm.gguf");
    if (!v) return;
    test_llama_specials(v);
    test_llama_pieces(v);
    test_llama_detokenize(v);
    test_llama_invalid_utf8(v);
    test_llama_stream(v);
    test_llama_random(v);
    vocab_free(v);
}

/* Phi-3: end-of-turn tokens, and llama.cpp's rule that drops whitespace after its specials. */
static void test_phi3(void) {
    vocab *v = load_shared("vocab/phi-3/ggml-vocab-phi-3.gguf");
    if (!v) return;
    int32_t got[MAX_IDS];
    CHECK(vocab_eos(v) == 32000 && vocab_is_eog(v, 32000) && vocab_is_eog(v, 32007) && vocab_is_eog(v, 2));
    CHECK(!vocab_is_eog(v, 32010) && !vocab_is_eog(v, 1));
    int n = tokenize(v, "<|user|>\nHello<|end|>", 21, false, true, got);
    check_ids("phi-3 chat turn", got, n, (const int32_t[]){32010, 15043, 32007}, 3);
    n = tokenize(v, "a</s>", 5, false, false, got);
    CHECK_MSG(n > 0 && got[n - 1] != 2, "</s> is an end-of-generation token: parsed only with parse_special");
    vocab_free(v);
}

/* ---- synthetic vocabularies: a GGUF written in memory ---------------------------------------- */

typedef struct gbuf {
    unsigned char *p;
    size_t n, cap;
    int n_kv;
} gbuf;

static void gb_put(gbuf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void gb_u32(gbuf *b, uint32_t x) { gb_put(b, &x, 4); }
static void gb_u64(gbuf *b, uint64_t x) { gb_put(b, &x, 8); }
static void gb_str(gbuf *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_put(b, s, strlen(s));
}
static void gb_key(gbuf *b, const char *key, gguf_vtype t) {
    gb_str(b, key);
    gb_u32(b, t);
    b->n_kv++;
}
static void kv_str(gbuf *b, const char *key, const char *s) {
    gb_key(b, key, GGUF_T_STRING);
    gb_str(b, s);
}
static void kv_u32(gbuf *b, const char *key, uint32_t x) {
    gb_key(b, key, GGUF_T_UINT32);
    gb_u32(b, x);
}
static void kv_bool(gbuf *b, const char *key, bool x) {
    gb_key(b, key, GGUF_T_BOOL);
    gb_put(b, &(uint8_t){x}, 1);
}
static void kv_arr(gbuf *b, const char *key, gguf_vtype t, int n) {
    gb_key(b, key, GGUF_T_ARRAY);
    gb_u32(b, t);
    gb_u64(b, (uint64_t)n);
}

/* <unk> <s> </s> ▁ a b aa ab ▁a <x> (user-defined) <c> (control); no byte tokens. */
enum { S_UNK, S_BOS, S_EOS, S_SPACE, S_A, S_B, S_AA, S_AB, S_SPACE_A, S_X, S_C, S_N };
static const char *const S_TEXT[S_N] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b",
                                        "aa",    "ab",  ("\xe2\x96\x81" "a"), "<x>", "<c>"};
static const float S_SCORE[S_N] = {0, 0, 0, -1, -2, -3, 5, 5, 1, 0, 0};
static const int32_t S_TYPE[S_N] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 4, 3};

typedef struct synth {
    const char *model;           /* NULL: no tokenizer.ggml.model */
    const char *pre;             /* tokenizer.ggml.pre, if set */
    const char *merge;           /* the one tokenizer.ggml.merges entry, if set */
    const char *const *text;     /* the tokens (S_TEXT unless set) */
    const int32_t *type;         /* token types (S_TYPE unless set) */
    int n_tok, n_scores, n_types;
    int64_t bos;                 /* < -1: key absent */
    bool no_prefix;              /* tokenizer.ggml.add_space_prefix = false */
} synth;

static synth synth_default(void) {
    return (synth){.model = "llama", .n_tok = S_N, .n_scores = S_N, .n_types = S_N, .bos = -2};
}

static gbuf synth_kvs(const synth *o) {
    gbuf b = {0};
    const char *const *text = o->text ? o->text : S_TEXT;
    const int32_t *type = o->type ? o->type : S_TYPE;
    if (o->model) kv_str(&b, "tokenizer.ggml.model", o->model);
    if (o->pre) kv_str(&b, "tokenizer.ggml.pre", o->pre);
    if (o->merge) {
        kv_arr(&b, "tokenizer.ggml.merges", GGUF_T_STRING, 1);
        gb_str(&b, o->merge);
    }
    kv_arr(&b, "tokenizer.ggml.tokens", GGUF_T_STRING, o->n_tok);
    for (int i = 0; i < o->n_tok; i++) gb_str(&b, text[i % S_N]);
    kv_arr(&b, "tokenizer.ggml.scores", GGUF_T_FLOAT32, o->n_scores);
    for (int i = 0; i < o->n_scores; i++) gb_put(&b, &S_SCORE[i % S_N], 4);
    kv_arr(&b, "tokenizer.ggml.token_type", GGUF_T_INT32, o->n_types);
    for (int i = 0; i < o->n_types; i++) gb_put(&b, &type[i % S_N], 4);
    if (o->bos >= -1) kv_u32(&b, "tokenizer.ggml.bos_token_id", (uint32_t)o->bos);
    if (o->no_prefix) kv_bool(&b, "tokenizer.ggml.add_space_prefix", false);
    return b;
}

/* Loads the synthetic vocabulary; on failure returns NULL with the message in err. */
static vocab *synth_load(const synth *o, nc_err *err) {
    gbuf kvs = synth_kvs(o), file = {0};
    gb_put(&file, "GGUF", 4);
    gb_u32(&file, 3);
    gb_u64(&file, 0);
    gb_u64(&file, (uint64_t)kvs.n_kv);
    gb_put(&file, kvs.p, kvs.n);
    gguf_file *f;
    vocab *v = NULL;
    if (gguf_open_buffer(&f, file.p, file.n, "synth", err) == 0) {
        vocab_load(&v, f, err);
        gguf_close(f);
    }
    free(kvs.p);
    free(file.p);
    return v;
}

static void test_synth_merges(void) {
    synth o = synth_default();
    nc_err err;
    vocab *v = synth_load(&o, &err);
    CHECK_MSG(v, "%s", err.msg);
    if (!v) return;
    int32_t got[MAX_IDS];
    /* "▁aab": "aa" and "ab" tie at score 5; the leftmost pair wins, then nothing merges further */
    int n = tokenize(v, "aab", 3, false, false, got);
    check_ids("tie goes to the leftmost pair", got, n, (const int32_t[]){S_SPACE, S_AA, S_B}, 3);
    n = tokenize(v, "ab", 2, true, false, got);
    check_ids("highest score first", got, n, (const int32_t[]){S_BOS, S_SPACE, S_AB}, 3);
    n = tokenize(v, "c", 1, false, false, got); /* no byte tokens: an unknown character is <unk> */
    check_ids("unknown without byte tokens", got, n, (const int32_t[]){S_SPACE, S_UNK}, 2);
    n = tokenize(v, "a<x>a", 5, false, false, got); /* user-defined: always split out */
    check_ids("user-defined token", got, n, (const int32_t[]){S_SPACE_A, S_X, S_SPACE_A}, 3);
    n = tokenize(v, "a<c>", 4, false, false, got); /* control: only with parse_special */
    check_ids("control token as text", got, n, (const int32_t[]){S_SPACE_A, S_UNK, S_UNK, S_UNK}, 4);
    n = tokenize(v, "a<c>", 4, false, true, got);
    check_ids("control token parsed", got, n, (const int32_t[]){S_SPACE_A, S_C}, 2);
    CHECK(vocab_is_eog(v, S_EOS) && !vocab_is_eog(v, S_C) && vocab_bos(v) == S_BOS);
    vocab_free(v);

    o.no_prefix = true;
    v = synth_load(&o, &err);
    CHECK_MSG(v, "%s", err.msg);
    if (!v) return;
    n = tokenize(v, "a b", 3, false, false, got);
    check_ids("no space prefix", got, n, (const int32_t[]){S_A, S_SPACE, S_B}, 3);
    char buf[16];
    CHECK(vocab_detokenize(v, got, n, false, buf, sizeof buf) == 3 && memcmp(buf, "a b", 3) == 0);
    vocab_free(v);
}

static void expect_error(const synth *o, const char *needle, const char *what) {
    nc_err err = {{0}};
    vocab *v = synth_load(o, &err);
    CHECK_MSG(!v && strstr(err.msg, needle), "%s: expected an error naming '%s', got '%s'", what, needle,
              v ? "(loaded)" : err.msg);
    vocab_free(v);
}

static void test_synth_errors(void) {
    synth o = synth_default();
    o.model = "bert";
    expect_error(&o, "'bert'", "unknown tokenizer model");
    o.model = "gpt2";
    expect_error(&o, "tokenizer.ggml.merges", "byte-level BPE without merges");
    o.merge = "ab";
    expect_error(&o, "not two tokens", "a merge without a space");
    o.pre = "nonesuch";
    expect_error(&o, "pre-tokenizer 'nonesuch' is not supported (supported: gpt-2", "unknown pre-tokenizer");
    o.model = NULL;
    expect_error(&o, "tokenizer.ggml.model", "no model key");
    o = synth_default();
    o.n_scores = S_N - 1;
    expect_error(&o, "tokenizer.ggml.scores", "scores count");
    o = synth_default();
    o.n_types = S_N + 1;
    expect_error(&o, "tokenizer.ggml.token_type", "types count");
    o = synth_default();
    o.bos = S_N;
    expect_error(&o, "tokenizer.ggml.bos_token_id", "BOS out of range");
    o = synth_default();
    o.n_tok = o.n_scores = o.n_types = 0;
    expect_error(&o, "tokenizer.ggml.tokens is empty", "empty vocabulary");
    o = synth_default();
    o.n_tok = o.n_scores = o.n_types = S_N + 1; /* token S_N repeats "<unk>" */
    expect_error(&o, "tokenizer.ggml.tokens: token '<unk>' appears twice", "duplicate text");
    const int32_t bad_byte[S_N] = {2, 3, 3, 1, 6, 1, 1, 1, 1, 4, 3}, bad_type[S_N] = {2, 3, 3, 1, 9, 1, 1, 1, 1, 4, 3};
    o = synth_default();
    o.type = bad_byte;
    expect_error(&o, "<0xNN>", "byte token not spelled <0xNN>");
    o.type = bad_type;
    expect_error(&o, "token_type[4] is 9", "unknown token type");

    o = synth_default();
    o.bos = 0xFFFFFFFFll; /* "no BOS", while add_bos (default true) needs one */
    expect_error(&o, "no BOS token", "add_bos without BOS");
}

int main(void) {
    test_vectors("llama-spm");
    test_vectors("phi-3");
    test_stories_prompt();
    test_golden("stories260K.jsonl", "models/stories260K/stories260K.gguf");
    test_golden("tinystories-656k-q8_0.jsonl", "models/tinystories-656k/TinyStories-656K-Q8_0.gguf");
    test_golden("synth-tinyllama-1.1b-q4_0-l2.jsonl", "vocab/llama-spm/ggml-vocab-llama-spm.gguf");
    test_llama();
    test_phi3();
    test_synth_merges();
    test_synth_errors();
    return test_summary("vocab");
}
