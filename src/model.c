/* model.c: decoder-only transformers read from GGUF, as described by arch.c.
 *
 * An architecture is a descriptor (arch.h): which tensors a layer has, with their
 * shapes, and a few flags. Every hyper-parameter comes from the file's "<arch>.*" keys,
 * and every tensor's type and shape is checked against them before the model is usable.
 *
 * Weights are descriptors pointing into the file mapping: loading copies nothing but
 * the few small 1-D tensors that are not stored as f32.
 *
 * The forward pass for a batch of n tokens at positions n_past .. n_past+n-1 is made of
 * two shared blocks; a bracketed step runs when the architecture has that tensor/flag:
 *   x = embed(tokens) [* sqrt(n_embd)]
 *   per layer:  attention block:
 *                 h = norm(x); q = Wq h [+ bq]; k = Wk h [+ bk]; v = Wv h [+ bv]
 *                 [q, k = per-head norm(q), norm(k)]; q, k = rope(q), rope(k)
 *                 o = Wo attention(q, k, v) (causal, or a sliding window)
 *                 x += [norm](o)
 *               FFN block:
 *                 x += [norm](Wdown (act(Wgate norm(x)) * Wup norm(x)))  act: SiLU or GELU
 *   logits = Wout norm(x) [soft-capped: c * tanh(logits / c)]
 */
#include "model.h"
#include "model_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "arch.h"
#include "quant.h"
#include "tokenizer.h"
#include "util.h"

/* ---- hyper-parameters ------------------------------------------------------------ */

al_status model_get_u32(const al_model *m, const char *suffix, uint32_t dflt, bool required,
                        int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);
    uint32_t v;
    al_status st = required ? gguf_get_u32(m->file, key, &v)
                            : gguf_get_u32_or(m->file, key, dflt, &v);
    if (st != AL_OK) return st;
    if (v > (1u << 30))
        return al_error(AL_ERR_FORMAT, "%s: %s = %u is out of range", m->file->path, key, v);
    *out = (int)v;
    return AL_OK;
}

static al_status get_arch_f32(const al_model *m, const char *suffix, float dflt, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);
    return gguf_get_f32_or(m->file, key, dflt, out);
}

/* YaRN (gpt-oss): each rotating pair's angle mixes the interpolated (divided by the
 * factor) and the original one, by a ramp over the pairs: the fast ones, which turn
 * many times within the original context, keep their angle, the slow ones are
 * interpolated. That is a per-pair frequency factor, which the rope op already takes,
 * and a magnitude mscale on the rotated q and k; with every dimension rotating, that
 * is mscale^2 on q.k, folded into the attention scale. */
static al_status read_yarn(al_model *m) {
    const char *path = m->file->path;
    float factor, ext, attn, beta_fast, beta_slow;
    int n_orig;
    al_status st;
    if ((st = get_arch_f32(m, "rope.scaling.factor", 0.0f, &factor)) ||
        (st = model_get_u32(m, "rope.scaling.original_context_length", (uint32_t)m->n_ctx_train,
                           false, &n_orig)) ||
        (st = get_arch_f32(m, "rope.scaling.yarn_ext_factor", 1.0f, &ext)) ||
        (st = get_arch_f32(m, "rope.scaling.yarn_attn_factor", 1.0f, &attn)) ||
        (st = get_arch_f32(m, "rope.scaling.yarn_beta_fast", 32.0f, &beta_fast)) ||
        (st = get_arch_f32(m, "rope.scaling.yarn_beta_slow", 1.0f, &beta_slow)))
        return st;
    if (!(factor >= 1.0f && factor <= 1024.0f) || n_orig <= 0 || !(ext >= 0 && ext <= 1) ||
        !(attn > 0 && attn < 100) || !(beta_fast > 0 && beta_slow > 0))
        return al_error(AL_ERR_FORMAT, "%s: YaRN factor %g, original context %d, ext_factor "
                        "%g, attn_factor %g, beta %g/%g: out of range", path, (double)factor,
                        n_orig, (double)ext, (double)attn, (double)beta_fast, (double)beta_slow);
    if (m->rope.n_rot != m->head_dim)
        return al_error(AL_ERR_UNSUPPORTED, "%s: YaRN with %d of %d dimensions rotating is "
                        "not supported", path, m->rope.n_rot, m->head_dim);
    const int n_pairs = m->rope.n_rot / 2;
    if (!(m->yarn_factors = al_malloc((size_t)n_pairs * sizeof *m->yarn_factors)))
        return al_error(AL_ERR_NOMEM, "out of memory for the YaRN factors");
    /* the pair that turns `turns` times over the original context */
    const double two_pi = 6.283185307179586, lb = 2 * log(m->rope.freq_base);
    const double lo_d = m->rope.n_rot * log(n_orig / (beta_fast * two_pi)) / lb;
    const double hi_d = m->rope.n_rot * log(n_orig / (beta_slow * two_pi)) / lb;
    const double lo = fmax(0, floor(lo_d)), hi = fmin(m->rope.n_rot - 1, ceil(hi_d));
    const double scale = 1.0 / factor;
    for (int i = 0; i < n_pairs; i++) {
        const double y = (i - lo) / fmax(0.001, hi - lo);
        const double mix = (1 - fmin(1, fmax(0, y))) * ext;
        m->yarn_factors[i] = (float)(1.0 / (scale * (1 - mix) + mix));
    }
    m->rope.freq_factors = m->yarn_factors;
    m->rope.freq_scale = 1.0f;
    const double mscale = ext > 0 ? attn * (1 + 0.1 * log(factor)) : attn;
    m->attn_scale = (float)(mscale * mscale / sqrt((double)m->head_dim));
    return AL_OK;
}

static al_status read_rope_scaling(al_model *m) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch);
    m->rope.freq_scale = 1.0f;
    const gguf_kv *kv = gguf_find_key(m->file, key);
    float factor = 0;
    if (kv) {
        gguf_str type;
        al_status st = gguf_get_str(m->file, key, &type);
        if (st != AL_OK) return st;
        if (gguf_str_eq(type, "none")) return AL_OK;
        if (gguf_str_eq(type, "yarn")) return read_yarn(m);
        if (!gguf_str_eq(type, "linear")) {
            char buf[64];
            return al_error(AL_ERR_UNSUPPORTED, "%s: %s '%s' is not supported (none, linear, "
                            "yarn)", m->file->path, key, gguf_str_copy(type, buf, sizeof buf));
        }
        al_status st2 = get_arch_f32(m, "rope.scaling.factor", 1.0f, &factor);
        if (st2 != AL_OK) return st2;
    } else {
        al_status st = get_arch_f32(m, "rope.scale_linear", 1.0f, &factor); /* older key */
        if (st != AL_OK) return st;
    }
    if (!(factor >= 1.0f && factor <= 1024.0f))
        return al_error(AL_ERR_FORMAT, "%s: rope scaling factor %g is out of range [1, 1024]",
                        m->file->path, (double)factor);
    m->rope.freq_scale = 1.0f / factor;
    return AL_OK;
}

/* Head size: key_length when given (qwen3 and gemma3 need not have n_embd / n_head),
 * and value_length, when given, must agree with it. */
static al_status read_head_dim(al_model *m) {
    const char *path = m->file->path;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.key_length", m->arch);
    bool given = gguf_find_key(m->file, key) != NULL;
    if (!given && m->n_embd % m->n_head != 0)
        return al_error(AL_ERR_FORMAT, "%s: embedding_length %d is not a multiple of head_count %d",
                        path, m->n_embd, m->n_head);
    int dflt = given ? 0 : m->n_embd / m->n_head, vlen;
    al_status st;
    if ((st = model_get_u32(m, "attention.key_length", (uint32_t)dflt, false, &m->head_dim)) ||
        (st = model_get_u32(m, "attention.value_length", (uint32_t)m->head_dim, false, &vlen)) ||
        (st = model_get_u32(m, "rope.dimension_count", (uint32_t)m->head_dim, false,
                           &m->rope.n_rot)))
        return st;
    if (m->head_dim <= 0 || m->head_dim > 4096)
        return al_error(AL_ERR_FORMAT, "%s: attention.key_length %d is out of range [1, 4096]",
                        path, m->head_dim);
    if (vlen != m->head_dim)
        return al_error(AL_ERR_UNSUPPORTED, "%s: attention.value_length %d differs from "
                        "key_length %d, which is not supported", path, vlen, m->head_dim);
    if (m->rope.n_rot <= 0 || m->rope.n_rot > m->head_dim || m->rope.n_rot % 2)
        return al_error(AL_ERR_FORMAT, "%s: rope.dimension_count %d must be even and within "
                        "the head size %d", path, m->rope.n_rot, m->head_dim);
    return AL_OK;
}

/* A per-layer flag: ARCH.<array> as one bool per layer, or else ARCH.<period> (default
 * dflt): layer i is set unless (i + 1) % period == 0. The two keys may be one, whose
 * type then says which it is. */
