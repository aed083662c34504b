/* quantize.c: float rows to ggml's block formats, the per-tensor type choice of a
 * model-level scheme, and the file-to-file quantization driver.
 *
 * Bit-exactness. llama.cpp quantizes without an importance matrix through ggml's
 * reference quantizers (quantize_row_*_ref in ggml-quants.c). Every function below makes
 * the same float operations in the same order as those, so the bytes agree: the same
 * searches, the same integer rounding (nearest_int, roundf or truncation, whichever
 * ggml uses at that step) and fp16 scales rounded to nearest even. Float expressions
 * are written in ggml's association order and must not be contracted into fused
 * multiply-adds, which round differently (x86-64 builds of llama.cpp have none). GCC
 * does not contract in ISO C mode (-std=c11); clang is told below. The K-quant scale
 * searches run several sub-blocks side by side as SIMD lanes, without changing any
 * lane's order of operations (see their section). tests/test_quantize.c checks the
 * result against llama.cpp's files in ../shared.
 *
 * Block layouts are the ones quant.c dequantizes (ggml-common.h); they are repeated
 * here as byte structs with the same size assertions.
 */
#include "format/quantize.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cpu/pool.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "format/quant.h"
#include "util.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QK 32    /* elements per block of the legacy types */
#define QK_K 256 /* elements per super-block of the K-quants */

/* fp16 stored little-endian; ggml rounds to nearest even, as al_f32_to_f16 does. */
static inline void store_f16(uint8_t *p, float f) {
    uint16_t h = al_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* The value an fp16 field will hold: the K-quants requantize against stored scales. */
static inline float f16_round(float f) { return al_f16_to_f32(al_f32_to_f16(f)); }

/* Round to nearest, ties to even, for |x| < 2^22: adding 1.5 * 2^23 pushes the
 * fraction out of the mantissa, leaving the integer (offset by 2^22) in its low bits.
 * This is ggml's rounding for the K-quants; roundf (ties away) would differ on ties. */
static inline int nearest_int(float x) {
    float v = x + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

/* roundf (halves away from zero) for |x| < 2^23, without a call into libm: the
 * fraction x - trunc(x) of a float is exact. */
static inline int round_away(float x) {
    const int t = (int)x;
    const float frac = x - (float)t;
    return t + (frac >= 0.5f) - (frac <= -0.5f);
}

static inline int min_i(int a, int b) { return a < b ? a : b; }
static inline int max_i(int a, int b) { return a > b ? a : b; }

/* ---- plain floats ------------------------------------------------------------------ */

/* bfloat16 as ggml rounds it: to nearest even, NaN kept quiet. */
static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

static void q_f32(const float *x, void *dst, int64_t n) { memcpy(dst, x, (size_t)n * 4); }

static void q_f16(const float *x, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) store_f16(p + 2 * i, x[i]);
}

static void q_bf16(const float *x, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t b = f32_to_bf16(x[i]);
        p[2 * i] = (uint8_t)b;
        p[2 * i + 1] = (uint8_t)(b >> 8);
    }
}

/* ---- legacy blocks of 32 ------------------------------------------------------------ */
/* Elements j and j + 16 share byte j of qs: low nibble, high nibble. */

typedef struct { uint8_t d[2], qs[16]; } block_q4_0;
typedef struct { uint8_t d[2], m[2], qs[16]; } block_q4_1;
typedef struct { uint8_t d[2], qh[4], qs[16]; } block_q5_0;
typedef struct { uint8_t d[2], m[2], qh[4], qs[16]; } block_q5_1;
typedef struct { uint8_t d[2]; int8_t qs[32]; } block_q8_0;
_Static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20, "legacy block sizes");
_Static_assert(sizeof(block_q5_0) == 22 && sizeof(block_q5_1) == 24, "legacy block sizes");
_Static_assert(sizeof(block_q8_0) == 34, "legacy block sizes");

