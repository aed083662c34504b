/* matmul.c: the fast matmul and attention of the CPU backend: splitting the work over
 * threads and cache-sized chunks, and calling the kernels of one instruction set.
 *
 * A quantized matmul runs in two passes over the thread pool. First the batch of
 * activations is quantized once, into tiles of TT tokens (ops.h). Then the threads
 * take groups of panels (R output rows) from a shared counter, so that a thread slowed
 * by anything else still finishes with the others, and per panel and K chunk unpack
 * the weights once and run the microkernel over every tile of tokens:
 *   - a few tokens (token generation): panel by panel; the weights stream from memory
 *     once, read in place by the kernel (all of K in one call, or with two passes in
 *     chunks of KC_GEMV) or packed in chunks small enough for the panel to stay in
 *     L1; the x16 layout (ops.h) makes them one stream per thread, which the
 *     hardware prefetchers follow (the rows layout and Q6_K prefetch in software:
 *     prefetch_rows, kernels_avx512.c);
 *   - a large batch (prompt processing): chunk by chunk, one pool run each, so that
 *     the chunk of every token's activations stays in L2 while all panels pass over
 *     it, and a panel's chunks are summed in order.
 * Either way the microkernel accumulates a (row, token) pair over K in the same order,
 * continuing from the partial sum it left in `out`, so results do not depend on the
 * batch size, the loop order or the number of threads.
 *
 * With two activation passes (CPU_ACT_Q8X2) each token also has what the first
 * rounding left over, quantized again with its own scales (lo). The dot product is
 * linear in the activations, so w . hi + w . lo is w . (hi + lo), and no new kernel is
 * needed: per chunk the microkernel sums hi and lo from zero into a small buffer, and
 * mm_tile adds out + hi + lo. For a few tokens hi and lo sit in adjacent slots of one
 * tile, so that one kernel call shares each load of weights between them; for a batch
 * they are two tiles side by side. Both give the same sums, bit for bit.
 *
 * With AMX (ops.h) a batch takes the same two passes, but each token is quantized as a
 * row of its own and moved into a tile of CPU_AMX_TOK tokens in the AMX layout (the
 * tokens of the last tile past the batch are zero). A thread packs a group of panels
 * (signed by cpu_amx_sign_panel for a type with a constant offset) and runs each tile
 * of tokens over the whole group, so that the tile's activations are read from L1 by
 * all but the first panel: tile loads from L2 are slow. With two passes the second pass's kernel call adds out + hi +
 * lo itself. The sums per (row, token) are those of the VNNI kernels, in their order,
 * and so are the results; only with one pass may the chunks differ (KC_AMX), which
 * does not change them.
 *
 * Attention splits the queries of each kv head into tiles of attn_lanes (ops.h), or
 * takes them as one tile on attn_few where they fit (token generation), and hands the
 * tiles to the threads kv head by kv head, largest first within a head, from a shared
 * counter: causal tiles differ in cost, and the counter keeps both cores busy to the
 * end. A tile visits only the positions its queries see (a sliding window skips the
 * rest), through the ring caches' rows p % cap. For a prompt of many tiles per head,
 * each thread first copies the head's keys and values into rows of their own
 * (attn_plan_copy), which the tiles then read instead of the caches.
 *
 * A query whose visible keys span two ranges of ATTN_RANGE positions or more (ranges
 * at multiples of it) is attended range by range and the ranges' outputs merged
 * (attn_plan_ranges): the ranges are work items of their own, so that a generated
 * token's attention keeps every thread busy.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "mm.h"
#include "ops.h"
#include "format/quant.h"
#include "util.h"

enum {
    KC_GEMV = 1024,         /* K chunk for a few tokens: the panel stays in L1 */
    KC_MAX = 4096,          /* the largest K chunk of a quantized panel */
    KC_F32 = 1024,          /* the K chunk of a float panel */
    L2_BYTES = 1280 * 1024, /* activations of one chunk kept in L2 for a large batch */
    KC_AMX = 1024,          /* the K chunk on AMX: 16 tokens' activations stay in L1 */
    AMX_GROUP = 8,          /* panels packed at a time on AMX (fast_tls_bytes holds them) */
};

uint64_t fast_act_bytes(const cpu_kernels *k, int64_t max_cols, int n_tok) {
    /* sub-blocks of 16 need the most: 1.5 bytes per element; whole tiles of TT tokens or
     * of CPU_AMX_TOK rows, whichever are larger (a row of AMX is a tile with TT = 1) */
    const int tt = k->tile > CPU_AMX_TOK ? k->tile : CPU_AMX_TOK;
    const int64_t n_tiles = (n_tok + tt - 1) / tt;
    return (uint64_t)n_tiles * (uint64_t)(max_cols / 16 + 1) * (uint64_t)cpu_sb_bytes(tt, 16);
}

uint64_t fast_tls_bytes(const cpu_kernels *k, int64_t max_cols) {
    /* one panel of KC_MAX elements, or AMX_GROUP panels of KC_AMX */
    const int64_t q_k = KC_MAX > AMX_GROUP * KC_AMX ? KC_MAX : AMX_GROUP * KC_AMX;
    const uint64_t q_panel = (uint64_t)(q_k / 16) * (uint64_t)cpu_sb_bytes(k->rows, 16);
    const uint64_t f_panel = (uint64_t)KC_F32 * (uint64_t)k->rows * sizeof(float);
    const uint64_t attn =
        (uint64_t)cpu_attn_scratch(CPU_MAX_ROWS, CPU_ATTN_MAX_DIM) * sizeof(float);
    /* rope: a double and two floats per pair; also a row of floats, what the first
     * activation pass leaves for the second */
    const uint64_t rope = (uint64_t)max_cols * 16;
    uint64_t n = q_panel > f_panel ? q_panel : f_panel;
    if (attn > n) n = attn;
    if (rope > n) n = rope;
    return (n + 63) & ~(uint64_t)63;
}

/* ---- matmul -------------------------------------------------------------------------- */

/* Tokens per activation tile (a narrow tile: one token's, or its hi and lo). */
static inline int mm_tt(const mm_job *j) {
    return j->amx ? CPU_AMX_TOK : j->narrow ? j->passes : j->k->tile;
}

/* AMX: token `slot` of a tile in the AMX layout (ops.h) from its quantized row (the TT =
 * 1 layout, sub-blocks of b + 8 bytes: q[b], da, aux). */
