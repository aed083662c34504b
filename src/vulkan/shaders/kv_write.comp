#version 450
// kv_write.comp: rows of k or v (f32, n_head_kv heads of head_dim) into a typed KV
// cache (kv.glsl), token t at ring row (pos0 + t) % cap: each head rotated first where
// rot_n > 0 (AL_LAYOUT_HADAMARD, in blocks of rot_n), then converted as
// quant_quantize_row converts it (src/format/quantize.c), to the same bytes. One
// workgroup per (kv head, token); one invocation per 32-element block of the
// quantized types, which scans its block in order as the reference does (the first
// element of largest magnitude wins a tie in q4_0).
//
// Division is not correctly rounded on every device (Vulkan allows 2.5 ulp), so the
// scales' quotients are corrected to the nearest float (div_rn); products and sums
// are `precise`, so that no fused multiply-add rounds differently from the C code.

#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint MAX_HD = 256; // head_dim at most; ops.c checks

layout(push_constant) uniform Push { // vk_pc_kv_write in push.h
    uint n_head_kv, head_dim, type;
    uint src_off, src_stride;  // floats
    uint dst_off, row_bytes;   // bytes
    uint cap, pos0;
    uint rot_n;                // Hadamard block, 0: not rotated
    float rot_scale;           // 1 / sqrtf(rot_n)
} p;

layout(binding = 0, std430) readonly buffer S { float src[]; };
layout(binding = 1, std430) writeonly buffer D { uint16_t dst[]; };

#include "kv.glsl"

shared float x[MAX_HD];

// x * y exactly as hi + lo (Dekker: Veltkamp's split, no fused operation)
void two_prod(float a, float b, out float hi, out float lo) {
    precise float pa = 4097.0 * a, pb = 4097.0 * b;
    precise float ah = pa - (pa - a), bh = pb - (pb - b);
    precise float al = a - ah, bl = b - bh;
    precise float pr = a * b;
    precise float err = ((ah * bh - pr) + ah * bl + al * bh) + al * bl;
    hi = pr;
    lo = err;
}

// |a - c b| (c close to a / b), compared between candidates only: a - hi is exact
float residual(float a, float b, float c) {
    float hi, lo;
    two_prod(c, b, hi, lo);
    precise float r = (a - hi) - lo;
    return abs(r);
}

// a / b rounded to nearest, for a, b > 0 finite: the device's quotient or a
// neighbour, whichever is nearest (a quotient by these divisors never falls on a tie)
float div_rn(float a, float b) {
    precise float y = a / b;
    if (y == 0.0 || isinf(y)) return y;
    uint u = floatBitsToUint(y);
    float best = y, rb = residual(a, b, y);
    [[unroll]] for (int k = -1; k <= 1; k += 2) {
        float c = uintBitsToFloat(uint(int(u) + k));
        float rc = residual(a, b, c);
        if (rc < rb) best = c, rb = rc;
    }
    return best;
}

// fp16 bits of f, rounded to nearest even (al_f32_to_f16)
uint f16_bits(float f) {
    uint v = floatBitsToUint(f), sign = (v >> 16) & 0x8000u, ax = v & 0x7FFFFFFFu;
    if (ax >= 0x7F800000u) return sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u : 0u);
    if (ax >= 0x477FF000u) return sign | 0x7C00u;
    if (ax < 0x38800000u) { // a subnormal half: nearest even of ax / 2^-24
        precise float q = uintBitsToFloat(ax) * 16777216.0;
        uint m = uint(q);
        precise float rem = q - float(m);
        if (rem > 0.5 || (rem == 0.5 && (m & 1u) != 0u)) m++;
        return sign | m;
    }
    uint mant = ax & 0x7FFFFFu, h = (((ax >> 23) - 112u) << 10) | (mant >> 13);
    uint rest = mant & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0u)) h++;
    return sign | h;
}

// the reference's round_away: half away from zero
int round_away(float v) {
    int t = int(v);
    precise float frac = v - float(t);
    return t + (frac >= 0.5 ? 1 : 0) - (frac <= -0.5 ? 1 : 0);
}

void q8_0_block(uint w, uint b0) { // w: the block's first word
    float amax = 0.0;
    for (uint j = 0; j < 32u; j++) amax = max(amax, abs(x[b0 + j]));
    float d = div_rn(amax, 127.0);
    float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
    dst[w] = uint16_t(f16_bits(d));
    for (uint j = 0; j < 32u; j += 2u) {
        precise float y0 = x[b0 + j] * id, y1 = x[b0 + j + 1u] * id;
        uint q0 = uint(round_away(y0)) & 0xFFu, q1 = uint(round_away(y1)) & 0xFFu;
        dst[w + 1u + j / 2u] = uint16_t(q0 | q1 << 8);
    }
}

void q4_0_block(uint w, uint b0) {
    float amax = 0.0, mx = 0.0;
    for (uint j = 0; j < 32u; j++)
        if (amax < abs(x[b0 + j])) amax = abs(x[b0 + j]), mx = x[b0 + j];
    precise float d = mx * -0.125; // mx / -8, exact
    float id = d != 0.0 ? (d > 0.0 ? div_rn(1.0, d) : -div_rn(1.0, -d)) : 0.0;
    dst[w] = uint16_t(f16_bits(d));
    uint qs[16];
    for (uint j = 0; j < 16u; j++) {
        precise float lo = x[b0 + j] * id + 8.5, hi = x[b0 + j + 16u] * id + 8.5;
        qs[j] = uint(min(15, int(lo))) | uint(min(15, int(hi))) << 4;
    }
    for (uint j = 0; j < 16u; j += 2u) dst[w + 1u + j / 2u] = uint16_t(qs[j] | qs[j + 1u] << 8);
}

void main() {
    uint kvh = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
    uint hd = p.head_dim;
    for (uint d = tid; d < hd; d += WG) x[d] = src[p.src_off + t * p.src_stride + kvh * hd + d];
    barrier();
    if (p.rot_n > 0u) KV_HADAMARD(x, hd, p.rot_n, p.rot_scale)
    uint row = (p.pos0 + t) % p.cap;
    uint w0 = (p.dst_off + row * p.row_bytes + kvh * kv_head_bytes(p.type, hd)) >> 1;
    if (p.type == KV_F16) {
        for (uint d = tid; d < hd; d += WG) dst[w0 + d] = uint16_t(f16_bits(x[d]));
    } else if (p.type == KV_Q8_0) {
        for (uint b = tid; b < hd / 32u; b += WG) q8_0_block(w0 + 17u * b, 32u * b);
    } else if (p.type == KV_Q4_0) {
        for (uint b = tid; b < hd / 32u; b += WG) q4_0_block(w0 + 9u * b, 32u * b);
    }
}
