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
 * time on a Zen 2.
 *
 * The reads of the weights, for the packs and the in-place kernels, are pack_simd.h's,
 * shared with kernels_avx512.c and compiled here for 8 lanes (simd_avx2.h). What this
 * file keeps is its own: the x16 prefetches, the Q4_K/Q5_K scales, Q8_0's signed
 * panels, Q6_K's reads, the vpmaddubsw microkernels and the in-place kernels, which
 * take both halves of an x16 group.
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
#include "simd_avx2.h"
#include "ops.h"
#include "format/quant.h"
#include "util.h"

enum { LANES = 8, Q8_SIGNED = 1 };

#include "pack_simd.h"

INLINE float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* ---- activations ----------------------------------------------------------------------- */

/* 8 int32 -> 8 int8 (values within int8 range). */
INLINE __m128i pack_i8x8(__m256i v) {
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return _mm_packs_epi16(w, w);
}

/* As quantize_scalar, bit for bit: the same divisions, round-to-nearest-even. */
static void quantize_avx2(const float *x, int64_t n, cpu_act_fmt f, uint8_t *tile, int slot,
                          int tt) {
    const int b = f.b;
    _Alignas(32) int8_t q[CPU_ACT_GROUP + 8];
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    for (int64_t g0 = 0; g0 < n; g0 += CPU_ACT_GROUP, x += CPU_ACT_GROUP) {
        __m256 am = _mm256_setzero_ps();
        for (int v = 0; v < CPU_ACT_GROUP; v += 8)
            am = _mm256_max_ps(am, _mm256_and_ps(_mm256_loadu_ps(x + v), abs_mask));
        const float amax = hmax8(am);
        const float mul = amax != 0 ? 127.0f / amax : 0.0f;
        const float d = f.exact_scale
                            ? amax / 127.0f
                            : _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
        for (int v = 0; v < CPU_ACT_GROUP; v += 8) {
            const __m256i qi =
                _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + v), _mm256_set1_ps(mul)));
            _mm_storel_epi64((__m128i *)(q + v), pack_i8x8(qi));
        }
        put_group(q, CPU_ACT_GROUP, d, f, tile + (g0 / b) * cpu_sb_bytes(tt, b), slot, tt);
    }
}

/* ---- AVX2 only: the x16 prefetches, the Q4_K/Q5_K scales, Q8_0, Q6_K ----------------- */

/* A prefetch into L2 (prefetcht1) that the compiler leaves where the code puts it.
 * _mm_prefetch depends on nothing, and GCC scheduled the 28 of an unrolled Q6_K
 * super-block, meant to go out a quarter at a time, together at its start: the memory
 * then idled while the super-block was computed, and a Q6_K GEMV from DRAM on two Zen 2
 * cores took markedly longer than with the prefetches where they were put. */
INLINE void prefetch_pinned(const uint8_t *p) {
    __asm__ volatile("prefetcht1 %0" : : "m"(*p));
}

/* The prefetches on the x16 stream (pack_simd.h prefetch_x16). The two halves of a
 * group read the same lines, one after the other (mm_grain_x16). Only Q6_K's in-place
 * GEMV (len: its bytes per row) and the packs (len 0) prefetch there. The GEMV
 * prefetches half a group ahead, each half in step with its own progress: half 0 the
 * second half of its group's bytes, half 1 the first half of the next group's (when
 * only the first half had fetched ahead, the memory idled while the second worked from
 * L2). A pack prefetches PF_AHEAD ahead in the first half.
 *
 * The in-place GEMV of the legacy types and Q4_K/Q5_K over x16 prefetches nothing, as
 * on AVX-512 (kernels_avx512.c): the hardware prefetchers follow its stream. On a
 * 2-core Zen 4 running these kernels (ANYLLM_ISA=avx2), alternating tg64 runs of
 * bench-1b Q4_0, Q8_0 and Q4_K_M came nearer the roofline without them. (On two Zen 2
 * cores, prefetching half a group ahead into L1 alone had beaten other placements on
 * bench-1b Q4_0; none was not tried there.) Q6_K, read out of order, keeps them.
 *
 * A constant count of lines from p, which cover its bytes wherever they start: a loop
 * over the aligned lines had been ~13 instructions per Q4_0 block, a fifth of the
 * GEMV's. */
INLINE void prefetch_x16(const panel_rows *rs, int64_t off, int span) {
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
}

