/* model_hybrid.c: the gated delta-net hybrids (qwen35, qwen35moe, qwen3next).
 *
 * Three of four layers are gated delta-net layers: linear attention whose memory is a
 * fixed-size state per sequence (a convolution's last inputs and a matrix per value
 * head) instead of a KV cache. The others are full attention whose query projection
 * also gives a sigmoid gate of the attention's output. The MoE variants add a shared
 * expert beside the routed ones.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/internal.h"
#include "util.h"

/* Rope sections (qwen35's interleaved M-RoPE): text gives every section the same
 * position but the fourth, whose pairs do not turn. A file where some pair falls in no
 * turning section is refused rather than run with a rope of its own. */
static al_status check_rope_sections(const al_model *m) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", m->arch);
    const gguf_kv *kv = gguf_find_key(m->file, key);
    if (!kv) return AL_OK;
    if (kv->type != GGUF_VT_ARRAY || (kv->v.arr.type != GGUF_VT_I32 &&
        kv->v.arr.type != GGUF_VT_U32) || kv->v.arr.n < 3 || kv->v.arr.n > 4)
        return al_error(AL_ERR_FORMAT, "%s: %s must be 3 or 4 integers", m->file->path, key);
    int32_t sec[4] = {0}; /* the array lies in the file unaligned */
    memcpy(sec, kv->v.arr.data, kv->v.arr.n * sizeof *sec);
    int64_t n_sect = 0;
    for (uint64_t i = 0; i < kv->v.arr.n; i++) {
        if (sec[i] < 0 || sec[i] > 65536)
            return al_error(AL_ERR_FORMAT, "%s: %s[%d] = %d is out of range", m->file->path,
                            key, (int)i, sec[i]);
        n_sect += sec[i];
    }
    if (n_sect <= 0) return al_error(AL_ERR_FORMAT, "%s: %s are all zero", m->file->path, key);
    for (int i = 0; i < m->rope.n_rot / 2; i++) {
        const int64_t r = i % n_sect;
        if (!(r < 3 * (int64_t)sec[r % 3]))
            return al_error(AL_ERR_UNSUPPORTED, "%s: %s leave rope pair %d unrotated, which "
                            "is not supported", m->file->path, key, i);
    }
    return AL_OK;
}

/* Which layers are recurrent: ARCH.attention.recurrent_layers (one bool per layer), or
 * every layer but each full_attention_interval-th (default 4). */
static al_status read_recurrent_layers(al_model *m) {
    if (!(m->recr = al_calloc((size_t)m->n_layer, sizeof *m->recr)))
        return al_error(AL_ERR_NOMEM, "out of memory for %d layers", m->n_layer);
    return model_layer_pattern(m, "attention.recurrent_layers", "full_attention_interval", 4,
                              m->recr);
}

/* Gated delta-net layers (ARCH_HYBRID): the ssm.* sizes, which must agree. */
al_status hybrid_read(al_model *m) {
    if (!(m->ad->flags & ARCH_HYBRID)) return AL_OK;
    al_status st;
    if ((st = model_get_u32(m, "ssm.conv_kernel", 0, true, &m->ssm_kernel)) ||
        (st = model_get_u32(m, "ssm.inner_size", 0, true, &m->ssm_inner)) ||
        (st = model_get_u32(m, "ssm.state_size", 0, true, &m->ssm_state)) ||
        (st = model_get_u32(m, "ssm.time_step_rank", 0, true, &m->ssm_v_heads)) ||
        (st = model_get_u32(m, "ssm.group_count", 0, true, &m->ssm_k_heads)))
        return st;
    if (m->ssm_kernel < 2 || m->ssm_kernel > 16 || m->ssm_state <= 0 || m->ssm_state > 512 ||
        m->ssm_k_heads <= 0 || m->ssm_v_heads <= 0 || m->ssm_v_heads % m->ssm_k_heads ||
        (int64_t)m->ssm_state * m->ssm_v_heads != m->ssm_inner)
        return al_error(AL_ERR_FORMAT, "%s: ssm.conv_kernel %d, inner_size %d, state_size %d, "
                        "time_step_rank %d, group_count %d: expected a kernel of 2..16, a "
                        "state of 1..512, inner_size = state_size x time_step_rank and "
                        "time_step_rank a multiple of group_count", m->file->path,
                        m->ssm_kernel, m->ssm_inner, m->ssm_state, m->ssm_v_heads,
                        m->ssm_k_heads);
    if ((st = check_rope_sections(m))) return st;
    return read_recurrent_layers(m);
}

