/* Jinja's filters, with Python's behaviour (tojson is transformers' json.dumps with
 * ensure_ascii=False). Filters that return generators in Jinja (map, select, reverse, ...)
 * return lists here: the same when iterated, joined or counted. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/internal.h"

typedef tmpl_value *(*filter_fn)(rt *r, tmpl_value *v, const call_args *a);

static tmpl_value *fail_null(rt *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static tmpl_value *fail_null(rt *r, const char *fmt, ...) {
    char msg[NC_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rt_fail(r, "%s", msg);
    return NULL;
}

static int bool_arg(const tmpl_value *v, bool def) { return v ? tv_truthy(v) : def; }

/* Mark a result that Jinja returns as a generator (see tmpl_value.u.list.lazy). */
static tmpl_value *as_lazy(tmpl_value *l) {
    if (l) l->u.list.lazy = true;
    return l;
}

/* An integer argument; absent, None or undefined give the default (Jinja's filters pass an
 * undefined argument on to Python functions that treat it as not given). */
static int int_param(rt *r, const char *fname, const tmpl_value *v, int64_t def, int64_t *out) {
    if (!v || v->type == TV_NONE || v->type == TV_UNDEFINED) *out = def;
    else if (v->type == TV_INT) *out = v->u.i;
    else if (v->type == TV_BOOL) *out = v->u.b;
    else return rt_fail(r, "%s: expected an integer argument, got %s", fname, tv_type_name(v));
    return 0;
}

/* Jinja's attribute paths: "a.b.0" looks up a, then b, then item 0 (digits mean an index). */
static tmpl_value *attr_path(rt *r, tmpl_value *obj, const tmpl_value *path) {
    if (path->type != TV_STRING) return eval_getitem(r, obj, (tmpl_value *)path);
    tmpl_value *cur = tv_ref(obj);
    const char *s = path->u.str.s, *end = s + path->u.str.len;
    while (cur) {
        const char *dot = memchr(s, '.', (size_t)(end - s));
        const char *part_end = dot ? dot : end;
        bool digits = part_end > s;
        for (const char *q = s; q < part_end; q++) digits = digits && *q >= '0' && *q <= '9';
        tmpl_value *key = digits && part_end - s < 18 ? tv_int(r, strtoll(s, NULL, 10)) : tv_str(r, s, (size_t)(part_end - s));
        tmpl_value *next = key ? eval_getitem(r, cur, key) : NULL;
        tv_decref(r, key);
        tv_decref(r, cur);
        cur = next;
        if (!dot) break;
        s = dot + 1;
    }
    return cur;
}

/* ---- Strings ------------------------------------------------------------------------------ */
static tmpl_value *with_str(rt *r, tmpl_value *v, tmpl_value *(*op)(rt *, tmpl_value *, int), int how) {
    tmpl_value *s = tv_to_str(r, v);
    if (!s) return NULL;
    tmpl_value *out = op(r, s, how);
    tv_decref(r, s);
    return out;
}

static tmpl_value *f_upper(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const p0[] = {NULL};
    return bind_args(r, "upper", a, p0, NULL) ? NULL : with_str(r, v, str_case, CASE_UPPER);
}
static tmpl_value *f_lower(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const p0[] = {NULL};
    return bind_args(r, "lower", a, p0, NULL) ? NULL : with_str(r, v, str_case, CASE_LOWER);
}
static tmpl_value *f_title(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const p0[] = {NULL};
    return bind_args(r, "title", a, p0, NULL) ? NULL : with_str(r, v, str_case, CASE_JINJA_TITLE);
}
static tmpl_value *f_capitalize(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const p0[] = {NULL};
    return bind_args(r, "capitalize", a, p0, NULL) ? NULL : with_str(r, v, str_case, CASE_CAPITALIZE);
}

static tmpl_value *f_trim(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"chars", NULL};
    tmpl_value *p[1];
    if (bind_args(r, "trim", a, params, p)) return NULL;
    if (p[0] && p[0]->type != TV_NONE && p[0]->type != TV_STRING) return fail_null(r, "trim: chars must be a string");
    tmpl_value *s = tv_to_str(r, v);
    if (!s) return NULL;
    tmpl_value *out = str_strip(r, s, p[0] && p[0]->type == TV_STRING ? p[0] : NULL, true, true);
    tv_decref(r, s);
    return out;
}

static tmpl_value *f_replace(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"old", "new", "count", NULL};
    tmpl_value *p[3];
    int64_t count = -1;
    if (bind_args(r, "replace", a, params, p) || int_param(r, "replace", p[2], -1, &count)) return NULL;
    if (!p[0] || !p[1]) return fail_null(r, "replace needs the old and the new text");
    tmpl_value *s = tv_to_str(r, v), *old = s ? tv_to_str(r, p[0]) : NULL, *nw = old ? tv_to_str(r, p[1]) : NULL;
    tmpl_value *out = nw ? str_replace(r, s, old, nw, count) : NULL;
    tv_decref(r, s);
    tv_decref(r, old);
    tv_decref(r, nw);
    return out;
}

static tmpl_value *f_string(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const p0[] = {NULL};
    return bind_args(r, "string", a, p0, NULL) ? NULL : tv_to_str(r, v);
}

