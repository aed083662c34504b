/* test_quant.c: the tensor types of quant.h and the half-float conversions of util.h.
 *
 * Three kinds of evidence that the dequantizers read ggml's layouts:
 *   1. Hand-built blocks: each test packs chosen integer quants and scales into bytes
 *      the way the format describes (the direction a quantizer writes), and expects
 *      the format's formula back, e.g. Q4_0 gives d * (q - 8).
 *   2. The fp16 conversions on all 65536 halves and on every rounding midpoint.
 *   3. The reference models in $SHARED/models/ref: the same random weights stored as
 *      F32, F16, Q8_0, Q4_0, ... by llama.cpp. Dequantized, every tensor must land near
 *      its F32 original (NMSE under a bound per type). A wrong bit layout scrambles
 *      the values and gives an NMSE near 1 or more, far above any bound here.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/quant.h"
#include "test.h"
#include "util.h"

/* ---- helpers ------------------------------------------------------------------------ */

/* xorshift32: a fixed, portable stream of test values. */
static uint32_t rng_next(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* Stores v as a little-endian fp16; v must be exactly representable. */
static void put_f16(uint8_t *p, float v) {
    const uint16_t h = al_f32_to_f16(v);
    p[0] = (uint8_t)(h & 0xFF);
    p[1] = (uint8_t)(h >> 8);
}

/* Dequantizes n elements from blocks and compares them with want. Does it twice: once
 * from an aligned buffer and once from an odd address, because quantized rows in a
 * mapping need not be aligned beyond the 2 bytes GGUF's packing gives. */
static void check_dequant(uint32_t type, const uint8_t *blocks, const double *want, int n) {
    enum { MAX_N = 512, MAX_BYTES = 2 * 292 };
    float got[MAX_N], got_odd[MAX_N];
    uint8_t odd[MAX_BYTES + 1];
    const uint64_t n_bytes = quant_row_bytes(type, n);
    AL_ASSERT(n <= MAX_N && n_bytes > 0 && n_bytes <= MAX_BYTES);
    memcpy(odd + 1, blocks, n_bytes);
    quant_dequantize(type, blocks, got, n);
    quant_dequantize(type, odd + 1, got_odd, n);
    int n_bad = 0;
    for (int i = 0; i < n; i++) {
        const double tol = 1e-6 * (1.0 + fabs(want[i]));
        if (fabs(got[i] - want[i]) <= tol && got_odd[i] == got[i]) continue;
        if (n_bad++ < 4)
            CHECK_MSG(0, "%s element %d: got %g (odd address %g), want %g",
                      quant_type_name(type), i, got[i], got_odd[i], want[i]);
    }
    CHECK_MSG(n_bad == 0, "%s: %d of %d elements wrong", quant_type_name(type), n_bad, n);
}

/* ---- traits ------------------------------------------------------------------------- */

static void test_traits(void) {
    static const struct {
        uint32_t type;
        const char *name;
        uint32_t block_size, type_size;
    } want[] = {
        {AL_TYPE_F32, "F32", 1, 4},       {AL_TYPE_F16, "F16", 1, 2},
        {AL_TYPE_BF16, "BF16", 1, 2},     {AL_TYPE_Q4_0, "Q4_0", 32, 18},
        {AL_TYPE_Q4_1, "Q4_1", 32, 20},   {AL_TYPE_Q5_0, "Q5_0", 32, 22},
        {AL_TYPE_Q5_1, "Q5_1", 32, 24},   {AL_TYPE_Q8_0, "Q8_0", 32, 34},
        {AL_TYPE_Q8_1, "Q8_1", 32, 36},   {AL_TYPE_Q2_K, "Q2_K", 256, 84},
        {AL_TYPE_Q3_K, "Q3_K", 256, 110}, {AL_TYPE_Q4_K, "Q4_K", 256, 144},
        {AL_TYPE_Q5_K, "Q5_K", 256, 176}, {AL_TYPE_Q6_K, "Q6_K", 256, 210},
        {AL_TYPE_Q8_K, "Q8_K", 256, 292}, {AL_TYPE_MXFP4, "MXFP4", 32, 17},
    };
    int n_known = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const quant_traits *t = quant_get_traits(want[i].type);
        CHECK_MSG(t != NULL, "type %u", want[i].type);
        if (t == NULL) continue;
        CHECK(strcmp(t->name, want[i].name) == 0);
        CHECK(strcmp(quant_type_name(want[i].type), want[i].name) == 0);
        CHECK_MSG(t->block_size == want[i].block_size, "%s", t->name);
        CHECK_MSG(t->type_size == want[i].type_size, "%s", t->name);
        CHECK_MSG(t->dequantize != NULL, "%s", t->name);
    }
    /* nothing else is known: 4 and 5 were ggml's removed Q4_2/Q4_3, 16+ the IQ types
     * (MXFP4, 39, is tested in test_mxfp4.c) */
    for (uint32_t ty = 0; ty < 1000; ty++) n_known += quant_get_traits(ty) != NULL;
    CHECK(n_known == (int)(sizeof want / sizeof want[0]));
    CHECK(quant_get_traits(4) == NULL && quant_get_traits(AL_TYPE_COUNT) == NULL);
    CHECK(quant_get_traits(UINT32_MAX) == NULL);
    CHECK(strcmp(quant_type_name(5), "unknown") == 0);
    CHECK(strcmp(quant_type_name(UINT32_MAX), "unknown") == 0);
}

