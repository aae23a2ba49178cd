/* JSON Schema -> GBNF (nc_json_schema_to_grammar). Every schema becomes a rule whose sentences are
 * the JSON texts valid against it (within the supported keywords; anything else is refused with
 * the keyword and a JSON pointer to it, never silently ignored). Rule names: the root's is
 * root_name, every other one starts with root_name and '-'.
 *
 * Choices made for generation:
 * - whitespace: between two JSON tokens at most one optional blank, a space or a newline followed
 *   by up to 16 spaces or tabs, so a model (even a random one) cannot spin on blanks;
 * - numbers: at most 16 integer digits, 16 fraction digits and 3 exponent digits;
 * - an object with `properties` and no `additionalProperties` gets no other keys (what a caller
 *   of a schema for generation wants); without `properties` any keys are allowed;
 * - properties come in the order of `properties`; `oneOf` is treated as `anyOf` (as llama.cpp
 *   does: a value two branches take is not refused);
 * - formats date, time, date-time (RFC 3339, February has 28 days: no leap-year arithmetic),
 *   uuid, email, hostname, ipv4, ipv6 (its full form) and uri (http(s) URLs): sentences of
 *   ajv-formats' definitions; minLength / maxLength beside a format only when every string of
 *   the format fits them; other formats are refused;
 * - minimum / maximum / exclusiveMinimum / exclusiveMaximum: integers and decimals within the
 *   bounds (schema_ranges.c); `pattern`: strings the regular expression matches whole
 *   (schema_regex.c), not beside format or minLength / maxLength;
 * - minProperties / maxProperties: the count of keys written, properties and additional ones. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/schema_parts.h"

#define MAX_DEPTH 64      /* nested schemas */
#define MAX_COUNT 4096    /* minItems, maxItems, minLength, maxLength; properties, required names and
                             prefixItems of one schema */
#define MAX_RULES 20000

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

/* Names to indices, for the lookups a schema from a request can multiply (properties against
 * required names, $ref targets): every one constant-time, so that a schema's cost is linear in its
 * size. Keys are borrowed. */
typedef struct strmap {
    const char **keys;
    int32_t *vals;
    size_t cap, n;       /* cap: a power of two, at least twice n */
} strmap;

typedef enum prim { P_WS, P_CHAR, P_STRING, P_INT_PART, P_NUMBER, P_INTEGER, P_BOOLEAN, P_NULL, P_VALUE, P_OBJECT,
                    P_ARRAY, P_DATE, P_TIME, P_DATE_TIME, P_UUID, P_EMAIL, P_HOSTNAME, P_LABEL, P_IPV4, P_IPV4_PART,
                    P_IPV6, P_URI, P_COUNT } prim;

typedef struct conv {
    const char *root;
    cJSON *doc;
    sbuf out;
    char **names;       /* every rule name taken */
    int n_names, cap_names;
    int32_t *name_slots; /* hash of names: index + 1, 0 empty; 2 * cap_names slots */
    char **ref_keys, **ref_rules;  /* $ref strings and their rules */
    strmap refs;        /* ref_keys -> index */
    strmap defs[2];     /* the root's $defs and definitions: name -> index of defs_items */
    const cJSON **defs_items[2];
    bool defs_indexed[2];
    bool failed;        /* a name could not be made (limit, memory): err is set */
    int n_refs;
    char *prim[P_COUNT];
    int depth;
    nc_poll *poll;      /* asked once per schema (NULL: never) */
    nc_err *err;
} conv;

/* ---- text ---- */

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->n + n + 1 > cap) cap *= 2;
        char *g = cap <= GR_MAX_TEXT * 2u ? realloc(b->s, cap) : NULL;
        if (!g) { b->oom = true; return; }
        b->s = g;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { sb_put(b, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { b->oom = true; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_put(b, big, (size_t)n);
    free(big);
}

/* s as a GBNF string literal: quotes, backslashes and control characters escaped, UTF-8 kept. */
static void sb_literal(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
        } else if (c < 0x20 || c == 0x7F) sb_printf(b, "\\x%02X", c);
        else sb_put(b, (const char *)&c, 1);
    }
    sb_put(b, "\"", 1);
}

static int fail(conv *c, const char *ptr, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(conv *c, const char *ptr, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nc_fail(c->err, "json schema: %s at %s", msg, *ptr ? ptr : "/ (the root)");
}

/* ptr + "/" + key with JSON pointer escapes (~0 ~1), malloc'd. */
static char *ptr_join(const char *ptr, const char *key) {
    sbuf b = {0};
    sb_put(&b, ptr, strlen(ptr));
    sb_put(&b, "/", 1);
    for (const char *k = key; *k; k++)
        if (*k == '~') sb_put(&b, "~0", 2);
        else if (*k == '/') sb_put(&b, "~1", 2);
        else sb_put(&b, k, 1);
    if (b.oom) { free(b.s); return NULL; }
    return b.s ? b.s : strdup(ptr);
}

/* ---- rule names ---- */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* The slot of key k: its own, or the empty one where it would go. */
static size_t map_slot(const strmap *m, const char *k) {
    size_t mask = m->cap - 1, i = hash_str(k) & mask;
    while (m->keys[i] && strcmp(m->keys[i], k)) i = (i + 1) & mask;
    return i;
}

/* k's value, or -1. */
static int32_t map_get(const strmap *m, const char *k) {
    if (!m->cap) return -1;
    size_t i = map_slot(m, k);
    return m->keys[i] ? m->vals[i] : -1;
}

/* Add k -> v unless k is there. 1: added; 0: there already (*old its value); -1: out of memory. */
static int map_put(strmap *m, const char *k, int32_t v, int32_t *old) {
    if (2 * (m->n + 1) > m->cap) {
        strmap g = {.cap = m->cap ? 2 * m->cap : 16, .n = m->n};
        g.keys = calloc(g.cap, sizeof *g.keys);
        g.vals = malloc(g.cap * sizeof *g.vals);
        if (!g.keys || !g.vals) { free(g.keys), free(g.vals); return -1; }
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i]) {
                size_t j = map_slot(&g, m->keys[i]);
                g.keys[j] = m->keys[i], g.vals[j] = m->vals[i];
            }
        free(m->keys), free(m->vals);
        *m = g;
    }
    size_t i = map_slot(m, k);
    if (m->keys[i]) {
        if (old) *old = m->vals[i];
        return 0;
    }
    m->keys[i] = k, m->vals[i] = v, m->n++;
    return 1;
}

static void map_free(strmap *m) {
    free(m->keys), free(m->vals);
    *m = (strmap){0};
}

/* -1 for a name that could not be made: take_name said why (a limit, memory) unless it was
 * never asked (memory for what leads to it). */
static int name_failed(conv *c) { return c->failed ? -1 : nc_fail(c->err, "out of memory"); }

/* The slot of name n in the hash: its own, or the empty one where it would go. */
static size_t name_slot(const conv *c, const char *n) {
    size_t mask = 2 * (size_t)c->cap_names - 1, i = hash_str(n) & mask;
    while (c->name_slots[i] && strcmp(c->names[c->name_slots[i] - 1], n)) i = (i + 1) & mask;
    return i;
}

static bool name_taken(const conv *c, const char *n) { return c->cap_names && c->name_slots[name_slot(c, n)]; }

