/* Values: construction, reference counting, containers, and Python's truthiness, equality and
 * ordering. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/internal.h"

tmpl_value tv_undefined_static = {.type = TV_UNDEFINED, .refs = TV_STATIC};
tmpl_value tv_none_static = {.type = TV_NONE, .refs = TV_STATIC};
tmpl_value tv_true_static = {.type = TV_BOOL, .refs = TV_STATIC, .u.b = true};
tmpl_value tv_false_static = {.type = TV_BOOL, .refs = TV_STATIC, .u.b = false};

/* ---- Allocation ---------------------------------------------------------------------------
 * A render charges every byte it allocates for values to its memory budget and refunds it on
 * release; caller-owned values (r == NULL) are not counted. */
static void *tv_malloc(rt *r, size_t n) {
    if (r && rt_charge(r, n)) return NULL;
    void *p = malloc(n);
    if (!p) {
        if (r) {
            rt_refund(r, n);
            rt_fail(r, "out of memory");
        }
    }
    return p;
}

static void tv_mfree(rt *r, void *p, size_t n) {
    if (!p) return;
    if (r) rt_refund(r, n);
    free(p);
}

/* Grow an array of elem-byte entries to hold at least `need` of them. */
static int grow_array(rt *r, void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 4;
    while (ncap < need) ncap *= 2;
    if (ncap > SIZE_MAX / elem / 4) return r ? rt_fail(r, "container too large") : -1;
    size_t extra = (ncap - *cap) * elem;
    if (r && rt_charge(r, extra)) return -1;
    void *p = realloc(*arr, ncap * elem);
    if (!p) {
        if (r) {
            rt_refund(r, extra);
            rt_fail(r, "out of memory");
        }
        return -1;
    }
    *arr = p;
    *cap = ncap;
    return 0;
}

tmpl_value *tv_new(rt *r, tv_type type) {
    tmpl_value *v = tv_malloc(r, sizeof *v);
    if (!v) return NULL;
    memset(v, 0, sizeof *v);
    v->type = type;
    v->refs = r ? 1 : TV_CALLER;
    return v;
}

tmpl_value *tv_int(rt *r, int64_t i) {
    tmpl_value *v = tv_new(r, TV_INT);
    if (v) v->u.i = i;
    return v;
}

tmpl_value *tv_float(rt *r, double f) {
    tmpl_value *v = tv_new(r, TV_FLOAT);
    if (v) v->u.f = f;
    return v;
}

tmpl_value *tv_bool(bool b) { return b ? &tv_true_static : &tv_false_static; }

tmpl_value *tv_str2(rt *r, const char *a, size_t n, const char *b, size_t m) {
    if (n > SIZE_MAX / 2 || m > SIZE_MAX / 2) return NULL;
    tmpl_value *v = tv_new(r, TV_STRING);
    if (!v) return NULL;
    v->u.str.s = tv_malloc(r, n + m + 1);
    if (!v->u.str.s) {
        tv_mfree(r, v, sizeof *v);
        return NULL;
    }
    if (n) memcpy(v->u.str.s, a, n);
    if (m) memcpy(v->u.str.s + n, b, m);
    v->u.str.s[n + m] = 0;
    v->u.str.len = n + m;
    return v;
}

tmpl_value *tv_str(rt *r, const char *s, size_t n) { return tv_str2(r, s, n, NULL, 0); }

tmpl_value *tv_str_alloc(rt *r, size_t n) {
    if (n > SIZE_MAX / 2) return NULL;
    tmpl_value *v = tv_new(r, TV_STRING);
    if (!v) return NULL;
    v->u.str.s = tv_malloc(r, n + 1);
    if (!v->u.str.s) {
        tv_mfree(r, v, sizeof *v);
        return NULL;
    }
    v->u.str.s[n] = 0;
    v->u.str.len = n;
    return v;
}

tmpl_value *tv_str_take(rt *r, sbuf *b) {
    if (!b->data) return tv_str(r, "", 0);
    if (b->cap > b->len + 1) { /* the string keeps exactly len + 1 bytes, as its refund assumes */
        char *p = realloc(b->data, b->len + 1);
        if (p) b->data = p;
    }
    tmpl_value *v = tv_new(r, TV_STRING);
    if (!v || (r && rt_charge(r, b->len + 1))) {
        if (v) tv_mfree(r, v, sizeof *v);
        sbuf_free(b);
        return NULL;
    }
    v->u.str.s = b->data;
    v->u.str.len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return v;
}

