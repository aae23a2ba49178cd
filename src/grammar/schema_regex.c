/* An ECMAScript regular expression (JSON Schema's `pattern`) as the GBNF of the JSON string
 * bodies whose value it matches (see schema_parts.h). A recursive descent over the pattern
 * writes the GBNF as it goes: a character is written as JSON writes it inside a string ('"' and
 * '\' escaped, control characters as \n \t \r \b \f or \u00XX), a class as a GBNF class over
 * code points without the ones JSON escapes. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/schema_parts.h"

#define MAX_COUNT 1000

typedef struct rx {
    const char *s;
    size_t i, n;
    char *out;
    size_t len, cap;
    bool oom;
    nc_err *err;
    bool failed;
} rx;

static void put(rx *r, const char *s, size_t k) {
    if (r->oom) return;
    if (r->len + k + 1 > r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 256;
        while (cap < r->len + k + 1) cap *= 2;
        char *g = realloc(r->out, cap);
        if (!g) {
            r->oom = true;
            return;
        }
        r->out = g;
        r->cap = cap;
    }
    memcpy(r->out + r->len, s, k);
    r->len += k;
    r->out[r->len] = 0;
}

static void puts_(rx *r, const char *s) { put(r, s, strlen(s)); }

static void putcp(rx *r, const char *fmt, uint32_t cp) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, fmt, cp);
    puts_(r, tmp);
}

__attribute__((format(printf, 2, 3))) static int fail(rx *r, const char *fmt, ...) {
    if (r->failed) return -1;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    nc_fail(r->err, "pattern '%.80s': %s (at character %zu)", r->s, msg, r->i + 1);
    r->failed = true;
    return -1;
}

/* One UTF-8 character of the pattern. */
static uint32_t next_cp(rx *r) {
    const unsigned char *u = (const unsigned char *)r->s + r->i;
    int len = u[0] < 0x80 ? 1 : (u[0] & 0xE0) == 0xC0 ? 2 : (u[0] & 0xF0) == 0xE0 ? 3 : 4;
    uint32_t v = len == 1 ? u[0] : len == 2 ? u[0] & 0x1Fu : len == 3 ? u[0] & 0x0Fu : u[0] & 0x07u;
    for (int k = 1; k < len && r->i + (size_t)k < r->n; k++) v = v << 6 | (u[k] & 0x3Fu);
    r->i += (size_t)len;
    return v;
}

/* Code point cp as it appears in a JSON string, as a GBNF literal. */
static void literal_cp(rx *r, uint32_t cp) {
    static const char *const esc[] = {['\b'] = "\\\\b", ['\f'] = "\\\\f", ['\n'] = "\\\\n", ['\r'] = "\\\\r",
                                      ['\t'] = "\\\\t"};
    if (cp == '"') puts_(r, " \"\\\\\\\"\"");
    else if (cp == '\\') puts_(r, " \"\\\\\\\\\"");
    else if (cp < 0x20 && cp < sizeof esc / sizeof *esc && esc[cp]) puts_(r, " \""), puts_(r, esc[cp]), puts_(r, "\"");
    else if (cp < 0x20) putcp(r, " \"\\\\u%04X\"", cp);
    else putcp(r, " [\\U%08X]", cp);
}

/* ---- classes ---- */

typedef struct cls {
    uint32_t lo[128], hi[128];
    int n;
    bool negated;
} cls;

static int add_range(rx *r, cls *c, uint32_t lo, uint32_t hi) {
    if (c->n == 128) return fail(r, "a class with more than 128 ranges");
    c->lo[c->n] = lo, c->hi[c->n++] = hi;
    return 0;
}

/* The class escapes \d \w \s and their negations into c (negated ones only alone: [^\d]). */
static int class_escape(rx *r, char e, cls *c, bool *negated_set) {
    switch (e) {
    case 'd': return add_range(r, c, '0', '9');
    case 'w': return add_range(r, c, 'a', 'z') || add_range(r, c, 'A', 'Z') || add_range(r, c, '0', '9') ||
                     add_range(r, c, '_', '_');
    case 's': return add_range(r, c, ' ', ' '); /* the one blank JSON writes as itself */
    case 'D': case 'W': case 'S':
        *negated_set = true;
        return class_escape(r, (char)(e + 32), c, negated_set);
    }
    return 1;
}

/* An escape standing for one character: its code point; 0x110000 when e is not one. */
static uint32_t char_escape(rx *r, char e) {
    switch (e) {
    case 't': return '\t';
    case 'n': return '\n';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case 'x': case 'u': {
        int k = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        if (e == 'u' && r->i < r->n && r->s[r->i] == '{') {
            fail(r, "\\u{...} is not supported");
            return 0x110000;
        }
        for (int q = 0; q < k; q++) {
            char h = r->i < r->n ? r->s[r->i] : 0;
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) {
                fail(r, "\\%c needs %d hexadecimal digits", e, k);
                return 0x110000;
            }
            v = v * 16 + (uint32_t)d;
            r->i++;
        }
        return v;
    }
    }
    if (strchr("\\^$.|?*+()[]{}/-\"'", e) || e == ' ' || e == ',' || e == ':' || e == '=' || e == '!' || e == '<' ||
        e == '>' || e == '#' || e == '&' || e == '~' || e == '@' || e == '%' || e == ';' || e == '`')
        return (uint32_t)e;
    return 0x110000;
}

