/* avx512.h: inline helpers shared by the AVX-512 kernel files (kernels_avx512.c,
 * attn_avx512.c). Include it after the file's target pragma, so that the helpers are
 * compiled for AVX-512 like the functions that call them.
 *
 * One copy on purpose: attention rescales with exp512 in both of its AVX-512 kernels,
 * and a token's logits may not depend on which of them ran, so both must round alike. */
#ifndef AL_CPU_AVX512_H
#define AL_CPU_AVX512_H

#include <immintrin.h>

/* e^x to about 1 ulp (Cephes' expf): x = n ln2 + r, |r| <= ln2/2, e^r by a degree-7
 * polynomial, 2^n by vscalefps. exp(0) is exactly 1. The clamp keeps every result in
 * [2^-126, 2^127]: never 0, never inf, and a NaN lane comes out as e^88.38 (vminps
 * returns its second operand for a NaN). */
static inline __attribute__((always_inline)) __m512 exp512(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f)),
                      _mm512_set1_ps(-87.3365447505531f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

#endif
