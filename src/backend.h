/* backend.h: the seam between the model code and the hardware.
 *
 * The forward pass (model.c) is written once against the small op set below. A
 * backend implements the ops for its hardware; the CPU reference backend
 * (cpu/ops_ref.c) implements each one in plain C and is the oracle every optimized
 * kernel and every other backend is tested against.
 *
 * Tensors are descriptors, not storage: `data` is where the backend keeps the bytes
 * (a host address on the CPU; a device buffer handle on a GPU) and `offset` says where
 * in it the tensor starts, so a view of some rows is a copy of the descriptor with a
 * larger offset. Activations are float32 and row-major: ne[0] is the row length.
 * Weights may be any type of quant.h; a weight matrix of ne = {n_in, n_out} maps
 * n_in inputs to n_out outputs, one quantized row per output.
 */
#ifndef AL_BACKEND_H
#define AL_BACKEND_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "anyllm.h"

typedef struct al_tensor {
    uint32_t type;    /* al_type of quant.h */
    int64_t ne[2];    /* ne[0] elements per row, ne[1] rows */
    void *data;       /* backend storage (CPU: host address of byte 0) */
    uint64_t offset;  /* bytes from data to the first element */
    uint64_t row_bytes; /* stride between rows in bytes */
    bool borrowed;    /* the storage is another tensor's (tensor_import): tensor_free
                         releases what the import made, never the memory */
    uint8_t layout;   /* AL_LAYOUT_*: how a weight's rows lie in data */
} al_tensor;

/* A weight's layout. Rows, as the file has them, unless weight_pack chose a layout of
 * its own; a view of whole groups of rows (al_tensor_rows) keeps the layout. */
enum {
    AL_LAYOUT_ROWS = 0,
    /* the CPU's: groups of 16 rows, each group's bytes interleaved so that one read
     * streams them in the order the kernels use them (cpu/ops.h) */
    AL_LAYOUT_X16 = 1,
    /* A KV cache's keys or values stored rotated (al_hadamard): each head's head_dim
     * elements, in blocks of al_hadamard_n(head_dim), multiplied by the normalized
     * Walsh-Hadamard matrix before they are quantized. The matrix is orthogonal and
     * its own inverse, so q.k = (H q).(H k) and sum_j p_j H v_j = H sum_j p_j v_j: the
     * attention ops rotate the queries, attend over the rotated rows as over any
     * others, and rotate the output back. An outlier of a head then spreads over the
     * block instead of setting the scale of its own quantization block alone. */
    AL_LAYOUT_HADAMARD = 2,
};

enum { AL_KV_HEAD_MAX = 4096 }; /* the widest head a typed cache takes (load.c's limit) */

/* The size of the Hadamard blocks of a head of head_dim elements: the largest power of
 * two that divides it, at most 256. */
static inline int al_hadamard_n(int head_dim) {
    int n = 1;
    while (n < 256 && head_dim % (2 * n) == 0) n *= 2;
    return n;
}

/* Four floats as one value of the compiler's vector extension (SSE on any x86-64),
 * read and written through memcpy, which takes any alignment. */
typedef float al_f4 __attribute__((vector_size(16)));

/* x = H x / sqrt(n) in place, for n a power of two: the butterflies of the fast
 * Walsh-Hadamard transform, stride 1 first, then the scale. Every backend applies it
 * in this order, so that all give the same bits; from stride 4 on, four butterflies
 * at a time, the same operations on the same values. */
static inline void al_hadamard(float *x, int n) {
    for (int len = 1; len < n; len *= 2)
        for (int i = 0; i < n; i += 2 * len)
            for (int j = i; j < i + len;) {
                if (len >= 4) {
                    al_f4 u, w, a, b;
                    memcpy(&u, x + j, sizeof u);
                    memcpy(&w, x + j + len, sizeof w);
                    a = u + w, b = u - w;
                    memcpy(x + j, &a, sizeof a);
                    memcpy(x + j + len, &b, sizeof b);
                    j += 4;
                    continue;
                }
                const float u = x[j], w = x[j + len];
                x[j] = u + w;
                x[j + len] = u - w;
                j++;
            }
    const float s = 1.0f / sqrtf((float)n);
    for (int i = 0; i < n; i++) x[i] *= s;
}

/* One head of head_dim elements rotated as AL_LAYOUT_HADAMARD stores it: al_hadamard
 * over each block of al_hadamard_n(head_dim). */
