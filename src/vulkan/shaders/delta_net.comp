#version 450
// delta_net.comp: the gated delta rule of one recurrent layer over the n_tok positions
// of one sequence (backend.h: delta_net, al_delta_shape). The positions run one after
// another inside the shader, with the state read once, held in registers across them
// and written once: a dispatch per layer, however long the batch.
//
// Per value head h the state S is head_dim x head_dim, row r for value dimension r.
// Rows do not interact: per position, row r needs S_r . k, then its own update, then
// S_r . q, and q, k, the decay and beta are the head's. So the rows of a head spread
// over workgroups (x: the value head, y: blocks of WG / LANES rows), and each row
// belongs to LANES adjacent lanes of a subgroup: lane j holds the elements
// i = j, j + LANES, ... (E of them; those at i >= head_dim stay zero), so that a row's
// lanes read consecutive floats. Each sum over i (the squares of q and of k for their
// l2 norms, S_r . k, S_r . q) is a sum per lane completed by a butterfly of subgroup
// shuffles, which leaves the same bits in every lane (each step adds two equal pairs,
// in either order). The build without USE_SHUFFLE has LANES = 1: a lane owns a row.
// Every row normalizes q and k itself: head_dim / LANES products, where sharing them
// would take shared memory and barriers at each position.
//
// E = DMAX / LANES is set with DMAX, the head size class of the pipeline (recurrent.c).

#extension GL_EXT_control_flow_attributes : require
#ifdef USE_SHUFFLE
#extension GL_KHR_shader_subgroup_shuffle : require
#endif

layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint LANES = 1;
layout(constant_id = 2) const uint E = 128;
layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push { // vk_pc_delta_net in push.h
    uint n_tok, head_dim, n_k_heads, n_v_heads, grouped, fresh;
    uint qkv_off, qkv_stride;
    uint al_off, al_stride;
    uint be_off, be_stride;
    uint dt_off, a_off;
    uint s_off, s_stride;
    uint o_off, o_stride;
    float eps, q_scale;
} p;

layout(binding = 0, std430) readonly buffer QKV { float qkv[]; };
layout(binding = 1, std430) readonly buffer Alpha { float alpha[]; };
layout(binding = 2, std430) readonly buffer Beta { float beta[]; };
layout(binding = 3, std430) readonly buffer Dt { float dt[]; };
layout(binding = 4, std430) readonly buffer A { float a_log[]; };
layout(binding = 5, std430) buffer State { float st[]; };
layout(binding = 6, std430) writeonly buffer Out { float o[]; };

// The sum of v over the lanes of a row.
float row_sum(float v) {
#ifdef USE_SHUFFLE
    [[unroll]] for (uint s = 1; s < LANES; s <<= 1) v += subgroupShuffleXor(v, s);
#endif
    return v;
}

// log(1 + y), which GLSL lacks, without losing y where 1 + y rounds to 1: there
// softplus is e^x itself, and a decay e^(softplus a) of exactly 1 would drift from
// the reference's log1pf a little at every position.
float log1p_(float y) {
    precise float u = 1.0 + y;
    precise float du = u - 1.0;
    return u == 1.0 ? y : log(u) * (y / du);
}

void main() {
    const uint h = gl_WorkGroupID.x, d = p.head_dim;
#ifdef USE_SHUFFLE
    const uint lane = gl_SubgroupInvocationID % LANES;
    const uint row_in = (gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID) / LANES;
#else
    const uint lane = 0, row_in = gl_LocalInvocationID.x;
#endif
    const uint r = gl_WorkGroupID.y * (WG / LANES) + row_in;
    // a row past the head repeats the last one and writes nothing: its lanes still take
    // part in the shuffles
    const bool live = r < d;
    const uint rr = live ? r : d - 1;
    const uint kh = p.grouped != 0 ? h / (p.n_v_heads / p.n_k_heads) : h % p.n_k_heads;
    const uint srow = p.s_off + h * p.s_stride + rr * d;
    float s[E];
    [[unroll]] for (uint m = 0; m < E; m++) {
        const uint i = lane + m * LANES;
        s[m] = p.fresh == 0 && i < d ? st[srow + i] : 0.0;
    }
    const float dtb = dt[p.dt_off + h], ah = a_log[p.a_off + h];
    for (uint t = 0; t < p.n_tok; t++) {
        const uint row = p.qkv_off + t * p.qkv_stride;
        const uint qb = row + kh * d, kb = row + (p.n_k_heads + kh) * d;
        float q[E], k[E];
        float qq = 0.0, kk = 0.0;
        [[unroll]] for (uint m = 0; m < E; m++) {
            const uint i = lane + m * LANES;
            q[m] = i < d ? qkv[qb + i] : 0.0;
            k[m] = i < d ? qkv[kb + i] : 0.0;
            qq += q[m] * q[m];
            kk += k[m] * k[m];
        }
        // the reference's l2 norm: x * (1 / sqrt(sum x^2 + eps)), q's factor times scale
        const float fq = inversesqrt(row_sum(qq) + p.eps) * p.q_scale;
        const float fk = inversesqrt(row_sum(kk) + p.eps);
        const float v = qkv[row + (2 * p.n_k_heads + h) * d + rr];
        const float x = alpha[p.al_off + t * p.al_stride + h] + dtb;
        const float softplus = x > 20.0 ? x : log1p_(exp(x));
        const float decay = exp(softplus * ah);
        const float b = 1.0 / (1.0 + exp(-beta[p.be_off + t * p.be_stride + h]));
        float sk = 0.0;
        [[unroll]] for (uint m = 0; m < E; m++) {
            k[m] *= fk;
            s[m] *= decay;
            sk += s[m] * k[m];
        }
        const float delta = (v - row_sum(sk)) * b;
        float sq = 0.0;
        [[unroll]] for (uint m = 0; m < E; m++) {
            s[m] += delta * k[m];
            sq += s[m] * (q[m] * fq);
        }
        sq = row_sum(sq);
        if (live && lane == 0) o[p.o_off + t * p.o_stride + h * d + r] = sq;
    }
    if (!live) return;
    [[unroll]] for (uint m = 0; m < E; m++) {
        const uint i = lane + m * LANES;
        if (i < d) st[srow + i] = s[m];
    }
}
