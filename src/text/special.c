/* special.c: cutting special and user-defined tokens out of text (step 1 of
 * tokenizer.c's header comment) in time linear in the text plus the matches.
 *
 * The rule, from llama.cpp, is defined by a slow procedure: take the special tokens
 * longest first (equal lengths by id), and cut each one out everywhere it occurs, left
 * to right, in the text not cut yet. Done literally that costs the number of special
 * tokens times the text length, which a file whose whole vocabulary is user-defined
 * turns into seconds per request. This file computes the same cuts differently:
 *   1. An Aho-Corasick automaton over the special texts, built at load, reports every
 *      occurrence of every special token in one pass over the text.
 *   2. The occurrences are ordered as the procedure visits them: by priority rank,
 *      then position (a counting sort; the pass emits them in position order).
 *   3. Each is accepted if none of its bytes is cut yet. Tokens come longest first, so
 *      an interval already cut is at least as long as the candidate and can only
 *      overlap it by covering its first or its last byte: two lookups decide.
 *
 * Content spans: a chat prompt mixes the template's markers with the messages, whose
 * text must never become control tokens (a user could forge a turn boundary). A caller
 * passes the byte ranges of message content; a control or unknown token is then
 * accepted only when it lies wholly outside them. User-defined tokens are plain text
 * to the model and are cut everywhere, as without parse_special.
 */
#define TEXT_INTERNAL
#include "text/special.h"

#include <string.h>

#include "util.h"

/* Edges of the trie are kept in one hash table keyed by (node, byte). */
struct special_ac {
    int32_t n_nodes;
    int32_t *fail; /* [n_nodes] longest proper suffix that is also a trie node     */
    int32_t *rank; /* [n_nodes] index into v->special of the token ending here, -1 */
    int32_t *dict; /* [n_nodes] nearest node on the fail chain with rank >= 0, -1   */
    uint64_t *edge_key; /* (node << 8 | byte) + 1; 0 = empty slot                      */
    int32_t *edge_to;
    uint64_t mask;
};

static uint64_t edge_slot(const struct special_ac *ac, uint64_t key) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (h ^ (h >> 29)) & ac->mask;
}

static int32_t edge_get(const struct special_ac *ac, int32_t node, unsigned char b) {
    uint64_t key = ((uint64_t)node << 8 | b) + 1;
    for (uint64_t i = edge_slot(ac, key);; i = (i + 1) & ac->mask) {
        if (ac->edge_key[i] == key) return ac->edge_to[i];
        if (ac->edge_key[i] == 0) return -1;
    }
}

static void edge_put(struct special_ac *ac, int32_t node, unsigned char b, int32_t to) {
    uint64_t key = ((uint64_t)node << 8 | b) + 1;
    uint64_t i = edge_slot(ac, key);
    while (ac->edge_key[i] != 0) i = (i + 1) & ac->mask;
    ac->edge_key[i] = key;
    ac->edge_to[i] = to;
}

void special_ac_destroy(struct special_ac *ac) {
    if (ac == NULL) return;
    al_free(ac->fail);
    al_free(ac->rank);
    al_free(ac->dict);
    al_free(ac->edge_key);
    al_free(ac->edge_to);
    al_free(ac);
}

/* The trie of the special texts; parent[] and depth[] are returned for the fail links. */
static al_status build_trie(struct special_ac *ac, const al_vocab *v, int32_t *parent,
                            unsigned char *byte, uint32_t *depth) {
    int32_t n = 1; /* node 0 is the root */
    parent[0] = -1;
    depth[0] = 0;
    ac->rank[0] = -1;
    for (int r = 0; r < v->n_special; r++) {
        int32_t id = v->special[r];
        const unsigned char *s = (const unsigned char *)v->text + v->text_off[id];
        int32_t node = 0;
        for (uint32_t i = 0; i < v->text_len[id]; i++) {
            int32_t next = edge_get(ac, node, s[i]);
            if (next < 0) {
                next = n++;
                parent[next] = node;
                byte[next] = s[i];
                depth[next] = i + 1;
                ac->rank[next] = -1;
                edge_put(ac, node, s[i], next);
            }
            node = next;
        }
        if (ac->rank[node] < 0) ac->rank[node] = r; /* texts are unique: always taken */
    }
    ac->n_nodes = n;
    return AL_OK;
}