/* Copies rows of src into a new owned tensor of n_rows rows: row r is src's row
 * map(r). Rows are copied whole, so any type keeps its blocks. */
static al_status gather_rows(al_model *m, const char *what, const al_tensor *src, int64_t n_rows,
                             int64_t (*map)(const al_model *, int64_t, int), int part,
                             al_tensor *out) {
    uint8_t *copy = al_malloc((size_t)(n_rows * (int64_t)src->row_bytes));
    al_status st = model_own(m, copy, what);
    if (st != AL_OK) return st;
    for (int64_t r = 0; r < n_rows; r++)
        memcpy(copy + r * (int64_t)src->row_bytes,
               (const uint8_t *)src->data + map(m, r, part) * (int64_t)src->row_bytes,
               src->row_bytes);
    *out = *src;
    out->ne[1] = n_rows;
    out->data = copy;
    return AL_OK;
}

/* qwen3next's ssm_in holds, per key head g, that head's query and key rows (S each),
 * then the value and z rows of its r = Hv/Hk value heads (rS each). Part 0 maps a
 * row of [q | k | v] (every head's queries, then keys, then values), part 1 a row of z. */
static int64_t qkvz_row(const al_model *m, int64_t r, int part) {
    const int64_t S = m->ssm_state, hk = m->ssm_k_heads, rs = m->ssm_inner / hk;
    const int64_t G = 2 * S + 2 * rs;
    if (part == 1) return r / rs * G + 2 * S + rs + r % rs;
    if (r < hk * S) return r / S * G + r % S;
    if (r < 2 * hk * S) return (r - hk * S) / S * G + S + r % S;
    r -= 2 * hk * S;
    return r / rs * G + 2 * S + r % rs;
}

/* qwen3next's ssm_ba holds, per key head, the beta rows of its r value heads, then
 * their alpha rows. Part 0 maps beta's row h, part 1 alpha's. */
static int64_t ba_row(const al_model *m, int64_t h, int part) {
    const int64_t r = m->ssm_v_heads / m->ssm_k_heads;
    return h / r * 2 * r + part * r + h % r;
}

/* A recurrent layer's input projections as the forward pass reads them: qwen3next
 * files hold q|k|v|z in one matrix (ssm_in, the older layout) or in two (attn_qkv and
 * attn_gate), and beta|alpha in one (ssm_ba), each interleaved per key head; they are
 * split into the slots qwen35 files fill directly. */
al_status hybrid_bind_layer(al_model *m, int il, layer_weights *l) {
    al_tensor *t = l->t;
    if (!l->recr || !(m->ad->flags & ARCH_GDN_GROUPED)) return AL_OK;
    const char *path = m->file->path;
    al_status st;
    if (t[L_SSM_IN].data && !t[L_SSM_QKV].data && !t[L_SSM_Z].data) {
        if ((st = gather_rows(m, "ssm_in", &t[L_SSM_IN], model_dim(m, D_SSM_CONV), qkvz_row, 0,
                              &t[L_SSM_QKV])) ||
            (st = gather_rows(m, "ssm_in", &t[L_SSM_IN], m->ssm_inner, qkvz_row, 1, &t[L_SSM_Z])))
            return st;
    } else if (t[L_SSM_IN].data || !t[L_SSM_QKV].data || !t[L_SSM_Z].data) {
        return al_error(AL_ERR_FORMAT, "%s: layer %d needs either blk.%d.ssm_in.weight or both "
                        "blk.%d.attn_qkv.weight and blk.%d.attn_gate.weight", path, il, il, il, il);
    }
    memset(&t[L_SSM_IN], 0, sizeof t[L_SSM_IN]);
    if ((st = gather_rows(m, "ssm_ba", &t[L_SSM_BA], m->ssm_v_heads, ba_row, 0, &t[L_SSM_BETA])) ||
        (st = gather_rows(m, "ssm_ba", &t[L_SSM_BA], m->ssm_v_heads, ba_row, 1, &t[L_SSM_ALPHA])))
        return st;
    memset(&t[L_SSM_BA], 0, sizeof t[L_SSM_BA]);
    return AL_OK;
}

