/* Python's str operations on UTF-8 text: strip, case mapping, replace, split, splitlines, join,
 * find and count. Indexes and lengths are in code points, as in Python. */
#include <string.h>

#include "template/internal.h"

/* Fail with the render's error when a buffer append failed; used after a run of appends. */
static tmpl_value *finish(rt *r, sbuf *b, int rc) {
    if (rc) {
        bool over = b->over;
        sbuf_free(b);
        rt_fail(r, over ? "string too long" : "out of memory");
        return NULL;
    }
    return tv_str_take(r, b);
}

static sbuf text_buffer(rt *r) { return (sbuf){.limit = r->lim.max_memory}; }

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

tmpl_value *str_strip(rt *r, tmpl_value *s, tmpl_value *chars, bool left, bool right) {
    const char *p = s->u.str.s;
    size_t start = 0, end = s->u.str.len, w;
    if (left)
        while (start < end && in_chars(utf8_decode(p + start, end - start, &w), chars)) start += w;
    if (right)
        while (end > start) {
            size_t i = prev_cp(p, end);
            if (!in_chars(utf8_decode(p + i, end - i, &w), chars)) break;
            end = i;
        }
    if (start == 0 && end == s->u.str.len) return tv_ref(s);
    return tv_str(r, p + start, end - start);
}

static bool is_cased(uint32_t c) { return uni_upper(c) != c || uni_lower(c) != c; }

/* Jinja's |title splits words at runs of whitespace, '-', and opening brackets. */
static bool jinja_title_sep(uint32_t c) { return uni_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; }

tmpl_value *str_case(rt *r, tmpl_value *s, int how) {
    sbuf b = text_buffer(r);
    bool word_start = true, prev_cased = false;
    size_t w;
    int rc = 0;
    for (size_t i = 0; i < s->u.str.len && !rc; i += w) {
        uint32_t c = utf8_decode(s->u.str.s + i, s->u.str.len - i, &w), o = c;
        switch (how) {
        case CASE_UPPER: o = uni_upper(c); break;
        case CASE_LOWER: o = uni_lower(c); break;
        case CASE_SWAP: o = uni_upper(c) != c ? uni_upper(c) : uni_lower(c); break;
        case CASE_CAPITALIZE: o = i == 0 ? uni_upper(c) : uni_lower(c); break;
        case CASE_TITLE: /* Python's str.title(): a cased letter after an uncased one starts a word */
            o = prev_cased ? uni_lower(c) : uni_upper(c);
            prev_cased = is_cased(c);
            break;
        default: /* CASE_JINJA_TITLE */
            if (jinja_title_sep(c)) {
                word_start = true;
            } else {
                o = word_start ? uni_upper(c) : uni_lower(c);
                word_start = false;
            }
        }
        if (o == c) {
            rc = sbuf_put(&b, s->u.str.s + i, w); /* keeps invalid bytes as they are */
        } else {
            char enc[4];
            rc = sbuf_put(&b, enc, utf8_encode(o, enc));
        }
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
            rc = tv_write_str(&b, x);
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

int64_t str_find(tmpl_value *s, tmpl_value *sub, bool from_right) {
    const char *p = s->u.str.s, *q = sub->u.str.s;
    size_t n = s->u.str.len, k = sub->u.str.len;
    if (k > n) return -1;
    long at = -1;
    if (!from_right) {
        const char *hit = k ? memmem(p, n, q, k) : p;
        if (hit) at = hit - p;
    } else {
        for (size_t i = n - k + 1; i-- > 0;)
            if (!memcmp(p + i, q, k)) {
                at = (long)i;
                break;
            }
    }
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
