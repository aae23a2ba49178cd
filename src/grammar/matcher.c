/* The pushdown matcher. A stack is a chain of nodes (pos, parent): pos is the element to match
 * next, parent the stack to go on with when pos's alternative ends (-1: the grammar is done).
 * Nodes are hash-consed, so two equal stacks are one node id and a state (the set of stacks whose
 * top is a character class, plus node 0 meaning "complete") is a sorted id list. A reference at
 * the end of an alternative continues directly with the parent (a tail call), so x* loops return
 * to the very state they started from and the states of, e.g., a JSON string repeat.
 *
 * The matcher reads bytes: a state also carries the UTF-8 character being decoded; while it is
 * incomplete, only stacks whose class can still match some character with that prefix survive.
 *
 * States are interned (up to MAX_STATES) and each remembers its transition per byte, so masking a
 * vocabulary walks the token trie mostly through table lookups; past the limit new states are
 * used once and forgotten. When the node arena gets large, the live stacks are copied into a
 * fresh one and the caches dropped. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/trie.h"

#define COMPLETE 0            /* node id standing for "the grammar may end here" */
#define MAX_SET 2048          /* stacks in one state: more are dropped (an absurdly ambiguous grammar) */
/* Closure work (stacks expanded) allowed per mask and per token fed: a grammar whose sets of stacks
 * explode (ambiguity nested in recursion can double them at every character) gets a truncated
 * mask, or ends, instead of holding a server's engine for minutes. Real grammars use far less:
 * the JSON masks of bench/grammar.sh stay under a million. The fuzz harnesses' build takes a tenth:
 * under their sanitizers a full mask budget lasts seconds, and tests/fuzz/fuzz_gbnf.c checks
 * every mask of an input against per-token feeds within the fuzzer's per-input timeout. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define MASK_BUDGET 2000000
#define FEED_BUDGET 200000
#else
#define MASK_BUDGET 20000000
#define FEED_BUDGET 2000000
#endif
#define MAX_STATES (1 << 15)  /* interned states */
#define SOFT_NODES (1 << 20)  /* past this, the arena is compacted before the next step */
#define HARD_NODES (1 << 22)  /* a step needing more nodes fails (prunes) */
#define MASK_CACHE 32         /* whole masks remembered, by interned state */
#define UNKNOWN (-2)
#define DEAD (-1)

typedef struct node {
    int32_t pos, parent;
} node;

/* A state: a sorted set of node ids and the UTF-8 character under way. */
typedef struct sview {
    const int32_t *ids;
    int32_t n;
    uint32_t partial;  /* code point so far | remaining bytes << 21 | total bytes << 24; 0: none */
} sview;

typedef struct istate {
    int32_t off, n;    /* into set_pool */
    uint32_t partial;
    uint64_t hash;
    int32_t *next;     /* transitions (256, or 64 inside a character), allocated on first use */
} istate;

typedef struct ibuf {
    int32_t *v;
    int32_t n, cap;
} ibuf;

/* One depth of the trie walk: the state reached there. */
typedef struct frame {
    int32_t sid;       /* interned id, or -1: the set is in buf */
    ibuf buf;
    uint32_t partial;
} frame;

/* A mask computed for an interned state: the allowed tokens as bits. Generation revisits states
 * all the time (every character inside a JSON string leaves the state as it was), so a step
 * often costs a copy instead of a walk. */
typedef struct mask_entry {
    int32_t sid;       /* -1: empty */
    int32_t count;
    uint64_t *bits;
} mask_entry;

struct gr_matcher {
    const gr_grammar *g;
    node *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t *node_hash;       /* id + 1, 0 empty */
    size_t node_hash_cap;
    uint32_t *stamp, cur_stamp;
    istate *states;
    int32_t n_states, cap_states;
    int32_t *state_hash;      /* id + 1 */
    size_t state_hash_cap;
    ibuf set_pool, work, out;
    frame cur;                /* the current state (sid or the set in buf) */
    frame *frames;
    int32_t n_frames;
    int64_t budget;           /* closure work left in this call */
    bool cut;                 /* a limit cut the work since the last reset (gr_matcher_cut) */
    mask_entry masks[MASK_CACHE];
    int32_t next_victim, mask_n;
    const gr_vocab *mask_vocab;
    bool dead, oom;
};

