/* test_limits.c: files and requests that are valid on their face but ask for too much
 * or disagree with themselves: a tokenizer whose size differs from the embedding
 * table's rows, a context whose KV cache cannot fit in memory (and one that fits but
 * is large, which must not be written up front), a vocabulary made of
 * user-defined tokens (matched in all text), whose tokenizing must stay fast.
 *
 * The test files are rewritten from shared ones with the GGUF writer. The same
 * rewriting serves tests/cli.sh:
 *   test_limits --resize-vocab SRC DST N   SRC with its tokenizer cut or padded to N
 *   test_limits --all-user SRC DST         SRC with every token typed user-defined
 */
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "format/gguf_write.h"
#include "model/model.h"
#include "test.h"
#include "text/tokenizer.h"
#include "util.h"

/* ---- rewriting a file -------------------------------------------------------------- */

/* Copies src to dst with the tokenizer arrays cut or padded to n_tokens (n_tokens < 0:
 * unchanged) and, if all_user, every token type set to user-defined (4). */
static al_status rewrite(const char *src, const char *dst, int n_tokens, bool all_user) {
    gguf_file *f = NULL;
    gguf_writer *w = NULL;
    al_status st = gguf_open(src, &f);
    if (st == AL_OK) st = gguf_writer_create(&w);
    for (uint64_t i = 0; st == AL_OK && i < f->n_kv; i++) st = gguf_writer_copy_kv(w, &f->kv[i]);
    const gguf_kv *tok = st == AL_OK ? gguf_find_key(f, "tokenizer.ggml.tokens") : NULL;
    const gguf_kv *sc = st == AL_OK ? gguf_find_key(f, "tokenizer.ggml.scores") : NULL;
    if (st == AL_OK && !tok) st = al_error(AL_ERR_FORMAT, "%s has no tokenizer", src);
    uint64_t n_old = tok ? tok->v.arr.n : 0, n = n_tokens < 0 ? n_old : (uint64_t)n_tokens;
    const char **strs = calloc(n + 1, sizeof *strs);
    uint64_t *lens = calloc(n + 1, sizeof *lens);
    char (*pad)[24] = calloc(n + 1, sizeof *pad);
    float *scores = calloc(n + 1, sizeof *scores);
    int32_t *types = calloc(n + 1, sizeof *types);
    if (st == AL_OK && (!strs || !lens || !pad || !scores || !types)) st = AL_ERR_NOMEM;
    for (uint64_t i = 0; st == AL_OK && i < n; i++) {
        if (i < n_old) {
            strs[i] = tok->v.arr.strs[i].s;
            lens[i] = tok->v.arr.strs[i].n;
            if (sc) memcpy(&scores[i], (const char *)sc->v.arr.data + 4 * i, 4);
        } else {
            lens[i] = (uint64_t)snprintf(pad[i], sizeof pad[i], "[PAD%llu]", (unsigned long long)i);
            strs[i] = pad[i];
        }
        types[i] = all_user ? 4 : 1;
    }
    if (st == AL_OK) {
        const gguf_kv *ty = gguf_find_key(f, "tokenizer.ggml.token_type");
        for (uint64_t i = 0; ty && !all_user && i < n && i < n_old; i++)
            memcpy(&types[i], (const char *)ty->v.arr.data + 4 * i, 4);
        st = gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", strs, lens, n);
        if (st == AL_OK && sc)
            st = gguf_writer_set_array(w, "tokenizer.ggml.scores", GGUF_VT_F32, scores, n);
        if (st == AL_OK)
            st = gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_VT_I32, types, n);
    }
    for (uint64_t i = 0; st == AL_OK && i < f->n_tensors; i++) {
        char name[256];
        gguf_str_copy(f->tensors[i].name, name, sizeof name);
        st = gguf_writer_add_tensor(w, name, f->tensors[i].n_dims, f->tensors[i].ne,
                                    f->tensors[i].type);
    }
    if (st == AL_OK) st = gguf_writer_open(w, dst);
    for (uint64_t i = 0; st == AL_OK && i < f->n_tensors; i++)
        st = gguf_writer_write(w, f->tensors[i].data, f->tensors[i].n_bytes);
    if (st == AL_OK) st = gguf_writer_close(w);
    gguf_writer_destroy(w);
    gguf_close(f);
    free(strs);
    free(lens);
    free(pad);
    free(scores);
    free(types);
    return st;
}

