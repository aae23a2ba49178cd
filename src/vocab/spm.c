/* SentencePiece ("SPM") encoding of one text fragment, as llama.cpp's llm_tokenizer_spm_session:
 * the text is split into UTF-8 characters; then, repeatedly, the adjacent pair whose
 * concatenation is a token with the highest score is merged (ties: the leftmost pair), until no
 * adjacent pair forms a token. Each remaining symbol is its token, or else its bytes as <0xNN>
 * tokens. A binary heap keeps the candidate pairs, so a fragment of n characters costs
 * O(n log n). */
#include <stdlib.h>
#include <string.h>

#include "vocab/vocab_impl.h"

typedef struct spm_sym {
    int32_t prev, next;  /* neighbours in the current segmentation, -1 at the ends */
    uint32_t start, len; /* bytes of the escaped text; len 0 once merged into its left neighbour */
} spm_sym;

typedef struct spm_pair {
    float score;
    int32_t left, right;
    uint32_t len; /* left.len + right.len when the pair was proposed */
} spm_pair;

typedef struct spm_session {
    const vocab *v;
    const char *text;
    spm_sym *sym;
    spm_pair *heap;
    size_t n_heap, cap_heap;
} spm_session;

/* ---- the pair heap (a max-heap under pair_before) ------------------------------------------- */

/* llama.cpp's llm_bigram_spm::comparator: the higher score first, then the leftmost. */
static bool pair_before(const spm_pair *a, const spm_pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void swap_pairs(spm_pair *a, spm_pair *b) {
    spm_pair t = *a;
    *a = *b;
    *b = t;
}

static bool heap_push(spm_session *s, spm_pair p) {
    if (s->n_heap == s->cap_heap) {
        size_t cap = s->cap_heap ? 2 * s->cap_heap : 64;
        spm_pair *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return false;
        s->heap = h;
        s->cap_heap = cap;
    }
    size_t i = s->n_heap++;
    s->heap[i] = p;
    while (i > 0 && pair_before(&s->heap[i], &s->heap[(i - 1) / 2])) {
        swap_pairs(&s->heap[i], &s->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    return true;
}

static spm_pair heap_pop(spm_session *s) {
    spm_pair top = s->heap[0];
    s->heap[0] = s->heap[--s->n_heap];
    for (size_t i = 0;;) {
        size_t best = i, l = 2 * i + 1, r = l + 1;
        if (l < s->n_heap && pair_before(&s->heap[l], &s->heap[best])) best = l;
        if (r < s->n_heap && pair_before(&s->heap[r], &s->heap[best])) best = r;
        if (best == i) break;
        swap_pairs(&s->heap[i], &s->heap[best]);
        i = best;
    }
    return top;
}

/* ---- symbols and merging ---------------------------------------------------------------------- */

/* Character length from the lead byte's high nibble, as llama.cpp's unicode_len_utf8: invalid
 * UTF-8 is not checked, so a stray lead byte swallows the bytes after it (up to the end). */
static uint32_t char_len(unsigned char c) {
    static const uint8_t by_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return by_nibble[c >> 4];
}

static int32_t split_chars(const char *text, uint32_t n, spm_sym *sym) {
    int32_t count = 0;
    for (uint32_t off = 0; off < n; count++) {
        uint32_t len = char_len((unsigned char)text[off]);
        if (len > n - off) len = n - off;
        sym[count] = (spm_sym){count - 1, -1, off, len};
        if (count > 0) sym[count - 1].next = count;
        off += len;
    }
    return count;
}

/* Proposes merging left and right if their concatenation is a token. */
static bool try_pair(spm_session *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return true;
    uint32_t len = s->sym[left].len + s->sym[right].len;
    int32_t id = vocab_find(s->v, s->text + s->sym[left].start, len);
    if (id < 0) return true;
    return heap_push(s, (spm_pair){s->v->tok[id].score, left, right, len});
}

static bool merge_all(spm_session *s, int32_t n_sym) {
    for (int32_t i = 1; i < n_sym; i++)
        if (!try_pair(s, i - 1, i)) return false;
    while (s->n_heap > 0) {
        spm_pair p = heap_pop(s);
        spm_sym *l = &s->sym[p.left], *r = &s->sym[p.right];
        /* A pair is stale once either side has changed since it was proposed. */
        if (l->len == 0 || r->len == 0 || l->len + r->len != p.len) continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) s->sym[r->next].prev = p.left;
        if (!try_pair(s, l->prev, p.left) || !try_pair(s, p.left, l->next)) return false;
    }
    return true;
}

/* ---- output --------------------------------------------------------------------------------- */

/* A symbol that is no token: its bytes as byte tokens. When the vocabulary lacks one of them
 * (llama.cpp would throw here), the symbol becomes the unknown token instead, as
 * SentencePiece does without byte fallback. */
static int emit_unknown(const vocab *v, const unsigned char *s, uint32_t n, tok_sink *sink, nc_err *err) {
    uint32_t i = 0;
    while (i < n && v->byte_tok[s[i]] >= 0) i++;
    if (i == n) {
        for (i = 0; i < n; i++) sink_put(sink, v->byte_tok[s[i]]);
        return 0;
    }
    if (v->unk < 0)
        return nc_fail(err, "cannot encode byte 0x%02X: the vocabulary has neither a byte token for it nor an "
                            "unknown token", s[i]);
    sink_put(sink, v->unk);
    return 0;
}

static int emit_symbols(const spm_session *s, tok_sink *sink, nc_err *err) {
    for (int32_t i = 0; i >= 0; i = s->sym[i].next) {
        const spm_sym *y = &s->sym[i];
        int32_t id = vocab_find(s->v, s->text + y->start, y->len);
        if (id >= 0) sink_put(sink, id);
        else if (emit_unknown(s->v, (const unsigned char *)s->text + y->start, y->len, sink, err)) return -1;
    }
    return 0;
}

/* ---- entry ------------------------------------------------------------------------------------ */

#define SPACE_MARK "\xe2\x96\x81" /* U+2581 */

/* Spaces become U+2581 (llama_escape_whitespace), with one more in front if space_prefix. */
static char *escape_spaces(const char *text, size_t len, bool space_prefix, uint32_t *out_len) {
    size_t spaces = 0;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    char *buf = malloc(len + 2 * spaces + 3 + 1);
    if (!buf) return NULL;
    size_t o = 0;
    if (space_prefix) {
        memcpy(buf, SPACE_MARK, 3);
        o = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] != ' ') {
            buf[o++] = text[i];
            continue;
        }
        memcpy(buf + o, SPACE_MARK, 3);
        o += 3;
    }
    *out_len = (uint32_t)o;
    return buf;
}

int spm_encode(const vocab *v, const char *text, size_t len, bool space_prefix, tok_sink *sink, nc_err *err) {
    uint32_t n = 0;
    char *buf = v->norm ? spm_norm_apply(v->norm, text, len, space_prefix, &n) : escape_spaces(text, len, space_prefix, &n);
    spm_session s = {.v = v, .text = buf};
    if (buf) s.sym = malloc((n ? n : 1) * sizeof *s.sym);
    int rc;
    if (!s.sym || !merge_all(&s, split_chars(buf, n, s.sym)))
        rc = nc_fail(err, "tokenize: out of memory for a text fragment of %zu bytes", len);
    else rc = n > 0 ? emit_symbols(&s, sink, err) : 0;
    free(s.heap);
    free(s.sym);
    free(buf);
    return rc;
}