static void test_row_bytes(void) {
    CHECK(quant_row_bytes(AL_TYPE_F32, 256) == 1024);
    CHECK(quant_row_bytes(AL_TYPE_F16, 3) == 6);
    CHECK(quant_row_bytes(AL_TYPE_Q4_0, 4096) == 128 * 18);
    CHECK(quant_row_bytes(AL_TYPE_Q6_K, 768) == 3 * 210);
    CHECK(quant_row_bytes(AL_TYPE_Q8_0, 0) == 0);
    CHECK(quant_row_bytes(AL_TYPE_Q4_0, 33) == 0);   /* not whole blocks */
    CHECK(quant_row_bytes(AL_TYPE_Q4_K, 128) == 0);
    CHECK(quant_row_bytes(AL_TYPE_F32, -4) == 0);
    CHECK(quant_row_bytes(4, 32) == 0);              /* unknown type */
    /* INT64_MAX * 4 bytes does not fit in 64 bits: 0, not a wrapped size */
    CHECK(quant_row_bytes(AL_TYPE_F32, INT64_MAX) == 0);
    CHECK(quant_row_bytes(AL_TYPE_F16, INT64_MAX) == 2 * (uint64_t)INT64_MAX); /* fits */
    /* the largest Q4_0 row still fits: (2^63 / 32) blocks of 18 bytes */
    const int64_t n_big = INT64_MAX - INT64_MAX % 32;
    CHECK(quant_row_bytes(AL_TYPE_Q4_0, n_big) == (uint64_t)(n_big / 32) * 18);
}

/* ---- hand-built blocks -------------------------------------------------------------- */

static void test_float_rows(void) {
    const float v[4] = {1.0f, -2.5f, 65504.0f, 0x1p-14f};
    uint8_t f32[16], f16[8], bf16[8];
    double want[4];
    memcpy(f32, v, sizeof v);
    for (int i = 0; i < 4; i++) {
        put_f16(f16 + 2 * i, v[i]);
        uint32_t bits;
        memcpy(&bits, &v[i], 4);
        /* bfloat16 is the top half of a float; these values have empty low halves
         * except 65504, which bf16 truncates to 65280 */
        bf16[2 * i] = (uint8_t)(bits >> 16);
        bf16[2 * i + 1] = (uint8_t)(bits >> 24);
        want[i] = v[i];
    }
    check_dequant(AL_TYPE_F32, f32, want, 4);
    check_dequant(AL_TYPE_F16, f16, want, 4);
    want[2] = 65280.0;
    check_dequant(AL_TYPE_BF16, bf16, want, 4);
}

