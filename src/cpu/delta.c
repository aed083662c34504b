/* delta.c: the fast recurrent ops of gated delta-net layers (backend.h: delta_net,
 * ssm_conv), which spread their work over the pool and call the kernels of one ISA
 * (cpu_kernels.delta, .conv: delta_avx512.c, delta_avx2.c, and the portable ones here).
 *
 * delta_net. A value head's state (head_dim x head_dim floats, 64 KiB at 128) stays in
 * the cache of the thread that owns it while that thread runs every position of the
 * batch through it; the threads split the heads, and each head's rows where there are
 * fewer heads than threads. Every row's arithmetic depends only on that row and the
 * position, so the bits do not depend on the batch or the thread count.
 *
 * ssm_conv. The threads split the channels in blocks of 16 (a whole vector of either
 * ISA), each block running over every position.
 *
 * The kernels sum in float with several accumulators where the reference sums in
 * double: tests/test_delta.c holds them to it within 1e-5 relative.
 */
#include <string.h>

#include "mm.h"
#include "ops.h"
#include "util.h"

/* ---- the portable kernels ------------------------------------------------------------ */

/* x / sqrt(sum x^2 + eps) times scale, the sum in double as the reference's. */
static void l2_norm_scalar(const float *x, int n, float eps, float scale, float *out) {
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    const float f = (float)(1.0 / sqrt(ss + eps)) * scale;
    for (int i = 0; i < n; i++)
        out[i] = x[i] * f;
}

/* The dot product of two rows in four running sums. */
static float dot4(const float *a, const float *b, int n) {
    float s[4] = {0, 0, 0, 0};
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++)
            s[j] += a[i + j] * b[i + j];
    for (; i < n; i++)
        s[0] += a[i] * b[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

void cpu_delta_scalar(const cpu_delta_args *a) {
    const int d = a->d;
    float *q = a->scratch, *k = q + d;
    for (int64_t t = 0; t < a->n; t++) {
        l2_norm_scalar(a->q + t * a->ld, d, a->eps, 1.0f / sqrtf((float)d), q);
        l2_norm_scalar(a->k + t * a->ld, d, a->eps, 1.0f, k);
        float decay, b;
        cpu_delta_gates(a, t, &decay, &b);
        const float *v = a->v + t * a->ld;
        float *o = a->out + t * a->ldo;
        for (int r = a->r0; r < a->r1; r++) {
            float *sr = a->S + (int64_t)r * d;
            for (int i = 0; i < d; i++)
                sr[i] *= decay;
            const float delta = (v[r] - dot4(sr, k, d)) * b;
            for (int i = 0; i < d; i++)
                sr[i] += delta * k[i];
            o[r] = dot4(sr, q, d);
        }
    }
}

void cpu_conv_scalar(const cpu_conv_args *a) {
    const int k1 = a->k - 1;
    float tail[CPU_CONV_MAX_K];
    for (int64_t c = a->c0; c < a->c1; c++) {
        const float *wc = a->w + c * a->ldw;
        for (int64_t t = 0; t < a->n; t++) {
            float sum = 0;
            for (int j = 0; j < a->k; j++) {
                const float *in = cpu_conv_input(a, t + j);
                if (in) sum += wc[j] * in[c];
            }
            a->out[t * a->ldo + c] = sum / (1.0f + expf(-sum));
        }
        /* read before written: a batch shorter than K - 1 still needs the old rows */
        for (int j = 0; j < k1; j++) {
            const float *in = cpu_conv_input(a, a->n + j);
            tail[j] = in ? in[c] : 0.0f;
        }
        for (int j = 0; j < k1; j++)
            a->state[j * a->lds + c] = tail[j];
    }
}

void cpu_sigmoid_mul_scalar(float *x, const float *g, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] / (1.0f + expf(-g[i]));
}

/* ---- delta_net ------------------------------------------------------------------------- */

typedef struct delta_job {
    cpu_backend *cb;
    const al_tensor *qkv, *alpha, *beta, *dt_bias, *a, *out;
    al_tensor *state;
    bool fresh;
    const al_delta_shape *s;
    int split; /* ranges of rows per head: more than 1 where threads outnumber heads */
} delta_job;

