#version 450
// add_rows.comp: x[ids[i]][c] += w[i] * y[i][c] for the n rows of y, the ids distinct
// (a mixture of experts adding one expert's weighted outputs to its tokens' rows).
// One invocation per element; workgroups (columns / WG, n).

layout(constant_id = 0) const uint WG = 256;
layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push { // vk_pc_add_rows in push.h
    uint n_cols, n;
    uint x_off, x_stride;
    uint y_off, y_stride;
    uint iw_off; // ids at iw[iw_off ..], their weights (as float bits) at iw[iw_off + n ..]
} p;

layout(binding = 0, std430) buffer X { float x[]; };
layout(binding = 1, std430) readonly buffer Y { float y[]; };
layout(binding = 2, std430) readonly buffer IW { uint iw[]; };

void main() {
    uint c = gl_GlobalInvocationID.x, i = gl_WorkGroupID.y;
    if (c >= p.n_cols) return;
    uint row = iw[p.iw_off + i];
    float w = uintBitsToFloat(iw[p.iw_off + p.n + i]);
    x[p.x_off + row * p.x_stride + c] += w * y[p.y_off + i * p.y_stride + c];
}
