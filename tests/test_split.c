/* test_split.c: prefill on one backend, decode on another (al_context_handoff).
 *
 * For ref-llama, ref-qwen2 and ref-qwen3 and each split (cpu -> vulkan:0, vulkan:0 ->
 * cpu, vulkan:0 -> vulkan:0, cpu -> cpu), the file is loaded once per side (two models
 * of one file) and the decode context is made with kv_shared_with = the prefill one:
 *   - teacher-forced: the first 40 reference tokens evaluated on the prefill side, the
 *     rest one at a time on the decode side after the hand-off; every position's logits
 *     meet the reference-logit criteria (ref_check.h), as on one backend;
 *   - greedy: the whole prompt on the prefill side, then greedy decoding on the other
 *     reproduces the reference's greedy tokens (all of them for F32 files, which have
 *     no reference noise; at least the first otherwise, as test_ref asks);
 *   - the hand-off is zero-copy where both sides see one memory (the CPU and a unified-
 *     memory device such as lavapipe): kv_shared and 0 bytes copied. With
 *     vulkan.pretend_discrete (the device treated as discrete) every split with
 *     Vulkan copies instead (bytes copied > 0), with the same results.
 * Then the copy path without kv_shared_with, a sliding-window model (gpt-oss, window
 * 16) whose rings wrap before the hand-off, into a context of another size, and the
 * refusals (models of another shape, a context too small, n_ctx unlike the shared one).
 * The Vulkan cases skip, saying why, where the build or the machine has no Vulkan.
 */
#include <stdint.h>
#include <string.h>

#include "anyllm.h"
#include "ref_check.h"
#include "test.h"

enum { N_PREFILL = 40 }; /* reference tokens evaluated before the hand-off */

typedef struct split {
    const char *prefill, *decode;
} split;

static const split g_splits[] = {
    {"cpu", "vulkan:0"}, {"vulkan:0", "cpu"}, {"vulkan:0", "vulkan:0"}, {"cpu", "cpu"}};

static const char *const g_models[] = {"ref/ref-llama-Q4_K_M", "ref/ref-qwen2-f16",
                                       "qwen3/ref-qwen3-f32"};

/* Why the Vulkan cases cannot run here, or NULL when vulkan:0 exists. */
static const char *no_vulkan(void) {
    if (!strstr(al_backends(), "vulkan")) return "this build has no Vulkan backend";
    const char *names[8];
    int n = al_backend_list(names, 8);
    for (int i = 0; i < n && i < 8; i++)
        if (!strcmp(names[i], "vulkan:0")) return NULL;
    return "no Vulkan device on this machine";
}

static bool uses_vulkan(const split *s) {
    return strncmp(s->prefill, "vulkan", 6) == 0 || strncmp(s->decode, "vulkan", 6) == 0;
}

/* Both sides of a split: a model per backend and the decode context on the prefill
 * context's memory where possible. */
typedef struct pair {
    al_model *mp, *md;
    al_context *cp, *cd;
} pair;

static void pair_destroy(pair *p) {
    al_context_destroy(p->cd); /* before the context whose memory it may use */
    al_context_destroy(p->cp);
    al_model_destroy(p->md);
    al_model_destroy(p->mp);
}

/* discrete: the Vulkan device treated as discrete (vulkan.pretend_discrete) */
static al_status pair_create(const char *path, const split *s, int n_ctx, bool discrete,
                             pair *p) {
    *p = (pair){0};
    al_model_params mp = al_model_default_params();
    mp.n_threads = 2;
    mp.vulkan.pretend_discrete = discrete;
    mp.backend = s->prefill;
    al_status st = al_model_load(path, &mp, &p->mp);
    mp.backend = s->decode;
    if (st == AL_OK) st = al_model_load(path, &mp, &p->md);
    al_context_params cp = al_context_default_params();
    cp.n_ctx = n_ctx;
    if (st == AL_OK) st = al_context_create(p->mp, &cp, &p->cp);
    cp.kv_shared_with = p->cp;
    if (st == AL_OK) st = al_context_create(p->md, &cp, &p->cd);
    if (st != AL_OK) fprintf(stderr, "  %s on %s -> %s: %s\n", path, s->prefill, s->decode,
                             al_last_error());
    return st;
}

/* Teacher forcing across the split: logits of every reference position, the first
 * N_PREFILL as one batch on the prefill side, the rest one at a time after the
 * hand-off. Returns the logits or NULL. */
