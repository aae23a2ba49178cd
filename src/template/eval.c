/* Expression evaluation with Python's (and Jinja's) semantics: attribute and item lookup that
 * fall back on each other, lenient undefined values, Python arithmetic and comparisons. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "template/internal.h"

int fail_undefined(rt *r, const tmpl_value *u, const char *what) {
    if (u->u.str.s) return rt_fail(r, "%s", u->u.str.s);
    return rt_fail(r, "%s of an undefined value", what);
}

tmpl_value *lookup_name(rt *r, const char *name) {
    tmpl_value *v = scope_get(r->scope, name);
    if (!v && r->context) v = tv_dict_get_str(r->context, name, strlen(name));
    if (!v) {
        int g = builtin_global(name);
        if (g >= 0) v = &tv_global_fns[g];
    }
    if (v) return tv_ref(v);
    return tv_undefined(r, "'%s' is undefined", name);
}

/* What Jinja calls an object in "'dict object' has no attribute 'x'". */
static const char *object_desc(const tmpl_value *v) {
    switch (v->type) {
    case TV_NONE: return "None";
    case TV_DICT: return "dict object";
    case TV_LIST: return v->u.list.tuple ? "tuple object" : "list object";
    case TV_STRING: return "str object";
    case TV_INT: return "int object";
    case TV_FLOAT: return "float object";
    case TV_BOOL: return "bool object";
    case TV_NAMESPACE: return "Namespace object";
    case TV_LOOP: return "LoopContext object";
    default: return "object";
    }
}

static tmpl_value *no_attribute(rt *r, const tmpl_value *obj, const char *name, size_t len) {
    return tv_undefined(r, "'%s' has no attribute '%.*s'", object_desc(obj), (int)(len > 100 ? 100 : len), name);
}

static tmpl_value *bound_method(rt *r, tmpl_value *obj, int id) {
    tmpl_value *m = tv_new(r, TV_BUILTIN);
    if (!m) return NULL;
    m->u.builtin.id = id;
    m->u.builtin.self = tv_ref(obj);
    return m;
}

static bool name_is(const char *name, size_t len, const char *lit) {
    return strlen(lit) == len && !memcmp(name, lit, len);
}

static tmpl_value *loop_attr(rt *r, tmpl_value *obj, const char *name, size_t len) {
    const loop_state *l = obj->u.loop;
    size_t n = l->items->u.list.len, i = l->index;
    if (name_is(name, len, "index")) return tv_int(r, (int64_t)i + 1);
    if (name_is(name, len, "index0")) return tv_int(r, (int64_t)i);
    if (name_is(name, len, "revindex")) return tv_int(r, (int64_t)(n - i));
    if (name_is(name, len, "revindex0")) return tv_int(r, (int64_t)(n - i - 1));
    if (name_is(name, len, "first")) return tv_bool(i == 0);
    if (name_is(name, len, "last")) return tv_bool(i + 1 == n);
    if (name_is(name, len, "length")) return tv_int(r, (int64_t)n);
    if (name_is(name, len, "depth")) return tv_int(r, 1);
    if (name_is(name, len, "depth0")) return tv_int(r, 0);
    if (name_is(name, len, "previtem"))
        return i > 0 ? tv_ref(l->items->u.list.items[i - 1]) : tv_undefined(r, "there is no previous item");
    if (name_is(name, len, "nextitem"))
        return i + 1 < n ? tv_ref(l->items->u.list.items[i + 1]) : tv_undefined(r, "there is no next item");
    int id = builtin_method(obj, name, len);
    if (id >= 0) return bound_method(r, obj, id);
    return no_attribute(r, obj, name, len);
}

