/* attn_avx2.c: the attention kernel for AVX2 (ops.h cpu_attn_fn).
 *
 * Compiled for AVX2 by the target pragma below, whatever the build's flags; cpu.c picks
 * cpu_kernels_avx2, and with it this kernel, only when CPUID says the CPU has AVX2,
 * FMA and F16C.
 *
 * Tiles of 8 queries of one kv head in the lanes: q.k and p.v are broadcast-FMAs with
 * no horizontal sums, for a prompt's tiles and a generated token's G queries alike.
 */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "avx2.h"
#include "ops.h"

/* LANES queries per tile; scores SCORE_KEYS keys at a time; values for VALUE_Q
 * queries by VALUE_B vectors of dimensions (values_tile) */
enum { LANES = 8, SCORE_KEYS = 8, VALUE_Q = 3, VALUE_B = 4 };

/* Lanes with lo <= key <= pos see the key: a mask of all-ones lanes. */
static inline __attribute__((always_inline)) __m256 visible(int key, __m256i lo, __m256i pos) {
    const __m256i k = _mm256_set1_epi32(key);
    const __m256i hidden = _mm256_or_si256(_mm256_cmpgt_epi32(k, pos), _mm256_cmpgt_epi32(lo, k));
    return _mm256_castsi256_ps(_mm256_xor_si256(hidden, _mm256_set1_epi32(-1)));
}

/* ---- attention --------------------------------------------------------------------------- */
/* Steps and masking as ops.h (cpu_attn_fn) describes. */

typedef struct attn_state {
    __m256i lo, pos; /* first and last visible key per lane */
    int64_t row[CPU_ATTN_KEYS]; /* the step's cache rows (cpu_attn_key_rows) */
    int64_t next[CPU_ATTN_KEYS]; /* the rows it asks the caches for (cpu_attn_next_rows) */
    int n_next;
} attn_state;

/* Two dimensions of 8 keys at once: the lanes of the pair's key p of query j are 2 j +
 * p (qt's layout, cpu_attn_avx2), and each key's pair arrives in one 8-byte broadcast. A
 * query's score is the sum of its even dimensions plus the sum of its odd ones, on
 * every tile alike. One half of a tile (4 queries) per pass: where a token's queries
 * are 4 or fewer (bench-1b and Llama 3 have 4 per kv head, SmolLM2 3), the lanes that
 * held a query per dimension had been half idle. */
static void scores_half(const cpu_attn_args *a, int i0, int n, const float *qh,
                        const attn_state *st, __m128 out[SCORE_KEYS]) {
    const int hd = a->head_dim;
    const float *kp[SCORE_KEYS];
    for (int i = 0; i < SCORE_KEYS; i++)
        kp[i] = a->k + st->row[i0 + (i0 + i < n ? i : 0)];
    __m256 s[SCORE_KEYS];
    for (int i = 0; i < SCORE_KEYS; i++)
        s[i] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 2) {
        const __m256 qd = _mm256_load_ps(qh + d * 4);
#pragma GCC unroll 8
        for (int i = 0; i < SCORE_KEYS; i++) {
            int64_t pair;
            memcpy(&pair, kp[i] + d, sizeof pair);
            const __m256 kd = _mm256_castsi256_ps(_mm256_set1_epi64x(pair));
            s[i] = _mm256_fmadd_ps(qd, kd, s[i]);
        }
    }
    for (int i = 0; i < SCORE_KEYS; i++) {
        /* (q0 q1 q0 q1 | q2 q3 q2 q3), each the sum of its two lanes */
        const __m256 h = _mm256_hadd_ps(s[i], s[i]);
        out[i] = _mm_shuffle_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1),
                                _MM_SHUFFLE(1, 0, 1, 0));
    }
}