static void amx_scatter(const uint8_t *row, int64_t n_sb, int b, uint8_t *tile, int slot) {
    for (int64_t s = 0; s < n_sb; s++, row += b + 8, tile += cpu_sb_bytes(CPU_AMX_TOK, b)) {
        float *scales = (float *)(tile + CPU_AMX_TOK * b);
        memcpy(tile + slot * b, row, (size_t)b);
        memcpy(scales + slot, row + b, 4);
        memcpy(scales + CPU_AMX_TOK + slot, row + b + 4, 4);
    }
}

void mm_quantize_token(const mm_job *j, const float *x, int64_t t, float *rest) {
    const int b = j->fmt.b;
    const int64_t n = j->w->ne[0];
    cpu_act_fmt lo_fmt = j->fmt;
    lo_fmt.exact_scale = true;
    /* AMX: each pass as a row (tt 1) after rest, then into the tile */
    uint8_t *row = (uint8_t *)(rest + ((n + 15) & ~(int64_t)15));
    uint8_t *amx_tile = j->act + (t / CPU_AMX_TOK) * j->passes * j->tile_bytes;
    uint8_t *tile, *lo_tile;
    int slot, lo_slot, tt = mm_tt(j);
    if (j->amx) {
        tile = lo_tile = row;
        slot = lo_slot = 0, tt = 1;
    } else if (j->paired) { /* one tile: hi and lo of token t in slots 2t, 2t + 1 */
        tile = lo_tile = j->act;
        slot = (int)(2 * t), lo_slot = slot + 1;
    } else { /* the lo tile follows the hi tile */
        tile = j->act + (t / tt) * j->passes * j->tile_bytes;
        lo_tile = tile + j->tile_bytes;
        slot = lo_slot = (int)(t % tt);
    }
    j->k->quantize(x, n, j->fmt, tile, slot, tt);
    if (j->amx) amx_scatter(row, n / b, b, amx_tile, (int)(t % CPU_AMX_TOK));
    if (j->passes == 1) return;
    cpu_act_dequantize(tile, n, b, slot, tt, rest);
    for (int64_t i = 0; i < n; i++)
        rest[i] = x[i] - rest[i];
    j->k->quantize(rest, n, lo_fmt, lo_tile, lo_slot, tt);
    if (j->amx) amx_scatter(row, n / b, b, amx_tile + j->tile_bytes, (int)(t % CPU_AMX_TOK));
}

static void mm_quantize_part(void *arg, int ith, int nth) {
    const mm_job *j = arg;
    float *rest = (float *)mm_tls(j->cb, ith); /* fast_tls_bytes holds a row */
    for (int64_t t = j->n_tok * ith / nth; t < j->n_tok * (ith + 1) / nth; t++)
        mm_quantize_token(j, cpu_f32_row(j->x, j->tok0 + t), t, rest);
}

/* AMX: the tokens of the last tile past the batch, in every pass, are zero
 * (cpu_amx_mk_q reads whole tiles); the whole tile is cleared before quantizing. */
static void mm_zero_pad(const mm_job *j) {
    if (!j->amx || !(j->n_tok % CPU_AMX_TOK)) return;
    uint8_t *last = j->act + (j->n_tok / CPU_AMX_TOK) * j->passes * j->tile_bytes;
    memset(last, 0, (size_t)(j->passes * j->tile_bytes));
}

/* n / d for n >= 0 and d a power of two (tiles, sub-blocks and blocks are): mm_args
 * runs per panel, chunk and tile, and a division there was ~6% of a prompt's time. */
static inline int64_t div_p2(int64_t n, int d) {
    AL_ASSERT(d > 0 && (d & (d - 1)) == 0 && n >= 0);
    return n >> __builtin_ctz((unsigned)d);
}

/* Unpacks K elements [k0, k0 + nk) of panel p, whose rows start at w. */
static void mm_pack(const mm_job *j, int64_t p, const uint8_t *w, int64_t k0, int64_t nk,
                    void *panel) {
    const cpu_kernels *k = j->k;
    const int r = k->rows;
    const int n_rows = (int)mm_min(r, j->w->ne[1] - p * r);
    const uint64_t rb = j->w->row_bytes;
    if (!j->qt) {
        k->pack_f(j->w->type, w, rb, n_rows, k0, nk, panel);
        return;
    }
    const int64_t blk0 = div_p2(k0, j->qt->block), n_blk = div_p2(nk, j->qt->block);
    if (j->w->layout == AL_LAYOUT_X16) {
        k->pack_x16[j->w->type](j->w->type, w, rb, (int)(p * r % 16), blk0, n_blk, panel);
        return;
    }
    cpu_pack_q_fn pack = k->pack_q[j->w->type];
    if (pack)
        pack(j->w->type, w, rb, n_rows, blk0, n_blk, panel);
    else
        cpu_pack_q_generic(j->w->type, r, w, rb, n_rows, blk0, n_blk, panel);
}

/* o = (o + h) + l (+ b) over n lanes; a constant n vectorizes */
static inline void sum_passes(float *restrict o, const float *restrict h, const float *restrict l,
                              const float *restrict b, int n, bool first) {
    /* (0 + h) + l is h + l exactly, so the first chunk sums alike */
    if (first)
        for (int i = 0; i < n; i++)
            o[i] = h[i] + l[i];
    else
        for (int i = 0; i < n; i++)
            o[i] = (o[i] + h[i]) + l[i];
    if (b)
        for (int i = 0; i < n; i++)
            o[i] += b[i];
}

/* Output rows a kernel call computes: its panel's, or an x16 group's two panels'. */
static inline int mm_call_rows(const mm_job *j, const cpu_mk_args *a) {
    return a->x16_group ? 2 * j->k->rows : j->k->rows;
}

/* Two passes: the microkernel has summed each token's hi and lo over the chunk from
 * zero, hi of token t at part[hi + t * step], lo at part[lo + t * step] (rows of R);
 * out continues from its partial sum, in the same order for every layout. */
static void mm_add_passes(const mm_job *j, const cpu_mk_args *a, const float *part, int hi, int lo,
                          int step, int nt, bool first) {
    const int r = mm_call_rows(j, a), n = a->x16_group ? r : a->n_rows;
    for (int t = 0; t < nt; t++) {
        float *o = a->out + t * a->ldo;
        const float *h = part + (hi + t * step) * r, *l = part + (lo + t * step) * r;
        if (n == CPU_MAX_ROWS)
            sum_passes(o, h, l, a->bias, CPU_MAX_ROWS, first);
        else
            sum_passes(o, h, l, a->bias, n, first);
    }
}

/* The kernel arguments for tokens [t0, t0 + nt) of panel p over the chunk [k0, k0 + nk)
 * (float weights: complete; quantized: the first pass's tile). Inlined: a GEMV's
 * threads call it once per take, ~3,000 times a SmolLM2 token, and as a call it had ~4%
 * of the decode's samples; inlined its callers' constant arguments fold. */
