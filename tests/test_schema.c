/* test_schema.c: JSON Schema to grammar (src/server/schema.c), through al_grammar on the
 * GPT-2 vocabulary of ../shared/vocab: integer ranges against every integer around their
 * ends, strings against their length bounds, numbers with bounds and patterns by drawing
 * texts from the grammar with random logits and checking each (strtod; PCRE2 on the
 * JSON-decoded string), and the schemas that must be refused with their reason. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "anyllm.h"
#include "server/schema.h"
#include "test.h"

static al_vocab *g_vocab;

/* The grammar of a schema (JSON text); NULL with *err filled when it is refused. */
static al_grammar *compile(const char *schema_json, char *err, size_t cap) {
    json_error_t je;
    json_t *s = json_loads(schema_json, JSON_DECODE_ANY, &je);
    if (!s) {
        snprintf(err, cap, "bad test JSON: %s", je.text);
        return NULL;
    }
    srv_gram g = {0};
    al_grammar *out = NULL;
    if (!srv_gram_schema(&g, s, "root"))
        snprintf(err, cap, "%s", g.err);
    else if (al_grammar_create(g_vocab, g.text.s, &out) != AL_OK)
        snprintf(err, cap, "grammar: %s", al_last_error());
    srv_gram_free(&g);
    json_decref(s);
    return out;
}

/* Whether the grammar takes text whole (fed as the tokenizer cuts it). */
static bool takes(al_grammar *g, const char *text) {
    al_tokenize_params tp = {0};
    int32_t *ids = NULL;
    int n = 0;
    if (al_tokenize(g_vocab, text, strlen(text), &tp, &ids, &n) != AL_OK) return false;
    al_grammar_reset(g);
    bool ok = true;
    for (int i = 0; i < n && ok; i++)
        ok = al_grammar_accept(g, ids[i]) == AL_OK;
    al_free_tokens(ids);
    return ok && al_grammar_complete(g);
}

/* A text drawn from the grammar with random logits (up to cap - 1 bytes, NUL-ended);
 * false when it did not end within 400 tokens. */
static bool draw(al_grammar *g, uint64_t seed, char *out, size_t cap) {
    int nv = al_vocab_n_tokens(g_vocab);
    float *logits = malloc((size_t)nv * sizeof *logits);
    al_sampler_params sp = al_sampler_default_params();
    sp.temperature = 1.5f, sp.top_k = 0, sp.top_p = 1, sp.min_p = 0, sp.seed = seed;
    al_sampler *s = NULL;
    al_sampler_create(&sp, nv, &s);
    al_sampler_set_grammar(s, g);
    al_grammar_reset(g);
    size_t len = 0;
    bool ended = false;
    for (int step = 0; step < 400 && !ended && s; step++) {
        for (int i = 0; i < nv; i++)
            logits[i] = test_frand() * 6;
        int32_t t = al_sampler_sample(s, logits);
        if (t < 0 || al_vocab_is_eog(g_vocab, t)) {
            ended = t >= 0;
            break;
        }
        if (al_grammar_accept(g, t) != AL_OK) break;
        char piece[256];
        int n = al_token_to_bytes(g_vocab, t, false, piece, sizeof piece);
        if (n > 0 && len + (size_t)n < cap) memcpy(out + len, piece, (size_t)n), len += (size_t)n;
        ended = al_grammar_finished(g);
    }
    out[len] = 0;
    al_sampler_destroy(s);
    free(logits);
    return ended;
}

static void test_integer_ranges(void) {
    static const long long ranges[][2] = {
        {0, 9},        {0, 10}, {1, 99},  {-5, 5},   {-120, -7},   {17, 23},     {95, 1005},
        {-1000, 1000}, {0, 0},  {-1, -1}, {99, 101}, {123, 45678}, {-9999, -10}, {500, 100000},
    };
    for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++) {
        long long lo = ranges[r][0], hi = ranges[r][1];
        char schema[128], err[512];
        snprintf(schema, sizeof schema,
                 "{\"type\": \"integer\", \"minimum\": %lld, \"maximum\": %lld}", lo, hi);
        al_grammar *g = compile(schema, err, sizeof err);
        CHECK_MSG(g, "%s: %s", schema, err);
        if (!g) continue;
        int bad = 0;
        for (long long v = lo - 40; v <= hi + 40; v++) {
            if (v > lo + 1200 && v < hi - 1200) v = hi - 1200; /* the ends, not all between */
            char text[32];
            snprintf(text, sizeof text, "%lld", v);
            bool in = v >= lo && v <= hi;
            if (takes(g, text) != in && bad++ < 3)
                fprintf(stderr, "  [%lld, %lld]: %s %s\n", lo, hi, text, in ? "refused" : "taken");
        }
        CHECK_MSG(bad == 0, "[%lld, %lld]: %d wrong", lo, hi, bad);
        CHECK(!takes(g, "01") && !takes(g, "-0") && !takes(g, "1.0") && !takes(g, "+1"));
        al_grammar_destroy(g);
    }
}

