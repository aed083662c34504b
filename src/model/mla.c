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
    return AL_OK;
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
