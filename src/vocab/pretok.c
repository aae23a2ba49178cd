/* Pre-tokenizers (see pretok.h): the families' definitions, and splitting with PCRE2.
 *
 * The definitions are those of the families' Hugging Face tokenizer.json pre_tokenizer, which
 * produced llama.cpp's tokenizer test vectors; llama.cpp's own regex lists (llama-vocab.cpp)
 * differ in places (Falcon, DeepSeek) where they drift from the originals. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vocab/pretok.h"

struct pretok {
    char name[64];
    int n_steps;
    pcre2_code *re[PRETOK_MAX_STEPS];
    bool mapped[PRETOK_MAX_STEPS];
};

/* ---- the families ------------------------------------------------------------------------- */
/* Qwen2, Qwen3.5 and MPT (GPT-NeoX) normalize to NFC before pre-tokenizing; llama.cpp does not,
 * which only matters for text not in NFC. */

/* Llama 3's Split regex (meta-llama/Meta-Llama-3-8B tokenizer.json): digits in groups of three. */
#define RE_LLAMA3                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen2's (Qwen/Qwen2-7B tokenizer.json): as Llama 3 but single digits. */
#define RE_QWEN2                                                                                   \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"     \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen3.5's: combining marks (\p{M}) stay with their letters. */
#define RE_QWEN35                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* DeepSeek's CJK split: U+4E00..U+9FA5, U+0800..U+4E00, U+AC00..U+D7FF. */
#define RE_DEEPSEEK_CJK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

/* DeepSeek LLM's letter runs: the ranges of its tokenizer.json, as code points. */
#define RE_DEEPSEEK_LETTERS                                                                        \
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"     \
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"   \
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"         \
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"      \
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"       \
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"                  \
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"                \
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}"      \
    "\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}"        \
    "\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"                 \
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"                 \
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"       \
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"       \
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}" \
    "\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+"
/* DeepSeek LLM's punctuation runs: ASCII !-/ :-~, fullwidth ！-／ ：-～, U+2018..U+201F, U+3000..U+3002. */
#define RE_DEEPSEEK_PUNCT "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+"

typedef struct family {
    const char *names; /* the tokenizer.ggml.pre values, separated by '|' */
    pretok_family info;
    int n_steps;
    pretok_step_def steps[PRETOK_MAX_STEPS];
} family;

static const family FAMILIES[] = {
    /* GPT-2 and MPT (GPT-NeoX's tokenizer): ByteLevel alone. "default" is what old converters
     * wrote for byte-level vocabularies; GPT-2's definition is the original one. The other
     * names are those llama.cpp gives the same definition. */
    {"gpt-2|default|olmo|jais", {false, false, false}, 1, {{PRETOK_RE_GPT2, false}}},
    {"mpt", {false, false, true}, 1, {{PRETOK_RE_GPT2, false}}},
    /* Llama 3: Split(regex) then ByteLevel without its regex; the BPE model has ignore_merges. */
    {"llama-bpe|llama3|llama-v3|falcon3", {true, true, false}, 1, {{RE_LLAMA3, false}}},
    /* DBRX and Smaug: the same regex (GPT-4's), without ignore_merges */
    {"dbrx|smaug-bpe", {false, false, false}, 1, {{RE_LLAMA3, false}}},
    {"qwen2", {false, false, true}, 1, {{RE_QWEN2, false}}},
    {"stablelm2|deepseek-r1-qwen|megrez", {false, false, false}, 1, {{RE_QWEN2, false}}},
    {"qwen35", {false, false, true}, 1, {{RE_QWEN35, false}}},
    /* StarCoder, SmolLM, Refact, Command-R: Digits(individual_digits) then ByteLevel. */
    {"starcoder|smollm|refact|command-r|codeshell|exaone|minerva-7b", {false, false, false}, 2, {{PRETOK_RE_DIGIT, false}, {PRETOK_RE_GPT2, false}}},
    /* Falcon: Punctuation(Contiguous), ByteLevel, then Digits and Split("[0-9][0-9][0-9]") on the
     * mapped text (so the stand-ins of bytes B2 B3 B9 BC BD BE, which are numeric, split too). */
    {"falcon",
     {false, false, false},
     4,
     {{PRETOK_RE_PUNCT_RUNS, false}, {PRETOK_RE_GPT2, false}, {PRETOK_RE_DIGITS, true}, {"[0-9][0-9][0-9]", true}}},
    {"deepseek-llm",
     {false, false, false},
     6,
     {{"[\\r\\n]", false},
      {RE_DEEPSEEK_LETTERS, false},
      {RE_DEEPSEEK_PUNCT, false},
      {"\\s+$", false},
      {RE_DEEPSEEK_CJK, false},
      {PRETOK_RE_DIGITS, false}}},
    {"deepseek-coder",
     {false, false, false},
     5,
     {{"[\\r\\n]", false}, {"\\s?\\p{L}+", false}, {"\\s?\\p{P}+", false}, {RE_DEEPSEEK_CJK, false}, {PRETOK_RE_DIGIT, false}}},
};

