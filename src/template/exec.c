/* Statements, scopes, macros, the render state and its limits, and the render entry points. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/internal.h"

/* ---- Errors and limits -------------------------------------------------------------------- */
int rt_fail(rt *r, const char *fmt, ...) {
    if (r->failed) return -1; /* the first (innermost) message is the useful one */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    r->failed = true;
    return -1;
}

int rt_fail_at(rt *r, const node *n) {
    if (!r->failed) rt_fail(r, "internal error");
    if (r->located) return -1;
    int line, col;
    pos_to_line_col(r->t, n->pos, &line, &col);
    char msg[sizeof r->msg + 64];
    snprintf(msg, sizeof msg, "template:%d:%d: %s", line, col, r->msg);
    size_t len = strlen(msg);
    if (len >= sizeof r->msg) len = sizeof r->msg - 1; /* cut an overlong message */
    memcpy(r->msg, msg, len);
    r->msg[len] = 0;
    r->located = true;
    return -1;
}

/* The clock and the cancel flag are looked at once per this many steps (about 0.2 ms); lim.gone
 * (a system call, for a server) only once TMPL_GONE_EVERY seconds have passed since it was last. */
#define CHECK_EVERY 4096

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Every operation whose work grows with its input charges steps in proportion (a repetition its
 * result, a comparison the elements it visits, a sort its comparisons), so the step count, and
 * with it the time and the cancel flag, are looked at no matter what the template does. */
int rt_steps(rt *r, uint64_t n) {
    r->steps = n > UINT64_MAX - r->steps ? UINT64_MAX : r->steps + n;
    if (r->steps > r->lim.max_steps)
        return rt_fail(r, "the render exceeded its step budget (%llu evaluation steps)",
                       (unsigned long long)r->lim.max_steps);
    if (r->steps < r->next_check) return 0;
    r->next_check = r->steps + CHECK_EVERY;
    if (r->lim.cancel && atomic_load_explicit(r->lim.cancel, memory_order_relaxed))
        return rt_fail(r, "the render was cancelled");
    if (r->deadline <= 0 && !r->lim.gone) return 0;
    double now = now_seconds();
    if (r->deadline > 0 && now > r->deadline)
        return rt_fail(r, "the render exceeded its time budget (%g s)", r->lim.max_seconds);
    if (r->lim.gone && now >= r->next_gone) {
        if (r->lim.gone(r->lim.gone_user)) return rt_fail(r, "the render was abandoned");
        r->next_gone = now + TMPL_GONE_EVERY;
    }
    return 0;
}

int rt_step(rt *r) { return rt_steps(r, 1); }

/* A step stands for about 50 ns: an expression, a loop iteration, an element visited, or 16
 * bytes of text made or scanned (large allocations cost page faults, decoding UTF-8 costs more
 * than copying). */
int rt_work(rt *r, size_t bytes) { return rt_steps(r, bytes / 16 + 1); }

/* Text read a code point at a time (case tests, strip sets, Unicode classes) costs about four
 * times as much per byte as copying it. */
int rt_decode(rt *r, size_t bytes) { return rt_steps(r, bytes / 4 + 1); }

/* ---- Memory: each render's own budget, and one shared by all the renders of the process ---- */
static _Atomic size_t global_mem_limit = 512u << 20;
static _Atomic size_t global_mem_used; /* the sum of r->mem over the renders running now */

void tmpl_set_global_memory_limit(size_t bytes) { atomic_store(&global_mem_limit, bytes); }
size_t tmpl_global_memory_in_use(void) { return atomic_load(&global_mem_used); }