static tmpl_value *f_escape(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const p0[] = {NULL};
    if (bind_args(r, "escape", a, p0, NULL)) return NULL;
    tmpl_value *s = tv_to_str(r, v);
    if (!s) return NULL;
    sbuf b = {.limit = rt_mem_left(r)};
    int rc = 0;
    for (size_t i = 0; i < s->u.str.len && !rc; i++) {
        char c = s->u.str.s[i];
        const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
        rc = e ? sbuf_put(&b, e, strlen(e)) : sbuf_putc(&b, c);
    }
    tv_decref(r, s);
    if (rc) {
        sbuf_free(&b);
        return fail_null(r, "escape: result too long");
    }
    return tv_str_take(r, &b);
}

static tmpl_value *f_center(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"width", NULL};
    tmpl_value *p[1];
    int64_t width = 80;
    if (bind_args(r, "center", a, params, p) || int_param(r, "center", p[0], 80, &width)) return NULL;
    tmpl_value *s = tv_to_str(r, v);
    if (!s) return NULL;
    tmpl_value wv = {.type = TV_INT, .refs = TV_STATIC, .u.i = width};
    tmpl_value *args[1] = {&wv};
    call_args ca = {.pos = args, .npos = 1};
    tmpl_value method = {.type = TV_BUILTIN, .refs = TV_STATIC, .u.builtin = {builtin_method(s, "center", 6), s}};
    tmpl_value *out = call_builtin(r, &method, &ca);
    tv_decref(r, s);
    return out;
}

/* Jinja's indent: the first line is left alone unless `first`, blank lines unless `blank`. */
static tmpl_value *f_indent(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"width", "first", "blank", NULL};
    tmpl_value *p[3];
    if (bind_args(r, "indent", a, params, p)) return NULL;
    sbuf ind = {.limit = 4096};
    int64_t width = 4;
    if (p[0] && p[0]->type == TV_STRING) sbuf_put(&ind, p[0]->u.str.s, p[0]->u.str.len);
    else if (int_param(r, "indent", p[0], 4, &width)) return NULL;
    else for (int64_t i = 0; i < width && !ind.over; i++) sbuf_putc(&ind, ' ');
    if (ind.over) {
        sbuf_free(&ind);
        return fail_null(r, "indent: width too large");
    }
    tmpl_value nl = {.type = TV_STRING, .refs = TV_STATIC, .u.str = {"\n", 1}};
    tmpl_value *text = NULL, *lines = NULL;
    binary_op(r, '+', v, &nl, &text); /* the "\n" Jinja appends before splitting (strings only) */
    if (text) lines = str_splitlines(r, text, false);
    tv_decref(r, text);
    if (!lines) {
        sbuf_free(&ind);
        return NULL;
    }
    sbuf b = {.limit = rt_mem_left(r)};
    int rc = 0;
    bool blank = bool_arg(p[2], false);
    if (bool_arg(p[1], false) && ind.len) rc = sbuf_put(&b, ind.data, ind.len);
    for (size_t i = 0; i < lines->u.list.len && !rc; i++) {
        const tmpl_value *line = lines->u.list.items[i];
        if (i) rc = sbuf_putc(&b, '\n');
        if (!rc && i && (blank || line->u.str.len) && ind.len) rc = sbuf_put(&b, ind.data, ind.len);
        if (!rc) rc = sbuf_put(&b, line->u.str.s, line->u.str.len);
    }
    sbuf_free(&ind);
    tv_decref(r, lines);
    if (rc) {
        sbuf_free(&b);
        return fail_null(r, "indent: result too long");
    }
    return tv_str_take(r, &b);
}

static bool is_word_cp(uint32_t c) { return c == '_' || uni_isdigit(c) || uni_isalpha(c); }

static tmpl_value *f_wordcount(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const p0[] = {NULL};
    if (bind_args(r, "wordcount", a, p0, NULL)) return NULL;
    tmpl_value *s = tv_to_str(r, v);
    if (!s || (s != v && rt_decode(r, s->u.str.len))) { /* (a string operand is charged already) */
        tv_decref(r, s);
        return NULL;
    }
    int64_t count = 0;
    bool in_word = false;
    size_t w;
    for (size_t i = 0; i < s->u.str.len; i += w) {
        bool word = is_word_cp(utf8_decode(s->u.str.s + i, s->u.str.len - i, &w));
        if (word && !in_word) count++;
        in_word = word;
    }
    tv_decref(r, s);
    return tv_int(r, count);
}

/* value|format(args...) is str(value) % args (or % kwargs). */
static tmpl_value *f_format(rt *r, tmpl_value *v, const call_args *a) {
    if (a->npos && a->nkw) return fail_null(r, "format: give positional or keyword arguments, not both");
    tmpl_value *s = tv_to_str(r, v), *args = s ? (a->nkw ? tv_dict_new(r) : tv_list(r, a->npos)) : NULL;
    int rc = args ? 0 : -1;
    if (args && !a->nkw) args->u.list.tuple = true;
    for (size_t i = 0; !rc && i < a->npos; i++) rc = tv_list_push(r, args, tv_ref(a->pos[i]));
    for (size_t i = 0; !rc && i < a->nkw; i++) {
        tmpl_value *k = tv_str(r, a->names[i], strlen(a->names[i]));
        rc = k ? tv_dict_set(r, args, k, tv_ref(a->kw[i])) : -1;
    }
    tmpl_value *out = rc ? NULL : str_printf(r, s, args);
    tv_decref(r, s);
    tv_decref(r, args);
    return out;
}

