/* GBNF text -> rule table. The format is llama.cpp's (grammars/README.md there):
 *   name ::= alternatives      # a comment
 * with `|` between alternatives, `( )` groups, postfix `*` `+` `?` `{m}` `{m,}` `{m,n}` `{,n}`,
 * string literals "..." and character classes [a-z] / [^...] with the escapes \n \t \r \\ \"
 * \' \[ \] \- \/ \^ \xHH \uHHHH \UHHHHHHHH, `.` for any character, and rule names of letters,
 * digits, '-' and '_'. A rule may span lines: it ends where the next `name ::=` starts.
 *
 * Groups and repetitions become generated rules named "<rule>~<n>" (no
 * user's name can collide: '~' is not a name character), so the matcher sees only
 * character classes and references: x* is S ::= x S | (empty), x{2,4} is x x O2 with
 * O2 ::= x O1 | (empty), O1 ::= x | (empty). Everything is bounded (grammar.h's GR_MAX_*), and
 * left recursion, which would send the matcher's expansion round in circles, is refused. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

typedef struct evec {
    gr_elem *e;
    int32_t n, cap;
} evec;

typedef struct rule_b {
    char *name;
    evec body;        /* alternatives, each ended by GR_END */
    int32_t n_alts;
    int32_t n_generated;  /* rules generated under this one's name */
    bool defined;
    size_t first_use; /* where it was first referenced (for "undefined rule") */
} rule_b;

typedef struct parser {
    const char *s;
    size_t len, pos;
    rule_b *rules;
    int32_t n_rules, cap_rules;
    int32_t *slots;   /* hash of the named (not generated) rules: index + 1, 0 empty */
    size_t n_slots, n_named;
    gr_range *ranges;
    int32_t n_ranges, cap_ranges;
    int64_t n_elems;
    int depth;
    nc_poll *poll;    /* asked once per rule (NULL: never) */
    nc_err *err;
} parser;

/* ---- errors with line:column ---- */

static void line_col(const parser *p, size_t pos, int *line, int *col) {
    *line = 1;
    size_t start = 0;
    for (size_t i = 0; i < pos && i < p->len; i++)
        if (p->s[i] == '\n') (*line)++, start = i + 1;
    *col = (int)(pos - start) + 1;
}

__attribute__((format(printf, 3, 4))) static int fail_at(parser *p, size_t pos, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    line_col(p, pos, &line, &col);
    return nc_fail(p->err, "grammar %d:%d: %s", line, col, msg);
}

/* ---- building blocks ---- */

static int push_elem(parser *p, evec *v, gr_elem e) {
    if (++p->n_elems > GR_MAX_ELEMS)
        return fail_at(p, p->pos, "the grammar expands to more than %d elements", GR_MAX_ELEMS);
    if (v->n == v->cap) {
        int32_t cap = v->cap ? v->cap * 2 : 8;
        gr_elem *g = realloc(v->e, (size_t)cap * sizeof *g);
        if (!g) return nc_fail(p->err, "out of memory");
        v->e = g;
        v->cap = cap;
    }
    v->e[v->n++] = e;
    return 0;
}

static int push_range(parser *p, uint32_t lo, uint32_t hi) {
    if (p->n_ranges == p->cap_ranges) {
        if (p->n_ranges >= GR_MAX_ELEMS) return fail_at(p, p->pos, "too many character ranges");
        int32_t cap = p->cap_ranges ? p->cap_ranges * 2 : 64;
        gr_range *r = realloc(p->ranges, (size_t)cap * sizeof *r);
        if (!r) return nc_fail(p->err, "out of memory");
        p->ranges = r;
        p->cap_ranges = cap;
    }
    p->ranges[p->n_ranges++] = (gr_range){lo, hi};
    return 0;
}

