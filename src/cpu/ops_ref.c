/* ops_ref.c: the reference ops of the CPU backend.
 *
 * Every op here is written for clarity first: it is the oracle that the fast kernels
 * (kernels_*.c) and the GPU shaders are compared with. Work is still split over the
 * thread pool where it is large (matmul over output rows, attention over (token, head)
 * pairs), so that the reference path is usable on real models (cpu.isa "ref").
 *
 * Weights are read in place from the file mapping; a matmul dequantizes one weight
 * row at a time into a per-thread buffer and dots it with every token of the batch,
 * so each weight byte is read once per batch.
 */
#include <math.h>
#include <string.h>

#include "ops.h"
#include "format/quant.h"
#include "format/quantize.h"
#include "util.h"

/* Makes sure every thread has n floats of workspace. Called with the lock held. */
bool ref_work_reserve(cpu_backend *cb, uint64_t n) {
    if (n <= cb->work_per_thread) return true;
    n = (n + 15) & ~(uint64_t)15; /* keep each thread's slice 64-byte aligned */
    uint64_t total;
    if (!al_mul_u64(n, (uint64_t)cb->n_threads * sizeof(float), &total)) return false;
    float *w = al_aligned_alloc(64, total);
    if (!w) return false;
    al_aligned_free(cb->work);
    cb->work = w;
    cb->work_per_thread = n;
    return true;
}

static float *work_for(cpu_backend *cb, int ith) {
    return cb->work + (uint64_t)ith * cb->work_per_thread;
}

/* ---- elementwise and per-row ops ------------------------------------------------ */

void ref_get_rows(al_backend *be, const al_tensor *table, const int32_t *ids, int n,
                  al_tensor *out) {
    (void)be;
    AL_ASSERT(table->layout == AL_LAYOUT_ROWS);
    for (int i = 0; i < n; i++)
        quant_dequantize(table->type, cpu_raw_row(table, ids[i]), cpu_f32_row(out, i),
                         table->ne[0]);
}

void ref_rms_norm(al_backend *be, const al_tensor *x, const al_tensor *w, float eps,
                  al_tensor *out) {
    (void)be;
    int64_t n = x->ne[0];
    const float *wv = cpu_f32_row(w, 0);
    for (int64_t r = 0; r < x->ne[1]; r++) {
        const float *xr = cpu_f32_row(x, r);
        float *o = cpu_f32_row(out, r);
        double ss = 0;
        for (int64_t i = 0; i < n; i++)
            ss += (double)xr[i] * xr[i];
        float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
        for (int64_t i = 0; i < n; i++)
            o[i] = xr[i] * scale * wv[i];
    }
}

void ref_silu_mul(al_backend *be, al_tensor *g, const al_tensor *u) {
    (void)be;
    for (int64_t r = 0; r < g->ne[1]; r++) {
        float *gr = cpu_f32_row(g, r);
        const float *ur = cpu_f32_row(u, r);
        for (int64_t i = 0; i < g->ne[0]; i++)
            gr[i] = gr[i] / (1.0f + expf(-gr[i])) * ur[i];
    }
}

/* GELU's tanh approximation as backend.h writes it, in double: 1 + tanh(z) cancels for
 * x below about -5, and double keeps what float would lose there. */
static double gelu_tanh(double x) {
    const double sqrt_2_over_pi = 0.79788456080286535588;
    return 0.5 * x * (1.0 + tanh(sqrt_2_over_pi * (x + 0.044715 * x * x * x)));
}

void ref_gelu_mul(al_backend *be, al_tensor *g, const al_tensor *u) {
    (void)be;
    for (int64_t r = 0; r < g->ne[1]; r++) {
        float *gr = cpu_f32_row(g, r);
        const float *ur = cpu_f32_row(u, r);
        for (int64_t i = 0; i < g->ne[0]; i++)
            gr[i] = (float)(gelu_tanh(gr[i]) * ur[i]);
    }
}

/* gpt-oss's clamped SwiGLU as backend.h writes it, in double: the gate is clamped
 * above only, the linear input on both sides. Comparisons, not fmin/fmax, so that a
 * NaN input gives NaN as the fast kernels do. */
