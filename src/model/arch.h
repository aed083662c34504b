/* arch.h: architectures as descriptions.
 *
 * Each supported `general.architecture` is one constant descriptor (arch.c): its
 * per-layer tensors with their shapes and whether they are required, the metadata
 * defaults that differ between families, and the few flags that no tensor expresses
 * (rope style, FFN activation, embedding scale, sliding-window layers). The binder
 * (model.c) reads the table to find and check tensors, the forward pass runs the
 * shared blocks and applies an optional tensor exactly when the file has it, and
 * al_gen_model (gen.c, `anyllm gen-model`) writes the same table with random weights. A new dense
 * architecture is one more descriptor here.
 */
#ifndef AL_ARCH_H
#define AL_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The per-layer tensor slots the shared blocks know. */
typedef enum arch_slot {
    L_ATTN_NORM,      /* RMSNorm before attention */
    L_WQ, L_WK, L_WV, /* projections */
    L_BQ, L_BK, L_BV, /* their biases (qwen2) */
    L_Q_NORM,         /* per-head RMSNorm of Q and K before rope (qwen3, gemma3) */
    L_K_NORM,
    L_WO,             /* attention output */
    L_ATTN_POST_NORM, /* RMSNorm of the attention output before the residual add (gemma3) */
    L_FFN_NORM,       /* RMSNorm before the FFN */
    L_GATE, L_UP, L_DOWN,
    L_FFN_POST_NORM,  /* RMSNorm of the FFN output before the residual add (gemma3) */
    L_GATE_INP,       /* mixture of experts: the router, n_embd -> n_expert logits */
    L_GATE_EXPS,      /* the experts' gate, up and down matrices, one per expert */
    L_UP_EXPS, L_DOWN_EXPS,
    L_BO,             /* attention output bias (gpt-oss) */
    L_SINKS,          /* per-head attention sink logits (gpt-oss) */
    L_GATE_INP_B,     /* the router's bias and the experts' biases, a row per expert */
    L_GATE_EXPS_B, L_UP_EXPS_B, L_DOWN_EXPS_B,
    /* gated delta-net layers (qwen35): the q|k|v projection, the output gate z, the
     * convolution, the decay's bias and rate, the beta and alpha projections, the gated
     * norm's weights and the output projection */
    L_SSM_QKV, L_SSM_Z, L_SSM_CONV, L_SSM_DT, L_SSM_A, L_SSM_BETA, L_SSM_ALPHA,
    L_SSM_NORM, L_SSM_OUT,
    /* qwen3next's older layout: q|k|v|z in one projection and beta|alpha in another,
     * interleaved per key head (the binder splits them into the slots above) */
    L_SSM_IN, L_SSM_BA,
    /* a shared expert beside the routed ones (qwen35moe): its gate logit (one per
     * token, through a sigmoid) and its gated FFN */
    L_GATE_INP_SHEXP, L_GATE_SHEXP, L_UP_SHEXP, L_DOWN_SHEXP,
    /* glm4moe: a bias per expert added to the router's sigmoid scores to pick the
     * experts, not to weight them (kept on the host: layer_weights.exp_probs_b) */
    L_EXP_PROBS_B,
    /* deepseek2's latent attention: the query through a low-rank bottleneck (q_a, its
     * norm, q_b; or one attn_q.weight where the file has no q_lora_rank), the
     * compressed key-value vector and the shared rope key in one projection, the
     * compressed vector's norm, and per head the matrices that take the latent vector
     * to a key's non-rotating part (k_b) and to a value (v_b); made at load for the
     * expanded form of prompts (mla.c), k_b transposed and v_b, both f32 (v_b's copy
     * only where the file's is not) */
    L_WQ_A, L_Q_A_NORM, L_WQ_B, L_WKV_A_MQA, L_KV_A_NORM, L_WK_B, L_WV_B, L_WK_B_T, L_WV_B_F32,
    /* gemma4: a scalar multiplying the layer's output, and the per-layer input's gate,
     * projection back to the embedding and its norm (the E2B/E4B files) */
    L_OUT_SCALE, L_PLE_GATE, L_PLE_PROJ, L_PLE_NORM,
    /* gemma4's mixture of experts beside its dense FFN (the 26B-A4B file): the router
     * input's per-channel scale, the experts' input norm, the two outputs' norms, and a
     * scale per expert of its output (kept on the host: layer_weights.down_exps_s) */
    L_GATE_INP_S, L_PRE_NORM_2, L_POST_NORM_1, L_POST_NORM_2, L_DOWN_EXPS_S,
    L_COUNT
} arch_slot;

