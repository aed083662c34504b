/* gmatch.c: the grammar matcher (the al_grammar_* API of anyllm.h).
 *
 * The state after some text is a set of stacks. A stack lists positions in code[]
 * still to match, innermost last; its top is always a character set (a stack whose top
 * would be a rule is expanded into one stack per alternative of the rule), and an empty
 * stack means the text so far is a complete sentence. A character moves every stack
 * whose top set holds it; the stacks that do not hold it die. Identical stacks are kept
 * once, so an ambiguous grammar costs as many stacks as it has distinct futures.
 *
 * Tokens are bytes, grammars are code points: the state also carries the part of a
 * UTF-8 character read so far, and a character's stacks move when its last byte comes.
 *
 * Which tokens may come next (al_grammar_mask) is a walk of the vocabulary's byte trie
 * with the state: a prefix that kills every stack cuts its whole subtree, so the work
 * follows the tokens the grammar allows, not the vocabulary's size. The sampler asks
 * for the mask only when the token it drew is not allowed (al_grammar_allows, a walk of
 * that one token's bytes); mostly it is.
 */
#include <stdlib.h>
#include <string.h>

#define TEXT_INTERNAL
#include "text/grammar.h"
#include "text/vocab.h"
#include "util.h"

enum { MAX_STACK = 1024, MAX_STACKS = 4096 };

/* A set of stacks, laid out as [len, pos...] one after another. */
typedef struct gset {
    int32_t *d;
    int32_t len, cap; /* int32s used / allocated */
    int32_t count;    /* stacks */
} gset;

typedef struct utf8_state {
    uint32_t cp;
    int need; /* continuation bytes still to come */
    int len;  /* bytes of the character being read */
} utf8_state;

/* The smallest code point of each encoded length: shorter ones would be overlong. */
static const uint32_t UTF8_MIN[5] = {0, 0, 0x80, 0x800, 0x10000};

/* One step of the mask walk: the state after the bytes of a trie node. */
typedef struct level {
    gset set;
    int32_t owner; /* the level whose set holds this state (a partial character moves none) */
    utf8_state u;
} level;

struct al_grammar {
    g_rules r;
    const al_vocab *v;
    const g_trie *trie;
    int32_t n_vocab;
    gset cur;
    utf8_state u;
    gset tmp[2], work; /* scratch: single-token walks and the expansion's worklist */
    level *lv;         /* [trie->max_depth + 1] */
    bool failed;       /* out of memory on the way: every token refused */
};

static bool gset_reserve(gset *s, int32_t more) {
    if (s->len + more <= s->cap) return true;
    int32_t cap = s->cap ? s->cap : 64;
    while (cap < s->len + more)
        cap *= 2;
    int32_t *d = al_realloc(s->d, (size_t)cap * sizeof *d);
    if (!d) return false;
    s->d = d;
    s->cap = cap;
    return true;
}

static void gset_clear(gset *s) {
    s->len = s->count = 0;
}

/* Adds stack st[0..n) unless it is there already. */
static bool gset_add(gset *s, const int32_t *st, int32_t n) {
    for (int32_t i = 0; i < s->len; i += 1 + s->d[i])
        if (s->d[i] == n && !memcmp(s->d + i + 1, st, (size_t)n * sizeof *st)) return true;
    if (s->count >= MAX_STACKS || !gset_reserve(s, n + 1)) return false;
    s->d[s->len] = n;
    memcpy(s->d + s->len + 1, st, (size_t)n * sizeof *st);
    s->len += n + 1;
    s->count++;
    return true;
}

/* The worklist holds stacks as [pos..., len]: the last one is popped from the end. */
static bool work_push(gset *w, const int32_t *st, int32_t n, int32_t extra1, int32_t extra2) {
    if (n + 2 > MAX_STACK) return true; /* deeper than any sane text: this future is dropped */
    if (!gset_reserve(w, n + 3)) return false;
    if (n) memcpy(w->d + w->len, st, (size_t)n * sizeof *st);
    w->len += n;
    if (extra1 >= 0) w->d[w->len++] = extra1, n++;
    if (extra2 >= 0) w->d[w->len++] = extra2, n++;
    w->d[w->len++] = n;
    return true;
}