static double swiglu_oai(double g, double u, double alpha, double limit) {
    const double x = g > limit ? limit : g;
    const double y = u > limit ? limit : u < -limit ? -limit : u;
    return x / (1.0 + exp(-alpha * x)) * (y + 1.0);
}

void ref_swiglu_oai(al_backend *be, al_tensor *g, const al_tensor *u, float alpha, float limit) {
    (void)be;
    for (int64_t r = 0; r < g->ne[1]; r++) {
        float *gr = cpu_f32_row(g, r);
        const float *ur = cpu_f32_row(u, r);
        for (int64_t i = 0; i < g->ne[0]; i++)
            gr[i] = (float)swiglu_oai(gr[i], ur[i], alpha, limit);
    }
}

void ref_scale(al_backend *be, al_tensor *x, float s) {
    (void)be;
    for (int64_t r = 0; r < x->ne[1]; r++) {
        float *xr = cpu_f32_row(x, r);
        for (int64_t i = 0; i < x->ne[0]; i++)
            xr[i] *= s;
    }
}

void ref_add(al_backend *be, al_tensor *x, const al_tensor *y) {
    (void)be;
    for (int64_t r = 0; r < x->ne[1]; r++) {
        float *xr = cpu_f32_row(x, r);
        const float *yr = cpu_f32_row(y, r);
        for (int64_t i = 0; i < x->ne[0]; i++)
            xr[i] += yr[i];
    }
}

void ref_copy(al_backend *be, const al_tensor *src, al_tensor *dst) {
    (void)be;
    AL_ASSERT(src->ne[0] == dst->ne[0] && src->ne[1] == dst->ne[1]);
    for (int64_t r = 0; r < src->ne[1]; r++)
        memmove(cpu_f32_row(dst, r), cpu_f32_row(src, r), (size_t)src->ne[0] * sizeof(float));
}

void cpu_add_scaled(float *x, const float *y, float w, int64_t n) {
    for (int64_t c = 0; c < n; c++) x[c] += w * y[c];
}

void ref_add_rows(al_backend *be, al_tensor *x, const al_tensor *y, const int32_t *ids,
                  const float *w, int n) {
    (void)be;
    for (int i = 0; i < n; i++)
        cpu_add_scaled(cpu_f32_row(x, ids[i]), cpu_f32_row(y, i), w[i], x->ne[0]);
}

/* ---- rope ---------------------------------------------------------------------- */

void ref_rope(al_backend *be, al_tensor *x, int n_head, int head_dim, int pos0, const al_rope *rp) {
    (void)be;
    int half = rp->n_rot / 2;
    for (int64_t t = 0; t < x->ne[1]; t++) {
        double pos = (double)(pos0 + t) * rp->freq_scale;
        float *row = cpu_f32_row(x, t);
        for (int i = 0; i < half; i++) {
            double theta = pos * pow(rp->freq_base, -2.0 * i / rp->n_rot);
            if (rp->freq_factors) theta /= rp->freq_factors[i];
            float c = (float)cos(theta), s = (float)sin(theta);
            /* normal rope rotates adjacent pairs; neox rotates the two halves */
            int a = rp->neox ? i : 2 * i;
            int b = rp->neox ? i + half : 2 * i + 1;
            for (int h = 0; h < n_head; h++) {
                float *hd = row + (int64_t)h * head_dim;
                float x0 = hd[a], x1 = hd[b];
                hd[a] = x0 * c - x1 * s;
                hd[b] = x0 * s + x1 * c;
            }
        }
    }
}

bool ref_rope_qk(al_backend *be, al_tensor *q, int n_head, al_tensor *k, int n_head_kv,
                 int head_dim, int pos0, const al_rope *rope) {
    ref_rope(be, q, n_head, head_dim, pos0, rope);
    ref_rope(be, k, n_head_kv, head_dim, pos0, rope);
    return true;
}

/* ---- matmul -------------------------------------------------------------------- */

/* What a matmul job does with each product s = x[t] . w[o] (+ bias[o]): write it, add
 * it to out (matmul_add), or, with the product of wu, apply a GLU (matmul_glu). */
