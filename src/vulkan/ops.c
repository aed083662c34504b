/* ops.c: recording the ops of a forward pass into one command buffer, and submitting.
 *
 * The model calls the ops one after another (backend.h) and reads results only with
 * tensor_read. So the ops are recorded as they are called, into a single command
 * buffer, and nothing is submitted until the host needs a result (tensor_read, the
 * `sync` op, freeing a tensor) or the buffer's descriptor pool or upload arena is
 * full; then it is submitted and waited for, with a finite fence timeout.
 *
 * Barriers: each command declares the buffers it reads and writes (vk_hazard). A
 * global memory barrier goes in only when the new command reads or writes a buffer
 * written since the last barrier, or writes one read since then; independent
 * commands (the Q, K and V projections of one input) run without barriers between
 * them. Tracking is per buffer, not per range: conservative, never wrong.
 *
 * Binding ranges: a storage-buffer binding starts at a multiple of
 * minStorageBufferOffsetAlignment and spans at most maxStorageBufferRange (128 MiB on
 * lavapipe). A tensor is bound from its offset rounded down, and the remainder goes
 * to the shader in push constants; a weight larger than one range is split by rows
 * into several dispatches (get_rows and matmul).
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "push.h"
#include "util.h"
#include "vk.h"

enum {
    MAX_SETS = 1024,            /* dispatches per submission */
    UPLOAD_BYTES = 8 << 20,     /* token ids and rope tables per submission */
};

static const uint64_t DEFAULT_TIMEOUT_MS = 600000; /* lavapipe runs a 1B prompt in minutes */

al_status vk_fail(vk_backend *be, al_status st, const char *fmt, ...) {
    if (be->failed) return be->failed;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(be->fail_msg, sizeof be->fail_msg, fmt, ap);
    va_end(ap);
    be->failed = st;
    return st;
}

/* ---- command buffer ------------------------------------------------------------------- */

al_status vk_ops_init(vk_backend *be) {
    vk_device *d = &be->d;
    const char *t = getenv("ANYLLM_VK_TIMEOUT_MS"); /* 0: only look (tests) */
    uint64_t ms = t && *t && atoll(t) >= 0 ? (uint64_t)atoll(t) : DEFAULT_TIMEOUT_MS;
    be->timeout_ns = ms * 1000000ull;
    VkCommandPoolCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
        .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
        .queueFamilyIndex = d->queue_family,
    };
    VkResult r = d->fn.vkCreateCommandPool(d->dev, &pci, NULL, &be->cmd_pool);
    if (r != VK_SUCCESS) goto fail;
    VkCommandBufferAllocateInfo cai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
        .commandPool = be->cmd_pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        .commandBufferCount = 1,
    };
    if ((r = d->fn.vkAllocateCommandBuffers(d->dev, &cai, &be->cmd)) != VK_SUCCESS) goto fail;
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = d->fn.vkCreateFence(d->dev, &fci, NULL, &be->fence)) != VK_SUCCESS) goto fail;
    VkDescriptorPoolSize sizes[2] = {
        {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = MAX_SETS * VK_MAX_BINDINGS},
        {.type = VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, .descriptorCount = MAX_SETS},
    };
    VkDescriptorPoolCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
        .maxSets = MAX_SETS,
        .poolSizeCount = 2,
        .pPoolSizes = sizes,
    };
    if ((r = d->fn.vkCreateDescriptorPool(d->dev, &dci, NULL, &be->desc_pool)) != VK_SUCCESS)
        goto fail;
    return vk_buf_create(d, UPLOAD_BYTES, VK_BUF_HOST, &be->upload);
fail:
    return al_error(AL_ERR_DEVICE, "creating command objects on %s failed (%s)", d->caps.name,
                    vk_result_str(r));
}

void vk_ops_destroy(vk_backend *be) {
    vk_device *d = &be->d;
    if (!d->dev || be->in_flight) return; /* a timed-out submission may still use them */
    vk_buf_destroy(d, be->upload);
    vk_buf_destroy(d, be->staging);
    vk_buf_destroy(d, be->scratch);
    be->upload = be->staging = be->scratch = NULL;
    if (be->desc_pool) d->fn.vkDestroyDescriptorPool(d->dev, be->desc_pool, NULL);
    if (be->fence) d->fn.vkDestroyFence(d->dev, be->fence, NULL);
    if (be->cmd_pool) d->fn.vkDestroyCommandPool(d->dev, be->cmd_pool, NULL);
    be->desc_pool = VK_NULL_HANDLE;
    be->fence = VK_NULL_HANDLE;
    be->cmd_pool = VK_NULL_HANDLE;
}