static inline void al_hadamard_head(float *x, int head_dim) {
    const int n = al_hadamard_n(head_dim);
    for (int i = 0; i < head_dim; i += n) al_hadamard(x + i, n);
}

/* Rotary position embedding parameters, shared by every layer. */
typedef struct al_rope {
    int n_rot;               /* leading elements of each head that rotate (even) */
    bool neox;               /* pairs (i, i + n_rot/2) instead of (2i, 2i+1) */
    float freq_base;         /* theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i */
    float freq_scale;        /* 1 / linear scaling factor */
    const float *freq_factors; /* [n_rot/2] or NULL (Llama 3 rope_freqs) */
} al_rope;

/* Shape of one attention call.
 *
 * The caches are rings: position p lives in row p % cap, where cap = k_cache->ne[1]. A
 * cache of a layer without a window holds every position (n_past + n_tokens <= cap,
 * so the ring never wraps); a sliding-window layer's cache need only hold the window
 * and the batch (window - 1 + n_tokens <= cap). For the batch's last position
 * p_last = n_past + n_tokens - 1, row r holds position p_last - ((p_last - r) mod cap)
 * once the batch is written; a negative one is a row never written. */
typedef struct al_attn_shape {
    int n_head;     /* query heads */
    int n_head_kv;  /* key/value heads; n_head is a multiple of it */
    int head_dim;
    int n_past;     /* positions already in the cache before this batch */
    int n_tokens;   /* new positions in this batch (its queries are causal) */
    float scale;    /* multiplies q.k; 0 means 1 / sqrt(head_dim) */
    int window;     /* > 0: a query at p sees keys at p - window + 1 .. p; 0: all <= p */
    /* NULL, or an f32 weight [n_head]: per query head a logit ("sink") that joins the
     * softmax's denominator but carries no value, so a head may attend to nothing
     * (gpt-oss): out = sum_j e^(s_j - M) v_j / (e^(sink - M) + sum_j e^(s_j - M)),
     * M the largest of the scores and the sink. Not scaled by `scale`. */
    const struct al_tensor *sinks;
    /* The caches already hold the batch's keys and values (a layer attending to an
     * earlier layer's cache: gemma4's shared_kv_layers): k and v are not read and
     * nothing is written. */
    bool kv_written;
} al_attn_shape;

/* One gated delta-net layer's recurrence (delta_net). Per position, qkv's row holds
 * [q: n_k_heads x head_dim | k: n_k_heads x head_dim | v: n_v_heads x head_dim] (the
 * convolution's output); alpha and beta [n][n_v_heads] are raw projections. For each
 * value head h, with key head kh = h % n_k_heads (tiled) or h / (n_v_heads /
 * n_k_heads) (grouped):
 *   q, k = l2norm(q_kh), l2norm(k_kh)   (x / sqrt(sum x^2 + eps)); q /= sqrt(head_dim)
 *   g = softplus(alpha_h + dt_bias_h) * a_h;  b = sigmoid(beta_h)
 *   S_h = e^g S_h;  S_h += b (v_h - S_h k) k^T;  out_h = S_h q
 * S_h is head_dim x head_dim (rows: value dimensions); the state tensor holds the
 * n_v_heads matrices, [n_v_heads][head_dim * head_dim], zeros where fresh. */
typedef struct al_delta_shape {
    int n_k_heads, n_v_heads, head_dim;
    bool grouped; /* how value heads share key heads (above) */
    float eps;
} al_delta_shape;

/* The activation of a gated FFN (matmul_glu): as silu_mul, or as gelu_mul. */
typedef enum al_glu { AL_GLU_SILU, AL_GLU_GELU } al_glu;

/* The activation of a mixture of experts' gated FFN (moe_ffn): as silu_mul, as
 * swiglu_oai with al_moe's alpha and limit, or as gelu_mul (gemma4). */
typedef enum al_moe_act { AL_MOE_SILU, AL_MOE_SWIGLU_OAI, AL_MOE_GELU } al_moe_act;

/* The routed experts of one mixture-of-experts layer, and where a batch's tokens go
 * (moe_ffn). The file stacks the experts: expert e's gate and up projections are rows
 * [e n_ff, (e + 1) n_ff) of gate and up ([n_expert n_ff][n_embd]; each one type), its
 * down projection rows [e n_embd, (e + 1) n_embd) of down ([n_expert n_embd][n_ff]);
 * a bias, where not NULL, is row e of an f32 [n_expert][n_ff] (gate_b, up_b) or
 * [n_expert][n_embd] (down_b). */