static float *split_logits(pair *p, const ref_case *rc) {
    float *out = malloc((size_t)rc->n_tokens * (size_t)rc->n_vocab * sizeof *out);
    al_status st = out ? al_eval(p->cp, rc->tokens, N_PREFILL, out, true) : AL_ERR_NOMEM;
    if (st == AL_OK) st = al_context_handoff(p->cd, p->cp);
    for (int i = N_PREFILL; st == AL_OK && i < rc->n_tokens; i++)
        st = al_eval(p->cd, &rc->tokens[i], 1, out + (size_t)i * rc->n_vocab, false);
    if (st != AL_OK) {
        fprintf(stderr, "  teacher forcing: %s\n", al_last_error());
        free(out);
        return NULL;
    }
    return out;
}

/* Greedy decoding on the decode side after the prompt on the prefill side; how many
 * of the reference's greedy tokens it reproduces before the first difference. */
static int split_greedy(pair *p, const ref_case *rc) {
    float *logits = malloc((size_t)rc->n_vocab * sizeof *logits);
    al_context_reset(p->cp);
    al_context_reset(p->cd);
    al_status st = logits ? al_eval(p->cp, rc->tokens, rc->n_tokens, logits, false)
                          : AL_ERR_NOMEM;
    if (st == AL_OK) st = al_context_handoff(p->cd, p->cp);
    int n_same = 0;
    while (st == AL_OK && n_same < rc->n_greedy) {
        int32_t next = argmax(logits, rc->n_vocab);
        if (next != rc->greedy[n_same]) break;
        n_same++;
        st = al_eval(p->cd, &next, 1, logits, false);
    }
    free(logits);
    return st == AL_OK ? n_same : -1;
}

/* One model on one split: the criteria, and whether the memory was shared. */
static void check_split(const ref_case *rc, const split *s, bool discrete) {
    pair p;
    if (pair_create(rc->name, s, rc->n_tokens + rc->n_greedy, discrete, &p) != AL_OK) {
        CHECK_MSG(0, "%s: %s -> %s could not be set up", rc->name, s->prefill, s->decode);
        pair_destroy(&p);
        return;
    }
    double max_nmse, min_top1;
    ref_limits(rc->name, &max_nmse, &min_top1);
    float *logits = split_logits(&p, rc);
    al_context_info info;
    al_context_get_info(p.cd, &info);
    const bool want_shared = !(discrete && uses_vulkan(s));
    int n_same = logits ? split_greedy(&p, rc) : -1;
    cmp_result r = logits ? compare(logits, rc->ref, rc->n_tokens, rc->n_vocab)
                          : (cmp_result){.nmse = INFINITY};
    printf("     %-22s %-8s -> %-8s NMSE %.2e top-1 %5.1f%% greedy %2d/%d  KV %s, %llu "
           "bytes copied\n", strrchr(rc->name, '/') + 1, s->prefill, s->decode, r.nmse,
           100 * r.top1, n_same, rc->n_greedy, info.kv_shared ? "shared" : "own",
           (unsigned long long)info.kv_bytes_copied);
    CHECK_MSG(logits != NULL, "%s: %s -> %s failed", rc->name, s->prefill, s->decode);
    CHECK_MSG(r.nmse <= max_nmse, "%s: NMSE %.3e > %.0e", rc->name, r.nmse, max_nmse);
    CHECK_MSG(r.top1_res >= min_top1, "%s: top-1 %.3f < %.2f", rc->name, r.top1_res, min_top1);
    CHECK_MSG(r.top1 >= min_top1 - 1.0 / 24, "%s: top-1 %.3f", rc->name, r.top1);
    if (strstr(rc->name, "-f32.gguf")) CHECK(n_same == rc->n_greedy);
    else CHECK(n_same >= 1);
    CHECK_MSG(info.kv_shared == want_shared, "%s -> %s: KV %s", s->prefill, s->decode,
              info.kv_shared ? "shared" : "not shared");
    if (want_shared) CHECK(info.kv_bytes_copied == 0);
    else CHECK(info.kv_bytes_copied > 0);
    free(logits);
    pair_destroy(&p);
}

static int load_model_case(const char *sub, ref_case *rc) {
    char dir[1024], json[256];
    const char *slash = strchr(sub, '/');
    snprintf(dir, sizeof dir, "%s/models/%.*s", test_shared_dir(), (int)(slash - sub), sub);
    snprintf(json, sizeof json, "%s.ref.json", slash + 1);
    return load_case(dir, json, rc);
}

/* Every split of the models; with discrete set, as if the device were discrete
 * (vulkan.pretend_discrete, read as each model is loaded). */
