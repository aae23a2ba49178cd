/* Jinja's tests (`x is defined`, `n is divisibleby 3`, ...), with Python's notion of types:
 * bool counts as a number but not as an integer, and the lenient undefined value is iterable. */
#include <math.h>
#include <string.h>

#include "template/internal.h"

typedef int (*test_fn)(rt *r, tmpl_value *v, tmpl_value *arg);

static int t_defined(rt *r, tmpl_value *v, tmpl_value *arg) { return v->type != TV_UNDEFINED; }
static int t_undefined(rt *r, tmpl_value *v, tmpl_value *arg) { return v->type == TV_UNDEFINED; }
static int t_none(rt *r, tmpl_value *v, tmpl_value *arg) { return v->type == TV_NONE; }
static int t_boolean(rt *r, tmpl_value *v, tmpl_value *arg) { return v->type == TV_BOOL; }
static int t_true(rt *r, tmpl_value *v, tmpl_value *arg) { return v->type == TV_BOOL && v->u.b; }
static int t_false(rt *r, tmpl_value *v, tmpl_value *arg) { return v->type == TV_BOOL && !v->u.b; }
static int t_integer(rt *r, tmpl_value *v, tmpl_value *arg) { return v->type == TV_INT; }
static int t_float(rt *r, tmpl_value *v, tmpl_value *arg) { return v->type == TV_FLOAT; }
static int t_number(rt *r, tmpl_value *v, tmpl_value *arg) { return tv_is_num(v); }
static int t_string(rt *r, tmpl_value *v, tmpl_value *arg) { return v->type == TV_STRING; }
static int t_mapping(rt *r, tmpl_value *v, tmpl_value *arg) { return v->type == TV_DICT; }
static int t_callable(rt *r, tmpl_value *v, tmpl_value *arg) {
    return v->type == TV_MACRO || v->type == TV_BUILTIN || v->type == TV_UNDEFINED;
}
static int t_iterable(rt *r, tmpl_value *v, tmpl_value *arg) {
    return v->type == TV_STRING || v->type == TV_LIST || v->type == TV_DICT || v->type == TV_UNDEFINED || v->type == TV_LOOP;
}
static int t_sequence(rt *r, tmpl_value *v, tmpl_value *arg) {
    return v->type == TV_STRING || (v->type == TV_LIST && !v->u.list.lazy) || v->type == TV_DICT || v->type == TV_UNDEFINED;
}
static int t_escaped(rt *r, tmpl_value *v, tmpl_value *arg) { return 0; } /* no markup values here */

/* value % n == 0 (or 1), with Python's modulo on ints and floats. */
static int modulo_is(rt *r, tmpl_value *v, tmpl_value *n, double want) {
    tmpl_value *m = NULL;
    if (binary_op(r, '%', v, n, &m)) return -1;
    int res = tv_as_double(m) == want && tv_is_num(m);
    tv_decref(r, m);
    return res;
}

static int t_odd(rt *r, tmpl_value *v, tmpl_value *arg) {
    tmpl_value two = {.type = TV_INT, .refs = TV_STATIC, .u.i = 2};
    return modulo_is(r, v, &two, 1);
}
static int t_even(rt *r, tmpl_value *v, tmpl_value *arg) {
    tmpl_value two = {.type = TV_INT, .refs = TV_STATIC, .u.i = 2};
    return modulo_is(r, v, &two, 0);
}
static int t_divisibleby(rt *r, tmpl_value *v, tmpl_value *arg) { return modulo_is(r, v, arg, 0); }

static int t_eq(rt *r, tmpl_value *v, tmpl_value *arg) { return tv_equal(r, v, arg); }
static int t_ne(rt *r, tmpl_value *v, tmpl_value *arg) {
    int eq = tv_equal(r, v, arg);
    return eq < 0 ? -1 : !eq;
}
static int t_lt(rt *r, tmpl_value *v, tmpl_value *arg) { return compare_op(r, '<', v, arg); }
static int t_le(rt *r, tmpl_value *v, tmpl_value *arg) { return compare_op(r, OP_LE, v, arg); }
static int t_gt(rt *r, tmpl_value *v, tmpl_value *arg) { return compare_op(r, '>', v, arg); }
static int t_ge(rt *r, tmpl_value *v, tmpl_value *arg) { return compare_op(r, OP_GE, v, arg); }
static int t_in(rt *r, tmpl_value *v, tmpl_value *arg) { return contains(r, arg, v); }