/* Q4_0, Q4_1, Q5_0, Q5_1: per block of 32, fp16 d, then fp16 m (the _1 types), then
 * a little-endian uint32 of fifth bits (the 5-bit types), then 16 bytes of nibbles:
 * element e < 16 in the low nibble of byte e, element e >= 16 in the high nibble of
 * byte e - 16. The _0 types are symmetric, d * (q - 2^(bits-1)); the _1 types are
 * d * q + m. */
static void check_legacy(uint32_t type, int bits, int has_min) {
    const int type_size = 18 + 2 * has_min + (bits == 5 ? 4 : 0);
    uint8_t buf[2 * 24] = {0};
    double want[64];
    uint32_t rs = 12345u + (uint32_t)type;
    for (int b = 0; b < 2; b++) {
        uint8_t *blk = buf + b * type_size;
        const float d = b ? -0.375f : 0.5f, m = b ? 3.25f : -1.75f;
        put_f16(blk, d);
        if (has_min) put_f16(blk + 2, m);
        uint8_t *qh = blk + 2 + 2 * has_min, *qs = qh + (bits == 5 ? 4 : 0);
        for (int e = 0; e < 32; e++) {
            const int q = (int)(rng_next(&rs) % (1u << bits));
            qs[e % 16] |= (uint8_t)((q & 0xF) << (e < 16 ? 0 : 4));
            if (bits == 5) qh[e / 8] |= (uint8_t)((q >> 4) << (e % 8));
            want[32 * b + e] = has_min ? d * q + m : d * (q - (1 << (bits - 1)));
        }
    }
    check_dequant(type, buf, want, 64);
}

static void test_legacy_4_5(void) {
    check_legacy(AL_TYPE_Q4_0, 4, 0);
    check_legacy(AL_TYPE_Q4_1, 4, 1);
    check_legacy(AL_TYPE_Q5_0, 5, 0);
    check_legacy(AL_TYPE_Q5_1, 5, 1);
}

/* Q8_0: fp16 d and 32 int8; Q8_1 adds fp16 s = d * sum(q), which decoding ignores. */
static void test_q8_0_q8_1(void) {
    for (int has_s = 0; has_s < 2; has_s++) {
        const int type_size = 34 + 2 * has_s;
        uint8_t buf[2 * 36] = {0};
        double want[64];
        uint32_t rs = 777u + (uint32_t)has_s;
        for (int b = 0; b < 2; b++) {
            uint8_t *blk = buf + b * type_size;
            const float d = b ? 0.0078125f : -1.5f;
            put_f16(blk, d);
            if (has_s) put_f16(blk + 2, 1000.0f); /* must not leak into the values */
            for (int e = 0; e < 32; e++) {
                const int q = e == 0 ? -128 : e == 31 ? 127 : (int)(rng_next(&rs) % 256) - 128;
                blk[2 + 2 * has_s + e] = (uint8_t)(int8_t)q;
                want[32 * b + e] = (double)d * q;
            }
        }
        check_dequant(has_s ? AL_TYPE_Q8_1 : AL_TYPE_Q8_0, buf, want, 64);
    }
}

/* The 2-bit fields of Q2_K and Q3_K: element e of a super-block lives in byte
 * 32 * (e / 128) + e % 32 of qs, at bit 2 * ((e % 128) / 32). */
static int k2_byte(int e) { return 32 * (e / 128) + e % 32; }
static int k2_shift(int e) { return 2 * ((e % 128) / 32); }

/* Q2_K: scales[16] (scale nibble low, min nibble high), qs[64], fp16 d, fp16 dmin.
 * Element e of sub-block s = e / 16: d * scale[s] * q - dmin * min[s]. */
