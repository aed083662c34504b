/* test_kernels.c: the fast CPU kernels of every instruction set this machine can run
 * (scalar, AVX2, AVX-512), each against the reference ops, on random data of awkward
 * sizes: odd row counts, K a multiple of the block but not of 64 or 512, batches that
 * are not multiples of the tiles, one and three threads.
 *
 * A quantized matmul is checked twice, in both activation modes (q8x2, q8). Against the
 * reference given the same rounded activations the fast kernel multiplies
 * (cpu_act_dequantize, and hi + lo for q8x2), the integer kernels must agree up to
 * float summation order (NMSE <= 1e-10); against the reference on the f32 activations,
 * up to the activation rounding (f32_limit). The fast path must
 * also give bit-identical results whatever the batch split and the thread count: a
 * token's logits may not depend on what else is in its batch.
 *
 * Batches on AMX tiles, where the CPU has them, must give the VNNI kernels' results bit
 * for bit (test_matmul_amx), and so must weights in the x16 layout those of the rows
 * (test_matmul_x16).
 *
 * MXFP4's SIMD packs are also compared byte for byte with the portable decoder over
 * every scale byte, edge scales included.
 *
 * Attention over ring caches with a sliding window and a scale is checked twice: the
 * reference against a naive attention in double over the whole sequence, and each fast
 * ISA against the reference, bit-identical with and without the ring; the same again
 * with attention sinks (gpt-oss), per head values from -inf to 1e30. A kernel's decode
 * attention (attn_few: keys in the lanes) must give its attn's bits, called directly on
 * every tiling, infinite keys included (test_attention_few). The reference
 * ops themselves are checked where a formula says what they must give: gelu_mul on
 * known values, swiglu_oai against its formula in double, rms_norm in place on
 * per-head views.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/mm.h"
#include "cpu/ops.h"
#include "kernel_check.h"
#include "format/quant.h"
#include "test.h"
#include "util.h"

/* ---- helpers ----------------------------------------------------------------------- */

static void put_f16(uint8_t *p, float f) {
    uint16_t h = al_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* Offsets of the fp16 scales in a block of each type (random bits elsewhere are valid
 * quants and 6-bit scales). */
static int f16_fields(uint32_t type, int off[2]) {
    switch (type) {
    case AL_TYPE_Q4_0:
    case AL_TYPE_Q5_0:
    case AL_TYPE_Q8_0:
        off[0] = 0;
        return 1;
    case AL_TYPE_Q4_1:
    case AL_TYPE_Q5_1:
    case AL_TYPE_Q4_K:
    case AL_TYPE_Q5_K:
        off[0] = 0;
        off[1] = 2;
        return 2;
    case AL_TYPE_Q2_K:
        off[0] = 80;
        off[1] = 82;
        return 2;
    case AL_TYPE_Q3_K:
        off[0] = 108;
        return 1;
    case AL_TYPE_Q6_K:
        off[0] = 208;
        return 1;
    default:
        return 0;
    }
}

/* A random weight matrix [n_out][n_in] of type, in a buffer the caller frees. */
static uint8_t *random_weights(uint32_t type, int64_t n_in, int64_t n_out, uint64_t *row_bytes) {
    const quant_traits *tr = quant_get_traits(type);
    *row_bytes = quant_row_bytes(type, n_in);
    const uint64_t n = *row_bytes * (uint64_t)n_out;
    uint8_t *w = malloc(n); /* no slack: ASan sees a kernel read past the end */
    if (type == AL_TYPE_F32 || type == AL_TYPE_F16 || type == AL_TYPE_BF16) {
        for (uint64_t i = 0; i < n / tr->type_size; i++) {
            float f = test_frand();
            if (type == AL_TYPE_F32)
                memcpy(w + 4 * i, &f, 4);
            else if (type == AL_TYPE_F16)
                put_f16(w + 2 * i, f);
            else {
                uint32_t u;
                memcpy(&u, &f, 4);
                w[2 * i] = (uint8_t)(u >> 16);
                w[2 * i + 1] = (uint8_t)(u >> 24);
            }
        }
        return w;
    }
    for (uint64_t i = 0; i < n; i++)
        w[i] = (uint8_t)test_rnd();
    int off[2];
    const int nf = f16_fields(type, off);
    for (uint64_t b = 0; b < n / tr->type_size; b++)
        for (int k = 0; k < nf; k++)
            put_f16(w + b * tr->type_size + off[k], 0.01f + 0.02f * (test_frand() + 1));
    /* MXFP4's scale byte: 2^(e-127) from 2^-7 to 2^0, so blocks differ in scale */
    for (uint64_t b = 0; type == AL_TYPE_MXFP4 && b < n / tr->type_size; b++)
        w[b * tr->type_size] = (uint8_t)(120 + test_rnd() % 8);
    return w;
}

static const cpu_kernels *kernels_of(cpu_isa isa) {
    return isa == CPU_ISA_AVX512 ? &cpu_kernels_avx512
           : isa == CPU_ISA_AVX2 ? &cpu_kernels_avx2
                                 : &cpu_kernels_scalar;
}

/* The activations the ISA's integer kernels multiply: x rounded to 8 bits per block
 * (the type's format: fp16 scales for the legacy types, exact for K-quants), plus, for
 * Q8X2, the rest x - hi rounded again with exact scales. */
static void round_activations(cpu_isa isa, cpu_act_mode act, uint32_t type, const float *x,
                              int64_t n_in, int n_tok, float *out) {
    const cpu_kernels *k = kernels_of(isa);
    cpu_act_fmt f = cpu_act_format(k, type);
    const int b = f.b, tt = k->tile;
    uint8_t *tile = malloc((size_t)(n_in / b * cpu_sb_bytes(tt, b)));
    float *rest = malloc((size_t)n_in * 4), *lo = malloc((size_t)n_in * 4);
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + t * n_in;
        float *hi = out + t * n_in;
        k->quantize(xt, n_in, f, tile, t % tt, tt);
        cpu_act_dequantize(tile, n_in, b, t % tt, tt, hi);
        if (act == CPU_ACT_Q8) continue;
        for (int64_t i = 0; i < n_in; i++)
            rest[i] = xt[i] - hi[i];
        cpu_act_fmt lo_fmt = f;
        lo_fmt.exact_scale = true;
        k->quantize(rest, n_in, lo_fmt, tile, t % tt, tt);
        cpu_act_dequantize(tile, n_in, b, t % tt, tt, lo);
        for (int64_t i = 0; i < n_in; i++)
            hi[i] += lo[i];
    }
    free(tile), free(rest), free(lo);
}

/* ---- matmul ----------------------------------------------------------------------------- */

typedef struct mm_case {
    uint32_t type;
    int64_t n_in, n_out;
    int n_tok;
    bool bias;
} mm_case;

typedef struct mm_worst {
    double exact, f32; /* worst per-case error vs the reference on rounded and f32 activations */
    double num_q, num_f, den; /* NMSE over all cases of a type: sums of squares */
    int n_split_diff;         /* cases where a batch split or thread count changed a bit */
} mm_worst;

static void run_matmul(al_backend *be, const float *x, const uint8_t *w, uint32_t type,
                       uint64_t row_bytes, const float *bias, const mm_case *c, int tok0, int n_tok,
                       float *out) {
    al_tensor xt = test_f32((float *)x + tok0 * c->n_in, c->n_in, n_tok);
    al_tensor ot = test_f32(out + tok0 * c->n_out, c->n_out, n_tok);
    al_tensor wt = {
        .type = type, .ne = {c->n_in, c->n_out}, .data = (void *)w, .row_bytes = row_bytes};
    al_tensor bt = test_f32((float *)bias, c->n_out, 1);
    be->ops->matmul(be, &xt, &wt, bias ? &bt : NULL, &ot);
}

/* sum_i |w_i| |x_i| per output: the size of the terms a dot product cancels, which
 * scales its rounding errors. A single output's NMSE would blow up when the terms
 * happen to cancel. */
static float *magnitudes(al_backend *ref, const uint8_t *w, uint64_t rb, const float *x,
                         const mm_case *c) {
    float *wa = malloc((size_t)(c->n_in * c->n_out) * 4),
          *xa = malloc((size_t)(c->n_in * c->n_tok) * 4);
    float *s = malloc((size_t)(c->n_out * c->n_tok) * 4);
    for (int64_t r = 0; r < c->n_out; r++)
        quant_dequantize(c->type, w + r * rb, wa + r * c->n_in, c->n_in);
    for (int64_t i = 0; i < c->n_in * c->n_out; i++)
        wa[i] = fabsf(wa[i]);
    for (int64_t i = 0; i < c->n_in * c->n_tok; i++)
        xa[i] = fabsf(x[i]);
    run_matmul(ref, xa, (const uint8_t *)wa, AL_TYPE_F32, (uint64_t)c->n_in * 4, NULL, c, 0,
               c->n_tok, s);
    free(wa), free(xa);
    return s;
}

static double sq_diff(const float *a, const float *b, int64_t n) {
    double e = 0;
    for (int64_t i = 0; i < n; i++)
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return e;
}

/* The largest error against the reference on f32 activations (scaled as in
 * check_matmul) that each activation mode may make. Measured worst over all types:
 * 1.2e-6 for 8-bit rounding, 2e-11 with the second pass. */
static double f32_limit(cpu_act_mode act) {
    return act == CPU_ACT_Q8 ? 2e-5 : 1e-9;
}

static void check_matmul(cpu_isa isa, cpu_act_mode act, al_backend *fast1, al_backend *fast3,
                         al_backend *ref, const mm_case *c, mm_worst *worst) {
    uint64_t rb;
    uint8_t *w = random_weights(c->type, c->n_in, c->n_out, &rb);
    float *x = test_floats(c->n_in * c->n_tok, 1.0f);
    float *bias = c->bias ? test_floats(c->n_out, 1.0f) : NULL;
    const int64_t n_o = c->n_out * c->n_tok;
    float *o_fast = calloc((size_t)n_o, 4), *o_ref = calloc((size_t)n_o, 4),
          *o_refq = calloc((size_t)n_o, 4);
    float *o_split = calloc((size_t)n_o, 4), *o_three = calloc((size_t)n_o, 4);
    run_matmul(fast1, x, w, c->type, rb, bias, c, 0, c->n_tok, o_fast);
    run_matmul(ref, x, w, c->type, rb, bias, c, 0, c->n_tok, o_ref);
    memcpy(o_refq, o_ref, (size_t)n_o * 4);
    if (cpu_qtype_get(c->type)) {
        float *xq = malloc((size_t)(c->n_in * c->n_tok) * 4);
        round_activations(isa, act, c->type, x, c->n_in, c->n_tok, xq);
        run_matmul(ref, xq, w, c->type, rb, bias, c, 0, c->n_tok, o_refq);
        free(xq);
    }
    float *mag = magnitudes(ref, w, rb, x, c);
    double den = 0, den_mag = 0;
    for (int64_t i = 0; i < n_o; i++)
        den += (double)o_ref[i] * o_ref[i], den_mag += (double)mag[i] * mag[i];
    const double d_q = sq_diff(o_fast, o_refq, n_o), d_f = sq_diff(o_fast, o_ref, n_o);
    const double e_exact = d_q / den_mag, e_f32 = d_f / den_mag;
    /* the same tokens in uneven pieces, and with three threads */
    for (int t0 = 0, step = 1; t0 < c->n_tok; t0 += step, step = step * 2 + 1)
        run_matmul(fast1, x, w, c->type, rb, bias, c, t0,
                   step < c->n_tok - t0 ? step : c->n_tok - t0, o_split);
    run_matmul(fast3, x, w, c->type, rb, bias, c, 0, c->n_tok, o_three);
    const bool same =
        !memcmp(o_fast, o_split, (size_t)n_o * 4) && !memcmp(o_fast, o_three, (size_t)n_o * 4);
    CHECK_MSG(e_exact <= 1e-10 && e_f32 <= f32_limit(act) && same,
              "%s %s n_in %lld n_out %lld n_tok %d: error %.2e (rounded activations), %.2e (f32)%s",
              cpu_isa_name(isa), quant_type_name(c->type), (long long)c->n_in, (long long)c->n_out,
              c->n_tok, e_exact, e_f32, same ? "" : "; batch split or threads changed the result");
    if (e_exact > worst->exact) worst->exact = e_exact;
    if (e_f32 > worst->f32) worst->f32 = e_f32;
    worst->num_q += d_q, worst->num_f += d_f, worst->den += den;
    worst->n_split_diff += !same;
    free(w), free(x), free(bias), free(o_fast), free(o_ref), free(o_refq), free(o_split),
        free(o_three), free(mag);
}

