/* cpu.c: the CPU backend object: which instruction set runs, the scratch that reserve()
 * sizes, tensor storage, and the per-row ops (norm, rope, silu, gelu, gpt-oss's
 * SwiGLU, scale, add).
 *
 * The settings (al_model_params.cpu, anyllm.h; the CLI maps the ANYLLM_* variable
 * named with each onto it) are read once, when the backend is created. The
 * instruction set is cpu.isa (ANYLLM_ISA): best (the default: the best the CPU and OS
 * support, by CPUID through __builtin_cpu_supports), avx512, avx2, scalar, or ref (the
 * plain-C reference ops, the oracle). One binary runs on any x86-64: each
 * kernels_<isa>.c is compiled for its own instruction set and only called when the
 * CPU has it.
 *
 * cpu.amx = 0 (ANYLLM_AMX=0) keeps large batches (prompts) on the AVX-512 VNNI kernels
 * where they would run on AMX tiles (ops.h); AMX is used wherever it can be, which
 * takes CPUID's AMX-TILE and AMX-INT8, the tile state in XCR0, and Linux's permission
 * for it (arch_prctl ARCH_REQ_XCOMP_PERM), asked for once per process. cpu.amx = 1
 * says why where AMX cannot run. Both paths give the same bits.
 *
 * Weights that only matmul reads are rewritten at load into the x16 layout (ops.h),
 * which a GEMV streams in one pass: decoding reads about a quarter faster from it
 * than from the file's rows. cpu.x16 = 0 (ANYLLM_X16=0) keeps the rows (and no copy of
 * the weights). Whether the in-place kernels prefetch that stream themselves or leave
 * it to the hardware (kernels_avx512.c: prefetch_rows) depends on the CPU: on by
 * default on Intel's, where the hardware alone fell behind, off on the others (a Zen 4
 * read faster without); cpu.x16_prefetch = 0 or 1 (ANYLLM_X16_PF) overrides. The bits
 * are the same either way.
 *
 * A few tokens' routed experts run in two pool runs per layer (moe.c), where the plain
 * ops take three matmuls per expert; cpu.moe_fuse = 0 (ANYLLM_MOE_FUSE=0) keeps the
 * plain ops, which give the same bits.
 *
 * cpu.act (ANYLLM_ACT) picks how the fast matmul rounds activations (ops.h
 * cpu_act_mode): q8 (the default), llama.cpp's numerics, or q8x2 ("precise"), about 15
 * bits, which follows the reference ops closely at twice the integer work: prompts
 * take about twice as long and decoding 9-21% longer (issue 16's measurements), which
 * is why it is not the default.
 *
 * Ops run one at a time per backend (a mutex), because they share the scratch; each
 * op spreads its work over the backend's thread pool.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "mm.h"
#include "ops.h"
#include "format/quant.h"
#include "util.h"

/* ---- instruction sets ------------------------------------------------------------------ */

static const char *const g_isa_names[CPU_ISA_COUNT] = {"ref", "scalar", "avx2", "avx512"};

const char *cpu_isa_name(cpu_isa isa) {
    return isa < CPU_ISA_COUNT ? g_isa_names[isa] : "unknown";
}

#if defined(__x86_64__) && defined(__GNUC__)
/* F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not
 * know the name "f16c". The AVX state it needs is the one avx2's check covers. */
static bool cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}
#endif

/* Whether CPUID's vendor is Intel's (cpu.c's header: the x16 prefetches). */
static bool cpu_is_intel(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    /* "GenuineIntel" in EBX, EDX, ECX */
    return __get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e;
#else
    return false;
#endif
}

bool cpu_isa_available(cpu_isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    const bool avx2 =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    switch (isa) {
    case CPU_ISA_REF:
    case CPU_ISA_SCALAR:
        return true;
    case CPU_ISA_AVX2:
        return avx2;
    case CPU_ISA_AVX512:
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vnni");
    default:
        return false;
    }
#else
    return isa == CPU_ISA_REF || isa == CPU_ISA_SCALAR;
#endif
}

cpu_isa cpu_isa_best(void) {
    for (int i = CPU_ISA_COUNT - 1; i > CPU_ISA_SCALAR; i--)
        if (cpu_isa_available((cpu_isa)i)) return (cpu_isa)i;
    return CPU_ISA_SCALAR;
}

/* The ISA a name in the settings (cpu.isa) asks for, or -1 for a name not known;
 * NULL, "" and "best" are the best. */
static int isa_by_name(const char *name) {
    if (!name || !*name || !strcmp(name, "best")) return (int)cpu_isa_best();
    for (int i = 0; i < CPU_ISA_COUNT; i++)
        if (!strcmp(name, g_isa_names[i])) return i;
    return -1;
}

/* cpu.isa (checked), else the best. One this CPU cannot run gives way to the best with
 * a warning rather than failing: a script that names an ISA runs on any machine. */
static cpu_isa isa_from_settings(const char *name) {
    const cpu_isa best = cpu_isa_best();
    const int isa = isa_by_name(name);
    if (isa < 0) return best;
    if (cpu_isa_available((cpu_isa)isa)) return (cpu_isa)isa;
    al_log(AL_LOG_WARN, "cpu.isa '%s': this CPU cannot run it; using %s", name,
           cpu_isa_name(best));
    return best;
}