tmpl_value *tv_list(rt *r, size_t cap) {
    tmpl_value *v = tv_new(r, TV_LIST);
    if (v && cap && grow_array(r, (void **)&v->u.list.items, &v->u.list.cap, cap, sizeof(void *))) {
        tv_mfree(r, v, sizeof *v);
        return NULL;
    }
    return v;
}

tmpl_value *tv_dict_new(rt *r) { return tv_new(r, TV_DICT); }

tmpl_value *tv_undefined(rt *r, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tmpl_value *v = tv_str(r, msg, strlen(msg));
    if (v) v->type = TV_UNDEFINED;
    return v;
}

tmpl_value *tv_ref(tmpl_value *v) {
    if (v && v->refs > 0) v->refs++;
    return v;
}

static void dict_release(rt *r, tv_dict *d) {
    for (size_t i = 0; i < d->len; i++) {
        tv_decref(r, d->ent[i].key);
        tv_decref(r, d->ent[i].val);
    }
    tv_mfree(r, d->ent, d->cap * sizeof *d->ent);
    tv_mfree(r, d->index, d->index_cap * sizeof(uint32_t));
    memset(d, 0, sizeof *d);
}

/* Release what v holds (not v itself). r is NULL for caller-owned trees. */
static void tv_release_contents(rt *r, tmpl_value *v) {
    switch (v->type) {
    case TV_STRING:
    case TV_UNDEFINED:
        tv_mfree(r, v->u.str.s, v->u.str.len + 1);
        break;
    case TV_LIST:
        for (size_t i = 0; i < v->u.list.len; i++) {
            if (r) tv_decref(r, v->u.list.items[i]);
            else tv_free_caller(v->u.list.items[i]);
        }
        tv_mfree(r, v->u.list.items, v->u.list.cap * sizeof(void *));
        break;
    case TV_DICT:
    case TV_NAMESPACE:
        if (r) {
            dict_release(r, &v->u.dict);
        } else {
            for (size_t i = 0; i < v->u.dict.len; i++) {
                tv_free_caller(v->u.dict.ent[i].key);
                tv_free_caller(v->u.dict.ent[i].val);
            }
            free(v->u.dict.ent);
            free(v->u.dict.index);
        }
        break;
    case TV_LOOP:
        if (v->u.loop) {
            tv_decref(r, v->u.loop->items);
            tv_decref(r, v->u.loop->last);
            tv_mfree(r, v->u.loop, sizeof *v->u.loop);
        }
        break;
    case TV_BUILTIN:
        tv_decref(r, v->u.builtin.self);
        break;
    default:
        break;
    }
}

void tv_decref(rt *r, tmpl_value *v) {
    if (!v || v->refs <= 0) return;
    if (--v->refs) return;
    tv_release_contents(r, v);
    tv_mfree(r, v, sizeof *v);
}

void tv_free_caller(tmpl_value *v) {
    if (!v || v->refs != TV_CALLER) return;
    tv_release_contents(NULL, v);
    free(v);
}

/* Record that container c now holds v; fails when that makes c nest too deeply. */
static int note_depth(rt *r, tmpl_value *c, const tmpl_value *v) {
    if (v->type != TV_LIST && v->type != TV_DICT) return 0;
    if (v->depth + 1 > TV_MAX_NEST) return r ? rt_fail(r, "values nested deeper than %d levels", TV_MAX_NEST) : -1;
    if (v->depth + 1 > c->depth) c->depth = (uint16_t)(v->depth + 1);
    return 0;
}

int tv_list_push(rt *r, tmpl_value *list, tmpl_value *v) {
    if (note_depth(r, list, v) || grow_array(r, (void **)&list->u.list.items, &list->u.list.cap, list->u.list.len + 1, sizeof(void *))) {
        if (r) tv_decref(r, v);
        else tv_free_caller(v);
        return -1;
    }
    if (!tv_hashable(v)) list->u.list.unhashable = true;
    list->u.list.items[list->u.list.len++] = v;
    return 0;
}

