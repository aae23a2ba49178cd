/* Python's str operations on UTF-8 text: strip, case mapping, replace, split, splitlines, join,
 * find and count. Indexes and lengths are in code points, as in Python. */
#include <math.h>
#include <string.h>

#include "template/internal.h"

/* Fail with the render's error when a buffer append failed; used after a run of appends. */
static tmpl_value *finish(rt *r, sbuf *b, int rc) {
    if (rc) {
        bool over = b->over;
        sbuf_free(b);
        rt_fail(r, over ? "string longer than the memory left to the render" : "out of memory");
        return NULL;
    }
    return tv_str_take(r, b);
}

static sbuf text_buffer(rt *r) { return (sbuf){.limit = rt_mem_left(r)}; }

static bool in_chars(uint32_t c, const tmpl_value *chars) {
    if (!chars) return uni_isspace(c);
    size_t w;
    for (size_t i = 0; i < chars->u.str.len; i += w)
        if (utf8_decode(chars->u.str.s + i, chars->u.str.len - i, &w) == c) return true;
    return false;
}

/* Byte offset where the code point before `end` starts. */
static size_t prev_cp(const char *s, size_t end) {
    size_t i = end - 1;
    while (i > 0 && end - i < 4 && ((unsigned char)s[i] & 0xc0) == 0x80) i--;
    size_t w;
    utf8_decode(s + i, end - i, &w);
    return i + w == end ? i : end - 1;
}

/* Each code point looked at is tested against all of chars: that work is charged as it goes. */
tmpl_value *str_strip(rt *r, tmpl_value *s, tmpl_value *chars, bool left, bool right) {
    const char *p = s->u.str.s;
    size_t start = 0, end = s->u.str.len, w, per = chars ? chars->u.str.len : 0;
    if (left)
        while (start < end && in_chars(utf8_decode(p + start, end - start, &w), chars)) {
            if (per && rt_decode(r, per)) return NULL;
            start += w;
        }
    if (right)
        while (end > start) {
            size_t i = prev_cp(p, end);
            if (!in_chars(utf8_decode(p + i, end - i, &w), chars)) break;
            if (per && rt_decode(r, per)) return NULL;
            end = i;
        }
    if (start == 0 && end == s->u.str.len) return tv_ref(s);
    return tv_str(r, p + start, end - start);
}

/* ß is a lowercase letter without a one-letter capital: "SS" in upper case, "Ss" in title case. */
#define SHARP_S 0xdf

static bool is_cased(uint32_t c) { return c == SHARP_S || uni_upper(c) != c || uni_lower(c) != c; }

/* Jinja's |title splits words at runs of whitespace, '-', and opening brackets. */
static bool jinja_title_sep(uint32_t c) { return uni_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; }

/* Python lower-cases Σ to the final form ς at the end of a word: after a cased letter and not
 * before one. */
#define CAPITAL_SIGMA 0x3a3
static uint32_t lower_in_context(const tmpl_value *s, size_t i, size_t w, uint32_t c, bool prev_cased) {
    if (c != CAPITAL_SIGMA) return uni_lower(c);
    size_t nw;
    bool next_cased = i + w < s->u.str.len && is_cased(utf8_decode(s->u.str.s + i + w, s->u.str.len - i - w, &nw));
    return prev_cased && !next_cased ? 0x3c2 : 0x3c3;
}

/* Upper-case c (or title-case it) into out; returns the bytes written. */
static size_t upper_into(uint32_t c, bool title, char out[4]) {
    if (c == SHARP_S) {
        memcpy(out, title ? "Ss" : "SS", 2);
        return 2;
    }
    return utf8_encode(uni_upper(c), out);
}

