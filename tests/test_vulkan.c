/* test_vulkan.c: every op of the Vulkan backend against the CPU reference op.
 *
 * Both backends are driven only through their op tables (backend.h). The CPU backend
 * is created with cpu.isa "ref", so the oracle is the plain-C reference. Inputs are
 * random and of awkward sizes (rows that are not multiples of the workgroup, tile or
 * alignment; views at row offsets); every weight type is covered with random blocks
 * whose fp16 scales are kept finite. Agreement is NMSE = sum (a-b)^2 / sum b^2:
 * <= 1e-6 for f32 ops, <= 5e-4 for matmuls of quantized weights. Where this branch's
 * CPU backend has no reference (gelu_mul, swiglu_oai, scale, attention over ring
 * caches with a window, a scale and sinks), the expected values are computed here in
 * double precision.
 *
 * The suite runs in three configurations of the one Vulkan device: the defaults
 * (weights imported, subgroup arithmetic), then as if the device were discrete
 * (staging uploads, unmapped activations, staged reads) without subgroup arithmetic,
 * then with weights copied into host-visible memory; the matmuls, plain and fused,
 * also run on the GPUs' shaders (a CPU device otherwise takes matmul_rows.comp).
 * The fused ops (matmul_add, matmul_glu, rope_qk) are compared with the reference
 * op, which must equal the plain reference ops bit for bit; matmul_multi,
 * norm_matmul_glu and rope_qk_rows, which the CPU does not fuse, with the reference's
 * plain ops; and a decode step (and an al_eval_multi step) must
 * take the dispatches fusion leaves and the logits of the plain ops. The Khronos validation layer is
 * on (al_set_vulkan_instance) when it is installed, and must report nothing.
 * Two threads, each with its own context on one shared model, evaluate at once and
 * must get the logits each gets alone (every context has its own command stream).
 * Failure paths: no loader, a device index that does not exist, an unsupported
 * weight type, "auto" with only a software device, a fence timeout.
 *
 * Without a Vulkan build or device, the program prints why and skips.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "anyllm.h"
#include "backend.h"
#include "registry.h"
#include "model/model.h"
#include "format/quant.h"
#include "test.h"
#include "util.h"

#ifdef AL_HAVE_VULKAN
#include "vulkan/vk.h" /* VK_SEQ_ROWS */
#include "vulkan/vk_backend.h"

#include "vk_pairs.h" /* g_cpu, g_vk, pair, random weights */

/* The configuration under test: the Vulkan settings of create_vk's backends and of the
 * models loaded meanwhile, and whether the validation layer is on (main sets them). */
static al_vulkan_settings g_vs = {.timeout_ms = -1};
static bool g_validation;

/* The parameters of a model on backend: the configuration's Vulkan settings, and the
 * CPU's reference ops, the oracle (a CPU model, or "auto" falling back to the CPU). */
static al_model_params test_params(const char *backend) {
    al_model_params mp = al_model_default_params();
    mp.backend = backend;
    mp.cpu.isa = "ref";
    mp.vulkan = g_vs;
    return mp;
}

/* ---- the ops ------------------------------------------------------------------------------- */

static void test_get_rows(void) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        uint32_t type = g_types[ti];
        int64_t cols = awkward_cols(type), rows = 13;
        pair table, out;
        weight_pair(type, cols, rows, random_weight(type, cols, rows), &table);
        act_pair(cols, 9, NULL, &out);
        int32_t ids[7] = {12, 0, 5, 5, 7, 1, 12};
        /* into rows 2.. of out: a view at an offset */
        al_tensor oc = al_tensor_rows(&out.cpu, 2, 7), ov = al_tensor_rows(&out.vk, 2, 7);
        g_cpu->ops->get_rows(g_cpu, &table.cpu, ids, 7, &oc);
        g_vk->ops->get_rows(g_vk, &table.vk, ids, 7, &ov);
        double e = compare(&out);
        CHECK_MSG(e <= 1e-6, "get_rows %s: NMSE %g", quant_type_name(type), e);
        printf("  get_rows %-5s NMSE %.2e\n", quant_type_name(type), e);
        free_pair(&out);
    }
}

static void test_rms_norm(void) {
    int64_t sizes[][2] = {{203, 5}, {1000, 3}, {4096, 2}};
    for (int k = 0; k < 3; k++) {
        int64_t cols = sizes[k][0], rows = sizes[k][1];
        float *xv = random_floats((size_t)(cols * rows), 3.0f);
        float *wv = random_floats((size_t)cols, 1.0f);
        pair x, w, out;
        act_pair(cols, rows, xv, &x);
        weight_pair(AL_TYPE_F32, cols, 1, memcpy(keep_alloc((size_t)cols * 4), wv, (size_t)cols * 4), &w);
        act_pair(cols, rows, NULL, &out);
        g_cpu->ops->rms_norm(g_cpu, &x.cpu, &w.cpu, 1e-5f, &out.cpu);
        g_vk->ops->rms_norm(g_vk, &x.vk, &w.vk, 1e-5f, &out.vk);
        double e = compare(&out);
        CHECK_MSG(e <= 1e-6, "rms_norm %lldx%lld: NMSE %g", (long long)rows, (long long)cols, e);
        printf("  rms_norm [%lld][%lld] NMSE %.2e\n", (long long)rows, (long long)cols, e);
        free_pair(&x);
        free_pair(&out);
        free(xv);
        free(wv);
    }
}

/* The NMSE a matmul of weight type may show against the reference: f32 weights are
 * exact but for the sums' order, unless the matmul rounds its inputs to fp16 (the
 * cooperative-matrix build, test_matmul_coopmat: a relative 2^-11 each). */
static double g_f32_tol = 1e-6;
static double mm_tol(uint32_t type) { return type == AL_TYPE_F32 ? g_f32_tol : 5e-4; }

static void one_matmul(uint32_t type, const pair *w, int64_t n_tok, bool bias) {
    int64_t n_in = w->cols, n_out = w->rows;
    float *xv = random_floats((size_t)((n_tok + 3) * n_in), 1.0f);
    pair x, out, b;
    act_pair(n_in, n_tok + 3, xv, &x);
    act_pair(n_out, n_tok + 1, NULL, &out);
    if (bias) {
        float *bv = random_floats((size_t)n_out, 1.0f);
        weight_pair(AL_TYPE_F32, n_out, 1, memcpy(keep_alloc((size_t)n_out * 4), bv, (size_t)n_out * 4), &b);
        free(bv);
    }
    /* views at row offsets: x from row 3, out from row 1 */
    al_tensor xc = al_tensor_rows(&x.cpu, 3, n_tok), xk = al_tensor_rows(&x.vk, 3, n_tok);
    al_tensor oc = al_tensor_rows(&out.cpu, 1, n_tok), ok = al_tensor_rows(&out.vk, 1, n_tok);
    g_cpu->ops->matmul(g_cpu, &xc, &w->cpu, bias ? &b.cpu : NULL, &oc);
    g_vk->ops->matmul(g_vk, &xk, &w->vk, bias ? &b.vk : NULL, &ok);
    double e = compare_rows(&out, 1, n_tok);
    double tol = mm_tol(type);
    CHECK_MSG(e <= tol, "matmul %s %lld tokens: NMSE %g", quant_type_name(type), (long long)n_tok, e);
    printf("  matmul %-5s [%lld]x[%lld->%lld]%s NMSE %.2e\n", quant_type_name(type),
           (long long)n_tok, (long long)n_in, (long long)n_out, bias ? " +bias" : "", e);
    free_pair(&x);
    free_pair(&out);
    free(xv);
}

static void test_matmul(void) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        uint32_t type = g_types[ti];
        int64_t n_in = awkward_cols(type), n_out = 67;
        pair w;
        weight_pair(type, n_in, n_out, random_weight(type, n_in, n_out), &w);
        /* 1, 3 and 8 tokens take matvec.comp; 9 and 70 take the tiled matmul.comp */
        int64_t toks[] = {1, 3, 8, 9, 70};
        for (int k = 0; k < 5; k++) one_matmul(type, &w, toks[k], k == 1 || k == 4);
    }
}

static void one_rope(bool neox, bool factors, int pos0, float freq_scale) {
    int n_head = 3, head_dim = 40, n_rot = 32, rows = 4;
    int64_t cols = (int64_t)n_head * head_dim;
    float *xv = random_floats((size_t)(cols * rows), 1.0f);
    float ff[16];
    for (int i = 0; i < 16; i++) ff[i] = 1.0f + (float)i * 0.37f;
    al_rope rp = {.n_rot = n_rot, .neox = neox, .freq_base = 10000.0f, .freq_scale = freq_scale,
                  .freq_factors = factors ? ff : NULL};
    pair x;
    act_pair(cols, rows, xv, &x);
    g_cpu->ops->rope(g_cpu, &x.cpu, n_head, head_dim, pos0, &rp);
    g_vk->ops->rope(g_vk, &x.vk, n_head, head_dim, pos0, &rp);
    double e = compare(&x);
    CHECK_MSG(e <= 1e-6, "rope neox %d factors %d pos %d: NMSE %g", neox, factors, pos0, e);
    printf("  rope %s%s pos0 %d NMSE %.2e\n", neox ? "neox" : "normal", factors ? " +factors" : "",
           pos0, e);
    free_pair(&x);
    free(xv);
}

static void test_rope(void) {
    one_rope(false, false, 0, 1.0f);
    one_rope(true, false, 7, 1.0f);
    one_rope(false, true, 1000, 0.5f);
    one_rope(true, true, 4000, 0.25f);
}

/* ---- fused ops (backend.h: matmul_add, matmul_glu, rope_qk, matmul_multi) ---------------- */

/* Whether the Vulkan backend fuses an input norm into matmul_multi and matmul_glu:
 * with the GPUs' matvec.comp (cpu_rows=0), not on a CPU device, where it runs the norm
 * alone and fuses the rest. */
static bool g_norm_fuses = false;

/* The same floats, bit for bit (NaN never appears: the inputs are finite). */
static bool same_floats(const al_tensor *a, const al_tensor *b, size_t n_cols, int64_t rows) {
    for (int64_t r = 0; r < rows; r++)
        if (memcmp((char *)a->data + a->offset + (uint64_t)r * a->row_bytes,
                   (char *)b->data + b->offset + (uint64_t)r * b->row_bytes, n_cols * 4))
            return false;
    return true;
}

/* out (a view from row 1, holding a residual) += x . w (+ bias): the Vulkan op against the
 * reference op, and the reference op bit for bit against matmul then add. */
static void one_matmul_add(uint32_t type, const pair *w, int64_t n_tok, bool bias) {
    int64_t n_in = w->cols, n_out = w->rows;
    float *xv = random_floats((size_t)(n_tok * n_in), 1.0f);
    float *rv = random_floats((size_t)((n_tok + 1) * n_out), 2.0f);
    pair x, out, plain, tmp, b;
    act_pair(n_in, n_tok, xv, &x);
    act_pair(n_out, n_tok + 1, rv, &out);
    act_pair(n_out, n_tok + 1, rv, &plain);
    act_pair(n_out, n_tok, NULL, &tmp);
    if (bias) {
        float *bv = random_floats((size_t)n_out, 1.0f);
        weight_pair(AL_TYPE_F32, n_out, 1, memcpy(keep_alloc((size_t)n_out * 4), bv, (size_t)n_out * 4), &b);
        free(bv);
    }
    const al_tensor *bc = bias ? &b.cpu : NULL, *bk = bias ? &b.vk : NULL;
    al_tensor oc = al_tensor_rows(&out.cpu, 1, n_tok), ok = al_tensor_rows(&out.vk, 1, n_tok);
    al_tensor pc = al_tensor_rows(&plain.cpu, 1, n_tok);
    CHECK(g_cpu->ops->matmul_add(g_cpu, &x.cpu, &w->cpu, bc, &oc));
    g_cpu->ops->matmul(g_cpu, &x.cpu, &w->cpu, bc, &tmp.cpu);
    g_cpu->ops->add(g_cpu, &pc, &tmp.cpu);
    CHECK_MSG(same_floats(&oc, &pc, (size_t)n_out, n_tok), "ref matmul_add %s differs from "
              "matmul + add", quant_type_name(type));
    CHECK_MSG(g_vk->ops->matmul_add(g_vk, &x.vk, &w->vk, bk, &ok), "matmul_add declined");
    double e = compare(&out); /* row 0 too: it must still hold the residual */
    double tol = mm_tol(type);
    CHECK_MSG(e <= tol, "matmul_add %s %lld tokens: NMSE %g", quant_type_name(type),
              (long long)n_tok, e);
    printf("  matmul_add %-5s [%lld]x[%lld->%lld]%s NMSE %.2e\n", quant_type_name(type),
           (long long)n_tok, (long long)n_in, (long long)n_out, bias ? " +bias" : "", e);
    free_pair(&x);
    free_pair(&out);
    free_pair(&plain);
    free_pair(&tmp);
    free(xv);
    free(rv);
}

