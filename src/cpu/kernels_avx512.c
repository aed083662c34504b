/* kernels_avx512.c: the CPU kernels for AVX-512 (F, BW, VL, DQ) with VNNI.
 *
 * Compiled for AVX-512 by the target pragma below, whatever the build's flags; cpu.c
 * calls it only when CPUID says the CPU has these extensions.
 *
 * Quantized matmul: panels of R = 16 rows, one per 32-bit lane of a zmm register, and
 * activation tiles of TT = 8 tokens (layouts in ops.h). The microkernel's inner step
 * is one vpdpbusd per (4 elements, token): 16 rows x 4 unsigned weights times one
 * broadcast group of 4 signed activations, accumulated in exact int32. Per sub-block
 * the int32 sums become floats once (mk_q_body). A zmm of weights is loaded once and
 * used by every token of the tile.
 *
 * For one or two kernel tokens (token generation) the legacy types, MXFP4 and Q4_K/Q5_K/
 * Q6_K skip the panel: mk_q_inplace reads the rows where they lie and feeds the registers a pack
 * would have stored straight into the sums, with the same arithmetic to the bit. Each
 * packed panel would be used once, so its store and reload were pure cost (a GEMV
 * over 512 x 1024 Q4_0 went from ~17 to ~15 us on one core; Q4_K 15 -> 18 GB/s).
 *
 * A weight in the x16 layout (ops.h) goes through the same kernels: rows16 knows the
 * layout, and what it would gather or transpose from 16 row streams is one vector load
 * from one stream (gather32, gather_d, load_16x16, load_16x32). An in-place GEMV over
 * 512 x 2048 Q4_0 in L2 went from ~14-20 to ~34 GB/s on one core, Q6_K from ~16-19 to
 * ~26, so that decoding is bound by the memory, not by the reads' instructions.
 *
 * Packing reads 16 rows' blocks in place and transposes them in registers: 16-byte or
 * 32-byte columns of 16 rows become vectors of 4-byte groups, and the scales of 16
 * rows come in one gather. The last panel of a matrix, when short of 16 rows, takes
 * the portable decoders (cpu_pack_q_generic).
 *
 * The attention kernels live in attn_avx512.c.
 */
#if defined(__clang__)
#pragma clang attribute push(                                                                      \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"))),        \
    apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
#endif

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "avx512.h"
#include "ops.h"
#include "format/quant.h"
#include "util.h"

enum { R = 16, TT = 8, LANES = 16 };

#define INLINE static inline __attribute__((always_inline))

INLINE int32_t load_i32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
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

/* As quantize_scalar, bit for bit: the same divisions, round-to-nearest-even. */
static void quantize_512(const float *x, int64_t n, cpu_act_fmt f, uint8_t *tile, int slot,
                         int tt) {
    const int group = f.group, b = f.b;
    _Alignas(64) int8_t q[256];
    for (int64_t g0 = 0; g0 < n; g0 += group, x += group) {
        __m512 am = _mm512_setzero_ps();
        for (int v = 0; v < group; v += 16)
            am = _mm512_max_ps(am, _mm512_abs_ps(_mm512_loadu_ps(x + v)));
        const float amax = _mm512_reduce_max_ps(am);
        float d;
        if (group == 32) {
            const __m512 id = _mm512_set1_ps(amax != 0 ? 127.0f / amax : 0.0f);
            for (int v = 0; v < 32; v += 16)
                _mm_store_si128((__m128i *)(q + v),
                                _mm512_cvtepi32_epi8(
                                    _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + v), id))));
            d = f.exact_scale ? amax / 127.0f
                              : _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
        } else if (amax == 0) {
            memset(q, 0, (size_t)group);
            d = 0;
        } else {
            /* the first element of largest magnitude, with its sign */
            int at = 0;
            for (int v = 0; v < group; v += 16) {
                const __mmask16 k = _mm512_cmpeq_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + v)),
                                                         _mm512_set1_ps(amax));
                if (k) {
                    at = v + __builtin_ctz(k);
                    break;
                }
            }
            const float iscale = -127.0f / x[at];
            for (int v = 0; v < group; v += 16) {
                const __m512i qi = _mm512_cvtps_epi32(
                    _mm512_mul_ps(_mm512_loadu_ps(x + v), _mm512_set1_ps(iscale)));
                _mm_store_si128((__m128i *)(q + v),
                                _mm512_cvtepi32_epi8(_mm512_min_epi32(qi, _mm512_set1_epi32(127))));
            }
            d = 1.0f / iscale;
        }
        put_group(q, group, d, f, tile + (g0 / b) * cpu_sb_bytes(tt, b), slot, tt);
    }
}

/* ---- packing quantized weights ------------------------------------------------------- */
/* Each pack reads the blocks of 16 rows in place and transposes them in registers:
 * 4-byte groups of quants become one zmm per group (row r in lane r); the fp16 scales
 * and packed 6-bit scales of 16 rows arrive in one vpgatherdd each. */

/* Bytes ahead of the pack in each row that it prefetches (into L2: 16 streams need more
 * requests in flight than L1 can track). The rows of a panel are R interleaved
 * streams, which the hardware prefetchers do not follow. */
enum { PF_AHEAD = 384 };

typedef struct rows16 {
    const uint8_t *b[4]; /* rows 4k..4k+3 start at b[k] + {0, 1, 2, 3} * rb */
    int64_t rb, rb3;     /* row stride and 3 times it: a few registers address all rows */
    int64_t skip;        /* bytes from the start of each row to b[k] */
    /* AL_LAYOUT_X16 (ops.h): byte off of the rows (from skip) lies in the unit of row 0
     * at pk + 16 off, so that what the in-place reads gather or transpose is one load */
    bool x16;
    const uint8_t *pk;
} rows16;

/* x16 is a constant at every call, so each kernel compiles once per layout. */
INLINE void rows_init(rows16 *rs, const uint8_t *w, uint64_t row_bytes, int64_t skip, bool x16) {
    rs->rb = (int64_t)row_bytes;
    rs->rb3 = 3 * rs->rb;
    rs->skip = skip;
    rs->x16 = x16;
    rs->pk = w + 16 * skip;
    for (int k = 0; k < 4; k++)
        rs->b[k] = w + 4 * k * rs->rb + skip;
}

INLINE const uint8_t *row_at(const rows16 *rs, int r, int64_t off) {
    const int i = r % 4;
    return rs->b[r / 4] + off + (i == 0 ? 0 : i == 1 ? rs->rb : i == 2 ? 2 * rs->rb : rs->rb3);
}

/* Prefetches PF_AHEAD bytes ahead in every row: n_lines cache lines per row, or with
 * x16 the lines of the span bytes per row that the caller reads before its next call.
 * Near the end of the rows it prefetches the next panel's rows (R rows further on),
 * which come next. Prefetches take load slots: where a 1-token GEMV prefetches, it
 * issues one per line (on x16, 16 n_lines per call had been up to 78% repeats, and a
 * Q4_0 GEMV in L2 ran at ~25 GB/s per core; the loads, not the memory, bounded
 * decoding).
 *
 * The in-place GEMV of the legacy types and Q4_K/Q5_K over x16 issues none: its one
 * sequential stream is what the hardware prefetchers follow best, and ours held it
 * back where the memory is fast. On a 2-core Zen 4, two threads over a 2048-wide
 * model's Q4_0 matrices (22 x {2048 x 2048, 2048 x 5632 twice, 5632 x 2048}) read ~43
 * GB/s with them and ~53 without, in windows where plain reads gave ~51 (and the same
 * at ~35 GB/s); bench-1b Q8_0 tg64 at ~61 GB/s: 39 -> 53 t/s.
 * Q6_K keeps them: its sub-fields are read out of order, and without them bench-1b
 * Q4_K_M's decode fell to 50-71% of the roofline from 77-94%. Its in-place GEMV over
 * x16 prefetches into L1 (l1), where the other types go to L2: in alternating decode
 * runs of bench-qwen35moe (a Q6_K output matrix of 54 MB) that was 3-5% faster than
 * L2, and L1 for the Q4_K experts too was slower.
 * Q4_K/Q5_K over x16 prefetch too where the backend says so (cpu_mk_args.w_x16_pf: by
 * default on Intel CPUs). On this 2-core Emerald Rapids VM the hardware alone left the
 * x16 stream well short of the memory: bench-qwen35moe's experts, 589 KB matrices that
 * each start a new stream, read at ~20 GB/s where plain reads gave ~32, and its decode
 * ran at 78-83% of the roofline with these prefetches off, 98-103% with them on;
 * bench-1b Q4_K_M 65-67% against 85%. */
