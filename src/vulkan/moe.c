/* moe.c: moe_ffn of the Vulkan backend (backend.h) for batches of a few tokens, the
 * decode case, in three dispatches where the plain ops take about six per expert:
 *
 *   1. moe_mm.comp, GLU build: the gate and up projections of every (token, expert)
 *      pair with their biases and the activation (SiLU, swiglu_oai or GELU) into he;
 *   2. moe_mm.comp: the down projections of every pair, with the bias, into ye;
 *   3. moe_sum.comp: each token's row of x takes its pairs' weighted rows of ye in
 *      ascending order of expert, as add_rows does expert after expert.
 *
 * The pairs are sorted by expert (then token) and described to the shaders by a small
 * table in the upload arena; one expert's pairs form a slot, which one workgroup of
 * the projections takes, so that each expert's weights are dequantized once for all
 * its tokens, as the plain ops do (a CPU device spends its time there). The weights stay where weight_load put them: a dispatch
 * binds a window of whole experts of the stacked tensor and each workgroup offsets
 * into it by its pair's expert. A stacked tensor larger than one storage binding
 * (lavapipe: 128 MiB; a Q6_K down projection of 128 experts is 165 MB) takes one
 * dispatch per window of experts that fits.
 *
 * Every intermediate is an f32 and each pair's dot products are whole sums, so the
 * result differs from the plain ops' only in the order of the additions inside a
 * dot product. What this does not fuse (more tokens, float or unsupported weight
 * types, too little scratch, rows the shaders cannot read as vec4s, an expert that
 * alone exceeds a binding, fusion off) it declines before recording anything.
 */
#include <string.h>

#include "push_moe.h"
#include "util.h"
#include "vk.h"

enum {
    MOE_MAX_TOKENS = 8, /* the decode case and a few sequences or draft tokens */
    MOE_MAX_PAIRS = 256, /* (token, expert) pairs: 8 tokens of up to 32 experts */
    /* the ROWS build's inputs: a uniform buffer of 64 KiB (a CPU device's matmuls
     * need that much, pipelines.c), bound from a multiple of 256 bytes, the largest
     * minUniformBufferOffsetAlignment Vulkan allows */
    UBO_BYTES = 65536, UBO_ALIGN = 256
};

/* The batch's pairs, sorted by (expert, token), its slots (one expert's pairs each) and
 * the split into dispatches. */
typedef struct moe_plan {
    int n_tok, n_used, n_pairs, n_slots;
    int nt_variant; /* the shaders' NT = 1 << it holds the largest slot */
    /* the upload: [n_pairs] (token, expert), then [n_tok][n_used] each token's pairs in
     * ascending order of expert, then their weights (float bits), then [n_slots]
     * (first pair, count) */
    uint32_t table[6 * MOE_MAX_PAIRS];
    /* first slot of each window of experts that one binding holds; [n_win] = n_slots */
    int win_glu[MOE_MAX_PAIRS + 1], win_down[MOE_MAX_PAIRS + 1];
    int n_win_glu, n_win_down;
} moe_plan;

/* Where the parts of the table start (uints). */
static int slots_at(const moe_plan *pl) { return 2 * pl->n_pairs + 2 * pl->n_tok * pl->n_used; }
static uint32_t slot_expert(const moe_plan *pl, int s) {
    return pl->table[2 * pl->table[slots_at(pl) + 2 * s] + 1];
}

static const uint32_t g_moe_types[] = {
    AL_TYPE_Q4_0, AL_TYPE_Q4_1, AL_TYPE_Q5_0, AL_TYPE_Q5_1, AL_TYPE_Q8_0, AL_TYPE_Q2_K,
    AL_TYPE_Q3_K, AL_TYPE_Q4_K, AL_TYPE_Q5_K, AL_TYPE_Q6_K, AL_TYPE_MXFP4,
};

