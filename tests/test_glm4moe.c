/* test_glm4moe.c: GLM-4.5 / 4.6 (glm4moe) on the CPU and, where there is a device, on
 * Vulkan.
 *
 * The models are written by `anyllm gen-model` (deterministic: their sha256 is checked
 * against the files the reference logits in tests/data were computed from):
 *   anyllm gen-model M --arch glm4moe --dim 256 --layers 3 --heads 4 --kv-heads 2
 *     --head-dim 64 --ffn 512 --vocab 512 --experts 8 --experts-used 2 --ffn-exp 128
 *     --type F32 | Q8_0
 * which gives GLM-4.5-Air's layout: biased q, k and v with a per-head Q/K norm, half of
 * each head rotating (neox), one dense layer, then 8 experts picked by sigmoid scores
 * plus a per-expert bias, their weights normalized and scaled by 2.5, and a shared
 * expert. tests/data/glm4moe-TYPE.logits.f32 holds llama.cpp's logits of test_hybrid's
 * 48 tokens (scripts/llamacpp_logits.cpp with an f32 KV cache, llama-cpp-python 0.3.36's
 * tree, one thread, one batch).
 *
 * Checked: the 48 logits against the reference on the CPU (default and --precise) and
 * Vulkan; the same positions token by token and in two chunks against the batch (the
 * experts a token picks, and their weights, do not depend on its batch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "anyllm.h"
#include "test.h"
#include "tokens48.h"

enum { N_VOCAB = 512 };


#define FLAGS                                                                           \
    "--arch glm4moe --dim 256 --layers 3 --heads 4 --kv-heads 2 --head-dim 64 --ffn 512 " \
    "--vocab 512 --experts 8 --experts-used 2 --ffn-exp 128 --type "
static const struct {
    const char *name, *flags, *sha256;
    double max_nmse; /* F32: nothing rounds but the sums' order; Q8_0: the activations */
} models[] = {
    {"glm4moe-F32", FLAGS "F32", "0f6e26a3ccb5084357fb946bda02a6ab6baa8aa0d98bd41c2ed4d0381e770886",
     1e-6},
    {"glm4moe-Q8_0", FLAGS "Q8_0",
     "6c845bb80588bad4df627f18101f4f4291bba7d5971e833b017e7c518b76a80b", 1e-3},
};
enum { N_MODELS = sizeof models / sizeof *models };

static char dir[64];
static char paths[N_MODELS][128];
static bool have[N_MODELS];

static float *read_ref(int i) {
    char path[256];
    snprintf(path, sizeof path, "tests/data/%s.logits.f32", models[i].name);
    return test_read_f32(path, (size_t)N_TOK * N_VOCAB);
}

/* The logits of the 48 tokens of model i on backend, evaluated in pieces of `piece`
 * tokens (48: one batch), into out; false where a step fails. */
static bool eval_logits(int i, const char *backend, int piece, float *out) {
    al_model_params mp = al_model_default_params();
    mp.backend = backend;
    mp.n_threads = 2;
    al_model *m = NULL;
    al_context *c = NULL;
    bool ok = al_model_load(paths[i], &mp, &m) == AL_OK;
    al_context_params cp = al_context_default_params();
    cp.n_ctx = 64;
    ok = ok && al_context_create(m, &cp, &c) == AL_OK;
    for (int t = 0; ok && t < N_TOK; t += piece) {
        const int n = N_TOK - t < piece ? N_TOK - t : piece;
        ok = al_eval(c, tokens + t, n, out + (size_t)t * N_VOCAB, true) == AL_OK;
    }
    if (!ok) fprintf(stderr, "  %s on %s: %s\n", models[i].name, backend, al_last_error());
    al_context_destroy(c);
    al_model_destroy(m);
    return ok;
}

/* Model i's logits on backend against llama.cpp's. */
static void reference_case(int i, const char *backend, double max_nmse) {
    if (!have[i]) {
        CHECK_MSG(false, "%s could not be made (above)", models[i].name);
        return;
    }
    const size_t nl = (size_t)N_TOK * N_VOCAB;
    float *ref = read_ref(i), *got = malloc(nl * sizeof(float));
    if (ref && got && eval_logits(i, backend, N_TOK, got)) {
        const double e = test_nmse(got, ref, (int64_t)nl);
        printf("     %-13s %-12s NMSE %.2e against llama.cpp\n", models[i].name, backend, e);
        CHECK_MSG(e <= max_nmse, "%s on %s: NMSE %.2e > %.0e", models[i].name, backend, e,
                  max_nmse);
    } else {
        CHECK(false);
    }
    free(ref), free(got);
}

static void test_reference_cpu(void) {
    for (int i = 0; i < N_MODELS; i++) {
        reference_case(i, "cpu", models[i].max_nmse);
        reference_case(i, "cpu:precise", models[i].max_nmse);
    }
}

static void test_reference_vulkan(void) {
    if (al_gpu_count() <= 0) {
        TEST_SKIP("no Vulkan device (%s)", *al_last_error() ? al_last_error() : "none found");
        return;
    }
    /* the GPU computes every activation in f32: the quantized file's reference rounds
     * them to 8 bits, hence its looser bar */
    reference_case(0, "vulkan", 1e-6);
    reference_case(1, "vulkan", 1e-2);
}

/* A token's experts and their weights are its own: token by token and in chunks the
 * logits are the batch's. */
static void test_pieces(void) {
    if (!have[1]) return;
    const size_t nl = (size_t)N_TOK * N_VOCAB;
    float *batch = malloc(nl * sizeof(float)), *got = malloc(nl * sizeof(float));
    static const int pieces[] = {1, 20};
    if (eval_logits(1, "cpu", N_TOK, batch))
        for (size_t k = 0; k < sizeof pieces / sizeof *pieces; k++) {
            CHECK(eval_logits(1, "cpu", pieces[k], got));
            const double e = test_nmse(got, batch, (int64_t)nl);
            CHECK_MSG(e <= 1e-10, "pieces of %d: NMSE %.2e against the batch", pieces[k], e);
        }
    free(batch), free(got);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/anyllm_glm_XXXXXX");
    if (!mkdtemp(dir)) return test_skip_program("cannot make a temporary folder");
    for (int i = 0; i < N_MODELS; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/%s.gguf", dir, models[i].name);
        have[i] = test_gen_model(paths[i], models[i].flags, models[i].sha256);
    }
    TEST_RUN(test_reference_cpu);
    TEST_RUN(test_reference_vulkan);
    TEST_RUN(test_pieces);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish();
}
