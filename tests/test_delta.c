/* test_delta.c: the CPU kernels of gated delta-net layers (Qwen3.5's linear attention):
 * sigmoid_mul, ssm_conv and delta_net, on every instruction set this machine can run
 * (scalar, AVX2, AVX-512), each against the reference ops on random data.
 *
 * The reference sums in double and the kernels in float with several accumulators, so
 * a fast result may differ from the reference's by 1e-5 of its own size or of the
 * tensor's RMS, whichever is larger (1e-6 for sigmoid_mul, which sums nothing). The
 * inputs are views, as the model's are: rows at strides longer than the data, heads
 * beside other heads, and the floats between them must stay as they were.
 *
 * ssm_conv and delta_net carry a state from one call to the next. Each case runs
 * twice: from a fresh state (filled with NaN, which must not be read) and then with
 * that state carried on over the same inputs again. The fast kernels must also give
 * the same bits on three threads as on one (delta_net: on two as well), and position
 * by position as in one batch: a token's output may not depend on how the sequence
 * was cut into calls. delta_net's cases cover heads of 32 to 256, key heads grouped
 * and tiled over the value heads, and gates past softplus's cut at 20.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/ops.h"
#include "kernel_check.h"
#include "test.h"

/* ---- gated delta-net ops ------------------------------------------------------------------ */

/* How far a fast result may be from the reference's: per element, 1e-5 of its own size
 * or of the tensor's RMS, whichever is larger (the reference sums in double, the
 * kernels in float with several accumulators). Returns the worst ratio to that bound. */
static double rel_err(const float *a, const float *ref, int64_t n) {
    double ss = 0, worst = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)ref[i] * ref[i];
    const double rms = sqrt(ss / (double)n) + 1e-30;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - ref[i]) / (fabs(ref[i]) > rms ? fabs(ref[i]) : rms);
        if (!(e <= worst)) worst = e; /* NaN too */
    }
    return worst;
}

typedef struct delta_case {
    int d, n_k, n_v;
    bool grouped;
} delta_case;

/* One sequence of inputs: qkv [n][(2 n_k + n_v) d] at a row stride one float longer (a
 * view, as the model's projections are), alpha and beta [n][n_v] at strides of their
 * own, dt_bias and a [n_v]; a few alpha + dt_bias past softplus's cut at 20. */
typedef struct delta_data {
    delta_case c;
    int n;
    int64_t ld;
    float *qkv, *alpha, *beta, *dt, *a;
} delta_data;

static delta_data delta_make(const delta_case *c, int n) {
    delta_data d = {.c = *c, .n = n, .ld = (int64_t)(2 * c->n_k + c->n_v) * c->d + 1};
    d.qkv = test_floats(d.ld * n, 2.0f);
    d.alpha = test_floats((int64_t)n * (c->n_v + 2), 3.0f);
    d.beta = test_floats((int64_t)n * (c->n_v + 3), 4.0f);
    d.dt = test_floats(c->n_v, 1.0f);
    d.a = test_floats(c->n_v, 1.0f);
    for (int h = 0; h < c->n_v; h++)
        d.a[h] = -0.05f - fabsf(d.a[h]) * 2; /* -exp(A_log): decays in (0, 1) */
    for (int t = 0; t < n; t += 7)
        d.alpha[(int64_t)t * (c->n_v + 2)] = 25.0f;
    return d;
}

static void delta_free(delta_data *d) {
    free(d->qkv), free(d->alpha), free(d->beta), free(d->dt), free(d->a);
}

/* delta_net over positions [t0, t0 + n) of d on be: state [n_v][d d] in and out, out
 * [n][n_v d] of positions t0 .. */
static void delta_call(al_backend *be, const delta_data *d, int t0, int n, bool fresh,
                       float *state, float *out) {
    const delta_case *c = &d->c;
    al_tensor qkv = {.type = AL_TYPE_F32, .ne = {d->ld - 1, n}, .data = d->qkv,
                     .offset = (uint64_t)t0 * d->ld * 4, .row_bytes = (uint64_t)d->ld * 4};
    al_tensor al = test_f32(d->alpha, c->n_v + 2, d->n), be_t = test_f32(d->beta, c->n_v + 3, d->n);
    al = al_tensor_rows(&al, t0, n), be_t = al_tensor_rows(&be_t, t0, n);
    al.ne[0] = be_t.ne[0] = c->n_v;
    al_tensor dt = test_f32(d->dt, c->n_v, 1), a = test_f32(d->a, c->n_v, 1);
    al_tensor st = test_f32(state, (int64_t)c->d * c->d, c->n_v);
    al_tensor o = test_f32(out, (int64_t)c->n_v * c->d, n);
    const al_delta_shape s = {.n_k_heads = c->n_k, .n_v_heads = c->n_v, .head_dim = c->d,
                              .grouped = c->grouped, .eps = 1e-6f};
    be->ops->delta_net(be, &qkv, &al, &be_t, &dt, &a, &st, fresh, &s, &o);
}

