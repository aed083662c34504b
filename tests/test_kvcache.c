/* test_kvcache.c: attention over typed KV caches (f16, q8_0, q4_0; heads rotated by the
 * Hadamard transform or not) on every CPU instruction set this machine runs.
 *
 * Three things are held, each able to fail on its own:
 *   - the bytes: after a run, every cache row holds quant.h's quantization of the
 *     position's key and value heads, rotated first where the layout says so;
 *   - the arithmetic: a typed cache's attention is, bit for bit, the same backend's f32
 *     attention over the values those bytes decode to, with the queries rotated before
 *     and the output rotated back (the rotation is exact algebra, not an approximation,
 *     so nothing but the quantization may change a result); batches, pieces and
 *     thread counts change no bit, and the fast kernels agree with the reference ops;
 *   - the use: against the unquantized attention, the error stays within each type's
 *     bar, and on keys with outlier channels the rotation lowers it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/ops.h"
#include "format/quant.h"
#include "format/quantize.h"
#include "kernel_check.h"
#include "test.h"

typedef struct kv_case {
    int n_head, n_head_kv, head_dim, n_pos; /* positions in all */
    int n_prompt;                           /* the first batch; then pieces */
    int window, cap;                        /* cap 0: n_pos rows, no ring */
} kv_case;

static const kv_case g_cases[] = {
    {4, 2, 64, 70, 40, 0, 0},     /* a prompt, then decode steps */
    {9, 3, 64, 300, 260, 0, 0},   /* SmolLM2's heads, ranges of keys while decoding */
    {16, 4, 64, 150, 140, 0, 0},  /* many tiles per kv head: the per-thread copy */
    {8, 1, 128, 90, 33, 0, 0},    /* GQA 8, wider heads */
    {4, 1, 256, 50, 20, 0, 0},    /* Gemma 3's heads */
    {6, 2, 96, 120, 16, 32, 48},  /* a sliding window on a ring that wraps */
    {3, 1, 32, 45, 1, 0, 0},      /* one block per head, decode from the start */
};

static const uint32_t g_types[] = {AL_TYPE_F16, AL_TYPE_Q8_0, AL_TYPE_Q4_0};

/* What a typed cache row's head holds once decoded: x's head, rotated where rot, then
 * quantized and dequantized (f32: x itself). */
static void head_roundtrip(uint32_t type, bool rot, const float *x, int hd, float *out) {
    memcpy(out, x, (size_t)hd * sizeof(float));
    if (type == AL_TYPE_F32) return;
    const int n = al_hadamard_n(hd);
    if (rot)
        for (int i = 0; i < hd; i += n) al_hadamard(out + i, n);
    uint8_t blocks[2048];
    CHECK(quant_quantize_row(type, out, blocks, hd) == AL_OK);
    quant_dequantize(type, blocks, out, hd);
}

/* All n rows of x, head by head, through head_roundtrip. */
static float *rows_roundtrip(uint32_t type, bool rot, const float *x, int n, int n_heads, int hd) {
    float *out = malloc((size_t)n * n_heads * hd * sizeof(float));
    for (int64_t i = 0; i < (int64_t)n * n_heads; i++)
        head_roundtrip(type, rot, x + i * hd, hd, out + i * hd);
    return out;
}

/* A cache of cap rows of type, as context.c describes one (backend.h kv_types). */
static al_tensor cache_make(uint32_t type, bool rot, int64_t kvd, int64_t cap) {
    const uint64_t row = quant_row_bytes(type, kvd);
    return (al_tensor){.type = type, .ne = {kvd, cap}, .data = calloc(cap, row),
                       .row_bytes = row,
                       .layout = rot && (type == AL_TYPE_Q8_0 || type == AL_TYPE_Q4_0)
                                     ? AL_LAYOUT_HADAMARD : AL_LAYOUT_ROWS};
}

typedef struct kv_run {
    uint32_t tk, tv;
    bool rot;
    bool greedy; /* pieces of 1, 3 and 2 tokens after the prompt, else one batch */
} kv_run;

/* Attends every position of c over caches of r's types: the prompt in one call, the
 * rest in pieces; out gets every position's output. Returns the caches (to inspect),
 * which the caller frees. */
