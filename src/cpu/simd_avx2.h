/* simd_avx2.h: the vector words of pack_simd.h for AVX2: panels of R = 8 rows (avx2.h),
 * one per 32-bit lane of a ymm register. Include it after the file's target pragma,
 * then pack_simd.h.
 *
 * Each name is the instruction sequence kernels_avx2.c has always used, so that the
 * shared code compiles to the same code it replaced; simd_avx512.h is the same list
 * for AVX-512. */
#ifndef AL_CPU_SIMD_AVX2_H
#define AL_CPU_SIMD_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#include "avx2.h"

/* A group of 16 rows in the x16 layout (ops.h) is two panels of R rows. pack_k45's
 * loop over a super-block's 4 chunks stays a loop, as this file's pack always had it
 * (the AVX-512 pack unrolls it). */
enum { X16_HALVES = 2, PACK_K45_UNROLL = 1 };

typedef __m256i vq; /* R lanes of 32 bits, or 4 R bytes */
typedef __m256 vf;  /* R floats */

INLINE vq vq_zero(void) {
    return _mm256_setzero_si256();
}
INLINE vq vq_set8(char c) {
    return _mm256_set1_epi8(c);
}
INLINE vq vq_set32(int32_t v) {
    return _mm256_set1_epi32(v);
}
INLINE vq vq_and(vq a, vq b) {
    return _mm256_and_si256(a, b);
}
INLINE vq vq_or(vq a, vq b) {
    return _mm256_or_si256(a, b);
}
INLINE vq vq_xor(vq a, vq b) {
    return _mm256_xor_si256(a, b);
}
INLINE vq vq_sub32(vq a, vq b) {
    return _mm256_sub_epi32(a, b);
}
INLINE vq vq_srli16(vq v, int n) {
    return _mm256_srli_epi16(v, n);
}
INLINE vq vq_slli16(vq v, int n) {
    return _mm256_slli_epi16(v, n);
}
INLINE vq vq_srli32(vq v, int n) {
    return _mm256_srli_epi32(v, n);
}
INLINE vq vq_slli32(vq v, int n) {
    return _mm256_slli_epi32(v, n);
}
INLINE vq vq_sllv32(vq v, vq n) {
    return _mm256_sllv_epi32(v, n);
}
INLINE vq vq_loadu(const void *p) {
    return _mm256_loadu_si256((const __m256i *)p);
}
INLINE void vq_storeu(void *p, vq v) {
    _mm256_storeu_si256((__m256i *)p, v);
}
/* p aligned to the vector */
INLINE void vq_store(void *p, vq v) {
    _mm256_store_si256((__m256i *)p, v);
}
INLINE vf vf_zero(void) {
    return _mm256_setzero_ps();
}
INLINE vf vf_set(float f) {
    return _mm256_set1_ps(f);
}
INLINE vf vf_mul(vf a, vf b) {
    return _mm256_mul_ps(a, b);
}
INLINE vf vf_sub(vf a, vf b) {
    return _mm256_sub_ps(a, b);
}
/* a * b + c */
INLINE vf vf_fmadd(vf a, vf b, vf c) {
    return _mm256_fmadd_ps(a, b, c);
}
INLINE vf vf_of_i32(vq v) {
    return _mm256_cvtepi32_ps(v);
}
INLINE vf vf_cast(vq v) {
    return _mm256_castsi256_ps(v);
}
/* p aligned to the vector */
INLINE void vf_store(float *p, vf v) {
    _mm256_store_ps(p, v);
}

/* The cache line at p into L2. */
INLINE void prefetch_l2(const void *p) {
    _mm_prefetch((const char *)p, _MM_HINT_T1);
}

/* The 4 bytes at p + r rb in lane r. */
INLINE vq vq_gather32(const uint8_t *p, int64_t rb) {
    const __m256i idx = _mm256_mullo_epi32(_mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm256_set1_epi32((int32_t)rb));
    return _mm256_i32gather_epi32((const int *)p, idx, 1);
}

