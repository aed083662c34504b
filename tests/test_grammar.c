/* test_grammar.c: grammars (al_grammar_*) on real vocabularies from ../shared/vocab:
 * the text's errors, which texts a grammar takes (fed token by token, and byte token
 * by byte token for characters split across tokens), the mask against the token-by-token
 * oracle over the whole vocabulary in many states, and the sampler held to a grammar. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anyllm.h"
#include "test.h"

static al_vocab *g_gpt2, *g_spm;

static al_vocab *load_vocab(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/%s", test_shared_dir(), name);
    al_vocab *v = NULL;
    if (al_vocab_load(path, &v) != AL_OK) {
        fprintf(stderr, "  cannot load %s: %s\n", path, al_last_error());
        return NULL;
    }
    return v;
}

static void test_errors(void) {
    static const struct {
        const char *text, *expect;
    } cases[] = {
        {"", "no rule named root"},
        {"start ::= \"a\"", "no rule named root"},
        {"root ::= a", "rule 'a' is used but not defined"},
        {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
        {"root ::= root \"a\" | \"b\"", "left-recursive"},
        {"root ::= x\nx ::= y? x \"a\" | \"b\"\ny ::= \"c\"", "left-recursive"},
        {"root ::= (\"a\"?)*", "left-recursive"},
        {"root ::= \"abc", "unterminated"},
        {"root ::= [abc", "unterminated"},
        {"root ::= [z-a]", "reversed"},
        {"root ::= \"a\"{3,2}", "repetition"},
        {"root ::= \"a\"{99999}", "repetition"},
        {"root ::= \"a\"{2", "'}'"},
        {"root ::= (\"a\"", "'(' without ')'"},
        {"root ::= \"a\")", "')' without '('"},
        {"root ::= \"\\q\"", "unknown escape"},
        {"root ::= \"\\x4\"", "hex digits"},
        {"root ::= \"\\U00110000\"", "beyond U+10FFFF"},
        {"root ::= \"a\" @", "unexpected '@'"},
        {"root \"a\"", "expected a rule"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        al_grammar *g = NULL;
        al_status st = al_grammar_create(g_gpt2, cases[i].text, &g);
        CHECK_MSG(st == AL_ERR_ARG && !g, "case %zu: status %d", i, (int)st);
        CHECK_MSG(strstr(al_last_error(), cases[i].expect) != NULL, "case %zu: '%s' lacks '%s'", i,
                  al_last_error(), cases[i].expect);
        al_grammar_destroy(g);
    }
    /* a chain of rules each starting with the next, deeper than the check recurses */
    size_t cap = 3000 * 24 + 64, len = 0;
    char *chain = malloc(cap);
    len += (size_t)snprintf(chain, cap, "root ::= r0\n");
    for (int i = 0; i < 3000; i++)
        len += (size_t)snprintf(chain + len, cap - len, "r%d ::= r%d\n", i, i + 1);
    snprintf(chain + len, cap - len, "r3000 ::= \"x\"\n");
    al_grammar *gc = NULL;
    CHECK(al_grammar_create(g_gpt2, chain, &gc) == AL_ERR_ARG && !gc);
    CHECK_MSG(strstr(al_last_error(), "more than 2000 deep"), "%s", al_last_error());
    free(chain);
    /* a short text that would expand to millions of rules is refused, not built */
    char big[2048] = "root ::=";
    for (int i = 0; i < 120; i++)
        strcat(big, " \"ab\"{0,10000}");
    al_grammar *g = NULL;
    CHECK(al_grammar_create(g_gpt2, big, &g) == AL_ERR_ARG && !g);
    CHECK_MSG(strstr(al_last_error(), "too large"), "%s", al_last_error());
}

/* The tokens of text: as the tokenizer cuts it (byte-level BPE), or one token per
 * character (SentencePiece, whose tokenizer would add a leading space): the piece of
 * the character ("▁" for a space) or its byte tokens. */
static int text_tokens(al_vocab *v, const char *text, int32_t **ids) {
    al_tokenize_params tp = {0};
    int32_t *t = NULL;
    int n = 0;
    if (v == g_gpt2) {
        if (al_tokenize(v, text, strlen(text), &tp, &t, &n) != AL_OK) return -1;
        *ids = malloc(((size_t)n + 1) * sizeof **ids);
        memcpy(*ids, t, (size_t)n * sizeof *t);
        al_free_tokens(t);
        return n;
    }
    *ids = malloc((4 * strlen(text) + 1) * sizeof **ids);
    for (size_t i = 0; text[i];) {
        size_t len = al_utf8_char_len(text + i, strlen(text + i));
        char piece[8];
        snprintf(piece, sizeof piece, "%.*s", (int)len, text + i);
        int32_t id = al_vocab_find(v, text[i] == ' ' ? "\xe2\x96\x81" : piece);
        if (id >= 0) (*ids)[n++] = id;
        for (size_t k = 0; id < 0 && k < len; k++) {
            snprintf(piece, sizeof piece, "<0x%02X>", (unsigned char)text[i + k]);
            (*ids)[n++] = al_vocab_find(v, piece);
        }
        i += len;
    }
    return n;
}

