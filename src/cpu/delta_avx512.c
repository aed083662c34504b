/* delta_avx512.c: the AVX-512 kernels of gated delta-net layers (ops.h: cpu_delta_fn,
 * cpu_conv_fn) and of sigmoid_mul, for the table in kernels_avx512.c.
 *
 * Compiled for AVX-512 by the target pragma below, whatever the build's flags; cpu.c
 * picks cpu_kernels_avx512, and with it these, only when CPUID says the CPU has it.
 *
 * delta: a row of the state is a value dimension, so each row's update is two dot
 * products along the row (S k, then S q) and one FMA in between: dimensions in the
 * lanes, two running sums per product, reduced once per row. The rows are
 * independent, so the reductions of one row overlap the loads of the next.
 * conv: channels in the lanes, each block of 16 over every position, its taps
 * transposed into vectors once.
 */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))), \
                             apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
#endif

#include <immintrin.h>
#include <math.h>

#include "avx512.h"
#include "ops.h"

#define INLINE static inline __attribute__((always_inline))

INLINE __mmask16 tail16(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* x / sqrt(sum x^2 + eps) times scale into out (64-byte aligned); the squares summed
 * in double, as the reference sums them. */
INLINE void l2_norm_512(const float *x, int n, float eps, float scale, float *out) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int i = 0; i < n; i += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(tail16(n - i), x + i);
        const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        const __m512d hi = _mm512_cvtps_pd(
            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        s0 = _mm512_fmadd_pd(lo, lo, s0);
        s1 = _mm512_fmadd_pd(hi, hi, s1);
    }
    const double ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    const __m512 f = _mm512_set1_ps((float)(1.0 / sqrt(ss + eps)) * scale);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = tail16(n - i);
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), f));
    }
}

/* Rows [r0, r1) of S for one position: decay, delta = (v[r] - row.k) b, row += delta k,
 * o[r] = row.q. d a multiple of 32 takes whole pairs of vectors; else masked ones. */
INLINE void delta_rows_512(float *S, int d, int r0, int r1, const float *k, const float *q,
                           const float *v, float decay, float b, float *o) {
    const __m512 dec = _mm512_set1_ps(decay);
    for (int r = r0; r < r1; r++) {
        float *s = S + (int64_t)r * d;
        /* decoding, the state comes from L3 (a layer's weights pass through the caches
         * between two visits): rows 4 ahead, whose lines the next head's rows continue */
        for (int i = 0; i < d; i += 16)
            _mm_prefetch((const char *)(s + 4 * d + i), _MM_HINT_T0);
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int i = 0;
        for (; i + 32 <= d; i += 32) {
            const __m512 x0 = _mm512_mul_ps(_mm512_loadu_ps(s + i), dec);
            const __m512 x1 = _mm512_mul_ps(_mm512_loadu_ps(s + i + 16), dec);
            _mm512_storeu_ps(s + i, x0);
            _mm512_storeu_ps(s + i + 16, x1);
            a0 = _mm512_fmadd_ps(x0, _mm512_load_ps(k + i), a0);
            a1 = _mm512_fmadd_ps(x1, _mm512_load_ps(k + i + 16), a1);
        }
        for (; i < d; i += 16) {
            const __mmask16 m = tail16(d - i);
            const __m512 x0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + i), dec);
            _mm512_mask_storeu_ps(s + i, m, x0);
            a0 = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m, k + i), a0);
        }
        const __m512 delta = _mm512_set1_ps((v[r] - _mm512_reduce_add_ps(_mm512_add_ps(a0, a1))) * b);
        a0 = a1 = _mm512_setzero_ps();
        for (i = 0; i + 32 <= d; i += 32) {
            const __m512 x0 = _mm512_fmadd_ps(delta, _mm512_load_ps(k + i), _mm512_loadu_ps(s + i));
            const __m512 x1 =
                _mm512_fmadd_ps(delta, _mm512_load_ps(k + i + 16), _mm512_loadu_ps(s + i + 16));
            _mm512_storeu_ps(s + i, x0);
            _mm512_storeu_ps(s + i + 16, x1);
            a0 = _mm512_fmadd_ps(x0, _mm512_load_ps(q + i), a0);
            a1 = _mm512_fmadd_ps(x1, _mm512_load_ps(q + i + 16), a1);
        }
        for (; i < d; i += 16) {
            const __mmask16 m = tail16(d - i);
            const __m512 x0 = _mm512_fmadd_ps(delta, _mm512_maskz_loadu_ps(m, k + i),
                                              _mm512_maskz_loadu_ps(m, s + i));
            _mm512_mask_storeu_ps(s + i, m, x0);
            a0 = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m, q + i), a0);
        }
        o[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    }
}

