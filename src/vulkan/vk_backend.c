/* vk_backend.c: the Vulkan backend object: creation, the op table, reports.
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

static void vk_destroy(al_backend *base) {
    vk_backend *be = (vk_backend *)base;
    if (!be) return;
    if (be->d.dev && !be->failed) vk_submit_wait(be);
    if (be->d.dev && !be->in_flight) {
        vk_weights_destroy(be);
        vk_ops_destroy(be);
        vk_pipelines_destroy(&be->d, &be->pl);
    }
    int n_val = atomic_load(&be->d.n_validation);
    if (be->d.caps.debug_utils && be->d.dev)
        fprintf(stderr, "anyllm: vulkan validation: %d messages\n", n_val);
    /* after a timeout the device may still run our commands: leave it be rather
     * than destroy objects in use */
    if (!be->in_flight) vk_device_close(&be->d);
    al_free(be);
}

/* ---- ops that live here ---------------------------------------------------------------- */

static al_status vk_reserve(al_backend *base, int64_t max_cols, int64_t max_ctx) {
    vk_backend *be = (vk_backend *)base;
    if (be->failed) return al_error(be->failed, "%s", be->fail_msg);
    return vk_scratch_reserve(be, max_cols, max_ctx);
}

static al_status vk_sync(al_backend *base) {
    vk_backend *be = (vk_backend *)base;
    vk_submit_wait(be);
    return be->failed ? al_error(be->failed, "%s", be->fail_msg) : AL_OK;
}

static const al_backend_ops vk_ops_table = {
    .name = "vulkan",
    .destroy = vk_destroy,
    .tensor_alloc = vk_tensor_alloc,
    .tensor_free = vk_tensor_free,
    .tensor_read = vk_tensor_read,
    .weight_load = vk_weight_load,
    .reserve = vk_reserve,
    .sync = vk_sync,
    .get_rows = vk_op_get_rows,
    .rms_norm = vk_op_rms_norm,
    .matmul = vk_op_matmul,
    .rope = vk_op_rope,
    .attention = vk_op_attention,
    .silu_mul = vk_op_silu_mul,
    .add = vk_op_add,
};

/* ---- create ----------------------------------------------------------------------------- */

/* The device for an index ("vulkan:N"), or for -1 the first real GPU. */
static al_status pick_device(vk_backend *be, int index) {
    VkPhysicalDevice devs[16];
    uint32_t n = 16;
    al_status st = vk_physical_devices(&be->d, devs, &n);
    if (st != AL_OK) return st;
    if (n == 0) return al_error(AL_ERR_UNSUPPORTED, "no Vulkan device: the loader found no driver");
    if (index < 0) {
        /* tests: ANYLLM_VK_AUTO_SOFTWARE=1 lets "auto" take a software renderer */
        const char *sw = getenv("ANYLLM_VK_AUTO_SOFTWARE");
        const bool any = sw && !strcmp(sw, "1");
        for (uint32_t i = 0; i < n && index < 0; i++) {
            VkPhysicalDeviceProperties p;
            be->d.fn.vkGetPhysicalDeviceProperties(devs[i], &p);
            if (p.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU || any) index = (int)i;
        }
        if (index < 0)
            return al_error(AL_ERR_UNSUPPORTED, "the only Vulkan devices are software renderers, "
                            "slower than the CPU backend (ask for --backend vulkan to use one)");
    }
    if ((uint32_t)index >= n)
        return al_error(AL_ERR_ARG, "vulkan:%d: there %s only %u Vulkan device%s (0..%u)", index,
                        n == 1 ? "is" : "are", n, n == 1 ? "" : "s", n - 1);
    be->d.pdev = devs[index];
    vk_read_caps(&be->d, be->d.pdev, &be->d.caps);
    const char *discrete = getenv("ANYLLM_VK_PRETEND_DISCRETE"); /* tests: the discrete paths */
    if (discrete && *discrete && strcmp(discrete, "0")) be->d.caps.uma = false;
    return AL_OK;
}

static al_status pick_weight_mode(vk_backend *be) {
    const vk_caps *c = &be->d.caps;
    be->weight_mode = !c->uma ? VK_WEIGHTS_STAGING
                      : c->host_import && c->import_align ? VK_WEIGHTS_IMPORT
                                                          : VK_WEIGHTS_HOST;
    const char *max = getenv("ANYLLM_VK_MAX_WEIGHT_BYTES"); /* tests: a small device */
    if (max && *max) be->max_weight_bytes = strtoull(max, NULL, 10);
    const char *env = getenv("ANYLLM_VK_WEIGHTS");
    if (!env || !*env) return AL_OK;
    if (!strcmp(env, "staging")) be->weight_mode = VK_WEIGHTS_STAGING;
    else if (!strcmp(env, "host") && c->uma) be->weight_mode = VK_WEIGHTS_HOST;
    else if (!strcmp(env, "import") && c->uma && c->host_import) be->weight_mode = VK_WEIGHTS_IMPORT;
    else
        return al_error(AL_ERR_ARG, "ANYLLM_VK_WEIGHTS=%s: expected import or host (unified "
                        "memory with host import) or staging", env);
    return AL_OK;
}