/* out = act(x . wg) * (x . wu): the Vulkan op (or, where it declines, the plain ops it
 * stands for) against the reference op, and that bit for bit against the plain ops.
 * Decoding (a few tokens) must fuse. */
static void one_matmul_glu(uint32_t type, const pair *wg, const pair *wu, int64_t n_tok,
                           al_glu act) {
    int64_t n_in = wg->cols, n_out = wg->rows;
    float *xv = random_floats((size_t)((n_tok + 2) * n_in), 1.0f);
    pair x, out, plain, tmp;
    act_pair(n_in, n_tok + 2, xv, &x);
    act_pair(n_out, n_tok, NULL, &out);
    act_pair(n_out, n_tok, NULL, &plain);
    act_pair(n_out, n_tok, NULL, &tmp);
    al_tensor xc = al_tensor_rows(&x.cpu, 2, n_tok), xk = al_tensor_rows(&x.vk, 2, n_tok);
    CHECK(g_cpu->ops->matmul_glu(g_cpu, &xc, &wg->cpu, &wu->cpu, act, &out.cpu));
    g_cpu->ops->matmul(g_cpu, &xc, &wg->cpu, NULL, &plain.cpu);
    g_cpu->ops->matmul(g_cpu, &xc, &wu->cpu, NULL, &tmp.cpu);
    if (act == AL_GLU_GELU) g_cpu->ops->gelu_mul(g_cpu, &plain.cpu, &tmp.cpu);
    else g_cpu->ops->silu_mul(g_cpu, &plain.cpu, &tmp.cpu);
    CHECK_MSG(same_floats(&out.cpu, &plain.cpu, (size_t)n_out, n_tok), "ref matmul_glu %s "
              "differs from matmul, matmul, %s", quant_type_name(type), act ? "gelu_mul" : "silu_mul");
    bool fused = g_vk->ops->matmul_glu(g_vk, &xk, &wg->vk, &wu->vk, act, &out.vk);
    CHECK_MSG(fused || n_tok > 8, "matmul_glu declined %lld tokens", (long long)n_tok);
    if (!fused) backend_matmul_glu(g_vk, &xk, &wg->vk, &wu->vk, act, &tmp.vk, &out.vk);
    double e = compare(&out);
    double tol = mm_tol(type);
    CHECK_MSG(e <= tol, "matmul_glu %s %s %lld tokens: NMSE %g", quant_type_name(type),
              act ? "gelu" : "silu", (long long)n_tok, e);
    printf("  matmul_glu %-5s %s [%lld]x[%lld->%lld] %s NMSE %.2e\n", quant_type_name(type),
           act ? "gelu" : "silu", (long long)n_tok, (long long)n_in, (long long)n_out,
           fused ? "fused" : "plain", e);
    free_pair(&x);
    free_pair(&out);
    free_pair(&plain);
    free_pair(&tmp);
    free(xv);
}

/* out = act(xn . wg) * (xn . wu), xn = rms_norm(x) (x a view from row 2): the Vulkan op
 * (or, where it declines, what backend_norm_matmul_glu runs instead) against the
 * reference's rms_norm, matmuls and activation. Where the norm fuses, decoding must. */
static void one_norm_matmul_glu(uint32_t type, const pair *wg, const pair *wu, int64_t n_tok,
                                al_glu act) {
    int64_t n_in = wg->cols, n_out = wg->rows;
    float *xv = random_floats((size_t)((n_tok + 2) * n_in), 2.0f);
    float *nv = random_floats((size_t)n_in, 1.0f);
    pair x, xn, nw, out, tmp;
    act_pair(n_in, n_tok + 2, xv, &x);
    act_pair(n_in, n_tok, NULL, &xn);
    act_pair(n_out, n_tok, NULL, &out);
    act_pair(n_out, n_tok, NULL, &tmp);
    weight_pair(AL_TYPE_F32, n_in, 1, memcpy(keep_alloc((size_t)n_in * 4), nv, (size_t)n_in * 4), &nw);
    al_tensor xc = al_tensor_rows(&x.cpu, 2, n_tok), xk = al_tensor_rows(&x.vk, 2, n_tok);
    g_cpu->ops->rms_norm(g_cpu, &xc, &nw.cpu, 1e-5f, &xn.cpu);
    g_cpu->ops->matmul(g_cpu, &xn.cpu, &wg->cpu, NULL, &out.cpu);
    g_cpu->ops->matmul(g_cpu, &xn.cpu, &wu->cpu, NULL, &tmp.cpu);
    if (act == AL_GLU_GELU) g_cpu->ops->gelu_mul(g_cpu, &out.cpu, &tmp.cpu);
    else g_cpu->ops->silu_mul(g_cpu, &out.cpu, &tmp.cpu);
    bool fused = g_vk->ops->norm_matmul_glu(g_vk, &xk, &nw.vk, 1e-5f, &wg->vk, &wu->vk, act, &out.vk);
    CHECK_MSG(fused || n_tok > 8 || !g_norm_fuses, "norm_matmul_glu declined %lld tokens",
              (long long)n_tok);
    if (!fused)
        backend_norm_matmul_glu(g_vk, &xk, &nw.vk, 1e-5f, &wg->vk, &wu->vk, act, &xn.vk, &tmp.vk,
                                &out.vk);
    double e = compare(&out);
    double tol = mm_tol(type);
    CHECK_MSG(e <= tol, "norm_matmul_glu %s %s %lld tokens: NMSE %g", quant_type_name(type),
              act ? "gelu" : "silu", (long long)n_tok, e);
    printf("  norm_matmul_glu %-5s %s [%lld]x[%lld->%lld] %s NMSE %.2e\n", quant_type_name(type),
           act ? "gelu" : "silu", (long long)n_tok, (long long)n_in, (long long)n_out,
           fused ? "fused" : "plain", e);
    free_pair(&x);
    free_pair(&xn);
    free_pair(&out);
    free_pair(&tmp);
    free(xv);
    free(nv);
}

static void test_fused_matmul(void) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        uint32_t type = g_types[ti];
        int64_t n_in = awkward_cols(type), n_out = 67;
        pair w, wu;
        weight_pair(type, n_in, n_out, random_weight(type, n_in, n_out), &w);
        weight_pair(type, n_in, n_out, random_weight(type, n_in, n_out), &wu);
        /* 1, 3 and 8 tokens: matvec.comp on GPUs; 9 and 70 the tiled matmul.comp */
        int64_t toks[] = {1, 3, 8, 9, 70};
        for (int k = 0; k < 5; k++) {
            one_matmul_add(type, &w, toks[k], k == 1 || k == 4);
            one_matmul_glu(type, &w, &wu, toks[k], k % 2 ? AL_GLU_GELU : AL_GLU_SILU);
            one_norm_matmul_glu(type, &w, &wu, toks[k], k % 2 ? AL_GLU_SILU : AL_GLU_GELU);
        }
    }
}

/* out_i = xn . w_i (+ bias_i) for the first n_w of w (rows 67, 32 and 5: workgroups
 * of several weights), xn = rms_norm(x) with norm, else x: the Vulkan op (or, where it
 * declines, what backend_matmul_multi runs instead) against the reference's rms_norm
 * and matmuls. x is a view from row 2, output 1 a view from row 1. Decoding (up to 8
 * tokens) must fuse. */
static void one_matmul_multi(uint32_t type, const pair *w, int n_w, int64_t n_tok, bool bias,
                             bool norm) {
    int64_t n_in = w[0].cols;
    float *xv = random_floats((size_t)((n_tok + 2) * n_in), 2.0f);
    float *nv = random_floats((size_t)n_in, 1.0f);
    pair x, xn, nw, out[3], b[3];
    act_pair(n_in, n_tok + 2, xv, &x);
    act_pair(n_in, n_tok, NULL, &xn);
    weight_pair(AL_TYPE_F32, n_in, 1, memcpy(keep_alloc((size_t)n_in * 4), nv, (size_t)n_in * 4), &nw);
    const al_tensor *wk[3], *bc[3], *bk[3];
    al_tensor oc[3], ok[3], *okp[3];
    for (int i = 0; i < n_w; i++) {
        int64_t n_out = w[i].rows, r0 = i == 1;
        act_pair(n_out, n_tok + r0, NULL, &out[i]);
        oc[i] = al_tensor_rows(&out[i].cpu, r0, n_tok);
        ok[i] = al_tensor_rows(&out[i].vk, r0, n_tok);
        okp[i] = &ok[i];
        wk[i] = &w[i].vk;
        bc[i] = bk[i] = NULL;
        if (bias && i != 1) { /* weight 1 without: a bias per weight, not per call */
            float *bv = random_floats((size_t)n_out, 1.0f);
            weight_pair(AL_TYPE_F32, n_out, 1, memcpy(keep_alloc((size_t)n_out * 4), bv, (size_t)n_out * 4), &b[i]);
            bc[i] = &b[i].cpu, bk[i] = &b[i].vk;
            free(bv);
        }
    }
    al_tensor xc = al_tensor_rows(&x.cpu, 2, n_tok), xk = al_tensor_rows(&x.vk, 2, n_tok);
    const al_tensor *in = &xc;
    if (norm) g_cpu->ops->rms_norm(g_cpu, &xc, &nw.cpu, 1e-5f, &xn.cpu), in = &xn.cpu;
    for (int i = 0; i < n_w; i++) g_cpu->ops->matmul(g_cpu, in, &w[i].cpu, bc[i], &oc[i]);
    const al_tensor *nk = norm ? &nw.vk : NULL;
    bool fused = g_vk->ops->matmul_multi(g_vk, &xk, nk, 1e-5f, n_w, wk, bk, okp);
    CHECK_MSG(fused || n_tok > 8 || (norm && !g_norm_fuses), "matmul_multi declined %lld tokens",
              (long long)n_tok);
    if (!fused) backend_matmul_multi(g_vk, &xk, nk, 1e-5f, n_w, wk, bk, &xn.vk, okp);
    double tol = mm_tol(type), worst = 0;
    for (int i = 0; i < n_w; i++) {
        double e = compare_rows(&out[i], i == 1, n_tok);
        CHECK_MSG(e <= tol, "matmul_multi %s weight %d of %d, %lld tokens%s%s: NMSE %g",
                  quant_type_name(type), i, n_w, (long long)n_tok, bias ? " +bias" : "",
                  norm ? " +norm" : "", e);
        worst = e > worst ? e : worst;
        free_pair(&out[i]);
    }
    printf("  matmul_multi %-5s %d weights [%lld]x[%lld]%s%s %s NMSE %.2e\n", quant_type_name(type),
           n_w, (long long)n_tok, (long long)n_in, bias ? " +bias" : "", norm ? " +norm" : "",
           fused ? "fused" : "plain", worst);
    free_pair(&x);
    free_pair(&xn);
    free(xv);
    free(nv);
}

static void test_matmul_multi(void) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        uint32_t type = g_types[ti];
        int64_t n_in = awkward_cols(type), rows[3] = {67, 32, 5};
        pair w[3];
        for (int i = 0; i < 3; i++)
            weight_pair(type, n_in, rows[i], random_weight(type, n_in, rows[i]), &w[i]);
        /* 1, 3 and 8 tokens fuse (matvec.comp on GPUs); 9 and 70 run the plain ops */
        int64_t toks[] = {1, 3, 8, 9, 70};
        for (int k = 0; k < 5; k++)
            one_matmul_multi(type, w, k == 2 ? 2 : 3, toks[k], k % 2 == 0, k >= 1 && k <= 3);
        one_matmul_multi(type, w, 1, 1, true, false);
    }
}

/* q (3 heads) and k (2 heads, a view from row 1) rotated in one op, against the
 * reference op, and that bit for bit against two ropes. */
