/* The lexer: template text → tokens. Whitespace control follows Jinja2 with trim_blocks and
 * lstrip_blocks on (transformers' chat-template environment):
 *   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` after it;
 *   - lstrip_blocks: spaces and tabs between the start of a line and a `{%` or `{#` are removed
 *     (`{%+` keeps them);
 *   - trim_blocks: the first newline after `%}` or `#}` is removed (`+%}` keeps it);
 *   - one trailing newline of the whole template is dropped (keep_trailing_newline=False). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/internal.h"

typedef struct lexer {
    tmpl *t;
    const char *s;
    size_t n, pos;
    token_list *out;
    nc_err *err;
} lexer;

void pos_to_line_col(const tmpl *t, size_t pos, int *line, int *col) {
    int l = 1, c = 1;
    size_t w;
    for (size_t i = 0; i < pos && i < t->len; i += w) {
        utf8_decode(t->src + i, t->len - i, &w);
        if (t->src[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static int lex_fail(lexer *lx, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int lex_fail(lexer *lx, size_t pos, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    pos_to_line_col(lx->t, pos, &line, &col);
    return nc_fail(lx->err, "template:%d:%d: %s", line, col, msg);
}

static int push(lexer *lx, token tk) {
    token_list *l = lx->out;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        token *v = realloc(l->v, cap * sizeof *v);
        if (!v) return nc_fail(lx->err, "out of memory");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = tk;
    return 0;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
static bool starts(const lexer *lx, size_t at, const char *lit) {
    size_t k = strlen(lit);
    return at <= lx->n && lx->n - at >= k && !memcmp(lx->s + at, lit, k);
}

static size_t find_tag(const lexer *lx, size_t from) {
    for (size_t i = from; i + 1 < lx->n; i++)
        if (lx->s[i] == '{' && (lx->s[i + 1] == '{' || lx->s[i + 1] == '%' || lx->s[i + 1] == '#')) return i;
    return lx->n;
}

/* lstrip_blocks: where text [start, end) should end so that the spaces before a tag that only
 * whitespace precedes on its line are dropped. */
static size_t lstrip_end(const lexer *lx, size_t start, size_t end) {
    size_t j = end;
    while (j > start && is_ws(lx->s[j - 1]) && lx->s[j - 1] != '\n') j--;
    if (j > start) return lx->s[j - 1] == '\n' ? j : end;
    return (start == 0 || lx->s[start - 1] == '\n') ? j : end;
}

static int emit_text(lexer *lx, size_t start, size_t end) {
    if (end <= start) return 0;
    return push(lx, (token){.type = T_TEXT, .pos = start, .s = lx->s + start, .len = end - start});
}

/* After a closing delimiter: `-` strips all following whitespace, else trim_blocks removes one
 * newline unless `+` asked to keep it. */
static size_t after_close(const lexer *lx, size_t at, char mod, bool trim) {
    if (mod == '-') {
        while (at < lx->n && is_ws(lx->s[at])) at++;
    } else if (trim && mod != '+' && at < lx->n && lx->s[at] == '\n') {
        at++;
    }
    return at;
}

static int lex_comment(lexer *lx, size_t tag) {
    size_t i = tag + 2;
    if (i < lx->n && lx->s[i] == '-') i++;
    if (i >= lx->n) { /* Jinja quirk: a comment opened at the very end is dropped quietly */
        lx->pos = lx->n;
        return 0;
    }
    for (; i + 1 < lx->n; i++) {
        if (lx->s[i] != '#' || lx->s[i + 1] != '}') continue;
        char mod = (i > tag + 2 && lx->s[i - 1] == '-') ? '-' : 0;
        lx->pos = after_close(lx, i + 2, mod, true);
        return 0;
    }
    return lex_fail(lx, tag, "unclosed comment");
}

/* `{% raw %}` at tag? Returns the offset just past its `%}` (and the modifier), or 0. */
static size_t raw_open_end(const lexer *lx, size_t tag, char *mod) {
    size_t i = tag + 2;
    if (i < lx->n && (lx->s[i] == '-' || lx->s[i] == '+')) i++;
    while (i < lx->n && is_ws(lx->s[i])) i++;
    if (!starts(lx, i, "raw") || (i + 3 < lx->n && is_name_char(lx->s[i + 3]))) return 0;
    i += 3;
    while (i < lx->n && is_ws(lx->s[i])) i++;
    *mod = 0;
    if (i < lx->n && lx->s[i] == '-') *mod = lx->s[i++]; /* (no +%} here, as in Jinja) */
    return starts(lx, i, "%}") ? i + 2 : 0;
}

