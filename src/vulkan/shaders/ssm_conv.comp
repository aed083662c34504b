#version 450
// ssm_conv.comp: the causal depthwise convolution of a gated delta-net layer, then SiLU
// (backend.h: ssm_conv). The inputs form one sequence u = 0 .. K-2 + n: the state's K-1
// rows (the inputs before this batch; zeros where fresh, and then never read), then
// x's n rows, so out[t][c] = silu(sum_j w[c][j] u[t + j][c]).
//
// One invocation per channel and chunk of `chunk` positions (workgroups: channels / WG
// in x, chunks in y). mode bit 0 computes the outputs, bit 1 replaces the state by the
// last K-1 inputs. The state must not change while another workgroup may still read
// it, so ops.c sets both bits only where one chunk covers the batch (each channel then
// belongs to one invocation, which reads all it needs before it writes) and otherwise
// dispatches the state's update after the outputs, as one chunk.

layout(constant_id = 0) const uint WG = 256;
layout(local_size_x_id = 0) in;

const uint MAX_K1 = 15; // ops.c refuses longer kernels

layout(push_constant) uniform Push { // vk_pc_ssm_conv in push.h
    uint n_ch, n_tok, k;
    uint x_off, x_stride;
    uint w_off, w_stride;
    uint s_off, s_stride;
    uint o_off, o_stride;
    uint fresh, chunk, mode;
} p;

layout(binding = 0, std430) readonly buffer X { float x[]; };
layout(binding = 1, std430) readonly buffer W { float w[]; };
layout(binding = 2, std430) buffer State { float st[]; };
layout(binding = 3, std430) writeonly buffer O { float o[]; };

float input_at(uint u, uint c) {
    const uint k1 = p.k - 1;
    if (u >= k1) return x[p.x_off + (u - k1) * p.x_stride + c];
    return p.fresh != 0 ? 0.0 : st[p.s_off + u * p.s_stride + c];
}

void main() {
    const uint c = gl_GlobalInvocationID.x;
    if (c >= p.n_ch) return;
    if ((p.mode & 1) != 0) {
        const uint t0 = gl_WorkGroupID.y * p.chunk, t1 = min(t0 + p.chunk, p.n_tok);
        const uint wr = p.w_off + c * p.w_stride;
        for (uint t = t0; t < t1; t++) {
            // the reference's order: oldest tap first; a fresh state adds zeros, which
            // leave the sum as skipping them does
            float sum = 0.0;
            for (uint j = 0; j < p.k; j++) sum += w[wr + j] * input_at(t + j, c);
            o[p.o_off + t * p.o_stride + c] = sum / (1.0 + exp(-sum));
        }
    }
    if ((p.mode & 2) != 0) {
        // gathered before any is written: with n < K-1 some come from the old state
        float tail[MAX_K1];
        for (uint j = 0; j + 1 < p.k; j++) tail[j] = input_at(p.n_tok + j, c);
        for (uint j = 0; j + 1 < p.k; j++) st[p.s_off + j * p.s_stride + c] = tail[j];
    }
}