static void test_number_bounds(void) {
    static const char *const cases[] = {
        "{\"type\": \"number\", \"minimum\": -2.5, \"exclusiveMaximum\": 7}",
        "{\"type\": \"number\", \"exclusiveMinimum\": 0, \"maximum\": 1}",
        "{\"type\": \"number\", \"minimum\": -100.25, \"maximum\": -99.5}",
        "{\"type\": \"number\", \"exclusiveMinimum\": -3, \"exclusiveMaximum\": 3}",
        "{\"type\": \"number\", \"minimum\": 41.99}",
        "{\"type\": \"integer\", \"exclusiveMinimum\": 2.5, \"maximum\": 40}",
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char err[512], text[512];
        al_grammar *g = compile(cases[c], err, sizeof err);
        CHECK_MSG(g, "%s: %s", cases[c], err);
        if (!g) continue;
        json_t *s = json_loads(cases[c], 0, NULL);
        double mn = -1e300, mx = 1e300, xmn = -1e300, xmx = 1e300;
        if (json_object_get(s, "minimum")) mn = json_number_value(json_object_get(s, "minimum"));
        if (json_object_get(s, "maximum")) mx = json_number_value(json_object_get(s, "maximum"));
        if (json_object_get(s, "exclusiveMinimum"))
            xmn = json_number_value(json_object_get(s, "exclusiveMinimum"));
        if (json_object_get(s, "exclusiveMaximum"))
            xmx = json_number_value(json_object_get(s, "exclusiveMaximum"));
        json_decref(s);
        int n_ok = 0, n_frac = 0;
        for (int k = 0; k < 30; k++) {
            if (!draw(g, (uint64_t)k + 1, text, sizeof text)) continue;
            double v = strtod(text, NULL);
            bool in = v >= mn && v <= mx && v > xmn && v < xmx;
            CHECK_MSG(in, "%s drew %s", cases[c], text);
            n_ok += in;
            n_frac += strchr(text, '.') != NULL;
        }
        CHECK_MSG(n_ok >= 25, "%s: %d of 30 draws ended in range", cases[c], n_ok);
        if (strstr(cases[c], "number") && !strstr(cases[c], "-100.25"))
            CHECK_MSG(n_frac > 0, "%s: no draw had a fraction", cases[c]);
        al_grammar_destroy(g);
    }
}

static void test_strings(void) {
    char err[512];
    al_grammar *g =
        compile("{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 5}", err, sizeof err);
    CHECK_MSG(g, "%s", err);
    if (!g) return;
    CHECK(!takes(g, "\"a\"") && takes(g, "\"ab\"") && takes(g, "\"abcde\"") &&
          !takes(g, "\"abcdef\""));
    CHECK(takes(g, "\"\\n\\u00e9\"") && takes(g, "\"\xc3\xa9t\xc3\xa9\"") && !takes(g, "\"a\nb\""));
    CHECK(!takes(g, "\"ab\\q\"") && !takes(g, "abc"));
    al_grammar_destroy(g);
    /* enum and const of any values, the properties' order and required ones */
    g = compile("{\"type\": \"object\", \"properties\": {\"a\": {\"enum\": [1, \"x\\\"y\", null, "
                "[true]]}, \"b\": {\"const\": {\"k\": 2}}, \"c\": {\"type\": \"boolean\"}}, "
                "\"required\": [\"c\"]}",
                err, sizeof err);
    CHECK_MSG(g, "%s", err);
    if (!g) return;
    CHECK(takes(g, "{\"c\": true}") && takes(g, "{\"a\": \"x\\\"y\", \"c\": false}"));
    CHECK(takes(g, "{\"a\":[true],\"b\":{\"k\":2},\"c\":true}") &&
          takes(g, "{\n  \"c\": false\n}"));
    CHECK(!takes(g, "{}") && !takes(g, "{\"c\": true, \"a\": 1}") &&
          !takes(g, "{\"a\": 2, \"c\": true}"));
    CHECK(!takes(g, "{\"c\": true, \"d\": 1}") && !takes(g, "{\"b\": {\"k\": 3}, \"c\": true}"));
    al_grammar_destroy(g);
}

