/* delta_avx2.c: the AVX2 kernels of gated delta-net layers (ops.h: cpu_delta_fn,
 * cpu_conv_fn) and of sigmoid_mul, for the table in kernels_avx2.c.
 *
 * Compiled for AVX2 by the target pragma below, whatever the build's flags; cpu.c picks
 * cpu_kernels_avx2, and with it these, only when CPUID says the CPU has AVX2, FMA and
 * F16C. The same algorithms as delta_avx512.c, 8 lanes wide; tails of fewer than 8
 * take masked loads and stores.
 */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>
#include <math.h>

#include "avx2.h"
#include "ops.h"

/* Lanes below left (of 8) all ones: a mask for maskload and maskstore. */
INLINE __m256i tail8(int64_t left) {
    const __m256i lane = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left >= 8 ? 8 : (int)left), lane);
}

INLINE float hsum256(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/* x / sqrt(sum x^2 + eps) times scale into out; the squares summed in double, as the
 * reference sums them. */
INLINE void l2_norm_avx2(const float *x, int n, float eps, float scale, float *out) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (int i = 0; i < n; i += 8) {
        const __m256 v = _mm256_maskload_ps(x + i, tail8(n - i));
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        s0 = _mm256_fmadd_pd(lo, lo, s0);
        s1 = _mm256_fmadd_pd(hi, hi, s1);
    }
    const __m256d s = _mm256_add_pd(s0, s1);
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    const double ss = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    const __m256 f = _mm256_set1_ps((float)(1.0 / sqrt(ss + eps)) * scale);
    for (int i = 0; i < n; i += 8) {
        const __m256i m = tail8(n - i);
        _mm256_maskstore_ps(out + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), f));
    }
}

/* Rows [r0, r1) of S for one position, as delta_rows_512. */
INLINE void delta_rows_avx2(float *S, int d, int r0, int r1, const float *k, const float *q,
                            const float *v, float decay, float b, float *o) {
    const __m256 dec = _mm256_set1_ps(decay);
    for (int r = r0; r < r1; r++) {
        float *s = S + (int64_t)r * d;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int i = 0;
        for (; i + 16 <= d; i += 16) {
            const __m256 x0 = _mm256_mul_ps(_mm256_loadu_ps(s + i), dec);
            const __m256 x1 = _mm256_mul_ps(_mm256_loadu_ps(s + i + 8), dec);
            _mm256_storeu_ps(s + i, x0);
            _mm256_storeu_ps(s + i + 8, x1);
            a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(k + i), a0);
            a1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(k + i + 8), a1);
        }
        for (; i < d; i += 8) {
            const __m256i m = tail8(d - i);
            const __m256 x0 = _mm256_mul_ps(_mm256_maskload_ps(s + i, m), dec);
            _mm256_maskstore_ps(s + i, m, x0);
            a0 = _mm256_fmadd_ps(x0, _mm256_maskload_ps(k + i, m), a0);
        }
        const __m256 delta = _mm256_set1_ps((v[r] - hsum256(_mm256_add_ps(a0, a1))) * b);
        a0 = a1 = _mm256_setzero_ps();
        for (i = 0; i + 16 <= d; i += 16) {
            const __m256 x0 = _mm256_fmadd_ps(delta, _mm256_loadu_ps(k + i), _mm256_loadu_ps(s + i));
            const __m256 x1 =
                _mm256_fmadd_ps(delta, _mm256_loadu_ps(k + i + 8), _mm256_loadu_ps(s + i + 8));
            _mm256_storeu_ps(s + i, x0);
            _mm256_storeu_ps(s + i + 8, x1);
            a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(q + i), a0);
            a1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(q + i + 8), a1);
        }
        for (; i < d; i += 8) {
            const __m256i m = tail8(d - i);
            const __m256 x0 =
                _mm256_fmadd_ps(delta, _mm256_maskload_ps(k + i, m), _mm256_maskload_ps(s + i, m));
            _mm256_maskstore_ps(s + i, m, x0);
            a0 = _mm256_fmadd_ps(x0, _mm256_maskload_ps(q + i, m), a0);
        }
        o[r] = hsum256(_mm256_add_ps(a0, a1));
    }
}

void cpu_delta_avx2(const cpu_delta_args *a) {
    const int d = a->d;
    float *q = a->scratch, *k = q + ((d + 15) & ~15);
    for (int64_t t = 0; t < a->n; t++) {
        l2_norm_avx2(a->q + t * a->ld, d, a->eps, 1.0f / sqrtf((float)d), q);
        l2_norm_avx2(a->k + t * a->ld, d, a->eps, 1.0f, k);
        float decay, b;
        cpu_delta_gates(a, t, &decay, &b);
        float *o = a->out + t * a->ldo;
        const float *v = a->v + t * a->ld;
        /* the common size gets loops of known length */
        if (d == 128)
            delta_rows_avx2(a->S, 128, a->r0, a->r1, k, q, v, decay, b, o);
        else
            delta_rows_avx2(a->S, d, a->r0, a->r1, k, q, v, decay, b, o);
    }
}

/* ---- ssm_conv ---------------------------------------------------------------------------- */

void cpu_conv_avx2(const cpu_conv_args *a) {
    const int k1 = a->k - 1;
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 w[CPU_CONV_MAX_K], tail[CPU_CONV_MAX_K];
    for (int64_t c = a->c0; c < a->c1; c += 8) {
        const __m256i m = tail8(a->c1 - c);
        for (int j = 0; j < a->k; j++) { /* tap j of the block's channels */
            float tap[8] = {0};
            for (int l = 0; l < 8 && c + l < a->c1; l++)
                tap[l] = a->w[(c + l) * a->ldw + j];
            w[j] = _mm256_loadu_ps(tap);
        }
        for (int64_t t = 0; t < a->n; t++) {
            __m256 sum = _mm256_setzero_ps();
            for (int j = 0; j < a->k; j++) {
                const float *in = cpu_conv_input(a, t + j);
                if (in) sum = _mm256_fmadd_ps(w[j], _mm256_maskload_ps(in + c, m), sum);
            }
            const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), sum));
            _mm256_maskstore_ps(a->out + t * a->ldo + c, m, _mm256_div_ps(sum, _mm256_add_ps(one, e)));
        }
        /* read before written: a batch shorter than K - 1 still needs the old rows */
        for (int j = 0; j < k1; j++) {
            const float *in = cpu_conv_input(a, a->n + j);
            tail[j] = in ? _mm256_maskload_ps(in + c, m) : _mm256_setzero_ps();
        }
        for (int j = 0; j < k1; j++)
            _mm256_maskstore_ps(a->state + j * a->lds + c, m, tail[j]);
    }
}

void cpu_sigmoid_mul_avx2(float *x, const float *g, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = tail8(n - i);
        const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_maskload_ps(g + i, m)));
        _mm256_maskstore_ps(x + i, m, _mm256_div_ps(_mm256_maskload_ps(x + i, m),
                                                    _mm256_add_ps(one, e)));
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