/* ---- AMX ------------------------------------------------------------------------------- */

/* Linux's arch_prctl request for a state component the kernel grants on demand, and
 * the component of AMX's tile data (asm/prctl.h, XFEATURE_XTILEDATA). */
enum { AMX_REQ_XCOMP_PERM = 0x1023, AMX_XTILEDATA = 18 };

static char g_amx_why[160];
static const char *g_amx_obstacle;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;

/* Why the AMX kernels cannot run here, or NULL. */
static const char *amx_probe(void) {
    if (!cpu_isa_available(CPU_ISA_AVX512)) return "the CPU lacks the AVX-512 the AMX kernels use";
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a, b, c, d;
    /* CPUID.(7,0):EDX bit 24 AMX-TILE, bit 25 AMX-INT8 */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1) || !(d >> 25 & 1))
        return "the CPU has no AMX-INT8";
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) return "the OS has not enabled XSAVE";
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo >> 17 & 3) != 3) return "the OS does not manage the tile state (XCR0 bits 17, 18)";
    /* per process: threads started before this call have the permission too */
    if (syscall(SYS_arch_prctl, AMX_REQ_XCOMP_PERM, AMX_XTILEDATA) != 0) {
        snprintf(g_amx_why, sizeof g_amx_why,
                 "the kernel refused the tile state (arch_prctl ARCH_REQ_XCOMP_PERM: %s)",
                 strerror(errno));
        return g_amx_why;
    }
    return NULL;
#else
    return "not an x86-64 build";
#endif
}

static void amx_init(void) {
    g_amx_obstacle = amx_probe();
}

const char *cpu_amx_unavailable(void) {
    pthread_once(&g_amx_once, amx_init);
    return g_amx_obstacle;
}

/* An activation mode's name: q8, q8x2 or precise (the same as q8x2); NULL and "" are
 * q8 where empty_ok. -1 for anything else. */
static int act_by_name(const char *name, bool empty_ok) {
    if (!name || !*name) return empty_ok ? CPU_ACT_Q8 : -1;
    if (!strcmp(name, "q8")) return CPU_ACT_Q8;
    if (!strcmp(name, "q8x2") || !strcmp(name, "precise")) return CPU_ACT_Q8X2;
    return -1;
}

static const cpu_kernels *kernels_for(cpu_isa isa) {
    switch (isa) {
    case CPU_ISA_SCALAR:
        return &cpu_kernels_scalar;
    case CPU_ISA_AVX2:
        return &cpu_kernels_avx2;
    case CPU_ISA_AVX512:
        return &cpu_kernels_avx512;
    default:
        return NULL;
    }
}

uint64_t cpu_sum_u64(const uint64_t *p, int64_t n) {
    return kernels_for(cpu_isa_best())->sum_u64(p, n);
}

/* The kernels read whole vectors from 64-byte boundaries, 128 bytes at a time: the
 * buffer's middle goes to them, its ragged edges are summed byte by byte. */