static int32_t add_rule(parser *p, const char *name, size_t n, size_t pos) {
    if (p->n_rules >= GR_MAX_RULES) return fail_at(p, pos, "more than %d rules", GR_MAX_RULES);
    if (p->n_rules == p->cap_rules) {
        int32_t cap = p->cap_rules ? p->cap_rules * 2 : 16;
        rule_b *r = realloc(p->rules, (size_t)cap * sizeof *r);
        if (!r) return nc_fail(p->err, "out of memory");
        p->rules = r;
        p->cap_rules = cap;
    }
    rule_b *r = &p->rules[p->n_rules];
    *r = (rule_b){.name = strndup(name, n), .first_use = pos};
    if (!r->name) return nc_fail(p->err, "out of memory");
    return p->n_rules++;
}

static uint64_t name_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* The slot of a name: its rule's, or the empty one where it would go. */
static size_t name_slot(const parser *p, const char *name, size_t n) {
    size_t i = name_hash(name, n) & (p->n_slots - 1);
    for (;; i = (i + 1) & (p->n_slots - 1)) {
        int32_t r = p->slots[i] - 1;
        if (r < 0 || (strlen(p->rules[r].name) == n && !memcmp(p->rules[r].name, name, n))) return i;
    }
}

static int32_t find_rule(const parser *p, const char *name, size_t n) {
    return p->n_slots ? p->slots[name_slot(p, name, n)] - 1 : -1;
}

/* A rule the grammar names (the hash keeps lookups constant-time whatever the rule count). */
static int32_t add_named_rule(parser *p, const char *name, size_t n, size_t pos) {
    if (2 * (p->n_named + 1) > p->n_slots) {
        size_t cap = p->n_slots ? 2 * p->n_slots : 64;
        int32_t *old = p->slots, *slots = calloc(cap, sizeof *slots);
        if (!slots) return nc_fail(p->err, "out of memory");
        size_t old_n = p->n_slots;
        p->slots = slots;
        p->n_slots = cap;
        for (size_t i = 0; i < old_n; i++)
            if (old[i]) {
                const char *nm = p->rules[old[i] - 1].name;
                p->slots[name_slot(p, nm, strlen(nm))] = old[i];
            }
        free(old);
    }
    int32_t r = add_rule(p, name, n, pos);
    if (r < 0) return -1;
    p->slots[name_slot(p, name, n)] = r + 1;
    p->n_named++;
    return r;
}

/* A rule for a group or a repetition, named after the rule being defined. */
static int32_t generated_rule(parser *p, int32_t parent) {
    char name[160];
    snprintf(name, sizeof name, "%.120s~%d", p->rules[parent].name, ++p->rules[parent].n_generated);
    int32_t r = add_rule(p, name, strlen(name), p->pos);
    if (r >= 0) p->rules[r].defined = true;
    return r;
}

/* Append one alternative (elements, then GR_END) to a rule. */
static int add_alt(parser *p, int32_t rule, const gr_elem *e, int32_t n) {
    evec *body = &p->rules[rule].body;
    for (int32_t i = 0; i < n; i++)
        if (push_elem(p, body, e[i])) return -1;
    p->rules[rule].n_alts++;
    return push_elem(p, &p->rules[rule].body, (gr_elem){.kind = GR_END});
}

/* ---- lexing ---- */

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static void skip_space(parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') p->pos++;
        else if (c == '#')
            while (p->pos < p->len && p->s[p->pos] != '\n') p->pos++;
        else break;
    }
}

static size_t name_len(const parser *p, size_t pos) {
    size_t n = 0;
    while (pos + n < p->len && is_name_char(p->s[pos + n])) n++;
    return n;
}

