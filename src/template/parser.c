/* The parser: tokens → syntax tree, by recursive descent following Jinja2's grammar and
 * precedence (lowest first): `x if c else y`, or, and, not, comparisons (chained; in, not in),
 * + -, ~, * / // %, **, unary - +, then postfix (.attr, [item], [a:b:c], call) with filters
 * `|f(...)` and tests `is [not] t` binding tighter than any binary operator. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/internal.h"

#define PARSE_MAX_DEPTH 200

typedef struct parser {
    tmpl *t;
    token *tk;
    size_t n, i;
    nc_err *err;
    int depth;       /* nesting of expressions and blocks, bounded against stack exhaustion */
    int loop_depth;  /* enclosing for loops in the current macro, for break / continue */
    int *macro_uses; /* USES_* flags of the macro being parsed, or NULL */
} parser;

static int fail_at(parser *p, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(parser *p, size_t pos, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    pos_to_line_col(p->t, pos, &line, &col);
    return nc_fail(p->err, "template:%d:%d: %s", line, col, msg);
}

static const token *cur(const parser *p) { return &p->tk[p->i]; }
static const token *peek(const parser *p, size_t k) {
    return p->i + k < p->n ? &p->tk[p->i + k] : &p->tk[p->n - 1];
}
static void advance(parser *p) {
    if (p->tk[p->i].type != T_EOF) p->i++;
}

static bool tok_is_name(const token *t, const char *name) {
    return t->type == T_NAME && t->len == strlen(name) && !memcmp(t->s, name, t->len);
}
static bool is_name(const parser *p, const char *name) { return tok_is_name(cur(p), name); }
static bool is_op(const parser *p, int op) { return cur(p)->type == T_OP && cur(p)->op == op; }

static bool accept_name(parser *p, const char *name) {
    if (!is_name(p, name)) return false;
    advance(p);
    return true;
}
static bool accept_op(parser *p, int op) {
    if (!is_op(p, op)) return false;
    advance(p);
    return true;
}

/* How a token reads in a message. */
static void describe(const token *t, char *out, size_t cap) {
    switch (t->type) {
    case T_EOF: snprintf(out, cap, "end of template"); break;
    case T_TEXT: snprintf(out, cap, "text"); break;
    case T_VAR_BEGIN: snprintf(out, cap, "'{{'"); break;
    case T_VAR_END: snprintf(out, cap, "'}}'"); break;
    case T_BLOCK_BEGIN: snprintf(out, cap, "'{%%'"); break;
    case T_BLOCK_END: snprintf(out, cap, "'%%}'"); break;
    case T_NAME: snprintf(out, cap, "'%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s); break;
    case T_STRING: snprintf(out, cap, "a string"); break;
    case T_INT:
    case T_FLOAT: snprintf(out, cap, "a number"); break;
    case T_OP: {
        static const char *const multi[] = {"==", "!=", "<=", ">=", "//", "**"};
        if (t->op >= OP_EQ && t->op <= OP_POW) snprintf(out, cap, "'%s'", multi[t->op - OP_EQ]);
        else snprintf(out, cap, "'%c'", (char)t->op);
        break;
    }
    }
}

static int fail_unexpected(parser *p, const char *expected) {
    char what[64];
    describe(cur(p), what, sizeof what);
    return fail_at(p, cur(p)->pos, "unexpected %s, expected %s", what, expected);
}

static int expect_op(parser *p, int op, const char *text) {
    if (accept_op(p, op)) return 0;
    char want[16];
    snprintf(want, sizeof want, "'%s'", text);
    return fail_unexpected(p, want);
}

static int expect_block_end(parser *p) {
    if (cur(p)->type == T_BLOCK_END) {
        advance(p);
        return 0;
    }
    return fail_unexpected(p, "'%}'");
}

static node *mk(parser *p, node_kind kind, size_t pos) {
    node *n = arena_alloc(&p->t->arena, sizeof *n);
    if (!n) {
        nc_fail(p->err, "out of memory");
        return NULL;
    }
    n->kind = kind;
    n->pos = pos;
    return n;
}

static const char *name_of(parser *p, const token *t) {
    char *s = arena_strndup(&p->t->arena, t->s, t->len);
    if (!s) nc_fail(p->err, "out of memory");
    return s;
}

/* Append to an arena array, doubling into a fresh block as it fills (the old block stays in the
 * arena until the template is freed; growth is geometric, so the waste is bounded). */
static int push_elem(parser *p, void **arr, size_t *n, size_t *cap, size_t elem, const void *item) {
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 4;
        void *fresh = arena_alloc(&p->t->arena, ncap * elem);
        if (!fresh) return nc_fail(p->err, "out of memory");
        if (*n) memcpy(fresh, *arr, *n * elem);
        *arr = fresh;
        *cap = ncap;
    }
    memcpy((char *)*arr + *n * elem, item, elem);
    (*n)++;
    return 0;
}

typedef struct nvec {
    node **v;
    size_t n, cap;
} nvec;
static int nvec_push(parser *p, nvec *v, node *x) { return push_elem(p, (void **)&v->v, &v->n, &v->cap, sizeof x, &x); }
static node_list nvec_list(const nvec *v) { return (node_list){v->v, v->n}; }

typedef struct svec {
    const char **v;
    size_t n, cap;
} svec;
static int svec_push(parser *p, svec *v, const char *s) { return push_elem(p, (void **)&v->v, &v->n, &v->cap, sizeof s, &s); }

static int enter(parser *p) {
    if (++p->depth > PARSE_MAX_DEPTH)
        return fail_at(p, cur(p)->pos, "template nested too deeply (more than %d levels)", PARSE_MAX_DEPTH);
    return 0;
}
static void leave(parser *p) { p->depth--; }

/* A chain (a.b.c, x|f|g, a + b + c, x if c else y ...) is parsed by a loop but builds one tree
 * level per link, so each link counts as a level of nesting until the chain ends: the depth of
 * the tree, which the checks below and every render walk recursively, stays bounded too. */
static int chain_link(parser *p, int *links) {
    (*links)++;
    return enter(p);
}
static node *chain_end(parser *p, int links, node *x) {
    p->depth -= links;
    return x;
}

/* ---- Expressions -------------------------------------------------------------------------- */
static node *parse_expression(parser *p, bool with_condexpr);
static node *parse_or(parser *p);
static node *parse_unary(parser *p, bool with_filter);
static node *parse_primary(parser *p);
static node *parse_postfix(parser *p, node *n);
static node *parse_filter_expr(parser *p, node *n);

/* `a, b` forms a tuple where Jinja allows one (output, set, for, if); `end_name` also ends it. */
static node *parse_tuple(parser *p, bool with_condexpr, const char *end_name) {
    size_t pos = cur(p)->pos;
    nvec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n && expect_op(p, ',', ",")) return NULL;
        const token *t = cur(p);
        if (t->type == T_VAR_END || t->type == T_BLOCK_END || (t->type == T_OP && t->op == ')') ||
            (end_name && tok_is_name(t, end_name)))
            break;
        node *e = parse_expression(p, with_condexpr);
        if (!e || nvec_push(p, &items, e)) return NULL;
        if (!is_op(p, ',')) break;
        is_tuple = true;
    }
    if (!is_tuple) {
        if (items.n) return items.v[0];
        fail_unexpected(p, "an expression");
        return NULL;
    }
    node *n = mk(p, N_TUPLE, pos);
    if (n) n->args = nvec_list(&items);
    return n;
}