/* The element of largest magnitude, keeping its sign (the first one on ties). */
static float signed_absmax(const float *x, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

/* Symmetric 4 bits: value = d * (q - 8). The extreme element maps to q = 0 (d has the
 * opposite sign), spending the one level -8 that has no positive twin. */
static void q_q4_0(const float *x, void *dst, int64_t n) {
    block_q4_0 *y = dst;
    for (int64_t i = 0; i < n / QK; i++, x += QK, y++) {
        const float d = signed_absmax(x, QK) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        store_f16(y->d, d);
        for (int j = 0; j < QK / 2; j++) {
            /* +8.5 then truncation: round half up, in [0, 16], clipped to 15 */
            const int lo = min_i(15, (int)(x[j] * id + 8.5f));
            const int hi = min_i(15, (int)(x[j + QK / 2] * id + 8.5f));
            y->qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* Asymmetric: value = d * q + m with m the block minimum and q in [0, 2^bits). */
static void minmax(const float *x, int n, float *min, float *max) {
    *min = FLT_MAX;
    *max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < *min) *min = x[j];
        if (x[j] > *max) *max = x[j];
    }
}

static void q_q4_1(const float *x, void *dst, int64_t n) {
    block_q4_1 *y = dst;
    for (int64_t i = 0; i < n / QK; i++, x += QK, y++) {
        float min, max;
        minmax(x, QK, &min, &max);
        const float d = (max - min) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        store_f16(y->d, d);
        store_f16(y->m, min);
        for (int j = 0; j < QK / 2; j++) {
            const int lo = min_i(15, (int)((x[j] - min) * id + 0.5f));
            const int hi = min_i(15, (int)((x[j + QK / 2] - min) * id + 0.5f));
            y->qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* Stores 32 5-bit quants: low nibbles as Q4_0 does, bit 4 of element j in bit j of qh. */
static void pack5(const int q[32], uint8_t qs[16], uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | (q[j + QK / 2] & 0xF) << 4);
        h |= (uint32_t)((q[j] >> 4) & 1) << j;
        h |= (uint32_t)((q[j + QK / 2] >> 4) & 1) << (j + QK / 2);
    }
    for (int b = 0; b < 4; b++) qh[b] = (uint8_t)(h >> (8 * b));
}

static void q_q5_0(const float *x, void *dst, int64_t n) {
    block_q5_0 *y = dst;
    for (int64_t i = 0; i < n / QK; i++, x += QK, y++) {
        const float d = signed_absmax(x, QK) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        store_f16(y->d, d);
        int q[QK];
        for (int j = 0; j < QK; j++) q[j] = min_i(31, (int)(x[j] * id + 16.5f));
        pack5(q, y->qs, y->qh);
    }
}

static void q_q5_1(const float *x, void *dst, int64_t n) {
    block_q5_1 *y = dst;
    for (int64_t i = 0; i < n / QK; i++, x += QK, y++) {
        float min, max;
        minmax(x, QK, &min, &max);
        const float d = (max - min) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        store_f16(y->d, d);
        store_f16(y->m, min);
        int q[QK];
        /* ggml does not clip here: (x - min) * id + 0.5 stays below 32 */
        for (int j = 0; j < QK; j++) q[j] = (int)((x[j] - min) * id + 0.5f);
        pack5(q, y->qs, y->qh);
    }
}

/* value = d * q, d = amax / 127, q rounded half away from zero. */
static void q_q8_0(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / QK; i++, x += QK, y++) {
        float amax = 0;
        for (int j = 0; j < QK; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        store_f16(y->d, d);
        for (int j = 0; j < QK; j++) y->qs[j] = (int8_t)round_away(x[j] * id);
    }
}

/* ---- MXFP4 -------------------------------------------------------------------------- */
/* ggml's quantize_row_mxfp4_ref: one power-of-two scale per block, from the block's
 * largest magnitude, then each element to its nearest E2M1 code (quant.h). */

typedef struct { uint8_t e, qs[16]; } block_mxfp4;
_Static_assert(sizeof(block_mxfp4) == 17, "ggml's block_mxfp4 is 17 bytes");

/* The scale byte: floor(log2(amax)) - 2 + 127, so that amax / quant_e8m0_half(e) lies in
 * [8, 16) and the largest element lands on the doubled value 8 or 12 (code 6 or 7). ggml converts
 * the float straight to uint8_t; what x86 makes of the cases C leaves undefined is
 * written out: below 2^-125 the exponent is negative and wraps modulo 256 (through a
 * 32-bit integer), and an infinite amax gives 0. All zeros give 0 as well. */
static uint8_t mxfp4_exponent(float amax) {
    if (!(amax > 0.0f) || isinf(amax)) return 0;
    return (uint8_t)(int)(floorf(log2f(amax)) - 2 + 127);
}

/* The code c whose value quant_mxfp4_values[c] * d is nearest x, the first in code order
 * on a tie: +0 before -0, the smaller magnitude before the larger. */
static int mxfp4_nearest(float x, float d) {
    int best = 0;
    float best_err = fabsf(quant_mxfp4_values[0] * d - x);
    for (int c = 1; c < 16; c++) {
        const float err = fabsf(quant_mxfp4_values[c] * d - x);
        if (err < best_err) {
            best = c;
            best_err = err;
        }
    }
    return best;
}

static void q_mxfp4(const float *x, void *dst, int64_t n) {
    block_mxfp4 *y = dst;
    for (int64_t i = 0; i < n / QK; i++, x += QK, y++) {
        float amax = 0;
        for (int j = 0; j < QK; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        y->e = mxfp4_exponent(amax);
        const float d = quant_e8m0_half(y->e);
        for (int j = 0; j < QK / 2; j++)
            y->qs[j] = (uint8_t)(mxfp4_nearest(x[j], d) | mxfp4_nearest(x[j + QK / 2], d) << 4);
    }
}

/* ---- K-quants: scale searches, one sub-block per lane ------------------------------- */
/* ggml searches each sub-block's scale alone, in loops whose sums are serial chains of
 * float additions: one addition must finish before the next starts, so the CPU idles.
 * Here all sub-blocks of a super-block are searched together, as lanes: arrays are
 * [element][lane] and every loop over lanes is innermost. Each lane still performs
 * exactly ggml's operations in ggml's order (a sub-block's sum is accumulated element
 * by element, as before), so the bits are the same; but the lanes are independent, and
 * the compiler keeps them in SIMD registers. The K-quants run several times faster. */

#define KQ_N 32     /* elements per sub-block of Q4_K and Q5_K */
#define KQ_LANES 8  /* sub-blocks per super-block */
#define K6_N 16     /* elements per sub-block of Q6_K */
#define K6_LANES 16

static inline int clamp_i(int v, int lo, int hi) { return max_i(lo, min_i(hi, v)); }

/* Sub-blocks with a scale and a min (Q4_K, Q5_K): value = scale * L - min, L in
 * [0, nmax] (ggml's make_qkx2_quants). Starts from the range [min(x, 0), max(x)], then
 * for nstep + 1 trial scales around nmax / range re-rounds and solves the weighted
 * least-squares fit of scale and offset (an offset above 0 is pinned to 0), keeping the
 * fit of smallest weighted squared error. Per lane: the scale, the (non-negative) min
 * and the quants. A flat lane (all elements equal, min <= 0) gets scale 0 and L = 0. */
static void fit_scale_min(const float x[KQ_N][KQ_LANES], const float w[KQ_N][KQ_LANES],
                          int nmax, float rmin, float rdelta, int nstep,
                          uint8_t L[KQ_N][KQ_LANES], float scale[KQ_LANES],
                          float the_min[KQ_LANES]) {
    enum { N = KQ_N, NL = KQ_LANES };
    float min[NL], max[NL], sum_w[NL], sum_x[NL], best[NL], iscale[NL];
    int32_t Lb[N][NL], La[N][NL]; /* best and trial quants */
    bool flat[NL];
    for (int j = 0; j < NL; j++) {
        min[j] = max[j] = x[0][j];
        sum_w[j] = w[0][j];
        sum_x[j] = sum_w[j] * x[0][j];
    }
    for (int i = 1; i < N; i++) {
        for (int j = 0; j < NL; j++) {
            if (x[i][j] < min[j]) min[j] = x[i][j];
            if (x[i][j] > max[j]) max[j] = x[i][j];
            sum_w[j] += w[i][j];
            sum_x[j] += w[i][j] * x[i][j];
        }
    }
    for (int j = 0; j < NL; j++) {
        if (min[j] > 0) min[j] = 0;
        flat[j] = max[j] == min[j]; /* its arithmetic below is inf/NaN and ignored */
        iscale[j] = nmax / (max[j] - min[j]);
        scale[j] = 1 / iscale[j];
        best[j] = 0;
    }
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < NL; j++) {
            Lb[i][j] = clamp_i(nearest_int(iscale[j] * (x[i][j] - min[j])), 0, nmax);
            const float diff = scale[j] * Lb[i][j] + min[j] - x[i][j];
            best[j] += w[i][j] * (diff * diff);
        }
    }
    for (int is = 0; is <= nstep; is++) {
        float sum_l[NL] = {0}, sum_l2[NL] = {0}, sum_xl[NL] = {0}, err[NL] = {0};
        float D[NL], this_scale[NL], this_min[NL];
        for (int j = 0; j < NL; j++) iscale[j] = (rmin + rdelta * is + nmax) / (max[j] - min[j]);
        for (int i = 0; i < N; i++) {
            for (int j = 0; j < NL; j++) {
                const int l = clamp_i(nearest_int(iscale[j] * (x[i][j] - min[j])), 0, nmax);
                La[i][j] = l;
                sum_l[j] += w[i][j] * l;
                sum_l2[j] += w[i][j] * l * l;
                sum_xl[j] += w[i][j] * l * x[i][j];
            }
        }
        for (int j = 0; j < NL; j++) {
            /* weighted least squares for x ~ this_scale * l + this_min */
            D[j] = sum_w[j] * sum_l2[j] - sum_l[j] * sum_l[j];
            this_scale[j] = (sum_w[j] * sum_xl[j] - sum_x[j] * sum_l[j]) / D[j];
            this_min[j] = (sum_l2[j] * sum_x[j] - sum_l[j] * sum_xl[j]) / D[j];
            /* a positive offset is pinned to 0 and the scale refitted alone (written
               without a branch so that the lanes stay in SIMD registers) */
            const bool pin = this_min[j] > 0;
            const float scale_alone = sum_xl[j] / sum_l2[j];
            this_scale[j] = pin ? scale_alone : this_scale[j];
            this_min[j] = pin ? 0 : this_min[j];
        }
        for (int i = 0; i < N; i++) {
            for (int j = 0; j < NL; j++) {
                const float diff = this_scale[j] * La[i][j] + this_min[j] - x[i][j];
                err[j] += w[i][j] * (diff * diff);
            }
        }
        for (int j = 0; j < NL; j++) {
            if (flat[j] || !(D[j] > 0) || !(err[j] < best[j])) continue;
            for (int i = 0; i < N; i++) Lb[i][j] = La[i][j];
            best[j] = err[j];
            scale[j] = this_scale[j];
            min[j] = this_min[j]; /* later trials measure from the new offset */
        }
    }
    for (int j = 0; j < NL; j++) {
        if (flat[j]) scale[j] = 0;
        the_min[j] = -min[j];
    }
    for (int i = 0; i < N; i++)
        for (int j = 0; j < NL; j++) L[i][j] = flat[j] ? 0 : (uint8_t)Lb[i][j];
}

/* Sub-blocks with a signed scale and no offset (Q6_K): value = scale * (L - nmax), L in
 * [0, 2 nmax) (ggml's make_qx_quants, weights x^2). Starts from the scale that maps the
 * extreme element to -nmax, then tries 18 nearby ones (nmax +- 0.1 .. 0.9), keeping the
 * quants whose least-squares scale recovers the most weighted energy, sumlx^2 / suml2.
 * Per lane: the scale and the quants; 0 and all-zero quants for an all-zero lane. */
static void fit_signed_scale(const float x[K6_N][K6_LANES], int nmax,
                             int8_t L[K6_N][K6_LANES], float scale[K6_LANES]) {
    enum { N = K6_N, NL = K6_LANES };
    float amax[NL] = {0}, max[NL] = {0}, iscale[NL], sumlx[NL] = {0}, suml2[NL] = {0}, best[NL];
    float w[N][NL];
    int32_t Lb[N][NL], La[N][NL];
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < NL; j++) {
            w[i][j] = x[i][j] * x[i][j];
            if (amax[j] < fabsf(x[i][j])) {
                amax[j] = fabsf(x[i][j]);
                max[j] = x[i][j];
            }
        }
    }
    for (int j = 0; j < NL; j++) iscale[j] = -nmax / max[j];
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < NL; j++) {
            const int l = clamp_i(nearest_int(iscale[j] * x[i][j]), -nmax, nmax - 1);
            Lb[i][j] = l;
            sumlx[j] += w[i][j] * x[i][j] * l;
            suml2[j] += w[i][j] * l * l;
        }
    }
    for (int j = 0; j < NL; j++) {
        scale[j] = suml2[j] ? sumlx[j] / suml2[j] : 0.0f;
        best[j] = scale[j] * sumlx[j];
    }
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        for (int j = 0; j < NL; j++) {
            iscale[j] = -(nmax + 0.1f * is) / max[j];
            sumlx[j] = suml2[j] = 0;
        }
        for (int i = 0; i < N; i++) {
            for (int j = 0; j < NL; j++) {
                const int l = clamp_i(nearest_int(iscale[j] * x[i][j]), -nmax, nmax - 1);
                La[i][j] = l;
                sumlx[j] += w[i][j] * x[i][j] * l;
                suml2[j] += w[i][j] * l * l;
            }
        }
        for (int j = 0; j < NL; j++) {
            if (!(suml2[j] > 0 && sumlx[j] * sumlx[j] > best[j] * suml2[j])) continue;
            for (int i = 0; i < N; i++) Lb[i][j] = La[i][j];
            scale[j] = sumlx[j] / suml2[j];
            best[j] = scale[j] * sumlx[j];
        }
    }
    for (int j = 0; j < NL; j++)
        if (amax[j] < 1e-15f) scale[j] = 0; /* ggml's GROUP_MAX_EPS: all zero */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < NL; j++) L[i][j] = (int8_t)(amax[j] < 1e-15f ? 0 : Lb[i][j] + nmax);
}