/* At `name ::=` (the start of the next rule)? */
static bool at_rule_start(const parser *p) {
    size_t n = name_len(p, p->pos);
    if (n == 0) return false;
    size_t i = p->pos + n;
    while (i < p->len && (p->s[i] == ' ' || p->s[i] == '\t')) i++;
    return p->len - i >= 3 && !memcmp(p->s + i, "::=", 3);
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One UTF-8 character of the grammar's text. */
static int read_utf8(parser *p, uint32_t *cp) {
    const uint8_t *s = (const uint8_t *)p->s + p->pos;
    size_t left = p->len - p->pos;
    int n = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || (size_t)n > left) return fail_at(p, p->pos, "invalid UTF-8");
    uint32_t v = n == 1 ? s[0] : n == 2 ? s[0] & 0x1Fu : n == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return fail_at(p, p->pos, "invalid UTF-8");
        v = v << 6 | (s[i] & 0x3Fu);
    }
    static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min_of[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail_at(p, p->pos, "invalid UTF-8");
    p->pos += (size_t)n;
    *cp = v;
    return 0;
}

/* One character of a literal or class: an escape or a UTF-8 character. */
static int read_char(parser *p, uint32_t *cp) {
    if (p->pos >= p->len) return fail_at(p, p->pos, "unexpected end of grammar");
    if (p->s[p->pos] != '\\') return read_utf8(p, cp);
    size_t at = p->pos++;
    if (p->pos >= p->len) return fail_at(p, at, "unexpected end of grammar after '\\'");
    char c = p->s[p->pos++];
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = p->pos < p->len ? hex_value(p->s[p->pos]) : -1;
            if (h < 0) return fail_at(p, at, "\\%c needs %d hex digits", c, digits);
            v = v << 4 | (uint32_t)h;
            p->pos++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return fail_at(p, at, "\\%c escape U+%X is not a Unicode scalar value", c, v);
        *cp = v;
        return 0;
    }
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': case '^': *cp = (uint8_t)c; return 0;
    default: return fail_at(p, at, "unknown escape '\\%c'", c);
    }
}

static int parse_int(parser *p, long *v) {
    size_t at = p->pos;
    *v = 0;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        *v = *v * 10 + (p->s[p->pos++] - '0');
        if (*v > GR_MAX_REPEAT) return fail_at(p, at, "repetition count above %d", GR_MAX_REPEAT);
    }
    return p->pos > at ? 0 : fail_at(p, at, "expected a number");
}

/* ---- items ---- */

static int parse_alternatives(parser *p, int32_t rule);

static int parse_literal(parser *p, evec *out) {
    size_t at = p->pos++;
    while (p->pos < p->len && p->s[p->pos] != '"') {
        uint32_t cp;
        if (read_char(p, &cp) || push_range(p, cp, cp) ||
            push_elem(p, out, (gr_elem){.kind = GR_CHAR, .a = p->n_ranges - 1, .b = 1}))
            return -1;
    }
    if (p->pos >= p->len) return fail_at(p, at, "unterminated string literal");
    p->pos++;
    return 0;
}

static int parse_class(parser *p, evec *out) {
    size_t at = p->pos++;
    bool neg = p->pos < p->len && p->s[p->pos] == '^';
    if (neg) p->pos++;
    int32_t first = p->n_ranges;
    while (p->pos < p->len && p->s[p->pos] != ']') {
        uint32_t lo, hi;
        if (read_char(p, &lo)) return -1;
        hi = lo;
        if (p->pos + 1 < p->len && p->s[p->pos] == '-' && p->s[p->pos + 1] != ']') {
            p->pos++;
            size_t at_hi = p->pos;
            if (read_char(p, &hi)) return -1;
            if (hi < lo) return fail_at(p, at_hi, "character range U+%X-U+%X is backwards", lo, hi);
        }
        if (push_range(p, lo, hi)) return -1;
    }
    if (p->pos >= p->len) return fail_at(p, at, "unterminated character class");
    p->pos++;
    if (p->n_ranges == first) return fail_at(p, at, "empty character class");
    return push_elem(p, out, (gr_elem){.kind = GR_CHAR, .negated = neg, .a = first, .b = p->n_ranges - first});
}

