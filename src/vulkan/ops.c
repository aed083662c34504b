/* ops.c: every op of the Vulkan backend, recorded into the calling backend's command
 * stream (stream.c: when it is submitted, and the barriers between commands). Each
 * op declares what it reads and writes (vk_hazard), makes room (vk_begin), binds its
 * buffers from the stream's descriptor pool and dispatches.
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

/* ---- dispatch helpers ------------------------------------------------------------------ */

/* Copies n bytes into the upload arena (room was made by vk_begin); returns the
 * offset, aligned for binding. */
static uint64_t upload(vk_backend *be, const void *src, uint64_t n) {
    uint64_t a = be->sh->d.caps.align > 16 ? be->sh->d.caps.align : 16;
    uint64_t off = (be->s.upload_used + a - 1) & ~(a - 1);
    if (src) memcpy((char *)be->s.upload->mapped + off, src, n);
    be->s.upload_used = off + n;
    return off;
}

/* Copies n bytes to the upload buffer at off, which upload() has reserved. */
static void upload_at(vk_backend *be, uint64_t off, const void *src, uint64_t n) {
    memcpy((char *)be->s.upload->mapped + off, src, n);
    if (off + n > be->s.upload_used) be->s.upload_used = off + n;
}

/* A binding of [offset, offset + n) of b, starting at the aligned offset below it;
 * returns the bytes from the binding's start to `offset`. */
static uint32_t bind(const vk_backend *be, VkDescriptorBufferInfo *info, const vk_buf *b,
                     uint64_t offset, uint64_t n) {
    uint64_t start = offset & ~(be->sh->d.caps.align - 1);
    uint64_t range = ((offset - start + n) + 3) & ~(uint64_t)3;
    if (start + range > b->size) range = b->size - start;
    AL_ASSERT(range <= be->sh->d.caps.max_range);
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
    vk_device *d = &be->sh->d;
    const vk_pipeline *p;
    al_status st = vk_pipeline_get(d, &be->sh->pl, op, type, variant, &p);
    if (st != AL_OK) {
        vk_fail(be, st, "%s", al_last_error());
        return;
    }
    VkDescriptorSetAllocateInfo dai = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
        .descriptorPool = be->s.desc_pool,
        .descriptorSetCount = 1,
        .pSetLayouts = &be->sh->pl.set_layout[op],
    };
    VkDescriptorSet set;
    VkResult r = d->fn.vkAllocateDescriptorSets(d->dev, &dai, &set);
    if (r != VK_SUCCESS) {
        vk_fail(be, AL_ERR_DEVICE, "vkAllocateDescriptorSets failed (%s)", vk_result_str(r));
        return;
    }
    be->s.n_sets++;
    /* infos holds the bindings in order, an array binding's buffers one after another */
    VkWriteDescriptorSet w[VK_MAX_BINDINGS];
    for (int i = 0, k = 0; i < p->n_bindings; k += (int)w[i].descriptorCount, i++)
        w[i] = (VkWriteDescriptorSet){
            .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
            .dstSet = set,
            .dstBinding = (uint32_t)i,
            .descriptorCount = vk_binding_count(op, i),
            .descriptorType = vk_binding_type(op, i),
            .pBufferInfo = &infos[k],
        };
    d->fn.vkUpdateDescriptorSets(d->dev, (uint32_t)p->n_bindings, w, 0, NULL);
    AL_ASSERT(push_bytes <= VK_PUSH_BYTES);
    uint64_t max_x = d->caps.max_groups[0];
    AL_ASSERT(groups_x <= max_x || groups_y == 1); /* only 1-D grids are folded */
    uint32_t gx = (uint32_t)(groups_x < max_x ? groups_x : max_x);
    if (groups_x > max_x) groups_y = (uint32_t)((groups_x + max_x - 1) / max_x);
    d->fn.vkCmdBindPipeline(be->s.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipeline);
    d->fn.vkCmdBindDescriptorSets(be->s.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, be->sh->pl.layout[op],
                                  0, 1, &set, 0, NULL);
    d->fn.vkCmdPushConstants(be->s.cmd, be->sh->pl.layout[op], VK_SHADER_STAGE_COMPUTE_BIT, 0,
                             push_bytes, push);
    const int kind = be->sh->prof ? vk_pipeline_kind(op, type, variant) : 0;
    vk_prof_mark(be, false, kind);
    d->fn.vkCmdDispatch(be->s.cmd, gx, groups_y, 1);
    vk_prof_mark(be, true, kind);
    vk_recorded(be);
    vk_count_dispatch(be);
}

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* Weight rows that fit one binding: the range less the alignment slack at its start. */
static int64_t rows_per_binding(const vk_backend *be, uint64_t row_bytes) {
    return (int64_t)((be->sh->d.caps.max_range - be->sh->d.caps.align) / row_bytes);
}

/* The helpers above, for the ops recorded in other files (moe.c). */
uint64_t vk_upload(vk_backend *be, const void *src, uint64_t n) { return upload(be, src, n); }
uint32_t vk_bind(const vk_backend *be, VkDescriptorBufferInfo *info, const vk_buf *b,
                 uint64_t offset, uint64_t n) {
    return bind(be, info, b, offset, n);
}
uint32_t vk_bind_f32(const vk_backend *be, VkDescriptorBufferInfo *info, const al_tensor *t,
                     uint32_t *stride) {
    return bind_f32(be, info, t, stride);
}
void vk_dispatch(vk_backend *be, vk_op op, uint32_t type, int variant,
                 const VkDescriptorBufferInfo *infos, const void *push, uint32_t push_bytes,
                 uint64_t groups_x, uint32_t groups_y) {
    dispatch(be, op, type, variant, infos, push, push_bytes, groups_x, groups_y);
}

/* ---- elementwise and per-row ops ------------------------------------------------------- */

/* x op= y elementwise. pc starts the op's push block of push_bytes: the vk_pc_binary
 * fields are filled here, the ones after them (swiglu_oai's alpha, limit) by the caller. */
static void binary(vk_backend *be, vk_op op, al_tensor *x, const al_tensor *y, vk_pc_binary *pc,
                   uint32_t push_bytes) {
    AL_ASSERT(x->ne[0] == y->ne[0] && x->ne[1] == y->ne[1]);
    if (!vk_begin(be, 1, 0)) return;
    vk_hazard(be, y->data, false);
    vk_hazard(be, x->data, true);
    VkDescriptorBufferInfo info[2];
    pc->n_cols = (uint32_t)x->ne[0], pc->n_rows = (uint32_t)x->ne[1];
    pc->x_off = bind_f32(be, &info[0], x, &pc->x_stride);
    pc->y_off = bind_f32(be, &info[1], y, &pc->y_stride);
    dispatch(be, op, 0, 0, info, pc, push_bytes, div_up(pc->n_cols, be->sh->pl.tune.ew_wg),
             pc->n_rows);
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
    dispatch(be, VK_OP_COPY, 0, 0, info, &pc, sizeof pc,
             div_up(pc.n, be->sh->pl.tune.ew_wg * 8ull), 1);
}

/* Buffer-to-buffer copies gathered into regions, 64 to a command: one that continues
 * the last on both sides extends it. kv: each command counts as a KV copy (stats). */
typedef struct copy_batch {
    const vk_buf *s;
    vk_buf *d;
    bool kv;
    uint32_t n;
    VkBufferCopy r[64];
} copy_batch;

static void batch_flush(vk_backend *be, copy_batch *b) {
    if (!b->n) return;
    be->sh->d.fn.vkCmdCopyBuffer(be->s.cmd, b->s->buffer, b->d->buffer, b->n, b->r);
    vk_recorded(be);
    if (b->kv) vk_count_kv_copy(be);
    b->n = 0;
}

