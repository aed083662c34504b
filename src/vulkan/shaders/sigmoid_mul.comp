#version 450
// sigmoid_mul.comp: x[r][c] = x[r][c] / (1 + e^-g[r][c]), the output gate of qwen35's
// attention; one invocation per element, workgroups (columns / WG, rows). x and g are
// views with row strides of their own: per-head rows of the attention's output, and
// the gate that lies beside each head's query in one projection.

layout(constant_id = 0) const uint WG = 256;
layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push { // vk_pc_binary in push.h
    uint n_cols, n_rows;
    uint x_off, x_stride;
    uint y_off, y_stride;
} p;

layout(binding = 0, std430) buffer X { float x[]; };
layout(binding = 1, std430) readonly buffer G { float g[]; };

void main() {
    uint c = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
    if (c >= p.n_cols) return;
    uint i = p.x_off + r * p.x_stride + c;
    // divided, not multiplied by the reciprocal: the reference's rounding
    x[i] = x[i] / (1.0 + exp(-g[p.y_off + r * p.y_stride + c]));
}
