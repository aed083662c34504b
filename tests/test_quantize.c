/* test_quantize.c: the quantizers and schemes of quantize.h and the writer of
 * gguf_write.h.
 *
 * Evidence, from weakest to strongest:
 *   1. Round trips: rows of several distributions and awkward lengths, quantized and
 *      dequantized with quant.c, land within a per-type error bound; zeros stay zero;
 *      the result does not depend on the thread count.
 *   2. The SIMD-friendly K-quant searches (one sub-block per lane) agree byte for byte
 *      with plain scalar transcriptions of ggml's make_qkx2_quants / make_qx_quants
 *      kept here, also on flat, zero, one-sided and spiky sub-blocks.
 *   3. Bit-exactness with llama.cpp: ../shared/models/ref holds one random model as F16
 *      and as llama-quantize wrote it in Q8_0, Q4_0, Q4_1, Q4_K_M, Q5_K_M and Q6_K. Each
 *      tensor quantized here from the F16 file must equal llama.cpp's bytes, the scheme
 *      must pick llama.cpp's type for every tensor, and quant_model() must reproduce
 *      each file whole.
 *   4. The writer: every value type, string arrays with odd bytes, custom alignment,
 *      read back with gguf_open; a byte-identical copy of a reference file; failures
 *      that remove the partial file; out-of-memory at every allocation.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/gguf_write.h"
#include "format/quant.h"
#include "format/quantize.h"
#include "test.h"
#include "util.h"

#if defined(__clang__) /* the scalar searches below must round as ggml's do: no FMA */
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- helpers ------------------------------------------------------------------------ */

static uint32_t rng_next(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static float rng_uniform(uint32_t *s) { return (float)(rng_next(s) >> 8) / 16777216.0f; }

/* Roughly normal: a sum of four uniforms, scaled to standard deviation std. */
static float rng_normal(uint32_t *s, float std) {
    float u = rng_uniform(s) + rng_uniform(s) + rng_uniform(s) + rng_uniform(s) - 2.0f;
    return u * std * 1.7320508f;
}

static char g_tmp[256];

/* A path for a temporary file of this process. */
static const char *tmp_path(const char *suffix) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/test_quantize.%d.%s", (int)getpid(), suffix);
    return g_tmp;
}

static bool file_exists(const char *path) { return access(path, F_OK) == 0; }

/* Whole-file comparison; false if either cannot be read. */
static bool files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) eq = false;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

static const char *ref_path(const char *name, char *buf, size_t size) {
    snprintf(buf, size, "%s/models/ref/%s.gguf", test_shared_dir(), name);
    return buf;
}

/* ---- 1. round trips ------------------------------------------------------------------ */

typedef struct type_bound {
    uint32_t type;
    double max_nmse; /* on normal-like data */
} type_bound;

/* Bounds 1.5-2x above the worst the formats reach on the distributions below (the
 * outliers are the worst case of the symmetric types). A wrong layout or rounding
 * rule gives an NMSE near 1. */
static const type_bound g_bounds[] = {
    {AL_TYPE_F16, 3e-7},  {AL_TYPE_BF16, 2e-5}, {AL_TYPE_Q8_0, 2.5e-4}, {AL_TYPE_Q6_K, 2e-3},
    {AL_TYPE_Q5_1, 5e-3}, {AL_TYPE_Q5_0, 2e-2}, {AL_TYPE_Q5_K, 5e-3},   {AL_TYPE_Q4_1, 2.5e-2},
    {AL_TYPE_Q4_0, 5e-2}, {AL_TYPE_Q4_K, 2e-2},
};

/* Fills x[n] with distribution kind: 0 normal, 1 uniform [-1, 1], 2 normal with
 * outliers, 3 all positive, 4 all negative. */
static void fill_row(float *x, int64_t n, int kind, uint32_t *s) {
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: x[i] = rng_normal(s, 0.02f); break;
        case 1: x[i] = 2 * rng_uniform(s) - 1; break;
        case 2: x[i] = rng_normal(s, 0.02f) * (i % 37 == 5 ? 20.0f : 1.0f); break;
        case 3: x[i] = 0.5f + rng_uniform(s); break;
        default: x[i] = -0.5f - rng_uniform(s); break;
        }
    }
}

static void test_round_trip(void) {
    enum { MAX_N = 2816 };
    static float x[MAX_N], y[MAX_N];
    static uint8_t q[MAX_N * 4];
    uint32_t s = 12345;
    for (size_t t = 0; t < sizeof g_bounds / sizeof *g_bounds; t++) {
        const uint32_t type = g_bounds[t].type;
        const uint32_t bs = quant_get_traits(type)->block_size;
        const int64_t lens[] = {bs, 3 * bs, bs == 1 ? 33 : bs == 32 ? 544 : 2816};
        double worst = 0;
        for (int li = 0; li < 3; li++) {
            for (int kind = 0; kind < 5; kind++) {
                const int64_t n = lens[li];
                fill_row(x, n, kind, &s);
                CHECK(quant_quantize_row(type, x, q, n) == AL_OK);
                quant_dequantize(type, q, y, n);
                const double e = test_nmse(y, x, n);
                if (e > worst) worst = e;
                CHECK_MSG(e <= g_bounds[t].max_nmse, "%s n=%lld kind %d: NMSE %.3g > %.3g",
                          quant_type_name(type), (long long)n, kind, e, g_bounds[t].max_nmse);
            }
            /* zeros stay exactly zero */
            memset(x, 0, sizeof x);
            CHECK(quant_quantize_row(type, x, q, lens[li]) == AL_OK);
            quant_dequantize(type, q, y, lens[li]);
            for (int64_t i = 0; i < lens[li]; i++) CHECK_MSG(y[i] == 0, "%s zeros", quant_type_name(type));
        }
        printf("  %-5s worst NMSE %.2e (bound %.1e)\n", quant_type_name(type), worst,
               g_bounds[t].max_nmse);
    }
}