static void full_barrier(vk_backend *be, VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = dst_access,
    };
    be->d.fn.vkCmdPipelineBarrier(be->cmd,
                                  VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                  dst_stage, 0, 1, &mb, 0, NULL, 0, NULL);
    be->n_reads = be->n_writes = 0;
}

static void barrier(vk_backend *be) {
    full_barrier(be, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                 VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
}

static bool listed(const VkBuffer *list, int n, VkBuffer b) {
    for (int i = 0; i < n; i++)
        if (list[i] == b) return true;
    return false;
}

void vk_hazard(vk_backend *be, const vk_buf *buf, bool write) {
    VkBuffer b = buf->buffer;
    /* read after write, write after write, write after read */
    if (listed(be->writes, be->n_writes, b) || (write && listed(be->reads, be->n_reads, b)))
        barrier(be);
    if (be->n_reads == VK_MAX_HAZARDS || be->n_writes == VK_MAX_HAZARDS) barrier(be);
    if (write) be->writes[be->n_writes++] = b;
    else be->reads[be->n_reads++] = b;
}

bool vk_begin(vk_backend *be, int n_dispatch, uint64_t upload_bytes) {
    if (be->failed) return false;
    upload_bytes += 2 * be->d.caps.align + 64; /* alignment of each upload */
    if (n_dispatch > MAX_SETS || upload_bytes > UPLOAD_BYTES) {
        vk_fail(be, AL_ERR_UNSUPPORTED, "an op needs %d dispatches and %llu upload bytes, more "
                "than one submission holds", n_dispatch, (unsigned long long)upload_bytes);
        return false;
    }
    if (be->recording && (be->n_sets + (uint32_t)n_dispatch > MAX_SETS ||
                          be->upload_used + upload_bytes > UPLOAD_BYTES))
        if (vk_submit_wait(be) != AL_OK) return false;
    if (be->recording) return true;
    vk_device *d = &be->d;
    d->fn.vkResetDescriptorPool(d->dev, be->desc_pool, 0);
    VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
    };
    VkResult r = d->fn.vkBeginCommandBuffer(be->cmd, &bi);
    if (r != VK_SUCCESS) {
        vk_fail(be, AL_ERR_DEVICE, "vkBeginCommandBuffer failed (%s)", vk_result_str(r));
        return false;
    }
    be->recording = true;
    be->n_sets = 0;
    be->upload_used = 0;
    be->rope_cache.valid = false;
    be->n_reads = be->n_writes = 0;
    return true;
}

al_status vk_submit_wait(vk_backend *be) {
    if (be->failed) return be->failed;
    if (!be->recording) return AL_OK;
    vk_device *d = &be->d;
    /* results become visible to the host once the fence signals */
    full_barrier(be, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    be->recording = false;
    VkResult r = d->fn.vkEndCommandBuffer(be->cmd);
    if (r != VK_SUCCESS)
        return vk_fail(be, AL_ERR_DEVICE, "vkEndCommandBuffer failed (%s)", vk_result_str(r));
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
        .commandBufferCount = 1,
        .pCommandBuffers = &be->cmd,
    };
    if ((r = d->fn.vkQueueSubmit(d->queue, 1, &si, be->fence)) != VK_SUCCESS)
        return vk_fail(be, r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? AL_ERR_NOMEM : AL_ERR_DEVICE,
                       "vkQueueSubmit on %s failed (%s)", d->caps.name, vk_result_str(r));
    be->n_submits++;
    r = d->fn.vkWaitForFences(d->dev, 1, &be->fence, VK_TRUE, be->timeout_ns);
    if (r == VK_TIMEOUT) {
        be->in_flight = true;
        return vk_fail(be, AL_ERR_DEVICE, "%s did not finish its work within %g s (fence "
                       "timeout; ANYLLM_VK_TIMEOUT_MS raises it)", d->caps.name,
                       (double)be->timeout_ns / 1e9);
    }
    if (r != VK_SUCCESS)
        return vk_fail(be, AL_ERR_DEVICE, "waiting for %s failed (%s)", d->caps.name,
                       vk_result_str(r));
    d->fn.vkResetFences(d->dev, 1, &be->fence);
    d->fn.vkResetCommandBuffer(be->cmd, 0);
    return AL_OK;
}

/* ---- dispatch helpers ------------------------------------------------------------------ */

/* Copies n bytes into the upload arena (room was made by vk_begin); returns the
 * offset, aligned for binding. */