/* The next step's rows (cpu_attn_next_rows), asked for in the caches themselves: in
 * the caches a kv head's rows lie a row of every kv head apart, a stride the hardware
 * prefetchers did not follow: the kernel alone over 2048 positions of bench-1b's shape,
 * from DRAM on one Zen 2 core, took 22.8-23.0 ms per token without prefetches and
 * 19.6-19.8 with them into L1 (into L2: 19.8-20.2; two steps ahead: 20.0-20.8). Into L2
 * they go: on a Zen 4 (16 layers, two threads) into L1 took 12.2-20.4 ms, into L2
 * 9.4-10.9 (six alternating runs), as for the AVX-512 kernel, whose requests into L1 had
 * stalled it. The keys are asked for while the scores are computed, the values while
 * the values are added up: at the pace each is read (attn_avx512.c). This asks for rows
 * next[i0 .. i1) of base (keys or values) into L2. */
static inline __attribute__((always_inline)) void prefetch_next(const cpu_attn_args *a,
                                                                const float *base,
                                                                const attn_state *st, int i0,
                                                                int i1) {
    for (int i = i0; i < i1 && i < st->n_next; i++)
        for (int l = 0; l < a->head_dim * (int)sizeof(float); l += 64)
            _mm_prefetch((const char *)(base + st->next[i]) + l, _MM_HINT_T1);
}

/* Scores of keys [kb, kb + n) into e[i][lane], masked keys -inf; returns their max.
 * With nq <= 4 the upper lanes repeat the lower ones. */
static __m256 attn_scores(const cpu_attn_args *a, int kb, int n, int nq, const float *qt,
                          const attn_state *st, float *e) {
    const int hd = a->head_dim;
    __m256 mb = _mm256_set1_ps(-INFINITY);
    for (int i0 = 0; i0 < n; i0 += SCORE_KEYS) {
        /* the next step's keys a group at a time; the last group asks for the rest */
        prefetch_next(a, a->k, st, i0, i0 + SCORE_KEYS < n ? i0 + SCORE_KEYS : CPU_ATTN_KEYS);
        __m128 lo[SCORE_KEYS], hi[SCORE_KEYS];
        scores_half(a, i0, n, qt, st, lo);
        if (nq > 4) scores_half(a, i0, n, qt + 4 * hd, st, hi);
        for (int i = 0; i < SCORE_KEYS && i0 + i < n; i++) {
            const __m256 si = _mm256_set_m128(nq > 4 ? hi[i] : lo[i], lo[i]);
            const __m256 sc = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), si,
                                               visible(kb + i0 + i, st->lo, st->pos));
            _mm256_store_ps(e + (i0 + i) * LANES, sc);
            mb = _mm256_max_ps(mb, sc);
        }
    }
    return mb;
}

/* Query j's output row ot + j hd, dimensions [d0, d0 + 8 nb), for the queries [j0, j0 +
 * nj): += sum_i e[i][j] v_i, keys in order. Each value vector is loaded once for nj
 * queries and each weight broadcast once for nb vectors: 12 accumulators, 7 loads per
 * 12 FMAs, where queries in the lanes (a broadcast per dimension) took 9 per 8 and
 * waited on their FMAs' latency. Each output is the same sum as that way, in the same
 * order: the same bits. */
static inline __attribute__((always_inline)) void values_tile(const cpu_attn_args *a, int n,
                                                              const attn_state *st,
                                                              const float *e, float *ot,
                                                              int j0, const int nj, int d0,
                                                              const int nb) {
    const int hd = a->head_dim;
    __m256 acc[VALUE_Q][VALUE_B];
#pragma GCC unroll 4
    for (int j = 0; j < nj; j++)
#pragma GCC unroll 4
        for (int b = 0; b < nb; b++)
            acc[j][b] = _mm256_load_ps(ot + (j0 + j) * hd + d0 + 8 * b);
    const bool ask = j0 == 0 && d0 == 0; /* the first call of a step asks for the values */
    for (int i = 0; i < n; i++) {
        if (ask) prefetch_next(a, a->v, st, i, i + 1);
        const float *v = a->v + st->row[i] + d0;
        __m256 vb[VALUE_B];
#pragma GCC unroll 4
        for (int b = 0; b < nb; b++)
            vb[b] = _mm256_loadu_ps(v + 8 * b);
#pragma GCC unroll 4
        for (int j = 0; j < nj; j++) {
            const __m256 ej = _mm256_set1_ps(e[i * LANES + j0 + j]);
#pragma GCC unroll 4
            for (int b = 0; b < nb; b++)
                acc[j][b] = _mm256_fmadd_ps(ej, vb[b], acc[j][b]);
        }
    }
    if (ask) prefetch_next(a, a->v, st, n, CPU_ATTN_KEYS);
#pragma GCC unroll 4
    for (int j = 0; j < nj; j++)
#pragma GCC unroll 4
        for (int b = 0; b < nb; b++)
            _mm256_store_ps(ot + (j0 + j) * hd + d0 + 8 * b, acc[j][b]);
}

