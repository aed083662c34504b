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
#include "gen_ref.h"

enum { N_VOCAB = 512, N_CTX = 64 };

#define FLAGS                                                                           \
    "--arch gemma4 --dim 256 --heads 4 --kv-heads 2 --head-dim 128 --ffn 512 --vocab 512 " \
    "--swa 16 --type F32 "
/* nothing rounds but the sums' order: 1e-12 here, where llama.cpp's own GELU table
 * gives 2e-7 to 6e-7 */
#define BARS 1e-9, 1e-9
static const gen_ref_model models[] = {
    {"gemma4-e2b-F32", FLAGS "--layers 6 --swa-period 3 --shared-kv 3 --ple 64",
     "4a10f7e7cdcd32cd48c5c4f9fdefbf19135713d5561c443c909f779fb545d883", BARS},
    {"gemma4-dense-F32", FLAGS "--layers 4 --swa-period 2",
     "5bfeb2a39b873768cb86f7ba131a604e8c9b45308f910fe37012781bff1e2b53", BARS},
    {"gemma4-moe-F32", FLAGS "--layers 4 --swa-period 2 --experts 8 --experts-used 2 --ffn-exp 128",
     "78883b0bd50838a5d1c7e7f9ab87597b400d3ee316ef9129b0a0741bf97938de", BARS},
};
enum { N_MODELS = sizeof models / sizeof *models };

/* The shared layers read the rows their source layers wrote in the same step, the
 * sliding rings wrap; a few tokens' experts take the fused GELU experts. */
static void test_pieces(void) {
    gen_ref_pieces(0, "cpu", 0);
    gen_ref_pieces(1, "cpu", 0);
    gen_ref_pieces(2, "cpu", 0);
    if (al_gpu_count() > 0) gen_ref_pieces(0, "vulkan", 1e-10);
    if (al_gpu_count() > 0) gen_ref_pieces(2, "vulkan", 1e-10);
}

static void test_multi(void) {
    gen_ref_multi(0, "cpu");
    if (al_gpu_count() > 0) gen_ref_multi(0, "vulkan");
}

/* The caches: layers 0 and 1 slide (2 kv heads of 64, keys and values), layer 2 is
 * global (2 of 128), layers 3 to 5 read those: 4096 bytes per position in f32; the
 * sliding rings stop at the window plus a batch. */
static void test_cache_bytes(void) {
    al_model *m = gen_ref_load(0, "cpu");
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
    al_model *m = gen_ref_load(0, "cpu");
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

/* The dense model: e2b's output scales make it sensitive to any rounding. */
static void test_q8_cache(void) { gen_ref_q8_cache(1, 5e-4); }

int main(void) {
    if (!gen_ref_setup(models, N_MODELS, N_VOCAB, N_CTX, "g4"))
        return test_skip_program("cannot make a temporary folder");
    TEST_RUN(gen_ref_cpu);
    TEST_RUN(gen_ref_vulkan);
    TEST_RUN(test_pieces);
    TEST_RUN(test_multi);
    TEST_RUN(test_cache_bytes);
    TEST_RUN(test_truncate);
    TEST_RUN(test_q8_cache);
    gen_ref_teardown();
    return test_finish();
}
