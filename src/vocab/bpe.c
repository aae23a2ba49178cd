/* BPE encoding, as Hugging Face tokenizers' BPE model (which made the reference vectors) and
 * llama.cpp's llm_tokenizer_bpe do it:
 * - VOCAB_BPE (byte-level): the pre-tokenizer cuts the text into words; each word starts as
 *   one symbol per byte (the token of the byte's stand-in character); unless ignore_merges finds
 *   the whole word as a token, the adjacent pair with the lowest merge rank is merged (ties: the
 *   leftmost) until no pair is a merge.
 * - VOCAB_SPM_BPE (tokenizer.json of SentencePiece models): spaces become U+2581 with one in
 *   front (the Prepend and Replace normalizers, or the Metaspace pre-tokenizer), the fragment is
 *   one word of characters (Metaspace with split: one word per U+2581 and what follows it), a
 *   character without a token becomes its <0xNN> byte tokens (byte_fallback) or the unknown
 *   token, then the same merging.
 * Symbols are token ids and merges are looked up by id pair, so no strings are built. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <stdlib.h>
#include <string.h>

#include "vocab/vocab_impl.h"

/* ---- the merge table ---------------------------------------------------------------------- */

static size_t pair_hash(int32_t left, int32_t right) {
    uint64_t k = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    k *= 0x9E3779B97F4A7C15ull;
    return (size_t)(k ^ (k >> 29));
}

static const bpe_merge *merge_find(const vocab *v, int32_t left, int32_t right) {
    if (!v->merges) return NULL;
    for (size_t i = pair_hash(left, right) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        const bpe_merge *m = &v->merges[i];
        if (m->left < 0) return NULL;
        if (m->left == left && m->right == right) return m;
    }
}

int bpe_merges_init(vocab *v, size_t n, const char *where, nc_err *err) {
    size_t slots = 16;
    while (slots < 2 * n) slots *= 2; /* load factor <= 1/2 */
    v->merges = malloc(slots * sizeof *v->merges);
    if (!v->merges) return nc_fail(err, "%s: out of memory for %zu merges", where, n);
    memset(v->merges, 0xff, slots * sizeof *v->merges);
    v->merge_mask = slots - 1;
    v->n_merges = 0;
    return 0;
}

void bpe_merge_add(vocab *v, const char *left, size_t left_len, const char *right, size_t right_len) {
    int32_t rank = v->n_merges++;
    int32_t a = vocab_find(v, left, left_len), b = vocab_find(v, right, right_len);
    if (a < 0 || b < 0 || left_len + right_len > 1024) return; /* no real token is that long */
    char both[1024];
    memcpy(both, left, left_len);
    memcpy(both + left_len, right, right_len);
    int32_t id = vocab_find(v, both, left_len + right_len);
    if (id < 0) return;
    size_t i = pair_hash(a, b) & v->merge_mask;
    for (; v->merges[i].left >= 0; i = (i + 1) & v->merge_mask)
        if (v->merges[i].left == a && v->merges[i].right == b) return;
    v->merges[i] = (bpe_merge){a, b, rank, id};
}

/* ---- byte-level tables -------------------------------------------------------------------- */

/* The code point of the UTF-8 character at s (length *k), or -1 (then *k = 1) if malformed. */
static int32_t utf8_cp(const unsigned char *s, size_t n, size_t *k) {
    *k = 1;
    if (s[0] < 0x80) return s[0];
    size_t len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC0 ? 2 : 0;
    if (len == 0 || len > n) return -1;
    int32_t cp = s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    *k = len;
    return cp;
}

