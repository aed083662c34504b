/* push.h: the push-constant block of every compute shader, defined once here.
 *
 * Each struct is mirrored field by field, in the same order, by the `push_constant`
 * block of the shader named in its comment; the _Static_asserts pin the sizes so a
 * field added on one side only is caught at build time on this side and by the
 * validation layer on the other. All fields are 32-bit, so C and std430 agree on
 * the layout without padding.
 *
 * Units: `*_off` is where a tensor starts inside its bound range and `*_stride` the
 * distance between its rows, both in floats for f32 tensors and in bytes for weights
 * (which are read as 16-bit words, see shaders/dequant.glsl).
 */
#ifndef AL_VK_PUSH_H
#define AL_VK_PUSH_H

#include <stdint.h>

/* add.comp, silu_mul.comp, gelu_mul.comp: x[r][c] op= y[r][c]. */
typedef struct vk_pc_binary {
    uint32_t n_cols, n_rows;
    uint32_t x_off, x_stride;
    uint32_t y_off, y_stride;
} vk_pc_binary;
_Static_assert(sizeof(vk_pc_binary) == 24, "mirror of add.comp / silu_mul.comp / gelu_mul.comp");

/* swiglu_oai.comp: g[r][c] = swiglu_oai(g[r][c], u[r][c]) with gpt-oss's alpha and
 * limit (backend.h); the tensors as for the binary ops. */
typedef struct vk_pc_swiglu_oai {
    vk_pc_binary b;
    float alpha, limit;
} vk_pc_swiglu_oai;
_Static_assert(sizeof(vk_pc_swiglu_oai) == 32, "mirror of swiglu_oai.comp");

/* add_rows.comp: x[ids[i]] += w[i] * y[i]; the ids and then the weights are uints at
 * iw_off (in uints) of the upload binding. */
typedef struct vk_pc_add_rows {
    uint32_t n_cols, n;
    uint32_t x_off, x_stride;
    uint32_t y_off, y_stride;
    uint32_t iw_off;
} vk_pc_add_rows;
_Static_assert(sizeof(vk_pc_add_rows) == 28, "mirror of add_rows.comp");

/* scale.comp: x[r][c] *= s. */
typedef struct vk_pc_scale {
    uint32_t n_cols, n_rows;
    uint32_t x_off, x_stride;
    float s;
} vk_pc_scale;
_Static_assert(sizeof(vk_pc_scale) == 20, "mirror of scale.comp");

/* rms_norm.comp: out[r] = x[r] / rms(x[r]) * w; rows numbered over a 2-D grid. */
typedef struct vk_pc_rms_norm {
    uint32_t n_cols, n_rows;
    uint32_t x_off, x_stride;
    uint32_t w_off;
    uint32_t o_off, o_stride;
    float eps;
} vk_pc_rms_norm;
_Static_assert(sizeof(vk_pc_rms_norm) == 32, "mirror of rms_norm.comp");

/* get_rows.comp: out[i] = table[ids[i]] for the ids in [row0, row1), the table rows
 * that this dispatch's binding covers (a table larger than one binding takes
 * several dispatches). */
typedef struct vk_pc_get_rows {
    uint32_t n_cols, n_ids;
    uint32_t t_off, t_row_bytes; /* bytes */
    uint32_t row0, row1;
    uint32_t o_off, o_stride;
} vk_pc_get_rows;
_Static_assert(sizeof(vk_pc_get_rows) == 32, "mirror of get_rows.comp");

/* matvec.comp, matmul.comp: out[t][row0 + o] = x[t] . w[o] (+ bias[row0 + o]) for the
 * n_out weight rows of this dispatch's binding; accumulate: out += that (matmul_add).
 * matvec.comp's GLU build: out = act(x . w[o]) * (x . u[o]), u's rows at u_off bytes
 * of binding 4, with w's row_bytes; act 0 is SiLU, 1 GELU (backend.h al_glu); with
 * has_norm, x is rms_norm(x) with the f32 weight at nw_off of binding 5 and eps. */
typedef struct vk_pc_matmul {
    uint32_t n_in, n_out, n_tok;
    uint32_t x_off, x_stride;
    uint32_t w_off, w_row_bytes; /* bytes */
    uint32_t b_off, has_bias;
    uint32_t o_off, o_stride;
    uint32_t row0;
    uint32_t accumulate;
    uint32_t u_off, act;         /* bytes; al_glu */
    uint32_t nw_off, has_norm;   /* GLU: the input norm's weight (floats), whether there is one */
    float eps;
} vk_pc_matmul;
_Static_assert(sizeof(vk_pc_matmul) == 72, "mirror of matvec.comp / matmul.comp");