/* [lo, hi] without the control characters, '"' and '\', as GBNF class ranges. */
static void class_range(rx *r, uint32_t lo, uint32_t hi, bool *any) {
    if (lo < 0x20) lo = 0x20;
    if (lo > hi) return;
    if (lo <= '"' && '"' <= hi) {
        class_range(r, lo, '"' - 1, any);
        class_range(r, '"' + 1, hi, any);
        return;
    }
    if (lo <= '\\' && '\\' <= hi) {
        class_range(r, lo, '\\' - 1, any);
        class_range(r, '\\' + 1, hi, any);
        return;
    }
    char tmp[64];
    snprintf(tmp, sizeof tmp, lo == hi ? "\\U%08X" : "\\U%08X-\\U%08X", lo, hi);
    puts_(r, tmp);
    *any = true;
}

/* Writes the class as GBNF: its ranges without what JSON escapes (a negated class: with it
 * among the ranges it must not match). */
static int write_class(rx *r, const cls *c) {
    if (c->negated) {
        puts_(r, " [^\\\"\\\\\\x00-\\x1F");
        for (int k = 0; k < c->n; k++) {
            putcp(r, "\\U%08X", c->lo[k]);
            if (c->hi[k] != c->lo[k]) putcp(r, "-\\U%08X", c->hi[k]);
        }
        puts_(r, "]");
        return 0;
    }
    bool any = false;
    puts_(r, " [");
    for (int k = 0; k < c->n; k++) class_range(r, c->lo[k], c->hi[k], &any);
    puts_(r, "]");
    return any ? 0 : fail(r, "a class of only characters JSON escapes");
}

static int parse_class(rx *r) {
    cls c = {0};
    bool negated_escape = false;
    if (r->i < r->n && r->s[r->i] == '^') c.negated = true, r->i++;
    int items = 0;
    while (r->i < r->n && r->s[r->i] != ']') { /* ECMAScript: "[]" is an empty class */
        items++;
        uint32_t lo;
        if (r->s[r->i] == '\\') {
            r->i++;
            if (r->i >= r->n) return fail(r, "the pattern ends inside an escape");
            char e = r->s[r->i++];
            int k = class_escape(r, e, &c, &negated_escape);
            if (k < 0) return -1;
            if (k == 0) continue;
            if (e == 'b') lo = '\b';
            else if ((lo = char_escape(r, e)) == 0x110000) return r->failed ? -1 : fail(r, "the escape \\%c is not supported", e);
        } else {
            lo = next_cp(r);
        }
        uint32_t hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                r->i++;
                if (r->i >= r->n || (hi = char_escape(r, r->s[r->i++])) == 0x110000)
                    return r->failed ? -1 : fail(r, "a class range must end with a character");
            } else {
                hi = next_cp(r);
            }
            if (hi < lo) return fail(r, "a class range out of order");
        }
        if (add_range(r, &c, lo, hi)) return -1;
    }
    if (r->i >= r->n) return fail(r, "a class without its ']'");
    r->i++;
    if (negated_escape && (c.negated || items > 1)) /* [^\D] and [\Da]: complements of unions */
        return fail(r, "a negated escape (\\D \\W \\S) inside a class with other members is not supported");
    if (negated_escape) c.negated = true;
    return write_class(r, &c);
}

/* ---- expressions ---- */

static int alternation(rx *r, int depth);

