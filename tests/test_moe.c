/* test_moe.c: moe_ffn, a mixture of experts' routed experts in one op (backend.h),
 * against the plain ops it stands for.
 *
 * A layer of random experts, stacked as a file stacks them, and a random routing: each
 * token takes k distinct experts with positive weights, or every token the same k (one
 * expert then has the whole batch). On every fast ISA this CPU runs, in both activation
 * modes, with the weights in the x16 layout (AVX-512) and in rows, on one thread and on
 * three, the backend's moe_ffn must leave x bit for bit as the plain ops leave it: per
 * expert in ascending order, get_rows, matmul by its gate and its up projection (with
 * their biases), silu_mul or swiglu_oai, matmul by its down projection (with its bias)
 * and add_rows, as backend_moe_ffn_plain runs them (the model's loop). It must also take
 * the batches it is for: one token always, and a few tokens where each expert's fit one
 * activation tile, every batch of 8 on AVX-512 (else the comparison would be of the
 * plain ops with themselves).
 * backend_moe_ffn with the fusion switched off must give the same bits, and so must the
 * reference backend's moe_ffn (a token at a time) against its own plain ops.
 *
 * The layers: Q4_K experts as qwen3moe's, Q4_K with a Q6_K or Q5_0 down projection,
 * MXFP4 with biases and swiglu_oai as gpt-oss's, Q8_0, gate and up of different types
 * (the activations quantized twice), an expert width that leaves a short last panel
 * and an F16 down projection (the float kernels), and F32 throughout.
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/ops.h"
#include "format/quant.h"
#include "format/quantize.h"
#include "test.h"
#include "util.h"

/* ---- random layers ------------------------------------------------------------------ */

typedef struct moe_case {
    uint32_t t_gate, t_up, t_down;
    int n_embd, n_ff, n_expert, n_used;
    bool bias, oai;
    bool gelu; /* gemma4's GELU experts (with oai false) */
} moe_case;

/* A case's weights as the file has them: [n_expert n_out][n_in] rows of a type. */
typedef struct moe_weights {
    uint8_t *w[3];     /* gate, up, down */
    float *b[3];       /* their biases, [n_expert][n_out], or NULL */
    uint64_t rb[3];    /* row bytes */
} moe_weights;

static uint8_t *random_rows(uint32_t type, int64_t n_in, int64_t n_rows, uint64_t *rb) {
    *rb = quant_row_bytes(type, n_in);
    uint8_t *w = malloc(*rb * (uint64_t)n_rows);
    float *row = malloc((size_t)n_in * sizeof(float));
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < n_in; i++) row[i] = test_frand() * 0.5f;
        CHECK(quant_quantize_row(type, row, w + (uint64_t)r * *rb, n_in) == AL_OK);
    }
    free(row);
    return w;
}

static moe_weights make_weights(const moe_case *c) {
    moe_weights mw = {0};
    const uint32_t types[3] = {c->t_gate, c->t_up, c->t_down};
    const int64_t n_in[3] = {c->n_embd, c->n_embd, c->n_ff};
    const int64_t n_out[3] = {c->n_ff, c->n_ff, c->n_embd};
    for (int i = 0; i < 3; i++) {
        mw.w[i] = random_rows(types[i], n_in[i], (int64_t)c->n_expert * n_out[i], &mw.rb[i]);
        if (c->bias) mw.b[i] = test_floats((int64_t)c->n_expert * n_out[i], 0.5f);
    }
    return mw;
}

static void free_weights(moe_weights *mw) {
    for (int i = 0; i < 3; i++) free(mw->w[i]), free(mw->b[i]);
}

/* Weight i of a case on a backend: a copy (weight_pack may drop the pages of what it
 * packs, backend.h), offered for the backend's layout with views of one expert. */