/* obj.name: an attribute (a method) first, then an item, as Jinja's getattr does. */
tmpl_value *eval_getattr(rt *r, tmpl_value *obj, const char *name, size_t len) {
    if (obj->type == TV_UNDEFINED) {
        fail_undefined(r, obj, "attribute");
        return NULL;
    }
    if (obj->type == TV_LOOP) return loop_attr(r, obj, name, len);
    if (builtin_unsafe(obj, name, len))
        return tv_undefined(r, "access to attribute '%.*s' of '%s' object is unsafe", (int)len, name, tv_type_name(obj));
    int id = builtin_method(obj, name, len);
    if (id >= 0) return bound_method(r, obj, id);
    if (obj->type == TV_DICT || obj->type == TV_NAMESPACE) {
        tmpl_value *v = tv_dict_get_str(obj, name, len);
        if (v) return tv_ref(v);
    }
    return no_attribute(r, obj, name, len);
}

/* Python's index into a sequence of n: negative counts from the end; -1 when out of range. */
static long seq_index(const tmpl_value *key, size_t n) {
    int64_t i = key->type == TV_BOOL ? key->u.b : key->u.i;
    if (i < 0) i += (int64_t)n;
    return (i < 0 || (uint64_t)i >= n) ? -1 : (long)i;
}

/* obj[key]: an item first, then (for string keys) an attribute, as Jinja's getitem does. */
tmpl_value *eval_getitem(rt *r, tmpl_value *obj, tmpl_value *key) {
    if (obj->type == TV_UNDEFINED) {
        fail_undefined(r, obj, "item");
        return NULL;
    }
    bool int_key = key->type == TV_INT || key->type == TV_BOOL;
    if (obj->type == TV_DICT || obj->type == TV_NAMESPACE) {
        tmpl_value *v = tv_hashable(key) ? tv_dict_get(r, obj, key) : NULL;
        if (!v && r->failed) return NULL;
        if (v) return tv_ref(v);
    } else if (obj->type == TV_LIST && obj->u.list.lazy) {
        return tv_undefined(r, "'generator' object is not subscriptable");
    } else if (obj->type == TV_LIST && int_key) {
        long i = seq_index(key, obj->u.list.len);
        if (i >= 0) return tv_ref(obj->u.list.items[i]);
        return tv_undefined(r, "%s index out of range", obj->u.list.tuple ? "tuple" : "list");
    } else if (obj->type == TV_STRING && int_key) {
        if (rt_work(r, obj->u.str.len)) return NULL;
        size_t n = utf8_count(obj->u.str.s, obj->u.str.len);
        long i = seq_index(key, n);
        if (i >= 0) return str_slice_cp(r, obj, (size_t)i, (size_t)i + 1);
        return tv_undefined(r, "string index out of range");
    }
    if (key->type == TV_STRING) return eval_getattr(r, obj, key->u.str.s, key->u.str.len);
    if (obj->type == TV_DICT) {
        sbuf b = {.limit = 100};
        tv_write_repr(r, &b, key);
        tmpl_value *u = tv_undefined(r, "'dict object' has no attribute %s", b.data ? b.data : "?");
        sbuf_free(&b);
        return u;
    }
    return tv_undefined(r, "'%s' has no item of that kind", object_desc(obj));
}

/* ---- Slices ------------------------------------------------------------------------------- */
static int slice_bound(rt *r, tmpl_value *v, int64_t *out, bool *given) {
    *given = false;
    if (!v || v->type == TV_NONE) return 0;
    if (v->type != TV_INT && v->type != TV_BOOL)
        return rt_fail(r, "slice indices must be integers or None, not %s", tv_type_name(v));
    *out = v->type == TV_BOOL ? v->u.b : v->u.i;
    *given = true;
    return 0;
}

/* Python's slice.indices(n): clamp start and stop for the given step. */
static void slice_indices(int64_t n, int64_t step, bool has_start, int64_t start, bool has_stop, int64_t stop,
                          int64_t *s0, int64_t *s1) {
    int64_t lower = step < 0 ? -1 : 0, upper = step < 0 ? n - 1 : n;
    if (!has_start) start = step < 0 ? upper : lower;
    else if (start < 0) start = start + n < lower ? lower : start + n;
    else if (start > upper) start = upper;
    if (!has_stop) stop = step < 0 ? lower : upper;
    else if (stop < 0) stop = stop + n < lower ? lower : stop + n;
    else if (stop > upper) stop = upper;
    *s0 = start;
    *s1 = stop;
}