/* One atom: written to the output. 1: the pattern ends here (')' or '|' or the end). */
static int atom(rx *r, int depth) {
    if (r->i >= r->n || r->s[r->i] == ')' || r->s[r->i] == '|') return 1;
    char ch = r->s[r->i];
    if (ch == '^') {
        if (r->i != 0) return fail(r, "'^' is supported only at the start");
        r->i++;
        puts_(r, " \"\"");
        return 0;
    }
    if (ch == '$') {
        r->i++;
        if (r->i != r->n) return fail(r, "'$' is supported only at the end");
        puts_(r, " \"\"");
        return 0;
    }
    if (ch == '(') {
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            const char *q = r->s + r->i;
            if (!strncmp(q, "?:", 2)) r->i += 2;
            else if (!strncmp(q, "?=", 2) || !strncmp(q, "?!", 2)) return fail(r, "lookahead (?= ... ) / (?! ... ) is not supported");
            else if (!strncmp(q, "?<=", 3) || !strncmp(q, "?<!", 3)) return fail(r, "lookbehind (?<= ... ) / (?<! ... ) is not supported");
            else if (q[1] == '<') { /* a named group: a group */
                const char *end = memchr(q, '>', r->n - r->i);
                if (!end) return fail(r, "a named group without its '>'");
                r->i += (size_t)(end - q) + 1;
            } else return fail(r, "the group (%.3s is not supported", q);
        }
        puts_(r, " (");
        if (alternation(r, depth + 1)) return -1;
        if (r->i >= r->n || r->s[r->i] != ')') return fail(r, "a group without its ')'");
        r->i++;
        puts_(r, " )");
        return 0;
    }
    if (ch == '[') {
        r->i++;
        return parse_class(r);
    }
    if (ch == '.') {
        r->i++;
        puts_(r, " [^\\\"\\\\\\x00-\\x1F\\U00002028\\U00002029]");
        return 0;
    }
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{') return fail(r, "'%c' repeats nothing", ch);
    if (ch == '\\') {
        r->i++;
        if (r->i >= r->n) return fail(r, "the pattern ends inside an escape");
        char e = r->s[r->i++];
        if (e >= '1' && e <= '9') return fail(r, "backreferences (\\%c) are not supported", e);
        if (e == 'b' || e == 'B') return fail(r, "word boundaries (\\%c) are not supported", e);
        if (e == 'p' || e == 'P') return fail(r, "Unicode property escapes (\\%c{...}) are not supported", e);
        if (e == 'k') return fail(r, "named backreferences (\\k<...>) are not supported");
        if (e == 'c') return fail(r, "control escapes (\\c) are not supported");
        cls c = {0};
        bool negated = false;
        int k = class_escape(r, e, &c, &negated);
        if (k < 0) return -1;
        if (k == 0) {
            c.negated = negated;
            return write_class(r, &c);
        }
        uint32_t cp = char_escape(r, e);
        if (cp == 0x110000) return r->failed ? -1 : fail(r, "the escape \\%c is not supported", e);
        literal_cp(r, cp);
        return 0;
    }
    literal_cp(r, next_cp(r));
    return 0;
}

/* A count after an atom: {n}, {n,}, {n,m}; *min and *max (-1: none). 0 when there is none
 * (a '{' that does not start one is a literal in ECMAScript; refused here as unclear). */
static int count(rx *r, long *min, long *max) {
    char ch = r->i < r->n ? r->s[r->i] : 0;
    if (ch == '*') *min = 0, *max = -1;
    else if (ch == '+') *min = 1, *max = -1;
    else if (ch == '?') *min = 0, *max = 1;
    else if (ch == '{') {
        char *end;
        const char *p = r->s + r->i + 1;
        long a = strtol(p, &end, 10), b = a;
        if (end == p) return fail(r, "'{' must start a count {n}, {n,} or {n,m} (write \\{ for the character)");
        if (*end == ',') {
            p = end + 1;
            b = strtol(p, &end, 10);
            if (end == p) b = -1;
        }
        if (*end != '}') return fail(r, "a count without its '}'");
        if (a > MAX_COUNT || b > MAX_COUNT) return fail(r, "counts above %d are not supported", MAX_COUNT);
        if (b >= 0 && b < a) return fail(r, "a count {%ld,%ld} out of order", a, b);
        *min = a, *max = b;
        r->i = (size_t)(end - r->s);
    } else return 0;
    r->i++;
    if (r->i < r->n && r->s[r->i] == '?') r->i++; /* lazy: the same strings */
    return 1;
}

static int sequence(rx *r, int depth) {
    bool empty = true;
    for (;;) {
        size_t mark = r->len;
        int a = atom(r, depth);
        if (a < 0) return -1;
        if (a > 0) break;
        empty = false;
        long min = 0, max = -1;
        int q = count(r, &min, &max);
        if (q < 0) return -1;
        if (q == 0) continue;
        /* wrap what the atom wrote: ( ... ){min,max} */
        size_t k = r->len - mark;
        char *body = malloc(k + 1);
        if (!body) return fail(r, "out of memory");
        memcpy(body, r->out + mark, k);
        body[k] = 0;
        r->len = mark;
        puts_(r, " (");
        puts_(r, body);
        free(body);
        char tmp[48];
        if (max < 0) snprintf(tmp, sizeof tmp, " ){%ld,}", min);
        else snprintf(tmp, sizeof tmp, " ){%ld,%ld}", min, max);
        puts_(r, tmp);
    }
    if (empty) puts_(r, " \"\"");
    return 0;
}

static int alternation(rx *r, int depth) {
    if (depth > 64) return fail(r, "groups nested deeper than 64");
    for (;;) {
        if (sequence(r, depth)) return -1;
        if (r->i >= r->n || r->s[r->i] != '|') return 0;
        r->i++;
        puts_(r, " |");
    }
}

char *gr_regex_string_body(const char *pattern, nc_err *err) {
    rx r = {.s = pattern, .n = strlen(pattern), .err = err};
    puts_(&r, "(");
    int rc = alternation(&r, 0);
    if (!rc && r.i < r.n) rc = fail(&r, "an unmatched ')'");
    puts_(&r, " )");
    if (!rc && r.oom) rc = nc_fail(err, "out of memory");
    if (rc) {
        free(r.out);
        return NULL;
    }
    return r.out;
}