static void run_case(al_backend *be, const kv_case *c, const kv_run *r, const float *q,
                     const float *k, const float *v, float *out, al_tensor *kc, al_tensor *vc) {
    const int64_t qd = (int64_t)c->n_head * c->head_dim, kvd = (int64_t)c->n_head_kv * c->head_dim;
    const int cap = c->cap ? c->cap : c->n_pos;
    *kc = cache_make(r->tk, r->rot, kvd, cap);
    *vc = cache_make(r->tv, r->rot, kvd, cap);
    float *qc = malloc((size_t)(c->n_pos * qd) * sizeof(float)); /* a rotation may use it */
    memcpy(qc, q, (size_t)(c->n_pos * qd) * sizeof(float));
    static const int pieces[] = {1, 3, 2};
    for (int pos = 0, i = 0; pos < c->n_pos; i++) {
        int n = pos == 0 ? c->n_prompt : r->greedy ? pieces[i % 3] : c->n_pos - pos;
        if (n > c->n_pos - pos) n = c->n_pos - pos;
        if (c->cap && n > c->cap - c->window + 1) n = c->cap - c->window + 1; /* the ring */
        al_tensor qt = test_f32(qc + pos * qd, qd, n), ot = test_f32(out + pos * qd, qd, n);
        al_tensor kt = test_f32((float *)k + pos * kvd, kvd, n);
        al_tensor vt = test_f32((float *)v + pos * kvd, kvd, n);
        al_attn_shape s = {.n_head = c->n_head, .n_head_kv = c->n_head_kv,
                           .head_dim = c->head_dim, .n_past = pos, .n_tokens = n,
                           .window = c->window};
        be->ops->attention(be, &qt, &kt, &vt, kc, vc, &s, &ot);
        pos += n;
    }
    free(qc);
}

/* Whether cache row p % cap holds position p's heads of x as quant.h writes them, for
 * the positions still in the ring. */
static bool cache_bytes_ok(const al_tensor *cache, const kv_case *c, const float *x) {
    const int hd = c->head_dim, cap = (int)cache->ne[1];
    const uint64_t hb = quant_row_bytes(cache->type, hd);
    float buf[256];
    uint8_t want[2048];
    for (int p = c->n_pos > cap ? c->n_pos - cap : 0; p < c->n_pos; p++)
        for (int h = 0; h < c->n_head_kv; h++) {
            memcpy(buf, x + ((int64_t)p * c->n_head_kv + h) * hd, (size_t)hd * sizeof(float));
            if (cache->layout == AL_LAYOUT_HADAMARD)
                for (int i = 0; i < hd; i += al_hadamard_n(hd)) al_hadamard(buf + i, al_hadamard_n(hd));
            if (quant_quantize_row(cache->type, buf, want, hd) != AL_OK) return false;
            const uint8_t *got = (const uint8_t *)cache->data + (p % cap) * cache->row_bytes + h * hb;
            if (memcmp(got, want, hb)) return false;
        }
    return true;
}

/* The f32 attention over what the typed caches of r decode to: the queries rotated
 * where the keys are, the output rotated back where the values are. */
static void run_decoded(al_backend *be, const kv_case *c, const kv_run *r, const float *q,
                        const float *k, const float *v, float *out) {
    const int64_t qd = (int64_t)c->n_head * c->head_dim;
    const bool rk = r->rot && r->tk != AL_TYPE_F16, rv = r->rot && r->tv != AL_TYPE_F16;
    /* (context.c rotates the quantized types only: f16 rounds each value alone) */
    float *kd = rows_roundtrip(r->tk, rk, k, c->n_pos, c->n_head_kv, c->head_dim);
    float *vd = rows_roundtrip(r->tv, rv, v, c->n_pos, c->n_head_kv, c->head_dim);
    float *qr = malloc((size_t)(c->n_pos * qd) * sizeof(float));
    memcpy(qr, q, (size_t)(c->n_pos * qd) * sizeof(float));
    al_tensor qt = test_f32(qr, qd, c->n_pos), ot = test_f32(out, qd, c->n_pos);
    if (rk) cpu_rotate_heads(&qt, 0, c->n_pos, c->n_head, c->head_dim);
    kv_run plain = *r;
    plain.tk = plain.tv = AL_TYPE_F32;
    al_tensor kc, vc;
    run_case(be, c, &plain, qr, kd, vd, out, &kc, &vc);
    if (rv) cpu_rotate_heads(&ot, 0, c->n_pos, c->n_head, c->head_dim);
    free(kc.data), free(vc.data), free(kd), free(vd), free(qr);
}

typedef struct kv_data {
    float *q, *k, *v;
    int64_t n_q, n_kv;
} kv_data;

/* Random queries, keys and values; outliers: a few key and value channels 30 times
 * larger in every position, as trained models have them. */
static kv_data data_make(const kv_case *c, bool outliers) {
    kv_data d = {.n_q = (int64_t)c->n_pos * c->n_head * c->head_dim,
                 .n_kv = (int64_t)c->n_pos * c->n_head_kv * c->head_dim};
    d.q = test_floats(d.n_q, 1.0f), d.k = test_floats(d.n_kv, 1.0f), d.v = test_floats(d.n_kv, 1.0f);
    for (int64_t i = 0; outliers && i < d.n_kv; i++)
        if (i % c->head_dim == 5 || i % c->head_dim == c->head_dim / 2 + 3) d.k[i] *= 30.0f, d.v[i] *= 30.0f;
    return d;
}