static tmpl_value *slice_value(rt *r, tmpl_value *obj, tmpl_value *vs, tmpl_value *ve, tmpl_value *vstep) {
    int64_t start = 0, stop = 0, step = 1;
    bool has_start, has_stop, has_step;
    if (slice_bound(r, vs, &start, &has_start) || slice_bound(r, ve, &stop, &has_stop) ||
        slice_bound(r, vstep, &step, &has_step))
        return NULL;
    if (!has_step) step = 1;
    if (step == 0) {
        rt_fail(r, "slice step cannot be zero");
        return NULL;
    }
    if (obj->type == TV_UNDEFINED) {
        fail_undefined(r, obj, "slice");
        return NULL;
    }
    if (obj->type == TV_DICT) {
        rt_fail(r, "unhashable type: 'slice'");
        return NULL;
    }
    if ((obj->type != TV_LIST && obj->type != TV_STRING) || (obj->type == TV_LIST && obj->u.list.lazy)) {
        rt_fail(r, "'%s' object is not subscriptable", tv_type_name(obj));
        return NULL;
    }
    bool is_str = obj->type == TV_STRING;
    size_t *offs = NULL; /* byte offset of each code point of a string, and its end */
    int64_t n;
    if (is_str) {
        n = (int64_t)utf8_count(obj->u.str.s, obj->u.str.len);
        if (rt_charge(r, ((size_t)n + 1) * sizeof *offs)) return NULL;
        offs = malloc(((size_t)n + 1) * sizeof *offs);
        if (!offs) {
            rt_refund(r, ((size_t)n + 1) * sizeof *offs);
            rt_fail(r, "out of memory");
            return NULL;
        }
        size_t at = 0, w;
        for (int64_t k = 0; k < n; k++, at += w) {
            offs[k] = at;
            utf8_decode(obj->u.str.s + at, obj->u.str.len - at, &w);
        }
        offs[n] = obj->u.str.len;
    } else {
        n = (int64_t)obj->u.list.len;
    }
    int64_t i, end;
    slice_indices(n, step, has_start, start, has_stop, stop, &i, &end);
    tmpl_value *out = NULL;
    if (is_str) {
        sbuf b = {.limit = obj->u.str.len + 1};
        if (step == 1 && i < end) {
            out = tv_str(r, obj->u.str.s + offs[i], offs[end] - offs[i]);
        } else {
            for (; step > 0 ? i < end : i > end; i += step)
                sbuf_put(&b, obj->u.str.s + offs[i], offs[i + 1] - offs[i]);
            out = tv_str_take(r, &b);
        }
        rt_refund(r, ((size_t)n + 1) * sizeof *offs);
        free(offs);
        return out;
    }
    out = tv_list(r, 0);
    if (!out) return NULL;
    out->u.list.tuple = obj->u.list.tuple;
    for (; step > 0 ? i < end : i > end; i += step)
        if (tv_list_push(r, out, tv_ref(obj->u.list.items[i]))) {
            tv_decref(r, out);
            return NULL;
        }
    return out;
}

/* ---- Arithmetic --------------------------------------------------------------------------- */
static const char *op_text(int op) {
    switch (op) {
    case OP_FLOORDIV: return "//";
    case OP_POW: return "**";
    case '+': return "+";
    case '-': return "-";
    case '*': return "*";
    case '/': return "/";
    case '%': return "%";
    default: return "~";
    }
}

static int64_t int_of(const tmpl_value *v) { return v->type == TV_BOOL ? v->u.b : v->u.i; }
static bool is_intlike(const tmpl_value *v) { return v->type == TV_INT || v->type == TV_BOOL; }

static int int_pow(rt *r, int64_t base, int64_t exp, int64_t *out) {
    int64_t acc = 1;
    while (exp > 0) {
        if (exp & 1 && __builtin_mul_overflow(acc, base, &acc)) return rt_fail(r, "integer overflow in **");
        exp >>= 1;
        if (exp && __builtin_mul_overflow(base, base, &base)) return rt_fail(r, "integer overflow in **");
    }
    *out = acc;
    return 0;
}

