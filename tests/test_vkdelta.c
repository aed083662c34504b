/* test_vkdelta.c: the Vulkan backend's ops of the gated delta-net hybrids (qwen35,
 * qwen35moe) against the reference CPU backend's (cpu.isa "ref"): sigmoid_mul,
 * ssm_conv and delta_net (backend.h).
 *
 * sigmoid_mul runs on views of heads with row strides of their own (the gate beside
 * each head's query, the attention's output), and the floats between the view's rows
 * must stay as they were. ssm_conv and delta_net run over sequences of calls that
 * carry their state: a fresh start (whose state holds NaNs, which must not be read),
 * then batches of 1, 2 and 3 positions (fewer than the convolution's K-1 = 3, where
 * the new state takes rows of the old), 37 and 130 (more than ssm_conv's chunk of 32:
 * two dispatches); after every call the outputs and the state are compared. delta_net
 * takes tiled and grouped key heads, head sizes 32, 48 (no power of two), 64, 128 and
 * 256. Agreement: NMSE <= 1e-11 and the largest difference <= 2e-6 of the largest value
 * (f32 throughout; the reference sums in double, the shaders in float).
 *
 * The suite runs on the default pipelines (lavapipe: a lane per state row, 64 rows to
 * a workgroup), then with delta_net's rows over 8 lanes of a subgroup (the shuffle
 * build a GPU takes), and over 4 lanes in workgroups of 32 (8 rows: a head of 256 over
 * 32 workgroups). Limits are refused with a message through sync:
 * a head of 520, a convolution of 17 taps. The validation layer is on where it is
 * installed and must stay silent.
 *
 * Without a Vulkan build or device, the program prints why and skips.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "registry.h"
#include "test.h"
#include "util.h"

#ifdef AL_HAVE_VULKAN
#include "vulkan/vk_backend.h"

#include "vk_pairs.h" /* g_cpu, g_vk, pair, random data */

enum { MAX_CALLS = 6 };
static const double NMSE_TOL = 1e-11, REL_TOL = 2e-6;

/* The Vulkan tensor against the CPU one (both contiguous, or views of the same
 * shape): NMSE and the largest difference relative to the largest reference value. */
static void agree(const al_tensor *vk, const al_tensor *cpu, const char *what) {
    const size_t cols = (size_t)cpu->ne[0], rows = (size_t)cpu->ne[1];
    const size_t row_f = (size_t)cpu->row_bytes / sizeof(float), n = (rows - 1) * row_f + cols;
    float *a = malloc(n * sizeof *a), *b = malloc(rows * cols * sizeof *b);
    float *c = malloc(rows * cols * sizeof *c);
    g_vk->ops->tensor_read(g_vk, vk, a, n * sizeof(float));
    const float *ref = (const float *)((const char *)cpu->data + cpu->offset);
    double max_ref = 0, max_diff = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < cols; i++) {
            b[r * cols + i] = a[r * row_f + i];
            c[r * cols + i] = ref[r * row_f + i];
            max_ref = fmax(max_ref, fabs(c[r * cols + i]));
            max_diff = fmax(max_diff, fabs((double)b[r * cols + i] - c[r * cols + i]));
        }
    const double e = test_nmse(b, c, (int64_t)(rows * cols));
    const double rel = max_ref > 0 ? max_diff / max_ref : max_diff;
    /* a NaN fails both: comparisons with it are false */
    CHECK_MSG(e <= NMSE_TOL && rel <= REL_TOL, "%s: NMSE %g, largest difference %g of the "
              "largest value", what, e, rel);
    printf("    %-44s NMSE %.1e  max rel %.1e\n", what, e, rel);
    free(a);
    free(b);
    free(c);
}

static void agree_pair(const pair *p, const char *what) { agree(&p->vk, &p->cpu, what); }

/* An f32 weight of n floats on both backends. */
static void weight_floats(const float *v, int64_t cols, int64_t rows, pair *p) {
    const size_t n = (size_t)(cols * rows) * sizeof(float);
    weight_pair(AL_TYPE_F32, cols, rows, memcpy(keep_alloc(n), v, n), p);
}

/* A view of the heads of t's rows, as model_hybrid.c makes them: n_rows x n_heads rows
 * of hd floats, stride floats apart, the first at float `first`. */
static al_tensor heads(const al_tensor *t, int64_t n_rows, int n_heads, int hd, int64_t stride,
                       int64_t first) {
    al_tensor h = *t;
    h.offset += (uint64_t)first * sizeof(float);
    h.ne[0] = hd;
    h.ne[1] = n_rows * n_heads;
    h.row_bytes = (uint64_t)stride * sizeof(float);
    return h;
}