static void batch_add(vk_backend *be, copy_batch *b, uint64_t so, uint64_t dof, uint64_t size) {
    VkBufferCopy *last = b->n ? &b->r[b->n - 1] : NULL;
    if (last && last->srcOffset + last->size == so && last->dstOffset + last->size == dof) {
        last->size += size;
        return;
    }
    if (b->n == 64) batch_flush(be, b);
    b->r[b->n++] = (VkBufferCopy){.srcOffset = so, .dstOffset = dof, .size = size};
}

/* dst = src row by row (backend.h: copy), as transfer regions. */
void vk_op_copy(al_backend *base, const al_tensor *src, al_tensor *dst) {
    vk_backend *be = (vk_backend *)base;
    AL_ASSERT(src->ne[0] == dst->ne[0] && src->ne[1] == dst->ne[1]);
    if (!vk_begin(be, 1, 0)) return;
    copy_batch b = {.s = src->data, .d = dst->data};
    vk_hazard(be, b.s, false);
    vk_hazard(be, b.d, true);
    for (int64_t r = 0; r < src->ne[1]; r++)
        batch_add(be, &b, src->offset + (uint64_t)r * src->row_bytes,
                  dst->offset + (uint64_t)r * dst->row_bytes, (uint64_t)src->ne[0] * sizeof(float));
    batch_flush(be, &b);
}

void vk_op_add(al_backend *base, al_tensor *x, const al_tensor *y) {
    vk_pc_binary pc = {0};
    binary((vk_backend *)base, VK_OP_ADD, x, y, &pc, sizeof pc);
}

void vk_op_add_rows(al_backend *base, al_tensor *x, const al_tensor *y, const int32_t *ids,
                    const float *w, int n) {
    vk_backend *be = (vk_backend *)base;
    AL_ASSERT(x->ne[0] == y->ne[0] && y->ne[1] >= n);
    if (n <= 0) return;
    const uint64_t bytes = 2 * (uint64_t)n * sizeof(uint32_t);
    if (!vk_begin(be, 1, bytes + 16)) return;
    const uint64_t off = upload(be, ids, (uint64_t)n * sizeof(int32_t));
    upload_at(be, off + (uint64_t)n * sizeof(int32_t), w, (uint64_t)n * sizeof(float));
    vk_hazard(be, y->data, false);
    vk_hazard(be, x->data, true);
    VkDescriptorBufferInfo info[3];
    vk_pc_add_rows pc = {.n_cols = (uint32_t)x->ne[0], .n = (uint32_t)n};
    pc.x_off = bind_f32(be, &info[0], x, &pc.x_stride);
    pc.y_off = bind_f32(be, &info[1], y, &pc.y_stride);
    pc.iw_off = bind(be, &info[2], be->s.upload, off, bytes) / sizeof(uint32_t);
    dispatch(be, VK_OP_ADD_ROWS, 0, 0, info, &pc, sizeof pc,
             div_up(pc.n_cols, be->sh->pl.tune.ew_wg), (uint32_t)n);
}

void vk_op_silu_mul(al_backend *base, al_tensor *g, const al_tensor *u) {
    vk_pc_binary pc = {0};
    binary((vk_backend *)base, VK_OP_SILU_MUL, g, u, &pc, sizeof pc);
}

void vk_op_sigmoid_mul(al_backend *base, al_tensor *x, const al_tensor *g) {
    vk_pc_binary pc = {0};
    binary((vk_backend *)base, VK_OP_SIGMOID_MUL, x, g, &pc, sizeof pc);
}

void vk_op_gelu_mul(al_backend *base, al_tensor *g, const al_tensor *u) {
    vk_pc_binary pc = {0};
    binary((vk_backend *)base, VK_OP_GELU_MUL, g, u, &pc, sizeof pc);
}

void vk_op_swiglu_oai(al_backend *base, al_tensor *g, const al_tensor *u, float alpha,
                      float limit) {
    vk_pc_swiglu_oai pc = {.alpha = alpha, .limit = limit};
    binary((vk_backend *)base, VK_OP_SWIGLU_OAI, g, u, &pc.b, sizeof pc);
}

void vk_op_scale(al_backend *base, al_tensor *x, float s) {
    vk_backend *be = (vk_backend *)base;
    if (x->ne[1] == 0) return;
    if (!vk_begin(be, 1, 0)) return;
    vk_hazard(be, x->data, true);
    VkDescriptorBufferInfo info[1];
    vk_pc_scale pc = {.n_cols = (uint32_t)x->ne[0], .n_rows = (uint32_t)x->ne[1], .s = s};
    pc.x_off = bind_f32(be, &info[0], x, &pc.x_stride);
    dispatch(be, VK_OP_SCALE, 0, 0, info, &pc, sizeof pc, div_up(pc.n_cols, be->sh->pl.tune.ew_wg),
             pc.n_rows);
}

void vk_op_rms_norm(al_backend *base, const al_tensor *x, const al_tensor *w, float eps,
                    al_tensor *out) {
    vk_backend *be = (vk_backend *)base;
    AL_ASSERT(x->ne[0] == w->ne[0] && w->type == AL_TYPE_F32 && out->ne[1] == x->ne[1]);
    if (!vk_begin(be, 1, 0)) return;
    /* in place (x and out in one buffer), the write alone stands for both */
    if (x->data != out->data) vk_hazard(be, x->data, false);
    vk_hazard(be, w->data, false);
    vk_hazard(be, out->data, true);
    VkDescriptorBufferInfo info[3];
    vk_pc_rms_norm pc = {.n_cols = (uint32_t)x->ne[0], .n_rows = (uint32_t)x->ne[1], .eps = eps};
    uint32_t w_stride;
    pc.x_off = bind_f32(be, &info[0], x, &pc.x_stride);
    pc.w_off = bind_f32(be, &info[1], w, &w_stride);
    pc.o_off = bind_f32(be, &info[2], out, &pc.o_stride);
    /* a per-head view may have more rows than groups in x: dispatch folds them */
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
        bind(be, &info[1], be->s.upload, ids_off, (uint64_t)n * sizeof(int32_t));
        pc.o_off = bind_f32(be, &info[2], out, &pc.o_stride);
        dispatch(be, VK_OP_GET_ROWS, table->type, 0, info, &pc, sizeof pc,
                 div_up(div_up(pc.n_cols, 4), be->sh->pl.tune.rows_wg), (uint32_t)n);
    }
}

/* ---- matmul on CPU devices ----------------------------------------------------------------- */

enum { UBO_BYTES = 65536 }; /* the uniform-buffer range matmul_rows.comp declares */

al_status vk_scratch_reserve(vk_backend *be, int64_t max_cols, int64_t max_ctx) {
    if (!be->sh->pl.tune.cpu_rows) return AL_OK;
    /* a batch of up to 512 tokens (model.c), each packed in slices of at most 1024
     * inputs, plus room for the last 64 KiB binding */
    uint64_t tokens = (uint64_t)(max_ctx < 512 ? max_ctx : 512) + 16;
    uint64_t n = tokens * ((uint64_t)max_cols + 1024) * sizeof(float) + UBO_BYTES;
    if (be->s.scratch && be->s.scratch->size >= n) return AL_OK;
    al_status st = vk_submit_wait(be); /* the old scratch may be in use */
    if (st != AL_OK) return al_error(st, "%s", be->s.fail_msg);
    vk_buf_destroy(&be->sh->d, be->s.scratch);
    be->s.scratch = NULL;
    return vk_buf_create(&be->sh->d, n, VK_BUF_DEVICE, &be->s.scratch);
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
                be->sh->d.fn.vkCmdCopyBuffer(be->s.cmd, ((const vk_buf *)x->data)->buffer,
                                             be->s.scratch->buffer, m, regions);
                vk_recorded(be);
                m = 0;
            }
        }
}

