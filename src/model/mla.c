/* mla.c: multi-head latent attention (deepseek2: DeepSeek-V2/V3, Kimi, GLM-4.7-Flash).
 *
 * A layer compresses each position into one latent vector c (kv_lora_rank values,
 * RMS-normed) and one rope key k_r (rope values) shared by every head. Head h's key
 * is [k_b[h] c | k_r] and its value v_b[h] c, so the keys and values of all heads
 * follow from the row [k_r | c] alone, and that row is all the cache holds. Since
 *   q_h . k_h = (k_b[h]^T q_nope_h) . c + q_rope_h . k_r
 *   sum_j p_j v_b[h] c_j = v_b[h] sum_j p_j c_j
 * attention runs in the latent space: each head's query is absorbed into
 * [q_rope_h | k_b[h]^T q_nope_h], the one cached row per position is both key and
 * value (an n_head : 1 grouped attention over rows of rope + kv_lora_rank), and v_b
 * takes each head's latent output to its value. Decoding then reads the latent rows
 * and nothing else; the row is the model's head_dim and the value cache is the key
 * cache (kv_latent). The rope part comes first so that the shared rope of the leading
 * n_rot values of each head (and the fused decode attention) applies as it is.
 */
#include "model/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/quant.h"
#include "model/arch.h"
#include "util.h"

al_status mla_read(al_model *m) {
    if (!(m->ad->flags & ARCH_MLA)) return AL_OK;
    const char *path = m->file->path;
    al_status st;
    int vlen;
    if ((st = model_get_u32(m, "attention.q_lora_rank", 0, false, &m->q_lora)) ||
        (st = model_get_u32(m, "attention.kv_lora_rank", 0, true, &m->kv_lora)) ||
        (st = model_get_u32(m, "attention.value_length", 0, false, &vlen)))
        return st;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.key_length_mla", m->arch);
    if (!gguf_find_key(m->file, key))
        return al_error(AL_ERR_UNSUPPORTED, "%s: %s is missing: a file without it stores the "
                        "older attn_kv_b layout, which is not supported (convert it again)",
                        path, key);
    if ((st = model_get_u32(m, "attention.key_length_mla", 0, true, &m->k_mla)) ||
        (st = model_get_u32(m, "attention.value_length_mla", 0, true, &m->v_mla)))
        return st;
    const int rot = m->rope.n_rot;
    if (m->kv_lora <= 0 || m->kv_lora > m->n_embd || m->q_lora < 0 || m->q_lora > m->n_embd)
        return al_error(AL_ERR_FORMAT, "%s: kv_lora_rank %d and q_lora_rank %d must lie within "
                        "embedding_length %d (kv_lora_rank positive)", path, m->kv_lora,
                        m->q_lora, m->n_embd);
    if (m->k_mla <= rot || m->k_mla > 4096 || m->v_mla <= 0 || m->v_mla > 4096)
        return al_error(AL_ERR_FORMAT, "%s: key_length_mla %d must exceed rope.dimension_count "
                        "%d, and value_length_mla %d lie in [1, 4096]", path, m->k_mla, rot,
                        m->v_mla);
    if (m->head_dim != m->kv_lora + rot || vlen != m->kv_lora || m->n_head_kv != 1)
        return al_error(AL_ERR_FORMAT, "%s: key_length %d, value_length %d, head_count_kv %d: "
                        "latent attention caches kv_lora_rank + rope = %d per position, values "
                        "of kv_lora_rank %d, one key/value head", path, m->head_dim, vlen,
                        m->n_head_kv, m->kv_lora + rot, m->kv_lora);
    if (m->rope.n_rot % 2)
        return al_error(AL_ERR_FORMAT, "%s: rope.dimension_count %d must be even", path, rot);
    m->kv_latent = true;
    m->mla_rope_mag = 1.0f;
    /* q.k is scaled by the head before absorption, not the cached row; YaRN may
     * multiply it (read_yarn) */
    m->attn_scale = 1.0f / sqrtf((float)m->k_mla);
    return AL_OK;
}

/* Whether the model's heads fit the expanded form: its values padded to a key's width
 * (DeepSeek's 128 in 192, GLM-4.7-Flash's 256 in 256). */
static bool expandable(const al_model *m) {
    return m->v_mla <= m->k_mla;
}

/* The expanded form's weights, f32 so that no activation is rounded on the way to the
 * keys and values (the CPU's default rounds a quantized weight's inputs to 8 bits): k_b
 * transposed, [n_head * nope][kv_lora] (the file keeps it as the absorption reads it,
 * [n_head * kv_lora][nope]), and v_b where the file stores another type. */