static const uint32_t g_types[] = {AL_TYPE_Q4_0, AL_TYPE_Q4_1, AL_TYPE_Q5_0, AL_TYPE_Q5_1,
                                   AL_TYPE_Q8_0, AL_TYPE_Q2_K, AL_TYPE_Q3_K, AL_TYPE_Q4_K,
                                   AL_TYPE_Q5_K, AL_TYPE_Q6_K, AL_TYPE_MXFP4, AL_TYPE_F16,
                                   AL_TYPE_BF16, AL_TYPE_F32};
enum { N_TYPES = sizeof g_types / sizeof g_types[0] };

static void matmul_cases(cpu_isa isa, cpu_act_mode act) {
    const int64_t max_cols = 4352;
    al_backend *f1 = backend_act(isa, act, 1, max_cols, 128),
               *f3 = backend_act(isa, act, 3, max_cols, 128);
    al_backend *ref = backend(CPU_ISA_REF, 3, max_cols, 128);
    CHECK(f1 && f3 && ref);
    /* 48: whole panels, where one token takes a narrow tile (cpu_kernels.narrow), and
     * the batch split below compares it with the token's results in a batch */
    static const int64_t n_outs[] = {1, 3, 17, 33, 48};
    static const int n_toks[] = {1, 2, 3, 5, 8, 17, 64};
    const char *mode = act == CPU_ACT_Q8 ? "q8" : "q8x2";
    for (int ti = 0; f1 && f3 && ref && ti < N_TYPES; ti++) {
        const uint32_t type = g_types[ti];
        const int64_t blk = quant_get_traits(type)->block_size == 256 ? 256 : 32;
        mm_worst worst = {0};
        int n_cases = 0;
        for (int oi = 0; oi < 5; oi++)
            for (int ki = 0; ki < 7; ki++) {
                /* K: 3 blocks, or a K that is no multiple of 64 (512 for K-quants) */
                const int64_t n_in = (ki % 2 ? 3 : blk == 256 ? 5 : 13) * (blk == 1 ? 32 : blk);
                mm_case c = {type, n_in, n_outs[oi], n_toks[ki], (ki + oi) % 3 == 0};
                check_matmul(isa, act, f1, f3, ref, &c, &worst);
                n_cases++;
            }
        /* long rows: several K chunks, for one token and for a batch */
        for (int n_tok = 1; n_tok <= 33; n_tok += 32) {
            mm_case c = {type, 17 * 256, 19, n_tok, true};
            check_matmul(isa, act, f1, f3, ref, &c, &worst);
            n_cases++;
        }
        const double nq = worst.num_q / worst.den, nf = worst.num_f / worst.den;
        printf("     %-6s %-4s %-5s %2d cases: NMSE %.1e (rounded activations), %.1e (f32); "
               "worst scaled error %.1e, %.1e\n",
               cpu_isa_name(isa), mode, quant_type_name(type), n_cases, nq, nf, worst.exact,
               worst.f32);
        CHECK_MSG(nq <= 1e-10 && worst.n_split_diff == 0, "%s %s %s: NMSE %.2e, %.2e",
                  cpu_isa_name(isa), mode, quant_type_name(type), nq, nf);
    }
    /* the kernels that read a token's narrow tile in place from rows got some (one pass,
     * or both in one tile of 2; x16_cases checks those that read it from x16 only) */
    if (f1 && ((cpu_backend *)f1)->k->narrow && ((cpu_backend *)f1)->k->inplace_types)
        CHECK_MSG(((cpu_backend *)f1)->n_narrow > 0, "%s: no matmul took a narrow tile",
                  cpu_isa_name(isa));
    if (f1) f1->ops->destroy(f1);
    if (f3) f3->ops->destroy(f3);
    if (ref) ref->ops->destroy(ref);
}

static void test_matmul_isa(cpu_isa isa) {
    if (!cpu_isa_available(isa)) {
        TEST_SKIP("this CPU cannot run %s", cpu_isa_name(isa));
        return;
    }
    matmul_cases(isa, CPU_ACT_Q8X2);
    matmul_cases(isa, CPU_ACT_Q8);
}

static void test_matmul_scalar(void) {
    test_matmul_isa(CPU_ISA_SCALAR);
}
static void test_matmul_avx2(void) {
    test_matmul_isa(CPU_ISA_AVX2);
}
static void test_matmul_avx512(void) {
    test_matmul_isa(CPU_ISA_AVX512);
}

/* A batch longer than the scratch holds is split into passes. */
static void test_matmul_passes(void) {
    for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) continue;
        al_backend *f1 = backend((cpu_isa)isa, 2, 512, 9), *ref = backend(CPU_ISA_REF, 1, 512, 9);
        al_backend *f3 = backend((cpu_isa)isa, 3, 512, 9);
        mm_worst worst = {0};
        mm_case c = {AL_TYPE_Q4_K, 512, 20, 50, false};
        check_matmul((cpu_isa)isa, CPU_ACT_Q8X2, f1, f3, ref, &c, &worst);
        f1->ops->destroy(f1);
        f3->ops->destroy(f3);
        ref->ops->destroy(ref);
    }
}

/* ---- AMX ------------------------------------------------------------------------------ */
/* Batches on AMX tiles (ops.h) give the VNNI kernels' results bit for bit, for every
 * weight type AMX takes, in both activation modes: rows that leave a short last panel,
 * batches that are no multiple of the tile (zero rows in the last one), K over several
 * chunks (chunked differently from VNNI's with one pass), odd counts of sub-blocks, one
 * and three threads, with and without a bias, and a batch longer than the scratch. */

/* every type the integer kernels (and AMX) take */
static const uint32_t g_int8_types[] = {AL_TYPE_Q4_0, AL_TYPE_Q4_1, AL_TYPE_Q5_0, AL_TYPE_Q5_1,
                                       AL_TYPE_Q8_0, AL_TYPE_MXFP4, AL_TYPE_Q2_K, AL_TYPE_Q3_K,
                                       AL_TYPE_Q4_K, AL_TYPE_Q5_K, AL_TYPE_Q6_K};

/* The first output where a and b differ, or -1. */
static int64_t first_diff(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, 4)) return i;
    return -1;
}

/* One shape: VNNI against AMX on one thread and on three; true when all agree. */
static bool amx_case(al_backend *vnni, al_backend *amx1, al_backend *amx3, const mm_case *c) {
    uint64_t rb;
    uint8_t *w = random_weights(c->type, c->n_in, c->n_out, &rb);
    float *x = test_floats(c->n_in * c->n_tok, 1.0f);
    float *bias = c->bias ? test_floats(c->n_out, 1.0f) : NULL;
    const int64_t n_o = c->n_out * c->n_tok;
    float *o_v = calloc((size_t)n_o, 4), *o_1 = calloc((size_t)n_o, 4),
          *o_3 = calloc((size_t)n_o, 4);
    run_matmul(vnni, x, w, c->type, rb, bias, c, 0, c->n_tok, o_v);
    run_matmul(amx1, x, w, c->type, rb, bias, c, 0, c->n_tok, o_1);
    run_matmul(amx3, x, w, c->type, rb, bias, c, 0, c->n_tok, o_3);
    const int64_t d1 = first_diff(o_v, o_1, n_o), d3 = first_diff(o_v, o_3, n_o);
    const int64_t d = d1 >= 0 ? d1 : d3;
    CHECK_MSG(d < 0,
              "%s %s n_in %lld n_out %lld n_tok %d: AMX (%d threads) differs from VNNI at "
              "token %lld row %lld: %.9g vs %.9g",
              vnni->desc, quant_type_name(c->type), (long long)c->n_in, (long long)c->n_out,
              c->n_tok, d1 >= 0 ? 1 : 3, (long long)(d / c->n_out), (long long)(d % c->n_out),
              d >= 0 ? (double)(d1 >= 0 ? o_1 : o_3)[d] : 0.0, d >= 0 ? (double)o_v[d] : 0.0);
    free(w), free(x), free(bias), free(o_v), free(o_1), free(o_3);
    return d < 0;
}

static al_backend *amx_backend(cpu_act_mode act, int n_threads, int64_t max_cols, int64_t max_ctx) {
    al_backend *be = backend_act(CPU_ISA_AVX512, act, n_threads, max_cols, max_ctx);
    if (be && cpu_backend_set_amx(be, true) != AL_OK) {
        be->ops->destroy(be);
        return NULL;
    }
    return be;
}

static void amx_cases(cpu_act_mode act, int64_t max_ctx) {
    const int64_t max_cols = 4352;
    al_backend *vnni = backend_act(CPU_ISA_AVX512, act, 2, max_cols, max_ctx);
    al_backend *amx1 = amx_backend(act, 1, max_cols, max_ctx),
               *amx3 = amx_backend(act, 3, max_cols, max_ctx);
    CHECK(vnni && amx1 && amx3 && strstr(amx1->desc, "+amx") && !strstr(vnni->desc, "amx"));
    static const int64_t n_outs[] = {17, 48, 71};
    static const int n_toks[] = {9, 16, 40, 100};
    const char *mode = act == CPU_ACT_Q8 ? "q8" : "q8x2";
    for (size_t ti = 0; vnni && amx1 && amx3 && ti < sizeof g_int8_types / 4; ti++) {
        const uint32_t type = g_int8_types[ti];
        const bool kq = quant_get_traits(type)->block_size == 256;
        int n_cases = 0, n_same = 0;
        for (int oi = 0; oi < 3; oi++)
            for (int ki = 0; ki < 4; ki++) {
                /* an odd number of sub-blocks, or 17 super-blocks' worth: several chunks */
                const int64_t n_in = ki % 2 ? 17 * 256 : kq ? 5 * 256 : 13 * 32;
                const mm_case c = {type, n_in, n_outs[oi], n_toks[ki], (ki + oi) % 2 == 0};
                n_same += amx_case(vnni, amx1, amx3, &c);
                n_cases++;
            }
        printf("     amx %-4s %-5s ctx %3lld: %d of %d shapes bit-identical to VNNI\n", mode,
               quant_type_name(type), (long long)max_ctx, n_same, n_cases);
    }
    if (vnni) vnni->ops->destroy(vnni);
    if (amx1) amx1->ops->destroy(amx1);
    if (amx3) amx3->ops->destroy(amx3);
}

static void test_matmul_amx(void) {
    /* AMX is refused where it cannot run, and on other kernels than AVX-512 */
    al_backend *sc = backend(CPU_ISA_SCALAR, 1, 64, 8);
    CHECK(sc && cpu_backend_set_amx(sc, true) == AL_ERR_UNSUPPORTED && !strstr(sc->desc, "amx"));
    if (sc) sc->ops->destroy(sc);
    const char *why = cpu_amx_unavailable();
    if (why) {
        TEST_SKIP("no AMX here (%s): batches run on VNNI, which test_matmul_avx512 checks", why);
        return;
    }
    amx_cases(CPU_ACT_Q8X2, 128);
    amx_cases(CPU_ACT_Q8, 128);
    /* a scratch of 40 positions: 100 tokens in passes of 48, 48 and 4 */
    amx_cases(CPU_ACT_Q8X2, 40);
}

/* ---- the x16 layout --------------------------------------------------------------------- */
/* A weight weight_pack moved into the x16 layout (ops.h) gives the rows layout's results
 * bit for bit: one token and two (the in-place GEMV), batches (the packs, on VNNI and on
 * AMX), both activation modes, one thread and three, K over several chunks. weight_pack
 * leaves a weight it cannot take (rows or views that split a group of 16, a type without
 * fields, x16 turned off) as it was. */

