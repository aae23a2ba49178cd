/* Text forms of values, as Python writes them: str(), repr(), float repr and json.dumps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/internal.h"

/* Python's repr(float): the shortest digits that read back to the same double, in positional
 * notation when the decimal exponent is in [-4, 16), scientific otherwise. */
void format_float(double f, char out[40]) {
    if (isnan(f)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(out, f < 0 ? "-inf" : "inf");
        return;
    }
    char sci[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(sci, sizeof sci, "%.*e", prec - 1, f);
        if (strtod(sci, NULL) == f) break;
    }
    /* sci is [-]d[.ddd]e[+-]XX: collect the digits and the exponent */
    char digits[24];
    size_t nd = 0;
    const char *p = sci;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = out;
    if (neg) *o++ = '-';
    if (exp10 < -4 || exp10 >= 16) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, nd - 1);
            o += nd - 1;
        }
        sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
        return;
    }
    if (exp10 < 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = -1; i > exp10; i--) *o++ = '0';
        memcpy(o, digits, nd);
        o += nd;
    } else {
        size_t int_digits = (size_t)exp10 + 1;
        for (size_t i = 0; i < int_digits; i++) *o++ = i < nd ? digits[i] : '0';
        *o++ = '.';
        if (nd > int_digits) {
            memcpy(o, digits + int_digits, nd - int_digits);
            o += nd - int_digits;
        } else {
            *o++ = '0';
        }
    }
    *o = 0;
}

/* Python's repr of a string: single quotes unless the text has ' and no ". */
static int write_str_repr(sbuf *b, const char *s, size_t n) {
    bool has_single = memchr(s, '\'', n) != NULL, has_double = memchr(s, '"', n) != NULL;
    char q = has_single && !has_double ? '"' : '\'';
    if (sbuf_putc(b, q)) return -1;
    size_t w;
    for (size_t i = 0; i < n; i += w) {
        uint32_t c = utf8_decode(s + i, n - i, &w);
        int rc;
        if (c == (uint32_t)q || c == '\\') rc = sbuf_printf(b, "\\%c", (char)c);
        else if (c == '\n') rc = sbuf_put(b, "\\n", 2);
        else if (c == '\r') rc = sbuf_put(b, "\\r", 2);
        else if (c == '\t') rc = sbuf_put(b, "\\t", 2);
        else if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || (w == 1 && c >= 0x80)) rc = sbuf_printf(b, "\\x%02x", c);
        else rc = sbuf_put(b, s + i, w);
        if (rc) return -1;
    }
    return sbuf_putc(b, q);
}

/* Namespaces may hold themselves (or each other, without bound): a namespace already being
 * written, or one nested too deeply, is written as Python writes a recursive dict, {...}. */
#define NS_PRINT_MAX 32
/* Lists nest at most TV_MAX_NEST deep, but namespaces between them could stack those up: past
 * this depth a container is written as "...". */
#define PRINT_MAX_DEPTH (TV_MAX_NEST + 64)

typedef struct print_guard {
    const tmpl_value *open[NS_PRINT_MAX];
    int n, depth;
    rt *r;                 /* charged a step per value and the bytes of its strings */
} print_guard;

static int write_value(sbuf *b, const tmpl_value *v, bool repr, print_guard *g);

static int write_seq(sbuf *b, const tmpl_value *v, print_guard *g) {
    if (v->u.list.lazy) return sbuf_put(b, "<generator object>", 18);
    bool tuple = v->u.list.tuple;
    if (sbuf_putc(b, tuple ? '(' : '[')) return -1;
    for (size_t i = 0; i < v->u.list.len; i++) {
        if (i && sbuf_put(b, ", ", 2)) return -1;
        if (write_value(b, v->u.list.items[i], true, g)) return -1;
    }
    if (tuple && v->u.list.len == 1 && sbuf_putc(b, ',')) return -1;
    return sbuf_putc(b, tuple ? ')' : ']');
}

static int write_mapping(sbuf *b, const tmpl_value *v, print_guard *g) {
    if (sbuf_putc(b, '{')) return -1;
    for (size_t i = 0; i < v->u.dict.len; i++) {
        if (i && sbuf_put(b, ", ", 2)) return -1;
        if (write_value(b, v->u.dict.ent[i].key, true, g) || sbuf_put(b, ": ", 2) ||
            write_value(b, v->u.dict.ent[i].val, true, g))
            return -1;
    }
    return sbuf_putc(b, '}');
}

static int write_namespace(sbuf *b, const tmpl_value *v, print_guard *g) {
    bool open = g->n == NS_PRINT_MAX;
    for (int i = 0; i < g->n && !open; i++) open = g->open[i] == v;
    if (open) return sbuf_put(b, "<Namespace {...}>", 17);
    g->open[g->n++] = v;
    int rc = sbuf_put(b, "<Namespace ", 11) || write_mapping(b, v, g) || sbuf_putc(b, '>');
    g->n--;
    return rc ? -1 : 0;
}