/* ot[j] += sum_i e[i][j] v_i for the tile's nq queries (the lanes beyond repeat the
 * last query, and no one reads them). */
static void attn_values(const cpu_attn_args *a, int n, int nq, const attn_state *st,
                        const float *e, float *ot) {
    const int hd = a->head_dim;
    for (int j0 = 0; j0 < nq; j0 += VALUE_Q) {
        const int nj = nq - j0 < VALUE_Q ? nq - j0 : VALUE_Q;
        int d0 = 0;
        for (; d0 + 8 * VALUE_B <= hd; d0 += 8 * VALUE_B) {
            if (nj == 3) values_tile(a, n, st, e, ot, j0, 3, d0, VALUE_B);
            else if (nj == 2) values_tile(a, n, st, e, ot, j0, 2, d0, VALUE_B);
            else values_tile(a, n, st, e, ot, j0, 1, d0, VALUE_B);
        }
        for (; d0 < hd; d0 += 8) {
            if (nj == 3) values_tile(a, n, st, e, ot, j0, 3, d0, 1);
            else if (nj == 2) values_tile(a, n, st, e, ot, j0, 2, d0, 1);
            else values_tile(a, n, st, e, ot, j0, 1, d0, 1);
        }
    }
}

void cpu_attn_avx2(const cpu_attn_args *a, int kvh, int q0, int nq, float *scratch) {
    const int hd = a->head_dim, g = a->n_head / a->n_head_kv;
    float *qt = scratch, *ot = qt + hd * LANES, *e = ot + hd * LANES;
    /* half j / 4 of the tile, pair d / 2, lane 2 (j % 4) + d % 2 (scores_half) */
    for (int j = 0; j < LANES; j++) {
        const int qi = q0 + (j < nq ? j : nq - 1), t = qi / g, h = kvh * g + qi % g;
        const float *q = a->q + t * a->ldq + (int64_t)h * hd;
        float *qh = qt + j / 4 * 4 * hd + 2 * (j % 4);
        for (int d = 0; d < hd; d++)
            qh[d / 2 * LANES + d % 2] = q[d] * a->scale;
    }
    int lo[LANES], pos[LANES], begin;
    const int p_end = cpu_attn_tile_keys(a, q0, nq, LANES, lo, pos, &begin);
    attn_state st = {.lo = _mm256_loadu_si256((const __m256i *)lo),
                     .pos = _mm256_loadu_si256((const __m256i *)pos)};
    float mx0[LANES], sum0[LANES];
    cpu_attn_lane_start(a, kvh, q0, nq, LANES, mx0, sum0); /* -FLT_MAX (not -inf) or sinks */
    __m256 mx = _mm256_loadu_ps(mx0), sum = _mm256_loadu_ps(sum0);
    memset(ot, 0, (size_t)hd * LANES * sizeof(float));
    float *stage = scratch + cpu_attn_tile_scratch(LANES, hd);
    const cpu_attn_args *const a0 = a; /* a: the step's (cpu_attn_stage) */
    cpu_attn_args tmp;
    for (int kb = begin; kb < p_end; kb += CPU_ATTN_KEYS) {
        const int n = p_end - kb < CPU_ATTN_KEYS ? p_end - kb : CPU_ATTN_KEYS;
        a = cpu_attn_stage(a0, kvh, kb, n, &tmp, stage);
        cpu_attn_key_rows(a, kvh, kb, n, st.row);
        st.n_next = cpu_attn_next_rows(a, kvh, kb, st.next);
        const __m256 mn = _mm256_max_ps(mx, attn_scores(a, kb, n, nq, qt, &st, e));
        const __m256 alpha = exp256(_mm256_sub_ps(mx, mn));
        mx = mn;
        sum = _mm256_mul_ps(sum, alpha);
        float al[LANES];
        _mm256_storeu_ps(al, alpha);
        for (int j = 0; j < nq; j++)
            for (int d = 0; d < hd; d += 8) {
                float *o = ot + j * hd + d;
                _mm256_store_ps(o, _mm256_mul_ps(_mm256_load_ps(o), _mm256_set1_ps(al[j])));
            }
        for (int i = 0; i < n; i++) {
            const __m256 ei =
                _mm256_and_ps(visible(kb + i, st.lo, st.pos),
                              exp256(_mm256_sub_ps(_mm256_load_ps(e + i * LANES), mn)));
            sum = _mm256_add_ps(sum, ei);
            _mm256_store_ps(e + i * LANES, ei);
        }
        attn_values(a, n, nq, &st, e, ot);
    }
    a = a0;
    if (a->ms) {
        float m_out[LANES], s_out[LANES];
        _mm256_storeu_ps(m_out, mx);
        _mm256_storeu_ps(s_out, sum);
        cpu_attn_save_ms(a, kvh, q0, nq, m_out, s_out);
    }
    float inv[LANES];
    _mm256_storeu_ps(inv, _mm256_div_ps(_mm256_set1_ps(1.0f), sum));
    for (int j = 0; j < nq; j++) {
        const int qi = q0 + j, t = qi / g, h = kvh * g + qi % g;
        float *o = a->out + t * a->ldo + (int64_t)h * hd;
        for (int d = 0; d < hd; d++)
            o[d] = ot[j * hd + d] * inv[j];
    }
}

