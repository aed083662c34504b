/* kernels_avx2.c: the CPU kernels for AVX2 with FMA and F16C.
 *
 * Compiled for AVX2 by the target pragma below, whatever the build's flags; cpu.c
 * calls it only when CPUID says the CPU has these extensions.
 *
 * The same algorithms as kernels_avx512.c (see there and ops.h) on 8 lanes: panels of
 * R = 8 rows, activation tiles of TT = 4 tokens (the attention kernel lives in
 * attn_avx2.c, float weights and the per-row ops in float_avx2.c). AVX2 has no
 * vpdpbusd: vpmaddubsw multiplies unsigned weights by signed activations into pairs
 * of int16, and vpmaddwd against ones widens them to int32.
 * The pairs of cpu_n16 groups (8 for 4-bit weights, 4 for 5, 2 for 6) are added in
 * int16 first. Q8_0 fits no such bound, so its panels keep signed weights and the
 * kernel moves each weight's sign onto the activation (vpsignb) instead.
 *
 * Weights in the x16 layout (ops.h) are read as two panels of 8 rows per group of 16,
 * one after the other by the same thread, and a few tokens read them in place, as on
 * AVX-512: packing each panel per generated token had been two thirds of a decode's
 * time on a Zen 2 (bench-1b Q4_0: 20.6 -> 36-37 t/s, 39% -> 71-73% of the roofline).
 */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma,f16c")
#endif

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "avx2.h"
#include "ops.h"
#include "format/quant.h"
#include "util.h"

enum { LANES = 8 };

INLINE int32_t load_i32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

INLINE float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* ---- activations ----------------------------------------------------------------------- */

/* Writes one group of quantized activations (q[n], effective scale d) into a tile,
 * with ds = d * sum(q) per sub-block of b. */
INLINE int sum_i8x16(__m128i v) {
    /* sad against 0 sums unsigned bytes: shift the signed ones by 128 first */
    const __m128i s =
        _mm_sad_epu8(_mm_xor_si128(v, _mm_set1_epi8((char)0x80)), _mm_setzero_si128());
    return _mm_cvtsi128_si32(s) + _mm_extract_epi32(s, 2) - 16 * 128;
}

INLINE void put_group(const int8_t *q, int n, float d, cpu_act_fmt f, uint8_t *tile, int slot,
                      int tt) {
    const int b = f.b;
    for (int s0 = 0; s0 < n; s0 += b) {
        uint8_t *sb = tile + (s0 / b) * cpu_sb_bytes(tt, b);
        int sum = sum_i8x16(_mm_loadu_si128((const __m128i *)(q + s0)));
        if (b == 32) sum += sum_i8x16(_mm_loadu_si128((const __m128i *)(q + s0 + 16)));
        for (int g = 0; g < b / 4; g++)
            memcpy(sb + (g * tt + slot) * 4, q + s0 + 4 * g, 4);
        float *da = (float *)(sb + tt * b);
        da[slot] = d;
        /* the aux word (ops.h) */
        if (f.offset) {
            const int32_t z = -f.offset * sum;
            memcpy(da + tt + slot, &z, 4);
        } else {
            da[tt + slot] = f.group == 32 ? d * (float)sum : (float)sum;
        }
    }
}

/* 8 int32 -> 8 int8 (values within int8 range). */
INLINE __m128i pack_i8x8(__m256i v) {
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return _mm_packs_epi16(w, w);
}

/* As quantize_scalar, bit for bit: the same divisions, round-to-nearest-even. */
static void quantize_avx2(const float *x, int64_t n, cpu_act_fmt f, uint8_t *tile, int slot,
                          int tt) {
    const int group = f.group, b = f.b;
    _Alignas(32) int8_t q[256 + 8];
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    for (int64_t g0 = 0; g0 < n; g0 += group, x += group) {
        __m256 am = _mm256_setzero_ps();
        for (int v = 0; v < group; v += 8)
            am = _mm256_max_ps(am, _mm256_and_ps(_mm256_loadu_ps(x + v), abs_mask));
        const float amax = hmax8(am);
        float mul = 0, d;
        if (group == 32) {
            mul = amax != 0 ? 127.0f / amax : 0.0f;
            d = f.exact_scale ? amax / 127.0f
                              : _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
        } else if (amax != 0) {
            /* the first element of largest magnitude, with its sign */
            int at = 0;
            while (fabsf(x[at]) != amax)
                at++;
            mul = -127.0f / x[at];
            d = 1.0f / mul;
        } else {
            d = 0;
        }
        for (int v = 0; v < group; v += 8) {
            __m256i qi =
                _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + v), _mm256_set1_ps(mul)));
            if (group != 32) qi = _mm256_min_epi32(qi, _mm256_set1_epi32(127));
            _mm_storel_epi64((__m128i *)(q + v), pack_i8x8(qi));
        }
        put_group(q, group, d, f, tile + (g0 / b) * cpu_sb_bytes(tt, b), slot, tt);
    }
}

/* ---- packing quantized weights ------------------------------------------------------- */
/* As in kernels_avx512.c: each pack reads the blocks of 8 rows in place and transposes
 * them in registers, 4-byte groups of quants into one ymm per group (row r in lane r);
 * the scales of 8 rows arrive in one vpgatherdd. Q8_0 keeps its weights signed (see
 * the header comment). */

/* Bytes ahead of the pack in each row that it prefetches (into L2: 16 streams need more
 * requests in flight than L1 can track). The rows of a panel are R interleaved
 * streams, which the hardware prefetchers do not follow. */
enum { PF_AHEAD = 384 };

typedef struct rows8 {
    const uint8_t *b[2]; /* rows 4k..4k+3 start at b[k] + {0, 1, 2, 3} * rb */
    int64_t rb, rb3;     /* row stride and 3 times it: a few registers address all rows */
    int64_t skip;        /* bytes from the start of each row to b[k] */
    /* AL_LAYOUT_X16 (ops.h): byte off of the rows (from skip) lies in the unit of the
     * group's row 0 at pk + 16 off, and the panel is half `half` of its group of 16
     * rows, whose units follow the first half's 8 */
    bool x16;
    int half;
    const uint8_t *pk;
    int64_t len; /* an in-place GEMV's bytes per row (prefetch_rows), else 0 */
} rows8;

/* w: the panel's row 0; with x16, row0 is that row's place in its group (0 or 8). x16
 * is a constant at every call, so each kernel compiles once per layout. */
INLINE void rows_init(rows8 *rs, const uint8_t *w, uint64_t row_bytes, int64_t skip, bool x16,
                      int row0) {
    rs->rb = (int64_t)row_bytes;
    rs->rb3 = 3 * rs->rb;
    rs->skip = skip;
    for (int k = 0; k < 2; k++)
        rs->b[k] = w + 4 * k * rs->rb + skip;
    rs->x16 = x16;
    rs->half = row0 / R;
    rs->len = 0;
    rs->pk = w - (int64_t)row0 * rs->rb + 16 * skip;
}

INLINE const uint8_t *row_at(const rows8 *rs, int r, int64_t off) {
    const int i = r % 4;
    return rs->b[r / 4] + off + (i == 0 ? 0 : i == 1 ? rs->rb : i == 2 ? 2 * rs->rb : rs->rb3);
}

/* x16: this panel's 8 units of a field of unit-byte units at off. */
INLINE const uint8_t *x16_at(const rows8 *rs, int64_t off, int unit) {
    return rs->pk + 16 * off + R * unit * rs->half;
}

/* A prefetch into L2 (prefetcht1) that the compiler leaves where the code puts it.
 * _mm_prefetch depends on nothing, and GCC scheduled the 28 of an unrolled Q6_K
 * super-block, meant to go out a quarter at a time, together at its start: the memory
 * then idled while the super-block was computed. A Q6_K GEMV (8192 x 2048) from DRAM
 * on two Zen 2 cores took 0.98-1.19 ms that way, 0.68-0.73 ms with the prefetches where
 * they were put. */
INLINE void prefetch_pinned(const uint8_t *p) {
    __asm__ volatile("prefetcht1 %0" : : "m"(*p));
}

