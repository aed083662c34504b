/* recurrent.c: the recurrences of gated delta-net layers (qwen35, qwen35moe) on the
 * Vulkan backend: the causal convolution with its rolling state (ssm_conv.comp) and
 * the gated delta rule (delta_net.comp), each recorded like the ops of ops.c and
 * compared with the CPU's reference ops by test_vkdelta.
 *
 * Both run over the positions of one sequence in order, and both keep a state per
 * sequence and layer that the next call continues from: the convolution's last K-1
 * inputs, the delta rule's matrix per value head. A decoded token is one dispatch of
 * each; a prompt is one dispatch of delta_net (the shader walks the positions with
 * the state in registers) and one or two of ssm_conv.
 */
#include <math.h>

#include "push.h"
#include "util.h"
#include "vk.h"

/* Positions per workgroup of ssm_conv.comp: a prompt spreads over chunks of this many
 * (channels x chunks workgroups), a decoded token is one chunk. */
enum { CONV_CHUNK = 32, CONV_MAX_K1 = 15 /* ssm_conv.comp's MAX_K1 */ };

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* One dispatch of ssm_conv.comp in `mode` (bit 0: outputs, bit 1: the state) over
 * groups_y chunks. */
static void conv_dispatch(vk_backend *be, const al_tensor *x, const al_tensor *w,
                          al_tensor *state, bool fresh, al_tensor *out, uint32_t mode,
                          uint32_t groups_y) {
    /* the state is read unless fresh, and written by the update */
    vk_hazard(be, x->data, false);
    vk_hazard(be, w->data, false);
    if (!fresh && !(mode & 2)) vk_hazard(be, state->data, false);
    if (mode & 2) vk_hazard(be, state->data, true);
    if (mode & 1) vk_hazard(be, out->data, true);
    VkDescriptorBufferInfo info[4];
    vk_pc_ssm_conv pc = {.n_ch = (uint32_t)x->ne[0], .n_tok = (uint32_t)x->ne[1],
                         .k = (uint32_t)w->ne[0], .fresh = fresh, .chunk = CONV_CHUNK,
                         .mode = mode};
    pc.x_off = vk_bind_f32(be, &info[0], x, &pc.x_stride);
    pc.w_off = vk_bind_f32(be, &info[1], w, &pc.w_stride);
    pc.s_off = vk_bind_f32(be, &info[2], state, &pc.s_stride);
    /* the update alone writes no output: the state stands in for a valid binding */
    pc.o_off = vk_bind_f32(be, &info[3], mode & 1 ? out : state, &pc.o_stride);
    vk_dispatch(be, VK_OP_SSM_CONV, 0, 0, info, &pc, sizeof pc,
                div_up(pc.n_ch, be->sh->pl.tune.ew_wg), groups_y);
}

void vk_op_ssm_conv(al_backend *base, const al_tensor *x, const al_tensor *w, al_tensor *state,
                    bool fresh, al_tensor *out) {
    vk_backend *be = (vk_backend *)base;
    const int64_t n_ch = x->ne[0], n = x->ne[1], k1 = w->ne[0] - 1;
    AL_ASSERT(w->type == AL_TYPE_F32 && w->ne[1] == n_ch && out->ne[0] == n_ch &&
              out->ne[1] == n && state->ne[0] == n_ch && state->ne[1] == k1);
    if (n == 0) return;
    if (k1 < 1 || k1 > CONV_MAX_K1) {
        vk_fail(be, AL_ERR_UNSUPPORTED, "ssm_conv: a convolution of %lld taps (the shader "
                "takes 2 to %d)", (long long)(k1 + 1), CONV_MAX_K1 + 1);
        return;
    }
    const uint64_t n_chunks = div_up((uint64_t)n, CONV_CHUNK);
    if (n_chunks > be->sh->d.caps.max_groups[1]) {
        vk_fail(be, AL_ERR_UNSUPPORTED, "ssm_conv: %lld positions at once", (long long)n);
        return;
    }
    if (!vk_begin(be, 2, 0)) return;
    /* one chunk: its invocations read what they need before they write the state;
     * several: the state is updated once every chunk has read it */
    if (n_chunks == 1) {
        conv_dispatch(be, x, w, state, fresh, out, 3, 1);
        return;
    }
    conv_dispatch(be, x, w, state, fresh, out, 1, (uint32_t)n_chunks);
    conv_dispatch(be, x, w, state, fresh, out, 2, 1);
}

