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
//
// The MULTI build computes out_i[t][o] = x[t] . w_i[o] (+ bias_i) for n_w <= 3 weights of
// one type and input length (matmul_multi: the q, k and v projections), each weight,
// bias and output its own buffer of an array binding: the workgroups cover weight 0's
// rows, then weight 1's, ..., so each workgroup reads one weight (w_sel, uniform in
// the workgroup, as dynamic indexing of a buffer array requires).
//
// The GLU and MULTI builds fuse the rms_norm before them when the specialization
// constant NORM is set (a separate pipeline, so that the builds without it keep their
// inner loop free of the test, which cost a CPU device half its speed): each
// workgroup sums the squares of every token's inputs itself (a few thousand floats
// when decoding) and scales the inputs as it loads them, x * scale * norm weight,
// the rounding of rms_norm.comp; only the order of the sum of squares differs.

#extension GL_EXT_control_flow_attributes : require
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "reduce.glsl" // WG, the workgroup size, and wg_sum (the input norm)
#define W_BINDING 1
#ifdef MULTI
#define W_ARRAY 3
#endif
#include "dequant.glsl"
#ifdef GLU
#define U_BINDING 4
#include "dequant_up.glsl"
#include "glu.glsl"
#define NW 2 // weight matrices: acc[NR * NT ..] and part[NR * NT ..] are the up's
#else
#define NW 1
#endif

layout(constant_id = 1) const uint NR = 2;
layout(constant_id = 2) const uint NT = 1;
layout(constant_id = 3) const bool NORM = false; // GLU and MULTI: the input norm (has_norm)

#ifdef MULTI
layout(push_constant) uniform Push { // vk_pc_matmul_multi in push.h
    uint n_in, n_tok;
    uint x_off, x_stride;
    uint w_row_bytes;
    uint n_w, has_bias; // weights; bit i: weight i has a bias
    uint n_out[3], w_off[3], b_off[3], o_off[3], o_stride[3];
    uint nw_off, has_norm; float eps; // the input norm (binding 4)
} p;
#define NORM_BINDING 4
layout(binding = 2, std430) readonly buffer B { float v[]; } bias_[3];
layout(binding = 3, std430) buffer O { float v[]; } o_[3];
#else
layout(push_constant) uniform Push { // vk_pc_matmul in push.h
    uint n_in, n_out, n_tok;
    uint x_off, x_stride;
    uint w_off, w_row_bytes;
    uint b_off, has_bias;
    uint o_off, o_stride;
    uint row0;
    uint accumulate;
    uint u_off, act; // GLU: the up rows' offset in binding 4; 0 SiLU, 1 GELU
    uint nw_off, has_norm; float eps; // GLU: the input norm (binding 5)
} p;
#define NORM_BINDING 5
layout(binding = 2, std430) readonly buffer B { float bias[]; };
layout(binding = 3, std430) buffer O { float o[]; };
#endif

layout(binding = 0, std430) readonly buffer X { float x[]; };
layout(binding = 0, std430) readonly buffer XV { vec4 xv[]; }; // when n_in % 4 == 0

#if QK == 1
#define UNIT 4
#else
#define UNIT 32
#endif

float acc[NW * NR * NT]; // this invocation's partial dot of (row r, token t) at r * NT + t

#if defined(GLU) || defined(MULTI)
#define HAS_NORM
layout(binding = NORM_BINDING, std430) readonly buffer NW_ { float nw[]; };
float nscale[NT]; // NORM: 1 / rms of each token's inputs

// nscale of every token: every invocation must call it (wg_sum has barriers)
void norm_scales(uint tid) {
    [[unroll]] for (uint t = 0; t < NT; t++) {
        uint b = p.x_off + min(t, p.n_tok - 1) * p.x_stride;
        float ss = 0.0;
        for (uint i = tid; i < p.n_in; i += WG) ss += x[b + i] * x[b + i];
        nscale[t] = inversesqrt(wg_sum(ss) / float(p.n_in) + p.eps);
    }
}
#endif

// v, inputs 4 i4 .. 4 i4 + 3 of token t, through the input norm where there is one
// (zeros past the end stay zeros: the weight's index is clamped, not its value read)
vec4 normed(vec4 v, uint t, uint i4) {
#ifdef HAS_NORM
    if (NORM) {
        uint k = p.nw_off + 4 * i4, last = p.nw_off + p.n_in - 1;
        vec4 w = vec4(nw[k], nw[min(k + 1, last)], nw[min(k + 2, last)], nw[min(k + 3, last)]);
        v = v * nscale[t] * w;
    }
#endif
    return v;
}

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
        return normed(v, t, i4);
    }
#endif
    return normed(xv[b / 4], t, i4);
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
#ifdef MULTI
    if ((p.has_bias >> w_sel & 1u) != 0) v += bias_[w_sel].v[p.b_off[w_sel] + row];
    o_[w_sel].v[p.o_off[w_sel] + t * p.o_stride[w_sel] + row] = v;
    return;
#else
    uint col = p.row0 + row, i = p.o_off + t * p.o_stride + col;
#endif
#ifdef GLU
    o[i] = p.act != 0 ? gelu_mul(v, vu) : silu_mul(v, vu);
#elif !defined(MULTI)
    if (p.has_bias != 0) v += bias[p.b_off + col];
    o[i] = p.accumulate != 0 ? o[i] + v : v;
#endif
}

uint group_id() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

shared float part[NW * NR * NT][WG];

void main() {
    uint tid = gl_LocalInvocationID.x, g = group_id();
#ifdef MULTI
    // weight i's rows take ceil(n_out[i] / NR) workgroups, after those of weights < i
    for (uint i = 0; i + 1 < p.n_w; i++) {
        uint ng = (p.n_out[i] + NR - 1) / NR;
        if (g < ng) break;
        g -= ng;
        w_sel++;
    }
    uint n_out = p.n_out[w_sel], w_off = p.w_off[w_sel], u_off = 0;
#else
    uint n_out = p.n_out, w_off = p.w_off, u_off = p.u_off;
#endif
    uint first = g * NR;
    if (first >= n_out) return; // a whole workgroup leaves together
#ifdef HAS_NORM
    if (NORM) norm_scales(tid);
#endif
    [[unroll]] for (uint k = 0; k < NW * NR * NT; k++) acc[k] = 0.0;
    uint n_units = (p.n_in + UNIT - 1) / UNIT;
    [[unroll]] for (uint r = 0; r < NR; r++) {
        uint row = min(first + r, n_out - 1) * p.w_row_bytes;
        for (uint u = tid; u < n_units; u += WG) accumulate_unit(r, w_off + row, u_off + row, u);
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
        if (t >= p.n_tok || first + r >= n_out) continue;
        float s = 0.0, su = 0.0;
        for (uint i = 0; i < n_part; i++) s += part[k][i];
#ifdef GLU
        for (uint i = 0; i < n_part; i++) su += part[NR * NT + k][i];
#endif
        store(first + r, t, s, su);
    }
}