static bool pcre_matches(const char *re, const char *s) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    if (!c) return false;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    int rc = pcre2_match(c, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(c);
    return rc >= 0;
}

static void test_patterns(void) {
    static const char *const pats[] = {"^[A-Z]{2}-[0-9]{3}$",
                                       "^(yes|no|maybe)$",
                                       "^[a-z]{1,8}@[a-z]{1,8}\\.(com|org)$",
                                       "^\\d{1,3}(\\.\\d{1,2})?$",
                                       "^[^\"\\\\]{0,6}$",
                                       "^(?:ab|cd){1,3}x?$",
                                       "^\\w{1,5}\\s\\w{1,5}$",
                                       "^\\\\[a-z]{1,4}\"$",
                                       "^[\\t\\n]x{2}$",
                                       "^ab[0-9]{1,3}$",
                                       "^\\S{2,4}\\W$",
                                       "^.{3}$",
                                       "^[^a-z]{2}$"};
    for (size_t p = 0; p < sizeof pats / sizeof *pats; p++) {
        json_t *s = json_pack("{s:s, s:s}", "type", "string", "pattern", pats[p]);
        char *sj = json_dumps(s, 0), err[512], text[2048];
        json_decref(s);
        al_grammar *g = compile(sj, err, sizeof err);
        CHECK_MSG(g, "%s: %s", pats[p], err);
        free(sj);
        if (!g) continue;
        int n_ok = 0;
        for (int k = 0; k < 12; k++) {
            if (!draw(g, (uint64_t)k * 7 + 3, text, sizeof text)) continue;
            json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
            bool ok = json_is_string(v) && pcre_matches(pats[p], json_string_value(v));
            CHECK_MSG(ok, "pattern %s drew %s", pats[p], text);
            n_ok += ok;
            json_decref(v);
        }
        CHECK_MSG(n_ok >= 9, "pattern %s: %d of 12 draws ended valid", pats[p], n_ok);
        al_grammar_destroy(g);
    }
}

/* A large enum, factored by prefixes: every member taken, nothing else; the mask at its
 * start and in its middle (a walk of the vocabulary with the matcher's stacks) agrees with
 * the token-by-token check. */
static void test_large_enum(void) {
    json_t *vals = json_array();
    for (int i = 0; i < 3000; i++)
        json_array_append_new(vals, json_sprintf("item %d", i * 7));
    json_array_append_new(vals, json_integer(42));
    json_array_append_new(vals, json_string("it\u00e9m"));
    json_t *s = json_pack("{s:o}", "enum", vals);
    char *sj = json_dumps(s, 0), err[512];
    json_decref(s);
    al_grammar *g = compile(sj, err, sizeof err);
    free(sj);
    CHECK_MSG(g, "%s", err);
    if (!g) return;
    CHECK(takes(g, "\"item 0\"") && takes(g, "\"item 20993\"") && takes(g, "\"item 7\"") &&
          takes(g, "42") && takes(g, "\"it\xc3\xa9m\""));
    CHECK(!takes(g, "\"item 1\"") && !takes(g, "\"item 70\"x") && !takes(g, "\"item\"") &&
          !takes(g, "4") && !takes(g, "\"item 20994\""));
    int nv = al_vocab_n_tokens(g_vocab);
    uint8_t *mask = malloc((size_t)nv);
    al_grammar_reset(g);
    for (int step = 0; step < 2; step++) {
        CHECK(al_grammar_mask(g, mask) == AL_OK);
        int bad = 0, on = 0;
        for (int id = 0; id < nv; id++) {
            on += mask[id];
            bad += (mask[id] != 0) != al_grammar_allows(g, id);
        }
        CHECK_MSG(bad == 0 && on > 0, "step %d: %d allowed, %d disagree", step, on, bad);
        int32_t t = al_vocab_find(g_vocab, "\"");
        if (step == 0) CHECK(al_grammar_accept(g, t) == AL_OK);
    }
    free(mask);
    al_grammar_destroy(g);
}