static al_tensor weight_on(al_backend *be, const moe_case *c, const moe_weights *mw, int i,
                           uint8_t **copy) {
    const uint32_t types[3] = {c->t_gate, c->t_up, c->t_down};
    const int64_t n_in = i < 2 ? c->n_embd : c->n_ff, n_out = i < 2 ? c->n_ff : c->n_embd;
    const uint64_t n_bytes = mw->rb[i] * (uint64_t)(c->n_expert * n_out);
    *copy = malloc(n_bytes);
    memcpy(*copy, mw->w[i], n_bytes);
    al_tensor t = {.type = types[i], .ne = {n_in, c->n_expert * n_out}, .data = *copy,
                   .row_bytes = mw->rb[i]};
    if (be->ops->weight_pack) CHECK(be->ops->weight_pack(be, &t, n_out) == AL_OK);
    return t;
}

/* ---- one batch ---------------------------------------------------------------------- */

/* The experts of n tokens: k distinct ones each, or for `same` every token the same. */
static void random_route(int n, int n_expert, int k, bool same, int32_t *sel, float *sel_w) {
    int32_t *perm = malloc((size_t)n_expert * sizeof *perm);
    for (int t = 0; t < n; t++) {
        for (int e = 0; e < n_expert; e++) perm[e] = e;
        for (int j = 0; j < k; j++) { /* a partial shuffle */
            const int r = j + (int)(test_rnd() % (uint32_t)(n_expert - j));
            const int32_t tmp = perm[j];
            perm[j] = perm[r], perm[r] = tmp;
            sel[t * k + j] = same && t > 0 ? sel[j] : perm[j];
            sel_w[t * k + j] = 0.05f + 0.95f * (test_frand() + 1.0f) / 2.0f;
        }
    }
    free(perm);
}

/* Scratch and routing of one batch: tensors over host memory (the CPU's). */
typedef struct moe_batch {
    float *xb, *x0, *x[3];  /* input, residual before, after each path */
    float *xe, *ye, *he, *he2, *rows_w;
    int32_t *sel, *rows;
    float *sel_w;
    al_tensor t_xe, t_ye, t_he, t_he2;
} moe_batch;

static moe_batch make_batch(const moe_case *c, int n, bool same) {
    const int64_t np = (int64_t)n * c->n_used;
    moe_batch b = {
        .xb = test_floats((int64_t)n * c->n_embd, 1.0f),
        .x0 = test_floats((int64_t)n * c->n_embd, 1.0f),
        .xe = calloc((size_t)(np * c->n_embd), 4), .ye = calloc((size_t)(np * c->n_embd), 4),
        .he = calloc((size_t)(np * c->n_ff), 4), .he2 = calloc((size_t)(np * c->n_ff), 4),
        .rows_w = calloc((size_t)np, 4), .rows = calloc((size_t)np, 4),
        .sel = calloc((size_t)np, 4), .sel_w = calloc((size_t)np, 4),
    };
    for (int i = 0; i < 3; i++) b.x[i] = malloc((size_t)n * c->n_embd * 4);
    b.t_xe = test_f32(b.xe, c->n_embd, np), b.t_ye = test_f32(b.ye, c->n_embd, np);
    b.t_he = test_f32(b.he, c->n_ff, np), b.t_he2 = test_f32(b.he2, c->n_ff, np);
    random_route(n, c->n_expert, c->n_used, same, b.sel, b.sel_w);
    return b;
}

static void free_batch(moe_batch *b) {
    free(b->xb), free(b->x0), free(b->xe), free(b->ye), free(b->he), free(b->he2);
    free(b->rows_w), free(b->rows), free(b->sel), free(b->sel_w);
    for (int i = 0; i < 3; i++) free(b->x[i]);
}

/* Tallies of one backend over all cases. */
typedef struct moe_tally {
    int n_batches, n_fused, n_diff;
    int n_few, n_few_fused; /* batches of at most 8 tokens, and how many were fused */
} moe_tally;

/* One batch of n tokens on be: moe_ffn, the plain ops, and backend_moe_ffn with the
 * fusion off (a fast backend) must agree bit for bit; moe_ffn must take one token. */