/* Fail and dictionary links, nodes visited in order of depth (a counting sort). */
static al_status build_links(struct special_ac *ac, const int32_t *parent,
                             const unsigned char *byte, const uint32_t *depth,
                             uint32_t max_depth) {
    int32_t n = ac->n_nodes;
    int32_t *order = al_malloc((size_t)n * sizeof *order);
    int32_t *start = al_calloc((size_t)max_depth + 2, sizeof *start);
    if (order == NULL || start == NULL) {
        al_free(order);
        al_free(start);
        return al_error(AL_ERR_NOMEM, "vocab: out of memory for the special-token matcher");
    }
    for (int32_t i = 0; i < n; i++) start[depth[i] + 1]++;
    for (uint32_t d = 1; d <= max_depth + 1; d++) start[d] += start[d - 1];
    for (int32_t i = 0; i < n; i++) order[start[depth[i]]++] = i;
    for (int32_t k = 0; k < n; k++) {
        int32_t c = order[k], u = parent[c];
        int32_t f = 0;
        if (u > 0) {
            f = ac->fail[u];
            int32_t to;
            while ((to = edge_get(ac, f, byte[c])) < 0 && f != 0) f = ac->fail[f];
            f = to >= 0 ? to : 0;
        }
        ac->fail[c] = c == 0 ? 0 : f;
        ac->dict[c] = c == 0 ? -1 : ac->rank[f] >= 0 ? f : ac->dict[f];
    }
    al_free(order);
    al_free(start);
    return AL_OK;
}

al_status special_ac_build(al_vocab *v, const char *path) {
    uint64_t n_bytes = 1;
    uint32_t max_depth = 0;
    for (int r = 0; r < v->n_special; r++) {
        uint32_t len = v->text_len[v->special[r]];
        n_bytes += len;
        if (len > max_depth) max_depth = len;
    }
    if (n_bytes > INT32_MAX / 2)
        return al_error(AL_ERR_FORMAT, "%s: the special tokens hold %llu bytes; at most %d are "
                        "supported", path, (unsigned long long)n_bytes, INT32_MAX / 2);
    struct special_ac *ac = al_calloc(1, sizeof *ac);
    uint64_t n_slots = 16;
    while (n_slots < 2 * n_bytes) n_slots *= 2;
    int32_t *parent = al_malloc((size_t)n_bytes * sizeof *parent);
    unsigned char *byte = al_malloc((size_t)n_bytes);
    uint32_t *depth = al_malloc((size_t)n_bytes * sizeof *depth);
    al_status st = AL_ERR_NOMEM;
    if (ac && parent && byte && depth && (ac->fail = al_malloc((size_t)n_bytes * 4)) &&
        (ac->rank = al_malloc((size_t)n_bytes * 4)) && (ac->dict = al_malloc((size_t)n_bytes * 4)) &&
        (ac->edge_key = al_calloc((size_t)n_slots, sizeof *ac->edge_key)) &&
        (ac->edge_to = al_malloc((size_t)n_slots * sizeof *ac->edge_to))) {
        ac->mask = n_slots - 1;
        byte[0] = 0;
        st = build_trie(ac, v, parent, byte, depth);
        if (st == AL_OK) st = build_links(ac, parent, byte, depth, max_depth);
    } else {
        st = al_error(AL_ERR_NOMEM, "%s: out of memory for the special-token matcher", path);
    }
    al_free(parent);
    al_free(byte);
    al_free(depth);
    if (st != AL_OK) {
        special_ac_destroy(ac);
        return st;
    }
    v->ac = ac;
    return AL_OK;
}

/* ---- matching ------------------------------------------------------------------------ */

typedef struct occ {
    uint32_t start;
    int32_t rank;
} occ;

typedef struct occ_vec {
    occ *a;
    size_t n, cap;
} occ_vec;

static al_status occ_push(occ_vec *ov, uint32_t start, int32_t rank) {
    if (ov->n == ov->cap) {
        size_t cap = ov->cap ? ov->cap * 2 : 64;
        occ *a = al_realloc(ov->a, cap * sizeof *a);
        if (a == NULL) return al_error(AL_ERR_NOMEM, "tokenize: out of memory");
        ov->a = a;
        ov->cap = cap;
    }
    ov->a[ov->n++] = (occ){start, rank};
    return AL_OK;
}

/* True if [start, end) overlaps a content span. Spans are sorted and disjoint, so if
 * any overlaps, the last one that starts before end does. */
static bool in_content(const tok_span *spans, int n_spans, size_t start, size_t end) {
    int lo = 0, hi = n_spans; /* first span with off >= end */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (spans[mid].off < end) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && spans[lo - 1].off + spans[lo - 1].len > start;
}

