/* memory.c: buffers, weights and tensor storage of the Vulkan backend.
 *
 * Every tensor lives in a vk_buf (one VkBuffer with its own memory); al_tensor.data
 * points at it and al_tensor.offset is the byte offset inside it.
 *
 * Weights arrive as host addresses in the mapped model file. Three ways to the GPU:
 *   import   unified-memory devices with VK_EXT_external_memory_host: the pages of
 *            the mapping become device memory as they are, nothing is copied; the
 *            imported range is the tensor widened to the import alignment (pages),
 *            which stays inside the mapping because mappings are whole pages
 *   host     unified memory without import: one copy into host-visible memory
 *   staging  discrete GPUs: each weight is copied through a host-visible staging
 *            buffer into device-local memory; the memcpy out of the mapping is what
 *            reads the file, so the file is read once, as it is uploaded
 * vulkan.weights = import|host|staging (the CLI's ANYLLM_VK_WEIGHTS) forces a path, and
 * vulkan.pretend_discrete (ANYLLM_VK_PRETEND_DISCRETE=1) treats a unified-memory device
 * as discrete (nothing mapped but staging), so tests
 * run every path on one device.
 *
 * Activations are device-local; on unified memory they are also mapped, so reading
 * logits is a memcpy after the wait. On discrete devices reads go through staging.
 */
#include <math.h>
#include <string.h>

#include "util.h"
#include "vk.h"

enum { STAGING_BYTES = 32 << 20 };

/* ---- buffers ---------------------------------------------------------------------------- */

/* A memory type allowed by type_bits with all of `need`, preferring one that also has
 * `want`; -1 if none. */
static int memory_type(const vk_caps *c, uint32_t type_bits, VkMemoryPropertyFlags need,
                       VkMemoryPropertyFlags want) {
    int fallback = -1;
    for (uint32_t i = 0; i < c->mem.memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = c->mem.memoryTypes[i].propertyFlags;
        if (!(type_bits & (1u << i)) || (f & need) != need) continue;
        if ((f & want) == want) return (int)i;
        if (fallback < 0) fallback = (int)i;
    }
    return fallback;
}

static al_status vk_status(VkResult r) {
    return r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY ||
                   r == VK_ERROR_TOO_MANY_OBJECTS
               ? AL_ERR_NOMEM
               : AL_ERR_DEVICE;
}

/* Every buffer can be bound either way and copied either way: the backend has few
 * buffers, and none gains from narrower usage. */
static const VkBufferUsageFlags BUFFER_USAGE = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                               VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT |
                                               VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                               VK_BUFFER_USAGE_TRANSFER_DST_BIT;

/* Allocates memory of type `type` for b (whose buffer exists), binds it, and maps it
 * if `map` and it is host-visible. pnext chains an import. */
static al_status bind_memory(vk_device *d, vk_buf *b, uint64_t size, int type, const void *pnext,
                             bool map) {
    VkMemoryAllocateInfo mai = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
        .pNext = pnext,
        .allocationSize = size,
        .memoryTypeIndex = (uint32_t)type,
    };
    VkResult r = d->fn.vkAllocateMemory(d->dev, &mai, NULL, &b->memory);
    if (r != VK_SUCCESS) {
        b->memory = VK_NULL_HANDLE;
        return al_error(vk_status(r), "vkAllocateMemory of %.1f MiB on %s failed (%s)",
                        (double)size / (1 << 20), d->caps.name, vk_result_str(r));
    }
    if ((r = d->fn.vkBindBufferMemory(d->dev, b->buffer, b->memory, 0)) != VK_SUCCESS)
        return al_error(vk_status(r), "vkBindBufferMemory failed (%s)", vk_result_str(r));
    VkMemoryPropertyFlags f = d->caps.mem.memoryTypes[type].propertyFlags;
    if (map && (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)) {
        r = d->fn.vkMapMemory(d->dev, b->memory, 0, VK_WHOLE_SIZE, 0, &b->mapped);
        if (r != VK_SUCCESS) b->mapped = NULL; /* usable, just read through staging */
        b->host_cached = b->mapped && (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    }
    return AL_OK;
}

