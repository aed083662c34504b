/* forward.c: the forward pass over a batch, al_eval and al_eval_multi.
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
#include "model/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/arch.h"
#include "format/quant.h"
#include "text/tokenizer.h"
#include "util.h"

/* Per-head RMSNorm of q or k in place (the Q/K norm of qwen3 and gemma3): the rows
 * are viewed as n_heads rows of the norm's width each (backend.h: rms_norm). */
void model_head_norm(const al_model *m, al_backend *be, const al_tensor *x, int n_heads,
                      const al_tensor *w) {
    const int64_t hd = w->ne[0];
    AL_ASSERT(x->row_bytes == (uint64_t)(n_heads * hd) * sizeof(float));
    al_tensor h = *x;
    h.ne[0] = hd;
    h.ne[1] = x->ne[1] * n_heads;
    h.row_bytes = (uint64_t)hd * sizeof(float);
    be->ops->rms_norm(be, &h, w, m->norm_eps, &h);
}

al_tensor model_scratch(const al_tensor *t, int64_t ne0, int n) {
    AL_ASSERT(ne0 <= t->ne[0] && n <= t->ne[1]);
    al_tensor v = *t;
    v.ne[0] = ne0;
    v.ne[1] = n;
    v.row_bytes = (uint64_t)ne0 * sizeof(float);
    return v;
}

void model_kv(al_context *c, int il, al_tensor **k, al_tensor **v) {
    if (il == c->m->n_layer) { /* the MTP block, after the trunk (mtp.c) */
        mtp_kv(c, k, v);
        return;
    }
    const int src = c->m->layers[il].kv_src; /* its own, or an earlier layer's */
    *k = &c->k_cache[src];
    *v = &c->v_cache[src];
}

/* A layer attending to an earlier layer's cache, which holds the batch already: its
 * queries' rope (each row at its sequence's position), then attention alone. */
static void attend_written(al_context *c, al_context *const *seqs, int il, int n, al_tensor *q,
                           const al_rope *rope, al_attn_shape *shape, al_tensor *att) {
    al_backend *be = c->be;
    if (!seqs) {
        al_tensor *kc, *vc;
        model_kv(c, il, &kc, &vc);
        if (rope) be->ops->rope(be, q, shape->n_head, shape->head_dim, c->n_past, rope);
        be->ops->attention(be, q, q, q, kc, vc, shape, att);
        return;
    }
    shape->n_tokens = 1;
    for (int i = 0; i < n; i++) {
        al_tensor qi = al_tensor_rows(q, i, 1), ai = al_tensor_rows(att, i, 1), *kc, *vc;
        model_kv(seqs[i], il, &kc, &vc);
        shape->n_past = seqs[i]->n_past;
        if (rope) be->ops->rope(be, &qi, shape->n_head, shape->head_dim, shape->n_past, rope);
        be->ops->attention(be, &qi, &qi, &qi, kc, vc, shape, &ai);
    }
}

/* Rotary positions and attention for rows of one sequence, or of several: when seqs
 * is NULL the n rows are consecutive positions of c; otherwise row i is the next
 * position of seqs[i], attending to that sequence's own cache. */
