/* model_impl.h: the model and context objects, shared by the files of model.c's
 * forward pass (model.c, model_hybrid.c) and by nothing else.
 *
 * model.c reads the hyper-parameters, binds the tensors and runs the shared blocks;
 * model_hybrid.c adds the gated delta-net hybrids' parts (qwen35, qwen35moe,
 * qwen3next): their sizes, their recurrent states and checkpoints, and their blocks.
 */
#ifndef AL_MODEL_IMPL_H
#define AL_MODEL_IMPL_H

#include "model/arch.h"
#include "model/model.h"

typedef struct layer_weights {
    al_tensor t[L_COUNT]; /* by slot (arch.h); data NULL where the file has none */
    bool swa;             /* attends to a sliding window, with the model's rope_swa */
    bool recr;            /* ARCH_HYBRID: a gated delta-net layer (no KV cache) */
    bool dense;           /* one of the leading dense layers before the experts' (glm4moe) */
    float *exp_probs_b;   /* [n_expert] L_EXP_PROBS_B on the host (the router runs there) */
    /* the layer's shape: the model's, or its own where the architecture sizes layers
     * one by one (gemma4: the sliding layers' heads, feed-forward widths per layer) */
    int head_dim, n_head_kv, n_ff;
    /* the layer whose KV cache this one attends to: itself, or an earlier layer of
     * its kind (gemma4's shared_kv_layers), in which case it writes no keys */
    int kv_src;
    float out_scale;      /* gemma4's layer_output_scale, on the host (1: none) */
    float *down_exps_s;   /* [n_expert] gemma4's L_DOWN_EXPS_S on the host, or NULL */
} layer_weights;

struct al_model {
    gguf_file *file;
    al_backend *be;
    const arch_desc *ad;
    char arch[64];
    int n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    /* the largest of the layers' q and kv widths and feed-forward (scratch sizes) */
    int64_t max_qd, max_kvd, max_ff;
    int n_expert, n_expert_used, n_ff_exp; /* ARCH_MOE: experts, used per token, width */
    int n_ff_shexp;        /* the shared expert's width (qwen35moe), else 0 */
    /* the router: softmax over the picked experts' logits (qwen3moe, gpt-oss), or
     * sigmoid scores, picked with L_EXP_PROBS_B added, weights normalized where
     * expert_norm and times expert_scale (glm4moe: expert_gating_func 2) */
    bool gate_sigmoid, expert_norm;
    float expert_scale;
    int n_dense_lead;      /* leading layers with a dense FFN (leading_dense_block_count) */
    /* the weights are the gating's probabilities of the picked experts (deepseek2's
     * softmax over all of them, sigmoid scores), not a softmax over the picked logits;
     * the picks come from the n_group_used best of n_group groups where n_group > 1 */
    bool route_probs;
    int n_group, n_group_used;
    /* ARCH_MLA (mla.c): q_lora_rank (0: one query matrix), kv_lora_rank, a query head's
     * width before absorption (qk_nope + rope: key_length_mla) and a value head's
     * (value_length_mla). head_dim is kv_lora_rank + rope: the cached row, whose first
     * rope values are the shared rope key and the rest the normed latent vector, which
     * is also the value (the V caches are the K caches: kv_latent) */
    int q_lora, kv_lora, k_mla, v_mla;
    bool kv_latent;
    bool mla_absorbed;     /* al_model_params': no weights for the expanded form */
    /* ARCH_MLA under YaRN without yarn_log_multiplier: the magnitude llama.cpp's rope
     * gives the rotated part (1 + 0.1 ln factor) on top of the scale of q.k; else 1 */
    float mla_rope_mag;
    /* ARCH_HYBRID: the convolution's taps, d_inner, a head's size (d_state), the key
     * and value heads of the delta rule; which layers are recurrent, read before the
     * layers are bound */
    int ssm_kernel, ssm_inner, ssm_state, ssm_k_heads, ssm_v_heads;
    int n_nextn;           /* next-token-prediction blocks after the n_layer trunk's */
    int n_ple;             /* gemma4: a per-layer input's width (0: none) */
    bool *recr;
    float norm_eps;
    al_rope rope;          /* global layers */
    al_rope rope_swa;      /* sliding-window layers */
    int swa_window;        /* positions a sliding layer sees (0: none slide) */
    float embd_scale;      /* token embeddings are multiplied by it (1: not at all) */
    float softcap;         /* final logits soft-cap (0: none) */
    float attn_scale;      /* of q.k: 0 for 1 / sqrt(head_dim), else YaRN's (read_yarn) */
    float *yarn_factors;   /* [n_rot / 2] the rope's frequency factors under YaRN */
    char features[512];    /* al_model_info.features */
    al_tensor tok_embd;    /* [n_embd] x n_vocab rows, any type */
    al_tensor output_norm; /* [n_embd] f32 */
    al_tensor output;      /* [n_embd] -> [n_vocab]; tok_embd when tied (the backend may
                            * hold its own copy for matmul: weight_pack) */
    bool tied;             /* output.weight is token_embd.weight */
    layer_weights *layers; /* [n_layer], and [n_layer] the MTP block's where mtp is set */
    struct gemma4_weights *g4; /* gemma4's per-layer embeddings and shapes (gemma4.c) */
    struct mtp_weights *mtp; /* the first next-token-prediction block's own tensors, or
                              * NULL (mtp_error says why, where the file has blocks) */
    char mtp_error[192];
    void **owned;          /* copies of tensors the file stores otherwise (model_own) */
    int n_owned;
    double load_s;         /* how long al_model_load took */
    uint64_t n_params, n_bytes;
    al_vocab *vocab;       /* NULL if the file has no usable tokenizer */
    char vocab_error[256]; /* why vocab is NULL */
    char *chat_template;   /* tokenizer.chat_template, NUL-terminated, or NULL */
};

