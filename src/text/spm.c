/* spm.c: SentencePiece-style tokenization by scores, as llama.cpp does it for
 * tokenizer.ggml.model "llama" (Llama 1/2, Mistral, Phi-3, ...).
 *
 * The text is written with "▁" (U+2581) for every space, optionally with one "▁" in
 * front. It starts as one symbol per character. While some pair of neighbouring symbols
 * spells a token, the pair whose token has the highest score is merged (on a tie, the
 * leftmost pair). Each final symbol is then its token, or, when it is a character
 * the vocabulary lacks, one byte token "<0xNN>" per byte (the unknown token if there are
 * no byte tokens).
 *
 * The candidate pairs sit in the merge heap shared with BPE (tok_heap), keyed by minus
 * the score, so the best-scoring pair comes out first. A merge changes two symbols, so entries for
 * pairs that no longer exist are left in the heap and skipped when they come out: an
 * entry is stale when either symbol has been absorbed or their lengths no longer add up
 * to the entry's length (symbols only grow, so equal lengths mean the same pair).
 *
 * Bytes that are not well-formed UTF-8 become one-byte symbols and so byte tokens; the
 * characters around them tokenize as usual.
 */
#define TEXT_INTERNAL
#include "text/spm.h"

#include <string.h>

#include "util.h"

typedef struct spm_sym {
    int prev, next; /* neighbours in the list of live symbols; -1 at the ends */
    uint32_t off;   /* start in the escaped text */
    uint32_t n;     /* bytes; 0 once merged into its left neighbour */
} spm_sym;

typedef struct spm_state {
    const al_vocab *v;
    const char *s; /* escaped text */
    spm_sym *sym;
    tok_heap heap;
} spm_state;

/* Queues the pair (left, right) if together they spell a token. */
static al_status try_pair(spm_state *st, int left, int right) {
    if (left < 0 || right < 0) return AL_OK;
    uint32_t n = st->sym[left].n + st->sym[right].n;
    int32_t id = vocab_lookup(st->v, st->s + st->sym[left].off, n);
    return id < 0 ? AL_OK
                  : tok_heap_push(&st->heap, (tok_pair){-(double)st->v->score[id], left, right, n});
}

/* Appends the token of a final symbol, or byte tokens for each of its bytes. */
static al_status emit_symbol(const al_vocab *v, const char *s, uint32_t n, tok_vec *out) {
    int32_t id = vocab_lookup(v, s, n);
    if (id >= 0) return tok_vec_push(out, id);
    for (uint32_t i = 0; i < n; i++) {
        int32_t b = v->byte_token[(unsigned char)s[i]];
        if (b < 0) b = v->unk;
        if (b < 0)
            return al_error(AL_ERR_ARG,
                            "%s: the vocabulary has no token for byte 0x%02X and "
                            "no unknown token",
                            v->path, (unsigned char)s[i]);
        al_status st = tok_vec_push(out, b);
        if (st != AL_OK) return st;
    }
    return AL_OK;
}

/* Writes the text with spaces escaped into *esc (allocated); returns its length. */
static al_status escape_spaces(const char *text, size_t len, bool add_prefix, char **esc,
                               size_t *n_esc) {
    /* At most 3 bytes per input byte plus the prefix; len is bounded by the caller. */
    char *e = al_malloc(3 * len + 3);
    if (e == NULL) return al_error(AL_ERR_NOMEM, "tokenize: out of memory");
    size_t o = 0;
    if (add_prefix) {
        memcpy(e, "\xe2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(e + o, "\xe2\x96\x81", 3);
            o += 3;
        } else
            e[o++] = text[i];
    }
    *esc = e;
    *n_esc = o;
    return AL_OK;
}

al_status spm_tokenize(const al_vocab *v, const char *text, size_t len, bool add_prefix,
                       tok_vec *out) {
    char *s = NULL;
    size_t n = 0;
    al_status st = escape_spaces(text, len, add_prefix, &s, &n);
    if (st != AL_OK) return st;
    if (n == 0) {
        al_free(s);
        return AL_OK;
    }
    /* One symbol per character (at most n of them). */
    spm_state ss = {.v = v, .s = s};
    ss.sym = al_malloc(n * sizeof *ss.sym);
    if (ss.sym == NULL) {
        al_free(s);
        return al_error(AL_ERR_NOMEM, "tokenize: out of memory");
    }
    int n_sym = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_valid_len((const unsigned char *)s + i, n - i);
        if (k == 0) k = 1; /* a stray byte is a symbol of its own */
        ss.sym[n_sym] = (spm_sym){n_sym - 1, -1, (uint32_t)i, (uint32_t)k};
        if (n_sym > 0) ss.sym[n_sym - 1].next = n_sym;
        n_sym++;
        i += k;
    }
    for (int i = 1; i < n_sym && st == AL_OK; i++)
        st = try_pair(&ss, i - 1, i);

    while (ss.heap.n > 0 && st == AL_OK) {
        tok_pair p = tok_heap_pop(&ss.heap);
        spm_sym *l = &ss.sym[p.left], *r = &ss.sym[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.n) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) ss.sym[r->next].prev = p.left;
        st = try_pair(&ss, l->prev, p.left);
        if (st == AL_OK) st = try_pair(&ss, p.left, l->next);
    }

    for (int i = 0; i >= 0 && st == AL_OK; i = ss.sym[i].next)
        st = emit_symbol(v, s + ss.sym[i].off, ss.sym[i].n, out);
    al_free(ss.sym);
    al_free(ss.heap.a);
    al_free(s);
    return st;
}
