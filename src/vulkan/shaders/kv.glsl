// kv.glsl: the typed KV caches (backend.h: al_backend_ops.kv_types), bit for bit as
// src/format/quantize.c writes them and quant_dequantize reads them: f16, q8_0
// {d, qs[32]}, q4_0 {d, qs[16]}, each kv head of a row quantized on its own. Included
// by attention.comp's KV builds (reading) and kv_write.comp (writing), which view the
// caches as 16-bit words: every block and every head starts at an even byte.
//
// The types are those of quant.h, given at run time (push constants): one build reads
// every pair of key and value types, and a uniform branch costs little next to the
// loads. Also the Hadamard rotation of a head held in shared memory (al_hadamard).

const uint KV_F32 = 0u, KV_F16 = 1u, KV_Q4_0 = 2u, KV_Q8_0 = 8u; // al_type

// fp16 bits to f32, exact for every value (subnormals too, which unpackHalf2x16 may
// flush)
float kv_f16(uint h) {
    uint e = (h >> 10) & 31u, m = h & 1023u;
    float s = (h & 0x8000u) != 0u ? -1.0 : 1.0;
    if (e == 0u) return s * float(m) * (1.0 / 16777216.0);
    if (e == 31u) return uintBitsToFloat((h & 0x8000u) << 16 | 0x7F800000u | m << 13);
    return uintBitsToFloat((h & 0x8000u) << 16 | (e + 112u) << 23 | m << 13);
}

// Bytes of one head of head_dim elements of type.
uint kv_head_bytes(uint type, uint hd) {
    return type == KV_F32 ? 4u * hd : type == KV_F16 ? 2u * hd
         : type == KV_Q8_0 ? 34u * (hd / 32u) : 18u * (hd / 32u);
}

// float NAME(type, b, e): element e of the head whose first byte is b, W(i) the cache's
// 16-bit word i: the value quant_dequantize gives (int times the f16 scale: one
// product, correctly rounded)
#define KV_DECODE(NAME, W)                                                              \
    float NAME(uint type, uint b, uint e) {                                             \
        if (type == KV_F32) {                                                           \
            uint w = (b >> 1) + 2u * e;                                                 \
            return uintBitsToFloat(uint(W(w)) | uint(W(w + 1u)) << 16);                 \
        }                                                                               \
        if (type == KV_F16) return kv_f16(uint(W((b >> 1) + e)));                       \
        uint blk = e >> 5, j = e & 31u;                                                 \
        if (type == KV_Q8_0) {                                                          \
            uint bb = b + 34u * blk, qb = bb + 2u + j;                                  \
            int q = int((uint(W(qb >> 1)) >> ((qb & 1u) * 8u)) & 0xFFu);                \
            return float((q ^ 0x80) - 0x80) * kv_f16(uint(W(bb >> 1)));                 \
        }                                                                               \
        uint bb = b + 18u * blk, qb = bb + 2u + (j & 15u);                              \
        uint byte = (uint(W(qb >> 1)) >> ((qb & 1u) * 8u)) & 0xFFu;                     \
        return float(int(j < 16u ? byte & 15u : byte >> 4) - 8) * kv_f16(uint(W(bb >> 1))); \
    }

// X (a shared array of at least hd floats) = each block of n of it times the
// normalized Walsh-Hadamard matrix, as al_hadamard computes it: the butterflies of
// stride 1 first (each pair's sum and difference are exact roundings, whatever
// invocation takes it), then the scale s = 1 / sqrtf(n), computed by the host. A pair
// (j, j + len) never crosses a block: blocks start at multiples of n > len. Every
// invocation of the workgroup runs it (barriers); tid, WG as the shaders name them.
#define KV_HADAMARD(X, hd, n, s)                                                        \
    {                                                                                   \
        for (uint len_ = 1u; len_ < (n); len_ *= 2u) {                                  \
            for (uint i_ = tid; i_ < (hd) / 2u; i_ += WG) {                             \
                uint j_ = (i_ / len_) * 2u * len_ + i_ % len_;                          \
                float a_ = X[j_], b_ = X[j_ + len_];                                    \
                X[j_] = a_ + b_;                                                        \
                X[j_ + len_] = a_ - b_;                                                 \
            }                                                                           \
            barrier();                                                                  \
        }                                                                               \
        for (uint d_ = tid; d_ < (hd); d_ += WG) X[d_] *= (s);                          \
        barrier();                                                                      \
    }
