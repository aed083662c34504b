/* load.c: a model from a GGUF file, as described by arch.c: the hyper-parameters, the
 * weights bound and checked, the backend chosen, and what al_model_get_info reports.
 *
 * An architecture is a descriptor (arch.h): which tensors a layer has, with their
 * shapes, and a few flags. Every hyper-parameter comes from the file's "<arch>.*" keys,
 * and every tensor's type and shape is checked against them before the model is usable.
 *
 * Weights are descriptors pointing into the file mapping: loading copies nothing but
 * the few small 1-D tensors that are not stored as f32.
 */
#include "model/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/arch.h"
#include "format/quant.h"
#include "text/tokenizer.h"
#include "registry.h"
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

al_status model_get_u32_layer(const al_model *m, const char *suffix, uint32_t dflt,
                              bool required, int il, int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);
    const gguf_kv *kv = gguf_find_key(m->file, key);
    if (!kv || kv->type != GGUF_VT_ARRAY) return model_get_u32(m, suffix, dflt, required, out);
    const uint32_t t = kv->v.arr.type;
    if (!(m->ad->flags & ARCH_PER_LAYER) || (t != GGUF_VT_U32 && t != GGUF_VT_I32) ||
        kv->v.arr.n == 0 || kv->v.arr.n > 4096 ||
        (il >= 0 && (uint64_t)il >= kv->v.arr.n))
        return al_error(AL_ERR_FORMAT, "%s: %s must be a number or an array of one per layer",
                        m->file->path, key);
    const uint8_t *a = kv->v.arr.data; /* the file's bytes: not aligned */
    uint32_t v = 0, e;
    for (uint64_t i = il >= 0 ? (uint64_t)il : 0; i < (il >= 0 ? (uint64_t)il + 1 : kv->v.arr.n); i++) {
        memcpy(&e, a + 4 * i, sizeof e);
        v = il >= 0 || e > v ? e : v;
    }
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
    const bool mla = m->ad->flags & ARCH_MLA;
    if (m->rope.n_rot != m->head_dim && !mla)
        return al_error(AL_ERR_UNSUPPORTED, "%s: YaRN with %d of %d dimensions rotating is "
                        "not supported", path, m->rope.n_rot, m->head_dim);
    /* deepseek2's files give the magnitude's factor for all dimensions as 0.1 times
     * mscale_all_dim (yarn_log_multiplier), and its rope part then keeps its scale */
    float log_mul = 0.0f;
    if (mla && (st = get_arch_f32(m, "rope.scaling.yarn_log_multiplier", 0.0f, &log_mul)))
        return st;
    log_mul /= 0.1f;
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
    const double mscale = ext <= 0 ? attn : attn * (1 + 0.1 * (log_mul != 0 ? log_mul : 1) * log(factor));
    /* llama.cpp's deepseek2 graph takes that magnitude for q.k, and without a log
     * multiplier its rope gives the rotated values the same magnitude again (rope's
     * own YaRN factor, not cancelled there) */
    if (mla && ext > 0 && log_mul == 0) m->mla_rope_mag = (float)(1 + 0.1 * log(factor));
    m->attn_scale = (float)(mscale * mscale / sqrt((double)(mla ? m->k_mla : m->head_dim)));
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
    if (vlen != m->head_dim && !(m->ad->flags & ARCH_MLA)) /* mla_read checks its own */
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
    char count[128];
    snprintf(count, sizeof count, "%s.expert_count", m->arch);
    /* gemma4: experts where the file has them (the 26B-A4B) */
    const bool some = m->ad->flags & ARCH_PER_LAYER && gguf_find_key(m->file, count);
    if (!(m->ad->flags & ARCH_MOE) && !some) return AL_OK;
    al_status st;
    if ((st = model_get_u32(m, "expert_count", 0, true, &m->n_expert)) ||
        (st = model_get_u32(m, "expert_used_count", 0, true, &m->n_expert_used)) ||
        (st = model_get_u32(m, "expert_feed_forward_length", 0, true, &m->n_ff_exp)))
        return st;
    if (arch_tensor_of(m->ad, L_GATE_INP_SHEXP) &&
        (st = model_get_u32(m, "expert_shared_feed_forward_length", (uint32_t)m->n_ff, false,
                           &m->n_ff_shexp)))
        return st;
    /* gating 1 is softmax, 2 sigmoid; none (0) is the architecture's (llama.cpp's) */
    int gating, shared;
    bool norm;
    const int dflt = m->ad->gating ? m->ad->gating : 1;
    if ((st = model_get_u32(m, "expert_gating_func", (uint32_t)dflt, false, &gating)) ||
        (st = model_get_u32(m, "expert_group_count", 1, false, &m->n_group)) ||
        (st = model_get_u32(m, "expert_group_used_count", (uint32_t)m->n_group, false,
                           &m->n_group_used)) ||
        (st = model_get_u32(m, "leading_dense_block_count", 0, false, &m->n_dense_lead)) ||
        (st = model_get_u32(m, "expert_shared_count", 0, false, &shared)) ||
        (st = get_arch_f32(m, "expert_weights_scale", 1.0f, &m->expert_scale)))
        return st;
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", m->arch);
    if ((st = gguf_get_bool_or(m->file, key, false, &norm))) return st;
    if (gating == 0) gating = dflt;
    if (gating != 1 && gating != 2)
        return al_error(AL_ERR_UNSUPPORTED, "%s: expert_gating_func %d: softmax (1) and sigmoid "
                        "(2) are supported", m->file->path, gating);
    m->gate_sigmoid = gating == 2, m->expert_norm = norm;
    m->route_probs = m->gate_sigmoid || m->ad->gating != 0;
    if (m->ad->sigmoid_only && gating != 2)
        return al_error(AL_ERR_UNSUPPORTED, "%s: expert_gating_func %d: this architecture's "
                        "router is sigmoid (2)", m->file->path, gating);
    if (!(m->expert_scale > 0 && m->expert_scale < 1e6f))
        return al_error(AL_ERR_FORMAT, "%s: expert_weights_scale %g must be positive",
                        m->file->path, (double)m->expert_scale);
    if (m->n_dense_lead < 0 || m->n_dense_lead > m->n_layer)
        return al_error(AL_ERR_FORMAT, "%s: leading_dense_block_count %d exceeds block_count %d",
                        m->file->path, m->n_dense_lead, m->n_layer);
    /* ungated shared experts (glm4moe, deepseek2): as wide as expert_shared_count
     * experts */
    if (arch_tensor_of(m->ad, L_GATE_SHEXP) && !arch_tensor_of(m->ad, L_GATE_INP_SHEXP)) {
        if (shared < 1 || shared > 64)
            return al_error(AL_ERR_FORMAT, "%s: expert_shared_count %d: expected 1 to 64 shared "
                            "experts", m->file->path, shared);
        m->n_ff_shexp = shared * m->n_ff_exp;
    }
    if (m->n_group < 1 || m->n_group > 64 || m->n_expert % m->n_group || m->n_group_used < 1 ||
        m->n_group_used > m->n_group ||
        (m->n_group > 1 && m->n_expert_used > m->n_group_used * (m->n_expert / m->n_group)))
        return al_error(AL_ERR_FORMAT, "%s: expert_group_count %d, expert_group_used_count %d: "
                        "expected groups dividing expert_count %d whose used ones hold "
                        "expert_used_count %d", m->file->path, m->n_group, m->n_group_used,
                        m->n_expert, m->n_expert_used);
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
        (st = model_get_u32_layer(m, "feed_forward_length", 0, true, -1, &m->n_ff)) ||
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
    if ((st = model_get_u32_layer(m, "attention.head_count_kv", (uint32_t)m->n_head, false, -1,
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
    if ((st = mla_read(m))) return st;
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

al_status model_bind(al_model *m, const char *name, int64_t ne0, int64_t ne1, bool optional,
                     al_tensor *out) {
    return bind(m, name, ne0, ne1, optional, out);
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
    case D_Q_LORA: return m->q_lora;
    case D_KV_LORA: return m->kv_lora;
    case D_KV_A: return (int64_t)m->kv_lora + m->rope.n_rot;
    case D_NOPE: return (int64_t)m->k_mla - m->rope.n_rot;
    case D_V_MLA: return m->v_mla;
    case D_Q_MLA: return (int64_t)m->n_head * m->k_mla;
    case D_O_MLA: return (int64_t)m->n_head * m->v_mla;
    case D_SCALAR: return 1;
    case D_PLE: return m->n_ple;
    }
    return 0;
}

/* A dimension of layer l's tensors: its own head size, kv heads and feed-forward
 * width where it has them (layer_weights), else the model's. */
static int64_t layer_dim(const al_model *m, const layer_weights *l, arch_dim d) {
    switch (d) {
    case D_Q: return (int64_t)m->n_head * l->head_dim;
    case D_KV: return (int64_t)l->n_head_kv * l->head_dim;
    case D_HEAD: return l->head_dim;
    case D_FF: return l->n_ff;
    default: return model_dim(m, d);
    }
}

/* Binds layer il's tensors as the architecture's table lists them. */
al_status model_bind_layer(al_model *m, int il, layer_weights *l) {
    l->recr = m->recr && il < m->n_layer && m->recr[il]; /* an MTP block attends */
    l->dense = il < m->n_dense_lead;
    l->head_dim = m->head_dim, l->n_head_kv = m->n_head_kv, l->n_ff = m->n_ff, l->kv_src = il;
    l->out_scale = 1.0f;
    gemma4_layer_shape(m, il, l);
    for (int i = 0; i < m->ad->n_layer_tensors; i++) {
        const arch_tensor *at = &m->ad->layer[i];
        if (!arch_where_has(at->where, l->recr, l->dense)) continue;
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", il, at->name);
        al_status st = bind3(m, name, layer_dim(m, l, at->ne0), layer_dim(m, l, at->ne1),
                             layer_dim(m, l, at->ne2), !at->required, &l->t[at->slot]);
        if (st == AL_OK && at->slot == L_SSM_CONV) st = model_own_f32(m, name, &l->t[at->slot]);
        if (st == AL_OK && at->slot == L_EXP_PROBS_B) { /* the router's, on the host */
            if ((st = model_own_f32(m, name, &l->t[at->slot]))) return st;
            l->exp_probs_b = (float *)((char *)l->t[at->slot].data + l->t[at->slot].offset);
            memset(&l->t[at->slot], 0, sizeof l->t[at->slot]);
        }
        if (st != AL_OK) return st;
    }
    al_status st = mla_bind_layer(m, il, l);
    if (st == AL_OK) st = gemma4_bind_layer(m, il, l);
    return st == AL_OK ? hybrid_bind_layer(m, il, l) : st;
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
    m->layers = al_calloc((size_t)m->n_layer + (m->n_nextn > 0), sizeof *m->layers);
    if (!m->layers) return al_error(AL_ERR_NOMEM, "out of memory for %d layers", m->n_layer);
    /* which layers slide first: gemma4 sizes them apart */
    if (m->ad->flags & ARCH_SLIDING && (st = read_swa_pattern(m))) return st;
    if ((st = gemma4_read(m))) return st;
    for (int il = 0; il < m->n_layer; il++)
        if ((st = model_bind_layer(m, il, &m->layers[il]))) return st;
    if ((st = mtp_bind(m)) || (st = gemma4_bind(m))) return st;
    /* the scratch a context needs for the widest layer */
    m->max_qd = m->max_kvd = m->max_ff = 0;
    for (int il = 0; il < m->n_layer; il++) {
        const layer_weights *l = &m->layers[il];
        const int64_t qd = (int64_t)m->n_head * l->head_dim, kvd = (int64_t)l->n_head_kv * l->head_dim;
        if (qd > m->max_qd) m->max_qd = qd;
        if (kvd > m->max_kvd) m->max_kvd = kvd;
        if (l->n_ff > m->max_ff) m->max_ff = l->n_ff;
    }
    return AL_OK;
}

/* Rows per view of layer slot `slot`: one expert's rows in a stacked tensor (model
 * code takes each expert as a view), else all of them. */
int64_t model_layer_view_rows(const al_model *m, int slot, const al_tensor *t) {
    if (slot == L_WKV_A_MQA) { /* mla.c views the latent rows and the rope rows */
        int64_t a = m->kv_lora, b = m->rope.n_rot;
        while (b) {
            const int64_t r = a % b;
            a = b, b = r;
        }
        return a;
    }
    if (slot == L_WK_B_T) return m->k_mla - m->rope.n_rot; /* a head's keys */
    if (slot == L_WV_B_F32) return m->v_mla;
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
        if ((st = model_load_layer(m, il, load, pack))) return st;
        if (p->progress) p->progress(p->progress_user, (il + 1.0) / m->n_layer);
    }
    if ((st = gemma4_load_weights(m, load, pack))) return st;
    return mtp_load_weights(m, load, pack);
}

al_status model_load_layer(al_model *m, int il, al_status (*load)(al_backend *, al_tensor *),
                           al_status (*pack)(al_backend *, al_tensor *, int64_t)) {
    al_status st;
    for (int i = 0; i < L_COUNT; i++) {
        al_tensor *t = &m->layers[il].t[i];
        if (!t->data) continue;
        if (load && (st = load(m->be, t))) return st;
        if (pack && (st = pack(m->be, t, model_layer_view_rows(m, i, t)))) return st;
    }
    return AL_OK;
}

/* Whether the backend can run this model's shape (backend.h: supports). */
static al_status check_backend(const al_model *m) {
    al_model_shape shape = { /* the widest layer's (gemma4 sizes them one by one) */
        .n_vocab = m->n_vocab, .n_embd = m->n_embd, .n_ff = (int)m->max_ff, .n_head = m->n_head,
        .n_head_kv = m->n_head_kv, .head_dim = (int)(m->max_qd / m->n_head), .n_rot = m->rope.n_rot,
        .max_batch = MAX_BATCH,
        .logit_rows = LOGIT_ROWS,
    };
    const al_backend_ops *op = m->be->ops;
    if (m->ad->flags & ARCH_MLA && !op->copy)
        return al_error(AL_ERR_UNSUPPORTED, "%s: the %s backend has no copy op yet (latent "
                        "attention needs it)", m->file->path, op->name);
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
    const bool gpu = (m->be->ops->caps & AL_CAP_DEVICE) != 0;
    if (st == AL_OK || !gpu || !p->backend || strcmp(p->backend, "auto")) return st;
    al_log(AL_LOG_WARN, "the GPU (%s) cannot %s (%s); using the CPU", m->be->desc,
            runs ? "take the weights" : "run this model", al_last_error());
    m->be->ops->destroy(m->be);
    m->be = NULL;
    al_free(m->layers);
    m->layers = NULL;
    mtp_free(m);
    gemma4_free(m);
    if ((st = bind_weights(m)) != AL_OK) return st;
    return backend_create_fallback(p->n_threads, p, &m->be);
}

/* ---- model ------------------------------------------------------------------------ */

/* Whether the first or the last layer has the slot (glm4moe's first is dense). */
static bool has_slot(const al_model *m, arch_slot slot) {
    return m->layers[0].t[slot].data || m->layers[m->n_layer - 1].t[slot].data;
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
    if (m->n_expert && m->ad->flags & ARCH_PER_LAYER) ADD(" and beside it an FFN"); /* gemma4 */
    if (m->n_expert)
        ADD(" of %d experts, %d per token (width %d)", m->n_expert, m->n_expert_used,
            m->n_ff_exp);
    if (m->n_expert && m->n_group > 1)
        ADD(" from the best %d of %d groups,", m->n_group_used, m->n_group);
    if (m->n_expert && m->gate_sigmoid)
        ADD(" picked by sigmoid scores%s, weighted%s x %g", m->layers[m->n_layer - 1].exp_probs_b
            ? " plus a bias" : "", m->expert_norm ? " normalized" : "", (double)m->expert_scale);
    else if (m->n_expert && m->route_probs)
        ADD(" weighted by their softmax probability%s x %g", m->expert_norm ? " normalized" : "",
            (double)m->expert_scale);
    if (has_slot(m, L_GATE_SHEXP))
        ADD(" and a %sshared expert (width %d)", has_slot(m, L_GATE_INP_SHEXP) ? "sigmoid-gated "
            : "", m->n_ff_shexp);
    if (m->n_dense_lead)
        ADD(", a dense FFN on the first %d layer%s", m->n_dense_lead, m->n_dense_lead > 1 ? "s" : "");
    if (m->embd_scale != 1.0f) ADD(", embeddings x %.4g", (double)m->embd_scale);
    if (m->swa_window) {
        int n_swa = 0;
        for (int il = 0; il < m->n_layer; il++) n_swa += m->layers[il].swa;
        ADD(", sliding window %d on %d of %d layers (rope base %g)", m->swa_window, n_swa,
            m->n_layer, (double)m->rope_swa.freq_base);
    }
    if (m->softcap > 0) ADD(", logit soft-cap %g", (double)m->softcap);
    if (m->ad->flags & ARCH_PER_LAYER) {
        int n_shared = 0, n_scaled = 0;
        for (int il = 0; il < m->n_layer; il++) {
            n_shared += m->layers[il].kv_src != il;
            n_scaled += m->layers[il].out_scale != 1.0f;
        }
        int hs = m->head_dim;
        for (int il = m->n_layer - 1; il >= 0; il--) hs = m->layers[il].swa ? m->layers[il].head_dim : hs;
        ADD(", sliding heads of %d (%d rotating), normed values", hs, m->rope_swa.n_rot);
        if (n_shared) ADD(", the last %d layers on earlier layers' caches", n_shared);
        if (m->n_ple) ADD(", per-layer inputs of %d", m->n_ple);
        if (n_scaled) ADD(", output scales on %d layers", n_scaled);
    }
    if (m->kv_latent)
        ADD(", latent attention (a cached row of %d + %d rope per position; queries %s, "
            "heads of %d/%d)", m->kv_lora, m->rope.n_rot, m->q_lora ? "low-rank" : "full",
            m->k_mla, m->v_mla);
    if (m->ad->flags & ARCH_HYBRID) {
        int n_recr = 0;
        for (int il = 0; il < m->n_layer; il++) n_recr += m->layers[il].recr;
        ADD(", gated delta-net on %d of %d layers (conv %d, %d key / %d value heads of %d%s, "
            "recurrent state), gated attention with %d of %d dims rotating", n_recr,
            m->n_layer, m->ssm_kernel, m->ssm_k_heads, m->ssm_v_heads, m->ssm_state,
            m->ad->flags & ARCH_GDN_GROUPED ? " grouped" : "", m->rope.n_rot, m->head_dim);
    }
    if (m->n_nextn && m->mtp) ADD(", %d next-token-prediction block%s (the first drafts: "
                                  "--spec mtp)", m->n_nextn, m->n_nextn > 1 ? "s" : "");
    else if (m->n_nextn) ADD(", %d next-token-prediction block%s (not run)", m->n_nextn,
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
    m->mla_absorbed = p.mla_absorbed;
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
    mtp_free(m);
    gemma4_free(m);
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
            /* the expanded form's copies serve prompts only (mla.c) */
            const bool prompt = i == L_WK_B_T || i == L_WV_B_F32;
            const uint64_t b = prompt ? 0 : tensor_bytes(&m->layers[il].t[i]);
            /* a token reads only the experts it is routed to */
            n += expert ? b / (uint64_t)m->n_expert * (uint64_t)m->n_expert_used : b;
        }
    return n + gemma4_bytes_per_token(m);
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
    out->n_mtp = m->mtp != NULL;
    if (m->kv_latent) {
        out->kv_latent_dim = m->head_dim;
        out->kv_expanded_dim = m->n_head * (m->k_mla + m->v_mla);
        for (int il = 0; il < m->n_layer; il++)
            out->mla_expand_bytes += tensor_bytes(&m->layers[il].t[L_WK_B_T]) +
                                     tensor_bytes(&m->layers[il].t[L_WV_B_F32]);
    }
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
