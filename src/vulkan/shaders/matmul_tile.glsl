// matmul_tile.glsl: what the two prompt matmuls (matmul.comp, matmul_cm.comp) share:
// vk_pc_matmul, the input, bias and output bindings, the reads of a step's tiles and
// the store of an output. Included after dequant.glsl, with BK (inputs per step)
// defined.

layout(push_constant) uniform Push { // vk_pc_matmul in push.h
    uint n_in, n_out, n_tok;
    uint x_off, x_stride;
    uint w_off, w_row_bytes;
    uint b_off, has_bias;
    uint o_off, o_stride;
    uint row0;
    uint accumulate, u_off, act; // u_off, act and the norm's fields: read only by
    uint nw_off, has_norm; float eps; // matvec.comp's builds (its copy of this block)
} p;

layout(binding = 0, std430) readonly buffer X { float x[]; };
layout(binding = 2, std430) readonly buffer B { float bias[]; };
layout(binding = 3, std430) buffer O { float o[]; };

// Group g of a step's weight tile: inputs k0 + 4 (g % (BK / 4)) .. + 3 of weight row
// m0 + g / (BK / 4); zeros past the edges.
vec4 weight_group(uint m0, uint k0, uint g) {
    uint i4 = k0 / 4 + g % (BK / 4), row = m0 + g / (BK / 4);
    if (row >= p.n_out || i4 >= (p.n_in + 3) / 4) return vec4(0.0);
    return dq4_tail(p.w_off + row * p.w_row_bytes, i4, p.n_in);
}

// The same inputs of token n0 + g / (BK / 4).
vec4 token_group(uint n0, uint k0, uint g) {
    uint tok = n0 + g / (BK / 4), k = k0 + (g % (BK / 4)) * 4;
    uint xb = p.x_off + tok * p.x_stride + k;
    vec4 v = vec4(0.0);
    [[unroll]] for (uint c = 0; c < 4; c++)
        if (tok < p.n_tok && k + c < p.n_in) v[c] = x[xb + c];
    return v;
}

// out[tok][row0 + row] (+)= s + bias, for an output inside the matrix.
void store_out(uint row, uint tok, float s) {
    if (row >= p.n_out || tok >= p.n_tok) return;
    uint col = p.row0 + row, oi = p.o_off + tok * p.o_stride + col;
    float v = s + (p.has_bias != 0 ? bias[p.b_off + col] : 0.0);
    o[oi] = p.accumulate != 0 ? o[oi] + v : v;
}