/* A tensor dimension in terms of the hyper-parameters. */
typedef enum arch_dim {
    D_ONE,  /* a vector: the tensor has one dimension */
    D_EMBD, /* n_embd */
    D_Q,    /* n_head * head_dim */
    D_KV,   /* n_head_kv * head_dim */
    D_HEAD, /* head_dim */
    D_FF,   /* n_ff */
    D_EXPERT, /* n_expert */
    D_FF_EXP, /* n_ff_exp: one expert's feed-forward width */
    D_N_HEAD, /* n_head */
    D_Q_GATE, /* 2 n_head head_dim: a query and an output gate per head (qwen35) */
    D_SSM_CONV,  /* the delta-net convolution's channels: 2 n_k_heads d_state + d_inner */
    D_SSM_INNER, /* d_inner = n_v_heads * d_state */
    D_SSM_STATE, /* d_state: a delta-net head's size */
    D_SSM_VHEADS, /* n_v_heads */
    D_SSM_KERNEL, /* the convolution's taps */
    D_FF_SHEXP,   /* the shared expert's width (expert_shared_feed_forward_length) */
    D_SSM_QKVZ,   /* ssm_in's rows: D_SSM_CONV + D_SSM_INNER (qwen3next) */
    D_SSM_BA,     /* ssm_ba's rows: 2 n_v_heads (qwen3next) */
    /* latent attention (deepseek2): q_lora_rank, kv_lora_rank, kv_lora_rank plus the
     * rope part, a query head's non-rotating part (qk_nope), a value head, and the
     * query and output projections' widths: n_head (qk_nope + rope), n_head v_head */
    D_Q_LORA, D_KV_LORA, D_KV_A, D_NOPE, D_V_MLA, D_Q_MLA, D_O_MLA,
    D_SCALAR, /* 1: a tensor of one value */
    D_PLE,    /* gemma4: a per-layer input's width (embedding_length_per_layer_input) */
} arch_dim;

/* Which layers have a tensor, where an architecture mixes two kinds: attention and
 * recurrent layers (ARCH_HYBRID), or the leading dense FFN layers and the mixtures of
 * experts after them (ARCH.leading_dense_block_count: glm4moe). */
typedef enum arch_where { W_ALL, W_ATTN, W_RECR, W_DENSE, W_MOE } arch_where;

/* Whether a layer of these kinds has a tensor of `where`. */
static inline bool arch_where_has(arch_where where, bool recr, bool dense) {
    switch (where) {
    case W_ATTN: return !recr;
    case W_RECR: return recr;
    case W_DENSE: return dense;
    case W_MOE: return !dense;
    default: return true;
    }
}

typedef struct arch_tensor {
    arch_slot slot;
    const char *name;   /* after "blk.N.", e.g. "attn_q.weight" */
    arch_dim ne0, ne1;  /* ne1 = D_ONE for a vector */
    bool required;      /* false: used where present (an alternative layout's tensor) */
    arch_dim ne2;       /* D_ONE, or the experts of a stacked [ne0, ne1, n_expert] tensor */
    arch_where where;   /* W_ALL, or only attention / only recurrent layers */
} arch_tensor;

/* The gated FFN's activation: act(gate) * up, or gpt-oss's clamped SwiGLU
 * (backend.h: swiglu_oai). */
typedef enum arch_act { ACT_SILU, ACT_GELU, ACT_SWIGLU_OAI } arch_act;


enum {
    ARCH_ROPE_NEOX = 1 << 0,   /* rotate the two halves of a head, not adjacent pairs */
    ARCH_EMBD_SCALE = 1 << 1,  /* token embeddings times sqrt(n_embd) */
    ARCH_SLIDING = 1 << 2,     /* sliding-window attention on most layers */
    ARCH_MOE = 1 << 3,         /* a mixture-of-experts FFN (ARCH.expert_count ...) */
    /* gated delta-net layers with a recurrent state, and among them full-attention
     * layers whose query projection also gives a sigmoid gate of their output
     * (ARCH.full_attention_interval or ARCH.attention.recurrent_layers; ARCH.ssm.*) */
    ARCH_HYBRID = 1 << 4,
    /* ARCH_HYBRID whose value heads share key heads in consecutive groups (qwen3next),
     * not tiled over them (qwen35): al_delta_shape.grouped */
    ARCH_GDN_GROUPED = 1 << 5,
    /* multi-head latent attention (deepseek2): the cache holds one compressed vector
     * and one rope key per position, shared by every head (model/mla.c) */
    ARCH_MLA = 1 << 6,
    /* gemma4 (model/gemma4.c): layers sized one by one (the sliding ones' heads, the
     * feed-forward widths), the last layers attending to earlier layers' caches,
     * normed values, per-layer inputs and output scales */
    ARCH_PER_LAYER = 1 << 7,
};

typedef struct arch_desc {
    const char *name;          /* general.architecture */
    unsigned flags;
    arch_act act;              /* of the gated FFN: act(gate) * up */
    float norm_eps;            /* default of ARCH.attention.layer_norm_rms_epsilon */
    float rope_base;           /* default of ARCH.rope.freq_base */
    /* ARCH_SLIDING: layer i slides unless (i + 1) % swa_period == 0, unless the file
     * gives ARCH.attention.sliding_window_pattern; sliding layers rotate with
     * ARCH.rope.freq_base_swa, default rope_base_swa (0: the global layers' base),
     * and no scaling */
    int swa_period;
    float rope_base_swa;
    /* ARCH_MOE: the router's gating when ARCH.expert_gating_func is absent or 0: 1
     * softmax, 2 sigmoid; 0 takes 1. Sigmoid-only routers (glm4moe) set sigmoid_only. */
    int gating;
    bool sigmoid_only;
    const arch_tensor *layer;  /* the per-layer tensors */
    int n_layer_tensors;
} arch_desc;

/* The descriptor of an architecture name, or NULL. */
const arch_desc *arch_find(const char *name);

/* "llama, qwen2, ..." for messages, written to buf. */
const char *arch_names(char *buf, size_t size);

/* Whether a slot holds RMSNorm weights (gen-model fills them with ones). */
bool arch_slot_is_norm(arch_slot slot);

/* The descriptor's entry for a slot, or NULL if the architecture has no such tensor. */
const arch_tensor *arch_tensor_of(const arch_desc *a, arch_slot slot);

#endif /* AL_ARCH_H */