uint64_t al_memory_read_sum(const void *buf, size_t n_bytes) {
    if (!buf) return 0;
    const uint8_t *p = buf, *end = p + n_bytes;
    const uint8_t *lo = (const uint8_t *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
    if (lo > end) lo = end;
    const size_t mid = (size_t)(end - lo) / 128 * 128;
    uint64_t sum = mid ? cpu_sum_u64((const uint64_t *)lo, (int64_t)(mid / 8)) : 0;
    for (const uint8_t *q = p; q < lo; q++)
        sum += *q;
    for (const uint8_t *q = lo + mid; q < end; q++)
        sum += *q;
    return sum;
}

/* ---- scratch ------------------------------------------------------------------------ */

/* Grows an aligned buffer to n_bytes; the contents are not kept. */
static bool grow(uint8_t **buf, uint64_t *have, uint64_t n_bytes) {
    if (n_bytes <= *have) return true;
    uint8_t *p = al_aligned_alloc(64, n_bytes);
    if (!p) return false;
    al_aligned_free(*buf);
    *buf = p;
    *have = n_bytes;
    return true;
}

static al_status cpu_reserve(al_backend *be, int64_t max_cols, int64_t max_ctx) {
    cpu_backend *cb = (cpu_backend *)be;
    if (max_cols <= 0 || max_ctx <= 0) return al_error(AL_ERR_ARG, "reserve: sizes must be > 0");
    pthread_mutex_lock(&cb->lock);
    if (max_cols > cb->max_cols) cb->max_cols = max_cols;
    if (max_ctx > cb->max_ctx) cb->max_ctx = max_ctx;
    /* the reference ops are also the fallback of the fast ones */
    bool ok =
        ref_work_reserve(cb, (uint64_t)(cb->max_cols > cb->max_ctx ? cb->max_cols : cb->max_ctx));
    const cpu_kernels *k = cb->k;
    if (ok && k) {
        /* a batch is at most 512 tokens (model.c), and never more than the context;
         * the matmul splits longer ones */
        int n_tok = cb->max_ctx < 512 ? (int)cb->max_ctx : 512;
        /* whole tiles: AMX's are the largest, a multiple of every TT */
        _Static_assert(CPU_AMX_TOK % CPU_MAX_TILE == 0, "AMX tiles hold whole TT tiles");
        n_tok = (n_tok + CPU_AMX_TOK - 1) / CPU_AMX_TOK * CPU_AMX_TOK;
        ok = grow(&cb->act, &cb->act_bytes,
                  fast_act_bytes(k, cb->max_cols, n_tok) * (uint64_t)cb->act_passes);
        const uint64_t per = fast_tls_bytes(k, cb->max_cols);
        uint64_t total, have = cb->tls_bytes * (uint64_t)cb->n_threads;
        if (ok && per > cb->tls_bytes) {
            ok = al_mul_u64(per, (uint64_t)cb->n_threads, &total) && grow(&cb->tls, &have, total);
            if (ok) cb->tls_bytes = per;
        }
        if (ok && n_tok > cb->act_tok) cb->act_tok = n_tok;
    }
    pthread_mutex_unlock(&cb->lock);
    return ok ? AL_OK
              : al_error(AL_ERR_NOMEM,
                         "out of memory for CPU scratch (%lld columns, "
                         "%lld positions)",
                         (long long)max_cols, (long long)max_ctx);
}

/* ---- storage -------------------------------------------------------------------------- */

/* Tensors take whole pages, page-aligned: a GPU on unified memory can then import a
 * context's KV cache as it is (tensor_host), to share it with a context of its own. */
enum { CPU_PAGE = 4096, CPU_HUGE = 2 << 20 };

static uint64_t page_round(uint64_t n) { return (n + CPU_PAGE - 1) & ~(uint64_t)(CPU_PAGE - 1); }

static al_status cpu_tensor_alloc(al_backend *be, int64_t n_cols, int64_t n_rows, al_tensor *out) {
    (void)be;
    uint64_t n_bytes;
    memset(out, 0, sizeof *out);
    if (n_cols <= 0 || n_rows <= 0 || !al_mul_u64((uint64_t)n_cols, (uint64_t)n_rows, &n_bytes) ||
        !al_mul_u64(n_bytes, sizeof(float), &n_bytes) || n_bytes > SIZE_MAX - 2 * CPU_PAGE)
        return al_error(AL_ERR_ARG, "tensor of %lld x %lld floats is too large", (long long)n_cols,
                        (long long)n_rows);
    /* zero without touching every page; a large tensor (a KV cache) in transparent huge
     * pages where the kernel gives them: a kv head's keys lie a cache row apart, so
     * decode attention touched a new 4 KiB page every 4 keys of bench-1b (1024 pages a
     * layer at depth 2048). Its decode attention alone at depth 2048, from DRAM behind
     * 27 MB of other reads per layer (a layer's weights), 2 threads of a Zen 4, four
     * alternating runs: 5.11-5.76 ms per token in 4 KiB pages, 4.91-5.00 in 2 MiB */
    const bool huge = page_round(n_bytes) >= CPU_HUGE;
    void *p = al_aligned_calloc(huge ? CPU_HUGE : CPU_PAGE, page_round(n_bytes));
    if (!p)
        return al_error(AL_ERR_NOMEM, "out of memory allocating %llu bytes",
                        (unsigned long long)n_bytes);
    if (huge) madvise(p, (size_t)page_round(n_bytes), MADV_HUGEPAGE);
    *out = (al_tensor){.type = AL_TYPE_F32,
                       .ne = {n_cols, n_rows},
                       .data = p,
                       .row_bytes = (uint64_t)n_cols * sizeof(float)};
    return AL_OK;
}

static void cpu_tensor_free(al_backend *be, al_tensor *t) {
    (void)be;
    if (!t) return;
    if (!t->borrowed) al_aligned_calloc_free(t->data);
    memset(t, 0, sizeof *t);
}

static void cpu_tensor_read(al_backend *be, const al_tensor *t, void *dst, uint64_t n_bytes) {
    (void)be;
    memcpy(dst, (const char *)t->data + t->offset, n_bytes);
}

static void cpu_tensor_write(al_backend *be, al_tensor *t, const void *src, uint64_t n_bytes) {
    (void)be;
    memcpy((char *)t->data + t->offset, src, n_bytes);
}

/* An own tensor's storage runs to the end of its last page; a borrowed one's is known
 * only as far as its rows. */
static void *cpu_tensor_host(al_backend *be, const al_tensor *t, uint64_t *n_bytes) {
    (void)be;
    const uint64_t rows = t->row_bytes * (uint64_t)t->ne[1];
    *n_bytes = t->borrowed ? rows : page_round(t->offset + rows) - t->offset;
    return (char *)t->data + t->offset;
}

static al_status cpu_tensor_import(al_backend *be, void *host, uint64_t n_bytes, int64_t n_cols,
                                   int64_t n_rows, al_tensor *out) {
    (void)be;
    memset(out, 0, sizeof *out);
    if (n_cols <= 0 || n_rows <= 0 || (uint64_t)n_cols * (uint64_t)n_rows * sizeof(float) > n_bytes)
        return al_error(AL_ERR_ARG, "%lld x %lld floats do not fit in %llu bytes of host memory",
                        (long long)n_cols, (long long)n_rows, (unsigned long long)n_bytes);
    *out = (al_tensor){.type = AL_TYPE_F32, .ne = {n_cols, n_rows}, .data = host,
                       .row_bytes = (uint64_t)n_cols * sizeof(float), .borrowed = true};
    return AL_OK;
}

/* The KV cache types the attention ops read (al_backend_ops.kv_types). */
#define CPU_KV_TYPES ((1u << AL_TYPE_F16) | (1u << AL_TYPE_Q8_0) | (1u << AL_TYPE_Q4_0))

/* ---- per-row ops ------------------------------------------------------------------------ */

typedef enum {
    ROW_NORM,
    ROW_SILU,
    ROW_GELU,
    ROW_SWIGLU_OAI,
    ROW_SCALE,
    ROW_ADD,
    ROW_SIGMOID
} row_op;

typedef struct rows_job {
    const cpu_kernels *k;
    row_op op;
    const al_tensor *x, *y; /* y: the norm weight, the gated ops' u, add's addend, the gate */
    al_tensor *out;
    float f;  /* the norm's epsilon, scale's factor, or swiglu_oai's alpha */
    float f2; /* swiglu_oai's limit */
} rows_job;

static void rows_part(void *arg, int ith, int nth) {
    const rows_job *j = arg;
    const int64_t n = j->x->ne[0], n_rows = j->x->ne[1];
    for (int64_t r = n_rows * ith / nth; r < n_rows * (ith + 1) / nth; r++) {
        float *x = cpu_f32_row(j->x, r);
        switch (j->op) {
        case ROW_NORM:
            j->k->rms_norm(x, cpu_f32_row(j->y, 0), j->f, cpu_f32_row(j->out, r), n);
            break;
        case ROW_SILU:
            j->k->silu_mul(x, cpu_f32_row(j->y, r), n);
            break;
        case ROW_GELU:
            j->k->gelu_mul(x, cpu_f32_row(j->y, r), n);
            break;
        case ROW_SWIGLU_OAI:
            j->k->swiglu_oai(x, cpu_f32_row(j->y, r), j->f, j->f2, n);
            break;
        case ROW_SCALE:
            j->k->scale(x, j->f, n);
            break;
        case ROW_ADD:
            j->k->add(x, cpu_f32_row(j->y, r), n);
            break;
        case ROW_SIGMOID:
            j->k->sigmoid_mul(x, cpu_f32_row(j->y, r), n);
            break;
        }
    }
}

/* Small ops run on the caller: waking the pool would cost more than the op. */
static void run_rows(cpu_backend *cb, rows_job *j) {
    j->k = cb->k;
    if (j->x->ne[1] < 2 || j->x->ne[0] * j->x->ne[1] < 16384)
        rows_part(j, 0, 1);
    else
        pool_run(cb->pool, rows_part, j);
}

static void fast_rms_norm(al_backend *be, const al_tensor *x, const al_tensor *w, float eps,
                          al_tensor *out) {
    rows_job j = {.op = ROW_NORM, .x = x, .y = w, .out = out, .f = eps};
    run_rows((cpu_backend *)be, &j);
}

static void fast_silu_mul(al_backend *be, al_tensor *g, const al_tensor *u) {
    rows_job j = {.op = ROW_SILU, .x = g, .y = u};
    run_rows((cpu_backend *)be, &j);
}

static void fast_gelu_mul(al_backend *be, al_tensor *g, const al_tensor *u) {
    rows_job j = {.op = ROW_GELU, .x = g, .y = u};
    run_rows((cpu_backend *)be, &j);
}

static void fast_swiglu_oai(al_backend *be, al_tensor *g, const al_tensor *u, float alpha,
                            float limit) {
    rows_job j = {.op = ROW_SWIGLU_OAI, .x = g, .y = u, .f = alpha, .f2 = limit};
    run_rows((cpu_backend *)be, &j);
}

static void fast_scale(al_backend *be, al_tensor *x, float s) {
    rows_job j = {.op = ROW_SCALE, .x = x, .f = s};
    run_rows((cpu_backend *)be, &j);
}

static void fast_add(al_backend *be, al_tensor *x, const al_tensor *y) {
    rows_job j = {.op = ROW_ADD, .x = x, .y = y};
    run_rows((cpu_backend *)be, &j);
}

/* x and g may be views of heads with row strides of their own (backend.h): the rows
 * are the heads, each a row op. */
static void fast_sigmoid_mul(al_backend *be, al_tensor *x, const al_tensor *g) {
    rows_job j = {.op = ROW_SIGMOID, .x = x, .y = g};
    run_rows((cpu_backend *)be, &j);
}

/* ---- rope ------------------------------------------------------------------------------ */
/* The reference's arithmetic exactly (double angles, float rotation), with the powers
 * computed once per call and each token's cos/sin once for all its heads. A decoded
 * token's cos/sin are kept (cpu_rope_memo): every layer rotates q and k at the same
 * position, and their pow, cos and sin ran on the caller while the workers waited
 * (SmolLM2's decode: 0.6% of all samples; tg +2-4% without them). */

typedef struct rope_job {
    cpu_backend *cb;
    al_tensor *x;
    int n_head, head_dim, pos0;
    const al_rope *rp;
} rope_job;

/* cs[i], sn[i] of position pos; pw: the powers, [n_rot / 2]. */
static void rope_angles(const al_rope *rp, const double *pw, int pos, float *cs, float *sn) {
    const double p = (double)pos * rp->freq_scale;
    for (int i = 0; i < rp->n_rot / 2; i++) {
        double theta = p * pw[i];
        if (rp->freq_factors) theta /= rp->freq_factors[i];
        cs[i] = (float)cos(theta);
        sn[i] = (float)sin(theta);
    }
}

static void rope_powers(const al_rope *rp, double *pw) {
    for (int i = 0; i < rp->n_rot / 2; i++)
        pw[i] = pow(rp->freq_base, -2.0 * i / rp->n_rot);
}

static void rope_rotate(const rope_job *j, float *row, const float *cs, const float *sn) {
    const al_rope *rp = j->rp;
    const int half = rp->n_rot / 2;
    /* normal rope rotates adjacent pairs; neox rotates the two halves */
    const int step = rp->neox ? 1 : 2, off = rp->neox ? half : 1;
    for (int h = 0; h < j->n_head; h++) {
        float *hd = row + (int64_t)h * j->head_dim;
        for (int i = 0; i < half; i++) {
            float *a = hd + i * step, *b = a + off;
            const float x0 = *a, x1 = *b;
            *a = x0 * cs[i] - x1 * sn[i];
            *b = x0 * sn[i] + x1 * cs[i];
        }
    }
}

static void rope_part(void *arg, int ith, int nth) {
    const rope_job *j = arg;
    const int half = j->rp->n_rot / 2;
    double *pw = (double *)(j->cb->tls + (uint64_t)ith * j->cb->tls_bytes);
    float *cs = (float *)(pw + half), *sn = cs + half;
    rope_powers(j->rp, pw);
    const int64_t n_tok = j->x->ne[1];
    for (int64_t t = n_tok * ith / nth; t < n_tok * (ith + 1) / nth; t++) {
        rope_angles(j->rp, pw, j->pos0 + (int)t, cs, sn);
        rope_rotate(j, cpu_f32_row(j->x, t), cs, sn);
    }
}

/* The memo's entry for position pos under rp, computed where none matches; two entries,
 * as Gemma 3's local and global layers alternate two bases. The key holds the
 * factors' values, not their address, which a later model may reuse. */
static const cpu_rope_memo *rope_memo(cpu_backend *cb, int pos, const al_rope *rp) {
    const int half = rp->n_rot / 2;
    const size_t fb = rp->freq_factors ? (size_t)half * sizeof(float) : 0;
    for (int e = 0; e < CPU_ROPE_MEMO; e++) {
        const cpu_rope_memo *m = &cb->rope_memo[e];
        if (m->valid && m->pos == pos && m->n_rot == rp->n_rot &&
            m->freq_base == rp->freq_base && m->freq_scale == rp->freq_scale &&
            m->has_factors == (rp->freq_factors != NULL) &&
            (!fb || memcmp(m->factors, rp->freq_factors, fb) == 0))
            return m;
    }
    cpu_rope_memo *m = &cb->rope_memo[cb->rope_memo_next];
    cb->rope_memo_next = (cb->rope_memo_next + 1) % CPU_ROPE_MEMO;
    double pw[CPU_ROPE_MAX_HALF];
    rope_powers(rp, pw);
    *m = (cpu_rope_memo){.valid = true,
                         .pos = pos,
                         .n_rot = rp->n_rot,
                         .freq_base = rp->freq_base,
                         .freq_scale = rp->freq_scale,
                         .has_factors = rp->freq_factors != NULL};
    rope_angles(rp, pw, pos, m->cs, m->sn);
    if (fb) memcpy(m->factors, rp->freq_factors, fb);
    return m;
}

static void fast_rope(al_backend *be, al_tensor *x, int n_head, int head_dim, int pos0,
                      const al_rope *rope) {
    cpu_backend *cb = (cpu_backend *)be;
    rope_job j = {
        .cb = cb, .x = x, .n_head = n_head, .head_dim = head_dim, .pos0 = pos0, .rp = rope};
    pthread_mutex_lock(&cb->lock);
    AL_ASSERT((uint64_t)rope->n_rot * 8 <= cb->tls_bytes);
    if (x->ne[1] == 1 && rope->n_rot / 2 <= CPU_ROPE_MAX_HALF) {
        const cpu_rope_memo *m = rope_memo(cb, pos0, rope);
        rope_rotate(&j, cpu_f32_row(x, 0), m->cs, m->sn);
    } else if (x->ne[1] < 4) {
        rope_part(&j, 0, 1);
    } else {
        pool_run(cb->pool, rope_part, &j);
    }
    pthread_mutex_unlock(&cb->lock);
}

/* ---- the backend object -------------------------------------------------------------- */

/* ---- weights in the x16 layout ------------------------------------------------------ */

typedef struct x16_job {
    cpu_x16_pack_fn pack;
    uint32_t type;
    const uint8_t *src;
    uint8_t *dst;
    uint64_t row_bytes;
    int64_t n_blk, n_groups;
} x16_job;

static void x16_part(void *arg, int ith, int nth) {
    const x16_job *j = arg;
    j->pack(j->type, j->src, j->dst, j->row_bytes, j->n_blk, j->n_groups * ith / nth,
            j->n_groups * (ith + 1) / nth);
}

/* The weight's bytes lie in the model file's read-only mapping (backend.h), so once
 * they are rewritten the mapping's pages can go: the file's pages stay in the page
 * cache, and the process no longer counts them twice. */
static al_status cpu_weight_pack(al_backend *be, al_tensor *w, int64_t view_rows) {
    cpu_backend *cb = (cpu_backend *)be;
    if (!cb->x16 || !cb->k || w->layout != AL_LAYOUT_ROWS || !(cb->k->x16_types >> w->type & 1) ||
        !cpu_x16_fits(w->type, w->ne[1], view_rows))
        return AL_OK;
    const cpu_qtype *qt = cpu_qtype_get(w->type);
    AL_ASSERT(qt && 16 % cb->k->rows == 0 && w->ne[0] % qt->block == 0);
    const uint64_t n_bytes = w->row_bytes * (uint64_t)w->ne[1];
    const size_t huge = 2u << 20; /* a transparent huge page, where the kernel gives them */
    void **list = al_realloc(cb->x16_mem, (size_t)(cb->n_x16 + 1) * sizeof *list);
    if (!list) return al_error(AL_ERR_NOMEM, "out of memory for the list of packed weights");
    cb->x16_mem = list;
    uint8_t *dst = al_aligned_alloc(huge, (size_t)((n_bytes + huge - 1) & ~(uint64_t)(huge - 1)));
    if (!dst)
        return al_error(AL_ERR_NOMEM, "out of memory: %.1f MiB for a weight in the x16 layout "
                        "(cpu.x16 = 0 reads the weights in place)", n_bytes / 1048576.0);
    if (n_bytes >= huge) madvise(dst, (size_t)n_bytes, MADV_HUGEPAGE);
    x16_job j = {.pack = cb->k->x16_pack ? cb->k->x16_pack : cpu_x16_pack,
                 .type = w->type, .src = cpu_raw_row(w, 0), .dst = dst, .row_bytes = w->row_bytes,
                 .n_blk = w->ne[0] / qt->block, .n_groups = w->ne[1] / 16};
    pthread_mutex_lock(&cb->lock);
    pool_run(cb->pool, x16_part, &j);
    pthread_mutex_unlock(&cb->lock);
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)j.src + page - 1) & ~(page - 1);
    const uintptr_t hi = ((uintptr_t)j.src + n_bytes) & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    cb->x16_mem[cb->n_x16++] = dst;
    w->data = dst;
    w->offset = 0;
    w->layout = AL_LAYOUT_X16;
    be->n_bytes_copied += n_bytes;
    return AL_OK;
}