static void test_rope_qk(void) {
    int head_dim = 40, rows = 4;
    float ff[16];
    for (int i = 0; i < 16; i++) ff[i] = 1.0f + (float)i * 0.37f;
    for (int neox = 0; neox < 2; neox++) {
        al_rope rp = {.n_rot = 32, .neox = neox, .freq_base = 10000.0f, .freq_scale = 0.5f,
                      .freq_factors = neox ? ff : NULL};
        float *qv = random_floats((size_t)(3 * head_dim * rows), 1.0f);
        float *kv = random_floats((size_t)(2 * head_dim * (rows + 1)), 1.0f);
        pair q, k, q2, k2;
        act_pair(3 * head_dim, rows, qv, &q);
        act_pair(2 * head_dim, rows + 1, kv, &k);
        act_pair(3 * head_dim, rows, qv, &q2);
        act_pair(2 * head_dim, rows + 1, kv, &k2);
        al_tensor kc = al_tensor_rows(&k.cpu, 1, rows), kk = al_tensor_rows(&k.vk, 1, rows);
        al_tensor k2c = al_tensor_rows(&k2.cpu, 1, rows);
        CHECK(g_cpu->ops->rope_qk(g_cpu, &q.cpu, 3, &kc, 2, head_dim, 100, &rp));
        g_cpu->ops->rope(g_cpu, &q2.cpu, 3, head_dim, 100, &rp);
        g_cpu->ops->rope(g_cpu, &k2c, 2, head_dim, 100, &rp);
        CHECK_MSG(same_floats(&q.cpu, &q2.cpu, 3 * (size_t)head_dim, rows) &&
                  same_floats(&kc, &k2c, 2 * (size_t)head_dim, rows), "ref rope_qk differs");
        CHECK_MSG(g_vk->ops->rope_qk(g_vk, &q.vk, 3, &kk, 2, head_dim, 100, &rp), "rope_qk declined");
        double eq = compare(&q), ek = compare(&k);
        CHECK_MSG(eq <= 1e-6 && ek <= 1e-6, "rope_qk neox %d: NMSE q %g, k %g", neox, eq, ek);
        printf("  rope_qk %s NMSE q %.2e, k %.2e\n", neox ? "neox" : "normal", eq, ek);
        free_pair(&q);
        free_pair(&k);
        free_pair(&q2);
        free_pair(&k2);
        free(qv);
        free(kv);
    }
}

/* q (3 heads) and k (2 heads, a view from row 1), each row at its own position (the
 * next tokens of several sequences), rotated in one op, against the reference's rope
 * row by row, once with more rows than the table cache keeps (the decode tests reuse
 * a cached table, layer after layer). */
static void test_rope_qk_rows(void) {
    int head_dim = 40;
    const int32_t pos[] = {100, 3, 57, 0, 4000, 3, 9};
    int32_t many[67]; /* more rows than the Vulkan backend's table cache keeps (64) */
    for (int i = 0; i < 67; i++) many[i] = (i * 37) % 200;
    for (int c = 0; c < 3; c++) {
        int rows = c == 2 ? 67 : 7;
        const int32_t *p = c == 2 ? many : pos;
        al_rope rp = {.n_rot = 32, .neox = c == 1, .freq_base = 10000.0f, .freq_scale = 0.5f};
        float *qv = random_floats((size_t)(3 * head_dim * rows), 1.0f);
        float *kv = random_floats((size_t)(2 * head_dim * (rows + 1)), 1.0f);
        pair q, k;
        act_pair(3 * head_dim, rows, qv, &q);
        act_pair(2 * head_dim, rows + 1, kv, &k);
        al_tensor kc = al_tensor_rows(&k.cpu, 1, rows), kk = al_tensor_rows(&k.vk, 1, rows);
        for (int t = 0; t < rows; t++) {
            al_tensor qt = al_tensor_rows(&q.cpu, t, 1), kt = al_tensor_rows(&kc, t, 1);
            g_cpu->ops->rope(g_cpu, &qt, 3, head_dim, p[t], &rp);
            g_cpu->ops->rope(g_cpu, &kt, 2, head_dim, p[t], &rp);
        }
        CHECK_MSG(g_vk->ops->rope_qk_rows(g_vk, &q.vk, 3, &kk, 2, head_dim, p, &rp),
                  "rope_qk_rows declined");
        double eq = compare(&q), ek = compare(&k);
        CHECK_MSG(eq <= 1e-6 && ek <= 1e-6, "rope_qk_rows %d rows: NMSE q %g, k %g", rows, eq, ek);
        printf("  rope_qk_rows %d rows %s NMSE q %.2e, k %.2e\n", rows, c == 1 ? "neox" : "normal",
               eq, ek);
        free_pair(&q);
        free_pair(&k);
        free(qv);
        free(kv);
    }
}

/* Prefill then decode steps, over more positions than one workgroup step (64). */
static void one_attention(int n_head, int n_head_kv, int head_dim) {
    int n_ctx = 150, kvd = n_head_kv * head_dim, qd = n_head * head_dim;
    pair kc, vc, out;
    act_pair(kvd, n_ctx, NULL, &kc);
    act_pair(kvd, n_ctx, NULL, &vc);
    act_pair(qd, 100, NULL, &out);
    int steps[][2] = {{0, 100}, {100, 1}, {101, 30}}; /* n_past, n_tokens */
    for (int s = 0; s < 3; s++) {
        int n = steps[s][1];
        al_attn_shape shape = {.n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim,
                               .n_past = steps[s][0], .n_tokens = n};
        float *qv = random_floats((size_t)(n * qd), 2.0f), *kv = random_floats((size_t)(n * kvd), 2.0f);
        float *vv = random_floats((size_t)(n * kvd), 1.0f);
        pair q, k, v;
        act_pair(qd, n, qv, &q);
        act_pair(kvd, n, kv, &k);
        act_pair(kvd, n, vv, &v);
        al_tensor oc = al_tensor_rows(&out.cpu, 0, n), ov = al_tensor_rows(&out.vk, 0, n);
        g_cpu->ops->attention(g_cpu, &q.cpu, &k.cpu, &v.cpu, &kc.cpu, &vc.cpu, &shape, &oc);
        g_vk->ops->attention(g_vk, &q.vk, &k.vk, &v.vk, &kc.vk, &vc.vk, &shape, &ov);
        double e = compare_rows(&out, 0, n);
        double ek = compare_rows(&kc, 0, shape.n_past + n), ev = compare_rows(&vc, 0, shape.n_past + n);
        CHECK_MSG(e <= 1e-6 && ek <= 1e-6 && ev <= 1e-6, "attention %d/%d x %d past %d: NMSE %g "
                  "(caches %g %g)", n_head, n_head_kv, head_dim, shape.n_past, e, ek, ev);
        printf("  attention heads %d/%d dim %d past %d + %d NMSE %.2e\n", n_head, n_head_kv,
               head_dim, shape.n_past, n, e);
        free_pair(&q);
        free_pair(&k);
        free_pair(&v);
        free(qv);
        free(kv);
        free(vv);
    }
    free_pair(&kc);
    free_pair(&vc);
    free_pair(&out);
}

static void test_attention(void) {
    one_attention(8, 2, 64);  /* grouped-query */
    one_attention(3, 3, 40);  /* awkward head size */
    one_attention(4, 1, 128);
}

static void test_elementwise(void) {
    int64_t cols = 1001, rows = 5;
    size_t n = (size_t)(cols * rows);
    float *a = random_floats(n, 4.0f), *b = random_floats(n, 2.0f);
    pair x, y;
    act_pair(cols, rows, a, &x);
    act_pair(cols, rows, b, &y);
    g_cpu->ops->silu_mul(g_cpu, &x.cpu, &y.cpu);
    g_vk->ops->silu_mul(g_vk, &x.vk, &y.vk);
    double e1 = compare(&x);
    g_cpu->ops->add(g_cpu, &x.cpu, &y.cpu);
    g_vk->ops->add(g_vk, &x.vk, &y.vk);
    double e2 = compare(&x);
    CHECK_MSG(e1 <= 1e-6 && e2 <= 1e-6, "silu_mul NMSE %g, add NMSE %g", e1, e2);
    printf("  silu_mul NMSE %.2e, add NMSE %.2e\n", e1, e2);
    free_pair(&x);
    free_pair(&y);
    free(a);
    free(b);
}

/* The Vulkan tensor t's first n floats, read back. */
static float *read_vk(const al_tensor *t, size_t n) {
    float *a = malloc(n * sizeof *a);
    AL_ASSERT(a);
    g_vk->ops->tensor_read(g_vk, t, a, n * sizeof(float));
    return a;
}

/* NMSE of n floats of the Vulkan tensor t against ref, and how many are not finite;
 * max_rel (if not NULL): the largest |a - ref| / max(|ref|, 1), which, unlike the
 * NMSE, is not dominated by the largest values. */
static double compare_host(const al_tensor *t, const float *ref, size_t n, int *n_bad,
                           double *max_rel) {
    float *a = read_vk(t, n);
    *n_bad = 0;
    if (max_rel) *max_rel = 0;
    for (size_t i = 0; i < n; i++) {
        *n_bad += !isfinite(a[i]);
        double d = fabs((double)a[i] - ref[i]) / fmax(fabs((double)ref[i]), 1.0);
        if (max_rel && !(d <= *max_rel)) *max_rel = d; /* a NaN sticks */
    }
    double e = test_nmse(a, ref, n);
    free(a);
    return e;
}

/* gelu_mul and scale have no CPU reference op on this branch: the expected values
 * are computed here in double precision. The inputs reach |g| = 200 (and one
 * column 1e4 and -1e4), where a tanh computed as (e^2z - 1) / (e^2z + 1) overflows
 * into NaN; the result must stay finite and match. Both ops run on views from row 1,
 * and the row before must be left alone. */
static void test_gelu_scale(void) {
    int64_t cols = 1001, rows = 6, n_view = rows - 1;
    size_t n = (size_t)(cols * rows);
    float *g = random_floats(n, 6.0f), *u = random_floats(n, 2.0f);
    for (int64_t r = 0; r < rows; r++) {
        g[r * cols + 7] = 200.0f * (r % 2 ? 1.0f : -1.0f);
        g[r * cols + 8] = r % 2 ? 1e4f : -1e4f;
        g[r * cols + 9] = 0.0f;
    }
    float *want = malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++) {
        double a = g[i], z = sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a);
        want[i] = i < (size_t)cols ? g[i] : (float)(0.5 * a * (1.0 + tanh(z)) * u[i]);
    }
    pair x, y;
    act_pair(cols, rows, g, &x);
    act_pair(cols, rows, u, &y);
    al_tensor xv = al_tensor_rows(&x.vk, 1, n_view), yv = al_tensor_rows(&y.vk, 1, n_view);
    g_vk->ops->gelu_mul(g_vk, &xv, &yv);
    int bad1, bad2;
    double r1, r2, e1 = compare_host(&x.vk, want, n, &bad1, &r1);
    const float s = -3.75f;
    for (size_t i = (size_t)cols; i < n; i++) want[i] = (float)((double)want[i] * s);
    g_vk->ops->scale(g_vk, &xv, s);
    double e2 = compare_host(&x.vk, want, n, &bad2, &r2);
    CHECK_MSG(e1 <= 1e-6 && r1 <= 1e-5 && bad1 == 0 && e2 <= 1e-6 && r2 <= 1e-5 && bad2 == 0,
              "gelu_mul NMSE %g, error %g (%d not finite); scale NMSE %g, error %g (%d not "
              "finite)", e1, r1, bad1, e2, r2, bad2);
    printf("  gelu_mul NMSE %.2e, max error %.1e; scale NMSE %.2e, max error %.1e (|g| up to "
           "1e4)\n", e1, r1, e2, r2);
    free_pair(&x);
    free_pair(&y);
    free(g);
    free(u);
    free(want);
}

/* add_rows (a mixture of experts' weighted sum) against the formula and against the
 * CPU backend's op: rows of a view starting at row 1, ids out of order, a weight of 0
 * and a negative one; rows no id names must not change. */
