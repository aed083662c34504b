#version 450
// attention.comp: out[t][h] = softmax(q[t][h] . K^T * scale) V over the positions
// query t (at position n_past + t) sees: 0 .. n_past + t, or with window > 0 only the
// last `window` of them; kv head h / (n_head / n_head_kv). One workgroup per
// (head, token). Positions are taken WG at a time: each invocation scores one
// position, and the running maximum and sum (online softmax) rescale what was
// accumulated before, so no buffer grows with the context.
//
// The workgroup is NTEAM teams of TS invocations, each team an online softmax of its
// own over every NTEAM-th slice of TS positions, merged at the end. Lane i of a team
// accumulates output dimensions i, i + TS, ... (at most ND of them) over its TS
// positions of a step. Why teams: a decoded token has only n_head workgroups; with one
// softmax per workgroup, 64 lanes summed the values of every position one after the
// other, and on an H200 attention over 2048 positions took 0.45 ms a layer. Teams cut
// that chain by NTEAM, with the reductions kept inside each team.
//
// The caches are rings of cap rows (backend.h: al_attn_shape): position j is row
// j % cap. ops.c wrote this batch's keys and values before, and checked that the
// visible positions of every query are still in the ring.
//
// The ROWS build (attention_rows: decoding, al_eval_multi) takes one token of each
// of n_tok sequences: row t attends over its own caches, buffer t of the arrays kc
// and vc, and its position, ring size and cache offsets come from the table tb
// (binding 5, six uints per row). With rope_half > 0 the workgroup first rotates its
// query head and the new key as rope.comp does (cos and sin of row t's pairs at cs,
// binding 8), in shared memory: q and k stay as they were. The new key and value are
// taken from the inputs rather than the caches, and the first query head of each kv
// head writes them into the caches: no copy before the dispatch, and no other
// workgroup reads that cache row (the new position comes from the inputs; the one it
// replaces in a ring is out of sight).
//
// The KV builds (-DKV, attention_kv and attention_rows_kv) read typed caches (kv.glsl:
// f16, q8_0, q4_0, or f32, each side its own type, given in push constants) as 16-bit
// words, with cache offsets and strides in bytes. ops.c has written the batch's rows
// into them before (kv_write.comp), and the ROWS build rotated by rope before (its
// rope_half is 0): every visible position is read from the caches. Where the keys are
// stored rotated (AL_LAYOUT_HADAMARD, rot_mask bit 0) the query head is rotated the
// same way in shared memory first, q.k = (H q).(H k); where the values are (bit 1),
// the output head is rotated back before it is stored, sum p H v = H sum p v.
//
// Sinks (gpt-oss, has_sink = 1): head h's logit sinks[h] joins the denominator with
// no value. It is taken as a position already seen: the running maximum starts at it
// and the running sum at e^(sink - sink) = 1 (acc stays 0), so the rescaling below
// handles it like any score. It is not multiplied by scale. Without sinks the
// binding is some other buffer, never read.

#extension GL_EXT_control_flow_attributes : require
#include "reduce.glsl"
#ifdef KV
#extension GL_EXT_shader_16bit_storage : require
#include "kv.glsl"
#endif

layout(constant_id = 1) const uint MAX_HD = 256; // head_dim at most; ops.c checks
const uint TS = WG < 64u ? WG : 64u; // a team's invocations (WG is a power of two)
const uint NTEAM = WG / TS;
const uint ND = (MAX_HD + TS - 1) / TS;

#ifdef ROWS
#define VK_SEQ 8 // push.h: the rows (sequences) of one dispatch
layout(push_constant) uniform Push { // vk_pc_attention_rows in push.h
    uint n_head, n_head_kv, head_dim, n_tok;
    uint q_off, q_stride;
    uint k_off, k_stride;
    uint v_off, v_stride;
    uint o_off, o_stride;
    float scale;
    uint window;
    uint s_off, has_sink;
    uint t_off;            // the table's first row, in uints
    uint rope_half, neox;  // rope: pairs per head (0: no rope), neox pairing
    uint cs_off;           // rope: row 0's cos and sin, in floats
#ifdef KV
    uint k_type, v_type, rot_n, rot_mask; // vk_pc_kv in push.h
    float rot_scale;
#endif
} p;

