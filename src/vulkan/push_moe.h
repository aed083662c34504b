/* push_moe.h: the push-constant blocks of the mixture-of-experts shaders (moe.c),
 * mirrored field by field as push.h's are (see there for the units). */
#ifndef AL_VK_PUSH_MOE_H
#define AL_VK_PUSH_MOE_H

#include <stdint.h>

/* moe_mm.comp: out[pair][o] = in[row] . w[e n_out + o] (+ bias) for the pairs of the
 * n_slots slots slot0 .. of the slot table (first pair, count) at st_off (uints) of the
 * table binding; the pair table (token, expert) is at pt_off there. row is the pair's
 * token, or with x_by_pair the pair less x_row0 (the input binding's first row; a
 * uniform buffer in the ROWS build, a storage buffer in the other). w_off is where expert e0's first row
 * starts in the weight binding, an expert's rows span w_exp_bytes; u_off likewise for
 * the up projection (GLU build; same row and expert bytes). has_bias: bit 0 the gate's
 * (or only) bias, rows of b_stride floats per expert; bit 1 the up's. act: al_moe_act. */
typedef struct vk_pc_moe_mm {
    uint32_t n_in, n_out, n_slots, slot0;
    uint32_t x_off, x_stride, x_by_pair, x_row0;
    uint32_t w_off, w_row_bytes, w_exp_bytes, e0; /* bytes */
    uint32_t u_off;                               /* bytes */
    uint32_t b_off, b_stride, has_bias;
    uint32_t ub_off, ub_stride;
    uint32_t o_off, o_stride;
    uint32_t pt_off, st_off;
    uint32_t act;
    float alpha, limit;
} vk_pc_moe_mm;
_Static_assert(sizeof(vk_pc_moe_mm) == 100, "mirror of moe_mm.comp");

/* moe_sum.comp: x[t] += w[t][j] y[pair[t][j]] over j < n_used in order; the pairs
 * then the weights (float bits) are uints at iw_off of the table binding. */
typedef struct vk_pc_moe_sum {
    uint32_t n_cols, n_tok, n_used;
    uint32_t x_off, x_stride;
    uint32_t y_off, y_stride;
    uint32_t iw_off;
} vk_pc_moe_sum;
_Static_assert(sizeof(vk_pc_moe_sum) == 32, "mirror of moe_sum.comp");

#endif /* AL_VK_PUSH_MOE_H */