/* What a matmul does with its products (backend.h): write them (matmul), add them to
 * out (matmul_add), or combine them with those of an up projection (matmul_glu); and
 * whether it first takes the rms_norm of its input (norm_matmul_glu, matvec only). */
typedef struct mm_fuse {
    bool add;
    const al_tensor *wu; /* GLU: the up projection, w's type, shape and row_bytes */
    al_glu act;
    const al_tensor *norm; /* GLU: the input norm's f32 weight [n_in], or NULL */
    float eps;
} mm_fuse;

/* One matmul_rows dispatch: rows [r0, r1) of the weights, token block b of a pass
 * whose inputs are packed at block (s, b) of the scratch; pc has the fields that do not
 * depend on them. */
static void rows_dispatch(vk_backend *be, vk_pc_matmul_rows pc, const al_tensor *w,
                          const al_tensor *bias, const mm_fuse *f, al_tensor *ob, uint64_t xs_at,
                          int64_t r0, int64_t r1, int variant) {
    VkDescriptorBufferInfo info[5];
    uint32_t b_stride;
    pc.n_out = (uint32_t)(r1 - r0), pc.row0 = (uint32_t)r0;
    info[0] = (VkDescriptorBufferInfo){.buffer = be->s.scratch->buffer, .offset = xs_at,
                                       .range = UBO_BYTES};
    pc.w_off = bind(be, &info[1], w->data, w->offset + (uint64_t)r0 * w->row_bytes,
                    (uint64_t)(r1 - r0) * w->row_bytes);
    /* without a bias the weights stand in (the shader skips it), not out, which other
     * dispatches of this matmul write: synchronization validation takes every binding
     * as accessed */
    pc.b_off = bias ? bind_f32(be, &info[2], bias, &b_stride) : 0;
    if (!bias) info[2] = info[1];
    pc.o_off = bind_f32(be, &info[3], ob, &pc.o_stride);
    if (f->wu)
        pc.u_off = bind(be, &info[4], f->wu->data, f->wu->offset + (uint64_t)r0 * w->row_bytes,
                        (uint64_t)(r1 - r0) * w->row_bytes);
    dispatch(be, f->wu ? VK_OP_MATMUL_ROWS_GLU : VK_OP_MATMUL_ROWS, w->type, variant, info, &pc,
             sizeof pc, div_up(pc.n_out, be->sh->pl.tune.mr_wg), 1);
}

/* Every matmul of a CPU device: see matmul_rows.comp. Tokens go in blocks of NT (1,
 * 4 or 16), inputs in slices that fit a 64 KiB uniform buffer; the slices of one
 * output run in order (barriers between), the blocks of one slice together. A GLU
 * needs whole sums before its activation: false, recording nothing, where the inputs
 * take more than one slice. */
static bool matmul_rows(vk_backend *be, const al_tensor *x, const al_tensor *w,
                        const al_tensor *bias, const mm_fuse *f, al_tensor *out) {
    int64_t n_tok = x->ne[1], n_out = w->ne[1], per = rows_per_binding(be, w->row_bytes);
    uint32_t n_in = (uint32_t)w->ne[0], variant = n_tok <= 1 ? 0 : n_tok <= 4 ? 1 : 2;
    uint32_t nt = 1u << (2 * variant);
    uint32_t ks = (uint32_t)((n_in + 63) & ~63u);
    uint32_t ks_max = (UBO_BYTES / sizeof(float) / nt) & ~63u;
    if (ks > ks_max) ks = ks_max;
    uint32_t n_slices = (uint32_t)div_up(n_in, ks);
    if ((f->wu && n_slices > 1) || f->norm) return false;
    uint64_t block_bytes = (uint64_t)nt * ks * sizeof(float);
    uint64_t blocks = be->s.scratch && be->s.scratch->size > UBO_BYTES
                          ? (be->s.scratch->size - UBO_BYTES) / block_bytes : 0;
    int64_t tok_per_pass = (int64_t)(blocks / n_slices) * nt;
    if (tok_per_pass < 1 || per < 1) {
        vk_fail(be, AL_ERR_UNSUPPORTED, "matmul of %u inputs: the scratch reserved for %s is "
                "too small (was reserve() called?)", n_in, be->sh->d.caps.name);
        return true;
    }
    for (int64_t t0 = 0; t0 < n_tok; t0 += tok_per_pass) {
        int64_t n = n_tok - t0 < tok_per_pass ? n_tok - t0 : tok_per_pass;
        uint64_t n_blocks = div_up((uint64_t)n, nt);
        int n_disp = (int)(n_blocks * n_slices * div_up((uint64_t)n_out, (uint64_t)per));
        if (!vk_begin(be, n_disp, 0)) return true;
        vk_hazard(be, x->data, false);
        vk_hazard(be, be->s.scratch, true);
        pack_inputs(be, x, t0, n, nt, ks, n_slices);
        for (uint32_t s = 0; s < n_slices; s++) {
            /* each slice's dispatches declare what they touch: a barrier (slice s adds
             * to what slice s - 1 wrote) leaves only the next command's entries, and the
             * next pass's pack must wait for these scratch reads */
            vk_hazard(be, be->s.scratch, false);
            vk_hazard(be, w->data, false);
            if (f->wu) vk_hazard(be, f->wu->data, false);
            if (bias) vk_hazard(be, bias->data, false);
            vk_hazard(be, out->data, true);
            for (int64_t r0 = 0; r0 < n_out; r0 += per) {
                int64_t r1 = r0 + per < n_out ? r0 + per : n_out;
                for (uint64_t b = 0; b < n_blocks; b++) {
                    al_tensor ob = al_tensor_rows(out, t0 + (int64_t)(b * nt), 1);
                    vk_pc_matmul_rows pc = {
                        .n_k = (n_in - s * ks < ks ? n_in - s * ks : ks),
                        .n_tok = (uint32_t)((uint64_t)n - b * nt < nt ? (uint64_t)n - b * nt : nt),
                        .k0 = s * ks, .xs_stride = ks / 4, .w_row_bytes = (uint32_t)w->row_bytes,
                        .has_bias = bias && s == 0, .accumulate = s > 0 || f->add,
                        .act = (uint32_t)f->act};
                    ob.ne[1] = pc.n_tok;
                    rows_dispatch(be, pc, w, bias, f, &ob, (s * n_blocks + b) * block_bytes, r0,
                                  r1, (int)variant);
                }
            }
        }
    }
    return true;
}

/* ---- matmul ------------------------------------------------------------------------------ */

/* The matmuls of GPUs: matvec.comp for a few tokens, else the tiled matmul.comp. A GLU
 * and an input norm are fused in matvec only: false, recording nothing, for larger
 * batches or where the doubled partial sums would not fit shared memory. */
