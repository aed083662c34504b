/* test_mxfp4.c: the MXFP4 weight type (ggml type 39) through quant.h and quantize.h.
 *
 * Evidence that the format is ggml's:
 *   1. Hand-built blocks: every one of the 16 codes under scale bytes from 0 to 255,
 *      against the OCP E2M1 table {0, 0.5, 1, 1.5, 2, 3, 4, 6} times 2^(e-127) worked out
 *      here in double, not with the library's doubled table; the scale byte is first
 *      and element j + 16 sits in the high nibble of byte j, as in ggml's block_mxfp4.
 *   2. The quantizer's rules, on chosen values: the shared exponent floor(log2(amax))
 *      - 2 + 127 (also just below a power of two), nearest code with ties to the first
 *      code in table order, all-zero blocks, the exponent's wrap below 2^-125 as x86
 *      llama.cpp writes it; blocks whose largest value is 4 or 6 (doubled: 8 or 12)
 *      come back byte for byte from their own values; round trips on random rows stay
 *      within a bound.
 *   3. llama.cpp's own file: $SHARED/models/moe/ref-gpt-oss-MXFP4_MOE.gguf, written by
 *      llama-quantize from ref-gpt-oss-f32.gguf. MXFP4_MOE must pick llama.cpp's type for
 *      every tensor, and every MXFP4 expert tensor quantized here from the F32 weights
 *      must equal llama.cpp's bytes. (tests/quantize.sh compares the whole file.)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/quant.h"
#include "format/quantize.h"
#include "test.h"
#include "util.h"

enum { BLOCK_BYTES = 17 };

static uint32_t rng_next(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* E2M1 as the OCP Microscaling spec defines it: sign bit 3, exponent bits 1-2 (bias 1),
 * mantissa bit 0; exponent 0 is subnormal (0 or 0.5). */
static double e2m1(int code) {
    const int exp = (code >> 1) & 3, man = code & 1;
    const double mag = exp == 0 ? 0.5 * man : ldexp(1.0 + 0.5 * man, exp - 1);
    return code & 8 ? -mag : mag;
}

/* ---- 1. the dequantizer ------------------------------------------------------------- */

static void test_e2m1_table(void) {
    /* the doubled table of quant.h is 2 x E2M1, code for code */
    for (int c = 0; c < 16; c++)
        CHECK_MSG(quant_mxfp4_values[c] == 2 * e2m1(c), "code %d: %d, E2M1 %g", c,
                  quant_mxfp4_values[c], e2m1(c));
    const quant_traits *t = quant_get_traits(AL_TYPE_MXFP4);
    CHECK(t && !strcmp(t->name, "MXFP4") && t->block_size == 32 && t->type_size == 17);
    CHECK(quant_row_bytes(AL_TYPE_MXFP4, 2880) == 90 * 17); /* gpt-oss's row */
    CHECK(quant_row_bytes(AL_TYPE_MXFP4, 48) == 0);
    /* half the scale, 2^(e-128), for every byte: subnormal below 2, 2^127 at 255 */
    for (int e = 0; e < 256; e++)
        CHECK_MSG(quant_e8m0_half((uint8_t)e) == (float)ldexp(1.0, e - 128), "e %d", e);
}

/* Two blocks: block b has scale byte e[b]; element j < 16 holds code j, element j + 16
 * code 15 - j, so every code appears in both nibble positions. */
static void build_blocks(const uint8_t e[2], uint8_t *out) {
    for (int b = 0; b < 2; b++) {
        uint8_t *blk = out + b * BLOCK_BYTES;
        blk[0] = e[b];
        for (int j = 0; j < 16; j++)
            blk[1 + j] = (uint8_t)(j | (15 - j) << 4);
    }
}

