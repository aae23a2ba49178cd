/* Byte-level BPE and tokenizer.json loading: llama.cpp's tokenizer test vectors of every
 * family, pre-tokenizer splits, special tokens, invalid UTF-8, round trips over the multilingual
 * corpus, streaming, and tokenizer.json against the GGUF built from it.
 *
 * Also a helper for tests/e2e/tokenizer_npm.sh (the public API has no detokenizer for a bare
 * vocabulary):  test_bpe --roundtrip TOKENIZER_JSON CORPUS  checks decode(encode(line)) == line
 * for every line and prints "roundtrip: N passed, N failed". */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/gguf.h"
#include "test.h"
#include "test_files.h"
#include "vocab/vocab_impl.h"

#define MAX_IDS 16384

/* ---- files and loading ------------------------------------------------------------------------ */

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

static vocab *load_shared(const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", test_shared_dir(), rel);
    return load_gguf(path);
}

static vocab *load_family(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "vocab/%s/ggml-vocab-%s.gguf", name, name);
    return load_shared(rel);
}

static vocab *load_json(const char *path) {
    nc_err err;
    vocab *v = NULL;
    if (vocab_load_hf(&v, path, &err)) CHECK_MSG(0, "%s", err.msg);
    return v;
}

/* ---- helpers ---------------------------------------------------------------------------------- */

static int32_t ids_a[MAX_IDS], ids_b[MAX_IDS];
static char text_buf[1 << 16];

static int tokenize(const vocab *v, const char *s, size_t n, bool add, bool parse, int32_t *out) {
    nc_err err;
    int r = vocab_tokenize(v, s, n, add, parse, out, MAX_IDS, &err);
    if (r < 0) fprintf(stderr, "tokenize failed: %s\n", err.msg);
    return r > MAX_IDS ? -1 : r;
}

static int tok_str(const vocab *v, const char *s, bool parse, int32_t *out) {
    return tokenize(v, s, strlen(s), false, parse, out);
}

static bool ids_equal(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && na >= 0 && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
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

/* decode(encode(s)) == s, without special tokens; for a vocabulary that normalizes, == NFC(s). */
static bool round_trips(const vocab *v, const char *s, size_t n) {
    int k = tokenize(v, s, n, false, false, ids_a);
    if (k < 0) return false;
    int d = vocab_detokenize(v, ids_a, k, false, text_buf, sizeof text_buf);
    char *norm = NULL;
    size_t nn = n;
    if (v->nfc && nfc_normalize(s, n, &norm, &nn)) return false;
    bool same = d == (int)nn && memcmp(text_buf, norm ? norm : s, nn) == 0;
    free(norm);
    return same;
}

/* Calls f on every line of the corpus (without its newline); returns the line count. */
static int for_each_line(const char *path, void (*f)(void *ctx, const char *line, size_t n), void *ctx) {
    size_t len;
    char *text = test_read_all(path, &len);
    CHECK_MSG(text, "cannot read %s", path);
    if (!text) return 0;
    int lines = 0;
    for (size_t at = 0; at < len; lines++) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        f(ctx, text + at, end - at);
        at = end + 1;
    }
    free(text);
    return lines;
}

static const char *corpus_path(void) { return "tests/data/multilingual.txt"; }

/* ---- llama.cpp's test vectors ------------------------------------------------------------------ */

static const char SEP[] = "\n__ggml_vocab_test__\n";

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

static void check_vector(const vocab *v, const char *name, int k, const char *in, size_t n_in, const char *line,
                         const char *line_end) {
    int nw = parse_ids(line, line_end, ids_b);
    int ng = tokenize(v, in, n_in, false, false, ids_a);
    char what[96];
    snprintf(what, sizeof what, "%s input %d", name, k);
    if (!check_ids(what, ids_a, ng, ids_b, nw)) fprintf(stderr, "  input: '%.*s'\n", (int)n_in, in);
    if (valid_utf8((const unsigned char *)in, n_in))
        CHECK_MSG(round_trips(v, in, n_in), "%s: round trip of '%.*s'", what, (int)n_in, in);
}