al_status model_layer_pattern(const al_model *m, const char *array, const char *period_key,
                                    int dflt, bool *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch, array);
    const gguf_kv *kv = gguf_find_key(m->file, key);
    if (kv && (kv->type == GGUF_VT_ARRAY || strcmp(array, period_key))) {
        if (kv->type != GGUF_VT_ARRAY || (kv->v.arr.type != GGUF_VT_BOOL &&
            kv->v.arr.type != GGUF_VT_U8 && kv->v.arr.type != GGUF_VT_I8) ||
            (kv->v.arr.n != (uint64_t)m->n_layer &&
             kv->v.arr.n != (uint64_t)(m->n_layer + m->n_nextn)))
            return al_error(AL_ERR_FORMAT, "%s: %s must be %d bools (one per layer)",
                            m->file->path, key, m->n_layer + m->n_nextn);
        for (int il = 0; il < m->n_layer; il++)
            out[il] = ((const uint8_t *)kv->v.arr.data)[il] != 0;
        return AL_OK;
    }
    int period;
    al_status st = model_get_u32(m, period_key, (uint32_t)dflt, false, &period);
    if (st != AL_OK) return st;
    if (period <= 0)
        return al_error(AL_ERR_FORMAT, "%s: %s.%s = %d must be positive", m->file->path,
                        m->arch, period_key, period);
    for (int il = 0; il < m->n_layer; il++) out[il] = (il + 1) % period != 0;
    return AL_OK;
}

/* Which layers slide: ARCH.attention.sliding_window_pattern, a period or one bool per
 * layer; absent, the descriptor's period. */
static al_status read_swa_pattern(al_model *m) {
    bool *swa = al_malloc((size_t)m->n_layer * sizeof *swa);
    if (!swa) return al_error(AL_ERR_NOMEM, "out of memory for %d layers", m->n_layer);
    al_status st = model_layer_pattern(m, "attention.sliding_window_pattern",
                                      "attention.sliding_window_pattern", m->ad->swa_period, swa);
    for (int il = 0; st == AL_OK && il < m->n_layer; il++) m->layers[il].swa = swa[il];
    al_free(swa);
    return st;
}

/* Sliding-window attention (ARCH_SLIDING): the window, the layers and their rope. */
static al_status read_sliding(al_model *m) {
    if (!(m->ad->flags & ARCH_SLIDING)) return AL_OK;
    al_status st;
    if ((st = model_get_u32(m, "attention.sliding_window", 0, true, &m->swa_window)))
        return st;
    if (m->swa_window <= 0)
        return al_error(AL_ERR_FORMAT, "%s: %s.attention.sliding_window must be positive",
                        m->file->path, m->arch);
    m->rope_swa = m->rope;
    m->rope_swa.freq_scale = 1.0f; /* linear scaling stretches the global layers only */
    const float base_swa = m->ad->rope_base_swa > 0 ? m->ad->rope_base_swa : m->rope.freq_base;
    if ((st = get_arch_f32(m, "rope.freq_base_swa", base_swa, &m->rope_swa.freq_base)))
        return st;
    if (!(m->rope_swa.freq_base > 0))
        return al_error(AL_ERR_FORMAT, "%s: rope.freq_base_swa %g must be positive",
                        m->file->path, (double)m->rope_swa.freq_base);
    return AL_OK;
}

/* Mixture of experts (ARCH_MOE): how many experts, how many each token uses, and the
 * width of one. */
static al_status read_moe(al_model *m) {
    if (!(m->ad->flags & ARCH_MOE)) return AL_OK;
    al_status st;
    if ((st = model_get_u32(m, "expert_count", 0, true, &m->n_expert)) ||
        (st = model_get_u32(m, "expert_used_count", 0, true, &m->n_expert_used)) ||
        (st = model_get_u32(m, "expert_feed_forward_length", 0, true, &m->n_ff_exp)))
        return st;
    if (arch_tensor_of(m->ad, L_GATE_SHEXP) &&
        (st = model_get_u32(m, "expert_shared_feed_forward_length", (uint32_t)m->n_ff, false,
                           &m->n_ff_shexp)))
        return st;
    if (m->n_expert <= 0 || m->n_expert > 4096 || m->n_expert_used <= 0 ||
        m->n_expert_used > m->n_expert || m->n_ff_exp <= 0 || m->n_ff_shexp < 0)
        return al_error(AL_ERR_FORMAT, "%s: expert_count %d, expert_used_count %d, "
                        "expert_feed_forward_length %d: expected 0 < used <= count <= 4096 "
                        "and a positive length", m->file->path, m->n_expert,
                        m->n_expert_used, m->n_ff_exp);
    return AL_OK;
}

static al_status read_hparams(al_model *m) {
    const char *path = m->file->path;
    al_status st;
    if ((st = model_get_u32(m, "embedding_length", 0, true, &m->n_embd)) ||
        (st = model_get_u32(m, "block_count", 0, true, &m->n_layer)) ||
        (st = model_get_u32(m, "feed_forward_length", 0, true, &m->n_ff)) ||
        (st = model_get_u32(m, "attention.head_count", 0, true, &m->n_head)) ||
        (st = model_get_u32(m, "context_length", 2048, false, &m->n_ctx_train)) ||
        (st = get_arch_f32(m, "attention.layer_norm_rms_epsilon", m->ad->norm_eps,
                           &m->norm_eps)) ||
        (st = get_arch_f32(m, "rope.freq_base", m->ad->rope_base, &m->rope.freq_base)) ||
        (st = get_arch_f32(m, "final_logit_softcapping", 0.0f, &m->softcap)))
        return st;
    if (m->n_embd <= 0 || m->n_layer <= 0 || m->n_ff <= 0 || m->n_head <= 0)
        return al_error(AL_ERR_FORMAT, "%s: embedding_length, block_count, "
                        "feed_forward_length and head_count must be positive", path);
    /* next-token-prediction blocks follow the trunk's; decoding does not run them */
    if ((st = model_get_u32(m, "nextn_predict_layers", 0, false, &m->n_nextn))) return st;
    if (m->n_nextn < 0 || m->n_nextn >= m->n_layer)
        return al_error(AL_ERR_FORMAT, "%s: nextn_predict_layers %d must be below block_count "
                        "%d", path, m->n_nextn, m->n_layer);
    m->n_layer -= m->n_nextn;
    if ((st = model_get_u32(m, "attention.head_count_kv", (uint32_t)m->n_head, false,
                           &m->n_head_kv)))
        return st;
    if (m->n_head_kv <= 0 || m->n_head % m->n_head_kv != 0)
        return al_error(AL_ERR_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d",
                        path, m->n_head, m->n_head_kv);
    if ((st = read_head_dim(m))) return st;
    if (!(m->norm_eps > 0 && m->norm_eps < 1))
        return al_error(AL_ERR_FORMAT, "%s: layer_norm_rms_epsilon %g is out of range", path,
                        (double)m->norm_eps);
    if (!(m->rope.freq_base > 0))
        return al_error(AL_ERR_FORMAT, "%s: rope.freq_base %g must be positive", path,
                        (double)m->rope.freq_base);
    if (!(m->softcap >= 0 && m->softcap < INFINITY))
        return al_error(AL_ERR_FORMAT, "%s: final_logit_softcapping %g must be a positive "
                        "number", path, (double)m->softcap);
    if ((st = read_moe(m))) return st;
    if ((st = hybrid_read(m))) return st;
    m->rope.neox = (m->ad->flags & ARCH_ROPE_NEOX) != 0;
    m->embd_scale = m->ad->flags & ARCH_EMBD_SCALE ? sqrtf((float)m->n_embd) : 1.0f;
    if ((st = read_rope_scaling(m))) return st;
    return read_sliding(m);
}

/* ---- binding tensors ------------------------------------------------------------- */

al_status model_own(al_model *m, void *p, const char *what) {
    void **owned = p ? al_realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *owned) : NULL;
    if (!owned) {
        al_free(p);
        return al_error(AL_ERR_NOMEM, "out of memory for a copy of '%s'", what);
    }
    m->owned = owned;
    m->owned[m->n_owned++] = p;
    return AL_OK;
}

/* Replaces a small weight stored in another type by an owned f32 copy (the ops read
 * vectors and the convolution's taps as f32). */
al_status model_own_f32(al_model *m, const char *name, al_tensor *t) {
    if (t->type == AL_TYPE_F32 || !t->data) return AL_OK;
    const int64_t n = t->ne[0] * t->ne[1];
    float *copy = al_malloc((size_t)n * sizeof(float));
    al_status st = model_own(m, copy, name);
    if (st != AL_OK) return st;
    for (int64_t r = 0; r < t->ne[1]; r++)
        quant_dequantize(t->type, (const uint8_t *)t->data + r * t->row_bytes,
                         copy + r * t->ne[0], t->ne[0]);
    *t = (al_tensor){.type = AL_TYPE_F32, .ne = {t->ne[0], t->ne[1]}, .data = copy,
                     .row_bytes = (uint64_t)t->ne[0] * sizeof(float)};
    return AL_OK;
}

/* Finds a tensor and checks its shape: ne0 x ne1 (ne1 = 0 for a vector), or ne0 x
 * ne1 x ne2 stacked matrices (ne2 > 0), bound as ne1 * ne2 rows. Missing optional
 * tensors leave out zeroed. */
