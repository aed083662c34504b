/* kernels_scalar.c: the fast algorithms of the CPU backend in portable C, and the
 * per-type weight decoders every instruction set falls back to.
 *
 * The decoders read ggml's block layouts (see quant.c, whose dequantizers they mirror
 * field by field) and return each weight as an unsigned integer u with a scale dw and
 * an offset m per sub-block, w = dw * u + m; ops.h explains why. The scalar kernels
 * compute what kernels_avx2.c and kernels_avx512.c compute, in the same layouts with
 * one lane: panels of R = 1 row and tiles of TT = 1 token are plain rows, so the
 * integer dot products run over contiguous bytes, which compilers vectorize.
 * Attention tiles hold 8 queries.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ops.h"
#include "format/quant.h"
#include "util.h"

enum { R = 1, TT = 1, LANES = 8 };

static inline float f16_at(const uint8_t *p) {
    return al_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static inline uint32_t u32_at(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- decoders: one weight block -> u, dw, m ------------------------------------------ */
/* Legacy blocks of 32: element j < 16 is the low nibble of qs[j], j + 16 the high one. */

static void decode_q4_0(const uint8_t *b, uint8_t *u, float *dw, float *m) {
    const uint8_t *qs = b + 2; /* d[2] qs[16] */
    for (int j = 0; j < 16; j++) {
        u[j] = qs[j] & 0xF;
        u[j + 16] = qs[j] >> 4;
    }
    dw[0] = f16_at(b);
    m[0] = -8.0f * dw[0];
}

static void decode_q4_1(const uint8_t *b, uint8_t *u, float *dw, float *m) {
    const uint8_t *qs = b + 4; /* d[2] m[2] qs[16] */
    for (int j = 0; j < 16; j++) {
        u[j] = qs[j] & 0xF;
        u[j + 16] = qs[j] >> 4;
    }
    dw[0] = f16_at(b);
    m[0] = f16_at(b + 2);
}

/* The fifth bit of element j is bit j of the 32-bit qh. */
static void decode_q5(const uint8_t *qh4, const uint8_t *qs, uint8_t *u) {
    const uint32_t qh = u32_at(qh4);
    for (int j = 0; j < 16; j++) {
        u[j] = (uint8_t)((qs[j] & 0xF) | ((qh >> j) & 1) << 4);
        u[j + 16] = (uint8_t)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
    }
}

static void decode_q5_0(const uint8_t *b, uint8_t *u, float *dw, float *m) {
    decode_q5(b + 2, b + 6, u); /* d[2] qh[4] qs[16] */
    dw[0] = f16_at(b);
    m[0] = -16.0f * dw[0];
}

static void decode_q5_1(const uint8_t *b, uint8_t *u, float *dw, float *m) {
    decode_q5(b + 4, b + 8, u); /* d[2] m[2] qh[4] qs[16] */
    dw[0] = f16_at(b);
    m[0] = f16_at(b + 2);
}

static void decode_q8_0(const uint8_t *b, uint8_t *u, float *dw, float *m) {
    for (int j = 0; j < 32; j++)
        u[j] = b[2 + j] ^ 0x80; /* int8 + 128 */
    dw[0] = f16_at(b);
    m[0] = -128.0f * dw[0];
}

/* MXFP4 {e, qs[16]}: code c stands for quant_mxfp4_values[c] (-12..12) times half the
 * E8M0 scale; u = value + 12 (0..24) keeps it unsigned, m = -12 dw undoes that. The
 * integer sum is then ggml's sum of values times activations, exactly. */
static void decode_mxfp4(const uint8_t *b, uint8_t *u, float *dw, float *m) {
    const uint8_t *qs = b + 1;
    for (int j = 0; j < 16; j++) {
        u[j] = (uint8_t)(quant_mxfp4_values[qs[j] & 0xF] + 12);
        u[j + 16] = (uint8_t)(quant_mxfp4_values[qs[j] >> 4] + 12);
    }
    dw[0] = quant_e8m0_half(b[0]);
    m[0] = -12.0f * dw[0];
}

/* K-quants: super-blocks of 256. Q2_K and Q3_K keep 2-bit fields of a 128-element half
 * in 32 bytes: element 32g + l of the half is bits 2g..2g+1 of byte l. */