static uint64_t upload(vk_backend *be, const void *src, uint64_t n) {
    uint64_t a = be->d.caps.align > 16 ? be->d.caps.align : 16;
    uint64_t off = (be->upload_used + a - 1) & ~(a - 1);
    if (src) memcpy((char *)be->upload->mapped + off, src, n);
    be->upload_used = off + n;
    return off;
}

/* A binding of [offset, offset + n) of b, starting at the aligned offset below it;
 * returns the bytes from the binding's start to `offset`. */
static uint32_t bind(const vk_backend *be, VkDescriptorBufferInfo *info, const vk_buf *b,
                     uint64_t offset, uint64_t n) {
    uint64_t start = offset & ~(be->d.caps.align - 1);
    uint64_t range = ((offset - start + n) + 3) & ~(uint64_t)3;
    if (start + range > b->size) range = b->size - start;
    AL_ASSERT(range <= be->d.caps.max_range);
    *info = (VkDescriptorBufferInfo){.buffer = b->buffer, .offset = start, .range = range};
    return (uint32_t)(offset - start);
}

/* Bytes spanned by the rows of an f32 tensor (the last row need not be full-stride). */
static uint64_t span(const al_tensor *t) {
    return (uint64_t)(t->ne[1] - 1) * t->row_bytes + (uint64_t)t->ne[0] * sizeof(float);
}

/* Binds an f32 tensor; returns its offset in floats and sets *stride (floats). */
static uint32_t bind_f32(const vk_backend *be, VkDescriptorBufferInfo *info, const al_tensor *t,
                         uint32_t *stride) {
    *stride = (uint32_t)(t->row_bytes / sizeof(float));
    return bind(be, info, t->data, t->offset, span(t)) / (uint32_t)sizeof(float);
}

/* Records one dispatch of op over groups workgroups, numbered over (x, y) when they
 * exceed the device's x limit (the shaders linearize them). */
static void dispatch(vk_backend *be, vk_op op, uint32_t type, int variant,
                     const VkDescriptorBufferInfo *infos, const void *push, uint32_t push_bytes,
                     uint64_t groups_x, uint32_t groups_y) {
    vk_device *d = &be->d;
    const vk_pipeline *p;
    al_status st = vk_pipeline_get(d, &be->pl, op, type, variant, &p);
    if (st != AL_OK) {
        vk_fail(be, st, "%s", al_last_error());
        return;
    }
    VkDescriptorSetAllocateInfo dai = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
        .descriptorPool = be->desc_pool,
        .descriptorSetCount = 1,
        .pSetLayouts = &be->pl.set_layout[op],
    };
    VkDescriptorSet set;
    VkResult r = d->fn.vkAllocateDescriptorSets(d->dev, &dai, &set);
    if (r != VK_SUCCESS) {
        vk_fail(be, AL_ERR_DEVICE, "vkAllocateDescriptorSets failed (%s)", vk_result_str(r));
        return;
    }
    be->n_sets++;
    VkWriteDescriptorSet w[VK_MAX_BINDINGS];
    for (int i = 0; i < p->n_bindings; i++)
        w[i] = (VkWriteDescriptorSet){
            .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
            .dstSet = set,
            .dstBinding = (uint32_t)i,
            .descriptorCount = 1,
            .descriptorType = vk_binding_type(op, i),
            .pBufferInfo = &infos[i],
        };
    d->fn.vkUpdateDescriptorSets(d->dev, (uint32_t)p->n_bindings, w, 0, NULL);
    uint64_t max_x = d->caps.max_groups[0];
    AL_ASSERT(groups_x <= max_x || groups_y == 1); /* only 1-D grids are folded */
    uint32_t gx = (uint32_t)(groups_x < max_x ? groups_x : max_x);
    if (groups_x > max_x) groups_y = (uint32_t)((groups_x + max_x - 1) / max_x);
    d->fn.vkCmdBindPipeline(be->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipeline);
    d->fn.vkCmdBindDescriptorSets(be->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, be->pl.layout[op], 0,
                                  1, &set, 0, NULL);
    d->fn.vkCmdPushConstants(be->cmd, be->pl.layout[op], VK_SHADER_STAGE_COMPUTE_BIT, 0,
                             push_bytes, push);
    d->fn.vkCmdDispatch(be->cmd, gx, groups_y, 1);
    be->n_dispatches++;
}

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* Weight rows that fit one binding: the range less the alignment slack at its start. */
static int64_t rows_per_binding(const vk_backend *be, uint64_t row_bytes) {
    return (int64_t)((be->d.caps.max_range - be->d.caps.align) / row_bytes);
}

