/* gemma4.c: what Gemma 4 adds to gemma3's blocks (ARCH_PER_LAYER).
 *
 *   - Layers sized one by one: the sliding layers have heads of key_length_swa and
 *     rotate rope.dimension_count_swa of them at freq_base_swa; the global layers
 *     have heads of key_length and rotate with rope_freqs (proportional rope); the
 *     kv heads and feed-forward widths may be arrays of one per layer.
 *   - The last shared_kv_layers layers keep no cache: each attends to the cache of
 *     the last earlier layer of its kind (sliding or global), which the batch's keys
 *     and values are already in, and projects only its queries.
 *   - Values pass a weightless RMSNorm; attention is not scaled (the Q/K norms do
 *     it); a layer without attn_v takes the key projection for its values.
 *   - Per-layer inputs (E2B/E4B, embedding_length_per_layer_input): each token has a
 *     vector per layer, its row of per_layer_token_embd (times sqrt of its width)
 *     plus the RMS-normed projection of its scaled embedding (per_layer_model_proj,
 *     over sqrt(n_embd)), the sum over sqrt(2). After its FFN a layer adds
 *     post_norm(proj(gelu(inp_gate x) * its vector)) to the residual stream.
 *   - layer_output_scale: a scalar multiplying the layer's output.
 * As llama.cpp's src/models/gemma4.cpp computes them, op by op.
 */
#include "model/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/quant.h"
#include "model/arch.h"
#include "util.h"

struct gemma4_weights {
    al_tensor ple_embd; /* per_layer_token_embd: [n_layer n_ple] per token, any type */
    al_tensor ple_proj; /* per_layer_model_proj: n_embd -> n_layer n_ple */
    al_tensor ple_norm; /* per_layer_proj_norm [n_ple] */
    al_tensor ones;     /* [the widest head] of 1: the values' weightless norm */
    int head_dim_swa;
    int n_shared;       /* the last layers that read earlier layers' caches */
};

static bool per_layer(const al_model *m) { return (m->ad->flags & ARCH_PER_LAYER) != 0; }

/* The shared layers' rule (llama.cpp's): from layer `first` on, a sliding layer reads
 * layer first - 2's cache and a global one layer first - 1's, which must be of those
 * kinds. */
static al_status read_shared(al_model *m, int n_shared) {
    const char *path = m->file->path;
    const int first = m->n_layer - n_shared;
    if (n_shared < 0 || (n_shared > 0 && first < 2))
        return al_error(AL_ERR_FORMAT, "%s: shared_kv_layers %d leaves fewer than 2 of %d layers "
                        "with caches of their own", path, n_shared, m->n_layer);
    if (n_shared > 0 && (!m->layers[first - 2].swa || m->layers[first - 1].swa))
        return al_error(AL_ERR_FORMAT, "%s: shared_kv_layers %d: layers %d and %d must be a "
                        "sliding and a global one (sliding_window_pattern), whose caches the "
                        "last layers read", path, n_shared, first - 2, first - 1);
    m->g4->n_shared = n_shared;
    return AL_OK;
}

al_status gemma4_read(al_model *m) {
    if (!per_layer(m)) return AL_OK;
    const char *path = m->file->path;
    if (!(m->g4 = al_calloc(1, sizeof *m->g4)))
        return al_error(AL_ERR_NOMEM, "out of memory for gemma4's weights");
    int vlen, n_rot, n_shared;
    al_status st;
    if ((st = model_get_u32(m, "attention.key_length_swa", (uint32_t)m->head_dim, false,
                           &m->g4->head_dim_swa)) ||
        (st = model_get_u32(m, "attention.value_length_swa", (uint32_t)m->g4->head_dim_swa,
                           false, &vlen)) ||
        (st = model_get_u32(m, "rope.dimension_count_swa", (uint32_t)m->g4->head_dim_swa, false,
                           &n_rot)) ||
        (st = model_get_u32(m, "attention.shared_kv_layers", 0, false, &n_shared)) ||
        (st = model_get_u32(m, "embedding_length_per_layer_input", 0, false, &m->n_ple)))
        return st;
    const int hs = m->g4->head_dim_swa;
    if (hs <= 0 || hs > 4096 || vlen != hs || n_rot <= 0 || n_rot > hs || n_rot % 2)
        return al_error(AL_ERR_FORMAT, "%s: key_length_swa %d, value_length_swa %d, "
                        "rope.dimension_count_swa %d: expected equal head sizes in [1, 4096] "
                        "and an even rotation within them", path, hs, vlen, n_rot);
    if (m->n_ple < 0 || m->n_ple > m->n_embd)
        return al_error(AL_ERR_FORMAT, "%s: embedding_length_per_layer_input %d exceeds "
                        "embedding_length %d", path, m->n_ple, m->n_embd);
    m->rope_swa.n_rot = n_rot;
    m->attn_scale = 1.0f; /* the Q/K norms scale q.k */
    return read_shared(m, n_shared);
}