/* ---- Q4_K and Q5_K ---------------------------------------------------------------- */

typedef struct {
    uint8_t d[2], dmin[2];
    uint8_t scales[12]; /* 8 6-bit scales and 8 6-bit mins, packed as quant.c reads them */
    uint8_t qs[128];
} block_q4_k;
typedef struct {
    uint8_t d[2], dmin[2];
    uint8_t scales[12];
    uint8_t qh[32];     /* bit s of qh[l]: bit 4 of element l of sub-block s */
    uint8_t qs[128];
} block_q5_k;
_Static_assert(sizeof(block_q4_k) == 144 && sizeof(block_q5_k) == 176, "K block sizes");

/* Packs the 6-bit scale and min of sub-block j into the 12 scale bytes: sub-blocks 0..3
 * own the low 6 bits of bytes j (scale) and j + 4 (min); sub-blocks 4..7 keep their
 * low nibbles in byte j + 4 and lend their top 2 bits to the spare bits of bytes j - 4
 * and j. Must run in order j = 0..7. */
static void put_scale_min(uint8_t sc[12], int j, int ls, int lm) {
    if (j < 4) {
        sc[j] = (uint8_t)ls;
        sc[j + 4] = (uint8_t)lm;
    } else {
        sc[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
        sc[j - 4] |= (uint8_t)((ls >> 4) << 6);
        sc[j] |= (uint8_t)((lm >> 4) << 6);
    }
}

static void get_scale_min(const uint8_t sc[12], int j, int *ls, int *lm) {
    if (j < 4) {
        *ls = sc[j] & 63;
        *lm = sc[j + 4] & 63;
    } else {
        *ls = (sc[j + 4] & 0xF) | (sc[j - 4] >> 6) << 4;
        *lm = (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
    }
}

/* The shared part of Q4_K and Q5_K for one super-block: fits each of the 8 sub-blocks
 * of 32 (weights |x| plus the sub-block's rms, favouring large elements), quantizes the
 * scales and mins to 6 bits against the largest of each, stores d, dmin and the scale
 * bytes, then re-rounds every element against the scales as stored. L gets the quants,
 * in [0, nmax]. */
static void k_super_block(const float *x, int nmax, float rmin, float rdelta, int nstep,
                          uint8_t d_out[2], uint8_t dmin_out[2], uint8_t sc[12],
                          uint8_t L[QK_K]) {
    float xt[KQ_N][KQ_LANES], wt[KQ_N][KQ_LANES], sum_x2[KQ_LANES] = {0};
    float scales[KQ_LANES], mins[KQ_LANES];
    uint8_t Lt[KQ_N][KQ_LANES];
    for (int l = 0; l < KQ_N; l++) {
        for (int j = 0; j < KQ_LANES; j++) {
            xt[l][j] = x[KQ_N * j + l];
            sum_x2[j] += xt[l][j] * xt[l][j];
        }
    }
    /* weights favour large elements, plus the sub-block's rms so that none is ignored */
    for (int j = 0; j < KQ_LANES; j++) sum_x2[j] = sqrtf(sum_x2[j] / 32);
    for (int l = 0; l < KQ_N; l++)
        for (int j = 0; j < KQ_LANES; j++) wt[l][j] = sum_x2[j] + fabsf(xt[l][j]);
    fit_scale_min(xt, wt, nmax, rmin, rdelta, nstep, Lt, scales, mins);
    float max_scale = 0, max_min = 0; /* both non-negative: the min is subtracted */
    for (int j = 0; j < KQ_LANES; j++) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
        for (int l = 0; l < KQ_N; l++) L[KQ_N * j + l] = Lt[l][j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(sc, 0, 12);
    for (int j = 0; j < 8; j++) {
        /* ggml stores nearest_int into a uint8_t before clipping; both fit anyway */
        const int ls = min_i(63, (uint8_t)nearest_int(inv_scale * scales[j]));
        const int lm = min_i(63, (uint8_t)nearest_int(inv_min * mins[j]));
        put_scale_min(sc, j, ls, lm);
    }
    store_f16(d_out, max_scale / 63.f);
    store_f16(dmin_out, max_min / 63.f);
    const float d_all = f16_round(max_scale / 63.f), dmin_all = f16_round(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        int ls, lm;
        get_scale_min(sc, j, &ls, &lm);
        const float d = d_all * ls;
        if (!d) continue; /* keep the fit's quants */
        const float dm = dmin_all * lm;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)max_i(0, min_i(nmax, nearest_int((x[32 * j + l] + dm) / d)));
    }
}

static void q_q4_k(const float *x, void *dst, int64_t n) {
    block_q4_k *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, y++) {
        k_super_block(x, 15, -1.f, 0.1f, 20, y->d, y->dmin, y->scales, L);
        /* 64 elements per 32 bytes: the first 32 in low nibbles, the next 32 in high */
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
    }
}

static void q_q5_k(const float *x, void *dst, int64_t n) {
    block_q5_k *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, y++) {
        k_super_block(x, 31, -0.5f, 0.1f, 15, y->d, y->dmin, y->scales, L);
        memset(y->qh, 0, sizeof y->qh);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                y->qs[32 * c + l] = (uint8_t)((lo & 0xF) | (hi & 0xF) << 4);
                y->qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
            }
        }
    }
}

