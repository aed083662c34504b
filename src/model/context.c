/* context.c: one sequence's state: the KV cache (a ring for sliding layers), the
 * recurrent layers' states and their checkpoints (hybrid.c), scratch, the memory check
 * before allocating, truncation, and handing a sequence from one context to another
 * (split prefill and decode). */
#include "model/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/arch.h"
#include "format/quant.h"
#include "text/tokenizer.h"
#include "util.h"
/* Rows of layer il's KV cache in a context of n_ctx positions: all of them, or for a
 * sliding layer its window plus one batch, as a ring (backend.h: al_attn_shape). The
 * batch's worth beyond the window also lets a context be cut back by up to a batch
 * (al_context_truncate) without losing what the window needs. */
static int layer_cap(const al_model *m, int il, int n_ctx) {
    if (m->layers[il].recr) return 0; /* a recurrent layer keeps a state instead */
    if (m->layers[il].kv_src != il) return 0; /* it reads an earlier layer's */
    if (!m->layers[il].swa) return n_ctx;
    const int n_batch = n_ctx < MAX_BATCH ? n_ctx : MAX_BATCH;
    const int64_t cap = (int64_t)m->swa_window + n_batch;
    return cap < n_ctx ? (int)cap : n_ctx;
}

/* ---- the caches' types ------------------------------------------------------------------ */

static const struct { const char *name; uint32_t type; } kv_types[] = {
    [AL_KV_F32] = {"f32", AL_TYPE_F32},
    [AL_KV_F16] = {"f16", AL_TYPE_F16},
    [AL_KV_Q8_0] = {"q8_0", AL_TYPE_Q8_0},
    [AL_KV_Q4_0] = {"q4_0", AL_TYPE_Q4_0},
};
enum { N_KV_TYPES = sizeof kv_types / sizeof *kv_types };

static bool kv_type_valid(al_kv_type t) { return (unsigned)t < N_KV_TYPES; }

/* The types that round values to a block's scale, which the rotation helps. */
static bool kv_quantized(al_kv_type t) { return t == AL_KV_Q8_0 || t == AL_KV_Q4_0; }

const char *al_kv_type_name(al_kv_type t) { return kv_type_valid(t) ? kv_types[t].name : "?"; }

al_status al_kv_type_parse(const char *name, al_kv_type *out) {
    for (int i = 0; name && i < N_KV_TYPES; i++)
        if (!strcmp(name, kv_types[i].name)) {
            if (out) *out = (al_kv_type)i;
            return AL_OK;
        }
    return al_error(AL_ERR_ARG, "KV cache type '%s' is not one of f32, f16, q8_0, q4_0",
                    name ? name : "(null)");
}

/* Bytes of one cache row of layer il (every kv head) of type t. */
static uint64_t kv_row_bytes(const al_model *m, int il, al_kv_type t) {
    const layer_weights *l = &m->layers[il];
    return quant_row_bytes(kv_types[t].type, (int64_t)l->n_head_kv * l->head_dim);
}

/* Bytes of layer il's keys and values in rows cache rows. */
static uint64_t kv_rows_bytes(const al_model *m, int il, uint64_t rows, al_kv_type tk,
                              al_kv_type tv) {
    return rows * (kv_row_bytes(m, il, tk) + (m->kv_latent ? 0 : kv_row_bytes(m, il, tv)));
}

uint64_t model_kv_bytes(const al_model *m, int n_ctx, al_kv_type tk, al_kv_type tv) {
    uint64_t n = 0;
    for (int il = 0; il < m->n_layer; il++)
        n += kv_rows_bytes(m, il, (uint64_t)layer_cap(m, il, n_ctx), tk, tv);
    return n + hybrid_state_bytes(m);
}

/* Whether the context's backend reads caches of p's types, with one line saying why
 * not: a type out of range, heads that do not divide into its blocks, a backend
 * without it. */
