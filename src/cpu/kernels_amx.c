/* kernels_amx.c: the quantized matmul of large batches on AMX tiles (Intel AMX-INT8),
 * with the float arithmetic of the AVX-512 kernels to the bit.
 *
 * Compiled for AMX and AVX-512 by the target pragma below, whatever the build's flags;
 * matmul.c calls it only where cpu.c found AMX usable (CPUID, XCR0 and the kernel's
 * permission) and the backend runs the AVX-512 kernels.
 *
 * One call multiplies a panel of 16 rows (ops.h: the AVX-512 panel, u8 q[B/4][16][4]
 * per sub-block, which is AMX's "B" layout as it stands) by 16 tokens over one K
 * chunk. The tokens' activations come in the AMX tile layout (ops.h: per sub-block
 * q[16][B], da[16], aux[16]), so that the 16 tokens' B bytes of a sub-block are 16
 * contiguous rows of AMX's "A", read by one tile load of 8 cache lines. Per sub-block one
 * TDPBSSD/TDPBSUD gives the exact int32 sums of 16 tokens x 16 rows, C[token][row]:
 * the sums the VNNI kernel's vpdpbusd chains give. A type with a constant offset has
 * its panel made signed first (q - offset, cpu_amx_sign_panel), which folds the
 * VNNI kernel's starting value -offset * sum(qa) into the products; a type with mins
 * keeps unsigned weights and starts from zero, as there.
 *
 * Each sub-block's scales differ, so every C tile goes through the float epilogue of
 * the VNNI kernels (q_epilogue, pack_simd.h) for its 16 tokens: acc[t] += float(isum) *
 * (dw * da[t]) (+ m * aux[t]). A row of C is a zmm of 16 weight rows, as a VNNI
 * accumulator is, and the operations per (row, token) are q_epilogue's, in its order:
 * the results are the VNNI path's, bit for bit.
 *
 * What bounds the speed is not the tile unit's arithmetic but the per-sub-block traffic:
 * a C tile stored (1 KB) and read back, and the epilogue's three vector operations per
 * (token, 16 rows). A TDPBSSD over 32 bytes of K costs what one over 64 does (~7 ns
 * here), and a tile store ~7 ns. On the Xeon measured (Emerald Rapids, under KVM) tile
 * instructions and vector work hardly overlap: in one microbenchmark run a 16 x 16
 * sub-block of 32 took ~13.6 ns of tile work and ~6.8 ns of epilogue, 22 ns together
 * (28-30 ns with the tokens' rows a row apart instead of one contiguous A), against
 * ~37 ns for the VNNI kernel. Two tile sets alternate, and each epilogue reads the C
 * tile stored one step before, so that no load waits for the store just issued; three
 * sets, two dot products ahead, measured the same.
 *
 * Beside the tile instructions the 512-bit int-to-float conversion (vcvtdq2ps, one
 * port) was what slowed: on an AMX VM a loop of TDPBSSD and the epilogue took about
 * the sum of the two alone with the epilogue's multiplies and adds, and twice that
 * with its conversions. The epilogue converts with an integer add and a float subtract
 * instead (cvt_exact), which either vector port runs; the result is the same float.
 * Figures: docs/benchmarks.md. The VNNI kernels keep the conversion:
 * the two extra operations made them slower.
 */
#if defined(__clang__)
#pragma clang attribute push(                                                                      \
    __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))),      \
    apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
#endif

#include <immintrin.h>
#include <string.h>

#include "ops.h"
#include "util.h"

enum { R = 16, TOK = CPU_AMX_TOK };

/* Tile registers (numbers, as the tile intrinsics paste them into the instruction):
 * two sets of activations (A), weights (B) and sums (C), used alternately. */
#define TA0 0
#define TA1 1
#define TB0 2
#define TB1 3
#define TC0 4
#define TC1 5

#define INLINE static inline __attribute__((always_inline))

