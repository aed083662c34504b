/* tokens48.h: the 48 token ids of the generated models' reference logits (test_hybrid,
 * test_mtp, test_glm4moe), all below a 512-token vocabulary. */
#ifndef AL_TEST_TOKENS48_H
#define AL_TEST_TOKENS48_H

#include <stdint.h>

enum { N_TOK = 48 };

static const int32_t tokens[N_TOK] = {
    1,   168, 488, 80,  205, 336, 27,  40,  423, 277, 51,  190, 301, 32,  468, 262,
    112, 22,  47,  225, 217, 38,  126, 49,  285, 220, 33,  426, 292, 66,  488, 117,
    325, 324, 301, 488, 34,  298, 302, 206, 28,  502, 116, 26,  288, 442, 71,  151};

#endif