static void run_splits(bool discrete, int n_models) {
    const char *why = no_vulkan();
    int n_run = 0, n_found = 0;
    for (int i = 0; i < n_models; i++) {
        ref_case rc = {0};
        if (!load_model_case(g_models[i], &rc)) {
            TEST_SKIP("%s/models/%s.ref.json not found", test_shared_dir(), g_models[i]);
            continue;
        }
        n_found++;
        for (size_t k = 0; k < sizeof g_splits / sizeof *g_splits; k++) {
            if (uses_vulkan(&g_splits[k]) && why) continue;
            if (discrete && !uses_vulkan(&g_splits[k])) continue;
            check_split(&rc, &g_splits[k], discrete);
            n_run++;
        }
        free(rc.ref);
    }
    if (why) TEST_SKIP("the splits with Vulkan: %s", why);
    if (n_found && (!why || !discrete)) CHECK(n_run > 0);
}

static void test_splits_unified(void) { run_splits(false, 3); }

/* The copy path on a device treated as discrete: one model is enough. */
static void test_splits_discrete(void) { run_splits(true, 2); }

static al_model *load_on(const char *sub, const char *backend) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s.gguf", test_shared_dir(), sub);
    al_model_params mp = al_model_default_params();
    mp.n_threads = 2;
    mp.backend = backend;
    al_model *m = NULL;
    if (al_model_load(path, &mp, &m) != AL_OK) fprintf(stderr, "  %s\n", al_last_error());
    return m;
}

/* Logits of n_gen tokens after prompt[0..n_prompt) on one context, and the same after
 * handing the prompt from a (context of size n_ctx_a) to b (n_ctx_b) on the CPU: equal,
 * since both sides run the same kernels; returns the NMSE. */
static double ring_case(al_model *m, const int32_t *ids, int n_prompt, int n_gen, int n_ctx_a,
                        int n_ctx_b, uint64_t *copied) {
    al_model_info mi;
    al_model_get_info(m, &mi);
    al_context *a = NULL, *b = NULL, *one = NULL;
    al_context_params pa = al_context_default_params(), pb = pa;
    pa.n_ctx = n_ctx_a;
    pb.n_ctx = n_ctx_b;
    float *la = malloc((size_t)mi.n_vocab * sizeof *la), *lb = malloc((size_t)mi.n_vocab * sizeof *lb);
    double worst = INFINITY;
    al_status st = al_context_create(m, &pa, &a);
    if (st == AL_OK) st = al_context_create(m, &pb, &b);
    if (st == AL_OK) st = al_context_create(m, &pa, &one);
    if (st == AL_OK) st = al_eval(a, ids, n_prompt, NULL, false);
    if (st == AL_OK) st = al_eval(one, ids, n_prompt, NULL, false);
    if (st == AL_OK) st = al_context_handoff(b, a);
    if (st == AL_OK) worst = 0;
    for (int i = 0; st == AL_OK && i < n_gen; i++) {
        int32_t t = ids[n_prompt + i];
        if ((st = al_eval(one, &t, 1, la, false)) == AL_OK && (st = al_eval(b, &t, 1, lb, false)) == AL_OK) {
            cmp_result r = compare(lb, la, 1, mi.n_vocab);
            if (r.nmse > worst) worst = r.nmse;
        }
    }
    if (st != AL_OK) {
        fprintf(stderr, "  ring hand-off: %s\n", al_last_error());
        worst = INFINITY;
    }
    al_context_info info;
    if (b) al_context_get_info(b, &info);
    *copied = b ? info.kv_bytes_copied : 0;
    free(la);
    free(lb);
    al_context_destroy(one);
    al_context_destroy(b);
    al_context_destroy(a);
    return worst;
}

/* Sliding-window rings (gpt-oss, window 16): a prompt long enough that the rings wrap
 * (a ring holds the window plus a batch of 512), handed by copy to a context of
 * another size, whose rings are another size too, then 4 tokens on both. */
static void test_ring_copy(void) {
    al_model *m = load_on("moe/ref-gpt-oss-MXFP4_MOE", "cpu");
    if (!m) {
        TEST_SKIP("the gpt-oss reference is missing");
        return;
    }
    enum { N_PROMPT = 700, N_GEN = 4 };
    int32_t ids[N_PROMPT + N_GEN];
    for (int i = 0; i < N_PROMPT + N_GEN; i++) ids[i] = (int32_t)((i * 37 + 11) % 1000);
    uint64_t copied = 0;
    double nmse = ring_case(m, ids, N_PROMPT, N_GEN, 1024, 720, &copied);
    printf("     gpt-oss rings wrapped, %d positions handed from n_ctx 1024 to 720: NMSE %.2e, "
           "%llu bytes copied\n", N_PROMPT, nmse, (unsigned long long)copied);
    CHECK(nmse <= 1e-10);
    CHECK(copied > 0);
    al_model_destroy(m);
}