static void data_free(kv_data *d) { free(d->q), free(d->k), free(d->v); }

/* Per ISA, type pair and rotation: the bytes, the decoded f32 attention's bits, the
 * batch split and thread count, and the reference ops. */
static void test_typed_exact(void) {
    for (int isa = CPU_ISA_REF; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) continue;
        int n_checked = 0;
        for (size_t ci = 0; ci < sizeof g_cases / sizeof *g_cases; ci++) {
#if defined(__SANITIZE_ADDRESS__)
            /* under the sanitizers (each run ~20x slower): the ranges of keys, the widest
             * heads and the ring, every path of the staging and the writes */
            if (ci != 1 && ci != 4 && ci != 5) continue;
#endif
            const kv_case *c = &g_cases[ci];
            kv_data d = data_make(c, false);
            const int64_t qd = (int64_t)c->n_head * c->head_dim;
            al_backend *b3 = backend((cpu_isa)isa, 3, qd, c->n_pos);
            al_backend *b1 = backend((cpu_isa)isa, 1, qd, c->n_pos);
            al_backend *ref = backend(CPU_ISA_REF, 1, qd, c->n_pos);
            float *o = malloc(d.n_q * 4), *o_dec = malloc(d.n_q * 4), *o_greedy = malloc(d.n_q * 4);
            float *o_ref = malloc(d.n_q * 4);
            for (int ti = 0; ti < 3 * 3 * 2; ti++) {
                /* every K type with every V type, rotated and not */
                const kv_run r = {.tk = g_types[ti % 3], .tv = g_types[ti / 3 % 3], .rot = ti / 9};
                if (r.tk != r.tv && ci % 2) continue; /* mixed pairs on half the shapes */
                al_tensor kc, vc, kc1, vc1;
                run_case(b3, c, &r, d.q, d.k, d.v, o, &kc, &vc);
                const bool bytes = cache_bytes_ok(&kc, c, d.k) && cache_bytes_ok(&vc, c, d.v);
                run_decoded(b3, c, &r, d.q, d.k, d.v, o_dec);
                kv_run rg = r;
                rg.greedy = true;
                run_case(b1, c, &rg, d.q, d.k, d.v, o_greedy, &kc1, &vc1);
                free(kc1.data), free(vc1.data);
                const bool same = !memcmp(o, o_dec, d.n_q * 4);
                const bool split = !memcmp(o, o_greedy, d.n_q * 4);
                double e_ref = 0;
                if (isa != CPU_ISA_REF) {
                    run_case(ref, c, &r, d.q, d.k, d.v, o_ref, &kc1, &vc1);
                    free(kc1.data), free(vc1.data);
                    e_ref = test_nmse(o, o_ref, d.n_q);
                }
                CHECK_MSG(bytes && same && split && e_ref <= 1e-10,
                          "%s heads %d/%d dim %d window %d: k %s v %s%s:%s%s%s NMSE to ref %.1e",
                          cpu_isa_name((cpu_isa)isa), c->n_head,
                          c->n_head_kv, c->head_dim, c->window, quant_type_name(r.tk),
                          quant_type_name(r.tv), r.rot ? " rotated" : "",
                          bytes ? "" : " cache bytes differ from quant.h's;",
                          same ? "" : " not the f32 attention over the decoded cache;",
                          split ? "" : " pieces or threads changed bits;", e_ref);
                free(kc.data), free(vc.data);
                n_checked++;
            }
            b3->ops->destroy(b3), b1->ops->destroy(b1), ref->ops->destroy(ref);
            free(o), free(o_dec), free(o_greedy), free(o_ref);
            data_free(&d);
        }
        printf("     %-6s typed caches: %d runs, bit for bit the decoded f32 attention\n",
               cpu_isa_name((cpu_isa)isa), n_checked);
    }
}

/* The fastest instruction set this machine runs. */
static cpu_isa best_isa(void) {
    int isa = CPU_ISA_COUNT - 1;
    while (!cpu_isa_available((cpu_isa)isa)) isa--;
    return (cpu_isa)isa;
}

/* NMSE against the unquantized attention, worst over the shapes, of one type for keys
 * and values on the best ISA. */