/* ---- Q6_K -------------------------------------------------------------------------- */

typedef struct {
    uint8_t ql[128];    /* low 4 bits */
    uint8_t qh[64];     /* high 2 bits */
    int8_t scales[16];  /* per sub-block of 16 */
    uint8_t d[2];
} block_q6_k;
_Static_assert(sizeof(block_q6_k) == 210, "K block sizes");

/* value = d * scale[s] * (q - 32), q in [0, 64): 16 sub-blocks with signed 8-bit scales
 * quantized against the scale of largest magnitude, which maps to -128. */
static void q_q6_k(const float *x, void *dst, int64_t n) {
    block_q6_k *y = dst;
    int8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, y++) {
        float xt[K6_N][K6_LANES], scales[K6_LANES], max_scale = 0, max_abs_scale = 0;
        int8_t Lt[K6_N][K6_LANES];
        for (int l = 0; l < K6_N; l++)
            for (int s = 0; s < K6_LANES; s++) xt[l][s] = x[K6_N * s + l];
        fit_signed_scale(xt, 32, Lt, scales);
        for (int s = 0; s < K6_LANES; s++) {
            if (fabsf(scales[s]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[s]);
                max_scale = scales[s];
            }
            for (int l = 0; l < K6_N; l++) L[K6_N * s + l] = Lt[l][s];
        }
        if (max_abs_scale < 1e-15f) { /* all zero */
            memset(y, 0, sizeof *y);
            continue;
        }
        const float iscale = -128.f / max_scale;
        store_f16(y->d, 1 / iscale);
        const float d_all = f16_round(1 / iscale);
        for (int s = 0; s < 16; s++) y->scales[s] = (int8_t)min_i(127, nearest_int(iscale * scales[s]));
        for (int s = 0; s < 16; s++) {
            const float d = d_all * y->scales[s];
            if (!d) continue;
            for (int l = 0; l < 16; l++)
                L[16 * s + l] = (int8_t)(max_i(-32, min_i(31, nearest_int(x[16 * s + l] / d))) + 32);
        }
        /* Each 128-element half: element 32g + l (g = 0..3) puts its low nibble in
         * ql[l + 32 (g & 1)] (low for g < 2, high for g >= 2) and its top two bits in
         * bits 2g, 2g + 1 of qh[l]. */
        for (int h = 0; h < 2; h++) {
            const int8_t *q = L + 128 * h;
            uint8_t *ql = y->ql + 64 * h, *qh = y->qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((q[l] & 0xF) | (q[l + 64] & 0xF) << 4);
                ql[l + 32] = (uint8_t)((q[l + 32] & 0xF) | (q[l + 96] & 0xF) << 4);
                qh[l] = (uint8_t)(q[l] >> 4 | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 |
                                  (q[l + 96] >> 4) << 6);
            }
        }
    }
}

