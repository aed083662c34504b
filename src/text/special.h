/* special.h: the special-token matcher (text modules only). */
#ifndef AL_TEXT_SPECIAL_H
#define AL_TEXT_SPECIAL_H

#ifndef TEXT_INTERNAL
#error "special.h is for the text modules, which define TEXT_INTERNAL"
#endif
#include "text/vocab.h"

/* Special tokens (special.c). special_ac_build() makes v->ac from
 * v->special[]. special_partition() splits text into raw stretches and special tokens
 * (*frags freed with al_free): user-defined tokens always, control and unknown tokens
 * when parse_special and not overlapping one of the spans (sorted, disjoint; may be
 * NULL when n_spans is 0). */
al_status special_ac_build(al_vocab *v, const char *path);
void special_ac_destroy(struct special_ac *ac);
al_status special_partition(const al_vocab *v, const char *text, size_t len, bool parse_special,
                            const tok_span *spans, int n_spans, tok_frag **frags,
                            size_t *n_frags);

#endif /* AL_TEXT_SPECIAL_H */
