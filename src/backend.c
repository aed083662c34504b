/* backend.c: choosing a backend by name, and the fused ops' plain fallbacks.
 *
 * "cpu" is always there. "vulkan" and "vulkan:N" exist when the build has the Vulkan
 * backend (AL_HAVE_VULKAN), which loads libvulkan at run time, so the same binary
 * runs where Vulkan is absent. "auto" takes the first GPU that works and otherwise
 * falls back to the CPU, saying why in the log (al_set_log): a missing driver or device is a
 * normal situation for "auto", not an error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/ops.h"
#include "util.h"

#ifdef AL_HAVE_VULKAN
al_status vk_backend_create(int device_index, const al_vulkan_settings *s, al_backend **out);
al_status vk_settings_check(const al_vulkan_settings *s);
int vk_list_devices(FILE *out);
int vk_device_name(int index, char *buf, size_t size);
int vk_device_details(int index, char *buf, size_t size);
al_status vk_measure_bandwidth(int device_index, double *gbs);
#endif

/* Parses "vulkan" or "vulkan:N"; -1 if spec names no Vulkan device. */
static int vulkan_device_index(const char *spec) {
    if (strncmp(spec, "vulkan", 6) != 0) return -1;
    if (spec[6] == 0) return 0;
    if (spec[6] != ':' || spec[7] < '0' || spec[7] > '9') return -1;
    char *end;
    long n = strtol(spec + 7, &end, 10);
    return *end || n > 255 ? -1 : (int)n;
}

static al_status vulkan_create(int device, const al_vulkan_settings *s, al_backend **out) {
#ifdef AL_HAVE_VULKAN
    return vk_backend_create(device, s, out);
#else
    (void)device;
    (void)s;
    *out = NULL;
    return al_error(AL_ERR_UNSUPPORTED, "this build of anyllm has no Vulkan backend");
#endif
}

#ifndef AL_HAVE_VULKAN
/* Nothing to configure (anyllm.h): accepted, so that a caller need not know the build. */
al_status al_set_vulkan_instance(const char *loader, bool validation) {
    (void)loader;
    (void)validation;
    return AL_OK;
}
#endif

/* Both backends' settings, whichever runs: a bad value is the caller's mistake even
 * where "auto" would not have used it. A build without Vulkan never reads its own. */
static al_status settings_check(const al_model_params *p) {
    al_status st = cpu_settings_check(&p->cpu);
#ifdef AL_HAVE_VULKAN
    if (st == AL_OK) st = vk_settings_check(&p->vulkan);
#endif
    return st;
}

al_status backend_create(const char *spec, int n_threads, const al_model_params *params,
                         al_backend **out) {
    *out = NULL;
    const al_model_params p = params ? *params : al_model_default_params();
    al_status st = settings_check(&p);
    if (st != AL_OK) return st;
    if (!spec || !strcmp(spec, "cpu")) return cpu_backend_create(n_threads, NULL, &p.cpu, out);
    if (!strncmp(spec, "cpu:", 4)) return cpu_backend_create(n_threads, spec + 4, &p.cpu, out);
    if (!strcmp(spec, "auto")) {
        /* -1: the first real GPU; a software Vulkan device is slower than the CPU */
        st = vulkan_create(-1, &p.vulkan, out);
        if (st == AL_OK || st == AL_ERR_NOMEM) return st;
        al_log(AL_LOG_WARN, "no usable GPU (%s); using the CPU", al_last_error());
        return cpu_backend_create(n_threads, NULL, &p.cpu, out);
    }
    int dev = vulkan_device_index(spec);
    if (dev >= 0) return vulkan_create(dev, &p.vulkan, out);
    return al_error(AL_ERR_ARG, "backend '%s' is not known (cpu, cpu:q8, cpu:precise, vulkan, vulkan:N, auto)",
                    spec);
}

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

const char *al_version(void) { return "0.5.0"; }

const char *al_backends(void) {
    static char s[96];
    snprintf(s, sizeof s, "cpu (%s)%s", cpu_isa_name(cpu_isa_best()),
#ifdef AL_HAVE_VULKAN
             ", vulkan"
#else
             ""
#endif
    );
    return s;
}

int al_backend_list(const char **names, int max) {
    if (!names) max = 0; /* a count alone */
    int n = 0;
    if (n < max) names[n] = "cpu";
    n++;
#ifdef AL_HAVE_VULKAN
    static const char *const vk[] = {"vulkan:0", "vulkan:1", "vulkan:2", "vulkan:3",
                                     "vulkan:4", "vulkan:5", "vulkan:6", "vulkan:7"};
    int n_vk = vk_list_devices(NULL);
    for (int i = 0; i < n_vk && i < (int)(sizeof vk / sizeof *vk); i++, n++)
        if (n < max) names[n] = vk[i];
#endif
    return n;
}

int al_gpu_count(void) {
#ifdef AL_HAVE_VULKAN
    return vk_list_devices(NULL);
#else
    al_error(AL_ERR_UNSUPPORTED, "this build has no Vulkan backend");
    return -1;
#endif
}

/* The device index a GPU backend name gives ("vulkan:N"), or -1 with an error naming
 * it (fn: the caller). Whether the machine has that device, the Vulkan calls say: each
 * enumeration creates an instance, and one per call is enough. */
static int gpu_index(const char *fn, const char *name) {
    const int dev = name ? vulkan_device_index(name) : -1;
    if (dev < 0)
        al_error(AL_ERR_ARG, "%s: '%s' is not a GPU of this machine (al_backend_list names them)",
                 fn, name ? name : "(null)");
    return dev;
}

al_status al_gpu_details(const char *name, char *buf, size_t size) {
    if (!buf || size == 0) return al_error(AL_ERR_ARG, "al_gpu_details: no buffer");
    buf[0] = 0;
    const int dev = gpu_index("al_gpu_details", name);
    if (dev < 0) return AL_ERR_ARG;
#ifdef AL_HAVE_VULKAN
    if (vk_device_details(dev, buf, size) == 0) return AL_OK;
#endif
    return al_error(AL_ERR_ARG, "al_gpu_details: '%s' is not a GPU of this machine "
                    "(al_backend_list names them)", name);
}

al_status al_gpu_bandwidth(const char *name, double *gbs) {
    if (!gbs) return al_error(AL_ERR_ARG, "al_gpu_bandwidth: no output");
    *gbs = 0;
    const int dev = gpu_index("al_gpu_bandwidth", name);
    if (dev < 0) return AL_ERR_ARG;
#ifdef AL_HAVE_VULKAN
    return vk_measure_bandwidth(dev, gbs);
#else
    return AL_ERR_ARG;
#endif
}

al_status al_backend_describe(const char *name, char *buf, size_t size) {
    if (!name || !buf || size == 0)
        return al_error(AL_ERR_ARG, "al_backend_describe: no name or no buffer");
    if (!strcmp(name, "cpu")) {
        snprintf(buf, size, "cpu %s", cpu_isa_name(cpu_isa_best()));
        return AL_OK;
    }
    int dev = vulkan_device_index(name);
    (void)dev; /* a build without Vulkan has no such backend */
#ifdef AL_HAVE_VULKAN
    if (dev >= 0 && vk_device_name(dev, buf, size) == 0) return AL_OK;
#endif
    return al_error(AL_ERR_ARG, "al_backend_describe: '%s' is not a backend of this machine "
                    "(al_backend_list names them)", name);
}