/* Two calls, each on all n positions: a fresh state (filled with NaN, which must not
 * be read), then that state carried on over the same inputs again. */
static void delta_two(al_backend *be, const delta_data *d, float *state, float *out) {
    const int64_t ns = (int64_t)d->c.n_v * d->c.d * d->c.d, no = (int64_t)d->n * d->c.n_v * d->c.d;
    for (int64_t i = 0; i < ns; i++)
        state[i] = NAN;
    delta_call(be, d, 0, d->n, true, state, out);
    memcpy(state + ns, state, (size_t)ns * 4);
    delta_call(be, d, 0, d->n, false, state + ns, out + no);
}

/* The same two calls position by position: must give the batch's bits. */
static bool delta_by_token(al_backend *be, const delta_data *d, const float *state,
                           const float *out) {
    const int64_t ns = (int64_t)d->c.n_v * d->c.d * d->c.d, row = (int64_t)d->c.n_v * d->c.d;
    float *s = malloc((size_t)ns * 4), *o = malloc((size_t)(2 * d->n * row) * 4);
    for (int64_t i = 0; i < ns; i++)
        s[i] = NAN;
    for (int pass = 0; pass < 2; pass++)
        for (int t = 0; t < d->n; t++)
            delta_call(be, d, t, 1, pass == 0 && t == 0, s, o + (pass * d->n + t) * row);
    const bool same = !memcmp(s, state + ns, (size_t)ns * 4) &&
                      !memcmp(o, out, (size_t)(2 * d->n * row) * 4);
    free(s), free(o);
    return same;
}

static void test_delta_net(void) {
    static const delta_case cases[] = {{32, 2, 4, true},  {32, 1, 1, false}, {64, 2, 4, false},
                                       {64, 2, 2, true},  {128, 2, 4, true}, {128, 2, 6, false},
                                       {256, 1, 2, true}, {256, 2, 4, false}};
    static const int ns[] = {1, 2, 3, 37, 130};
    al_backend *ref = backend(CPU_ISA_REF, 2, 4096, 64), *fast[CPU_ISA_COUNT][3] = {{NULL}};
    for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++)
        for (int th = 0; th < 3 && cpu_isa_available((cpu_isa)isa); th++)
            fast[isa][th] = backend((cpu_isa)isa, th + 1, 4096, 64);
    double worst[CPU_ISA_COUNT] = {0};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int ni = 0; ni < 5; ni++) {
            const delta_case *c = &cases[ci];
            delta_data d = delta_make(c, ns[ni]);
            const int64_t ns2 = 2 * (int64_t)c->n_v * c->d * c->d,
                          no2 = 2 * (int64_t)d.n * c->n_v * c->d;
            float *rs = malloc((size_t)ns2 * 4), *ro = malloc((size_t)no2 * 4);
            float *s[3], *o[3];
            delta_two(ref, &d, rs, ro);
            for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
                if (!fast[isa][0]) continue;
                for (int th = 0; th < 3; th++) {
                    s[th] = malloc((size_t)ns2 * 4), o[th] = malloc((size_t)no2 * 4);
                    delta_two(fast[isa][th], &d, s[th], o[th]);
                }
                const double e = fmax(rel_err(s[0], rs, ns2), rel_err(o[0], ro, no2));
                CHECK_MSG(e <= 1e-5, "%s: d %d, %d/%d heads%s, n %d: %.1e relative",
                          cpu_isa_name((cpu_isa)isa), c->d, c->n_k, c->n_v,
                          c->grouped ? " grouped" : "", d.n, e);
                if (e > worst[isa]) worst[isa] = e;
                for (int th = 1; th < 3; th++)
                    CHECK_MSG(!memcmp(s[th], s[0], (size_t)ns2 * 4) &&
                                  !memcmp(o[th], o[0], (size_t)no2 * 4),
                              "%s: d %d, n %d: %d threads differ from 1", cpu_isa_name((cpu_isa)isa),
                              c->d, d.n, th + 1);
                CHECK_MSG(delta_by_token(fast[isa][2], &d, s[0], o[0]),
                          "%s: d %d, %d/%d heads, n %d: token by token differs from the batch",
                          cpu_isa_name((cpu_isa)isa), c->d, c->n_k, c->n_v, d.n);
                for (int th = 0; th < 3; th++)
                    free(s[th]), free(o[th]);
            }
            free(rs), free(ro);
            delta_free(&d);
        }
    for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        if (!fast[isa][0]) continue;
        printf("     %-6s delta_net: worst relative error %.1e\n", cpu_isa_name((cpu_isa)isa),
               worst[isa]);
        for (int th = 0; th < 3; th++)
            fast[isa][th]->ops->destroy(fast[isa][th]);
    }
    ref->ops->destroy(ref);
}

