/* pack_simd.h: what the AVX2 and AVX-512 kernels share, written once against the
 * vector words of a wrapper header (simd_avx2.h, simd_avx512.h: R rows per panel, one
 * per 32-bit lane of vq, and the few operations whose best instructions differ) and
 * compiled once per vector width by the kernels file that includes it after its
 * wrapper: the activation tiles' groups, and the reads of quantized weights.
 *
 * A panel's R rows are read where they lie (panel_rows): blocks of R rows become one
 * vector per 4-byte group of quants (row r in lane r), transposed in registers, and the
 * scales of R rows come in one gather. A weight in the x16 layout (ops.h) goes through
 * the same code: panel_rows knows the layout, and what it would gather or transpose
 * from R row streams is one vector load from one stream. From these come the packs
 * (ops.h's panel layouts) and the blocks that the in-place kernels of each file feed
 * straight into their sums.
 *
 * Each kernels file defines before the include:
 *   Q8_SIGNED   1 where Q8_0's panels keep signed weights (AVX2's vpmaddubsw), else 0
 *               (unsigned, u = w + 128, m = -128 dw)
 * and after it, for panel_rows:
 *   prefetch_x16(rs, off, span)   its prefetches on the x16 stream, if any
 *   k4_scales(rs, off, pb)        the 8 scales and mins of a Q4_K/Q5_K super-block
 *   pack_q8_0, pack_q6_k and their _x16, which PACK_Q_FNS and PACK_X16_FNS name
 *
 * What stays in the kernels files differs between the ISAs in its algorithm, not only
 * in its types: those hooks, Q6_K's reads, the microkernels and the in-place kernels
 * (AVX2's take both halves of an x16 group). */
#ifndef AL_CPU_PACK_SIMD_H
#define AL_CPU_PACK_SIMD_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops.h"
#include "format/quant.h"
#include "util.h"

INLINE int32_t load_i32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* ---- activations ----------------------------------------------------------------------- */

/* Writes one group of quantized activations (q[n], effective scale d) into a tile,
 * with ds = d * sum(q) per sub-block of b. */
INLINE void put_group(const int8_t *q, int n, float d, cpu_act_fmt f, uint8_t *tile, int slot,
                      int tt) {
    const int b = f.b;
    for (int s0 = 0; s0 < n; s0 += b) {
        uint8_t *sb = tile + (s0 / b) * cpu_sb_bytes(tt, b);
        int sum = sum_i8x16(q + s0);
        if (b == 32) sum += sum_i8x16(q + s0 + 16);
        for (int g = 0; g < b / 4; g++)
            memcpy(sb + (g * tt + slot) * 4, q + s0 + 4 * g, 4);
        float *da = (float *)(sb + tt * b);
        da[slot] = d;
        /* the aux word (ops.h) */
        if (f.offset) {
            const int32_t z = -f.offset * sum;
            memcpy(da + tt + slot, &z, 4);
        } else {
            da[tt + slot] = d * (float)sum;
        }
    }
}

/* The float epilogue of one sub-block for nt tokens, from their integer sums is[t]:
 * acc[t] += is[t] * (dw * da[t]) (+ m * aux[t]). Every quantized kernel, in place or
 * on a panel (and kernels_amx.c's), takes these operations in this order, so that they
 * give the same bits. */
INLINE void q_epilogue(const vq *is, vf dw, vf m, const float *da, const float *aux, const int nt,
                       const bool mins, vf *acc) {
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        acc[t] = vf_fmadd(vf_of_i32(is[t]), vf_mul(dw, vf_set(da[t])), acc[t]);
        if (mins) acc[t] = vf_fmadd(m, vf_set(aux[t]), acc[t]);
    }
}

/* ---- reading the rows of a panel ------------------------------------------------------- */

/* Bytes ahead of the pack in each row that it prefetches (into L2: 16 streams need more
 * requests in flight than L1 can track). The rows of a panel are R interleaved
 * streams, which the hardware prefetchers do not follow. */
enum { PF_AHEAD = 384 };

