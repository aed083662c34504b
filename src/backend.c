/* backend.c: what every backend shares above its ops: the fused ops' plain fallbacks
 * (a backend that cannot fuse a sequence of ops gets them one by one) and the
 * context hooks. Which backends exist and how one is chosen: registry.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "util.h"

/* ---- fused ops (backend.h) ---------------------------------------------------------- */

void backend_matmul_add(al_backend *be, const al_tensor *x, const al_tensor *w,
                        const al_tensor *bias, al_tensor *tmp, al_tensor *out) {
    if (be->ops->matmul_add && be->ops->matmul_add(be, x, w, bias, out)) return;
    be->ops->matmul(be, x, w, bias, tmp);
    be->ops->add(be, out, tmp);
}

void backend_matmul_glu(al_backend *be, const al_tensor *x, const al_tensor *wg,
                        const al_tensor *wu, al_glu act, al_tensor *tmp, al_tensor *out) {
    /* one kernel walks both weights row by row: they must match */
    bool same = wg->type == wu->type && wg->ne[0] == wu->ne[0] && wg->ne[1] == wu->ne[1] &&
                wg->row_bytes == wu->row_bytes;
    if (same && be->ops->matmul_glu && be->ops->matmul_glu(be, x, wg, wu, act, out)) return;
    be->ops->matmul(be, x, wg, NULL, out);
    be->ops->matmul(be, x, wu, NULL, tmp);
    if (act == AL_GLU_GELU) be->ops->gelu_mul(be, out, tmp);
    else be->ops->silu_mul(be, out, tmp);
}

void backend_rope_qk(al_backend *be, al_tensor *q, int n_head, al_tensor *k, int n_head_kv,
                     int head_dim, int pos0, const al_rope *rope) {
    if (be->ops->rope_qk && be->ops->rope_qk(be, q, n_head, k, n_head_kv, head_dim, pos0, rope))
        return;
    be->ops->rope(be, q, n_head, head_dim, pos0, rope);
    be->ops->rope(be, k, n_head_kv, head_dim, pos0, rope);
}

void backend_rope_qk_rows(al_backend *be, al_tensor *q, int n_head, al_tensor *k, int n_head_kv,
                          int head_dim, const int32_t *pos, const al_rope *rope) {
    if (be->ops->rope_qk_rows &&
        be->ops->rope_qk_rows(be, q, n_head, k, n_head_kv, head_dim, pos, rope))
        return;
    for (int64_t t = 0; t < q->ne[1]; t++) {
        al_tensor qt = al_tensor_rows(q, t, 1), kt = al_tensor_rows(k, t, 1);
        backend_rope_qk(be, &qt, n_head, &kt, n_head_kv, head_dim, pos[t], rope);
    }
}

void backend_attention_rows(al_backend *be, al_tensor *q, al_tensor *k, const al_tensor *v,
                            al_tensor *const *k_cache, al_tensor *const *v_cache,
                            const int32_t *pos, const al_rope *rope,
                            const al_attn_shape *shape, al_tensor *out) {
    if (be->ops->attention_rows &&
        be->ops->attention_rows(be, q, k, v, k_cache, v_cache, pos, rope, shape, out))
        return;
    if (rope)
        backend_rope_qk_rows(be, q, shape->n_head, k, shape->n_head_kv, shape->head_dim, pos,
                             rope);
    al_attn_shape one = *shape;
    one.n_tokens = 1;
    for (int64_t i = 0; i < q->ne[1]; i++) {
        al_tensor qi = al_tensor_rows(q, i, 1), ki = al_tensor_rows(k, i, 1);
        al_tensor vi = al_tensor_rows(v, i, 1), oi = al_tensor_rows(out, i, 1);
        one.n_past = pos[i];
        be->ops->attention(be, &qi, &ki, &vi, k_cache[i], v_cache[i], &one, &oi);
    }
}

void backend_norm_matmul_glu(al_backend *be, const al_tensor *x, const al_tensor *norm, float eps,
                             const al_tensor *wg, const al_tensor *wu, al_glu act, al_tensor *xn,
                             al_tensor *tmp, al_tensor *out) {
    bool same = wg->type == wu->type && wg->ne[0] == wu->ne[0] && wg->ne[1] == wu->ne[1] &&
                wg->row_bytes == wu->row_bytes;
    if (same && be->ops->norm_matmul_glu &&
        be->ops->norm_matmul_glu(be, x, norm, eps, wg, wu, act, out))
        return;
    be->ops->rms_norm(be, x, norm, eps, xn);
    backend_matmul_glu(be, xn, wg, wu, act, tmp, out);
}