/* Rows of logits computed per output matmul: all-position logits of a long batch
 * are produced a slice at a time, so scratch never holds [n_batch][n_vocab]. */
enum { LOGIT_ROWS = 16 };

/* Tokens per forward chunk at most (a context's n_batch). */
enum { MAX_BATCH = 512 };

/* Tokens of a batch for whose (token, expert) pairs the MoE scratch holds a row each,
 * so that a backend may run all the batch's experts at once (al_moe, moe_ffn):
 * decoding, and the small batches of a few sequences or of a draft. The CPU's fused
 * experts pay up to about this many tokens (cpu/moe.c). */
enum { MOE_FEW_TOKENS = 16 };

struct al_context {
    const al_model *m;
    al_backend *be;
    int n_ctx;             /* positions the context holds */
    int n_batch;           /* tokens per forward chunk */
    int n_past;
    /* The context that owns the caches' memory: this one, or the one named by
     * kv_shared_with (its owner), whose pages this context's backend uses too */
    const al_context *kv_root;
    uint64_t kv_bytes_copied; /* by al_context_handoff into this context */
    al_tensor *k_cache;    /* [n_layer] each [cap][n_head_kv * head_dim], a ring (backend.h) */
    al_tensor *v_cache;    /* [n_layer] each [cap][n_head_kv * head_dim] */
    al_kv_type type_k, type_v; /* the caches' types (al_context_params) */
    struct mtp_state *mtp; /* al_context_params.mtp: the MTP block's cache (mtp.c) */
    bool want_mtp;         /* al_context_params.mtp, until context_alloc makes it */
    bool kv_rotated;       /* quantized caches hold rotated heads (AL_LAYOUT_HADAMARD) */
    al_tensor x;           /* [n_batch][n_embd] residual stream */
    al_tensor xb;          /* [n_batch][n_embd] normed input / sublayer output */
    al_tensor q;           /* [n_batch][n_head * head_dim] */
    al_tensor k, v;        /* [n_batch][n_head_kv * head_dim] */
    al_tensor att;         /* [n_batch][n_head * head_dim] attention output */
    al_tensor hb, hb2;     /* [n_batch][n_ff] feed-forward gate and up */
    al_tensor logits;      /* [LOGIT_ROWS][n_vocab] */
    int32_t *seq_pos;      /* [n_batch] al_eval_multi: the position of each row's sequence */
    al_tensor **seq_kc, **seq_vc; /* [n_batch] al_eval_multi: its caches of one layer */
    /* ARCH_MOE: router logits [n_batch][n_expert]; the experts' scratch (al_moe) of
     * moe_rows rows: rows routed to an expert [moe_rows][n_embd] and its output, its
     * gate and up [moe_rows][n_ff_exp]; on the host the router's logits and each
     * expert's rows and weights */
    al_tensor router, xe, ye, he, he2;
    int moe_rows;          /* n_batch, or a row per (token, expert) of MOE_FEW_TOKENS */
    float *router_host;    /* [n_batch][n_expert] the router's logits, on the host */
    int32_t *sel;          /* [n_batch][n_expert_used] the experts each token picked */
    float *sel_w;          /* [n_batch][n_expert_used] their weights */
    int32_t *rows;         /* [moe_rows] the tokens routed to one expert */
    float *rows_w;         /* [moe_rows] and their weights */
    /* ARCH_HYBRID: the query and its gate [n_batch][2 n_head head_dim]; a recurrent
     * layer's projections q|k|v [n_batch][conv channels], z [n_batch][d_inner], alpha
     * and beta [n_batch][n_v_heads], the convolution's output and the delta rule's */
    al_tensor qg, ssm_qkv, ssm_z, ssm_alpha, ssm_beta, ssm_conv, ssm_o;
    /* ARCH_MLA: the query before absorption [n_batch][n_head k_mla], the low-rank query
     * [n_batch][q_lora] and the heads' values [n_batch][n_head v_mla] */
    al_tensor mla_q, mla_qa, mla_vo;
    /* ARCH_MLA, the expanded form of prompts (mla.c): one head's keys and values
     * [mla_rows][k_mla], the values padded to k_mla; data NULL where not used */
    al_tensor mla_ke, mla_ve;
    int mla_rows;          /* positions they hold (0: the expanded form is off) */
    int mla_expand_min;    /* prompts of at least this many tokens take it */
    /* gemma4: each token's per-layer inputs [n_batch][n_layer n_ple] and one layer's
     * gate [n_batch][n_ple] */
    al_tensor ple_in, ple_tok, ple_h;
    /* gemma4's mixture of experts: the dense FFN's output and the experts' input and
     * output, [n_batch][n_embd] each */
    al_tensor g4_mlp, g4_in, g4_moe;
    /* [n_layer], data NULL on attention layers: the convolution's last inputs
     * [kernel - 1][conv channels] and the delta rule's matrices [n_v_heads][d_state^2] */
    al_tensor *conv_state, *ssm_state;
    /* ARCH_HYBRID: copies of those states on the host, oldest first, at increasing
     * positions (al_context_checkpoint) */
    struct hybrid_checkpoint *ckpt;
    int n_ckpt, max_ckpt;
};

