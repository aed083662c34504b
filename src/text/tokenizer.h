/* tokenizer.h: the vocabulary of a GGUF file and the two tokenizers built on it.
 *
 * The public functions (al_vocab_*, al_tokenize, al_token_to_bytes, al_detok_*) are
 * specified in anyllm.h. This header adds what other modules and the tests need:
 *   - vocab_from_gguf(), which the model loader calls on a file it has already parsed;
 *   - a few inspection hooks that let tests check the tokenizer against its own rules.
 *
 * The module is tokenizer.c (loading, special tokens, the al_tokenize driver, decoding,
 * streaming) on top of spm.c (SentencePiece-style merges by score), bpe.c (byte-level
 * BPE: pre-tokenizer regexes and merges by rank) and special.c (the special-token
 * matcher), which all stand on vocab.c (the tables and shared helpers). Each of those
 * has its own header; struct al_vocab's layout (vocab.h) is visible only where the
 * including file defines TEXT_INTERNAL; everything else uses the accessors.
 */
#ifndef AL_TOKENIZER_H
#define AL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anyllm.h"
#include "format/gguf.h"
#include "text/vocab.h"

/* Builds a vocabulary from the tokenizer.ggml.* keys of a parsed file. Everything needed
 * is copied, so f may be closed afterwards. Fails with AL_ERR_FORMAT for missing or
 * inconsistent keys and AL_ERR_UNSUPPORTED for an unknown tokenizer model or
 * pre-tokenizer, naming the file, key and value; *out is NULL on failure. */
al_status vocab_from_gguf(const gguf_file *f, al_vocab **out);

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


#endif /* AL_TOKENIZER_H */