/* ---- elementwise and per-row ops ------------------------------------------------------- */

static void binary(vk_backend *be, vk_op op, al_tensor *x, const al_tensor *y) {
    AL_ASSERT(x->ne[0] == y->ne[0] && x->ne[1] == y->ne[1]);
    if (!vk_begin(be, 1, 0)) return;
    vk_hazard(be, y->data, false);
    vk_hazard(be, x->data, true);
    VkDescriptorBufferInfo info[2];
    vk_pc_binary pc = {.n_cols = (uint32_t)x->ne[0], .n_rows = (uint32_t)x->ne[1]};
    pc.x_off = bind_f32(be, &info[0], x, &pc.x_stride);
    pc.y_off = bind_f32(be, &info[1], y, &pc.y_stride);
    dispatch(be, op, 0, 0, info, &pc, sizeof pc, div_up(pc.n_cols, be->pl.tune.ew_wg), pc.n_rows);
}

void vk_copy_shader(vk_backend *be, const vk_buf *s, vk_buf *d, uint64_t n) {
    if (!vk_begin(be, 1, 0)) return;
    vk_hazard(be, s, false);
    vk_hazard(be, d, true);
    VkDescriptorBufferInfo info[2];
    vk_pc_copy pc = {.n = (uint32_t)(n / 16)};
    bind(be, &info[0], s, 0, n);
    bind(be, &info[1], d, 0, n);
    /* enough workgroups to fill any device; each loops over the rest */
    dispatch(be, VK_OP_COPY, 0, 0, info, &pc, sizeof pc, div_up(pc.n, be->pl.tune.ew_wg * 8ull), 1);
}

void vk_op_add(al_backend *base, al_tensor *x, const al_tensor *y) {
    binary((vk_backend *)base, VK_OP_ADD, x, y);
}

void vk_op_silu_mul(al_backend *base, al_tensor *g, const al_tensor *u) {
    binary((vk_backend *)base, VK_OP_SILU_MUL, g, u);
}

void vk_op_rms_norm(al_backend *base, const al_tensor *x, const al_tensor *w, float eps,
                    al_tensor *out) {
    vk_backend *be = (vk_backend *)base;
    AL_ASSERT(x->ne[0] == w->ne[0] && w->type == AL_TYPE_F32 && out->ne[1] == x->ne[1]);
    if (!vk_begin(be, 1, 0)) return;
    vk_hazard(be, x->data, false);
    vk_hazard(be, w->data, false);
    vk_hazard(be, out->data, true);
    VkDescriptorBufferInfo info[3];
    vk_pc_rms_norm pc = {.n_cols = (uint32_t)x->ne[0], .n_rows = (uint32_t)x->ne[1], .eps = eps};
    uint32_t w_stride;
    pc.x_off = bind_f32(be, &info[0], x, &pc.x_stride);
    pc.w_off = bind_f32(be, &info[1], w, &w_stride);
    pc.o_off = bind_f32(be, &info[2], out, &pc.o_stride);
    dispatch(be, VK_OP_RMS_NORM, 0, 0, info, &pc, sizeof pc, pc.n_rows, 1);
}

void vk_op_get_rows(al_backend *base, const al_tensor *table, const int32_t *ids, int n,
                    al_tensor *out) {
    vk_backend *be = (vk_backend *)base;
    AL_ASSERT(out->ne[0] == table->ne[0] && out->ne[1] >= n);
    if (n <= 0) return;
    int64_t per = rows_per_binding(be, table->row_bytes), n_rows = table->ne[1];
    if (per < 1) {
        vk_fail(be, AL_ERR_UNSUPPORTED, "a table row of %llu bytes exceeds one binding",
                (unsigned long long)table->row_bytes);
        return;
    }
    int n_chunks = (int)div_up((uint64_t)n_rows, (uint64_t)per);
    if (!vk_begin(be, n_chunks, (uint64_t)n * sizeof(int32_t))) return;
    uint64_t ids_off = upload(be, ids, (uint64_t)n * sizeof(int32_t));
    vk_hazard(be, table->data, false);
    vk_hazard(be, out->data, true);
    for (int64_t r0 = 0; r0 < n_rows; r0 += per) {
        int64_t r1 = r0 + per < n_rows ? r0 + per : n_rows;
        VkDescriptorBufferInfo info[3];
        vk_pc_get_rows pc = {.n_cols = (uint32_t)table->ne[0], .n_ids = (uint32_t)n,
                             .t_row_bytes = (uint32_t)table->row_bytes,
                             .row0 = (uint32_t)r0, .row1 = (uint32_t)r1};
        pc.t_off = bind(be, &info[0], table->data, table->offset + (uint64_t)r0 * table->row_bytes,
                        (uint64_t)(r1 - r0) * table->row_bytes);
        bind(be, &info[1], be->upload, ids_off, (uint64_t)n * sizeof(int32_t));
        pc.o_off = bind_f32(be, &info[2], out, &pc.o_stride);
        dispatch(be, VK_OP_GET_ROWS, table->type, 0, info, &pc, sizeof pc,
                 div_up(div_up(pc.n_cols, 4), be->pl.tune.rows_wg), (uint32_t)n);
    }
}

