/* Pieces of JSON Schema -> GBNF (json_schema.c) that stand alone: numbers within bounds
 * (schema_ranges.c) and strings matching an ECMAScript regular expression (schema_regex.c).
 * Each returns a malloc'd GBNF expression (a parenthesized group), or NULL with err set. */
#ifndef NC_GRAMMAR_SCHEMA_PARTS_H
#define NC_GRAMMAR_SCHEMA_PARTS_H

#include <stdbool.h>

#include "common.h"

/* A bound of minimum / maximum / exclusiveMinimum / exclusiveMaximum. */
typedef struct gr_bound {
    bool set;
    double v;
    bool exclusive;
} gr_bound;

/* The JSON integers within lo and hi, written without leading zeros (at most 15 digits: exact
 * in a double). NULL with err set when none is. */
char *gr_integer_range(gr_bound lo, gr_bound hi, nc_err *err);
/* The JSON numbers within lo and hi: the integers in range, and I.F (or -I.F) where the whole
 * open interval between I and the next integer is in range (F up to 16 digits, not ending in 0):
 * every number written is in range, and between integer bounds every integer and every decimal
 * is. NULL with err set when none is. */
char *gr_number_range(gr_bound lo, gr_bound hi, nc_err *err);

/* The body of a JSON string (between its quotes, in its JSON escapes) whose value matches the
 * ECMAScript pattern. Taken: literals, escapes (\d \w \s \D \W \S \t \n \r \uXXXX \xXX and
 * escaped punctuation), '.', classes with ranges and negation, groups (capturing, (?:...) and
 * named), alternation, quantifiers (* + ? {n} {n,} {n,m}, lazy or not), ^ at the start and $ at
 * the end. The string generated matches the pattern whole (anchored or not, it then matches);
 * characters JSON would have to escape are left out of classes and '.', and \s is a space.
 * Refused, named: lookahead and lookbehind, backreferences, \b \B, \p{...}, anchors elsewhere,
 * counts above 1000. */
char *gr_regex_string_body(const char *pattern, nc_err *err);

#endif