static void test_vectors(const char *name) {
    vocab *v = load_family(name);
    char path[1024];
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
        CHECK_MSG(k == 46 && line >= out_end && *p == '\0', "%s: %d inputs, expected 46", name, k);
        CHECK(vocab_get_kind(v) == (strstr(name, "-spm") || !strcmp(name, "phi-3") ? VOCAB_SPM : VOCAB_BPE));
    }
    free(inp);
    free(out);
    vocab_free(v);
}

/* ---- pre-tokenizer splits ---------------------------------------------------------------------- */

/* The pieces of text under a family's pre-tokenizer, joined with '|'. */
static const char *pieces(const char *family, const char *text) {
    static char out[1024];
    pretok *p;
    pretok_family fam;
    nc_err err;
    out[0] = '\0';
    if (pretok_for_name(&p, family, strlen(family), &fam, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return out;
    }
    pt_work w = {0};
    if (pretok_split(p, text, strlen(text), &w, &err) == 0) {
        size_t o = 0;
        for (size_t i = 0; i < w.n_pieces && o + w.pieces[i].len + 2 < sizeof out; i++) {
            if (i) out[o++] = '|';
            memcpy(out + o, text + w.pieces[i].off, w.pieces[i].len);
            o += w.pieces[i].len;
        }
        out[o] = '\0';
    } else CHECK_MSG(0, "%s", err.msg);
    pt_work_free(&w);
    pretok_free(p);
    return out;
}

static void expect_pieces(const char *family, const char *text, const char *want) {
    const char *got = pieces(family, text);
    CHECK_MSG(strcmp(got, want) == 0, "%s '%s': got '%s', want '%s'", family, text, got, want);
}

static void test_pretok(void) {
    /* digits: groups of three (Llama 3), single (Qwen2, StarCoder), runs (GPT-2) */
    expect_pieces("llama-bpe", "x 1234567", "x| |123|456|7");
    expect_pieces("qwen2", "x 123", "x| |1|2|3");
    expect_pieces("starcoder", "abc123 45", "abc|1|2|3| |4|5");
    expect_pieces("gpt-2", "abc123 45", "abc|123| 45");
    expect_pieces("deepseek-llm", "a 123", "a| |123");
    /* Falcon: digit runs on the mapped text, then triples; punctuation runs first */
    expect_pieces("falcon", "1234567 x...y", "123|456|7| x|...|y");
    /* contractions: case-insensitive in Llama 3 and Qwen2, case-sensitive in GPT-2 */
    expect_pieces("llama-bpe", "I'M don't", "I|'M| don|'t");
    expect_pieces("gpt-2", "I'M don't", "I|'|M| don|'t");
    /* whitespace runs: all but the last space stay apart from the next word */
    expect_pieces("gpt-2", "a   b", "a|  | b");
    expect_pieces("llama-bpe", "a \n\n b\t", "a| \n\n| b|\t");
    expect_pieces("qwen2", "x  \n", "x|  \n");
    /* CJK, emoji, Arabic, combining marks */
    expect_pieces("llama-bpe", "日本語テキスト 中文", "日本語テキスト| 中文");
    expect_pieces("llama-bpe", "hi😀😀 there", "hi|😀😀| there");
    expect_pieces("gpt-2", "مرحبا بالعالم", "مرحبا| بالعالم");
    expect_pieces("qwen2", "e\xcc\x81t\xc3\xa9", "e|\xcc\x81t\xc3\xa9");
    expect_pieces("qwen35", "e\xcc\x81t\xc3\xa9", "e\xcc\x81t\xc3\xa9");
    expect_pieces("deepseek-coder", "ab 中文12", "ab| |中文|1|2");
    /* invalid UTF-8 never matches: it stays between the pieces */
    expect_pieces("llama-bpe", "ab\xff" "cd", "ab|\xff|cd");
    expect_pieces("gpt-2", "", "");

    pretok *p;
    pretok_family fam;
    nc_err err = {{0}};
    CHECK(pretok_for_name(&p, "nonesuch", 8, &fam, &err) == -1 && strstr(err.msg, "'nonesuch'") &&
          strstr(err.msg, "llama-bpe") && strstr(err.msg, "qwen35") && strstr(err.msg, "command-r"));
    CHECK(pretok_for_name(&p, "smollm", 6, &fam, &err) == 0 && !fam.ignore_merges && !fam.add_bos);
    pretok_free(p);
    CHECK(pretok_for_name(&p, "llama-bpe", 9, &fam, &err) == 0 && fam.ignore_merges && fam.add_bos);
    pretok_free(p);
    CHECK(pretok_build(&p, "bad", &(pretok_step_def){"(unclosed", false}, 1, &err) == -1 &&
          strstr(err.msg, "(unclosed"));
    CHECK(bytelevel_cp(' ') == 0x120 && bytelevel_cp('\n') == 0x10A && bytelevel_cp('a') == 'a' &&
          bytelevel_cp(0xAD) == 0x143 && bytelevel_cp(0x7F) == 0x121);
    bool inverse = true;
    for (int b = 0; b < 256; b++) inverse &= bytelevel_byte(bytelevel_cp((uint8_t)b)) == b;
    CHECK(inverse && bytelevel_byte(0x144) == -1 && bytelevel_byte(0x20) == -1);
}

/* ---- NFC ---------------------------------------------------------------------------------------- */

static void expect_nfc(const char *in, const char *want) {
    char *out = NULL;
    size_t n = 0;
    int rc = nfc_normalize(in, strlen(in), &out, &n);
    const char *got = out ? out : in;
    size_t gn = out ? n : strlen(in);
    CHECK_MSG(rc == 0 && gn == strlen(want) && memcmp(got, want, gn) == 0, "NFC of '%s': got '%.*s', want '%s'", in,
              (int)gn, got, want);
    free(out);
}

static void test_nfc(void) {
    char *out = (char *)1;
    size_t n;
    CHECK(nfc_normalize("plain ascii \xc3\xa9", 14, &out, &n) == 0 && out == NULL); /* nothing at U+0300 or above */
    expect_nfc("Cafe\xcc\x81", "Caf\xc3\xa9");                             /* e + acute */
    expect_nfc("\xe2\x84\xab", "\xc3\x85");                                 /* Angstrom sign: a singleton */
    expect_nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81");      /* Hangul jamo G A K: syllable */
    expect_nfc("\xea\xb0\x80\xe1\x86\xa8", "\xea\xb0\x81");                  /* LV syllable + T */
    expect_nfc("e\xcc\x82\xcc\xa3", "\xe1\xbb\x87");                          /* marks reordered, then composed */
    expect_nfc("e\xcc\xa3\xcc\x82", "\xe1\xbb\x87");
    expect_nfc("a\xcc\x81\xcc\x81", "\xc3\xa1\xcc\x81");                     /* the second acute is blocked */
    expect_nfc("\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc");                  /* an exclusion stays decomposed */
    expect_nfc("\xc3\xa9\xcc\x81", "\xc3\xa9\xcc\x81");                      /* already NFC */
    expect_nfc("e\xff\xcc\x81", "e\xff\xcc\x81");                            /* an invalid byte blocks */
    expect_nfc("\xcc\x81" "e", "\xcc\x81" "e");                               /* a leading mark stays */
}

/* ---- Llama 3: specials, end of generation, pieces, streaming, invalid UTF-8 -------------------- */

static void test_llama3_specials(const vocab *v) {
    CHECK(vocab_bos(v) == 128000 && vocab_eos(v) == 128001 && vocab_add_bos(v) && !vocab_add_eos(v));
    CHECK(strcmp(vocab_pre_name(v), "llama-bpe") == 0);
    CHECK(vocab_is_eog(v, 128001) && vocab_is_eog(v, 128009) && !vocab_is_eog(v, 128000) && !vocab_is_eog(v, 9906));
    int n = tokenize(v, "Hello", 5, true, false, ids_a);
    check_ids("BOS added", ids_a, n, (const int32_t[]){128000, 9906}, 2);
    n = tok_str(v, "<|begin_of_text|>Hello<|eot_id|>", true, ids_a);
    check_ids("specials parsed", ids_a, n, (const int32_t[]){128000, 9906, 128009}, 3);
    n = tok_str(v, "<|eot_id|>", false, ids_a);
    CHECK_MSG(n > 1 && ids_a[0] != 128009, "'<|eot_id|>' must stay text without parse_special");
    char buf[64];
    CHECK(vocab_token_piece(v, 128009, false, buf, sizeof buf) == 0);
    CHECK(vocab_token_piece(v, 128009, true, buf, sizeof buf) == 10 && memcmp(buf, "<|eot_id|>", 10) == 0);
    CHECK(vocab_token_piece(v, 9906, false, buf, sizeof buf) == 5 && memcmp(buf, "Hello", 5) == 0);
    n = tok_str(v, " world", false, ids_a);
    CHECK(n == 1 && vocab_token_piece(v, ids_a[0], false, buf, sizeof buf) == 6 && memcmp(buf, " world", 6) == 0);
    /* a BOS does not swallow a space: byte-level vocabularies have no space prefix */
    const int32_t seq[] = {128000, ids_a[0]};
    CHECK(vocab_detokenize(v, seq, 2, false, buf, sizeof buf) == 6 && memcmp(buf, " world", 6) == 0);
}

/* Arbitrary bytes tokenize byte-wise and come back exactly (byte-level BPE has a token for
 * every byte); the stream turns what is not UTF-8 into U+FFFD. */
static void test_llama3_bytes(const vocab *v) {
    const char bad[] = "a\xff" "b\xc3 \xed\xa0\x80 \xf0\x9f\x98";
    size_t n = sizeof bad - 1;
    int k = tokenize(v, bad, n, false, false, ids_a);
    CHECK(k > 0);
    CHECK(vocab_detokenize(v, ids_a, k, false, text_buf, sizeof text_buf) == (int)n && memcmp(text_buf, bad, n) == 0);
    uint32_t st = 7;
    bool ok = true, ids_ok = true;
    for (int round = 0; round < 300; round++) {
        char bytes[96];
        size_t len = (st = st * 1664525u + 1013904223u) >> 8 & 63;
        for (size_t i = 0; i < len; i++) bytes[i] = (char)((st = st * 1664525u + 1013904223u) >> 13);
        int c = tokenize(v, bytes, len, round & 1, round & 2, ids_a);
        for (int i = 0; i < c; i++) ids_ok &= ids_a[i] >= 0 && ids_a[i] < vocab_n_tokens(v);
        if (!(round & 3)) ok &= round_trips(v, bytes, len);
    }
    CHECK(ok && ids_ok);
}

static void test_llama3_stream(const vocab *v) {
    /* "𪚥" (U+2A6A5) is no token: it comes as byte tokens, and the stream waits for all four */
    int k = tok_str(v, "\xf0\xaa\x9a\xa5", false, ids_a);
    CHECK(k >= 2);
    vocab_stream s;
    vocab_stream_init(&s, v);
    vocab_stream_set_from_start(&s, true);
    char out[16];
    int total = 0;
    for (int i = 0; i < k; i++) {
        int r = vocab_stream_push(&s, ids_a[i], out + total, (int)sizeof out - total);
        CHECK(r >= 0 && (i == k - 1 ? r > 0 : r == 0));
        total += r > 0 ? r : 0;
    }
    CHECK(total == 4 && memcmp(out, "\xf0\xaa\x9a\xa5", 4) == 0);
    CHECK(vocab_stream_flush(&s, out, sizeof out) == 0);
    vocab_stream_init(&s, v);
    CHECK(vocab_stream_push(&s, ids_a[0], out, sizeof out) == 0);
    CHECK(vocab_stream_flush(&s, out, sizeof out) == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0);
}

static void test_llama3(void) {
    vocab *v = load_family("llama-bpe");
    if (!v) return;
    test_llama3_specials(v);
    test_llama3_bytes(v);
    test_llama3_stream(v);
    vocab_free(v);
}

/* Qwen2's chat tokens and end of generation. */
static void test_qwen2(void) {
    vocab *v = load_family("qwen2");
    if (!v) return;
    CHECK(!vocab_add_bos(v) && vocab_eos(v) == 151643);
    CHECK(vocab_is_eog(v, 151643) && vocab_is_eog(v, 151645) && !vocab_is_eog(v, 151644));
    int n = tok_str(v, "<|im_start|>user\nHi<|im_end|>\n", true, ids_a);
    check_ids("qwen2 chat turn", ids_a, n, (const int32_t[]){151644, 872, 198, 13048, 151645, 198}, 6);
    n = tokenize(v, "Hi", 2, true, false, ids_a);
    check_ids("qwen2 adds no BOS", ids_a, n, (const int32_t[]){13048}, 1);
    /* Qwen2's tokenizer normalizes to NFC: decomposed text tokenizes as composed text */
    n = tok_str(v, "Cafe\xcc\x81 \xe1\x84\x80\xe1\x85\xa1", false, ids_a);
    int m = tok_str(v, "Caf\xc3\xa9 \xea\xb0\x80", false, ids_b);
    check_ids("qwen2 NFC", ids_a, n, ids_b, m);
    vocab_free(v);
}

/* ---- round trips over the multilingual corpus ------------------------------------------------- */

typedef struct rt_ctx {
    const vocab *v;
    int failed;
} rt_ctx;

static void rt_line(void *p, const char *line, size_t n) {
    rt_ctx *c = p;
    if (round_trips(c->v, line, n)) return;
    if (c->failed++ < 3) fprintf(stderr, "  no round trip: '%.*s'\n", (int)n, line);
}

static void check_corpus_round_trip(const vocab *v, const char *name) {
    rt_ctx c = {v, 0};
    int lines = for_each_line(corpus_path(), rt_line, &c);
    CHECK_MSG(lines >= 200 && c.failed == 0, "%s: %d of %d corpus lines do not round-trip", name, c.failed, lines);
}

static void test_round_trips(void) {
    static const char *const families[] = {"gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "starcoder", "falcon"};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        vocab *v = load_family(families[i]);
        if (v) check_corpus_round_trip(v, families[i]);
        vocab_free(v);
    }
}

/* ---- tokenizer.json ----------------------------------------------------------------------------- */

typedef struct cmp_ctx {
    const vocab *a, *b;
    bool special;
    int differ, lines;
} cmp_ctx;

static void cmp_line(void *p, const char *line, size_t n) {
    cmp_ctx *c = p;
    static int32_t x[MAX_IDS], y[MAX_IDS];
    int nx = tokenize(c->a, line, n, true, c->special, x), ny = tokenize(c->b, line, n, true, c->special, y);
    c->lines++;
    if (ids_equal(x, nx, y, ny)) return;
    if (c->differ++ < 3) {
        fprintf(stderr, "  differ on '%.*s'\n", (int)n, line);
        print_ids("json", x, nx);
        print_ids("gguf", y, ny);
    }
}

/* The GGUF synth-gguf builds from the SmolLM2 tokenizer.json (made once into build/models). */
static const char *smollm2_gguf(void) {
    static const char path[] = "build/models/smollm2-135m-q8_0-l1.gguf";
    struct stat st;
    if (stat(path, &st) == 0 && st.st_size > 0) return path;
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "mkdir -p build/models && /usr/bin/python3 %s/tools/synth-gguf --shape smollm2-135m --layers 1 "
             "--type q8_0 -o %s >/dev/null",
             test_shared_dir(), path);
    CHECK_MSG(system(cmd) == 0, "could not run: %s", cmd);
    return path;
}

