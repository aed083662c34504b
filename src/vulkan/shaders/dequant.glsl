// dequant.glsl: reads weight rows of every type of quant.h, byte for byte the block
// layouts of src/quant.c (ggml's). Included by the shaders that read weights, with
// W_BINDING defined and exactly one TYPE_* macro set on the glslc command line.
//
// The weight binding is read as 16-bit words: every block size is even and every
// row starts at an even byte, so fp16 scales and pairs of quant bytes are single
// aligned loads, and nothing needs 8-bit storage. F32 weights are also read as
// 32-bit words through a second view of the same binding. MXFP4 is the exception:
// its blocks are 17 bytes, so blocks and rows may start at odd bytes; it reads its
// quants through bytes4_any, and memory.c pads weight copies to whole 32-bit words
// for the one byte past a tensor of odd size that this may touch.
//
// The one entry point, dq4(row, i), returns elements 4i .. 4i+3 of the row whose
// first byte is `row`. Four consecutive elements always share one block and one
// sub-block, so each call reads one scale. QK is the block size: rows of quantized
// types are whole blocks, so only the float types see a partial last group (dq4_tail
// zero-fills past n).

#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require

#ifdef W_ARRAY
// W_ARRAY weights at one binding (the MULTI builds): w_sel, which the shader sets
// before reading, picks one; it must be dynamically uniform (one per workgroup).
layout(binding = W_BINDING, std430) readonly buffer W16 { uint16_t v[]; } w16_[W_ARRAY];
layout(binding = W_BINDING, std430) readonly buffer W32 { uint v[]; } w32_[W_ARRAY];
uint w_sel = 0;
#define w16 w16_[w_sel].v
#define w32 w32_[w_sel].v
#else
layout(binding = W_BINDING, std430) readonly buffer W16 { uint16_t w16[]; };
layout(binding = W_BINDING, std430) readonly buffer W32 { uint w32[]; };
#endif

// the 16-bit word at even byte offset b, and the two bytes it holds
uint wd(uint b) { return uint(w16[b >> 1]); }
float f16_at(uint b) { return unpackHalf2x16(wd(b)).x; }
uint u32_at(uint b) { return wd(b) | (wd(b + 2) << 16); }
uint u8_at(uint b) { return (wd(b & ~1u) >> ((b & 1u) * 8u)) & 0xFFu; }
// four consecutive bytes starting at even byte b, one per lane
uvec4 bytes4(uint b) {
    uint lo = wd(b), hi = wd(b + 2);
    return uvec4(lo & 0xFFu, lo >> 8, hi & 0xFFu, hi >> 8);
}
vec4 nib4(uvec4 q, uint shift) { return vec4((q >> shift) & 15u); }
// sign extension of bytes to int
vec4 s8x4(uvec4 q) { return vec4((ivec4(q << 24)) >> 24); }

#if defined(TYPE_F32)
#define QK 1
#define TYPE_BYTES 4
vec4 dq4(uint row, uint i) {
    uint w = (row >> 2) + 4 * i;
    return uintBitsToFloat(uvec4(w32[w], w32[w + 1], w32[w + 2], w32[w + 3]));
}
float dq1(uint row, uint e) { return uintBitsToFloat(w32[(row >> 2) + e]); }

#elif defined(TYPE_F16)
#define QK 1
#define TYPE_BYTES 2
float dq1(uint row, uint e) { return f16_at(row + 2 * e); }
vec4 dq4(uint row, uint i) {
    uint b = row + 8 * i;
    return vec4(f16_at(b), f16_at(b + 2), f16_at(b + 4), f16_at(b + 6));
}

#elif defined(TYPE_BF16)
#define QK 1
#define TYPE_BYTES 2
float dq1(uint row, uint e) { return uintBitsToFloat(wd(row + 2 * e) << 16); }
vec4 dq4(uint row, uint i) {
    uint b = row + 8 * i;
    return uintBitsToFloat(uvec4(wd(b), wd(b + 2), wd(b + 4), wd(b + 6)) << 16);
}