void cpu_backend_set_x16(al_backend *be, bool on) {
    ((cpu_backend *)be)->x16 = on;
}

void cpu_backend_set_moe_fuse(al_backend *be, bool on) {
    cpu_backend *cb = (cpu_backend *)be;
    pthread_mutex_lock(&cb->lock);
    cb->moe_fuse = on;
    pthread_mutex_unlock(&cb->lock);
}

void cpu_backend_set_fuse(al_backend *be, bool on) {
    cpu_backend *cb = (cpu_backend *)be;
    pthread_mutex_lock(&cb->lock);
    cb->fuse = on;
    pthread_mutex_unlock(&cb->lock);
}

static void cpu_destroy(al_backend *be) {
    cpu_backend *cb = (cpu_backend *)be;
    if (!cb) return;
    for (int i = 0; i < cb->n_x16; i++) al_aligned_free(cb->x16_mem[i]);
    al_free(cb->x16_mem);
    pool_destroy(cb->pool);
    pthread_mutex_destroy(&cb->lock);
    al_aligned_free(cb->work);
    al_aligned_free(cb->act);
    al_aligned_free(cb->shares);
    al_aligned_free(cb->tls);
    al_aligned_free(cb->kv_copy);
    al_aligned_free(cb->attn_part);
    al_free(cb->moe_job);
    al_free(cb);
}

