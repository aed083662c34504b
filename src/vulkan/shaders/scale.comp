#version 450
// scale.comp: x[r][c] *= s over n_rows rows of n_cols floats; one invocation per
// element, workgroups (columns / WG, rows).

layout(constant_id = 0) const uint WG = 256;
layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push { // vk_pc_scale in push.h
    uint n_cols, n_rows;
    uint x_off, x_stride;
    float s;
} p;

layout(binding = 0, std430) buffer X { float x[]; };

void main() {
    uint c = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
    if (c >= p.n_cols) return;
    x[p.x_off + r * p.x_stride + c] *= p.s;
}