/* ---- sigmoid_mul ------------------------------------------------------------------------ */

/* x: the first hd floats of each head of [n][n_head * 2hd] (the rest must stay); g: the
 * second half of each head of another [n][n_head * 2hd] (the gate beside the query). */
static void one_sigmoid_mul(int n, int n_head, int hd) {
    const int64_t cols = (int64_t)n_head * 2 * hd;
    float *xv = random_floats((size_t)(n * cols), 2.0f);
    float *gv = random_floats((size_t)(n * cols), 6.0f);
    pair x, g;
    act_pair(cols, n, xv, &x);
    act_pair(cols, n, gv, &g);
    al_tensor xc = heads(&x.cpu, n, n_head, hd, 2 * hd, 0);
    al_tensor xk = heads(&x.vk, n, n_head, hd, 2 * hd, 0);
    al_tensor gc = heads(&g.cpu, n, n_head, hd, 2 * hd, hd);
    al_tensor gk = heads(&g.vk, n, n_head, hd, 2 * hd, hd);
    g_cpu->ops->sigmoid_mul(g_cpu, &xc, &gc);
    g_vk->ops->sigmoid_mul(g_vk, &xk, &gk);
    char what[96];
    snprintf(what, sizeof what, "sigmoid_mul %d rows x %d heads of %d (views)", n, n_head, hd);
    agree_pair(&x, what); /* all of x: the floats between the view's rows too */
    free_pair(&x);
    free_pair(&g);
    free(xv);
    free(gv);
}

static void test_sigmoid_mul(void) {
    one_sigmoid_mul(1, 4, 64);
    one_sigmoid_mul(3, 2, 128);
    one_sigmoid_mul(37, 3, 40);
    /* contiguous rows, wider than a workgroup */
    float *xv = random_floats(5 * 700, 2.0f), *gv = random_floats(5 * 700, 6.0f);
    pair x, g;
    act_pair(700, 5, xv, &x);
    act_pair(700, 5, gv, &g);
    g_cpu->ops->sigmoid_mul(g_cpu, &x.cpu, &g.cpu);
    g_vk->ops->sigmoid_mul(g_vk, &x.vk, &g.vk);
    agree_pair(&x, "sigmoid_mul [5][700]");
    free_pair(&x);
    free_pair(&g);
    free(xv);
    free(gv);
}

/* ---- ssm_conv ---------------------------------------------------------------------------- */

/* A state of rows x cols NaNs: a fresh start must not read it. */
static void nan_pair(int64_t cols, int64_t rows, pair *p) {
    float *v = malloc((size_t)(cols * rows) * sizeof *v);
    for (int64_t i = 0; i < cols * rows; i++) v[i] = NAN;
    act_pair(cols, rows, v, p);
    free(v);
}

/* Calls of n[i] positions over one sequence (the first fresh), x a view from row 2 of
 * its tensor as the model's rows of a batch are. */
static void one_conv(int64_t n_ch, int k, const int *n, int n_calls) {
    float *wv = random_floats((size_t)(n_ch * k), 1.0f);
    pair w, state;
    weight_floats(wv, k, n_ch, &w);
    nan_pair(n_ch, k - 1, &state);
    for (int call = 0; call < n_calls; call++) {
        const int nt = n[call];
        float *xv = random_floats((size_t)((nt + 2) * n_ch), 2.0f);
        pair x, out;
        act_pair(n_ch, nt + 2, xv, &x);
        act_pair(n_ch, nt, NULL, &out);
        al_tensor xc = al_tensor_rows(&x.cpu, 2, nt), xk = al_tensor_rows(&x.vk, 2, nt);
        g_cpu->ops->ssm_conv(g_cpu, &xc, &w.cpu, &state.cpu, call == 0, &out.cpu);
        g_vk->ops->ssm_conv(g_vk, &xk, &w.vk, &state.vk, call == 0, &out.vk);
        char what[96];
        snprintf(what, sizeof what, "ssm_conv C %lld K %d: %d positions%s", (long long)n_ch, k,
                 nt, call == 0 ? ", fresh" : "");
        agree_pair(&out, what);
        snprintf(what, sizeof what, "  its state after them");
        agree_pair(&state, what);
        free_pair(&x);
        free_pair(&out);
        free(xv);
    }
    free_pair(&state);
    free(wv);
}