/* ---- JSON --------------------------------------------------------------------------------- */
/* transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False), in that order for positional arguments. */
static tmpl_value *f_tojson(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    tmpl_value *p[4];
    if (bind_args(r, "tojson", a, params, p)) return NULL;
    json_opts o = {.item_sep = ", ", .key_sep = ": ", .ensure_ascii = bool_arg(p[0], false), .sort_keys = bool_arg(p[3], false)};
    char spaces[1025];
    if (p[1] && p[1]->type == TV_STRING) {
        o.indent = p[1]->u.str.s;
    } else if (p[1] && p[1]->type != TV_NONE && p[1]->type != TV_UNDEFINED) {
        int64_t n = 0;
        if (int_param(r, "tojson", p[1], 0, &n)) return NULL;
        if (n > 1024) return fail_null(r, "tojson: indent wider than 1024");
        n = n < 0 ? 0 : n;
        memset(spaces, ' ', (size_t)n);
        spaces[n] = 0;
        o.indent = spaces;
    }
    if (o.indent) o.item_sep = ",";
    if (p[2] && p[2]->type != TV_NONE) {
        if (p[2]->type != TV_LIST || p[2]->u.list.len != 2 || p[2]->u.list.items[0]->type != TV_STRING ||
            p[2]->u.list.items[1]->type != TV_STRING)
            return fail_null(r, "tojson: separators must be a pair of strings");
        o.item_sep = p[2]->u.list.items[0]->u.str.s;
        o.key_sep = p[2]->u.list.items[1]->u.str.s;
    }
    sbuf b = {.limit = rt_mem_left(r)};
    if (tv_write_json(r, &b, v, &o, 0)) {
        sbuf_free(&b);
        return NULL;
    }
    return tv_str_take(r, &b);
}

/* ---- Numbers ------------------------------------------------------------------------------ */
/* Python's int(str, base): optional whitespace and sign, digits with single underscores. */
static bool parse_int_text(const char *s, size_t n, int base, int64_t *out) {
    char buf[80];
    size_t i = 0, k = 0;
    while (i < n && uni_isspace((unsigned char)s[i])) i++;
    while (n > i && uni_isspace((unsigned char)s[n - 1])) n--;
    if (i < n && (s[i] == '+' || s[i] == '-')) buf[k++] = s[i++];
    if (i >= n || s[i] == '_') return false;
    for (; i < n && k + 1 < sizeof buf; i++) {
        if (s[i] == '_' && i + 1 < n && s[i + 1] != '_') continue;
        buf[k++] = s[i];
    }
    if (i < n) return false;
    buf[k] = 0;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, base);
    if (errno || *end || end == buf) return false; /* (a 0x prefix in base 16 is fine, as in Python) */
    *out = v;
    return true;
}

static bool parse_float_text(const char *s, size_t n, double *out) {
    char buf[128];
    while (n && uni_isspace((unsigned char)*s)) s++, n--;
    while (n && uni_isspace((unsigned char)s[n - 1])) n--;
    if (!n || n >= sizeof buf) return false;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] != '_') buf[k++] = s[i];
    buf[k] = 0;
    if (strchr(buf, 'x') || strchr(buf, 'X')) return false; /* strtod reads hex floats, Python does not */
    char *end;
    errno = 0;
    double d = strtod(buf, &end);
    if (*end || end == buf) return false;
    *out = d;
    return true;
}

static tmpl_value *f_int(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"default", "base", NULL};
    tmpl_value *p[2];
    int64_t base = 10, out;
    if (bind_args(r, "int", a, params, p) || int_param(r, "int", p[1], 10, &base)) return NULL;
    double d;
    switch (v->type) {
    case TV_UNDEFINED: fail_undefined(r, v, "int()"); return NULL;
    case TV_INT: return tv_ref(v);
    case TV_BOOL: return tv_int(r, v->u.b);
    case TV_FLOAT:
        if (isfinite(v->u.f) && fabs(v->u.f) < 9.2e18) return tv_int(r, (int64_t)v->u.f);
        break;
    case TV_STRING: /* (a bad base fails the parse, as Python's int() raises, and gives the default) */
        if (base >= 2 && base <= 36 && parse_int_text(v->u.str.s, v->u.str.len, (int)base, &out)) return tv_int(r, out);
        if (parse_float_text(v->u.str.s, v->u.str.len, &d) && isfinite(d) && fabs(d) < 9.2e18) return tv_int(r, (int64_t)d);
        break;
    default: break;
    }
    return p[0] ? tv_ref(p[0]) : tv_int(r, 0);
}

static tmpl_value *f_float(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"default", NULL};
    tmpl_value *p[1];
    if (bind_args(r, "float", a, params, p)) return NULL;
    double d;
    if (v->type == TV_UNDEFINED) {
        fail_undefined(r, v, "float()");
        return NULL;
    }
    if (v->type == TV_FLOAT) return tv_ref(v);
    if (v->type == TV_INT || v->type == TV_BOOL) return tv_float(r, tv_as_double(v));
    if (v->type == TV_STRING && parse_float_text(v->u.str.s, v->u.str.len, &d)) return tv_float(r, d);
    return p[0] ? tv_ref(p[0]) : tv_float(r, 0.0);
}

