/* vk_backend.c: the Vulkan backend objects: creation, the op table, capability
 * checks, reports.
 *
 * A model has one backend object, which owns the shared part (vk.h: vk_shared: the
 * device, pipelines and weights), and each of its contexts gets its own object
 * (context_backend) that borrows the shared part and has its own command stream, so
 * that contexts on different threads run at the same time.
 *
 * Creation walks loader -> instance -> device -> layouts -> command objects ->
 * the pipelines of the untyped ops, and any failure on the way unwinds through
 * vk_destroy, which copes with a half-built backend. Every failure is a status with
 * a one-line message, so backend_create("auto") can fall back to the CPU.
 */
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "vk.h"
#include "vk_backend.h"

/* ---- destroy ------------------------------------------------------------------------- */

/* The model's half: weights, pipelines, device. After a timeout on any stream the
 * device may still run those commands: leave everything be (leaked) rather than
 * destroy objects in use. */
static void destroy_shared(vk_backend *be) {
    vk_shared *sh = be->sh;
    bool busy = atomic_load(&sh->in_flight);
    if (sh->d.dev && !busy) {
        vk_weights_destroy(be);
        vk_pipelines_destroy(&sh->d, &sh->pl);
    }
    int n_val = atomic_load(&sh->d.n_validation);
    if (sh->d.caps.debug_utils && sh->d.dev)
        al_log(AL_LOG_INFO, "vulkan validation: %d messages", n_val);
    if (busy) return;
    vk_device_close(&sh->d);
    al_free(sh->prof);
    al_free(sh);
}

/* A context's backend goes before its model's, which owns what they share. */
static void vk_destroy(al_backend *base) {
    vk_backend *be = (vk_backend *)base;
    if (!be) return;
    if (be->sh) {
        if (be->sh->d.dev && !be->s.failed) vk_submit_wait(be);
        vk_stream_destroy(be);
        if (be->owns_shared) destroy_shared(be);
    }
    al_free(be);
}

/* ---- ops that live here ---------------------------------------------------------------- */

static al_status vk_reserve(al_backend *base, int64_t max_cols, int64_t max_ctx) {
    vk_backend *be = (vk_backend *)base;
    if (be->s.failed) return al_error(be->s.failed, "%s", be->s.fail_msg);
    al_status st = vk_scratch_reserve(be, max_cols, max_ctx);
    /* the zero fills of a context's new tensors (discrete devices) run now: another
     * context's stream may read these caches (al_eval_multi) */
    if (st == AL_OK && vk_submit_wait(be) != AL_OK)
        st = al_error(be->s.failed, "%s", be->s.fail_msg);
    return st;
}

static al_status vk_sync(al_backend *base) {
    vk_backend *be = (vk_backend *)base;
    vk_submit_wait(be);
    return be->s.failed ? al_error(be->s.failed, "%s", be->s.fail_msg) : AL_OK;
}

static al_status vk_context_backend(al_backend *base, al_backend **out);
static al_status vk_supports(al_backend *base, const al_model_shape *shape);
static void vk_stats(const al_backend *base, al_backend_stats *out);
static int vk_dispatch_times(const al_backend *base, al_dispatch_time *out, int max);