/* ---- Dicts: insertion-ordered, with a hash index once they grow past a few entries --------- */
static uint64_t tv_hash(const tmpl_value *k) {
    uint64_t h = 1469598103934665603ull;
    switch (k->type) {
    case TV_STRING:
        for (size_t i = 0; i < k->u.str.len; i++) h = (h ^ (unsigned char)k->u.str.s[i]) * 1099511628211ull;
        return h;
    case TV_BOOL:
    case TV_INT:
    case TV_FLOAT: { /* equal numbers (1, 1.0, True) must hash alike */
        double d = tv_as_double(k);
        if (d == floor(d) && fabs(d) < 9.2e18) return (uint64_t)(int64_t)d * 0x9e3779b97f4a7c15ull;
        uint64_t bits;
        memcpy(&bits, &d, sizeof bits);
        return bits * 0x9e3779b97f4a7c15ull;
    }
    default:
        return (uint64_t)k->type;
    }
}

#define DICT_INDEX_MIN 9

static int dict_reindex(rt *r, tv_dict *d, size_t cap) {
    if (r && rt_charge(r, cap * sizeof(uint32_t))) return -1;
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx) {
        if (r) {
            rt_refund(r, cap * sizeof(uint32_t));
            rt_fail(r, "out of memory");
        }
        return -1;
    }
    for (size_t i = 0; i < d->len; i++) {
        size_t slot = tv_hash(d->ent[i].key) & (cap - 1);
        while (idx[slot]) slot = (slot + 1) & (cap - 1);
        idx[slot] = (uint32_t)(i + 1);
    }
    tv_mfree(r, d->index, d->index_cap * sizeof(uint32_t));
    d->index = idx;
    d->index_cap = cap;
    return 0;
}

/* The entry number of key, -1 when absent, -2 when the render's budget ran out. Hashing and
 * comparing keys (each comparison a step and its bytes) is charged to r (when not NULL). */
static long dict_find(rt *r, const tv_dict *d, const tmpl_value *key) {
    if (r && key->type == TV_STRING && rt_work(r, key->u.str.len)) return -2;
    if (d->index) {
        size_t mask = d->index_cap - 1, slot = tv_hash(key) & mask;
        for (; d->index[slot]; slot = (slot + 1) & mask) {
            int eq = tv_equal(r, d->ent[d->index[slot] - 1].key, key);
            if (eq) return eq < 0 ? -2 : (long)d->index[slot] - 1;
        }
        return -1;
    }
    for (size_t i = 0; i < d->len; i++) {
        int eq = tv_equal(r, d->ent[i].key, key);
        if (eq) return eq < 0 ? -2 : (long)i;
    }
    return -1;
}

static void release_pair(rt *r, tmpl_value *a, tmpl_value *b) {
    if (r) {
        tv_decref(r, a);
        tv_decref(r, b);
    } else {
        tv_free_caller(a);
        tv_free_caller(b);
    }
}

int tv_dict_set(rt *r, tmpl_value *dict, tmpl_value *k, tmpl_value *v) {
    tv_dict *d = &dict->u.dict;
    if (dict->type == TV_DICT && (note_depth(r, dict, k) || note_depth(r, dict, v))) {
        release_pair(r, k, v);
        return -1;
    }
    long at = dict_find(r, d, k);
    if (at == -2) {
        release_pair(r, k, v);
        return -1;
    }
    if (at >= 0) { /* keep the first key object and its position, as Python does */
        release_pair(r, k, d->ent[at].val);
        d->ent[at].val = v;
        return 0;
    }
    if (d->len >= UINT32_MAX - 1 || grow_array(r, (void **)&d->ent, &d->cap, d->len + 1, sizeof *d->ent)) {
        release_pair(r, k, v);
        return -1;
    }
    d->ent[d->len].key = k;
    d->ent[d->len].val = v;
    d->len++;
    if (d->len >= DICT_INDEX_MIN && d->len * 2 > d->index_cap) {
        size_t cap = 32;
        while (cap < d->len * 4) cap *= 2;
        if (dict_reindex(r, d, cap)) return -1;
    } else if (d->index) {
        size_t mask = d->index_cap - 1, slot = tv_hash(k) & mask;
        while (d->index[slot]) slot = (slot + 1) & mask;
        d->index[slot] = (uint32_t)d->len;
    }
    return 0;
}