static tmpl_value *f_abs(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const p0[] = {NULL};
    if (bind_args(r, "abs", a, p0, NULL)) return NULL;
    if (v->type == TV_FLOAT) return tv_float(r, fabs(v->u.f));
    if (v->type == TV_INT || v->type == TV_BOOL) {
        int64_t i = v->type == TV_BOOL ? v->u.b : v->u.i;
        if (i == INT64_MIN) return fail_null(r, "integer overflow in abs");
        return tv_int(r, i < 0 ? -i : i);
    }
    if (v->type == TV_UNDEFINED) {
        fail_undefined(r, v, "abs");
        return NULL;
    }
    return fail_null(r, "bad operand type for abs(): '%s'", tv_type_name(v));
}

/* Python's round(x, n): round half to even on the exact binary value, which printf's
 * correctly rounded conversion gives us. */
static double round_half_even(double x, int64_t ndigits) {
    if (!isfinite(x) || ndigits > 300) return x;
    if (ndigits < -300) return 0.0 * x;
    if (ndigits >= 0) {
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)ndigits, x);
        return strtod(buf, NULL);
    }
    double scale = pow(10.0, (double)-ndigits), y = x / scale, fl = floor(y), diff = y - fl;
    double rounded = diff > 0.5 ? fl + 1 : diff < 0.5 ? fl : (fmod(fl, 2) == 0 ? fl : fl + 1);
    return rounded * scale;
}

/* Python's round(i, ndigits) for an int and ndigits < 0: to a multiple of 10**-ndigits, ties to
 * even. */
static int64_t round_int_half_even(int64_t i, int64_t ndigits) {
    if (ndigits < -18) return 0;
    int64_t unit = 1;
    for (int64_t k = 0; k < -ndigits; k++) unit *= 10;
    int64_t q = i / unit, rem = i % unit;
    if (rem < 0) { /* floor division */
        q -= 1;
        rem += unit;
    }
    if (rem * 2 > unit || (rem * 2 == unit && (q & 1))) q += 1;
    int64_t out;
    return __builtin_mul_overflow(q, unit, &out) ? i : out;
}

static tmpl_value *f_round(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"precision", "method", NULL};
    tmpl_value *p[2];
    int64_t prec = 0;
    if (bind_args(r, "round", a, params, p) || int_param(r, "round", p[0], 0, &prec)) return NULL;
    const char *method = !p[1] ? "common" : p[1]->type == TV_STRING ? p[1]->u.str.s : "";
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return fail_null(r, "round: method must be common, ceil or floor");
    if (!tv_is_num(v)) return fail_null(r, "round: expected a number, got %s", tv_type_name(v));
    if (!strcmp(method, "common")) {
        if (v->type == TV_FLOAT) return tv_float(r, round_half_even(v->u.f, prec));
        int64_t i = v->type == TV_BOOL ? v->u.b : v->u.i;
        if (prec >= 0) return tv_int(r, i);
        return tv_int(r, round_int_half_even(i, prec)); /* Python's round(int, -n) stays an int */
    }
    double scale = pow(10.0, (double)prec), x = tv_as_double(v) * scale;
    return tv_float(r, (method[0] == 'c' ? ceil(x) : floor(x)) / scale);
}

/* ---- Sequences ---------------------------------------------------------------------------- */
static tmpl_value *f_length(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const p0[] = {NULL};
    if (bind_args(r, "length", a, p0, NULL)) return NULL;
    switch (v->type) {
    case TV_STRING: return tv_int(r, (int64_t)utf8_count(v->u.str.s, v->u.str.len));
    case TV_LIST:
        if (v->u.list.lazy) return fail_null(r, "object of type 'generator' has no len()");
        return tv_int(r, (int64_t)v->u.list.len);
    case TV_DICT: return tv_int(r, (int64_t)v->u.dict.len);
    case TV_UNDEFINED: return tv_int(r, 0);
    case TV_LOOP: return tv_int(r, (int64_t)v->u.loop->items->u.list.len);
    default: return fail_null(r, "object of type '%s' has no len()", tv_type_name(v));
    }
}

static tmpl_value *f_list(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const p0[] = {NULL};
    if (bind_args(r, "list", a, p0, NULL)) return NULL;
    tmpl_value *l = to_list(r, v);
    if (!l || (!l->u.list.tuple && !l->u.list.lazy)) return l;
    tmpl_value *copy = tv_list(r, l->u.list.len); /* a tuple or an iterator becomes a list */
    for (size_t i = 0; copy && i < l->u.list.len; i++)
        if (tv_list_push(r, copy, tv_ref(l->u.list.items[i]))) {
            tv_decref(r, copy);
            copy = NULL;
        }
    tv_decref(r, l);
    return copy;
}

static tmpl_value *first_or_last(rt *r, tmpl_value *v, const call_args *a, bool last) {
    static const char *const p0[] = {NULL};
    if (bind_args(r, last ? "last" : "first", a, p0, NULL)) return NULL;
    if (v->type == TV_UNDEFINED) return tv_ref(v);
    if (last && v->type == TV_LIST && v->u.list.lazy) return fail_null(r, "'generator' object is not reversible");
    tmpl_value *l = to_list(r, v);
    if (!l) return NULL;
    tmpl_value *out = l->u.list.len ? tv_ref(l->u.list.items[last ? l->u.list.len - 1 : 0])
                                    : tv_undefined(r, "No %s item, sequence was empty.", last ? "last" : "first");
    tv_decref(r, l);
    return out;
}
static tmpl_value *f_first(rt *r, tmpl_value *v, const call_args *a) { return first_or_last(r, v, a, false); }
static tmpl_value *f_last(rt *r, tmpl_value *v, const call_args *a) { return first_or_last(r, v, a, true); }