/* Feeds the text's tokens: 0 a token was refused, 1 every token was taken but the text
 * is not complete, 2 complete, 3 complete and finished. */
static int feed(al_grammar *g, al_vocab *v, const char *text) {
    int32_t *ids = NULL;
    int n = text_tokens(v, text, &ids);
    if (n < 0) return -1;
    al_grammar_reset(g);
    int r = 1;
    for (int i = 0; i < n && r; i++) {
        bool allows = al_grammar_allows(g, ids[i]);
        al_status st = al_grammar_accept(g, ids[i]);
        if ((st == AL_OK) != allows)
            r = -1; /* the two must agree */
        else if (st != AL_OK)
            r = 0;
    }
    free(ids);
    if (r == 1 && al_grammar_complete(g)) r = al_grammar_finished(g) ? 3 : 2;
    return r;
}

#define JSONISH                                                                                    \
    "root ::= obj\n"                                                                               \
    "obj ::= \"{\" ws ( pair ( \",\" ws pair )* )? \"}\"\n"                                        \
    "pair ::= str \":\" ws val ws\n"                                                               \
    "val ::= str | num | obj | \"true\" | \"false\" | \"null\"\n"                                  \
    "str ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\nt] )* \"\\\"\"\n"                  \
    "num ::= \"-\"? [0-9]+ ( \".\" [0-9]{1,6} )?\n"                                                \
    "ws ::= [ \\n]{0,4}\n"

static void test_match(void) {
    const struct {
        const char *grammar, *text;
        int expect;
    } cases[] = {
        {"root ::= \"hello\"", "hello", 3},
        {"root ::= \"hello\"", "hell", 1},
        {"root ::= \"hello\"", "help", 0},
        {"root ::= \"hello\"", "hello!", 0},
        {"root ::= [a-c]+", "abcabc", 2},
        {"root ::= [a-c]+", "abcd", 0},
        {"root ::= [^a-c]*", "xyz  q", 2},
        {"root ::= [^a-c]*", "xyzb", 0},
        {"root ::= \"ab\"{2,3}", "abab", 2},
        {"root ::= \"ab\"{2,3}", "ababab", 3},
        {"root ::= \"ab\"{2,3}", "abababab", 0},
        {"root ::= \"x\"{3}", "xx", 1},
        {"root ::= \"x\"{3}", "xxx", 3},
        {"root ::= (\"cat\" | \"car\" | \"cart\") \"!\"", "cart!", 3},
        {"root ::= (\"cat\" | \"car\" | \"cart\") \"!\"", "cars", 0},
        {"root ::= a b\n# a comment\na ::= \"1\"\n  | \"2\"\nb ::= [.]?", "2.", 3},
        {"root ::= .{2}", "\xc3\xa9\xe2\x98\x83", 3},
        {"root ::= ...", "a\xc3\xa9", 1}, /* no character class: no ranges at all */
        {"root ::= ...", "a\xc3\xa9" "b", 3},
        {"root ::= ...", "a\xc3\xa9" "bc", 0},
        {"root ::= \"\\u00e9\" [\\u2600-\\u26ff]", "\xc3\xa9\xe2\x98\x83", 3},
        {"root ::= \"\\u00e9\" [\\u2600-\\u26ff]", "\xc3\xa9\xe2\x9c\x93", 0},
        {JSONISH, "{\"a\": 1, \"b\": {\"c\": [\"x\"]}}", 0},
        {JSONISH, "{\"a\": -1.5, \"b\": {\"c\": \"x\\ny\"}, \"d\": true}", 3},
        {JSONISH, "{\"a\": -1.5, \"b\": {", 1},
        {JSONISH, "{\"a\": 1.1234567}", 0},
    };
    al_vocab *vs[2] = {g_gpt2, g_spm};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            al_grammar *g = NULL;
            al_status st = al_grammar_create(vs[k], cases[i].grammar, &g);
            CHECK_MSG(st == AL_OK, "case %zu: %s", i, al_last_error());
            if (st != AL_OK) continue;
            int r = feed(g, vs[k], cases[i].text);
            CHECK_MSG(r == cases[i].expect, "vocab %d case %zu '%s': %d, expected %d", k, i,
                      cases[i].text, r, cases[i].expect);
            al_grammar_destroy(g);
        }
}

/* Every character of a multi-byte character as its own byte token (SentencePiece's byte
 * fallback): each byte is allowed only where its character can go. */
