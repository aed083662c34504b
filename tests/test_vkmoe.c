/* test_vkmoe.c: the Vulkan backend's moe_ffn (src/vulkan/moe.c) against the plain ops it
 * stands for, on the same device, and against the reference CPU backend.
 *
 * A layer of random experts, stacked as a file stacks them (quantized from random
 * floats), and a random routing of 1 to 9 tokens: each token takes k distinct experts
 * with positive weights, or every token the same k (the same expert in several pairs).
 * For each batch the change moe_ffn makes to x is compared with the change
 * backend_moe_ffn_plain makes, expert by expert, on the Vulkan device (NMSE <= 1e-9:
 * the same f32 operations, only the order of a dot product's additions may differ)
 * and on the reference CPU backend (NMSE <= 1e-6, test_vulkan's tolerance for f32
 * ops: the reference dequantizes and sums in f32 as the shaders do; its 5e-4 for
 * quantized matmuls would let a dropped down bias through). The fused op must take every batch of up to 8 tokens and
 * decline 9, leaving x as it was.
 *
 * The projections take one workgroup per expert (a slot of its pairs), so batches
 * where several tokens share an expert run the shaders' builds of 2, 4 and 8 tokens.
 *
 * The layers: Q4_K gate and up with a Q6_K down projection and SiLU (qwen3moe's),
 * MXFP4 with biases and swiglu_oai (gpt-oss's), Q8_0 with biases and SiLU, an
 * expert width of 160 (n_ff not a multiple of the workgroups' rows below) with a
 * Q5_0 down, and Q4_0 gate and up with a Q8_0 down and only a down bias. Three
 * configurations of the device: the defaults (on a CPU device, the ROWS build of
 * moe_mm.comp), the GPUs' build (cpu_rows=0) with 3 rows per workgroup, and the ROWS
 * build with 24 rows per workgroup; the last two leave a short last workgroup. With
 * fuse=0 the op declines, and it declines float experts and too small a scratch.
 * The Khronos validation layer is on where it is installed and must stay silent.
 *
 * Without a Vulkan build or device, the program prints why and skips.
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "registry.h"
#include "format/quant.h"
#include "format/quantize.h"
#include "test.h"
#include "util.h"

#ifdef AL_HAVE_VULKAN
#include "vulkan/vk_backend.h"

enum { MAX_TOK = 9, N_KEEP = 256 };

static al_backend *g_cpu, *g_vk;
static void *g_keep[N_KEEP]; /* host memory weight_load imports: kept until the backend goes */
static int g_n_keep;

static void *keep_alloc(size_t n) {
    size_t rounded = (n + 4095) & ~(size_t)4095;
    void *p = al_aligned_alloc(4096, rounded);
    AL_ASSERT(p && g_n_keep < N_KEEP);
    memset(p, 0, rounded);
    g_keep[g_n_keep++] = p;
    return p;
}

static void free_kept(void) {
    for (int i = 0; i < g_n_keep; i++) al_aligned_free(g_keep[i]);
    g_n_keep = 0;
}

/* ---- a layer on both backends ------------------------------------------------------- */

typedef struct moe_case {
    const char *name;
    uint32_t t_gu, t_down;
    int n_embd, n_ff, n_expert, n_used;
    bool bias_gu, bias_down, oai;
    bool gelu; /* gemma4's GELU experts (with oai false) */
} moe_case;

/* The weights (gate, up, down) and biases of a layer, as loaded by one backend. */
typedef struct layer {
    al_tensor w[3], b[3];
    bool has_b[3];
} layer;