static void test_ssm_conv(void) {
    const int seq[] = {2, 1, 3, 37, 130, 1};
    one_conv(200, 4, seq, 6);
    const int fresh_short[] = {1, 2};
    one_conv(96, 4, fresh_short, 2);
    const int other_k[] = {5, 40, 1};
    one_conv(333, 2, other_k, 3);
    one_conv(64, 7, seq, 6);
}

/* ---- delta_net -------------------------------------------------------------------------- */

typedef struct delta_case {
    int n_k_heads, n_v_heads, head_dim;
    bool grouped;
    int n[MAX_CALLS], n_calls;
} delta_case;

static const delta_case g_delta[] = {
    {2, 4, 32, false, {2, 1, 3, 37, 130}, 5},
    {2, 4, 32, true, {3, 1, 37}, 3},
    {1, 2, 64, false, {1, 2, 130}, 3},
    {2, 6, 48, true, {37, 3}, 2},
    {2, 4, 128, true, {2, 1, 37}, 3},
    {2, 4, 128, false, {130, 1}, 2},
    {1, 2, 256, false, {3, 1, 37}, 3},
};

/* The inputs of one call of n positions: qkv rows from row 1 of a wider tensor (the
 * convolution's output has exactly its width; a view tests the offsets), alpha and
 * beta as the projections give them. */
static void delta_call(const delta_case *dc, const pair *dt, const pair *a, pair *state,
                       bool fresh, int n) {
    const int d = dc->head_dim, nk = dc->n_k_heads, nv = dc->n_v_heads;
    const int64_t width = (int64_t)(2 * nk + nv) * d;
    float *qv = random_floats((size_t)((n + 1) * width), 1.0f);
    float *av = random_floats((size_t)(n * nv), 3.0f), *bv = random_floats((size_t)(n * nv), 3.0f);
    pair qkv, alpha, beta, out;
    act_pair(width, n + 1, qv, &qkv);
    act_pair(nv, n, av, &alpha);
    act_pair(nv, n, bv, &beta);
    act_pair((int64_t)nv * d, n, NULL, &out);
    const al_delta_shape s = {.n_k_heads = nk, .n_v_heads = nv, .head_dim = d,
                              .grouped = dc->grouped, .eps = 1e-6f};
    al_tensor qc = al_tensor_rows(&qkv.cpu, 1, n), qk = al_tensor_rows(&qkv.vk, 1, n);
    g_cpu->ops->delta_net(g_cpu, &qc, &alpha.cpu, &beta.cpu, &dt->cpu, &a->cpu, &state->cpu,
                          fresh, &s, &out.cpu);
    g_vk->ops->delta_net(g_vk, &qk, &alpha.vk, &beta.vk, &dt->vk, &a->vk, &state->vk, fresh, &s,
                         &out.vk);
    char what[96];
    snprintf(what, sizeof what, "delta_net %d/%d heads of %d %s: %d%s", nk, nv, d,
             dc->grouped ? "grouped" : "tiled", n, fresh ? ", fresh" : "");
    agree_pair(&out, what);
    agree_pair(state, "  its state after them");
    free_pair(&qkv);
    free_pair(&alpha);
    free_pair(&beta);
    free_pair(&out);
    free(qv);
    free(av);
    free(bv);
}

static void one_delta(const delta_case *dc) {
    const int nv = dc->n_v_heads, d = dc->head_dim;
    float *dtv = random_floats((size_t)nv, 1.0f), *avv = malloc((size_t)nv * sizeof *avv);
    for (int h = 0; h < nv; h++) avv[h] = -expf(rndf()); /* a = -e^A_log, as the files hold */
    pair dt, a, state;
    weight_floats(dtv, nv, 1, &dt);
    weight_floats(avv, nv, 1, &a);
    nan_pair((int64_t)d * d, nv, &state);
    for (int call = 0; call < dc->n_calls; call++)
        delta_call(dc, &dt, &a, &state, call == 0, dc->n[call]);
    free_pair(&state);
    free(dtv);
    free(avv);
}

static void test_delta_net(void) {
    for (size_t i = 0; i < sizeof g_delta / sizeof *g_delta; i++) one_delta(&g_delta[i]);
}

/* ---- limits and the validation layer ---------------------------------------------------- */

static void check_validation(void) {
    vk_backend_stats s;
    CHECK(vk_backend_get_stats(g_vk, &s));
    CHECK_MSG(s.n_validation == 0, "%d validation messages", s.n_validation);
}

