/* SentencePiece's normalizer (sentencepiece/src/normalizer.cc), which llama.cpp leaves out but
 * SentencePiece and transformers apply to every text before encoding:
 * - the precompiled charsmap: a darts-clone double-array trie over byte strings whose values are
 *   offsets of NUL-terminated replacements (nmt_nfkc: NFKC, and \t \n \r to a space, control
 *   characters dropped); at each position the longest match is replaced, else one UTF-8
 *   character is copied (an ill-formed byte becomes U+FFFD); user-defined pieces pass unchanged;
 * - remove_extra_whitespaces: leading and trailing spaces dropped, runs of spaces made one;
 * - spaces escaped as U+2581, with one more in front as the dummy prefix.
 * The charsmap comes from the file: every index into it is checked. */
#include <stdlib.h>
#include <string.h>

#include "vocab/spm_proto.h"
#include "vocab/vocab_impl.h"

#define SPACE_MARK "\xe2\x96\x81"

struct spm_norm {
    uint32_t *trie;    /* double-array units */
    size_t n_units;
    char *repl;        /* replacement strings, with a NUL appended */
    size_t repl_len;
    bool remove_extra_ws;
    spm_bytes *user;   /* user-defined pieces: never normalized (texts in user_text) */
    size_t n_user;
    char *user_text;
};

/* ---- the double array (darts-clone) -------------------------------------------------------- */

static bool unit_has_leaf(uint32_t u) { return (u >> 8) & 1; }
static uint32_t unit_value(uint32_t u) { return u & ((1u << 31) - 1); }
static uint32_t unit_label(uint32_t u) { return u & ((1u << 31) | 0xff); }
static uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

/* Length of the longest key that prefixes s[0..n) and its value; 0 when none. */
static size_t longest_match(const spm_norm *nm, const unsigned char *s, size_t n, uint32_t *value) {
    size_t best = 0;
    if (!nm->n_units) return 0;
    uint32_t id = unit_offset(nm->trie[0]);
    for (size_t i = 0; i < n; i++) {
        id ^= s[i];
        if (id >= nm->n_units) return best;
        uint32_t u = nm->trie[id];
        if (unit_label(u) != s[i]) return best;
        id ^= unit_offset(u);
        if (id >= nm->n_units) return best;
        if (unit_has_leaf(u)) {
            best = i + 1;
            *value = unit_value(nm->trie[id]);
        }
    }
    return best;
}

/* ---- one step -------------------------------------------------------------------------------- */

/* Length of the well-formed UTF-8 character at s, or 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;
    if (s[0] < 0x80) return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) len = 2;
    else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        len = 3;
        if (s[0] == 0xe0) lo = 0xa0;
        else if (s[0] == 0xed) hi = 0x9f;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        len = 4;
        if (s[0] == 0xf0) lo = 0x90;
        else if (s[0] == 0xf4) hi = 0x8f;
    } else return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    return len;
}

/* NormalizePrefix: what the text at s becomes (*out, *out_len) and how many bytes it consumes. */
static size_t normalize_prefix(const spm_norm *nm, const unsigned char *s, size_t n, const char **out,
                               size_t *out_len) {
    size_t user = 0;
    for (size_t i = 0; i < nm->n_user; i++)
        if (nm->user[i].len > user && nm->user[i].len <= n && memcmp(s, nm->user[i].data, nm->user[i].len) == 0)
            user = nm->user[i].len;
    if (user) {
        *out = (const char *)s;
        *out_len = user;
        return user;
    }
    uint32_t value = 0;
    size_t len = longest_match(nm, s, n, &value);
    if (len && value < nm->repl_len) {
        *out = nm->repl + value;
        *out_len = strlen(*out);
        return len;
    }
    if ((len = utf8_len(s, n)) == 0) {
        *out = "\xef\xbf\xbd"; /* U+FFFD for one ill-formed byte */
        *out_len = 3;
        return 1;
    }
    *out = (const char *)s;
    *out_len = len;
    return len;
}

/* ---- the whole text ---------------------------------------------------------------------------- */

typedef struct obuf {
    char *p;
    size_t n, cap;
} obuf;

