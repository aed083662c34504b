/* mtp.c: the model's own draft, its next-token-prediction (MTP) block (Qwen3.5 / 3.6:
 * nextn_predict_layers blocks after the trunk's).
 *
 * The block predicts the token after the next. Its input at position p pairs the
 * embedding of the token at p with the trunk's hidden state at p - 1 (after the output
 * norm): [enorm(embedding) | hnorm(hidden)] projected by eh_proj to n_embd, then one
 * gated attention layer of the trunk's kind with a KV cache of its own (positions as
 * the trunk's), the FFN, its head norm and the output matrix. For a draft, the next
 * step pairs the drafted token with the block's own normed output. This is llama.cpp's
 * reading of the block (src/models/qwen35.cpp, graph_mtp; common/speculative.cpp).
 *
 * A context with the block (al_context_params.mtp) runs its attention over every
 * batch al_eval evaluates (mtp_catch_up), so that its cache holds the text as the
 * trunk's does; the trunk's hidden states are kept for the last MTP_RING positions,
 * which is what a truncation (a refused draft) needs to pair the next row again.
 */
#include "model/internal.h"

#include <stdio.h>
#include <string.h>

#include "model/arch.h"
#include "util.h"

enum { MTP_RING = 2 * MAX_BATCH }; /* hidden states kept: a batch and a truncation's worth */

typedef struct mtp_weights {
    al_tensor eh_proj;   /* [2 n_embd] -> [n_embd]: [embedding | hidden] to the block */
    al_tensor enorm, hnorm;
    al_tensor head_norm; /* shared_head_norm, else the model's output norm */
    al_tensor head;      /* shared_head_head, else the model's output */
    al_tensor embd;      /* embed_tokens, else the model's token embeddings */
} mtp_weights;

typedef struct mtp_state {
    al_tensor k, v;    /* the block's KV cache, [n_ctx][n_head_kv head_dim] */
    al_tensor cat;     /* [n_batch][2 n_embd]: enorm(embedding) | hnorm(hidden) */
    al_tensor h;       /* [n_batch][n_embd]: the hidden states paired with the tokens */
    float *ring;       /* [MTP_RING][n_embd] the trunk's normed hidden state, position p
                        * in row p % MTP_RING */
    int ring_lo, ring_hi; /* the positions [ring_lo, ring_hi) the ring holds */
    float *rows;       /* [2 n_batch][n_embd] host scratch */
    float *logits;     /* [n_vocab] a draft step's, on the host */
} mtp_state;

/* ---- the model's side -------------------------------------------------------------------- */

static void mtp_unbind(al_model *m, const char *why) {
    snprintf(m->mtp_error, sizeof m->mtp_error, "%s", why);
    memset(&m->layers[m->n_layer], 0, sizeof m->layers[m->n_layer]);
    al_free(m->mtp);
    m->mtp = NULL;
}

al_status mtp_bind(al_model *m) {
    if (m->n_nextn <= 0) return AL_OK;
    if (!(m->ad->flags & ARCH_HYBRID) || (m->ad->flags & ARCH_GDN_GROUPED)) {
        mtp_unbind(m, "only qwen35 and qwen35moe files' blocks are run");
        return AL_OK;
    }
    mtp_weights *w = al_calloc(1, sizeof *w);
    if (!w) return al_error(AL_ERR_NOMEM, "out of memory for the MTP block");
    m->mtp = w;
    const int il = m->n_layer;
    const int64_t d = m->n_embd;
    char name[4][96];
    static const char *const what[4] = {"eh_proj", "enorm", "hnorm", "shared_head_norm"};
    for (int i = 0; i < 4; i++)
        snprintf(name[i], sizeof name[i], "blk.%d.nextn.%s.weight", il, what[i]);
    char head[96], embd[96];
    snprintf(head, sizeof head, "blk.%d.nextn.shared_head_head.weight", il);
    snprintf(embd, sizeof embd, "blk.%d.nextn.embed_tokens.weight", il);
    al_status st = model_bind_layer(m, il, &m->layers[il]);
    if (st == AL_OK) st = model_bind(m, name[0], 2 * d, d, false, &w->eh_proj);
    if (st == AL_OK) st = model_bind(m, name[1], d, 0, false, &w->enorm);
    if (st == AL_OK) st = model_bind(m, name[2], d, 0, false, &w->hnorm);
    if (st == AL_OK) st = model_bind(m, name[3], d, 0, true, &w->head_norm);
    if (st == AL_OK) st = model_bind(m, head, d, m->n_vocab, true, &w->head);
    if (st == AL_OK) st = model_bind(m, embd, d, m->n_vocab, true, &w->embd);
    if (st != AL_OK) {
        char why[192];
        snprintf(why, sizeof why, "its block %d does not bind: %s", il, al_last_error());
        mtp_unbind(m, why);
        return st == AL_ERR_NOMEM ? st : AL_OK;
    }
    if (!w->head_norm.data) w->head_norm = m->output_norm;
    if (!w->head.data) w->head = m->output;
    if (!w->embd.data) w->embd = m->tok_embd;
    return AL_OK;
}