static void test_q2_k(void) {
    uint8_t buf[2 * 84] = {0};
    double want[512];
    uint32_t rs = 2;
    for (int b = 0; b < 2; b++) {
        uint8_t *blk = buf + 84 * b;
        const float d = b ? 0.25f : 0.03125f, dmin = b ? 0.125f : 0.5f;
        int sc[16], mn[16];
        for (int s = 0; s < 16; s++) {
            sc[s] = (int)(rng_next(&rs) % 16);
            mn[s] = (int)(rng_next(&rs) % 16);
            blk[s] = (uint8_t)(sc[s] | mn[s] << 4);
        }
        put_f16(blk + 80, d);
        put_f16(blk + 82, dmin);
        for (int e = 0; e < 256; e++) {
            const int q = (int)(rng_next(&rs) % 4);
            blk[16 + k2_byte(e)] |= (uint8_t)(q << k2_shift(e));
            want[256 * b + e] = (double)d * sc[e / 16] * q - (double)dmin * mn[e / 16];
        }
    }
    check_dequant(AL_TYPE_Q2_K, buf, want, 512);
}

/* Q3_K: hmask[32], qs[64], scales[12], fp16 d. A quant is 3 bits, value q - 4: the
 * low two in qs as in Q2_K, the third in hmask[e % 32] at bit e / 32. Sixteen 6-bit
 * scales, value s - 32: the low nibble of scale j goes to byte j (j < 8, low nibble)
 * or byte j - 8 (high nibble); its top two bits to byte 8 + j % 4 at bit 2 * (j / 4). */
static void test_q3_k(void) {
    uint8_t buf[2 * 110] = {0};
    double want[512];
    uint32_t rs = 3;
    for (int b = 0; b < 2; b++) {
        uint8_t *blk = buf + 110 * b, *scales = blk + 96;
        const float d = b ? -0.0625f : 0.5f;
        int sc[16];
        for (int j = 0; j < 16; j++) {
            sc[j] = j == 0 ? 0 : j == 15 ? 63 : (int)(rng_next(&rs) % 64);
            if (j < 8) scales[j] |= (uint8_t)(sc[j] & 0xF);
            else scales[j - 8] |= (uint8_t)((sc[j] & 0xF) << 4);
            scales[8 + j % 4] |= (uint8_t)((sc[j] >> 4) << (2 * (j / 4)));
        }
        put_f16(blk + 108, d);
        for (int e = 0; e < 256; e++) {
            const int q = (int)(rng_next(&rs) % 8);
            blk[32 + k2_byte(e)] |= (uint8_t)((q & 3) << k2_shift(e));
            blk[e % 32] |= (uint8_t)((q >> 2) << (e / 32));
            want[256 * b + e] = (double)d * (sc[e / 16] - 32) * (q - 4);
        }
    }
    check_dequant(AL_TYPE_Q3_K, buf, want, 512);
}

/* The 12-byte scale/min table of Q4_K and Q5_K, written as ggml's quantizer writes
 * it: sub-blocks 0..3 whole in bytes 0..7; sub-blocks 4..7 split into nibbles in
 * bytes 8..11 and top bits in the spare bits 6..7 of bytes 0..7. */
static void pack_k4_scales(uint8_t out[12], const int sc[8], const int mn[8]) {
    memset(out, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            out[j] = (uint8_t)sc[j];
            out[j + 4] = (uint8_t)mn[j];
        } else {
            out[j + 4] = (uint8_t)((sc[j] & 0xF) | (mn[j] & 0xF) << 4);
            out[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            out[j] |= (uint8_t)((mn[j] >> 4) << 6);
        }
    }
}