typedef enum matmul_mode { MM_WRITE, MM_ADD, MM_GLU_SILU, MM_GLU_GELU } matmul_mode;

typedef struct matmul_job {
    cpu_backend *cb;
    const al_tensor *x, *w, *bias;
    const al_tensor *wu; /* MM_GLU_*: the up projection, walked after w */
    matmul_mode mode;
    al_tensor *out;
} matmul_job;

static float dot_f32(const float *a, const float *b, int64_t n) {
    /* four partial sums: a fixed order, so the result does not depend on threads */
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++)
        s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

/* Row o of w as floats: in place for f32, else dequantized into buf. */
static const float *weight_row(const al_tensor *w, int64_t o, float *buf) {
    if (w->type == AL_TYPE_F32) return (const float *)cpu_raw_row(w, o);
    quant_dequantize(w->type, cpu_raw_row(w, o), buf, w->ne[0]);
    return buf;
}

static void matmul_part(void *arg, int ith, int nth) {
    matmul_job *j = arg;
    int64_t n_in = j->w->ne[0], n_out = j->w->ne[1], n_tok = j->x->ne[1];
    int64_t per = (n_out + nth - 1) / nth;
    int64_t o0 = per * ith, o1 = o0 + per < n_out ? o0 + per : n_out;
    float *wrow = work_for(j->cb, ith);
    const float *bias = j->bias ? cpu_f32_row(j->bias, 0) : NULL;
    for (int64_t o = o0; o < o1; o++) {
        const float *wv = weight_row(j->w, o, wrow);
        for (int64_t t = 0; t < n_tok; t++) {
            float s = dot_f32(cpu_f32_row(j->x, t), wv, n_in);
            if (bias) s += bias[o];
            float *d = &cpu_f32_row(j->out, t)[o];
            *d = j->mode == MM_ADD ? *d + s : s;
        }
        if (j->mode != MM_GLU_SILU && j->mode != MM_GLU_GELU) continue;
        /* out holds the gate's products; the up row reuses the one work row */
        const float *uv = weight_row(j->wu, o, wrow);
        for (int64_t t = 0; t < n_tok; t++) {
            float *d = &cpu_f32_row(j->out, t)[o], g = *d;
            float u = dot_f32(cpu_f32_row(j->x, t), uv, n_in);
            /* the expressions of ref_silu_mul and ref_gelu_mul */
            *d = j->mode == MM_GLU_GELU ? (float)(gelu_tanh(g) * u) : g / (1.0f + expf(-g)) * u;
        }
    }
}

static void run_matmul(al_backend *be, matmul_job *j) {
    cpu_backend *cb = (cpu_backend *)be;
    const al_tensor *x = j->x, *w = j->w, *out = j->out;
    AL_ASSERT(x->ne[0] == w->ne[0] && out->ne[0] == w->ne[1] && out->ne[1] == x->ne[1]);
    AL_ASSERT(w->layout == AL_LAYOUT_ROWS); /* weight_pack packs only for the fast kernels */
    pthread_mutex_lock(&cb->lock);
    AL_ASSERT(cb->work_per_thread >= (uint64_t)w->ne[0]);
    j->cb = cb;
    pool_run(cb->pool, matmul_part, j);
    pthread_mutex_unlock(&cb->lock);
}

void ref_matmul(al_backend *be, const al_tensor *x, const al_tensor *w, const al_tensor *bias,
                al_tensor *out) {
    matmul_job j = {.x = x, .w = w, .bias = bias, .mode = MM_WRITE, .out = out};
    run_matmul(be, &j);
}

bool ref_matmul_add(al_backend *be, const al_tensor *x, const al_tensor *w,
                    const al_tensor *bias, al_tensor *out) {
    matmul_job j = {.x = x, .w = w, .bias = bias, .mode = MM_ADD, .out = out};
    run_matmul(be, &j);
    return true;
}

bool ref_matmul_glu(al_backend *be, const al_tensor *x, const al_tensor *wg,
                    const al_tensor *wu, al_glu act, al_tensor *out) {
    AL_ASSERT(wg->type == wu->type && wg->ne[0] == wu->ne[0] && wg->ne[1] == wu->ne[1]);
    matmul_job j = {.x = x, .w = wg, .wu = wu, .out = out,
                    .mode = act == AL_GLU_GELU ? MM_GLU_GELU : MM_GLU_SILU};
    run_matmul(be, &j);
    return true;
}

