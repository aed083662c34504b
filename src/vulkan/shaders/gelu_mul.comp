#version 450
// gelu_mul.comp: g[r][c] = gelu(g[r][c]) * u[r][c] with GELU's tanh approximation
// gelu(a) = 0.5 a (1 + tanh(z)), z = sqrt(2/pi) (a + 0.044715 a^3). One invocation per
// element, workgroups (columns / WG, rows).
//
// 0.5 (1 + tanh(z)) is the logistic 1 / (1 + e^(-2z)), evaluated as such: a driver's
// tanh may compute (e^2z - 1) / (e^2z + 1), which is inf / inf = NaN once e^2z
// overflows (|a| above about 10). z is clamped to +-30, where the logistic is within
// 1e-26 of its limit 0 or 1, so that e^(-2z) stays finite (a^3 overflowing to inf
// gives z = 30) and no driver's division sees an infinity.

layout(constant_id = 0) const uint WG = 256;
layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push { // vk_pc_binary in push.h
    uint n_cols, n_rows;
    uint x_off, x_stride;
    uint y_off, y_stride;
} p;

layout(binding = 0, std430) buffer G { float g[]; };
layout(binding = 1, std430) readonly buffer U { float u[]; };

const float SQRT_2_OVER_PI = 0.79788456080286536;

void main() {
    uint c = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
    if (c >= p.n_cols) return;
    uint i = p.x_off + r * p.x_stride + c;
    float a = g[i];
    float z = clamp(SQRT_2_OVER_PI * (a + 0.044715 * a * a * a), -30.0, 30.0);
    g[i] = a / (1.0 + exp(-2.0 * z)) * u[p.y_off + r * p.y_stride + c];
}