static bool names_grow(conv *c) {
    int cap = c->cap_names ? 2 * c->cap_names : 64;
    char **g = realloc(c->names, (size_t)cap * sizeof *g);
    int32_t *slots = calloc(2 * (size_t)cap, sizeof *slots);
    if (g) c->names = g;
    if (!g || !slots) { free(slots); return false; }
    free(c->name_slots);
    c->name_slots = slots;
    c->cap_names = cap;
    for (int i = 0; i < c->n_names; i++) c->name_slots[name_slot(c, c->names[i])] = i + 1;
    return true;
}

/* A fresh rule name: base, with letters, digits and '-' only, made unique with -2, -3 ... (a
 * hash keeps this constant-time: schemas come from requests). */
static char *take_name(conv *c, const char *base) {
    if (c->failed) return NULL;
    if (c->n_names >= MAX_RULES) {
        c->failed = true;
        nc_fail(c->err, "json schema: the schema needs more than %d grammar rules (the limit)", MAX_RULES);
        return NULL;
    }
    size_t n = strlen(base);
    char *clean = malloc((n > 200 ? 200 : n) + 16);
    if (!clean || (c->n_names == c->cap_names && !names_grow(c))) {
        free(clean);
        c->failed = true;
        nc_fail(c->err, "out of memory");
        return NULL;
    }
    if (n > 200) { /* deep names: a prefix and a hash of the whole, so they stay apart */
        snprintf(clean + 183, 17, "%016llx", (unsigned long long)hash_str(base));
        clean[182] = '-';
    }
    for (size_t i = 0; i < (n > 200 ? 182 : n); i++) {
        char ch = base[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
        clean[i] = ok ? ch : '-';
    }
    if (n > 200) n = 199;
    clean[n] = 0;
    for (int k = 2; name_taken(c, clean); k++) snprintf(clean + n, 16, "-%d", k);
    c->names[c->n_names++] = clean;
    c->name_slots[name_slot(c, clean)] = c->n_names;
    return clean;
}

static char *sub_name(conv *c, const char *parent, const char *suffix) {
    char base[256];
    snprintf(base, sizeof base, "%s-%s", parent, suffix);
    return take_name(c, base);
}

static void emit(conv *c, const char *name, const char *body) {
    sb_printf(&c->out, "%s ::= %s\n", name, body);
}

/* ---- the fixed rules, made on first use ---- */

static const char *prim_rule(conv *c, prim p) {
    static const char *const suffix[P_COUNT] = {"ws", "char", "string", "int-part", "number", "integer", "boolean",
                                                "null", "value", "object", "array", "date", "time", "date-time",
                                                "uuid", "email", "hostname", "label", "ipv4", "ipv4-part", "ipv6",
                                                "uri"};
    if (c->prim[p]) return c->prim[p];
    char *name = sub_name(c, c->root, suffix[p]);
    if (!name) return NULL;
    c->prim[p] = name;
    char body[700];
    const char *ws = p == P_OBJECT || p == P_ARRAY ? prim_rule(c, P_WS) : "";
    switch (p) {
    case P_WS: snprintf(body, sizeof body, "( \" \" | \"\\n\" [ \\t]{0,16} )?"); break;
    case P_CHAR: snprintf(body, sizeof body, "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )"); break;
    case P_STRING: snprintf(body, sizeof body, "\"\\\"\" %s* \"\\\"\"", prim_rule(c, P_CHAR)); break;
    case P_INT_PART: snprintf(body, sizeof body, "\"0\" | [1-9] [0-9]{0,15}"); break;
    case P_NUMBER:
        snprintf(body, sizeof body, "\"-\"? %s ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?", prim_rule(c, P_INT_PART));
        break;
    case P_INTEGER: snprintf(body, sizeof body, "\"-\"? %s", prim_rule(c, P_INT_PART)); break;
    case P_BOOLEAN: snprintf(body, sizeof body, "\"true\" | \"false\""); break;
    case P_NULL: snprintf(body, sizeof body, "\"null\""); break;
    case P_VALUE:
        snprintf(body, sizeof body, "%s | %s | %s | %s | %s | %s", prim_rule(c, P_OBJECT), prim_rule(c, P_ARRAY),
                 prim_rule(c, P_STRING), prim_rule(c, P_NUMBER), prim_rule(c, P_BOOLEAN), prim_rule(c, P_NULL));
        break;
    case P_OBJECT: {
        const char *s = prim_rule(c, P_STRING), *v = prim_rule(c, P_VALUE);
        snprintf(body, sizeof body, "\"{\" %s ( %s %s \":\" %s %s %s ( \",\" %s %s %s \":\" %s %s %s )* )? \"}\"", ws, s,
                 ws, ws, v, ws, ws, s, ws, ws, v, ws);
        break;
    }
    case P_ARRAY: {
        const char *v = prim_rule(c, P_VALUE);
        snprintf(body, sizeof body, "\"[\" %s ( %s %s ( \",\" %s %s %s )* )? \"]\"", ws, v, ws, ws, v, ws);
        break;
    }
    case P_DATE:
        snprintf(body, sizeof body,
                 "[0-9]{4} \"-\" ( ( \"01\" | \"03\" | \"05\" | \"07\" | \"08\" | \"10\" | \"12\" ) \"-\" ( \"0\" [1-9] | "
                 "[12] [0-9] | \"3\" [01] ) | ( \"04\" | \"06\" | \"09\" | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | "
                 "\"30\" ) | \"02\" \"-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )");
        break;
    case P_TIME:
        snprintf(body, sizeof body,
                 "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? ( \"Z\" | [+-] "
                 "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )");
        break;
    case P_DATE_TIME: snprintf(body, sizeof body, "%s \"T\" %s", prim_rule(c, P_DATE), prim_rule(c, P_TIME)); break;
    case P_UUID:
        snprintf(body, sizeof body, "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
                                    "[0-9a-fA-F]{12}");
        break;
    /* the formats ajv-formats checks, as some of the strings it takes (lengths bounded: see
       FORMAT_LENGTH) */
    case P_LABEL: snprintf(body, sizeof body, "[a-zA-Z0-9] ( [a-zA-Z0-9-]{0,14} [a-zA-Z0-9] )?"); break;
    case P_EMAIL: /* a top-level domain of letters: zod's email pattern wants one */
        snprintf(body, sizeof body, "[a-zA-Z0-9_+-]{1,16} ( \".\" [a-zA-Z0-9_+-]{1,16} ){0,2} \"@\" ( %s \".\" ){1,3} "
                 "[a-zA-Z]{2,8}", prim_rule(c, P_LABEL));
        break;
    case P_HOSTNAME: snprintf(body, sizeof body, "%s ( \".\" %s ){0,3}", prim_rule(c, P_LABEL), prim_rule(c, P_LABEL)); break;
    case P_IPV4_PART: snprintf(body, sizeof body, "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9]"); break;
    case P_IPV4: {
        const char *o = prim_rule(c, P_IPV4_PART);
        snprintf(body, sizeof body, "%s \".\" %s \".\" %s \".\" %s", o, o, o, o);
        break;
    }
    case P_IPV6: snprintf(body, sizeof body, "[0-9a-fA-F]{1,4} ( \":\" [0-9a-fA-F]{1,4} ){7}"); break;
    case P_URI:
        snprintf(body, sizeof body, "\"http\" \"s\"? \"://\" %s ( \"/\" [a-zA-Z0-9._~-]{1,16} ){0,4} \"/\"?",
                 prim_rule(c, P_HOSTNAME));
        break;
    default: return NULL;
    }
    emit(c, name, body);
    return name;
}

/* ---- schemas ---- */

static int gen(conv *c, const cJSON *schema, const char *ptr, const char *name);

static const char *const ANNOTATIONS[] = {"title", "description", "$schema", "$id", "default", "examples", "$comment",
                                          "$defs", "definitions"};
static const char *const CONSTRAINTS[] = {"type", "properties", "required", "additionalProperties", "enum", "const",
                                          "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength",
                                          "anyOf", "oneOf", "allOf", "$ref", "format", "minimum", "maximum",
                                          "exclusiveMinimum", "exclusiveMaximum", "pattern", "minProperties",
                                          "maxProperties"};

static bool in_list(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i])) return true;
    return false;
}
#define IN(k, list) in_list(k, list, sizeof list / sizeof *list)

