/* float_avx2.c: the AVX2 kernels of float weights (F32, F16 and BF16 panels and their
 * microkernel) and the per-row float ops (norms, activations, sums), for the table in
 * kernels_avx2.c.
 *
 * Compiled for AVX2 by the target pragma below, whatever the build's flags; cpu.c picks
 * cpu_kernels_avx2, and with it these, only when CPUID says the CPU has AVX2, FMA and
 * F16C.
 */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "avx2.h"
#include "ops.h"
#include "util.h"

/* ---- float weights --------------------------------------------------------------------- */

INLINE void transpose_8x8_ps(__m256 r[8]) {
    __m256 t[8], u[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}

INLINE __m256 load8_as_f32(uint32_t type, const uint8_t *p) {
    if (type == AL_TYPE_F32) return _mm256_loadu_ps((const float *)p);
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (type == AL_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* One copy per weight type, so that the loads and the transpose stay in registers. */
INLINE void pack_f_body(const uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows,
                        int64_t k0, int64_t nk, float *panel) {
    const int64_t es = type == AL_TYPE_F32 ? 4 : 2;
    const uint8_t *rows[R];
    for (int r = 0; r < R; r++)
        rows[r] = w + (uint64_t)(r < n_rows ? r : n_rows - 1) * row_bytes + k0 * es;
    int64_t k = 0;
    for (; k + 8 <= nk; k += 8) {
        __m256 v[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            v[r] = load8_as_f32(type, rows[r] + k * es);
        transpose_8x8_ps(v);
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++)
            _mm256_store_ps(panel + (k + c) * R, v[c]);
    }
    for (; k < nk; k++)
        for (int r = 0; r < R; r++) {
            const uint8_t *e = rows[r] + k * es;
            uint16_t h;
            memcpy(&h, e, 2);
            float f;
            if (type == AL_TYPE_F32)
                memcpy(&f, e, 4);
            else
                f = type == AL_TYPE_F16 ? _cvtsh_ss(h) : al_bf16_to_f32(h);
            panel[k * R + r] = f;
        }
}

void cpu_pack_f_avx2(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows, int64_t k0,
                        int64_t nk, float *panel) {
    if (type == AL_TYPE_F16)
        pack_f_body(AL_TYPE_F16, w, row_bytes, n_rows, k0, nk, panel);
    else if (type == AL_TYPE_BF16)
        pack_f_body(AL_TYPE_BF16, w, row_bytes, n_rows, k0, nk, panel);
    else
        pack_f_body(AL_TYPE_F32, w, row_bytes, n_rows, k0, nk, panel);
}

/* acc[t] += sum_k w[k] x[t][k], in two chains (even and odd k) for every token count:
 * FMA latency would otherwise bound a single token. */
INLINE void mk_f_body(const cpu_mk_args *a, const int nt) {
    const float *p = a->panel, *x = a->act;
    __m256 acc[TT], acc2[TT];
    for (int t = 0; t < nt; t++)
        acc[t] = acc2[t] = _mm256_setzero_ps();
    if (!a->first)
        for (int t = 0; t < nt; t++)
            acc[t] = load_rows(a, a->out + t * a->ldo);
    int64_t k = 0;
    for (; k + 2 <= a->n_k; k += 2) {
        const __m256 w0 = _mm256_load_ps(p + k * R), w1 = _mm256_load_ps(p + (k + 1) * R);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            acc[t] = _mm256_fmadd_ps(w0, _mm256_set1_ps(x[t * a->ldx + k]), acc[t]);
            acc2[t] = _mm256_fmadd_ps(w1, _mm256_set1_ps(x[t * a->ldx + k + 1]), acc2[t]);
        }
    }
    if (k < a->n_k)
        for (int t = 0; t < nt; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_load_ps(p + k * R), _mm256_set1_ps(x[t * a->ldx + k]),
                                     acc[t]);
    for (int t = 0; t < nt; t++) {
        float v[R];
        _mm256_storeu_ps(v, _mm256_add_ps(acc[t], acc2[t]));
        for (int r = 0; r < a->n_rows; r++)
            a->out[t * a->ldo + r] = a->bias ? v[r] + a->bias[r] : v[r];
    }
}

void cpu_mk_f_avx2(const cpu_mk_args *a) {
#define MKF(t) mk_f_body(a, t)
    BY_TOKENS(a->n_tok, MKF)
#undef MKF
}

/* ---- per-row ops ----------------------------------------------------------------------- */

void cpu_rms_norm_avx2(const float *x, const float *w, float eps, float *out, int64_t n) {
    /* squares summed in double, like the reference: x*x is exact in a double */
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        const __m256d hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        s0 = _mm256_fmadd_pd(lo, lo, s0);
        s1 = _mm256_fmadd_pd(hi, hi, s1);
    }
    double sv[4];
    _mm256_storeu_pd(sv, _mm256_add_pd(s0, s1));
    double ss = (sv[0] + sv[1]) + (sv[2] + sv[3]);
    for (; i < n; i++)
        ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    const __m256 sc = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sc),
                                                _mm256_loadu_ps(w + i)));
    for (; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

void cpu_silu_mul_avx2(float *g, const float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        _mm256_storeu_ps(
            g + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* ops.h: gelu(x) = x / (1 + exp(-2z)). A 2z beyond exp256's clamp gives x or a
 * value below 1e-37 where the exact one is 0; the tail takes the scalar form. */
void cpu_gelu_mul_avx2(float *g, const float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), k0 = _mm256_set1_ps(CPU_GELU_K0);
    const __m256 k1 = _mm256_set1_ps(CPU_GELU_K1);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 z2 = _mm256_mul_ps(x, _mm256_fmadd_ps(k1, _mm256_mul_ps(x, x), k0));
        const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), z2));
        _mm256_storeu_ps(
            g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) {
        const float x = g[i], z2 = x * (CPU_GELU_K0 + CPU_GELU_K1 * x * x);
        g[i] = x / (1.0f + expf(-z2)) * u[i];
    }
}