static void test_dequant_codes(void) {
    static const uint8_t scales[] = {0, 1, 2, 100, 126, 127, 128, 129, 200, 254, 255};
    const int n_scales = (int)(sizeof scales / sizeof *scales);
    for (int k = 0; k < n_scales; k++) {
        const uint8_t e[2] = {scales[k], scales[(k + 5) % n_scales]};
        uint8_t buf[2 * BLOCK_BYTES + 1];
        float got[64], got_odd[64];
        build_blocks(e, buf);
        quant_dequantize(AL_TYPE_MXFP4, buf, got, 64);
        memmove(buf + 1, buf, 2 * BLOCK_BYTES); /* rows in a mapping need no alignment */
        quant_dequantize(AL_TYPE_MXFP4, buf + 1, got_odd, 64);
        int n_bad = 0;
        for (int i = 0; i < 64; i++) {
            const int b = i / 32, j = i % 32, code = j < 16 ? j : 15 - (j - 16);
            /* exact in double; the float it rounds to is ggml's (inf past FLT_MAX) */
            const float want = (float)(e2m1(code) * ldexp(1.0, e[b] - 127));
            /* codes 0 and 8 (-0) both give +0, as in ggml, whose table holds 0 twice */
            const bool ok = got[i] == want && got_odd[i] == want && (want != 0 || !signbit(got[i]));
            if (!ok && n_bad++ < 3)
                CHECK_MSG(0, "e %d code %d: got %g (odd address %g), want %g", e[b], code,
                          got[i], got_odd[i], want);
        }
        CHECK_MSG(n_bad == 0, "scales %d/%d: %d of 64 elements wrong", e[0], e[1], n_bad);
    }
}

/* ---- 2. the quantizer --------------------------------------------------------------- */

/* Quantizes one block of 32 floats. */
static void quantize_block(const float x[32], uint8_t out[BLOCK_BYTES]) {
    CHECK(quant_quantize_row(AL_TYPE_MXFP4, x, out, 32) == AL_OK);
}

static int code_at(const uint8_t blk[BLOCK_BYTES], int i) {
    return i < 16 ? blk[1 + i] & 0xF : blk[1 + i - 16] >> 4;
}

static void test_quantize_exponent(void) {
    float x[32] = {0};
    uint8_t q[BLOCK_BYTES];
    /* zeros: scale byte 0 and code 0 (+0) everywhere, -0 included */
    x[3] = -0.0f;
    quantize_block(x, q);
    for (int i = 0; i < BLOCK_BYTES; i++) CHECK_MSG(q[i] == 0, "zeros: byte %d is %d", i, q[i]);
    /* amax 1: floor(log2 1) - 2 + 127 = 125, half scale 2^-3, so 1.0 is code 6 (8 * 2^-3) */
    x[17] = -1.0f;
    quantize_block(x, q);
    CHECK(q[0] == 125 && code_at(q, 17) == 14);
    /* amax just below 1: the exponent drops to 124, and 0.99999994 / 2^-4 = 16 - 2^-20
     * rounds to the largest code, 12 * 2^-4 = 0.75 (ggml's choice, not the nearest value) */
    x[17] = nextafterf(1.0f, 0.0f);
    quantize_block(x, q);
    CHECK(q[0] == 124 && code_at(q, 17) == 7);
    /* amax 2^-126 (the smallest normal): -126 - 2 + 127 = -1 wraps to 255 through a 32-bit
     * integer, as x86 builds of llama.cpp convert it; the element then rounds to 0 */
    x[17] = 0x1p-126f;
    quantize_block(x, q);
    CHECK(q[0] == 255 && code_at(q, 17) == 0);
    /* amax 2^-125: exponent 0, half scale 2^-128, 2^-125 = 8 * 2^-128: code 6 */
    x[17] = 0x1p-125f;
    quantize_block(x, q);
    CHECK(q[0] == 0 && code_at(q, 17) == 6);
    /* amax 2^127: byte 252, half scale 2^124, code 6 */
    x[17] = 0x1p127f;
    quantize_block(x, q);
    CHECK(q[0] == 252 && code_at(q, 17) == 6);
}