typedef struct al_moe {
    const al_tensor *gate, *up, *down;
    const al_tensor *gate_b, *up_b, *down_b;
    int n_expert, n_used, n_ff;
    al_moe_act act;
    float alpha, limit; /* AL_MOE_SWIGLU_OAI's (swiglu_oai) */
    /* on the host, [n_tokens][n_used]: the distinct experts each token takes, and the
     * weight of each one's output */
    const int32_t *sel;
    const float *sel_w;
    /* scratch, whose contents are lost: xe and ye [n_scratch][n_embd], he and he2
     * [n_scratch][n_ff]; on the host rows and rows_w [n_scratch]. n_scratch >=
     * n_tokens, which the plain ops need; a backend fuses only where its scratch holds
     * what it needs, e.g. a row per (token, expert) pair */
    al_tensor *xe, *ye, *he, *he2;
    int32_t *rows;
    float *rows_w;
    int n_scratch;
} al_moe;

/* What a backend needs to know to say whether it can run a model (supports). */
typedef struct al_model_shape {
    int n_vocab, n_embd, n_ff;
    int n_head, n_head_kv, head_dim, n_rot;
    int max_batch;  /* rows of activations a context holds at most (its n_batch) */
    int logit_rows; /* rows of logits one output matmul computes */
} al_model_shape;

typedef struct al_backend al_backend;

/* The most weights one matmul_multi takes: q, k and v. */
enum { AL_MULTI_MAX = 3 };