#elif defined(TYPE_Q4_0) || defined(TYPE_Q4_1)
// Q4_0 {d, qs[16]}: d * (q - 8); Q4_1 {d, m, qs[16]}: d * q + m. Element j < 16 is the
// low nibble of qs[j], element j + 16 the high nibble.
#define QK 32
#ifdef TYPE_Q4_0
#define BLOCK 18
#define QS 2
#else
#define BLOCK 20
#define QS 4
#endif
vec4 dq4(uint row, uint i) {
    uint e = 4 * i, blk = row + (e / 32) * BLOCK, j = e % 32;
    vec4 q = nib4(bytes4(blk + QS + (j & 15)), (j >> 4) * 4);
#ifdef TYPE_Q4_0
    return f16_at(blk) * (q - 8.0);
#else
    return f16_at(blk) * q + f16_at(blk + 2);
#endif
}

#elif defined(TYPE_Q5_0) || defined(TYPE_Q5_1)
// Q5_0 {d, qh, qs[16]}: d * (q - 16); Q5_1 {d, m, qh, qs[16]}: d * q + m. The fifth
// bit of element j is bit j of the little-endian uint32 qh.
#define QK 32
#ifdef TYPE_Q5_0
#define BLOCK 22
#define QH 2
#else
#define BLOCK 24
#define QH 4
#endif
vec4 dq4(uint row, uint i) {
    uint e = 4 * i, blk = row + (e / 32) * BLOCK, j = e % 32;
    uint qh = u32_at(blk + QH) >> j;
    uvec4 hi = uvec4(qh, qh >> 1, qh >> 2, qh >> 3) & 1u;
    vec4 q = nib4(bytes4(blk + QH + 4 + (j & 15)), (j >> 4) * 4) + vec4(hi * 16u);
#ifdef TYPE_Q5_0
    return f16_at(blk) * (q - 16.0);
#else
    return f16_at(blk) * q + f16_at(blk + 2);
#endif
}

#elif defined(TYPE_Q8_0) || defined(TYPE_Q8_1)
// Q8_0 {d, qs[32]}, Q8_1 {d, s, qs[32]}: d * q
#define QK 32
#ifdef TYPE_Q8_0
#define BLOCK 34
#define QS 2
#else
#define BLOCK 36
#define QS 4
#endif
vec4 dq4(uint row, uint i) {
    uint e = 4 * i, blk = row + (e / 32) * BLOCK;
    return f16_at(blk) * s8x4(bytes4(blk + QS + e % 32));
}

#elif defined(TYPE_Q8_K)
// {float d, qs[256], bsums[16]}: d * q
#define QK 256
vec4 dq4(uint row, uint i) {
    uint e = 4 * i, blk = row + (e / 256) * 292;
    return uintBitsToFloat(u32_at(blk)) * s8x4(bytes4(blk + 4 + e % 256));
}

#elif defined(TYPE_Q2_K) || defined(TYPE_Q3_K)
// Both cut the super-block into halves of 128; element 32g + l of a half (g = 0..3)
// sits in bits 2g..2g+1 of qs[32 * half + l]; sub-block s = 8 half + 2g + l / 16.
#define QK 256
#ifdef TYPE_Q2_K
// {scales[16] (scale low nibble, min high), qs[64], d, dmin}: d sc q - dmin mn
#define BLOCK 84
#define QS 16
#else
// {hmask[32], qs[64], scales[12], d}: d * sc * (q - (hmask bit clear ? 4 : 0))
#define BLOCK 110
#define QS 32
// 16 6-bit scales stored + 32; see q3_k_scale in quant.c
int q3_scale(uint blk, uint s) {
    uint lo = s < 8 ? u8_at(blk + 96 + s) & 15u : u8_at(blk + 96 + s - 8) >> 4;
    uint hi = (u8_at(blk + 104 + s % 4) >> (2 * (s / 4))) & 3u;
    return int(lo | (hi << 4)) - 32;
}
#endif
vec4 dq4(uint row, uint i) {
    uint e = 4 * i, blk = row + (e / 256) * BLOCK, r = e % 256;
    uint half_ = r / 128, g = (r % 128) / 32, l = r % 32;
    uint s = 8 * half_ + 2 * g + l / 16;
    vec4 q = vec4((bytes4(blk + QS + 32 * half_ + l) >> (2 * g)) & 3u);
#ifdef TYPE_Q2_K
    uint sc = u8_at(blk + s);
    return f16_at(blk + 80) * float(sc & 15u) * q - f16_at(blk + 82) * float(sc >> 4);
#else
    uvec4 hm = (bytes4(blk + l) >> (4 * half_ + g)) & 1u;
    return f16_at(blk + 108) * float(q3_scale(blk, s)) * (q - 4.0 * vec4(1u - hm));
#endif
}