typedef struct panel_rows {
    const uint8_t *b[R / 4]; /* rows 4k..4k+3 start at b[k] + {0, 1, 2, 3} * rb */
    int64_t rb, rb3;         /* row stride and 3 times it: a few registers address all rows */
    int64_t skip;            /* bytes from the start of each row to b[k] */
    /* AL_LAYOUT_X16 (ops.h): byte off of the rows (from skip) lies in the unit of the
     * group's row 0 at pk + 16 off, and the panel is half `half` of its group of 16
     * rows, whose units follow the first half's R (with R = 16, half is 0) */
    bool x16;
    int half;
    const uint8_t *pk;
    int64_t len; /* an in-place GEMV's bytes per row, where prefetch_x16 wants it, else 0 */
} panel_rows;

/* w: the panel's row 0; with x16, row0 is that row's place in its group (0, or R when
 * a group holds two panels). x16 is a constant at every call, so each kernel compiles
 * once per layout. */
INLINE void rows_init(panel_rows *rs, const uint8_t *w, uint64_t row_bytes, int64_t skip, bool x16,
                      int row0) {
    if (X16_HALVES == 1) row0 = 0;
    rs->rb = (int64_t)row_bytes;
    rs->rb3 = 3 * rs->rb;
    rs->skip = skip;
    for (int k = 0; k < R / 4; k++)
        rs->b[k] = w + 4 * k * rs->rb + skip;
    rs->x16 = x16;
    rs->half = row0 / R;
    rs->len = 0;
    rs->pk = w - (int64_t)row0 * rs->rb + 16 * skip;
}

INLINE const uint8_t *row_at(const panel_rows *rs, int r, int64_t off) {
    const int i = r % 4;
    return rs->b[r / 4] + off + (i == 0 ? 0 : i == 1 ? rs->rb : i == 2 ? 2 * rs->rb : rs->rb3);
}

/* x16: this panel's R units of a field of unit-byte units at off. */
INLINE const uint8_t *x16_at(const panel_rows *rs, int64_t off, int unit) {
    return rs->pk + 16 * off + R * unit * rs->half;
}

/* The kernels file's prefetches on the x16 stream: there the rows are one stream, of
 * which the caller reads the span bytes per row before its next call. */
INLINE void prefetch_x16(const panel_rows *rs, int64_t off, int span);

/* n_lines cache lines PF_AHEAD bytes ahead in every row; near the end of the rows, in
 * the next panel's rows (R rows further on), which come next. */
INLINE void prefetch_each_row(const panel_rows *rs, int64_t off, int n_lines) {
    const int64_t at =
        off + PF_AHEAD + (rs->skip + off + PF_AHEAD >= rs->rb ? (R - 1) * rs->rb : 0);
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int l = 0; l < n_lines; l++)
            prefetch_l2(row_at(rs, r, at + 64 * l));
}

INLINE void prefetch_rows(const panel_rows *rs, int64_t off, int n_lines, int span) {
    if (rs->x16)
        prefetch_x16(rs, off, span);
    else
        prefetch_each_row(rs, off, n_lines);
}

/* The 4 bytes at offset off of every row (with x16, a field of 4-byte units). */
INLINE vq gather32(const panel_rows *rs, int64_t off) {
    if (rs->x16) return vq_loadu(x16_at(rs, off, 4));
    return vq_gather32(rs->b[0] + off, rs->rb);
}

/* The fp16 number at offset off of every row. */
INLINE vf gather_d(const panel_rows *rs, int64_t off) {
    if (rs->x16) return vf_load_f16(x16_at(rs, off, 2));
    return vf_f16_of(gather32(rs, off), 0);
}

/* The two fp16 numbers at off and off + 2 of every row, as gather32 has them. */
INLINE vq gather_2xf16(const panel_rows *rs, int64_t off) {
    if (!rs->x16) return gather32(rs, off);
    const vq lo = vq_load_u16(x16_at(rs, off, 2)), hi = vq_load_u16(x16_at(rs, off + 2, 2));
    return vq_or(lo, vq_slli32(hi, 16));
}

/* The byte at off of every row in the low byte of its lane (the other bytes: x16 zero,
 * else what follows it). */