static al_status bind3(al_model *m, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
                       bool optional, al_tensor *out) {
    const char *path = m->file->path;
    memset(out, 0, sizeof *out);
    const gguf_tensor *t = gguf_find_tensor(m->file, name);
    if (!t) {
        if (optional) return AL_OK;
        return al_error(AL_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
    }
    int64_t want1 = ne1 ? ne1 : 1, want2 = ne2 ? ne2 : 1;
    bool ok = t->ne[0] == ne0 && t->ne[1] == want1 && t->ne[2] == want2 && t->ne[3] == 1 &&
              (ne2 ? t->n_dims == 3 : ne1 ? t->n_dims <= 2 : t->n_dims == 1);
    if (!ok)
        return al_error(AL_ERR_FORMAT,
                        "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, "
                        "%lld, %lld]", path, name, (long long)t->ne[0], (long long)t->ne[1],
                        (long long)t->ne[2], (long long)t->ne[3], (long long)ne0,
                        (long long)want1, (long long)want2);
    const quant_traits *tr = quant_get_traits(t->type);
    if (!tr || !tr->dequantize)
        return al_error(AL_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s (%u), which is not "
                        "supported for weights", path, name, quant_type_name(t->type), t->type);
    *out = (al_tensor){.type = t->type, .ne = {t->ne[0], want1 * want2}, .data = (void *)t->data,
                       .row_bytes = quant_row_bytes(t->type, t->ne[0])};
    /* vectors are read as f32 by every op; the rare file storing them otherwise gets a
     * small owned copy */
    if (ne1 == 0) return model_own_f32(m, name, out);
    return AL_OK;
}

static al_status bind(al_model *m, const char *name, int64_t ne0, int64_t ne1, bool optional,
                      al_tensor *out) {
    return bind3(m, name, ne0, ne1, 0, optional, out);
}

int64_t model_dim(const al_model *m, arch_dim d) {
    switch (d) {
    case D_ONE: return 0;
    case D_EMBD: return m->n_embd;
    case D_Q: return (int64_t)m->n_head * m->head_dim;
    case D_KV: return (int64_t)m->n_head_kv * m->head_dim;
    case D_HEAD: return m->head_dim;
    case D_FF: return m->n_ff;
    case D_EXPERT: return m->n_expert;
    case D_FF_EXP: return m->n_ff_exp;
    case D_N_HEAD: return m->n_head;
    case D_Q_GATE: return 2 * (int64_t)m->n_head * m->head_dim;
    case D_SSM_CONV: return 2 * (int64_t)m->ssm_k_heads * m->ssm_state + m->ssm_inner;
    case D_SSM_INNER: return m->ssm_inner;
    case D_SSM_STATE: return m->ssm_state;
    case D_SSM_VHEADS: return m->ssm_v_heads;
    case D_SSM_KERNEL: return m->ssm_kernel;
    case D_FF_SHEXP: return m->n_ff_shexp;
    case D_SSM_QKVZ: return 2 * (int64_t)m->ssm_k_heads * m->ssm_state + 2 * (int64_t)m->ssm_inner;
    case D_SSM_BA: return 2 * (int64_t)m->ssm_v_heads;
    }
    return 0;
}

/* Binds layer il's tensors as the architecture's table lists them. */
static al_status bind_layer(al_model *m, int il, layer_weights *l) {
    l->recr = m->recr && m->recr[il];
    for (int i = 0; i < m->ad->n_layer_tensors; i++) {
        const arch_tensor *at = &m->ad->layer[i];
        if (at->where != W_ALL && (at->where == W_RECR) != l->recr) continue;
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", il, at->name);
        al_status st = bind3(m, name, model_dim(m, at->ne0), model_dim(m, at->ne1),
                             model_dim(m, at->ne2), !at->required, &l->t[at->slot]);
        if (st == AL_OK && at->slot == L_SSM_CONV) st = model_own_f32(m, name, &l->t[at->slot]);
        if (st != AL_OK) return st;
    }
    return hybrid_bind_layer(m, il, l);
}

static al_status bind_weights(al_model *m) {
    const gguf_tensor *emb = gguf_find_tensor(m->file, "token_embd.weight");
    if (!emb) return al_error(AL_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing",
                              m->file->path);
    if (emb->ne[1] <= 0 || emb->ne[1] > (1 << 24))
        return al_error(AL_ERR_FORMAT, "%s: token_embd.weight has %lld rows", m->file->path,
                        (long long)emb->ne[1]);
    m->n_vocab = (int)emb->ne[1];
    al_status st;
    if ((st = bind(m, "token_embd.weight", m->n_embd, m->n_vocab, false, &m->tok_embd)) ||
        (st = bind(m, "output_norm.weight", m->n_embd, 0, false, &m->output_norm)) ||
        (st = bind(m, "output.weight", m->n_embd, m->n_vocab, true, &m->output)))
        return st;
    m->tied = !m->output.data;
    if (m->tied) m->output = m->tok_embd;

    al_tensor freqs;
    if ((st = bind(m, "rope_freqs.weight", m->rope.n_rot / 2, 0, true, &freqs))) return st;
    if (freqs.data && m->yarn_factors)
        return al_error(AL_ERR_UNSUPPORTED, "%s: rope_freqs.weight with YaRN scaling is not "
                        "supported", m->file->path);
    if (freqs.data) m->rope.freq_factors = freqs.data;
    /* rope divides each angle by its factor */
    for (int i = 0; freqs.data && i < m->rope.n_rot / 2; i++)
        if (!(m->rope.freq_factors[i] > 0 && m->rope.freq_factors[i] < INFINITY))
            return al_error(AL_ERR_FORMAT, "%s: rope_freqs.weight[%d] = %g is not a positive "
                            "number", m->file->path, i, (double)m->rope.freq_factors[i]);

    /* each block has several tensors: a count beyond the file's is refused before it
     * sizes an allocation (block_count = 2^30 asked for 600 GB) */
    if ((uint64_t)m->n_layer > m->file->n_tensors)
        return al_error(AL_ERR_FORMAT, "%s: block_count %d exceeds the file's %llu tensors",
                        m->file->path, m->n_layer, (unsigned long long)m->file->n_tensors);
    m->layers = al_calloc((size_t)m->n_layer, sizeof *m->layers);
    if (!m->layers) return al_error(AL_ERR_NOMEM, "out of memory for %d layers", m->n_layer);
    for (int il = 0; il < m->n_layer; il++)
        if ((st = bind_layer(m, il, &m->layers[il]))) return st;
    return m->ad->flags & ARCH_SLIDING ? read_swa_pattern(m) : AL_OK;
}

/* Rows per view of layer slot `slot`: one expert's rows in a stacked tensor (model
 * code takes each expert as a view), else all of them. */
static int64_t layer_view_rows(const al_model *m, int slot, const al_tensor *t) {
    for (int i = 0; i < m->ad->n_layer_tensors; i++) {
        const arch_tensor *at = &m->ad->layer[i];
        if ((int)at->slot == slot && at->ne2 != D_ONE) return model_dim(m, at->ne1);
    }
    return t->ne[1];
}

/* Hands every weight to the backend (a GPU copies or imports them), then offers the
 * ones only matmul reads for a layout of the backend's own (weight_pack). The
 * embedding table is read by rows (get_rows) and stays as it is; a tied output matrix,
 * the same table, is offered as the output, so that the backend may keep a copy for
 * matmul beside the rows. */
static al_status load_weights(al_model *m, const al_model_params *p) {
    al_backend *be = m->be;
    al_status (*load)(al_backend *, al_tensor *) = be->ops->weight_load;
    al_status (*pack)(al_backend *, al_tensor *, int64_t) = be->ops->weight_pack;
    if (!load && !pack) return AL_OK;
    al_status st;
    if (load && ((st = load(be, &m->tok_embd)) || (st = load(be, &m->output_norm)))) return st;
    if (m->tied)
        m->output = m->tok_embd;
    else if (load && (st = load(be, &m->output)))
        return st;
    if (pack && (st = pack(be, &m->output, m->output.ne[1]))) return st;
    for (int il = 0; il < m->n_layer; il++) {
        for (int i = 0; i < L_COUNT; i++) {
            al_tensor *t = &m->layers[il].t[i];
            if (!t->data) continue;
            if (load && (st = load(be, t))) return st;
            if (pack && (st = pack(be, t, layer_view_rows(m, i, t)))) return st;
        }
        if (p->progress) p->progress(p->progress_user, (il + 1.0) / m->n_layer);
    }
    return AL_OK;
}

/* Whether the backend can run this model's shape (backend.h: supports). */
static al_status check_backend(const al_model *m) {
    al_model_shape shape = {
        .n_vocab = m->n_vocab, .n_embd = m->n_embd, .n_ff = m->n_ff, .n_head = m->n_head,
        .n_head_kv = m->n_head_kv, .head_dim = m->head_dim, .n_rot = m->rope.n_rot,
        .max_batch = MAX_BATCH,
        .logit_rows = LOGIT_ROWS,
    };
    const al_backend_ops *op = m->be->ops;
    if (m->ad->flags & ARCH_HYBRID && (!op->delta_net || !op->ssm_conv || !op->sigmoid_mul))
        return al_error(AL_ERR_UNSUPPORTED, "%s: the %s backend has no gated delta-net ops "
                        "yet (%s needs them)", m->file->path, op->name, m->arch);
    return backend_supports(m->be, &shape);
}

/* Creates the backend, checks that it can run the model and hands it the weights.
 * With "auto", a GPU that cannot run the model (a shader limit) or take the weights
 * (too little memory, a type it has no shaders for) gives way to the CPU, which uses
 * them from the mapping: the weights are bound afresh, since the GPU may have
 * replaced some with its own buffers before it failed. */
static al_status backend_and_weights(al_model *m, const al_model_params *p) {
    al_status st = backend_create(p->backend, p->n_threads, p, &m->be);
    if (st != AL_OK) return st;
    const bool runs = (st = check_backend(m)) == AL_OK;
    if (runs) st = load_weights(m, p);
    const bool gpu = strcmp(m->be->ops->name, "cpu") != 0;
    if (st == AL_OK || !gpu || !p->backend || strcmp(p->backend, "auto")) return st;
    al_log(AL_LOG_WARN, "the GPU (%s) cannot %s (%s); using the CPU", m->be->desc,
            runs ? "take the weights" : "run this model", al_last_error());
    m->be->ops->destroy(m->be);
    m->be = NULL;
    al_free(m->layers);
    m->layers = NULL;
    if ((st = bind_weights(m)) != AL_OK) return st;
    return backend_create("cpu", p->n_threads, p, &m->be);
}

/* ---- model ------------------------------------------------------------------------ */

static bool has_slot(const al_model *m, arch_slot slot) {
    return m->layers[0].t[slot].data != NULL;
}

/* One line on what the architecture does beyond llama's blocks, for `info`. */
static void describe_features(al_model *m) {
    char *f = m->features;
    size_t n = sizeof m->features, len = 0;
#define ADD(...) (len += len < n ? (size_t)snprintf(f + len, n - len, __VA_ARGS__) : 0)
    ADD("%s rope (base %g)", m->rope.neox ? "neox" : "normal", (double)m->rope.freq_base);
    if (m->rope.freq_scale != 1.0f) ADD(", rope scale 1/%g", 1.0 / m->rope.freq_scale);
    if (m->yarn_factors) ADD(", YaRN rope scaling");
    else if (m->rope.freq_factors) ADD(", rope frequency factors");
    if (has_slot(m, L_BQ)) ADD(", QKV bias");
    if (has_slot(m, L_BO)) ADD(", attention output bias");
    if (has_slot(m, L_SINKS)) ADD(", attention sinks");
    if (has_slot(m, L_Q_NORM)) ADD(", per-head Q/K norm");
    if (has_slot(m, L_ATTN_POST_NORM)) ADD(", post-attention norm");
    if (has_slot(m, L_FFN_POST_NORM)) ADD(", post-FFN norm");
    ADD(", %s FFN", m->ad->act == ACT_GELU ? "GELU-gated" : m->ad->act == ACT_SILU ? "SiLU-gated" : "clamped SwiGLU");
    if (m->n_expert)
        ADD(" of %d experts, %d per token (width %d)", m->n_expert, m->n_expert_used,
            m->n_ff_exp);
    if (has_slot(m, L_GATE_SHEXP))
        ADD(" and a sigmoid-gated shared expert (width %d)", m->n_ff_shexp);
    if (m->embd_scale != 1.0f) ADD(", embeddings x %.4g", (double)m->embd_scale);
    if (m->swa_window) {
        int n_swa = 0;
        for (int il = 0; il < m->n_layer; il++) n_swa += m->layers[il].swa;
        ADD(", sliding window %d on %d of %d layers (rope base %g)", m->swa_window, n_swa,
            m->n_layer, (double)m->rope_swa.freq_base);
    }
    if (m->softcap > 0) ADD(", logit soft-cap %g", (double)m->softcap);
    if (m->ad->flags & ARCH_HYBRID) {
        int n_recr = 0;
        for (int il = 0; il < m->n_layer; il++) n_recr += m->layers[il].recr;
        ADD(", gated delta-net on %d of %d layers (conv %d, %d key / %d value heads of %d%s, "
            "recurrent state), gated attention with %d of %d dims rotating", n_recr,
            m->n_layer, m->ssm_kernel, m->ssm_k_heads, m->ssm_v_heads, m->ssm_state,
            m->ad->flags & ARCH_GDN_GROUPED ? " grouped" : "", m->rope.n_rot, m->head_dim);
    }
    if (m->n_nextn) ADD(", %d next-token-prediction block%s (not run)", m->n_nextn,
                        m->n_nextn > 1 ? "s" : "");
    ADD(", %s output", m->tied ? "tied" : "separate");
#undef ADD
}

al_model_params al_model_default_params(void) {
    return (al_model_params){
        .n_threads = 0,
        .backend = NULL,
        .cpu = {.amx = -1, .x16 = -1, .x16_prefetch = -1, .moe_fuse = -1, .fuse = -1},
        .vulkan = {.timeout_ms = -1},
    };
}

static al_status read_arch(al_model *m) {
    gguf_str arch;
    al_status st = gguf_get_str(m->file, "general.architecture", &arch);
    if (st != AL_OK) return st;
    char name[64], list[128];
    gguf_str_copy(arch, name, sizeof name);
    m->ad = arch.n < sizeof name ? arch_find(name) : NULL;
    if (m->ad) {
        snprintf(m->arch, sizeof m->arch, "%s", name);
        return AL_OK;
    }
    return al_error(AL_ERR_UNSUPPORTED, "%s: general.architecture '%s' is not supported "
                    "(supported: %s)", m->file->path, name, arch_names(list, sizeof list));
}

/* The tokenizer and chat template. A model whose tokenizer cannot be used still
 * computes logits from token ids, so only running out of memory fails the load; the
 * reason is kept for al_model_vocab's callers. */
static al_status load_text_parts(al_model *m) {
    al_status st = vocab_from_gguf(m->file, &m->vocab);
    if (st == AL_ERR_NOMEM) return st;
    if (st != AL_OK) snprintf(m->vocab_error, sizeof m->vocab_error, "%s", al_last_error());
    /* Token ids index the embedding rows and every caller sizes logits by one of the
     * two counts: if they differ, ids past the table or logits past a buffer follow.
     * output.weight was bound with token_embd's row count, so one check covers it. */
    if (m->vocab && al_vocab_n_tokens(m->vocab) != m->n_vocab)
        return al_error(AL_ERR_FORMAT, "%s: the tokenizer has %d tokens (tokenizer.ggml.tokens) "
                        "but tensor 'token_embd.weight' has %d rows%s; they must be equal",
                        m->file->path, al_vocab_n_tokens(m->vocab), m->n_vocab,
                        !m->tied ? " (and 'output.weight' too)" : "");
    const gguf_kv *kv = gguf_find_key(m->file, "tokenizer.chat_template");
    if (kv && kv->type == GGUF_VT_STRING) {
        m->chat_template = al_malloc(kv->v.str.n + 1);
        if (!m->chat_template) return al_error(AL_ERR_NOMEM, "out of memory for the chat template");
        gguf_str_copy(kv->v.str, m->chat_template, kv->v.str.n + 1);
    }
    return AL_OK;
}

const al_vocab *al_model_vocab(const al_model *m) {
    if (!m) {
        al_error(AL_ERR_ARG, "al_model_vocab: model is NULL");
        return NULL;
    }
    if (!m->vocab) al_error(AL_ERR_UNSUPPORTED, "%s", m->vocab_error);
    return m->vocab;
}

const char *al_model_chat_template(const al_model *m) { return m ? m->chat_template : NULL; }

al_status al_model_load(const char *path, const al_model_params *params, al_model **out) {
    if (!out) return al_error(AL_ERR_ARG, "al_model_load: out is NULL");
    *out = NULL;
    if (!path) return al_error(AL_ERR_ARG, "al_model_load: path is NULL");
    al_model_params p = params ? *params : al_model_default_params();
    const double t0 = al_time_s();
    al_model *m = al_calloc(1, sizeof *m);
    if (!m) return al_error(AL_ERR_NOMEM, "out of memory loading %s", path);
    al_status st;
    if ((st = gguf_open(path, &m->file)) || (st = read_arch(m)) || (st = read_hparams(m)) ||
        (st = bind_weights(m)) || (st = backend_and_weights(m, &p)))
        goto fail;
    for (uint64_t i = 0; i < m->file->n_tensors; i++) {
        m->n_params += m->file->tensors[i].n_elem;
        m->n_bytes += m->file->tensors[i].n_bytes;
    }
    if ((st = load_text_parts(m)) != AL_OK) goto fail;
    describe_features(m);
    m->load_s = al_time_s() - t0;
    *out = m;
    return AL_OK;
fail:
    al_model_destroy(m);
    return st;
}

void al_model_destroy(al_model *m) {
    if (!m) return;
    if (m->be) m->be->ops->destroy(m->be);
    al_vocab_destroy(m->vocab);
    al_free(m->chat_template);
    al_free(m->yarn_factors);
    for (int i = 0; i < m->n_owned; i++) al_free(m->owned[i]);
    al_free(m->owned);
    al_free(m->layers);
    al_free(m->recr);
    gguf_close(m->file);
    al_free(m);
}

static uint64_t tensor_bytes(const al_tensor *t) {
    return t->data ? t->row_bytes * (uint64_t)t->ne[1] : 0;
}

/* Weight bytes one token's forward pass reads: the embedding table contributes one
 * row, every other weight all of its bytes (the output matrix even when it is the
 * tied embedding table). */
static uint64_t bytes_per_token(const al_model *m) {
    uint64_t n = m->tok_embd.row_bytes + tensor_bytes(&m->output) + tensor_bytes(&m->output_norm);
    for (int il = 0; il < m->n_layer; il++)
        for (int i = 0; i < L_COUNT; i++) {
            const bool expert = m->n_expert && (i == L_GATE_EXPS || i == L_UP_EXPS ||
                                                  i == L_DOWN_EXPS);
            const uint64_t b = tensor_bytes(&m->layers[il].t[i]);
            /* a token reads only the experts it is routed to */
            n += expert ? b / (uint64_t)m->n_expert * (uint64_t)m->n_expert_used : b;
        }
    return n;
}

void al_model_get_info(const al_model *m, al_model_info *out) {
    if (!out) return;
    if (!m) {
        *out = (al_model_info){0};
        return;
    }
    *out = (al_model_info){
        .arch = m->arch, .n_vocab = m->n_vocab, .n_ctx_train = m->n_ctx_train,
        .n_embd = m->n_embd, .n_layer = m->n_layer, .n_head = m->n_head,
        .n_head_kv = m->n_head_kv, .head_dim = m->head_dim, .n_ff = m->n_ff,
        .n_params = m->n_params, .n_bytes = m->n_bytes,
        .n_bytes_per_token = bytes_per_token(m),
        .backend = m->be->desc[0] ? m->be->desc : m->be->ops->name,
        .n_bytes_copied = m->be->n_bytes_copied,
        .features = m->features,
        .load_s = m->load_s,
    };
    for (int il = 0; il < m->n_layer; il++) out->n_recurrent += m->layers[il].recr;
    if (out->n_recurrent) out->state_bytes = hybrid_state_bytes(m);
}

const gguf_file *model_file(const al_model *m) { return m->file; }

al_backend *model_backend(const al_model *m) { return m->be; }

void al_model_get_backend_stats(const al_model *m, al_backend_stats *out) {
    if (!out) return;
    *out = (al_backend_stats){0};
    if (m && m->be->ops->stats) m->be->ops->stats(m->be, out);
}

int al_model_get_dispatch_times(const al_model *m, al_dispatch_time *out, int max) {
    if (!m || !m->be->ops->dispatch_times) return 0;
    return m->be->ops->dispatch_times(m->be, out, out && max > 0 ? max : 0); /* or a count */
}

/* Rows of layer il's KV cache in a context of n_ctx positions: all of them, or for a
 * sliding layer its window plus one batch, as a ring (backend.h: al_attn_shape). The
 * batch's worth beyond the window also lets a context be cut back by up to a batch
 * (al_context_truncate) without losing what the window needs. */
static int layer_cap(const al_model *m, int il, int n_ctx) {
    if (m->layers[il].recr) return 0; /* a recurrent layer keeps a state instead */
    if (!m->layers[il].swa) return n_ctx;
    const int n_batch = n_ctx < MAX_BATCH ? n_ctx : MAX_BATCH;
    const int64_t cap = (int64_t)m->swa_window + n_batch;
    return cap < n_ctx ? (int)cap : n_ctx;
}

/* Bytes of keys and values in rows cache rows (summed over the layers). */
static uint64_t kv_rows_bytes(const al_model *m, uint64_t rows) {
    return 2ull * rows * (uint64_t)m->n_head_kv * (uint64_t)m->head_dim * sizeof(float);
}

uint64_t model_kv_bytes(const al_model *m, int n_ctx) {
    uint64_t rows = 0;
    for (int il = 0; il < m->n_layer; il++) rows += (uint64_t)layer_cap(m, il, n_ctx);
    return kv_rows_bytes(m, rows) + hybrid_state_bytes(m);
}

/* ---- context ------------------------------------------------------------------------ */

static al_status same_shape(const al_model *a, const al_model *b, const char *what);

al_context_params al_context_default_params(void) {
    return (al_context_params){.n_ctx = 0};
}

/* Bytes the kernel says it can still hand out (MemAvailable), or 0 if unknown. */
static uint64_t host_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    fclose(f);
    return (uint64_t)kib * 1024;
}