/* ---- small buffers ---- */

static bool ibuf_push(ibuf *b, int32_t v) {
    if (b->n == b->cap) {
        int32_t cap = b->cap ? 2 * b->cap : 64;
        int32_t *g = realloc(b->v, (size_t)cap * sizeof *g);
        if (!g) return false;
        b->v = g;
        b->cap = cap;
    }
    b->v[b->n++] = v;
    return true;
}

static bool ibuf_set(ibuf *b, const int32_t *v, int32_t n) {
    b->n = 0;
    for (int32_t i = 0; i < n; i++)
        if (!ibuf_push(b, v[i])) return false;
    return true;
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

/* ---- nodes ---- */

static void node_hash_insert(gr_matcher *m, int32_t id) {
    size_t mask = m->node_hash_cap - 1, i = mix(mix(0, (uint32_t)m->nodes[id].pos), (uint32_t)m->nodes[id].parent) & mask;
    while (m->node_hash[i]) i = (i + 1) & mask;
    m->node_hash[i] = id + 1;
}

static bool node_hash_grow(gr_matcher *m) {
    size_t cap = m->node_hash_cap ? 2 * m->node_hash_cap : 1024;
    int32_t *h = calloc(cap, sizeof *h);
    if (!h) return false;
    free(m->node_hash);
    m->node_hash = h;
    m->node_hash_cap = cap;
    for (int32_t id = 1; id < m->n_nodes; id++) node_hash_insert(m, id);
    return true;
}

/* The node (pos, parent), made on first use; -1 when out of room. */
static int32_t make_node(gr_matcher *m, int32_t pos, int32_t parent) {
    size_t mask = m->node_hash_cap - 1, i = mix(mix(0, (uint32_t)pos), (uint32_t)parent) & mask;
    for (; m->node_hash[i]; i = (i + 1) & mask) {
        const node *n = &m->nodes[m->node_hash[i] - 1];
        if (n->pos == pos && n->parent == parent) return m->node_hash[i] - 1;
    }
    if (m->n_nodes >= HARD_NODES) return -1;
    if (m->n_nodes == m->cap_nodes) {
        int32_t cap = 2 * m->cap_nodes;
        node *nn = realloc(m->nodes, (size_t)cap * sizeof *nn);
        uint32_t *st = realloc(m->stamp, (size_t)cap * sizeof *st);
        if (nn) m->nodes = nn;
        if (st) m->stamp = st;
        if (!nn || !st) return -1;
        m->cap_nodes = cap;
    }
    int32_t id = m->n_nodes++;
    m->nodes[id] = (node){pos, parent};
    m->stamp[id] = 0;
    if (2 * (size_t)m->n_nodes > m->node_hash_cap) {
        if (!node_hash_grow(m)) { m->n_nodes--; return -1; }
    } else {
        m->node_hash[i] = id + 1;
    }
    return id;
}

/* ---- classes ---- */

static bool class_has(const gr_grammar *g, const gr_elem *e, uint32_t cp) {
    bool in = false;
    for (int32_t i = 0; i < e->b && !in; i++) in = cp >= g->ranges[e->a + i].lo && cp <= g->ranges[e->a + i].hi;
    return in != e->negated;
}

/* Some code point in [lo, hi] is in the class. */
static bool class_meets(const gr_grammar *g, const gr_elem *e, uint32_t lo, uint32_t hi) {
    const gr_range *r = g->ranges + e->a;
    if (!e->negated) {
        for (int32_t i = 0; i < e->b; i++)
            if (r[i].lo <= hi && r[i].hi >= lo) return true;
        return false;
    }
    for (uint32_t x = lo;;) { /* the first point of [lo, hi] no range covers, surrogates skipped */
        if (x >= 0xD800 && x <= 0xDFFF) {
            if (hi < 0xE000) return false;
            x = 0xE000;
        }
        int32_t i = 0;
        while (i < e->b && !(x >= r[i].lo && x <= r[i].hi)) i++;
        if (i == e->b) return true;
        if (r[i].hi >= hi) return false;
        x = r[i].hi + 1;
    }
}

/* ---- closure: from stacks to the set of stacks waiting on a character ---- */

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Expands m->work (node ids) into m->out: stacks whose top is a class, and COMPLETE. False only
 * when a limit stops it (the budget, memory, the node arena). */
static bool closure_run(gr_matcher *m) {
    const gr_grammar *g = m->g;
    if (++m->cur_stamp == 0) { /* wrapped: clear every stamp */
        memset(m->stamp, 0, (size_t)m->n_nodes * sizeof *m->stamp);
        m->cur_stamp = 1;
    }
    m->out.n = 0;
    while (m->work.n > 0) {
        if (--m->budget < 0) return false;
        int32_t x = m->work.v[--m->work.n];
        if (m->stamp[x] == m->cur_stamp) continue;
        m->stamp[x] = m->cur_stamp;
        if (x == COMPLETE) {
            if (!ibuf_push(&m->out, x)) return false;
            continue;
        }
        node n = m->nodes[x];
        const gr_elem *e = &g->elems[n.pos];
        if (e->kind == GR_CHAR) {
            if (m->out.n >= MAX_SET) m->cut = true; /* dropped */
            else if (!ibuf_push(&m->out, x)) return false;
        } else if (e->kind == GR_END) {
            if (!ibuf_push(&m->work, n.parent < 0 ? COMPLETE : n.parent)) return false;
        } else {
            /* the return address; a reference ending its alternative returns straight to the parent */
            int32_t ret = g->elems[n.pos + 1].kind == GR_END ? n.parent : make_node(m, n.pos + 1, n.parent);
            if (g->elems[n.pos + 1].kind != GR_END && ret < 0) return false;
            for (int32_t a = g->rule_alt[e->a]; a < g->rule_alt[e->a + 1]; a++) {
                int32_t y = make_node(m, g->alt_start[a], ret);
                if (y < 0 || !ibuf_push(&m->work, y)) return false;
            }
        }
    }
    qsort(m->out.v, (size_t)m->out.n, sizeof *m->out.v, cmp_i32);
    return true;
}

static bool closure(gr_matcher *m) {
    bool ok = closure_run(m);
    m->cut = m->cut || !ok;
    return ok;
}

/* ---- interned states ---- */

static uint64_t set_hash(const int32_t *ids, int32_t n, uint32_t partial) {
    uint64_t h = mix(0x1234, partial);
    for (int32_t i = 0; i < n; i++) h = mix(h, (uint32_t)ids[i]);
    return h;
}

static bool state_hash_grow(gr_matcher *m) {
    size_t cap = m->state_hash_cap ? 2 * m->state_hash_cap : 256;
    int32_t *h = calloc(cap, sizeof *h);
    if (!h) return false;
    free(m->state_hash);
    m->state_hash = h;
    m->state_hash_cap = cap;
    for (int32_t s = 0; s < m->n_states; s++) {
        size_t i = m->states[s].hash & (cap - 1);
        while (h[i]) i = (i + 1) & (cap - 1);
        h[i] = s + 1;
    }
    return true;
}

/* The interned id of (ids, partial): found, added, or -1 when the table is full. */
static int32_t intern(gr_matcher *m, const int32_t *ids, int32_t n, uint32_t partial) {
    uint64_t h = set_hash(ids, n, partial);
    size_t mask = m->state_hash_cap - 1, i = h & mask;
    for (; m->state_hash[i]; i = (i + 1) & mask) {
        const istate *s = &m->states[m->state_hash[i] - 1];
        if (s->hash == h && s->n == n && s->partial == partial &&
            !memcmp(m->set_pool.v + s->off, ids, (size_t)n * sizeof *ids))
            return m->state_hash[i] - 1;
    }
    if (m->n_states >= MAX_STATES) return -1;
    if (m->n_states == m->cap_states) {
        int32_t cap = m->cap_states ? 2 * m->cap_states : 64;
        istate *s = realloc(m->states, (size_t)cap * sizeof *s);
        if (!s) return -1;
        m->states = s;
        m->cap_states = cap;
    }
    int32_t off = m->set_pool.n;
    for (int32_t k = 0; k < n; k++)
        if (!ibuf_push(&m->set_pool, ids[k])) { m->set_pool.n = off; return -1; }
    int32_t id = m->n_states++;
    m->states[id] = (istate){off, n, partial, h, NULL};
    if (2 * (size_t)m->n_states > m->state_hash_cap) {
        if (!state_hash_grow(m)) { m->n_states--; m->set_pool.n = off; return -1; }
    } else {
        m->state_hash[i] = id + 1;
    }
    return id;
}

static sview view_of(const gr_matcher *m, const frame *f) {
    if (f->sid >= 0) {
        const istate *s = &m->states[f->sid];
        return (sview){m->set_pool.v + s->off, s->n, s->partial};
    }
    return (sview){f->buf.v, f->buf.n, f->partial};
}

/* ---- one byte ---- */

#define P_CP(p) ((p) & 0x1FFFFFu)
#define P_NEED(p) (((p) >> 21) & 7u)
#define P_LEN(p) (((p) >> 24) & 7u)
#define P_MAKE(cp, need, len) ((cp) | (uint32_t)(need) << 21 | (uint32_t)(len) << 24)

static const uint32_t MIN_CP[5] = {0, 0, 0x80, 0x800, 0x10000}; /* by encoded length: shorter is overlong */

/* Stacks of s whose class can match some character completing the partial one: into m->out. */
static bool filter_partial(gr_matcher *m, sview s, uint32_t partial) {
    uint32_t need = P_NEED(partial), bits = 6 * need;
    uint32_t lo = P_CP(partial) << bits, hi = lo | ((1u << bits) - 1);
    if (lo < MIN_CP[P_LEN(partial)]) lo = MIN_CP[P_LEN(partial)];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    m->out.n = 0;
    if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return true; /* no valid character starts so (ED A0..: surrogates) */
    for (int32_t i = 0; i < s.n; i++) {
        if (s.ids[i] == COMPLETE) continue;
        const gr_elem *e = &m->g->elems[m->nodes[s.ids[i]].pos];
        if (class_meets(m->g, e, lo, hi) && !ibuf_push(&m->out, s.ids[i])) return false;
    }
    return true;
}

/* The character cp consumed: stacks that match it, moved past it and expanded, into m->out. */
static bool step_char(gr_matcher *m, sview s, uint32_t cp) {
    m->work.n = 0;
    for (int32_t i = 0; i < s.n; i++) {
        if (s.ids[i] == COMPLETE) continue;
        node n = m->nodes[s.ids[i]];
        if (!class_has(m->g, &m->g->elems[n.pos], cp)) continue;
        int32_t y = make_node(m, n.pos + 1, n.parent);
        if (y < 0 || !ibuf_push(&m->work, y)) return false;
    }
    return closure(m);
}

/* s advanced by byte b into m->out and *partial; false when nothing survives. */
static bool step_byte(gr_matcher *m, sview s, uint8_t b, uint32_t *partial) {
    uint32_t p = s.partial, cp;
    if (P_NEED(p) == 0) {
        if (b < 0x80) cp = b;
        else {
            int len = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
            if (!len) return false;
            uint32_t v = len == 2 ? b & 0x1Fu : len == 3 ? b & 0x0Fu : b & 0x07u;
            *partial = P_MAKE(v, len - 1, len);
            return filter_partial(m, s, *partial) && m->out.n > 0;
        }
    } else {
        if ((b & 0xC0) != 0x80) return false;
        uint32_t v = P_CP(p) << 6 | (b & 0x3Fu), need = P_NEED(p) - 1, len = P_LEN(p);
        if (need > 0) {
            *partial = P_MAKE(v, need, len);
            return filter_partial(m, s, *partial) && m->out.n > 0;
        }
        if (v < MIN_CP[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return false;
        cp = v;
    }
    *partial = 0;
    return step_char(m, s, cp) && m->out.n > 0;
}

/* frame `to` := frame `from` advanced by b; false when dead. Interned states cache it: 256
 * transitions, or 64 for a state inside a character (only continuation bytes can follow). */
static bool advance(gr_matcher *m, const frame *from, frame *to, uint8_t b) {
    bool partial_from = P_NEED(from->sid >= 0 ? m->states[from->sid].partial : from->partial) != 0;
    if (partial_from && (b & 0xC0) != 0x80) return false;
    int slot = partial_from ? b & 0x3F : b;
    if (from->sid >= 0) {
        istate *st = &m->states[from->sid];
        if (st->next && st->next[slot] != UNKNOWN) {
            to->sid = st->next[slot];
            return to->sid != DEAD;
        }
    }
    uint32_t partial = 0;
    bool ok = step_byte(m, view_of(m, from), b, &partial);
    int32_t sid = ok ? intern(m, m->out.v, m->out.n, partial) : DEAD;
    if (from->sid >= 0 && (sid >= 0 || (!ok && m->budget >= 0))) { /* a step cut by the budget is not remembered */
        istate *st = &m->states[from->sid];
        int size = partial_from ? 64 : 256;
        if (!st->next && (st->next = malloc((size_t)size * sizeof *st->next)))
            for (int i = 0; i < size; i++) st->next[i] = UNKNOWN;
        if (st->next) st->next[slot] = ok ? sid : DEAD;
    }
    if (!ok) return false;
    to->sid = sid;
    if (sid < 0) { /* too many states: this one lives in the frame */
        to->partial = partial;
        if (!ibuf_set(&to->buf, m->out.v, m->out.n)) return false;
    }
    return true;
}

/* ---- compaction ---- */

static void drop_masks(gr_matcher *m) {
    for (int i = 0; i < MASK_CACHE; i++) m->masks[i].sid = -1;
}

static void drop_states(gr_matcher *m) {
    drop_masks(m); /* they are keyed by state ids */
    for (int32_t s = 0; s < m->n_states; s++) free(m->states[s].next);
    m->n_states = 0;
    m->set_pool.n = 0;
    if (m->state_hash) memset(m->state_hash, 0, m->state_hash_cap * sizeof *m->state_hash);
}

/* Copy the current state's stacks into a fresh arena; drop everything else. */
static bool compact(gr_matcher *m) {
    sview s = view_of(m, &m->cur);
    ibuf live = {0};
    bool ok = ibuf_set(&live, s.ids, s.n);
    uint32_t partial = s.partial;
    node *old = m->nodes;
    int32_t n_old = m->n_nodes;
    int32_t *map = ok ? malloc((size_t)n_old * sizeof *map) : NULL;
    node *fresh = ok ? malloc((size_t)m->cap_nodes * sizeof *fresh) : NULL;
    if (!map || !fresh) { free(live.v), free(map), free(fresh); return false; }
    for (int32_t i = 0; i < n_old; i++) map[i] = -1;
    map[COMPLETE] = COMPLETE;
    m->nodes = fresh;
    m->nodes[COMPLETE] = (node){-1, -1};
    m->n_nodes = 1;
    memset(m->node_hash, 0, m->node_hash_cap * sizeof *m->node_hash);
    ibuf chain = {0};
    for (int32_t i = 0; i < live.n && ok; i++) {
        /* collect the chain up to a copied node, then copy it from the bottom */
        chain.n = 0;
        for (int32_t x = live.v[i]; x >= 0 && map[x] < 0; x = old[x].parent) ok = ok && ibuf_push(&chain, x);
        for (int32_t k = chain.n - 1; k >= 0 && ok; k--) {
            int32_t x = chain.v[k], par = old[x].parent < 0 ? -1 : map[old[x].parent];
            map[x] = make_node(m, old[x].pos, par);
            ok = map[x] >= 0;
        }
        if (ok) live.v[i] = map[live.v[i]];
    }
    free(chain.v), free(map), free(old);
    drop_states(m);
    if (ok) {
        qsort(live.v, (size_t)live.n, sizeof *live.v, cmp_i32);
        m->cur.sid = intern(m, live.v, live.n, partial);
        m->cur.partial = partial;
        ok = m->cur.sid >= 0 || ibuf_set(&m->cur.buf, live.v, live.n);
    }
    free(live.v);
    return ok;
}

static bool ensure_room(gr_matcher *m) {
    if (m->oom) return false;
    if (m->n_nodes > SOFT_NODES && !compact(m)) m->oom = true;
    return !m->oom;
}

/* ---- the public side ---- */

int gr_matcher_new(gr_matcher **out, const gr_grammar *g, nc_err *err) {
    gr_matcher *m = calloc(1, sizeof *m);
    *out = NULL;
    if (!m) return nc_fail(err, "out of memory");
    m->g = g;
    m->cap_nodes = 1024;
    m->nodes = malloc((size_t)m->cap_nodes * sizeof *m->nodes);
    m->stamp = calloc((size_t)m->cap_nodes, sizeof *m->stamp);
    if (!m->nodes || !m->stamp || !node_hash_grow(m) || !state_hash_grow(m)) {
        gr_matcher_free(m);
        return nc_fail(err, "out of memory");
    }
    m->nodes[COMPLETE] = (node){-1, -1};
    m->n_nodes = 1;
    drop_masks(m);
    gr_matcher_reset(m);
    if (m->oom) {
        gr_matcher_free(m);
        return nc_fail(err, "grammar: the start rule expands too far (memory or work limit)");
    }
    *out = m;
    return 0;
}

void gr_matcher_free(gr_matcher *m) {
    if (!m) return;
    drop_states(m);
    for (int i = 0; i < MASK_CACHE; i++) free(m->masks[i].bits);
    free(m->states);
    free(m->state_hash);
    free(m->nodes);
    free(m->node_hash);
    free(m->stamp);
    free(m->set_pool.v);
    free(m->work.v);
    free(m->out.v);
    free(m->cur.buf.v);
    for (int32_t i = 0; i < m->n_frames; i++) free(m->frames[i].buf.v);
    free(m->frames);
    free(m);
}

void gr_matcher_reset(gr_matcher *m) {
    m->dead = false;
    m->cut = false;
    if (!ensure_room(m)) return;
    m->budget = FEED_BUDGET;
    m->work.n = 0;
    const gr_grammar *g = m->g;
    bool ok = true;
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1] && ok; a++) {
        int32_t y = make_node(m, g->alt_start[a], -1);
        ok = y >= 0 && ibuf_push(&m->work, y);
    }
    ok = ok && closure(m);
    m->cur.partial = 0;
    m->cur.sid = ok ? intern(m, m->out.v, m->out.n, 0) : -1;
    if (ok && m->cur.sid < 0) ok = ibuf_set(&m->cur.buf, m->out.v, m->out.n);
    if (!ok) m->oom = true;
}

bool gr_matcher_feed(gr_matcher *m, const uint8_t *bytes, size_t n) {
    if (m->dead || !ensure_room(m)) return false;
    m->budget = FEED_BUDGET;
    for (size_t i = 0; i < n; i++) {
        frame next = {.sid = -1};
        bool ok = advance(m, &m->cur, &next, bytes[i]);
        if (ok && next.sid < 0) { /* the set is in next.buf: keep it as ours */
            free(m->cur.buf.v);
            m->cur.buf = next.buf;
            m->cur.partial = next.partial;
        } else free(next.buf.v);
        if (!ok) {
            m->dead = true;
            return false;
        }
        m->cur.sid = next.sid;
    }
    return true;
}

bool gr_matcher_cut(const gr_matcher *m) { return m->cut; }

bool gr_matcher_dead(const gr_matcher *m) { return m->dead || m->oom; }

bool gr_matcher_can_end(const gr_matcher *m) {
    if (gr_matcher_dead(m)) return false;
    sview s = view_of(m, &m->cur);
    return s.partial == 0 && s.n > 0 && s.ids[0] == COMPLETE;
}

static bool ensure_frames(gr_matcher *m, int32_t n) {
    if (n <= m->n_frames) return true;
    frame *f = realloc(m->frames, (size_t)n * sizeof *f);
    if (!f) return false;
    for (int32_t i = m->n_frames; i < n; i++) f[i] = (frame){.sid = -1};
    m->frames = f;
    m->n_frames = n;
    return true;
}

/* The cached mask of the current state, expanded into allowed; -1 when there is none. */
static int32_t cached_mask(gr_matcher *m, const gr_vocab *v, uint8_t *allowed, int32_t n) {
    if (m->cur.sid < 0 || v != m->mask_vocab || n != m->mask_n) return -1;
    for (int i = 0; i < MASK_CACHE; i++) {
        const mask_entry *e = &m->masks[i];
        if (e->sid != m->cur.sid) continue;
        for (int32_t id = 0; id < n; id++) allowed[id] = (uint8_t)(e->bits[id >> 6] >> (id & 63) & 1);
        return e->count;
    }
    return -1;
}

static void remember_mask(gr_matcher *m, const gr_vocab *v, const uint8_t *allowed, int32_t n, int32_t count) {
    if (m->cur.sid < 0) return;
    if (v != m->mask_vocab || n != m->mask_n) {
        drop_masks(m);
        m->mask_vocab = v;
        m->mask_n = n;
    }
    mask_entry *e = &m->masks[m->next_victim];
    m->next_victim = (m->next_victim + 1) % MASK_CACHE;
    e->sid = -1;
    if (!e->bits && !(e->bits = malloc(((size_t)v->n_tokens / 64 + 1) * sizeof *e->bits))) return;
    memset(e->bits, 0, ((size_t)n / 64 + 1) * sizeof *e->bits);
    for (int32_t id = 0; id < n; id++)
        if (allowed[id]) e->bits[id >> 6] |= 1ull << (id & 63);
    e->sid = m->cur.sid;
    e->count = count;
}

int32_t gr_matcher_mask(gr_matcher *m, const gr_vocab *v, uint8_t *allowed, int32_t n) {
    if (n > v->n_tokens) {
        memset(allowed + v->n_tokens, 0, (size_t)(n - v->n_tokens));
        n = v->n_tokens;
    }
    memset(allowed, 0, (size_t)n);
    if (gr_matcher_dead(m) || !ensure_room(m) || !ensure_frames(m, v->max_depth + 1)) return 0;
    m->budget = MASK_BUDGET;
    int32_t count = cached_mask(m, v, allowed, n);
    if (count >= 0) return count;
    count = 0;
    if (gr_matcher_can_end(m))
        for (int32_t id = 0; id < n; id++)
            if (v->eog[id]) allowed[id] = 1, count++;
    frame *fr = m->frames;
    fr[0].sid = m->cur.sid;
    fr[0].partial = m->cur.partial;
    if (m->cur.sid < 0 && !ibuf_set(&fr[0].buf, m->cur.buf.v, m->cur.buf.n)) return count;
    for (int32_t i = 0; i < v->n_nodes;) {
        int32_t d = v->depth[i];
        if (!advance(m, &fr[d - 1], &fr[d], v->byte[i])) {
            i = v->skip[i];
            continue;
        }
        for (int32_t k = v->tok_first[i]; k < v->tok_first[i + 1]; k++) {
            int32_t id = v->ids[k];
            if (id < n && !allowed[id]) allowed[id] = 1, count++;
        }
        i++;
    }
    if (m->budget >= 0) remember_mask(m, v, allowed, n, count);
    return count;
}
