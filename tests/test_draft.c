/* test_draft.c: speculative decoding's drafts in the library (anyllm.h): the n-gram
 * draft's matches and the draft length's adaptation. */
#include <string.h>

#include "anyllm.h"
#include "test.h"

static void test_ngram(void) {
    int32_t out[16];
    /* the last 4 tokens (3 4 5 6) occurred at 2: their continuation 7 8 9 */
    const int32_t a[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 3, 4, 5, 6};
    int n = al_draft_ngram(a, 13, 8, out);
    CHECK(n == 7 && out[0] == 7 && out[1] == 8 && out[2] == 9 && out[3] == 3 && out[6] == 6);
    CHECK(al_draft_ngram(a, 13, 2, out) == 2 && out[0] == 7 && out[1] == 8); /* max */
    /* the latest occurrence wins: 1 2 3 -> 4 (at 0) and -> 9 (at 4) */
    const int32_t b[] = {1, 2, 3, 4, 1, 2, 3, 9, 5, 1, 2, 3};
    CHECK(al_draft_ngram(b, 12, 1, out) == 1 && out[0] == 9);
    /* no 4-gram, a 3-gram: 5 6 7 -> 8 */
    const int32_t c[] = {5, 6, 7, 8, 0, 5, 6, 7};
    CHECK(al_draft_ngram(c, 8, 4, out) == 4 && out[0] == 8 && out[1] == 0 && out[2] == 5);
    /* only 2 tokens repeat: too weak a match, no draft */
    const int32_t d[] = {5, 6, 1, 2, 3, 5, 6};
    CHECK(al_draft_ngram(d, 7, 4, out) == 0);
    /* too short a history, and max 0 */
    CHECK(al_draft_ngram(a, 3, 4, out) == 0);
    CHECK(al_draft_ngram(a, 13, 0, out) == 0);
}

static void test_length(void) {
    al_draft_len d;
    al_draft_len_init(&d, 8);
    CHECK(al_draft_len_next(&d, 100) == 2); /* starts short */
    al_draft_len_result(&d, 2, 2);
    CHECK(al_draft_len_next(&d, 100) == 4); /* taken whole: doubles */
    al_draft_len_result(&d, 4, 4);
    CHECK(al_draft_len_next(&d, 100) == 8);
    al_draft_len_result(&d, 8, 8);
    CHECK(al_draft_len_next(&d, 100) == 8); /* up to max */
    CHECK(al_draft_len_next(&d, 3) == 3);   /* the caller's limit */
    al_draft_len_result(&d, 8, 3);
    CHECK(al_draft_len_next(&d, 100) == 8);    /* partly taken: kept */
    for (int want = 4; want >= 1; want /= 2) { /* refused at once: halves */
        al_draft_len_result(&d, 8, 0);
        CHECK(al_draft_len_next(&d, 100) == want);
    }
    /* one token refused: pauses of 1, then 2, then 4 steps */
    int pauses[3];
    for (int p = 0; p < 3; p++) {
        al_draft_len_result(&d, 1, 0);
        int skipped = 0;
        while (al_draft_len_next(&d, 100) == 0)
            skipped++;
        pauses[p] = skipped;
    }
    CHECK(pauses[0] == 1 && pauses[1] == 2 && pauses[2] == 4);
    al_draft_len_result(&d, 1, 1); /* taken: the pause resets */
    CHECK(al_draft_len_next(&d, 100) == 2);
    al_draft_len_result(&d, 2, 0);
    al_draft_len_result(&d, 1, 0);
    int skipped = 0;
    while (al_draft_len_next(&d, 100) == 0)
        skipped++;
    CHECK(skipped == 1);
}

int main(void) {
    TEST_RUN(test_ngram);
    TEST_RUN(test_length);
    return test_finish();
}
