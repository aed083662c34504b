#version 450
// add.comp: x[r][c] += y[r][c] over n_rows rows of n_cols floats; one invocation
// per element, workgroups (columns / WG, rows).

layout(constant_id = 0) const uint WG = 256;
layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push { // vk_pc_binary in push.h
    uint n_cols, n_rows;
    uint x_off, x_stride;
    uint y_off, y_stride;
} p;

layout(binding = 0, std430) buffer X { float x[]; };
layout(binding = 1, std430) readonly buffer Y { float y[]; };

void main() {
    uint c = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
    if (c >= p.n_cols) return;
    x[p.x_off + r * p.x_stride + c] += y[p.y_off + r * p.y_stride + c];
}