int rt_charge(rt *r, size_t bytes) {
    if (bytes > r->lim.max_memory || r->mem > r->lim.max_memory - bytes)
        return rt_fail(r, "the render exceeded its memory budget (%zu bytes)", r->lim.max_memory);
    size_t limit = atomic_load(&global_mem_limit);
    size_t before = atomic_fetch_add(&global_mem_used, bytes);
    if (bytes > limit || before > limit - bytes) {
        atomic_fetch_sub(&global_mem_used, bytes);
        return rt_fail(r, "the renders running at once exceeded their shared memory budget (%zu bytes)", limit);
    }
    r->mem += bytes;
    if (rt_work(r, bytes)) {
        rt_refund(r, bytes);
        return -1;
    }
    return 0;
}

size_t rt_mem_left(const rt *r) {
    size_t own = r->lim.max_memory - r->mem, limit = atomic_load(&global_mem_limit), used = atomic_load(&global_mem_used);
    size_t shared = used < limit ? limit - used : 0, left = own < shared ? own : shared;
    return left ? left : 1; /* (an sbuf limit of 0 would mean none) */
}

void rt_refund(rt *r, size_t bytes) {
    if (bytes > r->mem) bytes = r->mem;
    r->mem -= bytes;
    atomic_fetch_sub(&global_mem_used, bytes);
}

/* Output is held in memory too (the template's, and a macro's or a block's until it becomes a
 * string): its bytes are charged like values', to the render's budget and the shared one. */
int rt_out(rt *r, const char *s, size_t n) {
    if (rt_charge(r, n)) return -1;
    r->out_charged += n;
    if (!sbuf_put(r->out, s, n)) return 0;
    if (r->out->over) return rt_fail(r, "output longer than %zu bytes", r->lim.max_output);
    return rt_fail(r, "out of memory");
}

/* ---- Scopes ------------------------------------------------------------------------------- */
scope *scope_new(rt *r, scope *parent) {
    scope *s = calloc(1, sizeof *s);
    if (!s) {
        rt_fail(r, "out of memory");
        return NULL;
    }
    s->parent = parent;
    return s;
}

static void scope_clear(rt *r, scope *s) {
    for (size_t i = 0; i < s->n; i++) tv_decref(r, s->vars[i].val);
    s->n = 0;
}

static void scope_destroy(rt *r, scope *s) {
    scope_clear(r, s);
    rt_refund(r, s->cap * sizeof *s->vars);
    free(s->vars);
    free(s);
}

/* A macro defined in s may outlive it: keep s and its ancestors until the render ends. */
static int scope_capture(rt *r, scope *s) {
    for (; s && !s->captured; s = s->parent) {
        if (rt_charge(r, sizeof *s)) return -1; /* kept to the end: count it, never refund */
        s->captured = true;
    }
    return 0;
}

void scope_leave(rt *r, scope *s) {
    if (!s) return;
    if (!s->captured) {
        scope_destroy(r, s);
        return;
    }
    scope_clear(r, s);
    s->next_kept = r->kept;
    r->kept = s;
}

int scope_set(rt *r, scope *s, const char *name, tmpl_value *v) {
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(s->vars[i].name, name)) continue;
        tv_decref(r, s->vars[i].val);
        s->vars[i].val = v;
        return 0;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        var *nv = NULL;
        if (!rt_charge(r, (cap - s->cap) * sizeof *nv)) nv = realloc(s->vars, cap * sizeof *nv);
        if (!nv) {
            tv_decref(r, v);
            return rt_fail(r, "out of memory");
        }
        s->vars = nv;
        s->cap = cap;
    }
    s->vars[s->n++] = (var){name, v};
    return 0;
}

tmpl_value *scope_get(const scope *s, const char *name) {
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (!strcmp(s->vars[i].name, name)) return s->vars[i].val;
    return NULL;
}

int track_namespace(rt *r, tmpl_value *ns) {
    if (r->n_ns == r->cap_ns) {
        size_t cap = r->cap_ns ? r->cap_ns * 2 : 8;
        tmpl_value **v = NULL;
        if (!rt_charge(r, (cap - r->cap_ns) * sizeof *v)) v = realloc(r->namespaces, cap * sizeof *v);
        if (!v) return rt_fail(r, "out of memory");
        r->namespaces = v;
        r->cap_ns = cap;
    }
    r->namespaces[r->n_ns++] = tv_ref(ns);
    return 0;
}