static void test_row_errors(void) {
    float x[64] = {0};
    uint8_t q[256];
    CHECK(quant_quantize_row(AL_TYPE_Q4_0, x, q, 48) == AL_ERR_ARG);
    CHECK(quant_quantize_row(AL_TYPE_Q4_K, x, q, 32) == AL_ERR_ARG);
    CHECK(quant_quantize_row(AL_TYPE_Q8_0, x, q, 0) == AL_ERR_ARG);
    CHECK(quant_quantize_row(AL_TYPE_Q2_K, x, q, 256) == AL_ERR_UNSUPPORTED);
    CHECK(strstr(al_last_error(), "Q2_K") != NULL);
    CHECK(quant_quantize_row(999, x, q, 32) == AL_ERR_UNSUPPORTED);
    CHECK(!quant_can_quantize(AL_TYPE_Q8_K) && quant_can_quantize(AL_TYPE_Q6_K));
}

/* Row r of a fixed pseudo-random matrix, for quant_rows. */
static void matrix_row(void *ctx, int64_t row, float *dst, int64_t n) {
    (void)ctx;
    uint32_t s = (uint32_t)row * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) dst[i] = rng_normal(&s, 0.02f);
}

static void test_rows_threads(void) {
    enum { N = 512, ROWS = 37 };
    const uint64_t rb = quant_row_bytes(AL_TYPE_Q4_K, N);
    uint8_t *a = malloc(rb * ROWS), *b = malloc(rb * ROWS);
    CHECK(quant_rows(AL_TYPE_Q4_K, N, 0, ROWS, matrix_row, NULL, a, 1) == AL_OK);
    const int threads[] = {2, 3, 7, 64};
    for (int t = 0; t < 4; t++) {
        memset(b, 0xAB, rb * ROWS);
        CHECK(quant_rows(AL_TYPE_Q4_K, N, 0, ROWS, matrix_row, NULL, b, threads[t]) == AL_OK);
        CHECK_MSG(!memcmp(a, b, rb * ROWS), "%d threads differ from 1", threads[t]);
    }
    /* a slice starting at row 5 is rows 5.. of the whole */
    CHECK(quant_rows(AL_TYPE_Q4_K, N, 5, 3, matrix_row, NULL, b, 2) == AL_OK);
    CHECK(!memcmp(a + 5 * rb, b, 3 * rb));
    CHECK(quant_rows(AL_TYPE_Q4_K, 100, 0, 1, matrix_row, NULL, b, 1) == AL_ERR_ARG);
    free(a);
    free(b);
}

/* ---- 2. plain scalar K-quants, as ggml writes them ----------------------------------- */
/* These follow ggml-quants.c statement by statement, one sub-block at a time; the
 * library computes the same thing with sub-blocks in lanes. */

