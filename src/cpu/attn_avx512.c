/* attn_avx512.c: the attention kernels for AVX-512 (ops.h cpu_attn_fn).
 *
 * Compiled for AVX-512 by the target pragma below, whatever the build's flags; cpu.c
 * picks cpu_kernels_avx512, and with it these kernels, only when CPUID says the CPU
 * has these extensions.
 *
 * Two kernels, one result. cpu_attn_512 keeps 16 queries of one kv head in the lanes,
 * so both q.k and p.v are broadcast-FMAs with no horizontal sums: right for prompts,
 * where a kv head has n_tokens * G queries. A generated token has only G = n_head /
 * n_head_kv of them (4 for a TinyLlama shape), and there 12 of the 16 lanes would
 * compute garbage. cpu_attn_512_few (tiles of up to CPU_ATTN_FEW queries) puts the
 * keys in the lanes for q.k (16 keys per register, K transposed in registers 16 x 16
 * at a time) and the dimensions in the lanes for p.v, each loaded vector of K or V
 * shared by the tile's queries.
 *
 * A token must give the same logits alone or in a batch, so the second kernel performs,
 * per query, the first one's floating-point operations in the same order: the same
 * steps of CPU_ATTN_KEYS keys, each score one FMA chain over d from 0 with q
 * pre-multiplied by the scale, -inf for keys the query does not see, the same running
 * maximum, alpha = exp512(mx - mn) lane-wise, sum * alpha then + e key by key, ot *
 * alpha then FMAs key by key (unseen keys add their exact zeros), and ot * (1 / sum).
 * Only the step's maximum is reduced in another order, which gives the same value
 * (see few_max). test_kernels compares the two bit for bit.
 */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"))), \
                             apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#endif

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "avx512.h"
#include "ops.h"
#include "util.h"

enum { LANES = 16, FEW = CPU_ATTN_FEW, KEYS = CPU_ATTN_KEYS };

#define INLINE static inline __attribute__((always_inline))

/* ---- queries in the lanes (prompts) ------------------------------------------------------ */
/* Steps and masking as ops.h (cpu_attn_fn) describes. */

typedef struct attn_state {
    __m512i lo, pos; /* first and last visible key per lane */
    __m512 mx;       /* running maximum score */
    __m512 sum;      /* running sum of exp(score - mx) */
    int64_t row[CPU_ATTN_KEYS]; /* the step's cache rows (cpu_attn_key_rows) */
} attn_state;

/* Lanes with lo <= key <= pos see the key. */
INLINE __mmask16 visible(int key, const attn_state *st) {
    const __m512i k = _mm512_set1_epi32(key);
    return _mm512_mask_cmple_epi32_mask(_mm512_cmple_epi32_mask(st->lo, k), k, st->pos);
}

/* Asks for rows [i0, i1) of the step (keys or values) in L1, a few at a time so that
 * the requests do not wait for free fill buffers. The values are read after the
 * scores, 16 dimensions of every key at a time, and the keys 8 rows side by side:
 * without this the first read of each line waited for L2 (a quarter of a prompt's
 * attention time at depth 2048). */
INLINE void prefetch_rows(const float *base, const int64_t *row, int i0, int i1, int hd) {
    for (int i = i0; i < i1; i++)
        for (int d = 0; d < hd; d += 16)
            _mm_prefetch((const char *)(base + row[i] + d), _MM_HINT_T0);
}

/* Scores of keys [kb, kb + n) into e[i][lane], masked keys -inf; returns their max. */
static __m512 attn_scores(const cpu_attn_args *a, int kb, int n, const float *qt,
                          const attn_state *st, float *e) {
    const int hd = a->head_dim;
    __m512 mb = _mm512_set1_ps(-INFINITY);
    prefetch_rows(a->k, st->row, 0, n < 8 ? n : 8, hd);
    for (int i0 = 0; i0 < n; i0 += 8) {
        prefetch_rows(a->k, st->row, i0 + 8, n < i0 + 16 ? n : i0 + 16, hd);
        prefetch_rows(a->v, st->row, i0, n < i0 + 8 ? n : i0 + 8, hd);
        const float *kp[8];
        for (int i = 0; i < 8; i++)
            kp[i] = a->k + st->row[i0 + (i0 + i < n ? i : 0)];
        __m512 s[8];
        for (int i = 0; i < 8; i++)
            s[i] = _mm512_setzero_ps();
        for (int d = 0; d < hd; d++) {
            const __m512 qd = _mm512_load_ps(qt + d * LANES);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                s[i] = _mm512_fmadd_ps(qd, _mm512_set1_ps(kp[i][d]), s[i]);
        }
        for (int i = 0; i < 8 && i0 + i < n; i++) {
            const __m512 sc =
                _mm512_mask_blend_ps(visible(kb + i0 + i, st), _mm512_set1_ps(-INFINITY), s[i]);
            _mm512_store_ps(e + (i0 + i) * LANES, sc);
            mb = _mm512_max_ps(mb, sc);
        }
    }
    return mb;
}

