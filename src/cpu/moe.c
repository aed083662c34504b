/* moe.c: the fast moe_ffn of the CPU backend (backend.h): the routed experts of a few
 * tokens in two pool runs, where the plain ops take three matmuls per expert.
 *
 * Decoding one token of a model with 8 of 128 experts per token, the plain ops ran 24
 * matmuls per layer of under a MiB of weights each, every one a pool run whose start
 * (the first panels not yet prefetched) and finish (the threads waiting for the last
 * panel) cost a good part of its work. Here a layer's experts take two pool runs:
 *   1. the gate and up projections of every expert the batch uses, with the
 *      activation: the threads take (expert, panel) items from one shared counter, so
 *      the panels of all experts form one list of work, run a take's gate panels and
 *      then its up panels (two streams of rows), and apply silu_mul or swiglu_oai to
 *      their outputs. The thread that finishes an expert's last panel quantizes its
 *      rows for the down projection, so that no run is needed for that;
 *   2. the down projections, again (expert, panel) items from one counter; the
 *      thread that finishes the last expert of a panel of the output (columns of x)
 *      adds the experts' weighted outputs there into the rows of their tokens, in
 *      ascending expert order.
 *
 * Bits. Each expert's matmuls are planned (mm_plan) for the tokens routed to it, as
 * fast_matmul plans them for the rows get_rows gathers, and each panel runs the same
 * kernel calls (mm_gemv_panels) on the same quantized activations, so every output is
 * the plain matmul's. The activations are elementwise and start at panel boundaries,
 * multiples of R, of the kernels' vector width: each element takes the path it takes
 * in a whole row. The weighted adds are add_rows' own code (cpu_add_scaled), in
 * ascending expert order per element, as the plain ops add them expert by expert. So
 * the result is that of the plain ops, bit for bit (tests/test_moe.c, tests/moe.sh).
 *
 * When: a batch whose experts each have at most a tile of TT tokens (fast_matmul's
 * GEMV path), whose (token, expert) pairs fit al_moe's scratch (16 tokens' in
 * model.c), and whose experts' quantized activations, a tile each, fit the backend's
 * activation buffer. On this 2-core VM, one layer of bench-qwen3moe's shape (8 of 128
 * Q4_K experts, 2048 x 768), best of 30: 0.66 against 0.81 ms for one token, 1.15-1.2x
 * up to 48 tokens; the whole model decodes 7-11% faster (fused and plain alternating in
 * one process), batches of 4 13%, of 16 3%, of 32 none. gpt-oss's
 * shape (4 of 32 MXFP4 experts, 2880 x 2880, 4.4 MB a matrix) gains 1-4%: its matmuls
 * are long enough to hide a pool run's start and finish.
 */
#include <string.h>

#include "mm.h"
#include "ops.h"
#include "util.h"

enum {
    MOE_MAX_EXPERTS = 256, /* distinct experts of one fused batch */
    MOE_MAX_PAIRS = 512,   /* its (token, expert) pairs */
    MOE_MAX_PANELS = 1024, /* panels of the output (n_embd up to 16384 columns) */
};

/* One expert the batch uses. Its pairs (token, weight) are pair0 .. pair0 + n_tok of
 * the job, in ascending token order, and its rows of the scratch the same. */
typedef struct moe_expert {
    int e, pair0, n_tok;
    int same;                  /* an earlier expert with the very same tokens, or -1 */
    mm_job gate, up, down;     /* its matmuls, planned for its tokens */
    al_tensor w[3], b[3];      /* views of its rows of the weights and biases */
    al_tensor xe, he, he2, ye; /* views of its rows of the scratch */
    int n_done;                /* panels of the first run finished; atomic */
} moe_expert;

typedef struct moe_job {
    cpu_backend *cb;
    const al_moe *moe;
    const al_tensor *xb;
    al_tensor *x;
    int n_exp, n_pairs;
    int32_t tok[MOE_MAX_PAIRS]; /* the pairs, by expert and then token */
    float w[MOE_MAX_PAIRS];
    int32_t e_of[MOE_MAX_PAIRS];
    moe_expert ex[MOE_MAX_EXPERTS];
    uint64_t act_used;            /* bytes of cb->act given to the experts' tiles */
    int64_t n_panels_ff, n_panels_embd;
    int panel_done[MOE_MAX_PANELS]; /* run 2: experts done with each output panel; atomic */
} moe_job;

