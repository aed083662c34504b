#version 450
// rms_norm.comp: out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w; one workgroup per row.
// Rows are numbered over a 2-D grid (y * groups in x + x): a per-head view (qwen3,
// gemma3 Q/K norm: n_tokens * n_head rows of head_dim) can have more rows than a
// device allows workgroups in x, and ops.c then folds them into y.
// x and out may be the same rows: each invocation writes only the elements it read.

#include "reduce.glsl"

layout(push_constant) uniform Push { // vk_pc_rms_norm in push.h
    uint n_cols, n_rows;
    uint x_off, x_stride;
    uint w_off;
    uint o_off, o_stride;
    float eps;
} p;

layout(binding = 0, std430) readonly buffer X { float x[]; };
layout(binding = 1, std430) readonly buffer W { float w[]; };
layout(binding = 2, std430) writeonly buffer O { float o[]; };

void main() {
    uint r = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
    if (r >= p.n_rows) return; // the last folded row of the grid; uniform per workgroup
    uint xr = p.x_off + r * p.x_stride, orow = p.o_off + r * p.o_stride;
    float ss = 0.0;
    for (uint c = t; c < p.n_cols; c += WG) ss += x[xr + c] * x[xr + c];
    float scale = inversesqrt(wg_sum(ss) / float(p.n_cols) + p.eps);
    for (uint c = t; c < p.n_cols; c += WG) o[orow + c] = x[xr + c] * scale * w[p.w_off + c];
}
