/* spec.c: the drafts of speculative decoding for run, chat and bench (spec.h), over the
 * library's n-gram drafts and drafter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec.h"

void spec_init(spec_state *s, int draft_max) {
    *s = (spec_state){.kind = SPEC_NGRAM, .draft_max = draft_max};
    spec_restart(s);
}

al_status spec_init_draft(spec_state *s, int draft_max, const al_model *draft, int n_ctx) {
    spec_init(s, draft_max);
    s->kind = SPEC_DRAFT;
    return al_drafter_create(draft, n_ctx, &s->drafter);
}

void spec_init_mtp(spec_state *s, int draft_max, al_context *c) {
    spec_init(s, draft_max);
    s->kind = SPEC_MTP;
    s->mtp_ctx = c;
}

const char *spec_kind_name(const spec_state *s) {
    return s->kind == SPEC_NGRAM ? "ngram" : s->kind == SPEC_DRAFT ? "draft" : "mtp";
}

void spec_free(spec_state *s) {
    al_drafter_destroy(s->drafter);
    s->drafter = NULL;
}

bool spec_same_vocab(const al_model *m, const al_model *draft, char *why, size_t cap) {
    const al_vocab *a = al_model_vocab(m), *b = al_model_vocab(draft);
    al_model_info ma, mb;
    al_model_get_info(m, &ma);
    al_model_get_info(draft, &mb);
    if (!a || !b || ma.n_vocab != mb.n_vocab) {
        snprintf(why, cap, "it has %d logits, the model %d%s", mb.n_vocab, ma.n_vocab,
                 !a || !b ? " (and one has no tokenizer)" : "");
        return false;
    }
    return al_vocab_same(a, b, why, cap);
}

int spec_draft(spec_state *s, const int32_t *hist, int n, int max, int32_t *out) {
    if ((max = al_draft_len_next(&s->len, max)) == 0) return 0;
    switch (s->kind) {
    case SPEC_NGRAM: return al_draft_ngram(hist, n, max, out);
    case SPEC_DRAFT: return al_drafter_draft(s->drafter, hist, n, max, out);
    default: return al_draft_mtp(s->mtp_ctx, hist[n - 1], max, out);
    }
}

void spec_restart(spec_state *s) {
    al_draft_len_init(&s->len, s->draft_max);
    if (s->drafter) al_drafter_reset(s->drafter);
}

al_status spec_sync(spec_state *s, const int32_t *hist, int n) {
    return s->drafter ? al_drafter_sync(s->drafter, hist, n) : AL_OK;
}

void spec_result(spec_state *s, int n_drafted, int n_accepted) {
    s->n_drafts++;
    s->n_drafted += n_drafted;
    s->n_accepted += n_accepted;
    al_draft_len_result(&s->len, n_drafted, n_accepted);
}