/* An unanchored pattern is a search: anything around it. */
static void test_unanchored(void) {
    char err[512];
    al_grammar *g = compile("{\"type\": \"string\", \"pattern\": \"ab[0-9]\"}", err, sizeof err);
    CHECK_MSG(g, "%s", err);
    if (!g) return;
    CHECK(takes(g, "\"ab1\"") && takes(g, "\"xx ab7 yy\"") && takes(g, "\"ab9\\n\""));
    CHECK(!takes(g, "\"a1\"") && !takes(g, "\"ab\"") && !takes(g, "\"b4a\""));
    al_grammar_destroy(g);
}

static void test_refused(void) {
    static const struct {
        const char *schema, *expect;
    } cases[] = {
        {"{\"type\": \"array\", \"uniqueItems\": true}", "'uniqueItems' is not supported"},
        {"{\"type\": \"integer\", \"multipleOf\": 2}", "'multipleOf' is not supported"},
        {"{\"$defs\": {\"a\": {\"$ref\": \"#/$defs/b\"}, \"b\": {\"$ref\": \"#/$defs/a\"}}, "
         "\"$ref\": "
         "\"#/$defs/a\"}",
         "recursive $ref"},
        {"{\"$ref\": \"#/$defs/none\"}", "points to nothing"},
        {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"strin\"}}}",
         "unknown type 'strin'"},
        {"{\"type\": \"string\", \"minLength\": 3, \"maxLength\": 2}", "maxLength"},
        {"{\"type\": \"string\", \"pattern\": \"(a\"}", "unclosed '('"},
        {"{\"type\": \"string\", \"pattern\": \"a**\"}", "quantifier after a quantifier"},
        {"{\"type\": \"string\", \"pattern\": \"a$b\"}", "'^' or '$' inside"},
        {"{\"anyOf\": []}", "non-empty array"},
        {"{\"enum\": 3}", "enum must be"},
        {"{\"type\": \"number\", \"minimum\": \"3\"}", "minimum must be a number"},
        {"{\"type\": \"number\", \"minimum\": 1e300}", "no number lies within"},
        {"{\"type\": \"array\", \"minItems\": 5000}", "minItems"},
        {"[1]", "a schema must be an object or a boolean"},
        {"false", "accepts nothing"},
        {"{\"type\": [\"string\", 3]}", "type[1] must be a string"},
        {"{\"type\": \"string\", \"enum\": [\"a\"], \"minLength\": 1}", "'minLength' beside enum"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char err[512] = "";
        al_grammar *g = compile(cases[i].schema, err, sizeof err);
        CHECK_MSG(!g && strstr(err, cases[i].expect), "%s: '%s' lacks '%s'", cases[i].schema, err,
                  cases[i].expect);
        al_grammar_destroy(g);
    }
    /* an enum of 200k values (prefixes factored, tails not) makes a grammar over the
     * limit: refused, not built */
    json_t *big = json_array();
    for (int i = 0; i < 200000; i++)
        json_array_append_new(big, json_sprintf("%d, a value whose long tail no other shares", i));
    json_t *s = json_pack("{s:o}", "enum", big);
    srv_gram g = {0};
    CHECK(!srv_gram_schema(&g, s, "root") && strstr(g.err, "grammar over"));
    srv_gram_free(&g);
    json_decref(s);
}

int main(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-gpt-2.gguf", test_shared_dir());
    if (al_vocab_load(path, &g_vocab) != AL_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, al_last_error());
        printf("0 passed, 1 failed\n");
        return 1;
    }
    TEST_RUN(test_integer_ranges);
    TEST_RUN(test_number_bounds);
    TEST_RUN(test_strings);
    TEST_RUN(test_patterns);
    TEST_RUN(test_large_enum);
    TEST_RUN(test_unanchored);
    TEST_RUN(test_refused);
    al_vocab_destroy(g_vocab);
    return test_finish();
}