INLINE vq gather_u8(const panel_rows *rs, int64_t off) {
    if (!rs->x16) return gather32(rs, off);
    return vq_load_u8(x16_at(rs, off, 1));
}

/* d[j] = 4-byte group j of the 16 bytes at off, for every row. */
INLINE void load_cols16(const panel_rows *rs, int64_t off, vq d[4]) {
    if (rs->x16) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            d[j] = gather32(rs, off + 4 * j);
        return;
    }
    const uint8_t *p[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
        p[r] = row_at(rs, r, off);
    transpose_rows16(p, d);
}

/* g[j] = 4-byte group j of the 32 bytes at off, for every row. */
INLINE void load_cols32(const panel_rows *rs, int64_t off, vq g[8]) {
    if (rs->x16) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            g[j] = gather32(rs, off + 4 * j);
        return;
    }
    const uint8_t *p[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
        p[r] = row_at(rs, r, off);
    transpose_rows32(p, g);
}

INLINE vq lo4(vq v) {
    return vq_and(v, vq_set8(0x0F));
}
INLINE vq hi4(vq v) {
    return lo4(vq_srli16(v, 4));
}
/* 16 times the high nibbles: one op where hi4 takes two, for a microkernel that
 * divides the sums by 16 (kernels_avx512.c mk_sums1) */
INLINE vq hi16_of(vq v) {
    return vq_and(v, vq_set8((char)0xF0));
}

/* Byte k (0..3) of each lane. */
INLINE vq byte_of(vq v, int k) {
    if (k == 3) return vq_srli32(v, 24);
    return vq_and(vq_srli32(v, 8 * k), vq_set32(0xFF));
}

INLINE void store_q(uint8_t *q, int j, vq v) {
    vq_store(q + sizeof(vq) * j, v);
}

/* dw and m of one sub-block of b elements. */
INLINE void store_scales(uint8_t *sb, int b, vf dw, vf m) {
    vf_store((float *)(sb + R * b), dw);
    vf_store((float *)(sb + R * b) + R, m);
}

/* MXFP4's dw, half the E8M0 scale (quant_e8m0_half), from the scale byte in the low
 * byte of each lane: the exponent field e - 1, or for e < 2 the subnormal whose bits
 * are 0x00200000 << e. */
INLINE vf e8m0_half(vq head) {
    const vq e = vq_and(head, vq_set32(0xFF));
    const vq normal = vq_slli32(vq_sub32(e, vq_set32(1)), 23);
    const vq sub = vq_sllv32(vq_set32(0x00200000), e);
    return vf_cast(vq_blend_lt32(e, 2, normal, sub));
}

/* MXFP4 codes (one per byte, 0..15) -> u = quant_mxfp4_values[code] + 12 (0..24). */
INLINE vq mxfp4_u(vq codes) {
    return vq_lut16(lut16_add(quant_mxfp4_values, 12), codes);
}

/* The legacy types: blocks of 32 with the quants at qs_off, fp16 d (and m) first;
 * MXFP4 has its scale byte first. */
enum { Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 };
static const int g_legacy_size[] = {18, 20, 22, 24, 34, 17}, g_legacy_qs[] = {2, 4, 6, 8, 2, 1};

/* Block i of R rows as the panel holds it: q[j] is 4-byte group j of the quants (row r
 * in lane r; unsigned, but Q8_0's signed where Q8_SIGNED), dw and m the scales of
 * ops.h. hi16 (Q4_0, Q4_1): the high quants as hi16_of gives them. */