static tmpl_value *f_reverse(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const p0[] = {NULL};
    if (bind_args(r, "reverse", a, p0, NULL)) return NULL;
    tmpl_value *l = to_list(r, v);
    if (!l) return NULL;
    tmpl_value *out = NULL;
    if (v->type != TV_STRING) {
        if (!(out = tv_list(r, l->u.list.len))) {
            tv_decref(r, l);
            return NULL;
        }
        out->u.list.lazy = !(v->type == TV_LIST && v->u.list.lazy); /* reversed(x) is an iterator; of a generator, a list */
    }
    sbuf b = {0};
    int rc = 0;
    for (size_t i = l->u.list.len; i-- > 0 && !rc;) {
        if (out) rc = tv_list_push(r, out, tv_ref(l->u.list.items[i]));
        else rc = sbuf_put(&b, l->u.list.items[i]->u.str.s, l->u.list.items[i]->u.str.len);
    }
    tv_decref(r, l);
    if (v->type == TV_STRING) {
        if (rc) {
            sbuf_free(&b);
            return fail_null(r, "reverse: out of memory");
        }
        return tv_str_take(r, &b);
    }
    if (rc) {
        tv_decref(r, out);
        return NULL;
    }
    return out;
}

static tmpl_value *f_join(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"d", "attribute", NULL};
    tmpl_value *p[2];
    if (bind_args(r, "join", a, params, p)) return NULL;
    tmpl_value empty = {.type = TV_STRING, .refs = TV_STATIC, .u.str = {"", 0}};
    tmpl_value *sep = p[0] ? tv_to_str(r, p[0]) : tv_ref(&empty);
    if (!sep) return NULL;
    tmpl_value *items = to_list(r, v), *out = NULL;
    if (items && p[1]) { /* join the attribute of each item */
        tmpl_value *picked = tv_list(r, items->u.list.len);
        for (size_t i = 0; picked && i < items->u.list.len; i++) {
            tmpl_value *x = attr_path(r, items->u.list.items[i], p[1]);
            if (!x || tv_list_push(r, picked, x)) {
                tv_decref(r, picked);
                picked = NULL;
            }
        }
        tv_decref(r, items);
        items = picked;
    }
    if (items) out = str_join(r, sep, items, true);
    tv_decref(r, items);
    tv_decref(r, sep);
    return out;
}

static tmpl_value *f_default(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"default_value", "boolean", NULL};
    tmpl_value *p[2];
    if (bind_args(r, "default", a, params, p)) return NULL;
    bool use_default = v->type == TV_UNDEFINED || (bool_arg(p[1], false) && !tv_truthy(v));
    if (!use_default) return tv_ref(v);
    return p[0] ? tv_ref(p[0]) : tv_str(r, "", 0);
}

static tmpl_value *f_items(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const p0[] = {NULL};
    if (bind_args(r, "items", a, p0, NULL)) return NULL;
    if (v->type == TV_UNDEFINED) return as_lazy(tv_list(r, 0));
    if (v->type != TV_DICT) return fail_null(r, "items: can only get item pairs from a mapping, not %s", tv_type_name(v));
    return as_lazy(dict_items_list(r, v));
}

static tmpl_value *f_safe(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const p0[] = {NULL};
    return bind_args(r, "safe", a, p0, NULL) ? NULL : tv_to_str(r, v);
}

static tmpl_value *f_attr(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"name", NULL};
    tmpl_value *p[1];
    if (bind_args(r, "attr", a, params, p)) return NULL;
    if (!p[0] || p[0]->type != TV_STRING) return fail_null(r, "attr: the name must be a string");
    if (v->type == TV_DICT && builtin_method(v, p[0]->u.str.s, p[0]->u.str.len) < 0)
        return tv_undefined(r, "'dict object' has no attribute '%s'", p[0]->u.str.s); /* attr() skips items */
    return eval_getattr(r, v, p[0]->u.str.s, p[0]->u.str.len);
}

/* The key a sort, unique, min or max compares: an attribute of the item if asked. */
static tmpl_value *item_key(rt *r, tmpl_value *item, const tmpl_value *attribute) {
    return attribute ? attr_path(r, item, attribute) : tv_ref(item);
}

/* Stable merge sort of idx[0..n) by keys; -1 (error set) when two keys cannot be ordered. */
static int merge_sort(rt *r, tmpl_value **keys, size_t *idx, size_t *tmp, size_t n, bool fold, bool reverse) {
    if (n < 2) return 0;
    size_t h = n / 2;
    if (merge_sort(r, keys, idx, tmp, h, fold, reverse) || merge_sort(r, keys, idx + h, tmp, n - h, fold, reverse)) return -1;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c = tv_compare(r, keys[idx[j]], keys[idx[i]], fold);
        if (c == TV_CMP_FAIL) return -1;
        if (c == 2)
            return rt_fail(r, "'<' not supported between instances of '%s' and '%s'", tv_type_name(keys[idx[j]]),
                           tv_type_name(keys[idx[i]]));
        bool take_right = reverse ? c > 0 : c < 0;
        tmp[k++] = take_right ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
    return 0;
}