/* Expands the worklist into out: until every stack's top is a character set (or the
 * stack is empty), a rule on top is replaced by each of its alternatives. */
static bool expand(al_grammar *g, gset *out) {
    const g_rules *r = &g->r;
    gset *w = &g->work;
    while (w->len > 0) {
        int32_t n = w->d[w->len - 1];
        int32_t *st = w->d + w->len - 1 - n;
        w->len -= n + 1; /* popped; st stays readable until the next push */
        if (n == 0 || r->code[st[n - 1]].op == G_CHARS) {
            if (!gset_add(out, st, n)) return false;
            continue;
        }
        int32_t pos = st[n - 1], rule = r->code[pos].arg;
        int32_t cont = r->code[pos + 1].op == G_END ? -1 : pos + 1;
        /* copy st out first: pushes may move the worklist's buffer */
        int32_t base[MAX_STACK];
        memcpy(base, st, (size_t)(n - 1) * sizeof *st);
        for (int32_t a = r->rule_alt[rule]; a < r->rule_alt[rule + 1]; a++) {
            int32_t start = r->alt[a];
            if (!work_push(w, base, n - 1, cont, r->code[start].op == G_END ? -1 : start))
                return false;
        }
    }
    return true;
}

/* out = the stacks of in after the character c. */
static bool advance(al_grammar *g, const gset *in, uint32_t c, gset *out) {
    const g_rules *r = &g->r;
    gset_clear(out);
    g->work.len = 0;
    for (int32_t i = 0; i < in->len; i += 1 + in->d[i]) {
        int32_t n = in->d[i];
        const int32_t *st = in->d + i + 1;
        if (n == 0) continue;
        int32_t top = st[n - 1];
        if (!g_set_has(r, r->code[top].arg, c)) continue;
        int32_t next = r->code[top + 1].op == G_END ? -1 : top + 1;
        if (!work_push(&g->work, st, n - 1, next, -1)) return false;
        if (!expand(g, out)) return false;
    }
    return true;
}

/* Feeds one byte to a UTF-8 decoder: 1 a character is complete (*cp), 0 more bytes are
 * needed, -1 the byte cannot come here. */
static int utf8_step(utf8_state *u, uint8_t b, uint32_t *cp) {
    if (u->need == 0) {
        if (b < 0x80) return *cp = b, 1;
        if (b >= 0xC2 && b <= 0xDF)
            u->need = 1, u->cp = b & 0x1fu;
        else if (b >= 0xE0 && b <= 0xEF)
            u->need = 2, u->cp = b & 0x0fu;
        else if (b >= 0xF0 && b <= 0xF4)
            u->need = 3, u->cp = b & 0x07u;
        else
            return -1;
        u->len = u->need + 1;
        return 0;
    }
    if ((b & 0xC0) != 0x80) return -1;
    u->cp = u->cp << 6 | (b & 0x3fu);
    if (--u->need > 0) return 0;
    *cp = u->cp;
    bool bad = *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF) || *cp < UTF8_MIN[u->len];
    return bad ? -1 : 1;
}

/* Whether set holds some code point in [lo, hi]. */
static bool set_meets(const g_rules *r, int32_t set, uint32_t lo, uint32_t hi) {
    const g_set *s = &r->sets[set];
    if (s->n == 0) return s->negate; /* as g_set_has */
    const uint32_t *rg = r->ranges + 2 * s->first;
    if (!s->negate) {
        for (int32_t i = 0; i < s->n; i++)
            if (rg[2 * i] <= hi && rg[2 * i + 1] >= lo) return true;
        return false;
    }
    /* a complement meets [lo, hi] unless its ranges cover all of it */
    for (uint32_t pos = lo;;) {
        int32_t i = 0;
        while (i < s->n && !(rg[2 * i] <= pos && rg[2 * i + 1] >= pos))
            i++;
        if (i == s->n) return true;
        if (rg[2 * i + 1] >= hi) return false;
        pos = rg[2 * i + 1] + 1;
    }
}

/* Whether some character that begins with the partial one u can come next: without
 * this, a token holding the first byte of a character the grammar refuses would pass,
 * and the text would reach a state no token can leave. */
