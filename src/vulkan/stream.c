/* stream.c: the command stream of one backend object (vk.h: vk_stream).
 *
 * The model calls the ops one after another (backend.h) and reads results only with
 * tensor_read. So the ops are recorded as they are called, into a single command
 * buffer, and nothing is submitted until the host needs a result (tensor_read, the
 * `sync` op, freeing a tensor) or the buffer's descriptor pool or upload arena is
 * full; then it is submitted and waited for, with a finite fence timeout.
 *
 * Every context has its own stream (vk_backend.c: context backends), so two threads
 * with two contexts on one model never share a command buffer, descriptor pool,
 * hazard list, upload arena or fence. The one thing they share is the queue: a
 * VkQueue must be externally synchronized, so submissions take the device's queue
 * lock (held only for vkQueueSubmit, not for the wait).
 *
 * Barriers: each command declares the buffers it reads and writes (vk_hazard). A
 * global memory barrier goes in only when the new command reads or writes a buffer
 * written since the last barrier, or writes one read since then; independent
 * commands (the Q, K and V projections of one input) run without barriers between
 * them. Tracking is per buffer, not per range: conservative, never wrong. It is per
 * stream: two streams only share buffers that are read-only while they run (weights)
 * or that one thread hands to another between evaluations, after a submit and wait.
 *
 * Timing: a submission's time is the host's recording (its first command to the
 * submit), then the wait for the fence; where the queue has timestamps, the first and
 * last command write one each, and their difference is the device's own share of the
 * wait. Recording the buffer once and replaying it (issue: GPU decode) can save at most
 * the recording; these say, per device, how much that is (bench: vk_*_ms_per_token).
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "vk.h"

enum {
    UPLOAD_BYTES = 8 << 20,     /* token ids and rope tables per submission */
};

al_status vk_fail(vk_backend *be, al_status st, const char *fmt, ...) {
    if (be->s.failed) return be->s.failed;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(be->s.fail_msg, sizeof be->s.fail_msg, fmt, ap);
    va_end(ap);
    be->s.failed = st;
    return st;
}

/* ---- command buffer ------------------------------------------------------------------- */

al_status vk_stream_init(vk_backend *be) {
    vk_device *d = &be->sh->d;
    /* timeout_ns: the creator's to set (vulkan.timeout_ms, or the model backend's) */
    VkCommandPoolCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
        .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
        .queueFamilyIndex = d->queue_family,
    };
    VkResult r = d->fn.vkCreateCommandPool(d->dev, &pci, NULL, &be->s.cmd_pool);
    if (r != VK_SUCCESS) goto fail;
    VkCommandBufferAllocateInfo cai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
        .commandPool = be->s.cmd_pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        .commandBufferCount = VK_CHUNKS,
    };
    if ((r = d->fn.vkAllocateCommandBuffers(d->dev, &cai, be->s.cmds)) != VK_SUCCESS) goto fail;
    be->s.cmd = be->s.cmds[0];
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = d->fn.vkCreateFence(d->dev, &fci, NULL, &be->s.fence)) != VK_SUCCESS) goto fail;
    VkDescriptorPoolSize sizes[2] = {
        {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
         .descriptorCount = VK_MAX_SETS * VK_MAX_DESCRIPTORS},
        {.type = VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, .descriptorCount = VK_MAX_SETS},
    };
    VkDescriptorPoolCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
        .maxSets = VK_MAX_SETS,
        .poolSizeCount = 2,
        .pPoolSizes = sizes,
    };
    if ((r = d->fn.vkCreateDescriptorPool(d->dev, &dci, NULL, &be->s.desc_pool)) != VK_SUCCESS)
        goto fail;
    if (d->ts_bits && d->caps.ts_period > 0) {
        VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                     .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                     .queryCount = 2};
        /* without it only the device's share goes unmeasured */
        if (d->fn.vkCreateQueryPool(d->dev, &qci, NULL, &be->s.ts_pool) != VK_SUCCESS)
            be->s.ts_pool = VK_NULL_HANDLE;
        qci.queryCount = 2 * VK_MAX_SETS;
        if (be->sh->prof &&
            d->fn.vkCreateQueryPool(d->dev, &qci, NULL, &be->s.prof_pool) != VK_SUCCESS)
            be->s.prof_pool = VK_NULL_HANDLE;
    }
    return vk_buf_create(d, UPLOAD_BYTES, VK_BUF_HOST, &be->s.upload);
fail:
    return al_error(AL_ERR_DEVICE, "creating command objects on %s failed (%s)", d->caps.name,
                    vk_result_str(r));
}