/* ---- rows ------------------------------------------------------------------------- */

typedef void (*row_quantizer)(const float *x, void *dst, int64_t n);

static row_quantizer quantizer_of(uint32_t type) {
    switch (type) {
    case AL_TYPE_F32: return q_f32;
    case AL_TYPE_F16: return q_f16;
    case AL_TYPE_BF16: return q_bf16;
    case AL_TYPE_Q4_0: return q_q4_0;
    case AL_TYPE_Q4_1: return q_q4_1;
    case AL_TYPE_Q5_0: return q_q5_0;
    case AL_TYPE_Q5_1: return q_q5_1;
    case AL_TYPE_Q8_0: return q_q8_0;
    case AL_TYPE_Q4_K: return q_q4_k;
    case AL_TYPE_Q5_K: return q_q5_k;
    case AL_TYPE_Q6_K: return q_q6_k;
    case AL_TYPE_MXFP4: return q_mxfp4;
    default: return NULL;
    }
}

bool quant_can_quantize(uint32_t type) { return quantizer_of(type) != NULL; }

al_status quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    row_quantizer q = quantizer_of(type);
    if (q == NULL)
        return al_error(AL_ERR_UNSUPPORTED, "quantizing to %s (type %u) is not supported",
                        quant_type_name(type), type);
    if (src == NULL || dst == NULL) return al_error(AL_ERR_ARG, "quant_quantize_row: NULL buffer");
    const quant_traits *t = quant_get_traits(type);
    if (n <= 0 || n % t->block_size != 0)
        return al_error(AL_ERR_ARG, "cannot quantize a row of %lld elements to %s: not a "
                        "positive multiple of its block size %u", (long long)n, t->name,
                        t->block_size);
    q(src, dst, n);
    return AL_OK;
}

/* One worker's share of quant_rows(). */
typedef struct row_job {
    row_quantizer q;
    int64_t n, row0, n_rows;   /* rows [row0, row0 + n_rows) of the whole source */
    quant_row_source src;
    void *ctx;
    uint8_t *dst;              /* where row0 goes */
    uint64_t row_bytes;
    float *buf;                /* [n] */
} row_job;

static void *row_worker(void *arg) {
    row_job *j = arg;
    for (int64_t r = 0; r < j->n_rows; r++) {
        j->src(j->ctx, j->row0 + r, j->buf, j->n);
        j->q(j->buf, j->dst + (uint64_t)r * j->row_bytes, j->n);
    }
    return NULL;
}

enum { MAX_THREADS = 256 };