static bool put(obuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = 2 * (b->n + n) + 16;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

char *spm_norm_apply(const spm_norm *nm, const char *text, size_t len, bool space_prefix, uint32_t *out_len) {
    const unsigned char *s = (const unsigned char *)text;
    obuf b = {0};
    const char *r;
    size_t rn;
    if (!put(&b, "", 0)) return NULL;
    if (nm->remove_extra_ws) /* leading spaces */
        while (len > 0) {
            size_t used = normalize_prefix(nm, s, len, &r, &rn);
            if (rn != 1 || r[0] != ' ') break;
            s += used, len -= used;
        }
    if (len == 0) {
        *out_len = 0;
        return b.p;
    }
    bool ok = !space_prefix || put(&b, SPACE_MARK, 3);
    bool prev_space = nm->remove_extra_ws;
    while (ok && len > 0) {
        size_t used = normalize_prefix(nm, s, len, &r, &rn);
        while (prev_space && rn > 0 && r[0] == ' ') r++, rn--;
        for (size_t i = 0; ok && i < rn; i++) ok = r[i] == ' ' ? put(&b, SPACE_MARK, 3) : put(&b, r + i, 1);
        if (rn > 0) prev_space = r[rn - 1] == ' ';
        if (!nm->remove_extra_ws) prev_space = false;
        s += used, len -= used;
    }
    if (ok && nm->remove_extra_ws) /* trailing spaces */
        while (b.n >= 3 && memcmp(b.p + b.n - 3, SPACE_MARK, 3) == 0) b.n -= 3;
    if (!ok || b.n > UINT32_MAX) {
        free(b.p);
        return NULL;
    }
    b.p[b.n] = 0;
    *out_len = (uint32_t)b.n;
    return b.p;
}

/* ---- setup ----------------------------------------------------------------------------------------- */

void spm_norm_free(spm_norm *nm) {
    if (!nm) return;
    free(nm->trie);
    free(nm->repl);
    free(nm->user);
    free(nm->user_text);
    free(nm);
}

/* The charsmap blob: a little-endian uint32 trie size, the trie, then the replacements. */
static int read_charsmap(spm_norm *nm, spm_bytes blob, const char *where, nc_err *err) {
    uint32_t trie_bytes;
    if (blob.len <= 4)
        return nc_fail(err, "%s: normalizer_spec.precompiled_charsmap of %u bytes is too short", where, blob.len);
    memcpy(&trie_bytes, blob.data, 4);
    if (trie_bytes > blob.len - 4 || trie_bytes % 4)
        return nc_fail(err, "%s: normalizer_spec.precompiled_charsmap: trie size %u does not fit its %u bytes", where,
                       trie_bytes, blob.len);
    nm->n_units = trie_bytes / 4;
    nm->repl_len = blob.len - 4 - trie_bytes;
    nm->trie = malloc(trie_bytes ? trie_bytes : 1);
    nm->repl = malloc(nm->repl_len + 1);
    if (!nm->trie || !nm->repl) return nc_fail(err, "%s: out of memory for the normalizer", where);
    memcpy(nm->trie, blob.data + 4, trie_bytes);
    memcpy(nm->repl, blob.data + 4 + trie_bytes, nm->repl_len);
    nm->repl[nm->repl_len] = 0; /* every replacement ends inside the copy */
    return 0;
}

int spm_norm_new(spm_norm **out, const struct spm_proto *m, const char *where, nc_err *err) {
    *out = NULL;
    if (m->charsmap.len == 0 && !m->remove_extra_whitespaces) return 0; /* nothing but escaping */
    spm_norm *nm = calloc(1, sizeof *nm);
    if (!nm) return nc_fail(err, "%s: out of memory", where);
    nm->remove_extra_ws = m->remove_extra_whitespaces;
    int rc = m->charsmap.len ? read_charsmap(nm, m->charsmap, where, err) : 0;
    size_t n_user = 0, bytes = 0;
    for (uint32_t i = 0; i < m->n_pieces; i++)
        if (m->pieces[i].type == SPM_USER_DEFINED) n_user++, bytes += m->pieces[i].text.len;
    if (rc == 0 && n_user && (!(nm->user = malloc(n_user * sizeof *nm->user)) || !(nm->user_text = malloc(bytes + 1))))
        rc = nc_fail(err, "%s: out of memory", where);
    for (uint32_t i = 0, off = 0; rc == 0 && i < m->n_pieces; i++) {
        const spm_bytes *t = &m->pieces[i].text;
        if (m->pieces[i].type != SPM_USER_DEFINED || !t->len) continue;
        memcpy(nm->user_text + off, t->data, t->len);
        nm->user[nm->n_user++] = (spm_bytes){nm->user_text + off, t->len};
        off += t->len;
    }
    if (rc) {
        spm_norm_free(nm);
        return -1;
    }
    *out = nm;
    return 0;
}