static bool matmul_gpu(vk_backend *be, const al_tensor *x, const al_tensor *w,
                       const al_tensor *bias, const mm_fuse *f, al_tensor *out) {
    const vk_tuning *tu = &be->sh->pl.tune;
    int64_t per = rows_per_binding(be, w->row_bytes), n_out = w->ne[1];
    uint32_t n_tok = (uint32_t)x->ne[1];
    bool mv = n_tok <= tu->mv_max_tok;
    int nt_variant = n_tok <= 1 ? 0 : n_tok <= 2 ? 1 : n_tok <= 4 ? 2 : 3; /* NT = 1 << it */
    if (f->wu && (!mv || (2ull * (1u << nt_variant) * tu->mv_nr + 1) * tu->mv_wg * sizeof(float) >
                             be->sh->d.caps.shared_bytes))
        return false;
    AL_ASSERT(!f->norm || f->wu); /* the GLU build alone has the norm */
    if (f->norm && (!mv || f->norm->ne[0] != w->ne[0])) return false;
    if (per < 1) {
        vk_fail(be, AL_ERR_UNSUPPORTED, "a weight row of %llu bytes exceeds one binding",
                (unsigned long long)w->row_bytes);
        return true;
    }
    if (!vk_begin(be, (int)div_up((uint64_t)n_out, (uint64_t)per), 0)) return true;
    vk_hazard(be, x->data, false);
    vk_hazard(be, w->data, false);
    if (f->wu) vk_hazard(be, f->wu->data, false);
    if (f->norm) vk_hazard(be, f->norm->data, false);
    if (bias) vk_hazard(be, bias->data, false);
    vk_hazard(be, out->data, true);
    for (int64_t r0 = 0; r0 < n_out; r0 += per) {
        int64_t r1 = r0 + per < n_out ? r0 + per : n_out;
        VkDescriptorBufferInfo info[6];
        vk_pc_matmul pc = {.n_in = (uint32_t)w->ne[0], .n_out = (uint32_t)(r1 - r0),
                           .n_tok = n_tok, .w_row_bytes = (uint32_t)w->row_bytes,
                           .has_bias = bias != NULL, .row0 = (uint32_t)r0,
                           .accumulate = f->add, .act = (uint32_t)f->act,
                           .has_norm = f->norm != NULL, .eps = f->eps};
        uint32_t b_stride, n_stride;
        pc.x_off = bind_f32(be, &info[0], x, &pc.x_stride);
        /* the shaders read rows of 4k inputs as vec4: they must start at 4k floats */
        AL_ASSERT(pc.n_in % 4 || (pc.x_off % 4 == 0 && pc.x_stride % 4 == 0));
        pc.w_off = bind(be, &info[1], w->data, w->offset + (uint64_t)r0 * w->row_bytes,
                        (uint64_t)(r1 - r0) * w->row_bytes);
        /* without a bias, x stands in: the binding must be valid, it is never read */
        pc.b_off = bind_f32(be, &info[2], bias ? bias : x, &b_stride);
        pc.o_off = bind_f32(be, &info[3], out, &pc.o_stride);
        if (f->wu)
            pc.u_off = bind(be, &info[4], f->wu->data, f->wu->offset + (uint64_t)r0 * w->row_bytes,
                            (uint64_t)(r1 - r0) * w->row_bytes);
        /* without a norm, x stands in: never read */
        if (f->wu) pc.nw_off = bind_f32(be, &info[5], f->norm ? f->norm : x, &n_stride);
        if (mv)
            dispatch(be, f->wu ? VK_OP_MATVEC_GLU : VK_OP_MATVEC, w->type,
                     nt_variant + (f->norm ? 4 : 0), info, &pc, sizeof pc,
                     div_up(pc.n_out, tu->mv_nr), 1);
        else
            dispatch(be, vk_prompt_matmul(tu), w->type, 0, info, &pc, sizeof pc,
                     div_up(pc.n_out, tu->coopmat ? tu->cm_bm : tu->mm_bm),
                     (uint32_t)div_up(n_tok, tu->coopmat ? tu->cm_bn : tu->mm_bn));
    }
    return true;
}

static bool matmul(vk_backend *be, const al_tensor *x, const al_tensor *w, const al_tensor *bias,
                   const mm_fuse *f, al_tensor *out) {
    AL_ASSERT(x->ne[0] == w->ne[0] && out->ne[0] == w->ne[1] && out->ne[1] == x->ne[1]);
    AL_ASSERT(!f->wu || (f->wu->type == w->type && f->wu->ne[0] == w->ne[0] &&
                         f->wu->ne[1] == w->ne[1] && f->wu->row_bytes == w->row_bytes && !bias));
    return be->sh->pl.tune.cpu_rows ? matmul_rows(be, x, w, bias, f, out)
                                    : matmul_gpu(be, x, w, bias, f, out);
}

void vk_op_matmul(al_backend *base, const al_tensor *x, const al_tensor *w,
                  const al_tensor *bias, al_tensor *out) {
    const mm_fuse plain = {0};
    matmul((vk_backend *)base, x, w, bias, &plain, out);
}

/* The fused ops (backend.h): one dispatch instead of two or three when decoding;
 * vulkan.tune fuse=0 (the CLI's ANYLLM_VK_TUNE=fuse=0) declines them all, so the plain
 * ops run (measurements). */
bool vk_op_matmul_add(al_backend *base, const al_tensor *x, const al_tensor *w,
                      const al_tensor *bias, al_tensor *out) {
    vk_backend *be = (vk_backend *)base;
    const mm_fuse add = {.add = true};
    return be->sh->pl.tune.fuse && matmul(be, x, w, bias, &add, out);
}

bool vk_op_matmul_glu(al_backend *base, const al_tensor *x, const al_tensor *wg,
                      const al_tensor *wu, al_glu act, al_tensor *out) {
    vk_backend *be = (vk_backend *)base;
    const mm_fuse glu = {.wu = wu, .act = act};
    return be->sh->pl.tune.fuse && matmul(be, x, wg, NULL, &glu, out);
}

/* GPUs only: on a CPU device (matmul_rows.comp) the norm's dispatch costs next to
 * nothing, and scaling the inputs in the matmul would cost every row's invocation. */
bool vk_op_norm_matmul_glu(al_backend *base, const al_tensor *x, const al_tensor *norm,
                           float eps, const al_tensor *wg, const al_tensor *wu, al_glu act,
                           al_tensor *out) {
    vk_backend *be = (vk_backend *)base;
    const mm_fuse glu = {.wu = wu, .act = act, .norm = norm, .eps = eps};
    const vk_tuning *tu = &be->sh->pl.tune;
    return tu->fuse && tu->fuse_norm && !tu->cpu_rows && norm->type == AL_TYPE_F32 &&
           matmul(be, x, wg, NULL, &glu, out);
}

/* ---- matmul_multi ------------------------------------------------------------------------ */

/* Whether the n weights of matmul_multi can share one dispatch: fusion on, the device
 * indexes buffer arrays, and the weights have one type and row length (one shader
 * build walks them all) and each fits one binding. */
static bool multi_ok(const vk_backend *be, const al_tensor *x, int n, const al_tensor *const *w,
                     al_tensor *const *out) {
    if (!be->sh->pl.tune.fuse || !be->sh->d.caps.dyn_index || n < 1 || n > VK_MULTI) return false;
    for (int i = 0; i < n; i++) {
        AL_ASSERT(x->ne[0] == w[i]->ne[0] && out[i]->ne[0] == w[i]->ne[1] &&
                  out[i]->ne[1] == x->ne[1]);
        if (w[i]->type != w[0]->type || w[i]->row_bytes != w[0]->row_bytes ||
            w[i]->ne[1] > rows_per_binding(be, w[i]->row_bytes))
            return false;
    }
    return true;
}

/* Binds weights, biases and outputs of a MULTI build (infos 1-3, 4-6, 7-9; slots past n
 * repeat weight 0: every binding must be valid) and the hazards they take; returns the
 * workgroups, wg_rows rows each, that cover every weight's rows. Push fields by pointer:
 * both MULTI push blocks have them. */
