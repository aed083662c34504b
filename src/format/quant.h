/* quant.h: the tensor types of GGUF (ggml's type ids) and their reference dequantizers.
 *
 * A quantized row of n elements is n / block_size blocks of type_size bytes each. The
 * dequantizers here are plain C, written for clarity: they are the oracle that every
 * SIMD kernel and GPU shader is tested against.
 */
#ifndef AL_QUANT_H
#define AL_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ggml type ids as stored in GGUF files. */
typedef enum al_type {
    AL_TYPE_F32 = 0,
    AL_TYPE_F16 = 1,
    AL_TYPE_Q4_0 = 2,
    AL_TYPE_Q4_1 = 3,
    AL_TYPE_Q5_0 = 6,
    AL_TYPE_Q5_1 = 7,
    AL_TYPE_Q8_0 = 8,
    AL_TYPE_Q8_1 = 9,
    AL_TYPE_Q2_K = 10,
    AL_TYPE_Q3_K = 11,
    AL_TYPE_Q4_K = 12,
    AL_TYPE_Q5_K = 13,
    AL_TYPE_Q6_K = 14,
    AL_TYPE_Q8_K = 15,
    AL_TYPE_BF16 = 30,
    AL_TYPE_MXFP4 = 39, /* OCP microscaling FP4: blocks of 32 E2M1 values, E8M0 scale */
    AL_TYPE_COUNT = 40  /* ids are below this */
} al_type;

typedef struct quant_traits {
    const char *name;      /* "Q4_0", ... */
    uint32_t block_size;   /* elements per block */
    uint32_t type_size;    /* bytes per block */
    /* Reference dequantizer: n elements (a multiple of block_size) from src into dst.
     * NULL for types that are known by name but not supported for weights. */
    void (*dequantize)(const void *src, float *dst, int64_t n);
} quant_traits;

/* Traits of a type id, or NULL if the id is unknown. */
const quant_traits *quant_get_traits(uint32_t type);

/* Name of a type id for messages: "Q4_0", or "unknown". */
const char *quant_type_name(uint32_t type);

/* Bytes for a row of n elements; 0 if n is not a multiple of the block size or the
 * type is unknown. */
uint64_t quant_row_bytes(uint32_t type, int64_t n);

/* Dequantizes n elements (a multiple of the block size) of the given type. */
void quant_dequantize(uint32_t type, const void *src, float *dst, int64_t n);

/* ---- MXFP4 ---------------------------------------------------------------------------
 * A block is 17 bytes: the scale byte e, then 16 bytes of 4-bit codes (element j < 16 in
 * the low nibble of byte 1 + j, element j + 16 in the high nibble). Code c is an E2M1
 * number: bit 3 the sign, bits 0-2 index the magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
 * ggml keeps the magnitudes doubled, as the integers of quant_mxfp4_values, and halves
 * the scale instead: element = quant_mxfp4_values[c] * quant_e8m0_half(e), which is
 * 2^(e-127) times the E2M1 value. */

/* The E2M1 codes doubled: {0, 1, 2, 3, 4, 6, 8, 12} and their negatives (code 8 is -0). */
extern const int8_t quant_mxfp4_values[16];

/* Half the E8M0 scale, 2^(e-128), exactly as ggml builds it: e >= 2 sets the float's
 * exponent field to e - 1; e = 1 and e = 0 are the subnormals 2^-127 and 2^-128. No
 * value is special: e = 255 gives 2^127 (the OCP format's NaN is not honoured). */
static inline float quant_e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    union { uint32_t u; float f; } v = {.u = bits};
    return v.f;
}

#endif /* AL_QUANT_H */
