/* drafter.c: a draft model's drafts for speculative decoding (al_drafter, anyllm.h): a
 * small model continuing the text greedily on a context that follows the target's. */
#include <stdlib.h>
#include <string.h>

#include "anyllm.h"
#include "util.h"

enum { CATCH_UP_CHUNK = 256 }; /* positions per evaluation when the draft catches up */

struct al_drafter {
    al_context *c;
    int32_t *held; /* [n_ctx] the tokens in the context's cache, in order */
    int n_held;
    float *logits; /* [n_vocab] */
    int n_vocab;
};

al_status al_drafter_create(const al_model *m, int n_ctx, al_drafter **out) {
    *out = NULL;
    al_model_info mi;
    al_model_get_info(m, &mi);
    al_drafter *d = calloc(1, sizeof *d);
    al_context_params cp = al_context_default_params();
    cp.n_ctx = n_ctx;
    al_status st = d ? al_context_create(m, &cp, &d->c) : AL_ERR_NOMEM;
    if (st == AL_OK) {
        d->n_vocab = mi.n_vocab;
        d->held = malloc((size_t)al_context_n_ctx(d->c) * sizeof *d->held);
        d->logits = malloc((size_t)mi.n_vocab * sizeof *d->logits);
        if (!d->held || !d->logits) st = al_error(AL_ERR_NOMEM, "out of memory for a drafter");
    }
    if (st != AL_OK) {
        al_drafter_destroy(d);
        return st;
    }
    *out = d;
    return AL_OK;
}

void al_drafter_destroy(al_drafter *d) {
    if (!d) return;
    al_context_destroy(d->c);
    free(d->held);
    free(d->logits);
    free(d);
}

void al_drafter_reset(al_drafter *d) {
    al_context_reset(d->c);
    d->n_held = 0;
}

/* Evaluates toks [n] (in chunks), the last one's logits kept. */
static al_status draft_eval(al_drafter *d, const int32_t *toks, int n) {
    for (int done = 0; done < n;) {
        int nb = n - done < CATCH_UP_CHUNK ? n - done : CATCH_UP_CHUNK;
        al_status st = al_eval(d->c, toks + done, nb, d->logits, false);
        if (st != AL_OK) return st;
        memcpy(d->held + d->n_held, toks + done, (size_t)nb * sizeof *toks);
        d->n_held += nb;
        done += nb;
    }
    return AL_OK;
}

/* Cuts the cache back to what it shares with hist, keeping at most keep_max tokens. */
static void follow(al_drafter *d, const int32_t *hist, int n, int keep_max) {
    int keep = 0;
    while (keep < d->n_held && keep < n && keep < keep_max && d->held[keep] == hist[keep])
        keep++;
    if (keep == d->n_held) return;
    if (al_context_truncate(d->c, keep) != AL_OK) al_context_reset(d->c);
    d->n_held = al_context_n_past(d->c);
}

al_status al_drafter_sync(al_drafter *d, const int32_t *hist, int n) {
    follow(d, hist, n, n);
    if (n > al_context_n_ctx(d->c))
        return al_error(AL_ERR_ARG,
                        "drafter: %d tokens, a context "
                        "of %d",
                        n, al_context_n_ctx(d->c));
    return d->n_held < n ? draft_eval(d, hist + d->n_held, n - d->n_held) : AL_OK;
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int al_drafter_draft(al_drafter *d, const int32_t *hist, int n, int max, int32_t *out) {
    /* the last token is evaluated again: its logits are the first draft's */
    follow(d, hist, n, n - 1);
    int room = al_context_n_ctx(d->c) - n;
    if (max > room) max = room;
    if (max <= 0) return 0;
    if (draft_eval(d, hist + d->n_held, n - d->n_held) != AL_OK) return -1;
    for (int k = 0; k < max; k++) {
        out[k] = argmax(d->logits, d->n_vocab);
        if (k + 1 < max && draft_eval(d, out + k, 1) != AL_OK) return -1;
    }
    return max;
}