static void test_quantize_ties(void) {
    /* amax 8 makes the half scale 1 (byte 128), so x is compared with the table itself */
    static const struct { float x; int code; } cases[] = {
        {8.0f, 6},   {0.5f, 0},  {-0.5f, 0}, {-0.0f, 0}, {0.75f, 1},  {1.5f, 1},  {2.5f, 2},
        {3.5f, 3},   {5.0f, 4},  {7.0f, 5},  {10.0f, 6}, {11.0f, 7},  {15.9f, 7}, {-1.0f, 9},
        {-1.5f, 9},  {-5.0f, 12}, {-7.0f, 13}, {-10.0f, 14}, {-10.5f, 15}, {-15.0f, 15},
    };
    const int n = (int)(sizeof cases / sizeof *cases);
    float x[32] = {0};
    uint8_t q[BLOCK_BYTES];
    for (int i = 0; i < n; i++) x[i + (32 - n)] = cases[i].x;
    x[0] = 8.0f;
    quantize_block(x, q);
    CHECK(q[0] == 128);
    for (int i = 0; i < n; i++) {
        const int got = code_at(q, i + (32 - n));
        CHECK_MSG(got == cases[i].code, "x %g: code %d, want %d", cases[i].x, got, cases[i].code);
    }
}

/* A block whose largest magnitude is 4 or 6 (doubled 8 or 12) keeps its scale, and each
 * value is exactly a code: quantizing what it dequantizes to gives the block back, with
 * -0 (code 8) written as +0. */
static void test_quantize_fixed_point(void) {
    uint32_t s = 99;
    int n_bad = 0;
    for (int it = 0; it < 2000; it++) {
        uint8_t blk[BLOCK_BYTES], again[BLOCK_BYTES];
        float x[32];
        blk[0] = (uint8_t)(2 + rng_next(&s) % 250); /* normal scales, finite values */
        for (int j = 0; j < 16; j++) blk[1 + j] = (uint8_t)rng_next(&s);
        /* one element at +-12 or +-8 (codes 7, 15, 6, 14) */
        const int at = (int)(rng_next(&s) % 16);
        const uint8_t big = (uint8_t)(6 + rng_next(&s) % 2 + 8 * (rng_next(&s) % 2));
        blk[1 + at] = (uint8_t)((blk[1 + at] & 0xF0) | big);
        quant_dequantize(AL_TYPE_MXFP4, blk, x, 32);
        quantize_block(x, again);
        for (int j = 1; j < BLOCK_BYTES; j++) /* -0 comes back as +0 */
            blk[j] = (uint8_t)(((blk[j] & 0xF) == 8 ? 0 : blk[j] & 0xF) |
                               ((blk[j] >> 4) == 8 ? 0 : blk[j] & 0xF0));
        if (memcmp(blk, again, BLOCK_BYTES) && n_bad++ < 3)
            CHECK_MSG(0, "block %d (scale %d) does not come back", it, blk[0]);
    }
    CHECK(n_bad == 0);
}

/* Random rows: roughly normal, uniform, and normal with outliers. A 4-bit float with a
 * power-of-two scale per 32 loses about 1% of the signal's energy on normal data; a
 * wrong layout or rounding rule loses most of it. */
static void test_round_trip(void) {
    enum { N = 2880 };
    static float x[N], y[N];
    static uint8_t q[N / 32 * BLOCK_BYTES];
    static const char *const kind_names[] = {"normal", "uniform", "outliers"};
    uint32_t s = 4242;
    for (int kind = 0; kind < 3; kind++) {
        for (int i = 0; i < N; i++) {
            const float u = (float)(rng_next(&s) >> 8) / 16777216.0f * 2 - 1;
            float g = 0;
            for (int k = 0; k < 4; k++) g += (float)(rng_next(&s) >> 8) / 16777216.0f - 0.5f;
            x[i] = kind == 1 ? u : g * (kind == 2 && i % 37 == 5 ? 20.0f : 1.0f) * 0.03f;
        }
        CHECK(quant_quantize_row(AL_TYPE_MXFP4, x, q, N) == AL_OK);
        quant_dequantize(AL_TYPE_MXFP4, q, y, N);
        double num = 0, den = 0;
        for (int i = 0; i < N; i++) {
            num += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
            den += (double)x[i] * x[i];
        }
        const double e = num / den;
        printf("  MXFP4 round trip, %s: NMSE %.2e\n", kind_names[kind], e);
        CHECK_MSG(e <= 5e-2, "%s: NMSE %.3g > 5e-2", kind_names[kind], e);
    }
    /* rows must be whole blocks */
    CHECK(quant_quantize_row(AL_TYPE_MXFP4, x, q, 48) == AL_ERR_ARG);
    CHECK(quant_can_quantize(AL_TYPE_MXFP4));
}