/* min(limit, g) and max(-limit, .) keep a NaN input NaN, as the reference does. A gate
 * below about -52 / alpha puts e^(-alpha x) beyond exp256's clamp: then x / 2.4e38
 * where the exact value is below 1e-36. */
void cpu_swiglu_oai_avx2(float *g, const float *u, float alpha, float limit, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), lim = _mm256_set1_ps(limit);
    const __m256 neg_lim = _mm256_set1_ps(-limit), neg_alpha = _mm256_set1_ps(-alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_min_ps(lim, _mm256_loadu_ps(g + i));
        const __m256 y = _mm256_max_ps(neg_lim, _mm256_min_ps(lim, _mm256_loadu_ps(u + i)));
        const __m256 e = exp256(_mm256_mul_ps(neg_alpha, x));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)),
                                              _mm256_add_ps(y, one)));
    }
    for (; i < n; i++) {
        const float x = g[i] > limit ? limit : g[i];
        const float y = u[i] > limit ? limit : u[i] < -limit ? -limit : u[i];
        g[i] = x / (1.0f + expf(-alpha * x)) * (y + 1.0f);
    }
}

void cpu_scale_avx2(float *x, float s, int64_t n) {
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sv));
    for (; i < n; i++)
        x[i] *= s;
}

void cpu_add_avx2(float *x, const float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        x[i] += y[i];
}

uint64_t cpu_sum_u64_avx2(const uint64_t *p, int64_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (int64_t i = 0; i < n; i += 16) {
        a = _mm256_add_epi64(a, _mm256_load_si256((const __m256i *)(p + i)));
        b = _mm256_add_epi64(b, _mm256_load_si256((const __m256i *)(p + i + 4)));
        c = _mm256_add_epi64(c, _mm256_load_si256((const __m256i *)(p + i + 8)));
        d = _mm256_add_epi64(d, _mm256_load_si256((const __m256i *)(p + i + 12)));
    }
    uint64_t s[4];
    _mm256_storeu_si256((__m256i *)s,
                        _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
    return s[0] + s[1] + s[2] + s[3];
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