/* LDTILECFG's 64-byte operand, palette 1. */
typedef struct amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16]; /* bytes per row of each tile */
    uint8_t rows[16];
} amx_config;

void cpu_amx_begin(int b) {
    amx_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 2; i++) {
        c.rows[TA0 + i] = TOK, c.colsb[TA0 + i] = (uint16_t)b;        /* 16 tokens x B bytes */
        c.rows[TB0 + i] = (uint8_t)(b / 4), c.colsb[TB0 + i] = 4 * R; /* [B/4][16][4] */
        c.rows[TC0 + i] = TOK, c.colsb[TC0 + i] = 4 * R;              /* 16 tokens x 16 int32 */
    }
    /* the intrinsic names only the first 8 bytes as its input: make every store land */
    __asm__ volatile("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
}

void cpu_amx_end(void) {
    _tile_release();
}

void cpu_amx_sign_panel(uint8_t *panel, int64_t n_sb, int b, int offset) {
    const __m512i off = _mm512_set1_epi8((char)offset);
    for (int64_t s = 0; s < n_sb; s++, panel += cpu_sb_bytes(R, b))
        for (int i = 0; i < R * b; i += 64) {
            __m512i *q = (__m512i *)(panel + i);
            /* u - offset wraps to the signed value: it lies in [-128, 127] */
            _mm512_store_si512(q, _mm512_sub_epi8(_mm512_load_si512(q), off));
        }
}

/* C tile c = the exact int32 sums of sub-block s: 16 token rows of A from x (rows b
 * bytes apart, sub-blocks xsb bytes apart) times B, the panel's sub-block. Signed
 * weights (a constant offset) or unsigned (mins). */
#define AMX_DOT(c, ta, tb, s)                                                                      \
    do {                                                                                           \
        _tile_loadd(ta, x + (s)*xsb, b);                                                           \
        _tile_loadd(tb, p + (s)*psb, 4 * R);                                                       \
        _tile_zero(c);                                                                             \
        if (mins)                                                                                  \
            _tile_dpbsud(c, ta, tb);                                                               \
        else                                                                                       \
            _tile_dpbssd(c, ta, tb);                                                               \
    } while (0)

/* Token t's da and aux in the sub-block at x. */
INLINE float da_of(const uint8_t *x, int t, int b) {
    return ((const float *)(x + TOK * b))[t];
}
INLINE float aux_of(const uint8_t *x, int t, int b) {
    return ((const float *)(x + TOK * b))[TOK + t];
}

/* float(v) for |v| < 2^22, as vcvtdq2ps gives it, on either vector port: v added to the
 * bits of 1.5 * 2^23 is that float plus v exactly, and the subtraction is exact. A
 * sub-block's sum is at most 32 x 128 x 255 < 2^20 (test_matmul_extreme_amx). */
INLINE __m512 cvt_exact(__m512i v) {
    const __m512i magic = _mm512_set1_epi32(0x4B400000);
    return _mm512_sub_ps(_mm512_castsi512_ps(_mm512_add_epi32(v, magic)),
                         _mm512_castsi512_ps(magic));
}

/* q_epilogue's operations (pack_simd.h) on the sums in c[t][16] of sub-block x / p:
 * acc[t] += float(isum) * (dw * da[t]) (+ m * aux[t]). */
INLINE void sub_epilogue(const int32_t *c, const uint8_t *p, const uint8_t *x, const int b,
                         const bool mins, __m512 acc[TOK]) {
    const __m512 dw = _mm512_load_ps((const float *)(p + R * b));
    const __m512 m = mins ? _mm512_load_ps((const float *)(p + R * b) + R) : dw;
#pragma GCC unroll 16
    for (int t = 0; t < TOK; t++) {
        const __m512 fs = cvt_exact(_mm512_load_si512(c + t * R));
        acc[t] = _mm512_fmadd_ps(fs, _mm512_mul_ps(dw, _mm512_set1_ps(da_of(x, t, b))), acc[t]);
        if (mins) acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(aux_of(x, t, b)), acc[t]);
    }
}