/* Prefetches n_lines cache lines PF_AHEAD bytes ahead in every row; near the end of
 * the rows, in the next panel's rows (R rows further on), which come next.
 *
 * With x16 the rows are one stream, of which the caller reads the span bytes per row
 * before its next call, and the two halves of a group read the same lines, one after
 * the other (mm_grain_x16). Only Q6_K's in-place GEMV (len: its bytes per row) and the
 * packs (len 0) prefetch there. The GEMV prefetches half a group ahead, each half in
 * step with its own progress: half 0 the second half of its group's bytes, half 1 the
 * first half of the next group's (when only the first half had fetched ahead, the
 * memory idled while the second worked from L2: 11 GB/s from DRAM on one Zen 2 core,
 * 14.4 GB/s with both). A pack prefetches PF_AHEAD ahead in the first half.
 *
 * The in-place GEMV of the legacy types and Q4_K/Q5_K over x16 prefetches nothing, as
 * on AVX-512 (kernels_avx512.c): the hardware prefetchers follow its stream. On a
 * 2-core Zen 4 running these kernels (ANYLLM_ISA=avx2), alternating tg64 runs,
 * bench-1b Q4_0 went from 57-83% of the roofline to 82-93% without them, Q8_0 from
 * 62-88% to 92-97%, Q4_K_M from 61-80% to 68-91%. (On two Zen 2 cores, prefetching
 * half a group ahead into L1 alone had beaten other placements, 83-89% -> 87-92% on
 * bench-1b Q4_0; none was not tried there.) Q6_K, read out of order, keeps them. */
INLINE void prefetch_rows(const rows8 *rs, int64_t off, int n_lines, int span) {
    if (rs->x16) {
        /* a constant count of lines from p, which cover its bytes wherever they start
         * (a loop over the aligned lines had been ~13 instructions per Q4_0 block, a
         * fifth of the GEMV's) */
        if (rs->len) {
            const uint8_t *p = rs->pk + 8 * rs->rb + 8 * (rs->half * rs->len + off);
#pragma GCC unroll 32
            for (int k = 0; k <= 8 * span / 64; k++)
                prefetch_pinned(p + 64 * k);
        } else if (!rs->half) {
            const uint8_t *p = rs->pk + 16 * (off + PF_AHEAD);
#pragma GCC unroll 64
            for (int k = 0; k <= 16 * span / 64; k++)
                _mm_prefetch((const char *)(p + 64 * k), _MM_HINT_T1);
        }
        return;
    }
    const int64_t at = off + PF_AHEAD + (rs->skip + off + PF_AHEAD >= rs->rb ? 7 * rs->rb : 0);
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int l = 0; l < n_lines; l++)
            _mm_prefetch((const char *)row_at(rs, r, at + 64 * l), _MM_HINT_T1);
}

/* The 4 bytes at offset off of every row (with x16, a field of 4-byte units). */
INLINE __m256i gather32(const rows8 *rs, int64_t off) {
    if (rs->x16) return _mm256_loadu_si256((const __m256i *)x16_at(rs, off, 4));
    const __m256i idx = _mm256_mullo_epi32(_mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm256_set1_epi32((int32_t)rs->rb));
    return _mm256_i32gather_epi32((const int *)(rs->b[0] + off), idx, 1);
}

/* The fp16 number in the low (hi = 0) or high half of gather32. */
INLINE __m256 gather_f16(__m256i g, int hi) {
    const __m256i v =
        hi ? _mm256_srli_epi32(g, 16) : _mm256_and_si256(g, _mm256_set1_epi32(0xFFFF));
    return _mm256_cvtph_ps(
        _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

/* The fp16 number at offset off of every row. */
INLINE __m256 gather_d(const rows8 *rs, int64_t off) {
    if (rs->x16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)x16_at(rs, off, 2)));
    return gather_f16(gather32(rs, off), 0);
}

/* The two fp16 numbers at off and off + 2 of every row, as gather32 has them. */
INLINE __m256i gather_2xf16(const rows8 *rs, int64_t off) {
    if (!rs->x16) return gather32(rs, off);
    const __m256i lo = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)x16_at(rs, off, 2)));
    const __m256i hi =
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)x16_at(rs, off + 2, 2)));
    return _mm256_or_si256(lo, _mm256_slli_epi32(hi, 16));
}

/* The byte at off of every row in the low byte of its lane (the other bytes: x16 zero,
 * else what follows it). */
INLINE __m256i gather_u8(const rows8 *rs, int64_t off) {
    if (!rs->x16) return gather32(rs, off);
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)x16_at(rs, off, 1)));
}

/* d[j] = 4-byte group j of the 16 bytes at off, for every row. */
INLINE void load_8x16(const rows8 *rs, int64_t off, __m256i d[4]) {
    if (rs->x16) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            d[j] = gather32(rs, off + 4 * j);
        return;
    }
    __m256i a[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) /* lanes: rows i and i+4 */
        a[i] = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)row_at(rs, i, off))),
            _mm_loadu_si128((const __m128i *)row_at(rs, i + 4, off)), 1);
    const __m256i t0 = _mm256_unpacklo_epi32(a[0], a[1]), t1 = _mm256_unpackhi_epi32(a[0], a[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(a[2], a[3]), t3 = _mm256_unpackhi_epi32(a[2], a[3]);
    d[0] = _mm256_unpacklo_epi64(t0, t2);
    d[1] = _mm256_unpackhi_epi64(t0, t2);
    d[2] = _mm256_unpacklo_epi64(t1, t3);
    d[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* g[j] = 4-byte group j of the 32 bytes at off, for every row: an 8x8 transpose of
 * 32-bit words. */
INLINE void load_8x32(const rows8 *rs, int64_t off, __m256i g[8]) {
    if (rs->x16) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            g[j] = gather32(rs, off + 4 * j);
        return;
    }
    __m256i r[8], t[8], u[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_si256((const __m256i *)row_at(rs, i, off));
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

INLINE __m256i lo4(__m256i v) {
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}
INLINE __m256i hi4(__m256i v) {
    return lo4(_mm256_srli_epi16(v, 4));
}

INLINE void store_q(uint8_t *q, int j, __m256i v) {
    _mm256_store_si256((__m256i *)(q + 32 * j), v);
}

INLINE void store_scales(uint8_t *sb, int b, __m256 dw, __m256 m) {
    _mm256_store_ps((float *)(sb + R * b), dw);
    _mm256_store_ps((float *)(sb + R * b) + R, m);
}

/* 0x10 in byte k of lane r where bit 4j + k of qh[r] is set (the Q5 fifth bits of
 * 4-byte group j): the lane's nibble copied to its 4 bytes, each testing one bit. */
INLINE __m256i q5_high(__m256i qh, int j) {
    const __m256i rep = _mm256_set_epi8(12, 12, 12, 12, 8, 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0, 12, 12,
                                        12, 12, 8, 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0);
    const __m256i sel = _mm256_set1_epi32(0x08040201);
    const __m256i x = _mm256_shuffle_epi8(_mm256_srli_epi32(qh, 4 * j), rep);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(x, sel), sel);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

/* MXFP4's dw, half the E8M0 scale (quant_e8m0_half), from the scale byte in the low
 * byte of each lane: the exponent field e - 1, or for e < 2 the subnormal whose bits
 * are 0x00200000 << e. */
INLINE __m256 e8m0_half8(__m256i head) {
    const __m256i e = _mm256_and_si256(head, _mm256_set1_epi32(0xFF));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small));
}

/* MXFP4 codes (one per byte, 0..15) -> u = quant_mxfp4_values[code] + 12 (0..24). */
INLINE __m256i mxfp4_u(__m256i codes) {
    const __m128i lut = _mm_add_epi8(_mm_loadu_si128((const __m128i *)quant_mxfp4_values),
                                     _mm_set1_epi8(12));
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(lut), codes);
}

/* The legacy types: blocks of 32 with the quants at qs_off, fp16 d (and m) first;
 * MXFP4 has its scale byte first. */
enum { Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 };
static const int g_legacy_size[] = {18, 20, 22, 24, 34, 17}, g_legacy_qs[] = {2, 4, 6, 8, 2, 1};

/* Block i of 8 rows as the panel holds it: q[j] is 4-byte group j of the quants (row r
 * in lane r; unsigned, but Q8_0's signed), dw and m the scales of ops.h. */
INLINE void legacy_block(int kind, const rows8 *rs, int64_t i, __m256i q[8], __m256 *dw,
                         __m256 *m) {
    const int64_t off = i * g_legacy_size[kind];
    if (!(i & 1) && !rs->x16) /* two blocks are at most 68 bytes; x16: see prefetch_rows */
        prefetch_rows(rs, off, 1, 2 * g_legacy_size[kind]);
    const bool has_m = kind == Q4_1 || kind == Q5_1;
    const __m256i head = has_m           ? gather_2xf16(rs, off)
                         : kind == MXFP4 ? gather_u8(rs, off)
                                         : _mm256_setzero_si256();
    const __m256 d = kind == MXFP4 ? e8m0_half8(head)
                     : has_m       ? gather_f16(head, 0)
                                   : gather_d(rs, off);
    *dw = d;
    if (kind == Q8_0) {
        load_8x32(rs, off + 2, q);
        *m = _mm256_setzero_ps();
        return;
    }
    __m256i h[4];
    load_8x16(rs, off + g_legacy_qs[kind], h);
    if (kind == Q5_0 || kind == Q5_1) {
        const __m256i qh = gather32(rs, off + (kind == Q5_0 ? 2 : 4));
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            q[j] = _mm256_or_si256(lo4(h[j]), q5_high(qh, j));
            q[4 + j] = _mm256_or_si256(hi4(h[j]), q5_high(qh, 4 + j));
        }
    } else if (kind == MXFP4) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            q[j] = mxfp4_u(lo4(h[j]));
            q[4 + j] = mxfp4_u(hi4(h[j]));
        }
    } else {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            q[j] = lo4(h[j]);
            q[4 + j] = hi4(h[j]);
        }
    }
    /* m = -offset * dw, as the portable decoders write it */
    const float neg_offset = kind == Q4_0 ? -8.0f : kind == MXFP4 ? -12.0f : -16.0f;
    *m = has_m ? gather_f16(head, 1) : _mm256_mul_ps(d, _mm256_set1_ps(neg_offset));
}

