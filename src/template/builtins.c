/* Global functions (range, dict, namespace, raise_exception, strftime_now) and the methods of
 * strings, dicts, lists and loops that templates call. Methods that would change a value
 * (list.append, dict.update, ...) are refused, as Jinja's immutable sandbox refuses them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/internal.h"

/* Jinja's sandbox refuses to build a range longer than this. */
#define MAX_RANGE 100000

enum {
    /* strings */
    M_STRIP = BI_GLOBAL_END, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES, M_STARTSWITH,
    M_ENDSWITH, M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE, M_SWAPCASE, M_CASEFOLD, M_REPLACE, M_FIND,
    M_RFIND, M_INDEX, M_RINDEX, M_COUNT, M_JOIN, M_ISDIGIT, M_ISALPHA, M_ISALNUM, M_ISSPACE,
    M_ISLOWER, M_ISUPPER, M_REMOVEPREFIX, M_REMOVESUFFIX, M_PARTITION, M_RPARTITION, M_CENTER,
    M_LJUST, M_RJUST, M_ZFILL,
    /* dicts */
    M_ITEMS, M_KEYS, M_VALUES, M_GET, M_DICT_COPY,
    /* lists */
    M_LIST_INDEX, M_LIST_COUNT, M_LIST_COPY,
    /* loops */
    M_CYCLE, M_CHANGED,
    M_END
};

static const struct method {
    const char *name;
    tv_type type;
    int id;
} methods[] = {
    {"strip", TV_STRING, M_STRIP}, {"lstrip", TV_STRING, M_LSTRIP}, {"rstrip", TV_STRING, M_RSTRIP},
    {"split", TV_STRING, M_SPLIT}, {"rsplit", TV_STRING, M_RSPLIT}, {"splitlines", TV_STRING, M_SPLITLINES},
    {"startswith", TV_STRING, M_STARTSWITH}, {"endswith", TV_STRING, M_ENDSWITH},
    {"upper", TV_STRING, M_UPPER}, {"lower", TV_STRING, M_LOWER}, {"title", TV_STRING, M_TITLE},
    {"capitalize", TV_STRING, M_CAPITALIZE}, {"swapcase", TV_STRING, M_SWAPCASE},
    {"casefold", TV_STRING, M_CASEFOLD}, {"replace", TV_STRING, M_REPLACE}, {"find", TV_STRING, M_FIND},
    {"rfind", TV_STRING, M_RFIND}, {"index", TV_STRING, M_INDEX}, {"rindex", TV_STRING, M_RINDEX},
    {"count", TV_STRING, M_COUNT}, {"join", TV_STRING, M_JOIN}, {"isdigit", TV_STRING, M_ISDIGIT},
    {"isalpha", TV_STRING, M_ISALPHA}, {"isalnum", TV_STRING, M_ISALNUM}, {"isspace", TV_STRING, M_ISSPACE},
    {"islower", TV_STRING, M_ISLOWER}, {"isupper", TV_STRING, M_ISUPPER},
    {"removeprefix", TV_STRING, M_REMOVEPREFIX}, {"removesuffix", TV_STRING, M_REMOVESUFFIX},
    {"partition", TV_STRING, M_PARTITION}, {"rpartition", TV_STRING, M_RPARTITION},
    {"center", TV_STRING, M_CENTER}, {"ljust", TV_STRING, M_LJUST}, {"rjust", TV_STRING, M_RJUST},
    {"zfill", TV_STRING, M_ZFILL},
    {"items", TV_DICT, M_ITEMS}, {"keys", TV_DICT, M_KEYS}, {"values", TV_DICT, M_VALUES},
    {"get", TV_DICT, M_GET}, {"copy", TV_DICT, M_DICT_COPY},
    {"index", TV_LIST, M_LIST_INDEX}, {"count", TV_LIST, M_LIST_COUNT}, {"copy", TV_LIST, M_LIST_COPY},
    {"cycle", TV_LOOP, M_CYCLE}, {"changed", TV_LOOP, M_CHANGED},
};