INLINE void legacy_block(int kind, const panel_rows *rs, int64_t i, vq q[8], vf *dw, vf *m,
                         const bool hi16) {
    const int64_t off = i * g_legacy_size[kind];
    if (!(i & 1) && !rs->x16) /* two blocks are at most 68 bytes; x16: see prefetch_x16 */
        prefetch_rows(rs, off, 1, 2 * g_legacy_size[kind]);
    const bool has_m = kind == Q4_1 || kind == Q5_1;
    const vq head = has_m ? gather_2xf16(rs, off) : kind == MXFP4 ? gather_u8(rs, off) : vq_zero();
    const vf d = kind == MXFP4 ? e8m0_half(head) : has_m ? vf_f16_of(head, 0) : gather_d(rs, off);
    *dw = d;
    if (kind == Q8_0) {
        load_cols32(rs, off + 2, q);
        if (Q8_SIGNED) {
            *m = vf_zero();
            return;
        }
#pragma GCC unroll 16
        for (int j = 0; j < 8; j++)
            q[j] = vq_xor(q[j], vq_set8((char)0x80));
        *m = vf_mul(d, vf_set(-128.0f));
        return;
    }
    vq h[4];
    load_cols16(rs, off + g_legacy_qs[kind], h);
    if (kind == Q5_0 || kind == Q5_1) {
        const vq qh = gather32(rs, off + (kind == Q5_0 ? 2 : 4));
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++) {
            q[j] = vq_or(lo4(h[j]), q5_high(qh, j));
            q[4 + j] = vq_or(hi4(h[j]), q5_high(qh, 4 + j));
        }
    } else if (kind == MXFP4) {
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++) {
            q[j] = mxfp4_u(lo4(h[j]));
            q[4 + j] = mxfp4_u(hi4(h[j]));
        }
    } else {
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++) {
            q[j] = lo4(h[j]);
            q[4 + j] = hi16 ? hi16_of(h[j]) : hi4(h[j]);
        }
    }
    /* m = -offset * dw, as the portable decoders write it */
    const float neg_offset = kind == Q4_0 ? -8.0f : kind == MXFP4 ? -12.0f : -16.0f;
    *m = has_m ? vf_f16_of(head, 1) : vf_mul(d, vf_set(neg_offset));
}

INLINE void pack_legacy(int kind, const uint8_t *w, uint64_t row_bytes, int64_t blk0, int64_t n_blk,
                        uint8_t *panel, bool x16, int row0) {
    panel_rows rs;
    rows_init(&rs, w, row_bytes, blk0 * g_legacy_size[kind], x16, row0);
    for (int64_t i = 0; i < n_blk; i++, panel += cpu_sb_bytes(R, 32)) {
        vq q[8];
        vf dw, m;
        legacy_block(kind, &rs, i, q, &dw, &m, false);
#pragma GCC unroll 16
        for (int j = 0; j < 8; j++)
            store_q(panel, j, q[j]);
        store_scales(panel, 32, dw, m);
    }
}

/* A panel of x16 rows starts at row 0 of its group, or at R when a group holds two. */
#define ASSERT_X16_ROW0(row0) AL_ASSERT((row0) >= 0 && (row0) < 16 && (row0) % R == 0)

/* A pack over a panel and over an x16 group, from one of the packs below (pack_legacy,
 * pack_k45: the same arguments, the first saying which type). A panel short of R rows
 * (the last of a matrix) takes the portable pack; an x16 weight has none
 * (cpu_x16_fits). */
#define PACK_PAIR(name, pack, which)                                                               \
    static void name(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows,              \
                     int64_t blk0, int64_t n_blk, uint8_t *panel) {                                \
        if (n_rows < R)                                                                            \
            cpu_pack_q_generic(type, R, w, row_bytes, n_rows, blk0, n_blk, panel);                 \
        else                                                                                       \
            pack(which, w, row_bytes, blk0, n_blk, panel, false, 0);                               \
    }                                                                                              \
    static void name##_x16(uint32_t type, const uint8_t *w, uint64_t row_bytes, int row0,          \
                           int64_t blk0, int64_t n_blk, uint8_t *panel) {                          \
        (void)type;                                                                                \
        ASSERT_X16_ROW0(row0);                                                                     \
        pack(which, w, row_bytes, blk0, n_blk, panel, true, row0);                                 \
    }
#define PACK_LEGACY(name, kind) PACK_PAIR(name, pack_legacy, kind)
PACK_LEGACY(pack_q4_0, Q4_0)
PACK_LEGACY(pack_q4_1, Q4_1)
PACK_LEGACY(pack_q5_0, Q5_0)
PACK_LEGACY(pack_q5_1, Q5_1)
PACK_LEGACY(pack_mxfp4, MXFP4)

