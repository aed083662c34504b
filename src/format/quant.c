/* quant.c: the GGUF tensor types and their plain-C reference dequantizers.
 *
 * Every block layout below is ggml's, byte for byte: a quantized tensor written by
 * llama.cpp's converter or llama-quantize must come out here exactly as it does there.
 * The block structs hold only uint8_t fields, so they have alignment 1 and no padding:
 * a pointer into the mapping can be read as a block at any address, and each
 * _Static_assert pins the size to ggml's. Multi-byte fields (fp16 scales, the 32-bit
 * high-bit mask of Q5_0/Q5_1, Q8_K's float scale) are assembled from little-endian
 * bytes, so neither alignment nor host byte order matters.
 *
 * Two block sizes exist. The "legacy" types (Q4_0 ... Q8_1) cut a row into blocks of
 * 32 with one or two fp16 numbers per block. The K-quants (Q2_K ... Q8_K) use
 * super-blocks of 256 split into 8 or 16 sub-blocks, each sub-block with its own small
 * integer scale (and min) that multiplies the super-block's fp16 d (and dmin).
 *
 * MXFP4 (ggml type 39, gpt-oss's expert weights) is a block of 32 with a power-of-two
 * scale byte and 4-bit floating-point codes; see quant.h.
 *
 * These functions favour readability over speed; they are the oracle that SIMD
 * kernels and shaders are compared with. Formats: ggml's ggml-common.h (block
 * structs) and ggml-quants.c (dequantize_row_*), which these match.
 */
#include "format/quant.h"

#include <string.h>

#include "util.h"

#define QK 32    /* elements per block of the legacy types */
#define QK_K 256 /* elements per super-block of the K-quants */

/* An fp16 number stored little-endian at p. */
static inline float load_f16(const uint8_t *p) {
    return al_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* A little-endian uint32 at p. */
static inline uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- plain floats -------------------------------------------------------------------- */

static void dequant_f32(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void dequant_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) dst[i] = load_f16(p + 2 * i);
}

static void dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = al_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
}

/* ---- legacy blocks of 32 ------------------------------------------------------------ */
/* The 4- and 5-bit types pack element j (j < 16) into the low nibble of qs[j] and
 * element j + 16 into the high nibble of the same byte. */

typedef struct {
    uint8_t d[2];    /* fp16 scale */
    uint8_t qs[16];  /* 32 nibbles; value = d * (q - 8) */
} block_q4_0;
_Static_assert(sizeof(block_q4_0) == 18, "ggml's block_q4_0 is 18 bytes");

typedef struct {
    uint8_t d[2];    /* fp16 scale */
    uint8_t m[2];    /* fp16 offset (the block minimum) */
    uint8_t qs[16];  /* 32 nibbles; value = d * q + m */
} block_q4_1;
_Static_assert(sizeof(block_q4_1) == 20, "ggml's block_q4_1 is 20 bytes");

typedef struct {
    uint8_t d[2];
    uint8_t qh[4];   /* bit j (a little-endian uint32) = bit 4 of element j */
    uint8_t qs[16];  /* low 4 bits as in Q4_0; value = d * (q - 16) */
} block_q5_0;
_Static_assert(sizeof(block_q5_0) == 22, "ggml's block_q5_0 is 22 bytes");

typedef struct {
    uint8_t d[2];
    uint8_t m[2];
    uint8_t qh[4];
    uint8_t qs[16];  /* value = d * q + m, q in 0..31 */
} block_q5_1;
_Static_assert(sizeof(block_q5_1) == 24, "ggml's block_q5_1 is 24 bytes");

typedef struct {
    uint8_t d[2];
    int8_t qs[32];   /* value = d * q */
} block_q8_0;
_Static_assert(sizeof(block_q8_0) == 34, "ggml's block_q8_0 is 34 bytes");

typedef struct {
    uint8_t d[2];
    uint8_t s[2];    /* fp16 d * sum(qs): a dot-product shortcut, unused here */
    int8_t qs[32];
} block_q8_1;
_Static_assert(sizeof(block_q8_1) == 36, "ggml's block_q8_1 is 36 bytes");

