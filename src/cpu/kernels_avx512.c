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
 * Q6_K skip the panel: mk_q_inplace reads the rows where they lie and feeds the
 * registers a pack would have stored straight into the sums, with the same arithmetic
 * to the bit. Each packed panel would be used once, so its store and reload were pure
 * cost.
 *
 * The reads of the weights, for the packs and the in-place kernels, are pack_simd.h's,
 * shared with kernels_avx2.c and compiled here for 16 lanes (simd_avx512.h): 16 rows'
 * blocks read in place and transposed in registers, or with the x16 layout (ops.h) one
 * vector load where 16 row streams would be gathered or transposed, so that decoding
 * is bound by the memory, not by the reads' instructions. What this file keeps is its
 * own: the x16 prefetches, the Q4_K/Q5_K scales, Q6_K's reads (one vpternlogd a group),
 * the VNNI microkernels and the in-place kernels. The last panel of a matrix, when
 * short of 16 rows, takes the portable decoders (cpu_pack_q_generic).
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
#include "simd_avx512.h"
#include "ops.h"
#include "format/quant.h"
#include "util.h"

enum { TT = 8, LANES = 16, Q8_SIGNED = 0 };

#include "pack_simd.h"

/* ---- activations ----------------------------------------------------------------------- */

/* As quantize_scalar, bit for bit: the same divisions, round-to-nearest-even. */
static void quantize_512(const float *x, int64_t n, cpu_act_fmt f, uint8_t *tile, int slot,
                         int tt) {
    const int b = f.b;
    _Alignas(64) int8_t q[CPU_ACT_GROUP];
    for (int64_t g0 = 0; g0 < n; g0 += CPU_ACT_GROUP, x += CPU_ACT_GROUP) {
        const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
        const float amax =
            _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        const __m512 id = _mm512_set1_ps(amax != 0 ? 127.0f / amax : 0.0f);
        _mm_store_si128((__m128i *)q,
                        _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x0, id))));
        _mm_store_si128((__m128i *)(q + 16),
                        _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x1, id))));
        const float d = f.exact_scale
                            ? amax / 127.0f
                            : _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
        put_group(q, CPU_ACT_GROUP, d, f, tile + (g0 / b) * cpu_sb_bytes(tt, b), slot, tt);
    }
}

/* ---- AVX-512 only: the x16 prefetches, the Q4_K/Q5_K scales, Q6_K ------------------- */

/* The prefetches on the x16 stream (pack_simd.h prefetch_x16): the lines of the span
 * bytes per row that the caller reads before its next call, PF_AHEAD bytes ahead, into
 * L1 (l1) or L2. The stream runs on into the next panel. Prefetches take load slots:
 * where a 1-token GEMV prefetches, it issues one per line (on x16, 16 n_lines per
 * call had been up to 78% repeats, and the loads, not the memory, bounded decoding).
 *
 * The in-place GEMV of the legacy types and Q4_K/Q5_K over x16 issues none: its one
 * sequential stream is what the hardware prefetchers follow best, and ours held it
 * back where the memory is fast (on a 2-core Zen 4, two threads over a 2048-wide
 * model's Q4_0 matrices read more without them, about as fast as plain reads, and
 * bench-1b Q8_0 decoded faster).
 * Q6_K keeps them: its sub-fields are read out of order, and without them bench-1b
 * Q4_K_M's decode fell well short of the roofline. Its in-place GEMV over x16
 * prefetches into L1 (l1), where the other types go to L2: in alternating decode runs
 * of bench-qwen35moe (a Q6_K output matrix of 54 MB) that was faster than L2, and L1
 * for the Q4_K experts too was slower.
 * Q4_K/Q5_K over x16 prefetch too where the backend says so (cpu_mk_args.w_x16_pf: by
 * default on Intel CPUs). On a 2-core Emerald Rapids VM the hardware alone left the
 * x16 stream well short of the memory: bench-qwen35moe's experts, 589 KB matrices that
 * each start a new stream, read well below plain reads, and its decode and bench-1b
 * Q4_K_M's came near the roofline only with these prefetches on
 * (docs/benchmarks.md). */