/* An optional tensor as an op argument: NULL where the file has none. */
static inline const al_tensor *opt(const al_tensor *t) { return t->data ? t : NULL; }

/* ---- model.c, for model_hybrid.c ---- */

/* ARCH.<suffix> as a u32 into *out (dflt when absent and not required). */
al_status model_get_u32(const al_model *m, const char *suffix, uint32_t dflt, bool required,
                        int *out);
/* ARCH.<suffix> as a u32, or element il of an array of one per layer (il = -1: the
 * array's largest), into *out (dflt when absent and not required). */
al_status model_get_u32_layer(const al_model *m, const char *suffix, uint32_t dflt,
                              bool required, int il, int *out);
/* A per-layer flag from ARCH.<array> or the period ARCH.<period_key> (model.c). */
al_status model_layer_pattern(const al_model *m, const char *array, const char *period_key,
                              int dflt, bool *out);
/* Binds tensor name of ne0 x ne1 (0: any) into *out; an optional one may be absent. */
al_status model_bind(al_model *m, const char *name, int64_t ne0, int64_t ne1, bool optional,
                     al_tensor *out);
/* Binds layer il's tensors as the architecture's table lists them. */
al_status model_bind_layer(al_model *m, int il, layer_weights *l);
/* Layer il's tensors through the backend's weight_load and weight_pack (either NULL). */
al_status model_load_layer(al_model *m, int il, al_status (*load)(al_backend *, al_tensor *),
                           al_status (*pack)(al_backend *, al_tensor *, int64_t));