static int parse_group(parser *p, int32_t rule, evec *out) {
    size_t at = p->pos++;
    if (++p->depth > GR_MAX_NEST) return fail_at(p, at, "parentheses nested deeper than %d", GR_MAX_NEST);
    int32_t g = generated_rule(p, rule);
    if (g < 0 || parse_alternatives(p, g)) return -1;
    skip_space(p);
    if (p->pos >= p->len || p->s[p->pos] != ')') return fail_at(p, at, "'(' is not closed");
    p->pos++;
    p->depth--;
    return push_elem(p, out, (gr_elem){.kind = GR_REF, .a = g});
}

static int parse_ref(parser *p, evec *out) {
    size_t n = name_len(p, p->pos);
    int32_t r = find_rule(p, p->s + p->pos, n);
    if (r < 0 && (r = add_named_rule(p, p->s + p->pos, n, p->pos)) < 0) return -1;
    p->pos += n;
    return push_elem(p, out, (gr_elem){.kind = GR_REF, .a = r});
}

/* The operand of a postfix operator as one element: a literal of several characters is first
 * wrapped into a rule of its own. */
static int single_operand(parser *p, int32_t rule, evec *out, int32_t start, gr_elem *x) {
    if (out->n - start == 1) {
        *x = out->e[start];
    } else {
        int32_t w = generated_rule(p, rule);
        if (w < 0 || add_alt(p, w, out->e + start, out->n - start)) return -1;
        *x = (gr_elem){.kind = GR_REF, .a = w};
    }
    out->n = start;
    return 0;
}

/* x{min,max} (max < 0: unbounded) replacing the item at out[start..). */
static int repeat(parser *p, int32_t rule, evec *out, int32_t start, long min, long max) {
    gr_elem x;
    if (out->n == start) return 0; /* "" repeated is still empty */
    if (single_operand(p, rule, out, start, &x)) return -1;
    for (long i = 0; i < min; i++)
        if (push_elem(p, out, x)) return -1;
    if (max < 0) { /* S ::= x S | (empty) */
        int32_t s = generated_rule(p, rule);
        if (s < 0) return -1;
        gr_elem alt[2] = {x, {.kind = GR_REF, .a = s}};
        if (add_alt(p, s, alt, 2) || add_alt(p, s, NULL, 0)) return -1;
        return push_elem(p, out, (gr_elem){.kind = GR_REF, .a = s});
    }
    int32_t prev = -1; /* O_k ::= x O_{k-1} | (empty) */
    for (long k = min; k < max; k++) {
        int32_t o = generated_rule(p, rule);
        if (o < 0) return -1;
        gr_elem alt[2] = {x, {.kind = GR_REF, .a = prev}};
        if (add_alt(p, o, alt, prev < 0 ? 1 : 2) || add_alt(p, o, NULL, 0)) return -1;
        prev = o;
    }
    return prev < 0 ? 0 : push_elem(p, out, (gr_elem){.kind = GR_REF, .a = prev});
}

/* {m} {m,} {m,n} {,n} */
static int parse_braces(parser *p, long *min, long *max) {
    size_t at = p->pos++;
    skip_space(p);
    *min = 0;
    if (p->pos < p->len && p->s[p->pos] != ',' && parse_int(p, min)) return -1;
    skip_space(p);
    *max = *min;
    if (p->pos < p->len && p->s[p->pos] == ',') {
        p->pos++;
        skip_space(p);
        *max = -1;
        if (p->pos < p->len && p->s[p->pos] != '}' && parse_int(p, max)) return -1;
        skip_space(p);
    }
    if (p->pos >= p->len || p->s[p->pos] != '}') return fail_at(p, at, "'{' is not closed by '}'");
    p->pos++;
    if (*max >= 0 && *max < *min) return fail_at(p, at, "repetition {%ld,%ld}: the maximum is below the minimum", *min, *max);
    return 0;
}