/* Q4_K: fp16 d, fp16 dmin, scales[12], qs[128]; Q5_K puts qh[32] before qs. Eight
 * sub-blocks of 32; element e: d * sc[e/32] * q - dmin * mn[e/32]. Byte 32 * (e / 64)
 * + e % 32 of qs holds the low 4 bits (low nibble if e % 64 < 32); Q5_K's fifth bit
 * is bit e / 32 of qh[e % 32]. */
static void check_k4_k5(uint32_t type, int bits) {
    const int type_size = bits == 5 ? 176 : 144;
    uint8_t buf[2 * 176] = {0};
    double want[512];
    uint32_t rs = 45u + (uint32_t)bits;
    for (int b = 0; b < 2; b++) {
        uint8_t *blk = buf + b * type_size;
        uint8_t *qh = blk + 16, *qs = blk + (bits == 5 ? 48 : 16);
        const float d = b ? 0.015625f : 0.25f, dmin = b ? 0.5f : 0.0625f;
        int sc[8], mn[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = j == 7 ? 63 : (int)(rng_next(&rs) % 64);
            mn[j] = j == 6 ? 63 : (int)(rng_next(&rs) % 64);
        }
        put_f16(blk, d);
        put_f16(blk + 2, dmin);
        pack_k4_scales(blk + 4, sc, mn);
        for (int e = 0; e < 256; e++) {
            const int q = (int)(rng_next(&rs) % (1u << bits));
            qs[32 * (e / 64) + e % 32] |= (uint8_t)((q & 0xF) << (e % 64 < 32 ? 0 : 4));
            if (bits == 5) qh[e % 32] |= (uint8_t)((q >> 4) << (e / 32));
            want[256 * b + e] = (double)d * sc[e / 32] * q - (double)dmin * mn[e / 32];
        }
    }
    check_dequant(type, buf, want, 512);
}

static void test_q4_k_q5_k(void) {
    check_k4_k5(AL_TYPE_Q4_K, 4);
    check_k4_k5(AL_TYPE_Q5_K, 5);
}

/* Q6_K: ql[128], qh[64], int8 scales[16], fp16 d; element e: d * scales[e/16] *
 * (q - 32). Within a 128-element half h, element 32 * g + l (g = 0..3) keeps its low
 * nibble in ql[64h + 32 * (g % 2) + l] (high nibble when g >= 2) and its top two bits
 * in qh[32h + l] at bit 2g. */
static void test_q6_k(void) {
    uint8_t buf[2 * 210] = {0};
    double want[512];
    uint32_t rs = 6;
    for (int b = 0; b < 2; b++) {
        uint8_t *blk = buf + 210 * b, *ql = blk, *qh = blk + 128;
        const float d = b ? 0.001953125f : -0.125f;
        int sc[16];
        for (int s = 0; s < 16; s++) {
            sc[s] = s == 0 ? -128 : s == 1 ? 127 : (int)(rng_next(&rs) % 256) - 128;
            blk[192 + s] = (uint8_t)(int8_t)sc[s];
        }
        put_f16(blk + 208, d);
        for (int e = 0; e < 256; e++) {
            const int q = (int)(rng_next(&rs) % 64);
            const int h = e / 128, g = (e % 128) / 32, l = e % 32;
            ql[64 * h + 32 * (g % 2) + l] |= (uint8_t)((q & 0xF) << (g >= 2 ? 4 : 0));
            qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * g));
            want[256 * b + e] = (double)d * sc[e / 16] * (q - 32);
        }
    }
    check_dequant(AL_TYPE_Q6_K, buf, want, 512);
}