/* ---- planning ------------------------------------------------------------------------ */

/* The batch's pairs sorted by expert, tokens ascending within one (a stable insertion
 * sort of at most MOE_MAX_PAIRS), then grouped into experts. False where there are
 * more experts than a job holds. */
static bool moe_group(moe_job *j, int n_tok) {
    const al_moe *moe = j->moe;
    const int k = moe->n_used;
    j->n_pairs = n_tok * k;
    for (int i = 0; i < j->n_pairs; i++) {
        const int32_t e = moe->sel[i];
        AL_ASSERT(e >= 0 && e < moe->n_expert);
        int at = i;
        for (; at > 0 && j->e_of[at - 1] > e; at--) {
            j->e_of[at] = j->e_of[at - 1];
            j->tok[at] = j->tok[at - 1];
            j->w[at] = j->w[at - 1];
        }
        j->e_of[at] = e;
        j->tok[at] = i / k;
        j->w[at] = moe->sel_w[i];
    }
    j->n_exp = 0;
    for (int i = 0; i < j->n_pairs; i++) {
        if (i > 0 && j->e_of[i] == j->e_of[i - 1]) {
            j->ex[j->n_exp - 1].n_tok++;
            continue;
        }
        if (j->n_exp == MOE_MAX_EXPERTS) return false;
        moe_expert *x = &j->ex[j->n_exp++];
        x->e = j->e_of[i];
        x->pair0 = i;
        x->n_tok = 1;
    }
    return true;
}

/* One of expert x's matmuls: rows [e n_out, (e + 1) n_out) of w, row e of bias, input
 * in (the float rows; quantized, the tiles mm_quantize_token writes), output out. */
static void moe_matmul(const moe_job *j, moe_expert *x, int which, const al_tensor *w,
                       const al_tensor *bias, int64_t n_out, const al_tensor *in, al_tensor *out,
                       mm_job *mm) {
    x->w[which] = al_tensor_rows(w, (int64_t)x->e * n_out, n_out);
    mm_job_init(mm, j->cb, in, &x->w[which], al_tensor_row_or_null(bias, x->e, &x->b[which]),
                out, x->n_tok);
}

/* The activation buffer's tiles for one expert's matmul, or NULL where it is full. */
static uint8_t *moe_tiles(moe_job *j, const mm_job *mm) {
    return mm_act_carve(j->cb, &j->act_used, (uint64_t)mm_act_bytes(mm));
}

/* The first expert before x with the very tokens of x, whose quantized inputs x can
 * share, or -1. Only experts with tiles of their own are candidates: a few compares
 * per expert, and one token's experts all find the first. */
static int moe_same_tokens(const moe_job *j, const moe_expert *x) {
    for (const moe_expert *y = j->ex; y < x; y++)
        if (y->same < 0 && y->n_tok == x->n_tok &&
            !memcmp(j->tok + y->pair0, j->tok + x->pair0, (size_t)x->n_tok * sizeof *j->tok))
            return (int)(y - j->ex);
    return -1;
}

/* Plans expert x's three matmuls over its rows of the scratch and gives each
 * quantized input its tiles; false where the activation buffer is full. */
static bool moe_plan_expert(moe_job *j, moe_expert *x) {
    const al_moe *moe = j->moe;
    const int64_t n_embd = j->xb->ne[0];
    x->xe = al_tensor_rows(moe->xe, x->pair0, x->n_tok);
    x->he = al_tensor_rows(moe->he, x->pair0, x->n_tok);
    x->he2 = al_tensor_rows(moe->he2, x->pair0, x->n_tok);
    x->ye = al_tensor_rows(moe->ye, x->pair0, x->n_tok);
    moe_matmul(j, x, 0, moe->gate, moe->gate_b, moe->n_ff, &x->xe, &x->he, &x->gate);
    moe_matmul(j, x, 1, moe->up, moe->up_b, moe->n_ff, &x->xe, &x->he2, &x->up);
    moe_matmul(j, x, 2, moe->down, moe->down_b, n_embd, &x->he, &x->ye, &x->down);
    /* gate and up: the tiles of an earlier expert with the same tokens (decoding: one
     * token, one set of tiles), and up those of gate where they quantize alike */
    x->same = moe_same_tokens(j, x);
    const moe_expert *y = x->same >= 0 ? &j->ex[x->same] : NULL;
    if (x->gate.qt) x->gate.act = y ? y->gate.act : moe_tiles(j, &x->gate);
    if (mm_same_tiles(&x->gate, &x->up)) x->up.act = x->gate.act;
    else if (x->up.qt) x->up.act = y ? y->up.act : moe_tiles(j, &x->up);
    if (x->down.qt) x->down.act = moe_tiles(j, &x->down);
    return (!x->gate.qt || x->gate.act) && (!x->up.qt || x->up.act) &&
           (!x->down.qt || x->down.act);
}