/* A backend may fuse the norm too, or only the matmuls (then the norm runs alone). */
void backend_matmul_multi(al_backend *be, const al_tensor *x, const al_tensor *norm, float eps,
                          int n, const al_tensor *const *w, const al_tensor *const *bias,
                          al_tensor *xn, al_tensor *const *out) {
    const al_backend_ops *op = be->ops;
    AL_ASSERT(n >= 1 && n <= AL_MULTI_MAX);
    if (op->matmul_multi && op->matmul_multi(be, x, norm, eps, n, w, bias, out)) return;
    if (norm) {
        op->rms_norm(be, x, norm, eps, xn);
        x = xn;
        if (op->matmul_multi && op->matmul_multi(be, x, NULL, 0.0f, n, w, bias, out)) return;
    }
    for (int i = 0; i < n; i++) op->matmul(be, x, w[i], bias[i], out[i]);
}

/* The plain ops of moe_ffn: each expert runs once over the rows routed to it
 * (gathered with get_rows), so that its weights are read once per batch. */
void backend_moe_ffn(al_backend *be, const al_tensor *xb, const al_moe *moe, al_tensor *x) {
    if (be->ops->moe_ffn && be->ops->moe_ffn(be, xb, moe, x)) return;
    backend_moe_ffn_plain(be, xb, moe, x);
}

void backend_moe_ffn_plain(al_backend *be, const al_tensor *xb, const al_moe *moe, al_tensor *x) {
    const al_backend_ops *op = be->ops;
    const int n = (int)xb->ne[1], k = moe->n_used, n_ff = moe->n_ff;
    const int64_t n_embd = xb->ne[0];
    AL_ASSERT(n <= moe->n_scratch);
    for (int e = 0; e < moe->n_expert; e++) {
        int n_rows = 0;
        for (int i = 0; i < n * k; i++)
            if (moe->sel[i] == e) {
                moe->rows[n_rows] = i / k;
                moe->rows_w[n_rows++] = moe->sel_w[i];
            }
        if (!n_rows) continue;
        al_tensor xe = al_tensor_rows(moe->xe, 0, n_rows), ye = al_tensor_rows(moe->ye, 0, n_rows);
        al_tensor he = al_tensor_rows(moe->he, 0, n_rows), he2 = al_tensor_rows(moe->he2, 0, n_rows);
        al_tensor gate = al_tensor_rows(moe->gate, (int64_t)e * n_ff, n_ff);
        al_tensor up = al_tensor_rows(moe->up, (int64_t)e * n_ff, n_ff);
        al_tensor down = al_tensor_rows(moe->down, (int64_t)e * n_embd, n_embd);
        al_tensor gate_b, up_b, down_b;
        op->get_rows(be, xb, moe->rows, n_rows, &xe);
        op->matmul(be, &xe, &gate, al_tensor_row_or_null(moe->gate_b, e, &gate_b), &he);
        op->matmul(be, &xe, &up, al_tensor_row_or_null(moe->up_b, e, &up_b), &he2);
        if (moe->act == AL_MOE_SWIGLU_OAI) op->swiglu_oai(be, &he, &he2, moe->alpha, moe->limit);
        else if (moe->act == AL_MOE_GELU) op->gelu_mul(be, &he, &he2);
        else op->silu_mul(be, &he, &he2);
        op->matmul(be, &he, &down, al_tensor_row_or_null(moe->down_b, e, &down_b), &ye);
        op->add_rows(be, x, &ye, moe->rows, moe->rows_w, n_rows);
    }
}

/* ---- contexts ---------------------------------------------------------------------------- */

al_status backend_supports(al_backend *be, const al_model_shape *shape) {
    return be->ops->supports ? be->ops->supports(be, shape) : AL_OK;
}

al_status backend_sync(al_backend *be) {
    return be->ops->sync ? be->ops->sync(be) : AL_OK;
}

al_status backend_for_context(al_backend *be, al_backend **out) {
    *out = be;
    if (!be->ops->context_backend) return AL_OK;
    *out = NULL;
    return be->ops->context_backend(be, out);
}

void backend_context_release(al_backend *model_be, al_backend *context_be) {
    if (context_be && context_be != model_be) context_be->ops->destroy(context_be);
}