static void dequant_q4_0(const void *src, float *dst, int64_t n) {
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, dst += QK) {
        const float d = load_f16(b->d);
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = ((b->qs[j] & 0xF) - 8) * d;
            dst[j + QK / 2] = ((b->qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_1(const void *src, float *dst, int64_t n) {
    const block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, dst += QK) {
        const float d = load_f16(b->d), m = load_f16(b->m);
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = (b->qs[j] & 0xF) * d + m;
            dst[j + QK / 2] = (b->qs[j] >> 4) * d + m;
        }
    }
}

static void dequant_q5_0(const void *src, float *dst, int64_t n) {
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, dst += QK) {
        const float d = load_f16(b->d);
        const uint32_t qh = load_u32(b->qh);
        for (int j = 0; j < QK / 2; j++) {
            /* the fifth bit of element j is bit j of qh; of element j + 16, bit j + 16 */
            const int hi0 = (qh >> j) & 1, hi1 = (qh >> (j + QK / 2)) & 1;
            dst[j] = (((b->qs[j] & 0xF) | hi0 << 4) - 16) * d;
            dst[j + QK / 2] = (((b->qs[j] >> 4) | hi1 << 4) - 16) * d;
        }
    }
}

static void dequant_q5_1(const void *src, float *dst, int64_t n) {
    const block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, dst += QK) {
        const float d = load_f16(b->d), m = load_f16(b->m);
        const uint32_t qh = load_u32(b->qh);
        for (int j = 0; j < QK / 2; j++) {
            const int hi0 = (qh >> j) & 1, hi1 = (qh >> (j + QK / 2)) & 1;
            dst[j] = ((b->qs[j] & 0xF) | hi0 << 4) * d + m;
            dst[j + QK / 2] = ((b->qs[j] >> 4) | hi1 << 4) * d + m;
        }
    }
}

static void dequant_q8_0(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, dst += QK) {
        const float d = load_f16(b->d);
        for (int j = 0; j < QK; j++) dst[j] = b->qs[j] * d;
    }
}

static void dequant_q8_1(const void *src, float *dst, int64_t n) {
    const block_q8_1 *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, dst += QK) {
        const float d = load_f16(b->d);
        for (int j = 0; j < QK; j++) dst[j] = b->qs[j] * d;
    }
}

/* ---- K-quants: super-blocks of 256 -------------------------------------------------- */
/* Q2_K and Q3_K spread 2-bit fields over a byte the same way: a 128-element half of
 * the super-block uses 32 bytes of qs; element 32*g + l of that half (g = 0..3,
 * l = 0..31) sits in bits 2g..2g+1 of byte l. Both have 16 sub-blocks of 16. */

typedef struct {
    uint8_t scales[16]; /* per sub-block: scale in the low nibble, min in the high */
    uint8_t qs[64];     /* 256 2-bit quants */
    uint8_t d[2];       /* fp16 multiplier of the 4-bit scales */
    uint8_t dmin[2];    /* fp16 multiplier of the 4-bit mins */
} block_q2_k;
_Static_assert(sizeof(block_q2_k) == 84, "ggml's block_q2_K is 84 bytes");

typedef struct {
    uint8_t hmask[32];  /* third bit of each quant; see dequant_q3_k */
    uint8_t qs[64];     /* low two bits, laid out as in Q2_K */
    uint8_t scales[12]; /* 16 6-bit scales, stored + 32; see q3_k_scale */
    uint8_t d[2];
} block_q3_k;
_Static_assert(sizeof(block_q3_k) == 110, "ggml's block_q3_K is 110 bytes");

typedef struct {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[12]; /* 8 6-bit scales and 8 6-bit mins; see k4_scale_min */
    uint8_t qs[128];    /* 256 nibbles */
} block_q4_k;
_Static_assert(sizeof(block_q4_k) == 144, "ggml's block_q4_K is 144 bytes");

typedef struct {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[12]; /* as in Q4_K */
    uint8_t qh[32];     /* bit s of qh[l] = fifth bit of element l of sub-block s */
    uint8_t qs[128];    /* low nibbles, as in Q4_K */
} block_q5_k;
_Static_assert(sizeof(block_q5_k) == 176, "ggml's block_q5_K is 176 bytes");

typedef struct {
    uint8_t ql[128];    /* low 4 bits of each quant */
    uint8_t qh[64];     /* high 2 bits */
    int8_t scales[16];  /* signed 8-bit scale per sub-block of 16 */
    uint8_t d[2];
} block_q6_k;
_Static_assert(sizeof(block_q6_k) == 210, "ggml's block_q6_K is 210 bytes");

typedef struct {
    uint8_t d[4];       /* float32, not fp16: Q8_K is an activation format */
    int8_t qs[256];
    uint8_t bsums[32];  /* 16 int16 sums of 16 quants each; unused here */
} block_q8_k;
_Static_assert(sizeof(block_q8_k) == 292, "ggml's block_q8_K is 292 bytes");

