/* arch.c: the descriptor of each supported architecture (see arch.h).
 *
 *   llama   Llama 2/3/3.x, Mistral, TinyLlama, SmolLM2: RMSNorm, rope on adjacent
 *           pairs, grouped-query attention, SwiGLU.
 *   qwen2   llama with biases on Q, K and V and rope on split halves.
 *   qwen3   qwen2 without the biases and with a per-head RMSNorm of Q and K; its
 *           head size (key_length) need not be n_embd / n_head.
 *   gemma3  per-head Q/K norm, a second RMSNorm after attention and after the FFN
 *           (before each residual add), GELU-gated FFN, embeddings times sqrt(n_embd),
 *           and sliding-window attention on five layers of six.
 *   qwen35  Qwen3.5 / 3.6: gated delta-net layers (a recurrent state per sequence) with
 *           a gated full-attention layer every fourth (partial neox rope).
 *   qwen35moe  qwen35 with a mixture of experts and a sigmoid-gated shared expert.
 *   qwen3next  qwen35moe with grouped value heads (and older fused projections).
 *   glm4moe  GLM-4.5 / 4.6: biased QKV, partial rope, a dense lead, sigmoid routing.
 *   gemma4  gemma3's blocks with sliding layers of their own head size and rope, values
 *           normed, scale-free attention, the last layers reading earlier layers'
 *           caches, per-layer inputs (E2B/E4B) and output scales.
 *   deepseek2  DeepSeek-V2/V3, Kimi, GLM-4.7-Flash: multi-head latent attention (one
 *           compressed vector and one rope key cached per position), a dense lead and
 *           experts with shared ones, softmax or sigmoid routing in groups.
 * The output projection is the token embedding when output.weight is absent, for
 * every architecture (the binder's rule, not a flag).
 */
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

#define N(a) ((int)(sizeof(a) / sizeof *(a)))