static void tmp_path(char *buf, size_t n, const char *tag) {
    const char *dir = getenv("TMPDIR");
    snprintf(buf, n, "%s/anyllm-test-%ld-%s.gguf", dir && *dir ? dir : "/tmp", (long)getpid(), tag);
}

static const char *ref_model(void) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/models/ref/ref-llama-f32.gguf", test_shared_dir());
    return access(path, R_OK) == 0 ? path : NULL;
}

/* ---- the tokenizer must match the embedding table ---------------------------------- */

static void expect_vocab_rule(const char *src, int n_tokens, bool must_load) {
    char path[1100];
    tmp_path(path, sizeof path, "vocab");
    al_status st = rewrite(src, path, n_tokens, false);
    CHECK_MSG(st == AL_OK, "rewriting %s: %s", src, al_last_error());
    al_model *m = NULL;
    st = al_model_load(path, NULL, &m);
    if (must_load) {
        CHECK_MSG(st == AL_OK && m, "%d tokens: %s", n_tokens, al_last_error());
    } else {
        char want[32];
        snprintf(want, sizeof want, "has %d tokens", n_tokens);
        const char *e = al_last_error();
        CHECK_MSG(st == AL_ERR_FORMAT && !m, "%d tokens: loaded (status %d)", n_tokens, st);
        CHECK_MSG(strstr(e, want) && strstr(e, "1024 rows") && strstr(e, "token_embd.weight") &&
                  strstr(e, "tokenizer.ggml.tokens"), "message: %s", e);
        al_vocab *v = NULL; /* the tokenizer alone is still readable (info shows it) */
        CHECK(al_vocab_load(path, &v) == AL_OK && al_vocab_n_tokens(v) == n_tokens);
        al_vocab_destroy(v);
    }
    al_model_destroy(m);
    unlink(path);
}

static void test_vocab_rows(void) {
    const char *src = ref_model();
    if (!src) {
        TEST_SKIP("%s/models/ref/ref-llama-f32.gguf not found", test_shared_dir());
        return;
    }
    expect_vocab_rule(src, 1024, true);  /* the rewrite itself keeps a file loadable */
    expect_vocab_rule(src, 1000, false); /* logits would overrun tokenizer-sized buffers */
    expect_vocab_rule(src, 1100, false); /* ids past the table, logits never written */
}

/* ---- a KV cache that cannot fit ---------------------------------------------------- */

static long max_rss_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static void test_ctx_memory(void) {
    const char *src = ref_model();
    if (!src) {
        TEST_SKIP("%s/models/ref/ref-llama-f32.gguf not found", test_shared_dir());
        return;
    }
    al_model *m = NULL;
    if (al_model_load(src, NULL, &m) != AL_OK) {
        CHECK_MSG(0, "%s", al_last_error());
        return;
    }
    const int n_ctx = 1 << 24;
    uint64_t kv = model_kv_bytes(m, n_ctx, AL_KV_F32, AL_KV_F32);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && kv < (uint64_t)pages * (uint64_t)page) {
        TEST_SKIP("a KV cache of %llu bytes would fit this machine's memory",
                  (unsigned long long)kv);
        al_model_destroy(m);
        return;
    }
    long rss0 = max_rss_kib();
    double t0 = al_time_s();
    al_context *c = NULL;
    al_context_params cp = {.n_ctx = n_ctx};
    al_status st = al_context_create(m, &cp, &c);
    double dt = al_time_s() - t0;
    long grown = max_rss_kib() - rss0;
    CHECK_MSG(st == AL_ERR_NOMEM && !c, "status %d: %s", st, al_last_error());
    CHECK_MSG(strstr(al_last_error(), "MiB of KV cache") && strstr(al_last_error(), "MemAvailable"),
              "message: %s", al_last_error());
    CHECK_MSG(dt < 1.0 && grown < 64 * 1024, "refusal took %.3f s, max RSS grew %ld KiB", dt, grown);
    printf("  refused %llu MiB in %.4f s, max RSS +%ld KiB: %s\n",
           (unsigned long long)(kv >> 20), dt, grown, al_last_error());
    al_context_destroy(c);
    al_model_destroy(m);
}