/* ---- mixture of experts ---------------------------------------------------------- */

/* The index in s[0..k) of the smallest expert above `after`, or -1. */
static int next_expert(const int32_t *s, int k, int32_t after) {
    int best = -1;
    for (int i = 0; i < k; i++)
        if (s[i] > after && (best < 0 || s[i] < s[best])) best = i;
    return best;
}

/* backend.h's definition of moe_ffn, token by token: each of a token's experts in
 * ascending order runs on that row alone. Every output of a matmul, every element of
 * the activation and of the add depends on its own row only, so this gives the bits
 * of the plain ops, which run expert by expert over the rows gathered for each. */
bool ref_moe_ffn(al_backend *be, const al_tensor *xb, const al_moe *moe, al_tensor *x) {
    const int k = moe->n_used, n_ff = moe->n_ff;
    const int64_t n_embd = xb->ne[0];
    al_tensor he = al_tensor_rows(moe->he, 0, 1), he2 = al_tensor_rows(moe->he2, 0, 1);
    al_tensor ye = al_tensor_rows(moe->ye, 0, 1);
    for (int64_t t = 0; t < xb->ne[1]; t++) {
        const al_tensor xt = al_tensor_rows(xb, t, 1);
        const int32_t *sel = moe->sel + t * k;
        for (int i = next_expert(sel, k, -1); i >= 0; i = next_expert(sel, k, sel[i])) {
            const int e = sel[i];
            const al_tensor gate = al_tensor_rows(moe->gate, (int64_t)e * n_ff, n_ff);
            const al_tensor up = al_tensor_rows(moe->up, (int64_t)e * n_ff, n_ff);
            const al_tensor down = al_tensor_rows(moe->down, (int64_t)e * n_embd, n_embd);
            al_tensor gb, ub, db;
            ref_matmul(be, &xt, &gate, al_tensor_row_or_null(moe->gate_b, e, &gb), &he);
            ref_matmul(be, &xt, &up, al_tensor_row_or_null(moe->up_b, e, &ub), &he2);
            if (moe->act == AL_MOE_SWIGLU_OAI)
                ref_swiglu_oai(be, &he, &he2, moe->alpha, moe->limit);
            else if (moe->act == AL_MOE_GELU)
                ref_gelu_mul(be, &he, &he2);
            else
                ref_silu_mul(be, &he, &he2);
            ref_matmul(be, &he, &down, al_tensor_row_or_null(moe->down_b, e, &db), &ye);
            cpu_add_scaled(cpu_f32_row(x, t), cpu_f32_row(&ye, 0), moe->sel_w[t * k + i], n_embd);
        }
    }
    return true;
}

/* ---- attention ----------------------------------------------------------------- */

void cpu_kv_rows_ref(uint32_t type, const uint8_t *src, float *dst, int n) {
    quant_dequantize(type, src, dst, n);
}

void cpu_rotate_heads(const al_tensor *x, int t0, int t1, int n_heads, int head_dim) {
    for (int t = t0; t < t1; t++)
        for (int h = 0; h < n_heads; h++) al_hadamard_head(cpu_f32_row(x, t) + (int64_t)h * head_dim, head_dim);
}

/* Row t of x (n_head_kv heads) into cache row `row` of its type: copied, or each head
 * rotated (AL_LAYOUT_HADAMARD) and quantized on its own, so that a head's bytes lie at
 * head * (its bytes) of the row. */
