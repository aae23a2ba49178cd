/* Markers matched with their blanks taken loosely (see marker.h). */
#include "server/marker.h"

#include <string.h>

#include "server/chat_format.h"

bool mk_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

size_t mk_skip_blanks(const char *t, size_t n, size_t i) {
    while (i < n && mk_blank(t[i])) i++;
    return i;
}

const char *mk_lead(const char *m) {
    while (*m && mk_blank(*m)) m++;
    return m;
}

static bool any_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("_.:-", c);
}

mk_result mk_match(const char *t, size_t n, size_t i, const char *m, size_t *end) {
    m = mk_lead(m);
    *end = i;
    if (!*m) return MK_YES;
    i = mk_skip_blanks(t, n, i);
    while (*m) {
        if (mk_blank(*m)) { /* any run of blanks, or none */
            while (*m && mk_blank(*m)) m++;
            if (*m) i = mk_skip_blanks(t, n, i);
            continue;
        }
        if (i == n) return MK_PARTIAL;
        if (*m == SRV_MARKER_ANY) {
            size_t s = i;
            while (i < n && any_char(t[i])) i++;
            if (i == n) return MK_PARTIAL;
            if (i == s) return MK_NO;
            m++;
            continue;
        }
        if (t[i] != *m) return MK_NO;
        i++, m++;
    }
    *end = i;
    return MK_YES;
}

mk_result mk_find(const char *t, size_t n, size_t from, const char *m, size_t *at) {
    m = mk_lead(m);
    for (size_t i = from; i < n; i++) {
        if (t[i] != *m) continue;
        size_t end;
        mk_result r = mk_match(t, n, i, m, &end);
        if (r == MK_NO) continue;
        *at = i;
        return r;
    }
    *at = n;
    return MK_NO;
}