/* Bytes of one sequence's recurrent state: the convolution's inputs and the delta
 * rule's matrices of every recurrent layer. */
uint64_t hybrid_state_bytes(const al_model *m) {
    const uint64_t conv = (uint64_t)(m->ssm_kernel - 1) * (uint64_t)model_dim(m, D_SSM_CONV);
    const uint64_t delta = (uint64_t)m->ssm_v_heads * m->ssm_state * m->ssm_state;
    uint64_t n = 0;
    for (int il = 0; il < m->n_layer; il++)
        if (m->layers[il].recr) n += (conv + delta) * sizeof(float);
    return n;
}

/* ARCH_HYBRID: the recurrent layers' states and the gated layers' scratch. */
al_status hybrid_context_alloc(al_context *c) {
    const al_model *m = c->m;
    al_backend *be = c->be;
    const int64_t nb = c->n_batch, conv = model_dim(m, D_SSM_CONV);
    al_status st;
    c->conv_state = al_calloc((size_t)m->n_layer, sizeof *c->conv_state);
    c->ssm_state = al_calloc((size_t)m->n_layer, sizeof *c->ssm_state);
    if (!c->conv_state || !c->ssm_state)
        return al_error(AL_ERR_NOMEM, "out of memory for the recurrent states");
    for (int il = 0; il < m->n_layer; il++) {
        if (!m->layers[il].recr) continue;
        if ((st = be->ops->tensor_alloc(be, conv, m->ssm_kernel - 1, &c->conv_state[il])) ||
            (st = be->ops->tensor_alloc(be, (int64_t)m->ssm_state * m->ssm_state,
                                        m->ssm_v_heads, &c->ssm_state[il])))
            return st;
    }
    if ((st = be->ops->tensor_alloc(be, model_dim(m, D_Q_GATE), nb, &c->qg)) ||
        (st = be->ops->tensor_alloc(be, conv, nb, &c->ssm_qkv)) ||
        (st = be->ops->tensor_alloc(be, conv, nb, &c->ssm_conv)) ||
        (st = be->ops->tensor_alloc(be, m->ssm_inner, nb, &c->ssm_z)) ||
        (st = be->ops->tensor_alloc(be, m->ssm_inner, nb, &c->ssm_o)) ||
        (st = be->ops->tensor_alloc(be, m->ssm_v_heads, nb, &c->ssm_alpha)) ||
        (st = be->ops->tensor_alloc(be, m->ssm_v_heads, nb, &c->ssm_beta)))
        return st;
    return AL_OK;
}

/* A view of the heads of rows: n_rows rows of n_heads heads of head_dim floats, each
 * stride floats from the next, the first at float `first` of t. */
static al_tensor heads_view(const al_tensor *t, int64_t n_rows, int n_heads, int head_dim,
                            int64_t stride, int64_t first) {
    al_tensor h = *t;
    h.offset += (uint64_t)first * sizeof(float);
    h.ne[0] = head_dim;
    h.ne[1] = n_rows * n_heads;
    h.row_bytes = (uint64_t)stride * sizeof(float);
    return h;
}

/* The gated attention block of a hybrid (qwen35) layer: the query projection gives
 * each head's query and, beside it, a gate; the attention's output is multiplied by
 * sigmoid(gate) before the output projection. */