static node *parse_condexpr(parser *p) {
    int links = 0;
    node *x = parse_or(p);
    while (x && is_name(p, "if")) {
        if (chain_link(p, &links)) return NULL;
        size_t pos = cur(p)->pos;
        advance(p);
        node *n = mk(p, N_COND, pos);
        if (!n) return NULL;
        n->b = x;
        n->a = parse_or(p);
        if (!n->a) return NULL;
        if (accept_name(p, "else") && !(n->c = parse_condexpr(p))) return NULL;
        x = n;
    }
    return chain_end(p, links, x);
}

static node *parse_expression(parser *p, bool with_condexpr) {
    if (enter(p)) return NULL;
    node *n = with_condexpr ? parse_condexpr(p) : parse_or(p);
    leave(p);
    return n;
}

static node *binary(parser *p, node_kind kind, int op, size_t pos, node *a, node *b) {
    if (!a || !b) return NULL;
    node *n = mk(p, kind, pos);
    if (!n) return NULL;
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static node *parse_not(parser *p);
static node *parse_and(parser *p) {
    int links = 0;
    node *x = parse_not(p);
    while (x && is_name(p, "and")) {
        if (chain_link(p, &links)) return NULL;
        size_t pos = cur(p)->pos;
        advance(p);
        x = binary(p, N_AND, 0, pos, x, parse_not(p));
    }
    return chain_end(p, links, x);
}

static node *parse_or(parser *p) {
    int links = 0;
    node *x = parse_and(p);
    while (x && is_name(p, "or")) {
        if (chain_link(p, &links)) return NULL;
        size_t pos = cur(p)->pos;
        advance(p);
        x = binary(p, N_OR, 0, pos, x, parse_and(p));
    }
    return chain_end(p, links, x);
}

static node *parse_compare(parser *p);
static node *parse_not(parser *p) {
    if (!is_name(p, "not")) return parse_compare(p);
    size_t pos = cur(p)->pos;
    advance(p);
    if (enter(p)) return NULL;
    node *a = parse_not(p);
    leave(p);
    if (!a) return NULL;
    node *n = mk(p, N_NOT, pos);
    if (n) n->a = a;
    return n;
}

static node *parse_math1(parser *p);

/* The comparison operator at the cursor (consumed), or 0. */
static int take_compare_op(parser *p) {
    const token *t = cur(p);
    if (t->type == T_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LE || t->op == OP_GE ||
                            t->op == '<' || t->op == '>')) {
        advance(p);
        return t->op;
    }
    if (is_name(p, "in")) {
        advance(p);
        return OP_IN;
    }
    if (is_name(p, "not") && tok_is_name(peek(p, 1), "in")) {
        advance(p);
        advance(p);
        return OP_NOTIN;
    }
    return 0;
}