static void check_batch(al_backend *be, bool fast, const moe_case *c, const al_tensor w[6],
                        int n, bool same, moe_tally *tally) {
    moe_batch b = make_batch(c, n, same);
    al_tensor xb = test_f32(b.xb, c->n_embd, n);
    const al_moe moe = {
        .gate = &w[0], .up = &w[1], .down = &w[2],
        .gate_b = c->bias ? &w[3] : NULL, .up_b = c->bias ? &w[4] : NULL,
        .down_b = c->bias ? &w[5] : NULL,
        .n_expert = c->n_expert, .n_used = c->n_used, .n_ff = c->n_ff,
        .act = c->oai ? AL_MOE_SWIGLU_OAI : c->gelu ? AL_MOE_GELU : AL_MOE_SILU,
        .alpha = 1.702f, .limit = 7.0f,
        .sel = b.sel, .sel_w = b.sel_w,
        .xe = &b.t_xe, .ye = &b.t_ye, .he = &b.t_he, .he2 = &b.t_he2,
        .rows = b.rows, .rows_w = b.rows_w, .n_scratch = n * c->n_used,
    };
    const size_t x_bytes = (size_t)n * c->n_embd * 4;
    al_tensor x[3];
    for (int i = 0; i < 3; i++) {
        memcpy(b.x[i], b.x0, x_bytes);
        x[i] = test_f32(b.x[i], c->n_embd, n);
    }
    const bool fused = be->ops->moe_ffn(be, &xb, &moe, &x[0]);
    if (!fused) backend_moe_ffn_plain(be, &xb, &moe, &x[0]); /* moe_ffn did nothing */
    backend_moe_ffn_plain(be, &xb, &moe, &x[1]);
    if (fast) cpu_backend_set_moe_fuse(be, false);
    backend_moe_ffn(be, &xb, &moe, &x[2]);
    if (fast) cpu_backend_set_moe_fuse(be, true);
    const bool same_bits = !memcmp(b.x[0], b.x[1], x_bytes) && !memcmp(b.x[2], b.x[1], x_bytes);
    CHECK_MSG(same_bits && (fused || n > 1),
              "%s %s/%s/%s experts %d of %d, %d token%s%s: %s", be->desc,
              quant_type_name(c->t_gate), quant_type_name(c->t_up), quant_type_name(c->t_down),
              c->n_used, c->n_expert, n, n > 1 ? "s" : "", same ? " (same experts)" : "",
              same_bits ? "moe_ffn did not fuse one token" : "differs from the plain ops");
    tally->n_batches++, tally->n_fused += fused, tally->n_diff += !same_bits;
    if (n <= 8) tally->n_few++, tally->n_few_fused += fused;
    free_batch(&b);
}

/* ---- the cases --------------------------------------------------------------------- */

static const moe_case g_cases[] = {
    /* qwen3moe: 8 of many experts */
    {AL_TYPE_Q4_K, AL_TYPE_Q4_K, AL_TYPE_Q4_K, 256, 256, 32, 8, false, false, false},
    {AL_TYPE_Q4_K, AL_TYPE_Q4_K, AL_TYPE_Q6_K, 512, 256, 16, 4, false, false, false},
    {AL_TYPE_Q4_K, AL_TYPE_Q4_K, AL_TYPE_Q5_0, 256, 128, 8, 2, false, false, false},
    /* gpt-oss: biases and the clamped SwiGLU */
    {AL_TYPE_MXFP4, AL_TYPE_MXFP4, AL_TYPE_MXFP4, 256, 128, 16, 4, true, true, false},
    {AL_TYPE_Q8_0, AL_TYPE_Q8_0, AL_TYPE_Q8_0, 256, 96, 8, 2, false, false, false},
    /* gate and up quantize their activations differently */
    {AL_TYPE_Q4_0, AL_TYPE_Q8_0, AL_TYPE_Q5_0, 256, 128, 8, 3, true, false, false},
    /* a short last panel (72 = 4 x 16 + 8 rows), float down projections */
    {AL_TYPE_Q8_0, AL_TYPE_Q8_0, AL_TYPE_F16, 256, 72, 6, 3, false, true, false},
    {AL_TYPE_F32, AL_TYPE_F32, AL_TYPE_F32, 64, 40, 4, 2, true, false, false},
    /* gemma4: GELU experts */
    {AL_TYPE_Q8_0, AL_TYPE_Q8_0, AL_TYPE_Q8_0, 256, 128, 8, 2, false, false, true},
};
enum { N_CASES = sizeof g_cases / sizeof g_cases[0] };

