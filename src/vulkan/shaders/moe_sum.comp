#version 450
// moe_sum.comp: the last step of moe_ffn (backend.h; moe.c): each token's row of x
// takes its experts' weighted outputs in ascending order of expert,
//   x[t][c] += w[t][j] * y[pair[t][j]][c]   for j = 0 .. n_used - 1,
// one rounding per addition as add_rows.comp makes them, expert after expert. The
// table (binding 2, uints at iw_off) holds [n_tok][n_used] pair indices (rows of y),
// then their weights as float bits. One invocation per element; workgroups
// (columns / WG, tokens).

layout(constant_id = 0) const uint WG = 256;
layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push { // vk_pc_moe_sum in push_moe.h
    uint n_cols, n_tok, n_used;
    uint x_off, x_stride;
    uint y_off, y_stride;
    uint iw_off;
} p;

layout(binding = 0, std430) buffer X { float x[]; };
layout(binding = 1, std430) readonly buffer Y { float y[]; };
layout(binding = 2, std430) readonly buffer IW { uint iw[]; };

void main() {
    uint c = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
    if (c >= p.n_cols) return;
    uint i = p.x_off + t * p.x_stride + c, tab = p.iw_off + t * p.n_used;
    float v = x[i];
    for (uint j = 0; j < p.n_used; j++) {
        uint pair = iw[tab + j];
        float w = uintBitsToFloat(iw[tab + p.n_tok * p.n_used + j]);
        v += w * y[p.y_off + pair * p.y_stride + c];
    }
    x[i] = v;
}