static void write_kv_row(const al_tensor *x, int t, al_tensor *cache, int64_t row,
                         const al_attn_shape *s) {
    const int hd = s->head_dim;
    if (cache->type == AL_TYPE_F32) {
        memcpy(cpu_f32_row(cache, row), cpu_f32_row(x, t), (size_t)s->n_head_kv * hd * sizeof(float));
        return;
    }
    const uint64_t head_bytes = quant_row_bytes(cache->type, hd);
    uint8_t *dst = (uint8_t *)cache->data + cache->offset + row * cache->row_bytes;
    float buf[AL_KV_HEAD_MAX];
    AL_ASSERT(hd <= AL_KV_HEAD_MAX && head_bytes * s->n_head_kv == cache->row_bytes);
    for (int h = 0; h < s->n_head_kv; h++) {
        memcpy(buf, cpu_f32_row(x, t) + (int64_t)h * hd, (size_t)hd * sizeof(float));
        if (cache->layout == AL_LAYOUT_HADAMARD)
            al_hadamard_head(buf, hd);
        al_status st = quant_quantize_row(cache->type, buf, dst + h * head_bytes, hd);
        AL_ASSERT(st == AL_OK); /* context.c allows only the types it quantizes */
    }
}

void cpu_attn_write_kv(const al_tensor *k, const al_tensor *v, al_tensor *k_cache,
                       al_tensor *v_cache, const al_attn_shape *s) {
    const int64_t cap = k_cache->ne[1];
    /* a ring must keep the oldest position the batch's first query sees (backend.h) */
    AL_ASSERT(s->n_past + s->n_tokens <= cap ||
              (s->window > 0 && (int64_t)s->window - 1 + s->n_tokens <= cap));
    AL_ASSERT(v_cache->ne[1] == cap && s->n_head % s->n_head_kv == 0);
    for (int t = 0; t < s->n_tokens; t++) cpu_attn_write_kv_row(k, v, k_cache, v_cache, s, t);
}

void cpu_attn_write_kv_row(const al_tensor *k, const al_tensor *v, al_tensor *k_cache,
                           al_tensor *v_cache, const al_attn_shape *s, int t) {
    const int64_t row = ((int64_t)s->n_past + t) % k_cache->ne[1];
    write_kv_row(k, t, k_cache, row, s);
    write_kv_row(v, t, v_cache, row, s);
}

float cpu_attn_scale(const al_attn_shape *s) {
    return s->scale != 0.0f ? s->scale : 1.0f / sqrtf((float)s->head_dim);
}

typedef struct attn_job {
    cpu_backend *cb;
    const al_tensor *q, *k_cache, *v_cache;
    const al_attn_shape *s;
    al_tensor *out;
} attn_job;

/* One query row of one head against every position it sees: 0 .. p, or the last
 * `window` of them; position j lies in cache row j % cap. The scores of one query are
 * the only n_ctx-sized buffer: no n_ctx x n_ctx matrix exists. A sink is a score with
 * no value: it takes part in the maximum and adds e^(sink - max) to the denominator. */
/* Kv head kvh of cache row r as floats: in place where the cache is f32, else
 * converted into buf. */
static const float *cache_head(const al_tensor *cache, int64_t r, int kvh, int hd, float *buf) {
    if (cache->type == AL_TYPE_F32) return cpu_f32_row(cache, r) + (int64_t)kvh * hd;
    const uint64_t head_bytes = quant_row_bytes(cache->type, hd);
    quant_dequantize(cache->type,
                     (const uint8_t *)cache->data + cache->offset + r * cache->row_bytes +
                         kvh * head_bytes, buf, hd);
    return buf;
}

static void attend_one(const attn_job *j, int64_t t, int h, float *scores) {
    const al_attn_shape *s = j->s;
    const int kvh = h / (s->n_head / s->n_head_kv);
    const int64_t cap = j->k_cache->ne[1], p = s->n_past + t;
    const int64_t first = s->window > 0 && p - s->window + 1 > 0 ? p - s->window + 1 : 0;
    const int64_t n_vis = p - first + 1;
    const float *q = cpu_f32_row(j->q, t) + (int64_t)h * s->head_dim;
    const float scale = cpu_attn_scale(s);
    const float sink = s->sinks ? cpu_f32_row(s->sinks, 0)[h] : -INFINITY;
    float mx = sink, buf[AL_KV_HEAD_MAX];
    for (int64_t i = 0; i < n_vis; i++) {
        const float *k = cache_head(j->k_cache, (first + i) % cap, kvh, s->head_dim, buf);
        scores[i] = dot_f32(q, k, s->head_dim) * scale;
        if (scores[i] > mx) mx = scores[i];
    }
    double sum = s->sinks ? expf(sink - mx) : 0.0;
    for (int64_t i = 0; i < n_vis; i++) {
        scores[i] = expf(scores[i] - mx);
        sum += scores[i];
    }
    float inv = (float)(1.0 / sum);
    float *o = cpu_f32_row(j->out, t) + (int64_t)h * s->head_dim;
    memset(o, 0, (size_t)s->head_dim * sizeof(float));
    for (int64_t i = 0; i < n_vis; i++) {
        const float *v = cache_head(j->v_cache, (first + i) % cap, kvh, s->head_dim, buf);
        float a = scores[i] * inv;
        for (int d = 0; d < s->head_dim; d++)
            o[d] += a * v[d];
    }
}