tmpl_value *tv_dict_get(rt *r, const tmpl_value *dict, const tmpl_value *key) {
    long at = dict_find(r, &dict->u.dict, key);
    return at < 0 ? NULL : dict->u.dict.ent[at].val;
}

tmpl_value *tv_dict_get_str(const tmpl_value *dict, const char *key, size_t n) {
    tmpl_value k = {.type = TV_STRING, .refs = TV_STATIC, .u.str = {(char *)key, n}};
    return tv_dict_get(NULL, dict, &k);
}

/* ---- Python semantics --------------------------------------------------------------------- */
double tv_as_double(const tmpl_value *v) {
    switch (v->type) {
    case TV_INT: return (double)v->u.i;
    case TV_FLOAT: return v->u.f;
    case TV_BOOL: return v->u.b;
    default: return 0;
    }
}

bool tv_truthy(const tmpl_value *v) {
    switch (v->type) {
    case TV_UNDEFINED:
    case TV_NONE: return false;
    case TV_BOOL: return v->u.b;
    case TV_INT: return v->u.i != 0;
    case TV_FLOAT: return v->u.f != 0;
    case TV_STRING: return v->u.str.len != 0;
    case TV_LIST: return v->u.list.lazy || v->u.list.len != 0;
    case TV_DICT: return v->u.dict.len != 0;
    default: return true;
    }
}

static int64_t as_int(const tmpl_value *v) { return v->type == TV_BOOL ? v->u.b : v->u.i; }

/* Equality visits every element of nested containers, and lists may share their elements (a
 * list holding the same list twice, nested n times, has 2^n leaves), so each value visited is
 * one step of r, each string compared 16 bytes a step: a comparison cannot outrun the budget. */
int tv_equal(rt *r, const tmpl_value *a, const tmpl_value *b) {
    if (a == b) return 1;
    if (r && rt_step(r)) return -1;
    if (tv_is_num(a) && tv_is_num(b)) {
        if (a->type != TV_FLOAT && b->type != TV_FLOAT) return as_int(a) == as_int(b);
        return tv_as_double(a) == tv_as_double(b);
    }
    if (a->type != b->type) return 0;
    switch (a->type) {
    case TV_UNDEFINED:
    case TV_NONE: return 1;
    case TV_STRING:
        if (a->u.str.len != b->u.str.len) return 0;
        if (r && rt_work(r, a->u.str.len)) return -1;
        return !memcmp(a->u.str.s, b->u.str.s, a->u.str.len);
    case TV_LIST:
        /* Python: a list never equals a tuple, and an iterator equals only itself */
        if (a->u.list.lazy || b->u.list.lazy) return 0;
        if (a->u.list.tuple != b->u.list.tuple || a->u.list.len != b->u.list.len) return 0;
        for (size_t i = 0; i < a->u.list.len; i++) {
            int eq = tv_equal(r, a->u.list.items[i], b->u.list.items[i]);
            if (eq != 1) return eq;
        }
        return 1;
    case TV_DICT:
        if (a->u.dict.len != b->u.dict.len) return 0;
        for (size_t i = 0; i < a->u.dict.len; i++) {
            long at = dict_find(r, &b->u.dict, a->u.dict.ent[i].key);
            if (at < 0) return at == -2 ? -1 : 0;
            int eq = tv_equal(r, a->u.dict.ent[i].val, b->u.dict.ent[at].val);
            if (eq != 1) return eq;
        }
        return 1;
    case TV_MACRO: return a->u.macro.def == b->u.macro.def && a->u.macro.closure == b->u.macro.closure;
    case TV_BUILTIN: return a->u.builtin.id == b->u.builtin.id && a->u.builtin.self == b->u.builtin.self;
    default: return 0; /* namespaces and loops are equal only to themselves */
    }
}

/* Compare strings by code point; with fold_case, as Jinja's sort and min/max do by default. */
static int compare_str(const tmpl_value *a, const tmpl_value *b, bool fold_case) {
    const char *s = a->u.str.s, *t = b->u.str.s;
    size_t n = a->u.str.len, m = b->u.str.len;
    if (!fold_case) {
        int c = memcmp(s, t, n < m ? n : m);
        if (c) return c < 0 ? -1 : 1;
        return n < m ? -1 : n > m;
    }
    size_t i = 0, j = 0, w1, w2;
    while (i < n && j < m) {
        uint32_t x = uni_lower(utf8_decode(s + i, n - i, &w1));
        uint32_t y = uni_lower(utf8_decode(t + j, m - j, &w2));
        if (x != y) return x < y ? -1 : 1;
        i += w1;
        j += w2;
    }
    return (i < n) - (j < m);
}