static const uint32_t g_x16_types[] = {AL_TYPE_Q4_0, AL_TYPE_Q4_1, AL_TYPE_Q5_0,
                                       AL_TYPE_Q5_1, AL_TYPE_Q8_0, AL_TYPE_MXFP4,
                                       AL_TYPE_Q4_K, AL_TYPE_Q5_K, AL_TYPE_Q6_K};

/* weight_pack may drop the pages of the weight's memory (backend.h: it is the file
 * mapping), so it gets a copy, which it leaves in x16 or as it was. */
static al_tensor packed_copy(al_backend *be, const uint8_t *w, uint64_t rb, const mm_case *c,
                             int64_t view_rows, uint8_t **copy) {
    *copy = malloc(rb * (uint64_t)c->n_out);
    memcpy(*copy, w, rb * (uint64_t)c->n_out);
    al_tensor t = {.type = c->type, .ne = {c->n_in, c->n_out}, .data = *copy, .row_bytes = rb};
    CHECK(be->ops->weight_pack(be, &t, view_rows) == AL_OK);
    return t;
}

static bool x16_case(al_backend *rows, al_backend *x16, const mm_case *c) {
    uint64_t rb;
    uint8_t *w = random_weights(c->type, c->n_in, c->n_out, &rb), *copy;
    float *x = test_floats(c->n_in * c->n_tok, 1.0f);
    float *bias = c->bias ? test_floats(c->n_out, 1.0f) : NULL;
    const int64_t n_o = c->n_out * c->n_tok;
    float *o_r = calloc((size_t)n_o, 4), *o_x = calloc((size_t)n_o, 4);
    run_matmul(rows, x, w, c->type, rb, bias, c, 0, c->n_tok, o_r);
    al_tensor wt = packed_copy(x16, w, rb, c, c->n_out, &copy);
    CHECK_MSG(wt.layout == AL_LAYOUT_X16, "%s: weight_pack left %s [%lld x %lld] in rows",
              x16->desc, quant_type_name(c->type), (long long)c->n_in, (long long)c->n_out);
    al_tensor xt = test_f32(x, c->n_in, c->n_tok), ot = test_f32(o_x, c->n_out, c->n_tok);
    al_tensor bt = test_f32(bias, c->n_out, 1);
    x16->ops->matmul(x16, &xt, &wt, bias ? &bt : NULL, &ot);
    const int64_t d = first_diff(o_r, o_x, n_o);
    CHECK_MSG(d < 0, "%s %s n_in %lld n_out %lld n_tok %d: x16 differs from rows at token %lld "
              "row %lld: %.9g vs %.9g", x16->desc, quant_type_name(c->type), (long long)c->n_in,
              (long long)c->n_out, c->n_tok, (long long)(d / c->n_out), (long long)(d % c->n_out),
              d >= 0 ? (double)o_x[d] : 0.0, d >= 0 ? (double)o_r[d] : 0.0);
    free(w), free(copy), free(x), free(bias), free(o_r), free(o_x);
    return d < 0;
}

static void x16_cases(cpu_isa isa, cpu_act_mode act, bool amx, int n_threads) {
    const int64_t max_cols = 4352;
    al_backend *rows = backend_act(isa, act, 2, max_cols, 64);
    al_backend *x16 = amx ? amx_backend(act, n_threads, max_cols, 64)
                          : backend_act(isa, act, n_threads, max_cols, 64);
    CHECK(rows && x16);
    static const int n_toks[] = {1, 2, 3, 9, 40};
    for (size_t ti = 0; rows && x16 && ti < sizeof g_x16_types / 4; ti++) {
        const uint32_t type = g_x16_types[ti];
        const bool kq = quant_get_traits(type)->block_size == 256;
        int n_cases = 0, n_same = 0;
        for (int oi = 0; oi < 2; oi++)
            for (int ki = 0; ki < 5; ki++) {
                const int64_t n_in = ki == 4 ? 17 * 256 : kq ? 5 * 256 : 13 * 32;
                const mm_case c = {type, n_in, oi ? 48 : 16, n_toks[ki], (ki + oi) % 2 == 0};
                n_same += x16_case(rows, x16, &c);
                n_cases++;
            }
        printf("     x16 %s %-5s %d thread%s: %d of %d shapes bit-identical to rows\n",
               x16->desc, quant_type_name(type), n_threads, n_threads > 1 ? "s" : "", n_same,
               n_cases);
    }
    /* one token took its narrow tile (cpu_kernels.narrow) where the kernels read it:
     * the rows backend, which packs its panels, gave the bits compared with */
    if (rows && x16 && ((cpu_backend *)x16)->k->narrow && !amx)
        CHECK_MSG(((cpu_backend *)x16)->n_narrow > 0, "%s: no matmul took a narrow tile",
                  x16->desc);
    if (rows) rows->ops->destroy(rows);
    if (x16) x16->ops->destroy(x16);
}

/* weight_pack leaves w in rows; true when it did. */
static bool stays_rows(al_backend *be, uint32_t type, int64_t n_out, int64_t view_rows) {
    const mm_case c = {type, 256, n_out, 1, false};
    uint64_t rb;
    uint8_t *w = random_weights(type, c.n_in, n_out, &rb), *copy;
    al_tensor t = packed_copy(be, w, rb, &c, view_rows, &copy);
    const bool same = t.layout == AL_LAYOUT_ROWS && t.data == copy && !memcmp(copy, w, rb * n_out);
    free(w), free(copy);
    return same;
}

/* An ISA's rewrite writes cpu_x16_pack's bytes, for every type and from a group other
 * than the first. */
static void x16_rewrite_same(cpu_isa isa) {
    const cpu_kernels *k = kernels_of(isa);
    CHECK(k->x16_pack != NULL);
    for (size_t ti = 0; k->x16_pack && ti < sizeof g_x16_types / 4; ti++) {
        const uint32_t type = g_x16_types[ti];
        const int64_t n_in = 3 * 256, n_out = 48;
        uint64_t rb;
        uint8_t *w = random_weights(type, n_in, n_out, &rb);
        const uint64_t n = rb * n_out;
        uint8_t *a = calloc(1, n), *b = calloc(1, n);
        const int64_t n_blk = n_in / quant_get_traits(type)->block_size;
        cpu_x16_pack(type, w, a, rb, n_blk, 1, 3);
        k->x16_pack(type, w, b, rb, n_blk, 1, 3);
        CHECK_MSG(!memcmp(a, b, n) && memcmp(a + 16 * rb, w + 16 * rb, 32 * rb),
                  "%s: the %s x16 rewrite differs from cpu_x16_pack", quant_type_name(type),
                  cpu_isa_name(isa));
        free(w), free(a), free(b);
    }
}

/* One ISA's x16 weights against its rows; the packs of batches also on AMX. */
static void x16_isa(cpu_isa isa) {
    al_backend *be = backend(isa, 1, 256, 8);
    CHECK(be && stays_rows(be, AL_TYPE_Q4_0, 17, 17) && stays_rows(be, AL_TYPE_Q4_0, 32, 8) &&
          stays_rows(be, AL_TYPE_Q2_K, 32, 32) && stays_rows(be, AL_TYPE_F16, 32, 32));
    if (be) cpu_backend_set_x16(be, false);
    CHECK(be && stays_rows(be, AL_TYPE_Q4_0, 32, 32));
    if (be) be->ops->destroy(be);
    x16_cases(isa, CPU_ACT_Q8, false, 1);
    x16_cases(isa, CPU_ACT_Q8X2, false, 3);
    x16_rewrite_same(isa);
    if (isa != CPU_ISA_AVX512) return;
    if (cpu_amx_unavailable()) {
        TEST_SKIP("no AMX here (%s): x16 batches checked on VNNI only", cpu_amx_unavailable());
        return;
    }
    x16_cases(isa, CPU_ACT_Q8, true, 3);
    x16_cases(isa, CPU_ACT_Q8X2, true, 1);
}

static void test_matmul_x16(void) {
    al_backend *sc = backend(CPU_ISA_SCALAR, 1, 256, 8);
    CHECK(sc && stays_rows(sc, AL_TYPE_Q4_0, 32, 32));
    if (sc) sc->ops->destroy(sc);
    int n_run = 0;
    for (int isa = CPU_ISA_AVX2; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) {
            printf("     this CPU cannot run %s: its x16 kernels untested here\n",
                   cpu_isa_name((cpu_isa)isa));
            continue;
        }
        x16_isa((cpu_isa)isa);
        n_run++;
    }
    if (!n_run) TEST_SKIP("this CPU runs none of the kernels that read the x16 layout");
}

/* Random weights of type with every quant bit set (Q8_0 at -128, MXFP4 at code 7),
 * keeping their f16 scales. */
static uint8_t *extreme_weights(uint32_t type, int64_t n_in, int64_t n_out, uint64_t *rb) {
    uint8_t *w = random_weights(type, n_in, n_out, rb);
    const int bs = (int)quant_get_traits(type)->type_size;
    int off[2];
    const int nf = f16_fields(type, off);
    for (uint64_t b = 0; b < *rb * n_out / bs; b++) {
        uint8_t *blk = w + b * bs, keep[4];
        for (int k = 0; k < nf; k++) memcpy(keep + 2 * k, blk + off[k], 2);
        memset(blk, type == AL_TYPE_Q8_0 ? 0x80 : 0xFF, bs);
        if (type == AL_TYPE_MXFP4) memset(blk, 0x77, bs);
        for (int k = 0; k < nf; k++) memcpy(blk + off[k], keep + 2 * k, 2);
        if (type == AL_TYPE_MXFP4) blk[0] = 127;
    }
    return w;
}

/* Weights at their largest integers times activations that round to 127: the narrow
 * integer sums (AVX2 adds cpu_n16 groups of pmaddubsw products in int16) must not
 * overflow. Each ISA, in the rows and the x16 layouts, against the portable kernels. */
static void test_matmul_extreme(void) {
    const mm_case c0 = {0, 512, 32, 5, false};
    al_backend *sc = backend_act(CPU_ISA_SCALAR, CPU_ACT_Q8, 1, c0.n_in, 8);
    float *x = malloc(c0.n_in * c0.n_tok * 4), *o_s = malloc(c0.n_out * c0.n_tok * 4);
    float *o_r = malloc(c0.n_out * c0.n_tok * 4), *o_x = malloc(c0.n_out * c0.n_tok * 4);
    for (int64_t i = 0; i < c0.n_in * c0.n_tok; i++)
        x[i] = 1.0f;
    for (int isa = CPU_ISA_AVX2; sc && isa < CPU_ISA_COUNT; isa++) {
        al_backend *be = cpu_isa_available((cpu_isa)isa)
                             ? backend_act((cpu_isa)isa, CPU_ACT_Q8, 2, c0.n_in, 8) : NULL;
        for (size_t ti = 0; be && ti < sizeof g_int8_types / 4; ti++)
            for (int nt = 1; nt <= c0.n_tok; nt += 1 + (nt > 1) * 2) {
                const mm_case c = {g_int8_types[ti], c0.n_in, c0.n_out, nt, false};
                uint64_t rb;
                uint8_t *w = extreme_weights(c.type, c.n_in, c.n_out, &rb), *copy;
                run_matmul(sc, x, w, c.type, rb, NULL, &c, 0, nt, o_s);
                run_matmul(be, x, w, c.type, rb, NULL, &c, 0, nt, o_r);
                al_tensor wt = packed_copy(be, w, rb, &c, c.n_out, &copy);
                al_tensor xt = test_f32(x, c.n_in, nt), ot = test_f32(o_x, c.n_out, nt);
                be->ops->matmul(be, &xt, &wt, NULL, &ot);
                const double er = test_nmse(o_r, o_s, c.n_out * nt);
                const double ex = test_nmse(o_x, o_s, c.n_out * nt);
                CHECK_MSG(er < 1e-10 && ex < 1e-10, "%s %s %d tokens: NMSE %.3g (rows), %.3g (x16)",
                          be->desc, quant_type_name(c.type), nt, er, ex);
                free(w), free(copy);
            }
        if (be) be->ops->destroy(be);
    }
    if (sc) sc->ops->destroy(sc);
    free(x), free(o_s), free(o_r), free(o_x);
}