typedef struct al_backend_ops {
    const char *name;
    unsigned caps; /* AL_CAP_*: what callers may rely on (the desc's, less AL_CAP_AUTO) */
    void (*destroy)(al_backend *be);
    /* NULL, or the counters of al_model_get_backend_stats (anyllm.h) */
    void (*stats)(const al_backend *be, al_backend_stats *out);
    /* NULL, or al_model_get_dispatch_times (anyllm.h) */
    int (*dispatch_times)(const al_backend *be, al_dispatch_time *out, int max);

    /* The types besides AL_TYPE_F32 that the attention ops read in a KV cache, as bits
     * 1 << al_type (AL_TYPE_F16, AL_TYPE_Q8_0, AL_TYPE_Q4_0), with the rotated layout
     * (AL_LAYOUT_HADAMARD). A cache of such a type is allocated as bytes (tensor_alloc
     * of one row of floats) and described as rows of its type: the ops write k and v
     * into it converted (quant.h's quantizers, rotated first where the layout says so)
     * and read its rows as they are, no dequantized copy of the cache. */
    uint32_t kv_types;
    /* Storage for activations and caches, zero-filled: ne[1] rows of ne[0] f32. */
    al_status (*tensor_alloc)(al_backend *be, int64_t n_cols, int64_t n_rows, al_tensor *out);
    void (*tensor_free)(al_backend *be, al_tensor *t);
    /* Copies n_bytes between host memory and a tensor starting at its first element,
     * after the ops called so far (which may write t, or read it) have finished. */
    void (*tensor_read)(al_backend *be, const al_tensor *t, void *dst, uint64_t n_bytes);
    void (*tensor_write)(al_backend *be, al_tensor *t, const void *src, uint64_t n_bytes);
    /* Where the host can read and write t's storage in place, at the speed of ordinary
     * memory and coherently with the backend once `sync` has returned: the address of
     * t's first element, and in *n_bytes how much storage follows it (its rows and the
     * padding of its allocation, which an import of whole pages needs). NULL when the
     * host cannot (a discrete GPU's memory, uncached mappings); a NULL op: never. */
    void *(*tensor_host)(al_backend *be, const al_tensor *t, uint64_t *n_bytes);
    /* A tensor of n_rows rows of n_cols f32 over n_bytes of host memory that another
     * tensor owns (tensor_host of it, maybe another backend's), used in place: the CPU
     * takes the address, a GPU on unified memory imports the pages as it imports
     * weights. AL_ERR_UNSUPPORTED when it cannot (a discrete GPU, which keeps its
     * caches in its own memory; an address it cannot import). Sets out->borrowed. A
     * NULL op: never. */
    al_status (*tensor_import)(al_backend *be, void *host, uint64_t n_bytes, int64_t n_cols,
                               int64_t n_rows, al_tensor *out);
    /* Makes a weight (whose data is a host address in the file mapping) usable by
     * the backend: a GPU imports or uploads it and points data/offset at its copy.
     * NULL when host addresses work as they are. */
    al_status (*weight_load)(al_backend *be, al_tensor *w);
    /* Called after weight_load for a weight that only matmul reads, whose views start
     * and end at multiples of view_rows rows: the backend may move it into a layout of
     * its own (AL_LAYOUT_*) that it reads faster, and keeps that copy until destroy.
     * The results of every op stay bit for bit those of the rows layout. NULL: never. */
    al_status (*weight_pack)(al_backend *be, al_tensor *w, int64_t view_rows);
    /* Prepares scratch for ops on rows of up to max_cols elements and attention over
     * up to max_ctx positions; called when a context is created, so that the ops
     * themselves never allocate. */
    al_status (*reserve)(al_backend *be, int64_t max_cols, int64_t max_ctx);
    /* Waits until every op called so far has finished and returns the first failure
     * since the backend was made (a lost GPU, a fence timeout); the ops themselves
     * return nothing, so a GPU keeps its failure until this reports it. NULL when
     * ops cannot fail (the CPU). */
    al_status (*sync)(al_backend *be);
    /* Whether be can run a model of this shape: AL_OK, or AL_ERR_UNSUPPORTED with a
     * one-line message naming the limit (a shader's head size, a binding's size...).
     * Called by al_model_load before the weights, so that a backend that cannot run
     * the model is refused at load, where "auto" can still take the CPU. Weight types
     * and sizes are checked by weight_load, also at load. NULL: every shape works. */
    al_status (*supports)(al_backend *be, const al_model_shape *shape);
    /* A backend object for one context of a model loaded on be: the same device and
     * weights, but its own execution state (a GPU's command stream), so that threads
     * with a context each can use one model at once (anyllm.h). Destroyed with
     * destroy, before be. NULL when be itself can be shared by contexts. */
    al_status (*context_backend)(al_backend *be, al_backend **out);

    /* out[i] = dequantized row ids[i] of table, for n ids. */
    void (*get_rows)(al_backend *be, const al_tensor *table, const int32_t *ids, int n,
                     al_tensor *out);
    /* out = x / rms(x) * w per row; w is an f32 weight [ne0]. x and out may be the same
     * rows, and may be a view of heads (ne0 = head_dim, row_bytes = head_dim floats)
     * laid over a contiguous [n][n_head * head_dim] tensor: per-head Q/K norm. */
    void (*rms_norm)(al_backend *be, const al_tensor *x, const al_tensor *w, float eps,
                     al_tensor *out);
    /* out[t][o] = sum_i x[t][i] * w[o][i] (+ bias[o] if bias): x is [n][n_in]. */
    void (*matmul)(al_backend *be, const al_tensor *x, const al_tensor *w,
                   const al_tensor *bias, al_tensor *out);
    /* Rotates each head of each row in place; row t is at position pos0 + t. */
    void (*rope)(al_backend *be, al_tensor *x, int n_head, int head_dim, int pos0,
                 const al_rope *rope);
    /* Writes k, v ([n_tokens][n_head_kv*head_dim]) to the caches at positions n_past ..
     * (rows p % cap, see al_attn_shape), then out[t] = softmax(q k^T * scale) v over the
     * positions query n_past + t sees: 0 .. n_past + t, or its last `window` of them.
     * Caches of another type than f32 (kv_types) hold k and v converted; rotated ones
     * (AL_LAYOUT_HADAMARD) may leave q's rows rotated, as scratch. */
    void (*attention)(al_backend *be, const al_tensor *q, const al_tensor *k,
                      const al_tensor *v, al_tensor *k_cache, al_tensor *v_cache,
                      const al_attn_shape *shape, al_tensor *out);
    /* g = silu(g) * u, elementwise. */
    void (*silu_mul)(al_backend *be, al_tensor *g, const al_tensor *u);
    /* g = gelu(g) * u, elementwise, with GELU's tanh approximation
     * 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (Gemma's gated FFN). */
    void (*gelu_mul)(al_backend *be, al_tensor *g, const al_tensor *u);
    /* gpt-oss's clamped SwiGLU, elementwise: with x = min(g, limit) and
     * y = min(max(u, -limit), limit), g = x * sigmoid(alpha * x) * (y + 1). */
    void (*swiglu_oai)(al_backend *be, al_tensor *g, const al_tensor *u, float alpha,
                       float limit);
    /* x *= s, elementwise (Gemma's embedding scale). */
    void (*scale)(al_backend *be, al_tensor *x, float s);
    /* x += y, elementwise. */
    void (*add)(al_backend *be, al_tensor *x, const al_tensor *y);
    /* x *= sigmoid(g), elementwise: the output gate of qwen35's attention. x and g may
     * be views of heads with row strides of their own (the gate lies beside q in one
     * projection). NULL: the backend runs no model that needs it. */
    void (*sigmoid_mul)(al_backend *be, al_tensor *x, const al_tensor *g);
    /* The causal depthwise convolution of a gated delta-net layer, then SiLU, over the
     * n = x->ne[1] consecutive positions of one sequence. x is [n][C]; w an f32 [C][K]
     * (channel c's K taps, oldest input first); state [K-1][C] holds the K-1 inputs
     * before x's first row (zeros where fresh: state is then not read) and afterwards
     * the last K-1 inputs. out[t][c] = silu(sum_j w[c][j] in[t - K + 1 + j][c]). */
    void (*ssm_conv)(al_backend *be, const al_tensor *x, const al_tensor *w, al_tensor *state,
                     bool fresh, al_tensor *out);
    /* The gated delta rule over the n = qkv->ne[1] consecutive positions of one
     * sequence (al_delta_shape). NULL: the backend runs no recurrent layer. */
    void (*delta_net)(al_backend *be, const al_tensor *qkv, const al_tensor *alpha,
                      const al_tensor *beta, const al_tensor *dt_bias, const al_tensor *a,
                      al_tensor *state, bool fresh, const struct al_delta_shape *shape,
                      al_tensor *out);
    /* dst = src, row by row: ne[0] floats per row, each tensor with its own row stride
     * (rows may be a view of heads: latent attention's query parts). NULL: the backend
     * runs no model that needs it. */
    void (*copy)(al_backend *be, const al_tensor *src, al_tensor *dst);
    /* x[ids[i]] += w[i] * y[i] for the n rows of y (host arrays; the ids are distinct
     * rows of x): a mixture of experts adds each expert's weighted output to the rows
     * of the tokens routed to it. */
    void (*add_rows)(al_backend *be, al_tensor *x, const al_tensor *y, const int32_t *ids,
                     const float *w, int n);

    /* Fused ops: each computes what the plain ops in its comment compute one after
     * another, to the same rounding (every intermediate is an f32), in one pass over
     * memory; on a GPU, one dispatch where decoding a token would take several. Each
     * returns false, having done nothing, where this backend does not fuse the case
     * (a batch size, a type, a length; fusion switched off), and NULL means never:
     * then the caller runs the plain ops, which the backend_* helpers below do. */
    /* out[t][o] += x[t] . w[o] (+ bias[o]): matmul into a temporary, then add (the
     * residual add after the attention output and the FFN down projection). */
    bool (*matmul_add)(al_backend *be, const al_tensor *x, const al_tensor *w,
                       const al_tensor *bias, al_tensor *out);
    /* out = act(x . wg) * (x . wu): two matmuls without bias, then silu_mul (AL_GLU_SILU)
     * or gelu_mul (AL_GLU_GELU); wg and wu have one type and one shape. */
    bool (*matmul_glu)(al_backend *be, const al_tensor *x, const al_tensor *wg,
                       const al_tensor *wu, al_glu act, al_tensor *out);
    /* out[i] = xn . w[i] (+ bias[i]) for the n <= AL_MULTI_MAX weights (bias[i] may be
     * NULL), where xn = rms_norm(x, norm, eps) when norm (an f32 weight [n_in]) is not
     * NULL, else x: the matmuls of one input, as the q, k and v projections after the
     * attention norm. The weights keep their own storage (nothing is concatenated). */
    bool (*matmul_multi)(al_backend *be, const al_tensor *x, const al_tensor *norm, float eps,
                         int n, const al_tensor *const *w, const al_tensor *const *bias,
                         al_tensor *const *out);
    /* rms_norm(x, norm, eps) into a temporary, then matmul_glu of it: the FFN norm and
     * the gated FFN's gate and up projections. */
    bool (*norm_matmul_glu)(al_backend *be, const al_tensor *x, const al_tensor *norm, float eps,
                            const al_tensor *wg, const al_tensor *wu, al_glu act, al_tensor *out);
    /* rope of q (n_head heads) then rope of k (n_head_kv heads), rows at pos0 + t. */
    bool (*rope_qk)(al_backend *be, al_tensor *q, int n_head, al_tensor *k, int n_head_kv,
                    int head_dim, int pos0, const al_rope *rope);
    /* rope_qk with a position per row: row t of q and k is at pos[t] (a host array of
     * q->ne[1] entries): the next tokens of several sequences (al_eval_multi). */
    bool (*rope_qk_rows)(al_backend *be, al_tensor *q, int n_head, al_tensor *k, int n_head_kv,
                         int head_dim, const int32_t *pos, const al_rope *rope);
    /* Decoding: attention of one token per sequence. Row i of q, k and v is the next
     * position, pos[i], of its own sequence, whose caches are k_cache[i] and
     * v_cache[i] (distinct per row). Where rope is not NULL, rope_qk_rows of q and k
     * first (q and k then hold what they may: rotated or not). Then n = q->ne[1] calls
     * of attention with one token each, shape->n_past = pos[i] (shape->n_tokens and
     * n_past are not read). One token of one sequence, or of several (al_eval_multi). */
    bool (*attention_rows)(al_backend *be, al_tensor *q, al_tensor *k, const al_tensor *v,
                           al_tensor *const *k_cache, al_tensor *const *v_cache,
                           const int32_t *pos, const al_rope *rope, const al_attn_shape *shape,
                           al_tensor *out);
    /* The routed experts of a mixture of experts for the n = xb->ne[1] rows of xb: for
     * each expert e in ascending order, over the rows routed to it (moe->sel), get_rows
     * of xb, matmul by its gate and its up projection (with their biases), silu_mul or
     * swiglu_oai, matmul by its down projection (with its bias), and add_rows of the
     * result, times the row's weight for e, into x. So each row of x takes its experts'
     * outputs in ascending order of e. */
    bool (*moe_ffn)(al_backend *be, const al_tensor *xb, const al_moe *moe, al_tensor *x);
} al_backend_ops;

