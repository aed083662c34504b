/* fuse.c: the fast matmul_multi, matmul_glu and matmul_add of the CPU backend
 * (backend.h): a few tokens' matmuls of one input, and the elementwise op after them,
 * in one pool run.
 *
 * Decoding a token, each plain matmul quantized its input on the calling thread while
 * the other threads waited, then ran a pool run of its own; silu_mul and the residual
 * add of one row then ran on the calling thread alone. A layer took five
 * quantizations and five pool runs (q, k, v, o, gate, up, down less the ones the
 * weights share), and a model of small matrices, as qwen2 0.5B, spent ~11% of its
 * decode there. Here:
 *   - matmul_multi (q, k and v): the input is quantized once per activation format,
 *     and the panels of all the weights form one list of work;
 *   - matmul_glu (gate and up): a take runs its gate panels, then the same panels of
 *     up into scratch, then silu_mul or gelu_mul on those columns;
 *   - matmul_add (the attention output and the FFN down projection): a take's
 *     product goes to scratch and is added into its columns of the residual.
 *
 * Bits. Each matmul is planned (mm_plan) as fast_matmul plans it, quantizes its input
 * with the same code, and runs the same kernel calls per panel (mm_gemv_panels), so its
 * product is fast_matmul's. The elementwise ops are the row ops' own kernels, on
 * columns that start at panel boundaries, multiples of R, the kernels' vector width:
 * each element takes the path it takes in a whole row. So the result is that of the
 * plain ops, bit for bit (tests/test_fuse.c).
 *
 * When: a fast backend with fusion on (cpu.fuse = 0, the CLI's ANYLLM_CPU_FUSE=0,
 * turns it off), at most a tile
 * of tokens (fast_matmul's GEMV path), weight types the fast matmul runs on its own
 * kernels, and room in the activation buffer for the tiles and the scratch.
 */
#include <string.h>

#include "mm.h"
#include "ops.h"
#include "util.h"

enum { FUSE_MAX = AL_MULTI_MAX }; /* matmuls in one run (glu: 2; add: 1) */

typedef enum { FUSE_MULTI, FUSE_GLU, FUSE_ADD } fuse_kind;

typedef struct fuse_job {
    cpu_backend *cb;
    fuse_kind kind;
    int n;                      /* matmuls; glu's two share the work items */
    mm_job mm[FUSE_MAX];
    al_tensor tmp;              /* glu: up's product; add: the product before the add */
    al_tensor *dst;             /* glu: the gate product's rows; add: the residual */
    al_glu act;
    int64_t n_panels[FUSE_MAX]; /* panels of each matmul */
    int64_t n_items;            /* work items, dealt out in shares (mm_shares_run) */
    uint64_t act_used;          /* bytes of cb->act given out */
} fuse_job;

/* Plans matmul i (x . w + bias into out) and quantizes x for it, or shares the tiles of
 * an earlier matmul that quantizes alike; false where it cannot run fused. */
static bool fuse_add_matmul(fuse_job *j, int i, const al_tensor *x, const al_tensor *w,
                            const al_tensor *bias, al_tensor *out) {
    cpu_backend *cb = j->cb;
    if (!mm_fast_type(w->type) || w->ne[0] != x->ne[0] || w->ne[0] > cb->max_cols ||
        out->ne[0] != w->ne[1] || out->ne[1] != x->ne[1])
        return false;
    mm_job *m = &j->mm[i];
    mm_job_init(m, cb, x, w, bias, out, x->ne[1]);
    if (m->amx) return false;
    j->n_panels[i] = (w->ne[1] + cb->k->rows - 1) / cb->k->rows;
    if (!m->qt) return true;
    for (int e = 0; e < i; e++)
        if (mm_same_tiles(&j->mm[e], m)) {
            m->act = j->mm[e].act;
            return true;
        }
    if (!(m->act = mm_act_carve(cb, &j->act_used, (uint64_t)mm_act_bytes(m)))) return false;
    float *rest = (float *)mm_tls(cb, 0); /* the caller is thread 0 */
    for (int64_t t = 0; t < m->n_tok; t++)
        mm_quantize_token(m, cpu_f32_row(x, t), t, rest);
    return true;
}

/* Scratch for the products of n_tok rows of n_cols floats, from the activation
 * buffer; false where it is full. */
static bool fuse_scratch(fuse_job *j, int64_t n_cols, int64_t n_tok) {
    float *p = (float *)mm_act_carve(j->cb, &j->act_used,
                                      (uint64_t)(n_cols * n_tok) * sizeof(float));
    if (!p) return false;
    j->tmp = (al_tensor){.type = AL_TYPE_F32,
                         .ne = {n_cols, n_tok},
                         .data = p,
                         .row_bytes = (uint64_t)n_cols * sizeof(float)};
    return true;
}