static int int_arith(rt *r, int op, int64_t a, int64_t b, tmpl_value **out) {
    int64_t v = 0;
    bool overflow = false;
    switch (op) {
    case '+': overflow = __builtin_add_overflow(a, b, &v); break;
    case '-': overflow = __builtin_sub_overflow(a, b, &v); break;
    case '*': overflow = __builtin_mul_overflow(a, b, &v); break;
    case OP_FLOORDIV:
    case '%':
        if (b == 0) return rt_fail(r, "integer division or modulo by zero");
        if (a == INT64_MIN && b == -1) {
            if (op == '%') v = 0;
            else overflow = true;
            break;
        }
        v = op == '%' ? a % b : a / b;
        if (op == '%' && v != 0 && ((v < 0) != (b < 0))) v += b;                  /* sign of divisor */
        if (op == OP_FLOORDIV && (a % b != 0) && ((a < 0) != (b < 0))) v -= 1;    /* floor */
        break;
    case OP_POW:
        if (b < 0) {
            *out = tv_float(r, pow((double)a, (double)b));
            return *out ? 0 : -1;
        }
        if (int_pow(r, a, b, &v)) return -1;
        break;
    default: return rt_fail(r, "bad operator");
    }
    if (overflow) return rt_fail(r, "integer overflow in %s", op_text(op));
    *out = tv_int(r, v);
    return *out ? 0 : -1;
}

static int float_arith(rt *r, int op, double a, double b, tmpl_value **out) {
    double v;
    switch (op) {
    case '+': v = a + b; break;
    case '-': v = a - b; break;
    case '*': v = a * b; break;
    case '/':
        if (b == 0) return rt_fail(r, "division by zero");
        v = a / b;
        break;
    case OP_FLOORDIV:
    case '%': {
        if (b == 0) return rt_fail(r, "float division or modulo by zero");
        double m = fmod(a, b);
        if (m != 0 && ((m < 0) != (b < 0))) m += b;
        v = op == '%' ? m : floor((a - m) / b);
        break;
    }
    case OP_POW:
        if (a == 0 && b < 0) return rt_fail(r, "0.0 cannot be raised to a negative power");
        v = pow(a, b);
        break;
    default: return rt_fail(r, "bad operator");
    }
    *out = tv_float(r, v);
    return *out ? 0 : -1;
}

static int concat_seq(rt *r, tmpl_value *x, tmpl_value *y, tmpl_value **out) {
    tmpl_value *l = tv_list(r, x->u.list.len + y->u.list.len);
    if (!l) return -1;
    l->u.list.tuple = x->u.list.tuple;
    for (int k = 0; k < 2; k++) {
        tmpl_value *src = k ? y : x;
        for (size_t i = 0; i < src->u.list.len; i++)
            if (tv_list_push(r, l, tv_ref(src->u.list.items[i]))) {
                tv_decref(r, l);
                return -1;
            }
    }
    *out = l;
    return 0;
}

static int concat_str(rt *r, const char *a, size_t n, const char *b, size_t m, tmpl_value **out) {
    *out = tv_str2(r, a, n, b, m);
    return *out ? 0 : -1;
}

/* seq * count for strings and lists. The work is the result's size, charged before it is built
 * (an empty sequence repeated any number of times is empty at once). */
static int repeat(rt *r, tmpl_value *seq, int64_t count, tmpl_value **out) {
    size_t n = seq->type == TV_STRING ? seq->u.str.len : seq->u.list.len;
    if (count <= 0 || n == 0) count = 0;
    size_t unit = seq->type == TV_STRING ? n : n * sizeof(void *);
    if (unit && (uint64_t)count > r->lim.max_memory / unit) return rt_fail(r, "repetition result too large");
    if (seq->type == TV_STRING) {
        size_t total = (size_t)count * n;
        if (!(*out = tv_str_alloc(r, total))) return -1; /* charges the steps of its bytes too */
        char *d = (*out)->u.str.s;
        if (total) memcpy(d, seq->u.str.s, n);
        for (size_t have = n; have < total; have *= 2) /* doubling: a few large copies */
            memcpy(d + have, d, have < total - have ? have : total - have);
        return 0;
    }
    if (rt_steps(r, (uint64_t)count * n)) return -1;
    tmpl_value *l = tv_list(r, (size_t)count * n);
    if (!l) return -1;
    l->u.list.tuple = seq->u.list.tuple;
    for (int64_t k = 0; k < count; k++)
        for (size_t i = 0; i < n; i++)
            if (tv_list_push(r, l, tv_ref(seq->u.list.items[i]))) {
                tv_decref(r, l);
                return -1;
            }
    *out = l;
    return 0;
}

