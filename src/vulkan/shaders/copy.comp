#version 450
// copy.comp: d[i] = s[i] over n 16-byte words, a grid-stride loop; used only to
// measure the device's memory bandwidth for roofline estimates (vk_measure_bandwidth).

layout(constant_id = 0) const uint WG = 256;
layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push { // vk_pc_copy in push.h
    uint n;
} p;

layout(binding = 0, std430) readonly buffer S { uvec4 s[]; };
layout(binding = 1, std430) writeonly buffer D { uvec4 d[]; };

void main() {
    uint stride = gl_NumWorkGroups.x * WG;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) d[i] = s[i];
}