INLINE void prefetch_rows_to(const rows16 *rs, int64_t off, int n_lines, int span, bool l1) {
    if (rs->x16) { /* one stream, which runs on into the next panel */
        const uintptr_t a0 = (uintptr_t)(rs->pk + 16 * (off + PF_AHEAD)) & ~(uintptr_t)63;
        const uintptr_t a1 = (uintptr_t)(rs->pk + 16 * (off + PF_AHEAD + span));
        for (uintptr_t a = a0; a < a1; a += 64)
            if (l1) _mm_prefetch((const char *)a, _MM_HINT_T0);
            else _mm_prefetch((const char *)a, _MM_HINT_T1);
        return;
    }
    const int64_t at = off + PF_AHEAD + (rs->skip + off + PF_AHEAD >= rs->rb ? 15 * rs->rb : 0);
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int l = 0; l < n_lines; l++)
            _mm_prefetch((const char *)row_at(rs, r, at + 64 * l), _MM_HINT_T1);
}

INLINE void prefetch_rows(const rows16 *rs, int64_t off, int n_lines, int span) {
    prefetch_rows_to(rs, off, n_lines, span, false);
}

/* The 4 bytes at offset off of every row (with x16, a field of 4-byte units). */
INLINE __m512i gather32(const rows16 *rs, int64_t off) {
    if (rs->x16) return _mm512_loadu_si512(rs->pk + 16 * off);
    const __m512i idx =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32((int32_t)rs->rb));
    return _mm512_i32gather_epi32(idx, rs->b[0] + off, 1);
}

/* The fp16 number in the low (hi = 0) or high half of gather32. */
INLINE __m512 gather_f16(__m512i g, int hi) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hi ? _mm512_srli_epi32(g, 16) : g));
}

/* The fp16 number at offset off of every row. */
INLINE __m512 gather_d(const rows16 *rs, int64_t off) {
    if (rs->x16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rs->pk + 16 * off)));
    return gather_f16(gather32(rs, off), 0);
}

/* The two fp16 numbers at off and off + 2 of every row, as gather32 has them. */
INLINE __m512i gather_2xf16(const rows16 *rs, int64_t off) {
    if (!rs->x16) return gather32(rs, off);
    const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(rs->pk + 16 * off)));
    const __m512i hi =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(rs->pk + 16 * (off + 2))));
    return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

/* The byte at off of every row in the low byte of its lane (the other bytes: x16 zero,
 * else what follows it). */
INLINE __m512i gather_u8(const rows16 *rs, int64_t off) {
    if (!rs->x16) return gather32(rs, off);
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rs->pk + 16 * off)));
}

/* d[j] = 4-byte group j of the 16 bytes at off, for every row. */
INLINE void load_16x16(const rows16 *rs, int64_t off, __m512i d[4]) {
    if (rs->x16) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            d[j] = _mm512_loadu_si512(rs->pk + 16 * (off + 4 * j));
        return;
    }
    __m512i a[4];
#pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        /* lanes: rows i, i+4, i+8, i+12; the transposes below then give rows in order.
         * Broadcast loads with merge masks keep the shuffle port free. */
        __m512i z = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)row_at(rs, i, off)));
        z = _mm512_mask_broadcast_i32x4(z, 0x00F0,
                                        _mm_loadu_si128((const __m128i *)row_at(rs, i + 4, off)));
        z = _mm512_mask_broadcast_i32x4(z, 0x0F00,
                                        _mm_loadu_si128((const __m128i *)row_at(rs, i + 8, off)));
        a[i] = _mm512_mask_broadcast_i32x4(
            z, 0xF000, _mm_loadu_si128((const __m128i *)row_at(rs, i + 12, off)));
    }
    const __m512i t0 = _mm512_unpacklo_epi32(a[0], a[1]), t1 = _mm512_unpackhi_epi32(a[0], a[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(a[2], a[3]), t3 = _mm512_unpackhi_epi32(a[2], a[3]);
    d[0] = _mm512_unpacklo_epi64(t0, t2);
    d[1] = _mm512_unpackhi_epi64(t0, t2);
    d[2] = _mm512_unpacklo_epi64(t1, t3);
    d[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* g[j] = 4-byte group j of the 32 bytes at off, for every row: two 8x8 transposes of
 * 32-bit words, one per 256-bit half. */
INLINE void load_16x32(const rows16 *rs, int64_t off, __m512i g[8]) {
    if (rs->x16) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            g[j] = _mm512_loadu_si512(rs->pk + 16 * (off + 4 * j));
        return;
    }
    __m512i z[8], t[8], u[8];
#pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        /* rows i | i+4 and 8+i | 12+i, so that the last shuffles give rows in order */
        z[i] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(row_at(rs, i, off)))),
            _mm256_loadu_si256((const __m256i *)(row_at(rs, i + 4, off))), 1);
        z[4 + i] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(row_at(rs, 8 + i, off)))),
            _mm256_loadu_si256((const __m256i *)(row_at(rs, 12 + i, off))), 1);
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

INLINE __m512i lo4(__m512i v) {
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
}
INLINE __m512i hi4(__m512i v) {
    return lo4(_mm512_srli_epi16(v, 4));
}
/* 16 times the high nibbles, for the sums of mk_sums1 */
INLINE __m512i hi16_of(__m512i v) {
    return _mm512_and_si512(v, _mm512_set1_epi8((char)0xF0));
}

INLINE void store_q(uint8_t *q, int j, __m512i v) {
    _mm512_store_si512((__m512i *)(q + 64 * j), v);
}

/* dw and m of one sub-block of B elements. */
INLINE void store_scales(uint8_t *sb, int b, __m512 dw, __m512 m) {
    _mm512_store_ps((float *)(sb + R * b), dw);
    _mm512_store_ps((float *)(sb + R * b) + R, m);
}

/* 0x10 in byte k of lane r where bit 4j + k of qh[r] is set (the Q5 fifth bits of
 * 4-byte group j): a 16-entry table indexed by the nibble. */
INLINE __m512i q5_high(__m512i qh, int j) {
    const __m512i lut =
        _mm512_set_epi32(0x10101010, 0x10101000, 0x10100010, 0x10100000, 0x10001010, 0x10001000,
                         0x10000010, 0x10000000, 0x00101010, 0x00101000, 0x00100010, 0x00100000,
                         0x00001010, 0x00001000, 0x00000010, 0x00000000);
    return _mm512_permutexvar_epi32(_mm512_srli_epi32(qh, 4 * j), lut);
}

/* MXFP4's dw, half the E8M0 scale (quant_e8m0_half), from the scale byte in the low
 * byte of each lane: the exponent field e - 1, or for e < 2 the subnormal whose bits
 * are 0x00200000 << e. */
INLINE __m512 e8m0_half16(__m512i head) {
    const __m512i e = _mm512_and_si512(head, _mm512_set1_epi32(0xFF));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 small = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, sub));
}

/* MXFP4 codes (one per byte, 0..15) -> u = quant_mxfp4_values[code] + 12 (0..24). */
INLINE __m512i mxfp4_u(__m512i codes) {
    const __m128i lut = _mm_add_epi8(_mm_loadu_si128((const __m128i *)quant_mxfp4_values),
                                     _mm_set1_epi8(12));
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(lut), codes);
}