static void decode_q2_k(const uint8_t *b, uint8_t *u, float *dw, float *m) {
    const uint8_t *sc = b, *qs = b + 16; /* scales[16] qs[64] d[2] dmin[2] */
    const float d = f16_at(b + 80), dmin = f16_at(b + 82);
    for (int e = 0; e < 256; e++) {
        const int half = e / 128, g = (e % 128) / 32, l = e % 32;
        u[e] = (qs[32 * half + l] >> (2 * g)) & 3;
    }
    for (int s = 0; s < 16; s++) {
        dw[s] = d * (sc[s] & 0xF);
        m[s] = -dmin * (sc[s] >> 4);
    }
}

/* The 6-bit scale s of Q3_K, stored + 32 (see quant.c q3_k_scale). */
static int q3_k_scale(const uint8_t sc[12], int s) {
    const int lo = s < 8 ? sc[s] & 0xF : sc[s - 8] >> 4;
    const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    return (lo | hi << 4) - 32;
}

static void decode_q3_k(const uint8_t *b, uint8_t *u, float *dw, float *m) {
    const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96; /* ... d[2] at 108 */
    const float d = f16_at(b + 108);
    for (int e = 0; e < 256; e++) {
        const int half = e / 128, g = (e % 128) / 32, l = e % 32;
        const int lo = (qs[32 * half + l] >> (2 * g)) & 3;
        /* a set hmask bit adds 4: u in 0..7 stands for lo - 4 + 4 * bit */
        u[e] = (uint8_t)(lo + ((hmask[l] >> (4 * half + g)) & 1) * 4);
    }
    for (int s = 0; s < 16; s++) {
        dw[s] = d * (float)q3_k_scale(sc, s);
        m[s] = -4.0f * dw[s];
    }
}

/* The 8 6-bit scales and mins of Q4_K and Q5_K (see quant.c k4_scale_min). */
static void k4_scales(const uint8_t sc[12], float d, float dmin, float *dw, float *m) {
    for (int j = 0; j < 8; j++) {
        int s, mn;
        if (j < 4) {
            s = sc[j] & 63;
            mn = sc[j + 4] & 63;
        } else {
            s = (sc[j + 4] & 0xF) | (sc[j - 4] >> 6) << 4;
            mn = (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
        }
        dw[j] = d * (float)s;
        m[j] = -dmin * (float)mn;
    }
}

static void decode_q4_k(const uint8_t *b, uint8_t *u, float *dw, float *m) {
    const uint8_t *qs = b + 16; /* d[2] dmin[2] scales[12] qs[128] */
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            u[64 * c + l] = qs[32 * c + l] & 0xF;
            u[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        }
    k4_scales(b + 4, f16_at(b), f16_at(b + 2), dw, m);
}

static void decode_q5_k(const uint8_t *b, uint8_t *u, float *dw, float *m) {
    const uint8_t *qh = b + 16, *qs = b + 48; /* d dmin scales[12] qh[32] qs[128] */
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            /* bit s of qh[l] is the fifth bit of element l of sub-block s */
            const int lo = qs[32 * c + l] & 0xF, hi = qs[32 * c + l] >> 4;
            u[64 * c + l] = (uint8_t)(lo | ((qh[l] >> (2 * c)) & 1) << 4);
            u[64 * c + 32 + l] = (uint8_t)(hi | ((qh[l] >> (2 * c + 1)) & 1) << 4);
        }
    k4_scales(b + 4, f16_at(b), f16_at(b + 2), dw, m);
}

static void decode_q6_k(const uint8_t *b, uint8_t *u, float *dw, float *m) {
    const uint8_t *ql = b, *qh = b + 128; /* ql[128] qh[64] scales[16] d[2] */
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = f16_at(b + 208);
    for (int half = 0; half < 2; half++) {
        const uint8_t *l4 = ql + 64 * half, *h2 = qh + 32 * half;
        uint8_t *o = u + 128 * half;
        /* element 32g + l: low nibble from l4[l + 32 (g & 1)], low half for g < 2;
         * top two bits are bits 2g..2g+1 of h2[l] */
        for (int l = 0; l < 32; l++) {
            o[l] = (uint8_t)((l4[l] & 0xF) | (h2[l] & 3) << 4);
            o[l + 32] = (uint8_t)((l4[l + 32] & 0xF) | ((h2[l] >> 2) & 3) << 4);
            o[l + 64] = (uint8_t)((l4[l] >> 4) | ((h2[l] >> 4) & 3) << 4);
            o[l + 96] = (uint8_t)((l4[l + 32] >> 4) | ((h2[l] >> 6) & 3) << 4);
        }
    }
    for (int s = 0; s < 16; s++) {
        dw[s] = d * (float)sc[s];
        m[s] = -32.0f * dw[s];
    }
}