static al_status kv_types_check(const al_model *m, al_backend *be, const al_context_params *p) {
    const al_kv_type t[2] = {p->type_k, p->type_v};
    const char *what[2] = {"type_k", "type_v"};
    for (int i = 0; i < 2; i++) {
        if (!kv_type_valid(t[i]))
            return al_error(AL_ERR_ARG, "al_context_params.%s %d is not a KV cache type (f32, "
                            "f16, q8_0, q4_0)", what[i], (int)t[i]);
        const uint32_t type = kv_types[t[i]].type;
        if (type == AL_TYPE_F32) continue;
        for (int il = 0; il < m->n_layer; il++)
            if (quant_row_bytes(type, m->layers[il].head_dim) == 0)
                return al_error(AL_ERR_UNSUPPORTED, "a %s KV cache stores blocks of %u values, "
                                "and this model's heads of %d do not divide into them",
                                kv_types[t[i]].name, quant_get_traits(type)->block_size,
                                m->layers[il].head_dim);
        if (!(be->ops->kv_types & (1u << type)))
            return al_error(AL_ERR_UNSUPPORTED, "%s has no %s KV cache (it keeps f32 keys and "
                            "values); use the cpu backend or an f32 cache", be->desc[0] ? be->desc
                            : be->ops->name, kv_types[t[i]].name);
    }
    return AL_OK;
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

/* The CPU backend's KV cache lives in host memory, and so do a recurrent model's state
 * checkpoints on every backend (n_ckpt of them, each a state's bytes): what cannot fit
 * is refused here, at once, rather than failing page by page later or dragging the
 * machine into swap and the OOM killer. A GPU backend checks its own heaps when it
 * allocates. */
static al_status check_kv_memory(const al_context *c) {
    const al_model *m = c->m;
    const int n_ctx = c->n_ctx, n_ckpt = c->max_ckpt;
    const bool host = m->be->ops->caps & AL_CAP_HOST_MEMORY;
    const uint64_t kv = host ? model_kv_bytes(m, n_ctx, c->type_k, c->type_v) : 0;
    const uint64_t ckpt = (m->ad->flags & ARCH_HYBRID) ? (uint64_t)n_ckpt * hybrid_state_bytes(m) : 0;
    if (kv + ckpt == 0) return AL_OK;
    uint64_t avail = host_mem_available();
    if (avail == 0) return AL_OK; /* not Linux: let the allocation decide */
    const uint64_t margin = 64ull << 20; /* scratch, logits and the rest of the process */
    if (kv + ckpt + margin <= avail) return AL_OK;
    char ck[96] = "";
    if (ckpt)
        snprintf(ck, sizeof ck, " and %.1f MiB for %d state checkpoints (n_checkpoints)",
                 ckpt / 1048576.0, n_ckpt);
    return al_error(AL_ERR_NOMEM, "a context of %d positions needs %.1f MiB of KV cache%s "
                    "(plus %.0f MiB margin) but only %.1f MiB of memory is available "
                    "(MemAvailable); use a smaller context%s", n_ctx, kv / 1048576.0, ck,
                    margin / 1048576.0, avail / 1048576.0, ckpt ? " or fewer checkpoints" : "");
}

/* Describes storage of at least cap rows of type as those rows (backend.h:
 * al_backend_ops.kv_types). */
static void kv_describe(al_tensor *t, uint32_t type, uint8_t layout, int64_t kvd, int64_t cap) {
    t->type = type;
    t->layout = layout;
    t->ne[0] = kvd;
    t->ne[1] = cap;
    t->row_bytes = quant_row_bytes(type, kvd);
}

/* A cache of cap rows of type (f32, or one of the backend's kv_types). */
static al_status kv_tensor_alloc(al_backend *be, uint32_t type, uint8_t layout, int64_t kvd,
                                 int64_t cap, al_tensor *out) {
    if (type == AL_TYPE_F32) return be->ops->tensor_alloc(be, kvd, cap, out);
    const uint64_t bytes = quant_row_bytes(type, kvd) * (uint64_t)cap;
    al_status st = be->ops->tensor_alloc(be, (int64_t)((bytes + sizeof(float) - 1) / sizeof(float)),
                                         1, out);
    if (st == AL_OK) kv_describe(out, type, layout, kvd, cap);
    return st;
}

al_status model_kv_tensors(al_context *c, int il, int64_t cap, al_tensor *k, al_tensor *v) {
    const layer_weights *l = &c->m->layers[il];
    const int64_t kvd = (int64_t)l->n_head_kv * l->head_dim;
    const uint32_t tk = kv_types[c->type_k].type, tv = kv_types[c->type_v].type;
    const uint8_t lk = c->kv_rotated && kv_quantized(c->type_k) ? AL_LAYOUT_HADAMARD : AL_LAYOUT_ROWS;
    const uint8_t lv = c->kv_rotated && kv_quantized(c->type_v) ? AL_LAYOUT_HADAMARD : AL_LAYOUT_ROWS;
    al_status st = kv_tensor_alloc(c->be, tk, lk, kvd, cap, k);
    if (st == AL_OK && c->m->kv_latent) *v = *k; /* the latent row is the value too */
    return st == AL_OK && !c->m->kv_latent ? kv_tensor_alloc(c->be, tv, lv, kvd, cap, v) : st;
}

/* Layer il's caches over peer's memory: the pages the host sees behind peer's tensors
 * (tensor_host), imported by this context's backend (tensor_import). */
static al_status kv_import_layer(al_context *c, const al_context *peer, int il) {
    al_backend *pb = peer->be, *be = c->be;
    const al_tensor *from[2] = {&peer->k_cache[il], &peer->v_cache[il]};
    al_tensor *to[2] = {&c->k_cache[il], &c->v_cache[il]};
    for (int i = 0; i < (c->m->kv_latent ? 1 : 2); i++) {
        uint64_t n_bytes = 0;
        void *host = pb->ops->tensor_host ? pb->ops->tensor_host(pb, from[i], &n_bytes) : NULL;
        if (!host)
            return al_error(AL_ERR_UNSUPPORTED, "the host cannot address the KV cache on %s",
                            pb->desc);
        if (!be->ops->tensor_import)
            return al_error(AL_ERR_UNSUPPORTED, "%s cannot use host memory in place", be->desc);
        const bool typed = from[i]->type != AL_TYPE_F32; /* bytes, described as its rows */
        al_status st = be->ops->tensor_import(be, host, n_bytes,
                                              typed ? (int64_t)(n_bytes / sizeof(float))
                                                    : from[i]->ne[0],
                                              typed ? 1 : from[i]->ne[1], to[i]);
        if (st != AL_OK) return st;
        if (typed) kv_describe(to[i], from[i]->type, from[i]->layout, from[i]->ne[0], from[i]->ne[1]);
    }
    if (c->m->kv_latent) c->v_cache[il] = c->k_cache[il];
    return AL_OK;
}

static void kv_free(al_context *c) {
    for (int il = 0; il < c->m->n_layer; il++) {
        if (c->k_cache && c->k_cache[il].data) c->be->ops->tensor_free(c->be, &c->k_cache[il]);
        if (c->v_cache && c->v_cache[il].data && !c->m->kv_latent)
            c->be->ops->tensor_free(c->be, &c->v_cache[il]);
    }
}

/* The KV cache: peer's memory where both backends see it (al_context_params.
 * kv_shared_with), else memory of this context's own, which al_context_handoff
 * copies into. */
static al_status kv_alloc(al_context *c, const al_context *peer) {
    const al_model *m = c->m;
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
    if ((st = check_kv_memory(c))) return st;
    for (int il = 0; il < m->n_layer; il++) {
        const int cap = layer_cap(m, il, c->n_ctx);
        if (cap == 0) continue;
        if ((st = model_kv_tensors(c, il, cap, &c->k_cache[il], &c->v_cache[il]))) return st;
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
    int64_t nb = c->n_batch, qd = m->max_qd, kvd = m->max_kvd;
    const int64_t n_ff = m->max_ff > m->n_ff_shexp ? m->max_ff : m->n_ff_shexp; /* hb: either FFN */
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
    if (m->ad->flags & ARCH_MLA && (st = mla_context_alloc(c))) return st;
    if (m->ad->flags & ARCH_PER_LAYER && (st = gemma4_context_alloc(c))) return st;
    if (c->want_mtp && (st = mtp_context_alloc(c))) return st;
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
    if (model_dim(m, D_Q_MLA) > max_cols) max_cols = model_dim(m, D_Q_MLA);
    return be->ops->reserve(be, max_cols, c->n_ctx);
}

uint64_t al_model_kv_bytes(const al_model *m, int n_ctx, al_kv_type k, al_kv_type v) {
    return m && n_ctx > 0 && kv_type_valid(k) && kv_type_valid(v) ? model_kv_bytes(m, n_ctx, k, v)
                                                                   : 0;
}

uint64_t al_model_kv_read_bytes(const al_model *m, int pos, al_kv_type k, al_kv_type v) {
    if (!m || pos < 0 || !kv_type_valid(k) || !kv_type_valid(v)) return 0;
    uint64_t n = 0;
    for (int il = 0; il < m->n_layer; il++) { /* a layer reading another's cache reads it again */
        const bool win = m->layers[il].swa && m->swa_window > 0 && m->swa_window <= pos;
        const uint64_t rows = win ? (uint64_t)m->swa_window : (uint64_t)pos + 1;
        if (!m->layers[il].recr) n += kv_rows_bytes(m, m->layers[il].kv_src, rows, k, v);
    }
    return n + hybrid_state_bytes(m); /* a state is read whole per token */
}

int al_model_default_n_ctx(const al_model *m) {
    if (!m) return 0;
    int n = m->n_ctx_train > 0 ? m->n_ctx_train : 4096;
    if (!(m->be->ops->caps & AL_CAP_HOST_MEMORY)) return n < 4096 ? n : 4096;
    uint64_t budget = host_mem_available() / 2;
    if (budget == 0 || model_kv_bytes(m, n, AL_KV_F32, AL_KV_F32) <= budget) return n;
    /* the KV cache grows with n (sliding layers stop growing at their window) */
    int lo = 1, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (model_kv_bytes(m, mid, AL_KV_F32, AL_KV_F32) <= budget) lo = mid;
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
    if (m->kv_latent) p.type_v = p.type_k; /* one row holds both */
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
    if (p.mla_expand_min < -1)
        return al_error(AL_ERR_ARG, "al_context_create: mla_expand_min %d: expected -1 (never), "
                        "0 (the default) or a number of tokens", p.mla_expand_min);
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
    c->max_ckpt = p.n_checkpoints < 0 ? 0 : p.n_checkpoints ? p.n_checkpoints : AL_DEFAULT_CHECKPOINTS;
    c->type_k = p.type_k, c->type_v = p.type_v;
    c->mla_expand_min = p.mla_expand_min;
    c->kv_rotated = !p.kv_unrotated && (kv_quantized(p.type_k) || kv_quantized(p.type_v));
    if ((st = kv_types_check(m, c->be, &p)) == AL_OK && peer &&
        (peer->type_k != c->type_k || peer->type_v != c->type_v || peer->kv_rotated != c->kv_rotated))
        st = al_error(AL_ERR_ARG, "al_context_create: the KV cache types (%s, %s%s) differ from "
                      "those of the context named by kv_shared_with (%s, %s%s)",
                      al_kv_type_name(c->type_k), al_kv_type_name(c->type_v),
                      c->kv_rotated ? ", rotated" : "", al_kv_type_name(peer->type_k),
                      al_kv_type_name(peer->type_v), peer->kv_rotated ? ", rotated" : "");
    c->want_mtp = p.mtp;
    if (st == AL_OK && p.mtp && peer)
        st = al_error(AL_ERR_UNSUPPORTED, "al_context_create: mtp with kv_shared_with (a split "
                      "of prefill and decode) is not supported");
    if (st == AL_OK) st = context_alloc(c, peer);
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
    mtp_context_free(c);
    al_tensor *scratch[] = {&c->x, &c->xb, &c->q, &c->k, &c->v, &c->att, &c->hb, &c->hb2,
                            &c->logits, &c->router, &c->xe, &c->ye, &c->he, &c->he2,
                            &c->qg, &c->ssm_qkv, &c->ssm_conv, &c->ssm_z, &c->ssm_o,
                            &c->ssm_alpha, &c->ssm_beta, &c->mla_q, &c->mla_qa, &c->mla_vo,
                            &c->mla_ke, &c->mla_ve,
                            &c->ple_in, &c->ple_tok, &c->ple_h, &c->g4_mlp, &c->g4_in,
                            &c->g4_moe};
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
    mtp_truncate(c, 0);
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
        if (!c->k_cache[il].data) continue; /* no cache of its own */
        const int64_t cap = c->k_cache[il].ne[1], lo = n_past - m->swa_window + 1;
        if (m->layers[il].swa && (lo > 0 ? lo : 0) + cap <= (int64_t)c->n_past - 1) n_past = 0;
    }
    c->n_past = n_past; /* later positions are overwritten by the next al_eval */
    mtp_truncate(c, n_past);
    return AL_OK;
}

int al_context_n_ctx(const al_context *c) { return c ? c->n_ctx : 0; }

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
        const bool latent = src->m->kv_latent; /* V is K */
        if ((st = model_copy_rows(dst->be, &kd, src->be, &ks, (uint64_t)n * row, tmp)) == AL_OK &&
            !latent)
            st = model_copy_rows(dst->be, &vd, src->be, &vs, (uint64_t)n * row, tmp);
        *n_bytes += (latent ? 1 : 2) * (uint64_t)n * row;
        p += n;
    }
    return st;
}

