/* test_mtp.c: the model's own draft, its next-token-prediction block (al_draft_mtp).
 *
 * The models are written by `anyllm gen-model` (deterministic: their sha256 is checked
 * against the files the reference was computed from):
 *   anyllm gen-model M --arch qwen35 --dim 256 --layers 4 --heads 4 --kv-heads 2
 *     --head-dim 64 --vocab 512 --ffn 512 --mtp 1 --type F32
 * and qwen35moe with --ffn 256 --experts 8 --experts-used 2 --ffn-exp 128 (the block's
 * FFN is then a mixture too). tests/data/NAME.mtp.f32 holds llama.cpp's MTP logits
 * (scripts/llamacpp_mtp.cpp, llama-cpp-python 0.3.36's tree) after the first N = 1, 9
 * and 40 of test_hybrid's 48 tokens: the first draft step (token N-1 paired with the
 * model's hidden state at N-2) and the second (its greedy token with the block's own
 * hidden state), [3][2][512] floats.
 *
 * Checked: both steps' logits against the reference (F32: nothing rounds but the order
 * of sums), on the CPU and, where there is a device, on Vulkan; the block's cache
 * follows the text through batches, token by token, a truncation and a reset (the same
 * draft as one batch gives); sequences decoded together (al_eval_multi) draft as
 * each alone; and the refusals: a context with mtp on a model without the block,
 * al_draft_mtp on a context made without it, al_eval_multi of contexts with and
 * without. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "anyllm.h"
#include "model/internal.h"
#include "test.h"
#include "tokens48.h"

enum { N_VOCAB = 512, N_CASES = 3 };

static const int cases[N_CASES] = {1, 9, 40};

#define SHAPE "--dim 256 --layers 4 --heads 4 --kv-heads 2 --head-dim 64 --vocab 512"
static const struct {
    const char *name, *flags, *sha256;
} models[] = {
    {"qwen35-mtp-F32", "--arch qwen35 " SHAPE " --ffn 512 --mtp 1 --type F32",
     "bd6cec77879fca2d59df53b1f77d5fd4c38e08eb8319337a9a0e3350d272cd39"},
    {"qwen35moe-mtp-F32",
     "--arch qwen35moe " SHAPE " --ffn 256 --experts 8 --experts-used 2 --ffn-exp 128 "
     "--mtp 1 --type F32",
     "97ddbcd0003c57ba78cb0d682f8358cd80395986ffa7288d332327d80f931496"},
};
enum { N_MODELS = sizeof models / sizeof *models };

static char dir[64];
static char paths[N_MODELS][128];
static bool have[N_MODELS];

static float *read_ref(int i) {
    char path[256];
    snprintf(path, sizeof path, "tests/data/%s.mtp.f32", models[i].name);
    return test_read_f32(path, (size_t)N_CASES * 2 * N_VOCAB);
}

static al_model *load(const char *path, const char *backend) {
    al_model_params mp = al_model_default_params();
    mp.backend = backend;
    mp.n_threads = 2;
    al_model *m = NULL;
    if (al_model_load(path, &mp, &m) != AL_OK) return NULL;
    return m;
}

static al_context *mtp_context(al_model *m) {
    al_context_params cp = al_context_default_params();
    cp.n_ctx = 128;
    cp.mtp = true;
    al_context *c = NULL;
    CHECK_MSG(al_context_create(m, &cp, &c) == AL_OK, "%s", al_last_error());
    return c;
}

/* Both draft steps after the first n tokens (n - 1 evaluated, the last drafted from),
 * into logits [2][N_VOCAB]; false where an evaluation failed. */
static bool draft_after(al_context *c, int n, float *logits) {
    al_context_reset(c);
    if (n > 1 && al_eval(c, tokens, n - 1, NULL, false) != AL_OK) return false;
    int32_t out[2];
    return mtp_draft_logits(c, tokens[n - 1], 2, out, logits) == 2;
}