/* block, sub-block, bytes, constant offset (the m the decoder writes) */
static const cpu_qtype g_qtypes[AL_TYPE_COUNT] = {
    [AL_TYPE_Q4_0] = {32, 32, 18, 8, 4, decode_q4_0},
    [AL_TYPE_Q4_1] = {32, 32, 20, 0, 4, decode_q4_1},
    [AL_TYPE_Q5_0] = {32, 32, 22, 16, 5, decode_q5_0},
    [AL_TYPE_Q5_1] = {32, 32, 24, 0, 5, decode_q5_1},
    [AL_TYPE_Q8_0] = {32, 32, 34, 128, 8, decode_q8_0},
    [AL_TYPE_Q2_K] = {256, 16, 84, 0, 2, decode_q2_k},
    [AL_TYPE_Q3_K] = {256, 16, 110, 4, 3, decode_q3_k},
    [AL_TYPE_Q4_K] = {256, 32, 144, 0, 4, decode_q4_k},
    [AL_TYPE_Q5_K] = {256, 32, 176, 0, 5, decode_q5_k},
    [AL_TYPE_Q6_K] = {256, 16, 210, 32, 6, decode_q6_k},
    [AL_TYPE_MXFP4] = {32, 32, 17, 12, 5, decode_mxfp4},
};

const cpu_qtype *cpu_qtype_get(uint32_t type) {
    return type < AL_TYPE_COUNT && g_qtypes[type].decode ? &g_qtypes[type] : NULL;
}

cpu_act_fmt cpu_act_format(const cpu_kernels *k, uint32_t type) {
    const cpu_qtype *qt = cpu_qtype_get(type);
    /* a signed panel (AVX2 Q8_0) has no offset: it runs as a type with mins, all 0 */
    const int offset = (k->signed_types >> type) & 1 ? 0 : qt->offset;
    return (cpu_act_fmt){.b = qt->sub, .offset = offset, .exact_scale = qt->block == 256};
}

/* ---- packing ----------------------------------------------------------------------- */

void cpu_pack_q_generic(uint32_t type, int r_lanes, const uint8_t *w, uint64_t row_bytes,
                        int n_rows, int64_t blk0, int64_t n_blk, uint8_t *panel) {
    const cpu_qtype *qt = cpu_qtype_get(type);
    const int b = qt->sub, n_sub = qt->block / b;
    const int64_t sbb = cpu_sb_bytes(r_lanes, b);
    uint8_t u[256];
    float dw[16], m[16];
    for (int r = 0; r < r_lanes; r++) {
        const uint8_t *row = w + (uint64_t)(r < n_rows ? r : n_rows - 1) * row_bytes;
        for (int64_t i = 0; i < n_blk; i++) {
            qt->decode(row + (uint64_t)(blk0 + i) * (uint64_t)qt->type_size, u, dw, m);
            for (int s = 0; s < n_sub; s++) {
                uint8_t *sb = panel + (i * n_sub + s) * sbb;
                if (r_lanes == 1)
                    memcpy(sb, u + s * b, (size_t)b); /* one lane: a plain row */
                else
                    for (int g = 0; g < b / 4; g++)
                        memcpy(sb + (g * r_lanes + r) * 4, u + s * b + 4 * g, 4);
                float *f = (float *)(sb + r_lanes * b);
                f[r] = dw[s];
                f[r_lanes + r] = m[s];
            }
        }
    }
}

/* Element k of a float-type row as f32. */
static inline float float_at(uint32_t type, const uint8_t *row, int64_t k) {
    if (type == AL_TYPE_F32) {
        float f;
        memcpy(&f, row + 4 * k, 4);
        return f;
    }
    uint16_t h = (uint16_t)(row[2 * k] | row[2 * k + 1] << 8);
    return type == AL_TYPE_F16 ? al_f16_to_f32(h) : al_bf16_to_f32(h);
}