/* The same on AMX tiles, whose epilogue converts a sub-block's sum to float exactly only
 * below 2^22 (kernels_amx.c): the largest sums give VNNI's bits. */
static void test_matmul_extreme_amx(void) {
    const char *why = cpu_amx_unavailable();
    if (why) {
        TEST_SKIP("no AMX here (%s)", why);
        return;
    }
    const mm_case c0 = {0, 512, 32, 40, false};
    al_backend *vnni = backend_act(CPU_ISA_AVX512, CPU_ACT_Q8, 2, c0.n_in, 64);
    al_backend *amx = amx_backend(CPU_ACT_Q8, 2, c0.n_in, 64);
    CHECK(vnni && amx);
    float *x = malloc(c0.n_in * c0.n_tok * 4), *o_v = malloc(c0.n_out * c0.n_tok * 4);
    float *o_a = malloc(c0.n_out * c0.n_tok * 4);
    for (int64_t i = 0; i < c0.n_in * c0.n_tok; i++)
        x[i] = i % 3 ? 1.0f : -1.0f; /* activations of 127 and -127 */
    for (size_t ti = 0; vnni && amx && ti < sizeof g_int8_types / 4; ti++) {
        const mm_case c = {g_int8_types[ti], c0.n_in, c0.n_out, c0.n_tok, false};
        uint64_t rb;
        uint8_t *w = extreme_weights(c.type, c.n_in, c.n_out, &rb);
        run_matmul(vnni, x, w, c.type, rb, NULL, &c, 0, c.n_tok, o_v);
        run_matmul(amx, x, w, c.type, rb, NULL, &c, 0, c.n_tok, o_a);
        const int64_t d = first_diff(o_v, o_a, c.n_out * c.n_tok);
        CHECK_MSG(d < 0, "%s: AMX differs from VNNI at output %lld: %.9g vs %.9g",
                  quant_type_name(c.type), (long long)d, d >= 0 ? (double)o_a[d] : 0.0,
                  d >= 0 ? (double)o_v[d] : 0.0);
        free(w);
    }
    if (vnni) vnni->ops->destroy(vnni);
    if (amx) amx->ops->destroy(amx);
    free(x), free(o_v), free(o_a);
}

/* Every ISA's own MXFP4 pack writes the panel the portable decoder does, byte for byte,
 * for every scale byte 0..255: the subnormal scales (e < 2) and 2^127 (e = 255, whose
 * m = -12 dw is -inf) included, which random matmul weights do not reach. */
static void test_mxfp4_pack(void) {
    for (int isa = CPU_ISA_AVX2; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) {
            TEST_SKIP("this CPU cannot run %s", cpu_isa_name((cpu_isa)isa));
            continue;
        }
        const cpu_kernels *k = kernels_of((cpu_isa)isa);
        const int r = k->rows, n_blk = 256;
        const uint64_t rb = (uint64_t)n_blk * 17, n_panel = (uint64_t)(n_blk * cpu_sb_bytes(r, 32));
        uint8_t *w = malloc(rb * (uint64_t)r);
        for (uint64_t i = 0; i < rb * (uint64_t)r; i++)
            w[i] = (uint8_t)test_rnd();
        for (int row = 0; row < r; row++) /* block b of row `row` has scale (b + 13 row) % 256 */
            for (int b = 0; b < n_blk; b++)
                w[(uint64_t)row * rb + (uint64_t)b * 17] = (uint8_t)(b + 13 * row);
        uint8_t *fast = aligned_alloc(64, n_panel), *port = aligned_alloc(64, n_panel);
        CHECK(k->pack_q[AL_TYPE_MXFP4] != NULL);
        if (k->pack_q[AL_TYPE_MXFP4]) {
            /* from block 3 on: the pack must honour blk0 */
            k->pack_q[AL_TYPE_MXFP4](AL_TYPE_MXFP4, w, rb, r, 3, n_blk - 3, fast);
            cpu_pack_q_generic(AL_TYPE_MXFP4, r, w, rb, r, 3, n_blk - 3, port);
            const uint64_t n = (uint64_t)((n_blk - 3) * cpu_sb_bytes(r, 32));
            CHECK_MSG(!memcmp(fast, port, n), "%s: the MXFP4 pack differs from the portable one",
                      cpu_isa_name((cpu_isa)isa));
        }
        free(w), free(fast), free(port);
    }
}

/* ---- attention --------------------------------------------------------------------- */

typedef struct attn_case {
    int n_head, n_head_kv, head_dim, n_past, n_tokens;
} attn_case;

/* One attention call over positions [pos, pos + n) of q, k, v. */
static void attend(al_backend *be, const attn_case *c, const float *q, const float *k,
                   const float *v, al_tensor *kc, al_tensor *vc, int pos, int n, float *out) {
    const int64_t qd = (int64_t)c->n_head * c->head_dim, kvd = (int64_t)c->n_head_kv * c->head_dim;
    al_tensor qt = test_f32((float *)q + pos * qd, qd, n);
    al_tensor kt = test_f32((float *)k + pos * kvd, kvd, n);
    al_tensor vt = test_f32((float *)v + pos * kvd, kvd, n);
    al_tensor ot = test_f32(out, qd, n);
    al_attn_shape s = {.n_head = c->n_head,
                       .n_head_kv = c->n_head_kv,
                       .head_dim = c->head_dim,
                       .n_past = pos,
                       .n_tokens = n};
    be->ops->attention(be, &qt, &kt, &vt, kc, vc, &s, &ot);
}

/* Fills the cache with n_past positions in one call, then attends n_tokens more in
 * the given pieces; out receives those n_tokens rows. */
static void run_attention(al_backend *be, const attn_case *c, const float *q, const float *k,
                          const float *v, const int *pieces, float *out) {
    const int64_t n_ctx = c->n_past + c->n_tokens;
    const int64_t qd = (int64_t)c->n_head * c->head_dim, kvd = (int64_t)c->n_head_kv * c->head_dim;
    float *kc = calloc((size_t)(n_ctx * kvd), 4), *vc = calloc((size_t)(n_ctx * kvd), 4);
    al_tensor kct = test_f32(kc, kvd, n_ctx), vct = test_f32(vc, kvd, n_ctx);
    if (c->n_past > 0) {
        float *prefix = malloc((size_t)(c->n_past * qd) * 4);
        attend(be, c, q, k, v, &kct, &vct, 0, c->n_past, prefix);
        free(prefix);
    }
    for (int pos = c->n_past, i = 0; pos < n_ctx; i++) {
        const int n = pieces[i] < n_ctx - pos ? pieces[i] : (int)(n_ctx - pos);
        attend(be, c, q, k, v, &kct, &vct, pos, n, out + (pos - c->n_past) * qd);
        pos += n;
    }
    free(kc), free(vc);
}

static void test_attention(void) {
    static const attn_case cases[] = {
        {4, 2, 64, 0, 1}, {4, 2, 64, 0, 17},  {4, 2, 64, 5, 3},  {8, 8, 32, 33, 40},
        {6, 2, 40, 7, 9}, {3, 1, 128, 70, 1}, {2, 2, 80, 0, 64}, {14, 2, 64, 31, 33},
        /* GQA 8 and 16, heads of 128: the pieces of one and two tokens take attn_few
         * where a kernel has it, the batch attn */
        {16, 2, 64, 40, 5}, {16, 1, 128, 33, 3}, {8, 2, 128, 70, 4}, {32, 8, 64, 65, 3},
        /* many tiles per kv head: each thread copies a head's keys and values first */
        {16, 4, 64, 40, 100},
        /* latent attention's rows (mla.c): 16 query heads on one row of 512 + 64, and
         * a smaller one in a batch */
        {16, 1, 576, 40, 2}, {4, 1, 288, 20, 33},
    };
    static const int one_batch[] = {1000}, pieces[] = {1, 5, 2, 1000};
    for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) continue;
        double worst = 0;
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
            const attn_case *c = &cases[ci];
            const int64_t n_ctx = c->n_past + c->n_tokens;
            const int64_t qd = (int64_t)c->n_head * c->head_dim,
                          kvd = (int64_t)c->n_head_kv * c->head_dim;
            float *q = test_floats(n_ctx * qd, 2.0f), *k = test_floats(n_ctx * kvd, 2.0f);
            float *v = test_floats(n_ctx * kvd, 1.0f);
            const int64_t n_o = c->n_tokens * qd;
            float *o_ref = calloc((size_t)n_o, 4), *o_fast = calloc((size_t)n_o, 4);
            float *o_split = calloc((size_t)n_o, 4);
            al_backend *ref = backend(CPU_ISA_REF, 1, qd, n_ctx);
            al_backend *f3 = backend((cpu_isa)isa, 3, qd, n_ctx),
                       *f1 = backend((cpu_isa)isa, 1, qd, n_ctx);
            run_attention(ref, c, q, k, v, one_batch, o_ref);
            run_attention(f3, c, q, k, v, one_batch, o_fast);
            run_attention(f1, c, q, k, v, pieces, o_split);
            const double e = test_nmse(o_fast, o_ref, n_o);
            const bool same = !memcmp(o_fast, o_split, (size_t)n_o * 4);
            CHECK_MSG(e <= 1e-10 && same, "%s heads %d/%d dim %d past %d tokens %d: NMSE %.2e%s",
                      cpu_isa_name((cpu_isa)isa), c->n_head, c->n_head_kv, c->head_dim, c->n_past,
                      c->n_tokens, e, same ? "" : "; pieces or threads changed the result");
            if (e > worst) worst = e;
            ref->ops->destroy(ref), f3->ops->destroy(f3), f1->ops->destroy(f1);
            free(q), free(k), free(v), free(o_ref), free(o_fast), free(o_split);
        }
        printf("     %-6s attention: worst NMSE %.1e over %zu shapes\n", cpu_isa_name((cpu_isa)isa),
               worst, sizeof cases / sizeof *cases);
    }
}

/* ---- ring caches, sliding windows, scale -------------------------------------------- */
/* A model's sliding layers keep a ring of cap rows (backend.h al_attn_shape): position p
 * lives in row p % cap and a query at p sees the last `window` positions. These cases
 * run long enough for the ring to wrap many times, in a prompt batch and then pieces
 * down to single-token decode steps, and compare every position's output with a naive
 * attention over the whole sequence in double. */

typedef struct ring_case {
    int n_head, n_head_kv, head_dim;
    int window; /* 0: every earlier position */
    int cap;    /* rows of the ring; 0: n_pos (no wrap) */
    float scale;
    int n_pos; /* positions in all */
    int first; /* the first batch (a prompt); then pieces of 1, 3, 1, 1, 6, 2 */
} ring_case;

typedef struct ring_data {
    const ring_case *c;
    int64_t qd, kvd;
    float *q, *k, *v; /* [n_pos][qd or kvd] */
    float *sinks;     /* [n_head], or NULL */
} ring_data;

/* The largest batch a call at n_past may take with a ring of cap rows (backend.h). */
static int ring_max_batch(const ring_case *c, int cap, int n_past) {
    const int no_wrap = cap - n_past, sliding = c->window > 0 ? cap - c->window + 1 : 0;
    return no_wrap > sliding ? no_wrap : sliding;
}

/* Attends every position, in batches of the schedule (first, then the pieces) or, with
 * greedy, of the largest size the ring allows; out is [n_pos][qd]. */