/* ---- the x16 rewrite at load ------------------------------------------------------------ */
/* cpu_x16_pack's bytes, a group of 16 rows as X16_HALVES panels: 32- and 16-byte runs of
 * a 4-byte field come transposed (load_cols32, load_cols16), the rest as gathers; a
 * 2-byte unit is the low half of a gather, or the high half of the one 2 bytes before
 * when the field ends the block (the gather would read past the last row's end), a
 * 1-byte unit its low byte. Several times faster than cpu_x16_pack, which matters for a
 * model of many GB. */
INLINE void x16_field(const panel_rows rs[X16_HALVES], int64_t off, const cpu_x16_field *f, int bs,
                      uint8_t *dst) {
    int k = 0;
    if (f->unit == 4) {
        for (; k + 32 <= f->size; k += 32)
            for (int h = 0; h < X16_HALVES; h++) {
                vq g[8];
                load_cols32(&rs[h], off + f->off + k, g);
                for (int j = 0; j < 8; j++)
                    vq_storeu(dst + 16 * (f->off + k + 4 * j) + 4 * R * h, g[j]);
            }
        for (; k + 16 <= f->size; k += 16)
            for (int h = 0; h < X16_HALVES; h++) {
                vq g[4];
                load_cols16(&rs[h], off + f->off + k, g);
                for (int j = 0; j < 4; j++)
                    vq_storeu(dst + 16 * (f->off + k + 4 * j) + 4 * R * h, g[j]);
            }
        for (; k < f->size; k += 4)
            for (int h = 0; h < X16_HALVES; h++)
                vq_storeu(dst + 16 * (f->off + k) + 4 * R * h, gather32(&rs[h], off + f->off + k));
        return;
    }
    for (; k < f->size; k += f->unit) {
        const int o = f->off + k;
        for (int h = 0; h < X16_HALVES; h++) {
            if (f->unit == 2) {
                const vq g = o + 4 <= bs ? gather32(&rs[h], off + o)
                                         : vq_srli32(gather32(&rs[h], off + o - 2), 16);
                vq_store_lo16(dst + 16 * o + 2 * R * h, g);
            } else {
                vq_store_lo8(dst + 16 * o + R * h, gather32(&rs[h], off + o));
            }
        }
    }
}

static void x16_pack(uint32_t type, const uint8_t *src, uint8_t *dst, uint64_t row_bytes,
                     int64_t n_blk, int64_t g0, int64_t g1) {
    const cpu_x16_type *t = cpu_x16_of(type);
    AL_ASSERT(t && (uint64_t)n_blk * (uint64_t)t->block_bytes == row_bytes);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *s = src + (uint64_t)g * 16 * row_bytes;
        panel_rows rs[X16_HALVES];
        for (int h = 0; h < X16_HALVES; h++)
            rows_init(&rs[h], s + (uint64_t)(R * h) * row_bytes, row_bytes, 0, false, 0);
        uint8_t *d = dst + (uint64_t)g * 16 * row_bytes;
        for (int64_t b = 0; b < n_blk; b++) {
            const int64_t off = b * t->block_bytes;
            for (int h = 0; h < X16_HALVES; h++)
                prefetch_rows(&rs[h], off, 1, 0);
            for (int i = 0; i < t->n_fields; i++)
                x16_field(rs, off, &t->f[i], t->block_bytes, d + 16 * off);
        }
    }
}

/* ---- K-quants ------------------------------------------------------------------------ */

/* The kernels file's: the 8 scales and mins of Q4_K/Q5_K for R rows (the layout of
 * quant.c k4_scale_min) from the super-block at off, stored as a panel has them in its
 * 8 sub-blocks of 32 at pb. */
INLINE void k4_scales(const panel_rows *rs, int64_t off, uint8_t *pb);

/* Q4_K and Q5_K: 4 chunks of 32 bytes, low nibbles = sub-block 2c, high = 2c + 1.
 * k45_chunk gives chunk c of the super-block at off as the panel holds it (h: the
 * Q5_K fifth bits, load_cols32 of qh; hi16 as in legacy_block). */