static int parse_postfix(parser *p, int32_t rule, evec *out, int32_t start) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        long min, max;
        if (c == '*') min = 0, max = -1, p->pos++;
        else if (c == '+') min = 1, max = -1, p->pos++;
        else if (c == '?') min = 0, max = 1, p->pos++;
        else if (c == '{') {
            if (parse_braces(p, &min, &max)) return -1;
        } else return 0;
        if (repeat(p, rule, out, start, min, max)) return -1; /* a further operator applies to all of it */
    }
    return 0;
}

static int parse_sequence(parser *p, int32_t rule, evec *out) {
    for (;;) {
        skip_space(p);
        if (p->pos >= p->len || at_rule_start(p)) return 0;
        char c = p->s[p->pos];
        if (c == '|' || c == ')') return 0;
        int32_t start = out->n;
        int rc;
        if (c == '"') rc = parse_literal(p, out);
        else if (c == '[') rc = parse_class(p, out);
        else if (c == '.') {
            p->pos++;
            rc = push_range(p, 0, 0x10FFFF) ||
                 push_elem(p, out, (gr_elem){.kind = GR_CHAR, .a = p->n_ranges - 1, .b = 1});
        } else if (c == '(') rc = parse_group(p, rule, out);
        else if (is_name_char(c)) rc = parse_ref(p, out);
        else return fail_at(p, p->pos, "unexpected '%c'", c);
        if (rc || parse_postfix(p, rule, out, start)) return -1;
    }
}

static int parse_alternatives(parser *p, int32_t rule) {
    evec seq = {0};
    for (;;) {
        seq.n = 0;
        if (parse_sequence(p, rule, &seq) || add_alt(p, rule, seq.e, seq.n)) {
            free(seq.e);
            return -1;
        }
        skip_space(p);
        if (p->pos >= p->len || p->s[p->pos] != '|') break;
        p->pos++;
    }
    free(seq.e);
    return 0;
}

static int parse_rule(parser *p) {
    size_t at = p->pos, n = name_len(p, p->pos);
    if (n == 0) return fail_at(p, at, "expected a rule name");
    int32_t r = find_rule(p, p->s + at, n);
    if (r < 0 && (r = add_named_rule(p, p->s + at, n, at)) < 0) return -1;
    if (p->rules[r].defined) return fail_at(p, at, "rule '%s' is defined twice", p->rules[r].name);
    p->rules[r].defined = true;
    p->pos += n;
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t')) p->pos++;
    if (p->len - p->pos < 3 || memcmp(p->s + p->pos, "::=", 3)) return fail_at(p, p->pos, "expected '::=' after '%s'", p->rules[r].name);
    p->pos += 3;
    if (parse_alternatives(p, r)) return -1;
    skip_space(p);
    if (p->pos < p->len && p->s[p->pos] == ')') return fail_at(p, p->pos, "')' without '('");
    return 0;
}

/* ---- checks on the whole grammar ---- */

/* Which rules can match the empty string: a worklist over the alternatives' counts of references
 * not yet known to be nullable. */