static al_status mla_expand_weight(al_model *m, int il, layer_weights *l) {
    const al_tensor *kb = &l->t[L_WK_B], *vb = &l->t[L_WV_B];
    if (!expandable(m) || m->mla_absorbed || !kb->data || !vb->data) return AL_OK;
    const int64_t nope = m->k_mla - m->rope.n_rot, kvr = m->kv_lora, nh = m->n_head;
    float *kt = al_malloc((size_t)(nh * nope * kvr) * sizeof *kt);
    float *row = al_malloc((size_t)nope * sizeof *row);
    char what[64];
    snprintf(what, sizeof what, "blk.%d.attn_k_b.weight transposed", il);
    al_status st = model_own(m, kt, what);
    if (st == AL_OK && !row) st = al_error(AL_ERR_NOMEM, "out of memory for %s", what);
    for (int64_t h = 0; st == AL_OK && h < nh; h++)
        for (int64_t i = 0; i < kvr; i++) {
            const int64_t r = h * kvr + i;
            quant_dequantize(kb->type, (const uint8_t *)kb->data + kb->offset + r * kb->row_bytes,
                             row, nope);
            for (int64_t o = 0; o < nope; o++) kt[(h * nope + o) * kvr + i] = row[o];
        }
    al_free(row);
    if (st != AL_OK) return st;
    l->t[L_WK_B_T] = (al_tensor){.type = AL_TYPE_F32, .ne = {kvr, nh * nope}, .data = kt,
                                 .row_bytes = (uint64_t)kvr * sizeof(float)};
    if (vb->type == AL_TYPE_F32) return AL_OK; /* the file's serves (expanded_attention) */
    l->t[L_WV_B_F32] = *vb;
    snprintf(what, sizeof what, "blk.%d.attn_v_b.weight", il);
    return model_own_f32(m, what, &l->t[L_WV_B_F32]);
}

al_status mla_bind_layer(al_model *m, int il, layer_weights *l) {
    if (!(m->ad->flags & ARCH_MLA)) return AL_OK;
    const al_tensor *t = l->t;
    const bool low_rank = m->q_lora > 0;
    const bool whole = low_rank ? t[L_WQ_A].data && t[L_Q_A_NORM].data && t[L_WQ_B].data
                                : t[L_WQ].data != NULL;
    if (!whole)
        return al_error(AL_ERR_FORMAT, "%s: blk.%d has no %s (q_lora_rank %d)", m->file->path, il,
                        low_rank ? "attn_q_a.weight, attn_q_a_norm.weight and attn_q_b.weight"
                                 : "attn_q.weight", m->q_lora);
    return mla_expand_weight(m, il, l);
}

al_status mla_context_alloc(al_context *c) {
    const al_model *m = c->m;
    al_backend *be = c->be;
    const int64_t nb = c->n_batch;
    al_status st;
    if ((st = be->ops->tensor_alloc(be, (int64_t)m->n_head * m->k_mla, nb, &c->mla_q)) ||
        (st = be->ops->tensor_alloc(be, (int64_t)m->n_head * m->v_mla, nb, &c->mla_vo)) ||
        (m->q_lora && (st = be->ops->tensor_alloc(be, m->q_lora, nb, &c->mla_qa))))
        return st;
    if (!be->ops->copy)
        return al_error(AL_ERR_UNSUPPORTED, "the %s backend has no copy op (latent attention "
                        "needs it)", be->ops->name);
    /* The expanded form needs f32 caches, whose latent rows a matmul reads as they are,
     * and scratch for one head's keys and values of every position: 2 k_mla floats per
     * position, less than one layer's latent row (kv_lora + rope) takes in the cache. */
    if (!m->layers[0].t[L_WK_B_T].data || c->type_k != AL_KV_F32 || c->mla_expand_min < 0 ||
        (int64_t)m->n_head * m->k_mla > c->q.ne[0]) /* its queries lie over the absorbed */
        return AL_OK;
    if ((st = be->ops->tensor_alloc(be, m->k_mla, c->n_ctx, &c->mla_ke)) ||
        (st = be->ops->tensor_alloc(be, m->k_mla, c->n_ctx, &c->mla_ve)))
        return st;
    c->mla_rows = c->n_ctx;
    if (!c->mla_expand_min) c->mla_expand_min = AL_MLA_EXPAND_MIN;
    return AL_OK;
}

/* Columns [c0, c0 + n) of each row of t: a view with t's row stride. */
static al_tensor cols(const al_tensor *t, int64_t c0, int64_t n) {
    al_tensor v = *t;
    v.offset += (uint64_t)c0 * sizeof(float);
    v.ne[0] = n;
    return v;
}

/* Columns [c0, c0 + n) of each of the heads (of width hw) of t's rows, as rows of their
 * own: rows * heads rows, one per head of each row. */