static const al_backend_ops vk_ops_table = {
    .name = "vulkan",
    .caps = AL_CAP_DEVICE,
    .kv_types = VK_KV_TYPES,
    .destroy = vk_destroy,
    .stats = vk_stats,
    .dispatch_times = vk_dispatch_times,
    .tensor_alloc = vk_tensor_alloc,
    .tensor_free = vk_tensor_free,
    .tensor_read = vk_tensor_read,
    .tensor_write = vk_tensor_write,
    .tensor_host = vk_tensor_host,
    .tensor_import = vk_tensor_import,
    .weight_load = vk_weight_load,
    .reserve = vk_reserve,
    .sync = vk_sync,
    .supports = vk_supports,
    .context_backend = vk_context_backend,
    .get_rows = vk_op_get_rows,
    .rms_norm = vk_op_rms_norm,
    .matmul = vk_op_matmul,
    .rope = vk_op_rope,
    .attention = vk_op_attention,
    .silu_mul = vk_op_silu_mul,
    .gelu_mul = vk_op_gelu_mul,
    .swiglu_oai = vk_op_swiglu_oai,
    .scale = vk_op_scale,
    .add = vk_op_add,
    .copy = vk_op_copy,
    .add_rows = vk_op_add_rows,
    .sigmoid_mul = vk_op_sigmoid_mul,
    .ssm_conv = vk_op_ssm_conv,
    .delta_net = vk_op_delta_net,
    .matmul_add = vk_op_matmul_add,
    .matmul_glu = vk_op_matmul_glu,
    .rope_qk = vk_op_rope_qk,
    .matmul_multi = vk_op_matmul_multi,
    .norm_matmul_glu = vk_op_norm_matmul_glu,
    .rope_qk_rows = vk_op_rope_qk_rows,
    .attention_rows = vk_op_attention_rows,
    .moe_ffn = vk_op_moe_ffn,
};

/* ---- create ----------------------------------------------------------------------------- */

/* The device for an index ("vulkan:N"), or for -1 the first real GPU. */
static al_status pick_device(vk_backend *be, int index, const al_vulkan_settings *s) {
    VkPhysicalDevice devs[16];
    uint32_t n = 16;
    al_status st = vk_physical_devices(&be->sh->d, devs, &n);
    if (st != AL_OK) return st;
    if (n == 0) return al_error(AL_ERR_UNSUPPORTED, "no Vulkan device: the loader found no driver");
    if (index < 0) {
        /* tests: vulkan.auto_software lets "auto" take a software renderer */
        const bool any = s->auto_software;
        for (uint32_t i = 0; i < n && index < 0; i++) {
            VkPhysicalDeviceProperties p;
            be->sh->d.fn.vkGetPhysicalDeviceProperties(devs[i], &p);
            if (p.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU || any) index = (int)i;
        }
        if (index < 0)
            return al_error(AL_ERR_UNSUPPORTED, "the only Vulkan devices are software renderers, "
                            "slower than the CPU backend (ask for --backend vulkan to use one)");
    }
    if ((uint32_t)index >= n)
        return al_error(AL_ERR_ARG, "vulkan:%d: there %s only %u Vulkan device%s (0..%u)", index,
                        n == 1 ? "is" : "are", n, n == 1 ? "" : "s", n - 1);
    be->sh->d.pdev = devs[index];
    vk_read_caps(&be->sh->d, be->sh->d.pdev, &be->sh->d.caps);
    if (s->pretend_discrete) be->sh->d.caps.uma = false; /* tests: the discrete paths */
    return AL_OK;
}

static al_status pick_weight_mode(vk_backend *be, const al_vulkan_settings *s) {
    const vk_caps *c = &be->sh->d.caps;
    be->sh->weight_mode = !c->uma ? VK_WEIGHTS_STAGING
                      : c->host_import && c->import_align ? VK_WEIGHTS_IMPORT
                                                          : VK_WEIGHTS_HOST;
    be->sh->max_weight_bytes = s->max_weight_bytes; /* tests: a small device */
    const char *w = s->weights;
    if (!w || !*w) return AL_OK;
    if (!strcmp(w, "staging")) be->sh->weight_mode = VK_WEIGHTS_STAGING;
    else if (!strcmp(w, "host") && c->uma) be->sh->weight_mode = VK_WEIGHTS_HOST;
    else if (!strcmp(w, "import") && c->uma && c->host_import)
        be->sh->weight_mode = VK_WEIGHTS_IMPORT;
    else
        return al_error(AL_ERR_ARG, "vulkan.weights '%s': expected import or host (unified "
                        "memory with host import) or staging", w);
    return AL_OK;
}

al_status vk_settings_check(const al_vulkan_settings *s) {
    const char *w = s ? s->weights : NULL;
    if (w && *w && strcmp(w, "import") && strcmp(w, "host") && strcmp(w, "staging"))
        return al_error(AL_ERR_ARG, "vulkan.weights '%s' is not one of import, host, staging", w);
    return s ? vk_tune_check(s->tune) : AL_OK;
}

