#version 450
// matmul_cm.comp: matmul.comp's product (out[t][row0 + o] (+)= x[t] . w[o] (+ bias), a
// prompt's batch of tokens) on cooperative matrices (VK_NV_cooperative_matrix): the
// matrix units of a GPU (NVIDIA's tensor cores) multiply 16 x 16 x 16 blocks of fp16
// with fp32 sums, several times the rate of its fp32 FMAs, which bound matmul.comp.
// Built per weight type; used where the device has the extension with that block shape
// and the tuning (al_model_params.vulkan.tune, the CLI's ANYLLM_VK_TUNE) asks for it
// with `coopmat=1` (pipelines.c).
//
// A workgroup computes BM weight rows x BN tokens with four subgroups of 32, each a
// quarter of the tile: CM x CN blocks of 16 x 16 (CM = BM / 32, CN = BN / 32). Per step
// of BK inputs the invocations dequantize the weight tile and convert the token tile
// to fp16 in shared memory (k contiguous in rows of RS = BK + 8: the 8 halves of
// padding spread the 16 rows a block load reads over the banks, where rows of 64 bytes
// put every other row in the same ones), then each subgroup multiplies its blocks.
// At the end each block goes through a small staging area of its subgroup
// to the output, so that edges, the bias and `accumulate` are handled per element as
// in matmul.comp, and the staging stays 4 KiB whatever the tile.
//
// The products differ from matmul.comp's by the fp16 rounding of both inputs (a
// relative 2^-11 each) and by the order of the sums within a block.
//
// EMULATE builds the same tiles, offsets and strides with plain arithmetic in place of
// the cooperative-matrix calls (the EMULATE branches below; vulkan.tune `coopmat=2`),
// so that the tiling is tested on devices without the extension; only the calls
// themselves are left to a device that has it.

#extension GL_EXT_control_flow_attributes : require
#ifndef EMULATE
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#endif
#define W_BINDING 1
#include "dequant.glsl"

// four subgroups of 32 (pipelines.c takes this shader only where subgroups have 32
// invocations; the emulation counts its own groups of 32)
layout(local_size_x = 128) in;
#define WG 128
layout(constant_id = 0) const uint BM = 64; // multiples of 32 (pipelines.c checks)
layout(constant_id = 1) const uint BN = 64;
const uint CM = BM / 32, CN = BN / 32;
#define BK 32
#define RS (BK + 8) // a shared row: 80 bytes, a multiple of the 16 the loads need
#include "matmul_tile.glsl"

// Inputs beyond fp16's range are clamped to its largest finite value: a product then
// errs, where an infinity would have turned the whole output into NaN.
#define FP16_MAX 65504.0
#ifdef EMULATE
shared float As[BM * RS]; // values rounded to fp16
shared float Bs[BN * RS];
#define F16(v) unpackHalf2x16(packHalf2x16(vec2(clamp(v, -FP16_MAX, FP16_MAX), 0.0))).x
#else
shared float16_t As[BM * RS]; // [row][k]
shared float16_t Bs[BN * RS]; // [token][k]
#define F16(v) float16_t(clamp(v, -FP16_MAX, FP16_MAX))
#define HALF16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define FLOAT16 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#endif
shared float Cs[4 * 256]; // a 16 x 16 block of sums per subgroup, on its way out

// where a subgroup's blocks lie: A block i (16 rows x 16 inputs from kk, row-major), B
// block j (16 inputs x 16 tokens, each token's inputs contiguous: column-major), and
// the staging of subgroup g (each token's 16 rows contiguous: column-major)
uint off_a(uint sm, uint i, uint kk) { return (sm + 16 * i) * RS + kk; }
uint off_b(uint sn, uint j, uint kk) { return (sn + 16 * j) * RS + kk; }
uint off_c(uint g) { return g * 256; }