/* The tensors every architecture here shares, in file order. */
#define ATTN_IN                                                  \
    {L_ATTN_NORM, "attn_norm.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL},      \
    {L_WQ, "attn_q.weight", D_EMBD, D_Q, true, D_ONE, W_ALL},                  \
    {L_WK, "attn_k.weight", D_EMBD, D_KV, true, D_ONE, W_ALL},                 \
    {L_WV, "attn_v.weight", D_EMBD, D_KV, true, D_ONE, W_ALL}
#define ATTN_OUT {L_WO, "attn_output.weight", D_Q, D_EMBD, true, D_ONE, W_ALL}
#define FFN                                                      \
    {L_FFN_NORM, "ffn_norm.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL},        \
    {L_GATE, "ffn_gate.weight", D_EMBD, D_FF, true, D_ONE, W_ALL},             \
    {L_UP, "ffn_up.weight", D_EMBD, D_FF, true, D_ONE, W_ALL},                 \
    {L_DOWN, "ffn_down.weight", D_FF, D_EMBD, true, D_ONE, W_ALL}
#define QK_NORM                                                  \
    {L_Q_NORM, "attn_q_norm.weight", D_HEAD, D_ONE, true, D_ONE, W_ALL},       \
    {L_K_NORM, "attn_k_norm.weight", D_HEAD, D_ONE, true, D_ONE, W_ALL}

/* The routed experts and the ungated shared ones of glm4moe and deepseek2 (only in the
 * layers after the dense lead), the router's bias required or not */
#define ROUTED_SHARED(probs_b_required)                                          \
    {L_GATE_INP, "ffn_gate_inp.weight", D_EMBD, D_EXPERT, true, D_ONE, W_MOE},        \
    {L_EXP_PROBS_B, "exp_probs_b.bias", D_EXPERT, D_ONE, probs_b_required, D_ONE, W_MOE}, \
    {L_GATE_EXPS, "ffn_gate_exps.weight", D_EMBD, D_FF_EXP, true, D_EXPERT, W_MOE},   \
    {L_UP_EXPS, "ffn_up_exps.weight", D_EMBD, D_FF_EXP, true, D_EXPERT, W_MOE},       \
    {L_DOWN_EXPS, "ffn_down_exps.weight", D_FF_EXP, D_EMBD, true, D_EXPERT, W_MOE},   \
    {L_GATE_SHEXP, "ffn_gate_shexp.weight", D_EMBD, D_FF_SHEXP, true, D_ONE, W_MOE},  \
    {L_UP_SHEXP, "ffn_up_shexp.weight", D_EMBD, D_FF_SHEXP, true, D_ONE, W_MOE},      \
    {L_DOWN_SHEXP, "ffn_down_shexp.weight", D_FF_SHEXP, D_EMBD, true, D_ONE, W_MOE}
/* the dense lead's FFN */
#define DENSE_LEAD                                                               \
    {L_GATE, "ffn_gate.weight", D_EMBD, D_FF, true, D_ONE, W_DENSE},                  \
    {L_UP, "ffn_up.weight", D_EMBD, D_FF, true, D_ONE, W_DENSE},                      \
    {L_DOWN, "ffn_down.weight", D_FF, D_EMBD, true, D_ONE, W_DENSE}

/* A mixture-of-experts FFN: the router and each expert's gate, up and down, stacked */
#define MOE_FFN                                                            \
    {L_FFN_NORM, "ffn_norm.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL},           \
    {L_GATE_INP, "ffn_gate_inp.weight", D_EMBD, D_EXPERT, true, D_ONE, W_ALL},    \
    {L_GATE_EXPS, "ffn_gate_exps.weight", D_EMBD, D_FF_EXP, true, D_EXPERT, W_ALL}, \
    {L_UP_EXPS, "ffn_up_exps.weight", D_EMBD, D_FF_EXP, true, D_EXPERT, W_ALL},   \
    {L_DOWN_EXPS, "ffn_down_exps.weight", D_FF_EXP, D_EMBD, true, D_EXPERT, W_ALL}

static const arch_tensor llama_layer[] = {ATTN_IN, ATTN_OUT, FFN};

static const arch_tensor qwen2_layer[] = {
    ATTN_IN,
    {L_BQ, "attn_q.bias", D_Q, D_ONE, true, D_ONE, W_ALL},
    {L_BK, "attn_k.bias", D_KV, D_ONE, true, D_ONE, W_ALL},
    {L_BV, "attn_v.bias", D_KV, D_ONE, true, D_ONE, W_ALL},
    ATTN_OUT,
    FFN,
};

static const arch_tensor qwen3_layer[] = {ATTN_IN, QK_NORM, ATTN_OUT, FFN};

static const arch_tensor gemma3_layer[] = {
    ATTN_IN,
    QK_NORM,
    ATTN_OUT,
    {L_ATTN_POST_NORM, "post_attention_norm.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL},
    FFN,
    {L_FFN_POST_NORM, "post_ffw_norm.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL},
};

static const arch_tensor qwen3moe_layer[] = {ATTN_IN, QK_NORM, ATTN_OUT, MOE_FFN};

/* gpt-oss: biases everywhere, attention sinks, and "post_attention_norm" is the
 * FFN's input norm (there is no ffn_norm) */
static const arch_tensor gpt_oss_layer[] = {
    ATTN_IN,
    {L_BQ, "attn_q.bias", D_Q, D_ONE, true, D_ONE, W_ALL},
    {L_BK, "attn_k.bias", D_KV, D_ONE, true, D_ONE, W_ALL},
    {L_BV, "attn_v.bias", D_KV, D_ONE, true, D_ONE, W_ALL},
    ATTN_OUT,
    {L_BO, "attn_output.bias", D_EMBD, D_ONE, true, D_ONE, W_ALL},
    {L_SINKS, "attn_sinks.weight", D_N_HEAD, D_ONE, true, D_ONE, W_ALL},
    {L_FFN_NORM, "post_attention_norm.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL},
    {L_GATE_INP, "ffn_gate_inp.weight", D_EMBD, D_EXPERT, true, D_ONE, W_ALL},
    {L_GATE_INP_B, "ffn_gate_inp.bias", D_EXPERT, D_ONE, true, D_ONE, W_ALL},
    {L_GATE_EXPS, "ffn_gate_exps.weight", D_EMBD, D_FF_EXP, true, D_EXPERT, W_ALL},
    {L_GATE_EXPS_B, "ffn_gate_exps.bias", D_FF_EXP, D_EXPERT, true, D_ONE, W_ALL},
    {L_UP_EXPS, "ffn_up_exps.weight", D_EMBD, D_FF_EXP, true, D_EXPERT, W_ALL},
    {L_UP_EXPS_B, "ffn_up_exps.bias", D_FF_EXP, D_EXPERT, true, D_ONE, W_ALL},
    {L_DOWN_EXPS, "ffn_down_exps.weight", D_FF_EXP, D_EMBD, true, D_EXPERT, W_ALL},
    {L_DOWN_EXPS_B, "ffn_down_exps.bias", D_EMBD, D_EXPERT, true, D_ONE, W_ALL},
};

/* qwen35 (Qwen3.5 / 3.6): three gated delta-net layers to one of gated attention;
 * "post_attention_norm" is the FFN's input norm */
#define A W_ATTN
#define R W_RECR
/* the gated attention layers */
#define QWEN35_ATTN                                                          \
    {L_ATTN_NORM, "attn_norm.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL},     \
    {L_WQ, "attn_q.weight", D_EMBD, D_Q_GATE, true, D_ONE, A},                \
    {L_WK, "attn_k.weight", D_EMBD, D_KV, true, D_ONE, A},                    \
    {L_WV, "attn_v.weight", D_EMBD, D_KV, true, D_ONE, A},                    \
    {L_Q_NORM, "attn_q_norm.weight", D_HEAD, D_ONE, true, D_ONE, A},          \
    {L_K_NORM, "attn_k_norm.weight", D_HEAD, D_ONE, true, D_ONE, A},          \
    {L_WO, "attn_output.weight", D_Q, D_EMBD, true, D_ONE, A}
/* a delta-net layer's convolution and decay */
#define QWEN35_CONV                                                          \
    {L_SSM_CONV, "ssm_conv1d.weight", D_SSM_KERNEL, D_SSM_CONV, true, D_ONE, R}, \
    {L_SSM_DT, "ssm_dt.bias", D_SSM_VHEADS, D_ONE, true, D_ONE, R},           \
    {L_SSM_A, "ssm_a", D_SSM_VHEADS, D_ONE, true, D_ONE, R}
/* its output's norm and projection, and the FFN's norm */
#define QWEN35_OUT                                                           \
    {L_SSM_NORM, "ssm_norm.weight", D_SSM_STATE, D_ONE, true, D_ONE, R},      \
    {L_SSM_OUT, "ssm_out.weight", D_SSM_INNER, D_EMBD, true, D_ONE, R},       \
    {L_FFN_NORM, "post_attention_norm.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL}
/* the routed experts, and a shared expert whose output a per-token sigmoid gate scales */
#define QWEN35_MOE                                                           \
    {L_GATE_INP, "ffn_gate_inp.weight", D_EMBD, D_EXPERT, true, D_ONE, W_ALL},  \
    {L_GATE_EXPS, "ffn_gate_exps.weight", D_EMBD, D_FF_EXP, true, D_EXPERT, W_ALL}, \
    {L_UP_EXPS, "ffn_up_exps.weight", D_EMBD, D_FF_EXP, true, D_EXPERT, W_ALL}, \
    {L_DOWN_EXPS, "ffn_down_exps.weight", D_FF_EXP, D_EMBD, true, D_EXPERT, W_ALL}, \
    {L_GATE_INP_SHEXP, "ffn_gate_inp_shexp.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL}, \
    {L_GATE_SHEXP, "ffn_gate_shexp.weight", D_EMBD, D_FF_SHEXP, true, D_ONE, W_ALL}, \
    {L_UP_SHEXP, "ffn_up_shexp.weight", D_EMBD, D_FF_SHEXP, true, D_ONE, W_ALL}, \
    {L_DOWN_SHEXP, "ffn_down_shexp.weight", D_FF_SHEXP, D_EMBD, true, D_ONE, W_ALL}
/* qwen35's delta-net layer, in the order gen-model writes the tensors (which its
 * weights depend on) */
#define QWEN35_MIXER                                                         \
    QWEN35_ATTN,                                                              \
    {L_SSM_QKV, "attn_qkv.weight", D_EMBD, D_SSM_CONV, true, D_ONE, R},       \
    {L_SSM_Z, "attn_gate.weight", D_EMBD, D_SSM_INNER, true, D_ONE, R},       \
    QWEN35_CONV,                                                              \
    {L_SSM_BETA, "ssm_beta.weight", D_EMBD, D_SSM_VHEADS, true, D_ONE, R},    \
    {L_SSM_ALPHA, "ssm_alpha.weight", D_EMBD, D_SSM_VHEADS, true, D_ONE, R},  \
    QWEN35_OUT

static const arch_tensor qwen35_layer[] = {
    QWEN35_MIXER,
    {L_GATE, "ffn_gate.weight", D_EMBD, D_FF, true, D_ONE, W_ALL},
    {L_UP, "ffn_up.weight", D_EMBD, D_FF, true, D_ONE, W_ALL},
    {L_DOWN, "ffn_down.weight", D_FF, D_EMBD, true, D_ONE, W_ALL},
};

static const arch_tensor qwen35moe_layer[] = {QWEN35_MIXER, QWEN35_MOE};

/* qwen3next (Qwen3-Next): qwen35moe's blocks with value heads grouped over key heads,
 * no rope sections, and beta|alpha in one projection. Older files also project q|k|v|z
 * in one matrix (ssm_in); newer ones split it as qwen35 does. The binder takes either
 * and splits the older matrices into the slots the forward pass reads. */
static const arch_tensor qwen3next_layer[] = {
    QWEN35_ATTN,
    {L_SSM_IN, "ssm_in.weight", D_EMBD, D_SSM_QKVZ, false, D_ONE, R},
    {L_SSM_QKV, "attn_qkv.weight", D_EMBD, D_SSM_CONV, false, D_ONE, R},
    {L_SSM_Z, "attn_gate.weight", D_EMBD, D_SSM_INNER, false, D_ONE, R},
    QWEN35_CONV,
    {L_SSM_BA, "ssm_ba.weight", D_EMBD, D_SSM_BA, true, D_ONE, R},
    QWEN35_OUT,
    QWEN35_MOE,
};
/* glm4moe (GLM-4.5 / 4.6 and their Air versions): biased q, k and v, a per-head Q/K
 * norm in some files, "post_attention_norm" is the FFN's input norm; the leading
 * layers have a dense FFN, the others routed experts picked by sigmoid scores plus a
 * per-expert bias, and an ungated shared expert */
static const arch_tensor glm4moe_layer[] = {
    ATTN_IN,
    {L_BQ, "attn_q.bias", D_Q, D_ONE, false, D_ONE, W_ALL},
    {L_BK, "attn_k.bias", D_KV, D_ONE, false, D_ONE, W_ALL},
    {L_BV, "attn_v.bias", D_KV, D_ONE, false, D_ONE, W_ALL},
    {L_Q_NORM, "attn_q_norm.weight", D_HEAD, D_ONE, false, D_ONE, W_ALL},
    {L_K_NORM, "attn_k_norm.weight", D_HEAD, D_ONE, false, D_ONE, W_ALL},
    ATTN_OUT,
    {L_FFN_NORM, "post_attention_norm.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL},
    DENSE_LEAD,
    ROUTED_SHARED(true),
};
/* deepseek2: latent attention, whose query is low-rank where the file has
 * q_lora_rank (attn_q_a, its norm, attn_q_b) and one matrix otherwise (attn_q: the
 * "lite" files; the binder checks that one form is whole); its k_b and v_b stack a
 * matrix per head. The FFN is glm4moe's without the Q/K biases' layer: a dense lead,
 * then routed experts (picked with exp_probs_b where the file has it) and ungated
 * shared ones. */
static const arch_tensor deepseek2_layer[] = {
    {L_ATTN_NORM, "attn_norm.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL},
    {L_WQ_A, "attn_q_a.weight", D_EMBD, D_Q_LORA, false, D_ONE, W_ALL},
    {L_Q_A_NORM, "attn_q_a_norm.weight", D_Q_LORA, D_ONE, false, D_ONE, W_ALL},
    {L_WQ_B, "attn_q_b.weight", D_Q_LORA, D_Q_MLA, false, D_ONE, W_ALL},
    {L_WQ, "attn_q.weight", D_EMBD, D_Q_MLA, false, D_ONE, W_ALL},
    {L_WKV_A_MQA, "attn_kv_a_mqa.weight", D_EMBD, D_KV_A, true, D_ONE, W_ALL},
    {L_KV_A_NORM, "attn_kv_a_norm.weight", D_KV_LORA, D_ONE, true, D_ONE, W_ALL},
    {L_WK_B, "attn_k_b.weight", D_NOPE, D_KV_LORA, true, D_N_HEAD, W_ALL},
    {L_WV_B, "attn_v_b.weight", D_KV_LORA, D_V_MLA, true, D_N_HEAD, W_ALL},
    {L_WO, "attn_output.weight", D_O_MLA, D_EMBD, true, D_ONE, W_ALL},
    {L_FFN_NORM, "ffn_norm.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL},
    DENSE_LEAD,
    ROUTED_SHARED(false),
};
/* gemma4: as gemma3, but attn_k (and its norm) only where a layer keeps its own cache
 * and attn_v optional (values are then the keys' projection: gemma4.c checks); the
 * output scale and the per-layer input's tensors where the file has them */
static const arch_tensor gemma4_layer[] = {
    {L_ATTN_NORM, "attn_norm.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL},
    {L_WQ, "attn_q.weight", D_EMBD, D_Q, true, D_ONE, W_ALL},
    {L_WK, "attn_k.weight", D_EMBD, D_KV, false, D_ONE, W_ALL},
    {L_WV, "attn_v.weight", D_EMBD, D_KV, false, D_ONE, W_ALL},
    {L_Q_NORM, "attn_q_norm.weight", D_HEAD, D_ONE, true, D_ONE, W_ALL},
    {L_K_NORM, "attn_k_norm.weight", D_HEAD, D_ONE, false, D_ONE, W_ALL},
    ATTN_OUT,
    {L_ATTN_POST_NORM, "post_attention_norm.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL},
    FFN,
    {L_FFN_POST_NORM, "post_ffw_norm.weight", D_EMBD, D_ONE, true, D_ONE, W_ALL},
    {L_OUT_SCALE, "layer_output_scale.weight", D_SCALAR, D_ONE, false, D_ONE, W_ALL},
    {L_PLE_GATE, "inp_gate.weight", D_EMBD, D_PLE, false, D_ONE, W_ALL},
    {L_PLE_PROJ, "proj.weight", D_PLE, D_EMBD, false, D_ONE, W_ALL},
    {L_PLE_NORM, "post_norm.weight", D_EMBD, D_ONE, false, D_ONE, W_ALL},
    {L_GATE_INP, "ffn_gate_inp.weight", D_EMBD, D_EXPERT, false, D_ONE, W_ALL},
    {L_GATE_INP_S, "ffn_gate_inp.scale", D_EMBD, D_ONE, false, D_ONE, W_ALL},
    {L_PRE_NORM_2, "pre_ffw_norm_2.weight", D_EMBD, D_ONE, false, D_ONE, W_ALL},
    {L_POST_NORM_1, "post_ffw_norm_1.weight", D_EMBD, D_ONE, false, D_ONE, W_ALL},
    {L_POST_NORM_2, "post_ffw_norm_2.weight", D_EMBD, D_ONE, false, D_ONE, W_ALL},
    {L_GATE_EXPS, "ffn_gate_exps.weight", D_EMBD, D_FF_EXP, false, D_EXPERT, W_ALL},
    {L_UP_EXPS, "ffn_up_exps.weight", D_EMBD, D_FF_EXP, false, D_EXPERT, W_ALL},
    {L_DOWN_EXPS, "ffn_down_exps.weight", D_FF_EXP, D_EMBD, false, D_EXPERT, W_ALL},
    {L_DOWN_EXPS_S, "ffn_down_exps.scale", D_EXPERT, D_ONE, false, D_ONE, W_ALL},
};
#undef A
#undef R
#undef ROUTED_SHARED
#undef DENSE_LEAD
#undef QWEN35_ATTN
#undef QWEN35_CONV
#undef QWEN35_OUT
#undef QWEN35_MOE
#undef QWEN35_MIXER

static const arch_desc archs[] = {
    {.name = "llama", .act = ACT_SILU, .norm_eps = 1e-5f, .rope_base = 10000.0f,
     .layer = llama_layer, .n_layer_tensors = N(llama_layer)},
    {.name = "qwen2", .flags = ARCH_ROPE_NEOX, .act = ACT_SILU, .norm_eps = 1e-6f,
     .rope_base = 1000000.0f, .layer = qwen2_layer, .n_layer_tensors = N(qwen2_layer)},
    {.name = "qwen3", .flags = ARCH_ROPE_NEOX, .act = ACT_SILU, .norm_eps = 1e-6f,
     .rope_base = 1000000.0f, .layer = qwen3_layer, .n_layer_tensors = N(qwen3_layer)},
    {.name = "gemma3", .flags = ARCH_ROPE_NEOX | ARCH_EMBD_SCALE | ARCH_SLIDING,
     .act = ACT_GELU, .norm_eps = 1e-6f, .rope_base = 1000000.0f, .swa_period = 6,
     .rope_base_swa = 10000.0f, .layer = gemma3_layer, .n_layer_tensors = N(gemma3_layer)},
    {.name = "qwen3moe", .flags = ARCH_ROPE_NEOX | ARCH_MOE, .act = ACT_SILU,
     .norm_eps = 1e-6f, .rope_base = 1000000.0f, .layer = qwen3moe_layer,
     .n_layer_tensors = N(qwen3moe_layer)},
    {.name = "gpt-oss", .flags = ARCH_ROPE_NEOX | ARCH_MOE | ARCH_SLIDING,
     .act = ACT_SWIGLU_OAI, .norm_eps = 1e-5f,
     .rope_base = 150000.0f, .swa_period = 2, .layer = gpt_oss_layer,
     .n_layer_tensors = N(gpt_oss_layer)},
    {.name = "qwen35", .flags = ARCH_ROPE_NEOX | ARCH_HYBRID, .act = ACT_SILU,
     .norm_eps = 1e-6f, .rope_base = 10000000.0f, .layer = qwen35_layer,
     .n_layer_tensors = N(qwen35_layer)},
    {.name = "qwen35moe", .flags = ARCH_ROPE_NEOX | ARCH_HYBRID | ARCH_MOE, .act = ACT_SILU,
     .norm_eps = 1e-6f, .rope_base = 10000000.0f, .layer = qwen35moe_layer,
     .n_layer_tensors = N(qwen35moe_layer)},
    {.name = "qwen3next", .flags = ARCH_ROPE_NEOX | ARCH_HYBRID | ARCH_GDN_GROUPED | ARCH_MOE,
     .act = ACT_SILU, .norm_eps = 1e-6f, .rope_base = 10000000.0f, .layer = qwen3next_layer,
     .n_layer_tensors = N(qwen3next_layer)},
    {.name = "glm4moe", .flags = ARCH_ROPE_NEOX | ARCH_MOE, .act = ACT_SILU, .norm_eps = 1e-5f,
     .rope_base = 1000000.0f, .gating = 2, .sigmoid_only = true, .layer = glm4moe_layer,
     .n_layer_tensors = N(glm4moe_layer)},
    {.name = "gemma4", .flags = ARCH_ROPE_NEOX | ARCH_EMBD_SCALE | ARCH_SLIDING | ARCH_PER_LAYER,
     .act = ACT_GELU, .norm_eps = 1e-6f, .rope_base = 1000000.0f, .swa_period = 6,
     .rope_base_swa = 10000.0f, .layer = gemma4_layer, .n_layer_tensors = N(gemma4_layer)},
    {.name = "deepseek2", .flags = ARCH_MOE | ARCH_MLA, .act = ACT_SILU, .norm_eps = 1e-6f,
     .rope_base = 10000.0f, .gating = 1, .layer = deepseek2_layer,
     .n_layer_tensors = N(deepseek2_layer)},
};

const arch_desc *arch_find(const char *name) {
    for (int i = 0; i < N(archs); i++)
        if (!strcmp(archs[i].name, name)) return &archs[i];
    return NULL;
}

const char *arch_names(char *buf, size_t size) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < N(archs) && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", archs[i].name);
    return buf;
}

bool arch_slot_is_norm(arch_slot slot) {
    return slot == L_ATTN_NORM || slot == L_Q_NORM || slot == L_K_NORM ||
           slot == L_SSM_NORM || slot == L_Q_A_NORM || slot == L_KV_A_NORM ||
           slot == L_ATTN_POST_NORM || slot == L_FFN_NORM || slot == L_FFN_POST_NORM ||
           slot == L_PLE_NORM || slot == L_PRE_NORM_2 || slot == L_POST_NORM_1 ||
           slot == L_POST_NORM_2;
}

const arch_tensor *arch_tensor_of(const arch_desc *a, arch_slot slot) {
    for (int i = 0; i < a->n_layer_tensors; i++)
        if (a->layer[i].slot == slot) return &a->layer[i];
    return NULL;
}