static const char *const unsafe_list[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", NULL};
static const char *const unsafe_dict[] = {"pop", "popitem", "setdefault", "update", "clear", NULL};

static const char *const global_names[BI_GLOBAL_END] = {"range", "dict", "namespace", "raise_exception", "strftime_now"};

tmpl_value tv_global_fns[BI_GLOBAL_END] = {
    {.type = TV_BUILTIN, .refs = TV_STATIC, .u.builtin = {BI_RANGE, NULL}},
    {.type = TV_BUILTIN, .refs = TV_STATIC, .u.builtin = {BI_DICT, NULL}},
    {.type = TV_BUILTIN, .refs = TV_STATIC, .u.builtin = {BI_NAMESPACE, NULL}},
    {.type = TV_BUILTIN, .refs = TV_STATIC, .u.builtin = {BI_RAISE, NULL}},
    {.type = TV_BUILTIN, .refs = TV_STATIC, .u.builtin = {BI_STRFTIME, NULL}},
};

int builtin_global(const char *name) {
    for (int i = 0; i < BI_GLOBAL_END; i++)
        if (!strcmp(global_names[i], name)) return i;
    return -1;
}

static bool name_eq(const char *lit, const char *name, size_t len) { return strlen(lit) == len && !memcmp(lit, name, len); }

int builtin_method(const tmpl_value *self, const char *name, size_t len) {
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (methods[i].type == self->type && name_eq(methods[i].name, name, len)) return methods[i].id;
    return -1;
}

bool builtin_unsafe(const tmpl_value *self, const char *name, size_t len) {
    const char *const *list = self->type == TV_LIST ? unsafe_list : self->type == TV_DICT ? unsafe_dict : NULL;
    for (; list && *list; list++)
        if (name_eq(*list, name, len)) return true;
    return false;
}

const char *builtin_name(int id) {
    if (id >= 0 && id < BI_GLOBAL_END) return global_names[id];
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (methods[i].id == id) return methods[i].name;
    return "method";
}

int bind_args(rt *r, const char *fname, const call_args *a, const char *const *params, tmpl_value **out) {
    size_t np = 0;
    while (params[np]) np++;
    if (a->npos > np) return rt_fail(r, "%s() takes at most %zu argument%s (%zu given)", fname, np, np == 1 ? "" : "s", a->npos);
    for (size_t i = 0; i < np; i++) out[i] = i < a->npos ? a->pos[i] : NULL;
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i = 0;
        while (i < np && strcmp(params[i], a->names[k])) i++;
        if (i == np) return rt_fail(r, "%s() got an unexpected keyword argument '%s'", fname, a->names[k]);
        if (out[i]) return rt_fail(r, "%s() got multiple values for argument '%s'", fname, a->names[k]);
        out[i] = a->kw[k];
    }
    return 0;
}

/* An argument that must be an int (bool counts, as in Python); `def` when absent or None. */
static int int_arg(rt *r, const char *fname, const tmpl_value *v, int64_t def, int64_t *out) {
    if (!v || v->type == TV_NONE) {
        *out = def;
        return 0;
    }
    if (v->type == TV_INT) *out = v->u.i;
    else if (v->type == TV_BOOL) *out = v->u.b;
    else return rt_fail(r, "%s(): expected an integer, got %s", fname, tv_type_name(v));
    return 0;
}

static int str_arg(rt *r, const char *fname, const tmpl_value *v) {
    if (v && v->type == TV_STRING) return 0;
    return rt_fail(r, "%s(): expected a string, got %s", fname, v ? tv_type_name(v) : "nothing");
}

/* ---- Global functions --------------------------------------------------------------------- */
static tmpl_value *fn_range(rt *r, const call_args *a) {
    static const char *const params[] = {"start", "stop", "step", NULL};
    tmpl_value *p[3];
    if (bind_args(r, "range", a, params, p)) return NULL;
    if (!p[0]) {
        rt_fail(r, "range() expects at least 1 argument");
        return NULL;
    }
    int64_t start = 0, stop = 0, step = 1;
    if (!p[1]) {
        if (int_arg(r, "range", p[0], 0, &stop)) return NULL;
    } else if (int_arg(r, "range", p[0], 0, &start) || int_arg(r, "range", p[1], 0, &stop) ||
               int_arg(r, "range", p[2], 1, &step)) {
        return NULL;
    }
    if (step == 0) {
        rt_fail(r, "range() arg 3 must not be zero");
        return NULL;
    }
    /* The length and the items, computed in unsigned arithmetic: with extreme bounds and steps,
     * stop - start and i * step overflow int64 although every item fits in one. */
    uint64_t span = step > 0 ? (uint64_t)stop - (uint64_t)start : (uint64_t)start - (uint64_t)stop;
    uint64_t stride = step > 0 ? (uint64_t)step : 0 - (uint64_t)step;
    uint64_t count = (step > 0 ? stop <= start : stop >= start) ? 0 : span / stride + (span % stride != 0);
    if (count > MAX_RANGE) {
        rt_fail(r, "range too big: the sandbox allows at most %d items", MAX_RANGE);
        return NULL;
    }
    size_t n = (size_t)count;
    if (rt_steps(r, n)) return NULL;
    tmpl_value *l = tv_list(r, n);
    for (size_t i = 0; l && i < n; i++) {
        tmpl_value *v = tv_int(r, (int64_t)((uint64_t)start + (uint64_t)i * (uint64_t)step));
        if (!v || tv_list_push(r, l, v)) {
            tv_decref(r, l);
            return NULL;
        }
    }
    return l;
}