INLINE void pack_legacy(int kind, const uint8_t *w, uint64_t row_bytes, int64_t blk0, int64_t n_blk,
                        uint8_t *panel, bool x16, int row0) {
    rows8 rs;
    rows_init(&rs, w, row_bytes, blk0 * g_legacy_size[kind], x16, row0);
    for (int64_t i = 0; i < n_blk; i++, panel += cpu_sb_bytes(R, 32)) {
        __m256i q[8];
        __m256 dw, m;
        legacy_block(kind, &rs, i, q, &dw, &m);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            store_q(panel, j, q[j]);
        store_scales(panel, 32, dw, m);
    }
}

/* A panel short of 8 rows (the last of a matrix) takes the portable pack; an x16
 * weight has none (cpu_x16_fits). */
#define PACK_LEGACY(name, kind)                                                                    \
    static void name(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows,              \
                     int64_t blk0, int64_t n_blk, uint8_t *panel) {                                \
        if (n_rows < R)                                                                            \
            cpu_pack_q_generic(type, R, w, row_bytes, n_rows, blk0, n_blk, panel);                 \
        else                                                                                       \
            pack_legacy(kind, w, row_bytes, blk0, n_blk, panel, false, 0);                         \
    }                                                                                              \
    static void name##_x16(uint32_t type, const uint8_t *w, uint64_t row_bytes, int row0,          \
                           int64_t blk0, int64_t n_blk, uint8_t *panel) {                          \
        (void)type;                                                                                \
        pack_legacy(kind, w, row_bytes, blk0, n_blk, panel, true, row0);                           \
    }
PACK_LEGACY(pack_q4_0, Q4_0)
PACK_LEGACY(pack_q4_1, Q4_1)
PACK_LEGACY(pack_q5_0, Q5_0)
PACK_LEGACY(pack_q5_1, Q5_1)
PACK_LEGACY(pack_mxfp4, MXFP4)

/* Q8_0 panels hold signed weights: the portable pack's u = w + 128 and m = -128 dw
 * are undone for a short panel. */
static void pack_q8_0(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows, int64_t blk0,
                      int64_t n_blk, uint8_t *panel) {
    if (n_rows == R) {
        pack_legacy(Q8_0, w, row_bytes, blk0, n_blk, panel, false, 0);
        return;
    }
    cpu_pack_q_generic(type, R, w, row_bytes, n_rows, blk0, n_blk, panel);
    for (int64_t i = 0; i < n_blk; i++) {
        uint8_t *sb = panel + i * cpu_sb_bytes(R, 32);
        for (int j = 0; j < 8; j++)
            store_q(sb, j,
                    _mm256_xor_si256(_mm256_load_si256((const __m256i *)(sb + 32 * j)),
                                     _mm256_set1_epi8((char)0x80)));
        _mm256_store_ps((float *)(sb + R * 32) + R, _mm256_setzero_ps());
    }
}

static void pack_q8_0_x16(uint32_t type, const uint8_t *w, uint64_t row_bytes, int row0,
                          int64_t blk0, int64_t n_blk, uint8_t *panel) {
    (void)type;
    pack_legacy(Q8_0, w, row_bytes, blk0, n_blk, panel, true, row0);
}

/* ---- the x16 rewrite at load ------------------------------------------------------------ */
/* cpu_x16_pack's bytes, two halves of 8 rows at a time: 32- and 16-byte runs of a 4-byte
 * field come transposed (load_8x32, load_8x16), the rest as gathers; a 2-byte unit is
 * the low half of a gather, or the high half of the one 2 bytes before when the field
 * ends the block (the gather would read past the last row's end), a 1-byte unit its
 * low byte. Much faster than cpu_x16_pack, which matters for a model of many GB. */
INLINE void x16_field_avx2(const rows8 rs[2], int64_t off, const cpu_x16_field *f, int bs,
                           uint8_t *dst) {
    int k = 0;
    if (f->unit == 4) {
        for (; k + 32 <= f->size; k += 32)
            for (int h = 0; h < 2; h++) {
                __m256i g[8];
                load_8x32(&rs[h], off + f->off + k, g);
                for (int j = 0; j < 8; j++)
                    _mm256_storeu_si256((__m256i *)(dst + 16 * (f->off + k + 4 * j) + 32 * h),
                                        g[j]);
            }
        for (; k + 16 <= f->size; k += 16)
            for (int h = 0; h < 2; h++) {
                __m256i g[4];
                load_8x16(&rs[h], off + f->off + k, g);
                for (int j = 0; j < 4; j++)
                    _mm256_storeu_si256((__m256i *)(dst + 16 * (f->off + k + 4 * j) + 32 * h),
                                        g[j]);
            }
        for (; k < f->size; k += 4)
            for (int h = 0; h < 2; h++)
                _mm256_storeu_si256((__m256i *)(dst + 16 * (f->off + k) + 32 * h),
                                    gather32(&rs[h], off + f->off + k));
        return;
    }
    for (; k < f->size; k += f->unit) {
        const int o = f->off + k;
        for (int h = 0; h < 2; h++) {
            __m256i g = f->unit == 2 && o + 4 > bs
                            ? _mm256_srli_epi32(gather32(&rs[h], off + o - 2), 16)
                            : gather32(&rs[h], off + o);
            g = _mm256_and_si256(g, _mm256_set1_epi32(f->unit == 2 ? 0xFFFF : 0xFF));
            const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(g),
                                               _mm256_extracti128_si256(g, 1));
            if (f->unit == 2)
                _mm_storeu_si128((__m128i *)(dst + 16 * o + 16 * h), w);
            else
                _mm_storel_epi64((__m128i *)(dst + 16 * o + 8 * h), _mm_packus_epi16(w, w));
        }
    }
}

