/* spec.h: the drafts of speculative decoding (--spec ngram, --model-draft FILE).
 *
 * A draft is a guess of the next tokens; the model checks it in one evaluation of all
 * its tokens (gen.c), keeps the prefix it agrees with and one token of its own, so a
 * good guess yields several tokens for one read of the weights, and a wrong one costs
 * the extra positions of that evaluation. Two ways to guess:
 *   - ngram, without a second model (al_draft_ngram): the last 4 tokens (else 3) are
 *     looked up in the earlier text (prompt and output), and the tokens that followed
 *     their latest earlier occurrence are the draft: text that repeats what came before
 *     (code being edited, a document quoted, a list continued) is guessed well;
 *   - a draft model (al_drafter): a small model of the same vocabulary continues the
 *     text greedily, on a context of its own that follows the text the model keeps;
 *   - the model's own next-token-prediction block (al_draft_mtp, Qwen3.5 / 3.6 files),
 *     from the trunk's last hidden state and then its own.
 * Either draft proposes its tokens with certainty, and gen.c's check draws each token
 * from the model's own distribution, keeping the draft's where the draw agrees: that is
 * the rejection rule for such a draft, so the text is the one decoding gives without
 * drafts, greedy or sampled with a seed. The draft's length adapts (al_draft_len), so
 * text the guess gets wrong costs little.
 */
#ifndef AL_SPEC_H
#define AL_SPEC_H

#include <stdint.h>

#include "anyllm.h"

enum { SPEC_DRAFT_LIMIT = 64 };

typedef enum spec_kind { SPEC_NGRAM, SPEC_DRAFT, SPEC_MTP } spec_kind;

typedef struct spec_state {
    spec_kind kind;
    int draft_max;         /* --draft-max: the longest draft                   */
    al_draft_len len;      /* the length drafts have now (adapted: anyllm.h)  */
    al_drafter *drafter;   /* SPEC_DRAFT: the draft model's (anyllm.h)         */
    al_model *draft_model; /* the caller's (gen.c loads and frees it)         */
    al_context *mtp_ctx;   /* SPEC_MTP: the model's context, made with mtp   */
    /* what it did, for the summary line */
    long n_drafts, n_drafted, n_accepted;
} spec_state;

/* An n-gram drafter (nothing to free). */
void spec_init(spec_state *s, int draft_max);

/* A draft model's drafter over draft, with n_ctx positions (the main context's); the
 * state owns the drafter from now on (spec_free). */
al_status spec_init_draft(spec_state *s, int draft_max, const al_model *draft, int n_ctx);
void spec_free(spec_state *s);
/* The model's own next-token-prediction block drafts (al_draft_mtp) over c, a context
 * made with al_context_params.mtp. */
void spec_init_mtp(spec_state *s, int draft_max, al_context *c);
/* "ngram", "draft" or "mtp". */
const char *spec_kind_name(const spec_state *s);

/* Whether the draft model's vocabulary is the model's: the same tokens with the same
 * texts, and as many logits. false with why (a sentence) filled in otherwise. */
bool spec_same_vocab(const al_model *m, const al_model *draft, char *why, size_t cap);

/* A draft of at most max tokens to follow hist [n] (its last token included). Returns
 * its length (0: no guess), or -1 when the draft model's evaluation failed
 * (al_last_error says why). */
int spec_draft(spec_state *s, const int32_t *hist, int n, int max, int32_t *out);

/* A new text: the draft length and pauses back to the start, a draft model's context
 * emptied (the counts stay). */
void spec_restart(spec_state *s);

/* A draft model evaluates hist [n] (a prompt), so that the first draft does not; a
 * no-op for n-gram drafts. */
al_status spec_sync(spec_state *s, const int32_t *hist, int n);

/* The model took n_accepted of a draft of n_drafted tokens: adapts the length. */
void spec_result(spec_state *s, int n_drafted, int n_accepted);

#endif
