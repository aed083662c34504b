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
 * both; a q8_0 latent cache near the f32 one; the expanded form of prompts (every
 * head's keys and values made from the latent rows) against the same references, the
 * absorbed form and decoding after it, and when a context takes it. */
#include "gen_ref.h"

enum { N_VOCAB = 512, N_LAYER = 3, ROW = 288, N_CTX = 64 };

#define FLAGS                                                                           \
    "--arch deepseek2 --dim 256 --layers 3 --heads 4 --kv-heads 1 --head-dim 96 --ffn 512 " \
    "--vocab 512 --experts 8 --experts-used 2 --ffn-exp 128 "
static const gen_ref_model models[] = {
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

static void test_pieces(void) {
    gen_ref_pieces(0, "cpu", 0);
    gen_ref_pieces(1, "cpu", 0);
    if (al_gpu_count() > 0) gen_ref_pieces(1, "vulkan", 1e-10);
}

static void test_multi(void) {
    gen_ref_multi(1, "cpu");
    if (al_gpu_count() > 0) gen_ref_multi(1, "vulkan");
}

/* One latent row per position and layer holds the keys and the values of every head:
 * the bytes al_model_kv_bytes, al_model_kv_read_bytes and al_context_info report. */
static void test_cache_bytes(void) {
    al_model *m = gen_ref_load(0, "cpu");
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

/* The expanded form, taken here by batches of 2 tokens or more: the references hold
 * (llama.cpp attends in the absorbed form), within the bars of exact arithmetic, since
 * the expansion's f32 weights round no activation where llama.cpp rounds the absorbed
 * form's; the CPU's default is then nearer --precise than in the absorbed form; and a
 * prompt in pieces (pieces of 1 decode in the absorbed form over the rows the expanded
 * batches wrote) gives the batch's logits within rounding. */
static void test_expanded(void) {
    printf("     the expanded form, batches of 2 tokens or more:\n");
    g_ref.mla_expand_min = 2;
    for (int i = 0; i < N_MODELS; i++) {
        gen_ref_case(i, "cpu", models[i].max_nmse_exact);
        gen_ref_case(i, "cpu:precise", models[i].max_nmse_exact);
    }
    gen_ref_pieces(0, "cpu", 1e-10);
    gen_ref_pieces(1, "cpu", 1e-10);
    if (al_gpu_count() > 0) {
        for (int i = 0; i < N_MODELS; i++) gen_ref_case(i, "vulkan", models[i].max_nmse_exact);
        gen_ref_pieces(1, "vulkan", 1e-10);
    }
    const size_t nl = (size_t)N_TOK * N_VOCAB;
    float *exact = malloc(nl * sizeof(float)), *expanded = malloc(nl * sizeof(float));
    float *absorbed = malloc(nl * sizeof(float));
    bool ok = gen_ref_logits(2, "cpu:precise", N_TOK, AL_KV_F32, exact) &&
              gen_ref_logits(2, "cpu", N_TOK, AL_KV_F32, expanded);
    g_ref.mla_expand_min = -1;
    ok = ok && gen_ref_logits(2, "cpu", N_TOK, AL_KV_F32, absorbed);
    CHECK(ok);
    if (ok) {
        const double e = test_nmse(expanded, exact, (int64_t)nl);
        const double a = test_nmse(absorbed, exact, (int64_t)nl);
        printf("     %s, the default against --precise: expanded %.2e, absorbed %.2e\n",
               models[2].name, e, a);
        CHECK_MSG(e < a, "expanded %.2e, absorbed %.2e", e, a);
    }
    free(exact), free(expanded), free(absorbed);
    g_ref.mla_expand_min = 0;
}

/* Which contexts take the expanded form: f32 caches, by default batches of
 * AL_MLA_EXPAND_MIN tokens, over every position; not a q8_0 cache, whose rows a matmul
 * cannot read, nor -1; below -1 is refused; none of a model loaded with mla_absorbed,
 * which makes no copies of k_b and v_b. */
static void test_expand_params(void) {
    al_model *m = gen_ref_load(0, "cpu");
    CHECK(m != NULL);
    if (!m) return;
    static const struct {
        int min;
        al_kv_type k;
        int want_min, want_rows;
    } cases[] = {{0, AL_KV_F32, AL_MLA_EXPAND_MIN, N_CTX}, {7, AL_KV_F32, 7, N_CTX},
                 {-1, AL_KV_F32, 0, 0}, {0, AL_KV_Q8_0, 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        al_context *c = NULL;
        al_context_params cp = al_context_default_params();
        cp.n_ctx = N_CTX;
        cp.type_k = cases[i].k;
        cp.mla_expand_min = cases[i].min;
        CHECK(al_context_create(m, &cp, &c) == AL_OK);
        al_context_info ci;
        al_context_get_info(c, &ci);
        CHECK_MSG(ci.mla_expand_min == cases[i].want_min && ci.mla_expand_rows == cases[i].want_rows,
                  "mla_expand_min %d, %s: got %d and %d rows", cases[i].min,
                  al_kv_type_name(cases[i].k), ci.mla_expand_min, ci.mla_expand_rows);
        al_context_destroy(c);
    }
    al_context *c = NULL;
    al_context_params cp = al_context_default_params();
    cp.mla_expand_min = -2;
    CHECK(al_context_create(m, &cp, &c) == AL_ERR_ARG && c == NULL);
    CHECK(strstr(al_last_error(), "mla_expand_min -2") != NULL);
    /* the f32 copies: k_b transposed (4 heads of 64 x 256 per layer) and, the file's v_b
     * being F32 already, nothing more; a model loaded without them never expands */
    al_model_info mi;
    al_model_get_info(m, &mi);
    CHECK_MSG(mi.mla_expand_bytes == N_LAYER * 4 * 64 * 256 * sizeof(float), "%llu bytes",
              (unsigned long long)mi.mla_expand_bytes);
    al_model_destroy(m);
    al_model_params mp = al_model_default_params();
    mp.mla_absorbed = true;
    CHECK(al_model_load(g_ref.paths[0], &mp, &m) == AL_OK);
    al_model_get_info(m, &mi);
    cp.mla_expand_min = 2;
    cp.n_ctx = N_CTX;
    CHECK(mi.mla_expand_bytes == 0 && al_context_create(m, &cp, &c) == AL_OK);
    al_context_info ci;
    al_context_get_info(c, &ci);
    CHECK(ci.mla_expand_rows == 0 && ci.mla_expand_min == 0);
    al_context_destroy(c);
    al_model_destroy(m);
}

/* The lite model: the V3 router's groups turn a near tie at one position of the 48
 * (an expert of another group) on the cache's rounding, a jump of its own. */
static void test_q8_cache(void) { gen_ref_q8_cache(0, 5e-4); }

int main(void) {
    if (!gen_ref_setup(models, N_MODELS, N_VOCAB, N_CTX, "ds2"))
        return test_skip_program("cannot make a temporary folder");
    TEST_RUN(gen_ref_cpu);
    TEST_RUN(gen_ref_vulkan);
    TEST_RUN(test_pieces);
    TEST_RUN(test_multi);
    TEST_RUN(test_cache_bytes);
    TEST_RUN(test_q8_cache);
    TEST_RUN(test_expanded);
    TEST_RUN(test_expand_params);
    gen_ref_teardown();
    return test_finish();
}