/* Rows per view of layer slot `slot` (weight_pack): an expert's in a stacked tensor. */
int64_t model_layer_view_rows(const al_model *m, int slot, const al_tensor *t);
/* A KV cache pair of cap rows of the context's types for layer il's heads (il =
 * n_layer: the MTP block's). */
al_status model_kv_tensors(al_context *c, int il, int64_t cap, al_tensor *k, al_tensor *v);
/* A descriptor dimension (arch_dim) of this model. */
int64_t model_dim(const al_model *m, arch_dim d);
/* Replaces *t, a small weight stored in another type, by an owned f32 copy. */
al_status model_own_f32(al_model *m, const char *name, al_tensor *t);
/* Keeps p (al_malloc'd) until the model is destroyed; frees it and fails on NOMEM. */
al_status model_own(al_model *m, void *p, const char *what);
/* Copies n bytes of s (on sb) into d (on db), through *tmp (al_free'd by the caller)
 * where neither side is host memory. */
al_status model_copy_rows(al_backend *db, al_tensor *d, al_backend *sb, const al_tensor *s,
                          uint64_t n, char **tmp);
void model_head_norm(const al_model *m, al_backend *be, const al_tensor *x, int n_heads,
                     const al_tensor *w);
/* The first n rows of scratch t as rows of ne0 floats packed one after another (a
 * layer narrower than the widest: the per-head views need rows without gaps). */
al_tensor model_scratch(const al_tensor *t, int64_t ne0, int n);
void model_attend_rows(al_context *c, al_context *const *seqs, int il, int n, al_tensor *q,
                       al_tensor *k, al_tensor *v, al_tensor *att);
void model_project_residual(const al_model *m, al_backend *be, const al_tensor *in,
                            const al_tensor *w, const al_tensor *bias, al_tensor *x,
                            al_tensor *xb, const al_tensor *post_norm);

/* The FFN of layer il over n rows of c->x (dense, or a mixture of experts). */
void model_ffn(al_context *c, int il, int n);
/* The experts each of n tokens takes and their weights, from the router's logits on
 * the host ([n][n_expert]). */
void model_route(const al_model *m, int il, const float *logits, int n, int32_t *sel,
                 float *sel_w);
/* The al_moe of layer il's experts over c's scratch (sel and sel_w filled). */
al_moe model_moe(al_context *c, int il);
/* The caches of attention layer il of context c: the MTP block's for il == n_layer. */
void model_kv(al_context *c, int il, al_tensor **k, al_tensor **v);

/* ---- mtp.c: the next-token-prediction block ---- */

/* Binds the first MTP block (layers[n_layer], which the caller allocated) and its own
 * tensors; a file whose block cannot be used still loads, without it (mtp_error). */
al_status mtp_bind(al_model *m);
/* The MTP block's tensors through the backend's weight_load and weight_pack. */
al_status mtp_load_weights(al_model *m, al_status (*load)(al_backend *, al_tensor *),
                           al_status (*pack)(al_backend *, al_tensor *, int64_t));
void mtp_free(al_model *m);
/* The context's MTP state (al_context_params.mtp), or AL_ERR_UNSUPPORTED. */
al_status mtp_context_alloc(al_context *c);
void mtp_context_free(al_context *c);
/* After the trunk ran n rows at positions n_past .. (its output norm in c->xb), or
 * with seqs one row of each of seqs at its own position (al_eval_multi): keeps their
 * hidden states and runs the block's attention over the rows, each token paired with
 * the hidden state of the position before, filling each sequence's block cache. */