INLINE void prefetch_x16_to(const panel_rows *rs, int64_t off, int span, bool l1) {
    const uintptr_t a0 = (uintptr_t)(rs->pk + 16 * (off + PF_AHEAD)) & ~(uintptr_t)63;
    const uintptr_t a1 = (uintptr_t)(rs->pk + 16 * (off + PF_AHEAD + span));
    for (uintptr_t a = a0; a < a1; a += 64)
        if (l1) _mm_prefetch((const char *)a, _MM_HINT_T0);
        else _mm_prefetch((const char *)a, _MM_HINT_T1);
}

INLINE void prefetch_x16(const panel_rows *rs, int64_t off, int span) {
    prefetch_x16_to(rs, off, span, false);
}

/* pack_simd.h k4_scales: scale and min j one at a time from the 12 scale bytes at
 * off + 4. */
INLINE void k4_scales(const panel_rows *rs, int64_t off, uint8_t *pb) {
    const __m512i dd = gather_2xf16(rs, off);
    const __m512 d = vf_f16_of(dd, 0), dmin = vf_f16_of(dd, 1);
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

PACK_LEGACY(pack_q8_0, Q8_0)

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

INLINE void q6_half(const panel_rows *rs, int64_t off, int half, __m512i l0[8], __m512i l1[8],
                    __m512i h[8]) {
    load_cols32(rs, off + 64 * half, l0);
    load_cols32(rs, off + 64 * half + 32, l1);
    load_cols32(rs, off + 128 + 32 * half, h);
}

/* dw of the 16 sub-blocks of the super-block at off, stored where a panel has them
 * (pb: 16 sub-blocks of cpu_sb_bytes(R, 16)), with m = -32 dw. */
INLINE void q6_scales16(const panel_rows *rs, int64_t off, uint8_t *pb) {
    /* in place, d is the high half of the 4 bytes at 206 (208 would read past the
     * block) */
    const __m512 d = rs->x16 ? gather_d(rs, off + 208) : vf_f16_of(gather32(rs, off + 206), 1);
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
    panel_rows rs;
    rows_init(&rs, w, row_bytes, blk0 * 210, x16, 0);
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

/* Per sub-block of b: acc += isum * (dw * da) (+ m * ds). */
INLINE void mk_q_body(const cpu_mk_args *a, const int nt, const int b, const bool mins) {
    const __mmask16 rows = (__mmask16)((1u << a->n_rows) - 1);
    const uint8_t *p = a->panel, *x = a->act;
    __m512 acc[TT];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        acc[t] = a->first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(rows, a->out + t * a->ldo);
    for (int64_t s = 0; s < a->n_sb; s++, p += R * (b + 8), x += TT * (b + 8)) {
        __m512i is[TT];
        mk_q_sums(p, x, nt, b, mins, is);
        const float *da = (const float *)(x + TT * b);
        q_epilogue(is, _mm512_load_ps((const float *)(p + R * b)),
                   _mm512_load_ps((const float *)(p + R * b) + R), da, da + TT, nt, mins, acc);
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
    panel_rows rs;
    rows_init(&rs, a->w, a->w_row_bytes, a->w_blk0 * g_legacy_size[kind], x16, 0);
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
        const float *da = (const float *)(x + tt * 32);
        q_epilogue(is, dw, m, da, da + tt, nt, mins, acc);
    }
    inplace_finish(a, nt, acc);
}

/* The same for Q4_K and Q5_K (mins; super-blocks of 8 sub-blocks of 32), with the
 * arithmetic of mk_q_body to the bit. */
INLINE void mk_q_inplace_k45(const cpu_mk_args *a, const bool five, const int nt, const bool x16,
                             const int tt) {
    const int64_t t = five ? 176 : 144, sbb = cpu_sb_bytes(R, 32);
    panel_rows rs;
    rows_init(&rs, a->w, a->w_row_bytes, a->w_blk0 * t, x16, 0);
    _Alignas(64) uint8_t sc[8 * R * (32 + 8)]; /* dw and m where a panel has them */
    const uint8_t *x = a->act;
    __m512 acc[TT];
    inplace_start(a, nt, acc);
    for (int64_t i = 0; i < a->n_sb / 8; i++) {
        const int64_t off = i * t;
        if (!x16 || a->w_x16_pf) prefetch_rows(&rs, off, 3, (int)t);
        k4_scales(&rs, off, sc);
        __m512i h[8];
        if (five) load_cols32(&rs, off + 16, h);
        for (int c = 0; c < 4; c++) {
            __m512i u[2][8];
            const bool hi16 = nt == 1 && !five;
            k45_chunk(five, &rs, off, c, h, u[0], u[1], hi16);
#pragma GCC unroll 2
            for (int half = 0; half < 2; half++, x += tt * (32 + 8)) {
                const uint8_t *sb = sc + (2 * c + half) * sbb;
                const __m512 dw = _mm512_load_ps((const float *)(sb + R * 32));
                const __m512 m = _mm512_load_ps((const float *)(sb + R * 32) + R);
                const float *da = (const float *)(x + tt * 32);
                __m512i is[TT];
                if (hi16 && half) mk_sums1(u[1], x, 32, true, 0, tt, is);
                else mk_q_sums_w(u[half], x, nt, 32, true, tt, is);
                q_epilogue(is, dw, m, da, da + tt, nt, true, acc);
            }
        }
    }
    inplace_finish(a, nt, acc);
}

/* The same for Q6_K (offset 32, super-blocks of 16 sub-blocks of 16), with the
 * arithmetic of mk_q_body to the bit. */
INLINE void mk_q_inplace_q6(const cpu_mk_args *a, const int nt, const bool x16, const int tt) {
    const int64_t sbb = cpu_sb_bytes(R, 16);
    panel_rows rs;
    rows_init(&rs, a->w, a->w_row_bytes, a->w_blk0 * 210, x16, 0);
    _Alignas(64) uint8_t sc[16 * R * (16 + 8)]; /* dw and m where a panel has them */
    const uint8_t *x = a->act;
    __m512 acc[TT];
    inplace_start(a, nt, acc);
    for (int64_t i = 0; i < a->n_sb / 16; i++) {
        const int64_t off = i * 210;
        if (x16) prefetch_x16_to(&rs, off, 210, true);
        else prefetch_each_row(&rs, off, 4);
        q6_scales16(&rs, off, sc);
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
                    const float *da = (const float *)(x + tt * 16);
                    q_epilogue(is, dw, dw, da, da + tt, nt, false, acc);
                }
        }
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
#define B16(t) mk_q_body(a, t, 16, false)
#define B16_M(t) mk_q_body(a, t, 16, true)
#define B32(t) mk_q_body(a, t, 32, false)
#define B32_M(t) mk_q_body(a, t, 32, true)
    if (a->bsize == 16 && !a->mins)
        BY_TOKENS(a->n_tok, B16)
    else if (a->bsize == 16)
        BY_TOKENS(a->n_tok, B16_M)
    else if (!a->mins)
        BY_TOKENS(a->n_tok, B32)
    else
        BY_TOKENS(a->n_tok, B32_M)
#undef B16
#undef B16_M
#undef B32
#undef B32_M
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

const cpu_kernels cpu_kernels_avx512 = {
    .isa = CPU_ISA_AVX512,
    .rows = R,
    .tile = TT,
    .narrow = true,
    .attn_lanes = LANES,
    .attn_align = 16,
    .attn_ranges = true,
    .quantize = quantize_512,
    .pack_q = PACK_Q_FNS,
    .mk_q = mk_q_512,
    .inplace_types = X16_TYPES,
    .x16_types = X16_TYPES,
    .x16_pack = x16_pack,
    .pack_x16 = PACK_X16_FNS,
    .pack_f = pack_f_512,
    .mk_f = mk_f_512,
    .attn = cpu_attn_512,
    .kv_rows = cpu_kv_rows_512,
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