/* n_rows rows of n_in random floats in type, on both backends' copies of the bytes. */
static void load_weight(uint32_t type, int64_t n_in, int64_t n_rows, al_tensor *cpu,
                        al_tensor *vk) {
    const uint64_t rb = quant_row_bytes(type, n_in), n = rb * (uint64_t)n_rows;
    uint8_t *bytes = keep_alloc(n), *copy = keep_alloc(n);
    float *row = malloc((size_t)n_in * sizeof(float));
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < n_in; i++) row[i] = test_frand() * 0.5f;
        CHECK(quant_quantize_row(type, row, bytes + (uint64_t)r * rb, n_in) == AL_OK);
    }
    free(row);
    memcpy(copy, bytes, n);
    *cpu = (al_tensor){.type = type, .ne = {n_in, n_rows}, .data = bytes, .row_bytes = rb};
    *vk = *cpu;
    vk->data = copy;
    if (g_cpu->ops->weight_load) CHECK(g_cpu->ops->weight_load(g_cpu, cpu) == AL_OK);
    al_status st = g_vk->ops->weight_load(g_vk, vk);
    CHECK_MSG(st == AL_OK, "weight_load %s: %s", quant_type_name(type), al_last_error());
}

static void load_layer(const moe_case *c, layer *cpu, layer *vk) {
    const uint32_t types[3] = {c->t_gu, c->t_gu, c->t_down};
    const int64_t n_in[3] = {c->n_embd, c->n_embd, c->n_ff};
    const int64_t n_out[3] = {c->n_ff, c->n_ff, c->n_embd};
    const bool bias[3] = {c->bias_gu, c->bias_gu, c->bias_down};
    for (int i = 0; i < 3; i++) {
        load_weight(types[i], n_in[i], (int64_t)c->n_expert * n_out[i], &cpu->w[i], &vk->w[i]);
        cpu->has_b[i] = vk->has_b[i] = bias[i];
        if (bias[i]) load_weight(AL_TYPE_F32, n_out[i], c->n_expert, &cpu->b[i], &vk->b[i]);
    }
}

/* Activations and scratch of one backend. */
typedef struct acts {
    al_tensor xb, x, xe, ye, he, he2;
    int32_t rows[MAX_TOK * 8];
    float rows_w[MAX_TOK * 8];
} acts;

static void alloc_acts(al_backend *be, const moe_case *c, int n_scratch, acts *a) {
    const al_backend_ops *op = be->ops;
    CHECK(op->tensor_alloc(be, c->n_embd, MAX_TOK, &a->xb) == AL_OK);
    CHECK(op->tensor_alloc(be, c->n_embd, MAX_TOK, &a->x) == AL_OK);
    CHECK(op->tensor_alloc(be, c->n_embd, n_scratch, &a->xe) == AL_OK);
    CHECK(op->tensor_alloc(be, c->n_embd, n_scratch, &a->ye) == AL_OK);
    CHECK(op->tensor_alloc(be, c->n_ff, n_scratch, &a->he) == AL_OK);
    CHECK(op->tensor_alloc(be, c->n_ff, n_scratch, &a->he2) == AL_OK);
}

static void free_acts(al_backend *be, acts *a) {
    al_tensor *t[] = {&a->xb, &a->x, &a->xe, &a->ye, &a->he, &a->he2};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) be->ops->tensor_free(be, t[i]);
}

static al_moe describe(const moe_case *c, const layer *l, acts *a, const int32_t *sel,
                       const float *sel_w, int n_scratch) {
    return (al_moe){
        .gate = &l->w[0], .up = &l->w[1], .down = &l->w[2],
        .gate_b = l->has_b[0] ? &l->b[0] : NULL, .up_b = l->has_b[1] ? &l->b[1] : NULL,
        .down_b = l->has_b[2] ? &l->b[2] : NULL,
        .n_expert = c->n_expert, .n_used = c->n_used, .n_ff = c->n_ff,
        .act = c->oai ? AL_MOE_SWIGLU_OAI : c->gelu ? AL_MOE_GELU : AL_MOE_SILU,
        .alpha = 1.702f, .limit = 7.0f,
        .sel = sel, .sel_w = sel_w,
        .xe = &a->xe, .ye = &a->ye, .he = &a->he, .he2 = &a->he2,
        .rows = a->rows, .rows_w = a->rows_w, .n_scratch = n_scratch,
    };
}

