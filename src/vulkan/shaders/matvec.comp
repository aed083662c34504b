#version 450
// matvec.comp: out[t][row0 + o] (+)= x[t] . w[o] (+ bias) for a few tokens (n_tok <= NT,
// the decode case); accumulate adds the product to out (matmul_add, backend.h). The GLU
// build computes out[t][row0 + o] = act(x[t] . w[o]) * (x[t] . u[o]) instead, the gate w
// and the up projection u (binding 4, same type and shape) walked together (matmul_glu). Each weight is dequantized once and applied to every token, so
// the weights, the bytes that bound decode speed, are read once per call. Rows are
// walked in units of 32 elements (a block, or a slice of a K-quant super-block; 4
// for float rows, which may have any length). Built per weight type, with and
// without subgroup arithmetic (USE_SUBGROUP).
//
// NR rows per workgroup; the WG invocations split each row's units and the partial
// sums are added across the workgroup (subgroup arithmetic, else shared memory).
// CPU devices take matmul_rows.comp instead. Workgroups are numbered over (x, y):
// n_out / NR may exceed the 65535 of one dimension. NT, the tokens of one call, is a
// specialization constant (ops.c picks the smallest of 1, 2, 4, 8 that holds n_tok),
// so that no work is spent on absent tokens.

#extension GL_EXT_control_flow_attributes : require
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#define W_BINDING 1
#include "dequant.glsl"
#ifdef GLU
#define U_BINDING 4
#include "dequant_up.glsl"
#include "glu.glsl"
#define NW 2 // weight matrices: acc[NR * NT ..] and part[NR * NT ..] are the up's
#else
#define NW 1
#endif

layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint NR = 2;
layout(constant_id = 2) const uint NT = 1;
layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push { // vk_pc_matmul in push.h
    uint n_in, n_out, n_tok;
    uint x_off, x_stride;
    uint w_off, w_row_bytes;
    uint b_off, has_bias;
    uint o_off, o_stride;
    uint row0;
    uint accumulate;
    uint u_off, act; // GLU: the up rows' offset in binding 4; 0 SiLU, 1 GELU
} p;

layout(binding = 0, std430) readonly buffer X { float x[]; };
layout(binding = 0, std430) readonly buffer XV { vec4 xv[]; }; // when n_in % 4 == 0
layout(binding = 2, std430) readonly buffer B { float bias[]; };
layout(binding = 3, std430) buffer O { float o[]; };

#if QK == 1
#define UNIT 4
#else
#define UNIT 32
#endif

float acc[NW * NR * NT]; // this invocation's partial dot of (row r, token t) at r * NT + t

// Inputs 4 i4 .. 4 i4 + 3 of token t; tokens past n_tok read the last one (their
// results are dropped). Rows of a multiple of 4 inputs start at multiples of 4
// floats (ops.c), so one vec4 load does; other float rows load singly, with zeros
// past the end.
vec4 x4(uint t, uint i4) {
    uint b = p.x_off + min(t, p.n_tok - 1) * p.x_stride + 4 * i4;
#if QK == 1
    if (p.n_in % 4 != 0) {
        vec4 v = vec4(0.0);
        for (uint k = 0; k < 4; k++)
            if (4 * i4 + k < p.n_in) v[k] = x[b + k];
        return v;
    }
#endif
    return xv[b / 4];
}

// acc[k + t] += unit u of a weight row . the same inputs of each token t
#if QK == 1
void accumulate(uint k, vec4 w, uint u) {
    [[unroll]] for (uint t = 0; t < NT; t++) acc[k + t] += dot(w, x4(t, u));
}
#else
void accumulate(uint k, vec4 w[8], uint u) {
    [[unroll]] for (uint t = 0; t < NT; t++) {
        float s = 0.0;
        [[unroll]] for (uint j = 0; j < 8; j++) s += dot(w[j], x4(t, 8 * u + j));
        acc[k + t] += s;
    }
}
#endif

// acc of row r += unit u of its weight row at byte wrow (and of its up row at urow)
void accumulate_unit(uint r, uint wrow, uint urow, uint u) {
#if QK == 1
    accumulate(r * NT, dq4_tail(wrow, u, p.n_in), u);
#ifdef GLU
    accumulate((NR + r) * NT, dq4_tail_up(urow, u, p.n_in), u);
#endif
#else
    vec4 w[8];
    dq32(wrow, u, w);
    accumulate(r * NT, w, u);
#ifdef GLU
    dq32_up(urow, u, w);
    accumulate((NR + r) * NT, w, u);
#endif
#endif
}

// v: the sum of the gate's (or the only) product; vu: the up's (GLU)
void store(uint row, uint t, float v, float vu) {
    uint col = p.row0 + row, i = p.o_off + t * p.o_stride + col;
#ifdef GLU
    o[i] = p.act != 0 ? gelu_mul(v, vu) : silu_mul(v, vu);
#else
    if (p.has_bias != 0) v += bias[p.b_off + col];
    o[i] = p.accumulate != 0 ? o[i] + v : v;
#endif
}

uint group_id() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

shared float part[NW * NR * NT][WG];

void main() {
    uint tid = gl_LocalInvocationID.x, first = group_id() * NR;
    if (first >= p.n_out) return; // a whole workgroup leaves together
    [[unroll]] for (uint k = 0; k < NW * NR * NT; k++) acc[k] = 0.0;
    uint n_units = (p.n_in + UNIT - 1) / UNIT;
    [[unroll]] for (uint r = 0; r < NR; r++) {
        uint row = min(first + r, p.n_out - 1) * p.w_row_bytes;
        for (uint u = tid; u < n_units; u += WG) accumulate_unit(r, p.w_off + row, p.u_off + row, u);
    }
    // sum each (row, token) over the workgroup
#ifdef USE_SUBGROUP
    [[unroll]] for (uint k = 0; k < NW * NR * NT; k++) {
        float s = subgroupAdd(acc[k]);
        if (subgroupElect()) part[k][gl_SubgroupID] = s;
    }
    barrier();
    uint n_part = gl_NumSubgroups;
#else
    [[unroll]] for (uint k = 0; k < NW * NR * NT; k++) part[k][tid] = acc[k];
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (tid < s)
            [[unroll]] for (uint k = 0; k < NW * NR * NT; k++) part[k][tid] += part[k][tid + s];
        barrier();
    }
    uint n_part = 1;
#endif
    for (uint k = tid; k < NR * NT; k += WG) {
        uint r = k / NT, t = k % NT;
        if (t >= p.n_tok || first + r >= p.n_out) continue;
        float s = 0.0, su = 0.0;
        for (uint i = 0; i < n_part; i++) s += part[k][i];
#ifdef GLU
        for (uint i = 0; i < n_part; i++) su += part[NR * NT + k][i];
#endif
        store(first + r, t, s, su);
    }
}