static int lex_raw(lexer *lx, size_t tag, size_t body, char open_mod) {
    if (body >= lx->n) { /* Jinja quirk: {% raw %} at the very end is dropped quietly */
        lx->pos = lx->n;
        return 0;
    }
    if (open_mod == '-')
        while (body < lx->n && is_ws(lx->s[body])) body++;
    else if (body < lx->n && lx->s[body] == '\n') body++; /* trim_blocks */
    for (size_t i = find_tag(lx, body); i < lx->n; i = find_tag(lx, i + 1)) {
        if (lx->s[i + 1] != '%') continue;
        size_t j = i + 2;
        char pre = 0;
        if (j < lx->n && (lx->s[j] == '-' || lx->s[j] == '+')) pre = lx->s[j++];
        while (j < lx->n && is_ws(lx->s[j])) j++;
        if (!starts(lx, j, "endraw")) continue;
        j += 6;
        while (j < lx->n && is_ws(lx->s[j])) j++;
        char mod = 0;
        if (j < lx->n && (lx->s[j] == '-' || lx->s[j] == '+')) mod = lx->s[j++];
        if (!starts(lx, j, "%}")) continue;
        size_t end = i;
        if (pre == '-') while (end > body && is_ws(lx->s[end - 1])) end--;
        else if (pre != '+') end = lstrip_end(lx, body, end);
        if (emit_text(lx, body, end)) return -1;
        lx->pos = after_close(lx, j + 2, mod, true);
        return 0;
    }
    return lex_fail(lx, tag, "missing {%% endraw %%}");
}

/* ---- Tokens inside {{ }} and {% %} -------------------------------------------------------- */
static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Read `digits` hex digits at *i into *cp; false when they are not all there. */
static bool read_hex(const char *s, size_t end, size_t *i, int digits, uint32_t *cp) {
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        if (*i >= end || hex_value(s[*i]) < 0) return false;
        v = v * 16 + (uint32_t)hex_value(s[(*i)++]);
    }
    *cp = v;
    return true;
}

/* Python string-literal escapes (Jinja decodes literals with unicode-escape). An unknown escape
 * keeps its backslash, as Python does. */
static int decode_escape(lexer *lx, const char *s, size_t end, size_t *i, sbuf *b) {
    size_t at = *i;
    char c = s[(*i)++];
    uint32_t cp;
    switch (c) {
    case 'n': return sbuf_putc(b, '\n');
    case 't': return sbuf_putc(b, '\t');
    case 'r': return sbuf_putc(b, '\r');
    case 'a': return sbuf_putc(b, '\a');
    case 'b': return sbuf_putc(b, '\b');
    case 'f': return sbuf_putc(b, '\f');
    case 'v': return sbuf_putc(b, '\v');
    case '\\': case '\'': case '"': return sbuf_putc(b, c);
    case '\n': return 0;
    case 'x':
    case 'u':
    case 'U':
        if (!read_hex(s, end, i, c == 'x' ? 2 : c == 'u' ? 4 : 8, &cp) || cp > 0x10ffff)
            return lex_fail(lx, (size_t)(s + at - lx->s) - 1, "invalid \\%c escape in string", c);
        if (c == 'u' && cp >= 0xd800 && cp < 0xdc00 && *i + 6 <= end && s[*i] == '\\' && s[*i + 1] == 'u') {
            size_t j = *i + 2;
            uint32_t lo;
            if (read_hex(s, end, &j, 4, &lo) && lo >= 0xdc00 && lo < 0xe000) { /* a surrogate pair */
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                *i = j;
            }
        }
        break;
    default:
        if (c >= '0' && c <= '7') {
            cp = (uint32_t)(c - '0');
            for (int k = 0; k < 2 && *i < end && s[*i] >= '0' && s[*i] <= '7'; k++) cp = cp * 8 + (uint32_t)(s[(*i)++] - '0');
            break;
        }
        return sbuf_putc(b, '\\') || sbuf_putc(b, c);
    }
    char enc[4];
    return sbuf_put(b, enc, utf8_encode(cp, enc));
}

