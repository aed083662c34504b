#version 450
// moe_mm.comp: the projections of a mixture of experts' routed experts for every
// (token, expert) pair of a few tokens in one dispatch (moe_ffn, backend.h; moe.c):
//   out[pair][o] = in[row] . w[e n_out + o] (+ bias[e][o])
// The pair table (uints at pt_off) gives each pair's token and expert e, sorted by
// expert; row is the pair's token (the gate and up projections read the normed
// tokens) or, with x_by_pair, the pair itself (the down projection reads the pair's
// activations; x_row0 is the first pair the input binding holds). A slot is one expert's run of pairs (at most NT, one per token; the
// slot table at st_off holds its first pair and count): a workgroup takes a slot, so
// each weight unit is dequantized once for all the tokens routed to its expert.
// The GLU build walks the gate w and the up projection u together and stores
//   act(x . w + bias) * (x . u + up bias), act SiLU or GELU (glu.glsl) or gpt-oss's swiglu_oai.
// The weights stay as the file stacks them: a dispatch binds a window of whole experts
// [e0, ...) and each workgroup offsets into it by its slot's expert, so no expert's
// weights are gathered or copied. Workgroups: (row groups, slots of this dispatch).
//
// Two strategies, as for the plain matmuls (matvec.comp, matmul_rows.comp):
//   - ROWS, CPU devices (lavapipe): each invocation owns one weight row, so nothing
//     is reduced across lanes; the inputs come from a uniform buffer; for each 32-input unit, lane l loads vec4 l % 8 of the
//     unit and the eight reach every lane by subgroupShuffle (one gather, not eight);
//   - otherwise (GPUs): NR rows per workgroup, the WG invocations split each row's
//     units and the partial sums meet in shared memory.
// NT, the most pairs of a slot, is a specialization constant (1, 2, 4 or 8: moe.c
// picks the smallest that holds the batch's). Built per block-quantized weight type
// (rows are whole 32-element units).

#extension GL_EXT_control_flow_attributes : require
#ifdef ROWS
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#define W_BINDING 1
#include "dequant.glsl"
#ifdef GLU
#define U_BINDING 4
#include "dequant_up.glsl"
#include "glu.glsl"
#define NW 2 // weight matrices: the up's sums follow the gate's
#define PT_BINDING 6
#else
#define NW 1
#define PT_BINDING 4
#endif

layout(constant_id = 0) const uint WG = 64;
#ifdef ROWS
layout(constant_id = 1) const uint SG = 8; // the subgroup size: 4, or 8 and more
#else
layout(constant_id = 1) const uint NR = 2; // rows per workgroup
#endif
layout(constant_id = 2) const uint NT = 1; // pairs per slot at most
layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push { // vk_pc_moe_mm in push_moe.h
    uint n_in, n_out, n_slots, slot0;
    uint x_off, x_stride, x_by_pair, x_row0;
    uint w_off, w_row_bytes, w_exp_bytes, e0;
    uint u_off;
    uint b_off, b_stride, has_bias;
    uint ub_off, ub_stride;
    uint o_off, o_stride;
    uint pt_off, st_off;
    uint act;
    float alpha, limit;
} p;

#ifdef ROWS
// inputs in a 64 KiB uniform buffer, which lavapipe reads with one gather where a
// storage buffer takes a loop of per-lane loads (matmul_rows.comp; moe.c binds it)
layout(std140, binding = 0) uniform XV { vec4 xv[4096]; };
#else
layout(binding = 0, std430) readonly buffer XV { vec4 xv[]; };
#endif
layout(binding = 2, std430) readonly buffer B { float bias[]; };
layout(binding = 3, std430) buffer O { float o[]; };
#ifdef GLU
layout(binding = 5, std430) readonly buffer UB { float ubias[]; };
#endif
layout(binding = PT_BINDING, std430) readonly buffer PT { uint pt[]; };

#ifdef GLU
const float FLT_MAX = 3.40282347e38;
// swiglu_oai.comp's formula, the same operations in the same order
float swiglu_oai(float g, float u) {
    float x = max(min(g, p.limit), -FLT_MAX);
    float y = clamp(u, -p.limit, p.limit);
    float z = p.alpha * x, e = exp(-abs(z));
    float sig = (z >= 0.0 ? 1.0 : e) / (1.0 + e);
    return x * sig * (y + 1.0);
}
#endif

// The output of row `col` of the pair: the sums of the gate (or only) and up rows.
void store(uint pair, uint e, uint col, float s, float su) {
    if ((p.has_bias & 1u) != 0) s += bias[p.b_off + e * p.b_stride + col];
#ifdef GLU
    if ((p.has_bias & 2u) != 0) su += ubias[p.ub_off + e * p.ub_stride + col];
    s = p.act == 1u ? swiglu_oai(s, su) : p.act == 2u ? gelu_mul(s, su) : silu_mul(s, su);
#endif
    o[p.o_off + pair * p.o_stride + col] = s;
}