static al_status open_backend(vk_backend *be, int index, const al_vulkan_settings *s) {
    al_status st;
    if ((st = vk_instance_create(&be->sh->d)) || (st = pick_device(be, index, s)) ||
        (st = vk_device_open(&be->sh->d)) || (st = pick_weight_mode(be, s)) ||
        (st = vk_pipelines_init(&be->sh->d, &be->sh->pl, s)) || (st = vk_stream_init(be)))
        return st;
    /* contexts copy it (vk_context_backend) */
    be->s.timeout_ns = (s->timeout_ms < 0 ? VK_DEFAULT_TIMEOUT_MS : (uint64_t)s->timeout_ms) *
                       1000000ull;
    /* the untyped ops models use (not copy: only bandwidth uses it), compiled now so
     * that a driver that cannot build them fails here, where "auto" can still fall back */
    static const vk_op untyped[] = {VK_OP_ADD, VK_OP_ADD_ROWS, VK_OP_SILU_MUL, VK_OP_GELU_MUL,
                                    VK_OP_SWIGLU_OAI, VK_OP_SCALE, VK_OP_RMS_NORM,
                                    VK_OP_ROPE, VK_OP_ATTENTION};
    for (size_t i = 0; i < sizeof untyped / sizeof *untyped; i++) {
        const vk_pipeline *p;
        if ((st = vk_pipeline_get(&be->sh->d, &be->sh->pl, untyped[i], 0, 0, &p))) return st;
    }
    snprintf(be->base.desc, sizeof be->base.desc, "vulkan %.56s", be->sh->d.caps.name);
    return AL_OK;
}

al_status vk_backend_create(int device_index, const al_vulkan_settings *s, al_backend **out) {
    *out = NULL;
    static const al_vulkan_settings defaults = {.timeout_ms = -1};
    if (!s) s = &defaults;
    al_status st = vk_settings_check(s);
    if (st != AL_OK) return st;
    vk_backend *be = al_calloc(1, sizeof *be);
    if (!be) return al_error(AL_ERR_NOMEM, "out of memory creating the Vulkan backend");
    be->base.ops = &vk_ops_table;
    be->sh = al_calloc(1, sizeof *be->sh);
    if (!be->sh) {
        al_free(be);
        return al_error(AL_ERR_NOMEM, "out of memory creating the Vulkan backend");
    }
    be->owns_shared = true;
    atomic_init(&be->sh->d.n_validation, 0);
    atomic_init(&be->sh->in_flight, false);
    atomic_init(&be->sh->n_submits, 0);
    atomic_init(&be->sh->n_dispatches, 0);
    atomic_init(&be->sh->n_kv_copies, 0);
    atomic_init(&be->sh->record_ns, 0);
    atomic_init(&be->sh->wait_ns, 0);
    atomic_init(&be->sh->gpu_ns, 0);
    atomic_init(&be->sh->n_timed, 0);
    if (s->profile) { /* zero-filled: atomic_init's value */
        be->sh->prof = al_calloc(VK_PIPELINE_KINDS, sizeof *be->sh->prof);
        if (!be->sh->prof) {
            vk_destroy(&be->base);
            return al_error(AL_ERR_NOMEM, "out of memory for vulkan.profile's counters");
        }
    }
    st = open_backend(be, device_index, s);
    if (st != AL_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", al_last_error());
        vk_destroy(&be->base);
        return al_error(st, "%s", msg); /* destroy must not clobber the reason */
    }
    if (be->sh->prof && !be->s.prof_pool) /* asked for, and nothing would say why not */
        al_log(AL_LOG_WARN, "vulkan.profile: %s has no timestamps on its queue; "
               "no dispatch is timed", be->sh->d.caps.name);
    *out = &be->base;
    return AL_OK;
}

/* A context's backend: the model's device, pipelines and weights, its own command
 * stream (stream.c). It starts with the model backend's fence timeout. */