static const al_backend_ops cpu_ref_ops = {
    .name = "cpu",
    .caps = AL_CAP_HOST_MEMORY,
    .kv_types = CPU_KV_TYPES,
    .destroy = cpu_destroy,
    .tensor_alloc = cpu_tensor_alloc,
    .tensor_free = cpu_tensor_free,
    .tensor_read = cpu_tensor_read,
    .tensor_write = cpu_tensor_write,
    .tensor_host = cpu_tensor_host,
    .tensor_import = cpu_tensor_import,
    .reserve = cpu_reserve,
    .get_rows = ref_get_rows,
    .rms_norm = ref_rms_norm,
    .matmul = ref_matmul,
    .rope = ref_rope,
    .attention = ref_attention,
    .silu_mul = ref_silu_mul,
    .gelu_mul = ref_gelu_mul,
    .swiglu_oai = ref_swiglu_oai,
    .scale = ref_scale,
    .add = ref_add,
    .copy = ref_copy,
    .sigmoid_mul = ref_sigmoid_mul,
    .ssm_conv = ref_ssm_conv,
    .delta_net = ref_delta_net,
    .add_rows = ref_add_rows,
    .matmul_add = ref_matmul_add,
    .matmul_glu = ref_matmul_glu,
    .rope_qk = ref_rope_qk,
    .moe_ffn = ref_moe_ffn,
};