/* The experts of n tokens: k distinct ones each, or for `same` every token the same. */
static void random_route(int n, int n_expert, int k, bool same, int32_t *sel, float *sel_w) {
    int32_t perm[64];
    for (int t = 0; t < n; t++) {
        for (int e = 0; e < n_expert; e++) perm[e] = e;
        for (int j = 0; j < k; j++) {
            const int r = j + (int)(test_rnd() % (uint32_t)(n_expert - j));
            const int32_t tmp = perm[j];
            perm[j] = perm[r], perm[r] = tmp;
            sel[t * k + j] = same && t > 0 ? sel[j] : perm[j];
            sel_w[t * k + j] = 0.05f + 0.95f * (test_frand() + 1.0f) / 2.0f;
        }
    }
}

/* ---- one batch ------------------------------------------------------------------------ */

/* x after moe on be from x0 (n rows), as the change to x0: fused (the backend's op,
 * whose answer goes to *took) or the plain ops. */
static void run_on(al_backend *be, acts *a, const al_moe *moe, int n, const float *xb,
                   const float *x0, bool fused, bool *took, float *delta) {
    const size_t count = (size_t)n * (size_t)a->x.ne[0];
    al_tensor xbv = al_tensor_rows(&a->xb, 0, n), xv = al_tensor_rows(&a->x, 0, n);
    be->ops->tensor_write(be, &xbv, xb, count * sizeof(float));
    be->ops->tensor_write(be, &xv, x0, count * sizeof(float));
    if (fused) *took = be->ops->moe_ffn && be->ops->moe_ffn(be, &xbv, moe, &xv);
    else backend_moe_ffn_plain(be, &xbv, moe, &xv);
    be->ops->tensor_read(be, &xv, delta, count * sizeof(float));
    if (be->ops->sync) CHECK_MSG(be->ops->sync(be) == AL_OK, "sync: %s", al_last_error());
    for (size_t i = 0; i < count; i++) delta[i] -= x0[i];
}

/* One batch of n tokens: the fused op against the plain ops on Vulkan and on the CPU. */
static void one_batch(const moe_case *c, layer *lc, layer *lv, acts *ac, acts *av, int n,
                      bool same) {
    const int k = c->n_used, n_scratch = MAX_TOK * k;
    const size_t count = (size_t)n * (size_t)c->n_embd;
    int32_t sel[MAX_TOK * 8];
    float sel_w[MAX_TOK * 8];
    random_route(n, c->n_expert, k, same, sel, sel_w);
    float *xb = malloc(count * sizeof(float)), *x0 = malloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++) xb[i] = test_frand(), x0[i] = test_frand() * 0.1f;
    float *d_cpu = malloc(count * sizeof(float)), *d_plain = malloc(count * sizeof(float));
    float *d_fused = malloc(count * sizeof(float));
    const al_moe mc = describe(c, lc, ac, sel, sel_w, n_scratch);
    const al_moe mv = describe(c, lv, av, sel, sel_w, n_scratch);
    bool took = false;
    run_on(g_cpu, ac, &mc, n, xb, x0, false, NULL, d_cpu);
    run_on(g_vk, av, &mv, n, xb, x0, false, NULL, d_plain);
    run_on(g_vk, av, &mv, n, xb, x0, true, &took, d_fused);
    if (n > 8) {
        CHECK_MSG(!took, "%s: moe_ffn took %d tokens", c->name, n);
        size_t moved = 0; /* declined: no change at all */
        for (size_t i = 0; i < count; i++) moved += d_fused[i] != 0;
        CHECK_MSG(moved == 0, "%s: a declined moe_ffn changed %zu of x", c->name, moved);
    } else {
        CHECK_MSG(took, "%s: moe_ffn declined %d tokens", c->name, n);
        double e_plain = test_nmse(d_fused, d_plain, count);
        double e_cpu = test_nmse(d_fused, d_cpu, count);
        CHECK_MSG(e_plain <= 1e-9, "%s %d tokens%s: fused vs plain on Vulkan NMSE %g", c->name,
                  n, same ? " (same experts)" : "", e_plain);
        CHECK_MSG(e_cpu <= 1e-6, "%s %d tokens%s: fused vs the reference NMSE %g", c->name, n,
                  same ? " (same experts)" : "", e_cpu);
        if (n == 1 || n == 8)
            printf("  %-28s %d tokens%-15s vs plain %.1e, vs reference %.1e\n", c->name, n,
                   same ? " (same experts)" : "", e_plain, e_cpu);
    }
    free(xb), free(x0), free(d_cpu), free(d_plain), free(d_fused);
}

