/* test_fuse.c: the CPU backend's fused matmul_multi, matmul_glu and matmul_add
 * (src/cpu/fuse.c) against the plain ops they stand for.
 *
 * Random weights and inputs; on every fast ISA this CPU runs, in both activation
 * modes, with the weights in the x16 layout (where the ISA's kernels read it) and in
 * rows, on one thread and on three, each fused op must leave its outputs bit for bit
 * as the plain ops leave them (backend.h: the matmuls one by one, then silu_mul,
 * gelu_mul or add), which the backend_* helpers run with the fusion switched off. It
 * must also take the batches it is for, every batch of at most a tile of tokens (else
 * the comparison would be of the plain ops with themselves), and leave larger ones.
 *
 * The cases: q, k and v of one type and of mixed types (Q6_K's activations quantize
 * differently from Q4_K's), with biases; float weights beside quantized ones; widths
 * that leave a short last panel; gate and up with silu and with gelu; the residual add
 * with a bias.
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/ops.h"
#include "format/quant.h"
#include "format/quantize.h"
#include "test.h"
#include "util.h"

typedef enum { K_MULTI, K_GLU, K_ADD } fuse_kind;

typedef struct fuse_case {
    fuse_kind kind;
    int n;            /* weights: multi up to 3, glu 2, add 1 */
    uint32_t type[3];
    int n_in, n_out[3];
    bool bias;
    al_glu act;
} fuse_case;

static const fuse_case g_cases[] = {
    {K_MULTI, 3, {AL_TYPE_Q4_0, AL_TYPE_Q4_0, AL_TYPE_Q4_0}, 256, {256, 64, 64}, false, 0},
    {K_MULTI, 3, {AL_TYPE_Q4_K, AL_TYPE_Q4_K, AL_TYPE_Q6_K}, 512, {512, 128, 128}, true, 0},
    {K_MULTI, 3, {AL_TYPE_Q8_0, AL_TYPE_F16, AL_TYPE_F32}, 128, {72, 40, 24}, true, 0},
    {K_MULTI, 2, {AL_TYPE_MXFP4, AL_TYPE_Q5_0, 0}, 256, {96, 32, 0}, false, 0},
    {K_GLU, 2, {AL_TYPE_Q4_K, AL_TYPE_Q4_K, 0}, 256, {384, 384, 0}, false, AL_GLU_SILU},
    {K_GLU, 2, {AL_TYPE_Q5_0, AL_TYPE_Q5_0, 0}, 128, {72, 72, 0}, false, AL_GLU_GELU},
    {K_GLU, 2, {AL_TYPE_F16, AL_TYPE_F16, 0}, 64, {40, 40, 0}, false, AL_GLU_SILU},
    {K_ADD, 1, {AL_TYPE_Q6_K, 0, 0}, 512, {256, 0, 0}, true, 0},
    {K_ADD, 1, {AL_TYPE_Q4_1, 0, 0}, 256, {72, 0, 0}, false, 0},
    {K_ADD, 1, {AL_TYPE_F32, 0, 0}, 64, {40, 0, 0}, true, 0},
};
enum { N_CASES = sizeof g_cases / sizeof g_cases[0], MAX_TOK = 16 };

/* A case's random weights as a file has them, and their biases. */
typedef struct fuse_weights {
    uint8_t *w[3];
    float *b[3];
    uint64_t rb[3];
} fuse_weights;

static fuse_weights make_weights(const fuse_case *c) {
    fuse_weights fw = {0};
    float *row = malloc((size_t)c->n_in * sizeof(float));
    for (int i = 0; i < c->n; i++) {
        fw.rb[i] = quant_row_bytes(c->type[i], c->n_in);
        fw.w[i] = malloc(fw.rb[i] * (uint64_t)c->n_out[i]);
        for (int r = 0; r < c->n_out[i]; r++) {
            for (int k = 0; k < c->n_in; k++) row[k] = test_frand() * 0.5f;
            CHECK(quant_quantize_row(c->type[i], row, fw.w[i] + fw.rb[i] * (uint64_t)r,
                                     c->n_in) == AL_OK);
        }
        fw.b[i] = c->bias ? test_floats(c->n_out[i], 0.5f) : NULL;
    }
    free(row);
    return fw;
}

static void free_weights(fuse_weights *fw) {
    for (int i = 0; i < 3; i++) free(fw->w[i]), free(fw->b[i]);
}

/* Tallies of one backend over all cases. */
typedef struct fuse_tally {
    int n_batches, n_fused, n_diff, n_missed; /* missed: a batch of a tile not fused */
} fuse_tally;

/* Outputs of one run of a case: up to 3 buffers of MAX_TOK rows. */
typedef struct fuse_out {
    float *o[3];
} fuse_out;

/* Runs case c on n tokens of x through the fused op (fused) or the backend_* helper
 * with the fusion off; returns whether the fused op took the batch. */