/* Every keyword known; those beside $ref / anyOf / enum / const must be annotations or the type. */
static int check_keywords(conv *c, const cJSON *s, const char *ptr) {
    const char *alone = NULL;
    for (const cJSON *k = s->child; k; k = k->next) {
        if (!IN(k->string, ANNOTATIONS) && !IN(k->string, CONSTRAINTS)) {
            char *p = ptr_join(ptr, k->string);
            int rc = fail(c, p ? p : ptr, "unsupported keyword '%s'", k->string);
            free(p);
            return rc;
        }
        if (!strcmp(k->string, "$ref") || !strcmp(k->string, "anyOf") || !strcmp(k->string, "oneOf") ||
            !strcmp(k->string, "allOf") || !strcmp(k->string, "enum") || !strcmp(k->string, "const"))
            alone = k->string;
    }
    if (!alone) return 0;
    for (const cJSON *k = s->child; k; k = k->next)
        if (strcmp(k->string, alone) && !IN(k->string, ANNOTATIONS) && strcmp(k->string, "type"))
            return fail(c, ptr, "'%s' beside '%s' is not supported (put the constraints inside it)", k->string, alone);
    return 0;
}

static int count_keyword(conv *c, const cJSON *s, const char *key, const char *ptr, long dflt, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    *out = dflt;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0)) return fail(c, ptr, "'%s' must be a non-negative integer", key);
    if (v->valuedouble > MAX_COUNT) return fail(c, ptr, "'%s' %g is above the supported %d", key, v->valuedouble, MAX_COUNT);
    if (v->valuedouble != (double)(long)v->valuedouble) return fail(c, ptr, "'%s' must be a non-negative integer", key);
    *out = (long)v->valuedouble;
    return 0;
}

static void sb_repeat(sbuf *b, long min, long max) {
    if (max < 0) sb_printf(b, "{%ld,}", min);
    else sb_printf(b, "{%ld,%ld}", min, max);
}

/* A sub-schema's rule, named parent-suffix; its name into *out (owned by c). */
static int sub(conv *c, const cJSON *schema, const char *ptr, const char *key, const char *parent, const char *suffix,
               const char **out) {
    char *p = ptr_join(ptr, key), *name = p ? sub_name(c, parent, suffix) : NULL;
    int rc = name ? gen(c, schema, p, name) : p ? name_failed(c) : nc_fail(c->err, "out of memory");
    free(p);
    *out = name;
    return rc;
}

/* The formats, their rules and the lengths of their strings (FORMAT_LENGTH: the shortest and
 * the longest the rule writes). */
static const char *const FORMATS[] = {"date", "time", "date-time", "uuid", "email", "hostname", "ipv4", "ipv6", "uri"};
static const prim FORMAT_RULES[] = {P_DATE, P_TIME, P_DATE_TIME, P_UUID, P_EMAIL, P_HOSTNAME, P_IPV4, P_IPV6, P_URI};
static const long FORMAT_LENGTH[][2] = {{10, 10}, {9, 21}, {20, 32}, {36, 36}, {6, 142}, {1, 71}, {7, 15}, {15, 39},
                                        {8, 176}};

static int format_body(conv *c, const cJSON *fmt, long min, long max, const char *ptr, sbuf *b) {
    for (size_t i = 0; i < sizeof FORMATS / sizeof *FORMATS && cJSON_IsString(fmt); i++) {
        if (strcmp(fmt->valuestring, FORMATS[i])) continue;
        if (FORMAT_LENGTH[i][0] < min || (max >= 0 && FORMAT_LENGTH[i][1] > max))
            return fail(c, ptr, "minLength / maxLength beside format %s must allow %ld to %ld characters", FORMATS[i],
                        FORMAT_LENGTH[i][0], FORMAT_LENGTH[i][1]);
        sb_printf(b, "\"\\\"\" %s \"\\\"\"", prim_rule(c, FORMAT_RULES[i]));
        return 0;
    }
    return fail(c, ptr, "format %s is not supported (date, time, date-time, uuid, email, hostname, ipv4, ipv6, uri are)",
                cJSON_IsString(fmt) ? fmt->valuestring : "(not a string)");
}

static int pattern_body(conv *c, const cJSON *pat, const char *ptr, sbuf *b) {
    if (!cJSON_IsString(pat)) return fail(c, ptr, "'pattern' must be a string");
    nc_err why;
    char *body = gr_regex_string_body(pat->valuestring, &why);
    if (!body) return fail(c, ptr, "%s", why.msg);
    sb_printf(b, "\"\\\"\" %s \"\\\"\"", body);
    free(body);
    return 0;
}

static int string_body(conv *c, const cJSON *s, const char *ptr, sbuf *b) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format"), *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    long min, max;
    if (count_keyword(c, s, "minLength", ptr, 0, &min) || count_keyword(c, s, "maxLength", ptr, -1, &max)) return -1;
    if (max >= 0 && max < min) return fail(c, ptr, "maxLength is below minLength");
    if (pat && fmt) return fail(c, ptr, "'pattern' beside 'format' is not supported (give one)");
    if (fmt) return format_body(c, fmt, min, max, ptr, b);
    if (pat && (min || max >= 0)) return fail(c, ptr, "minLength / maxLength beside 'pattern' are not supported");
    if (pat) return pattern_body(c, pat, ptr, b);
    if (min == 0 && max < 0) {
        sb_printf(b, "%s", prim_rule(c, P_STRING));
        return 0;
    }
    sb_printf(b, "\"\\\"\" %s", prim_rule(c, P_CHAR));
    sb_repeat(b, min, max);
    sb_printf(b, " \"\\\"\"");
    return 0;
}

/* A bound keyword: a number (draft 4's boolean exclusiveMinimum is refused). */
static int bound(conv *c, const cJSON *s, const char *key, bool exclusive, const char *ptr, gr_bound *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v))
        return fail(c, ptr, "'%s' must be a number%s", key, cJSON_IsBool(v) ? " (draft 4's boolean form is not supported)" : "");
    /* of two bounds on one side, the tighter */
    bool low = !strcmp(key, "minimum") || !strcmp(key, "exclusiveMinimum");
    if (out->set && (low ? v->valuedouble < out->v || (v->valuedouble == out->v && !exclusive)
                         : v->valuedouble > out->v || (v->valuedouble == out->v && !exclusive)))
        return 0;
    *out = (gr_bound){true, v->valuedouble, exclusive};
    return 0;
}