static inline __attribute__((always_inline)) cpu_mk_args
mm_args(const mm_job *j, const void *panel, int64_t p, int64_t k0, int64_t nk, int64_t t0,
        int nt) {
    const cpu_kernels *k = j->k;
    const int r = k->rows, tt = mm_tt(j);
    /* every field named, so that the struct is stored field by field: with the rest
     * left to zero-fill, the compiler cleared all of it first (a rep stos per call) */
    cpu_mk_args a = {
        .panel = panel,
        .w = NULL,
        .w_row_bytes = 0,
        .w_blk0 = 0,
        .w_type = 0,
        .w_x16 = false,
        .w_x16_row = 0,
        .x16_group = false,
        .w_x16_pf = false,
        .act = NULL,
        .pass_hi = NULL,
        .n_sb = 0,
        .n_k = 0,
        .ldx = 0,
        .bsize = 0,
        .mins = false,
        .signed_w = false,
        .n16 = 0,
        .n_tok = nt,
        .narrow = j->narrow,
        .n_rows = (int)mm_min(r, j->w->ne[1] - p * r),
        .out = cpu_f32_row(j->out, j->tok0 + t0) + p * r,
        .ldo = (int64_t)(j->out->row_bytes / sizeof(float)),
        .first = k0 == 0,
        .bias = j->bias && k0 + nk == j->w->ne[0] ? cpu_f32_row(j->bias, 0) + p * r : NULL,
    };
    if (!j->qt) {
        a.act = cpu_f32_row(j->x, j->tok0 + t0) + k0;
        a.ldx = (int64_t)(j->x->row_bytes / sizeof(float));
        a.n_k = nk;
        return a;
    }
    const int b = j->qt->sub;
    a.act = j->act + div_p2(t0, tt) * j->passes * j->tile_bytes +
            div_p2(k0, b) * cpu_sb_bytes(tt, b);
    if (!panel) {
        a.w = cpu_raw_row(j->w, p * r);
        a.w_row_bytes = j->w->row_bytes;
        a.w_blk0 = div_p2(k0, j->qt->block);
        a.w_type = j->w->type;
        a.w_x16 = j->w->layout == AL_LAYOUT_X16;
        a.w_x16_row = (int)(p * r % 16);
        a.w_x16_pf = j->cb->x16_pf;
    }
    a.n_sb = div_p2(nk, b);
    a.bsize = b;
    a.mins = j->fmt.offset == 0;
    a.signed_w = (k->signed_types >> j->w->type) & 1;
    a.n16 = cpu_n16(j->qt);
    return a;
}

/* Runs the microkernel on one tile's arguments (mm_args). */
static void mm_tile_run(const mm_job *j, const cpu_mk_args *ap) {
    const cpu_kernels *k = j->k;
    const int r = k->rows;
    if (!j->qt) {
        k->mk_f(ap);
        return;
    }
    if (j->passes == 1) {
        k->mk_q(ap);
        return;
    }
    const cpu_mk_args a = *ap;
    const int nt = a.n_tok;
    _Alignas(64) float part[2 * CPU_MAX_TILE * CPU_MAX_ROWS];
    cpu_mk_args m = a;
    m.first = true;
    m.bias = NULL;
    m.out = part;
    m.ldo = mm_call_rows(j, &a);
    if (j->paired) { /* hi and lo of token t: slots 2t, 2t + 1 */
        m.n_tok = 2 * nt;
        k->mk_q(&m);
        mm_add_passes(j, &a, part, 0, 1, 2, nt, a.first);
        return;
    }
    k->mk_q(&m);
    m.act = (const uint8_t *)a.act + j->tile_bytes;
    m.out = part + CPU_MAX_TILE * r;
    k->mk_q(&m);
    mm_add_passes(j, &a, part, 0, CPU_MAX_TILE, 1, nt, a.first);
}

/* The arguments of the next tile of tokens from those of a tile (the same panel and
 * chunk): per (panel, tile) of a prompt mm_args had been ~5% of its time on AVX2. */
static inline void mm_args_next_tile(const mm_job *j, cpu_mk_args *a) {
    const int tt = mm_tt(j);
    a->out += tt * a->ldo;
    if (j->qt)
        a->act = (const uint8_t *)a->act + j->passes * j->tile_bytes;
    else
        a->act = (const float *)a->act + tt * a->ldx;
}

/* The arguments of panel p + 1 from those of panel p (the same tokens and chunk; out
 * moves by out_step floats): only the pointers move, and only the last panel may be
 * short. Per tile of tokens mm_args runs once, not per panel (perf had put ~6% of a
 * prompt's samples on its stores and reloads of the struct). */
static inline void mm_args_next(const mm_job *j, cpu_mk_args *a, int64_t p, int64_t panel_bytes,
                                int64_t out_step) {
    const int r = j->k->rows;
    a->panel = (const uint8_t *)a->panel + panel_bytes;
    a->out += out_step;
    if (a->bias) a->bias += r;
    a->n_rows = (int)mm_min(r, j->w->ne[1] - (p + 1) * r);
}

/* AMX: tokens [t0, t0 + nt) of panels [p0, p1) (panel p at panels + (p - p0) *
 * panel_bytes), pass by pass, so that a pass's activations of the tile are read from
 * L1 by every panel of the group. */
static void mm_tiles_amx(const mm_job *j, const uint8_t *panels, int64_t panel_bytes, int64_t p0,
                         int64_t p1, int64_t nt, int64_t t0) {
    const int64_t nk = mm_min(j->kc, j->w->ne[0] - j->k0);
    const cpu_mk_args a0 = mm_args(j, panels, p0, j->k0, nk, t0, (int)nt);
    cpu_mk_args a = a0;
    if (j->passes == 1) {
        for (int64_t p = p0; p < p1; p++) {
            cpu_amx_mk_q(&a);
            mm_args_next(j, &a, p, panel_bytes, j->k->rows);
        }
        return;
    }
    /* the first pass of each panel sums the chunk from zero into hi; the second, also
     * from zero, then adds out + hi + lo as mm_add_passes does */
    enum { STEP = CPU_AMX_TOK * CPU_MAX_ROWS };
    _Alignas(64) float hi[AMX_GROUP * STEP];
    a.first = true;
    a.bias = NULL;
    a.out = hi;
    a.ldo = CPU_MAX_ROWS;
    for (int64_t p = p0; p < p1; p++) {
        cpu_amx_mk_q(&a);
        mm_args_next(j, &a, p, panel_bytes, STEP);
    }
    a = a0;
    a.act = (const uint8_t *)a.act + j->tile_bytes;
    a.pass_hi = hi;
    for (int64_t p = p0; p < p1; p++) {
        cpu_amx_mk_q(&a);
        mm_args_next(j, &a, p, panel_bytes, j->k->rows);
        a.pass_hi += STEP;
    }
}