static void test_smollm2_json(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/smollm2-135m-instruct/tokenizer.json", test_shared_dir());
    vocab *j = load_json(path), *g = load_gguf(smollm2_gguf());
    if (j && g) {
        CHECK(vocab_get_kind(j) == VOCAB_BPE && vocab_n_tokens(j) == vocab_n_tokens(g) && vocab_n_tokens(j) == 49152);
        CHECK(strcmp(vocab_pre_name(j), "starcoder") == 0); /* SmolLM's definition is StarCoder's */
        CHECK(vocab_bos(j) == 1 && vocab_eos(j) == 2 && !vocab_add_bos(j)); /* from config.json */
        CHECK(vocab_is_eog(j, 2) && vocab_is_eog(j, 0) && !vocab_is_eog(j, 1));
        for (int special = 0; special < 2; special++) {
            cmp_ctx c = {j, g, special, 0, 0};
            for_each_line(corpus_path(), cmp_line, &c);
            CHECK_MSG(c.differ == 0 && c.lines >= 200, "smollm2 json vs gguf: %d of %d lines differ", c.differ, c.lines);
        }
        check_corpus_round_trip(j, "smollm2 tokenizer.json");
        int n = tok_str(j, "<|im_start|>assistant\n<|im_end|>", true, ids_a);
        CHECK(n >= 3 && ids_a[0] == 1 && ids_a[n - 1] == 2);
    }
    vocab_free(j);
    vocab_free(g);
}