static uint64_t multi_bind(vk_backend *be, const al_tensor *dummy, int n, const al_tensor *const *w,
                           const al_tensor *const *bias, al_tensor *const *out, uint32_t wg_rows,
                           VkDescriptorBufferInfo *info, uint32_t *n_out, uint32_t *w_off,
                           uint32_t *b_off, uint32_t *o_off, uint32_t *o_stride,
                           uint32_t *has_bias) {
    uint64_t groups = 0;
    for (int i = 0; i < n; i++) {
        vk_hazard(be, w[i]->data, false);
        if (bias[i]) vk_hazard(be, bias[i]->data, false);
    }
    for (int i = 0; i < n; i++) vk_hazard(be, out[i]->data, true);
    for (int i = 0; i < VK_MULTI; i++) {
        int j = i < n ? i : 0;
        uint32_t b_stride;
        n_out[i] = (uint32_t)w[j]->ne[1];
        w_off[i] = bind(be, &info[1 + i], w[j]->data, w[j]->offset,
                        (uint64_t)w[j]->ne[1] * w[j]->row_bytes);
        b_off[i] = bind_f32(be, &info[4 + i], bias[j] ? bias[j] : dummy, &b_stride);
        o_off[i] = bind_f32(be, &info[7 + i], out[j], &o_stride[i]);
        if (i < n && bias[i]) *has_bias |= 1u << i;
        if (i < n) groups += div_up(n_out[i], wg_rows);
    }
    return groups;
}

/* matvec.comp's MULTI build, with the input norm where norm is not NULL: false for more
 * tokens than matvec takes. */
static bool multi_gpu(vk_backend *be, const al_tensor *x, const al_tensor *norm, float eps, int n,
                      const al_tensor *const *w, const al_tensor *const *bias,
                      al_tensor *const *out) {
    const vk_tuning *tu = &be->sh->pl.tune;
    uint32_t n_tok = (uint32_t)x->ne[1];
    if (n_tok > tu->mv_max_tok) return false;
    int nt_variant = n_tok <= 1 ? 0 : n_tok <= 2 ? 1 : n_tok <= 4 ? 2 : 3; /* NT = 1 << it */
    if (!vk_begin(be, 1, 0)) return true;
    vk_hazard(be, x->data, false);
    VkDescriptorBufferInfo info[VK_MAX_DESCRIPTORS];
    vk_pc_matmul_multi pc = {.n_in = (uint32_t)x->ne[0], .n_tok = n_tok, .n_w = (uint32_t)n,
                             .w_row_bytes = (uint32_t)w[0]->row_bytes,
                             .has_norm = norm != NULL, .eps = eps};
    uint32_t n_stride;
    pc.x_off = bind_f32(be, &info[0], x, &pc.x_stride);
    if (norm) vk_hazard(be, norm->data, false);
    /* without a norm, x stands in: never read */
    pc.nw_off = bind_f32(be, &info[1 + 3 * VK_MULTI], norm ? norm : x, &n_stride);
    AL_ASSERT(pc.n_in % 4 || (pc.x_off % 4 == 0 && pc.x_stride % 4 == 0)); /* vec4 reads */
    uint64_t groups = multi_bind(be, x, n, w, bias, out, tu->mv_nr, info, pc.n_out, pc.w_off,
                                 pc.b_off, pc.o_off, pc.o_stride, &pc.has_bias);
    dispatch(be, VK_OP_MATVEC_MULTI, w[0]->type, nt_variant + (norm ? 4 : 0), info, &pc,
             sizeof pc, groups, 1);
    return true;
}

/* matmul_rows.comp's MULTI build: the inputs packed once for all weights, in one
 * slice of one block of tokens; false where they do not fit one. */
static bool multi_rows(vk_backend *be, const al_tensor *x, int n, const al_tensor *const *w,
                       const al_tensor *const *bias, al_tensor *const *out) {
    uint32_t n_tok = (uint32_t)x->ne[1], n_in = (uint32_t)x->ne[0];
    uint32_t variant = n_tok <= 1 ? 0 : n_tok <= 4 ? 1 : 2, nt = 1u << (2 * variant);
    uint32_t ks = (n_in + 63) & ~63u;
    if (n_tok > nt || ks > ((UBO_BYTES / sizeof(float) / nt) & ~63u)) return false;
    uint64_t block_bytes = (uint64_t)nt * ks * sizeof(float);
    if (!be->s.scratch || be->s.scratch->size < UBO_BYTES + block_bytes) return false;
    if (!vk_begin(be, 1, 0)) return true;
    vk_hazard(be, x->data, false);
    vk_hazard(be, be->s.scratch, true);
    pack_inputs(be, x, 0, n_tok, nt, ks, 1);
    vk_hazard(be, be->s.scratch, false);
    VkDescriptorBufferInfo info[VK_MAX_DESCRIPTORS];
    info[0] = (VkDescriptorBufferInfo){.buffer = be->s.scratch->buffer, .offset = 0,
                                       .range = UBO_BYTES};
    vk_pc_matmul_rows_multi pc = {.n_k = n_in, .n_tok = n_tok, .xs_stride = ks / 4,
                                  .n_w = (uint32_t)n, .w_row_bytes = (uint32_t)w[0]->row_bytes};
    uint64_t groups = multi_bind(be, x, n, w, bias, out, be->sh->pl.tune.mr_wg, info, pc.n_out,
                                 pc.w_off, pc.b_off, pc.o_off, pc.o_stride, &pc.has_bias);
    info[1 + 3 * VK_MULTI] = info[1]; /* no norm here: a valid binding, never read */
    dispatch(be, VK_OP_MATMUL_ROWS_MULTI, w[0]->type, (int)variant, info, &pc, sizeof pc, groups,
             1);
    return true;
}

/* The input norm is fused on GPUs only (see vk_op_norm_matmul_glu): a CPU device
 * declines it, and backend_matmul_multi runs the norm, then the fused matmuls. */
bool vk_op_matmul_multi(al_backend *base, const al_tensor *x, const al_tensor *norm, float eps,
                        int n, const al_tensor *const *w, const al_tensor *const *bias,
                        al_tensor *const *out) {
    vk_backend *be = (vk_backend *)base;
    if (!multi_ok(be, x, n, w, out)) return false;
    if (norm && (be->sh->pl.tune.cpu_rows || !be->sh->pl.tune.fuse_norm ||
                 norm->type != AL_TYPE_F32 || norm->ne[0] != x->ne[0]))
        return false;
    return be->sh->pl.tune.cpu_rows ? multi_rows(be, x, n, w, bias, out)
                                    : multi_gpu(be, x, norm, eps, n, w, bias, out);
}

/* ---- rope -------------------------------------------------------------------------------- */

/* Whether the cached table holds the rows of this call: positions pos0 + t, or pos[t]. */
static bool rope_cached(const vk_backend *be, int pos0, const int32_t *pos, int n_rows,
                        const al_rope *rp) {
    const vk_rope_cache *c = &be->s.rope_cache;
    if (!c->valid || c->n_rows != n_rows || c->by_pos != (pos != NULL) ||
        memcmp(&c->rope, rp, sizeof *rp))
        return false;
    return pos ? !memcmp(c->pos, pos, (size_t)n_rows * sizeof *pos) : c->pos0 == pos0;
}

/* cos and sin of every (position, pair) of the call, in double precision as the
 * reference computes them, written into the upload arena; row t is at pos[t], or at
 * pos0 + t where pos is NULL. Consecutive calls with the same positions (q and k of
 * every layer) share one table. */