/* Copy the entries of a mapping (a dict, a namespace, or a list of pairs) into d. */
static int update_from(rt *r, tmpl_value *d, tmpl_value *src) {
    if (src->type == TV_DICT || src->type == TV_NAMESPACE) {
        for (size_t i = 0; i < src->u.dict.len; i++)
            if (tv_dict_set(r, d, tv_ref(src->u.dict.ent[i].key), tv_ref(src->u.dict.ent[i].val))) return -1;
        return 0;
    }
    if (src->type != TV_LIST) return rt_fail(r, "cannot convert %s to a dict", tv_type_name(src));
    for (size_t i = 0; i < src->u.list.len; i++) {
        tmpl_value *pair = src->u.list.items[i];
        if (pair->type != TV_LIST || pair->u.list.len != 2)
            return rt_fail(r, "dictionary update sequence element #%zu is not a pair", i);
        if (!tv_hashable(pair->u.list.items[0])) return rt_fail(r, "unhashable type: '%s'", tv_type_name(pair->u.list.items[0]));
        if (tv_dict_set(r, d, tv_ref(pair->u.list.items[0]), tv_ref(pair->u.list.items[1]))) return -1;
    }
    return 0;
}

/* dict(...) and namespace(...): an optional mapping, then keyword arguments. */
static tmpl_value *fn_mapping(rt *r, const call_args *a, bool is_namespace) {
    const char *fname = is_namespace ? "namespace" : "dict";
    if (a->npos > 1) {
        rt_fail(r, "%s() takes at most 1 positional argument", fname);
        return NULL;
    }
    tmpl_value *d = tv_dict_new(r);
    if (!d) return NULL;
    if (is_namespace) {
        d->type = TV_NAMESPACE;
        if (track_namespace(r, d)) {
            tv_decref(r, d);
            return NULL;
        }
    }
    int rc = a->npos ? update_from(r, d, a->pos[0]) : 0;
    for (size_t i = 0; i < a->nkw && !rc; i++) {
        tmpl_value *k = tv_str(r, a->names[i], strlen(a->names[i]));
        rc = k ? tv_dict_set(r, d, k, tv_ref(a->kw[i])) : -1;
    }
    if (rc) {
        tv_decref(r, d);
        return NULL;
    }
    return d;
}

static tmpl_value *fn_raise(rt *r, const call_args *a) {
    static const char *const params[] = {"message", NULL};
    tmpl_value *p[1];
    if (bind_args(r, "raise_exception", a, params, p)) return NULL;
    sbuf b = {.limit = NC_ERR_MAX};
    if (p[0]) tv_write_str(r, &b, p[0]);
    rt_fail(r, "%s", b.data ? b.data : "raise_exception() was called");
    sbuf_free(&b);
    return NULL;
}

/* strftime_now(format): the local time now, as Python's datetime.now().strftime(format). */
static tmpl_value *fn_strftime(rt *r, const call_args *a) {
    static const char *const params[] = {"format", NULL};
    tmpl_value *p[1];
    if (bind_args(r, "strftime_now", a, params, p) || str_arg(r, "strftime_now", p[0])) return NULL;
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char buf[512];
    size_t n = p[0]->u.str.len ? strftime(buf, sizeof buf, p[0]->u.str.s, &tm) : 0;
    if (p[0]->u.str.len && n == 0) {
        rt_fail(r, "strftime_now(): the format gives no text or more than %zu bytes", sizeof buf);
        return NULL;
    }
    return tv_str(r, buf, n);
}