/* ssm_conv over positions [t0, t0 + n) of x ([.][C] at a row stride of C + 3, a view as
 * the model's) into out (stride C + 1), w [C][K]. */
static void conv_call(al_backend *be, const float *x, int c, int k, int t0, int n,
                      const float *w, float *state, bool fresh, float *out) {
    al_tensor xt = {.type = AL_TYPE_F32, .ne = {c, n}, .data = (float *)x,
                    .offset = (uint64_t)t0 * (c + 3) * 4, .row_bytes = (uint64_t)(c + 3) * 4};
    al_tensor wt = test_f32((float *)w, k, c), st = test_f32(state, c, k - 1);
    al_tensor ot = {.type = AL_TYPE_F32, .ne = {c, n}, .data = out,
                    .row_bytes = (uint64_t)(c + 1) * 4};
    be->ops->ssm_conv(be, &xt, &wt, &st, fresh, &ot);
}

/* A fresh call (the state NaN: not to be read) and one carrying its state on: outputs
 * [2][n][C + 1], states [2][K - 1][C]. */
static void conv_two(al_backend *be, const float *x, int c, int k, int n, const float *w,
                     float *state, float *out) {
    const int64_t ns = (int64_t)(k - 1) * c, no = (int64_t)n * (c + 1);
    for (int64_t i = 0; i < ns; i++)
        state[i] = NAN;
    memset(out, 0, (size_t)(2 * no) * 4);
    conv_call(be, x, c, k, 0, n, w, state, true, out);
    memcpy(state + ns, state, (size_t)ns * 4);
    conv_call(be, x, c, k, 0, n, w, state + ns, false, out + no);
}

/* The two calls position by position must give the batch's bits. */
static bool conv_by_token(al_backend *be, const float *x, int c, int k, int n, const float *w,
                          const float *state, const float *out) {
    const int64_t ns = (int64_t)(k - 1) * c, no = (int64_t)n * (c + 1);
    float *s = malloc((size_t)(ns + 1) * 4), *o = calloc((size_t)(2 * no), 4);
    for (int64_t i = 0; i < ns; i++)
        s[i] = NAN;
    for (int pass = 0; pass < 2; pass++)
        for (int t = 0; t < n; t++)
            conv_call(be, x, c, k, t, 1, w, s, pass == 0 && t == 0, o + (pass * n + t) * (c + 1));
    const bool same = !memcmp(s, state + ns, (size_t)ns * 4) && !memcmp(o, out, (size_t)(2 * no) * 4);
    free(s), free(o);
    return same;
}