/* The CPU backend's KV cache lives in host memory: one that cannot fit is refused here,
 * at once, rather than failing page by page later or dragging the machine into swap
 * and the OOM killer. A GPU backend checks its own heaps when it allocates. */
static al_status check_kv_memory(const al_model *m, int n_ctx) {
    if (strcmp(m->be->ops->name, "cpu") != 0) return AL_OK;
    uint64_t avail = host_mem_available();
    if (avail == 0) return AL_OK; /* not Linux: let the allocation decide */
    const uint64_t margin = 64ull << 20; /* scratch, logits and the rest of the process */
    uint64_t kv = model_kv_bytes(m, n_ctx);
    if (kv + margin <= avail) return AL_OK;
    return al_error(AL_ERR_NOMEM, "a context of %d positions needs %.1f MiB of KV cache "
                    "(plus %.0f MiB margin) but only %.1f MiB of memory is available "
                    "(MemAvailable); use a smaller context", n_ctx, kv / 1048576.0,
                    margin / 1048576.0, avail / 1048576.0);
}

/* Layer il's caches over peer's memory: the pages the host sees behind peer's tensors
 * (tensor_host), imported by this context's backend (tensor_import). */
static al_status kv_import_layer(al_context *c, const al_context *peer, int il) {
    al_backend *pb = peer->be, *be = c->be;
    const al_tensor *from[2] = {&peer->k_cache[il], &peer->v_cache[il]};
    al_tensor *to[2] = {&c->k_cache[il], &c->v_cache[il]};
    for (int i = 0; i < 2; i++) {
        uint64_t n_bytes = 0;
        void *host = pb->ops->tensor_host ? pb->ops->tensor_host(pb, from[i], &n_bytes) : NULL;
        if (!host)
            return al_error(AL_ERR_UNSUPPORTED, "the host cannot address the KV cache on %s",
                            pb->desc);
        if (!be->ops->tensor_import)
            return al_error(AL_ERR_UNSUPPORTED, "%s cannot use host memory in place", be->desc);
        al_status st = be->ops->tensor_import(be, host, n_bytes, from[i]->ne[0], from[i]->ne[1],
                                              to[i]);
        if (st != AL_OK) return st;
    }
    return AL_OK;
}