/* The legacy types: blocks of 32 with the quants at qs_off, fp16 d (and m) first;
 * MXFP4 has its scale byte first. */
enum { Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 };
static const int g_legacy_size[] = {18, 20, 22, 24, 34, 17}, g_legacy_qs[] = {2, 4, 6, 8, 2, 1};

/* Block i of 16 rows as the panel holds it: q[j] is 4-byte group j of the unsigned
 * quants (row r in lane r), dw and m the scales of ops.h. */
INLINE void legacy_block(int kind, const rows16 *rs, int64_t i, __m512i q[8], __m512 *dw,
                         __m512 *m, const bool hi16) {
    const int64_t off = i * g_legacy_size[kind];
    if (!(i & 1) && !rs->x16) /* two blocks are at most 68 bytes; x16: see prefetch_rows */
        prefetch_rows(rs, off, 1, 2 * g_legacy_size[kind]);
    const bool has_m = kind == Q4_1 || kind == Q5_1;
    const __m512i head = has_m           ? gather_2xf16(rs, off)
                         : kind == MXFP4 ? gather_u8(rs, off)
                                         : _mm512_setzero_si512();
    const __m512 d = kind == MXFP4 ? e8m0_half16(head)
                     : has_m       ? gather_f16(head, 0)
                                   : gather_d(rs, off);
    *dw = d;
    if (kind == Q8_0) {
        load_16x32(rs, off + 2, q);
#pragma GCC unroll 16
        for (int j = 0; j < 8; j++)
            q[j] = _mm512_xor_si512(q[j], _mm512_set1_epi8((char)0x80));
        *m = _mm512_mul_ps(d, _mm512_set1_ps(-128.0f));
        return;
    }
    __m512i h[4];
    load_16x16(rs, off + g_legacy_qs[kind], h);
    if (kind == Q5_0 || kind == Q5_1) {
        const __m512i qh = gather32(rs, off + (kind == Q5_0 ? 2 : 4));
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++) {
            q[j] = _mm512_or_si512(lo4(h[j]), q5_high(qh, j));
            q[4 + j] = _mm512_or_si512(hi4(h[j]), q5_high(qh, 4 + j));
        }
    } else if (kind == MXFP4) {
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++) {
            q[j] = mxfp4_u(lo4(h[j]));
            q[4 + j] = mxfp4_u(hi4(h[j]));
        }
    } else { /* Q4_0, Q4_1: hi16, 16 times the high quants (mk_sums1) */
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++) {
            q[j] = lo4(h[j]);
            q[4 + j] = hi16 ? hi16_of(h[j]) : hi4(h[j]);
        }
    }
    /* m = -offset * dw, as the portable decoders write it */
    const float neg_offset = kind == Q4_0 ? -8.0f : kind == MXFP4 ? -12.0f : -16.0f;
    *m = has_m ? gather_f16(head, 1) : _mm512_mul_ps(d, _mm512_set1_ps(neg_offset));
}

INLINE void pack_legacy(int kind, const uint8_t *w, uint64_t row_bytes, int64_t blk0, int64_t n_blk,
                        uint8_t *panel, bool x16) {
    rows16 rs;
    rows_init(&rs, w, row_bytes, blk0 * g_legacy_size[kind], x16);
    for (int64_t i = 0; i < n_blk; i++, panel += cpu_sb_bytes(R, 32)) {
        __m512i q[8];
        __m512 dw, m;
        legacy_block(kind, &rs, i, q, &dw, &m, false);
#pragma GCC unroll 16
        for (int j = 0; j < 8; j++)
            store_q(panel, j, q[j]);
        store_scales(panel, 32, dw, m);
    }
}

/* A panel short of 16 rows (the last of a matrix) takes the portable pack; an x16
 * weight has none (cpu_x16_fits). */
#define PACK_LEGACY(name, kind)                                                                    \
    static void name(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows,              \
                     int64_t blk0, int64_t n_blk, uint8_t *panel) {                                \
        if (n_rows < R)                                                                            \
            cpu_pack_q_generic(type, R, w, row_bytes, n_rows, blk0, n_blk, panel);                 \
        else                                                                                       \
            pack_legacy(kind, w, row_bytes, blk0, n_blk, panel, false);                            \
    }                                                                                              \
    static void name##_x16(uint32_t type, const uint8_t *w, uint64_t row_bytes, int row0,          \
                           int64_t blk0, int64_t n_blk, uint8_t *panel) {                          \
        (void)type;                                                                                \
        AL_ASSERT(row0 == 0);                                                                      \
        pack_legacy(kind, w, row_bytes, blk0, n_blk, panel, true);                                 \
    }
PACK_LEGACY(pack_q4_0, 0)
PACK_LEGACY(pack_q4_1, 1)
PACK_LEGACY(pack_q5_0, 2)
PACK_LEGACY(pack_q5_1, 3)
PACK_LEGACY(pack_q8_0, 4)
PACK_LEGACY(pack_mxfp4, 5)

/* ---- the x16 rewrite at load ------------------------------------------------------------ */
/* cpu_x16_pack's bytes from the in-place reads: 32- and 16-byte runs of a 4-byte field
 * come transposed (load_16x32, load_16x16), the rest as gathers; a 2-byte unit is the
 * low half of a gather, or the high half of the one 2 bytes before when the field ends
 * the block (the gather would read past the last row's end), a 1-byte unit its low
 * byte. About 5x cpu_x16_pack, which matters for a model of many GB. */
INLINE void x16_field_512(const rows16 *rs, int64_t off, const cpu_x16_field *f, int bs,
                          uint8_t *dst) {
    int k = 0;
    if (f->unit == 4) {
        for (; k + 32 <= f->size; k += 32) {
            __m512i g[8];
            load_16x32(rs, off + f->off + k, g);
            for (int j = 0; j < 8; j++)
                _mm512_storeu_si512(dst + 16 * (f->off + k + 4 * j), g[j]);
        }
        for (; k + 16 <= f->size; k += 16) {
            __m512i g[4];
            load_16x16(rs, off + f->off + k, g);
            for (int j = 0; j < 4; j++)
                _mm512_storeu_si512(dst + 16 * (f->off + k + 4 * j), g[j]);
        }
        for (; k < f->size; k += 4)
            _mm512_storeu_si512(dst + 16 * (f->off + k), gather32(rs, off + f->off + k));
        return;
    }
    for (; k < f->size; k += f->unit) {
        const int o = f->off + k;
        if (f->unit == 2) {
            const __m512i g = o + 4 <= bs ? gather32(rs, off + o)
                                          : _mm512_srli_epi32(gather32(rs, off + o - 2), 16);
            _mm256_storeu_si256((__m256i *)(dst + 16 * o), _mm512_cvtepi32_epi16(g));
        } else {
            _mm_storeu_si128((__m128i *)(dst + 16 * o), _mm512_cvtepi32_epi8(
                                                            _mm512_and_si512(gather32(rs, off + o),
                                                                             _mm512_set1_epi32(0xFF))));
        }
    }
}

static void x16_pack_512(uint32_t type, const uint8_t *src, uint8_t *dst, uint64_t row_bytes,
                         int64_t n_blk, int64_t g0, int64_t g1) {
    const cpu_x16_type *t = cpu_x16_of(type);
    AL_ASSERT(t && (uint64_t)n_blk * (uint64_t)t->block_bytes == row_bytes);
    for (int64_t g = g0; g < g1; g++) {
        rows16 rs;
        rows_init(&rs, src + (uint64_t)g * 16 * row_bytes, row_bytes, 0, false);
        uint8_t *d = dst + (uint64_t)g * 16 * row_bytes;
        for (int64_t b = 0; b < n_blk; b++) {
            const int64_t off = b * t->block_bytes;
            prefetch_rows(&rs, off, 1, 0);
            for (int i = 0; i < t->n_fields; i++)
                x16_field_512(&rs, off, &t->f[i], t->block_bytes, d + 16 * off);
        }
    }
}