static void test_byte_tokens(void) {
    al_grammar *g = NULL;
    CHECK(al_grammar_create(g_spm, "root ::= \"\\u00e9\" \"x\"", &g) == AL_OK);
    if (!g) return;
    int32_t c3 = al_vocab_find(g_spm, "<0xC3>"), a9 = al_vocab_find(g_spm, "<0xA9>"),
            aa = al_vocab_find(g_spm, "<0xAA>");
    CHECK(c3 >= 0 && a9 >= 0 && aa >= 0);
    CHECK(al_grammar_allows(g, c3) && !al_grammar_allows(g, a9));
    CHECK(al_grammar_accept(g, c3) == AL_OK);
    CHECK(!al_grammar_complete(g));
    CHECK(al_grammar_allows(g, a9) && !al_grammar_allows(g, aa));
    CHECK(al_grammar_accept(g, aa) == AL_ERR_ARG); /* refused, state kept */
    CHECK(al_grammar_accept(g, a9) == AL_OK);
    CHECK(al_grammar_allows(g, al_vocab_find(g_spm, "x")));
    CHECK(!al_grammar_allows(g, al_vocab_eos(g_spm)));
    al_grammar_destroy(g);
    /* byte-level BPE: the lone bytes E0 and F0 would start characters of U+0800 and up
     * (only an overlong form reaches "{"), E2 starts U+2603's */
    g = NULL;
    CHECK(al_grammar_create(g_gpt2, "root ::= \"{\" | \"\\u2603\"", &g) == AL_OK);
    if (!g) return;
    int32_t e0 = al_vocab_find(g_gpt2, "\xc3\xa0"), f0 = al_vocab_find(g_gpt2, "\xc3\xb0"),
            e2 = al_vocab_find(g_gpt2, "\xc3\xa2");
    CHECK(e0 >= 0 && f0 >= 0 && e2 >= 0);
    CHECK(!al_grammar_allows(g, e0) && !al_grammar_allows(g, f0) && al_grammar_allows(g, e2));
    uint8_t *mask = malloc((size_t)al_vocab_n_tokens(g_gpt2));
    CHECK(al_grammar_mask(g, mask) == AL_OK && !mask[e0] && !mask[f0] && mask[e2]);
    free(mask);
    al_grammar_destroy(g);
}

/* The mask's trie walk against al_grammar_allows token by token, over the whole
 * vocabulary, in the states along a text. */
static int mask_mismatches(al_grammar *g, al_vocab *v, uint8_t *mask) {
    int bad = 0, n_allowed = 0, nv = al_vocab_n_tokens(v);
    if (al_grammar_mask(g, mask) != AL_OK) return -1;
    for (int32_t id = 0; id < nv; id++) {
        bool a = al_grammar_allows(g, id);
        n_allowed += a;
        if (a != (mask[id] != 0) && bad++ < 3)
            fprintf(stderr, "  token %d '%s': allows %d, mask %d\n", id, al_vocab_text(v, id), a,
                    mask[id]);
    }
    return n_allowed == 0 ? -2 : bad;
}

static void test_mask(void) {
    const char *text = "{\"name\": \"Ada \\\"L\\\"\", \"born\": 1815, \"tags\": {\"x\": -2.25}}";
    al_vocab *vs[2] = {g_gpt2, g_spm};
    for (int k = 0; k < 2; k++) {
        al_grammar *g = NULL;
        CHECK(al_grammar_create(vs[k], JSONISH, &g) == AL_OK);
        uint8_t *mask = malloc((size_t)al_vocab_n_tokens(vs[k]));
        int32_t *ids = NULL;
        int n = text_tokens(vs[k], text, &ids);
        CHECK(n > 0);
        for (int i = 0; g && mask && i <= n; i++) {
            int bad = mask_mismatches(g, vs[k], mask);
            CHECK_MSG(bad == 0, "vocab %d, after %d tokens: %d", k, i, bad);
            if (i < n) CHECK(al_grammar_accept(g, ids[i]) == AL_OK);
        }
        CHECK(g && al_grammar_finished(g));
        if (g && mask) { /* finished: the mask is the end-of-generation tokens alone */
            al_grammar_mask(g, mask);
            int n_on = 0;
            for (int id = 0; id < al_vocab_n_tokens(vs[k]); id++)
                n_on += mask[id];
            CHECK(n_on >= 1 && mask[al_vocab_eos(vs[k])]);
            for (int id = 0; id < al_vocab_n_tokens(vs[k]); id++)
                if (mask[id]) CHECK(al_vocab_is_eog(vs[k], id));
        }
        free(ids);
        free(mask);
        al_grammar_destroy(g);
    }
}

/* Random logits, greedy and sampled: every token the sampler picks is allowed, and the
 * text ends complete. */