/* TinyStories: tokenizer.json is SentencePiece-style BPE (merges by rank, unknown characters
 * fused). Its GGUF was converted with every score -1000, so llama.cpp's SentencePiece merging
 * (by score, ties to the leftmost pair) parts from the ranks on some words: the two agree on
 * texts where the orders agree, and the JSON side is checked against the JavaScript reference
 * (tests/e2e/tokenizer_npm.sh) and against ids from it here. */
static void test_tinystories_json(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tinystories-656k/hf/tokenizer.json", test_shared_dir());
    vocab *j = load_json(path), *g = load_shared("models/tinystories-656k/TinyStories-656K-Q8_0.gguf");
    if (j && g) {
        CHECK(vocab_get_kind(j) == VOCAB_SPM_BPE && vocab_bos(j) == 1 && vocab_add_bos(j) && vocab_eos(j) == 2);
        static const char *const same[] = {"Once upon a time", "One day, a big red ball", "Tom and Lily"};
        for (size_t i = 0; i < 3; i++) {
            int a = tok_str(j, same[i], false, ids_a), b = tok_str(g, same[i], false, ids_b);
            check_ids(same[i], ids_a, a, ids_b, b);
        }
        /* from @lenml/tokenizers on this tokenizer.json */
        int n = tokenize(j, "Lily and Tom went to the park", 29, true, false, ids_a);
        check_ids("tinystories json: merges by rank", ids_a, n, (const int32_t[]){1, 80, 669, 388, 1844}, 5);
        n = tok_str(j, "a 日本語 😀 text", false, ids_a);
        check_ids("tinystories json: unknowns fused", ids_a, n,
                  (const int32_t[]){104, 0, 80, 0, 80, 72, 375, 72}, 8);
        n = tokenize(j, "<|start_story|>Once", 19, false, true, ids_a);
        CHECK(n >= 2 && ids_a[0] == 1);
        char buf[64];
        n = tok_str(j, "Once upon a time", false, ids_a);
        CHECK(vocab_detokenize(j, ids_a, n, false, buf, sizeof buf) == 16 && memcmp(buf, "Once upon a time", 16) == 0);
    }
    vocab_free(j);
    vocab_free(g);
}

