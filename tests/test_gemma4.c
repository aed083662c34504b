/* test_gemma4.c: Gemma 4 (gemma4) on the CPU and, where there is a device, on Vulkan.
 *
 * The models are written by `anyllm gen-model` (deterministic: their sha256 is checked
 * against the files the reference logits in tests/data were computed from):
 *   anyllm gen-model M --arch gemma4 --dim 256 --heads 4 --kv-heads 2 --head-dim 128
 *     --ffn 512 --vocab 512 --swa 16 --type F32 and
 *   e2b:   --layers 6 --swa-period 3 --shared-kv 3 --ple 64
 *   dense: --layers 4 --swa-period 2
 *   moe:   --layers 4 --swa-period 2 --experts 8 --experts-used 2 --ffn-exp 128
 * Global layers with heads of 128 (rope factors: half of the pairs next to still, and
 * the values the keys' projection), sliding ones with heads of 64 and a window of 16,
 * normed values, output scales, a soft-cap of 30. e2b's last three layers read the
 * caches of layers 1 and 2 and have a feed-forward twice as wide, and every layer
 * takes a per-layer input of 64, as Gemma 4 E2B/E4B do; moe's layers run 8 GELU experts
 * (2 per token, each output scaled) beside the dense FFN, as the 26B-A4B file does. tests/data/gemma4-NAME.logits.f32
 * holds llama.cpp's logits of test_hybrid's 48 tokens (scripts/llamacpp_logits.cpp
 * with an f32 KV cache, llama-cpp-python 0.3.36's tree, one thread, one batch), its
 * ggml-cpu built with the GELU lookup table off (GGML_GELU_FP16 undefined in
 * ggml/src/ggml-cpu/vec.h): the table rounds GELU's input and output to f16. gen-model
 * gives the Q/K norms weights of head_dim^-1/4, as trained ones scale q.k (gemma4 does
 * not): with norms of ones the scores are of sqrt(head_dim), and the softmax turns any
 * rounding into a different model.
 *
 * Checked: the logits against the reference on the CPU (default and --precise) and on
 * Vulkan; token by token and in chunks against the batch (the shared layers read rows
 * their source layers wrote in the same step); two sequences decoded together as each
 * alone; the caches' bytes (none for the shared layers); a q8_0 cache near the f32 one;
 * a context cut back inside the window keeps its rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "anyllm.h"
#include "test.h"
#include "tokens48.h"

enum { N_VOCAB = 512, N_CTX = 64 };

#define FLAGS                                                                           \
    "--arch gemma4 --dim 256 --heads 4 --kv-heads 2 --head-dim 128 --ffn 512 --vocab 512 " \
    "--swa 16 --type F32 "
static const struct {
    const char *name, *flags, *sha256;
} models[] = {
    {"gemma4-e2b-F32", FLAGS "--layers 6 --swa-period 3 --shared-kv 3 --ple 64",
     "4a10f7e7cdcd32cd48c5c4f9fdefbf19135713d5561c443c909f779fb545d883"},
    {"gemma4-dense-F32", FLAGS "--layers 4 --swa-period 2",
     "5bfeb2a39b873768cb86f7ba131a604e8c9b45308f910fe37012781bff1e2b53"},
    {"gemma4-moe-F32", FLAGS "--layers 4 --swa-period 2 --experts 8 --experts-used 2 --ffn-exp 128",
     "78883b0bd50838a5d1c7e7f9ab87597b400d3ee316ef9129b0a0741bf97938de"},
};
enum { N_MODELS = sizeof models / sizeof *models };
/* nothing rounds but the sums' order: 1e-12 here, where llama.cpp's own GELU table
 * gives 2e-7 to 6e-7 */
static const double MAX_NMSE = 1e-9;

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
        printf("     %-17s %-12s NMSE %.2e against llama.cpp\n", models[i].name, backend, e);
        CHECK_MSG(e <= max_nmse, "%s on %s: NMSE %.2e > %.0e", models[i].name, backend, e,
                  max_nmse);
    } else {
        CHECK(false);
    }
    free(ref), free(got);
}

static void test_reference_cpu(void) {
    for (int i = 0; i < N_MODELS; i++) {
        reference_case(i, "cpu", MAX_NMSE);
        reference_case(i, "cpu:precise", MAX_NMSE);
    }
}

static bool have_gpu(void) {
    if (al_gpu_count() > 0) return true;
    TEST_SKIP("no Vulkan device (%s)", *al_last_error() ? al_last_error() : "none found");
    return false;
}