/* Both steps of each case against llama.cpp's, on backend. */
static void check_reference(const char *backend) {
    for (int i = 0; i < N_MODELS; i++) {
        if (!have[i]) continue;
        float *ref = read_ref(i), *got = malloc(2 * N_VOCAB * sizeof(float));
        al_model *m = load(paths[i], backend);
        if (!ref || !m) {
            CHECK_MSG(false, "%s on %s: %s", models[i].name, backend,
                      ref ? al_last_error() : "no reference");
            free(ref), free(got), al_model_destroy(m);
            continue;
        }
        al_context *c = mtp_context(m);
        double worst = 0;
        for (int k = 0; c && k < N_CASES; k++) {
            CHECK_MSG(draft_after(c, cases[k], got), "%s: %s", models[i].name, al_last_error());
            for (int s = 0; s < 2; s++) {
                const double e = test_nmse(got + s * N_VOCAB, ref + (k * 2 + s) * N_VOCAB, N_VOCAB);
                CHECK_MSG(e <= 1e-6, "%s on %s, %d tokens, step %d: NMSE %.2e", models[i].name,
                          backend, cases[k], s + 1, e);
                if (e > worst) worst = e;
            }
        }
        printf("     %-18s %-8s worst NMSE %.1e over %d prompts x 2 steps\n", models[i].name,
               backend, worst, N_CASES);
        al_context_destroy(c);
        al_model_destroy(m);
        free(ref), free(got);
    }
}

static void test_reference_cpu(void) { check_reference("cpu"); }

static void test_reference_vulkan(void) {
    if (al_gpu_count() <= 0) {
        TEST_SKIP("no Vulkan device (%s)", *al_last_error() ? al_last_error() : "none found");
        return;
    }
    check_reference("vulkan");
}

/* The block's cache follows the text however it arrives: token by token, after a
 * truncation that a draft's check makes, and after a reset, the draft is the one the
 * whole prompt in one batch gives. */
static void test_cache_follows(void) {
    if (!have[0]) return;
    al_model *m = load(paths[0], "cpu");
    al_context *c = m ? mtp_context(m) : NULL;
    if (!c) {
        CHECK_MSG(false, "%s", al_last_error());
        al_model_destroy(m);
        return;
    }
    enum { N = 30 };
    float want[2 * N_VOCAB], got[2 * N_VOCAB];
    int32_t d_want[4], d_got[4];
    CHECK(draft_after(c, N, want));
    CHECK(al_draft_mtp(c, tokens[N - 1], 4, d_want) == 4);
    /* token by token */
    al_context_reset(c);
    for (int i = 0; i < N - 1; i++) CHECK(al_eval(c, &tokens[i], 1, NULL, false) == AL_OK);
    int32_t out[2];
    CHECK(mtp_draft_logits(c, tokens[N - 1], 2, out, got) == 2);
    CHECK_MSG(test_nmse(got, want, 2 * N_VOCAB) <= 1e-10, "token by token: NMSE %.2e",
              test_nmse(got, want, 2 * N_VOCAB));
    /* a draft checked and refused: its positions evaluated, then cut back (the
     * recurrent state to the checkpoint made before, as gen.c does) */
    CHECK(al_context_checkpoint(c) == AL_OK);
    CHECK(al_eval(c, (const int32_t[]){tokens[N - 1], 7, 9, 11}, 4, NULL, false) == AL_OK);
    CHECK(al_context_truncate(c, N - 1) == AL_OK);
    CHECK(al_context_n_past(c) == N - 1);
    CHECK(al_draft_mtp(c, tokens[N - 1], 4, d_got) == 4);
    CHECK_MSG(!memcmp(d_got, d_want, sizeof d_want), "after a truncation: %d %d %d %d, "
              "want %d %d %d %d", d_got[0], d_got[1], d_got[2], d_got[3], d_want[0], d_want[1],
              d_want[2], d_want[3]);
    /* drafting changes neither the positions nor the next draft */
    CHECK(al_context_n_past(c) == N - 1);
    CHECK(al_draft_mtp(c, tokens[N - 1], 4, d_got) == 4 && !memcmp(d_got, d_want, sizeof d_want));
    al_context_destroy(c);
    al_model_destroy(m);
}

