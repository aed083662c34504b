/* spec.c: n-gram and draft-model drafts for speculative decoding (spec.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec.h"

enum { CATCH_UP_CHUNK = 256 }; /* positions per evaluation when the draft catches up */

void spec_init(spec_state *s, int draft_max) {
    *s = (spec_state){.kind = SPEC_NGRAM, .draft_max = draft_max};
    spec_restart(s);
}

al_status spec_init_draft(spec_state *s, int draft_max, al_context *dc, int n_vocab) {
    spec_init(s, draft_max);
    s->kind = SPEC_DRAFT;
    s->held = malloc((size_t)al_context_n_ctx(dc) * sizeof *s->held);
    s->logits = malloc((size_t)n_vocab * sizeof *s->logits);
    if (!s->held || !s->logits) {
        free(s->held);
        free(s->logits);
        s->held = NULL;
        s->logits = NULL;
        return AL_ERR_NOMEM;
    }
    s->dc = dc;
    s->n_vocab = n_vocab;
    return AL_OK;
}

void spec_free(spec_state *s) {
    if (s->kind != SPEC_DRAFT) return;
    al_context_destroy(s->dc);
    free(s->held);
    free(s->logits);
    s->dc = NULL;
    s->held = NULL;
    s->logits = NULL;
}

bool spec_same_vocab(const al_model *m, const al_model *draft, char *why, size_t cap) {
    const al_vocab *a = al_model_vocab(m), *b = al_model_vocab(draft);
    al_model_info ma, mb;
    al_model_get_info(m, &ma);
    al_model_get_info(draft, &mb);
    int na = a ? al_vocab_n_tokens(a) : 0, nb = b ? al_vocab_n_tokens(b) : 0;
    if (!a || !b || na != nb || ma.n_vocab != mb.n_vocab) {
        snprintf(why, cap, "it has %d tokens (%d logits), the model %d (%d)", nb, mb.n_vocab, na,
                 ma.n_vocab);
        return false;
    }
    for (int i = 0; i < na; i++) {
        const char *x = al_vocab_text(a, i), *y = al_vocab_text(b, i);
        if (x != y && (!x || !y || strcmp(x, y))) {
            snprintf(why, cap, "token %d is '%.40s' there and '%.40s' in the model", i, y ? y : "",
                     x ? x : "");
            return false;
        }
    }
    return true;
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Evaluates toks [n] on the draft context (in chunks), the last one's logits kept. */
static bool draft_eval(spec_state *s, const int32_t *toks, int n) {
    for (int done = 0; done < n;) {
        int nb = n - done < CATCH_UP_CHUNK ? n - done : CATCH_UP_CHUNK;
        if ((s->err = al_eval(s->dc, toks + done, nb, s->logits, false)) != AL_OK) return false;
        memcpy(s->held + s->n_held, toks + done, (size_t)nb * sizeof *toks);
        s->n_held += nb;
        done += nb;
    }
    return true;
}

/* The draft model continues hist greedily: its cache is cut back to what it shares
 * with hist (a recurrent state may go back further: what it keeps is read back), the
 * rest of hist evaluated, then max tokens drawn one at a time. */
static int model_draft(spec_state *s, const int32_t *hist, int n, int max, int32_t *out) {
    int keep = 0;
    while (keep < s->n_held && keep < n - 1 && s->held[keep] == hist[keep])
        keep++;
    if (keep < s->n_held) {
        if (al_context_truncate(s->dc, keep) != AL_OK) al_context_reset(s->dc);
        s->n_held = al_context_n_past(s->dc);
    }
    int room = al_context_n_ctx(s->dc) - n;
    if (max > room) max = room;
    if (max <= 0) return 0;
    if (!draft_eval(s, hist + s->n_held, n - s->n_held)) return -1;
    for (int k = 0; k < max; k++) {
        out[k] = argmax(s->logits, s->n_vocab);
        if (k + 1 < max && !draft_eval(s, out + k, 1)) return -1;
    }
    return max;
}

void spec_restart(spec_state *s) {
    al_draft_len_init(&s->len, s->draft_max);
    if (s->dc) al_context_reset(s->dc);
    s->n_held = 0;
}

al_status spec_sync(spec_state *s, const int32_t *hist, int n) {
    if (s->kind != SPEC_DRAFT || n <= s->n_held) return AL_OK;
    return draft_eval(s, hist + s->n_held, n - s->n_held) ? AL_OK : s->err;
}

int spec_draft(spec_state *s, const int32_t *hist, int n, int max, int32_t *out) {
    if ((max = al_draft_len_next(&s->len, max)) == 0) return 0;
    return s->kind == SPEC_NGRAM ? al_draft_ngram(hist, n, max, out)
                                 : model_draft(s, hist, n, max, out);
}

void spec_result(spec_state *s, int n_drafted, int n_accepted) {
    s->n_drafts++;
    s->n_drafted += n_drafted;
    s->n_accepted += n_accepted;
    al_draft_len_result(&s->len, n_drafted, n_accepted);
}