/* ot[d] += sum_i e[i] * v_i[d] for 16 dimensions at a time, keys in order. */
static void attn_values(const cpu_attn_args *a, int n, const attn_state *st, const float *e,
                        float *ot) {
    const int hd = a->head_dim;
    for (int d0 = 0; d0 < hd; d0 += 16) {
        __m512 acc[16];
        for (int d = 0; d < 16; d++)
            acc[d] = _mm512_load_ps(ot + (d0 + d) * LANES);
        for (int i = 0; i < n; i++) {
            const float *v = a->v + st->row[i] + d0;
            const __m512 ei = _mm512_load_ps(e + i * LANES);
#pragma GCC unroll 16
            for (int d = 0; d < 16; d++)
                acc[d] = _mm512_fmadd_ps(ei, _mm512_set1_ps(v[d]), acc[d]);
        }
        for (int d = 0; d < 16; d++)
            _mm512_store_ps(ot + (d0 + d) * LANES, acc[d]);
    }
}

void cpu_attn_512(const cpu_attn_args *a, int kvh, int q0, int nq, float *scratch) {
    const int hd = a->head_dim, g = a->n_head / a->n_head_kv;
    float *qt = scratch, *ot = qt + hd * LANES, *e = ot + hd * LANES;
    /* qt[d][lane] = q[d] * scale, 16 dimensions of the 16 queries at a time */
    const float *qp[LANES];
    for (int j = 0; j < LANES; j++) {
        const int qi = q0 + (j < nq ? j : nq - 1), t = qi / g, h = kvh * g + qi % g;
        qp[j] = a->q + t * a->ldq + (int64_t)h * hd;
    }
    const __m512 scale = _mm512_set1_ps(a->scale);
    for (int d0 = 0; d0 < hd; d0 += LANES) {
        __m512 r[LANES];
#pragma GCC unroll 16
        for (int j = 0; j < LANES; j++)
            r[j] = _mm512_loadu_ps(qp[j] + d0);
        transpose_16x16(r);
#pragma GCC unroll 16
        for (int d = 0; d < LANES; d++)
            _mm512_store_ps(qt + (d0 + d) * LANES, _mm512_mul_ps(r[d], scale));
    }
    int lo[LANES], pos[LANES], begin;
    const int p_end = cpu_attn_tile_keys(a, q0, nq, LANES, lo, pos, &begin);
    float mx0[LANES], sum0[LANES];
    cpu_attn_lane_start(a, kvh, q0, nq, LANES, mx0, sum0); /* -FLT_MAX (not -inf) or sinks */
    attn_state st = {.lo = _mm512_loadu_si512(lo),
                     .pos = _mm512_loadu_si512(pos),
                     .mx = _mm512_loadu_ps(mx0),
                     .sum = _mm512_loadu_ps(sum0)};
    memset(ot, 0, (size_t)hd * LANES * sizeof(float));
    float *stage = scratch + cpu_attn_tile_scratch(LANES, hd);
    const cpu_attn_args *const a0 = a; /* a: the step's (cpu_attn_stage) */
    cpu_attn_args tmp;
    for (int kb = begin; kb < p_end; kb += CPU_ATTN_KEYS) {
        const int n = p_end - kb < CPU_ATTN_KEYS ? p_end - kb : CPU_ATTN_KEYS;
        a = cpu_attn_stage(a0, kvh, kb, n, &tmp, stage);
        cpu_attn_key_rows(a, kvh, kb, n, st.row);
        const __m512 mn = _mm512_max_ps(st.mx, attn_scores(a, kb, n, qt, &st, e));
        const __m512 alpha = exp512(_mm512_sub_ps(st.mx, mn));
        st.mx = mn;
        st.sum = _mm512_mul_ps(st.sum, alpha);
        for (int d = 0; d < hd; d++)
            _mm512_store_ps(ot + d * LANES, _mm512_mul_ps(_mm512_load_ps(ot + d * LANES), alpha));
        for (int i = 0; i < n; i++) {
            const __m512 ei = _mm512_maskz_mov_ps(
                visible(kb + i, &st), exp512(_mm512_sub_ps(_mm512_load_ps(e + i * LANES), mn)));
            st.sum = _mm512_add_ps(st.sum, ei);
            _mm512_store_ps(e + i * LANES, ei);
        }
        attn_values(a, n, &st, e, ot);
    }
    a = a0;
    if (a->ms) {
        float m_out[LANES], s_out[LANES];
        _mm512_storeu_ps(m_out, st.mx);
        _mm512_storeu_ps(s_out, st.sum);
        cpu_attn_save_ms(a, kvh, q0, nq, m_out, s_out);
    }
    float inv[LANES];
    _mm512_storeu_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), st.sum));
    float *op[LANES];
    for (int j = 0; j < nq; j++) {
        const int qi = q0 + j, t = qi / g, h = kvh * g + qi % g;
        op[j] = a->out + t * a->ldo + (int64_t)h * hd;
    }
    for (int d0 = 0; d0 < hd; d0 += LANES) { /* back to rows, 16 x 16 at a time */
        __m512 r[LANES];
#pragma GCC unroll 16
        for (int d = 0; d < LANES; d++)
            r[d] = _mm512_load_ps(ot + (d0 + d) * LANES);
        transpose_16x16(r);
        for (int j = 0; j < nq; j++)
            _mm512_storeu_ps(op[j] + d0, _mm512_mul_ps(r[j], _mm512_set1_ps(inv[j])));
    }
}