/* A large cache that fits is not written at creation: its pages cost memory only as
 * positions are filled (they were zeroed eagerly, 2 GiB of RSS at once here). */
static void test_ctx_lazy(void) {
    const char *src = ref_model();
    if (!src) {
        TEST_SKIP("%s/models/ref/ref-llama-f32.gguf not found", test_shared_dir());
        return;
    }
    al_model *m = NULL;
    if (al_model_load(src, NULL, &m) != AL_OK) {
        CHECK_MSG(0, "%s", al_last_error());
        return;
    }
    const int n_ctx = 1 << 19;
    uint64_t kv = model_kv_bytes(m, n_ctx, AL_KV_F32, AL_KV_F32);
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || kv + (1ull << 30) > (uint64_t)pages * (uint64_t)page) {
        TEST_SKIP("a KV cache of %llu MiB leaves too little free memory here",
                  (unsigned long long)(kv >> 20));
        al_model_destroy(m);
        return;
    }
    long rss0 = max_rss_kib();
    al_context *c = NULL;
    al_context_params cp = {.n_ctx = n_ctx};
    al_status st = al_context_create(m, &cp, &c);
    long grown = max_rss_kib() - rss0;
    CHECK_MSG(st == AL_OK, "%s", al_last_error());
    CHECK_MSG(grown < 128 * 1024, "a %llu MiB cache grew max RSS by %ld KiB at creation",
              (unsigned long long)(kv >> 20), grown);
    int32_t tok[2] = {1, 2};
    float *logits = malloc(1024 * sizeof *logits);
    CHECK(st != AL_OK || al_eval(c, tok, 2, logits, false) == AL_OK); /* and it works */
    printf("  context of %d positions (%llu MiB of KV cache): max RSS +%ld KiB\n", n_ctx,
           (unsigned long long)(kv >> 20), grown);
    free(logits);
    al_context_destroy(c);
    al_model_destroy(m);
}

/* ---- a vocabulary of user-defined tokens ------------------------------------------- */

/* The literal procedure of llama.cpp, to check the fast matcher against: each user
 * token, longest first, cut everywhere it occurs in the text not cut yet; raw stretches
 * tokenized alone. Returns the ids (malloc) and their count. */
