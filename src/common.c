#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int nc_fail(nc_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int nc_fail_prefix(nc_err *err, const char *fmt, ...) {
    if (err) {
        char old[sizeof err->msg];
        memcpy(old, err->msg, sizeof old);
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        size_t used = n < 0 ? 0 : (size_t)n < sizeof err->msg ? (size_t)n : sizeof err->msg - 1;
        size_t room = sizeof err->msg - 1 - used;
        size_t old_len = strnlen(old, sizeof old - 1);
        char *p = err->msg + used;
        if (room >= 2) { memcpy(p, ": ", 2); p += 2; room -= 2; }
        size_t k = old_len < room ? old_len : room;
        memcpy(p, old, k);
        p[k] = 0;
    }
    return -1;
}