/* Sort items (a list) by their keys; returns a new list. */
static tmpl_value *sorted_by(rt *r, tmpl_value *items, tmpl_value **keys, bool fold, bool reverse) {
    size_t n = items->u.list.len;
    size_t *idx = malloc((n ? n : 1) * 2 * sizeof *idx);
    if (!idx) return fail_null(r, "out of memory");
    for (size_t i = 0; i < n; i++) idx[i] = i;
    tmpl_value *out = NULL;
    if (!merge_sort(r, keys, idx, idx + n, n, fold, reverse)) {
        out = tv_list(r, n);
        for (size_t i = 0; out && i < n; i++)
            if (tv_list_push(r, out, tv_ref(items->u.list.items[idx[i]]))) {
                tv_decref(r, out);
                out = NULL;
            }
    }
    free(idx);
    return out;
}

/* The keys of all items (attribute lookups done once); caller releases with release_keys. */
static tmpl_value **collect_keys(rt *r, tmpl_value *items, const tmpl_value *attribute) {
    size_t n = items->u.list.len;
    tmpl_value **keys = calloc(n ? n : 1, sizeof *keys);
    if (!keys) {
        rt_fail(r, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (!(keys[i] = item_key(r, items->u.list.items[i], attribute))) {
            for (size_t k = 0; k < i; k++) tv_decref(r, keys[k]);
            free(keys);
            return NULL;
        }
    return keys;
}

static void release_keys(rt *r, tmpl_value **keys, size_t n) {
    for (size_t i = 0; i < n; i++) tv_decref(r, keys[i]);
    free(keys);
}

static tmpl_value *f_sort(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"reverse", "case_sensitive", "attribute", NULL};
    tmpl_value *p[3];
    if (bind_args(r, "sort", a, params, p)) return NULL;
    tmpl_value *items = to_list(r, v);
    if (!items) return NULL;
    tmpl_value **keys = collect_keys(r, items, p[2]), *out = NULL;
    if (keys) {
        out = sorted_by(r, items, keys, !bool_arg(p[1], false), bool_arg(p[0], false));
        release_keys(r, keys, items->u.list.len);
    }
    tv_decref(r, items);
    return out;
}

static tmpl_value *f_dictsort(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"case_sensitive", "by", "reverse", NULL};
    tmpl_value *p[3];
    if (bind_args(r, "dictsort", a, params, p)) return NULL;
    if (v->type != TV_DICT) return fail_null(r, "dictsort: expected a dict, got %s", tv_type_name(v));
    bool by_value = p[1] && p[1]->type == TV_STRING && !strcmp(p[1]->u.str.s, "value");
    if (p[1] && !by_value && !(p[1]->type == TV_STRING && !strcmp(p[1]->u.str.s, "key")))
        return fail_null(r, "dictsort: you can only sort by either 'key' or 'value'");
    tmpl_value *items = dict_items_list(r, v);
    if (!items) return NULL;
    tmpl_value **keys = calloc(items->u.list.len ? items->u.list.len : 1, sizeof *keys), *out = NULL;
    if (keys) {
        for (size_t i = 0; i < items->u.list.len; i++) keys[i] = items->u.list.items[i]->u.list.items[by_value ? 1 : 0];
        out = sorted_by(r, items, keys, !bool_arg(p[0], false), bool_arg(p[2], false));
        free(keys);
    } else {
        rt_fail(r, "out of memory");
    }
    tv_decref(r, items);
    return out;
}

/* A string key lowercased (for case-insensitive unique), anything else as it is. */
static tmpl_value *folded(rt *r, tmpl_value *k, bool case_sensitive) {
    if (case_sensitive || k->type != TV_STRING) return tv_ref(k);
    return str_case(r, k, CASE_LOWER);
}

static tmpl_value *f_unique(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"case_sensitive", "attribute", NULL};
    tmpl_value *p[2];
    if (bind_args(r, "unique", a, params, p)) return NULL;
    tmpl_value *items = to_list(r, v);
    tmpl_value *seen = items ? tv_dict_new(r) : NULL, *out = seen ? tv_list(r, 0) : NULL;
    int rc = out ? 0 : -1;
    for (size_t i = 0; !rc && i < items->u.list.len; i++) {
        tmpl_value *k = item_key(r, items->u.list.items[i], p[1]), *f = k ? folded(r, k, bool_arg(p[0], false)) : NULL;
        tv_decref(r, k);
        if (!f) rc = -1;
        else if (!tv_hashable(f)) rc = rt_fail(r, "unhashable type: '%s'", tv_type_name(f));
        else if (tv_dict_get(r, seen, f)) rc = 0;
        else if (r->failed) rc = -1;
        else if (!(rc = tv_dict_set(r, seen, tv_ref(f), &tv_none_static))) rc = tv_list_push(r, out, tv_ref(items->u.list.items[i]));
        tv_decref(r, f);
    }
    tv_decref(r, items);
    tv_decref(r, seen);
    if (rc) {
        tv_decref(r, out);
        return NULL;
    }
    return as_lazy(out);
}