static al_status open_backend(vk_backend *be, int index) {
    al_status st;
    if ((st = vk_instance_create(&be->d)) || (st = pick_device(be, index)) ||
        (st = vk_device_open(&be->d)) || (st = pick_weight_mode(be)) ||
        (st = vk_pipelines_init(&be->d, &be->pl)) || (st = vk_ops_init(be)))
        return st;
    /* the untyped ops every model uses, compiled now so that a driver that cannot
     * build them fails here, where "auto" can still fall back */
    static const vk_op untyped[] = {VK_OP_ADD, VK_OP_SILU_MUL, VK_OP_RMS_NORM, VK_OP_ROPE,
                                    VK_OP_ATTENTION};  /* not copy: only bandwidth uses it */
    for (size_t i = 0; i < sizeof untyped / sizeof *untyped; i++) {
        const vk_pipeline *p;
        if ((st = vk_pipeline_get(&be->d, &be->pl, untyped[i], 0, 0, &p))) return st;
    }
    snprintf(be->base.desc, sizeof be->base.desc, "vulkan %.56s", be->d.caps.name);
    return AL_OK;
}

al_status vk_backend_create(int device_index, al_backend **out) {
    *out = NULL;
    vk_backend *be = al_calloc(1, sizeof *be);
    if (!be) return al_error(AL_ERR_NOMEM, "out of memory creating the Vulkan backend");
    be->base.ops = &vk_ops_table;
    atomic_init(&be->d.n_validation, 0);
    al_status st = open_backend(be, device_index);
    if (st != AL_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", al_last_error());
        vk_destroy(&be->base);
        return al_error(st, "%s", msg); /* destroy must not clobber the reason */
    }
    *out = &be->base;
    return AL_OK;
}

/* ---- reports ------------------------------------------------------------------------------ */

void vk_backend_set_timeout(al_backend *base, uint64_t ns) {
    if (base && base->ops == &vk_ops_table) ((vk_backend *)base)->timeout_ns = ns;
}

bool vk_backend_get_stats(const al_backend *base, vk_backend_stats *out) {
    if (!base || base->ops != &vk_ops_table) return false;
    const vk_backend *be = (const vk_backend *)base;
    static const char *paths[] = {"import", "host copy", "staging copy"};
    *out = (vk_backend_stats){
        .weight_path = paths[be->weight_mode],
        .bytes_imported = be->bytes_imported,
        .bytes_copied = be->base.n_bytes_copied,
        .load_s = be->load_s,
        .n_submits = be->n_submits,
        .n_dispatches = be->n_dispatches,
        .n_validation = atomic_load(&((vk_backend *)be)->d.n_validation),
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
            be->d.fn.vkCmdCopyBuffer(be->cmd, (i % 2 ? b : a)->buffer, (i % 2 ? a : b)->buffer, 1,
                                     &region);
        }
    double t0 = al_time_s();
    al_status st = vk_submit_wait(be);
    *seconds = al_time_s() - t0;
    return st;
}

al_status vk_measure_bandwidth(int device_index, double *gbs) {
    *gbs = 0;
    al_backend *base;
    al_status st = vk_backend_create(device_index, &base);
    if (st != AL_OK) return st;
    vk_backend *be = (vk_backend *)base;
    uint64_t size = 1ull << 30, heap = 0;
    for (uint32_t h = 0; h < be->d.caps.mem.memoryHeapCount; h++)
        if ((be->d.caps.mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            be->d.caps.mem.memoryHeaps[h].size > heap)
            heap = be->d.caps.mem.memoryHeaps[h].size;
    while (size > (16u << 20) && (size > be->d.caps.max_alloc / 2 || size > heap / 8 ||
                                  size > be->d.caps.max_range))
        size /= 2;
    vk_buf *a = NULL, *b = NULL;
    if ((st = vk_buf_create(&be->d, size, VK_BUF_DEVICE, &a)) == AL_OK &&
        (st = vk_buf_create(&be->d, size, VK_BUF_DEVICE, &b)) == AL_OK) {
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
    if (st != AL_OK && be->failed) st = al_error(be->failed, "%s", be->fail_msg);
    vk_buf_destroy(&be->d, a);
    vk_buf_destroy(&be->d, b);
    vk_destroy(base);
    return st;
}