/* Byte k (0..3) of each lane. */
INLINE __m512i byte_of(__m512i v, int k) {
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * k), _mm512_set1_epi32(0xFF));
}

/* The 8 scales and mins of Q4_K/Q5_K for 16 rows (the layout of quant.c k4_scale_min)
 * from the 12 scale bytes at off + 4, into the 8 sub-blocks of a super-block. */
INLINE void k4_scales16(const rows16 *rs, int64_t off, uint8_t *pb) {
    const __m512i dd = gather_2xf16(rs, off);
    const __m512 d = gather_f16(dd, 0), dmin = gather_f16(dd, 1);
    const __m512i s0 = gather32(rs, off + 4), s1 = gather32(rs, off + 8),
                  s2 = gather32(rs, off + 12);
    const __m512i m63 = _mm512_set1_epi32(63), m15 = _mm512_set1_epi32(15);
#pragma GCC unroll 16
    for (int j = 0; j < 8; j++) {
        __m512i sc, mn;
        if (j < 4) {
            sc = _mm512_and_si512(byte_of(s0, j), m63);
            mn = _mm512_and_si512(byte_of(s1, j), m63);
        } else {
            const __m512i b2 = byte_of(s2, j - 4);
            sc = _mm512_or_si512(_mm512_and_si512(b2, m15),
                                 _mm512_slli_epi32(_mm512_srli_epi32(byte_of(s0, j - 4), 6), 4));
            mn = _mm512_or_si512(_mm512_srli_epi32(b2, 4),
                                 _mm512_slli_epi32(_mm512_srli_epi32(byte_of(s1, j - 4), 6), 4));
        }
        store_scales(
            pb + j * cpu_sb_bytes(R, 32), 32, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)),
            _mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), dmin), _mm512_cvtepi32_ps(mn)));
    }
}

/* Q4_K and Q5_K: 4 chunks of 32 bytes, low nibbles = sub-block 2c, high = 2c + 1.
 * k45_chunk gives chunk c of the super-block at off as the panel holds it (h: the
 * Q5_K fifth bits, load_16x32 of qh). */
INLINE void k45_chunk(bool five, const rows16 *rs, int64_t off, int c, const __m512i h[8],
                      __m512i u0[8], __m512i u1[8], const bool hi16) {
    __m512i g[8];
    load_16x32(rs, off + (five ? 48 : 16) + 32 * c, g);
#pragma GCC unroll 16
    for (int j = 0; j < 8; j++) {
        u0[j] = lo4(g[j]);
        u1[j] = hi16 ? hi16_of(g[j]) : hi4(g[j]); /* hi16: Q4_K only (mk_sums1) */
        if (five) {
            /* bit s of qh[l] is the fifth bit of element l of sub-block s */
            const __m512i b16 = _mm512_set1_epi8(0x10);
            u0[j] = _mm512_or_si512(
                u0[j], _mm512_maskz_mov_epi8(
                           _mm512_test_epi8_mask(h[j], _mm512_set1_epi8((char)(1 << (2 * c)))), b16));
            u1[j] = _mm512_or_si512(
                u1[j], _mm512_maskz_mov_epi8(
                           _mm512_test_epi8_mask(h[j], _mm512_set1_epi8((char)(2 << (2 * c)))), b16));
        }
    }
}

INLINE void pack_k45(bool five, const uint8_t *w, uint64_t row_bytes, int64_t blk0, int64_t n_blk,
                     uint8_t *panel, bool x16) {
    const int64_t t = five ? 176 : 144, sbb = cpu_sb_bytes(R, 32);
    rows16 rs;
    rows_init(&rs, w, row_bytes, blk0 * t, x16);
    for (int64_t i = 0; i < n_blk; i++, panel += 8 * sbb) {
        const int64_t off = i * t;
        prefetch_rows(&rs, off, 3, (int)t);
        k4_scales16(&rs, off, panel);
        __m512i h[8];
        if (five) load_16x32(&rs, off + 16, h);
#pragma GCC unroll 16
        for (int c = 0; c < 4; c++) {
            __m512i u0[8], u1[8];
            k45_chunk(five, &rs, off, c, h, u0, u1, false);
            uint8_t *q0 = panel + 2 * c * sbb, *q1 = q0 + sbb;
#pragma GCC unroll 16
            for (int k = 0; k < 8; k++) {
                store_q(q0, k, u0[k]);
                store_q(q1, k, u1[k]);
            }
        }
    }
}

static void pack_q4_k(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows, int64_t blk0,
                      int64_t n_blk, uint8_t *panel) {
    if (n_rows < R)
        cpu_pack_q_generic(type, R, w, row_bytes, n_rows, blk0, n_blk, panel);
    else
        pack_k45(false, w, row_bytes, blk0, n_blk, panel, false);
}

static void pack_q5_k(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows, int64_t blk0,
                      int64_t n_blk, uint8_t *panel) {
    if (n_rows < R)
        cpu_pack_q_generic(type, R, w, row_bytes, n_rows, blk0, n_blk, panel);
    else
        pack_k45(true, w, row_bytes, blk0, n_blk, panel, false);
}

static void pack_q4_k_x16(uint32_t type, const uint8_t *w, uint64_t row_bytes, int row0,
                          int64_t blk0, int64_t n_blk, uint8_t *panel) {
    (void)type;
    AL_ASSERT(row0 == 0);
    pack_k45(false, w, row_bytes, blk0, n_blk, panel, true);
}

static void pack_q5_k_x16(uint32_t type, const uint8_t *w, uint64_t row_bytes, int row0,
                          int64_t blk0, int64_t n_blk, uint8_t *panel) {
    (void)type;
    AL_ASSERT(row0 == 0);
    pack_k45(true, w, row_bytes, blk0, n_blk, panel, true);
}

/* Q6_K: per half, quants from two 32-byte columns of ql and one of qh; 16 sub-blocks
 * of 16 with signed 8-bit scales. */

/* 4-byte group j (elements 4j..4j+3 of each 32) of quarter g of a half: a nibble of
 * l0 or l1, and bits 2g..2g+1 of h moved to 4..5. It belongs to sub-block
 * 2g + j / 4 of the half, as its group j % 4. One vpternlogd (0x0F ? nibble : high
 * bits) both masks the nibble and joins the two: the high bits' byte has bits 6..7
 * clear, because h is masked (0x33 or 0xCC) before the 16-bit shift that would move
 * a neighbour's bits there. Three or four ops a group where and/or took four or five. */
INLINE __m512i q6_group(const __m512i l0[8], const __m512i l1[8], const __m512i h[8], int g, int j) {
    const __m512i nib = _mm512_set1_epi8(0x0F);
    const __m512i h02 = _mm512_and_si512(h[j], _mm512_set1_epi8(0x33));       /* g 0 and 2 */
    const __m512i h13 = _mm512_and_si512(h[j], _mm512_set1_epi8((char)0xCC)); /* g 1 and 3 */
    switch (g) {
    case 0: return _mm512_ternarylogic_epi32(nib, l0[j], _mm512_slli_epi16(h02, 4), 0xCA);
    case 1: return _mm512_ternarylogic_epi32(nib, l1[j], _mm512_slli_epi16(h13, 2), 0xCA);
    case 2: return _mm512_ternarylogic_epi32(nib, _mm512_srli_epi16(l0[j], 4), h02, 0xCA);
    default:
        return _mm512_ternarylogic_epi32(nib, _mm512_srli_epi16(l1[j], 4), _mm512_srli_epi16(h13, 2),
                                         0xCA);
    }
}

INLINE void q6_half(const rows16 *rs, int64_t off, int half, __m512i l0[8], __m512i l1[8],
                    __m512i h[8]) {
    load_16x32(rs, off + 64 * half, l0);
    load_16x32(rs, off + 64 * half + 32, l1);
    load_16x32(rs, off + 128 + 32 * half, h);
}

/* dw of the 16 sub-blocks of the super-block at off, stored where a panel has them
 * (pb: 16 sub-blocks of cpu_sb_bytes(R, 16)), with m = -32 dw. */
