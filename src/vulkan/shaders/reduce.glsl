// reduce.glsl: sums and maxima over a workgroup of WG invocations (a power of two,
// the specialization constant 0 that also sizes the workgroup).
//
// Built twice: with USE_SUBGROUP, subgroup arithmetic reduces inside each subgroup
// and shared memory combines the subgroups; without it, a shared-memory tree does
// all of it, for devices whose subgroups have no arithmetic (pipelines.c picks the
// build). Every invocation must call these (they contain barriers), and every
// invocation gets the result.

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_arithmetic : require
shared float red_[WG];

float wg_sum(float v) {
    v = subgroupAdd(v);
    if (gl_NumSubgroups == 1) return v;
    if (subgroupElect()) red_[gl_SubgroupID] = v;
    barrier();
    float s = 0.0;
    for (uint i = 0; i < gl_NumSubgroups; i++) s += red_[i];
    barrier();
    return s;
}

float wg_max(float v) {
    v = subgroupMax(v);
    if (gl_NumSubgroups == 1) return v;
    if (subgroupElect()) red_[gl_SubgroupID] = v;
    barrier();
    float m = red_[0];
    for (uint i = 1; i < gl_NumSubgroups; i++) m = max(m, red_[i]);
    barrier();
    return m;
}

#else
shared float red_[WG];

float wg_sum(float v) {
    uint t = gl_LocalInvocationID.x;
    red_[t] = v;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (t < s) red_[t] += red_[t + s];
        barrier();
    }
    float r = red_[0];
    barrier();
    return r;
}

float wg_max(float v) {
    uint t = gl_LocalInvocationID.x;
    red_[t] = v;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (t < s) red_[t] = max(red_[t], red_[t + s]);
        barrier();
    }
    float r = red_[0];
    barrier();
    return r;
}
#endif