static int write_value(sbuf *b, const tmpl_value *v, bool repr, print_guard *g) {
    /* as tojson: a list shared into 2^40 leaves is written within the step and time budgets,
     * not for as long as the output buffer takes to fill */
    if (rt_step(g->r) || (v->type == TV_STRING && rt_work(g->r, v->u.str.len))) return -1;
    char num[40];
    switch (v->type) {
    case TV_UNDEFINED: return repr ? sbuf_put(b, "Undefined", 9) : 0;
    case TV_NONE: return sbuf_put(b, "None", 4);
    case TV_BOOL: return v->u.b ? sbuf_put(b, "True", 4) : sbuf_put(b, "False", 5);
    case TV_INT: return sbuf_printf(b, "%lld", (long long)v->u.i);
    case TV_FLOAT:
        format_float(v->u.f, num);
        return sbuf_put(b, num, strlen(num));
    case TV_STRING:
        return repr ? write_str_repr(b, v->u.str.s, v->u.str.len) : sbuf_put(b, v->u.str.s, v->u.str.len);
    case TV_LIST:
    case TV_DICT:
    case TV_NAMESPACE: {
        if (g->depth >= PRINT_MAX_DEPTH) return sbuf_put(b, "...", 3);
        g->depth++;
        int rc = v->type == TV_LIST ? write_seq(b, v, g) : v->type == TV_DICT ? write_mapping(b, v, g) : write_namespace(b, v, g);
        g->depth--;
        return rc;
    }
    case TV_LOOP:
        return sbuf_printf(b, "<LoopContext %zu/%zu>", v->u.loop->index + 1, v->u.loop->items->u.list.len);
    case TV_MACRO: return sbuf_printf(b, "<Macro '%s'>", v->u.macro.def->name ? v->u.macro.def->name : "caller");
    case TV_BUILTIN: return sbuf_printf(b, "<built-in function %s>", builtin_name(v->u.builtin.id));
    }
    return 0;
}

int tv_write_repr(rt *r, sbuf *b, const tmpl_value *v) {
    print_guard g = {.n = 0, .depth = 0, .r = r};
    return write_value(b, v, true, &g);
}

int tv_write_str(rt *r, sbuf *b, const tmpl_value *v) {
    print_guard g = {.n = 0, .depth = 0, .r = r};
    return write_value(b, v, false, &g);
}

tmpl_value *tv_to_str(rt *r, tmpl_value *v) {
    if (v->type == TV_STRING) return tv_ref(v);
    sbuf b = {.limit = rt_mem_left(r)};
    if (tv_write_str(r, &b, v)) {
        sbuf_free(&b);
        rt_fail(r, b.over ? "string longer than the memory left to the render" : "out of memory");
        return NULL;
    }
    return tv_str_take(r, &b);
}

/* ---- json.dumps --------------------------------------------------------------------------- */
static int json_string(sbuf *b, const char *s, size_t n, bool ensure_ascii) {
    if (sbuf_putc(b, '"')) return -1;
    size_t run = 0, w; /* bytes [run, i) are copied as they are, flushed before each escape */
    for (size_t i = 0; i < n; i += w) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char hex[16];
        w = 1;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(hex, sizeof hex, "\\u%04x", c);
                esc = hex;
            } else if (c >= 0x7f && ensure_ascii) {
                uint32_t cp = utf8_decode(s + i, n - i, &w);
                if (cp >= 0x10000) { /* a surrogate pair, as json.dumps writes it */
                    cp -= 0x10000;
                    snprintf(hex, sizeof hex, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
                } else {
                    snprintf(hex, sizeof hex, "\\u%04x", cp);
                }
                esc = hex;
            }
        }
        if (!esc) continue;
        if (sbuf_put(b, s + run, i - run) || sbuf_put(b, esc, strlen(esc))) return -1;
        run = i + w;
    }
    if (sbuf_put(b, s + run, n - run)) return -1;
    return sbuf_putc(b, '"');
}

static int json_newline(sbuf *b, const json_opts *o, int depth) {
    if (sbuf_putc(b, '\n')) return -1;
    for (int i = 0; i < depth; i++)
        if (sbuf_put(b, o->indent, strlen(o->indent))) return -1;
    return 0;
}