/* number / integer with minimum, maximum, exclusiveMinimum or exclusiveMaximum. 1: no bounds. */
static int bounded_number(conv *c, const cJSON *s, bool integer, const char *ptr, sbuf *b) {
    gr_bound lo = {0}, hi = {0};
    if (bound(c, s, "minimum", false, ptr, &lo) || bound(c, s, "exclusiveMinimum", true, ptr, &lo) ||
        bound(c, s, "maximum", false, ptr, &hi) || bound(c, s, "exclusiveMaximum", true, ptr, &hi))
        return -1;
    if (!lo.set && !hi.set) return 1;
    nc_err why;
    char *e = integer ? gr_integer_range(lo, hi, &why) : gr_number_range(lo, hi, &why);
    if (!e) return fail(c, ptr, "%s", why.msg);
    sb_printf(b, "%s", e);
    free(e);
    return 0;
}

/* A property's key and value: "\"key\"" ws ":" ws value ws. */
static int property_kv(conv *c, const char *key, const char *value_rule, const char *name, char **out) {
    sbuf b = {0}, k = {0};
    cJSON *js = cJSON_CreateString(key);
    char *quoted = js ? cJSON_PrintUnformatted(js) : NULL;
    cJSON_Delete(js);
    if (!quoted) return nc_fail(c->err, "out of memory");
    sb_literal(&k, quoted);
    free(quoted);
    const char *ws = prim_rule(c, P_WS);
    sb_printf(&b, "%s %s \":\" %s %s %s", k.s ? k.s : "\"\"", ws, ws, value_rule, ws);
    free(k.s);
    char suffix[160];
    snprintf(suffix, sizeof suffix, "%.120s-kv", key);
    char *kv = sub_name(c, name, suffix);
    if (!kv || b.oom) {
        free(b.s);
        return kv ? nc_fail(c->err, "out of memory") : name_failed(c);
    }
    emit(c, kv, b.s);
    free(b.s);
    *out = kv;
    return 0;
}

/* ---- keys other than the listed ones ---- */

typedef struct knode {
    uint32_t cp;
    int32_t child, next;  /* first child, next sibling (-1: none) */
    bool end;             /* a listed key ends here */
} knode;