#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
// {d, dmin, scales[12], (Q5_K: qh[32],) qs[128]}: element 64c + 32h + l is nibble h
// of qs[32c + l] (plus 16 if bit 2c + h of qh[l] is set, Q5_K), in sub-block 2c + h.
#define QK 256
#ifdef TYPE_Q4_K
#define BLOCK 144
#define QS 16
#else
#define BLOCK 176
#define QS 48
#endif
// the 6-bit scale and min of sub-block j; see k4_scale_min in quant.c
vec2 k4_scale_min(uint blk, uint j) {
    uint sc = blk + 4;
    if (j < 4) return vec2(u8_at(sc + j) & 63u, u8_at(sc + j + 4) & 63u);
    uint b = u8_at(sc + j + 4);
    return vec2((b & 15u) | ((u8_at(sc + j - 4) >> 6) << 4), (b >> 4) | ((u8_at(sc + j) >> 6) << 4));
}
vec4 dq4(uint row, uint i) {
    uint e = 4 * i, blk = row + (e / 256) * BLOCK, r = e % 256;
    uint c = r / 64, h = (r % 64) / 32, l = r % 32;
    vec2 sm = k4_scale_min(blk, 2 * c + h);
    vec4 q = nib4(bytes4(blk + QS + 32 * c + l), 4 * h);
#ifdef TYPE_Q5_K
    q += vec4(((bytes4(blk + 16 + l) >> (2 * c + h)) & 1u) * 16u);
#endif
    return f16_at(blk) * sm.x * q - f16_at(blk + 2) * sm.y;
}

#elif defined(TYPE_Q6_K)
// {ql[128], qh[64], int8 scales[16], d}: element 32g + l of half h takes its low
// nibble from ql[64h + l + 32 (g & 1)] (high nibble when g >= 2), its top two bits
// from bits 2g of qh[32h + l], and the scale of sub-block 8h + 2g + l / 16.
#define QK 256
vec4 dq4(uint row, uint i) {
    uint e = 4 * i, blk = row + (e / 256) * 210, r = e % 256;
    uint h = r / 128, g = (r % 128) / 32, l = r % 32;
    uvec4 lo = (bytes4(blk + 64 * h + l + 32 * (g & 1u)) >> (4 * (g >> 1))) & 15u;
    uvec4 hi = (bytes4(blk + 128 + 32 * h + l) >> (2 * g)) & 3u;
    float sc = float(int(u8_at(blk + 192 + 8 * h + 2 * g + l / 16) << 24) >> 24);
    return f16_at(blk + 208) * sc * (vec4(lo | (hi << 4)) - 32.0);
}

#elif defined(TYPE_MXFP4)
// {e, qs[16]}: the code c of element j (low nibble of qs[j], high nibble of qs[j - 16])
// is an E2M1 number; quant.h's doubled table MXFP4_VALUES times half the E8M0 scale,
// 2^(e-128), is ggml's value to the bit (a subnormal half scale for e < 2).
#define QK 32
#define BLOCK 17
const float MXFP4_VALUES[16] = float[16](0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0,
                                         0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);