static void pack_f_scalar(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows,
                          int64_t k0, int64_t nk, float *panel) {
    (void)row_bytes, (void)n_rows; /* one row */
    for (int64_t k = 0; k < nk; k++)
        panel[k] = float_at(type, w, k0 + k);
}

/* ---- activations --------------------------------------------------------------------- */

/* The aux word of a tile (ops.h): -offset * sum(qa), or da * sum(qa) for types with
 * mins. */
static inline void put_aux(uint8_t *p, cpu_act_fmt f, float d, int sum) {
    if (f.offset) {
        const int32_t z = -f.offset * sum;
        memcpy(p, &z, 4);
    } else {
        const float v = d * (float)sum;
        memcpy(p, &v, 4);
    }
}

/* Writes one group of quantized activations (q[n], effective scale d) into a tile. */
static void put_group(const int8_t *q, int n, float d, cpu_act_fmt f, uint8_t *tile, int slot,
                      int tt) {
    const int b = f.b;
    for (int s0 = 0; s0 < n; s0 += b) {
        uint8_t *sb = tile + (s0 / b) * cpu_sb_bytes(tt, b);
        int sum = 0;
        for (int i = 0; i < b; i++) {
            sum += q[s0 + i];
            sb[((i / 4) * tt + slot) * 4 + i % 4] = (uint8_t)q[s0 + i];
        }
        float *da = (float *)(sb + tt * b);
        da[slot] = d;
        put_aux((uint8_t *)(da + tt + slot), f, d, sum);
    }
}

/* ggml's Q8_0 (its x86 SIMD variant: q = round_even(x * 127/amax); d = amax/127 in
 * fp16, or exact where f.exact_scale). */
static void quantize_scalar(const float *x, int64_t n, cpu_act_fmt f, uint8_t *tile, int slot,
                            int tt) {
    const int b = f.b;
    int8_t q[CPU_ACT_GROUP];
    for (int64_t g0 = 0; g0 < n; g0 += CPU_ACT_GROUP, x += CPU_ACT_GROUP) {
        float amax = 0;
        for (int i = 0; i < CPU_ACT_GROUP; i++)
            amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        const float id = amax != 0 ? 127.0f / amax : 0.0f;
        for (int i = 0; i < CPU_ACT_GROUP; i++)
            q[i] = (int8_t)lrintf(x[i] * id);
        const float d =
            f.exact_scale ? amax / 127.0f : al_f16_to_f32(al_f32_to_f16(amax / 127.0f));
        put_group(q, CPU_ACT_GROUP, d, f, tile + (g0 / b) * cpu_sb_bytes(tt, b), slot, tt);
    }
}

void cpu_act_dequantize(const uint8_t *tile, int64_t n, int b, int slot, int tt, float *x) {
    const int64_t sbb = cpu_sb_bytes(tt, b);
    for (int64_t s = 0; s < n / b; s++) {
        const uint8_t *sb = tile + s * sbb;
        const float d = ((const float *)(sb + tt * b))[slot];
        for (int i = 0; i < b; i++)
            x[s * b + i] = d * (float)(int8_t)sb[((i / 4) * tt + slot) * 4 + i % 4];
    }
}

/* ---- microkernels -------------------------------------------------------------------- */
/* One row and one token per call (R = TT = 1), in the order of the SIMD kernels. */

/* sum of u[i] * q[i] over one sub-block: exact; constant lengths let the compiler
 * vectorize it */
static inline int32_t dot_u8_i8(const uint8_t *u, const int8_t *q, int b) {
    int32_t s = 0;
    if (b == 32)
        for (int i = 0; i < 32; i++)
            s += u[i] * q[i];
    else
        for (int i = 0; i < 16; i++)
            s += u[i] * q[i];
    return s;
}