tmpl_value *str_case(rt *r, tmpl_value *s, int how) {
    sbuf b = text_buffer(r);
    bool word_start = true, prev_cased = false, before_cased = false;
    size_t w;
    int rc = 0;
    for (size_t i = 0; i < s->u.str.len && !rc; i += w, before_cased = prev_cased) {
        uint32_t c = utf8_decode(s->u.str.s + i, s->u.str.len - i, &w);
        bool up;
        switch (how) {
        case CASE_UPPER: up = true; break;
        case CASE_LOWER: up = false; break;
        case CASE_SWAP: up = uni_upper(c) != c || c == SHARP_S; break;
        case CASE_CAPITALIZE: up = i == 0; break;
        case CASE_TITLE: /* Python's str.title(): a cased letter after an uncased one starts a word */
            up = !prev_cased;
            break;
        default: /* CASE_JINJA_TITLE */
            up = word_start;
            word_start = jinja_title_sep(c);
        }
        prev_cased = is_cased(c);
        char enc[4];
        size_t n;
        if (up) n = upper_into(c, how == CASE_TITLE || how == CASE_CAPITALIZE, enc);
        else n = utf8_encode(lower_in_context(s, i, w, c, before_cased), enc);
        bool same = n == w && !memcmp(enc, s->u.str.s + i, w);
        rc = sbuf_put(&b, same || (w == 1 && c >= 0x80) ? s->u.str.s + i : enc, same || (w == 1 && c >= 0x80) ? w : n);
    }
    return finish(r, &b, rc);
}

tmpl_value *str_replace(rt *r, tmpl_value *s, tmpl_value *old, tmpl_value *new_, int64_t count) {
    const char *p = s->u.str.s, *o = old->u.str.s;
    size_t n = s->u.str.len, k = old->u.str.len;
    sbuf b = text_buffer(r);
    int rc = 0;
    size_t i = 0, w;
    if (k == 0) { /* Python inserts `new` before every character and at the end */
        for (; !rc && count != 0; count--) {
            rc = sbuf_put(&b, new_->u.str.s, new_->u.str.len);
            if (i >= n) break;
            utf8_decode(p + i, n - i, &w);
            if (!rc) rc = sbuf_put(&b, p + i, w);
            i += w;
        }
        if (!rc && i < n) rc = sbuf_put(&b, p + i, n - i);
        return finish(r, &b, rc);
    }
    while (!rc && i < n) {
        const char *hit = count != 0 ? memmem(p + i, n - i, o, k) : NULL;
        if (!hit) break;
        size_t at = (size_t)(hit - p);
        rc = sbuf_put(&b, p + i, at - i);
        if (!rc) rc = sbuf_put(&b, new_->u.str.s, new_->u.str.len);
        if (!rc) rc = rt_step(r);
        i = at + k;
        if (count > 0) count--;
    }
    if (!rc && i < n) rc = sbuf_put(&b, p + i, n - i);
    if (rc && r->failed) {
        sbuf_free(&b);
        return NULL;
    }
    return finish(r, &b, rc);
}

/* Append s[from, to) as a new string to list l. */
static int push_piece(rt *r, tmpl_value *l, const char *s, size_t from, size_t to) {
    tmpl_value *piece = tv_str(r, s + from, to - from);
    return piece ? tv_list_push(r, l, piece) : -1;
}

static int split_whitespace(rt *r, tmpl_value *l, const char *p, size_t n, int64_t maxsplit) {
    size_t i = 0, w;
    while (i < n) {
        while (i < n && uni_isspace(utf8_decode(p + i, n - i, &w))) i += w;
        if (i >= n) break;
        if (maxsplit == 0) { /* the rest, trailing whitespace and all */
            size_t end = n;
            return push_piece(r, l, p, i, end);
        }
        size_t start = i;
        while (i < n && !uni_isspace(utf8_decode(p + i, n - i, &w))) i += w;
        if (push_piece(r, l, p, start, i)) return -1;
        if (maxsplit > 0) maxsplit--;
    }
    return 0;
}

