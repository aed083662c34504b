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

enum { LANES = 8 };

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
} attn_state;

/* Scores of keys [kb, kb + n) into e[i][lane], masked keys -inf; returns their max. */
static __m256 attn_scores(const cpu_attn_args *a, int kb, int n, const float *qt,
                          const attn_state *st, float *e) {
    const int hd = a->head_dim;
    __m256 mb = _mm256_set1_ps(-INFINITY);
    for (int i0 = 0; i0 < n; i0 += 4) {
        const float *kp[4];
        for (int i = 0; i < 4; i++)
            kp[i] = a->k + st->row[i0 + (i0 + i < n ? i : 0)];
        __m256 s[4];
        for (int i = 0; i < 4; i++)
            s[i] = _mm256_setzero_ps();
        for (int d = 0; d < hd; d++) {
            const __m256 qd = _mm256_load_ps(qt + d * LANES);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                s[i] = _mm256_fmadd_ps(qd, _mm256_set1_ps(kp[i][d]), s[i]);
        }
        for (int i = 0; i < 4 && i0 + i < n; i++) {
            const __m256 sc = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s[i],
                                               visible(kb + i0 + i, st->lo, st->pos));
            _mm256_store_ps(e + (i0 + i) * LANES, sc);
            mb = _mm256_max_ps(mb, sc);
        }
    }
    return mb;
}

/* ot[d] += sum_i e[i] * v_i[d] for 8 dimensions at a time, keys in order. */
static void attn_values(const cpu_attn_args *a, int n, const attn_state *st, const float *e,
                        float *ot) {
    const int hd = a->head_dim;
    for (int d0 = 0; d0 < hd; d0 += 8) {
        __m256 acc[8];
        for (int d = 0; d < 8; d++)
            acc[d] = _mm256_load_ps(ot + (d0 + d) * LANES);
        for (int i = 0; i < n; i++) {
            const float *v = a->v + st->row[i] + d0;
            const __m256 ei = _mm256_load_ps(e + i * LANES);
#pragma GCC unroll 8
            for (int d = 0; d < 8; d++)
                acc[d] = _mm256_fmadd_ps(ei, _mm256_set1_ps(v[d]), acc[d]);
        }
        for (int d = 0; d < 8; d++)
            _mm256_store_ps(ot + (d0 + d) * LANES, acc[d]);
    }
}

void cpu_attn_avx2(const cpu_attn_args *a, int kvh, int q0, int nq, float *scratch) {
    const int hd = a->head_dim, g = a->n_head / a->n_head_kv;
    float *qt = scratch, *ot = qt + hd * LANES, *e = ot + hd * LANES;
    for (int j = 0; j < LANES; j++) {
        const int qi = q0 + (j < nq ? j : nq - 1), t = qi / g, h = kvh * g + qi % g;
        const float *q = a->q + t * a->ldq + (int64_t)h * hd;
        for (int d = 0; d < hd; d++)
            qt[d * LANES + j] = q[d] * a->scale;
    }
    int lo[LANES], pos[LANES], begin;
    const int p_end = cpu_attn_tile_keys(a, q0, nq, LANES, lo, pos, &begin);
    attn_state st = {.lo = _mm256_loadu_si256((const __m256i *)lo),
                     .pos = _mm256_loadu_si256((const __m256i *)pos)};
    float mx0[LANES], sum0[LANES];
    cpu_attn_lane_start(a, kvh, q0, nq, LANES, mx0, sum0); /* -FLT_MAX (not -inf) or sinks */
    __m256 mx = _mm256_loadu_ps(mx0), sum = _mm256_loadu_ps(sum0);
    memset(ot, 0, (size_t)hd * LANES * sizeof(float));
    for (int kb = begin; kb < p_end; kb += CPU_ATTN_KEYS) {
        const int n = p_end - kb < CPU_ATTN_KEYS ? p_end - kb : CPU_ATTN_KEYS;
        cpu_attn_key_rows(a, kvh, kb, n, st.row);
        const __m256 mn = _mm256_max_ps(mx, attn_scores(a, kb, n, qt, &st, e));
        const __m256 alpha = exp256(_mm256_sub_ps(mx, mn));
        mx = mn;
        sum = _mm256_mul_ps(sum, alpha);
        for (int d = 0; d < hd; d++)
            _mm256_store_ps(ot + d * LANES, _mm256_mul_ps(_mm256_load_ps(ot + d * LANES), alpha));
        for (int i = 0; i < n; i++) {
            const __m256 ei =
                _mm256_and_ps(visible(kb + i, st.lo, st.pos),
                              exp256(_mm256_sub_ps(_mm256_load_ps(e + i * LANES), mn)));
            sum = _mm256_add_ps(sum, ei);
            _mm256_store_ps(e + i * LANES, ei);
        }
        attn_values(a, n, &st, e, ot);
    }
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
            o[d] = ot[d * LANES + j] * inv[j];
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
