#version 450
// silu_mul.comp: g[r][c] = silu(g[r][c]) * u[r][c], silu(a) = a / (1 + e^-a); one
// invocation per element, workgroups (columns / WG, rows).

#include "glu.glsl"

layout(constant_id = 0) const uint WG = 256;
layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push { // vk_pc_binary in push.h
    uint n_cols, n_rows;
    uint x_off, x_stride;
    uint y_off, y_stride;
} p;

layout(binding = 0, std430) buffer G { float g[]; };
layout(binding = 1, std430) readonly buffer U { float u[]; };

void main() {
    uint c = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
    if (c >= p.n_cols) return;
    uint i = p.x_off + r * p.x_stride + c;
    g[i] = silu_mul(g[i], u[p.y_off + r * p.y_stride + c]);
}