static const moe_case g_cases[] = {
    {"qwen3moe Q4_K/Q6_K silu", AL_TYPE_Q4_K, AL_TYPE_Q6_K, 256, 256, 16, 8, false, false, false, false},
    {"gpt-oss MXFP4 bias oai", AL_TYPE_MXFP4, AL_TYPE_MXFP4, 288, 224, 12, 4, true, true, true, false},
    {"Q8_0 bias silu", AL_TYPE_Q8_0, AL_TYPE_Q8_0, 256, 128, 8, 2, true, true, false, false},
    {"Q8_0/Q5_0 n_ff 160 oai", AL_TYPE_Q8_0, AL_TYPE_Q5_0, 96, 160, 6, 3, false, false, true, false},
    {"Q4_0/Q8_0 down bias", AL_TYPE_Q4_0, AL_TYPE_Q8_0, 128, 96, 5, 2, false, true, false, false},
    {"gemma4 Q8_0 gelu", AL_TYPE_Q8_0, AL_TYPE_Q8_0, 256, 128, 8, 2, false, false, false, true},
};

static void one_case(const moe_case *c) {
    layer lc = {0}, lv = {0};
    acts ac, av;
    load_layer(c, &lc, &lv);
    alloc_acts(g_cpu, c, MAX_TOK * c->n_used, &ac);
    alloc_acts(g_vk, c, MAX_TOK * c->n_used, &av);
    for (int n = 1; n <= MAX_TOK; n++) one_batch(c, &lc, &lv, &ac, &av, n, false);
    one_batch(c, &lc, &lv, &ac, &av, 4, true);
    one_batch(c, &lc, &lv, &ac, &av, 8, true);
    free_acts(g_cpu, &ac);
    free_acts(g_vk, &av);
}

static void test_moe_fused(void) {
    for (size_t i = 0; i < sizeof g_cases / sizeof *g_cases; i++) one_case(&g_cases[i]);
}

/* What the op does not fuse: float experts, a scratch of fewer rows than pairs. */
static void test_moe_declines(void) {
    const moe_case f16 = {"F16", AL_TYPE_F16, AL_TYPE_F16, 64, 64, 4, 2, false, false, false, false};
    const moe_case q8 = {"Q8_0", AL_TYPE_Q8_0, AL_TYPE_Q8_0, 64, 64, 4, 2, false, false, false, false};
    const moe_case *cases[] = {&f16, &q8};
    for (int i = 0; i < 2; i++) {
        layer lc = {0}, lv = {0};
        acts av;
        load_layer(cases[i], &lc, &lv);
        alloc_acts(g_vk, cases[i], MAX_TOK * 2, &av);
        int32_t sel[4] = {0, 3, 1, 2};
        float sel_w[4] = {0.5f, 0.5f, 0.25f, 0.75f};
        /* Q8_0: a scratch of 3 rows for the 4 pairs of 2 tokens */
        al_moe m = describe(cases[i], &lv, &av, sel, sel_w, i == 0 ? MAX_TOK * 2 : 3);
        al_tensor xb = al_tensor_rows(&av.xb, 0, 2), x = al_tensor_rows(&av.x, 0, 2);
        CHECK_MSG(!g_vk->ops->moe_ffn(g_vk, &xb, &m, &x), "moe_ffn took %s", cases[i]->name);
        free_acts(g_vk, &av);
    }
}