void gemma4_layer_shape(const al_model *m, int il, layer_weights *l) {
    if (!per_layer(m) || il >= m->n_layer) return;
    if (l->swa) l->head_dim = m->g4->head_dim_swa;
    /* arrays were checked whole when the largest was read (read_hparams) */
    if (model_get_u32_layer(m, "attention.head_count_kv", (uint32_t)m->n_head, false, il,
                            &l->n_head_kv) ||
        model_get_u32_layer(m, "feed_forward_length", 0, true, il, &l->n_ff))
        l->n_head_kv = m->n_head_kv, l->n_ff = m->n_ff;
    const int first = m->n_layer - m->g4->n_shared;
    if (il >= first) l->kv_src = first - (l->swa ? 2 : 1);
}

al_status gemma4_bind_layer(al_model *m, int il, layer_weights *l) {
    if (!per_layer(m)) return AL_OK;
    const char *path = m->file->path;
    const al_tensor *t = l->t;
    if (l->n_head_kv <= 0 || m->n_head % l->n_head_kv || l->n_ff <= 0)
        return al_error(AL_ERR_FORMAT, "%s: blk.%d: head_count_kv %d must divide head_count %d "
                        "and feed_forward_length %d be positive", path, il, l->n_head_kv,
                        m->n_head, l->n_ff);
    if (l->kv_src == il && (!t[L_WK].data || !t[L_K_NORM].data))
        return al_error(AL_ERR_FORMAT, "%s: blk.%d keeps a cache of its own but has no "
                        "attn_k.weight or attn_k_norm.weight", path, il);
    if (m->n_ple && (!t[L_PLE_GATE].data || !t[L_PLE_PROJ].data || !t[L_PLE_NORM].data))
        return al_error(AL_ERR_FORMAT, "%s: blk.%d lacks inp_gate, proj or post_norm.weight "
                        "(embedding_length_per_layer_input %d)", path, il, m->n_ple);
    /* a layer with experts has them whole, beside its dense FFN */
    static const arch_slot moe[] = {L_GATE_INP, L_GATE_INP_S, L_PRE_NORM_2, L_POST_NORM_1,
                                    L_POST_NORM_2, L_GATE_EXPS, L_UP_EXPS, L_DOWN_EXPS};
    int n_moe = 0;
    for (size_t i = 0; i < sizeof moe / sizeof *moe; i++) n_moe += t[moe[i]].data != NULL;
    if (n_moe && (n_moe < (int)(sizeof moe / sizeof *moe) || !m->n_expert))
        return al_error(AL_ERR_FORMAT, "%s: blk.%d has %d of the %d tensors of a layer with "
                        "experts (ffn_gate_inp, its scale, pre_ffw_norm_2, post_ffw_norm_1/2, "
                        "ffn_gate/up/down_exps; expert_count %d)", path, il, n_moe,
                        (int)(sizeof moe / sizeof *moe), m->n_expert);
    l->dense = n_moe == 0;
    if (t[L_DOWN_EXPS_S].data) { /* each expert's output scale: the router's, on the host */
        l->down_exps_s = (float *)((char *)t[L_DOWN_EXPS_S].data + t[L_DOWN_EXPS_S].offset);
        memset(&l->t[L_DOWN_EXPS_S], 0, sizeof l->t[L_DOWN_EXPS_S]);
    }
    if (t[L_OUT_SCALE].data) { /* one value, applied by the scale op */
        float v = ((const float *)((const char *)t[L_OUT_SCALE].data + t[L_OUT_SCALE].offset))[0];
        if (!(fabsf(v) < 1e30f))
            return al_error(AL_ERR_FORMAT, "%s: blk.%d.layer_output_scale %g is not a number",
                            path, il, (double)v);
        l->out_scale = v;
        memset(&l->t[L_OUT_SCALE], 0, sizeof l->t[L_OUT_SCALE]);
    }
    return AL_OK;
}