static int lex_string(lexer *lx) {
    size_t start = lx->pos;
    char q = lx->s[lx->pos++];
    sbuf b = {0};
    while (lx->pos < lx->n && lx->s[lx->pos] != q) {
        if (lx->s[lx->pos] == '\\' && lx->pos + 1 < lx->n) {
            lx->pos++;
            if (decode_escape(lx, lx->s, lx->n, &lx->pos, &b)) {
                sbuf_free(&b);
                return -1;
            }
        } else if (sbuf_putc(&b, lx->s[lx->pos++])) {
            sbuf_free(&b);
            return nc_fail(lx->err, "out of memory");
        }
    }
    if (lx->pos >= lx->n) {
        sbuf_free(&b);
        return lex_fail(lx, start, "unterminated string");
    }
    lx->pos++;
    char *s = arena_strndup(&lx->t->arena, b.data ? b.data : "", b.len);
    size_t len = b.len;
    sbuf_free(&b);
    if (!s) return nc_fail(lx->err, "out of memory");
    return push(lx, (token){.type = T_STRING, .pos = start, .s = s, .len = len});
}

/* Digits with optional single underscores between them (Python/Jinja number syntax). */
static size_t scan_digits(const lexer *lx, size_t i, int base) {
    size_t start = i;
    while (i < lx->n) {
        char c = lx->s[i];
        int d = hex_value(c);
        if (d >= 0 && d < base && (base == 16 || is_digit(c))) {
            i++;
        } else if (c == '_' && i > start && i + 1 < lx->n && hex_value(lx->s[i + 1]) >= 0 &&
                   hex_value(lx->s[i + 1]) < base) {
            i++;
        } else {
            break;
        }
    }
    return i;
}

static int lex_number(lexer *lx) {
    size_t start = lx->pos, i = start;
    int base = 10;
    if (lx->s[i] == '0' && i + 1 < lx->n && strchr("xXoObB", lx->s[i + 1])) {
        char p = (char)(lx->s[i + 1] | 32);
        base = p == 'x' ? 16 : p == 'o' ? 8 : 2;
        i += 2;
    }
    size_t digits_start = i;
    i = scan_digits(lx, i, base);
    if (i == digits_start) return lex_fail(lx, start, "invalid number");
    size_t int_end = i;
    if (base == 10 && lx->s[start] == '0') { /* a decimal int may not have leading zeros: 007 is 0, 0, 7 */
        int_end = start + 1;
        while (int_end < i && (lx->s[int_end] == '0' || (lx->s[int_end] == '_' && lx->s[int_end + 1] == '0'))) int_end++;
    }
    bool is_float = false;
    if (base == 10 && i + 1 < lx->n && lx->s[i] == '.' && is_digit(lx->s[i + 1])) {
        i = scan_digits(lx, i + 1, 10);
        is_float = true;
    }
    if (base == 10 && i < lx->n && (lx->s[i] | 32) == 'e') {
        size_t j = i + 1;
        if (j < lx->n && (lx->s[j] == '+' || lx->s[j] == '-')) j++;
        if (j < lx->n && is_digit(lx->s[j])) {
            i = scan_digits(lx, j, 10);
            is_float = true;
        }
    }
    char buf[128];
    size_t k = 0;
    for (size_t j = is_float ? start : digits_start; j < (is_float ? i : int_end) && k + 1 < sizeof buf; j++)
        if (lx->s[j] != '_') buf[k++] = lx->s[j];
    buf[k] = 0;
    if ((is_float ? i : int_end) - start >= sizeof buf - 1) return lex_fail(lx, start, "number literal too long");
    if (!is_float) i = int_end;
    token tk = {.type = is_float ? T_FLOAT : T_INT, .pos = start};
    if (is_float) {
        tk.f = strtod(buf, NULL);
    } else {
        errno = 0;
        unsigned long long v = strtoull(buf, NULL, base);
        if (errno || v > INT64_MAX) return lex_fail(lx, start, "integer literal too large");
        tk.i = (int64_t)v;
    }
    lx->pos = i;
    return push(lx, tk);
}

