/* tokenizer.h: the vocabulary of a GGUF file and the two tokenizers built on it.
 *
 * The public functions (al_vocab_*, al_tokenize, al_token_to_bytes, al_detok_*) are
 * specified in anyllm.h. This header adds what other modules and the tests need:
 *   - vocab_from_gguf(), which the model loader calls on a file it has already parsed;
 *   - a few inspection hooks that let tests check the tokenizer against its own rules.
 *
 * The module is three files: tokenizer.c (loading, lookup tables, special tokens, the
 * al_tokenize driver, decoding, streaming), tokenizer_spm.c (SentencePiece-style merges
 * by score) and tokenizer_bpe.c (byte-level BPE: pre-tokenizer regexes and merges by
 * rank). They share struct al_vocab, whose layout is visible only when the including
 * file defines TOKENIZER_INTERNAL; everything else uses the accessors.
 */
#ifndef AL_TOKENIZER_H
#define AL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anyllm.h"
#include "gguf.h"

/* Builds a vocabulary from the tokenizer.ggml.* keys of a parsed file. Everything needed
 * is copied, so f may be closed afterwards. Fails with AL_ERR_FORMAT for missing or
 * inconsistent keys and AL_ERR_UNSUPPORTED for an unknown tokenizer model or
 * pre-tokenizer, naming the file, key and value; *out is NULL on failure. */
al_status vocab_from_gguf(const gguf_file *f, al_vocab **out);

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

/* ---- inspection hooks for tests ------------------------------------------------------ */

/* The token's type after loading (TOK_*), or -1 for an id out of range. Loading promotes
 * end-of-turn tokens such as "<|im_end|>" to TOK_CONTROL. */
int vocab_token_type(const al_vocab *v, int32_t id);

/* True for a SentencePiece-style vocabulary, false for byte-level BPE. */
bool vocab_is_spm(const al_vocab *v);

/* True when a "▁" is put in front of the text and after each special token
 * (tokenizer.ggml.add_space_prefix; SentencePiece only). Gemma's vocabularies say false:
 * their text is tokenized as written. */
bool vocab_adds_space_prefix(const al_vocab *v);

/* Tokenizes len bytes as one plain stretch of text: no special-token matching, no BOS or
 * EOS, and for SentencePiece no leading "▁" added. Same ownership as al_tokenize(). */
al_status vocab_tokenize_plain(const al_vocab *v, const char *text, size_t len, int32_t **tokens,
                               int *n_tokens);

/* Where the pre-tokenizer cuts len bytes of text: *ends (freed with al_free) receives the
 * end offset of each of the *n_pieces pieces, in order. A SentencePiece vocabulary has
 * no pre-tokenizer and returns one piece. */
al_status vocab_pre_split(const al_vocab *v, const char *text, size_t len, size_t **ends,
                          int *n_pieces);

/* A byte range [off, off + len) of a text. */
typedef struct tok_span {
    size_t off, len;
} tok_span;

/* al_tokenize() with parse_special, except that control and unknown tokens are not
 * recognised where they would overlap one of the n_spans spans (sorted by off,
 * disjoint): the chat renderer marks message content so, and only the template's own
 * markers become control tokens. add_special as in al_tokenize_params. */
al_status vocab_tokenize_guarded(const al_vocab *v, const char *text, size_t len,
                                 bool add_special, const tok_span *spans, int n_spans,
                                 int32_t **tokens, int *n_tokens);

/* BPE only: the rank of the merge "a b" (a and b in the vocabulary's byte-level
 * spelling), or -1 if there is no such merge. */
int32_t vocab_merge_rank(const al_vocab *v, const char *a, size_t n_a, const char *b, size_t n_b);

#ifdef TOKENIZER_INTERNAL
/* ---- shared by tokenizer*.c only ----------------------------------------------------- */

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

struct bpe_pre; /* compiled pre-tokenizer regexes, tokenizer_bpe.c */
struct special_ac; /* the special-token matcher, tokenizer_special.c */

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

/* SentencePiece: tokenizes one stretch of raw text, prefixing "▁" if add_prefix. */
al_status spm_tokenize(const al_vocab *v, const char *text, size_t len, bool add_prefix,
                       tok_vec *out);

/* Special tokens (tokenizer_special.c). special_ac_build() makes v->ac from
 * v->special[]. special_partition() splits text into raw stretches and special tokens
 * (*frags freed with al_free): user-defined tokens always, control and unknown tokens
 * when parse_special and not overlapping one of the spans (sorted, disjoint; may be
 * NULL when n_spans is 0). */
al_status special_ac_build(al_vocab *v, const char *path);
void special_ac_destroy(struct special_ac *ac);
al_status special_partition(const al_vocab *v, const char *text, size_t len, bool parse_special,
                            const tok_span *spans, int n_spans, tok_frag **frags,
                            size_t *n_frags);

/* Byte-level BPE. */
al_status bpe_pre_create(const char *path, const char *name, struct bpe_pre **out,
                         bool *ignore_merges, bool *add_bos);
void bpe_pre_destroy(struct bpe_pre *p);
al_status bpe_split(const al_vocab *v, const char *text, size_t len, size_t **ends,
                    size_t *n_pieces);
al_status bpe_tokenize(const al_vocab *v, const char *text, size_t len, tok_vec *out);

/* GPT-2's printable spelling of bytes: byte b is written as the code point
 * bpe_byte_cp(b); bpe_cp_byte() inverts it (-1 for code points that spell no byte). */
uint32_t bpe_byte_cp(uint8_t b);
int bpe_cp_byte(uint32_t cp);
#endif /* TOKENIZER_INTERNAL */

#endif /* AL_TOKENIZER_H */