static void x16_pack_avx2(uint32_t type, const uint8_t *src, uint8_t *dst, uint64_t row_bytes,
                          int64_t n_blk, int64_t g0, int64_t g1) {
    const cpu_x16_type *t = cpu_x16_of(type);
    AL_ASSERT(t && (uint64_t)n_blk * (uint64_t)t->block_bytes == row_bytes);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *s = src + (uint64_t)g * 16 * row_bytes;
        rows8 rs[2];
        rows_init(&rs[0], s, row_bytes, 0, false, 0);
        rows_init(&rs[1], s + 8 * row_bytes, row_bytes, 0, false, 0);
        uint8_t *d = dst + (uint64_t)g * 16 * row_bytes;
        for (int64_t b = 0; b < n_blk; b++) {
            const int64_t off = b * t->block_bytes;
            prefetch_rows(&rs[0], off, 1, 0);
            prefetch_rows(&rs[1], off, 1, 0);
            for (int i = 0; i < t->n_fields; i++)
                x16_field_avx2(rs, off, &t->f[i], t->block_bytes, d + 16 * off);
        }
    }
}

INLINE __m256i byte_of(__m256i v, int k) {
    if (k == 3) return _mm256_srli_epi32(v, 24);
    return _mm256_and_si256(_mm256_srli_epi32(v, 8 * k), _mm256_set1_epi32(0xFF));
}

/* The 8 scales and mins of Q4_K/Q5_K for 8 rows (the layout of quant.c k4_scale_min). */
INLINE void k4_scales8(const rows8 *rs, int64_t off, uint8_t *pb) {
    const __m256i dd = gather_2xf16(rs, off);
    const __m256 d = gather_f16(dd, 0), dmin = gather_f16(dd, 1);
    const __m256i s0 = gather32(rs, off + 4), s1 = gather32(rs, off + 8),
                  s2 = gather32(rs, off + 12);
    /* all 8 bytes at once: byte k of sc_lo, mn_lo is scale, min k; of sc_hi, mn_hi scale,
     * min 4 + k (low 4 bits from s2's nibbles, high 2 from the top of s0's, s1's bytes:
     * the 16-bit shifts move a byte's bits 6..7 to 4..5, and the masks drop what the
     * next byte shifted in) */
    const __m256i m63 = _mm256_set1_epi8(63), m15 = _mm256_set1_epi8(15);
    const __m256i m48 = _mm256_set1_epi8(48);
    const __m256i sc_lo = _mm256_and_si256(s0, m63), mn_lo = _mm256_and_si256(s1, m63);
    const __m256i sc_hi = _mm256_or_si256(_mm256_and_si256(s2, m15),
                                          _mm256_and_si256(_mm256_srli_epi16(s0, 2), m48));
    const __m256i mn_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(s2, 4), m15),
                                          _mm256_and_si256(_mm256_srli_epi16(s1, 2), m48));
    const __m256 ndmin = _mm256_sub_ps(_mm256_setzero_ps(), dmin);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        const __m256i sc = byte_of(j < 4 ? sc_lo : sc_hi, j % 4);
        const __m256i mn = byte_of(j < 4 ? mn_lo : mn_hi, j % 4);
        store_scales(pb + j * cpu_sb_bytes(R, 32), 32, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)),
                     _mm256_mul_ps(ndmin, _mm256_cvtepi32_ps(mn)));
    }
}

/* Chunk c of a Q4_K/Q5_K super-block at off (4 chunks of 32 bytes): the unsigned
 * quants of sub-blocks 2c (low nibbles, u0) and 2c + 1 (high, u1); h: Q5_K's fifth
 * bits (bit s of byte l is that of element l of sub-block s). */
INLINE void k45_chunk(bool five, const rows8 *rs, int64_t off, int c, const __m256i h[8],
                      __m256i u0[8], __m256i u1[8]) {
    const __m256i b16 = _mm256_set1_epi8(0x10);
    const __m256i m0 = _mm256_set1_epi8((char)(1 << (2 * c))),
                  m1 = _mm256_set1_epi8((char)(2 << (2 * c)));
    __m256i g[8];
    load_8x32(rs, off + (five ? 48 : 16) + 32 * c, g);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        u0[j] = lo4(g[j]);
        u1[j] = hi4(g[j]);
        if (five) {
            u0[j] = _mm256_or_si256(
                u0[j], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h[j], m0), m0), b16));
            u1[j] = _mm256_or_si256(
                u1[j], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h[j], m1), m1), b16));
        }
    }
}

INLINE void pack_k45(bool five, const uint8_t *w, uint64_t row_bytes, int64_t blk0, int64_t n_blk,
                     uint8_t *panel, bool x16, int row0) {
    const int64_t t = five ? 176 : 144, sbb = cpu_sb_bytes(R, 32);
    rows8 rs;
    rows_init(&rs, w, row_bytes, blk0 * t, x16, row0);
    for (int64_t i = 0; i < n_blk; i++, panel += 8 * sbb) {
        const int64_t off = i * t;
        prefetch_rows(&rs, off, 3, (int)t);
        k4_scales8(&rs, off, panel);
        __m256i h[8];
        if (five) load_8x32(&rs, off + 16, h);
        for (int c = 0; c < 4; c++) {
            __m256i u0[8], u1[8];
            k45_chunk(five, &rs, off, c, h, u0, u1);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                store_q(panel + 2 * c * sbb, j, u0[j]);
                store_q(panel + (2 * c + 1) * sbb, j, u1[j]);
            }
        }
    }
}

static void pack_q4_k(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows, int64_t blk0,
                      int64_t n_blk, uint8_t *panel) {
    if (n_rows < R)
        cpu_pack_q_generic(type, R, w, row_bytes, n_rows, blk0, n_blk, panel);
    else
        pack_k45(false, w, row_bytes, blk0, n_blk, panel, false, 0);
}

static void pack_q5_k(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows, int64_t blk0,
                      int64_t n_blk, uint8_t *panel) {
    if (n_rows < R)
        cpu_pack_q_generic(type, R, w, row_bytes, n_rows, blk0, n_blk, panel);
    else
        pack_k45(true, w, row_bytes, blk0, n_blk, panel, false, 0);
}

static void pack_q4_k_x16(uint32_t type, const uint8_t *w, uint64_t row_bytes, int row0,
                          int64_t blk0, int64_t n_blk, uint8_t *panel) {
    (void)type;
    pack_k45(false, w, row_bytes, blk0, n_blk, panel, true, row0);
}

static void pack_q5_k_x16(uint32_t type, const uint8_t *w, uint64_t row_bytes, int row0,
                          int64_t blk0, int64_t n_blk, uint8_t *panel) {
    (void)type;
    pack_k45(true, w, row_bytes, blk0, n_blk, panel, true, row0);
}

/* Q6_K: element 32g + l of half `half` (g < 4, l < 32) is a nibble of ql column g % 2
 * (bytes 64 half + 32 (g % 2) + l; the high nibble for g >= 2) and bits 2g..2g+1 of qh
 * byte 32 half + l. Group j of the 4-byte groups of a column, l = 4j..4j+3, is group j
 * % 4 of sub-block 8 half + 2 g + j / 4; sub-blocks of 16 have signed 8-bit scales. */
INLINE __m256i q6_u(__m256i l, __m256i h, int g) {
    const __m256i top = _mm256_set1_epi8(0x30);
    switch (g) {
    case 0: return _mm256_or_si256(lo4(l), _mm256_and_si256(_mm256_slli_epi16(h, 4), top));
    case 1: return _mm256_or_si256(lo4(l), _mm256_and_si256(_mm256_slli_epi16(h, 2), top));
    case 2: return _mm256_or_si256(hi4(l), _mm256_and_si256(h, top));
    default: return _mm256_or_si256(hi4(l), _mm256_and_si256(_mm256_srli_epi16(h, 2), top));
    }
}

/* d: the high half of the 4 bytes at 206 (208 would read past the block); x16 has it
 * as a field of its own at 208. */