/* One UTF-8 character of s: its length, 0 when invalid or one a key would have to escape. */
static int key_char(const char *s, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    int n = u[0] < 0x80 ? 1 : (u[0] & 0xE0) == 0xC0 ? 2 : (u[0] & 0xF0) == 0xE0 ? 3 : (u[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!n) return 0;
    uint32_t v = n == 1 ? u[0] : n == 2 ? u[0] & 0x1Fu : n == 3 ? u[0] & 0x0Fu : u[0] & 0x07u;
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (u[i] & 0x3Fu);
    }
    if (v < 0x20 || v == '"' || v == '\\' || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return n;
}

static int32_t knode_child(knode *t, int32_t *n, int32_t at, uint32_t cp) {
    for (int32_t k = t[at].child; k >= 0; k = t[k].next)
        if (t[k].cp == cp) return k;
    t[*n] = (knode){cp, -1, t[at].child, false};
    t[at].child = *n;
    return (*n)++;
}

/* The rule for trie node i: the rest of a key whose characters so far spell node i's prefix. */
static const char *key_rule(conv *c, const knode *t, int32_t i, const char *name) {
    char suffix[40];
    snprintf(suffix, sizeof suffix, "other-key-%d", i);
    char *rule = sub_name(c, name, suffix);
    if (!rule) return NULL;
    const char *ch = prim_rule(c, P_CHAR);
    sbuf b = {0}, cls = {0};
    if (!t[i].end) sb_printf(&b, "\"\\\"\" | ");
    for (int32_t k = t[i].child; k >= 0; k = t[k].next) {
        const char *sub_rule = key_rule(c, t, k, name);
        if (!sub_rule) { free(b.s), free(cls.s); return NULL; }
        sb_printf(&b, "[\\U%08X] %s | ", t[k].cp, sub_rule);
        sb_printf(&cls, "\\U%08X", t[k].cp);
    }
    sb_printf(&b, "( [^\"\\\\\\x00-\\x1F%s] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) ) %s* \"\\\"\"",
              cls.s ? cls.s : "", ch);
    emit(c, rule, b.s ? b.s : "\"\"");
    free(b.s), free(cls.s);
    return rule;
}

/* A JSON string that is none of keys[0..n): it leaves the keys' character trie somewhere or ends
 * where none of them does. (A listed key spelled with escapes, \u0061 for a, is not caught.) */
static const char *other_key(conv *c, const char *const *keys, int n, const char *name) {
    size_t total = 1;
    for (int i = 0; i < n; i++) total += strlen(keys[i]);
    knode *t = malloc(total * sizeof *t);
    if (!t) return NULL;
    int32_t n_nodes = 1;
    t[0] = (knode){0, -1, -1, false};
    for (int i = 0; i < n; i++) {
        int32_t at = 0;
        uint32_t cp;
        const char *k = keys[i];
        for (int len; *k && (len = key_char(k, &cp)) > 0; k += len) at = knode_child(t, &n_nodes, at, cp);
        if (!*k) t[at].end = true; /* (a key with characters that need escapes stays unlisted) */
    }
    const char *root = key_rule(c, t, 0, name);
    free(t);
    if (!root) return NULL;
    char *rule = sub_name(c, name, "extra-key");
    if (rule) {
        sbuf b = {0};
        sb_printf(&b, "\"\\\"\" %s", root);
        emit(c, rule, b.s ? b.s : "\"\"");
        free(b.s);
    }
    return rule;
}

/* Whether properties k.. can end with a count of keys within [min, max] when c are written. */
static bool count_feasible(const bool *required, int n, bool extra, long min, long max, int k, long c) {
    long req = 0, avail = n - k;
    for (int q = k; q < n; q++) req += required[q];
    return (max < 0 || c + req <= max) && (extra || c + avail >= min);
}

/* The properties as object_body writes them, with minProperties / maxProperties: the rules know
 * how many keys were written (counted-K-C: from property K with C written; C stops counting at
 * min when there is no max). */
static int counted_object(conv *c, const char *name, char *const *kv, const bool *required, int n, const char *extra,
                          long min, long max, const char *ptr, sbuf *b) {
    if (max >= 0 && max < min) return fail(c, ptr, "maxProperties is below minProperties");
    if (!count_feasible(required, n, extra != NULL, min, max, 0, 0))
        return fail(c, ptr, "no object of these properties has between minProperties and maxProperties keys");
    long cap = max >= 0 ? (max < n ? max : n) : (min < n ? min : n);
    const char *ws = prim_rule(c, P_WS);
    /* rule[k][c]: its name, NULL when no object can end from there */
    char ***rule = calloc((size_t)n + 1, sizeof *rule);
    if (!rule) return nc_fail(c->err, "out of memory");
    int rc = 0;
    for (int k = n; k >= 0 && rc == 0; k--) {
        if (!(rule[k] = calloc((size_t)cap + 1, sizeof **rule))) { rc = nc_fail(c->err, "out of memory"); break; }
        for (long q = 0; q <= cap && rc == 0; q++) {
            if (!count_feasible(required, n, extra != NULL, min, max, k, q)) continue;
            const char *comma = q ? "\",\" " : "", *comma_ws = q ? ws : "";
            sbuf rb = {0};
            if (k == n) { /* the additional keys: as many as the count still wants and allows */
                long lo = min > q ? min - q : 0, hi = max >= 0 ? max - q : -1;
                if (!extra || hi == 0) sb_printf(&rb, "\"\"");
                else if (q) {
                    sb_printf(&rb, "( \",\" %s %s )", ws, extra);
                    sb_repeat(&rb, lo, hi);
                } else {
                    sb_printf(&rb, "( %s ( \",\" %s %s )", extra, ws, extra);
                    sb_repeat(&rb, lo > 0 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
                    sb_printf(&rb, " )%s", lo > 0 ? "" : "?");
                }
            } else {
                long next = max < 0 && q + 1 > cap ? cap : q + 1;
                const char *with = next <= cap ? rule[k + 1][next] : NULL, *without = required[k] ? NULL : rule[k + 1][q];
                if (with) sb_printf(&rb, "%s%s %s %s", comma, comma_ws, kv[k], with);
                if (without) sb_printf(&rb, "%s%s", with ? " | " : "", without);
                if (!rb.s) continue; /* nothing goes on from here */
            }
            char sfx[48];
            snprintf(sfx, sizeof sfx, "counted-%d-%ld", k, q);
            char *r = sub_name(c, name, sfx);
            if (r) emit(c, r, rb.s ? rb.s : "\"\"");
            else rc = -1;
            free(rb.s);
            rule[k][q] = r;
        }
    }
    if (rc == 0 && !rule[0][0]) rc = fail(c, ptr, "no object of these properties has between minProperties and maxProperties keys");
    if (rc == 0) sb_printf(b, "\"{\" %s %s \"}\"", ws, rule[0][0]);
    for (int k = 0; k <= n; k++) free(rule[k]);
    free(rule);
    return rc;
}

/* The properties in order, required ones always, optional ones maybe, then additional ones when
 * allowed. first_i: what can come from property i on when nothing was written yet; rest_i: the
 * same after something was (each item led by a comma). Built from the end. */
static int object_body(conv *c, const cJSON *s, const char *ptr, const char *name, sbuf *b) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return fail(c, ptr, "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return fail(c, ptr, "'required' must be an array");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (!cJSON_IsString(r)) return fail(c, ptr, "'required' must hold strings");
    /* keys: the properties, then required names without a schema (any value), each once */
    int n_props = 0, n_req = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) n_props++;
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) n_req++;
    if (n_props > MAX_COUNT) return fail(c, ptr, "'properties' lists %d names, more than the supported %d", n_props, MAX_COUNT);
    if (n_req > MAX_COUNT) return fail(c, ptr, "'required' lists %d names, more than the supported %d", n_req, MAX_COUNT);
    char **kv = calloc((size_t)(n_props + n_req) + 1, sizeof *kv);
    const char **keys = calloc((size_t)(n_props + n_req) + 1, sizeof *keys);
    bool *required = calloc((size_t)(n_props + n_req) + 1, 1);
    strmap index = {0}; /* key -> its place in keys */
    int n = 0, rc = kv && keys && required ? 0 : nc_fail(c->err, "out of memory");
    for (const cJSON *p = props ? props->child : NULL; p && rc == 0; p = p->next) {
        int put = map_put(&index, p->string, n, NULL);
        if (put < 0) rc = nc_fail(c->err, "out of memory");
        else if (put == 0) rc = fail(c, ptr, "'properties' names '%.100s' twice", p->string);
        else keys[n++] = p->string;
    }
    for (const cJSON *r = req ? req->child : NULL; r && rc == 0; r = r->next) {
        int32_t at;
        int put = map_put(&index, r->valuestring, n, &at);
        if (put < 0) rc = nc_fail(c->err, "out of memory");
        else if (put == 0) required[at] = true;
        else required[n] = true, keys[n++] = r->valuestring;
    }
    map_free(&index);
    int i = 0;
    char *pp = rc == 0 ? ptr_join(ptr, "properties") : NULL;
    if (rc == 0 && !pp) rc = nc_fail(c->err, "out of memory");
    for (const cJSON *p = props ? props->child : NULL; p && rc == 0; p = p->next, i++) {
        const char *vr;
        rc = sub(c, p, pp, p->string, name, p->string, &vr);
        if (rc == 0) rc = property_kv(c, p->string, vr, name, &kv[i]);
    }
    free(pp);
    for (; i < n && rc == 0; i++) rc = property_kv(c, keys[i], prim_rule(c, P_VALUE), name, &kv[i]);
    /* additional properties: absent means none when properties are listed, any otherwise */
    const char *extra = NULL;
    if (rc == 0 && (addl ? !cJSON_IsFalse(addl) : !props)) {
        const char *vr = prim_rule(c, P_VALUE);
        if (addl && !cJSON_IsTrue(addl)) rc = sub(c, addl, ptr, "additionalProperties", name, "additional", &vr);
        const char *ws = prim_rule(c, P_WS);
        /* the listed keys keep their own schemas: an additional key is any other */
        const char *key = rc == 0 ? (i > 0 ? other_key(c, keys, i, name) : prim_rule(c, P_STRING)) : NULL;
        char *x = key ? sub_name(c, name, "extra-kv") : NULL;
        if (rc == 0 && !x) rc = name_failed(c);
        if (rc == 0) {
            sbuf e = {0};
            sb_printf(&e, "%s %s \":\" %s %s %s", key, ws, ws, vr, ws);
            emit(c, x, e.s ? e.s : "\"\"");
            free(e.s);
            extra = x;
        }
    }
    const char *ws = prim_rule(c, P_WS);
    long min_p, max_p;
    if (rc == 0 && (count_keyword(c, s, "minProperties", ptr, 0, &min_p) || count_keyword(c, s, "maxProperties", ptr, -1, &max_p)))
        rc = -1;
    int n_required = 0;
    for (int k = 0; k < n; k++) n_required += required[k];
    if (rc == 0 && (min_p > n_required || (max_p >= 0 && (extra || max_p < n)))) {
        rc = counted_object(c, name, kv, required, n, extra, min_p, max_p, ptr, b);
        free(kv), free(keys), free(required);
        return rc;
    }
    char *next_first = NULL, *next_rest = NULL;
    for (int k = n; k >= 0 && rc == 0; k--) {
        char fs[32], rs[32];
        snprintf(fs, sizeof fs, "first-%d", k);
        snprintf(rs, sizeof rs, "rest-%d", k);
        char *first = sub_name(c, name, fs), *rest = first ? sub_name(c, name, rs) : NULL;
        if (!first || !rest) { rc = name_failed(c); break; }
        sbuf fb = {0}, rb = {0};
        if (k == n) {
            if (extra) {
                sb_printf(&fb, "( %s ( \",\" %s %s )* )?", extra, ws, extra);
                sb_printf(&rb, "( \",\" %s %s )*", ws, extra);
            } else sb_printf(&fb, "\"\""), sb_printf(&rb, "\"\"");
        } else if (required[k]) {
            sb_printf(&fb, "%s %s", kv[k], next_rest);
            sb_printf(&rb, "\",\" %s %s %s", ws, kv[k], next_rest);
        } else {
            sb_printf(&fb, "%s %s | %s", kv[k], next_rest, next_first);
            sb_printf(&rb, "( \",\" %s %s )? %s", ws, kv[k], next_rest);
        }
        emit(c, first, fb.s);
        emit(c, rest, rb.s);
        free(fb.s), free(rb.s);
        next_first = first, next_rest = rest;
    }
    if (rc == 0) sb_printf(b, "\"{\" %s %s \"}\"", ws, next_first);
    free(kv), free(keys), free(required);
    return rc;
}