al_status quant_rows(uint32_t type, int64_t n_per_row, int64_t row0, int64_t n_rows,
                     quant_row_source src, void *ctx, void *dst, int n_threads) {
    row_quantizer q = quantizer_of(type);
    if (q == NULL)
        return al_error(AL_ERR_UNSUPPORTED, "quantizing to %s (type %u) is not supported",
                        quant_type_name(type), type);
    const uint64_t row_bytes = quant_row_bytes(type, n_per_row);
    if (row_bytes == 0 || n_rows < 0 || src == NULL || (dst == NULL && n_rows > 0))
        return al_error(AL_ERR_ARG, "quant_rows: bad arguments (%s, %lld x %lld)",
                        quant_type_name(type), (long long)n_rows, (long long)n_per_row);
    if (n_threads < 1) n_threads = 1;
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
    if (n_threads > n_rows) n_threads = n_rows > 0 ? (int)n_rows : 1;

    row_job jobs[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    al_status st = AL_OK;
    int n_started = 0;
    for (int t = 0; t < n_threads; t++) {
        /* contiguous slices, sizes differing by at most one row */
        const int64_t a = n_rows * t / n_threads, b = n_rows * (t + 1) / n_threads;
        jobs[t] = (row_job){.q = q, .n = n_per_row, .row0 = row0 + a, .n_rows = b - a,
                            .src = src, .ctx = ctx, .dst = (uint8_t *)dst + (uint64_t)a * row_bytes,
                            .row_bytes = row_bytes, .buf = al_malloc((size_t)n_per_row * sizeof(float))};
        if (jobs[t].buf == NULL) {
            st = al_error(AL_ERR_NOMEM, "out of memory for a row of %lld floats",
                          (long long)n_per_row);
            break;
        }
        /* the calling thread takes the last slice itself */
        if (t == n_threads - 1) break;
        if (pthread_create(&tids[t], NULL, row_worker, &jobs[t]) != 0) {
            al_free(jobs[t].buf);
            st = al_error(AL_ERR_NOMEM, "cannot start a quantization thread");
            break;
        }
        n_started++;
    }
    if (st == AL_OK) row_worker(&jobs[n_threads - 1]);
    for (int t = 0; t < n_started; t++) pthread_join(tids[t], NULL);
    for (int t = 0; t < n_started; t++) al_free(jobs[t].buf);
    if (st == AL_OK) al_free(jobs[n_threads - 1].buf);
    return st;
}

/* ---- schemes ------------------------------------------------------------------------ */

static const quant_scheme g_schemes[] = {
    {"F32", 0, AL_TYPE_F32, "single precision"},
    {"F16", 1, AL_TYPE_F16, "half precision"},
    {"BF16", 32, AL_TYPE_BF16, "bfloat16"},
    {"Q8_0", 7, AL_TYPE_Q8_0, "8.5 bits per weight"},
    {"Q6_K", 18, AL_TYPE_Q6_K, "6.56 bpw"},
    {"Q5_1", 9, AL_TYPE_Q5_1, "6 bpw; output.weight Q6_K"},
    {"Q5_0", 8, AL_TYPE_Q5_0, "5.5 bpw; output.weight Q6_K"},
    {"Q5_K_M", 17, AL_TYPE_Q5_K, "Q5_K; Q6_K for output and some attn_v/ffn_down layers"},
    {"Q5_K_S", 16, AL_TYPE_Q5_K, "Q5_K; output.weight Q6_K"},
    {"Q4_1", 3, AL_TYPE_Q4_1, "5 bpw; output.weight Q6_K"},
    {"Q4_K_M", 15, AL_TYPE_Q4_K, "Q4_K; Q6_K for output and some attn_v/ffn_down layers"},
    {"Q4_K_S", 14, AL_TYPE_Q4_K, "Q4_K; Q5_K for the first attn_v/ffn_down layers"},
    {"Q4_0", 2, AL_TYPE_Q4_0, "4.5 bpw; output.weight Q6_K"},
    {"MXFP4_MOE", 38, AL_TYPE_MXFP4, "MoE experts (3-D tensors) MXFP4, other matrices Q8_0"},
};

const quant_scheme *quant_schemes(int *n) {
    if (n) *n = (int)(sizeof g_schemes / sizeof *g_schemes);
    return g_schemes;
}

const char *quant_scheme_names(char *buf, size_t size) {
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof g_schemes / sizeof *g_schemes && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", g_schemes[i].name);
    return buf;
}

const quant_scheme *quant_scheme_find(const char *name) {
    if (name == NULL) return NULL;
    /* llama-quantize's aliases: a bare K type means its _M mix */
    if (!strcasecmp(name, "Q4_K")) name = "Q4_K_M";
    if (!strcasecmp(name, "Q5_K")) name = "Q5_K_M";
    for (size_t i = 0; i < sizeof g_schemes / sizeof *g_schemes; i++)
        if (!strcasecmp(name, g_schemes[i].name)) return &g_schemes[i];
    return NULL;
}

/* Dimensions up to the last one above 1, as ggml_n_dims counts them (at least 1). */
static uint32_t real_dims(uint32_t n_dims, const int64_t ne[4]) {
    uint32_t d = 1;
    for (uint32_t i = 1; i < n_dims && i < 4; i++)
        if (ne[i] > 1) d = i + 1;
    return d;
}

/* llama.cpp quantizes 2-D and 3-D tensors whose names end in "weight", except norms,
 * MoE routers, position and token-type embeddings and a few tiny state-space and RWKV
 * matrices that are precision-critical and cheap to keep. */
static bool is_quantizable(const char *name, uint32_t dims) {
    static const char *const keep[] = {"_norm.weight", "ffn_gate_inp.weight",
                                       "position_embd.weight", "token_types.weight",
                                       "ssm_conv1d", "time_mix_", "attn_rel_b.weight"};
    const size_t len = strlen(name);
    if (dims < 2 || dims > 3 || len < 6 || strcmp(name + len - 6, "weight") != 0) return false;
    for (size_t i = 0; i < sizeof keep / sizeof *keep; i++)
        if (strstr(name, keep[i])) return false;
    return true;
}

/* llama.cpp's "use more bits" layers of the _M mixes: the first and last eighth and
 * every third layer in between. */
static bool use_more_bits(int i_layer, int n_layer) {
    return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

static bool is_k_type(uint32_t t) { return t >= AL_TYPE_Q2_K && t <= AL_TYPE_Q8_K; }

/* The scheme's mix (llama.cpp's llama_tensor_get_type for the schemes above, dense
 * llama-like models and MXFP4_MOE). t is the scheme's type, ne the tensor's shape (1 past
 * its dimensions); returns the type before any fallback. */
static uint32_t mix_type(const quant_scheme *s, const quant_model_desc *m, const char *name,
                         const int64_t ne[4], uint32_t t) {
    const bool km = s->ftype == 15 || s->ftype == 17, k4s = s->ftype == 14;
    const bool mxfp4_moe = t == AL_TYPE_MXFP4;
    int layer = -1;
    if (sscanf(name, "blk.%d.", &layer) != 1) layer = -1;
    const bool is_embd = !strcmp(name, "token_embd.weight");
    if (!strcmp(name, "output.weight") || (is_embd && !m->has_output)) {
        /* the output matrix is the most sensitive: Q6_K unless Q8_0 was asked for, and
         * Q8_0 under MXFP4_MOE */
        if (mxfp4_moe || ne[0] % quant_get_traits(t)->block_size != 0) return AL_TYPE_Q8_0;
        return t == AL_TYPE_Q8_0 ? t : AL_TYPE_Q6_K;
    }
    /* MXFP4_MOE: the stacked experts of a MoE layer ([n_in][n_out][n_expert], llama.cpp
     * tests ne[2] > 1, not the name) in MXFP4, every other matrix in Q8_0 */
    if (mxfp4_moe) return ne[2] > 1 ? AL_TYPE_MXFP4 : AL_TYPE_Q8_0;
    if (is_embd) return t;
    if (strstr(name, "attn_v.weight")) {
        /* llama.cpp counts attn_v tensors in layer order; the layer number is that count */
        if (km && use_more_bits(layer, m->n_attn_v)) return AL_TYPE_Q6_K;
        if (k4s && layer < 4) return AL_TYPE_Q5_K;
    } else if (strstr(name, "ffn_down")) {
        if (km && use_more_bits(layer, m->n_layer)) return AL_TYPE_Q6_K;
        if (k4s && layer < m->n_layer / 8) return AL_TYPE_Q5_K;
    }
    return t;
}

uint32_t quant_pick_type(const quant_scheme *s, const quant_model_desc *m, const char *name,
                         uint32_t n_dims, const int64_t ne[4], uint32_t cur_type,
                         bool *fell_back) {
    if (fell_back) *fell_back = false;
    if (!is_quantizable(name, real_dims(n_dims, ne))) return cur_type;
    uint32_t t = s->type;
    /* no mix, every ne[0] fits */
    if (t == AL_TYPE_F32 || t == AL_TYPE_F16 || t == AL_TYPE_BF16) return t;
    if (!m->pure) {
        const int64_t ne_real[4] = {ne[0], n_dims > 1 ? ne[1] : 1, n_dims > 2 ? ne[2] : 1,
                                    n_dims > 3 ? ne[3] : 1};
        t = mix_type(s, m, name, ne_real, t);
    }
    if (ne[0] % quant_get_traits(t)->block_size == 0) return t;
    if (fell_back) *fell_back = true;
    /* llama.cpp's fallbacks to a type of blocks of 32, then F16 */
    uint32_t f = t == AL_TYPE_Q4_K ? AL_TYPE_Q5_0 : t == AL_TYPE_Q5_K ? AL_TYPE_Q5_1
               : t == AL_TYPE_Q6_K ? AL_TYPE_Q8_0 : is_k_type(t) ? AL_TYPE_Q4_0 : AL_TYPE_F16;
    return ne[0] % quant_get_traits(f)->block_size == 0 ? f : AL_TYPE_F16;
}

/* ---- whole files ---------------------------------------------------------------------- */

#define CHUNK_BYTES (16u << 20) /* output produced per round of the worker threads */

/* Rows of an F32, F16 or BF16 tensor in the input mapping, as a quant_row_source. */
typedef struct tensor_rows {
    const uint8_t *data;
    uint32_t type;
    uint64_t row_bytes;
} tensor_rows;

static void read_tensor_row(void *ctx, int64_t row, float *dst, int64_t n) {
    const tensor_rows *t = ctx;
    quant_dequantize(t->type, t->data + (uint64_t)row * t->row_bytes, dst, n);
}

/* llama.cpp writes tensors in its loader's order: tensors outside any layer first,
 * then layer by layer (blk.N numerically), each group sorted by name. */
static int layer_of(const gguf_tensor *t) {
    char name[256];
    int layer;
    gguf_str_copy(t->name, name, sizeof name);
    return sscanf(name, "blk.%d.", &layer) == 1 ? layer : -1;
}

static int cmp_llama_order(const void *pa, const void *pb) {
    const gguf_tensor *a = *(const gguf_tensor *const *)pa, *b = *(const gguf_tensor *const *)pb;
    const int la = layer_of(a), lb = layer_of(b);
    if (la != lb) return la < lb ? -1 : 1;
    const uint64_t n = a->name.n < b->name.n ? a->name.n : b->name.n;
    const int c = memcmp(a->name.s, b->name.s, (size_t)n);
    if (c != 0) return c;
    return a->name.n < b->name.n ? -1 : a->name.n > b->name.n;
}

/* What the type choice needs to know of the model; also refuses quantized inputs. */
static al_status describe_model(const gguf_file *f, bool pure, quant_model_desc *m) {
    *m = (quant_model_desc){.pure = pure, .has_output = gguf_find_tensor(f, "output.weight") != NULL};
    int max_layer = -1;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char name[256];
        gguf_str_copy(t->name, name, sizeof name);
        if (t->type != AL_TYPE_F32 && t->type != AL_TYPE_F16 && t->type != AL_TYPE_BF16)
            return al_error(AL_ERR_UNSUPPORTED, "%s: cannot requantize: tensor '%s' is already %s; "
                            "quantize from an F32, F16 or BF16 file", f->path, name,
                            quant_type_name(t->type));
        if (strstr(name, "attn_v.weight")) m->n_attn_v++;
        if (layer_of(t) > max_layer) max_layer = layer_of(t);
    }
    /* {arch}.block_count, or the layers the tensor names show */
    gguf_str arch = {0, NULL};
    uint32_t n_layer = 0;
    char key[160];
    if (gguf_find_key(f, "general.architecture") && gguf_get_str(f, "general.architecture", &arch) == AL_OK &&
        arch.n < 64) {
        snprintf(key, sizeof key, "%.*s.block_count", (int)arch.n, arch.s);
        if (gguf_get_u32_or(f, key, 0, &n_layer) != AL_OK) n_layer = 0;
    }
    m->n_layer = n_layer > 0 && n_layer < (1u << 20) ? (int)n_layer : max_layer + 1;
    return AL_OK;
}

/* Copies the metadata, llama.cpp-style: split.* dropped, the two quantization keys
 * moved to the end with their new values. */
static al_status copy_metadata(const gguf_file *f, const quant_scheme *s, gguf_writer *w) {
    al_status st = AL_OK;
    for (uint64_t i = 0; i < f->n_kv && st == AL_OK; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (gguf_str_eq(kv->key, "general.quantization_version") ||
            gguf_str_eq(kv->key, "general.file_type") ||
            (kv->key.n >= 6 && memcmp(kv->key.s, "split.", 6) == 0))
            continue;
        st = gguf_writer_copy_kv(w, kv);
    }
    if (st == AL_OK) st = gguf_writer_set_u32(w, "general.quantization_version", 2);
    if (st == AL_OK) st = gguf_writer_set_u32(w, "general.file_type", s->ftype);
    return st;
}

/* Converts one tensor into the writer, CHUNK_BYTES of output at a time. */
static al_status write_tensor(gguf_writer *w, const gguf_tensor *t, uint32_t type, int n_threads) {
    if (type == t->type) return gguf_writer_write(w, t->data, t->n_bytes);
    const int64_t n = t->ne[0], n_rows = n > 0 ? (int64_t)(t->n_elem / (uint64_t)n) : 0;
    const uint64_t row_bytes = quant_row_bytes(type, n);
    tensor_rows src = {.data = t->data, .type = t->type, .row_bytes = quant_row_bytes(t->type, n)};
    int64_t chunk = row_bytes > 0 ? (int64_t)(CHUNK_BYTES / row_bytes) : 1;
    if (chunk < 1) chunk = 1;
    if (chunk > n_rows) chunk = n_rows;
    uint8_t *out = chunk > 0 ? al_malloc((size_t)(row_bytes * (uint64_t)chunk)) : NULL;
    if (chunk > 0 && out == NULL)
        return al_error(AL_ERR_NOMEM, "out of memory for %lld rows of %.*s", (long long)chunk,
                        (int)t->name.n, t->name.s);
    al_status st = AL_OK;
    for (int64_t r = 0; r < n_rows && st == AL_OK; r += chunk) {
        const int64_t k = n_rows - r < chunk ? n_rows - r : chunk;
        st = quant_rows(type, n, r, k, read_tensor_row, &src, out, n_threads);
        if (st == AL_OK) st = gguf_writer_write(w, out, row_bytes * (uint64_t)k);
    }
    al_free(out);
    return st;
}

static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Tensor infos in llama.cpp's order, with the scheme's types; fills *types. */
static al_status plan_tensors(const gguf_file *f, const quant_params *p, const quant_model_desc *m,
                              const gguf_tensor **order, uint32_t *types, bool *fell_back,
                              gguf_writer *w) {
    for (uint64_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_llama_order);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = order[i];
        char name[256];
        if (t->name.n >= sizeof name)
            return al_error(AL_ERR_UNSUPPORTED, "%s: tensor name of %llu bytes is too long", f->path,
                            (unsigned long long)t->name.n);
        gguf_str_copy(t->name, name, sizeof name);
        types[i] = quant_pick_type(p->scheme, m, name, t->n_dims, t->ne, t->type, &fell_back[i]);
        al_status st = gguf_writer_add_tensor(w, name, real_dims(t->n_dims, t->ne), t->ne, types[i]);
        if (st != AL_OK) return st;
    }
    return AL_OK;
}

