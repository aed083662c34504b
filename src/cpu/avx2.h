/* avx2.h: inline helpers shared by the AVX2 kernel files (kernels_avx2.c,
 * float_avx2.c, attn_avx2.c), and the functions of float_avx2.c that kernels_avx2.c's
 * table names. Include it after the file's target pragma, so that the helpers are
 * compiled for AVX2 like the functions that call them.
 *
 * One copy on purpose: attention and the activations take e^x from exp256, and every
 * file must round it alike. */
#ifndef AL_CPU_AVX2_H
#define AL_CPU_AVX2_H

#include <immintrin.h>

#include "ops.h"

/* Panels of R rows, activation tiles of TT tokens. */
enum { R = 8, TT = 4 };

#define INLINE static inline __attribute__((always_inline))

/* One copy of a microkernel per token count, so that its loops over tokens unroll. */
#define BY_TOKENS(n, CALL)                                                                         \
    switch (n) {                                                                                   \
    case 1:                                                                                        \
        CALL(1);                                                                                   \
        break;                                                                                     \
    case 2:                                                                                        \
        CALL(2);                                                                                   \
        break;                                                                                     \
    case 3:                                                                                        \
        CALL(3);                                                                                   \
        break;                                                                                     \
    default:                                                                                       \
        CALL(4);                                                                                   \
        break;                                                                                     \
    }

/* The panel's n_rows lanes of p, the rest zero: a masked load, which leaves acc in a
 * register (filled lane by lane through its address, it had lived on the stack, a
 * store and a reload per sub-block and token). */
INLINE __m256 load_rows(const cpu_mk_args *a, const float *p) {
    const __m256i lane = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(a->n_rows), lane));
}

/* float_avx2.c: float weights and the per-row ops, as cpu_kernels names them (ops.h) */
void cpu_pack_f_avx2(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows,
                     int64_t k0, int64_t nk, float *panel);
void cpu_mk_f_avx2(const cpu_mk_args *a);
void cpu_rms_norm_avx2(const float *x, const float *w, float eps, float *out, int64_t n);
void cpu_silu_mul_avx2(float *g, const float *u, int64_t n);
void cpu_gelu_mul_avx2(float *g, const float *u, int64_t n);
void cpu_swiglu_oai_avx2(float *g, const float *u, float alpha, float limit, int64_t n);
void cpu_scale_avx2(float *x, float s, int64_t n);
void cpu_add_avx2(float *x, const float *y, int64_t n);
uint64_t cpu_sum_u64_avx2(const uint64_t *p, int64_t n);

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