void hybrid_attn_block(al_context *c, al_context *const *seqs, int il, int n) {
    const al_model *m = c->m;
    const al_tensor *t = m->layers[il].t;
    al_backend *be = c->be;
    const int hd = m->head_dim;
    al_tensor x = al_tensor_rows(&c->x, 0, n), xb = al_tensor_rows(&c->xb, 0, n);
    al_tensor qg = al_tensor_rows(&c->qg, 0, n), q = al_tensor_rows(&c->q, 0, n);
    al_tensor k = al_tensor_rows(&c->k, 0, n), v = al_tensor_rows(&c->v, 0, n);
    al_tensor att = al_tensor_rows(&c->att, 0, n);
    const al_tensor *w[3] = {&t[L_WQ], &t[L_WK], &t[L_WV]};
    const al_tensor *b[3] = {NULL, NULL, NULL};
    al_tensor *qkv[3] = {&qg, &k, &v};
    backend_matmul_multi(be, &x, &t[L_ATTN_NORM], m->norm_eps, 3, w, b, &xb, qkv);
    /* the query's norm reads it out of [query | gate] per head into q */
    al_tensor qin = heads_view(&qg, n, m->n_head, hd, 2 * hd, 0);
    al_tensor qout = heads_view(&q, n, m->n_head, hd, hd, 0);
    be->ops->rms_norm(be, &qin, &t[L_Q_NORM], m->norm_eps, &qout);
    model_head_norm(m, be, &k, m->n_head_kv, &t[L_K_NORM]);
    model_attend_rows(c, seqs, il, n, &q, &k, &v, &att);
    al_tensor gate = heads_view(&qg, n, m->n_head, hd, 2 * hd, hd);
    al_tensor ah = heads_view(&att, n, m->n_head, hd, hd, 0);
    be->ops->sigmoid_mul(be, &ah, &gate);
    model_project_residual(m, be, &att, &t[L_WO], NULL, &x, &xb, &t[L_ATTN_POST_NORM]);
}

/* The convolution and the delta rule of recurrent layer il over rows [r0, r0 + n) of
 * the projections, consecutive positions of sequence s (fresh: it holds nothing yet). */
static void delta_rows(al_context *c, al_context *s, int il, int r0, int n) {
    const al_model *m = c->m;
    const al_tensor *t = m->layers[il].t;
    al_backend *be = c->be;
    const bool fresh = s->n_past == 0;
    al_tensor qkv = al_tensor_rows(&c->ssm_qkv, r0, n), conv = al_tensor_rows(&c->ssm_conv, r0, n);
    al_tensor alpha = al_tensor_rows(&c->ssm_alpha, r0, n);
    al_tensor beta = al_tensor_rows(&c->ssm_beta, r0, n), o = al_tensor_rows(&c->ssm_o, r0, n);
    const al_delta_shape shape = {.n_k_heads = m->ssm_k_heads, .n_v_heads = m->ssm_v_heads,
                                  .head_dim = m->ssm_state, .eps = m->norm_eps,
                                  .grouped = (m->ad->flags & ARCH_GDN_GROUPED) != 0};
    be->ops->ssm_conv(be, &qkv, &t[L_SSM_CONV], &s->conv_state[il], fresh, &conv);
    be->ops->delta_net(be, &conv, &alpha, &beta, &t[L_SSM_DT], &t[L_SSM_A], &s->ssm_state[il],
                       fresh, &shape, &o);
}

/* A gated delta-net layer: projections of the normed input, the causal convolution,
 * the delta rule over the sequence's state, a per-head RMSNorm of its output gated by
 * silu(z), and the output projection. With seqs each row is its own sequence's. */
void hybrid_recurrent_block(al_context *c, al_context *const *seqs, int il, int n) {
    const al_model *m = c->m;
    const al_tensor *t = m->layers[il].t;
    al_backend *be = c->be;
    al_tensor x = al_tensor_rows(&c->x, 0, n), xb = al_tensor_rows(&c->xb, 0, n);
    al_tensor qkv = al_tensor_rows(&c->ssm_qkv, 0, n), z = al_tensor_rows(&c->ssm_z, 0, n);
    al_tensor alpha = al_tensor_rows(&c->ssm_alpha, 0, n);
    al_tensor beta = al_tensor_rows(&c->ssm_beta, 0, n), o = al_tensor_rows(&c->ssm_o, 0, n);
    const al_tensor *w[3] = {&t[L_SSM_QKV], &t[L_SSM_Z], &t[L_SSM_BETA]};
    const al_tensor *b[3] = {NULL, NULL, NULL};
    al_tensor *out[3] = {&qkv, &z, &beta};
    backend_matmul_multi(be, &x, &t[L_ATTN_NORM], m->norm_eps, 3, w, b, &xb, out);
    be->ops->matmul(be, &xb, &t[L_SSM_ALPHA], NULL, &alpha);
    if (!seqs)
        delta_rows(c, c, il, 0, n);
    else
        for (int i = 0; i < n; i++) delta_rows(c, seqs[i], il, i, 1);
    al_tensor oh = heads_view(&o, n, m->ssm_v_heads, m->ssm_state, m->ssm_state, 0);
    be->ops->rms_norm(be, &oh, &t[L_SSM_NORM], m->norm_eps, &oh);
    be->ops->silu_mul(be, &z, &o); /* z = silu(z) * norm(o) */
    model_project_residual(m, be, &z, &t[L_SSM_OUT], NULL, &x, &xb, &t[L_ATTN_POST_NORM]);
}

