#version 450
// matmul.comp: out[t][row0 + o] (+)= x[t] . w[o] (+ bias) for a batch of tokens (prompt
// processing); accumulate adds the product to out (matmul_add, backend.h). Each workgroup computes a tile of BM weight rows x BN tokens: per step
// of BK inputs it dequantizes the weight tile and loads the token tile into shared
// memory once, then every invocation accumulates a TM x TN block of the tile from
// there, so each weight element is dequantized once per BN tokens instead of once
// per token. Built per weight type.
//
// Workgroups: (n_out / BM, n_tok / BN). Invocation (tm, tn) owns rows tm + i * BM/TM
// and tokens tn + j * BN/TN (strided, so neighbours read neighbouring shared words).

#extension GL_EXT_control_flow_attributes : require
#define W_BINDING 1
#include "dequant.glsl"

layout(constant_id = 0) const uint WG = 256; // must equal (BM / TM) * (BN / TN)
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint TM = 4;
layout(constant_id = 4) const uint TN = 4;
layout(local_size_x_id = 0) in;
#define BK 32

layout(push_constant) uniform Push { // vk_pc_matmul in push.h
    uint n_in, n_out, n_tok;
    uint x_off, x_stride;
    uint w_off, w_row_bytes;
    uint b_off, has_bias;
    uint o_off, o_stride;
    uint row0;
    uint accumulate, u_off, act; // matvec.comp's GLU build only reads u_off and act
    uint nw_off, has_norm; float eps; // and these (its input norm)
} p;

layout(binding = 0, std430) readonly buffer X { float x[]; };
layout(binding = 2, std430) readonly buffer B { float bias[]; };
layout(binding = 3, std430) buffer O { float o[]; };

shared float As[BK * BM]; // [k][row]
shared float Bs[BK * BN]; // [k][token]

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint m0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    uint tm = tid % (BM / TM), tn = tid / (BM / TM);
    uint n4 = (p.n_in + 3) / 4;

    float acc[TM][TN];
    [[unroll]] for (uint i = 0; i < TM; i++)
        [[unroll]] for (uint j = 0; j < TN; j++) acc[i][j] = 0.0;

    for (uint k0 = 0; k0 < p.n_in; k0 += BK) {
        // the weight tile, four inputs of one row per step; zeros past the edges
        for (uint g = tid; g < BM * BK / 4; g += WG) {
            uint m = g / (BK / 4), i4 = k0 / 4 + g % (BK / 4), row = m0 + m;
            vec4 v = vec4(0.0);
            if (row < p.n_out && i4 < n4) v = dq4_tail(p.w_off + row * p.w_row_bytes, i4, p.n_in);
            uint k = (g % (BK / 4)) * 4;
            [[unroll]] for (uint c = 0; c < 4; c++) As[(k + c) * BM + m] = v[c];
        }
        // the token tile
        for (uint g = tid; g < BN * BK / 4; g += WG) {
            uint n = g / (BK / 4), k = (g % (BK / 4)) * 4, tok = n0 + n;
            uint xb = p.x_off + tok * p.x_stride + k0 + k;
            [[unroll]] for (uint c = 0; c < 4; c++)
                Bs[(k + c) * BN + n] = tok < p.n_tok && k0 + k + c < p.n_in ? x[xb + c] : 0.0;
        }
        barrier();
        [[unroll]] for (uint k = 0; k < BK; k++) {
            float a[TM], b[TN];
            [[unroll]] for (uint i = 0; i < TM; i++) a[i] = As[k * BM + tm + i * (BM / TM)];
            [[unroll]] for (uint j = 0; j < TN; j++) b[j] = Bs[k * BN + tn + j * (BN / TN)];
            [[unroll]] for (uint i = 0; i < TM; i++)
                [[unroll]] for (uint j = 0; j < TN; j++) acc[i][j] += a[i] * b[j];
        }
        barrier();
    }

    [[unroll]] for (uint i = 0; i < TM; i++) {
        uint row = m0 + tm + i * (BM / TM);
        if (row >= p.n_out) continue;
        uint col = p.row0 + row;
        float bv = p.has_bias != 0 ? bias[p.b_off + col] : 0.0;
        [[unroll]] for (uint j = 0; j < TN; j++) {
            uint tok = n0 + tn + j * (BN / TN);
            if (tok >= p.n_tok) continue;
            uint oi = p.o_off + tok * p.o_stride + col;
            o[oi] = p.accumulate != 0 ? o[oi] + (acc[i][j] + bv) : acc[i][j] + bv;
        }
    }
}