/* R consecutive 16-bit or 8-bit numbers, zero-extended, one per lane. */
INLINE vq vq_load_u16(const uint8_t *p) {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
}
INLINE vq vq_load_u8(const uint8_t *p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

/* R consecutive fp16 numbers as floats. */
INLINE vf vf_load_f16(const uint8_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* The fp16 number in the low (hi = 0) or high half of each lane. */
INLINE vf vf_f16_of(vq g, int hi) {
    const __m256i v =
        hi ? _mm256_srli_epi32(g, 16) : _mm256_and_si256(g, _mm256_set1_epi32(0xFFFF));
    return _mm256_cvtph_ps(
        _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

/* The low 16 bits or the low byte of each lane, R of them stored at p (masked first:
 * the packs saturate). */
INLINE void vq_store_lo16(uint8_t *p, vq g) {
    g = _mm256_and_si256(g, _mm256_set1_epi32(0xFFFF));
    _mm_storeu_si128((__m128i *)p,
                     _mm_packus_epi32(_mm256_castsi256_si128(g), _mm256_extracti128_si256(g, 1)));
}
INLINE void vq_store_lo8(uint8_t *p, vq g) {
    g = _mm256_and_si256(g, _mm256_set1_epi32(0xFF));
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(g), _mm256_extracti128_si256(g, 1));
    _mm_storel_epi64((__m128i *)p, _mm_packus_epi16(w, w));
}

/* Per lane: b where a's lane e is below lim, else a. */
INLINE vq vq_blend_lt32(vq e, int32_t lim, vq a, vq b) {
    return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi32(_mm256_set1_epi32(lim), e));
}

/* The sum of the 16 signed bytes at q: sad against 0 sums unsigned bytes, so the
 * signed ones are shifted by 128 first. */
INLINE int sum_i8x16(const int8_t *q) {
    const __m128i s = _mm_sad_epu8(_mm_xor_si128(_mm_loadu_si128((const __m128i *)q),
                                                 _mm_set1_epi8((char)0x80)),
                                   _mm_setzero_si128());
    return _mm_cvtsi128_si32(s) + _mm_extract_epi32(s, 2) - 16 * 128;
}

/* A table of 16 bytes for vq_lut16: the 16 signed bytes at t, each plus add. */
typedef __m128i lut16;
INLINE lut16 lut16_add(const int8_t *t, char add) {
    return _mm_add_epi8(_mm_loadu_si128((const __m128i *)t), _mm_set1_epi8(add));
}

/* Each byte looked up in the 16-byte table lut (indices 0..15). */
INLINE vq vq_lut16(lut16 lut, vq idx) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(lut), idx);
}

/* x in each byte of v that has the bit m set, else 0 (m: one bit). */
INLINE vq vq_bit_to(vq v, char m, char x) {
    const __m256i mv = _mm256_set1_epi8(m);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, mv), mv), _mm256_set1_epi8(x));
}

/* 0x10 in byte k of lane r where bit 4j + k of qh[r] is set (the Q5 fifth bits of
 * 4-byte group j): the lane's nibble copied to its 4 bytes, each testing one bit. */
INLINE vq q5_high(vq qh, int j) {
    const __m256i rep = _mm256_set_epi8(12, 12, 12, 12, 8, 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0, 12, 12,
                                        12, 12, 8, 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0);
    const __m256i sel = _mm256_set1_epi32(0x08040201);
    const __m256i x = _mm256_shuffle_epi8(_mm256_srli_epi32(qh, 4 * j), rep);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(x, sel), sel);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

/* The transposes: row r at p[r]; d[j] = 4-byte group j of the 16 bytes of every row
 * (row r in lane r), rows i and i+4 in a[i]. */
INLINE void transpose_rows16(const uint8_t *const p[R], vq d[4]) {
    __m256i a[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        a[i] =
            _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p[i])),
                                    _mm_loadu_si128((const __m128i *)p[i + 4]), 1);
    const __m256i t0 = _mm256_unpacklo_epi32(a[0], a[1]), t1 = _mm256_unpackhi_epi32(a[0], a[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(a[2], a[3]), t3 = _mm256_unpackhi_epi32(a[2], a[3]);
    d[0] = _mm256_unpacklo_epi64(t0, t2);
    d[1] = _mm256_unpackhi_epi64(t0, t2);
    d[2] = _mm256_unpacklo_epi64(t1, t3);
    d[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* g[j] = 4-byte group j of the 32 bytes of every row: an 8x8 transpose of 32-bit
 * words. */
INLINE void transpose_rows32(const uint8_t *const p[R], vq g[8]) {
    __m256i r[8], t[8], u[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_si256((const __m256i *)p[i]);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        g[i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x20);
        g[4 + i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x31);
    }
}

#endif /* AL_CPU_SIMD_AVX2_H */
