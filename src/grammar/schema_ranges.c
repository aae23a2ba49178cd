/* Integers and numbers within bounds as GBNF (see schema_parts.h). The integers in [a, b] of
 * one length are written digit by digit: after the common prefix of a and b, the first digit
 * that differs splits them into a's digit followed by anything at least the rest of a, the
 * digits strictly between followed by any digits, and b's digit followed by anything at most
 * the rest of b. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/schema_parts.h"

/* 15 digits: every integer of them is exact in a double */
#define MAX_DIGITS 15
static const double TOP = 999999999999999.0;

typedef struct buf {
    char *s;
    size_t n, cap;
    bool oom;
} buf;

static void put(buf *b, const char *s) {
    size_t k = strlen(s);
    if (b->oom) return;
    if (b->n + k + 1 > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        while (cap < b->n + k + 1) cap *= 2;
        char *g = realloc(b->s, cap);
        if (!g) {
            b->oom = true;
            return;
        }
        b->s = g;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, k + 1);
    b->n += k;
}

static void putf(buf *b, const char *fmt, int x, int y) {
    char tmp[64];
    snprintf(tmp, sizeof tmp, fmt, x, y);
    put(b, tmp);
}

/* Digit strings x <= y of equal length: the alternatives for the numbers between them. */
static void same_length(buf *b, const char *x, const char *y) {
    size_t n = strlen(x), p = 0;
    while (p < n && x[p] == y[p]) p++;
    if (p > 0) {
        put(b, "\"");
        char pre[MAX_DIGITS + 1];
        memcpy(pre, x, p);
        pre[p] = 0;
        put(b, pre);
        put(b, "\" ");
    }
    if (p == n) return;
    size_t rest = n - p - 1;
    bool x_low = strspn(x + p + 1, "0") == rest, y_high = strspn(y + p + 1, "9") == rest;
    int x0 = x[p] - '0', y0 = y[p] - '0';
    if (x_low && y_high) { /* everything between: [x0-y0] and any digits */
        putf(b, "[%d-%d]", x0, y0);
        if (rest) putf(b, " [0-9]{%d}", (int)rest, 0);
        return;
    }
    char nines[MAX_DIGITS + 1], zeros[MAX_DIGITS + 1];
    memset(nines, '9', rest), nines[rest] = 0;
    memset(zeros, '0', rest), zeros[rest] = 0;
    put(b, "( ");
    int lo = x0, hi = y0;
    if (!x_low) { /* x0 then at least x's rest */
        putf(b, "\"%d\" ( ", x0, 0);
        same_length(b, x + p + 1, nines);
        put(b, " )");
        lo = x0 + 1;
    }
    if (!y_high) hi = y0 - 1;
    if (lo <= hi) {
        if (!x_low) put(b, " | ");
        putf(b, lo == hi ? "\"%d\"" : "[%d-%d]", lo, hi);
        if (rest) putf(b, " [0-9]{%d}", (int)rest, 0);
    }
    if (!y_high) { /* y0 then at most y's rest */
        if (!x_low || lo <= hi) put(b, " | ");
        putf(b, "\"%d\" ( ", y0, 0);
        same_length(b, zeros, y + p + 1);
        put(b, " )");
    }
    put(b, " )");
}

/* The non-negative integers in [a, b] (a <= b <= TOP), as alternatives; *first: none written
 * yet (no " | " before the next). */
static void non_negative(buf *b, double a, double hi, bool *first) {
    for (int d = 1; d <= MAX_DIGITS; d++) {
        double lo_d = d == 1 ? 0 : pow(10, d - 1), hi_d = pow(10, d) - 1;
        if (lo_d < a) lo_d = a;
        if (hi_d > hi) hi_d = hi;
        if (lo_d > hi_d) continue;
        char x[MAX_DIGITS + 2], y[MAX_DIGITS + 2];
        snprintf(x, sizeof x, "%.0f", lo_d);
        snprintf(y, sizeof y, "%.0f", hi_d);
        put(b, *first ? "" : " | ");
        *first = false;
        same_length(b, x, y);
    }
}

/* The integers in [lo, hi] (lo <= hi, within +-TOP): non-negative ones, and "-" the others. */
static char *integers(double lo, double hi) {
    buf b = {0};
    bool first = true;
    put(&b, "( ");
    if (hi >= 0) non_negative(&b, lo > 0 ? lo : 0, hi, &first);
    if (lo < 0) {
        put(&b, first ? "\"-\" ( " : " | \"-\" ( ");
        bool f2 = true;
        non_negative(&b, hi < 0 ? -hi : 1, -lo, &f2);
        put(&b, " )");
        first = false;
    }
    put(&b, " )");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* The smallest integer a bound allows from below, and the largest from above (within +-TOP). */
static double int_low(gr_bound lo) {
    if (!lo.set) return -TOP;
    double v = lo.exclusive ? floor(lo.v) + 1 : ceil(lo.v);
    return v < -TOP ? -TOP : v;
}
static double int_high(gr_bound hi) {
    if (!hi.set) return TOP;
    double v = hi.exclusive ? ceil(hi.v) - 1 : floor(hi.v);
    return v > TOP ? TOP : v;
}

static char *none_in(nc_err *err, const char *what) {
    nc_fail(err, "no %s is within the bounds (minimum / maximum / exclusiveMinimum / exclusiveMaximum)", what);
    return NULL;
}

char *gr_integer_range(gr_bound lo, gr_bound hi, nc_err *err) {
    double a = int_low(lo), z = int_high(hi);
    if (a > z) return none_in(err, "integer");
    char *e = integers(a, z);
    if (!e) nc_fail(err, "out of memory");
    return e;
}

char *gr_number_range(gr_bound lo, gr_bound hi, nc_err *err) {
    double a = int_low(lo), z = int_high(hi);
    /* I.F lies strictly between I and I + 1: the whole of that interval must be in range */
    double pa = lo.set ? ceil(lo.v) : 0, pz = hi.set ? floor(hi.v) - 1 : TOP - 1;
    if (pa < 0) pa = 0;
    if (pz > TOP - 1) pz = TOP - 1;
    /* -I.F lies strictly between -(I + 1) and -I */
    double na = hi.set ? ceil(-hi.v) : 0, nz = lo.set ? floor(-lo.v) - 1 : TOP - 1;
    if (na < 0) na = 0;
    if (nz > TOP - 1) nz = TOP - 1;
    buf b = {0};
    bool any = false;
    put(&b, "( ");
    const char *frac = " \".\" [0-9]{0,15} [1-9]";
    if (a <= z) {
        char *e = integers(a, z);
        if (e) put(&b, e);
        else b.oom = true;
        free(e);
        any = true;
    }
    if (pa <= pz) {
        put(&b, any ? " | ( " : "( ");
        bool first = true;
        put(&b, "( ");
        non_negative(&b, pa, pz, &first);
        put(&b, " )");
        put(&b, frac);
        put(&b, " )");
        any = true;
    }
    if (na <= nz) {
        put(&b, any ? " | \"-\" ( " : "\"-\" ( ");
        bool first = true;
        put(&b, "( ");
        non_negative(&b, na, nz, &first);
        put(&b, " )");
        put(&b, frac);
        put(&b, " )");
        any = true;
    }
    put(&b, " )");
    if (b.oom) {
        free(b.s);
        nc_fail(err, "out of memory");
        return NULL;
    }
    if (!any) {
        free(b.s);
        return none_in(err, "number");
    }
    return b.s;
}