#ifdef EMULATE
// A group of 32's blocks of sums, each 16 x 16 row-major: lane l holds elements
// l + 32 t of block q in acc[8 q + t] (main). Element (r, c) of a matrix at off, as the
// cooperative-matrix loads and stores place it:
uint emu_at(uint off, uint stride, bool col_major, uint r, uint c) {
    return off + (col_major ? c * stride + r : r * stride + c);
}
#endif

void main() {
    uint tid = gl_LocalInvocationID.x;
#ifdef EMULATE
    uint sg = tid / 32, lane = tid % 32;
    float acc[CM * CN * 8];
    for (uint e = 0; e < CM * CN * 8; e++) acc[e] = 0.0;
#else
    uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    FLOAT16 acc[CM][CN];
    [[unroll]] for (uint i = 0; i < CM; i++)
        [[unroll]] for (uint j = 0; j < CN; j++) acc[i][j] = FLOAT16(0.0);
#endif
    uint m0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    uint sm = (sg % 2) * (BM / 2), sn = (sg / 2) * (BN / 2); // the subgroup's quarter

    for (uint k0 = 0; k0 < p.n_in; k0 += BK) {
        // the weight tile and the token tile, four inputs of a row or token at a time:
        // group g's are inputs 4 (g % (BK / 4)) .. + 3 of row (token) g / (BK / 4)
        for (uint g = tid; g < BM * BK / 4; g += WG) {
            vec4 v = weight_group(m0, k0, g);
            uint e = g / (BK / 4) * RS + g % (BK / 4) * 4;
            [[unroll]] for (uint c = 0; c < 4; c++) As[e + c] = F16(v[c]);
        }
        for (uint g = tid; g < BN * BK / 4; g += WG) {
            vec4 v = token_group(n0, k0, g);
            uint e = g / (BK / 4) * RS + g % (BK / 4) * 4;
            [[unroll]] for (uint c = 0; c < 4; c++) Bs[e + c] = F16(v[c]);
        }
        barrier();
        [[unroll]] for (uint kk = 0; kk < BK; kk += 16) {
#ifdef EMULATE
            // block (i, j) += A block i * B block j, with coopMatLoadNV's arguments below
            for (uint i = 0; i < CM; i++)
                for (uint j = 0; j < CN; j++)
                    for (uint t = 0; t < 8; t++) {
                        uint r = (lane + 32 * t) / 16, c = (lane + 32 * t) % 16;
                        for (uint k = 0; k < 16; k++)
                            acc[8 * (i * CN + j) + t] +=
                                As[emu_at(off_a(sm, i, kk), RS, false, r, k)] *
                                Bs[emu_at(off_b(sn, j, kk), RS, true, k, c)];
                    }
#else
            HALF16 a[CM], b[CN];
            [[unroll]] for (uint i = 0; i < CM; i++)
                coopMatLoadNV(a[i], As, off_a(sm, i, kk), RS, false);
            [[unroll]] for (uint j = 0; j < CN; j++)
                coopMatLoadNV(b[j], Bs, off_b(sn, j, kk), RS, true);
            [[unroll]] for (uint i = 0; i < CM; i++)
                [[unroll]] for (uint j = 0; j < CN; j++)
                    acc[i][j] = coopMatMulAddNV(a[i], b[j], acc[i][j]);
#endif
        }
        barrier();
    }

    // block by block (every subgroup the same count, so the barriers are uniform)
    [[unroll]] for (uint i = 0; i < CM; i++)
        [[unroll]] for (uint j = 0; j < CN; j++) {
#ifdef EMULATE
            for (uint t = 0; t < 8; t++) // as coopMatStoreNV below
                Cs[emu_at(off_c(sg), 16, true, (lane + 32 * t) / 16, (lane + 32 * t) % 16)] =
                    acc[8 * (i * CN + j) + t];
#else
            coopMatStoreNV(acc[i][j], Cs, off_c(sg), 16, true);
#endif
            barrier();
            for (uint e = lane; e < 256; e += 32) // e: row e % 16 of token e / 16
                store_out(m0 + sm + 16 * i + e % 16, n0 + sn + 16 * j + e / 16,
                          Cs[off_c(sg) + e]);
            barrier();
        }
}
