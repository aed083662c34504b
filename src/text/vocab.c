/* vocab.c: the vocabulary's tables and the small things both tokenizers share: the
 * text -> id and merge hash tables, the growable id vector, the merge queue, UTF-8
 * validation. It sits below spm.c, bpe.c, special.c and tokenizer.c, which loads the
 * tables (vocab.h holds their layout). */
#define TEXT_INTERNAL
#include "text/vocab.h"

#include <string.h>

#include "util.h"

uint32_t tok_hash_bytes(const char *s, size_t n, uint32_t seed) {
    uint32_t h = 2166136261u ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

size_t al_utf8_char_len(const char *s, size_t n) {
    return utf8_valid_len((const unsigned char *)s, n);
}

size_t utf8_valid_len(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0; /* no overlongs */
        else if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F; /* nothing above U+10FFFF */
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

al_status tok_vec_push(tok_vec *tv, int32_t id) {
    if (tv->n == tv->cap) {
        size_t cap = tv->cap ? tv->cap * 2 : 64;
        int32_t *ids = al_realloc(tv->ids, cap * sizeof *ids);
        if (ids == NULL) return al_error(AL_ERR_NOMEM, "tokenize: out of memory");
        tv->ids = ids;
        tv->cap = cap;
    }
    tv->ids[tv->n++] = id;
    return AL_OK;
}

al_status tok_hash_init(tok_hash *h, size_t n_entries) {
    size_t n_slots = 16;
    while (n_slots < 2 * n_entries)
        n_slots *= 2;
    h->slots = al_malloc(n_slots * sizeof *h->slots);
    if (h->slots == NULL) return al_error(AL_ERR_NOMEM, "vocab: out of memory");
    memset(h->slots, 0xff, n_slots * sizeof *h->slots); /* every slot -1 */
    h->mask = (uint32_t)(n_slots - 1);
    return AL_OK;
}

int32_t vocab_lookup(const al_vocab *v, const char *s, size_t n) {
    uint32_t i = tok_hash_bytes(s, n, 0) & v->by_text.mask;
    for (;; i = (i + 1) & v->by_text.mask) {
        int32_t id = v->by_text.slots[i];
        if (id < 0) return -1;
        if (v->text_len[id] == n && memcmp(v->text + v->text_off[id], s, n) == 0) return id;
    }
}

int32_t vocab_insert(al_vocab *v, int32_t id) {
    const char *s = v->text + v->text_off[id];
    uint32_t n = v->text_len[id];
    uint32_t i = tok_hash_bytes(s, n, 0) & v->by_text.mask;
    for (;; i = (i + 1) & v->by_text.mask) {
        int32_t other = v->by_text.slots[i];
        if (other < 0) {
            v->by_text.slots[i] = id;
            return -1;
        }
        if (v->text_len[other] == n && memcmp(v->text + v->text_off[other], s, n) == 0)
            return other;
    }
}

/* The merge table is keyed by the concatenated text plus the length of the left part,
 * so "ab c" and "a bc" are different keys. */
int32_t merge_lookup(const al_vocab *v, const char *s, size_t n_left, size_t n) {
    uint32_t i = tok_hash_bytes(s, n, (uint32_t)n_left * 0x9E3779B1u) & v->merges.mask;
    for (;; i = (i + 1) & v->merges.mask) {
        int32_t r = v->merges.slots[i];
        if (r < 0) return -1;
        if (v->merge_n[r] == n && v->merge_n_left[r] == n_left &&
            memcmp(v->merge_text + v->merge_off[r], s, n) == 0)
            return r;
    }
}

/* ---- the merge queue shared by both tokenizers ----------------------------------------- */

static bool pair_before(const tok_pair *a, const tok_pair *b) {
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

al_status tok_heap_push(tok_heap *h, tok_pair p) {
    if (h->n == h->cap) {
        size_t cap = h->cap * 2 + 16;
        tok_pair *a = al_realloc(h->a, cap * sizeof *a);
        if (a == NULL) return al_error(AL_ERR_NOMEM, "tokenize: out of memory");
        h->a = a;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!pair_before(&p, &h->a[up])) break;
        h->a[i] = h->a[up];
        i = up;
    }
    h->a[i] = p;
    return AL_OK;
}

tok_pair tok_heap_pop(tok_heap *h) {
    tok_pair top = h->a[0], last = h->a[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pair_before(&h->a[c + 1], &h->a[c])) c++;
        if (!pair_before(&h->a[c], &last)) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (n > 0) h->a[i] = last;
    return top;
}