al_status al_context_handoff(al_context *dst, al_context *src) {
    if (!dst || !src) return al_error(AL_ERR_ARG, "al_context_handoff: a context is NULL");
    if (dst == src) return AL_OK;
    al_status st = same_shape(dst->m, src->m, "al_context_handoff");
    if (st != AL_OK) return st;
    if (dst->mtp || src->mtp)
        return al_error(AL_ERR_UNSUPPORTED, "al_context_handoff: a context keeps an MTP cache, "
                        "which is not handed over");
    if (dst->type_k != src->type_k || dst->type_v != src->type_v || dst->kv_rotated != src->kv_rotated)
        return al_error(AL_ERR_ARG, "al_context_handoff: the contexts' KV cache types differ "
                        "(%s, %s against %s, %s)", al_kv_type_name(src->type_k),
                        al_kv_type_name(src->type_v), al_kv_type_name(dst->type_k),
                        al_kv_type_name(dst->type_v));
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

al_status al_context_create_pair(const al_model *prefill, const al_model *decode,
                                 const al_context_params *p, al_context **prefill_ctx,
                                 al_context **decode_ctx) {
    if (prefill_ctx) *prefill_ctx = NULL;
    if (decode_ctx) *decode_ctx = NULL;
    if (!prefill || !decode || !prefill_ctx || !decode_ctx)
        return al_error(AL_ERR_ARG, "al_context_create_pair: a model or an out-parameter is NULL");
    al_context_params cp = p ? *p : al_context_default_params();
    cp.kv_shared_with = NULL;
    const bool host_p = prefill->be->ops->caps & AL_CAP_HOST_MEMORY;
    const bool host_d = decode->be->ops->caps & AL_CAP_HOST_MEMORY;
    const bool decode_owns = host_d && !host_p;
    al_context **owner = decode_owns ? decode_ctx : prefill_ctx;
    al_context **borrower = decode_owns ? prefill_ctx : decode_ctx;
    al_status st = al_context_create(decode_owns ? decode : prefill, &cp, owner);
    if (st != AL_OK) return st;
    cp.n_ctx = (*owner)->n_ctx;
    cp.kv_shared_with = *owner;
    st = al_context_create(decode_owns ? prefill : decode, &cp, borrower);
    if (st != AL_OK) {
        al_context_destroy(*owner);
        *owner = NULL;
    }
    return st;
}

void al_context_destroy_pair(al_context *prefill_ctx, al_context *decode_ctx) {
    const bool prefill_borrows = prefill_ctx && prefill_ctx->kv_root != prefill_ctx;
    al_context_destroy(prefill_borrows ? prefill_ctx : decode_ctx);
    al_context_destroy(prefill_borrows ? decode_ctx : prefill_ctx);
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
        .kv_bytes = model_kv_bytes(c->m, c->n_ctx, c->type_k, c->type_v),
        .type_k = c->type_k, .type_v = c->type_v, .kv_rotated = c->kv_rotated,
        .kv_shared = c->kv_root != c,
        .kv_bytes_copied = c->kv_bytes_copied,
        .mla_expand_min = c->mla_rows ? c->mla_expand_min : 0,
        .mla_expand_rows = c->mla_rows,
    };
}