void model_attend_rows(al_context *c, al_context *const *seqs, int il, int n, al_tensor *q,
                        al_tensor *k, al_tensor *v, al_tensor *att) {
    const al_model *m = c->m;
    al_backend *be = c->be;
    const al_backend_ops *op = be->ops;
    const layer_weights *l = &m->layers[il];
    const bool swa = l->swa;
    const al_rope *rope = swa ? &m->rope_swa : &m->rope;
    al_attn_shape shape = {.n_head = m->n_head, .n_head_kv = l->n_head_kv,
                           .head_dim = l->head_dim, .n_past = c->n_past, .n_tokens = n,
                           .scale = m->attn_scale, .window = swa ? m->swa_window : 0,
                           .sinks = opt(&l->t[L_SINKS]),
                           .kv_written = il < m->n_layer && l->kv_src != il};
    if (shape.kv_written) {
        attend_written(c, seqs, il, n, q, rope, &shape, att);
        return;
    }
    if (!seqs && n > 1) {
        al_tensor *kc, *vc;
        model_kv(c, il, &kc, &vc);
        backend_rope_qk(be, q, m->n_head, k, l->n_head_kv, l->head_dim, c->n_past, rope);
        op->attention(be, q, k, v, kc, vc, &shape, att);
        return;
    }
    /* decoding, one sequence or several: each row's rope at its sequence's position,
     * its key and value stored, and its attention over its sequence's caches (on a
     * GPU, one dispatch for all of it) */
    for (int i = 0; i < n; i++) {
        al_context *s = seqs ? seqs[i] : c;
        c->seq_pos[i] = s->n_past;
        model_kv(s, il, &c->seq_kc[i], &c->seq_vc[i]);
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
    const int n_ff = m->layers[il].n_ff; /* its own width (gemma4) */
    al_tensor hb = model_scratch(&c->hb, n_ff, n), hb2 = model_scratch(&c->hb2, n_ff, n);
    /* the FFN norm, gate and up projections and activation: one dispatch on a GPU */
    backend_norm_matmul_glu(be, &x, &t[L_FFN_NORM], m->norm_eps, &t[L_GATE], &t[L_UP],
                            m->ad->act == ACT_GELU ? AL_GLU_GELU : AL_GLU_SILU, &xb, &hb2, &hb);
    model_project_residual(m, be, &hb, &t[L_DOWN], NULL, &x, &xb, &t[L_FFN_POST_NORM]);
}

/* The k largest of score [ne] into s, the lower index first on ties: k is small, a
 * selection pass per pick. */
static void top_k(const float *score, int ne, int k, int32_t *s) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < ne; e++) {
            bool taken = false;
            for (int i = 0; i < j && !taken; i++) taken = s[i] == e;
            if (!taken && (best < 0 || score[e] > score[best])) best = e;
        }
        s[j] = best;
    }
}

/* The router of deepseek2 and glm4moe for one token: the gating's probabilities (a
 * softmax over every expert, or sigmoid scores); the k largest of probability plus
 * bias pick the experts, from the n_group_used groups whose two best such scores sum
 * highest where the experts come in groups; the picked probabilities, normalized where
 * expert_norm (the sum kept above f16's smallest normal, as llama.cpp does) and times
 * expert_scale, weight them. */
static void route_probs(const al_model *m, const float *l, const float *bias, int32_t *s,
                        float *w) {
    enum { MAX_EXPERT = 4096 }; /* read_moe's limit */
    float p[MAX_EXPERT], score[MAX_EXPERT];
    const int ne = m->n_expert, k = m->n_expert_used;
    float mx = l[0];
    for (int e = 1; e < ne; e++) mx = l[e] > mx ? l[e] : mx;
    double sum = 0;
    for (int e = 0; e < ne; e++) {
        p[e] = m->gate_sigmoid ? 1.0f / (1.0f + expf(-l[e])) : expf(l[e] - mx);
        sum += p[e];
    }
    for (int e = 0; e < ne; e++) {
        if (!m->gate_sigmoid) p[e] *= (float)(1.0 / sum); /* as ggml_soft_max */
        score[e] = bias ? p[e] + bias[e] : p[e];
    }
    if (m->n_group > 1) { /* the other groups' experts out of the running */
        const int per = ne / m->n_group;
        float gs[64];
        int32_t best[64];
        for (int g = 0; g < m->n_group; g++) {
            int32_t two[2];
            top_k(score + g * per, per, per < 2 ? per : 2, two);
            gs[g] = score[g * per + two[0]] + (per < 2 ? 0.0f : score[g * per + two[1]]);
        }
        top_k(gs, m->n_group, m->n_group_used, best);
        for (int g = 0; g < m->n_group; g++) {
            bool used = false;
            for (int j = 0; j < m->n_group_used; j++) used |= best[j] == g;
            for (int e = 0; !used && e < per; e++) score[g * per + e] = -INFINITY;
        }
    }
    top_k(score, ne, k, s);
    float total = 0.0f;
    for (int j = 0; j < k; j++) total += w[j] = p[s[j]];
    if (total < 6.103515625e-5f) total = 6.103515625e-5f;
    for (int j = 0; j < k; j++) {
        if (m->expert_norm) w[j] /= total;
        w[j] *= m->expert_scale;
    }
}

/* Each token's experts: the n_expert_used largest router logits, weighted by a
 * softmax over just those. That is both qwen3moe's gating (a softmax over all experts,
 * the picked weights renormalised: the full denominator cancels) and gpt-oss's (top k
 * of the raw logits, then a softmax). deepseek2's and glm4moe's: route_probs. */