static double type_error(uint32_t type, bool rot, bool outliers) {
    double worst = 0;
    for (size_t ci = 0; ci < sizeof g_cases / sizeof *g_cases; ci++) {
        const kv_case *c = &g_cases[ci];
        kv_data d = data_make(c, outliers);
        const int64_t qd = (int64_t)c->n_head * c->head_dim;
        al_backend *be = backend(best_isa(), 2, qd, c->n_pos);
        float *o = malloc(d.n_q * 4), *o_f32 = malloc(d.n_q * 4);
        const kv_run r = {.tk = type, .tv = type, .rot = rot}, f = {AL_TYPE_F32, AL_TYPE_F32, false, false};
        al_tensor kc, vc;
        run_case(be, c, &r, d.q, d.k, d.v, o, &kc, &vc);
        free(kc.data), free(vc.data);
        run_case(be, c, &f, d.q, d.k, d.v, o_f32, &kc, &vc);
        free(kc.data), free(vc.data);
        const double e = test_nmse(o, o_f32, d.n_q);
        if (e > worst) worst = e;
        be->ops->destroy(be), free(o), free(o_f32), data_free(&d);
    }
    return worst;
}

/* Each type within its bar of the f32 attention; with outlier channels, the rotation
 * lowers q8_0's and q4_0's error. */
static void test_typed_error(void) {
#if defined(__SANITIZE_ADDRESS__)
    /* numbers, not memory: the sanitizers' run has test_typed_exact's every path */
    TEST_SKIP("the error bars are measured without the sanitizers");
    return;
#endif
    static const struct { uint32_t type; double bar; } bars[] = {
        {AL_TYPE_F16, 1e-6}, {AL_TYPE_Q8_0, 1e-4}, {AL_TYPE_Q4_0, 2e-2}};
    for (size_t i = 0; i < sizeof bars / sizeof *bars; i++) {
        const double plain = type_error(bars[i].type, false, false);
        const double rot = type_error(bars[i].type, true, false);
        CHECK_MSG(plain <= bars[i].bar && rot <= bars[i].bar, "%s: NMSE %.2e, rotated %.2e > %.0e",
                  quant_type_name(bars[i].type), plain, rot, bars[i].bar);
        printf("     %-5s NMSE to the f32 attention %.2e, rotated %.2e", quant_type_name(bars[i].type),
               plain, rot);
        if (bars[i].type == AL_TYPE_F16) {
            printf("\n");
            continue;
        }
        const double po = type_error(bars[i].type, false, true), ro = type_error(bars[i].type, true, true);
        CHECK_MSG(ro < 0.5 * po, "%s with outlier channels: rotated NMSE %.2e, not below half the "
                  "unrotated %.2e", quant_type_name(bars[i].type), ro, po);
        printf("; with outliers %.2e, rotated %.2e\n", po, ro);
    }
}

/* The butterflies in their textbook order, stage by stage over the whole vector: the
 * order backend.h defines, which al_hadamard's blocking must keep bit for bit. */
static void hadamard_plain(float *x, int n) {
    for (int len = 1; len < n; len *= 2)
        for (int i = 0; i < n; i += 2 * len)
            for (int j = i; j < i + len; j++) {
                const float a = x[j], b = x[j + len];
                x[j] = a + b, x[j + len] = a - b;
            }
    for (int i = 0; i < n; i++) x[i] *= 1.0f / sqrtf((float)n);
}

/* al_hadamard gives the plain order's bits, keeps a vector's length and is its own
 * inverse. */
static void test_hadamard(void) {
    static const int sizes[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        const int n = sizes[i];
        float *x = test_floats(n, 3.0f), y[256], z[256];
        memcpy(y, x, (size_t)n * sizeof(float));
        memcpy(z, x, (size_t)n * sizeof(float));
        al_hadamard(y, n);
        hadamard_plain(z, n);
        CHECK_MSG(!memcmp(y, z, (size_t)n * sizeof(float)), "n %d: not the plain order's bits", n);
        memcpy(y, x, (size_t)n * sizeof(float));
        double n0 = 0, n1 = 0;
        al_hadamard(y, n);
        for (int j = 0; j < n; j++) n0 += (double)x[j] * x[j], n1 += (double)y[j] * y[j];
        al_hadamard(y, n);
        CHECK_MSG(fabs(n1 - n0) <= 1e-5 * n0 && test_nmse(y, x, n) <= 1e-12,
                  "n %d: |x|^2 %g, |Hx|^2 %g, NMSE of H H x %.1e", n, n0, n1, test_nmse(y, x, n));
        free(x);
    }
    CHECK(al_hadamard_n(64) == 64 && al_hadamard_n(96) == 32 && al_hadamard_n(80) == 16 &&
          al_hadamard_n(512) == 256 && al_hadamard_n(7) == 1);
}

int main(void) {
    TEST_RUN(test_hadamard);
    TEST_RUN(test_typed_exact);
    TEST_RUN(test_typed_error);
    return test_finish();
}