al_status quant_model(const char *in_path, const char *out_path, const quant_params *p,
                      quant_report *report) {
    quant_report rep = {0};
    if (report) *report = rep;
    if (in_path == NULL || out_path == NULL || p == NULL || p->scheme == NULL)
        return al_error(AL_ERR_ARG, "quant_model: NULL argument");
    if (same_file(in_path, out_path))
        return al_error(AL_ERR_ARG, "%s: the output would overwrite the input", out_path);
    gguf_file *f = NULL;
    gguf_writer *w = NULL;
    const gguf_tensor **order = NULL;
    uint32_t *types = NULL;
    bool *fell = NULL;
    quant_model_desc m;
    al_status st = gguf_open(in_path, &f);
    if (st == AL_OK) st = describe_model(f, p->pure, &m);
    if (st == AL_OK) st = gguf_writer_create(&w);
    if (st == AL_OK) {
        const size_t nt = (size_t)f->n_tensors + 1;
        order = al_calloc(nt, sizeof *order);
        types = al_calloc(nt, sizeof *types);
        fell = al_calloc(nt, sizeof *fell);
        if (!order || !types || !fell) st = al_error(AL_ERR_NOMEM, "out of memory for %zu tensors", nt);
    }
    if (st == AL_OK) st = copy_metadata(f, p->scheme, w);
    if (st == AL_OK) st = plan_tensors(f, p, &m, order, types, fell, w);
    if (st == AL_OK) st = gguf_writer_open(w, out_path);
    for (uint64_t i = 0; st == AL_OK && i < f->n_tensors; i++) {
        const gguf_tensor *t = order[i];
        st = write_tensor(w, t, types[i], p->n_threads);
        if (st != AL_OK) break;
        const uint64_t out_bytes = gguf_writer_tensor_bytes(w, i);
        rep.in_bytes += t->n_bytes;
        rep.out_bytes += out_bytes;
        rep.n_tensors++;
        rep.n_quantized += types[i] != t->type;
        rep.n_fallback += fell[i];
        if (p->progress) {
            char name[256];
            quant_progress pr = {.index = (int)i + 1, .count = (int)f->n_tensors,
                                 .name = gguf_str_copy(t->name, name, sizeof name),
                                 .from_type = t->type, .to_type = types[i],
                                 .n_dims = real_dims(t->n_dims, t->ne), .ne = t->ne,
                                 .from_bytes = t->n_bytes, .to_bytes = out_bytes,
                                 .fell_back = fell[i]};
            p->progress(p->progress_ud, &pr);
        }
    }
    if (st == AL_OK) st = gguf_writer_close(w);
    gguf_writer_destroy(w); /* removes the output unless it was closed successfully */
    gguf_close(f);
    al_free(order);
    al_free(types);
    al_free(fell);
    if (st == AL_OK && report) *report = rep;
    return st;
}