/* Per sub-block: acc += isum * (dw * da) (+ m * ds). */
static void mk_q_scalar(const cpu_mk_args *a) {
    const int b = a->bsize;
    const int64_t sbb = cpu_sb_bytes(1, b);
    const uint8_t *p = a->panel, *x = a->act;
    float acc = a->first ? 0.0f : a->out[0];
    for (int64_t s = 0; s < a->n_sb; s++, p += sbb, x += sbb) {
        const float da = *(const float *)(x + b);
        const float dw = *(const float *)(p + b), m = *(const float *)(p + b + 4);
        int32_t isum;
        float aux;
        memcpy(&isum, x + b + 4, 4); /* -offset * sum(qa), or a float: see ops.h */
        memcpy(&aux, x + b + 4, 4);
        isum = (a->mins ? 0 : isum) + dot_u8_i8(p, (const int8_t *)x, b);
        acc += (float)isum * (dw * da);
        if (a->mins) acc += m * aux;
    }
    a->out[0] = a->bias ? acc + a->bias[0] : acc;
}

static void mk_f_scalar(const cpu_mk_args *a) {
    const float *p = a->panel, *x = a->act;
    float acc = a->first ? 0.0f : a->out[0];
    for (int64_t k = 0; k < a->n_k; k++)
        acc += p[k] * x[k];
    a->out[0] = a->bias ? acc + a->bias[0] : acc;
}

/* ---- attention --------------------------------------------------------------------- */
/* Queries of one kv head in lanes: qt[d][lane] holds the scaled queries, ot[d][lane]
 * the running sums of e * v. Steps and masking as ops.h (cpu_attn_fn) describes. */

typedef struct attn_lanes {
    int lo[LANES];    /* first visible key position per lane */
    int pos[LANES];   /* last visible key position per lane */
    float mx[LANES];  /* running maximum score */
    float sum[LANES]; /* running sum of exp(score - mx) */
} attn_lanes;

/* Fills qt with the tile's queries (missing lanes repeat the last). */
static void attn_load_queries(const cpu_attn_args *a, int kvh, int q0, int nq, int lanes,
                              float *qt) {
    const int hd = a->head_dim, g = a->n_head / a->n_head_kv;
    for (int j = 0; j < lanes; j++) {
        const int qi = q0 + (j < nq ? j : nq - 1), t = qi / g, h = kvh * g + qi % g;
        const float *q = a->q + t * a->ldq + (int64_t)h * hd;
        for (int d = 0; d < hd; d++)
            qt[d * lanes + j] = q[d] * a->scale;
    }
}

static void attn_store(const cpu_attn_args *a, int kvh, int q0, int nq, int lanes, const float *ot,
                       const float *sum) {
    const int hd = a->head_dim, g = a->n_head / a->n_head_kv;
    for (int j = 0; j < nq; j++) {
        const int qi = q0 + j, t = qi / g, h = kvh * g + qi % g;
        float *o = a->out + t * a->ldo + (int64_t)h * hd;
        const float inv = 1.0f / sum[j];
        for (int d = 0; d < hd; d++)
            o[d] = ot[d * lanes + j] * inv;
    }
}

static void attn_step_scalar(const cpu_attn_args *a, int kvh, int kb, int n, const float *qt,
                             float *ot, float *e, attn_lanes *s) {
    const int hd = a->head_dim;
    float mb[LANES], alpha[LANES];
    int64_t row[CPU_ATTN_KEYS];
    cpu_attn_key_rows(a, kvh, kb, n, row);
    for (int j = 0; j < LANES; j++)
        mb[j] = -INFINITY;
    for (int i = 0; i < n; i++) {
        const float *k = a->k + row[i];
        for (int j = 0; j < LANES; j++) {
            float sc = 0;
            for (int d = 0; d < hd; d++)
                sc += qt[d * LANES + j] * k[d];
            const bool vis = kb + i >= s->lo[j] && kb + i <= s->pos[j];
            e[i * LANES + j] = vis ? sc : -INFINITY;
            mb[j] = fmaxf(mb[j], e[i * LANES + j]);
        }
    }
    for (int j = 0; j < LANES; j++) {
        const float mn = fmaxf(s->mx[j], mb[j]);
        alpha[j] = expf(s->mx[j] - mn);
        s->mx[j] = mn;
        s->sum[j] *= alpha[j];
    }
    for (int d = 0; d < hd; d++)
        for (int j = 0; j < LANES; j++)
            ot[d * LANES + j] *= alpha[j];
    for (int i = 0; i < n; i++) {
        const float *v = a->v + row[i];
        float *ei = e + i * LANES;
        for (int j = 0; j < LANES; j++) {
            const bool vis = kb + i >= s->lo[j] && kb + i <= s->pos[j];
            ei[j] = vis ? expf(ei[j] - s->mx[j]) : 0.0f;
            s->sum[j] += ei[j];
        }
        for (int d = 0; d < hd; d++)
            for (int j = 0; j < LANES; j++)
                ot[d * LANES + j] += ei[j] * v[d];
    }
}