/* ---- keys and dimensions in the lanes (token generation) -------------------------------- */
/* Per tile of nq <= FEW queries, per query j: qs[j][d] the scaled query, ot[j][d] the
 * running sums of e * v, e[j][i] the step's scores, then their exponentials. */

typedef struct few_state {
    float mx[LANES];               /* running maximum score per query; from nq on, 0 */
    float sum[LANES];              /* running sum of exp(score - mx) */
    int lo[FEW], pos[FEW];         /* first and last visible key per query */
    __mmask16 vis[FEW][KEYS / 16]; /* the step's keys each query sees */
    int64_t row[KEYS];             /* the step's cache rows; from n on, row 0's */
    int64_t next[KEYS];            /* the rows the next step reads (prefetch_row) */
    int n_next;                    /* their count: the next step's keys, or at a range's
                                    * last step the hint's (cpu_attn_args.then_n) */
} few_state;

/* Asks for a key's or a value's row at cache offset off, into L2. At depth the caches
 * of all layers outgrow the L3, and a kv head's consecutive keys lie a whole cache row
 * (every kv head) apart, which the hardware prefetchers follow poorly: each step asks
 * for the rows of the next (few_state.next), the keys while it computes its scores
 * (few_scores), the values while it adds its values up (few_values), each at the pace
 * it reads its own, so that the requests do not outrun the misses a core can have in
 * flight. Measured on a Zen 4, bench-1b's attention (22 layers, 4 kv heads of 8
 * queries, 64 wide) at depth 2048 from DRAM on two threads, per token: every request
 * in one burst at a step's start, into L1, had stalled the kernel (perf put ~20% of its
 * samples on the prefetches); keys and values both during the values, 6.3-8.4 ms; as
 * now, 5.1-7.2 (four alternating runs each); and with the hint (cpu_attn_args.then_n)
 * for the next range's first step, which had started cold, 5.8-5.9 -> 5.1-5.3. Into L1
 * instead of L2, or two steps ahead, was slower each time. */
INLINE void prefetch_row(const float *base, int64_t off, int hd) {
    for (int d = 0; d < hd; d += 16)
        _mm_prefetch((const char *)(base + off + d), _MM_HINT_T1);
}

/* t[d] = element d0 + d of the 16 keys kp[i], key i in lane i. */
INLINE void keys_transposed(const float *const kp[16], int d0, __m512 t[16]) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        t[i] = _mm512_loadu_ps(kp[i] + d0);
    transpose_16x16(t);
}