/* Positions t.. of an array: prefix item t (or items), with a comma before all but the first. */
static void array_tail(conv *c, sbuf *b, char **elem, int n_prefix, const char *item, long t, long min, long max) {
    const char *ws = prim_rule(c, P_WS);
    char sep[160] = "";
    if (t > 0) snprintf(sep, sizeof sep, "\",\" %s ", ws);
    if (max >= 0 && t >= max) return;
    if (t < n_prefix) {
        bool opt = t >= min;
        sb_printf(b, " %s%s%s", opt ? "( " : "", sep, elem[t]);
        array_tail(c, b, elem, n_prefix, item, t + 1, min, max);
        sb_printf(b, "%s", opt ? " )?" : "");
        return;
    }
    if (!item) return;
    long need = min > t ? min - t : 0, more = max < 0 ? -1 : max - t;
    if (t > 0) {
        sb_printf(b, " ( \",\" %s %s )", ws, item);
        sb_repeat(b, need, more);
    } else {
        sb_printf(b, " ( %s ( \",\" %s %s )", item, ws, item);
        sb_repeat(b, need > 0 ? need - 1 : 0, more < 0 ? -1 : more - 1);
        sb_printf(b, " )%s", need > 0 ? "" : "?");
    }
}

static int array_body(conv *c, const cJSON *s, const char *ptr, const char *name, sbuf *b) {
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    long min, max;
    if (count_keyword(c, s, "minItems", ptr, 0, &min) || count_keyword(c, s, "maxItems", ptr, -1, &max)) return -1;
    if (max >= 0 && max < min) return fail(c, ptr, "maxItems is below minItems");
    if (prefix && !cJSON_IsArray(prefix)) return fail(c, ptr, "'prefixItems' must be an array");
    int n_prefix = prefix ? cJSON_GetArraySize(prefix) : 0;
    if (n_prefix > MAX_COUNT) return fail(c, ptr, "more than %d prefixItems", MAX_COUNT);
    char **elem = calloc((size_t)n_prefix + 1, sizeof *elem);
    if (!elem) return nc_fail(c->err, "out of memory");
    const char *ws = prim_rule(c, P_WS);
    int rc = 0, t = 0;
    char *pp = ptr_join(ptr, "prefixItems");
    for (const cJSON *p = prefix ? prefix->child : NULL; p && rc == 0; p = p->next, t++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%d", t);
        const char *vr;
        rc = pp ? sub(c, p, pp, idx, name, idx, &vr) : nc_fail(c->err, "out of memory");
        if (rc == 0) {
            sbuf e = {0};
            sb_printf(&e, "%s %s", vr, ws);
            elem[t] = e.s;
        }
    }
    free(pp);
    char *item = NULL;
    if (rc == 0 && !cJSON_IsFalse(items)) {
        const char *vr = prim_rule(c, P_VALUE);
        if (items && !cJSON_IsTrue(items)) rc = sub(c, items, ptr, "items", name, "item", &vr);
        sbuf e = {0};
        sb_printf(&e, "%s %s", vr, ws);
        item = e.s;
    }
    if (rc == 0 && !item && n_prefix < min) rc = fail(c, ptr, "minItems %ld needs more items than 'items': false allows", min);
    if (rc == 0) {
        sb_printf(b, "\"[\" %s", ws);
        array_tail(c, b, elem, n_prefix, item, 0, min, max);
        sb_printf(b, " \"]\"");
    }
    for (int k = 0; k < n_prefix; k++) free(elem[k]);
    free(elem), free(item);
    return rc;
}

/* The body for one type name. */
static int typed_body(conv *c, const cJSON *s, const char *type, const char *ptr, const char *name, sbuf *b) {
    if (!strcmp(type, "string")) return string_body(c, s, ptr, b);
    if (!strcmp(type, "object")) return object_body(c, s, ptr, name, b);
    if (!strcmp(type, "array")) return array_body(c, s, ptr, name, b);
    if (!strcmp(type, "number") || !strcmp(type, "integer")) {
        int rc = bounded_number(c, s, !strcmp(type, "integer"), ptr, b);
        if (rc <= 0) return rc;
    }
    static const char *const simple[] = {"number", "integer", "boolean", "null"};
    static const prim rules[] = {P_NUMBER, P_INTEGER, P_BOOLEAN, P_NULL};
    for (int i = 0; i < 4; i++)
        if (!strcmp(type, simple[i])) {
            sb_printf(b, "%s", prim_rule(c, rules[i]));
            return 0;
        }
    return fail(c, ptr, "unknown type '%s'", type);
}

/* No `type`: what the keywords imply, else any value. */
static const char *implied_type(const cJSON *s) {
    if (cJSON_GetObjectItemCaseSensitive(s, "properties") || cJSON_GetObjectItemCaseSensitive(s, "required") ||
        cJSON_GetObjectItemCaseSensitive(s, "additionalProperties") || cJSON_GetObjectItemCaseSensitive(s, "minProperties") ||
        cJSON_GetObjectItemCaseSensitive(s, "maxProperties"))
        return "object";
    if (cJSON_GetObjectItemCaseSensitive(s, "items") || cJSON_GetObjectItemCaseSensitive(s, "prefixItems") ||
        cJSON_GetObjectItemCaseSensitive(s, "minItems") || cJSON_GetObjectItemCaseSensitive(s, "maxItems"))
        return "array";
    if (cJSON_GetObjectItemCaseSensitive(s, "minLength") || cJSON_GetObjectItemCaseSensitive(s, "maxLength") ||
        cJSON_GetObjectItemCaseSensitive(s, "format") || cJSON_GetObjectItemCaseSensitive(s, "pattern"))
        return "string";
    if (cJSON_GetObjectItemCaseSensitive(s, "minimum") || cJSON_GetObjectItemCaseSensitive(s, "maximum") ||
        cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum") || cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum"))
        return "number";
    return NULL;
}

static int literal_body(conv *c, const cJSON *v, sbuf *b) {
    char *json = cJSON_PrintUnformatted(v);
    if (!json) return nc_fail(c->err, "out of memory");
    sb_literal(b, json);
    free(json);
    return 0;
}

/* The root's $defs (kind 0) or definitions (kind 1) member name into *out (NULL: none; the first
 * of a name given twice), through an index made on first use. -1: out of memory. */
static int def_of(conv *c, int kind, const char *key, const char *name, const cJSON **out) {
    *out = NULL;
    if (!c->defs_indexed[kind]) {
        const cJSON *defs = cJSON_GetObjectItemCaseSensitive(c->doc, key);
        int n = cJSON_IsObject(defs) ? cJSON_GetArraySize(defs) : 0;
        if (!(c->defs_items[kind] = calloc((size_t)n + 1, sizeof *c->defs_items[kind]))) return -1;
        c->defs_indexed[kind] = true; /* (a failure below ends the conversion) */
        int i = 0;
        for (const cJSON *d = n ? defs->child : NULL; d; d = d->next) {
            int put = map_put(&c->defs[kind], d->string, i, NULL);
            if (put < 0) return -1;
            if (put) c->defs_items[kind][i++] = d;
        }
    }
    int32_t at = map_get(&c->defs[kind], name);
    *out = at >= 0 ? c->defs_items[kind][at] : NULL;
    return 0;
}