/* ---- matmul on CPU devices ----------------------------------------------------------------- */

enum { UBO_BYTES = 65536 }; /* the uniform-buffer range matmul_rows.comp declares */

al_status vk_scratch_reserve(vk_backend *be, int64_t max_cols, int64_t max_ctx) {
    if (!be->pl.tune.cpu_rows) return AL_OK;
    /* a batch of up to 512 tokens (model.c), each packed in slices of at most 1024
     * inputs, plus room for the last 64 KiB binding */
    uint64_t tokens = (uint64_t)(max_ctx < 512 ? max_ctx : 512) + 16;
    uint64_t n = tokens * ((uint64_t)max_cols + 1024) * sizeof(float) + UBO_BYTES;
    if (be->scratch && be->scratch->size >= n) return AL_OK;
    al_status st = vk_submit_wait(be); /* the old scratch may be in use */
    if (st != AL_OK) return al_error(st, "%s", be->fail_msg);
    vk_buf_destroy(&be->d, be->scratch);
    be->scratch = NULL;
    return vk_buf_create(&be->d, n, VK_BUF_DEVICE, &be->scratch);
}

/* Copies the inputs of tokens [t0, t0 + n) into the scratch as blocks of nt tokens x
 * ks inputs: block (slice s, token block b) at s * n_blocks + b. */
static void pack_inputs(vk_backend *be, const al_tensor *x, int64_t t0, int64_t n, uint32_t nt,
                        uint32_t ks, uint32_t n_slices) {
    uint64_t n_in = (uint64_t)x->ne[0], n_blocks = div_up((uint64_t)n, nt);
    VkBufferCopy regions[64];
    uint32_t m = 0;
    for (uint32_t s = 0; s < n_slices; s++)
        for (int64_t t = 0; t < n; t++) {
            uint64_t blk = s * n_blocks + (uint64_t)t / nt, k0 = (uint64_t)s * ks;
            regions[m++] = (VkBufferCopy){
                .srcOffset = x->offset + (uint64_t)(t0 + t) * x->row_bytes + k0 * sizeof(float),
                .dstOffset = (blk * nt + (uint64_t)t % nt) * ks * sizeof(float),
                .size = (n_in - k0 < ks ? n_in - k0 : ks) * sizeof(float)};
            if (m == 64 || (s + 1 == n_slices && t + 1 == n)) {
                be->d.fn.vkCmdCopyBuffer(be->cmd, ((const vk_buf *)x->data)->buffer,
                                         be->scratch->buffer, m, regions);
                m = 0;
            }
        }
}

/* Every matmul of a CPU device: see matmul_rows.comp. Tokens go in blocks of NT (1,
 * 4 or 16), inputs in slices that fit a 64 KiB uniform buffer; the slices of one
 * output run in order (barriers between), the blocks of one slice together. */