static void attn_part(void *arg, int ith, int nth) {
    attn_job *j = arg;
    int64_t n_items = (int64_t)j->s->n_tokens * j->s->n_head;
    float *scores = work_for(j->cb, ith);
    for (int64_t it = ith; it < n_items; it += nth)
        attend_one(j, it / j->s->n_head, (int)(it % j->s->n_head), scores);
}

void ref_attention(al_backend *be, const al_tensor *q, const al_tensor *k, const al_tensor *v,
                   al_tensor *k_cache, al_tensor *v_cache, const al_attn_shape *s, al_tensor *out) {
    cpu_backend *cb = (cpu_backend *)be;
    if (!s->kv_written) cpu_attn_write_kv(k, v, k_cache, v_cache, s);
    if (k_cache->layout == AL_LAYOUT_HADAMARD) /* q.k = (H q).(H k) */
        cpu_rotate_heads(q, 0, s->n_tokens, s->n_head, s->head_dim);
    /* a query sees at most window positions, or all up to the batch's last */
    int64_t max_vis = (int64_t)s->n_past + s->n_tokens;
    if (s->window > 0 && s->window < max_vis) max_vis = s->window;
    pthread_mutex_lock(&cb->lock);
    AL_ASSERT(cb->work_per_thread >= (uint64_t)max_vis);
    attn_job j = {.cb = cb, .q = q, .k_cache = k_cache, .v_cache = v_cache, .s = s, .out = out};
    pool_run(cb->pool, attn_part, &j);
    pthread_mutex_unlock(&cb->lock);
    if (v_cache->layout == AL_LAYOUT_HADAMARD) /* sum p H v = H sum p v */
        cpu_rotate_heads(out, 0, s->n_tokens, s->n_head, s->head_dim);
}

/* ---- the recurrent ops of gated delta-net layers (backend.h) -------------------------- */

void ref_sigmoid_mul(al_backend *be, al_tensor *x, const al_tensor *g) {
    (void)be;
    for (int64_t r = 0; r < x->ne[1]; r++) {
        float *xr = cpu_f32_row(x, r);
        const float *gr = cpu_f32_row(g, r);
        for (int64_t i = 0; i < x->ne[0]; i++)
            xr[i] = xr[i] / (1.0f + expf(-gr[i]));
    }
}

/* The state's K-1 rows followed by x's rows, as one sequence of inputs. */
static const float *conv_input(const al_tensor *x, const al_tensor *state, bool fresh,
                               int64_t k1, int64_t s, int64_t c) {
    if (s >= k1) return cpu_f32_row(x, s - k1) + c;
    return fresh ? NULL : cpu_f32_row(state, s) + c;
}

void ref_ssm_conv(al_backend *be, const al_tensor *x, const al_tensor *w, al_tensor *state,
                  bool fresh, al_tensor *out) {
    (void)be;
    const int64_t n_ch = x->ne[0], n = x->ne[1], k = w->ne[0], k1 = k - 1;
    AL_ASSERT(w->ne[1] == n_ch && state->ne[1] == k1 && state->ne[0] == n_ch);
    for (int64_t t = 0; t < n; t++) {
        float *o = cpu_f32_row(out, t);
        for (int64_t c = 0; c < n_ch; c++) {
            const float *wc = cpu_f32_row(w, c);
            float sum = 0;
            for (int64_t j = 0; j < k; j++) {
                const float *in = conv_input(x, state, fresh, k1, t + j, c);
                if (in) sum += wc[j] * *in;
            }
            o[c] = sum / (1.0f + expf(-sum));
        }
    }
    /* the last K-1 inputs, oldest first; rows of the old state may still be needed
     * for a batch shorter than K-1, so they are gathered before any is written */
    float tail[64];
    for (int64_t c = 0; c < n_ch; c++) {
        for (int64_t j = 0; j < k1; j++) {
            const float *in = conv_input(x, state, fresh, k1, n + j, c);
            tail[j] = in ? *in : 0.0f;
        }
        for (int64_t j = 0; j < k1; j++) cpu_f32_row(state, j)[c] = tail[j];
    }
}