/* matmul_rows.comp (CPU devices): one slice [k0, k0 + n_k) of the inputs of n_tok <= NT
 * tokens, packed into a uniform buffer with xs_stride vec4s per token; has_bias is set
 * for the first slice only, accumulate for the others and, with matmul_add, for the
 * first too. The GLU build: u_off and act as in vk_pc_matmul, one slice. */
typedef struct vk_pc_matmul_rows {
    uint32_t n_k, n_out, n_tok;
    uint32_t k0, xs_stride;
    uint32_t w_off, w_row_bytes; /* bytes */
    uint32_t b_off, has_bias, accumulate;
    uint32_t o_off, o_stride;
    uint32_t row0;
    uint32_t u_off, act;         /* bytes; al_glu */
} vk_pc_matmul_rows;
_Static_assert(sizeof(vk_pc_matmul_rows) == 60, "mirror of matmul_rows.comp");

/* matvec.comp's MULTI build (matmul_multi): out_i[t][o] = x[t] . w_i[o] (+ bias_i[o])
 * for the n_w weights, bias and output i being buffer i of bindings 1, 2 and 3 (arrays
 * of 3); bit i of has_bias: weight i has one. One type and row length for all. With
 * has_norm, x is rms_norm(x) with the f32 weight at nw_off of binding 4 and eps. */
typedef struct vk_pc_matmul_multi {
    uint32_t n_in, n_tok;
    uint32_t x_off, x_stride;
    uint32_t w_row_bytes;        /* bytes */
    uint32_t n_w, has_bias;
    uint32_t n_out[3], w_off[3]; /* w_off: bytes */
    uint32_t b_off[3], o_off[3], o_stride[3];
    uint32_t nw_off, has_norm;   /* floats */
    float eps;
} vk_pc_matmul_multi;
_Static_assert(sizeof(vk_pc_matmul_multi) == 100, "mirror of matvec.comp (MULTI)");

/* matmul_rows.comp's MULTI build: as vk_pc_matmul_multi, the inputs of n_tok <= NT
 * tokens packed into the uniform buffer as for vk_pc_matmul_rows, in one slice. */
typedef struct vk_pc_matmul_rows_multi {
    uint32_t n_k, n_tok;
    uint32_t xs_stride;
    uint32_t w_row_bytes;        /* bytes */
    uint32_t n_w, has_bias;
    uint32_t n_out[3], w_off[3]; /* w_off: bytes */
    uint32_t b_off[3], o_off[3], o_stride[3];
} vk_pc_matmul_rows_multi;
_Static_assert(sizeof(vk_pc_matmul_rows_multi) == 84, "mirror of matmul_rows.comp (MULTI)");

/* rope.comp: rotates pairs of each head with cos/sin from a table of [n_rows][half]
 * (cos, sin) pairs computed on the host in double precision: the n_head heads of x,
 * then the n_head_y heads of y (binding 2; rope_qk's k, else 0 heads). */
typedef struct vk_pc_rope {
    uint32_t n_rows, n_head, head_dim, half;
    uint32_t neox;
    uint32_t x_off, x_stride;
    uint32_t cs_off;
    uint32_t n_head_y, y_off, y_stride;
} vk_pc_rope;
_Static_assert(sizeof(vk_pc_rope) == 44, "mirror of rope.comp");

/* attention.comp: causal attention of n_tok queries, query t at position n_past + t
 * over positions 0 .. n_past + t (window 0) or its last `window` ones; position j is
 * row j % cap of the ring caches. scale multiplies q.k (the host resolves 0 to
 * 1 / sqrt(head_dim)). has_sink: sinks[s_off + h] is head h's sink logit (binding 4;
 * backend.h al_attn_shape.sinks), else binding 4 is a dummy never read. One
 * workgroup per (head, token). */
typedef struct vk_pc_attention {
    uint32_t n_head, n_head_kv, head_dim, n_past, n_tok;
    uint32_t q_off, q_stride;
    uint32_t k_off, k_stride;
    uint32_t v_off, v_stride;
    uint32_t o_off, o_stride;
    float scale;
    uint32_t cap, window;    /* rows of each cache; 0 = no window */
    uint32_t s_off, has_sink;
} vk_pc_attention;
_Static_assert(sizeof(vk_pc_attention) == 72, "mirror of attention.comp");
_Static_assert(sizeof(vk_pc_attention) <= 128, "the push-constant range every device offers");

/* attention.comp's ROWS build (attention_rows): one token of each of n_tok <= VK_SEQ
 * sequences, row t's caches buffer t of bindings 6 (keys) and 7 (values). Row t of q,
 * k (binding 1: the new keys), v (2) and out; the table (binding 5, from uint t_off)
 * gives row t's position, ring rows, and the offset and stride of both caches, in
 * floats; binding 8 the rope's cos and sin (as vk_pc_rope's), or a dummy. The rest as
 * vk_pc_attention. */