int binary_op(rt *r, int op, tmpl_value *x, tmpl_value *y, tmpl_value **out) {
    if (op == '~') {
        tmpl_value *a = tv_to_str(r, x), *b = a ? tv_to_str(r, y) : NULL;
        int rc = b ? concat_str(r, a->u.str.s, a->u.str.len, b->u.str.s, b->u.str.len, out) : -1;
        tv_decref(r, a);
        tv_decref(r, b);
        return rc;
    }
    if (op == '%' && x->type == TV_STRING) return (*out = str_printf(r, x, y)) ? 0 : -1; /* (y may be undefined) */
    if (x->type == TV_UNDEFINED) return fail_undefined(r, x, "arithmetic");
    if (y->type == TV_UNDEFINED) return fail_undefined(r, y, "arithmetic");
    if (is_intlike(x) && is_intlike(y) && op != '/') return int_arith(r, op, int_of(x), int_of(y), out);
    if (tv_is_num(x) && tv_is_num(y)) return float_arith(r, op, tv_as_double(x), tv_as_double(y), out);
    if (op == '+' && x->type == TV_STRING && y->type == TV_STRING)
        return concat_str(r, x->u.str.s, x->u.str.len, y->u.str.s, y->u.str.len, out);
    bool seq_x = x->type == TV_STRING || (x->type == TV_LIST && !x->u.list.lazy);
    bool seq_y = y->type == TV_STRING || (y->type == TV_LIST && !y->u.list.lazy);
    if (op == '+' && x->type == TV_LIST && y->type == TV_LIST && seq_x && seq_y && x->u.list.tuple == y->u.list.tuple)
        return concat_seq(r, x, y, out);
    if (op == '*' && seq_x && is_intlike(y)) return repeat(r, x, int_of(y), out);
    if (op == '*' && seq_y && is_intlike(x)) return repeat(r, y, int_of(x), out);
    return rt_fail(r, "unsupported operand type(s) for %s: '%s' and '%s'", op_text(op), tv_type_name(x), tv_type_name(y));
}

/* ---- Membership and comparison ------------------------------------------------------------ */
int contains(rt *r, tmpl_value *container, tmpl_value *item) {
    if (container->type == TV_STRING && rt_work(r, container->u.str.len)) return -1;
    switch (container->type) {
    case TV_STRING:
        if (item->type != TV_STRING)
            return rt_fail(r, "'in <string>' requires string as left operand, not %s", tv_type_name(item));
        if (!item->u.str.len) return 1;
        return memmem(container->u.str.s, container->u.str.len, item->u.str.s, item->u.str.len) != NULL;
    case TV_LIST:
        for (size_t i = 0; i < container->u.list.len; i++) {
            int eq = tv_equal(r, container->u.list.items[i], item);
            if (eq) return eq;
        }
        return 0;
    case TV_DICT:
        if (!tv_hashable(item)) return rt_fail(r, "unhashable type: '%s'", tv_type_name(item));
        if (tv_dict_get(r, container, item)) return 1;
        return r->failed ? -1 : 0;
    case TV_UNDEFINED: return 0; /* iterating an undefined value yields nothing */
    default: return rt_fail(r, "argument of type '%s' is not iterable", tv_type_name(container));
    }
}