/* ---- Assignment --------------------------------------------------------------------------- */
/* Bind names to v (taken): one name, or several unpacked from a sequence. */
static int assign_names(rt *r, scope *s, const char *const *names, size_t n, bool unpack, tmpl_value *v) {
    if (!unpack) return scope_set(r, s, names[0], v);
    if (v->type != TV_LIST && v->type != TV_DICT && v->type != TV_STRING) {
        rt_fail(r, "cannot unpack non-iterable %s object", tv_type_name(v));
        tv_decref(r, v);
        return -1;
    }
    tmpl_value *items = to_list(r, v);
    tv_decref(r, v);
    if (!items) return -1;
    int rc = 0;
    if (items->u.list.len != n) {
        rc = items->u.list.len > n ? rt_fail(r, "too many values to unpack (expected %zu)", n)
                                   : rt_fail(r, "not enough values to unpack (expected %zu, got %zu)", n, items->u.list.len);
    }
    for (size_t i = 0; i < n && !rc; i++) rc = scope_set(r, s, names[i], tv_ref(items->u.list.items[i]));
    tv_decref(r, items);
    return rc;
}

static int assign(rt *r, const node *n, tmpl_value *v) {
    if (!n->a) return assign_names(r, r->scope, n->names, n->n_names, n->unpack, v);
    tmpl_value *ns = scope_get(r->scope, n->a->name);
    if (!ns && r->context) ns = tv_dict_get_str(r->context, n->a->name, strlen(n->a->name));
    if (!ns || ns->type != TV_NAMESPACE) {
        tv_decref(r, v);
        return rt_fail(r, "cannot assign attribute on non-namespace object '%s'", n->a->name);
    }
    tmpl_value *key = tv_str(r, n->name, strlen(n->name));
    if (!key) {
        tv_decref(r, v);
        return -1;
    }
    return tv_dict_set(r, ns, key, v);
}

/* ---- Output capture (macros, set blocks, filter blocks) ------------------------------------ */
/* Run body with its output going to a fresh string (*out); returns exec_body's code. */
static int capture(rt *r, const node_list *body, tmpl_value **out) {
    sbuf buf = {.limit = r->lim.max_output};
    sbuf *saved = r->out;
    size_t saved_charged = r->out_charged;
    r->out = &buf;
    r->out_charged = 0;
    int rc = exec_body(r, body);
    rt_refund(r, r->out_charged); /* the string made of it is charged in its place */
    r->out = saved;
    r->out_charged = saved_charged;
    if (rc < 0) {
        sbuf_free(&buf);
        return -1;
    }
    *out = tv_str_take(r, &buf);
    return *out ? rc : -1;
}

static int write_output(rt *r, const tmpl_value *v) {
    if (v->type == TV_STRING) return rt_out(r, v->u.str.s, v->u.str.len);
    size_t before = r->out->len;
    int rc = tv_write_str(r, r->out, v); /* straight into the output: at most max_output bytes */
    size_t n = r->out->len - before;
    if (rt_charge(r, n)) return -1;   /* (charged once written, as the length is known then) */
    r->out_charged += n;
    if (!rc) return 0;
    if (r->out->over) return rt_fail(r, "output longer than %zu bytes", r->lim.max_output);
    return rt_fail(r, "out of memory");
}

/* ---- Macros ------------------------------------------------------------------------------- */
static tmpl_value *keyword(const call_args *a, const char *name) {
    for (size_t i = 0; i < a->nkw; i++)
        if (!strcmp(a->names[i], name)) return a->kw[i];
    return NULL;
}

static bool is_param(const node *def, const char *name) {
    for (size_t i = 0; i < def->n_names; i++)
        if (!strcmp(def->names[i], name)) return true;
    return false;
}