typedef struct vk_pc_attention_rows {
    uint32_t n_head, n_head_kv, head_dim, n_tok;
    uint32_t q_off, q_stride;
    uint32_t k_off, k_stride;
    uint32_t v_off, v_stride;
    uint32_t o_off, o_stride;
    float scale;
    uint32_t window;
    uint32_t s_off, has_sink;
    uint32_t t_off;
    uint32_t rope_half, neox; /* rope: pairs per head (0: q and k come rotated) */
    uint32_t cs_off;          /* rope: cos and sin of row 0's pairs (binding 8), in floats */
} vk_pc_attention_rows;
_Static_assert(sizeof(vk_pc_attention_rows) == 80, "mirror of attention.comp");

/* The KV builds of attention.comp (typed caches, kv.glsl) push vk_pc_attention or
 * vk_pc_attention_rows with cache offsets and strides in bytes, then this: each
 * cache's al_type, the Hadamard block rot_n and its scale 1 / sqrtf(rot_n), and which
 * caches are stored rotated (bit 0: keys, bit 1: values). */
typedef struct vk_pc_kv {
    uint32_t k_type, v_type, rot_n, rot_mask;
    float rot_scale;
} vk_pc_kv;
typedef struct vk_pc_attention_kv {
    vk_pc_attention a;
    vk_pc_kv kv;
} vk_pc_attention_kv;
_Static_assert(sizeof(vk_pc_attention_kv) == 92, "mirror of attention.comp");
typedef struct vk_pc_attention_rows_kv {
    vk_pc_attention_rows a;
    vk_pc_kv kv;
} vk_pc_attention_rows_kv;
_Static_assert(sizeof(vk_pc_attention_rows_kv) == 100, "mirror of attention.comp");

/* kv_write.comp: n_tok rows of k or v (src, floats) into the typed cache dst, token t
 * at row (pos0 + t) % cap of row_bytes each, from byte dst_off; each head rotated in
 * blocks of rot_n first (0: not), rot_scale = 1 / sqrtf(rot_n). One workgroup per
 * (kv head, token). */
typedef struct vk_pc_kv_write {
    uint32_t n_head_kv, head_dim, type;
    uint32_t src_off, src_stride;
    uint32_t dst_off, row_bytes;
    uint32_t cap, pos0;
    uint32_t rot_n;
    float rot_scale;
} vk_pc_kv_write;
_Static_assert(sizeof(vk_pc_kv_write) == 44, "mirror of kv_write.comp");

/* sigmoid_mul.comp: x[r][c] /= 1 + e^-y[r][c], x and y as for the binary ops: vk_pc_binary. */

/* ssm_conv.comp: the causal convolution of n_tok positions of n_ch channels with k taps
 * (w_stride floats between channels' taps), over the state's k - 1 rows (s_stride
 * floats apart; not read where fresh) and x's rows; workgroups in y take `chunk`
 * positions each. mode: bit 0 the outputs, bit 1 the state's update. */
typedef struct vk_pc_ssm_conv {
    uint32_t n_ch, n_tok, k;
    uint32_t x_off, x_stride;
    uint32_t w_off, w_stride;
    uint32_t s_off, s_stride;
    uint32_t o_off, o_stride;
    uint32_t fresh, chunk, mode;
} vk_pc_ssm_conv;
_Static_assert(sizeof(vk_pc_ssm_conv) == 56, "mirror of ssm_conv.comp");

/* delta_net.comp: the gated delta rule (backend.h al_delta_shape) over n_tok positions:
 * qkv, alpha, beta and out by rows; dt_bias and a at dt_off and a_off; value head h's
 * state at s_off + h s_stride (not read where fresh); q_scale = 1 / sqrt(head_dim) as
 * the reference rounds it. */
typedef struct vk_pc_delta_net {
    uint32_t n_tok, head_dim, n_k_heads, n_v_heads, grouped, fresh;
    uint32_t qkv_off, qkv_stride;
    uint32_t al_off, al_stride;
    uint32_t be_off, be_stride;
    uint32_t dt_off, a_off;
    uint32_t s_off, s_stride;
    uint32_t o_off, o_stride;
    float eps, q_scale;
} vk_pc_delta_net;
_Static_assert(sizeof(vk_pc_delta_net) == 80, "mirror of delta_net.comp");

/* copy.comp: n 16-byte words (bandwidth measurement). */
typedef struct vk_pc_copy {
    uint32_t n;
} vk_pc_copy;
_Static_assert(sizeof(vk_pc_copy) == 4, "mirror of copy.comp");

#endif /* AL_VK_PUSH_H */