static const al_backend_ops cpu_fast_ops = {
    .name = "cpu",
    .caps = AL_CAP_HOST_MEMORY,
    .kv_types = CPU_KV_TYPES,
    .destroy = cpu_destroy,
    .tensor_alloc = cpu_tensor_alloc,
    .tensor_free = cpu_tensor_free,
    .tensor_read = cpu_tensor_read,
    .tensor_write = cpu_tensor_write,
    .tensor_host = cpu_tensor_host,
    .tensor_import = cpu_tensor_import,
    .reserve = cpu_reserve,
    .get_rows = ref_get_rows,
    .rms_norm = fast_rms_norm,
    .matmul = fast_matmul,
    .rope = fast_rope,
    .attention = fast_attention,
    .silu_mul = fast_silu_mul,
    .gelu_mul = fast_gelu_mul,
    .swiglu_oai = fast_swiglu_oai,
    .scale = fast_scale,
    .add = fast_add,
    .copy = ref_copy, /* a few small rows: memory-light */
    .sigmoid_mul = fast_sigmoid_mul,
    .ssm_conv = fast_ssm_conv,
    .delta_net = fast_delta_net,
    .add_rows = ref_add_rows, /* a few rows: memory-light, not worth threads */
    .weight_pack = cpu_weight_pack,
    /* a few tokens' matmuls of one input in one pool run (fuse.c); the norms and
     * rope_qk gain nothing fused: the plain ops in turn (backend.c) */
    .matmul_add = fast_matmul_add,
    .matmul_glu = fast_matmul_glu,
    .matmul_multi = fast_matmul_multi,
    .moe_ffn = fast_moe_ffn,
};

