#version 450
// get_rows.comp: out[i] = dequantized table row ids[i], for the ids that fall in
// [row0, row1), the rows this dispatch's table binding covers. One invocation per
// four elements; workgroups (n_cols / 4 / WG, n_ids). Built per weight type.

#define W_BINDING 0
#include "dequant.glsl"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push { // vk_pc_get_rows in push.h
    uint n_cols, n_ids;
    uint t_off, t_row_bytes;
    uint row0, row1;
    uint o_off, o_stride;
} p;

layout(binding = 1, std430) readonly buffer Ids { int ids[]; };
layout(binding = 2, std430) writeonly buffer O { float o[]; };

void main() {
    uint i4 = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
    uint id = uint(ids[r]);
    if (4 * i4 >= p.n_cols || id < p.row0 || id >= p.row1) return;
    vec4 v = dq4_tail(p.t_off + (id - p.row0) * p.t_row_bytes, i4, p.n_cols);
    uint ob = p.o_off + r * p.o_stride + 4 * i4;
    for (uint k = 0; k < 4; k++)
        if (4 * i4 + k < p.n_cols) o[ob + k] = v[k];
}