INLINE void q6_scales16(const rows16 *rs, int64_t off, uint8_t *pb) {
    /* in place, d is the high half of the 4 bytes at 206 (208 would read past the
     * block) */
    const __m512 d = rs->x16 ? gather_d(rs, off + 208) : gather_f16(gather32(rs, off + 206), 1);
#pragma GCC unroll 16
    for (int k = 0; k < 4; k++) {
        const __m512i sc = gather32(rs, off + 192 + 4 * k);
#pragma GCC unroll 16
        for (int b = 0; b < 4; b++) {
            const __m512i v = _mm512_srai_epi32(_mm512_slli_epi32(sc, 24 - 8 * b), 24);
            const __m512 dw = _mm512_mul_ps(d, _mm512_cvtepi32_ps(v));
            store_scales(pb + (4 * k + b) * cpu_sb_bytes(R, 16), 16, dw,
                         _mm512_mul_ps(dw, _mm512_set1_ps(-32.0f)));
        }
    }
}

INLINE void pack_q6(const uint8_t *w, uint64_t row_bytes, int64_t blk0, int64_t n_blk,
                    uint8_t *panel, bool x16) {
    const int64_t sbb = cpu_sb_bytes(R, 16);
    rows16 rs;
    rows_init(&rs, w, row_bytes, blk0 * 210, x16);
    for (int64_t i = 0; i < n_blk; i++, panel += 16 * sbb) {
        const int64_t off = i * 210;
        prefetch_rows(&rs, off, 4, 210);
#pragma GCC unroll 16
        for (int half = 0; half < 2; half++) {
            __m512i l0[8], l1[8], h[8];
            q6_half(&rs, off, half, l0, l1, h);
#pragma GCC unroll 16
            for (int j = 0; j < 8; j++)
#pragma GCC unroll 16
                for (int g = 0; g < 4; g++)
                    store_q(panel + (8 * half + 2 * g + j / 4) * sbb, j % 4, q6_group(l0, l1, h, g, j));
        }
        q6_scales16(&rs, off, panel);
    }
}

static void pack_q6_k(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows, int64_t blk0,
                      int64_t n_blk, uint8_t *panel) {
    if (n_rows < R)
        cpu_pack_q_generic(type, R, w, row_bytes, n_rows, blk0, n_blk, panel);
    else
        pack_q6(w, row_bytes, blk0, n_blk, panel, false);
}

static void pack_q6_k_x16(uint32_t type, const uint8_t *w, uint64_t row_bytes, int row0,
                          int64_t blk0, int64_t n_blk, uint8_t *panel) {
    (void)type;
    AL_ASSERT(row0 == 0);
    pack_q6(w, row_bytes, blk0, n_blk, panel, true);
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
    rows16 rs;
    rows_init(&rs, w, row_bytes, blk0 * 84, false);
    for (int64_t i = 0; i < n_blk; i++, panel += 16 * sbb) {
        const int64_t off = i * 84;
        prefetch_rows(&rs, off, 2, 84);
        for (int half = 0; half < 2; half++) {
            __m512i q[8];
            load_16x32(&rs, off + 16 + 32 * half, q);
            for (int g = 0; g < 4; g++)
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    store_q(panel + (8 * half + 2 * g + j / 4) * sbb, j % 4,
                            _mm512_and_si512(_mm512_srli_epi16(q[j], 2 * g), _mm512_set1_epi8(3)));
        }
        const __m512i dd = gather32(&rs, off + 80);
        const __m512 d = gather_f16(dd, 0), dmin = gather_f16(dd, 1);
        for (int k = 0; k < 4; k++) {
            const __m512i sc = gather32(&rs, off + 4 * k);
#pragma GCC unroll 4
            for (int b = 0; b < 4; b++) {
                const __m512i v = byte_of(sc, b);
                store_scales(panel + (4 * k + b) * sbb, 16,
                             _mm512_mul_ps(
                                 d, _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15)))),
                             _mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), dmin),
                                           _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4))));
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
    rows16 rs;
    rows_init(&rs, w, row_bytes, blk0 * 110, false);
    for (int64_t i = 0; i < n_blk; i++, panel += 16 * sbb) {
        const int64_t off = i * 110;
        prefetch_rows(&rs, off, 2, 110);
        __m512i hm[8];
        load_16x32(&rs, off, hm);
        for (int half = 0; half < 2; half++) {
            __m512i q[8];
            load_16x32(&rs, off + 32 + 32 * half, q);
            for (int g = 0; g < 4; g++) {
                const int bit = 4 * half + g; /* moved to bit 2 of each byte */
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    const __m512i hb = bit >= 2 ? _mm512_srli_epi16(hm[j], bit - 2)
                                                : _mm512_slli_epi16(hm[j], 2 - bit);
                    store_q(panel + (8 * half + 2 * g + j / 4) * sbb, j % 4,
                            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q[j], 2 * g),
                                                             _mm512_set1_epi8(3)),
                                            _mm512_and_si512(hb, _mm512_set1_epi8(4))));
                }
            }
        }
        /* d is the high half of the 4 bytes at 106 (108 would read past the block) */
        const __m512 d = gather_f16(gather32(&rs, off + 106), 1);
        const __m512i s0 = gather32(&rs, off + 96), s1 = gather32(&rs, off + 100);
        const __m512i s2 = gather32(&rs, off + 104);
#pragma GCC unroll 16
        for (int s = 0; s < 16; s++) {
            /* the 6-bit scale s (see quant.c q3_k_scale), stored + 32 */
            const __m512i lo =
                s < 8 ? _mm512_and_si512(byte_of(s < 4 ? s0 : s1, s % 4), _mm512_set1_epi32(15))
                      : _mm512_srli_epi32(byte_of(s < 12 ? s0 : s1, s % 4), 4);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(byte_of(s2, s % 4), 2 * (s / 4)),
                                                _mm512_set1_epi32(3));
            const __m512i v = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)),
                                               _mm512_set1_epi32(32));
            const __m512 dw = _mm512_mul_ps(d, _mm512_cvtepi32_ps(v));
            store_scales(panel + s * sbb, 16, dw, _mm512_mul_ps(dw, _mm512_set1_ps(-4.0f)));
        }
    }
}

/* acc + the products of w's unsigned bytes with the 4 signed bytes at x, broadcast: one
 * vpdpbusd with its operand broadcast from memory. GCC 12 does not fold the broadcast
 * into vpdpbusd (it does into vfmadd, and clang does both), and its separate vpbroadcastd
 * stood beside each of the prompt kernel's vpdpbusd: 64 more instructions per block of
 * 8 tokens. */
typedef int32_t al_i32_alias __attribute__((may_alias));
INLINE __m512i dpbusd_x(__m512i acc, __m512i w, const uint8_t *x) {
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const al_i32_alias *)x));
    return acc;
#else
    return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(load_i32(x)));
#endif
}

/* ---- quantized microkernel ------------------------------------------------------------- */

/* The integer sums of one sub-block of b for nt tokens. With a constant offset they
 * start at the tile's -offset * sum(qa). */
/* One token's sums of a sub-block: four chains, since a block's sums are its own (the
 * int32 adds are exact in any order) and four dependent vpdpbusd per chain held too
 * few blocks in flight. Groups g >= hi16 of wq hold 16 times the quants (the high
 * nibbles masked in place, hi16_of, one op where hi4 takes two): they sum in chains of
 * their own, divided by 16 at the end, exactly (the sum is a multiple of 16). With
 * hi16 = 0 every group does, and mins must hold (no offset term to keep whole). x is
 * slot 0 of a tile of tt tokens: TT, or 1 or 2 for a narrow tile (cpu_mk_args.narrow). */