/* "cpu ISA[+amx] MODE" */
static void set_desc(cpu_backend *cb, cpu_isa isa) {
    const char *mode = cb->act_passes == CPU_ACT_Q8 ? " q8" : " q8x2";
    snprintf(cb->base.desc, sizeof cb->base.desc, "cpu %s%s%s", cpu_isa_name(isa),
             cb->amx ? "+amx" : "", cb->k ? mode : "");
}

/* Why a backend cannot run its batches on AMX, or NULL. */
static const char *amx_obstacle(const cpu_backend *cb) {
    return cb->k != &cpu_kernels_avx512 ? "the backend does not run the AVX-512 kernels"
                                        : cpu_amx_unavailable();
}

al_status cpu_backend_set_amx(al_backend *be, bool on) {
    if (be->ops != &cpu_fast_ops && be->ops != &cpu_ref_ops)
        return al_error(AL_ERR_ARG, "AMX: %s is not a CPU backend", be->desc);
    cpu_backend *cb = (cpu_backend *)be;
    const char *why = on ? amx_obstacle(cb) : NULL;
    if (why) return al_error(AL_ERR_UNSUPPORTED, "AMX: %s", why);
    pthread_mutex_lock(&cb->lock);
    cb->amx = on;
    set_desc(cb, cb->k ? cb->k->isa : CPU_ISA_REF);
    pthread_mutex_unlock(&cb->lock);
    return AL_OK;
}

al_status cpu_backend_create_isa(int n_threads, cpu_isa isa, cpu_act_mode act,
                                al_backend **out) {
    *out = NULL;
    if (isa >= CPU_ISA_COUNT || !cpu_isa_available(isa))
        return al_error(AL_ERR_UNSUPPORTED, "this CPU cannot run the %s kernels",
                        cpu_isa_name(isa));
    if (act != CPU_ACT_Q8 && act != CPU_ACT_Q8X2)
        return al_error(AL_ERR_ARG, "unknown activation mode %d", (int)act);
    cpu_backend *cb = al_calloc(1, sizeof *cb);
    if (!cb) return al_error(AL_ERR_NOMEM, "out of memory creating the CPU backend");
    cb->k = kernels_for(isa);
    /* the fast moe_ffn's plan: too large for the stack of any thread that decodes */
    if (cb->k && !(cb->moe_job = al_calloc(1, (size_t)fast_moe_job_bytes()))) {
        al_free(cb);
        return al_error(AL_ERR_NOMEM, "out of memory creating the CPU backend");
    }
    cb->act_passes = (int)act;
    cb->x16 = true;
    cb->x16_pf = cpu_is_intel();
    cb->moe_fuse = true;
    cb->fuse = true;
    cb->base.ops = cb->k ? &cpu_fast_ops : &cpu_ref_ops;
    set_desc(cb, isa);
    pthread_mutex_init(&cb->lock, NULL);
    al_status st = pool_create(n_threads, &cb->pool);
    if (st != AL_OK) {
        pthread_mutex_destroy(&cb->lock);
        al_free(cb->moe_job);
        al_free(cb);
        return st;
    }
    cb->n_threads = pool_size(cb->pool);
    if (cb->k && !(cb->shares = al_aligned_alloc(64, (size_t)cb->n_threads * sizeof(mm_share)))) {
        cpu_destroy(&cb->base);
        return al_error(AL_ERR_NOMEM, "out of memory creating the CPU backend");
    }
    *out = &cb->base;
    return AL_OK;
}

