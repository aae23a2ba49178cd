/* Arena, byte buffer, and the small part of Unicode that Python's str methods depend on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/internal.h"

/* ---- Arena -------------------------------------------------------------------------------- */
struct arena_chunk {
    arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *arena_alloc(arena *a, size_t size) {
    size = (size + 15) & ~(size_t)15;
    arena_chunk *c = a->head;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > 16000 ? size : 16000;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

char *arena_strndup(arena *a, const char *s, size_t n) {
    char *p = arena_alloc(a, n + 1);
    if (p && n) memcpy(p, s, n);
    return p;
}

void arena_free(arena *a) {
    while (a->head) {
        arena_chunk *next = a->head->next;
        free(a->head);
        a->head = next;
    }
}

/* ---- Byte buffer -------------------------------------------------------------------------- */
static int sbuf_reserve(sbuf *b, size_t extra) {
    if (b->limit && (extra > b->limit || b->len > b->limit - extra)) {
        b->over = true;
        return -1;
    }
    if (b->cap - b->len > extra) return 0; /* keeps room for a terminating NUL */
    size_t cap = b->cap ? b->cap : 64;
    while (cap - b->len <= extra) {
        if (cap > SIZE_MAX / 2) return -1;
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p) return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

int sbuf_put(sbuf *b, const char *s, size_t n) {
    if (sbuf_reserve(b, n)) return -1;
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

int sbuf_putc(sbuf *b, char c) { return sbuf_put(b, &c, 1); }

int sbuf_printf(sbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n < sizeof tmp) return sbuf_put(b, tmp, (size_t)n);
    if (sbuf_reserve(b, (size_t)n)) return -1;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void sbuf_free(sbuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- UTF-8 -------------------------------------------------------------------------------- */
uint32_t utf8_decode(const char *s, size_t n, size_t *width) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[0];
    size_t w = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (w <= 1 || w > n) {
        *width = 1;
        return c;
    }
    uint32_t cp = c & (0x7f >> w);
    for (size_t i = 1; i < w; i++) {
        if ((u[i] & 0xc0) != 0x80) {
            *width = 1;
            return c;
        }
        cp = (cp << 6) | (u[i] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[w] || cp > 0x10ffff) { /* overlong or out of range: treat as bytes */
        *width = 1;
        return c;
    }
    *width = w;
    return cp;
}

size_t utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

size_t utf8_count(const char *s, size_t n) {
    size_t count = 0, w;
    for (size_t i = 0; i < n; i += w, count++) utf8_decode(s + i, n - i, &w);
    return count;
}

size_t utf8_offset(const char *s, size_t n, size_t index) {
    size_t i = 0, w;
    for (size_t k = 0; k < index && i < n; k++, i += w) utf8_decode(s + i, n - i, &w);
    return i;
}

/* ---- Character classes and case ------------------------------------------------------------
 * Python's str methods are Unicode-aware. We cover ASCII, Latin-1, Latin Extended-A, Greek and
 * Cyrillic, which is what role names and chat text met in templates need; other scripts keep
 * their characters unchanged (as caseless scripts do in Python). */
bool uni_isspace(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

bool uni_is_linebreak(uint32_t c) {
    return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
           c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
}

bool uni_isdigit(uint32_t c) { return c >= '0' && c <= '9'; }

uint32_t uni_upper(uint32_t c) {
    if (c >= 'a' && c <= 'z') return c - 32;
    if (c < 0x80) return c;
    if (c == 0xb5) return 0x39c;
    if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 32;
    if (c == 0xff) return 0x178;
    if (c >= 0x100 && c <= 0x17f) {
        if (c == 0x131) return 'I';
        if (c == 0x17f) return 'S';
        bool odd_lower = (c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177);
        bool even_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
        if (odd_lower && (c & 1)) return c - 1;
        if (even_lower && !(c & 1)) return c - 1;
        return c;
    }
    if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) return c - 32;
    if (c == 0x3c2) return 0x3a3;
    if (c >= 0x3ac && c <= 0x3af) return c == 0x3ac ? 0x386 : c - 37;
    if (c == 0x3cc) return 0x38c;
    if (c == 0x3cd || c == 0x3ce) return c - 63;
    if (c >= 0x430 && c <= 0x44f) return c - 32;
    if (c >= 0x450 && c <= 0x45f) return c - 80;
    return c;
}

uint32_t uni_lower(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c < 0x80) return c;
    if ((c >= 0xc0 && c <= 0xde && c != 0xd7)) return c + 32;
    if (c == 0x178) return 0xff;
    if (c >= 0x100 && c <= 0x17f) {
        if (c == 0x130) return 'i';
        bool odd_lower = (c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177);
        bool even_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
        if (odd_lower && !(c & 1)) return c + 1;
        if (even_lower && (c & 1)) return c + 1;
        return c;
    }
    if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 32;
    if (c == 0x386) return 0x3ac;
    if (c >= 0x388 && c <= 0x38a) return c + 37;
    if (c == 0x38c) return 0x3cc;
    if (c == 0x38e || c == 0x38f) return c + 63;
    if (c >= 0x410 && c <= 0x42f) return c + 32;
    if (c >= 0x400 && c <= 0x40f) return c + 80;
    return c;
}

/* Letters: ASCII, the cased letters above, and (roughly) any other character outside the ASCII,
 * Latin-1 punctuation and general punctuation ranges, so that CJK text counts as words. */
bool uni_isalpha(uint32_t c) {
    if (c < 0x80) return (c | 32) >= 'a' && (c | 32) <= 'z';
    if (uni_upper(c) != c || uni_lower(c) != c) return true;
    if (c < 0xc0) return c == 0xaa || c == 0xba;
    if (c == 0xd7 || c == 0xf7) return false;
    if (uni_isspace(c)) return false;
    if (c >= 0x2000 && c <= 0x2bff) return false;  /* punctuation, symbols, arrows */
    if (c >= 0x3000 && c <= 0x303f) return false;  /* CJK punctuation */
    if (c >= 0xfe30 && c <= 0xfe4f) return false;
    if (c >= 0xff00 && c <= 0xff0f) return false;
    if (c >= 0x1f000) return false;                /* emoji and pictographs */
    return true;
}