/* ---- String methods ----------------------------------------------------------------------- */
/* startswith / endswith with a string or a tuple (or list) of strings. */
static tmpl_value *m_affix(rt *r, tmpl_value *s, tmpl_value *what, bool end) {
    const char *fname = end ? "endswith" : "startswith";
    if (what && what->type == TV_LIST && !what->u.list.tuple) {
        rt_fail(r, "%s first arg must be str or a tuple of str, not list", fname);
        return NULL;
    }
    size_t n = what && what->type == TV_LIST ? what->u.list.len : 1;
    for (size_t i = 0; i < n; i++) {
        tmpl_value *x = what && what->type == TV_LIST ? what->u.list.items[i] : what;
        if (str_arg(r, fname, x) || rt_work(r, x->u.str.len)) return NULL;
        size_t k = x->u.str.len;
        if (k <= s->u.str.len && !memcmp(s->u.str.s + (end ? s->u.str.len - k : 0), x->u.str.s, k)) return tv_bool(true);
    }
    return tv_bool(false);
}

static bool all_cp(const tmpl_value *s, bool (*pred)(uint32_t)) {
    if (!s->u.str.len) return false;
    size_t w;
    for (size_t i = 0; i < s->u.str.len; i += w)
        if (!pred(utf8_decode(s->u.str.s + i, s->u.str.len - i, &w))) return false;
    return true;
}

static bool is_alnum_cp(uint32_t c) { return uni_isalpha(c) || uni_isdigit(c); }

/* islower / isupper: some cased character, and none of the other case. */
static tmpl_value *m_case_test(tmpl_value *s, bool upper) {
    bool cased = false;
    size_t w;
    for (size_t i = 0; i < s->u.str.len; i += w) {
        uint32_t c = utf8_decode(s->u.str.s + i, s->u.str.len - i, &w);
        bool is_up = uni_lower(c) != c, is_low = uni_upper(c) != c;
        if (upper ? is_low : is_up) return tv_bool(false);
        if (is_up || is_low) cased = true;
    }
    return tv_bool(cased);
}

static tmpl_value *m_partition(rt *r, tmpl_value *s, tmpl_value *sep, bool from_right) {
    if (str_arg(r, from_right ? "rpartition" : "partition", sep)) return NULL;
    if (!sep->u.str.len) {
        rt_fail(r, "empty separator");
        return NULL;
    }
    long at_hit = from_right ? str_rfind_bytes(r, s->u.str.s, s->u.str.len, sep->u.str.s, sep->u.str.len)
                             : str_find_bytes(s->u.str.s, s->u.str.len, sep->u.str.s, sep->u.str.len);
    if (at_hit == STR_FIND_FAIL) return NULL;
    const char *hit = at_hit >= 0 ? s->u.str.s + at_hit : NULL;
    tmpl_value *t = tv_list(r, 3);
    if (!t) return NULL;
    t->u.list.tuple = true;
    size_t at = hit ? (size_t)(hit - s->u.str.s) : s->u.str.len;
    tmpl_value *parts[3];
    if (!hit && from_right) {
        parts[0] = tv_str(r, "", 0);
        parts[1] = tv_str(r, "", 0);
        parts[2] = tv_ref(s);
    } else {
        parts[0] = tv_str(r, s->u.str.s, at);
        parts[1] = hit ? tv_ref(sep) : tv_str(r, "", 0);
        parts[2] = hit ? tv_str(r, s->u.str.s + at + sep->u.str.len, s->u.str.len - at - sep->u.str.len) : tv_str(r, "", 0);
    }
    int rc = 0;
    for (int k = 0; k < 3; k++) {
        if (!parts[k] || rc) {
            tv_decref(r, parts[k]);
            rc = -1;
        } else {
            rc = tv_list_push(r, t, parts[k]);
        }
    }
    if (rc) {
        tv_decref(r, t);
        return NULL;
    }
    return t;
}