void vk_stream_destroy(vk_backend *be) {
    vk_device *d = &be->sh->d;
    if (!d->dev || be->s.in_flight) return; /* a timed-out submission may still use them */
    vk_buf_destroy(d, be->s.upload);
    vk_buf_destroy(d, be->s.staging);
    vk_buf_destroy(d, be->s.scratch);
    be->s.upload = be->s.staging = be->s.scratch = NULL;
    if (be->s.desc_pool) d->fn.vkDestroyDescriptorPool(d->dev, be->s.desc_pool, NULL);
    if (be->s.ts_pool) d->fn.vkDestroyQueryPool(d->dev, be->s.ts_pool, NULL);
    if (be->s.prof_pool) d->fn.vkDestroyQueryPool(d->dev, be->s.prof_pool, NULL);
    if (be->s.fence) d->fn.vkDestroyFence(d->dev, be->s.fence, NULL);
    if (be->s.cmd_pool) d->fn.vkDestroyCommandPool(d->dev, be->s.cmd_pool, NULL);
    be->s.desc_pool = VK_NULL_HANDLE;
    be->s.ts_pool = be->s.prof_pool = VK_NULL_HANDLE;
    be->s.fence = VK_NULL_HANDLE;
    be->s.cmd_pool = VK_NULL_HANDLE;
}

/* Records a barrier after every command so far, keeping the hazard lists. */
static void record_barrier(vk_backend *be, VkPipelineStageFlags dst_stage,
                           VkAccessFlags dst_access) {
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = dst_access,
    };
    be->sh->d.fn.vkCmdPipelineBarrier(
        be->s.cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, dst_stage,
        0, 1, &mb, 0, NULL, 0, NULL);
}

static void full_barrier(vk_backend *be, VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
    record_barrier(be, dst_stage, dst_access);
    be->s.n_reads = be->s.n_writes = be->s.cmd_reads = be->s.cmd_writes = 0;
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

/* A barrier between the commands recorded so far and the next one, whose declarations
 * so far stay listed: it runs after the barrier (forgetting them had let a later
 * command skip the barrier it needed against this one). */
static void hazard_barrier(vk_backend *be) {
    vk_stream *s = &be->s;
    const int nr = s->n_reads - s->cmd_reads, nw = s->n_writes - s->cmd_writes;
    VkBuffer r[VK_MAX_HAZARDS], w[VK_MAX_HAZARDS];
    memcpy(r, s->reads + s->cmd_reads, (size_t)nr * sizeof *r);
    memcpy(w, s->writes + s->cmd_writes, (size_t)nw * sizeof *w);
    barrier(be);
    memcpy(s->reads, r, (size_t)nr * sizeof *r);
    memcpy(s->writes, w, (size_t)nw * sizeof *w);
    s->n_reads = nr;
    s->n_writes = nw;
}

void vk_hazard(vk_backend *be, const vk_buf *buf, bool write) {
    vk_stream *s = &be->s;
    VkBuffer b = buf->buffer;
    /* read after write, write after write, write after read, against the commands
     * recorded since the last barrier: one command's own accesses need none */
    if (listed(s->writes, s->cmd_writes, b) || (write && listed(s->reads, s->cmd_reads, b)))
        hazard_barrier(be);
    AL_ASSERT(s->n_reads - s->cmd_reads < VK_MAX_HAZARDS &&
              s->n_writes - s->cmd_writes < VK_MAX_HAZARDS);
    if (s->n_reads == VK_MAX_HAZARDS || s->n_writes == VK_MAX_HAZARDS) hazard_barrier(be);
    if (write) s->writes[s->n_writes++] = b;
    else s->reads[s->n_reads++] = b;
}

void vk_recorded(vk_backend *be) {
    be->s.cmd_reads = be->s.n_reads;
    be->s.cmd_writes = be->s.n_writes;
}

bool vk_begin(vk_backend *be, int n_dispatch, uint64_t upload_bytes) {
    if (be->s.failed) return false;
    upload_bytes += 2 * be->sh->d.caps.align + 64; /* alignment of each upload */
    if (n_dispatch > VK_MAX_SETS || upload_bytes > UPLOAD_BYTES) {
        vk_fail(be, AL_ERR_UNSUPPORTED, "an op needs %d dispatches and %llu upload bytes, more "
                "than one submission holds", n_dispatch, (unsigned long long)upload_bytes);
        return false;
    }
    if (be->s.recording && (be->s.n_sets + (uint32_t)n_dispatch > VK_MAX_SETS ||
                            be->s.upload_used + upload_bytes > UPLOAD_BYTES))
        if (vk_submit_wait(be) != AL_OK) return false;
    if (be->s.recording) return true;
    vk_device *d = &be->sh->d;
    d->fn.vkResetDescriptorPool(d->dev, be->s.desc_pool, 0);
    VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
    };
    be->s.cmd = be->s.cmds[0];
    be->s.n_cmds = 1;
    be->s.chunk_sets = 0;
    VkResult r = d->fn.vkBeginCommandBuffer(be->s.cmd, &bi);
    if (r != VK_SUCCESS) {
        vk_fail(be, AL_ERR_DEVICE, "vkBeginCommandBuffer failed (%s)", vk_result_str(r));
        return false;
    }
    if (be->s.ts_pool) {
        d->fn.vkCmdResetQueryPool(be->s.cmd, be->s.ts_pool, 0, 2);
        d->fn.vkCmdWriteTimestamp(be->s.cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, be->s.ts_pool, 0);
    }
    if (be->s.prof_pool)
        d->fn.vkCmdResetQueryPool(be->s.cmd, be->s.prof_pool, 0, 2 * VK_MAX_SETS);
    be->s.t_begin = al_time_s();
    be->s.recording = true;
    be->s.n_sets = 0;
    be->s.upload_used = 0;
    be->s.rope_cache.valid = false;
    be->s.n_reads = be->s.n_writes = be->s.cmd_reads = be->s.cmd_writes = 0;
    return true;
}