/* Work item i: rows range i % split of value head i / split. */
static void delta_part(void *arg, int ith, int nth) {
    const delta_job *j = arg;
    const al_delta_shape *s = j->s;
    const int d = s->head_dim, hk = s->n_k_heads, split = j->split;
    const int64_t n_items = (int64_t)s->n_v_heads * split;
    const float *row0 = cpu_f32_row(j->qkv, 0);
    cpu_delta_args a = {.d = d,
                        .n = j->qkv->ne[1],
                        .ld = (int64_t)(j->qkv->row_bytes / sizeof(float)),
                        .ld_alpha = (int64_t)(j->alpha->row_bytes / sizeof(float)),
                        .ld_beta = (int64_t)(j->beta->row_bytes / sizeof(float)),
                        .eps = s->eps,
                        .ldo = (int64_t)(j->out->row_bytes / sizeof(float)),
                        .scratch = (float *)mm_tls(j->cb, ith)};
    for (int64_t i = n_items * ith / nth; i < n_items * (ith + 1) / nth; i++) {
        const int h = (int)(i / split), part = (int)(i % split);
        const int kh = s->grouped ? h / (s->n_v_heads / hk) : h % hk;
        a.S = cpu_f32_row(j->state, h);
        a.r0 = d * part / split;
        a.r1 = d * (part + 1) / split;
        if (j->fresh) memset(a.S + (int64_t)a.r0 * d, 0, (size_t)(a.r1 - a.r0) * d * sizeof(float));
        a.q = row0 + (int64_t)kh * d;
        a.k = row0 + (int64_t)(hk + kh) * d;
        a.v = row0 + (int64_t)(2 * hk + h) * d;
        a.alpha = cpu_f32_row(j->alpha, 0) + h;
        a.beta = cpu_f32_row(j->beta, 0) + h;
        a.dt_bias = cpu_f32_row(j->dt_bias, 0)[h];
        a.a = cpu_f32_row(j->a, 0)[h];
        a.out = cpu_f32_row(j->out, 0) + (int64_t)h * d;
        j->cb->k->delta(&a);
    }
}

void fast_delta_net(al_backend *be, const al_tensor *qkv, const al_tensor *alpha,
                    const al_tensor *beta, const al_tensor *dt_bias, const al_tensor *a,
                    al_tensor *state, bool fresh, const al_delta_shape *s, al_tensor *out) {
    cpu_backend *cb = (cpu_backend *)be;
    AL_ASSERT(s->head_dim <= CPU_DELTA_MAX_DIM && s->n_v_heads % s->n_k_heads == 0);
    delta_job j = {.cb = cb, .qkv = qkv, .alpha = alpha, .beta = beta, .dt_bias = dt_bias,
                   .a = a, .out = out, .state = state, .fresh = fresh, .s = s, .split = 1};
    pthread_mutex_lock(&cb->lock);
    AL_ASSERT((uint64_t)s->head_dim * 2 * sizeof(float) <= cb->tls_bytes);
    if (cb->n_threads > s->n_v_heads) {
        j.split = (cb->n_threads + s->n_v_heads - 1) / s->n_v_heads;
        if (j.split > s->head_dim) j.split = s->head_dim;
    }
    pool_run(cb->pool, delta_part, &j);
    pthread_mutex_unlock(&cb->lock);
}

/* ---- ssm_conv -------------------------------------------------------------------------- */

enum { CONV_BLOCK = 16 }; /* channels per take: a vector of either ISA */

typedef struct conv_job {
    const cpu_kernels *k;
    cpu_conv_args a;
} conv_job;

static void conv_part(void *arg, int ith, int nth) {
    const conv_job *j = arg;
    const int64_t n_ch = j->a.c1, nb = (n_ch + CONV_BLOCK - 1) / CONV_BLOCK;
    cpu_conv_args a = j->a;
    a.c0 = nb * ith / nth * CONV_BLOCK;
    a.c1 = mm_min(nb * (ith + 1) / nth * CONV_BLOCK, n_ch);
    if (a.c0 < a.c1) j->k->conv(&a);
}

void fast_ssm_conv(al_backend *be, const al_tensor *x, const al_tensor *w, al_tensor *state,
                   bool fresh, al_tensor *out) {
    cpu_backend *cb = (cpu_backend *)be;
    const int64_t n_ch = x->ne[0], n = x->ne[1], k = w->ne[0];
    if (k < 1 || k > CPU_CONV_MAX_K) {
        ref_ssm_conv(be, x, w, state, fresh, out);
        return;
    }
    AL_ASSERT(w->ne[1] == n_ch && state->ne[1] == k - 1 && state->ne[0] == n_ch);
    conv_job j = {.k = cb->k,
                  .a = {.x = cpu_f32_row(x, 0),
                        .ldx = (int64_t)(x->row_bytes / sizeof(float)),
                        .state = cpu_f32_row(state, 0),
                        .lds = (int64_t)(state->row_bytes / sizeof(float)),
                        .w = cpu_f32_row(w, 0),
                        .ldw = (int64_t)(w->row_bytes / sizeof(float)),
                        .out = cpu_f32_row(out, 0),
                        .ldo = (int64_t)(out->row_bytes / sizeof(float)),
                        .n = n, .c0 = 0, .c1 = n_ch, .k = (int)k, .fresh = fresh}};
    pthread_mutex_lock(&cb->lock);
    /* a decoded token's convolution is a few microseconds: not worth waking the pool */
    if (n * n_ch < 16384)
        conv_part(&j, 0, 1);
    else
        pool_run(cb->pool, conv_part, &j);
    pthread_mutex_unlock(&cb->lock);
}