int tv_compare(rt *r, const tmpl_value *a, const tmpl_value *b, bool fold_case) {
    if (r && rt_step(r)) return TV_CMP_FAIL;
    if (tv_is_num(a) && tv_is_num(b)) {
        if (a->type != TV_FLOAT && b->type != TV_FLOAT) {
            int64_t x = as_int(a), y = as_int(b);
            return x < y ? -1 : x > y;
        }
        double x = tv_as_double(a), y = tv_as_double(b);
        if (isnan(x) || isnan(y)) return 2;
        return x < y ? -1 : x > y;
    }
    if (a->type == TV_STRING && b->type == TV_STRING) {
        if (r && rt_work(r, a->u.str.len < b->u.str.len ? a->u.str.len : b->u.str.len)) return TV_CMP_FAIL;
        return compare_str(a, b, fold_case);
    }
    if (a->type == TV_LIST && b->type == TV_LIST && a->u.list.tuple == b->u.list.tuple && !a->u.list.lazy && !b->u.list.lazy) {
        size_t n = a->u.list.len < b->u.list.len ? a->u.list.len : b->u.list.len;
        for (size_t i = 0; i < n; i++) {
            int eq = tv_equal(r, a->u.list.items[i], b->u.list.items[i]);
            if (eq < 0) return TV_CMP_FAIL;
            if (eq) continue;
            return tv_compare(r, a->u.list.items[i], b->u.list.items[i], fold_case);
        }
        return (a->u.list.len > n) - (b->u.list.len > n);
    }
    return 2;
}

const char *tv_type_name(const tmpl_value *v) {
    switch (v->type) {
    case TV_UNDEFINED: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STRING: return "str";
    case TV_LIST: return v->u.list.lazy ? "generator" : v->u.list.tuple ? "tuple" : "list";
    case TV_DICT: return "dict";
    case TV_NAMESPACE: return "Namespace";
    case TV_LOOP: return "LoopContext";
    case TV_MACRO: return "Macro";
    default: return "builtin_function_or_method";
    }
}

/* A tuple is hashable when all its items are: kept up to date by tv_list_push, so that this
 * takes no walk over items that may be shared many times over. */
bool tv_hashable(const tmpl_value *v) {
    if (v->type == TV_LIST && v->u.list.tuple) return !v->u.list.unhashable;
    return v->type != TV_LIST && v->type != TV_DICT && v->type != TV_NAMESPACE;
}

/* ---- Public constructors ------------------------------------------------------------------ */
tmpl_value *tmpl_value_new_dict(void) { return tv_dict_new(NULL); }
tmpl_value *tmpl_value_new_list(void) { return tv_list(NULL, 0); }
tmpl_value *tmpl_value_new_string(const char *s, size_t len) { return tv_str(NULL, s, len); }
tmpl_value *tmpl_value_new_int(int64_t i) { return tv_int(NULL, i); }
tmpl_value *tmpl_value_new_none(void) { return tv_new(NULL, TV_NONE); }

tmpl_value *tmpl_value_new_bool(bool b) {
    tmpl_value *v = tv_new(NULL, TV_BOOL);
    if (v) v->u.b = b;
    return v;
}

int tmpl_value_dict_set(tmpl_value *dict, const char *key, tmpl_value *v) {
    tmpl_value *k = tv_str(NULL, key, strlen(key));
    if (!dict || dict->type != TV_DICT || !k || !v) {
        tv_free_caller(k);
        tv_free_caller(v);
        return -1;
    }
    return tv_dict_set(NULL, dict, k, v);
}

int tmpl_value_list_append(tmpl_value *list, tmpl_value *v) {
    if (!list || list->type != TV_LIST || !v) {
        tv_free_caller(v);
        return -1;
    }
    return tv_list_push(NULL, list, v);
}

void tmpl_value_free(tmpl_value *v) { tv_free_caller(v); }