static node *parse_compare(parser *p) {
    size_t pos = cur(p)->pos;
    node *first = parse_math1(p);
    if (!first) return NULL;
    nvec operands = {0};
    int *ops = NULL;
    size_t nops = 0, cap = 0;
    int op;
    while ((op = take_compare_op(p))) {
        node *x = parse_math1(p);
        if (!x || nvec_push(p, &operands, x) || push_elem(p, (void **)&ops, &nops, &cap, sizeof op, &op))
            return NULL;
    }
    if (!operands.n) return first;
    node *n = mk(p, N_COMPARE, pos);
    if (!n) return NULL;
    n->a = first;
    n->args = nvec_list(&operands);
    n->ops = ops;
    return n;
}

static node *parse_concat(parser *p);
static node *parse_math1(parser *p) {
    int links = 0;
    node *x = parse_concat(p);
    while (x && (is_op(p, '+') || is_op(p, '-'))) {
        if (chain_link(p, &links)) return NULL;
        const token *t = cur(p);
        advance(p);
        x = binary(p, N_BINARY, t->op, t->pos, x, parse_concat(p));
    }
    return chain_end(p, links, x);
}

static node *parse_math2(parser *p);
static node *parse_concat(parser *p) {
    int links = 0;
    node *x = parse_math2(p);
    while (x && is_op(p, '~')) {
        if (chain_link(p, &links)) return NULL;
        size_t pos = cur(p)->pos;
        advance(p);
        x = binary(p, N_BINARY, '~', pos, x, parse_math2(p));
    }
    return chain_end(p, links, x);
}

static node *parse_pow(parser *p);
static node *parse_math2(parser *p) {
    int links = 0;
    node *x = parse_pow(p);
    while (x && (is_op(p, '*') || is_op(p, '/') || is_op(p, OP_FLOORDIV) || is_op(p, '%'))) {
        if (chain_link(p, &links)) return NULL;
        const token *t = cur(p);
        advance(p);
        x = binary(p, N_BINARY, t->op, t->pos, x, parse_pow(p));
    }
    return chain_end(p, links, x);
}

static node *parse_pow(parser *p) {
    int links = 0;
    node *x = parse_unary(p, true);
    while (x && is_op(p, OP_POW)) { /* left-associative, as in Jinja (unlike Python) */
        if (chain_link(p, &links)) return NULL;
        size_t pos = cur(p)->pos;
        advance(p);
        x = binary(p, N_BINARY, OP_POW, pos, x, parse_unary(p, true));
    }
    return chain_end(p, links, x);
}

static node *parse_unary(parser *p, bool with_filter) {
    if (enter(p)) return NULL;
    node *n;
    if (is_op(p, '-') || is_op(p, '+')) {
        const token *t = cur(p);
        advance(p);
        node *a = parse_unary(p, false);
        n = a ? mk(p, t->op == '-' ? N_NEG : N_POS, t->pos) : NULL;
        if (n) n->a = a;
    } else {
        n = parse_primary(p);
    }
    if (n) n = parse_postfix(p, n);
    if (n && with_filter) n = parse_filter_expr(p, n);
    leave(p);
    return n;
}

static node *literal(parser *p, size_t pos, tv_type type) {
    node *n = mk(p, N_LITERAL, pos);
    if (!n) return NULL;
    n->lit.type = type;
    n->lit.refs = TV_STATIC;
    return n;
}

/* Adjacent string literals join, as in Python: "a" "b" is "ab". */
static node *parse_string(parser *p) {
    size_t pos = cur(p)->pos, total = 0;
    size_t first = p->i;
    while (cur(p)->type == T_STRING) {
        total += cur(p)->len;
        advance(p);
    }
    node *n = literal(p, pos, TV_STRING);
    if (!n) return NULL;
    if (p->i - first == 1) {
        n->lit.u.str.s = (char *)p->tk[first].s;
    } else {
        char *s = arena_alloc(&p->t->arena, total + 1);
        if (!s) {
            nc_fail(p->err, "out of memory");
            return NULL;
        }
        size_t at = 0;
        for (size_t k = first; k < p->i; k++) {
            memcpy(s + at, p->tk[k].s, p->tk[k].len);
            at += p->tk[k].len;
        }
        n->lit.u.str.s = s;
    }
    n->lit.u.str.len = total;
    return n;
}

static node *parse_list_literal(parser *p) {
    node *n = mk(p, N_LIST, cur(p)->pos);
    if (!n) return NULL;
    advance(p);
    nvec items = {0};
    while (!is_op(p, ']')) {
        if (items.n && expect_op(p, ',', ",")) return NULL;
        if (is_op(p, ']')) break;
        node *e = parse_expression(p, true);
        if (!e || nvec_push(p, &items, e)) return NULL;
    }
    advance(p);
    n->args = nvec_list(&items);
    return n;
}