/* pack_simd.h k4_scales, all 8 scales and mins of a lane at once. */
INLINE void k4_scales(const panel_rows *rs, int64_t off, uint8_t *pb) {
    const __m256i dd = gather_2xf16(rs, off);
    const __m256 d = vf_f16_of(dd, 0), dmin = vf_f16_of(dd, 1);
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
INLINE __m256 q6_d(const panel_rows *rs, int64_t off) {
    return rs->x16 ? gather_d(rs, off + 208) : vf_f16_of(gather32(rs, off + 206), 1);
}

/* dw of sub-block s of the super-block at off. */
INLINE __m256 q6_dw(const panel_rows *rs, int64_t off, __m256 d, int s) {
    const __m256i sc = gather32(rs, off + 192 + 4 * (s / 4));
    const __m256i top = s % 4 == 3 ? sc : _mm256_slli_epi32(sc, 24 - 8 * (s % 4));
    const __m256i v = _mm256_srai_epi32(top, 24);
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(v));
}

INLINE void pack_q6(const uint8_t *w, uint64_t row_bytes, int64_t blk0, int64_t n_blk,
                    uint8_t *panel, bool x16, int row0) {
    const int64_t sbb = cpu_sb_bytes(R, 16);
    panel_rows rs;
    rows_init(&rs, w, row_bytes, blk0 * 210, x16, row0);
    for (int64_t i = 0; i < n_blk; i++, panel += 16 * sbb) {
        const int64_t off = i * 210;
        prefetch_rows(&rs, off, 4, 210);
        for (int half = 0; half < 2; half++) {
            __m256i l[8], h[8];
            load_cols32(&rs, off + 128 + 32 * half, h);
            for (int col = 0; col < 2; col++) {
                load_cols32(&rs, off + 64 * half + 32 * col, l);
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

/* As mk_q_body in kernels_avx512.c: per sub-block acc += isum * (dw * da) (+ m * ds). */
INLINE void mk_q_body(const cpu_mk_args *a, const int nt, const int b, const bool mins,
                      const bool sgn, const int n16) {
    const uint8_t *p = a->panel, *x = a->act;
    __m256 acc[TT];
    for (int t = 0; t < nt; t++)
        acc[t] = _mm256_setzero_ps();
    if (!a->first)
        for (int t = 0; t < nt; t++)
            acc[t] = load_rows(a, a->out + t * a->ldo);
    for (int64_t s = 0; s < a->n_sb; s++, p += R * (b + 8), x += TT * (b + 8)) {
        __m256i is[TT];
        mk_q_sums(p, x, nt, b, mins, sgn, n16, is);
        const float *da = (const float *)(x + TT * b);
        q_epilogue(is, _mm256_load_ps((const float *)(p + R * b)),
                   _mm256_load_ps((const float *)(p + R * b) + R), da, da + TT, nt, mins, acc);
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
 * again. The reads are x16's (panel_rows): a group's 8 rows of a field are one load.
 *
 * A call takes nh halves of a group: 1, the panel's, or 2, the whole group
 * (cpu_mk_args.x16_group), block by block. A group's 16 units of a field share a cache
 * line, so with both halves each line is read once, in one stream; a half alone reads
 * half of every line and leaves the other half to the next call. On two Zen 2 cores a
 * GEMV from DRAM (2048 x 8192) took a larger share of the measured bandwidth this way
 * (Q4_0, Q8_0), and from L3 one core ran Q4_0 faster. Each row's sum is the same
 * either way. */

typedef struct inplace {
    panel_rows rs[2]; /* half h: rows 8 h.. of the group, or the panel's */
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
        const float *da = (const float *)(x + tt * 32);
#pragma GCC unroll 2
        for (int h = 0; h < nh; h++) {
            __m256i q[8], is[TT];
            __m256 dw, m;
            legacy_block(kind, &ip.rs[h], i, q, &dw, &m, false);
            mk_q_sums_w(q, x, nt, 32, mins, sgn, n16, 0, tt, is);
            q_epilogue(is, dw, m, da, da + tt, nt, mins, ip.acc[h]);
        }
    }
    inplace_finish(a, nt, nh, &ip);
}

/* Q4_K and Q5_K (mins; super-blocks of 8 sub-blocks of 32). Both halves of a group go
 * chunk by chunk (2 sub-blocks), as Q6_K's sub-blocks do: a Q4_K GEMV from DRAM on two
 * Zen 2 cores took a larger share of the bandwidth this way than super-block by
 * super-block. Q5_K's fifth bits, 8 registers a half, are loaded per chunk when there are two. */
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
            k4_scales(&ip.rs[hf], off, sc[hf]);
        if (five && nh == 1) load_cols32(&ip.rs[0], off + 16, h);
        for (int c = 0; c < 4; c++, x += 2 * tt * (32 + 8)) {
#pragma GCC unroll 2
            for (int hf = 0; hf < nh; hf++) {
                const panel_rows *rs = &ip.rs[hf];
                /* rows: a quarter of the super-block's prefetches per chunk (all 19
                 * at its start streamed a Q4_K GEMV from DRAM more slowly on two Zen 2
                 * cores than spread out; Q6_K likewise, per 4 sub-blocks); x16: none
                 * (prefetch_x16) */
                if (!rs->x16) prefetch_rows(rs, off + t / 4 * c, 1, (int)t / 4);
                __m256i u[2][8], g[8];
                if (five && nh == 2) load_cols32(rs, off + 16, h);
                if (five) k45_chunk(five, rs, off, c, h, u[0], u[1], false);
                else load_cols32(rs, off + 16 + 32 * c, g);
                const uint8_t *xs = x;
#pragma GCC unroll 2
                for (int half = 0; half < 2; half++, xs += tt * (32 + 8)) {
                    const uint8_t *sb = sc[hf] + (2 * c + half) * sbb;
                    const __m256 dw = _mm256_load_ps((const float *)(sb + R * 32));
                    const __m256 m = _mm256_load_ps((const float *)(sb + R * 32) + R);
                    const float *da = (const float *)(xs + tt * 32);
                    __m256i is[TT];
                    if (five) mk_q_sums_w(u[half], xs, nt, 32, true, false, 4, 0, tt, is);
                    else mk_q_sums_w(g, xs, nt, 32, true, false, 8, 1 + half, tt, is);
                    q_epilogue(is, dw, m, da, da + tt, nt, true, ip.acc[hf]);
                }
            }
        }
    }
    inplace_finish(a, nt, nh, &ip);
}

/* Q6_K (offset 32, super-blocks of 16 sub-blocks of 16), sub-block by sub-block: with
 * x16 each of its 4-byte groups is one load, so no half is held in registers. Both
 * halves of a group go sub-block by sub-block: super-block by super-block, a Q6_K GEMV
 * from L3 had run on one Zen 2 core slower than a half alone, and this way faster
 * than either. */
INLINE void mk_q_inplace_q6(const cpu_mk_args *a, const int nt, const int tt, const int nh) {
    AL_ASSERT(a->n16 == 2);
    inplace ip;
    inplace_start(a, nt, nh, a->w_blk0 * 210, a->n_sb / 16 * 210, &ip);
    const uint8_t *x = a->act;
    for (int64_t i = 0; i < a->n_sb / 16; i++) {
        const int64_t off = i * 210;
        __m256 d[2];
#pragma GCC unroll 2
        for (int h = 0; h < nh; h++)
            d[h] = q6_d(&ip.rs[h], off);
#pragma GCC unroll 16
        for (int s = 0; s < 16; s++, x += tt * (16 + 8)) {
            /* sub-block s = 8 half + 2 g + jj: groups j = 4 jj + k of column g % 2 */
            const int half = s / 8, g = s % 8 / 2, jj = s % 2;
#pragma GCC unroll 2
            for (int h = 0; h < nh; h++) {
                const panel_rows *rs = &ip.rs[h];
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
                const float *da = (const float *)(x + tt * 16);
                q_epilogue(is, dw, dw, da, da + tt, nt, false, ip.acc[h]);
            }
        }
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
INLINE void mk_q_n16(const cpu_mk_args *a, const int nt, const int b, const bool mins) {
    AL_ASSERT(a->n16 >= b / 8);
    if (a->n16 >= b / 4)
        mk_q_body(a, nt, b, mins, false, b / 4);
    else
        mk_q_body(a, nt, b, mins, false, b / 8);
}

static void mk_q_avx2(const cpu_mk_args *a) {
    if (!a->panel) {
        mk_q_inplace_avx2(a);
        return;
    }
#define SIGNED(t) mk_q_body(a, t, 32, true, true, 2)
#define B16(t) mk_q_n16(a, t, 16, false)
#define B16_M(t) mk_q_n16(a, t, 16, true)
#define B32(t) mk_q_n16(a, t, 32, false)
#define B32_M(t) mk_q_n16(a, t, 32, true)
    if (a->signed_w)
        BY_TOKENS(a->n_tok, SIGNED)
    else if (a->bsize == 16 && !a->mins)
        BY_TOKENS(a->n_tok, B16)
    else if (a->bsize == 16)
        BY_TOKENS(a->n_tok, B16_M)
    else if (!a->mins)
        BY_TOKENS(a->n_tok, B32)
    else
        BY_TOKENS(a->n_tok, B32_M)
#undef SIGNED
#undef B16
#undef B16_M
#undef B32
#undef B32_M
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
    .pack_q = PACK_Q_FNS,
    .mk_q = mk_q_avx2,
    .x16_types = X16_TYPES,
    .x16_pack = x16_pack,
    .pack_x16 = PACK_X16_FNS,
    .pack_f = cpu_pack_f_avx2,
    .mk_f = cpu_mk_f_avx2,
    .attn = cpu_attn_avx2,
    .kv_rows = cpu_kv_rows_avx2,
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