static uint64_t rope_table(vk_backend *be, int pos0, const int32_t *pos_t, int n_rows,
                           const al_rope *rp) {
    if (rope_cached(be, pos0, pos_t, n_rows, rp)) return be->s.rope_cache.offset;
    int half = rp->n_rot / 2;
    uint64_t off = upload(be, NULL, (uint64_t)n_rows * (uint64_t)half * 2 * sizeof(float));
    float *cs = (float *)((char *)be->s.upload->mapped + off);
    for (int t = 0; t < n_rows; t++) {
        double pos = (double)(pos_t ? pos_t[t] : pos0 + t) * rp->freq_scale;
        for (int i = 0; i < half; i++) {
            double theta = pos * pow(rp->freq_base, -2.0 * i / rp->n_rot);
            if (rp->freq_factors) theta /= rp->freq_factors[i];
            cs[2 * ((size_t)t * half + i)] = (float)cos(theta);
            cs[2 * ((size_t)t * half + i) + 1] = (float)sin(theta);
        }
    }
    /* by positions: kept only where they fit the cache */
    be->s.rope_cache.valid = !pos_t || n_rows <= VK_ROPE_POS;
    be->s.rope_cache.by_pos = pos_t != NULL;
    if (pos_t && n_rows <= VK_ROPE_POS)
        memcpy(be->s.rope_cache.pos, pos_t, (size_t)n_rows * sizeof *pos_t);
    be->s.rope_cache.pos0 = pos0;
    be->s.rope_cache.n_rows = n_rows;
    be->s.rope_cache.rope = *rp;
    be->s.rope_cache.offset = off;
    return off;
}

/* Rotates the n_head heads of x and, when y is not NULL, the n_head_y heads of y
 * (rows at the same positions: pos0 + t, or pos[t]) in one dispatch. */
static void rope(vk_backend *be, al_tensor *x, int n_head, al_tensor *y, int n_head_y,
                 int head_dim, int pos0, const int32_t *pos, const al_rope *rp) {
    AL_ASSERT(x->ne[0] >= (int64_t)n_head * head_dim && rp->n_rot <= head_dim);
    AL_ASSERT(!y || (y->ne[0] >= (int64_t)n_head_y * head_dim && y->ne[1] == x->ne[1]));
    int n_rows = (int)x->ne[1], half = rp->n_rot / 2;
    if (half == 0 || n_rows == 0) return;
    uint64_t table_bytes = (uint64_t)n_rows * (uint64_t)half * 2 * sizeof(float);
    if (!vk_begin(be, 1, table_bytes)) return;
    uint64_t cs_off = rope_table(be, pos0, pos, n_rows, rp);
    vk_hazard(be, x->data, true);
    if (y && y->data != x->data) vk_hazard(be, y->data, true);
    VkDescriptorBufferInfo info[3];
    vk_pc_rope pc = {.n_rows = (uint32_t)n_rows, .n_head = (uint32_t)n_head,
                     .head_dim = (uint32_t)head_dim, .half = (uint32_t)half,
                     .neox = rp->neox, .n_head_y = y ? (uint32_t)n_head_y : 0};
    pc.x_off = bind_f32(be, &info[0], x, &pc.x_stride);
    pc.cs_off = bind(be, &info[1], be->s.upload, cs_off, table_bytes) / (uint32_t)sizeof(float);
    /* without y, x stands in: the binding must be valid, it is never read */
    pc.y_off = bind_f32(be, &info[2], y ? y : x, &pc.y_stride);
    uint64_t n_pairs = (uint64_t)half * (pc.n_head + pc.n_head_y);
    dispatch(be, VK_OP_ROPE, 0, 0, info, &pc, sizeof pc, div_up(n_pairs, be->sh->pl.tune.rope_wg),
             (uint32_t)n_rows);
}

void vk_op_rope(al_backend *base, al_tensor *x, int n_head, int head_dim, int pos0,
                const al_rope *rp) {
    rope((vk_backend *)base, x, n_head, NULL, 0, head_dim, pos0, NULL, rp);
}

bool vk_op_rope_qk(al_backend *base, al_tensor *q, int n_head, al_tensor *k, int n_head_kv,
                   int head_dim, int pos0, const al_rope *rp) {
    vk_backend *be = (vk_backend *)base;
    if (!be->sh->pl.tune.fuse) return false;
    rope(be, q, n_head, k, n_head_kv, head_dim, pos0, NULL, rp);
    return true;
}

bool vk_op_rope_qk_rows(al_backend *base, al_tensor *q, int n_head, al_tensor *k, int n_head_kv,
                        int head_dim, const int32_t *pos, const al_rope *rp) {
    vk_backend *be = (vk_backend *)base;
    if (!be->sh->pl.tune.fuse) return false;
    rope(be, q, n_head, k, n_head_kv, head_dim, 0, pos, rp);
    return true;
}

/* ---- attention --------------------------------------------------------------------------- */

/* Copies the n rows of src (kv_bytes each) into the ring dst at the rows of positions
 * p0 .. p0 + n - 1, row p % cap (backend.h: al_attn_shape): rows that follow each
 * other in both go as one region, so a batch is one region, or two where it wraps. */
static void copy_ring(vk_backend *be, const al_tensor *src, al_tensor *dst, int64_t p0, int64_t n,
                      uint64_t kv_bytes) {
    copy_batch b = {.s = src->data, .d = dst->data, .kv = true};
    const int64_t cap = dst->ne[1];
    vk_hazard(be, b.s, false);
    vk_hazard(be, b.d, true);
    for (int64_t t = 0; t < n; t++)
        batch_add(be, &b, src->offset + (uint64_t)t * src->row_bytes,
                  dst->offset + (uint64_t)((p0 + t) % cap) * dst->row_bytes, kv_bytes);
    batch_flush(be, &b);
}

/* ---- typed KV caches (backend.h: al_backend_ops.kv_types) ---- */

/* Binds rows [0, ne[1]) of a tensor of any type; returns its offset in bytes and sets
 * *stride to its row bytes. The KV builds read every cache so, f32 ones too. */
static uint32_t bind_rows(const vk_backend *be, VkDescriptorBufferInfo *info, const al_tensor *t,
                          uint32_t *stride) {
    AL_ASSERT(t->offset % 2 == 0 && t->row_bytes % 2 == 0); /* 16-bit words (kv.glsl) */
    *stride = (uint32_t)t->row_bytes;
    return bind(be, info, t->data, t->offset, (uint64_t)t->ne[1] * t->row_bytes);
}

/* The rotation of a cache stored rotated (AL_LAYOUT_HADAMARD): al_hadamard's block
 * and scale for heads of head_dim, computed as it computes them. */
static void kv_rotation(const al_tensor *kc, const al_tensor *vc, int head_dim, vk_pc_kv *kv) {
    const int n = al_hadamard_n(head_dim);
    kv->k_type = kc->type, kv->v_type = vc->type;
    kv->rot_mask = (kc->layout == AL_LAYOUT_HADAMARD ? 1u : 0u) |
                   (vc->layout == AL_LAYOUT_HADAMARD ? 2u : 0u);
    kv->rot_n = kv->rot_mask ? (uint32_t)n : 0;
    kv->rot_scale = 1.0f / sqrtf((float)n);
}

/* Rows [0, n) of src into the ring `cache` at positions p0 .. p0 + n - 1: a copy into
 * an f32 cache (copy_ring), else kv_write.comp's conversion, each head rotated first
 * where the cache's layout says so. */