/* The accumulators of the call's tokens: out (or zero on the first chunk, and for the
 * second of two passes); tokens past n_tok (zero rows of the last tile) start and stay
 * at zero and are never stored. */
INLINE void acc_start(const cpu_mk_args *a, __m512 acc[TOK]) {
    const __mmask16 rows = (__mmask16)((1u << a->n_rows) - 1);
    const bool zero = a->first || a->pass_hi;
#pragma GCC unroll 16
    for (int t = 0; t < TOK; t++)
        acc[t] = zero || t >= a->n_tok ? _mm512_setzero_ps()
                                       : _mm512_maskz_loadu_ps(rows, a->out + t * a->ldo);
}

/* out = acc (+ bias); with pass_hi, acc is the second pass and out = (out + hi) + acc
 * (+ bias), matmul.c's order for two passes (hi + acc on the first chunk). */
INLINE void acc_finish(const cpu_mk_args *a, const __m512 acc[TOK]) {
    const __mmask16 rows = (__mmask16)((1u << a->n_rows) - 1);
    const __m512 bias = a->bias ? _mm512_maskz_loadu_ps(rows, a->bias) : _mm512_setzero_ps();
    /* every t, so that acc's indices are constants and it stays in registers */
#pragma GCC unroll 16
    for (int t = 0; t < TOK; t++) {
        if (t >= a->n_tok) continue;
        float *o = a->out + t * a->ldo;
        __m512 v = acc[t];
        if (a->pass_hi) {
            const __m512 h = _mm512_load_ps(a->pass_hi + t * R);
            v = a->first ? _mm512_add_ps(h, v)
                         : _mm512_add_ps(_mm512_add_ps(_mm512_maskz_loadu_ps(rows, o), h), v);
        }
        _mm512_mask_storeu_ps(o, rows, a->bias ? _mm512_add_ps(v, bias) : v);
    }
}

/* Sub-blocks in pairs, tile sets 0 and 1. The next sub-block's dot
 * product is issued before the last one's epilogue, and each epilogue reads the C tile
 * stored one step earlier (a tile store takes a while to reach the loads). */
INLINE void amx_q(const cpu_mk_args *a, const int b, const bool mins) {
    const uint8_t *p = a->panel, *x = a->act;
    const int64_t xsb = cpu_sb_bytes(TOK, b), psb = cpu_sb_bytes(R, b), n = a->n_sb;
    _Alignas(64) int32_t c0[TOK * R], c1[TOK * R];
    __m512 acc[TOK];
    acc_start(a, acc);
    AMX_DOT(TC0, TA0, TB0, 0);
    for (int64_t s = 0; s < n; s += 2) {
        if (s + 1 < n) AMX_DOT(TC1, TA1, TB1, s + 1);
        _tile_stored(TC0, c0, 4 * R);
        if (s > 0) sub_epilogue(c1, p + (s - 1) * psb, x + (s - 1) * xsb, b, mins, acc);
        if (s + 1 >= n) {
            sub_epilogue(c0, p + s * psb, x + s * xsb, b, mins, acc);
            break;
        }
        if (s + 2 < n) AMX_DOT(TC0, TA0, TB0, s + 2);
        _tile_stored(TC1, c1, 4 * R);
        sub_epilogue(c0, p + s * psb, x + s * xsb, b, mins, acc);
        if (s + 2 >= n) sub_epilogue(c1, p + (s + 1) * psb, x + (s + 1) * xsb, b, mins, acc);
    }
    acc_finish(a, acc);
}

void cpu_amx_mk_q(const cpu_mk_args *a) {
    AL_ASSERT(a->panel && a->n_tok >= 1 && a->n_tok <= TOK && a->n_sb > 0);
    if (a->bsize == 16 && a->mins)
        amx_q(a, 16, true);
    else if (a->bsize == 16)
        amx_q(a, 16, false);
    else if (a->mins)
        amx_q(a, 32, true);
    else
        amx_q(a, 32, false);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