static bool run_case(al_backend *be, const fuse_case *c, const al_tensor *w, const al_tensor *b,
                     const al_tensor *x, float *res0, fuse_out *out, bool fused, int n) {
    al_tensor o[3];
    for (int i = 0; i < c->n; i++) o[i] = test_f32(out->o[i], c->n_out[i], n);
    float *tmp = malloc((size_t)(MAX_TOK * c->n_out[0]) * sizeof(float));
    al_tensor t = test_f32(tmp, c->n_out[0], n);
    cpu_backend_set_fuse(be, fused);
    bool took = false;
    switch (c->kind) {
    case K_MULTI: {
        const al_tensor *wp[3] = {&w[0], &w[1], &w[2]};
        const al_tensor *bp[3] = {c->bias ? &b[0] : NULL, c->bias ? &b[1] : NULL,
                                  c->bias ? &b[2] : NULL};
        al_tensor *op[3] = {&o[0], &o[1], &o[2]};
        took = be->ops->matmul_multi(be, x, NULL, 0.0f, c->n, wp, bp, op);
        if (!took) backend_matmul_multi(be, x, NULL, 0.0f, c->n, wp, bp, NULL, op);
        break;
    }
    case K_GLU:
        took = be->ops->matmul_glu(be, x, &w[0], &w[1], c->act, &o[0]);
        if (!took) backend_matmul_glu(be, x, &w[0], &w[1], c->act, &t, &o[0]);
        break;
    case K_ADD:
        memcpy(out->o[0], res0, (size_t)(n * c->n_out[0]) * sizeof(float));
        took = be->ops->matmul_add(be, x, &w[0], c->bias ? &b[0] : NULL, &o[0]);
        if (!took) backend_matmul_add(be, x, &w[0], c->bias ? &b[0] : NULL, &t, &o[0]);
        break;
    }
    cpu_backend_set_fuse(be, true);
    free(tmp);
    return took;
}

/* One case on be over batches of 1, 2, 3, 4, 5, 8 and 16 tokens. */
static void check_case(al_backend *be, const fuse_case *c, const fuse_weights *fw,
                       fuse_tally *tally) {
    al_tensor w[3], b[3];
    uint8_t *copy[3] = {0};
    for (int i = 0; i < c->n; i++) { /* a copy: weight_pack may drop the pages it packs */
        const uint64_t n_bytes = fw->rb[i] * (uint64_t)c->n_out[i];
        copy[i] = malloc(n_bytes);
        memcpy(copy[i], fw->w[i], n_bytes);
        w[i] = (al_tensor){.type = c->type[i], .ne = {c->n_in, c->n_out[i]}, .data = copy[i],
                           .row_bytes = fw->rb[i]};
        CHECK(be->ops->weight_pack(be, &w[i], c->n_out[i]) == AL_OK);
        if (c->bias) b[i] = test_f32(fw->b[i], c->n_out[i], 1);
    }
    static const int n_toks[] = {1, 2, 3, 4, 5, 8, 16};
    const int tile = ((cpu_backend *)be)->k->tile;
    for (size_t k = 0; k < sizeof n_toks / sizeof *n_toks; k++) {
        const int n = n_toks[k];
        float *xs = test_floats((int64_t)n * c->n_in, 1.0f);
        float *res0 = test_floats((int64_t)n * c->n_out[0], 1.0f);
        al_tensor x = test_f32(xs, c->n_in, n);
        fuse_out f, p;
        for (int i = 0; i < c->n; i++) {
            f.o[i] = calloc((size_t)(n * c->n_out[i]), sizeof(float));
            p.o[i] = calloc((size_t)(n * c->n_out[i]), sizeof(float));
        }
        const bool took = run_case(be, c, w, b, &x, res0, &f, true, n);
        run_case(be, c, w, b, &x, res0, &p, false, n);
        bool same = true;
        for (int i = 0; i < c->n; i++)
            same &= !memcmp(f.o[i], p.o[i], (size_t)(n * c->n_out[i]) * sizeof(float));
        const bool missed = n <= tile && !took;
        CHECK_MSG(same && !missed, "%s case %d (%s x %d), %d tokens: %s", be->desc,
                  (int)(c - g_cases), quant_type_name(c->type[0]), c->n, n,
                  same ? "not fused" : "differs from the plain ops");
        tally->n_batches++, tally->n_fused += took, tally->n_diff += !same;
        tally->n_missed += missed;
        for (int i = 0; i < c->n; i++) free(f.o[i]), free(p.o[i]);
        free(xs), free(res0);
    }
    for (int i = 0; i < c->n; i++) free(copy[i]);
}

static fuse_weights g_weights[N_CASES];

static void test_fuse_fast(void) {
    for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) {
            printf("     %s: this CPU cannot run it\n", cpu_isa_name((cpu_isa)isa));
            continue;
        }
        for (int act = CPU_ACT_Q8; act <= CPU_ACT_Q8X2; act++)
            for (int x16 = 0; x16 <= 1; x16++)
                for (int n_threads = 1; n_threads <= 3; n_threads += 2) {
                    al_backend *be = NULL;
                    CHECK(cpu_backend_create_isa(n_threads, (cpu_isa)isa, (cpu_act_mode)act,
                                                 &be) == AL_OK);
                    if (!be) continue;
                    cpu_backend_set_x16(be, x16);
                    CHECK(be->ops->reserve(be, 512, 512) == AL_OK);
                    fuse_tally t = {0};
                    for (int ci = 0; ci < N_CASES; ci++)
                        check_case(be, &g_cases[ci], &g_weights[ci], &t);
                    printf("     %-20s %s %d thread%s: %d batches, %d fused, %d differ\n",
                           be->desc, x16 ? "x16 " : "rows", n_threads, n_threads > 1 ? "s" : "",
                           t.n_batches, t.n_fused, t.n_diff);
                    be->ops->destroy(be);
                }
    }
}

int main(void) {
    test_rng = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < N_CASES; i++) g_weights[i] = make_weights(&g_cases[i]);
    TEST_RUN(test_fuse_fast);
    for (int i = 0; i < N_CASES; i++) free_weights(&g_weights[i]);
    return test_finish();
}