static void matmul_rows(vk_backend *be, const al_tensor *x, const al_tensor *w,
                        const al_tensor *bias, al_tensor *out) {
    int64_t n_tok = x->ne[1], n_out = w->ne[1], per = rows_per_binding(be, w->row_bytes);
    uint32_t n_in = (uint32_t)w->ne[0], variant = n_tok <= 1 ? 0 : n_tok <= 4 ? 1 : 2;
    uint32_t nt = 1u << (2 * variant);
    uint32_t ks = (uint32_t)((n_in + 63) & ~63u);
    uint32_t ks_max = (UBO_BYTES / sizeof(float) / nt) & ~63u;
    if (ks > ks_max) ks = ks_max;
    uint32_t n_slices = (uint32_t)div_up(n_in, ks);
    uint64_t block_bytes = (uint64_t)nt * ks * sizeof(float);
    uint64_t blocks = be->scratch && be->scratch->size > UBO_BYTES
                          ? (be->scratch->size - UBO_BYTES) / block_bytes : 0;
    int64_t tok_per_pass = (int64_t)(blocks / n_slices) * nt;
    if (tok_per_pass < 1 || per < 1) {
        vk_fail(be, AL_ERR_UNSUPPORTED, "matmul of %u inputs: the scratch reserved for %s is "
                "too small (was reserve() called?)", n_in, be->d.caps.name);
        return;
    }
    for (int64_t t0 = 0; t0 < n_tok; t0 += tok_per_pass) {
        int64_t n = n_tok - t0 < tok_per_pass ? n_tok - t0 : tok_per_pass;
        uint64_t n_blocks = div_up((uint64_t)n, nt);
        int n_disp = (int)(n_blocks * n_slices * div_up((uint64_t)n_out, (uint64_t)per));
        if (!vk_begin(be, n_disp, 0)) return;
        vk_hazard(be, x->data, false);
        vk_hazard(be, be->scratch, true);
        pack_inputs(be, x, t0, n, nt, ks, n_slices);
        vk_hazard(be, be->scratch, false);
        vk_hazard(be, w->data, false);
        if (bias) vk_hazard(be, bias->data, false);
        for (uint32_t s = 0; s < n_slices; s++) {
            vk_hazard(be, out->data, true); /* slice s adds to what slice s - 1 wrote */
            for (int64_t r0 = 0; r0 < n_out; r0 += per) {
                int64_t r1 = r0 + per < n_out ? r0 + per : n_out;
                for (uint64_t b = 0; b < n_blocks; b++) {
                    VkDescriptorBufferInfo info[4];
                    al_tensor ob = al_tensor_rows(out, t0 + (int64_t)(b * nt), 1);
                    vk_pc_matmul_rows pc = {
                        .n_k = (n_in - s * ks < ks ? n_in - s * ks : ks), .n_out = (uint32_t)(r1 - r0),
                        .n_tok = (uint32_t)((uint64_t)n - b * nt < nt ? (uint64_t)n - b * nt : nt),
                        .k0 = s * ks, .xs_stride = ks / 4, .w_row_bytes = (uint32_t)w->row_bytes,
                        .has_bias = bias != NULL, .accumulate = s > 0, .row0 = (uint32_t)r0};
                    uint32_t b_stride;
                    info[0] = (VkDescriptorBufferInfo){.buffer = be->scratch->buffer,
                                                       .offset = (s * n_blocks + b) * block_bytes,
                                                       .range = UBO_BYTES};
                    pc.w_off = bind(be, &info[1], w->data, w->offset + (uint64_t)r0 * w->row_bytes,
                                    (uint64_t)(r1 - r0) * w->row_bytes);
                    pc.b_off = bind_f32(be, &info[2], bias ? bias : x, &b_stride);
                    ob.ne[1] = pc.n_tok;
                    pc.o_off = bind_f32(be, &info[3], &ob, &pc.o_stride);
                    dispatch(be, VK_OP_MATMUL_ROWS, w->type, (int)variant, info, &pc, sizeof pc,
                             div_up(pc.n_out, be->pl.tune.mr_wg), 1);
                }
            }
        }
    }
}

/* ---- matmul ------------------------------------------------------------------------------ */

