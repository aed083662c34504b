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
    AL_TYPE_COUNT = 40 /* ids are below this */
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

#endif /* AL_QUANT_H */