static tmpl_value *min_max(rt *r, tmpl_value *v, const call_args *a, bool want_max) {
    static const char *const params[] = {"case_sensitive", "attribute", NULL};
    tmpl_value *p[2];
    if (bind_args(r, want_max ? "max" : "min", a, params, p)) return NULL;
    tmpl_value *items = to_list(r, v);
    if (!items) return NULL;
    tmpl_value **keys = collect_keys(r, items, p[1]), *out = NULL;
    if (keys) {
        size_t best = 0;
        bool fold = !bool_arg(p[0], false), ok = true;
        for (size_t i = 1; i < items->u.list.len && ok; i++) {
            int c = tv_compare(r, keys[i], keys[best], fold);
            if (c == TV_CMP_FAIL) ok = false;
            else if (c == 2) ok = !rt_fail(r, "'<' not supported between instances of '%s' and '%s'", tv_type_name(keys[i]), tv_type_name(keys[best]));
            else if (want_max ? c > 0 : c < 0) best = i;
        }
        if (ok) out = items->u.list.len ? tv_ref(items->u.list.items[best]) : tv_undefined(r, "No aggregated item, sequence was empty.");
        release_keys(r, keys, items->u.list.len);
    }
    tv_decref(r, items);
    return out;
}
static tmpl_value *f_min(rt *r, tmpl_value *v, const call_args *a) { return min_max(r, v, a, false); }
static tmpl_value *f_max(rt *r, tmpl_value *v, const call_args *a) { return min_max(r, v, a, true); }

static tmpl_value *f_sum(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"attribute", "start", NULL};
    tmpl_value *p[2];
    if (bind_args(r, "sum", a, params, p)) return NULL;
    tmpl_value *items = to_list(r, v);
    if (!items) return NULL;
    tmpl_value *acc = p[1] ? tv_ref(p[1]) : tv_int(r, 0);
    for (size_t i = 0; acc && i < items->u.list.len; i++) {
        tmpl_value *x = item_key(r, items->u.list.items[i], p[0]), *next = NULL;
        if (x) binary_op(r, '+', acc, x, &next);
        tv_decref(r, x);
        tv_decref(r, acc);
        acc = next;
    }
    tv_decref(r, items);
    return acc;
}

static tmpl_value *f_batch(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"linecount", "fill_with", NULL};
    tmpl_value *p[2];
    int64_t per = 0;
    if (bind_args(r, "batch", a, params, p) || int_param(r, "batch", p[0], 0, &per)) return NULL;
    if (per <= 0) return fail_null(r, "batch: linecount must be positive");
    tmpl_value *items = to_list(r, v), *out = items ? tv_list(r, 0) : NULL, *row = NULL;
    int rc = out ? 0 : -1;
    for (size_t i = 0; !rc && i < items->u.list.len; i++) {
        if (!row && !(row = tv_list(r, 0))) rc = -1;
        if (!rc) rc = tv_list_push(r, row, tv_ref(items->u.list.items[i]));
        if (!rc && row->u.list.len == (uint64_t)per) {
            rc = tv_list_push(r, out, row);
            row = NULL;
        }
    }
    if (!rc && row) {
        while (!rc && p[1] && p[1]->type != TV_NONE && row->u.list.len < (uint64_t)per) rc = tv_list_push(r, row, tv_ref(p[1]));
        if (!rc) rc = tv_list_push(r, out, row);
        row = NULL;
    }
    tv_decref(r, row);
    tv_decref(r, items);
    if (rc) {
        tv_decref(r, out);
        return NULL;
    }
    return as_lazy(out);
}

static tmpl_value *f_slice(rt *r, tmpl_value *v, const call_args *a) {
    static const char *const params[] = {"slices", "fill_with", NULL};
    tmpl_value *p[2];
    int64_t slices = 0;
    if (bind_args(r, "slice", a, params, p) || int_param(r, "slice", p[0], 0, &slices)) return NULL;
    if (slices <= 0 || slices > 100000) return fail_null(r, "slice: the number of slices must be between 1 and 100000");
    tmpl_value *items = to_list(r, v), *out = items ? tv_list(r, (size_t)slices) : NULL;
    int rc = out ? 0 : -1;
    size_t len = items ? items->u.list.len : 0, per = len / (size_t)slices, extra = len % (size_t)slices, offset = 0;
    for (size_t s = 0; !rc && s < (size_t)slices; s++) {
        size_t start = offset + s * per;
        if (s < extra) offset++;
        size_t end = offset + (s + 1) * per;
        tmpl_value *part = tv_list(r, 0);
        if (!part) rc = -1;
        for (size_t i = start; !rc && i < end; i++) rc = tv_list_push(r, part, tv_ref(items->u.list.items[i]));
        if (!rc && p[1] && p[1]->type != TV_NONE && s >= extra) rc = tv_list_push(r, part, tv_ref(p[1]));
        if (!rc) rc = tv_list_push(r, out, part);
        else tv_decref(r, part);
    }
    tv_decref(r, items);
    if (rc) {
        tv_decref(r, out);
        return NULL;
    }
    return as_lazy(out);
}

/* ---- map, select, reject, selectattr, rejectattr ------------------------------------------- */
/* Arguments from index `from` on, with the same keywords minus `skip`. */
static call_args rest_args(const call_args *a, size_t from) {
    call_args rest = *a;
    rest.pos = a->pos + (from < a->npos ? from : a->npos);
    rest.npos = from < a->npos ? a->npos - from : 0;
    return rest;
}

/* map, select and friends check their arguments only when there are items (Jinja's generators
 * look at them on the first item). */