bool vk_moe_type_supported(uint32_t type) {
    for (size_t i = 0; i < sizeof g_moe_types / sizeof *g_moe_types; i++)
        if (g_moe_types[i] == type) return true;
    return false;
}

/* ---- the plan ------------------------------------------------------------------------ */

/* Whether a stacked expert weight and its bias are what the shaders read: a supported
 * type in rows, n_expert experts of n_out rows of n_in, an f32 bias [n_expert][n_out]. */
static bool weight_ok(const al_tensor *w, const al_tensor *b, int n_expert, int64_t n_in,
                      int64_t n_out) {
    if (!w || !vk_moe_type_supported(w->type) || w->layout != AL_LAYOUT_ROWS ||
        w->ne[0] != n_in || w->ne[1] != (int64_t)n_expert * n_out || n_in % 32)
        return false;
    return !b || (b->type == AL_TYPE_F32 && b->ne[0] == n_out && b->ne[1] >= n_expert &&
                  b->row_bytes % sizeof(float) == 0);
}

/* The first pair of slot s, or n_pairs for s = n_slots. */
static uint32_t slot_pair(const moe_plan *pl, int s) {
    return s < pl->n_slots ? pl->table[slots_at(pl) + 2 * s] : (uint32_t)pl->n_pairs;
}

/* Splits the slots (ascending experts) into runs whose experts' rows of a weight
 * (exp_bytes an expert) fit one binding, whose start bind() rounds down by less than
 * the alignment, and, where in_bytes is not 0, whose pairs' input rows (in_bytes each)
 * fit the ROWS build's uniform buffer; 0 where a single slot does not fit. */
static int windows(const vk_backend *be, uint64_t exp_bytes, uint64_t in_bytes,
                   const moe_plan *pl, int *start) {
    const uint64_t room = be->sh->d.caps.max_range - be->sh->d.caps.align;
    int n = 0;
    for (int i = 0; i < pl->n_slots;) {
        const uint32_t e0 = slot_expert(pl, i), p0 = slot_pair(pl, i);
        start[n++] = i;
        for (int i0 = i; i < pl->n_slots; i++) {
            const bool fits = (uint64_t)(slot_expert(pl, i) - e0 + 1) * exp_bytes <= room &&
                              (!in_bytes || (slot_pair(pl, i + 1) - p0) * in_bytes + UBO_ALIGN <=
                                                UBO_BYTES);
            if (!fits && i == i0) return 0;
            if (!fits) break;
        }
    }
    start[n] = pl->n_slots;
    return n;
}

/* Binds the rows of an f32 input: a storage buffer, or for the ROWS build a uniform
 * buffer of UBO_BYTES (where room allows; plan() checked that the rows fit), whose
 * start is a multiple of UBO_ALIGN. Returns the offset in floats, *stride its rows'. */
static uint32_t bind_input(const vk_backend *be, VkDescriptorBufferInfo *info,
                           const al_tensor *t, uint32_t *stride) {
    if (!be->sh->pl.tune.cpu_rows) return vk_bind_f32(be, info, t, stride);
    const vk_buf *b = t->data;
    const uint64_t start = t->offset & ~(uint64_t)(UBO_ALIGN - 1);
    *info = (VkDescriptorBufferInfo){.buffer = b->buffer, .offset = start,
                                     .range = b->size - start < UBO_BYTES ? b->size - start
                                                                          : UBO_BYTES};
    *stride = (uint32_t)(t->row_bytes / sizeof(float));
    return (uint32_t)((t->offset - start) / sizeof(float));
}

/* The slots: each expert's run of the sorted pairs, and the NT build that holds the
 * largest (at most a pair per token, so n_tok <= 8). */
static void make_slots(moe_plan *pl) {
    uint32_t *slots = pl->table + slots_at(pl);
    int n = 0, most = 1;
    for (int p = 0; p < pl->n_pairs; p++) {
        if (p == 0 || pl->table[2 * p + 1] != pl->table[2 * (p - 1) + 1]) {
            slots[2 * n] = (uint32_t)p, slots[2 * n + 1] = 0;
            n++;
        }
        if ((int)++slots[2 * n - 1] > most) most = (int)slots[2 * n - 1];
    }
    pl->n_slots = n;
    pl->nt_variant = most <= 1 ? 0 : most <= 2 ? 1 : most <= 4 ? 2 : 3;
}