static void kv_free(al_context *c) {
    for (int il = 0; il < c->m->n_layer; il++) {
        if (c->k_cache && c->k_cache[il].data) c->be->ops->tensor_free(c->be, &c->k_cache[il]);
        if (c->v_cache && c->v_cache[il].data) c->be->ops->tensor_free(c->be, &c->v_cache[il]);
    }
}

/* The KV cache: peer's memory where both backends see it (al_context_params.
 * kv_shared_with), else memory of this context's own, which al_context_handoff
 * copies into. */
static al_status kv_alloc(al_context *c, const al_context *peer) {
    const al_model *m = c->m;
    al_backend *be = c->be;
    const int64_t kvd = (int64_t)m->n_head_kv * m->head_dim;
    al_status st = AL_OK;
    c->k_cache = al_calloc((size_t)m->n_layer, sizeof *c->k_cache);
    c->v_cache = al_calloc((size_t)m->n_layer, sizeof *c->v_cache);
    if (!c->k_cache || !c->v_cache) return al_error(AL_ERR_NOMEM, "out of memory for KV cache");
    /* a recurrent layer has no cache to share: its state is each context's own, and
     * al_context_handoff copies it */
    for (int il = 0; peer && il < m->n_layer && st == AL_OK; il++)
        if (peer->k_cache[il].data) st = kv_import_layer(c, peer, il);
    if (peer && st == AL_OK) {
        c->kv_root = peer->kv_root;
        return AL_OK;
    }
    kv_free(c); /* the layers imported before one that could not be */
    c->kv_root = c;
    if ((st = check_kv_memory(m, c->n_ctx))) return st;
    for (int il = 0; il < m->n_layer; il++) {
        const int cap = layer_cap(m, il, c->n_ctx);
        if (cap == 0) continue;
        if ((st = be->ops->tensor_alloc(be, kvd, cap, &c->k_cache[il])) ||
            (st = be->ops->tensor_alloc(be, kvd, cap, &c->v_cache[il])))
            return st;
    }
    return AL_OK;
}

static al_status context_alloc_moe(al_context *c) {
    const al_model *m = c->m;
    al_backend *be = c->be;
    const int64_t nb = c->n_batch;
    const int few = nb < MOE_FEW_TOKENS ? (int)nb : MOE_FEW_TOKENS;
    const int64_t nr = (int64_t)few * m->n_expert_used > nb ? (int64_t)few * m->n_expert_used : nb;
    c->moe_rows = (int)nr;
    al_status st;
    if ((st = be->ops->tensor_alloc(be, m->n_expert, nb, &c->router)) ||
        (st = be->ops->tensor_alloc(be, m->n_embd, nr, &c->xe)) ||
        (st = be->ops->tensor_alloc(be, m->n_embd, nr, &c->ye)) ||
        (st = be->ops->tensor_alloc(be, m->n_ff_exp, nr, &c->he)) ||
        (st = be->ops->tensor_alloc(be, m->n_ff_exp, nr, &c->he2)))
        return st;
    c->router_host = al_malloc((size_t)nb * m->n_expert * sizeof *c->router_host);
    c->sel = al_malloc((size_t)nb * m->n_expert_used * sizeof *c->sel);
    c->sel_w = al_malloc((size_t)nb * m->n_expert_used * sizeof *c->sel_w);
    c->rows = al_malloc((size_t)nr * sizeof *c->rows);
    c->rows_w = al_malloc((size_t)nr * sizeof *c->rows_w);
    if (!c->router_host || !c->sel || !c->sel_w || !c->rows || !c->rows_w)
        return al_error(AL_ERR_NOMEM, "out of memory for the expert routing");
    return AL_OK;
}

static al_status context_alloc(al_context *c, const al_context *peer) {
    const al_model *m = c->m;
    al_backend *be = c->be;
    int64_t nb = c->n_batch, qd = (int64_t)m->n_head * m->head_dim;
    int64_t kvd = (int64_t)m->n_head_kv * m->head_dim;
    const int64_t n_ff = m->n_ff > m->n_ff_shexp ? m->n_ff : m->n_ff_shexp; /* hb: either FFN */
    al_status st;
    if ((st = kv_alloc(c, peer))) return st;
    if ((st = be->ops->tensor_alloc(be, m->n_embd, nb, &c->x)) ||
        (st = be->ops->tensor_alloc(be, m->n_embd, nb, &c->xb)) ||
        (st = be->ops->tensor_alloc(be, qd, nb, &c->q)) ||
        (st = be->ops->tensor_alloc(be, kvd, nb, &c->k)) ||
        (st = be->ops->tensor_alloc(be, kvd, nb, &c->v)) ||
        (st = be->ops->tensor_alloc(be, qd, nb, &c->att)) ||
        (st = be->ops->tensor_alloc(be, n_ff, nb, &c->hb)) ||
        (st = be->ops->tensor_alloc(be, n_ff, nb, &c->hb2)) ||
        (st = be->ops->tensor_alloc(be, m->n_vocab, LOGIT_ROWS, &c->logits)))
        return st;
    if (m->n_expert && (st = context_alloc_moe(c))) return st;
    if (m->ad->flags & ARCH_HYBRID && (st = hybrid_context_alloc(c))) return st;
    c->seq_pos = al_malloc((size_t)nb * sizeof *c->seq_pos);
    c->seq_kc = al_malloc((size_t)nb * sizeof *c->seq_kc);
    c->seq_vc = al_malloc((size_t)nb * sizeof *c->seq_vc);
    if (!c->seq_pos || !c->seq_kc || !c->seq_vc)
        return al_error(AL_ERR_NOMEM, "out of memory for the batch's positions");
    int64_t max_cols = m->n_embd > n_ff ? m->n_embd : n_ff;
    if (qd > max_cols) max_cols = qd;
    if (m->n_ff_exp > max_cols) max_cols = m->n_ff_exp;
    if (m->n_expert > max_cols) max_cols = m->n_expert;
    if (model_dim(m, D_Q_GATE) > max_cols) max_cols = model_dim(m, D_Q_GATE);
    if (model_dim(m, D_SSM_CONV) > max_cols) max_cols = model_dim(m, D_SSM_CONV);
    return be->ops->reserve(be, max_cols, c->n_ctx);
}