/* Every case, batches of 1, 2, 3, 5, 8 and 16 tokens, and 3 and 8 tokens with the same
 * experts, on one backend. */
static moe_tally run_cases(al_backend *be, bool fast, const moe_weights *mw) {
    static const int n_toks[] = {1, 2, 3, 5, 8, 16};
    moe_tally tally = {0};
    for (int ci = 0; ci < N_CASES; ci++) {
        const moe_case *c = &g_cases[ci];
        al_tensor w[6];
        uint8_t *copy[3];
        for (int i = 0; i < 3; i++) w[i] = weight_on(be, c, &mw[ci], i, &copy[i]);
        for (int i = 0; i < 3; i++) {
            const int64_t n_out = i < 2 ? c->n_ff : c->n_embd;
            w[3 + i] = test_f32(mw[ci].b[i], n_out, c->n_expert);
        }
        for (int ti = 0; ti < 6; ti++) check_batch(be, fast, c, w, n_toks[ti], false, &tally);
        check_batch(be, fast, c, w, 3, true, &tally);
        check_batch(be, fast, c, w, 8, true, &tally);
        for (int i = 0; i < 3; i++) free(copy[i]);
    }
    return tally;
}

static al_backend *make_backend(cpu_isa isa, cpu_act_mode act, int n_threads, bool x16) {
    al_backend *be = NULL;
    if (cpu_backend_create_isa(n_threads, isa, act, &be) != AL_OK) return NULL;
    cpu_backend_set_x16(be, x16);
    if (be->ops->reserve(be, 512, 512) != AL_OK) {
        be->ops->destroy(be);
        return NULL;
    }
    return be;
}

static moe_weights g_weights[N_CASES];

static void test_moe_fast(void) {
    for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) {
            printf("     %s: this CPU cannot run it\n", cpu_isa_name((cpu_isa)isa));
            continue;
        }
        for (int act = CPU_ACT_Q8; act <= CPU_ACT_Q8X2; act++)
            for (int x16 = 0; x16 <= (isa == CPU_ISA_AVX512); x16++)
                for (int n_threads = 1; n_threads <= 3; n_threads += 2) {
                    al_backend *be = make_backend((cpu_isa)isa, (cpu_act_mode)act, n_threads,
                                                  x16);
                    CHECK(be != NULL);
                    if (!be) continue;
                    const moe_tally t = run_cases(be, true, g_weights);
                    printf("     %-20s %s %d thread%s: %d batches, %d fused, %d differ\n",
                           be->desc, x16 ? "x16 " : "rows", n_threads, n_threads > 1 ? "s" : "",
                           t.n_batches, t.n_fused, t.n_diff);
                    /* a tile of 8 tokens (AVX-512) holds every expert's tokens of a
                     * batch of 8; a smaller one those of one token at least */
                    const int tile = ((cpu_backend *)be)->k->tile;
                    CHECK_MSG(tile >= 8 ? t.n_few_fused == t.n_few : t.n_fused > N_CASES,
                              "%s: %d of %d batches fused", be->desc, t.n_fused, t.n_batches);
                    be->ops->destroy(be);
                }
    }
}

static void test_moe_ref(void) {
    al_backend *be = make_backend(CPU_ISA_REF, CPU_ACT_Q8, 3, false);
    CHECK(be != NULL);
    if (!be) return;
    const moe_tally t = run_cases(be, false, g_weights);
    printf("     %s: %d batches, a token at a time, %d differ from the plain ops\n", be->desc,
           t.n_batches, t.n_diff);
    CHECK(t.n_fused == t.n_batches);
    be->ops->destroy(be);
}

int main(void) {
    test_rng = 0x2545F4914F6CDD1Dull; /* the layers these cases were written with */
    for (int i = 0; i < N_CASES; i++) g_weights[i] = make_weights(&g_cases[i]);
    TEST_RUN(test_moe_fast);
    TEST_RUN(test_moe_ref);
    for (int i = 0; i < N_CASES; i++) free_weights(&g_weights[i]);
    return test_finish();
}