static al_status vk_context_backend(al_backend *base, al_backend **out) {
    vk_backend *model = (vk_backend *)base;
    *out = NULL;
    if (model->s.failed) return al_error(model->s.failed, "%s", model->s.fail_msg);
    vk_backend *be = al_calloc(1, sizeof *be);
    if (!be) return al_error(AL_ERR_NOMEM, "out of memory for a context's Vulkan stream");
    be->base = (al_backend){.ops = &vk_ops_table};
    memcpy(be->base.desc, model->base.desc, sizeof be->base.desc);
    be->sh = model->sh;
    al_status st = vk_stream_init(be);
    if (st != AL_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", al_last_error());
        vk_destroy(&be->base);
        return al_error(st, "%s", msg);
    }
    be->s.timeout_ns = model->s.timeout_ns;
    *out = &be->base;
    return AL_OK;
}

/* ---- capabilities ------------------------------------------------------------------------ */

static uint64_t div_up_u64(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* Every limit of the shaders and of the device that a model's shape can exceed,
 * checked at load so that "--backend vulkan" fails before any output and "auto" can
 * still take the CPU. The ops check them again (a failed op, never a crash). Weight
 * types and row sizes are checked by weight_load, also at load; the KV cache's size
 * depends on the context and is checked when one is made. */
static al_status vk_supports(al_backend *base, const al_model_shape *m) {
    const vk_backend *be = (const vk_backend *)base;
    const vk_caps *c = &be->sh->d.caps;
    const vk_tuning *t = &be->sh->pl.tune;
    const char *dev = c->name;
    /* the wide build of the plain op (the fused decode falls back to it where its
     * workgroups' shared memory would not fit) */
    const uint64_t wide_shared = vk_attn_shared(t->attn_wg, VK_ATTN_WIDE_HD);
    if (m->head_dim > VK_ATTN_WIDE_HD ||
        ((uint32_t)m->head_dim > t->attn_max_hd && wide_shared > c->shared_bytes))
        return al_error(AL_ERR_UNSUPPORTED, "Vulkan on %s: head size %d exceeds the %u of the "
                        "attention shader", dev, m->head_dim,
                        wide_shared > c->shared_bytes ? t->attn_max_hd : VK_ATTN_WIDE_HD);
    int64_t qd = (int64_t)m->n_head * m->head_dim, kvd = (int64_t)m->n_head_kv * m->head_dim;
    int64_t widest = m->n_embd > m->n_ff ? m->n_embd : m->n_ff;
    if (qd > widest) widest = qd;
    /* activations: a batch of rows, bound as one storage range per tensor */
    uint64_t act = (uint64_t)m->max_batch * (uint64_t)widest * sizeof(float);
    uint64_t logits = (uint64_t)m->logit_rows * (uint64_t)m->n_vocab * sizeof(float);
    if (act > c->max_range || logits > c->max_range)
        return al_error(AL_ERR_UNSUPPORTED, "Vulkan on %s: activations of %.1f MiB (a batch of "
                        "%d rows of %lld floats, or logits of %d x %d) exceed its %.0f MiB storage "
                        "binding", dev, (double)(act > logits ? act : logits) / (1 << 20),
                        m->max_batch, (long long)widest, m->logit_rows, m->n_vocab,
                        (double)c->max_range / (1 << 20));
    /* 2-D dispatch grids (x per row or head, y per token) are not folded when x
     * exceeds maxComputeWorkGroupCount[0] */
    uint64_t max_x = c->max_groups[0];
    struct { const char *what; uint64_t groups; } grid[] = {
        {"elementwise rows", div_up_u64((uint64_t)widest, t->ew_wg)},
        {"rope heads", div_up_u64((uint64_t)m->n_rot / 2 * (uint64_t)m->n_head, t->rope_wg)},
        {"embedding rows", div_up_u64(div_up_u64((uint64_t)m->n_embd, 4), t->rows_wg)},
        {"attention heads", (uint64_t)m->n_head},
        {"matmul outputs", t->cpu_rows ? 0 : div_up_u64((uint64_t)(widest > kvd ? widest : kvd),
                                                         t->coopmat ? t->cm_bm : t->mm_bm)},
    };
    for (size_t i = 0; i < sizeof grid / sizeof *grid; i++)
        if (grid[i].groups > max_x)
            return al_error(AL_ERR_UNSUPPORTED, "Vulkan on %s: %s need %llu workgroups in x, "
                            "more than its %llu", dev, grid[i].what,
                            (unsigned long long)grid[i].groups, (unsigned long long)max_x);
    if ((uint32_t)m->max_batch > c->max_groups[1])
        return al_error(AL_ERR_UNSUPPORTED, "Vulkan on %s: a batch of %d rows exceeds its %u "
                        "workgroups in y", dev, m->max_batch, c->max_groups[1]);
    return AL_OK;
}

/* ---- reports ------------------------------------------------------------------------------ */

void vk_backend_set_timeout(al_backend *base, uint64_t ns) {
    if (base && base->ops == &vk_ops_table) ((vk_backend *)base)->s.timeout_ns = ns;
}

/* The public counters (al_model_get_backend_stats): vk_backend_get_stats' own. */
static void vk_stats(const al_backend *base, al_backend_stats *out) {
    vk_backend_stats vs;
    if (!vk_backend_get_stats(base, &vs)) return;
    *out = (al_backend_stats){.gpu = true,
                              .n_submits = vs.n_submits,
                              .n_dispatches = vs.n_dispatches,
                              .record_s = vs.record_s,
                              .wait_s = vs.wait_s,
                              .gpu_s = vs.gpu_s,
                              .n_timed = vs.n_timed,
                              .weight_path = vs.weight_path,
                              .bytes_imported = vs.bytes_imported,
                              .bytes_copied = vs.bytes_copied,
                              .load_s = vs.load_s};
}

/* The builds that ran, in the order of vk_pipeline_kind (al_model_get_dispatch_times). */
static int vk_dispatch_times(const al_backend *base, al_dispatch_time *out, int max) {
    const vk_backend *be = (const vk_backend *)base;
    if (!be->sh->prof) return 0;
    int n = 0;
    for (int k = 0; k < VK_PIPELINE_KINDS; k++) {
        const uint64_t count = atomic_load(&be->sh->prof[k].n);
        if (count == 0) continue;
        if (n < max) {
            out[n] = (al_dispatch_time){
                .n = count, .gpu_s = (double)atomic_load(&be->sh->prof[k].ns) * 1e-9};
            vk_pipeline_kind_name(&be->sh->pl, k, out[n].name, sizeof out[n].name);
        }
        n++;
    }
    return n;
}

bool vk_backend_get_stats(const al_backend *base, vk_backend_stats *out) {
    if (!base || base->ops != &vk_ops_table) return false;
    const vk_backend *be = (const vk_backend *)base;
    static const char *paths[] = {"import", "host copy", "staging copy"};
    *out = (vk_backend_stats){
        .weight_path = paths[be->sh->weight_mode],
        .bytes_imported = be->sh->bytes_imported,
        .bytes_copied = be->base.n_bytes_copied,
        .load_s = be->sh->load_s,
        .n_submits = atomic_load(&be->sh->n_submits),
        .n_dispatches = atomic_load(&be->sh->n_dispatches),
        .n_kv_copies = atomic_load(&be->sh->n_kv_copies),
        .record_s = (double)atomic_load(&be->sh->record_ns) * 1e-9,
        .wait_s = (double)atomic_load(&be->sh->wait_ns) * 1e-9,
        .gpu_s = (double)atomic_load(&be->sh->gpu_ns) * 1e-9,
        .n_timed = atomic_load(&be->sh->n_timed),
        .n_validation = atomic_load(&be->sh->d.n_validation),
        .cpu_rows = be->sh->pl.tune.cpu_rows != 0,
        .fuse_norm = be->sh->pl.tune.fuse_norm != 0,
        .coopmat = be->sh->pl.tune.coopmat != 0,
    };
    return true;
}

/* n copies between two device buffers, timed on the host around submit and wait: by
 * copy.comp, or by copy commands (which may run on a DMA engine, slower than the
 * shaders on a GPU, but faster than shader loads on a CPU device). */
static al_status time_copies(vk_backend *be, vk_buf *a, vk_buf *b, int n, bool shader,
                             double *seconds) {
    for (int i = 0; i < n && shader; i++) vk_copy_shader(be, i % 2 ? b : a, i % 2 ? a : b, a->size);
    if (!shader && vk_begin(be, 0, 0))
        for (int i = 0; i < n; i++) {
            vk_hazard(be, i % 2 ? b : a, false);
            vk_hazard(be, i % 2 ? a : b, true);
            VkBufferCopy region = {.srcOffset = 0, .dstOffset = 0, .size = a->size};
            be->sh->d.fn.vkCmdCopyBuffer(be->s.cmd, (i % 2 ? b : a)->buffer, (i % 2 ? a : b)->buffer, 1,
                                     &region);
            vk_recorded(be);
        }
    double t0 = al_time_s();
    al_status st = vk_submit_wait(be);
    *seconds = al_time_s() - t0;
    return st;
}

al_status vk_measure_bandwidth(int device_index, double *gbs) {
    *gbs = 0;
    al_backend *base;
    al_status st = vk_backend_create(device_index, NULL, &base);
    if (st != AL_OK) return st;
    vk_backend *be = (vk_backend *)base;
    uint64_t size = 1ull << 30, heap = 0;
    for (uint32_t h = 0; h < be->sh->d.caps.mem.memoryHeapCount; h++)
        if ((be->sh->d.caps.mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            be->sh->d.caps.mem.memoryHeaps[h].size > heap)
            heap = be->sh->d.caps.mem.memoryHeaps[h].size;
    while (size > (16u << 20) && (size > be->sh->d.caps.max_alloc / 2 || size > heap / 8 ||
                                  size > be->sh->d.caps.max_range))
        size /= 2;
    vk_buf *a = NULL, *b = NULL;
    if ((st = vk_buf_create(&be->sh->d, size, VK_BUF_DEVICE, &a)) == AL_OK &&
        (st = vk_buf_create(&be->sh->d, size, VK_BUF_DEVICE, &b)) == AL_OK) {
        double t;
        st = time_copies(be, a, b, 2, false, &t); /* warm-up: first touch of the pages */
        for (int rep = 0; st == AL_OK && rep < 6; rep++) {
            int n = 8;
            if ((st = time_copies(be, a, b, n, rep % 2, &t)) == AL_OK && t > 0) {
                double v = 2.0 * (double)size * n / t / 1e9; /* read + write */
                if (v > *gbs) *gbs = v;
            }
        }
    }
    if (st != AL_OK && be->s.failed) st = al_error(be->s.failed, "%s", be->s.fail_msg);
    vk_buf_destroy(&be->sh->d, a);
    vk_buf_destroy(&be->sh->d, b);
    vk_destroy(base);
    return st;
}

/* ---- the descriptor (registry.c) ------------------------------------------------------ */

static void vk_summary(char *buf, size_t size) { snprintf(buf, size, "vulkan"); }

static int vk_n_devices(void) { return vk_list_devices(NULL); }

static al_status vk_check(const al_model_params *p) { return vk_settings_check(&p->vulkan); }

/* Vulkan has no variants: "vulkan:N" is device N. */
static al_status vk_create(int dev, const char *variant, int n_threads, const al_model_params *p,
                           al_backend **out) {
    (void)n_threads;
    *out = NULL;
    if (variant)
        return al_error(AL_ERR_ARG, "backend 'vulkan:%s' is not known (vulkan, vulkan:N)", variant);
    return vk_backend_create(dev, &p->vulkan, out);
}

static const char *const vk_device_names[] = {"vulkan:0", "vulkan:1", "vulkan:2", "vulkan:3",
                                              "vulkan:4", "vulkan:5", "vulkan:6", "vulkan:7"};

const al_backend_desc vk_backend_desc = {
    .name = "vulkan",
    .specs = "vulkan, vulkan:N",
    .caps = AL_CAP_DEVICE | AL_CAP_AUTO,
    .summary = vk_summary,
    .n_devices = vk_n_devices,
    .max_devices = 8,
    .device_names = vk_device_names,
    .describe = vk_device_name,
    .details = vk_device_details,
    .bandwidth = vk_measure_bandwidth,
    .check = vk_check,
    .create = vk_create,
};