/* rsplit() without a separator: words from the right; the rest keeps its leading whitespace. */
static int rsplit_whitespace(rt *r, tmpl_value *l, const char *p, size_t n, int64_t maxsplit) {
    size_t end = n, w;
    while (end > 0) {
        while (end > 0) {
            size_t i = prev_cp(p, end);
            if (!uni_isspace(utf8_decode(p + i, end - i, &w))) break;
            end = i;
        }
        if (end == 0) break;
        if (maxsplit == 0) return push_piece(r, l, p, 0, end);
        size_t start = end;
        while (start > 0) {
            size_t i = prev_cp(p, start);
            if (uni_isspace(utf8_decode(p + i, start - i, &w))) break;
            start = i;
        }
        if (push_piece(r, l, p, start, end)) return -1;
        end = start;
        if (maxsplit > 0) maxsplit--;
    }
    return 0;
}

static int split_sep(rt *r, tmpl_value *l, const char *p, size_t n, const tmpl_value *sep, int64_t maxsplit,
                     bool from_right) {
    const char *q = sep->u.str.s;
    size_t k = sep->u.str.len;
    if (!from_right) {
        size_t i = 0;
        const char *hit;
        while (maxsplit != 0 && (hit = memmem(p + i, n - i, q, k))) {
            if (push_piece(r, l, p, i, (size_t)(hit - p))) return -1;
            i = (size_t)(hit - p) + k;
            if (maxsplit > 0) maxsplit--;
        }
        return push_piece(r, l, p, i, n);
    }
    size_t end = n;
    while (maxsplit != 0 && end >= k) {
        size_t at = end - k + 1;
        bool found = false;
        while (at-- > 0)
            if (!memcmp(p + at, q, k)) {
                found = true;
                break;
            }
        if (!found) break;
        if (push_piece(r, l, p, at + k, end)) return -1;
        end = at;
        if (maxsplit > 0) maxsplit--;
    }
    return push_piece(r, l, p, 0, end);
}

static void reverse_items(tmpl_value *l) {
    for (size_t i = 0, j = l->u.list.len; i + 1 < j; i++, j--) {
        tmpl_value *t = l->u.list.items[i];
        l->u.list.items[i] = l->u.list.items[j - 1];
        l->u.list.items[j - 1] = t;
    }
}

tmpl_value *str_split(rt *r, tmpl_value *s, tmpl_value *sep, int64_t maxsplit, bool from_right) {
    if (sep && !sep->u.str.len) {
        rt_fail(r, "empty separator");
        return NULL;
    }
    tmpl_value *l = tv_list(r, 0);
    if (!l) return NULL;
    int rc;
    if (!sep && from_right) rc = rsplit_whitespace(r, l, s->u.str.s, s->u.str.len, maxsplit);
    else if (!sep) rc = split_whitespace(r, l, s->u.str.s, s->u.str.len, maxsplit);
    else rc = split_sep(r, l, s->u.str.s, s->u.str.len, sep, maxsplit, from_right);
    if (rc) {
        tv_decref(r, l);
        return NULL;
    }
    if (from_right) reverse_items(l);
    return l;
}

tmpl_value *str_splitlines(rt *r, tmpl_value *s, bool keepends) {
    tmpl_value *l = tv_list(r, 0);
    const char *p = s->u.str.s;
    size_t n = s->u.str.len, start = 0, i = 0, w;
    while (l && i < n) {
        uint32_t c = utf8_decode(p + i, n - i, &w);
        if (!uni_is_linebreak(c)) {
            i += w;
            continue;
        }
        size_t brk = w + ((c == '\r' && i + 1 < n && p[i + 1] == '\n') ? 1 : 0);
        if (push_piece(r, l, p, start, keepends ? i + brk : i)) {
            tv_decref(r, l);
            return NULL;
        }
        i += brk;
        start = i;
    }
    if (l && start < n && push_piece(r, l, p, start, n)) {
        tv_decref(r, l);
        return NULL;
    }
    return l;
}