uint64_t al_model_kv_bytes(const al_model *m, int n_ctx) {
    return m && n_ctx > 0 ? model_kv_bytes(m, n_ctx) : 0;
}

uint64_t al_model_kv_read_bytes(const al_model *m, int pos) {
    if (!m || pos < 0) return 0;
    uint64_t rows = 0;
    for (int il = 0; il < m->n_layer; il++) {
        const bool win = m->layers[il].swa && m->swa_window > 0 && m->swa_window <= pos;
        if (!m->layers[il].recr) rows += win ? (uint64_t)m->swa_window : (uint64_t)pos + 1;
    }
    return kv_rows_bytes(m, rows) + hybrid_state_bytes(m); /* a state is read whole per token */
}

int al_model_default_n_ctx(const al_model *m) {
    if (!m) return 0;
    int n = m->n_ctx_train > 0 ? m->n_ctx_train : 4096;
    if (strcmp(m->be->ops->name, "cpu") != 0) return n < 4096 ? n : 4096;
    uint64_t budget = host_mem_available() / 2;
    if (budget == 0 || model_kv_bytes(m, n) <= budget) return n;
    /* the KV cache grows with n (sliding layers stop growing at their window) */
    int lo = 1, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (model_kv_bytes(m, mid) <= budget) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

al_status al_context_create(const al_model *m, const al_context_params *params,
                            al_context **out) {
    if (!out) return al_error(AL_ERR_ARG, "al_context_create: out is NULL");
    *out = NULL;
    if (!m) return al_error(AL_ERR_ARG, "al_context_create: model is NULL");
    al_context_params p = params ? *params : al_context_default_params();
    const al_context *peer = p.kv_shared_with;
    al_status st;
    if (peer && (st = same_shape(m, peer->m, "kv_shared_with")) != AL_OK) return st;
    if (peer && p.n_ctx && p.n_ctx != peer->n_ctx) /* the caches' rows must be the same */
        return al_error(AL_ERR_ARG, "al_context_create: n_ctx %d differs from the %d positions "
                        "of the context named by kv_shared_with", p.n_ctx, peer->n_ctx);
    int n_ctx = p.n_ctx;
    if (n_ctx == 0) n_ctx = peer ? peer->n_ctx : al_model_default_n_ctx(m);
    if (n_ctx <= 0 || n_ctx > (1 << 24))
        return al_error(AL_ERR_ARG, "context size %d is out of range [1, %d]", n_ctx, 1 << 24);
    al_context *c = al_calloc(1, sizeof *c);
    if (!c) return al_error(AL_ERR_NOMEM, "out of memory creating a context");
    c->m = m;
    st = backend_for_context(m->be, &c->be); /* a GPU: the context's own stream */
    if (st != AL_OK) {
        al_free(c);
        return st;
    }
    c->n_ctx = n_ctx;
    c->n_batch = n_ctx < MAX_BATCH ? n_ctx : MAX_BATCH;
    c->max_ckpt = p.n_checkpoints < 0 ? 0 : p.n_checkpoints ? p.n_checkpoints : 4;
    st = context_alloc(c, peer);
    if (st != AL_OK) {
        al_context_destroy(c);
        return st;
    }
    *out = c;
    return AL_OK;
}

void al_context_destroy(al_context *c) {
    if (!c) return;
    const al_backend_ops *ops = c->be->ops;
    kv_free(c);
    al_free(c->k_cache);
    al_free(c->v_cache);
    al_tensor *scratch[] = {&c->x, &c->xb, &c->q, &c->k, &c->v, &c->att, &c->hb, &c->hb2,
                            &c->logits, &c->router, &c->xe, &c->ye, &c->he, &c->he2,
                            &c->qg, &c->ssm_qkv, &c->ssm_conv, &c->ssm_z, &c->ssm_o,
                            &c->ssm_alpha, &c->ssm_beta};
    for (size_t i = 0; i < sizeof scratch / sizeof *scratch; i++)
        if (scratch[i]->data) ops->tensor_free(c->be, scratch[i]);
    for (int il = 0; c->conv_state && il < c->m->n_layer; il++) {
        if (c->conv_state[il].data) ops->tensor_free(c->be, &c->conv_state[il]);
        if (c->ssm_state[il].data) ops->tensor_free(c->be, &c->ssm_state[il]);
    }
    al_free(c->conv_state);
    al_free(c->ssm_state);
    hybrid_checkpoints_free(c);
    al_free(c->router_host);
    al_free(c->sel);
    al_free(c->sel_w);
    al_free(c->rows);
    al_free(c->rows_w);
    al_free(c->seq_pos);
    al_free(c->seq_kc);
    al_free(c->seq_vc);
    backend_context_release(c->m->be, c->be);
    al_free(c);
}

int al_context_n_past(const al_context *c) { return c ? c->n_past : 0; }

void al_context_reset(al_context *c) {
    if (!c) return;
    c->n_past = 0;
    c->n_ckpt = 0; /* a new sequence: no position of the old one is reached again */
}

al_status al_context_truncate(al_context *c, int n_past) {
    if (!c) return al_error(AL_ERR_ARG, "al_context_truncate: context is NULL");
    if (n_past < 0 || n_past > c->n_past)
        return al_error(AL_ERR_ARG, "cannot truncate to %d positions: %d are held", n_past,
                        c->n_past);
    /* A sliding layer's ring keeps its last cap positions: the window of position
     * n_past must still be there, else the context starts over (anyllm.h). */
    const al_model *m = c->m;
    /* a recurrent state holds the last position only: an earlier one goes back to a
     * checkpoint, or starts over */
    if (m->ad->flags & ARCH_HYBRID && n_past < c->n_past) n_past = hybrid_restore(c, n_past);
    for (int il = 0; il < m->n_layer && n_past > 0; il++) {
        const int64_t cap = c->k_cache[il].ne[1], lo = n_past - m->swa_window + 1;
        if (m->layers[il].swa && (lo > 0 ? lo : 0) + cap <= (int64_t)c->n_past - 1) n_past = 0;
    }
    c->n_past = n_past; /* later positions are overwritten by the next al_eval */
    return AL_OK;
}

int al_context_n_ctx(const al_context *c) { return c ? c->n_ctx : 0; }

/* ---- forward pass --------------------------------------------------------------------- */

/* Per-head RMSNorm of q or k in place (the Q/K norm of qwen3 and gemma3): the rows
 * are viewed as n_heads rows of head_dim each (backend.h: rms_norm). */
void model_head_norm(const al_model *m, al_backend *be, const al_tensor *x, int n_heads,
                      const al_tensor *w) {
    AL_ASSERT(x->row_bytes == (uint64_t)n_heads * m->head_dim * sizeof(float));
    al_tensor h = *x;
    h.ne[0] = m->head_dim;
    h.ne[1] = x->ne[1] * n_heads;
    h.row_bytes = (uint64_t)m->head_dim * sizeof(float);
    be->ops->rms_norm(be, &h, w, m->norm_eps, &h);
}

/* Rotary positions and attention for rows of one sequence, or of several: when seqs
 * is NULL the n rows are consecutive positions of c; otherwise row i is the next
 * position of seqs[i], attending to that sequence's own cache. */
void model_attend_rows(al_context *c, al_context *const *seqs, int il, int n, al_tensor *q,
                        al_tensor *k, al_tensor *v, al_tensor *att) {
    const al_model *m = c->m;
    al_backend *be = c->be;
    const al_backend_ops *op = be->ops;
    const bool swa = m->layers[il].swa;
    const al_rope *rope = swa ? &m->rope_swa : &m->rope;
    al_attn_shape shape = {.n_head = m->n_head, .n_head_kv = m->n_head_kv,
                           .head_dim = m->head_dim, .n_past = c->n_past, .n_tokens = n,
                           .scale = m->attn_scale, .window = swa ? m->swa_window : 0,
                           .sinks = opt(&m->layers[il].t[L_SINKS])};
    if (!seqs && n > 1) {
        backend_rope_qk(be, q, m->n_head, k, m->n_head_kv, m->head_dim, c->n_past, rope);
        op->attention(be, q, k, v, &c->k_cache[il], &c->v_cache[il], &shape, att);
        return;
    }
    /* decoding, one sequence or several: each row's rope at its sequence's position,
     * its key and value stored, and its attention over its sequence's caches (on a
     * GPU, one dispatch for all of it) */
    for (int i = 0; i < n; i++) {
        al_context *s = seqs ? seqs[i] : c;
        c->seq_pos[i] = s->n_past;
        c->seq_kc[i] = &s->k_cache[il];
        c->seq_vc[i] = &s->v_cache[il];
    }
    backend_attention_rows(be, q, k, v, c->seq_kc, c->seq_vc, c->seq_pos, rope, &shape, att);
}


/* x += [post-norm](in . w + bias): the output projection and the residual add that
 * close each block, xb the scratch. Without a post-norm the add goes into the matmul
 * (backend_matmul_add: one pass on a GPU). */
void model_project_residual(const al_model *m, al_backend *be, const al_tensor *in,
                             const al_tensor *w, const al_tensor *bias, al_tensor *x,
                             al_tensor *xb, const al_tensor *post_norm) {
    if (!post_norm->data) {
        backend_matmul_add(be, in, w, bias, xb, x);
        return;
    }
    be->ops->matmul(be, in, w, bias, xb);
    be->ops->rms_norm(be, xb, post_norm, m->norm_eps, xb);
    be->ops->add(be, x, xb);
}

/* The attention block of layer il over the n rows of c's residual stream (see
 * model_attend_rows for seqs). */
static void attn_block(al_context *c, al_context *const *seqs, int il, int n) {
    const al_model *m = c->m;
    const al_tensor *t = m->layers[il].t;
    al_backend *be = c->be;
    al_tensor x = al_tensor_rows(&c->x, 0, n), xb = al_tensor_rows(&c->xb, 0, n);
    al_tensor q = al_tensor_rows(&c->q, 0, n), k = al_tensor_rows(&c->k, 0, n);
    al_tensor v = al_tensor_rows(&c->v, 0, n), att = al_tensor_rows(&c->att, 0, n);
    /* the attention norm and the q, k and v projections: one dispatch on a GPU */
    const al_tensor *w[3] = {&t[L_WQ], &t[L_WK], &t[L_WV]};
    const al_tensor *b[3] = {opt(&t[L_BQ]), opt(&t[L_BK]), opt(&t[L_BV])};
    al_tensor *qkv[3] = {&q, &k, &v};
    backend_matmul_multi(be, &x, &t[L_ATTN_NORM], m->norm_eps, 3, w, b, &xb, qkv);
    if (t[L_Q_NORM].data) model_head_norm(m, be, &q, m->n_head, &t[L_Q_NORM]);
    if (t[L_K_NORM].data) model_head_norm(m, be, &k, m->n_head_kv, &t[L_K_NORM]);
    model_attend_rows(c, seqs, il, n, &q, &k, &v, &att);
    model_project_residual(m, be, &att, &t[L_WO], opt(&t[L_BO]), &x, &xb, &t[L_ATTN_POST_NORM]);
}

/* The dense FFN block of layer il: a gated SiLU or GELU feed-forward. */
static void ffn_block(al_context *c, int il, int n) {
    const al_model *m = c->m;
    const al_tensor *t = m->layers[il].t;
    al_backend *be = c->be;
    al_tensor x = al_tensor_rows(&c->x, 0, n), xb = al_tensor_rows(&c->xb, 0, n);
    al_tensor hb = al_tensor_rows(&c->hb, 0, n), hb2 = al_tensor_rows(&c->hb2, 0, n);
    /* the FFN norm, gate and up projections and activation: one dispatch on a GPU */
    backend_norm_matmul_glu(be, &x, &t[L_FFN_NORM], m->norm_eps, &t[L_GATE], &t[L_UP],
                            m->ad->act == ACT_GELU ? AL_GLU_GELU : AL_GLU_SILU, &xb, &hb2, &hb);
    model_project_residual(m, be, &hb, &t[L_DOWN], NULL, &x, &xb, &t[L_FFN_POST_NORM]);
}

/* Each token's experts: the n_expert_used largest router logits (the lower index
 * first on ties), weighted by a softmax over just those. That is both qwen3moe's
 * gating (a softmax over all experts, the picked weights renormalised: the full
 * denominator cancels) and gpt-oss's (top k of the raw logits, then a softmax). */
static void route(const al_model *m, const float *logits, int n, int32_t *sel, float *sel_w) {
    const int ne = m->n_expert, k = m->n_expert_used;
    for (int t = 0; t < n; t++) {
        const float *l = logits + (size_t)t * ne;
        int32_t *s = sel + (size_t)t * k;
        float *w = sel_w + (size_t)t * k;
        for (int j = 0; j < k; j++) { /* k is small: a selection pass per pick */
            int best = -1;
            for (int e = 0; e < ne; e++) {
                bool taken = false;
                for (int i = 0; i < j && !taken; i++) taken = s[i] == e;
                if (!taken && (best < 0 || l[e] > l[best])) best = e;
            }
            s[j] = best;
        }
        double sum = 0; /* s[0] holds the largest logit */
        for (int j = 0; j < k; j++) sum += w[j] = (float)exp((double)l[s[j]] - l[s[0]]);
        for (int j = 0; j < k; j++) w[j] = (float)(w[j] / sum);
    }
}

/* The mixture-of-experts FFN of layer il: the router's logits come to the host to pick
 * each token's experts (on a GPU, one wait per layer), then the experts run over the
 * rows routed to them and add their weighted outputs to the residual stream
 * (backend_moe_ffn: all at once where the backend fuses them, else expert by expert). */
static void moe_block(al_context *c, int il, int n) {
    const al_model *m = c->m;
    const al_tensor *t = m->layers[il].t;
    al_backend *be = c->be;
    const al_backend_ops *op = be->ops;
    al_tensor x = al_tensor_rows(&c->x, 0, n), xb = al_tensor_rows(&c->xb, 0, n);
    al_tensor router = al_tensor_rows(&c->router, 0, n);
    op->rms_norm(be, &x, &t[L_FFN_NORM], m->norm_eps, &xb);
    op->matmul(be, &xb, &t[L_GATE_INP], opt(&t[L_GATE_INP_B]), &router);
    op->tensor_read(be, &router, c->router_host, (uint64_t)n * m->n_expert * sizeof(float));
    route(m, c->router_host, n, c->sel, c->sel_w);
    const al_moe moe = {
        .gate = &t[L_GATE_EXPS], .up = &t[L_UP_EXPS], .down = &t[L_DOWN_EXPS],
        .gate_b = opt(&t[L_GATE_EXPS_B]), .up_b = opt(&t[L_UP_EXPS_B]),
        .down_b = opt(&t[L_DOWN_EXPS_B]),
        .n_expert = m->n_expert, .n_used = m->n_expert_used, .n_ff = m->n_ff_exp,
        .act = m->ad->act == ACT_SWIGLU_OAI ? AL_MOE_SWIGLU_OAI : AL_MOE_SILU,
        .alpha = 1.702f, .limit = 7.0f,
        .sel = c->sel, .sel_w = c->sel_w,
        .xe = &c->xe, .ye = &c->ye, .he = &c->he, .he2 = &c->he2,
        .rows = c->rows, .rows_w = c->rows_w, .n_scratch = c->moe_rows,
    };
    backend_moe_ffn(be, &xb, &moe, &x);
    if (t[L_GATE_SHEXP].data) hybrid_shared_expert(c, il, n);
}

/* logits = cap * tanh(logits / cap), on the host copy (Gemma's soft-cap). */
static void soft_cap(float *logits, size_t n, float cap) {
    for (size_t i = 0; i < n; i++) logits[i] = cap * tanhf(logits[i] / cap);
}

/* Runs n rows through the network in c's scratch and writes the logits of rows
 * [first_row, n) to logits (n_vocab each) when logits is not NULL. */
static void forward_rows(al_context *c, al_context *const *seqs, const int32_t *tokens, int n,
                         int first_row, float *logits) {
    const al_model *m = c->m;
    al_backend *be = c->be;
    al_tensor x = al_tensor_rows(&c->x, 0, n), xb = al_tensor_rows(&c->xb, 0, n);
    be->ops->get_rows(be, &m->tok_embd, tokens, n, &x);
    if (m->embd_scale != 1.0f) be->ops->scale(be, &x, m->embd_scale);
    for (int il = 0; il < m->n_layer; il++) {
        if (m->layers[il].recr) hybrid_recurrent_block(c, seqs, il, n);
        else if (m->ad->flags & ARCH_HYBRID) hybrid_attn_block(c, seqs, il, n);
        else attn_block(c, seqs, il, n);
        if (m->n_expert) moe_block(c, il, n);
        else ffn_block(c, il, n);
    }
    if (!logits) return;
    be->ops->rms_norm(be, &x, &m->output_norm, m->norm_eps, &xb);
    for (int r = first_row; r < n; r += LOGIT_ROWS) {
        int nr = n - r < LOGIT_ROWS ? n - r : LOGIT_ROWS;
        al_tensor in = al_tensor_rows(&c->xb, r, nr), out = al_tensor_rows(&c->logits, 0, nr);
        float *dst = logits + (size_t)(r - first_row) * m->n_vocab;
        be->ops->matmul(be, &in, &m->output, NULL, &out);
        be->ops->tensor_read(be, &out, dst, (uint64_t)nr * m->n_vocab * sizeof(float));
        if (m->softcap > 0) soft_cap(dst, (size_t)nr * m->n_vocab, m->softcap);
    }
}

/* A GPU reports failures of the recorded ops here (backend.h: sync). */
static al_status backend_sync(al_backend *be) {
    return be->ops->sync ? be->ops->sync(be) : AL_OK;
}

static al_status check_tokens(const al_model *m, const int32_t *tokens, int n) {
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->n_vocab)
            return al_error(AL_ERR_ARG, "al_eval: token %d at index %d is out of range [0, %d)",
                            tokens[i], i, m->n_vocab);
    return AL_OK;
}

