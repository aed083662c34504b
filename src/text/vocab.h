/* vocab.h: the vocabulary's token types and, for the text modules (TEXT_INTERNAL), the
 * layout of struct al_vocab and the helpers that spm.c, bpe.c, special.c and
 * tokenizer.c share (vocab.c). */
#ifndef AL_TEXT_VOCAB_H
#define AL_TEXT_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anyllm.h"

/* Token types as stored in tokenizer.ggml.token_type. */
enum {
    TOK_UNDEFINED = 0,
    TOK_NORMAL = 1,
    TOK_UNKNOWN = 2,
    TOK_CONTROL = 3,
    TOK_USER = 4, /* user-defined: matched in text before tokenizing, printed as is */
    TOK_UNUSED = 5,
    TOK_BYTE = 6, /* "<0xNN>": one raw byte */
};

/* A byte range [off, off + len) of a text. */
typedef struct tok_span {
    size_t off, len;
} tok_span;

#ifdef TEXT_INTERNAL
/* ---- the tables' layout, for the text modules only ------------------------------------ */

/* A growable array of token ids. */
typedef struct tok_vec {
    int32_t *ids;
    size_t n, cap;
} tok_vec;

al_status tok_vec_push(tok_vec *tv, int32_t id);

/* Open-addressing hash set of ids keyed by text (slots hold ids, -1 = empty). */
typedef struct tok_hash {
    int32_t *slots;
    uint32_t mask; /* n_slots - 1; n_slots is a power of two, at least twice the entries */
} tok_hash;

/* A candidate merge of two adjacent symbols, for both tokenizers: the pair with the
 * smallest key merges first (BPE: the merge rank; SentencePiece: minus the score of
 * the token it forms), the leftmost on ties. */
typedef struct tok_pair {
    double key;
    int left, right;
    uint32_t n; /* bytes of both symbols when queued: a changed length marks it stale */
} tok_pair;

/* A binary min-heap of pairs. */
typedef struct tok_heap {
    tok_pair *a;
    size_t n, cap;
} tok_heap;

al_status tok_heap_push(tok_heap *h, tok_pair p);
tok_pair tok_heap_pop(tok_heap *h); /* h->n must be > 0 */

struct bpe_pre; /* compiled pre-tokenizer regexes, bpe.c */
struct special_ac; /* the special-token matcher, special.c */

/* A stretch of the input: raw text to tokenize (id < 0) or one special token. */
typedef struct tok_frag {
    int32_t id;
    size_t off, len;
} tok_frag;

struct al_vocab {
    char *path;  /* for messages */
    bool is_spm; /* "llama" (SentencePiece-style); else "gpt2" (byte-level BPE) */
    int32_t n_tokens;

    char *text;         /* all token texts, each NUL-terminated */
    uint32_t *text_off; /* [n_tokens] into text */
    uint32_t *text_len; /* [n_tokens] bytes, without the NUL */
    float *score;       /* [n_tokens] SPM merge priority (higher merges first) */
    uint8_t *type;      /* [n_tokens] TOK_* */
    uint8_t *eog;       /* [n_tokens] 1 for tokens that end generation */
    tok_hash by_text;   /* text -> id */

    char *piece;         /* the bytes each token stands for, decoded once at load */
    uint32_t *piece_off; /* [n_tokens] into piece */
    uint32_t *piece_len; /* [n_tokens] */

    int32_t bos, eos, unk, eot, eom, pad; /* -1 when absent */
    bool add_bos, add_eos, add_space_prefix;

    int32_t byte_token[256]; /* token that spells one raw byte, or -1 */
    int32_t *special;        /* ids matched in raw text: control, unknown, user-defined, */
    int n_special;           /* longest text first                                       */
    struct special_ac *ac;   /* finds the special[] texts in one pass                    */

    /* BPE: merges "left right" keyed by (left, right) text; rank = position in the file */
    char *merge_text;       /* left and right concatenated, no separator */
    uint32_t *merge_off;    /* [n_merges] */
    uint32_t *merge_n_left; /* [n_merges] bytes of the left part */
    uint32_t *merge_n;      /* [n_merges] bytes of both parts */
    int32_t n_merges;
    tok_hash merges;    /* slots hold ranks */
    bool ignore_merges; /* a pre-token that is itself a token is emitted whole */
    struct bpe_pre *pre;
    struct g_trie *trie; /* the tokens as a byte trie, for grammars (gmatch.c); built on first use */
};

/* Id of the token whose text is exactly s[0..n), or -1. */
int32_t vocab_lookup(const al_vocab *v, const char *s, size_t n);

/* Rank of the merge whose left part is s[0..n_left) and right part s[n_left..n), or -1. */
int32_t merge_lookup(const al_vocab *v, const char *s, size_t n_left, size_t n);

/* FNV-1a; the hash tables of the module use it. */
uint32_t tok_hash_bytes(const char *s, size_t n, uint32_t seed);

/* Length of the well-formed UTF-8 sequence at s[0..n) (1 to 4), or 0 if the bytes there
 * do not start one (RFC 3629: no overlongs, surrogates or values above U+10FFFF). */
size_t utf8_valid_len(const unsigned char *s, size_t n);

/* Makes h an empty table with room for n_entries at most half full. */
al_status tok_hash_init(tok_hash *h, size_t n_entries);

/* Inserts token id into by_text; returns the id that already has the same text, or -1. */
int32_t vocab_insert(al_vocab *v, int32_t id);

#endif /* TEXT_INTERNAL */

#endif /* AL_TEXT_VOCAB_H */