float e8m0_half(uint e) { return uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23); }
vec4 mxfp4_values(uvec4 c) {
    return vec4(MXFP4_VALUES[c.x], MXFP4_VALUES[c.y], MXFP4_VALUES[c.z], MXFP4_VALUES[c.w]);
}
// bytes4 at any byte b: an odd b takes the high byte of one word, a whole word and the
// low byte of a third
uvec4 bytes4_any(uint b) {
    if ((b & 1u) == 0u) return bytes4(b);
    uint lo = wd(b - 1), mid = wd(b + 1), hi = wd(b + 3);
    return uvec4(lo >> 8, mid & 0xFFu, mid >> 8, hi & 0xFFu);
}
vec4 dq4(uint row, uint i) {
    uint e = 4 * i, blk = row + (e / 32) * BLOCK, j = e % 32;
    uvec4 c = (bytes4_any(blk + 1 + (j & 15)) >> ((j >> 4) * 4)) & 15u;
    return e8m0_half(u8_at(blk)) * mxfp4_values(c);
}

#else
#error "define one TYPE_* for the weight type"
#endif

// dq32(row, u, v): elements 32u .. 32u+31 of a row into v[0..7], one scale load per
// call for the legacy types (a block); K-quant slices of 32 never straddle a
// sub-block; float rows must have the 32 elements.
#if defined(TYPE_Q4_0) || defined(TYPE_Q4_1)
void dq32(uint row, uint u, out vec4 v[8]) {
    uint blk = row + u * BLOCK;
    float d = f16_at(blk);
#ifdef TYPE_Q4_0
    float m = -8.0 * d;
#else
    float m = f16_at(blk + 2);
#endif
    [[unroll]] for (uint j = 0; j < 4; j++) {
        uvec4 q = bytes4(blk + QS + 4 * j);
        v[j] = d * vec4(q & 15u) + m;
        v[j + 4] = d * vec4(q >> 4) + m;
    }
}
#elif defined(TYPE_Q5_0) || defined(TYPE_Q5_1)
void dq32(uint row, uint u, out vec4 v[8]) {
    uint blk = row + u * BLOCK;
    float d = f16_at(blk);
#ifdef TYPE_Q5_0
    float m = -16.0 * d;
#else
    float m = f16_at(blk + 2);
#endif
    uint qh = u32_at(blk + QH);
    [[unroll]] for (uint j = 0; j < 4; j++) {
        uvec4 q = bytes4(blk + QH + 4 + 4 * j);
        uvec4 sh = uvec4(4 * j) + uvec4(0, 1, 2, 3);
        uvec4 h0 = (uvec4(qh) >> sh) & 1u, h1 = (uvec4(qh) >> (sh + 16u)) & 1u;
        v[j] = d * vec4((q & 15u) | (h0 << 4)) + m;
        v[j + 4] = d * vec4((q >> 4) | (h1 << 4)) + m;
    }
}
#elif defined(TYPE_MXFP4)
void dq32(uint row, uint u, out vec4 v[8]) {
    uint blk = row + u * BLOCK;
    float d = e8m0_half(u8_at(blk));
    [[unroll]] for (uint j = 0; j < 4; j++) {
        uvec4 q = bytes4_any(blk + 1 + 4 * j);
        v[j] = d * mxfp4_values(q & 15u);
        v[j + 4] = d * mxfp4_values(q >> 4);
    }
}
#elif defined(TYPE_Q8_0) || defined(TYPE_Q8_1)
void dq32(uint row, uint u, out vec4 v[8]) {
    uint blk = row + u * BLOCK;
    float d = f16_at(blk);
    [[unroll]] for (uint j = 0; j < 8; j++) v[j] = d * s8x4(bytes4(blk + QS + 4 * j));
}
#else
void dq32(uint row, uint u, out vec4 v[8]) {
    [[unroll]] for (uint j = 0; j < 8; j++) v[j] = dq4(row, 8 * u + j);
}
#endif

// dq4 for a group that may run past the n elements of a float row: zeros there.
vec4 dq4_tail(uint row, uint i, uint n) {
#if QK == 1
    if (4 * i + 4 > n) {
        vec4 v = vec4(0.0);
        for (uint k = 0; k < 4; k++)
            if (4 * i + k < n) v[k] = dq1(row, 4 * i + k);
        return v;
    }
#endif
    return dq4(row, i);
}