al_status al_eval_multi(al_context *const *ctxs, const int32_t *tokens, int n, float *logits) {
    if (!ctxs || !tokens || n <= 0 || !ctxs[0])
        return al_error(AL_ERR_ARG, "al_eval_multi: no sequences to evaluate");
    al_context *c0 = ctxs[0];
    if (n > c0->n_batch)
        return al_error(AL_ERR_ARG, "al_eval_multi: %d sequences exceed the batch of %d of the "
                        "first context", n, c0->n_batch);
    for (int i = 0; i < n; i++) {
        if (!ctxs[i] || ctxs[i]->m != c0->m)
            return al_error(AL_ERR_ARG, "al_eval_multi: context %d is NULL or of another model", i);
        if (ctxs[i]->n_past >= ctxs[i]->n_ctx)
            return al_error(AL_ERR_ARG, "al_eval_multi: context %d is full (%d positions)", i,
                            ctxs[i]->n_ctx);
        for (int j = 0; j < i; j++)
            if (ctxs[j] == ctxs[i])
                return al_error(AL_ERR_ARG, "al_eval_multi: context %d appears twice", i);
    }
    al_status st = check_tokens(c0->m, tokens, n);
    if (st != AL_OK) return st;
    forward_rows(c0, ctxs, tokens, n, 0, logits);
    if ((st = backend_sync(c0->be)) != AL_OK) return st;
    for (int i = 0; i < n; i++) ctxs[i]->n_past++;
    return AL_OK;
}