#define N_FAMILIES (sizeof FAMILIES / sizeof FAMILIES[0])

/* Whether name[0..len) is one of the '|'-separated names. */
static bool names_have(const char *names, const char *name, size_t len) {
    for (const char *p = names;;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && memcmp(p, name, len) == 0) return true;
        if (!bar) return false;
        p = bar + 1;
    }
}

static void list_names(char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_FAMILIES && o < cap; i++)
        for (const char *p = FAMILIES[i].names; *p && o + 4 < cap; p++) {
            if (o > 0 && (p == FAMILIES[i].names || *p == '|')) o += (size_t)snprintf(buf + o, cap - o, ", ");
            if (*p != '|') buf[o++] = *p;
            buf[o] = '\0';
        }
}

int pretok_for_name(pretok **out, const char *name, size_t len, pretok_family *fam, nc_err *err) {
    for (size_t i = 0; i < N_FAMILIES; i++) {
        if (!names_have(FAMILIES[i].names, name, len)) continue;
        *fam = FAMILIES[i].info;
        char canonical[64];
        snprintf(canonical, sizeof canonical, "%.*s", (int)len, name);
        return pretok_build(out, canonical, FAMILIES[i].steps, FAMILIES[i].n_steps, err);
    }
    char known[512];
    list_names(known, sizeof known);
    return nc_fail(err, "pre-tokenizer '%.*s' is not supported (supported: %s)", (int)(len < 64 ? len : 64), name,
                   known);
}

const char *pretok_family_of(const pretok_step_def *steps, int n_steps) {
    for (size_t i = 0; i < N_FAMILIES; i++) {
        const family *f = &FAMILIES[i];
        bool same = f->n_steps == n_steps;
        for (int k = 0; same && k < n_steps; k++)
            same = f->steps[k].mapped == steps[k].mapped && strcmp(f->steps[k].pattern, steps[k].pattern) == 0;
        if (same) return f->names;
    }
    return NULL;
}

/* ---- building ----------------------------------------------------------------------------- */

/* MATCH_INVALID_UTF: invalid UTF-8 in the subject is allowed and never matches; UCP: \s, \d and
 * \w and the POSIX classes follow Unicode properties. */
static pcre2_code *compile(const char *pattern, nc_err *err) {
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        nc_fail(err, "pre-tokenizer pattern /%.200s/: %s at offset %zu", pattern, (const char *)msg, (size_t)at);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* where JIT is unavailable, matching interprets */
    return re;
}

int pretok_build(pretok **out, const char *name, const pretok_step_def *steps, int n_steps, nc_err *err) {
    *out = NULL;
    if (n_steps > PRETOK_MAX_STEPS)
        return nc_fail(err, "pre-tokenizer with %d steps: at most %d are supported", n_steps, PRETOK_MAX_STEPS);
    pretok *p = calloc(1, sizeof *p);
    if (!p) return nc_fail(err, "out of memory");
    snprintf(p->name, sizeof p->name, "%s", name);
    for (int i = 0; i < n_steps; i++) {
        p->re[i] = compile(steps[i].pattern, err);
        if (!p->re[i]) {
            pretok_free(p);
            return -1;
        }
        p->mapped[i] = steps[i].mapped;
        p->n_steps = i + 1;
    }
    *out = p;
    return 0;
}

const char *pretok_name(const pretok *p) { return p->name; }

void pretok_free(pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n_steps; i++) pcre2_code_free(p->re[i]);
    free(p);
}

/* ---- byte-level mapping ------------------------------------------------------------------- */

/* Printable bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; the other 68
 * (0x00..0x20, 0x7F..0xA0, 0xAD) become U+0100, U+0101, ... in byte order. */