/* The expert's inputs to gate and up: its tokens' rows of xb gathered for a float
 * weight, quantized for the others (once for tiles another expert shares). */
static void moe_inputs(moe_job *j, moe_expert *x) {
    float *rest = (float *)mm_tls(j->cb, 0); /* the caller is thread 0 */
    for (int t = 0; t < x->n_tok; t++) {
        const float *row = cpu_f32_row(j->xb, j->tok[x->pair0 + t]);
        if (!x->gate.qt || !x->up.qt)
            memcpy(cpu_f32_row(&x->xe, t), row, (size_t)j->xb->ne[0] * sizeof(float));
        if (x->same >= 0) continue;
        if (x->gate.qt) mm_quantize_token(&x->gate, row, t, rest);
        if (x->up.qt && x->up.act != x->gate.act) mm_quantize_token(&x->up, row, t, rest);
    }
}

/* Everything the two runs need, or false where this batch is not fused: too many
 * tokens for an expert's tile, too many experts, too little scratch, a type the fast
 * matmul does not run. */
static bool moe_plan(moe_job *j) {
    const cpu_backend *cb = j->cb;
    const al_moe *moe = j->moe;
    const int n = (int)j->xb->ne[1];
    const int64_t n_embd = j->xb->ne[0];
    if (n < 1 || (int64_t)n * moe->n_used > MOE_MAX_PAIRS || n * moe->n_used > moe->n_scratch ||
        !mm_fast_type(moe->gate->type) || !mm_fast_type(moe->up->type) ||
        !mm_fast_type(moe->down->type) || n_embd > cb->max_cols || moe->n_ff > cb->max_cols ||
        (n_embd + cb->k->rows - 1) / cb->k->rows > MOE_MAX_PANELS || !cb->act || !moe_group(j, n))
        return false;
    j->act_used = 0;
    for (int s = 0; s < j->n_exp; s++) {
        moe_expert *x = &j->ex[s];
        /* more tokens than a tile: fast_matmul's batch path, in several runs */
        if (x->n_tok > cb->k->tile || !moe_plan_expert(j, x)) return false;
        x->n_done = 0;
    }
    for (int s = 0; s < j->n_exp; s++)
        moe_inputs(j, &j->ex[s]);
    const int r = cb->k->rows;
    j->n_panels_ff = (moe->n_ff + r - 1) / r;
    j->n_panels_embd = (n_embd + r - 1) / r;
    memset(j->panel_done, 0, (size_t)j->n_panels_embd * sizeof *j->panel_done);
    return true;
}

/* ---- the two runs ----------------------------------------------------------------------- */

/* Panels [p0, p1) of expert x's gate and up projections, each a run of its rows,
 * then the activation of their outputs; after the expert's last panel, its rows
 * quantized for the down projection. */
static void moe_up_panels(moe_job *j, moe_expert *x, int64_t p0, int64_t p1, void *panel) {
    const cpu_kernels *k = j->cb->k;
    const al_moe *moe = j->moe;
    mm_gemv_panels(&x->gate, p0, p1, panel);
    mm_gemv_panels(&x->up, p0, p1, panel);
    const int64_t c0 = p0 * k->rows, nc = mm_min(p1 * k->rows, moe->n_ff) - c0;
    for (int t = 0; t < x->n_tok; t++) {
        float *g = cpu_f32_row(&x->he, t) + c0;
        const float *u = cpu_f32_row(&x->he2, t) + c0;
        if (moe->act == AL_MOE_SWIGLU_OAI)
            k->swiglu_oai(g, u, moe->alpha, moe->limit, nc);
        else if (moe->act == AL_MOE_GELU)
            k->gelu_mul(g, u, nc);
        else
            k->silu_mul(g, u, nc);
    }
    /* acquire and release: the last one sees every panel the others wrote */
    const int done = __atomic_add_fetch(&x->n_done, (int)(p1 - p0), __ATOMIC_ACQ_REL);
    if (done != j->n_panels_ff || !x->down.qt) return;
    for (int t = 0; t < x->n_tok; t++) /* the panel buffer is free: a row for the rest */
        mm_quantize_token(&x->down, cpu_f32_row(&x->he, t), t, (float *)panel);
}