INLINE __m256 q6_d(const rows8 *rs, int64_t off) {
    return rs->x16 ? gather_d(rs, off + 208) : gather_f16(gather32(rs, off + 206), 1);
}

/* dw of sub-block s of the super-block at off. */
INLINE __m256 q6_dw(const rows8 *rs, int64_t off, __m256 d, int s) {
    const __m256i sc = gather32(rs, off + 192 + 4 * (s / 4));
    const __m256i top = s % 4 == 3 ? sc : _mm256_slli_epi32(sc, 24 - 8 * (s % 4));
    const __m256i v = _mm256_srai_epi32(top, 24);
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(v));
}

INLINE void pack_q6(const uint8_t *w, uint64_t row_bytes, int64_t blk0, int64_t n_blk,
                    uint8_t *panel, bool x16, int row0) {
    const int64_t sbb = cpu_sb_bytes(R, 16);
    rows8 rs;
    rows_init(&rs, w, row_bytes, blk0 * 210, x16, row0);
    for (int64_t i = 0; i < n_blk; i++, panel += 16 * sbb) {
        const int64_t off = i * 210;
        prefetch_rows(&rs, off, 4, 210);
        for (int half = 0; half < 2; half++) {
            __m256i l[8], h[8];
            load_8x32(&rs, off + 128 + 32 * half, h);
            for (int col = 0; col < 2; col++) {
                load_8x32(&rs, off + 64 * half + 32 * col, l);
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    store_q(panel + (8 * half + 2 * col + j / 4) * sbb, j % 4,
                            q6_u(l[j], h[j], col));
                    store_q(panel + (8 * half + 2 * (col + 2) + j / 4) * sbb, j % 4,
                            q6_u(l[j], h[j], col + 2));
                }
            }
        }
        const __m256 d = q6_d(&rs, off);
#pragma GCC unroll 16
        for (int s = 0; s < 16; s++) {
            const __m256 dw = q6_dw(&rs, off, d, s);
            store_scales(panel + s * sbb, 16, dw, _mm256_mul_ps(dw, _mm256_set1_ps(-32.0f)));
        }
    }
}

static void pack_q6_k(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows, int64_t blk0,
                      int64_t n_blk, uint8_t *panel) {
    if (n_rows < R)
        cpu_pack_q_generic(type, R, w, row_bytes, n_rows, blk0, n_blk, panel);
    else
        pack_q6(w, row_bytes, blk0, n_blk, panel, false, 0);
}

static void pack_q6_k_x16(uint32_t type, const uint8_t *w, uint64_t row_bytes, int row0,
                          int64_t blk0, int64_t n_blk, uint8_t *panel) {
    (void)type;
    pack_q6(w, row_bytes, blk0, n_blk, panel, true, row0);
}

/* Q2_K: per half, 2-bit quants in one 32-byte column, bits 2g..2g+1 of byte l being
 * element 32g + l; sub-blocks of 16 with a 4-bit scale and a 4-bit min. */
static void pack_q2_k(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows, int64_t blk0,
                      int64_t n_blk, uint8_t *panel) {
    if (n_rows < R) {
        cpu_pack_q_generic(type, R, w, row_bytes, n_rows, blk0, n_blk, panel);
        return;
    }
    const int64_t sbb = cpu_sb_bytes(R, 16);
    rows8 rs;
    rows_init(&rs, w, row_bytes, blk0 * 84, false, 0);
    for (int64_t i = 0; i < n_blk; i++, panel += 16 * sbb) {
        const int64_t off = i * 84;
        prefetch_rows(&rs, off, 2, 84);
        for (int half = 0; half < 2; half++) {
            __m256i q[8];
            load_8x32(&rs, off + 16 + 32 * half, q);
            for (int g = 0; g < 4; g++)
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    store_q(panel + (8 * half + 2 * g + j / 4) * sbb, j % 4,
                            _mm256_and_si256(_mm256_srli_epi16(q[j], 2 * g), _mm256_set1_epi8(3)));
        }
        const __m256i dd = gather32(&rs, off + 80);
        const __m256 d = gather_f16(dd, 0), dmin = gather_f16(dd, 1);
        for (int k = 0; k < 4; k++) {
            const __m256i sc = gather32(&rs, off + 4 * k);
#pragma GCC unroll 4
            for (int b = 0; b < 4; b++) {
                const __m256i v = byte_of(sc, b);
                store_scales(panel + (4 * k + b) * sbb, 16,
                             _mm256_mul_ps(
                                 d, _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)))),
                             _mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), dmin),
                                           _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4))));
            }
        }
    }
}

/* Q3_K: Q2_K's 2-bit columns plus a third bit from hmask (bit 4 * half + g of byte l),
 * u = lo + 4 * bit for lo - 4 + 4 * bit; 16 signed 6-bit scales. */
static void pack_q3_k(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows, int64_t blk0,
                      int64_t n_blk, uint8_t *panel) {
    if (n_rows < R) {
        cpu_pack_q_generic(type, R, w, row_bytes, n_rows, blk0, n_blk, panel);
        return;
    }
    const int64_t sbb = cpu_sb_bytes(R, 16);
    rows8 rs;
    rows_init(&rs, w, row_bytes, blk0 * 110, false, 0);
    for (int64_t i = 0; i < n_blk; i++, panel += 16 * sbb) {
        const int64_t off = i * 110;
        prefetch_rows(&rs, off, 2, 110);
        __m256i hm[8];
        load_8x32(&rs, off, hm);
        for (int half = 0; half < 2; half++) {
            __m256i q[8];
            load_8x32(&rs, off + 32 + 32 * half, q);
            for (int g = 0; g < 4; g++) {
                const int bit = 4 * half + g; /* moved to bit 2 of each byte */
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    const __m256i hb = bit >= 2 ? _mm256_srli_epi16(hm[j], bit - 2)
                                                : _mm256_slli_epi16(hm[j], 2 - bit);
                    store_q(panel + (8 * half + 2 * g + j / 4) * sbb, j % 4,
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q[j], 2 * g),
                                                             _mm256_set1_epi8(3)),
                                            _mm256_and_si256(hb, _mm256_set1_epi8(4))));
                }
            }
        }
        /* d is the high half of the 4 bytes at 106 (108 would read past the block) */
        const __m256 d = gather_f16(gather32(&rs, off + 106), 1);
        const __m256i s0 = gather32(&rs, off + 96), s1 = gather32(&rs, off + 100);
        const __m256i s2 = gather32(&rs, off + 104);
#pragma GCC unroll 16
        for (int s = 0; s < 16; s++) {
            /* the 6-bit scale s (see quant.c q3_k_scale), stored + 32 */
            const __m256i lo =
                s < 8 ? _mm256_and_si256(byte_of(s < 4 ? s0 : s1, s % 4), _mm256_set1_epi32(15))
                      : _mm256_srli_epi32(byte_of(s < 12 ? s0 : s1, s % 4), 4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(byte_of(s2, s % 4), 2 * (s / 4)),
                                                _mm256_set1_epi32(3));
            const __m256i v = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)),
                                               _mm256_set1_epi32(32));
            const __m256 dw = _mm256_mul_ps(d, _mm256_cvtepi32_ps(v));
            store_scales(panel + s * sbb, 16, dw, _mm256_mul_ps(dw, _mm256_set1_ps(-4.0f)));
        }
    }
}

/* ---- quantized microkernel ------------------------------------------------------------- */

INLINE __m256i bcast_group(const uint8_t *x, int g, int t, const int tt) {
    return _mm256_set1_epi32(load_i32(x + (g * tt + t) * 4));
}

/* v, or its low (nib 1) or high (nib 2) nibbles: taken where a group is multiplied, so
 * that one nibble's 8 vectors are not held beside the other's (they had spilled). */
INLINE __m256i nibbles(__m256i v, int nib) {
    return nib == 1 ? lo4(v) : nib == 2 ? hi4(v) : v;
}

