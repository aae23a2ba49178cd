/* Splitting a reply into reasoning, content and calls (see reply.h). */
#include "server/reply.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/marker.h"

void srv_text_put(srv_text *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (b->n + n + 1 > cap) cap *= 2;
        char *g = realloc(b->s, cap);
        if (!g) {
            b->oom = true;
            return;
        }
        b->s = g;
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

/* t[a..e) without the blanks at its end, and at its start when trim_left. */
static void put_trimmed(srv_text *b, const char *t, size_t a, size_t e, bool trim_left) {
    if (trim_left) a = mk_skip_blanks(t, e, a);
    while (e > a && mk_blank(t[e - 1])) e--;
    srv_text_put(b, t + a, e - a);
}

void srv_reply_free(srv_reply *r) {
    free(r->reasoning);
    free(r->content);
    srv_tool_calls_free(&r->calls);
    memset(r, 0, sizeof *r);
}

bool srv_reasoning_opened(const srv_reasoning_style *s, const char *prompt, size_t n) {
    if (!s || s->harmony) return false;
    while (n > 0 && mk_blank(prompt[n - 1])) n--;
    size_t k = strlen(s->open);
    return n >= k && !memcmp(prompt + n - k, s->open, k);
}

/* The reasoning at the start of t[0..n): where it starts (*rs) and ends (*re), and where what
 * follows it starts (*after); false when there is none. *hold: the text may still become, or
 * end, reasoning, from *re on (streaming). */
static bool find_reasoning(const srv_reply_opts *o, const char *t, size_t n, bool done, size_t *rs, size_t *re,
                           size_t *after, bool *hold) {
    const srv_reasoning_style *s = o->reasoning;
    *hold = false;
    *rs = 0;
    if (!o->in_reasoning) {
        mk_result r = mk_match(t, n, 0, s->open, rs);
        if (r == MK_PARTIAL && !done) { /* "<thi": wait */
            *re = *after = 0;
            *hold = true;
            return true;
        }
        if (r != MK_YES) return false;
    }
    size_t at;
    mk_result r = mk_find(t, n, *rs, s->close, &at);
    if (r == MK_YES) {
        *re = at;
        mk_match(t, n, at, s->close, after);
    } else { /* open to the end: cut, or still being written */
        *re = r == MK_PARTIAL && !done ? at : n;
        *after = n;
        *hold = !done;
    }
    return true;
}

bool srv_call_opened(const srv_call_syntax *sx, const char *prompt, size_t n) {
    if (!sx || !sx->text_recipient || !sx->call_open) return false;
    size_t k = strlen(sx->call_open);
    return n >= k && !memcmp(prompt + n - k, sx->call_open, k);
}

/* A reply t[a..n) that opens with a call (its call_open the prompt's): whole, its calls with the
 * marker the prompt wrote put back before them; 1 when it holds none (then it reads as any other). */
static int opened_calls(const srv_reply_opts *o, const char *t, size_t n, size_t a, srv_text *content,
                        srv_tool_calls *calls) {
    size_t k = strlen(o->calls->call_open);
    char *s = malloc(k + n - a + 1);
    if (!s) return -1;
    memcpy(s, o->calls->call_open, k);
    memcpy(s + k, t + a, n - a);
    s[k + n - a] = 0;
    int rc = srv_tool_calls_parse(o->calls, s, k + n - a, o->tools_json, !o->first_call_only, calls);
    if (!rc && calls->n) /* the calls start at the marker, at 0: the content is what they did not take */
        srv_text_put(content, s + calls->tail, k + n - a - calls->tail);
    else if (!rc)
        rc = 1;
    free(s);
    return rc;
}

/* The content t[a..n): the text before the calls and what they did not take. */
static int split_content(const srv_reply_opts *o, const char *t, size_t n, size_t a, bool done, srv_text *content,
                         srv_tool_calls *calls) {
    if (a > 0) a = mk_skip_blanks(t, n, a); /* the blanks after the reasoning are its */
    if (o->opened) { /* the prompt ended with a call's marker: the reply opens with its recipient */
        size_t end;
        mk_result r = srv_text_recipient(o->opened, t, n, a, done, &end);
        if (r == MK_PARTIAL) return 0;
        if (r == MK_YES) {
            a = end;
        } else if (o->calls == o->opened) { /* a call, maybe: held whole while streaming */
            if (!done && srv_call_head_possible(o->calls, t, n, a)) return 0;
            int rc = done ? opened_calls(o, t, n, a, content, calls) : 1;
            if (rc <= 0) return rc;
        }
    }
    if (!o->calls) {
        srv_text_put(content, t + a, n - a);
        return 0;
    }
    if (!done) {
        srv_text_put(content, t + a, srv_tool_content_ready(o->calls, t + a, n - a));
        return 0;
    }
    if (srv_tool_calls_parse(o->calls, t + a, n - a, o->tools_json, !o->first_call_only, calls)) return -1;
    if (!calls->n) {
        srv_text_put(content, t + a, n - a);
        return 0;
    }
    put_trimmed(content, t + a, 0, calls->content_end, false);
    srv_text_put(content, t + a + calls->tail, n - a - calls->tail);
    return 0;
}

int srv_reply_parse(const srv_reply_opts *o, const char *text, size_t n, bool done, srv_reply *out) {
    *out = (srv_reply){0};
    srv_text reasoning = {0}, content = {0};
    const char *t = text ? text : "";
    int rc = 0;
    if (o->reasoning && o->reasoning->harmony) {
        rc = srv_harmony_parse(o, t, n, done, &reasoning, &content, &out->calls);
    } else {
        size_t rs, re, after = 0;
        bool hold;
        if (o->reasoning && find_reasoning(o, t, n, done, &rs, &re, &after, &hold)) {
            put_trimmed(&reasoning, t, rs, re, true); /* (streamed: trailing blanks wait for what follows) */
            if (!hold) rc = split_content(o, t, n, after, done, &content, &out->calls);
        } else {
            rc = split_content(o, t, n, 0, done, &content, &out->calls);
        }
    }
    srv_text_put(&reasoning, "", 0);
    srv_text_put(&content, "", 0);
    if (rc || reasoning.oom || content.oom) {
        free(reasoning.s);
        free(content.s);
        srv_tool_calls_free(&out->calls);
        return -1;
    }
    out->reasoning = reasoning.s;
    out->n_reasoning = reasoning.n;
    out->content = content.s;
    out->n_content = content.n;
    return 0;
}

/* ---- The reasoning budget ------------------------------------------------------------------- */

void srv_think_watch_init(srv_think_watch *w, bool in_reasoning) {
    *w = (srv_think_watch){.state = in_reasoning ? SRV_THINK_IN : SRV_THINK_BEFORE};
}

bool srv_think_budget_spent(srv_think_watch *w, const srv_reasoning_style *s, const char *text, size_t n,
                            int32_t budget) {
    if (w->state == SRV_THINK_BEFORE) {
        size_t end;
        mk_result r = mk_match(text, n, 0, s->open, &end);
        if (r == MK_PARTIAL) return false;
        if (r == MK_NO) {
            w->state = SRV_THINK_PAST;
            return false;
        }
        w->state = SRV_THINK_IN;
        w->scan = end;
        if (budget > 0) return false;
        w->state = SRV_THINK_PAST;
        return true;
    }
    if (w->state != SRV_THINK_IN) return false;
    w->tokens++;
    size_t k = strlen(s->close), from = w->scan > k ? w->scan - k : 0, at;
    w->scan = n;
    if (mk_find(text, n, from, s->close, &at) == MK_YES) {
        w->state = SRV_THINK_PAST;
        return false;
    }
    if (w->tokens < budget) return false;
    w->state = SRV_THINK_PAST;
    return true;
}

/* ---- The grammar of a reasoning a prompt opened -------------------------------------------- */

/* The code points of UTF-8 text s (at most cap). */
static int code_points(const char *s, uint32_t *cp, int cap) {
    const unsigned char *u = (const unsigned char *)s;
    int k = 0;
    while (*u && k < cap) {
        int len = *u < 0x80 ? 1 : (*u & 0xE0) == 0xC0 ? 2 : (*u & 0xF0) == 0xE0 ? 3 : 4;
        uint32_t v = len == 1 ? *u : len == 2 ? *u & 0x1Fu : len == 3 ? *u & 0x0Fu : *u & 0x07u;
        for (int i = 1; i < len && u[i]; i++) v = v << 6 | (u[i] & 0x3Fu);
        cp[k++] = v;
        u += len;
    }
    return k;
}

/* After i characters of the marker matched and then x: how many match now (the longest prefix
 * of the marker that ends the text read). */
static int next_state(const uint32_t *m, int k, int i, uint32_t x) {
    for (int l = i + 1 < k ? i + 1 : k; l > 0; l--) {
        if (m[l - 1] != x) continue;
        bool ok = true;
        for (int q = 0; q < l - 1 && ok; q++) ok = m[q] == m[i - (l - 1) + q];
        if (ok) return l;
    }
    return 0;
}

/* Rules "NAME-I": any text without the marker, then the marker (an automaton over its
 * characters: state I is how much of it the text ends with). */
static void until_rules(FILE *g, const char *name, const char *marker, const char *then) {
    uint32_t m[64];
    int k = code_points(marker, m, 64);
    for (int i = 0; i < k; i++) {
        fprintf(g, "%s-%d ::=", name, i);
        char others[64 * 12] = "";
        size_t used = 0;
        for (int c = 0; c < k; c++) {
            bool seen = false;
            for (int d = 0; d < c; d++) seen = seen || m[d] == m[c];
            if (seen) continue;
            int j = next_state(m, k, i, m[c]);
            if (j == k) fprintf(g, " [\\U%08X] %s |", m[c], then);
            else fprintf(g, " [\\U%08X] %s-%d |", m[c], name, j);
            used += (size_t)snprintf(others + used, sizeof others - used, "\\U%08X", m[c]);
        }
        fprintf(g, " [^%s] %s-0\n", others, name);
    }
}

char *srv_reasoning_lead(const srv_reasoning_style *s) {
    char *text = NULL;
    size_t len = 0;
    FILE *g = open_memstream(&text, &len);
    if (!g) return NULL;
    if (s->harmony) { /* an analysis message may come first; the reply goes on in a new one */
        fprintf(g, "lead ::= ( \"<|channel|>analysis<|message|>\" lead-body-0 )?\n");
        until_rules(g, "lead-body", s->close, "\"<|start|>assistant\"");
    } else {
        fprintf(g, "lead ::= lead-body-0\n");
        until_rules(g, "lead-body", s->close, "[ \\t\\r\\n]{0,4}");
    }
    return fclose(g) ? (free(text), NULL) : text;
}