/* The pairs of n tokens: false for experts out of range or repeated within a token. */
static bool make_pairs(const al_moe *moe, int n, moe_plan *pl) {
    const int k = moe->n_used;
    uint32_t *pairs = pl->table, *by_tok = pl->table + 2 * n * k;
    int np = 0;
    for (int e = 0; e < moe->n_expert; e++)
        for (int t = 0; t < n; t++)
            for (int j = 0; j < k; j++)
                if (moe->sel[t * k + j] == e) {
                    pairs[2 * np] = (uint32_t)t, pairs[2 * np + 1] = (uint32_t)e;
                    np++;
                }
    if (np != n * k) return false; /* an expert id outside [0, n_expert) */
    /* each token's pairs in ascending order of expert, and their weights */
    int filled[MOE_MAX_TOKENS] = {0};
    for (int p = 0; p < np; p++) {
        const int t = (int)pairs[2 * p], e = (int)pairs[2 * p + 1];
        if (filled[t] && (int)pairs[2 * by_tok[t * k + filled[t] - 1] + 1] == e)
            return false; /* the same expert twice in one token */
        float w = 0;
        for (int j = 0; j < k; j++)
            if (moe->sel[t * k + j] == e) w = moe->sel_w[t * k + j];
        by_tok[t * k + filled[t]] = (uint32_t)p;
        memcpy(&by_tok[n * k + t * k + filled[t]], &w, sizeof w);
        filled[t]++;
    }
    pl->n_tok = n, pl->n_used = k, pl->n_pairs = np;
    return true;
}

/* Everything moe_ffn checks before it records: false declines. */
static bool plan(const vk_backend *be, const al_tensor *xb, const al_moe *moe,
                 const al_tensor *x, moe_plan *pl) {
    const int n = (int)xb->ne[1], k = moe->n_used;
    const int64_t n_embd = xb->ne[0], n_ff = moe->n_ff;
    if (n < 1 || n > MOE_MAX_TOKENS || k < 1 || n * k > MOE_MAX_PAIRS || n * k > moe->n_scratch ||
        moe->n_expert < 1 || n_ff < 1 || x->ne[0] != n_embd || x->ne[1] < n)
        return false;
    if (moe->act != AL_MOE_SILU && moe->act != AL_MOE_SWIGLU_OAI && moe->act != AL_MOE_GELU)
        return false;
    if (!weight_ok(moe->gate, moe->gate_b, moe->n_expert, n_embd, n_ff) ||
        !weight_ok(moe->up, moe->up_b, moe->n_expert, n_embd, n_ff) ||
        !weight_ok(moe->down, moe->down_b, moe->n_expert, n_ff, n_embd) ||
        moe->gate->type != moe->up->type || moe->gate->row_bytes != moe->up->row_bytes)
        return false;
    /* scratch: a row per pair of he (activations) and ye (down outputs) */
    if (moe->he->ne[0] != n_ff || moe->he->ne[1] < n * k || moe->ye->ne[0] != n_embd ||
        moe->ye->ne[1] < n * k)
        return false;
    /* the shaders read inputs as vec4s: rows must start at multiples of 4 floats */
    if (xb->offset % 16 || xb->row_bytes % 16 || moe->he->offset % 16 ||
        moe->he->row_bytes % 16)
        return false;
    if (!make_pairs(moe, n, pl)) return false;
    make_slots(pl);
    /* the GPU build's partial sums: gate and up, NR rows, NT pairs, WG invocations */
    const vk_tuning *tu = &be->sh->pl.tune;
    if (!tu->cpu_rows && 2ull * tu->mv_nr * (1u << pl->nt_variant) * tu->mv_wg * sizeof(float) >
                             be->sh->d.caps.shared_bytes)
        return false;
    /* the ROWS build: the GLU reads every token's row from one uniform buffer, the
     * down projection its window's pairs' rows */
    if (tu->cpu_rows && (uint64_t)n * xb->row_bytes + UBO_ALIGN > UBO_BYTES) return false;
    pl->n_win_glu = windows(be, (uint64_t)n_ff * moe->gate->row_bytes, 0, pl, pl->win_glu);
    pl->n_win_down = windows(be, (uint64_t)n_embd * moe->down->row_bytes,
                             tu->cpu_rows ? moe->he->row_bytes : 0, pl, pl->win_down);
    /* a handful of windows at most (one on GPUs); more is a weight far larger than a
     * binding, which the plain ops split row by row */
    return pl->n_win_glu > 0 && pl->n_win_down > 0 && pl->n_win_glu + pl->n_win_down <= 16;
}