/* The same model on the CPU with and without sharing: a hand-off without
 * kv_shared_with copies once, and src keeps its positions; with it, nothing is copied
 * and src is emptied. */
static void test_copy_and_share_cpu(void) {
    al_model *m = load_on("ref/ref-qwen2-f16", "cpu");
    if (!m) {
        TEST_SKIP("ref-qwen2-f16 is missing");
        return;
    }
    al_context *src = NULL, *own = NULL, *shared = NULL;
    al_context_params cp = al_context_default_params();
    cp.n_ctx = 32;
    CHECK(al_context_create(m, &cp, &src) == AL_OK);
    CHECK(al_context_create(m, &cp, &own) == AL_OK);
    cp.n_ctx = 0; /* the shared context's size */
    cp.kv_shared_with = src;
    CHECK(al_context_create(m, &cp, &shared) == AL_OK);
    int32_t ids[10] = {1, 5, 9, 200, 31, 7, 8, 9, 10, 11};
    CHECK(al_eval(src, ids, 10, NULL, false) == AL_OK);
    CHECK(al_context_handoff(own, src) == AL_OK);
    al_context_info io, is;
    al_context_get_info(own, &io);
    CHECK(io.n_past == 10 && !io.kv_shared);
    al_model_info mi;
    al_model_get_info(m, &mi);
    /* the rows of the 10 positions, K and V of every layer, and nothing more */
    CHECK(io.kv_bytes_copied == 10ull * 2 * mi.n_layer * mi.n_head_kv * mi.head_dim * sizeof(float));
    CHECK(al_context_n_past(src) == 10);
    CHECK(al_context_handoff(shared, src) == AL_OK);
    al_context_get_info(shared, &is);
    CHECK(is.n_past == 10 && is.kv_shared && is.kv_bytes_copied == 0 && is.n_ctx == 32);
    CHECK(al_context_n_past(src) == 0);
    CHECK(al_context_handoff(src, shared) == AL_OK); /* and back */
    CHECK(al_context_n_past(src) == 10 && al_context_n_past(shared) == 0);
    al_context_destroy(shared);
    al_context_destroy(own);
    al_context_destroy(src);
    al_model_destroy(m);
}

/* Refusals, each naming what is at fault, and nothing changed. */
static void test_refusals(void) {
    al_model *a = load_on("ref/ref-llama-Q8_0", "cpu"), *b = load_on("ref/ref-qwen2-f16", "cpu");
    if (!a || !b) {
        TEST_SKIP("reference models missing");
        al_model_destroy(a);
        al_model_destroy(b);
        return;
    }
    al_context *ca = NULL, *cb = NULL, *small = NULL, *x = NULL;
    al_context_params cp = al_context_default_params();
    cp.n_ctx = 16;
    CHECK(al_context_create(a, &cp, &ca) == AL_OK);
    CHECK(al_context_create(b, &cp, &cb) == AL_OK);
    int32_t ids[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    CHECK(al_eval(cb, ids, 12, NULL, false) == AL_OK);
    CHECK(al_context_handoff(ca, cb) == AL_ERR_ARG);
    printf("     refused: %s\n", al_last_error());
    CHECK(strstr(al_last_error(), "differ in") != NULL);
    CHECK(al_context_n_past(ca) == 0 && al_context_n_past(cb) == 12);
    cp.kv_shared_with = cb;
    CHECK(al_context_create(a, &cp, &x) == AL_ERR_ARG && x == NULL);
    cp.n_ctx = 8;
    CHECK(al_context_create(b, &cp, &x) == AL_ERR_ARG && x == NULL);
    printf("     refused: %s\n", al_last_error());
    CHECK(strstr(al_last_error(), "n_ctx 8") != NULL);
    cp.kv_shared_with = NULL;
    CHECK(al_context_create(b, &cp, &small) == AL_OK);
    CHECK(al_context_handoff(small, cb) == AL_ERR_ARG);
    printf("     refused: %s\n", al_last_error());
    CHECK(al_context_handoff(NULL, cb) == AL_ERR_ARG);
    CHECK(al_context_handoff(cb, cb) == AL_OK && al_context_n_past(cb) == 12);
    al_context_destroy(small);
    al_context_destroy(cb);
    al_context_destroy(ca);
    al_model_destroy(a);
    al_model_destroy(b);
}

int main(void) {
    TEST_RUN(test_refusals);
    TEST_RUN(test_copy_and_share_cpu);
    TEST_RUN(test_ring_copy);
    TEST_RUN(test_splits_unified);
    TEST_RUN(test_splits_discrete);
    return test_finish();
}