/* ---- the public calls (anyllm.h: al_quantize) -------------------------------------- */

int al_quantize_types(const char **names, const char **help, int max) {
    int n;
    const quant_scheme *s = quant_schemes(&n);
    for (int i = 0; i < n && i < max; i++) {
        if (names) names[i] = s[i].name;
        if (help) help[i] = s[i].help;
    }
    return n;
}

al_quantize_params al_quantize_default_params(void) {
    return (al_quantize_params){0};
}

/* Passes quant_model's progress on in the public struct: type names, not numbers. */
typedef struct public_progress {
    const al_quantize_params *p;
} public_progress;

static void progress_to_public(void *ud, const quant_progress *q) {
    const public_progress *pp = ud;
    al_quantize_progress a = {.index = q->index, .count = q->count, .name = q->name,
                              .from_type = quant_type_name(q->from_type),
                              .to_type = quant_type_name(q->to_type), .n_dims = (int)q->n_dims,
                              .from_bytes = q->from_bytes, .to_bytes = q->to_bytes,
                              .fell_back = q->fell_back};
    for (int d = 0; d < 4; d++) a.ne[d] = q->ne[d];
    pp->p->progress(pp->p->progress_user, &a);
}

al_status al_quantize(const char *in_path, const char *out_path, const al_quantize_params *p,
                      al_quantize_report *report) {
    if (report) *report = (al_quantize_report){0};
    if (in_path == NULL || out_path == NULL || p == NULL || p->type == NULL)
        return al_error(AL_ERR_ARG, "al_quantize: NULL %s", in_path == NULL ? "in_path"
                        : out_path == NULL ? "out_path" : p == NULL ? "params" : "type");
    const quant_scheme *s = quant_scheme_find(p->type);
    char list[256];
    if (s == NULL)
        return al_error(AL_ERR_ARG, "unknown type '%s' (one of %s)", p->type,
                        quant_scheme_names(list, sizeof list));
    if (p->n_threads < 0)
        return al_error(AL_ERR_ARG, "n_threads %d: expected 0 (all cores) or more", p->n_threads);
    /* quant_rows runs at most MAX_THREADS: the report says what ran */
    int n_threads = p->n_threads ? p->n_threads : pool_n_cpus();
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
    public_progress pp = {.p = p};
    quant_params qp = {.scheme = s, .n_threads = n_threads, .pure = p->pure,
                       .progress = p->progress ? progress_to_public : NULL, .progress_ud = &pp};
    quant_report r;
    al_status st = quant_model(in_path, out_path, &qp, &r);
    if (st == AL_OK && report)
        *report = (al_quantize_report){.type = s->name, .in_bytes = r.in_bytes,
                                       .out_bytes = r.out_bytes, .n_tensors = r.n_tensors,
                                       .n_quantized = r.n_quantized, .n_fallback = r.n_fallback,
                                       .n_threads = n_threads};
    return st;
}