int compare_op(rt *r, int op, tmpl_value *x, tmpl_value *y) {
    switch (op) {
    case OP_EQ: return tv_equal(r, x, y);
    case OP_NE: {
        int eq = tv_equal(r, x, y);
        return eq < 0 ? -1 : !eq;
    }
    case OP_IN: return contains(r, y, x);
    case OP_NOTIN: {
        int c = contains(r, y, x);
        return c < 0 ? -1 : !c;
    }
    default: break;
    }
    if (x->type == TV_UNDEFINED) return fail_undefined(r, x, "comparison");
    if (y->type == TV_UNDEFINED) return fail_undefined(r, y, "comparison");
    int c = tv_compare(r, x, y, false);
    if (c == TV_CMP_FAIL) return -1;
    const char *sym = op == '<' ? "<" : op == '>' ? ">" : op == OP_LE ? "<=" : ">=";
    if (c == 2) {
        if (tv_is_num(x) && tv_is_num(y)) return 0; /* NaN */
        return rt_fail(r, "'%s' not supported between instances of '%s' and '%s'", sym, tv_type_name(x), tv_type_name(y));
    }
    switch (op) {
    case '<': return c < 0;
    case '>': return c > 0;
    case OP_LE: return c <= 0;
    default: return c >= 0;
    }
}

/* a < b < c is (a < b) and (b < c), evaluating b once. */
static tmpl_value *eval_compare(rt *r, const node *n) {
    tmpl_value *left = eval(r, n->a);
    if (!left) return NULL;
    int result = 1;
    for (size_t i = 0; i < n->args.n && result == 1; i++) {
        tmpl_value *right = eval(r, n->args.v[i]);
        if (!right) {
            tv_decref(r, left);
            return NULL;
        }
        result = compare_op(r, n->ops[i], left, right);
        tv_decref(r, left);
        left = right;
    }
    tv_decref(r, left);
    return result < 0 ? NULL : tv_bool(result);
}

/* ---- Calls, filters, tests ---------------------------------------------------------------- */
#define SMALL_ARGS 8

typedef struct arg_store {
    tmpl_value *small[SMALL_ARGS];
    tmpl_value **v;
    size_t n;
} arg_store;

static void args_release(rt *r, arg_store *st) {
    for (size_t i = 0; i < st->n; i++) tv_decref(r, st->v[i]);
    if (st->v != st->small) free(st->v);
}

/* Evaluate a node's positional and keyword arguments into a. */
static int eval_args(rt *r, const node *n, call_args *a, arg_store *st) {
    size_t total = n->args.n + n->kwargs.n;
    st->n = 0;
    st->v = total <= SMALL_ARGS ? st->small : malloc(total * sizeof *st->v);
    if (!st->v) return rt_fail(r, "out of memory");
    for (size_t i = 0; i < total; i++) {
        const node *e = i < n->args.n ? n->args.v[i] : n->kwargs.v[i - n->args.n];
        tmpl_value *v = eval(r, e);
        if (!v) {
            args_release(r, st);
            return -1;
        }
        st->v[st->n++] = v;
    }
    *a = (call_args){.pos = st->v, .npos = n->args.n, .names = n->names, .kw = st->v + n->args.n, .nkw = n->kwargs.n};
    return 0;
}

tmpl_value *call_value(rt *r, tmpl_value *callee, const call_args *a) {
    switch (callee->type) {
    case TV_MACRO: return call_macro(r, callee, a, NULL);
    case TV_BUILTIN: return call_builtin(r, callee, a);
    case TV_UNDEFINED: fail_undefined(r, callee, "call"); return NULL;
    default: rt_fail(r, "'%s' object is not callable", tv_type_name(callee)); return NULL;
    }
}

static tmpl_value *eval_call(rt *r, const node *n) {
    tmpl_value *callee = eval(r, n->a);
    if (!callee) return NULL;
    call_args a;
    arg_store st;
    tmpl_value *v = NULL;
    if (!eval_args(r, n, &a, &st)) {
        v = call_value(r, callee, &a);
        args_release(r, &st);
    }
    tv_decref(r, callee);
    return v;
}

