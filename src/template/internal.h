/* Shared insides of the template engine: values, the syntax tree, the render state and the
 * helpers the files of src/template use from one another. Nothing here is public.
 * The fuzz harness (tests/fuzz/fuzz_template.c) compiles all of src/template as one unit, so
 * static names must not repeat across these files. */
#ifndef NC_TEMPLATE_INTERNAL_H
#define NC_TEMPLATE_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "template/template.h"

/* ---- Arena: the syntax tree and its strings live exactly as long as the template ---------- */
typedef struct arena_chunk arena_chunk;
typedef struct arena {
    arena_chunk *head;
} arena;
void *arena_alloc(arena *a, size_t size); /* zeroed; NULL when out of memory */
char *arena_strndup(arena *a, const char *s, size_t n);
void arena_free(arena *a);

/* ---- Growable byte buffer with an optional size limit --------------------------------------- */
typedef struct sbuf {
    char *data;
    size_t len, cap;
    size_t limit;   /* 0: unlimited */
    bool over;      /* an append failed because of limit (rather than memory) */
} sbuf;
int sbuf_put(sbuf *b, const char *s, size_t n); /* 0, or -1 (out of memory / over limit) */
int sbuf_putc(sbuf *b, char c);
int sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbuf_free(sbuf *b);

/* ---- UTF-8 and the bits of Unicode that Python's str methods need -------------------------- */
/* Decode one code point at s (n > 0 bytes left); an invalid byte decodes as itself, width 1. */
uint32_t utf8_decode(const char *s, size_t n, size_t *width);
size_t utf8_encode(uint32_t cp, char out[4]);
size_t utf8_count(const char *s, size_t n);                  /* code points */
size_t utf8_offset(const char *s, size_t n, size_t index);   /* byte offset of code point index */
bool uni_isspace(uint32_t cp);                               /* Python's str.isspace() */
bool uni_isalpha(uint32_t cp);
bool uni_isdigit(uint32_t cp);
uint32_t uni_upper(uint32_t cp);
uint32_t uni_lower(uint32_t cp);
bool uni_is_linebreak(uint32_t cp);                          /* what str.splitlines() splits on */

/* ---- Values ------------------------------------------------------------------------------ */
typedef enum tv_type {
    TV_UNDEFINED, TV_NONE, TV_BOOL, TV_INT, TV_FLOAT, TV_STRING, TV_LIST, TV_DICT,
    TV_NAMESPACE, TV_LOOP, TV_MACRO, TV_BUILTIN
} tv_type;

/* Ownership of a value, kept in `refs`: a positive count for values a render made (released by
 * tv_decref), TV_CALLER for trees the API caller built (freed by tmpl_value_free), TV_STATIC for
 * singletons and the template's literals (never freed one by one). Renders only read values
 * they do not own, so one context tree may serve several renders at once. */
#define TV_CALLER 0
#define TV_STATIC (-1)

typedef struct tv_entry {
    tmpl_value *key, *val;
} tv_entry;

typedef struct tv_dict {
    tv_entry *ent;
    size_t len, cap;
    uint32_t *index;   /* open-addressing table of entry number + 1; built past a few entries */
    size_t index_cap;
} tv_dict;

typedef struct loop_state loop_state;
typedef struct scope scope;
typedef struct node node;

/* Lists and dicts nest at most this deep, so that printing, comparing and freeing values
 * (all recursive) stay within the stack. Namespaces count as depth 0: they are never walked. */
#define TV_MAX_NEST 256

struct tmpl_value {
    tv_type type;
    int32_t refs;
    uint16_t depth;     /* LIST, DICT: 1 + the deepest list or dict inside */
    union {
        bool b;
        int64_t i;
        double f;
        struct { char *s; size_t len; } str;                 /* STRING; UNDEFINED: why (or NULL) */
        /* lazy: what Python would hand out as a one-pass iterator (the results of map, select,
         * unique, reverse, ...): always true, no length, no indexing, printed as a generator;
         * unhashable: some item is (so a tuple is); kept by tv_list_push */
        struct { tmpl_value **items; size_t len, cap; bool tuple, lazy, unhashable; } list;
        tv_dict dict;                                        /* DICT, NAMESPACE */
        loop_state *loop;
        struct { const node *def; scope *closure; } macro;   /* a macro, or a call block's caller */
        struct { int id; tmpl_value *self; } builtin;       /* a global function or a bound method */
    } u;
};

struct loop_state {
    tmpl_value *items;   /* the list being iterated */
    size_t index;        /* index0 of the current item */
    tmpl_value *last;    /* what loop.changed() saw last (NULL: nothing yet) */
};

extern tmpl_value tv_undefined_static, tv_none_static, tv_true_static, tv_false_static;

typedef struct rt rt;