/* Q8_K: float32 d (little-endian), int8 qs[256], int16 bsums[16] (ignored). */
static void test_q8_k(void) {
    uint8_t buf[2 * 292] = {0};
    double want[512];
    uint32_t rs = 8;
    for (int b = 0; b < 2; b++) {
        uint8_t *blk = buf + 292 * b;
        const float d = b ? 0.1f : -3.0f;
        uint32_t bits;
        memcpy(&bits, &d, 4);
        for (int k = 0; k < 4; k++) blk[k] = (uint8_t)(bits >> (8 * k));
        for (int e = 0; e < 256; e++) {
            const int q = (int)(rng_next(&rs) % 256) - 128;
            blk[4 + e] = (uint8_t)(int8_t)q;
            want[256 * b + e] = (double)d * q;
        }
        memset(blk + 260, 0x5A, 32); /* bsums: garbage must not matter */
    }
    check_dequant(AL_TYPE_Q8_K, buf, want, 512);
}

/* ---- half floats -------------------------------------------------------------------- */

static int f16_is_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }

/* Every half decodes to sign * 2^(exp-15) * 1.mant (subnormal: 2^-14 * 0.mant) and
 * encodes back to itself; NaNs stay NaNs. */
static void test_f16_all_halves(void) {
    int n_bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        const uint16_t h = (uint16_t)i;
        const int exp = (h >> 10) & 0x1F, mant = h & 0x3FF, neg = h >> 15;
        double want;
        if (exp == 31) want = mant ? NAN : INFINITY;
        else if (exp == 0) want = ldexp(mant, -24);
        else want = ldexp(1024 + mant, exp - 25);
        if (neg) want = -want;
        const float f = al_f16_to_f32(h);
        const uint16_t back = al_f32_to_f16(f);
        int ok;
        if (f16_is_nan(h)) ok = isnan(f) && f16_is_nan(back);
        else ok = (double)f == want && !signbit(f) == !neg && back == h;
        if (!ok && n_bad++ < 4) CHECK_MSG(0, "half 0x%04x -> %g -> 0x%04x", h, f, back);
    }
    CHECK_MSG(n_bad == 0, "%d halves wrong", n_bad);
}

/* Between two neighbouring halves, the midpoint rounds to the one with an even
 * mantissa, and anything nearer one side rounds to that side. Covers subnormals too. */
static void test_f16_rounding(void) {
    int n_bad = 0;
    for (uint32_t h = 0; h < 0x7BFF; h++) {
        const float lo = al_f16_to_f32((uint16_t)h), hi = al_f16_to_f32((uint16_t)(h + 1));
        const float mid = lo + (hi - lo) / 2; /* exact: 12 significant bits at most */
        const uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        for (int neg = 0; neg < 2; neg++) {
            const float s = neg ? -1.0f : 1.0f;
            const uint16_t sign = neg ? 0x8000 : 0;
            const int ok = al_f32_to_f16(s * mid) == (even | sign) &&
                           al_f32_to_f16(s * nextafterf(mid, 0)) == (h | sign) &&
                           al_f32_to_f16(s * nextafterf(mid, INFINITY)) == ((h + 1) | sign);
            if (!ok && n_bad++ < 4) CHECK_MSG(0, "midpoint above half 0x%04x", h);
        }
    }
    CHECK_MSG(n_bad == 0, "%d midpoints wrong", n_bad);
    /* the top: 65504 is the largest half; from the midpoint 65520 on, infinity */
    CHECK(al_f32_to_f16(65519.0f) == 0x7BFF);
    CHECK(al_f32_to_f16(65520.0f) == 0x7C00);
    CHECK(al_f32_to_f16(-1e10f) == 0xFC00);
    CHECK(al_f32_to_f16(-INFINITY) == 0xFC00);
    CHECK(f16_is_nan(al_f32_to_f16(NAN)));
    /* the bottom: 2^-24 is the smallest subnormal; 2^-25 ties to even (zero) */
    CHECK(al_f16_to_f32(0x0001) == ldexpf(1, -24));
    CHECK(al_f16_to_f32(0x03FF) == ldexpf(1023, -24));
    CHECK(al_f32_to_f16(ldexpf(1, -14)) == 0x0400);
    CHECK(al_f32_to_f16(ldexpf(1, -25)) == 0x0000);
    CHECK(al_f32_to_f16(nextafterf(ldexpf(1, -25), 1)) == 0x0001);
    CHECK(al_f32_to_f16(ldexpf(3, -25)) == 0x0002); /* 1.5 * 2^-24: tie, to even */
    CHECK(al_f32_to_f16(1e-30f) == 0x0000);
    CHECK(al_f32_to_f16(-1e-30f) == 0x8000);
    CHECK(al_f32_to_f16(ldexpf(1, -149)) == 0x0000); /* a float subnormal */
}