al_status gemma4_bind(al_model *m) {
    if (!per_layer(m)) return AL_OK;
    struct gemma4_weights *g = m->g4;
    const int64_t all = (int64_t)m->n_layer * m->n_ple;
    al_status st;
    if (m->n_ple &&
        ((st = model_bind(m, "per_layer_token_embd.weight", all, m->n_vocab, false, &g->ple_embd)) ||
         (st = model_bind(m, "per_layer_model_proj.weight", m->n_embd, all, false, &g->ple_proj)) ||
         (st = model_bind(m, "per_layer_proj_norm.weight", m->n_ple, 0, false, &g->ple_norm))))
        return st;
    int widest = 0;
    for (int il = 0; il < m->n_layer; il++)
        if (m->layers[il].head_dim > widest) widest = m->layers[il].head_dim;
    float *ones = al_malloc((size_t)widest * sizeof *ones);
    if ((st = model_own(m, ones, "the values' norm"))) return st;
    for (int i = 0; i < widest; i++) ones[i] = 1.0f;
    g->ones = (al_tensor){.type = AL_TYPE_F32, .ne = {widest, 1}, .data = ones,
                          .row_bytes = (uint64_t)widest * sizeof(float)};
    return AL_OK;
}

al_status gemma4_load_weights(al_model *m, al_status (*load)(al_backend *, al_tensor *),
                              al_status (*pack)(al_backend *, al_tensor *, int64_t)) {
    if (!per_layer(m)) return AL_OK;
    struct gemma4_weights *g = m->g4;
    al_status st;
    if (load && (st = load(m->be, &g->ones))) return st;
    if (!m->n_ple) return AL_OK;
    /* the table is read by rows (get_rows), the projection by matmul */
    if (load && ((st = load(m->be, &g->ple_embd)) || (st = load(m->be, &g->ple_proj)) ||
                 (st = load(m->be, &g->ple_norm))))
        return st;
    return pack ? pack(m->be, &g->ple_proj, g->ple_proj.ne[1]) : AL_OK;
}

uint64_t gemma4_bytes_per_token(const al_model *m) {
    if (!per_layer(m) || !m->n_ple) return 0;
    const struct gemma4_weights *g = m->g4;
    return g->ple_embd.row_bytes + g->ple_proj.row_bytes * (uint64_t)g->ple_proj.ne[1];
}

void gemma4_free(al_model *m) {
    al_free(m->g4);
    m->g4 = NULL;
}

al_status gemma4_context_alloc(al_context *c) {
    const al_model *m = c->m;
    al_backend *be = c->be;
    al_status st;
    if (m->n_expert &&
        ((st = be->ops->tensor_alloc(be, m->n_embd, c->n_batch, &c->g4_mlp)) ||
         (st = be->ops->tensor_alloc(be, m->n_embd, c->n_batch, &c->g4_in)) ||
         (st = be->ops->tensor_alloc(be, m->n_embd, c->n_batch, &c->g4_moe))))
        return st;
    if (!m->n_ple) return AL_OK;
    const int64_t all = (int64_t)m->n_layer * m->n_ple;
    if ((st = be->ops->tensor_alloc(be, all, c->n_batch, &c->ple_in)) ||
        (st = be->ops->tensor_alloc(be, all, c->n_batch, &c->ple_tok)) ||
        (st = be->ops->tensor_alloc(be, m->n_ple, c->n_batch, &c->ple_h)))
        return st;
    return AL_OK;
}

void gemma4_inputs(al_context *c, const int32_t *tokens, int n) {
    const al_model *m = c->m;
    if (!m->n_ple) return;
    const struct gemma4_weights *g = m->g4;
    al_backend *be = c->be;
    const al_backend_ops *op = be->ops;
    al_tensor x = al_tensor_rows(&c->x, 0, n), in = al_tensor_rows(&c->ple_in, 0, n);
    al_tensor tok = al_tensor_rows(&c->ple_tok, 0, n);
    op->matmul(be, &x, &g->ple_proj, NULL, &in);
    op->scale(be, &in, 1.0f / sqrtf((float)m->n_embd));
    al_tensor each = in; /* each layer's part as a row of its own */
    each.ne[0] = m->n_ple;
    each.ne[1] = (int64_t)n * m->n_layer;
    each.row_bytes = (uint64_t)m->n_ple * sizeof(float);
    op->rms_norm(be, &each, &g->ple_norm, m->norm_eps, &each);
    op->get_rows(be, &g->ple_embd, tokens, n, &tok);
    op->scale(be, &tok, sqrtf((float)m->n_ple));
    op->add(be, &in, &tok);
    op->scale(be, &in, 1.0f / sqrtf(2.0f));
}