static tmpl_value *eval_filter(rt *r, const node *n, tmpl_value *base) {
    if (n->fn < 0) {
        rt_fail(r, "no filter named '%s' found", n->name);
        return NULL;
    }
    tmpl_value *operand;
    if (!n->a) operand = tv_ref(base);
    else operand = base ? eval_filter(r, n->a, base) : eval(r, n->a);
    if (!operand) return NULL;
    call_args a;
    arg_store st;
    tmpl_value *v = NULL;
    if (!eval_args(r, n, &a, &st)) {
        v = apply_filter(r, n->fn, operand, &a);
        args_release(r, &st);
    }
    tv_decref(r, operand);
    if (!v) rt_fail_at(r, n);
    return v;
}

tmpl_value *eval_filter_chain(rt *r, const node *f, tmpl_value *base) { return eval_filter(r, f, base); }

static tmpl_value *eval_test(rt *r, const node *n) {
    if (n->fn < 0) {
        rt_fail(r, "no test named '%s' found", n->name);
        return NULL;
    }
    tmpl_value *operand = eval(r, n->a);
    if (!operand) return NULL;
    call_args a;
    arg_store st;
    int res = -1;
    if (!eval_args(r, n, &a, &st)) {
        res = apply_test(r, n->fn, operand, &a);
        args_release(r, &st);
    }
    tv_decref(r, operand);
    if (res < 0) return NULL;
    return tv_bool(n->op ? !res : res);
}

/* ---- Literals of containers --------------------------------------------------------------- */
static tmpl_value *eval_list(rt *r, const node *n) {
    tmpl_value *l = tv_list(r, n->args.n);
    if (!l) return NULL;
    l->u.list.tuple = n->kind == N_TUPLE;
    for (size_t i = 0; i < n->args.n; i++) {
        tmpl_value *v = eval(r, n->args.v[i]);
        if (!v || tv_list_push(r, l, v)) {
            tv_decref(r, l);
            return NULL;
        }
    }
    return l;
}

static tmpl_value *eval_dict(rt *r, const node *n) {
    tmpl_value *d = tv_dict_new(r);
    if (!d) return NULL;
    for (size_t i = 0; i < n->args.n; i++) {
        tmpl_value *k = eval(r, n->args.v[i]);
        if (!k) goto fail;
        if (!tv_hashable(k)) {
            rt_fail(r, "unhashable type: '%s'", tv_type_name(k));
            tv_decref(r, k);
            goto fail;
        }
        tmpl_value *v = eval(r, n->kwargs.v[i]);
        if (!v) {
            tv_decref(r, k);
            goto fail;
        }
        if (tv_dict_set(r, d, k, v)) goto fail;
    }
    return d;
fail:
    tv_decref(r, d);
    return NULL;
}