static void test_add_rows(void) {
    const int64_t cols = 333, rows = 9, n = 4;
    const int32_t ids[4] = {6, 0, 3, 7};
    const float w[4] = {0.5f, -2.0f, 0.0f, 1e-3f};
    float *xs = random_floats((size_t)(cols * rows), 3.0f);
    float *ys = random_floats((size_t)(cols * n), 3.0f);
    float *want = malloc((size_t)(cols * rows) * sizeof *want);
    memcpy(want, xs, (size_t)(cols * rows) * sizeof *want);
    for (int i = 0; i < n; i++) /* the view starts at row 1 */
        for (int64_t c = 0; c < cols; c++)
            want[(1 + ids[i]) * cols + c] += w[i] * ys[i * cols + c];
    pair x, y;
    act_pair(cols, rows, xs, &x);
    act_pair(cols, n, ys, &y);
    al_tensor xv = al_tensor_rows(&x.vk, 1, rows - 1), xc = al_tensor_rows(&x.cpu, 1, rows - 1);
    g_vk->ops->add_rows(g_vk, &xv, &y.vk, ids, w, (int)n);
    g_cpu->ops->add_rows(g_cpu, &xc, &y.cpu, ids, w, (int)n);
    int bad;
    double rel, e = compare_host(&x.vk, want, (size_t)(cols * rows), &bad, &rel);
    float *got_cpu = malloc((size_t)(cols * rows) * sizeof *got_cpu);
    g_cpu->ops->tensor_read(g_cpu, &x.cpu, got_cpu, (uint64_t)(cols * rows) * sizeof(float));
    double ec = test_nmse(got_cpu, want, (size_t)(cols * rows));
    free(got_cpu);
    CHECK_MSG(e <= 1e-12 && bad == 0 && ec <= 1e-12, "add_rows: Vulkan NMSE %g (%d not finite), "
              "CPU NMSE %g", e, bad, ec);
    printf("  add_rows NMSE %.2e (CPU %.2e)\n", e, ec);
    free_pair(&x);
    free_pair(&y);
    free(xs);
    free(ys);
    free(want);
}

/* gpt-oss's clamped SwiGLU in double precision (backend.h); an input of -inf gives
 * the limit of x sigmoid(alpha x), 0. */
static double swiglu_oai_ref(double g, double u, double alpha, double limit) {
    double x = fmin(g, limit), y = fmin(fmax(u, -limit), limit);
    return isinf(x) ? 0.0 : x / (1.0 + exp(-alpha * x)) * (y + 1.0);
}

/* swiglu_oai against the formula in double precision, with gpt-oss's alpha and limit
 * and with others (the push constants reach the shader). Inputs are beyond +-limit
 * on both sides, and a few columns hold g whose e^(-alpha g) overflows a float (-1e4,
 * -inf; -100 with alpha 1.702), and u = +-1e4; nothing may come out non-finite.
 * Views from row 1: the row before must be left alone. */
static void test_swiglu_oai(void) {
    const float params[][2] = {{1.702f, 7.0f}, {0.5f, 2.5f}}; /* alpha, limit */
    int64_t cols = 1001, rows = 6, n_view = rows - 1;
    size_t n = (size_t)(cols * rows);
    for (int k = 0; k < 2; k++) {
        float alpha = params[k][0], limit = params[k][1];
        float *g = random_floats(n, 12.0f), *u = random_floats(n, 12.0f);
        for (int64_t r = 1; r < rows; r++) { /* row 0, left alone, stays finite */
            float *gr = g + r * cols, *ur = u + r * cols;
            gr[3] = -1e4f, gr[4] = -100.0f, gr[5] = -INFINITY, gr[6] = 1e4f, gr[7] = limit;
            ur[8] = 1e4f, ur[9] = -1e4f, ur[10] = -limit, gr[11] = 0.0f;
        }
        float *want = malloc(n * sizeof *want);
        for (size_t i = 0; i < n; i++)
            want[i] = i < (size_t)cols ? g[i] : (float)swiglu_oai_ref(g[i], u[i], alpha, limit);
        pair x, y;
        act_pair(cols, rows, g, &x);
        act_pair(cols, rows, u, &y);
        al_tensor xv = al_tensor_rows(&x.vk, 1, n_view), yv = al_tensor_rows(&y.vk, 1, n_view);
        g_vk->ops->swiglu_oai(g_vk, &xv, &yv, alpha, limit);
        int bad;
        double r, e = compare_host(&x.vk, want, n, &bad, &r);
        /* the clamps matter: without them the result would be far from this one */
        double unclamped = 0;
        for (size_t i = (size_t)cols; i < n; i++)
            if (isfinite(g[i]) && fabs(g[i]) < 100 && fabs(u[i]) < 100) {
                double d = g[i] / (1.0 + exp(-alpha * (double)g[i])) * (u[i] + 1.0) - want[i];
                unclamped = fmax(unclamped, fabs(d));
            }
        CHECK_MSG(e <= 1e-6 && r <= 1e-5 && bad == 0 && unclamped > 1.0,
                  "swiglu_oai alpha %g limit %g: NMSE %g, error %g (%d not finite), clamp "
                  "effect %g", (double)alpha, (double)limit, e, r, bad, unclamped);
        printf("  swiglu_oai alpha %g limit %g NMSE %.2e, max error %.1e (|g|, |u| up to 1e4, "
               "-inf)\n", (double)alpha, (double)limit, e, r);
        free_pair(&x);
        free_pair(&y);
        free(g);
        free(u);
        free(want);
    }
}

/* rms_norm over a per-head view in place (qwen3 / gemma3 Q/K norm, model.c head_norm):
 * ne0 = head_dim, n_rows * n_heads rows of head_dim floats. 70000 rows of 8 exceed
 * the 65535 workgroups in x most devices allow, so the rows fold into y. */
static void test_rms_norm_heads(void) {
    int sizes[][3] = {{128, 8, 512}, {256, 4, 33}, {8, 7, 10000}}; /* head_dim, heads, rows */
    for (int k = 0; k < 3; k++) {
        int64_t hd = sizes[k][0], nh = sizes[k][1], rows = sizes[k][2], cols = hd * nh;
        float *xv = random_floats((size_t)(cols * rows), 3.0f), *wv = random_floats((size_t)hd, 1.0f);
        pair x, w;
        act_pair(cols, rows, xv, &x);
        weight_pair(AL_TYPE_F32, hd, 1, memcpy(keep_alloc((size_t)hd * 4), wv, (size_t)hd * 4), &w);
        al_tensor hc = x.cpu, hv = x.vk;
        hc.ne[0] = hv.ne[0] = hd;
        hc.ne[1] = hv.ne[1] = rows * nh;
        hc.row_bytes = hv.row_bytes = (uint64_t)hd * sizeof(float);
        g_cpu->ops->rms_norm(g_cpu, &hc, &w.cpu, 1e-6f, &hc);
        g_vk->ops->rms_norm(g_vk, &hv, &w.vk, 1e-6f, &hv);
        double e = compare(&x), moved = test_nmse(x.cpu.data, xv, (size_t)(cols * rows));
        /* moved: the norm changed the data, so an op that did nothing would fail */
        CHECK_MSG(e <= 1e-6 && moved > 1e-2, "rms_norm heads %lld x %lld x %lld: NMSE %g",
                  (long long)rows, (long long)nh, (long long)hd, e);
        printf("  rms_norm in place on %lld head rows of %lld NMSE %.2e\n", (long long)(rows * nh),
               (long long)hd, e);
        free_pair(&x);
        free(xv);
        free(wv);
    }
}

/* ---- attention over ring caches ----------------------------------------------------------- */

/* One attention configuration run through a sequence of batches, against a naive
 * attention over the full history of keys and values (every position ever written,
 * kept here): the ring holds only cap rows, so by the end it has wrapped around,
 * some batches across its end. */
typedef struct ring_case {
    int n_head, n_head_kv, head_dim;
    int window;   /* 0: all positions */
    float scale;  /* 0: 1 / sqrt(head_dim) */
    int cap;      /* rows of the ring */
    int n_steps;
    int steps[8]; /* tokens per batch */
    bool sinks;   /* per-head sink logits (gpt-oss), sink_value(h) */
} ring_case;

/* Head h's sink logit. The scores of these tests are a few units (q, k in [-2, 2]),
 * so the sinks are some that dominate them (40: the head attends to almost nothing),
 * some of their size, and very negative ones that change nothing, -inf included. */
static float sink_value(int h) {
    static const float v[] = {6.0f, -1e4f, 1.5f, -INFINITY, 40.0f, -0.5f, 3.0f, -30.0f};
    return v[h % 8];
}

/* out[t] of the naive attention: query t of the batch is at position p0 + t. sinks:
 * NULL, or [n_head] logits in the denominator only, not scaled (backend.h). */
static void naive_attention(const ring_case *rc, const float *q, const float *hk, const float *hv,
                            int p0, int n, int window, const float *sinks, float *out) {
    int kvd = rc->n_head_kv * rc->head_dim, qd = rc->n_head * rc->head_dim, hd = rc->head_dim;
    double scale = rc->scale != 0 ? rc->scale : 1.0 / sqrt((double)hd);
    double *sc = malloc((size_t)(p0 + n) * sizeof *sc);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < rc->n_head; h++) {
            int p = p0 + t, lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            int kvh = h / (rc->n_head / rc->n_head_kv);
            const float *qh = q + (size_t)t * qd + (size_t)h * hd;
            double mx = sinks ? sinks[h] : -INFINITY, sum = 0;
            for (int j = lo; j <= p; j++) {
                const float *kj = hk + (size_t)j * kvd + (size_t)kvh * hd;
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)qh[i] * kj[i];
                sc[j] = d * scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            if (sinks) sum = exp((double)sinks[h] - mx);
            for (int j = lo; j <= p; j++) sum += sc[j] = exp(sc[j] - mx);
            for (int i = 0; i < hd; i++) {
                double a = 0;
                for (int j = lo; j <= p; j++) a += sc[j] * hv[(size_t)j * kvd + (size_t)kvh * hd + i];
                out[(size_t)t * qd + (size_t)h * hd + i] = (float)(a / sum);
            }
        }
    free(sc);
}

/* After a batch ending at p_last: row r of the ring holds position
 * p_last - ((p_last - r) mod cap) of the history (backend.h), when that is >= 0. */
static double ring_error(const ring_case *rc, const pair *cache, const float *hist, int p_last) {
    int kvd = rc->n_head_kv * rc->head_dim;
    float *got = read_vk(&cache->vk, (size_t)rc->cap * kvd), *want = calloc((size_t)rc->cap * kvd, 4);
    for (int r = 0; r < rc->cap; r++) {
        int p = p_last - ((p_last - r) % rc->cap + rc->cap) % rc->cap;
        if (p >= 0) memcpy(want + (size_t)r * kvd, hist + (size_t)p * kvd, (size_t)kvd * 4);
        else memcpy(got + (size_t)r * kvd, want + (size_t)r * kvd, (size_t)kvd * 4);
    }
    double e = test_nmse(got, want, (size_t)rc->cap * kvd);
    free(got);
    free(want);
    return e;
}