/* The TinyStories tokenizer.json with a Metaspace pre-tokenizer in place of its normalizers. */
static vocab *tinystories_metaspace(const char *scheme, bool split) {
    char path[1024];
    size_t len;
    snprintf(path, sizeof path, "%s/models/tinystories-656k/hf/tokenizer.json", test_shared_dir());
    char *text = test_read_all(path, &len);
    cJSON *j = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    CHECK_MSG(j, "cannot read %s", path);
    if (!j) return NULL;
    cJSON *pre = cJSON_CreateObject();
    cJSON_AddStringToObject(pre, "type", "Metaspace");
    cJSON_AddStringToObject(pre, "replacement", "\xe2\x96\x81");
    cJSON_AddStringToObject(pre, "prepend_scheme", scheme);
    cJSON_AddBoolToObject(pre, "split", split);
    cJSON_ReplaceItemInObjectCaseSensitive(j, "normalizer", cJSON_CreateNull());
    cJSON_ReplaceItemInObjectCaseSensitive(j, "pre_tokenizer", pre);
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    snprintf(path, sizeof path, "build/test_bpe_meta_%d.json", (int)getpid());
    FILE *f = out ? fopen(path, "w") : NULL;
    if (f) {
        fputs(out, f);
        fclose(f);
    }
    free(out);
    vocab *v = load_json(path);
    remove(path);
    return v;
}

