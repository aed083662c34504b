/* test_deepseek2.c: multi-head latent attention (deepseek2) on the CPU and, where there
 * is a device, on Vulkan.
 *
 * The models are written by `anyllm gen-model` (deterministic: their sha256 is checked
 * against the files the reference logits in tests/data were computed from):
 *   anyllm gen-model M --arch deepseek2 --dim 256 --layers 3 --heads 4 --kv-heads 1
 *     --head-dim 96 --ffn 512 --vocab 512 --experts 8 --experts-used 2 --ffn-exp 128
 *     [--q-lora 128] --type F32 | Q8_0
 * Heads of 96 (32 rotating, values of 64), a latent vector of 256: a cached row of 288
 * per position and layer. Without --q-lora, DeepSeek-V2-Lite's layout: one query
 * matrix, softmax routing without renormalization, two shared experts. With it,
 * DeepSeek-V3's: a low-rank query, sigmoid scores plus a bias picking 2 of 8 experts
 * from the best 2 of 4 groups, normalized and scaled by 2.5, one shared expert. Both
 * have one dense layer first; a third file is the lite one under YaRN (by 4, DeepSeek-
 * V2-Lite's yarn_log_multiplier). tests/data/deepseek2-NAME.logits.f32 holds llama.cpp's
 * logits of test_hybrid's 48 tokens (scripts/llamacpp_logits.cpp with an f32 KV cache,
 * llama-cpp-python 0.3.36's tree, one thread, one batch).
 *
 * Checked: the logits against the reference on the CPU (default and --precise) and on
 * Vulkan; token by token and in chunks against the batch (the decode path reads the
 * latent rows the batch wrote); two sequences decoded together (al_eval_multi) as each
 * alone; the cache's bytes: one latent row per position and layer, keys and values
 * both; a q8_0 latent cache near the f32 one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "anyllm.h"
#include "test.h"
#include "tokens48.h"

enum { N_VOCAB = 512, N_LAYER = 3, ROW = 288, N_CTX = 64 };

#define FLAGS                                                                           \
    "--arch deepseek2 --dim 256 --layers 3 --heads 4 --kv-heads 1 --head-dim 96 --ffn 512 " \
    "--vocab 512 --experts 8 --experts-used 2 --ffn-exp 128 "
static const struct {
    const char *name, *flags, *sha256;
    /* the CPU's default mode rounds activations to 8 bits as llama.cpp does for a Q8_0
     * file's matmuls, --precise and Vulkan do not: their bar is the rounding's size */
    double max_nmse, max_nmse_exact;
} models[] = {
    {"deepseek2-lite-F32", FLAGS "--type F32",
     "a9ab340c5788ac8d2bc29aff557ca5f31a53e20ec40b3dcf78bf7d2b93c5cd30", 1e-6, 1e-6},
    {"deepseek2-v3-F32", FLAGS "--q-lora 128 --type F32",
     "e459edab8ee30a91d49c52ebdf3720a530aa78622f1b55486b9529027e08c622", 1e-6, 1e-6},
    {"deepseek2-v3-Q8_0", FLAGS "--q-lora 128 --type Q8_0",
     "4a19d935bb26b0b43eab2ba5cc3210de33a1c2b610489a5cf68a6ca11557dd2e", 1e-6, 2e-3},
    /* YaRN by 4 over a context of 64, with V2-Lite's yarn_log_multiplier */
    {"deepseek2-lite-yarn-F32", FLAGS "--yarn 4 --ctx 64 --type F32",
     "d6d030f3ea929f28c779e3b1b1cac72b37201a11a7cf0c70654a4b02aa88ff78", 1e-6, 1e-6},
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

static al_model *load(int i, const char *backend) {
    al_model_params mp = al_model_default_params();
    mp.backend = backend;
    mp.n_threads = 2;
    al_model *m = NULL;
    if (al_model_load(paths[i], &mp, &m) != AL_OK)
        fprintf(stderr, "  %s on %s: %s\n", models[i].name, backend, al_last_error());
    return m;
}

/* The logits of the 48 tokens of model i on backend, evaluated in pieces of `piece`
 * tokens (48: one batch), with a cache of type kv, into out; false where a step fails. */
static bool eval_logits(int i, const char *backend, int piece, al_kv_type kv, float *out) {
    al_model *m = load(i, backend);
    al_context *c = NULL;
    al_context_params cp = al_context_default_params();
    cp.n_ctx = N_CTX;
    cp.type_k = cp.type_v = kv;
    bool ok = m && al_context_create(m, &cp, &c) == AL_OK;
    for (int t = 0; ok && t < N_TOK; t += piece) {
        const int n = N_TOK - t < piece ? N_TOK - t : piece;
        ok = al_eval(c, tokens + t, n, out + (size_t)t * N_VOCAB, true) == AL_OK;
    }
    if (!ok && m) fprintf(stderr, "  %s on %s: %s\n", models[i].name, backend, al_last_error());
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
    if (ref && got && eval_logits(i, backend, N_TOK, AL_KV_F32, got)) {
        const double e = test_nmse(got, ref, (int64_t)nl);
        printf("     %-23s %-12s NMSE %.2e against llama.cpp\n", models[i].name, backend, e);
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
        reference_case(i, "cpu:precise", models[i].max_nmse_exact);
    }
}

static bool have_gpu(void) {
    if (al_gpu_count() > 0) return true;
    TEST_SKIP("no Vulkan device (%s)", *al_last_error() ? al_last_error() : "none found");
    return false;
}

static void test_reference_vulkan(void) {
    if (!have_gpu()) return;
    for (int i = 0; i < N_MODELS; i++) reference_case(i, "vulkan", models[i].max_nmse_exact);
}

/* Decoding reads the latent rows the prompt wrote: token by token and in chunks the
 * logits are the batch's. */
static void pieces_case(int i, const char *backend) {
    const size_t nl = (size_t)N_TOK * N_VOCAB;
    float *batch = malloc(nl * sizeof(float)), *got = malloc(nl * sizeof(float));
    static const int pieces[] = {1, 20};
    if (have[i] && eval_logits(i, backend, N_TOK, AL_KV_F32, batch))
        for (size_t k = 0; k < sizeof pieces / sizeof *pieces; k++) {
            CHECK(eval_logits(i, backend, pieces[k], AL_KV_F32, got));
            const double e = test_nmse(got, batch, (int64_t)nl);
            printf("     %-18s %-12s pieces of %2d: NMSE %.2e against the batch\n",
                   models[i].name, backend, pieces[k], e);
            CHECK_MSG(e <= 1e-10, "%s on %s, pieces of %d: NMSE %.2e against the batch",
                      models[i].name, backend, pieces[k], e);
        }
    else
        CHECK(false);
    free(batch), free(got);
}

static void test_pieces(void) {
    pieces_case(0, "cpu");
    pieces_case(1, "cpu");
    if (al_gpu_count() > 0) pieces_case(1, "vulkan");
}

/* Two sequences decoded at once (as `serve` does) give each one's logits alone. */
static void multi_case(const char *backend) {
    al_model *m = load(1, backend);
    al_context *c[2] = {NULL, NULL};
    al_context_params cp = al_context_default_params();
    cp.n_ctx = N_CTX;
    bool ok = m && al_context_create(m, &cp, &c[0]) == AL_OK &&
              al_context_create(m, &cp, &c[1]) == AL_OK;
    float *alone = malloc(2 * N_VOCAB * sizeof(float)), *both = malloc(2 * N_VOCAB * sizeof(float));
    const int len[2] = {17, 30};
    const int32_t next[2] = {tokens[17], tokens[30]};
    /* alone: the prompt, then the next token */
    for (int s = 0; ok && s < 2; s++)
        ok = al_eval(c[s], tokens, len[s], NULL, false) == AL_OK &&
             al_eval(c[s], &next[s], 1, alone + s * N_VOCAB, false) == AL_OK &&
             al_context_truncate(c[s], len[s]) == AL_OK;
    ok = ok && al_eval_multi(c, next, 2, both) == AL_OK;
    CHECK_MSG(ok, "%s: %s", backend, al_last_error());
    if (ok) {
        const double e = test_nmse(both, alone, 2 * N_VOCAB);
        CHECK_MSG(e <= 1e-10, "%s: two sequences at once, NMSE %.2e against each alone", backend, e);
    }
    free(alone), free(both);
    al_context_destroy(c[0]), al_context_destroy(c[1]);
    al_model_destroy(m);
}

static void test_multi(void) {
    multi_case("cpu");
    if (al_gpu_count() > 0) multi_case("vulkan");
}

/* One latent row per position and layer holds the keys and the values of every head:
 * the bytes al_model_kv_bytes, al_model_kv_read_bytes and al_context_info report. */
static void test_cache_bytes(void) {
    al_model *m = have[0] ? load(0, "cpu") : NULL;
    CHECK(m != NULL);
    if (!m) return;
    const uint64_t row = ROW * sizeof(float), q8_row = ROW / 32 * 34;
    CHECK(al_model_kv_bytes(m, N_CTX, AL_KV_F32, AL_KV_F32) == (uint64_t)N_LAYER * N_CTX * row);
    CHECK(al_model_kv_bytes(m, N_CTX, AL_KV_Q8_0, AL_KV_Q8_0) == (uint64_t)N_LAYER * N_CTX * q8_row);
    CHECK(al_model_kv_read_bytes(m, 99, AL_KV_F32, AL_KV_F32) == (uint64_t)N_LAYER * 100 * row);
    /* the expanded keys and values would be 4 heads of 96 + 64 per layer: 2.2x */
    CHECK((uint64_t)N_LAYER * 4 * (96 + 64) * sizeof(float) > 2 * N_LAYER * row);
    al_context *c = NULL;
    al_context_params cp = al_context_default_params();
    cp.n_ctx = N_CTX;
    cp.type_k = AL_KV_Q8_0; /* the values follow: they are the same row */
    CHECK(al_context_create(m, &cp, &c) == AL_OK);
    al_context_info ci;
    al_context_get_info(c, &ci);
    CHECK_MSG(ci.kv_bytes == (uint64_t)N_LAYER * N_CTX * q8_row && ci.type_v == AL_KV_Q8_0,
              "kv_bytes %llu, type_v %d", (unsigned long long)ci.kv_bytes, (int)ci.type_v);
    al_context_destroy(c);
    al_model_destroy(m);
}

/* A q8_0 latent cache (rotated) stays near the f32 one, in a batch and token by token.
 * The lite model: the V3 router's groups turn a near tie at one position of the 48
 * (an expert of another group) on the cache's rounding, a jump of its own. */
static void test_q8_cache(void) {
    const size_t nl = (size_t)N_TOK * N_VOCAB;
    float *f32 = malloc(nl * sizeof(float)), *got = malloc(nl * sizeof(float));
    const bool ok = have[0] && eval_logits(0, "cpu:precise", N_TOK, AL_KV_F32, f32);
    CHECK(ok);
    for (int piece = 1; ok && piece <= N_TOK; piece += N_TOK - 1) {
        CHECK(eval_logits(0, "cpu:precise", piece, AL_KV_Q8_0, got));
        const double e = test_nmse(got, f32, (int64_t)nl);
        printf("     q8_0 latent cache, pieces of %2d: NMSE %.2e against f32\n", piece, e);
        CHECK_MSG(e > 0 && e <= 5e-4, "pieces of %d: NMSE %.2e", piece, e);
    }
    free(f32), free(got);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/anyllm_ds2_XXXXXX");
    if (!mkdtemp(dir)) return test_skip_program("cannot make a temporary folder");
    for (int i = 0; i < N_MODELS; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/%s.gguf", dir, models[i].name);
        have[i] = test_gen_model(paths[i], models[i].flags, models[i].sha256);
    }
    TEST_RUN(test_reference_cpu);
    TEST_RUN(test_reference_vulkan);
    TEST_RUN(test_pieces);
    TEST_RUN(test_multi);
    TEST_RUN(test_cache_bytes);
    TEST_RUN(test_q8_cache);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish();
}