/* Bind a macro's parameters in s: positional, keyword, default, else undefined. Extra
 * positional arguments go to `varargs` and extra keyword ones to `kwargs`; as in Jinja, they are
 * an error unless the macro's body uses those names. */
static int bind_params(rt *r, scope *s, const node *def, const call_args *a, const tmpl_value *caller) {
    const char *mname = def->name ? def->name : "caller";
    if (caller && !(def->op & USES_CALLER))
        return rt_fail(r, "macro '%s' was invoked with two values for the special caller argument", mname);
    if (a->npos > def->n_names && !(def->op & USES_VARARGS))
        return rt_fail(r, "macro '%s' takes not more than %zu argument(s)", mname, def->n_names);
    for (size_t i = 0; i < a->nkw; i++)
        if (!is_param(def, a->names[i]) && !(def->op & USES_KWARGS))
            return rt_fail(r, "macro '%s' takes no keyword argument '%s'", mname, a->names[i]);
    for (size_t i = 0; i < def->n_names; i++) {
        const char *name = def->names[i];
        if (i < a->npos && keyword(a, name)) return rt_fail(r, "macro '%s' got multiple values for argument '%s'", mname, name);
        tmpl_value *v = i < a->npos ? tv_ref(a->pos[i]) : tv_ref(keyword(a, name));
        if (!v && def->args.v[i]) v = eval(r, def->args.v[i]); /* defaults may use earlier parameters */
        else if (!v) v = tv_undefined(r, "parameter '%s' was not provided", name);
        if (!v || scope_set(r, s, name, v)) return -1;
    }
    tmpl_value *varargs = tv_list(r, 0), *kwargs = varargs ? tv_dict_new(r) : NULL;
    if (!kwargs) {
        tv_decref(r, varargs);
        return -1;
    }
    varargs->u.list.tuple = true;
    int rc = 0;
    for (size_t i = def->n_names; i < a->npos && !rc; i++) rc = tv_list_push(r, varargs, tv_ref(a->pos[i]));
    for (size_t i = 0; i < a->nkw && !rc; i++) {
        if (is_param(def, a->names[i])) continue;
        tmpl_value *k = tv_str(r, a->names[i], strlen(a->names[i]));
        rc = k ? tv_dict_set(r, kwargs, k, tv_ref(a->kw[i])) : -1;
    }
    if (rc) {
        tv_decref(r, varargs);
        tv_decref(r, kwargs);
        return -1;
    }
    if (scope_set(r, s, "varargs", varargs)) {
        tv_decref(r, kwargs);
        return -1;
    }
    return scope_set(r, s, "kwargs", kwargs);
}

tmpl_value *call_macro(rt *r, tmpl_value *macro, const call_args *a, tmpl_value *caller) {
    const node *def = macro->u.macro.def;
    if (rt_step(r)) return NULL;
    scope *s = scope_new(r, macro->u.macro.closure);
    if (!s) return NULL;
    scope *saved = r->scope;
    r->scope = s;
    tmpl_value *out = NULL;
    if (!bind_params(r, s, def, a, caller) && (!caller || !scope_set(r, s, "caller", tv_ref(caller))))
        capture(r, &def->body, &out);
    r->scope = saved;
    scope_leave(r, s);
    return out;
}

/* ---- Statements --------------------------------------------------------------------------- */
static int exec_for_items(rt *r, const node *n, tmpl_value *items, bool *completed);