/* Identity: singletons by value, everything else by object. */
static int t_sameas(rt *r, tmpl_value *v, tmpl_value *arg) {
    if (v->type != arg->type) return 0;
    if (v->type == TV_NONE || v->type == TV_UNDEFINED) return v->type == TV_NONE;
    if (v->type == TV_BOOL) return v->u.b == arg->u.b;
    return v == arg;
}

/* str(value).islower() / .isupper(). */
static int case_test(rt *r, tmpl_value *v, bool upper) {
    tmpl_value *s = tv_to_str(r, v);
    if (!s) return -1;
    bool cased = false, ok = true;
    size_t w;
    for (size_t i = 0; i < s->u.str.len && ok; i += w) {
        uint32_t c = utf8_decode(s->u.str.s + i, s->u.str.len - i, &w);
        bool is_up = uni_lower(c) != c, is_low = uni_upper(c) != c;
        if (upper ? is_low : is_up) ok = false;
        if (is_up || is_low) cased = true;
    }
    tv_decref(r, s);
    return ok && cased;
}
static int t_lower(rt *r, tmpl_value *v, tmpl_value *arg) { return case_test(r, v, false); }
static int t_upper(rt *r, tmpl_value *v, tmpl_value *arg) { return case_test(r, v, true); }

static int t_filter(rt *r, tmpl_value *v, tmpl_value *arg) {
    return v->type == TV_STRING && filter_lookup(v->u.str.s, v->u.str.len) >= 0;
}
static int t_test(rt *r, tmpl_value *v, tmpl_value *arg) {
    return v->type == TV_STRING && test_lookup(v->u.str.s, v->u.str.len) >= 0;
}

static const struct test {
    const char *name;
    test_fn fn;
    bool takes_arg;
} tests[] = {
    {"!=", t_ne, true}, {"<", t_lt, true}, {"<=", t_le, true}, {"==", t_eq, true}, {">", t_gt, true},
    {">=", t_ge, true}, {"boolean", t_boolean, false}, {"callable", t_callable, false},
    {"defined", t_defined, false}, {"divisibleby", t_divisibleby, true}, {"eq", t_eq, true},
    {"equalto", t_eq, true}, {"escaped", t_escaped, false}, {"even", t_even, false}, {"false", t_false, false},
    {"filter", t_filter, false}, {"float", t_float, false}, {"ge", t_ge, true}, {"greaterthan", t_gt, true},
    {"gt", t_gt, true}, {"in", t_in, true}, {"integer", t_integer, false}, {"iterable", t_iterable, false},
    {"le", t_le, true}, {"lessthan", t_lt, true}, {"lower", t_lower, false}, {"lt", t_lt, true},
    {"mapping", t_mapping, false}, {"ne", t_ne, true}, {"none", t_none, false}, {"number", t_number, false},
    {"odd", t_odd, false}, {"sameas", t_sameas, true}, {"sequence", t_sequence, false},
    {"string", t_string, false}, {"test", t_test, false}, {"true", t_true, false},
    {"undefined", t_undefined, false}, {"upper", t_upper, false},
};

int test_lookup(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (strlen(tests[i].name) == len && !memcmp(tests[i].name, name, len)) return (int)i;
    return -1;
}

int apply_test(rt *r, int fn, tmpl_value *v, const call_args *a) {
    const struct test *t = &tests[fn];
    static const char *const one[] = {"value", NULL}, *const none[] = {NULL};
    tmpl_value *arg[1] = {NULL};
    /* lower, upper read a string through: charged by its bytes, as filters are */
    if (rt_decode(r, v->type == TV_STRING ? v->u.str.len : 0) || bind_args(r, t->name, a, t->takes_arg ? one : none, arg))
        return -1;
    if (t->takes_arg && !arg[0]) return rt_fail(r, "test '%s' needs an argument", t->name);
    return t->fn(r, v, arg[0]);
}