static node *parse_dict_literal(parser *p) {
    node *n = mk(p, N_DICT, cur(p)->pos);
    if (!n) return NULL;
    advance(p);
    nvec keys = {0}, vals = {0};
    while (!is_op(p, '}')) {
        if (keys.n && expect_op(p, ',', ",")) return NULL;
        if (is_op(p, '}')) break;
        node *k = parse_expression(p, true);
        if (!k || expect_op(p, ':', ":")) return NULL;
        node *v = parse_expression(p, true);
        if (!v || nvec_push(p, &keys, k) || nvec_push(p, &vals, v)) return NULL;
    }
    advance(p);
    n->args = nvec_list(&keys);
    n->kwargs = nvec_list(&vals);
    return n;
}

static node *parse_name_primary(parser *p) {
    const token *t = cur(p);
    advance(p);
    if (tok_is_name(t, "true") || tok_is_name(t, "True") || tok_is_name(t, "false") || tok_is_name(t, "False")) {
        node *n = literal(p, t->pos, TV_BOOL);
        if (n) n->lit.u.b = t->s[0] == 't' || t->s[0] == 'T';
        return n;
    }
    if (tok_is_name(t, "none") || tok_is_name(t, "None")) return literal(p, t->pos, TV_NONE);
    if (p->macro_uses && tok_is_name(t, "varargs")) *p->macro_uses |= USES_VARARGS;
    if (p->macro_uses && tok_is_name(t, "kwargs")) *p->macro_uses |= USES_KWARGS;
    if (p->macro_uses && tok_is_name(t, "caller")) *p->macro_uses |= USES_CALLER;
    node *n = mk(p, N_NAME, t->pos);
    if (n && !(n->name = name_of(p, t))) return NULL;
    return n;
}

static node *parse_primary(parser *p) {
    const token *t = cur(p);
    node *n;
    switch (t->type) {
    case T_NAME: return parse_name_primary(p);
    case T_STRING: return parse_string(p);
    case T_INT:
    case T_FLOAT:
        n = literal(p, t->pos, t->type == T_INT ? TV_INT : TV_FLOAT);
        if (!n) return NULL;
        if (t->type == T_INT) n->lit.u.i = t->i;
        else n->lit.u.f = t->f;
        advance(p);
        return n;
    case T_OP:
        if (t->op == '(') {
            size_t pos = t->pos;
            advance(p);
            if (accept_op(p, ')')) { /* () is the empty tuple */
                n = mk(p, N_TUPLE, pos);
                return n;
            }
            n = parse_tuple(p, true, NULL);
            if (!n || expect_op(p, ')', ")")) return NULL;
            return n;
        }
        if (t->op == '[') return parse_list_literal(p);
        if (t->op == '{') return parse_dict_literal(p);
        break;
    default:
        break;
    }
    fail_unexpected(p, "an expression");
    return NULL;
}

/* Call arguments `(a, b, k=v)`, the opening parenthesis at the cursor. */
static int parse_call_args(parser *p, node *n) {
    advance(p);
    nvec args = {0}, kwargs = {0};
    svec names = {0};
    while (!is_op(p, ')')) {
        if (args.n + kwargs.n && expect_op(p, ',', ",")) return -1;
        if (is_op(p, ')')) break;
        if (is_op(p, '*') || is_op(p, OP_POW))
            return fail_at(p, cur(p)->pos, "*args and **kwargs in calls are not supported");
        if (cur(p)->type == T_NAME && peek(p, 1)->type == T_OP && peek(p, 1)->op == '=') {
            for (size_t k = 0; k < names.n; k++)
                if (strlen(names.v[k]) == cur(p)->len && !memcmp(names.v[k], cur(p)->s, cur(p)->len))
                    return fail_at(p, cur(p)->pos, "keyword argument repeated: %s", names.v[k]);
            const char *name = name_of(p, cur(p));
            advance(p);
            advance(p);
            node *v = parse_expression(p, true);
            if (!name || !v || svec_push(p, &names, name) || nvec_push(p, &kwargs, v)) return -1;
        } else {
            if (kwargs.n) return fail_at(p, cur(p)->pos, "positional argument after keyword argument");
            node *v = parse_expression(p, true);
            if (!v || nvec_push(p, &args, v)) return -1;
        }
    }
    advance(p);
    n->args = nvec_list(&args);
    n->kwargs = nvec_list(&kwargs);
    n->names = names.v;
    n->n_names = names.n;
    return 0;
}

