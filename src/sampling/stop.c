/* Stop rules and the text stream of one sequence. Text is held back while it could still be the
 * start of a stop string, so a stop string split across tokens is never shown: every match
 * starts inside the held text, because any text that could begin one was held. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "sampling/sampler.h"

struct nc_stopper {
    const nc_model *m;
    nc_stop_params p;      /* arrays point at the copies below */
    char **stop;
    int32_t *stop_ids;
    nc_detok *dt;
    char *held;            /* text not shown yet; its first n_shown bytes were returned last call */
    int32_t n_held, cap_held, n_shown;
    int32_t n_tokens;
    nc_finish finish;
};

const char *nc_finish_name(nc_finish f) {
    switch (f) {
    case NC_FINISH_STOP: return "stop";
    case NC_FINISH_LENGTH:
    case NC_FINISH_CONTEXT: return "length";
    case NC_FINISH_GRAMMAR: return "grammar";
    default: return "";
    }
}

int32_t stop_find(const char *const *stop, int32_t n_stop, const char *text, int32_t n_text) {
    int32_t first = -1;
    for (int32_t i = 0; i < n_stop; i++) {
        const char *hit = memmem(text, (size_t)n_text, stop[i], strlen(stop[i]));
        if (hit && (first < 0 || hit - text < first)) first = (int32_t)(hit - text);
    }
    return first;
}

bool stop_is_end_token(const nc_model *m, const nc_stop_params *p, int32_t token) {
    if (nc_token_is_eog(m, token)) return true;
    for (int32_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] == token) return true;
    return false;
}

/* The longest tail of text that is a proper prefix of some stop string: it must wait. */
static int32_t held_tail(const char *const *stop, int32_t n_stop, const char *text, int32_t n_text) {
    int32_t best = 0;
    for (int32_t i = 0; i < n_stop; i++) {
        int32_t len = (int32_t)strlen(stop[i]);
        for (int32_t k = len - 1 < n_text ? len - 1 : n_text; k > best; k--)
            if (memcmp(text + n_text - k, stop[i], (size_t)k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

static int copy_params(nc_stopper *s, const nc_stop_params *p, nc_err *err) {
    if (p->max_tokens < 0) return nc_fail(err, "max_tokens: %d is negative", p->max_tokens);
    if (p->n_stop < 0 || p->n_stop_ids < 0 || (p->n_stop && !p->stop) || (p->n_stop_ids && !p->stop_ids))
        return nc_fail(err, "stop rules: counts without arrays");
    s->p = *p;
    s->stop = calloc((size_t)p->n_stop + 1, sizeof *s->stop);
    s->stop_ids = malloc(((size_t)p->n_stop_ids + 1) * sizeof *s->stop_ids);
    if (!s->stop || !s->stop_ids) return nc_fail(err, "out of memory");
    for (int32_t i = 0; i < p->n_stop; i++) {
        if (!p->stop[i] || !*p->stop[i]) return nc_fail(err, "stop: string %d is empty", i);
        if (!(s->stop[i] = strdup(p->stop[i]))) return nc_fail(err, "out of memory");
    }
    if (p->n_stop_ids) memcpy(s->stop_ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof *s->stop_ids);
    s->p.stop = (const char *const *)s->stop;
    s->p.stop_ids = s->stop_ids;
    return 0;
}

int nc_stopper_new(nc_stopper **out, const nc_model *m, const nc_stop_params *p, nc_err *err) {
    *out = NULL;
    if (!m) return nc_fail(err, "stop rules need the model (its end-of-generation tokens and texts)");
    nc_stopper *s = calloc(1, sizeof *s);
    if (!s) return nc_fail(err, "out of memory");
    s->m = m;
    if (copy_params(s, p, err)) {
        nc_stopper_free(s);
        return -1;
    }
    s->cap_held = 4096;
    s->held = malloc((size_t)s->cap_held);
    s->dt = nc_detok_new(m);
    if (!s->held || !s->dt) {
        nc_stopper_free(s);
        return nc_fail(err, "out of memory");
    }
    *out = s;
    return 0;
}

void nc_stopper_free(nc_stopper *s) {
    if (!s) return;
    for (int32_t i = 0; s->stop && i < s->p.n_stop; i++) free(s->stop[i]);
    free(s->stop);
    free(s->stop_ids);
    free(s->held);
    nc_detok_free(s->dt);
    free(s);
}

int32_t nc_stopper_n_tokens(const nc_stopper *s) { return s->n_tokens; }

static bool reserve(nc_stopper *s, int32_t extra) {
    if (s->n_held + extra <= s->cap_held) return true;
    int32_t cap = 2 * (s->n_held + extra);
    char *grown = realloc(s->held, (size_t)cap);
    if (!grown) return false;
    s->held = grown;
    s->cap_held = cap;
    return true;
}

/* Append the completed text of a token (the detokenizer says how much room it needs). A piece
 * that cannot get the memory is dropped. */
static void append_token(nc_stopper *s, int32_t token) {
    int32_t room = s->cap_held - s->n_held;
    int n = nc_detok_push(s->dt, token, s->held + s->n_held, room);
    if (n > room) n = reserve(s, n) ? nc_detok_push(s->dt, token, s->held + s->n_held, n) : 0;
    if (n > 0) s->n_held += n;
}

/* The end of the stream: an incomplete character becomes U+FFFD. */
static void append_flush(nc_stopper *s) {
    if (reserve(s, 8)) s->n_held += nc_detok_flush(s->dt, s->held + s->n_held, 8);
}

static nc_finish finish(nc_stopper *s, nc_finish why, int32_t n_show, const char **text, int32_t *n_text) {
    s->finish = why;
    *text = s->held;
    *n_text = s->n_shown = n_show;
    return why;
}

nc_finish nc_stopper_push(nc_stopper *s, int32_t token, const char **text, int32_t *n_text) {
    memmove(s->held, s->held + s->n_shown, (size_t)(s->n_held - s->n_shown));
    s->n_held -= s->n_shown;
    s->n_shown = 0;
    if (s->finish) return finish(s, s->finish, 0, text, n_text);
    s->n_tokens++;
    if (stop_is_end_token(s->m, &s->p, token)) {
        append_flush(s);
        return finish(s, NC_FINISH_STOP, s->n_held, text, n_text);
    }
    append_token(s, token);
    bool last = s->p.max_tokens > 0 && s->n_tokens >= s->p.max_tokens;
    if (last) append_flush(s);
    int32_t at = stop_find(s->p.stop, s->p.n_stop, s->held, s->n_held);
    if (at >= 0) return finish(s, NC_FINISH_STOP, at, text, n_text);
    if (last) return finish(s, NC_FINISH_LENGTH, s->n_held, text, n_text);
    s->n_shown = s->n_held - held_tail(s->p.stop, s->p.n_stop, s->held, s->n_held);
    *text = s->held;
    *n_text = s->n_shown;
    return NC_FINISH_NONE;
}