/* The items of a for loop after its `if` filter (which sees the loop variables, not `loop`). */
static tmpl_value *loop_items(rt *r, const node *n, tmpl_value *iterable) {
    tmpl_value *all = to_list(r, iterable);
    if (!all || !n->b) return all;
    tmpl_value *kept = tv_list(r, 0);
    scope *s = kept ? scope_new(r, r->scope) : NULL;
    if (!s) {
        tv_decref(r, all);
        tv_decref(r, kept);
        return NULL;
    }
    scope *saved = r->scope;
    r->scope = s;
    int rc = 0;
    for (size_t i = 0; i < all->u.list.len && !rc; i++) {
        tmpl_value *item = all->u.list.items[i];
        rc = rt_step(r);
        if (!rc) rc = assign_names(r, s, n->names, n->n_names, n->unpack, tv_ref(item));
        tmpl_value *c = rc ? NULL : eval(r, n->b);
        if (!c) rc = -1;
        else if (tv_truthy(c)) rc = tv_list_push(r, kept, tv_ref(item));
        tv_decref(r, c);
        scope_clear(r, s);
    }
    r->scope = saved;
    scope_leave(r, s);
    tv_decref(r, all);
    if (rc) {
        tv_decref(r, kept);
        return NULL;
    }
    return kept;
}

/* Run a body in a fresh scope below the current one. */
static int exec_scoped(rt *r, const node_list *body) {
    scope *s = scope_new(r, r->scope);
    if (!s) return -1;
    scope *saved = r->scope;
    r->scope = s;
    int rc = exec_body(r, body);
    r->scope = saved;
    scope_leave(r, s);
    return rc;
}

/* The else branch runs when no iteration reached the end of the loop body: for an empty loop,
 * and also (as in Jinja2, whose generated code marks an iteration done at the end of its body)
 * when every iteration ended in break or continue. */
static int exec_for(rt *r, const node *n) {
    tmpl_value *iterable = eval(r, n->a);
    if (!iterable) return -1;
    tmpl_value *items = loop_items(r, n, iterable);
    tv_decref(r, iterable);
    if (!items) return -1;
    bool completed = false;
    int rc = items->u.list.len ? exec_for_items(r, n, items, &completed) : EXEC_OK;
    tv_decref(r, items);
    if (rc < 0 || completed || !n->else_body.n) return rc;
    return exec_scoped(r, &n->else_body); /* break / continue here belong to an enclosing loop */
}

/* Each iteration gets fresh variables (Jinja: a {% set %} in a loop body lasts one iteration). */
static int exec_for_items(rt *r, const node *n, tmpl_value *items, bool *completed) {
    scope *s = scope_new(r, r->scope);
    tmpl_value *loop = s ? tv_new(r, TV_LOOP) : NULL;
    loop_state *st = NULL;
    if (loop && !rt_charge(r, sizeof *st)) st = calloc(1, sizeof *st);
    if (!st) {
        if (loop) rt_fail(r, "out of memory");
        tv_decref(r, loop);
        scope_leave(r, s);
        return -1;
    }
    st->items = tv_ref(items);
    loop->u.loop = st;
    scope *saved = r->scope;
    r->scope = s;
    int rc = EXEC_OK;
    for (size_t i = 0; i < items->u.list.len; i++) {
        st->index = i;
        scope_clear(r, s);
        if (rt_step(r) || scope_set(r, s, "loop", tv_ref(loop)) ||
            assign_names(r, s, n->names, n->n_names, n->unpack, tv_ref(items->u.list.items[i]))) {
            rc = -1;
            break;
        }
        rc = exec_body(r, &n->body);
        if (rc == EXEC_OK) *completed = true;
        if (rc < 0 || rc == EXEC_BREAK) break;
        rc = EXEC_OK;
    }
    r->scope = saved;
    scope_leave(r, s);
    tv_decref(r, loop);
    return rc < 0 ? -1 : EXEC_OK;
}

