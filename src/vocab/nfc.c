/* Unicode Normalization Form C (UAX #15), for tokenizer.json files whose normalizer is NFC
 * (Qwen2, Qwen3, GPT-NeoX): canonical decomposition, canonical ordering of combining marks,
 * then canonical composition. Tables: nfc_tables.h, generated from the Unicode data. */
#include <stdlib.h>
#include <string.h>

#include "vocab/vocab_impl.h"

typedef struct nfc_ccc_range {
    uint32_t first, last;
    uint8_t ccc;
} nfc_ccc_range;

typedef struct nfc_decomp {
    uint32_t cp, a, b; /* cp -> a b (b 0: a alone) */
} nfc_decomp;

typedef struct nfc_pair {
    uint32_t a, b, cp; /* a b -> cp; sorted by (a, b) */
} nfc_pair;

#include "vocab/nfc_tables.h"

#define N_OF(a) (sizeof a / sizeof a[0])

/* A byte that is not part of well-formed UTF-8 travels as RAW + byte: a starter that neither
 * decomposes nor composes, written back as the byte itself. */
#define RAW 0x110000u

/* Hangul syllables decompose and compose by arithmetic (Unicode 3.12). */
enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7 };
enum { L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

static uint8_t ccc_of(uint32_t cp) {
    if (cp < 0x300) return 0;
    size_t lo = 0, hi = N_OF(NFC_CCC);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < NFC_CCC[mid].first) hi = mid;
        else if (cp > NFC_CCC[mid].last) lo = mid + 1;
        else return NFC_CCC[mid].ccc;
    }
    return 0;
}

static const nfc_decomp *decomp_of(uint32_t cp) {
    size_t lo = 0, hi = N_OF(NFC_DECOMP);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < NFC_DECOMP[mid].cp) hi = mid;
        else if (cp > NFC_DECOMP[mid].cp) lo = mid + 1;
        else return &NFC_DECOMP[mid];
    }
    return NULL;
}

/* The primary composite of a and b, or 0. */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a - L_BASE < L_COUNT && b - V_BASE < V_COUNT) return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a - S_BASE < S_COUNT && (a - S_BASE) % T_COUNT == 0 && b - T_BASE - 1 < T_COUNT - 1) return a + (b - T_BASE);
    size_t lo = 0, hi = N_OF(NFC_COMP);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const nfc_pair *p = &NFC_COMP[mid];
        if (a < p->a || (a == p->a && b < p->b)) hi = mid;
        else if (a > p->a || b > p->b) lo = mid + 1;
        else return p->cp;
    }
    return 0;
}

/* ---- code point buffer ------------------------------------------------------------------------- */

typedef struct cp_buf {
    uint32_t *c;
    size_t n, cap;
} cp_buf;

static bool push(cp_buf *b, uint32_t cp) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        uint32_t *c = realloc(b->c, cap * sizeof *c);
        if (!c) return false;
        b->c = c;
        b->cap = cap;
    }
    b->c[b->n++] = cp;
    return true;
}

/* Full canonical decomposition (the table holds one level; recursion depth is small). */
static bool decompose(cp_buf *b, uint32_t cp) {
    if (cp - S_BASE < S_COUNT) {
        uint32_t s = cp - S_BASE, t = s % T_COUNT;
        return push(b, L_BASE + s / N_COUNT) && push(b, V_BASE + (s % N_COUNT) / T_COUNT) &&
               (t == 0 || push(b, T_BASE + t));
    }
    const nfc_decomp *d = cp >= 0xC0 ? decomp_of(cp) : NULL;
    if (!d) return push(b, cp);
    return decompose(b, d->a) && (d->b == 0 || decompose(b, d->b));
}

/* The code point of the well-formed UTF-8 character at s (length *k), or RAW + the byte
 * (*k = 1) where the bytes are not well-formed (overlongs, surrogates, truncation). */
static uint32_t next_cp(const unsigned char *s, size_t n, size_t *k) {
    unsigned char c = s[0];
    size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    *k = 1;
    if (len == 1) return c;
    if (len == 0 || len > n) return RAW + c;
    unsigned char lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (s[1] < lo || s[1] > hi) return RAW + c;
    uint32_t cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return RAW + c;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    *k = len;
    return cp;
}

/* Canonical ordering: each run of non-starters sorted by combining class, stably. */
static void reorder(uint32_t *c, size_t n) {
    for (size_t i = 1; i < n; i++) {
        uint8_t k = ccc_of(c[i]);
        for (size_t j = i; k != 0 && j > 0; j--) {
            uint8_t p = ccc_of(c[j - 1]);
            if (p == 0 || p <= k) break;
            uint32_t t = c[j];
            c[j] = c[j - 1];
            c[j - 1] = t;
        }
    }
}

/* Canonical composition in place: a character joins the last starter unless something between
 * them is a starter or has a combining class at least its own (it is "blocked"). */
static size_t compose(uint32_t *c, size_t n) {
    size_t o = 0, starter = 0;
    bool have_starter = false;
    int last = -1; /* class of the last character kept after the starter, -1 if none */
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = c[i];
        int k = ccc_of(cp);
        bool blocked = last >= 0 && (last == 0 || last >= k);
        uint32_t p = have_starter && !blocked ? compose_pair(c[starter], cp) : 0;
        if (p) {
            c[starter] = p;
            continue;
        }
        if (k == 0) {
            starter = o;
            have_starter = true;
            last = -1;
        } else last = k;
        c[o++] = cp;
    }
    return o;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp >= RAW) {
        o[0] = (char)(cp - RAW);
        return 1;
    }
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int nfc_normalize(const char *text, size_t len, char **out, size_t *out_len) {
    *out = NULL;
    size_t i = 0;
    while (i < len && (unsigned char)text[i] < 0xCC) i++; /* below U+0300 nothing changes */
    if (i == len) return 0;
    cp_buf b = {0};
    bool ok = true;
    for (size_t at = 0, k; ok && at < len; at += k) ok = decompose(&b, next_cp((const unsigned char *)text + at, len - at, &k));
    char *o = ok ? malloc(4 * b.n + 1) : NULL;
    if (o) {
        reorder(b.c, b.n);
        size_t n = compose(b.c, b.n), w = 0;
        for (size_t j = 0; j < n; j++) w += put_utf8(o + w, b.c[j]);
        *out = o;
        *out_len = w;
    }
    free(b.c);
    return o ? 0 : -1;
}
