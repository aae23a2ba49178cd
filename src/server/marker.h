/* Finding a chat format's markers in generated text. A model writes the markers of its
 * template, but not always with the template's blanks: a marker matches with any run of blanks
 * (or none) where it has some, and with blanks before it. A '*' in a marker (SRV_MARKER_ANY) is
 * text the model chooses: a run of letters, digits and "_.:-". */
#ifndef NC_SERVER_MARKER_H
#define NC_SERVER_MARKER_H

#include <stdbool.h>
#include <stddef.h>

typedef enum mk_result { MK_NO, MK_YES, MK_PARTIAL } mk_result;

/* Whether marker m is at t[i..n) (after blanks): MK_YES with *end past it (not past blanks after
 * it), MK_PARTIAL when the text ends inside it, MK_NO otherwise. An empty or blank marker
 * matches nothing at i: MK_YES with *end == i. */
mk_result mk_match(const char *t, size_t n, size_t i, const char *m, size_t *end);

/* Where marker m (its blanks as mk_match takes them) first starts in t[from..n), at its first
 * non-blank byte: *at. MK_PARTIAL: it does not, but the text's end may be its beginning (*at
 * there). */
mk_result mk_find(const char *t, size_t n, size_t from, const char *m, size_t *at);

/* The offset of the first non-blank byte at or after i (n when none); blanks: space, tab, CR, LF. */
size_t mk_skip_blanks(const char *t, size_t n, size_t i);
bool mk_blank(char c);

/* m without the blanks that begin it (the bytes to search for). */
const char *mk_lead(const char *m);

#endif