/* Constructors return a new reference, or NULL with the render's error set (r == NULL builds a
 * caller-owned value, as the public constructors and the JSON reader do). */
tmpl_value *tv_new(rt *r, tv_type type);
tmpl_value *tv_int(rt *r, int64_t i);
tmpl_value *tv_float(rt *r, double f);
tmpl_value *tv_bool(bool b);
tmpl_value *tv_str(rt *r, const char *s, size_t n);
tmpl_value *tv_str2(rt *r, const char *a, size_t n, const char *b, size_t m); /* a and b joined */
tmpl_value *tv_str_take(rt *r, sbuf *b); /* takes b's bytes (b is emptied) */
tmpl_value *tv_str_alloc(rt *r, size_t n); /* n bytes to fill in, charged before they are taken */
tmpl_value *tv_list(rt *r, size_t cap);
tmpl_value *tv_dict_new(rt *r);
tmpl_value *tv_undefined(rt *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int tv_list_push(rt *r, tmpl_value *list, tmpl_value *v);        /* takes v */
int tv_dict_set(rt *r, tmpl_value *dict, tmpl_value *k, tmpl_value *v); /* takes k and v */
/* borrowed, or NULL when absent or (r->failed) when r's budget ran out comparing keys */
tmpl_value *tv_dict_get(rt *r, const tmpl_value *dict, const tmpl_value *key);
tmpl_value *tv_dict_get_str(const tmpl_value *dict, const char *key, size_t n);
tmpl_value *tv_ref(tmpl_value *v);                  /* incref; returns v */
void tv_decref(rt *r, tmpl_value *v);
void tv_free_caller(tmpl_value *v);

static inline bool tv_is_num(const tmpl_value *v) {
    return v->type == TV_INT || v->type == TV_FLOAT || v->type == TV_BOOL;
}
double tv_as_double(const tmpl_value *v); /* INT, FLOAT, BOOL */
bool tv_truthy(const tmpl_value *v);
/* Deep comparisons charge each value visited to r (NULL for caller trees, not charged). */
int tv_equal(rt *r, const tmpl_value *a, const tmpl_value *b); /* 1, 0, -1 past a limit */
/* Python ordering: -1, 0, 1, 2 when the types cannot be ordered, TV_CMP_FAIL past a limit. */
#define TV_CMP_FAIL (-2)
int tv_compare(rt *r, const tmpl_value *a, const tmpl_value *b, bool fold_case);
const char *tv_type_name(const tmpl_value *v); /* Python's type name: 'str', 'int', ... */
bool tv_hashable(const tmpl_value *v);

/* ---- Text forms (repr.c) ----------------------------------------------------------------- */
int tv_write_str(rt *r, sbuf *b, const tmpl_value *v);   /* Python str(), each value a step of r's */
int tv_write_repr(rt *r, sbuf *b, const tmpl_value *v);  /* Python repr(), the same */
tmpl_value *tv_to_str(rt *r, tmpl_value *v);      /* a STRING (v itself when it is one) */
void format_float(double f, char out[40]);        /* Python repr of a float */
typedef struct json_opts {
    const char *indent;        /* NULL: one line */
    const char *item_sep, *key_sep;
    bool sort_keys;
    bool ensure_ascii;         /* non-ASCII as \uXXXX escapes */
} json_opts;
/* Python json.dumps(ensure_ascii=False); -1 with the render's error set. */
int tv_write_json(rt *r, sbuf *b, const tmpl_value *v, const json_opts *o, int depth);
int compare_op(rt *r, int op, tmpl_value *x, tmpl_value *y); /* eval.c: 1, 0, -1 */

/* ---- Syntax tree ------------------------------------------------------------------------- */
typedef enum node_kind {
    /* expressions */
    N_LITERAL, N_NAME, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_NOT, N_NEG, N_POS,
    N_BINARY, N_AND, N_OR, N_COMPARE, N_COND, N_LIST, N_TUPLE, N_DICT,
    /* statements */
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_BLOCK, N_MACRO, N_CALL_BLOCK, N_FILTER_BLOCK,
    N_WITH, N_BREAK, N_CONTINUE
} node_kind;

/* MACRO nodes: which special names the body uses (Jinja accepts extra arguments only then). */
enum { USES_VARARGS = 1, USES_KWARGS = 2, USES_CALLER = 4 };

/* Operators that are more than one character; single-character ones are the character. */
enum { OP_EQ = 256, OP_NE, OP_LE, OP_GE, OP_FLOORDIV, OP_POW, OP_IN, OP_NOTIN };

typedef struct node_list {
    node **v;
    size_t n;
} node_list;

/* One node type for all kinds; the fields each kind uses:
 *   LITERAL, TEXT: lit              NAME: name            ATTR: a.name       ITEM: a[b]
 *   SLICE: a[b:c:d] (any may be NULL)                     CALL: a(args, names=kwargs)
 *   FILTER: a|name(args, names=kwargs), fn = table index (a NULL in filter/set blocks)
 *   TEST: a is [not: op=1] name(args), fn               NOT/NEG/POS: a
 *     (fn is -1 for a filter or test that does not exist: an error if it is ever used) 
 *   BINARY: a op b   AND/OR: a, b   COMPARE: a, then ops[i] args.v[i] ...   COND: b if a else c
 *   LIST/TUPLE: args   DICT: args (keys), kwargs (values)
 *   OUTPUT: a        IF: a, body, else_body
 *   FOR: names (targets; unpack), a (iterable), b (filter or NULL), body, else_body
 *   SET: a.name = b when a (a namespace attribute), else names (unpack) = b
 *   SET_BLOCK: names = body, piped through filter chain c (or NULL)
 *   MACRO: name, names (parameters), args (defaults, NULL entries), body, op (USES_* flags)
 *   CALL_BLOCK: a (the call), names/args (the caller's parameters/defaults), body
 *   FILTER_BLOCK: c (filter chain), body     WITH: names = args, body */
struct node {
    node_kind kind;
    int op;
    int fn;
    size_t pos;           /* byte offset in the template, for messages */
    const char *name;
    node *a, *b, *c, *d;
    node_list args, kwargs;
    const char **names;
    size_t n_names;
    bool unpack;
    int *ops;
    node_list body, else_body;
    tmpl_value lit;
};

struct tmpl {
    arena arena;
    char *src;            /* newline-normalised source, for line:column in messages */
    size_t len;
    node_list body;
};

int tmpl_parse_tree(tmpl *t, nc_err *err);                       /* parser.c */
void pos_to_line_col(const tmpl *t, size_t pos, int *line, int *col);

/* ---- Lexer ------------------------------------------------------------------------------- */
typedef enum tok_type {
    T_EOF, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT,
    T_FLOAT, T_OP
} tok_type;

typedef struct token {
    tok_type type;
    int op;
    size_t pos;
    const char *s;   /* TEXT, NAME: into the source; STRING: decoded, in the arena */
    size_t len;
    int64_t i;
    double f;
} token;

typedef struct token_list {
    token *v;
    size_t n, cap;
} token_list;
int lex_template(tmpl *t, token_list *out, nc_err *err);

/* ---- Render state ------------------------------------------------------------------------ */
typedef struct var {
    const char *name;
    tmpl_value *val;
} var;

/* A scope holds the variables of the template's top level, a loop iteration, a macro call or a
 * with block. A macro keeps a pointer to the scope it was defined in (its closure): such a
 * scope and its ancestors are `captured`, only emptied when left and freed when the render
 * ends; other scopes are freed when left. */
struct scope {
    scope *parent;
    scope *next_kept;
    var *vars;
    size_t n, cap;
    bool captured;
};

struct rt {
    const tmpl *t;
    const tmpl_value *context;
    tmpl_limits lim;
    bool failed;        /* msg holds the error */
    bool located;       /* ... and it names a template position already */
    char msg[NC_ERR_MAX];
    scope *scope;       /* where names are looked up and set now */
    sbuf *out;          /* the template's output, or a macro's, a set block's */
    size_t out_charged; /* bytes of *out charged to the memory budgets */
    size_t mem;         /* bytes held by values this render made */
    uint64_t steps;
    uint64_t next_check; /* steps at which the clock and the cancel flag are looked at next */
    double deadline;     /* CLOCK_MONOTONIC seconds; 0: none */
    double next_gone;    /* when lim.gone is asked next (CLOCK_MONOTONIC seconds) */
    int depth;
    scope *kept;        /* captured scopes that were left, freed at the end */
    tmpl_value **namespaces; /* every namespace, emptied at the end to break reference cycles */
    size_t n_ns, cap_ns;
};

int rt_fail(rt *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int rt_fail_at(rt *r, const node *n); /* add n's position to a pending message; returns -1 */
int rt_charge(rt *r, size_t bytes);   /* memory and steps for an allocation; -1 past a limit */
void rt_refund(rt *r, size_t bytes);
/* What a render may still take (of its own budget and the shared one): the limit of the buffers
 * it builds text in, so that they stay within the budgets before they are charged as strings. */
size_t rt_mem_left(const rt *r);
int rt_step(rt *r);                   /* one unit of work; -1 past a limit (steps, time, cancel, gone) */
int rt_steps(rt *r, uint64_t n);      /* n units: elements visited, compared or copied */
int rt_work(rt *r, size_t bytes);     /* steps for scanning `bytes` without allocating */
int rt_decode(rt *r, size_t bytes);   /* steps for decoding `bytes` of UTF-8 */
int rt_out(rt *r, const char *s, size_t n);

/* Calls: positional values and keyword values, all borrowed. */
typedef struct call_args {
    tmpl_value **pos;
    size_t npos;
    const char **names;
    tmpl_value **kw;
    size_t nkw;
} call_args;
/* Match args to parameter names (NULL-terminated); out[i] is the value or NULL (borrowed). */
int bind_args(rt *r, const char *fname, const call_args *a, const char *const *params,
              tmpl_value **out);

/* eval.c */
tmpl_value *eval(rt *r, const node *n);
tmpl_value *eval_getattr(rt *r, tmpl_value *obj, const char *name, size_t len);
tmpl_value *eval_getitem(rt *r, tmpl_value *obj, tmpl_value *key);
tmpl_value *call_value(rt *r, tmpl_value *callee, const call_args *a);
tmpl_value *to_list(rt *r, tmpl_value *v); /* iteration: list items, dict keys, characters */
tmpl_value *lookup_name(rt *r, const char *name);
tmpl_value *eval_filter_chain(rt *r, const node *f, tmpl_value *base); /* filter/set blocks */
int fail_undefined(rt *r, const tmpl_value *u, const char *what);      /* using u's message */
int binary_op(rt *r, int op, tmpl_value *x, tmpl_value *y, tmpl_value **out);
int contains(rt *r, tmpl_value *container, tmpl_value *item); /* 1, 0, -1 */

/* exec.c */
enum { EXEC_OK = 0, EXEC_BREAK = 1, EXEC_CONTINUE = 2 }; /* or -1 for an error */
int exec_body(rt *r, const node_list *body);
tmpl_value *call_macro(rt *r, tmpl_value *macro, const call_args *a, tmpl_value *caller);
scope *scope_new(rt *r, scope *parent);
void scope_leave(rt *r, scope *s);
int scope_set(rt *r, scope *s, const char *name, tmpl_value *v); /* takes v */
tmpl_value *scope_get(const scope *s, const char *name);         /* borrowed; s and its parents */
int track_namespace(rt *r, tmpl_value *ns);                      /* for the end-of-render sweep */

/* builtins.c: global functions and methods of strings, dicts, lists and loops */
enum {
    BI_RANGE, BI_DICT, BI_NAMESPACE, BI_RAISE, BI_STRFTIME, BI_GLOBAL_END,
};
extern tmpl_value tv_global_fns[BI_GLOBAL_END];
int builtin_global(const char *name);
int builtin_method(const tmpl_value *self, const char *name, size_t len); /* id or -1 */
bool builtin_unsafe(const tmpl_value *self, const char *name, size_t len); /* list.append, ... */
tmpl_value *dict_items_list(rt *r, tmpl_value *d);                           /* [(k, v), ...] */
const char *builtin_name(int id);
tmpl_value *call_builtin(rt *r, tmpl_value *fn, const call_args *a);

/* filters.c and tests.c */
int filter_lookup(const char *name, size_t len);
tmpl_value *apply_filter(rt *r, int fn, tmpl_value *v, const call_args *a);
int test_lookup(const char *name, size_t len);
int apply_test(rt *r, int fn, tmpl_value *v, const call_args *a); /* 1, 0, -1 */

/* strings.c: Python str behaviour shared by methods and filters */
tmpl_value *str_strip(rt *r, tmpl_value *s, tmpl_value *chars, bool left, bool right);
tmpl_value *str_case(rt *r, tmpl_value *s, int how);
enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE, CASE_SWAP, CASE_JINJA_TITLE };
tmpl_value *str_replace(rt *r, tmpl_value *s, tmpl_value *old, tmpl_value *new_, int64_t count);
tmpl_value *str_split(rt *r, tmpl_value *s, tmpl_value *sep, int64_t maxsplit, bool from_right);
tmpl_value *str_splitlines(rt *r, tmpl_value *s, bool keepends);
tmpl_value *str_join(rt *r, tmpl_value *sep, tmpl_value *items, bool convert); /* convert: str() non-strings */
/* Byte offsets of q in p: the first (linear), the last (charged to r); -1 when absent,
 * STR_FIND_FAIL past r's budget. */
#define STR_FIND_FAIL (-2)
long str_find_bytes(const char *p, size_t n, const char *q, size_t k);
long str_rfind_bytes(rt *r, const char *p, size_t n, const char *q, size_t k);
int64_t str_find(rt *r, tmpl_value *s, tmpl_value *sub, bool from_right); /* code point index, -1, or STR_FIND_FAIL */
int64_t str_count(tmpl_value *s, tmpl_value *sub);
tmpl_value *str_slice_cp(rt *r, tmpl_value *s, size_t from, size_t to); /* code points */
/* Python's fmt % values: values a tuple (several), a dict (%(name)s), or one value. */
tmpl_value *str_printf(rt *r, tmpl_value *fmt, tmpl_value *values);

#endif