static void dequant_q2_k(const void *src, float *dst, int64_t n) {
    const block_q2_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = load_f16(b->d), dmin = load_f16(b->dmin);
        int s = 0; /* sub-block, in element order */
        for (int half = 0; half < 2; half++) {
            const uint8_t *q = b->qs + 32 * half;
            for (int g = 0; g < 4; g++) {
                /* one 32-element group is two sub-blocks: bytes 0..15 and 16..31 */
                for (int k = 0; k < 2; k++, s++) {
                    const float dl = d * (b->scales[s] & 0xF);
                    const float ml = dmin * (b->scales[s] >> 4);
                    for (int l = 0; l < 16; l++)
                        *dst++ = dl * ((q[16 * k + l] >> (2 * g)) & 3) - ml;
                }
            }
        }
    }
}

/* The 16 6-bit scales of Q3_K: the low 4 bits of scale s are the low nibble of
 * byte s (s < 8) or the high nibble of byte s - 8; the high 2 bits are in byte
 * 8 + s % 4 at bit 2 * (s / 4). Stored with +32, so the signed scale is x - 32. */
static int q3_k_scale(const uint8_t sc[12], int s) {
    const int lo = s < 8 ? sc[s] & 0xF : sc[s - 8] >> 4;
    const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    return (lo | hi << 4) - 32;
}

static void dequant_q3_k(const void *src, float *dst, int64_t n) {
    const block_q3_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = load_f16(b->d);
        int s = 0;
        for (int half = 0; half < 2; half++) {
            const uint8_t *q = b->qs + 32 * half;
            for (int g = 0; g < 4; g++) {
                /* The third bit of element l of this group is bit 4*half + g of
                 * hmask[l]. It is stored inverted: a clear bit subtracts 4, so the
                 * 3-bit quant covers -4..3. */
                const uint8_t m = (uint8_t)(1u << (4 * half + g));
                for (int k = 0; k < 2; k++, s++) {
                    const float dl = d * q3_k_scale(b->scales, s);
                    for (int l = 16 * k; l < 16 * k + 16; l++) {
                        const int lo = (q[l] >> (2 * g)) & 3;
                        *dst++ = dl * (lo - ((b->hmask[l] & m) ? 0 : 4));
                    }
                }
            }
        }
    }
}

/* The 8 6-bit scales and mins of Q4_K and Q5_K in 12 bytes. Sub-blocks 0..3 take the
 * low 6 bits of bytes 0..3 (scale) and 4..7 (min). Sub-blocks 4..7 take a nibble each
 * from bytes 8..11 (scale low, min high) and their top 2 bits from the spare top bits
 * of bytes 0..3 (scale) and 4..7 (min). */
static void k4_scale_min(const uint8_t sc[12], int j, int *scale, int *min) {
    if (j < 4) {
        *scale = sc[j] & 63;
        *min = sc[j + 4] & 63;
    } else {
        *scale = (sc[j + 4] & 0xF) | (sc[j - 4] >> 6) << 4;
        *min = (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
    }
}

static void dequant_q4_k(const void *src, float *dst, int64_t n) {
    const block_q4_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = load_f16(b->d), dmin = load_f16(b->dmin);
        /* 64 elements per 32 bytes of qs: the low nibbles are sub-block 2c, the
         * high nibbles sub-block 2c + 1 */
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = b->qs + 32 * c;
            int sc, mn;
            k4_scale_min(b->scales, 2 * c, &sc, &mn);
            const float d1 = d * sc, m1 = dmin * mn;
            k4_scale_min(b->scales, 2 * c + 1, &sc, &mn);
            const float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

static void dequant_q5_k(const void *src, float *dst, int64_t n) {
    const block_q5_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = load_f16(b->d), dmin = load_f16(b->dmin);
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = b->qs + 32 * c;
            const uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
            int sc, mn;
            k4_scale_min(b->scales, 2 * c, &sc, &mn);
            const float d1 = d * sc, m1 = dmin * mn;
            k4_scale_min(b->scales, 2 * c + 1, &sc, &mn);
            const float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * ((q[l] & 0xF) + ((b->qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d2 * ((q[l] >> 4) + ((b->qh[l] & u2) ? 16 : 0)) - m2;
        }
    }
}

static void dequant_q6_k(const void *src, float *dst, int64_t n) {
    const block_q6_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = load_f16(b->d);
        /* Each 128-element half uses 64 bytes of ql and 32 of qh. Element 32*g + l
         * (g = 0..3) takes its low nibble from ql[l + 32*(g & 1)] (low nibble for
         * g < 2, high for g >= 2) and its top 2 bits from bits 2g..2g+1 of qh[l]. */
        for (int half = 0; half < 2; half++, dst += 128) {
            const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
            const int8_t *sc = b->scales + 8 * half;
            for (int l = 0; l < 32; l++) {
                const int s = l / 16; /* sub-blocks of 16: s, s+2, s+4, s+6 per group */
                const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                dst[l + 0] = d * sc[s + 0] * q1;
                dst[l + 32] = d * sc[s + 2] * q2;
                dst[l + 64] = d * sc[s + 4] * q3;
                dst[l + 96] = d * sc[s + 6] * q4;
            }
        }
    }
}

static void dequant_q8_k(const void *src, float *dst, int64_t n) {
    const block_q8_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++, dst += QK_K) {
        const uint32_t bits = load_u32(b->d);
        float d;
        memcpy(&d, &bits, sizeof d);
        for (int j = 0; j < QK_K; j++) dst[j] = b->qs[j] * d;
    }
}

/* ---- MXFP4: blocks of 32 4-bit floats ------------------------------------------------ */

typedef struct {
    uint8_t e;       /* E8M0 scale: 2^(e-127) */
    uint8_t qs[16];  /* 32 E2M1 codes, laid out as Q4_0's nibbles */
} block_mxfp4;
_Static_assert(sizeof(block_mxfp4) == 17, "ggml's block_mxfp4 is 17 bytes");

const int8_t quant_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static void dequant_mxfp4(const void *src, float *dst, int64_t n) {
    const block_mxfp4 *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, dst += QK) {
        const float d = quant_e8m0_half(b->e);
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = quant_mxfp4_values[b->qs[j] & 0xF] * d;
            dst[j + QK / 2] = quant_mxfp4_values[b->qs[j] >> 4] * d;
        }
    }
}