static bool printable(uint32_t b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

uint32_t bytelevel_cp(uint8_t b) {
    if (printable(b)) return b;
    if (b <= 0x20) return 0x100 + b;
    if (b <= 0xA0) return 0x100 + 33 + (b - 0x7Fu);
    return 0x100 + 67; /* 0xAD */
}

int bytelevel_byte(uint32_t cp) {
    if (cp < 0x100) return printable(cp) ? (int)cp : -1;
    uint32_t n = cp - 0x100;
    if (n < 33) return (int)n;
    if (n < 67) return (int)(0x7F + n - 33);
    return n == 67 ? 0xAD : -1;
}

/* ---- splitting ---------------------------------------------------------------------------- */

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static bool emit(pt_work *w, uint32_t off, uint32_t len) {
    if (!grow((void **)&w->spare, &w->cap_spare, w->n_pieces + 1, sizeof *w->spare)) return false;
    w->spare[w->n_pieces++] = (pt_piece){off, len};
    return true;
}

/* Length of the UTF-8 character at s (1 for an invalid lead byte), bounded by n. */
static size_t char_len(const unsigned char *s, size_t n) {
    size_t k = s[0] < 0xC0 ? 1 : s[0] < 0xE0 ? 2 : s[0] < 0xF0 ? 3 : 4;
    return k < n ? k : n;
}

/* The matches of re in subj[0..n) and the text between them, as pieces of the original text:
 * subject offset x is text offset base + map[x] (map NULL: the identity). */
static int split_one(const pcre2_code *re, pcre2_match_data *md, const char *subj, size_t n, uint32_t base,
                     const uint32_t *map, pt_work *w, nc_err *err) {
    size_t pos = 0, last = 0;
    while (pos < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)subj, n, pos, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return nc_fail(err, "pre-tokenizer: %s", (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        uint32_t ms = map ? map[s] : (uint32_t)s, me = map ? map[e] : (uint32_t)e, ml = map ? map[last] : (uint32_t)last;
        if (s > last && !emit(w, base + ml, ms - ml)) return nc_fail(err, "pre-tokenizer: out of memory");
        if (e > s) {
            if (!emit(w, base + ms, me - ms)) return nc_fail(err, "pre-tokenizer: out of memory");
            last = e;
            pos = e;
        } else pos = e + char_len((const unsigned char *)subj + e, n - e); /* an empty match: move on */
    }
    if (last < n) {
        uint32_t ml = map ? map[last] : (uint32_t)last, mn = map ? map[n] : (uint32_t)n;
        if (!emit(w, base + ml, mn - ml)) return nc_fail(err, "pre-tokenizer: out of memory");
    }
    return 0;
}

static void put_utf8(char *o, size_t *k, uint32_t cp) {
    if (cp < 0x80) o[(*k)++] = (char)cp;
    else {
        o[(*k)++] = (char)(0xC0 | (cp >> 6));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    }
}

/* A piece in byte-level form (every stand-in is below U+0800: at most two bytes). */
static int split_mapped(const pcre2_code *re, pcre2_match_data *md, const char *text, pt_piece pc, pt_work *w,
                        nc_err *err) {
    size_t need = 2 * (size_t)pc.len + 1;
    if (need > w->cap_mapped) {
        char *m = realloc(w->mapped, need);
        if (m) w->mapped = m;
        uint32_t *r = m ? realloc(w->raw_of, need * sizeof *r) : NULL;
        if (!r) return nc_fail(err, "pre-tokenizer: out of memory");
        w->raw_of = r;
        w->cap_mapped = need;
    }
    size_t k = 0;
    for (uint32_t i = 0; i < pc.len; i++) {
        size_t at = k;
        put_utf8(w->mapped, &k, bytelevel_cp((uint8_t)text[pc.off + i]));
        for (size_t j = at; j < k; j++) w->raw_of[j] = i;
    }
    w->raw_of[k] = pc.len;
    return split_one(re, md, w->mapped, k, pc.off, w->raw_of, w, err);
}

static int run_step(const pretok *p, int step, const char *text, pt_work *w, nc_err *err) {
    pt_piece *in = w->pieces;
    size_t n_in = w->n_pieces;
    w->n_pieces = 0;
    for (size_t i = 0; i < n_in; i++) {
        int rc = p->mapped[step] ? split_mapped(p->re[step], w->match, text, in[i], w, err)
                                 : split_one(p->re[step], w->match, text + in[i].off, in[i].len, in[i].off, NULL, w, err);
        if (rc) return -1;
    }
    /* the output was built in spare: swap the buffers */
    pt_piece *t = w->pieces;
    size_t tc = w->cap;
    w->pieces = w->spare;
    w->cap = w->cap_spare;
    w->spare = t;
    w->cap_spare = tc;
    return 0;
}

int pretok_split(const pretok *p, const char *text, size_t len, pt_work *w, nc_err *err) {
    if (len > UINT32_MAX - 1) return nc_fail(err, "pre-tokenizer: a text of %zu bytes is too long", len);
    if (!w->match && !(w->match = pcre2_match_data_create(1, NULL)))
        return nc_fail(err, "pre-tokenizer: out of memory");
    if (!grow((void **)&w->pieces, &w->cap, 1, sizeof *w->pieces)) return nc_fail(err, "pre-tokenizer: out of memory");
    w->pieces[0] = (pt_piece){0, (uint32_t)len};
    w->n_pieces = len > 0;
    for (int i = 0; i < p->n_steps; i++)
        if (run_step(p, i, text, w, err)) return -1;
    return 0;
}

void pt_work_free(pt_work *w) {
    free(w->pieces);
    free(w->spare);
    free(w->mapped);
    free(w->raw_of);
    pcre2_match_data_free(w->match);
    *w = (pt_work){0};
}