/* qwen35moe's shared expert over the normed rows in xb: x += sigmoid(xb . g) times
 * its gated FFN, the gate a logit per token that comes to the host (as the router's,
 * into the first column of its rows, which moe_block has read already) and weights an
 * add_rows of the FFN's output. */
void hybrid_shared_expert(al_context *c, int il, int n) {
    const al_model *m = c->m;
    const al_tensor *t = m->layers[il].t;
    al_backend *be = c->be;
    const al_backend_ops *op = be->ops;
    al_tensor x = al_tensor_rows(&c->x, 0, n), xb = al_tensor_rows(&c->xb, 0, n);
    al_tensor hb = al_tensor_rows(&c->hb, 0, n), hb2 = al_tensor_rows(&c->hb2, 0, n);
    al_tensor gate = al_tensor_rows(&c->router, 0, n);
    gate.ne[0] = 1; /* one logit per row, in the router's rows */
    hb.ne[0] = hb2.ne[0] = m->n_ff_shexp;
    backend_matmul_glu(be, &xb, &t[L_GATE_SHEXP], &t[L_UP_SHEXP], AL_GLU_SILU, &hb2, &hb);
    al_tensor y = al_tensor_rows(&c->ye, 0, n);
    if (!t[L_GATE_INP_SHEXP].data) { /* glm4moe's: ungated, added as it is */
        backend_matmul_add(be, &hb, &t[L_DOWN_SHEXP], NULL, &y, &x);
        return;
    }
    op->matmul(be, &xb, &t[L_GATE_INP_SHEXP], NULL, &gate);
    op->matmul(be, &hb, &t[L_DOWN_SHEXP], NULL, &y);
    /* one read of the rows the logits lie in (a GPU syncs per read), not one per row */
    al_tensor rows = al_tensor_rows(&c->router, 0, n);
    AL_ASSERT(rows.row_bytes == (uint64_t)m->n_expert * sizeof(float)); /* router_host's rows */
    op->tensor_read(be, &rows, c->router_host, (uint64_t)n * rows.row_bytes);
    const int64_t stride = (int64_t)(rows.row_bytes / sizeof(float));
    for (int r = 0; r < n; r++) {
        c->rows[r] = r;
        c->rows_w[r] = 1.0f / (1.0f + expf(-c->router_host[r * stride]));
    }
    op->add_rows(be, &x, &y, c->rows, c->rows_w, n);
}

/* ---- checkpoints -------------------------------------------------------------------- */

/* The recurrent states of every layer after the first n_past positions, on the host:
 * per recurrent layer its convolution's inputs, then its delta rule's matrices. */
struct hybrid_checkpoint {
    int n_past;
    uint8_t *data; /* checkpoint_bytes */
};

/* Bytes of one checkpoint: the states' rows as the backend stores them. */
static uint64_t checkpoint_bytes(const al_context *c) {
    uint64_t n = 0;
    for (int il = 0; il < c->m->n_layer; il++)
        if (c->m->layers[il].recr)
            n += (uint64_t)c->conv_state[il].ne[1] * c->conv_state[il].row_bytes +
                 (uint64_t)c->ssm_state[il].ne[1] * c->ssm_state[il].row_bytes;
    return n;
}

/* Copies every recurrent layer's state between the context and data (to the host when
 * save, else back). */