/* Scores of the step's keys [i0, i0 + 16) (at positions kb + i0 ...) into e[j][i0 ...],
 * -inf where query j does not see the key: per (query, key) the FMA chain over d from
 * 0 of attn_scores, with the key in the lane instead of the query. */
INLINE void few_scores(const cpu_attn_args *a, few_state *st, int kb, int i0, int n,
                       const float *qs, float *e, const int nq) {
    const int hd = a->head_dim;
    const float *kp[16];
    for (int i = 0; i < 16; i++)
        kp[i] = a->k + st->row[i0 + i];
    __m512 s[FEW];
#pragma GCC unroll 8
    for (int j = 0; j < nq; j++)
        s[j] = _mm512_setzero_ps();
    const int nit = hd / 16;
    for (int it = 0; it < nit; it++) {
        const int d0 = 16 * it;
        /* the next step's keys [i0, i0 + 16) (the last block: all from i0), spread
         * over the transposes */
        const int w = i0 + 16 < n ? 16 : KEYS - i0;
        for (int i = i0 + w * it / nit; i < i0 + w * (it + 1) / nit && i < st->n_next; i++)
            prefetch_row(a->k, st->next[i], hd);
        __m512 t[16];
        keys_transposed(kp, d0, t);
#pragma GCC unroll 16
        for (int d = 0; d < 16; d++)
#pragma GCC unroll 8
            for (int j = 0; j < nq; j++)
                s[j] = _mm512_fmadd_ps(_mm512_set1_ps(qs[j * hd + d0 + d]), t[d], s[j]);
    }
    const __m512i key = _mm512_add_epi32(
        _mm512_set1_epi32(kb + i0),
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
#pragma GCC unroll 8
    for (int j = 0; j < nq; j++) {
        const __mmask16 m = _mm512_mask_cmple_epi32_mask(
            _mm512_cmple_epi32_mask(_mm512_set1_epi32(st->lo[j]), key), key,
            _mm512_set1_epi32(st->pos[j]));
        st->vis[j][i0 / 16] = m;
        _mm512_store_ps(e + j * KEYS + i0, _mm512_mask_blend_ps(m, _mm512_set1_ps(-INFINITY), s[j]));
    }
}

/* The new running maximum of a query from mx and its step's scores e[0 .. n) (from n
 * to 16 * nb: -inf), as attn_512 takes it: m = vmaxps(m, e[i]) key by key from -inf,
 * then vmaxps(mx, m), where vmaxps(x, y) = x > y ? x : y. Without NaNs a tree of maxima
 * gives the same number; only a zero's sign may differ, and that changes no result:
 * x - 0 is x whatever the zero's sign for any other x, and exp512 gives 1 for both
 * zeros. With a NaN the order decides (a NaN operand yields the second), so then the
 * keys are taken one by one, in attn_512's order. */
INLINE float few_max(float mx, const float *e, int n, int nb) {
    __m512 m = _mm512_load_ps(e);
    __mmask16 nan = _mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q);
    if (nb == 2) {
        const __m512 m1 = _mm512_load_ps(e + 16);
        nan |= _mm512_cmp_ps_mask(m1, m1, _CMP_UNORD_Q);
        m = _mm512_max_ps(m, m1);
    }
    float mb = -INFINITY;
    if (!nan) {
        mb = _mm512_reduce_max_ps(m);
    } else {
        for (int i = 0; i < n; i++)
            mb = mb > e[i] ? mb : e[i];
    }
    return mx > mb ? mx : mb;
}

/* ot[j] = ot[j] * alpha[j], then + e[j][i] * v_i key by key, over the 16-float chunks
 * [c0, c0 + nc) of the dimensions: attn_values with the dimensions in the lanes, each
 * chunk of v loaded once for all the tile's queries. */
INLINE void few_values(const cpu_attn_args *a, const few_state *st, int n, const float *e,
                       const float *alpha, float *ot, const int nq, int c0, const int nc) {
    const int hd = a->head_dim;
    __m512 acc[FEW][4];
#pragma GCC unroll 8
    for (int j = 0; j < nq; j++)
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++)
            acc[j][c] = _mm512_mul_ps(_mm512_load_ps(ot + j * hd + (c0 + c) * 16),
                                      _mm512_set1_ps(alpha[j]));
    for (int i = 0; i < n; i++) {
        if (c0 == 0 && i < st->n_next) /* the next step's values: the first chunks' call */
            prefetch_row(a->v, st->next[i], a->head_dim);
        const float *v = a->v + st->row[i] + c0 * 16;
        __m512 vv[4];
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++)
            vv[c] = _mm512_loadu_ps(v + c * 16);