static void one_ring(const ring_case *rc) {
    int kvd = rc->n_head_kv * rc->head_dim, qd = rc->n_head * rc->head_dim, total = 0;
    for (int i = 0; i < rc->n_steps; i++) total += rc->steps[i];
    float *hk = random_floats((size_t)total * kvd, 2.0f), *hv = random_floats((size_t)total * kvd, 1.0f);
    pair kc, vc, sk;
    act_pair(kvd, rc->cap, NULL, &kc);
    act_pair(kvd, rc->cap, NULL, &vc);
    float *sv = NULL;
    if (rc->sinks) {
        sv = keep_alloc((size_t)rc->n_head * sizeof(float));
        for (int h = 0; h < rc->n_head; h++) sv[h] = sink_value(h);
        weight_pair(AL_TYPE_F32, rc->n_head, 1, sv, &sk);
    }
    double worst = 0, worst_cache = 0, power = INFINITY, sink_power = INFINITY;
    for (int i = 0, p0 = 0; i < rc->n_steps; p0 += rc->steps[i], i++) {
        int n = rc->steps[i];
        float *qv = random_floats((size_t)n * qd, 2.0f);
        float *want = malloc((size_t)n * qd * 4), *all = malloc((size_t)n * qd * 4);
        pair q, k, v, out;
        act_pair(qd, n, qv, &q);
        act_pair(kvd, n, hk + (size_t)p0 * kvd, &k);
        act_pair(kvd, n, hv + (size_t)p0 * kvd, &v);
        act_pair(qd, n + 2, NULL, &out);
        al_attn_shape shape = {.n_head = rc->n_head, .n_head_kv = rc->n_head_kv,
                               .head_dim = rc->head_dim, .n_past = p0, .n_tokens = n,
                               .scale = rc->scale, .window = rc->window,
                               .sinks = rc->sinks ? &sk.vk : NULL};
        al_tensor ov = al_tensor_rows(&out.vk, 2, n); /* a view at an offset */
        g_vk->ops->attention(g_vk, &q.vk, &k.vk, &v.vk, &kc.vk, &vc.vk, &shape, &ov);
        naive_attention(rc, qv, hk, hv, p0, n, rc->window, sv, want);
        int n_bad;
        double e = compare_host(&ov, want, (size_t)n * qd, &n_bad, NULL);
        if (n_bad) e = INFINITY;
        double ec = ring_error(rc, &kc, hk, p0 + n - 1) + ring_error(rc, &vc, hv, p0 + n - 1);
        worst = e > worst ? e : worst;
        worst_cache = ec > worst_cache ? ec : worst_cache;
        /* the test's power: once the window cuts positions off, the windowed result
         * is far from attention over everything */
        if (rc->window > 0 && p0 + 1 > rc->window) {
            naive_attention(rc, qv, hk, hv, p0, n, 0, sv, all);
            double d = test_nmse(all, want, (size_t)n * qd);
            power = d < power ? d : power;
        }
        /* and the sinks' power: without them the result is far from this one */
        if (rc->sinks) {
            naive_attention(rc, qv, hk, hv, p0, n, rc->window, NULL, all);
            double d = test_nmse(all, want, (size_t)n * qd);
            sink_power = d < sink_power ? d : sink_power;
        }
        free_pair(&q);
        free_pair(&k);
        free_pair(&v);
        free_pair(&out);
        free(qv);
        free(want);
        free(all);
    }
    CHECK_MSG(worst <= 1e-6 && worst_cache <= 1e-12 && (rc->window == 0 || power > 1e-3) &&
              (!rc->sinks || sink_power > 1e-2),
              "attention %d/%d x %d window %d cap %d sinks %d: NMSE %g, caches %g, window "
              "effect %g, sink effect %g", rc->n_head, rc->n_head_kv, rc->head_dim, rc->window,
              rc->cap, rc->sinks, worst, worst_cache, power, sink_power);
    printf("  ring attention heads %d/%d dim %d window %d scale %g cap %d%s, %d positions: NMSE "
           "%.2e, caches %.1e", rc->n_head, rc->n_head_kv, rc->head_dim, rc->window,
           (double)rc->scale, rc->cap, rc->sinks ? " sinks" : "", total, worst, worst_cache);
    if (rc->window > 0) printf(", window effect %.2e", power);
    if (rc->sinks) printf(", sink effect %.2e", sink_power);
    printf("\n");
    free_pair(&kc);
    free_pair(&vc);
    free(hk);
    free(hv);
}

static void test_attention_ring(void) {
    /* window 20, batches of up to 30 in a ring of 20 - 1 + 30 = 49 rows: 136 positions,
     * the batch at 46 (and at 77, 107) crosses the ring's end; single-token decodes */
    const ring_case a = {8, 2, 64, 20, 0.3f, 49, 8, {30, 1, 15, 30, 1, 29, 1, 29}, false};
    /* window 70 (more positions than one 64-wide workgroup step), grouped 4:1, the
     * default scale, a ring of 70 - 1 + 40 = 109 rows over 161 positions */
    const ring_case b = {4, 1, 128, 70, 0.0f, 109, 6, {40, 1, 1, 40, 39, 40}, false};
    /* no window: the ring holds every position and never wraps */
    const ring_case c = {3, 3, 40, 0, 0.125f, 200, 5, {100, 1, 30, 1, 68}, false};
    /* window 1: a query sees only itself */
    const ring_case d = {2, 1, 32, 1, 0.5f, 16, 4, {16, 1, 16, 5}, false};
    one_ring(&a);
    one_ring(&b);
    one_ring(&c);
    one_ring(&d);
    /* with sinks (gpt-oss): a, b and c again, c grouped 2:1, each head its own sink */
    const ring_case as = {8, 2, 64, 20, 0.3f, 49, 8, {30, 1, 15, 30, 1, 29, 1, 29}, true};
    const ring_case bs = {4, 1, 128, 70, 0.0f, 109, 6, {40, 1, 1, 40, 39, 40}, true};
    const ring_case cs = {6, 3, 40, 0, 0.125f, 200, 5, {100, 1, 30, 1, 68}, true};
    one_ring(&as);
    one_ring(&bs);
    one_ring(&cs);
}

/* A weight of 150 MB: more than lavapipe's 128 MiB binding, so get_rows and both
 * matmul shaders must split it across bindings. */
static void test_big_weight(void) {
    int64_t n_in = 1024, n_out = 36000;
    pair w, out;
    weight_pair(AL_TYPE_F32, n_in, n_out, random_weight(AL_TYPE_F32, n_in, n_out), &w);
    int32_t ids[4] = {35999, 0, 20000, 33000};
    act_pair(n_in, 4, NULL, &out);
    g_cpu->ops->get_rows(g_cpu, &w.cpu, ids, 4, &out.cpu);
    g_vk->ops->get_rows(g_vk, &w.vk, ids, 4, &out.vk);
    double e = compare(&out);
    CHECK_MSG(e <= 1e-6, "get_rows of a split table: NMSE %g", e);
    printf("  get_rows across bindings NMSE %.2e\n", e);
    free_pair(&out);
    one_matmul(AL_TYPE_F32, &w, 2, false);
    one_matmul(AL_TYPE_F32, &w, 12, false);
}

/* ---- whole models: decode one token at a time, and several sequences at once ------------ */

/* The 48 prompt tokens of NAME.ref.json ("tokens": [...]). */
static int read_ref_tokens(const char *path, int32_t *tokens, int max) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strstr(buf, "\"tokens\"");
    p = p ? strchr(p, '[') : NULL;
    int k = 0;
    while (p && *p != ']' && k < max) {
        char *end;
        long v = strtol(p + 1, &end, 10);
        if (end == p + 1) break;
        tokens[k++] = (int32_t)v;
        p = end;
    }
    return k;
}

static float *read_floats(const char *path, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    float *v = malloc(n * sizeof *v);
    if (v && fread(v, sizeof *v, n, f) != n) {
        free(v);
        v = NULL;
    }
    fclose(f);
    return v;
}

/* Evaluates the reference prompt token by token (the decode path: matvec, a submit
 * per token, the cache growing one row at a time) and then the second half again as
 * two sequences stepped together with al_eval_multi (per-row rope and attention
 * views), comparing every position with the reference logits. */
static void decode_model(const char *name, double max_nmse) {
    char path[512];
    int32_t tok[64];
    snprintf(path, sizeof path, "%s/models/ref/%s.ref.json", test_shared_dir(), name);
    int n = read_ref_tokens(path, tok, 64);
    snprintf(path, sizeof path, "%s/models/ref/%s.gguf", test_shared_dir(), name);
    al_model_params mp = test_params("vulkan");
    al_model *m = NULL;
    if (n != 48 || al_model_load(path, &mp, &m) != AL_OK) {
        TEST_SKIP("%s: %s", name, n != 48 ? "no reference tokens" : al_last_error());
        return;
    }
    al_model_info mi;
    al_model_get_info(m, &mi);
    snprintf(path, sizeof path, "%s/models/ref/%s.logits.f32", test_shared_dir(), name);
    float *ref = read_floats(path, (size_t)n * (size_t)mi.n_vocab);
    float *got = malloc((size_t)n * (size_t)mi.n_vocab * sizeof *got);
    al_context_params cp = al_context_default_params();
    cp.n_ctx = n;
    al_context *c[2] = {NULL, NULL};
    CHECK(ref && got && al_context_create(m, &cp, &c[0]) == AL_OK &&
          al_context_create(m, &cp, &c[1]) == AL_OK);
    for (int i = 0; c[1] && i < n; i++)
        CHECK(al_eval(c[0], &tok[i], 1, got + (size_t)i * mi.n_vocab, false) == AL_OK);
    double e1 = ref ? test_nmse(got, ref, (size_t)n * mi.n_vocab) : 1;
    /* two sequences: the first half of the prompt into each, then one step of both per
     * position (both see the same tokens, so both must match the reference) */
    int half = n / 2;
    double e2 = 0;
    if (c[1]) {
        al_context_reset(c[0]);
        CHECK(al_eval(c[0], tok, half, NULL, false) == AL_OK);
        CHECK(al_eval(c[1], tok, half, NULL, false) == AL_OK);
        for (int i = half; i < n; i++) {
            int32_t two[2] = {tok[i], tok[i]};
            CHECK(al_eval_multi(c, two, 2, got) == AL_OK);
            double e = test_nmse(got, ref + (size_t)i * mi.n_vocab, mi.n_vocab) +
                       test_nmse(got + mi.n_vocab, ref + (size_t)i * mi.n_vocab, mi.n_vocab);
            e2 = e > e2 ? e : e2;
        }
    }
    CHECK_MSG(e1 <= max_nmse && e2 <= 2 * max_nmse, "%s: one at a time NMSE %g, multi %g", name,
              e1, e2);
    printf("  %s: token by token NMSE %.2e, two sequences at once NMSE %.2e\n", name, e1, e2);
    al_context_destroy(c[0]);
    al_context_destroy(c[1]);
    al_model_destroy(m);
    free(ref);
    free(got);
}

/* ref-llama-Q4_0 (4 layers) on Vulkan with vulkan.tune = tune, and a context of
 * n_ctx positions; false (and m, c as far as they came) when it cannot be run. */
static bool ref_llama_open(const char *tune, int n_ctx, al_model **m, al_context **c) {
    char path[512];
    snprintf(path, sizeof path, "%s/models/ref/ref-llama-Q4_0.gguf", test_shared_dir());
    al_model_params mp = test_params("vulkan");
    mp.vulkan.tune = tune;
    al_context_params cp = al_context_default_params();
    cp.n_ctx = n_ctx;
    *m = NULL, *c = NULL;
    return al_model_load(path, &mp, m) == AL_OK && al_context_create(*m, &cp, c) == AL_OK;
}

/* Dispatches of one decode step of ref-llama-Q4_0 (4 layers) and its logits; false
 * when the model cannot be run. */
static bool decode_step(const char *tune, uint64_t *n_disp, uint64_t *n_kv, float *logits,
                        int n_vocab, uint64_t *n_sub) {
    al_model *m;
    al_context *c;
    bool ok = ref_llama_open(tune, 8, &m, &c);
    vk_backend_stats s0, s1;
    int32_t tok[2] = {1, 334};
    ok = ok && al_eval(c, tok, 1, NULL, false) == AL_OK &&
         vk_backend_get_stats(model_backend(m), &s0) &&
         al_eval(c, tok + 1, 1, logits, false) == AL_OK &&
         vk_backend_get_stats(model_backend(m), &s1);
    /* the public counters (al_model_get_backend_stats, which anyllm bench reads) are
     * the backend's own */
    al_backend_stats bs;
    if (ok) al_model_get_backend_stats(m, &bs);
    CHECK_MSG(!ok || (bs.gpu && bs.n_dispatches == s1.n_dispatches &&
                      bs.n_submits == s1.n_submits && bs.record_s == s1.record_s &&
                      bs.wait_s == s1.wait_s && bs.gpu_s == s1.gpu_s && bs.n_timed == s1.n_timed &&
                      bs.weight_path && !strcmp(bs.weight_path, s1.weight_path) &&
                      bs.bytes_imported == s1.bytes_imported &&
                      bs.bytes_copied == s1.bytes_copied && bs.load_s == s1.load_s),
              "al_model_get_backend_stats: %llu dispatches, the backend %llu",
              (unsigned long long)bs.n_dispatches, (unsigned long long)s1.n_dispatches);
    *n_disp = ok ? s1.n_dispatches - s0.n_dispatches : 0;
    *n_kv = ok ? s1.n_kv_copies - s0.n_kv_copies : 0;
    if (n_sub) *n_sub = ok ? s1.n_submits - s0.n_submits : 0;
    CHECK_MSG(!ok || s1.n_validation == 0, "vulkan.tune %s: %d validation messages", tune,
              s1.n_validation);
    al_context_destroy(c);
    al_model_destroy(m);
    (void)n_vocab;
    return ok;
}