/* ---- The dispatcher ----------------------------------------------------------------------- */
static tmpl_value *eval_unary(rt *r, const node *n) {
    tmpl_value *x = eval(r, n->a), *v = NULL;
    if (!x) return NULL;
    if (n->kind == N_NOT) {
        v = tv_bool(!tv_truthy(x));
    } else if (x->type == TV_UNDEFINED) {
        fail_undefined(r, x, "arithmetic");
    } else if (x->type == TV_FLOAT) {
        v = tv_float(r, n->kind == N_NEG ? -x->u.f : x->u.f);
    } else if (is_intlike(x)) {
        int64_t i = int_of(x);
        if (n->kind == N_NEG && i == INT64_MIN) rt_fail(r, "integer overflow in unary -");
        else v = tv_int(r, n->kind == N_NEG ? -i : i);
    } else {
        rt_fail(r, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+', tv_type_name(x));
    }
    tv_decref(r, x);
    return v;
}

static tmpl_value *eval_binary(rt *r, const node *n) {
    tmpl_value *x = eval(r, n->a);
    if (!x) return NULL;
    tmpl_value *y = eval(r, n->b), *v = NULL;
    if (y) binary_op(r, n->op, x, y, &v);
    tv_decref(r, x);
    tv_decref(r, y);
    return v;
}

static tmpl_value *eval_logic(rt *r, const node *n) {
    tmpl_value *x = eval(r, n->a);
    if (!x) return NULL;
    bool t = tv_truthy(x);
    if ((n->kind == N_AND && !t) || (n->kind == N_OR && t)) return x;
    tv_decref(r, x);
    return eval(r, n->b);
}

static tmpl_value *eval_access(rt *r, const node *n) {
    tmpl_value *obj = eval(r, n->a), *v = NULL;
    if (!obj) return NULL;
    if (n->kind == N_ATTR) {
        v = eval_getattr(r, obj, n->name, strlen(n->name));
    } else if (n->kind == N_ITEM) {
        tmpl_value *key = eval(r, n->b);
        if (key) v = eval_getitem(r, obj, key);
        tv_decref(r, key);
    } else {
        tmpl_value *parts[3] = {0};
        const node *pn[3] = {n->b, n->c, n->d};
        bool ok = true;
        for (int k = 0; k < 3 && ok; k++)
            if (pn[k] && !(parts[k] = eval(r, pn[k]))) ok = false;
        if (ok) v = slice_value(r, obj, parts[0], parts[1], parts[2]);
        for (int k = 0; k < 3; k++) tv_decref(r, parts[k]);
    }
    tv_decref(r, obj);
    return v;
}

static tmpl_value *eval_node(rt *r, const node *n) {
    switch (n->kind) {
    case N_LITERAL: return (tmpl_value *)&n->lit;
    case N_NAME: return lookup_name(r, n->name);
    case N_ATTR:
    case N_ITEM:
    case N_SLICE: return eval_access(r, n);
    case N_CALL: return eval_call(r, n);
    case N_FILTER: return eval_filter(r, n, NULL);
    case N_TEST: return eval_test(r, n);
    case N_NOT:
    case N_NEG:
    case N_POS: return eval_unary(r, n);
    case N_BINARY: return eval_binary(r, n);
    case N_AND:
    case N_OR: return eval_logic(r, n);
    case N_COMPARE: return eval_compare(r, n);
    case N_COND: {
        tmpl_value *c = eval(r, n->a);
        if (!c) return NULL;
        bool t = tv_truthy(c);
        tv_decref(r, c);
        if (t) return eval(r, n->b);
        return n->c ? eval(r, n->c) : tv_undefined(r, "the condition of an inline if was false and it has no else");
    }
    case N_LIST:
    case N_TUPLE: return eval_list(r, n);
    case N_DICT: return eval_dict(r, n);
    default: rt_fail(r, "not an expression"); return NULL;
    }
}

tmpl_value *eval(rt *r, const node *n) {
    if (rt_step(r)) {
        rt_fail_at(r, n);
        return NULL;
    }
    if (r->depth >= r->lim.max_depth) {
        rt_fail(r, "expressions or calls nested deeper than %d", r->lim.max_depth);
        rt_fail_at(r, n);
        return NULL;
    }
    r->depth++;
    tmpl_value *v = eval_node(r, n);
    r->depth--;
    if (!v) rt_fail_at(r, n);
    return v;
}

/* Iteration: a list's items, a dict's keys, a string's characters; nothing for undefined. */
tmpl_value *to_list(rt *r, tmpl_value *v) {
    switch (v->type) {
    case TV_LIST: return tv_ref(v);
    case TV_UNDEFINED: return tv_list(r, 0);
    case TV_DICT: {
        tmpl_value *l = tv_list(r, v->u.dict.len);
        for (size_t i = 0; l && i < v->u.dict.len; i++)
            if (tv_list_push(r, l, tv_ref(v->u.dict.ent[i].key))) {
                tv_decref(r, l);
                return NULL;
            }
        return l;
    }
    case TV_STRING: {
        tmpl_value *l = tv_list(r, 0);
        size_t w;
        for (size_t i = 0; l && i < v->u.str.len; i += w) {
            utf8_decode(v->u.str.s + i, v->u.str.len - i, &w);
            tmpl_value *c = tv_str(r, v->u.str.s + i, w);
            if (!c || tv_list_push(r, l, c)) {
                tv_decref(r, l);
                return NULL;
            }
        }
        return l;
    }
    default: rt_fail(r, "'%s' object is not iterable", tv_type_name(v)); return NULL;
    }
}
