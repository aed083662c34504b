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
#include "gen_ref.h"

enum { N_VOCAB = 512, N_CTX = 64 };

#define FLAGS                                                                           \
    "--arch glm4moe --dim 256 --layers 3 --heads 4 --kv-heads 2 --head-dim 64 --ffn 512 " \
    "--vocab 512 --experts 8 --experts-used 2 --ffn-exp 128 --type "
/* F32: nothing rounds but the sums' order; Q8_0: the CPU's default rounds as llama.cpp
 * does, --precise and Vulkan keep f32 activations */
static const gen_ref_model models[] = {
    {"glm4moe-F32", FLAGS "F32", "0f6e26a3ccb5084357fb946bda02a6ab6baa8aa0d98bd41c2ed4d0381e770886",
     1e-6, 1e-6},
    {"glm4moe-Q8_0", FLAGS "Q8_0",
     "6c845bb80588bad4df627f18101f4f4291bba7d5971e833b017e7c518b76a80b", 1e-6, 1e-3},
};
enum { N_MODELS = sizeof models / sizeof *models };

/* A token's experts and their weights are its own: token by token and in chunks the
 * logits are the batch's. */
static void test_pieces(void) { gen_ref_pieces(1, "cpu", 0); }

int main(void) {
    if (!gen_ref_setup(models, N_MODELS, N_VOCAB, N_CTX, "glm"))
        return test_skip_program("cannot make a temporary folder");
    TEST_RUN(gen_ref_cpu);
    TEST_RUN(gen_ref_vulkan);
    TEST_RUN(test_pieces);
    gen_ref_teardown();
    return test_finish();
}
