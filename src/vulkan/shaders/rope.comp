#version 450
// rope.comp: rotates pair i of head h of row t in place by the angle whose cosine and
// sine the host computed (in double precision) at cs[t][i]. Normal rope pairs
// elements (2i, 2i+1); neox pairs (i, i + half). The n_head heads of x come first,
// then the n_head_y heads of y (binding 2), rows at the same positions: q and k in one
// dispatch (rope_qk). One invocation per (i, h) of a row; workgroups
// (half * (n_head + n_head_y) / WG, rows).

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push { // vk_pc_rope in push.h
    uint n_rows, n_head, head_dim, half_;
    uint neox;
    uint x_off, x_stride;
    uint cs_off;
    uint n_head_y, y_off, y_stride;
} p;

layout(binding = 0, std430) buffer X { float x[]; };
layout(binding = 1, std430) readonly buffer CS { vec2 cs[]; };
layout(binding = 2, std430) buffer Y { float y[]; };

void main() {
    uint k = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
    if (k >= p.half_ * (p.n_head + p.n_head_y)) return;
    bool in_x = k < p.half_ * p.n_head;
    uint h = k / p.half_ - (in_x ? 0 : p.n_head), i = k % p.half_;
    vec2 c = cs[p.cs_off / 2 + t * p.half_ + i];
    uint base = (in_x ? p.x_off + t * p.x_stride : p.y_off + t * p.y_stride) + h * p.head_dim;
    uint a = base + (p.neox != 0 ? i : 2 * i), b = base + (p.neox != 0 ? i + p.half_ : 2 * i + 1);
    if (in_x) {
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * c.x - x1 * c.y;
        x[b] = x0 * c.y + x1 * c.x;
    } else {
        float y0 = y[a], y1 = y[b];
        y[a] = y0 * c.x - y1 * c.y;
        y[b] = y0 * c.y + y1 * c.x;
    }
}