static int32_t *naive_tokens(const al_vocab *v, const char *text, size_t len, int *n_out) {
    int32_t *at = malloc((len + 1) * sizeof *at);
    unsigned char *taken = calloc(len + 1, 1);
    int n_tok = al_vocab_n_tokens(v);
    int32_t *order = malloc((size_t)n_tok * sizeof *order);
    for (int i = 0; i < n_tok; i++) order[i] = i;
    /* longest first, then by id: an insertion sort by length buckets */
    int32_t *sorted = malloc((size_t)n_tok * sizeof *sorted), k = 0;
    for (int l = 256; l >= 1; l--)
        for (int i = 0; i < n_tok; i++)
            if ((int)strlen(al_vocab_text(v, order[i])) == l) sorted[k++] = order[i];
    for (size_t i = 0; i <= len; i++) at[i] = -1;
    for (int t = 0; t < k; t++) {
        const char *s = al_vocab_text(v, sorted[t]);
        size_t n = strlen(s);
        for (size_t p = 0; p + n <= len;) {
            bool ok = memcmp(text + p, s, n) == 0;
            for (size_t j = p; ok && j < p + n; j++) ok = !taken[j];
            if (!ok) {
                p++;
                continue;
            }
            memset(taken + p, 1, n);
            at[p] = sorted[t];
            p += n;
        }
    }
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    int n = 0;
    for (size_t p = 0; p < len;) {
        if (at[p] >= 0) {
            ids[n++] = at[p];
            p += strlen(al_vocab_text(v, at[p]));
            continue;
        }
        size_t q = p;
        while (q < len && at[q] < 0) q++;
        int32_t *raw = NULL;
        int n_raw = 0;
        vocab_tokenize_plain(v, text + p, q - p, &raw, &n_raw);
        for (int i = 0; i < n_raw; i++) ids[n++] = raw[i];
        al_free_tokens(raw);
        p = q;
    }
    free(at);
    free(taken);
    free(order);
    free(sorted);
    *n_out = n;
    return ids;
}

static void test_all_user_vocab(void) {
    char src[1024], path[1100];
    snprintf(src, sizeof src, "%s/vocab/ggml-vocab-gpt-2.gguf", test_shared_dir());
    if (access(src, R_OK) != 0) {
        TEST_SKIP("%s not found", src);
        return;
    }
    tmp_path(path, sizeof path, "user");
    al_vocab *v = NULL;
    al_status st = rewrite(src, path, -1, true);
    if (st == AL_OK) st = al_vocab_load(path, &v);
    unlink(path);
    CHECK_MSG(st == AL_OK, "%s", al_last_error());
    if (st != AL_OK) return;
    static const char para[] = "The quick brown fox jumps over the lazy dog; tokenizers "
                               "should take time linear in the text, 12345 times over!\n";
    size_t len = 20000;
    char *text = malloc(len + 1);
    for (size_t i = 0; i < len; i++) text[i] = para[i % (sizeof para - 1)];
    text[len] = 0;
    int32_t *ids = NULL;
    int n = 0;
    double t0 = al_time_s();
    st = al_tokenize(v, text, len, NULL, &ids, &n);
    double dt = al_time_s() - t0;
    CHECK_MSG(st == AL_OK && n > 0, "%s", al_last_error());
    CHECK_MSG(dt < 0.5, "tokenizing %zu bytes took %.3f s", len, dt);
    printf("  %zu bytes, every token user-defined: %d tokens in %.4f s\n", len, n, dt);
    al_free_tokens(ids);
    /* the same cuts as the literal procedure, on a shorter text */
    size_t short_len = 600;
    int n_want = 0;
    int32_t *want = naive_tokens(v, text, short_len, &n_want);
    st = al_tokenize(v, text, short_len, NULL, &ids, &n);
    CHECK_MSG(st == AL_OK && n == n_want && !memcmp(ids, want, (size_t)n * sizeof *ids),
              "%d ids, the literal procedure gives %d", n, n_want);
    al_free_tokens(ids);
    free(want);
    free(text);
    al_vocab_destroy(v);
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--resize-vocab")) {
        al_status st = rewrite(argv[2], argv[3], atoi(argv[4]), false);
        if (st != AL_OK) fprintf(stderr, "test_limits: %s\n", al_last_error());
        return st != AL_OK;
    }
    if (argc == 4 && !strcmp(argv[1], "--all-user")) {
        al_status st = rewrite(argv[2], argv[3], -1, true);
        if (st != AL_OK) fprintf(stderr, "test_limits: %s\n", al_last_error());
        return st != AL_OK;
    }
    TEST_RUN(test_vocab_rows);
    TEST_RUN(test_ctx_memory);
    TEST_RUN(test_ctx_lazy);
    TEST_RUN(test_all_user_vocab);
    return test_finish();
}