#pragma GCC unroll 8
        for (int j = 0; j < nq; j++) {
            const __m512 ei = _mm512_set1_ps(e[j * KEYS + i]);
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++)
                acc[j][c] = _mm512_fmadd_ps(ei, vv[c], acc[j][c]);
        }
    }
    for (int i = n; c0 == 0 && i < st->n_next; i++) /* a short last step: the rest */
        prefetch_row(a->v, st->next[i], a->head_dim);
#pragma GCC unroll 8
    for (int j = 0; j < nq; j++)
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++)
            _mm512_store_ps(ot + j * hd + (c0 + c) * 16, acc[j][c]);
}

/* One step of keys [kb, kb + n) for the tile: the steps of attn_512, query by query. */
INLINE void few_step(const cpu_attn_args *a, int kvh, few_state *st, int kb, int n,
                     const float *qs, float *ot, float *e, const int nq) {
    cpu_attn_key_rows(a, kvh, kb, n, st->row);
    for (int i = n; i < KEYS; i++) /* transposes read 16 keys: any row will do */
        st->row[i] = st->row[0];
    const int nb = (n + 15) / 16;
    st->n_next = cpu_attn_next_rows(a, kvh, kb, st->next);
    for (int b = 0; b < nb; b++)
        few_scores(a, st, kb, 16 * b, n, qs, e, nq);
    float mn[LANES] = {0}, alpha[LANES];
    for (int j = 0; j < nq; j++)
        mn[j] = few_max(st->mx[j], e + j * KEYS, n, nb);
    const __m512 mnv = _mm512_loadu_ps(mn);
    const __m512 al = exp512(_mm512_sub_ps(_mm512_loadu_ps(st->mx), mnv));
    _mm512_storeu_ps(alpha, al);
    _mm512_storeu_ps(st->mx, mnv);
    _mm512_storeu_ps(st->sum, _mm512_mul_ps(_mm512_loadu_ps(st->sum), al));
#pragma GCC unroll 8
    for (int j = 0; j < nq; j++)
        for (int b = 0; b < nb; b++) {
            float *eb = e + j * KEYS + 16 * b;
            const __m512 x = _mm512_sub_ps(_mm512_load_ps(eb), _mm512_set1_ps(mn[j]));
            _mm512_store_ps(eb, _mm512_maskz_mov_ps(st->vis[j][b], exp512(x)));
        }
    /* the keys in order, as attn_512 adds them; the queries side by side, so that their
     * chains of dependent adds overlap */
    float sum[FEW];
#pragma GCC unroll 8
    for (int j = 0; j < nq; j++)
        sum[j] = st->sum[j];
    for (int i = 0; i < n; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nq; j++)
            sum[j] += e[j * KEYS + i];
#pragma GCC unroll 8
    for (int j = 0; j < nq; j++)
        st->sum[j] = sum[j];
    /* as many dimensions at a time as the registers hold: nq x nc sums + nc of v */
    const int nch = a->head_dim / 16, wide = nq <= 6 ? 4 : 2;
    int c0 = 0;
    for (; c0 + wide <= nch; c0 += wide)
        few_values(a, st, n, e, alpha, ot, nq, c0, wide);
    for (; c0 < nch; c0++)
        few_values(a, st, n, e, alpha, ot, nq, c0, 1);
}

