/* spm.h: SentencePiece-style tokenization of one stretch of text (text modules only). */
#ifndef AL_TEXT_SPM_H
#define AL_TEXT_SPM_H

#ifndef TEXT_INTERNAL
#error "spm.h is for the text modules, which define TEXT_INTERNAL"
#endif
#include "text/vocab.h"

/* SentencePiece: tokenizes one stretch of raw text, prefixing "▁" if add_prefix. */
al_status spm_tokenize(const al_vocab *v, const char *text, size_t len, bool add_prefix,
                       tok_vec *out);

#endif /* AL_TEXT_SPM_H */
