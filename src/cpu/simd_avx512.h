/* simd_avx512.h: the vector words of pack_simd.h for AVX-512 (F, BW, VL, DQ): panels
 * of R = 16 rows, one per 32-bit lane of a zmm register. Include it after the file's
 * target pragma, then pack_simd.h.
 *
 * Each name is the instruction sequence kernels_avx512.c has always used, so that the
 * shared code compiles to the same code it replaced. A port to another vector ISA
 * writes this file again: R, the two vector types, and the functions below. */
#ifndef AL_CPU_SIMD_AVX512_H
#define AL_CPU_SIMD_AVX512_H

#include <immintrin.h>
#include <stdint.h>

/* Rows per panel; a group of 16 rows in the x16 layout (ops.h) is X16_HALVES panels.
 * PACK_K45_UNROLL: pack_k45's loop over a super-block's 4 chunks, unrolled, as this
 * file's pack always had it (the AVX2 pack keeps the loop). */
enum { R = 16, X16_HALVES = 1, PACK_K45_UNROLL = 16 };

#define INLINE static inline __attribute__((always_inline))

typedef __m512i vq; /* R lanes of 32 bits, or 4 R bytes */
typedef __m512 vf;  /* R floats */

INLINE vq vq_zero(void) {
    return _mm512_setzero_si512();
}
INLINE vq vq_set8(char c) {
    return _mm512_set1_epi8(c);
}
INLINE vq vq_set32(int32_t v) {
    return _mm512_set1_epi32(v);
}
INLINE vq vq_and(vq a, vq b) {
    return _mm512_and_si512(a, b);
}
INLINE vq vq_or(vq a, vq b) {
    return _mm512_or_si512(a, b);
}
INLINE vq vq_xor(vq a, vq b) {
    return _mm512_xor_si512(a, b);
}
INLINE vq vq_sub32(vq a, vq b) {
    return _mm512_sub_epi32(a, b);
}
INLINE vq vq_srli16(vq v, int n) {
    return _mm512_srli_epi16(v, n);
}
INLINE vq vq_slli16(vq v, int n) {
    return _mm512_slli_epi16(v, n);
}
INLINE vq vq_srli32(vq v, int n) {
    return _mm512_srli_epi32(v, n);
}
INLINE vq vq_slli32(vq v, int n) {
    return _mm512_slli_epi32(v, n);
}
INLINE vq vq_sllv32(vq v, vq n) {
    return _mm512_sllv_epi32(v, n);
}
INLINE vq vq_loadu(const void *p) {
    return _mm512_loadu_si512(p);
}
INLINE void vq_storeu(void *p, vq v) {
    _mm512_storeu_si512(p, v);
}
/* p aligned to the vector */
INLINE void vq_store(void *p, vq v) {
    _mm512_store_si512(p, v);
}
INLINE vf vf_zero(void) {
    return _mm512_setzero_ps();
}
INLINE vf vf_set(float f) {
    return _mm512_set1_ps(f);
}
INLINE vf vf_mul(vf a, vf b) {
    return _mm512_mul_ps(a, b);
}
INLINE vf vf_sub(vf a, vf b) {
    return _mm512_sub_ps(a, b);
}
/* a * b + c */
INLINE vf vf_fmadd(vf a, vf b, vf c) {
    return _mm512_fmadd_ps(a, b, c);
}
INLINE vf vf_of_i32(vq v) {
    return _mm512_cvtepi32_ps(v);
}
INLINE vf vf_cast(vq v) {
    return _mm512_castsi512_ps(v);
}
/* p aligned to the vector */
INLINE void vf_store(float *p, vf v) {
    _mm512_store_ps(p, v);
}

/* The cache line at p into L2. */
INLINE void prefetch_l2(const void *p) {
    _mm_prefetch((const char *)p, _MM_HINT_T1);
}

/* The 4 bytes at p + r rb in lane r. */
INLINE vq vq_gather32(const uint8_t *p, int64_t rb) {
    const __m512i idx =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32((int32_t)rb));
    return _mm512_i32gather_epi32(idx, p, 1);
}