static void write_ring(vk_backend *be, const al_tensor *src, al_tensor *cache, int64_t p0,
                       int64_t n, const al_attn_shape *s) {
    if (!vk_begin(be, 1, 0)) return;
    if (cache->type == AL_TYPE_F32) {
        copy_ring(be, src, cache, p0, n, (uint64_t)s->n_head_kv * s->head_dim * sizeof(float));
        return;
    }
    const int64_t kvd = (int64_t)s->n_head_kv * s->head_dim;
    AL_ASSERT(cache->row_bytes == quant_row_bytes(cache->type, kvd));
    vk_hazard(be, src->data, false);
    vk_hazard(be, cache->data, true);
    VkDescriptorBufferInfo info[2];
    vk_pc_kv_write pc = {.n_head_kv = (uint32_t)s->n_head_kv, .head_dim = (uint32_t)s->head_dim,
                         .type = cache->type, .cap = (uint32_t)cache->ne[1],
                         .pos0 = (uint32_t)p0};
    al_tensor sv = al_tensor_rows(src, 0, n);
    pc.src_off = bind_f32(be, &info[0], &sv, &pc.src_stride);
    pc.dst_off = bind_rows(be, &info[1], cache, &pc.row_bytes);
    if (cache->layout == AL_LAYOUT_HADAMARD) {
        pc.rot_n = (uint32_t)al_hadamard_n(s->head_dim);
        pc.rot_scale = 1.0f / sqrtf((float)pc.rot_n);
    }
    dispatch(be, VK_OP_KV_WRITE, 0, vk_attn_variant(&be->sh->pl.tune, s->head_dim), info, &pc,
             sizeof pc, pc.n_head_kv, (uint32_t)n);
}

/* Whether every position a query of the batch sees is still in a ring of cap rows once
 * the batch is written (backend.h: al_attn_shape): all positions fit, or the window
 * and the batch do. */
static bool ring_holds(const al_attn_shape *s, int64_t cap) {
    int64_t n = s->n_tokens;
    return (int64_t)s->n_past + n <= cap || (s->window > 0 && (int64_t)s->window - 1 + n <= cap);
}

/* Binding 4 of both attention builds: the sinks, or (NULL) binding 0 again, since a
 * binding must be valid even where the shader skips it. Returns has_sink. */
static uint32_t bind_sinks(const vk_backend *be, VkDescriptorBufferInfo *info,
                           const al_tensor *sinks, uint32_t *s_off) {
    uint32_t s_stride;
    if (!sinks) {
        info[4] = info[0];
        return 0;
    }
    *s_off = bind_f32(be, &info[4], sinks, &s_stride);
    return 1;
}

void vk_op_attention(al_backend *base, const al_tensor *q, const al_tensor *k,
                     const al_tensor *v, al_tensor *k_cache, al_tensor *v_cache,
                     const al_attn_shape *s, al_tensor *out) {
    vk_backend *be = (vk_backend *)base;
    AL_ASSERT(s->n_head % s->n_head_kv == 0 && q->ne[1] >= s->n_tokens);
    AL_ASSERT(!s->sinks || (s->sinks->type == AL_TYPE_F32 && s->sinks->ne[0] >= s->n_head));
    int64_t cap = k_cache->ne[1];
    if (s->n_tokens == 0) return;
    if (s->n_past < 0 || s->n_tokens < 0 || s->window < 0 || v_cache->ne[1] != cap ||
        !ring_holds(s, cap)) {
        vk_fail(be, AL_ERR_ARG, "attention: %d + %d positions (window %d) do not fit the cache "
                "of %lld rows", s->n_past, s->n_tokens, s->window, (long long)cap);
        return;
    }
    const vk_tuning *tu = &be->sh->pl.tune;
    if (s->head_dim > VK_ATTN_WIDE_HD ||
        ((uint32_t)s->head_dim > tu->attn_max_hd &&
         vk_attn_shared(tu->attn_wg, VK_ATTN_WIDE_HD) > be->sh->d.caps.shared_bytes)) {
        vk_fail(be, AL_ERR_UNSUPPORTED, "attention: head size %d exceeds the shader's",
                s->head_dim);
        return;
    }
    const int variant = vk_attn_variant(&be->sh->pl.tune, s->head_dim);
    const bool typed = k_cache->type != AL_TYPE_F32 || v_cache->type != AL_TYPE_F32;
    if (!s->kv_written) {
        write_ring(be, k, k_cache, s->n_past, s->n_tokens, s);
        write_ring(be, v, v_cache, s->n_past, s->n_tokens, s);
    }
    if (!vk_begin(be, 1, 0)) return;
    vk_hazard(be, q->data, false);
    vk_hazard(be, k_cache->data, false);
    vk_hazard(be, v_cache->data, false);
    if (s->sinks) vk_hazard(be, s->sinks->data, false);
    vk_hazard(be, out->data, true);
    VkDescriptorBufferInfo info[5];
    vk_pc_attention pc = {.n_head = (uint32_t)s->n_head, .n_head_kv = (uint32_t)s->n_head_kv,
                          .head_dim = (uint32_t)s->head_dim, .n_past = (uint32_t)s->n_past,
                          .n_tok = (uint32_t)s->n_tokens,
                          .scale = s->scale != 0 ? s->scale : 1.0f / sqrtf((float)s->head_dim),
                          .cap = (uint32_t)cap, .window = (uint32_t)s->window};
    /* the rows written so far: all of the ring once it has been filled */
    int64_t used = (int64_t)s->n_past + s->n_tokens < cap ? (int64_t)s->n_past + s->n_tokens : cap;
    al_tensor qv = al_tensor_rows(q, 0, s->n_tokens), ov = al_tensor_rows(out, 0, s->n_tokens);
    al_tensor kv = al_tensor_rows(k_cache, 0, used), vv = al_tensor_rows(v_cache, 0, used);
    pc.q_off = bind_f32(be, &info[0], &qv, &pc.q_stride);
    pc.o_off = bind_f32(be, &info[3], &ov, &pc.o_stride);
    pc.has_sink = bind_sinks(be, info, s->sinks, &pc.s_off);
    if (typed) { /* the KV build: caches in bytes, then their types */
        vk_pc_attention_kv pk = {.a = pc};
        pk.a.k_off = bind_rows(be, &info[1], &kv, &pk.a.k_stride);
        pk.a.v_off = bind_rows(be, &info[2], &vv, &pk.a.v_stride);
        kv_rotation(k_cache, v_cache, s->head_dim, &pk.kv);
        dispatch(be, VK_OP_ATTENTION_KV, 0, variant, info, &pk, sizeof pk, pc.n_head, pc.n_tok);
        return;
    }
    pc.k_off = bind_f32(be, &info[1], &kv, &pc.k_stride);
    pc.v_off = bind_f32(be, &info[2], &vv, &pc.v_stride);
    dispatch(be, VK_OP_ATTENTION, 0, variant, info, &pc, sizeof pc, pc.n_head, pc.n_tok);
}

/* ---- attention_rows ---------------------------------------------------------------------- */

/* Whether row i's cache takes its one new position: the ring holds what it sees. */
static bool row_fits(const al_attn_shape *s, int32_t pos, const al_tensor *kc,
                     const al_tensor *vc) {
    al_attn_shape one = *s;
    one.n_past = pos;
    one.n_tokens = 1;
    return pos >= 0 && vc->ne[1] == kc->ne[1] && ring_holds(&one, kc->ne[1]);
}

/* One dispatch of attention.comp's ROWS build: rows r0 .. r0 + nr - 1 (nr <= VK_SEQ),
 * rotated where half > 0 (rope's pairs per head); its KV build where kv (typed caches,
 * where typed (the caches' rows written and q and k rotated before: half is 0). */