tmpl_value *str_join(rt *r, tmpl_value *sep, tmpl_value *items, bool convert) {
    tmpl_value *l = to_list(r, items);
    if (!l) return NULL;
    sbuf b = text_buffer(r);
    int rc = 0;
    for (size_t i = 0; i < l->u.list.len && !rc; i++) {
        const tmpl_value *x = l->u.list.items[i];
        if (i) rc = sbuf_put(&b, sep->u.str.s, sep->u.str.len);
        if (rc) break;
        if (x->type == TV_STRING) {
            rc = sbuf_put(&b, x->u.str.s, x->u.str.len);
        } else if (convert) {
            rc = tv_write_str(r, &b, x);
        } else {
            tv_decref(r, l);
            sbuf_free(&b);
            rt_fail(r, "sequence item %zu: expected str instance, %s found", i, tv_type_name(x));
            return NULL;
        }
    }
    tv_decref(r, l);
    return finish(r, &b, rc);
}

long str_find_bytes(const char *p, size_t n, const char *q, size_t k) {
    if (k > n) return -1;
    const char *hit = k ? memmem(p, n, q, k) : p; /* glibc's memmem is linear (two-way) */
    return hit ? (long)(hit - p) : -1;
}

/* There is no reverse memmem: the candidates are the places where q's first byte is, each
 * compared at a cost charged to r (q repeated in p is k bytes of work per place). */
long str_rfind_bytes(rt *r, const char *p, size_t n, const char *q, size_t k) {
    if (k > n) return -1;
    if (!k) return (long)n;
    for (size_t end = n - k + 1; end > 0;) {
        const char *c = memrchr(p, (unsigned char)q[0], end);
        if (!c) return -1;
        size_t i = (size_t)(c - p);
        if (rt_work(r, k)) return STR_FIND_FAIL;
        if (!memcmp(p + i, q, k)) return (long)i;
        end = i;
    }
    return -1;
}

int64_t str_find(rt *r, tmpl_value *s, tmpl_value *sub, bool from_right) {
    const char *p = s->u.str.s, *q = sub->u.str.s;
    size_t n = s->u.str.len, k = sub->u.str.len;
    long at = from_right ? str_rfind_bytes(r, p, n, q, k) : str_find_bytes(p, n, q, k);
    if (at == STR_FIND_FAIL) return STR_FIND_FAIL;
    return at < 0 ? -1 : (int64_t)utf8_count(p, (size_t)at);
}

int64_t str_count(tmpl_value *s, tmpl_value *sub) {
    const char *p = s->u.str.s, *q = sub->u.str.s;
    size_t n = s->u.str.len, k = sub->u.str.len;
    if (!k) return (int64_t)utf8_count(p, n) + 1;
    int64_t count = 0;
    const char *hit;
    for (size_t i = 0; i + k <= n && (hit = memmem(p + i, n - i, q, k)); i = (size_t)(hit - p) + k) count++;
    return count;
}

tmpl_value *str_slice_cp(rt *r, tmpl_value *s, size_t from, size_t to) {
    size_t a = utf8_offset(s->u.str.s, s->u.str.len, from);
    size_t b = a + utf8_offset(s->u.str.s + a, s->u.str.len - a, to - from);
    return tv_str(r, s->u.str.s + a, b - a);
}

/* ---- printf-style formatting: str % value and the format filter ---------------------------- */
typedef struct fmt_spec {
    bool left, plus, space, zero, alt;
    int width, prec; /* -1: not given */
    char conv;
} fmt_spec;