void gemma4_attn_block(al_context *c, al_context *const *seqs, int il, int n) {
    const al_model *m = c->m;
    const layer_weights *l = &m->layers[il];
    const al_tensor *t = l->t;
    al_backend *be = c->be;
    const int64_t qd = (int64_t)m->n_head * l->head_dim, kvd = (int64_t)l->n_head_kv * l->head_dim;
    al_tensor x = al_tensor_rows(&c->x, 0, n), xb = al_tensor_rows(&c->xb, 0, n);
    al_tensor q = model_scratch(&c->q, qd, n), k = model_scratch(&c->k, kvd, n);
    al_tensor v = model_scratch(&c->v, kvd, n), att = model_scratch(&c->att, qd, n);
    /* a layer with its own cache projects keys and values (the key projection twice
     * where it has no attn_v), a shared one its queries alone */
    const bool own = l->kv_src == il;
    const al_tensor *w[3] = {&t[L_WQ], &t[L_WK], t[L_WV].data ? &t[L_WV] : &t[L_WK]};
    const al_tensor *b[3] = {NULL, NULL, NULL};
    al_tensor *out[3] = {&q, &k, &v};
    backend_matmul_multi(be, &x, &t[L_ATTN_NORM], m->norm_eps, own ? 3 : 1, w, b, &xb, out);
    model_head_norm(m, be, &q, m->n_head, &t[L_Q_NORM]);
    if (own) {
        al_tensor ones = m->g4->ones;
        ones.ne[0] = l->head_dim;
        model_head_norm(m, be, &k, l->n_head_kv, &t[L_K_NORM]);
        model_head_norm(m, be, &v, l->n_head_kv, &ones);
    }
    model_attend_rows(c, seqs, il, n, &q, &k, &v, &att);
    model_project_residual(m, be, &att, &t[L_WO], NULL, &x, &xb, &t[L_ATTN_POST_NORM]);
}

void gemma4_layer_end(al_context *c, int il, int n) {
    const al_model *m = c->m;
    const layer_weights *l = &m->layers[il];
    al_backend *be = c->be;
    al_tensor x = al_tensor_rows(&c->x, 0, n), xb = al_tensor_rows(&c->xb, 0, n);
    if (m->n_ple) {
        al_tensor h = al_tensor_rows(&c->ple_h, 0, n);
        al_tensor mine = al_tensor_rows(&c->ple_in, 0, n); /* this layer's columns */
        mine.offset += (uint64_t)il * m->n_ple * sizeof(float);
        mine.ne[0] = m->n_ple;
        be->ops->matmul(be, &x, &l->t[L_PLE_GATE], NULL, &h);
        be->ops->gelu_mul(be, &h, &mine);
        model_project_residual(m, be, &h, &l->t[L_PLE_PROJ], NULL, &x, &xb, &l->t[L_PLE_NORM]);
    }
    if (l->out_scale != 1.0f) be->ops->scale(be, &x, l->out_scale);
}

void gemma4_moe_ffn(al_context *c, int il, int n) {
    const al_model *m = c->m;
    const al_tensor *t = m->layers[il].t;
    al_backend *be = c->be;
    const al_backend_ops *op = be->ops;
    const int n_ff = m->layers[il].n_ff;
    al_tensor x = al_tensor_rows(&c->x, 0, n), xb = al_tensor_rows(&c->xb, 0, n);
    al_tensor mlp = al_tensor_rows(&c->g4_mlp, 0, n), in = al_tensor_rows(&c->g4_in, 0, n);
    al_tensor out = al_tensor_rows(&c->g4_moe, 0, n), router = al_tensor_rows(&c->router, 0, n);
    al_tensor hb = model_scratch(&c->hb, n_ff, n), hb2 = model_scratch(&c->hb2, n_ff, n);
    /* the dense FFN, normed after */
    backend_norm_matmul_glu(be, &x, &t[L_FFN_NORM], m->norm_eps, &t[L_GATE], &t[L_UP], AL_GLU_GELU,
                            &xb, &hb2, &hb);
    op->matmul(be, &hb, &t[L_DOWN], NULL, &mlp);
    op->rms_norm(be, &mlp, &t[L_POST_NORM_1], m->norm_eps, &mlp);
    /* the router reads x normed, times its per-channel scale, over sqrt(n_embd) */
    op->rms_norm(be, &x, &t[L_GATE_INP_S], m->norm_eps, &xb);
    op->scale(be, &xb, 1.0f / sqrtf((float)m->n_embd));
    op->matmul(be, &xb, &t[L_GATE_INP], NULL, &router);
    op->tensor_read(be, &router, c->router_host, (uint64_t)n * m->n_expert * sizeof(float));
    model_route(m, il, c->router_host, n, c->sel, c->sel_w);
    /* the experts over their own normed input, into zeros, normed after */
    op->rms_norm(be, &x, &t[L_PRE_NORM_2], m->norm_eps, &in);
    op->scale(be, &out, 0.0f);
    const al_moe moe = model_moe(c, il);
    backend_moe_ffn(be, &in, &moe, &out);
    op->rms_norm(be, &out, &t[L_POST_NORM_2], m->norm_eps, &out);
    op->add(be, &mlp, &out);
    op->rms_norm(be, &mlp, &t[L_FFN_POST_NORM], m->norm_eps, &mlp);
    op->add(be, &x, &mlp);
}