/* The next group of panels [*p0, *p1) for this thread; false when none is left. */
static bool mm_take(mm_job *j, int64_t n_panels, int64_t *p0, int64_t *p1) {
    *p0 = __atomic_fetch_add(&j->next, j->grain, __ATOMIC_RELAXED);
    *p1 = mm_min(*p0 + j->grain, n_panels);
    return *p0 < n_panels;
}

static uint64_t share_pack(int64_t lo, int64_t hi) {
    return (uint64_t)lo | (uint64_t)hi << 32;
}

void mm_share_init(mm_share *s, int nth, int64_t n, int64_t per) {
    AL_ASSERT(n < INT32_MAX);
    const int64_t each = ((n + nth - 1) / nth + per - 1) / per * per; /* the last may be short */
    for (int i = 0; i < nth; i++) {
        const int64_t lo = mm_min(n, i * each);
        __atomic_store_n(&s[i].lohi, share_pack(lo, mm_min(n, lo + each)), __ATOMIC_RELAXED);
    }
}

/* Takes from share s: the owner the front (a quarter of what is left, at least per),
 * a thief the back half. */
static bool share_take(mm_share *s, bool owner, int64_t per, int64_t *i0, int64_t *i1) {
    uint64_t cur = __atomic_load_n(&s->lohi, __ATOMIC_RELAXED);
    for (;;) {
        const int64_t lo = (int64_t)(uint32_t)cur, hi = (int64_t)(cur >> 32);
        if (lo >= hi) return false;
        int64_t a = lo, b = hi;
        if (owner) {
            const int64_t t = (hi - lo) / 4;
            b = mm_min(hi, lo + (t < per ? per : (t + per - 1) / per * per));
        } else {
            a = lo + ((hi - lo) / 2 + per - 1) / per * per;
            if (a >= hi) a = lo;
        }
        const uint64_t next = owner ? share_pack(b, hi) : share_pack(lo, a);
        if (__atomic_compare_exchange_n(&s->lohi, &cur, next, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
            *i0 = a;
            *i1 = b;
            return true;
        }
    }
}

bool mm_share_take(mm_share *s, int ith, int nth, int64_t per, int64_t *i0, int64_t *i1) {
    if (share_take(&s[ith], true, per, i0, i1)) return true;
    for (int v = 1; v < nth; v++)
        if (share_take(&s[(ith + v) % nth], false, per, i0, i1)) return true;
    return false;
}

void mm_shares_run(cpu_backend *cb, int64_t n, al_pool_fn fn, void *arg) {
    mm_share_init(cb->shares, cb->n_threads, n, mm_grain_x16(cb->k, 1));
    pool_run(cb->pool, fn, arg);
}

bool mm_shares_next(cpu_backend *cb, int ith, int nth, int64_t *i0, int64_t *i1) {
    return mm_share_take(cb->shares, ith, nth, mm_grain_x16(cb->k, 1), i0, i1);
}

/* Panel p of a few tokens' pass, K chunk by chunk; with group, panels p and p + 1, an
 * x16 group read in place (cpu_mk_args.x16_group). */
static void mm_gemv_panel(const mm_job *j, int64_t p, bool group, void *panel) {
    const int r = j->k->rows;
    const int64_t n_in = j->w->ne[0];
    const bool inplace = j->inplace && (p + 1) * r <= j->w->ne[1];
    /* a short last panel is packed, in chunks that fit the buffer (with one pass,
     * where kc may be all of K, the chunks do not change the sums) */
    const int64_t kc = inplace ? j->kc : mm_min(j->kc, KC_GEMV);
    for (int64_t k0 = 0; k0 < n_in; k0 += kc) {
        const int64_t nk = mm_min(kc, n_in - k0);
        if (!inplace) mm_pack(j, p, cpu_raw_row(j->w, p * r), k0, nk, panel);
        cpu_mk_args a = mm_args(j, inplace ? NULL : panel, p, k0, nk, 0, (int)j->n_tok);
        a.x16_group = group;
        mm_tile_run(j, &a);
    }
}

/* Whether the kernel takes panels p and p + 1 (< full) as one x16 group in place. */
static bool mm_group_at(const mm_job *j, int64_t p, int64_t full) {
    return j->inplace && j->k->x16_group && j->w->layout == AL_LAYOUT_X16 &&
           p * j->k->rows % 16 == 0 && p + 1 < full;
}

void mm_gemv_panels(const mm_job *j, int64_t p0, int64_t p1, void *panel) {
    const int r = j->k->rows;
    const int64_t n_in = j->w->ne[0], full = mm_min(p1, j->w->ne[1] / r);
    int64_t p = p0;
    /* one pass in place takes K whole (mm_chunk): the arguments of one full panel
     * become the next's by moving the pointers, without mm_args and mm_tile per panel;
     * a kernel that can takes an x16 group's two panels in one call */
    if (j->inplace && j->passes == 1 && j->kc >= n_in && p < full) {
        cpu_mk_args a = mm_args(j, NULL, p, 0, n_in, 0, (int)j->n_tok);
        while (p < full) {
            a.x16_group = mm_group_at(j, p, full);
            j->k->mk_q(&a);
            const int n = mm_call_rows(j, &a);
            p += n / r;
            a.w += (uint64_t)n * a.w_row_bytes;
            a.w_x16_row = (a.w_x16_row + n) % 16;
            a.out += n;
            if (a.bias) a.bias += n;
        }
    }
    while (p < p1) {
        const bool group = mm_group_at(j, p, full);
        mm_gemv_panel(j, p, group, panel);
        p += group ? 2 : 1;
    }
}

/* A few tokens: each panel's rows stream once from memory, chunk by chunk. */
static void mm_gemv_part(void *arg, int ith, int nth) {
    mm_job *j = arg;
    void *panel = mm_tls(j->cb, ith);
    int64_t p0, p1;
    while (mm_shares_next(j->cb, ith, nth, &p0, &p1))
        mm_gemv_panels(j, p0, p1, panel);
}

/* A batch: chunk k0 of every panel, over all tiles of tokens. */
static void mm_gemm_part(void *arg, int ith, int nth) {
    (void)nth;
    mm_job *j = arg;
    const int r = j->k->rows, tt = j->k->tile;
    const int64_t n_panels = (j->w->ne[1] + r - 1) / r;
    const int64_t nk = mm_min(j->kc, j->w->ne[0] - j->k0);
    void *panel = mm_tls(j->cb, ith);
    int64_t p0, p1;
    while (mm_take(j, n_panels, &p0, &p1))
        for (int64_t p = p0; p < p1; p++) {
            mm_pack(j, p, cpu_raw_row(j->w, p * r), j->k0, nk, panel);
            cpu_mk_args a = mm_args(j, panel, p, j->k0, nk, 0, (int)mm_min(tt, j->n_tok));
            for (int64_t t0 = 0; t0 < j->n_tok; t0 += tt) {
                a.n_tok = (int)mm_min(tt, j->n_tok - t0);
                mm_tile_run(j, &a);
                mm_args_next_tile(j, &a);
            }
        }
}

/* A batch on AMX: chunk k0 of a group of panels, packed together, then each tile of
 * tokens over the whole group, so that the tile's activations are read from L1 by all
 * the group's panels (tile loads of 16 rows a token apart are slow from L2). */
static void mm_gemm_part_amx(void *arg, int ith, int nth) {
    (void)nth;
    mm_job *j = arg;
    const int r = j->k->rows, b = j->qt->sub;
    const int64_t n_panels = (j->w->ne[1] + r - 1) / r;
    const int64_t nk = mm_min(j->kc, j->w->ne[0] - j->k0);
    const int64_t panel_bytes = nk / b * cpu_sb_bytes(r, b);
    uint8_t *panels = mm_tls(j->cb, ith);
    int64_t p0, p1;
    cpu_amx_begin(b);
    while (mm_take(j, n_panels, &p0, &p1)) {
        for (int64_t p = p0; p < p1; p++) {
            uint8_t *panel = panels + (p - p0) * panel_bytes;
            mm_pack(j, p, cpu_raw_row(j->w, p * r), j->k0, nk, panel);
            if (j->fmt.offset) cpu_amx_sign_panel(panel, nk / b, b, j->fmt.offset);
        }
        for (int64_t t0 = 0; t0 < j->n_tok; t0 += CPU_AMX_TOK)
            mm_tiles_amx(j, panels, panel_bytes, p0, p1, mm_min(CPU_AMX_TOK, j->n_tok - t0), t0);
    }
    cpu_amx_end();
}

/* K chunk: a multiple of the weight block (so of every sub-block) unless it is all
 * of K. */
static int64_t mm_chunk(const mm_job *j) {
    const int64_t n_in = j->w->ne[0];
    int64_t kc;
    if (!j->qt) /* the same chunks for every batch: float kernels sum within a chunk */
        return mm_min(KC_F32, n_in);
    /* two passes add hi then lo per chunk, so the sum's order follows the chunk
     * boundaries: every batch size takes the same chunks (a full batch of 512 takes
     * about this size anyway) */
    if (j->inplace && j->passes == 1) /* no panel to keep in L1: one call per panel */
        return n_in;
    if (j->n_tok <= j->k->tile || j->passes > 1)
        kc = KC_GEMV;
    else if (j->amx) /* one pass: the chunks do not change the sums */
        kc = KC_AMX;
    else
        kc = L2_BYTES / (j->n_tok * (j->qt->sub + 8) / j->qt->sub);
    kc = kc < 256 ? 256 : kc > KC_MAX ? KC_MAX : kc & ~(int64_t)255;
    return kc >= n_in ? n_in : kc;
}

void mm_plan(mm_job *j) {
    const cpu_kernels *k = j->k;
    const cpu_qtype *qt = j->qt;
    j->amx = qt && j->cb->amx && j->n_tok > k->tile;
    j->paired = qt && j->passes == 2 && 2 * j->n_tok <= k->tile;
    /* in place: one kernel call per panel chunk of at most 2 slots */
    const bool reads = (k->inplace_types >> j->w->type & 1) || j->w->layout == AL_LAYOUT_X16;
    j->inplace = qt && reads && (j->passes == 1 || j->paired) && j->n_tok * j->passes <= 2;
    /* one token over whole panels in place: a tile of that token alone. In a tile of TT
     * its 4-byte groups lie TT * 4 bytes apart, and on AVX-512 a token of K = 2048 had
     * spread over 20 KiB, which with the panel's 18 KiB of weights outgrew L1: the
     * activations came from L2 for every panel, and a GEMV from DRAM ran well below
     * AVX2's (whose 10 KiB fit; docs/benchmarks.md). Paired passes make it a tile of 2,
     * the token's hi and lo */
    j->narrow = k->narrow && j->inplace && j->n_tok == 1 && j->w->ne[1] % k->rows == 0;
    j->kc = mm_chunk(j);
    if (qt) j->tile_bytes = (j->w->ne[0] / qt->sub) * cpu_sb_bytes(mm_tt(j), qt->sub);
}

void mm_job_init(mm_job *j, cpu_backend *cb, const al_tensor *x, const al_tensor *w,
                 const al_tensor *bias, al_tensor *out, int64_t n_tok) {
    *j = (mm_job){.cb = cb,
                  .k = cb->k,
                  .x = x,
                  .w = w,
                  .bias = bias,
                  .out = out,
                  .qt = cpu_qtype_get(w->type),
                  .passes = cb->act_passes,
                  .n_tok = n_tok};
    if (j->qt) j->fmt = cpu_act_format(cb->k, w->type);
    mm_plan(j);
}

void fast_matmul(al_backend *be, const al_tensor *x, const al_tensor *w, const al_tensor *bias,
                 al_tensor *out) {
    cpu_backend *cb = (cpu_backend *)be;
    AL_ASSERT(x->ne[0] == w->ne[0] && out->ne[0] == w->ne[1] && out->ne[1] == x->ne[1]);
    const cpu_qtype *qt = cpu_qtype_get(w->type);
    if (!mm_fast_type(w->type)) {
        ref_matmul(be, x, w, bias, out); /* e.g. Q8_1 or Q8_K weights */
        return;
    }
    pthread_mutex_lock(&cb->lock);
    AL_ASSERT(cb->k && w->ne[0] <= cb->max_cols);
    mm_job j = {.cb = cb,
                .k = cb->k,
                .x = x,
                .w = w,
                .bias = bias,
                .out = out,
                .qt = qt,
                .passes = cb->act_passes,
                .act = cb->act};
    if (qt) j.fmt = cpu_act_format(cb->k, w->type);
    for (int64_t done = 0; done < x->ne[1]; done += j.n_tok) {
        j.tok0 = done;
        j.n_tok = mm_min(x->ne[1] - done, cb->act_tok);
        mm_plan(&j);
        cb->n_narrow += j.narrow;
        mm_zero_pad(&j);
        if (qt && j.n_tok <= 2 * cb->k->tile)
            mm_quantize_part(&j, 0, 1);
        else if (qt)
            pool_run(cb->pool, mm_quantize_part, &j);
        /* a GEMV's takes come from per-thread shares (mm_gemv_part, mm_shares_next); a
         * batch's are single panels (x16 groups), or groups of panels on AMX */
        const int64_t n_panels = (w->ne[1] + cb->k->rows - 1) / cb->k->rows;
        j.grain = mm_grain_x16(cb->k, 1);
        if (j.amx) { /* groups of panels, about 2 per thread at least */
            j.grain = mm_min(AMX_GROUP, n_panels / (2 * cb->n_threads));
            if (j.grain < 1) j.grain = 1;
        }
        if (j.n_tok <= cb->k->tile) {
            mm_shares_run(cb, n_panels, mm_gemv_part, &j);
            continue;
        }
        for (j.k0 = 0; j.k0 < w->ne[0]; j.k0 += j.kc) {
            j.next = 0;
            pool_run(cb->pool, j.amx ? mm_gemm_part_amx : mm_gemm_part, &j);
        }
    }
    pthread_mutex_unlock(&cb->lock);
}

/* ---- attention ----------------------------------------------------------------------- */

typedef struct attn_job {
    cpu_backend *cb;
    cpu_attn_args a;
    cpu_attn_fn fn;
    int lanes;
    int n_qtiles;  /* tiles of queries per kv head */
    int copy_pos0; /* copy_rows > 0: each thread copies the positions [copy_pos0, */
    int copy_rows; /* copy_pos0 + copy_rows) of a kv head before its first tile */
    int next;      /* the next work item; taken with an atomic add */
    int range0, n_ranges; /* n_ranges > 0: the keys in ranges r = range0 + i, i <
                           * n_ranges, positions [r ATTN_RANGE, (r + 1) ATTN_RANGE) */
    float *part;          /* the ranges' outputs [n_ranges][n_tokens][n_head hd], then
                           * their running maxima and sums [n_ranges][n_tokens][n_head][2] */
} attn_job;

enum {
    ATTN_RANGE = 256,         /* keys per range; a multiple of CPU_ATTN_KEYS */
    ATTN_PART_MAX = 4u << 20, /* floats of the ranges' outputs of one pass */
};

/* The attention arguments over a copy of kv head kvh's keys and values at the
 * positions the call visits, rows of head_dim from dst (keys, then values). */
static cpu_attn_args attn_copy_head(const attn_job *j, int kvh, float *dst) {
    const cpu_attn_args *a = &j->a;
    const int hd = a->head_dim, n = j->copy_rows;
    cpu_attn_args c = *a;
    c.k = dst, c.v = dst + (int64_t)n * hd;
    c.ldk = hd, c.cap = n, c.pos0 = j->copy_pos0, c.one_head = true;
    c.kq = c.vq = NULL; /* a typed cache's rows arrive converted */
    for (int i = 0; i < n; i++) {
        const int r = (j->copy_pos0 + i - a->pos0) % a->cap;
        float *kd = dst + (int64_t)i * hd, *vd = dst + (int64_t)(n + i) * hd;
        if (a->kq) {
            a->kv_rows(a->k_type, a->kq + r * a->k_ldb + a->k_ldb / a->n_head_kv * kvh, kd, hd);
            a->kv_rows(a->v_type, a->vq + r * a->v_ldb + a->v_ldb / a->n_head_kv * kvh, vd, hd);
            continue;
        }
        const int64_t off = cpu_attn_row_off(a, kvh, r);
        memcpy(kd, a->k + off, (size_t)hd * sizeof(float));
        memcpy(vd, a->v + off, (size_t)hd * sizeof(float));
    }
    return c;
}

/* The first key position a query at p sees. */
static int attn_lo(const cpu_attn_args *a, int p) {
    return a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
}

/* Range i of a tile of queries: c with the range's keys, outputs and maxima and sums;
 * false where no query of the tile sees a key of the range. */
static bool attn_range_args(const attn_job *j, int i, int q0, int nq, cpu_attn_args *c) {
    const int g = c->n_head / c->n_head_kv, nh = c->n_head, hd = c->head_dim;
    const int p_first = c->n_past + q0 / g, p_last = c->n_past + (q0 + nq - 1) / g;
    c->key_lo = (j->range0 + i) * ATTN_RANGE;
    c->key_hi = c->key_lo + ATTN_RANGE;
    if (c->key_lo > p_last || c->key_hi <= attn_lo(c, p_first)) return false;
    c->out = j->part + (int64_t)i * c->n_tokens * nh * hd;
    c->ldo = (int64_t)nh * hd;
    c->ms = j->part + (int64_t)j->n_ranges * c->n_tokens * nh * hd +
            (int64_t)i * c->n_tokens * nh * 2;
    return true;
}

/* The hint of c (cpu_attn_args.then_n): the first step of work item it, the one a
 * thread likely takes after its current one when the threads keep pace. Each range's
 * first step had started on cold rows, an eighth of a decoded token's steps. */
static void attn_then(const attn_job *j, int it, int per_head, cpu_attn_args *c) {
    const int n_kv = j->a.n_head_kv, end = j->a.n_past + j->a.n_tokens;
    c->then_n = 0;
    if (it >= per_head * n_kv) return;
    const int lo = attn_lo(&j->a, j->a.n_past) / CPU_ATTN_KEYS * CPU_ATTN_KEYS;
    int kb = (j->range0 + it % per_head / j->n_qtiles) * ATTN_RANGE;
    if (kb < lo) kb = lo;
    c->then_kvh = it / per_head, c->then_kb = kb;
    c->then_n = end - kb < CPU_ATTN_KEYS ? end - kb : CPU_ATTN_KEYS;
    if (c->then_n < 0) c->then_n = 0;
}

static void attn_part(void *arg, int ith, int nth) {
    attn_job *j = arg;
    float *scratch = (float *)mm_tls(j->cb, ith);
    float *copy = j->copy_rows ? j->cb->kv_copy + (int64_t)ith * 2 * j->copy_rows * j->a.head_dim
                               : NULL;
    const int n_kv = j->a.n_head_kv, n_q = j->a.n_tokens * (j->a.n_head / n_kv);
    cpu_attn_args c = j->a;
    int copied = -1;
    const int per_head = j->n_qtiles * (j->n_ranges ? j->n_ranges : 1);
    for (;;) {
        const int it = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (it >= per_head * n_kv) break;
        /* kv head by kv head, so that the threads share one head's keys and values in
         * their caches rather than all heads' at once; within a head (and a range) the
         * last tokens, which attend to the most keys, come first */
        const int kvh = it / per_head, in = it % per_head;
        const int qtile = j->n_qtiles - 1 - in % j->n_qtiles, q0 = qtile * j->lanes;
        const int nq = n_q - q0 < j->lanes ? n_q - q0 : j->lanes;
        if (copy && kvh != copied) c = attn_copy_head(j, kvh, copy), copied = kvh;
        cpu_attn_args cr = c;
        if (j->n_ranges && !attn_range_args(j, in / j->n_qtiles, q0, nq, &cr)) continue;
        if (j->n_ranges && !copy) attn_then(j, it + nth, per_head, &cr);
        j->fn(&cr, kvh, q0, nq, scratch);
    }
}

/* Whether the threads copy each kv head's keys and values before its tiles (a prompt
 * over several heads, each thread taking several tiles per head): a head's rows lie a
 * cache row of all heads apart (2 KB for 8 heads of 64), and at that stride they fall
 * into few sets of L1 and L2 and evict one another; contiguous, they stay. At depth
 * 2048 this took ~15% off bench-1b's attention time. Sets j's copy fields. */
static void attn_plan_copy(cpu_backend *cb, attn_job *j) {
    const cpu_attn_args *a = &j->a;
    const int p_hi = a->n_past + a->n_tokens;
    const int p_lo = a->window > 0 && a->n_past - a->window + 1 > 0 ? a->n_past - a->window + 1 : 0;
    const int pos0 = p_lo / CPU_ATTN_KEYS * CPU_ATTN_KEYS, rows = p_hi - pos0;
    const uint64_t need = (uint64_t)cb->n_threads * 2 * (uint64_t)rows * (uint64_t)a->head_dim;
    /* at most 8 MB per thread (8192 positions of heads of 128), kept for the next
     * layers: beyond, the prompt's attention runs over the caches as they are */
    enum { COPY_MIN_TILES = 8, COPY_MAX_FLOATS = 2 << 20 };
    if (a->n_head_kv < 2 || j->n_qtiles < COPY_MIN_TILES * cb->n_threads ||
        need > (uint64_t)COPY_MAX_FLOATS * (uint64_t)cb->n_threads)
        return;
    if (need > cb->kv_copy_floats) {
        float *p = al_aligned_alloc(64, need * sizeof(float));
        if (!p) return; /* the caches as they are: slower, the same result */
        al_aligned_free(cb->kv_copy);
        cb->kv_copy = p, cb->kv_copy_floats = need;
    }
    j->copy_pos0 = pos0, j->copy_rows = rows;
}

/* Whether the call attends in ranges of keys (j's range fields): where a query's
 * visible keys span two ranges or more. A kv head per work item had left threads idle
 * when generating (3 kv heads on 2 threads, 1 on any number): SmolLM2's attention at
 * depth 2048 took 25 ms per token on one thread and 17.5 on two. Each query's result
 * depends on its position and the shape alone (ranges at fixed positions, merged in
 * order), so a batch and its tokens one at a time agree, on any number of threads.
 * The kernels without ranges (attn_ranges), and sinks, which count once per query,
 * keep one pass. */
static bool attn_plan_ranges(cpu_backend *cb, const cpu_kernels *kern, const al_attn_shape *s,
                             attn_job *j) {
    j->n_ranges = 0;
    const int r0 = attn_lo(&j->a, s->n_past) / ATTN_RANGE;
    const int n = (s->n_past + s->n_tokens - 1) / ATTN_RANGE - r0 + 1;
    if (!kern->attn_ranges || s->sinks || n < 2) return false;
    const uint64_t need =
        (uint64_t)n * (uint64_t)s->n_tokens * (uint64_t)s->n_head * (uint64_t)(s->head_dim + 2);
    if (need > cb->attn_part_floats) {
        float *buf = al_aligned_alloc(64, need * sizeof(float));
        if (!buf) return false; /* out of memory: one pass, which rounds otherwise */
        al_aligned_free(cb->attn_part);
        cb->attn_part = buf, cb->attn_part_floats = need;
    }
    j->range0 = r0, j->n_ranges = n, j->part = cb->attn_part;
    return true;
}

/* Each query's output from its ranges': a range's output weighted by its share of the
 * softmax sum, e^(max - M) sum, M the largest maximum, in ascending order of the
 * ranges; a query that sees one range takes its output as it is. w: n_ranges floats. */
static void attn_merge(const attn_job *j, float *w) {
    const cpu_attn_args *a = &j->a;
    const int hd = a->head_dim, nh = a->n_head, n = j->n_ranges;
    const int64_t per = (int64_t)a->n_tokens * nh;
    const float *ms = j->part + (int64_t)n * per * hd;
    for (int t = 0; t < a->n_tokens; t++) {
        const int p = a->n_past + t, lo = attn_lo(a, p);
        const int i0 = lo / ATTN_RANGE - j->range0, i1 = p / ATTN_RANGE - j->range0;
        for (int h = 0; h < nh; h++) {
            const int64_t th = (int64_t)t * nh + h;
            float *o = a->out + t * a->ldo + (int64_t)h * hd;
            if (i0 == i1) {
                memcpy(o, j->part + (i0 * per + th) * hd, (size_t)hd * sizeof(float));
                continue;
            }
            float m = -FLT_MAX, total = 0.0f;
            for (int i = i0; i <= i1; i++)
                m = fmaxf(m, ms[2 * (i * per + th)]);
            for (int i = i0; i <= i1; i++) {
                w[i] = ms[2 * (i * per + th) + 1] * expf(ms[2 * (i * per + th)] - m);
                total += w[i];
            }
            /* range by range over all dimensions at once: each dimension's sum in the
             * same order as one dimension at a time, and a loop that vectorizes */
            float acc[CPU_ATTN_MAX_DIM];
            for (int d = 0; d < hd; d++)
                acc[d] = 0.0f;
            for (int i = i0; i <= i1; i++) {
                const float *pi = j->part + (i * per + th) * hd;
                for (int d = 0; d < hd; d++)
                    acc[d] += w[i] * pi[d];
            }
            for (int d = 0; d < hd; d++)
                o[d] = acc[d] / total;
        }
    }
}

/* One pass of the threads over a batch's tokens (j->a), the lock held. */
static void attn_pass(cpu_backend *cb, const cpu_kernels *kern, const al_attn_shape *s,
                      attn_job *j) {
    const int n_q = s->n_tokens * (s->n_head / s->n_head_kv);
    /* few queries per kv head (token generation): one tile each, on the kernel whose
     * lanes hold keys, not queries; the same bits either way (ops.h) */
    if (kern->attn_few && n_q <= kern->attn_few_lanes) {
        j->fn = kern->attn_few;
        j->lanes = kern->attn_few_lanes;
    }
    j->n_qtiles = (n_q + j->lanes - 1) / j->lanes;
    const bool ranges = attn_plan_ranges(cb, kern, s, j);
    attn_plan_copy(cb, j);
    AL_ASSERT(cb->tls && (uint64_t)cpu_attn_scratch(j->lanes, s->head_dim) * 4 <= cb->tls_bytes);
    pool_run(cb->pool, attn_part, j);
    if (ranges) attn_merge(j, (float *)mm_tls(cb, 0)), cb->n_attn_ranged++;
}

/* A batch's work beside the attention proper, token by token over the threads: its
 * keys and values written into the caches (converted, rotated: for a prompt on a typed
 * cache, a real share of the time on one thread) and its queries rotated; or (out not
 * NULL) the output heads rotated back. Each token's rows are its own: any split gives
 * the same bytes. */
typedef struct kv_prep {
    const al_tensor *q, *k, *v;
    al_tensor *kc, *vc, *out;
    const al_attn_shape *s;
    bool rot_q;
} kv_prep;

static void kv_prep_part(void *arg, int ith, int nth) {
    const kv_prep *p = arg;
    const al_attn_shape *s = p->s;
    for (int t = ith; t < s->n_tokens; t += nth) {
        if (p->out) {
            cpu_rotate_heads(p->out, t, t + 1, s->n_head, s->head_dim);
            continue;
        }
        if (!s->kv_written) cpu_attn_write_kv_row(p->k, p->v, p->kc, p->vc, s, t);
        if (p->rot_q) cpu_rotate_heads(p->q, t, t + 1, s->n_head, s->head_dim);
    }
}

static void kv_prep_run(cpu_backend *cb, kv_prep *p) {
    if (!p->out && !p->rot_q && p->s->kv_written) return; /* nothing to write or rotate */
    const bool plain = !p->out && !p->rot_q && p->kc->type == AL_TYPE_F32 &&
                       p->vc->type == AL_TYPE_F32;
    if (plain || p->s->n_tokens < 4) { /* copies, or a few tokens: not worth the threads */
        kv_prep_part(p, 0, 1);
        return;
    }
    pthread_mutex_lock(&cb->lock);
    pool_run(cb->pool, kv_prep_part, p);
    pthread_mutex_unlock(&cb->lock);
}

void fast_attention(al_backend *be, const al_tensor *q, const al_tensor *k, const al_tensor *v,
                    al_tensor *k_cache, al_tensor *v_cache, const al_attn_shape *s,
                    al_tensor *out) {
    cpu_backend *cb = (cpu_backend *)be;
    const cpu_kernels *kern = cb->k;
    if (s->head_dim > CPU_ATTN_MAX_DIM) {
        ref_attention(be, q, k, v, k_cache, v_cache, s, out);
        return;
    }
    kv_prep prep = {.q = q, .k = k, .v = v, .kc = k_cache, .vc = v_cache, .s = s,
                    .rot_q = k_cache->layout == AL_LAYOUT_HADAMARD}; /* q.k = (H q).(H k) */
    kv_prep_run(cb, &prep);
    const bool typed = k_cache->type != AL_TYPE_F32 || v_cache->type != AL_TYPE_F32;
    AL_ASSERT(typed || k_cache->row_bytes == v_cache->row_bytes);
    /* heads of an odd size take the portable kernel, always, so that the result of
     * a shape never depends on anything but the shape */
    if (s->head_dim % kern->attn_align) kern = &cpu_kernels_scalar;
    attn_job j = {
        .cb = cb,
        .fn = kern->attn,
        .lanes = kern->attn_lanes,
        .a = {.q = cpu_f32_row(q, 0),
              .ldq = (int64_t)(q->row_bytes / sizeof(float)),
              .k = typed ? NULL : cpu_f32_row(k_cache, 0),
              .v = typed ? NULL : cpu_f32_row(v_cache, 0),
              .ldk = typed ? 0 : (int64_t)(k_cache->row_bytes / sizeof(float)),
              .k_type = k_cache->type,
              .v_type = v_cache->type,
              .kq = typed ? (const uint8_t *)k_cache->data + k_cache->offset : NULL,
              .vq = typed ? (const uint8_t *)v_cache->data + v_cache->offset : NULL,
              .k_ldb = (int64_t)k_cache->row_bytes,
              .v_ldb = (int64_t)v_cache->row_bytes,
              .kv_rows = kern->kv_rows,
              .out = cpu_f32_row(out, 0),
              .ldo = (int64_t)(out->row_bytes / sizeof(float)),
              .n_head = s->n_head,
              .n_head_kv = s->n_head_kv,
              .head_dim = s->head_dim,
              .n_past = s->n_past,
              .n_tokens = s->n_tokens,
              .cap = (int)k_cache->ne[1],
              .window = s->window,
              .scale = cpu_attn_scale(s),
              .sinks = s->sinks ? cpu_f32_row(s->sinks, 0) : NULL},
    };
    /* the ranges' outputs of a long batch take memory: it runs in pieces of tokens,
     * which give the same bits (attn_plan_ranges) */
    const uint64_t per_tok = (uint64_t)(s->n_past + s->n_tokens) / ATTN_RANGE * 2 *
                             (uint64_t)s->n_head * (uint64_t)(s->head_dim + 2);
    int piece = s->n_tokens;
    while (piece > 1 && per_tok * (uint64_t)piece > ATTN_PART_MAX)
        piece = (piece + 1) / 2;
    pthread_mutex_lock(&cb->lock);
    for (int t0 = 0; t0 < s->n_tokens; t0 += piece) {
        attn_job jp = j;
        al_attn_shape sp = *s;
        sp.n_past = s->n_past + t0;
        sp.n_tokens = s->n_tokens - t0 < piece ? s->n_tokens - t0 : piece;
        jp.a.q += t0 * jp.a.ldq, jp.a.out += t0 * jp.a.ldo;
        jp.a.n_past = sp.n_past, jp.a.n_tokens = sp.n_tokens;
        attn_pass(cb, kern, &sp, &jp);
    }
    pthread_mutex_unlock(&cb->lock);
    if (v_cache->layout == AL_LAYOUT_HADAMARD) { /* sum p H v = H sum p v */
        kv_prep back = {.out = out, .s = s};
        kv_prep_run(cb, &back);
    }
}