/* "#", "#/$defs/NAME" or "#/definitions/NAME": its rule (made once; recursion refers to the name). */
static int ref_body(conv *c, const cJSON *ref, const char *ptr, sbuf *b) {
    if (!cJSON_IsString(ref)) return fail(c, ptr, "'$ref' must be a string");
    const char *r = ref->valuestring;
    if (!strcmp(r, "#")) {
        sb_printf(b, "%s", c->root);
        return 0;
    }
    int32_t known = map_get(&c->refs, r);
    if (known >= 0) {
        sb_printf(b, "%s", c->ref_rules[known]);
        return 0;
    }
    const char *key = !strncmp(r, "#/$defs/", 8) ? "$defs" : !strncmp(r, "#/definitions/", 14) ? "definitions" : NULL;
    if (!key) return fail(c, ptr, "$ref '%s' is not supported (only #, #/$defs/NAME and #/definitions/NAME)", r);
    const char *enc = r + strlen(key) + 3;
    char dec[256];
    size_t n = 0;
    for (const char *q = enc; *q && n + 1 < sizeof dec; q++) {
        if (*q == '/') return fail(c, ptr, "$ref '%s' is not supported (only one level under %s)", r, key);
        if (*q == '~' && (q[1] == '0' || q[1] == '1')) dec[n++] = q[1] == '0' ? '~' : '/', q++;
        else dec[n++] = *q;
    }
    dec[n] = 0;
    const cJSON *target;
    if (def_of(c, key[0] == '$' ? 0 : 1, key, dec, &target)) return nc_fail(c->err, "out of memory");
    if (!target) return fail(c, ptr, "$ref '%s' points to nothing", r);
    char **keys = realloc(c->ref_keys, (size_t)(c->n_refs + 1) * sizeof *keys);
    if (keys) c->ref_keys = keys;
    char **rules = realloc(c->ref_rules, (size_t)(c->n_refs + 1) * sizeof *rules);
    if (rules) c->ref_rules = rules;
    char base[300];
    snprintf(base, sizeof base, "%s-%s", c->root, dec);
    char *rule = keys && rules ? take_name(c, base) : NULL, *dup = rule ? strdup(r) : NULL;
    if (!dup) return keys && rules && !rule ? name_failed(c) : nc_fail(c->err, "out of memory");
    if (map_put(&c->refs, dup, c->n_refs, NULL) < 0) {
        free(dup);
        return nc_fail(c->err, "out of memory");
    }
    c->ref_keys[c->n_refs] = dup;
    c->ref_rules[c->n_refs++] = rule;
    sb_printf(b, "%s", rule);
    char p0[300];
    snprintf(p0, sizeof p0, "/%s", key);
    char *p = ptr_join(p0, dec);
    int rc = p ? gen(c, target, p, rule) : nc_fail(c->err, "out of memory");
    free(p);
    return rc;
}

/* allOf of object schemas: their properties and required lists merged into one object. */
static int all_of_body(conv *c, const cJSON *all, const char *ptr, const char *name, sbuf *b) {
    if (!cJSON_IsArray(all) || !all->child) return fail(c, ptr, "'allOf' must be a non-empty array");
    cJSON *merged = cJSON_CreateObject(), *props = cJSON_CreateObject(), *req = cJSON_CreateArray();
    int rc = merged && props && req ? 0 : nc_fail(c->err, "out of memory");
    const cJSON *addl = NULL;
    strmap index = {0};      /* a property's name -> its place in copies */
    cJSON **copies = NULL;   /* the merged properties (a later schema's replaces an earlier one's) */
    int32_t n_copies = 0, cap_copies = 0;
    for (const cJSON *s = all->child; s && rc == 0; s = s->next) {
        if (!cJSON_IsObject(s)) { rc = fail(c, ptr, "allOf: every schema must be an object schema"); break; }
        for (const cJSON *k = s->child; k && rc == 0; k = k->next) {
            if (IN(k->string, ANNOTATIONS)) continue;
            if (!strcmp(k->string, "type") && cJSON_IsString(k) && !strcmp(k->valuestring, "object")) continue;
            if (!strcmp(k->string, "properties") && cJSON_IsObject(k)) {
                for (const cJSON *p = k->child; p && rc == 0; p = p->next) {
                    if (n_copies == cap_copies) {
                        cap_copies = cap_copies ? 2 * cap_copies : 16;
                        cJSON **g = realloc(copies, (size_t)cap_copies * sizeof *g);
                        if (!g) { rc = nc_fail(c->err, "out of memory"); break; }
                        copies = g;
                    }
                    cJSON *dup = cJSON_Duplicate(p, true);
                    int32_t at;
                    int put = dup ? map_put(&index, p->string, n_copies, &at) : -1;
                    if (put < 0) { cJSON_Delete(dup); rc = nc_fail(c->err, "out of memory"); break; }
                    if (put == 0) { /* redefined: it moves to the end, as a new key would */
                        cJSON_Delete(cJSON_DetachItemViaPointer(props, copies[at]));
                        copies[at] = dup;
                    } else copies[n_copies++] = dup;
                    cJSON_AddItemToObject(props, p->string, dup);
                }
            } else if (!strcmp(k->string, "required") && cJSON_IsArray(k)) {
                for (const cJSON *r = k->child; r; r = r->next) cJSON_AddItemToArray(req, cJSON_Duplicate(r, true));
            } else if (!strcmp(k->string, "additionalProperties")) addl = k;
            else rc = fail(c, ptr, "allOf: only object schemas (type, properties, required, additionalProperties) can be merged, not '%s'", k->string);
        }
    }
    if (rc == 0) {
        cJSON_AddStringToObject(merged, "type", "object");
        cJSON_AddItemToObject(merged, "properties", props);
        cJSON_AddItemToObject(merged, "required", req);
        props = req = NULL;
        if (addl) cJSON_AddItemToObject(merged, "additionalProperties", cJSON_Duplicate(addl, true));
        rc = object_body(c, merged, ptr, name, b);
    }
    cJSON_Delete(merged), cJSON_Delete(props), cJSON_Delete(req);
    map_free(&index);
    free(copies);
    return rc;
}

static int alternatives_body(conv *c, const cJSON *list, const char *key, const char *ptr, const char *name, sbuf *b) {
    if (!cJSON_IsArray(list) || !list->child) return fail(c, ptr, "'%s' must be a non-empty array", key);
    char *pp = ptr_join(ptr, key);
    int i = 0, rc = pp ? 0 : nc_fail(c->err, "out of memory");
    for (const cJSON *s = list->child; s && rc == 0; s = s->next, i++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%d", i);
        const char *vr;
        rc = sub(c, s, pp, idx, name, idx, &vr);
        if (rc == 0) sb_printf(b, "%s%s", i ? " | " : "", vr);
    }
    free(pp);
    return rc;
}