static uint64_t elapsed_ns(double t0, double t1) {
    return t1 > t0 ? (uint64_t)((t1 - t0) * 1e9) : 0;
}

/* Adds the finished submission's device time, from its two timestamps. */
static void count_device_time(vk_backend *be) {
    vk_device *d = &be->sh->d;
    uint64_t ts[2];
    if (!be->s.ts_pool ||
        d->fn.vkGetQueryPoolResults(d->dev, be->s.ts_pool, 0, 2, sizeof ts, ts, sizeof ts[0],
                                    VK_QUERY_RESULT_64_BIT) != VK_SUCCESS)
        return;
    const uint64_t mask = d->ts_bits >= 64 ? ~0ull : (1ull << d->ts_bits) - 1;
    const uint64_t ticks = (ts[1] - ts[0]) & mask; /* the counter may wrap between them */
    atomic_fetch_add_explicit(&be->sh->gpu_ns, (uint64_t)((double)ticks * d->caps.ts_period),
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&be->sh->n_timed, 1, memory_order_relaxed);
}

void vk_prof_mark(vk_backend *be, bool after, int kind) {
    if (!be->s.prof_pool) return;
    const uint32_t i = be->s.n_sets - 1;
    AL_ASSERT(be->s.n_sets > 0 && i < VK_MAX_SETS);
    be->s.prof_kind[i] = (uint16_t)kind;
    /* bottom of pipe: written once everything before it has finished, so the two
     * bracket the dispatch alone (and serialize the stream: profiles run slower) */
    be->sh->d.fn.vkCmdWriteTimestamp(be->s.cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                                     be->s.prof_pool, 2 * i + after);
}

/* Adds each dispatch's device time to its pipeline's entry (sh->prof). A submission
 * whose timestamps are not all there (a failed recording) adds nothing. */
static void count_dispatch_times(vk_backend *be) {
    vk_device *d = &be->sh->d;
    const uint32_t n = be->s.n_sets;
    if (!be->s.prof_pool || n == 0) return;
    uint64_t *ts = al_malloc(2 * (size_t)n * sizeof *ts);
    if (!ts) return;
    if (d->fn.vkGetQueryPoolResults(d->dev, be->s.prof_pool, 0, 2 * n, 2 * n * sizeof *ts, ts,
                                    sizeof *ts, VK_QUERY_RESULT_64_BIT) == VK_SUCCESS) {
        const uint64_t mask = d->ts_bits >= 64 ? ~0ull : (1ull << d->ts_bits) - 1;
        for (uint32_t i = 0; i < n; i++) {
            vk_prof_entry *e = &be->sh->prof[be->s.prof_kind[i]];
            const uint64_t ticks = (ts[2 * i + 1] - ts[2 * i]) & mask;
            atomic_fetch_add_explicit(&e->n, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&e->ns, (uint64_t)((double)ticks * d->caps.ts_period),
                                      memory_order_relaxed);
        }
    }
    al_free(ts);
}