INLINE void mk_sums1(const __m512i *wq, const uint8_t *x, const int b, bool mins, int hi16,
                     const int tt, __m512i is[TT]) {
    const int32_t *zq = (const int32_t *)(x + tt * b) + tt;
    const int n = b / 4;
    __m512i c[4];
    c[0] = mins ? _mm512_setzero_si512() : _mm512_set1_epi32(zq[0]);
    c[1] = c[2] = c[3] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int g = 0; g < n; g++) {
        /* none or all scaled: any chain; half: 0 and 1 plain, 2 and 3 scaled */
        const int k = hi16 == 0 || hi16 == n ? g & 3 : (g >= hi16) * 2 + (g & 1);
        c[k] = dpbusd_x(c[k], wq[g], x + g * tt * 4);
    }
    const __m512i lo = _mm512_add_epi32(c[0], c[1]), hi = _mm512_add_epi32(c[2], c[3]);
    if (hi16 == n) is[0] = _mm512_add_epi32(lo, hi);
    else if (hi16 == 0) is[0] = _mm512_srai_epi32(_mm512_add_epi32(lo, hi), 4);
    else is[0] = _mm512_add_epi32(lo, _mm512_srai_epi32(hi, 4));
}

INLINE void mk_q_sums_w(const __m512i *wq, const uint8_t *x, const int nt, const int b, bool mins,
                        const int tt, __m512i is[TT]) {
    const int32_t *zq = (const int32_t *)(x + tt * b) + tt;
    if (nt == 1) {
        mk_sums1(wq, x, b, mins, b / 4, tt, is);
        return;
    }
    __m512i ia[TT], ib[TT];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        ia[t] = mins ? _mm512_setzero_si512() : _mm512_set1_epi32(zq[t]);
        ib[t] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int g = 0; g < b / 4; g++) {
        const __m512i wv = wq[g];
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            /* two chains for few tokens: vpdpbusd has a latency of 5 */
            const uint8_t *xg = x + (g * tt + t) * 4;
            if (nt <= 2 && (g & 1))
                ib[t] = dpbusd_x(ib[t], wv, xg);
            else
                ia[t] = dpbusd_x(ia[t], wv, xg);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        is[t] = nt <= 2 ? _mm512_add_epi32(ia[t], ib[t]) : ia[t];
}

INLINE void mk_q_sums(const uint8_t *p, const uint8_t *x, const int nt, const int b, bool mins,
                      __m512i is[TT]) {
    __m512i wq[8];
#pragma GCC unroll 8
    for (int g = 0; g < b / 4; g++)
        wq[g] = _mm512_load_si512((const __m512i *)(p + 64 * g));
    mk_q_sums_w(wq, x, nt, b, mins, TT, is);
}

/* Legacy types: acc += isum * (dw * da) (+ m * ds). K-quants: sacc += isum * dw
 * (+ m * sum(qa)) over the sub-blocks of a super-block, then acc += sacc * da. */
INLINE void mk_q_body(const cpu_mk_args *a, const int nt, const int b, const bool kq,
                      const bool mins) {
    const __mmask16 rows = (__mmask16)((1u << a->n_rows) - 1);
    const int per = kq ? 256 / b : 1;
    const uint8_t *p = a->panel, *x = a->act;
    __m512 acc[TT];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        acc[t] = a->first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(rows, a->out + t * a->ldo);
    for (int64_t s0 = 0; s0 < a->n_sb; s0 += per) {
        const float *da = (const float *)(x + TT * b);
        __m512 sacc[TT];
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++)
            sacc[t] = _mm512_setzero_ps();
        for (int s = 0; s < per; s++) {
            __m512i is[TT];
            mk_q_sums(p, x, nt, b, mins, is);
            const __m512 dw = _mm512_load_ps((const float *)(p + R * b));
            const __m512 m = _mm512_load_ps((const float *)(p + R * b) + R);
            const float *aux = (const float *)(x + TT * b) + TT;
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++) {
                const __m512 fs = _mm512_cvtepi32_ps(is[t]);
                if (kq)
                    sacc[t] = _mm512_fmadd_ps(fs, dw, sacc[t]);
                else
                    acc[t] = _mm512_fmadd_ps(fs, _mm512_mul_ps(dw, _mm512_set1_ps(da[t])), acc[t]);
                if (mins && kq)
                    sacc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(aux[t]), sacc[t]);
                else if (mins)
                    acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(aux[t]), acc[t]);
            }
            p += R * (b + 8);
            x += TT * (b + 8);
        }
        if (kq) {
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++)
                acc[t] = _mm512_fmadd_ps(sacc[t], _mm512_set1_ps(da[t]), acc[t]);
        }
    }
    const __m512 bias = a->bias ? _mm512_maskz_loadu_ps(rows, a->bias) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        _mm512_mask_storeu_ps(a->out + t * a->ldo, rows,
                              a->bias ? _mm512_add_ps(acc[t], bias) : acc[t]);
}

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
    case 4:                                                                                        \
        CALL(4);                                                                                   \
        break;                                                                                     \
    case 5:                                                                                        \
        CALL(5);                                                                                   \
        break;                                                                                     \
    case 6:                                                                                        \
        CALL(6);                                                                                   \
        break;                                                                                     \
    case 7:                                                                                        \
        CALL(7);                                                                                   \
        break;                                                                                     \
    default:                                                                                       \
        CALL(8);                                                                                   \
        break;                                                                                     \
    }

/* The in-place kernels' accumulators over a full panel: from out (or zero on the
 * first chunk), and back to out with the bias on the last, as mk_q_body does. */
INLINE void inplace_start(const cpu_mk_args *a, const int nt, __m512 acc[TT]) {
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        acc[t] = a->first ? _mm512_setzero_ps() : _mm512_loadu_ps(a->out + t * a->ldo);
}

INLINE void inplace_finish(const cpu_mk_args *a, const int nt, const __m512 acc[TT]) {
    const __m512 bias = a->bias ? _mm512_loadu_ps(a->bias) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        _mm512_storeu_ps(a->out + t * a->ldo, a->bias ? _mm512_add_ps(acc[t], bias) : acc[t]);
}

/* A few tokens over a full panel of a legacy type, the weights read in place: the
 * blocks legacy_block would pack go straight into the sums, with the arithmetic of
 * mk_q_body to the bit, and no panel is stored and loaded again. */
INLINE void mk_q_inplace(const cpu_mk_args *a, const int kind, const int nt, const bool mins,
                         const bool x16, const int tt) {
    rows16 rs;
    rows_init(&rs, a->w, a->w_row_bytes, a->w_blk0 * g_legacy_size[kind], x16);
    const uint8_t *x = a->act;
    __m512 acc[TT];
    inplace_start(a, nt, acc);
    for (int64_t i = 0; i < a->n_sb; i++, x += tt * (32 + 8)) {
        __m512i q[8], is[TT];
        __m512 dw, m;
        /* one token of Q4_0 or Q4_1: the high quants times 16, one op fewer a vector */
        const bool hi16 = nt == 1 && (kind == Q4_0 || kind == Q4_1);
        legacy_block(kind, &rs, i, q, &dw, &m, hi16);
        if (hi16) mk_sums1(q, x, 32, mins, 4, tt, is);
        else mk_q_sums_w(q, x, nt, 32, mins, tt, is);
        const float *da = (const float *)(x + tt * 32), *aux = da + tt;
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            const __m512 fs = _mm512_cvtepi32_ps(is[t]);
            acc[t] = _mm512_fmadd_ps(fs, _mm512_mul_ps(dw, _mm512_set1_ps(da[t])), acc[t]);
            if (mins) acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(aux[t]), acc[t]);
        }
    }
    inplace_finish(a, nt, acc);
}

/* The same for Q4_K and Q5_K (mins; super-blocks of 8 sub-blocks of 32), with the
 * arithmetic of mk_q_body's K-quant path to the bit. */