INLINE void k45_chunk(bool five, const panel_rows *rs, int64_t off, int c, const vq h[8], vq u0[8],
                      vq u1[8], const bool hi16) {
    vq g[8];
    load_cols32(rs, off + (five ? 48 : 16) + 32 * c, g);
#pragma GCC unroll 16
    for (int j = 0; j < 8; j++) {
        u0[j] = lo4(g[j]);
        u1[j] = hi16 ? hi16_of(g[j]) : hi4(g[j]);
        if (five) {
            /* bit s of qh[l] is the fifth bit of element l of sub-block s */
            u0[j] = vq_or(u0[j], vq_bit_to(h[j], (char)(1 << (2 * c)), 0x10));
            u1[j] = vq_or(u1[j], vq_bit_to(h[j], (char)(2 << (2 * c)), 0x10));
        }
    }
}

INLINE void pack_k45(bool five, const uint8_t *w, uint64_t row_bytes, int64_t blk0, int64_t n_blk,
                     uint8_t *panel, bool x16, int row0) {
    const int64_t t = five ? 176 : 144, sbb = cpu_sb_bytes(R, 32);
    panel_rows rs;
    rows_init(&rs, w, row_bytes, blk0 * t, x16, row0);
    for (int64_t i = 0; i < n_blk; i++, panel += 8 * sbb) {
        const int64_t off = i * t;
        prefetch_rows(&rs, off, 3, (int)t);
        k4_scales(&rs, off, panel);
        vq h[8];
        if (five) load_cols32(&rs, off + 16, h);
#pragma GCC unroll PACK_K45_UNROLL
        for (int c = 0; c < 4; c++) {
            vq u0[8], u1[8];
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

#define PACK_K45(name, five) PACK_PAIR(name, pack_k45, five)
PACK_K45(pack_q4_k, false)
PACK_K45(pack_q5_k, true)

/* Q2_K: per half, 2-bit quants in one 32-byte column, bits 2g..2g+1 of byte l being
 * element 32g + l; sub-blocks of 16 with a 4-bit scale and a 4-bit min. */
static void pack_q2_k(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows, int64_t blk0,
                      int64_t n_blk, uint8_t *panel) {
    if (n_rows < R) {
        cpu_pack_q_generic(type, R, w, row_bytes, n_rows, blk0, n_blk, panel);
        return;
    }
    const int64_t sbb = cpu_sb_bytes(R, 16);
    panel_rows rs;
    rows_init(&rs, w, row_bytes, blk0 * 84, false, 0);
    for (int64_t i = 0; i < n_blk; i++, panel += 16 * sbb) {
        const int64_t off = i * 84;
        prefetch_rows(&rs, off, 2, 84);
        for (int half = 0; half < 2; half++) {
            vq q[8];
            load_cols32(&rs, off + 16 + 32 * half, q);
            for (int g = 0; g < 4; g++)
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    store_q(panel + (8 * half + 2 * g + j / 4) * sbb, j % 4,
                            vq_and(vq_srli16(q[j], 2 * g), vq_set8(3)));
        }
        const vq dd = gather32(&rs, off + 80);
        const vf d = vf_f16_of(dd, 0), dmin = vf_f16_of(dd, 1);
        for (int k = 0; k < 4; k++) {
            const vq sc = gather32(&rs, off + 4 * k);
#pragma GCC unroll 4
            for (int b = 0; b < 4; b++) {
                const vq v = byte_of(sc, b);
                store_scales(panel + (4 * k + b) * sbb, 16,
                             vf_mul(d, vf_of_i32(vq_and(v, vq_set32(15)))),
                             vf_mul(vf_sub(vf_zero(), dmin), vf_of_i32(vq_srli32(v, 4))));
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
    panel_rows rs;
    rows_init(&rs, w, row_bytes, blk0 * 110, false, 0);
    for (int64_t i = 0; i < n_blk; i++, panel += 16 * sbb) {
        const int64_t off = i * 110;
        prefetch_rows(&rs, off, 2, 110);
        vq hm[8];
        load_cols32(&rs, off, hm);
        for (int half = 0; half < 2; half++) {
            vq q[8];
            load_cols32(&rs, off + 32 + 32 * half, q);
            for (int g = 0; g < 4; g++) {
                const int bit = 4 * half + g; /* moved to bit 2 of each byte */
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    const vq hb = bit >= 2 ? vq_srli16(hm[j], bit - 2) : vq_slli16(hm[j], 2 - bit);
                    store_q(
                        panel + (8 * half + 2 * g + j / 4) * sbb, j % 4,
                        vq_or(vq_and(vq_srli16(q[j], 2 * g), vq_set8(3)), vq_and(hb, vq_set8(4))));
                }
            }
        }
        /* d is the high half of the 4 bytes at 106 (108 would read past the block) */
        const vf d = vf_f16_of(gather32(&rs, off + 106), 1);
        const vq s0 = gather32(&rs, off + 96), s1 = gather32(&rs, off + 100);
        const vq s2 = gather32(&rs, off + 104);
#pragma GCC unroll 16
        for (int s = 0; s < 16; s++) {
            /* the 6-bit scale s (see quant.c q3_k_scale), stored + 32 */
            const vq lo = s < 8 ? vq_and(byte_of(s < 4 ? s0 : s1, s % 4), vq_set32(15))
                                : vq_srli32(byte_of(s < 12 ? s0 : s1, s % 4), 4);
            const vq hi = vq_and(vq_srli32(byte_of(s2, s % 4), 2 * (s / 4)), vq_set32(3));
            const vq v = vq_sub32(vq_or(lo, vq_slli32(hi, 4)), vq_set32(32));
            const vf dw = vf_mul(d, vf_of_i32(v));
            store_scales(panel + s * sbb, 16, dw, vf_mul(dw, vf_set(-4.0f)));
        }
    }
}

/* ---- the kernel table's entries ---------------------------------------------------------- */

/* The packs by type, for cpu_kernels.pack_q and .pack_x16 (pack_q8_0 and pack_q6_k,
 * with their _x16, are the kernels file's). */
#define PACK_Q_FNS                                                                                 \
    {[AL_TYPE_Q4_0] = pack_q4_0, [AL_TYPE_Q4_1] = pack_q4_1,   [AL_TYPE_Q5_0] = pack_q5_0,         \
     [AL_TYPE_Q5_1] = pack_q5_1, [AL_TYPE_Q8_0] = pack_q8_0,   [AL_TYPE_Q4_K] = pack_q4_k,         \
     [AL_TYPE_Q5_K] = pack_q5_k, [AL_TYPE_Q6_K] = pack_q6_k,   [AL_TYPE_Q2_K] = pack_q2_k,         \
     [AL_TYPE_Q3_K] = pack_q3_k, [AL_TYPE_MXFP4] = pack_mxfp4}
#define PACK_X16_FNS                                                                               \
    {[AL_TYPE_Q4_0] = pack_q4_0_x16, [AL_TYPE_Q4_1] = pack_q4_1_x16,                               \
     [AL_TYPE_Q5_0] = pack_q5_0_x16, [AL_TYPE_Q5_1] = pack_q5_1_x16,                               \
     [AL_TYPE_Q8_0] = pack_q8_0_x16, [AL_TYPE_Q4_K] = pack_q4_k_x16,                               \
     [AL_TYPE_Q5_K] = pack_q5_k_x16, [AL_TYPE_Q6_K] = pack_q6_k_x16,                               \
     [AL_TYPE_MXFP4] = pack_mxfp4_x16}

/* The types that take the x16 layout, and that the in-place kernels read: the same, as
 * both go through panel_rows. */
#define X16_TYPES                                                                                  \
    (1ull << AL_TYPE_Q4_0 | 1ull << AL_TYPE_Q4_1 | 1ull << AL_TYPE_Q5_0 | 1ull << AL_TYPE_Q5_1 |     \
     1ull << AL_TYPE_Q8_0 | 1ull << AL_TYPE_Q4_K | 1ull << AL_TYPE_Q5_K | 1ull << AL_TYPE_Q6_K |     \
     1ull << AL_TYPE_MXFP4)

#endif /* AL_CPU_PACK_SIMD_H */