/* The integer sums of one sub-block of b for nt tokens, the weights' 4-byte groups in
 * wq (nib 1: their low nibbles, 2: their high ones). With a constant offset they start
 * at the tile's -offset * sum(qa). sgn: the weights are signed. Unsigned weights sum
 * the pmaddubsw products of n16 groups in int16 (cpu_n16) before one pmaddwd widens
 * them: on Zen 2 both multiplies issue on one port, and for 4-bit weights this takes 9
 * of them per group of 8 where pairs took 12. x is slot 0 of a tile of tt tokens: TT,
 * or 1 or 2 for one token's narrow tile (cpu_mk_args.narrow). */
INLINE void mk_q_sums_w(const __m256i *wq, const uint8_t *x, const int nt, const int b, bool mins,
                        bool sgn, int n16, int nib, const int tt, __m256i is[TT]) {
    const __m256i ones = _mm256_set1_epi16(1);
    const int32_t *zq = (const int32_t *)(x + tt * b) + tt;
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        is[t] = mins ? _mm256_setzero_si256() : _mm256_set1_epi32(zq[t]);
    if (sgn) {
#pragma GCC unroll 4
        for (int g = 0; g < b / 4; g += 2) {
            const __m256i w0 = wq[g], w1 = wq[g + 1];
            /* |w| * (a with w's sign): no int16 pair may saturate */
            const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                const __m256i p0 =
                    _mm256_maddubs_epi16(a0, _mm256_sign_epi8(bcast_group(x, g, t, tt), w0));
                const __m256i p1 =
                    _mm256_maddubs_epi16(a1, _mm256_sign_epi8(bcast_group(x, g + 1, t, tt), w1));
                is[t] = _mm256_add_epi32(is[t], _mm256_add_epi32(_mm256_madd_epi16(p0, ones),
                                                                 _mm256_madd_epi16(p1, ones)));
            }
        }
        return;
    }
#pragma GCC unroll 4
    for (int g0 = 0; g0 < b / 4; g0 += n16)
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            __m256i p = _mm256_maddubs_epi16(nibbles(wq[g0], nib), bcast_group(x, g0, t, tt));
#pragma GCC unroll 8
            for (int g = g0 + 1; g < g0 + n16; g++)
                p = _mm256_add_epi16(p, _mm256_maddubs_epi16(nibbles(wq[g], nib),
                                                             bcast_group(x, g, t, tt)));
            is[t] = _mm256_add_epi32(is[t], _mm256_madd_epi16(p, ones));
        }
}

INLINE void mk_q_sums(const uint8_t *p, const uint8_t *x, const int nt, const int b, bool mins,
                      bool sgn, int n16, __m256i is[TT]) {
    __m256i wq[8];
#pragma GCC unroll 8
    for (int g = 0; g < b / 4; g++)
        wq[g] = _mm256_load_si256((const __m256i *)(p + 32 * g));
    mk_q_sums_w(wq, x, nt, b, mins, sgn, n16, 0, TT, is);
}

/* As mk_q_body in kernels_avx512.c: legacy types acc += isum * (dw * da) (+ m * ds);
 * K-quants sacc += isum * dw (+ m * sum(qa)) per super-block, then acc += sacc * da. */
INLINE void mk_q_body(const cpu_mk_args *a, const int nt, const int b, const bool kq,
                      const bool mins, const bool sgn, const int n16) {
    const int per = kq ? 256 / b : 1;
    const uint8_t *p = a->panel, *x = a->act;
    __m256 acc[TT];
    for (int t = 0; t < nt; t++)
        acc[t] = _mm256_setzero_ps();
    if (!a->first)
        for (int t = 0; t < nt; t++)
            acc[t] = load_rows(a, a->out + t * a->ldo);
    for (int64_t s0 = 0; s0 < a->n_sb; s0 += per) {
        const float *da = (const float *)(x + TT * b);
        __m256 sacc[TT];
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            sacc[t] = _mm256_setzero_ps();
        for (int s = 0; s < per; s++) {
            __m256i is[TT];
            mk_q_sums(p, x, nt, b, mins, sgn, n16, is);
            const __m256 dw = _mm256_load_ps((const float *)(p + R * b));
            const __m256 m = _mm256_load_ps((const float *)(p + R * b) + R);
            const float *aux = (const float *)(x + TT * b) + TT;
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                const __m256 fs = _mm256_cvtepi32_ps(is[t]);
                if (kq)
                    sacc[t] = _mm256_fmadd_ps(fs, dw, sacc[t]);
                else
                    acc[t] = _mm256_fmadd_ps(fs, _mm256_mul_ps(dw, _mm256_set1_ps(da[t])), acc[t]);
                if (mins && kq)
                    sacc[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(aux[t]), sacc[t]);
                else if (mins)
                    acc[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(aux[t]), acc[t]);
            }
            p += R * (b + 8);
            x += TT * (b + 8);
        }
        if (kq) {
            for (int t = 0; t < nt; t++)
                acc[t] = _mm256_fmadd_ps(sacc[t], _mm256_set1_ps(da[t]), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) {
        float v[R];
        _mm256_storeu_ps(v, acc[t]);
        for (int r = 0; r < a->n_rows; r++)
            a->out[t * a->ldo + r] = a->bias ? v[r] + a->bias[r] : v[r];
    }
}

/* ---- in place: a few tokens over a full panel of an x16 weight -----------------------
 *
 * As in kernels_avx512.c: the registers a pack would have stored go straight into the
 * sums, with mk_q_body's arithmetic to the bit, and no panel is stored and loaded
 * again. The reads are x16's (rows8): a group's 8 rows of a field are one load.
 *
 * A call takes nh halves of a group: 1, the panel's, or 2, the whole group
 * (cpu_mk_args.x16_group), block by block. A group's 16 units of a field share a cache
 * line, so with both halves each line is read once, in one stream; a half alone reads
 * half of every line and leaves the other half to the next call. On two Zen 2 cores a
 * GEMV from DRAM (2048 x 8192) took 80% of the measured bandwidth that way, 89% this
 * way (Q4_0; Q8_0 78 -> 86%); from L3 one core ran Q4_0 at 15-19 GB/s against 22-24.
 * Each row's sum is the same either way. */

typedef struct inplace {
    rows8 rs[2];           /* half h: rows 8 h.. of the group, or the panel's */
    __m256 acc[2][TT];
} inplace;

/* skip: the bytes of a row before the chunk; len: the chunk's bytes per row. */
INLINE void inplace_start(const cpu_mk_args *a, const int nt, const int nh, int64_t skip,
                          int64_t len, inplace *ip) {
#pragma GCC unroll 2
    for (int h = 0; h < nh; h++) {
        const int row0 = nh == 2 ? R * h : a->w_x16_row;
        rows_init(&ip->rs[h], a->w + (int64_t)(row0 - a->w_x16_row) * a->w_row_bytes,
                  a->w_row_bytes, skip, true, row0);
        ip->rs[h].len = len;
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            ip->acc[h][t] =
                a->first ? _mm256_setzero_ps() : _mm256_loadu_ps(a->out + t * a->ldo + R * h);
    }
}

INLINE void inplace_finish(const cpu_mk_args *a, const int nt, const int nh, const inplace *ip) {
#pragma GCC unroll 2
    for (int h = 0; h < nh; h++) {
        const __m256 bias = a->bias ? _mm256_loadu_ps(a->bias + R * h) : _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            _mm256_storeu_ps(a->out + t * a->ldo + R * h,
                             a->bias ? _mm256_add_ps(ip->acc[h][t], bias) : ip->acc[h][t]);
    }
}

/* The legacy types (Q8_0 signed, its m zero, as its panel; the others as the fmt's
 * offset says). */
INLINE void mk_q_inplace(const cpu_mk_args *a, const int kind, const int nt, const int tt,
                         const int nh) {
    const bool sgn = kind == Q8_0, mins = sgn || a->mins;
    const int n16 = kind == Q4_0 || kind == Q4_1 ? 8 : 4; /* cpu_n16, as a constant */
    AL_ASSERT(sgn || a->n16 == n16);
    inplace ip;
    inplace_start(a, nt, nh, a->w_blk0 * g_legacy_size[kind], a->n_sb * g_legacy_size[kind], &ip);
    const uint8_t *x = a->act;
    for (int64_t i = 0; i < a->n_sb; i++, x += tt * (32 + 8)) {
        const float *da = (const float *)(x + tt * 32), *aux = da + tt;
#pragma GCC unroll 2
        for (int h = 0; h < nh; h++) {
            __m256i q[8], is[TT];
            __m256 dw, m;
            legacy_block(kind, &ip.rs[h], i, q, &dw, &m);
            mk_q_sums_w(q, x, nt, 32, mins, sgn, n16, 0, tt, is);
            __m256 *acc = ip.acc[h];
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                const __m256 fs = _mm256_cvtepi32_ps(is[t]);
                acc[t] = _mm256_fmadd_ps(fs, _mm256_mul_ps(dw, _mm256_set1_ps(da[t])), acc[t]);
                if (mins) acc[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(aux[t]), acc[t]);
            }
        }
    }
    inplace_finish(a, nt, nh, &ip);
}