/* center / ljust / rjust / zfill: pad to a width in code points. */
static tmpl_value *m_pad(rt *r, tmpl_value *s, int id, int64_t width, tmpl_value *fill) {
    const char *fill_s = " ";
    size_t fill_n = 1;
    if (id == M_ZFILL) fill_s = "0";
    if (fill) {
        if (str_arg(r, "pad", fill) || utf8_count(fill->u.str.s, fill->u.str.len) != 1) {
            rt_fail(r, "the fill character must be exactly one character long");
            return NULL;
        }
        fill_s = fill->u.str.s;
        fill_n = fill->u.str.len;
    }
    size_t have = utf8_count(s->u.str.s, s->u.str.len);
    if (width <= (int64_t)have) return tv_ref(s);
    if ((uint64_t)width > r->lim.max_output) {
        rt_fail(r, "padding width too large");
        return NULL;
    }
    size_t pad = (size_t)width - have, left;
    if (id == M_LJUST) left = 0;
    else if (id == M_CENTER) left = pad / 2 + (pad & (size_t)width & 1); /* CPython's rounding */
    else left = pad;
    sbuf b = {0};
    size_t start = 0;
    int rc = 0;
    if (id == M_ZFILL && s->u.str.len && (s->u.str.s[0] == '-' || s->u.str.s[0] == '+')) {
        rc = sbuf_putc(&b, s->u.str.s[0]); /* the sign stays in front of the zeros */
        start = 1;
    }
    for (size_t i = 0; i < left && !rc; i++) rc = sbuf_put(&b, fill_s, fill_n);
    if (!rc) rc = sbuf_put(&b, s->u.str.s + start, s->u.str.len - start);
    for (size_t i = left; i < pad && !rc; i++) rc = sbuf_put(&b, fill_s, fill_n);
    if (rc) {
        sbuf_free(&b);
        rt_fail(r, "out of memory");
        return NULL;
    }
    return tv_str_take(r, &b);
}

static tmpl_value *find_result(rt *r, int64_t at, bool raise) {
    if (at < 0 && raise) {
        rt_fail(r, "substring not found");
        return NULL;
    }
    return tv_int(r, at);
}