struct al_backend {
    const al_backend_ops *ops;
    char desc[64]; /* for reports, e.g. "cpu avx512"; the backend fills it */
    uint64_t n_bytes_copied; /* weight bytes weight_load copied rather than used in place */
};

/* What a backend can do, for callers that must choose without knowing which it is
 * (al_backend_ops.caps, al_backend_desc.caps). */
enum {
    /* Its tensors are host memory: its KV cache counts against the machine's memory,
     * and another backend on unified memory can import it (tensor_import). */
    AL_CAP_HOST_MEMORY = 1u << 0,
    /* It runs on a device of its own (a GPU), whose failures sync reports. */
    AL_CAP_DEVICE = 1u << 1,
    /* "auto" may take it: a device that is not a software renderer. */
    AL_CAP_AUTO = 1u << 2,
};

/* A kind of backend, as its folder exports it (e.g. cpu/cpu.c: cpu_backend_desc) and
 * the registry (registry.c) lists it: everything the library needs to name, list,
 * describe and create backends of that kind, so that nothing outside the folder tests
 * for it by name. A backend spec is "name", "name:N" (device N) or "name:VARIANT". */
typedef struct al_backend_desc {
    const char *name;  /* "cpu", "vulkan" */
    const char *specs; /* the specs it takes, for messages: "cpu, cpu:q8, cpu:precise" */
    unsigned caps;     /* AL_CAP_* of its backends; AL_CAP_AUTO: of some devices */
    /* The build's line for al_backends(), e.g. "cpu (avx512)", into buf. */
    void (*summary)(char *buf, size_t size);
    /* Devices of this kind on this machine, or -1 with al_error when the kind cannot
     * start here (no loader). At most max_devices are listed. */
    int (*n_devices)(void);
    int max_devices;
    const char *const *device_names; /* [max_devices]: "cpu" or "vulkan:0", ... */
    /* One line naming device dev into buf (0), or -1 where there is no such device. */
    int (*describe)(int dev, char *buf, size_t size);
    /* Several lines about device dev (NULL: describe's line is all), 0 or -1. */
    int (*details)(int dev, char *buf, size_t size);
    /* Memory bandwidth of device dev in GB/s (NULL: not measured this way). */
    al_status (*bandwidth)(int dev, double *gbs);
    /* AL_ERR_ARG naming the field and the value, unless p's settings of this kind are
     * valid; called for every kind before any backend is made. */
    al_status (*check)(const al_model_params *p);
    /* A backend on device dev (-1: the first device AL_CAP_AUTO allows, for "auto"),
     * with variant the spec's text after ':' when it is not a number (NULL: none). */
    al_status (*create)(int dev, const char *variant, int n_threads, const al_model_params *p,
                        al_backend **out);
} al_backend_desc;

