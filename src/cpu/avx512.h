/* avx512.h: inline helpers shared by the AVX-512 kernel files (kernels_avx512.c,
 * attn_avx512.c): exp512 and a 16 x 16 float transpose. Include it after the file's target pragma, so that the helpers are
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
/* r[i] = row i -> r[k] = column k, 16 x 16 floats. */
static inline __attribute__((always_inline)) void transpose_16x16(__m512 r[16]) {
    __m512 t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    /* now r[4i + c], 128-bit lane L, holds rows 4i..4i+3 of column 4L + c */
#pragma GCC unroll 16
    for (int c = 0; c < 4; c++) {
        t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
        t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
        t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
        t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
    }
#pragma GCC unroll 16
    for (int c = 0; c < 4; c++) {
        r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD);
        r[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xDD);
    }
}

#endif
