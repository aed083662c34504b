#version 450
// matmul_rows.comp: the matmul of CPU devices (lavapipe), for any number of tokens:
//   out[t][row0 + o] (+)= x[t][k0 .. k0 + n_k) . w[o][k0 .. k0 + n_k) (+ bias)
// The GLU build: out[t][row0 + o] = act(x[t] . w[o]) * (x[t] . u[o]), the up projection
// u at binding 4 (same type and shape as the gate w), over all inputs in one slice.
// A CPU device runs a workgroup as a loop over subgroups of SIMD lanes. There a
// storage-buffer load inside a loop is a per-lane loop of scalar loads, and even a
// uniform-buffer load is a full gather; register arithmetic and subgroup shuffles
// (a lane extract and a splat) are cheap. So:
//   - each invocation owns one weight row: nothing is reduced across lanes;
//   - ops.c packs the inputs into slices of NT tokens x n_k inputs that fit one
//     64 KiB uniform buffer (xs), running the slices of the K dimension in order, the
//     first writing out (plus bias; or adding, for matmul_add), the others adding;
//   - for each 32-input unit of a token, lane l gathers vec4 l of the unit, and the
//     eight vec4s reach every lane by subgroupShuffle: one gather where a plain loop
//     would make eight;
//   - each dequantized unit of the row serves NT tokens.
// Every invocation must reach the shuffles (WG is a multiple of SG): invocations past
// the last row repeat it and drop their results. Built per weight type.
// The MULTI build: out_i = x . w_i (+ bias_i) for n_w <= 3 weights of one type and input
// length, one slice (matmul_multi), each weight, bias and output its own buffer of an
// array binding; workgroups cover weight 0's rows, then weight 1's, ..., so each reads
// one weight (w_sel, uniform in the workgroup).

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define W_BINDING 1
#ifdef MULTI
#define W_ARRAY 3
#endif
#include "dequant.glsl"
#ifdef GLU
#define U_BINDING 4
#include "dequant_up.glsl"
#include "glu.glsl"
#define NW 2 // weight matrices: acc[NT ..] is the up's
#else
#define NW 1
#endif

layout(constant_id = 0) const uint WG = 16; // rows per workgroup
layout(constant_id = 1) const uint NT = 1;  // tokens per slice
layout(constant_id = 2) const uint SG = 8;  // the subgroup size: 4, or 8 and more
layout(local_size_x_id = 0) in;

#ifdef MULTI
layout(push_constant) uniform Push { // vk_pc_matmul_rows_multi in push.h
    uint n_k, n_tok;
    uint xs_stride;
    uint w_row_bytes;
    uint n_w, has_bias; // weights; bit i: weight i has a bias
    uint n_out[3], w_off[3], b_off[3], o_off[3], o_stride[3];
} p;
const uint k0 = 0; // one slice
layout(binding = 2, std430) readonly buffer B { float v[]; } bias_[3];
layout(binding = 3, std430) buffer O { float v[]; } o_[3];
#else
layout(push_constant) uniform Push { // vk_pc_matmul_rows in push.h
    uint n_k, n_out, n_tok;
    uint k0, xs_stride;
    uint w_off, w_row_bytes;
    uint b_off, has_bias, accumulate;
    uint o_off, o_stride;
    uint row0;
    uint u_off, act; // GLU: the up rows' offset in binding 4; 0 SiLU, 1 GELU
} p;
#define k0 p.k0
layout(binding = 2, std430) readonly buffer B { float bias[]; };
layout(binding = 3, std430) buffer O { float o[]; };
#endif

layout(std140, binding = 0) uniform XS { vec4 xs[4096]; }; // [NT][xs_stride] vec4, 64 KiB