void vk_op_matmul(al_backend *base, const al_tensor *x, const al_tensor *w,
                  const al_tensor *bias, al_tensor *out) {
    vk_backend *be = (vk_backend *)base;
    AL_ASSERT(x->ne[0] == w->ne[0] && out->ne[0] == w->ne[1] && out->ne[1] == x->ne[1]);
    if (be->pl.tune.cpu_rows) {
        matmul_rows(be, x, w, bias, out);
        return;
    }
    const vk_tuning *tu = &be->pl.tune;
    int64_t per = rows_per_binding(be, w->row_bytes), n_out = w->ne[1];
    uint32_t n_tok = (uint32_t)x->ne[1];
    bool mv = n_tok <= tu->mv_max_tok;
    int nt_variant = n_tok <= 1 ? 0 : n_tok <= 2 ? 1 : n_tok <= 4 ? 2 : 3; /* NT = 1 << it */
    if (per < 1) {
        vk_fail(be, AL_ERR_UNSUPPORTED, "a weight row of %llu bytes exceeds one binding",
                (unsigned long long)w->row_bytes);
        return;
    }
    if (!vk_begin(be, (int)div_up((uint64_t)n_out, (uint64_t)per), 0)) return;
    vk_hazard(be, x->data, false);
    vk_hazard(be, w->data, false);
    if (bias) vk_hazard(be, bias->data, false);
    vk_hazard(be, out->data, true);
    for (int64_t r0 = 0; r0 < n_out; r0 += per) {
        int64_t r1 = r0 + per < n_out ? r0 + per : n_out;
        VkDescriptorBufferInfo info[4];
        vk_pc_matmul pc = {.n_in = (uint32_t)w->ne[0], .n_out = (uint32_t)(r1 - r0),
                           .n_tok = n_tok, .w_row_bytes = (uint32_t)w->row_bytes,
                           .has_bias = bias != NULL, .row0 = (uint32_t)r0};
        uint32_t b_stride;
        pc.x_off = bind_f32(be, &info[0], x, &pc.x_stride);
        /* the shaders read rows of 4k inputs as vec4: they must start at 4k floats */
        AL_ASSERT(pc.n_in % 4 || (pc.x_off % 4 == 0 && pc.x_stride % 4 == 0));
        pc.w_off = bind(be, &info[1], w->data, w->offset + (uint64_t)r0 * w->row_bytes,
                        (uint64_t)(r1 - r0) * w->row_bytes);
        /* without a bias, x stands in: the binding must be valid, it is never read */
        pc.b_off = bind_f32(be, &info[2], bias ? bias : x, &b_stride);
        pc.o_off = bind_f32(be, &info[3], out, &pc.o_stride);
        if (mv)
            dispatch(be, VK_OP_MATVEC, w->type, nt_variant, info, &pc, sizeof pc,
                     div_up(pc.n_out, tu->mv_nr), 1);
        else
            dispatch(be, VK_OP_MATMUL, w->type, 0, info, &pc, sizeof pc,
                     div_up(pc.n_out, tu->mm_bm), (uint32_t)div_up(n_tok, tu->mm_bn));
    }
}

/* ---- rope -------------------------------------------------------------------------------- */

/* cos and sin of every (position, pair) of the call, in double precision as the
 * reference computes them, written into the upload arena; consecutive calls with
 * the same positions (q and k of every layer) share one table. */
static uint64_t rope_table(vk_backend *be, int pos0, int n_rows, const al_rope *rp) {
    if (be->rope_cache.valid && be->rope_cache.pos0 == pos0 && be->rope_cache.n_rows == n_rows &&
        !memcmp(&be->rope_cache.rope, rp, sizeof *rp))
        return be->rope_cache.offset;
    int half = rp->n_rot / 2;
    uint64_t off = upload(be, NULL, (uint64_t)n_rows * (uint64_t)half * 2 * sizeof(float));
    float *cs = (float *)((char *)be->upload->mapped + off);
    for (int t = 0; t < n_rows; t++) {
        double pos = (double)(pos0 + t) * rp->freq_scale;
        for (int i = 0; i < half; i++) {
            double theta = pos * pow(rp->freq_base, -2.0 * i / rp->n_rot);
            if (rp->freq_factors) theta /= rp->freq_factors[i];
            cs[2 * ((size_t)t * half + i)] = (float)cos(theta);
            cs[2 * ((size_t)t * half + i) + 1] = (float)sin(theta);
        }
    }
    be->rope_cache.valid = true;
    be->rope_cache.pos0 = pos0;
    be->rope_cache.n_rows = n_rows;
    be->rope_cache.rope = *rp;
    be->rope_cache.offset = off;
    return off;
}

void vk_op_rope(al_backend *base, al_tensor *x, int n_head, int head_dim, int pos0,
                const al_rope *rope) {
    vk_backend *be = (vk_backend *)base;
    AL_ASSERT(x->ne[0] >= (int64_t)n_head * head_dim && rope->n_rot <= head_dim);
    int n_rows = (int)x->ne[1], half = rope->n_rot / 2;
    if (half == 0 || n_rows == 0) return;
    uint64_t table_bytes = (uint64_t)n_rows * (uint64_t)half * 2 * sizeof(float);
    if (!vk_begin(be, 1, table_bytes)) return;
    uint64_t cs_off = rope_table(be, pos0, n_rows, rope);
    vk_hazard(be, x->data, true);
    VkDescriptorBufferInfo info[2];
    vk_pc_rope pc = {.n_rows = (uint32_t)n_rows, .n_head = (uint32_t)n_head,
                     .head_dim = (uint32_t)head_dim, .half = (uint32_t)half,
                     .neox = rope->neox};
    pc.x_off = bind_f32(be, &info[0], x, &pc.x_stride);
    pc.cs_off = bind(be, &info[1], be->upload, cs_off, table_bytes) / (uint32_t)sizeof(float);
    dispatch(be, VK_OP_ROPE, 0, 0, info, &pc, sizeof pc,
             div_up((uint64_t)half * (uint64_t)n_head, be->pl.tune.rope_wg), (uint32_t)n_rows);
}