/* Op fusion, measured: a llama decode step with the GPU shaders and the norms fused
 * (cpu_rows=0,fuse_norm=1) takes 5 dispatches per layer (norm + q.k.v, rope of q and k
 * + attention + its cache stores, output projection + residual, norm + gate.up + SiLU,
 * down projection + residual) and 3 more (embedding, final norm, logits); 7 where the
 * two norms run alone: on a CPU device, and on GPUs by default (fuse_norm=0, see
 * pipelines.c); the plain ops took 15 per layer (vulkan.tune fuse=0) and two copies
 * into the caches. With only the attention's fusion off (fuse_attn=0): one more per
 * layer and the two copies. The logits stay those of the plain ops. */
static void test_dispatch_count(void) {
    enum { N_VOCAB = 1024, N_LAYER = 4 };
    static float fused[N_VOCAB], gpu[N_VOCAB], plain[N_VOCAB], no_attn[N_VOCAB];
    uint64_t n_fused = 0, n_gpu = 0, n_plain = 0, kv_fused = 0, kv_gpu = 0, kv_plain = 0;
    uint64_t n_na = 0, kv_na = 0;
    if (!decode_step("fuse=1", &n_fused, &kv_fused, fused, N_VOCAB, NULL) ||
        !decode_step("fuse=1,cpu_rows=0,fuse_norm=1", &n_gpu, &kv_gpu, gpu, N_VOCAB, NULL) ||
        !decode_step("fuse=0", &n_plain, &kv_plain, plain, N_VOCAB, NULL) ||
        !decode_step("fuse_attn=0", &n_na, &kv_na, no_attn, N_VOCAB, NULL)) {
        TEST_SKIP("ref-llama-Q4_0: %s", al_last_error());
        return;
    }
    double e = test_nmse(fused, plain, N_VOCAB), eg = test_nmse(gpu, plain, N_VOCAB);
    printf("  decode step of ref-llama-Q4_0: %llu dispatches fused, %llu with the GPU shaders, "
           "%llu plain; logits NMSE %.2e, %.2e\n", (unsigned long long)n_fused,
           (unsigned long long)n_gpu, (unsigned long long)n_plain, e, eg);
    vk_backend_stats st;
    CHECK(vk_backend_get_stats(g_vk, &st));
    const uint64_t alone = st.cpu_rows || !st.fuse_norm ? 2 : 0; /* the norms' dispatches */
    CHECK_MSG(n_fused == (5 + alone) * N_LAYER + 3, "fused: %llu dispatches",
              (unsigned long long)n_fused);
    CHECK_MSG(n_gpu == 5 * N_LAYER + 3, "GPU shaders: %llu dispatches", (unsigned long long)n_gpu);
    CHECK_MSG(n_plain == 15 * N_LAYER + 3, "plain: %llu dispatches", (unsigned long long)n_plain);
    CHECK_MSG(kv_fused == 0 && kv_gpu == 0 && kv_plain == 2 * N_LAYER,
              "copies into the caches: %llu fused, %llu GPU shaders, %llu plain",
              (unsigned long long)kv_fused, (unsigned long long)kv_gpu,
              (unsigned long long)kv_plain);
    const double ena = test_nmse(no_attn, plain, N_VOCAB);
    CHECK_MSG(n_na == (6 + alone) * N_LAYER + 3 && kv_na == 2 * N_LAYER && ena <= 1e-10,
              "fuse_attn=0: %llu dispatches, %llu copies, logits NMSE %g against the plain ops",
              (unsigned long long)n_na, (unsigned long long)kv_na, ena);
    CHECK_MSG(e <= 1e-10, "fused and plain logits differ: NMSE %g", e);
    /* the GPU shaders' norm sums its squares in another order: rounding, no more */
    CHECK_MSG(eg <= 1e-8, "GPU-shader and plain logits differ: NMSE %g", eg);
}

/* A prompt of 40 tokens through ref-llama-Q4_0 with vulkan.tune = tune (on a CPU
 * device, three blocks of tokens: ops of several dispatches): the last token's logits
 * and the submissions; the validation layer must report nothing. */
static bool prompt_step(const char *tune, float *logits, uint64_t *n_sub) {
    al_model *m;
    al_context *c;
    bool ok = ref_llama_open(tune, 48, &m, &c);
    int32_t tok[40];
    for (int i = 0; i < 40; i++) tok[i] = 1 + 37 * i % 300;
    vk_backend_stats s0, s1;
    ok = ok && vk_backend_get_stats(model_backend(m), &s0) &&
         al_eval(c, tok, 40, logits, false) == AL_OK &&
         vk_backend_get_stats(model_backend(m), &s1);
    *n_sub = ok ? s1.n_submits - s0.n_submits : 0;
    CHECK_MSG(!ok || s1.n_validation == 0, "prompt, vulkan.tune %s: %d validation messages",
              tune, s1.n_validation);
    al_context_destroy(c);
    al_model_destroy(m);
    return ok;
}

/* Submission in chunks (vulkan.tune chunk=N, stream.c): a decode step submitted
 * every 4 dispatches, the device running each while the host records the next, gives
 * the logits of one submission bit for bit, in more submissions; and with the GPU
 * shaders (cpu_rows=0), whose hazards differ. */
static void test_chunked_submission(void) {
    enum { N_VOCAB = 1024 };
    static float one[N_VOCAB], chunked[N_VOCAB];
    /* one submission; chunks of 4 (decode); chunks of 3 (a prompt) */
    const char *tunes[][3] = {{"chunk=0", "chunk=4", "chunk=3"},
                              {"cpu_rows=0,chunk=0", "cpu_rows=0,chunk=4", "cpu_rows=0,chunk=3"}};
    for (int i = 0; i < 2; i++) {
        uint64_t n1 = 0, n2 = 0, kv = 0, sub1 = 0, sub2 = 0;
        if (!decode_step(tunes[i][0], &n1, &kv, one, N_VOCAB, &sub1) ||
            !decode_step(tunes[i][1], &n2, &kv, chunked, N_VOCAB, &sub2)) {
            TEST_SKIP("ref-llama-Q4_0: %s", al_last_error());
            return;
        }
        printf("  %s: %llu dispatches in %llu submissions; %s: in %llu\n", tunes[i][0],
               (unsigned long long)n1, (unsigned long long)sub1, tunes[i][1],
               (unsigned long long)sub2);
        /* a submission per 4 dispatches and the last, up to VK_CHUNKS buffers */
        enum { CHUNKS = 8 }; /* VK_CHUNKS, vulkan/vk.h */
        const uint64_t want = n2 / 4 + 1 < CHUNKS ? n2 / 4 + 1 : CHUNKS;
        CHECK_MSG(sub1 == 1 && sub2 == want && n1 == n2,
                  "%s: %llu submissions of %llu dispatches (one: %llu)", tunes[i][1],
                  (unsigned long long)sub2, (unsigned long long)n2, (unsigned long long)sub1);
        CHECK_MSG(!memcmp(one, chunked, sizeof one), "%s: other logits than %s", tunes[i][1],
                  tunes[i][0]);
        /* a prompt, whose ops take several dispatches each, chunks ending between them
         * (every 3: a chunk's end falls on each position in turn) */
        const char *tune3 = tunes[i][2];
        if (!prompt_step(tunes[i][0], one, &sub1) || !prompt_step(tune3, chunked, &sub2)) {
            TEST_SKIP("ref-llama-Q4_0: %s", al_last_error());
            return;
        }
        printf("  a prompt of 40 tokens: %llu submissions with %s, %llu with %s\n",
               (unsigned long long)sub1, tunes[i][0], (unsigned long long)sub2, tune3);
        CHECK_MSG(sub2 > sub1, "%s: %llu submissions, as many as one", tune3,
                  (unsigned long long)sub2);
        CHECK_MSG(!memcmp(one, chunked, sizeof one), "prompt, %s: other logits than %s", tune3,
                  tunes[i][0]);
    }
}

/* Dispatches of one al_eval_multi step of N_SEQ sequences of ref-llama-Q4_0 at
 * different positions (1, 2, ... N_SEQ tokens in), with the fused ops on or off, and
 * the step's logits; false when the model cannot be run. */
enum { N_SEQ = VK_SEQ_ROWS + 2 };
static bool multi_step(const char *tune, uint64_t *n_disp, uint64_t *n_kv, float *logits) {
    char path[512];
    snprintf(path, sizeof path, "%s/models/ref/ref-llama-Q4_0.gguf", test_shared_dir());
    al_model_params mp = test_params("vulkan");
    mp.vulkan.tune = tune;
    al_model *m = NULL;
    al_context *c[N_SEQ] = {0};
    al_context_params cp = al_context_default_params();
    cp.n_ctx = N_SEQ + 2;
    bool ok = al_model_load(path, &mp, &m) == AL_OK;
    int32_t tok[N_SEQ + 1];
    for (int i = 0; i <= N_SEQ; i++) tok[i] = 1 + 97 * i % 200;
    for (int i = 0; i < N_SEQ && ok; i++)
        ok = al_context_create(m, &cp, &c[i]) == AL_OK && al_eval(c[i], tok, i + 1, NULL, false) == AL_OK;
    vk_backend_stats s0, s1;
    ok = ok && vk_backend_get_stats(model_backend(m), &s0) &&
         al_eval_multi(c, tok + 1, N_SEQ, logits) == AL_OK &&
         vk_backend_get_stats(model_backend(m), &s1);
    *n_disp = ok ? s1.n_dispatches - s0.n_dispatches : 0;
    *n_kv = ok ? s1.n_kv_copies - s0.n_kv_copies : 0;
    for (int i = 0; i < N_SEQ; i++) al_context_destroy(c[i]);
    al_model_destroy(m);
    return ok;
}

/* al_eval_multi: the rope and attention of VK_SEQ_ROWS sequences in one dispatch per
 * layer (each over its own caches, which the shader writes): 6 + ceil(N_SEQ /
 * VK_SEQ_ROWS) per layer on a CPU device and no copies, against 12 + 3 N_SEQ with the
 * plain ops (a rope of q and of k and an attention per sequence) and 2 N_SEQ copies
 * into the caches; the same logits. */
static void test_dispatch_count_multi(void) {
    enum { N_VOCAB = 1024, N_LAYER = 4 };
    static float fused[N_SEQ * N_VOCAB], plain[N_SEQ * N_VOCAB];
    uint64_t n_fused = 0, n_plain = 0, kv_fused = 0, kv_plain = 0;
    if (!multi_step("fuse=1", &n_fused, &kv_fused, fused) ||
        !multi_step("fuse=0", &n_plain, &kv_plain, plain)) {
        TEST_SKIP("ref-llama-Q4_0: %s", al_last_error());
        return;
    }
    double e = test_nmse(fused, plain, N_SEQ * N_VOCAB);
    printf("  al_eval_multi of %d sequences: %llu dispatches fused, %llu plain; logits NMSE %.2e\n",
           N_SEQ, (unsigned long long)n_fused, (unsigned long long)n_plain, e);
    /* more tokens than matvec.comp takes (mv_max_tok, 8) go to matmul.comp, which fuses
     * only the residual adds: norm, q, k, v, o, norm, gate, up, SiLU, down */
    vk_backend_stats st;
    CHECK(vk_backend_get_stats(g_vk, &st));
    const int n_attn = (N_SEQ + VK_SEQ_ROWS - 1) / VK_SEQ_ROWS, n_rest = st.cpu_rows ? 6 : 10;
    CHECK_MSG(n_fused == (uint64_t)(n_rest + n_attn) * N_LAYER + 3, "fused: %llu dispatches",
              (unsigned long long)n_fused);
    CHECK_MSG(n_plain == (12 + 3 * N_SEQ) * N_LAYER + 3, "plain: %llu dispatches",
              (unsigned long long)n_plain);
    CHECK_MSG(kv_fused == 0 && kv_plain == 2 * N_SEQ * N_LAYER,
              "copies into the caches: %llu fused, %llu plain", (unsigned long long)kv_fused,
              (unsigned long long)kv_plain);
    CHECK_MSG(e <= 1e-10, "fused and plain logits differ: NMSE %g", e);
}