/* A dict key as json.dumps writes it: strings as they are, numbers, booleans and None as text. */
static int json_key(rt *r, sbuf *b, const tmpl_value *k, bool ensure_ascii) {
    char num[40];
    switch (k->type) {
    case TV_STRING: return json_string(b, k->u.str.s, k->u.str.len, ensure_ascii);
    case TV_INT:
        snprintf(num, sizeof num, "\"%lld\"", (long long)k->u.i);
        return sbuf_put(b, num, strlen(num));
    case TV_FLOAT:
        format_float(k->u.f, num);
        return sbuf_putc(b, '"') || sbuf_put(b, num, strlen(num)) || sbuf_putc(b, '"');
    case TV_BOOL: return sbuf_put(b, k->u.b ? "\"true\"" : "\"false\"", k->u.b ? 6 : 7);
    case TV_NONE: return sbuf_put(b, "\"null\"", 6);
    default: return rt_fail(r, "keys must be str, int, float, bool or None, not %s", tv_type_name(k));
    }
}

/* Order of the entries of d for sort_keys (insertion order otherwise); caller frees. */
static size_t *json_entry_order(rt *r, const tmpl_value *d, bool sort) {
    size_t n = d->u.dict.len;
    size_t *ord = malloc((n ? n : 1) * sizeof *ord);
    if (!ord) {
        rt_fail(r, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) ord[i] = i;
    if (!sort) return ord;
    for (size_t i = 1; i < n; i++) { /* insertion sort: stable, key counts are small, each comparison charged */
        size_t cur = ord[i], j = i;
        while (j > 0) {
            int c = tv_compare(r, d->u.dict.ent[ord[j - 1]].key, d->u.dict.ent[cur].key, false);
            if (c == TV_CMP_FAIL) {
                free(ord);
                return NULL;
            }
            if (c == 2) {
                rt_fail(r, "sort_keys: cannot order keys of types %s and %s",
                        tv_type_name(d->u.dict.ent[ord[j - 1]].key), tv_type_name(d->u.dict.ent[cur].key));
                free(ord);
                return NULL;
            }
            if (c <= 0) break;
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = cur;
    }
    return ord;
}

static int json_container(rt *r, sbuf *b, const tmpl_value *v, const json_opts *o, int depth) {
    bool is_list = v->type == TV_LIST;
    size_t n = is_list ? v->u.list.len : v->u.dict.len;
    if (sbuf_putc(b, is_list ? '[' : '{')) return -1;
    if (n == 0) return sbuf_putc(b, is_list ? ']' : '}');
    size_t *ord = is_list ? NULL : json_entry_order(r, v, o->sort_keys);
    if (!is_list && !ord) return -1;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (i) rc = sbuf_put(b, o->item_sep, strlen(o->item_sep));
        if (!rc && o->indent) rc = json_newline(b, o, depth + 1);
        if (rc) break;
        if (is_list) {
            rc = tv_write_json(r, b, v->u.list.items[i], o, depth + 1);
        } else {
            const tv_entry *e = &v->u.dict.ent[ord[i]];
            rc = json_key(r, b, e->key, o->ensure_ascii) || sbuf_put(b, o->key_sep, strlen(o->key_sep)) ||
                 tv_write_json(r, b, e->val, o, depth + 1);
        }
    }
    free(ord);
    if (rc) return -1;
    if (o->indent && json_newline(b, o, depth)) return -1;
    return sbuf_putc(b, is_list ? ']' : '}');
}

int tv_write_json(rt *r, sbuf *b, const tmpl_value *v, const json_opts *o, int depth) {
    if (depth > r->lim.max_depth) return rt_fail(r, "tojson: nesting deeper than %d", r->lim.max_depth);
    /* a step per value and the bytes of its text: a list shared into 2^40 leaves is written
     * within the step and time budgets, not for as long as the output buffer takes to fill */
    if (rt_step(r) || (v->type == TV_STRING && rt_work(r, v->u.str.len))) return -1;
    char num[40];
    int rc;
    switch (v->type) {
    case TV_NONE: rc = sbuf_put(b, "null", 4); break;
    case TV_BOOL: rc = v->u.b ? sbuf_put(b, "true", 4) : sbuf_put(b, "false", 5); break;
    case TV_INT: rc = sbuf_printf(b, "%lld", (long long)v->u.i); break;
    case TV_FLOAT:
        if (isnan(v->u.f)) strcpy(num, "NaN");
        else if (isinf(v->u.f)) strcpy(num, v->u.f < 0 ? "-Infinity" : "Infinity");
        else format_float(v->u.f, num);
        rc = sbuf_put(b, num, strlen(num));
        break;
    case TV_STRING: rc = json_string(b, v->u.str.s, v->u.str.len, o->ensure_ascii); break;
    case TV_LIST:
    case TV_DICT:
        if (v->type == TV_LIST && v->u.list.lazy) return rt_fail(r, "Object of type generator is not JSON serializable");
        rc = json_container(r, b, v, o, depth);
        if (rc && r->failed) return -1;
        break;
    default: return rt_fail(r, "Object of type %s is not JSON serializable", tv_type_name(v));
    }
    if (rc) return rt_fail(r, b->over ? "tojson: result too long" : "out of memory");
    return 0;
}