/* ---- the table ---------------------------------------------------------------------- */

static const quant_traits g_traits[AL_TYPE_COUNT] = {
    [AL_TYPE_F32] = {"F32", 1, 4, dequant_f32},
    [AL_TYPE_F16] = {"F16", 1, 2, dequant_f16},
    [AL_TYPE_BF16] = {"BF16", 1, 2, dequant_bf16},
    [AL_TYPE_Q4_0] = {"Q4_0", QK, sizeof(block_q4_0), dequant_q4_0},
    [AL_TYPE_Q4_1] = {"Q4_1", QK, sizeof(block_q4_1), dequant_q4_1},
    [AL_TYPE_Q5_0] = {"Q5_0", QK, sizeof(block_q5_0), dequant_q5_0},
    [AL_TYPE_Q5_1] = {"Q5_1", QK, sizeof(block_q5_1), dequant_q5_1},
    [AL_TYPE_Q8_0] = {"Q8_0", QK, sizeof(block_q8_0), dequant_q8_0},
    [AL_TYPE_Q8_1] = {"Q8_1", QK, sizeof(block_q8_1), dequant_q8_1},
    [AL_TYPE_Q2_K] = {"Q2_K", QK_K, sizeof(block_q2_k), dequant_q2_k},
    [AL_TYPE_Q3_K] = {"Q3_K", QK_K, sizeof(block_q3_k), dequant_q3_k},
    [AL_TYPE_Q4_K] = {"Q4_K", QK_K, sizeof(block_q4_k), dequant_q4_k},
    [AL_TYPE_Q5_K] = {"Q5_K", QK_K, sizeof(block_q5_k), dequant_q5_k},
    [AL_TYPE_Q6_K] = {"Q6_K", QK_K, sizeof(block_q6_k), dequant_q6_k},
    [AL_TYPE_Q8_K] = {"Q8_K", QK_K, sizeof(block_q8_k), dequant_q8_k},
    [AL_TYPE_MXFP4] = {"MXFP4", QK, sizeof(block_mxfp4), dequant_mxfp4},
};

const quant_traits *quant_get_traits(uint32_t type) {
    /* ids without an entry (ggml's removed Q4_2, the IQ types, ...) have no name */
    if (type >= AL_TYPE_COUNT || g_traits[type].name == NULL) return NULL;
    return &g_traits[type];
}

const char *quant_type_name(uint32_t type) {
    const quant_traits *t = quant_get_traits(type);
    return t ? t->name : "unknown";
}

uint64_t quant_row_bytes(uint32_t type, int64_t n) {
    const quant_traits *t = quant_get_traits(type);
    if (t == NULL || n < 0 || n % t->block_size != 0) return 0;
    uint64_t n_bytes;
    if (!al_mul_u64((uint64_t)n / t->block_size, t->type_size, &n_bytes)) return 0;
    return n_bytes;
}

void quant_dequantize(uint32_t type, const void *src, float *dst, int64_t n) {
    const quant_traits *t = quant_get_traits(type);
    AL_ASSERT(t != NULL && t->dequantize != NULL);
    AL_ASSERT(n >= 0 && n % t->block_size == 0);
    t->dequantize(src, dst, n);
}