static void test_bf16(void) {
    CHECK(al_bf16_to_f32(0x3F80) == 1.0f);
    CHECK(al_bf16_to_f32(0xC020) == -2.5f);
    CHECK(al_bf16_to_f32(0x0000) == 0.0f && !signbit(al_bf16_to_f32(0x0000)));
    CHECK(signbit(al_bf16_to_f32(0x8000)));
    CHECK(isinf(al_bf16_to_f32(0x7F80)));
    CHECK(isnan(al_bf16_to_f32(0x7FC0)));
}

/* ---- the reference models ----------------------------------------------------------- */

/* Worst NMSE accepted for a tensor of each type against the F32 weights: about 2-3x
 * the worst measured on the reference models (random normal weights), e.g. Q4_0 7.5e-3,
 * Q4_K 5.2e-3, Q5_K 1.3e-3, Q6_K 3.2e-4, Q8_0 2.9e-5, F16 4.4e-8. F32 tensors (norms)
 * are stored unchanged, so they must match exactly. */
static double nmse_bound(uint32_t type) {
    switch (type) {
    case AL_TYPE_F32: return 0.0;
    case AL_TYPE_F16: return 1e-7;
    case AL_TYPE_BF16: return 1e-5;
    case AL_TYPE_Q8_0: return 8e-5;
    case AL_TYPE_Q6_K: return 8e-4;
    case AL_TYPE_Q5_K: return 3e-3;
    case AL_TYPE_Q5_0: case AL_TYPE_Q5_1: return 5e-3;
    case AL_TYPE_Q4_K: return 1.2e-2;
    case AL_TYPE_Q4_1: return 1.5e-2;
    case AL_TYPE_Q4_0: return 2e-2;
    default: return 5e-2;
    }
}

/* Dequantizes a tensor into a new buffer; NULL (and a failed check) if it can't. */
static float *dequant_tensor(const char *file, const gguf_tensor *t) {
    const quant_traits *tr = quant_get_traits(t->type);
    char name[128];
    gguf_str_copy(t->name, name, sizeof name);
    CHECK_MSG(tr != NULL && tr->dequantize != NULL, "%s: %s: type %s", file, name,
              quant_type_name(t->type));
    if (tr == NULL || tr->dequantize == NULL) return NULL;
    /* the reader guarantees whole blocks per row, so the tensor is whole blocks */
    CHECK_MSG(quant_row_bytes(t->type, (int64_t)t->n_elem) == t->n_bytes,
              "%s: %s: %llu bytes for %llu elements", file, name,
              (unsigned long long)t->n_bytes, (unsigned long long)t->n_elem);
    float *out = malloc(t->n_elem * sizeof(float));
    AL_ASSERT(out != NULL);
    quant_dequantize(t->type, t->data, out, (int64_t)t->n_elem);
    return out;
}

/* Compares every tensor of dir/file with the same tensor of dir/ref and prints the
 * worst NMSE per type. */