static int p_nearest(float x) {
    float v = x + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static int p_clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static float p_f16(float f) { return al_f16_to_f32(al_f32_to_f16(f)); }

static void p_put_f16(uint8_t *p, float f) {
    uint16_t h = al_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static float p_qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                    float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    uint8_t Laux[32];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)p_clamp(p_nearest(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = p_clamp(p_nearest(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                cur_error += w[i] * (diff * diff);
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* One Q4_K (nmax 15) or Q5_K (nmax 31) super-block: d, dmin, scales[12], L[256]. */
static void p_k45(const float *x, int nmax, uint8_t *d, uint8_t *dmin, uint8_t sc[12], uint8_t L[256]) {
    float scales[8], mins[8], weights[32], max_scale = 0, max_min = 0;
    const float rmin = nmax == 15 ? -1.f : -0.5f;
    const int nstep = nmax == 15 ? 20 : 15;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = p_qkx2(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    int ls[8], lm[8];
    memset(sc, 0, 12);
    for (int j = 0; j < 8; j++) {
        ls[j] = p_clamp((uint8_t)p_nearest(inv_scale * scales[j]), 0, 63);
        lm[j] = p_clamp((uint8_t)p_nearest(inv_min * mins[j]), 0, 63);
        if (j < 4) {
            sc[j] = (uint8_t)ls[j];
            sc[j + 4] = (uint8_t)lm[j];
        } else {
            sc[j + 4] = (uint8_t)((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
            sc[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            sc[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
    p_put_f16(d, max_scale / 63.f);
    p_put_f16(dmin, max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        const float dd = p_f16(max_scale / 63.f) * ls[j];
        if (!dd) continue;
        const float dm = p_f16(max_min / 63.f) * lm[j];
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)p_clamp(p_nearest((x[32 * j + l] + dm) / dd), 0, nmax);
    }
}

static void p_q4_k(const float *x, uint8_t *y) { /* 144 bytes */
    uint8_t L[256];
    p_k45(x, 15, y, y + 2, y + 4, L);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) y[16 + 32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
}

static void p_q5_k(const float *x, uint8_t *y) { /* 176 bytes */
    uint8_t L[256], *qh = y + 16, *qs = y + 48;
    p_k45(x, 31, y, y + 2, y + 4, L);
    memset(qh, 0, 32);
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
            if (l1 > 15) { l1 -= 16; qh[l] |= (uint8_t)(1 << (2 * c)); }
            if (l2 > 15) { l2 -= 16; qh[l] |= (uint8_t)(2 << (2 * c)); }
            qs[32 * c + l] = (uint8_t)(l1 | l2 << 4);
        }
    }
}

static float p_qx(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = p_clamp(p_nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = p_clamp(p_nearest(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + p_clamp(p_nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void p_q6_k(const float *x, uint8_t *y) { /* 210 bytes: ql, qh, scales, d */
    int8_t L[256];
    float scales[16], max_scale = 0, max_abs = 0;
    uint8_t *ql = y, *qh = y + 128, *d = y + 208;
    int8_t *sc = (int8_t *)(y + 192);
    for (int s = 0; s < 16; s++) {
        scales[s] = p_qx(16, 32, x + 16 * s, L + 16 * s);
        if (fabsf(scales[s]) > max_abs) { max_abs = fabsf(scales[s]); max_scale = scales[s]; }
    }
    memset(y, 0, 210);
    if (max_abs < 1e-15f) return;
    float iscale = -128.f / max_scale;
    p_put_f16(d, 1 / iscale);
    for (int s = 0; s < 16; s++) sc[s] = (int8_t)(p_nearest(iscale * scales[s]) > 127 ? 127 : p_nearest(iscale * scales[s]));
    for (int s = 0; s < 16; s++) {
        float dd = p_f16(1 / iscale) * sc[s];
        if (!dd) continue;
        for (int l = 0; l < 16; l++) L[16 * s + l] = (int8_t)(p_clamp(p_nearest(x[16 * s + l] / dd), -32, 31) + 32);
    }
    for (int h = 0; h < 2; h++) {
        const int8_t *q = L + 128 * h;
        for (int l = 0; l < 32; l++) {
            ql[64 * h + l] = (uint8_t)((q[l] & 0xF) | (q[l + 64] & 0xF) << 4);
            ql[64 * h + l + 32] = (uint8_t)((q[l + 32] & 0xF) | (q[l + 96] & 0xF) << 4);
            qh[32 * h + l] = (uint8_t)(q[l] >> 4 | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 | (q[l + 96] >> 4) << 6);
        }
    }
}

/* A super-block whose 16-element pieces each take one of several shapes, including
 * the degenerate ones a scale search must survive. */
static void fill_awkward(float *x, uint32_t *s) {
    for (int p = 0; p < 16; p++) {
        float *v = x + 16 * p;
        const int kind = (int)(rng_next(s) % 10);
        const float c = rng_normal(s, 0.05f);
        for (int i = 0; i < 16; i++) {
            switch (kind) {
            case 0: v[i] = 0; break;
            case 1: v[i] = c; break;                                   /* flat */
            case 2: v[i] = -fabsf(rng_normal(s, 0.02f)); break;        /* all negative */
            case 3: v[i] = 0.1f + fabsf(rng_normal(s, 0.02f)); break;  /* all positive */
            case 4: v[i] = i == 3 ? 1.0f : 0.0f; break;                /* one spike */
            case 5: v[i] = rng_normal(s, 1e-20f); break;               /* f16 underflow */
            case 6: v[i] = rng_normal(s, 300.0f); break;
            case 7: v[i] = c + rng_normal(s, 1e-6f); break;           /* nearly flat */
            default: v[i] = rng_normal(s, 0.02f); break;
            }
        }
    }
}

static void test_lanes_match_plain(void) {
    float x[256];
    uint8_t a[256], b[256];
    uint32_t s = 777;
    int n_bad[3] = {0, 0, 0};
    for (int it = 0; it < 3000; it++) {
        fill_awkward(x, &s);
        const struct { uint32_t type; void (*plain)(const float *, uint8_t *); int size; } k[] = {
            {AL_TYPE_Q4_K, p_q4_k, 144}, {AL_TYPE_Q5_K, p_q5_k, 176}, {AL_TYPE_Q6_K, p_q6_k, 210}};
        for (int t = 0; t < 3; t++) {
            CHECK(quant_quantize_row(k[t].type, x, a, 256) == AL_OK);
            k[t].plain(x, b);
            if (memcmp(a, b, (size_t)k[t].size) != 0 && n_bad[t]++ < 3)
                CHECK_MSG(0, "%s: super-block %d differs from the scalar search",
                          quant_type_name(k[t].type), it);
        }
    }
}

/* ---- 3. bit-exactness with llama.cpp's files ----------------------------------------- */

typedef struct ref_case {
    const char *src, *dst, *scheme;
} ref_case;

static const ref_case g_refs[] = {
    {"ref-llama-f16", "ref-llama-Q8_0", "Q8_0"},   {"ref-llama-f16", "ref-llama-Q4_0", "Q4_0"},
    {"ref-llama-f16", "ref-llama-Q4_1", "Q4_1"},   {"ref-llama-f16", "ref-llama-Q4_K_M", "Q4_K_M"},
    {"ref-llama-f16", "ref-llama-Q5_K_M", "Q5_K_M"}, {"ref-llama-f16", "ref-llama-Q6_K", "Q6_K"},
    {"ref-qwen2-f16", "ref-qwen2-Q8_0", "Q8_0"},
};

/* Quantizes tensor t of src in memory to type; true if equal to want's bytes. */
static bool same_as_reference(const gguf_tensor *t, const gguf_tensor *want) {
    const int64_t n = t->ne[0], rows = (int64_t)(t->n_elem / (uint64_t)n);
    const uint64_t in_rb = quant_row_bytes(t->type, n), out_rb = quant_row_bytes(want->type, n);
    float *row = malloc((size_t)n * sizeof *row);
    uint8_t *q = malloc(out_rb);
    bool same = row && q && out_rb * (uint64_t)rows == want->n_bytes;
    for (int64_t r = 0; same && r < rows; r++) {
        quant_dequantize(t->type, (const uint8_t *)t->data + r * in_rb, row, n);
        same = quant_quantize_row(want->type, row, q, n) == AL_OK &&
               !memcmp(q, (const uint8_t *)want->data + r * out_rb, out_rb);
    }
    free(row);
    free(q);
    return same;
}

static void test_ref_tensors(void) {
    char p1[512], p2[512];
    for (size_t c = 0; c < sizeof g_refs / sizeof *g_refs; c++) {
        gguf_file *src = NULL, *dst = NULL;
        if (gguf_open(ref_path(g_refs[c].src, p1, sizeof p1), &src) != AL_OK ||
            gguf_open(ref_path(g_refs[c].dst, p2, sizeof p2), &dst) != AL_OK) {
            TEST_SKIP("%s or %s not found in %s/models/ref", g_refs[c].src, g_refs[c].dst,
                      test_shared_dir());
            gguf_close(src);
            return;
        }
        const quant_scheme *sch = quant_scheme_find(g_refs[c].scheme);
        quant_model_desc m = {.n_layer = 0, .has_output = gguf_find_tensor(src, "output.weight") != NULL};
        for (uint64_t i = 0; i < src->n_tensors; i++) {
            char name[128];
            gguf_str_copy(src->tensors[i].name, name, sizeof name);
            m.n_attn_v += strstr(name, "attn_v.weight") != NULL;
        }
        m.n_layer = m.n_attn_v;
        int n_same = 0, n_type = 0, n = (int)dst->n_tensors;
        for (uint64_t i = 0; i < dst->n_tensors; i++) {
            const gguf_tensor *want = &dst->tensors[i];
            char name[128];
            gguf_str_copy(want->name, name, sizeof name);
            const gguf_tensor *t = gguf_find_tensor(src, name);
            CHECK_MSG(t != NULL, "%s: no %s in the source", g_refs[c].dst, name);
            if (!t) continue;
            const uint32_t type = quant_pick_type(sch, &m, name, t->n_dims, t->ne, t->type, NULL);
            n_type += type == want->type;
            CHECK_MSG(type == want->type, "%s %s: picked %s, llama.cpp %s", g_refs[c].dst, name,
                      quant_type_name(type), quant_type_name(want->type));
            const bool same = want->type == t->type
                                  ? want->n_bytes == t->n_bytes && !memcmp(want->data, t->data, t->n_bytes)
                                  : same_as_reference(t, want);
            n_same += same;
            CHECK_MSG(same, "%s %s (%s): bytes differ from llama.cpp's", g_refs[c].dst, name,
                      quant_type_name(want->type));
        }
        printf("  %-17s %2d/%d tensors byte-identical, %2d/%d types as llama.cpp's\n",
               g_refs[c].dst, n_same, n, n_type, n);
        gguf_close(src);
        gguf_close(dst);
    }
}

static void test_ref_whole_files(void) {
    char p1[512], p2[512];
    for (size_t c = 0; c < sizeof g_refs / sizeof *g_refs; c++) {
        ref_path(g_refs[c].src, p1, sizeof p1);
        ref_path(g_refs[c].dst, p2, sizeof p2);
        if (!file_exists(p1) || !file_exists(p2)) {
            TEST_SKIP("%s not found", p1);
            return;
        }
        const char *out = tmp_path("whole.gguf");
        quant_params p = {.scheme = quant_scheme_find(g_refs[c].scheme), .n_threads = 2};
        quant_report r;
        CHECK(quant_model(p1, out, &p, &r) == AL_OK);
        const bool eq = files_equal(out, p2);
        CHECK_MSG(eq, "%s: quantize %s differs from llama.cpp's file", g_refs[c].dst, g_refs[c].scheme);
        printf("  %-17s whole file %s (%d tensors, %d converted)\n", g_refs[c].dst,
               eq ? "identical" : "DIFFERS", r.n_tensors, r.n_quantized);
        unlink(out);
    }
}

static void test_model_errors(void) {
    char p1[512], p2[512];
    ref_path("ref-llama-Q8_0", p1, sizeof p1);
    ref_path("ref-llama-f16", p2, sizeof p2);
    quant_params p = {.scheme = quant_scheme_find("q4_0"), .n_threads = 1};
    quant_report r = {.n_tensors = 99};
    const char *out = tmp_path("err.gguf");
    CHECK(p.scheme != NULL && quant_scheme_find("Q4_K") == quant_scheme_find("q4_k_m"));
    CHECK(quant_scheme_find("Q3_K_M") == NULL && quant_scheme_find(NULL) == NULL);
    CHECK(quant_model("/nonexistent.gguf", out, &p, &r) == AL_ERR_IO);
    CHECK(r.n_tensors == 0 && !file_exists(out));
    if (!file_exists(p1)) {
        TEST_SKIP("%s not found", p1);
        return;
    }
    CHECK(quant_model(p1, out, &p, NULL) == AL_ERR_UNSUPPORTED);
    CHECK(strstr(al_last_error(), "cannot requantize") != NULL);
    CHECK(!file_exists(out));
    CHECK(quant_model(p2, "/nonexistent/dir/x.gguf", &p, NULL) == AL_ERR_IO);
    CHECK(quant_model(p2, p2, &p, NULL) == AL_ERR_ARG); /* would truncate its own input */
    CHECK(file_exists(p2));
}

/* ---- the scheme rules ---------------------------------------------------------------- */

static uint32_t pick(const char *scheme, const quant_model_desc *m, const char *name,
                     int64_t ne0, int64_t ne1, bool *fell) {
    const int64_t ne[4] = {ne0, ne1, 1, 1};
    return quant_pick_type(quant_scheme_find(scheme), m, name, ne1 > 1 ? 2 : 1, ne, AL_TYPE_F16, fell);
}

static void test_pick_rules(void) {
    quant_model_desc m = {.n_layer = 16, .n_attn_v = 16, .has_output = true};
    bool fell;
    /* use_more_bits for 16 layers: 0, 1, 4, 7, 10, 13, 14, 15 */
    const int more[16] = {1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1};
    for (int il = 0; il < 16; il++) {
        char v[64], d[64];
        snprintf(v, sizeof v, "blk.%d.attn_v.weight", il);
        snprintf(d, sizeof d, "blk.%d.ffn_down.weight", il);
        const uint32_t want = more[il] ? AL_TYPE_Q6_K : AL_TYPE_Q4_K;
        CHECK_MSG(pick("Q4_K_M", &m, v, 2048, 512, NULL) == want, "attn_v layer %d", il);
        CHECK_MSG(pick("Q4_K_M", &m, d, 8192, 2048, NULL) == want, "ffn_down layer %d", il);
        CHECK(pick("Q4_K_S", &m, v, 2048, 512, NULL) == (il < 4 ? AL_TYPE_Q5_K : AL_TYPE_Q4_K));
        CHECK(pick("Q4_K_S", &m, d, 8192, 2048, NULL) == (il < 2 ? AL_TYPE_Q5_K : AL_TYPE_Q4_K));
    }
    CHECK(pick("Q4_0", &m, "output.weight", 2048, 32000, NULL) == AL_TYPE_Q6_K);
    CHECK(pick("Q8_0", &m, "output.weight", 2048, 32000, NULL) == AL_TYPE_Q8_0);
    CHECK(pick("Q4_0", &m, "token_embd.weight", 2048, 32000, NULL) == AL_TYPE_Q4_0);
    CHECK(pick("Q4_0", &m, "blk.0.attn_norm.weight", 2048, 1, NULL) == AL_TYPE_F16); /* kept */
    CHECK(pick("Q4_0", &m, "blk.0.attn_q.bias", 2048, 1, NULL) == AL_TYPE_F16);
    CHECK(pick("F16", &m, "output.weight", 2048, 32000, NULL) == AL_TYPE_F16);
    CHECK(pick("BF16", &m, "blk.0.ffn_up.weight", 100, 7, NULL) == AL_TYPE_BF16);
    /* tied embeddings: token_embd is the output */
    quant_model_desc tied = m;
    tied.has_output = false;
    CHECK(pick("Q4_0", &tied, "token_embd.weight", 2048, 32000, NULL) == AL_TYPE_Q6_K);
    /* fallbacks for rows the block size does not divide (qwen2-0.5b: 896) */
    CHECK(pick("Q4_K_M", &m, "blk.5.attn_q.weight", 896, 896, &fell) == AL_TYPE_Q5_0 && fell);
    CHECK(pick("Q5_K_S", &m, "blk.5.attn_q.weight", 896, 896, &fell) == AL_TYPE_Q5_1 && fell);
    CHECK(pick("Q6_K", &m, "blk.5.attn_q.weight", 896, 896, &fell) == AL_TYPE_Q8_0 && fell);
    CHECK(pick("Q4_0", &tied, "token_embd.weight", 896, 32000, &fell) == AL_TYPE_Q8_0 && fell);
    CHECK(pick("Q4_0", &m, "blk.0.ffn_up.weight", 100, 64, &fell) == AL_TYPE_F16 && fell);
    CHECK(pick("Q4_K_M", &m, "blk.0.ffn_up.weight", 4864, 896, &fell) == AL_TYPE_Q4_K && !fell);
    /* pure: one type everywhere */
    quant_model_desc pure = m;
    pure.pure = true;
    CHECK(pick("Q4_K_M", &pure, "output.weight", 2048, 32000, NULL) == AL_TYPE_Q4_K);
    CHECK(pick("Q4_K_M", &pure, "blk.0.attn_v.weight", 2048, 512, NULL) == AL_TYPE_Q4_K);
}

/* ---- 4. the writer --------------------------------------------------------------------- */

/* Writes a small file with every value type and a few tensors; returns the status. */
static al_status write_sample(const char *path) {
    gguf_writer *w = NULL;
    al_status st = gguf_writer_create(&w);
    const uint8_t u8s[3] = {1, 2, 255};
    const int16_t i16s[2] = {-2, 300};
    const double f64s[2] = {1.5, -2.25e300};
    const char *strs[4] = {"a", "", "x\0y", "\xff\xfe"};
    const uint64_t lens[4] = {1, 0, 3, 2};
    if (st == AL_OK) st = gguf_writer_set_str(w, "general.name", "sample");
    if (st == AL_OK) st = gguf_writer_set_u32(w, "u32", 4000000000u);
    if (st == AL_OK) st = gguf_writer_set_i32(w, "i32", -7);
    if (st == AL_OK) st = gguf_writer_set_u64(w, "u64", 1ull << 40);
    if (st == AL_OK) st = gguf_writer_set_f32(w, "f32", 0.1f);
    if (st == AL_OK) st = gguf_writer_set_bool(w, "bool", true);
    if (st == AL_OK) st = gguf_writer_set_array(w, "arr.u8", GGUF_VT_U8, u8s, 3);
    if (st == AL_OK) st = gguf_writer_set_array(w, "arr.i16", GGUF_VT_I16, i16s, 2);
    if (st == AL_OK) st = gguf_writer_set_array(w, "arr.f64", GGUF_VT_F64, f64s, 2);
    if (st == AL_OK) st = gguf_writer_set_array(w, "arr.empty", GGUF_VT_I32, NULL, 0);
    if (st == AL_OK) st = gguf_writer_set_str_array(w, "arr.str", strs, lens, 4);
    if (st == AL_OK) st = gguf_writer_set_u32(w, "general.alignment", 64);
    if (st == AL_OK) st = gguf_writer_set_i32(w, "i32", -8); /* replaced in place */
    if (st == AL_OK) st = gguf_writer_set_u32(w, "gone", 1);
    if (st == AL_OK && !gguf_writer_remove(w, "gone")) st = AL_ERR_ARG;
    const int64_t ne_a[1] = {5}, ne_b[2] = {64, 3}, ne_c[3] = {32, 2, 2};
    if (st == AL_OK) st = gguf_writer_add_tensor(w, "a", 1, ne_a, AL_TYPE_F32);
    if (st == AL_OK) st = gguf_writer_add_tensor(w, "b", 2, ne_b, AL_TYPE_Q8_0);
    if (st == AL_OK) st = gguf_writer_add_tensor(w, "c", 3, ne_c, AL_TYPE_F16);
    if (st == AL_OK) st = gguf_writer_open(w, path);
    uint8_t data[20 + 204 + 256];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 7 + 1);
    /* in uneven pieces that cross tensor boundaries */
    if (st == AL_OK) st = gguf_writer_write(w, data, 3);
    if (st == AL_OK) st = gguf_writer_write(w, data + 3, 100);
    if (st == AL_OK) st = gguf_writer_write(w, data + 103, sizeof data - 103);
    if (st == AL_OK) st = gguf_writer_close(w);
    gguf_writer_destroy(w);
    return st;
}

static void test_writer_round_trip(void) {
    const char *path = tmp_path("sample.gguf");
    CHECK(write_sample(path) == AL_OK);
    gguf_file *f = NULL;
    CHECK(gguf_open(path, &f) == AL_OK);
    if (!f) return;
    uint32_t u;
    float fl;
    gguf_str s;
    CHECK(f->version == 3 && f->n_kv == 12 && f->n_tensors == 3 && f->alignment == 64);
    CHECK(gguf_get_str(f, "general.name", &s) == AL_OK && gguf_str_eq(s, "sample"));
    CHECK(gguf_get_u32(f, "u32", &u) == AL_OK && u == 4000000000u);
    CHECK(gguf_find_key(f, "i32") == &f->kv[2] && f->kv[2].v.i == -8);
    CHECK(gguf_find_key(f, "u64")->v.u == 1ull << 40);
    CHECK(gguf_get_f32(f, "f32", &fl) == AL_OK && fl == 0.1f);
    CHECK(gguf_find_key(f, "bool")->type == GGUF_VT_BOOL && gguf_find_key(f, "bool")->v.u == 1);
    CHECK(gguf_find_key(f, "gone") == NULL);
    const gguf_kv *kv = gguf_find_key(f, "arr.u8");
    CHECK(kv && kv->v.arr.type == GGUF_VT_U8 && kv->v.arr.n == 3 && !memcmp(kv->v.arr.data, "\x01\x02\xff", 3));
    kv = gguf_find_key(f, "arr.i16");
    CHECK(kv && kv->v.arr.n == 2 && !memcmp(kv->v.arr.data, "\xfe\xff\x2c\x01", 4));
    kv = gguf_find_key(f, "arr.f64");
    double d1;
    if (kv) memcpy(&d1, (const uint8_t *)kv->v.arr.data + 8, 8);
    CHECK(kv && kv->v.arr.type == GGUF_VT_F64 && d1 == -2.25e300);
    kv = gguf_find_key(f, "arr.empty");
    CHECK(kv && kv->v.arr.type == GGUF_VT_I32 && kv->v.arr.n == 0);
    kv = gguf_find_key(f, "arr.str");
    CHECK(kv && kv->v.arr.n == 4 && kv->v.arr.strs[1].n == 0 && kv->v.arr.strs[2].n == 3 &&
          !memcmp(kv->v.arr.strs[2].s, "x\0y", 3) && !memcmp(kv->v.arr.strs[3].s, "\xff\xfe", 2));
    const gguf_tensor *a = gguf_find_tensor(f, "a"), *b = gguf_find_tensor(f, "b"),
                      *c = gguf_find_tensor(f, "c");
    CHECK(a && b && c);
    if (a && b && c) {
        CHECK(a->n_dims == 1 && a->ne[0] == 5 && a->type == AL_TYPE_F32 && a->offset == 0);
        CHECK(b->n_dims == 2 && b->ne[1] == 3 && b->type == AL_TYPE_Q8_0 && b->offset == 64);
        CHECK(c->n_dims == 3 && c->ne[2] == 2 && c->type == AL_TYPE_F16 && c->offset == 64 + 256);
        CHECK(f->data_offset % 64 == 0 && f->size == f->data_offset + 64 + 256 + 256);
        const uint8_t *pa = a->data, *pb = b->data, *pc = c->data;
        CHECK(pa[0] == 1 && pa[19] == (uint8_t)(19 * 7 + 1) && pb[0] == (uint8_t)(20 * 7 + 1) &&
              pc[255] == (uint8_t)((20 + 204 + 255) * 7 + 1));
    }
    gguf_close(f);
    unlink(path);
}

/* A copy of a reference file through copy_kv and add_tensor must be that file. */
static void test_writer_copies_reference(void) {
    char src[512];
    ref_path("ref-llama-f16", src, sizeof src);
    gguf_file *f = NULL;
    if (gguf_open(src, &f) != AL_OK) {
        TEST_SKIP("%s not found", src);
        return;
    }
    const char *out = tmp_path("copy.gguf");
    gguf_writer *w = NULL;
    al_status st = gguf_writer_create(&w);
    for (uint64_t i = 0; st == AL_OK && i < f->n_kv; i++) st = gguf_writer_copy_kv(w, &f->kv[i]);
    for (uint64_t i = 0; st == AL_OK && i < f->n_tensors; i++) {
        char name[128];
        const gguf_tensor *t = &f->tensors[i];
        st = gguf_writer_add_tensor(w, gguf_str_copy(t->name, name, sizeof name), t->n_dims, t->ne, t->type);
    }
    if (st == AL_OK) st = gguf_writer_open(w, out);
    for (uint64_t i = 0; st == AL_OK && i < f->n_tensors; i++)
        st = gguf_writer_write(w, f->tensors[i].data, f->tensors[i].n_bytes);
    if (st == AL_OK) st = gguf_writer_close(w);
    gguf_writer_destroy(w);
    CHECK(st == AL_OK);
    CHECK_MSG(files_equal(out, src), "the copy of %s differs", src);
    gguf_close(f);
    unlink(out);
}

static void test_writer_errors(void) {
    char path[256], partial[300];
    snprintf(path, sizeof path, "%s", tmp_path("bad.gguf"));
    snprintf(partial, sizeof partial, "%s.partial", path);
    gguf_writer *w = NULL;
    const int64_t ne[2] = {32, 2}, bad_ne[1] = {33};
    uint8_t data[128] = {0};
    CHECK(gguf_writer_create(&w) == AL_OK);
    CHECK(gguf_writer_set_u32(w, "", 1) == AL_ERR_ARG);
    CHECK(gguf_writer_set_array(w, "x", GGUF_VT_STRING, data, 1) == AL_ERR_ARG);
    CHECK(gguf_writer_add_tensor(w, "t", 2, ne, AL_TYPE_Q8_0) == AL_OK);
    CHECK(gguf_writer_add_tensor(w, "t", 2, ne, AL_TYPE_Q8_0) == AL_ERR_ARG);     /* twice */
    CHECK(gguf_writer_add_tensor(w, "u", 1, bad_ne, AL_TYPE_Q4_0) == AL_ERR_ARG); /* 33 % 32 */
    CHECK(gguf_writer_add_tensor(w, "v", 5, ne, AL_TYPE_F32) == AL_ERR_ARG);
    CHECK(gguf_writer_add_tensor(w, "w", 1, ne, 77) == AL_ERR_ARG);
    CHECK(gguf_writer_write(w, data, 1) == AL_ERR_ARG); /* not open */
    CHECK(gguf_writer_open(w, "/nonexistent/dir/x.gguf") == AL_ERR_IO);
    CHECK(strstr(al_last_error(), "/nonexistent/dir/x.gguf") != NULL);
    /* an older file at path survives a failed write */
    FILE *old = fopen(path, "wb");
    CHECK(old && fputs("old", old) >= 0 && fclose(old) == 0);
    /* too many bytes: fails and removes the partial file */
    CHECK(gguf_writer_open(w, path) == AL_OK && file_exists(partial));
    CHECK(gguf_writer_write(w, data, 68) == AL_OK);
    CHECK(gguf_writer_write(w, data, 1) == AL_ERR_ARG && !file_exists(partial));
    CHECK(gguf_writer_close(w) == AL_ERR_ARG);
    gguf_writer_destroy(w);
    /* too few bytes at close */
    CHECK(gguf_writer_create(&w) == AL_OK);
    CHECK(gguf_writer_add_tensor(w, "t", 2, ne, AL_TYPE_Q8_0) == AL_OK);
    CHECK(gguf_writer_open(w, path) == AL_OK && gguf_writer_write(w, data, 10) == AL_OK);
    CHECK(gguf_writer_close(w) == AL_ERR_ARG && !file_exists(partial));
    CHECK(strstr(al_last_error(), "'t' got 10 of its 68 bytes") != NULL);
    gguf_writer_destroy(w);
    /* destroyed without close */
    CHECK(gguf_writer_create(&w) == AL_OK);
    CHECK(gguf_writer_open(w, path) == AL_OK && file_exists(partial));
    gguf_writer_destroy(w);
    CHECK(!file_exists(partial));
    char buf[8] = "";
    old = fopen(path, "rb");
    CHECK(old && fgets(buf, sizeof buf, old) && !strcmp(buf, "old")); /* still the older file */
    if (old) fclose(old);
    /* a bad alignment */
    CHECK(gguf_writer_create(&w) == AL_OK);
    CHECK(gguf_writer_set_u32(w, "general.alignment", 48) == AL_OK);
    CHECK(gguf_writer_open(w, path) == AL_ERR_ARG && !file_exists(partial));
    gguf_writer_destroy(w);
    gguf_writer_destroy(NULL);
    /* success replaces the older file */
    CHECK(gguf_writer_create(&w) == AL_OK);
    CHECK(gguf_writer_open(w, path) == AL_OK && gguf_writer_close(w) == AL_OK);
    gguf_writer_destroy(w);
    CHECK(!file_exists(partial));
    gguf_file *f = NULL;
    CHECK(gguf_open(path, &f) == AL_OK && f && f->n_kv == 0 && f->n_tensors == 0);
    gguf_close(f);
    unlink(path);
}

/* Every allocation of write_sample fails once in turn: a clean failure each time. */
static void test_writer_oom(void) {
    const char *path = tmp_path("oom.gguf");
    al_alloc_fail_after(0);
    CHECK(write_sample(path) == AL_OK);
    const uint64_t n_alloc = al_alloc_fail_after(0);
    unlink(path);
    for (uint64_t k = 1; k <= n_alloc; k++) {
        al_alloc_fail_after(k);
        const al_status st = write_sample(path);
        al_alloc_fail_after(0);
        CHECK_MSG(st == AL_ERR_NOMEM || st == AL_OK, "allocation %llu: status %d",
                  (unsigned long long)k, (int)st);
        char partial[300];
        snprintf(partial, sizeof partial, "%s.partial", path);
        if (st != AL_OK)
            CHECK_MSG(!file_exists(path) && !file_exists(partial), "allocation %llu left a file",
                      (unsigned long long)k);
    }
    unlink(path);
}

int main(void) {
    TEST_RUN(test_round_trip);
    TEST_RUN(test_row_errors);
    TEST_RUN(test_rows_threads);
    TEST_RUN(test_lanes_match_plain);
    TEST_RUN(test_pick_rules);
    TEST_RUN(test_ref_tensors);
    TEST_RUN(test_ref_whole_files);
    TEST_RUN(test_model_errors);
    TEST_RUN(test_writer_round_trip);
    TEST_RUN(test_writer_copies_reference);
    TEST_RUN(test_writer_errors);
    TEST_RUN(test_writer_oom);
    return test_finish();
}