/* Q4_K and Q5_K (mins; super-blocks of 8 sub-blocks of 32). Both halves of a group go
 * chunk by chunk (2 sub-blocks), as Q6_K's sub-blocks do: a Q4_K GEMV from DRAM on two
 * Zen 2 cores took 84-91% of the bandwidth super-block by super-block, 89-94% this way.
 * Q5_K's fifth bits, 8 registers a half, are loaded per chunk when there are two. */
INLINE void mk_q_inplace_k45(const cpu_mk_args *a, const bool five, const int nt, const int tt,
                             const int nh) {
    const int64_t t = five ? 176 : 144, sbb = cpu_sb_bytes(R, 32);
    AL_ASSERT(a->n16 == (five ? 4 : 8));
    inplace ip;
    inplace_start(a, nt, nh, a->w_blk0 * t, a->n_sb / 8 * t, &ip);
    _Alignas(32) uint8_t sc[2][8 * R * (32 + 8)]; /* dw and m where a panel has them */
    const uint8_t *x = a->act;
    for (int64_t i = 0; i < a->n_sb / 8; i++) {
        const int64_t off = i * t;
        __m256i h[8];
#pragma GCC unroll 2
        for (int hf = 0; hf < nh; hf++)
            k4_scales8(&ip.rs[hf], off, sc[hf]);
        if (five && nh == 1) load_8x32(&ip.rs[0], off + 16, h);
        const float *da = (const float *)(x + tt * 32);
        __m256 sacc[2][TT];
#pragma GCC unroll 2
        for (int hf = 0; hf < nh; hf++)
#pragma GCC unroll 4
            for (int k = 0; k < nt; k++)
                sacc[hf][k] = _mm256_setzero_ps();
        for (int c = 0; c < 4; c++, x += 2 * tt * (32 + 8)) {
#pragma GCC unroll 2
            for (int hf = 0; hf < nh; hf++) {
                const rows8 *rs = &ip.rs[hf];
                /* rows: a quarter of the super-block's prefetches per chunk (all 19
                 * at its start streamed a Q4_K GEMV from DRAM at 18 GB/s on two Zen 2
                 * cores, spread out at 21; Q6_K likewise, per 4 sub-blocks); x16:
                 * none (prefetch_rows) */
                if (!rs->x16) prefetch_rows(rs, off + t / 4 * c, 1, (int)t / 4);
                __m256i u[2][8], g[8];
                if (five && nh == 2) load_8x32(rs, off + 16, h);
                if (five) k45_chunk(five, rs, off, c, h, u[0], u[1]);
                else load_8x32(rs, off + 16 + 32 * c, g);
                const uint8_t *xs = x;
#pragma GCC unroll 2
                for (int half = 0; half < 2; half++, xs += tt * (32 + 8)) {
                    const uint8_t *sb = sc[hf] + (2 * c + half) * sbb;
                    const __m256 dw = _mm256_load_ps((const float *)(sb + R * 32));
                    const __m256 m = _mm256_load_ps((const float *)(sb + R * 32) + R);
                    const float *aux = (const float *)(xs + tt * 32) + tt;
                    __m256i is[TT];
                    if (five) mk_q_sums_w(u[half], xs, nt, 32, true, false, 4, 0, tt, is);
                    else mk_q_sums_w(g, xs, nt, 32, true, false, 8, 1 + half, tt, is);
#pragma GCC unroll 4
                    for (int k = 0; k < nt; k++) {
                        sacc[hf][k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[k]), dw, sacc[hf][k]);
                        sacc[hf][k] = _mm256_fmadd_ps(m, _mm256_set1_ps(aux[k]), sacc[hf][k]);
                    }
                }
            }
        }
#pragma GCC unroll 2
        for (int hf = 0; hf < nh; hf++)
#pragma GCC unroll 4
            for (int k = 0; k < nt; k++)
                ip.acc[hf][k] = _mm256_fmadd_ps(sacc[hf][k], _mm256_set1_ps(da[k]), ip.acc[hf][k]);
    }
    inplace_finish(a, nt, nh, &ip);
}

/* Q6_K (offset 32, super-blocks of 16 sub-blocks of 16), sub-block by sub-block: with
 * x16 each of its 4-byte groups is one load, so no half is held in registers. Both
 * halves of a group go sub-block by sub-block: super-block by super-block, a Q6_K GEMV
 * from L3 had run at 14 GB/s on one Zen 2 core, slower than a half alone (16-20); this
 * way 19-23. */
INLINE void mk_q_inplace_q6(const cpu_mk_args *a, const int nt, const int tt, const int nh) {
    AL_ASSERT(a->n16 == 2);
    inplace ip;
    inplace_start(a, nt, nh, a->w_blk0 * 210, a->n_sb / 16 * 210, &ip);
    const uint8_t *x = a->act;
    for (int64_t i = 0; i < a->n_sb / 16; i++) {
        const int64_t off = i * 210;
        const float *da = (const float *)(x + tt * 16);
        __m256 d[2], sacc[2][TT];
#pragma GCC unroll 2
        for (int h = 0; h < nh; h++) {
            d[h] = q6_d(&ip.rs[h], off);
#pragma GCC unroll 4
            for (int k = 0; k < nt; k++)
                sacc[h][k] = _mm256_setzero_ps();
        }
#pragma GCC unroll 16
        for (int s = 0; s < 16; s++, x += tt * (16 + 8)) {
            /* sub-block s = 8 half + 2 g + jj: groups j = 4 jj + k of column g % 2 */
            const int half = s / 8, g = s % 8 / 2, jj = s % 2;
#pragma GCC unroll 2
            for (int h = 0; h < nh; h++) {
                const rows8 *rs = &ip.rs[h];
                if (s % 4 == 0) prefetch_rows(rs, off + 52 * (s / 4), 1, s == 12 ? 54 : 52);
                __m256i wq[4], is[TT];
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    const int j = 4 * jj + k;
                    wq[k] = q6_u(gather32(rs, off + 64 * half + 32 * (g % 2) + 4 * j),
                                 gather32(rs, off + 128 + 32 * half + 4 * j), g);
                }
                mk_q_sums_w(wq, x, nt, 16, false, false, 2, 0, tt, is);
                const __m256 dw = q6_dw(rs, off, d[h], s);
#pragma GCC unroll 4
                for (int k = 0; k < nt; k++)
                    sacc[h][k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[k]), dw, sacc[h][k]);
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < nh; h++)
#pragma GCC unroll 4
            for (int k = 0; k < nt; k++)
                ip.acc[h][k] = _mm256_fmadd_ps(sacc[h][k], _mm256_set1_ps(da[k]), ip.acc[h][k]);
    }
    inplace_finish(a, nt, nh, &ip);
}

/* One copy per kernel token count (1 or 2) and tile width (a single token's tile may
 * be narrow, 1 wide or 2 with its two passes: cpu_mk_args.narrow), so that the loops
 * over tokens unroll. */