/* ---- recording ------------------------------------------------------------------------ */

/* One projection over windows of experts: GLU (wu, the up projection, not NULL) from
 * the tokens' rows of in, else from the pairs' rows. */
static void project(vk_backend *be, const moe_plan *pl, const int *win, int n_win,
                    const al_tensor *in, const al_tensor *w, const al_tensor *b,
                    const al_tensor *wu, const al_tensor *ub, const al_moe *moe,
                    al_tensor *out, const VkDescriptorBufferInfo *table, uint32_t pt_off) {
    const bool glu = wu != NULL, cpu = be->sh->pl.tune.cpu_rows;
    const vk_op op = cpu ? (glu ? VK_OP_MOE_ROWS_GLU : VK_OP_MOE_ROWS)
                         : (glu ? VK_OP_MOE_MV_GLU : VK_OP_MOE_MV);
    const int64_t n_out = w->ne[1] / moe->n_expert;
    const uint64_t exp_bytes = (uint64_t)n_out * w->row_bytes;
    const uint32_t per_group = cpu ? be->sh->pl.tune.mr_wg : be->sh->pl.tune.mv_nr;
    for (int i = 0; i < n_win; i++) {
        const int s0 = win[i], s1 = win[i + 1];
        const uint32_t e0 = slot_expert(pl, s0), e1 = slot_expert(pl, s1 - 1);
        const uint64_t at = w->offset + e0 * exp_bytes, n_bytes = (e1 - e0 + 1) * exp_bytes;
        VkDescriptorBufferInfo info[7];
        vk_pc_moe_mm pc = {
            .n_in = (uint32_t)w->ne[0], .n_out = (uint32_t)n_out,
            .n_slots = (uint32_t)(s1 - s0), .slot0 = (uint32_t)s0, .x_by_pair = !glu,
            .w_row_bytes = (uint32_t)w->row_bytes, .w_exp_bytes = (uint32_t)exp_bytes,
            .e0 = e0, .pt_off = pt_off, .st_off = pt_off + (uint32_t)slots_at(pl),
            .act = (uint32_t)moe->act,
            .alpha = moe->alpha, .limit = moe->limit,
            .has_bias = (b ? 1u : 0u) | (ub ? 2u : 0u)};
        /* the down projection's input: the rows of this window's pairs */
        const uint32_t r0 = glu ? 0 : slot_pair(pl, s0);
        const uint32_t r1 = glu ? (uint32_t)in->ne[1] : slot_pair(pl, s1);
        const al_tensor rows = al_tensor_rows(in, r0, r1 - r0);
        pc.x_row0 = r0;
        pc.x_off = bind_input(be, &info[0], &rows, &pc.x_stride);
        pc.w_off = vk_bind(be, &info[1], w->data, at, n_bytes);
        /* an absent bias: the input stands in, the binding must be valid, never read */
        pc.b_off = vk_bind_f32(be, &info[2], b ? b : in, &pc.b_stride);
        pc.o_off = vk_bind_f32(be, &info[3], out, &pc.o_stride);
        info[glu ? 6 : 4] = *table;
        if (glu) {
            pc.u_off = vk_bind(be, &info[4], wu->data, wu->offset + e0 * exp_bytes, n_bytes);
            pc.ub_off = vk_bind_f32(be, &info[5], ub ? ub : in, &pc.ub_stride);
        }
        vk_dispatch(be, op, w->type, pl->nt_variant, info, &pc, sizeof pc,
                    (n_out + per_group - 1) / per_group, (uint32_t)(s1 - s0));
    }
}