static int nullable_rules(const gr_grammar *g, bool *nullable, nc_err *err) {
    int32_t n_alts = g->rule_alt[g->n_rules];
    int32_t *pending = calloc((size_t)n_alts + 1, sizeof *pending), *alt_rule = malloc(((size_t)n_alts + 1) * sizeof *alt_rule);
    int32_t *occ_start = calloc((size_t)g->n_rules + 1, sizeof *occ_start), *occ = malloc(((size_t)g->n_elems + 1) * sizeof *occ);
    int32_t *work = malloc(((size_t)g->n_rules + 1) * sizeof *work), n_work = 0;
    int rc = -1;
    if (!pending || !alt_rule || !occ_start || !occ || !work) { nc_fail(err, "out of memory"); goto done; }
    for (int32_t r = 0; r < g->n_rules; r++)
        for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            alt_rule[a] = r;
            for (const gr_elem *e = g->elems + g->alt_start[a]; e->kind != GR_END; e++)
                if (e->kind == GR_CHAR) pending[a] = -1;
            if (pending[a] < 0) continue; /* a character: never empty */
            for (const gr_elem *e = g->elems + g->alt_start[a]; e->kind != GR_END; e++) {
                pending[a]++;
                occ_start[e->a + 1]++;
            }
        }
    for (int32_t r = 0; r < g->n_rules; r++) occ_start[r + 1] += occ_start[r];
    int32_t *fill = calloc((size_t)g->n_rules, sizeof *fill);
    if (!fill) { nc_fail(err, "out of memory"); goto done; }
    for (int32_t a = 0; a < n_alts; a++) {
        if (pending[a] < 0) continue;
        for (const gr_elem *e = g->elems + g->alt_start[a]; e->kind != GR_END; e++) occ[occ_start[e->a] + fill[e->a]++] = a;
    }
    free(fill);
    for (int32_t a = 0; a < n_alts; a++)
        if (pending[a] == 0 && !nullable[alt_rule[a]]) nullable[alt_rule[a]] = true, work[n_work++] = alt_rule[a];
    while (n_work > 0) {
        int32_t r = work[--n_work];
        for (int32_t i = occ_start[r]; i < occ_start[r + 1]; i++) {
            int32_t a = occ[i];
            if (--pending[a] == 0 && !nullable[alt_rule[a]]) nullable[alt_rule[a]] = true, work[n_work++] = alt_rule[a];
        }
    }
    rc = 0;
done:
    free(pending), free(alt_rule), free(occ_start), free(occ), free(work);
    return rc;
}

/* Left recursion: rule A can reach A through references at the start of alternatives (past
 * nullable ones) without consuming a character. A depth-first search over those edges. */
static int check_left_recursion(const gr_grammar *g, const bool *nullable, nc_err *err) {
    uint8_t *color = calloc((size_t)g->n_rules, 1); /* 0 new, 1 on the path, 2 done */
    typedef struct frame { int32_t rule, alt, i; } frame; /* i: the element, -1 once the alternative is done */
    frame *st = malloc(((size_t)g->n_rules + 1) * sizeof *st);
    int rc = 0;
    if (!color || !st) { free(color), free(st); return nc_fail(err, "out of memory"); }
    for (int32_t r0 = 0; r0 < g->n_rules && rc == 0; r0++) {
        if (color[r0]) continue;
        int32_t top = 0;
        st[0] = (frame){r0, g->rule_alt[r0], g->alt_start[g->rule_alt[r0]]};
        color[r0] = 1;
        while (top >= 0 && rc == 0) {
            frame *f = &st[top];
            int32_t end = g->rule_alt[f->rule + 1];
            if (f->alt >= end) { color[f->rule] = 2; top--; continue; }
            if (f->i < 0 || g->elems[f->i].kind != GR_REF) {
                f->alt++;
                f->i = f->alt < end ? g->alt_start[f->alt] : -1;
                continue;
            }
            int32_t t = g->elems[f->i].a;
            f->i = nullable[t] ? f->i + 1 : -1; /* past an empty-able reference the next element also starts */
            if (color[t] == 1)
                rc = nc_fail(err, "grammar: rule '%s' is left-recursive (it can reach itself without consuming a character)",
                             g->names[t]);
            else if (color[t] == 0) {
                color[t] = 1;
                st[++top] = (frame){t, g->rule_alt[t], g->alt_start[g->rule_alt[t]]};
            }
        }
    }
    free(color), free(st);
    return rc;
}

/* ---- assembling the table ---- */