static bool nothing_to_do(const tmpl_value *v) { return !tv_truthy(v) && v->type != TV_NAMESPACE; }

static tmpl_value *f_map(rt *r, tmpl_value *v, const call_args *a) {
    if (nothing_to_do(v)) return as_lazy(tv_list(r, 0));
    tmpl_value *attribute = NULL, *def = NULL;
    int fn = -1;
    if (a->npos) {
        if (a->pos[0]->type != TV_STRING) return fail_null(r, "map: the filter name must be a string");
        fn = filter_lookup(a->pos[0]->u.str.s, a->pos[0]->u.str.len);
        if (fn < 0) return fail_null(r, "map: no filter named '%s'", a->pos[0]->u.str.s);
    } else {
        for (size_t i = 0; i < a->nkw; i++) {
            if (!strcmp(a->names[i], "attribute")) attribute = a->kw[i];
            else if (!strcmp(a->names[i], "default")) def = a->kw[i];
            else return fail_null(r, "map() got an unexpected keyword argument '%s'", a->names[i]);
        }
        if (!attribute) return fail_null(r, "map: give a filter name or attribute=");
    }
    tmpl_value *items = to_list(r, v), *out = items ? tv_list(r, items->u.list.len) : NULL;
    call_args rest = rest_args(a, 1);
    int rc = out ? 0 : -1;
    for (size_t i = 0; !rc && i < items->u.list.len; i++) {
        tmpl_value *x = fn >= 0 ? apply_filter(r, fn, items->u.list.items[i], &rest) : attr_path(r, items->u.list.items[i], attribute);
        if (x && x->type == TV_UNDEFINED && def) {
            tv_decref(r, x);
            x = tv_ref(def);
        }
        rc = x ? tv_list_push(r, out, x) : -1;
    }
    tv_decref(r, items);
    if (rc) {
        tv_decref(r, out);
        return NULL;
    }
    return as_lazy(out);
}

/* select / reject (on the items) and selectattr / rejectattr (on an attribute of each). */
static tmpl_value *select_items(rt *r, tmpl_value *v, const call_args *a, bool by_attr, bool keep) {
    if (nothing_to_do(v)) return as_lazy(tv_list(r, 0));
    size_t at = 0;
    tmpl_value *attribute = NULL;
    if (a->nkw) return fail_null(r, "select filters take no keyword arguments (got '%s')", a->names[0]);
    if (by_attr) {
        if (!a->npos) return fail_null(r, "selectattr and rejectattr need an attribute name");
        attribute = a->pos[at++];
    }
    int fn = -1;
    if (at < a->npos) {
        if (a->pos[at]->type != TV_STRING) return fail_null(r, "select: the test name must be a string");
        fn = test_lookup(a->pos[at]->u.str.s, a->pos[at]->u.str.len);
        if (fn < 0) return fail_null(r, "no test named '%s'", a->pos[at]->u.str.s);
        at++;
    }
    call_args rest = rest_args(a, at);
    tmpl_value *items = to_list(r, v), *out = items ? tv_list(r, 0) : NULL;
    int rc = out ? 0 : -1;
    for (size_t i = 0; !rc && i < items->u.list.len; i++) {
        tmpl_value *x = by_attr ? attr_path(r, items->u.list.items[i], attribute) : tv_ref(items->u.list.items[i]);
        int pass = !x ? -1 : fn >= 0 ? apply_test(r, fn, x, &rest) : tv_truthy(x);
        tv_decref(r, x);
        if (pass < 0) rc = -1;
        else if ((pass != 0) == keep) rc = tv_list_push(r, out, tv_ref(items->u.list.items[i]));
    }
    tv_decref(r, items);
    if (rc) {
        tv_decref(r, out);
        return NULL;
    }
    return as_lazy(out);
}
static tmpl_value *f_select(rt *r, tmpl_value *v, const call_args *a) { return select_items(r, v, a, false, true); }
static tmpl_value *f_reject(rt *r, tmpl_value *v, const call_args *a) { return select_items(r, v, a, false, false); }
static tmpl_value *f_selectattr(rt *r, tmpl_value *v, const call_args *a) { return select_items(r, v, a, true, true); }
static tmpl_value *f_rejectattr(rt *r, tmpl_value *v, const call_args *a) { return select_items(r, v, a, true, false); }

/* ---- The table ---------------------------------------------------------------------------- */
static const struct filter {
    const char *name;
    filter_fn fn;
} filters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize}, {"center", f_center},
    {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
    {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"format", f_format}, {"indent", f_indent}, {"int", f_int},
    {"items", f_items}, {"join", f_join}, {"last", f_last}, {"length", f_length}, {"list", f_list},
    {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min}, {"reject", f_reject},
    {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse}, {"round", f_round},
    {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr}, {"slice", f_slice}, {"sort", f_sort},
    {"string", f_string}, {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim},
    {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
};

int filter_lookup(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (strlen(filters[i].name) == len && !memcmp(filters[i].name, name, len)) return (int)i;
    return -1;
}

/* A filter reads a string operand through at least once (case, trim, length, escape, indent,
 * ...): its bytes are charged here, for all of them. */
tmpl_value *apply_filter(rt *r, int fn, tmpl_value *v, const call_args *a) {
    if (rt_decode(r, v->type == TV_STRING ? v->u.str.len : 0)) return NULL;
    return filters[fn].fn(r, v, a);
}