/* ---- a typed cache's rows (cpu_attn_args.kv_rows) --------------------------------------- */

static inline __attribute__((always_inline)) float block_scale(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
}

/* cpu_kv_rows_512 (attn_avx512.c) 8 values at a time: the same values. */
void cpu_kv_rows_avx2(uint32_t type, const uint8_t *src, float *dst, int n) {
    switch (type) {
    case AL_TYPE_F16:
        for (int i = 0; i < n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 2 * i))));
        return;
    case AL_TYPE_Q8_0:
        for (int i = 0; i < n; i += 32, src += 34) {
            const __m256 d = _mm256_set1_ps(block_scale(src));
            for (int h = 0; h < 4; h++) {
                const __m128i q = _mm_loadl_epi64((const __m128i *)(src + 2 + 8 * h));
                _mm256_storeu_ps(dst + i + 8 * h,
                                 _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
            }
        }
        return;
    case AL_TYPE_Q4_0:
        for (int i = 0; i < n; i += 32, src += 18) {
            const __m256 d = _mm256_set1_ps(block_scale(src));
            const __m128i q = _mm_loadu_si128((const __m128i *)(src + 2)), m = _mm_set1_epi8(0x0F);
            const __m128i nib[2] = {_mm_and_si128(q, m), _mm_and_si128(_mm_srli_epi16(q, 4), m)};
            for (int h = 0; h < 4; h++) {
                const __m128i b = h & 1 ? _mm_srli_si128(nib[h / 2], 8) : nib[h / 2];
                const __m256i v = _mm256_sub_epi32(_mm256_cvtepu8_epi32(b), _mm256_set1_epi32(8));
                _mm256_storeu_ps(dst + i + 8 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(v), d));
            }
        }
        return;
    default: cpu_kv_rows_ref(type, src, dst, n); return;
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
