/* grammar.h: the compiled form of a grammar (grammar.c builds it from text) and the
 * vocabulary's token trie that the matcher walks (gmatch.c).
 *
 * A compiled grammar is a list of rules; a rule is a list of alternatives; an
 * alternative is a sequence of elements in code[], ended by G_END. An element matches
 * one character from a set (G_CHARS) or a whole rule (G_RULE). Repetitions and groups
 * of the text become rules of their own, so only these two kinds remain:
 *     x*      R ::= x R | ()        x+   R ::= x R | x        x?   R ::= x | ()
 *     x{m,n}  x ... x (m times) followed by a chain of n - m optional x's
 * Characters are Unicode code points.
 */
#ifndef AL_TEXT_GRAMMAR_H
#define AL_TEXT_GRAMMAR_H

#include <stdbool.h>
#include <stdint.h>

#include "anyllm.h"

enum { G_END, G_CHARS, G_RULE };

typedef struct g_elem {
    int32_t op;  /* G_END, G_CHARS or G_RULE */
    int32_t arg; /* G_CHARS: a set in sets[]; G_RULE: a rule id */
} g_elem;

typedef struct g_set {
    bool negate;
    int32_t first, n; /* ranges[first .. first + n): inclusive [lo, hi] pairs */
} g_set;

typedef struct g_rules {
    g_elem *code;
    int32_t n_code;
    int32_t *alt;       /* start of each alternative in code[], rule by rule */
    int32_t *rule_alt;  /* [n_rules + 1]: rule r's alternatives are alt[rule_alt[r] ..] */
    int32_t n_rules, root;
    g_set *sets;
    int32_t n_sets;
    uint32_t *ranges;   /* lo, hi, lo, hi, ... */
} g_rules;

/* Parses the grammar text; AL_ERR_ARG with the line and what is wrong. */
al_status g_compile(const char *text, g_rules *out);
void g_rules_free(g_rules *r);

static inline bool g_set_has(const g_rules *r, int32_t set, uint32_t c) {
    const g_set *s = &r->sets[set];
    if (s->n == 0) return s->negate; /* '.': a grammar of those alone has no ranges */
    const uint32_t *rg = r->ranges + 2 * s->first;
    bool in = false;
    for (int32_t i = 0; i < s->n && !in; i++) in = c >= rg[2 * i] && c <= rg[2 * i + 1];
    return in != s->negate;
}

/* Tokens of the grammar's vocabulary: the bytes al_grammar_mask writes. */
int32_t g_grammar_n_tokens(const al_grammar *g);

/* ---- the vocabulary's tokens as a byte trie, built once per vocabulary ---------------- */

/* Nodes in depth-first order: node i spells the bytes on the path to it, its subtree is
 * nodes [i, skip[i]), and the tokens whose bytes end there are tok[tok_first[i] ..
 * tok_first[i + 1]). Node 0 is the root (the empty prefix). */
typedef struct g_trie {
    int32_t n_nodes;
    uint8_t *byte;
    uint16_t *depth;
    int32_t *skip;
    int32_t *tok_first; /* [n_nodes + 1] */
    int32_t *tok;
    int32_t max_depth;
} g_trie;

/* The vocabulary's trie, built on first use (thread-safe); NULL when memory ran out. */
const g_trie *g_vocab_trie(const al_vocab *v);
void g_trie_free(g_trie *t);

#endif /* AL_TEXT_GRAMMAR_H */