INLINE void mk_q_inplace_k45(const cpu_mk_args *a, const bool five, const int nt, const bool x16,
                             const int tt) {
    const int64_t t = five ? 176 : 144, sbb = cpu_sb_bytes(R, 32);
    rows16 rs;
    rows_init(&rs, a->w, a->w_row_bytes, a->w_blk0 * t, x16);
    _Alignas(64) uint8_t sc[8 * R * (32 + 8)]; /* dw and m where a panel has them */
    const uint8_t *x = a->act;
    __m512 acc[TT];
    inplace_start(a, nt, acc);
    for (int64_t i = 0; i < a->n_sb / 8; i++) {
        const int64_t off = i * t;
        if (!x16 || a->w_x16_pf) prefetch_rows(&rs, off, 3, (int)t);
        k4_scales16(&rs, off, sc);
        __m512i h[8];
        if (five) load_16x32(&rs, off + 16, h);
        const float *da = (const float *)(x + tt * 32);
        __m512 sacc[TT];
#pragma GCC unroll 8
        for (int k = 0; k < nt; k++)
            sacc[k] = _mm512_setzero_ps();
        for (int c = 0; c < 4; c++) {
            __m512i u[2][8];
            const bool hi16 = nt == 1 && !five;
            k45_chunk(five, &rs, off, c, h, u[0], u[1], hi16);
#pragma GCC unroll 2
            for (int half = 0; half < 2; half++, x += tt * (32 + 8)) {
                const uint8_t *sb = sc + (2 * c + half) * sbb;
                const __m512 dw = _mm512_load_ps((const float *)(sb + R * 32));
                const __m512 m = _mm512_load_ps((const float *)(sb + R * 32) + R);
                const float *aux = (const float *)(x + tt * 32) + tt;
                __m512i is[TT];
                if (hi16 && half) mk_sums1(u[1], x, 32, true, 0, tt, is);
                else mk_q_sums_w(u[half], x, nt, 32, true, tt, is);
#pragma GCC unroll 8
                for (int k = 0; k < nt; k++) {
                    sacc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[k]), dw, sacc[k]);
                    sacc[k] = _mm512_fmadd_ps(m, _mm512_set1_ps(aux[k]), sacc[k]);
                }
            }
        }
#pragma GCC unroll 8
        for (int k = 0; k < nt; k++)
            acc[k] = _mm512_fmadd_ps(sacc[k], _mm512_set1_ps(da[k]), acc[k]);
    }
    inplace_finish(a, nt, acc);
}

/* The same for Q6_K (offset 32, super-blocks of 16 sub-blocks of 16), with the
 * arithmetic of mk_q_body's K-quant path to the bit. */
INLINE void mk_q_inplace_q6(const cpu_mk_args *a, const int nt, const bool x16, const int tt) {
    const int64_t sbb = cpu_sb_bytes(R, 16);
    rows16 rs;
    rows_init(&rs, a->w, a->w_row_bytes, a->w_blk0 * 210, x16);
    _Alignas(64) uint8_t sc[16 * R * (16 + 8)]; /* dw and m where a panel has them */
    const uint8_t *x = a->act;
    __m512 acc[TT];
    inplace_start(a, nt, acc);
    for (int64_t i = 0; i < a->n_sb / 16; i++) {
        const int64_t off = i * 210;
        prefetch_rows_to(&rs, off, 4, 210, x16);
        q6_scales16(&rs, off, sc);
        const float *da = (const float *)(x + tt * 16);
        __m512 sacc[TT];
#pragma GCC unroll 8
        for (int k = 0; k < nt; k++)
            sacc[k] = _mm512_setzero_ps();
        for (int half = 0; half < 2; half++) {
            __m512i l0[8], l1[8], h[8];
            q6_half(&rs, off, half, l0, l1, h);
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++)
#pragma GCC unroll 2
                for (int jj = 0; jj < 2; jj++, x += tt * (16 + 8)) {
                    /* sub-block 8 half + 2 g + jj: groups j = 4 jj .. 4 jj + 3 */
                    __m512i wq[4], is[TT];
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++)
                        wq[k] = q6_group(l0, l1, h, g, 4 * jj + k);
                    mk_q_sums_w(wq, x, nt, 16, false, tt, is);
                    const __m512 dw =
                        _mm512_load_ps((const float *)(sc + (8 * half + 2 * g + jj) * sbb + R * 16));
#pragma GCC unroll 8
                    for (int k = 0; k < nt; k++)
                        sacc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[k]), dw, sacc[k]);
                }
        }
#pragma GCC unroll 8
        for (int k = 0; k < nt; k++)
            acc[k] = _mm512_fmadd_ps(sacc[k], _mm512_set1_ps(da[k]), acc[k]);
    }
    inplace_finish(a, nt, acc);
}

/* One copy per kernel token count (1 or 2), layout and tile width (a single token's
 * tile may be narrow, 1 wide or 2 with its two passes: cpu_mk_args.narrow), so that
 * the loops over tokens unroll and the reads are fixed. */
#define BY_1_2(CALL)                                                                               \
    do {                                                                                           \
        if (a->n_tok == 1 && a->narrow && x16)                                                     \
            CALL(1, true, 1);                                                                      \
        else if (a->n_tok == 1 && a->narrow)                                                       \
            CALL(1, false, 1);                                                                     \
        else if (a->narrow && x16)                                                                 \
            CALL(2, true, 2);                                                                      \
        else if (a->narrow)                                                                        \
            CALL(2, false, 2);                                                                     \
        else if (a->n_tok == 1 && x16)                                                             \
            CALL(1, true, TT);                                                                     \
        else if (a->n_tok == 1)                                                                    \
            CALL(1, false, TT);                                                                    \
        else if (x16)                                                                              \
            CALL(2, true, TT);                                                                     \
        else                                                                                       \
            CALL(2, false, TT);                                                                    \
    } while (0)

static void mk_q_inplace_512(const cpu_mk_args *a) {
    AL_ASSERT(a->n_rows == R && a->n_tok <= 2);
    const bool x16 = a->w_x16;
#define Q4_0_(n, x, t) mk_q_inplace(a, Q4_0, n, false, x, t)
#define Q4_1_(n, x, t) mk_q_inplace(a, Q4_1, n, true, x, t)
#define Q5_0_(n, x, t) mk_q_inplace(a, Q5_0, n, false, x, t)
#define Q5_1_(n, x, t) mk_q_inplace(a, Q5_1, n, true, x, t)
#define Q8_0_(n, x, t) mk_q_inplace(a, Q8_0, n, false, x, t)
#define MXFP4_(n, x, t) mk_q_inplace(a, MXFP4, n, false, x, t)
#define Q4_K_(n, x, t) mk_q_inplace_k45(a, false, n, x, t)
#define Q5_K_(n, x, t) mk_q_inplace_k45(a, true, n, x, t)
#define Q6_K_(n, x, t) mk_q_inplace_q6(a, n, x, t)
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

static void mk_q_512(const cpu_mk_args *a) {
    if (!a->panel) {
        mk_q_inplace_512(a);
        return;
    }
#define LEGACY(t) mk_q_body(a, t, 32, false, false)
#define LEGACY_M(t) mk_q_body(a, t, 32, false, true)
#define K16(t) mk_q_body(a, t, 16, true, false)
#define K16_M(t) mk_q_body(a, t, 16, true, true)
#define K32(t) mk_q_body(a, t, 32, true, false)
#define K32_M(t) mk_q_body(a, t, 32, true, true)
    if (a->group == 32 && !a->mins)
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
#undef K16
#undef K16_M
#undef K32
#undef K32_M
}

/* ---- float weights --------------------------------------------------------------------- */

INLINE __m512 load16_as_f32(uint32_t type, const uint8_t *p) {
    if (type == AL_TYPE_F32) return _mm512_loadu_ps(p);
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (type == AL_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* One copy per weight type, so that the loads and the transpose stay in registers. */
INLINE void pack_f_body(const uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows,
                        int64_t k0, int64_t nk, float *panel) {
    const int64_t es = type == AL_TYPE_F32 ? 4 : 2;
    const uint8_t *rows[R];
    for (int r = 0; r < R; r++)
        rows[r] = w + (uint64_t)(r < n_rows ? r : n_rows - 1) * row_bytes + k0 * es;
    int64_t k = 0;
    for (; k + 16 <= nk; k += 16) {
        __m512 v[16];
#pragma GCC unroll 16
        for (int r = 0; r < R; r++)
            v[r] = load16_as_f32(type, rows[r] + k * es);
        transpose_16x16(v);
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++)
            _mm512_store_ps(panel + (k + c) * R, v[c]);
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

static void pack_f_512(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows, int64_t k0,
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
    const __mmask16 rows = (__mmask16)((1u << a->n_rows) - 1);
    const float *p = a->panel, *x = a->act;
    __m512 acc[TT], acc2[TT];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        acc[t] = a->first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(rows, a->out + t * a->ldo);
        acc2[t] = _mm512_setzero_ps();
    }
    int64_t k = 0;
    for (; k + 2 <= a->n_k; k += 2) {
        const __m512 w0 = _mm512_load_ps(p + k * R), w1 = _mm512_load_ps(p + (k + 1) * R);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            acc[t] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[t * a->ldx + k]), acc[t]);
            acc2[t] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[t * a->ldx + k + 1]), acc2[t]);
        }
    }
    if (k < a->n_k) {
        const __m512 w0 = _mm512_load_ps(p + k * R);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++)
            acc[t] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[t * a->ldx + k]), acc[t]);
    }
    const __m512 bias = a->bias ? _mm512_maskz_loadu_ps(rows, a->bias) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        const __m512 v = _mm512_add_ps(acc[t], acc2[t]);
        _mm512_mask_storeu_ps(a->out + t * a->ldo, rows, a->bias ? _mm512_add_ps(v, bias) : v);
    }
}