static tmpl_value *string_method(rt *r, int id, tmpl_value *s, const call_args *a) {
    static const char *const none[] = {NULL};
    static const char *const chars[] = {"chars", NULL};
    static const char *const split_p[] = {"sep", "maxsplit", NULL};
    static const char *const keepends[] = {"keepends", NULL};
    static const char *const affix[] = {"prefix", NULL};
    static const char *const replace_p[] = {"old", "new", "count", NULL};
    static const char *const sub[] = {"sub", NULL};
    static const char *const iterable[] = {"iterable", NULL};
    static const char *const pad_p[] = {"width", "fillchar", NULL};
    static const char *const sep_p[] = {"sep", NULL};
    const char *fname = builtin_name(id);
    tmpl_value *p[3] = {0};
    int64_t n = -1;
    /* every method reads its string through at least once (split, case, is*, find, ...) */
    if (rt_decode(r, s->u.str.len)) return NULL;
    switch (id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP:
        if (bind_args(r, fname, a, chars, p)) return NULL;
        if (p[0] && p[0]->type != TV_NONE && str_arg(r, fname, p[0])) return NULL;
        return str_strip(r, s, p[0] && p[0]->type == TV_STRING ? p[0] : NULL, id != M_RSTRIP, id != M_LSTRIP);
    case M_SPLIT:
    case M_RSPLIT:
        if (bind_args(r, fname, a, split_p, p) || int_arg(r, fname, p[1], -1, &n)) return NULL;
        if (p[0] && p[0]->type != TV_NONE && str_arg(r, fname, p[0])) return NULL;
        return str_split(r, s, p[0] && p[0]->type == TV_STRING ? p[0] : NULL, n, id == M_RSPLIT);
    case M_SPLITLINES:
        if (bind_args(r, fname, a, keepends, p)) return NULL;
        return str_splitlines(r, s, p[0] && tv_truthy(p[0]));
    case M_STARTSWITH:
    case M_ENDSWITH:
        if (bind_args(r, fname, a, affix, p)) return NULL;
        return m_affix(r, s, p[0], id == M_ENDSWITH);
    case M_UPPER:
    case M_LOWER:
    case M_CASEFOLD:
    case M_TITLE:
    case M_CAPITALIZE:
    case M_SWAPCASE: {
        if (bind_args(r, fname, a, none, p)) return NULL;
        int how = id == M_UPPER ? CASE_UPPER : id == M_TITLE ? CASE_TITLE : id == M_CAPITALIZE ? CASE_CAPITALIZE
                : id == M_SWAPCASE ? CASE_SWAP : CASE_LOWER;
        return str_case(r, s, how);
    }
    case M_REPLACE:
        if (bind_args(r, fname, a, replace_p, p) || str_arg(r, fname, p[0]) || str_arg(r, fname, p[1]) ||
            int_arg(r, fname, p[2], -1, &n))
            return NULL;
        return str_replace(r, s, p[0], p[1], n);
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_RINDEX:
        if (bind_args(r, fname, a, sub, p) || str_arg(r, fname, p[0])) return NULL;
        n = str_find(r, s, p[0], id == M_RFIND || id == M_RINDEX);
        return n == STR_FIND_FAIL ? NULL : find_result(r, n, id == M_INDEX || id == M_RINDEX);
    case M_COUNT:
        if (bind_args(r, fname, a, sub, p) || str_arg(r, fname, p[0])) return NULL;
        return tv_int(r, str_count(s, p[0]));
    case M_JOIN:
        if (bind_args(r, fname, a, iterable, p)) return NULL;
        if (!p[0]) {
            rt_fail(r, "join() takes exactly one argument");
            return NULL;
        }
        return str_join(r, s, p[0], false);
    case M_ISDIGIT: return bind_args(r, fname, a, none, p) ? NULL : tv_bool(all_cp(s, uni_isdigit));
    case M_ISALPHA: return bind_args(r, fname, a, none, p) ? NULL : tv_bool(all_cp(s, uni_isalpha));
    case M_ISALNUM: return bind_args(r, fname, a, none, p) ? NULL : tv_bool(all_cp(s, is_alnum_cp));
    case M_ISSPACE: return bind_args(r, fname, a, none, p) ? NULL : tv_bool(all_cp(s, uni_isspace));
    case M_ISLOWER:
    case M_ISUPPER: return bind_args(r, fname, a, none, p) ? NULL : m_case_test(s, id == M_ISUPPER);
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        if (bind_args(r, fname, a, affix, p) || str_arg(r, fname, p[0])) return NULL;
        tmpl_value *hit = m_affix(r, s, p[0], id == M_REMOVESUFFIX);
        if (!hit || !hit->u.b || !p[0]->u.str.len) return hit ? tv_ref(s) : NULL;
        size_t k = p[0]->u.str.len;
        return tv_str(r, s->u.str.s + (id == M_REMOVEPREFIX ? k : 0), s->u.str.len - k);
    }
    case M_PARTITION:
    case M_RPARTITION:
        if (bind_args(r, fname, a, sep_p, p)) return NULL;
        return m_partition(r, s, p[0], id == M_RPARTITION);
    case M_CENTER:
    case M_LJUST:
    case M_RJUST:
    case M_ZFILL:
        if (bind_args(r, fname, a, pad_p, p) || !p[0] || int_arg(r, fname, p[0], 0, &n)) {
            if (!r->failed) rt_fail(r, "%s() needs a width", fname);
            return NULL;
        }
        if (id == M_ZFILL && p[1]) {
            rt_fail(r, "zfill() takes exactly one argument");
            return NULL;
        }
        return m_pad(r, s, id, n, p[1]);
    default:
        rt_fail(r, "unknown method");
        return NULL;
    }
}

/* ---- Dict, list and loop methods ---------------------------------------------------------- */
static tmpl_value *dict_items(rt *r, tmpl_value *d, int id) {
    tmpl_value *l = tv_list(r, d->u.dict.len);
    for (size_t i = 0; l && i < d->u.dict.len; i++) {
        tmpl_value *v;
        if (id == M_KEYS) v = tv_ref(d->u.dict.ent[i].key);
        else if (id == M_VALUES) v = tv_ref(d->u.dict.ent[i].val);
        else {
            v = tv_list(r, 2);
            if (v) {
                v->u.list.tuple = true;
                if (tv_list_push(r, v, tv_ref(d->u.dict.ent[i].key)) || tv_list_push(r, v, tv_ref(d->u.dict.ent[i].val))) {
                    tv_decref(r, v);
                    v = NULL;
                }
            }
        }
        if (!v || tv_list_push(r, l, v)) {
            tv_decref(r, l);
            return NULL;
        }
    }
    return l;
}

tmpl_value *dict_items_list(rt *r, tmpl_value *d) { return dict_items(r, d, M_ITEMS); }