static void copy_states(al_context *c, uint8_t *data, bool save) {
    const al_model *m = c->m;
    al_backend *be = c->be;
    for (int il = 0; il < m->n_layer; il++) {
        if (!m->layers[il].recr) continue;
        al_tensor *st[2] = {&c->conv_state[il], &c->ssm_state[il]};
        for (int k = 0; k < 2; k++) {
            const uint64_t n = (uint64_t)st[k]->ne[1] * st[k]->row_bytes;
            if (save)
                be->ops->tensor_read(be, st[k], data, n);
            else
                be->ops->tensor_write(be, st[k], data, n);
            data += n;
        }
    }
}

al_status al_context_checkpoint(al_context *c) {
    if (!c) return al_error(AL_ERR_ARG, "al_context_checkpoint: context is NULL");
    if (!(c->m->ad->flags & ARCH_HYBRID) || !c->max_ckpt || c->n_past == 0 ||
        (c->n_ckpt && c->ckpt[c->n_ckpt - 1].n_past == c->n_past))
        return AL_OK;
    if (!c->ckpt && !(c->ckpt = al_calloc((size_t)c->max_ckpt, sizeof *c->ckpt)))
        return al_error(AL_ERR_NOMEM, "out of memory for %d checkpoints", c->max_ckpt);
    if (c->n_ckpt == c->max_ckpt) { /* the oldest goes; its buffer is reused */
        struct hybrid_checkpoint old = c->ckpt[0];
        memmove(c->ckpt, c->ckpt + 1, (size_t)(c->n_ckpt - 1) * sizeof *c->ckpt);
        c->ckpt[--c->n_ckpt] = old;
    }
    struct hybrid_checkpoint *k = &c->ckpt[c->n_ckpt];
    const uint64_t n = checkpoint_bytes(c);
    if (!k->data && !(k->data = al_malloc((size_t)n)))
        return al_error(AL_ERR_NOMEM, "out of memory for a checkpoint of %llu bytes",
                        (unsigned long long)n);
    copy_states(c, k->data, true);
    k->n_past = c->n_past;
    c->n_ckpt++;
    return AL_OK;
}

int al_context_n_checkpoints(const al_context *c, int *latest) {
    const int n = c ? c->n_ckpt : 0;
    if (latest) *latest = n ? c->ckpt[n - 1].n_past : 0;
    return n;
}

int hybrid_restore(al_context *c, int n_past) {
    while (c->n_ckpt && c->ckpt[c->n_ckpt - 1].n_past > n_past) c->n_ckpt--;
    if (!c->n_ckpt) return 0;
    const struct hybrid_checkpoint *k = &c->ckpt[c->n_ckpt - 1];
    copy_states(c, k->data, false);
    return k->n_past;
}

void hybrid_checkpoints_free(al_context *c) {
    for (int i = 0; c->ckpt && i < c->max_ckpt; i++) al_free(c->ckpt[i].data);
    al_free(c->ckpt);
}

al_status hybrid_handoff(al_context *dst, al_context *src) {
    const al_model *m = src->m;
    char *tmp = NULL;
    al_status st = AL_OK;
    for (int il = 0; il < m->n_layer && st == AL_OK; il++) {
        if (!m->layers[il].recr) continue;
        al_tensor *d[2] = {&dst->conv_state[il], &dst->ssm_state[il]};
        const al_tensor *s[2] = {&src->conv_state[il], &src->ssm_state[il]};
        for (int k = 0; k < 2 && st == AL_OK; k++) {
            const uint64_t n = (uint64_t)s[k]->ne[1] * s[k]->row_bytes;
            AL_ASSERT(n == (uint64_t)d[k]->ne[1] * d[k]->row_bytes);
            st = model_copy_rows(dst->be, d[k], src->be, s[k], n, &tmp);
            dst->kv_bytes_copied += n;
        }
    }
    al_free(tmp);
    if (st != AL_OK) return st;
    /* the checkpoints are the sequence's, in host memory laid out alike on every
     * backend (the states' rows are unpadded f32): they go along */
    struct hybrid_checkpoint *k = dst->ckpt;
    const int max = dst->max_ckpt;
    dst->ckpt = src->ckpt, dst->n_ckpt = src->n_ckpt, dst->max_ckpt = src->max_ckpt;
    src->ckpt = k, src->max_ckpt = max, src->n_ckpt = 0;
    return AL_OK;
}