// w . inputs b .. b+7 (vec4s of xs), every lane contributing one or two loads
float dot_unit(vec4 w[8], uint b) {
    uint lane = gl_SubgroupInvocationID;
    vec4 s = vec4(0.0);
    if (SG >= 8) {
        vec4 mine = xs[b + lane % 8];
        [[unroll]] for (uint j = 0; j < 8; j++) s += w[j] * subgroupShuffle(mine, j);
    } else {
        vec4 lo = xs[b + lane % 4], hi = xs[b + 4 + lane % 4];
        [[unroll]] for (uint j = 0; j < 4; j++)
            s += w[j] * subgroupShuffle(lo, j) + w[j + 4] * subgroupShuffle(hi, j);
    }
    return (s.x + s.y) + (s.z + s.w);
}

float acc[NW * NT]; // this invocation's products: NT tokens, then the up's NT (GLU)

// writes the products of this invocation's row
void store(uint row) {
#ifdef MULTI
    float b = (p.has_bias >> w_sel & 1u) != 0 ? bias_[w_sel].v[p.b_off[w_sel] + row] : 0.0;
    [[unroll]] for (uint t = 0; t < NT; t++) {
        if (t >= p.n_tok) break;
        o_[w_sel].v[p.o_off[w_sel] + t * p.o_stride[w_sel] + row] = acc[t] + b;
    }
#else
    uint col = p.row0 + row;
    float b = p.has_bias != 0 ? bias[p.b_off + col] : 0.0;
    [[unroll]] for (uint t = 0; t < NT; t++) {
        if (t >= p.n_tok) break;
        uint i = p.o_off + t * p.o_stride + col;
#ifdef GLU
        o[i] = p.act != 0 ? gelu_mul(acc[t], acc[NT + t]) : silu_mul(acc[t], acc[NT + t]);
#else
        // has_bias: the first slice (ops.c); accumulate: a later slice, or matmul_add
        o[i] = p.accumulate != 0 ? o[i] + (acc[t] + b) : acc[t] + b;
#endif
    }
#endif
}

void main() {
    uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
#ifdef MULTI
    // weight i's rows take ceil(n_out[i] / WG) workgroups, after those of weights < i
    for (uint i = 0; i + 1 < p.n_w; i++) {
        uint ng = (p.n_out[i] + WG - 1) / WG;
        if (g < ng) break;
        g -= ng;
        w_sel++;
    }
    uint n_out = p.n_out[w_sel], w_off = p.w_off[w_sel], u_off = 0;
#else
    uint n_out = p.n_out, w_off = p.w_off, u_off = p.u_off;
#endif
    uint row = g * WG + gl_LocalInvocationID.x;
    uint wrow = w_off + min(row, n_out - 1) * p.w_row_bytes;
    uint urow = u_off + min(row, n_out - 1) * p.w_row_bytes;
    [[unroll]] for (uint t = 0; t < NW * NT; t++) acc[t] = 0.0;
    uint n_units = p.n_k / 32;
    for (uint u = 0; u < n_units; u++) {
        vec4 w[8];
        dq32(wrow, k0 / 32 + u, w);
        [[unroll]] for (uint t = 0; t < NT; t++) acc[t] += dot_unit(w, t * p.xs_stride + 8 * u);
#ifdef GLU
        dq32_up(urow, k0 / 32 + u, w);
        [[unroll]] for (uint t = 0; t < NT; t++) acc[NT + t] += dot_unit(w, t * p.xs_stride + 8 * u);
#endif
    }
#if QK == 1
    // float rows of any length: the last inputs, 4 at a time, zeros past the slice
    for (uint i = 8 * n_units; i < (p.n_k + 3) / 4; i++) {
        vec4 w = dq4_tail(wrow, k0 / 4 + i, k0 + p.n_k);
        bvec4 in_k = lessThan(uvec4(4 * i) + uvec4(0, 1, 2, 3), uvec4(p.n_k));
        [[unroll]] for (uint t = 0; t < NT; t++)
            acc[t] += dot(w, mix(vec4(0.0), xs[t * p.xs_stride + i], in_k));
#ifdef GLU
        w = dq4_tail_up(urow, k0 / 4 + i, k0 + p.n_k);
        [[unroll]] for (uint t = 0; t < NT; t++)
            acc[NT + t] += dot(w, mix(vec4(0.0), xs[t * p.xs_stride + i], in_k));
#endif
    }
#endif
    if (row >= n_out) return;
    store(row);
}