layout(binding = 0, std430) readonly buffer Q { float q[]; };
layout(binding = 1, std430) readonly buffer K { float k[]; };  // the new keys, a row per token
layout(binding = 2, std430) readonly buffer V { float v[]; };
layout(binding = 3, std430) writeonly buffer O { float o[]; };
layout(binding = 4, std430) readonly buffer S { float sinks[]; };
// per row: position, ring rows, key cache offset and stride, value cache offset and stride
layout(binding = 5, std430) readonly buffer T { uint tb[]; };
#ifdef KV
layout(binding = 6, std430) readonly buffer KC { uint16_t d[]; } kc[VK_SEQ];
layout(binding = 7, std430) readonly buffer VC { uint16_t d[]; } vc[VK_SEQ];
#define KW(i) kc[gl_WorkGroupID.y].d[i]
#define VW(i) vc[gl_WorkGroupID.y].d[i]
#else
layout(binding = 6, std430) buffer KC { float d[]; } kc[VK_SEQ];
layout(binding = 7, std430) buffer VC { float d[]; } vc[VK_SEQ];
#endif
layout(binding = 8, std430) readonly buffer CS { vec2 cs[]; };
shared float ks[MAX_HD]; // the new key, rotated
#define KEY(i) kc[t].d[i]
#define VAL(i) vc[t].d[i]
#else
layout(push_constant) uniform Push { // vk_pc_attention in push.h
    uint n_head, n_head_kv, head_dim, n_past, n_tok;
    uint q_off, q_stride;
    uint k_off, k_stride;
    uint v_off, v_stride;
    uint o_off, o_stride;
    float scale;
    uint cap, window;
    uint s_off, has_sink;
#ifdef KV
    uint k_type, v_type, rot_n, rot_mask; // vk_pc_kv in push.h
    float rot_scale;
#endif
} p;

layout(binding = 0, std430) readonly buffer Q { float q[]; };
#ifdef KV
layout(binding = 1, std430) readonly buffer K { uint16_t k16[]; };
layout(binding = 2, std430) readonly buffer V { uint16_t v16[]; };
#define KW(i) k16[i]
#define VW(i) v16[i]
#else
layout(binding = 1, std430) readonly buffer K { float k[]; };
layout(binding = 2, std430) readonly buffer V { float v[]; };
#endif
layout(binding = 3, std430) writeonly buffer O { float o[]; };
layout(binding = 4, std430) readonly buffer S { float sinks[]; }; // [n_head]
#define KEY(i) k[i]
#define VAL(i) v[i]
#endif

shared float qs[MAX_HD];
#ifdef KV
KV_DECODE(key_at, KW)
KV_DECODE(val_at, VW)
shared float os[MAX_HD]; // the output head, rotated back before it is stored
#endif
shared float ps[WG]; // exp(score - max) of the current positions
shared float tm[NTEAM], tl[NTEAM], tacc[NTEAM * MAX_HD]; // each team's softmax, merged

const float NEG = -1e30; // not -inf: -inf - -inf would be NaN

// The sum (or maximum) of v over the team of invocation tid, lane its index in the
// team: a shared-memory tree, since subgroups need not line up with teams. Every
// invocation of the workgroup calls it (barriers).
float team_reduce(float v, uint tid, uint lane, bool is_max) {
    red_[tid] = v;
    barrier();
    for (uint s = TS / 2; s > 0; s >>= 1) {
        if (lane < s) {
            float o = red_[tid + s];
            red_[tid] = is_max ? max(red_[tid], o) : red_[tid] + o;
        }
        barrier();
    }
    float r = red_[tid - lane];
    barrier();
    return r;
}