al_status al_eval(al_context *c, const int32_t *tokens, int n_tokens, float *logits,
                  bool all_logits) {
    if (!c || !tokens || n_tokens <= 0)
        return al_error(AL_ERR_ARG, "al_eval: no tokens to evaluate");
    const al_model *m = c->m;
    if (n_tokens > c->n_ctx - c->n_past)
        return al_error(AL_ERR_ARG, "al_eval: %d tokens do not fit: %d of %d positions used",
                        n_tokens, c->n_past, c->n_ctx);
    al_status st = check_tokens(m, tokens, n_tokens);
    if (st != AL_OK) return st;
    for (int done = 0; done < n_tokens; done += c->n_batch) {
        int n = n_tokens - done < c->n_batch ? n_tokens - done : c->n_batch;
        bool last = done + n == n_tokens;
        float *dst = NULL;
        int first_row = 0;
        if (logits && all_logits) {
            dst = logits + (size_t)done * m->n_vocab;
        } else if (logits && last) {
            dst = logits;
            first_row = n - 1;
        }
        forward_rows(c, NULL, tokens + done, n, first_row, dst);
        if ((st = backend_sync(c->be)) != AL_OK) return st;
        c->n_past += n;
    }
    return AL_OK;
}

/* ---- handing a sequence from one context to another ------------------------------------ */

/* Whether contexts of a and b can hold one sequence between them: the same network
 * shape, so the same caches. AL_ERR_ARG naming the first difference otherwise. */
static al_status same_shape(const al_model *a, const al_model *b, const char *what) {
    if (strcmp(a->arch, b->arch))
        return al_error(AL_ERR_ARG, "%s: the models differ in architecture (%s, %s)", what,
                        a->arch, b->arch);
    const struct { const char *name; int x, y; } f[] = {
        {"n_vocab", a->n_vocab, b->n_vocab}, {"n_embd", a->n_embd, b->n_embd},
        {"n_layer", a->n_layer, b->n_layer}, {"n_head", a->n_head, b->n_head},
        {"n_head_kv", a->n_head_kv, b->n_head_kv}, {"head_dim", a->head_dim, b->head_dim},
        {"n_ff", a->n_ff, b->n_ff}, {"n_expert", a->n_expert, b->n_expert},
        {"sliding window", a->swa_window, b->swa_window},
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (f[i].x != f[i].y)
            return al_error(AL_ERR_ARG, "%s: the models differ in %s (%d, %d)", what, f[i].name,
                            f[i].x, f[i].y);
    for (int il = 0; il < a->n_layer; il++)
        if (a->layers[il].swa != b->layers[il].swa)
            return al_error(AL_ERR_ARG, "%s: the models differ in which layers slide (layer %d)",
                            what, il);
    return AL_OK;
}

enum { HANDOFF_CHUNK = 4 << 20 }; /* bytes through the host at once, between two GPUs */

/* Copies n bytes from s (on sb) to d (on db): straight into d where the host sees its
 * memory, or straight out of s, else through a host buffer *tmp (made on first use). */
al_status model_copy_rows(al_backend *db, al_tensor *d, al_backend *sb, const al_tensor *s,
                           uint64_t n, char **tmp) {
    uint64_t avail;
    void *h = db->ops->tensor_host ? db->ops->tensor_host(db, d, &avail) : NULL;
    if (h) {
        sb->ops->tensor_read(sb, s, h, n);
        return AL_OK;
    }
    if ((h = sb->ops->tensor_host ? sb->ops->tensor_host(sb, s, &avail) : NULL)) {
        db->ops->tensor_write(db, d, h, n);
        return AL_OK;
    }
    if (!*tmp && !(*tmp = al_malloc(HANDOFF_CHUNK)))
        return al_error(AL_ERR_NOMEM, "out of memory handing over the KV cache");
    for (uint64_t done = 0; done < n; done += HANDOFF_CHUNK) {
        const uint64_t k = n - done < HANDOFF_CHUNK ? n - done : HANDOFF_CHUNK;
        al_tensor sv = *s, dv = *d;
        sv.offset += done;
        dv.offset += done;
        sb->ops->tensor_read(sb, &sv, *tmp, k);
        db->ops->tensor_write(db, &dv, *tmp, k);
    }
    return AL_OK;
}

/* Copies the rows of layer il that hold src's positions: all of them, or for a ring
 * the last positions that fit both rings, in runs that wrap in neither (position p is
 * row p % cap on each side). Adds the bytes copied to *n_bytes. */
static al_status copy_layer(al_context *dst, const al_context *src, int il, char **tmp,
                            uint64_t *n_bytes) {
    const int64_t cs = src->k_cache[il].ne[1], cd = dst->k_cache[il].ne[1];
    const int64_t end = src->n_past, keep = cs < cd ? cs : cd;
    const uint64_t row = src->k_cache[il].row_bytes;
    al_status st = AL_OK;
    for (int64_t p = end > keep ? end - keep : 0; p < end && st == AL_OK;) {
        const int64_t rs = p % cs, rd = p % cd;
        int64_t n = end - p;
        if (n > cs - rs) n = cs - rs;
        if (n > cd - rd) n = cd - rd;
        al_tensor ks = al_tensor_rows(&src->k_cache[il], rs, n);
        al_tensor vs = al_tensor_rows(&src->v_cache[il], rs, n);
        al_tensor kd = al_tensor_rows(&dst->k_cache[il], rd, n);
        al_tensor vd = al_tensor_rows(&dst->v_cache[il], rd, n);
        if ((st = model_copy_rows(dst->be, &kd, src->be, &ks, (uint64_t)n * row, tmp)) == AL_OK)
            st = model_copy_rows(dst->be, &vd, src->be, &vs, (uint64_t)n * row, tmp);
        *n_bytes += 2 * (uint64_t)n * row;
        p += n;
    }
    return st;
}

al_status al_context_handoff(al_context *dst, al_context *src) {
    if (!dst || !src) return al_error(AL_ERR_ARG, "al_context_handoff: a context is NULL");
    if (dst == src) return AL_OK;
    al_status st = same_shape(dst->m, src->m, "al_context_handoff");
    if (st != AL_OK) return st;
    if (src->n_past > dst->n_ctx)
        return al_error(AL_ERR_ARG, "al_context_handoff: %d positions do not fit the %d of the "
                        "destination", src->n_past, dst->n_ctx);
    /* src's GPU has written its cache (its fence makes the writes visible to the host,
     * and a later submission of dst's makes host writes visible to dst's GPU); dst's
     * own recorded work, which may use its cache, is done */
    if ((st = backend_sync(src->be)) || (st = backend_sync(dst->be))) return st;
    if (src->m->ad->flags & ARCH_HYBRID && (st = hybrid_handoff(dst, src)) != AL_OK) {
        dst->n_past = 0;
        return st;
    }
    if (dst->kv_root == src->kv_root) { /* one memory: nothing moves */
        dst->n_past = src->n_past;
        src->n_past = 0;
        return AL_OK;
    }
    char *tmp = NULL;
    uint64_t n_bytes = 0;
    for (int il = 0; il < dst->m->n_layer && st == AL_OK; il++)
        st = copy_layer(dst, src, il, &tmp, &n_bytes);
    al_free(tmp);
    if (st == AL_OK && (st = backend_sync(src->be)) == AL_OK) st = backend_sync(dst->be);
    if (st != AL_OK) {
        dst->n_past = 0; /* some rows may be missing */
        return st;
    }
    dst->n_past = src->n_past;
    dst->kv_bytes_copied += n_bytes;
    return AL_OK;
}

void al_context_get_info(const al_context *c, al_context_info *out) {
    if (!out) return;
    if (!c) {
        *out = (al_context_info){0};
        return;
    }
    const al_backend *be = c->m->be;
    *out = (al_context_info){
        .n_ctx = c->n_ctx, .n_past = c->n_past,
        .backend = be->desc[0] ? be->desc : be->ops->name,
        .kv_bytes = model_kv_bytes(c->m, c->n_ctx),
        .kv_shared = c->kv_root != c,
        .kv_bytes_copied = c->kv_bytes_copied,
    };
}