static bool partial_viable(const g_rules *r, const gset *s, const utf8_state *u) {
    uint32_t lo = u->cp << (6 * u->need), hi = lo | ((1u << (6 * u->need)) - 1);
    if (lo < UTF8_MIN[u->len]) lo = UTF8_MIN[u->len];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi) return false;
    for (int32_t i = 0; i < s->len; i += 1 + s->d[i])
        if (s->d[i] > 0 && set_meets(r, r->code[s->d[i + s->d[i]]].arg, lo, hi)) return true;
    return false;
}

static bool is_complete(const gset *s, const utf8_state *u) {
    if (u->need) return false;
    for (int32_t i = 0; i < s->len; i += 1 + s->d[i])
        if (s->d[i] == 0) return true;
    return false;
}

/* Walks bytes from the current state; *out is the state after them (cur itself when
 * n is 0). False when a byte is refused or memory ran out. */
static bool walk(al_grammar *g, const uint8_t *b, size_t n, const gset **out, utf8_state *u) {
    const gset *s = &g->cur;
    *u = g->u;
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c;
        int st = utf8_step(u, b[i], &c);
        if (st < 0) return false;
        if (st == 0) {
            if (!partial_viable(&g->r, s, u)) return false;
            continue;
        }
        gset *next = &g->tmp[k];
        k ^= 1;
        if (!advance(g, s, c, next) || next->count == 0) return false;
        s = next;
    }
    *out = s;
    return true;
}

/* ---- the public API ----------------------------------------------------------------------- */

al_status al_grammar_create(const al_vocab *v, const char *text, al_grammar **out) {
    if (!out) return al_error(AL_ERR_ARG, "al_grammar_create: out is NULL");
    *out = NULL;
    if (!v) return al_error(AL_ERR_ARG, "al_grammar_create: the vocabulary is NULL");
    al_grammar *g = al_calloc(1, sizeof *g);
    if (!g) return al_error(AL_ERR_NOMEM, "out of memory creating a grammar");
    al_status st = g_compile(text, &g->r);
    if (st == AL_OK && !(g->trie = g_vocab_trie(v)))
        st = al_error(AL_ERR_NOMEM, "out of memory indexing the vocabulary for a grammar");
    if (st == AL_OK && !(g->lv = al_calloc((size_t)g->trie->max_depth + 1, sizeof *g->lv)))
        st = al_error(AL_ERR_NOMEM, "out of memory creating a grammar");
    if (st != AL_OK) {
        al_grammar_destroy(g);
        return st;
    }
    g->v = v;
    g->n_vocab = al_vocab_n_tokens(v);
    al_grammar_reset(g);
    if (g->failed) {
        al_grammar_destroy(g);
        return al_error(AL_ERR_NOMEM, "out of memory creating a grammar");
    }
    *out = g;
    return AL_OK;
}

void al_grammar_destroy(al_grammar *g) {
    if (!g) return;
    g_rules_free(&g->r);
    al_free(g->cur.d);
    al_free(g->tmp[0].d);
    al_free(g->tmp[1].d);
    al_free(g->work.d);
    for (int32_t d = 0; g->lv && d <= g->trie->max_depth; d++)
        al_free(g->lv[d].set.d);
    al_free(g->lv);
    al_free(g);
}

void al_grammar_reset(al_grammar *g) {
    if (!g) return;
    const g_rules *r = &g->r;
    gset_clear(&g->cur);
    g->u = (utf8_state){0};
    g->work.len = 0;
    g->failed = false;
    for (int32_t a = r->rule_alt[r->root]; a < r->rule_alt[r->root + 1]; a++) {
        int32_t start = r->alt[a];
        if (!work_push(&g->work, NULL, 0, r->code[start].op == G_END ? -1 : start, -1))
            g->failed = true;
    }
    if (!g->failed && !expand(g, &g->cur)) g->failed = true;
}

/* Walks the bytes of a token (not an end-of-generation one) from the current state. */
static al_status token_walk(al_grammar *g, int32_t token, const gset **s, utf8_state *u) {
    int n = al_token_to_bytes(g->v, token, false, NULL, 0);
    if (n <= 0) return AL_ERR_ARG; /* control tokens spell nothing the grammar could match */
    char small[256], *buf = n <= (int)sizeof small ? small : al_malloc((size_t)n);
    if (!buf) return AL_ERR_NOMEM;
    al_token_to_bytes(g->v, token, false, buf, n);
    bool ok = walk(g, (const uint8_t *)buf, (size_t)n, s, u);
    if (buf != small) al_free(buf);
    return ok ? AL_OK : AL_ERR_ARG;
}

