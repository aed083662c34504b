/* bpe.h: byte-level BPE: the pre-tokenizer and the merges (text modules only). */
#ifndef AL_TEXT_BPE_H
#define AL_TEXT_BPE_H

#ifndef TEXT_INTERNAL
#error "bpe.h is for the text modules, which define TEXT_INTERNAL"
#endif
#include "text/vocab.h"

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

#endif /* AL_TEXT_BPE_H */