/* be->ops->supports, or AL_OK when the backend has no limits to check. */
al_status backend_supports(al_backend *be, const al_model_shape *shape);
/* Waits for the ops so far; a GPU reports the failures of recorded ops here (sync). */
al_status backend_sync(al_backend *be);

/* The backend a new context of a model on be uses: a fresh object from
 * context_backend, or be itself; release it with backend_context_release. */
al_status backend_for_context(al_backend *be, al_backend **out);
void backend_context_release(al_backend *model_be, al_backend *context_be);

/* The fused ops, or the plain ops they stand for where the backend declines (see
 * al_backend_ops): the model calls these. tmp has out's shape; the plain path uses it
 * as scratch and its contents are then lost. */
void backend_matmul_add(al_backend *be, const al_tensor *x, const al_tensor *w,
                        const al_tensor *bias, al_tensor *tmp, al_tensor *out);
void backend_matmul_glu(al_backend *be, const al_tensor *x, const al_tensor *wg,
                        const al_tensor *wu, al_glu act, al_tensor *tmp, al_tensor *out);
void backend_rope_qk(al_backend *be, al_tensor *q, int n_head, al_tensor *k, int n_head_kv,
                     int head_dim, int pos0, const al_rope *rope);
/* rope_qk_rows, or backend_rope_qk row by row. */
void backend_rope_qk_rows(al_backend *be, al_tensor *q, int n_head, al_tensor *k, int n_head_kv,
                          int head_dim, const int32_t *pos, const al_rope *rope);