static int exec_call_block(rt *r, const node *n) {
    const node *call = n->a;
    tmpl_value *callee = eval(r, call->a);
    if (!callee) return -1;
    int rc = -1;
    if (callee->type != TV_MACRO) {
        rt_fail(r, "a call block can only call a macro, not a %s", tv_type_name(callee));
        tv_decref(r, callee);
        return -1;
    }
    tmpl_value *caller = tv_new(r, TV_MACRO);
    tmpl_value **vals = caller ? calloc(call->args.n + call->kwargs.n + 1, sizeof *vals) : NULL;
    if (caller && !vals) rt_fail(r, "out of memory");
    size_t got = 0, total = call->args.n + call->kwargs.n;
    if (vals && scope_capture(r, r->scope)) {
        free(vals);
        vals = NULL;
    }
    if (vals) {
        caller->u.macro.def = n;
        caller->u.macro.closure = r->scope;
        for (; got < total; got++) {
            const node *e = got < call->args.n ? call->args.v[got] : call->kwargs.v[got - call->args.n];
            if (!(vals[got] = eval(r, e))) break;
        }
    }
    if (vals && got == total) {
        call_args a = {vals, call->args.n, call->names, vals + call->args.n, call->kwargs.n};
        tmpl_value *out = call_macro(r, callee, &a, caller);
        rc = out ? write_output(r, out) : -1;
        tv_decref(r, out);
    }
    for (size_t i = 0; i < got; i++) tv_decref(r, vals[i]);
    free(vals);
    tv_decref(r, caller);
    tv_decref(r, callee);
    return rc;
}

static int exec_with(rt *r, const node *n) {
    scope *s = scope_new(r, r->scope);
    if (!s) return -1;
    scope *saved = r->scope;
    int rc = 0;
    for (size_t i = 0; i < n->n_names && !rc; i++) {
        tmpl_value *v = eval(r, n->args.v[i]); /* in the outer scope, as Jinja does */
        rc = v ? scope_set(r, s, n->names[i], v) : -1;
    }
    if (!rc) {
        r->scope = s;
        rc = exec_body(r, &n->body);
        r->scope = saved;
    }
    scope_leave(r, s);
    return rc;
}

/* {% set x %}...{% endset %} and {% filter f %}...{% endfilter %}. */
static int exec_captured(rt *r, const node *n) {
    tmpl_value *text;
    int rc = capture(r, &n->body, &text);
    if (rc < 0) return -1;
    if (n->c) {
        tmpl_value *filtered = eval_filter_chain(r, n->c, text);
        tv_decref(r, text);
        if (!filtered) return -1;
        text = filtered;
    }
    if (n->kind == N_SET_BLOCK) return assign_names(r, r->scope, n->names, n->n_names, false, text) ? -1 : rc;
    int wrc = write_output(r, text);
    tv_decref(r, text);
    return wrc ? -1 : rc;
}

static int exec_node(rt *r, const node *n) {
    tmpl_value *v;
    int rc;
    switch (n->kind) {
    case N_TEXT: return rt_out(r, n->lit.u.str.s, n->lit.u.str.len);
    case N_OUTPUT:
        if (!(v = eval(r, n->a))) return -1;
        rc = write_output(r, v);
        tv_decref(r, v);
        return rc;
    case N_IF:
        if (!(v = eval(r, n->a))) return -1;
        rc = tv_truthy(v);
        tv_decref(r, v);
        return exec_body(r, rc ? &n->body : &n->else_body);
    case N_FOR: return exec_for(r, n);
    case N_SET:
        if (!(v = eval(r, n->b))) return -1;
        return assign(r, n, v);
    case N_SET_BLOCK:
    case N_FILTER_BLOCK: return exec_captured(r, n);
    case N_MACRO:
        if (scope_capture(r, r->scope) || !(v = tv_new(r, TV_MACRO))) return -1;
        v->u.macro.def = n;
        v->u.macro.closure = r->scope;
        return scope_set(r, r->scope, n->name, v);
    case N_CALL_BLOCK: return exec_call_block(r, n);
    case N_WITH: return exec_with(r, n);
    case N_BREAK: return EXEC_BREAK;
    case N_CONTINUE: return EXEC_CONTINUE;
    default: return rt_fail(r, "not a statement");
    }
}

int exec_body(rt *r, const node_list *body) {
    if (r->depth >= r->lim.max_depth) return rt_fail(r, "blocks or calls nested deeper than %d", r->lim.max_depth);
    r->depth++;
    int rc = EXEC_OK;
    for (size_t i = 0; i < body->n && rc == EXEC_OK; i++) {
        rc = exec_node(r, body->v[i]);
        if (rc < 0) rt_fail_at(r, body->v[i]);
    }
    r->depth--;
    return rc;
}