/* x / sqrt(sum x^2 + eps) into out, times scale. */
static void l2_norm(const float *x, int n, float eps, float scale, float *out) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float f = (float)(1.0 / sqrt(ss + eps)) * scale;
    for (int i = 0; i < n; i++) out[i] = x[i] * f;
}

typedef struct delta_job {
    const al_tensor *qkv, *alpha, *beta, *dt_bias, *a, *out;
    al_tensor *state;
    bool fresh;
    const al_delta_shape *s;
} delta_job;

/* One value head over every position, one step at a time. */
static void delta_head(const delta_job *j, int h) {
    const al_delta_shape *s = j->s;
    const int d = s->head_dim, hk = s->n_k_heads;
    const int kh = s->grouped ? h / (s->n_v_heads / hk) : h % hk;
    float *S = cpu_f32_row(j->state, h);
    if (j->fresh) memset(S, 0, (size_t)d * d * sizeof *S);
    float q[CPU_DELTA_MAX_DIM], k[CPU_DELTA_MAX_DIM];
    const float dt = cpu_f32_row(j->dt_bias, 0)[h], ah = cpu_f32_row(j->a, 0)[h];
    for (int64_t t = 0; t < j->qkv->ne[1]; t++) {
        const float *row = cpu_f32_row(j->qkv, t);
        l2_norm(row + (int64_t)kh * d, d, s->eps, 1.0f / sqrtf((float)d), q);
        l2_norm(row + (int64_t)(hk + kh) * d, d, s->eps, 1.0f, k);
        const float *v = row + (int64_t)(2 * hk + h) * d;
        const float x = cpu_f32_row(j->alpha, t)[h] + dt;
        const float softplus = x > 20.0f ? x : log1pf(expf(x));
        const float decay = expf(softplus * ah);
        const float b = 1.0f / (1.0f + expf(-cpu_f32_row(j->beta, t)[h]));
        float *o = cpu_f32_row(j->out, t) + (int64_t)h * d;
        for (int r = 0; r < d; r++) { /* row r of S: value dimension r */
            float *sr = S + (int64_t)r * d;
            double sk = 0;
            for (int i = 0; i < d; i++) sk += (double)(sr[i] *= decay) * k[i];
            const float delta = (v[r] - (float)sk) * b;
            double sq = 0;
            for (int i = 0; i < d; i++) {
                sr[i] += delta * k[i];
                sq += (double)sr[i] * q[i];
            }
            o[r] = (float)sq;
        }
    }
}

static void delta_part(void *arg, int ith, int nth) {
    const delta_job *j = arg;
    for (int h = ith; h < j->s->n_v_heads; h += nth) delta_head(j, h);
}

void ref_delta_net(al_backend *be, const al_tensor *qkv, const al_tensor *alpha,
                   const al_tensor *beta, const al_tensor *dt_bias, const al_tensor *a,
                   al_tensor *state, bool fresh, const al_delta_shape *s, al_tensor *out) {
    cpu_backend *cb = (cpu_backend *)be;
    AL_ASSERT(s->head_dim <= CPU_DELTA_MAX_DIM);
    delta_job j = {.qkv = qkv, .alpha = alpha, .beta = beta, .dt_bias = dt_bias, .a = a,
                   .out = out, .state = state, .fresh = fresh, .s = s};
    pthread_mutex_lock(&cb->lock);
    pool_run(cb->pool, delta_part, &j);
    pthread_mutex_unlock(&cb->lock);
}