static void compare_with_ref(const char *dir, const char *file, const char *ref) {
    char path[1280], ref_path[1280]; /* dir is at most 1023 bytes */
    snprintf(path, sizeof path, "%s/%s.gguf", dir, file);
    snprintf(ref_path, sizeof ref_path, "%s/%s.gguf", dir, ref);
    gguf_file *q = NULL, *r = NULL;
    al_status st = gguf_open(path, &q);
    CHECK_MSG(st == AL_OK, "%s", al_last_error());
    if (st == AL_OK) st = gguf_open(ref_path, &r);
    CHECK_MSG(st == AL_OK, "%s", al_last_error());
    double worst[AL_TYPE_COUNT];
    for (int i = 0; i < AL_TYPE_COUNT; i++) worst[i] = -1;
    for (uint64_t i = 0; st == AL_OK && i < q->n_tensors; i++) {
        const gguf_tensor *a = &q->tensors[i];
        char name[128];
        gguf_str_copy(a->name, name, sizeof name);
        const gguf_tensor *b = gguf_find_tensor(r, name);
        CHECK_MSG(b != NULL && b->n_elem == a->n_elem && a->type < AL_TYPE_COUNT,
                  "%s: tensor %s has no match in %s", file, name, ref);
        if (b == NULL || b->n_elem != a->n_elem || a->type >= AL_TYPE_COUNT) continue;
        float *x = dequant_tensor(file, a), *y = dequant_tensor(ref, b);
        double err = 0, norm = 0;
        for (uint64_t k = 0; x && y && k < a->n_elem; k++) {
            err += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
            norm += (double)y[k] * y[k];
        }
        const double nmse = norm > 0 ? err / norm : err;
        CHECK_MSG(x && y && nmse <= nmse_bound(a->type), "%s: %s (%s): NMSE %.3g > %.3g",
                  file, name, quant_type_name(a->type), nmse, nmse_bound(a->type));
        if (nmse > worst[a->type]) worst[a->type] = nmse;
        free(x);
        free(y);
    }
    if (st == AL_OK) {
        printf("  %-16s vs %-14s %3llu tensors, worst NMSE:", file, ref,
               (unsigned long long)q->n_tensors);
        for (int ty = 0; ty < AL_TYPE_COUNT; ty++)
            if (worst[ty] >= 0) printf(" %s %.2e", quant_type_name((uint32_t)ty), worst[ty]);
        printf("\n");
    }
    gguf_close(q);
    gguf_close(r);
}

static void test_ref_models(void) {
    static const char *const pairs[][2] = {
        {"ref-llama-f16", "ref-llama-f32"},  {"ref-llama-Q8_0", "ref-llama-f32"},
        {"ref-llama-Q6_K", "ref-llama-f32"}, {"ref-llama-Q5_K_M", "ref-llama-f32"},
        {"ref-llama-Q4_K_M", "ref-llama-f32"}, {"ref-llama-Q4_1", "ref-llama-f32"},
        {"ref-llama-Q4_0", "ref-llama-f32"}, {"ref-qwen2-Q8_0", "ref-qwen2-f16"},
    };
    char dir[1024], probe[1280];
    snprintf(dir, sizeof dir, "%s/models/ref", test_shared_dir());
    /* the models are data outside the repository: without them, say so, not pass */
    snprintf(probe, sizeof probe, "%s/ref-llama-f32.gguf", dir);
    FILE *fp = fopen(probe, "rb");
    if (fp == NULL) {
        TEST_SKIP("%s not found (set SHARED to the shared data directory)", probe);
        return;
    }
    fclose(fp);
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        compare_with_ref(dir, pairs[i][0], pairs[i][1]);
}

int main(void) {
    TEST_RUN(test_traits);
    TEST_RUN(test_row_bytes);
    TEST_RUN(test_float_rows);
    TEST_RUN(test_legacy_4_5);
    TEST_RUN(test_q8_0_q8_1);
    TEST_RUN(test_q2_k);
    TEST_RUN(test_q3_k);
    TEST_RUN(test_q4_k_q5_k);
    TEST_RUN(test_q6_k);
    TEST_RUN(test_q8_k);
    TEST_RUN(test_f16_all_halves);
    TEST_RUN(test_f16_rounding);
    TEST_RUN(test_bf16);
    TEST_RUN(test_ref_models);
    return test_finish();
}