al_status mtp_load_weights(al_model *m, al_status (*load)(al_backend *, al_tensor *),
                           al_status (*pack)(al_backend *, al_tensor *, int64_t)) {
    if (!m->mtp) return AL_OK;
    mtp_weights *w = m->mtp;
    al_backend *be = m->be;
    al_status st = model_load_layer(m, m->n_layer, load, pack);
    if (st != AL_OK) return st;
    al_tensor *own[] = {&w->eh_proj, &w->enorm, &w->hnorm};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (load && (st = load(be, own[i]))) return st;
    if (pack && (st = pack(be, &w->eh_proj, w->eh_proj.ne[1]))) return st;
    /* shared ones are the model's, loaded with it; the block's own are not tied */
    if (w->head_norm.data != m->output_norm.data && load && (st = load(be, &w->head_norm)))
        return st;
    if (w->head.data != m->output.data && ((load && (st = load(be, &w->head))) ||
                                           (pack && (st = pack(be, &w->head, w->head.ne[1])))))
        return st;
    if (w->embd.data != m->tok_embd.data && load && (st = load(be, &w->embd))) return st;
    return AL_OK;
}

void mtp_free(al_model *m) {
    al_free(m->mtp);
    m->mtp = NULL;
}

/* ---- a context's side ---------------------------------------------------------------------- */

al_status mtp_context_alloc(al_context *c) {
    const al_model *m = c->m;
    if (!m->mtp)
        return al_error(AL_ERR_UNSUPPORTED, "%s has no next-token-prediction block to draft "
                        "with%s%s", m->file->path, m->mtp_error[0] ? ": " : "", m->mtp_error);
    al_backend *be = c->be;
    mtp_state *s = al_calloc(1, sizeof *s);
    if (!s) return al_error(AL_ERR_NOMEM, "out of memory for the MTP block's state");
    c->mtp = s;
    const int64_t d = m->n_embd;
    s->ring = al_malloc((size_t)MTP_RING * (size_t)d * sizeof(float));
    s->rows = al_malloc(2 * (size_t)c->n_batch * (size_t)d * sizeof(float));
    s->logits = al_malloc((size_t)m->n_vocab * sizeof(float));
    if (!s->ring || !s->rows || !s->logits) return al_error(AL_ERR_NOMEM, "out of memory for the MTP block's state");
    al_status st;
    if ((st = model_kv_tensors(c, c->m->n_layer, c->n_ctx, &s->k, &s->v)) ||
        (st = be->ops->tensor_alloc(be, 2 * d, c->n_batch, &s->cat)) ||
        (st = be->ops->tensor_alloc(be, d, c->n_batch, &s->h)))
        return st;
    return AL_OK;
}

void mtp_context_free(al_context *c) {
    mtp_state *s = c->mtp;
    if (!s) return;
    al_tensor *t[] = {&s->k, &s->v, &s->cat, &s->h};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (t[i]->data) c->be->ops->tensor_free(c->be, t[i]);
    al_free(s->ring);
    al_free(s->rows);
    al_free(s->logits);
    al_free(s);
    c->mtp = NULL;
}

void mtp_kv(al_context *c, al_tensor **k, al_tensor **v) {
    AL_ASSERT(c->mtp);
    *k = &c->mtp->k;
    *v = &c->mtp->v;
}

/* The trunk's hidden state at position p into h (zeros where it is not held: the
 * first position, or one a truncation went back past). */
static void ring_get(const mtp_state *s, int64_t d, int p, float *h) {
    if (p >= s->ring_lo && p < s->ring_hi)
        memcpy(h, s->ring + (size_t)(p % MTP_RING) * d, (size_t)d * sizeof(float));
    else
        memset(h, 0, (size_t)d * sizeof(float));
}

void mtp_truncate(al_context *c, int n_past) {
    mtp_state *s = c->mtp;
    if (!s) return;
    if (s->ring_hi > n_past) s->ring_hi = n_past;
    if (s->ring_lo > s->ring_hi) s->ring_lo = s->ring_hi;
}

/* The block's input for n rows: x = eh_proj [enorm(embedding of tokens) | hnorm(h)],
 * h the hidden states already in s->h. */
static void block_input(al_context *c, const int32_t *tokens, int n) {
    const al_model *m = c->m;
    const mtp_weights *w = m->mtp;
    mtp_state *s = c->mtp;
    al_backend *be = c->be;
    const al_backend_ops *op = be->ops;
    const int64_t d = m->n_embd;
    al_tensor x = al_tensor_rows(&c->x, 0, n), h = al_tensor_rows(&s->h, 0, n);
    al_tensor cat = al_tensor_rows(&s->cat, 0, n);
    al_tensor left = cat, right = cat; /* the halves of each row */
    left.ne[0] = right.ne[0] = d;
    right.offset += (uint64_t)d * sizeof(float);
    op->get_rows(be, &w->embd, tokens, n, &x);
    op->rms_norm(be, &x, &w->enorm, m->norm_eps, &left);
    op->rms_norm(be, &h, &w->hnorm, m->norm_eps, &right);
    op->matmul(be, &cat, &w->eh_proj, NULL, &x);
}