static void test_reference_vulkan(void) {
    if (!have_gpu()) return;
    for (int i = 0; i < N_MODELS; i++) reference_case(i, "vulkan", MAX_NMSE);
}

/* Token by token and in chunks the logits are the batch's: the shared layers read the
 * rows their source layers wrote in the same step, the sliding rings wrap. */
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
    pieces_case(2, "cpu"); /* a few tokens' experts: the fused GELU experts */
    if (al_gpu_count() > 0) pieces_case(0, "vulkan");
    if (al_gpu_count() > 0) pieces_case(2, "vulkan");
}

/* Two sequences decoded at once (as `serve` does) give each one's logits alone. */
static void multi_case(const char *backend) {
    al_model *m = load(0, backend);
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

/* The caches: layers 0 and 1 slide (2 kv heads of 64, keys and values), layer 2 is
 * global (2 of 128), layers 3 to 5 read those: 4096 bytes per position in f32; the
 * sliding rings stop at the window plus a batch. */
static void test_cache_bytes(void) {
    al_model *m = have[0] ? load(0, "cpu") : NULL;
    CHECK(m != NULL);
    if (!m) return;
    const uint64_t swa = 2 * 2 * 64 * 4, global = 2 * 2 * 128 * 4;
    CHECK_MSG(al_model_kv_bytes(m, N_CTX, AL_KV_F32, AL_KV_F32) == 2 * N_CTX * swa + N_CTX * global,
              "%llu", (unsigned long long)al_model_kv_bytes(m, N_CTX, AL_KV_F32, AL_KV_F32));
    /* at position 99 a sliding layer reads its window of 16; the shared ones read their
     * sources' rows again */
    const uint64_t read = 4 * 16 * swa + 2 * 100 * global;
    CHECK_MSG(al_model_kv_read_bytes(m, 99, AL_KV_F32, AL_KV_F32) == read, "%llu, not %llu",
              (unsigned long long)al_model_kv_read_bytes(m, 99, AL_KV_F32, AL_KV_F32),
              (unsigned long long)read);
    al_model_destroy(m);
}

/* A context cut back by a few positions (inside the rings' batch margin) continues as
 * one that never went further. */
static void test_truncate(void) {
    al_model *m = have[0] ? load(0, "cpu") : NULL;
    al_context *a = NULL, *b = NULL;
    al_context_params cp = al_context_default_params();
    cp.n_ctx = N_CTX;
    float *la = malloc(N_VOCAB * sizeof(float)), *lb = malloc(N_VOCAB * sizeof(float));
    bool ok = m && al_context_create(m, &cp, &a) == AL_OK && al_context_create(m, &cp, &b) == AL_OK;
    ok = ok && al_eval(a, tokens, 40, NULL, false) == AL_OK &&
         al_context_truncate(a, 36) == AL_OK && al_context_n_past(a) == 36 &&
         al_eval(a, tokens + 36, 1, la, false) == AL_OK &&
         al_eval(b, tokens, 37, lb, false) == AL_OK;
    CHECK_MSG(ok, "%s", al_last_error());
    if (ok) {
        const double e = test_nmse(la, lb, N_VOCAB);
        CHECK_MSG(e <= 1e-10, "after a cut back: NMSE %.2e", e);
    }
    free(la), free(lb);
    al_context_destroy(a), al_context_destroy(b);
    al_model_destroy(m);
}

/* A q8_0 cache (rotated) stays near the f32 one, in a batch and token by token (the
 * dense model: e2b's output scales make it sensitive to any rounding). */
static void test_q8_cache(void) {
    const size_t nl = (size_t)N_TOK * N_VOCAB;
    float *f32 = malloc(nl * sizeof(float)), *got = malloc(nl * sizeof(float));
    const bool ok = have[1] && eval_logits(1, "cpu:precise", N_TOK, AL_KV_F32, f32);
    CHECK(ok);
    for (int piece = 1; ok && piece <= N_TOK; piece += N_TOK - 1) {
        CHECK(eval_logits(1, "cpu:precise", piece, AL_KV_Q8_0, got));
        const double e = test_nmse(got, f32, (int64_t)nl);
        printf("     q8_0 cache, pieces of %2d: NMSE %.2e against f32\n", piece, e);
        CHECK_MSG(e > 0 && e <= 5e-4, "pieces of %d: NMSE %.2e", piece, e);
    }
    free(f32), free(got);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/anyllm_g4_XXXXXX");
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
    TEST_RUN(test_truncate);
    TEST_RUN(test_q8_cache);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish();
}