static void run_ring(al_backend *be, const ring_data *d, int cap, bool greedy, float *out) {
    static const int pieces[] = {1, 3, 1, 1, 6, 2};
    const ring_case *c = d->c;
    float *kc = calloc((size_t)(cap * d->kvd), 4), *vc = calloc((size_t)(cap * d->kvd), 4);
    al_tensor kct = test_f32(kc, d->kvd, cap), vct = test_f32(vc, d->kvd, cap);
    const al_tensor sinks = test_f32(d->sinks, c->n_head, 1);
    for (int pos = 0, i = 0; pos < c->n_pos; i++) {
        int n = greedy ? c->n_pos : i == 0 ? c->first : pieces[(i - 1) % 6];
        const int lim = ring_max_batch(c, cap, pos);
        if (n > lim) n = lim;
        if (n > c->n_pos - pos) n = c->n_pos - pos;
        al_tensor qt = test_f32(d->q + pos * d->qd, d->qd, n);
        al_tensor kt = test_f32(d->k + pos * d->kvd, d->kvd, n);
        al_tensor vt = test_f32(d->v + pos * d->kvd, d->kvd, n);
        al_tensor ot = test_f32(out + pos * d->qd, d->qd, n);
        al_attn_shape s = {.n_head = c->n_head, .n_head_kv = c->n_head_kv,
                           .head_dim = c->head_dim, .n_past = pos, .n_tokens = n,
                           .scale = c->scale, .window = c->window,
                           .sinks = d->sinks ? &sinks : NULL};
        be->ops->attention(be, &qt, &kt, &vt, &kct, &vct, &s, &ot);
        pos += n;
    }
    free(kc), free(vc);
}

/* The oracle: softmax(scale q.k) v over positions max(0, p - window + 1) .. p of the
 * whole sequence, in double, with the head's sink (if any) one more unscaled logit in
 * the maximum and the denominator; out is [n_pos][qd]. */
static void naive_ring(const ring_data *d, float *out) {
    const ring_case *c = d->c;
    const int hd = c->head_dim, g = c->n_head / c->n_head_kv;
    const double scale = c->scale != 0 ? c->scale : 1.0 / sqrt((double)hd);
    double *w = malloc((size_t)c->n_pos * sizeof *w);
    for (int p = 0; p < c->n_pos; p++)
        for (int h = 0; h < c->n_head; h++) {
            const int lo = c->window > 0 && p - c->window + 1 > 0 ? p - c->window + 1 : 0;
            const float *q = d->q + p * d->qd + h * hd;
            const double sink = d->sinks ? d->sinks[h] : -INFINITY;
            double mx = sink, sum = 0;
            for (int j = lo; j <= p; j++) {
                const float *k = d->k + j * d->kvd + (h / g) * hd;
                double dot = 0;
                for (int i = 0; i < hd; i++)
                    dot += (double)q[i] * k[i];
                w[j] = dot * scale;
                if (w[j] > mx) mx = w[j];
            }
            if (d->sinks) sum = exp(sink - mx);
            for (int j = lo; j <= p; j++)
                sum += w[j] = exp(w[j] - mx);
            for (int i = 0; i < hd; i++) {
                double o = 0;
                for (int j = lo; j <= p; j++)
                    o += w[j] * d->v[j * d->kvd + (h / g) * hd + i];
                out[p * d->qd + h * hd + i] = (float)(o / sum);
            }
        }
    free(w);
}

static const ring_case g_ring_cases[] = {
    {4, 2, 64, 0, 0, 0.0f, 50, 17},      /* no window: as test_attention */
    {4, 2, 64, 0, 0, 0.3f, 40, 9},       /* an explicit scale */
    {4, 1, 64, 8, 12, 0.0f, 70, 5},      /* a ring smaller than a key step wraps inside it */
    {8, 2, 32, 40, 47, 0.125f, 150, 30}, /* a window over two key steps */
    {6, 2, 40, 19, 26, 0.0f, 90, 8},     /* an odd head size: the portable kernel */
    {2, 1, 256, 33, 40, 0.0625f, 100, 8},/* Gemma 3's heads */
    {2, 1, 288, 10, 16, 0.0f, 60, 7},    /* beyond CPU_ATTN_MAX_DIM: the reference */
    {14, 2, 64, 1, 4, 0.0f, 30, 4},      /* a window of one: each query sees itself */
    {4, 4, 16, 100, 130, 0.0f, 90, 40},  /* a window longer than the sequence */
    /* prompts of many tiles per kv head: each thread attends over its own copy of a
     * head's keys and values (matmul.c attn_plan_copy), here in a wrapping ring */
    {16, 4, 64, 100, 200, 0.0f, 300, 120},
    /* keys over several ranges (matmul.c attn_plan_ranges), generated one at a time */
    {9, 3, 64, 0, 0, 0.0f, 700, 300},
    {4, 1, 128, 600, 640, 0.0f, 1000, 100},
};

static ring_data ring_data_make(const ring_case *c) {
    ring_data d = {.c = c,
                   .qd = (int64_t)c->n_head * c->head_dim,
                   .kvd = (int64_t)c->n_head_kv * c->head_dim};
    d.q = test_floats(c->n_pos * d.qd, 2.0f);
    d.k = test_floats(c->n_pos * d.kvd, 2.0f);
    d.v = test_floats(c->n_pos * d.kvd, 1.0f);
    return d;
}

/* The largest |a - b|; NaN if any difference is NaN, so that a check fails. */
static double max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]);
        if (!(e <= m)) m = e;
    }
    return m;
}

/* The reference against the naive attention, with the ring and without. */
static void test_attention_ring_ref(void) {
    double worst = 0;
    for (size_t ci = 0; ci < sizeof g_ring_cases / sizeof *g_ring_cases; ci++) {
        const ring_case *c = &g_ring_cases[ci];
        ring_data d = ring_data_make(c);
        const int64_t n_o = c->n_pos * d.qd;
        float *o_naive = malloc((size_t)n_o * 4), *o_ring = calloc((size_t)n_o, 4);
        float *o_full = calloc((size_t)n_o, 4);
        al_backend *ref = backend(CPU_ISA_REF, 2, d.qd, c->n_pos);
        naive_ring(&d, o_naive);
        run_ring(ref, &d, c->cap ? c->cap : c->n_pos, false, o_ring);
        run_ring(ref, &d, c->n_pos, false, o_full);
        const double e = max_abs_diff(o_ring, o_naive, n_o), n = test_nmse(o_ring, o_naive, n_o);
        const bool same = !memcmp(o_ring, o_full, (size_t)n_o * 4);
        CHECK_MSG(e <= 2e-6 && n <= 1e-12 && same,
                  "heads %d/%d dim %d window %d cap %d: max error %.1e NMSE %.1e%s", c->n_head,
                  c->n_head_kv, c->head_dim, c->window, c->cap, e, n,
                  same ? "" : "; the ring changed the result");
        if (e > worst) worst = e;
        ref->ops->destroy(ref);
        free(d.q), free(d.k), free(d.v), free(o_naive), free(o_ring), free(o_full);
    }
    printf("     ref    ring attention: worst error %.1e against the naive one over %zu cases\n",
           worst, sizeof g_ring_cases / sizeof *g_ring_cases);
}

/* ---- attention sinks ------------------------------------------------------------------ */
/* gpt-oss gives each query head a logit with no value (backend.h al_attn_shape.sinks).
 * The heads of a kv group get different sinks, so that a kernel which took another
 * lane's sink would show: moderate ones, of the size of the scores, which change the
 * output a lot; huge ones (1e4, 1e30: the head attends to nothing, out = 0); very
 * negative ones (-1e4: almost no effect); and -inf, which must be no sink at all, bit
 * for bit. Prompt batches, pieces down to single-token decode steps, GQA, windows and
 * rings that wrap, as above. */

static const float g_sink_values[8] = {0.5f, -2.0f, 1e4f, 2.5f, -1e4f, -INFINITY, 1e30f, 1.25f};

static const ring_case g_sink_cases[] = {
    {8, 2, 64, 0, 0, 0.0f, 50, 17},      /* no window, GQA 4 */
    {8, 2, 32, 40, 47, 0.125f, 150, 30}, /* a window over two key steps, a wrapping ring */
    {4, 1, 64, 8, 12, 0.0f, 70, 5},      /* a ring smaller than a key step */
    {6, 2, 40, 19, 26, 0.0f, 90, 8},     /* an odd head size: the portable kernel */
    {16, 2, 64, 16, 20, 0.0f, 60, 12},   /* gpt-oss's GQA 8 with a window */
    {2, 1, 288, 10, 16, 0.0f, 60, 7},    /* beyond CPU_ATTN_MAX_DIM: the reference */
    {8, 8, 16, 1, 4, 0.0f, 30, 4},       /* a window of one: the key against the sink */
    {4, 4, 64, 0, 0, 0.3f, 24, 24},      /* one prompt batch, no window */
    {16, 2, 64, 64, 96, 0.0f, 200, 80},  /* many tiles per kv head: a copy of each head */
};

static ring_data sink_data_make(const ring_case *c) {
    ring_data d = ring_data_make(c);
    d.sinks = malloc((size_t)c->n_head * sizeof(float));
    for (int h = 0; h < c->n_head; h++)
        d.sinks[h] = g_sink_values[h % 8];
    return d;
}

static void ring_data_free(ring_data *d) {
    free(d->q), free(d->k), free(d->v), free(d->sinks);
}

/* Whether the heads whose sink is -inf have the same bits in a as in b ([n_pos][qd]). */
static bool minus_inf_heads_same(const ring_data *d, const float *a, const float *b) {
    const int hd = d->c->head_dim;
    for (int p = 0; p < d->c->n_pos; p++)
        for (int h = 0; h < d->c->n_head; h++)
            if (d->sinks[h] == -INFINITY &&
                memcmp(a + p * d->qd + h * hd, b + p * d->qd + h * hd, (size_t)hd * 4))
                return false;
    return true;
}

/* The reference against the naive attention with sinks, with the ring and without; the
 * sinks must change the naive result (else the test would pass with them ignored). */
static void test_attention_sinks_ref(void) {
    double worst = 0;
    for (size_t ci = 0; ci < sizeof g_sink_cases / sizeof *g_sink_cases; ci++) {
        const ring_case *c = &g_sink_cases[ci];
        const int cap = c->cap ? c->cap : c->n_pos, hd = c->head_dim;
        ring_data d = sink_data_make(c), plain = d;
        plain.sinks = NULL;
        const int64_t n_o = c->n_pos * d.qd;
        float *o_naive = malloc((size_t)n_o * 4), *o_plain = malloc((size_t)n_o * 4);
        float *o_ring = calloc((size_t)n_o, 4), *o_full = calloc((size_t)n_o, 4);
        float *o_ref_plain = calloc((size_t)n_o, 4);
        al_backend *ref = backend(CPU_ISA_REF, 2, d.qd, c->n_pos);
        naive_ring(&d, o_naive);
        naive_ring(&plain, o_plain);
        run_ring(ref, &d, cap, false, o_ring);
        run_ring(ref, &d, c->n_pos, false, o_full);
        run_ring(ref, &plain, cap, false, o_ref_plain);
        const double e = max_abs_diff(o_ring, o_naive, n_o), n = test_nmse(o_ring, o_naive, n_o);
        const double effect = test_nmse(o_plain, o_naive, n_o);
        const bool same = !memcmp(o_ring, o_full, (size_t)n_o * 4);
        const bool inf_same = minus_inf_heads_same(&d, o_ring, o_ref_plain);
        bool zero = true; /* heads with a huge sink attend to nothing */
        for (int64_t i = 0; i < n_o; i++)
            if (d.sinks[(i % d.qd) / hd] >= 1e4f && o_ring[i] != 0.0f) zero = false;
        CHECK_MSG(e <= 2e-6 && n <= 1e-12 && same && effect >= 1e-3 && zero && inf_same,
                  "heads %d/%d dim %d window %d cap %d: max error %.1e NMSE %.1e, sinks move "
                  "the naive output by NMSE %.1e%s%s%s",
                  c->n_head, c->n_head_kv, hd, c->window, c->cap, e, n, effect,
                  same ? "" : "; the ring changed the result",
                  zero ? "" : "; a head with a huge sink is not 0",
                  inf_same ? "" : "; a -inf sink changed bits");
        if (e > worst) worst = e;
        ref->ops->destroy(ref);
        ring_data_free(&d);
        free(o_naive), free(o_plain), free(o_ring), free(o_full), free(o_ref_plain);
    }
    printf("     ref    attention sinks: worst error %.1e against the naive one over %zu cases\n",
           worst, sizeof g_sink_cases / sizeof *g_sink_cases);
}