/* Parse the flags, width, precision and conversion after a '%' at *i. */
static int parse_spec(rt *r, const char *f, size_t n, size_t *i, fmt_spec *sp) {
    *sp = (fmt_spec){.width = -1, .prec = -1};
    for (; *i < n && strchr("-+ 0#", f[*i]); (*i)++) {
        switch (f[*i]) {
        case '-': sp->left = true; break;
        case '+': sp->plus = true; break;
        case ' ': sp->space = true; break;
        case '0': sp->zero = true; break;
        default: sp->alt = true;
        }
    }
    for (; *i < n && f[*i] >= '0' && f[*i] <= '9'; (*i)++) {
        sp->width = (sp->width < 0 ? 0 : sp->width) * 10 + (f[*i] - '0');
        if (sp->width > 10000) return rt_fail(r, "format width too large");
    }
    if (*i < n && f[*i] == '.') {
        sp->prec = 0;
        for ((*i)++; *i < n && f[*i] >= '0' && f[*i] <= '9'; (*i)++) {
            sp->prec = sp->prec * 10 + (f[*i] - '0');
            if (sp->prec > 10000) return rt_fail(r, "format precision too large");
        }
    }
    if (*i >= n) return rt_fail(r, "incomplete format");
    sp->conv = f[(*i)++];
    if (!strchr("sradiufFeEgGxXoc%", sp->conv)) return rt_fail(r, "unsupported format character '%c'", sp->conv);
    return 0;
}

/* Pad text to the width (in code points); numbers pad with zeros after their sign with '0'. */
static int put_padded(sbuf *b, const fmt_spec *sp, const char *s, size_t len, bool numeric) {
    size_t cps = utf8_count(s, len), pad = sp->width > 0 && (size_t)sp->width > cps ? (size_t)sp->width - cps : 0;
    int rc = 0;
    if (numeric && sp->zero && !sp->left && pad) {
        size_t sign = len && strchr("+- ", s[0]) ? 1 : 0;
        rc = sbuf_put(b, s, sign);
        for (size_t k = 0; k < pad && !rc; k++) rc = sbuf_putc(b, '0');
        return rc || sbuf_put(b, s + sign, len - sign);
    }
    for (size_t k = 0; k < pad && !sp->left && !rc; k++) rc = sbuf_putc(b, ' ');
    if (!rc) rc = sbuf_put(b, s, len);
    for (size_t k = 0; k < pad && sp->left && !rc; k++) rc = sbuf_putc(b, ' ');
    return rc;
}

static int format_one(rt *r, sbuf *b, const fmt_spec *sp, tmpl_value *v) {
    char spec[32], num[512];
    int k = 0;
    spec[k++] = '%';
    if (sp->alt) spec[k++] = '#';
    if (sp->plus) spec[k++] = '+';
    if (sp->space) spec[k++] = ' ';
    if (sp->prec >= 0) k += snprintf(spec + k, sizeof spec - (size_t)k, ".%d", sp->prec > 300 ? 300 : sp->prec);
    switch (sp->conv) {
    case 's':
    case 'r': {
        sbuf t = {.limit = rt_mem_left(r)};
        int rc = sp->conv == 's' ? tv_write_str(r, &t, v) : tv_write_repr(r, &t, v);
        size_t len = t.len;
        if (!rc && sp->prec >= 0) len = utf8_offset(t.data ? t.data : "", t.len, (size_t)sp->prec);
        if (!rc) rc = put_padded(b, sp, t.data ? t.data : "", len, false);
        sbuf_free(&t);
        return rc ? rt_fail(r, "formatted text too long") : 0;
    }
    case 'c':
        if (v->type == TV_STRING && utf8_count(v->u.str.s, v->u.str.len) == 1) return put_padded(b, sp, v->u.str.s, v->u.str.len, false);
        if (v->type == TV_INT && v->u.i >= 0 && v->u.i <= 0x10ffff) {
            char enc[4];
            return put_padded(b, sp, enc, utf8_encode((uint32_t)v->u.i, enc), false);
        }
        return rt_fail(r, "%%c requires an int or a single character");
    default: break;
    }
    if (!tv_is_num(v)) return rt_fail(r, "%%%c format: a real number is required, not %s", sp->conv, tv_type_name(v));
    int n;
    if (strchr("diuxXo", sp->conv)) {
        if (v->type == TV_FLOAT && strchr("xXo", sp->conv)) return rt_fail(r, "%%%c format: an integer is required, not float", sp->conv);
        double d = tv_as_double(v);
        long long i = v->type == TV_FLOAT ? (fabs(d) < 9.2e18 ? (long long)d : 0) : (long long)(v->type == TV_BOOL ? v->u.b : v->u.i);
        bool unsigned_conv = strchr("xXo", sp->conv) != NULL, neg = unsigned_conv && i < 0;
        k += snprintf(spec + k, sizeof spec - (size_t)k, "ll%c", unsigned_conv ? sp->conv : 'd');
        /* C prints negative numbers in hex and octal as unsigned; Python as a sign and the magnitude */
        if (unsigned_conv) {
            unsigned long long magnitude = neg ? 0ull - (unsigned long long)i : (unsigned long long)i;
            num[0] = '-';
            n = snprintf(num + neg, sizeof num - neg, spec, magnitude);
            n = n < 0 ? n : n + neg;
        } else {
            n = snprintf(num, sizeof num, spec, i);
        }
    } else {
        spec[k++] = sp->conv;
        spec[k] = 0;
        n = snprintf(num, sizeof num, spec, tv_as_double(v));
    }
    if (n < 0 || (size_t)n >= sizeof num) return rt_fail(r, "formatted number too long");
    return put_padded(b, sp, num, (size_t)n, true) ? rt_fail(r, "formatted text too long") : 0;
}