/* R consecutive 16-bit or 8-bit numbers, zero-extended, one per lane. */
INLINE vq vq_load_u16(const uint8_t *p) {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
}
INLINE vq vq_load_u8(const uint8_t *p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

/* R consecutive fp16 numbers as floats. */
INLINE vf vf_load_f16(const uint8_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* The fp16 number in the low (hi = 0) or high half of each lane. */
INLINE vf vf_f16_of(vq g, int hi) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hi ? _mm512_srli_epi32(g, 16) : g));
}

/* The low 16 bits or the low byte of each lane, R of them stored at p. */
INLINE void vq_store_lo16(uint8_t *p, vq g) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(g));
}
INLINE void vq_store_lo8(uint8_t *p, vq g) {
    _mm_storeu_si128((__m128i *)p,
                     _mm512_cvtepi32_epi8(_mm512_and_si512(g, _mm512_set1_epi32(0xFF))));
}

/* Per lane: b where a's lane e is below lim, else a. */
INLINE vq vq_blend_lt32(vq e, int32_t lim, vq a, vq b) {
    return _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(lim)), a, b);
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
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(lut), idx);
}

/* x in each byte of v that has the bit m set, else 0 (m: one bit). */
INLINE vq vq_bit_to(vq v, char m, char x) {
    return _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(v, _mm512_set1_epi8(m)),
                                 _mm512_set1_epi8(x));
}

/* 0x10 in byte k of lane r where bit 4j + k of qh[r] is set (the Q5 fifth bits of
 * 4-byte group j): a 16-entry table indexed by the nibble. */
INLINE vq q5_high(vq qh, int j) {
    const __m512i lut =
        _mm512_set_epi32(0x10101010, 0x10101000, 0x10100010, 0x10100000, 0x10001010, 0x10001000,
                         0x10000010, 0x10000000, 0x00101010, 0x00101000, 0x00100010, 0x00100000,
                         0x00001010, 0x00001000, 0x00000010, 0x00000000);
    return _mm512_permutexvar_epi32(_mm512_srli_epi32(qh, 4 * j), lut);
}

/* The transposes: row r at p[r]; d[j] = 4-byte group j of the 16 bytes of every row
 * (row r in lane r). Broadcast loads with merge masks put rows i, i+4, i+8, i+12 in a[i]
 * and keep the shuffle port free; the unpacks then give the rows in order. */
INLINE void transpose_rows16(const uint8_t *const p[R], vq d[4]) {
    __m512i a[4];
#pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        __m512i z = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p[i]));
        z = _mm512_mask_broadcast_i32x4(z, 0x00F0, _mm_loadu_si128((const __m128i *)p[i + 4]));
        z = _mm512_mask_broadcast_i32x4(z, 0x0F00, _mm_loadu_si128((const __m128i *)p[i + 8]));
        a[i] = _mm512_mask_broadcast_i32x4(z, 0xF000, _mm_loadu_si128((const __m128i *)p[i + 12]));
    }
    const __m512i t0 = _mm512_unpacklo_epi32(a[0], a[1]), t1 = _mm512_unpackhi_epi32(a[0], a[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(a[2], a[3]), t3 = _mm512_unpackhi_epi32(a[2], a[3]);
    d[0] = _mm512_unpacklo_epi64(t0, t2);
    d[1] = _mm512_unpackhi_epi64(t0, t2);
    d[2] = _mm512_unpacklo_epi64(t1, t3);
    d[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* g[j] = 4-byte group j of the 32 bytes of every row: two 8x8 transposes of 32-bit
 * words, one per 256-bit half, rows i | i+4 and 8+i | 12+i in z[i] and z[4 + i], so
 * that the last shuffles give the rows in order. */
INLINE void transpose_rows32(const uint8_t *const p[R], vq g[8]) {
    __m512i z[8], t[8], u[8];
#pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p[i])),
                                  _mm256_loadu_si256((const __m256i *)p[i + 4]), 1);
        z[4 + i] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p[8 + i])),
            _mm256_loadu_si256((const __m256i *)p[12 + i]), 1);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        g[i] = _mm512_shuffle_i32x4(u[i], u[4 + i], 0x88);
        g[4 + i] = _mm512_shuffle_i32x4(u[i], u[4 + i], 0xDD);
    }
}

#endif /* AL_CPU_SIMD_AVX512_H */