/* ---- Rendering ---------------------------------------------------------------------------- */
void tmpl_limits_default(tmpl_limits *lim) {
    lim->max_output = 16u << 20;
    lim->max_memory = 256u << 20;
    lim->max_steps = 20000000;
    lim->max_depth = 400;
    lim->max_seconds = 10;
    lim->cancel = NULL;
    lim->gone = NULL;
    lim->gone_user = NULL;
}

/* Free everything a render made: namespaces first emptied (they may hold one another), then
 * every scope. */
static void rt_release(rt *r) {
    for (size_t i = 0; i < r->n_ns; i++) {
        tmpl_value *ns = r->namespaces[i];
        tv_entry *ent = ns->u.dict.ent;
        size_t n = ns->u.dict.len;
        ns->u.dict.len = 0;
        for (size_t k = 0; k < n; k++) {
            tv_decref(r, ent[k].key);
            tv_decref(r, ent[k].val);
        }
    }
    for (size_t i = 0; i < r->n_ns; i++) tv_decref(r, r->namespaces[i]);
    free(r->namespaces);
    for (scope *s = r->kept, *next; s; s = next) {
        next = s->next_kept;
        scope_destroy(r, s);
    }
}

int tmpl_render_limits(const tmpl *t, const tmpl_value *context, const tmpl_limits *lim, char **out,
                       size_t *out_len, nc_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (context && context->type != TV_DICT) return nc_fail(err, "template context must be a dict");
    rt r = {.t = t, .context = context, .lim = *lim, .next_check = CHECK_EVERY};
    if (lim->max_seconds > 0) r.deadline = now_seconds() + lim->max_seconds;
    if (lim->gone) r.next_gone = now_seconds() + TMPL_GONE_EVERY;
    sbuf buf = {.limit = lim->max_output};
    r.out = &buf;
    int rc = -1;
    scope *root = scope_new(&r, NULL);
    if ((r.scope = root)) rc = exec_body(&r, &t->body);
    scope_leave(&r, root);
    rt_release(&r);
    rt_refund(&r, r.mem); /* whatever the render still held leaves the shared budget */
    if (rc < 0) {
        sbuf_free(&buf);
        return nc_fail(err, "%s", r.msg);
    }
    if (!buf.data && sbuf_put(&buf, "", 0)) return nc_fail(err, "out of memory");
    *out = buf.data;
    if (out_len) *out_len = buf.len;
    return 0;
}

int tmpl_render(const tmpl *t, const tmpl_value *context, char **out, size_t *out_len, nc_err *err) {
    tmpl_limits lim;
    tmpl_limits_default(&lim);
    return tmpl_render_limits(t, context, &lim, out, out_len, err);
}

/* ---- Parsing entry ------------------------------------------------------------------------ */
/* Jinja reads the source with universal newlines (\r\n and \r become \n) and, without
 * keep_trailing_newline, drops one newline at the very end. */
static char *normalise_source(const char *src, size_t len, size_t *out_len) {
    char *s = malloc(len + 1);
    if (!s) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    *out_len = n;
    return s;
}

int tmpl_parse(tmpl **out, const char *src, size_t len, nc_err *err) {
    *out = NULL;
    if (len > UINT32_MAX) return nc_fail(err, "template larger than 4 GiB");
    tmpl *t = calloc(1, sizeof *t);
    if (!t || !(t->src = normalise_source(src ? src : "", src ? len : 0, &t->len))) {
        free(t);
        return nc_fail(err, "out of memory");
    }
    if (tmpl_parse_tree(t, err)) {
        tmpl_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void tmpl_free(tmpl *t) {
    if (!t) return;
    arena_free(&t->arena);
    free(t->src);
    free(t);
}