typedef struct meta_ctx {
    const vocab *orig, *meta;
    int differ, lines;
} meta_ctx;

/* Lines that do not start with a space tokenize the same under Metaspace("always", no split)
 * as under the Prepend + Replace normalizers. */
static void meta_line(void *p, const char *line, size_t n) {
    meta_ctx *c = p;
    if (n > 0 && line[0] == ' ') return;
    static int32_t x[MAX_IDS], y[MAX_IDS];
    int nx = tokenize(c->orig, line, n, true, false, x), ny = tokenize(c->meta, line, n, true, false, y);
    c->lines++;
    if (!ids_equal(x, nx, y, ny) && c->differ++ < 3) fprintf(stderr, "  metaspace differs on '%.*s'\n", (int)n, line);
}

static void test_metaspace(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tinystories-656k/hf/tokenizer.json", test_shared_dir());
    vocab *orig = load_json(path), *always = tinystories_metaspace("always", false);
    vocab *first = tinystories_metaspace("first", false), *split = tinystories_metaspace("always", true);
    if (orig && always && first && split) {
        meta_ctx c = {orig, always, 0, 0};
        for_each_line(corpus_path(), meta_line, &c);
        CHECK_MSG(c.differ == 0 && c.lines > 150, "Metaspace: %d of %d lines differ", c.differ, c.lines);
        /* Metaspace adds no mark before a leading space; the normalizer does */
        int a = tok_str(always, " Once", false, ids_a), b = tok_str(orig, "Once", false, ids_b);
        check_ids("Metaspace before a space", ids_a, a, ids_b, b);
        /* "first": no mark after a special token */
        a = tok_str(first, "<|start_story|>Once", true, ids_a);
        b = tok_str(orig, "<|start_story|>Once", true, ids_b);
        CHECK(a > 1 && b > 1 && ids_a[0] == 1 && ids_b[0] == 1 && !ids_equal(ids_a, a, ids_b, b));
        a = tok_str(first, "Once", false, ids_a);
        b = tok_str(orig, "Once", false, ids_b);
        check_ids("Metaspace first, at the start", ids_a, a, ids_b, b);
        /* split: every word on its own */
        static const char *const words[] = {"Lily", " and", " Tom", " went", " to", " the", " park"};
        int n = 0;
        for (size_t i = 0; i < 7; i++) n += tok_str(split, words[i], false, ids_b + n);
        a = tok_str(split, "Lily and Tom went to the park", false, ids_a);
        check_ids("Metaspace split", ids_a, a, ids_b, n);
        CHECK(a > 5); /* no token spans words, unlike the unsplit 80 669 388 1844 */
    }
    vocab_free(orig);
    vocab_free(always);
    vocab_free(first);
    vocab_free(split);
}