void main() {
    uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
    uint group = p.n_head / p.n_head_kv, kvh = h / group, hd = p.head_dim;
#if defined(ROWS) && defined(KV)
    uint tr = p.t_off + 6 * t, pos = tb[tr], cap = tb[tr + 1];
    uint k_off = tb[tr + 2], k_stride = tb[tr + 3], v_off = tb[tr + 4], v_stride = tb[tr + 5];
#elif defined(ROWS)
    uint tr = p.t_off + 6 * t, pos = tb[tr], cap = tb[tr + 1];
    uint k_off = tb[tr + 2], k_stride = tb[tr + 3], v_off = tb[tr + 4], v_stride = tb[tr + 5];
    uint kn = p.k_off + t * p.k_stride + kvh * hd, vn = p.v_off + t * p.v_stride + kvh * hd;
    for (uint d = tid; d < hd; d += WG) {
        qs[d] = q[p.q_off + t * p.q_stride + h * hd + d];
        ks[d] = k[kn + d];
    }
    barrier();
    if (p.rope_half != 0) {
        for (uint i = tid; i < p.rope_half; i += WG) {
            vec2 c = cs[p.cs_off / 2 + t * p.rope_half + i];
            uint a = p.neox != 0 ? i : 2 * i, b = p.neox != 0 ? i + p.rope_half : 2 * i + 1;
            float x0 = qs[a], x1 = qs[b], y0 = ks[a], y1 = ks[b];
            qs[a] = x0 * c.x - x1 * c.y;
            qs[b] = x0 * c.y + x1 * c.x;
            ks[a] = y0 * c.x - y1 * c.y;
            ks[b] = y0 * c.y + y1 * c.x;
        }
        barrier();
    }
    if (h % group == 0) // this kv head's new row, into the caches
        for (uint d = tid; d < hd; d += WG) {
            kc[t].d[k_off + (pos % cap) * k_stride + kvh * hd + d] = ks[d];
            vc[t].d[v_off + (pos % cap) * v_stride + kvh * hd + d] = v[vn + d];
        }
#else
    uint pos = p.n_past + t, cap = p.cap;
    uint k_off = p.k_off, k_stride = p.k_stride, v_off = p.v_off, v_stride = p.v_stride;
#endif
    uint lo = p.window > 0 && pos >= p.window ? pos + 1 - p.window : 0;
    uint n_vis = pos + 1 - lo, row_lo = lo % cap; // visible positions lo .. pos
#if defined(ROWS) && !defined(KV)
    uint n_cached = n_vis - 1; // the last one is the new row
#else
    uint n_cached = n_vis;
    for (uint d = tid; d < hd; d += WG) qs[d] = q[p.q_off + t * p.q_stride + h * hd + d];
    barrier();
#endif
#ifdef KV
    if ((p.rot_mask & 1u) != 0u) KV_HADAMARD(qs, hd, p.rot_n, p.rot_scale)
    uint k_hb = kv_head_bytes(p.k_type, hd), v_hb = kv_head_bytes(p.v_type, hd);
#endif

    // max with NEG: m stays finite, as with the scores, even for a sink of -inf; the
    // sink is team 0's, as a position it has seen
    uint team = tid / TS, lane = tid % TS;
    bool sink = p.has_sink != 0 && team == 0;
    float m = sink ? max(sinks[p.s_off + h], NEG) : NEG;
    float l = sink ? 1.0 : 0.0, acc[ND];
    [[unroll]] for (uint j = 0; j < ND; j++) acc[j] = 0.0;
    for (uint c0 = 0; c0 < n_cached; c0 += WG) {
        uint i = c0 + tid; // this invocation's position is lo + i
        float s = NEG;
        if (i < n_cached) {
            s = 0.0;
#ifdef KV
            uint kb = k_off + ((row_lo + i) % cap) * k_stride + kvh * k_hb;
            for (uint d = 0; d < hd; d++) s += qs[d] * key_at(p.k_type, kb, d);
#else
            uint kb = k_off + ((row_lo + i) % cap) * k_stride + kvh * hd;
            for (uint d = 0; d < hd; d++) s += qs[d] * KEY(kb + d);
#endif
            s *= p.scale;
        }
        float m_new = max(m, team_reduce(s, tid, lane, true));
        float e = i < n_cached ? exp(s - m_new) : 0.0;
        ps[tid] = e;
        float corr = exp(m - m_new);
        l = l * corr + team_reduce(e, tid, lane, false); // its barriers also publish ps
        m = m_new;
        uint t0 = c0 + team * TS; // the team's first position of this step
        uint n_c = t0 < n_cached ? min(TS, n_cached - t0) : 0, row_c0 = (row_lo + t0) % cap;
        [[unroll]] for (uint j = 0; j < ND; j++) {
            uint d = lane + j * TS;
            if (d >= hd) break;
            float a = acc[j] * corr;
            uint row = row_c0;
#ifdef KV
            uint vd = v_off + kvh * v_hb;
#define VALUE val_at(p.v_type, vd + row * v_stride, d)
#else
            uint vd = v_off + kvh * hd + d;
#define VALUE VAL(vd + row * v_stride)
#endif
            for (uint i2 = 0; i2 < n_c; i2++) {
                a += ps[team * TS + i2] * VALUE;
                row = row + 1 == cap ? 0 : row + 1; // the ring wraps to row 0
            }
            acc[j] = a;
        }
        barrier(); // ps is rewritten by the next positions
    }
    // merge the teams into team 0: rescale each to the largest maximum
    if (lane == 0) tm[team] = m, tl[team] = l;
    [[unroll]] for (uint j = 0; j < ND; j++)
        if (lane + j * TS < hd) tacc[team * MAX_HD + lane + j * TS] = acc[j];
    barrier();
#ifndef KV
    if (team != 0) return; // no barrier follows
#else
    if (team == 0) { // the others wait at the barrier before the rotation
#endif
    m = tm[0];
    for (uint g = 1; g < NTEAM; g++) m = max(m, tm[g]);
    l = 0.0;
    [[unroll]] for (uint j = 0; j < ND; j++) acc[j] = 0.0;
    for (uint g = 0; g < NTEAM; g++) {
        float f = exp(tm[g] - m);
        l += tl[g] * f;
        [[unroll]] for (uint j = 0; j < ND; j++)
            if (lane + j * TS < hd) acc[j] += tacc[g * MAX_HD + lane + j * TS] * f;
    }
#if defined(ROWS) && !defined(KV)
    { // the new position, from the inputs: every lane scores it (hd products)
        float s = 0.0;
        for (uint d = 0; d < hd; d++) s += qs[d] * ks[d];
        s *= p.scale;
        float m_new = max(m, s), corr = exp(m - m_new), e = exp(s - m_new);
        l = l * corr + e;
        [[unroll]] for (uint j = 0; j < ND; j++) {
            uint d = lane + j * TS;
            if (d < hd) acc[j] = acc[j] * corr + e * v[vn + d];
        }
    }
#endif
    float inv = 1.0 / l;
#ifdef KV
    [[unroll]] for (uint j = 0; j < ND; j++) {
        uint d = lane + j * TS;
        if (d < hd) os[d] = acc[j] * inv;
    }
    } // team 0
    barrier();
    if ((p.rot_mask & 2u) != 0u) KV_HADAMARD(os, hd, p.rot_n, p.rot_scale)
    for (uint d = tid; d < hd; d += WG) o[p.o_off + t * p.o_stride + h * hd + d] = os[d];
#else
    [[unroll]] for (uint j = 0; j < ND; j++) {
        uint d = lane + j * TS;
        if (d < hd) o[p.o_off + t * p.o_stride + h * hd + d] = acc[j] * inv;
    }
#endif
}