static void attn_rows_dispatch(vk_backend *be, const al_tensor *q, const al_tensor *k,
                               const al_tensor *v, al_tensor *const *k_cache,
                               al_tensor *const *v_cache, const int32_t *pos,
                               const al_rope *rope, int half, const al_attn_shape *s,
                               al_tensor *out, int r0, int nr, bool typed) {
    const int variant = vk_attn_variant(&be->sh->pl.tune, s->head_dim);
    const uint64_t cs_bytes = (uint64_t)nr * (uint64_t)half * 2 * sizeof(float);
    if (!vk_begin(be, 1, 6 * VK_SEQ * sizeof(uint32_t) + cs_bytes)) return;
    vk_hazard(be, q->data, false);
    vk_hazard(be, k->data, false);
    vk_hazard(be, v->data, false);
    if (s->sinks) vk_hazard(be, s->sinks->data, false);
    for (int i = r0; i < r0 + nr; i++) { /* the KV build only reads them */
        vk_hazard(be, k_cache[i]->data, !typed);
        vk_hazard(be, v_cache[i]->data, !typed);
    }
    vk_hazard(be, out->data, true);
    VkDescriptorBufferInfo info[VK_ROWS_DESCRIPTORS];
    uint32_t tb[6 * VK_SEQ];
    for (int i = 0; i < VK_SEQ; i++) { /* slots past nr repeat row r0: never read */
        int j = r0 + (i < nr ? i : 0);
        uint32_t *e = &tb[6 * i];
        e[0] = (uint32_t)pos[j];
        e[1] = (uint32_t)k_cache[j]->ne[1];
        if (typed) {
            e[2] = bind_rows(be, &info[6 + i], k_cache[j], &e[3]);
            e[4] = bind_rows(be, &info[6 + VK_SEQ + i], v_cache[j], &e[5]);
        } else {
            e[2] = bind_f32(be, &info[6 + i], k_cache[j], &e[3]);
            e[4] = bind_f32(be, &info[6 + VK_SEQ + i], v_cache[j], &e[5]);
        }
    }
    vk_pc_attention_rows pc = {
        .n_head = (uint32_t)s->n_head, .n_head_kv = (uint32_t)s->n_head_kv,
        .head_dim = (uint32_t)s->head_dim, .n_tok = (uint32_t)nr,
        .scale = s->scale != 0 ? s->scale : 1.0f / sqrtf((float)s->head_dim),
        .window = (uint32_t)s->window};
    al_tensor qv = al_tensor_rows(q, r0, nr), kv = al_tensor_rows(k, r0, nr);
    al_tensor vv = al_tensor_rows(v, r0, nr), ov = al_tensor_rows(out, r0, nr);
    pc.q_off = bind_f32(be, &info[0], &qv, &pc.q_stride);
    pc.k_off = bind_f32(be, &info[1], &kv, &pc.k_stride);
    pc.v_off = bind_f32(be, &info[2], &vv, &pc.v_stride);
    pc.o_off = bind_f32(be, &info[3], &ov, &pc.o_stride);
    pc.has_sink = bind_sinks(be, info, s->sinks, &pc.s_off);
    const uint64_t t_bytes = (uint64_t)nr * 6 * sizeof(uint32_t);
    pc.t_off = bind(be, &info[5], be->s.upload, upload(be, tb, t_bytes), t_bytes) /
               (uint32_t)sizeof(uint32_t);
    if (half > 0) { /* the table of these rows' positions: shared by every layer */
        uint64_t cs_off = rope_table(be, 0, pos + r0, nr, rope);
        pc.cs_off = bind(be, &info[6 + 2 * VK_SEQ], be->s.upload, cs_off, cs_bytes) /
                    (uint32_t)sizeof(float);
        pc.rope_half = (uint32_t)half;
        pc.neox = rope->neox;
    } else {
        info[6 + 2 * VK_SEQ] = info[0]; /* a valid binding the shader skips */
    }
    if (typed) {
        vk_pc_attention_rows_kv pk = {.a = pc};
        kv_rotation(k_cache[r0], v_cache[r0], s->head_dim, &pk.kv);
        dispatch(be, VK_OP_ATTENTION_ROWS_KV, 0, variant, info, &pk, sizeof pk, pc.n_head,
                 (uint32_t)nr);
        return;
    }
    dispatch(be, VK_OP_ATTENTION_ROWS, 0, variant, info, &pc, sizeof pc, pc.n_head, (uint32_t)nr);
}

/* Whether the rows' caches are typed (kv_types), all of one kind: the KV build reads
 * them with one set of types and rotations. *same is false where they differ (the op
 * then declines, and backend_attention_rows takes them row by row). */
static bool rows_typed(al_tensor *const *kc, al_tensor *const *vc, int n, bool *same) {
    *same = true;
    for (int i = 1; i < n; i++)
        *same &= kc[i]->type == kc[0]->type && vc[i]->type == vc[0]->type &&
                 kc[i]->layout == kc[0]->layout && vc[i]->layout == vc[0]->layout;
    return kc[0]->type != AL_TYPE_F32 || vc[0]->type != AL_TYPE_F32;
}

/* attention.comp's ROWS build, VK_SEQ rows a dispatch: the shader rotates q and k and
 * writes each row's new key and value into its caches itself. Declines where fusion
 * is off (fuse=0, fuse_attn=0), the device has no room for the cache arrays, or a row
 * does not fit its cache (the plain op then reports it). */
bool vk_op_attention_rows(al_backend *base, al_tensor *q, al_tensor *k, const al_tensor *v,
                          al_tensor *const *k_cache, al_tensor *const *v_cache,
                          const int32_t *pos, const al_rope *rope, const al_attn_shape *s,
                          al_tensor *out) {
    vk_backend *be = (vk_backend *)base;
    const vk_pipelines *pl = &be->sh->pl;
    const int n = (int)q->ne[1];
    AL_ASSERT(s->n_head % s->n_head_kv == 0 && k->ne[1] >= n && v->ne[1] >= n);
    AL_ASSERT(!s->sinks || (s->sinks->type == AL_TYPE_F32 && s->sinks->ne[0] >= s->n_head));
    AL_ASSERT(!rope || rope->n_rot <= s->head_dim);
    if (!pl->tune.fuse || !pl->tune.fuse_attn || !pl->layout[VK_OP_ATTENTION_ROWS] ||
        s->head_dim > VK_ATTN_WIDE_HD ||
        ((uint32_t)s->head_dim > pl->tune.attn_max_hd &&
         vk_attn_shared(pl->tune.attn_rows_wg, VK_ATTN_WIDE_HD) > be->sh->d.caps.shared_bytes))
        return false;
    for (int i = 0; i < n; i++)
        if (!row_fits(s, pos[i], k_cache[i], v_cache[i])) return false;
    bool same;
    const bool kv = n > 0 && rows_typed(k_cache, v_cache, n, &same);
    if (kv && (!same || !pl->layout[VK_OP_ATTENTION_ROWS_KV])) return false;
    int half = rope ? rope->n_rot / 2 : 0;
    /* a value cache that is the key cache (latent attention) must take the rotated key:
     * rope before, so that the shader writes the same row to both */
    if (half > 0 && !kv && v_cache[0]->data == k_cache[0]->data &&
        v_cache[0]->offset == k_cache[0]->offset) {
        al_tensor kr = al_tensor_rows(k, 0, n);
        vk_op_rope_qk_rows(base, q, s->n_head, &kr, s->n_head_kv, s->head_dim, pos, rope);
        half = 0;
    }
    if (kv) { /* typed caches: rope, then each row's key and value converted into them */
        al_tensor kr = al_tensor_rows(k, 0, n);
        if (half > 0)
            vk_op_rope_qk_rows(base, q, s->n_head, &kr, s->n_head_kv, s->head_dim, pos, rope);
        half = 0;
        for (int i = 0; i < n; i++) {
            al_tensor ki = al_tensor_rows(k, i, 1), vi = al_tensor_rows(v, i, 1);
            write_ring(be, &ki, k_cache[i], pos[i], 1, s);
            write_ring(be, &vi, v_cache[i], pos[i], 1, s);
        }
    }
    for (int r0 = 0; r0 < n; r0 += VK_SEQ)
        attn_rows_dispatch(be, q, k, v, k_cache, v_cache, pos, rope, half, s, out, r0,
                           n - r0 < VK_SEQ ? n - r0 : VK_SEQ, kv);
    return true;
}