/* ---- attention --------------------------------------------------------------------------- */

/* Copies the n rows of src (kv_bytes each) to rows [row0, row0 + n) of dst. */
static void copy_rows(vk_backend *be, const al_tensor *src, al_tensor *dst, int row0, int n,
                      uint64_t kv_bytes) {
    const vk_buf *s = src->data, *dd = dst->data;
    vk_hazard(be, s, false);
    vk_hazard(be, dd, true);
    uint64_t dst0 = dst->offset + (uint64_t)row0 * dst->row_bytes;
    if (src->row_bytes == kv_bytes && dst->row_bytes == kv_bytes) {
        VkBufferCopy one = {.srcOffset = src->offset, .dstOffset = dst0, .size = kv_bytes * (uint64_t)n};
        be->d.fn.vkCmdCopyBuffer(be->cmd, s->buffer, dd->buffer, 1, &one);
        return;
    }
    VkBufferCopy regions[64];
    for (int t0 = 0; t0 < n; t0 += 64) {
        int m = n - t0 < 64 ? n - t0 : 64;
        for (int i = 0; i < m; i++)
            regions[i] = (VkBufferCopy){.srcOffset = src->offset + (uint64_t)(t0 + i) * src->row_bytes,
                                        .dstOffset = dst0 + (uint64_t)(t0 + i) * dst->row_bytes,
                                        .size = kv_bytes};
        be->d.fn.vkCmdCopyBuffer(be->cmd, s->buffer, dd->buffer, (uint32_t)m, regions);
    }
}

void vk_op_attention(al_backend *base, const al_tensor *q, const al_tensor *k,
                     const al_tensor *v, al_tensor *k_cache, al_tensor *v_cache,
                     const al_attn_shape *s, al_tensor *out) {
    vk_backend *be = (vk_backend *)base;
    AL_ASSERT(s->n_head % s->n_head_kv == 0 && q->ne[1] >= s->n_tokens);
    if (s->n_past + s->n_tokens > k_cache->ne[1]) {
        vk_fail(be, AL_ERR_ARG, "attention: %d + %d positions exceed the cache of %lld",
                s->n_past, s->n_tokens, (long long)k_cache->ne[1]);
        return;
    }
    if ((uint32_t)s->head_dim > be->pl.tune.attn_max_hd) {
        vk_fail(be, AL_ERR_UNSUPPORTED, "attention: head size %d exceeds the shader's %u",
                s->head_dim, be->pl.tune.attn_max_hd);
        return;
    }
    if (!vk_begin(be, 1, 0)) return;
    uint64_t kv_bytes = (uint64_t)s->n_head_kv * (uint64_t)s->head_dim * sizeof(float);
    copy_rows(be, k, k_cache, s->n_past, s->n_tokens, kv_bytes);
    copy_rows(be, v, v_cache, s->n_past, s->n_tokens, kv_bytes);
    vk_hazard(be, q->data, false);
    vk_hazard(be, k_cache->data, false);
    vk_hazard(be, v_cache->data, false);
    vk_hazard(be, out->data, true);
    VkDescriptorBufferInfo info[4];
    vk_pc_attention pc = {.n_head = (uint32_t)s->n_head, .n_head_kv = (uint32_t)s->n_head_kv,
                          .head_dim = (uint32_t)s->head_dim, .n_past = (uint32_t)s->n_past,
                          .n_tok = (uint32_t)s->n_tokens,
                          .scale = 1.0f / sqrtf((float)s->head_dim)};
    al_tensor qv = al_tensor_rows(q, 0, s->n_tokens), ov = al_tensor_rows(out, 0, s->n_tokens);
    al_tensor kv = al_tensor_rows(k_cache, 0, s->n_past + s->n_tokens);
    al_tensor vv = al_tensor_rows(v_cache, 0, s->n_past + s->n_tokens);
    pc.q_off = bind_f32(be, &info[0], &qv, &pc.q_stride);
    pc.k_off = bind_f32(be, &info[1], &kv, &pc.k_stride);
    pc.v_off = bind_f32(be, &info[2], &vv, &pc.v_stride);
    pc.o_off = bind_f32(be, &info[3], &ov, &pc.o_stride);
    dispatch(be, VK_OP_ATTENTION, 0, 0, info, &pc, sizeof pc, pc.n_head, pc.n_tok);
}