/* ---- the MXFP4_MOE scheme ------------------------------------------------------------ */

static uint32_t pick(const quant_model_desc *m, const char *name, uint32_t n_dims, int64_t ne0,
                     int64_t ne1, int64_t ne2, bool *fell) {
    const int64_t ne[4] = {ne0, ne1, ne2, 1};
    return quant_pick_type(quant_scheme_find("MXFP4_MOE"), m, name, n_dims, ne, AL_TYPE_F32, fell);
}

static void test_scheme_rules(void) {
    const quant_scheme *s = quant_scheme_find("mxfp4_moe");
    CHECK(s != NULL && s->ftype == 38 && s->type == AL_TYPE_MXFP4);
    quant_model_desc m = {.n_layer = 24, .n_attn_v = 24, .has_output = true};
    bool fell = true;
    /* stacked experts [n_in][n_out][n_expert] */
    CHECK(pick(&m, "blk.3.ffn_up_exps.weight", 3, 2880, 2880, 32, &fell) == AL_TYPE_MXFP4 && !fell);
    CHECK(pick(&m, "blk.3.ffn_down_exps.weight", 3, 2880, 2880, 32, NULL) == AL_TYPE_MXFP4);
    /* llama.cpp tests ne[2] > 1, not the name: one expert is a matrix like any other */
    CHECK(pick(&m, "blk.3.ffn_up_exps.weight", 3, 2880, 2880, 1, NULL) == AL_TYPE_Q8_0);
    CHECK(pick(&m, "blk.3.attn_q.weight", 2, 2880, 4096, 1, NULL) == AL_TYPE_Q8_0);
    CHECK(pick(&m, "blk.3.attn_v.weight", 2, 2880, 512, 1, NULL) == AL_TYPE_Q8_0);
    CHECK(pick(&m, "blk.3.ffn_down.weight", 2, 2880, 512, 1, NULL) == AL_TYPE_Q8_0);
    CHECK(pick(&m, "output.weight", 2, 2880, 201088, 1, NULL) == AL_TYPE_Q8_0);
    CHECK(pick(&m, "token_embd.weight", 2, 2880, 201088, 1, NULL) == AL_TYPE_Q8_0);
    /* kept: the router, norms, biases, sinks */
    CHECK(pick(&m, "blk.3.ffn_gate_inp.weight", 2, 2880, 32, 1, NULL) == AL_TYPE_F32);
    CHECK(pick(&m, "blk.3.attn_norm.weight", 1, 2880, 1, 1, NULL) == AL_TYPE_F32);
    CHECK(pick(&m, "blk.3.ffn_up_exps.bias", 2, 2880, 32, 1, NULL) == AL_TYPE_F32);
    CHECK(pick(&m, "blk.3.attn_sinks.weight", 1, 64, 1, 1, NULL) == AL_TYPE_F32);
    /* tied embeddings: the output rule gives Q8_0 too */
    quant_model_desc tied = m;
    tied.has_output = false;
    CHECK(pick(&tied, "token_embd.weight", 2, 2880, 201088, 1, NULL) == AL_TYPE_Q8_0);
    /* rows that are not whole blocks fall back */
    CHECK(pick(&m, "blk.3.ffn_up_exps.weight", 3, 100, 64, 8, &fell) == AL_TYPE_F16 && fell);
    /* pure: MXFP4 everywhere */
    quant_model_desc pure = m;
    pure.pure = true;
    CHECK(pick(&pure, "output.weight", 2, 2880, 201088, 1, NULL) == AL_TYPE_MXFP4);
    CHECK(pick(&pure, "blk.3.attn_q.weight", 2, 2880, 4096, 1, NULL) == AL_TYPE_MXFP4);
}

/* ---- 3. llama.cpp's file ---------------------------------------------------------------- */