/* Sequences decoded together (al_eval_multi, as serve does) draft as each alone. */
static void test_multi(void) {
    if (!have[0]) return;
    al_model *m = load(paths[0], "cpu");
    al_context *a = m ? mtp_context(m) : NULL, *b = m ? mtp_context(m) : NULL;
    al_context *solo = m ? mtp_context(m) : NULL;
    if (!a || !b || !solo) {
        CHECK_MSG(false, "%s", al_last_error());
        al_context_destroy(a), al_context_destroy(b), al_context_destroy(solo);
        al_model_destroy(m);
        return;
    }
    /* a: tokens 0..19 then 5 more one at a time; b: tokens 20..34 then 5 more */
    CHECK(al_eval(a, tokens, 20, NULL, false) == AL_OK);
    CHECK(al_eval(b, tokens + 20, 15, NULL, false) == AL_OK);
    for (int i = 0; i < 5; i++) {
        al_context *both[2] = {a, b};
        const int32_t next[2] = {tokens[35 + i], tokens[40 + i]};
        CHECK(al_eval_multi(both, next, 2, NULL) == AL_OK);
    }
    float got[2 * N_VOCAB], want[2 * N_VOCAB];
    int32_t out[2];
    for (int k = 0; k < 2; k++) {
        al_context *c = k ? b : a;
        CHECK(mtp_draft_logits(c, tokens[45 + k], 2, out, got) == 2);
        al_context_reset(solo);
        CHECK(al_eval(solo, tokens + (k ? 20 : 0), k ? 15 : 20, NULL, false) == AL_OK);
        for (int i = 0; i < 5; i++)
            CHECK(al_eval(solo, &tokens[(k ? 40 : 35) + i], 1, NULL, false) == AL_OK);
        CHECK(mtp_draft_logits(solo, tokens[45 + k], 2, out, want) == 2);
        const double e = test_nmse(got, want, 2 * N_VOCAB);
        CHECK_MSG(e <= 1e-10, "sequence %d: NMSE %.2e against the sequence alone", k, e);
    }
    al_context_destroy(a), al_context_destroy(b), al_context_destroy(solo);
    al_model_destroy(m);
}

/* One line each, no crash: mtp on a model without the block; al_draft_mtp without
 * mtp, with a bad token; al_eval_multi of an mtp context beside one without. */
static void test_refusals(void) {
    char plain[160];
    snprintf(plain, sizeof plain, "%s/plain.gguf", dir);
    if (!have[0] || !test_gen_model(plain, "--arch qwen35 " SHAPE " --ffn 512 --type F32", NULL)) {
        CHECK_MSG(false, "no models");
        return;
    }
    al_model *m = load(plain, "cpu"), *mm = load(paths[0], "cpu");
    CHECK(m && mm);
    al_context_params cp = al_context_default_params();
    cp.n_ctx = 64;
    cp.mtp = true;
    al_context *c = NULL;
    CHECK(al_context_create(m, &cp, &c) == AL_ERR_UNSUPPORTED && !c);
    CHECK_MSG(strstr(al_last_error(), "next-token-prediction"), "%s", al_last_error());
    cp.mtp = false;
    CHECK(al_context_create(mm, &cp, &c) == AL_OK);
    int32_t out[4];
    CHECK(al_draft_mtp(c, 5, 4, out) == -1 && strstr(al_last_error(), "without mtp"));
    al_context_destroy(c);
    cp.mtp = true;
    CHECK(al_context_create(mm, &cp, &c) == AL_OK);
    CHECK(al_draft_mtp(c, N_VOCAB, 4, out) == -1 && strstr(al_last_error(), "out of range"));
    CHECK(al_draft_mtp(c, 5, 0, out) == 0);
    al_context *plain_c = NULL;
    cp.mtp = false;
    CHECK(al_context_create(mm, &cp, &plain_c) == AL_OK);
    al_context *two[2] = {c, plain_c};
    CHECK(al_eval_multi(two, tokens, 2, NULL) == AL_ERR_ARG && strstr(al_last_error(), "mtp"));
    al_context_destroy(plain_c);
    al_model_info mi;
    al_model_get_info(mm, &mi);
    CHECK(mi.n_mtp == 1);
    al_model_get_info(m, &mi);
    CHECK(mi.n_mtp == 0);
    al_context_destroy(c);
    al_model_destroy(m);
    al_model_destroy(mm);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/anyllm_mtp_XXXXXX");
    if (!mkdtemp(dir)) return test_skip_program("cannot make a temporary folder");
    for (int i = 0; i < N_MODELS; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/%s.gguf", dir, models[i].name);
        have[i] = test_gen_model(paths[i], models[i].flags, models[i].sha256);
        CHECK_MSG(have[i], "gen-model %s", models[i].name);
    }
    TEST_RUN(test_reference_cpu);
    TEST_RUN(test_reference_vulkan);
    TEST_RUN(test_cache_follows);
    TEST_RUN(test_multi);
    TEST_RUN(test_refusals);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish();
}