/* Every occurrence a caller may cut, in order of position (of its end). */
static al_status find_all(const al_vocab *v, const unsigned char *text, size_t len,
                          bool parse_special, const tok_span *spans, int n_spans, occ_vec *out) {
    const struct special_ac *ac = v->ac;
    int32_t s = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t to;
        while ((to = edge_get(ac, s, text[i])) < 0 && s != 0) s = ac->fail[s];
        s = to >= 0 ? to : 0;
        for (int32_t m = ac->rank[s] >= 0 ? s : ac->dict[s]; m >= 0; m = ac->dict[m]) {
            int32_t id = v->special[ac->rank[m]];
            size_t n = v->text_len[id], start = i + 1 - n;
            if (v->type[id] != TOK_USER &&
                (!parse_special || in_content(spans, n_spans, start, i + 1)))
                continue;
            al_status st = occ_push(out, (uint32_t)start, ac->rank[m]);
            if (st != AL_OK) return st;
        }
    }
    return AL_OK;
}

/* Orders occurrences by rank, keeping position order within a rank. */
static al_status sort_by_rank(const al_vocab *v, occ_vec *ov) {
    size_t *start = al_calloc((size_t)v->n_special + 1, sizeof *start);
    occ *sorted = al_malloc((ov->n ? ov->n : 1) * sizeof *sorted);
    if (start == NULL || sorted == NULL) {
        al_free(start);
        al_free(sorted);
        return al_error(AL_ERR_NOMEM, "tokenize: out of memory");
    }
    for (size_t i = 0; i < ov->n; i++) start[ov->a[i].rank + 1]++;
    for (int r = 1; r <= v->n_special; r++) start[r] += start[r - 1];
    for (size_t i = 0; i < ov->n; i++) sorted[start[ov->a[i].rank]++] = ov->a[i];
    al_free(start);
    al_free(ov->a);
    ov->a = sorted;
    ov->cap = ov->n ? ov->n : 1;
    return AL_OK;
}

static al_status frag_push(tok_frag **f, size_t *n, size_t *cap, int32_t id, size_t off,
                           size_t len) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        tok_frag *p = al_realloc(*f, c * sizeof *p);
        if (p == NULL) return al_error(AL_ERR_NOMEM, "tokenize: out of memory");
        *f = p;
        *cap = c;
    }
    (*f)[(*n)++] = (tok_frag){id, off, len};
    return AL_OK;
}

/* Accepts occurrences in priority order and lists the fragments left to right. */
static al_status cut(const al_vocab *v, size_t len, const occ_vec *ov, tok_frag **frags,
                     size_t *n_frags) {
    unsigned char *taken = al_calloc(len, 1);
    int32_t *at = al_malloc(len * sizeof *at); /* id of the token cut at each start */
    size_t cap = 0;
    al_status st = AL_OK;
    if (taken == NULL || at == NULL) st = al_error(AL_ERR_NOMEM, "tokenize: out of memory");
    for (size_t i = 0; st == AL_OK && i < len; i++) at[i] = -1;
    for (size_t k = 0; st == AL_OK && k < ov->n; k++) {
        int32_t id = v->special[ov->a[k].rank];
        size_t s = ov->a[k].start, n = v->text_len[id];
        if (taken[s] || taken[s + n - 1]) continue;
        memset(taken + s, 1, n);
        at[s] = id;
    }
    size_t raw = 0; /* start of the raw stretch being gathered */
    for (size_t i = 0; st == AL_OK && i < len;) {
        if (at[i] < 0) {
            i++;
            continue;
        }
        if (i > raw) st = frag_push(frags, n_frags, &cap, -1, raw, i - raw);
        if (st == AL_OK) st = frag_push(frags, n_frags, &cap, at[i], i, v->text_len[at[i]]);
        i += v->text_len[at[i]];
        raw = i;
    }
    if (st == AL_OK && raw < len) st = frag_push(frags, n_frags, &cap, -1, raw, len - raw);
    al_free(taken);
    al_free(at);
    return st;
}

al_status special_partition(const al_vocab *v, const char *text, size_t len, bool parse_special,
                            const tok_span *spans, int n_spans, tok_frag **frags,
                            size_t *n_frags) {
    *frags = NULL;
    *n_frags = 0;
    if (len == 0) return AL_OK;
    occ_vec ov = {0};
    al_status st = AL_OK;
    if (v->n_special > 0)
        st = find_all(v, (const unsigned char *)text, len, parse_special, spans, n_spans, &ov);
    if (st == AL_OK) st = sort_by_rank(v, &ov);
    if (st == AL_OK) st = cut(v, len, &ov, frags, n_frags);
    al_free(ov.a);
    if (st != AL_OK) {
        al_free(*frags);
        *frags = NULL;
        *n_frags = 0;
    }
    return st;
}
