/* mm.h: inside the CPU backend: the fast matmul's job (matmul.c), shared with moe.c,
 * which runs the panels of several experts' matmuls in one pool run.
 *
 * A job is one matmul over a few or many tokens (matmul.c says how it runs). mm_plan
 * makes the choices that fix the order of the float operations per (row, token):
 * whether hi and lo share a tile, whether the kernel reads the weights in place, the K
 * chunk. They depend on the weight, the activation mode and the number of tokens
 * only, so a job planned for the same tokens runs the same kernel calls, bit for bit,
 * whoever runs its panels and in whatever order.
 */
#ifndef AL_CPU_MM_H
#define AL_CPU_MM_H

#include "ops.h"

typedef struct mm_job {
    cpu_backend *cb;
    const cpu_kernels *k;
    const al_tensor *x, *w, *bias;
    al_tensor *out;
    const cpu_qtype *qt; /* NULL: a float weight type */
    cpu_act_fmt fmt;     /* how the activations are quantized for qt */
    int passes;          /* 8-bit passes per activation: 1 or 2 (cpu_act_mode) */
    bool paired;         /* 2 passes, a few tokens: token t's hi and lo are slots 2t and
                          * 2t + 1 of one tile; else the lo tile follows the hi tile */
    bool inplace;        /* few tokens: full panels skip the pack (inplace_types) */
    bool amx;            /* a batch on AMX: tiles of CPU_AMX_TOK tokens, the AMX layout */
    bool narrow;         /* one token, in place: a tile of it alone, 1 wide, or 2 (hi, lo)
                          * with paired passes (cpu_kernels.narrow) */
    uint8_t *act;        /* the quantized activations of this pass: cb->act, or the
                          * tiles of one expert (moe.c) */
    int64_t tok0, n_tok; /* the tokens of this pass */
    int64_t kc;          /* elements per K chunk */
    int64_t k0;          /* a batch: the chunk of this pool run */
    int64_t tile_bytes;  /* bytes of one activation tile over all of K */
    int64_t grain;       /* panels taken at a time */
    int64_t next;        /* the next panel to take; atomic */
} mm_job;

static inline int64_t mm_min(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* A grain of panels rounded up so that, with R = 8, a thread takes both halves of each
 * group of 16 rows of an x16 weight: they read the same cache lines, and the second
 * finds them in its own cache (takes start at multiples of the grain). */
static inline int64_t mm_grain_x16(const cpu_kernels *k, int64_t grain) {
    const int64_t per = k->x16_types && k->rows < 16 ? 16 / k->rows : 1;
    return (grain + per - 1) / per * per;
}

/* A job's work items dealt out as one contiguous share per thread, which its owner
 * takes from the front in guided takes (a quarter of what is left, so that the takes
 * shrink toward the end and the threads finish close together) and a thread whose
 * share is spent steals from the back, half of what is left at a time.
 *
 * Why not guided takes from one counter over all items (as GEMVs and then the experts
 * of a mixture had): every take there starts where the other thread's last one ended,
 * so each is a new stream from memory, and a new stream costs about a microsecond
 * before the prefetches run ahead of the reads: small takes read markedly slower than
 * large ones, and a mixture of experts decoded faster with the shares
 * (docs/benchmarks.md, "Figures from source comments"). An owner's
 * takes follow one another, so its prefetches run on into its next take; only the
 * steals at the end start new streams. The shares' bounds are multiples of per (a
 * whole x16 group, mm_grain_x16). */
typedef struct mm_share {
    _Alignas(64) uint64_t lohi; /* lo | hi << 32: the items [lo, hi) left; a line each */
} mm_share;

/* Deals n items to the nth shares s[0..nth) before a pool run. */
void mm_share_init(mm_share *s, int nth, int64_t n, int64_t per);

/* Thread ith's next take [*i0, *i1): from its own share, else stolen; false when every
 * share is spent. */
bool mm_share_take(mm_share *s, int ith, int nth, int64_t per, int64_t *i0, int64_t *i1);

/* The two as the fast ops use them: n items dealt to cb's threads in shares of whole
 * x16 groups (mm_grain_x16), then fn run on the pool; inside fn, thread ith's next take. */
void mm_shares_run(cpu_backend *cb, int64_t n, al_pool_fn fn, void *arg);
bool mm_shares_next(cpu_backend *cb, int ith, int nth, int64_t *i0, int64_t *i1);

/* Thread ith's scratch: a panel, or a row of floats (fast_tls_bytes). */
static inline uint8_t *mm_tls(cpu_backend *cb, int ith) {
    return cb->tls + (uint64_t)ith * cb->tls_bytes;
}

/* Sets a job's amx, paired, inplace, narrow, kc and tile_bytes for its n_tok tokens
 * (cb, k, w, qt, fmt, passes and n_tok set). */
void mm_plan(mm_job *j);

/* A job of n_tok rows of x by w (+ bias) into out, planned (mm_plan); its act is the
 * caller's to give. The fused ops (moe.c, fuse.c) plan their matmuls with it. */
void mm_job_init(mm_job *j, cpu_backend *cb, const al_tensor *x, const al_tensor *w,
                 const al_tensor *bias, al_tensor *out, int64_t n_tok);

/* Whether the fast matmul runs a weight type on its own kernels (else it takes the
 * reference's matmul). */
static inline bool mm_fast_type(uint32_t type) {
    return cpu_qtype_get(type) || type == AL_TYPE_F32 || type == AL_TYPE_F16 ||
           type == AL_TYPE_BF16;
}

/* Whether two quantized jobs of the same tokens quantize them into the same tiles. */
static inline bool mm_same_tiles(const mm_job *a, const mm_job *b) {
    return a->qt && b->qt && a->fmt.exact_scale == b->fmt.exact_scale && a->fmt.b == b->fmt.b &&
           a->fmt.offset == b->fmt.offset && a->passes == b->passes &&
           a->paired == b->paired && a->narrow == b->narrow && a->tile_bytes == b->tile_bytes;
}

/* n_bytes of cb's activation buffer past *used bytes already given out, 64-byte
 * aligned, or NULL where it is full. */
static inline uint8_t *mm_act_carve(const cpu_backend *cb, uint64_t *used, uint64_t n_bytes) {
    const uint64_t n = (n_bytes + 63) & ~(uint64_t)63;
    if (*used + n > cb->act_bytes) return NULL;
    uint8_t *p = cb->act + *used;
    *used += n;
    return p;
}

/* Bytes of the quantized activations of a few tokens' pass (n_tok <= TT, no AMX). */
static inline int64_t mm_act_bytes(const mm_job *j) {
    return j->qt ? j->passes * j->tile_bytes : 0;
}

/* Quantizes x (a row of w->ne[0] floats) as token t of the pass into j->act, in every
 * pass; rest is scratch for a row of floats (on AMX, and a quantized row after it). */
void mm_quantize_token(const mm_job *j, const float *x, int64_t t, float *rest);

/* Panels [p0, p1) (panel p: R output rows from row p R) of a few tokens' pass (n_tok
 * <= TT), each K chunk by chunk, packed into `panel` where the kernel does not read
 * the weights in place. */
void mm_gemv_panels(const mm_job *j, int64_t p0, int64_t p1, void *panel);

#endif /* AL_CPU_MM_H */