static int flatten(parser *p, gr_grammar *g) {
    int32_t n_alts = 0;
    for (int32_t r = 0; r < p->n_rules; r++) n_alts += p->rules[r].n_alts;
    g->n_rules = p->n_rules;
    g->n_elems = (int32_t)p->n_elems;
    g->elems = malloc(((size_t)g->n_elems + 1) * sizeof *g->elems);
    g->alt_start = malloc(((size_t)n_alts + 1) * sizeof *g->alt_start);
    g->rule_alt = malloc(((size_t)p->n_rules + 1) * sizeof *g->rule_alt);
    g->names = calloc((size_t)p->n_rules, sizeof *g->names);
    if (!g->elems || !g->alt_start || !g->rule_alt || !g->names) return nc_fail(p->err, "out of memory");
    int32_t ne = 0, na = 0;
    for (int32_t r = 0; r < p->n_rules; r++) {
        rule_b *rb = &p->rules[r];
        g->names[r] = rb->name;
        rb->name = NULL;
        g->rule_alt[r] = na;
        for (int32_t i = 0; i < rb->body.n; i++) {
            if (i == 0 || rb->body.e[i - 1].kind == GR_END) g->alt_start[na++] = ne;
            g->elems[ne++] = rb->body.e[i];
        }
    }
    g->rule_alt[p->n_rules] = na;
    g->alt_start[na] = ne;
    g->n_elems = ne;
    g->ranges = p->ranges;
    g->n_ranges = p->n_ranges;
    p->ranges = NULL;
    return 0;
}

static int check_defined(parser *p) {
    for (int32_t r = 0; r < p->n_rules; r++)
        if (!p->rules[r].defined)
            return fail_at(p, p->rules[r].first_use, "rule '%s' is used but not defined", p->rules[r].name);
    return 0;
}

static void free_parser(parser *p) {
    for (int32_t r = 0; r < p->n_rules; r++) {
        free(p->rules[r].name);
        free(p->rules[r].body.e);
    }
    free(p->rules);
    free(p->slots);
    free(p->ranges);
}

int gr_parse(gr_grammar **out, const char *text, size_t len, nc_err *err) {
    return gr_parse_watched(out, text, len, NULL, err);
}

int gr_parse_watched(gr_grammar **out, const char *text, size_t len, nc_poll *poll, nc_err *err) {
    *out = NULL;
    if (len > GR_MAX_TEXT) return nc_fail(err, "grammar: %zu bytes, more than the %d allowed", len, GR_MAX_TEXT);
    parser p = {.s = text, .len = len, .poll = poll, .err = err};
    gr_grammar *g = calloc(1, sizeof *g);
    if (!g) return nc_fail(err, "out of memory");
    int rc = 0;
    for (skip_space(&p); p.pos < p.len && rc == 0; skip_space(&p))
        rc = nc_poll_ended(poll) ? nc_fail(err, NC_POLL_ABANDONED) : parse_rule(&p);
    if (rc == 0) rc = check_defined(&p);
    if (rc == 0 && (g->root = find_rule(&p, "root", 4)) < 0) rc = nc_fail(err, "grammar: no 'root' rule");
    if (rc == 0) rc = flatten(&p, g);
    bool *nullable = rc == 0 ? calloc((size_t)g->n_rules + 1, 1) : NULL;
    if (rc == 0 && !nullable) rc = nc_fail(err, "out of memory");
    if (rc == 0) rc = nullable_rules(g, nullable, err);
    if (rc == 0) rc = check_left_recursion(g, nullable, err);
    free(nullable);
    free_parser(&p);
    if (rc) {
        gr_free(g);
        return -1;
    }
    *out = g;
    return 0;
}

void gr_free(gr_grammar *g) {
    if (!g) return;
    if (g->names)
        for (int32_t r = 0; r < g->n_rules; r++) free(g->names[r]);
    free(g->names);
    free(g->elems);
    free(g->ranges);
    free(g->alt_start);
    free(g->rule_alt);
    free(g);
}

int nc_grammar_check(const char *gbnf, nc_err *err) {
    gr_grammar *g;
    if (gr_parse(&g, gbnf, strlen(gbnf), err)) return -1;
    gr_free(g);
    return 0;
}