size_t bytelevel_decode(const char *s, size_t n, char *out, bool *clean) {
    size_t o = 0;
    *clean = true;
    for (size_t i = 0; i < n;) {
        size_t k;
        int32_t cp = utf8_cp((const unsigned char *)s + i, n - i, &k);
        int b = cp >= 0 ? bytelevel_byte((uint32_t)cp) : -1;
        if (b >= 0) out[o++] = (char)b;
        else {
            memcpy(out + o, s + i, k);
            o += k;
            *clean = false;
        }
        i += k;
    }
    return o;
}

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* The normal token whose rendered bytes are s[0..n), or -1. */
static int32_t raw_find(const vocab *v, const char *s, size_t n) {
    for (size_t i = fnv1a(s, n) & v->mask;; i = (i + 1) & v->mask) {
        int32_t id = v->raw_slots[i];
        if (id < 0) return -1;
        const vocab_token *t = &v->tok[id];
        if (t->piece_len == n && memcmp(v->pieces + t->piece_off, s, n) == 0) return id;
    }
}

/* Normal tokens whose text is all stand-in characters, by the bytes they stand for (distinct:
 * the mapping is one-to-one and texts are distinct). */
static int index_raw(vocab *v, const char *where, nc_err *err) {
    v->raw_slots = malloc((v->mask + 1) * sizeof *v->raw_slots);
    if (!v->raw_slots) return nc_fail(err, "%s: out of memory for the byte index", where);
    memset(v->raw_slots, 0xff, (v->mask + 1) * sizeof *v->raw_slots);
    char buf[1024];
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const vocab_token *t = &v->tok[id];
        bool clean;
        if (t->type != VOCAB_TT_NORMAL || t->text_len > sizeof buf) continue;
        bytelevel_decode(v->text + t->text_off, t->text_len, buf, &clean);
        if (!clean || t->piece_len == 0 || raw_find(v, v->pieces + t->piece_off, t->piece_len) >= 0) continue;
        size_t i = fnv1a(v->pieces + t->piece_off, t->piece_len) & v->mask;
        while (v->raw_slots[i] >= 0) i = (i + 1) & v->mask;
        v->raw_slots[i] = id;
    }
    return 0;
}

int bpe_prepare(vocab *v, const char *where, nc_err *err) {
    if (v->kind != VOCAB_BPE) return 0;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = bytelevel_cp((uint8_t)b);
        char s[2] = {(char)cp, 0};
        size_t n = 1;
        if (cp >= 0x80) {
            s[0] = (char)(0xC0 | (cp >> 6));
            s[1] = (char)(0x80 | (cp & 0x3F));
            n = 2;
        }
        v->unit_tok[b] = vocab_find(v, s, n);
    }
    return index_raw(v, where, err);
}

/* ---- merging ------------------------------------------------------------------------------- */

typedef struct bpe_sym {
    int32_t id, prev, next; /* id -1: merged into its left neighbour */
} bpe_sym;

typedef struct bpe_cand {
    int32_t rank, pos, id; /* merge sym[pos] with its right neighbour into id */
} bpe_cand;

typedef struct bpe_session {
    const vocab *v;
    bpe_sym *sym;
    size_t n_sym, cap_sym;
    bpe_cand *heap;
    size_t n_heap, cap_heap;
    int32_t last_unk;       /* the symbol holding a fused unknown, or -1 */
    pt_work pt;
    char *norm;             /* VOCAB_SPM_BPE: the normalised fragment */
} bpe_session;