static al_tensor head_cols(const al_tensor *t, int heads, int64_t hw, int64_t c0, int64_t n) {
    AL_ASSERT(t->row_bytes == (uint64_t)heads * hw * sizeof(float));
    al_tensor v = cols(t, c0, n);
    v.ne[1] = t->ne[1] * heads;
    v.row_bytes = (uint64_t)hw * sizeof(float);
    return v;
}

/* t's storage as rows of `cols` floats, contiguous (a scratch tensor of another shape). */
static al_tensor reshaped(const al_tensor *t, int64_t cols, int64_t rows) {
    AL_ASSERT(t->row_bytes == (uint64_t)t->ne[0] * sizeof(float) &&
              cols * rows <= t->ne[0] * t->ne[1]);
    al_tensor v = *t;
    v.ne[0] = cols, v.ne[1] = rows;
    v.row_bytes = (uint64_t)cols * sizeof(float);
    return v;
}

/* The expanded form of a prompt's attention (see the top): each head's keys [k_r |
 * k_b[h] c] and values v_b[h] c of every position up to the batch's last, expanded
 * from the latent rows, and the head's attention over them as over a head of its own.
 * A score then takes a key's width, not the latent row's, and a weighted sum a value's:
 * for a batch of many tokens that saves more than the expansion costs. q_f holds the
 * queries before absorption, k the batch's latent rows [k_r | c], out the heads'
 * values [n][n_head v_mla]. */
static void expanded_attention(al_context *c, int il, int n, const al_tensor *qf, al_tensor *k,
                               al_tensor *out) {
    const al_model *m = c->m;
    const al_tensor *t = m->layers[il].t;
    al_backend *be = c->be;
    const al_backend_ops *op = be->ops;
    const int nh = m->n_head, rot = m->rope.n_rot, kvr = m->kv_lora, hd = m->head_dim;
    const int kw = m->k_mla, nope = kw - rot, vw = m->v_mla, L = c->n_past + n;
    /* the queries [q_rope | q_nope] per head, over the absorbed queries' scratch */
    al_tensor q = reshaped(&c->q, (int64_t)nh * kw, n), att = reshaped(&c->att, (int64_t)nh * kw, n);
    al_tensor src = head_cols(qf, nh, kw, nope, rot), dst = head_cols(&q, nh, kw, 0, rot);
    op->copy(be, &src, &dst);
    if (m->mla_rope_mag != 1.0f) op->scale(be, &dst, m->mla_rope_mag);
    src = head_cols(qf, nh, kw, 0, nope), dst = head_cols(&q, nh, kw, rot, nope);
    op->copy(be, &src, &dst);
    const al_rope *rope = &m->rope;
    op->rope(be, &q, nh, kw, c->n_past, rope);
    al_tensor k_r = cols(k, 0, rot);
    if (m->mla_rope_mag != 1.0f) op->scale(be, &k_r, m->mla_rope_mag);
    op->rope(be, k, 1, hd, c->n_past, rope);
    /* the batch's rows into the cache, which never wraps for latent attention */
    al_tensor *kc, *vc;
    model_kv(c, il, &kc, &vc);
    AL_ASSERT(kc->type == AL_TYPE_F32 && L <= kc->ne[1]);
    al_tensor rows = al_tensor_rows(kc, c->n_past, n);
    op->copy(be, k, &rows);
    /* head by head, every position's key and value, then the head's attention over
     * them: one head's rows lie together (all heads' would lie a row of n_head keys
     * apart, which a long prompt's tiles read back from memory); the rope key is every
     * head's, and the values' padding stays zero */
    const al_tensor all = al_tensor_rows(kc, 0, L);
    const al_tensor lat = cols(&all, rot, kvr), rope_k = cols(&all, 0, rot);
    al_tensor ke = al_tensor_rows(&c->mla_ke, 0, L), ve = al_tensor_rows(&c->mla_ve, 0, L);
    al_tensor kr = cols(&ke, 0, rot), kn = cols(&ke, rot, nope), vh = cols(&ve, 0, vw);
    op->copy(be, &rope_k, &kr);
    /* the scratch's cap holds every position: rows are positions, as in a cache */
    al_attn_shape shape = {.n_head = 1, .n_head_kv = 1, .head_dim = kw, .n_past = c->n_past,
                           .n_tokens = n, .scale = m->attn_scale, .kv_written = true};
    const al_tensor *vb = t[L_WV_B_F32].data ? &t[L_WV_B_F32] : &t[L_WV_B];
    for (int h = 0; h < nh; h++) {
        const al_tensor wk = al_tensor_rows(&t[L_WK_B_T], (int64_t)h * nope, nope);
        const al_tensor wv = al_tensor_rows(vb, (int64_t)h * vw, vw);
        op->matmul(be, &lat, &wk, NULL, &kn);
        op->matmul(be, &lat, &wv, NULL, &vh);
        al_tensor qh = cols(&q, (int64_t)h * kw, kw), ah = cols(&att, (int64_t)h * kw, kw);
        op->attention(be, &qh, &qh, &qh, &c->mla_ke, &c->mla_ve, &shape, &ah);
    }
    src = head_cols(&att, nh, kw, 0, vw), dst = head_cols(out, nh, vw, 0, vw);
    op->copy(be, &src, &dst);
}