/* Each fast ISA against the reference over cases; its result must not depend on the
 * ring, the batch split or the thread count, and with sinks a -inf sink must be no
 * sink. */
static void attention_fast(const ring_case *cases, size_t n_cases, bool sinks,
                           const char *what) {
    for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) continue;
        double worst = 0;
        uint64_t ranged = 0; /* calls attended in ranges of keys */
        bool ranges = false; /* the ISA's kernels take them */
        for (size_t ci = 0; ci < n_cases; ci++) {
            const ring_case *c = &cases[ci];
            const int cap = c->cap ? c->cap : c->n_pos;
            ring_data d = sinks ? sink_data_make(c) : ring_data_make(c), plain = d;
            plain.sinks = NULL;
            const int64_t n_o = c->n_pos * d.qd;
            float *o_ref = calloc((size_t)n_o, 4), *o_fast = calloc((size_t)n_o, 4);
            float *o_greedy = calloc((size_t)n_o, 4), *o_full = calloc((size_t)n_o, 4);
            float *o_plain = calloc((size_t)n_o, 4);
            al_backend *ref = backend(CPU_ISA_REF, 1, d.qd, c->n_pos);
            al_backend *f3 = backend((cpu_isa)isa, 3, d.qd, c->n_pos),
                       *f1 = backend((cpu_isa)isa, 1, d.qd, c->n_pos);
            run_ring(ref, &d, cap, false, o_ref);
            const uint64_t ranged0 = ((cpu_backend *)f3)->n_attn_ranged;
            run_ring(f3, &d, cap, false, o_fast);
            ranged += ((cpu_backend *)f3)->n_attn_ranged - ranged0;
            ranges = ((cpu_backend *)f3)->k->attn_ranges;
            run_ring(f1, &d, cap, true, o_greedy);
            run_ring(f3, &d, c->n_pos, false, o_full);
            if (sinks) run_ring(f3, &plain, cap, false, o_plain);
            const double e = test_nmse(o_fast, o_ref, n_o);
            const bool same = !memcmp(o_fast, o_greedy, (size_t)n_o * 4) &&
                              !memcmp(o_fast, o_full, (size_t)n_o * 4);
            const bool inf_same = !sinks || minus_inf_heads_same(&d, o_fast, o_plain);
            CHECK_MSG(e <= 1e-10 && same && inf_same,
                      "%s heads %d/%d dim %d window %d cap %d: NMSE %.2e%s%s",
                      cpu_isa_name((cpu_isa)isa), c->n_head, c->n_head_kv, c->head_dim,
                      c->window, c->cap, e,
                      same ? "" : "; the ring, pieces or threads changed the result",
                      inf_same ? "" : "; a -inf sink changed bits");
            if (e > worst) worst = e;
            ref->ops->destroy(ref), f3->ops->destroy(f3), f1->ops->destroy(f1);
            ring_data_free(&d);
            free(o_ref), free(o_fast), free(o_greedy), free(o_full), free(o_plain);
        }
        printf("     %-6s %s: worst NMSE %.1e over %zu cases, %llu calls in ranges of keys\n",
               cpu_isa_name((cpu_isa)isa), what, worst, n_cases, (unsigned long long)ranged);
        /* the kernels that take ranges of keys take them (sinks keep one pass) */
        CHECK_MSG(sinks || !ranges || ranged > 0, "%s: no call attended in ranges",
                  cpu_isa_name((cpu_isa)isa));
    }
}

static void test_attention_ring_fast(void) {
    attention_fast(g_ring_cases, sizeof g_ring_cases / sizeof *g_ring_cases, false,
                   "ring attention");
}

static void test_attention_sinks_fast(void) {
    attention_fast(g_sink_cases, sizeof g_sink_cases / sizeof *g_sink_cases, true,
                   "attention sinks");
}

/* ---- the decode kernel ------------------------------------------------------------------ */
/* A kernel's attn_few (tiles of at most attn_few_lanes queries, keys in the lanes) must
 * give attn's bits for every query, whatever the tiles: called directly on ring caches,
 * GQA 1 to 16, heads of 64, 80 (not a multiple of 32: the narrow chunks of p.v) and 128,
 * histories from none to several key steps, windows, sinks, one and several tokens,
 * and keys with infinities, whose scores are +-inf and NaN (the step's maximum then
 * follows attn's order key by key). Heads that are not a multiple of attn_align never
 * reach it: fast_attention gives them to the portable kernel, which has no attn_few. */

typedef struct few_case {
    int n_past, n_tokens, window, cap; /* cap 0: n_past + n_tokens */
    bool sinks, infinities;
} few_case;

/* Every query of every kv head through fn in tiles of sizes[0], sizes[1], ... (cycled,
 * each at most max_nq). */
static void few_run(cpu_attn_fn fn, const cpu_attn_args *a, const int *sizes, int n_sizes,
                    int max_nq, float *scratch) {
    const int n_q = a->n_tokens * (a->n_head / a->n_head_kv);
    for (int kvh = 0; kvh < a->n_head_kv; kvh++)
        for (int q0 = 0, i = 0; q0 < n_q; i++) {
            int nq = sizes[i % n_sizes] < max_nq ? sizes[i % n_sizes] : max_nq;
            if (nq > n_q - q0) nq = n_q - q0;
            fn(a, kvh, q0, nq, scratch);
            q0 += nq;
        }
}

/* attn against attn_few on one shape; returns whether every output bit agrees. */
static bool few_case_same(const cpu_kernels *k, int n_head, int n_head_kv, int hd,
                          const few_case *c) {
    const int cap = c->cap ? c->cap : c->n_past + c->n_tokens;
    const int64_t qd = (int64_t)n_head * hd, kvd = (int64_t)n_head_kv * hd;
    float *q = test_floats(c->n_tokens * qd, 2.0f), *kc = test_floats(cap * kvd, 2.0f);
    float *vc = test_floats(cap * kvd, 1.0f), *sinks = malloc((size_t)n_head * 4);
    for (int h = 0; h < n_head; h++)
        sinks[h] = g_sink_values[(h + c->n_past) % 8];
    if (c->infinities) /* every third key has two infinite elements: as the query's two
                        * elements have the same sign or not, a score of +-inf or NaN */
        for (int r = 0; r < cap; r += 3) {
            float *key = kc + r * kvd + (r / 3 % n_head_kv) * hd;
            key[r % hd] = INFINITY;
            key[(r + 1 + r / 3 % 5) % hd] = r % 2 ? INFINITY : -INFINITY;
        }
    const int64_t n_o = c->n_tokens * qd;
    float *o_lanes = calloc((size_t)n_o, 4), *o_max = calloc((size_t)n_o, 4);
    float *o_mixed = calloc((size_t)n_o, 4);
    float *scratch = aligned_alloc(64, (size_t)cpu_attn_scratch(CPU_MAX_ROWS, hd) * 4);
    cpu_attn_args a = {.q = q, .ldq = qd, .k = kc, .v = vc, .ldk = kvd, .out = o_lanes,
                       .ldo = qd, .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd,
                       .n_past = c->n_past, .n_tokens = c->n_tokens, .cap = cap,
                       .window = c->window, .scale = 1.0f / sqrtf((float)hd),
                       .sinks = c->sinks ? sinks : NULL};
    static const int all[] = {1 << 20}, mixed[] = {1, 3, 2, 8, 5};
    few_run(k->attn, &a, all, 1, k->attn_lanes, scratch);
    a.out = o_max;
    few_run(k->attn_few, &a, all, 1, k->attn_few_lanes, scratch);
    a.out = o_mixed;
    few_run(k->attn_few, &a, mixed, 5, k->attn_few_lanes, scratch);
    const bool same = !memcmp(o_lanes, o_max, (size_t)n_o * 4) &&
                      !memcmp(o_lanes, o_mixed, (size_t)n_o * 4);
    free(q), free(kc), free(vc), free(sinks), free(o_lanes), free(o_max), free(o_mixed);
    free(scratch);
    return same;
}

static void test_attention_few(void) {
    static const few_case cases[] = {
        {0, 1, 0, 0, false, false},    {5, 1, 0, 0, false, false},
        {31, 1, 0, 0, true, false},    {32, 2, 0, 0, false, false},
        {70, 1, 0, 0, false, false},   {100, 3, 0, 0, true, false},
        {50, 1, 7, 9, false, false},   {90, 2, 40, 45, true, false},
        {64, 1, 1, 4, true, false},    {33, 1, 0, 0, false, true},
        {80, 2, 20, 0, true, true},
    };
    static const int heads[][2] = {{4, 4}, {4, 2}, {8, 2}, {16, 2}, {16, 1}}; /* G 1..16 */
    static const int dims[] = {64, 80, 128};
    int n_shapes = 0, n_isa = 0;
    CHECK(kernels_of(CPU_ISA_SCALAR)->attn_few == NULL); /* odd heads: attn only */
    for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        const cpu_kernels *k = kernels_of((cpu_isa)isa);
        if (!cpu_isa_available((cpu_isa)isa) || !k->attn_few) continue;
        n_isa++;
        for (size_t hi = 0; hi < sizeof heads / sizeof *heads; hi++)
            for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
                for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
                    const few_case *c = &cases[ci];
                    CHECK_MSG(few_case_same(k, heads[hi][0], heads[hi][1], dims[di], c),
                              "%s heads %d/%d dim %d past %d tokens %d window %d cap %d%s%s: "
                              "attn_few differs from attn",
                              cpu_isa_name((cpu_isa)isa), heads[hi][0], heads[hi][1], dims[di],
                              c->n_past, c->n_tokens, c->window, c->cap,
                              c->sinks ? " sinks" : "", c->infinities ? " infinities" : "");
                    n_shapes++;
                }
        printf("     %-6s attn_few: the bits of attn over %d shapes\n",
               cpu_isa_name((cpu_isa)isa), n_shapes);
    }
    if (!n_isa) TEST_SKIP("no kernel with attn_few runs here");
}

/* ---- per-row ops ------------------------------------------------------------------------- */

static void check_rows(al_backend *fast, al_backend *ref, int64_t n, int64_t rows, double *worst) {
    float *x = test_floats(n * rows, 3.0f), *y = test_floats(n * rows, 3.0f);
    float *w = test_floats(n, 1.0f);
    float *a = malloc((size_t)(n * rows) * 4), *b = malloc((size_t)(n * rows) * 4);
    al_tensor xt = test_f32(x, n, rows), yt = test_f32(y, n, rows), wt = test_f32(w, n, 1);
    al_tensor at = test_f32(a, n, rows), bt = test_f32(b, n, rows);
    double e[4];
    /* rms_norm */
    fast->ops->rms_norm(fast, &xt, &wt, 1e-5f, &at);
    ref->ops->rms_norm(ref, &xt, &wt, 1e-5f, &bt);
    e[0] = test_nmse(a, b, n * rows);
    /* silu_mul, on copies */
    memcpy(a, x, (size_t)(n * rows) * 4), memcpy(b, x, (size_t)(n * rows) * 4);
    fast->ops->silu_mul(fast, &at, &yt);
    ref->ops->silu_mul(ref, &bt, &yt);
    e[1] = test_nmse(a, b, n * rows);
    /* add */
    memcpy(a, x, (size_t)(n * rows) * 4), memcpy(b, x, (size_t)(n * rows) * 4);
    fast->ops->add(fast, &at, &yt);
    ref->ops->add(ref, &bt, &yt);
    e[2] = test_nmse(a, b, n * rows);
    /* rope: normal and neox, with factors and scaling; must match bit for bit */
    e[3] = 0;
    for (int v = 0; v < 2 && n % 16 == 0; v++) {
        float factors[64];
        for (int i = 0; i < 64; i++)
            factors[i] = 1.0f + (float)i / 16;
        al_rope rp = {.n_rot = 16,
                      .neox = v == 1,
                      .freq_base = 10000.0f,
                      .freq_scale = v ? 0.5f : 1.0f,
                      .freq_factors = v ? factors : NULL};
        memcpy(a, x, (size_t)(n * rows) * 4), memcpy(b, x, (size_t)(n * rows) * 4);
        fast->ops->rope(fast, &at, (int)(n / 16), 16, 1000, &rp);
        ref->ops->rope(ref, &bt, (int)(n / 16), 16, 1000, &rp);
        const double er = test_nmse(a, b, n * rows);
        if (er > e[3]) e[3] = er;
    }
    CHECK_MSG(e[0] <= 1e-10 && e[1] <= 1e-10 && e[2] <= 1e-12 && e[3] <= 1e-12,
              "n %lld rows %lld: rms_norm %.1e silu_mul %.1e add %.1e rope %.1e", (long long)n,
              (long long)rows, e[0], e[1], e[2], e[3]);
    for (int i = 0; i < 4; i++)
        if (e[i] > *worst) *worst = e[i];
    free(x), free(y), free(w), free(a), free(b);
}