static void test_sampler(void) {
    const char *gram = "root ::= [0-9]{2,4} \"-\" (\"alpha\" | \"beta\" | [a-z]{1,8}) \".\"";
    al_vocab *v = g_gpt2;
    int nv = al_vocab_n_tokens(v);
    float *logits = malloc((size_t)nv * sizeof *logits);
    for (int trial = 0; trial < 40; trial++) {
        al_sampler_params sp = al_sampler_default_params();
        sp.temperature = trial % 2 ? 1.0f : 0.0f;
        sp.top_k = trial % 4 == 1 ? 40 : 0;
        sp.seed = (uint64_t)trial;
        al_sampler *s = NULL;
        al_grammar *g = NULL;
        CHECK(al_sampler_create(&sp, nv, &s) == AL_OK);
        CHECK(al_grammar_create(v, gram, &g) == AL_OK);
        if (!s || !g) break;
        al_sampler_set_grammar(s, g);
        bool ended = false;
        for (int step = 0; step < 40 && !ended; step++) {
            for (int i = 0; i < nv; i++)
                logits[i] = test_frand() * 8;
            int32_t t = al_sampler_sample(s, logits);
            CHECK_MSG(t >= 0 && al_grammar_accept(g, t) == AL_OK, "trial %d step %d token %d",
                      trial, step, t);
            ended = t < 0 || al_vocab_is_eog(v, t) || al_grammar_finished(g);
        }
        CHECK_MSG(ended && al_grammar_complete(g), "trial %d did not end complete", trial);
        al_grammar_destroy(g);
        al_sampler_destroy(s);
    }
    free(logits);
}

/* Drawn under a grammar, tokens follow the model's distribution renormalized over the
 * allowed ones: both when redraws find them (much mass allowed) and when the mask does
 * (almost none allowed). Chi-square over 2000 and 1000 draws, 2 degrees of freedom. */
static void test_distribution(void) {
    al_vocab *v = g_gpt2;
    int nv = al_vocab_n_tokens(v);
    int32_t ids[3] = {al_vocab_find(v, "a"), al_vocab_find(v, "b"), al_vocab_find(v, "c")};
    const float lg[3] = {1.0f, 0.0f, -1.0f};
    float *logits = malloc((size_t)nv * sizeof *logits);
    for (int mode = 0; mode < 2; mode++) {
        /* mode 0: the three hold most of the mass; mode 1: almost none */
        for (int i = 0; i < nv; i++)
            logits[i] = mode ? 12.0f : -20.0f;
        for (int k = 0; k < 3; k++)
            logits[ids[k]] = lg[k];
        al_sampler_params sp = al_sampler_default_params();
        sp.temperature = 1, sp.top_k = 0, sp.top_p = 1, sp.min_p = 0, sp.seed = 77;
        al_sampler *s = NULL;
        al_grammar *g = NULL;
        CHECK(al_sampler_create(&sp, nv, &s) == AL_OK &&
              al_grammar_create(v, "root ::= [abc]", &g) == AL_OK);
        if (!s || !g) break;
        al_sampler_set_grammar(s, g);
        /* the mask's path costs a walk of the vocabulary per draw: fewer draws there,
         * still far more than the test needs to tell the distribution apart */
        int count[3] = {0}, n = mode ? 1000 : 2000, other = 0;
        for (int i = 0; i < n; i++) {
            int32_t t = al_sampler_sample(s, logits);
            int k = t == ids[0] ? 0 : t == ids[1] ? 1 : t == ids[2] ? 2 : -1;
            if (k < 0)
                other++;
            else
                count[k]++;
        }
        double z = exp(1) + exp(0) + exp(-1), chi2 = 0;
        for (int k = 0; k < 3; k++) {
            double e = n * exp(lg[k]) / z;
            chi2 += (count[k] - e) * (count[k] - e) / e;
        }
        CHECK_MSG(other == 0 && chi2 < 13.8, "mode %d: %d %d %d (+%d refused), chi2 %.1f", mode,
                  count[0], count[1], count[2], other, chi2); /* p = 0.001 */
        al_grammar_destroy(g);
        al_sampler_destroy(s);
    }
    free(logits);
}

int main(void) {
    g_gpt2 = load_vocab("ggml-vocab-gpt-2.gguf");
    g_spm = load_vocab("ggml-vocab-llama-spm.gguf");
    if (!g_gpt2 || !g_spm) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    TEST_RUN(test_errors);
    TEST_RUN(test_match);
    TEST_RUN(test_byte_tokens);
    TEST_RUN(test_mask);
    TEST_RUN(test_sampler);
    TEST_RUN(test_distribution);
    al_vocab_destroy(g_gpt2);
    al_vocab_destroy(g_spm);
    return test_finish();
}