/* tokenizer.json variants written here: what is supported loads, the rest is refused by name. */
static const char *write_json(const char *body) {
    static char path[64];
    snprintf(path, sizeof path, "build/test_bpe_%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return path;
    fputs(body, f);
    fclose(f);
    return path;
}

#define JSON_VOCAB                                                                                 \
    "\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"\\u0120\": 3, \"\\u0120ab\": 4, \"1\": 5, \"2\": 6, " \
    "\"12\": 7}, \"merges\": [\"a b\", [\"\\u0120\", \"ab\"], \"1 2\"]"

static vocab *load_body(const char *pre, const char *extra, nc_err *err) {
    char body[2048];
    snprintf(body, sizeof body,
             "{\"added_tokens\": [{\"id\": 8, \"content\": \"<eos>\", \"special\": true}, {\"id\": 9, "
             "\"content\": \"<x>\", \"special\": false, \"rstrip\": true, \"lstrip\": true}], \"normalizer\": null, "
             "\"pre_tokenizer\": %s, %s \"model\": {\"type\": \"BPE\", " JSON_VOCAB "}}",
             pre, extra);
    vocab *v = NULL;
    const char *path = write_json(body);
    vocab_load_hf(&v, path, err);
    remove(path);
    return v;
}

static void expect_json_error(const char *pre, const char *extra, const char *needle) {
    nc_err err = {{0}};
    vocab *v = load_body(pre, extra, &err);
    CHECK_MSG(!v && strstr(err.msg, needle), "expected an error naming '%s', got '%s'", needle, v ? "(loaded)" : err.msg);
    vocab_free(v);
}

static void test_json_variants(void) {
    nc_err err = {{0}};
    vocab *v = load_body("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", \"individual_digits\": "
                         "true}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false}]}",
                         "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": {\"id\": "
                         "\"A\"}}, {\"SpecialToken\": {\"id\": \"<eos>\"}}]},",
                         &err);
    CHECK_MSG(v, "%s", err.msg);
    if (v) {
        int n = tokenize(v, "ab ab12 <x>  a", 14, true, false, ids_a);
        /* digits single, "ab" + " ab" merged, <x> split out with the spaces around it dropped */
        check_ids("json variant", ids_a, n, (const int32_t[]){2, 4, 5, 6, 9, 0, 8}, 7);
        CHECK(vocab_eos(v) == 8 && vocab_add_eos(v) && vocab_is_eog(v, 8) && !vocab_add_bos(v));
        CHECK(strcmp(vocab_pre_name(v), "starcoder") == 0);
        vocab_free(v);
    }
    v = load_body("{\"type\": \"Split\", \"pattern\": {\"String\": \"b\"}, \"behavior\": \"Isolated\"}", "", &err);
    CHECK_MSG(!v && strstr(err.msg, "no ByteLevel"), "%s", v ? "loaded" : err.msg);
    vocab_free(v);
    v = load_body("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"String\": \"b\"}, "
                  "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}",
                  "", &err);
    CHECK_MSG(v, "%s", err.msg);
    if (v) {
        int n = tok_str(v, "aab", false, ids_a);
        check_ids("split on a string", ids_a, n, (const int32_t[]){0, 0, 1}, 3);
        CHECK(strcmp(vocab_pre_name(v), "custom") == 0);
        vocab_free(v);
    }
    expect_json_error("{\"type\": \"Metaspace\"}", "", "replacement '(none)' is not supported");
    expect_json_error("{\"type\": \"Whitespace\"}", "", "'Whitespace' is not supported");
    expect_json_error("{\"type\": \"ByteLevel\", \"add_prefix_space\": true}", "", "add_prefix_space");
    expect_json_error("{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Removed\"}", "",
                      "'Removed'");
    expect_json_error("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                      "\"(a\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}",
                      "", "/(a/");
    expect_json_error("null", "", "neither a byte-level");
    const char *huge = write_json("{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
                                  "\"vocab\": {\"a\": 1000000000}, \"merges\": []}}");
    CHECK(vocab_load_hf(&v, huge, &err) == -1 && strstr(err.msg, "token id 1000000000"));
    CHECK(vocab_load_hf(&v, "/nonexistent/tokenizer.json", &err) == -1 && strstr(err.msg, "cannot open"));
    const char *p = write_json("{\"model\": {\"type\": \"WordPiece\"}}");
    CHECK(vocab_load_hf(&v, p, &err) == -1 && strstr(err.msg, "'WordPiece'"));
    p = write_json("{\"model\": ");
    CHECK(vocab_load_hf(&v, p, &err) == -1 && strstr(err.msg, "not valid JSON"));
    remove(p);
}

/* GPT-2's GGUF: no BOS added, <|endoftext|> ends generation. (Malformed byte-level metadata is
 * tested in test_vocab.c, which writes GGUF files.) */
static void test_gpt2_gguf(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/gpt-2/ggml-vocab-gpt-2.gguf", test_shared_dir());
    vocab *v = load_gguf(path);
    if (!v) return;
    CHECK(vocab_get_kind(v) == VOCAB_BPE && !vocab_add_bos(v) && vocab_eos(v) == 50256 && vocab_is_eog(v, 50256));
    CHECK(strcmp(vocab_pre_name(v), "gpt-2") == 0);
    vocab_free(v);
}

/* ---- the round-trip helper for tokenizer_npm.sh ------------------------------------------------ */

typedef struct cli_rt {
    const vocab *v;
    int passed, failed;
} cli_rt;

static void cli_rt_line(void *p, const char *line, size_t n) {
    cli_rt *c = p;
    if (round_trips(c->v, line, n)) c->passed++;
    else if (c->failed++ < 5) fprintf(stderr, "no round trip: '%.*s'\n", (int)n, line);
}

static int roundtrip_main(const char *json, const char *corpus) {
    nc_err err;
    vocab *v;
    if (vocab_load_hf(&v, json, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        printf("roundtrip: 0 passed, 1 failed\n");
        return 1;
    }
    cli_rt c = {v, 0, 0};
    for_each_line(corpus, cli_rt_line, &c);
    vocab_free(v);
    printf("roundtrip: %d passed, %d failed\n", c.passed, c.failed + test_failed);
    return c.failed || test_failed || c.passed == 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--roundtrip") == 0) return roundtrip_main(argv[2], argv[3]);
    static const char *const families[] = {"gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "starcoder", "falcon",
                                           "llama-spm", "phi-3"};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) test_vectors(families[i]);
    test_pretok();
    test_nfc();
    test_llama3();
    test_qwen2();
    test_round_trips();
    test_smollm2_json();
    test_tinystories_json();
    test_json_variants();
    test_metaspace();
    test_gpt2_gguf();
    return test_summary("bpe");
}