INLINE void few_tile(const cpu_attn_args *a, int kvh, int q0, float *scratch, const int nq) {
    const int hd = a->head_dim, g = a->n_head / a->n_head_kv;
    float *qs = scratch, *ot = qs + nq * hd, *e = ot + nq * hd;
    for (int j = 0; j < nq; j++) {
        const int qi = q0 + j, t = qi / g, h = kvh * g + qi % g;
        const float *q = a->q + t * a->ldq + (int64_t)h * hd;
        for (int d = 0; d < hd; d++)
            qs[j * hd + d] = q[d] * a->scale;
    }
    few_state st;
    int begin;
    const int p_end = cpu_attn_tile_keys(a, q0, nq, nq, st.lo, st.pos, &begin);
    float mx0[FEW], sum0[FEW];
    cpu_attn_lane_start(a, kvh, q0, nq, nq, mx0, sum0); /* -FLT_MAX (not -inf) or sinks */
    for (int j = 0; j < LANES; j++) { /* lanes from nq on: exp(0 - 0), harmless */
        st.mx[j] = j < nq ? mx0[j] : 0.0f;
        st.sum[j] = j < nq ? sum0[j] : 0.0f;
    }
    memset(ot, 0, (size_t)nq * hd * sizeof(float));
    float *stage = scratch + cpu_attn_tile_scratch(FEW, hd);
    for (int kb = begin; kb < p_end; kb += KEYS) {
        const int n = p_end - kb < KEYS ? p_end - kb : KEYS;
        cpu_attn_args tmp;
        few_step(cpu_attn_stage(a, kvh, kb, n, &tmp, stage), kvh, &st, kb, n, qs, ot, e, nq);
    }
    if (a->ms) cpu_attn_save_ms(a, kvh, q0, nq, st.mx, st.sum);
    float inv[LANES];
    _mm512_storeu_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_loadu_ps(st.sum)));
    for (int j = 0; j < nq; j++) {
        const int qi = q0 + j, t = qi / g, h = kvh * g + qi % g;
        float *o = a->out + t * a->ldo + (int64_t)h * hd;
        const __m512 iv = _mm512_set1_ps(inv[j]);
        for (int d = 0; d < hd; d += 16)
            _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_load_ps(ot + j * hd + d), iv));
    }
}

/* Tiles of any size the kernel takes, with nq a constant in each (the sums in registers). */
void cpu_attn_512_few(const cpu_attn_args *a, int kvh, int q0, int nq, float *scratch) {
    AL_ASSERT(nq >= 1 && nq <= FEW);
    switch (nq) {
    case 1: few_tile(a, kvh, q0, scratch, 1); break;
    case 2: few_tile(a, kvh, q0, scratch, 2); break;
    case 3: few_tile(a, kvh, q0, scratch, 3); break;
    case 4: few_tile(a, kvh, q0, scratch, 4); break;
    case 5: few_tile(a, kvh, q0, scratch, 5); break;
    case 6: few_tile(a, kvh, q0, scratch, 6); break;
    case 7: few_tile(a, kvh, q0, scratch, 7); break;
    default: few_tile(a, kvh, q0, scratch, 8); break;
    }
}

/* ---- a typed cache's rows (cpu_attn_args.kv_rows) --------------------------------------- */

/* The f16 of a block's scale, as quant.c's load_f16 gives it (exact either way). */
INLINE float block_scale(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
}

/* quant_dequantize's values, 16 at a time: a q8_0 block is an f16 scale and 32 int8,
 * q4_0 an f16 scale and 16 bytes whose low nibbles are elements 0-15 and high nibbles
 * 16-31, each (nibble - 8); a value is the integer, converted exactly, times the scale:
 * one rounding, as in the reference. */
void cpu_kv_rows_512(uint32_t type, const uint8_t *src, float *dst, int n) {
    switch (type) {
    case AL_TYPE_F16:
        for (int i = 0; i < n; i += 16)
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + 2 * i))));
        return;
    case AL_TYPE_Q8_0:
        for (int i = 0; i < n; i += 32, src += 34) {
            const __m512 d = _mm512_set1_ps(block_scale(src));
            for (int h = 0; h < 2; h++) {
                const __m128i q = _mm_loadu_si128((const __m128i *)(src + 2 + 16 * h));
                _mm512_storeu_ps(dst + i + 16 * h,
                                 _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d));
            }
        }
        return;
    case AL_TYPE_Q4_0:
        for (int i = 0; i < n; i += 32, src += 18) {
            const __m512 d = _mm512_set1_ps(block_scale(src));
            const __m128i q = _mm_loadu_si128((const __m128i *)(src + 2)), m = _mm_set1_epi8(0x0F);
            const __m128i nib[2] = {_mm_and_si128(q, m), _mm_and_si128(_mm_srli_epi16(q, 4), m)};
            for (int h = 0; h < 2; h++) {
                const __m512i v = _mm512_sub_epi32(_mm512_cvtepu8_epi32(nib[h]), _mm512_set1_epi32(8));
                _mm512_storeu_ps(dst + i + 16 * h, _mm512_mul_ps(_mm512_cvtepi32_ps(v), d));
            }
        }
        return;
    default: cpu_kv_rows_ref(type, src, dst, n); return;
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