/* Columns [p0 R, p1 R) of every row: the activation of glu or the add of add. */
static void fuse_epilogue(const fuse_job *j, int64_t p0, int64_t p1) {
    const cpu_kernels *k = j->cb->k;
    const int64_t c0 = p0 * k->rows, nc = mm_min(p1 * k->rows, j->tmp.ne[0]) - c0;
    for (int64_t t = 0; t < j->tmp.ne[1]; t++) {
        float *d = cpu_f32_row(j->dst, t) + c0;
        const float *s = cpu_f32_row(&j->tmp, t) + c0;
        if (j->kind == FUSE_ADD) k->add(d, s, nc);
        else if (j->act == AL_GLU_GELU) k->gelu_mul(d, s, nc);
        else k->silu_mul(d, s, nc);
    }
}

/* Work item i: panel i of the matmuls in turn (multi), or panel i of gate and of up
 * (glu), or of the one matmul (add); a take runs matmul by matmul. */
static void fuse_part(void *arg, int ith, int nth) {
    fuse_job *j = arg;
    void *panel = mm_tls(j->cb, ith);
    int64_t i0, i1;
    while (mm_shares_next(j->cb, ith, nth, &i0, &i1)) {
        if (j->kind != FUSE_MULTI) {
            for (int s = 0; s < j->n; s++)
                mm_gemv_panels(&j->mm[s], i0, i1, panel);
            fuse_epilogue(j, i0, i1);
            continue;
        }
        int64_t base = 0;
        for (int s = 0; s < j->n && base < i1; base += j->n_panels[s], s++) {
            const int64_t p0 = mm_min(i0 > base ? i0 - base : 0, j->n_panels[s]);
            const int64_t p1 = mm_min(i1 - base, j->n_panels[s]);
            if (p0 < p1) mm_gemv_panels(&j->mm[s], p0, p1, panel);
        }
    }
}

/* Runs a planned job, in takes from per-thread shares as fast_matmul's GEMV. */
static void fuse_run(fuse_job *j) {
    cpu_backend *cb = j->cb;
    j->n_items = 0;
    for (int s = 0; s < (j->kind == FUSE_MULTI ? j->n : 1); s++)
        j->n_items += j->n_panels[s];
    mm_shares_run(cb, j->n_items, fuse_part, j);
}

/* Whether a batch of x's rows is one the fused ops take (the lock held). */
static bool fuse_ok(const cpu_backend *cb, const al_tensor *x) {
    return cb->k && cb->fuse && x->ne[1] >= 1 && x->ne[1] <= cb->k->tile &&
           x->ne[1] <= cb->act_tok;
}

bool fast_matmul_multi(al_backend *be, const al_tensor *x, const al_tensor *norm, float eps,
                       int n, const al_tensor *const *w, const al_tensor *const *bias,
                       al_tensor *const *out) {
    (void)eps;
    cpu_backend *cb = (cpu_backend *)be;
    if (norm || n < 1 || n > FUSE_MAX) return false; /* the norm runs alone first */
    pthread_mutex_lock(&cb->lock);
    fuse_job j = {.cb = cb, .kind = FUSE_MULTI, .n = n};
    bool ok = fuse_ok(cb, x);
    for (int i = 0; ok && i < n; i++)
        ok = fuse_add_matmul(&j, i, x, w[i], bias[i], out[i]);
    if (ok) fuse_run(&j);
    pthread_mutex_unlock(&cb->lock);
    return ok;
}

bool fast_matmul_glu(al_backend *be, const al_tensor *x, const al_tensor *wg,
                     const al_tensor *wu, al_glu act, al_tensor *out) {
    cpu_backend *cb = (cpu_backend *)be;
    pthread_mutex_lock(&cb->lock);
    fuse_job j = {.cb = cb, .kind = FUSE_GLU, .n = 2, .act = act, .dst = out};
    bool ok = fuse_ok(cb, x) && wg->ne[1] == wu->ne[1] && fuse_scratch(&j, wg->ne[1], x->ne[1]) &&
              fuse_add_matmul(&j, 0, x, wg, NULL, out) &&
              fuse_add_matmul(&j, 1, x, wu, NULL, &j.tmp);
    if (ok) fuse_run(&j);
    pthread_mutex_unlock(&cb->lock);
    return ok;
}

bool fast_matmul_add(al_backend *be, const al_tensor *x, const al_tensor *w,
                     const al_tensor *bias, al_tensor *out) {
    cpu_backend *cb = (cpu_backend *)be;
    pthread_mutex_lock(&cb->lock);
    fuse_job j = {.cb = cb, .kind = FUSE_ADD, .n = 1, .dst = out};
    bool ok = fuse_ok(cb, x) && out->ne[0] == w->ne[1] && out->ne[1] == x->ne[1] &&
              fuse_scratch(&j, w->ne[1], x->ne[1]) &&
              fuse_add_matmul(&j, 0, x, w, bias, &j.tmp);
    if (ok) fuse_run(&j);
    pthread_mutex_unlock(&cb->lock);
    return ok;
}