static void test_ssm_conv(void) {
    static const int chans[] = {5, 16, 37, 300, 8200}, taps[] = {2, 4, 5}, ns[] = {1, 2, 3, 37, 130};
    al_backend *ref = backend(CPU_ISA_REF, 1, 4096, 64);
    for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) continue;
        al_backend *f1 = backend((cpu_isa)isa, 1, 4096, 64), *f3 = backend((cpu_isa)isa, 3, 4096, 64);
        double worst = 0;
        for (int ci = 0; ci < 5; ci++)
            for (int ki = 0; ki < 3; ki++)
                for (int ni = 0; ni < 5; ni++) {
                    const int c = chans[ci], k = taps[ki], n = ns[ni];
                    if ((int64_t)c * n > 300000) continue;
                    const int64_t ns2 = 2 * (int64_t)(k - 1) * c, no2 = 2 * (int64_t)n * (c + 1);
                    float *x = test_floats((int64_t)n * (c + 3), 3.0f), *w = test_floats((int64_t)c * k, 1.0f);
                    float *rs = malloc((size_t)ns2 * 4), *ro = malloc((size_t)no2 * 4);
                    float *s1 = malloc((size_t)ns2 * 4), *o1 = malloc((size_t)no2 * 4);
                    float *s3 = malloc((size_t)ns2 * 4), *o3 = malloc((size_t)no2 * 4);
                    conv_two(ref, x, c, k, n, w, rs, ro);
                    conv_two(f1, x, c, k, n, w, s1, o1);
                    conv_two(f3, x, c, k, n, w, s3, o3);
                    const double e = fmax(rel_err(s1, rs, ns2), rel_err(o1, ro, no2));
                    if (e > worst) worst = e;
                    CHECK_MSG(e <= 1e-5, "%s: %d channels, %d taps, n %d: %.1e relative",
                              cpu_isa_name((cpu_isa)isa), c, k, n, e);
                    CHECK_MSG(!memcmp(s1, s3, (size_t)ns2 * 4) && !memcmp(o1, o3, (size_t)no2 * 4),
                              "%s: %d channels, n %d: 3 threads differ from 1",
                              cpu_isa_name((cpu_isa)isa), c, n);
                    CHECK_MSG(conv_by_token(f3, x, c, k, n, w, s1, o1),
                              "%s: %d channels, %d taps, n %d: token by token differs from the batch",
                              cpu_isa_name((cpu_isa)isa), c, k, n);
                    free(x), free(w), free(rs), free(ro), free(s1), free(o1), free(s3), free(o3);
                }
        printf("     %-6s ssm_conv: worst relative error %.1e\n", cpu_isa_name((cpu_isa)isa), worst);
        f1->ops->destroy(f1), f3->ops->destroy(f3);
    }
    ref->ops->destroy(ref);
}

/* sigmoid_mul on views of heads, as the gated attention's: x heads of hd at a stride of
 * hd + 1 (the float between them must stay), g beside the query in [q | gate] rows. */
static void test_sigmoid_mul(void) {
    static const int shapes[][3] = {{1, 16, 256}, {3, 4, 64}, {5, 3, 7}, {2, 2, 40}, {37, 2, 128}};
    al_backend *ref = backend(CPU_ISA_REF, 1, 4096, 64);
    for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) continue;
        al_backend *be = backend((cpu_isa)isa, 3, 4096, 64);
        double worst = 0;
        for (int i = 0; i < 5; i++) {
            const int n = shapes[i][0], nh = shapes[i][1], hd = shapes[i][2];
            const int64_t nx = (int64_t)n * nh * (hd + 1);
            float *x = test_floats(nx, 4.0f), *g = test_floats((int64_t)n * nh * 2 * hd, 20.0f);
            float *a = malloc((size_t)nx * 4), *b = malloc((size_t)nx * 4);
            memcpy(a, x, (size_t)nx * 4), memcpy(b, x, (size_t)nx * 4);
            al_tensor gt = {.type = AL_TYPE_F32, .ne = {hd, (int64_t)n * nh}, .data = g,
                            .offset = (uint64_t)hd * 4, .row_bytes = (uint64_t)2 * hd * 4};
            al_tensor at = {.type = AL_TYPE_F32, .ne = {hd, (int64_t)n * nh}, .data = a,
                            .row_bytes = (uint64_t)(hd + 1) * 4};
            al_tensor bt = at;
            bt.data = b;
            be->ops->sigmoid_mul(be, &at, &gt);
            ref->ops->sigmoid_mul(ref, &bt, &gt);
            const double e = rel_err(a, b, nx);
            if (e > worst) worst = e;
            CHECK_MSG(e <= 1e-6, "%s: %d x %d heads of %d: %.1e relative", cpu_isa_name((cpu_isa)isa),
                      n, nh, hd, e);
            bool kept = true;
            for (int64_t r = 0; r < (int64_t)n * nh; r++)
                kept = kept && a[r * (hd + 1) + hd] == x[r * (hd + 1) + hd];
            CHECK_MSG(kept, "%s: sigmoid_mul wrote outside the view", cpu_isa_name((cpu_isa)isa));
            free(x), free(g), free(a), free(b);
        }
        printf("     %-6s sigmoid_mul: worst relative error %.1e\n", cpu_isa_name((cpu_isa)isa), worst);
        be->ops->destroy(be);
    }
    ref->ops->destroy(ref);
}

int main(void) {
    TEST_RUN(test_sigmoid_mul);
    TEST_RUN(test_ssm_conv);
    TEST_RUN(test_delta_net);
    return test_finish();
}