/* vulkan.tune fuse=0: the plain ops, for comparisons. */
static void test_moe_fuse_off(void) {
    const moe_case q8 = {"Q8_0", AL_TYPE_Q8_0, AL_TYPE_Q8_0, 64, 64, 4, 2, false, false, false, false};
    layer lc = {0}, lv = {0};
    acts av;
    load_layer(&q8, &lc, &lv);
    alloc_acts(g_vk, &q8, MAX_TOK * 2, &av);
    int32_t sel[2] = {1, 2};
    float sel_w[2] = {0.5f, 0.5f};
    al_moe m = describe(&q8, &lv, &av, sel, sel_w, MAX_TOK * 2);
    al_tensor xb = al_tensor_rows(&av.xb, 0, 1), x = al_tensor_rows(&av.x, 0, 1);
    CHECK_MSG(!g_vk->ops->moe_ffn(g_vk, &xb, &m, &x), "moe_ffn ran with fuse=0");
    free_acts(g_vk, &av);
}

static void check_validation(void) {
    vk_backend_stats s;
    CHECK(vk_backend_get_stats(g_vk, &s));
    CHECK_MSG(s.n_validation == 0, "%d validation messages", s.n_validation);
    printf("  %llu dispatches, %d validation messages\n", (unsigned long long)s.n_dispatches,
           s.n_validation);
}

static bool create_vk(const char *tune) {
    const al_vulkan_settings vs = {.tune = tune, .timeout_ms = -1};
    /* the validation layer where it is installed: without it, the backend is made anyway */
    al_set_vulkan_instance(NULL, true);
    al_status st = vk_backend_create(0, &vs, &g_vk);
    al_set_vulkan_instance(NULL, false);
    if (st != AL_OK) st = vk_backend_create(0, &vs, &g_vk);
    if (st == AL_OK) st = g_vk->ops->reserve(g_vk, 4096, 256);
    if (st != AL_OK) printf("vulkan: %s\n", al_last_error());
    if (st == AL_OK) printf("-- %s, vulkan.tune %s\n", g_vk->desc, tune ? tune : "");
    return st == AL_OK;
}

static void destroy_vk(void) {
    g_vk->ops->destroy(g_vk);
    g_vk = NULL;
    free_kept();
}

int main(void) {
    al_model_params cpu = al_model_default_params();
    cpu.cpu.isa = "ref";
    if (backend_create("cpu", 2, &cpu, &g_cpu) != AL_OK || g_cpu->ops->reserve(g_cpu, 4096, 256)) {
        printf("cpu backend: %s\n", al_last_error());
        return 1;
    }
    if (!create_vk(NULL)) {
        printf("skip: no usable Vulkan device\n0 passed, 0 failed, 1 skipped\n");
        g_cpu->ops->destroy(g_cpu);
        return 0;
    }
    TEST_RUN(test_moe_fused);
    TEST_RUN(test_moe_declines);
    TEST_RUN(check_validation);
    destroy_vk();
    static const char *const tunes[] = {"cpu_rows=0,mv_nr=3", "mr_wg=24"};
    for (int i = 0; i < 2; i++)
        if (create_vk(tunes[i])) {
            TEST_RUN(test_moe_fused);
            TEST_RUN(check_validation);
            destroy_vk();
        }
    if (create_vk("fuse=0")) {
        TEST_RUN(test_moe_fuse_off);
        destroy_vk();
    }
    g_cpu->ops->destroy(g_cpu);
    return test_finish();
}

#else /* !AL_HAVE_VULKAN */
int main(void) { return test_skip_program(TEST_NO_VULKAN); }
#endif