static bool cand_before(const bpe_cand *a, const bpe_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static bool heap_push(bpe_session *s, bpe_cand c) {
    if (s->n_heap == s->cap_heap) {
        size_t cap = s->cap_heap ? 2 * s->cap_heap : 64;
        bpe_cand *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return false;
        s->heap = h;
        s->cap_heap = cap;
    }
    size_t i = s->n_heap++;
    while (i > 0 && cand_before(&c, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = c;
    return true;
}

static bpe_cand heap_pop(bpe_session *s) {
    bpe_cand top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0;
    for (;;) {
        size_t best = i, l = 2 * i + 1, r = l + 1;
        const bpe_cand *b = &last;
        if (l < s->n_heap && cand_before(&s->heap[l], b)) { best = l; b = &s->heap[l]; }
        if (r < s->n_heap && cand_before(&s->heap[r], b)) best = r;
        if (best == i) break;
        s->heap[i] = s->heap[best];
        i = best;
    }
    if (s->n_heap > 0) s->heap[i] = last;
    return top;
}

static bool propose(bpe_session *s, int32_t pos) {
    if (pos < 0 || s->sym[pos].next < 0) return true;
    const bpe_merge *m = merge_find(s->v, s->sym[pos].id, s->sym[s->sym[pos].next].id);
    return !m || heap_push(s, (bpe_cand){m->rank, pos, m->id});
}

static bool push_sym(bpe_session *s, int32_t id) {
    if (s->n_sym == s->cap_sym) {
        size_t cap = s->cap_sym ? 2 * s->cap_sym : 64;
        bpe_sym *y = realloc(s->sym, cap * sizeof *y);
        if (!y) return false;
        s->sym = y;
        s->cap_sym = cap;
    }
    int32_t i = (int32_t)s->n_sym++;
    s->sym[i] = (bpe_sym){id, i - 1, -1};
    if (i > 0) s->sym[i - 1].next = i;
    return true;
}

/* A unit with no token: the unknown token (consecutive ones fused into one when fuse_unk),
 * else nothing, as Hugging Face's BPE model does. */
static bool push_unknown(bpe_session *s) {
    const vocab *v = s->v;
    if (v->unk < 0) return true;
    if (v->fuse_unk && s->last_unk >= 0 && s->last_unk == (int32_t)s->n_sym - 1) return true;
    s->last_unk = (int32_t)s->n_sym;
    return push_sym(s, v->unk);
}

/* The merge loop of tokenizers' Word::merge_all: a queued merge is stale once its left symbol
 * is gone or the pair now there does not merge into the same token. */
static bool merge_all(bpe_session *s) {
    s->n_heap = 0;
    for (int32_t i = 0; i + 1 < (int32_t)s->n_sym; i++)
        if (!propose(s, i)) return false;
    while (s->n_heap > 0) {
        bpe_cand c = heap_pop(s);
        bpe_sym *l = &s->sym[c.pos];
        if (l->id < 0 || l->next < 0) continue;
        bpe_sym *r = &s->sym[l->next];
        const bpe_merge *m = merge_find(s->v, l->id, r->id);
        if (!m || m->id != c.id) continue;
        l->id = c.id;
        r->id = -1;
        l->next = r->next;
        if (r->next >= 0) s->sym[r->next].prev = c.pos;
        if (!propose(s, l->prev) || !propose(s, c.pos)) return false;
    }
    return true;
}

static int merge_and_emit(bpe_session *s, tok_sink *sink, nc_err *err) {
    if (s->n_sym == 0) return 0;
    if (!merge_all(s)) return nc_fail(err, "tokenize: out of memory");
    for (int32_t i = 0; i >= 0; i = s->sym[i].next) sink_put(sink, s->sym[i].id);
    return 0;
}

static void start_word(bpe_session *s) {
    s->n_sym = 0;
    s->last_unk = -1;
}

/* ---- byte-level words ---------------------------------------------------------------------- */

static int encode_bytes(bpe_session *s, const unsigned char *w, size_t n, tok_sink *sink, nc_err *err) {
    const vocab *v = s->v;
    if (v->ignore_merges || n == 1) {
        int32_t id = raw_find(v, (const char *)w, n);
        if (id >= 0) {
            sink_put(sink, id);
            return 0;
        }
    }
    start_word(s);
    for (size_t i = 0; i < n; i++) {
        int32_t id = v->unit_tok[w[i]];
        if (!(id >= 0 ? push_sym(s, id) : push_unknown(s))) return nc_fail(err, "tokenize: out of memory");
    }
    return merge_and_emit(s, sink, err);
}

static int encode_bytelevel(bpe_session *s, const char *text, size_t len, tok_sink *sink, nc_err *err) {
    if (pretok_split(s->v->pre, text, len, &s->pt, err)) return -1;
    for (size_t i = 0; i < s->pt.n_pieces; i++) {
        const pt_piece *p = &s->pt.pieces[i];
        if (encode_bytes(s, (const unsigned char *)text + p->off, p->len, sink, err)) return -1;
    }
    return 0;
}

/* ---- character words (SentencePiece-style tokenizer.json) --------------------------------- */

#define SPACE_MARK "\xe2\x96\x81" /* U+2581 */

static bool starts_with_space(const char *text, size_t len) {
    return (len > 0 && text[0] == ' ') || (len >= 3 && memcmp(text, SPACE_MARK, 3) == 0);
}

/* The Prepend("▁") and Replace(" ", "▁") normalizers; Metaspace prepends only to text that
 * does not start with a space (or a mark) already. */
static char *normalize_spaces(bpe_session *s, const char *text, size_t len, bool prefix, size_t *out_len) {
    if (s->v->prefix_unless_space && starts_with_space(text, len)) prefix = false;
    size_t spaces = prefix;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    char *buf = realloc(s->norm, len + 2 * spaces + 1);
    if (!buf) return NULL;
    s->norm = buf;
    size_t o = 0;
    if (prefix) {
        memcpy(buf, SPACE_MARK, 3);
        o = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + o, SPACE_MARK, 3);
            o += 3;
        } else buf[o++] = text[i];
    }
    *out_len = o;
    return buf;
}

/* One character: its token, else its byte tokens (all of them must exist), else unknown. */
static bool push_char(bpe_session *s, const unsigned char *c, size_t k) {
    const vocab *v = s->v;
    int32_t id = vocab_find(v, (const char *)c, k);
    if (id >= 0) return push_sym(s, id);
    bool bytes = v->byte_fallback;
    for (size_t i = 0; bytes && i < k; i++) bytes = v->byte_tok[c[i]] >= 0;
    if (!bytes) return push_unknown(s);
    for (size_t i = 0; i < k; i++)
        if (!push_sym(s, v->byte_tok[c[i]])) return false;
    return true;
}

static int encode_char_word(bpe_session *s, const unsigned char *w, size_t n, tok_sink *sink, nc_err *err) {
    start_word(s);
    for (size_t i = 0; i < n;) {
        size_t k;
        utf8_cp(w + i, n - i, &k); /* malformed: one byte at a time */
        if (!push_char(s, w + i, k)) return nc_fail(err, "tokenize: out of memory");
        i += k;
    }
    return merge_and_emit(s, sink, err);
}

/* The end of the word starting at w: the next mark after its first character (Metaspace's
 * split, behaviour MergedWithNext), or n. */
static size_t word_end(const unsigned char *w, size_t n) {
    const unsigned char *m = n > 1 ? memmem(w + 1, n - 1, SPACE_MARK, 3) : NULL;
    return m ? (size_t)(m - w) : n;
}

static int encode_chars(bpe_session *s, const char *text, size_t len, bool space_prefix, tok_sink *sink,
                        nc_err *err) {
    size_t n;
    const unsigned char *w = (const unsigned char *)normalize_spaces(s, text, len, space_prefix && len > 0, &n);
    if (!w) return nc_fail(err, "tokenize: out of memory");
    if (!s->v->split_at_mark) return encode_char_word(s, w, n, sink, err);
    for (size_t at = 0, end; at < n; at += end) {
        end = word_end(w + at, n - at);
        if (encode_char_word(s, w + at, end, sink, err)) return -1;
    }
    return 0;
}

int bpe_encode(const vocab *v, const char *text, size_t len, bool space_prefix, tok_sink *sink, nc_err *err) {
    bpe_session s = {.v = v};
    int rc = v->kind == VOCAB_BPE ? encode_bytelevel(&s, text, len, sink, err)
                                  : encode_chars(&s, text, len, space_prefix, sink, err);
    free(s.sym);
    free(s.heap);
    free(s.norm);
    pt_work_free(&s.pt);
    return rc;
}