bool al_grammar_allows(al_grammar *g, int32_t token) {
    if (!g || g->failed || token < 0 || token >= g->n_vocab) return false;
    if (al_vocab_is_eog(g->v, token)) return is_complete(&g->cur, &g->u);
    const gset *s;
    utf8_state u;
    return token_walk(g, token, &s, &u) == AL_OK;
}

al_status al_grammar_accept(al_grammar *g, int32_t token) {
    if (!g) return al_error(AL_ERR_ARG, "al_grammar_accept: the grammar is NULL");
    if (g->failed) return al_error(AL_ERR_NOMEM, "the grammar ran out of memory");
    if (token < 0 || token >= g->n_vocab)
        return al_error(AL_ERR_ARG, "grammar: token %d is out of range", token);
    if (al_vocab_is_eog(g->v, token)) {
        if (is_complete(&g->cur, &g->u)) return AL_OK;
        return al_error(AL_ERR_ARG, "grammar: the text ends before the grammar allows it");
    }
    const gset *s;
    utf8_state u;
    al_status st = token_walk(g, token, &s, &u);
    if (st == AL_ERR_NOMEM) return al_error(st, "out of memory in the grammar");
    if (st != AL_OK)
        return al_error(AL_ERR_ARG, "grammar: token %d (%s) is not allowed here", token,
                        al_vocab_text(g->v, token));
    if (s != &g->cur) { /* swap the buffers rather than copy */
        gset t = g->cur;
        g->cur = *s;
        *(gset *)s = t;
    }
    g->u = u;
    return AL_OK;
}

int32_t g_grammar_n_tokens(const al_grammar *g) {
    return g->n_vocab;
}

bool al_grammar_complete(const al_grammar *g) {
    return g && !g->failed && is_complete(&g->cur, &g->u);
}

bool al_grammar_finished(const al_grammar *g) {
    return al_grammar_complete(g) && g->cur.count == 1;
}

/* The mask walk: every token of the trie whose bytes the grammar allows gets a 1. */
static bool mask_walk(al_grammar *g, uint8_t *allowed) {
    const g_trie *t = g->trie;
    level *lv = g->lv;
    lv[0].owner = -1;
    lv[0].u = g->u;
    for (int32_t i = 1; i < t->n_nodes;) {
        int d = t->depth[i];
        level *p = &lv[d - 1], *l = &lv[d];
        const gset *ps = p->owner < 0 ? &g->cur : &lv[p->owner].set;
        uint32_t c;
        l->u = p->u;
        int st = utf8_step(&l->u, t->byte[i], &c);
        bool alive = st >= 0;
        if (st == 0) {
            l->owner = p->owner;
            alive = partial_viable(&g->r, ps, &l->u);
        } else if (st == 1) {
            if (!advance(g, ps, c, &l->set)) return false;
            l->owner = d;
            alive = l->set.count > 0;
        }
        if (!alive) {
            i = t->skip[i];
            continue;
        }
        for (int32_t k = t->tok_first[i]; k < t->tok_first[i + 1]; k++)
            allowed[t->tok[k]] = 1;
        i++;
    }
    return true;
}

al_status al_grammar_mask(al_grammar *g, uint8_t *allowed) {
    if (!g || !allowed) return al_error(AL_ERR_ARG, "al_grammar_mask: NULL argument");
    memset(allowed, 0, (size_t)g->n_vocab);
    if (g->failed) return al_error(AL_ERR_NOMEM, "the grammar ran out of memory");
    if (!mask_walk(g, allowed)) {
        memset(allowed, 0, (size_t)g->n_vocab);
        return al_error(AL_ERR_NOMEM, "out of memory in the grammar");
    }
    if (is_complete(&g->cur, &g->u))
        for (int32_t id = 0; id < g->n_vocab; id++)
            if (al_vocab_is_eog(g->v, id)) allowed[id] = 1;
    return AL_OK;
}