static void test_decode(void) {
    decode_model("ref-llama-f32", 1e-4);
    decode_model("ref-llama-Q4_K_M", 1e-3);
    decode_model("ref-qwen2-Q8_0", 1e-3);
}

/* al_model_params.progress: a GPU taking the weights reports its share done, rising to
 * exactly 1, once per layer. */
typedef struct load_seen {
    int calls;
    double last;
    bool rising;
} load_seen;

static void on_load(void *user, double done) {
    load_seen *s = user;
    s->rising &= done > s->last && done <= 1.0;
    s->last = done;
    s->calls++;
}

static void test_load_progress(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/models/ref/ref-llama-Q8_0.gguf", test_shared_dir());
    load_seen seen = {.rising = true};
    al_model_params mp = test_params("vulkan");
    mp.progress = on_load;
    mp.progress_user = &seen;
    al_model *m = NULL;
    CHECK_MSG(al_model_load(path, &mp, &m) == AL_OK, "%s", al_last_error());
    if (!m) return;
    al_model_info mi;
    al_model_get_info(m, &mi);
    CHECK_MSG(seen.calls == mi.n_layer && seen.rising && seen.last == 1.0,
              "%d calls for %d layers, last %g, rising %d", seen.calls, mi.n_layer, seen.last,
              seen.rising);
    al_model_destroy(m);
}

/* ---- two threads on one model ------------------------------------------------------------ */

enum { MT_PROMPT = 8, MT_STEPS = 8, MT_ROUNDS = 3, MT_N = MT_PROMPT + MT_STEPS };

/* One thread's work: its own context on the shared model, MT_ROUNDS times a prompt
 * of MT_PROMPT tokens (all logits) then MT_STEPS single-token steps. */
typedef struct mt_job {
    al_model *m;
    const int32_t *tok;  /* [MT_N] */
    int n_vocab, rounds;
    float *got;          /* [rounds][MT_N][n_vocab] */
    al_status st;
    char err[256];
} mt_job;

static void *mt_run(void *arg) {
    mt_job *j = arg;
    al_context_params cp = al_context_default_params();
    cp.n_ctx = MT_N;
    al_context *c = NULL;
    j->st = al_context_create(j->m, &cp, &c);
    for (int r = 0; j->st == AL_OK && r < j->rounds; r++) {
        float *out = j->got + (size_t)r * MT_N * j->n_vocab;
        al_context_reset(c);
        j->st = al_eval(c, j->tok, MT_PROMPT, out, true);
        for (int i = MT_PROMPT; j->st == AL_OK && i < MT_N; i++)
            j->st = al_eval(c, &j->tok[i], 1, out + (size_t)i * j->n_vocab, false);
    }
    if (j->st != AL_OK) snprintf(j->err, sizeof j->err, "%s", al_last_error());
    al_context_destroy(c);
    return NULL;
}

/* Logits of both sequences on model path with backend spec, one thread after the
 * other (one round each); false with a skip when the model cannot be loaded. */
static bool mt_serial(const char *path, const char *spec, const int32_t *tok[2], int n_vocab,
                      float *out[2]) {
    al_model_params mp = test_params(spec);
    mp.n_threads = 2;
    al_model *m = NULL;
    if (al_model_load(path, &mp, &m) != AL_OK) return false;
    for (int t = 0; t < 2; t++) {
        mt_job j = {.m = m, .tok = tok[t], .n_vocab = n_vocab, .rounds = 1, .got = out[t]};
        mt_run(&j);
        CHECK_MSG(j.st == AL_OK, "%s, one thread: %s", spec, j.err);
    }
    al_model_destroy(m);
    return true;
}

/* anyllm.h: a model may be shared by threads, one context per thread. Two threads
 * evaluate different sequences on one Vulkan model at the same time, several rounds
 * each; every round's logits must equal those of the same sequence evaluated alone on
 * Vulkan, and agree with the CPU reference ops. (With one command buffer per model,
 * this crashed in the driver.) */
static void test_two_threads(void) {
    char path[512];
    int32_t seq[2][MT_N];
    snprintf(path, sizeof path, "%s/models/ref/ref-llama-Q8_0.ref.json", test_shared_dir());
    if (read_ref_tokens(path, seq[0], MT_N) != MT_N) {
        TEST_SKIP("no reference tokens in %s", path);
        return;
    }
    snprintf(path, sizeof path, "%s/models/ref/ref-llama-Q8_0.gguf", test_shared_dir());
    int n_vocab = 0;
    {
        al_model *m = NULL;
        if (al_model_load(path, NULL, &m) != AL_OK) {
            TEST_SKIP("%s: %s", path, al_last_error());
            return;
        }
        al_model_info mi;
        al_model_get_info(m, &mi);
        n_vocab = mi.n_vocab;
        al_model_destroy(m);
    }
    for (int i = 0; i < MT_N; i++) seq[1][i] = (seq[0][MT_N - 1 - i] * 7 + 3) % n_vocab;
    const int32_t *tok[2] = {seq[0], seq[1]};
    size_t per = (size_t)MT_N * n_vocab;
    float *cpu[2], *alone[2], *got[2];
    for (int t = 0; t < 2; t++) {
        cpu[t] = malloc(per * sizeof(float));
        alone[t] = malloc(per * sizeof(float));
        got[t] = malloc(MT_ROUNDS * per * sizeof(float));
        AL_ASSERT(cpu[t] && alone[t] && got[t]);
    }
    CHECK(mt_serial(path, "cpu", tok, n_vocab, cpu));
    CHECK(mt_serial(path, "vulkan", tok, n_vocab, alone));
    al_model_params mp = test_params("vulkan");
    al_model *m = NULL;
    CHECK(al_model_load(path, &mp, &m) == AL_OK);
    mt_job jobs[2];
    pthread_t th[2];
    for (int t = 0; m && t < 2; t++) {
        jobs[t] = (mt_job){.m = m, .tok = tok[t], .n_vocab = n_vocab, .rounds = MT_ROUNDS,
                           .got = got[t]};
        CHECK(pthread_create(&th[t], NULL, mt_run, &jobs[t]) == 0);
    }
    for (int t = 0; m && t < 2; t++) pthread_join(th[t], NULL);
    double worst_alone = 0, worst_cpu = 0;
    for (int t = 0; m && t < 2; t++) {
        CHECK_MSG(jobs[t].st == AL_OK, "thread %d: %s", t, jobs[t].err);
        for (int r = 0; r < MT_ROUNDS; r++) {
            double a = test_nmse(got[t] + r * per, alone[t], per);
            double c = test_nmse(got[t] + r * per, cpu[t], per);
            worst_alone = a > worst_alone ? a : worst_alone;
            worst_cpu = c > worst_cpu ? c : worst_cpu;
        }
    }
    /* the same commands on the same device: equal up to float noise, while a mix-up
     * of the two sequences' state gives NMSE of order 1 */
    CHECK_MSG(worst_alone <= 1e-9 && worst_cpu <= 1e-3,
              "two threads: NMSE %g against one thread, %g against the CPU", worst_alone, worst_cpu);
    printf("  two threads x %d rounds: NMSE %.2e against one thread, %.2e against the CPU "
           "reference ops\n", MT_ROUNDS, worst_alone, worst_cpu);
    vk_backend_stats s;
    if (m && vk_backend_get_stats(model_backend(m), &s))
        CHECK_MSG(s.n_validation == 0, "two threads: %d validation messages", s.n_validation);
    al_model_destroy(m);
    for (int t = 0; t < 2; t++) free(cpu[t]), free(alone[t]), free(got[t]);
}

/* ---- configuration and failures ---------------------------------------------------------- */

static void check_validation(void) {
    vk_backend_stats s;
    CHECK(vk_backend_get_stats(g_vk, &s));
    CHECK_MSG(s.n_validation == 0, "%d validation messages", s.n_validation);
    printf("  weights: %s, %llu bytes imported, %llu copied; %llu submits, %llu dispatches; "
           "%d validation messages\n", s.weight_path, (unsigned long long)s.bytes_imported,
           (unsigned long long)s.bytes_copied, (unsigned long long)s.n_submits,
           (unsigned long long)s.n_dispatches, s.n_validation);
}

static void test_unsupported_type(void) {
    static uint8_t bytes[4096];
    al_tensor w = {.type = 16 /* IQ2_XXS: no shaders */, .ne = {256, 2}, .data = bytes,
                   .row_bytes = 66};
    al_status st = g_vk->ops->weight_load(g_vk, &w);
    CHECK(st == AL_ERR_UNSUPPORTED);
    printf("  %s\n", al_last_error());
}

/* A weight whose one row exceeds a storage binding (128 MiB on lavapipe) is refused
 * by weight_load, at load time; nothing of it is read. */
static void test_row_too_wide(void) {
    static uint8_t bytes[64];
    al_tensor w = {.type = AL_TYPE_F32, .ne = {(int64_t)1 << 30, 2}, .data = bytes,
                   .row_bytes = (uint64_t)4 << 30};
    al_status st = g_vk->ops->weight_load(g_vk, &w);
    CHECK(st == AL_ERR_UNSUPPORTED && strstr(al_last_error(), "exceeds"));
    printf("  %s\n", al_last_error());
}

/* The load-time capability check: a shape like a real model passes; each limit of the
 * shaders or the device is refused with a message naming it. */
static void test_supports(void) {
    const al_model_shape ok_shape = {.n_vocab = 32000, .n_embd = 2048, .n_ff = 8192,
                                     .n_head = 32, .n_head_kv = 8, .head_dim = 64, .n_rot = 64,
                                     .max_batch = 512, .logit_rows = 16};
    CHECK(g_vk->ops->supports(g_vk, &ok_shape) == AL_OK);
    al_model_shape s = ok_shape;
    s.head_dim = 576; /* latent attention's rows: the shader's wide build */
    CHECK(g_vk->ops->supports(g_vk, &s) == AL_OK);
    s.head_dim = 577;
    CHECK(g_vk->ops->supports(g_vk, &s) == AL_ERR_UNSUPPORTED &&
          strstr(al_last_error(), "head size 577"));
    printf("  %s\n", al_last_error());
    s = ok_shape;
    s.n_ff = 1 << 21; /* 512 rows of it: 4 GiB, beyond any storage binding (32 bits) */
    CHECK(g_vk->ops->supports(g_vk, &s) == AL_ERR_UNSUPPORTED && strstr(al_last_error(), "binding"));
    printf("  %s\n", al_last_error());
}

static void test_no_loader(void) {
    al_set_vulkan_instance("/nonexistent/libvulkan.so.1", g_validation);
    al_backend *be = NULL;
    al_status st = vk_backend_create(0, &g_vs, &be);
    CHECK(st == AL_ERR_UNSUPPORTED && be == NULL);
    printf("  no loader: %s\n", al_last_error());
    const al_model_params mp = test_params("auto");
    st = backend_create("auto", 1, &mp, &be); /* falls back to the CPU, saying why */
    CHECK(st == AL_OK && be && !strcmp(be->ops->name, "cpu"));
    if (be) be->ops->destroy(be);
    al_set_vulkan_instance(NULL, g_validation);
}

/* The public device calls `anyllm devices` is built on (anyllm.h): the count matches
 * al_backend_list, details start with the device's al_backend_describe name and cut
 * short into a small buffer, a name that is no GPU is an argument error, and with no
 * loader the count is -1 with the reason. */