#define BY_1_2_NH(CALL, nh)                                                                        \
    do {                                                                                           \
        if (a->n_tok == 1 && a->narrow)                                                            \
            CALL(1, 1, nh);                                                                        \
        else if (a->narrow)                                                                        \
            CALL(2, 2, nh);                                                                        \
        else if (a->n_tok == 1)                                                                    \
            CALL(1, TT, nh);                                                                       \
        else                                                                                       \
            CALL(2, TT, nh);                                                                       \
    } while (0)
#define BY_1_2(CALL)                                                                               \
    do {                                                                                           \
        if (a->x16_group)                                                                          \
            BY_1_2_NH(CALL, 2);                                                                    \
        else                                                                                       \
            BY_1_2_NH(CALL, 1);                                                                    \
    } while (0)

static void mk_q_inplace_avx2(const cpu_mk_args *a) {
    AL_ASSERT(a->n_rows == R && a->n_tok <= 2 && a->w_x16 && (!a->x16_group || !a->w_x16_row));
#define Q4_0_(n, t, h) mk_q_inplace(a, Q4_0, n, t, h)
#define Q4_1_(n, t, h) mk_q_inplace(a, Q4_1, n, t, h)
#define Q5_0_(n, t, h) mk_q_inplace(a, Q5_0, n, t, h)
#define Q5_1_(n, t, h) mk_q_inplace(a, Q5_1, n, t, h)
#define Q8_0_(n, t, h) mk_q_inplace(a, Q8_0, n, t, h)
#define MXFP4_(n, t, h) mk_q_inplace(a, MXFP4, n, t, h)
#define Q4_K_(n, t, h) mk_q_inplace_k45(a, false, n, t, h)
#define Q5_K_(n, t, h) mk_q_inplace_k45(a, true, n, t, h)
#define Q6_K_(n, t, h) mk_q_inplace_q6(a, n, t, h)
    switch (a->w_type) {
    case AL_TYPE_Q4_0: BY_1_2(Q4_0_); break;
    case AL_TYPE_Q4_1: BY_1_2(Q4_1_); break;
    case AL_TYPE_Q5_0: BY_1_2(Q5_0_); break;
    case AL_TYPE_Q5_1: BY_1_2(Q5_1_); break;
    case AL_TYPE_Q4_K: BY_1_2(Q4_K_); break;
    case AL_TYPE_Q5_K: BY_1_2(Q5_K_); break;
    case AL_TYPE_Q6_K: BY_1_2(Q6_K_); break;
    case AL_TYPE_MXFP4: BY_1_2(MXFP4_); break;
    default:
        AL_ASSERT(a->w_type == AL_TYPE_Q8_0);
        BY_1_2(Q8_0_);
        break;
    }
#undef Q4_0_
#undef Q4_1_
#undef Q5_0_
#undef Q5_1_
#undef Q8_0_
#undef MXFP4_
#undef Q4_K_
#undef Q5_K_
#undef Q6_K_
}
#undef BY_1_2
#undef BY_1_2_NH

/* mk_q_body for unsigned weights with n16 as a constant: b / 4 or b / 8 (cpu_n16 gives
 * 8 or 4 for sub-blocks of 32, 4 or 2 for sub-blocks of 16). */
INLINE void mk_q_n16(const cpu_mk_args *a, const int nt, const int b, const bool kq,
                     const bool mins) {
    AL_ASSERT(a->n16 >= b / 8);
    if (a->n16 >= b / 4)
        mk_q_body(a, nt, b, kq, mins, false, b / 4);
    else
        mk_q_body(a, nt, b, kq, mins, false, b / 8);
}

static void mk_q_avx2(const cpu_mk_args *a) {
    if (!a->panel) {
        mk_q_inplace_avx2(a);
        return;
    }
#define LEGACY(t) mk_q_n16(a, t, 32, false, false)
#define LEGACY_M(t) mk_q_n16(a, t, 32, false, true)
#define SIGNED(t) mk_q_body(a, t, 32, false, true, true, 2)
#define K16(t) mk_q_n16(a, t, 16, true, false)
#define K16_M(t) mk_q_n16(a, t, 16, true, true)
#define K32(t) mk_q_n16(a, t, 32, true, false)
#define K32_M(t) mk_q_n16(a, t, 32, true, true)
    if (a->signed_w)
        BY_TOKENS(a->n_tok, SIGNED)
    else if (a->group == 32 && !a->mins)
        BY_TOKENS(a->n_tok, LEGACY)
    else if (a->group == 32)
        BY_TOKENS(a->n_tok, LEGACY_M)
    else if (a->bsize == 16 && !a->mins)
        BY_TOKENS(a->n_tok, K16)
    else if (a->bsize == 16)
        BY_TOKENS(a->n_tok, K16_M)
    else if (!a->mins)
        BY_TOKENS(a->n_tok, K32)
    else
        BY_TOKENS(a->n_tok, K32_M)
#undef LEGACY
#undef LEGACY_M
#undef SIGNED
#undef K16
#undef K16_M
#undef K32
#undef K32_M
}

const cpu_kernels cpu_kernels_avx2 = {
    .isa = CPU_ISA_AVX2,
    .rows = R,
    .tile = TT,
    .narrow = true,
    .x16_group = true,
    .attn_lanes = LANES,
    .attn_align = 8,
    .attn_ranges = true,
    .signed_types = 1ull << AL_TYPE_Q8_0,
    .quantize = quantize_avx2,
    .pack_q = {[AL_TYPE_Q4_0] = pack_q4_0,
               [AL_TYPE_Q4_1] = pack_q4_1,
               [AL_TYPE_Q5_0] = pack_q5_0,
               [AL_TYPE_Q5_1] = pack_q5_1,
               [AL_TYPE_Q8_0] = pack_q8_0,
               [AL_TYPE_Q4_K] = pack_q4_k,
               [AL_TYPE_Q5_K] = pack_q5_k,
               [AL_TYPE_Q6_K] = pack_q6_k,
               [AL_TYPE_Q2_K] = pack_q2_k,
               [AL_TYPE_Q3_K] = pack_q3_k,
               [AL_TYPE_MXFP4] = pack_mxfp4},
    .mk_q = mk_q_avx2,
    .x16_types = 1ull << AL_TYPE_Q4_0 | 1ull << AL_TYPE_Q4_1 | 1ull << AL_TYPE_Q5_0 |
                 1ull << AL_TYPE_Q5_1 | 1ull << AL_TYPE_Q8_0 | 1ull << AL_TYPE_Q4_K |
                 1ull << AL_TYPE_Q5_K | 1ull << AL_TYPE_Q6_K | 1ull << AL_TYPE_MXFP4,
    .x16_pack = x16_pack_avx2,
    .pack_x16 = {[AL_TYPE_Q4_0] = pack_q4_0_x16,
                 [AL_TYPE_Q4_1] = pack_q4_1_x16,
                 [AL_TYPE_Q5_0] = pack_q5_0_x16,
                 [AL_TYPE_Q5_1] = pack_q5_1_x16,
                 [AL_TYPE_Q8_0] = pack_q8_0_x16,
                 [AL_TYPE_Q4_K] = pack_q4_k_x16,
                 [AL_TYPE_Q5_K] = pack_q5_k_x16,
                 [AL_TYPE_Q6_K] = pack_q6_k_x16,
                 [AL_TYPE_MXFP4] = pack_mxfp4_x16},
    .pack_f = cpu_pack_f_avx2,
    .mk_f = cpu_mk_f_avx2,
    .attn = cpu_attn_avx2,
    .rms_norm = cpu_rms_norm_avx2,
    .silu_mul = cpu_silu_mul_avx2,
    .gelu_mul = cpu_gelu_mul_avx2,
    .swiglu_oai = cpu_swiglu_oai_avx2,
    .scale = cpu_scale_avx2,
    .add = cpu_add_avx2,
    .sigmoid_mul = cpu_sigmoid_mul_avx2,
    .delta = cpu_delta_avx2,
    .conv = cpu_conv_avx2,
    .sum_u64 = cpu_sum_u64_avx2,
};

#if defined(__clang__)
#pragma clang attribute pop
#endif