/* ---- the vocabulary's byte trie ------------------------------------------------------------ */

typedef struct tok_bytes {
    const uint8_t *s;
    uint32_t n;
    int32_t id;
} tok_bytes;

static int by_bytes(const void *a, const void *b) {
    const tok_bytes *x = a, *y = b;
    uint32_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, n);
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->id - y->id;
}

void g_trie_free(g_trie *t) {
    if (!t) return;
    al_free(t->byte);
    al_free(t->depth);
    al_free(t->skip);
    al_free(t->tok_first);
    al_free(t->tok);
    al_free(t);
}

/* Sorted by bytes, the tokens list the trie in depth-first order: each one adds the
 * nodes of its bytes beyond what it shares with the one before. */
static g_trie *trie_build(const al_vocab *v) {
    int32_t n_tok = 0;
    size_t n_bytes = 0;
    tok_bytes *tb = al_malloc((size_t)v->n_tokens * sizeof *tb);
    g_trie *t = al_calloc(1, sizeof *t);
    if (!tb || !t) goto fail;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        int n = al_token_to_bytes(v, id, false, NULL, 0);
        if (n <= 0 || n > 0xffff) continue;
        tb[n_tok++] = (tok_bytes){(const uint8_t *)v->piece + v->piece_off[id], (uint32_t)n, id};
        n_bytes += (size_t)n;
    }
    qsort(tb, (size_t)n_tok, sizeof *tb, by_bytes);
    size_t cap = n_bytes + 1;
    t->byte = al_malloc(cap);
    t->depth = al_malloc(cap * sizeof *t->depth);
    t->skip = al_malloc(cap * sizeof *t->skip);
    t->tok_first = al_calloc(cap + 1, sizeof *t->tok_first);
    t->tok = al_malloc(((size_t)n_tok + 1) * sizeof *t->tok);
    int32_t *path = al_malloc((0x10000 + 1) * sizeof *path);
    if (!t->byte || !t->depth || !t->skip || !t->tok_first || !t->tok || !path) {
        al_free(path);
        goto fail;
    }
    int32_t n = 1;
    t->byte[0] = 0;
    t->depth[0] = 0;
    path[0] = 0;
    for (int32_t k = 0; k < n_tok; k++) {
        uint32_t lcp = 0;
        if (k > 0)
            while (lcp < tb[k].n && lcp < tb[k - 1].n && tb[k].s[lcp] == tb[k - 1].s[lcp])
                lcp++;
        for (uint32_t d = lcp; d < tb[k].n; d++) {
            t->byte[n] = tb[k].s[d];
            t->depth[n] = (uint16_t)(d + 1);
            path[d + 1] = n++;
        }
        if ((int32_t)tb[k].n > t->max_depth) t->max_depth = (int32_t)tb[k].n;
        t->tok_first[path[tb[k].n] + 1]++; /* counts first, prefix sums below */
        t->tok[k] = tb[k].id;
    }
    for (int32_t i = 0; i < n; i++)
        t->tok_first[i + 1] += t->tok_first[i];
    /* skip[i]: the next node no deeper than i; path[] serves as the stack of open nodes */
    int32_t top = 0;
    for (int32_t i = 0; i < n; i++) {
        while (top > 0 && t->depth[path[top - 1]] >= t->depth[i])
            t->skip[path[--top]] = i;
        path[top++] = i;
    }
    while (top > 0)
        t->skip[path[--top]] = n;
    t->n_nodes = n;
    al_free(path);
    al_free(tb);
    return t;
fail:
    al_free(tb);
    g_trie_free(t);
    return NULL;
}

const g_trie *g_vocab_trie(const al_vocab *v) {
    al_vocab *mv = (al_vocab *)v; /* the trie is a cache: built once, read-only after */
    g_trie *t = __atomic_load_n(&mv->trie, __ATOMIC_ACQUIRE);
    if (t) return t;
    g_trie *mine = trie_build(v);
    if (!mine) return NULL;
    g_trie *expected = NULL;
    if (__atomic_compare_exchange_n(&mv->trie, &expected, mine, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        return mine;
    g_trie_free(mine); /* another thread built it first */
    return expected;
}