/* The head size class of delta_net.comp's pipelines, 32 << variant, for head_dim. */
static int delta_variant(int head_dim) {
    int v = 0;
    while ((32 << v) < head_dim) v++;
    return v;
}

/* Whether the shape is one the op can run, with a message where not. */
static bool delta_shape_ok(vk_backend *be, const al_tensor *qkv, const al_tensor *state,
                           const al_delta_shape *s, const al_tensor *out) {
    const int64_t d = s->head_dim;
    if (d < 1 || d > VK_DELTA_MAX_DIM) {
        vk_fail(be, AL_ERR_UNSUPPORTED, "delta_net: head size %d (the shader takes 1 to %d)",
                s->head_dim, VK_DELTA_MAX_DIM);
        return false;
    }
    AL_ASSERT(s->n_k_heads > 0 && s->n_v_heads % s->n_k_heads == 0);
    AL_ASSERT(qkv->ne[0] >= (2 * (int64_t)s->n_k_heads + s->n_v_heads) * d);
    AL_ASSERT(state->ne[0] == d * d && state->ne[1] == s->n_v_heads);
    AL_ASSERT(out->ne[0] >= (int64_t)s->n_v_heads * d && out->ne[1] == qkv->ne[1]);
    return true;
}

void vk_op_delta_net(al_backend *base, const al_tensor *qkv, const al_tensor *alpha,
                     const al_tensor *beta, const al_tensor *dt_bias, const al_tensor *a,
                     al_tensor *state, bool fresh, const al_delta_shape *s, al_tensor *out) {
    vk_backend *be = (vk_backend *)base;
    const vk_tuning *tune = &be->sh->pl.tune;
    AL_ASSERT(dt_bias->type == AL_TYPE_F32 && a->type == AL_TYPE_F32);
    AL_ASSERT(dt_bias->ne[0] >= s->n_v_heads && a->ne[0] >= s->n_v_heads);
    if (qkv->ne[1] == 0 || !delta_shape_ok(be, qkv, state, s, out)) return;
    if (!vk_begin(be, 1, 0)) return;
    vk_hazard(be, qkv->data, false);
    vk_hazard(be, alpha->data, false);
    vk_hazard(be, beta->data, false);
    vk_hazard(be, dt_bias->data, false);
    vk_hazard(be, a->data, false);
    vk_hazard(be, state->data, true);
    vk_hazard(be, out->data, true);
    VkDescriptorBufferInfo info[7];
    vk_pc_delta_net pc = {.n_tok = (uint32_t)qkv->ne[1], .head_dim = (uint32_t)s->head_dim,
                          .n_k_heads = (uint32_t)s->n_k_heads, .n_v_heads = (uint32_t)s->n_v_heads,
                          .grouped = s->grouped, .fresh = fresh, .eps = s->eps,
                          .q_scale = 1.0f / sqrtf((float)s->head_dim)};
    uint32_t unused;
    pc.qkv_off = vk_bind_f32(be, &info[0], qkv, &pc.qkv_stride);
    pc.al_off = vk_bind_f32(be, &info[1], alpha, &pc.al_stride);
    pc.be_off = vk_bind_f32(be, &info[2], beta, &pc.be_stride);
    pc.dt_off = vk_bind_f32(be, &info[3], dt_bias, &unused);
    pc.a_off = vk_bind_f32(be, &info[4], a, &unused);
    pc.s_off = vk_bind_f32(be, &info[5], state, &pc.s_stride);
    pc.o_off = vk_bind_f32(be, &info[6], out, &pc.o_stride);
    /* lanes per row need the shuffle build; rows per workgroup = dn_wg / lanes */
    const vk_op op = tune->dn_lanes > 1 ? VK_OP_DELTA_NET_SG : VK_OP_DELTA_NET;
    const uint32_t rows = tune->dn_wg / (op == VK_OP_DELTA_NET_SG ? tune->dn_lanes : 1);
    vk_dispatch(be, op, 0, delta_variant(s->head_dim), info, &pc, sizeof pc, pc.n_v_heads,
                (uint32_t)div_up((uint64_t)s->head_dim, rows));
}