#ifdef ROWS
// w . inputs b .. b+7 (vec4s), every lane loading one or two of them
float dot_unit(vec4 w[8], uint b) {
    uint lane = gl_SubgroupInvocationID;
    vec4 s = vec4(0.0);
    if (SG >= 8) {
        vec4 mine = xv[b + lane % 8];
        [[unroll]] for (uint j = 0; j < 8; j++) s += w[j] * subgroupShuffle(mine, j);
    } else {
        vec4 lo = xv[b + lane % 4], hi = xv[b + 4 + lane % 4];
        [[unroll]] for (uint j = 0; j < 4; j++)
            s += w[j] * subgroupShuffle(lo, j) + w[j + 4] * subgroupShuffle(hi, j);
    }
    return (s.x + s.y) + (s.z + s.w);
}
#else
float dot_unit(vec4 w[8], uint b) {
    float s = 0.0;
    [[unroll]] for (uint j = 0; j < 8; j++) s += dot(w[j], xv[b + j]);
    return s;
}
shared float part[NW * NR * NT][WG];
#endif

void main() {
    uint slot = p.slot0 + gl_WorkGroupID.y;
    uint pair0 = pt[p.st_off + 2 * slot], n = pt[p.st_off + 2 * slot + 1]; // n <= NT
    uint e = pt[p.pt_off + 2 * pair0 + 1];
    uint xrow[NT]; // the first vec4 of each pair's inputs; pairs past n repeat the last
    [[unroll]] for (uint t = 0; t < NT; t++) {
        uint pair = pair0 + min(t, n - 1);
        uint r = p.x_by_pair != 0 ? pair - p.x_row0 : pt[p.pt_off + 2 * pair];
        xrow[t] = (p.x_off + r * p.x_stride) / 4;
    }
    uint wexp = (e - p.e0) * p.w_exp_bytes, n_units = p.n_in / 32;
#ifdef ROWS
    // every invocation reaches the shuffles (n is the same in the whole workgroup):
    // those past the last row repeat it
    uint row = gl_WorkGroupID.x * WG + gl_LocalInvocationID.x;
    uint wrow = p.w_off + wexp + min(row, p.n_out - 1) * p.w_row_bytes;
    uint urow = p.u_off + wexp + min(row, p.n_out - 1) * p.w_row_bytes;
    float acc[NW * NT];
    [[unroll]] for (uint k = 0; k < NW * NT; k++) acc[k] = 0.0;
    for (uint u = 0; u < n_units; u++) {
        vec4 w[8];
        dq32(wrow, u, w);
        [[unroll]] for (uint t = 0; t < NT; t++)
            if (t < n) acc[t] += dot_unit(w, xrow[t] + 8 * u);
#ifdef GLU
        dq32_up(urow, u, w);
        [[unroll]] for (uint t = 0; t < NT; t++)
            if (t < n) acc[NT + t] += dot_unit(w, xrow[t] + 8 * u);
#endif
    }
    if (row < p.n_out)
        [[unroll]] for (uint t = 0; t < NT; t++)
            if (t < n) store(pair0 + t, e, row, acc[t], acc[(NW - 1) * NT + t]);
#else
    uint tid = gl_LocalInvocationID.x, row0 = gl_WorkGroupID.x * NR;
    float acc[NW * NR * NT]; // (row r, pair t) at r * NT + t, the up's NR * NT further
    [[unroll]] for (uint k = 0; k < NW * NR * NT; k++) acc[k] = 0.0;
    [[unroll]] for (uint r = 0; r < NR; r++) {
        uint row = min(row0 + r, p.n_out - 1) * p.w_row_bytes + wexp;
        for (uint u = tid; u < n_units; u += WG) {
            vec4 w[8];
            dq32(p.w_off + row, u, w);
            [[unroll]] for (uint t = 0; t < NT; t++)
                if (t < n) acc[r * NT + t] += dot_unit(w, xrow[t] + 8 * u);
#ifdef GLU
            dq32_up(p.u_off + row, u, w);
            [[unroll]] for (uint t = 0; t < NT; t++)
                if (t < n) acc[(NR + r) * NT + t] += dot_unit(w, xrow[t] + 8 * u);
#endif
        }
    }
    [[unroll]] for (uint k = 0; k < NW * NR * NT; k++) part[k][tid] = acc[k];
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (tid < s)
            [[unroll]] for (uint k = 0; k < NW * NR * NT; k++) part[k][tid] += part[k][tid + s];
        barrier();
    }
    for (uint k = tid; k < NR * NT; k += WG) {
        uint r = k / NT, t = k % NT;
        if (t < n && row0 + r < p.n_out)
            store(pair0 + t, e, row0 + r, part[k][0], part[(NW - 1) * NR * NT + k][0]);
    }
#endif
}