static void test_gpu_public(void) {
    const int n = al_gpu_count();
    const char *names[16];
    const int n_list = al_backend_list(names, 16);
    int n_vk = 0;
    for (int i = 0; i < n_list && i < 16; i++)
        n_vk += !strncmp(names[i], "vulkan:", 7);
    CHECK_MSG(n >= 1 && n == n_vk, "al_gpu_count %d, al_backend_list %d GPUs", n, n_vk);
    char name[256], want[300], buf[4096];
    CHECK(al_backend_describe("vulkan:0", name, sizeof name) == AL_OK);
    snprintf(want, sizeof want, "vulkan:0  %s\n", name);
    CHECK(al_gpu_details("vulkan:0", buf, sizeof buf) == AL_OK);
    CHECK_MSG(!strncmp(buf, want, strlen(want)) && strstr(buf, "\n  driver "),
              "details: %.80s", buf);
    char small[12];
    CHECK(al_gpu_details("vulkan:0", small, sizeof small) == AL_OK);
    CHECK(strlen(small) == sizeof small - 1 && !strncmp(small, want, sizeof small - 1));
    CHECK(al_gpu_details("cpu", buf, sizeof buf) == AL_ERR_ARG && buf[0] == 0);
    CHECK(strstr(al_last_error(), "'cpu'") != NULL);
    CHECK(al_gpu_details("vulkan:99", buf, sizeof buf) == AL_ERR_ARG);
    CHECK(al_gpu_details("vulkan:0", NULL, 8) == AL_ERR_ARG);
    double gbs = -1;
    CHECK(al_gpu_bandwidth("vulkan:99", &gbs) == AL_ERR_ARG && gbs == 0);
    CHECK(al_gpu_bandwidth("vulkan:0", NULL) == AL_ERR_ARG);
    CHECK(al_gpu_bandwidth("vulkan:0", &gbs) == AL_OK && gbs > 0);
    al_set_vulkan_instance("/nonexistent/libvulkan.so.1", g_validation);
    CHECK(al_gpu_count() == -1 && strstr(al_last_error(), "/nonexistent") != NULL);
    al_set_vulkan_instance(NULL, g_validation);
    printf("  %d GPU(s); vulkan:0 copies at %.1f GB/s\n", n, gbs);
}

static void test_bad_index(void) {
    al_backend *be = NULL;
    al_status st = vk_backend_create(200, &g_vs, &be);
    CHECK(st == AL_ERR_ARG && be == NULL);
    printf("  %s\n", al_last_error());
}

/* With only a software device (lavapipe), "auto" must not pick it. */
static void test_auto_skips_software(void) {
    if (!strstr(g_vk->desc, "llvmpipe")) {
        TEST_SKIP("the device is not lavapipe");
        return;
    }
    al_backend *be = NULL;
    const al_model_params mp = test_params("auto");
    CHECK(backend_create("auto", 1, &mp, &be) == AL_OK && be);
    if (be) {
        CHECK(!strcmp(be->ops->name, "cpu"));
        be->ops->destroy(be);
    }
}

/* A fence timeout of 0 (look once, do not wait) under a 4 GFLOP matmul, which no
 * device finishes between the submit and the look: the op fails, sync reports it, the
 * backend refuses further work, and nothing crashes. The backend is left alive
 * (leaked) on purpose: its device may still be running the command buffer. */
static void test_fence_timeout(void) {
    al_backend *be = NULL;
    al_status st = vk_backend_create(0, &g_vs, &be);
    if (st == AL_OK) st = be->ops->reserve(be, 4096, 64);
    int64_t n_in = 4096, n_out = 4096, n_tok = 64;
    al_tensor w = {.type = AL_TYPE_F32, .ne = {n_in, n_out},
                   .data = random_weight(AL_TYPE_F32, n_in, n_out), .row_bytes = (uint64_t)n_in * 4};
    al_tensor x, out;
    if (st == AL_OK) st = be->ops->weight_load(be, &w); /* with the normal timeout */
    if (st == AL_OK) st = be->ops->tensor_alloc(be, n_in, n_tok, &x);
    if (st == AL_OK) st = be->ops->tensor_alloc(be, n_out, n_tok, &out);
    if (st == AL_OK) st = be->ops->sync(be);
    CHECK_MSG(st == AL_OK, "setting up: %s", al_last_error());
    if (st != AL_OK) return;
    vk_backend_set_timeout(be, 0);
    be->ops->matmul(be, &x, &w, NULL, &out);
    be->ops->matmul(be, &x, &w, NULL, &out);
    st = be->ops->sync(be);
    CHECK(st == AL_ERR_DEVICE);
    printf("  %s\n", al_last_error());
    CHECK(be->ops->tensor_alloc(be, 4, 4, &x) == AL_ERR_DEVICE); /* sticky */
}

static void run_suite(const char *label) {
    printf("-- %s: %s\n", label, g_vk->desc);
    TEST_RUN(test_get_rows);
    TEST_RUN(test_rms_norm);
    TEST_RUN(test_matmul);
    TEST_RUN(test_rope);
    TEST_RUN(test_fused_matmul);
    TEST_RUN(test_matmul_multi);
    TEST_RUN(test_rope_qk);
    TEST_RUN(test_rope_qk_rows);
    TEST_RUN(test_attention);
    TEST_RUN(test_attention_ring);
    TEST_RUN(test_elementwise);
    TEST_RUN(test_gelu_scale);
    TEST_RUN(test_swiglu_oai);
    TEST_RUN(test_add_rows);
    TEST_RUN(test_rms_norm_heads);
    TEST_RUN(test_unsupported_type);
    TEST_RUN(test_row_too_wide);
    TEST_RUN(test_supports);
    TEST_RUN(check_validation);
}

static bool create_vk(void) {
    al_status st = vk_backend_create(0, &g_vs, &g_vk);
    if (st == AL_OK) st = g_vk->ops->reserve(g_vk, 8192, 1024);
    if (st != AL_OK) printf("vulkan: %s\n", al_last_error());
    return st == AL_OK;
}

static void destroy_vk(void) {
    g_vk->ops->destroy(g_vk);
    g_vk = NULL;
    for (int i = 0; i < g_n_keep; i++) al_aligned_free(g_keep[i]);
    g_n_keep = 0;
}

/* The prompt matmul's other tiles (gpu-check.sh sweeps them), against the reference:
 * 8 x 4 per invocation (two vec4 groups of rows, one of tokens) on a tile taller than
 * test_matmul's 67 rows, and 4 x 8 on one shorter. A tuning the backend rejects fails. */
static void test_matmul_tiles(void) {
    const char *tunes[] = {"cpu_rows=0,mm_bm=128,mm_bn=64,mm_tm=8,mm_tn=4",
                           "cpu_rows=0,mm_bm=32,mm_bn=64,mm_tm=4,mm_tn=8"};
    for (int i = 0; i < 2; i++) {
        g_vs.tune = tunes[i];
        const bool ok = create_vk();
        CHECK_MSG(ok, "vulkan.tune %s: no backend", tunes[i]);
        if (!ok) continue;
        printf("  vulkan.tune %s\n", tunes[i]);
        test_matmul();
        check_validation();
        destroy_vk();
    }
    g_vs.tune = "cpu_rows=0,fuse_norm=1"; /* the caller's */
}

/* Prompts' matmuls on cooperative matrices (matmul_cm.comp), every weight type, also
 * in the fused ops where fused: its emulation (coopmat=2: the same tiles, offsets and
 * strides with plain arithmetic for the cooperative-matrix calls) on any device, the
 * real one (coopmat=1) where the device has the extension. fp16 inputs: f32 weights
 * within 1e-5 NMSE. True where it ran: false where the backend failed or the device has
 * no cooperative matrices (the real build's skip), so a caller tries no further tile. */
static bool run_coopmat(const char *tune, bool emulated, bool fused) {
    g_vs.tune = tune;
    const bool ok = create_vk();
    CHECK_MSG(ok, "vulkan.tune %s: no backend", tune);
    if (!ok) return false;
    vk_backend_stats st = {0};
    CHECK(vk_backend_get_stats(g_vk, &st));
    CHECK_MSG(st.coopmat || !emulated, "vulkan.tune %s: the emulation is not in use", tune);
    if (st.coopmat) {
        printf("  vulkan.tune %s on %s\n", tune, g_vk->desc);
        g_f32_tol = 1e-5;
        test_matmul();
        if (fused) test_fused_matmul();
        check_validation();
        g_f32_tol = 1e-6;
    } else if (!emulated) {
        TEST_SKIP("%s has no cooperative matrices (VK_NV_cooperative_matrix with 16x16x16 "
                  "fp16 blocks and fp32 sums, subgroups of 32)", g_vk->desc);
    }
    destroy_vk();
    return st.coopmat;
}

/* the default tile, and tiles of 4 x 1 and 1 x 3 blocks per subgroup */
static void test_matmul_coopmat_emulated(void) {
    run_coopmat("cpu_rows=0,fuse_norm=1,coopmat=2", true, true);
    run_coopmat("cpu_rows=0,fuse_norm=1,coopmat=2,cm_bm=128,cm_bn=32", true, false);
    run_coopmat("cpu_rows=0,fuse_norm=1,coopmat=2,cm_bm=32,cm_bn=96", true, false);
}

static void test_matmul_coopmat(void) {
    if (run_coopmat("cpu_rows=0,fuse_norm=1,coopmat=1", false, true))
        run_coopmat("cpu_rows=0,fuse_norm=1,coopmat=1,cm_bm=128,cm_bn=128", false, false);
}

int main(void) {
    const al_model_params cpu = test_params("cpu");
    if (backend_create("cpu", 2, &cpu, &g_cpu) != AL_OK || g_cpu->ops->reserve(g_cpu, 8192, 1024)) {
        printf("cpu backend: %s\n", al_last_error());
        return 1;
    }
    al_set_vulkan_instance(NULL, g_validation = true);
    if (!create_vk()) {
        /* the layer may be missing: run without it */
        al_set_vulkan_instance(NULL, g_validation = false);
        if (!create_vk()) {
            printf("skip: no usable Vulkan device\n");
            g_cpu->ops->destroy(g_cpu);
            printf("0 passed, 0 failed, 1 skipped\n");
            return 0;
        }
        printf("note: the validation layer is not installed; running without it\n");
    }
    run_suite("defaults");
    TEST_RUN(test_big_weight);
    TEST_RUN(test_decode);
    TEST_RUN(test_dispatch_count);
    TEST_RUN(test_chunked_submission);
    TEST_RUN(test_dispatch_count_multi);
    TEST_RUN(test_load_progress);
    TEST_RUN(test_two_threads);
    TEST_RUN(test_no_loader);
    TEST_RUN(test_gpu_public);
    TEST_RUN(test_bad_index);
    TEST_RUN(test_auto_skips_software);
    destroy_vk();

    g_vs.pretend_discrete = true;
    g_vs.no_subgroup = true;
    if (create_vk()) {
        run_suite("as a discrete GPU, no subgroup arithmetic");
        TEST_RUN(test_decode);
        TEST_RUN(test_two_threads); /* staged reads: each stream its own staging buffer */
        destroy_vk();
    }
    g_vs.pretend_discrete = false;
    g_vs.no_subgroup = false;

    g_vs.weights = "host";
    if (create_vk()) {
        printf("-- weights copied to host-visible memory: %s\n", g_vk->desc);
        TEST_RUN(test_matmul);
        TEST_RUN(check_validation);
        destroy_vk();
    }
    g_vs.weights = NULL;

    /* a CPU device takes matmul_rows.comp for every matmul: the GPUs' matvec.comp and
     * matmul.comp (and their fused builds) run here only when told to */
    g_vs.tune = "cpu_rows=0,fuse_norm=1";
    g_norm_fuses = true;
    if (create_vk()) {
        printf("-- the GPU matmul shaders (cpu_rows=0): %s\n", g_vk->desc);
        TEST_RUN(test_matmul);
        TEST_RUN(test_fused_matmul);
        TEST_RUN(test_matmul_multi);
        TEST_RUN(check_validation);
        destroy_vk();
    }
    TEST_RUN(test_matmul_tiles);
    TEST_RUN(test_matmul_coopmat_emulated);
    TEST_RUN(test_matmul_coopmat);
    g_vs.tune = "cpu_rows=0,fuse_norm=1"; /* as before them */
    g_vs.no_subgroup = true;              /* and their builds without subgroups */
    if (create_vk()) {
        printf("-- the GPU matmul shaders without subgroup arithmetic: %s\n", g_vk->desc);
        TEST_RUN(test_fused_matmul);
        TEST_RUN(test_matmul_multi);
        TEST_RUN(check_validation);
        destroy_vk();
    }
    g_vs.no_subgroup = false;
    g_norm_fuses = false;
    g_vs.tune = "attn_wg=256"; /* attention.comp in 4 teams */
    if (create_vk()) {
        printf("-- attention in 4 teams of 64 (attn_wg=256): %s\n", g_vk->desc);
        TEST_RUN(test_attention);
        TEST_RUN(test_attention_ring);
        TEST_RUN(check_validation);
        destroy_vk();
    }
    g_vs.tune = NULL;

    TEST_RUN(test_fence_timeout);
    g_cpu->ops->destroy(g_cpu);
    return test_finish();
}

#else /* !AL_HAVE_VULKAN */
int main(void) { return test_skip_program(TEST_NO_VULKAN); }
#endif
