/* avx2.h: inline helpers shared by the AVX2 kernel files (kernels_avx2.c,
 * attn_avx2.c). Include it after the file's target pragma, so that the helpers are
 * compiled for AVX2 like the functions that call them.
 *
 * One copy on purpose: attention and the activations take e^x from exp256, and every
 * file must round it alike. */
#ifndef AL_CPU_AVX2_H
#define AL_CPU_AVX2_H

#include <immintrin.h>

/* e^x to about 1 ulp (Cephes' expf), as exp512 in avx512.h; 2^n is built in
 * the exponent field, which the clamp keeps in range. */
static inline __attribute__((always_inline)) __m256 exp256(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)),
                      _mm256_set1_ps(-87.3365447505531f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

#endif /* AL_CPU_AVX2_H */