/* Run 1: work item i is panel i % n_panels_ff of expert i / n_panels_ff; a take runs
 * expert by expert over its panels. */
static void moe_up_part(void *arg, int ith, int nth) {
    moe_job *j = arg;
    const int64_t np = j->n_panels_ff;
    void *panel = mm_tls(j->cb, ith);
    int64_t i0, i1;
    while (mm_shares_next(j->cb, ith, nth, &i0, &i1))
        for (int64_t i = i0; i < i1;) {
            const int64_t s = i / np, end = mm_min(i1, (s + 1) * np);
            moe_up_panels(j, &j->ex[s], i - s * np, end - s * np, panel);
            i = end;
        }
}

/* Adds the experts' weighted outputs into their tokens' rows of x over panels [p0,
 * p1) of the output, in ascending expert order. */
static void moe_add_panels(const moe_job *j, int64_t p0, int64_t p1) {
    const int r = j->cb->k->rows;
    const int64_t c0 = p0 * r, nc = mm_min(p1 * r, j->xb->ne[0]) - c0;
    for (int s = 0; s < j->n_exp; s++) {
        const moe_expert *x = &j->ex[s];
        for (int t = 0; t < x->n_tok; t++)
            cpu_add_scaled(cpu_f32_row(j->x, j->tok[x->pair0 + t]) + c0,
                           cpu_f32_row(&x->ye, t) + c0, j->w[x->pair0 + t], nc);
    }
}

/* Run 2: work item i is panel i % n_panels_embd of expert i / n_panels_embd's down
 * projection, so that a take streams one expert's rows as one run, as run 1 does (by
 * output panel across the experts, each take had been eight runs of a few panels,
 * each starting where nothing was prefetched). The thread that finishes the last
 * expert of an output panel adds the experts' outputs there, in ascending order. */
static void moe_down_part(void *arg, int ith, int nth) {
    moe_job *j = arg;
    const int64_t np = j->n_panels_embd;
    void *panel = mm_tls(j->cb, ith);
    int64_t i0, i1;
    while (mm_shares_next(j->cb, ith, nth, &i0, &i1))
        for (int64_t i = i0; i < i1;) {
            const int64_t s = i / np, end = mm_min(i1, (s + 1) * np);
            const int64_t p0 = i - s * np, p1 = end - s * np;
            mm_gemv_panels(&j->ex[s].down, p0, p1, panel);
            int64_t run = -1; /* the first of a run of panels this thread completes */
            for (int64_t p = p0; p <= p1; p++) {
                /* acquire and release: the last one sees every expert's output */
                const bool last = p < p1 && __atomic_add_fetch(&j->panel_done[p], 1,
                                                               __ATOMIC_ACQ_REL) == j->n_exp;
                if (last && run < 0) run = p;
                if (!last && run >= 0) {
                    moe_add_panels(j, run, p);
                    run = -1;
                }
            }
            i = end;
        }
}

bool fast_moe_ffn(al_backend *be, const al_tensor *xb, const al_moe *moe, al_tensor *x) {
    cpu_backend *cb = (cpu_backend *)be;
    AL_ASSERT(x->ne[0] == xb->ne[0] && x->ne[1] >= xb->ne[1]);
    pthread_mutex_lock(&cb->lock);
    moe_job *j = cb->moe_job;
    bool fused = false;
    if (j && cb->moe_fuse) {
        j->cb = cb, j->moe = moe, j->xb = xb, j->x = x;
        fused = moe_plan(j);
    }
    if (fused) {
        /* per-thread shares: a thread's takes follow one another in memory */
        mm_shares_run(cb, j->n_exp * j->n_panels_ff, moe_up_part, j);
        mm_shares_run(cb, j->n_exp * j->n_panels_embd, moe_down_part, j);
    }
    pthread_mutex_unlock(&cb->lock);
    return fused;
}

uint64_t fast_moe_job_bytes(void) {
    return sizeof(moe_job);
}