void model_route(const al_model *m, int il, const float *logits, int n, int32_t *sel,
                 float *sel_w) {
    const int ne = m->n_expert, k = m->n_expert_used;
    const float *scale = m->layers[il].down_exps_s; /* gemma4: each expert's output's */
    for (int t = 0; t < n; t++) {
        const float *l = logits + (size_t)t * ne;
        int32_t *s = sel + (size_t)t * k;
        float *w = sel_w + (size_t)t * k;
        if (m->route_probs) {
            route_probs(m, l, m->layers[il].exp_probs_b, s, w);
            continue;
        }
        top_k(l, ne, k, s);
        double sum = 0; /* s[0] holds the largest logit */
        for (int j = 0; j < k; j++) sum += w[j] = (float)exp((double)l[s[j]] - l[s[0]]);
        for (int j = 0; j < k; j++) w[j] = (float)(w[j] / sum);
        for (int j = 0; scale && j < k; j++) w[j] *= scale[s[j]];
    }
}

al_moe model_moe(al_context *c, int il) {
    const al_model *m = c->m;
    const al_tensor *t = m->layers[il].t;
    return (al_moe){
        .gate = &t[L_GATE_EXPS], .up = &t[L_UP_EXPS], .down = &t[L_DOWN_EXPS],
        .gate_b = opt(&t[L_GATE_EXPS_B]), .up_b = opt(&t[L_UP_EXPS_B]),
        .down_b = opt(&t[L_DOWN_EXPS_B]),
        .n_expert = m->n_expert, .n_used = m->n_expert_used, .n_ff = m->n_ff_exp,
        .act = m->ad->act == ACT_SWIGLU_OAI ? AL_MOE_SWIGLU_OAI
               : m->ad->act == ACT_GELU    ? AL_MOE_GELU : AL_MOE_SILU,
        .alpha = 1.702f, .limit = 7.0f,
        .sel = c->sel, .sel_w = c->sel_w,
        .xe = &c->xe, .ye = &c->ye, .he = &c->he, .he2 = &c->he2,
        .rows = c->rows, .rows_w = c->rows_w, .n_scratch = c->moe_rows,
    };
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
    model_route(m, il, c->router_host, n, c->sel, c->sel_w);
    const al_moe moe = model_moe(c, il);
    backend_moe_ffn(be, &xb, &moe, &x);
    if (t[L_GATE_SHEXP].data) hybrid_shared_expert(c, il, n);
}

void model_ffn(al_context *c, int il, int n) {
    if (c->m->n_expert && !c->m->layers[il].dense) {
        if (c->m->ad->flags & ARCH_PER_LAYER) gemma4_moe_ffn(c, il, n);
        else moe_block(c, il, n);
    } else {
        ffn_block(c, il, n);
    }
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
    const bool per_layer = m->ad->flags & ARCH_PER_LAYER;
    if (per_layer) gemma4_inputs(c, tokens, n);
    for (int il = 0; il < m->n_layer; il++) {
        if (m->layers[il].recr) hybrid_recurrent_block(c, seqs, il, n);
        else if (m->ad->flags & ARCH_HYBRID) hybrid_attn_block(c, seqs, il, n);
        else if (m->ad->flags & ARCH_MLA) mla_attn_block(c, seqs, il, n);
        else if (per_layer) gemma4_attn_block(c, seqs, il, n);
        else attn_block(c, seqs, il, n);
        model_ffn(c, il, n);
        if (per_layer) gemma4_layer_end(c, il, n);
    }
    if (!logits && !c->mtp) return;
    be->ops->rms_norm(be, &x, &m->output_norm, m->norm_eps, &xb);
    for (int r = first_row; logits && r < n; r += LOGIT_ROWS) {
        int nr = n - r < LOGIT_ROWS ? n - r : LOGIT_ROWS;
        al_tensor in = al_tensor_rows(&c->xb, r, nr), out = al_tensor_rows(&c->logits, 0, nr);
        float *dst = logits + (size_t)(r - first_row) * m->n_vocab;
        be->ops->matmul(be, &in, &m->output, NULL, &out);
        be->ops->tensor_read(be, &out, dst, (uint64_t)nr * m->n_vocab * sizeof(float));
        if (m->softcap > 0) soft_cap(dst, (size_t)nr * m->n_vocab, m->softcap);
    }
    if (c->mtp) mtp_catch_up(c, seqs, tokens, n); /* the block's cache, from xb's rows */
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
        if (!ctxs[i]->mtp != !c0->mtp)
            return al_error(AL_ERR_ARG, "al_eval_multi: context %d %s a next-token-prediction "
                            "cache (mtp) and context 0 %s", i, ctxs[i]->mtp ? "keeps" : "lacks",
                            c0->mtp ? "keeps one" : "does not");
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