static int schema_body(conv *c, const cJSON *s, const char *ptr, const char *name, sbuf *b) {
    if (cJSON_IsTrue(s)) {
        sb_printf(b, "%s", prim_rule(c, P_VALUE));
        return 0;
    }
    if (cJSON_IsFalse(s)) return fail(c, ptr, "the schema false allows nothing");
    if (!cJSON_IsObject(s)) return fail(c, ptr, "a schema must be an object or a boolean");
    if (check_keywords(c, s, ptr)) return -1;
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) return ref_body(c, v, ptr, b);
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "const"))) return literal_body(c, v, b);
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        if (!cJSON_IsArray(v) || !v->child) return fail(c, ptr, "'enum' must be a non-empty array");
        for (const cJSON *e = v->child; e; e = e->next) {
            if (e != v->child) sb_printf(b, " | ");
            if (literal_body(c, e, b)) return -1;
        }
        return 0;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "anyOf"))) return alternatives_body(c, v, "anyOf", ptr, name, b);
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) return alternatives_body(c, v, "oneOf", ptr, name, b);
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "allOf"))) return all_of_body(c, v, ptr, name, b);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (!type) {
        const char *t = implied_type(s);
        if (t) return typed_body(c, s, t, ptr, name, b);
        sb_printf(b, "%s", prim_rule(c, P_VALUE));
        return 0;
    }
    if (cJSON_IsString(type)) return typed_body(c, s, type->valuestring, ptr, name, b);
    if (!cJSON_IsArray(type) || !type->child) return fail(c, ptr, "'type' must be a string or a non-empty array");
    for (const cJSON *t = type->child; t; t = t->next) {
        if (!cJSON_IsString(t)) return fail(c, ptr, "'type' must hold strings");
        char alt[40];
        snprintf(alt, sizeof alt, "%.30s", t->valuestring);
        char *tn = sub_name(c, name, alt);
        sbuf tb = {0};
        int rc = tn ? typed_body(c, s, t->valuestring, ptr, tn, &tb) : nc_fail(c->err, "out of memory");
        if (rc == 0) emit(c, tn, tb.s ? tb.s : "\"\"");
        free(tb.s);
        if (rc) return -1;
        sb_printf(b, "%s%s", t == type->child ? "" : " | ", tn);
    }
    return 0;
}

/* The rule `name` for schema s. */
static int gen(conv *c, const cJSON *s, const char *ptr, const char *name) {
    if (nc_poll_ended(c->poll)) return nc_fail(c->err, NC_POLL_ABANDONED);
    if (++c->depth > MAX_DEPTH) return fail(c, ptr, "schemas nested deeper than %d", MAX_DEPTH);
    sbuf b = {0};
    int rc = schema_body(c, s, ptr, name, &b);
    if (rc == 0 && c->failed) rc = -1; /* a fixed rule's name could not be made; err says why */
    if (rc == 0 && (b.oom || c->out.oom)) rc = nc_fail(c->err, "json schema: the grammar is too large");
    if (rc == 0) emit(c, name, b.s ? b.s : "\"\"");
    free(b.s);
    c->depth--;
    return rc;
}

/* The offset of the first byte that is not valid UTF-8, or -1 (names and literals copy the
 * schema's strings into the grammar, which must be UTF-8). */
static long invalid_utf8_at(const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    for (long i = 0; u[i];) {
        int n = u[i] < 0x80 ? 1 : u[i] >= 0xC2 && u[i] <= 0xDF ? 2 : u[i] >= 0xE0 && u[i] <= 0xEF ? 3
              : u[i] >= 0xF0 && u[i] <= 0xF4 ? 4 : 0;
        if (!n) return i;
        uint32_t v = n == 1 ? u[i] : n == 2 ? u[i] & 0x1Fu : n == 3 ? u[i] & 0x0Fu : u[i] & 0x07u;
        for (int k = 1; k < n; k++) {
            if ((u[i + k] & 0xC0) != 0x80) return i;
            v = v << 6 | (u[i + k] & 0x3Fu);
        }
        static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (v < min_of[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return i;
        i += n;
    }
    return -1;
}

static bool valid_root_name(const char *r) {
    if (!*r || strlen(r) > 64) return false;
    for (; *r; r++)
        if (!((*r >= 'a' && *r <= 'z') || (*r >= 'A' && *r <= 'Z') || (*r >= '0' && *r <= '9') || *r == '-' || *r == '_'))
            return false;
    return true;
}

/* The grammar made, under a caller's root rule, through the grammar parser: a schema that reaches
 * itself before any value (`{"$ref": "#"}`, an anyOf whose branch refers back to it) makes a
 * left-recursive rule, which no text can satisfy; refused here, naming the rule (found by
 * fuzz_json_schema). */
static int check_parses(const char *root_name, const char *gbnf, nc_poll *poll, nc_err *err) {
    size_t len = strlen(gbnf) + strlen(root_name) + 16;
    char *full = malloc(len);
    if (!full) return nc_fail(err, "out of memory");
    bool named = strcmp(root_name, "root") != 0;
    snprintf(full, len, "%s%s%s%s", named ? "root ::= " : "", named ? root_name : "", named ? "\n" : "", gbnf);
    gr_grammar *g;
    nc_err why;
    int rc = 0;
    if (gr_parse_watched(&g, full, strlen(full), poll, &why) == 0)
        gr_free(g);
    else if (poll && poll->ended)
        rc = nc_fail(err, NC_POLL_ABANDONED);
    else if (strstr(why.msg, "left-recursive"))
        rc = nc_fail(err, "json schema: the schema refers to itself before any value (a $ref or anyOf cycle): %s", why.msg);
    else /* a converter's bug, said as such rather than blamed on the schema */
        rc = nc_fail(err, "json schema: the grammar made from this schema does not parse: %s", why.msg);
    free(full);
    return rc;
}

int nc_json_schema_to_grammar(const char *schema_json, const char *root_name, char **gbnf, nc_err *err) {
    return nc_json_schema_to_grammar_watched(schema_json, root_name, NULL, NULL, gbnf, err);
}

int nc_json_schema_to_grammar_watched(const char *schema_json, const char *root_name, bool (*gone)(void *user),
                                      void *user, char **gbnf, nc_err *err) {
    *gbnf = NULL;
    nc_poll poll = {.gone = gone, .user = user};
    if (!root_name) root_name = "root";
    if (!valid_root_name(root_name))
        return nc_fail(err, "json schema: root name '%.80s' must be 1 to 64 letters, digits, '-' or '_'", root_name);
    if (!schema_json) return nc_fail(err, "json schema: no schema");
    long bad = invalid_utf8_at(schema_json);
    if (bad >= 0) return nc_fail(err, "json schema: invalid UTF-8 at byte %ld", bad);
    conv c = {.root = root_name, .poll = &poll, .err = err};
    c.doc = cJSON_Parse(schema_json);
    if (!c.doc) return nc_fail(err, "json schema: not valid JSON");
    int rc = 0;
    char *root = take_name(&c, root_name);
    if (!root) rc = nc_fail(err, "out of memory");
    if (rc == 0) rc = gen(&c, c.doc, "", root);
    if (rc == 0 && c.out.oom) rc = nc_fail(err, "json schema: the grammar is too large");
    if (rc == 0) rc = check_parses(root_name, c.out.s, &poll, err);
    for (int i = 0; i < c.n_names; i++) free(c.names[i]);
    for (int i = 0; i < c.n_refs; i++) free(c.ref_keys[i]);
    free(c.names), free(c.name_slots), free(c.ref_keys), free(c.ref_rules);
    map_free(&c.refs);
    for (int k = 0; k < 2; k++) map_free(&c.defs[k]), free(c.defs_items[k]);
    cJSON_Delete(c.doc);
    if (rc) {
        free(c.out.s);
        return -1;
    }
    *gbnf = c.out.s;
    return 0;
}