static int lex_operator(lexer *lx, int *depth) {
    static const struct { const char *text; int op; } two[] = {
        {"//", OP_FLOORDIV}, {"**", OP_POW}, {"==", OP_EQ}, {"!=", OP_NE}, {"<=", OP_LE}, {">=", OP_GE},
    };
    size_t start = lx->pos;
    for (size_t k = 0; k < sizeof two / sizeof two[0]; k++) {
        if (starts(lx, start, two[k].text)) {
            lx->pos += 2;
            return push(lx, (token){.type = T_OP, .op = two[k].op, .pos = start});
        }
    }
    char c = lx->s[start];
    if (!strchr("+-/*%~[](){}<>=.:|,", c)) {
        if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f) return lex_fail(lx, start, "unexpected character '%c'", c);
        return lex_fail(lx, start, "unexpected character (byte 0x%02x)", (unsigned char)c);
    }
    if (c == '(' || c == '[' || c == '{') (*depth)++;
    if ((c == ')' || c == ']' || c == '}') && *depth > 0) (*depth)--;
    lx->pos++;
    return push(lx, (token){.type = T_OP, .op = c, .pos = start});
}

/* The tokens of one {{ ... }} or {% ... %}, up to and including its closing delimiter. An end
 * delimiter only counts outside brackets, so `{{ {'a': {'b': 1}} }}` works. */
static int lex_tag_body(lexer *lx, size_t tag, bool is_block) {
    int depth = 0;
    const char close = is_block ? '%' : '}';
    for (;;) {
        while (lx->pos < lx->n && is_ws(lx->s[lx->pos])) lx->pos++;
        if (lx->pos >= lx->n) return lex_fail(lx, tag, "missing '%s' for this tag", is_block ? "%}" : "}}");
        size_t at = lx->pos;
        char mod = 0;
        if (depth == 0) {
            if ((lx->s[at] == '-' || (is_block && lx->s[at] == '+')) && at + 2 < lx->n &&
                lx->s[at + 1] == close && lx->s[at + 2] == '}')
                mod = lx->s[at++];
            if (at + 1 < lx->n && lx->s[at] == close && lx->s[at + 1] == '}') {
                if (push(lx, (token){.type = is_block ? T_BLOCK_END : T_VAR_END, .pos = lx->pos})) return -1;
                lx->pos = after_close(lx, at + 2, mod, is_block);
                return 0;
            }
        }
        char c = lx->s[at];
        int rc;
        if (c == '"' || c == '\'') {
            rc = lex_string(lx);
        } else if (is_digit(c)) {
            rc = lex_number(lx);
        } else if (is_name_start(c)) {
            size_t e = at;
            while (e < lx->n && is_name_char(lx->s[e])) e++;
            rc = push(lx, (token){.type = T_NAME, .pos = at, .s = lx->s + at, .len = e - at});
            lx->pos = e;
        } else {
            rc = lex_operator(lx, &depth);
        }
        if (rc) return -1;
    }
}

/* One stretch of text and the tag after it. */
static int lex_step(lexer *lx) {
    size_t start = lx->pos, tag = find_tag(lx, start);
    if (tag >= lx->n) {
        lx->pos = lx->n;
        return emit_text(lx, start, lx->n);
    }
    char kind = lx->s[tag + 1];
    char mod = tag + 2 < lx->n ? lx->s[tag + 2] : 0;
    size_t end = tag;
    if (mod == '-') {
        while (end > start && is_ws(lx->s[end - 1])) end--;
    } else if (kind != '{' && mod != '+') {
        end = lstrip_end(lx, start, tag);
    }
    if (emit_text(lx, start, end)) return -1;
    if (kind == '#') return lex_comment(lx, tag);
    char raw_mod;
    size_t raw_body = kind == '%' ? raw_open_end(lx, tag, &raw_mod) : 0;
    if (raw_body) return lex_raw(lx, tag, raw_body, raw_mod);
    bool is_block = kind == '%';
    if (push(lx, (token){.type = is_block ? T_BLOCK_BEGIN : T_VAR_BEGIN, .pos = tag})) return -1;
    lx->pos = tag + 2 + ((mod == '-' || mod == '+') ? 1 : 0); /* `{{+` is allowed too, and changes nothing */
    return lex_tag_body(lx, tag, is_block);
}

int lex_template(tmpl *t, token_list *out, nc_err *err) {
    lexer lx = {.t = t, .s = t->src, .n = t->len, .out = out, .err = err};
    while (lx.pos < lx.n)
        if (lex_step(&lx)) return -1;
    return push(&lx, (token){.type = T_EOF, .pos = lx.n});
}