static void attn_scalar(const cpu_attn_args *a, int kvh, int q0, int nq, float *scratch) {
    const int hd = a->head_dim;
    float *qt = scratch, *ot = qt + hd * LANES, *e = ot + hd * LANES;
    attn_lanes s;
    int begin;
    attn_load_queries(a, kvh, q0, nq, LANES, qt);
    const int p_end = cpu_attn_tile_keys(a, q0, nq, LANES, s.lo, s.pos, &begin);
    cpu_attn_lane_start(a, kvh, q0, nq, LANES, s.mx, s.sum); /* -FLT_MAX or the sinks */
    memset(ot, 0, (size_t)hd * LANES * sizeof(float));
    float *stage = scratch + cpu_attn_tile_scratch(LANES, hd);
    for (int kb = begin; kb < p_end; kb += CPU_ATTN_KEYS) {
        const int n = p_end - kb < CPU_ATTN_KEYS ? p_end - kb : CPU_ATTN_KEYS;
        cpu_attn_args tmp;
        attn_step_scalar(cpu_attn_stage(a, kvh, kb, n, &tmp, stage), kvh, kb, n, qt, ot, e, &s);
    }
    if (a->ms) cpu_attn_save_ms(a, kvh, q0, nq, s.mx, s.sum);
    attn_store(a, kvh, q0, nq, LANES, ot, s.sum);
}

/* ---- per-row ops ------------------------------------------------------------------- */

static void rms_norm_scalar(const float *x, const float *w, float eps, float *out, int64_t n) {
    double ss[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++)
            ss[j] += (double)x[i + j] * x[i + j];
    for (; i < n; i++)
        ss[0] += (double)x[i] * x[i];
    const double tot = (ss[0] + ss[1]) + (ss[2] + ss[3]);
    const float scale = (float)(1.0 / sqrt(tot / (double)n + eps));
    for (i = 0; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

static void silu_mul_scalar(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void gelu_mul_scalar(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i], z2 = x * (CPU_GELU_K0 + CPU_GELU_K1 * x * x);
        g[i] = x / (1.0f + expf(-z2)) * u[i];
    }
}

/* Comparisons as in the reference, so that NaN passes through the clamps. */
static void swiglu_oai_scalar(float *g, const float *u, float alpha, float limit, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i] > limit ? limit : g[i];
        const float y = u[i] > limit ? limit : u[i] < -limit ? -limit : u[i];
        g[i] = x / (1.0f + expf(-alpha * x)) * (y + 1.0f);
    }
}

static void scale_scalar(float *x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}

static void add_scalar(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
}

static uint64_t sum_u64_scalar(const uint64_t *p, int64_t n) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (int64_t i = 0; i < n; i += 4) {
        a += p[i];
        b += p[i + 1];
        c += p[i + 2];
        d += p[i + 3];
    }
    return a + b + c + d;
}

const cpu_kernels cpu_kernels_scalar = {
    .isa = CPU_ISA_SCALAR,
    .rows = R,
    .tile = TT,
    .attn_lanes = LANES,
    .quantize = quantize_scalar,
    .attn_align = 1,
    .attn_ranges = true,
    .mk_q = mk_q_scalar,
    .pack_f = pack_f_scalar,
    .mk_f = mk_f_scalar,
    .attn = attn_scalar,
    .kv_rows = cpu_kv_rows_ref,
    .rms_norm = rms_norm_scalar,
    .silu_mul = silu_mul_scalar,
    .gelu_mul = gelu_mul_scalar,
    .swiglu_oai = swiglu_oai_scalar,
    .scale = scale_scalar,
    .add = add_scalar,
    .sigmoid_mul = cpu_sigmoid_mul_scalar,
    .delta = cpu_delta_scalar,
    .conv = cpu_conv_scalar,
    .sum_u64 = sum_u64_scalar,
};
