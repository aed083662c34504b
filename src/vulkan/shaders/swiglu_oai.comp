#version 450
// swiglu_oai.comp: gpt-oss's clamped SwiGLU, g[r][c] = x sigmoid(alpha x) (y + 1) with
// x = min(g, limit) and y = clamp(u, -limit, limit). One invocation per element,
// workgroups (columns / WG, rows).
//
// sigmoid(z) as 1 / (1 + e^-z) overflows e^-z to inf for z below about -88 (x large
// and negative), and a driver's division may not turn 1 / inf into 0. With
// e = e^-|z|, which lies in [0, 1] and never overflows, sigmoid(z) is 1 / (1 + e) for
// z >= 0 and e / (1 + e) below. x is kept >= -FLT_MAX, so that an input of -inf
// gives its limit 0 (x e = -FLT_MAX * 0) instead of -inf * 0 = NaN.

layout(constant_id = 0) const uint WG = 256;
layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push { // vk_pc_swiglu_oai in push.h
    uint n_cols, n_rows;
    uint x_off, x_stride;
    uint y_off, y_stride;
    float alpha, limit;
} p;

layout(binding = 0, std430) buffer G { float g[]; };
layout(binding = 1, std430) readonly buffer U { float u[]; };

const float FLT_MAX = 3.40282347e38;

void main() {
    uint c = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
    if (c >= p.n_cols) return;
    uint i = p.x_off + r * p.x_stride + c;
    float x = max(min(g[i], p.limit), -FLT_MAX);
    float y = clamp(u[p.y_off + r * p.y_stride + c], -p.limit, p.limit);
    float z = p.alpha * x, e = exp(-abs(z));
    float sig = (z >= 0.0 ? 1.0 : e) / (1.0 + e);
    g[i] = x * sig * (y + 1.0);
}