/* cpu.amx: -1 (the default) runs batches on AMX tiles where the backend and the CPU
 * can; 0 keeps them off; 1 where AMX cannot run says why. */
static void amx_from_settings(cpu_backend *cb, int amx) {
    if (amx == 0) return;
    const char *why = amx_obstacle(cb);
    if (!why)
        cpu_backend_set_amx(&cb->base, true);
    else if (amx == 1)
        al_log(AL_LOG_WARN, "cpu.amx = 1: %s; prompts run without AMX", why);
}

/* The defaults of every CPU setting: what a NULL settings pointer means. */
static const al_cpu_settings k_cpu_defaults = {
    .amx = -1, .x16 = -1, .x16_prefetch = -1, .moe_fuse = -1, .fuse = -1};

al_status cpu_settings_check(const al_cpu_settings *s) {
    if (!s) return AL_OK;
    if (isa_by_name(s->isa) < 0)
        return al_error(AL_ERR_ARG, "cpu.isa '%s' is not one of best, avx512, avx2, scalar, ref",
                        s->isa);
    if (act_by_name(s->act, true) < 0)
        return al_error(AL_ERR_ARG, "cpu.act '%s' is not one of q8, q8x2, precise", s->act);
    const struct {
        const char *name;
        int v;
    } sw[] = {{"amx", s->amx}, {"x16", s->x16}, {"x16_prefetch", s->x16_prefetch},
              {"moe_fuse", s->moe_fuse}, {"fuse", s->fuse}};
    for (size_t i = 0; i < sizeof sw / sizeof *sw; i++)
        if (sw[i].v < -1 || sw[i].v > 1)
            return al_error(AL_ERR_ARG, "cpu.%s = %d is not one of -1 (the default), 0, 1",
                            sw[i].name, sw[i].v);
    return AL_OK;
}

al_status cpu_backend_create(int n_threads, const char *act, const al_cpu_settings *s,
                             al_backend **out) {
    *out = NULL;
    if (!s) s = &k_cpu_defaults;
    al_status st = cpu_settings_check(s);
    if (st != AL_OK) return st;
    const int mode = act ? act_by_name(act, false) : act_by_name(s->act, true);
    if (mode < 0)
        return al_error(AL_ERR_ARG, "backend 'cpu:%s': the activation mode is q8, q8x2 or precise", act);
    st = cpu_backend_create_isa(n_threads, isa_from_settings(s->isa), (cpu_act_mode)mode, out);
    if (st != AL_OK) return st;
    amx_from_settings((cpu_backend *)*out, s->amx);
    if (s->x16 == 0) cpu_backend_set_x16(*out, false);
    if (s->x16_prefetch >= 0) ((cpu_backend *)*out)->x16_pf = s->x16_prefetch == 1;
    if (s->moe_fuse == 0) cpu_backend_set_moe_fuse(*out, false);
    if (s->fuse == 0) cpu_backend_set_fuse(*out, false);
    return AL_OK;
}

/* ---- the descriptor (registry.c) ------------------------------------------------------ */

static void cpu_summary(char *buf, size_t size) {
    snprintf(buf, size, "cpu (%s)", cpu_isa_name(cpu_isa_best()));
}

static int cpu_n_devices(void) { return 1; }

static int cpu_describe(int dev, char *buf, size_t size) {
    if (dev != 0) return -1;
    snprintf(buf, size, "cpu %s", cpu_isa_name(cpu_isa_best()));
    return 0;
}

static al_status cpu_check(const al_model_params *p) { return cpu_settings_check(&p->cpu); }

/* "cpu:MODE" is the activation mode; there is one CPU device ("cpu:0" is "cpu"). */
static al_status cpu_create(int dev, const char *variant, int n_threads, const al_model_params *p,
                            al_backend **out) {
    *out = NULL;
    if (dev > 0)
        return al_error(AL_ERR_ARG, "backend 'cpu:%d': there is one CPU backend (cpu, cpu:q8, "
                        "cpu:precise)", dev);
    return cpu_backend_create(n_threads, variant, &p->cpu, out);
}

static const char *const cpu_device_names[] = {"cpu"};

const al_backend_desc cpu_backend_desc = {
    .name = "cpu",
    .specs = "cpu, cpu:q8, cpu:precise",
    .caps = AL_CAP_HOST_MEMORY,
    .summary = cpu_summary,
    .n_devices = cpu_n_devices,
    .max_devices = 1,
    .device_names = cpu_device_names,
    .describe = cpu_describe,
    .check = cpu_check,
    .create = cpu_create,
};