/* The trunk's hidden state of position p (row h) into s's ring. */
static void ring_put(mtp_state *s, int64_t d, int p, const float *h) {
    if (p != s->ring_hi) s->ring_lo = p; /* a new run of positions */
    memcpy(s->ring + (size_t)(p % MTP_RING) * d, h, (size_t)d * sizeof(float));
    s->ring_hi = p + 1;
    if (s->ring_lo < s->ring_hi - MTP_RING) s->ring_lo = s->ring_hi - MTP_RING;
}

void mtp_catch_up(al_context *c, al_context *const *seqs, const int32_t *tokens, int n) {
    const al_model *m = c->m;
    mtp_state *s = c->mtp;
    const int64_t d = m->n_embd;
    /* rows [n + 1]: the trunk's output, then each token's pairing; one sequence's rows
     * are consecutive positions, several sequences' one row each (al_eval_multi) */
    float *out = s->rows, *in = s->rows + (size_t)n * d;
    al_tensor xb = al_tensor_rows(&c->xb, 0, n);
    c->be->ops->tensor_read(c->be, &xb, out, (uint64_t)n * d * sizeof(float));
    for (int i = 0; i < n; i++) {
        al_context *q = seqs ? seqs[i] : c;
        const int p = q->n_past + (seqs ? 0 : i);
        if (i == 0 || seqs) ring_get(q->mtp, d, p - 1, in + (size_t)i * d);
        else memcpy(in + (size_t)i * d, out + (size_t)(i - 1) * d, (size_t)d * sizeof(float));
        ring_put(q->mtp, d, p, out + (size_t)i * d);
    }
    al_tensor h = al_tensor_rows(&s->h, 0, n);
    c->be->ops->tensor_write(c->be, &h, in, (uint64_t)n * d * sizeof(float));
    block_input(c, tokens, n);
    /* the attention fills the block's cache; its FFN and head serve drafts alone */
    hybrid_attn_block(c, seqs, m->n_layer, n);
}

/* The index of the largest of n logits (the first on ties). */
static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* One draft step at position c->n_past: token paired with s->rows' first row; the
 * block's normed output goes back there, and its greedy token is returned. */
static int32_t draft_step(al_context *c, int32_t token, float *logits) {
    const al_model *m = c->m;
    const mtp_weights *w = m->mtp;
    mtp_state *s = c->mtp;
    al_backend *be = c->be;
    const int64_t d = m->n_embd;
    al_tensor h = al_tensor_rows(&s->h, 0, 1), x = al_tensor_rows(&c->x, 0, 1);
    al_tensor xb = al_tensor_rows(&c->xb, 0, 1), out = al_tensor_rows(&c->logits, 0, 1);
    be->ops->tensor_write(be, &h, s->rows, (uint64_t)d * sizeof(float));
    block_input(c, &token, 1);
    hybrid_attn_block(c, NULL, m->n_layer, 1);
    model_ffn(c, m->n_layer, 1);
    be->ops->rms_norm(be, &x, &w->head_norm, m->norm_eps, &xb);
    be->ops->matmul(be, &xb, &w->head, NULL, &out);
    be->ops->tensor_read(be, &out, logits, (uint64_t)m->n_vocab * sizeof(float));
    be->ops->tensor_read(be, &xb, s->rows, (uint64_t)d * sizeof(float));
    return argmax(logits, m->n_vocab);
}

/* The draft of at most max tokens after last (al_draft_mtp), each step's logits into
 * all [max][n_vocab] where it is not NULL. */
static int draft_run(al_context *c, int32_t last, int max, int32_t *out, float *all) {
    const al_model *m = c->m;
    const int p = c->n_past;
    if (max > c->n_ctx - p - 1) max = c->n_ctx - p - 1; /* the draft's positions must fit */
    float *logits = c->mtp->logits;
    ring_get(c->mtp, m->n_embd, p - 1, c->mtp->rows);
    int n = 0;
    for (int32_t token = last; n < max; token = out[n++]) {
        c->n_past = p + n; /* the block's cache past the text: overwritten when checked */
        out[n] = draft_step(c, token, logits);
        if (all) memcpy(all + (size_t)n * m->n_vocab, logits, (size_t)m->n_vocab * sizeof(float));
    }
    c->n_past = p;
    return backend_sync(c->be) == AL_OK ? n : -1;
}

int mtp_draft_logits(al_context *c, int32_t last, int max, int32_t *out, float *logits) {
    return draft_run(c, last, max, out, logits);
}

int al_draft_mtp(al_context *c, int32_t last, int max, int32_t *out) {
    if (!c || !out || max < 0) {
        al_error(AL_ERR_ARG, "al_draft_mtp: a NULL context or output, or max %d", max);
        return -1;
    }
    if (!c->mtp) {
        al_error(AL_ERR_ARG, "al_draft_mtp: the context was made without mtp");
        return -1;
    }
    if (last < 0 || last >= c->m->n_vocab) {
        al_error(AL_ERR_ARG, "al_draft_mtp: token %d is out of range [0, %d)", last,
                 c->m->n_vocab);
        return -1;
    }
    return draft_run(c, last, max, out, NULL);
}