/* The Vulkan settings create_vk's backends take: run_suite changes the tuning. */
static al_vulkan_settings g_vs = {.timeout_ms = -1};

static bool create_vk(void) {
    al_status st = vk_backend_create(0, &g_vs, &g_vk);
    if (st == AL_OK) st = g_vk->ops->reserve(g_vk, 4096, 256);
    if (st != AL_OK) printf("vulkan: %s\n", al_last_error());
    return st == AL_OK;
}

/* An op the shaders cannot run fails the stream (backend.h: sync) with a message that
 * names the limit; each on a backend of its own, since the failure is sticky. */
static void test_limits(void) {
    g_vk->ops->destroy(g_vk);
    CHECK(create_vk());
    pair t, state, out;
    act_pair(3 * 520, 1, NULL, &t);
    act_pair(4, 1, NULL, &state);
    act_pair(520, 1, NULL, &out);
    const al_delta_shape s = {.n_k_heads = 1, .n_v_heads = 1, .head_dim = 520, .eps = 1e-6f};
    g_vk->ops->delta_net(g_vk, &t.vk, &state.vk, &state.vk, &state.vk, &state.vk, &state.vk, true,
                         &s, &out.vk);
    CHECK(g_vk->ops->sync(g_vk) == AL_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(al_last_error(), "head size 520"), "%s", al_last_error());
    printf("    %s\n", al_last_error());
    free_pair(&t);
    free_pair(&state);
    free_pair(&out);
    g_vk->ops->destroy(g_vk);
    CHECK(create_vk());
    float *wv = random_floats(8 * 17, 1.0f);
    pair w, x, st, o;
    weight_floats(wv, 17, 8, &w);
    act_pair(8, 2, NULL, &x);
    act_pair(8, 16, NULL, &st);
    act_pair(8, 2, NULL, &o);
    g_vk->ops->ssm_conv(g_vk, &x.vk, &w.vk, &st.vk, true, &o.vk);
    CHECK(g_vk->ops->sync(g_vk) == AL_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(al_last_error(), "17 taps"), "%s", al_last_error());
    printf("    %s\n", al_last_error());
    free_pair(&x);
    free_pair(&st);
    free_pair(&o);
    free(wv);
}

/* The ops on a backend made with vulkan.tune = tune (NULL: the defaults). */
static void run_suite(const char *tune) {
    g_vs.tune = tune;
    const bool ok = create_vk();
    g_vs.tune = NULL;
    if (!ok) {
        printf("skip: vulkan.tune %s: %s\n", tune ? tune : "", al_last_error());
        CHECK(tune != NULL); /* the defaults must work */
        return;
    }
    printf("-- %s%s%s\n", g_vk->desc, tune ? ", vulkan.tune " : "", tune ? tune : "");
    if (!tune) {
        TEST_RUN(test_sigmoid_mul);
        TEST_RUN(test_ssm_conv);
    }
    TEST_RUN(test_delta_net);
    TEST_RUN(check_validation);
    g_vk->ops->destroy(g_vk);
}

int main(void) {
    al_model_params cpu = al_model_default_params();
    cpu.cpu.isa = "ref";
    if (backend_create("cpu", 2, &cpu, &g_cpu) != AL_OK || g_cpu->ops->reserve(g_cpu, 4096, 256)) {
        printf("cpu backend: %s\n", al_last_error());
        return 1;
    }
    al_set_vulkan_instance(NULL, true);
    if (!create_vk()) {
        al_set_vulkan_instance(NULL, false); /* the layer may be missing: run without it */
        if (!create_vk()) {
            printf("skip: no usable Vulkan device\n");
            g_cpu->ops->destroy(g_cpu);
            printf("0 passed, 0 failed, 1 skipped\n");
            return 0;
        }
    }
    g_vk->ops->destroy(g_vk);
    run_suite(NULL);
    /* rows over lanes of a subgroup (the build GPUs take): lavapipe's subgroups of 8
     * shuffle; a device whose subgroups cannot refuses the tuning, and says so */
    run_suite("dn_lanes=8");
    run_suite("dn_lanes=4,dn_wg=32");
    if (create_vk()) {
        TEST_RUN(test_limits);
        g_vk->ops->destroy(g_vk);
    }
    for (int i = 0; i < g_n_keep; i++) al_aligned_free(g_keep[i]);
    g_cpu->ops->destroy(g_cpu);
    return test_finish();
}

#else /* !AL_HAVE_VULKAN */
int main(void) { return test_skip_program(TEST_NO_VULKAN); }
#endif