/* One part of a subscript: an expression, or a slice a:b:c with any part left out. */
static node *parse_subscript(parser *p) {
    size_t pos = cur(p)->pos;
    node *parts[3] = {0};
    if (!is_op(p, ':')) {
        parts[0] = parse_expression(p, true);
        if (!parts[0]) return NULL;
        if (!is_op(p, ':')) return parts[0];
    }
    advance(p); /* the first ':' */
    for (int k = 1; k < 3; k++) {
        if (!is_op(p, ']') && !is_op(p, ':') && !(parts[k] = parse_expression(p, true))) return NULL;
        if (k == 1 && !accept_op(p, ':')) break;
    }
    node *n = mk(p, N_SLICE, pos);
    if (!n) return NULL;
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static node *parse_postfix(parser *p, node *x) {
    int links = 0;
    while (x) {
        if (chain_link(p, &links)) return NULL;
        const token *t = cur(p);
        if (t->type != T_OP) break;
        if (t->op == '.') {
            advance(p);
            const token *a = cur(p);
            if (a->type == T_NAME) {
                node *n = mk(p, N_ATTR, t->pos);
                if (!n || !(n->name = name_of(p, a))) return NULL;
                n->a = x;
                x = n;
            } else if (a->type == T_INT) { /* foo.0 is foo[0] */
                node *k = literal(p, a->pos, TV_INT), *n = mk(p, N_ITEM, t->pos);
                if (!k || !n) return NULL;
                k->lit.u.i = a->i;
                n->a = x;
                n->b = k;
                x = n;
            } else {
                fail_unexpected(p, "an attribute name");
                return NULL;
            }
            advance(p);
        } else if (t->op == '[') {
            advance(p);
            node *sub = parse_subscript(p);
            if (!sub) return NULL;
            if (is_op(p, ',')) {
                fail_at(p, cur(p)->pos, "tuple subscripts are not supported");
                return NULL;
            }
            if (expect_op(p, ']', "]")) return NULL;
            if (sub->kind == N_SLICE) {
                sub->a = x;
                x = sub;
            } else {
                node *n = mk(p, N_ITEM, t->pos);
                if (!n) return NULL;
                n->a = x;
                n->b = sub;
                x = n;
            }
        } else if (t->op == '(') {
            node *n = mk(p, N_CALL, t->pos);
            if (!n) return NULL;
            n->a = x;
            if (parse_call_args(p, n)) return NULL;
            x = n;
        } else {
            break;
        }
    }
    return chain_end(p, links, x);
}

/* `name` or `name.more` after | or is. */
static const char *parse_dotted_name(parser *p, size_t *len) {
    if (cur(p)->type != T_NAME) {
        fail_unexpected(p, "a name");
        return NULL;
    }
    const char *start = cur(p)->s;
    size_t end = (size_t)(cur(p)->s - start) + cur(p)->len;
    advance(p);
    while (is_op(p, '.') && peek(p, 1)->type == T_NAME) {
        advance(p);
        end = (size_t)(cur(p)->s - start) + cur(p)->len;
        advance(p);
    }
    *len = end;
    char *s = arena_strndup(&p->t->arena, start, end);
    if (!s) nc_fail(p->err, "out of memory");
    return s;
}

/* One `|name(args)` with operand x (NULL in filter and set blocks), the name at the cursor. */
static node *parse_one_filter(parser *p, node *x) {
    size_t pos = cur(p)->pos, len;
    const char *name = parse_dotted_name(p, &len);
    if (!name) return NULL;
    node *n = mk(p, N_FILTER, pos);
    if (!n) return NULL;
    n->a = x;
    n->name = name;
    n->fn = filter_lookup(name, len); /* -1: see check_names */
    if (is_op(p, '(') && parse_call_args(p, n)) return NULL;
    return n;
}

static node *parse_test(parser *p, node *x) {
    size_t pos = cur(p)->pos, len;
    advance(p); /* is */
    bool negated = accept_name(p, "not");
    const char *name = parse_dotted_name(p, &len);
    if (!name) return NULL;
    node *n = mk(p, N_TEST, pos);
    if (!n) return NULL;
    n->a = x;
    n->name = name;
    n->fn = test_lookup(name, len); /* -1: see check_names */
    n->op = negated;
    const token *t = cur(p);
    if (is_op(p, '(')) {
        if (parse_call_args(p, n)) return NULL;
    } else if ((t->type == T_NAME || t->type == T_STRING || t->type == T_INT || t->type == T_FLOAT ||
                (t->type == T_OP && (t->op == '[' || t->op == '{'))) &&
               !tok_is_name(t, "else") && !tok_is_name(t, "or") && !tok_is_name(t, "and")) {
        /* a single argument without parentheses: `x is divisibleby 3` (any other word after a
         * test is taken as its argument, as Jinja does) */
        if (tok_is_name(t, "is")) {
            fail_at(p, t->pos, "you cannot chain multiple tests with is");
            return NULL;
        }
        node *arg = parse_primary(p);
        if (arg) arg = parse_postfix(p, arg);
        nvec args = {0};
        if (!arg || nvec_push(p, &args, arg)) return NULL;
        n->args = nvec_list(&args);
    }
    return n;
}

static node *parse_filter_expr(parser *p, node *x) {
    int links = 0;
    while (x) {
        if (chain_link(p, &links)) return NULL;
        if (is_op(p, '|')) {
            advance(p);
            x = parse_one_filter(p, x);
        } else if (is_name(p, "is")) {
            x = parse_test(p, x);
        } else if (is_op(p, '(')) {
            node *n = mk(p, N_CALL, cur(p)->pos);
            if (!n) return NULL;
            n->a = x;
            if (parse_call_args(p, n)) return NULL;
            x = n;
        } else {
            break;
        }
    }
    return chain_end(p, links, x);
}

/* A filter chain `f(args)|g` for filter and set blocks: returns the outermost filter, whose
 * innermost operand (left NULL) is the block's text. */
static node *parse_filter_chain(parser *p) {
    int links = 0;
    node *x = parse_one_filter(p, NULL);
    while (x && accept_op(p, '|')) {
        if (chain_link(p, &links)) return NULL;
        x = parse_one_filter(p, x);
    }
    return chain_end(p, links, x);
}

/* ---- Statements --------------------------------------------------------------------------- */
static int parse_body(parser *p, node_list *out, const char *const *ends, const char *block, size_t block_pos);
static node *parse_statement(parser *p);

/* The end tag parse_body stopped at (its name token is at the cursor). */
static bool at_end_tag(parser *p, const char *name) { return is_name(p, name); }

/* Read the tag name at the cursor as one of `ends`, then `%}`. */
static int finish_end_tag(parser *p) {
    advance(p);
    return expect_block_end(p);
}

/* Names to assign: `a`, `a, b`, `(a, b)`. */
static int parse_targets(parser *p, node *n) {
    svec names = {0};
    bool paren = accept_op(p, '(');
    bool comma = false;
    for (;;) {
        if (cur(p)->type != T_NAME) return fail_unexpected(p, "a variable name");
        const char *name = name_of(p, cur(p));
        if (!name || svec_push(p, &names, name)) return -1;
        advance(p);
        if (!accept_op(p, ',')) break;
        comma = true;
    }
    if (paren && expect_op(p, ')', ")")) return -1;
    n->names = names.v;
    n->n_names = names.n;
    n->unpack = comma || names.n > 1 || paren;
    return 0;
}

static node *parse_for(parser *p, size_t pos) {
    node *n = mk(p, N_FOR, pos);
    if (!n || parse_targets(p, n)) return NULL;
    if (!accept_name(p, "in")) {
        fail_unexpected(p, "'in'");
        return NULL;
    }
    if (!(n->a = parse_tuple(p, false, "recursive"))) return NULL;
    if (accept_name(p, "if") && !(n->b = parse_expression(p, true))) return NULL;
    if (is_name(p, "recursive")) {
        fail_at(p, cur(p)->pos, "recursive loops are not supported");
        return NULL;
    }
    if (expect_block_end(p)) return NULL;
    static const char *const ends[] = {"endfor", "else", NULL};
    p->loop_depth++;
    int rc = parse_body(p, &n->body, ends, "for", pos);
    p->loop_depth--;
    if (rc) return NULL;
    if (at_end_tag(p, "else")) {
        static const char *const end_for[] = {"endfor", NULL};
        if (finish_end_tag(p) || parse_body(p, &n->else_body, end_for, "for", pos)) return NULL;
    }
    return finish_end_tag(p) ? NULL : n;
}

static node *parse_if(parser *p, size_t pos) {
    node *n = mk(p, N_IF, pos);
    if (!n || !(n->a = parse_tuple(p, false, NULL)) || expect_block_end(p)) return NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    if (parse_body(p, &n->body, ends, "if", pos)) return NULL;
    if (at_end_tag(p, "elif")) { /* elif: an if nested in the else branch, closed by our endif */
        size_t epos = cur(p)->pos;
        advance(p);
        node *inner = parse_if(p, epos);
        nvec e = {0};
        if (!inner || nvec_push(p, &e, inner)) return NULL;
        n->else_body = nvec_list(&e);
        return n;
    }
    if (at_end_tag(p, "else")) {
        static const char *const end_if[] = {"endif", NULL};
        if (finish_end_tag(p) || parse_body(p, &n->else_body, end_if, "if", pos)) return NULL;
    }
    return finish_end_tag(p) ? NULL : n;
}

static node *parse_set(parser *p, size_t pos) {
    node *n = mk(p, N_SET, pos);
    if (!n) return NULL;
    if (cur(p)->type == T_NAME && peek(p, 1)->type == T_OP && peek(p, 1)->op == '.') {
        node *ns = mk(p, N_NAME, cur(p)->pos); /* namespace attribute: set ns.attr = value */
        if (!ns || !(ns->name = name_of(p, cur(p)))) return NULL;
        advance(p);
        advance(p);
        if (cur(p)->type != T_NAME) {
            fail_unexpected(p, "an attribute name");
            return NULL;
        }
        n->a = ns;
        if (!(n->name = name_of(p, cur(p)))) return NULL;
        advance(p);
    } else if (parse_targets(p, n)) {
        return NULL;
    }
    if (accept_op(p, '=')) {
        if (!(n->b = parse_tuple(p, true, NULL)) || expect_block_end(p)) return NULL;
        return n;
    }
    if (n->a || n->unpack) {
        fail_unexpected(p, "'='");
        return NULL;
    }
    n->kind = N_SET_BLOCK;
    if (accept_op(p, '|') && !(n->c = parse_filter_chain(p))) return NULL;
    if (expect_block_end(p)) return NULL;
    static const char *const ends[] = {"endset", NULL};
    if (parse_body(p, &n->body, ends, "set", pos)) return NULL;
    return finish_end_tag(p) ? NULL : n;
}

/* Parameters `(a, b=default)` of a macro or a call block's caller. */
static int parse_params(parser *p, node *n) {
    if (expect_op(p, '(', "(")) return -1;
    svec names = {0};
    nvec defaults = {0};
    while (!is_op(p, ')')) {
        if (names.n && expect_op(p, ',', ",")) return -1;
        if (is_op(p, ')')) break;
        if (cur(p)->type != T_NAME) return fail_unexpected(p, "a parameter name");
        const char *name = name_of(p, cur(p));
        advance(p);
        node *def = NULL;
        if (accept_op(p, '=') && !(def = parse_expression(p, true))) return -1;
        if (!name || svec_push(p, &names, name) || nvec_push(p, &defaults, def)) return -1;
    }
    advance(p);
    n->names = names.v;
    n->n_names = names.n;
    n->args = nvec_list(&defaults);
    return 0;
}

/* The body of a macro or call block: loops outside it do not count for break / continue. */
static int parse_callable_body(parser *p, node *n, const char *end, const char *block, size_t pos) {
    const char *ends[] = {end, NULL};
    int saved = p->loop_depth, *saved_uses = p->macro_uses;
    p->loop_depth = 0;
    p->macro_uses = &n->op;
    int rc = parse_body(p, &n->body, ends, block, pos);
    p->loop_depth = saved;
    p->macro_uses = saved_uses;
    return rc ? -1 : finish_end_tag(p);
}

static node *parse_macro(parser *p, size_t pos) {
    node *n = mk(p, N_MACRO, pos);
    if (!n) return NULL;
    if (cur(p)->type != T_NAME) {
        fail_unexpected(p, "a macro name");
        return NULL;
    }
    if (!(n->name = name_of(p, cur(p)))) return NULL;
    advance(p);
    if (parse_params(p, n) || expect_block_end(p)) return NULL;
    return parse_callable_body(p, n, "endmacro", "macro", pos) ? NULL : n;
}

static node *parse_call_block(parser *p, size_t pos) {
    node *n = mk(p, N_CALL_BLOCK, pos);
    if (!n) return NULL;
    if (is_op(p, '(') && parse_params(p, n)) return NULL;
    size_t epos = cur(p)->pos;
    if (!(n->a = parse_expression(p, true))) return NULL;
    if (n->a->kind != N_CALL) {
        fail_at(p, epos, "a call block needs a call, as in {%% call m() %%}");
        return NULL;
    }
    if (expect_block_end(p)) return NULL;
    return parse_callable_body(p, n, "endcall", "call", pos) ? NULL : n;
}

static node *parse_filter_block(parser *p, size_t pos) {
    node *n = mk(p, N_FILTER_BLOCK, pos);
    if (!n || !(n->c = parse_filter_chain(p)) || expect_block_end(p)) return NULL;
    static const char *const ends[] = {"endfilter", NULL};
    if (parse_body(p, &n->body, ends, "filter", pos)) return NULL;
    return finish_end_tag(p) ? NULL : n;
}

/* {% with a = 1, b = 2 %} ... {% endwith %}; also {% generation %}, which only scopes its body. */
static node *parse_with(parser *p, size_t pos, const char *end, const char *block) {
    node *n = mk(p, N_WITH, pos);
    if (!n) return NULL;
    svec names = {0};
    nvec values = {0};
    while (cur(p)->type != T_BLOCK_END) {
        if (names.n && expect_op(p, ',', ",")) return NULL;
        if (cur(p)->type != T_NAME) {
            fail_unexpected(p, "a variable name");
            return NULL;
        }
        const char *name = name_of(p, cur(p));
        advance(p);
        if (!name || expect_op(p, '=', "=")) return NULL;
        node *v = parse_expression(p, true);
        if (!v || svec_push(p, &names, name) || nvec_push(p, &values, v)) return NULL;
    }
    advance(p);
    n->names = names.v;
    n->n_names = names.n;
    n->args = nvec_list(&values);
    const char *ends[] = {end, NULL};
    if (parse_body(p, &n->body, ends, block, pos)) return NULL;
    return finish_end_tag(p) ? NULL : n;
}

static node *parse_loop_control(parser *p, size_t pos, node_kind kind, const char *word) {
    if (!p->loop_depth) {
        fail_at(p, pos, "'%s' outside of a loop", word);
        return NULL;
    }
    node *n = mk(p, kind, pos);
    return n && !expect_block_end(p) ? n : NULL;
}

/* After `{%`: the tag name is at the cursor. */
static node *parse_statement(parser *p) {
    const token *t = cur(p);
    size_t pos = t->pos;
    if (t->type != T_NAME) {
        fail_unexpected(p, "a tag name");
        return NULL;
    }
    advance(p);
    if (tok_is_name(t, "for")) return parse_for(p, pos);
    if (tok_is_name(t, "if")) return parse_if(p, pos);
    if (tok_is_name(t, "set")) return parse_set(p, pos);
    if (tok_is_name(t, "macro")) return parse_macro(p, pos);
    if (tok_is_name(t, "call")) return parse_call_block(p, pos);
    if (tok_is_name(t, "filter")) return parse_filter_block(p, pos);
    if (tok_is_name(t, "with")) return parse_with(p, pos, "endwith", "with");
    if (tok_is_name(t, "generation")) {
        if (cur(p)->type != T_BLOCK_END) {
            fail_unexpected(p, "'%}'");
            return NULL;
        }
        return parse_with(p, pos, "endgeneration", "generation");
    }
    if (tok_is_name(t, "break")) return parse_loop_control(p, pos, N_BREAK, "break");
    if (tok_is_name(t, "continue")) return parse_loop_control(p, pos, N_CONTINUE, "continue");
    fail_at(p, pos, "unknown tag '%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s);
    return NULL;
}

static node *parse_output(parser *p) {
    node *n = mk(p, N_OUTPUT, cur(p)->pos);
    if (!n) return NULL;
    advance(p);
    if (!(n->a = parse_tuple(p, true, NULL))) return NULL;
    if (cur(p)->type != T_VAR_END) {
        fail_unexpected(p, "'}}'");
        return NULL;
    }
    advance(p);
    return n;
}

static node *parse_text(parser *p) {
    const token *t = cur(p);
    node *n = mk(p, N_TEXT, t->pos);
    if (!n) return NULL;
    n->lit.type = TV_STRING;
    n->lit.refs = TV_STATIC;
    n->lit.u.str.s = (char *)t->s; /* the source outlives the tree */
    n->lit.u.str.len = t->len;
    advance(p);
    return n;
}

static bool is_one_of(const token *t, const char *const *names) {
    for (; names && *names; names++)
        if (tok_is_name(t, *names)) return true;
    return false;
}

/* Statements until one of the end tags (its name left at the cursor) or, when ends is NULL, the
 * end of the template. */
static int parse_body(parser *p, node_list *out, const char *const *ends, const char *block, size_t block_pos) {
    if (enter(p)) return -1;
    nvec body = {0};
    int rc = 0;
    for (;;) {
        const token *t = cur(p);
        node *n = NULL;
        if (t->type == T_EOF) {
            if (ends) rc = fail_at(p, block_pos, "unclosed '%s' block: missing {%% %s %%}", block, ends[0]);
            break;
        }
        if (t->type == T_TEXT) {
            n = parse_text(p);
        } else if (t->type == T_VAR_BEGIN) {
            n = parse_output(p);
        } else if (t->type == T_BLOCK_BEGIN) {
            if (is_one_of(peek(p, 1), ends)) {
                advance(p);
                break;
            }
            advance(p);
            n = parse_statement(p);
        } else {
            rc = fail_unexpected(p, "text or a tag");
            break;
        }
        if (!n || nvec_push(p, &body, n)) {
            rc = -1;
            break;
        }
    }
    leave(p);
    *out = nvec_list(&body);
    return rc;
}

/* ---- Unknown filters and tests ------------------------------------------------------------
 * Jinja rejects an unknown filter or test when it compiles the template, except inside an if
 * statement or an inline if (within the same loop, macro or block), where the error waits until
 * the filter is actually used: templates guard optional filters that way. */
static int check_names(parser *p, const node *n, bool soft, int depth);

static int check_list(parser *p, const node_list *l, bool soft, int depth) {
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] && check_names(p, l->v[i], soft, depth)) return -1;
    return 0;
}