static void mk_f_512(const cpu_mk_args *a) {
#define MKF(t) mk_f_body(a, t)
    BY_TOKENS(a->n_tok, MKF)
#undef MKF
}

/* ---- per-row ops ----------------------------------------------------------------------- */

static void rms_norm_512(const float *x, const float *w, float eps, float *out, int64_t n) {
    /* squares summed in double, like the reference: x*x is exact in a double */
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        const __m512d hi = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
        s0 = _mm512_fmadd_pd(lo, lo, s0);
        s1 = _mm512_fmadd_pd(hi, hi, s1);
    }
    double ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    for (; i < n; i++)
        ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    const __m512 sv = _mm512_set1_ps(scale);
    for (i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), sv),
                                       _mm512_maskz_loadu_ps(k, w + i));
        _mm512_mask_storeu_ps(out + i, k, v);
    }
}

static void silu_mul_512(float *g, const float *u, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 gv = _mm512_maskz_loadu_ps(k, g + i);
        const __m512 s =
            _mm512_div_ps(gv, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
        _mm512_mask_storeu_ps(g + i, k, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, u + i)));
    }
}

/* ops.h: gelu(x) = x / (1 + exp(-2z)); a 2z beyond exp512's clamp gives x or a value
 * below 1e-37 where the exact one is 0. */
static void gelu_mul_512(float *g, const float *u, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), k0 = _mm512_set1_ps(CPU_GELU_K0);
    const __m512 k1 = _mm512_set1_ps(CPU_GELU_K1);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 x = _mm512_maskz_loadu_ps(k, g + i);
        const __m512 z2 = _mm512_mul_ps(x, _mm512_fmadd_ps(k1, _mm512_mul_ps(x, x), k0));
        const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), z2));
        const __m512 gl = _mm512_div_ps(x, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(g + i, k, _mm512_mul_ps(gl, _mm512_maskz_loadu_ps(k, u + i)));
    }
}

/* min(limit, g) and max(-limit, .) keep a NaN input NaN, as the reference does. A gate
 * below about -52 / alpha puts e^(-alpha x) beyond exp512's clamp: then x / 2.4e38
 * where the exact value is below 1e-36. */
static void swiglu_oai_512(float *g, const float *u, float alpha, float limit, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), lim = _mm512_set1_ps(limit);
    const __m512 neg_lim = _mm512_set1_ps(-limit), neg_alpha = _mm512_set1_ps(-alpha);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 x = _mm512_min_ps(lim, _mm512_maskz_loadu_ps(k, g + i));
        const __m512 y =
            _mm512_max_ps(neg_lim, _mm512_min_ps(lim, _mm512_maskz_loadu_ps(k, u + i)));
        const __m512 e = exp512(_mm512_mul_ps(neg_alpha, x));
        _mm512_mask_storeu_ps(g + i, k, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)),
                                                      _mm512_add_ps(y, one)));
    }
}

static void scale_512(float *x, float s, int64_t n) {
    const __m512 sv = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), sv));
    }
}

static void add_512(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(
            x + i, k,
            _mm512_add_ps(_mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, y + i)));
    }
}

static uint64_t sum_u64_512(const uint64_t *p, int64_t n) {
    __m512i a = _mm512_setzero_si512(), b = a;
    for (int64_t i = 0; i < n; i += 16) {
        a = _mm512_add_epi64(a, _mm512_load_si512((const __m512i *)(p + i)));
        b = _mm512_add_epi64(b, _mm512_load_si512((const __m512i *)(p + i + 8)));
    }
    /* unsigned: _mm512_reduce_add_epi64 adds signed words, whose overflow is undefined */
    uint64_t s[8], sum = 0;
    _mm512_storeu_si512((__m512i *)s, _mm512_add_epi64(a, b));
    for (int i = 0; i < 8; i++)
        sum += s[i];
    return sum;
}

/* The types read in place for a few tokens, and those that also take the x16 layout:
 * the same, as both read through rows16. */
#define X16_TYPES                                                                                  \
    (1ull << AL_TYPE_Q4_0 | 1ull << AL_TYPE_Q4_1 | 1ull << AL_TYPE_Q5_0 | 1ull << AL_TYPE_Q5_1 |     \
     1ull << AL_TYPE_Q8_0 | 1ull << AL_TYPE_Q4_K | 1ull << AL_TYPE_Q5_K | 1ull << AL_TYPE_Q6_K |     \
     1ull << AL_TYPE_MXFP4)

const cpu_kernels cpu_kernels_avx512 = {
    .isa = CPU_ISA_AVX512,
    .rows = R,
    .tile = TT,
    .narrow = true,
    .attn_lanes = LANES,
    .attn_align = 16,
    .attn_ranges = true,
    .quantize = quantize_512,
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
    .mk_q = mk_q_512,
    .inplace_types = X16_TYPES,
    .x16_types = X16_TYPES,
    .x16_pack = x16_pack_512,
    .pack_x16 = {[AL_TYPE_Q4_0] = pack_q4_0_x16,
                 [AL_TYPE_Q4_1] = pack_q4_1_x16,
                 [AL_TYPE_Q5_0] = pack_q5_0_x16,
                 [AL_TYPE_Q5_1] = pack_q5_1_x16,
                 [AL_TYPE_Q8_0] = pack_q8_0_x16,
                 [AL_TYPE_Q4_K] = pack_q4_k_x16,
                 [AL_TYPE_Q5_K] = pack_q5_k_x16,
                 [AL_TYPE_Q6_K] = pack_q6_k_x16,
                 [AL_TYPE_MXFP4] = pack_mxfp4_x16},
    .pack_f = pack_f_512,
    .mk_f = mk_f_512,
    .attn = cpu_attn_512,
    .attn_few = cpu_attn_512_few,
    .attn_few_lanes = CPU_ATTN_FEW,
    .rms_norm = rms_norm_512,
    .silu_mul = silu_mul_512,
    .gelu_mul = gelu_mul_512,
    .swiglu_oai = swiglu_oai_512,
    .scale = scale_512,
    .add = add_512,
    .sigmoid_mul = cpu_sigmoid_mul_512,
    .delta = cpu_delta_512,
    .conv = cpu_conv_512,
    .sum_u64 = sum_u64_512,
};

#if defined(__clang__)
#pragma clang attribute pop
#endif