static tmpl_value *dict_method(rt *r, int id, tmpl_value *d, const call_args *a) {
    static const char *const none[] = {NULL};
    static const char *const get_p[] = {"key", "default", NULL};
    tmpl_value *p[2] = {0};
    if (id == M_GET) {
        if (bind_args(r, "get", a, get_p, p)) return NULL;
        if (!p[0]) {
            rt_fail(r, "get() expects at least 1 argument");
            return NULL;
        }
        tmpl_value *v = tv_hashable(p[0]) ? tv_dict_get(r, d, p[0]) : NULL;
        if (v) return tv_ref(v);
        if (r->failed) return NULL;
        return p[1] ? tv_ref(p[1]) : &tv_none_static;
    }
    if (bind_args(r, builtin_name(id), a, none, p)) return NULL;
    if (id == M_DICT_COPY) {
        tmpl_value *c = tv_dict_new(r);
        if (c && update_from(r, c, d)) {
            tv_decref(r, c);
            return NULL;
        }
        return c;
    }
    return dict_items(r, d, id);
}

static tmpl_value *list_method(rt *r, int id, tmpl_value *l, const call_args *a) {
    static const char *const none[] = {NULL};
    static const char *const x_p[] = {"value", NULL};
    tmpl_value *p[1] = {0};
    if (id == M_LIST_COPY) {
        if (bind_args(r, "copy", a, none, p)) return NULL;
        tmpl_value *c = tv_list(r, l->u.list.len);
        for (size_t i = 0; c && i < l->u.list.len; i++)
            if (tv_list_push(r, c, tv_ref(l->u.list.items[i]))) {
                tv_decref(r, c);
                return NULL;
            }
        return c;
    }
    if (bind_args(r, builtin_name(id), a, x_p, p)) return NULL;
    if (!p[0]) {
        rt_fail(r, "%s() takes exactly one argument", builtin_name(id));
        return NULL;
    }
    int64_t count = 0;
    for (size_t i = 0; i < l->u.list.len; i++) {
        int eq = tv_equal(r, l->u.list.items[i], p[0]);
        if (eq < 0) return NULL;
        if (!eq) continue;
        if (id == M_LIST_INDEX) return tv_int(r, (int64_t)i);
        count++;
    }
    if (id == M_LIST_INDEX) {
        rt_fail(r, "value is not in list");
        return NULL;
    }
    return tv_int(r, count);
}

/* loop.cycle(a, b, ...) and loop.changed(*values): True when the values differ from the last
 * call's (and on the first call). */
static tmpl_value *loop_method(rt *r, int id, loop_state *l, const call_args *a) {
    if (a->nkw) {
        rt_fail(r, "loop.%s() takes no keyword arguments", builtin_name(id));
        return NULL;
    }
    if (id == M_CYCLE) {
        if (!a->npos) {
            rt_fail(r, "loop.cycle() needs at least one argument");
            return NULL;
        }
        return tv_ref(a->pos[l->index % a->npos]);
    }
    tmpl_value *now = tv_list(r, a->npos);
    if (!now) return NULL;
    now->u.list.tuple = true;
    for (size_t i = 0; i < a->npos; i++)
        if (tv_list_push(r, now, tv_ref(a->pos[i]))) {
            tv_decref(r, now);
            return NULL;
        }
    int same = l->last ? tv_equal(r, l->last, now) : 0;
    if (same < 0) {
        tv_decref(r, now);
        return NULL;
    }
    bool changed = !same;
    tv_decref(r, l->last);
    l->last = now;
    return tv_bool(changed);
}

tmpl_value *call_builtin(rt *r, tmpl_value *fn, const call_args *a) {
    int id = fn->u.builtin.id;
    tmpl_value *self = fn->u.builtin.self;
    switch (id) {
    case BI_RANGE: return fn_range(r, a);
    case BI_DICT: return fn_mapping(r, a, false);
    case BI_NAMESPACE: return fn_mapping(r, a, true);
    case BI_RAISE: return fn_raise(r, a);
    case BI_STRFTIME: return fn_strftime(r, a);
    default: break;
    }
    switch (self->type) {
    case TV_STRING: return string_method(r, id, self, a);
    case TV_DICT: return dict_method(r, id, self, a);
    case TV_LIST: return list_method(r, id, self, a);
    case TV_LOOP: return loop_method(r, id, self->u.loop, a);
    default:
        rt_fail(r, "not callable");
        return NULL;
    }
}
