#version 450
// matmul.comp: out[t][row0 + o] (+)= x[t] . w[o] (+ bias) for a batch of tokens (prompt
// processing); accumulate adds the product to out (matmul_add, backend.h). Each
// workgroup computes a tile of BM weight rows x BN tokens: per step of BK inputs it
// dequantizes the weight tile and loads the token tile into shared memory once, then
// every invocation accumulates a TM x TN block of the tile from there, so each weight
// element is dequantized once per BN tokens instead of once per token. Built per
// weight type.
//
// Workgroups: (n_out / BM, n_tok / BN). Invocation (tm, tn) owns the rows of the vec4
// groups tm + r * BM/TM (r < TM/4) and the tokens of the groups tn + s * BN/TN: shared
// memory holds the tiles as vec4s of four rows (tokens), and each step of k reads TM/4 +
// TN/4 of them for TM x TN FMAs. With a float per row and token it had read TM + TN:
// 8 shared loads for 16 FMAs, which by count bound a GPU by its shared-memory bandwidth
// rather than its FMAs (an H200 ran bench-1b's prompt at ~14 TFLOP/s of its ~67; the
// vec4s are unmeasured there yet). Neighbouring invocations read neighbouring vec4s.
// Each output is the same sum in the same order as with floats. TM and TN are
// multiples of 4 (pipelines.c checks).

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
#include "matmul_tile.glsl"

const uint RM = TM / 4, RN = TN / 4; // vec4 groups per invocation
shared vec4 As[BK * BM / 4]; // [k][row / 4], row % 4 in the components
shared vec4 Bs[BK * BN / 4]; // [k][token / 4]

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint m0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    uint tm = tid % (BM / TM), tn = tid / (BM / TM);

    float acc[TM][TN];
    [[unroll]] for (uint i = 0; i < TM; i++)
        [[unroll]] for (uint j = 0; j < TN; j++) acc[i][j] = 0.0;

    for (uint k0 = 0; k0 < p.n_in; k0 += BK) {
        // the weight tile and the token tile, four inputs of a row or token at a time
        for (uint g = tid; g < BM * BK / 4; g += WG) {
            uint m = g / (BK / 4), k = (g % (BK / 4)) * 4;
            vec4 v = weight_group(m0, k0, g);
            [[unroll]] for (uint c = 0; c < 4; c++) As[(k + c) * (BM / 4) + m / 4][m % 4] = v[c];
        }
        for (uint g = tid; g < BN * BK / 4; g += WG) {
            uint n = g / (BK / 4), k = (g % (BK / 4)) * 4;
            vec4 v = token_group(n0, k0, g);
            [[unroll]] for (uint c = 0; c < 4; c++) Bs[(k + c) * (BN / 4) + n / 4][n % 4] = v[c];
        }
        barrier();
        [[unroll]] for (uint k = 0; k < BK; k++) {
            vec4 a[RM], b[RN];
            [[unroll]] for (uint r = 0; r < RM; r++) a[r] = As[k * (BM / 4) + tm + r * (BM / TM)];
            [[unroll]] for (uint s = 0; s < RN; s++) b[s] = Bs[k * (BN / 4) + tn + s * (BN / TN)];
            [[unroll]] for (uint i = 0; i < TM; i++)
                [[unroll]] for (uint j = 0; j < TN; j++)
                    acc[i][j] += a[i / 4][i % 4] * b[j / 4][j % 4];
        }
        barrier();
    }

    [[unroll]] for (uint i = 0; i < TM; i++)
        [[unroll]] for (uint j = 0; j < TN; j++)
            store_out(m0 + 4 * (tm + i / 4 * (BM / TM)) + i % 4,
                      n0 + 4 * (tn + j / 4 * (BN / TN)) + j % 4, acc[i][j]);
}