/* The weighted sum of each token's pairs into x. */
static void sum_into(vk_backend *be, const moe_plan *pl, const al_tensor *ye, al_tensor *x,
                     const VkDescriptorBufferInfo *table, uint32_t iw_off) {
    VkDescriptorBufferInfo info[3];
    const al_tensor xv = al_tensor_rows(x, 0, pl->n_tok);
    vk_pc_moe_sum pc = {.n_cols = (uint32_t)x->ne[0], .n_tok = (uint32_t)pl->n_tok,
                        .n_used = (uint32_t)pl->n_used, .iw_off = iw_off};
    pc.x_off = vk_bind_f32(be, &info[0], &xv, &pc.x_stride);
    pc.y_off = vk_bind_f32(be, &info[1], ye, &pc.y_stride);
    info[2] = *table;
    const uint32_t wg = be->sh->pl.tune.ew_wg;
    vk_dispatch(be, VK_OP_MOE_SUM, 0, 0, info, &pc, sizeof pc, (pc.n_cols + wg - 1) / wg,
                (uint32_t)pl->n_tok);
}

bool vk_op_moe_ffn(al_backend *base, const al_tensor *xb, const al_moe *moe, al_tensor *x) {
    vk_backend *be = (vk_backend *)base;
    moe_plan pl; /* about 6 KiB: on the stack, no allocation in the decode loop */
    if (!be->sh->pl.tune.fuse || !plan(be, xb, moe, x, &pl)) return false;
    const int np = pl.n_pairs;
    const uint64_t table_bytes = (uint64_t)(slots_at(&pl) + 2 * pl.n_slots) * sizeof(uint32_t);
    if (!vk_begin(be, pl.n_win_glu + pl.n_win_down + 1, table_bytes)) return true;
    VkDescriptorBufferInfo table;
    const uint64_t off = vk_upload(be, pl.table, table_bytes);
    const uint32_t pt_off = vk_bind(be, &table, be->s.upload, off, table_bytes) / sizeof(uint32_t);
    const al_tensor xin = al_tensor_rows(xb, 0, pl.n_tok);
    al_tensor he = al_tensor_rows(moe->he, 0, np), ye = al_tensor_rows(moe->ye, 0, np);
    vk_hazard(be, xin.data, false);
    vk_hazard(be, moe->gate->data, false);
    vk_hazard(be, moe->up->data, false);
    if (moe->gate_b) vk_hazard(be, moe->gate_b->data, false);
    if (moe->up_b) vk_hazard(be, moe->up_b->data, false);
    vk_hazard(be, he.data, true);
    project(be, &pl, pl.win_glu, pl.n_win_glu, &xin, moe->gate, moe->gate_b, moe->up, moe->up_b,
            moe, &he, &table, pt_off);
    vk_hazard(be, he.data, false);
    vk_hazard(be, moe->down->data, false);
    if (moe->down_b) vk_hazard(be, moe->down_b->data, false);
    vk_hazard(be, ye.data, true);
    project(be, &pl, pl.win_down, pl.n_win_down, &he, moe->down, moe->down_b, NULL, NULL, moe,
            &ye, &table, pt_off);
    vk_hazard(be, ye.data, false);
    vk_hazard(be, x->data, true);
    sum_into(be, &pl, &ye, x, &table, pt_off + (uint32_t)(2 * np));
    return true;
}
