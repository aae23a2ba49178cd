/* Detokenisation: token pieces, whole sequences, and the UTF-8-safe stream. */
#include <limits.h>
#include <string.h>

#include "vocab/vocab_impl.h"

/* The rendered bytes of a token (built at load), or NULL for an id out of range. Control and
 * unknown tokens are empty unless special (llama.cpp's token_to_piece). */
static const char *piece_ref(const vocab *v, int32_t id, bool special, size_t *len) {
    if (id < 0 || id >= v->n_tokens) return NULL;
    const vocab_token *t = &v->tok[id];
    *len = 0;
    if (!special && (t->type == VOCAB_TT_CONTROL || t->type == VOCAB_TT_UNKNOWN)) return "";
    *len = t->piece_len;
    return v->pieces + t->piece_off;
}

int vocab_token_piece(const vocab *v, int32_t id, bool special, char *buf, int cap) {
    size_t n;
    const char *p = piece_ref(v, id, special, &n);
    if (!p) return -1;
    if (n > 0 && cap >= 0 && n <= (size_t)cap) memcpy(buf, p, n);
    return (int)n;
}

/* llama.cpp's detokenize drops one leading space of the very first piece when the tokenizer
 * adds a space prefix; that first piece may be an empty control token (a BOS), which then
 * keeps the space of the piece after it. */
static void strip_space(const char **p, size_t *n) {
    if (*n > 0 && **p == ' ') {
        (*p)++;
        (*n)--;
    }
}

int vocab_detokenize(const vocab *v, const int32_t *ids, int n, bool special, char *out, int cap) {
    size_t total = 0, room = cap > 0 ? (size_t)cap : 0;
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *p = piece_ref(v, ids[i], special, &len);
        if (!p) return -1;
        if (i == 0 && v->add_space_prefix) strip_space(&p, &len);
        if (len > 0 && total + len <= room) memcpy(out + total, p, len);
        total += len;
        if (total > INT_MAX) return -1;
    }
    return (int)total;
}

/* ---- the stream -------------------------------------------------------------------------------- */

/* Output of the UTF-8 filter; out NULL only counts. */
typedef struct text_out {
    char *out;
    size_t n;
} text_out;

static void put(text_out *o, const void *p, size_t n) {
    if (o->out) memcpy(o->out + o->n, p, n);
    o->n += n;
}

static void put_replacement(text_out *o) { put(o, "\xef\xbf\xbd", 3); }

/* Bytes in a well-formed character starting with lead (Unicode table 3-7), 0 if lead cannot
 * start one. */
static uint8_t char_need(uint8_t lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

/* Whether b may follow the held bytes: the second byte's range depends on the lead (no
 * overlongs, surrogates or code points above U+10FFFF). */
static bool continues(const vocab_stream *s, uint8_t b) {
    uint8_t lo = 0x80, hi = 0xBF;
    if (s->n_held == 1) {
        switch (s->held[0]) {
        case 0xE0: lo = 0xA0; break;
        case 0xED: hi = 0x9F; break;
        case 0xF0: lo = 0x90; break;
        case 0xF4: hi = 0x8F; break;
        default: break;
        }
    }
    return b >= lo && b <= hi;
}

static void feed_lead(vocab_stream *s, uint8_t b, text_out *o) {
    uint8_t need = char_need(b);
    if (need == 1) put(o, &b, 1);
    else if (need == 0) put_replacement(o);
    else {
        s->held[0] = b;
        s->n_held = 1;
        s->need = need;
    }
}

/* One byte through the filter: a character is released when complete; a held prefix that can
 * no longer complete becomes one U+FFFD and the byte starts afresh. */
static void feed(vocab_stream *s, uint8_t b, text_out *o) {
    if (s->n_held == 0) {
        feed_lead(s, b, o);
        return;
    }
    if (!continues(s, b)) {
        put_replacement(o);
        s->n_held = 0;
        feed_lead(s, b, o);
        return;
    }
    s->held[s->n_held++] = b;
    if (s->n_held == s->need) {
        put(o, s->held, s->n_held);
        s->n_held = 0;
    }
}

static void feed_all(vocab_stream *s, const char *p, size_t n, text_out *o) {
    for (size_t i = 0; i < n; i++) feed(s, (uint8_t)p[i], o);
}

void vocab_stream_init(vocab_stream *s, const vocab *v) { *s = (vocab_stream){.v = v}; }
void vocab_stream_set_special(vocab_stream *s, bool special) { s->special = special; }
void vocab_stream_set_from_start(vocab_stream *s, bool from_start) {
    s->strip_space = from_start && s->v->add_space_prefix;
}

int vocab_stream_push(vocab_stream *s, int32_t id, char *out, int cap) {
    size_t n;
    const char *p = piece_ref(s->v, id, s->special, &n);
    if (!p) return -1;
    if (s->strip_space) strip_space(&p, &n);
    vocab_stream trial = *s; /* measure first, so that a push that does not fit changes nothing */
    text_out count = {NULL, 0};
    feed_all(&trial, p, n, &count);
    if (cap < 0 || count.n > (size_t)cap) return (int)count.n;
    text_out o = {out, 0};
    feed_all(s, p, n, &o);
    s->strip_space = false;
    return (int)o.n;
}

int vocab_stream_flush(vocab_stream *s, char *out, int cap) {
    if (s->n_held == 0) return 0;
    if (cap < 3) return 3;
    text_out o = {out, 0};
    put_replacement(&o);
    s->n_held = 0;
    return (int)o.n;
}