tmpl_value *str_printf(rt *r, tmpl_value *fmt, tmpl_value *values) {
    bool by_name = values->type == TV_DICT;
    size_t nargs = values->type == TV_LIST && values->u.list.tuple ? values->u.list.len : 1, used = 0;
    const char *f = fmt->u.str.s;
    size_t n = fmt->u.str.len;
    sbuf b = text_buffer(r);
    int rc = 0;
    for (size_t i = 0; i < n && !rc;) {
        const char *pct = memchr(f + i, '%', n - i);
        size_t run = pct ? (size_t)(pct - (f + i)) : n - i;
        if ((rc = sbuf_put(&b, f + i, run))) break;
        if (!pct) break;
        i += run + 1;
        tmpl_value *arg = NULL;
        if (i < n && f[i] == '(') { /* %(name)s */
            const char *close = memchr(f + i, ')', n - i);
            if (!close || !by_name) {
                rc = rt_fail(r, close ? "format requires a mapping" : "incomplete format key");
                break;
            }
            arg = tv_dict_get_str(values, f + i + 1, (size_t)(close - f) - i - 1);
            if (!arg) {
                rc = rt_fail(r, "format key '%.*s' not found", (int)((size_t)(close - f) - i - 1), f + i + 1);
                break;
            }
            i = (size_t)(close - f) + 1;
        }
        fmt_spec sp;
        if ((rc = parse_spec(r, f, n, &i, &sp))) break;
        if (sp.conv == '%') {
            rc = sbuf_putc(&b, '%');
            continue;
        }
        if (!arg && by_name) arg = values; /* Python formats the whole dict for a plain %s */
        if (!arg) {
            if (used >= nargs) {
                rc = rt_fail(r, "not enough arguments for format string");
                break;
            }
            arg = nargs == 1 && !(values->type == TV_LIST && values->u.list.tuple) ? values : values->u.list.items[used];
            used++;
        }
        rc = format_one(r, &b, &sp, arg);
    }
    if (!rc && !by_name && used < nargs) rc = rt_fail(r, "not all arguments converted during string formatting");
    if (rc) {
        sbuf_free(&b);
        if (!r->failed) rt_fail(r, "formatted text too long");
        return NULL;
    }
    return tv_str_take(r, &b);
}