void mtp_catch_up(al_context *c, al_context *const *seqs, const int32_t *tokens, int n);
/* The block's KV cache (model_kv). */
void mtp_kv(al_context *c, al_tensor **k, al_tensor **v);
/* After al_context_truncate to n_past: the hidden state the next row pairs with. */
void mtp_truncate(al_context *c, int n_past);
/* al_draft_mtp with each step's logits into logits [max][n_vocab] (for tests). */
int mtp_draft_logits(al_context *c, int32_t last, int max, int32_t *out, float *logits);

/* ---- gemma4.c ---- */

/* gemma4's layer shapes, shared caches and per-layer inputs' sizes (a no-op for
 * other architectures); after the sliding layers are known, before the layers bind. */
al_status gemma4_read(al_model *m);
/* Layer il's shape (layer_weights.head_dim ...), before its tensors bind. */
void gemma4_layer_shape(const al_model *m, int il, layer_weights *l);
/* The global tensors (per-layer embeddings, the plain norm's ones) and checks of
 * layer il's. */
al_status gemma4_bind(al_model *m);
al_status gemma4_bind_layer(al_model *m, int il, layer_weights *l);
al_status gemma4_load_weights(al_model *m, al_status (*load)(al_backend *, al_tensor *),
                              al_status (*pack)(al_backend *, al_tensor *, int64_t));
void gemma4_free(al_model *m);
/* The bytes of gemma4's own global weights a token reads: the per-layer inputs' row and
 * projection (0 for other architectures). */
uint64_t gemma4_bytes_per_token(const al_model *m);
al_status gemma4_context_alloc(al_context *c);
/* Before the layers: each token's per-layer inputs (ple_in), from the token ids and
 * the scaled embeddings in c->x. */
void gemma4_inputs(al_context *c, const int32_t *tokens, int n);
void gemma4_attn_block(al_context *c, al_context *const *seqs, int il, int n);
/* A layer with experts: the dense FFN and the experts side by side, each normed. */
void gemma4_moe_ffn(al_context *c, int il, int n);
/* After the FFN: the per-layer input's residual and the layer's output scale. */
void gemma4_layer_end(al_context *c, int il, int n);

/* ---- mla.c: multi-head latent attention (deepseek2) ---- */

/* ARCH_MLA's sizes and attention scale (a no-op for other architectures); after
 * read_head_dim, before the rope scaling. */
al_status mla_read(al_model *m);
/* Checks that layer il has one whole query form (low-rank or one matrix). */
al_status mla_bind_layer(al_model *m, int il, layer_weights *l);
/* The scratch of a context of an ARCH_MLA model. */
al_status mla_context_alloc(al_context *c);
void mla_attn_block(al_context *c, al_context *const *seqs, int il, int n);

/* ---- model_hybrid.c ---- */

/* ARCH_HYBRID's sizes and recurrent layers (a no-op for other architectures). */
al_status hybrid_read(al_model *m);
/* Bytes of one sequence's recurrent state (0 without recurrent layers). */
uint64_t hybrid_state_bytes(const al_model *m);
/* The states and scratch of a context of a hybrid model. */
al_status hybrid_context_alloc(al_context *c);
/* Splits qwen3next's fused projections of recurrent layer il into qwen35's slots. */
al_status hybrid_bind_layer(al_model *m, int il, layer_weights *l);
void hybrid_attn_block(al_context *c, al_context *const *seqs, int il, int n);
void hybrid_recurrent_block(al_context *c, al_context *const *seqs, int il, int n);
void hybrid_shared_expert(al_context *c, int il, int n);
/* Drops the checkpoints after position n_past and goes back to the latest one left;
 * returns its position (0: none, the state starts over). */
int hybrid_restore(al_context *c, int n_past);
void hybrid_checkpoints_free(al_context *c);
/* al_context_handoff's part for the states: src's go into dst's, and its checkpoints
 * with them (both backends synced). */
al_status hybrid_handoff(al_context *dst, al_context *src);

#endif /* AL_MODEL_IMPL_H */