void cpu_delta_512(const cpu_delta_args *a) {
    const int d = a->d;
    float *q = a->scratch, *k = q + ((d + 15) & ~15); /* both 64-byte aligned */
    for (int64_t t = 0; t < a->n; t++) {
        l2_norm_512(a->q + t * a->ld, d, a->eps, 1.0f / sqrtf((float)d), q);
        l2_norm_512(a->k + t * a->ld, d, a->eps, 1.0f, k);
        float decay, b;
        cpu_delta_gates(a, t, &decay, &b);
        /* the common sizes get loops of known length */
        float *o = a->out + t * a->ldo;
        const float *v = a->v + t * a->ld;
        if (d == 128)
            delta_rows_512(a->S, 128, a->r0, a->r1, k, q, v, decay, b, o);
        else
            delta_rows_512(a->S, d, a->r0, a->r1, k, q, v, decay, b, o);
    }
}

/* ---- ssm_conv ---------------------------------------------------------------------------- */

/* Tap j of channels c .. c + 15 (those below c1) in w[j]. Four contiguous taps (the
 * models' convolutions) come as four vectors, transposed: element 4 l + j, lane l of
 * w[j], from the first two vectors for l < 8 and the last two above. Any other shape
 * goes through memory, whose vector reload after 16 scalar stores stalls; decoding a
 * token, the block's taps had cost more than its convolution. */
INLINE void conv_taps_512(const cpu_conv_args *a, int64_t c, __m512 *w) {
    if (a->k == 4 && a->ldw == 4) {
        const int64_t left = 4 * (a->c1 - c);
        __m512 v[4];
        for (int i = 0; i < 4; i++)
            v[i] = left > 16 * i ? _mm512_maskz_loadu_ps(tail16(left - 16 * i), a->w + c * 4 + 16 * i)
                                 : _mm512_setzero_ps();
        for (int j = 0; j < 4; j++) {
            const __m512i idx = _mm512_add_epi32(
                _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 28, 24, 20, 16, 12, 8, 4, 0),
                _mm512_set1_epi32(j));
            const __m512 lo = _mm512_permutex2var_ps(v[0], idx, v[1]);
            const __m512 hi = _mm512_permutex2var_ps(v[2], idx, v[3]);
            w[j] = _mm512_shuffle_f32x4(lo, hi, 0x44);
        }
        return;
    }
    for (int j = 0; j < a->k; j++) {
        _Alignas(64) float tap[16] = {0};
        for (int l = 0; l < 16 && c + l < a->c1; l++)
            tap[l] = a->w[(c + l) * a->ldw + j];
        w[j] = _mm512_load_ps(tap);
    }
}

void cpu_conv_512(const cpu_conv_args *a) {
    const int k1 = a->k - 1;
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 w[CPU_CONV_MAX_K], tail[CPU_CONV_MAX_K];
    for (int64_t c = a->c0; c < a->c1; c += 16) {
        const __mmask16 m = tail16(a->c1 - c);
        conv_taps_512(a, c, w);
        for (int64_t t = 0; t < a->n; t++) {
            __m512 sum = _mm512_setzero_ps();
            for (int j = 0; j < a->k; j++) {
                const float *in = cpu_conv_input(a, t + j);
                if (in) sum = _mm512_fmadd_ps(w[j], _mm512_maskz_loadu_ps(m, in + c), sum);
            }
            const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), sum));
            _mm512_mask_storeu_ps(a->out + t * a->ldo + c, m, _mm512_div_ps(sum, _mm512_add_ps(one, e)));
        }
        /* read before written: a batch shorter than K - 1 still needs the old rows */
        for (int j = 0; j < k1; j++) {
            const float *in = cpu_conv_input(a, a->n + j);
            tail[j] = in ? _mm512_maskz_loadu_ps(m, in + c) : _mm512_setzero_ps();
        }
        for (int j = 0; j < k1; j++)
            _mm512_mask_storeu_ps(a->state + j * a->lds + c, m, tail[j]);
    }
}

void cpu_sigmoid_mul_512(float *x, const float *g, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail16(n - i);
        const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(m, g + i)));
        _mm512_mask_storeu_ps(x + i, m, _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i),
                                                      _mm512_add_ps(one, e)));
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