static al_status create_buffer(vk_device *d, uint64_t size, const void *pnext, vk_buf **out,
                               VkMemoryRequirements *req) {
    *out = NULL;
    if (size > d->caps.max_alloc)
        return al_error(AL_ERR_NOMEM, "a buffer of %.1f MiB exceeds the largest allocation of "
                        "%s (%.1f MiB)", (double)size / (1 << 20), d->caps.name,
                        (double)d->caps.max_alloc / (1 << 20));
    vk_buf *b = al_calloc(1, sizeof *b);
    if (!b) return al_error(AL_ERR_NOMEM, "out of memory");
    VkBufferCreateInfo bci = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .pNext = pnext,
        .size = size,
        .usage = BUFFER_USAGE,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    VkResult r = d->fn.vkCreateBuffer(d->dev, &bci, NULL, &b->buffer);
    if (r != VK_SUCCESS) {
        al_free(b);
        return al_error(vk_status(r), "vkCreateBuffer of %.1f MiB failed (%s)",
                        (double)size / (1 << 20), vk_result_str(r));
    }
    d->fn.vkGetBufferMemoryRequirements(d->dev, b->buffer, req);
    b->size = size;
    *out = b;
    return AL_OK;
}

al_status vk_buf_create(vk_device *d, uint64_t size, vk_buf_kind kind, vk_buf **out) {
    VkMemoryRequirements req;
    al_status st = create_buffer(d, size, NULL, out, &req);
    if (st != AL_OK) return st;
    vk_buf *b = *out;
    const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                       VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int type;
    if (kind == VK_BUF_DEVICE) /* on unified memory, device-local memory is mappable too */
        type = memory_type(&d->caps, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
                           d->caps.uma ? host : 0);
    else
        type = memory_type(&d->caps, req.memoryTypeBits, host, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (type < 0) {
        vk_buf_destroy(d, b);
        *out = NULL;
        return al_error(AL_ERR_DEVICE, "%s has no %s memory type for buffers", d->caps.name,
                        kind == VK_BUF_DEVICE ? "device-local" : "host-visible");
    }
    b->kind = kind;
    /* device memory is used through mappings only on unified memory: elsewhere a
     * host-visible device-local type (resizable BAR) is slow for the host to read */
    bool map = kind == VK_BUF_HOST || d->caps.uma;
    if ((st = bind_memory(d, b, req.size, type, NULL, map)) != AL_OK) {
        vk_buf_destroy(d, b);
        *out = NULL;
    }
    return st;
}

al_status vk_buf_import(vk_device *d, void *ptr, uint64_t size, vk_buf **out) {
    *out = NULL;
    if (!d->caps.host_import) return al_error(AL_ERR_UNSUPPORTED, "no host memory import");
    VkMemoryHostPointerPropertiesEXT hp = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
    VkResult r = d->fn.vkGetMemoryHostPointerPropertiesEXT(
        d->dev, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, ptr, &hp);
    if (r != VK_SUCCESS)
        return al_error(AL_ERR_DEVICE, "host pointer cannot be imported (%s)", vk_result_str(r));
    VkExternalMemoryBufferCreateInfo ext = {
        .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
        .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
    };
    VkMemoryRequirements req;
    al_status st = create_buffer(d, size, &ext, out, &req);
    if (st != AL_OK) return st;
    vk_buf *b = *out;
    int type = memory_type(&d->caps, req.memoryTypeBits & hp.memoryTypeBits, 0,
                           VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (type < 0 || req.size > size) {
        vk_buf_destroy(d, b);
        *out = NULL;
        return al_error(AL_ERR_DEVICE, "no memory type can import this host range");
    }
    VkImportMemoryHostPointerInfoEXT imp = {
        .sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
        .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
        .pHostPointer = ptr,
    };
    b->kind = VK_BUF_IMPORTED;
    b->host_base = ptr;
    if ((st = bind_memory(d, b, size, type, &imp, false)) != AL_OK) {
        vk_buf_destroy(d, b);
        *out = NULL;
    }
    return st;
}

void vk_buf_destroy(vk_device *d, vk_buf *b) {
    if (!b) return;
    if (b->buffer) d->fn.vkDestroyBuffer(d->dev, b->buffer, NULL);
    if (b->memory) d->fn.vkFreeMemory(d->dev, b->memory, NULL); /* also unmaps */
    al_free(b);
}

/* ---- activations ------------------------------------------------------------------------- */

al_status vk_tensor_alloc(al_backend *base, int64_t n_cols, int64_t n_rows, al_tensor *out) {
    vk_backend *be = (vk_backend *)base;
    memset(out, 0, sizeof *out);
    uint64_t n_bytes;
    if (n_cols <= 0 || n_rows <= 0 || !al_mul_u64((uint64_t)n_cols, (uint64_t)n_rows, &n_bytes) ||
        !al_mul_u64(n_bytes, sizeof(float), &n_bytes))
        return al_error(AL_ERR_ARG, "tensor of %lld x %lld floats is too large",
                        (long long)n_cols, (long long)n_rows);
    if (be->s.failed) return al_error(be->s.failed, "%s", be->s.fail_msg);
    if (n_bytes > be->sh->d.caps.max_range)
        return al_error(AL_ERR_UNSUPPORTED, "a tensor of %.1f MiB exceeds the %.0f MiB that %s "
                        "binds at once", (double)n_bytes / (1 << 20),
                        (double)be->sh->d.caps.max_range / (1 << 20), be->sh->d.caps.name);
    /* whole pages on unified memory, so that another device can import the tensor
     * (a KV cache shared between contexts: tensor_host, tensor_import) */
    const uint64_t a = be->sh->d.caps.uma ? be->sh->d.caps.import_align : 0;
    if (a > 1) n_bytes = (n_bytes + a - 1) & ~(a - 1);
    vk_buf *b;
    al_status st = vk_buf_create(&be->sh->d, n_bytes, VK_BUF_DEVICE, &b);
    if (st != AL_OK) return st;
    if (b->mapped) {
        memset(b->mapped, 0, n_bytes);
    } else {
        if (!vk_begin(be, 0, 0)) {
            vk_buf_destroy(&be->sh->d, b);
            return al_error(be->s.failed, "%s", be->s.fail_msg);
        }
        vk_hazard(be, b, true);
        be->sh->d.fn.vkCmdFillBuffer(be->s.cmd, b->buffer, 0, VK_WHOLE_SIZE, 0);
        vk_recorded(be);
    }
    *out = (al_tensor){.type = AL_TYPE_F32, .ne = {n_cols, n_rows}, .data = b,
                       .row_bytes = (uint64_t)n_cols * sizeof(float)};
    return AL_OK;
}

void vk_tensor_free(al_backend *base, al_tensor *t) {
    vk_backend *be = (vk_backend *)base;
    if (!t || !t->data) return;
    vk_submit_wait(be); /* commands recorded so far may use it */
    if (!be->s.in_flight) vk_buf_destroy(&be->sh->d, t->data); /* else the GPU may still use it */
    memset(t, 0, sizeof *t);
}

static al_status upload(vk_backend *be, vk_buf *b, uint64_t dst, const char *host, uint64_t n);

static al_status ensure_staging(vk_backend *be) {
    if (be->s.staging) return AL_OK;
    return vk_buf_create(&be->sh->d, STAGING_BYTES, VK_BUF_HOST, &be->s.staging);
}

void vk_tensor_read(al_backend *base, const al_tensor *t, void *dst, uint64_t n_bytes) {
    vk_backend *be = (vk_backend *)base;
    const vk_buf *b = t->data;
    al_status st = vk_submit_wait(be);
    if (st == AL_OK && b->mapped) {
        memcpy(dst, (const char *)b->mapped + t->offset, n_bytes);
        return;
    }
    if (st == AL_OK && (st = ensure_staging(be)) != AL_OK) vk_fail(be, st, "%s", al_last_error());
    for (uint64_t done = 0; st == AL_OK && done < n_bytes; done += STAGING_BYTES) {
        uint64_t n = n_bytes - done < STAGING_BYTES ? n_bytes - done : STAGING_BYTES;
        if (!vk_begin(be, 0, 0)) break;
        vk_hazard(be, b, false);
        vk_hazard(be, be->s.staging, true);
        VkBufferCopy region = {.srcOffset = t->offset + done, .dstOffset = 0, .size = n};
        be->sh->d.fn.vkCmdCopyBuffer(be->s.cmd, b->buffer, be->s.staging->buffer, 1, &region);
        vk_recorded(be);
        if ((st = vk_submit_wait(be)) == AL_OK)
            memcpy((char *)dst + done, be->s.staging->mapped, n);
    }
    /* a failed read leaves NaNs, never stale numbers; `sync` reports the failure */
    if (be->s.failed)
        for (uint64_t i = 0; i + sizeof(float) <= n_bytes; i += sizeof(float))
            memcpy((char *)dst + i, &(float){NAN}, sizeof(float));
}

/* On a discrete device through the staging buffer; a failure is `sync`'s to report. */
void vk_tensor_write(al_backend *base, al_tensor *t, const void *src, uint64_t n_bytes) {
    vk_backend *be = (vk_backend *)base;
    vk_buf *b = t->data;
    al_status st = vk_submit_wait(be); /* recorded ops may still read or write t */
    if (st == AL_OK && b->mapped) {
        memcpy((char *)b->mapped + t->offset, src, n_bytes);
        return;
    }
    if (st == AL_OK && (st = upload(be, b, t->offset, src, n_bytes)) != AL_OK && !be->s.failed)
        vk_fail(be, st, "%s", al_last_error());
}

/* The host sees a tensor in place when its memory is mapped and cached (unified memory
 * that is not write-combined), or is host memory this device imported. */
void *vk_tensor_host(al_backend *base, const al_tensor *t, uint64_t *n_bytes) {
    (void)base;
    const vk_buf *b = t->data;
    const char *host = b->kind == VK_BUF_IMPORTED ? b->host_base
                       : b->host_cached            ? b->mapped
                                                   : NULL;
    *n_bytes = host && b->size > t->offset ? b->size - t->offset : 0;
    return host ? (char *)host + t->offset : NULL;
}

/* Host memory shared with another backend, imported as the weights are (import_weight):
 * only on unified memory, where the pages are the device's memory too; a discrete GPU
 * reading a KV cache over the bus every step would be slower than its own copy. */
al_status vk_tensor_import(al_backend *base, void *host, uint64_t n_bytes, int64_t n_cols,
                           int64_t n_rows, al_tensor *out) {
    vk_backend *be = (vk_backend *)base;
    const vk_caps *c = &be->sh->d.caps;
    memset(out, 0, sizeof *out);
    if (be->s.failed) return al_error(be->s.failed, "%s", be->s.fail_msg);
    if (!c->uma || !c->host_import || !c->import_align)
        return al_error(AL_ERR_UNSUPPORTED, "%s cannot use host memory in place (%s)", c->name,
                        !c->uma ? "not unified memory" : "no VK_EXT_external_memory_host");
    const uint64_t a = c->import_align, need = (uint64_t)n_cols * (uint64_t)n_rows * sizeof(float);
    const uint64_t size = (need + a - 1) & ~(a - 1); /* whole pages */
    if ((uintptr_t)host % a || size > n_bytes)
        return al_error(AL_ERR_UNSUPPORTED, "host memory at %p (%llu bytes) is not whole pages "
                        "of %llu bytes, which %s imports", host, (unsigned long long)n_bytes,
                        (unsigned long long)a, c->name);
    if (need > c->max_range)
        return al_error(AL_ERR_UNSUPPORTED, "a tensor of %.1f MiB exceeds the %.0f MiB that %s "
                        "binds at once", (double)need / (1 << 20), (double)c->max_range / (1 << 20),
                        c->name);
    vk_buf *b;
    al_status st = vk_buf_import(&be->sh->d, host, size, &b);
    if (st != AL_OK) return st;
    *out = (al_tensor){.type = AL_TYPE_F32, .ne = {n_cols, n_rows}, .data = b,
                       .row_bytes = (uint64_t)n_cols * sizeof(float), .borrowed = true};
    return AL_OK;
}

/* ---- weights ----------------------------------------------------------------------------- */

static al_status keep_weight(vk_backend *be, vk_buf *b) {
    if (be->sh->n_weights == be->sh->cap_weights) {
        int cap = be->sh->cap_weights ? 2 * be->sh->cap_weights : 64;
        vk_buf **w = al_realloc(be->sh->weights, (size_t)cap * sizeof *w);
        if (!w) return al_error(AL_ERR_NOMEM, "out of memory");
        be->sh->weights = w;
        be->sh->cap_weights = cap;
    }
    be->sh->weights[be->sh->n_weights++] = b;
    return AL_OK;
}

/* Imports the pages holding [host, host + n); a tensor inside the previous import
 * (neighbouring small tensors share pages) reuses it. */
static al_status import_weight(vk_backend *be, const char *host, uint64_t n, vk_buf **out,
                               uint64_t *offset) {
    if (be->sh->n_weights > 0) {
        vk_buf *last = be->sh->weights[be->sh->n_weights - 1];
        const char *base = last->host_base;
        if (last->kind == VK_BUF_IMPORTED && host >= base && host + n <= base + last->size) {
            *out = last;
            *offset = (uint64_t)(host - base);
            return AL_OK;
        }
    }
    uint64_t a = be->sh->d.caps.import_align;
    uintptr_t start = (uintptr_t)host & ~(uintptr_t)(a - 1);
    uintptr_t end = ((uintptr_t)host + n + a - 1) & ~(uintptr_t)(a - 1);
    al_status st = vk_buf_import(&be->sh->d, (void *)start, end - start, out);
    if (st != AL_OK) return st;
    *offset = (uintptr_t)host - start;
    return keep_weight(be, *out);
}

/* Copies n bytes from host into b at offset dst through the staging buffer, a chunk
 * per submission. */
static al_status upload(vk_backend *be, vk_buf *b, uint64_t dst, const char *host, uint64_t n) {
    al_status st = ensure_staging(be);
    for (uint64_t done = 0; st == AL_OK && done < n; done += STAGING_BYTES) {
        uint64_t len = n - done < STAGING_BYTES ? n - done : STAGING_BYTES;
        memcpy(be->s.staging->mapped, host + done, len);
        if (!vk_begin(be, 0, 0)) return be->s.failed;
        vk_hazard(be, be->s.staging, false);
        vk_hazard(be, b, true);
        VkBufferCopy region = {.srcOffset = 0, .dstOffset = dst + done, .size = len};
        be->sh->d.fn.vkCmdCopyBuffer(be->s.cmd, be->s.staging->buffer, b->buffer, 1, &region);
        vk_recorded(be);
        st = vk_submit_wait(be);
    }
    return st;
}

/* A copy of the weight in device memory (staging) or mapped device memory (host). The
 * buffer is rounded up to whole 32-bit words, as ops.c rounds bindings: shaders read
 * weights as 16-bit words, and a tensor of MXFP4's 17-byte blocks may end in the low
 * byte of one (see dequant.glsl). */
static al_status copy_weight(vk_backend *be, const char *host, uint64_t n, vk_buf **out) {
    al_status st = vk_buf_create(&be->sh->d, (n + 3) & ~(uint64_t)3, VK_BUF_DEVICE, out);
    if (st != AL_OK) return st;
    if ((*out)->mapped && be->sh->weight_mode != VK_WEIGHTS_STAGING)
        memcpy((*out)->mapped, host, n);
    else
        st = upload(be, *out, 0, host, n);
    if (st == AL_OK) st = keep_weight(be, *out);
    if (st != AL_OK) vk_buf_destroy(&be->sh->d, *out);
    be->base.n_bytes_copied += st == AL_OK ? n : 0;
    return st;
}

al_status vk_weight_load(al_backend *base, al_tensor *w) {
    vk_backend *be = (vk_backend *)base;
    if (be->s.failed) return al_error(be->s.failed, "%s", be->s.fail_msg);
    if (!be->owns_shared) /* the shared weight list is written on the loading thread only */
        return al_error(AL_ERR_ARG, "weights are loaded on the model's backend, not a context's");
    if (!vk_type_supported(w->type))
        return al_error(AL_ERR_UNSUPPORTED, "the Vulkan backend has no shaders for weights of "
                        "type %s (%u)", quant_type_name(w->type), w->type);
    /* get_rows and matmul bind whole rows: one must fit a binding (checked here, at
     * load, rather than failing the first evaluation) */
    const vk_caps *c = &be->sh->d.caps;
    if (w->row_bytes > c->max_range - c->align)
        return al_error(AL_ERR_UNSUPPORTED, "Vulkan on %s: a weight row of %llu bytes exceeds "
                        "its %.0f MiB storage binding", c->name, (unsigned long long)w->row_bytes,
                        (double)c->max_range / (1 << 20));
    double t0 = al_time_s();
    al_status st = AL_OK;
    if (w->ne[1] > 1) { /* a matrix: its matmul and get_rows pipelines, made now so a
                           failure is reported at load time */
        const vk_pipeline *p;
        vk_device *d = &be->sh->d;
        vk_pipelines *pl = &be->sh->pl;
        if (pl->tune.cpu_rows)
            st = vk_pipeline_get(d, pl, VK_OP_MATMUL_ROWS, w->type, 0, &p);
        else if ((st = vk_pipeline_get(d, pl, VK_OP_MATVEC, w->type, 0, &p)) == AL_OK)
            st = vk_pipeline_get(d, pl, vk_prompt_matmul(&pl->tune), w->type, 0, &p);
        if (st != AL_OK || (st = vk_pipeline_get(d, pl, VK_OP_GET_ROWS, w->type, 0, &p)))
            return st;
    }
    const char *host = (const char *)w->data + w->offset;
    uint64_t n = w->row_bytes * (uint64_t)w->ne[1], offset = 0;
    const uint64_t max = be->sh->max_weight_bytes;
    if (max && be->sh->bytes_imported + be->base.n_bytes_copied + n > max)
        return al_error(AL_ERR_NOMEM, "out of device memory for the weights (a limit of %llu "
                        "bytes, vulkan.max_weight_bytes)",
                        (unsigned long long)max);
    vk_buf *b = NULL;
    if (be->sh->weight_mode == VK_WEIGHTS_IMPORT) {
        st = import_weight(be, host, n, &b, &offset);
        if (st == AL_OK) be->sh->bytes_imported += n;
    }
    if (!b) { /* not importing, or this range could not be imported */
        offset = 0;
        st = copy_weight(be, host, n, &b);
    }
    be->sh->load_s += al_time_s() - t0;
    if (st != AL_OK) return st;
    w->data = b;
    w->offset = offset;
    return AL_OK;
}

void vk_weights_destroy(vk_backend *be) {
    for (int i = 0; i < be->sh->n_weights; i++) vk_buf_destroy(&be->sh->d, be->sh->weights[i]);
    al_free(be->sh->weights);
    be->sh->weights = NULL;
    be->sh->n_weights = be->sh->cap_weights = 0;
}