al_status vk_submit_wait(vk_backend *be) {
    if (be->s.failed) return be->s.failed;
    if (!be->s.recording) return AL_OK;
    vk_device *d = &be->sh->d;
    /* results become visible to the host once the fence signals */
    full_barrier(be, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    if (be->s.ts_pool)
        d->fn.vkCmdWriteTimestamp(be->s.cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, be->s.ts_pool,
                                  1);
    be->s.recording = false;
    VkResult r = d->fn.vkEndCommandBuffer(be->s.cmd);
    if (r != VK_SUCCESS)
        return vk_fail(be, AL_ERR_DEVICE, "vkEndCommandBuffer failed (%s)", vk_result_str(r));
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
        .commandBufferCount = 1,
        .pCommandBuffers = &be->s.cmd,
    };
    const double t_submit = al_time_s();
    atomic_fetch_add_explicit(&be->sh->record_ns, elapsed_ns(be->s.t_begin, t_submit),
                              memory_order_relaxed);
    pthread_mutex_lock(&d->queue_lock);
    r = d->fn.vkQueueSubmit(d->queue, 1, &si, be->s.fence);
    pthread_mutex_unlock(&d->queue_lock);
    if (r != VK_SUCCESS)
        return vk_fail(be, r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? AL_ERR_NOMEM : AL_ERR_DEVICE,
                       "vkQueueSubmit on %s failed (%s)", d->caps.name, vk_result_str(r));
    atomic_fetch_add_explicit(&be->sh->n_submits, 1, memory_order_relaxed);
    r = d->fn.vkWaitForFences(d->dev, 1, &be->s.fence, VK_TRUE, be->s.timeout_ns);
    if (r == VK_TIMEOUT) {
        be->s.in_flight = true;
        atomic_store(&be->sh->in_flight, true);
        return vk_fail(be, AL_ERR_DEVICE, "%s did not finish its work within %g s (fence "
                       "timeout; vulkan.timeout_ms raises it)", d->caps.name,
                       (double)be->s.timeout_ns / 1e9);
    }
    if (r != VK_SUCCESS)
        return vk_fail(be, AL_ERR_DEVICE, "waiting for %s failed (%s)", d->caps.name,
                       vk_result_str(r));
    atomic_fetch_add_explicit(&be->sh->wait_ns, elapsed_ns(t_submit, al_time_s()),
                              memory_order_relaxed);
    count_device_time(be);
    count_dispatch_times(be);
    d->fn.vkResetFences(d->dev, 1, &be->s.fence);
    for (int i = 0; i < be->s.n_cmds; i++)
        d->fn.vkResetCommandBuffer(be->s.cmds[i], 0);
    return AL_OK;
}

/* Submits the recording so far without waiting and goes on in the next command buffer,
 * behind a barrier: a barrier's first scope is every command earlier in submission
 * order, the submitted ones too, so the hazards stay covered, and the fence of the
 * last submission signals after all of them (each waits for the one before). The
 * hazard lists stay as they were: an op may declare its buffers once for several
 * dispatches, and those after the chunk's end still use them (clearing the lists had
 * let the next op's write skip its barrier; the validation layer's synchronization
 * checks caught it). The descriptor sets and uploads stay until vk_begin, after the
 * fence. */
static void submit_chunk(vk_backend *be) {
    vk_device *d = &be->sh->d;
    VkResult r = d->fn.vkEndCommandBuffer(be->s.cmd);
    if (r != VK_SUCCESS) {
        vk_fail(be, AL_ERR_DEVICE, "vkEndCommandBuffer failed (%s)", vk_result_str(r));
        return;
    }
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
        .commandBufferCount = 1,
        .pCommandBuffers = &be->s.cmd,
    };
    pthread_mutex_lock(&d->queue_lock);
    r = d->fn.vkQueueSubmit(d->queue, 1, &si, VK_NULL_HANDLE);
    pthread_mutex_unlock(&d->queue_lock);
    if (r != VK_SUCCESS) {
        if (be->s.n_cmds > 1) d->fn.vkDeviceWaitIdle(d->dev); /* the chunks before it */
        vk_fail(be, r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? AL_ERR_NOMEM : AL_ERR_DEVICE,
                "vkQueueSubmit on %s failed (%s)", d->caps.name, vk_result_str(r));
        return;
    }
    atomic_fetch_add_explicit(&be->sh->n_submits, 1, memory_order_relaxed);
    be->s.cmd = be->s.cmds[be->s.n_cmds++];
    be->s.chunk_sets = 0;
    VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
    };
    r = d->fn.vkBeginCommandBuffer(be->s.cmd, &bi);
    if (r != VK_SUCCESS) {
        /* nothing will wait for what was submitted: wait here, so that no buffer is
         * freed under it */
        d->fn.vkDeviceWaitIdle(d->dev);
        vk_fail(be, AL_ERR_DEVICE, "vkBeginCommandBuffer failed (%s)", vk_result_str(r));
        return;
    }
    record_barrier(be, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                   VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                       VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
}


void vk_count_dispatch(vk_backend *be) {
    atomic_fetch_add_explicit(&be->sh->n_dispatches, 1, memory_order_relaxed);
    const uint32_t chunk = be->sh->pl.tune.chunk;
    if (chunk && ++be->s.chunk_sets >= chunk && be->s.n_cmds < VK_CHUNKS && !be->s.failed)
        submit_chunk(be);
}

void vk_count_kv_copy(vk_backend *be) {
    atomic_fetch_add_explicit(&be->sh->n_kv_copies, 1, memory_order_relaxed);
}