/* The latent attention block of layer il (model_attend_rows for seqs). */
void mla_attn_block(al_context *c, al_context *const *seqs, int il, int n) {
    const al_model *m = c->m;
    const al_tensor *t = m->layers[il].t;
    al_backend *be = c->be;
    const al_backend_ops *op = be->ops;
    const int nh = m->n_head, rot = m->rope.n_rot, kvr = m->kv_lora, hd = m->head_dim;
    const int nope = m->k_mla - rot;
    al_tensor x = al_tensor_rows(&c->x, 0, n), xb = al_tensor_rows(&c->xb, 0, n);
    al_tensor q = al_tensor_rows(&c->q, 0, n), k = al_tensor_rows(&c->k, 0, n);
    al_tensor att = al_tensor_rows(&c->att, 0, n), qf = al_tensor_rows(&c->mla_q, 0, n);
    al_tensor vo = al_tensor_rows(&c->mla_vo, 0, n);
    /* the cached row [k_r | c]: one projection's two parts, each into its place */
    al_tensor k_r = cols(&k, 0, rot), k_c = cols(&k, rot, kvr);
    const al_tensor w_c = al_tensor_rows(&t[L_WKV_A_MQA], 0, kvr);
    const al_tensor w_r = al_tensor_rows(&t[L_WKV_A_MQA], kvr, rot);
    al_tensor qa = al_tensor_rows(&c->mla_qa, 0, n);
    const bool low_rank = m->q_lora > 0;
    const al_tensor *w[3] = {low_rank ? &t[L_WQ_A] : &t[L_WQ], &w_c, &w_r};
    const al_tensor *b[3] = {NULL, NULL, NULL};
    al_tensor *out[3] = {low_rank ? &qa : &qf, &k_c, &k_r};
    backend_matmul_multi(be, &x, &t[L_ATTN_NORM], m->norm_eps, 3, w, b, &xb, out);
    if (low_rank) {
        op->rms_norm(be, &qa, &t[L_Q_A_NORM], m->norm_eps, &qa);
        op->matmul(be, &qa, &t[L_WQ_B], NULL, &qf);
    }
    op->rms_norm(be, &k_c, &t[L_KV_A_NORM], m->norm_eps, &k_c);
    if (!seqs && c->mla_rows && n >= c->mla_expand_min) {
        expanded_attention(c, il, n, &qf, &k, &vo);
        model_project_residual(m, be, &vo, &t[L_WO], NULL, &x, &xb, &t[L_ATTN_POST_NORM]);
        return;
    }
    /* the absorbed query heads [q_rope | k_b^T q_nope] */
    al_tensor q_r = head_cols(&qf, nh, m->k_mla, nope, rot), dst = head_cols(&q, nh, hd, 0, rot);
    op->copy(be, &q_r, &dst);
    if (m->mla_rope_mag != 1.0f) { /* rope is linear: the magnitude may come first */
        op->scale(be, &dst, m->mla_rope_mag);
        op->scale(be, &k_r, m->mla_rope_mag);
    }
    for (int h = 0; h < nh; h++) {
        al_tensor q_n = cols(&qf, (int64_t)h * m->k_mla, nope);
        al_tensor q_c = cols(&q, (int64_t)h * hd + rot, kvr);
        al_tensor wk = al_tensor_rows(&t[L_WK_B], (int64_t)h * kvr, kvr);
        op->matmul(be, &q_n, &wk, NULL, &q_c);
    }
    model_attend_rows(c, seqs, il, n, &q, &k, &k, &att);
    /* each head's latent output (after the rope part's, which carries nothing) to its
     * value */
    for (int h = 0; h < nh; h++) {
        al_tensor a_c = cols(&att, (int64_t)h * hd + rot, kvr);
        al_tensor o = cols(&vo, (int64_t)h * m->v_mla, m->v_mla);
        al_tensor wv = al_tensor_rows(&t[L_WV_B], (int64_t)h * m->v_mla, m->v_mla);
        op->matmul(be, &a_c, &wv, NULL, &o);
    }
    model_project_residual(m, be, &vo, &t[L_WO], NULL, &x, &xb, &t[L_ATTN_POST_NORM]);
}