/* attention_rows, or backend_rope_qk_rows (where rope is not NULL), then attention
 * row by row. */
void backend_attention_rows(al_backend *be, al_tensor *q, al_tensor *k, const al_tensor *v,
                            al_tensor *const *k_cache, al_tensor *const *v_cache,
                            const int32_t *pos, const al_rope *rope,
                            const al_attn_shape *shape, al_tensor *out);
/* norm_matmul_glu, or what it stands for: rms_norm into xn (x's shape), then
 * backend_matmul_glu of xn (tmp: out's shape). */
void backend_norm_matmul_glu(al_backend *be, const al_tensor *x, const al_tensor *norm, float eps,
                             const al_tensor *wg, const al_tensor *wu, al_glu act, al_tensor *xn,
                             al_tensor *tmp, al_tensor *out);
/* matmul_multi, or what it stands for: rms_norm into xn (scratch of x's shape) where
 * norm is not NULL, then matmul_multi of xn or the n plain matmuls. */
void backend_matmul_multi(al_backend *be, const al_tensor *x, const al_tensor *norm, float eps,
                          int n, const al_tensor *const *w, const al_tensor *const *bias,
                          al_tensor *xn, al_tensor *const *out);
void backend_moe_ffn(al_backend *be, const al_tensor *xb, const al_moe *moe, al_tensor *x);
/* The plain ops moe_ffn stands for, expert by expert (what the fused op must match). */
void backend_moe_ffn_plain(al_backend *be, const al_tensor *xb, const al_moe *moe, al_tensor *x);

/* A view of rows [row0, row0 + n_rows) of t. */
static inline al_tensor al_tensor_rows(const al_tensor *t, int64_t row0, int64_t n_rows) {
    al_tensor v = *t;
    v.offset += (uint64_t)row0 * t->row_bytes;
    v.ne[1] = n_rows;
    return v;
}

/* A view of row r of b in *view, or NULL where b is NULL: an expert's bias (al_moe). */
static inline const al_tensor *al_tensor_row_or_null(const al_tensor *b, int64_t r,
                                                     al_tensor *view) {
    if (!b) return NULL;
    *view = al_tensor_rows(b, r, 1);
    return view;
}

#endif /* AL_BACKEND_H */
