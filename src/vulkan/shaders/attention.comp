#version 450
// attention.comp: out[t][h] = softmax(q[t][h] . K^T * scale) V over the positions
// query t (at position n_past + t) sees: 0 .. n_past + t, or with window > 0 only the
// last `window` of them; kv head h / (n_head / n_head_kv). One workgroup per
// (head, token). Positions are taken WG at a time: each invocation scores one
// position, and the running maximum and sum (online softmax) rescale what was
// accumulated before, so no buffer grows with the context. Invocation i accumulates
// output dimensions i, i + WG, ... (at most ND of them).
//
// The caches are rings of cap rows (backend.h: al_attn_shape): position j is row
// j % cap. ops.c wrote this batch's keys and values before, and checked that the
// visible positions of every query are still in the ring.
//
// Sinks (gpt-oss, has_sink = 1): head h's logit sinks[h] joins the denominator with
// no value. It is taken as a position already seen: the running maximum starts at it
// and the running sum at e^(sink - sink) = 1 (acc stays 0), so the rescaling below
// handles it like any score. It is not multiplied by scale. Without sinks the
// binding is some other buffer, never read.

#extension GL_EXT_control_flow_attributes : require
#include "reduce.glsl"

layout(constant_id = 1) const uint MAX_HD = 256; // head_dim at most; ops.c checks
const uint ND = (MAX_HD + WG - 1) / WG;

layout(push_constant) uniform Push { // vk_pc_attention in push.h
    uint n_head, n_head_kv, head_dim, n_past, n_tok;
    uint q_off, q_stride;
    uint k_off, k_stride;
    uint v_off, v_stride;
    uint o_off, o_stride;
    float scale;
    uint cap, window;
    uint s_off, has_sink;
} p;

layout(binding = 0, std430) readonly buffer Q { float q[]; };
layout(binding = 1, std430) readonly buffer K { float k[]; };
layout(binding = 2, std430) readonly buffer V { float v[]; };
layout(binding = 3, std430) writeonly buffer O { float o[]; };
layout(binding = 4, std430) readonly buffer S { float sinks[]; }; // [n_head]

shared float qs[MAX_HD];
shared float ps[WG]; // exp(score - max) of the current positions

const float NEG = -1e30; // not -inf: -inf - -inf would be NaN

void main() {
    uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
    uint kvh = h / (p.n_head / p.n_head_kv), hd = p.head_dim;
    uint pos = p.n_past + t;
    uint lo = p.window > 0 && pos >= p.window ? pos + 1 - p.window : 0;
    uint n_vis = pos + 1 - lo, row_lo = lo % p.cap; // visible positions lo .. pos
    for (uint d = tid; d < hd; d += WG) qs[d] = q[p.q_off + t * p.q_stride + h * hd + d];
    barrier();

    // max with NEG: m stays finite, as with the scores, even for a sink of -inf
    float m = p.has_sink != 0 ? max(sinks[p.s_off + h], NEG) : NEG;
    float l = p.has_sink != 0 ? 1.0 : 0.0, acc[ND];
    [[unroll]] for (uint j = 0; j < ND; j++) acc[j] = 0.0;
    for (uint c0 = 0; c0 < n_vis; c0 += WG) {
        uint i = c0 + tid; // this invocation's position is lo + i
        float s = NEG;
        if (i < n_vis) {
            uint kb = p.k_off + ((row_lo + i) % p.cap) * p.k_stride + kvh * hd;
            s = 0.0;
            for (uint d = 0; d < hd; d++) s += qs[d] * k[kb + d];
            s *= p.scale;
        }
        float m_new = max(m, wg_max(s));
        float e = i < n_vis ? exp(s - m_new) : 0.0;
        ps[tid] = e;
        float corr = exp(m - m_new);
        l = l * corr + wg_sum(e); // its barriers also publish ps
        m = m_new;
        uint n_c = min(WG, n_vis - c0), row_c0 = (row_lo + c0) % p.cap;
        [[unroll]] for (uint j = 0; j < ND; j++) {
            uint d = tid + j * WG;
            if (d >= hd) break;
            float a = acc[j] * corr;
            uint vd = p.v_off + kvh * hd + d, row = row_c0;
            for (uint i2 = 0; i2 < n_c; i2++) {
                a += ps[i2] * v[vd + row * p.v_stride];
                row = row + 1 == p.cap ? 0 : row + 1; // the ring wraps to row 0
            }
            acc[j] = a;
        }
        barrier(); // ps is rewritten by the next positions
    }
    float inv = 1.0 / l;
    [[unroll]] for (uint j = 0; j < ND; j++) {
        uint d = tid + j * WG;
        if (d < hd) o[p.o_off + t * p.o_stride + h * hd + d] = acc[j] * inv;
    }
}