static void test_row_ops(void) {
    static const int64_t ns[] = {1, 7, 16, 33, 576, 2048, 5000};
    static const int64_t rows[] = {1, 3, 64};
    for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) continue;
        al_backend *fast = backend((cpu_isa)isa, 3, 5000, 64),
                   *ref = backend(CPU_ISA_REF, 1, 5000, 64);
        double worst = 0;
        for (int i = 0; i < 7; i++)
            for (int j = 0; j < 3; j++)
                check_rows(fast, ref, ns[i], rows[j], &worst);
        printf("     %-6s rms_norm, silu_mul, add, rope: worst NMSE %.1e\n",
               cpu_isa_name((cpu_isa)isa), worst);
        fast->ops->destroy(fast), ref->ops->destroy(ref);
    }
}

/* A decoded token's rope angles are kept between calls (cpu.c: rope_memo): each call,
 * a hit or a miss, must still match the reference bit for bit, including a call with
 * the same factor array changed in place and bases that alternate as Gemma 3's. */
static void test_rope_memo(void) {
    al_backend *fast = backend(CPU_ISA_SCALAR, 2, 256, 64), *ref = backend(CPU_ISA_REF, 1, 256, 64);
    float factors[32], x[256], a[256], b[256];
    for (int i = 0; i < 256; i++)
        x[i] = sinf((float)i * 0.37f) + 0.1f;
    for (int i = 0; i < 32; i++)
        factors[i] = 1.0f + (float)i / 8;
    const struct {
        int pos;
        float base;
        bool factors;
        float factor0; /* factors[0] before the call */
    } calls[] = {{5, 10000.0f, false, 1.0f},  {5, 10000.0f, false, 1.0f},
                 {5, 1000000.0f, false, 1.0f}, {5, 10000.0f, false, 1.0f},
                 {6, 10000.0f, false, 1.0f},  {6, 10000.0f, true, 1.0f},
                 {6, 10000.0f, true, 4.0f},   {6, 10000.0f, true, 4.0f},
                 {5, 1000000.0f, false, 1.0f}};
    for (size_t c = 0; c < sizeof calls / sizeof calls[0]; c++) {
        factors[0] = calls[c].factor0;
        const al_rope rp = {.n_rot = 64,
                            .freq_base = calls[c].base,
                            .freq_scale = 1.0f,
                            .freq_factors = calls[c].factors ? factors : NULL};
        memcpy(a, x, sizeof a), memcpy(b, x, sizeof b);
        al_tensor at = test_f32(a, 256, 1), bt = test_f32(b, 256, 1);
        fast->ops->rope(fast, &at, 4, 64, calls[c].pos, &rp);
        ref->ops->rope(ref, &bt, 4, 64, calls[c].pos, &rp);
        CHECK_MSG(memcmp(a, b, sizeof a) == 0, "call %zu (pos %d, base %g, factors %d, %g): "
                  "the rope differs from the reference", c, calls[c].pos, calls[c].base,
                  calls[c].factors, calls[c].factor0);
    }
    fast->ops->destroy(fast), ref->ops->destroy(ref);
}

/* ---- gelu_mul, scale, rms_norm in place ------------------------------------------------ */

/* Inputs for gelu: mostly |x| < 4, where GELU bends, with every fifth element far out
 * where tanh saturates (x -> x above, 0 below), both signs; u in [-3, 3). */
static float gelu_input(int64_t i) {
    static const float far[] = {8.0f, -8.0f, 30.0f, -30.0f, 1e3f, -1e3f, 1e20f, -1e20f, -5.5f};
    return i % 5 == 4 ? far[(i / 5) % 9] * (1.0f + 0.1f * test_frand()) : 4.0f * test_frand();
}

/* gelu_mul and scale of one backend against the reference, on rows of n. gelu within
 * 2e-6 of the value plus 1e-7 of |x u| (below x = -3 GELU is a small difference
 * whose float rounding the second term allows); scale bit for bit. Returns the worst
 * relative gelu error where |x| <= 4. */
static double check_gelu_scale(al_backend *fast, al_backend *ref, int64_t n, int64_t rows) {
    const int64_t m = n * rows;
    float *x = malloc((size_t)m * 4), *u = test_floats(m, 3.0f);
    float *a = malloc((size_t)m * 4), *b = malloc((size_t)m * 4);
    for (int64_t i = 0; i < m; i++)
        x[i] = gelu_input(i);
    al_tensor at = test_f32(a, n, rows), bt = test_f32(b, n, rows), ut = test_f32(u, n, rows);
    memcpy(a, x, (size_t)m * 4), memcpy(b, x, (size_t)m * 4);
    fast->ops->gelu_mul(fast, &at, &ut);
    ref->ops->gelu_mul(ref, &bt, &ut);
    double worst = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < m; i++) {
        const double e = fabs((double)a[i] - b[i]);
        if (!(e <= 2e-6 * fabs(b[i]) + 1e-7 * fabs((double)x[i] * u[i])) && bad < 0) bad = i;
        if (fabsf(x[i]) <= 4.0f && b[i] != 0 && e / fabs(b[i]) > worst) worst = e / fabs(b[i]);
    }
    CHECK_MSG(bad < 0, "gelu_mul n %lld rows %lld: x %g u %g: %.9g vs %.9g", (long long)n,
              (long long)rows, bad < 0 ? 0 : x[bad], bad < 0 ? 0 : u[bad], bad < 0 ? 0 : a[bad],
              bad < 0 ? 0 : b[bad]);
    memcpy(a, x, (size_t)m * 4), memcpy(b, x, (size_t)m * 4);
    fast->ops->scale(fast, &at, 25.298221f);
    ref->ops->scale(ref, &bt, 25.298221f);
    CHECK_MSG(!memcmp(a, b, (size_t)m * 4) && b[m - 1] == x[m - 1] * 25.298221f,
              "scale n %lld rows %lld", (long long)n, (long long)rows);
    free(x), free(u), free(a), free(b);
    return worst;
}

/* gelu_mul on values of the tanh form computed elsewhere (Python, double), within tol
 * of the value plus tol_xu of |x u| (check_gelu_scale). */
static void check_gelu_values(al_backend *be, double tol, double tol_xu) {
    static const float xs[] = {1, -1, 0.5f, -3, 3, -6, 0, 30, -30};
    static const double want[] = {0.8411919906082768,   -0.15880800939172324, 0.34571400982514394,
                                  -0.0036373920817729943, 2.996362607918227,  -8.43964897967453e-11,
                                  0,                     30,                  0};
    float g[9], u[9];
    for (int i = 0; i < 9; i++)
        g[i] = xs[i], u[i] = i % 2 ? -2.0f : 1.0f;
    al_tensor gt = test_f32(g, 9, 1), ut = test_f32(u, 9, 1);
    be->ops->gelu_mul(be, &gt, &ut);
    for (int i = 0; i < 9; i++)
        CHECK_MSG(fabs(g[i] - want[i] * u[i]) <=
                      tol * fabs(want[i] * u[i]) + tol_xu * fabs(xs[i] * u[i]) + 1e-30,
                  "%s: gelu(%g) * %g = %.9g, want %.9g", be->desc, xs[i], u[i], g[i],
                  want[i] * u[i]);
}

static void test_gelu_scale(void) {
    static const int64_t ns[] = {1, 7, 13, 33, 640, 2048, 5000};
    static const int64_t rows[] = {1, 3, 64};
    al_backend *ref = backend(CPU_ISA_REF, 1, 5000, 64);
    check_gelu_values(ref, 1e-7, 0);
    for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) continue;
        al_backend *fast = backend((cpu_isa)isa, 3, 5000, 64);
        check_gelu_values(fast, 2e-6, 1e-7);
        double worst = 0;
        for (int i = 0; i < 7; i++)
            for (int j = 0; j < 3; j++) {
                const double e = check_gelu_scale(fast, ref, ns[i], rows[j]);
                if (e > worst) worst = e;
            }
        printf("     %-6s gelu_mul: worst relative error %.1e for |x| <= 4; scale exact\n",
               cpu_isa_name((cpu_isa)isa), worst);
        fast->ops->destroy(fast);
    }
    ref->ops->destroy(ref);
}

/* ---- swiglu_oai -------------------------------------------------------------------------- */

/* Inputs for gpt-oss's SwiGLU with a given limit: mostly within 3 limits, where both
 * clamps and the sigmoid's bend matter, with every sixth element far out (+-1e3,
 * +-1e20, the limit itself, just past it) and every sixth near 0. */
static float swiglu_input(int64_t i, float limit) {
    const float far[] = {1e3f, -1e3f, 1e20f, -1e20f, limit, -limit, limit * 1.0000001f, -60.0f};
    return i % 6 == 4   ? far[(i / 6) % 8]
           : i % 6 == 5 ? 0.01f * test_frand()
                        : 3.0f * limit * test_frand();
}

/* The formula of backend.h in double, written apart from the reference's. */
static double swiglu_oai_formula(float g, float u, float alpha, float limit) {
    const double x = fmin(g, limit), y = fmax(fmin(u, limit), -limit);
    return x * (1.0 / (1.0 + exp(-(double)alpha * x))) * (y + 1.0);
}

/* swiglu_oai of the reference against the formula (one float rounding) and of a fast
 * backend against the reference on rows of n: within 2e-6, plus the rounding of
 * alpha * x in float, which moves e^(-alpha x) by |alpha x| * 6e-8, plus x (y + 1)
 * times 5e-39 below x = -52 / alpha, where e^(-alpha x) passes the SIMD exp's clamp.
 * Returns the worst relative error where |x| <= limit. */
static double check_swiglu(al_backend *fast, al_backend *ref, int64_t n, int64_t rows,
                           float alpha, float limit) {
    const int64_t m = n * rows;
    float *g = malloc((size_t)m * 4), *u = malloc((size_t)m * 4);
    float *a = malloc((size_t)m * 4), *b = malloc((size_t)m * 4);
    for (int64_t i = 0; i < m; i++)
        g[i] = swiglu_input(i, limit), u[i] = swiglu_input(i + 3 * (i / 7), limit);
    al_tensor at = test_f32(a, n, rows), bt = test_f32(b, n, rows), ut = test_f32(u, n, rows);
    memcpy(a, g, (size_t)m * 4), memcpy(b, g, (size_t)m * 4);
    fast->ops->swiglu_oai(fast, &at, &ut, alpha, limit);
    ref->ops->swiglu_oai(ref, &bt, &ut, alpha, limit);
    double worst = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < m && bad < 0; i++) {
        const double want = swiglu_oai_formula(g[i], u[i], alpha, limit);
        const double x = fmin(g[i], limit), xy = fabs(x * (fmax(fmin(u[i], limit), -limit) + 1));
        const double e = fabs((double)a[i] - b[i]);
        const double tol = (2e-6 + 1.2e-7 * fabs(alpha * x)) * fabs(b[i]) + 5e-39 * xy + 1e-44;
        if (!(fabs(b[i] - want) <= 1.2e-7 * fabs(want) + 1e-44) || !(e <= tol)) bad = i;
        if (fabs(x) <= limit && b[i] != 0 && e / fabs(b[i]) > worst) worst = e / fabs(b[i]);
    }
    CHECK_MSG(bad < 0, "%s swiglu_oai n %lld rows %lld alpha %g limit %g: g %g u %g: %.9g, "
              "reference %.9g, formula %.9g", fast->desc, (long long)n, (long long)rows, alpha,
              limit, bad < 0 ? 0 : g[bad], bad < 0 ? 0 : u[bad], bad < 0 ? 0 : a[bad],
              bad < 0 ? 0 : b[bad], bad < 0 ? 0 : swiglu_oai_formula(g[bad], u[bad], alpha, limit));
    free(g), free(u), free(a), free(b);
    return worst;
}

