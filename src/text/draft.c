/* draft.c: n-gram drafts, the draft length of speculative decoding, and whether two
 * vocabularies are one (anyllm.h); the draft model's drafter is src/model/drafter.c. */
#include <stdio.h>
#include <string.h>

#include "anyllm.h"

enum { NGRAM_MAX = 4, NGRAM_MIN = 3, FIRST_LEN = 2, PAUSE_MAX = 32 };

/* The start of the latest occurrence of the last n tokens that ends before the last
 * token (so it has a continuation), or -1. A backwards scan: the history is at most a
 * context long, which costs microseconds against a model's evaluation. */
static int latest_match(const int32_t *hist, int n_hist, int n) {
    const int32_t *key = hist + n_hist - n;
    for (int i = n_hist - n - 1; i >= 0; i--)
        if (hist[i + n - 1] == key[n - 1] && !memcmp(hist + i, key, (size_t)n * sizeof *key))
            return i;
    return -1;
}

int al_draft_ngram(const int32_t *hist, int n, int max, int32_t *out) {
    for (int g = NGRAM_MAX; g >= NGRAM_MIN && max > 0; g--) {
        if (n <= g) continue;
        int at = latest_match(hist, n, g);
        if (at < 0) continue;
        int from = at + g, k = n - from < max ? n - from : max;
        memcpy(out, hist + from, (size_t)k * sizeof *out);
        return k;
    }
    return 0;
}

void al_draft_len_init(al_draft_len *d, int max) {
    *d = (al_draft_len){.max = max, .cur = max < FIRST_LEN ? max : FIRST_LEN};
}

int al_draft_len_next(al_draft_len *d, int limit) {
    if (d->skip > 0) {
        d->skip--;
        return 0;
    }
    int n = d->cur < limit ? d->cur : limit;
    return n > 0 ? n : 0;
}

void al_draft_len_result(al_draft_len *d, int n_drafted, int n_accepted) {
    if (n_accepted > 0) d->pause = 0;
    if (n_accepted == n_drafted && d->cur < d->max)
        d->cur = d->cur * 2 < d->max ? d->cur * 2 : d->max;
    else if (n_accepted == 0 && d->cur > 1)
        d->cur /= 2;
    else if (n_accepted == 0) { /* one token, refused: pause, longer each time */
        d->pause = d->pause ? (d->pause * 2 < PAUSE_MAX ? d->pause * 2 : PAUSE_MAX) : 1;
        d->skip = d->pause;
    }
}

bool al_vocab_same(const al_vocab *a, const al_vocab *b, char *why, size_t cap) {
    int na = al_vocab_n_tokens(a), nb = al_vocab_n_tokens(b);
    if (na != nb) {
        snprintf(why, cap, "%d tokens against %d", nb, na);
        return false;
    }
    for (int i = 0; i < na; i++) {
        const char *x = al_vocab_text(a, i), *y = al_vocab_text(b, i);
        if (x != y && (!x || !y || strcmp(x, y))) {
            snprintf(why, cap, "token %d is '%.40s' against '%.40s'", i, y ? y : "", x ? x : "");
            return false;
        }
    }
    return true;
}
