/* x16.c: the AL_LAYOUT_X16 weight layout (ops.h): which types take it, and the rewrite
 * from the file's rows.
 *
 * A type's fields are listed in block order with the unit the kernels read them in:
 * 2 for an fp16 scale (16 of them make one vcvtph2ps), 1 for MXFP4's scale byte, and 4
 * for quants and packed scales (16 units make one zmm, row r in lane r). The rewrite
 * here is plain C, the definition the AVX-512 reads follow; the AVX-512 kernels have a
 * faster one (x16_pack_512) that must write the same bytes.
 */
#include <string.h>

#include "ops.h"
#include "format/quant.h"
#include "util.h"

/* The fields of each type's block, as quant.c decodes them. */
const cpu_x16_type *cpu_x16_of(uint32_t type) {
    static const cpu_x16_type q4_0 = {18, 2, {{0, 2, 2}, {2, 16, 4}}};
    static const cpu_x16_type q4_1 = {20, 3, {{0, 2, 2}, {2, 2, 2}, {4, 16, 4}}};
    static const cpu_x16_type q5_0 = {22, 3, {{0, 2, 2}, {2, 4, 4}, {6, 16, 4}}};
    static const cpu_x16_type q5_1 = {24, 4, {{0, 2, 2}, {2, 2, 2}, {4, 4, 4}, {8, 16, 4}}};
    static const cpu_x16_type q8_0 = {34, 2, {{0, 2, 2}, {2, 32, 4}}};
    static const cpu_x16_type mxfp4 = {17, 2, {{0, 1, 1}, {1, 16, 4}}};
    /* d, dmin, 12 bytes of packed 6-bit scales and mins, (Q5_K: 32 bytes of fifth
     * bits,) 128 bytes of nibbles */
    static const cpu_x16_type q4_k = {144, 4, {{0, 2, 2}, {2, 2, 2}, {4, 12, 4}, {16, 128, 4}}};
    static const cpu_x16_type q5_k = {176, 5,
                                  {{0, 2, 2}, {2, 2, 2}, {4, 12, 4}, {16, 32, 4}, {48, 128, 4}}};
    /* ql, qh, 16 signed scales, d */
    static const cpu_x16_type q6_k = {210, 4, {{0, 128, 4}, {128, 64, 4}, {192, 16, 4}, {208, 2, 2}}};
    switch (type) {
    case AL_TYPE_Q4_0: return &q4_0;
    case AL_TYPE_Q4_1: return &q4_1;
    case AL_TYPE_Q5_0: return &q5_0;
    case AL_TYPE_Q5_1: return &q5_1;
    case AL_TYPE_Q8_0: return &q8_0;
    case AL_TYPE_MXFP4: return &mxfp4;
    case AL_TYPE_Q4_K: return &q4_k;
    case AL_TYPE_Q5_K: return &q5_k;
    case AL_TYPE_Q6_K: return &q6_k;
    default: return NULL;
    }
}

bool cpu_x16_fits(uint32_t type, int64_t n_rows, int64_t view_rows) {
    return cpu_x16_of(type) && n_rows > 0 && n_rows % 16 == 0 && view_rows > 0 && view_rows % 16 == 0;
}

/* The units of 16 rows side by side; a constant unit makes each memcpy one move. */
static inline void pack_units(const uint8_t *s, uint64_t row_bytes, uint8_t *d, int unit) {
    for (int r = 0; r < 16; r++, d += unit, s += row_bytes)
        memcpy(d, s, (size_t)unit);
}

/* One block of 16 rows: src is row 0's block, dst the group's block. */
static void pack_block(const cpu_x16_type *t, const uint8_t *src, uint64_t row_bytes, uint8_t *dst) {
    for (int i = 0; i < t->n_fields; i++) {
        const cpu_x16_field *f = &t->f[i];
        for (int k = 0; k < f->size; k += f->unit) {
            uint8_t *d = dst + 16 * (f->off + k);
            const uint8_t *s = src + f->off + k;
            if (f->unit == 4)
                pack_units(s, row_bytes, d, 4);
            else if (f->unit == 2)
                pack_units(s, row_bytes, d, 2);
            else
                pack_units(s, row_bytes, d, 1);
        }
    }
}

void cpu_x16_pack(uint32_t type, const uint8_t *src, uint8_t *dst, uint64_t row_bytes,
                  int64_t n_blk, int64_t g0, int64_t g1) {
    const cpu_x16_type *t = cpu_x16_of(type);
    AL_ASSERT(t && (uint64_t)n_blk * (uint64_t)t->block_bytes == row_bytes);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *s = src + (uint64_t)g * 16 * row_bytes;
        uint8_t *d = dst + (uint64_t)g * 16 * row_bytes;
        for (int64_t b = 0; b < n_blk; b++)
            pack_block(t, s + b * t->block_bytes, row_bytes, d + 16 * b * t->block_bytes);
    }
}