/* Known points: the clamps hold (g past the limit gives the value at the limit, u past
 * +-limit that at +-limit: 7 sigmoid(11.914) 8 and 2 sigmoid(3.404) (-6), computed in
 * Python) and u = -1 zeroes the output. */
static void check_swiglu_points(al_backend *be) {
    float g[5] = {7.0f, 100.0f, 2.0f, 2.0f, 3.0f}, u[5] = {7.0f, 50.0f, -7.0f, -1e9f, -1.0f};
    al_tensor gt = test_f32(g, 5, 1), ut = test_f32(u, 5, 1);
    be->ops->swiglu_oai(be, &gt, &ut, 1.702f, 7.0f);
    CHECK_MSG(g[0] == g[1] && g[2] == g[3] && g[4] == 0.0f && fabs(g[0] - 55.9996250) < 4e-5 &&
                  fabs(g[2] + 11.6139517) < 1e-5,
              "%s: swiglu_oai clamps: %g %g, %g %g, %g", be->desc, g[0], g[1], g[2], g[3], g[4]);
}

static void test_swiglu_oai(void) {
    static const int64_t ns[] = {1, 7, 13, 33, 640, 2049, 5000};
    static const int64_t rows[] = {1, 3, 64};
    static const float params[][2] = {{1.702f, 7.0f}, {1.0f, 2.5f}}; /* alpha, limit */
    al_backend *ref = backend(CPU_ISA_REF, 1, 5000, 64);
    check_swiglu_points(ref);
    for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) continue;
        al_backend *fast = backend((cpu_isa)isa, 3, 5000, 64);
        check_swiglu_points(fast);
        double worst = 0;
        for (int p = 0; p < 2; p++)
            for (int i = 0; i < 7; i++)
                for (int j = 0; j < 3; j++) {
                    const double e =
                        check_swiglu(fast, ref, ns[i], rows[j], params[p][0], params[p][1]);
                    if (e > worst) worst = e;
                }
        printf("     %-6s swiglu_oai: worst relative error %.1e for |x| <= limit\n",
               cpu_isa_name((cpu_isa)isa), worst);
        fast->ops->destroy(fast);
    }
    ref->ops->destroy(ref);
}

/* rms_norm in place (out = x) on n_tok rows of n_head * hd floats, viewed as n_tok *
 * n_head rows of hd (backend.h: the per-head Q/K norm; n_head 1 is a plain in-place
 * norm), starting one row into the buffer; against the formula in double, and the
 * row before the view must stay as it was. Returns the largest error. */
static double check_norm_view(al_backend *be, int n_tok, int n_head, int hd) {
    const int64_t row = (int64_t)n_head * hd, m = row * (n_tok + 1);
    float *buf = test_floats(m, 3.0f), *x = malloc((size_t)m * 4), *w = test_floats(hd, 1.5f);
    memcpy(x, buf, (size_t)m * 4);
    al_tensor wt = test_f32(w, hd, 1);
    al_tensor v = {.type = AL_TYPE_F32,
                   .ne = {hd, (int64_t)n_tok * n_head},
                   .data = buf,
                   .offset = (uint64_t)row * sizeof(float),
                   .row_bytes = (uint64_t)hd * sizeof(float)};
    be->ops->rms_norm(be, &v, &wt, 1e-6f, &v);
    double worst = memcmp(buf, x, (size_t)row * 4) ? INFINITY : 0;
    for (int64_t r = 0; r < (int64_t)n_tok * n_head; r++) {
        const float *xr = x + row + r * hd, *got = buf + row + r * hd;
        double ss = 0;
        for (int i = 0; i < hd; i++)
            ss += (double)xr[i] * xr[i];
        const double s = 1.0 / sqrt(ss / hd + 1e-6);
        for (int i = 0; i < hd; i++) {
            const double e = fabs(got[i] - xr[i] * s * w[i]);
            if (!(e <= worst)) worst = e;
        }
    }
    CHECK_MSG(worst <= 1e-6, "%s: rms_norm in place, %d x %d heads of %d: error %.1e", be->desc,
              n_tok, n_head, hd, worst);
    free(buf), free(x), free(w);
    return worst;
}

static void test_rms_norm_views(void) {
    static const int shapes[][3] = {{1, 4, 64}, {3, 8, 128}, {70, 4, 256}, {5, 2, 40},
                                    {2, 3, 7},  {9, 1, 576}, {40, 1, 2048}};
    for (int isa = CPU_ISA_REF; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) continue;
        al_backend *be = backend((cpu_isa)isa, 3, 2048, 64);
        double worst = 0;
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            const double e = check_norm_view(be, shapes[i][0], shapes[i][1], shapes[i][2]);
            if (e > worst) worst = e;
        }
        printf("     %-6s rms_norm in place and per head: worst error %.1e\n",
               cpu_isa_name((cpu_isa)isa), worst);
        be->ops->destroy(be);
    }
}

/* ---- instruction sets ------------------------------------------------------------------- */

/* bench's bandwidth reader: the same sum as plain C on every ISA */
static void test_sum_u64(void) {
    enum { N = 4096 + 16 };
    uint64_t *p = aligned_alloc(64, N * sizeof *p), want = 0;
    for (int i = 0; i < N; i++)
        want += p[i] = (uint64_t)test_rnd() << 32 | test_rnd();
    for (int isa = CPU_ISA_SCALAR; isa < CPU_ISA_COUNT; isa++)
        if (cpu_isa_available((cpu_isa)isa))
            CHECK_MSG(kernels_of((cpu_isa)isa)->sum_u64(p, N) == want, "%s",
                      cpu_isa_name((cpu_isa)isa));
    CHECK(cpu_sum_u64(p, N) == want);
    free(p);
}

/* al_memory_read_sum (anyllm.h) on buffers of any address and length: each byte it is
 * given changes the result when it changes (a byte of the middle moves its word's sum
 * by 2^(8 k), never 0 mod 2^64), so every byte is read, and ASan's build catches a read
 * past either end. */
static void test_memory_read_sum(void) {
    enum { CAP = 1024 };
    uint8_t *buf = aligned_alloc(64, CAP);
    for (int i = 0; i < CAP; i++)
        buf[i] = (uint8_t)test_rnd();
    static const int offs[] = {0, 1, 7, 8, 63, 64, 65}, lens[] = {0, 1, 63, 127, 128, 129, 300,
                                                                  511, 640, 900};
    int n_bad = 0, n_cases = 0;
    for (size_t oi = 0; oi < sizeof offs / sizeof *offs; oi++)
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            const int off = offs[oi], len = lens[li];
            if (off + len > CAP) continue;
            n_cases++;
            const uint64_t base = al_memory_read_sum(buf + off, (size_t)len);
            for (int i = 0; i < len; i++) {
                buf[off + i] ^= 1;
                if (al_memory_read_sum(buf + off, (size_t)len) == base) n_bad++;
                buf[off + i] ^= 1;
            }
            CHECK_MSG(al_memory_read_sum(buf + off, (size_t)len) == base,
                      "offset %d length %d: not the same sum twice", off, len);
        }
    CHECK_MSG(n_bad == 0, "%d bytes changed without changing the sum", n_bad);
    printf("     al_memory_read_sum: %d (address, length) cases, each byte flipped\n", n_cases);
    free(buf);
}

/* mm_share_take (the GEMV's work sharing) under random interleavings of owners and
 * thieves: every item taken exactly once, in takes whose bounds are multiples of per
 * (or n), and the first take of the job at the front of its taker's share. */
static void test_mm_share(void) {
    enum { MAX_TH = 8, MAX_N = 3000 };
    static uint8_t seen[MAX_N];
    mm_share sh[MAX_TH];
    uint32_t rng = 12345;
    int bad = 0, n_cases = 0;
    for (int c = 0; c < 400 && !bad; c++, n_cases++) {
        rng = rng * 1103515245u + 12345u;
        const int nth = 1 + (int)(rng >> 16) % MAX_TH;
        rng = rng * 1103515245u + 12345u;
        const int64_t n = (int64_t)(rng >> 16) % MAX_N, per = 1 + (int64_t)(c % 7);
        mm_share_init(sh, nth, n, per);
        memset(seen, 0, (size_t)n);
        bool done[MAX_TH] = {0}, first = true;
        const int64_t each = ((n + nth - 1) / nth + per - 1) / per * per;
        for (int left = nth; left > 0;) {
            rng = rng * 1103515245u + 12345u;
            const int ith = (int)(rng >> 16) % nth;
            if (done[ith]) continue;
            int64_t i0, i1;
            if (!mm_share_take(sh, ith, nth, per, &i0, &i1)) {
                done[ith] = true, left--;
                continue;
            }
            bad |= !(0 <= i0 && i0 < i1 && i1 <= n && i0 % per == 0 && (i1 % per == 0 || i1 == n));
            if (first && ith * each < n) bad |= i0 != ith * each;
            first = false;
            for (int64_t i = i0; i < i1 && !bad; i++) bad |= seen[i]++ != 0;
            if (bad) printf("  case %d: n %lld, %d threads, per %lld: take [%lld, %lld) by %d\n", c,
                            (long long)n, nth, (long long)per, (long long)i0, (long long)i1, ith);
        }
        for (int64_t i = 0; i < n && !bad; i++)
            if (seen[i] != 1) {
                bad = 1;
                printf("  case %d: n %lld, %d threads, per %lld: item %lld never taken\n", c,
                       (long long)n, nth, (long long)per, (long long)i);
            }
    }
    CHECK_MSG(!bad, "mm_share_take dealt the items wrongly");
    printf("  %d random cases: every item taken once, takes aligned to per\n", n_cases);
}

static void test_isa_choice(void) {
    const cpu_isa best = cpu_isa_best();
    printf("     best instruction set here: %s\n", cpu_isa_name(best));
    CHECK(cpu_isa_available(CPU_ISA_REF) && cpu_isa_available(CPU_ISA_SCALAR));
    CHECK(cpu_isa_available(best));
    al_backend *be = NULL;
    CHECK(cpu_backend_create_isa(1, CPU_ISA_COUNT, CPU_ACT_Q8X2, &be) == AL_ERR_UNSUPPORTED && be == NULL);
    CHECK(cpu_backend_create_isa(1, best, CPU_ACT_Q8X2, &be) == AL_OK);
    if (be) {
        CHECK(strstr(be->desc, cpu_isa_name(best)) != NULL);
        be->ops->destroy(be);
    }
}

int main(void) {
    TEST_RUN(test_isa_choice);
    TEST_RUN(test_sum_u64);
    TEST_RUN(test_mm_share);
    TEST_RUN(test_memory_read_sum);
    TEST_RUN(test_row_ops);
    TEST_RUN(test_rope_memo);
    TEST_RUN(test_gelu_scale);
    TEST_RUN(test_swiglu_oai);
    TEST_RUN(test_rms_norm_views);
    TEST_RUN(test_attention);
    TEST_RUN(test_attention_ring_ref);
    TEST_RUN(test_attention_ring_fast);
    TEST_RUN(test_attention_sinks_ref);
    TEST_RUN(test_attention_sinks_fast);
    TEST_RUN(test_attention_few);
    TEST_RUN(test_matmul_passes);
    TEST_RUN(test_mxfp4_pack);
    TEST_RUN(test_matmul_scalar);
    TEST_RUN(test_matmul_avx2);
    TEST_RUN(test_matmul_avx512);
    TEST_RUN(test_matmul_amx);
    TEST_RUN(test_matmul_x16);
    TEST_RUN(test_matmul_extreme);
    TEST_RUN(test_matmul_extreme_amx);
    return test_finish();
}