/* Recursive over the tree, whose depth the parser bounds (a level of nesting may add a few tree
 * levels: an operator, a postfix, a statement); the check keeps the walk on the stack even so. */
#define TREE_MAX_DEPTH (4 * PARSE_MAX_DEPTH)

static int check_names(parser *p, const node *n, bool soft, int depth) {
    if (depth > TREE_MAX_DEPTH) return fail_at(p, n->pos, "template nested too deeply (more than %d levels)", PARSE_MAX_DEPTH);
    if ((n->kind == N_FILTER || n->kind == N_TEST) && n->fn < 0 && !soft)
        return fail_at(p, n->pos, "no %s named '%s'", n->kind == N_FILTER ? "filter" : "test", n->name);
    bool inner = soft;           /* for the operands and the expression parts */
    bool body = false;           /* bodies of loops, macros and blocks start afresh */
    if (n->kind == N_IF || n->kind == N_COND) inner = body = true;
    bool filter_part = n->kind == N_FOR || n->kind == N_FILTER_BLOCK || n->kind == N_SET_BLOCK || n->kind == N_MACRO;
    const node *kids[4] = {n->a, n->b, n->c, n->d};
    for (int k = 0; k < 4; k++) {
        bool s = inner;
        if (filter_part && k > 0) s = false;       /* a for loop's filter, a block's filter chain */
        if (kids[k] && check_names(p, kids[k], s, depth + 1)) return -1;
    }
    bool args_soft = n->kind == N_MACRO || n->kind == N_CALL_BLOCK ? false : inner;
    return check_list(p, &n->args, args_soft, depth + 1) || check_list(p, &n->kwargs, inner, depth + 1) ||
           check_list(p, &n->body, body, depth + 1) || check_list(p, &n->else_body, body, depth + 1);
}

int tmpl_parse_tree(tmpl *t, nc_err *err) {
    token_list toks = {0};
    int rc = lex_template(t, &toks, err);
    parser p = {.t = t, .tk = toks.v, .n = toks.n, .err = err};
    if (rc == 0) rc = parse_body(&p, &t->body, NULL, NULL, 0);
    if (rc == 0) rc = check_list(&p, &t->body, false, 0);
    free(toks.v);
    return rc;
}