/* Quantizes tensor t (F32) row by row; the number of rows equal to want's bytes. */
static int64_t rows_matching(const gguf_tensor *t, const gguf_tensor *want, int64_t *n_rows) {
    const int64_t n = t->ne[0], rows = (int64_t)(t->n_elem / (uint64_t)n);
    const uint64_t rb = quant_row_bytes(AL_TYPE_MXFP4, n);
    uint8_t *q = malloc(rb);
    int64_t same = 0;
    *n_rows = rows;
    for (int64_t r = 0; q && want->n_bytes == rb * (uint64_t)rows && r < rows; r++) {
        const float *x = (const float *)((const uint8_t *)t->data + (uint64_t)r * (uint64_t)n * 4);
        same += quant_quantize_row(AL_TYPE_MXFP4, x, q, n) == AL_OK &&
                !memcmp(q, (const uint8_t *)want->data + (uint64_t)r * rb, rb);
    }
    free(q);
    return same;
}

static void test_reference_file(void) {
    char p_src[1100], p_ref[1100];
    snprintf(p_src, sizeof p_src, "%s/models/moe/ref-gpt-oss-f32.gguf", test_shared_dir());
    snprintf(p_ref, sizeof p_ref, "%s/models/moe/ref-gpt-oss-MXFP4_MOE.gguf", test_shared_dir());
    gguf_file *src = NULL, *ref = NULL;
    if (gguf_open(p_src, &src) != AL_OK || gguf_open(p_ref, &ref) != AL_OK) {
        TEST_SKIP("%s or %s cannot be read (set SHARED to the shared data directory)", p_src,
                  p_ref);
        gguf_close(src);
        return;
    }
    const quant_scheme *sch = quant_scheme_find("MXFP4_MOE");
    quant_model_desc m = {.n_layer = 4};
    m.has_output = gguf_find_tensor(src, "output.weight") != NULL;
    int n_type = 0, n_mxfp4 = 0, n_exact = 0;
    int64_t rows_all = 0, rows_same = 0;
    for (uint64_t i = 0; i < ref->n_tensors; i++) {
        const gguf_tensor *want = &ref->tensors[i];
        char name[128];
        gguf_str_copy(want->name, name, sizeof name);
        const gguf_tensor *t = gguf_find_tensor(src, name);
        CHECK_MSG(t != NULL && t->type == AL_TYPE_F32, "%s: no F32 tensor in the source", name);
        if (!t || t->type != AL_TYPE_F32) continue;
        const uint32_t type = quant_pick_type(sch, &m, name, t->n_dims, t->ne, t->type, NULL);
        n_type += type == want->type;
        CHECK_MSG(type == want->type, "%s: picked %s, llama.cpp %s", name, quant_type_name(type),
                  quant_type_name(want->type));
        if (want->type != AL_TYPE_MXFP4) continue;
        n_mxfp4++;
        int64_t n_rows;
        const int64_t same = rows_matching(t, want, &n_rows);
        rows_all += n_rows, rows_same += same;
        n_exact += same == n_rows;
        CHECK_MSG(same == n_rows, "%s: %lld of %lld rows differ from llama.cpp's bytes", name,
                  (long long)(n_rows - same), (long long)n_rows);
    }
    CHECK(n_mxfp4 == 12); /* gate, up and down experts of 4 layers */
    printf("  ref-gpt-oss-MXFP4_MOE: %d/%llu types as llama.cpp's; %d/%d MXFP4 tensors "
           "(%lld/%lld rows) byte-identical\n", n_type, (unsigned long long)ref->n_tensors,
           n_exact, n_mxfp4, (long long)rows_same, (long long)rows_all);
    gguf_close(src);
    gguf_close(ref);
}

int main(void) {
    TEST_RUN(test_e2m1_table);
    TEST_RUN(test_dequant_codes);
    TEST_RUN(test_quantize_exponent);
    TEST_RUN(test_quantize_ties);
    TEST_RUN(test_quantize_fixed_point);
    TEST_RUN(test_round_trip);
    TEST_RUN(test_scheme_rules);
    TEST_RUN(test_reference_file);
    return test_finish();
}
